/*
 * model_state_cuda.c - the CUDA model's training state between the host
 * and the device, and its update (model_cuda.c has the model's buffers,
 * forward and backward): parameters and gradients copied up and down
 * through the pinned staging, the AdamW moments of up to two ranges, the
 * working copy, the gradient norm and the AdamW step.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/comm.h"
#include "nn/cuda_internal.h"
#include "nn/model_cuda.h"

static int no_full_grads(gk_err *err)
{
	return gk_errf(err, "the model's gradients on the GPU are in buckets (ZeRO-2): "
		       "there is no buffer of all of them to copy, sum or update from");
}

/* ---- transfers ----------------------------------------------------------------- */

int gk_nn_cuda_put(struct gk_nn_cuda *cu, void *dev, const void *host, size_t bytes,
		   gk_err *err)
{
	for (size_t o = 0; o < bytes; o += cu->pin_bytes) {
		size_t k = bytes - o < cu->pin_bytes ? bytes - o : cu->pin_bytes;
		memcpy(cu->pin, (const char *)host + o, k);
		if (gk_cuda_copy((char *)dev + o, cu->pin, k, cu->s, err) < 0)
			return -1;
	}
	return 0;
}

int gk_nn_cuda_get(struct gk_nn_cuda *cu, void *host, const void *dev, size_t bytes,
		   gk_err *err)
{
	for (size_t o = 0; o < bytes; o += cu->pin_bytes) {
		size_t k = bytes - o < cu->pin_bytes ? bytes - o : cu->pin_bytes;
		if (gk_cuda_copy(cu->pin, (const char *)dev + o, k, cu->s, err) < 0)
			return -1;
		memcpy((char *)host + o, cu->pin, k);
	}
	return 0;
}

/* the part of the device's segment k below nparams: n floats from
 * element off of the flat buffer */
static size_t seg_part(const gk_nn_model *m, int k, size_t *off)
{
	const struct gk_nn_cuda *cu = m->cu;
	size_t hi = cu->shi[k] < m->nparams ? cu->shi[k] : m->nparams;
	*off = cu->slo[k];
	return hi > cu->slo[k] ? hi - cu->slo[k] : 0;
}

/* the working copy (bf16) of each segment rounded from its master */
static int round_work(gk_nn_model *m, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	size_t off, n;
	for (int k = 0; cu->pw && cu->dt != GK_DT_F32 && k < 2; k++)
		if ((n = seg_part(m, k, &off)) &&
		    gk_cuda_convert(gk_nn_cuda_param_at(m, off), cu->dt,
				    gk_nn_cuda_master_at(cu, off, off + n), GK_DT_F32, n, cu->s,
				    err) < 0)
			return -1;
	return 0;
}

int gk_nn_cuda_upload(gk_nn_model *m, int what, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu)
		return 0;
	size_t n = m->nparams, off, k;
	if ((what & GK_NN_GRADS) && m->o.bucket_grads)
		return no_full_grads(err);
	for (int j = 0; (what & GK_NN_GRADS) && j < 2; j++)
		if ((k = seg_part(m, j, &off)) &&
		    gk_nn_cuda_put(cu, gk_nn_cuda_grads(m, off), m->grads + off, k * 4, err) < 0)
			return -1;
	if (what & GK_NN_PARAMS) {
		/* (unit_params: this rank's pieces, of which the padding is zero) */
		for (int j = 0; j < 2; j++) {
			size_t hi = cu->phi[j] < n ? cu->phi[j] : n;
			if (hi > cu->plo[j] &&
			    gk_nn_cuda_put(cu, cu->p + cu->pat[j], m->params + cu->plo[j],
					   (hi - cu->plo[j]) * 4, err) < 0)
				return -1;
		}
		if (round_work(m, err) < 0 || gk_cuda_stream_sync(cu->s, err) < 0)
			return -1;
		cu->uploaded = 1;
	}
	return 0;
}

int gk_nn_cuda_download(gk_nn_model *m, int what, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu)
		return 0;
	size_t off, k;
	if ((what & GK_NN_GRADS) && m->o.bucket_grads)
		return no_full_grads(err);
	if (what & GK_NN_PARAMS) {
		for (int j = 0; j < 2; j++) {
			size_t hi = cu->phi[j] < m->nparams ? cu->phi[j] : m->nparams;
			if (hi > cu->plo[j] &&
			    gk_nn_cuda_get(cu, m->params + cu->plo[j], cu->p + cu->pat[j],
					   (hi - cu->plo[j]) * 4, err) < 0)
				return -1;
		}
	}
	for (int j = 0; (what & GK_NN_GRADS) && j < 2; j++)
		if ((k = seg_part(m, j, &off)) &&
		    gk_nn_cuda_get(cu, m->grads + off, gk_nn_cuda_grads(m, off), k * 4, err) < 0)
			return -1;
	return 0;
}

/*
 * The moments of [lo, hi), allocated (zero) on first use by either
 * direction: one range, or two (a pipeline's last stage updates its own
 * range and the tied wte, dp.c); *k says which.
 */
static int moments_alloc(gk_nn_model *m, size_t lo, size_t hi, int *k, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (lo > hi || hi > m->nparams)
		return gk_errf(err, "AdamW moments of parameters [%zu, %zu): the model has %zu",
			       lo, hi, m->nparams);
	for (*k = 0; *k < cu->nmom; ++*k)
		if (cu->mlo[*k] == lo && cu->mhi[*k] == hi)
			return 0;
	/* a second range beside the first, never across it */
	for (int i = 0; i < cu->nmom; i++)
		if (cu->nmom == 2 || (lo < cu->mhi[i] && cu->mlo[i] < hi))
			return gk_errf(err, "AdamW moments of parameters [%zu, %zu): they cover "
				       "[%zu, %zu)%s", lo, hi, cu->mlo[i], cu->mhi[i],
				       cu->nmom == 2 ? " and another range" : "");
	/* both or neither: a failure leaves no half-made moments behind
	 * (dalloc keeps what it got, freed with the model) */
	size_t n = (hi - lo) * 4;
	void *mom = gk_nn_cuda_dalloc(cu, n, GK_CUDA_MEM_OPTIM, err), *vel = NULL;
	if (!mom || !(vel = gk_nn_cuda_dalloc(cu, n, GK_CUDA_MEM_OPTIM, err)) ||
	    GK_CUDA_CHECK(cudaMemsetAsync(mom, 0, n, cu->s), err) < 0 ||
	    GK_CUDA_CHECK(cudaMemsetAsync(vel, 0, n, cu->s), err) < 0)
		return -1;
	*k = cu->nmom++;
	cu->mom[*k] = mom, cu->vel[*k] = vel;
	cu->mlo[*k] = lo, cu->mhi[*k] = hi;
	return 0;
}

int gk_nn_cuda_moments(gk_nn_model *m, size_t lo, size_t hi, float *mom,
		       float *vel, int upload, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int j;
	if (!cu)
		return gk_errf(err, "AdamW moments on the GPU: the model is on "
			       "the CPU");
	if (moments_alloc(m, lo, hi, &j, err) < 0)
		return -1;
	size_t n = (hi - lo) * 4;
	float *host[2] = {mom, vel}, *dev[2] = {cu->mom[j], cu->vel[j]};
	for (int k = 0; k < 2; k++)
		if ((upload ? gk_nn_cuda_put(cu, dev[k], host[k], n, err) :
			      gk_nn_cuda_get(cu, host[k], dev[k], n, err)) < 0)
			return -1;
	return 0;
}

float *gk_nn_cuda_params(gk_nn_model *m, size_t off)
{
	return m->cu ? gk_nn_cuda_master_at(m->cu, off, off) : NULL;
}

void *gk_nn_cuda_work_copy(gk_nn_model *m, size_t off, gk_dtype *dt)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu || !cu->pw || cu->pw == cu->p)
		return NULL;
	*dt = cu->dt;
	return gk_nn_cuda_param_at(m, off);
}

int gk_nn_cuda_params_changed(gk_nn_model *m, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu)
		return gk_errf(err, "parameters on the GPU: the model is on the CPU");
	/* (units are filled from the master at each gather) */
	if (round_work(m, err) < 0)
		return -1;
	return gk_cuda_stream_sync(cu->s, err);
}

/* ---- the optimizer step -------------------------------------------------------- */

int gk_nn_cuda_sumsq(gk_nn_model *m, const float *g, size_t n, double *sumsq,
		     gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu)
		return gk_errf(err, "sum of squares on the GPU: the model is on the CPU "
			       "(gk_nn_sumsq)");
	*sumsq = 0.0;
	return gk_nn_cu_sumsq(cu->norm + GK_NN_SUM_BLOCKS, cu->norm, g, n, cu->s, err) < 0 ||
	       gk_cuda_copy(sumsq, cu->norm + GK_NN_SUM_BLOCKS, sizeof(*sumsq), cu->s, err) < 0
		       ? -1 : 0;
}

int gk_nn_cuda_grad_norm(gk_nn_model *m, double *norm, gk_err *err)
{
	if (!m->cu)
		return gk_errf(err, "gradient norm on the GPU: the model is on "
			       "the CPU (gk_nn_sumsq)");
	double s;
	if (m->o.bucket_grads)
		return no_full_grads(err);
	/* under tensor parallelism each parameter once, summed over the group */
	if (gk_nn_cuda_sumsq_once(m, NULL, 0, m->nparams, &s, err) < 0 ||
	    (m->tp > 1 && gk_comm_allreduce(m->tpc, &s, &s, 1, GK_DT_F64, GK_COMM_SUM, NULL,
					     err) < 0))
		return -1;
	*norm = sqrt(s);
	return 0;
}

int gk_nn_cuda_sumsq_once(gk_nn_model *m, const float *g, size_t lo, size_t hi, double *ss,
			  gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!g) {
		/* the model's: the part of [lo, hi) in each segment */
		*ss = 0.0;
		for (int k = 0; k < 2; k++) {
			size_t a = lo > cu->slo[k] ? lo : cu->slo[k];
			size_t b = hi < cu->shi[k] ? hi : cu->shi[k];
			double x;
			if (a >= b)
				continue;
			if (gk_nn_cuda_sumsq_once(m, gk_nn_cuda_grads(m, a), a, b, &x, err) < 0)
				return -1;
			*ss += x;
		}
		return 0;
	}
	/* element x of the range at g0[x - o] */
	const float *g0 = g;
	size_t o = lo;
	/* rank 0 of a tensor group all of its own, the others their split
	 * tensors' slices (gk_nn_pp_sumsq's rule, on the device) */
	if (m->tp == 1 || m->tpr == 0)
		return gk_nn_cuda_sumsq(m, g0 + (lo - o), hi - lo, ss, err);
	*ss = 0.0;
	for (size_t i = 0; i < m->nt_tensors; i++) {
		const gk_nn_tensor *t = &m->t[i];
		size_t a = t->off > lo ? t->off : lo, b = t->off + t->numel;
		double x;
		b = b < hi ? b : hi;
		if (a >= b || t->split == GK_NN_SPLIT_NONE)
			continue;
		if (gk_nn_cuda_sumsq(m, g0 + (a - o), b - a, &x, err) < 0)
			return -1;
		*ss += x;
	}
	return 0;
}

int gk_nn_cuda_adamw(gk_nn_model *m, const gk_nn_adamw *c, float lr,
		     int64_t t, float grad_scale, size_t lo, size_t hi,
		     const float *g, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu)
		return gk_errf(err, "AdamW on the GPU: the model is on the CPU "
			       "(gk_nn_adamw_step)");
	int j;
	if (moments_alloc(m, lo, hi, &j, err) < 0)
		return -1;
	float *p = gk_nn_cuda_master_at(cu, lo, hi);
	if (!p)
		return gk_errf(err, "AdamW on the GPU of [%zu, %zu): this rank holds the "
			       "parameters [%zu, %zu) and [%zu, %zu)", lo, hi, cu->plo[0],
			       cu->phi[0], cu->plo[1], cu->phi[1]);
	if (!g && m->o.bucket_grads)
		return no_full_grads(err);
	if (!g && gk_nn_cuda_index(cu->slo, cu->shi, cu->sat, lo, hi) == SIZE_MAX)
		return gk_errf(err, "AdamW on the GPU of [%zu, %zu): this rank holds the "
			       "gradients [%zu, %zu) and [%zu, %zu)", lo, hi, cu->slo[0],
			       cu->shi[0], cu->slo[1], cu->shi[1]);
	if (!g)
		g = gk_nn_cuda_grads(m, lo);
	gk_nn_adamw_k k;
	float decay;
	gk_nn_adamw_consts(c, lr, t, &k, &decay);
	/* per tensor, each with its own decay (as gk_nn_adamw_step), over
	 * the part of it in [lo, hi) */
	for (size_t i = 0; i < m->nt_tensors; i++) {
		const gk_nn_tensor *x = &m->t[i];
		size_t a = x->off > lo ? x->off : lo;
		size_t b = x->off + x->numel < hi ? x->off + x->numel : hi;
		if (a >= b)
			continue;
		/* (units: no working copy to keep, the next gather converts) */
		void *pw = cu->dt == GK_DT_F32 || !cu->pw ? NULL : gk_nn_cuda_param_at(m, a);
		if (gk_nn_cu_adamw(p + (a - lo), pw, cu->dt, g + (a - lo), grad_scale,
				   cu->mom[j] + (a - lo), cu->vel[j] + (a - lo), b - a, &k,
				   x->decay ? decay : 1.0f, cu->s, err) < 0)
			return -1;
	}
	return gk_cuda_stream_sync(cu->s, err);
}

int gk_nn_cuda_host_adamw(gk_nn_model *m, const gk_nn_adamw *c, float lr, int64_t t,
			  float grad_scale, size_t lo, size_t hi, float *mom, float *vel,
			  gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	float *p = gk_nn_cuda_master_at(cu, lo, hi);
	if (!p)
		return gk_errf(err, "AdamW on the host of [%zu, %zu): this rank holds the "
			       "parameters [%zu, %zu) and [%zu, %zu)", lo, hi, cu->plo[0],
			       cu->phi[0], cu->plo[1], cu->phi[1]);
	if (m->o.bucket_grads)
		return no_full_grads(err);
	size_t n = hi - lo;
	if (gk_nn_cuda_index(cu->slo, cu->shi, cu->sat, lo, hi) == SIZE_MAX)
		return gk_errf(err, "AdamW on the host of [%zu, %zu): this rank holds the "
			       "gradients [%zu, %zu) and [%zu, %zu)", lo, hi, cu->slo[0],
			       cu->shi[0], cu->slo[1], cu->shi[1]);
	if (gk_nn_cuda_get(cu, m->params + lo, p, n * 4, err) < 0 ||
	    gk_nn_cuda_get(cu, m->grads + lo, gk_nn_cuda_grads(m, lo), n * 4, err) < 0)
		return -1;
	gk_nn_adamw_step(m, c, lr, t, lo, hi, m->params + lo, m->grads + lo, grad_scale, mom, vel);
	if (gk_nn_cuda_put(cu, p, m->params + lo, n * 4, err) < 0)
		return -1;
	if (cu->pw && cu->dt != GK_DT_F32 &&
	    gk_cuda_convert(gk_nn_cuda_param_at(m, lo), cu->dt, p, GK_DT_F32, n, cu->s, err) < 0)
		return -1;
	return gk_cuda_stream_sync(cu->s, err);
}
