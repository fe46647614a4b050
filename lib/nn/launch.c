/*
 * launch.c - the CUDA backend's launch arithmetic, in plain C so it is
 * built and tested on every machine (tests/unit/nn_cuda_launch.c): how
 * work is cut for the deterministic reductions, and the token buckets of
 * the embedding backward.
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
