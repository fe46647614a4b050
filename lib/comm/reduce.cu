/*
 * reduce.cu - lib/comm's element math on the device: the same reduce.h
 * functions as the CPU loops in kernels.c, for device buffers (pairwise
 * reduction, the final AVG division, and packing to and from the
 * compressed wire formats). Results are bit-identical to the CPU loops
 * (reduce.h says why); tests/unit/comm_cuda.c checks it on a GPU.
 */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "comm/internal.h"
}
#include "comm/reduce.h"
#include "cuda/kernel.cuh"

template <int RED>
__global__ void reduce_kernel(void *dst, const void *src, size_t n, gk_dtype dt)
{
	GK_CUDA_FOR_EACH(i, n) {
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

extern "C" int gk_comm_cuda_reduce(void *dst, const void *src, size_t n,
				   gk_dtype dt, gk_comm_op op, void *stream,
				   gk_err *err)
{
	cudaStream_t s = (cudaStream_t)stream;
	unsigned g = gk_cuda_grid(n, GK_CUDA_BLOCK);
	if (n == 0)
		return 0;
	switch (op) {
	case GK_COMM_PROD: reduce_kernel<GK_RED_PROD><<<g, GK_CUDA_BLOCK, 0, s>>>(dst, src, n, dt); break;
	case GK_COMM_MAX: reduce_kernel<GK_RED_MAX><<<g, GK_CUDA_BLOCK, 0, s>>>(dst, src, n, dt); break;
	case GK_COMM_MIN: reduce_kernel<GK_RED_MIN><<<g, GK_CUDA_BLOCK, 0, s>>>(dst, src, n, dt); break;
	default: reduce_kernel<GK_RED_SUM><<<g, GK_CUDA_BLOCK, 0, s>>>(dst, src, n, dt); break;
	}
	return GK_CUDA_LAUNCHED("reduce kernel launch", err);
}

/* AVG's one division at the end (comm.h), as gk_comm_avg_cpu does it. */
__global__ void avg_kernel(void *buf, size_t n, gk_dtype dt, int world)
{
	GK_CUDA_FOR_EACH(i, n) {
		switch (dt) {
		case GK_DT_F32: ((float *)buf)[i] = gk_avg_f32(((float *)buf)[i], world); break;
		case GK_DT_F64: ((double *)buf)[i] = gk_avg_f64(((double *)buf)[i], world); break;
		case GK_DT_I32: ((int32_t *)buf)[i] = gk_avg_i32(((int32_t *)buf)[i], world); break;
		case GK_DT_BF16: ((uint16_t *)buf)[i] = gk_avg_bf16(((uint16_t *)buf)[i], world); break;
		default: ((uint16_t *)buf)[i] = gk_avg_f16(((uint16_t *)buf)[i], world); break;
		}
	}
}

extern "C" int gk_comm_cuda_avg(void *buf, size_t n, gk_dtype dt, int world,
				void *stream, gk_err *err)
{
	if (n == 0 || world <= 1)
		return 0;
	avg_kernel<<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(
		buf, n, dt, world);
	return GK_CUDA_LAUNCHED("avg kernel launch", err);
}

/* err_out (may be NULL): what packing lost, x - unpacked, as gk_comm_pack. */
__global__ void pack16_kernel(uint16_t *w, const float *x, size_t n, int bf,
			      float *err_out)
{
	GK_CUDA_FOR_EACH(i, n) {
		w[i] = bf ? gk_f32_to_bf16(x[i]) : gk_f32_to_f16(x[i]);
		if (err_out)
			err_out[i] = gk_w16_resid(x[i], w[i], bf);
	}
}

__global__ void unpack16_kernel(float *d, const uint16_t *w, size_t n, int bf,
				int add)
{
	GK_CUDA_FOR_EACH(i, n)
		d[i] = add ? gk_w16_add(d[i], w[i], bf) : gk_w16_f32(w[i], bf);
}

/*
 * int8: one thread block of GK_COMM_INT8_GROUP (256) threads per group, looping
 * over groups grid-stride (there are more than 2^31 of them past 2^39
 * elements). Group g's bytes start at g*(4+256): every earlier group is
 * full. The block's max|x| is a tree of gk_i8_amax, which is associative
 * and commutative, so it equals the CPU's left-to-right loop.
 */
__global__ void pack8_kernel(unsigned char *w, const float *x, size_t n,
			     float *err_out)
{
	__shared__ float amax[GK_COMM_INT8_GROUP];
	size_t groups = (n + GK_COMM_INT8_GROUP - 1) / GK_COMM_INT8_GROUP;
	for (size_t g = blockIdx.x; g < groups; g += gridDim.x) {
		size_t i = g * GK_COMM_INT8_GROUP + threadIdx.x;
		amax[threadIdx.x] = i < n ? gk_i8_amax(0.0f, x[i]) : 0.0f;
		__syncthreads();
		for (int s = GK_COMM_INT8_GROUP / 2; s > 0; s >>= 1) {
			if ((int)threadIdx.x < s)
				amax[threadIdx.x] = gk_i8_amax(amax[threadIdx.x],
							       amax[threadIdx.x + s]);
			__syncthreads();
		}
		float sc = gk_i8_scale(amax[0]), inv = gk_i8_inv(sc);
		unsigned char *gw = w + g * (4 + GK_COMM_INT8_GROUP);
		if (threadIdx.x == 0)
			memcpy(gw, &sc, 4);
		if (i < n) {
			int8_t q = gk_i8_quant(x[i], inv);
			((int8_t *)(gw + 4))[threadIdx.x] = q;
			if (err_out)
				err_out[i] = gk_i8_resid(x[i], q, sc);
		}
		__syncthreads(); /* amax[0] is read above before the next group */
	}
}

__global__ void unpack8_kernel(float *d, const unsigned char *w, size_t n, int add)
{
	size_t groups = (n + GK_COMM_INT8_GROUP - 1) / GK_COMM_INT8_GROUP;
	for (size_t g = blockIdx.x; g < groups; g += gridDim.x) {
		size_t i = g * GK_COMM_INT8_GROUP + threadIdx.x;
		const unsigned char *gw = w + g * (4 + GK_COMM_INT8_GROUP);
		float sc;
		memcpy(&sc, gw, 4);
		if (i < n) {
			int8_t q = ((const int8_t *)(gw + 4))[threadIdx.x];
			d[i] = add ? gk_i8_dequant_add(d[i], q, sc) : gk_i8_dequant(q, sc);
		}
	}
}

extern "C" int gk_comm_cuda_pack(void *wire, const float *x, size_t n,
				 gk_comm_compress cz, float *err_out, void *stream,
				 gk_err *err)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (n == 0)
		return 0;
	if (cz == GK_COMM_COMPRESS_INT8)
		pack8_kernel<<<gk_cuda_grid(n, GK_COMM_INT8_GROUP), GK_COMM_INT8_GROUP, 0, s>>>(
			(unsigned char *)wire, x, n, err_out);
	else
		pack16_kernel<<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(
			(uint16_t *)wire, x, n, cz == GK_COMM_COMPRESS_BF16, err_out);
	return GK_CUDA_LAUNCHED("pack kernel launch", err);
}

extern "C" int gk_comm_cuda_unpack(float *dst, const void *wire, size_t n,
				   gk_comm_compress cz, int add, void *stream,
				   gk_err *err)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (n == 0)
		return 0;
	if (cz == GK_COMM_COMPRESS_INT8)
		unpack8_kernel<<<gk_cuda_grid(n, GK_COMM_INT8_GROUP), GK_COMM_INT8_GROUP, 0, s>>>(
			dst, (const unsigned char *)wire, n, add);
	else
		unpack16_kernel<<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(
			dst, (const uint16_t *)wire, n, cz == GK_COMM_COMPRESS_BF16, add);
	return GK_CUDA_LAUNCHED("unpack kernel launch", err);
}

/* Error feedback: x[i] += residual[i], residual[i] = 0, as comm_mpi.c does. */
__global__ void absorb_kernel(float *x, float *residual, size_t n)
{
	GK_CUDA_FOR_EACH(i, n) {
		x[i] = GK_FADD(x[i], residual[i]);
		residual[i] = 0.0f;
	}
}

extern "C" int gk_comm_cuda_absorb(float *x, float *residual, size_t n,
				   void *stream, gk_err *err)
{
	if (n == 0)
		return 0;
	absorb_kernel<<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(
		x, residual, n);
	return GK_CUDA_LAUNCHED("error feedback kernel launch", err);
}
