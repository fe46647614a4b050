/*
 * fit.c - the GPU table, the cost model and the search for configurations
 * that fit.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mem/mem.h"

#define MIB (1ULL << 20)

/*
 * memory.total as nvidia-smi prints it (MiB): what the driver gives the
 * process before the CUDA context. Dense bf16 tensor TFLOP/s without
 * sparsity (vendor datasheets); NVLink/PCIe bus bandwidth per GPU in GB/s.
 */
const gk_mem_gpu gk_mem_gpus[] = {
	{"V100-16", 16384 * MIB, 125, 150},
	{"V100-32", 32768 * MIB, 125, 150},
	{"A10-24", 23028 * MIB, 125, 32},
	{"L4-24", 23034 * MIB, 121, 32},
	{"RTX4090-24", 24564 * MIB, 165, 32},
	{"A100-40", 40960 * MIB, 312, 300},
	{"A6000-48", 49140 * MIB, 155, 56},
	{"L40S-48", 46068 * MIB, 362, 32},
	{"A100-80", 81920 * MIB, 312, 300},
	{"H100-80", 81559 * MIB, 989, 450},
	{"H100NVL-94", 95830 * MIB, 835, 300},
	{"H200-141", 143771 * MIB, 989, 450},
	{"B200-180", 183359 * MIB, 2250, 900},
	{NULL, 0, 0, 0},
};

const gk_mem_gpu *gk_mem_gpu_find(const char *name)
{
	for (const gk_mem_gpu *g = gk_mem_gpus; g->name; g++)
		if (strcasecmp(g->name, name) == 0)
			return g;
	/* "A100" alone is ambiguous; "H100" and "H200" are not */
	const gk_mem_gpu *hit = NULL;
	size_t n = strlen(name);
	for (const gk_mem_gpu *g = gk_mem_gpus; g->name; g++)
		if (strncasecmp(g->name, name, n) == 0 && g->name[n] == '-') {
			if (hit)
				return NULL;
			hit = g;
		}
	return hit;
}

/* Model FLOP utilisation the compute term assumes. */
#define MFU 0.5

void gk_mem_cost(const gk_mem_model *m, const gk_mem_run *run,
		 const gk_mem_gpu *gpu, double inter_gbs, gk_mem_cand *c)
{
	gk_mem_run rr = *run, *r = &rr;
	gk_mem_run_resolve(r, m);
	double W = (double)r->dp * r->tp * r->pp;
	double seqs = (double)r->dp * r->micro_batch * r->grad_accum;
	double tokens = seqs * r->seq, P = m->params;
	double flops = 6 * P * tokens / W, re = 0;
	double L = m->layers, h = m->hidden, s = r->seq;
	if (r->recompute == GK_MEM_RC_FULL)
		re = 2 * P * tokens / W; /* one more forward */
	else if (r->recompute == GK_MEM_RC_SELECTIVE && !r->flash)
		re = 4 * s * h * L * tokens / W; /* QK^T and AV, forward */
	double rate = gpu->tflops * 1e12 * MFU;
	c->compute_s = flops / rate;
	c->recompute_s = re / rate;
	double m_b = r->grad_accum;
	c->bubble_s = (c->compute_s + c->recompute_s) * (r->pp - 1) / m_b;

	double e = r->precision == GK_DT_F32 ? 4 : 2;
	double nvl = gpu->nvlink_gbs * 1e9, net = inter_gbs * 1e9;
	int64_t gpn = r->gpus_per_node;
	/* DP is the outermost dimension: it crosses nodes once tp*pp*dp do */
	double dpbw = W > gpn ? net : nvl;
	double psi_rank = P / (r->tp * r->pp), N = r->dp;
	/*
	 * Data parallel: the gradients at their width (f32 with --grad-f32)
	 * allreduced (ZeRO-0, twice their bytes) or reduce-scattered, and
	 * under ZeRO the parameters all-gathered at the working copy's
	 * width, not the f32 master's (16 bits in mixed precision, as
	 * gpu-train, llm.c and DeepSpeed gather them), ZeRO-3 twice
	 */
	double gb = r->precision != GK_DT_F32 && r->grad_f32 ? 4 : e;
	double dpv = N < 2 ? 0 :
		     (r->zero == 0 ? 2 * gb : r->zero == 3 ? gb + 2 * e : gb + e) * psi_rank *
			     (N - 1) / N;
	double t = r->tp;
	double tpv = 0, ppv = 0;
	if (r->tp > 1) {
		double ar = 4 + (r->recompute == GK_MEM_RC_FULL ? 2 : 0);
		tpv = (L / r->pp) * m_b * ar * 2 * (t - 1) / t * e * s *
		      r->micro_batch * h;
	}
	if (r->pp > 1)
		ppv = m_b * 2 * e * s * r->micro_batch * h / (r->sp ? t : 1);
	double ppbw = r->tp * r->pp > gpn ? net : nvl;
	c->comm_bytes = dpv + tpv + ppv;
	c->comm_s = dpv / dpbw + tpv / nvl + ppv / ppbw;
	c->step_s = c->compute_s + c->recompute_s + c->bubble_s + c->comm_s;
}

static int cmp_cand(const void *a, const void *b)
{
	const gk_mem_cand *x = a, *y = b;
	if (x->step_s != y->step_s)
		return x->step_s < y->step_s ? -1 : 1;
	return x->total < y->total ? -1 : x->total > y->total;
}

/* Keep the best max_out in out, sorted; a small insertion keeps it cheap. */
static void keep(gk_mem_cand *out, int max_out, int *nout,
		 const gk_mem_cand *c)
{
	int n = *nout;
	if (n == max_out && cmp_cand(c, &out[n - 1]) >= 0)
		return;
	int i = n < max_out ? n : n - 1;
	while (i > 0 && cmp_cand(c, &out[i - 1]) < 0) {
		out[i] = out[i - 1];
		i--;
	}
	out[i] = *c;
	if (n < max_out)
		(*nout)++;
}

int gk_mem_fit(const gk_mem_model *m, const gk_mem_run *run,
	       gk_mem_fit_req *req, gk_mem_cand *out, int max_out, int *nout,
	       int *tried, int *fits, gk_err *err)
{
	*nout = *tried = *fits = 0;
	if (m->arch == GK_MEM_ARCH_PARAMS)
		return gk_errf(err, "fit: needs the architecture (--config or "
			       "--layers --hidden --heads ...), not only a "
			       "parameter count");
	gk_mem_run b = *run, *base = &b;
	gk_mem_run_resolve(base, m);
	if (!req->world)
		req->world = base->dp * base->tp * base->pp;
	if (!req->global_batch)
		req->global_batch = base->dp * base->micro_batch *
				    base->grad_accum;
	if (!req->gpu)
		req->gpu = gk_mem_gpu_find(GK_MEM_FIT_GPU);
	if (!req->capacity)
		req->capacity = req->gpu->bytes;
	if (req->inter_gbs == 0)
		req->inter_gbs = GK_MEM_FIT_INTER_GBS;
	int64_t world = req->world, global_batch = req->global_batch;
	uint64_t capacity = req->capacity;
	const gk_mem_gpu *gpu = req->gpu;
	double inter_gbs = req->inter_gbs;
	if (world < 1 || global_batch < 1 || max_out < 1 || !(inter_gbs > 0))
		return gk_errf(err, "fit: world size, global batch and "
			       "bandwidth must be positive");
	if (global_batch > (1 << 24))
		return gk_errf(err, "fit: global batch '%lld': too large",
			       (long long)global_batch);
	gk_err e1;
	int64_t tp_max = req->tp_max > 0 ? req->tp_max : base->gpus_per_node;
	int64_t pp_max = req->pp_max > 0 ? req->pp_max : m->layers;
	int zero_max = req->zero_max > 0 && req->zero_max < 3 ? req->zero_max : 3;
	unsigned rcs = req->recompute ? req->recompute
				      : 1u << GK_MEM_RC_NONE | 1u << GK_MEM_RC_SELECTIVE |
				       1u << GK_MEM_RC_FULL;
	for (int64_t tp = 1; tp <= tp_max && tp <= world; tp *= 2) {
		if (world % tp || m->heads % tp || m->kv_heads % tp)
			continue;
		for (int64_t pp = 1; pp <= pp_max && pp <= m->layers && tp * pp <= world; pp++) {
			if (m->layers % pp || (world / tp) % pp)
				continue;
			int64_t dp = world / (tp * pp);
			if (global_batch % dp)
				continue;
			for (int zero = 0; zero <= zero_max; zero++) {
				if (zero > 0 && dp == 1)
					continue;
				for (int sp = 0; sp <= (tp > 1); sp++)
				/* the strategies frameworks offer (not GELU) */
				for (int rc = 0; rc <= GK_MEM_RC_FULL; rc++)
				for (int64_t mb = 1; mb <= global_batch / dp; mb *= 2) {
					if ((global_batch / dp) % mb || !(rcs & 1u << rc))
						continue;
					gk_mem_run r = *base;
					r.tp = tp, r.pp = pp, r.dp = dp;
					/* 1F1B pipelines (their stages' activations) */
					r.pp_sched = GK_MEM_PP_1F1B, r.pp_chunks = 1;
					r.zero = zero, r.sp = sp;
					r.recompute = rc;
					r.micro_batch = mb;
					r.grad_accum = global_batch / dp / mb;
					gk_mem_est est;
					(*tried)++;
					if (gk_mem_estimate(m, &r, 0, &est, &e1))
						continue;
					if (est.total > capacity)
						continue;
					(*fits)++;
					gk_mem_cand c = {.run = r, .total = est.total};
					gk_mem_cost(m, &r, gpu, inter_gbs, &c);
					keep(out, max_out, nout, &c);
				}
			}
		}
	}
	return 0;
}
