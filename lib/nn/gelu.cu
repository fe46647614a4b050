/*
 * gelu.cu - gelu_new (tanh) forward and backward, element by element
 * with math.h's gk_nn_gelu and gk_nn_gelu_grad (the CPU's functions).
 */
#include "nn/kernels.cuh"

template <typename T>
__global__ static void gelu_fwd(T *out, const T *inp, size_t n)
{
	GK_CUDA_FOR_EACH(i, n)
		out[i] = stf<T>(gk_nn_gelu(ldf(inp[i])));
}

template <typename T>
__global__ static void gelu_bwd(T *dinp, const T *inp, size_t n)
{
	GK_CUDA_FOR_EACH(i, n)
		dinp[i] = stf<T>(ldf(dinp[i]) * gk_nn_gelu_grad(ldf(inp[i])));
}

extern "C" int gk_nn_cu_gelu_fwd(void *out, const void *inp, gk_dtype dt,
				 size_t n, gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, gelu_fwd<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK,
				 0, s>>>((T *)out, (const T *)inp, n));
	return GK_CUDA_LAUNCHED("gelu forward", err);
}

extern "C" int gk_nn_cu_gelu_bwd(void *dinp, const void *inp, gk_dtype dt,
				 size_t n, gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, gelu_bwd<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK,
				 0, s>>>((T *)dinp, (const T *)inp, n));
	return GK_CUDA_LAUNCHED("gelu backward", err);
}
