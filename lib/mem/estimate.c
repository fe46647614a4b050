/*
 * estimate.c - bytes per GPU for training (ZeRO model states, Korthikanti
 * activations) and inference (weights, KV cache).
 *
 * Symbols in formulas: Psi parameters (of this rank's pipeline stage and
 * tensor slice), N data-parallel degree, t tensor, p pipeline; s sequence,
 * b micro-batch, h hidden, a heads, L layers of the stage (of a chunk
 * under the interleaved schedule), f MLP size, kv key/value width
 * (kv_heads * head_dim), V vocabulary, e bytes of an activation element,
 * m in-flight micro-batches (micro-batches' chunks when interleaved).
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "hf/hf.h"
#include "mem/mem.h"

#define ZERO_SRC "ZeRO (Rajbhandari et al. 2020) sec. 3.1 and 5.1"
#define KORTH_SRC "Korthikanti et al. 2022 sec. 4.1-4.2, Table 2"
#define KORTH_PP_SRC "Korthikanti et al. 2022 sec. 4.2.3 (pipeline)"

static const char *opt_names[] = {"adamw", "sgd", "adafactor", "adam8bit"};
static const char *rc_names[] = {"none", "selective", "full", "gelu"};
static const char *pp_sched_names[] = {"1f1b", "gpipe", "interleaved"};

const char *gk_mem_pp_sched_name(int s)
{
	return (unsigned)s < GK_ARRAY_SIZE(pp_sched_names) ? pp_sched_names[s] : "?";
}

int gk_mem_pp_sched_parse(const char *s)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(pp_sched_names); i++)
		if (strcmp(s, pp_sched_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *gk_mem_opt_name(gk_mem_opt o)
{
	return (unsigned)o < GK_ARRAY_SIZE(opt_names) ? opt_names[o] : "?";
}

int gk_mem_opt_parse(const char *s)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(opt_names); i++)
		if (strcmp(s, opt_names[i]) == 0)
			return (int)i;
	if (strcmp(s, "adam") == 0)
		return GK_MEM_OPT_ADAMW;
	return -1;
}

const char *gk_mem_recompute_name(gk_mem_recompute rc)
{
	return (unsigned)rc < GK_ARRAY_SIZE(rc_names) ? rc_names[rc] : "?";
}

int gk_mem_recompute_parse(const char *s)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(rc_names); i++)
		if (strcmp(s, rc_names[i]) == 0)
			return (int)i;
	if (strcmp(s, "layer") == 0) /* gpu-train's name for it */
		return GK_MEM_RC_FULL;
	return -1;
}

void gk_mem_run_default(gk_mem_run *r)
{
	memset(r, 0, sizeof(*r));
	r->precision = GK_DT_BF16;
	r->opt = GK_MEM_OPT_ADAMW;
	r->dp = r->tp = r->pp = r->pp_chunks = 1;
	r->micro_batch = 1;
	r->seq = 0;    /* from the model: gk_mem_run_resolve */
	r->flash = -1; /* by the kind of run: gk_mem_run_resolve */
	r->grad_accum = 1;
	r->dropout = 1;
	r->logits_f32 = 1;
	r->gpus_per_node = 8;
	r->bucket = 25 << 20; /* torch DDP bucket_cap_mb */
	r->overlap = 1;
	r->reserve = 1 << 30;
}

void gk_mem_run_resolve(gk_mem_run *r, const gk_mem_model *m)
{
	/*
	 * A model is trained and served at the context it was built for; only
	 * a bare parameter count has none, and then the common 2048 stands in.
	 */
	if (r->seq == 0)
		r->seq = m->positions > 0 ? m->positions : GK_MEM_DEFAULT_SEQ;
	if (r->flash < 0)
		r->flash = r->infer;
}

const gk_mem_part *gk_mem_part_get(const gk_mem_est *e, const char *key)
{
	for (int i = 0; i < e->nparts; i++)
		if (strcmp(e->part[i].key, key) == 0)
			return &e->part[i];
	return NULL;
}

/* ---- building the parts ------------------------------------------------------ */

typedef struct ctx {
	gk_mem_est *e;
	int explain, bad;
} ctx;

/* Bytes too large for anyone's cluster mean the input was absurd. */
#define MAX_BYTES 4.0e18

static gk_mem_part *add(ctx *c, const char *key, double bytes, int host,
			const char *source, const char *formula)
{
	if (!(bytes >= 0) || bytes > MAX_BYTES)
		c->bad = 1;
	gk_mem_part *p = &c->e->part[c->e->nparts++];
	p->key = key;
	p->bytes = c->bad ? 0 : (uint64_t)llround(bytes);
	p->host = host;
	p->source = source;
	p->formula[0] = p->values[0] = 0;
	if (c->explain)
		snprintf(p->formula, sizeof(p->formula), "%s", formula);
	return p;
}

static void GK_PRINTF(2, 3) values(ctx *c, const char *fmt, ...)
{
	if (!c->explain)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->e->part[c->e->nparts - 1].values,
		  sizeof(c->e->part[0].values), fmt, ap);
	va_end(ap);
}

/* snprintf only when explaining: searches run thousands of estimates. */
static void GK_PRINTF(4, 5) fmt(const ctx *c, char *buf, size_t len,
				const char *f, ...)
{
	buf[0] = 0;
	if (!c->explain)
		return;
	va_list ap;
	va_start(ap, f);
	vsnprintf(buf, len, f, ap);
	va_end(ap);
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Optimizer state bytes per parameter beyond the master copy. */
static double opt_state_bytes(const gk_mem_model *m, const gk_mem_run *r,
			      double psi)
{
	switch (r->opt) {
	case GK_MEM_OPT_ADAMW:
		return 8 * psi; /* m and v in f32 */
	case GK_MEM_OPT_SGD:
		return 4 * psi; /* momentum */
	case GK_MEM_OPT_ADAFACTOR:
		/* factored second moment: rows + cols per matrix, f32 */
		return 4.0 * m->factored * (psi / m->params);
	case GK_MEM_OPT_ADAM8BIT:
		/* bitsandbytes: m, v in 8 bits + one f32 absmax per 256-block each */
		return (2 + 8.0 / 256) * psi;
	}
	return 0;
}

/* ---- checking the run --------------------------------------------------------- */

static int check_run(const gk_mem_model *m, const gk_mem_run *r, gk_err *err)
{
	if (r->precision != GK_DT_F32 && r->precision != GK_DT_BF16 &&
	    r->precision != GK_DT_F16)
		return gk_errf(err, "precision '%s': must be f32, bf16 or f16",
			       gk_dtype_name(r->precision));
	if (r->kv_dtype != GK_DT_INVALID && !gk_dtype_bits(r->kv_dtype))
		return gk_errf(err, "KV cache dtype: not a storage type");
	if (r->zero < 0 || r->zero > 3)
		return gk_errf(err, "ZeRO stage '%d': must be 0..3", r->zero);
	if ((unsigned)r->recompute >= GK_ARRAY_SIZE(rc_names))
		return gk_errf(err, "recomputation '%d': not none, selective, "
			       "full or gelu", (int)r->recompute);
	if (r->flash < 0 || r->flash > 1 || r->dropout < 0 || r->dropout > 1)
		return gk_errf(err, "attention '%d', dropout '%d': must be 0 or 1",
			       r->flash, r->dropout);
	const struct {
		const char *what;
		int64_t v, max;
	} nums[] = {
		{"data-parallel degree", r->dp, 1 << 24},
		{"tensor-parallel degree", r->tp, 1 << 16},
		{"pipeline-parallel degree", r->pp, 1 << 16},
		{"micro-batch", r->micro_batch, 1 << 24},
		{"sequence length", r->seq, 100000000},
		{"gradient accumulation", r->grad_accum, 1 << 24},
		{"GPUs per node", r->gpus_per_node, 1 << 16},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(nums); i++)
		if (nums[i].v < 1 || nums[i].v > nums[i].max)
			return gk_errf(err, "%s '%lld': must be in 1..%lld",
				       nums[i].what, (long long)nums[i].v,
				       (long long)nums[i].max);
	/* gpu-train's rules for the schedule (its --pp-schedule, --pp-chunks) */
	if ((unsigned)r->pp_sched >= GK_ARRAY_SIZE(pp_sched_names))
		return gk_errf(err, "pipeline schedule '%d': not 1f1b, gpipe or "
			       "interleaved", r->pp_sched);
	if (r->pp_sched == GK_MEM_PP_INTERLEAVED) {
		if (r->pp < 2)
			return gk_errf(err, "pipeline schedule interleaved: give "
				       "--pp N (2 or more) too");
		if (r->pp_chunks < 2 || r->pp_chunks > 1 << 16)
			return gk_errf(err, "pipeline schedule interleaved: give "
				       "--pp-chunks V (2 or more chunks a stage)");
		if (r->grad_accum < r->pp)
			return gk_errf(err, "pipeline schedule interleaved with --pp %lld: "
				       "--grad-accum %lld is fewer micro-batches than "
				       "stages (--grad-accum %lld or more)",
				       (long long)r->pp, (long long)r->grad_accum,
				       (long long)r->pp);
	} else if (r->pp_chunks > 1) {
		return gk_errf(err, "pipeline chunks '%lld': the chunks of "
			       "--pp-schedule interleaved (1 otherwise)",
			       (long long)r->pp_chunks);
	}
	if (m->arch == GK_MEM_ARCH_PARAMS)
		return 0;
	if (m->heads % r->tp || m->kv_heads % r->tp)
		return gk_errf(err, "tensor-parallel degree '%lld': must divide "
			       "the %lld attention heads and %lld key/value heads",
			       (long long)r->tp, (long long)m->heads,
			       (long long)m->kv_heads);
	if (r->infer && m->layers % r->pp)
		return gk_errf(err, "pipeline-parallel degree '%lld': must "
			       "divide the %lld layers", (long long)r->pp,
			       (long long)m->layers);
	if (m->layers < r->pp)
		return gk_errf(err, "pipeline-parallel degree '%lld': more stages than "
			       "the %lld layers", (long long)r->pp, (long long)m->layers);
	if (r->pp_sched == GK_MEM_PP_INTERLEAVED && m->layers % (r->pp * r->pp_chunks))
		return gk_errf(err, "pipeline chunks '%lld': the %lld layers do not "
			       "divide into %lld chunks of equal size (pp x chunks)",
			       (long long)r->pp_chunks, (long long)m->layers,
			       (long long)(r->pp * r->pp_chunks));
	return 0;
}

/* ---- one pipeline stage --------------------------------------------------------- */

/*
 * A stage's layers: layers / pp, one more on each of the first layers mod
 * pp stages (gpu-train's balance, lib/nn's gk_nn_pp_layers; Megatron-LM
 * asks for layers that divide)
 */
static int64_t stage_layers(const gk_mem_model *m, const gk_mem_run *r, int stage)
{
	return m->layers / r->pp + (stage < m->layers % r->pp);
}

/* Parameters this rank holds (before ZeRO-3 partitioning). */
static uint64_t stage_params(const gk_mem_model *m, const gk_mem_run *r,
			     int stage)
{
	uint64_t t = r->tp, p = r->pp;
	if (m->arch == GK_MEM_ARCH_PARAMS)
		return cdiv(m->params, t * p);
	uint64_t V = m->vocab, h = m->hidden;
	uint64_t layer = (m->layer_params - m->layer_repl) / t + m->layer_repl;
	uint64_t n = (uint64_t)stage_layers(m, r, stage) * layer;
	if (stage == 0)
		n += cdiv(V * h, t) + m->embed_repl;
	if (stage == (int)p - 1) {
		n += m->norm_params;
		/* an untied head, or (p > 1) the last stage's copy of a tied one */
		if (!m->tied || p > 1)
			n += cdiv(V * h, t);
	}
	return n;
}

static void model_states(ctx *c, const gk_mem_model *m, const gk_mem_run *r,
			 uint64_t psi)
{
	double N = r->dp, P = psi;
	int mixed = r->precision != GK_DT_F32;
	int pb = mixed ? 2 : 4; /* bytes of a working parameter or gradient */
	int z = r->zero;
	const char *nz1 = z >= 1 ? "/N" : "", *nz2 = z >= 2 ? "/N" : "";
	const char *nz3 = z >= 3 ? "/N" : "";
	int offp = r->offload == GK_MEM_OFFLOAD_ALL && z >= 3;
	int offg = r->offload && z >= 2;
	double d3 = z >= 3 ? N : 1, d2 = z >= 2 ? N : 1, d1 = z >= 1 ? N : 1;
	char f[160];

	fmt(c, f, sizeof(f), "%d*Psi%s%s", pb, nz3, offp ? " (in host RAM)" : "");
	add(c, "parameters", offp ? 0 : pb * P / d3, 0, ZERO_SRC, f);
	values(c, "%s%d*%llu/%g", offp ? "0 on the GPU; host: " : "", pb,
	       (unsigned long long)psi, d3);
	fmt(c, f, sizeof(f), "%d*Psi%s%s", pb, nz2,
		 offg ? " (streamed to host RAM)" : "");
	add(c, "gradients", offg ? 0 : pb * P / d2, 0, ZERO_SRC, f);
	values(c, "%s%d*%llu/%g", offg ? "0 on the GPU; host: " : "", pb,
	       (unsigned long long)psi, d2);

	double master = mixed ? 4 * P : 0, states = opt_state_bytes(m, r, P);
	double kbytes = (master + states) / P;
	fmt(c, f, sizeof(f), "K*Psi%s, K=%g (%s%s)%s", nz1, kbytes,
		 mixed ? "f32 master + " : "", gk_mem_opt_name(r->opt),
		 r->offload ? " (in host RAM)" : "");
	add(c, "optimizer", r->offload ? 0 : (master + states) / d1, 0,
	    ZERO_SRC, f);
	values(c, "%s%g*%llu/%g", r->offload ? "0 on the GPU; host: " : "",
	       kbytes, (unsigned long long)psi, d1);

	/* CPU Adam works on f32 gradients, so offloading implies them. */
	int g32 = mixed && (r->grad_f32 || r->offload);
	if (g32) {
		fmt(c, f, sizeof(f), "4*Psi%s%s", nz1,
			 r->offload ? " (in host RAM)" : "");
		add(c, "grad_f32", r->offload ? 0 : 4 * P / d1, 0,
		    "DeepSpeed stage_1_and_2.py: f32 gradient partition", f);
		values(c, "%s4*%llu/%g", r->offload ? "0 on the GPU; host: " : "",
		       (unsigned long long)psi, d1);
	}
	c->e->model_states = 0;
	for (int i = 0; i < c->e->nparts; i++)
		c->e->model_states += c->e->part[i].bytes;

	if (r->ckpt_copy && !r->infer) {
		/* what gpu-train's writer thread writes from while the next
		 * steps change the state: the f32 parameters (rank 0 writes
		 * the model; under ZeRO-3 each rank its shard of it) and the
		 * optimizer states the rank holds */
		add(c, "checkpoint_copy", 4 * P / d3 + states / d1, 1,
		    "assumption: an asynchronous checkpoint copies the state to host RAM", "");
		fmt(c, c->e->part[c->e->nparts - 1].formula,
		    sizeof(c->e->part[0].formula), "4*Psi%s + S*Psi%s (%s)", nz3, nz1,
		    z >= 3 ? "each rank" : "rank 0");
		if (z >= 3)
			values(c, "4*%llu/%g + %g/%g", (unsigned long long)psi, d3, states, d1);
		else
			values(c, "4*%llu + %g/%g", (unsigned long long)psi, states, d1);
	}
	if (r->offload) {
		/* ranks on one node: a node is full unless the job is smaller */
		int64_t world = r->dp * r->tp * r->pp;
		int64_t local = world < r->gpus_per_node ? world : r->gpus_per_node;
		double kh = kbytes + (g32 ? 4 : 0);
		double host = kh * P / d1 + (offp ? pb * P / d3 : 0);
		add(c, "host_ram", host * local, 1,
		    "ZeRO-Offload (Ren et al. 2021); per node", "");
		fmt(c, c->e->part[c->e->nparts - 1].formula,
		    sizeof(c->e->part[0].formula),
		    "ranks_per_node * (K + 4)*Psi%s%s", nz1,
		    offp ? " + 2*Psi/N (parameters)" : "");
		values(c, "%lld * (%g*%llu/%g%s)", (long long)local, kh,
		       (unsigned long long)psi, d1,
		       offp ? " + 2*Psi/N" : "");
	}
}

/*
 * Activation bytes of one transformer layer and one micro-batch, split
 * into what tensor parallelism leaves whole (repl, unless SP), what it
 * splits (split) and the s^2 attention core (core, split).
 * Korthikanti's GPT accounting, generalised: with e = 2, dropout, kv = q = h
 * and f = 4h it is exactly sbh(34 + 5as/h).
 */
typedef struct act {
	double repl, split, core;
	double act; /* of split: the MLP activation's output, e*sbf */
} act;

static act layer_act(const gk_mem_model *m, const gk_mem_run *r, double e)
{
	double s = r->seq, b = r->micro_batch, h = m->hidden, a = m->heads;
	double q = (double)m->heads * m->head_dim;
	double kv = (double)m->kv_heads * m->head_dim, f = m->ffn;
	double d = r->dropout;
	act x;
	/* two norm inputs, QKV input, MLP input; two dropout masks */
	x.repl = s * b * h * (4 * e + 2 * d);
	/* Q, K, V, attention output; the MLP's intermediate tensors */
	double mlp = m->arch == GK_MEM_ARCH_LLAMA ? 3 * e * f : 2 * e * f;
	x.split = s * b * (e * (2 * q + 2 * kv) + mlp);
	x.act = s * b * e * f;
	if (r->flash) /* softmax statistics (f32 logsumexp) only */
		x.core = 4 * a * s * b;
	else /* softmax output, its dropout mask and dropout output */
		x.core = a * s * s * b * (e + d + d * e);
	return x;
}

static double layer_bytes(const act *x, const gk_mem_run *r,
			  gk_mem_recompute rc)
{
	double t = r->tp;
	double repl = r->sp ? x->repl / t : x->repl;
	switch (rc) {
	case GK_MEM_RC_NONE:
		return repl + x->split / t + x->core / t;
	case GK_MEM_RC_SELECTIVE:
		return repl + x->split / t;
	case GK_MEM_RC_GELU:
		return repl + (x->split - x->act) / t + x->core / t;
	case GK_MEM_RC_FULL:
		break;
	}
	return 0;
}

/*
 * The sets of activations stage keeps, as gpu-train's schedules allocate
 * them (lib/nn/pp_sched.c; Narayanan et al. 2021, sec. 2.2): 1F1B's
 * min(M, p - stage) micro-batches, GPipe's M, and under the interleaved
 * schedule min(M V, w + 1) chunks with the warm-up w = 2 (p - 1 - stage)
 * + (V - 1) N, N the group (gk_mem_pp_group; all M V when M = p, as
 * Megatron-LM). With N = p stage 0 so holds p V + p - 1 chunks of
 * L/(p V) layers, L (1 + (p - 1)/(p V)) layers' worth: Korthikanti et al.
 * 2022 sec. 4.2.3's factor over 1F1B's L.
 */
int64_t gk_mem_pp_group(int64_t M, int64_t S)
{
	for (int64_t N = S; N <= M; N++)
		if (M % N == 0 || M % N >= S)
			return N;
	return 0;
}

static int64_t pp_inflight(const gk_mem_run *r, int stage)
{
	int64_t M = r->grad_accum, p = r->pp, n;
	if (p < 2) /* no pipeline: one micro-batch at a time */
		return 1;
	if (r->pp_sched == GK_MEM_PP_GPIPE)
		return M;
	if (r->pp_sched == GK_MEM_PP_INTERLEAVED) {
		int64_t V = r->pp_chunks, all = M * V;
		int64_t w = 2 * (p - 1 - stage) + (V - 1) * gk_mem_pp_group(M, p);
		if (M == p || w > all)
			w = all;
		return w + 1 < all ? w + 1 : all;
	}
	n = p - stage;
	return n < M ? n : M;
}

static void activations(ctx *c, const gk_mem_model *m, const gk_mem_run *r,
			int stage)
{
	double e = r->precision == GK_DT_F32 ? 4 : 2;
	double s = r->seq, b = r->micro_batch, h = m->hidden, t = r->tp;
	double V = m->vocab, a = m->heads;
	int64_t L = stage_layers(m, r, stage);
	int64_t inflight = pp_inflight(r, stage);
	if (r->pp_sched == GK_MEM_PP_INTERLEAVED)
		L /= r->pp_chunks; /* an in-flight set is a chunk's */
	c->e->inflight = inflight;
	act x = layer_act(m, r, e);
	double sp = r->sp ? t : 1;
	const char *spf = r->sp ? "/t" : "";
	double per;
	char f[160];

	if (r->recompute == GK_MEM_RC_FULL) {
		per = e * s * b * h / sp;
		fmt(c, f, sizeof(f), "L*m*e*sbh%s (layer inputs only)", spf);
		add(c, "activations", per * L * inflight, 0, KORTH_SRC, f);
		values(c, "%lld*%lld*%g*%g*%g*%g/%g", (long long)L,
		       (long long)inflight, e, s, b, h, sp);
		add(c, "recompute_working_set",
		    layer_bytes(&x, r, GK_MEM_RC_NONE), 0,
		    "assumption: one layer is recomputed at a time",
		    "one layer without recomputation");
		values(c, "%.0f", layer_bytes(&x, r, GK_MEM_RC_NONE));
	} else {
		per = layer_bytes(&x, r, r->recompute);
		int gpt = r->dropout && !r->flash &&
			  m->arch != GK_MEM_ARCH_LLAMA && e == 2 &&
			  m->ffn == 4 * m->hidden && m->kv_heads == m->heads;
		int sel = r->recompute == GK_MEM_RC_SELECTIVE;
		int gelu = r->recompute == GK_MEM_RC_GELU;
		/* Table 2's 34 = 10 + 24; recomputing the GeLU drops its 8sbh output */
		int whole = gelu ? 26 : 34, split = gelu ? 16 : 24;
		int mlpc = (m->arch == GK_MEM_ARCH_LLAMA ? 3 : 2) - gelu;
		if (gpt && r->sp)
			fmt(c, f, sizeof(f), "L*m*sbh/t*(%d%s)", whole,
			    sel ? "" : " + 5as/h");
		else if (gpt)
			fmt(c, f, sizeof(f), "L*m*sbh*(10 + %d/t%s)", split,
			    sel ? "" : " + 5as/(ht)");
		else
			fmt(c, f, sizeof(f),
			    "L*m*sb*((4e+2d)h%s + (e(2q+2kv) + %def)/t)%s", spf,
			    mlpc, sel ? "" : r->flash ? " + 4asb/t" :
			    " + (e+d+de)as^2b/t");
		add(c, "activations", per * L * inflight, 0, KORTH_SRC, f);
		if (gpt && r->sp && sel)
			values(c, "%lld*%lld*%g*%g*%g/%g*%d", (long long)L,
			       (long long)inflight, s, b, h, t, whole);
		else if (gpt && r->sp)
			values(c, "%lld*%lld*%g*%g*%g/%g*(%d + 5*%g*%g/%g)",
			       (long long)L, (long long)inflight, s, b, h, t,
			       whole, a, s, h);
		else if (gpt && sel)
			values(c, "%lld*%lld*%g*%g*%g*(10 + %d/%g)", (long long)L,
			       (long long)inflight, s, b, h, split, t);
		else if (gpt)
			values(c, "%lld*%lld*%g*%g*%g*(10 + %d/%g + 5*%g*%g/(%g*%g))",
			       (long long)L, (long long)inflight, s, b, h, split,
			       t, a, s, h, t);
		else
			values(c, "%lld*%lld*%.0f bytes/layer (s=%g b=%g h=%g "
			       "a=%g q=%g kv=%g f=%lld t=%g e=%g d=%d)",
			       (long long)L, (long long)inflight, per, s, b, h, a,
			       (double)m->heads * m->head_dim,
			       (double)m->kv_heads * m->head_dim,
			       (long long)m->ffn, t, e, r->dropout);
	}
	if (stage == 0 && r->dropout) {
		add(c, "embedding_dropout", s * b * h / sp * inflight, 0,
		    KORTH_PP_SRC, "m*sbh (1-byte mask)");
		values(c, "%lld*%g*%g*%g/%g", (long long)inflight, s, b, h, sp);
	}
	if (stage == r->pp - 1) {
		/* the head's buffers are a set's: one a set in flight on
		 * the last stage (1 under 1F1B), as gpu-train's slots */
		double hs = r->pp > 1 ? (double)inflight : 1;
		int f32 = e != 4 && r->logits_f32; /* the copy's 4 bytes */
		const char *mf = hs > 1 ? "m*" : "";
		/* a tensor rank's share of the model's vocabulary (gk_mem_logits) */
		uint64_t sb = (uint64_t)r->seq * (uint64_t)r->micro_batch, padded, lg, lg32;
		gk_mem_logits(m->vocab, r->tp, sb, (int)e, &padded, &lg);
		gk_mem_logits(m->vocab, r->tp, sb, 4, &padded, &lg32);
		add(c, "logits", hs * (double)(lg + (f32 ? lg32 : 0)), 0,
		    "Korthikanti et al. 2022 sec. 4.3 (output layer, cross "
		    "entropy in f32)",
		    f32 ? (hs > 1 ? "m*(e*sbV/t + 4*sbV/t) (f32 copy for the loss)"
				  : "e*sbV/t + 4*sbV/t (f32 copy for the loss)")
			: (hs > 1 ? "m*e*sbV/t" : "e*sbV/t"));
		char mv[32] = "";
		if (hs > 1)
			fmt(c, mv, sizeof(mv), "%lld*", (long long)inflight);
		values(c, "%s(%g+%d)*%g*%g*%g/%g", mv, e, f32 ? 4 : 0, s, b, V, t);
		fmt(c, f, sizeof(f), "%s2*e*sbh%s (final norm and LM-head inputs)", mf, spf);
		add(c, "final_norm", hs * 2 * e * s * b * h / sp, 0,
		    "Korthikanti et al. 2022 sec. 4.3", f);
		values(c, "%s2*%g*%g*%g*%g/%g", mv, e, s, b, h, sp);
	}
}

/* gpu-train's GPT-2 shape (tied, a 4h MLP, no grouped heads), trained */
static int gpt2_trained(const gk_mem_model *m, const gk_mem_run *r)
{
	return !(r->infer || m->arch != GK_MEM_ARCH_GPT2 || !m->tied || m->layers < 1 ||
		 m->ffn != 4 * m->hidden || (m->kv_heads && m->kv_heads != m->heads) ||
		 (m->head_dim && m->head_dim * m->heads != m->hidden));
}

/* ... on GPUs over data parallelism alone */
static int gpt2_device(const gk_mem_model *m, const gk_mem_run *r)
{
	return gpt2_trained(m, r) && r->dp > 1 && r->tp == 1 && r->pp == 1 && !r->host_backend;
}

/* its layout on a rank of stage */
static gk_mem_shape shape_of(const gk_mem_model *m, const gk_mem_run *r, int stage)
{
	return (gk_mem_shape){.layers = m->layers, .hidden = m->hidden, .vocab = m->vocab,
			      .positions = m->positions, .dp = r->dp, .tp = r->tp, .pp = r->pp,
			      .stage = stage, .zero = r->zero};
}

/*
 * gpu-train's ZeRO-3 on GPUs: a rank's parameter units on its layout
 * (gk_mem_zero3_device: a tensor rank's slices, a pipeline stage's units),
 * block buffers as gpu-train uses them (2 with overlap, the next
 * prefetched, which it never is over a grid; 1 without; every block of
 * the stage's when they stay gathered from forward to backward): 0 when
 * it applies
 */
static int zero3_device(const gk_mem_model *m, const gk_mem_run *r, int stage, uint64_t *edge,
			uint64_t *ring)
{
	if (r->zero != 3 || r->dp < 2 || r->host_backend || !gpt2_trained(m, r))
		return -1;
	int grid = r->tp > 1 || r->pp > 1;
	int64_t L = stage_layers(m, r, stage);
	int64_t nslot = r->keep_gathered ? L : r->overlap && !grid ? 2 : 1;
	if (nslot > L)
		nslot = L;
	gk_mem_shape sh = shape_of(m, r, stage);
	gk_err err;
	return gk_mem_zero3_device(&sh, r->precision == GK_DT_F32 ? 4 : 2, (int)nslot, edge, ring,
				   &err);
}

/*
 * gpu-train's ZeRO-2 and 3 on GPUs: what the estimate's gradient buckets
 * are for a GPT-2 it trains (tied, a 4h MLP, no grouped heads) without a
 * pipeline (over a tensor group on a tensor rank's slices), offloaded or
 * not: 0 when it applies
 */
static int zero2_device(const gk_mem_model *m, const gk_mem_run *r, uint64_t *head,
			uint64_t *ring, size_t *nb)
{
	int tp = r->tp > 1 && r->pp == 1 && gpt2_trained(m, r) && r->dp > 1 && !r->host_backend;
	if (r->zero < 2 || !(tp || gpt2_device(m, r)))
		return -1;
	gk_err err;
	return gk_mem_zero2_device(m->layers, m->hidden, m->vocab, m->positions, r->tp,
				   r->bucket, r->overlap, head, ring, nb, &err);
}

/*
 * gpu-train's host memory on GPUs, each rank's (gk_mem_gpu_host): for a
 * GPT-2 it trains there, on any grid it runs (ZeRO 0 to 3, with or
 * without tensor and pipeline parallelism)
 */
static void gpu_host(ctx *c, const gk_mem_model *m, const gk_mem_run *r, int stage)
{
	static const char *const what[GK_MEM_NHOST] = {
		"the f32 parameters' mirror in the flat layout (ZeRO-3: the rank's range)",
		"the f32 gradients' mirror (ZeRO-2 and 3: mapped, never written)",
		"the pinned staging of transfers",
		"the AdamW moments' host copies (checkpoints; --offload optimizer's state)",
		"--offload optimizer's copy of the gradient shard"};
	static const char *const formula[GK_MEM_NHOST] = {
		"4*Fr, ZeRO-3 4*R (64-byte multiple)", "4*Fr (64-byte multiple)", "min(4*F, 64 MiB)",
		"8*(R+1)", "4*R"};
	uint64_t h[GK_MEM_NHOST];
	gk_err err;
	gk_mem_shape sh = shape_of(m, r, stage);
	if (!gpt2_trained(m, r) || r->host_backend ||
	    gk_mem_gpu_host(&sh, r->offload != GK_MEM_OFFLOAD_NONE, h, &err) < 0)
		return;
	for (int i = 0; i < GK_MEM_NHOST; i++) {
		if (!h[i])
			continue;
		add(c, gk_mem_host_name((gk_mem_host_term)i), (double)h[i], 2,
		    "gpu-train on GPUs (lib/nn): host RAM of each rank; F a tensor rank's flat "
		    "buffer (Psi/t of every stage's layers and the vocabulary's padded rows), Fr "
		    "it rounded up to a multiple of N under ZeRO, R the rank's part (Fr/N; a "
		    "stage's pieces over a grid; F without ZeRO)", "");
		fmt(c, c->e->part[c->e->nparts - 1].formula, sizeof(c->e->part[0].formula),
		    "%s: %s", formula[i], what[i]);
		values(c, "%llu", (unsigned long long)h[i]);
	}
}

static void buffers(ctx *c, const gk_mem_model *m, const gk_mem_run *r, int stage,
		    uint64_t psi)
{
	double e = r->precision == GK_DT_F32 ? 4 : 2;
	double s = r->seq, b = r->micro_batch, h = m->hidden, t = r->tp;
	uint64_t zhead, zring;
	size_t znb;
	if (zero2_device(m, r, &zhead, &zring, &znb) == 0) {
		add(c, "dp_buckets", (double)zring, 0,
		    "gpu-train --zero 2 and 3 on GPUs: a ring of buffers of its largest bucket, "
		    "cut at layers (lib/comm's gk_comm_grads_plan)",
		    r->overlap ? "3*largest_bucket (2 in flight, 1 filling)"
			       : "largest_bucket (--no-overlap)");
		size_t ns = r->overlap ? 3 : 1;
		ns = ns < znb ? ns : znb;
		values(c, "%zu*%llu (the largest of %zu buckets, f32; --bucket %llu)", ns,
		       (unsigned long long)(ns ? zring / ns : 0), znb,
		       (unsigned long long)r->bucket);
		add(c, "zero2_embedding_grads", (double)zhead, 0,
		    "gpu-train --zero 2 and 3 on GPUs: wte (padded rows; a tensor rank's slice) and "
		    "wpe, written first by the tied head and last by the encoder",
		    "4*(Vpad/t+positions)*h");
		values(c, "4*(%lld/%lld+%lld)*%lld",
		       (long long)gk_hf_vocab_padded(m->vocab), (long long)r->tp,
		       (long long)m->positions, (long long)m->hidden);
		if (r->offload) {
			/* the reduce-scatter's output stays on the device until
			 * the host's update copies it down */
			add(c, "zero2_grad_shard", 4.0 * (double)psi / (double)r->dp, 0,
			    "gpu-train --zero 2 or 3 --offload on GPUs: the rank's shard of the "
			    "reduced f32 gradients, on the device until the host's update "
			    "copies it down",
			    "4*Psi/N");
			values(c, "4*%llu/%lld", (unsigned long long)psi, (long long)r->dp);
		}
	} else if (r->dp > 1 && !r->infer && !(r->pp > 1 && gpt2_trained(m, r))) {
		/* (gpu-train's pipeline stage reduces its gradients in place
		 * after its schedule: no buffers) */
		add(c, "dp_buckets", 2.0 * r->bucket, 0,
		    "assumption: 2 gradient buckets in flight "
		    "(torch DDP bucket_cap_mb, DeepSpeed reduce_bucket_size)",
		    "2*bucket");
		values(c, "2*%llu", (unsigned long long)r->bucket);
	}
	/* ZeRO-2 (and 3) over a pipeline (on the CPU over a tensor group
	 * too): its stage's gradients are reduced after its last micro-batch
	 * and live whole until then; gpu-train's GPT-2 its segments beyond
	 * the rank's pieces (gk_mem_pp_zero2_live), f32 */
	gk_mem_shape zs = shape_of(m, r, stage);
	gk_mem_flat zf;
	gk_err zerr;
	int stage_path = r->pp > 1 || (r->tp > 1 && r->host_backend && gpt2_trained(m, r));
	if (stage_path && r->zero >= 2 && r->dp > 1 && !r->infer && !r->offload) {
		double pb = r->precision == GK_DT_F32 ? 4 : 2, N = r->dp;
		const char *what = "gpu-train --pp --zero 2 or 3 (and --tp on the CPU): the "
				   "stage's gradients reduce-scattered after the schedule "
				   "(DeepSpeed refuses ZeRO-2 with pipelines)";
		if (gpt2_trained(m, r) && gk_mem_flat_layout(&zs, &zf, &zerr) == 0) {
			add(c, "pp_zero2_grads", (double)gk_mem_pp_zero2_live(&zf), 0, what,
			    "r64(4*(seg0+seg1)) - r64(4*(P0+P1)), P = ceil(seg/N) (64-byte "
			    "multiples)");
			values(c, "r64(4*(%llu+%llu)) - r64(4*(%llu+%llu))",
			       (unsigned long long)zf.seg[0], (unsigned long long)zf.seg[1],
			       (unsigned long long)zf.piece[0], (unsigned long long)zf.piece[1]);
		} else {
			add(c, "pp_zero2_grads", pb * psi * (N - 1) / N, 0, what, "pb*Psi*(N-1)/N");
			values(c, "%g*%llu*(%g-1)/%g", pb, (unsigned long long)psi, N, N);
		}
	}
	if (r->compress != GK_COMM_COMPRESS_NONE && r->dp > 1 && !r->infer) {
		/*
		 * gpu-train --compress: each rank's error feedback, f32, kept
		 * across steps (lib/nn/dp.c), one float an element it packs,
		 * and with ZeRO the ring's two wire buffers of its largest
		 * piece (lib/comm's gk_comm_compress_scratch): of its GPT-2's
		 * flat buffer or, over a grid, the stage's segments
		 * (gk_mem_compress_bytes); of another model's Psi the same
		 */
		int z = r->zero > 0, grid = r->tp > 1 || r->pp > 1;
		uint64_t N = (uint64_t)r->dp, fb, wire, piece = (psi + N - 1) / N;
		gk_mem_shape sh = shape_of(m, r, stage);
		gk_err err;
		if (!gpt2_trained(m, r) ||
		    gk_mem_compress_bytes(&sh, r->compress, &fb, &wire, &err) < 0) {
			fb = 4 * (z && !grid ? piece * N : psi);
			wire = z ? gk_comm_compress_scratch((gk_comm_compress)r->compress,
							    (size_t)piece) : 0;
		}
		const char *ff = grid ? "4*F, F = the stage's segments (Psi and the padded "
					"vocabulary's rows)" :
				 z ? "4*ceil(F/N)*N, F = Psi + the padded vocabulary's rows"
				   : "4*F, F = Psi + the padded vocabulary's rows";
		add(c, "compress_feedback", (double)fb, 0,
		    "gpu-train --compress: the error feedback of what a rank packs", ff);
		values(c, "4*%llu", (unsigned long long)(fb / 4));
		if (z) {
			add(c, "compress_wire", (double)wire, 0,
			    "gpu-train --compress with ZeRO: the compressed ring's two wire "
			    "buffers of a block (over a grid, of its largest piece)",
			    grid ? "2*(wire(P+1)+1), P = the largest of ceil(segment/N)"
				 : "2*(wire(ceil(F/N)+1)+1)");
			values(c, "%llu (%s)", (unsigned long long)wire,
			       gk_comm_compress_name((gk_comm_compress)r->compress));
		}
		if (r->ckpt_copy) {
			add(c, "checkpoint_feedback", (double)fb, 1,
			    "gpu-train: a checkpoint copies each rank's error feedback", ff);
			values(c, "4*%llu", (unsigned long long)(fb / 4));
		}
		/* int8 over a tensor group on the CPU: the replicated tensors'
		 * reduced gradients broadcast from its rank 0 through a buffer
		 * (on GPUs in place) */
		uint64_t rep;
		if (r->compress == GK_COMM_COMPRESS_INT8 && r->tp > 1 && r->host_backend &&
		    gpt2_trained(m, r) && gk_mem_tp_replicas(&sh, &rep, &err) == 0) {
			add(c, "compress_replicas", 4.0 * (double)rep, 0,
			    "gpu-train --compress int8 --tp on the CPU: the replicated tensors' "
			    "reduced gradients (wpe, LayerNorms, row-parallel biases) of a rank's "
			    "pieces, broadcast from the tensor group's rank 0",
			    "4*R, R = the largest rank's replicated elements");
			values(c, "4*%llu", (unsigned long long)rep);
		}
	}
	uint64_t uedge, uring;
	if (zero3_device(m, r, stage, &uedge, &uring) == 0) {
		add(c, "zero3_units", (double)(uedge + uring), 0,
		    "gpu-train --zero 3 on GPUs: the working copy gathered in units, the "
		    "embeddings and final norm for the step and a ring of block buffers "
		    "(lib/nn/zero3.c)",
		    r->keep_gathered ? "pb*(edges + L*block) (every block kept from its "
				       "forward to its backward)" :
		    r->overlap && r->tp == 1 && r->pp == 1
			    ? "pb*(edges + 2*block) (one in use, one prefetched)"
			    : "pb*(edges + block) (--no-overlap, or a grid: none prefetched)");
		values(c, "%llu+%llu", (unsigned long long)uedge, (unsigned long long)uring);
	} else if (r->zero == 3 && r->dp > 1 && !r->infer && r->keep_gathered) {
		double pb = r->precision == GK_DT_F32 ? 4 : 2;
		add(c, "zero3_gather", pb * cdiv(psi, r->tp), 0,
		    "every layer's parameters kept gathered from its forward to its "
		    "backward (FSDP's reshard_after_forward=False)",
		    "pb*Psi/t");
		values(c, "%g*%llu/%g", pb, (unsigned long long)psi, t);
	} else if (r->zero == 3 && r->dp > 1 && !r->infer && m->largest) {
		double pb = r->precision == GK_DT_F32 ? 4 : 2;
		add(c, "zero3_gather", 2 * pb * cdiv(m->largest, r->tp), 0,
		    "DeepSpeed stage3.py: largest_layer_memory "
		    "(gathered layer + prefetch)",
		    "2*pb*largest/t");
		values(c, "2*%g*%llu/%g", pb, (unsigned long long)m->largest, t);
	}
	if (m->arch == GK_MEM_ARCH_PARAMS)
		return;
	if (r->tp > 1 && r->infer) {
		add(c, "tp_buffers", e * s * b * h, 0,
		    "assumption: one all-reduce/all-gather output of sbh",
		    "e*sbh");
		values(c, "%g*%g*%g*%g", e, s, b, h);
	} else if (r->tp > 1) {
		/* gpu-train's (gk_mem_tp_buffers) */
		uint64_t sb = (uint64_t)r->seq * (uint64_t)r->micro_batch;
		add(c, "tp_buffers", (double)gk_mem_tp_buffers(sb, m->hidden, !r->host_backend), 0,
		    r->host_backend ? "gpu-train --tp on the CPU: the vocabulary-parallel "
				      "cross-entropy's sums (lib/nn)"
				    : "gpu-train --tp on GPUs: the group's fp32 sums and the "
				      "vocabulary-parallel cross-entropy's (lib/nn)",
		    r->host_backend ? "4*r16(3*sb) (floats rounded up to 16)"
				    : "r256(4*sbh) + r256(16*sb) (each rounded up to 256 bytes)");
		values(c, "s=%g b=%g h=%g", s, b, h);
	}
	if (r->pp > 1 && !r->infer) {
		/* gpu-train's (gk_mem_pp_buffers) */
		int64_t V = r->pp_sched == GK_MEM_PP_INTERLEAVED ? r->pp_chunks : 1;
		int64_t sp = r->sp ? r->tp : 1;
		uint64_t count = (uint64_t)r->seq * (uint64_t)r->micro_batch *
				 (uint64_t)m->hidden / (uint64_t)sp;
		uint64_t n = gk_mem_pp_buffers(r->pp, stage, V, r->grad_accum, count, (int)e);
		add(c, "pp_buffers", (double)n, 0,
		    "gpu-train --pp: a send buffer for each micro-batch (each chunk of one, "
		    "interleaved) of its activations to the next stage and of their gradients "
		    "to the one before (lib/nn/pp_sched.c); received into the model's own",
		    V > 1 ? "k*e*m*V*sbh/t_sp, k = 2 (the first and last stage exchange chunks "
			    "too)"
			  : "k*e*m*sbh/t_sp, k = 1 on the first and last stage, else 2");
		unsigned long long k = n / ((uint64_t)e * (uint64_t)r->grad_accum * (uint64_t)V * count);
		if (V > 1)
			values(c, "%llu*%g*%lld*%lld*%g*%g*%g/%lld", k, e, (long long)r->grad_accum,
			       (long long)V, s, b, h, (long long)sp);
		else
			values(c, "%llu*%g*%lld*%g*%g*%g/%lld", k, e, (long long)r->grad_accum, s, b,
			       h, (long long)sp);
	}
}

static void inference(ctx *c, const gk_mem_model *m, const gk_mem_run *r,
		      uint64_t psi)
{
	double pb = gk_dtype_bits(r->precision) / 8.0;
	gk_dtype kvt = r->kv_dtype ? r->kv_dtype : r->precision;
	double kb = gk_dtype_bits(kvt) / 8.0;
	add(c, "parameters", pb * psi, 0, "weights in the serving dtype",
	    "pb*Psi");
	values(c, "%g*%llu", pb, (unsigned long long)psi);
	if (m->arch == GK_MEM_ARCH_PARAMS)
		return;
	double s = r->seq, b = r->micro_batch, h = m->hidden, t = r->tp;
	double L = m->layers / r->pp, kvh = m->kv_heads / r->tp;
	double hd = m->head_dim, e = pb < 2 ? 2 : pb, V = m->vocab;
	add(c, "kv_cache", 2 * L * b * s * kvh * hd * kb, 0,
	    "K and V per layer; GQA: kv_heads/t heads per rank",
	    "2*L*b*s*(kv_heads/t)*head_dim*kvb");
	values(c, "2*%g*%g*%g*%g*%g*%g", L, b, s, kvh, hd, kb);
	double q = (double)m->heads * hd, kv = (double)m->kv_heads * hd;
	double mlp = (m->arch == GK_MEM_ARCH_LLAMA ? 3 : 2) * (double)m->ffn;
	double core = r->flash ? 4 * m->heads * s * b : e * m->heads * s * s * b;
	add(c, "activations",
	    e * s * b * (2 * h) + e * s * b * (q + 2 * kv + mlp) / t + core / t,
	    0, "assumption: prefill of one layer at a time, nothing kept",
	    r->flash ? "e*sb*(2h + (q+2kv+mlp)/t) + 4asb/t"
		     : "e*sb*(2h + (q+2kv+mlp)/t) + e*as^2b/t");
	values(c, "e=%g s=%g b=%g h=%g q=%g kv=%g mlp=%g t=%g", e, s, b, h, q,
	       kv, mlp, t);
	add(c, "logits", (e + 4) * b * V / t, 0,
	    "assumption: logits of the last position only, plus an f32 copy",
	    "(e+4)*b*V/t");
	values(c, "(%g+4)*%g*%g/%g", e, b, V, t);
}

static int estimate_stage(const gk_mem_model *m, const gk_mem_run *r,
			  int stage, int explain, gk_mem_est *e, gk_err *err)
{
	memset(e, 0, sizeof(*e));
	ctx c = {.e = e, .explain = explain};
	uint64_t psi = stage_params(m, r, stage);
	e->stage = stage;
	e->stage_params = psi;
	e->inflight = 1;
	if (r->infer) {
		inference(&c, m, r, psi);
		buffers(&c, m, r, stage, psi);
	} else {
		model_states(&c, m, r, psi);
		if (m->arch != GK_MEM_ARCH_PARAMS)
			activations(&c, m, r, stage);
		buffers(&c, m, r, stage, psi);
		gpu_host(&c, m, r, stage);
	}
	add(&c, "cuda_reserve", r->reserve, 0,
	    "assumption: CUDA context (~0.5 GiB), cuBLAS and NCCL workspaces",
	    "--reserve");
	values(&c, "%llu", (unsigned long long)r->reserve);
	if (c.bad)
		return gk_errf(err, "estimate: a term exceeds 4 EB; check the "
			       "sizes (sequence %lld, micro-batch %lld)",
			       (long long)r->seq, (long long)r->micro_batch);
	for (int i = 0; i < e->nparts; i++) {
		if (e->part[i].host == 2)
			e->host_rank += e->part[i].bytes;
		else if (e->part[i].host)
			e->host += e->part[i].bytes;
		else
			e->total += e->part[i].bytes;
	}
	return 0;
}

int gk_mem_estimate_stage(const gk_mem_model *m, const gk_mem_run *run, int stage,
			  int explain, gk_mem_est *e, gk_err *err)
{
	gk_mem_run rr = *run, *r = &rr;
	gk_mem_run_resolve(r, m);
	if (check_run(m, r, err))
		return -1;
	if (stage < 0 || stage >= r->pp)
		return gk_errf(err, "pipeline stage %d: not one of the %lld stages", stage,
			       (long long)r->pp);
	return estimate_stage(m, r, stage, explain, e, err);
}

int gk_mem_estimate(const gk_mem_model *m, const gk_mem_run *run,
		    int explain, gk_mem_est *e, gk_err *err)
{
	gk_mem_run rr = *run, *r = &rr;
	gk_mem_run_resolve(r, m);
	if (check_run(m, r, err))
		return -1;
	if (estimate_stage(m, r, 0, explain, e, err))
		return -1;
	if (r->pp > 1) {
		gk_mem_est last;
		if (estimate_stage(m, r, r->pp - 1, explain, &last, err))
			return -1;
		if (last.total > e->total)
			*e = last;
	}
	return 0;
}
