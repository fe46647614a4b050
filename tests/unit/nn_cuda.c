/*
 * nn_cuda.c - the CUDA backend of lib/nn against its CPU backend, on a
 * machine with a GPU (skips without one; whether there is one is asked of
 * the system, tests/unit/gpu.h, and a probe that misses it fails):
 *
 *   - each kernel on the same inputs as the CPU kernel, fp32 storage,
 *     |gpu - cpu| <= tol + rel*|cpu| with tol and rel stated per kernel
 *     (the GPU sums rows in another order and contracts to FMA);
 *   - the fused classifier of a training step at the model's shapes (B*T
 *     rows of its vocabulary, padded to 128) against the CPU's forward and
 *     backward, fp32 and bf16;
 *   - the memory-bound kernels' 16-byte packed paths against their scalar
 *     paths (bit for bit where the order of additions is the same) and
 *     the CPU, fp32 and bf16, at C 64 and at odd shapes (test_packed);
 *   - one full training step, CPU vs GPU in fp32 (loss and every gradient)
 *     and in bf16 (loss); the same loss and gradients, bit for bit, from a
 *     backward after an evaluation forward (gk_nn_set_eval) and after a
 *     training forward that wrote dlogits for another scale;
 *   - ten AdamW steps: the GPU's bf16 loss curve within bf16 tolerance of
 *     the CPU's fp32 curve;
 *   - determinism: the same seed twice gives the same losses and
 *     parameters, bit for bit;
 *   - parameters round-trip host -> device -> host unchanged (checkpoints
 *     interchange), and memory by category matches what was allocated;
 *   - the MLP's GELU in cuBLASLt's epilogues and as gelu.cu's kernels
 *     (GK_CUDA_GELU): one step in fp32, TF32 and bf16 each way against
 *     the CPU, the two ways within the same tolerances of each other,
 *     the same memory, and on the emulation the GEMMs' epilogues as its
 *     manifest (CUEMU_GEMM_LOG) lists them; c_fc's bias gradient in
 *     c_proj's DGELU_BGRAD epilogue against DGELU and colsum.cu's sums.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/half.h"
#include "cuda/cuda.h"
#include "nn/cuda_internal.h"
#include "nn/nn.h"
#include "tap.h"
#include "gpu.h"

/*
 * Built with GK_TEST_ODD_SHAPES (the CUDA emulation builds it both ways,
 * tests/cuemu/cuemu.mk): shapes that are no multiple of a warp or a
 * block anywhere, head size 12, T 37, V 1000, B 3.
 */
#ifdef GK_TEST_ODD_SHAPES
static gk_nn_config cfg(void)
{
	gk_nn_config c = {.layers = 2, .hidden = 48, .heads = 4, .vocab = 1000,
			  .positions = 40, .ln_eps = 1e-5f};
	return c;
}

enum { B = 3, T = 37 };
#else
static gk_nn_config cfg(void)
{
	gk_nn_config c = {.layers = 2, .hidden = 64, .heads = 4, .vocab = 100,
			  .positions = 32, .ln_eps = 1e-5f};
	return c;
}

enum { B = 2, T = 16 };
#endif

/* Largest violation of |got - ref| <= tol + rel|ref|, as a ratio (<= 1 passes). */
static double worst(const float *got, const float *ref, size_t n, double tol,
		    double rel, size_t *at)
{
	double w = 0.0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);
		double lim = tol + rel * fabs(ref[i]);
		double r = d == 0.0 ? 0.0 : isfinite(d) ? d / lim : INFINITY;
		if (r > w) {
			w = r;
			if (at)
				*at = i;
		}
	}
	return w;
}

#if GK_HAVE_CUDA
static uint64_t rng = 12345;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
}
static void fill(float *x, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] = frand() * scale;
}

static void close_enough(const char *what, const float *got, const float *ref,
			 size_t n, double tol, double rel)
{
	size_t at = 0;
	double w = worst(got, ref, n, tol, rel, &at);
	if (!ok(w <= 1.0, "%s: %zu values within %g + %g|ref|", what, n, tol, rel))
		diag("worst at %zu: got %.9g, want %.9g", at, got[at], ref[at]);
}

/* ---- kernels against the CPU kernels ------------------------------------------------ */

/*
 * The fused classifier at the model's shapes: B*T rows of cfg()'s
 * vocabulary in rows padded to 128 (gpt.c's vocab_pad), every 7th
 * target ignored, against the CPU backend's forward (lse, loss sum) and
 * backward (dlogits; padded columns and ignored rows 0), fp32 and bf16
 * (the CPU on the bf16-rounded logits).
 */
static void test_classifier(void)
{
	const int V = (int)cfg().vocab, Vp = (V + 127) / 128 * 128, N = B * T;
	const float dl = 1.0f / (float)N;
	size_t n = (size_t)N * Vp;
	float *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
	void *raw = malloc(n * 4);
	float *lse1 = malloc(N * 4), *lse2 = malloc(N * 4), *loss2 = malloc(N * 4);
	int32_t *tgt = malloc(N * 4);
	for (int i = 0; i < N; i++)
		tgt[i] = i % 7 == 3 ? -1 : (int32_t)((i * 131 + 5) % V);
	int32_t *dtgt = gpu_dev(tgt, N * 4);
	float *dlse = gpu_dev(NULL, N * 4), *dloss = gpu_dev(NULL, N * 4);
	for (int k = 0; k < 2; k++) {
		gk_dtype dt = k ? GK_DT_BF16 : GK_DT_F32;
		size_t es = k ? 2 : 4;
		gk_err err = {0};
		fill(x, n, 5.0f);
		gk_convert(raw, dt, x, GK_DT_F32, n);
		gk_convert(x, GK_DT_F32, raw, dt, n); /* what the device holds */
		double s1 = gk_nn_cpu_xent_fwd(lse1, x, tgt, N, V, Vp, 1);
		memcpy(ref, x, n * 4);
		gk_nn_cpu_xent_bwd(ref, lse1, tgt, dl, N, V, Vp, 1);
		void *dx = gpu_dev(raw, n * es);
		int rc = gk_nn_cu_xent_fused(dlse, dloss, dx, dtgt, dt, dl, N, V, Vp, NULL, &err);
		ok(rc == 0, "classifier fused %s: launched%s%s", k ? "bf16" : "fp32",
		   err.msg[0] ? ": " : "", err.msg);
		gpu_back(lse2, dlse, N * 4);
		gpu_back(loss2, dloss, N * 4);
		gpu_back(raw, dx, n * es);
		gk_convert(got, GK_DT_F32, raw, dt, n);
		double s2 = 0;
		for (int i = 0; i < N; i++)
			s2 += tgt[i] >= 0 ? loss2[i] : 0.0;
		close_enough(k ? "classifier fused bf16: logsumexp" : "classifier fused fp32: logsumexp",
			     lse2, lse1, N, 1e-5, 1e-6);
		ok(fabs(s2 - s1) <= 1e-4 + 1e-6 * fabs(s1),
		   "classifier fused %s: %d rows of %d (in %d), loss sum %.9g, CPU %.9g",
		   k ? "bf16" : "fp32", N, V, Vp, s2, s1);
		/* bf16: the CPU's float rounded once more, half an ulp of 2^-8 */
		close_enough(k ? "classifier fused bf16: dlogits (padded and ignored rows 0)"
			       : "classifier fused fp32: dlogits (padded and ignored rows 0)",
			     got, ref, n, 1e-9, k ? 8e-3 : 1e-4);
		gk_cuda_free(dx);
	}
	gk_cuda_free(dtgt);
	gk_cuda_free(dlse);
	gk_cuda_free(dloss);
	free(x);
	free(ref);
	free(got);
	free(raw);
	free(lse1);
	free(lse2);
	free(loss2);
	free(tgt);
}

static void test_kernels(void)
{
	enum { C = 64, V = 100, Vp = 128, N = B * T };
	gk_err err = {0};
	static float a[N * 4 * C], b[N * 4 * C], w[Vp * C], wp[T * C];
	static float ref[N * 4 * C], got[N * 4 * C], g1[Vp * C], g2[Vp * C];
	static float mean[N], rstd[N], dmean[N], drstd[N];
	int32_t tok[N], tgt[N];
	for (int i = 0; i < N; i++) {
		tok[i] = (i * 37) % 11; /* repeats, so the buckets matter */
		tgt[i] = i % 5 == 4 ? -1 : (i * 13) % V;
	}
	int32_t *dtok = gpu_dev(tok, sizeof(tok)), *dtgt = gpu_dev(tgt, sizeof(tgt));

	/* encoder: forward exact (one addition), backward by buckets */
	fill(w, (size_t)V * C, 1.0f);
	fill(wp, (size_t)T * C, 1.0f);
	float *dw = gpu_dev(w, sizeof(w)), *dwp = gpu_dev(wp, sizeof(wp));
	float *dout = gpu_dev(NULL, sizeof(a));
	gk_nn_cpu_encoder_fwd(ref, tok, w, wp, B, T, C, 1);
	gk_nn_cu_encoder_fwd(dout, dtok, dw, dwp, GK_DT_F32, B, T, C, NULL, &err);
	gpu_back(got, dout, (size_t)N * C * 4);
	close_enough("encoder forward", got, ref, (size_t)N * C, 0, 0);

	fill(a, (size_t)N * C, 1.0f);
	memset(g1, 0, sizeof(g1));
	memset(g2, 0, sizeof(g2));
	static float pe1[T * C], pe2[T * C];
	memset(pe1, 0, sizeof(pe1));
	gk_nn_cpu_encoder_bwd(g1, pe1, a, tok, B, T, C, 1);
	int32_t uniq[N], start[N + 1], pos[N], count[V];
	int nb = gk_nn_token_buckets(tok, N, V, uniq, start, pos, count);
	int32_t *du = gpu_dev(uniq, sizeof(uniq)), *ds = gpu_dev(start, sizeof(start));
	int32_t *dp = gpu_dev(pos, sizeof(pos));
	memset(pe2, 0, sizeof(pe2));
	float *dgw = gpu_dev(g2, sizeof(g2)), *dgp = gpu_dev(pe2, sizeof(pe2));
	float *din = gpu_dev(a, (size_t)N * C * 4);
	gk_nn_cu_encoder_bwd(dgw, dgp, din, GK_DT_F32, du, ds, dp, nb, B, T, C,
			     NULL, &err);
	gpu_back(g2, dgw, sizeof(g2));
	gpu_back(pe2, dgp, sizeof(pe2));
	close_enough("encoder backward: wte", g2, g1, (size_t)Vp * C, 1e-6, 1e-6);
	close_enough("encoder backward: wpe", pe2, pe1, (size_t)T * C, 1e-6, 1e-6);

	/* LayerNorm: statistics summed in another order */
	fill(a, (size_t)N * C, 3.0f);
	for (int i = 0; i < N * C; i++)
		a[i] += 2.0f; /* a mean away from 0 */
	fill(w, 2 * C, 1.0f);
	gk_nn_cpu_layernorm_fwd(ref, mean, rstd, a, w, w + C, N, C, 1e-5f, 1);
	float *dx = gpu_dev(a, (size_t)N * C * 4), *dlw = gpu_dev(w, 2 * C * 4);
	float *dm = gpu_dev(NULL, N * 4), *dr = gpu_dev(NULL, N * 4);
	gk_nn_cu_layernorm_fwd(dout, dm, dr, dx, dlw, dlw + C, GK_DT_F32, N, C,
			       1e-5f, NULL, &err);
	gpu_back(got, dout, (size_t)N * C * 4);
	gpu_back(dmean, dm, N * 4);
	gpu_back(drstd, dr, N * 4);
	close_enough("layernorm forward", got, ref, (size_t)N * C, 1e-5, 1e-5);
	close_enough("layernorm forward: mean", dmean, mean, N, 1e-6, 1e-5);
	close_enough("layernorm forward: rstd", drstd, rstd, N, 1e-6, 1e-5);

	fill(b, (size_t)N * C, 1.0f); /* dout */
	fill(ref, (size_t)N * C, 1.0f); /* dinp accumulates onto this */
	memcpy(got, ref, (size_t)N * C * 4);
	float gw1[2 * C], gw2[2 * C];
	fill(gw1, 2 * C, 1.0f);
	memcpy(gw2, gw1, sizeof(gw1));
	float *ddin = gpu_dev(got, (size_t)N * C * 4), *ddo = gpu_dev(b, (size_t)N * C * 4);
	float *dgl = gpu_dev(gw2, sizeof(gw2));
	/* column-sum scratch: chunks x the widest sum (4C) */
	float *scr = gpu_dev(NULL, (size_t)gk_nn_colsum_chunks(N) * 4 * C * 4);
	gk_nn_cpu_layernorm_bwd(ref, gw1, gw1 + C, b, a, w, mean, rstd, N, C, 1);
	gk_nn_cu_layernorm_bwd(ddin, dgl, dgl + C, scr, ddo, dx, dlw, dm, dr,
			       GK_DT_F32, N, C, NULL, &err);
	gpu_back(got, ddin, (size_t)N * C * 4);
	gpu_back(gw2, dgl, sizeof(gw2));
	close_enough("layernorm backward: dinp", got, ref, (size_t)N * C, 1e-5, 1e-4);
	close_enough("layernorm backward: dw, db", gw2, gw1, 2 * C, 1e-5, 1e-4);

	/* bias gradient: column sums */
	float cb1[4 * C], cb2[4 * C];
	fill(a, (size_t)N * 4 * C, 1.0f);
	fill(cb1, 4 * C, 1.0f);
	memcpy(cb2, cb1, sizeof(cb1));
	float *dcs = gpu_dev(a, (size_t)N * 4 * C * 4), *dcb = gpu_dev(cb2, sizeof(cb2));
	gk_nn_cu_colsum(dcb, scr, dcs, GK_DT_F32, N, 4 * C, NULL, &err);
	gpu_back(cb2, dcb, sizeof(cb2));
	for (int c = 0; c < 4 * C; c++)
		for (int i = 0; i < N; i++)
			cb1[c] += a[(size_t)i * 4 * C + c];
	close_enough("bias gradient (column sums)", cb2, cb1, 4 * C, 1e-5, 1e-5);

	/* GeLU over [-6, 6] */
	size_t n = (size_t)N * 4 * C;
	fill(a, n, 6.0f);
	gk_nn_cpu_gelu_fwd(ref, a, n, 1);
	float *dg = gpu_dev(a, n * 4);
	gk_nn_cu_gelu_fwd(dout, dg, GK_DT_F32, n, NULL, &err);
	gpu_back(got, dout, n * 4);
	close_enough("gelu forward", got, ref, n, 1e-6, 1e-6);
	fill(b, n, 1.0f);
	memcpy(ref, b, n * 4);
	gk_nn_cpu_gelu_bwd(ref, NULL, a, 0, N, 4 * C, 1);
	gk_cuda_copy(dout, b, n * 4, NULL, &err);
	gk_nn_cu_gelu_bwd(dout, dg, GK_DT_F32, n, NULL, &err);
	gpu_back(got, dout, n * 4);
	close_enough("gelu backward", got, ref, n, 1e-6, 1e-5);

	/* classifier: lse and loss, then dlogits in place */
	fill(a, (size_t)N * Vp, 4.0f);
	float lse1[N], lse2[N], loss2[N];
	double s1 = gk_nn_cpu_xent_fwd(lse1, a, tgt, N, V, Vp, 1);
	float *dl = gpu_dev(a, (size_t)N * Vp * 4), *dlse = gpu_dev(NULL, N * 4);
	float *dloss = gpu_dev(NULL, N * 4);
	gk_nn_cu_xent_fwd(dlse, dloss, dl, dtgt, GK_DT_F32, N, V, Vp, NULL, &err);
	gpu_back(lse2, dlse, N * 4);
	gpu_back(loss2, dloss, N * 4);
	double s2 = 0;
	for (int i = 0; i < N; i++)
		s2 += tgt[i] >= 0 ? loss2[i] : 0.0;
	close_enough("classifier forward: logsumexp", lse2, lse1, N, 1e-5, 1e-6);
	ok(fabs(s2 - s1) <= 1e-4 + 1e-6 * fabs(s1),
	   "classifier forward: loss sum %.9g, CPU %.9g", s2, s1);
	memcpy(ref, a, (size_t)N * Vp * 4);
	gk_nn_cpu_xent_bwd(ref, lse1, tgt, 0.03f, N, V, Vp, 1);
	gk_nn_cu_xent_bwd(dl, dlse, dtgt, GK_DT_F32, 0.03f, N, V, Vp, NULL, &err);
	gpu_back(got, dl, (size_t)N * Vp * 4);
	close_enough("classifier backward: dlogits (padded and ignored rows 0)",
		     got, ref, (size_t)N * Vp, 1e-7, 1e-4);

	/* AdamW: the same gk_nn_adamw_elem */
	size_t np = 4096;
	float *p1 = malloc(np * 4), *p2 = malloc(np * 4), *gg = malloc(np * 4);
	float *m1 = calloc(np, 4), *v1 = calloc(np, 4), *m2 = malloc(np * 4), *v2 = malloc(np * 4);
	fill(p1, np, 1.0f);
	fill(gg, np, 0.1f);
	gk_nn_adamw c = {0.9f, 0.95f, 1e-8f, 0.1f};
	gk_nn_adamw_k k;
	float decay;
	gk_nn_adamw_consts(&c, 1e-3f, 3, &k, &decay);
	float *dpp = gpu_dev(p1, np * 4), *dgg = gpu_dev(gg, np * 4);
	float *dmm = gpu_dev(m1, np * 4), *dvv = gpu_dev(v1, np * 4);
	for (size_t i = 0; i < np; i++)
		gk_nn_adamw_elem(&p1[i], gg[i] * 0.5f, &m1[i], &v1[i], &k, decay);
	gk_nn_cu_adamw(dpp, NULL, GK_DT_F32, dgg, 0.5f, dmm, dvv, np, &k, decay,
		       NULL, &err);
	gpu_back(p2, dpp, np * 4);
	gpu_back(m2, dmm, np * 4);
	gpu_back(v2, dvv, np * 4);
	close_enough("adamw: parameters", p2, p1, np, 1e-7, 1e-6);
	close_enough("adamw: first moments", m2, m1, np, 1e-9, 1e-6);
	close_enough("adamw: second moments", v2, v1, np, 1e-12, 1e-6);

	/* gradient norm: two-pass double sums against the CPU's */
	double *dn = gpu_dev(NULL, (GK_NN_SUM_BLOCKS + 1) * sizeof(double));
	double sq;
	gk_nn_cu_sumsq(dn + GK_NN_SUM_BLOCKS, dn, dgg, np, NULL, &err);
	gpu_back(&sq, dn + GK_NN_SUM_BLOCKS, sizeof(sq));
	double want = gk_nn_sumsq(gg, np);
	ok(fabs(sq - want) <= 1e-12 * want, "sum of squares: %.17g, CPU %.17g", sq, want);
	ok(err.msg[0] == 0, "kernels: no launch error%s%s", err.msg[0] ? ": " : "", err.msg);
	free(p1), free(p2), free(gg), free(m1), free(v1), free(m2), free(v2);
}

/* ---- 16-byte packed paths against the scalar ones and the CPU ---------------------- */

/*
 * The memory-bound kernels move 16 bytes a load where the row length is
 * a multiple of 8 bf16 or 4 floats and every pointer is 16-byte aligned,
 * and one element a load otherwise (lib/nn/kernels.cuh, Packed128).
 * Each kernel runs twice per storage type and hidden size (C 64; with
 * GK_TEST_ODD_SHAPES C 48 and 36), B 3, T 37: on aligned buffers (the
 * packed path where C allows: C 64 and 48 do for both types, C 36 for
 * fp32 only) and on buffers one element past alignment (always
 * the scalar path). Where the order of additions is the same in both
 * (everything but the rows of LayerNorm and the norm's partial sums),
 * the two give the same bits, and the element-wise kernels the bits of
 * the CPU's functions; the rest is held to the CPU within bounds. Under
 * the CUDA emulation a misaligned 16-byte access stops the kernel.
 */
enum { PB = 3, PT = 37, PN = PB * PT, PV = 13 };

static size_t esize(gk_dtype dt)
{
	return dt == GK_DT_BF16 ? 2 : 4;
}
/* x rounded to what dt stores */
static void as_dt(float *x, size_t n, gk_dtype dt)
{
	if (dt == GK_DT_BF16)
		for (size_t i = 0; i < n; i++)
			x[i] = gk_bf16_to_f32(gk_f32_to_bf16(x[i]));
}
/* n values of x in dt on the device, off elements past a 256-byte
 * aligned allocation */
static void *put(const float *x, size_t n, gk_dtype dt, int off)
{
	size_t es = esize(dt);
	char *h = calloc(n + 8, es);
	for (size_t i = 0; i < n; i++) {
		if (dt == GK_DT_BF16) {
			uint16_t b = gk_f32_to_bf16(x[i]);
			memcpy(h + (i + off) * es, &b, 2);
		} else {
			memcpy(h + (i + off) * es, &x[i], 4);
		}
	}
	char *d = gpu_dev(h, (n + 8) * es);
	free(h);
	return d + off * es;
}
/* n floats of device scratch, off floats past alignment */
static float *scratch_at(size_t n, int off)
{
	return (float *)gpu_dev(NULL, (n + 8) * 4) + off;
}
static void get(float *x, const void *d, size_t n, gk_dtype dt)
{
	if (dt == GK_DT_BF16) {
		uint16_t *h = malloc(n * 2);
		gpu_back(h, d, n * 2);
		for (size_t i = 0; i < n; i++)
			x[i] = gk_bf16_to_f32(h[i]);
		free(h);
	} else {
		gpu_back(x, d, n * 4);
	}
}
static size_t differ(const float *a, const float *b, size_t n)
{
	size_t d = 0;
	for (size_t i = 0; i < n; i++)
		d += memcmp(&a[i], &b[i], 4) != 0;
	return d;
}

static void test_packed_shape(int C, gk_dtype dt)
{
	const char *tn = dt == GK_DT_BF16 ? "bf16" : "fp32";
	gk_err err = {0};
	size_t NC = (size_t)PN * C, chunks = gk_nn_colsum_chunks(PN);
	/* [0]: aligned, [1]: one element off */
	float *in = malloc(NC * 4), *in2 = malloc(NC * 4), *w = malloc(2 * C * 4);
	float *ref = malloc(NC * 4), *got[2] = {malloc(NC * 4), malloc(NC * 4)};
	float *wte = malloc(PV * C * 4), *wpe = malloc(PT * C * 4);
	float *g1 = malloc(PV * C * 4), *pe1 = malloc(PT * C * 4);
	float *g2[2] = {malloc(PV * C * 4), malloc(PV * C * 4)};
	float *pe2[2] = {malloc(PT * C * 4), malloc(PT * C * 4)};
	float mean[PN], rstd[PN], dmean[PN], drstd[PN];
	int32_t tok[PN], uniq[PN], start[PN + 1], pos[PN], count[PV];
	for (int i = 0; i < PN; i++)
		tok[i] = (i * 5) % PV;
	int32_t *dtok = gpu_dev(tok, sizeof(tok));

	/* encoder forward: one addition, the CPU's bits */
	fill(wte, (size_t)PV * C, 1.0f);
	fill(wpe, (size_t)PT * C, 1.0f);
	as_dt(wte, (size_t)PV * C, dt);
	as_dt(wpe, (size_t)PT * C, dt);
	gk_nn_cpu_encoder_fwd(ref, tok, wte, wpe, PB, PT, C, 1);
	as_dt(ref, NC, dt);
	for (int o = 0; o < 2; o++) {
		void *d = put(ref, NC, dt, o); /* overwritten */
		gk_nn_cu_encoder_fwd(d, dtok, put(wte, (size_t)PV * C, dt, o),
				     put(wpe, (size_t)PT * C, dt, o), dt, PB, PT, C, NULL, &err);
		get(got[o], d, NC, dt);
	}
	ok(differ(got[0], ref, NC) == 0 && differ(got[1], ref, NC) == 0,
	   "packed C %d %s: encoder forward, aligned and not, the CPU's bits", C, tn);

	/* encoder backward: the same sums each way; the CPU's within 1e-6 */
	fill(in, NC, 1.0f);
	as_dt(in, NC, dt);
	fill(g1, (size_t)PV * C, 1.0f);
	fill(pe1, (size_t)PT * C, 1.0f);
	int nb = gk_nn_token_buckets(tok, PN, PV, uniq, start, pos, count);
	int32_t *du = gpu_dev(uniq, sizeof(uniq)), *ds = gpu_dev(start, sizeof(start));
	int32_t *dp = gpu_dev(pos, sizeof(pos));
	for (int o = 0; o < 2; o++) {
		float *dw = put(g1, (size_t)PV * C, GK_DT_F32, o);
		float *dwp = put(pe1, (size_t)PT * C, GK_DT_F32, o);
		gk_nn_cu_encoder_bwd(dw, dwp, put(in, NC, dt, o), dt, du, ds, dp, nb, PB, PT, C,
				     NULL, &err);
		gpu_back(g2[o], dw, (size_t)PV * C * 4);
		gpu_back(pe2[o], dwp, (size_t)PT * C * 4);
	}
	gk_nn_cpu_encoder_bwd(g1, pe1, in, tok, PB, PT, C, 1);
	ok(differ(g2[0], g2[1], (size_t)PV * C) == 0 && differ(pe2[0], pe2[1], (size_t)PT * C) == 0,
	   "packed C %d %s: encoder backward, packed and scalar the same bits", C, tn);
	close_enough("packed: encoder backward wte", g2[0], g1, (size_t)PV * C, 1e-6, 1e-6);
	close_enough("packed: encoder backward wpe", pe2[0], pe1, (size_t)PT * C, 1e-6, 1e-6);

	/* LayerNorm forward: rows summed in another order, within bounds */
	double tol = dt == GK_DT_BF16 ? 1e-2 : 1e-5, rel = dt == GK_DT_BF16 ? 8e-3 : 1e-5;
	fill(in, NC, 3.0f);
	for (size_t i = 0; i < NC; i++)
		in[i] += 2.0f;
	as_dt(in, NC, dt);
	fill(w, 2 * C, 1.0f);
	as_dt(w, 2 * C, dt);
	gk_nn_cpu_layernorm_fwd(ref, mean, rstd, in, w, w + C, PN, C, 1e-5f, 1);
	void *dx[2], *dlw[2];
	float *dm[2], *dr[2];
	for (int o = 0; o < 2; o++) {
		void *d = put(ref, NC, dt, o);
		dx[o] = put(in, NC, dt, o);
		dlw[o] = put(w, 2 * C, dt, o);
		dm[o] = gpu_dev(NULL, PN * 4);
		dr[o] = gpu_dev(NULL, PN * 4);
		gk_nn_cu_layernorm_fwd(d, dm[o], dr[o], dx[o], dlw[o],
				       (char *)dlw[o] + C * esize(dt), dt, PN, C, 1e-5f, NULL, &err);
		get(got[o], d, NC, dt);
		gpu_back(dmean, dm[o], PN * 4);
		gpu_back(drstd, dr[o], PN * 4);
		close_enough(o ? "packed: layernorm forward, scalar" : "packed: layernorm forward",
			     got[o], ref, NC, tol, rel);
		close_enough("packed: layernorm forward, mean", dmean, mean, PN, 1e-6, 1e-5);
		close_enough("packed: layernorm forward, rstd", drstd, rstd, PN, 1e-6, 1e-5);
	}

	/* LayerNorm backward on the packed forward's statistics (both
	 * ways): dinp within bounds, dw and db the same bits */
	float *dout = malloc(NC * 4), *gw1 = malloc(2 * C * 4);
	float *gw2[2] = {malloc(2 * C * 4), malloc(2 * C * 4)};
	fill(dout, NC, 1.0f);
	as_dt(dout, NC, dt);
	fill(in2, NC, 1.0f);
	as_dt(in2, NC, dt);
	fill(gw1, 2 * C, 1.0f);
	for (int o = 0; o < 2; o++) {
		void *ddin = put(in2, NC, dt, o);
		float *dg = put(gw1, 2 * C, GK_DT_F32, o);
		float *scr = scratch_at(chunks * 2 * C, o);
		gk_nn_cu_layernorm_bwd(ddin, dg, dg + C, scr, put(dout, NC, dt, o), dx[o], dlw[o],
				       dm[0], dr[0], dt, PN, C, NULL, &err);
		get(got[o], ddin, NC, dt);
		gpu_back(gw2[o], dg, 2 * C * 4);
	}
	memcpy(ref, in2, NC * 4);
	gpu_back(mean, dm[0], PN * 4);
	gpu_back(rstd, dr[0], PN * 4);
	gk_nn_cpu_layernorm_bwd(ref, gw1, gw1 + C, dout, in, w, mean, rstd, PN, C, 1);
	close_enough("packed: layernorm backward, dinp", got[0], ref, NC,
		     dt == GK_DT_BF16 ? 2e-2 : 1e-5, dt == GK_DT_BF16 ? 8e-3 : 1e-4);
	close_enough("packed: layernorm backward, dinp, scalar", got[1], ref, NC,
		     dt == GK_DT_BF16 ? 2e-2 : 1e-5, dt == GK_DT_BF16 ? 8e-3 : 1e-4);
	ok(differ(gw2[0], gw2[1], 2 * C) == 0,
	   "packed C %d %s: layernorm dw and db, packed and scalar the same bits", C, tn);
	close_enough("packed: layernorm backward, dw and db", gw2[0], gw1, 2 * C, 1e-4, 1e-4);

	/* column sums (bias gradients) over 4C columns */
	float *cs = malloc(4 * NC * 4), cb1[4 * 64], cb2[2][4 * 64];
	fill(cs, 4 * NC, 1.0f);
	as_dt(cs, 4 * NC, dt);
	fill(cb1, 4 * C, 1.0f);
	for (int o = 0; o < 2; o++) {
		float *db = put(cb1, 4 * C, GK_DT_F32, o);
		float *scr = scratch_at(chunks * 4 * C, o);
		gk_nn_cu_colsum(db, scr, put(cs, 4 * NC, dt, o), dt, PN, 4 * C, NULL, &err);
		gpu_back(cb2[o], db, 4 * C * 4);
	}
	for (int c = 0; c < 4 * C; c++)
		for (int i = 0; i < PN; i++)
			cb1[c] += cs[(size_t)i * 4 * C + c];
	ok(differ(cb2[0], cb2[1], 4 * C) == 0,
	   "packed C %d %s: column sums, packed and scalar the same bits", C, tn);
	close_enough("packed: column sums", cb2[0], cb1, 4 * C, 1e-5, 1e-5);

	/* AdamW over T x C values and the working copy: the CPU's bits */
	size_t n = (size_t)PT * C;
	float *p1 = malloc(n * 4), *gg = malloc(n * 4), *m1 = malloc(n * 4), *v1 = malloc(n * 4);
	float *q[2][4];
	fill(p1, n, 1.0f);
	fill(gg, n, 0.1f);
	fill(m1, n, 0.01f);
	fill(v1, n, 0.0f);
	for (size_t i = 0; i < n; i++)
		v1[i] *= v1[i];
	gk_nn_adamw c = {0.9f, 0.95f, 1e-8f, 0.1f};
	gk_nn_adamw_k k;
	float decay;
	gk_nn_adamw_consts(&c, 1e-3f, 3, &k, &decay);
	for (int o = 0; o < 2; o++) {
		float *dpp = put(p1, n, GK_DT_F32, o), *dgg = put(gg, n, GK_DT_F32, o);
		float *dmm = put(m1, n, GK_DT_F32, o), *dvv = put(v1, n, GK_DT_F32, o);
		void *dpw = put(p1, n, dt, o);
		gk_nn_cu_adamw(dpp, dpw, dt, dgg, 0.5f, dmm, dvv, n, &k, decay, NULL, &err);
		for (int j = 0; j < 4; j++)
			q[o][j] = malloc(n * 4);
		gpu_back(q[o][0], dpp, n * 4);
		gpu_back(q[o][1], dmm, n * 4);
		gpu_back(q[o][2], dvv, n * 4);
		get(q[o][3], dpw, n, dt);
	}
	for (size_t i = 0; i < n; i++)
		gk_nn_adamw_elem(&p1[i], gg[i] * 0.5f, &m1[i], &v1[i], &k, decay);
	memcpy(ref, p1, n * 4);
	as_dt(ref, n, dt);
	for (int o = 0; o < 2; o++)
		ok(differ(q[o][0], p1, n) == 0 && differ(q[o][1], m1, n) == 0 &&
			   differ(q[o][2], v1, n) == 0 && differ(q[o][3], ref, n) == 0,
		   "packed C %d %s: AdamW %s, parameters, moments and working copy the CPU's bits",
		   C, tn, o ? "one element off (scalar)" : "aligned");

	/* sum of squares over n + 3 values (a tail after the float4s) */
	float *sq = malloc((n + 3) * 4);
	fill(sq, n + 3, 1.0f);
	double want = gk_nn_sumsq(sq, n + 3);
	for (int o = 0; o < 2; o++) {
		double *dn = gpu_dev(NULL, (GK_NN_SUM_BLOCKS + 1) * sizeof(double)), s2;
		gk_nn_cu_sumsq(dn + GK_NN_SUM_BLOCKS, dn, put(sq, n + 3, GK_DT_F32, o), n + 3,
			       NULL, &err);
		gpu_back(&s2, dn + GK_NN_SUM_BLOCKS, sizeof(s2));
		ok(fabs(s2 - want) <= 1e-12 * want, "packed C %d: sum of squares%s %.17g, CPU %.17g",
		   C, o ? " (one off)" : "", s2, want);
	}
	ok(err.msg[0] == 0, "packed C %d %s: no launch error%s%s", C, tn, err.msg[0] ? ": " : "",
	   err.msg);
	for (int o = 0; o < 2; o++) {
		free(got[o]), free(g2[o]), free(pe2[o]), free(gw2[o]);
		for (int j = 0; j < 4; j++)
			free(q[o][j]);
	}
	free(in), free(in2), free(w), free(ref), free(wte), free(wpe), free(g1), free(pe1);
	free(dout), free(gw1), free(cs), free(p1), free(gg), free(m1), free(v1), free(sq);
}

static void test_packed(void)
{
#ifdef GK_TEST_ODD_SHAPES
	static const int Cs[] = {48, 36};
#else
	static const int Cs[] = {64};
#endif
	for (size_t i = 0; i < sizeof(Cs) / sizeof(Cs[0]); i++) {
		test_packed_shape(Cs[i], GK_DT_F32);
		test_packed_shape(Cs[i], GK_DT_BF16);
	}
}
#endif

/* ---- whole model: CPU vs GPU ------------------------------------------------------------ */

static gk_nn_model *model(int device, int prec, gk_err *err)
{
	gk_nn_config c = cfg();
	gk_nn_opts o = {.batch = B, .seq = T, .threads = 1, .device = device,
			.precision = prec};
	gk_nn_model *m = NULL;
	if (gk_nn_new(&m, &c, &o, err) < 0)
		return NULL;
	gk_nn_init(m, 7);
	if (gk_nn_cuda_upload(m, GK_NN_PARAMS, err) < 0) {
		gk_nn_free(m);
		return NULL;
	}
	return m;
}

static void batch(int32_t *tok, int32_t *tgt, int step)
{
	for (int i = 0; i < B * T; i++) {
		tok[i] = (i * 7 + step * 3) % 100;
		tgt[i] = (i * 7 + step * 3 + 7) % 100;
	}
}

/* Ten steps of forward, backward, AdamW; losses[10]. */
static int train(gk_nn_model *m, int cuda, float *losses, gk_err *err)
{
	gk_nn_adamw c = {0.9f, 0.95f, 1e-8f, 0.1f};
	size_t n = gk_nn_nparams(m);
	float *mo = calloc(n, 4), *ve = calloc(n, 4);
	int32_t tok[B * T], tgt[B * T];
	int rc = 0;
	for (int s = 0; s < 10 && rc == 0; s++) {
		batch(tok, tgt, s);
		gk_nn_zero_grad(m);
		rc = gk_nn_forward(m, tok, tgt, &losses[s], err);
		if (rc == 0)
			rc = gk_nn_backward(m, 1.0f, NULL, NULL, err);
		if (rc == 0 && cuda)
			rc = gk_nn_cuda_adamw(m, &c, 1e-3f, s + 1, 0.75f, 0, n, NULL, err);
		else if (rc == 0)
			gk_nn_adamw_step(m, &c, 1e-3f, s + 1, 0, n, gk_nn_params(m),
					 gk_nn_grads(m), 0.75f, mo, ve);
	}
	free(mo);
	free(ve);
	return rc;
}

/* Forward (evaluation or training, gk_nn_set_eval) and backward(scale)
 * from zero gradients: loss and gradients into *l, g. */
static int step_as(gk_nn_model *m, int eval, float scale, const int32_t *tok,
		   const int32_t *tgt, float *l, float *g, size_t n, gk_err *err)
{
	gk_nn_set_eval(m, eval);
	gk_nn_zero_grad(m);
	int rc = gk_nn_forward(m, tok, tgt, l, err) == 0 &&
		 gk_nn_backward(m, scale, NULL, NULL, err) == 0 &&
		 gk_nn_cuda_download(m, GK_NN_GRADS, err) == 0;
	gk_nn_set_eval(m, 0);
	if (rc)
		memcpy(g, gk_nn_grads(m), n * 4);
	return rc;
}

/*
 * The classifier's two paths through a step (fp32, model m after a
 * training step at scale 1 whose loss and gradients were l0, g0): a
 * training forward writes dlogits for the scale of the backward before
 * it (one kernel), an evaluation forward leaves the logits and backward
 * computes them (two kernels). The same loss and gradients, bit for bit,
 * where the scales agree; a backward at a scale other than the
 * forward's rescales the head's GEMMs: by 1/4, exactly the gradients
 * times 1/4; by 1/3 from 1/4, within fp32 rounding of the direct path,
 * which gk_nn_set_grad_scale(1/3) takes.
 */
static void classifier_paths(gk_nn_model *m, const int32_t *tok, const int32_t *tgt,
			     float l0, const float *g0, size_t n)
{
	gk_err err = {0};
	float *ge = malloc(n * 4), *gq = malloc(n * 4), *gt = malloc(n * 4);
	float le, lt, lq;
	int rc = step_as(m, 1, 1.0f, tok, tgt, &le, ge, n, &err);
	ok(rc && le == l0 && memcmp(g0, ge, n * 4) == 0,
	   "classifier: an evaluation forward then backward, the training step's loss and "
	   "gradients, bit for bit%s%s", err.msg[0] ? ": " : "", err.msg);
	/* training forward at 1 (the last backward's), backward at 1/4 */
	rc = rc && step_as(m, 0, 0.25f, tok, tgt, &lq, gq, n, &err);
	int quarter = rc && lq == l0;
	for (size_t i = 0; quarter && i < n; i++)
		quarter = gq[i] == 0.25f * g0[i];
	ok(quarter, "classifier: dlogits for scale 1, backward at 1/4: the gradients times 1/4, "
	   "bit for bit");
	/* the last backward's 1/4 expected, then 1/3 as set */
	float third = 1.0f / 3.0f;
	rc = rc && step_as(m, 0, third, tok, tgt, &lq, gq, n, &err);
	gk_nn_set_grad_scale(m, third);
	rc = rc && step_as(m, 0, third, tok, tgt, &lt, gt, n, &err) &&
	     step_as(m, 1, third, tok, tgt, &le, ge, n, &err);
	double big = 0;
	for (size_t i = 0; rc && i < n; i++)
		big = fmax(big, fabs(ge[i]));
	ok(rc && lq == l0 && lt == l0 && le == l0 && memcmp(gt, ge, n * 4) == 0 &&
		   worst(gq, ge, n, 1e-6 * big, 1e-5, NULL) <= 1.0,
	   "classifier: scale 1/3 set (gk_nn_set_grad_scale), the evaluation path's bits; 1/3 "
	   "where 1/4 was expected within 1e-6 max|g| + 1e-5|ref| of them");
	free(ge);
	free(gq);
	free(gt);
}

static void test_model(void)
{
	gk_err err = {0};
	gk_cuda_mem_stats before, after;
	gk_nn_model *cpu = model(GK_NN_CPU, 0, &err);
	gk_cuda_mem_stats_get(&before);
	gk_nn_model *g32 = model(GK_NN_CUDA, GK_NN_FP32, &err);
	gk_cuda_mem_stats_get(&after);
	if (!ok(cpu && g32, "models: CPU and GPU (fp32)%s%s", err.msg[0] ? ": " : "", err.msg))
		return;
	size_t n = gk_nn_nparams(cpu);

	/* round trip: what the device holds is what the host had */
	float *orig = malloc(n * 4);
	memcpy(orig, gk_nn_params(g32), n * 4);
	memset(gk_nn_params(g32), 0, n * 4);
	ok(gk_nn_cuda_download(g32, GK_NN_PARAMS, &err) == 0 &&
	   memcmp(orig, gk_nn_params(g32), n * 4) == 0,
	   "parameters: host -> device -> host unchanged (checkpoint layout)");
	free(orig);

	gk_nn_mem mem;
	gk_nn_memory(g32, &mem);
	is_u64(mem.parameters, n * 4, "memory: fp32 parameters are the master only");
	is_u64(mem.gradients, n * 4, "memory: fp32 gradients");
	ok(mem.activations > 0 && mem.workspace > 0, "memory: activations %llu, workspace %llu",
	   (unsigned long long)mem.activations, (unsigned long long)mem.workspace);
	is_u64(mem.parameters + mem.gradients + mem.activations + mem.workspace +
		       mem.optimizer,
	       after.total - before.total,
	       "memory: the categories add up to lib/cuda's count of the model's allocations");
	is_u64(after.bytes[GK_CUDA_MEM_ACTS] - before.bytes[GK_CUDA_MEM_ACTS],
	       mem.activations, "memory: activations as lib/cuda counted them");

	/* one step */
	int32_t tok[B * T], tgt[B * T];
	batch(tok, tgt, 0);
	tgt[3] = -1; /* an ignored position */
	float l1, l2;
	gk_nn_zero_grad(cpu);
	gk_nn_zero_grad(g32);
	int rc = gk_nn_forward(cpu, tok, tgt, &l1, &err) == 0 &&
		 gk_nn_backward(cpu, 1.0f, NULL, NULL, &err) == 0 &&
		 gk_nn_forward(g32, tok, tgt, &l2, &err) == 0 &&
		 gk_nn_backward(g32, 1.0f, NULL, NULL, &err) == 0 &&
		 gk_nn_cuda_download(g32, GK_NN_GRADS, &err) == 0;
	if (!ok(rc, "one step on both%s%s", err.msg[0] ? ": " : "", err.msg))
		return;
	ok(fabsf(l1 - l2) <= 1e-5f * fabsf(l1), "one step fp32: loss %.7f, CPU %.7f", l2, l1);
	size_t nt;
	const gk_nn_tensor *t = gk_nn_tensors(cpu, &nt);
	int bad = 0;
	for (size_t i = 0; i < nt; i++) {
		size_t at = 0;
		/* absolute floor from the largest gradient of the tensor */
		double big = 0;
		for (size_t j = 0; j < t[i].numel; j++)
			big = fmax(big, fabs(gk_nn_grads(cpu)[t[i].off + j]));
		double w = worst(gk_nn_grads(g32) + t[i].off,
				 gk_nn_grads(cpu) + t[i].off, t[i].numel,
				 1e-4 * big + 1e-9, 1e-3, &at);
		if (w > 1.0) {
			diag("%s[%zu]: got %g want %g", t[i].name, at,
			     gk_nn_grads(g32)[t[i].off + at],
			     gk_nn_grads(cpu)[t[i].off + at]);
			bad++;
		}
	}
	ok(bad == 0, "one step fp32: every gradient within 1e-4 max|g| + 1e-3|ref| (%zu tensors)", nt);

	/* recompute modes give the same bits on the device too */
	gk_nn_config c = cfg();
	gk_nn_opts o = {.batch = B, .seq = T, .device = GK_NN_CUDA,
			.precision = GK_NN_FP32, .recompute = GK_NN_RECOMPUTE_LAYER};
	gk_nn_model *lay = NULL;
	float l3;
	float *gref = malloc(n * 4);
	memcpy(gref, gk_nn_grads(g32), n * 4);
	if (gk_nn_new(&lay, &c, &o, &err) == 0) {
		gk_nn_init(lay, 7);
		rc = gk_nn_cuda_upload(lay, GK_NN_PARAMS, &err) == 0 &&
		     gk_nn_forward(lay, tok, tgt, &l3, &err) == 0 &&
		     gk_nn_backward(lay, 1.0f, NULL, NULL, &err) == 0 &&
		     gk_nn_cuda_download(lay, GK_NN_GRADS, &err) == 0;
		ok(rc && l3 == l2 && memcmp(gref, gk_nn_grads(lay), n * 4) == 0,
		   "recompute LAYER: same loss and gradients, bit for bit");
		gk_nn_free(lay);
	} else {
		ok(0, "recompute LAYER model: %s", err.msg);
	}
	classifier_paths(g32, tok, tgt, l2, gref, n);
	free(gref);

	/* bf16: one step's loss */
	gk_nn_model *b16 = model(GK_NN_CUDA, GK_NN_BF16, &err);
	float lb;
	rc = b16 && gk_nn_forward(b16, tok, tgt, &lb, &err) == 0;
	ok(rc && fabsf(lb - l1) <= 0.02f + 0.01f * fabsf(l1),
	   "one step bf16: loss %.5f, CPU fp32 %.5f (within 0.02 + 1%%)", lb, l1);
	gk_nn_memory(b16, &mem);
	is_u64(mem.parameters, n * 4 + n * 2, "memory: bf16 adds a 2-byte working copy");
	gk_nn_free(b16);

	/* ten steps: CPU fp32 against GPU bf16 */
	float lc[10], lg[10], lg2[10];
	gk_nn_free(cpu);
	gk_nn_free(g32);
	cpu = model(GK_NN_CPU, 0, &err);
	b16 = model(GK_NN_CUDA, GK_NN_BF16, &err);
	rc = cpu && b16 && train(cpu, 0, lc, &err) == 0 &&
	     train(b16, 1, lg, &err) == 0;
	if (ok(rc, "ten steps on both%s%s", err.msg[0] ? ": " : "", err.msg)) {
		int within = 1;
		for (int s = 0; s < 10; s++) {
			diag("step %d: CPU fp32 %.5f  GPU bf16 %.5f", s + 1, lc[s], lg[s]);
			within &= fabsf(lg[s] - lc[s]) <= 0.03f + 0.01f * fabsf(lc[s]);
		}
		ok(within, "ten steps: GPU bf16 losses within 0.03 + 1%% of the CPU's fp32");
		ok(lg[9] < lg[0], "ten steps: the GPU's loss falls (%.4f -> %.4f)", lg[0], lg[9]);
		gk_nn_memory(b16, &mem);
		is_u64(mem.optimizer, 2 * n * 4, "memory: AdamW moments, 8 bytes a parameter");
	}
	/* determinism: the same run again */
	gk_nn_model *again = model(GK_NN_CUDA, GK_NN_BF16, &err);
	rc = again && train(again, 1, lg2, &err) == 0 &&
	     gk_nn_cuda_download(again, GK_NN_PARAMS, &err) == 0 &&
	     gk_nn_cuda_download(b16, GK_NN_PARAMS, &err) == 0;
	ok(rc && memcmp(lg, lg2, sizeof(lg)) == 0 &&
	   memcmp(gk_nn_params(again), gk_nn_params(b16), n * 4) == 0,
	   "determinism: same seed, same ten losses and parameters, bit for bit");

	/*
	 * A resume through the host (what gpu-train's checkpoints do):
	 * parameters and moments downloaded, uploaded into a fresh model;
	 * step 11 on both gives the same bits. Gradients uploaded come back.
	 */
	size_t nb = n * 4;
	float *mo = malloc(nb), *ve = malloc(nb), *gsave = malloc(nb);
	gk_nn_model *cont = model(GK_NN_CUDA, GK_NN_BF16, &err);
	gk_nn_adamw ad = {0.9f, 0.95f, 1e-8f, 0.1f};
	float la, lr2;
	rc = cont && gk_nn_cuda_moments(again, 0, n, mo, ve, 0, &err) == 0;
	if (rc) {
		memcpy(gk_nn_params(cont), gk_nn_params(again), nb);
		rc = gk_nn_cuda_upload(cont, GK_NN_PARAMS, &err) == 0 &&
		     gk_nn_cuda_moments(cont, 0, n, mo, ve, 1, &err) == 0;
	}
	gk_nn_model *pair[2] = {again, cont};
	float *lp[2] = {&la, &lr2};
	batch(tok, tgt, 10);
	for (int k = 0; k < 2 && rc; k++) {
		gk_nn_zero_grad(pair[k]);
		rc = gk_nn_forward(pair[k], tok, tgt, lp[k], &err) == 0 &&
		     gk_nn_backward(pair[k], 1.0f, NULL, NULL, &err) == 0 &&
		     gk_nn_cuda_adamw(pair[k], &ad, 1e-3f, 11, 1.0f, 0, n, NULL, &err) == 0 &&
		     gk_nn_cuda_download(pair[k], GK_NN_PARAMS | GK_NN_GRADS, &err) == 0;
	}
	ok(rc && la == lr2 && memcmp(gk_nn_params(again), gk_nn_params(cont), nb) == 0,
	   "moments and parameters through the host: step 11 the same, bit for bit%s%s",
	   err.msg[0] ? ": " : "", err.msg);
	if (rc) {
		for (size_t i = 0; i < n; i++)
			gk_nn_grads(cont)[i] = (float)i * 0x1p-20f - 1.0f;
		memcpy(gsave, gk_nn_grads(cont), nb);
		rc = gk_nn_cuda_upload(cont, GK_NN_GRADS, &err) == 0 &&
		     gk_nn_cuda_download(cont, GK_NN_GRADS, &err) == 0;
	}
	ok(rc && memcmp(gsave, gk_nn_grads(cont), nb) == 0,
	   "gradients uploaded come back unchanged");
	free(mo);
	free(ve);
	free(gsave);
	gk_nn_free(cont);
	gk_nn_free(again);
	gk_nn_free(b16);
	gk_nn_free(cpu);
}

/* Lines of the emulation's GEMM manifest naming an epilogue. */
static int manifest_count(const char *path, const char *epilogue)
{
	FILE *f = fopen(path, "r");
	char line[512], want[64];
	int n = 0;
	snprintf(want, sizeof want, " epilogue %s\n", epilogue);
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		size_t ll = strlen(line), wl = strlen(want);
		n += ll >= wl && strcmp(line + ll - wl, want) == 0;
	}
	fclose(f);
	return n;
}

/*
 * GK_CUDA_GELU=epilogue and =kernel at each precision: one step's loss
 * against the CPU's (fp32 and TF32 also every gradient, fp32 within the
 * one-step test's bounds, TF32 within 1e-2 max|g| + 2e-2|ref|, inputs
 * rounded to 10 bits), the epilogue's gradients against the kernels'
 * within the same bounds, the same device memory both ways. On the
 * emulation (GK_CUEMU) its manifest shows the epilogues: c_fc's forward
 * GELU_AUX_BIAS and c_proj's input gradient once per layer, DGELU_BGRAD
 * in fp32 and TF32 (c_fc's bias gradient summed there), DGELU in bf16
 * (a bf16 sum there; colsum.cu sums it in fp32), and none of them from
 * the kernel path.
 */
static void test_gelu_epilogue(void)
{
	static const struct { int prec; const char *name; double abs, rel; } P[] = {
		{GK_NN_FP32, "fp32", 1e-4, 1e-3},
		{GK_NN_TF32, "tf32", 1e-2, 2e-2},
		{GK_NN_BF16, "bf16", 0, 0},
	};
	static const char *const way[2] = {"kernel", "epilogue"};
	gk_err err = {0};
	gk_nn_config c = cfg();
	const char *cuemu = getenv("GK_CUEMU");
	char log[64];
	snprintf(log, sizeof log, "nn_cuda-gemm.%d.log", (int)getpid());
	int32_t tok[B * T], tgt[B * T];
	batch(tok, tgt, 0);
	gk_nn_model *cpu = model(GK_NN_CPU, 0, &err);
	float lc;
	if (!ok(cpu && gk_nn_forward(cpu, tok, tgt, &lc, &err) == 0 &&
		gk_nn_backward(cpu, 1.0f, NULL, NULL, &err) == 0,
		"GELU: CPU reference step%s%s", err.msg[0] ? ": " : "", err.msg))
		return;
	size_t n = gk_nn_nparams(cpu), nt;
	const gk_nn_tensor *t = gk_nn_tensors(cpu, &nt);
	for (size_t p = 0; p < sizeof P / sizeof P[0]; p++) {
		float loss[2] = {0, 0};
		float *g[2] = {malloc(n * 4), malloc(n * 4)};
		gk_nn_mem mem[2];
		memset(mem, 0, sizeof mem);
		for (int w = 0; w < 2; w++) {
			setenv("GK_CUDA_GELU", way[w], 1);
			gk_nn_opts o = {.batch = B, .seq = T, .device = GK_NN_CUDA,
					.precision = P[p].prec};
			ok(gk_nn_gelu_epilogue(&c, &o, &err) == w,
			   "GELU %s %s: the model's choice", P[p].name, way[w]);
			remove(log);
			if (cuemu)
				setenv("CUEMU_GEMM_LOG", log, 1);
			gk_nn_model *m = model(GK_NN_CUDA, P[p].prec, &err);
			int rc = m && gk_nn_forward(m, tok, tgt, &loss[w], &err) == 0 &&
				 gk_nn_backward(m, 1.0f, NULL, NULL, &err) == 0 &&
				 gk_nn_cuda_download(m, GK_NN_GRADS, &err) == 0;
			unsetenv("CUEMU_GEMM_LOG");
			if (!ok(rc, "GELU %s %s: one step%s%s", P[p].name, way[w],
				err.msg[0] ? ": " : "", err.msg)) {
				gk_nn_free(m);
				continue;
			}
			memcpy(g[w], gk_nn_grads(m), n * 4);
			gk_nn_memory(m, &mem[w]);
			gk_nn_free(m);
			if (P[p].prec == GK_NN_BF16)
				ok(fabsf(loss[w] - lc) <= 0.02f + 0.01f * fabsf(lc),
				   "GELU bf16 %s: loss %.5f, CPU fp32 %.5f (within 0.02 + 1%%)",
				   way[w], loss[w], lc);
			else
				ok(fabsf(loss[w] - lc) <= (P[p].prec == GK_NN_FP32 ? 1e-5f : 1e-3f) *
								  fabsf(lc),
				   "GELU %s %s: loss %.7f, CPU %.7f", P[p].name, way[w], loss[w], lc);
			if (cuemu) {
				int L = (int)c.layers;
				int fused = P[p].prec != GK_NN_BF16;
				int fwd = manifest_count(log, "GELU_AUX_BIAS");
				int bwd = manifest_count(log, "DGELU");
				int bgr = manifest_count(log, "DGELU_BGRAD");
				int wb = w && fused ? L : 0, wd = w && !fused ? L : 0;
				ok(fwd == (w ? L : 0) && bwd == wd && bgr == wb,
				   "GELU %s %s: the manifest has %d GELU_AUX_BIAS, %d DGELU and %d "
				   "DGELU_BGRAD GEMMs (want %d, %d, %d)", P[p].name, way[w], fwd, bwd,
				   bgr, w ? L : 0, wd, wb);
			}
		}
		remove(log);
		ok(mem[1].activations == mem[0].activations && mem[1].workspace == mem[0].workspace,
		   "GELU %s: the same activations (%llu bytes) and scratch (%llu) both ways",
		   P[p].name, (unsigned long long)mem[1].activations,
		   (unsigned long long)mem[1].workspace);
		if (P[p].prec != GK_NN_BF16) {
			/* each way against the CPU, and the two against each other */
			const float *ref[3] = {gk_nn_grads(cpu), gk_nn_grads(cpu), g[0]};
			const float *got[3] = {g[0], g[1], g[1]};
			static const char *const what[3] = {"kernel vs CPU", "epilogue vs CPU",
							    "epilogue vs kernel"};
			for (int k = 0; k < 3; k++) {
				int bad = 0;
				for (size_t i = 0; i < nt; i++) {
					double big = 0;
					size_t at = 0;
					for (size_t j = 0; j < t[i].numel; j++)
						big = fmax(big, fabs(ref[k][t[i].off + j]));
					if (worst(got[k] + t[i].off, ref[k] + t[i].off, t[i].numel,
						  P[p].abs * big + 1e-9, P[p].rel, &at) > 1.0) {
						diag("%s %s: %s[%zu]: got %g want %g", P[p].name, what[k],
						     t[i].name, at, got[k][t[i].off + at],
						     ref[k][t[i].off + at]);
						bad++;
					}
				}
				ok(bad == 0, "GELU %s, %s: every gradient within %g max|g| + %g|ref|",
				   P[p].name, what[k], P[p].abs, P[p].rel);
			}
		}
		free(g[0]);
		free(g[1]);
	}

	/* --recompute gelu with the epilogue: the forward's GELU in the
	 * epilogue, backward's again by the kernel from the kept input */
	setenv("GK_CUDA_GELU", "epilogue", 1);
	gk_nn_opts o = {.batch = B, .seq = T, .device = GK_NN_CUDA, .precision = GK_NN_FP32,
			.recompute = GK_NN_RECOMPUTE_GELU};
	gk_nn_model *rg = NULL;
	float lr = 0;
	int rc = gk_nn_new(&rg, &c, &o, &err) == 0;
	if (rc) {
		gk_nn_init(rg, 7);
		rc = gk_nn_cuda_upload(rg, GK_NN_PARAMS, &err) == 0 &&
		     gk_nn_forward(rg, tok, tgt, &lr, &err) == 0 &&
		     gk_nn_backward(rg, 1.0f, NULL, NULL, &err) == 0 &&
		     gk_nn_cuda_download(rg, GK_NN_GRADS, &err) == 0;
	}
	int bad = 0;
	for (size_t i = 0; rc && i < nt; i++) {
		double big = 0;
		size_t at = 0;
		for (size_t j = 0; j < t[i].numel; j++)
			big = fmax(big, fabs(gk_nn_grads(cpu)[t[i].off + j]));
		bad += worst(gk_nn_grads(rg) + t[i].off, gk_nn_grads(cpu) + t[i].off, t[i].numel,
			     1e-4 * big + 1e-9, 1e-3, &at) > 1.0;
	}
	ok(rc && bad == 0 && fabsf(lr - lc) <= 1e-5f * fabsf(lc),
	   "GELU fp32 epilogue, recompute gelu: loss %.7f and every gradient as the CPU's%s%s", lr,
	   err.msg[0] ? ": " : "", err.msg);
	gk_nn_free(rg);
	unsetenv("GK_CUDA_GELU");
	gk_nn_free(cpu);
}

#if GK_HAVE_CUDA
/*
 * c_proj's input gradient with c_fc's bias gradient in its epilogue
 * (DGELU_BGRAD) against the unfused way (DGELU, then colsum.cu's column
 * sums), at the model's shapes (B*T rows, 4C columns, C deep), fp32 and
 * TF32: D bit for bit (the same epilogue), the bias gradient within fp32
 * rounding of the column sums (another order of the same fp32 sums) and
 * of a double reference, written where the sums are added (the buffer's
 * old values gone); colsum_add adds it to a gradient exactly (one fp32
 * addition each). matmul refuses a bias gradient without DGELU or off a
 * 16-byte boundary.
 */
static void test_dgelu_bgrad(void)
{
	gk_nn_config c = cfg();
	int N = B * T, C = (int)c.hidden, F = 4 * C;
	size_t nd = (size_t)N * F, ws_bytes = (size_t)4 << 20;
	float *dout = malloc((size_t)N * C * 4), *w = malloc((size_t)F * C * 4);
	float *pre = malloc(nd * 4), *d1 = malloc(nd * 4), *d2 = malloc(nd * 4);
	float *g1 = malloc(F * 4), *g2 = malloc(F * 4), *acc = malloc(F * 4);
	double *want = calloc(F, sizeof(double));
	static const struct { int prec; const char *name; } P[] = {
		{GK_NN_FP32, "fp32"}, {GK_NN_TF32, "tf32"}};
	fill(dout, (size_t)N * C, 1.0f);
	fill(w, (size_t)F * C, 0.5f);
	fill(pre, nd, 3.0f);
	fill(acc, F, 1.0f);
	void *ddout = gpu_dev(dout, (size_t)N * C * 4), *dw = gpu_dev(w, (size_t)F * C * 4);
	void *dpre = gpu_dev(pre, nd * 4), *dd1 = gpu_dev(NULL, nd * 4);
	void *dd2 = gpu_dev(NULL, nd * 4), *ws = gpu_dev(NULL, ws_bytes);
	float *scr = gpu_dev(NULL, (size_t)gk_nn_colsum_chunks(N) * F * 4);
	float *dg = gpu_dev(NULL, (size_t)F * 4 + 16);
	for (size_t p = 0; p < sizeof P / sizeof P[0]; p++) {
		gk_err err = {0};
		gk_nn_blas *bl = NULL;
		float *zero = calloc(F, 4), *junk = malloc(F * 4);
		fill(junk, F, 100.0f);
		float *dcs = gpu_dev(zero, (size_t)F * 4);
		gk_cuda_copy(dg, junk, (size_t)F * 4, NULL, &err);
		gk_nn_gemm g = {.tb = 1, .M = N, .N = F, .K = C, .A = ddout, .lda = C, .B = dw,
				.ldb = C, .D = dd1, .ldd = F, .alpha = 1.0f, .batch = 1,
				.dt = GK_DT_F32, .ddt = GK_DT_F32, .gelu = GK_NN_GEMM_DGELU,
				.aux = dpre, .ldaux = F, .dbias = dg};
		int rc = gk_nn_blas_new(&bl, P[p].prec, ws, ws_bytes, NULL, &err) == 0 &&
			 gk_nn_blas_gemm(bl, &g, &err) == 0;
		g.D = dd2, g.dbias = NULL;
		rc = rc && gk_nn_blas_gemm(bl, &g, &err) == 0 &&
		     gk_nn_cu_colsum(dcs, scr, dd2, GK_DT_F32, N, F, NULL, &err) == 0 &&
		     gk_cuda_stream_sync(NULL, &err) == 0;
		if (!ok(rc, "DGELU_BGRAD %s at %d x %d x %d: both ways ran%s%s", P[p].name, N, F,
			C, err.msg[0] ? ": " : "", err.msg)) {
			gk_nn_blas_free(bl);
			free(zero), free(junk);
			continue;
		}
		gpu_back(d1, dd1, nd * 4);
		gpu_back(d2, dd2, nd * 4);
		gpu_back(g1, dg, (size_t)F * 4);
		gpu_back(g2, dcs, (size_t)F * 4);
		ok(memcmp(d1, d2, nd * 4) == 0, "DGELU_BGRAD %s: D is DGELU's, bit for bit",
		   P[p].name);
		double big = 0; /* the largest sum of magnitudes */
		for (int j = 0; j < F; j++) {
			double mag = 0;
			want[j] = 0;
			for (int i = 0; i < N; i++) {
				want[j] += d2[(size_t)i * F + j];
				mag += fabs(d2[(size_t)i * F + j]);
			}
			big = fmax(big, mag);
			zero[j] = (float)want[j];
		}
		/* N - 1 fp32 additions each way, in any order: each sum within
		 * (N - 1) 2^-24 of its magnitudes' sum of the exact one */
		close_enough("DGELU_BGRAD: the bias gradient against colsum.cu's", g1, g2, F,
			     N * 0x1p-23 * big, 0);
		close_enough("DGELU_BGRAD: the bias gradient against a double sum", g1, zero, F,
			     N * 0x1p-23 * big, 0);
		/* db += the epilogue's sums, as colsum.cu's second pass adds */
		float *dacc = gpu_dev(acc, (size_t)F * 4);
		int exact = gk_nn_cu_colsum_add(dacc, dg, F, NULL, &err) == 0;
		gpu_back(zero, dacc, (size_t)F * 4);
		for (int j = 0; exact && j < F; j++)
			exact = zero[j] == acc[j] + g1[j];
		ok(exact, "colsum_add %s: each gradient plus the epilogue's sum, one fp32 addition",
		   P[p].name);
		/* what matmul refuses */
		g.dbias = dg, g.gelu = GK_NN_GEMM_PLAIN, g.aux = NULL;
		ok(gk_nn_blas_gemm(bl, &g, &err) < 0 && strstr(err.msg, "DGELU epilogue only"),
		   "matmul: a bias gradient without DGELU is refused (%s)", err.msg);
		memset(&err, 0, sizeof err);
		g.gelu = GK_NN_GEMM_DGELU, g.aux = dpre, g.dbias = (char *)dg + 4;
		ok(gk_nn_blas_gemm(bl, &g, &err) < 0 && strstr(err.msg, "16-byte boundary"),
		   "matmul: a bias gradient off a 16-byte boundary is refused (%s)", err.msg);
		gk_nn_blas_free(bl);
		free(zero), free(junk);
	}
	free(dout), free(w), free(pre), free(d1), free(d2), free(g1), free(g2), free(acc);
	free(want);
}
#endif

/*
 * ZeRO-1 on the device (gpu-train --zero 1): AdamW over two ranges of the
 * flat buffer, cut inside a tensor, on two models with the same
 * parameters and gradients, gives the bits of one model's update over
 * all of it, the gradients of a range given by pointer too; the sums of
 * squares of the ranges add up to the whole's; the moments keep the
 * range they were made for; the working copy follows the master.
 */
static void test_ranges(void)
{
	gk_err err = {0};
	gk_nn_model *all = model(GK_NN_CUDA, GK_NN_BF16, &err);
	gk_nn_model *part[2] = {model(GK_NN_CUDA, GK_NN_BF16, &err),
				model(GK_NN_CUDA, GK_NN_BF16, &err)};
	if (!ok(all && part[0] && part[1], "three models on the device%s%s",
		err.msg[0] ? ": " : "", err.msg))
		goto out;
	size_t n = gk_nn_nparams(all), h = n / 2 + 3; /* inside a tensor */
	int32_t tok[B * T], tgt[B * T];
	float l;
	gk_nn_adamw ad = {0.9f, 0.95f, 1e-8f, 0.1f};
	gk_nn_model *ms[3] = {all, part[0], part[1]};
	batch(tok, tgt, 3);
	int rc = 1;
	for (int k = 0; k < 3 && rc; k++) {
		gk_nn_zero_grad(ms[k]);
		rc = gk_nn_forward(ms[k], tok, tgt, &l, &err) == 0 &&
		     gk_nn_backward(ms[k], 1.0f, NULL, NULL, &err) == 0;
	}
	double whole = 0, lo = 0, hi = 0;
	rc = rc && gk_nn_cuda_sumsq(all, gk_nn_cuda_grads(all, 0), n, &whole, &err) == 0 &&
	     gk_nn_cuda_sumsq(all, gk_nn_cuda_grads(all, 0), h, &lo, &err) == 0 &&
	     gk_nn_cuda_sumsq(all, gk_nn_cuda_grads(all, h), n - h, &hi, &err) == 0;
	ok(rc && whole > 0 && fabs(lo + hi - whole) <= 1e-12 * whole,
	   "sums of squares of the two ranges add up to the whole's");
	for (int s = 1; s <= 2 && rc; s++)
		rc = gk_nn_cuda_adamw(all, &ad, 1e-3f, s, 0.5f, 0, n, NULL, &err) == 0 &&
		     gk_nn_cuda_adamw(part[0], &ad, 1e-3f, s, 0.5f, 0, h, NULL, &err) == 0 &&
		     gk_nn_cuda_adamw(part[1], &ad, 1e-3f, s, 0.5f, h, n,
				      gk_nn_cuda_grads(part[1], h), &err) == 0;
	rc = rc && gk_nn_cuda_download(all, GK_NN_PARAMS, &err) == 0 &&
	     gk_nn_cuda_download(part[0], GK_NN_PARAMS, &err) == 0 &&
	     gk_nn_cuda_download(part[1], GK_NN_PARAMS, &err) == 0;
	ok(rc && memcmp(gk_nn_params(all), gk_nn_params(part[0]), h * 4) == 0 &&
	   memcmp(gk_nn_params(all) + h, gk_nn_params(part[1]) + h, (n - h) * 4) == 0,
	   "AdamW over [0, h) and [h, n): the bits of AdamW over [0, n)%s%s",
	   err.msg[0] ? ": " : "", err.msg);
	float *mo = malloc((n - h) * 4), *ve = malloc((n - h) * 4);
	gk_err e2 = {0};
	ok(gk_nn_cuda_moments(part[1], 0, n, mo, ve, 0, &e2) < 0 &&
	   strstr(e2.msg, "they cover") != NULL, "moments of another range refused: %s", e2.msg);
	ok(gk_nn_cuda_moments(part[1], h, n, mo, ve, 0, &err) == 0, "moments of the range");
	free(mo);
	free(ve);
	/* a pipeline's last stage: a second range beside the first (the
	 * tied wte; one across it is refused above); a third refused */
	mo = calloc(h, 4), ve = calloc(h, 4);
	float *one = malloc(h * 4);
	for (size_t i = 0; i < h; i++)
		one[i] = 1.0f;
	gk_err e3 = {0};
	ok(mo && ve && one && gk_nn_cuda_moments(part[1], 0, h / 2, one, one, 1, &err) == 0 &&
	   gk_nn_cuda_moments(part[1], 0, h / 2, mo, ve, 0, &err) == 0 &&
	   mo[0] == 1.0f && ve[h / 2 - 1] == 1.0f, "a second range's moments, up and down%s%s",
	   err.msg[0] ? ": " : "", err.msg);
	ok(gk_nn_cuda_moments(part[1], h / 2, h, mo, ve, 0, &e3) < 0 &&
	   strstr(e3.msg, "they cover") != NULL, "a third range refused: %s", e3.msg);
	free(mo);
	free(ve);
	free(one);
	/*
	 * The master of part[0]'s other half, written as an allgather
	 * would, and the working copy rounded from it: the next forward
	 * gives the loss of the model that updated everything.
	 */
	float la, lp;
	batch(tok, tgt, 4);
	rc = rc && gk_cuda_copy(gk_nn_cuda_params(part[0], h), gk_nn_cuda_params(all, h),
				(n - h) * 4, gk_nn_cuda_stream(part[0]), &err) == 0 &&
	     gk_nn_cuda_params_changed(part[0], &err) == 0 &&
	     gk_nn_forward(all, tok, tgt, &la, &err) == 0 &&
	     gk_nn_forward(part[0], tok, tgt, &lp, &err) == 0;
	ok(rc && la == lp, "master gathered, working copy rounded: the same loss (%g %g)", la, lp);
out:
	gk_nn_free(all);
	gk_nn_free(part[0]);
	gk_nn_free(part[1]);
}

/*
 * bucket_grads (ZeRO-2 on a GPU): backward writes into the embeddings'
 * buffer and one bucket buffer, reused by each block's bucket in turn; a
 * ready callback plays lib/comm's retire, copying each bucket out and
 * zeroing its buffer as soon as its layers are done. The gradients so
 * collected are those of a model with the full buffer, bit for bit (the
 * same kernels on the same inputs), on two steps (the second finding
 * zeros where the first wrote), and the memory is the buffers'.
 */
typedef struct collect {
	gk_nn_model *m;
	const size_t *lo;
	size_t nb, next, n;
	float *out;
	const float *zero;
	int rc;
} collect;

static int collect_cb(size_t off, void *ctx, gk_err *err)
{
	collect *c = ctx;
	for (; c->next < c->nb && c->lo[c->next] >= off; c->next++) {
		size_t a = c->lo[c->next], e = c->next ? c->lo[c->next - 1] : c->n;
		float *d = gk_nn_grad_at(c->m, a);
		if (gk_cuda_copy(c->out + a, d, (e - a) * 4, gk_nn_cuda_stream(c->m), err) < 0 ||
		    gk_cuda_copy(d, c->zero, (e - a) * 4, gk_nn_cuda_stream(c->m), err) < 0 ||
		    gk_cuda_stream_sync(gk_nn_cuda_stream(c->m), err) < 0)
			return c->rc = -1;
	}
	return 0;
}

static void test_buckets(void)
{
	gk_err err = {0};
	gk_nn_config c = cfg();
	gk_nn_opts o = {.batch = B, .seq = T, .threads = 1, .device = GK_NN_CUDA,
			.precision = GK_NN_FP32, .bucket_grads = 1};
	gk_nn_model *full = model(GK_NN_CUDA, GK_NN_FP32, &err), *bk = NULL;
	if (!ok(full && gk_nn_new(&bk, &c, &o, &err) == 0, "a model with bucket_grads%s%s",
		err.msg[0] ? ": " : "", err.msg))
		goto out;
	gk_nn_init(bk, 7);
	size_t n = gk_nn_nparams(bk), head, b1, x;
	gk_nn_block_range(bk, 0, &head, &b1);
	gk_nn_block_range(bk, 1, &b1, &x);
	gk_nn_mem mem;
	gk_nn_memory(bk, &mem);
	ok(mem.gradients == 0, "no gradients on the device before the buckets (%llu bytes)",
	   (unsigned long long)mem.gradients);
	gk_err e2 = {0};
	size_t cut[3] = {b1, head + 16, 0};
	ok(gk_nn_grad_buckets(bk, head, cut, 3, 1, &e2) < 0 && strstr(e2.msg, "cuts a layer"),
	   "a bucket that cuts a layer refused: %s", e2.msg);
	e2.msg[0] = 0;
	ok(gk_nn_grad_buckets(full, head, cut, 3, 1, &e2) < 0 &&
	   strstr(e2.msg, "not made for them"), "buckets for a full buffer refused: %s", e2.msg);
	/* block 1 with the final norm, block 0, the embeddings: one buffer */
	size_t lo[3] = {b1, head, 0};
	float *out = calloc(n, 4), *zero = calloc(n, 4), *ref = NULL;
	int rc = gk_nn_cuda_upload(bk, GK_NN_PARAMS, &err) == 0 &&
		 gk_nn_grad_buckets(bk, head, lo, 3, 1, &err) == 0;
	gk_nn_memory(bk, &mem);
	ok(rc && mem.gradients == 4 * (head + (n - b1)),
	   "the device holds the embeddings' and one bucket's gradients (%llu bytes of %zu)%s%s",
	   (unsigned long long)mem.gradients, 4 * n, err.msg[0] ? ": " : "", err.msg);
	for (int step = 0; step < 2 && rc; step++) {
		int32_t tok[B * T], tgt[B * T];
		float l1, l2;
		collect cc = {.m = bk, .lo = lo, .nb = 3, .n = n, .out = out, .zero = zero};
		batch(tok, tgt, step);
		gk_nn_zero_grad(full);
		rc = gk_nn_forward(full, tok, tgt, &l1, &err) == 0 &&
		     gk_nn_backward(full, 1.0f, NULL, NULL, &err) == 0 &&
		     gk_nn_cuda_download(full, GK_NN_GRADS, &err) == 0 &&
		     gk_nn_forward(bk, tok, tgt, &l2, &err) == 0 &&
		     gk_nn_backward(bk, 1.0f, collect_cb, &cc, &err) == 0 && cc.rc == 0 &&
		     cc.next == 3;
		ref = gk_nn_grads(full);
		size_t bad = 0;
		for (size_t i = 0; rc && i < n; i++)
			bad += memcmp(&out[i], &ref[i], 4) != 0;
		ok(rc && l1 == l2 && bad == 0,
		   "step %d: the buckets' gradients are the full buffer's, bit for bit (%zu differ)%s%s",
		   step + 1, bad, err.msg[0] ? ": " : "", err.msg);
	}
	e2.msg[0] = 0;
	ok(gk_nn_cuda_download(bk, GK_NN_GRADS, &e2) < 0 && strstr(e2.msg, "in buckets"),
	   "no full gradients to download: %s", e2.msg);
	free(out);
	free(zero);
out:
	gk_nn_free(full);
	gk_nn_free(bk);
}

/*
 * Without a usable device (or without CUDA in the build), a CUDA model is
 * refused with the probe's reason, nothing crashes, and a CPU model
 * treats the transfers as no-ops and refuses the device-only calls.
 */
static void test_refusals(int usable, const char *why)
{
	gk_nn_config c = cfg();
	gk_nn_opts o = {.batch = B, .seq = T, .threads = 1};
	gk_nn_model *m = NULL;
	gk_err err = {0};
	double nrm;
	if (!usable) {
		gk_nn_opts oc = o;
		oc.device = GK_NN_CUDA;
		int rc = gk_nn_new(&m, &c, &oc, &err);
		ok(rc < 0 && m == NULL, "no device: a CUDA model is refused");
		char want[sizeof(err.msg) + 32];
		snprintf(want, sizeof(want), "%s%s",
			 gk_cuda_built() ? "model on the GPU: " : "", why);
		is_str(err.msg, gk_cuda_built() ? want
						: "model on the GPU: gpukit was "
						  "built without CUDA",
		       "no device: the reason is the probe's");
	}
	gk_nn_opts bad = o;
	bad.device = 7;
	ok(gk_nn_new(&m, &c, &bad, &err) < 0 && m == NULL, "device 7 refused (%s)", err.msg);
	if (gk_nn_new(&m, &c, &o, &err) < 0) {
		ok(0, "CPU model: %s", err.msg);
		return;
	}
	gk_nn_init(m, 1);
	float keep = gk_nn_params(m)[5];
	ok(gk_nn_cuda_upload(m, GK_NN_PARAMS | GK_NN_GRADS, &err) == 0 &&
	   gk_nn_cuda_download(m, GK_NN_PARAMS | GK_NN_GRADS, &err) == 0 &&
	   gk_nn_params(m)[5] == keep, "CPU model: upload and download do nothing");
	ok(gk_nn_cuda_grad_norm(m, &nrm, &err) < 0, "CPU model: device norm refused (%s)", err.msg);
	float mv[1];
	ok(gk_nn_cuda_moments(m, 0, 1, mv, mv, 1, &err) < 0, "CPU model: device moments refused (%s)", err.msg);
	gk_nn_adamw ad = {0.9f, 0.95f, 1e-8f, 0.1f};
	ok(gk_nn_cuda_adamw(m, &ad, 1e-3f, 1, 1.0f, 0, 1, NULL, &err) < 0,
	   "CPU model: device AdamW refused (%s)", err.msg);
	gk_nn_mem mem;
	gk_nn_memory(m, &mem);
	is_u64(mem.optimizer, 0, "CPU model: no optimizer memory of its own");
	gk_nn_free(m);

	/* the GELU's way: named, or chosen by the aux matrix's leading
	 * dimension (4 x hidden, a multiple of 8 for cuBLASLt) */
	gk_nn_config odd = c;
	odd.hidden = 45, odd.heads = 5;
	gk_nn_opts oc = o;
	oc.device = GK_NN_CUDA;
	unsetenv("GK_CUDA_GELU");
	is_int(gk_nn_gelu_epilogue(&c, &oc, &err), 1, "GELU: the epilogue by default");
	is_int(gk_nn_gelu_epilogue(&odd, &oc, &err), 0,
	       "GELU: the kernels at hidden 45 (aux leading dimension 180)");
	setenv("GK_CUDA_GELU", "epilogue", 1);
	ok(gk_nn_gelu_epilogue(&odd, &oc, &err) < 0 &&
	   strstr(err.msg, "multiple of 8") && strstr(err.msg, "GK_CUDA_GELU=kernel"),
	   "GELU: the epilogue asked for at hidden 45 is refused (%s)", err.msg);
	setenv("GK_CUDA_GELU", "fused", 1);
	ok(gk_nn_gelu_epilogue(&c, &oc, &err) < 0 &&
	   strstr(err.msg, "GK_CUDA_GELU 'fused': must be epilogue or kernel"),
	   "GELU: an unknown way is refused (%s)", err.msg);
	setenv("GK_CUDA_GELU", "kernel", 1);
	is_int(gk_nn_gelu_epilogue(&c, &oc, &err), 0, "GELU: the kernels when asked");
	unsetenv("GK_CUDA_GELU");
}

int main(void)
{
	gk_err err = {0};
	int usable = gk_cuda_probe(NULL, &err) == 0;
	test_refusals(usable, err.msg);
	char why[256];
	int run = gpu_expect(usable, err.msg, why, sizeof why);
	if (run == 0)
		gpu_skip("kernels, steps, loss curve, determinism", why);
	if (run <= 0)
		return done_testing();
#if GK_HAVE_CUDA
	test_kernels();
	test_classifier();
	test_packed();
#endif
	test_model();
	test_gelu_epilogue();
#if GK_HAVE_CUDA
	test_dgelu_bgrad();
#endif
	test_ranges();
	test_buckets();
	return done_testing();
}
