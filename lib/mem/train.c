/*
 * train.c - the estimate a trainer checks its own memory accounting
 * against: gpu-train's GPT-2 settings turned into the same model and run
 * that mem-estimate builds from its config.json and flags, so the two
 * agree by construction rather than by keeping two lists of defaults.
 */
#include <string.h>

#include "mem/mem.h"

int gk_mem_train_estimate(const gk_mem_train *t, gk_mem_est *e,
			  gk_mem_model *m_out, gk_mem_run *r_out, gk_err *err)
{
	gk_mem_model m = {0};
	gk_mem_run r;

	if (t->zero < 0 || t->zero > 3)
		return gk_errf(err, "train: ZeRO stage '%d': must be 0 to 3",
			       t->zero);
	if (t->precision != GK_DT_INVALID && t->precision != GK_DT_F32 &&
	    t->precision != GK_DT_BF16)
		return gk_errf(err, "train: precision '%s': must be f32 or bf16",
			       gk_dtype_name(t->precision));
	if (t->recompute != GK_MEM_RC_NONE && t->recompute != GK_MEM_RC_GELU &&
	    t->recompute != GK_MEM_RC_FULL)
		return gk_errf(err, "train: recomputation '%s': must be none, "
			       "gelu or layer",
			       gk_mem_recompute_name(t->recompute));
	if (t->positions < 0 || t->seq < 0 || t->batch < 0 || t->dp < 0 ||
	    t->tp < 0 || t->grad_accum < 0 || t->pp_chunks < 0)
		return gk_errf(err, "train: negative positions, sequence, batch, "
			       "micro-batches, chunks or data-parallel degree");
	if (t->seq && t->positions && t->seq > t->positions)
		return gk_errf(err, "train: sequence '%lld': more than the %lld "
			       "learned positions", (long long)t->seq,
			       (long long)t->positions);

	/* GPT-2's HF layout: the LM head is the token embedding (tied) */
	m.layers = t->layers;
	m.hidden = t->hidden;
	m.heads = t->heads;
	m.vocab = t->vocab;
	m.positions = t->positions;
	if (gk_mem_model_from_shape(&m, GK_MEM_ARCH_GPT2, 1, t->seq, err)) {
		gk_err_prefix(err, "train");
		return -1;
	}

	gk_mem_run_default(&r);
	r.seq = t->seq;
	if (t->batch)
		r.micro_batch = t->batch;
	if (t->precision)
		r.precision = t->precision;
	r.opt = GK_MEM_OPT_ADAMW;
	r.zero = t->zero;
	if (t->dp)
		r.dp = t->dp;
	if (t->tp)
		r.tp = t->tp;
	r.sp = t->sp && r.tp > 1;
	if (t->pp)
		r.pp = t->pp;
	if (t->grad_accum)
		r.grad_accum = t->grad_accum;
	r.pp_sched = t->pp_sched;
	if (t->pp_chunks)
		r.pp_chunks = t->pp_chunks;
	r.recompute = t->recompute;
	r.flash = !t->eager;
	r.dropout = !!t->dropout;
	r.logits_f32 = !!t->logits_f32;
	r.grad_f32 = !!t->grad_f32;
	r.ckpt_copy = !!t->ckpt_copy;
	r.offload = t->offload ? GK_MEM_OFFLOAD_OPTIMIZER : GK_MEM_OFFLOAD_NONE;
	if (t->bucket)
		r.bucket = t->bucket;
	r.overlap = !t->no_overlap;
	r.keep_gathered = t->keep_gathered;
	r.host_backend = !t->cuda;
	gk_mem_run_resolve(&r, &m);
	if (r.pp > 1 ? gk_mem_estimate_stage(&m, &r, t->stage, 0, e, err)
		     : gk_mem_estimate(&m, &r, 0, e, err)) {
		gk_err_prefix(err, "train");
		return -1;
	}
	if (m_out)
		*m_out = m;
	if (r_out)
		*r_out = r;
	return 0;
}

static const char *const cat_names[GK_MEM_NCAT] = {
	"parameters", "gradients", "optimizer", "activations", "workspace", "padding", "comm",
	"checkpoint",
};

const char *gk_mem_cat_name(gk_mem_cat c)
{
	return (unsigned)c < GK_MEM_NCAT ? cat_names[c] : "?";
}
