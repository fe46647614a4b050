/*
 * model.c - forward and backward of GPT-2 over the CPU kernels, with
 * recomputation.
 *
 * Block l (pre-norm, as GPT2Block):
 *   ln1  = LN(in)           qkv = ln1 @ c_attn + b     atty = attn(qkv)
 *   res2 = in + atty @ c_proj + b
 *   ln2  = LN(res2)         fch = ln2 @ c_fc + b       fchg = gelu(fch)
 *   out  = res2 + fchg @ mlp.c_proj + b
 * then lnf = LN(resid[L]) and logits = lnf @ wte^T.
 *
 * fch keeps gelu_new'(fch), not fch itself, except under GELU
 * recomputation: backward needs only the derivative, and the forward's
 * GeLU pass has the tanh it takes at hand.
 *
 * Recomputation: GELU keeps fch per layer and one fchg, redone from fch
 * in backward; LAYER keeps only the residual stream resid[0..L] and one
 * block's worth of everything else, redoing each block's forward just
 * before its backward. The recomputed values are the same bits (the same
 * kernels on the same inputs with the same threads), so every mode gives
 * the same gradients.
 */
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "nn/cuda_internal.h"

/*
 * Tensor parallelism's sum over the group of n floats in place (the g
 * operator forward, f backward); nothing at tp 1.
 */
static int tp_sum(gk_nn_model *m, float *x, size_t n, gk_err *err)
{
	if (m->tp == 1)
		return 0;
	m->tp_bytes += n * sizeof(float);
	return gk_comm_allreduce(m->tpc, x, x, n, GK_DT_F32, GK_COMM_SUM, NULL, err);
}

/*
 * Sequence parallelism (tp.c): the LayerNorm and residual regions hold
 * R = N/tp rows, this rank's T/tp positions of each sequence, in the
 * order (B, T/tp, C). sp_gather puts the group's together into full
 * (B,T,C) (f forward, g backward: an all-gather); sp_reduce sums the
 * group's partial (B,T,C) full and keeps this rank's rows in local (g
 * forward, f backward: a reduce-scatter; local may be full itself).
 */
static int sp_gather(gk_nn_model *m, const float *local, float *full, gk_err *err)
{
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden;
	size_t n = (size_t)B * T / (size_t)m->tp * C;
	m->tp_bytes += n * sizeof(float);
	if (gk_comm_allgather(m->tpc, local, m->sps, n, GK_DT_F32, NULL, err) < 0)
		return -1;
	gk_nn_sp_from_ranks(full, m->sps, B, T, m->tp, C, m->nt);
	return 0;
}

static int sp_reduce(gk_nn_model *m, const float *full, float *local, gk_err *err)
{
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden;
	size_t n = (size_t)B * T / (size_t)m->tp * C;
	gk_nn_sp_to_ranks(m->sps, full, B, T, m->tp, C, m->nt);
	m->tp_bytes += n * (size_t)m->tp * sizeof(float);
	return gk_comm_reduce_scatter(m->tpc, m->sps, local, n, GK_DT_F32, GK_COMM_SUM, NULL,
				      err);
}

/*
 * The input of a column-parallel layer (f's forward): x itself, or under
 * sequence parallelism the group's rows gathered into spg. Megatron-LM
 * keeps only the local rows of a LayerNorm's output and gathers them
 * again for the weight's gradient in backward; so does this.
 */
static const float *f_input(gk_nn_model *m, const float *x, gk_err *err)
{
	if (!m->sp)
		return x;
	return sp_gather(m, x, m->spg, err) < 0 ? NULL : m->spg;
}

/* d of a column-parallel layer's input (f's backward), in dln (N,C): the
 * group's sum, and under sequence parallelism this rank's rows of it */
static int f_grad(gk_nn_model *m, gk_err *err)
{
	int N = m->o.batch * m->o.seq, C = (int)m->c.hidden;
	return m->sp ? sp_reduce(m, m->dln, m->dln, err) : tp_sum(m, m->dln, (size_t)N * C, err);
}

/*
 * A LayerNorm's backward over the rows this rank holds: dinp += d input,
 * the gradients of its weight and bias (at w and b of the flat buffers)
 * += theirs.
 * Under sequence parallelism a rank's rows give part of those sums: they
 * are summed over the group before they join the gradient buffer, so
 * that every rank holds the same replicated gradient (Megatron-LM
 * allreduces its sequence_parallel parameters' gradients likewise).
 */
static int ln_bwd(gk_nn_model *m, float *dinp, size_t w, size_t b, const float *dout,
		  const float *inp, const float *mean, const float *rstd, gk_err *err)
{
	int N = m->o.batch * m->o.seq, C = (int)m->c.hidden;
	if (!m->sp) {
		gk_nn_cpu_layernorm_bwd(dinp, m->grads + w, m->grads + b, dout, inp,
					m->params + w, mean, rstd, N, C, m->nt);
		return 0;
	}
	float *s = m->spln;
	memset(s, 0, 2 * (size_t)C * sizeof(float));
	gk_nn_cpu_layernorm_bwd(dinp, s, s + C, dout, inp, m->params + w, mean, rstd,
				N / m->tp, C, m->nt);
	if (tp_sum(m, s, 2 * (size_t)C, err) < 0)
		return -1;
	float *dw = m->grads + w, *db = m->grads + b;
	for (int c = 0; c < C; c++) {
		dw[c] += s[c];
		db[c] += s[C + c];
	}
	return 0;
}

/*
 * A rank's widths under tensor parallelism (tp.c): Cq of attention's C
 * and NHq of its heads, F of the MLP's 4C; the whole at tp 1.
 */
#define TP_WIDTHS(m)                                                           \
	int Cq = (int)(m)->c.hidden / (m)->tp, NHq = (int)(m)->c.heads / (m)->tp; \
	int F = 4 * (int)(m)->c.hidden / (m)->tp

/*
 * A projection onto the residual stream: out = res + inp @ w + b. Row-
 * parallel under tensor parallelism: each rank's product of its rows,
 * summed over the group, then the residual and the bias once; under
 * sequence parallelism the product is made in spg, and out and res hold
 * this rank's rows of the sum.
 */
static int proj_fwd(gk_nn_model *m, float *out, const float *inp, const float *w,
		    const float *b, const float *res, int N, int K, int OC, gk_err *err)
{
	if (m->tp == 1) {
		/* onto the residual in place: no buffer for the product alone */
		gk_nn_cpu_matmul_fwd(out, inp, w, b, res, NULL, 0, N, K, OC, m->nt);
		return 0;
	}
	if (m->sp) {
		gk_nn_cpu_matmul_fwd(m->spg, inp, w, NULL, NULL, NULL, 0, N, K, OC, m->nt);
		if (sp_reduce(m, m->spg, out, err) < 0)
			return -1;
		gk_nn_tp_row_finish(out, res, b, N / m->tp, OC, m->nt);
		return 0;
	}
	gk_nn_cpu_matmul_fwd(out, inp, w, NULL, NULL, NULL, 0, N, K, OC, m->nt);
	if (tp_sum(m, out, (size_t)N * OC, err) < 0)
		return -1;
	gk_nn_tp_row_finish(out, res, b, N, OC, m->nt);
	return 0;
}

static int block_fwd(gk_nn_model *m, int l, gk_err *err)
{
	int B = m->o.batch, T = m->o.seq, N = B * T, nt = m->nt;
	int C = (int)m->c.hidden, R = m->sp ? N / m->tp : N;
	TP_WIDTHS(m);
	const float *p = m->params;
	const gk_nn_block_off *o = &m->blk[l];
	gk_nn_acts a;
	gk_nn_layer_acts(m, l, &a);
	const float *x;

	gk_nn_cpu_layernorm_fwd(a.ln1, a.ln1m, a.ln1r, a.in, p + o->ln1w,
				p + o->ln1b, R, C, m->c.ln_eps, nt);
	if (!(x = f_input(m, a.ln1, err)))
		return -1;
	gk_nn_cpu_matmul_fwd(a.qkv, x, p + o->qkvw, p + o->qkvb, NULL,
			     NULL, 0, N, C, 3 * Cq, nt);
	gk_nn_cpu_attention_fwd(a.atty, a.att, m->datt, a.qkv, B, T, Cq, NHq,
				nt);
	if (proj_fwd(m, a.res2, a.atty, p + o->attprojw, p + o->attprojb, a.in, N, Cq, C,
		     err) < 0)
		return -1;
	gk_nn_cpu_layernorm_fwd(a.ln2, a.ln2m, a.ln2r, a.res2, p + o->ln2w,
				p + o->ln2b, R, C, m->c.ln_eps, nt);
	if (!(x = f_input(m, a.ln2, err)))
		return -1;
	gk_nn_cpu_matmul_fwd(a.fch, x, p + o->fcw, p + o->fcb, NULL, a.fchg,
			     m->o.recompute != GK_NN_RECOMPUTE_GELU, N, C,
			     F, nt);
	return proj_fwd(m, a.out, a.fchg, p + o->fcprojw, p + o->fcprojb, a.res2, N, F, C, err);
}

/* The token embeddings: vocabulary-parallel under tensor parallelism. */
static int embed_fwd(gk_nn_model *m, const int32_t *tokens, gk_err *err)
{
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden;
	const float *p = m->params;
	if (m->tp == 1) {
		gk_nn_cpu_encoder_fwd(m->resid, tokens, p + m->wte, p + m->wpe, B, T, C, m->nt);
		return 0;
	}
	int64_t Vl = m->c.vocab_pad / m->tp, v0 = (int64_t)m->tpr * Vl;
	if (m->sp) {
		/* the masked lookups' sum scattered by positions (Megatron-LM's
		 * reduce_scatter_embeddings), then each row's position */
		int Tl = T / m->tp;
		gk_nn_tp_embed_fwd(m->spg, tokens, p + m->wte, v0, (int)Vl, B * T, C, m->nt);
		if (sp_reduce(m, m->spg, m->resid, err) < 0)
			return -1;
		gk_nn_tp_add_pos(m->resid, p + m->wpe, B, Tl, m->tpr * Tl, C, m->nt);
		return 0;
	}
	gk_nn_tp_embed_fwd(m->resid, tokens, p + m->wte, v0, (int)Vl, B * T, C, m->nt);
	if (tp_sum(m, m->resid, (size_t)B * T * C, err) < 0)
		return -1;
	gk_nn_tp_add_pos(m->resid, p + m->wpe, B, T, 0, C, m->nt);
	return 0;
}

/* This rank's vocabulary rows: the first v0, the real ones nv, all ld. */
static void vocab_slice(const gk_nn_model *m, int64_t *v0, int *nv, int *ld)
{
	int64_t Vl = m->c.vocab_pad / m->tp;
	*v0 = (int64_t)m->tpr * Vl;
	int64_t real = m->c.vocab - *v0;
	*nv = (int)(real < 0 ? 0 : real > Vl ? Vl : real);
	*ld = (int)Vl;
}

/*
 * The vocabulary-parallel cross-entropy's forward: the sum of the losses
 * of rows with a target, lse set; logits stay split. Three numbers a row
 * cross the group: the max, then the sum of exponentials and the target's
 * logit together.
 */
static int tp_xent_fwd(gk_nn_model *m, const int32_t *targets, double *sum, gk_err *err)
{
	int N = m->o.batch * m->o.seq, nv, ld;
	int64_t v0;
	vocab_slice(m, &v0, &nv, &ld);
	float *mx = m->tpx, *part = m->tpx + N;
	gk_nn_tp_xent_max(mx, m->logits, N, nv, ld, m->nt);
	m->tp_bytes += (size_t)N * sizeof(float);
	if (gk_comm_allreduce(m->tpc, mx, mx, (size_t)N, GK_DT_F32, GK_COMM_MAX, NULL, err) < 0)
		return -1;
	gk_nn_tp_xent_parts(part, m->logits, mx, targets, v0, N, nv, ld, m->nt);
	if (tp_sum(m, part, 2 * (size_t)N, err) < 0)
		return -1;
	*sum = gk_nn_tp_xent_finish(m->lse, mx, part, targets, N);
	return 0;
}

void gk_nn_set_eval(gk_nn_model *m, int on)
{
	m->eval = on != 0;
}

void gk_nn_set_grad_scale(gk_nn_model *m, float scale)
{
	if (scale != 0.0f && isfinite(scale))
		m->gscale = scale;
}

/* ZeRO-3's parameters around block l's use of them (gk_nn_set_param_fn) */
static int param_use(gk_nn_model *m, int phase, int l, gk_err *err)
{
	return m->pfn ? m->pfn(phase, l, m->pctx, err) : 0;
}

int gk_nn_forward(gk_nn_model *m, const int32_t *tokens,
		  const int32_t *targets, float *loss, gk_err *err)
{
	int B = m->o.batch, T = m->o.seq, N = B * T, nt = m->nt;
	int C = (int)m->c.hidden;
	int V = (int)m->c.vocab, Vp = (int)m->c.vocab_pad;
	m->have_fwd = 0;
	for (int i = 0; i < N; i++)
		if (tokens[i] < 0 || tokens[i] >= V)
			return gk_errf(err, "forward token %d (row %d, position "
				       "%d): not in 0..%d", tokens[i], i / T,
				       i % T, V - 1);
	if (targets)
		for (int i = 0; i < N; i++)
			if (targets[i] >= V)
				return gk_errf(err, "forward target %d (row %d, "
					       "position %d): not below vocab "
					       "size %d", targets[i], i / T,
					       i % T, V);
	if (m->cu)
		return gk_nn_cuda_forward(m, tokens, targets, loss, err);
	memcpy(m->tokens, tokens, (size_t)N * sizeof(int32_t));
	gk_nn_cpu_threads(nt);

	const float *p = m->params;
	/* a pipeline stage: the embedding on the first, its layers, the head
	 * on the last (the others leave their output for the next stage);
	 * under the interleaved schedule the first chunk's and the last's */
	int L = (int)m->c.layers;
	if (m->l0 == 0 && embed_fwd(m, tokens, err) < 0)
		return -1;
	for (int l = m->l0; l < m->l1; l++)
		if (param_use(m, GK_NN_FWD_PRE, l, err) < 0 || block_fwd(m, l, err) < 0 ||
		    param_use(m, GK_NN_FWD_POST, l, err) < 0)
			return -1;
	if (m->l1 < L) {
		m->have_targets = 0;
		m->have_fwd = 1;
		return 0;
	}
	int R = m->sp ? N / m->tp : N;
	const float *last = m->resid + (size_t)(m->l1 - m->l0) * R * C;
	gk_nn_cpu_layernorm_fwd(m->lnf, m->lnfm, m->lnfr, last, p + m->lnfw,
				p + m->lnfb, R, C, m->c.ln_eps, nt);
	/* under tensor parallelism, this rank's vocabulary columns (of every
	 * row: under sequence parallelism the group's lnf gathered) */
	int64_t v0;
	int nv, ld;
	vocab_slice(m, &v0, &nv, &ld);
	const float *x = f_input(m, m->lnf, err);
	if (!x)
		return -1;
	if (nv > 0)
		gk_nn_cpu_lmhead_fwd(m->logits, x, p + m->wte, N, C, nv, ld, nt);

	m->have_targets = targets != NULL;
	if (targets) {
		memcpy(m->targets, targets, (size_t)N * sizeof(int32_t));
		double s;
		if (m->tp == 1)
			s = gk_nn_cpu_xent_fwd(m->lse, m->logits, targets, N, V, Vp, nt);
		else if (tp_xent_fwd(m, targets, &s, err) < 0)
			return -1;
		double n = 0;
		for (int i = 0; i < N; i++)
			n += targets[i] >= 0;
		m->nvalid = n;
		/* all ignored: NaN, as torch's mean over no elements */
		m->loss = n > 0 ? (float)(s / n) : NAN;
		if (loss)
			*loss = m->loss;
	}
	m->have_fwd = 1;
	return 0;
}

const float *gk_nn_logits(const gk_nn_model *m, int b, int t)
{
	return m->logits + ((size_t)b * m->o.seq + t) * (m->c.vocab_pad / m->tp);
}

/* gradients [lo, hi) zero: their whole pages given back (they read as
 * zeros), the parts of pages at the ends they share zeroed */
static void zero_release(gk_nn_model *m, size_t lo, size_t hi)
{
	size_t pg = gk_nn_grad_page(), a = (lo + pg - 1) / pg * pg, b = hi / pg * pg;
	if (a >= b) {
		memset(m->grads + lo, 0, (hi - lo) * sizeof(float));
		return;
	}
	memset(m->grads + lo, 0, (a - lo) * sizeof(float));
	gk_nn_grads_release(m, a, b);
	memset(m->grads + b, 0, (hi - b) * sizeof(float));
}

void gk_nn_zero_grad(gk_nn_model *m)
{
	/* a failure on the device shows at the next call that syncs */
	if (m->cu) {
		gk_nn_cuda_zero_grad(m, NULL);
		return;
	}
	if (m->pp > 1) {
		/* a pipeline stage writes its range and wte only: the pages
		 * of a lazy buffer outside them are never touched */
		size_t lo, hi, shared;
		gk_nn_pp_range(m, m->ppr, &lo, &hi, &shared);
		if (m->lazy && m->o.release_grads) {
			zero_release(m, lo, hi);
			zero_release(m, 0, shared);
			return;
		}
		memset(m->grads + lo, 0, (hi - lo) * sizeof(float));
		memset(m->grads, 0, shared * sizeof(float));
	} else if (m->lazy) {
		gk_nn_grads_release(m, 0, m->nparams);
	} else {
		memset(m->grads, 0, m->nparams * sizeof(float));
	}
}

/*
 * dres holds d/d(block output); on return d/d(block input). ready hears
 * of each weight's gradients as soon as they are final, in the order of
 * the flat buffer from its end (fc proj, fc, ln_2, attn proj, c_attn,
 * ln_1), so the trainer's buckets start while the rest of the block
 * runs, and only the first weights of block 0 are left for after.
 */
#define READY(off)                                                             \
	do {                                                                   \
		if (ready && ready((off), ctx, err) < 0)                       \
			return -1;                                             \
	} while (0)

static int block_bwd(gk_nn_model *m, int l, gk_nn_ready_fn ready, void *ctx,
		     gk_err *err)
{
	int B = m->o.batch, T = m->o.seq, N = B * T, nt = m->nt;
	int C = (int)m->c.hidden;
	TP_WIDTHS(m);
	const float *p = m->params;
	float *g = m->grads;
	const gk_nn_block_off *o = &m->blk[l];
	gk_nn_acts a;
	gk_nn_layer_acts(m, l, &a);
	/* d of the row-parallel outputs, and the column-parallel inputs: the
	 * group's rows gathered under sequence parallelism (g's backward and
	 * the gather again of f's input), else dres and the LayerNorms' own */
	const float *dy, *x;

	if (m->o.recompute == GK_NN_RECOMPUTE_LAYER) {
		if (block_fwd(m, l, err) < 0)
			return -1;
	} else if (m->o.recompute == GK_NN_RECOMPUTE_GELU) {
		gk_nn_cpu_gelu_fwd(a.fchg, a.fch, (size_t)N * F, nt);
	}

	/* out = res2 + fchg @ Wp + bp: dres passes to res2 unchanged (and
	 * through g unchanged to every rank's rows of Wp; the bias's
	 * gradient from every row, the same on each rank) */
	if (!(dy = f_input(m, m->dres, err)))
		return -1;
	gk_nn_cpu_matmul_bwd(m->dfc, g + o->fcprojw, g + o->fcprojb, dy,
			     a.fchg, p + o->fcprojw, N, F, C, nt);
	READY(o->fcprojw);
	/* fch holds gelu' unless recomputed; fc's bias gradient is summed
	 * in the same pass */
	gk_nn_cpu_gelu_bwd(m->dfc, g + o->fcb, a.fch,
			   m->o.recompute != GK_NN_RECOMPUTE_GELU, N, F, nt);
	if (!(x = f_input(m, a.ln2, err)))
		return -1;
	gk_nn_cpu_matmul_bwd(m->dln, g + o->fcw, NULL, m->dfc, x,
			     p + o->fcw, N, C, F, nt);
	/* f: each rank's columns gave a part of d ln2 */
	if (f_grad(m, err) < 0)
		return -1;
	READY(o->fcw);
	if (ln_bwd(m, m->dres, o->ln2w, o->ln2b, m->dln, a.res2, a.ln2m, a.ln2r,
		   err) < 0)
		return -1;
	READY(o->ln2w);
	/* res2 = in + atty @ Wap + bap */
	if (!(dy = f_input(m, m->dres, err)))
		return -1;
	gk_nn_cpu_matmul_bwd(m->datty, g + o->attprojw, g + o->attprojb,
			     dy, a.atty, p + o->attprojw, N, Cq, C, nt);
	READY(o->attprojw);
	gk_nn_cpu_attention_bwd(m->dqkv, m->datt, m->datty, a.qkv, a.att, B,
				T, Cq, NHq, nt);
	if (!(x = f_input(m, a.ln1, err)))
		return -1;
	gk_nn_cpu_matmul_bwd(m->dln, g + o->qkvw, g + o->qkvb, m->dqkv, x,
			     p + o->qkvw, N, C, 3 * Cq, nt);
	if (f_grad(m, err) < 0)
		return -1;
	READY(o->qkvw);
	if (ln_bwd(m, m->dres, o->ln1w, o->ln1b, m->dln, a.in, a.ln1m, a.ln1r,
		   err) < 0)
		return -1;
	READY(o->ln1w);
	return 0;
}

int gk_nn_backward(gk_nn_model *m, float scale, gk_nn_ready_fn ready,
		   void *ctx, gk_err *err)
{
	int lastst = m->l1 == (int)m->c.layers;
	if (!m->have_fwd || (lastst && !m->have_targets))
		return gk_errf(err, "backward: no forward with targets to "
			       "differentiate");
	if (m->cu)
		return gk_nn_cuda_backward(m, scale, ready, ctx, err);
	int B = m->o.batch, T = m->o.seq, N = B * T, nt = m->nt;
	int C = (int)m->c.hidden;
	int V = (int)m->c.vocab, Vp = (int)m->c.vocab_pad;
	const float *p = m->params;
	float *g = m->grads;
	/* the logits become dlogits: a second backward needs a new forward */
	m->have_fwd = 0;
	gk_nn_cpu_threads(nt);

	/* d mean / d loss_i = 1/n; scale folded in here reaches every
	 * gradient, so the sgemms accumulate with beta 1 and no pass over
	 * the gradient buffer is needed */
	float dloss = m->nvalid > 0 ? (float)(scale / m->nvalid) : 0.0f;
	if (!lastst) {
		/* a pipeline stage before the last: dres holds d output (the
		 * caller's, gk_nn_pp_grad) */
	} else if (m->tp == 1) {
		gk_nn_cpu_xent_bwd(m->logits, m->lse, m->targets, dloss, N, V, Vp, nt);
		gk_nn_cpu_lmhead_bwd(m->dln, g + m->wte, m->logits, m->lnf, p + m->wte,
				     N, C, V, Vp, nt);
	} else {
		/* this rank's vocabulary columns; f before the head: the
		 * parts of d lnf summed over the group */
		int64_t v0;
		int nv, ld;
		vocab_slice(m, &v0, &nv, &ld);
		gk_nn_tp_xent_bwd(m->logits, m->lse, m->targets, dloss, v0, N, nv, ld, nt);
		const float *x = f_input(m, m->lnf, err);
		if (!x)
			return -1;
		if (nv > 0)
			gk_nn_cpu_lmhead_bwd(m->dln, g + m->wte, m->logits, x, p + m->wte,
					     N, C, nv, ld, nt);
		else
			memset(m->dln, 0, (size_t)N * C * sizeof(float));
		if (f_grad(m, err) < 0)
			return -1;
	}
	int R = m->sp ? N / m->tp : N;
	if (lastst) {
		const float *last = m->resid + (size_t)(m->l1 - m->l0) * R * C;
		memset(m->dres, 0, (size_t)R * C * sizeof(float));
		if (ln_bwd(m, m->dres, m->lnfw, m->lnfb, m->dln, last, m->lnfm, m->lnfr,
			   err) < 0)
			return -1;
		if (ready && ready(m->lnfw, ctx, err) < 0)
			return -1;
	}
	for (int l = m->l1 - 1; l >= m->l0; l--)
		if (param_use(m, GK_NN_BWD_PRE, l, err) < 0 ||
		    block_bwd(m, l, ready, ctx, err) < 0 ||
		    param_use(m, GK_NN_BWD_POST, l, err) < 0)
			return -1;
	if (m->l0 > 0) {
		/* dres is d input, for the previous stage */
	} else if (m->tp == 1) {
		gk_nn_cpu_encoder_bwd(g + m->wte, g + m->wpe, m->dres, m->tokens, B, T, C, nt);
	} else {
		/* every row's d embedding (the reduce-scatter's backward
		 * under sequence parallelism: the group's rows gathered) */
		int64_t v0;
		int nv, ld;
		vocab_slice(m, &v0, &nv, &ld);
		const float *dy = f_input(m, m->dres, err);
		if (!dy)
			return -1;
		gk_nn_tp_embed_bwd(g + m->wte, dy, m->tokens, v0, ld, N, C, nt);
		gk_nn_tp_pos_bwd(g + m->wpe, dy, B, T, C, nt);
	}
	if (ready && ready(0, ctx, err) < 0)
		return -1;
	return 0;
}

/*
 * ---- the step's other parts, wherever the model computes ----
 *
 * The trainer calls these and never asks which backend it has: on the
 * CPU the working buffers are the host's flat ones and the mirror copies
 * do nothing; on a GPU they are the device's (model_cuda.c).
 */

float *gk_nn_work_params(gk_nn_model *m, size_t off)
{
	return m->cu ? gk_nn_cuda_params(m, off) : m->params + off;
}

void *gk_nn_work_copy(gk_nn_model *m, size_t off, gk_dtype *dt)
{
	return m->cu ? gk_nn_cuda_work_copy(m, off, dt) : NULL;
}

float *gk_nn_work_grads(gk_nn_model *m, size_t off)
{
	return m->cu ? gk_nn_cuda_grads(m, off) : m->grads + off;
}

int gk_nn_grad_buckets(gk_nn_model *m, size_t head, const size_t *lo, size_t nb, size_t nslot,
		       gk_err *err)
{
	if (!m->cu)
		return gk_errf(err, "gradient buckets: the model is on the CPU (lazy_grads)");
	return gk_nn_cuda_grad_buckets(m, head, lo, nb, nslot, err);
}

float *gk_nn_grad_at(gk_nn_model *m, size_t off)
{
	return m->cu ? gk_nn_cuda_grad_at(m, off) : m->grads + off;
}

void *gk_nn_param_at(gk_nn_model *m, size_t off)
{
	return m->cu ? gk_nn_cuda_param_at(m, off) : m->params + off;
}

gk_dtype gk_nn_param_dtype(const gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_param_dtype(m) : GK_DT_F32;
}

int gk_nn_params_own(gk_nn_model *m, size_t a, size_t b, gk_err *err)
{
	return m->cu ? gk_nn_cuda_params_own(m, a, b, err) : 0;
}

int gk_nn_params_whole(gk_nn_model *m, int on, gk_err *err)
{
	return m->cu ? gk_nn_cuda_params_whole(m, on, err) : 0;
}

int gk_nn_params_put(gk_nn_model *m, size_t off, const float *src, size_t n, gk_err *err)
{
	return m->cu ? gk_nn_cuda_params_put(m, off, src, n, err) : 0;
}

int gk_nn_tp_device(gk_nn_model *m, const struct gk_comm_config *cc, gk_err *err)
{
	return m->cu ? gk_nn_cuda_tp_open(m, cc, err) : 0;
}

void *gk_nn_stream(const gk_nn_model *m)
{
	return m->cu ? gk_nn_cuda_stream(m) : NULL;
}

int gk_nn_upload(gk_nn_model *m, int what, gk_err *err)
{
	return m->cu ? gk_nn_cuda_upload(m, what, err) : 0;
}

int gk_nn_download(gk_nn_model *m, int what, gk_err *err)
{
	return m->cu ? gk_nn_cuda_download(m, what, err) : 0;
}

int gk_nn_moments_sync(gk_nn_model *m, size_t lo, size_t hi, float *mom, float *vel,
		       int upload, gk_err *err)
{
	return m->cu ? gk_nn_cuda_moments(m, lo, hi, mom, vel, upload, err) : 0;
}

int gk_nn_params_changed(gk_nn_model *m, gk_err *err)
{
	return m->cu ? gk_nn_cuda_params_changed(m, err) : 0;
}

int gk_nn_work_sumsq(gk_nn_model *m, const float *g, size_t n, double *sumsq,
		     gk_err *err)
{
	if (m->cu)
		return gk_nn_cuda_sumsq(m, g, n, sumsq, err);
	*sumsq = gk_nn_sumsq(g, n);
	return 0;
}

int gk_nn_work_sumsq_once(gk_nn_model *m, const float *g, size_t lo, size_t hi, double *ss,
			  gk_err *err)
{
	if (m->cu)
		return gk_nn_cuda_sumsq_once(m, g, lo, hi, ss, err);
	if (g)
		return gk_errf(err, "sum of squares of gradients on the host at %p: the model's "
			       "own only (gk_nn_pp_sumsq)", (const void *)g);
	*ss = gk_nn_pp_sumsq(m, lo, hi);
	return 0;
}

int gk_nn_grad_norm(gk_nn_model *m, double *norm, gk_err *err)
{
	if (m->cu)
		return gk_nn_cuda_grad_norm(m, norm, err);
	if (m->tp > 1)
		return gk_nn_tp_grad_norm(m, norm, err);
	*norm = sqrt(gk_nn_sumsq(m->grads, m->nparams));
	return 0;
}

int gk_nn_update(gk_nn_model *m, const gk_nn_adamw *c, float lr, int64_t t,
		 float grad_scale, size_t lo, size_t hi, const float *g, float *mom,
		 float *vel, gk_err *err)
{
	if (m->cu)
		return gk_nn_cuda_adamw(m, c, lr, t, grad_scale, lo, hi, g, err);
	gk_nn_adamw_step(m, c, lr, t, lo, hi, m->params + lo, g ? g : m->grads + lo,
			 grad_scale, mom, vel);
	return 0;
}

int gk_nn_update_host(gk_nn_model *m, const gk_nn_adamw *c, float lr, int64_t t,
		      float grad_scale, size_t lo, size_t hi, float *mom, float *vel,
		      gk_err *err)
{
	if (m->cu)
		return gk_nn_cuda_host_adamw(m, c, lr, t, grad_scale, lo, hi, mom, vel, err);
	return gk_nn_update(m, c, lr, t, grad_scale, lo, hi, NULL, mom, vel, err);
}

/* ---- names of the model's options ---- */

int gk_nn_recompute_parse(const char *s)
{
	return !strcmp(s, "none") ? GK_NN_RECOMPUTE_NONE :
	       !strcmp(s, "gelu") ? GK_NN_RECOMPUTE_GELU :
	       !strcmp(s, "layer") ? GK_NN_RECOMPUTE_LAYER : -1;
}

int gk_nn_device_parse(const char *s)
{
	return !strcmp(s, "cpu") ? GK_NN_CPU :
	       !strcmp(s, "cuda") || !strcmp(s, "gpu") ? GK_NN_CUDA :
	       !strcmp(s, "auto") ? GK_NN_AUTO : -1;
}

static const char *const precisions[] = {"bf16", "tf32", "fp32"};

int gk_nn_precision_parse(const char *s)
{
	for (int i = 0; i < (int)GK_ARRAY_SIZE(precisions); i++)
		if (!strcmp(s, precisions[i]))
			return i;
	return -1;
}

const char *gk_nn_precision_name(int p)
{
	return p >= 0 && p < (int)GK_ARRAY_SIZE(precisions) ? precisions[p] : "?";
}
