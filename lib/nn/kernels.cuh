/*
 * kernels.cuh - what the kernel files of lib/nn share: loads and stores
 * of the activation type (bf16 through core/half.h, so a kernel rounds
 * exactly as gk_convert and gk_cuda_convert do), warp and block sums in
 * a fixed order, 16-byte packed loads and stores (Packed128), and the
 * row loop. The grid-stride loop and the launch
 * check are lib/cuda's (cuda/kernel.cuh), as every module's kernels use.
 */
#ifndef GK_NN_KERNELS_CUH
#define GK_NN_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

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
 * Packed128<T>: 16 bytes of T, 4 floats or 8 bf16, moved in one load or
 * store (reference: llm.c llmc/cuda_utils.cuh, Packed128 and load128).
 * The memory-bound kernels read and write their rows this way where the
 * row length is a multiple of Packed128<T>::size and every pointer is
 * 16-byte aligned (vec16, checked at launch); otherwise they run their
 * scalar loop, the same arithmetic one element at a time. The math on
 * each element stays math.h's, in float, so a packed kernel gives the
 * scalar kernel's bits wherever its order of additions is the same.
 *
 * Every 128-bit access goes through a cache-hint intrinsic, which the
 * CPU emulation of CUDA checks for alignment (a misaligned vector access
 * is a fault on a GPU):
 *   load128    __ldg   read-only for the whole kernel and read again
 *                      (weights shared by the rows)
 *   load128cs  __ldcs  streamed: read once (activations, gradients)
 *   load128cg  __ldcg  through L2 only: what the kernel also writes
 *   store128   __stcg  written for a later kernel to read
 *   store128cs __stcs  streamed: written once, not read again soon
 */
template <typename T> struct alignas(16) Packed128 {
	enum { size = 16 / sizeof(T) };
	T v[size];
	__device__ __forceinline__ float f(int k) const
	{
		return ldf(v[k]);
	}
	__device__ __forceinline__ void set(int k, float x)
	{
		v[k] = stf<T>(x);
	}
};

template <typename T> __device__ __forceinline__ Packed128<T> pk_from(int4 q)
{
	Packed128<T> r;
	memcpy(&r, &q, 16);
	return r;
}
template <typename T> __device__ __forceinline__ int4 pk_bits(const Packed128<T> &p)
{
	int4 q;
	memcpy(&q, &p, 16);
	return q;
}
template <typename T> __device__ __forceinline__ Packed128<T> load128(const T *p)
{
	return pk_from<T>(__ldg((const int4 *)p));
}
template <typename T> __device__ __forceinline__ Packed128<T> load128cs(const T *p)
{
	return pk_from<T>(__ldcs((const int4 *)p));
}
template <typename T> __device__ __forceinline__ Packed128<T> load128cg(const T *p)
{
	return pk_from<T>(__ldcg((const int4 *)p));
}
template <typename T> __device__ __forceinline__ void store128(T *p, const Packed128<T> &v)
{
	__stcg((int4 *)p, pk_bits(v));
}
template <typename T> __device__ __forceinline__ void store128cs(T *p, const Packed128<T> &v)
{
	__stcs((int4 *)p, pk_bits(v));
}

/* Whether a kernel over rows of n elements of T may take the packed
 * path: n a multiple of Packed128<T>::size and every pointer (nullptr
 * allowed) 16-byte aligned. On the host, at launch. */
template <typename T> static inline bool vec16_ptrs()
{
	return true;
}
template <typename T, typename P, typename... R>
static inline bool vec16_ptrs(const P *p, const R *...r)
{
	return (uintptr_t)p % 16 == 0 && vec16_ptrs<T>(r...);
}
template <typename T, typename... P> static inline bool vec16(uint64_t n, const P *...p)
{
	return n % Packed128<T>::size == 0 && vec16_ptrs<T>(p...);
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
