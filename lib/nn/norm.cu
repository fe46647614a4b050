/*
 * norm.cu - sum of squares of the gradients for the global norm, in two
 * deterministic passes: block b of GK_NN_SUM_BLOCKS sums its contiguous
 * range (gk_nn_part) in double, threads strided and then a fixed tree;
 * one block adds the partials the same way. No atomics, so the norm (and
 * the clipping it drives) is the same bits on every run.
 */
#include "nn/kernels.cuh"

#define NORM_THREADS 256

__global__ static void sumsq_part(double *partial, const float *g, size_t n)
{
	__shared__ double sh[NORM_THREADS];
	uint64_t lo, hi;
	gk_nn_part(n, gridDim.x, blockIdx.x, &lo, &hi);
	double a = 0.0;
	for (uint64_t i = lo + threadIdx.x; i < hi; i += NORM_THREADS)
		a += (double)g[i] * g[i];
	a = block_reduce<NORM_THREADS, double>(a, sh, false);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = a;
}

/* packed (g 16-byte aligned, checked at launch): block b sums its range
 * of the n / 4 float4s, 16 bytes a load streamed past L1 (each gradient
 * is read once), and the last block's thread 0 the n % 4 floats after
 * them; another order of additions than sumsq_part's (rounding only),
 * the same on every run */
__global__ static void sumsq_part_vec(double *partial, const float *g, size_t n)
{
	__shared__ double sh[NORM_THREADS];
	uint64_t lo, hi, n4 = n / 4;
	gk_nn_part(n4, gridDim.x, blockIdx.x, &lo, &hi);
	double a = 0.0;
	for (uint64_t i = lo + threadIdx.x; i < hi; i += NORM_THREADS) {
		Packed128<float> q = load128cs(g + 4 * i);
		for (int k = 0; k < 4; k++)
			a += (double)q.v[k] * q.v[k];
	}
	if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0)
		for (uint64_t i = 4 * n4; i < n; i++)
			a += (double)g[i] * g[i];
	a = block_reduce<NORM_THREADS, double>(a, sh, false);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = a;
}

__global__ static void sumsq_finish(double *out, const double *partial,
				    int parts)
{
	__shared__ double sh[NORM_THREADS];
	double a = 0.0;
	for (int i = threadIdx.x; i < parts; i += NORM_THREADS)
		a += partial[i];
	a = block_reduce<NORM_THREADS, double>(a, sh, false);
	if (threadIdx.x == 0)
		*out = a;
}

extern "C" int gk_nn_cu_sumsq(double *out, double *partial, const float *g,
			      size_t n, gk_cuda_stream s, gk_err *err)
{
	/* packed where g is 16-byte aligned, else one float a load */
	if ((uintptr_t)g % 16 == 0)
		sumsq_part_vec<<<GK_NN_SUM_BLOCKS, NORM_THREADS, 0, s>>>(partial, g, n);
	else
		sumsq_part<<<GK_NN_SUM_BLOCKS, NORM_THREADS, 0, s>>>(partial, g, n);
	sumsq_finish<<<1, NORM_THREADS, 0, s>>>(out, partial, GK_NN_SUM_BLOCKS);
	return GK_CUDA_LAUNCHED("gradient norm", err);
}
