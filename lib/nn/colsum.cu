/*
 * colsum.cu - column sums of a (N,OC) gradient into an f32 vector: the
 * bias gradients. Two passes and no atomics: chunk k of rows
 * (gk_nn_part over gk_nn_colsum_chunks(N) chunks) sums into its own
 * scratch row, then colsum_finish adds the chunks in order.
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

extern "C" int gk_nn_cu_colsum(float *db, float *scratch, const void *dout,
			       gk_dtype dt, int N, int OC, gk_cuda_stream s,
			       gk_err *err)
{
	unsigned chunks = gk_nn_colsum_chunks((uint64_t)N);
	dim3 grid((OC + GK_NN_COLSUM_COLS - 1) / GK_NN_COLSUM_COLS, chunks);
	WITH_T(dt, colsum_part<T><<<grid, GK_NN_COLSUM_COLS, 0, s>>>(
			   scratch, (const T *)dout, N, OC, (int)chunks));
	colsum_finish<<<(OC + GK_CUDA_BLOCK - 1) / GK_CUDA_BLOCK, GK_CUDA_BLOCK,
			0, s>>>(db, scratch, (int)chunks, OC, OC);
	return GK_CUDA_LAUNCHED("bias gradient", err);
}
