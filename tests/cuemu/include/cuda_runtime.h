/*
 * cuda_runtime.h - what a .cu file of libgpukit sees when it is compiled
 * as host C++ for the CPU emulation of CUDA (tests/cuemu): the toolkit's
 * own header for the types and the runtime API (implemented by
 * libcuemu.so), then the device side that nvcc would supply (thread and
 * block indices, barriers, warp shuffles, the rounding intrinsics, the
 * launch that `k<<<grid, block>>>(args)` is rewritten into). Found first
 * on the include path of the emulated build only.
 */
#ifndef CUEMU_CUDA_RUNTIME_H
#define CUEMU_CUDA_RUNTIME_H

#include_next <cuda_runtime.h>

#ifdef __cplusplus
#include "../cuemu.h"
#endif

#endif
