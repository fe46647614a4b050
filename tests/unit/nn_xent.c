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
 *     dlogits, bit for bit.
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
