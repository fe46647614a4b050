/*
 * launch.c - the CUDA backend's launch arithmetic, in plain C so it is
 * built and tested on every machine (tests/unit/nn_cuda_launch.c): how
 * work is cut for the deterministic reductions, the token buckets of
 * the embedding backward, and the model's device buffers.
 */
#include <string.h>

#include "nn/cuda_internal.h"

unsigned gk_nn_row_grid(uint64_t rows)
{
	return gk_cuda_grid(rows, GK_NN_ROW_WARPS);
}

unsigned gk_nn_colsum_chunks(uint64_t N)
{
	uint64_t c = (N + GK_NN_COLSUM_ROWS - 1) / GK_NN_COLSUM_ROWS;
	/* the chunks are gridDim.y, at most 65535; past that chunks grow */
	if (c > 65535)
		c = 65535;
	return c ? (unsigned)c : 1;
}

uint64_t gk_nn_colsum_floats(uint64_t N, uint64_t C)
{
	return (uint64_t)gk_nn_colsum_chunks(N) * 4 * C;
}

/*
 * Why buckets: a token repeats across the batch, so scattering dout rows
 * into dwte needs either atomics (whose order, and so whose rounding,
 * changes run to run) or an owner per row. The tokens are on the host
 * anyway (the forward checks them), so the grouping is a counting sort
 * there, O(N + V), and the kernel gives each distinct token one block
 * that adds its positions in ascending order.
 */
int gk_nn_token_buckets(const int32_t *tok, int N, int V, int32_t *uniq,
			int32_t *start, int32_t *pos, int32_t *count)
{
	memset(count, 0, (size_t)V * sizeof(*count));
	for (int i = 0; i < N; i++)
		count[tok[i]]++;
	int nb = 0, at = 0;
	for (int v = 0; v < V; v++) {
		if (!count[v])
			continue;
		uniq[nb] = v;
		start[nb] = at;
		nb++;
		int c = count[v];
		count[v] = at; /* now the next free slot of v */
		at += c;
	}
	start[nb] = at;
	for (int i = 0; i < N; i++)
		pos[count[tok[i]]++] = i;
	return nb;
}

void gk_nn_lt_shape_of(const gk_nn_gemm *g, gk_nn_lt_shape *s)
{
	s->m = g->N;
	s->n = g->M;
	s->k = g->K;
	/* first operand: our B, stored (K,N) row-major = (N,K) column-major,
	 * or (N,K) row-major = (K,N) column-major when tb */
	s->trans_a = g->tb;
	s->a = g->B;
	s->a_rows = (uint64_t)(g->tb ? g->K : g->N);
	s->a_cols = (uint64_t)(g->tb ? g->N : g->K);
	s->lda = g->ldb;
	s->sa = g->sB;
	/* second operand: our A, (M,K) row-major = (K,M) column-major */
	s->trans_b = g->ta;
	s->b = g->A;
	s->b_rows = (uint64_t)(g->ta ? g->M : g->K);
	s->b_cols = (uint64_t)(g->ta ? g->K : g->M);
	s->ldb = g->lda;
	s->sb = g->sA;
	s->d_rows = (uint64_t)g->N;
	s->d_cols = (uint64_t)g->M;
	s->ldd = g->ldd;
	s->sd = g->sD;
}

/* 256-byte pieces, so every matmul operand starts aligned for cuBLASLt. */
static uint64_t r256(uint64_t bytes)
{
	return (bytes + 255) / 256 * 256;
}

size_t gk_nn_cuda_segments(const gk_nn_model *m, size_t lo[2], size_t hi[2], size_t at[2])
{
	size_t shared;
	lo[0] = lo[1] = hi[1] = 0;
	hi[0] = m->nflat;
	if (m->pp > 1) {
		gk_nn_pp_range(m, m->ppr, &lo[0], &hi[0], &shared);
		hi[0] = hi[0] == m->nparams ? m->nflat : hi[0];
		hi[1] = shared;
	}
	at[0] = 0;
	at[1] = hi[0] - lo[0];
	return at[1] + hi[1] - lo[1];
}

void gk_nn_cuda_layout(const gk_nn_model *m, int fused,
		       size_t sz[GK_NN_CU_NACT], size_t ss[GK_NN_CU_NWS],
		       gk_nn_mem *out)
{
	size_t B = (size_t)m->o.batch, T = (size_t)m->o.seq;
	size_t C = (size_t)m->c.hidden, NH = (size_t)m->c.heads;
	size_t L = (size_t)m->c.layers, Vp = (size_t)m->c.vocab_pad;
	size_t N = B * T;
	size_t es = m->o.precision == GK_NN_BF16 ? 2 : 4;
	/* a pipeline stage: its layers only, and the head's buffers on the
	 * last stage alone; under the interleaved schedule a slot holds one
	 * chunk's layers (as gpt.c's act_sizes: the kernels index a layer's
	 * buffers from the chunk's first, gk_nn_pp_use_chunk) */
	size_t hd = 1;
	if (m->o.pp > 1) {
		int l0 = 0, l1 = (int)L;
		gk_err ignore;
		if (gk_nn_pp_chunk_layers(m->c.layers, m->o.pp, m->o.pp_chunks, m->o.pp_rank, 0,
					  &l0, &l1, &ignore) == 0)
			L = (size_t)(l1 - l0);
		hd = m->o.pp_rank == m->o.pp - 1;
	}
	/* tensor parallelism (tp.c): a rank's heads (Cq of attention's C
	 * channels), F of the MLP's 4C, Vl of the padded vocabulary; and the
	 * group's fp32 sums, a row-parallel product or a column-parallel
	 * input's gradient (N,C), the cross-entropy's 4 floats a row */
	size_t tp = m->o.tp > 1 ? (size_t)m->o.tp : 1;
	size_t Cq = C / tp, NHq = NH / tp, F = 4 * C / tp, Vl = Vp / tp;
	size_t tps = tp > 1 ? N * C * 4 : 0, tpx = tp > 1 ? 4 * N * 4 : 0;
	/* sequence parallelism (tp.c): R rows in the LayerNorm and residual
	 * regions, a rank's T/tp positions of each sequence; the gathered
	 * input of a column-parallel layer (N,C) in dt, the collectives'
	 * rank-major order (N,C) in fp32, a LayerNorm's gradients' sums 2C */
	size_t sp = m->o.seq_par && tp > 1, R = sp ? N / tp : N;
	size_t kl = m->o.recompute != GK_NN_RECOMPUTE_LAYER ? L : 1;
	size_t kg = m->o.recompute == GK_NN_RECOMPUTE_NONE ? L : 1;
	/* attention's (T,T) matrices, or the fused kernels' one float a row */
	size_t att = fused ? B * NHq * T * 4 : B * NHq * T * T * es;
	size_t heads = fused ? 0 : N * Cq * es; /* q, k, v, y split by head */
	size_t a[GK_NN_CU_NACT] = {
		(L + 1) * R * C * es,         /* resid */
		hd * R * C * es, hd * R * 4, hd * R * 4, /* lnf, mean, rstd */
		hd * N * Vl * es, hd * N * 4, hd * N * 4, /* logits, lse, loss */
		kl * R * C * es, kl * R * 4, kl * R * 4, /* ln1 */
		kl * N * 3 * Cq * es,         /* qkv */
		kl * att,                     /* att */
		kl * N * Cq * es,             /* atty */
		kl * R * C * es,              /* res2 */
		kl * R * C * es, kl * R * 4, kl * R * 4, /* ln2 */
		kl * N * F * es,              /* fch */
		kg * N * F * es,              /* fchg */
		N * 4, N * 4, N * 4, (N + 1) * 4, N * 4, /* tok tgt uniq start pos */
	};
	/* q k v y, then the backward's gradients: dres dln datty (B,T,C),
	 * dqkv, dfc; datt (the matmul path's d scores, the fused one's
	 * row sums: the size of att), the column sums, the norm's partials,
	 * tensor parallelism's sums, sequence parallelism's buffers */
	size_t w[GK_NN_CU_NWS] = {
		heads, heads, heads, heads,
		N * C * es, N * C * es, N * Cq * es, N * 3 * Cq * es,
		N * F * es, att,
		gk_nn_colsum_floats(N, C) * 4,
		(GK_NN_SUM_BLOCKS + 1) * sizeof(double),
		tps, tpx,
		sp * N * C * es, sp * N * C * 4, sp * 2 * C * 4,
	};
	memcpy(sz, a, sizeof(a));
	memcpy(ss, w, sizeof(w));
	memset(out, 0, sizeof(*out));
	/* a pipeline stage's segments of the flat buffer only */
	size_t lo[2], hi[2], at[2], n = gk_nn_cuda_segments(m, lo, hi, at);
	out->parameters = (uint64_t)n * 4 + (es == 2 ? (uint64_t)n * es : 0);
	out->gradients = (uint64_t)n * 4;
	for (size_t i = 0; i < GK_NN_CU_NACT; i++)
		out->activations += r256(sz[i]);
	out->workspace = GK_NN_CU_WS_BYTES;
	for (size_t i = 0; i < GK_NN_CU_NWS; i++)
		out->workspace += r256(ss[i]);
	out->tp_buffers = r256(tps) + r256(tpx);
}
