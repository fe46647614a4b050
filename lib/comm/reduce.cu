/*
 * reduce.cu - lib/comm's element math on the device: the same reduce.h
 * functions as the CPU loops in kernels.c, for device buffers (pairwise
 * reduction, and packing to and from the compressed wire formats).
 */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "comm/internal.h"
}
#include "comm/reduce.h"

static int grid_for(size_t n)
{
	size_t b = (n + 255) / 256;
	return b > 65535 ? 65535 : (int)(b ? b : 1);
}

#define FOR_EACH(i, n)                                                        \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
	     i += (size_t)gridDim.x * blockDim.x)

template <int RED>
__global__ void reduce_kernel(void *dst, const void *src, size_t n, gk_dtype dt)
{
	FOR_EACH(i, n) {
		switch (dt) {
		case GK_DT_F32:
			((float *)dst)[i] = gk_red_f32(RED, ((float *)dst)[i], ((const float *)src)[i]);
			break;
		case GK_DT_F64:
			((double *)dst)[i] = gk_red_f64(RED, ((double *)dst)[i], ((const double *)src)[i]);
			break;
		case GK_DT_I32:
			((int32_t *)dst)[i] = gk_red_i32(RED, ((int32_t *)dst)[i], ((const int32_t *)src)[i]);
			break;
		case GK_DT_BF16:
			((uint16_t *)dst)[i] = gk_red_bf16(RED, ((uint16_t *)dst)[i], ((const uint16_t *)src)[i]);
			break;
		default:
			((uint16_t *)dst)[i] = gk_red_f16(RED, ((uint16_t *)dst)[i], ((const uint16_t *)src)[i]);
			break;
		}
	}
}

static int launch_status(gk_err *err)
{
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return gk_errf(err, "comm: kernel launch: %s", cudaGetErrorString(e));
	return 0;
}

extern "C" int gk_comm_cuda_reduce(void *dst, const void *src, size_t n,
				   gk_dtype dt, gk_comm_op op, void *stream,
				   gk_err *err)
{
	cudaStream_t s = (cudaStream_t)stream;
	int g = grid_for(n);
	switch (op) {
	case GK_COMM_PROD: reduce_kernel<GK_RED_PROD><<<g, 256, 0, s>>>(dst, src, n, dt); break;
	case GK_COMM_MAX: reduce_kernel<GK_RED_MAX><<<g, 256, 0, s>>>(dst, src, n, dt); break;
	case GK_COMM_MIN: reduce_kernel<GK_RED_MIN><<<g, 256, 0, s>>>(dst, src, n, dt); break;
	default: reduce_kernel<GK_RED_SUM><<<g, 256, 0, s>>>(dst, src, n, dt); break;
	}
	return launch_status(err);
}

__global__ void pack16_kernel(uint16_t *w, const float *x, size_t n, int bf)
{
	FOR_EACH(i, n) w[i] = bf ? gk_f32_to_bf16(x[i]) : gk_f32_to_f16(x[i]);
}

__global__ void unpack16_kernel(float *d, const uint16_t *w, size_t n, int bf,
				int add)
{
	FOR_EACH(i, n)
	{
		float v = bf ? gk_bf16_to_f32(w[i]) : gk_f16_to_f32(w[i]);
		d[i] = add ? d[i] + v : v;
	}
}

/* One thread block per group of GK_COMM_INT8_GROUP (256) elements. */
__global__ void pack8_kernel(unsigned char *w, const float *x, size_t n)
{
	__shared__ float amax[256];
	size_t g = blockIdx.x, i = g * GK_COMM_INT8_GROUP + threadIdx.x;
	amax[threadIdx.x] = i < n ? fabsf(x[i]) : 0.0f;
	__syncthreads();
	for (int s = 128; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			amax[threadIdx.x] = fmaxf(amax[threadIdx.x], amax[threadIdx.x + s]);
		__syncthreads();
	}
	float sc = gk_i8_scale(amax[0]), inv = sc > 0 ? 1.0f / sc : 0.0f;
	unsigned char *gw = w + g * (4 + GK_COMM_INT8_GROUP);
	if (threadIdx.x == 0)
		memcpy(gw, &sc, 4);
	if (i < n)
		((int8_t *)(gw + 4))[threadIdx.x] = gk_i8_quant(x[i], inv);
}

__global__ void unpack8_kernel(float *d, const unsigned char *w, size_t n, int add)
{
	size_t g = blockIdx.x, i = g * GK_COMM_INT8_GROUP + threadIdx.x;
	const unsigned char *gw = w + g * (4 + GK_COMM_INT8_GROUP);
	float sc;
	memcpy(&sc, gw, 4);
	if (i < n) {
		float v = gk_i8_dequant(((const int8_t *)(gw + 4))[threadIdx.x], sc);
		d[i] = add ? d[i] + v : v;
	}
}

extern "C" int gk_comm_cuda_pack(void *wire, const float *x, size_t n,
				 gk_comm_compress cz, void *stream, gk_err *err)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (n == 0)
		return 0;
	if (cz == GK_COMM_COMPRESS_INT8)
		pack8_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((unsigned char *)wire, x, n);
	else
		pack16_kernel<<<grid_for(n), 256, 0, s>>>((uint16_t *)wire, x, n,
							  cz == GK_COMM_COMPRESS_BF16);
	return launch_status(err);
}

extern "C" int gk_comm_cuda_unpack(float *dst, const void *wire, size_t n,
				   gk_comm_compress cz, int add, void *stream,
				   gk_err *err)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (n == 0)
		return 0;
	if (cz == GK_COMM_COMPRESS_INT8)
		unpack8_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(dst, (const unsigned char *)wire, n, add);
	else
		unpack16_kernel<<<grid_for(n), 256, 0, s>>>(dst, (const uint16_t *)wire, n,
							    cz == GK_COMM_COMPRESS_BF16, add);
	return launch_status(err);
}
