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
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nn/nn.h"

static const char usage[] =
	"usage: gpu-train [-qv] [--json] --data SRC [--config FILE | --layers N --hidden N\n"
	"                 --heads N --vocab N --positions N] [--init-from CKPT] [--seed N]\n"
	"                 [--batch B] [--seq T] [--grad-accum A] [--steps N] [--lr LR] ...\n"
	"       gpu-train --eval-only --data SRC [--init-from CKPT | --ckpt-dir DIR --resume]\n"
	"       gpu-train --dump-data N --data SRC [--batch B] [--seq T] [--vocab N]\n"
	"model:\n"
	"  --config FILE         GPT-2 config.json (the shape flags override it)\n"
	"  --layers N  --hidden N  --heads N  --vocab N  --positions N\n"
	"  --init-from CKPT      start from a safetensors file, HF directory or step directory\n"
	"  --seed N              initialisation, shuffle and sampling seed (default 1337)\n"
	"data:\n"
	"  --data SRC            shards ('train-{000000..000031}.tar', a manifest) or .bin token files\n"
	"  --val-data SRC        data for --eval-every and the end of the run\n"
	"  --shuffle on|none     shard and window shuffle (default on)\n"
	"  --eot ID              end-of-text token between documents (default vocab - 1)\n"
	"  --bad-sample stop|skip  a corrupt sample stops the run (default) or is skipped and counted\n"
	"  --dump-data N         print each rank's first N micro-batches as JSON and exit\n"
	"step:\n"
	"  -b, --batch B         sequences per micro-batch per rank (default 4)\n"
	"  -t, --seq T           tokens per sequence (default: the model's positions)\n"
	"  --grad-accum A        micro-batches per step (default 1)\n"
	"  --recompute MODE      none, gelu or layer (default none)\n"
	"  --threads N           compute threads (default: the CPUs this rank may use)\n"
	"  --device KIND         cpu, cuda or auto (cuda when every rank has a GPU; default cpu)\n"
	"  --precision KIND      on a GPU: bf16, tf32 or fp32 (default bf16)\n"
	"optimizer:\n"
	"  --steps N             steps to train, the schedule's length (default 1000)\n"
	"  --until N             stop after step N (checkpointing), keeping the schedule\n"
	"  --lr LR               peak learning rate (default 6e-4)\n"
	"  --min-lr LR           final learning rate of cosine/linear (default lr/10)\n"
	"  --warmup N            linear warmup steps (default 0)\n"
	"  --schedule KIND       cosine, linear or constant (default cosine)\n"
	"  --clip X              global gradient-norm clip, 0 off (default 1.0)\n"
	"  --beta1 X --beta2 X --eps X --weight-decay X   AdamW (0.9 0.95 1e-8 0.1)\n"
	"  --skip-nonfinite      skip steps whose loss or gradient is NaN/Inf\n"
	"parallel:\n"
	"  --zero 0|1            1: shard the optimizer state over the ranks\n"
	"  --compress KIND       none, bf16, f16 or int8 gradients on the wire\n"
	"  --bucket SIZE         gradient bucket size (default 25M)\n"
	"  --overlap WHEN        allreduce during backward: auto (a GPU, several hosts, or\n"
	"                        a CPU the ranks leave free), on or off (after backward)\n"
	"  --no-overlap          --overlap off\n"
	"  --comm KIND           a GPU's gradients: auto (NCCL on the device when there is\n"
	"                        more than one rank), nccl or mpi (through host memory)\n"
	"  --timeout SECONDS     fail a collective with no progress for this long, 0 off (default 600)\n"
	"checkpoints:\n"
	"  --ckpt-dir DIR        where step directories go\n"
	"  --ckpt-every N        checkpoint every N steps (and always at the end)\n"
	"  --resume              continue from DIR's latest checkpoint, if there is one\n"
	"  --ckpt-error stop|continue  a failed checkpoint (disk full) stops the run (default)\n"
	"evaluation and sampling:\n"
	"  --eval-every N        evaluate on --val-data every N steps\n"
	"  --eval-batches N      micro-batches per evaluation, 0 all (default 0)\n"
	"  --eval-only           print the mean loss of the model on --val-data or --data\n"
	"  --sample N            generate N tokens at the end\n"
	"  --temperature X       sampling temperature, 0 greedy (default 1.0)\n"
	"  --top-k K             sample among the K most likely tokens (default 0: all)\n"
	"output:\n"
	"  --json                one JSON object per line (start, steps, summary)\n"
	"  --metrics FILE        rank 0 rewrites FILE in Prometheus' text format (at most 1/s)\n"
	"  -q, --quiet           no per-step lines\n"
	"  -h, --help            this help; --version the version\n";

enum {
	OPT_CONFIG = GK_OPT_FIRST_TOOL, OPT_LAYERS, OPT_HIDDEN, OPT_HEADS, OPT_VOCAB,
	OPT_POSITIONS, OPT_INIT, OPT_SEED, OPT_DATA, OPT_VAL, OPT_SHUFFLE, OPT_EOT,
	OPT_DUMP, OPT_ACCUM, OPT_RECOMPUTE, OPT_THREADS, OPT_STEPS, OPT_UNTIL, OPT_LR,
	OPT_MINLR, OPT_WARMUP, OPT_SCHED, OPT_CLIP, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_WD,
	OPT_SKIPNF, OPT_ZERO, OPT_COMPRESS, OPT_BUCKET, OPT_NOOVERLAP, OPT_COMM, OPT_CKDIR,
	OPT_CKEVERY, OPT_RESUME, OPT_EVEVERY, OPT_EVBATCH, OPT_EVONLY, OPT_SAMPLE,
	OPT_TEMP, OPT_TOPK, OPT_METRICS, OPT_TIMEOUT, OPT_CKERR, OPT_BADSAMPLE,
	OPT_DEVICE, OPT_PRECISION, OPT_OVERLAP,
};

static const struct option longopts[] = {
	GK_CLI_LONGOPTS,
	GK_CLI_LONGOPT_JSON,
	{"config", required_argument, NULL, OPT_CONFIG},
	{"layers", required_argument, NULL, OPT_LAYERS},
	{"hidden", required_argument, NULL, OPT_HIDDEN},
	{"heads", required_argument, NULL, OPT_HEADS},
	{"vocab", required_argument, NULL, OPT_VOCAB},
	{"positions", required_argument, NULL, OPT_POSITIONS},
	{"init-from", required_argument, NULL, OPT_INIT},
	{"seed", required_argument, NULL, OPT_SEED},
	{"data", required_argument, NULL, OPT_DATA},
	{"val-data", required_argument, NULL, OPT_VAL},
	{"shuffle", required_argument, NULL, OPT_SHUFFLE},
	{"eot", required_argument, NULL, OPT_EOT},
	{"dump-data", required_argument, NULL, OPT_DUMP},
	{"batch", required_argument, NULL, 'b'},
	{"seq", required_argument, NULL, 't'},
	{"grad-accum", required_argument, NULL, OPT_ACCUM},
	{"recompute", required_argument, NULL, OPT_RECOMPUTE},
	{"threads", required_argument, NULL, OPT_THREADS},
	{"device", required_argument, NULL, OPT_DEVICE},
	{"precision", required_argument, NULL, OPT_PRECISION},
	{"steps", required_argument, NULL, OPT_STEPS},
	{"until", required_argument, NULL, OPT_UNTIL},
	{"lr", required_argument, NULL, OPT_LR},
	{"min-lr", required_argument, NULL, OPT_MINLR},
	{"warmup", required_argument, NULL, OPT_WARMUP},
	{"schedule", required_argument, NULL, OPT_SCHED},
	{"clip", required_argument, NULL, OPT_CLIP},
	{"beta1", required_argument, NULL, OPT_BETA1},
	{"beta2", required_argument, NULL, OPT_BETA2},
	{"eps", required_argument, NULL, OPT_EPS},
	{"weight-decay", required_argument, NULL, OPT_WD},
	{"skip-nonfinite", no_argument, NULL, OPT_SKIPNF},
	{"zero", required_argument, NULL, OPT_ZERO},
	{"compress", required_argument, NULL, OPT_COMPRESS},
	{"bucket", required_argument, NULL, OPT_BUCKET},
	{"no-overlap", no_argument, NULL, OPT_NOOVERLAP},
	{"overlap", required_argument, NULL, OPT_OVERLAP},
	{"comm", required_argument, NULL, OPT_COMM},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"ckpt-dir", required_argument, NULL, OPT_CKDIR},
	{"ckpt-every", required_argument, NULL, OPT_CKEVERY},
	{"resume", no_argument, NULL, OPT_RESUME},
	{"ckpt-error", required_argument, NULL, OPT_CKERR},
	{"bad-sample", required_argument, NULL, OPT_BADSAMPLE},
	{"eval-every", required_argument, NULL, OPT_EVEVERY},
	{"eval-batches", required_argument, NULL, OPT_EVBATCH},
	{"eval-only", no_argument, NULL, OPT_EVONLY},
	{"sample", required_argument, NULL, OPT_SAMPLE},
	{"temperature", required_argument, NULL, OPT_TEMP},
	{"top-k", required_argument, NULL, OPT_TOPK},
	{"metrics", required_argument, NULL, OPT_METRICS},
	{NULL, 0, NULL, 0},
};

static gk_cli cli;
static volatile sig_atomic_t stop_flag, nothing_to_save;

/*
 * SIGTERM/SIGUSR1 ask for a checkpoint at the next step boundary, SIGINT
 * for a stop without one; a second SIGINT ends the process at once. The
 * handler only sets the flag the trainer polls between steps. Outside
 * training (--eval-only, --sample after the run) there is nothing to
 * save, and any of them ends the process at once, 128 + the signal.
 */
static void on_signal(int sig)
{
	if (nothing_to_save)
		_exit(128 + sig);
	if (sig == SIGINT) {
		if (stop_flag == 2)
			_exit(130);
		stop_flag = 2;
	} else if (stop_flag == 0) {
		stop_flag = 1;
	}
}

static double num(const char *opt, const char *s, double min, double max)
{
	double v;
	gk_err err = {0};
	if (gk_parse_double(s, min, max, &v, opt, &err) < 0)
		gk_cli_usage_error(&cli, "%s", err.msg);
	return v;
}

/*
 * buf as UTF-8 with each maximal ill-formed subpart replaced by U+FFFD
 * (Unicode's practice, and Python's errors="replace"); malloc'ed, its
 * length in *len.
 */
static char *utf8_lossy(const char *buf, size_t n, size_t *len)
{
	const unsigned char *b = (const unsigned char *)buf;
	char *out = malloc(3 * n + 1);
	size_t o = 0;
	for (size_t i = 0; out && i < n;) {
		unsigned c = b[i];
		size_t want = c < 0x80 ? 1 : c >= 0xc2 && c < 0xe0 ? 2 : c >= 0xe0 && c < 0xf0 ? 3 :
			      c >= 0xf0 && c < 0xf5 ? 4 : 0;
		/* the second byte's range excludes overlongs, surrogates, > U+10FFFF */
		unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
		unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
		size_t k = 1;
		while (want && k < want && i + k < n &&
		       b[i + k] >= (k == 1 ? lo : 0x80) && b[i + k] <= (k == 1 ? hi : 0xbf))
			k++;
		if (want && k == want) {
			memcpy(out + o, b + i, k);
			o += k;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
		}
		i += k;
	}
	*len = o;
	return out;
}

static void print_mem(const gk_nn_train_mem *m, json_t *into)
{
	const char *k[] = {"parameters", "gradients", "optimizer", "activations", "workspace",
			   "padding", "comm", "total"};
	uint64_t v[] = {m->parameters, m->gradients, m->optimizer, m->activations,
			m->workspace, m->padding, m->comm, m->total};
	if (into) {
		json_t *o = json_object();
		for (size_t i = 0; i < GK_ARRAY_SIZE(k); i++)
			json_object_set_new(o, k[i], json_integer((json_int_t)v[i]));
		json_object_set_new(into, "memory", o);
		return;
	}
	char b[32];
	printf("memory per rank:");
	for (size_t i = 0; i < GK_ARRAY_SIZE(k); i++)
		printf("%s %s %s", i ? "," : "", k[i], gk_format_size(v[i], 0, b, sizeof(b)));
	printf("\n");
}

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
} out_ctx;

static void emit(json_t *o)
{
	gk_json_dump(stdout, o, 0, NULL);
	gk_cli_flush(&cli);
	json_decref(o);
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
		if (!c->metrics_failing)
			gk_cli_warn(&cli, "%s", err.msg);
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

static void on_step(const gk_nn_train_log *l, void *ctx)
{
	out_ctx *c = ctx;
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
		print_mem(c->mem, o);
		emit(o);
		return;
	}
	if (cli.quiet)
		return;
	printf("step %5" PRId64 "/%" PRId64 "  loss %.4f  lr %.3e  norm %.4f  %.0f tok/s  %.1f ms"
	       "  (comm %.1f, exposed %.1f)%s", l->step, c->steps, l->loss, l->lr, l->grad_norm,
	       l->tokens_per_s, l->step_ms, l->comm_ms, l->exposed_comm_ms,
	       l->skipped ? "  skipped: non-finite" : "");
	if (!isnan(l->val_loss))
		printf("  val %.4f", l->val_loss);
	printf("\n");
	gk_cli_flush(&cli);
}

static void on_ckpt(int64_t step, double seconds, void *ctx)
{
	out_ctx *c = ctx;
	c->ckpt.step = step;
	c->ckpt.seconds = seconds;
	c->ckpt.when = (double)time(NULL);
	write_metrics(c);
	if (cli.json) {
		emit(json_pack("{s:s,s:I,s:f}", "event", "checkpoint", "step", (json_int_t)step,
			       "seconds", seconds));
	} else if (!cli.quiet) {
		printf("checkpoint step %" PRId64 " committed (%.2f s)\n", step, seconds);
		gk_cli_flush(&cli);
	}
}

static void on_ckpt_failed(int64_t step, const gk_err *why, void *ctx)
{
	out_ctx *c = ctx;
	c->ckpt.failed++;
	write_metrics(c);
	gk_cli_warn(&cli, "checkpoint step %" PRId64 " not written, training goes on: %s",
		    step, why->msg);
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
	if (!seen && !cli.silent_usage)
		fprintf(stderr, "gpu-train: note: %s\n", msg);
}

/* --dump-data: what the trainer would read, per rank, without a model. */
static int dump_data(const char *src, const gk_nn_data_opts *base, int64_t n)
{
	gk_err err = {0};
	gk_rank_info ri;
	if (gk_rank_discover(&ri, &err) < 0)
		return gk_cli_fail(&cli, &err);
	gk_nn_data_opts o = *base;
	o.rank = ri.rank;
	o.world = ri.world;
	o.loop = 1;
	gk_nn_data *d;
	if (gk_nn_data_open(&d, src, &o, &err) < 0)
		return gk_cli_fail(&cli, &err);
	size_t bt = (size_t)o.batch * (size_t)o.seq;
	int32_t *in = malloc(bt * 4), *tg = malloc(bt * 4);
	int rc = 0;
	for (int64_t k = 0; k < n && in && tg; k++) {
		if (gk_nn_data_next(d, in, tg, &err) <= 0) {
			rc = gk_cli_fail(&cli, &err);
			break;
		}
		json_t *rows = json_array();
		for (int b = 0; b < o.batch; b++) {
			json_t *r = json_array();
			for (int t = 0; t < o.seq; t++)
				json_array_append_new(r, json_integer(in[(size_t)b * o.seq + t]));
			json_array_append_new(r, json_integer(tg[(size_t)b * o.seq + o.seq - 1]));
			json_array_append_new(rows, r);
		}
		emit(json_pack("{s:i,s:I,s:o}", "rank", ri.rank, "micro", (json_int_t)k, "rows", rows));
	}
	free(in);
	free(tg);
	gk_nn_data_close(d);
	return rc;
}

/* What the command line asks for, beyond the trainer's own options. */
typedef struct args {
	gk_nn_train_opts o;
	gk_nn_config shape;     /* the shape flags given (0: not given) */
	const char *config, *metrics, *eval_src;
	int64_t dump, sample, top_k;
	double temperature;
	int seq_set;
} args;

/* The options, and every usage error (exit 2) that needs no file. */
static void parse_args(int argc, char **argv, args *a)
{
	*a = (args){
		.o = {.seed = 1337, .shuffle = 1, .eot = -1, .batch = 4, .grad_accum = 1,
		      .threads = 0, .steps = 1000, .clip = 1.0, .overlap = GK_NN_AUTO,
		      .sched = {.kind = GK_NN_SCHED_COSINE, .lr = 6e-4, .min_lr = -1},
		      .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}},
		.temperature = 1.0,
	};
	int c;
	while ((c = getopt_long(argc, argv, "hqvb:t:", longopts, NULL)) != -1) {
		if (gk_cli_common(&cli, c))
			continue;
		switch (c) {
		case OPT_CONFIG: a->config = optarg; break;
		case OPT_LAYERS: a->shape.layers = gk_cli_i64(&cli, "--layers", optarg, 1, 1000); break;
		case OPT_HIDDEN: a->shape.hidden = gk_cli_i64(&cli, "--hidden", optarg, 1, 1 << 16); break;
		case OPT_HEADS: a->shape.heads = gk_cli_i64(&cli, "--heads", optarg, 1, 1024); break;
		case OPT_VOCAB: a->shape.vocab = gk_cli_i64(&cli, "--vocab", optarg, 2, 1 << 24); break;
		case OPT_POSITIONS: a->shape.positions = gk_cli_i64(&cli, "--positions", optarg, 1, 1 << 20); break;
		case OPT_INIT: a->o.init_from = optarg; break;
		case OPT_SEED: a->o.seed = (uint64_t)gk_cli_i64(&cli, "--seed", optarg, 0, INT64_MAX); break;
		case OPT_DATA: a->o.data = optarg; break;
		case OPT_VAL: a->o.val_data = optarg; break;
		case OPT_SHUFFLE:
			if (strcmp(optarg, "on") && strcmp(optarg, "none"))
				gk_cli_usage_error(&cli, "--shuffle '%s': on or none", optarg);
			a->o.shuffle = !strcmp(optarg, "on");
			break;
		case OPT_EOT: a->o.eot = (int32_t)gk_cli_i64(&cli, "--eot", optarg, 0, INT32_MAX); break;
		case OPT_DUMP: a->dump = gk_cli_i64(&cli, "--dump-data", optarg, 1, 1000000); break;
		case 'b': a->o.batch = (int)gk_cli_i64(&cli, "--batch", optarg, 1, 1 << 20); break;
		case 't': a->o.seq = (int)gk_cli_i64(&cli, "--seq", optarg, 1, 1 << 20); a->seq_set = 1; break;
		case OPT_ACCUM: a->o.grad_accum = (int)gk_cli_i64(&cli, "--grad-accum", optarg, 1, 1 << 20); break;
		case OPT_RECOMPUTE:
			if (!strcmp(optarg, "none")) a->o.recompute = GK_NN_RECOMPUTE_NONE;
			else if (!strcmp(optarg, "gelu")) a->o.recompute = GK_NN_RECOMPUTE_GELU;
			else if (!strcmp(optarg, "layer")) a->o.recompute = GK_NN_RECOMPUTE_LAYER;
			else gk_cli_usage_error(&cli, "--recompute '%s': none, gelu or layer", optarg);
			break;
		case OPT_THREADS: a->o.threads = (int)gk_cli_i64(&cli, "--threads", optarg, 1, 4096); break;
		case OPT_DEVICE:
			if (!strcmp(optarg, "cpu")) a->o.device = GK_NN_CPU;
			else if (!strcmp(optarg, "cuda") || !strcmp(optarg, "gpu")) a->o.device = GK_NN_CUDA;
			else if (!strcmp(optarg, "auto")) a->o.device = GK_NN_AUTO;
			else gk_cli_usage_error(&cli, "--device '%s': cpu, cuda or auto", optarg);
			break;
		case OPT_PRECISION:
			if (!strcmp(optarg, "bf16")) a->o.precision = GK_NN_BF16;
			else if (!strcmp(optarg, "tf32")) a->o.precision = GK_NN_TF32;
			else if (!strcmp(optarg, "fp32")) a->o.precision = GK_NN_FP32;
			else gk_cli_usage_error(&cli, "--precision '%s': bf16, tf32 or fp32", optarg);
			break;
		case OPT_STEPS: a->o.steps = gk_cli_i64(&cli, "--steps", optarg, 1, INT64_MAX / 2); break;
		case OPT_UNTIL: a->o.until = gk_cli_i64(&cli, "--until", optarg, 1, INT64_MAX / 2); break;
		case OPT_LR: a->o.sched.lr = num("--lr", optarg, 0, 10); break;
		case OPT_MINLR: a->o.sched.min_lr = num("--min-lr", optarg, 0, 10); break;
		case OPT_WARMUP: a->o.sched.warmup = gk_cli_i64(&cli, "--warmup", optarg, 0, INT64_MAX / 2); break;
		case OPT_SCHED: {
			int k = gk_nn_sched_parse(optarg);
			if (k < 0)
				gk_cli_usage_error(&cli, "--schedule '%s': cosine, linear or constant", optarg);
			a->o.sched.kind = (gk_nn_sched_kind)k;
			break;
		}
		case OPT_CLIP: a->o.clip = num("--clip", optarg, 0, 1e30); break;
		case OPT_BETA1: a->o.adamw.beta1 = (float)num("--beta1", optarg, 0, 0.999999); break;
		case OPT_BETA2: a->o.adamw.beta2 = (float)num("--beta2", optarg, 0, 0.999999); break;
		case OPT_EPS: a->o.adamw.eps = (float)num("--eps", optarg, 0, 1); break;
		case OPT_WD: a->o.adamw.weight_decay = (float)num("--weight-decay", optarg, 0, 10); break;
		case OPT_SKIPNF: a->o.skip_nonfinite = 1; break;
		case OPT_CKERR:
			if (strcmp(optarg, "stop") == 0)
				a->o.ckpt_continue = 0;
			else if (strcmp(optarg, "continue") == 0)
				a->o.ckpt_continue = 1;
			else
				gk_cli_usage_error(&cli, "--ckpt-error '%s': not one of stop continue", optarg);
			break;
		case OPT_BADSAMPLE:
			if (strcmp(optarg, "stop") == 0)
				a->o.skip_bad = 0;
			else if (strcmp(optarg, "skip") == 0)
				a->o.skip_bad = 1;
			else
				gk_cli_usage_error(&cli, "--bad-sample '%s': not one of stop skip", optarg);
			break;
		case OPT_TIMEOUT: {
			/* The library reads 0 as its default and < 0 as off. */
			double v = num("--timeout", optarg, 0, 1e9);
			if (v > 0 && v < 1)
				gk_cli_usage_error(&cli, "--timeout %s: 0 (off) or at least 1 second",
						   optarg);
			a->o.timeout = v > 0 ? v : -1;
			break;
		}
		case OPT_ZERO: a->o.zero = (int)gk_cli_i64(&cli, "--zero", optarg, 0, 1); break;
		case OPT_COMPRESS: {
			int k = gk_comm_compress_parse(optarg);
			if (k < 0)
				gk_cli_usage_error(&cli, "--compress '%s': none, bf16, f16 or int8", optarg);
			a->o.compress = (gk_comm_compress)k;
			break;
		}
		case OPT_BUCKET:
			a->o.bucket_bytes = gk_cli_size(&cli, "--bucket", optarg);
			/* a bare 25 is 25 bytes: six floats a bucket, a
			 * collective per six gradients */
			if (a->o.bucket_bytes < 1024)
				gk_cli_usage_error(&cli, "--bucket '%s': %" PRIu64 " bytes, below 1K "
						   "(a size takes a suffix: 25M)", optarg,
						   a->o.bucket_bytes);
			break;
		case OPT_NOOVERLAP: a->o.overlap = 0; break;
		case OPT_OVERLAP:
			if (!strcmp(optarg, "on")) a->o.overlap = 1;
			else if (!strcmp(optarg, "off")) a->o.overlap = 0;
			else if (!strcmp(optarg, "auto")) a->o.overlap = GK_NN_AUTO;
			else gk_cli_usage_error(&cli, "--overlap '%s': auto, on or off", optarg);
			break;
		case OPT_COMM: {
			int k = gk_comm_backend_parse(optarg);
			if (k != GK_COMM_BACKEND_AUTO && k != GK_COMM_BACKEND_MPI &&
			    k != GK_COMM_BACKEND_NCCL)
				gk_cli_usage_error(&cli, "--comm '%s': auto, nccl or mpi", optarg);
			a->o.comm = (gk_comm_backend)k;
			break;
		}
		case OPT_CKDIR:
			if (!*optarg)
				gk_cli_usage_error(&cli, "--ckpt-dir '': an empty directory name");
			a->o.ckpt_dir = optarg;
			break;
		case OPT_CKEVERY: a->o.ckpt_every = gk_cli_i64(&cli, "--ckpt-every", optarg, 1, INT64_MAX / 2); break;
		case OPT_RESUME: a->o.resume = 1; break;
		case OPT_EVEVERY: a->o.eval_every = gk_cli_i64(&cli, "--eval-every", optarg, 1, INT64_MAX / 2); break;
		case OPT_EVBATCH: a->o.eval_batches = gk_cli_i64(&cli, "--eval-batches", optarg, 0, INT64_MAX / 2); break;
		case OPT_EVONLY: a->o.eval_only = 1; break;
		case OPT_SAMPLE: a->sample = gk_cli_i64(&cli, "--sample", optarg, 1, 1 << 20); break;
		case OPT_TEMP: a->temperature = num("--temperature", optarg, 0, 100); break;
		case OPT_TOPK: a->top_k = gk_cli_i64(&cli, "--top-k", optarg, 0, 1 << 24); break;
		case OPT_METRICS:
			if (!*optarg)
				gk_cli_usage_error(&cli, "--metrics '': an empty file name");
			a->metrics = optarg;
			break;
		default:
			gk_cli_usage_error(&cli, "unknown option");
		}
	}
	if (optind < argc)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
	a->eval_src = a->o.val_data ? a->o.val_data : a->o.data;
	if (!a->o.data && !(a->o.eval_only && a->eval_src))
		gk_cli_usage_error(&cli, "--data is required");
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
	if (a->metrics && (a->o.eval_only || a->dump))
		gk_cli_usage_error(&cli, "--metrics reports training: not with %s",
				   a->o.eval_only ? "--eval-only" : "--dump-data");
	if (a->o.comm == GK_COMM_BACKEND_NCCL && a->o.device == GK_NN_CPU)
		gk_cli_usage_error(&cli, "--comm nccl reduces a GPU's gradients: it needs "
				   "--device cuda or auto");
	if (a->o.adamw.eps <= 0)
		gk_cli_usage_error(&cli, "--eps must be above 0: with 0 a parameter that never had "
				   "a gradient is updated by 0/0");
	if (a->o.sched.min_lr > a->o.sched.lr)
		gk_cli_usage_error(&cli, "--min-lr %g is above --lr %g: the schedule would climb",
				   a->o.sched.min_lr, a->o.sched.lr);
	if (a->o.eval_every && !a->o.val_data)
		gk_cli_usage_error(&cli, "--eval-every needs --val-data");
	if (a->o.sched.min_lr < 0)
		a->o.sched.min_lr = a->o.sched.lr / 10;
	a->o.sched.steps = a->o.steps;
}

/*
 * The model's shape: config.json, then the flags over it; GPT-2 small
 * where neither says. With --resume or --init-from, a checkpoint's
 * config.json takes the place of GPT-2 small (the trainer reads it; the
 * flags then go over it), so those are checked there. A shape from the
 * flags alone that cannot be built is a usage error.
 */
static int resolve_shape(args *a, gk_err *err)
{
	static const gk_nn_config gpt2_small = {.layers = 12, .hidden = 768, .heads = 12,
						.vocab = GK_NN_BYTE_VOCAB, .positions = 1024,
						.ln_eps = 1e-5f};
	const gk_nn_config *f = &a->shape;
	int flags = f->layers || f->hidden || f->heads || f->vocab || f->positions;
	int ckpt = a->o.init_from || a->o.resume;
	if (a->config && gk_nn_config_load(&a->o.cfg, a->config, err) < 0)
		return -1;
	if (a->config || flags || !a->o.init_from) {
		if (!a->config)
			a->o.cfg = gpt2_small;
		if (f->layers) a->o.cfg.layers = f->layers;
		if (f->hidden) a->o.cfg.hidden = f->hidden;
		if (f->heads) a->o.cfg.heads = f->heads;
		if (f->vocab) a->o.cfg.vocab = f->vocab;
		if (f->positions) a->o.cfg.positions = f->positions;
		a->o.have_config = 1;
		/* a checkpoint's config.json goes under the flags instead */
		a->o.cfg_from_flags = !a->config;
		a->o.shape = a->shape;
		if (!(a->o.cfg_from_flags && ckpt) && gk_nn_config_finish(&a->o.cfg, err) < 0) {
			if (a->config)
				return -1;
			gk_cli_usage_error(&cli, "%s", err->msg);
		}
	}
	/* 0: the trainer takes the model's positions, once it has the shape */
	if (!a->seq_set)
		a->o.seq = a->o.have_config && !(a->o.cfg_from_flags && ckpt) ?
				   (int)a->o.cfg.positions : 0;
	return 0;
}

/*
 * lib/core removes temp files when a signal kills the process, with
 * handlers it installs on first use; install them now and ours over
 * them, so a signal always reaches the trainer (which stops cleanly and
 * leaves no temp files). A shell starts background jobs with SIGINT
 * ignored: a handler undoes that too.
 */
static int catch_signals(gk_nn_train_opts *o, gk_err *err)
{
	gk_cleanup_forget(gk_cleanup_on_signal("/nonexistent"));
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	/*
	 * Past `ulimit -f` a checkpoint write must fail with EFBIG, which
	 * --ckpt-error handles (the staging directory removed, the error
	 * named), instead of SIGXFSZ killing the rank without a word.
	 */
	signal(SIGXFSZ, SIG_IGN);
	o->stop = &stop_flag;
	const char *delay = getenv("GPUKIT_TEST_CKPT_DELAY_MS");
	if (delay && gk_parse_int(delay, 0, 3600000, &o->ckpt_delay_ms,
				  "GPUKIT_TEST_CKPT_DELAY_MS", err) < 0)
		return -1;
	return 0;
}

/* Rank 0: the notes on stderr, the model and its memory on stdout. */
static void print_start(gk_nn_trainer *t)
{
	int rank = gk_nn_trainer_rank(t);
	const gk_nn_config *cfg = gk_nn_trainer_config(t);
	const gk_nn_train_mem *mem = gk_nn_trainer_mem(t);
	gk_nn_model *m = gk_nn_trainer_model(t);
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	const char *note, *device = gk_nn_trainer_device(t, &note);
	static const char *const precisions[] = {"bf16", "tf32", "fp32"};
	const char *precision = strcmp(device, "cpu") ? precisions[r->precision] : "fp32";
	const char *comm_note, *comm = gk_nn_trainer_comm(t, &comm_note);
	if (rank == 0 && note)
		fprintf(stderr, "gpu-train: %s\n", note);
	if (rank == 0 && comm_note)
		fprintf(stderr, "gpu-train: %s\n", comm_note);
	if (rank == 0 && gk_nn_trainer_ckpt_note(t))
		fprintf(stderr, "gpu-train: %s\n", gk_nn_trainer_ckpt_note(t));
	const gk_nn_placement *pl = gk_nn_trainer_placement(t);
	if (rank == 0 && r->threads > pl->share) {
		char quota[64] = "";
		if (pl->quota > 0)
			snprintf(quota, sizeof(quota), ", its cgroup's CPU quota %.3g", pl->quota);
		if (pl->sharing > 1)
			fprintf(stderr, "gpu-train: warning: --threads %d is more than this rank's share "
				"of its CPUs, %d (%d CPUs%s, shared by %d ranks of the host); threads "
				"that share a CPU make every step slower\n",
				r->threads, pl->share, pl->cpus, quota, pl->sharing);
		else
			fprintf(stderr, "gpu-train: warning: --threads %d is more than the %d CPU%s this "
				"rank may use%s; threads that share a CPU make every step slower\n",
				r->threads, pl->cpus, pl->cpus > 1 ? "s" : "", quota);
	}
	if (rank == 0) {
		size_t np = gk_nn_param_count(m);
		if (cli.json) {
			json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:i,s:i,s:i}",
					      "event", "start", "device", device, "precision", precision,
					      "comm", comm,
					      "layers", (json_int_t)cfg->layers,
					      "hidden", (json_int_t)cfg->hidden, "heads",
					      (json_int_t)cfg->heads, "vocab", (json_int_t)cfg->vocab,
					      "positions", (json_int_t)cfg->positions, "params",
					      (json_int_t)np, "world", gk_nn_trainer_world(t), "batch",
					      r->batch, "seq", r->seq, "grad_accum", r->grad_accum, "zero", r->zero);
			/* the flat buffer, with the padded vocabulary rows */
			json_object_set_new(j, "params_padded", json_integer((json_int_t)gk_nn_nparams(m)));
			json_object_set_new(j, "threads", json_integer(r->threads));
			json_object_set_new(j, "overlap", json_boolean(r->overlap));
			print_mem(mem, j);
			emit(j);
		} else if (!cli.quiet) {
			printf("gpu-train: %" PRId64 " layers, hidden %" PRId64 ", %" PRId64
			       " heads, vocab %" PRId64 ", %" PRId64 " positions: %zu parameters; %d rank%s on %s (%s), "
			       "%d thread%s%s%s\n",
			       cfg->layers, cfg->hidden, cfg->heads, cfg->vocab, cfg->positions, np,
			       gk_nn_trainer_world(t), gk_nn_trainer_world(t) > 1 ? "s" : "", device,
			       precision, r->threads, r->threads > 1 ? "s" : "",
			       gk_nn_trainer_world(t) > 1 ? " each" : "",
			       gk_nn_trainer_world(t) == 1 ? "" :
			       r->overlap ? "; allreduce during backward" : "; allreduce after backward");
			print_mem(mem, NULL);
		}
	}
}

/* --eval-only: the mean loss of the model on the data. */
static int run_eval(gk_nn_trainer *t, const args *a, gk_err *err)
{
	int rank = gk_nn_trainer_rank(t);
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	double loss;
	int64_t nb;
	if (gk_nn_trainer_eval(t, a->eval_src, a->o.eval_batches, &loss, &nb, err) < 0)
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
	gk_nn_train_hooks h = {on_step, on_ckpt, &ctx, on_ckpt_failed};
	gk_nn_train_summary s;
	int run = gk_nn_trainer_run(t, &h, &s, err);
	if (ctx.stale)
		write_metrics(&ctx);
	gk_metrics_free(ctx.metrics);
	if (run < 0)
		return -1;
	if (rank == 0) {
		/* step 0: stopped before a first step, nothing to keep */
		const char *why = s.stopped == 1 ? (a->o.ckpt_dir && !s.ckpt_lost && s.step > 0 ?
						     "signal (checkpointed)" : "signal") :
				  s.stopped == 2 ? "interrupt" : "done";
		if (cli.json) {
			json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:f,s:o,s:s,s:I}", "event",
					      "summary", "step", (json_int_t)s.step, "steps",
					      (json_int_t)s.steps, "tokens", (json_int_t)s.tokens,
					      "seconds", s.seconds, "loss", jnum(s.last_loss), "stopped",
					      why, "skipped", (json_int_t)s.skipped);
			if (!isnan(s.min_loss))
				json_object_set_new(j, "min_loss", jnum(s.min_loss));
			if (s.val_loss != 0)
				json_object_set_new(j, "val_loss", jnum(s.val_loss));
			if (s.data_note)
				json_object_set_new(j, "note", json_string(s.data_note));
			if (a->o.skip_bad)
				json_object_set_new(j, "bad_samples", json_integer(s.bad_samples));
			if (s.dropped)
				json_object_set_new(j, "dropped_micro_batches",
						    json_integer(s.dropped));
			emit(j);
		} else if (!cli.quiet) {
			char loss[32] = "-"; /* no step this run, no loss */
			if (s.steps > 0)
				snprintf(loss, sizeof(loss), "%.4f", s.last_loss);
			printf("summary: %" PRId64 " steps (to step %" PRId64 ") in %.1f s, %.0f tok/s, "
			       "loss %s, skipped %" PRId64 ", %s\n", s.steps, s.step, s.seconds,
			       s.seconds > 0 ? (double)r->batch * r->seq * r->grad_accum *
						       gk_nn_trainer_world(t) * s.steps / s.seconds : 0,
			       loss, s.skipped, why);
			if (s.val_loss != 0)
				printf("val loss %.4f\n", s.val_loss);
			if (s.data_note)
				printf("note: %s\n", s.data_note);
			if (s.dropped)
				printf("step %" PRId64 " stopped after %d of %d micro-batches: "
				       "dropped, to be trained again on resume\n", s.step + 1,
				       s.dropped, r->grad_accum);
			if (s.bad_samples)
				printf("skipped %" PRId64 " corrupt samples\n", s.bad_samples);
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

/* --sample: rank 0 generates and prints, as text for the byte vocabulary. */
static int print_sample(gk_nn_trainer *t, const args *a, gk_err *err)
{
	const gk_nn_config *cfg = gk_nn_trainer_config(t);
	gk_nn_model *m = gk_nn_trainer_model(t);
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	int32_t *tok = malloc((size_t)a->sample * sizeof(int32_t));
	int32_t eot = r->eot >= 0 ? r->eot : (int32_t)(cfg->vocab - 1);
	if (!tok || gk_nn_sample(m, r->batch, r->seq, eot, (int)a->sample, a->temperature,
				 (int)a->top_k, a->o.seed, tok, err) < 0) {
		free(tok);
		if (!err->msg[0])
			gk_err_sys(err, ENOMEM, "sample");
		return -1;
	}
	/* The byte vocabulary decodes to text; others print ids. */
	char *txt = malloc((size_t)a->sample * 12 + 1);
	size_t n = 0;
	for (int64_t i = 0; txt && i < a->sample; i++) {
		if (cfg->vocab == GK_NN_BYTE_VOCAB)
			txt[n++] = tok[i] == GK_NN_BYTE_EOT ? '\n' : (char)tok[i];
		else
			n += (size_t)sprintf(txt + n, "%s%d", i ? " " : "", tok[i]);
	}
	if (txt) {
		if (cli.json) {
			json_t *j = json_object(), *ids = json_array();
			json_object_set_new(j, "event", json_string("sample"));
			for (int64_t i = 0; i < a->sample; i++)
				json_array_append_new(ids, json_integer(tok[i]));
			json_object_set_new(j, "tokens", ids);
			if (cfg->vocab == GK_NN_BYTE_VOCAB) {
				/* bytes that are not UTF-8 become U+FFFD */
				size_t ul;
				char *u = utf8_lossy(txt, n, &ul);
				json_t *tx = u ? json_stringn(u, ul) : NULL;
				if (tx)
					json_object_set_new(j, "text", tx);
				free(u);
			}
			emit(j);
		} else {
			fwrite(txt, 1, n, stdout);
			putchar('\n');
		}
	}
	free(txt);
	free(tok);
	return txt ? 0 : gk_err_sys(err, ENOMEM, "sample");
}

int main(int argc, char **argv)
{
	gk_err err = {0};
	args a;
	gk_cli_init(&cli, "gpu-train", usage);
	parse_args(argc, argv, &a);
	/* the trainer makes a failure here the whole job's */
	gk_err early = {0};
	if (resolve_shape(&a, &early) < 0) {
		if (a.dump)
			return gk_cli_fail(&cli, &early);
		a.o.failed = &early;
	}
	if (!a.o.failed && a.metrics && gk_metrics_check(a.metrics, &early) < 0)
		a.o.failed = &early;
	if (a.dump) {
		if (!a.seq_set && !a.o.have_config)
			gk_cli_usage_error(&cli, "--dump-data needs --seq or a model shape");
		gk_nn_data_opts d = {.shuffle = a.o.shuffle, .seed = a.o.seed,
				     .vocab = a.o.have_config ? a.o.cfg.vocab : GK_NN_BYTE_VOCAB,
				     .eot = a.o.eot, .batch = a.o.batch, .seq = a.o.seq,
				     .skip_bad = a.o.skip_bad, .note = data_note};
		return gk_cli_finish(&cli, dump_data(a.o.data, &d, a.dump));
	}
	if (catch_signals(&a.o, &err) < 0)
		return gk_cli_fail(&cli, &err);
	a.o.data_note = data_note;
	gk_nn_trainer *t = NULL;
	int rc = 0;
	if (gk_nn_trainer_new(&t, &a.o, &err) < 0)
		goto fail;
	print_start(t);
	if (a.o.eval_only) {
		nothing_to_save = 1;
		if (run_eval(t, &a, &err) < 0)
			goto fail;
	} else if (run_train(t, &a, &rc, &err) < 0) {
		goto fail;
	}
	nothing_to_save = 1;
	if (a.sample && gk_nn_trainer_rank(t) == 0 && rc == 0 && print_sample(t, &a, &err) < 0)
		goto fail;
	gk_nn_trainer_free(t);
	return gk_cli_finish(&cli, rc);
fail:;
	int report;
	rc = gk_nn_trainer_failed(t, &report);
	if (report)
		gk_cli_fail(&cli, &err);
	gk_nn_trainer_abort(t, rc);
	gk_nn_trainer_free(t);
	return gk_cli_finish(&cli, rc);
}
