/*
 * colsum.cu - column sums of a (N,OC) gradient into an f32 vector: the
 * bias gradients. Two passes and no atomics: chunk k of rows
 * (gk_nn_part over gk_nn_colsum_chunks(N) chunks) sums into its own
 * scratch row, then colsum_finish adds the chunks in order. The first
 * pass reads 16 bytes a load where the columns allow (colsum_part_vec).
 */
#include "nn/kernels.cuh"

/* grid (columns / GK_NN_COLSUM_COLS, chunks): one thread per column */
template <typename T>
__global__ static void colsum_part(float *part, const T *dout, int N, int OC,
				   int chunks)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= OC)
		return;
	uint64_t lo, hi;
	gk_nn_part((uint64_t)N, (uint64_t)chunks, blockIdx.y, &lo, &hi);
	float s = 0.0f;
	for (uint64_t i = lo; i < hi; i++)
		s += ldf(dout[i * OC + c]);
	part[(size_t)blockIdx.y * OC + c] = s;
}

/* packed (vec16 at launch: OC a multiple of W, pointers 16-byte
 * aligned): W columns a thread, a 16-byte load a row; each column's sum
 * in the same order, so the scalar kernel's bits */
template <typename T>
__global__ static void colsum_part_vec(float *part, const T *dout, int N,
				       int OC, int chunks)
{
	enum { W = Packed128<T>::size };
	int c = (blockIdx.x * blockDim.x + threadIdx.x) * W;
	if (c >= OC)
		return;
	uint64_t lo, hi;
	gk_nn_part((uint64_t)N, (uint64_t)chunks, blockIdx.y, &lo, &hi);
	float s[W] = {0};
	for (uint64_t i = lo; i < hi; i++) {
		Packed128<T> d = load128cs(dout + i * OC + c);
		for (int k = 0; k < W; k++)
			s[k] += d.f(k);
	}
	for (int h = 0; h < W; h += 4) {
		Packed128<float> o;
		for (int k = 0; k < 4; k++)
			o.v[k] = s[h + k];
		store128(part + (size_t)blockIdx.y * OC + c + h, o);
	}
}

extern "C" int gk_nn_cu_colsum(float *db, float *scratch, const void *dout,
			       gk_dtype dt, int N, int OC, gk_cuda_stream s,
			       gk_err *err)
{
	unsigned chunks = gk_nn_colsum_chunks((uint64_t)N);
	dim3 grid((OC + GK_NN_COLSUM_COLS - 1) / GK_NN_COLSUM_COLS, chunks);
	WITH_T(dt, if (vec16<T>((uint64_t)OC, scratch, dout)) {
		grid.x = (OC / Packed128<T>::size + GK_NN_COLSUM_COLS - 1) /
			 GK_NN_COLSUM_COLS;
		colsum_part_vec<T><<<grid, GK_NN_COLSUM_COLS, 0, s>>>(
			scratch, (const T *)dout, N, OC, (int)chunks);
	} else colsum_part<T><<<grid, GK_NN_COLSUM_COLS, 0, s>>>(
			   scratch, (const T *)dout, N, OC, (int)chunks));
	colsum_finish<<<(OC + GK_CUDA_BLOCK - 1) / GK_CUDA_BLOCK, GK_CUDA_BLOCK,
			0, s>>>(db, scratch, (int)chunks, OC, OC);
	return GK_CUDA_LAUNCHED("bias gradient", err);
}

extern "C" int gk_nn_cu_colsum_add(float *db, const float *v, int OC, gk_cuda_stream s,
				   gk_err *err)
{
	colsum_finish<<<(OC + GK_CUDA_BLOCK - 1) / GK_CUDA_BLOCK, GK_CUDA_BLOCK, 0, s>>>(
		db, v, 1, OC, OC);
	return GK_CUDA_LAUNCHED("bias gradient", err);
}
