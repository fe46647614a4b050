/*
 * nn_pp.c - pipeline parallelism's stages (lib/nn/pp.c and the model's
 * stage forward and backward) against the whole model: every stage of a
 * pipeline run in one process, the activations and their gradients
 * copied here from one stage's model to the next, as the trainer's
 * messages carry them. A stage computes the same kernels on the same
 * inputs as the whole model, so its loss and the gradients of its layers
 * must be the same bits; only the tied wte's gradient comes in two parts
 * (the first stage's embedding, the last's head) whose sum is compared
 * within rounding. The layer split and the ranges are checked against
 * formulas written here. With activation slots (gk_nn_pp_slots), every
 * micro-batch's forward runs before the first backward, each backward
 * differentiating its own slot's forward. The interleaved schedule's
 * chunks likewise (test_chunks).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "nn/internal.h"
#include "nn/train.h"
#include "tap.h"

static void test_layers(void)
{
	gk_err err = {0};
	/* L / S each, one more on each of the first L % S stages */
	static const struct {
		int L, S, want[4][2];
	} cases[] = {
		{2, 2, {{0, 1}, {1, 2}}},
		{3, 3, {{0, 1}, {1, 2}, {2, 3}}},
		{4, 3, {{0, 2}, {2, 3}, {3, 4}}},
		{5, 3, {{0, 2}, {2, 4}, {4, 5}}},
		{12, 4, {{0, 3}, {3, 6}, {6, 9}, {9, 12}}},
		{7, 1, {{0, 7}}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int good = 1;
		for (int s = 0; s < cases[i].S; s++) {
			int l0 = -1, l1 = -1;
			good = good && gk_nn_pp_layers(cases[i].L, cases[i].S, s, &l0, &l1, &err) == 0 &&
			       l0 == cases[i].want[s][0] && l1 == cases[i].want[s][1];
		}
		ok(good, "%d layers on %d stages: blocks as balanced as they go, the longer first",
		   cases[i].L, cases[i].S);
	}
	int l0, l1;
	ok(gk_nn_pp_layers(2, 3, 0, &l0, &l1, &err) < 0 && strstr(err.msg, "has 2 layers") &&
	   strstr(err.msg, "--pp 2 or fewer"), "more stages than layers: refused (%s)", err.msg);
	ok(gk_nn_pp_layers(4, 0, 0, &l0, &l1, &err) < 0, "0 stages: refused (%s)", err.msg);
	ok(gk_nn_pp_layers(4, 2, 2, &l0, &l1, &err) < 0, "stage 2 of 2: refused (%s)", err.msg);
}

/* the largest |a - b| / (1 + |b|) */
static double maxrel(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/*
 * S stages of a model of L layers against the whole one, over M
 * micro-batches accumulated (scale 1/M), with the stages' ranges. gpipe:
 * each stage keeps M activation slots, and every micro-batch's forward
 * runs through the pipeline before the first backward (the whole model
 * runs each micro-batch's forward and backward in turn).
 */
static void test_stages(int L, int S, int M, int gpipe)
{
	gk_err err = {0};
	gk_nn_config c = {.layers = L, .hidden = 32, .heads = 2, .vocab = 257, .positions = 16,
			  .ln_eps = 1e-5f};
	gk_nn_config_finish(&c, &err);
	int B = 2, T = 8, N = B * T;
	size_t NC = (size_t)N * 32;
	gk_nn_opts o = {.batch = B, .seq = T, .threads = 1};
	gk_nn_model *whole = NULL, *st[4] = {NULL};
	if (gk_nn_new(&whole, &c, &o, &err) < 0) {
		ok(0, "whole model: %s", err.msg);
		return;
	}
	gk_nn_init(whole, 7);
	size_t n = gk_nn_nparams(whole);
	int made = 1;
	for (int s = 0; s < S; s++) {
		gk_nn_opts os = o;
		os.pp = S;
		os.pp_rank = s;
		if (gk_nn_new(&st[s], &c, &os, &err) < 0) {
			made = 0;
			break;
		}
		memcpy(gk_nn_params(st[s]), gk_nn_params(whole), n * sizeof(float));
		gk_nn_zero_grad(st[s]);
		if (gpipe && gk_nn_pp_slots(st[s], M, &err) < 0) {
			made = 0;
			break;
		}
	}
	if (!ok(made, "%d stages of %d layers: made", S, L)) {
		gk_nn_free(whole);
		for (int s = 0; s < S; s++)
			gk_nn_free(st[s]);
		return;
	}
	gk_nn_zero_grad(whole);

	/* the ranges: contiguous, covering the buffer once, the last stage's
	 * shared wte its first rows */
	size_t at = 0, lo, hi, shared;
	int ranges = 1;
	for (int s = 0; s < S; s++) {
		gk_nn_pp_range(st[s], s, &lo, &hi, &shared);
		ranges = ranges && lo == at && hi > lo &&
			 shared == (s == S - 1 && S > 1 ? (size_t)c.vocab_pad * 32 : 0);
		at = hi;
	}
	ok(ranges && at == n, "the stages' ranges cover the %zu parameters once, in order", n);

	int32_t *tok = malloc((size_t)M * N * sizeof(int32_t));
	int32_t *tg = malloc((size_t)M * N * sizeof(int32_t));
	for (int i = 0; i < M * N; i++) {
		tok[i] = (int32_t)((i * 37 + 11) % 257);
		tg[i] = (int32_t)((i * 53 + 5) % 257);
	}
	tg[3] = -1; /* an ignored target */
	float *x = malloc(NC * sizeof(float));
	int same_loss = 1, rc = 0;
	float lw[8], ls[8];
	for (int k = 0; k < M && rc == 0; k++)
		rc = gk_nn_forward(whole, tok + (size_t)k * N, tg + (size_t)k * N, &lw[k], &err) < 0 ||
		     gk_nn_backward(whole, 1.0f / M, NULL, NULL, &err) < 0;
	/* forwards: all first under gpipe, else each before its backward */
	for (int j = 0; j < M && rc == 0; j++) {
		for (int s = 0; s < S && rc == 0; s++) {
			if (gpipe)
				gk_nn_pp_use_slot(st[s], j);
			if (s > 0)
				memcpy(gk_nn_pp_input(st[s]), x, NC * sizeof(float));
			rc = gk_nn_forward(st[s], tok + (size_t)j * N,
					   s == S - 1 ? tg + (size_t)j * N : NULL, &ls[j], &err) < 0;
			if (s < S - 1)
				memcpy(x, gk_nn_pp_output(st[s]), NC * sizeof(float));
		}
		if (gpipe && j < M - 1)
			continue;
		for (int k = gpipe ? 0 : j; k <= j && rc == 0; k++) {
			same_loss = same_loss && !memcmp(&ls[k], &lw[k], sizeof ls[k]);
			for (int s = S - 1; s >= 0 && rc == 0; s--) {
				if (gpipe)
					gk_nn_pp_use_slot(st[s], k);
				if (s < S - 1)
					memcpy(gk_nn_pp_grad(st[s]), x, NC * sizeof(float));
				rc = gk_nn_backward(st[s], 1.0f / M, NULL, NULL, &err) < 0;
				if (s > 0)
					memcpy(x, gk_nn_pp_grad(st[s]), NC * sizeof(float));
			}
		}
	}
	ok(rc == 0, "%d micro-batches through %d stages%s: %s", M, S,
	   gpipe ? ", every forward first, each in its slot" : "", rc ? err.msg : "ran");
	ok(same_loss, "the last stage's loss: the whole model's, bit for bit");
	/* each stage's own range, wte aside: the whole model's gradients bit
	 * for bit; wte: the first stage's part plus the last's */
	size_t V = (size_t)c.vocab_pad * 32;
	int bits = 1, untouched = 1;
	for (int s = 0; s < S; s++) {
		gk_nn_pp_range(st[s], s, &lo, &hi, &shared);
		size_t a = s == 0 ? V : lo;
		const float *g = gk_nn_grads(st[s]), *w = gk_nn_grads(whole);
		bits = bits && !memcmp(g + a, w + a, (hi - a) * sizeof(float));
		/* a stage writes no gradient outside its range (but the head's wte) */
		for (size_t i = 0; i < n; i++)
			if ((i < lo || i >= hi) && !(s == S - 1 && i < V) && g[i] != 0.0f) {
				untouched = 0;
				break;
			}
	}
	ok(bits, "every stage's layers: the whole model's gradients, bit for bit");
	ok(untouched, "no stage writes a gradient outside its range");
	float *wte = malloc(V * sizeof(float));
	const float *g0 = gk_nn_grads(st[0]), *gl = gk_nn_grads(st[S - 1]);
	for (size_t i = 0; i < V; i++)
		wte[i] = g0[i] + gl[i];
	double d = maxrel(wte, gk_nn_grads(whole), V);
	ok(d < 1e-6, "wte: the embedding's part plus the head's = the whole model's within "
	   "rounding (%.2g)", d);
	/* gk_nn_pp_sumsq: pieces cut anywhere (through tensors, as ZeRO-1's
	 * pieces of a stage are) add up to a plain loop's sum of squares */
	const float *wg = gk_nn_grads(whole);
	double ref = 0, parts = 0;
	for (size_t i = 0; i < n; i++)
		ref += (double)wg[i] * wg[i];
	size_t cut[4] = {0, n / 3 + 1, 2 * n / 3 + 7, n};
	for (int i = 0; i < 3; i++)
		parts += gk_nn_pp_sumsq(whole, cut[i], cut[i + 1]);
	ok(ref > 0 && fabs(parts - ref) <= 1e-12 * ref, "the sum of squares by pieces: a plain "
	   "loop's within 1e-12 (%.17g, %.17g)", parts, ref);
	free(wte);
	free(x);
	free(tok);
	free(tg);
	gk_nn_free(whole);
	for (int s = 0; s < S; s++)
		gk_nn_free(st[s]);
}

/* pages of [a, b) floats of buf resident (mincore), whole pages only */
static size_t resident(const float *buf, size_t a, size_t b)
{
	size_t pg = gk_nn_grad_page(), n = 0;
	a = (a + pg - 1) / pg * pg;
	b = b / pg * pg;
	unsigned char v;
	for (size_t i = a; i + pg <= b; i += pg)
		if (mincore((void *)(buf + i), pg * sizeof(float), &v) == 0 && (v & 1))
			n++;
	return n;
}

/*
 * A stage mapped lazily: gk_nn_init_stage draws the values the whole
 * model's gk_nn_init draws in the stage's range and wte (the last
 * stage), and leaves no page outside them resident; gk_nn_pp_release
 * gives back what a whole initialisation (a load) filled. gk_nn_memory
 * and gk_nn_plan count the stage's floats.
 */
static void test_lazy_stage(int L, int S)
{
	gk_err err = {0};
	gk_nn_config c = {.layers = L, .hidden = 64, .heads = 2, .vocab = 1000, .positions = 16,
			  .ln_eps = 1e-5f};
	gk_nn_config_finish(&c, &err);
	gk_nn_opts o = {.batch = 1, .seq = 8, .threads = 1};
	gk_nn_model *whole = NULL;
	if (gk_nn_new(&whole, &c, &o, &err) < 0) {
		ok(0, "whole model: %s", err.msg);
		return;
	}
	gk_nn_init(whole, 11);
	size_t n = gk_nn_nparams(whole);
	const float *w = gk_nn_params(whole);
	for (int s = 0; s < S; s++) {
		gk_nn_opts os = o;
		os.pp = S;
		os.pp_rank = s;
		os.lazy_params = os.lazy_grads = 1;
		gk_nn_model *m = NULL;
		if (!ok(gk_nn_new(&m, &c, &os, &err) == 0, "stage %d of %d, mapped lazily", s, S))
			continue;
		size_t lo, hi, sh;
		gk_nn_pp_range(m, s, &lo, &hi, &sh);
		gk_nn_init_stage(m, 11);
		const float *p = gk_nn_params(m);
		int same = !memcmp(p + lo, w + lo, (hi - lo) * sizeof(float)) &&
			   !memcmp(p, w, sh * sizeof(float));
		size_t out = resident(p, sh, lo) + resident(p, hi, n);
		ok(same && out == 0, "stage %d of %d: its range [%zu, %zu) and wte [0, %zu) drawn "
		   "as the whole model's, %zu pages outside resident", s, S, lo, hi, sh, out);
		gk_nn_init(m, 11); /* as a load: the whole buffer */
		size_t full = resident(p, hi, n) + resident(p, sh, lo);
		gk_nn_pp_release(m);
		out = resident(p, sh, lo) + resident(p, hi, n);
		same = !memcmp(p + lo, w + lo, (hi - lo) * sizeof(float)) &&
		       !memcmp(p, w, sh * sizeof(float));
		ok(full > 0 && out == 0 && same, "stage %d of %d: gk_nn_pp_release gives back the "
		   "%zu pages a whole initialisation filled outside it, and keeps its own", s, S,
		   full);
		gk_nn_mem mm, pl;
		gk_nn_memory(m, &mm);
		size_t want = ((hi - lo + sh) * sizeof(float) + 63) / 64 * 64;
		int planned = gk_nn_plan(&c, &os, &pl, &err) == 0;
		ok(gk_nn_pp_floats(m) == hi - lo + sh && mm.parameters == want &&
		   mm.gradients == want && planned && pl.parameters == want && pl.gradients == want,
		   "stage %d of %d: %zu bytes of parameters and of gradients, by gk_nn_memory and "
		   "gk_nn_plan (%llu, %llu)", s, S, want, (unsigned long long)mm.parameters,
		   (unsigned long long)pl.parameters);
		gk_nn_free(m);
	}
	gk_nn_free(whole);
}

/*
 * The interleaved schedule's chunks (gk_nn_pp_chunk_layers, the flat
 * buffer's stage-major placement, gk_nn_pp_to_hf): stage s's chunk c is
 * the layers of chunk c S + s of S V equal ones; each stage's range holds
 * exactly its chunks' tensors (and wte, wpe on the first, ln_f on the
 * last); the tensors keep the whole model's names, shapes and order; a
 * buffer moved to the Hugging Face order has each tensor at the whole
 * model's offset, and back is the identity. Then M micro-batches through
 * the S V chunks in one process (each stage's chunk c in its slot c):
 * the last chunk's losses are the whole model's bits, and every layer's
 * gradients, found by name, the whole model's bits.
 */
static int layer_of(const char *name)
{
	int l;
	return sscanf(name, "transformer.h.%d.", &l) == 1 ? l : -1;
}

static void test_chunks(int L, int S, int V, int M)
{
	gk_err err = {0};
	int q = L / (S * V), cover[16] = {0}, good = 1;
	for (int s = 0; s < S; s++)
		for (int c = 0; c < V; c++) {
			int l0 = -1, l1 = -1;
			good = good && gk_nn_pp_chunk_layers(L, S, V, s, c, &l0, &l1, &err) == 0 &&
			       l0 == (c * S + s) * q && l1 == l0 + q;
			for (int l = l0; good && l < l1; l++)
				cover[l]++;
		}
	for (int l = 0; l < L; l++)
		good = good && cover[l] == 1;
	ok(good, "%d layers, %d stages x %d chunks: stage s's chunk c is the (c S + s)-th of "
	   "%d layers, each layer once", L, S, V, q);

	gk_nn_config cf = {.layers = L, .hidden = 32, .heads = 2, .vocab = 257, .positions = 16,
			   .ln_eps = 1e-5f};
	gk_nn_config_finish(&cf, &err);
	int B = 2, T = 8, N = B * T;
	size_t NC = (size_t)N * 32;
	gk_nn_opts o = {.batch = B, .seq = T, .threads = 1};
	gk_nn_model *whole = NULL, *st[4] = {NULL};
	int made = gk_nn_new(&whole, &cf, &o, &err) == 0;
	for (int s = 0; made && s < S; s++) {
		gk_nn_opts os = o;
		os.pp = S;
		os.pp_rank = s;
		os.pp_chunks = V;
		made = gk_nn_new(&st[s], &cf, &os, &err) == 0 && gk_nn_pp_slots(st[s], V, &err) == 0;
	}
	if (!ok(made, "%d stages of %d chunks: made%s%s", S, V, made ? "" : ": ", made ? "" : err.msg))
		goto out;
	gk_nn_init(whole, 7);
	size_t n = gk_nn_nparams(whole), nt, nw;
	const gk_nn_tensor *tw = gk_nn_tensors(whole, &nw);
	int same = gk_nn_nparams(st[0]) == n, ranges = 1;
	for (int s = 0; s < S; s++) {
		const gk_nn_tensor *ts = gk_nn_tensors(st[s], &nt);
		size_t lo, hi, shared;
		gk_nn_pp_range(st[s], s, &lo, &hi, &shared);
		same = same && nt == nw;
		for (size_t i = 0; same && i < nt; i++) {
			same = !strcmp(ts[i].name, tw[i].name) && ts[i].numel == tw[i].numel &&
			       ts[i].off == gk_nn_tensors(st[0], &nt)[i].off;
			int l = layer_of(ts[i].name);
			int mine = l >= 0 ? (l / q) % S == s
					  : strstr(ts[i].name, "ln_f") ? s == S - 1 : s == 0;
			int in = ts[i].off >= lo && ts[i].off + ts[i].numel <= hi;
			int out = ts[i].off + ts[i].numel <= lo || ts[i].off >= hi;
			ranges = ranges && (mine ? in : out);
		}
	}
	ok(same, "the stages' tensors: the whole model's names, sizes and order, at the same "
	   "offsets on every stage");
	ok(ranges, "each stage's range: its chunks' blocks (wte, wpe on the first, ln_f on the "
	   "last), no other stage's");
	/* the stages' own layout of the whole model's parameters, by name */
	float *run = malloc(n * sizeof(float)), *hf = malloc(n * sizeof(float));
	float *back = malloc(n * sizeof(float));
	const gk_nn_tensor *ts = gk_nn_tensors(st[0], &nt);
	for (size_t i = 0; i < nt; i++)
		memcpy(run + ts[i].off, gk_nn_params(whole) + tw[i].off, ts[i].numel * sizeof(float));
	gk_nn_pp_to_hf(st[0], run, hf);
	gk_nn_pp_from_hf(st[0], hf, back);
	ok(!memcmp(hf, gk_nn_params(whole), n * sizeof(float)) &&
	   !memcmp(back, run, n * sizeof(float)),
	   "to the Hugging Face order: the whole model's buffer; and back: the same bits");
	for (int s = 0; s < S; s++) {
		memcpy(gk_nn_params(st[s]), run, n * sizeof(float));
		gk_nn_zero_grad(st[s]);
	}
	gk_nn_zero_grad(whole);

	int32_t *tok = malloc((size_t)M * N * sizeof(int32_t));
	int32_t *tg = malloc((size_t)M * N * sizeof(int32_t));
	for (int i = 0; i < M * N; i++) {
		tok[i] = (int32_t)((i * 37 + 11) % 257);
		tg[i] = (int32_t)((i * 53 + 5) % 257);
	}
	float *x = malloc(NC * sizeof(float));
	int rc = 0, same_loss = 1, K = S * V;
	for (int k = 0; k < M && rc == 0; k++) {
		float lw, ls = 0;
		rc = gk_nn_forward(whole, tok + (size_t)k * N, tg + (size_t)k * N, &lw, &err) < 0 ||
		     gk_nn_backward(whole, 1.0f / M, NULL, NULL, &err) < 0;
		for (int j = 0; j < K && rc == 0; j++) {
			gk_nn_model *m = st[j % S];
			gk_nn_pp_use_slot(m, j / S);
			gk_nn_pp_use_chunk(m, j / S);
			if (j > 0)
				memcpy(gk_nn_pp_input(m), x, NC * sizeof(float));
			rc = gk_nn_forward(m, tok + (size_t)k * N, j == K - 1 ? tg + (size_t)k * N : NULL,
					   &ls, &err) < 0;
			if (j < K - 1)
				memcpy(x, gk_nn_pp_output(m), NC * sizeof(float));
		}
		same_loss = same_loss && !memcmp(&ls, &lw, sizeof ls);
		for (int j = K - 1; j >= 0 && rc == 0; j--) {
			gk_nn_model *m = st[j % S];
			gk_nn_pp_use_slot(m, j / S);
			gk_nn_pp_use_chunk(m, j / S);
			if (j < K - 1)
				memcpy(gk_nn_pp_grad(m), x, NC * sizeof(float));
			rc = gk_nn_backward(m, 1.0f / M, NULL, NULL, &err) < 0;
			if (j > 0)
				memcpy(x, gk_nn_pp_grad(m), NC * sizeof(float));
		}
	}
	ok(rc == 0, "%d micro-batches through %d chunks on %d stages: %s", M, K, S,
	   rc ? err.msg : "ran");
	ok(same_loss, "the last chunk's losses: the whole model's, bit for bit");
	int bits = 1;
	for (size_t i = 0; i < nt; i++) {
		int l = layer_of(ts[i].name);
		if (l >= 0)
			bits = bits && !memcmp(gk_nn_grads(st[(l / q) % S]) + ts[i].off,
					       gk_nn_grads(whole) + tw[i].off,
					       ts[i].numel * sizeof(float));
	}
	ok(bits, "every layer's gradients on its stage: the whole model's, bit for bit");
	int l0, l1;
	if (L == 4)
		ok(gk_nn_pp_chunk_layers(6, 2, 2, 0, 0, &l0, &l1, &err) < 0 &&
		   strstr(err.msg, "6 layers do not divide into 4 chunks") &&
		   strstr(err.msg, "4 layers would, or 8"),
		   "6 layers in 2 x 2 chunks: refused with the numbers (%s)", err.msg);
	free(x);
	free(tok);
	free(tg);
	free(run);
	free(hf);
	free(back);
out:
	gk_nn_free(whole);
	for (int s = 0; s < S; s++)
		gk_nn_free(st[s]);
}

int main(void)
{
	test_layers();
	test_lazy_stage(4, 2);
	test_lazy_stage(4, 3);
	test_stages(2, 2, 1, 0);
	test_stages(3, 3, 3, 0);
	test_stages(4, 3, 2, 0);
	test_stages(3, 3, 4, 1);
	test_chunks(4, 2, 2, 3);
	test_chunks(12, 3, 2, 2);
	test_chunks(8, 2, 4, 2);
	return done_testing();
}
