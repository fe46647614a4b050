/*
 * nn_xent.c - the classifier's softmax in one pass (online softmax,
 * gk_nn_msum in nn/math.h) and the CUDA classifier built on it:
 *
 *   - on the CPU (always): the state of a row folded in chunks of 1, 4, 8
 *     and 13 values and merged in trees of parts gives the logsumexp of a
 *     double-precision reference within float rounding, at odd lengths,
 *     with rows shifted far past exp's range; merging is commutative,
 *     bit for bit, and an empty state is its identity;
 *   - on a GPU (skips without one; the CUDA emulation runs it): the
 *     classifier's forward (lse, losses) and backward (dlogits in place,
 *     padded columns and ignored rows 0) against the CPU backend's, fp32
 *     and bf16, at vocabularies that are no multiple of 32 (1, 7, 31, 100,
 *     1000, 2053), with rows padded to 64 (16-byte loads) and unpadded or
 *     misaligned (value by value); and the fused kernel of a training
 *     step (both in one launch) against the two: the same lse, loss and
 *     dlogits, bit for bit;
 *   - tensor parallelism's vocabulary-parallel classifier (the fused
 *     kernel's passes split around the group's max and sums): states of
 *     a row's parts rescaled to the largest max and summed are the
 *     merged state (on the CPU); on the device tp 2, 3 and 4 ranks of one
 *     process, each its columns, the allreduces done between the kernels
 *     by hand, give the fused kernel's lse and losses within float
 *     rounding and the CPU's dlogits as it does, slices wholly in the
 *     padding included, and its backward from lse the same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/half.h"
#include "cuda/cuda.h"
#include "nn/cuda_internal.h"
#include "nn/internal.h"
#include "nn/math.h"
#include "tap.h"
#include "gpu.h"

static uint64_t rng = 987654321;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
}

static double ref_lse(const float *x, int n)
{
	double m = -INFINITY, s = 0.0;
	for (int i = 0; i < n; i++)
		m = x[i] > m ? x[i] : m;
	for (int i = 0; i < n; i++)
		s += exp((double)x[i] - m);
	return m + log(s);
}

/* x[0..n) in parts of `part` values, each folded `chunk` at a time,
 * the parts merged pairwise in a tree. */
static gk_nn_msum fold(const float *x, int n, int chunk, int part)
{
	int np = (n + part - 1) / part;
	static gk_nn_msum st[5000];
	for (int p = 0; p < np; p++) {
		gk_nn_msum a = gk_nn_msum_empty();
		int end = (p + 1) * part < n ? (p + 1) * part : n;
		for (int i = p * part; i < end; i += chunk)
			a = gk_nn_msum_chunk(a, x + i, end - i < chunk ? end - i : chunk);
		st[p] = a;
	}
	for (int w = 1; w < np; w *= 2)
		for (int p = 0; p + w < np; p += 2 * w)
			st[p] = gk_nn_msum_merge(st[p], st[p + w]);
	return np ? st[0] : gk_nn_msum_empty();
}

static void test_online(void)
{
	static float x[5000];
	const int lens[] = {1, 7, 31, 100, 1000, 4999};
	const int chunks[] = {1, 4, 8, 13};
	const float shifts[] = {0.0f, 500.0f, -500.0f};
	double worst = 0.0;
	int cases = 0;
	for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
		for (size_t si = 0; si < sizeof shifts / sizeof *shifts; si++) {
			int n = lens[li];
			for (int i = 0; i < n; i++)
				x[i] = frand() * 8.0f + shifts[si];
			double want = ref_lse(x, n);
			for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++)
				for (int part = 1; part <= n; part = part * 3 + 1) {
					float got = gk_nn_msum_lse(fold(x, n, chunks[ci], part));
					double r = fabs(got - want) / (1e-6 * (1.0 + fabs(want)));
					worst = r > worst || r != r ? r : worst;
					cases++;
				}
		}
	ok(worst <= 1.0, "online logsumexp of %d foldings (lengths 1 to 4999, chunks 1 to 13, "
	   "shifted by +-500) within 1e-6 (1 + |lse|) of double precision (worst %.3g)",
	   cases, worst);

	for (int i = 0; i < 100; i++)
		x[i] = frand() * 30.0f;
	gk_nn_msum a = fold(x, 50, 4, 7), b = fold(x + 50, 50, 8, 50);
	gk_nn_msum ab = gk_nn_msum_merge(a, b), ba = gk_nn_msum_merge(b, a);
	gk_nn_msum ae = gk_nn_msum_merge(a, gk_nn_msum_empty());
	gk_nn_msum ea = gk_nn_msum_merge(gk_nn_msum_empty(), a);
	ok(memcmp(&ab, &ba, sizeof ab) == 0 && memcmp(&ae, &a, sizeof a) == 0 &&
		   memcmp(&ea, &a, sizeof a) == 0,
	   "merging is commutative bit for bit, and the empty state is its identity");
	float two = gk_nn_logsumexp(x, 100);
	double want = ref_lse(x, 100);
	ok(fabs(gk_nn_msum_lse(ab) - want) <= 1e-6 * (1 + fabs(want)) &&
		   fabs(two - want) <= 1e-6 * (1 + fabs(want)),
	   "one pass and the CPU's two passes agree with double precision (%.9g, %.9g, %.9g)",
	   gk_nn_msum_lse(ab), two, want);

	/* tensor parallelism: parts at the group's max, summed */
	gk_nn_msum c = fold(x, 30, 4, 30), d = fold(x + 30, 70, 8, 70), e = gk_nn_msum_empty();
	float M = c.m > d.m ? c.m : d.m;
	gk_nn_msum g = {M, gk_nn_msum_at(c, M) + gk_nn_msum_at(d, M) + gk_nn_msum_at(e, M)};
	gk_nn_msum cd = gk_nn_msum_merge(c, d);
	ok(gk_nn_msum_at(e, M) == 0.0f && g.m == cd.m &&
		   fabs(g.s - cd.s) <= 1e-6 * cd.s &&
		   fabs(gk_nn_msum_lse(g) - want) <= 1e-6 * (1 + fabs(want)),
	   "parts rescaled to the group's max and summed: the merged state (sum %.9g, %.9g), "
	   "an empty part 0", g.s, cd.s);
}

#if GK_HAVE_CUDA
static double worst_of(const float *got, const float *ref, size_t n, double tol, double rel,
		       size_t *at)
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

/*
 * One case: N rows of V logits in rows of Vp, at byte offset off into a
 * device buffer (16-byte loads need off % 16 == 0 and whole 16-byte
 * rows), type dt. The CPU backend's forward and backward on the same
 * values (bf16 rounded first) are the reference.
 */
static void xent_case(int V, int Vp, size_t off, gk_dtype dt)
{
	enum { N = 5 };
	gk_err err = {0};
	size_t es = dt == GK_DT_F32 ? 4 : 2, n = (size_t)N * Vp;
	float *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
	void *raw = malloc(n * es), *raw0 = malloc(n * es), *fraw = malloc(n * es);
	int32_t tgt[N];
	for (size_t i = 0; i < n; i++)
		x[i] = frand() * 6.0f + (i / Vp == 2 ? 300.0f : 0.0f);
	for (int i = 0; i < N; i++)
		tgt[i] = i == 3 ? -1 : (int32_t)((unsigned)(i * 7919 + 3) % (unsigned)V);
	gk_convert(raw, dt, x, GK_DT_F32, n);
	gk_convert(x, GK_DT_F32, raw, dt, n); /* the values the device sees */
	memcpy(raw0, raw, n * es);
	float lse1[N], lse2[N], loss2[N], lse3[N], loss3[N];
	double s1 = gk_nn_cpu_xent_fwd(lse1, x, tgt, N, V, Vp, 1);
	memcpy(ref, x, n * 4);
	gk_nn_cpu_xent_bwd(ref, lse1, tgt, 0.05f, N, V, Vp, 1);

	char *buf = gk_cuda_alloc(n * es + off, GK_CUDA_MEM_WORKSPACE, &err);
	float *dlse = gk_cuda_alloc(N * 4, GK_CUDA_MEM_WORKSPACE, &err);
	float *dloss = gk_cuda_alloc(N * 4, GK_CUDA_MEM_WORKSPACE, &err);
	int32_t *dtgt = gk_cuda_alloc(sizeof tgt, GK_CUDA_MEM_WORKSPACE, &err);
	if (!buf || !dlse || !dloss || !dtgt ||
	    gk_cuda_copy(buf + off, raw, n * es, NULL, &err) < 0 ||
	    gk_cuda_copy(dtgt, tgt, sizeof tgt, NULL, &err) < 0 ||
	    gk_nn_cu_xent_fwd(dlse, dloss, buf + off, dtgt, dt, N, V, Vp, NULL, &err) < 0 ||
	    gk_cuda_copy(lse2, dlse, sizeof lse2, NULL, &err) < 0 ||
	    gk_cuda_copy(loss2, dloss, sizeof loss2, NULL, &err) < 0 ||
	    gk_nn_cu_xent_bwd(buf + off, dlse, dtgt, dt, 0.05f, N, V, Vp, NULL, &err) < 0 ||
	    gk_cuda_copy(raw, buf + off, n * es, NULL, &err) < 0 ||
	    /* the fused kernel on the same logits */
	    gk_cuda_copy(buf + off, raw0, n * es, NULL, &err) < 0 ||
	    gk_nn_cu_xent_fused(dlse, dloss, buf + off, dtgt, dt, 0.05f, N, V, Vp, NULL, &err) < 0 ||
	    gk_cuda_copy(lse3, dlse, sizeof lse3, NULL, &err) < 0 ||
	    gk_cuda_copy(loss3, dloss, sizeof loss3, NULL, &err) < 0 ||
	    gk_cuda_copy(fraw, buf + off, n * es, NULL, &err) < 0) {
		ok(0, "classifier V %d Vp %d: %s", V, Vp, err.msg);
		goto out;
	}
	gk_convert(got, GK_DT_F32, raw, dt, n);
	double s2 = 0.0;
	for (int i = 0; i < N; i++)
		s2 += tgt[i] >= 0 ? loss2[i] : 0.0;
	size_t at = 0;
	double wl = worst_of(lse2, lse1, N, 1e-5, 1e-6, &at);
	/* bf16 dlogits: the CPU's float rounded once more, half an ulp of 2^-8 */
	double rel = dt == GK_DT_F32 ? 1e-4 : 8e-3;
	double wg = worst_of(got, ref, n, 1e-7, rel, &at);
	const char *how = off % 16 == 0 && Vp % (16 / (int)es) == 0 ? "16-byte" : "value by value";
	if (!ok(wl <= 1.0 && fabs(s2 - s1) <= 1e-4 + 1e-6 * fabs(s1) && wg <= 1.0,
		"classifier %s V %d in rows of %d, %s: lse, loss sum %.7g (CPU %.7g), dlogits "
		"(padding and ignored row 0) within %g|ref|", dt == GK_DT_F32 ? "fp32" : "bf16", V,
		Vp, how, s2, s1, rel))
		diag("worst lse %.3g, dlogits %.3g at %zu: got %.9g, want %.9g", wl, wg, at, got[at],
		     ref[at]);
	size_t bad = n;
	for (size_t i = 0; i < n * es && bad == n; i++)
		if (((unsigned char *)fraw)[i] != ((unsigned char *)raw)[i])
			bad = i / es;
	int lsame = 1;
	for (int i = 0; i < N; i++)
		lsame &= memcmp(&lse3[i], &lse2[i], 4) == 0 &&
			 (tgt[i] < 0 || memcmp(&loss3[i], &loss2[i], 4) == 0);
	if (!ok(lsame && bad == n, "classifier fused %s V %d in rows of %d, %s: lse, loss and "
		"dlogits the two kernels', bit for bit", dt == GK_DT_F32 ? "fp32" : "bf16", V, Vp,
		how))
		diag("lse/loss the same: %d; first dlogit that differs: %zu of %zu", lsame, bad, n);
out:
	gk_cuda_free(buf);
	gk_cuda_free(dlse);
	gk_cuda_free(dloss);
	gk_cuda_free(dtgt);
	free(x);
	free(ref);
	free(got);
	free(raw);
	free(raw0);
	free(fraw);
}

/*
 * tp ranks of a vocabulary-parallel classifier in one process: rank r's
 * columns [r Vp/tp, (r+1) Vp/tp) of N rows of V logits (padded to Vp) in
 * a buffer of its own, the group's MAX and SUM done here between the
 * kernels, rank by rank in order as the emulation's NCCL sums. Against
 * the fused kernel on whole rows (lse, losses within float rounding) and
 * the CPU backend's dlogits (xent_case's tolerance); the backward from
 * lse (after an evaluation forward) gives the finish's dlogits, bit for
 * bit.
 */
static void tp_case(int V, int Vp, int tp, gk_dtype dt)
{
	enum { N = 5, R = 4 };
	gk_err err = {0};
	int Vl = Vp / tp;
	size_t es = dt == GK_DT_F32 ? 4 : 2, n = (size_t)N * Vp, nl = (size_t)N * Vl;
	float *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4), *sl = malloc(nl * 4);
	void *raw = malloc(n * es), *rl = malloc(nl * es), *rb = malloc(nl * es);
	int32_t tgt[N];
	float mx[R][N], gmx[N], part[R][2 * N], sum[2 * N], lse[N], loss[N], flse[N], floss[N];
	int same = 1;
	char *buf = NULL, *dx = NULL;
	float *dm = NULL, *dg = NULL, *dp = NULL, *dlse = NULL, *dloss = NULL;
	int32_t *dtgt = NULL;
	for (size_t i = 0; i < n; i++)
		x[i] = (int)(i % Vp) < V ? frand() * 6.0f + (i / Vp == 2 ? 300.0f : 0.0f) : 0.0f;
	for (int i = 0; i < N; i++)
		tgt[i] = i == 3 ? -1 : (int32_t)((unsigned)(i * 7919 + 3) % (unsigned)V);
	gk_convert(raw, dt, x, GK_DT_F32, n);
	gk_convert(x, GK_DT_F32, raw, dt, n);
	float lse1[N];
	gk_nn_cpu_xent_fwd(lse1, x, tgt, N, V, Vp, 1);
	memcpy(ref, x, n * 4);
	gk_nn_cpu_xent_bwd(ref, lse1, tgt, 0.05f, N, V, Vp, 1);
	if (!(buf = gk_cuda_alloc(n * es, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    !(dx = gk_cuda_alloc(tp * nl * es, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    !(dm = gk_cuda_alloc(N * 4, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    !(dg = gk_cuda_alloc(N * 4, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    !(dp = gk_cuda_alloc(2 * N * 4, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    !(dlse = gk_cuda_alloc(N * 4, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    !(dloss = gk_cuda_alloc(N * 4, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    !(dtgt = gk_cuda_alloc(sizeof tgt, GK_CUDA_MEM_WORKSPACE, &err)) ||
	    gk_cuda_copy(dtgt, tgt, sizeof tgt, NULL, &err) < 0 ||
	    gk_cuda_copy(buf, raw, n * es, NULL, &err) < 0 ||
	    gk_nn_cu_xent_fused(dlse, dloss, buf, dtgt, dt, 0.05f, N, V, Vp, NULL, &err) < 0 ||
	    gk_cuda_copy(flse, dlse, sizeof flse, NULL, &err) < 0 ||
	    gk_cuda_copy(floss, dloss, sizeof floss, NULL, &err) < 0)
		goto fail;
	/* each rank's columns in a buffer of its own (rows of Vl) */
	for (int r = 0; r < tp; r++) {
		int64_t v0 = (int64_t)r * Vl;
		int nv = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : (int)(V - v0);
		char *xr = dx + (size_t)r * nl * es;
		for (int i = 0; i < N; i++)
			if (gk_cuda_copy(xr + (size_t)i * Vl * es,
					 (char *)raw + ((size_t)i * Vp + (size_t)r * Vl) * es,
					 (size_t)Vl * es, NULL, &err) < 0)
				goto fail;
		if (gk_nn_cu_tp_xent_state(dm, dg, dp, xr, dtgt, dt, v0, N, nv, Vl, NULL, &err) < 0 ||
		    gk_cuda_copy(mx[r], dm, N * 4, NULL, &err) < 0 ||
		    gk_cuda_copy(part[r], dp, 2 * N * 4, NULL, &err) < 0)
			goto fail;
	}
	for (int i = 0; i < N; i++) {
		gmx[i] = mx[0][i];
		for (int r = 1; r < tp; r++)
			gmx[i] = mx[r][i] > gmx[i] ? mx[r][i] : gmx[i];
	}
	for (int r = 0; r < tp; r++)
		if (gk_cuda_copy(dm, mx[r], N * 4, NULL, &err) < 0 ||
		    gk_cuda_copy(dg, gmx, N * 4, NULL, &err) < 0 ||
		    gk_cuda_copy(dp, part[r], 2 * N * 4, NULL, &err) < 0 ||
		    gk_nn_cu_tp_xent_rescale(dp, dm, dg, N, NULL, &err) < 0 ||
		    gk_cuda_copy(part[r], dp, 2 * N * 4, NULL, &err) < 0)
			goto fail;
	for (int k = 0; k < 2 * N; k++) {
		sum[k] = part[0][k];
		for (int r = 1; r < tp; r++)
			sum[k] += part[r][k];
	}
	for (int r = 0; r < tp; r++) {
		int64_t v0 = (int64_t)r * Vl;
		int nv = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : (int)(V - v0);
		char *xr = dx + (size_t)r * nl * es;
		if (gk_cuda_copy(dp, sum, sizeof sum, NULL, &err) < 0 ||
		    gk_cuda_copy(rb, xr, nl * es, NULL, &err) < 0 || /* the logits, for bwd */
		    gk_nn_cu_tp_xent_finish(dlse, dloss, xr, dg, dp, dtgt, dt, 0.05f, 1, v0, N, nv,
					    Vl, NULL, &err) < 0 ||
		    gk_cuda_copy(lse, dlse, sizeof lse, NULL, &err) < 0 ||
		    gk_cuda_copy(loss, dloss, sizeof loss, NULL, &err) < 0 ||
		    gk_cuda_copy(rl, xr, nl * es, NULL, &err) < 0 ||
		    /* the backward from lse on the same logits */
		    gk_cuda_copy(xr, rb, nl * es, NULL, &err) < 0 ||
		    gk_nn_cu_tp_xent_bwd(xr, dlse, dtgt, dt, 0.05f, v0, N, nv, Vl, NULL, &err) < 0 ||
		    gk_cuda_copy(rb, xr, nl * es, NULL, &err) < 0)
			goto fail;
		same &= memcmp(rl, rb, nl * es) == 0;
		gk_convert(sl, GK_DT_F32, rl, dt, nl);
		for (int i = 0; i < N; i++)
			memcpy(got + (size_t)i * Vp + (size_t)r * Vl, sl + (size_t)i * Vl,
			       (size_t)Vl * 4);
	}
	size_t at = 0;
	for (int i = 0; i < N; i++)
		if (tgt[i] < 0)
			loss[i] = floss[i] = 0.0f;
	double wl = worst_of(lse, flse, N, 1e-6, 1e-6, &at);
	double wo = worst_of(loss, floss, N, 1e-6, 1e-6, &at);
	double rel = dt == GK_DT_F32 ? 1e-4 : 8e-3;
	double wg = worst_of(got, ref, n, 1e-7, rel, &at);
	if (!ok(wl <= 1.0 && wo <= 1.0 && wg <= 1.0 && same,
		"vocabulary-parallel classifier %s, tp %d, V %d in rows of %d: lse and losses "
		"the fused kernel's within 1e-6, dlogits the CPU's within %g|ref|, the backward "
		"from lse the same bits", dt == GK_DT_F32 ? "fp32" : "bf16", tp, V, Vp, rel))
		diag("worst lse %.3g, loss %.3g, dlogits %.3g at %zu; backward the same: %d", wl,
		     wo, wg, at, same);
	goto out;
fail:
	ok(0, "vocabulary-parallel classifier tp %d V %d: %s", tp, V, err.msg);
out:
	gk_cuda_free(buf), gk_cuda_free(dx), gk_cuda_free(dm), gk_cuda_free(dg);
	gk_cuda_free(dp), gk_cuda_free(dlse), gk_cuda_free(dloss), gk_cuda_free(dtgt);
	free(x), free(ref), free(got), free(sl), free(raw), free(rl), free(rb);
}

static void test_device(void)
{
	const int vs[] = {1, 7, 31, 100, 1000, 2053};
	for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
		int V = vs[i], Vp = (V + 63) / 64 * 64;
		xent_case(V, Vp, 0, GK_DT_F32);
		xent_case(V, Vp, 0, GK_DT_BF16);
	}
	/* no 16-byte loads: rows of an odd length, a buffer off 16 bytes */
	xent_case(1000, 1001, 0, GK_DT_BF16);
	xent_case(100, 128, 4, GK_DT_F32);
	xent_case(2053, 2056, 8, GK_DT_BF16);
	/* tensor parallelism: even splits; a tail slice partly padding; at
	 * V 60 of 128 over 4 ranks the last two slices wholly padding */
	tp_case(1000, 1024, 2, GK_DT_F32);
	tp_case(1000, 1024, 2, GK_DT_BF16);
	tp_case(2053, 2112, 3, GK_DT_F32);
	tp_case(60, 128, 4, GK_DT_BF16);
	tp_case(60, 128, 4, GK_DT_F32);
}
#endif

int main(void)
{
	test_online();
	gk_err err = {0};
	int usable = gk_cuda_probe(NULL, &err) == 0;
	char why[256];
	int run = gpu_expect(usable, err.msg, why, sizeof why);
	if (run == 0)
		gpu_skip("the CUDA classifier against the CPU's", why);
	if (run <= 0)
		return done_testing();
#if GK_HAVE_CUDA
	test_device();
#endif
	return done_testing();
}
