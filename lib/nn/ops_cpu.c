/*
 * ops_cpu.c - the CPU kernels of the GPT-2 step: OpenBLAS sgemm for the
 * matmuls, OpenMP loops for the rest, the per-element math from math.h.
 *
 * reference: llm.c train_gpt2.c (the same ops and shapes, with (OC, C)
 * weights; ours are GPT-2's Conv1D (C, OC), so the transposes differ).
 *
 * Threads: one OpenMP pool does everything. OpenBLAS runs single-threaded
 * inside it: a matmul is cut into row or column blocks, one sgemm per
 * thread (gemm below). Attention (attention_cpu.c) runs one (batch, head)
 * per thread.
 * Letting OpenBLAS's own pthread pool take the matmuls instead leaves two
 * pools spinning against each other between ops, which on a loaded
 * machine cost more than the matmuls.
 *
 * Determinism: no two threads ever add into the same element, so a run
 * repeats bit for bit at the same thread count. Sums over rows (bias,
 * LayerNorm weight and embedding gradients) give each thread whole
 * columns and walk the rows in order, the same for every thread count;
 * matmuls are cut over M or N, never K, so each output element is one
 * sgemm's dot product, but OpenBLAS picks its kernel by the block's size
 * (small-matrix kernels below a threshold) and kernels round a dot
 * product differently: another thread count agrees within rounding.
 */
#include <math.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#include "nn/internal.h"
#include "nn/math.h"


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

void gk_nn_cpu_threads(int nt)
{
	openblas_set_num_threads(1);
	omp_set_num_threads(nt);
}

/*
 * C (M,N) = alpha op(A) op(B) + beta C, row-major, cut into nt blocks of
 * rows (or of columns when N > M), multiples of 16 so every block keeps
 * whole SIMD tiles.
 */
static void gemm(int ta, int tb, int M, int N, int K, float alpha,
		 const float *A, int lda, const float *B, int ldb, float beta,
		 float *C, int ldc, int nt)
{
	enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
	enum CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
	int byrow = M >= N, D = byrow ? M : N;
	if (nt <= 1 || D < 32) {
		cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, alpha, A, lda, B,
			    ldb, beta, C, ldc);
		return;
	}
#pragma omp parallel num_threads(nt)
	{
		int d0, d1;
		colrange(D, omp_get_thread_num(), omp_get_num_threads(), &d0,
			 &d1);
		if (d1 > d0) {
			if (byrow)
				cblas_sgemm(CblasRowMajor, TA, TB, d1 - d0, N, K,
					    alpha,
					    ta ? A + d0 : A + (size_t)d0 * lda,
					    lda, B, ldb, beta,
					    C + (size_t)d0 * ldc, ldc);
			else
				cblas_sgemm(CblasRowMajor, TA, TB, M, d1 - d0, K,
					    alpha, A, lda,
					    tb ? B + (size_t)d0 * ldb : B + d0,
					    ldb, beta, C + d0, ldc);
		}
	}
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

GK_NN_SIMD_CLONES
static void ln_rows(float *out, float *mean, float *rstd, const float *inp,
		    const float *w, const float *b, int i0, int i1, int C,
		    float eps)
{
	for (int i = i0; i < i1; i++) {
		const float *x = inp + (size_t)i * C;
		float *o = out + (size_t)i * C;
		float mu, rs;
		gk_nn_ln_stats(x, C, eps, &mu, &rs);
#pragma omp simd
		for (int c = 0; c < C; c++)
			o[c] = gk_nn_ln_apply(x[c], mu, rs, w[c], b[c]);
		mean[i] = mu;
		rstd[i] = rs;
	}
}

/* rows [lo, lo+len) of N for this thread */
#define ROWS(N, lo, hi)                                                        \
	int lo, hi;                                                            \
	colrange1((N), omp_get_thread_num(), omp_get_num_threads(), &lo, &hi)

static void colrange1(int n, int id, int k, int *a, int *b)
{
	int per = n / k, extra = n % k;
	*a = id * per + (id < extra ? id : extra);
	*b = *a + per + (id < extra ? 1 : 0);
}

void gk_nn_cpu_layernorm_fwd(float *out, float *mean, float *rstd,
			     const float *inp, const float *w, const float *b,
			     int N, int C, float eps, int nt)
{
#pragma omp parallel num_threads(nt)
	{
		ROWS(N, i0, i1);
		ln_rows(out, mean, rstd, inp, w, b, i0, i1, C, eps);
	}
}

GK_NN_SIMD_CLONES
static void ln_bwd_rows(float *dinp, const float *dout, const float *inp,
			const float *w, const float *mean, const float *rstd,
			int i0, int i1, int C)
{
	for (int i = i0; i < i1; i++) {
		const float *d = dout + (size_t)i * C;
		const float *x = inp + (size_t)i * C;
		float *di = dinp + (size_t)i * C;
		float mu = mean[i], rs = rstd[i];
		float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
		for (int c = 0; c < C; c++) {
			float dn = w[c] * d[c];
			s1 += dn;
			s2 += dn * (x[c] - mu) * rs;
		}
		s1 /= (float)C;
		s2 /= (float)C;
#pragma omp simd
		for (int c = 0; c < C; c++) {
			float nrm = (x[c] - mu) * rs;
			float dn = w[c] * d[c];
			di[c] += gk_nn_ln_dinp(dn, nrm, s1, s2, rs);
		}
	}
}

/* dw, db (columns [c0, c1)) += sums over all rows, rows in order */
GK_NN_SIMD_CLONES
static void ln_bwd_cols(float *dw, float *db, const float *dout,
			const float *inp, const float *mean, const float *rstd,
			int N, int C, int c0, int c1)
{
	for (int i = 0; i < N; i++) {
		const float *d = dout + (size_t)i * C;
		const float *x = inp + (size_t)i * C;
		float mu = mean[i], rs = rstd[i];
#pragma omp simd
		for (int c = c0; c < c1; c++) {
			dw[c] += d[c] * ((x[c] - mu) * rs);
			db[c] += d[c];
		}
	}
}

/* ln_bwd_rows and ln_bwd_cols over every column in one pass over the
 * rows, while each row is in L1: one thread's way (the same sums in the
 * same order, so the same bits) */
GK_NN_SIMD_CLONES
static void ln_bwd_all(float *dinp, float *dw, float *db, const float *dout,
		       const float *inp, const float *w, const float *mean,
		       const float *rstd, int N, int C)
{
	for (int i = 0; i < N; i++) {
		ln_bwd_rows(dinp, dout, inp, w, mean, rstd, i, i + 1, C);
		ln_bwd_cols(dw, db, dout + (size_t)i * C, inp + (size_t)i * C,
			    mean + i, rstd + i, 1, C, 0, C);
	}
}

/* dinp += d/dinp; dw, db += sums over rows */
void gk_nn_cpu_layernorm_bwd(float *dinp, float *dw, float *db,
			     const float *dout, const float *inp,
			     const float *w, const float *mean,
			     const float *rstd, int N, int C, int nt)
{
	if (nt <= 1) {
		ln_bwd_all(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
		return;
	}
#pragma omp parallel num_threads(nt)
	{
		ROWS(N, i0, i1);
		ln_bwd_rows(dinp, dout, inp, w, mean, rstd, i0, i1, C);
		int c0, c1;
		colrange(C, omp_get_thread_num(), omp_get_num_threads(), &c0,
			 &c1);
		ln_bwd_cols(dw, db, dout, inp, mean, rstd, N, C, c0, c1);
	}
}

/* ---- matmul (Conv1D: w is (C, OC)) ---------------------------------------------- */

/*
 * The residual's NULL test stays outside the column loops: inside, GCC
 * vectorises `r ? r[c] : 0` as a masked load from r, and a masked load
 * whose lanes are all off still costs a microcode assist when the address
 * (NULL + c) is unmapped: ten times slower than the store it feeds.
 */

/* rows [i0, i1) of out (N,OC) = res + bias, or bias alone, or zero (no
 * bias: a row-parallel layer's partial product, tp.c) */
GK_NN_SIMD_CLONES
static void bias_rows(float *restrict out, const float *restrict res,
		      const float *restrict bias, int i0, int i1, int OC)
{
	if (!bias && !res) {
		memset(out + (size_t)i0 * OC, 0, (size_t)(i1 - i0) * OC * sizeof(float));
		return;
	}
	for (int i = i0; i < i1; i++) {
		float *o = out + (size_t)i * OC;
		if (res) {
			const float *r = res + (size_t)i * OC;
#pragma omp simd
			for (int c = 0; c < OC; c++)
				o[c] = r[c] + bias[c];
		} else {
#pragma omp simd
			for (int c = 0; c < OC; c++)
				o[c] = bias[c];
		}
	}
}

/*
 * rows [i0, i1): x = out + bias, gelu = gelu_new(x), and out = x, or
 * with grad out = gelu_new'(x), in one pass.
 */
GK_NN_SIMD_CLONES
static void bias_gelu_rows(float *restrict out, float *restrict gelu,
			   const float *restrict bias, int grad, int i0,
			   int i1, int OC)
{
	for (int i = i0; i < i1; i++) {
		float *o = out + (size_t)i * OC, *g = gelu + (size_t)i * OC;
		if (grad) {
#pragma omp simd
			for (int c = 0; c < OC; c++) {
				float d;
				g[c] = gk_nn_gelu_and_grad(o[c] + bias[c], &d);
				o[c] = d;
			}
		} else {
#pragma omp simd
			for (int c = 0; c < OC; c++) {
				float x = o[c] + bias[c];
				o[c] = x;
				g[c] = gk_nn_gelu(x);
			}
		}
	}
}

/*
 * out (N,OC) = [res +] bias + inp (N,C) @ w (C,OC); or with gelu
 * non-NULL (and no res), gelu = gelu_new(bias + inp @ w), and out keeps
 * that pre-activation, or with grad its derivative instead: all that
 * backward needs of it, so the backward pass multiplies rather than
 * redoing tanh.
 * Without gelu the rows are filled with bias (and the residual) first
 * and sgemm adds onto them (beta 1), as torch's addmm: one pass over out
 * instead of sgemm zeroing it and a second pass adding the bias. With
 * gelu, sgemm writes out (beta 0) and the GeLU pass, which reads out
 * anyway, adds the bias. Each thread takes a block of rows through all
 * of it, so the op costs one barrier (on a loaded machine each one can
 * wait a scheduler tick for a descheduled thread).
 */
void gk_nn_cpu_matmul_fwd(float *out, const float *inp, const float *w,
			  const float *bias, const float *res, float *gelu,
			  int grad, int N, int C, int OC, int nt)
{
#pragma omp parallel num_threads(nt)
	{
		ROWS(N, i0, i1);
		if (i1 > i0 && gelu) {
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    i1 - i0, OC, C, 1.0f, inp + (size_t)i0 * C,
				    C, w, OC, 0.0f, out + (size_t)i0 * OC, OC);
			bias_gelu_rows(out, gelu, bias, grad, i0, i1, OC);
		} else if (i1 > i0) {
			bias_rows(out, res, bias, i0, i1, OC);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    i1 - i0, OC, C, 1.0f, inp + (size_t)i0 * C,
				    C, w, OC, 1.0f, out + (size_t)i0 * OC, OC);
		}
	}
}

/* db (columns [c0, c1)) += column sums of dout, rows in order */
GK_NN_SIMD_CLONES
static void colsum(float *db, const float *dout, int N, int OC, int c0,
		   int c1)
{
	for (int i = 0; i < N; i++) {
		const float *d = dout + (size_t)i * OC;
#pragma omp simd
		for (int c = c0; c < c1; c++)
			db[c] += d[c];
	}
}

/*
 * db += column sums of dout (unless NULL: the caller summed them); dinp
 * (N,C) = dout @ w^T (rows split over the threads); dw (C,OC) += inp^T @
 * dout (the longer of its sides split). The three write different
 * buffers, so one parallel region does them all.
 */
void gk_nn_cpu_matmul_bwd(float *dinp, float *dw, float *db,
			  const float *dout, const float *inp, const float *w,
			  int N, int C, int OC, int nt)
{
#pragma omp parallel num_threads(nt)
	{
		int id = omp_get_thread_num(), k = omp_get_num_threads();
		int d0, d1;
		/* the bias first, while dout is still in cache from the op
		 * that wrote it */
		colrange(OC, id, k, &d0, &d1);
		if (db)
			colsum(db, dout, N, OC, d0, d1);
		ROWS(N, i0, i1);
		if (i1 > i0)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    i1 - i0, C, OC, 1.0f,
				    dout + (size_t)i0 * OC, OC, w, OC, 0.0f,
				    dinp + (size_t)i0 * C, C);
		if (C >= OC) {
			colrange(C, id, k, &d0, &d1);
			if (d1 > d0)
				cblas_sgemm(CblasRowMajor, CblasTrans,
					    CblasNoTrans, d1 - d0, OC, N, 1.0f,
					    inp + d0, C, dout, OC, 1.0f,
					    dw + (size_t)d0 * OC, OC);
		} else {
			colrange(OC, id, k, &d0, &d1);
			if (d1 > d0)
				cblas_sgemm(CblasRowMajor, CblasTrans,
					    CblasNoTrans, C, d1 - d0, N, 1.0f,
					    inp, C, dout + d0, OC, 1.0f, dw + d0,
					    OC);
		}
	}
}

/* ---- GeLU ------------------------------------------------------------------------ */

/*
 * The element loops are compiled for AVX-512, AVX2 and baseline x86-64,
 * picked at load time (the library is built for the baseline). Each
 * thread takes one contiguous chunk.
 */
GK_NN_SIMD_CLONES
static void gelu_chunk(float *restrict out, const float *restrict inp,
		       size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++)
		out[i] = gk_nn_gelu(inp[i]);
}

#define CHUNKED(nt, n, call)                                                 \
	_Pragma("omp parallel num_threads(nt)")                              \
	{                                                                    \
		size_t k_ = (size_t)omp_get_num_threads();                   \
		size_t id_ = (size_t)omp_get_thread_num();                   \
		size_t per_ = ((n) + k_ - 1) / k_;                           \
		size_t lo = id_ * per_ < (n) ? id_ * per_ : (n);             \
		size_t len = (n) - lo < per_ ? (n) - lo : per_;              \
		call;                                                        \
	}

void gk_nn_cpu_gelu_fwd(float *out, const float *inp, size_t n, int nt)
{
	CHUNKED(nt, n, gelu_chunk(out + lo, inp + lo, len));
}

/*
 * Columns [c0, c1) of every row of d (N,C): d *= gelu'(x), or d *= x
 * where x already holds gelu' (the forward kept it); then db += the
 * column, rows in order.
 */
GK_NN_SIMD_CLONES
static void gelu_bwd_cols(float *restrict d, float *restrict db,
			  const float *restrict x, int grad, int N, int C,
			  int c0, int c1)
{
	for (int i = 0; i < N; i++) {
		float *di = d + (size_t)i * C;
		const float *xi = x + (size_t)i * C;
		if (grad) {
#pragma omp simd
			for (int c = c0; c < c1; c++)
				di[c] *= xi[c];
		} else {
#pragma omp simd
			for (int c = c0; c < c1; c++)
				di[c] *= gk_nn_gelu_grad(xi[c]);
		}
		if (db) {
#pragma omp simd
			for (int c = c0; c < c1; c++)
				db[c] += di[c];
		}
	}
}

/*
 * dinp (N,C) *= gelu'(x), in place, x the pre-activation, or with grad
 * *= x itself (x is gelu', kept by the forward). With db non-NULL, db
 * += the column sums of the result: the bias gradient of the matmul that
 * made x, summed here while the rows are in cache rather than in a
 * second pass (its matmul_bwd then gets db NULL). Threads own columns.
 */
void gk_nn_cpu_gelu_bwd(float *dinp, float *db, const float *x, int grad,
			int N, int C, int nt)
{
#pragma omp parallel num_threads(nt)
	{
		int c0, c1;
		colrange(C, omp_get_thread_num(), omp_get_num_threads(), &c0,
			 &c1);
		if (c1 > c0)
			gelu_bwd_cols(dinp, db, x, grad, N, C, c0, c1);
	}
}

/* ---- causal self-attention --------------------------------------------------------- */

/* math.h's softmax of one row, built for each SIMD level: its exp and
 * sums vectorise, and its fmaf are instructions */
GK_NN_SIMD_CLONES
float gk_nn_cpu_softmax(float *x, int n)
{
	return gk_nn_softmax_row(x, n);
}

/*
 * One row of attention's forward: ar[0..T) = softmax of x[0..n), zero
 * from n. x holds the scores to nv, a whole number of lanes >= n (the
 * width the tiles wrote), finite past n; those are masked here rather
 * than stored over, so every pass runs in whole vectors. x is left
 * holding exp(x - max), zero past n.
 */
GK_NN_SIMD_CLONES
void gk_nn_cpu_softmax_causal(float *restrict ar, float *restrict x, int n,
			      int nv, int T)
{
	float acc[GK_NN_LANES];
	for (int l = 0; l < GK_NN_LANES; l++)
		acc[l] = -INFINITY;
	for (int i = 0; i < nv; i += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++) {
			float v = i + l < n ? x[i + l] : -INFINITY;
			acc[l] = v > acc[l] ? v : acc[l];
		}
	float mx = gk_nn_lanes_max(acc);
	for (int l = 0; l < GK_NN_LANES; l++)
		acc[l] = 0.0f;
	for (int i = 0; i < nv; i += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++) {
			float e = gk_nn_expf(x[i + l] - mx);
			x[i + l] = i + l < n ? e : 0.0f;
			acc[l] += x[i + l];
		}
	float inv = 1.0f / gk_nn_lanes_sum_pairwise(acc);
	int m = nv < T ? nv : T;
#pragma omp simd
	for (int j = 0; j < m; j++)
		ar[j] = x[j] * inv;
	for (int j = m; j < T; j++)
		ar[j] = 0.0f;
}

/*
 * dr = softmax backward of att row ar (zero from n to T), scaled, and
 * zero from n to nv (a whole number of lanes: the width of the tiles
 * that wrote dr and read it back). The sums run in whole vectors to
 * min(nv, T), over ar's zeros past n.
 */
GK_NN_SIMD_CLONES
void gk_nn_cpu_softmax_bwd_row(float *restrict dr, const float *restrict ar,
			       int n, int nv, int T, float scale)
{
	int m = nv < T ? nv : T;
	float acc[GK_NN_LANES] = {0};
	int j = 0;
	for (; j + GK_NN_LANES <= m; j += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++)
			acc[l] += ar[j + l] * dr[j + l];
	for (; j < m; j++)
		acc[j % GK_NN_LANES] += ar[j] * dr[j];
	float s = gk_nn_lanes_sum(acc);
#pragma omp simd
	for (j = 0; j < m; j++)
		dr[j] = gk_nn_softmax_dpre(ar[j], dr[j], s, scale);
	for (j = m; j < nv; j++)
		dr[j] = 0.0f;
}

/* ---- the LM head and the fused classifier ---------------------------------------- */

/* logits (N,Vp) = inp (N,C) @ wte[:V]^T; the padded columns are left alone */
void gk_nn_cpu_lmhead_fwd(float *logits, const float *inp, const float *wte,
			  int N, int C, int V, int Vp, int nt)
{
	gemm(0, 1, N, V, C, 1.0f, inp, C, wte, C, 0.0f, logits, Vp, nt);
}

/* dinp (N,C) = dlogits @ wte[:V]; dwte[:V] += dlogits^T @ inp */
void gk_nn_cpu_lmhead_bwd(float *dinp, float *dwte, const float *dlogits,
			  const float *inp, const float *wte, int N, int C,
			  int V, int Vp, int nt)
{
	gemm(0, 0, N, C, V, 1.0f, dlogits, Vp, wte, C, 0.0f, dinp, C, nt);
	gemm(1, 0, V, C, N, 1.0f, dlogits, Vp, inp, C, 1.0f, dwte, C, nt);
}

GK_NN_SIMD_CLONES
static float lse_row(const float *x, int V)
{
	return gk_nn_logsumexp(x, V);
}

GK_NN_SIMD_CLONES
static void xent_grad_row(float *x, float lse, int y, float dloss, int V)
{
#pragma omp simd
	for (int j = 0; j < V; j++)
		x[j] = gk_nn_xent_grad(x[j], lse, j == y, dloss);
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
		lse[i] = lse_row(logits + (size_t)i * Vp, V);
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
		xent_grad_row(x, lse[i], y, dloss, V);
		memset(x + V, 0, (size_t)(Vp - V) * sizeof(float));
	}
}
