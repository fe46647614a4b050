/*
 * convert.cu - dtype conversion kernels (F32 <-> F16/BF16) over the same
 * __host__ __device__ functions the CPU path uses (core/half.h).
 */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "cuda/cuda.h"
}
#include "core/half.h"

/* One element per thread, grid-stride so any n fits any grid. */
template <typename Op>
__global__ void convert_kernel(void *dst, const void *src, size_t n, Op op)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		op(dst, src, i);
}

struct f32_to_bf16 {
	__device__ void operator()(void *d, const void *s, size_t i) const
	{
		((uint16_t *)d)[i] = gk_f32_to_bf16(((const float *)s)[i]);
	}
};
struct f32_to_f16 {
	__device__ void operator()(void *d, const void *s, size_t i) const
	{
		((uint16_t *)d)[i] = gk_f32_to_f16(((const float *)s)[i]);
	}
};
struct bf16_to_f32 {
	__device__ void operator()(void *d, const void *s, size_t i) const
	{
		((float *)d)[i] = gk_bf16_to_f32(((const uint16_t *)s)[i]);
	}
};
struct f16_to_f32 {
	__device__ void operator()(void *d, const void *s, size_t i) const
	{
		((float *)d)[i] = gk_f16_to_f32(((const uint16_t *)s)[i]);
	}
};

template <typename Op>
static cudaError_t launch(void *dst, const void *src, size_t n,
			  cudaStream_t stream)
{
	convert_kernel<<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, stream>>>(
		dst, src, n, Op());
	return cudaGetLastError();
}

extern "C" int gk_cuda_convert(void *dst, gk_dtype dst_dt, const void *src,
			       gk_dtype src_dt, size_t n, gk_cuda_stream s,
			       gk_err *err)
{
	cudaError_t e;

	if (n == 0)
		return 0;
	if (src_dt == GK_DT_F32 && dst_dt == GK_DT_BF16)
		e = launch<f32_to_bf16>(dst, src, n, s);
	else if (src_dt == GK_DT_F32 && dst_dt == GK_DT_F16)
		e = launch<f32_to_f16>(dst, src, n, s);
	else if (src_dt == GK_DT_BF16 && dst_dt == GK_DT_F32)
		e = launch<bf16_to_f32>(dst, src, n, s);
	else if (src_dt == GK_DT_F16 && dst_dt == GK_DT_F32)
		e = launch<f16_to_f32>(dst, src, n, s);
	else
		return gk_errf(err, "convert %s to %s on the GPU: not supported",
			       gk_dtype_name(src_dt), gk_dtype_name(dst_dt));
	return gk_cuda_check_at(GK_CUDA_API_RUNTIME, e, "convert kernel launch",
				__FILE__, __LINE__, err);
}
