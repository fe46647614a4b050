/*
 * nn_cuda_launch.c - the CUDA backend's launch arithmetic, on the host
 * (lib/nn/launch.c, cuda_internal.h): the contiguous parts behind the
 * deterministic sums cover every item once and in order, for counts past
 * 2^31 and 2^32 too; the row kernels' grid-stride loop visits every row
 * once; the column-sum chunks stay within a grid's y dimension; the
 * embedding backward's token buckets against an independent reference
 * (sorting (token, position) pairs); the row-major products handed to
 * cuBLASLt as column-major ones (gk_nn_lt_shape_of), run through a naive
 * column-major GEMM with cuBLASLt's semantics and compared with a naive
 * row-major product.
 */
#include <stdlib.h>

#include "nn/cuda_internal.h"
#include "tap.h"

/* Walk parts 0..parts-1 and check they tile [0, n) in order, each of
 * size floor(n/parts) or one more. */
static int parts_tile(uint64_t n, uint64_t parts)
{
	uint64_t at = 0, small = parts ? n / parts : 0;
	for (uint64_t k = 0; k < parts; k++) {
		uint64_t lo, hi;
		gk_nn_part(n, parts, k, &lo, &hi);
		if (lo != at || hi < lo || (hi - lo != small && hi - lo != small + 1))
			return 0;
		at = hi;
	}
	return at == n;
}

/* The row kernels' loop: warp w of block b takes rows b*W + w, then
 * steps by grid*W. Count visits. */
static int rows_once(uint64_t rows)
{
	unsigned grid = gk_nn_row_grid(rows);
	unsigned char *seen = calloc(rows ? rows : 1, 1);
	int good = seen != NULL && grid >= 1 && grid <= GK_CUDA_MAX_GRID;
	for (uint64_t b = 0; good && b < grid; b++)
		for (uint64_t w = 0; w < GK_NN_ROW_WARPS; w++)
			for (uint64_t r = b * GK_NN_ROW_WARPS + w; r < rows;
			     r += (uint64_t)grid * GK_NN_ROW_WARPS)
				if (seen[r]++)
					good = 0;
	for (uint64_t r = 0; good && r < rows; r++)
		good = seen[r] == 1;
	free(seen);
	return good;
}

static int cmp_pair(const void *a, const void *b)
{
	const int32_t *x = a, *y = b;
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* gk_nn_token_buckets against qsort of (token, position) pairs. */
static int buckets_match(const int32_t *tok, int N, int V)
{
	int32_t *uniq = malloc(N * 4), *start = malloc((N + 1) * 4);
	int32_t *pos = malloc(N * 4), *count = malloc(V * 4);
	int32_t *pair = malloc(N * 8);
	int good = uniq && start && pos && count && pair;
	if (good) {
		int nb = gk_nn_token_buckets(tok, N, V, uniq, start, pos, count);
		for (int i = 0; i < N; i++) {
			pair[2 * i] = tok[i];
			pair[2 * i + 1] = i;
		}
		qsort(pair, N, 8, cmp_pair);
		/* the reference's distinct tokens and where each starts */
		int rb = 0;
		for (int i = 0; i < N && good; i++) {
			if (i == 0 || pair[2 * i] != pair[2 * i - 2]) {
				good = rb < nb && uniq[rb] == pair[2 * i] &&
				       start[rb] == i;
				rb++;
			}
			good = good && pos[i] == pair[2 * i + 1];
		}
		good = good && rb == nb && start[nb] == N;
	}
	free(uniq);
	free(start);
	free(pos);
	free(count);
	free(pair);
	return good;
}

/*
 * cuBLASLt's semantics on the shape it is given: column-major stored
 * operands (element (r, c) at r + c*ld), op = transpose when trans_*, D
 * (m,n) = alpha op(a) op(b), batch entries s* elements apart. Checks the
 * stored shapes agree with the ops, as cuBLASLt would refuse otherwise.
 */
static int lt_emulate(const gk_nn_lt_shape *s, float alpha, int batch,
		      float *D)
{
	if ((s->trans_a ? s->a_cols : s->a_rows) != (uint64_t)s->m ||
	    (s->trans_a ? s->a_rows : s->a_cols) != (uint64_t)s->k ||
	    (s->trans_b ? s->b_cols : s->b_rows) != (uint64_t)s->k ||
	    (s->trans_b ? s->b_rows : s->b_cols) != (uint64_t)s->n ||
	    s->d_rows != (uint64_t)s->m || s->d_cols != (uint64_t)s->n ||
	    s->lda < (int64_t)s->a_rows || s->ldb < (int64_t)s->b_rows ||
	    s->ldd < (int64_t)s->d_rows)
		return 0;
	const float *A = s->a, *Bm = s->b;
	for (int e = 0; e < batch; e++)
		for (int i = 0; i < s->m; i++)
			for (int j = 0; j < s->n; j++) {
				double acc = 0;
				for (int p = 0; p < s->k; p++) {
					float x = s->trans_a ? A[e * s->sa + p + i * s->lda]
							     : A[e * s->sa + i + p * s->lda];
					float y = s->trans_b ? Bm[e * s->sb + j + p * s->ldb]
							     : Bm[e * s->sb + p + j * s->ldb];
					acc += (double)x * y;
				}
				D[e * s->sd + i + j * s->ldd] = (float)(alpha * acc);
			}
	return 1;
}

/* Row-major reference: D (M,N) = alpha op(A) op(B), per batch entry. */
static void rowmajor(const gk_nn_gemm *g, float *D)
{
	const float *A = g->A, *Bm = g->B;
	int batch = g->batch > 0 ? g->batch : 1;
	for (int e = 0; e < batch; e++)
		for (int r = 0; r < g->M; r++)
			for (int c = 0; c < g->N; c++) {
				double acc = 0;
				for (int k = 0; k < g->K; k++) {
					float x = g->ta ? A[e * g->sA + k * g->lda + r]
							: A[e * g->sA + r * g->lda + k];
					float y = g->tb ? Bm[e * g->sB + c * g->ldb + k]
							: Bm[e * g->sB + k * g->ldb + c];
					acc += (double)x * y;
				}
				D[e * g->sD + r * g->ldd + c] = (float)(g->alpha * acc);
			}
}

/* One case: ta, tb, M, N, K, padding of every leading dimension, batch. */
static int gemm_case(int ta, int tb, int M, int N, int K, int pad, int batch)
{
	/* stored row-major: A (M,K) or (K,M); B (K,N) or (N,K); D (M,N) */
	int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
	gk_nn_gemm g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K,
			.lda = ac + pad, .ldb = bc + pad, .ldd = N + pad,
			.alpha = 0.5f, .batch = batch, .dt = GK_DT_F32,
			.ddt = GK_DT_F32};
	g.sA = (long long)ar * g.lda + 3;
	g.sB = (long long)br * g.ldb + 5;
	g.sD = (long long)M * g.ldd + 1;
	size_t na = (size_t)g.sA * batch, nb = (size_t)g.sB * batch;
	size_t nd = (size_t)g.sD * batch;
	float *A = malloc(na * 4), *Bm = malloc(nb * 4);
	float *D1 = calloc(nd, 4), *D2 = calloc(nd, 4);
	int good = A && Bm && D1 && D2;
	for (size_t i = 0; good && i < na; i++)
		A[i] = (float)((i * 7) % 13) - 6.0f;
	for (size_t i = 0; good && i < nb; i++)
		Bm[i] = (float)((i * 5) % 11) - 5.0f;
	if (good) {
		g.A = A;
		g.B = Bm;
		gk_nn_lt_shape sh;
		gk_nn_lt_shape_of(&g, &sh);
		rowmajor(&g, D1);
		good = lt_emulate(&sh, g.alpha, batch, D2) &&
		       memcmp(D1, D2, nd * 4) == 0;
	}
	free(A);
	free(Bm);
	free(D1);
	free(D2);
	return good;
}

int main(void)
{
	static const uint64_t ns[] = {0, 1, 7, 1000, 1024, 1025, 123457};
	static const uint64_t ps[] = {1, 2, 3, 7, 256, GK_NN_SUM_BLOCKS};
	int good = 1;
	for (size_t i = 0; i < GK_ARRAY_SIZE(ns); i++)
		for (size_t j = 0; j < GK_ARRAY_SIZE(ps); j++)
			if (!parts_tile(ns[i], ps[j])) {
				diag("n %llu parts %llu", (unsigned long long)ns[i],
				     (unsigned long long)ps[j]);
				good = 0;
			}
	ok(good, "part: every item in one part, in order, sizes within one");
	ok(parts_tile((1ull << 31) + 3, GK_NN_SUM_BLOCKS),
	   "part: 2^31+3 items over the norm's blocks");
	ok(parts_tile((1ull << 33) + 12345, GK_NN_SUM_BLOCKS),
	   "part: 2^33+12345 items (no 32-bit wrap)");
	uint64_t lo, hi;
	gk_nn_part(10, 0, 0, &lo, &hi);
	ok(lo == 0 && hi == 0, "part: zero parts is empty");
	gk_nn_part((1ull << 32) + 5, 4, 3, &lo, &hi);
	is_u64(hi, (1ull << 32) + 5, "part: the last part ends at n past 2^32");
	is_u64(lo, 3 * ((1ull << 30) + 1) + 1, "part: and starts after the longer ones");

	is_int(gk_nn_row_grid(0), 1, "row grid: no rows still one block");
	is_int(gk_nn_row_grid(GK_NN_ROW_WARPS), 1, "row grid: one block of rows");
	is_int(gk_nn_row_grid(GK_NN_ROW_WARPS + 1), 2, "row grid: one more row, two blocks");
	is_int(gk_nn_row_grid(1ull << 32), GK_CUDA_MAX_GRID, "row grid: 2^32 rows, capped");
	good = 1;
	static const uint64_t rs[] = {1, 8, 9, 1000, (uint64_t)GK_CUDA_MAX_GRID * GK_NN_ROW_WARPS + 5};
	for (size_t i = 0; i < GK_ARRAY_SIZE(rs); i++)
		if (!rows_once(rs[i])) {
			diag("rows %llu", (unsigned long long)rs[i]);
			good = 0;
		}
	ok(good, "row grid: the grid-stride loop visits every row once, past the cap too");

	is_int(gk_nn_colsum_chunks(0), 1, "colsum chunks: 0 rows, 1");
	is_int(gk_nn_colsum_chunks(GK_NN_COLSUM_ROWS), 1, "colsum chunks: one chunk");
	is_int(gk_nn_colsum_chunks(GK_NN_COLSUM_ROWS + 1), 2, "colsum chunks: two");
	is_int(gk_nn_colsum_chunks(1 << 24), 65535,
	       "colsum chunks: 2^24 rows stay within gridDim.y");
	ok(parts_tile(1 << 24, gk_nn_colsum_chunks(1 << 24)),
	   "colsum chunks: 2^24 rows tile over the capped chunks");
	/* the scratch holds chunks x columns of every sum model_cuda.c
	 * runs: the biases (3C, C, 4C) and LayerNorm's weight and bias (2C) */
	good = 1;
	static const uint64_t rows[] = {1, 255, 256, 257, 32768, 1 << 24};
	for (size_t i = 0; i < GK_ARRAY_SIZE(rows); i++) {
		uint64_t ch = gk_nn_colsum_chunks(rows[i]), f = gk_nn_colsum_floats(rows[i], 36);
		good &= f >= ch * 4 * 36 && f >= ch * 3 * 36 && f >= ch * 2 * 36;
	}
	ok(good, "colsum scratch: room for the widest column sum (4C) at every row count");
	is_u64(gk_nn_colsum_floats(32 * 1024, 768), 128 * 4 * 768,
	       "colsum scratch: GPT-2 124M at 32 x 1024 is 1.5 MiB, not the vocabulary's width");

	/* buckets: random tokens with repeats, one token only, one position */
	enum { N = 4096, V = 300 };
	static int32_t tok[N];
	uint64_t s = 42;
	for (int i = 0; i < N; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		tok[i] = (int32_t)((s >> 33) % (i < N / 2 ? V : 7));
	}
	ok(buckets_match(tok, N, V), "buckets: random tokens match sorted (token, position) pairs");
	for (int i = 0; i < N; i++)
		tok[i] = V - 1;
	ok(buckets_match(tok, N, V), "buckets: one token everywhere");
	tok[0] = 0;
	ok(buckets_match(tok, 1, V), "buckets: a single position");

	/* the products model_cuda.c asks for, in small sizes, with padded
	 * leading dimensions and two batch entries */
	good = 1;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++)
			for (int pad = 0; pad < 2; pad++)
				if (!gemm_case(ta, tb, 5, 7, 3, pad * 2, 1 + pad)) {
					diag("ta %d tb %d pad %d", ta, tb, pad);
					good = 0;
				}
	ok(good, "gemm: every transpose combination, column-major as cuBLASLt sees it, equals the row-major product");
	ok(gemm_case(0, 0, 6, 12, 4, 0, 1), "gemm: Conv1D forward (N,C) @ (C,3C)");
	ok(gemm_case(0, 1, 6, 4, 12, 0, 1), "gemm: Conv1D input gradient dout @ w^T");
	ok(gemm_case(1, 0, 4, 12, 6, 0, 1), "gemm: Conv1D weight gradient inp^T @ dout");
	ok(gemm_case(0, 1, 6, 16, 4, 0, 1), "gemm: LM head lnf @ wte^T");
	ok(gemm_case(1, 0, 8, 4, 6, 0, 3), "gemm: attention dv = att^T dy, batched");
	return done_testing();
}
