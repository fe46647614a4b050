/*
 * nn_model.c - the GPT-2 model against transformers' GPT2LMHeadModel
 * (llm.c test_gpt2.c's method): tests/unit/nn_ref.py saves a random model
 * with save_pretrained, a batch, its logits, loss, every gradient, ten
 * AdamW steps and torch.optim.AdamW on random gradients; we load the same
 * checkpoint and compare, element by element, with |got - ref| <= tol +
 * eps*|ref| stated per quantity. Every recompute mode must give the same
 * gradients bit for bit. Skips when the test venv has no torch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/nn.h"
#include "st/st.h"
#include "tap.h"

static char py[1024];
static const char *top = ".";

static int have_torch(void)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "'%s/scripts/test-venv' 2>/dev/null", top);
	FILE *f = popen(cmd, "r");
	if (!f)
		return 0;
	int got = fgets(py, sizeof(py), f) != NULL;
	if (pclose(f) != 0 || !got)
		return 0;
	py[strcspn(py, "\n")] = 0;
	snprintf(cmd, sizeof(cmd),
		 "'%s' -c 'import torch, transformers' 2>/dev/null", py);
	return system(cmd) == 0;
}

/* ---- reading the reference ---------------------------------------------------- */

static void *get(const gk_st_file *f, const char *name, gk_dtype dt,
		 size_t *n)
{
	const gk_st_tensor *t = gk_st_find(f, name);
	if (!t || t->dtype != dt) {
		diag("reference tensor %s missing or of another type", name);
		return NULL;
	}
	uint64_t numel = gk_st_numel(t);
	void *buf = malloc(numel * 4 + 4);
	gk_err err = {0};
	if (!buf || gk_st_read(f, t, 0, buf, numel * 4, &err) < 0) {
		diag("%s", err.msg);
		free(buf);
		return NULL;
	}
	if (n)
		*n = numel;
	return buf;
}

/*
 * got against ref: every element within tol + eps*|ref|. Prints the worst
 * element; returns the check's result.
 */
static int close_to(const char *what, const float *got, const float *ref,
		    size_t n, double tol, double eps)
{
	size_t bad = 0, worst = 0;
	double wr = 0.0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);
		double lim = tol + eps * fabs((double)ref[i]);
		if (!(d <= lim))
			bad++;
		double r = d / lim;
		if (r > wr || isnan(d)) {
			wr = isnan(d) ? INFINITY : r;
			worst = i;
		}
	}
	int r = ok(bad == 0, "%s: %zu values within %g + %g|ref|", what, n,
		   tol, eps);
	if (!r || getenv("GK_NN_VERBOSE"))
		diag("%s: %zu bad; worst [%zu] got %.9g ref %.9g (%.3g of the "
		     "limit)", what, bad, worst, n ? got[worst] : 0.0,
		     n ? ref[worst] : 0.0, wr);
	return r;
}

typedef struct casedef {
	int L, C, NH, V, POS, B, T, seed;
	const char *why;
} casedef;

static int run(const char *fmt, ...) GK_PRINTF(1, 2);
static int run(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

/* each ready(off), with the sum of gradients [off, n) at that moment:
 * if they were final then, the sum is the same after backward */
typedef struct readylog {
	size_t off[1024];
	double sum[1024];
	int n;
	const float *g;
	size_t ng;
} readylog;

static double tail_sum(const float *g, size_t off, size_t n)
{
	double s = 0;
	for (size_t i = off; i < n; i++)
		s += g[i];
	return s;
}

static int on_ready(size_t off, void *ctx, gk_err *err)
{
	readylog *r = ctx;
	if (r->n < 1024) {
		r->sum[r->n] = tail_sum(r->g, off, r->ng);
		r->off[r->n++] = off;
	}
	return 0;
}

static gk_nn_model *open_model(const char *dir, const casedef *c,
			       gk_nn_recompute rc, int threads)
{
	char path[1200];
	gk_nn_config cfg;
	gk_err err = {0};
	snprintf(path, sizeof(path), "%s/model/config.json", dir);
	if (gk_nn_config_load(&cfg, path, &err) < 0) {
		diag("%s", err.msg);
		return NULL;
	}
	gk_nn_opts o = {.batch = c->B, .seq = c->T, .recompute = rc,
			.threads = threads};
	gk_nn_model *m;
	if (gk_nn_new(&m, &cfg, &o, &err) < 0) {
		diag("%s", err.msg);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/model", dir);
	if (gk_nn_load(m, path, &err) < 0) {
		diag("%s", err.msg);
		gk_nn_free(m);
		return NULL;
	}
	return m;
}

/* The reference's flat gradient (HF order, unpadded wte) into our layout. */
static void scatter(const gk_nn_model *m, const float *flat, float *dst)
{
	size_t nt, k = 0;
	const gk_nn_tensor *t = gk_nn_tensors(m, &nt);
	memset(dst, 0, gk_nn_nparams(m) * sizeof(float));
	for (size_t i = 0; i < nt; i++) {
		size_t n = (size_t)t[i].shape[0] *
			   (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
		memcpy(dst + t[i].off, flat + k, n * sizeof(float));
		k += n;
	}
}

/* A case's directory, and the loss transformers must give on the model we
 * wrote there (checked once one Python has computed every case's). */
typedef struct casedir {
	char dir[64];
	int pending, wrote; /* one_case got to the loss; wrote the files */
	float loss;
} casedir;

static void one_case(const casedef *c, casedir *cd, int made)
{
	const char *dir = cd->dir;
	diag("case %s: L %d C %d NH %d V %d POS %d B %d T %d", c->why, c->L,
	     c->C, c->NH, c->V, c->POS, c->B, c->T);
	char path[1200];
	snprintf(path, sizeof(path), "%s/ref.safetensors", dir);
	if (!ok(made && access(path, F_OK) == 0, "%s: nn_ref.py make", c->why))
		return;
	int rc;
	gk_st_file *ref = NULL;
	gk_err err = {0};
	if (gk_st_open(&ref, path, &err) < 0) {
		ok(0, "%s: open reference: %s", c->why, err.msg);
		return;
	}
	int32_t *tok = get(ref, "tokens", GK_DT_I32, NULL);
	int32_t *tgt = get(ref, "targets", GK_DT_I32, NULL);
	float *rlogits = get(ref, "logits", GK_DT_F32, NULL);
	float *rloss = get(ref, "loss", GK_DT_F32, NULL);
	float *rsteps = get(ref, "adamw_loss", GK_DT_F32, NULL);

	gk_nn_model *m = open_model(dir, c, GK_NN_RECOMPUTE_NONE, 2);
	if (!ok(m && tok && tgt && rlogits && rloss && rsteps,
		"%s: model loads from save_pretrained's directory", c->why))
		goto out2;
	size_t np = gk_nn_nparams(m), nt;
	const gk_nn_tensor *tt = gk_nn_tensors(m, &nt);
	const gk_nn_config *cfg = gk_nn_config_of(m);
	ok(cfg->vocab == c->V && cfg->vocab_pad % 128 == 0 &&
		   cfg->vocab_pad >= c->V && cfg->vocab_pad < c->V + 128,
	   "%s: vocab %d padded to %lld", c->why, c->V,
	   (long long)cfg->vocab_pad);

	/* forward: logits to 1e-6 + 1e-5|ref| (fp32, other summation
	 * orders), loss to 1e-6 + 1e-5|ref| */
	float loss = 0;
	rc = gk_nn_forward(m, tok, tgt, &loss, &err);
	ok(rc == 0, "%s: forward", c->why);
	size_t N = (size_t)c->B * c->T;
	float *lg = malloc(N * c->V * sizeof(float));
	for (size_t i = 0; i < N; i++)
		memcpy(lg + i * c->V, gk_nn_logits(m, (int)(i / c->T),
						   (int)(i % c->T)),
		       c->V * sizeof(float));
	close_to("logits", lg, rlogits, N * c->V, 1e-6, 1e-5);
	close_to("loss", &loss, rloss, 1, 1e-6, 1e-5);
	free(lg);

	/* backward: each gradient to 2e-6 of the tensor's largest
	 * gradient + 2e-4|ref| (measured: under 3 % of that) */
	gk_nn_zero_grad(m);
	readylog rl = {.n = 0, .g = gk_nn_grads(m), .ng = gk_nn_nparams(m)};
	rc = gk_nn_backward(m, 1.0f, on_ready, &rl, &err);
	ok(rc == 0, "%s: backward", c->why);
	float *g = gk_nn_grads(m);
	int allgood = 1;
	for (size_t i = 0; i < nt; i++) {
		char name[96];
		snprintf(name, sizeof(name), "grad.%s", tt[i].name);
		size_t n;
		float *r = get(ref, name, GK_DT_F32, &n);
		if (!r) {
			allgood = 0;
			continue;
		}
		double mx = 0;
		for (size_t k = 0; k < n; k++)
			mx = fmax(mx, fabs(r[k]));
		allgood &= close_to(name, g + tt[i].off, r, n, 2e-6 * mx, 2e-4);
		free(r);
	}
	ok(allgood, "%s: every gradient matches", c->why);
	/* padded wte rows: never trained */
	int padzero = 1;
	for (size_t k = (size_t)c->V * c->C; k < tt[0].numel; k++)
		padzero &= g[tt[0].off + k] == 0.0f;
	ok(padzero, "%s: padded wte rows get no gradient", c->why);

	/* ready: ln_f; in each block from the last, its weights from the
	 * end (c_proj 10, c_fc 8, ln_2 6, attn.c_proj 4, c_attn 2, ln_1 0
	 * in the block's table); then 0. Each time, the gradients from off
	 * on were final: their sum then is their sum now. */
	static const int wt[6] = {10, 8, 6, 4, 2, 0};
	int order = rl.n == 6 * c->L + 2 && rl.off[0] == tt[nt - 2].off &&
		    rl.off[rl.n - 1] == 0;
	for (int l = 0; l < c->L && order; l++)
		for (int w = 0; w < 6 && order; w++)
			order = rl.off[1 + 6 * l + w] ==
				tt[2 + 12 * (size_t)(c->L - 1 - l) + wt[w]].off;
	int final = 1;
	for (int i = 0; i < rl.n; i++)
		final &= rl.sum[i] == tail_sum(g, rl.off[i], rl.ng);
	ok(order && final, "%s: ready(off) after ln_f, each weight of each "
	   "block, and 0 at the end, with [off, end) final each time (%d calls)",
	   c->why, rl.n);

	float *g1 = malloc(np * sizeof(float));
	memcpy(g1, g, np * sizeof(float));

	/* same thread count, same bits; and accumulation: + 0.5 g */
	gk_nn_forward(m, tok, tgt, NULL, &err);
	gk_nn_zero_grad(m);
	gk_nn_backward(m, 1.0f, NULL, NULL, &err);
	ok(memcmp(g, g1, np * sizeof(float)) == 0,
	   "%s: backward is deterministic", c->why);
	gk_nn_forward(m, tok, tgt, NULL, &err);
	gk_nn_backward(m, 0.5f, NULL, NULL, &err);
	/* sums over rows added onto a gradient round differently from
	 * 1.5 times the sum: 1e-6 of the largest gradient + 1e-5|ref| */
	double gmax = 0, aworst = 0;
	for (size_t k = 0; k < np; k++)
		gmax = fmax(gmax, fabs(g1[k]));
	for (size_t k = 0; k < np; k++)
		aworst = fmax(aworst, fabs(g[k] - 1.5 * g1[k]) /
					    (1e-6 * gmax + 1e-5 * fabs(g1[k])));
	ok(aworst <= 1.0, "%s: backward accumulates scale * grad (%.2g of "
	   "the limit)", c->why, aworst);
	ok(gk_nn_backward(m, 1.0f, NULL, NULL, &err) < 0,
	   "%s: a second backward without forward is refused", c->why);

	/* recompute modes: the same gradients, bit for bit */
	for (int r = GK_NN_RECOMPUTE_GELU; r <= GK_NN_RECOMPUTE_LAYER; r++) {
		gk_nn_model *m2 = open_model(dir, c, r, 2);
		float l2 = 0;
		int good = m2 && gk_nn_forward(m2, tok, tgt, &l2, &err) == 0;
		if (good) {
			gk_nn_zero_grad(m2);
			good = gk_nn_backward(m2, 1.0f, NULL, NULL, &err) == 0;
		}
		ok(good && l2 == loss &&
			   memcmp(gk_nn_grads(m2), g1, np * sizeof(float)) == 0,
		   "%s: recompute %s gives the same loss and gradients",
		   c->why, r == GK_NN_RECOMPUTE_GELU ? "gelu" : "layer");
		gk_nn_mem a, b;
		if (m2) {
			gk_nn_memory(m, &a);
			gk_nn_memory(m2, &b);
			ok(b.activations < a.activations &&
				   b.parameters == a.parameters &&
				   a.parameters >= np * 4,
			   "%s: recompute %s keeps fewer activations (%llu < "
			   "%llu bytes)", c->why,
			   r == GK_NN_RECOMPUTE_GELU ? "gelu" : "layer",
			   (unsigned long long)b.activations,
			   (unsigned long long)a.activations);
		}
		gk_nn_free(m2);
	}

	/* one thread: the same gradients within rounding */
	gk_nn_model *m1 = open_model(dir, c, GK_NN_RECOMPUTE_NONE, 1);
	if (m1 && gk_nn_forward(m1, tok, tgt, NULL, &err) == 0) {
		gk_nn_zero_grad(m1);
		gk_nn_backward(m1, 1.0f, NULL, NULL, &err);
		double worst = 0;
		for (size_t k = 0; k < np; k++)
			worst = fmax(worst, fabs(gk_nn_grads(m1)[k] - g1[k]) /
						    (1e-6 + fabs(g1[k])));
		ok(worst < 1e-3, "%s: 1 thread agrees with 2 (worst rel %.2g)",
		   c->why, worst);
	}
	gk_nn_free(m1);

	/* AdamW alone on random gradients: 1e-8 + 1e-6|ref| */
	float *mo = calloc(np, sizeof(float)), *vo = calloc(np, sizeof(float));
	float *p = gk_nn_params(m);
	float *p0 = malloc(np * sizeof(float));
	memcpy(p0, p, np * sizeof(float));
	gk_nn_adamw ac = {0.9f, 0.95f, 1e-8f, 0.1f};
	/* a ZeRO-1 style split in the middle of a tensor */
	size_t mid = tt[nt / 2].off + tt[nt / 2].numel / 3;
	for (int s = 1; s <= 3; s++) {
		char name[32];
		snprintf(name, sizeof(name), "opt.g%d", s);
		float *flat = get(ref, name, GK_DT_F32, NULL);
		if (!flat)
			break;
		scatter(m, flat, g);
		free(flat);
		float lr = 1e-3f * s;
		gk_nn_adamw_step(m, &ac, lr, s, 0, mid, p, g, 1.0f, mo, vo);
		gk_nn_adamw_step(m, &ac, lr, s, mid, np, p + mid, g + mid, 1.0f,
				 mo + mid, vo + mid);
	}
	allgood = 1;
	for (size_t i = 0; i < nt; i++) {
		char name[96];
		snprintf(name, sizeof(name), "opt.%s", tt[i].name);
		size_t n;
		float *r = get(ref, name, GK_DT_F32, &n);
		if (!r) {
			allgood = 0;
			continue;
		}
		allgood &= close_to(name, p + tt[i].off, r, n, 1e-8, 1e-6);
		free(r);
	}
	ok(allgood, "%s: AdamW (split range) matches torch.optim.AdamW",
	   c->why);

	/* the clipping factor: gscale gives the bits of scaling g first, as
	 * torch's clip_grad_norm_ does in place */
	{
		size_t bytes = np * sizeof(float);
		float *pa = malloc(bytes), *ma = malloc(bytes), *va = malloc(bytes);
		float *pb = malloc(bytes), *mb = malloc(bytes), *vb = malloc(bytes);
		float *gs = malloc(bytes);
		if (pa && ma && va && pb && mb && vb && gs) {
			const float sc = 0.3183f;
			memcpy(pa, p, bytes), memcpy(pb, p, bytes);
			memcpy(ma, mo, bytes), memcpy(mb, mo, bytes);
			memcpy(va, vo, bytes), memcpy(vb, vo, bytes);
			for (size_t k = 0; k < np; k++)
				gs[k] = g[k] * sc;
			gk_nn_adamw_step(m, &ac, 2e-3f, 4, 0, np, pa, g, sc, ma, va);
			gk_nn_adamw_step(m, &ac, 2e-3f, 4, 0, np, pb, gs, 1.0f, mb, vb);
			ok(memcmp(pa, pb, bytes) == 0 && memcmp(ma, mb, bytes) == 0 &&
				   memcmp(va, vb, bytes) == 0 && memcmp(pa, p, bytes) != 0,
			   "%s: AdamW's gradient scale gives the bits of scaling first",
			   c->why);
		}
		free(pa), free(ma), free(va), free(pb), free(mb), free(vb), free(gs);
	}

	/* ten AdamW steps on one batch: losses to 1e-6 + 1e-5|ref| */
	memcpy(p, p0, np * sizeof(float));
	memset(mo, 0, np * sizeof(float));
	memset(vo, 0, np * sizeof(float));
	float steps[10];
	for (int s = 0; s < 10; s++) {
		gk_nn_zero_grad(m);
		gk_nn_forward(m, tok, tgt, &steps[s], &err);
		gk_nn_backward(m, 1.0f, NULL, NULL, &err);
		gk_nn_adamw_step(m, &ac, 1e-3f, s + 1, 0, np, p, g, 1.0f, mo, vo);
	}
	close_to("ten AdamW steps: losses", steps, rsteps, 10, 1e-6, 1e-5);
	ok(steps[9] < steps[0], "%s: the loss falls (%g -> %g)", c->why,
	   steps[0], steps[9]);

	/* our config.json and tensors load in transformers, same loss */
	memcpy(p, p0, np * sizeof(float));
	char d2[1200], tf[1200];
	char path2[1400];
	snprintf(d2, sizeof(d2), "%s/ours", dir);
	mkdir(d2, 0777);
	snprintf(path2, sizeof(path2), "%s/config.json", d2);
	rc = gk_nn_config_save(cfg, path2, &err);
	gk_st_spec *spec = calloc(nt, sizeof(*spec));
	const void **data = calloc(nt, sizeof(*data));
	uint64_t (*shape)[2] = calloc(nt, sizeof(*shape));
	for (size_t i = 0; i < nt; i++) {
		shape[i][0] = (uint64_t)tt[i].shape[0];
		shape[i][1] = (uint64_t)tt[i].shape[1];
		spec[i] = (gk_st_spec){tt[i].name, GK_DT_F32, tt[i].ndim,
				       shape[i]};
		data[i] = p + tt[i].off;
	}
	snprintf(path2, sizeof(path2), "%s/model.safetensors", d2);
	if (rc == 0)
		rc = gk_st_save(path2, spec, data, nt, NULL, 0, &err);
	uint64_t bt[2] = {(uint64_t)c->B, (uint64_t)c->T};
	gk_st_spec ts[2] = {{"tokens", GK_DT_I32, 2, bt},
			    {"targets", GK_DT_I32, 2, bt}};
	const void *td[2] = {tok, tgt};
	snprintf(tf, sizeof(tf), "%s/tokens.safetensors", dir);
	if (rc == 0)
		rc = gk_st_save(tf, ts, td, 2, NULL, 0, &err);
	/* dir/ours, dir/tokens.safetensors: check_losses runs nn_ref.py loss */
	cd->pending = 1;
	cd->wrote = rc == 0;
	cd->loss = loss;
	free(spec);
	free(data);
	free(shape);

	free(mo);
	free(vo);
	free(p0);
	free(g1);
out2:
	gk_nn_free(m);
	free(tok);
	free(tgt);
	free(rlogits);
	free(rloss);
	free(rsteps);
	gk_st_close(ref);
}

/* Each pending case: transformers' loss on the model we wrote, ours. */
static void check_losses(const casedef *cases, casedir *cd, size_t n)
{
	char cmd[4096];
	size_t k = (size_t)snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/unit/nn_ref.py' loss",
				    py, top);
	int any = 0;
	for (size_t i = 0; i < n; i++)
		if (cd[i].pending && cd[i].wrote && k < sizeof(cmd)) {
			k += (size_t)snprintf(cmd + k, sizeof(cmd) - k,
					      " '%s/ours' '%s/tokens.safetensors' '%s/loss.txt'",
					      cd[i].dir, cd[i].dir, cd[i].dir);
			any = 1;
		}
	int rc = any && k < sizeof(cmd) ? run("%s", cmd) : -1;
	for (size_t i = 0; i < n; i++) {
		if (!cd[i].pending)
			continue;
		char lf[320];
		snprintf(lf, sizeof(lf), "%s/loss.txt", cd[i].dir);
		float hf = NAN, loss = cd[i].loss;
		FILE *f = fopen(lf, "r");
		if (f) {
			if (fscanf(f, "%f", &hf) != 1)
				hf = NAN;
			fclose(f);
		}
		ok(rc == 0 && cd[i].wrote && fabsf(hf - loss) <= 1e-6f + 1e-5f * fabsf(loss),
		   "%s: config.json and tensors we write load in transformers "
		   "(loss %.7g, ours %.7g)", cases[i].why, hf, loss);
	}
}

int main(void)
{
	if (getenv("GK_TOP"))
		top = getenv("GK_TOP");
	if (!have_torch()) {
		skip_all("test venv has no torch and transformers");
		return 0;
	}
	static const casedef cases[] = {
		/* odd sizes: vocab not a multiple of 128, 3 heads of 16, T
		 * shorter than n_positions */
		{2, 48, 3, 1000, 64, 3, 37, 1, "odd"},
		/* the byte vocabulary and a power-of-two shape */
		{3, 64, 4, 257, 32, 2, 32, 2, "bytes"},
		/* heads of 12, not whole 16-float vectors: attention's
		 * padded copies and output tiles */
		{2, 36, 3, 300, 40, 2, 39, 3, "narrow heads"},
	};
	/* one Python makes every case's reference, one computes the losses */
	enum { NCASES = GK_ARRAY_SIZE(cases) };
	casedir cd[NCASES] = {0};
	char cmd[4096];
	size_t k = (size_t)snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/unit/nn_ref.py' make",
				    py, top);
	int made = 1;
	for (size_t i = 0; i < NCASES; i++) {
		const casedef *c = &cases[i];
		snprintf(cd[i].dir, sizeof(cd[i].dir), "/tmp/gk-nn-model-XXXXXX");
		if (!mkdtemp(cd[i].dir)) {
			ok(0, "mkdtemp");
			return done_testing();
		}
		k += (size_t)snprintf(cmd + k, k < sizeof(cmd) ? sizeof(cmd) - k : 0,
				      " '%s' %d %d %d %d %d %d %d %d", cd[i].dir, c->L, c->C,
				      c->NH, c->V, c->POS, c->B, c->T, c->seed);
	}
	if (k >= sizeof(cmd) || run("%s", cmd) != 0)
		made = 0;
	for (size_t i = 0; i < NCASES; i++)
		one_case(&cases[i], &cd[i], made);
	check_losses(cases, cd, NCASES);
	for (size_t i = 0; i < NCASES; i++)
		if (!getenv("GK_NN_KEEP"))
			run("rm -rf '%s'", cd[i].dir);
	return done_testing();
}
