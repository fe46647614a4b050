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
	sumsq_part<<<GK_NN_SUM_BLOCKS, NORM_THREADS, 0, s>>>(partial, g, n);
	sumsq_finish<<<1, NORM_THREADS, 0, s>>>(out, partial, GK_NN_SUM_BLOCKS);
	return GK_CUDA_LAUNCHED("gradient norm", err);
}
