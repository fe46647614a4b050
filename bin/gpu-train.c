/*
 * gpu-train - train a GPT-2 model data-parallel on shards or token files:
 * options in, gk_nn_trainer_* (lib/nn/train.c) does the work, a line or a
 * JSON object per step out.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nn/stop.h"
#include "nn/train.h"

static const char synopsis[] =
	"usage: gpu-train [-qv] [--json] --data SRC [--config FILE | --layers N --hidden N\n"
	"                 --heads N --vocab N --positions N] [--init-from CKPT] [--seed N]\n"
	"                 [--batch B] [--seq T] [--grad-accum A] [--steps N] [--lr LR] ...\n"
	"       gpu-train --eval-only --data SRC [--init-from CKPT | --ckpt-dir DIR --resume]\n"
	"       gpu-train --sample N [--prompt TEXT] [--tokenizer PATH]\n"
	"                 {--init-from CKPT | --ckpt-dir DIR --resume}\n"
	"       gpu-train --dump-data N --data SRC [--batch B] [--seq T] [--vocab N]\n"
	"       gpu-train --trace-report DIR\n";

/* the options every tool has (GK_CLI_LONGOPTS), at the end of "output" */
static const char common[] =
	"  --json                one JSON object per line (start, steps, summary)\n"
	"  -q, --quiet           no per-step lines, no progress line on a terminal\n"
	"  -v, --verbose         accepted, as by every tool (nothing more to say yet)\n"
	"  -h, --help            this help\n"
	"  --version             the version\n";

/* What the command line asks for: the trainer's options and the tool's. */
typedef struct args {
	gk_nn_train_opts o;
	const char *config, *metrics, *prompt, *trace_report, *offload;
	int64_t dump, sample, top_k;
	double temperature;
	gk_comm_setting agree[96]; /* the table's rows with .agree, for the trainer */
	char agree_names[96][32];
	const char *agree_arg[96];  /* ... their arguments as given, or their defaults */
	int agree_resume[96];       /* ... and their resume column */
	const char *arg[128];       /* every row's argument as given, by row */
} args;

static int parse_shuffle(const char *s)
{
	return !strcmp(s, "on") ? 1 : !strcmp(s, "none") ? 0 : -1;
}

static int parse_stop_skip(const char *s)
{
	return !strcmp(s, "stop") ? 0 : !strcmp(s, "skip") ? 1 : -1;
}

static int parse_stop_continue(const char *s)
{
	return !strcmp(s, "stop") ? 0 : !strcmp(s, "continue") ? 1 : -1;
}

static int parse_overlap(const char *s)
{
	return !strcmp(s, "on") ? 1 : !strcmp(s, "off") ? 0 : !strcmp(s, "auto") ? GK_NN_AUTO : -1;
}

/* --reshard-after-forward: whether a block's parameters stay gathered */
static int parse_keep(const char *s)
{
	return !strcmp(s, "yes") ? 0 : !strcmp(s, "no") ? 1 : -1;
}

/* the gradients' communicator: lib/comm's backends less self */
static int parse_comm(const char *s)
{
	int k = gk_comm_backend_parse(s);
	return k == GK_COMM_BACKEND_AUTO || k == GK_COMM_BACKEND_MPI || k == GK_COMM_BACKEND_NCCL ?
		       k : -1;
}

static int parse_timeout(const char *opt, const char *s, void *field, gk_err *err)
{
	double v;
	if (gk_parse_double(s, 0, 1e9, &v, opt, err) < 0)
		return -1;
	if (v > 0 && v < 1)
		return gk_errf(err, "%s %s: 0 (off) or at least 1 second", opt, s);
	v = v > 0 ? v : -1; /* the library reads 0 as its default and < 0 as off */
	memcpy(field, &v, sizeof(v));
	return 0;
}

static int parse_bucket(const char *opt, const char *s, void *field, gk_err *err)
{
	uint64_t v;
	if (gk_parse_size(s, &v, opt, err) < 0)
		return -1;
	/* a bare 25 is 25 bytes: six floats a bucket, a collective per six
	 * gradients */
	if (v < 1024)
		return gk_errf(err, "%s '%s': %" PRIu64 " bytes, below 1K (a size takes a suffix: 25M)",
			       opt, s, v);
	size_t b = (size_t)v;
	memcpy(field, &b, sizeof(b));
	return 0;
}

/* --mem-limit: at least 1M (a bare number is bytes) */
static int parse_mem_limit(const char *opt, const char *s, void *field, gk_err *err)
{
	uint64_t v;
	if (gk_parse_size(s, &v, opt, err) < 0)
		return -1;
	if (v < ((uint64_t)1 << 20))
		return gk_errf(err, "%s '%s': %" PRIu64 " bytes, below 1M (a size takes a suffix: 8G)",
			       opt, s, v);
	memcpy(field, &v, sizeof(v));
	return 0;
}

/* bytes of each moment an offloaded update reads at a time */
static int parse_chunk(const char *opt, const char *s, void *field, gk_err *err)
{
	uint64_t v;
	if (gk_parse_size(s, &v, opt, err) < 0)
		return -1;
	if (v < 1024 || v > ((uint64_t)1 << 40))
		return gk_errf(err, "%s '%s': %" PRIu64 " bytes, not between 1K and 1T", opt, s, v);
	size_t b = (size_t)v;
	memcpy(field, &b, sizeof(b));
	return 0;
}

#define SECTION(title) {.kind = GK_OPTK_SECTION, .help = title}
#define INT(nm, a, f, lo, hi, ag, d, h) \
	{.kind = GK_OPTK_INT, .name = nm, .arg = a, GK_OPTF(args, f), .imin = lo, .imax = hi, \
	 RUN(ag), .def = d, .help = h}
#define NUM(nm, a, f, lo, hi, ag, d, h) \
	{.kind = GK_OPTK_NUM, .name = nm, .arg = a, GK_OPTF(args, f), .min = lo, .max = hi, \
	 RUN(ag), .def = d, .help = h}
#define STR(nm, a, f, nonempty, ag, h) \
	{.kind = GK_OPTK_STR, .name = nm, .arg = a, GK_OPTF(args, f), .set = nonempty, \
	 RUN(ag), .help = h}
#define ENUM(nm, a, f, fn, nms, ag, d, h) \
	{.kind = GK_OPTK_ENUM, .name = nm, .arg = a, GK_OPTF(args, f), .parse = fn, \
	 .names = nms, RUN(ag), .def = d, .help = h}
#define FLAG(nm, f, v, ag, h) \
	{.kind = GK_OPTK_FLAG, .name = nm, GK_OPTF(args, f), .set = v, RUN(ag), .help = h}
#define CUSTOM(nm, a, f, fn, ag, h) \
	{.kind = GK_OPTK_CUSTOM, .name = nm, .arg = a, GK_OPTF(args, f), .custom = fn, \
	 RUN(ag), .help = h}
/*
 * The run column: LOCAL options may differ between the ranks (they change
 * no value and no collective, or only rank 0 acts on them); the others
 * must agree, and a run that resumes a checkpoint may change them (AGREE),
 * may change them with a note naming the old and new value (NOTE), or must
 * keep them (KEEP: the data position counts in their terms).
 */
#define LOCAL 0
#define AGREE 1
#define NOTE 2
#define KEEP 3
#define RUN(ag) .agree = (ag) != LOCAL, \
	.resume = (ag) == NOTE ? GK_OPT_RESUME_NOTE : (ag) == KEEP ? GK_OPT_RESUME_SAME : 0
#define I64MAX (INT64_MAX / 2)
#define XSTR_(x) #x
#define XSTR(x) XSTR_(x) /* a library default, as the table's text */

/*
 * gpu-train's options, stated once: this table is getopt's list, the
 * summary of --help, the parser of every argument, the defaults, and
 * what the ranks compare before step 1. gpu-train(1) documents each row
 * (t7105 checks both ways).
 */
static const gk_optdef options[] = {
	SECTION("model"),
	STR("config", "FILE", config, 0, LOCAL, "GPT-2 config.json (the shape flags override it)"),
	INT("layers", "N", o.shape.layers, 1, GK_NN_MAX_LAYERS, AGREE, NULL, "blocks (n_layer)"),
	INT("hidden", "N", o.shape.hidden, 1, GK_NN_MAX_HIDDEN, AGREE, NULL, "width (n_embd)"),
	INT("heads", "N", o.shape.heads, 1, GK_NN_MAX_HEADS, AGREE, NULL,
	    "attention heads (n_head), dividing --hidden"),
	INT("vocab", "N", o.shape.vocab, 2, GK_NN_MAX_VOCAB, AGREE, NULL,
	    "vocabulary (vocab_size; without any: GPT-2 small on bytes)"),
	INT("positions", "N", o.shape.positions, 1, GK_NN_MAX_POSITIONS, AGREE, NULL,
	    "the longest sequence (n_positions)"),
	STR("init-from", "CKPT", o.init_from, 0, AGREE,
	    "start from a safetensors file, HF directory or step directory"),
	STR("tokenizer", "PATH", o.tokenizer, 1, AGREE,
	    "GPT-2 BPE: tokenizer.json or a directory (default: the checkpoint's)"),
	INT("seed", "N", o.seed, 0, INT64_MAX, KEEP, "1337",
	    "initialisation, shuffle and sampling seed"),
	SECTION("data"),
	STR("data", "SRC", o.data, 0, AGREE,
	    "shards ('train-{000000..000031}.tar', 'shards/*.tar', a directory, a manifest) or .bin token files"),
	STR("val-data", "SRC", o.val_data, 0, AGREE, "data for --eval-every and the end of the run"),
	ENUM("shuffle", "on|none", o.shuffle, parse_shuffle, "on or none", KEEP, "on",
	     "shard and window shuffle"),
	INT("eot", "ID", o.eot, 0, INT32_MAX, NOTE, NULL,
	    "end-of-text token between documents (default vocab - 1)"),
	ENUM("bad-sample", "stop|skip", o.skip_bad, parse_stop_skip, "not one of stop skip", NOTE,
	     "stop", "a corrupt sample stops the run or is skipped and counted"),
	INT("dump-data", "N", dump, 1, 1000000, LOCAL, NULL,
	    "print each rank's first N micro-batches as JSON and exit"),
	SECTION("step"),
	{.kind = GK_OPTK_INT, .name = "batch", .short_name = 'b', .arg = "B", GK_OPTF(args, o.batch),
	 .imin = 1, .imax = 1 << 20, RUN(NOTE), .def = "4",
	 .help = "sequences per micro-batch per rank"},
	{.kind = GK_OPTK_INT, .name = "seq", .short_name = 't', .arg = "T", GK_OPTF(args, o.seq),
	 .imin = 1, .imax = 1 << 20, RUN(NOTE),
	 .help = "tokens per sequence (default: the model's positions)"},
	INT("grad-accum", "A", o.grad_accum, 1, 1 << 20, NOTE, "1", "micro-batches per step"),
	ENUM("recompute", "MODE", o.recompute, gk_nn_recompute_parse, "none, gelu or layer", LOCAL,
	     "none", "recompute in backward: none, gelu or layer"),
	INT("threads", "N", o.threads, 1, 4096, LOCAL, NULL,
	    "compute threads (default: the CPUs this rank may use)"),
	ENUM("device", "KIND", o.device, gk_nn_device_parse, "cpu, cuda or auto", NOTE, "cpu",
	     "cpu, cuda or auto (cuda when every rank has a GPU)"),
	ENUM("precision", "KIND", o.precision, gk_nn_precision_parse, "bf16, tf32 or fp32", NOTE,
	     "bf16", "on a GPU: bf16, tf32 or fp32"),
	FLAG("force", o.force, 1, AGREE,
	     "allocate even when the memory check says the run does not fit"),
	CUSTOM("mem-limit", "SIZE", o.mem_limit, parse_mem_limit, LOCAL,
	       "refuse a run whose accounting exceeds SIZE a rank"),
	SECTION("optimizer"),
	INT("steps", "N", o.steps, 0, I64MAX, NOTE, "1000",
	    "steps to train, the schedule's length (0: none)"),
	INT("until", "N", o.until, 1, I64MAX, AGREE, NULL,
	    "stop after step N (checkpointing), keeping the schedule"),
	NUM("lr", "LR", o.sched.lr, 0, 10, NOTE, "6e-4", "peak learning rate"),
	NUM("min-lr", "LR", o.sched.min_lr, 0, 10, NOTE, NULL,
	    "final learning rate of cosine/linear (default lr/10)"),
	INT("warmup", "N", o.sched.warmup, 0, I64MAX, NOTE, "0", "linear warmup steps"),
	ENUM("schedule", "KIND", o.sched.kind, gk_nn_sched_parse, "cosine, linear or constant",
	     NOTE, "cosine", "cosine, linear or constant"),
	NUM("clip", "X", o.clip, 0, 1e30, NOTE, "1.0", "global gradient-norm clip, 0 off"),
	NUM("beta1", "X", o.adamw.beta1, 0, 0.999999, NOTE, "0.9", "AdamW's beta1"),
	NUM("beta2", "X", o.adamw.beta2, 0, 0.999999, NOTE, "0.95", "AdamW's beta2"),
	NUM("eps", "X", o.adamw.eps, 0, 1, NOTE, "1e-8", "AdamW's epsilon, above 0"),
	NUM("weight-decay", "X", o.adamw.weight_decay, 0, 10, NOTE, "0.1",
	    "AdamW's decoupled weight decay (2-D tensors)"),
	FLAG("skip-nonfinite", o.skip_nonfinite, 1, NOTE,
	     "skip steps whose loss or gradient is NaN/Inf"),
	STR("offload", "WHAT", offload, 1, LOCAL,
	    "optimizer:DIR: AdamW's moments in files under DIR, streamed\n"
	    "through the update (none: in memory)"),
	CUSTOM("offload-chunk", "SIZE", o.offload_chunk, parse_chunk, LOCAL,
	       "bytes of each moment an offloaded update holds (default 4M)"),
	SECTION("parallel"),
	INT("zero", "0|1|2|3", o.zero, 0, 3, NOTE, "0",
	    "1: shard the optimizer state over the ranks; 2: and the\n"
	    "gradients; 3: and the parameters"),
	ENUM("reshard-after-forward", "yes|no", o.keep_gathered, parse_keep, "yes or no", AGREE,
	     "yes", "--zero 3: release a block's parameters after its forward\n"
	     "(yes) or keep them until its backward (no)"),
	INT("tp", "N", o.tp, 1, GK_NN_MAX_HEADS, NOTE, "1",
	    "tensor-parallel ranks per group (Megatron's split; the CPU)"),
	FLAG("sequence-parallel", o.seq_par, 1, AGREE,
	     "--tp: split the LayerNorm and residual regions' activations\n"
	     "by sequence positions over the tensor group"),
	INT("pp", "N", o.pp, 1, 1 << 16, NOTE, "1",
	    "pipeline stages, contiguous blocks of layers (the CPU)"),
	ENUM("pp-schedule", "KIND", o.pp_sched, gk_nn_pp_sched_parse,
	     "1f1b, gpipe or interleaved", NOTE, "1f1b",
	     "the pipeline's schedule: 1f1b, gpipe or interleaved"),
	INT("pp-chunks", "V", o.pp_chunks, 1, 1 << 16, NOTE, "1",
	    "--pp-schedule interleaved: model chunks a stage (2 or more)"),
	ENUM("compress", "KIND", o.compress, gk_comm_compress_parse, "none, bf16, f16 or int8",
	     NOTE, "none", "none, bf16, f16 or int8 gradients on the wire"),
	CUSTOM("bucket", "SIZE", o.bucket_bytes, parse_bucket, AGREE,
	       "gradient bucket size (default 25M)"),
	ENUM("overlap", "WHEN", o.overlap, parse_overlap, "auto, on or off", AGREE, "auto",
	     "allreduce during backward: auto (a GPU, several hosts, or\n"
	     "a CPU the ranks leave free), on or off (after backward)"),
	FLAG("no-overlap", o.overlap, 0, LOCAL, "--overlap off"),
	ENUM("comm", "KIND", o.comm, parse_comm, "auto, nccl or mpi", AGREE, "auto",
	     "a GPU's gradients: auto (NCCL on the device when there is\n"
	     "more than one rank), nccl or mpi (through host memory)"),
	CUSTOM("timeout", "SECONDS", o.timeout, parse_timeout, AGREE,
	       "fail a collective with no progress for this long, 0 off (default 600)"),
	STR("trace-dir", "DIR", o.trace_dir, 1, LOCAL,
	    "dump each rank's last collectives here on a hang, a failure\n"
	    "or SIGUSR2 (see HANGS in gpu-train(1))"),
	STR("trace-report", "DIR", trace_report, 1, LOCAL,
	    "read the dumps in DIR, say which rank and collective hang, exit"),
	SECTION("checkpoints"),
	STR("ckpt-dir", "DIR", o.ckpt_dir, 1, AGREE, "where step directories go"),
	INT("ckpt-every", "N", o.ckpt_every, 1, I64MAX, AGREE, NULL,
	    "checkpoint every N steps (and always at the end)"),
	FLAG("resume", o.resume, 1, AGREE, "continue from DIR's latest checkpoint, if there is one"),
	FLAG("ckpt-gather", o.ckpt_gather, 1, AGREE,
	     "--zero 3: rank 0 gathers and writes model.safetensors\n"
	     "(default: each rank writes its shard; see ckpt-merge)"),
	ENUM("ckpt-error", "stop|continue", o.ckpt_continue, parse_stop_continue,
	     "not one of stop continue", AGREE, "stop",
	     "a failed checkpoint (disk full) stops the run, or training goes on"),
	SECTION("evaluation and sampling"),
	INT("eval-every", "N", o.eval_every, 1, I64MAX, AGREE, NULL,
	    "evaluate on --val-data every N steps"),
	INT("eval-batches", "N", o.eval_batches, 0, I64MAX, AGREE, "0",
	    "micro-batches per evaluation, 0 all"),
	FLAG("eval-only", o.eval_only, 1, AGREE,
	     "print the mean loss of the model on --val-data or --data"),
	INT("sample", "N", sample, 1, 1 << 20, AGREE, NULL,
	    "generate N tokens at the end (without --data: of a checkpoint)"),
	STR("prompt", "TEXT", prompt, 1, LOCAL,
	    "--sample after TEXT (encoded by the tokenizer, or its bytes)"),
	NUM("temperature", "X", temperature, 0, 100, LOCAL, "1.0", "sampling temperature, 0 greedy"),
	INT("top-k", "K", top_k, 0, 1 << 24, LOCAL, "0",
	    "sample among the K most likely tokens, 0 all"),
	SECTION("output"),
	STR("metrics", "FILE", metrics, 1, LOCAL,
	    "rank 0 rewrites FILE in Prometheus' text format (at most 1/s)"),
	INT("straggler-every", "N", o.straggler_every, 0, I64MAX, AGREE, XSTR(GK_NN_STRAGGLER_EVERY),
	    "compare the ranks' step times every N steps, 0 never"),
	NUM("straggler-factor", "X", o.straggler_factor, 1.01, 100, LOCAL,
	    XSTR(GK_NN_STRAGGLER_FACTOR),
	    "warn of a rank this many times slower than the median"),
	{.kind = GK_OPTK_END},
};
_Static_assert(GK_ARRAY_SIZE(options) <= GK_ARRAY_SIZE(((args *)0)->arg) &&
		       GK_ARRAY_SIZE(options) <= GK_ARRAY_SIZE(((args *)0)->agree),
	       "args' per-row arrays hold every row of the table");

static gk_cli cli;

typedef struct out_ctx {
	const gk_nn_train_mem *mem;
	int64_t steps;
	int world;
	const char *metrics_path;  /* --metrics, or NULL */
	gk_metrics *metrics;
	int metrics_failing;       /* warned; quiet until a write succeeds */
	gk_nn_train_log last;      /* the last step's, once have_last, with
				    * the last evaluation's val_loss */
	int have_last;
	double last_time;          /* when it ended, in Unix time */
	double written_at;         /* the last rewrite (gk_now), 0: none */
	int stale;                 /* a step since then is not in the file */
	gk_nn_ckpt_stats ckpt;     /* rank 0: the checkpoints so far */
	int skip_bad; /* report bad_samples */
	gk_nn_progress prog;       /* the terminal's line, when gk_status_on() */
	int64_t drawn_step;        /* the step it shows */
} out_ctx;

static void emit(json_t *o)
{
	/* a line buffered stdout (a terminal, a launcher's pty) writes in
	 * the dump: keep that error's errno for gk_cli_finish's message */
	gk_err err;
	if (gk_json_dump(stdout, o, 0, &err) < 0 && !cli.out_errno)
		cli.out_errno = err.sys;
	gk_cli_flush(&cli);
	json_decref(o);
}

static void emit_to(json_t *o, void *ctx)
{
	(void)ctx;
	emit(o);
}

/*
 * Rewrite the metrics: after a step at most once a second (each rewrite
 * is an atomic replace with fsyncs, about 0.5 ms here: a tiny model's
 * 3,000 steps ran 4x slower rewriting after each; a scraper polls every
 * 15 s or so), after a checkpoint's commit or failure, and after the
 * last step. A failed write does not stop the run: it is reported once,
 * and again only after a write has succeeded in between.
 */
static void write_metrics(out_ctx *c)
{
	gk_err err = {0};
	if (!c->metrics || !c->have_last)
		return;
	c->written_at = gk_now();
	c->stale = 0;
	if (gk_nn_train_metrics(c->metrics, &c->last, c->mem, c->world, c->last_time, &err) < 0 ||
	    gk_nn_train_ckpt_metrics(c->metrics, &c->ckpt, &err) < 0 ||
	    gk_metrics_write(c->metrics, c->metrics_path, &err) < 0) {
		if (!c->metrics_failing) {
			gk_status_pause();
			gk_cli_warn(&cli, "%s", err.msg);
			gk_status_resume();
		}
		c->metrics_failing = 1;
		return;
	}
	c->metrics_failing = 0;
}

/* JSON has no NaN or infinity: those become null. */
static json_t *jnum(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/* The progress line after step l, when it is due (at most 4 a second). */
static void draw_progress(out_ctx *c, const gk_nn_train_log *l, int force)
{
	double now = gk_now();
	char line[256];
	if (!gk_status_on() || !(gk_nn_progress_due(&c->prog, l->step, now) || force))
		return;
	gk_status_draw(gk_nn_progress_line(&c->prog, l, now, line, sizeof(line)));
	c->drawn_step = l->step;
}

static void on_step(const gk_nn_train_log *l, void *ctx)
{
	out_ctx *c = ctx;
	if (gk_status_on())
		gk_nn_progress_step(&c->prog, l);
	double val = c->have_last ? c->last.val_loss : NAN; /* the last evaluation's */
	c->last = *l;
	if (isnan(l->val_loss))
		c->last.val_loss = val;
	c->last_time = (double)time(NULL);
	c->have_last = 1;
	c->stale = 1;
	if (c->written_at == 0 || gk_now() - c->written_at >= 1.0)
		write_metrics(c);
	if (cli.json) {
		json_t *o = json_pack("{s:s,s:I,s:o,s:f,s:o,s:I,s:f,s:f,s:f,s:f,s:f,s:b}",
				      "event", "step", "step", (json_int_t)l->step, "loss",
				      jnum(l->loss), "lr", l->lr, "grad_norm", jnum(l->grad_norm),
				      "tokens", (json_int_t)l->tokens, "tokens_per_s",
				      l->tokens_per_s, "step_ms", l->step_ms, "comm_ms", l->comm_ms,
				      "exposed_comm_ms", l->exposed_comm_ms, "gflops", l->gflops,
				      "skipped", l->skipped);
		if (!isnan(l->val_loss))
			json_object_set_new(o, "val_loss", jnum(l->val_loss));
		if (c->skip_bad)
			json_object_set_new(o, "bad_samples", json_integer(l->bad_samples));
		if (l->tp_bytes)
			json_object_set_new(o, "tp_comm_bytes", json_integer((json_int_t)l->tp_bytes));
		if (l->gathers) {
			json_object_set_new(o, "param_gathers", json_integer((json_int_t)l->gathers));
			json_object_set_new(o, "param_prefetched",
					    json_integer((json_int_t)l->prefetched));
		}
		if (!isnan(l->pp_bubble)) {
			json_object_set_new(o, "pp_comm_bytes", json_integer((json_int_t)l->pp_bytes));
			json_object_set_new(o, "pp_bubble", jnum(l->pp_bubble));
			json_t *st = json_array();
			for (int k = 0; k < l->pp_stages; k++) {
				const gk_nn_pp_stage *g = &l->pp_stage[k];
				json_t *e = json_pack("{s:i,s:f,s:f,s:o,s:I,s:I}", "stage", k,
						      "busy_ms", g->busy_ms, "idle_ms", g->idle_ms,
						      "bubble", jnum(g->bubble), "pp_comm_bytes",
						      (json_int_t)g->pp_bytes, "activations",
						      (json_int_t)g->activations);
				if (l->tp_bytes)
					json_object_set_new(e, "tp_comm_bytes",
							    json_integer((json_int_t)g->tp_bytes));
				json_array_append_new(st, e);
			}
			json_object_set_new(o, "pp_stages", st);
		}
		gk_nn_report_mem(NULL, c->mem, o);
		if (gk_status_out_tty())
			gk_status_clear();
		emit(o);
		draw_progress(c, l, 0);
		return;
	}
	/* on a terminal the progress line stands for the step lines, but
	 * for a step with news */
	if (cli.quiet || (gk_status_on() && gk_status_out_tty() && isnan(l->val_loss) && !l->skipped)) {
		draw_progress(c, l, 0);
		return;
	}
	if (gk_status_out_tty())
		gk_status_clear();
	printf("step %5" PRId64 "/%" PRId64 "  loss %.4f  lr %.3e  norm %.4f  %.0f tok/s  %.1f ms"
	       "  (comm %.1f, exposed %.1f)%s", l->step, c->steps, l->loss, l->lr, l->grad_norm,
	       l->tokens_per_s, l->step_ms, l->comm_ms, l->exposed_comm_ms,
	       l->skipped ? "  skipped: non-finite" : "");
	if (!isnan(l->val_loss))
		printf("  val %.4f", l->val_loss);
	printf("\n");
	gk_cli_flush(&cli);
	draw_progress(c, l, 0);
}

static void on_ckpt(int64_t step, double seconds, void *ctx)
{
	out_ctx *c = ctx;
	c->ckpt.step = step;
	c->ckpt.seconds = seconds;
	c->ckpt.when = (double)time(NULL);
	write_metrics(c);
	if (gk_status_out_tty())
		gk_status_pause();
	if (cli.json) {
		emit(json_pack("{s:s,s:I,s:f}", "event", "checkpoint", "step", (json_int_t)step,
			       "seconds", seconds));
	} else if (!cli.quiet) {
		printf("checkpoint step %" PRId64 " committed (%.2f s)\n", step, seconds);
		gk_cli_flush(&cli);
	}
	if (gk_status_out_tty())
		gk_status_resume();
}

static void on_ckpt_failed(int64_t step, const gk_err *why, void *ctx)
{
	out_ctx *c = ctx;
	c->ckpt.failed++;
	write_metrics(c);
	gk_status_pause();
	gk_cli_warn(&cli, "checkpoint step %" PRId64 " not written, training goes on: %s",
		    step, why->msg);
	gk_status_resume();
}

/* An exchange of the step's parts: its JSON line, its metrics, and the
 * warning of a straggler. */
static void on_stragglers(const gk_nn_straggler_report *r, void *ctx)
{
	out_ctx *c = ctx;
	gk_err err = {0};
	if (c->metrics && gk_nn_straggler_metrics(c->metrics, r, &err) < 0 && !c->metrics_failing) {
		gk_cli_warn(&cli, "%s", err.msg);
		c->metrics_failing = 1;
	}
	c->stale = 1;
	if (cli.json) {
		json_t *o = gk_nn_straggler_json(r);
		if (o) {
			if (gk_status_out_tty())
				gk_status_clear();
			emit(o);
		}
	}
	if (r->slow >= 0) {
		char w[512];
		gk_status_pause();
		gk_cli_warn(&cli, "%s", gk_nn_straggler_warning(r, w, sizeof(w)));
		gk_status_resume();
	}
}

/*
 * A problem in the shards the data reader worked around (an index that is
 * not its shard's, a shard without its end blocks): every rank reads the
 * same shards the same way, so the first rank says it, and each thing
 * once (the validation set is opened again at every evaluation; the last
 * 256 notes are remembered by hash). Called from the prefetch thread too.
 */
static void data_note(void *ctx, const char *msg)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t given[256];
	static size_t n;
	uint64_t h = gk_xxh3(msg, strlen(msg));
	int seen = 0;
	(void)ctx;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n && i < GK_ARRAY_SIZE(given) && !seen; i++)
		seen = given[i] == h;
	if (!seen)
		given[n++ % GK_ARRAY_SIZE(given)] = h;
	pthread_mutex_unlock(&mu);
	if (!seen && !cli.silent_usage) {
		gk_status_pause();
		fprintf(stderr, "gpu-train: note: %s\n", msg);
		gk_status_resume();
	}
}

/*
 * The options, and every usage error (exit 2) that needs no file: the
 * table's defaults, each argument through its row, the checks that
 * involve more than one option, and the table's settings the ranks
 * compare.
 */
static void parse_args(int argc, char **argv, args *a)
{
	memset(a, 0, sizeof(*a));
	a->o.eot = -1;          /* vocab - 1, once the vocabulary is known */
	a->o.sched.min_lr = -1; /* lr / 10 */
	optind = gk_optable_parse(&cli, options, 0, a, argc, argv, a->arg);
	if (optind < argc)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
	if (a->trace_report) {
		/* it reads dumps: nothing trains, and no other option means anything */
		for (size_t i = 0; options[i].kind != GK_OPTK_END; i++)
			if (a->arg[i] && strcmp(options[i].name, "trace-report") != 0)
				gk_cli_usage_error(&cli, "--trace-report reads the dumps of a run: "
						   "not with --%s", options[i].name);
		return;
	}
	const char *eval_src = a->o.val_data ? a->o.val_data : a->o.data;
	int steps_given = 0;
	for (size_t i = 0; options[i].kind != GK_OPTK_END; i++)
		steps_given |= options[i].name && !strcmp(options[i].name, "steps") && a->arg[i];
	if (a->prompt && !a->sample)
		gk_cli_usage_error(&cli, "--prompt starts the text of --sample: give --sample N");
	/* a checkpoint's sample needs no data: nothing trains */
	if (!a->o.data && !a->o.eval_only && a->sample && (a->o.init_from || a->o.resume)) {
		if (steps_given && a->o.steps > 0)
			gk_cli_usage_error(&cli, "--steps %" PRId64 " trains: it needs --data (without "
					   "it, --sample samples the checkpoint)", a->o.steps);
		a->o.steps = 0;
	}
	if (!a->o.data && !(a->o.eval_only && eval_src) && !(a->o.steps == 0 && a->sample))
		gk_cli_usage_error(&cli, "--data is required%s", a->sample ? " (or a checkpoint to "
				   "sample: --init-from CKPT, or --ckpt-dir DIR --resume)" : "");
	if (a->o.steps == 0 && !a->o.eval_only && !a->dump && a->o.ckpt_dir && !a->o.resume)
		gk_cli_usage_error(&cli, "--steps 0 trains nothing and writes no checkpoint: "
				   "--ckpt-dir is read with --resume (or name a step with --init-from)");
	if (a->o.steps == 0 && !a->o.eval_only && !a->dump && !a->sample && !a->o.val_data)
		gk_cli_usage_error(&cli, "--steps 0 trains nothing: it evaluates --val-data, or "
				   "samples with --sample N (or use --eval-only)");
	if (a->o.resume && !a->o.ckpt_dir)
		gk_cli_usage_error(&cli, "--resume needs --ckpt-dir");
	if (a->o.eval_only && a->o.init_from && a->o.resume)
		gk_cli_usage_error(&cli, "--eval-only evaluates one model: --init-from or "
				   "--ckpt-dir --resume, not both");
	if (a->o.eval_only && a->o.ckpt_dir && !a->o.resume)
		gk_cli_usage_error(&cli, "--eval-only --ckpt-dir evaluates the directory's latest "
				   "checkpoint with --resume (or name a step with --init-from)");
	if (a->o.eval_only && a->dump)
		gk_cli_usage_error(&cli, "--eval-only and --dump-data: one or the other");
	/* it reads no checkpoint: from one, it would seem to say where a
	 * resumed run goes on, and it does not */
	if (a->dump && (a->o.init_from || a->o.ckpt_dir || a->o.resume))
		gk_cli_usage_error(&cli, "--dump-data prints the data from its start, without a "
				   "model: not with %s", a->o.init_from ? "--init-from" :
				   a->o.resume ? "--resume" : "--ckpt-dir");
	if (a->metrics && (a->o.eval_only || a->dump || a->o.steps == 0))
		gk_cli_usage_error(&cli, "--metrics reports training: not with %s",
				   a->o.eval_only ? "--eval-only" : a->dump ? "--dump-data" :
				   "--steps 0");
	if (a->o.comm == GK_COMM_BACKEND_NCCL && a->o.device == GK_NN_CPU)
		gk_cli_usage_error(&cli, "--comm nccl reduces a GPU's gradients: it needs "
				   "--device cuda or auto");
	if (a->offload && !strcmp(a->offload, "optimizer"))
		a->o.offload_host = 1;
	else if (a->offload && strcmp(a->offload, "none")) {
		if (strncmp(a->offload, "optimizer:", 10) || !a->offload[10])
			gk_cli_usage_error(&cli, "--offload '%s': not none, optimizer or optimizer:DIR",
					   a->offload);
		a->o.offload_dir = a->offload + 10;
	}
	/* which parallelism and offload settings go together (the trainer
	 * checks again once --device auto has chosen) */
	gk_err err = {0};
	int cuda = a->o.device == GK_NN_AUTO ? -1 : a->o.device == GK_NN_CUDA;
	a->o.sample = a->sample != 0;
	if (gk_nn_train_check(&a->o, cuda, &err) < 0)
		gk_cli_usage_error(&cli, "%s", err.msg);
	if (a->o.adamw.eps <= 0)
		gk_cli_usage_error(&cli, "--eps must be above 0: with 0 a parameter that never had "
				   "a gradient is updated by 0/0");
	if (a->o.sched.min_lr > a->o.sched.lr)
		gk_cli_usage_error(&cli, "--min-lr %g is above --lr %g: the schedule would climb",
				   a->o.sched.min_lr, a->o.sched.lr);
	if (a->o.eval_every && !a->o.val_data)
		gk_cli_usage_error(&cli, "--eval-every needs --val-data");
	/* a stop meant to be resumed, with nothing kept to resume from */
	if (a->o.until && a->o.until < a->o.steps && !a->o.ckpt_dir && !a->o.eval_only && !a->dump &&
	    !cli.silent_usage)
		gk_cli_warn(&cli, "--until %" PRId64 " without --ckpt-dir: the run stops at step %"
			    PRId64 " of %" PRId64 " and keeps no checkpoint to resume from",
			    a->o.until, a->o.until, a->o.steps);
	for (size_t i = 0; options[i].kind != GK_OPTK_END; i++) {
		const gk_optdef *d = &options[i];
		if (d->kind == GK_OPTK_SECTION || !d->agree)
			continue;
		size_t k = a->o.nagree++;
		snprintf(a->agree_names[k], sizeof(a->agree_names[k]), "--%s", d->name);
		a->agree[k] = (gk_comm_setting){a->agree_names[k], gk_optable_value(d, a)};
		a->agree_arg[k] = a->arg[i] ? a->arg[i] : d->def ? d->def : "";
		a->agree_resume[k] = d->resume;
	}
	a->o.agree = a->agree;
	a->o.agree_arg = a->agree_arg;
	a->o.agree_resume = a->agree_resume;
}

/* The stop protocol (lib/nn/stop.c), and the tests' hooks. */
static int catch_signals(gk_nn_train_opts *o, gk_err *err)
{
	if (gk_nn_stop_catch(o, err) < 0)
		return -1;
	int g = GK_NN_STOP_GRACE_S;
	int rc = gk_nn_train_test_env(o, &g, err);
	gk_nn_stop_grace((unsigned)g);
	return rc;
}

/* On the terminal, until the start lines: what the first seconds do. */
static void say_building(const args *a)
{
	char what[300];
	const gk_nn_train_opts *o = &a->o;
	if (o->resume)
		snprintf(what, sizeof(what), "gpu-train: building the model, to resume from %s...",
			 o->ckpt_dir);
	else if (o->init_from)
		snprintf(what, sizeof(what), "gpu-train: loading the model from %s...", o->init_from);
	else if (o->have_config)
		snprintf(what, sizeof(what), "gpu-train: building the model (%" PRId64 " layers, "
			 "hidden %" PRId64 ")%s...", o->cfg.layers, o->cfg.hidden,
			 o->data && !o->eval_only ? " and opening the data" : "");
	else
		snprintf(what, sizeof(what), "gpu-train: building the model...");
	gk_status_draw(what);
}

/* Rank 0: the notes on stderr, the model and its memory on stdout. */
static void print_start(gk_nn_trainer *t)
{
	int rank = gk_nn_trainer_rank(t);
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	gk_status_clear(); /* "building the model..." */
	if (rank == 0)
		gk_nn_report_notes(stderr, t);
	if (rank == 0) {
		if (cli.json) {
			json_t *j = gk_nn_report_start_json(t);
			if (j)
				emit(j);
		} else if (!cli.quiet) {
			gk_nn_report_start_text(stdout, t);
		}
	}
	/* someone at a terminal may expect a run to leave something behind */
	if (rank == 0 && !r->ckpt_dir && !r->eval_only && r->steps > 0 && isatty(STDERR_FILENO))
		fprintf(stderr, "gpu-train: note: no --ckpt-dir: this run keeps no checkpoint, and its "
			"model is gone at exit\n");
}

/* --eval-only: the mean loss of the model on the data. */
static int run_eval(gk_nn_trainer *t, const args *a, gk_err *err)
{
	int rank = gk_nn_trainer_rank(t);
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	double loss;
	int64_t nb;
	const char *src = a->o.val_data ? a->o.val_data : a->o.data; /* --steps 0: val_data */
	if (gk_nn_trainer_eval(t, src, a->o.eval_batches, &loss, &nb, err) < 0)
		return -1;
	/* which checkpoint: a directory's latest may not be what the user thinks */
	const char *from = gk_nn_trainer_model_from(t);
	if (rank == 0) {
		if (cli.json)
			emit(json_pack("{s:s,s:o,s:I,s:I,s:s?}", "event", "eval", "loss", jnum(loss),
				       "batches", (json_int_t)nb, "tokens",
				       (json_int_t)(nb * r->batch * r->seq), "model", from));
		else
			printf("loss %.6f over %" PRId64 " micro-batches of %d x %d tokens (%s)\n",
			       loss, nb, r->batch, r->seq, from ? from : "the seeded initialisation");
	}
	/* printed for the record, but a model that gives NaN is broken */
	if (!isfinite(loss)) {
		gk_errf(err, "the loss is %s: the model's parameters are not finite",
			isnan(loss) ? "NaN" : "infinite");
		return -1;
	}
	return 0;
}

/*
 * Training to the end, a signal or a failure; the summary. *rc is the
 * exit status of a run that did not fail: 0, 130 after SIGINT, 1 when the
 * last checkpoint was lost (said here, on rank 0). A signal also cancels
 * --sample.
 */
static int run_train(gk_nn_trainer *t, args *a, int *rc, gk_err *err)
{
	int rank = gk_nn_trainer_rank(t);
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	const gk_nn_train_mem *mem = gk_nn_trainer_mem(t);
	out_ctx ctx = {.mem = mem, .steps = a->o.steps, .world = gk_nn_trainer_world(t),
		       .metrics_path = a->metrics, .skip_bad = a->o.skip_bad};
	if (a->metrics && rank == 0 && gk_metrics_new(&ctx.metrics, NULL, err) < 0)
		return -1;
	gk_nn_train_hooks h = {on_step, on_ckpt, &ctx, on_ckpt_failed, on_stragglers};
	gk_nn_train_summary s;
	int64_t end = r->until > 0 && r->until < r->steps ? r->until : r->steps;
	gk_nn_progress_start(&ctx.prog, end, gk_nn_trainer_step_tokens(t), 0.25, gk_now());
	if (gk_status_on()) {
		char first[128];
		snprintf(first, sizeof(first), "step %" PRId64 "/%" PRId64 "  first step...",
			 gk_nn_trainer_step(t), end);
		gk_status_draw(first);
	}
	int run = gk_nn_trainer_run(t, &h, &s, err);
	/* the line as the run left it (a signal may have come between two
	 * redraws), and its newline; nothing when no step was done */
	if (ctx.have_last && ctx.drawn_step != ctx.last.step)
		draw_progress(&ctx, &ctx.last, 1);
	if (ctx.have_last)
		gk_status_end();
	else
		gk_status_clear();
	if (ctx.stale)
		write_metrics(&ctx);
	gk_metrics_free(ctx.metrics);
	if (run < 0)
		return -1;
	if (rank == 0) {
		/* a resumed checkpoint at or past the end: not a run that trained */
		int by_until = r->until > 0 && r->until < r->steps;
		if (!s.stopped && s.steps == 0)
			fprintf(stderr, "gpu-train: note: nothing to train: the checkpoint is at step %"
				PRId64 ", and this run ends at step %" PRId64 " (%s)\n", s.step,
				by_until ? r->until : r->steps, by_until ? "--until" : "--steps");
		if (cli.json) {
			json_t *j = gk_nn_report_summary_json(t, &s);
			if (j)
				emit(j);
		} else if (!cli.quiet) {
			gk_nn_report_summary_text(stdout, t, &s);
		}
	}
	*rc = s.stopped == 2 ? 130 : 0;
	if (s.stopped)
		a->sample = 0; /* a signal asks for a quick exit */
	/* --ckpt-error continue trains on; but a run whose last
	 * checkpoint failed ends without its model on disk */
	if (*rc == 0 && s.ckpt_lost) {
		/* every rank knows (they agreed on the failure): a clean exit */
		gk_errf(err, "the last checkpoint (step %" PRId64 ") was not written: "
			"the model trained since the one before is lost", s.ckpt_lost);
		*rc = rank == 0 ? gk_cli_fail(&cli, err) : 1;
	}
	return 0;
}

/* --sample: rank 0 generates and prints, as text when the model has a
 * tokenizer or the byte vocabulary, else as ids; every rank calls it
 * (ZeRO-3's ranks send rank 0 their parameters). */
static int print_sample(gk_nn_trainer *t, const args *a, gk_err *err)
{
	gk_nn_trainer_sampled s;
	if (gk_nn_trainer_sample(t, a->prompt, (int)a->sample, a->temperature, (int)a->top_k, &s,
				 err) < 0)
		return -1;
	if (gk_nn_trainer_rank(t) != 0)
		return 0;
	if (cli.json) {
		json_t *j = json_object(), *jids = json_array();
		json_object_set_new(j, "event", json_string("sample"));
		for (size_t i = 0; i < s.n; i++)
			json_array_append_new(jids, json_integer(s.ids[i]));
		json_object_set_new(j, "tokens", jids);
		if (s.prompt) {
			json_t *pids = json_array();
			for (int i = 0; i < s.nprompt; i++)
				json_array_append_new(pids, json_integer(s.prompt[i]));
			json_object_set_new(j, "prompt", pids);
		}
		if (s.is_text) {
			/* bytes that are not UTF-8 become U+FFFD */
			size_t ul;
			char *u = gk_utf8_lossy(s.text ? s.text : "", s.len, &ul);
			json_t *tx = u ? json_stringn(u, ul) : NULL;
			if (tx)
				json_object_set_new(j, "text", tx);
			free(u);
		}
		emit(j);
	} else {
		if (s.len)
			fwrite(s.text, 1, s.len, stdout);
		putchar('\n');
	}
	gk_nn_trainer_sample_free(&s);
	return 0;
}

int main(int argc, char **argv)
{
	gk_err err = {0};
	args a;
	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "gpu-train", usage ? usage : synopsis);
	parse_args(argc, argv, &a);
	if (a.trace_report) {
		char *text;
		if (gk_comm_trace_report(a.trace_report, &text, &err) < 0)
			return gk_cli_fail(&cli, &err);
		fputs(text, stdout);
		free(text);
		return gk_cli_finish(&cli, 0);
	}
	/* the trainer makes a failure here the whole job's */
	gk_err early = {0};
	int r = gk_nn_train_resolve(&a.o, a.config, &early);
	if (r == -2)
		gk_cli_usage_error(&cli, "%s", early.msg);
	if (r < 0) {
		if (a.dump)
			return gk_cli_fail(&cli, &early);
		a.o.failed = &early;
	}
	if (!a.o.failed && a.metrics && gk_metrics_check(a.metrics, &early) < 0)
		a.o.failed = &early;
	if (a.dump) {
		if (!a.o.seq)
			gk_cli_usage_error(&cli, "--dump-data needs --seq or a model shape");
		gk_nn_data_opts d;
		a.o.data_note = data_note;
		gk_nn_train_data_opts(&a.o, a.o.have_config ? a.o.cfg.vocab : GK_NN_BYTE_VOCAB, &d);
		r = gk_nn_train_dump_data(&a.o, &d, a.dump, emit_to, NULL, &err);
		if (r == -2)
			gk_cli_usage_error(&cli, "%s", err.msg);
		return gk_cli_finish(&cli, r < 0 ? gk_cli_fail(&cli, &err) : 0);
	}
	/* the launcher's first rank says a signal's note for the job, from
	 * the start (the trainer's setup has collectives a rank can die in) */
	gk_nn_stop_quiet(cli.silent_usage);
	if (catch_signals(&a.o, &err) < 0)
		return gk_cli_fail(&cli, &err);
	a.o.data_note = data_note;
	gk_nn_trainer *t = NULL;
	int rc = 0;
	/* a GPT-2 small takes seconds to build, its first step more */
	gk_status_start(!cli.quiet && !cli.silent_usage);
	say_building(&a);
	if (gk_nn_trainer_new(&t, &a.o, &err) < 0)
		goto fail;
	if (gk_nn_trainer_rank(t) != 0)
		gk_status_stop(); /* rank 0 draws it for the job */
	gk_nn_stop_quiet(gk_nn_trainer_rank(t) != 0);
	print_start(t);
	if (a.o.eval_only || a.o.steps == 0) {
		/* --steps 0: the model as built or loaded, evaluated on
		 * --val-data and sampled; nothing trained, nothing written */
		gk_nn_stop_nothing_to_save();
		if ((a.o.eval_only || a.o.val_data) && run_eval(t, &a, &err) < 0)
			goto fail;
	} else if (run_train(t, &a, &rc, &err) < 0) {
		goto fail;
	}
	gk_nn_stop_nothing_to_save();
	if (a.sample && rc == 0 && print_sample(t, &a, &err) < 0)
		goto fail;
	gk_nn_trainer_free(t);
	return gk_cli_finish(&cli, rc);
fail:;
	int report;
	gk_nn_stop_failing();
	gk_status_end();
	rc = gk_nn_trainer_failed(t, &report);
	if (report)
		gk_cli_fail(&cli, &err);
	gk_err why;
	if (!report && gk_nn_trainer_await_reporter(t, &why) < 0)
		gk_cli_failf(&cli, "%s; %s", err.msg, why.msg); /* it died before it could */
	gk_nn_trainer_abort(t, rc);
	gk_nn_trainer_free(t);
	return gk_cli_finish(&cli, rc);
}
