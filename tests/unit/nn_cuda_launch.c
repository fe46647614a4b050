/*
 * nn_cuda_launch.c - the CUDA backend's launch arithmetic, on the host
 * (lib/nn/launch.c, cuda_internal.h): the contiguous parts behind the
 * deterministic sums cover every item once and in order, for counts past
 * 2^31 and 2^32 too; the row kernels' grid-stride loop visits every row
 * once; the column-sum chunks stay within a grid's y dimension; the
 * embedding backward's token buckets against an independent reference
 * (sorting (token, position) pairs).
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
	return done_testing();
}
