/*
 * kernel.cuh - what the .cu files of every module share (not installed;
 * CUDA C++ only): the grid-stride loop that cuda.h's launch geometry
 * assumes, and the check after a launch. lib/nn, lib/comm and lib/cuda
 * include it, so a kernel anywhere in libgpukit indexes and reports a
 * failed launch the same way.
 */
#ifndef GK_CUDA_KERNEL_CUH
#define GK_CUDA_KERNEL_CUH

#include <cuda_runtime.h>
#include <stddef.h>

extern "C" {
#include "cuda/cuda.h"
}

/*
 * Grid-stride loop over n elements with a 64-bit index, so any n fits any
 * grid (gk_cuda_grid caps the grid at GK_CUDA_MAX_GRID blocks):
 *
 *   GK_CUDA_FOR_EACH(i, n)
 *           y[i] = f(x[i]);
 */
#define GK_CUDA_FOR_EACH(i, n)                                               \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;       \
	     i < (n); i += (size_t)gridDim.x * blockDim.x)

/*
 * After a launch: 0, or -1 with "FILE:LINE: what: why" in err when the
 * launch failed (a bad configuration, no device). Errors of the kernel
 * itself come later, from the next synchronising call. what names the
 * operation ("adamw", "reduce kernel launch"):
 *
 *   kernel<<<grid, block, 0, s>>>(...);
 *   return GK_CUDA_LAUNCHED("adamw", err);
 */
static inline int gk_cuda_launched_at(const char *what, const char *file,
				      int line, gk_err *err)
{
	return gk_cuda_check_at(GK_CUDA_API_RUNTIME, (int)cudaGetLastError(),
				what, file, line, err);
}
#define GK_CUDA_LAUNCHED(what, err)                                          \
	gk_cuda_launched_at((what), __FILE__, __LINE__, (err))

#endif
