/*
 * mem-estimate - per-GPU memory of transformer training and inference, and
 * the cheapest parallel configuration that fits a GPU.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "mem/mem.h"

static const char usage[] =
	"usage: mem-estimate [--config config.json | --from FILE|DIR |\n"
	"                    --params N | --layers L --hidden H --heads A ...]\n"
	"                    [--precision f32|bf16|f16] [--optimizer NAME]\n"
	"                    [--zero 0-3 | --fsdp] [--dp N] [--tp N] [--pp N] [--sp]\n"
	"                    [-b micro-batch] [-s seq] [--grad-accum N]\n"
	"                    [--recompute none|selective|full|gelu]\n"
	"                    [--offload none|optimizer|cpu]\n"
	"                    [--fit SIZE | --gpu NAME] [--si] [--json] [--explain]\n"
	"       mem-estimate --infer [--batch N] [--seq N] [--kv-dtype T] ...\n"
	"       mem-estimate --list-gpus\n"
	"Model: --arch gpt2|llama|neox --layers --hidden --heads --kv-heads --ffn\n"
	"       --vocab --positions --head-dim --tied | --untied --largest-layer N\n"
	"       --allow-unknown-keys (warn about config keys instead of failing)\n"
	"Train: --optimizer adamw|sgd|adafactor|adam8bit --grad-f32\n"
	"       --attn eager|flash --no-dropout --gpus-per-node N --bucket SIZE\n"
	"       --reserve SIZE (CUDA context and workspaces, default 1GiB)\n"
	"Fit:   --world N --global-batch N --top N --inter-bw GB/s (default 25)\n";

enum {
	O_PARAMS = GK_OPT_FIRST_TOOL, O_LAYERS, O_HIDDEN, O_HEADS, O_KVHEADS,
	O_FFN, O_VOCAB, O_POS, O_HEADDIM, O_TIED, O_UNTIED, O_ARCH, O_CONFIG, O_FROM,
	O_UNKNOWN, O_PREC, O_OPT, O_ZERO, O_FSDP, O_DP, O_TP, O_PP, O_SP,
	O_ACCUM, O_RECOMP, O_OFFLOAD, O_GRADF32, O_FLASH, O_NODROP, O_GPN,
	O_BUCKET, O_RESERVE, O_LARGEST, O_INFER, O_KVDT, O_SI, O_EXPLAIN,
	O_FIT, O_GPU, O_WORLD, O_GBATCH, O_TOP, O_INTER, O_LIST
};

static const struct option longopts[] = {
	GK_CLI_LONGOPTS, GK_CLI_LONGOPT_JSON,
	{"params", required_argument, NULL, O_PARAMS},
	{"layers", required_argument, NULL, O_LAYERS},
	{"hidden", required_argument, NULL, O_HIDDEN},
	{"heads", required_argument, NULL, O_HEADS},
	{"kv-heads", required_argument, NULL, O_KVHEADS},
	{"ffn", required_argument, NULL, O_FFN},
	{"vocab", required_argument, NULL, O_VOCAB},
	{"positions", required_argument, NULL, O_POS},
	{"head-dim", required_argument, NULL, O_HEADDIM},
	{"tied", no_argument, NULL, O_TIED},
	{"untied", no_argument, NULL, O_UNTIED},
	{"arch", required_argument, NULL, O_ARCH},
	{"config", required_argument, NULL, O_CONFIG},
	{"from", required_argument, NULL, O_FROM},
	{"allow-unknown-keys", no_argument, NULL, O_UNKNOWN},
	{"precision", required_argument, NULL, O_PREC},
	{"optimizer", required_argument, NULL, O_OPT},
	{"zero", required_argument, NULL, O_ZERO},
	{"fsdp", no_argument, NULL, O_FSDP},
	{"dp", required_argument, NULL, O_DP},
	{"tp", required_argument, NULL, O_TP},
	{"pp", required_argument, NULL, O_PP},
	{"sp", no_argument, NULL, O_SP},
	{"micro-batch", required_argument, NULL, 'b'},
	{"batch", required_argument, NULL, 'b'},
	{"seq", required_argument, NULL, 's'},
	{"grad-accum", required_argument, NULL, O_ACCUM},
	{"recompute", required_argument, NULL, O_RECOMP},
	{"offload", required_argument, NULL, O_OFFLOAD},
	{"grad-f32", no_argument, NULL, O_GRADF32},
	{"attn", required_argument, NULL, O_FLASH},
	{"no-dropout", no_argument, NULL, O_NODROP},
	{"gpus-per-node", required_argument, NULL, O_GPN},
	{"bucket", required_argument, NULL, O_BUCKET},
	{"reserve", required_argument, NULL, O_RESERVE},
	{"largest-layer", required_argument, NULL, O_LARGEST},
	{"infer", no_argument, NULL, O_INFER},
	{"kv-dtype", required_argument, NULL, O_KVDT},
	{"si", no_argument, NULL, O_SI},
	{"explain", no_argument, NULL, O_EXPLAIN},
	{"fit", required_argument, NULL, O_FIT},
	{"gpu", required_argument, NULL, O_GPU},
	{"world", required_argument, NULL, O_WORLD},
	{"global-batch", required_argument, NULL, O_GBATCH},
	{"top", required_argument, NULL, O_TOP},
	{"inter-bw", required_argument, NULL, O_INTER},
	{"list-gpus", no_argument, NULL, O_LIST},
	{NULL, 0, NULL, 0},
};

typedef struct opts {
	const char *config, *from, *source;
	int allow_unknown, si, explain, list_gpus, top, fit_set;
	gk_mem_fit_req req; /* --world --global-batch --fit --gpu --inter-bw */
} opts;

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
			 "micro-batches/step, recompute %s%s%s%s",
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
			 r->dropout ? "" : ", no dropout");
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
		printf("host RAM per node %15.3f %s\n", p->bytes / unit(o),
		       uname(o));
		if (o->explain)
			printf("      = %s\n      = %s\n      [%s]\n", p->formula,
			       p->values, p->source);
	}
	if (o->explain && !r->infer && m->arch != GK_MEM_ARCH_PARAMS)
		printf("layout: %s attention, %s dropout masks. Korthikanti's "
		       "figures assume eager attention with dropout;\n"
		       "        gpu-train keeps no dropout masks and fuses "
		       "attention: --no-dropout --attn flash\n",
		       r->flash ? "fused (flash)" : "eager",
		       r->dropout ? "with" : "without");
	if (m->arch == GK_MEM_ARCH_PARAMS && !r->infer)
		printf("note: activations need the architecture (--config or "
		       "--layers --hidden --heads); model states only\n");
}

static json_t *run_json(const gk_mem_run *r)
{
	return json_pack(
		"{s:b s:s s:s s:i s:I s:I s:I s:b s:I s:I s:I s:s s:s s:b s:b s:b}",
		"infer", r->infer, "precision", gk_dtype_name(r->precision),
		"optimizer", gk_mem_opt_name(r->opt), "zero", r->zero, "dp",
		(json_int_t)r->dp, "tp", (json_int_t)r->tp, "pp",
		(json_int_t)r->pp, "sp", r->sp, "micro_batch",
		(json_int_t)r->micro_batch, "seq", (json_int_t)r->seq,
		"grad_accum", (json_int_t)r->grad_accum, "recompute",
		gk_mem_recompute_name(r->recompute), "offload",
		r->offload == GK_MEM_OFFLOAD_ALL ? "cpu" :
		r->offload ? "optimizer" : "none", "grad_f32", r->grad_f32, "flash",
		r->flash, "dropout", r->dropout);
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
	json_object_set_new(j, "bytes", bytes);
	json_object_set_new(j, "model_states", json_integer(e->model_states));
	json_object_set_new(j, "total", json_integer(e->total));
	json_object_set_new(j, "host_per_node", json_integer(e->host));
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

static int do_fit(gk_cli *cli, opts *o, const gk_mem_model *m,
		  gk_mem_run *r)
{
	enum { MAXTOP = 100 };
	gk_mem_cand out[MAXTOP];
	int nout, tried, fits;
	gk_err err;
	/* the capacity comes from --fit, else from --gpu's row of the table */
	const gk_mem_gpu *named = o->req.gpu;
	if (gk_mem_fit(m, r, &o->req, out, o->top, &nout, &tried, &fits, &err))
		return gk_cli_fail(cli, &err);
	uint64_t cap = o->req.capacity;
	const gk_mem_gpu *gpu = o->req.gpu;
	int64_t world = o->req.world, gb = o->req.global_batch;
	if (cli->json) {
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
		return gk_cli_fail(cli, &err);
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

int main(int argc, char **argv)
{
	gk_cli cli;
	gk_cli_init(&cli, "mem-estimate", usage);
	gk_mem_model m = {.arch = GK_MEM_ARCH_PARAMS};
	gk_mem_run r;
	gk_mem_run_default(&r);
	opts o = {.top = 5, .source = "flags"};
	int have_arch = 0, arch = GK_MEM_ARCH_GPT2, zero_set = 0, tied = -1;
	int64_t largest = 0;
	gk_err err;
	int c;
	const int64_t BIG = INT64_C(1) << 40;

	while ((c = getopt_long(argc, argv, "hqvb:s:", longopts, NULL)) != -1) {
		if (gk_cli_common(&cli, c))
			continue;
		switch (c) {
		case O_PARAMS:
			if (gk_mem_parse_count(optarg, &m.params, "--params", &err))
				gk_cli_usage_error(&cli, "%s", err.msg);
			break;
		case O_LAYERS: m.layers = gk_cli_i64(&cli, "--layers", optarg, 1, BIG); have_arch = 1; break;
		case O_HIDDEN: m.hidden = gk_cli_i64(&cli, "--hidden", optarg, 1, BIG); have_arch = 1; break;
		case O_HEADS: m.heads = gk_cli_i64(&cli, "--heads", optarg, 1, BIG); have_arch = 1; break;
		case O_KVHEADS: m.kv_heads = gk_cli_i64(&cli, "--kv-heads", optarg, 1, BIG); break;
		case O_FFN: m.ffn = gk_cli_i64(&cli, "--ffn", optarg, 1, BIG); break;
		case O_VOCAB: m.vocab = gk_cli_i64(&cli, "--vocab", optarg, 1, BIG); break;
		case O_POS: m.positions = gk_cli_i64(&cli, "--positions", optarg, 1, BIG); break;
		case O_HEADDIM: m.head_dim = gk_cli_i64(&cli, "--head-dim", optarg, 1, BIG); break;
		case O_TIED: tied = 1; have_arch = 1; break;
		case O_UNTIED: tied = 0; have_arch = 1; break;
		case O_ARCH:
			if ((arch = gk_mem_arch_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "--arch '%s': not gpt2, llama or neox", optarg);
			have_arch = 1;
			break;
		case O_CONFIG: o.config = optarg; break;
		case O_FROM: o.from = optarg; break;
		case O_UNKNOWN: o.allow_unknown = 1; break;
		case O_PREC:
			if (gk_dtype_parse_float(optarg, "--precision", &r.precision, &err))
				gk_cli_usage_error(&cli, "%s", err.msg);
			break;
		case O_OPT:
			if ((c = gk_mem_opt_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "--optimizer '%s': not adamw, sgd, adafactor or adam8bit", optarg);
			r.opt = c;
			break;
		case O_ZERO: r.zero = gk_cli_i64(&cli, "--zero", optarg, 0, 3); zero_set = 1; break;
		case O_FSDP: r.zero = 3; zero_set = 1; break;
		case O_DP: r.dp = gk_cli_i64(&cli, "--dp", optarg, 1, 1 << 24); break;
		case O_TP: r.tp = gk_cli_i64(&cli, "--tp", optarg, 1, 1 << 16); break;
		case O_PP: r.pp = gk_cli_i64(&cli, "--pp", optarg, 1, 1 << 16); break;
		case O_SP: r.sp = 1; break;
		case 'b': r.micro_batch = gk_cli_i64(&cli, "--micro-batch", optarg, 1, 1 << 24); break;
		case 's': r.seq = gk_cli_i64(&cli, "--seq", optarg, 1, 100000000); break;
		case O_ACCUM: r.grad_accum = gk_cli_i64(&cli, "--grad-accum", optarg, 1, 1 << 24); break;
		case O_RECOMP:
			if ((c = gk_mem_recompute_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "--recompute '%s': not none, selective, full or gelu", optarg);
			r.recompute = c;
			break;
		case O_OFFLOAD:
			if (strcmp(optarg, "cpu") == 0)
				r.offload = GK_MEM_OFFLOAD_ALL;
			else if (strcmp(optarg, "optimizer") == 0)
				r.offload = GK_MEM_OFFLOAD_OPTIMIZER;
			else if (strcmp(optarg, "none") == 0)
				r.offload = GK_MEM_OFFLOAD_NONE;
			else
				gk_cli_usage_error(&cli, "--offload '%s': not none, optimizer or cpu", optarg);
			break;
		case O_GRADF32: r.grad_f32 = 1; break;
		case O_FLASH:
			if (strcmp(optarg, "flash") == 0)
				r.flash = 1;
			else if (strcmp(optarg, "eager") == 0)
				r.flash = 0;
			else
				gk_cli_usage_error(&cli, "--attn '%s': not eager or flash", optarg);
			break;
		case O_NODROP: r.dropout = 0; break;
		case O_GPN: r.gpus_per_node = gk_cli_i64(&cli, "--gpus-per-node", optarg, 1, 1 << 16); break;
		case O_BUCKET: r.bucket = gk_cli_size(&cli, "--bucket", optarg); break;
		case O_RESERVE: r.reserve = gk_cli_size(&cli, "--reserve", optarg); break;
		case O_LARGEST: largest = gk_cli_i64(&cli, "--largest-layer", optarg, 1, BIG); break;
		case O_INFER: r.infer = 1; break;
		case O_KVDT:
			r.kv_dtype = gk_dtype_parse(optarg);
			if (!r.kv_dtype || !gk_dtype_bits(r.kv_dtype))
				gk_cli_usage_error(&cli, "--kv-dtype '%s': not a dtype", optarg);
			break;
		case O_SI: o.si = 1; break;
		case O_EXPLAIN: o.explain = 1; break;
		case O_FIT:
			o.req.capacity = gk_cli_size(&cli, "--fit", optarg);
			if (o.req.capacity == 0)
				gk_cli_usage_error(&cli, "--fit '%s': a GPU holds more than 0 bytes", optarg);
			o.fit_set = 1;
			break;
		case O_GPU:
			if (!(o.req.gpu = gk_mem_gpu_find(optarg)))
				gk_cli_usage_error(&cli, "--gpu '%s': not in the table (see --list-gpus)", optarg);
			break;
		case O_WORLD: o.req.world = gk_cli_i64(&cli, "--world", optarg, 1, 1 << 24); break;
		case O_GBATCH: o.req.global_batch = gk_cli_i64(&cli, "--global-batch", optarg, 1, 1 << 24); break;
		case O_TOP: o.top = gk_cli_i64(&cli, "--top", optarg, 1, 100); break;
		case O_INTER:
			if (gk_parse_double(optarg, 0.001, 1e6, &o.req.inter_gbs, "--inter-bw", &err))
				gk_cli_usage_error(&cli, "%s", err.msg);
			break;
		case O_LIST: o.list_gpus = 1; break;
		default:
			gk_cli_usage_error(&cli, "unexpected option");
		}
	}
	if (optind < argc)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
	if (o.list_gpus) {
		list_gpus(&o);
		return gk_cli_finish(&cli, 0);
	}
	int sources = !!o.config + !!o.from + !!m.params + have_arch;
	if (sources == 0)
		gk_cli_usage_error(&cli, "no model: give --config, --from, --params or the architecture");
	if (o.config && have_arch)
		gk_cli_usage_error(&cli, "--config and architecture flags both describe the model");
	if (m.params && (o.config || have_arch))
		gk_cli_usage_error(&cli, "--params and an architecture both give the parameter count");
	if (m.params && o.from)
		gk_cli_usage_error(&cli, "--params and --from both give the parameter count");
	if (o.fit_set && o.req.gpu)
		gk_cli_usage_error(&cli, "--fit and --gpu both give the capacity");
	if (zero_set && r.infer)
		gk_cli_usage_error(&cli, "--zero applies to training, not --infer");

	if (o.config) {
		gk_strlist unknown = {0};
		if (gk_mem_model_from_config(&m, o.config, o.allow_unknown,
					     &unknown, &err))
			return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
		for (size_t i = 0; i < unknown.n && !cli.quiet; i++)
			gk_cli_warn(&cli, "config '%s': ignoring unknown key '%s'",
				    o.config, unknown.v[i]);
		gk_strlist_free(&unknown);
		o.source = o.config;
	} else if (have_arch) {
		if (gk_mem_model_from_shape(&m, arch, tied, r.seq, &err))
			gk_cli_usage_error(&cli, "%s", err.msg);
	} else if (m.params) {
		if (gk_mem_model_finish(&m, &err))
			gk_cli_usage_error(&cli, "%s", err.msg);
	}
	if (o.from) {
		if (gk_mem_model_add_checkpoint(&m, o.from, &err))
			return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
		if (!o.config && !have_arch)
			o.source = o.from;
	}
	if (largest)
		m.largest = largest;
	gk_mem_run_resolve(&r, &m);

	if (o.fit_set || o.req.gpu) {
		if (r.infer)
			gk_cli_usage_error(&cli, "--fit searches training configurations; drop --infer");
		return gk_cli_finish(&cli, do_fit(&cli, &o, &m, &r));
	}
	gk_mem_est e;
	if (gk_mem_estimate(&m, &r, o.explain || cli.json, &e, &err))
		gk_cli_usage_error(&cli, "%s", err.msg);
	if (cli.json) {
		json_t *j = json_pack("{s:o s:o s:s}", "model",
				      model_json(&m, o.source), "run",
				      run_json(&r), "units", "bytes");
		json_object_update_new(j, est_json(&e, o.explain));
		if (gk_json_dump(stdout, j, 1, &err)) {
			json_decref(j);
			return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
		}
		json_decref(j);
	} else {
		print_text(&o, &m, &r, &e);
	}
	return gk_cli_finish(&cli, 0);
}
