/*
 * optim.c - AdamW over a flat range of the parameters, and learning-rate
 * schedules.
 *
 * reference: torch/optim/adamw.py (_single_tensor_adamw), Loshchilov &
 * Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "nn/internal.h"
#include "nn/math.h"

GK_NN_SIMD_CLONES
static void adamw_chunk(float *restrict p, const float *restrict g,
			float gscale, float *restrict m, float *restrict v,
			size_t n, const gk_nn_adamw_k *k, float decay)
{
	gk_nn_adamw_k kk = *k;
#pragma omp simd
	for (size_t j = 0; j < n; j++)
		gk_nn_adamw_elem(&p[j], g[j] * gscale, &m[j], &v[j], &kk, decay);
}

void gk_nn_adamw_consts(const gk_nn_adamw *c, float lr, int64_t t,
			gk_nn_adamw_k *k, float *decay)
{
	double b1 = c->beta1, b2 = c->beta2;
	k->decay = 1.0f;
	k->one_m_b1 = (float)(1.0 - b1);
	k->beta2 = c->beta2;
	k->one_m_b2 = (float)(1.0 - b2);
	k->step_size = (float)((double)lr / (1.0 - pow(b1, (double)t)));
	k->bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
	k->eps = c->eps;
	*decay = (float)(1.0 - (double)lr * c->weight_decay);
}

/*
 * The range may start and end inside tensors (a ZeRO-1 rank's slice), so
 * it is walked tensor by tensor, each piece with its own decay.
 */
void gk_nn_adamw_step(const gk_nn_model *model, const gk_nn_adamw *c,
		      float lr, int64_t t, size_t lo, size_t hi, float *params,
		      const float *g, float gscale, float *m, float *v)
{
	if (hi <= lo)
		return;
	gk_nn_adamw_k k;
	float decay;
	gk_nn_adamw_consts(c, lr, t, &k, &decay);
	int nt = model->nt;

	for (size_t i = 0; i < model->nt_tensors; i++) {
		const gk_nn_tensor *x = &model->t[i];
		size_t a = x->off > lo ? x->off : lo;
		size_t b = x->off + x->numel < hi ? x->off + x->numel : hi;
		if (a >= b)
			continue;
		float d = x->decay ? decay : 1.0f;
		float *p = params + (a - lo);
		const float *gg = g + (a - lo);
		float *mm = m + (a - lo), *vv = v + (a - lo);
		size_t n = b - a;
#pragma omp parallel num_threads(nt)
		{
			size_t q = (size_t)omp_get_num_threads();
			size_t id = (size_t)omp_get_thread_num();
			size_t per = (n + q - 1) / q;
			size_t j0 = id * per < n ? id * per : n;
			size_t j1 = j0 + per < n ? j0 + per : n;
			adamw_chunk(p + j0, gg + j0, gscale, mm + j0, vv + j0, j1 - j0,
				    &k, d);
		}
	}
}

/* ---- schedules ---------------------------------------------------------------- */

double gk_nn_lr(const gk_nn_sched *s, int64_t t)
{
	if (s->warmup > 0 && t <= s->warmup)
		return s->lr * (double)t / (double)s->warmup;
	if (s->kind == GK_NN_SCHED_CONSTANT)
		return s->lr;
	if (t >= s->steps)
		return s->min_lr;
	double span = (double)(s->steps - s->warmup);
	double frac = span > 0 ? (double)(t - s->warmup) / span : 1.0;
	if (s->kind == GK_NN_SCHED_LINEAR)
		return s->lr + (s->min_lr - s->lr) * frac;
	/* cosine from lr at the end of warmup to min_lr at steps */
	return s->min_lr +
	       0.5 * (s->lr - s->min_lr) * (1.0 + cos(M_PI * frac));
}

static const char *sched_names[] = {"cosine", "linear", "constant"};

const char *gk_nn_sched_name(gk_nn_sched_kind k)
{
	return (unsigned)k < GK_ARRAY_SIZE(sched_names) ? sched_names[k] : "?";
}

int gk_nn_sched_parse(const char *s)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(sched_names); i++)
		if (strcmp(s, sched_names[i]) == 0)
			return (int)i;
	return -1;
}
