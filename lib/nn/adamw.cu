/*
 * adamw.cu - AdamW on the fp32 master parameters with math.h's
 * gk_nn_adamw_elem (the CPU's arithmetic, step constants from
 * gk_nn_adamw_consts), then the bf16 working copy rounded from the new
 * master value (core/half.h, as gk_convert rounds).
 *
 * reference: llm.c llmc/adamw.cuh (master weights, in-kernel rounding).
 */
#include "nn/kernels.cuh"

template <typename T>
__global__ static void adamw(float *p, T *pw, const float *g, float gscale,
			     float *m, float *v, size_t n, gk_nn_adamw_k k,
			     float decay)
{
	GK_CUDA_FOR_EACH(i, n) {
		float pp = p[i], mm = m[i], vv = v[i];
		gk_nn_adamw_elem(&pp, g[i] * gscale, &mm, &vv, &k, decay);
		p[i] = pp;
		m[i] = mm;
		v[i] = vv;
		if (pw)
			pw[i] = stf<T>(pp);
	}
}

extern "C" int gk_nn_cu_adamw(float *p, void *pw, gk_dtype dt, const float *g,
			      float grad_scale, float *m, float *v, size_t n,
			      const gk_nn_adamw_k *k, float decay,
			      gk_cuda_stream s, gk_err *err)
{
	if (n == 0)
		return 0;
	WITH_T(dt, adamw<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0,
			      s>>>(p, (T *)pw, g, grad_scale, m, v, n, *k,
				   decay));
	return GK_CUDA_LAUNCHED("adamw", err);
}
