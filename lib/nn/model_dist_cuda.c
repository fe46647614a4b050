/*
 * model_dist_cuda.c - the model's buffers in the layouts that data and
 * pipeline parallelism ask of it on a CUDA device (model_cuda.c keeps the
 * model: its buffers, forward, backward and the optimizer step):
 *
 *   bucket_grads  ZeRO-2: the gradients above the embeddings in a few
 *                 bucket-sized buffers that dp.c reduce-scatters and reuses
 *   unit_params   ZeRO-3: the working copy of the parameters in units (the
 *                 embeddings, the tail, a ring of block buffers) that
 *                 zero3.c gathers before a block's use, and of the fp32
 *                 master this rank's pieces (gk_nn_pp_piece): the flat
 *                 multiple's equal range without a grid, a tensor rank's
 *                 piece of its slice table (the same range), a pipeline
 *                 stage's of its layers and, on the first and last stage,
 *                 of the tied wte (two ranges)
 *   slots         a pipeline stage's activations of several micro-batches
 *                 in flight (pp_sched.c), one set a slot
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "nn/cuda_internal.h"
#include "nn/model_cuda.h"

/*
 * unit_params: the working copy's units, in dt: the embeddings (wte, wpe)
 * and the final norm with the flat buffer's tail, each of its own, and
 * unit_params buffers of a block, block l in buffer l % unit_params. A
 * pipeline stage has the edges it uses only: the first stage the
 * embeddings, the last the tied wte and the final norm, a middle one
 * none.
 */
int gk_nn_cuda_units_alloc(gk_nn_model *m, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	size_t hi, x, wte;
	int L = (int)m->c.layers;
	gk_nn_block_range(m, 0, &cu->uhead, &hi);
	cu->ulen = hi - cu->uhead;
	gk_nn_block_range(m, L - 1, &x, &cu->utail);
	cu->nuslot = (size_t)m->o.unit_params;
	size_t head = cu->uhead, tail = m->nflat - cu->utail;
	if (m->pp > 1) {
		gk_nn_pp_range(m, m->pp - 1, &x, &hi, &wte);
		head = m->ppr == 0 ? head : m->ppr == m->pp - 1 ? wte : 0;
		tail = m->ppr == m->pp - 1 ? tail : 0;
	}
	if (!(cu->uslot = calloc(cu->nuslot, sizeof(*cu->uslot))))
		return gk_err_sys(err, ENOMEM, "model on the GPU: parameter units");
	if ((head && !(cu->ue[0] = gk_nn_cuda_dalloc(cu, head * cu->es, GK_CUDA_MEM_PARAMS,
						      err))) ||
	    (tail && !(cu->ue[1] = gk_nn_cuda_dalloc(cu, tail * cu->es, GK_CUDA_MEM_PARAMS,
						      err))))
		return -1;
	for (size_t k = 0; k < cu->nuslot; k++)
		if (!(cu->uslot[k] = gk_nn_cuda_dalloc(cu, cu->ulen * cu->es,
						       GK_CUDA_MEM_PARAMS, err)))
			return -1;
	return 0;
}

/* ---- gradients in buckets (bucket_grads) ----------------------------------------- */

/*
 * What a kernel of backward may write as one piece lies in one buffer:
 * the buckets above head are cut at layers (gk_nn_grad_buckets), so a
 * tensor's start says its bucket and the whole tensor is in it.
 */
float *gk_nn_cuda_grad_at(gk_nn_model *m, size_t off)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu->blo || off < cu->ghead)
		return gk_nn_cuda_grads(m, off);
	size_t b = 0;
	while (b + 1 < cu->nbk && cu->blo[b] > off)
		b++;
	return cu->slot[b % cu->nslot] + (off - cu->blo[b]);
}

/* is x an edge a bucket above head may have: a layer's, the final norm's, the end */
static int layer_edge(const gk_nn_model *m, size_t x)
{
	if (x == m->nparams || x == m->lnfw)
		return 1;
	for (int l = 0; l < (int)m->c.layers; l++) {
		size_t lo, hi;
		gk_nn_block_range(m, l, &lo, &hi);
		if (x == lo || x == hi)
			return 1;
	}
	return 0;
}

int gk_nn_cuda_grad_buckets(gk_nn_model *m, size_t head, const size_t *lo, size_t nb,
			    size_t nslot, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!m->o.bucket_grads || cu->blo)
		return gk_errf(err, "gradient buckets on the GPU: the model was not made for "
			       "them (bucket_grads), or has them already");
	if (nslot < 1 || nslot > GK_NN_CU_SLOTS || nb == 0 || head > m->nparams)
		return gk_errf(err, "gradient buckets on the GPU: %zu buffers (1 to %d) for %zu "
			       "buckets over %zu of %zu gradients", nslot, GK_NN_CU_SLOTS, nb,
			       head, m->nparams);
	size_t len = 0;
	for (size_t b = 0; b < nb; b++) {
		size_t hi = b ? lo[b - 1] : m->nparams;
		if (lo[b] >= hi || (b + 1 == nb && lo[b] != 0))
			return gk_errf(err, "gradient buckets on the GPU: bucket %zu, [%zu, %zu), "
				       "does not continue the ones above it down to 0", b, lo[b],
				       hi);
		if (lo[b] < head && hi > head)
			return gk_errf(err, "gradient buckets on the GPU: bucket %zu, [%zu, %zu), "
				       "crosses the embeddings' end %zu", b, lo[b], hi, head);
		if (lo[b] >= head && (!layer_edge(m, lo[b]) || !layer_edge(m, hi)))
			return gk_errf(err, "gradient buckets on the GPU: bucket %zu, [%zu, %zu), "
				       "cuts a layer", b, lo[b], hi);
		if (lo[b] >= head && hi - lo[b] > len)
			len = hi - lo[b];
	}
	if (!(cu->blo = malloc(nb * sizeof(*cu->blo))))
		return gk_err_sys(err, ENOMEM, "gradient buckets on the GPU");
	memcpy(cu->blo, lo, nb * sizeof(*cu->blo));
	cu->nbk = nb;
	cu->ghead = head;
	cu->nslot = len ? nslot : 0;
	cu->slot_len = len;
	/* at least one float, so that g is never NULL */
	if (!(cu->g = gk_nn_cuda_dalloc(cu, (head ? head : 1) * 4, GK_CUDA_MEM_GRADS, err)))
		return -1;
	for (size_t k = 0; k < cu->nslot; k++)
		if (!(cu->slot[k] = gk_nn_cuda_dalloc(cu, len * 4, GK_CUDA_MEM_GRADS, err)))
			return -1;
	if (cu->nslot == 0)
		cu->nslot = 1, cu->slot[0] = cu->g; /* every bucket under head */
	return gk_nn_cuda_zero_grad(m, err) < 0 ? -1 : gk_cuda_stream_sync(cu->s, err);
}

/* ---- the working copy in units (unit_params) ------------------------------------ */

void *gk_nn_cuda_param_at(const gk_nn_model *m, size_t off)
{
	const struct gk_nn_cuda *cu = m->cu;
	if (cu->whole || !cu->uslot) {
		size_t i = gk_nn_cuda_index(cu->slo, cu->shi, cu->sat, off, off);
		return i == SIZE_MAX ? NULL : (char *)(cu->whole ? cu->whole : cu->pw) + i * cu->es;
	}
	if (off < cu->uhead)
		return (char *)cu->ue[0] + off * cu->es;
	if (off >= cu->utail)
		return (char *)cu->ue[1] + (off - cu->utail) * cu->es;
	/* the block at place l's buffer by its place among the stage's
	 * blocks, every nuslot sharing one (zero3.c's turns) */
	size_t l = (off - cu->uhead) / cu->ulen;
	size_t k = (size_t)gk_nn_pp_block_index(m, (int)l) % cu->nuslot;
	return (char *)cu->uslot[k] + (off - cu->uhead - l * cu->ulen) * cu->es;
}

gk_dtype gk_nn_cuda_param_dtype(const gk_nn_model *m)
{
	return m->cu->dt;
}

/* the working copy of [off, off + n) from n fp32 parameters in device
 * memory, on the model's stream */
static int to_work(gk_nn_model *m, size_t off, const float *src, size_t n, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	void *dst = gk_nn_cuda_param_at(m, off);
	if (n == 0)
		return 0;
	if (cu->dt == GK_DT_F32)
		return GK_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToDevice,
						     cu->s), err);
	return gk_cuda_convert(dst, cu->dt, src, GK_DT_F32, n, cu->s, err);
}

size_t gk_nn_cuda_index(const size_t lo[2], const size_t hi[2], const size_t at[2], size_t a,
			size_t b)
{
	for (int k = 0; k < 2; k++)
		if (a >= lo[k] && b <= hi[k] && a <= b)
			return at[k] + (a - lo[k]);
	return SIZE_MAX;
}

float *gk_nn_cuda_master_at(struct gk_nn_cuda *cu, size_t a, size_t b)
{
	size_t i = gk_nn_cuda_index(cu->plo, cu->phi, cu->pat, a, b);
	return i == SIZE_MAX ? NULL : cu->p + i;
}

int gk_nn_cuda_params_own(gk_nn_model *m, size_t a, size_t b, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	const float *src = gk_nn_cuda_master_at(cu, a, b);
	if (!src)
		return gk_errf(err, "parameters on the GPU: [%zu, %zu) is not in this rank's "
			       "[%zu, %zu) or [%zu, %zu)", a, b, cu->plo[0], cu->phi[0], cu->plo[1],
			       cu->phi[1]);
	return to_work(m, a, src, b - a, err);
}

int gk_nn_cuda_params_whole(gk_nn_model *m, int on, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!on || cu->whole) {
		if (gk_cuda_stream_sync(cu->s, err) < 0)
			return -1;
		gk_cuda_free(cu->whole);
		cu->whole = NULL;
		if (!on)
			return 0;
	}
	/* (a pipeline stage's: its segments) */
	if (!(cu->whole = gk_cuda_alloc(cu->sfloats * cu->es, GK_CUDA_MEM_PARAMS, err)))
		return -1;
	/* this rank's pieces from its fp32 master; the rest is the caller's */
	for (int k = 0; k < 2; k++)
		if (to_work(m, cu->plo[k], cu->p + cu->pat[k], cu->phi[k] - cu->plo[k], err) < 0)
			return -1;
	return gk_cuda_stream_sync(cu->s, err);
}

int gk_nn_cuda_params_put(gk_nn_model *m, size_t off, const float *src, size_t n, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu->whole || off > m->nflat || n > m->nflat - off ||
	    gk_nn_cuda_index(cu->slo, cu->shi, cu->sat, off, off + n) == SIZE_MAX)
		return gk_errf(err, "parameters on the GPU: [%zu, %zu) put into %s of [%zu, %zu) "
			       "and [%zu, %zu)", off, off + n,
			       cu->whole ? "a working copy" : "no whole working copy", cu->slo[0],
			       cu->shi[0], cu->slo[1], cu->shi[1]);
	if (to_work(m, off, src, n, err) < 0)
		return -1;
	return gk_cuda_stream_sync(cu->s, err);
}

/* ---- a pipeline stage (pp.c, pp_sched.c) ---------------------------------------- */

void *gk_nn_cuda_pp_input(gk_nn_model *m)
{
	return m->cu->resid;
}

void *gk_nn_cuda_pp_output(gk_nn_model *m)
{
	struct gk_nn_cuda *cu = m->cu;
	return (char *)cu->resid + (size_t)(m->l1 - m->l0) * gk_nn_pp_count(m) * cu->es;
}

void *gk_nn_cuda_pp_grad(gk_nn_model *m)
{
	return m->cu->dres;
}

gk_dtype gk_nn_cuda_pp_dtype(const gk_nn_model *m)
{
	return m->cu->dt;
}

/* every activation pointer is abase[slot] plus its offset (alloc_all) */
static void shift_acts(struct gk_nn_cuda *cu, ptrdiff_t d)
{
	void **v[] = {&cu->resid, &cu->lnf, &cu->logits, &cu->a_ln1, &cu->a_qkv, &cu->a_att,
		      &cu->a_atty, &cu->a_res2, &cu->a_ln2, &cu->a_fch, &cu->a_fchg};
	float **f[] = {&cu->lnfm, &cu->lnfr, &cu->lse, &cu->loss, &cu->a_ln1m, &cu->a_ln1r,
		       &cu->a_ln2m, &cu->a_ln2r};
	int32_t **i[] = {&cu->tok, &cu->tgt, &cu->uniq, &cu->start, &cu->pos};
	for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
		*v[k] = (char *)*v[k] + d;
	for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
		*f[k] = (float *)(void *)((char *)*f[k] + d);
	for (size_t k = 0; k < sizeof i / sizeof i[0]; k++)
		*i[k] = (int32_t *)(void *)((char *)*i[k] + d);
}

int gk_nn_cuda_slots(gk_nn_model *m, int n, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (n > PP_SLOTS)
		return gk_errf(err, "model on the GPU: %d micro-batches (or their chunks) in "
			       "flight on a pipeline stage, at most %d (fewer stages or chunks, "
			       "or --pp-schedule 1f1b)", n, PP_SLOTS);
	for (int k = 1; k < n; k++)
		if (!(cu->abase[k] = gk_nn_cuda_dalloc(cu, cu->abytes, GK_CUDA_MEM_ACTS, err)))
			return gk_err_prefix(err, "activations of %d micro-batches", n);
	return 0;
}

void gk_nn_cuda_use_slot(gk_nn_model *m, int from, int to)
{
	struct gk_nn_cuda *cu = m->cu;
	cu->anb[from] = cu->nb;
	cu->axf[from] = cu->xfused; /* whether its logits are dlogits already */
	shift_acts(cu, cu->abase[to] - cu->abase[from]);
	cu->nb = cu->anb[to];
	cu->xfused = cu->axf[to];
}
