/*
 * mem_estimate.c - the memory model against published figures: ZeRO's
 * Figure 1 model states, Korthikanti et al.'s Table 2 activation formulas
 * (evaluated here directly, for their GPT-3 175B, 530B and 1T settings),
 * KV cache sizes, pipeline and tensor splits that must add back up, and
 * the fit search's invariants.
 */
#include <math.h>

#include "mem/mem.h"
#include "tap.h"

static uint64_t part(const gk_mem_est *e, const char *key)
{
	for (int i = 0; i < e->nparts; i++)
		if (strcmp(e->part[i].key, key) == 0)
			return e->part[i].bytes;
	return UINT64_MAX;
}

/*
 * ZeRO paper, Figure 1: Psi = 7.5B, N_d = 64, K = 12 (mixed-precision
 * Adam): 120 GB baseline, 31.4 GB P_os, 16.6 GB P_os+g, 1.9 GB P_os+g+p
 * (GB = 1e9 bytes, one decimal).
 */
static void zero_figure1(void)
{
	gk_mem_model m = {.arch = GK_MEM_ARCH_PARAMS, .params = 7500000000};
	gk_mem_run r;
	gk_mem_run_default(&r);
	r.dp = 64;
	const double fig[] = {120, 31.4, 16.6, 1.9};
	for (int z = 0; z <= 3; z++) {
		gk_mem_est e;
		gk_err err;
		r.zero = z;
		ok(gk_mem_estimate(&m, &r, 1, &e, &err) == 0, "ZeRO-%d runs", z);
		double gb = e.model_states / 1e9;
		ok(fabs(gb - fig[z]) < 0.05, "ZeRO Figure 1 stage %d: %.3f GB ~ %.1f",
		   z, gb, fig[z]);
	}
}

/* Korthikanti et al. 2022, Table 2, bytes per transformer layer. */
static double t2_none(double s, double b, double h, double a, double t)
{
	return s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
}
static double t2_sp(double s, double b, double h, double a, double t)
{
	return s * b * h / t * (34 + 5 * a * s / h);
}
static double t2_selective(double s, double b, double h, double t)
{
	return s * b * h * (10 + 24 / t);
}
static double t2_sp_selective(double s, double b, double h, double t)
{
	return s * b * h / t * 34;
}

static void korthikanti(void)
{
	/* Table 3: model, heads, hidden, layers, t (s = 2048, b = 1) */
	static const struct {
		const char *name;
		int a, h, L, t;
	} cfg[] = {
		{"GPT-3 175B", 96, 12288, 96, 8},
		{"530B", 128, 20480, 105, 8},
		{"1T", 160, 25600, 128, 8},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(cfg); i++) {
		gk_mem_model m = {.arch = GK_MEM_ARCH_GPT2, .layers = cfg[i].L,
				  .hidden = cfg[i].h, .heads = cfg[i].a,
				  .vocab = 51200, .positions = 2048, .bias = 1};
		gk_err err;
		ok(gk_mem_model_finish(&m, &err) == 0, "%s model", cfg[i].name);
		gk_mem_run r;
		gk_mem_run_default(&r);
		r.seq = 2048;
		r.tp = cfg[i].t;
		double s = 2048, h = cfg[i].h, a = cfg[i].a, t = cfg[i].t, L = cfg[i].L;
		struct {
			int sp;
			gk_mem_recompute rc;
			double want;
			const char *what;
		} v[] = {
			{0, GK_MEM_RC_NONE, t2_none(s, 1, h, a, t), "tensor parallel"},
			{1, GK_MEM_RC_NONE, t2_sp(s, 1, h, a, t), "+ sequence parallel"},
			{0, GK_MEM_RC_SELECTIVE, t2_selective(s, 1, h, t), "+ selective"},
			{1, GK_MEM_RC_SELECTIVE, t2_sp_selective(s, 1, h, t),
			 "sequence parallel + selective"},
			{0, GK_MEM_RC_FULL, 2 * s * h, "full recompute"},
		};
		for (size_t k = 0; k < GK_ARRAY_SIZE(v); k++) {
			gk_mem_est e;
			r.sp = v[k].sp;
			r.recompute = v[k].rc;
			ok(gk_mem_estimate(&m, &r, 0, &e, &err) == 0, "estimate");
			double got = part(&e, "activations") / L;
			ok(fabs(got - v[k].want) <= 0.5,
			   "%s, %s: %.0f bytes/layer, Table 2 says %.0f",
			   cfg[i].name, v[k].what, got, v[k].want);
		}
		/* the paper's headline: SP + selective cuts ~5x against TP alone */
		double ratio = t2_none(s, 1, h, a, t) / t2_sp_selective(s, 1, h, t);
		ok(ratio > 4.5 && ratio < 6, "%s: 5x reduction (%.2f)", cfg[i].name,
		   ratio);
	}

	/* pipeline: the first stage holds p micro-batches of L/p layers */
	gk_mem_model m = {.arch = GK_MEM_ARCH_GPT2, .layers = 96, .hidden = 12288,
			  .heads = 96, .vocab = 51200, .positions = 2048, .bias = 1};
	gk_err err;
	gk_mem_model_finish(&m, &err);
	gk_mem_run r;
	gk_mem_run_default(&r);
	r.seq = 2048, r.tp = 8, r.pp = 8, r.sp = 1, r.grad_accum = 64;
	r.recompute = GK_MEM_RC_SELECTIVE;
	gk_mem_est e;
	ok(gk_mem_estimate(&m, &r, 0, &e, &err) == 0, "175B with pp 8");
	is_int(e.stage, 0, "first stage is the most loaded");
	is_int(e.inflight, 8, "8 micro-batches in flight");
	ok(fabs(part(&e, "activations") - 96 * t2_sp_selective(2048, 1, 12288, 8)) < 1,
	   "first stage: L layers' worth (sbhL/t * 34)");
	r.grad_accum = 3;
	gk_mem_estimate(&m, &r, 0, &e, &err);
	is_int(e.inflight, 3, "fewer micro-batches than stages: all in flight");

	/* one micro-batch in flight: the last stage's logits dominate */
	gk_mem_model g;
	gk_mem_model_from_config(&g, "tests/data/mem/gpt2.json", 0, NULL, &err);
	gk_mem_run_default(&r);
	r.seq = 1024, r.pp = 2, r.micro_batch = 8;
	ok(gk_mem_estimate(&g, &r, 0, &e, &err) == 0, "gpt2 pp 2");
	is_int(e.stage, 1, "last stage is the most loaded");
	is_u64(part(&e, "logits"), 6ULL * 1024 * 8 * 50257, "logits 2+4 bytes x sbV");
	ok(part(&e, "embedding_dropout") == UINT64_MAX, "no embedding on the last stage");
	/* GPT-2 ties the head: the last stage keeps its own copy */
	is_u64(e.stage_params, 6 * g.layer_params + 50257ULL * 768 + 2 * 768,
	       "last stage: 6 blocks, final norm, tied head copy");
}

static void model_splits(void)
{
	gk_mem_model m;
	gk_err err;
	gk_mem_model_from_config(&m, "tests/data/mem/llama-2-7b.json", 0, NULL, &err);
	gk_mem_run r;
	gk_mem_run_default(&r);
	gk_mem_est e0, e1;
	r.pp = 2;
	/* each stage on its own: the sum is the model */
	r.infer = 1;
	gk_mem_estimate(&m, &r, 0, &e0, &err);
	uint64_t a = e0.stage_params;
	r.pp = 1;
	gk_mem_estimate(&m, &r, 0, &e1, &err);
	is_u64(e1.stage_params, m.params, "pp 1 holds every parameter");
	/* stage 0 = 16 layers + embedding; last = 16 layers + norm + head */
	uint64_t half = 16 * m.layer_params;
	ok(a == half + 32000ULL * 4096 || a == half + 32000ULL * 4096 + 4096,
	   "pp 2 stage holds half the layers and one end");
	/* tensor parallel: what is split times t plus what is replicated */
	r.tp = 4;
	gk_mem_estimate(&m, &r, 0, &e0, &err);
	uint64_t repl = 32 * m.layer_repl + m.norm_params;
	is_u64((e0.stage_params - repl) * 4 + repl, m.params,
	       "tp 4 slices add back up");

	/* KV cache: Llama-2-7B fp16 is 0.5 MiB per token; Mistral's GQA 1/4 */
	r.tp = 1, r.seq = 4096, r.micro_batch = 1, r.precision = GK_DT_F16;
	gk_mem_estimate(&m, &r, 0, &e0, &err);
	is_u64(part(&e0, "kv_cache"), 4096ULL << 19, "Llama-2-7B KV 4096 tokens = 2 GiB");
	gk_mem_model mi;
	gk_mem_model_from_config(&mi, "tests/data/mem/mistral-7b.json", 0, NULL, &err);
	gk_mem_estimate(&mi, &r, 0, &e0, &err);
	is_u64(part(&e0, "kv_cache"), 4096ULL << 17, "Mistral-7B GQA 8/32: 0.5 GiB");
	r.kv_dtype = GK_DT_F8_E4M3;
	gk_mem_estimate(&mi, &r, 0, &e0, &err);
	is_u64(part(&e0, "kv_cache"), 4096ULL << 16, "fp8 KV halves it");

	/* bad runs */
	gk_mem_run_default(&r);
	r.tp = 3;
	ok(gk_mem_estimate(&m, &r, 0, &e0, &err) < 0 &&
	   strstr(err.msg, "must divide the 32 attention heads"), "%s", err.msg);
	gk_mem_run_default(&r);
	r.pp = 5;
	ok(gk_mem_estimate(&m, &r, 0, &e0, &err) < 0 &&
	   strstr(err.msg, "must divide the 32 layers"), "%s", err.msg);
	gk_mem_run_default(&r);
	r.seq = 100000000, r.micro_batch = 1 << 24;
	ok(gk_mem_estimate(&m, &r, 0, &e0, &err) < 0 && strstr(err.msg, "exceeds"),
	   "absurd sizes: %s", err.msg);
}

/* Bytes per parameter of each optimizer (single GPU, no activations). */
static void optimizers(void)
{
	gk_mem_model m = {.arch = GK_MEM_ARCH_PARAMS, .params = 1000000000};
	gk_mem_run r;
	gk_mem_run_default(&r);
	r.reserve = 0;
	struct {
		gk_dtype prec;
		gk_mem_opt opt;
		double per_param;
	} v[] = {
		{GK_DT_BF16, GK_MEM_OPT_ADAMW, 16},   /* 2 + 2 + 12 */
		{GK_DT_F32, GK_MEM_OPT_ADAMW, 16},    /* 4 + 4 + 8 */
		{GK_DT_F32, GK_MEM_OPT_SGD, 12},      /* 4 + 4 + momentum 4 */
		{GK_DT_BF16, GK_MEM_OPT_SGD, 12},     /* 2 + 2 + master 4 + 4 */
		{GK_DT_BF16, GK_MEM_OPT_ADAM8BIT, 10.03125}, /* + 2 bytes + absmax */
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(v); i++) {
		gk_mem_est e;
		gk_err err;
		r.precision = v[i].prec;
		r.opt = v[i].opt;
		gk_mem_estimate(&m, &r, 0, &e, &err);
		ok(fabs(e.model_states / 1e9 - v[i].per_param) < 1e-6,
		   "%s %s: %g bytes/param (got %.5f)", gk_dtype_name(v[i].prec),
		   gk_mem_opt_name(v[i].opt), v[i].per_param, e.model_states / 1e9);
	}
}

static void fit(void)
{
	gk_mem_model m;
	gk_err err;
	gk_mem_model_from_config(&m, "tests/data/mem/llama-2-7b.json", 0, NULL, &err);
	gk_mem_run r;
	gk_mem_run_default(&r);
	r.seq = 4096;
	gk_mem_cand out[10];
	int n, tried, fits;
	const gk_mem_gpu *g = gk_mem_gpu_find("A100-80");
	ok(g && g->bytes == 81920ULL << 20, "A100-80 in the table");
	ok(gk_mem_gpu_find("A100") == NULL, "A100 alone is ambiguous");
	ok(gk_mem_gpu_find("h200") != NULL, "h200 finds H200-141");
	ok(gk_mem_fit(&m, &r, 16, 64, g->bytes, g, 25, out, 10, &n, &tried,
		      &fits, &err) == 0, "fit runs");
	ok(tried > 500 && fits > 0 && n == 10, "searched %d, %d fit", tried, fits);
	int good = 1;
	for (int i = 0; i < n; i++) {
		gk_mem_est e;
		gk_mem_estimate(&m, &out[i].run, 0, &e, &err);
		good &= e.total == out[i].total && e.total <= g->bytes;
		good &= out[i].run.dp * out[i].run.tp * out[i].run.pp == 16;
		good &= out[i].run.dp * out[i].run.micro_batch *
			out[i].run.grad_accum == 64;
		if (i)
			good &= out[i].step_s >= out[i - 1].step_s;
	}
	ok(good, "every candidate fits, uses 16 GPUs, batch 64, sorted by cost");
	/* 7B with Adam cannot fit one 24 GiB GPU in any configuration */
	ok(gk_mem_fit(&m, &r, 1, 8, 24ULL << 30, g, 25, out, 10, &n, &tried,
		      &fits, &err) == 0 && n == 0, "nothing fits: %d", fits);
}

int main(void)
{
	zero_figure1();
	korthikanti();
	model_splits();
	optimizers();
	fit();
	return done_testing();
}
