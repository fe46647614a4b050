/*
 * adamw.cu - AdamW on the fp32 master parameters with math.h's
 * gk_nn_adamw_elem (the CPU's arithmetic, step constants from
 * gk_nn_adamw_consts), then the bf16 working copy rounded from the new
 * master value (core/half.h, as gk_convert rounds). 16 bytes a load and
 * store where n and the pointers allow (adamw_vec), else one element.
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

/*
 * packed (vec16 at launch: n a multiple of W = Packed128<T>::size, every
 * pointer 16-byte aligned): W elements a thread, p, m, v and g in
 * 16-byte loads and stores that bypass L1 (each is read and written once
 * a step), pw in one 16-byte store; each element the same
 * gk_nn_adamw_elem call, so the scalar kernel's bits
 */
template <typename T>
__global__ static void adamw_vec(float *p, T *pw, const float *g, float gscale,
				 float *m, float *v, size_t n, gk_nn_adamw_k k,
				 float decay)
{
	enum { W = Packed128<T>::size };
	GK_CUDA_FOR_EACH(y, n / W) {
		size_t i = y * W;
		Packed128<T> o;
		for (int h = 0; h < W; h += 4) {
			Packed128<float> pp = load128cs(p + i + h),
					 mm = load128cs(m + i + h),
					 vv = load128cs(v + i + h),
					 gg = load128cs(g + i + h);
			for (int e = 0; e < 4; e++) {
				gk_nn_adamw_elem(&pp.v[e], gg.v[e] * gscale, &mm.v[e],
						 &vv.v[e], &k, decay);
				o.set(h + e, pp.v[e]);
			}
			store128cs(p + i + h, pp);
			store128cs(m + i + h, mm);
			store128cs(v + i + h, vv);
		}
		if (pw)
			store128(pw + i, o);
	}
}

extern "C" int gk_nn_cu_adamw(float *p, void *pw, gk_dtype dt, const float *g,
			      float grad_scale, float *m, float *v, size_t n,
			      const gk_nn_adamw_k *k, float decay,
			      gk_cuda_stream s, gk_err *err)
{
	if (n == 0)
		return 0;
	/* packed where vec16 allows, else one element a thread */
	WITH_T(dt, if (vec16<T>(n, p, (const T *)pw, g, m, v))
			   adamw_vec<T><<<gk_cuda_grid(n / Packed128<T>::size,
						       GK_CUDA_BLOCK),
					  GK_CUDA_BLOCK, 0, s>>>(
				   p, (T *)pw, g, grad_scale, m, v, n, *k, decay);
	       else adamw<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0,
			      s>>>(p, (T *)pw, g, grad_scale, m, v, n, *k,
				   decay));
	return GK_CUDA_LAUNCHED("adamw", err);
}
