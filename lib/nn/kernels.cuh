/*
 * kernels.cuh - what the kernel files of lib/nn share: loads and stores
 * of the activation type (bf16 through core/half.h, so a kernel rounds
 * exactly as gk_convert and gk_cuda_convert do), warp and block sums in
 * a fixed order, and the row loop. The grid-stride loop and the launch
 * check are lib/cuda's (cuda/kernel.cuh), as every module's kernels use.
 */
#ifndef GK_NN_KERNELS_CUH
#define GK_NN_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/half.h"
#include "cuda/kernel.cuh"
#include "nn/math.h"
extern "C" {
#include "nn/cuda_internal.h"
}

/* bf16 is stored as its bits; arithmetic is always in float */
__device__ __forceinline__ float ldf(float x)
{
	return x;
}
__device__ __forceinline__ float ldf(uint16_t x)
{
	return gk_bf16_to_f32(x);
}
template <typename T> __device__ __forceinline__ T stf(float x);
template <> __device__ __forceinline__ float stf<float>(float x)
{
	return x;
}
template <> __device__ __forceinline__ uint16_t stf<uint16_t>(float x)
{
	return gk_f32_to_bf16(x);
}

/*
 * Butterfly sums and maxima: every lane ends with the same value, and
 * the order of the additions is fixed by the lane numbers, so the result
 * is the same bits on every run.
 */
__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Tree over a block of NT threads (a power of two) through sh[NT]; the
 * result is returned to every thread. */
template <int NT, typename A>
__device__ __forceinline__ A block_reduce(A v, A *sh, bool is_max)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int w = NT / 2; w > 0; w >>= 1) {
		if ((int)threadIdx.x < w) {
			A a = sh[threadIdx.x], b = sh[threadIdx.x + w];
			sh[threadIdx.x] = is_max ? (a > b ? a : b) : a + b;
		}
		__syncthreads();
	}
	A r = sh[0];
	__syncthreads();
	return r;
}

/* out[c] += sum over k of part[k*stride + c], k in order, for c < n: the
 * second pass of the column sums. */
__global__ static void colsum_finish(float *out, const float *part, int chunks,
				     int stride, int n)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= n)
		return;
	float s = 0.0f;
	for (int k = 0; k < chunks; k++)
		s += part[(size_t)k * stride + c];
	out[c] += s;
}

/* Run the statements after dt with T the storage type of dt. */
#define WITH_T(dt, ...)                                                      \
	do {                                                                 \
		if ((dt) == GK_DT_BF16) {                                    \
			typedef uint16_t T;                                  \
			__VA_ARGS__;                                         \
		} else {                                                     \
			typedef float T;                                     \
			__VA_ARGS__;                                         \
		}                                                            \
	} while (0)

/* One warp per row, grid-stride over rows. */
#define FOR_ROWS(r, rows)                                                    \
	for (uint64_t r = blockIdx.x * (uint64_t)(blockDim.x / 32) +         \
			  threadIdx.x / 32;                                  \
	     r < (rows); r += (uint64_t)gridDim.x * (blockDim.x / 32))

#define ROW_THREADS (32 * GK_NN_ROW_WARPS)

#endif
