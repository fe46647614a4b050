/*
 * device_cuda.c - device discovery in a CUDA build.
 */
#include <cuda_runtime_api.h>

#include "cuda/cuda.h"

int gk_cuda_built(void)
{
	return 1;
}

int gk_cuda_device_count(const char **why)
{
	int n = 0;
	/*
	 * With static cudart this is the first call that looks for the driver
	 * (libcuda.so.1, found at run time): no driver is an error code here,
	 * not a failure to start.
	 */
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		if (why)
			*why = e == cudaErrorNoDevice ? "no CUDA device"
			     : e == cudaErrorInsufficientDriver ? "no CUDA driver"
			     : cudaGetErrorString(e);
		return 0;
	}
	if (n == 0 && why)
		*why = "no CUDA device";
	return n;
}
