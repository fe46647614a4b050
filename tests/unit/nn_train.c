/*
 * nn_train.c - the trainer's pieces that run alone, in a world of one
 * (lib/comm's self backend, no launcher): what gk_nn_train_resolve makes
 * of the options, the shape and name helpers, the whole trainer against
 * the same steps written here with the model API, evaluation, the memory
 * it accounts, sampling, and which parallelism and offload settings
 * gk_nn_train_check accepts.
 *
 * The references are independent of the code under test: values worked
 * out by hand from the documentation (GPT-2 small's shape, the cosine
 * schedule, the parameter count), and for the trainer a second
 * implementation of the step (torch's order: zero_grad, A micro-steps of
 * forward and backward(1/A), global norm, clip_grad_norm_'s factor, AdamW)
 * over the model API, which must agree bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/train.h"
#include "tap.h"

static char dir[] = "/tmp/gk-nn-train-XXXXXX";
static char bin_path[600], cfg_path[600];

/* ---- gk_nn_train_check ---------------------------------------------------------- */

/* gk_nn_train_check's message for o, "" when it accepts them */
static const char *check(const gk_nn_train_opts *o, int cuda)
{
	static gk_err err;
	memset(&err, 0, sizeof(err));
	int rc = gk_nn_train_check(o, cuda, &err);
	return rc < 0 ? (err.msg[0] ? err.msg : "(-1 without a message)") : rc ? "(not 0 or -1)" : "";
}

/*
 * The rules, with the texts gpu-train(1) and the CLI tests state: a device
 * given on the command line (cuda from --device), and one --device auto
 * chose (the run's words, and nothing of the device said before it is
 * known). The rules no longer depend on the world's size: the cases once
 * asked at 1 and 2 ranks ask the same now.
 */
static void checks(void)
{
	gk_nn_train_opts o = {.zero = 2, .device = GK_NN_CUDA};
	is_str(check(&o, 1), "", "check: --zero 2 --device cuda (over NCCL)");
	o.zero = 3;
	is_str(check(&o, 1), "", "check: --zero 3 --device cuda (over NCCL)");
	o.device = GK_NN_AUTO;
	is_str(check(&o, 1), "", "check: --zero 3, auto chose a GPU");
	is_str(check(&o, -1), "", "check: --zero 3 --device auto, before the device is known");
	is_str(check(&o, 0), "", "check: --zero 3, auto chose the CPU");
	o.compress = GK_COMM_COMPRESS_F16;
	for (int z = 2; z <= 3; z++) {
		char what[64];
		o.zero = z;
		snprintf(what, sizeof(what), "check: --zero %d --compress on the CPU", z);
		is_str(check(&o, 0), "", what);
		snprintf(what, sizeof(what), "check: --zero %d --compress, before the device is known",
			 z);
		is_str(check(&o, -1), "", what);
		snprintf(what, sizeof(what), "check: --zero %d --compress on a GPU (over NCCL)", z);
		is_str(check(&o, 1), "", what);
	}
	o.zero = 3;
	o = (gk_nn_train_opts){.device = GK_NN_CPU, .zero = 3, .ckpt_gather = 1};
	is_str(check(&o, 0), "", "check: --zero 3 --ckpt-gather");
	o.zero = 2;
	is_str(check(&o, 0), "--ckpt-gather: only --zero 3 shards the model in its "
	       "checkpoints (--zero 2 writes model.safetensors whole): leave it out",
	       "check: --zero 2 --ckpt-gather");
	o = (gk_nn_train_opts){.device = GK_NN_AUTO, .offload_host = 1};
	is_str(check(&o, 0), "--offload optimizer moves a GPU's optimizer state to host "
	       "memory, and this run is on the CPU, which keeps it there: give optimizer:DIR for "
	       "files under DIR", "check: --offload optimizer, auto chose the CPU");
	is_str(check(&o, -1), "", "check: --offload optimizer --device auto");
	o.device = GK_NN_CPU;
	is_str(check(&o, 0), "--offload optimizer moves a GPU's optimizer state to host "
	       "memory, where the CPU backend already keeps it: give optimizer:DIR for files "
	       "under DIR", "check: --offload optimizer --device cpu");
	o = (gk_nn_train_opts){.device = GK_NN_AUTO, .offload_dir = "d"};
	is_str(check(&o, 1), "optimizer offload to a directory runs on the CPU backend only "
	       "(on a GPU the moments stay in device memory)", "check: optimizer:DIR, auto chose a GPU");
	o.offload_dir = NULL;
	o.offload_chunk = 4096;
	is_str(check(&o, -1), "--offload-chunk sizes the reads of --offload optimizer:DIR: "
	       "give that too", "check: --offload-chunk alone");
	o = (gk_nn_train_opts){.device = GK_NN_CPU, .tp = 2, .sample = 1};
	is_str(check(&o, 0), "", "check: --tp --sample on the CPU");
	is_str(check(&o, -1), "",
	       "check: --tp --sample, before the device is known");
	is_str(check(&o, 1), "", "check: --tp --sample on GPUs");
	o.tp = 1;
	o.pp = 2;
	is_str(check(&o, 0), "", "check: --pp --sample on the CPU");
	is_str(check(&o, 1), "", "check: --pp --sample on GPUs");
	o.pp = 0;
	o.sample = 0;
	o.tp = 2;
	o.seq_par = 1;
	is_str(check(&o, 0), "", "check: --tp 2 --sequence-parallel, the length not known");
	o.seq = 16;
	is_str(check(&o, 0), "", "check: --tp 2 --sequence-parallel --seq 16");
	o.seq = 33;
	is_str(check(&o, 0), "--sequence-parallel with --tp 2: the sequence length 33 does "
	       "not divide by 2 (each rank keeps 33/2 positions of each sequence): --seq 32 or 34",
	       "check: --sequence-parallel, a length that does not divide");
	o.tp = 4;
	o.seq = 3;
	is_str(check(&o, 0), "--sequence-parallel with --tp 4: the sequence length 3 does "
	       "not divide by 4 (each rank keeps 3/4 positions of each sequence): --seq 4",
	       "check: --sequence-parallel, a length shorter than the group");
	o.seq = 16;
	o.pp = 2;
	is_str(check(&o, 0), "", "check: --sequence-parallel --pp");
	is_str(check(&o, 1), "", "check: --sequence-parallel --pp on GPUs");
	o.pp = 0;
	o.tp = 1;
	is_str(check(&o, 0), "--sequence-parallel splits the sequence over a tensor group: "
	       "give --tp N (2 or more) too", "check: --sequence-parallel without --tp");
	o.seq_par = 0;
	o.tp = 2;
	o.device = GK_NN_AUTO;
	is_str(check(&o, -1), "", "check: --tp --device auto (before the device is known)");
	o.device = GK_NN_CUDA;
	is_str(check(&o, 1), "", "check: --tp on GPUs, two tensor groups");
	o.zero = 1;
	is_str(check(&o, 1), "", "check: --tp --zero 1 on GPUs");
	o.zero = 2;
	is_str(check(&o, 1), "", "check: --tp --zero 2 on GPUs");
	o.zero = 0;
	o.pp = 2;
	is_str(check(&o, 1), "", "check: --tp --pp on GPUs");
	o.pp = 0;
	o.seq_par = 1;
	is_str(check(&o, 1), "", "check: --tp --sequence-parallel on GPUs");
	o.seq_par = 0;
	o.compress = GK_COMM_COMPRESS_INT8;
	is_str(check(&o, 1), "", "check: --tp --compress int8 on GPUs");
	o.zero = 1;
	is_str(check(&o, 1), "", "check: --tp --zero 1 --compress int8 on GPUs");
	o.zero = 0;
	o.compress = GK_COMM_COMPRESS_NONE;
	o.device = GK_NN_CPU;
	o.zero = 1;
	is_str(check(&o, 0), "", "check: --tp --zero 1 without --pp");
	o.zero = 2;
	is_str(check(&o, 0), "", "check: --tp --zero 2 without --pp");
	o.pp = 2;
	o.zero = 1;
	is_str(check(&o, 0), "", "check: --tp --pp --zero 1");
	o.zero = 2;
	is_str(check(&o, 0), "", "check: --tp --pp --zero 2");
	o.zero = 3;
	is_str(check(&o, 0), "", "check: --tp --pp --zero 3 on the CPU");
	is_str(check(&o, 1), "", "check: --tp --pp --zero 3 on GPUs");
	o.pp = 0;
	is_str(check(&o, 1), "", "check: --tp --zero 3 on GPUs without --pp");
	o.seq_par = 1;
	is_str(check(&o, 0), "", "check: --tp --sequence-parallel --zero 3 on the CPU");
	is_str(check(&o, 1), "", "check: --tp --sequence-parallel --zero 3 on GPUs");
	o = (gk_nn_train_opts){.device = GK_NN_CPU, .pp = 3, .zero = 1};
	is_str(check(&o, 0), "", "check: --pp --zero 1");
	o.zero = 2;
	is_str(check(&o, 0), "", "check: --pp --zero 2");
	is_str(check(&o, 1), "", "check: --pp --zero 2 on GPUs, two data-parallel groups");
	o.zero = 3;
	is_str(check(&o, 0), "", "check: --pp --zero 3 on the CPU");
	is_str(check(&o, 1), "", "check: --pp --zero 3 on GPUs");
	o.compress = GK_COMM_COMPRESS_BF16;
	is_str(check(&o, 0), "", "check: --pp --zero 3 --compress on the CPU");
	o.compress = GK_COMM_COMPRESS_NONE;
	o.pp_sched = GK_NN_PP_INTERLEAVED;
	o.pp_chunks = 2;
	o.grad_accum = 3;
	is_str(check(&o, 0), "", "check: --pp --zero 3 interleaved on the CPU");
	is_str(check(&o, 1), "", "check: --pp --zero 3 interleaved on GPUs");
	o = (gk_nn_train_opts){.device = GK_NN_CPU, .pp = 3, .val_data = "v"};
	is_str(check(&o, 0), "", "check: --pp --val-data");
	o.eval_only = 1;
	is_str(check(&o, 0), "", "check: --pp --eval-only");
	o.offload_dir = "d";
	is_str(check(&o, 0), "", "check: --pp --offload optimizer:DIR");
	o.pp = 1;
	o.tp = 2;
	is_str(check(&o, 0), "", "check: --tp --offload optimizer:DIR");
	o = (gk_nn_train_opts){.device = GK_NN_CUDA, .pp = 2, .offload_host = 1};
	is_str(check(&o, 1), "", "check: --pp --offload optimizer on GPUs");
	o.pp = 1;
	o.tp = 2;
	is_str(check(&o, 1), "", "check: --tp --offload optimizer on GPUs");
}

/* The start line's grid and the pipeline's warning, as gpu-train prints them. */
static void grid_texts(void)
{
	char buf[320];
	gk_nn_train_opts g = {.tp = 1, .pp = 1, .grad_accum = 4};
	gk_nn_grid_describe(buf, sizeof(buf), 4, 2, &g);
	is_str(buf, "", "grid: data parallel alone says nothing");
	g.tp = 2;
	gk_nn_grid_describe(buf, sizeof(buf), 4, 2, &g);
	is_str(buf, " (dp 2 x tp 2)", "grid: dp x tp");
	g.seq_par = 1;
	gk_nn_grid_describe(buf, sizeof(buf), 4, 2, &g);
	is_str(buf, " (dp 2 x tp 2, sequence-parallel)", "grid: dp x tp, sequence-parallel");
	g = (gk_nn_train_opts){.tp = 1, .pp = 3, .grad_accum = 4};
	gk_nn_grid_describe(buf, sizeof(buf), 3, 4, &g);
	is_str(buf, " (dp 1 x pp 3: layers 0-1, 2-2, 3-3; 1f1b over 4 micro-batches, bubble "
	       "(3-1)/4 = 0.5)", "grid: pp 3 on 4 layers");
	gk_nn_grid_describe(buf, 24, 3, 4, &g);
	ok(strlen(buf) == 23, "grid: cut to the buffer");
	g = (gk_nn_train_opts){.tp = 2, .pp = 2, .grad_accum = 3, .pp_sched = GK_NN_PP_GPIPE};
	gk_nn_grid_describe(buf, sizeof(buf), 8, 2, &g);
	is_str(buf, " (dp 2 x pp 2 x tp 2: layers 0-0, 1-1; gpipe over 3 micro-batches, bubble "
	       "(2-1)/3 = 0.333)", "grid: dp x pp x tp");
	/* an agreed failure's reporter: world rank = (dp pp + pp) tp + tp rank */
	gk_nn_grid_where(buf, sizeof(buf), 8, 7, &g);
	is_str(buf, "rank 7 (dp 1, pp 1, tp 1)", "where: dp x pp x tp, the last rank");
	gk_nn_grid_where(buf, sizeof(buf), 8, 2, &g);
	is_str(buf, "rank 2 (dp 0, pp 1, tp 0)", "where: pp varies after tp");
	g.pp = 1;
	gk_nn_grid_where(buf, sizeof(buf), 8, 5, &g);
	is_str(buf, "rank 5 (dp 2, pp 0, tp 1)", "where: dp x tp");
	gk_nn_grid_where(buf, sizeof(buf), 7, 5, &g);
	is_str(buf, "rank 5", "where: a world --tp does not divide: the rank alone");
	g.tp = 1;
	gk_nn_grid_where(buf, sizeof(buf), 8, 5, &g);
	is_str(buf, "rank 5", "where: data parallel alone: the rank alone");
	gk_nn_train_opts o = {.pp = 3, .grad_accum = 2, .steps = 10};
	ok(gk_nn_pp_warning(buf, sizeof(buf), &o) == 1, "warning: --pp 3 --grad-accum 2");
	is_str(buf, "--pp 3 with --grad-accum 2: fewer micro-batches than stages leave stages idle "
	       "most of each step (the bubble, (3-1)/2, is 100%); use --grad-accum 12 or more",
	       "warning: its text");
	o.eval_only = 1;
	ok(gk_nn_pp_warning(buf, sizeof(buf), &o) == 0 && !buf[0], "warning: none for --eval-only");
	o.eval_only = 0;
	o.grad_accum = 3;
	ok(gk_nn_pp_warning(buf, sizeof(buf), &o) == 0 && !buf[0],
	   "warning: none with as many micro-batches as stages");
}

/* ---- gk_nn_train_resolve ------------------------------------------------------- */

static gk_nn_train_opts base(void)
{
	/* gpu-train's parse_args: min_lr -1 (lr / 10), eot -1 (vocab - 1) */
	gk_nn_train_opts o = {.batch = 4, .steps = 100, .eot = -1};
	o.sched = (gk_nn_sched){GK_NN_SCHED_COSINE, 3e-3, -1, 0, 0};
	return o;
}

static int shape_is(const gk_nn_config *c, int64_t L, int64_t C, int64_t NH, int64_t V,
		    int64_t P)
{
	int r = c->layers == L && c->hidden == C && c->heads == NH && c->vocab == V &&
		c->positions == P;
	if (!r)
		diag("shape %lld %lld %lld %lld %lld, want %lld %lld %lld %lld %lld",
		     (long long)c->layers, (long long)c->hidden, (long long)c->heads,
		     (long long)c->vocab, (long long)c->positions, (long long)L, (long long)C,
		     (long long)NH, (long long)V, (long long)P);
	return r;
}

static void resolve(void)
{
	gk_err err = {0};
	gk_nn_train_opts o = base();
	int rc = gk_nn_train_resolve(&o, NULL, &err);
	ok(rc == 0 && o.have_config && o.cfg_from_flags, "no config, no flags: resolved (%s)",
	   err.msg);
	/* GPT-2 small on bytes, by hand: 12 layers, 768, 12 heads, 257 tokens
	 * padded to 384 (a multiple of 128), 1024 positions, eps 1e-5 */
	ok(shape_is(&o.cfg, 12, 768, 12, 257, 1024) && o.cfg.vocab_pad == 384 &&
		   o.cfg.ln_eps == 1e-5f,
	   "  GPT-2 small, finished (vocab_pad 384)");
	is_int(o.seq, 1024, "  seq from the positions");
	ok(fabs(o.sched.min_lr - 3e-4) < 1e-18, "  min_lr lr/10 = 3e-4 (%.17g)", o.sched.min_lr);
	is_int(o.sched.steps, 100, "  the schedule's steps are --steps");

	o = base();
	o.shape = (gk_nn_config){.layers = 2, .heads = 4, .positions = 64};
	o.seq = 16;
	o.sched.min_lr = 0;
	rc = gk_nn_train_resolve(&o, NULL, &err);
	ok(rc == 0 && shape_is(&o.cfg, 2, 768, 4, 257, 64) && o.cfg_from_flags,
	   "flags over GPT-2 small: layers 2, heads 4, positions 64");
	ok(o.seq == 16 && o.sched.min_lr == 0, "  a seq given is kept, and min_lr 0");

	/* a GPT-2 config.json as gk_nn_config_save writes it */
	gk_nn_config file = {.layers = 3, .hidden = 48, .heads = 3, .vocab = 300,
			     .positions = 64, .ln_eps = 1e-6f};
	if (gk_nn_config_finish(&file, &err) < 0 || gk_nn_config_save(&file, cfg_path, &err) < 0)
		diag("config.json: %s", err.msg);
	o = base();
	o.sched.min_lr = 5e-5;
	rc = gk_nn_train_resolve(&o, cfg_path, &err);
	ok(rc == 0 && o.have_config && !o.cfg_from_flags &&
		   shape_is(&o.cfg, 3, 48, 3, 300, 64) && o.cfg.ln_eps == 1e-6f &&
		   o.cfg.vocab_pad == 384 && o.seq == 64 && o.sched.min_lr == 5e-5,
	   "config.json alone: its shape and epsilon, seq 64, min_lr kept");
	o = base();
	o.shape = (gk_nn_config){.heads = 6, .positions = 128};
	rc = gk_nn_train_resolve(&o, cfg_path, &err);
	ok(rc == 0 && shape_is(&o.cfg, 3, 48, 6, 300, 128) && o.cfg.ln_eps == 1e-6f &&
		   o.seq == 128,
	   "flags over config.json: heads 6, positions 128, seq 128");

	/* errors: the flags' shape is a usage error (-2), the file a runtime one (-1) */
	o = base();
	o.shape = (gk_nn_config){.hidden = 100, .heads = 3};
	gk_err_clear(&err);
	rc = gk_nn_train_resolve(&o, NULL, &err);
	ok(rc == -2 && strstr(err.msg, "n_head") && strstr(err.msg, "100"),
	   "flags alone, 3 heads of hidden 100: -2 (%s)", err.msg);
	o = base();
	o.shape = (gk_nn_config){.vocab = 1};
	is_int(gk_nn_train_resolve(&o, NULL, &err), -2, "flags alone, vocab 1: -2");
	char missing[700];
	snprintf(missing, sizeof(missing), "%s/none.json", dir);
	o = base();
	gk_err_clear(&err);
	rc = gk_nn_train_resolve(&o, missing, &err);
	ok(rc == -1 && strstr(err.msg, "none.json"), "an unreadable config: -1 (%s)", err.msg);
	o = base();
	o.shape = (gk_nn_config){.heads = 5};
	rc = gk_nn_train_resolve(&o, cfg_path, &err);
	ok(rc < 0 && strstr(err.msg, "n_head"), "config with flags that break it: refused (%d: %s)",
	   rc, err.msg);

	/* --init-from: the checkpoint's config.json, read by the trainer */
	o = base();
	o.init_from = "/nonexistent/ckpt";
	rc = gk_nn_train_resolve(&o, NULL, &err);
	ok(rc == 0 && !o.have_config && o.seq == 0,
	   "init_from alone: no config yet, seq left to the trainer");
	o = base();
	o.init_from = "/nonexistent/ckpt";
	o.seq = 16;
	rc = gk_nn_train_resolve(&o, NULL, &err);
	ok(rc == 0 && !o.have_config && o.seq == 16, "init_from alone: a seq given is kept");
	o = base();
	o.init_from = "/nonexistent/ckpt";
	o.shape = (gk_nn_config){.heads = 5};
	rc = gk_nn_train_resolve(&o, NULL, &err);
	ok(rc == 0 && o.have_config && o.cfg_from_flags && o.cfg.heads == 5 && o.seq == 0,
	   "init_from with flags: kept for over the checkpoint's config, not finished here");
	o = base();
	o.init_from = "/nonexistent/ckpt";
	rc = gk_nn_train_resolve(&o, cfg_path, &err);
	ok(rc == 0 && o.have_config && !o.cfg_from_flags && o.seq == 64,
	   "init_from with a config: the config, finished");
}

/* ---- shapes and names ------------------------------------------------------------ */

static void names(void)
{
	gk_nn_config c = gk_nn_gpt2_small, f = {0};
	gk_nn_config_over(&c, &f);
	ok(memcmp(&c, &gk_nn_gpt2_small, sizeof(c)) == 0, "config_over: no flags, no change");
	f = (gk_nn_config){.layers = 3, .vocab = 1000, .vocab_pad = 7, .ln_eps = 0.5f};
	gk_nn_config_over(&c, &f);
	ok(shape_is(&c, 3, 768, 12, 1000, 1024) && c.ln_eps == 1e-5f && c.vocab_pad == 0,
	   "config_over: layers and vocab; not vocab_pad or ln_eps");
	f = (gk_nn_config){.layers = 1, .hidden = 2, .heads = 3, .vocab = 4, .positions = 5};
	gk_nn_config_over(&c, &f);
	ok(shape_is(&c, 1, 2, 3, 4, 5), "config_over: every shape field");

	gk_nn_config a = gk_nn_gpt2_small, b = a;
	ok(gk_nn_config_equal(&a, &b), "config_equal: itself");
	b.ln_eps = 1e-6f;
	b.vocab_pad = 384;
	ok(gk_nn_config_equal(&a, &b), "config_equal: ln_eps and vocab_pad are not the shape");
	int each = 1;
	for (int k = 0; k < 5; k++) {
		b = a;
		int64_t *fld[] = {&b.layers, &b.hidden, &b.heads, &b.vocab, &b.positions};
		*fld[k] += 1;
		each &= !gk_nn_config_equal(&a, &b) && !gk_nn_config_equal(&b, &a);
	}
	ok(each, "config_equal: any one of the five fields differs");

	ok(gk_nn_device_parse("cpu") == GK_NN_CPU && gk_nn_device_parse("cuda") == GK_NN_CUDA &&
		   gk_nn_device_parse("gpu") == GK_NN_CUDA && gk_nn_device_parse("auto") == GK_NN_AUTO,
	   "device: cpu, cuda, gpu, auto");
	ok(gk_nn_device_parse("CPU") == -1 && gk_nn_device_parse("") == -1 &&
		   gk_nn_device_parse("cuda:0") == -1,
	   "device: CPU, '' and cuda:0 unknown");
	static const char *prec[] = {"bf16", "tf32", "fp32"};
	int rt = 1;
	for (int i = 0; i < 3; i++)
		rt &= gk_nn_precision_parse(prec[i]) == i &&
		      !strcmp(gk_nn_precision_name(gk_nn_precision_parse(prec[i])), prec[i]);
	ok(rt && GK_NN_BF16 == 0 && GK_NN_TF32 == 1 && GK_NN_FP32 == 2,
	   "precision: bf16 tf32 fp32 round trip through their enum values");
	ok(gk_nn_precision_parse("fp16") == -1 && gk_nn_precision_parse("BF16") == -1 &&
		   gk_nn_precision_parse("") == -1 && !strcmp(gk_nn_precision_name(-1), "?") &&
		   !strcmp(gk_nn_precision_name(3), "?"),
	   "precision: unknown names -1, unknown values '?'");
	ok(gk_nn_recompute_parse("none") == GK_NN_RECOMPUTE_NONE &&
		   gk_nn_recompute_parse("gelu") == GK_NN_RECOMPUTE_GELU &&
		   gk_nn_recompute_parse("layer") == GK_NN_RECOMPUTE_LAYER &&
		   gk_nn_recompute_parse("all") == -1 && gk_nn_recompute_parse("") == -1,
	   "recompute: none gelu layer; others -1");
}

/* ---- the trainer against the model API ----------------------------------------------- */

enum { TOKENS = 4000, STEPS = 5 };

static int write_data(void)
{
	/* llm.c's format: 256 int32 of header, then uint16 tokens (bytes of
	 * text that varies, so the loss has something to learn) */
	FILE *f = fopen(bin_path, "wb");
	if (!f)
		return -1;
	int32_t h[256] = {20240520, 1, TOKENS};
	fwrite(h, sizeof(h), 1, f);
	char text[TOKENS + 64];
	size_t n = 0;
	for (int i = 0; n < TOKENS; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%d quick foxes jump over %d dogs. ",
				      i, (i * 7) % 13);
	for (size_t i = 0; i < TOKENS; i++) {
		uint16_t t = (unsigned char)text[i];
		fwrite(&t, 2, 1, f);
	}
	return fclose(f);
}

struct rec {
	int n;
	int64_t step[16];
	double loss[16], norm[16], lr[16];
};

static void on_step(const gk_nn_train_log *l, void *ctx)
{
	struct rec *r = ctx;
	if (r->n < 16) {
		r->step[r->n] = l->step;
		r->loss[r->n] = l->loss;
		r->norm[r->n] = l->grad_norm;
		r->lr[r->n] = l->lr;
	}
	r->n++;
}

/* The run's options, as gpu-train would give them, resolved. */
static int tiny_opts(gk_nn_train_opts *o, int A, double clip, gk_err *err)
{
	*o = (gk_nn_train_opts){
		.shape = {.layers = 2, .hidden = 32, .heads = 2, .vocab = 257, .positions = 33},
		.seed = 1337, .data = bin_path, .shuffle = 0, .eot = -1, .batch = 2, .seq = 16,
		.grad_accum = A, .threads = 1, .device = GK_NN_CPU, .clip = clip, .steps = STEPS,
		.sched = {GK_NN_SCHED_COSINE, 3e-3, -1, 2, 0},
		.adamw = {0.9f, 0.95f, 1e-8f, 0.1f}, .overlap = 0,
	};
	return gk_nn_train_resolve(o, NULL, err);
}

/*
 * The second implementation: STEPS steps of the model API alone, as
 * torch's loop does them. Fills r and leaves the trained model in *out.
 */
static int reference(const gk_nn_train_opts *o, struct rec *r, gk_nn_model **out,
		     double *naive_norm_err, gk_err *err)
{
	gk_nn_opts mo = {.batch = o->batch, .seq = o->seq, .threads = o->threads};
	gk_nn_model *m = NULL;
	gk_nn_data *d = NULL;
	int32_t *in = malloc((size_t)o->batch * o->seq * sizeof(int32_t));
	int32_t *tg = malloc((size_t)o->batch * o->seq * sizeof(int32_t));
	float *mom = NULL, *vel = NULL;
	int rc = -1, A = o->grad_accum;
	*naive_norm_err = 0;
	if (gk_nn_new(&m, &o->cfg, &mo, err) < 0)
		goto out;
	gk_nn_init(m, o->seed);
	gk_nn_data_opts dop;
	gk_nn_train_data_opts(o, o->cfg.vocab, &dop);
	dop.loop = 1; /* the trainer's training data loops */
	if (gk_nn_data_open(&d, o->data, &dop, err) < 0)
		goto out;
	size_t N = gk_nn_nparams(m);
	mom = calloc(N, sizeof(float));
	vel = calloc(N, sizeof(float));
	if (!in || !tg || !mom || !vel)
		goto out;
	float *p = gk_nn_params(m), *g = gk_nn_grads(m);
	r->n = 0;
	for (int64_t step = 1; step <= o->steps; step++) {
		double lsum = 0;
		gk_nn_zero_grad(m);
		for (int a = 0; a < A; a++) {
			float l;
			if (gk_nn_data_next(d, in, tg, err) != 1 ||
			    gk_nn_forward(m, in, tg, &l, err) < 0 ||
			    gk_nn_backward(m, 1.0f / (float)A, NULL, NULL, err) < 0)
				goto out;
			lsum += l;
		}
		double norm = sqrt(gk_nn_sumsq(g, N));
		/* the norm once more, naively in double, as a check of sumsq */
		double s2 = 0;
		for (size_t i = 0; i < N; i++)
			s2 += (double)g[i] * g[i];
		*naive_norm_err = fmax(*naive_norm_err, fabs(sqrt(s2) - norm) / norm);
		/* torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)) */
		double k = o->clip > 0 ? o->clip / (norm + 1e-6) : 1.0;
		float sc = k < 1.0 ? (float)k : 1.0f;
		double lr = gk_nn_lr(&o->sched, step);
		gk_nn_adamw_step(m, &o->adamw, (float)lr, step, 0, N, p, g, sc, mom, vel);
		r->step[r->n] = step;
		r->loss[r->n] = lsum / A;
		r->norm[r->n] = norm;
		r->lr[r->n] = lr;
		r->n++;
	}
	rc = 0;
out:
	gk_nn_data_close(d);
	free(in);
	free(tg);
	free(mom);
	free(vel);
	if (rc < 0) {
		gk_nn_free(m);
		m = NULL;
	}
	*out = m;
	return rc;
}

static int same_run(const struct rec *a, const struct rec *b)
{
	int same = a->n == b->n;
	for (int i = 0; same && i < a->n; i++) {
		int s = a->step[i] == b->step[i] && a->loss[i] == b->loss[i] &&
			a->norm[i] == b->norm[i] && a->lr[i] == b->lr[i];
		if (!s)
			diag("step %lld: loss %.9g %.9g, norm %.9g %.9g, lr %.9g %.9g",
			     (long long)a->step[i], a->loss[i], b->loss[i], a->norm[i], b->norm[i],
			     a->lr[i], b->lr[i]);
		same &= s;
	}
	return same;
}

/* The mean forward loss over the first `batches` micro-batches (<= 0:
 * all) of the data, with the model API on model m. */
static double eval_ref(gk_nn_model *m, const gk_nn_train_opts *o, int64_t batches,
		       int64_t *nb)
{
	gk_nn_data *d = NULL;
	gk_nn_data_opts dop;
	gk_err err = {0};
	gk_nn_train_data_opts(o, o->cfg.vocab, &dop);
	int32_t in[2 * 16], tg[2 * 16];
	double s = 0;
	*nb = 0;
	if (gk_nn_data_open(&d, o->data, &dop, &err) < 0)
		return NAN;
	while ((batches <= 0 || *nb < batches) && gk_nn_data_next(d, in, tg, &err) == 1) {
		float l;
		if (gk_nn_forward(m, in, tg, &l, &err) < 0)
			break;
		s += l;
		(*nb)++;
	}
	gk_nn_data_close(d);
	return s / (double)*nb;
}

static void trainer(int A, double clip)
{
	gk_err err = {0};
	gk_nn_train_opts o;
	if (!ok(tiny_opts(&o, A, clip, &err) == 0, "A=%d clip %g: options resolved%s%s", A, clip,
		err.msg[0] ? ": " : "", err.msg))
		return;
	gk_nn_trainer *t = NULL;
	int rc = gk_nn_trainer_new(&t, &o, &err);
	if (!ok(rc == 0, "  trainer in a world of one%s%s", rc ? ": " : "", err.msg)) {
		gk_nn_trainer_free(t);
		return;
	}
	ok(gk_nn_trainer_world(t) == 1 && gk_nn_trainer_rank(t) == 0 &&
		   !strcmp(gk_nn_trainer_device(t, NULL), "cpu") &&
		   !strcmp(gk_nn_trainer_comm(t, NULL), "self"),
	   "  rank 0 of 1, cpu, self (%s)", gk_nn_trainer_comm(t, NULL));
	const gk_nn_train_opts *ro = gk_nn_trainer_opts(t);
	ok(ro->eot == 256 && ro->seq == 16 && ro->grad_accum == A && ro->threads == 1,
	   "  resolved: eot 256 (vocab - 1), seq 16, A %d, 1 thread", A);

	struct rec got = {0}, want = {0};
	gk_nn_train_hooks h = {.step = on_step, .ctx = &got};
	gk_nn_train_summary sum;
	rc = gk_nn_trainer_run(t, &h, &sum, &err);
	if (!ok(rc == 0 && got.n == STEPS, "  %d steps%s%s", got.n, rc ? ": " : "", err.msg)) {
		gk_nn_trainer_free(t);
		return;
	}

	gk_nn_model *m = NULL;
	double nerr;
	rc = reference(&o, &want, &m, &nerr, &err);
	if (!ok(rc == 0, "  the reference's %d steps%s%s", STEPS, rc ? ": " : "", err.msg)) {
		gk_nn_trainer_free(t);
		return;
	}
	ok(same_run(&got, &want), "  losses, norms and lrs = the model API's, bit for bit");
	gk_nn_model *tm = gk_nn_trainer_model(t);
	size_t N = gk_nn_nparams(m);
	ok(gk_nn_nparams(tm) == N &&
		   memcmp(gk_nn_params(tm), gk_nn_params(m), N * sizeof(float)) == 0,
	   "  and the parameters after step %d, bit for bit", STEPS);
	int clipped = 0;
	for (int i = 0; i < got.n; i++)
		clipped += clip > 0 && got.norm[i] > clip;
	diag("A=%d clip %g: losses %.6f %.6f %.6f %.6f %.6f, norms %.4f %.4f %.4f %.4f %.4f "
	     "(%d clipped)", A, clip, got.loss[0], got.loss[1], got.loss[2], got.loss[3],
	     got.loss[4], got.norm[0], got.norm[1], got.norm[2], got.norm[3], got.norm[4], clipped);

	/* independent of both: the cosine schedule by hand, warmup 2 of 5
	 * from 3e-3 to min_lr 3e-4 */
	const double lr[STEPS] = {1.5e-3, 3e-3, 3e-4 + 1.35e-3 * 1.5, 3e-4 + 1.35e-3 * 0.5, 3e-4};
	int lr_ok = 1;
	for (int i = 0; i < STEPS; i++)
		lr_ok &= got.step[i] == i + 1 && fabs(got.lr[i] - lr[i]) < 1e-15;
	ok(lr_ok, "  lr by hand: 1.5e-3, 3e-3, 2.325e-3, 9.75e-4, 3e-4");
	ok(nerr < 1e-12, "  norm = a naive double sum's within 1e-12 (%.2g)", nerr);
	/* a model at N(0, 0.02) predicts nearly uniformly over 257 tokens */
	ok(fabs(got.loss[0] - log(257.0)) < 0.05 && got.loss[STEPS - 1] < got.loss[0] - 0.1,
	   "  first loss near ln 257 = 5.549 (%.4f); the last lower (%.4f)", got.loss[0],
	   got.loss[STEPS - 1]);
	double mn = INFINITY;
	for (int i = 0; i < STEPS; i++)
		mn = fmin(mn, got.loss[i]);
	ok(sum.steps == STEPS && sum.step == STEPS && sum.first_step == 1 &&
		   sum.tokens == (uint64_t)STEPS * A * 2 * 16 && sum.last_loss == got.loss[STEPS - 1] &&
		   sum.min_loss == mn && sum.stopped == 0,
	   "  summary: %d steps, %d tokens, last and least loss", STEPS, STEPS * A * 32);

	/* memory: mem-estimate's f32 AdamW figures, 4, 4 and 8 bytes a parameter */
	const gk_nn_train_mem *mem = gk_nn_trainer_mem(t);
	uint64_t P = gk_nn_param_count(tm);
	/* by hand: wte 257*32, wpe 33*32, 2 blocks of 12*32^2 + 13*32, ln_f 2*32 */
	is_u64(P, 257 * 32 + 33 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32,
	       "  parameter count 34752");
	const uint64_t *mb = mem->bytes;
	ok(mb[GK_MEM_PARAMETERS] == 4 * P && mb[GK_MEM_GRADIENTS] == 4 * P &&
		   mb[GK_MEM_OPTIMIZER] == 8 * P,
	   "  memory: parameters 4P, gradients 4P, optimizer 8P (%llu %llu %llu)",
	   (unsigned long long)mb[GK_MEM_PARAMETERS], (unsigned long long)mb[GK_MEM_GRADIENTS],
	   (unsigned long long)mb[GK_MEM_OPTIMIZER]);
	ok(mem->total == mb[GK_MEM_PARAMETERS] + mb[GK_MEM_GRADIENTS] + mb[GK_MEM_OPTIMIZER] +
				 mb[GK_MEM_ACTIVATIONS] + mb[GK_MEM_WORKSPACE] +
				 mb[GK_MEM_PADDING] + mb[GK_MEM_COMM] &&
		   mb[GK_MEM_COMM] == 0 && mb[GK_MEM_ACTIVATIONS] > 0,
	   "  memory: total is the sum of the categories, no comm");
	/* the padded rows (384 - 257) of wte in parameters, gradients and
	 * both moments, and their logit columns over B*T positions */
	uint64_t pad = 127ull * 32 * 4 * 4 + 127ull * 2 * 16 * 4;
	ok(mb[GK_MEM_PADDING] >= pad && mb[GK_MEM_PADDING] < pad + 256,
	   "  memory: padding the vocabulary's 127 padded rows and columns (%llu, %llu)",
	   (unsigned long long)mb[GK_MEM_PADDING], (unsigned long long)pad);

	/* evaluation: the mean of forward losses over the same micro-batches */
	double loss = NAN;
	int64_t nb = 0, rnb;
	rc = gk_nn_trainer_eval(t, bin_path, 0, &loss, &nb, &err);
	double ref = eval_ref(tm, &o, 0, &rnb);
	/* by hand: (TOKENS - 1) / (B*T) whole micro-batches in one pass */
	ok(rc == 0 && nb == (TOKENS - 1) / 32 && rnb == nb, "  eval: %lld micro-batches (%s)",
	   (long long)nb, err.msg);
	ok(isfinite(loss) && loss == ref, "  eval loss %.6f = the mean of forward losses (%.6f)",
	   loss, ref);
	rc = gk_nn_trainer_eval(t, bin_path, 3, &loss, &nb, &err);
	ref = eval_ref(tm, &o, 3, &rnb);
	ok(rc == 0 && nb == 3 && loss == ref, "  eval of 3 micro-batches = theirs (%.6f)", ref);
	ok(gk_nn_trainer_eval(t, "/nonexistent.bin", 0, &loss, &nb, &err) < 0,
	   "  eval of missing data fails (%s)", err.msg);

	gk_nn_free(m);
	gk_nn_trainer_free(t);
}

/* ---- sampling ----------------------------------------------------------------------- */

static void sampling(void)
{
	enum { B = 2, T = 16, V = 257, N = 40 };
	gk_nn_config c = {.layers = 2, .hidden = 32, .heads = 2, .vocab = V, .positions = 33,
			  .ln_eps = 1e-5f};
	gk_nn_opts mo = {.batch = B, .seq = T, .threads = 1};
	gk_nn_model *m = NULL;
	gk_err err = {0};
	if (!ok(gk_nn_new(&m, &c, &mo, &err) == 0, "sampling model%s", err.msg))
		return;
	/* weights larger than GPT-2's init, so the logits are far from uniform */
	gk_nn_init(m, 3);
	float *p = gk_nn_params(m);
	size_t np = gk_nn_nparams(m), nt;
	const gk_nn_tensor *tt = gk_nn_tensors(m, &nt);
	for (size_t i = 0; i < np; i++)
		p[i] *= 20;
	for (size_t i = (size_t)V * 32; i < tt[0].numel; i++)
		p[tt[0].off + i] = 0; /* the padded rows stay zero */

	int32_t a[N], b[N], s8[N], g[N], k1[N];
	int rc = gk_nn_sample(m, B, T, 10, N, 0.8, 0, 7, a, &err);
	rc |= gk_nn_sample(m, B, T, 10, N, 0.8, 0, 7, b, &err);
	rc |= gk_nn_sample(m, B, T, 10, N, 0.8, 0, 8, s8, &err);
	int in_vocab = 1;
	for (int i = 0; i < N; i++)
		in_vocab &= a[i] >= 0 && a[i] < V && s8[i] >= 0 && s8[i] < V;
	ok(rc == 0 && memcmp(a, b, sizeof(a)) == 0, "sample: the same seed, the same %d tokens", N);
	ok(memcmp(a, s8, sizeof(a)) != 0 && in_vocab,
	   "sample: another seed, other tokens; all below the vocabulary");

	/* greedy, against an argmax loop over one-window forwards (the last
	 * T tokens of the history) written here */
	int32_t hist[N + 1], want[N];
	hist[0] = 10;
	int len = 1;
	for (int i = 0; i < N && rc == 0; i++) {
		int first = len > T ? len - T : 0;
		const float *lg;
		rc = gk_nn_forward_window(m, hist + first, len - first, &lg, &err);
		int best = 0;
		for (int v = 1; v < V; v++)
			if (lg[v] > lg[best])
				best = v;
		want[i] = best;
		hist[len++] = best;
	}
	rc |= gk_nn_sample(m, B, T, 10, N, 0.0, 0, 7, g, &err);
	int same = 0;
	while (same < N && g[same] == want[same])
		same++;
	ok(rc == 0 && same == N,
	   "temperature 0: %d tokens (the window slides after %d) = the argmax of one-window "
	   "forwards (%d agree)", N, T, same);
	/* top_k 1 keeps only the most likely: greedy at any temperature */
	rc = gk_nn_sample(m, B, T, 10, N, 1.0, 1, 99, k1, &err);
	ok(rc == 0 && memcmp(k1, g, sizeof(g)) == 0, "top_k 1 at temperature 1: greedy");

	/* after a prompt: greedy against the same argmax loop from the
	 * prompt's tokens, for a prompt within the window (the cache takes
	 * it first) and one longer than the window (it slides at once) */
	for (int plen = 5; plen <= T + 3; plen += T - 2) {
		int32_t pr[T + 3], ph[T + 3 + N], pw[N], pg[N];
		for (int i = 0; i < plen; i++)
			pr[i] = (i * 37 + 11) % V;
		memcpy(ph, pr, (size_t)plen * sizeof(int32_t));
		len = plen;
		rc = 0;
		for (int i = 0; i < N && rc == 0; i++) {
			int first = len > T ? len - T : 0;
			const float *lg;
			rc = gk_nn_forward_window(m, ph + first, len - first, &lg, &err);
			int best = 0;
			for (int v = 1; v < V; v++)
				if (lg[v] > lg[best])
					best = v;
			pw[i] = best;
			ph[len++] = best;
		}
		rc |= gk_nn_sample_prompt(m, B, T, pr, plen, N, 0.0, 0, 7, pg, &err);
		ok(rc == 0 && memcmp(pw, pg, sizeof(pg)) == 0,
		   "a prompt of %d tokens (window %d): greedy = the argmax of one-window forwards", plen,
		   T);
	}
	int32_t bad[2] = {3, V};
	ok(gk_nn_sample_prompt(m, B, T, bad, 2, N, 0.0, 0, 7, k1, &err) < 0 &&
	   strstr(err.msg, "prompt token"), "a prompt token outside the vocabulary: refused (%s)",
	   err.msg);
	gk_nn_free(m);
}

/* ---- the progress line ---------------------------------------------------------- */

static void progress(void)
{
	gk_nn_progress p;
	gk_nn_train_log l = {.loss = 2.5};
	char line[256];
	/* 200 steps of 4 x 64 tokens; the first takes 30 s, then 0.5 s each,
	 * with an evaluation's 20 s at step 5 */
	gk_nn_progress_start(&p, 200, 256, 0.25, 1000.0);
	ok(isnan(gk_nn_progress_step_seconds(&p)), "progress: no rate before a step");
	l.step = 1;
	l.step_ms = 30000;
	gk_nn_progress_step(&p, &l);
	ok(gk_nn_progress_step_seconds(&p) == 30.0, "progress: the first step alone is the rate");
	for (l.step = 2; l.step <= 20; l.step++) {
		l.step_ms = l.step == 5 ? 20000 : 500;
		gk_nn_progress_step(&p, &l);
	}
	l.step = 20;
	/* the last 15 steps (6..20) are all 0.5 s: 180 steps left, 90 s */
	ok(gk_nn_progress_step_seconds(&p) == 0.5, "progress: the median ignores the first and a "
	   "slow step (%g)", gk_nn_progress_step_seconds(&p));
	gk_nn_progress_line(&p, &l, 1000.0 + 30 + 18 * 0.5 + 20, line, sizeof(line));
	ok(strcmp(line, "step 20/200  10%  loss 2.5000  512 tok/s  elapsed 0:59  ETA 1:30") == 0,
	   "progress: the line (%s)", line);
	/* an even window: the mean of the middle two */
	gk_nn_progress_start(&p, 10, 1, 0.25, 0);
	double t[] = {9, 1, 4, 2, 3};
	for (int i = 0; i < 5; i++) {
		l.step_ms = t[i] * 1e3;
		gk_nn_progress_step(&p, &l);
	}
	ok(gk_nn_progress_step_seconds(&p) == 2.5, "progress: median of 1 4 2 3 is 2.5");
	/* 10,000 steps in 2 s: at most one redraw per 0.25 s, and the last */
	gk_nn_progress_start(&p, 10000, 1, 0.25, 0);
	int draws = 0, last = 0;
	for (int64_t s = 1; s <= 10000; s++) {
		int d = gk_nn_progress_due(&p, s, (double)s * 2e-4);
		draws += d;
		last = d;
	}
	ok(draws >= 8 && draws <= 10 && last, "progress: 10,000 steps in 2 s redraw %d times, "
	   "the last step among them", draws);
	/* past an hour */
	gk_nn_progress_start(&p, 100000, 1, 0.25, 0);
	l.step = 2;
	l.step_ms = 100;
	gk_nn_progress_step(&p, &l);
	gk_nn_progress_step(&p, &l);
	gk_nn_progress_line(&p, &l, 3725, line, sizeof(line));
	ok(strstr(line, "elapsed 1:02:05  ETA 2:46:40") != NULL, "progress: hours (%s)", line);
}

int main(void)
{
	progress();
	if (!mkdtemp(dir))
		skip_all("no temporary directory");
	snprintf(bin_path, sizeof(bin_path), "%s/train.bin", dir);
	snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", dir);
	resolve();
	names();
	checks();
	grid_texts();
	if (ok(write_data() == 0, "llm.c token file of %d tokens", TOKENS)) {
		trainer(1, 1.0);
		trainer(2, 1.0);
		/* the norms run 1.5 to 2.6: some steps clipped, some not; and no clip */
		trainer(2, 2.0);
		trainer(1, 0.0);
	}
	sampling();
	unlink(bin_path);
	unlink(cfg_path);
	rmdir(dir);
	return done_testing();
}
