/*
 * mem_estimate.c - the memory model against published figures: ZeRO's
 * Figure 1 model states, Korthikanti et al.'s Table 2 activation formulas
 * (evaluated here directly, for their GPT-3 175B, 530B and 1T settings),
 * KV cache sizes, pipeline and tensor splits that must add back up, and
 * the fit search's invariants.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
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

/*
 * A second computation of the same bytes: Korthikanti et al. sec. 4.1 list
 * every tensor a layer stores for the backward pass; add them up one by
 * one. Each tensor: bytes, whether tensor parallelism splits it, whether
 * selective recomputation drops it (the attention core), whether
 * recomputing the GeLU drops it (its output, llm.c's fch_gelu). With
 * sequence parallelism the tensors TP leaves whole are split too (sec.
 * 4.2.2). e: bytes per element; d: dropout masks kept (1 byte each);
 * flash: fused attention keeps only the f32 softmax statistics.
 */
static double tensors(double s, double b, double h, double a, double t,
		      int sp, gk_mem_recompute rc, double e, int d, int flash)
{
	const struct {
		double bytes;
		int tp, core, gelu;
	} x[] = {
		{e * s * b * h, 0, 0, 0},          /* attention LayerNorm input */
		{e * s * b * h, 0, 0, 0},          /* QKV matmul input */
		{2 * e * s * b * h, 1, 0, 0},      /* Q and K for QK^T */
		{flash ? 0 : e * a * s * s * b, 1, 1, 0}, /* softmax output */
		{flash ? 0 : d * a * s * s * b, 1, 1, 0}, /* its dropout mask */
		{flash ? 0 : d * e * a * s * s * b, 1, 1, 0}, /* dropout output */
		{flash ? 4 * a * s * b : 0, 1, 1, 0}, /* logsumexp (flash) */
		{e * s * b * h, 1, 0, 0},          /* V */
		{e * s * b * h, 1, 0, 0},          /* output projection input */
		{d * s * b * h, 0, 0, 0},          /* attention dropout mask */
		{e * s * b * h, 0, 0, 0},          /* MLP LayerNorm input */
		{e * s * b * h, 0, 0, 0},          /* first linear input */
		{4 * e * s * b * h, 1, 0, 0},      /* GeLU input */
		{4 * e * s * b * h, 1, 0, 1},      /* GeLU output */
		{d * s * b * h, 0, 0, 0},          /* MLP dropout mask */
	};
	if (rc == GK_MEM_RC_FULL)
		return e * s * b * h / (sp ? t : 1); /* the layer's input */
	double sum = 0;
	for (size_t i = 0; i < GK_ARRAY_SIZE(x); i++) {
		if ((x[i].core && rc == GK_MEM_RC_SELECTIVE) ||
		    (x[i].gelu && rc == GK_MEM_RC_GELU))
			continue;
		sum += x[i].bytes / (x[i].tp || sp ? t : 1);
	}
	return sum;
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
		/*
		 * Each setting against the tensor-by-tensor sum, and the
		 * paper's headline (abstract, Figure 7): sequence parallelism
		 * with selective recomputation needs about a fifth of the
		 * activation memory of tensor parallelism alone. Both sides
		 * of the ratio are the library's estimates.
		 */
		double est[5];
		for (size_t k = 0; k < GK_ARRAY_SIZE(v); k++) {
			gk_mem_est e;
			r.sp = v[k].sp;
			r.recompute = v[k].rc;
			gk_mem_estimate(&m, &r, 0, &e, &err);
			est[k] = part(&e, "activations") / L;
			double want = tensors(s, 1, h, a, t, v[k].sp, v[k].rc, 2,
					      1, 0);
			ok(fabs(est[k] - want) <= 0.5,
			   "%s, %s: %.0f bytes/layer, sec. 4.1 tensors add to %.0f",
			   cfg[i].name, v[k].what, est[k], want);
		}
		double ratio = est[0] / est[3];
		ok(ratio > 4.5 && ratio < 5.5,
		   "%s: sequence parallel + selective is 1/%.2f of tensor "
		   "parallel alone (paper: ~5x)", cfg[i].name, ratio);
		double want = tensors(s, 1, h, a, t, 0, GK_MEM_RC_NONE, 2, 1, 0) /
			      tensors(s, 1, h, a, t, 1, GK_MEM_RC_SELECTIVE, 2, 1, 0);
		ok(fabs(ratio - want) < 1e-9, "%s: ratio %.4f, by the tensors %.4f",
		   cfg[i].name, ratio, want);
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
	/* 32 layers over 5 stages: 7, 7, 6, 6, 6 (gpu-train's balance);
	 * serving asks for stages that divide them, and no stage is empty */
	gk_mem_run_default(&r);
	r.pp = 5;
	gk_mem_est e2;
	ok(gk_mem_estimate_stage(&m, &r, 1, 0, &e1, &err) == 0 &&
	   gk_mem_estimate_stage(&m, &r, 2, 0, &e2, &err) == 0 &&
	   e1.stage_params - e2.stage_params == m.layer_params,
	   "pp 5 over 32 layers: stage 1 holds a layer more than stage 2");
	r.infer = 1;
	ok(gk_mem_estimate(&m, &r, 0, &e0, &err) < 0 &&
	   strstr(err.msg, "must divide the 32 layers"), "serving: %s", err.msg);
	gk_mem_run_default(&r);
	r.pp = 33;
	ok(gk_mem_estimate(&m, &r, 0, &e0, &err) < 0 &&
	   strstr(err.msg, "more stages than the 32 layers"), "%s", err.msg);
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
	gk_mem_fit_req req = {.world = 16, .global_batch = 64, .gpu = g};
	ok(gk_mem_fit(&m, &r, &req, out, 10, &n, &tried, &fits, &err) == 0,
	   "fit runs");
	ok(req.capacity == g->bytes && req.inter_gbs == 25,
	   "fit reports the defaults it used: the GPU's memory, 25 GB/s");
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
	gk_mem_fit_req one = {.world = 1, .global_batch = 8,
			      .capacity = 24ULL << 30};
	ok(gk_mem_fit(&m, &r, &one, out, 10, &n, &tried, &fits, &err) == 0 &&
	   n == 0, "nothing fits: %d", fits);
	ok(one.gpu && strcmp(one.gpu->name, "H100-80") == 0,
	   "the cost model's GPU defaults to H100-80");
	/* world and batch default to the base run's */
	gk_mem_fit_req dflt = {.capacity = 80ULL << 30};
	r.dp = 4, r.micro_batch = 2, r.grad_accum = 3;
	ok(gk_mem_fit(&m, &r, &dflt, out, 10, &n, &tried, &fits, &err) == 0 &&
	   dflt.world == 4 && dflt.global_batch == 24,
	   "world dp*tp*pp = 4, global batch dp*mb*accum = 24");
}

/*
 * The cost model's data-parallel bytes a GPU sends a step, against the
 * ring's arithmetic counted here per collective: an all-reduce moves its
 * buffer twice, a reduce-scatter or all-gather once, each (N-1)/N of it.
 * ZeRO-1 and 2 gather the working copy (2 bytes a parameter in bf16,
 * gpu-train's ZeRO-1 on GPUs), not the f32 master, also where the
 * gradients are f32 (--grad-f32: what gpu-train reduces on GPUs).
 */
static void dp_comm(void)
{
	gk_mem_model m;
	gk_err err;
	gk_mem_model_from_config(&m, "tests/data/mem/gpt2.json", 0, NULL, &err);
	const gk_mem_gpu *g = gk_mem_gpu_find("H100-80");
	struct {
		gk_dtype prec;
		int grad_f32, zero;
		double grads, params; /* bytes a parameter: reduced, gathered */
		int allreduce, gathers;
	} v[] = {
		{GK_DT_BF16, 0, 0, 2, 0, 1, 0}, {GK_DT_BF16, 0, 1, 2, 2, 0, 1},
		{GK_DT_BF16, 1, 0, 4, 0, 1, 0}, {GK_DT_BF16, 1, 1, 4, 2, 0, 1},
		{GK_DT_BF16, 1, 2, 4, 2, 0, 1}, {GK_DT_BF16, 1, 3, 4, 2, 0, 2},
		{GK_DT_F32, 0, 0, 4, 0, 1, 0},  {GK_DT_F32, 0, 1, 4, 4, 0, 1},
		{GK_DT_F32, 1, 3, 4, 4, 0, 2},
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		gk_mem_run r;
		gk_mem_run_default(&r);
		r.seq = 1024, r.dp = 8, r.precision = v[i].prec, r.grad_f32 = v[i].grad_f32;
		r.zero = v[i].zero;
		gk_mem_cand c;
		gk_mem_cost(&m, &r, g, 25, &c);
		double share = (double)m.params * 7 / 8;
		double want = (v[i].allreduce ? 2 : 1) * v[i].grads * share +
			      v[i].gathers * v[i].params * share;
		ok(fabs(c.comm_bytes - want) <= 1e-9 * want,
		   "%s%s ZeRO-%d over 8 GPUs: %.0f bytes a step, want %.0f",
		   gk_dtype_name(v[i].prec), v[i].grad_f32 ? " --grad-f32" : "", v[i].zero,
		   c.comm_bytes, want);
	}
	gk_mem_run one;
	gk_mem_run_default(&one);
	gk_mem_cand c;
	gk_mem_cost(&m, &one, g, 25, &c);
	ok(c.comm_bytes == 0, "one GPU: no data-parallel bytes (%g)", c.comm_bytes);
}

/* GeLU recomputation and gpu-train's layout (fused attention, no dropout). */
static void layouts(void)
{
	gk_mem_model g;
	gk_err err;
	gk_mem_model_from_config(&g, "tests/data/mem/gpt2.json", 0, NULL, &err);
	gk_mem_run r;
	gk_mem_run_default(&r);
	r.micro_batch = 4;
	double s = 1024, b = 4, h = 768, a = 12, L = 12;
	static const struct {
		gk_mem_recompute rc;
		int flash, dropout;
		const char *what;
	} v[] = {
		{GK_MEM_RC_GELU, 0, 1, "GeLU recompute, eager, dropout"},
		{GK_MEM_RC_NONE, 1, 0, "fused attention, no dropout"},
		{GK_MEM_RC_GELU, 1, 0, "GeLU recompute, fused, no dropout"},
		{GK_MEM_RC_FULL, 1, 0, "layer recompute, fused, no dropout"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(v); i++) {
		gk_mem_est e;
		r.recompute = v[i].rc, r.flash = v[i].flash, r.dropout = v[i].dropout;
		ok(gk_mem_estimate(&g, &r, 1, &e, &err) == 0, "%s", v[i].what);
		double want = L * tensors(s, b, h, a, 1, 0, v[i].rc, 2,
					  v[i].dropout, v[i].flash);
		ok(fabs(part(&e, "activations") - want) <= 0.5,
		   "%s: %llu bytes, the tensors add to %.0f", v[i].what,
		   (unsigned long long)part(&e, "activations"), want);
	}
	/* llm.c (train_gpt2.c, recompute=1) no longer keeps fch_gelu (L,B,T,4C) */
	gk_mem_est e0, e1;
	r.flash = 1, r.dropout = 0;
	r.recompute = GK_MEM_RC_NONE;
	gk_mem_estimate(&g, &r, 0, &e0, &err);
	r.recompute = GK_MEM_RC_GELU;
	gk_mem_estimate(&g, &r, 0, &e1, &err);
	is_u64(part(&e0, "activations") - part(&e1, "activations"),
	       12ULL * 4 * 1024 * 4 * 768 * 2, "GeLU recompute saves L*B*T*4C bf16");
	ok(gk_mem_recompute_parse("layer") == GK_MEM_RC_FULL &&
	   gk_mem_recompute_parse("gelu") == GK_MEM_RC_GELU &&
	   strcmp(gk_mem_recompute_name(GK_MEM_RC_GELU), "gelu") == 0,
	   "gpu-train's names: gelu, layer");
}

/* The run's defaults that depend on the model. */
static void defaults(void)
{
	gk_mem_run r;
	gk_mem_model g, p = {.arch = GK_MEM_ARCH_PARAMS, .params = 1000000};
	gk_err err;
	gk_mem_model_from_config(&g, "tests/data/mem/gpt2.json", 0, NULL, &err);
	gk_mem_run_default(&r);
	gk_mem_run_resolve(&r, &g);
	ok(r.seq == 1024 && r.flash == 0, "training gpt2: seq n_positions 1024, eager");
	gk_mem_run_default(&r);
	r.infer = 1;
	gk_mem_run_resolve(&r, &p);
	ok(r.seq == 2048 && r.flash == 1, "serving a bare count: seq 2048, fused");
	gk_mem_run_default(&r);
	r.seq = 77, r.flash = 1;
	gk_mem_run_resolve(&r, &g);
	ok(r.seq == 77 && r.flash == 1, "given values stay");

	/* an unresolved run estimates as its resolution does */
	gk_mem_est e0, e1;
	gk_mem_run_default(&r);
	gk_mem_estimate(&g, &r, 0, &e0, &err);
	r.seq = 1024, r.flash = 0;
	gk_mem_estimate(&g, &r, 0, &e1, &err);
	is_u64(e0.total, e1.total, "estimate resolves seq and attention itself");

	/* a model from its shape takes GPT2Config's defaults */
	gk_mem_model s = {.layers = 12, .hidden = 768, .heads = 12};
	ok(gk_mem_model_from_shape(&s, GK_MEM_ARCH_GPT2, -1, 0, &err) == 0,
	   "gpt2 from its shape");
	ok(s.vocab == 50257 && s.positions == 1024 && s.tied && s.bias,
	   "vocab 50257, 1024 positions, tied, biases");
	is_u64(s.params, 124439808, "the shape alone is GPT-2 124M");
	gk_mem_model s2 = {.layers = 12, .hidden = 768, .heads = 12};
	gk_mem_model_from_shape(&s2, GK_MEM_ARCH_GPT2, 0, 4096, &err);
	is_u64(s2.params, 124439808 + 3072ULL * 768 + 50257ULL * 768,
	       "seq 4096 gives 4096 positions; untied adds the head");
	gk_mem_model s3 = {.layers = 2, .hidden = 64, .heads = 4};
	ok(gk_mem_model_from_shape(&s3, GK_MEM_ARCH_LLAMA, -1, 0, &err) < 0 &&
	   strstr(err.msg, "intermediate_size"), "llama needs ffn: %s", err.msg);
}

/* gpu-train's entry point against mem-estimate's path and plain arithmetic. */
static void trainer(void)
{
	gk_err err;
	gk_mem_est e, c;
	gk_mem_model m;
	gk_mem_run r;
	gk_mem_train t = {.layers = 12, .hidden = 768, .heads = 12,
			  .vocab = 50257, .positions = 1024, .batch = 4};
	ok(gk_mem_train_estimate(&t, &e, &m, &r, &err) == 0, "GPT-2 124M, defaults");
	is_u64(m.params, 124439808, "tied GPT-2: 124,439,808 parameters");
	ok(r.seq == 1024 && r.precision == GK_DT_BF16 && r.flash == 1 &&
	   !r.dropout && r.dp == 1, "seq 1024, bf16, fused, no dropout, dp 1");
	uint64_t P = 124439808;
	is_u64(part(&e, "parameters"), 2 * P, "parameters: 2 bytes each");
	is_u64(part(&e, "gradients"), 2 * P, "gradients: 2 bytes each");
	is_u64(part(&e, "optimizer"), 12 * P, "AdamW + f32 master: 12 bytes each");
	ok(fabs(part(&e, "activations") -
		12 * tensors(1024, 4, 768, 12, 1, 0, GK_MEM_RC_NONE, 2, 0, 1)) <= 0.5,
	   "activations: the tensors of 12 fused layers without dropout");
	is_u64(part(&e, "logits"), 2ULL * 1024 * 4 * 50257,
	       "logits bf16 only (the classifier reads them in place, no f32 copy)");

	/* mem-estimate's own path: its default keeps the f32 copy */
	gk_mem_model g;
	gk_mem_model_from_config(&g, "tests/data/mem/gpt2.json", 0, NULL, &err);
	gk_mem_run_default(&r);
	r.micro_batch = 4, r.flash = 1, r.dropout = 0;
	gk_mem_estimate(&g, &r, 0, &c, &err);
	is_u64(part(&c, "logits"), 6ULL * 1024 * 4 * 50257, "mem-estimate's default: logits bf16 + f32");
	/* config.json, --no-dropout --attn flash --no-logits-f32 -b 4 */
	r.logits_f32 = 0;
	gk_mem_estimate(&g, &r, 0, &c, &err);
	/* (on GPUs, as mem-estimate's run is: the host terms too) */
	gk_mem_train tg = t;
	tg.cuda = 1;
	ok(gk_mem_train_estimate(&tg, &e, NULL, NULL, &err) == 0 &&
	   gk_mem_part_get(&e, "host_params"), "on GPUs: the host terms of one rank");
	int same = c.nparts == e.nparts && c.total == e.total;
	for (int i = 0; same && i < e.nparts; i++)
		same = strcmp(c.part[i].key, e.part[i].key) == 0 &&
		       c.part[i].bytes == e.part[i].bytes;
	ok(same, "the same parts as mem-estimate --config gpt2.json -b 4 "
	   "--no-dropout --attn flash --no-logits-f32");

	/* padded vocabulary, f32, ZeRO-1 over 8, layer recompute */
	t.vocab = 50304, t.precision = GK_DT_F32, t.zero = 1, t.dp = 8;
	t.recompute = GK_MEM_RC_FULL;
	ok(gk_mem_train_estimate(&t, &e, &m, NULL, &err) == 0, "padded, f32, ZeRO-1");
	P = 124439808 + 47 * 768;
	is_u64(m.params, P, "50304 rows: 47 more embedding rows");
	is_u64(part(&e, "parameters"), 4 * P, "f32 parameters");
	is_u64(part(&e, "optimizer"), 8 * P / 8, "Adam m and v, sharded 8 ways");
	is_u64(part(&e, "activations"), 12ULL * 4 * 1024 * 4 * 768,
	       "layer recompute keeps each layer's f32 input");
	ok(part(&e, "dp_buckets") == 2ULL * 25 * 1024 * 1024, "two DP buckets");

	/* gpu-train's ZeRO-2 (the CPU backend): the gradients sharded too */
	gk_mem_train z2 = t;
	z2.zero = 2;
	ok(gk_mem_train_estimate(&z2, &e, NULL, NULL, &err) == 0, "ZeRO-2 estimated");
	is_u64(part(&e, "gradients"), 4 * P / 8, "ZeRO-2: f32 gradients sharded 8 ways");
	is_u64(part(&e, "optimizer"), 8 * P / 8, "ZeRO-2: Adam m and v sharded 8 ways");
	ok(part(&e, "dp_buckets") == 2ULL * 25 * 1024 * 1024 &&
	   !gk_mem_part_get(&e, "zero2_embedding_grads"),
	   "ZeRO-2 on the CPU backend: two buckets of --bucket, as before");
	/*
	 * gpu-train's ZeRO-2 on GPUs: the embeddings' buffer, 4 (Vpad +
	 * positions) C, and a ring of the largest layer-cut bucket. GPT-2
	 * small (block 12 C^2 + 13 C = 7087872 floats, final norm 1536) at
	 * 25 MiB (6553600 floats): a block alone is larger, so each bucket
	 * is one block, and the final norm one of its own; at 64 MiB
	 * (16777216 floats) two blocks, the top two with the final norm.
	 */
	gk_mem_train zg = z2;
	zg.cuda = 1, zg.vocab = 50257, zg.positions = 1024;
	uint64_t gblk = 12ULL * 768 * 768 + 13 * 768, emb = 4ULL * (50304 + 1024) * 768;
	ok(gk_mem_train_estimate(&zg, &e, NULL, NULL, &err) == 0, "ZeRO-2 on GPUs estimated");
	is_u64(part(&e, "zero2_embedding_grads"), emb, "GPU ZeRO-2: the embeddings' buffer");
	is_u64(part(&e, "dp_buckets"), 3 * 4 * gblk, "GPU ZeRO-2: three buffers of a block");
	zg.no_overlap = 1;
	ok(gk_mem_train_estimate(&zg, &e, NULL, NULL, &err) == 0, "no overlap estimated");
	is_u64(part(&e, "dp_buckets"), 4 * gblk, "GPU ZeRO-2 without overlap: one buffer");
	zg.no_overlap = 0, zg.bucket = 64ULL << 20;
	ok(gk_mem_train_estimate(&zg, &e, NULL, NULL, &err) == 0, "64 MiB estimated");
	is_u64(part(&e, "dp_buckets"), 3 * 4 * (2 * gblk + 2 * 768),
	       "GPU ZeRO-2 at 64 MiB: three buffers of two blocks and the final norm");
	/*
	 * ... over a tensor group of 4 (no pipeline): a tensor rank's slices,
	 * wte's rows and the split weights over 4, the norms and the
	 * row-parallel biases whole: a block (12 C^2 + 7 C) / 4 + 6 C, the
	 * embeddings Vpad C / 4 + positions C; at 4 MiB (1048576 floats) a
	 * bucket a block; under a pipeline none (its stage reduces after the
	 * schedule), nor under ZeRO-3
	 */
	gk_mem_train zt = zg;
	zt.bucket = 4ULL << 20, zt.tp = 4, zt.dp = 2;
	uint64_t tblk = (12ULL * 768 * 768 + 7 * 768) / 4 + 6 * 768;
	ok(gk_mem_train_estimate(&zt, &e, NULL, NULL, &err) == 0, "tp 4 x dp 2 ZeRO-2 on GPUs");
	is_u64(part(&e, "zero2_embedding_grads"), 4ULL * (50304 / 4 + 1024) * 768,
	       "GPU ZeRO-2 over tp 4: the embeddings' buffer of a tensor rank");
	is_u64(part(&e, "dp_buckets"), 3 * 4 * tblk,
	       "GPU ZeRO-2 over tp 4: three buffers of a tensor rank's block");
	ok(!gk_mem_part_get(&e, "host_grads"), "... and no host mirror of the gradients");
	zt.pp = 2;
	ok(gk_mem_train_estimate(&zt, &e, NULL, NULL, &err) == 0 &&
	   !gk_mem_part_get(&e, "zero2_embedding_grads") && gk_mem_part_get(&e, "pp_zero2_grads"),
	   "tp 4 x pp 2: a stage's gradients whole until after the schedule");
	/* ZeRO-3 over tp 4: ZeRO-2's buckets of a tensor rank, and its
	 * units: the embeddings' slice and the final norm, one block buffer
	 * (nothing is prefetched over a grid) */
	zt.pp = 1, zt.zero = 3;
	ok(gk_mem_train_estimate(&zt, &e, NULL, NULL, &err) == 0, "tp 4 x dp 2 ZeRO-3 on GPUs");
	is_u64(part(&e, "dp_buckets"), 3 * 4 * tblk, "GPU ZeRO-3 over tp 4: ZeRO-2's buckets");
	is_u64(part(&e, "zero2_embedding_grads"), 4ULL * (50304 / 4 + 1024) * 768,
	       "... and its embeddings' buffer");
	is_u64(part(&e, "zero3_units"), 4 * ((50304 / 4 + 1024) * 768 + 2 * 768 + tblk),
	       "... the units of a tensor rank: edges and one block buffer");
	ok(!gk_mem_part_get(&e, "zero3_gather") && !gk_mem_part_get(&e, "pp_zero2_grads"),
	   "... and no generic gather or whole gradients");
	/* and ZeRO-3 (the CPU backend): the parameters sharded too */
	gk_mem_train z3 = t;
	z3.zero = 3;
	ok(gk_mem_train_estimate(&z3, &e, NULL, NULL, &err) == 0, "ZeRO-3 estimated");
	is_u64(part(&e, "parameters"), 4 * P / 8, "ZeRO-3: f32 parameters sharded 8 ways");
	is_u64(part(&e, "gradients"), 4 * P / 8, "ZeRO-3: f32 gradients sharded 8 ways");
	is_u64(part(&e, "optimizer"), 8 * P / 8, "ZeRO-3: Adam m and v sharded 8 ways");
	/*
	 * gpu-train's ZeRO-3 on GPUs: ZeRO-2's gradient buffers, and the
	 * working copy in units: the embeddings (Vpad + positions) C and the
	 * final norm 2 C (GPT-2 small's flat buffer, 124475904 floats,
	 * divides by 8: no padding), and two buffers of a block, one without
	 * overlap; DeepSpeed's largest layer no more
	 */
	gk_mem_train zg3 = zg;
	zg3.zero = 3, zg3.bucket = 0;
	uint64_t below = (50304ULL + 1024) * 768;
	ok(gk_mem_train_estimate(&zg3, &e, NULL, NULL, &err) == 0, "ZeRO-3 on GPUs estimated");
	is_u64(part(&e, "zero3_units"), 4 * (below + 2 * 768 + 2 * gblk),
	       "GPU ZeRO-3: the edges and two block buffers");
	is_u64(part(&e, "zero2_embedding_grads"), emb, "GPU ZeRO-3: ZeRO-2's embedding gradients");
	is_u64(part(&e, "dp_buckets"), 3 * 4 * gblk, "GPU ZeRO-3: ZeRO-2's three bucket buffers");
	ok(!gk_mem_part_get(&e, "zero3_gather"), "GPU ZeRO-3: no largest-layer gather");
	zg3.no_overlap = 1;
	ok(gk_mem_train_estimate(&zg3, &e, NULL, NULL, &err) == 0, "no overlap estimated");
	is_u64(part(&e, "zero3_units"), 4 * (below + 2 * 768 + gblk),
	       "GPU ZeRO-3 without overlap: one block buffer");
	/* over 5 ranks the flat buffer is padded by one float, in the final
	 * norm's unit; bf16 units, 2 bytes an element */
	uint64_t edge, ring;
	gk_mem_shape z5 = {.layers = 12, .hidden = 768, .vocab = 50257, .positions = 1024,
			   .dp = 5, .zero = 3};
	ok(gk_mem_zero3_device(&z5, 2, 2, &edge, &ring, &err) == 0, "ZeRO-3 units over 5 ranks");
	is_u64(edge, 2 * (below + 2 * 768 + 1), "... the edges and the padding, bf16");
	is_u64(ring, 2 * 2 * gblk, "... two bf16 block buffers");
	ok(gk_mem_zero3_device(&z5, 2, 13, &edge, &ring, &err) < 0 &&
	   strstr(err.msg, "out of bounds"), "13 block buffers for 12 blocks refused: %s", err.msg);
	/* a pipeline stage's own figures (gpu-train --pp): 12 layers over 3
	 * stages, f32, ZeRO 0; a block is 12 C^2 + 13 C, the embeddings on
	 * the first, the final norm and the tied head's copy on the last */
	gk_mem_train p3 = t;
	p3.zero = 0, p3.dp = 1, p3.pp = 3;
	uint64_t blk = 12ULL * 768 * 768 + 13 * 768, wte = 50304ULL * 768;
	uint64_t want[3] = {4 * blk + wte + 1024 * 768, 4 * blk, 4 * blk + 2 * 768 + wte};
	int stages = 1;
	for (int s = 0; s < 3; s++) {
		p3.stage = s;
		stages = stages && gk_mem_train_estimate(&p3, &e, NULL, NULL, &err) == 0 &&
			 e.stage == s && part(&e, "parameters") == 4 * want[s] &&
			 part(&e, "gradients") == 4 * want[s] &&
			 part(&e, "optimizer") == 8 * want[s];
	}
	ok(stages, "pp 3: each stage's parameters, gradients and moments, its own layers "
	   "and ends");
	p3.stage = 3;
	ok(gk_mem_train_estimate(&p3, &e, NULL, NULL, &err) < 0 &&
	   strstr(err.msg, "pipeline stage 3: not one of the 3 stages"), "stage 3 of 3: %s",
	   err.msg);
	gk_mem_train bad = t;
	bad.zero = 4;
	ok(gk_mem_train_estimate(&bad, &e, NULL, NULL, &err) < 0 &&
	   strstr(err.msg, "must be 0 to 3"), "ZeRO-4 refused: %s", err.msg);
	bad = t, bad.recompute = GK_MEM_RC_SELECTIVE;
	ok(gk_mem_train_estimate(&bad, &e, NULL, NULL, &err) < 0 &&
	   strstr(err.msg, "gelu or layer"), "selective refused: %s", err.msg);
	bad = t, bad.seq = 2048;
	ok(gk_mem_train_estimate(&bad, &e, NULL, NULL, &err) < 0 &&
	   strstr(err.msg, "more than the 1024"), "seq past positions: %s", err.msg);
	bad = t, bad.heads = 0;
	ok(gk_mem_train_estimate(&bad, &e, NULL, NULL, &err) < 0 &&
	   strstr(err.msg, "train: "), "no heads: %s", err.msg);
}

/*
 * gk_mem_tp_replicas against a count element by element of lib/nn's table
 * (gpt.c's order): the replicated elements (wpe, the norms, the
 * row-parallel biases) in each rank's pieces, the largest; and the CPU
 * backend's compress_replicas part is it in bytes
 */
static uint64_t rep_count(const char *rep, uint64_t a, uint64_t b)
{
	uint64_t n = 0;
	for (uint64_t i = a; i < b; i++)
		n += rep[i] == 1;
	return n;
}

static void replicas_of(int tp, int dp, int pp, int zero)
{
	const uint64_t L = 3, C = 32, P = 33, vp = 384, T = (uint64_t)tp, W = (uint64_t)dp;
	const uint64_t blk[12] = {C, C, C * 3 * C / T, 3 * C / T, C / T * C, C, C, C,
				  C * 4 * C / T, 4 * C / T, 4 * C / T * C, C};
	const int whole[12] = {1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1};
	uint64_t wte = vp * C / T, n = wte + P * C + L * (6 * C + (12 * C * C + 7 * C) / T) + 2 * C;
	uint64_t at = wte, start[3] = {0};
	char *rep = calloc(n, 1);
	gk_err err;
	memset(rep + at, 1, P * C);
	at += P * C;
	for (uint64_t l = 0; l < L; l++) {
		start[l] = at;
		for (int k = 0; k < 12; k++) {
			memset(rep + at, whole[k], blk[k]);
			at += blk[k];
		}
	}
	memset(rep + at, 1, 2 * C);
	for (int st = 0; st < pp; st++) {
		/* the stage's segments (pp_shard.c): blocks 0 and 1 with the
		 * embeddings, then block 2 with ln_f; wte apart on the last
		 * stage and, sharded, on the first */
		int shard = zero && dp > 1, apart = pp > 1 && (st == pp - 1 || (st == 0 && shard));
		uint64_t lo = st == 0 ? 0 : start[2], hi = pp == 1 || st == 1 ? n : start[2];
		uint64_t seg[2][2] = {{lo + (apart && st == 0 ? wte : 0), hi},
				      {0, apart ? wte : 0}};
		uint64_t most = 0, got = 0;
		for (uint64_t q = 0; q < (shard ? W : 1); q++) {
			uint64_t c = 0;
			for (int k = 0; k < 2; k++) {
				uint64_t len = seg[k][1] - seg[k][0];
				uint64_t per = shard ? (len + W - 1) / W : len;
				uint64_t a = q * per < len ? q * per : len;
				uint64_t b = (q + 1) * per < len ? (q + 1) * per : len;
				c += rep_count(rep, seg[k][0] + a, seg[k][0] + b);
			}
			most = c > most ? c : most;
		}
		gk_mem_shape sh = {.layers = (int64_t)L, .hidden = (int64_t)C, .vocab = 257,
				   .positions = (int64_t)P, .dp = dp, .tp = tp, .pp = pp,
				   .stage = st, .zero = zero};
		int rc = gk_mem_tp_replicas(&sh, &got, &err);
		ok(rc == 0 && got == most, "replicas of dp %d x pp %d x tp %d, stage %d, ZeRO %d: "
		   "%llu, counted %llu", dp, pp, tp, st, zero, (unsigned long long)got,
		   (unsigned long long)most);
	}
	free(rep);
}

static void tp_replicas(void)
{
	gk_err err;
	/* many ranks: pieces of a few dozen elements, whose ends fall in
	 * every tensor of a block */
	static const int dps[] = {1, 2, 3, 97, 331};
	for (int tp = 2; tp <= 4; tp += 2)
		for (size_t d = 0; d < sizeof(dps) / sizeof(dps[0]); d++)
			for (int pp = 1; pp <= 2; pp++)
				for (int zero = 0; zero <= 1; zero++)
					replicas_of(tp, dps[d], pp, zero);
	/* the CPU backend under int8: its part; bf16 and GPUs need none */
	gk_mem_train t = {.layers = 3, .hidden = 32, .heads = 2, .vocab = 257, .positions = 33,
			  .seq = 16, .batch = 4, .precision = GK_DT_F32, .zero = 1, .dp = 2,
			  .tp = 2, .pp = 1};
	gk_mem_shape sh = {.layers = 3, .hidden = 32, .vocab = 257, .positions = 33, .dp = 2,
			   .tp = 2, .pp = 1, .zero = 1};
	gk_mem_model m;
	gk_mem_run r;
	gk_mem_est e;
	uint64_t n = 0;
	ok(gk_mem_tp_replicas(&sh, &n, &err) == 0 && n > 0, "replicas of tp 2 x dp 2");
	ok(gk_mem_train_estimate(&t, &e, &m, &r, &err) == 0 && r.host_backend,
	   "tp 2 x dp 2 on the CPU");
	ok(!gk_mem_part_get(&e, "compress_replicas"), "uncompressed: no replicas' buffer");
	r.compress = GK_COMM_COMPRESS_INT8;
	ok(gk_mem_estimate(&m, &r, 0, &e, &err) == 0, "int8 over tp 2 on the CPU");
	is_u64(part(&e, "compress_replicas"), 4 * n, "int8 over tp 2: the replicas' buffer");
	r.compress = GK_COMM_COMPRESS_BF16;
	ok(gk_mem_estimate(&m, &r, 0, &e, &err) == 0 && !gk_mem_part_get(&e, "compress_replicas"),
	   "bf16 over tp 2: none");
	r.compress = GK_COMM_COMPRESS_INT8, r.host_backend = 0;
	ok(gk_mem_estimate(&m, &r, 0, &e, &err) == 0 && !gk_mem_part_get(&e, "compress_replicas"),
	   "int8 over tp 2 on GPUs: in place, none");
}

/*
 * The part keys are an interface (JSON, trainers): every key a run can
 * produce, gathered over runs that exercise each part, is the documented
 * list, and gk_mem_part_get finds them.
 */
static void keys(void)
{
	static const char *train[] = {
		"parameters", "gradients", "optimizer", "grad_f32", "host_ram",
		"activations", "recompute_working_set", "embedding_dropout",
		"logits", "final_norm", "dp_buckets", "zero3_gather",
		"tp_buffers", "pp_buffers", "pp_zero2_grads", "cuda_reserve"};
	static const char *infer[] = {"parameters", "kv_cache", "activations",
				      "logits", "tp_buffers", "cuda_reserve"};
	gk_mem_model m;
	gk_err err;
	gk_mem_model_from_config(&m, "tests/data/mem/llama-2-7b.json", 0, NULL, &err);
	char seen[2048] = " "; /* " key key ... ": each key once */
	gk_mem_run r;
	for (int k = 0; k < 4; k++) {
		gk_mem_run_default(&r);
		r.dp = 4, r.tp = 2, r.pp = 2, r.seq = 128;
		r.zero = k < 2 ? 3 : 1;
		r.offload = k == 0 ? GK_MEM_OFFLOAD_ALL : GK_MEM_OFFLOAD_NONE;
		r.recompute = k == 1 ? GK_MEM_RC_FULL : GK_MEM_RC_NONE;
		r.grad_accum = k == 2 ? 1 : 8; /* 1: the last stage is heaviest */
		r.micro_batch = k == 3 ? 64 : 1;
		gk_mem_est e;
		ok(gk_mem_estimate(&m, &r, 0, &e, &err) == 0, "keys run %d", k);
		for (int i = 0; i < e.nparts; i++) {
			char w[64];
			snprintf(w, sizeof(w), " %s ", e.part[i].key);
			if (!strstr(seen, w))
				strncat(seen, w + 1, sizeof(seen) - strlen(seen) - 1);
			ok(gk_mem_part_get(&e, e.part[i].key) == &e.part[i],
			   "part_get finds %s", e.part[i].key);
		}
	}
	int all = 1, n = 0;
	for (size_t i = 0; i < GK_ARRAY_SIZE(train); i++) {
		char w[64];
		snprintf(w, sizeof(w), " %s ", train[i]);
		if (!strstr(seen, w)) {
			diag("missing training key %s", train[i]);
			all = 0;
		}
	}
	for (const char *p = seen; (p = strchr(p, ' ')) && p[1]; p++)
		n++;
	ok(all && n == (int)GK_ARRAY_SIZE(train),
	   "training keys are exactly the documented %zu: %s",
	   GK_ARRAY_SIZE(train), seen);

	gk_mem_run_default(&r);
	r.infer = 1, r.tp = 2;
	gk_mem_est e;
	gk_mem_estimate(&m, &r, 0, &e, &err);
	int same = e.nparts == (int)GK_ARRAY_SIZE(infer);
	for (int i = 0; same && i < e.nparts; i++)
		same = strcmp(e.part[i].key, infer[i]) == 0;
	ok(same, "inference keys are the documented %zu", GK_ARRAY_SIZE(infer));
	ok(gk_mem_part_get(&e, "gradients") == NULL, "no gradients when serving");
}

/*
 * gpu-train's layout over a grid, by hand: GPT-2 small (12 x 768, 50257
 * tokens padded to 50304, 1024 positions) at tp 2 x pp 2 x dp 2, ZeRO-1.
 * A tensor rank's block is its half of the 12 C^2 + 7 C split weights
 * and biases and the whole 6 C of the norms and row-parallel biases;
 * wte is its 25152 rows.
 */
static void grid_layout(void)
{
	uint64_t C = 768, wte = 25152 * C, wpe = 1024 * C;
	uint64_t blk = 6 * C * C + 7 * C / 2 + 6 * C;
	uint64_t n = wte + wpe + 12 * blk + 2 * C;
	gk_mem_shape s = {.layers = 12, .hidden = 768, .vocab = 50257, .positions = 1024,
			  .dp = 2, .tp = 2, .pp = 2, .stage = 1, .zero = 1};
	gk_mem_flat f;
	gk_err err;
	ok(gk_mem_flat_layout(&s, &f, &err) == 0, "tp 2 x pp 2 x dp 2 laid out");
	is_u64(f.n, 62659584, "a tensor rank's table: 62659584 floats");
	is_u64(f.n, n, "... wte's half, wpe, 12 half blocks and ln_f");
	/* the last stage: its 6 blocks and ln_f, and the tied head's wte apart */
	is_u64(f.seg[0], 6 * blk + 2 * C, "last stage: its range, 6 blocks and ln_f");
	is_u64(f.seg[1], wte, "last stage: wte apart");
	is_u64(f.piece[0], (6 * blk + 2 * C) / 2, "... each halved over dp 2");
	is_u64(f.piece[1], wte / 2, "... wte's half");
	uint64_t h[GK_MEM_NHOST];
	ok(gk_mem_gpu_host(&s, 0, h, &err) == 0, "host terms on GPUs");
	/* n is even, a multiple of 16 floats: no rounding */
	is_u64(h[GK_MEM_HOST_PARAMS], 4 * (6 * blk + 2 * C + wte),
	       "host_params: the last stage's segments' pages");
	is_u64(h[GK_MEM_HOST_GRADS], 4 * (6 * blk + 2 * C + wte), "host_grads: the same");
	is_u64(h[GK_MEM_HOST_STAGING], 64 << 20, "host_staging: 64 MiB");
	is_u64(h[GK_MEM_HOST_MOMENTS], 8 * ((6 * blk + 2 * C) / 2 + wte / 2 + 1),
	       "host_moments: the rank's pieces and a spare float, twice");
	is_u64(h[GK_MEM_HOST_GRAD_SHARD], 0, "no gradient shard");
	uint64_t fb, wire;
	ok(gk_mem_compress_bytes(&s, GK_COMM_COMPRESS_BF16, &fb, &wire, &err) == 0,
	   "compressed");
	is_u64(fb, 4 * (6 * blk + 2 * C + wte), "feedback: the stage's segments, f32");
	is_u64(wire, 2 * (2 * ((6 * blk + 2 * C) / 2 + 1) + 1),
	       "wire: bf16 of the largest piece, the range's half");
	/* the first stage, sharded: wte a segment of its own */
	s.stage = 0;
	ok(gk_mem_flat_layout(&s, &f, &err) == 0 && f.seg[0] == wpe + 6 * blk && f.seg[1] == wte,
	   "first stage sharded: wpe and 6 blocks, wte apart");
	s.zero = 0;
	ok(gk_mem_flat_layout(&s, &f, &err) == 0 && f.seg[0] == wte + wpe + 6 * blk &&
	   f.seg[1] == 0 && f.piece[0] == f.seg[0], "first stage under ZeRO-0: one range");
	/* one rank: the whole flat buffer; ZeRO shards nothing, so ZeRO-2
	 * keeps the gradients' mirror */
	gk_mem_shape one = {.layers = 12, .hidden = 768, .vocab = 50257, .positions = 1024,
			    .zero = 2};
	uint64_t n1 = (50304 + 1024) * C + 12 * (12 * C * C + 13 * C) + 2 * C;
	ok(gk_mem_gpu_host(&one, 0, h, &err) == 0 && h[GK_MEM_HOST_PARAMS] == 4 * n1 &&
	   h[GK_MEM_HOST_GRADS] == 4 * n1 && h[GK_MEM_HOST_MOMENTS] == 8 * (n1 + 1),
	   "one rank: mirrors and moments of the whole buffer");
	/* 3 stages of 8 layers: 3, 3 and 2 (lib/nn's balance) */
	gk_mem_shape p3 = {.layers = 8, .hidden = 768, .vocab = 50257, .positions = 1024,
			   .pp = 3, .stage = 1};
	uint64_t b1 = 12 * C * C + 13 * C;
	ok(gk_mem_flat_layout(&p3, &f, &err) == 0 && f.seg[0] == 3 * b1 && f.seg[1] == 0,
	   "pp 3 over 8 layers: the middle stage's 3 blocks");
	p3.stage = 2;
	ok(gk_mem_flat_layout(&p3, &f, &err) == 0 && f.seg[0] == 2 * b1 + 2 * C &&
	   f.seg[1] == 50304 * C, "... the last stage's 2 blocks and ln_f, and wte apart");
	gk_mem_shape bad = s;
	bad.tp = 5;
	ok(gk_mem_flat_layout(&bad, &f, &err) < 0 && strstr(err.msg, "tp 5 must divide"),
	   "tp 5: %s", err.msg);
	bad = s, bad.pp = 13;
	ok(gk_mem_flat_layout(&bad, &f, &err) < 0 && strstr(err.msg, "pp 13 be at most the 12"),
	   "pp 13 over 12 layers: %s", err.msg);
	/*
	 * ZeRO-3 over the grid on GPUs (tp 2 x pp 2 x dp 2): the last
	 * stage's host copies of the parameters and the gradients are its
	 * segments' pages (a stage's path); its units
	 * the tied wte's slice and the final norm (n is even: no padding),
	 * and a block buffer; the first stage's the embeddings, a middle
	 * stage's none
	 */
	uint64_t edge, ring;
	gk_mem_shape g3 = s;
	g3.zero = 3, g3.stage = 1;
	ok(gk_mem_gpu_host(&g3, 0, h, &err) == 0, "ZeRO-3 over a grid: host terms");
	is_u64(h[GK_MEM_HOST_PARAMS], 4 * (6 * blk + 2 * C + wte),
	       "... host_params: the last stage's segments");
	is_u64(h[GK_MEM_HOST_GRADS], 4 * (6 * blk + 2 * C + wte),
	       "... host_grads: the stage's segments' pages");
	is_u64(h[GK_MEM_HOST_MOMENTS], 8 * ((6 * blk + 2 * C) / 2 + wte / 2 + 1),
	       "... host_moments: the rank's pieces");
	ok(gk_mem_zero3_device(&g3, 2, 1, &edge, &ring, &err) == 0 &&
	   edge == 2 * (wte + 2 * C) && ring == 2 * blk,
	   "... units of the last stage: wte's slice, ln_f and a block, bf16");
	g3.stage = 0;
	ok(gk_mem_zero3_device(&g3, 4, 1, &edge, &ring, &err) == 0 && edge == 4 * (wte + wpe) &&
	   ring == 4 * blk, "... of the first: the embeddings' slices and a block");
	g3.pp = 3, g3.stage = 1;
	ok(gk_mem_zero3_device(&g3, 4, 1, &edge, &ring, &err) == 0 && edge == 0 &&
	   ring == 4 * blk, "... of a middle stage: a block only");
	g3.pp = 1, g3.tp = 2, g3.stage = 0;
	ok(gk_mem_gpu_host(&g3, 0, h, &err) == 0 && h[GK_MEM_HOST_PARAMS] == 4 * (n / 2) &&
	   h[GK_MEM_HOST_GRADS] == 0, "... tp 2 x dp 2: the rank's range, no gradients' mirror");
	/* a stage's gradients beyond its pieces under ZeRO-2 and 3 */
	g3.pp = 2, g3.stage = 1;
	ok(gk_mem_flat_layout(&g3, &f, &err) == 0, "laid out");
	is_u64(gk_mem_pp_zero2_live(&f), 4 * (6 * blk + 2 * C + wte) / 2,
	       "the last stage's live gradients: half its segments");
	/* the tensor group's buffers: b 1 x s 1024 rows of 768 */
	is_u64(gk_mem_tp_buffers(1024, 768, 1), 4 * 1024 * 768 + 16 * 1024,
	       "tp buffers on GPUs: the fp32 sums and 4 floats a row");
	is_u64(gk_mem_tp_buffers(1000, 768, 1), 4 * 1000 * 768 + 16128,
	       "... 16000 bytes rounded up to 256");
	is_u64(gk_mem_tp_buffers(1024, 768, 0), 4 * 3 * 1024, "tp buffers on the CPU: 3 floats a row");
	/* a tensor rank's logits: 25152 columns allocated, 25128.5 the model's */
	uint64_t alloc, model;
	gk_mem_logits(50257, 2, 1024, 4, &alloc, &model);
	is_u64(alloc, 1024 * 4 * 25152, "logits: the padded vocabulary's half");
	is_u64(model, 1024 * 2 * 50257, "logits: the model's half");
}

int main(void)
{
	zero_figure1();
	korthikanti();
	model_splits();
	optimizers();
	fit();
	dp_comm();
	layouts();
	defaults();
	trainer();
	grid_layout();
	tp_replicas();
	keys();
	return done_testing();
}
