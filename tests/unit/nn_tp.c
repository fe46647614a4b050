/*
 * nn_tp.c - tensor parallelism's layers (lib/nn/tp.c) against the
 * unsharded kernels: every rank of a group run in one process, the
 * group's allreduces done here between the layers, the result compared
 * with the whole layer's (|got - ref| <= tol (1 + |ref|)). The slices are
 * taken by index formulas written here (head h of Q, K, V; rows; columns),
 * not by the code under test; gk_nn_tp_copy and the model's own slices
 * are checked against the same formulas.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "nn/internal.h"
#include "nn/train.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)((rng >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
}

static float *randv(size_t n, float scale)
{
	float *x = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = frand() * scale;
	return x;
}

/* the largest |a - b| / (1 + |b|) */
static double maxrel(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
		if (!(d <= m)) /* NaN too */
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/* columns [c0, c0 + w) of each of R rows of width W into (R, w) */
static float *cols(const float *x, int R, int W, int c0, int w)
{
	float *o = malloc((size_t)R * w * sizeof(float));
	for (int i = 0; i < R; i++)
		memcpy(o + (size_t)i * w, x + (size_t)i * W + c0, (size_t)w * sizeof(float));
	return o;
}

/* rank r's columns of c_attn's (R, 3C): its heads of Q, then of K, then of V */
static float *qkv_cols(const float *x, int R, int C, int tp, int r)
{
	int Cq = C / tp;
	float *o = malloc((size_t)R * 3 * Cq * sizeof(float));
	for (int i = 0; i < R; i++)
		for (int k = 0; k < 3; k++)
			memcpy(o + (size_t)i * 3 * Cq + (size_t)k * Cq,
			       x + (size_t)i * 3 * C + (size_t)k * C + (size_t)r * Cq,
			       (size_t)Cq * sizeof(float));
	return o;
}

static void test_check(void)
{
	gk_err err = {0};
	gk_nn_config c = {.layers = 1, .hidden = 48, .heads = 6, .vocab = 257, .positions = 8,
			  .ln_eps = 1e-5f};
	gk_nn_config_finish(&c, &err);
	ok(gk_nn_tp_check(&c, 2, &err) == 0 && gk_nn_tp_check(&c, 3, &err) == 0,
	   "6 heads, padded vocabulary 384: tp 2 and 3 split it");
	ok(gk_nn_tp_check(&c, 4, &err) < 0 && strstr(err.msg, "6 heads") &&
	   strstr(err.msg, "divide by 4"), "tp 4: refused with the heads: %s", err.msg);
	c.heads = 10;
	c.hidden = 60;
	ok(gk_nn_tp_check(&c, 5, &err) < 0 && strstr(err.msg, "384 rows") &&
	   strstr(err.msg, "vocab_size 257"), "tp 5 of 10 heads: refused with the vocabulary: %s",
	   err.msg);
}

/*
 * Attention's block: c_attn column-parallel by heads, attention local on
 * NH/tp heads, c_proj row-parallel with the bias once after the group's
 * sum; forward and backward, against the whole layers.
 */
static void test_attention(int tp)
{
	int B = 2, T = 7, C = 24, NH = 6, N = B * T, Cq = C / tp, NHq = NH / tp, nt = 1;
	float *ln = randv((size_t)N * C, 1), *wqkv = randv((size_t)C * 3 * C, 0.3f);
	float *bqkv = randv(3 * (size_t)C, 0.1f), *wp = randv((size_t)C * C, 0.3f);
	float *bp = randv((size_t)C, 0.1f), *res = randv((size_t)N * C, 1);
	float *dout = randv((size_t)N * C, 1);
	/* the whole layers */
	float *qkv = calloc((size_t)N * 3 * C, 4), *att = calloc((size_t)B * NH * T * T, 4);
	float *y = calloc((size_t)N * C, 4), *out = calloc((size_t)N * C, 4);
	float *scr = calloc(gk_nn_cpu_attention_scratch(T, C / NH) + 64, 4);
	gk_nn_cpu_matmul_fwd(qkv, ln, wqkv, bqkv, NULL, NULL, 0, N, C, 3 * C, nt);
	gk_nn_cpu_attention_fwd(y, att, scr, qkv, B, T, C, NH, nt);
	gk_nn_cpu_matmul_fwd(out, y, wp, bp, res, NULL, 0, N, C, C, nt);
	float *dy = calloc((size_t)N * C, 4), *dwp = calloc((size_t)C * C, 4);
	float *dbp = calloc((size_t)C, 4), *dqkv = calloc((size_t)N * 3 * C, 4);
	float *dln = calloc((size_t)N * C, 4), *dwqkv = calloc((size_t)C * 3 * C, 4);
	float *dbqkv = calloc(3 * (size_t)C, 4);
	gk_nn_cpu_matmul_bwd(dy, dwp, dbp, dout, y, wp, N, C, C, nt);
	gk_nn_cpu_attention_bwd(dqkv, scr, dy, qkv, att, B, T, C, NH, nt);
	gk_nn_cpu_matmul_bwd(dln, dwqkv, dbqkv, dqkv, ln, wqkv, N, C, 3 * C, nt);

	/* each rank's, summed where the group sums */
	float *sum = calloc((size_t)N * C, 4), *dsum = calloc((size_t)N * C, 4);
	double e_y = 0, e_dw = 0, e_dqkvw = 0, e_dqkvb = 0, e_dbp = 0;
	for (int r = 0; r < tp; r++) {
		float *w = qkv_cols(wqkv, C, C, tp, r), *b = qkv_cols(bqkv, 1, C, tp, r);
		float *wpr = wp + (size_t)r * Cq * C; /* rows */
		float *q = calloc((size_t)N * 3 * Cq, 4), *a = calloc((size_t)B * NHq * T * T, 4);
		float *yr = calloc((size_t)N * Cq, 4), *part = calloc((size_t)N * C, 4);
		gk_nn_cpu_matmul_fwd(q, ln, w, b, NULL, NULL, 0, N, C, 3 * Cq, nt);
		gk_nn_cpu_attention_fwd(yr, a, scr, q, B, T, Cq, NHq, nt);
		float *ywant = cols(y, N, C, r * Cq, Cq);
		double e = maxrel(yr, ywant, (size_t)N * Cq);
		e_y = e > e_y ? e : e_y;
		gk_nn_cpu_matmul_fwd(part, yr, wpr, NULL, NULL, NULL, 0, N, Cq, C, nt);
		for (size_t i = 0; i < (size_t)N * C; i++)
			sum[i] += part[i];
		/* backward: g passes dout unchanged to every rank */
		float *dyr = calloc((size_t)N * Cq, 4), *dwpr = calloc((size_t)Cq * C, 4);
		float *dbpr = calloc((size_t)C, 4), *dq = calloc((size_t)N * 3 * Cq, 4);
		float *dl = calloc((size_t)N * C, 4), *dw = calloc((size_t)C * 3 * Cq, 4);
		float *db = calloc(3 * (size_t)Cq, 4);
		gk_nn_cpu_matmul_bwd(dyr, dwpr, dbpr, dout, yr, wpr, N, Cq, C, nt);
		gk_nn_cpu_attention_bwd(dq, scr, dyr, q, a, B, T, Cq, NHq, nt);
		gk_nn_cpu_matmul_bwd(dl, dw, db, dq, ln, w, N, C, 3 * Cq, nt);
		for (size_t i = 0; i < (size_t)N * C; i++)
			dsum[i] += dl[i]; /* f: the allreduce of d ln */
		e = maxrel(dwpr, dwp + (size_t)r * Cq * C, (size_t)Cq * C);
		e_dw = e > e_dw ? e : e_dw;
		e = maxrel(dbpr, dbp, (size_t)C);
		e_dbp = e > e_dbp ? e : e_dbp;
		float *dwant = qkv_cols(dwqkv, C, C, tp, r), *dbwant = qkv_cols(dbqkv, 1, C, tp, r);
		e = maxrel(dw, dwant, (size_t)C * 3 * Cq);
		e_dqkvw = e > e_dqkvw ? e : e_dqkvw;
		e = maxrel(db, dbwant, 3 * (size_t)Cq);
		e_dqkvb = e > e_dqkvb ? e : e_dqkvb;
		free(w), free(b), free(q), free(a), free(yr), free(part), free(ywant);
		free(dyr), free(dwpr), free(dbpr), free(dq), free(dl), free(dw), free(db);
		free(dwant), free(dbwant);
	}
	gk_nn_tp_row_finish(sum, res, bp, N, C, nt);
	ok(e_y < 1e-6, "tp %d: each rank's heads of attention = the whole's columns (%.2g)", tp, e_y);
	double e = maxrel(sum, out, (size_t)N * C);
	ok(e < 1e-6, "tp %d: row-parallel c_proj, summed, bias once = the whole (%.2g)", tp, e);
	e = maxrel(dsum, dln, (size_t)N * C);
	ok(e < 1e-6, "tp %d: f's sum of d ln1 over the ranks = the whole's (%.2g)", tp, e);
	ok(e_dw < 1e-6 && e_dbp == 0, "tp %d: d c_proj rows = the whole's (%.2g), its bias the "
	   "same on every rank (%.2g)", tp, e_dw, e_dbp);
	ok(e_dqkvw < 1e-6 && e_dqkvb < 1e-6, "tp %d: d c_attn's heads of Q, K, V = the whole's "
	   "(%.2g, bias %.2g)", tp, e_dqkvw, e_dqkvb);
	free(ln), free(wqkv), free(bqkv), free(wp), free(bp), free(res), free(dout);
	free(qkv), free(att), free(y), free(out), free(scr), free(dy), free(dwp), free(dbp);
	free(dqkv), free(dln), free(dwqkv), free(dbqkv), free(sum), free(dsum);
}

/* The MLP: c_fc column-parallel, GeLU local, c_proj row-parallel. */
static void test_mlp(int tp)
{
	int N = 9, C = 16, F = 4 * C / tp, nt = 1;
	float *ln = randv((size_t)N * C, 1), *wfc = randv((size_t)C * 4 * C, 0.3f);
	float *bfc = randv(4 * (size_t)C, 0.1f), *wp = randv((size_t)4 * C * C, 0.2f);
	float *bp = randv((size_t)C, 0.1f), *res = randv((size_t)N * C, 1);
	float *h = calloc((size_t)N * 4 * C, 4), *hg = calloc((size_t)N * 4 * C, 4);
	float *out = calloc((size_t)N * C, 4), *sum = calloc((size_t)N * C, 4);
	gk_nn_cpu_matmul_fwd(h, ln, wfc, bfc, NULL, hg, 1, N, C, 4 * C, nt);
	gk_nn_cpu_matmul_fwd(out, hg, wp, bp, res, NULL, 0, N, 4 * C, C, nt);
	double eh = 0;
	for (int r = 0; r < tp; r++) {
		float *w = cols(wfc, C, 4 * C, r * F, F), *b = cols(bfc, 1, 4 * C, r * F, F);
		float *hr = calloc((size_t)N * F, 4), *hgr = calloc((size_t)N * F, 4);
		float *part = calloc((size_t)N * C, 4);
		gk_nn_cpu_matmul_fwd(hr, ln, w, b, NULL, hgr, 1, N, C, F, nt);
		float *want = cols(hg, N, 4 * C, r * F, F);
		double e = maxrel(hgr, want, (size_t)N * F);
		eh = e > eh ? e : eh;
		gk_nn_cpu_matmul_fwd(part, hgr, wp + (size_t)r * F * C, NULL, NULL, NULL, 0, N, F,
				     C, nt);
		for (size_t i = 0; i < (size_t)N * C; i++)
			sum[i] += part[i];
		free(w), free(b), free(hr), free(hgr), free(part), free(want);
	}
	gk_nn_tp_row_finish(sum, res, bp, N, C, nt);
	ok(eh < 1e-6, "tp %d: column-parallel c_fc + GeLU = the whole's columns (%.2g)", tp, eh);
	double e = maxrel(sum, out, (size_t)N * C);
	ok(e < 1e-6, "tp %d: the MLP's row-parallel c_proj = the whole (%.2g)", tp, e);
	free(ln), free(wfc), free(bfc), free(wp), free(bp), free(res), free(h), free(hg);
	free(out), free(sum);
}

/*
 * The vocabulary-parallel embedding and cross-entropy on GPT-2's padded
 * vocabulary (257 real rows of 384), with ignored targets, and at tp 4 a
 * rank whose rows are all padding.
 */
static void test_vocab(int tp)
{
	int B = 3, T = 5, N = B * T, C = 8, V = 257, Vp = 384, Vl = Vp / tp, nt = 1;
	int32_t tok[15], tg[15];
	for (int i = 0; i < N; i++) {
		tok[i] = (int32_t)((i * 97 + 13) % V);
		tg[i] = i % 4 == 3 ? -1 : (int32_t)((i * 61 + 250) % V);
	}
	float *wte = randv((size_t)Vp * C, 0.5f), *wpe = randv((size_t)T * C, 0.5f);
	memset(wte + (size_t)V * C, 0, (size_t)(Vp - V) * C * sizeof(float));
	float *emb = calloc((size_t)N * C, 4), *sum = calloc((size_t)N * C, 4);
	gk_nn_cpu_encoder_fwd(emb, tok, wte, wpe, B, T, C, nt);
	float *dout = randv((size_t)N * C, 1);
	float *dwte = calloc((size_t)Vp * C, 4), *dwpe = calloc((size_t)T * C, 4);
	gk_nn_cpu_encoder_bwd(dwte, dwpe, dout, tok, B, T, C, nt);
	float *logits = randv((size_t)N * Vp, 4), *lse = calloc((size_t)N, 4);
	double loss = gk_nn_cpu_xent_fwd(lse, logits, tg, N, V, Vp, nt);
	float *dlog = malloc((size_t)N * Vp * 4);
	memcpy(dlog, logits, (size_t)N * Vp * 4);
	gk_nn_cpu_xent_bwd(dlog, lse, tg, 0.25f, N, V, Vp, nt);

	float *mx = malloc((size_t)N * 4), *part = calloc(2 * (size_t)N, 4);
	for (int i = 0; i < N; i++)
		mx[i] = -INFINITY;
	double e_dwte = 0, e_dlog = 0;
	int empty = 0;
	/* the embedding: each rank's masked rows, summed; then positions */
	for (int r = 0; r < tp; r++) {
		int64_t v0 = (int64_t)r * Vl;
		int nv = (int)(V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0);
		empty += nv == 0;
		float *o = calloc((size_t)N * C, 4), *dw = calloc((size_t)Vl * C, 4);
		gk_nn_tp_embed_fwd(o, tok, wte + (size_t)v0 * C, v0, Vl, N, C, nt);
		for (size_t i = 0; i < (size_t)N * C; i++)
			sum[i] += o[i];
		gk_nn_tp_embed_bwd(dw, dout, tok, v0, Vl, N, C, nt);
		double e = maxrel(dw, dwte + (size_t)v0 * C, (size_t)Vl * C);
		e_dwte = e > e_dwte ? e : e_dwte;
		/* the cross-entropy's max: MAX over the ranks */
		float *lr = cols(logits, N, Vp, (int)v0, Vl), *m = malloc((size_t)N * 4);
		gk_nn_tp_xent_max(m, lr, N, nv, Vl, nt);
		for (int i = 0; i < N; i++)
			mx[i] = m[i] > mx[i] ? m[i] : mx[i];
		free(o), free(dw), free(lr), free(m);
	}
	gk_nn_tp_add_pos(sum, wpe, B, T, 0, C, nt);
	ok(maxrel(sum, emb, (size_t)N * C) == 0,
	   "tp %d: the masked lookups summed, then positions = the embedding bit for bit", tp);
	ok(e_dwte == 0, "tp %d: each rank's rows of d wte = the whole's", tp);
	float *dwpe2 = calloc((size_t)T * C, 4);
	gk_nn_tp_pos_bwd(dwpe2, dout, B, T, C, nt);
	ok(maxrel(dwpe2, dwpe, (size_t)T * C) == 0, "tp %d: d wpe = the whole's bit for bit", tp);
	/* the sums of exponentials and the target logits: SUM over the ranks */
	for (int r = 0; r < tp; r++) {
		int64_t v0 = (int64_t)r * Vl;
		int nv = (int)(V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0);
		float *lr = cols(logits, N, Vp, (int)v0, Vl), *p = calloc(2 * (size_t)N, 4);
		gk_nn_tp_xent_parts(p, lr, mx, tg, v0, N, nv, Vl, nt);
		for (int i = 0; i < 2 * N; i++)
			part[i] += p[i];
		free(lr), free(p);
	}
	float *lse2 = calloc((size_t)N, 4);
	double loss2 = gk_nn_tp_xent_finish(lse2, mx, part, tg, N);
	double e = maxrel(lse2, lse, (size_t)N);
	ok(e < 1e-6 && fabs(loss2 - loss) <= 1e-6 * fabs(loss),
	   "tp %d: cross-entropy from the max, sum of exponentials and target logit = the whole "
	   "(lse %.2g, loss %.9g vs %.9g)", tp, e, loss2, loss);
	for (int r = 0; r < tp; r++) {
		int64_t v0 = (int64_t)r * Vl;
		int nv = (int)(V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0);
		float *lr = cols(logits, N, Vp, (int)v0, Vl), *want = cols(dlog, N, Vp, (int)v0, Vl);
		gk_nn_tp_xent_bwd(lr, lse2, tg, 0.25f, v0, N, nv, Vl, nt);
		double d = maxrel(lr, want, (size_t)N * Vl);
		e_dlog = d > e_dlog ? d : e_dlog;
		free(lr), free(want);
	}
	ok(e_dlog < 1e-6, "tp %d: d logits, each rank's columns, with no collective (%.2g)%s", tp,
	   e_dlog, empty ? "; a rank holds only padding" : "");
	free(wte), free(wpe), free(emb), free(sum), free(dout), free(dwte), free(dwpe);
	free(logits), free(lse), free(dlog), free(mx), free(part), free(lse2), free(dwpe2);
}

/*
 * The model's own slices: a tp model of each rank, initialised from the
 * seed of a whole one, holds the whole's values at the formulas' places,
 * and gk_nn_tp_copy puts every rank's back into the whole.
 */
static void test_model_slices(int tp)
{
	gk_err err = {0};
	gk_nn_config c = {.layers = 2, .hidden = 24, .heads = 6, .vocab = 257, .positions = 8,
			  .ln_eps = 1e-5f};
	gk_nn_opts o = {.batch = 1, .seq = 4, .threads = 1};
	gk_nn_model *whole, *m[4];
	gk_comm *self;
	gk_comm_config cc = {.backend = GK_COMM_BACKEND_SELF};
	if (gk_comm_open(&self, &cc, &err) < 0 || gk_nn_new(&whole, &c, &o, &err) < 0) {
		ok(0, "models: %s", err.msg);
		return;
	}
	gk_nn_init(whole, 11);
	const float *W = gk_nn_params(whole);
	size_t nt;
	const gk_nn_tensor *ft = gk_nn_tensors(whole, &nt);
	float *back = calloc(gk_nn_nparams(whole), sizeof(float));
	int C = 24, Cq = C / tp, bad = 0, made = 1;
	size_t local = 0;
	for (int r = 0; r < tp; r++) {
		gk_nn_opts ot = o;
		ot.tp = tp, ot.tp_rank = r, ot.tp_comm = self;
		if (gk_nn_new(&m[r], &c, &ot, &err) < 0) {
			ok(0, "tp %d rank %d: %s", tp, r, err.msg);
			made = 0;
			break;
		}
		gk_nn_init(m[r], 11);
		local = gk_nn_nparams(m[r]);
		size_t n;
		const gk_nn_tensor *lt = gk_nn_tensors(m[r], &n);
		const float *P = gk_nn_params(m[r]);
		for (size_t i = 0; i < n; i++) {
			const gk_nn_tensor *f = &ft[i], *l = &lt[i];
			const float *a = W + f->off, *b = P + l->off;
			if (strstr(l->name, "c_attn.weight")) {
				/* element (row, Q/K/V k, head h, j) */
				for (int row = 0; row < C; row++)
					for (int k = 0; k < 3; k++)
						for (int j = 0; j < Cq; j++)
							bad += b[row * 3 * Cq + k * Cq + j] !=
							       a[row * 3 * C + k * C + r * Cq + j];
			} else if (strstr(l->name, "c_fc.weight")) {
				for (int row = 0; row < C; row++)
					for (int j = 0; j < 4 * Cq; j++)
						bad += b[row * 4 * Cq + j] != a[row * 4 * C + r * 4 * Cq + j];
			} else if (strstr(l->name, "c_proj.weight") || strstr(l->name, "wte")) {
				bad += memcmp(b, a + (size_t)r * l->numel, l->numel * 4) != 0;
			} else if (l->split == GK_NN_SPLIT_NONE) {
				bad += l->numel != f->numel || memcmp(a, b, l->numel * 4) != 0;
			}
		}
		gk_nn_tp_copy(ft, lt, n, tp, r, back, (float *)P, 0);
	}
	if (made) {
		ok(!bad, "tp %d: each rank's init holds the whole model's values at its heads, "
		   "columns and rows (%d wrong)", tp, bad);
		ok(memcmp(back, W, gk_nn_nparams(whole) * 4) == 0,
		   "tp %d: every rank's slices put back = the whole model", tp);
		/* what a rank holds: the split tensors' share and the rest whole */
		size_t split = 0, rest = 0;
		for (size_t i = 0; i < nt; i++)
			*(ft[i].split ? &split : &rest) += ft[i].numel;
		ok(local == split / (size_t)tp + rest && gk_nn_param_count(m[0]) ==
		   gk_nn_param_count(whole),
		   "tp %d: a rank holds %zu of %zu parameters (split/%d + replicated); "
		   "Hugging Face's count unchanged", tp, local, gk_nn_nparams(whole), tp);
	}
	for (int r = 0; made && r < tp; r++)
		gk_nn_free(m[r]);
	free(back);
	gk_nn_free(whole);
	gk_comm_close(self);
}

/* The grid's coordinates: tp innermost, every rank once. */
static void test_grid(void)
{
	gk_err err = {0};
	gk_nn_grid g;
	int seen[12] = {0}, bad = 0;
	for (int r = 0; r < 12; r++) {
		if (gk_nn_grid_layout(12, 3, r, &g, &err) < 0) {
			bad++;
			continue;
		}
		bad += g.tp != 3 || g.dp != 4 || g.tp_rank != r % 3 || g.dp_rank != r / 3;
		seen[g.dp_rank * 3 + g.tp_rank]++;
	}
	for (int r = 0; r < 12; r++)
		bad += seen[r] != 1;
	ok(!bad, "world 12, tp 3: rank r is tensor rank r %% 3 of data-parallel group r / 3, "
	   "each place once");
	ok(gk_nn_grid_layout(4, 3, 0, &g, &err) < 0 && strstr(err.msg, "groups of 3 ranks") &&
	   strstr(err.msg, "world's 4 ranks"), "world 4, tp 3: refused with the numbers: %s",
	   err.msg);
	ok(gk_nn_grid_layout(5, 1, 4, &g, &err) == 0 && g.dp == 5 && g.dp_rank == 4 &&
	   g.tp_rank == 0, "tp 1: data parallel over the whole world");
}

/*
 * Sequence parallelism's reorderings: rank r's block of (tp, B, T/tp, C)
 * holds positions [r T/tp, (r+1) T/tp) of each sequence, by the index
 * formula written here; from_ranks undoes to_ranks; and the check's
 * refusals name the numbers.
 */
static void test_sp(int tp)
{
	enum { B = 3, T = 12, C = 5 };
	int Tl = T / tp;
	float *x = randv((size_t)B * T * C, 1.0f);
	float *r = calloc((size_t)B * T * C, sizeof(float));
	float *back = calloc((size_t)B * T * C, sizeof(float));
	gk_nn_sp_to_ranks(r, x, B, T, tp, C, 2);
	int bad = 0;
	for (int k = 0; k < tp; k++)
		for (int b = 0; b < B; b++)
			for (int t = 0; t < Tl; t++)
				for (int c = 0; c < C; c++)
					bad += r[(((size_t)k * B + b) * Tl + t) * C + c] !=
					       x[((size_t)b * T + k * Tl + t) * C + c];
	ok(bad == 0, "sp tp %d: rank k's block is positions [k T/tp, (k+1) T/tp) of each "
	   "sequence (%d wrong)", tp, bad);
	gk_nn_sp_from_ranks(back, r, B, T, tp, C, 2);
	ok(memcmp(back, x, (size_t)B * T * C * sizeof(float)) == 0,
	   "sp tp %d: from_ranks undoes to_ranks", tp);
	free(x);
	free(r);
	free(back);
}

static void test_sp_check(void)
{
	gk_err err = {0};
	ok(gk_nn_sp_check(2, 16, &err) == 0 && gk_nn_sp_check(4, 12, &err) == 0,
	   "sp check: 16 over 2, 12 over 4");
	ok(gk_nn_sp_check(2, 15, &err) < 0 && strstr(err.msg, "length 15 does not divide by 2"),
	   "sp check: 15 over 2 refused: %s", err.msg);
	ok(gk_nn_sp_check(1, 16, &err) < 0 && strstr(err.msg, "not over one rank"),
	   "sp check: one rank refused: %s", err.msg);
}

int main(void)
{
	test_check();
	test_sp(2);
	test_sp(3);
	test_sp(4);
	test_sp_check();
	test_grid();
	for (int tp = 1; tp <= 3; tp++) {
		test_attention(tp);
		test_mlp(tp == 3 ? 4 : tp);
	}
	test_vocab(2);
	test_vocab(3);
	test_vocab(4);
	test_model_slices(2);
	test_model_slices(3);
	return done_testing();
}
