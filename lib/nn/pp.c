/*
 * pp.c - pipeline parallelism, the model's side: which layers a stage
 * runs, where its input, output and their gradients are, and which
 * range of the flat buffer is its own. The schedule that moves
 * micro-batches between the stages is the trainer's (pp_sched.c).
 *
 * reference: Huang et al., "GPipe", 2019; Narayanan et al., "Efficient
 * Large-Scale Language Model Training on GPU Clusters Using
 * Megatron-LM", 2021, section 2.2 (1F1B) and 2.2.2 (the interleaved
 * schedule's model chunks); Megatron-LM's megatron/core/pipeline_parallel.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

int gk_nn_pp_chunk_layers(int64_t L, int pp, int V, int s, int c, int *l0, int *l1,
			  gk_err *err)
{
	if (V <= 1)
		return c == 0 ? gk_nn_pp_layers(L, pp, s, l0, l1, err)
			      : gk_errf(err, "pipeline stage %d: no chunk %d (one a stage)", s, c);
	if (pp < 1 || s < 0 || s >= pp || c < 0 || c >= V)
		return gk_errf(err, "pipeline stage %d of %d, chunk %d of %d: no such chunk", s, pp,
			       c, V);
	int64_t n = (int64_t)pp * V;
	if (L % n) {
		/* the nearest layer counts that divide */
		int64_t lo = L / n * n, hi = lo + n;
		return gk_errf(err, "pipeline of %d stages, %d chunks each: the model's %lld "
			       "layer%s do not divide into %lld chunks of equal size (%lld "
			       "layers would, or %lld)", pp, V, (long long)L, L == 1 ? "" : "s",
			       (long long)n, (long long)(lo ? lo : hi), (long long)(hi + (lo ? 0 : n)));
	}
	int64_t q = L / n, j = (int64_t)c * pp + s;
	*l0 = (int)(j * q);
	*l1 = (int)(j * q + q);
	return 0;
}

/* block l's place in the flat buffer, in blocks: stage-major (nn.h) */
static int place_of(int64_t L, int pp, int V, int l)
{
	int64_t q = L / ((int64_t)pp * V), j = l / q, s = j % pp, c = j / pp;
	return (int)((s * V + c) * q + l % q);
}

int gk_nn_pp_place(gk_nn_model *m, gk_err *err)
{
	int L = (int)m->c.layers;
	if (m->ppv <= 1)
		return 0;
	if (!(m->ppat = malloc((size_t)L * sizeof(*m->ppat))))
		return gk_err_sys(err, ENOMEM, "model pipeline placement");
	size_t base = m->blk[0].ln1w, bs = m->blk[1].ln1w - base, end = base + (size_t)L * bs;
	for (int l = 0; l < L; l++)
		m->ppat[l] = place_of(L, m->pp, m->ppv, l);
	for (size_t i = 0; i < m->nt_tensors; i++) {
		size_t o = m->t[i].off;
		if (o >= base && o < end)
			m->t[i].off = base + (size_t)m->ppat[(o - base) / bs] * bs + (o - base) % bs;
	}
	for (int l = 0; l < L; l++) {
		/* the block's offsets, each moved by its distance */
		size_t *f = (size_t *)&m->blk[l];
		ptrdiff_t d = ((ptrdiff_t)m->ppat[l] - l) * (ptrdiff_t)bs;
		for (size_t k = 0; k < sizeof(m->blk[l]) / sizeof(size_t); k++)
			f[k] = (size_t)((ptrdiff_t)f[k] + d);
	}
	return 0;
}

static void move_blocks(const gk_nn_model *m, const float *src, float *dst, int to_hf)
{
	size_t n = m->nparams;
	if (!m->ppat) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	int L = (int)m->c.layers;
	/* the offsets of the Hugging Face order: block l at base + l bs */
	size_t base = m->wpe + (size_t)m->c.positions * (size_t)m->c.hidden;
	size_t bs = (m->lnfw - base) / (size_t)L, end = base + (size_t)L * bs;
	memcpy(dst, src, base * sizeof(float));
	memcpy(dst + end, src + end, (n - end) * sizeof(float));
	for (int l = 0; l < L; l++) {
		size_t h = base + (size_t)l * bs, r = base + (size_t)m->ppat[l] * bs;
		memcpy(dst + (to_hf ? h : r), src + (to_hf ? r : h), bs * sizeof(float));
	}
}

void gk_nn_pp_to_hf(const gk_nn_model *m, const float *src, float *dst)
{
	move_blocks(m, src, dst, 1);
}

void gk_nn_pp_from_hf(const gk_nn_model *m, const float *src, float *dst)
{
	move_blocks(m, src, dst, 0);
}

void gk_nn_pp_use_chunk(gk_nn_model *m, int c)
{
	gk_err ignore;
	if (m->ppv > 1)
		gk_nn_pp_chunk_layers(m->c.layers, m->pp, m->ppv, m->ppr, c, &m->l0, &m->l1,
				      &ignore);
}

int gk_nn_pp_block_index(const gk_nn_model *m, int p)
{
	/* stage s's V chunks of n blocks from place s V n (place_of) */
	if (m->pp == 1)
		return p;
	return p - (m->ppv > 1 ? m->ppr * m->ppv * (m->l1 - m->l0) : m->l0);
}

size_t gk_nn_pp_count(const gk_nn_model *m)
{
	size_t n = (size_t)m->o.batch * (size_t)m->o.seq * (size_t)m->c.hidden;
	return m->sp ? n / (size_t)m->tp : n;
}

/* a stage's residual stream holds its layers' inputs and its output */
void *gk_nn_pp_input(gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_pp_input(m) : m->resid;
}

void *gk_nn_pp_output(gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_pp_output(m) :
		       m->resid + (size_t)(m->l1 - m->l0) * gk_nn_pp_count(m);
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
	int l0 = 0, l1 = (int)m->c.layers, n0 = 0, n1 = 0;
	gk_err ignore;
	/* the flat buffer is wte, wpe, h.0 ... h.(L-1), ln_f (gpt.c), its
	 * blocks stage-major under the interleaved schedule (gk_nn_pp_place):
	 * the stage's first chunk's first block to the next stage's */
	if (m->pp > 1)
		gk_nn_pp_chunk_layers(m->c.layers, m->pp, m->ppv, s, 0, &l0, &l1, &ignore);
	if (m->pp > 1 && s < m->pp - 1)
		gk_nn_pp_chunk_layers(m->c.layers, m->pp, m->ppv, s + 1, 0, &n0, &n1, &ignore);
	*lo = s == 0 ? 0 : m->blk[l0].ln1w;
	*hi = m->pp == 1 || s == m->pp - 1 ? m->nparams : m->blk[n0].ln1w;
	*shared = s > 0 && s == m->pp - 1 ? m->wpe - m->wte : 0;
}

size_t gk_nn_pp_piece(const gk_nn_model *m, int s, int r, int W, int k, size_t *a, size_t *b)
{
	size_t lo, hi, head, wte, x, y;
	gk_nn_pp_range(m, s, &lo, &hi, &head);
	gk_nn_pp_range(m, m->pp - 1, &x, &y, &wte);
	/* the first stage's wte is a segment of its own, as the last's */
	size_t s0 = k == 0 ? (s == 0 ? wte : lo) : 0, s1 = k == 0 ? hi : s == 0 ? wte : head;
	size_t len = s1 - s0, per = (len + (size_t)W - 1) / (size_t)W, q = (size_t)r;
	*a = s0 + (q * per < len ? q * per : len);
	*b = s0 + ((q + 1) * per < len ? (q + 1) * per : len);
	return per;
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
