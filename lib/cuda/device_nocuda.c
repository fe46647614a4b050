/*
 * device_nocuda.c - the CUDA entry points in a build without CUDA.
 */
#include "cuda/cuda.h"

int gk_cuda_built(void)
{
	return 0;
}

int gk_cuda_device_count(const char **why)
{
	if (why)
		*why = "built without CUDA";
	return 0;
}

int gk_cuda_convert(void *dst, gk_dtype dst_dt, const void *src,
		    gk_dtype src_dt, size_t n, void *stream, gk_err *err)
{
	return gk_errf(err, "convert on the GPU: built without CUDA");
}
