/*
 * convert.cu - dtype conversion kernels (F32 <-> F16/BF16) over the same
 * __host__ __device__ functions the CPU path uses (core/half.h).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/half.h"
#include "cuda/kernel.cuh"

/* One element per thread, grid-stride so any n fits any grid. */
template <typename Op>
__global__ void convert_kernel(void *dst, const void *src, size_t n, Op op)
{
	GK_CUDA_FOR_EACH(i, n)
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
static void launch(void *dst, const void *src, size_t n, cudaStream_t stream)
{
	convert_kernel<<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, stream>>>(
		dst, src, n, Op());
}

extern "C" int gk_cuda_convert(void *dst, gk_dtype dst_dt, const void *src,
			       gk_dtype src_dt, size_t n, gk_cuda_stream s,
			       gk_err *err)
{
	if (n == 0)
		return 0;
	if (src_dt == GK_DT_F32 && dst_dt == GK_DT_BF16)
		launch<f32_to_bf16>(dst, src, n, s);
	else if (src_dt == GK_DT_F32 && dst_dt == GK_DT_F16)
		launch<f32_to_f16>(dst, src, n, s);
	else if (src_dt == GK_DT_BF16 && dst_dt == GK_DT_F32)
		launch<bf16_to_f32>(dst, src, n, s);
	else if (src_dt == GK_DT_F16 && dst_dt == GK_DT_F32)
		launch<f16_to_f32>(dst, src, n, s);
	else
		return gk_errf(err, "convert %s to %s on the GPU: not supported",
			       gk_dtype_name(src_dt), gk_dtype_name(dst_dt));
	return GK_CUDA_LAUNCHED("convert kernel launch", err);
}
