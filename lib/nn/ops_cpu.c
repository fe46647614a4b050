/*
 * ops_cpu.c - the CPU kernels of the GPT-2 step: OpenBLAS sgemm for the
 * matmuls, OpenMP loops for the rest, the per-element math from math.h.
 *
 * reference: llm.c train_gpt2.c (the same ops and shapes, with (OC, C)
 * weights; ours are GPT-2's Conv1D (C, OC), so the transposes differ).
 *
 * Determinism: no two threads ever add into the same element. Sums over
 * rows (bias, LayerNorm weight and embedding gradients) give each thread
 * whole columns and walk the rows in order, so the result is the same
 * for every thread count; OpenBLAS splits sgemm over M and N, never K.
 */
#include <math.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#include "nn/internal.h"
#include "nn/math.h"

/* openblas-pthread's own pool: not OpenMP's, so both are told. */
void openblas_set_num_threads(int);

void gk_nn_cpu_threads(int nt)
{
	openblas_set_num_threads(nt);
	omp_set_num_threads(nt);
}

/* Columns [*c0, *c1) of C for thread `id` of `n`, multiples of 16 floats. */
static void colrange(int C, int id, int n, int *c0, int *c1)
{
	int blocks = (C + 15) / 16;
	int per = blocks / n, extra = blocks % n;
	int b0 = id * per + (id < extra ? id : extra);
	int b1 = b0 + per + (id < extra ? 1 : 0);
	*c0 = b0 * 16 < C ? b0 * 16 : C;
	*c1 = b1 * 16 < C ? b1 * 16 : C;
}

/* ---- embeddings ---------------------------------------------------------------- */

/* out (B,T,C) = wte[tok] + wpe[t] */
void gk_nn_cpu_encoder_fwd(float *out, const int32_t *tok, const float *wte,
			   const float *wpe, int B, int T, int C, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < B * T; i++) {
		const float *e = wte + (size_t)tok[i] * C;
		const float *p = wpe + (size_t)(i % T) * C;
		float *o = out + (size_t)i * C;
		for (int c = 0; c < C; c++)
			o[c] = e[c] + p[c];
	}
}

void gk_nn_cpu_encoder_bwd(float *dwte, float *dwpe, const float *dout,
			   const int32_t *tok, int B, int T, int C, int nt)
{
	/* a token repeats across rows: threads own columns, rows in order */
#pragma omp parallel num_threads(nt)
	{
		int c0, c1;
		colrange(C, omp_get_thread_num(), omp_get_num_threads(), &c0,
			 &c1);
		for (int i = 0; i < B * T; i++) {
			const float *d = dout + (size_t)i * C;
			float *e = dwte + (size_t)tok[i] * C;
			float *p = dwpe + (size_t)(i % T) * C;
			for (int c = c0; c < c1; c++) {
				e[c] += d[c];
				p[c] += d[c];
			}
		}
	}
}

/* ---- LayerNorm ----------------------------------------------------------------- */

void gk_nn_cpu_layernorm_fwd(float *out, float *mean, float *rstd,
			     const float *inp, const float *w, const float *b,
			     int N, int C, float eps, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++) {
		const float *x = inp + (size_t)i * C;
		float *o = out + (size_t)i * C;
		float mu, rs;
		gk_nn_ln_stats(x, C, eps, &mu, &rs);
		for (int c = 0; c < C; c++)
			o[c] = (x[c] - mu) * rs * w[c] + b[c];
		mean[i] = mu;
		rstd[i] = rs;
	}
}

/* dinp += d/dinp; dw, db += sums over rows */
void gk_nn_cpu_layernorm_bwd(float *dinp, float *dw, float *db,
			     const float *dout, const float *inp,
			     const float *w, const float *mean,
			     const float *rstd, int N, int C, int nt)
{
#pragma omp parallel num_threads(nt)
	{
#pragma omp for schedule(static)
		for (int i = 0; i < N; i++) {
			const float *d = dout + (size_t)i * C;
			const float *x = inp + (size_t)i * C;
			float *di = dinp + (size_t)i * C;
			float mu = mean[i], rs = rstd[i];
			float s1 = 0.0f, s2 = 0.0f;
			for (int c = 0; c < C; c++) {
				float dn = w[c] * d[c];
				s1 += dn;
				s2 += dn * (x[c] - mu) * rs;
			}
			s1 /= (float)C;
			s2 /= (float)C;
			for (int c = 0; c < C; c++) {
				float nrm = (x[c] - mu) * rs;
				float dn = w[c] * d[c];
				di[c] += (dn - s1 - nrm * s2) * rs;
			}
		}
		int c0, c1;
		colrange(C, omp_get_thread_num(), omp_get_num_threads(), &c0,
			 &c1);
		for (int i = 0; i < N; i++) {
			const float *d = dout + (size_t)i * C;
			const float *x = inp + (size_t)i * C;
			float mu = mean[i], rs = rstd[i];
			for (int c = c0; c < c1; c++) {
				dw[c] += d[c] * ((x[c] - mu) * rs);
				db[c] += d[c];
			}
		}
	}
}

/* ---- matmul (Conv1D: w is (C, OC)) ---------------------------------------------- */

/* out (N,OC) = [out +] inp (N,C) @ w (C,OC) + bias */
void gk_nn_cpu_matmul_fwd(float *out, const float *inp, const float *w,
			  const float *bias, int N, int C, int OC, int acc,
			  int nt)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, C, 1.0f,
		    inp, C, w, OC, acc ? 1.0f : 0.0f, out, OC);
	if (!bias)
		return;
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++) {
		float *o = out + (size_t)i * OC;
		for (int c = 0; c < OC; c++)
			o[c] += bias[c];
	}
}

/* dinp (N,C) = dout @ w^T; dw (C,OC) += inp^T @ dout; db += column sums */
void gk_nn_cpu_matmul_bwd(float *dinp, float *dw, float *db,
			  const float *dout, const float *inp, const float *w,
			  int N, int C, int OC, int nt)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, OC, 1.0f,
		    dout, OC, w, OC, 0.0f, dinp, C);
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, OC, N, 1.0f,
		    inp, C, dout, OC, 1.0f, dw, OC);
	if (!db)
		return;
#pragma omp parallel num_threads(nt)
	{
		int c0, c1;
		colrange(OC, omp_get_thread_num(), omp_get_num_threads(), &c0,
			 &c1);
		for (int i = 0; i < N; i++) {
			const float *d = dout + (size_t)i * OC;
			for (int c = c0; c < c1; c++)
				db[c] += d[c];
		}
	}
}

/* ---- GeLU ------------------------------------------------------------------------ */

void gk_nn_cpu_gelu_fwd(float *out, const float *inp, size_t n, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = gk_nn_gelu(inp[i]);
}

/* dinp *= gelu'(inp), in place */
void gk_nn_cpu_gelu_bwd(float *dinp, const float *inp, size_t n, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (size_t i = 0; i < n; i++)
		dinp[i] *= gk_nn_gelu_grad(inp[i]);
}

/* ---- causal self-attention --------------------------------------------------------- */

/*
 * qkv (B,T,3C) holds q, k, v side by side, head h at columns h*hs of
 * each. Per (b, h): att (T,T) = softmax(q k^T / sqrt(hs)) over j <= t,
 * out[:, h*hs:] = att v. Each (b, h) is one pair of sgemms; OpenBLAS
 * spreads each over the threads.
 */
void gk_nn_cpu_attention_fwd(float *out, float *att, const float *qkv, int B,
			     int T, int C, int NH, int nt)
{
	int hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	size_t C3 = 3 * (size_t)C;
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
			const float *q = qkv + (size_t)b * T * C3 + h * hs;
			const float *k = q + C;
			float *a = att + ((size_t)b * NH + h) * T * T;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T,
				    T, hs, scale, q, (int)C3, k, (int)C3, 0.0f,
				    a, T);
		}
#pragma omp parallel for num_threads(nt) schedule(static)
	for (size_t r = 0; r < (size_t)B * NH * T; r++) {
		int t = (int)(r % T);
		float *a = att + r * T;
		gk_nn_softmax_row(a, t + 1);
		for (int j = t + 1; j < T; j++)
			a[j] = 0.0f;
	}
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
			const float *v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;
			const float *a = att + ((size_t)b * NH + h) * T * T;
			float *o = out + (size_t)b * T * C + h * hs;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    T, hs, T, 1.0f, a, T, v, (int)C3, 0.0f, o,
				    C);
		}
}

/*
 * dqkv (B,T,3C) = d/dqkv (overwritten). scratch: T*T floats per (b, h)
 * in flight; here one (T,T) reused, since the (b, h) run in turn.
 */
void gk_nn_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout,
			     const float *qkv, const float *att, int B, int T,
			     int C, int NH, int nt)
{
	int hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	size_t C3 = 3 * (size_t)C;
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
			size_t base = (size_t)b * T * C3 + h * hs;
			const float *q = qkv + base, *k = q + C, *v = k + C;
			float *dq = dqkv + base, *dk = dq + C, *dv = dk + C;
			const float *a = att + ((size_t)b * NH + h) * T * T;
			const float *d = dout + (size_t)b * T * C + h * hs;
			float *da = scratch;
			/* datt = dout v^T; dv = att^T dout */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T,
				    T, hs, 1.0f, d, C, v, (int)C3, 0.0f, da, T);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T,
				    hs, T, 1.0f, a, T, d, C, 0.0f, dv, (int)C3);
			/* softmax backward, scaled: dpre = att (datt -
			 * sum(att datt)) / sqrt(hs), zero above the diagonal */
#pragma omp parallel for num_threads(nt) schedule(static)
			for (int t = 0; t < T; t++) {
				const float *ar = a + (size_t)t * T;
				float *dr = da + (size_t)t * T;
				float s = 0.0f;
				for (int j = 0; j <= t; j++)
					s += ar[j] * dr[j];
				for (int j = 0; j <= t; j++)
					dr[j] = ar[j] * (dr[j] - s) * scale;
				for (int j = t + 1; j < T; j++)
					dr[j] = 0.0f;
			}
			/* dq = dpre k; dk = dpre^T q */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    T, hs, T, 1.0f, da, T, k, (int)C3, 0.0f, dq,
				    (int)C3);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T,
				    hs, T, 1.0f, da, T, q, (int)C3, 0.0f, dk,
				    (int)C3);
		}
}

/* ---- the LM head and the fused classifier ---------------------------------------- */

/* logits (N,Vp) = inp (N,C) @ wte[:V]^T; the padded columns are left alone */
void gk_nn_cpu_lmhead_fwd(float *logits, const float *inp, const float *wte,
			  int N, int C, int V, int Vp)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, V, C, 1.0f,
		    inp, C, wte, C, 0.0f, logits, Vp);
}

/* dinp (N,C) = dlogits @ wte[:V]; dwte[:V] += dlogits^T @ inp */
void gk_nn_cpu_lmhead_bwd(float *dinp, float *dwte, const float *dlogits,
			  const float *inp, const float *wte, int N, int C,
			  int V, int Vp)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, V, 1.0f,
		    dlogits, Vp, wte, C, 0.0f, dinp, C);
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, N, 1.0f,
		    dlogits, Vp, inp, C, 1.0f, dwte, C);
}

/*
 * Forward half of the fused classifier: lse[i] of each row, and the sum
 * of the losses lse - logit[target] over rows whose target is >= 0
 * (rows summed in order, in double: deterministic).
 */
double gk_nn_cpu_xent_fwd(float *lse, const float *logits,
			  const int32_t *targets, int N, int V, int Vp, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++)
		lse[i] = gk_nn_logsumexp(logits + (size_t)i * Vp, V);
	double s = 0.0;
	if (!targets)
		return s;
	for (int i = 0; i < N; i++)
		if (targets[i] >= 0)
			s += (double)lse[i] -
			     (double)logits[(size_t)i * Vp + targets[i]];
	return s;
}

/* Overwrite logits with dlogits = (softmax - onehot) * dloss; ignored
 * rows and padded columns get 0. */
void gk_nn_cpu_xent_bwd(float *logits, const float *lse,
			const int32_t *targets, float dloss, int N, int V,
			int Vp, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++) {
		float *x = logits + (size_t)i * Vp;
		int y = targets[i];
		if (y < 0) {
			memset(x, 0, (size_t)Vp * sizeof(float));
			continue;
		}
		float l = lse[i];
		for (int j = 0; j < V; j++)
			x[j] = gk_nn_xent_grad(x[j], l, j == y, dloss);
		for (int j = V; j < Vp; j++)
			x[j] = 0.0f;
	}
}
