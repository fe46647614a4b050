/*
 * mem-estimate - per-GPU memory of transformer training and inference, and
 * the cheapest parallel configuration that fits a GPU.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "comm/comm.h"
#include "mem/mem.h"

static const char synopsis[] =
	"usage: mem-estimate [--config config.json | --from FILE|DIR |\n"
	"                    --params N | --layers L --hidden H --heads A ...]\n"
	"                    [--precision f32|bf16|f16] [--optimizer NAME]\n"
	"                    [--zero 0-3 | --fsdp] [--dp N] [--tp N] [--pp N] [--sp]\n"
	"                    [--pp-schedule 1f1b|gpipe|interleaved] [--pp-chunks V]\n"
	"                    [--pp-stage S]\n"
	"                    [-b micro-batch] [-s seq] [--grad-accum N]\n"
	"                    [--recompute none|selective|full|gelu]\n"
	"                    [--offload none|optimizer|cpu]\n"
	"                    [--fit SIZE | --gpu NAME] [--si] [--json] [--explain]\n"
	"       mem-estimate --infer [--batch N] [--seq N] [--kv-dtype T] ...\n"
	"       mem-estimate --list-gpus\n";

/* the options every tool has (GK_CLI_LONGOPTS), at the end of "output" */
static const char common[] =
	"  --json                one JSON document, sizes in bytes\n"
	"  -q, --quiet           no warnings (unknown config keys, --seq past the positions)\n"
	"  -v, --verbose         accepted, as by every gpukit tool\n"
	"  -h, --help            this help\n"
	"  --version             the version\n";

/* What the command line asks for. */
typedef struct opts {
	gk_mem_model m;     /* --params and the shape flags */
	gk_mem_run r;       /* from gk_mem_run_default, then the flags */
	const char *config, *from, *source;
	int arch;           /* --arch, -1: not given (GPT-2 for a shape) */
	int tied;           /* --tied 1, --untied 0, -1: the architecture's */
	int zero;           /* --zero or --fsdp, -1: not given */
	int64_t largest;    /* --largest-layer, 0: computed */
	int64_t pp_stage;   /* --pp-stage, -1: the most loaded */
	int allow_unknown, si, explain, list_gpus, top;
	gk_mem_fit_req req; /* --world --global-batch --fit --gpu --inter-bw */
} opts;

static gk_cli cli;

/*
 * The custom rows: arguments that lib/mem or lib/core parse with messages
 * of their own (a count such as 7B, a float precision, a GPU of the
 * table), a size that must not be 0, and --batch, an alias.
 */
static int parse_params(const char *opt, const char *s, void *field, gk_err *err)
{
	uint64_t v;
	if (gk_mem_parse_count(s, &v, opt, err))
		return -1;
	memcpy(field, &v, sizeof(v));
	return 0;
}

static int parse_precision(const char *opt, const char *s, void *field, gk_err *err)
{
	gk_dtype dt;
	if (gk_dtype_parse_float(s, opt, &dt, err))
		return -1;
	memcpy(field, &dt, sizeof(dt));
	return 0;
}

/* --batch is --micro-batch's other name (inference's word); its messages
 * have always named --micro-batch, as -b's do */
static int parse_batch(const char *opt, const char *s, void *field, gk_err *err)
{
	int64_t v;
	(void)opt;
	if (gk_parse_i64(s, 1, 1 << 24, &v, "--micro-batch", err) < 0)
		return -1;
	memcpy(field, &v, sizeof(v));
	return 0;
}

static int parse_fit(const char *opt, const char *s, void *field, gk_err *err)
{
	uint64_t v;
	if (gk_parse_size(s, &v, opt, err) < 0)
		return -1;
	if (v == 0)
		return gk_errf(err, "%s '%s': a GPU holds more than 0 bytes", opt, s);
	memcpy(field, &v, sizeof(v));
	return 0;
}

static int parse_gpu(const char *opt, const char *s, void *field, gk_err *err)
{
	const gk_mem_gpu *g = gk_mem_gpu_find(s);
	if (!g)
		return gk_errf(err, "%s '%s': not in the table (see --list-gpus)", opt, s);
	memcpy(field, &g, sizeof(g));
	return 0;
}

static int parse_offload(const char *s)
{
	return !strcmp(s, "cpu") ? GK_MEM_OFFLOAD_ALL :
	       !strcmp(s, "optimizer") ? GK_MEM_OFFLOAD_OPTIMIZER :
	       !strcmp(s, "none") ? GK_MEM_OFFLOAD_NONE : -1;
}

static int parse_attn(const char *s)
{
	return !strcmp(s, "flash") ? 1 : !strcmp(s, "eager") ? 0 : -1;
}

/* --reshard-after-forward, gpu-train's: yes releases, no keeps */
static int parse_keep(const char *s)
{
	return !strcmp(s, "yes") ? 0 : !strcmp(s, "no") ? 1 : -1;
}

/* any dtype with a size, for the KV cache (fp8 included) */
static int parse_kv_dtype(const char *s)
{
	gk_dtype dt = gk_dtype_parse(s);
	return dt && gk_dtype_bits(dt) ? (int)dt : -1;
}

#define SECTION(title) {.kind = GK_OPTK_SECTION, .help = title}
#define INT(nm, sh, a, f, lo, hi, d, h) \
	{.kind = GK_OPTK_INT, .name = nm, .short_name = sh, .arg = a, GK_OPTF(opts, f), \
	 .imin = lo, .imax = hi, .def = d, .help = h}
#define NUM(nm, a, f, lo, hi, h) \
	{.kind = GK_OPTK_NUM, .name = nm, .arg = a, GK_OPTF(opts, f), .min = lo, .max = hi, \
	 .help = h}
#define SIZE(nm, a, f, h) {.kind = GK_OPTK_SIZE, .name = nm, .arg = a, GK_OPTF(opts, f), .help = h}
#define STR(nm, a, f, h) {.kind = GK_OPTK_STR, .name = nm, .arg = a, GK_OPTF(opts, f), .help = h}
#define ENUM(nm, a, f, fn, nms, h) \
	{.kind = GK_OPTK_ENUM, .name = nm, .arg = a, GK_OPTF(opts, f), .parse = fn, \
	 .names = nms, .help = h}
#define FLAG(nm, f, v, h) {.kind = GK_OPTK_FLAG, .name = nm, GK_OPTF(opts, f), .set = v, .help = h}
#define CUSTOM(nm, a, f, fn, h) \
	{.kind = GK_OPTK_CUSTOM, .name = nm, .arg = a, GK_OPTF(opts, f), .custom = fn, .help = h}
#define BIG (INT64_C(1) << 40)
#define STRINGIFY(x) #x
#define XSTR(x) STRINGIFY(x)

/*
 * mem-estimate's options, stated once: getopt's list, the summary of
 * --help and the parser of every argument. The run's defaults are
 * lib/mem's (gk_mem_run_default, gk_mem_fit), so the rows carry none
 * but --top, the tool's own. mem-estimate(1) documents each row (t4000
 * checks both ways).
 */
static const gk_optdef options[] = {
	SECTION("model"),
	STR("config", "FILE", config,
	    "a Hugging Face config.json (gpt2, llama, mistral, gpt_neox)"),
	FLAG("allow-unknown-keys", allow_unknown, 1,
	     "warn about unknown config keys instead of failing"),
	STR("from", "PATH", from,
	    "a safetensors checkpoint: file, index, model directory, step or root"),
	CUSTOM("params", "N", m.params, parse_params,
	       "only a parameter count (7B, 124M, 1.5T): model states only"),
	ENUM("arch", "NAME", arch, gk_mem_arch_parse, "not gpt2, llama or neox",
	     "a model from flags: gpt2 (default), llama or neox"),
	INT("layers", 0, "L", m.layers, 1, BIG, NULL, "blocks"),
	INT("hidden", 0, "H", m.hidden, 1, BIG, NULL, "width"),
	INT("heads", 0, "A", m.heads, 1, BIG, NULL, "attention heads"),
	INT("kv-heads", 0, "N", m.kv_heads, 1, BIG, NULL,
	    "key/value heads (grouped-query attention)"),
	INT("ffn", 0, "N", m.ffn, 1, BIG, NULL, "MLP width"),
	INT("vocab", 0, "N", m.vocab, 1, BIG, NULL, "vocabulary"),
	INT("positions", 0, "N", m.positions, 1, BIG, NULL,
	    "learned positions or the longest context"),
	INT("head-dim", 0, "N", m.head_dim, 1, BIG, NULL,
	    "width of a head, when not hidden / heads"),
	FLAG("tied", tied, 1, "the LM head is the token embedding (GPT-2's default)"),
	FLAG("untied", tied, 0, "the LM head is a matrix of its own (Llama's and NeoX's)"),
	INT("largest-layer", 0, "N", largest, 1, BIG, NULL,
	    "parameters of the largest module (ZeRO-3's gather buffer)"),
	SECTION("training"),
	CUSTOM("precision", "TYPE", r.precision, parse_precision,
	       "bf16 or f16 (mixed, f32 master) or f32; with --infer the weights'"),
	ENUM("optimizer", "NAME", r.opt, gk_mem_opt_parse, "not adamw, sgd, adafactor or adam8bit",
	     "adamw, sgd, adafactor or adam8bit"),
	INT("zero", 0, "0-3", zero, 0, 3, NULL, "ZeRO stage"),
	FLAG("fsdp", zero, 3, "FSDP full sharding: --zero 3"),
	INT("micro-batch", 'b', "N", r.micro_batch, 1, 1 << 24, NULL,
	    "sequences per micro-batch per GPU"),
	CUSTOM("batch", "N", r.micro_batch, parse_batch, "the same as --micro-batch"),
	INT("seq", 's', "N", r.seq, 1, 100000000, NULL,
	    "sequence length (default the model's positions, else 2048)"),
	INT("grad-accum", 0, "N", r.grad_accum, 1, 1 << 24, NULL,
	    "micro-batches per optimizer step"),
	ENUM("recompute", "MODE", r.recompute, gk_mem_recompute_parse,
	     "not none, selective, full or gelu", "none, selective, full or gelu"),
	ENUM("offload", "WHAT", r.offload, parse_offload, "not none, optimizer or cpu",
	     "none, optimizer or cpu: what lives in host RAM"),
	FLAG("grad-f32", r.grad_f32, 1, "an f32 gradient buffer in mixed precision"),
	ENUM("attn", "KIND", r.flash, parse_attn, "not eager or flash",
	     "eager or flash (default: eager to train, flash with --infer)"),
	FLAG("no-dropout", r.dropout, 0, "no dropout masks"),
	FLAG("no-logits-f32", r.logits_f32, 0,
	     "the loss read from 16-bit logits, no f32 copy (gpu-train's)"),
	FLAG("ckpt-copy", r.ckpt_copy, 1,
	     "checkpoints written from a host copy of the state (gpu-train's)"),
	ENUM("compress", "KIND", r.compress, gk_comm_compress_parse, "not none, bf16, f16 or int8",
	     "gpu-train --compress: its error feedback and wire buffers"),
	SIZE("bucket", "SIZE", r.bucket, "gradient bucket size"),
	FLAG("overlap", r.overlap, 1,
	     "gradient buckets reduced while backward runs (default; gpu-train's)"),
	FLAG("no-overlap", r.overlap, 0,
	     "each bucket reduced before the next fills: gpu-train --zero 2\n"
	     "on GPUs keeps one bucket buffer, not three"),
	ENUM("reshard-after-forward", "yes|no", r.keep_gathered, parse_keep, "not yes or no",
	     "ZeRO-3: release a layer's gathered parameters after its forward\n"
	     "(yes, the default) or keep them until its backward (no)"),
	SIZE("reserve", "SIZE", r.reserve, "CUDA context and workspaces (default 1GiB)"),
	SECTION("parallelism"),
	INT("dp", 0, "N", r.dp, 1, 1 << 24, NULL, "data-parallel degree"),
	INT("tp", 0, "N", r.tp, 1, 1 << 16, NULL, "tensor-parallel degree"),
	INT("pp", 0, "N", r.pp, 1, 1 << 16, NULL, "pipeline-parallel degree"),
	ENUM("pp-schedule", "NAME", r.pp_sched, gk_mem_pp_sched_parse,
	     "not 1f1b, gpipe or interleaved",
	     "gpu-train's pipeline schedule: 1f1b (default), gpipe or\n"
	     "interleaved, its micro-batches' activations in flight"),
	INT("pp-chunks", 0, "V", r.pp_chunks, 1, 1 << 16, NULL,
	    "--pp-schedule interleaved: chunks of layers a stage"),
	INT("pp-stage", 0, "S", pp_stage, 0, 1 << 16, NULL,
	    "the pipeline stage to report (default the more loaded of\n"
	    "the first and the last)"),
	FLAG("sp", r.sp, 1, "Megatron sequence parallelism"),
	FLAG("sequence-parallel", r.sp, 1, "--sp (gpu-train's name)"),
	INT("gpus-per-node", 0, "N", r.gpus_per_node, 1, 1 << 16, NULL,
	    "GPUs a node holds: host RAM is per node"),
	SECTION("inference"),
	FLAG("infer", r.infer, 1, "weights and KV cache, no training state"),
	ENUM("kv-dtype", "TYPE", r.kv_dtype, parse_kv_dtype, "not a dtype",
	     "the KV cache's element type (default the precision)"),
	SECTION("fit"),
	CUSTOM("fit", "SIZE", req.capacity, parse_fit,
	       "rank the training configurations that fit SIZE per GPU"),
	CUSTOM("gpu", "NAME", req.gpu, parse_gpu,
	       "rank those that fit this GPU (see --list-gpus), costed on it;\n"
	       "the cost model's GPU is otherwise " GK_MEM_FIT_GPU),
	FLAG("list-gpus", list_gpus, 1, "the GPUs --gpu knows"),
	INT("world", 0, "N", req.world, 1, 1 << 24, NULL, "GPUs in the job (default dp x tp x pp)"),
	INT("global-batch", 0, "N", req.global_batch, 1, 1 << 24, NULL,
	    "sequences per step (default dp x micro-batch x grad-accum)"),
	INT("top", 0, "N", top, 1, 100, "5", "configurations printed"),
	NUM("inter-bw", "GB/s", req.inter_gbs, 0.001, 1e6,
	    "per-GPU network bandwidth between nodes (default " XSTR(GK_MEM_FIT_INTER_GBS) ")"),
	SECTION("output"),
	FLAG("si", si, 1, "sizes in GB (powers of 1000), not GiB"),
	FLAG("explain", explain, 1, "each term's formula, with numbers, and its source"),
	{.kind = GK_OPTK_END},
};

static double unit(const opts *o) { return o->si ? 1e9 : 1073741824.0; }
static const char *uname(const opts *o) { return o->si ? "GB" : "GiB"; }

/* 124439808 -> "124,439,808" */
static char *commas(uint64_t v, char *buf)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v), j = 0;
	for (int i = 0; i < n; i++) {
		buf[j++] = tmp[i];
		if ((n - i - 1) % 3 == 0 && i < n - 1)
			buf[j++] = ',';
	}
	buf[j] = 0;
	return buf;
}

static void describe_run(const gk_mem_run *r, char *buf, size_t len)
{
	if (r->infer)
		snprintf(buf, len, "inference %s, KV cache %s, batch %lld, seq "
			 "%lld, tp %lld pp %lld", gk_dtype_name(r->precision),
			 gk_dtype_name(r->kv_dtype ? r->kv_dtype : r->precision),
			 (long long)r->micro_batch, (long long)r->seq,
			 (long long)r->tp, (long long)r->pp);
	else
		snprintf(buf, len, "training %s%s, %s, ZeRO-%d, dp %lld tp %lld "
			 "pp %lld%s, micro-batch %lld x seq %lld, %lld "
			 "micro-batches/step, recompute %s%s%s%s%s",
			 gk_dtype_name(r->precision),
			 r->precision == GK_DT_F32 ? "" : " mixed",
			 gk_mem_opt_name(r->opt), r->zero, (long long)r->dp,
			 (long long)r->tp, (long long)r->pp, r->sp ? " +sp" : "",
			 (long long)r->micro_batch, (long long)r->seq,
			 (long long)r->grad_accum,
			 gk_mem_recompute_name(r->recompute),
			 r->offload == GK_MEM_OFFLOAD_ALL ? ", offload cpu" :
			 r->offload ? ", offload optimizer" : "",
			 r->flash ? ", flash attention" : "",
			 r->dropout ? "" : ", no dropout",
			 r->logits_f32 || r->precision == GK_DT_F32 ? "" : ", no f32 logits");
}

/* What of a checkpoint was not counted, so that its count can be checked. */
static void print_left_out(const gk_mem_model *m)
{
	char a[32], b[32];
	if (m->left_out)
		printf("note:  left out %s tensors that are not parameters (%s elements): "
		       "buffers such as causal masks, integer and bool tensors\n",
		       commas(m->left_out, a), commas(m->left_out_elems, b));
}

static void print_text(const opts *o, const gk_mem_model *m,
		       const gk_mem_run *r, const gk_mem_est *e)
{
	char a[32], b[32], run[300];
	describe_run(r, run, sizeof(run));
	printf("model: %s, %s parameters (%s)\n", gk_mem_arch_name(m->arch),
	       commas(m->params, a), o->source);
	print_left_out(m);
	printf("run:   %s\n", run);
	if (r->pp > 1 && !r->infer && m->arch != GK_MEM_ARCH_PARAMS)
		printf("per GPU, pipeline stage %d of %lld (%s parameters on this rank; %s, "
		       "%lld %s in flight):\n", e->stage, (long long)r->pp,
		       commas(e->stage_params, b), gk_mem_pp_sched_name(r->pp_sched),
		       (long long)e->inflight,
		       r->pp_sched == GK_MEM_PP_INTERLEAVED ? "micro-batch chunks" : "micro-batches");
	else
		printf("per GPU, pipeline stage %d of %lld (%s parameters on this rank):\n",
		       e->stage, (long long)r->pp, commas(e->stage_params, b));
	for (int i = 0; i < e->nparts; i++) {
		const gk_mem_part *p = &e->part[i];
		if (p->host)
			continue;
		printf("  %-24s %12.3f %s\n", p->key, p->bytes / unit(o),
		       uname(o));
		if (o->explain)
			printf("      = %s\n      = %s\n      [%s]\n", p->formula,
			       p->values, p->source);
	}
	printf("  %-24s %12.3f %s\n", "total", e->total / unit(o), uname(o));
	for (int i = 0; i < e->nparts; i++) {
		const gk_mem_part *p = &e->part[i];
		if (!p->host)
			continue;
		if (p->host == 2)
			printf("host RAM per rank: %-24s %12.3f %s\n", p->key, p->bytes / unit(o),
			       uname(o));
		else
			printf("host RAM per node %15.3f %s\n", p->bytes / unit(o), uname(o));
		if (o->explain)
			printf("      = %s\n      = %s\n      [%s]\n", p->formula,
			       p->values, p->source);
	}
	if (o->explain && !r->infer && m->arch != GK_MEM_ARCH_PARAMS)
		printf("layout: %s attention, %s dropout masks. Korthikanti's "
		       "figures assume eager attention with dropout;\n"
		       "        gpu-train keeps no dropout masks, fuses "
		       "attention on a GPU and no f32 copy of the logits:\n"
		       "        --no-dropout --attn flash --no-logits-f32\n",
		       r->flash ? "fused (flash)" : "eager",
		       r->dropout ? "with" : "without");
	if (m->arch == GK_MEM_ARCH_PARAMS && !r->infer)
		printf("note: activations need the architecture (--config or "
		       "--layers --hidden --heads); model states only\n");
}

static json_t *run_json(const gk_mem_run *r)
{
	return json_pack(
		"{s:b s:s s:s s:i s:I s:I s:I s:b s:I s:I s:I s:s s:s s:b s:b s:b s:b}",
		"infer", r->infer, "precision", gk_dtype_name(r->precision),
		"optimizer", gk_mem_opt_name(r->opt), "zero", r->zero, "dp",
		(json_int_t)r->dp, "tp", (json_int_t)r->tp, "pp",
		(json_int_t)r->pp, "sp", r->sp, "micro_batch",
		(json_int_t)r->micro_batch, "seq", (json_int_t)r->seq,
		"grad_accum", (json_int_t)r->grad_accum, "recompute",
		gk_mem_recompute_name(r->recompute), "offload",
		r->offload == GK_MEM_OFFLOAD_ALL ? "cpu" :
		r->offload ? "optimizer" : "none", "grad_f32", r->grad_f32, "flash",
		r->flash, "dropout", r->dropout, "logits_f32", r->logits_f32);
}

static json_t *model_json(const gk_mem_model *m, const char *source)
{
	json_t *j = json_pack("{s:s s:s s:I}", "source", source, "arch",
			      gk_mem_arch_name(m->arch), "params",
			      (json_int_t)m->params);
	if (m->arch != GK_MEM_ARCH_PARAMS) {
		json_object_set_new(j, "layers", json_integer(m->layers));
		json_object_set_new(j, "hidden", json_integer(m->hidden));
		json_object_set_new(j, "heads", json_integer(m->heads));
		json_object_set_new(j, "kv_heads", json_integer(m->kv_heads));
		json_object_set_new(j, "ffn", json_integer(m->ffn));
		json_object_set_new(j, "vocab", json_integer(m->vocab));
		json_object_set_new(j, "tied", json_boolean(m->tied));
	}
	if (m->dtype) {
		json_t *d = json_object();
		for (int i = 0; i < GK_DT_COUNT; i++)
			if (m->dtype_params[i])
				json_object_set_new(d, gk_dtype_name(i),
					json_integer(m->dtype_params[i]));
		json_object_set_new(j, "dtypes", d);
		json_object_set_new(j, "left_out", json_pack("{s:I s:I}", "tensors",
			(json_int_t)m->left_out, "elements", (json_int_t)m->left_out_elems));
	}
	return j;
}

static json_t *est_json(const gk_mem_est *e, int explain)
{
	json_t *bytes = json_object(), *j = json_object();
	for (int i = 0; i < e->nparts; i++)
		json_object_set_new(bytes, e->part[i].key,
				    json_integer(e->part[i].bytes));
	json_object_set_new(j, "stage", json_integer(e->stage));
	json_object_set_new(j, "stage_params", json_integer(e->stage_params));
	json_object_set_new(j, "inflight", json_integer(e->inflight));
	json_object_set_new(j, "bytes", bytes);
	json_object_set_new(j, "model_states", json_integer(e->model_states));
	json_object_set_new(j, "total", json_integer(e->total));
	json_object_set_new(j, "host_per_node", json_integer(e->host));
	if (e->host_rank)
		json_object_set_new(j, "host_per_rank", json_integer(e->host_rank));
	if (explain) {
		json_t *x = json_array();
		for (int i = 0; i < e->nparts; i++)
			json_array_append_new(x, json_pack(
				"{s:s s:s s:s s:s}", "key", e->part[i].key,
				"formula", e->part[i].formula, "values",
				e->part[i].values, "source", e->part[i].source));
		json_object_set_new(j, "explain", x);
	}
	return j;
}

static int do_fit(opts *o, const gk_mem_model *m, gk_mem_run *r)
{
	enum { MAXTOP = 100 };
	gk_mem_cand out[MAXTOP];
	int nout, tried, fits;
	gk_err err;
	/* the capacity comes from --fit, else from --gpu's row of the table */
	const gk_mem_gpu *named = o->req.gpu;
	if (gk_mem_fit(m, r, &o->req, out, o->top, &nout, &tried, &fits, &err))
		return gk_cli_fail(&cli, &err);
	uint64_t cap = o->req.capacity;
	const gk_mem_gpu *gpu = o->req.gpu;
	int64_t world = o->req.world, gb = o->req.global_batch;
	if (cli.json) {
		json_t *c = json_array();
		for (int i = 0; i < nout; i++) {
			json_t *x = run_json(&out[i].run);
			json_object_set_new(x, "total", json_integer(out[i].total));
			json_object_set_new(x, "step_s", json_real(out[i].step_s));
			json_object_set_new(x, "compute_s", json_real(out[i].compute_s));
			json_object_set_new(x, "recompute_s", json_real(out[i].recompute_s));
			json_object_set_new(x, "bubble_s", json_real(out[i].bubble_s));
			json_object_set_new(x, "comm_s", json_real(out[i].comm_s));
			json_object_set_new(x, "comm_bytes", json_real(out[i].comm_bytes));
			json_array_append_new(c, x);
		}
		json_t *j = json_pack("{s:o s:I s:s s:I s:I s:i s:i s:o}",
			"model", model_json(m, o->source), "capacity",
			(json_int_t)cap, "cost_gpu", gpu->name, "world",
			(json_int_t)world, "global_batch", (json_int_t)gb,
			"tried", tried, "fits", fits, "candidates", c);
		gk_json_dump(stdout, j, 1, &err);
		json_decref(j);
		return nout ? 0 : 1;
	}
	char a[32];
	printf("model: %s, %s parameters (%s)\n", gk_mem_arch_name(m->arch),
	       commas(m->params, a), o->source);
	print_left_out(m);
	printf("fit:   %.2f %s per GPU%s%s%s, %lld GPUs, global batch %lld x seq "
	       "%lld: %d of %d configurations fit\n", cap / unit(o), uname(o),
	       named ? " (" : "", named ? named->name : "",
	       named ? ")" : "", (long long)world,
	       (long long)gb, (long long)r->seq, fits, tried);
	printf("cost:  seconds/step on %s: 6*Psi*tokens at 50%% of %g TFLOP/s, "
	       "+recompute, +bubble (p-1)/m,\n       +communication at %g GB/s "
	       "NVLink, %g GB/s between nodes (no overlap assumed)\n",
	       gpu->name, gpu->tflops, gpu->nvlink_gbs, o->req.inter_gbs);
	if (!nout) {
		gk_err_clear(&err);
		gk_errf(&err, "fit: no configuration fits %.2f %s per GPU",
			cap / unit(o), uname(o));
		return gk_cli_fail(&cli, &err);
	}
	printf("%4s %4s %3s %3s %4s %3s %-9s %5s %5s %9s %8s %8s %8s %8s %8s\n",
	       "rank", "zero", "tp", "pp", "dp", "sp", "recompute", "mbs",
	       "accum", uname(o), "step_s", "compute", "recomp", "bubble",
	       "comm");
	for (int i = 0; i < nout; i++) {
		const gk_mem_run *x = &out[i].run;
		printf("%4d %4d %3lld %3lld %4lld %3s %-9s %5lld %5lld %9.2f "
		       "%8.3f %8.3f %8.3f %8.3f %8.3f\n", i + 1, x->zero,
		       (long long)x->tp, (long long)x->pp, (long long)x->dp,
		       x->sp ? "yes" : "no", gk_mem_recompute_name(x->recompute),
		       (long long)x->micro_batch, (long long)x->grad_accum,
		       out[i].total / unit(o), out[i].step_s, out[i].compute_s,
		       out[i].recompute_s, out[i].bubble_s, out[i].comm_s);
	}
	return 0;
}

static void list_gpus(const opts *o)
{
	printf("%-12s %10s %8s %8s\n", "gpu", uname(o), "TFLOP/s", "GB/s");
	for (const gk_mem_gpu *g = gk_mem_gpus; g->name; g++)
		printf("%-12s %10.2f %8g %8g\n", g->name, g->bytes / unit(o),
		       g->tflops, g->nvlink_gbs);
}

/* Parse the command line into o and refuse what cannot describe one run. */
static void parse_args(int argc, char **argv, opts *o)
{
	memset(o, 0, sizeof(*o));
	gk_mem_run_default(&o->r);
	o->m.arch = GK_MEM_ARCH_PARAMS;
	o->source = "flags";
	o->arch = o->tied = o->zero = -1;
	o->pp_stage = -1;
	optind = gk_optable_parse(&cli, options, 0, o, argc, argv, NULL);
	if (optind < argc)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
	if (o->list_gpus)
		return; /* needs no model */
	/* the flags that make a model of a shape (--kv-heads and the like
	 * only refine one) */
	int have_arch = o->m.layers || o->m.hidden || o->m.heads || o->tied >= 0 || o->arch >= 0;
	int sources = !!o->config + !!o->from + !!o->m.params + have_arch;
	if (sources == 0)
		gk_cli_usage_error(&cli, "no model: give --config, --from, --params or the architecture");
	if (o->config && have_arch)
		gk_cli_usage_error(&cli, "--config and architecture flags both describe the model");
	if (o->m.params && (o->config || have_arch))
		gk_cli_usage_error(&cli, "--params and an architecture both give the parameter count");
	if (o->m.params && o->from)
		gk_cli_usage_error(&cli, "--params and --from both give the parameter count");
	if (o->req.capacity && o->req.gpu)
		gk_cli_usage_error(&cli, "--fit and --gpu both give the capacity");
	if ((o->req.capacity || o->req.gpu) && (o->r.pp_sched || o->pp_stage >= 0))
		gk_cli_usage_error(&cli, "--fit ranks 1F1B pipelines' most loaded stages: "
				   "drop --pp-schedule and --pp-stage");
	if (o->pp_stage >= 0 && o->pp_stage >= o->r.pp)
		gk_cli_usage_error(&cli, "--pp-stage %lld: not one of the %lld stages "
				   "(0 to %lld)", (long long)o->pp_stage, (long long)o->r.pp,
				   (long long)o->r.pp - 1);
	if (o->zero >= 0 && o->r.infer)
		gk_cli_usage_error(&cli, "--zero applies to training, not --infer");
	if (o->zero >= 0)
		o->r.zero = o->zero;
	if (have_arch && o->arch < 0)
		o->arch = GK_MEM_ARCH_GPT2;
}

/*
 * The model of --config, the shape flags or --params, then --from's
 * checkpoint over it: 0, or the exit status of a failure.
 */
static int load_model(opts *o)
{
	gk_err err;
	gk_mem_model *m = &o->m;
	if (o->config) {
		gk_strlist unknown = {0};
		if (gk_mem_model_from_config(m, o->config, o->allow_unknown, &unknown, &err))
			return gk_cli_fail(&cli, &err);
		for (size_t i = 0; i < unknown.n && !cli.quiet; i++)
			gk_cli_warn(&cli, "config '%s': ignoring unknown key '%s'", o->config,
				    unknown.v[i]);
		gk_strlist_free(&unknown);
		o->source = o->config;
	} else if (o->arch >= 0) {
		if (gk_mem_model_from_shape(m, o->arch, o->tied, o->r.seq, &err))
			gk_cli_usage_error(&cli, "%s", err.msg);
	} else if (m->params) {
		if (gk_mem_model_finish(m, &err))
			gk_cli_usage_error(&cli, "%s", err.msg);
	}
	if (o->from) {
		if (gk_mem_model_add_checkpoint(m, o->from, &err))
			return gk_cli_fail(&cli, &err);
		if (!o->config && o->arch < 0)
			o->source = o->from;
	}
	if (o->largest)
		m->largest = o->largest;
	return 0;
}

/*
 * A sequence longer than the model's positions: the figures still add
 * up, but GPT-2's learned positions have no embedding past the last (no
 * trainer can run the shape; gpu-train refuses it), and a RoPE model was
 * not trained that far.
 */
static void seq_check(const opts *o)
{
	const gk_mem_model *m = &o->m;
	long long seq = (long long)o->r.seq, pos = (long long)m->positions;
	if (cli.quiet || pos <= 0 || seq <= pos)
		return;
	if (m->arch == GK_MEM_ARCH_GPT2)
		gk_cli_warn(&cli, "--seq %lld exceeds the model's %lld positions: GPT-2's learned "
			    "position embeddings end there, so no run has this shape (gpu-train "
			    "refuses it); give --positions %lld, or --seq %lld or less",
			    seq, pos, seq, pos);
	else
		gk_cli_warn(&cli, "--seq %lld exceeds the model's %lld positions "
			    "(max_position_embeddings): it was not trained that far; the memory "
			    "figures hold, the model's output may not", seq, pos);
}

/* One run's estimate, as a table or a JSON document. */
static int estimate(const opts *o)
{
	gk_err err;
	gk_mem_est e;
	if (o->pp_stage >= 0 ? gk_mem_estimate_stage(&o->m, &o->r, (int)o->pp_stage,
						  o->explain || cli.json, &e, &err)
			     : gk_mem_estimate(&o->m, &o->r, o->explain || cli.json, &e, &err))
		gk_cli_usage_error(&cli, "%s", err.msg);
	if (!cli.json) {
		print_text(o, &o->m, &o->r, &e);
		return 0;
	}
	json_t *rj = run_json(&o->r);
	json_object_set_new(rj, "pp_schedule", json_string(gk_mem_pp_sched_name(o->r.pp_sched)));
	json_object_set_new(rj, "pp_chunks", json_integer(o->r.pp_chunks));
	json_t *j = json_pack("{s:o s:o s:s}", "model", model_json(&o->m, o->source), "run",
			      rj, "units", "bytes");
	json_object_update_new(j, est_json(&e, o->explain));
	int rc = gk_json_dump(stdout, j, 1, &err);
	json_decref(j);
	return rc ? gk_cli_fail(&cli, &err) : 0;
}

int main(int argc, char **argv)
{
	opts o;
	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "mem-estimate", usage ? usage : synopsis);
	parse_args(argc, argv, &o);
	if (o.list_gpus) {
		list_gpus(&o);
		return gk_cli_finish(&cli, 0);
	}
	int status = load_model(&o);
	if (status)
		return gk_cli_finish(&cli, status);
	gk_mem_run_resolve(&o.r, &o.m);
	seq_check(&o);
	if (o.req.capacity || o.req.gpu) {
		if (o.r.infer)
			gk_cli_usage_error(&cli, "--fit searches training configurations; drop --infer");
		return gk_cli_finish(&cli, do_fit(&o, &o.m, &o.r));
	}
	return gk_cli_finish(&cli, estimate(&o));
}
