/*
 * encoder.cu - token + position embedding, forward and a deterministic
 * backward (no atomics: the tokens are bucketed on the host,
 * gk_nn_token_buckets, and each distinct token's row is owned by one
 * block).
 *
 * reference: llm.c train_gpt2.c encoder_forward/encoder_backward.
 */
#include "nn/kernels.cuh"

/* out (N,C) = wte[tok[i]] + wpe[i % T] */
template <typename T>
__global__ static void encoder_fwd(T *out, const int32_t *tok, const T *wte,
				   const T *wpe, size_t NC, int T_, int C)
{
	GK_CUDA_FOR_EACH(x, NC) {
		size_t i = x / C;
		int c = (int)(x % C), t = (int)(i % T_);
		out[x] = stf<T>(ldf(wte[(size_t)tok[i] * C + c]) +
				ldf(wpe[(size_t)t * C + c]));
	}
}

/* one block per distinct token: dwte[uniq[j]] += its positions' rows, in
 * ascending position order */
template <typename T>
__global__ static void encoder_bwd_wte(float *dwte, const T *dout,
				       const int32_t *uniq,
				       const int32_t *start,
				       const int32_t *pos, int C)
{
	int j = blockIdx.x;
	int q0 = start[j], q1 = start[j + 1];
	float *row = dwte + (size_t)uniq[j] * C;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float s = 0.0f;
		for (int q = q0; q < q1; q++)
			s += ldf(dout[(size_t)pos[q] * C + c]);
		row[c] += s;
	}
}

/* one thread per (t, c): dwpe[t][c] += sum over b in order */
template <typename T>
__global__ static void encoder_bwd_wpe(float *dwpe, const T *dout, int B,
				       int T_, int C)
{
	size_t TC = (size_t)T_ * C;
	GK_CUDA_FOR_EACH(x, TC) {
		float s = 0.0f;
		for (int b = 0; b < B; b++)
			s += ldf(dout[(size_t)b * TC + x]);
		dwpe[x] += s;
	}
}

extern "C" int gk_nn_cu_encoder_fwd(void *out, const int32_t *tok,
				    const void *wte, const void *wpe,
				    gk_dtype dt, int B, int T_, int C,
				    gk_cuda_stream s, gk_err *err)
{
	size_t n = (size_t)B * T_ * C;
	WITH_T(dt, encoder_fwd<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK),
				    GK_CUDA_BLOCK, 0, s>>>(
			   (T *)out, tok, (const T *)wte, (const T *)wpe, n,
			   T_, C));
	return GK_CUDA_LAUNCHED("encoder forward", err);
}

extern "C" int gk_nn_cu_encoder_bwd(float *dwte, float *dwpe,
				    const void *dout, gk_dtype dt,
				    const int32_t *uniq, const int32_t *start,
				    const int32_t *pos, int nb, int B, int T_,
				    int C, gk_cuda_stream s, gk_err *err)
{
	size_t tc = (size_t)T_ * C;
	WITH_T(dt, if (nb > 0) encoder_bwd_wte<T><<<nb, GK_CUDA_BLOCK, 0, s>>>(
			   dwte, (const T *)dout, uniq, start, pos, C);
	       encoder_bwd_wpe<T><<<gk_cuda_grid(tc, GK_CUDA_BLOCK),
				    GK_CUDA_BLOCK, 0, s>>>(dwpe, (const T *)dout,
							   B, T_, C));
	return GK_CUDA_LAUNCHED("encoder backward", err);
}
