/*
 * pp.c - pipeline parallelism, the model's side: which layers a stage
 * runs, where its input, output and their gradients are, and which
 * range of the flat buffer is its own. The schedule that moves
 * micro-batches between the stages is the trainer's (pp_sched.c).
 *
 * reference: Huang et al., "GPipe", 2019; Narayanan et al., "Efficient
 * Large-Scale Language Model Training on GPU Clusters Using
 * Megatron-LM", 2021, section 2.2 (1F1B); Megatron-LM's
 * megatron/core/pipeline_parallel.
 */
#include "nn/cuda_internal.h"
#include "nn/internal.h"

int gk_nn_pp_layers(int64_t L, int pp, int s, int *l0, int *l1, gk_err *err)
{
	if (pp < 1)
		return gk_errf(err, "pipeline parallelism over %d stages: not a number of stages",
			       pp);
	if (pp > L)
		return gk_errf(err, "pipeline parallelism over %d stages: the model has %lld "
			       "layer%s, and each stage needs one at least (use --pp %lld or fewer)",
			       pp, (long long)L, L == 1 ? "" : "s", (long long)L);
	if (s < 0 || s >= pp)
		return gk_errf(err, "pipeline stage %d of %d: no such stage", s, pp);
	int64_t q = L / pp, r = L % pp;
	*l0 = (int)(s * q + (s < r ? s : r));
	*l1 = (int)(*l0 + q + (s < r));
	return 0;
}

static size_t rows(const gk_nn_model *m)
{
	return (size_t)m->o.batch * (size_t)m->o.seq * (size_t)m->c.hidden;
}

/* a stage's residual stream holds its layers' inputs and its output */
void *gk_nn_pp_input(gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_pp_input(m) : m->resid;
}

void *gk_nn_pp_output(gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_pp_output(m) : m->resid + (size_t)(m->l1 - m->l0) * rows(m);
}

void *gk_nn_pp_grad(gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_pp_grad(m) : m->dres;
}

gk_dtype gk_nn_pp_dtype(const gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_pp_dtype(m) : GK_DT_F32;
}

void gk_nn_pp_range(const gk_nn_model *m, int s, size_t *lo, size_t *hi, size_t *shared)
{
	int l0 = 0, l1 = (int)m->c.layers;
	gk_err ignore;
	if (m->pp > 1)
		gk_nn_pp_layers(m->c.layers, m->pp, s, &l0, &l1, &ignore);
	int L = (int)m->c.layers;
	/* the flat buffer is wte, wpe, h.0 ... h.(L-1), ln_f (gpt.c) */
	*lo = s == 0 ? 0 : m->blk[l0].ln1w;
	*hi = l1 == L ? m->nparams : m->blk[l1].ln1w;
	*shared = s > 0 && s == m->pp - 1 ? m->wpe - m->wte : 0;
}

size_t gk_nn_pp_floats(const gk_nn_model *m)
{
	size_t lo, hi, shared;
	gk_nn_pp_range(m, m->ppr, &lo, &hi, &shared);
	return hi - lo + shared;
}

void gk_nn_pp_release(gk_nn_model *m)
{
	size_t lo, hi, shared;
	if (m->pp == 1)
		return;
	gk_nn_pp_range(m, m->ppr, &lo, &hi, &shared);
	/* whole pages only: those shared with the range stay */
	if (lo > shared)
		gk_nn_params_release(m, shared, lo);
	if (hi < m->nparams)
		gk_nn_params_release(m, hi, m->nparams);
}

double gk_nn_pp_sumsq(const gk_nn_model *m, size_t lo, size_t hi)
{
	double ss = 0;
	for (size_t i = 0; i < m->nt_tensors; i++) {
		const gk_nn_tensor *x = &m->t[i];
		size_t a = x->off > lo ? x->off : lo, b = x->off + x->numel;
		b = b < hi ? b : hi;
		if (a < b && (x->split != GK_NN_SPLIT_NONE || m->tpr == 0))
			ss += gk_nn_sumsq(m->grads + a, b - a);
	}
	return ss;
}
