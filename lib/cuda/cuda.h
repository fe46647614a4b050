/*
 * cuda.h - the CUDA side of libgpukit (prefix gk_cuda_).
 *
 * Every function exists in every build. Without CUDA (no nvcc at build
 * time, or CUDA=0) they report "built without CUDA"; with CUDA but no
 * driver or device at run time they report that. Nothing here prints.
 * Kernel math lives in __host__ __device__ functions (core/half.h) that the
 * CPU path runs too, so the unit tests check it without a GPU.
 */
#ifndef GK_CUDA_H
#define GK_CUDA_H

#include "core/core.h"

/*
 * Number of usable CUDA devices: 0 when built without CUDA, when there is
 * no driver, or no device. why (may be NULL) gets the reason for 0.
 */
int gk_cuda_device_count(const char **why);
/* 1 when this build has CUDA code in it. */
int gk_cuda_built(void);

/*
 * Convert n elements between F32, F16 and BF16 in device memory, on the
 * given stream (a cudaStream_t, NULL for the default), with the same
 * rounding as gk_convert. Asynchronous; errors from the launch only.
 */
int gk_cuda_convert(void *dst, gk_dtype dst_dt, const void *src,
		    gk_dtype src_dt, size_t n, void *stream, gk_err *err);

#endif
