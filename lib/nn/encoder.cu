/*
 * encoder.cu - token + position embedding, forward and a deterministic
 * backward (no atomics: the tokens are bucketed on the host,
 * gk_nn_token_buckets, and each distinct token's row is owned by one
 * block).
 *
 * reference: llm.c train_gpt2.c encoder_forward/encoder_backward.
 */
#include "nn/kernels.cuh"

/* out (N,C) = wte[tok[i]] + wpe[i % T]; scalar: one element a thread */
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

/* packed (vec16: C a multiple of W, pointers 16-byte aligned): W
 * consecutive elements of one row a thread, the same additions */
template <typename T>
__global__ static void encoder_fwd_vec(T *out, const int32_t *tok,
				       const T *wte, const T *wpe, size_t NC,
				       int T_, int C)
{
	enum { W = Packed128<T>::size };
	GK_CUDA_FOR_EACH(y, NC / W) {
		size_t x = y * W, i = x / C;
		int c = (int)(x % C), t = (int)(i % T_);
		Packed128<T> e = load128(wte + (size_t)tok[i] * C + c);
		Packed128<T> p = load128(wpe + (size_t)t * C + c);
		Packed128<T> o;
		for (int k = 0; k < W; k++)
			o.set(k, e.f(k) + p.f(k));
		store128(out + x, o);
	}
}

/*
 * one block per distinct token: dwte[uniq[j]] += its positions' rows, in
 * ascending position order. Packed (vec, from vec16 at launch: C a
 * multiple of 8 and every pointer 16-byte aligned): 8 columns a thread,
 * dout 16 bytes (bf16) or 2 x 16 bytes (fp32) a load and the f32 row 2 x
 * 16 bytes; each column's sum in the same order, so the same bits.
 * Otherwise the scalar loop, a column a thread.
 */
template <typename T>
__global__ static void encoder_bwd_wte(float *dwte, const T *dout,
				       const int32_t *uniq,
				       const int32_t *start,
				       const int32_t *pos, int C, int vec)
{
	int j = blockIdx.x;
	int q0 = start[j], q1 = start[j + 1];
	float *row = dwte + (size_t)uniq[j] * C;
	if (vec) {
		for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
			float s[8] = {0};
			for (int q = q0; q < q1; q++)
				for (int h = 0; h < 8; h += Packed128<T>::size) {
					Packed128<T> d = load128cs(dout + (size_t)pos[q] * C + c + h);
					for (int k = 0; k < Packed128<T>::size; k++)
						s[h + k] += d.f(k);
				}
			for (int h = 0; h < 8; h += 4) {
				Packed128<float> r = load128cg(row + c + h);
				for (int k = 0; k < 4; k++)
					r.v[k] += s[h + k];
				store128(row + c + h, r);
			}
		}
		return;
	}
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float s = 0.0f;
		for (int q = q0; q < q1; q++)
			s += ldf(dout[(size_t)pos[q] * C + c]);
		row[c] += s;
	}
}

/* one thread per (t, c): dwpe[t][c] += sum over b in order; packed
 * (vec): one thread per 4 columns (dout fp32) or 8 (bf16), the same sums */
template <typename T>
__global__ static void encoder_bwd_wpe(float *dwpe, const T *dout, int B,
				       int T_, int C, int vec)
{
	enum { W = Packed128<T>::size };
	size_t TC = (size_t)T_ * C;
	if (vec) {
		GK_CUDA_FOR_EACH(y, TC / W) {
			size_t x = y * W;
			float s[W] = {0};
			for (int b = 0; b < B; b++) {
				Packed128<T> d = load128cs(dout + (size_t)b * TC + x);
				for (int k = 0; k < W; k++)
					s[k] += d.f(k);
			}
			for (int h = 0; h < W; h += 4) {
				Packed128<float> r = load128cg(dwpe + x + h);
				for (int k = 0; k < 4; k++)
					r.v[k] += s[h + k];
				store128(dwpe + x + h, r);
			}
		}
		return;
	}
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
	WITH_T(dt, if (vec16<T>((uint64_t)C, out, wte, wpe))
			   encoder_fwd_vec<T><<<gk_cuda_grid(n / Packed128<T>::size,
							      GK_CUDA_BLOCK),
						GK_CUDA_BLOCK, 0, s>>>(
				   (T *)out, tok, (const T *)wte, (const T *)wpe,
				   n, T_, C);
	       else encoder_fwd<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK),
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
	/* wte: 8 columns a thread (16 bytes of bf16, 32 of fp32) */
	int vw = vec16<uint16_t>((uint64_t)C, dwte, dout);
	WITH_T(dt, int vp = vec16<T>((uint64_t)C, dwpe, dout);
	       if (nb > 0) encoder_bwd_wte<T><<<nb, GK_CUDA_BLOCK, 0, s>>>(
			   dwte, (const T *)dout, uniq, start, pos, C, vw);
	       encoder_bwd_wpe<T><<<gk_cuda_grid(vp ? tc / Packed128<T>::size : tc,
						 GK_CUDA_BLOCK),
				    GK_CUDA_BLOCK, 0, s>>>(dwpe, (const T *)dout,
							   B, T_, C, vp));
	return GK_CUDA_LAUNCHED("encoder backward", err);
}
