/*
 * nn_flash.c - the CUDA backend's fused attention (lib/nn/flash.cu, flash_tc.cu)
 * against the CPU's attention (attention_cpu.c: the whole (T,T) matrix,
 * another algorithm), on a machine with a GPU or on the CUDA emulation
 * (tests/cuemu, which runs it with blocks and threads in forward and in
 * reverse order); skips without either.
 *
 *   - forward output and the per-row logsumexp, backward dq, dk, dv, at
 *     every compiled width (head sizes 12, 16, 64, 128), at shapes that
 *     are no multiple of a tile (T 37, B 3, NH 4 with head size 12) and
 *     that span several tiles (T 80), in fp32 and in bf16, within the
 *     tolerances stated at each comparison; bf16 at head sizes that are
 *     a multiple of 16 runs the tensor cores' kernels (WMMA), checked at
 *     head sizes 16, 32, 48 (padded to 64), 64, 80 and 112 (padded to
 *     128) and 128 and at T 37, 45 and 70, the rest the scalar kernels;
 *   - tf32 (check_tf32): the tensor cores' kernels in tf32 at head sizes
 *     16, 48 (padded to 64), 64, and 80, 96, 112 (padded to 128) and 128,
 *     whose backward takes 51 KiB of dynamic shared memory, T 16, 23, 37,
 *     45 and 70, against attention in double within a first-order bound
 *     of tf32's roundings, stated there, and the scalar fp32 kernels
 *     within a sixteenth of it; and against double on the inputs rounded
 *     to tf32 within the bound of the kernels' own roundings of p and ds
 *     (inputs rounded to bf16, or not converted, fail it); their bits the
 *     same in every order of the emulation (head sizes 48 and 80); tf32
 *     at head sizes that are no multiple of 16, or off 16-byte alignment,
 *     runs the scalar kernels;
 *   - the tensor-core backward against finite differences of the CPU's
 *     forward;
 *   - two runs give the same bits; head sizes past the maximum refused;
 *   - a model's device memory: the plan (gk_nn_plan_cuda) is what is
 *     allocated, and the fused layout saves exactly the (T,T) buffers.
 * The GPT-2 124M figures (B 48, T 1024) against mem-estimate's are in
 * test_figures, without a device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "mem/mem.h"
#include "nn/cuda_internal.h"
#include "nn/nn.h"
#include "tap.h"
#include "gpu.h"

#if GK_HAVE_CUDA
static uint64_t rng = 99;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
}

/* Largest |got - ref| / (tol + rel |ref|); <= 1 passes. */
static double worst(const float *got, const float *ref, size_t n, double tol,
		    double rel, size_t *at)
{
	double w = 0.0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);
		double r = d == 0.0 ? 0.0 : isfinite(d) ? d / (tol + rel * fabs(ref[i])) : INFINITY;
		if (r > w) {
			w = r;
			*at = i;
		}
	}
	return w;
}

static void close_enough(const char *what, const float *got, const float *ref, size_t n,
			 double tol, double rel)
{
	size_t at = 0;
	double w = worst(got, ref, n, tol, rel, &at);
	if (!ok(w <= 1.0, "%s: %zu values within %g + %g|ref| (at worst %.2f of it)", what, n,
		tol, rel, w))
		diag("worst at %zu: got %.9g, want %.9g", at, got[at], ref[at]);
}

static double maxabs(const float *x, size_t n)
{
	double m = 0.0;
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs(x[i]));
	return m;
}

/* n floats of a device buffer of dt, as floats */
static void back_f32(float *host, const void *d, gk_dtype dt, size_t n)
{
	size_t es = dt == GK_DT_BF16 ? 2 : 4;
	void *tmp = malloc(n * es);
	gpu_back(tmp, d, n * es);
	gk_convert(host, GK_DT_F32, tmp, dt, n);
	free(tmp);
}

/* check_shape's device tensors start this many elements past an
 * allocation (1: 2 bytes in bf16, no 16-byte alignment) */
static size_t skew;

/* a device buffer of dt holding x (n floats, rounded once), skew
 * elements into its allocation (gk_cuda_free(unskew(p, dt))) */
static void *dev_of(const float *x, gk_dtype dt, size_t n)
{
	size_t es = dt == GK_DT_BF16 ? 2 : 4;
	char *tmp = calloc(n + skew, es);
	gk_convert(tmp + skew * es, dt, x, GK_DT_F32, n);
	char *d = gpu_dev(tmp, (n + skew) * es);
	free(tmp);
	return d + skew * es;
}
static void *dev_new(gk_dtype dt, size_t n)
{
	size_t es = dt == GK_DT_BF16 ? 2 : 4;
	return (char *)gpu_dev(NULL, (n + skew) * es) + skew * es;
}
static void *unskew(void *p, gk_dtype dt)
{
	return (char *)p - skew * (dt == GK_DT_BF16 ? 2 : 4);
}

/* x rounded to dt and back */
static void round_to(float *x, gk_dtype dt, size_t n)
{
	if (dt != GK_DT_BF16)
		return;
	uint16_t *t = malloc(n * 2);
	gk_convert(t, GK_DT_BF16, x, GK_DT_F32, n);
	gk_convert(x, GK_DT_F32, t, GK_DT_BF16, n);
	free(t);
}

/*
 * One shape in one precision: the CPU's attention on the inputs as the
 * device sees them (rounded to dt), the fused kernels on the device.
 * Tolerances, as ratios of the output's largest magnitude plus a part of
 * each value: fp32 differs in the order of the sums and in exp (1e-5 +
 * 1e-4|ref|; the backward's cancellations 2e-5 max|ref| + 1e-4|ref|);
 * bf16 rounds each output once (2^-9 relative), and the backward's inputs
 * include the forward's rounded output, where the CPU keeps fp32 (4e-3
 * max|ref| + 4e-3|ref| forward, 8e-3 max|ref| + 8e-3|ref| backward; the
 * emulation meets them with at least 40 % to spare on the scalar kernels,
 * 25 % on the tensor cores' kernels, which round p and ds to bf16 too);
 * tf32 here only where it runs the scalar kernels, with fp32's
 * tolerances (check_tf32 has the tensor cores' kernels in tf32).
 */
static void check_shape(int B, int T, int NH, int hs, int prec)
{
	gk_dtype dt = prec == GK_NN_BF16 ? GK_DT_BF16 : GK_DT_F32;
	int C = NH * hs, N = B * T;
	size_t nq = (size_t)N * 3 * C, no = (size_t)N * C, rows = (size_t)B * NH * T;
	const char *pn = gk_nn_precision_name(prec);
	char what[160];
	float *qkv = malloc(nq * 4), *dout = malloc(no * 4);
	float *out = malloc(no * 4), *ref = malloc(no * 4), *got = malloc(nq * 4);
	float *att = malloc(rows * T * 4), *dref = malloc(nq * 4);
	float *scr = malloc(gk_nn_cpu_attention_scratch(T, hs) * 4);
	float *lse = malloc(rows * 4), *lref = malloc(rows * 4);
	/* scores up to about +-3 (q, k up to 1.7 with head size's scale) */
	float amp = 1.7f * sqrtf(sqrtf((float)hs / 4.0f));
	for (size_t i = 0; i < nq; i++)
		qkv[i] = frand() * amp;
	for (size_t i = 0; i < no; i++)
		dout[i] = frand();
	round_to(qkv, dt, nq);
	round_to(dout, dt, no);

	gk_nn_cpu_attention_fwd(ref, att, scr, qkv, B, T, C, NH, 1);
	memset(dref, 0, nq * 4);
	gk_nn_cpu_attention_bwd(dref, scr, dout, qkv, att, B, T, C, NH, 1);
	/* logsumexp in double, from q and k directly */
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
				double s[1024], mx = -INFINITY, sum = 0.0;
				for (int j = 0; j <= t; j++) {
					const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
					double d = 0.0;
					for (int x = 0; x < hs; x++)
						d += (double)q[x] * k[x];
					s[j] = d / sqrt((double)hs);
					mx = fmax(mx, s[j]);
				}
				for (int j = 0; j <= t; j++)
					sum += exp(s[j] - mx);
				lref[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
			}

	gk_err err = {0};
	void *dq = dev_of(qkv, dt, nq), *ddo = dev_of(dout, dt, no);
	void *dy = dev_new(dt, no), *dg = dev_new(dt, nq);
	float *dl = gpu_dev(NULL, rows * 4), *dd = gpu_dev(NULL, rows * 4);
	int rc = gk_nn_cu_flash_fwd(dy, dl, dq, prec, B, T, NH, hs, NULL, &err) == 0 &&
		 gk_nn_cu_flash_bwd(dg, dd, ddo, dq, dy, dl, prec, B, T, NH, hs, NULL, &err) == 0 &&
		 gk_cuda_stream_sync(NULL, &err) == 0;
	snprintf(what, sizeof what, "B %d T %d NH %d hs %d %s (%s)", B, T, NH, hs, pn,
		 skew ? "cuda cores" : gk_nn_flash_path(prec, hs));
	if (skew)
		snprintf(what + strlen(what), sizeof what - strlen(what),
			 ", tensors %zu bytes off 16-byte alignment", skew * (dt == GK_DT_BF16 ? 2 : 4));
	if (!ok(rc, "%s: forward and backward ran%s%s", what, err.msg[0] ? ": " : "", err.msg))
		goto out;
	back_f32(out, dy, dt, no);
	gpu_back(lse, dl, rows * 4);
	back_f32(got, dg, dt, nq);
	int bf = dt == GK_DT_BF16;
	double mo = maxabs(ref, no);
	char w2[200];
	snprintf(w2, sizeof w2, "%s: forward output", what);
	close_enough(w2, out, ref, no, bf ? 4e-3 * mo : 1e-5 * mo, bf ? 4e-3 : 1e-4);
	snprintf(w2, sizeof w2, "%s: logsumexp", what);
	close_enough(w2, lse, lref, rows, 1e-5, bf ? 1e-5 : 1e-6);
	static const char *part[3] = {"dq", "dk", "dv"};
	for (int p = 0; p < 3; p++) {
		/* the part's columns [p C, (p + 1) C) of each row */
		float *g1 = malloc(no * 4), *g2 = malloc(no * 4);
		for (int i = 0; i < N; i++) {
			memcpy(g1 + (size_t)i * C, got + (size_t)i * 3 * C + p * C, C * 4);
			memcpy(g2 + (size_t)i * C, dref + (size_t)i * 3 * C + p * C, C * 4);
		}
		double mg = maxabs(g2, no);
		snprintf(w2, sizeof w2, "%s: backward %s", what, part[p]);
		close_enough(w2, g1, g2, no, bf ? 8e-3 * mg : 2e-5 * mg, bf ? 8e-3 : 1e-4);
		free(g1);
		free(g2);
	}

	/* again: the same bits (one thread sums each output, in order) */
	float *out2 = malloc(no * 4), *got2 = malloc(nq * 4);
	rc = gk_nn_cu_flash_fwd(dy, dl, dq, prec, B, T, NH, hs, NULL, &err) == 0 &&
	     gk_nn_cu_flash_bwd(dg, dd, ddo, dq, dy, dl, prec, B, T, NH, hs, NULL, &err) == 0 &&
	     gk_cuda_stream_sync(NULL, &err) == 0;
	if (rc) {
		back_f32(out2, dy, dt, no);
		back_f32(got2, dg, dt, nq);
	}
	ok(rc && memcmp(out, out2, no * 4) == 0 && memcmp(got, got2, nq * 4) == 0,
	   "%s: a second run gives the same bits", what);
	free(out2);
	free(got2);
out:
	gk_cuda_free(unskew(dq, dt)), gk_cuda_free(unskew(ddo, dt));
	gk_cuda_free(unskew(dy, dt)), gk_cuda_free(unskew(dg, dt));
	gk_cuda_free(dl), gk_cuda_free(dd);
	free(qkv), free(dout), free(out), free(ref), free(got), free(att), free(dref);
	free(scr), free(lse), free(lref);
}

/*
 * The gradient of the tensor-core kernels against finite differences of
 * the CPU's forward (not its backward): for f(qkv) = sum dout . out, the
 * device's dqkv along a direction d of q's, k's or v's columns only
 * (each part on its own, so a wrong dk cannot hide behind a right dq)
 * against (f(qkv + e d) - f(qkv - e d)) / 2e, e = 1e-2, f in double over
 * the CPU's fp32 forward. Within 2 % of the difference plus the bf16
 * noise of the dot product's terms (the kernels round p and ds to bf16
 * for their second products, about 2^-9 each, and the gradient to bf16
 * at the end; the difference's own error, e^2 times the third derivative
 * and fp32's rounding over e, is below 0.1 %).
 */
static void check_gradient(int B, int T, int NH, int hs)
{
	int C = NH * hs, N = B * T;
	size_t nq = (size_t)N * 3 * C, no = (size_t)N * C, rows = (size_t)B * NH * T;
	float *qkv = malloc(nq * 4), *dout = malloc(no * 4), *g = malloc(nq * 4);
	float *x = malloc(nq * 4), *y = malloc(no * 4), *dir = malloc(nq * 4);
	float *att = malloc(rows * T * 4), *scr = malloc(gk_nn_cpu_attention_scratch(T, hs) * 4);
	float amp = 1.7f * sqrtf(sqrtf((float)hs / 4.0f));
	for (size_t i = 0; i < nq; i++)
		qkv[i] = frand() * amp;
	for (size_t i = 0; i < no; i++)
		dout[i] = frand();
	round_to(qkv, GK_DT_BF16, nq);
	round_to(dout, GK_DT_BF16, no);
	gk_err err = {0};
	void *dq = dev_of(qkv, GK_DT_BF16, nq), *ddo = dev_of(dout, GK_DT_BF16, no);
	void *dy = gpu_dev(NULL, no * 2), *dg = gpu_dev(NULL, nq * 2);
	float *dl = gpu_dev(NULL, rows * 4), *dd = gpu_dev(NULL, rows * 4);
	int rc = gk_nn_cu_flash_fwd(dy, dl, dq, GK_NN_BF16, B, T, NH, hs, NULL, &err) == 0 &&
		 gk_nn_cu_flash_bwd(dg, dd, ddo, dq, dy, dl, GK_NN_BF16, B, T, NH, hs, NULL,
				    &err) == 0 &&
		 gk_cuda_stream_sync(NULL, &err) == 0;
	if (!ok(rc, "gradient check B %d T %d NH %d hs %d: ran%s%s", B, T, NH, hs,
		err.msg[0] ? ": " : "", err.msg))
		goto out;
	back_f32(g, dg, GK_DT_BF16, nq);
	static const char *part[3] = {"q", "k", "v"};
	const double e = 1e-2;
	for (int p = 0; p < 3; p++) {
		double dot = 0.0, sq = 0.0, f[2];
		for (size_t i = 0; i < nq; i++) {
			dir[i] = (int)(i % (3 * C)) / C == p ? frand() : 0.0f;
			dot += (double)g[i] * dir[i];
			sq += (double)g[i] * dir[i] * g[i] * dir[i];
		}
		for (int sgn = 0; sgn < 2; sgn++) {
			for (size_t i = 0; i < nq; i++)
				x[i] = (float)(qkv[i] + (sgn ? -e : e) * dir[i]);
			gk_nn_cpu_attention_fwd(y, att, scr, x, B, T, C, NH, 1);
			f[sgn] = 0.0;
			for (size_t i = 0; i < no; i++)
				f[sgn] += (double)dout[i] * y[i];
		}
		double fd = (f[0] - f[1]) / (2 * e);
		/* 2 %, and four times bf16's half ulp of the terms' root sum
		 * of squares (their roundings are independent: where the
		 * terms cancel, the sum's relative error grows) */
		ok(fabs(dot - fd) <= 0.02 * fabs(fd) + 4 * 0x1p-9 * sqrt(sq) && fabs(fd) > 1.0,
		   "B %d T %d NH %d hs %d (%s): the backward's d%s along a direction %.5f, "
		   "finite differences of the CPU's forward %.5f", B, T, NH, hs,
		   gk_nn_flash_path(GK_NN_BF16, hs), part[p], dot, fd);
	}
out:
	gk_cuda_free(dq), gk_cuda_free(ddo), gk_cuda_free(dy), gk_cuda_free(dg);
	gk_cuda_free(dl), gk_cuda_free(dd);
	free(qkv), free(dout), free(g), free(x), free(y), free(dir), free(att), free(scr);
}

/*
 * tf32: the tensor cores' kernels on fp32 activations, each operand of
 * each product (q, k, v, dout, p, ds) rounded to 10 fraction bits, u =
 * 2^-11 relative each, the sums fp32 (u32 = 2^-24 an addition), against
 * attention in double. To first order in u, element by element (p_ij
 * the probabilities, scale = 1/sqrt(hs), ui = u where the inputs are
 * rounded by the kernels, 0 where the reference rounds them itself):
 *   scores   |ds_ij| <= es_ij = scale sum_d |q_id k_jd| (2 ui + hs u32)
 *            and E_i = max_j es_ij
 *   p        |dp_ij| <= p_ij (es_ij + E_i): the logsumexp, or the
 *            normalization by l, moves by at most E_i
 *   out      sum_j p_ij |v_jd| (u + ui + 2 E_i + (T + hs) u32): p (and
 *            v) rounded, p off by its scores' error and the normalization's
 *   dp       sum_d |dout_id v_jd| (2 ui + hs u32)
 *   D        sum_d |dout_id| (|out's error| + (u + hs u32) |o_id|): the
 *            kernels' D is fp32 of dout as it is
 *   ds       scale (|dp_ij| |dp_ij - D_i| + p_ij (dp's error + D's error))
 *   dq, dk   sum (|ds's error| + (u + ui) |ds|) |k| (|q|) + T u32 sum |ds k|
 *   dv       sum_i (|dp_ij| + (u + ui) p_ij) |dout_id| + T u32 sum p |dout|
 * (8 u32 more in each for exp, the divisions and the stores). Two
 * references: double on the fp32 inputs with ui = u (the scalar kernels'
 * fp32 within a sixteenth of that bound: the difference between the two
 * paths is tf32's), and double on the inputs rounded to tf32 as
 * cvt.rna.tf32.f32 does (to nearest, ties away) with ui = 0, where only
 * the kernels' own roundings of p and ds remain. The second is tight:
 * inputs rounded otherwise, to bf16 or truncated as a tensor core reads
 * an unconverted float, miss it by far (a row's first output is v_0
 * itself, exact here to fp32's few ulps).
 */
struct tf32_ref {
	double *out, *g;     /* the double reference: (B,T,C) and (B,T,3C) */
	double *bout, *bg;   /* the bounds, element by element */
};

/* x rounded to tf32: 11 significant bits, to nearest, ties away from
 * zero (C's round); normal values, as the tests' are */
static float tf32_rna(float x)
{
	int e;
	if (x == 0.0f)
		return x;
	frexp(x, &e);
	double q = ldexp(1.0, e - 11);
	return (float)(round(x / q) * q);
}

static void tf32_reference(struct tf32_ref *r, const float *qkv, const float *dout, int B,
			   int T, int NH, int hs, double ui)
{
	const double u = 0x1p-11, u32 = 0x1p-24, scale = 1.0 / sqrt((double)hs);
	int C = NH * hs, C3 = 3 * C;
	double *p = malloc((size_t)T * T * sizeof *p), *es = malloc((size_t)T * T * sizeof *es);
	double *ep = malloc((size_t)T * T * sizeof *ep), *ds = malloc((size_t)T * T * sizeof *ds);
	double *eds = malloc((size_t)T * T * sizeof *eds), *E = malloc(T * sizeof *E);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
#define Q(t, d) ((double)qkv[((size_t)b * T + (t)) * C3 + h * hs + (d)])
#define K(t, d) ((double)qkv[((size_t)b * T + (t)) * C3 + C + h * hs + (d)])
#define V(t, d) ((double)qkv[((size_t)b * T + (t)) * C3 + 2 * C + h * hs + (d)])
#define DO(t, d) ((double)dout[((size_t)b * T + (t)) * C + h * hs + (d)])
#define AT(a, t, d) (a)[((size_t)b * T + (t)) * C + h * hs + (d)]
#define GT(p, t, d) r->p[((size_t)b * T + (t)) * C3 + (d)]
			for (int i = 0; i < T; i++) {
				double mx = -INFINITY, l = 0.0;
				E[i] = 0.0;
				for (int j = 0; j <= i; j++) {
					double sc = 0.0, a = 0.0;
					for (int d = 0; d < hs; d++) {
						sc += Q(i, d) * K(j, d);
						a += fabs(Q(i, d) * K(j, d));
					}
					p[i * T + j] = sc * scale;
					es[i * T + j] = scale * a * (2 * ui + hs * u32);
					mx = fmax(mx, p[i * T + j]);
					E[i] = fmax(E[i], es[i * T + j]);
				}
				for (int j = 0; j <= i; j++)
					l += exp(p[i * T + j] - mx);
				for (int j = 0; j <= i; j++) {
					p[i * T + j] = exp(p[i * T + j] - mx) / l;
					ep[i * T + j] = p[i * T + j] * (es[i * T + j] + E[i] + 8 * u32);
				}
				for (int d = 0; d < hs; d++) {
					double o = 0.0, w = 0.0;
					for (int j = 0; j <= i; j++) {
						o += p[i * T + j] * V(j, d);
						w += p[i * T + j] * fabs(V(j, d));
					}
					AT(r->out, i, d) = o;
					AT(r->bout, i, d) = w * (u + ui + 2 * E[i] + (T + hs + 8) * u32);
				}
				double D = 0.0, eD = 0.0;
				for (int d = 0; d < hs; d++) {
					D += DO(i, d) * AT(r->out, i, d);
					eD += fabs(DO(i, d)) * (AT(r->bout, i, d) +
								(u + hs * u32) * fabs(AT(r->out, i, d)));
				}
				for (int j = 0; j <= i; j++) {
					double dp = 0.0, a = 0.0;
					for (int d = 0; d < hs; d++) {
						dp += DO(i, d) * V(j, d);
						a += fabs(DO(i, d) * V(j, d));
					}
					double pij = p[i * T + j];
					ds[i * T + j] = pij * (dp - D) * scale;
					eds[i * T + j] = scale * (ep[i * T + j] * fabs(dp - D) +
								  pij * (a * (2 * ui + hs * u32) + eD)) +
							 8 * u32 * fabs(ds[i * T + j]);
				}
			}
			for (int t = 0; t < T; t++)
				for (int d = 0; d < hs; d++) {
					double gq = 0, bq = 0, gk = 0, bk = 0, gv = 0, bv = 0;
					for (int j = 0; j <= t; j++) { /* dq: row t, keys j */
						double x = ds[t * T + j];
						gq += x * K(j, d);
						bq += (eds[t * T + j] + (u + ui) * fabs(x)) * fabs(K(j, d)) +
						      (T + 8) * u32 * fabs(x * K(j, d));
					}
					for (int i = t; i < T; i++) { /* dk, dv: key t, rows i */
						double x = ds[i * T + t], pi = p[i * T + t];
						gk += x * Q(i, d);
						bk += (eds[i * T + t] + (u + ui) * fabs(x)) * fabs(Q(i, d)) +
						      (T + 8) * u32 * fabs(x * Q(i, d));
						gv += pi * DO(i, d);
						bv += (ep[i * T + t] + (u + ui) * pi) * fabs(DO(i, d)) +
						      (T + 8) * u32 * pi * fabs(DO(i, d));
					}
					GT(g, t, h * hs + d) = gq, GT(bg, t, h * hs + d) = bq;
					GT(g, t, C + h * hs + d) = gk, GT(bg, t, C + h * hs + d) = bk;
					GT(g, t, 2 * C + h * hs + d) = gv, GT(bg, t, 2 * C + h * hs + d) = bv;
				}
#undef Q
#undef K
#undef V
#undef DO
#undef AT
#undef GT
		}
	free(p), free(es), free(ep), free(ds), free(eds), free(E);
}

/* out and dqkv of the fused kernels in precision prec (fp32 in memory) */
static int run_f32(float *out, float *g, const float *qkv, const float *dout, int prec, int B,
		   int T, int NH, int hs, gk_err *err)
{
	size_t nq = (size_t)B * T * 3 * NH * hs, no = (size_t)B * T * NH * hs;
	size_t rows = (size_t)B * NH * T;
	void *dq = dev_of(qkv, GK_DT_F32, nq), *ddo = dev_of(dout, GK_DT_F32, no);
	void *dy = dev_new(GK_DT_F32, no), *dg = dev_new(GK_DT_F32, nq);
	float *dl = gpu_dev(NULL, rows * 4), *dd = gpu_dev(NULL, rows * 4);
	int rc = gk_nn_cu_flash_fwd(dy, dl, dq, prec, B, T, NH, hs, NULL, err) == 0 &&
		 gk_nn_cu_flash_bwd(dg, dd, ddo, dq, dy, dl, prec, B, T, NH, hs, NULL, err) == 0 &&
		 gk_cuda_stream_sync(NULL, err) == 0;
	if (rc) {
		gpu_back(out, dy, no * 4);
		gpu_back(g, dg, nq * 4);
	}
	gk_cuda_free(dq), gk_cuda_free(ddo), gk_cuda_free(dy), gk_cuda_free(dg);
	gk_cuda_free(dl), gk_cuda_free(dd);
	return rc;
}

/* the largest |got - ref| / bound of n values (0 / 0 as 0) and where */
static double bound_ratio(const float *got, const double *ref, const double *bound, size_t n,
			  size_t *at)
{
	double w = 0.0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs(got[i] - ref[i]);
		double x = d == 0.0 ? 0.0 : isfinite(d) && bound[i] > 0 ? d / bound[i] : INFINITY;
		if (x > w)
			w = x, *at = i;
	}
	return w;
}

static void check_tf32(int B, int T, int NH, int hs)
{
	int C = NH * hs, N = B * T;
	size_t nq = (size_t)N * 3 * C, no = (size_t)N * C;
	float *qkv = malloc(nq * 4), *dout = malloc(no * 4);
	float *rq = malloc(nq * 4), *rd = malloc(no * 4);
	float *out[2] = {malloc(no * 4), malloc(no * 4)}, *g[2] = {malloc(nq * 4), malloc(nq * 4)};
	struct tf32_ref r[2];
	for (int k = 0; k < 2; k++)
		r[k] = (struct tf32_ref){malloc(no * 8), malloc(nq * 8), malloc(no * 8),
					 malloc(nq * 8)};
	float amp = 1.7f * sqrtf(sqrtf((float)hs / 4.0f));
	for (size_t i = 0; i < nq; i++)
		rq[i] = tf32_rna(qkv[i] = frand() * amp);
	for (size_t i = 0; i < no; i++)
		rd[i] = tf32_rna(dout[i] = frand());
	char what[96];
	snprintf(what, sizeof what, "B %d T %d NH %d hs %d tf32 (%s)", B, T, NH, hs,
		 gk_nn_flash_path(GK_NN_TF32, hs));
	gk_err err = {0};
	if (!ok(run_f32(out[0], g[0], qkv, dout, GK_NN_TF32, B, T, NH, hs, &err) &&
		run_f32(out[1], g[1], qkv, dout, GK_NN_FP32, B, T, NH, hs, &err),
		"%s: forward and backward ran, and in fp32%s%s", what, err.msg[0] ? ": " : "",
		err.msg))
		goto out;
	tf32_reference(&r[0], qkv, dout, B, T, NH, hs, 0x1p-11);
	tf32_reference(&r[1], rq, rd, B, T, NH, hs, 0.0);
	static const char *part[4] = {"forward output", "dq", "dk", "dv"};
	float *x[2] = {malloc(no * 4), malloc(no * 4)};
	double *ref[2] = {malloc(no * 8), malloc(no * 8)}, *bd[2] = {malloc(no * 8), malloc(no * 8)};
	for (int p = 0; p < 4; p++) {
		for (int i = 0; i < N; i++)
			for (int c = 0; c < C; c++) {
				size_t o = (size_t)i * C + c, q = (size_t)i * 3 * C + (p - 1) * C + c;
				for (int k = 0; k < 2; k++) {
					x[k][o] = p ? g[k][q] : out[k][o];
					ref[k][o] = p ? r[k].g[q] : r[k].out[o];
					bd[k][o] = p ? r[k].bg[q] : r[k].bout[o];
				}
			}
		size_t at[3] = {0, 0, 0};
		int differ = 0;
		for (size_t i = 0; i < no; i++)
			differ += x[0][i] != x[1][i];
		double w0 = bound_ratio(x[0], ref[0], bd[0], no, &at[0]);
		double w1 = bound_ratio(x[1], ref[0], bd[0], no, &at[1]);
		double w2 = bound_ratio(x[0], ref[1], bd[1], no, &at[2]);
		if (!ok(w0 <= 1.0 && w1 <= 1.0 / 16 && differ > (int)(no / 2),
			"%s: %s within the tf32 bound of double's (at worst %.3f of it), the "
			"scalar fp32 kernels' within a sixteenth (%.5f), %d of %zu values "
			"differing", what, part[p], w0, w1, differ, no))
			diag("worst at %zu: tf32 %.9g, fp32 %.9g, double %.9g, bound %.3g", at[0],
			     x[0][at[0]], x[1][at[0]], ref[0][at[0]], bd[0][at[0]]);
		if (!ok(w2 <= 1.0, "%s: %s within the bound of its own roundings of double's "
			"on the inputs rounded to tf32 (at worst %.3f of it)", what, part[p], w2))
			diag("worst at %zu: tf32 %.9g, double %.9g, bound %.3g", at[2], x[0][at[2]],
			     ref[1][at[2]], bd[1][at[2]]);
	}
	for (int k = 0; k < 2; k++) {
		free(x[k]), free(ref[k]), free(bd[k]);
		free(r[k].out), free(r[k].g), free(r[k].bout), free(r[k].bg);
	}
out:
	free(qkv), free(dout), free(rq), free(rd), free(out[0]), free(out[1]), free(g[0]);
	free(g[1]);
}

/*
 * tf32's bits do not depend on the order blocks and threads run in (each
 * output summed by one thread, in a fixed order): the output and the
 * gradients of two shapes (B 2, T 37, head size 48; B 1, T 37, head size
 * 80, the width 128 and its dynamic shared memory) hashed here and by
 * this program run again under CUEMU_ORDER forward and shuffle (on the
 * emulation; on a GPU, two more runs).
 */
static uint64_t tf32_hash(gk_err *err)
{
	static const int shape[2][2] = {{2, 48}, {1, 80}}; /* B, head size */
	enum { T = 37, NH = 1 };
	uint64_t h = 1469598103934665603ull; /* FNV-1a over the bytes */
	rng = 7;
	for (int k = 0; k < 2 && h; k++) {
		int B = shape[k][0], C = NH * shape[k][1];
		size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
		float *qkv = malloc(nq * 4), *dout = malloc(no * 4), *out = malloc(no * 4);
		float *g = malloc(nq * 4);
		for (size_t i = 0; i < nq; i++)
			qkv[i] = frand() * 2.5f;
		for (size_t i = 0; i < no; i++)
			dout[i] = frand();
		if (run_f32(out, g, qkv, dout, GK_NN_TF32, B, T, NH, shape[k][1], err)) {
			for (size_t i = 0; i < no * 4 + nq * 4; i++) {
				unsigned char c = i < no * 4 ? ((unsigned char *)out)[i]
							     : ((unsigned char *)g)[i - no * 4];
				h = (h ^ c) * 1099511628211ull;
			}
		} else {
			h = 0;
		}
		free(qkv), free(dout), free(out), free(g);
	}
	return h;
}

static void test_tf32_orders(void)
{
	static const char *orders[2] = {"forward", "shuffle"};
	gk_err err = {0};
	uint64_t own = tf32_hash(&err), h[2] = {0, 0};
	for (int k = 0; k < 2; k++) {
		char cmd[256], line[64] = "";
		snprintf(cmd, sizeof cmd, "CUEMU_ORDER=%s /proc/%d/exe tf32-bits", orders[k],
			 (int)getpid());
		fflush(stdout);
		FILE *f = popen(cmd, "r");
		if (f) {
			if (!fgets(line, sizeof line, f))
				line[0] = 0;
			if (pclose(f) != 0)
				line[0] = 0;
		}
		h[k] = strtoull(line, NULL, 16);
	}
	ok(own != 0 && h[0] == own && h[1] == own,
	   "tf32 (T 37, B 2 hs 48 and B 1 hs 80): the output's and the gradients' bits the same "
	   "in this run (%016llx) and in runs in forward and shuffled order (%016llx, %016llx)%s%s",
	   (unsigned long long)own, (unsigned long long)h[0], (unsigned long long)h[1],
	   err.msg[0] ? ": " : "", err.msg);
}

static void test_refusals(void)
{
	gk_err err = {0};
	int rc = gk_nn_cu_flash_fwd(NULL, NULL, NULL, GK_NN_BF16, 1, 16, 1, 129, NULL, &err);
	ok(rc < 0 && strstr(err.msg, "head size 129") && strstr(err.msg, "1 to 128"),
	   "head size 129 refused: %s", err.msg);
	memset(&err, 0, sizeof err);
	rc = gk_nn_cu_flash_bwd(NULL, NULL, NULL, NULL, NULL, NULL, GK_NN_FP32, 1, 16, 1, 0, NULL,
				&err);
	ok(rc < 0 && strstr(err.msg, "head size 0"), "head size 0 refused: %s", err.msg);
}

/* A model's allocation is its plan, in both layouts; the fused one
 * saves what the (T,T) buffers and the head copies took. */
static void test_memory(void)
{
	enum { L = 2, B = 3, T = 37, C = 48, NH = 4 };
	gk_nn_config c = {.layers = L, .hidden = C, .heads = NH, .vocab = 1000,
			  .positions = 40, .ln_eps = 1e-5f};
	gk_nn_mem got[2], plan[2];
	for (int k = 0; k < 2; k++) {
		gk_nn_opts o = {.batch = B, .seq = T, .device = GK_NN_CUDA,
				.precision = GK_NN_BF16,
				.attention = k ? GK_NN_ATTN_MATMUL : GK_NN_ATTN_FUSED};
		gk_nn_model *m = NULL;
		gk_err err = {0};
		if (!ok(gk_nn_new(&m, &c, &o, &err) == 0 && gk_nn_plan_cuda(&c, &o, &plan[k], &err) == 0,
			"%s model and plan%s%s", k ? "matmul" : "fused", err.msg[0] ? ": " : "",
			err.msg))
			return;
		gk_nn_memory(m, &got[k]);
		gk_nn_free(m);
		ok(memcmp(&got[k], &plan[k], sizeof got[k]) == 0,
		   "%s: allocated what gk_nn_plan_cuda said (activations %llu, workspace %llu)",
		   k ? "matmul" : "fused", (unsigned long long)got[k].activations,
		   (unsigned long long)got[k].workspace);
	}
#define R256(x) (((uint64_t)(x) + 255) / 256 * 256)
	uint64_t rows = (uint64_t)B * NH * T;
	is_u64(got[1].activations - got[0].activations,
	       R256(L * rows * T * 2) - R256(L * rows * 4),
	       "fused: activations less the L (B,NH,T,T) bf16 matrices, plus a float a row");
	is_u64(got[1].workspace - got[0].workspace,
	       4 * R256((uint64_t)B * T * C * 2) + R256(rows * T * 2) - R256(rows * 4),
	       "fused: workspace less the four head copies and the (T,T) gradient");
}

/*
 * A model on each path (odd shapes: C 48, head size 12, T 37, B 3): one
 * fp32 step gives the same loss within 1e-5 relative and every gradient
 * within 1e-4 of its tensor's largest plus 1e-3 relative (the CPU
 * backend's bounds in nn_cuda), and a bf16 step the same loss within
 * 0.02 + 1 %. nn_cuda checks the default (fused) path against the CPU;
 * this keeps the matmul path checked too.
 */
static void test_paths(void)
{
	enum { B = 3, T = 37 };
	gk_nn_config c = {.layers = 2, .hidden = 48, .heads = 4, .vocab = 1000,
			  .positions = 40, .ln_eps = 1e-5f};
	int32_t tok[B * T], tgt[B * T];
	for (int i = 0; i < B * T; i++) {
		tok[i] = (i * 7 + 3) % 1000;
		tgt[i] = (i * 13 + 5) % 1000;
	}
	for (int prec = GK_NN_FP32; prec >= GK_NN_BF16; prec -= 2) {
		gk_nn_model *m[2] = {NULL, NULL};
		float loss[2] = {0, 0};
		gk_err err = {0};
		int rc = 1;
		for (int k = 0; k < 2 && rc; k++) {
			gk_nn_opts o = {.batch = B, .seq = T, .device = GK_NN_CUDA,
					.precision = prec,
					.attention = k ? GK_NN_ATTN_MATMUL : GK_NN_ATTN_FUSED};
			rc = gk_nn_new(&m[k], &c, &o, &err) == 0;
			if (rc) {
				gk_nn_init(m[k], 11);
				gk_nn_zero_grad(m[k]);
				rc = gk_nn_cuda_upload(m[k], GK_NN_PARAMS, &err) == 0 &&
				     gk_nn_forward(m[k], tok, tgt, &loss[k], &err) == 0 &&
				     gk_nn_backward(m[k], 1.0f, NULL, NULL, &err) == 0 &&
				     gk_nn_cuda_download(m[k], GK_NN_GRADS, &err) == 0;
			}
		}
		const char *pn = prec == GK_NN_FP32 ? "fp32" : "bf16";
		if (ok(rc, "%s: a step on each path%s%s", pn, err.msg[0] ? ": " : "", err.msg)) {
			if (prec == GK_NN_FP32) {
				ok(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[1]),
				   "fp32: fused loss %.7f, matmul %.7f", loss[0], loss[1]);
				size_t nt;
				const gk_nn_tensor *t = gk_nn_tensors(m[0], &nt);
				int bad = 0;
				for (size_t i = 0; i < nt; i++) {
					size_t at = 0;
					const float *g0 = gk_nn_grads(m[0]) + t[i].off;
					const float *g1 = gk_nn_grads(m[1]) + t[i].off;
					double big = maxabs(g1, t[i].numel);
					if (worst(g0, g1, t[i].numel, 1e-4 * big + 1e-9, 1e-3, &at) > 1.0) {
						diag("%s[%zu]: fused %g, matmul %g", t[i].name, at, g0[at],
						     g1[at]);
						bad++;
					}
				}
				ok(bad == 0, "fp32: every gradient of the fused path within 1e-4 "
				   "max|g| + 1e-3|ref| of the matmul path's (%zu tensors)", nt);
			} else {
				ok(fabsf(loss[0] - loss[1]) <= 0.02f + 0.01f * fabsf(loss[1]),
				   "bf16: fused loss %.5f, matmul %.5f", loss[0], loss[1]);
			}
		}
		gk_nn_free(m[0]);
		gk_nn_free(m[1]);
	}
}
#endif

/*
 * Which attention a CUDA model gets (no device needed): fused up to head
 * size 128, the matmul path past it unless fused is asked for, which is
 * then refused saying why; GK_CUDA_ATTENTION chooses when the options
 * leave it to the default, and an unknown name there is an error.
 */
static void test_choice(void)
{
	is_str(gk_nn_flash_path(GK_NN_BF16, 64), "tensor cores (wmma)",
	       "bf16, head size 64: the tensor cores' kernels");
	is_str(gk_nn_flash_path(GK_NN_BF16, 16), "tensor cores (wmma)",
	       "bf16, head size 16: the tensor cores' kernels");
	is_str(gk_nn_flash_path(GK_NN_BF16, 12), "cuda cores",
	       "bf16, head size 12 (no multiple of 16): the scalar kernels");
	is_str(gk_nn_flash_path(GK_NN_BF16, 129), "cuda cores",
	       "bf16, head size 129 (past the widths): not the tensor cores'");
	is_str(gk_nn_flash_path(GK_NN_FP32, 64), "cuda cores", "fp32: the scalar kernels");
	is_str(gk_nn_flash_path(GK_NN_TF32, 64), "tensor cores (wmma, tf32)",
	       "tf32, head size 64: the tensor cores' kernels in tf32");
	is_str(gk_nn_flash_path(GK_NN_TF32, 80), "tensor cores (wmma, tf32)",
	       "tf32, head size 80: the tensor cores' kernels in tf32 (width 128)");
	is_str(gk_nn_flash_path(GK_NN_TF32, 128), "tensor cores (wmma, tf32)",
	       "tf32, head size 128: the tensor cores' kernels in tf32");
	is_str(gk_nn_flash_path(GK_NN_TF32, 72), "cuda cores",
	       "tf32, head size 72 (no multiple of 16): the scalar kernels");
	is_str(gk_nn_flash_path(GK_NN_BF16, 112), "tensor cores (wmma)",
	       "bf16, head size 112: the tensor cores' kernels (width 128)");
	is_str(gk_nn_flash_path(GK_NN_TF32, 12), "cuda cores",
	       "tf32, head size 12 (no multiple of 16): the scalar kernels");
	gk_nn_config c = {.layers = 1, .hidden = 768, .heads = 12, .vocab = 100,
			  .positions = 64, .ln_eps = 1e-5f};
	gk_nn_config big = c;
	big.hidden = 1032, big.heads = 8; /* head size 129 */
	gk_nn_opts o = {.batch = 1, .seq = 8, .device = GK_NN_CUDA};
	gk_err err = {0};
	unsetenv("GK_CUDA_ATTENTION");
	is_int(gk_nn_attention_fused(&c, &o, &err), 1, "head size 64: fused by default");
	is_int(gk_nn_attention_fused(&big, &o, &err), 0, "head size 129: the matmul path by default");
	o.attention = GK_NN_ATTN_FUSED;
	ok(gk_nn_attention_fused(&big, &o, &err) < 0 && strstr(err.msg, "head size 129") &&
	   strstr(err.msg, "GK_CUDA_ATTENTION=matmul"), "head size 129, fused asked: refused (%s)",
	   err.msg);
	o.attention = GK_NN_ATTN_MATMUL;
	is_int(gk_nn_attention_fused(&c, &o, &err), 0, "matmul asked: the matmul path");
	o.attention = GK_NN_ATTN_AUTO;
	setenv("GK_CUDA_ATTENTION", "matmul", 1);
	is_int(gk_nn_attention_fused(&c, &o, &err), 0, "GK_CUDA_ATTENTION=matmul: the matmul path");
	setenv("GK_CUDA_ATTENTION", "flash", 1);
	ok(gk_nn_attention_fused(&big, &o, &err) < 0 && strstr(err.msg, "head size 129"),
	   "GK_CUDA_ATTENTION=flash at head size 129: refused");
	setenv("GK_CUDA_ATTENTION", "fast", 1);
	ok(gk_nn_attention_fused(&c, &o, &err) < 0 &&
	   strcmp(err.msg, "GK_CUDA_ATTENTION 'fast': must be fused (or flash) or matmul") == 0,
	   "GK_CUDA_ATTENTION=fast: %s", err.msg);
	gk_nn_mem p;
	ok(gk_nn_plan_cuda(&c, &o, &p, &err) < 0, "and the plan is refused with it");
	o.attention = GK_NN_ATTN_FUSED; /* the options' choice comes first */
	is_int(gk_nn_attention_fused(&c, &o, &err), 1, "fused asked: the environment not read");
	unsetenv("GK_CUDA_ATTENTION");
}

/*
 * GPT-2 124M at B 48, T 1024 in bf16 (gpu-train's default layout): what
 * the backend allocates by its plan, and what lib/mem estimates for the
 * same run (gpu-train's memory check; mem-estimate --no-dropout --attn
 * flash --no-logits-f32). The activations (lib/mem's activations, logits
 * and final norm) within 2 %, the total (the moments added to the plan,
 * the reserve to the estimate) within 5 %, in each layout.
 */
static void test_figures(void)
{
	gk_nn_config c = {.layers = 12, .hidden = 768, .heads = 12, .vocab = 50257,
			  .positions = 1024, .ln_eps = 1e-5f};
	uint64_t total[2] = {0, 0};
	for (int k = 0; k < 2; k++) {
		const char *name = k ? "matmul" : "fused";
		gk_nn_opts o = {.batch = 48, .seq = 1024, .device = GK_NN_CUDA,
				.precision = GK_NN_BF16,
				.attention = k ? GK_NN_ATTN_MATMUL : GK_NN_ATTN_FUSED};
		gk_nn_mem p;
		gk_err err = {0};
		gk_mem_train t = {.layers = 12, .hidden = 768, .heads = 12, .vocab = 50304,
				  .positions = 1024, .seq = 1024, .batch = 48,
				  .precision = GK_DT_BF16, .eager = k};
		gk_mem_est e;
		if (!ok(gk_nn_plan_cuda(&c, &o, &p, &err) == 0 &&
			gk_mem_train_estimate(&t, &e, NULL, NULL, &err) == 0,
			"GPT-2 124M B 48 T 1024 %s: plan and estimate%s%s", name,
			err.msg[0] ? ": " : "", err.msg))
			return;
		static const char *keys[] = {"activations", "logits", "final_norm"};
		double act = 0.0;
		for (int i = 0; i < 3; i++) {
			const gk_mem_part *x = gk_mem_part_get(&e, keys[i]);
			act += x ? (double)x->bytes : 0.0;
		}
		uint64_t alloc = p.parameters + p.gradients + p.activations + p.workspace +
				 (uint64_t)2 * p.gradients; /* AdamW's two moments */
		total[k] = alloc;
		diag("%s: allocates %.2f GB (activations %.2f, workspace %.3f); "
		     "estimate %.2f GB (activations %.2f)", name, alloc / 1e9,
		     p.activations / 1e9, p.workspace / 1e9, e.total / 1e9, act / 1e9);
		ok(fabs(act - p.activations) <= 0.02 * p.activations,
		   "%s: the estimate's activations within 2%% of the plan's", name);
		ok(fabs((double)e.total - alloc) <= 0.05 * alloc,
		   "%s: the estimate within 5%% of what is allocated", name);
	}
	diag("the fused attention saves %.2f GB at this shape",
	     (total[1] - total[0]) / 1e9);
}

int main(int argc, char **argv)
{
#if GK_HAVE_CUDA
	if (argc > 1 && strcmp(argv[1], "tf32-bits") == 0) { /* test_tf32_orders' child */
		gk_err err = {0};
		uint64_t h = gk_cuda_probe(NULL, &err) == 0 ? tf32_hash(&err) : 0;
		printf("%016llx\n", (unsigned long long)h);
		return h == 0;
	}
#endif
	(void)argc, (void)argv;
	test_choice();
	test_figures();
	gk_err err = {0};
	int usable = gk_cuda_probe(NULL, &err) == 0;
	char why[256];
	int run = gpu_expect(usable, err.msg, why, sizeof why);
	if (run == 0)
		gpu_skip("fused attention against the CPU's", why);
	if (run <= 0)
		return done_testing();
#if GK_HAVE_CUDA
	test_refusals();
	check_shape(3, 37, 4, 12, GK_NN_FP32);  /* no multiple of a tile */
	check_shape(3, 37, 4, 12, GK_NN_BF16);
	check_shape(2, 16, 4, 16, GK_NN_BF16); /* nn_cuda's default shape */
	check_shape(1, 80, 2, 64, GK_NN_FP32);  /* GPT-2's head size, 3 tiles */
	check_shape(1, 80, 2, 64, GK_NN_BF16);
	check_shape(1, 40, 1, 128, GK_NN_BF16); /* the largest */
	/* the tensor cores' kernels where nothing tiles: T 37 and 70 (no
	 * multiple of 16 or of a block's 64 rows), B 3, head size 48 (the
	 * width 64 with 16 columns of zeros) */
	check_shape(3, 37, 4, 16, GK_NN_BF16);
	check_shape(3, 37, 2, 48, GK_NN_BF16);
	check_shape(2, 70, 2, 32, GK_NN_BF16);
	/* and at head sizes padded to the width 128 */
	check_shape(3, 37, 1, 80, GK_NN_BF16);
	check_shape(1, 45, 2, 112, GK_NN_BF16);
	/* tensors off 16-byte alignment, which the tensor cores' loads
	 * need: the scalar kernels run them */
	skew = 1;
	check_shape(1, 37, 2, 16, GK_NN_BF16);
	skew = 0;
	/* tf32: the tensor cores' kernels at nn_cuda's default shape, where
	 * nothing tiles, over two blocks at the widest tf32 width; from a
	 * stream of their own, so the cases after them draw the inputs they
	 * always had */
	uint64_t keep = rng;
	check_tf32(2, 16, 4, 16);
	check_tf32(3, 37, 2, 48);
	check_tf32(1, 70, 1, 64);
	/* past 64, the width 128, whose backward takes 51 KiB of dynamic
	 * shared memory: every multiple of 16, odd T, two row blocks at 128 */
	check_tf32(2, 37, 1, 80);
	check_tf32(1, 23, 2, 96);
	check_tf32(1, 45, 1, 112);
	check_tf32(1, 70, 1, 128);
	test_tf32_orders();
	check_shape(1, 37, 1, 72, GK_NN_TF32); /* no multiple of 16: the scalar kernels */
	skew = 1; /* and off 16-byte alignment */
	check_shape(1, 37, 2, 16, GK_NN_TF32);
	skew = 0;
	rng = keep;
	check_gradient(1, 37, 2, 16);
	check_gradient(1, 70, 1, 64);
	test_memory();
	test_paths();
#endif
	return done_testing();
}
