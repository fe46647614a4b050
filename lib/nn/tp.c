/*
 * tp.c - tensor parallelism: Megatron-LM's split of GPT-2 over the ranks
 * of a tensor group, as layers of one rank's slices (internal.h), the
 * slices of the whole model's flat buffer (gk_nn_tp_copy) and the
 * collectives model.c runs between the layers.
 *
 * reference: Shoeybi et al., "Megatron-LM: Training Multi-Billion
 * Parameter Language Models Using Model Parallelism", 2019, section 3;
 * Megatron-LM's megatron/core/tensor_parallel (ColumnParallelLinear,
 * RowParallelLinear, VocabParallelEmbedding, vocab_parallel_cross_entropy).
 *
 * Per block, rank r of tp holds heads [r NH/tp, (r+1) NH/tp) of each of
 * Q, K and V (c_attn's columns: HF's fused c_attn is [Q|K|V], so a rank's
 * columns are three blocks, not one), columns [r 4C/tp, (r+1) 4C/tp) of
 * c_fc, and the matching rows of attn.c_proj and mlp.c_proj:
 *
 *   ln1 = LN(in)                       replicated
 *   f:  identity forward, allreduce of d ln1 backward
 *   qkv_r = ln1 @ c_attn_r + b_r       column-parallel, (N, 3C/tp)
 *   y_r = attention over r's heads     local
 *   g:  res2 = in + allreduce(y_r @ c_proj_r) + b   row-parallel, the
 *       bias once, after the sum; identity backward
 *   the MLP the same way: f, c_fc_r, GeLU local, mlp.c_proj_r, g
 *
 * Sequence parallelism (Korthikanti et al., "Reducing Activation
 * Recomputation in Large Transformer Models", 2022, section 4.2.2;
 * Megatron-LM's mappings.py, gather_from_sequence_parallel_region and
 * reduce_scatter_to_sequence_parallel_region): what the above keeps
 * replicated between a g and the next f (the residual stream, the
 * LayerNorms, the biases' sums) each rank keeps for its T/tp positions of
 * every sequence only. g becomes a reduce-scatter (identity backward
 * becomes an all-gather), f an all-gather (allreduce backward becomes a
 * reduce-scatter), model.c around the same layers. A pipeline stage
 * passes what it holds between blocks: each tensor rank sends its T/tp
 * positions to the same tensor rank of the next stage, 1/tp of a whole
 * activation (gk_nn_pp_count), and the gradients back alike, as
 * Megatron-LM's stages do; the first stage's embedding is scattered by
 * positions and the last stage's head gathers lnf, as without stages.
 * ZeRO-3 sees nothing of it: the LayerNorms' gradients are summed over
 * the group inside backward, before the data-parallel reduction.
 *
 * The embedding and the LM head it is tied to are split by vocabulary
 * rows (vocab_pad / tp a rank): the lookup is a masked lookup summed over
 * the group; the logits stay split, and the cross-entropy needs three
 * numbers a row from the group (the max, the sum of exponentials, the
 * target's logit), never the logits. LayerNorms, wpe and the
 * row-parallel biases are replicated: their gradients come from the same
 * allreduced values on every rank, the same on each.
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "nn/cuda_internal.h"
#include "nn/math.h"

int gk_nn_tp_check(const gk_nn_config *c, int tp, gk_err *err)
{
	if (tp < 1)
		return gk_errf(err, "tensor parallelism over %d ranks: not a group", tp);
	if (c->heads % tp)
		return gk_errf(err, "tensor parallelism over %d ranks: the model's %lld heads "
			       "do not divide by %d (each rank takes whole heads)", tp,
			       (long long)c->heads, tp);
	if (c->vocab_pad % tp)
		return gk_errf(err, "tensor parallelism over %d ranks: the padded vocabulary "
			       "of %lld rows (vocab_size %lld rounded up to a multiple of 128) "
			       "does not divide by %d", tp, (long long)c->vocab_pad,
			       (long long)c->vocab, tp);
	return 0;
}

void gk_nn_tp_copy(const gk_nn_tensor *ft, const gk_nn_tensor *lt, size_t n, int tp, int r,
		   float *whole, float *local, int to_local)
{
	for (size_t i = 0; i < n; i++) {
		const gk_nn_tensor *f = &ft[i], *l = &lt[i];
		float *w = whole + f->off, *p = local + l->off;
		if (l->split == GK_NN_SPLIT_NONE || l->split == GK_NN_SPLIT_ROWS) {
			/* replicated, or a block of rows */
			size_t at = l->split == GK_NN_SPLIT_ROWS ? (size_t)r * l->numel : 0;
			if (to_local)
				memcpy(p, w + at, l->numel * sizeof(float));
			else
				memcpy(w + at, p, l->numel * sizeof(float));
			continue;
		}
		/* COLS: of each row, r's columns of each group */
		size_t R = f->ndim == 2 ? (size_t)f->shape[0] : 1;
		size_t W = f->ndim == 2 ? (size_t)f->shape[1] : (size_t)f->shape[0];
		size_t g = (size_t)l->groups, gw = W / g, lw = gw / (size_t)tp;
		for (size_t row = 0; row < R; row++)
			for (size_t k = 0; k < g; k++) {
				float *a = w + row * W + k * gw + (size_t)r * lw;
				float *b = p + row * g * lw + k * lw;
				if (to_local)
					memcpy(b, a, lw * sizeof(float));
				else
					memcpy(a, b, lw * sizeof(float));
			}
	}
}

uint64_t gk_nn_tp_bytes(const gk_nn_model *m)
{
	return m->tp_bytes;
}

size_t gk_nn_tp_replicas(gk_nn_model *m, const size_t r[2][2], float *buf, int out)
{
	size_t at = 0;
	for (size_t i = 0; i < m->nt_tensors; i++) {
		const gk_nn_tensor *x = &m->t[i];
		size_t e = x->off + x->numel;
		for (int k = 0; x->split == GK_NN_SPLIT_NONE && k < 2; k++) {
			size_t a = x->off > r[k][0] ? x->off : r[k][0], b = e < r[k][1] ? e : r[k][1];
			if (a >= b)
				continue;
			if (buf)
				memcpy(out ? buf + at : m->grads + a, out ? m->grads + a : buf + at,
				       (b - a) * sizeof(float));
			at += b - a;
		}
	}
	return at;
}

/*
 * On a GPU the replicas' gradients agree in place in the device's buffer
 * (or ZeRO-2's shard, at): one broadcast over the group's NCCL
 * communicator for each run of adjacent replicated tensors (a block's
 * attention projection bias, its second LayerNorm; its MLP projection
 * bias with the next block's first LayerNorm), fewer and larger than one
 * a tensor and without a buffer.
 */
int gk_nn_tp_agree_replicas(gk_nn_model *m, const size_t r[2][2], float *buf, float *at,
			    gk_err *err)
{
	if (m->tp == 1)
		return 0;
	if (at && (!m->cu || r[1][1] > r[1][0]))
		return gk_errf(err, "replicated gradients in a shard: on a GPU, of one range");
	if (!m->cu) {
		size_t n = gk_nn_tp_replicas(m, r, buf, 1);
		if (gk_comm_broadcast(m->tpc, buf, buf, n, GK_DT_F32, 0, err) < 0)
			return -1;
		gk_nn_tp_replicas(m, r, buf, 0);
		return 0;
	}
	/* a run from x: in the shard at at[x - r[0][0]], or in the model's
	 * segment holding x (the runs join flat neighbours only, and the
	 * segments are none: gk_nn_cuda_segments) */
#define G(x) (at ? at + ((x) - r[0][0]) : gk_nn_cuda_grads(m, (x)))
	size_t a0 = 0, b0 = 0;
	for (size_t i = 0; i < m->nt_tensors; i++) {
		const gk_nn_tensor *x = &m->t[i];
		size_t e = x->off + x->numel;
		for (int k = 0; x->split == GK_NN_SPLIT_NONE && k < 2; k++) {
			size_t a = x->off > r[k][0] ? x->off : r[k][0], b = e < r[k][1] ? e : r[k][1];
			if (a >= b)
				continue;
			if (a != b0) {
				if (b0 > a0 &&
				    gk_nn_cuda_tp_grads_bcast(m, G(a0), b0 - a0, err) < 0)
					return -1;
				a0 = a;
			}
			b0 = b;
		}
	}
	int rc = b0 > a0 ? gk_nn_cuda_tp_grads_bcast(m, G(a0), b0 - a0, err) : 0;
#undef G
	return rc;
}

void gk_nn_tp_scatter(const gk_nn_model *m, const float *full, float *local)
{
	gk_nn_tp_copy(m->ft, m->t, m->nt_tensors, m->tp, m->tpr, (float *)full, local, 1);
}

int gk_nn_tp_gather(gk_nn_model *m, const float *local, float *full, gk_err *err)
{
	if (m->tp == 1) {
		memcpy(full, local, m->nparams * sizeof(float));
		return 0;
	}
	float *all = malloc((size_t)m->tp * m->nparams * sizeof(float));
	if (!all)
		return gk_err_sys(err, ENOMEM, "tensor-parallel gather");
	if (gk_comm_allgather(m->tpc, local, all, m->nparams, GK_DT_F32, NULL, err) < 0) {
		free(all);
		return -1;
	}
	/* the replicated tensors: rank 0's, written last */
	for (int r = m->tp - 1; r >= 0; r--)
		gk_nn_tp_copy(m->ft, m->t, m->nt_tensors, m->tp, r, full,
			      all + (size_t)r * m->nparams, 0);
	free(all);
	return 0;
}

/* ---- the layers ---------------------------------------------------------------- */

void gk_nn_tp_embed_fwd(float *out, const int32_t *tok, const float *wte, int64_t v0, int nv,
			int N, int C, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++) {
		int64_t v = (int64_t)tok[i] - v0;
		float *o = out + (size_t)i * C;
		if (v >= 0 && v < nv)
			memcpy(o, wte + (size_t)v * C, (size_t)C * sizeof(float));
		else
			memset(o, 0, (size_t)C * sizeof(float));
	}
}

void gk_nn_tp_embed_bwd(float *dwte, const float *dout, const int32_t *tok, int64_t v0,
			int nv, int N, int C, int nt)
{
	/* a token repeats across rows: threads own columns, rows in order */
#pragma omp parallel num_threads(nt)
	{
		int k = omp_get_num_threads(), id = omp_get_thread_num();
		int c0 = (int)((int64_t)C * id / k), c1 = (int)((int64_t)C * (id + 1) / k);
		for (int i = 0; i < N; i++) {
			int64_t v = (int64_t)tok[i] - v0;
			if (v < 0 || v >= nv)
				continue;
			const float *d = dout + (size_t)i * C;
			float *e = dwte + (size_t)v * C;
			for (int c = c0; c < c1; c++)
				e[c] += d[c];
		}
	}
}

void gk_nn_tp_add_pos(float *out, const float *wpe, int B, int T, int t0, int C, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < B * T; i++) {
		const float *p = wpe + (size_t)(t0 + i % T) * C;
		float *o = out + (size_t)i * C;
		for (int c = 0; c < C; c++)
			o[c] += p[c];
	}
}

/* ---- sequence parallelism ------------------------------------------------------- */

int gk_nn_sp_check(int tp, int seq, gk_err *err)
{
	if (tp < 2)
		return gk_errf(err, "sequence parallelism splits the sequence over a tensor "
			       "group: not over one rank");
	if (seq % tp)
		return gk_errf(err, "sequence parallelism over %d ranks: the sequence length %d "
			       "does not divide by %d (each rank takes %d/%d positions; a "
			       "sequence of %d does)", tp, seq, tp, seq, tp, (seq / tp + 1) * tp);
	return 0;
}

/* whole rows of C floats between the orders of gk_nn_sp_row */
static void sp_move(float *dst, const float *src, int B, int T, int tp, int C, int nt,
		    int to_ranks)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < B * T; i++) {
		size_t j = gk_nn_sp_row((size_t)i, B, T, tp);
		if (to_ranks)
			memcpy(dst + j * C, src + (size_t)i * C, (size_t)C * sizeof(float));
		else
			memcpy(dst + (size_t)i * C, src + j * C, (size_t)C * sizeof(float));
	}
}

void gk_nn_sp_to_ranks(float *dst, const float *src, int B, int T, int tp, int C, int nt)
{
	sp_move(dst, src, B, T, tp, C, nt, 1);
}

void gk_nn_sp_from_ranks(float *dst, const float *src, int B, int T, int tp, int C, int nt)
{
	sp_move(dst, src, B, T, tp, C, nt, 0);
}

void gk_nn_tp_pos_bwd(float *dwpe, const float *dout, int B, int T, int C, int nt)
{
	/* as gk_nn_cpu_encoder_bwd's: threads own columns, rows in order */
#pragma omp parallel num_threads(nt)
	{
		int k = omp_get_num_threads(), id = omp_get_thread_num();
		int c0 = (int)((int64_t)C * id / k), c1 = (int)((int64_t)C * (id + 1) / k);
		for (int i = 0; i < B * T; i++) {
			const float *d = dout + (size_t)i * C;
			float *p = dwpe + (size_t)(i % T) * C;
			for (int c = c0; c < c1; c++)
				p[c] += d[c];
		}
	}
}

void gk_nn_tp_row_finish(float *out, const float *res, const float *bias, int N, int OC,
			 int nt)
{
	/* the unsplit layer's order: (res + bias) + the product */
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++) {
		float *o = out + (size_t)i * OC;
		const float *r = res ? res + (size_t)i * OC : NULL;
		for (int c = 0; c < OC; c++)
			o[c] = gk_nn_tp_finish(r ? r[c] : 0.0f, bias ? bias[c] : 0.0f, o[c]);
	}
}

void gk_nn_tp_xent_max(float *mx, const float *logits, int N, int nv, int ld, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++)
		mx[i] = nv > 0 ? gk_nn_row_max(logits + (size_t)i * ld, nv) : -INFINITY;
}

void gk_nn_tp_xent_parts(float *part, const float *logits, const float *mx,
			 const int32_t *targets, int64_t v0, int N, int nv, int ld, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++) {
		const float *x = logits + (size_t)i * ld;
		float acc[GK_NN_LANES] = {0};
		int j = 0;
		for (; j + GK_NN_LANES <= nv; j += GK_NN_LANES)
			for (int l = 0; l < GK_NN_LANES; l++)
				acc[l] += gk_nn_expf(x[j + l] - mx[i]);
		for (; j < nv; j++)
			acc[j % GK_NN_LANES] += gk_nn_expf(x[j] - mx[i]);
		part[2 * i] = gk_nn_lanes_sum(acc);
		int64_t y = targets ? (int64_t)targets[i] - v0 : -1;
		part[2 * i + 1] = targets && targets[i] >= 0 && y >= 0 && y < nv ? x[y] : 0.0f;
	}
}

double gk_nn_tp_xent_finish(float *lse, const float *mx, const float *part,
			    const int32_t *targets, int N)
{
	double s = 0.0;
	for (int i = 0; i < N; i++) {
		lse[i] = mx[i] + logf(part[2 * i]);
		if (targets && targets[i] >= 0)
			s += (double)lse[i] - (double)part[2 * i + 1];
	}
	return s;
}

void gk_nn_tp_xent_bwd(float *logits, const float *lse, const int32_t *targets, float dloss,
		       int64_t v0, int N, int nv, int ld, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int i = 0; i < N; i++) {
		float *x = logits + (size_t)i * ld;
		if (targets[i] < 0) {
			memset(x, 0, (size_t)ld * sizeof(float));
			continue;
		}
		int64_t y = (int64_t)targets[i] - v0;
		for (int j = 0; j < nv; j++)
			x[j] = gk_nn_xent_grad(x[j], lse[i], j == y, dloss);
		memset(x + nv, 0, (size_t)(ld - nv) * sizeof(float));
	}
}

/* ---- the gradient norm ------------------------------------------------------------ */

int gk_nn_tp_grad_norm(gk_nn_model *m, double *norm, gk_err *err)
{
	/* the split tensors' slices from every rank, the replicated ones
	 * (the same on each) from rank 0 alone: each parameter once */
	double ss = 0.0;
	for (size_t i = 0; i < m->nt_tensors; i++) {
		const gk_nn_tensor *t = &m->t[i];
		if (t->split != GK_NN_SPLIT_NONE || m->tpr == 0)
			ss += gk_nn_sumsq(m->grads + t->off, t->numel);
	}
	if (gk_comm_allreduce(m->tpc, &ss, &ss, 1, GK_DT_F64, GK_COMM_SUM, NULL, err) < 0)
		return -1;
	*norm = sqrt(ss);
	return 0;
}
