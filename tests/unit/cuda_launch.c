/*
 * cuda_launch.c - kernel launch geometry (cuda.h), on the host: every
 * element is visited exactly once by the grid-stride loops the kernels
 * run, for counts on both sides of the grid cap and past 2^31 and 2^32
 * elements, where a 32-bit index or grid size would wrap.
 */
#include <stdlib.h>

#include "comm/reduce.h"
#include "cuda/cuda.h"
#include "tap.h"

/*
 * Walk the kernels' loop, for (i = b*B + t; i < n; i += grid*B), for
 * every thread and count visits per element (n small enough to hold).
 */
static int covers_once(uint64_t n, unsigned block)
{
	unsigned grid = gk_cuda_grid(n, block);
	unsigned char *seen = calloc(n ? n : 1, 1);
	uint64_t span = (uint64_t)grid * block;
	int good = seen != NULL;
	for (uint64_t t = 0; good && t < span; t++)
		for (uint64_t i = t; i < n; i += span)
			if (seen[i]++)
				good = 0;
	for (uint64_t i = 0; good && i < n; i++)
		good = seen[i] == 1;
	free(seen);
	return good;
}

/* The same, by arithmetic, for counts too large to walk. */
static int covers_math(uint64_t n, unsigned block)
{
	unsigned grid = gk_cuda_grid(n, block);
	uint64_t span = (uint64_t)grid * block, it = gk_cuda_grid_iters(n, grid, block);
	if (grid < 1 || grid > GK_CUDA_MAX_GRID)
		return 0;
	if (n == 0)
		return it == 0;
	/* it passes reach n, it-1 do not, and the last index does not overflow */
	return it * span >= n && (it - 1) * span < n && (it - 1) * span + span - 1 >= (it - 1) * span;
}

int main(void)
{
	is_int(gk_cuda_grid(0, 256), 1, "grid: n 0 still launches one block");
	is_int(gk_cuda_grid(1, 256), 1, "grid: n 1");
	is_int(gk_cuda_grid(256, 256), 1, "grid: n 256, one full block");
	is_int(gk_cuda_grid(257, 256), 2, "grid: n 257, two blocks");
	is_int(gk_cuda_grid(65535ull * 256, 256), 65535, "grid: exactly the cap");
	is_int(gk_cuda_grid(65535ull * 256 + 1, 256), 65535, "grid: one past the cap stays capped");
	is_int(gk_cuda_grid((1ull << 31) + 1, 256), 65535, "grid: 2^31+1 elements");
	is_int(gk_cuda_grid(1ull << 40, 256), 65535, "grid: 2^40 elements");
	is_u64(gk_cuda_grid_iters((1ull << 31) + 1, 65535, 256), 129,
	       "iters: 2^31+1 elements take ceil((2^31+1)/(65535*256)) = 129 passes");

	static const uint64_t walk[] = {0, 1, 255, 256, 257, 4099, 65535ull * 256 - 1,
					65535ull * 256, 65535ull * 256 + 1, 2 * 65535ull * 256 + 77};
	int good = 1;
	for (size_t i = 0; i < GK_ARRAY_SIZE(walk); i++)
		good &= covers_once(walk[i], GK_CUDA_BLOCK);
	ok(good, "grid-stride: every element exactly once, around the grid cap (walked)");

	static const uint64_t big[] = {(1ull << 31) - 1, 1ull << 31, (1ull << 31) + 1,
				       (1ull << 32) + 7, (1ull << 40) + 3, 1ull << 54};
	good = 1;
	for (size_t i = 0; i < GK_ARRAY_SIZE(big); i++)
		good &= covers_math(big[i], GK_CUDA_BLOCK) && covers_math(big[i], GK_I8_GROUP);
	ok(good, "grid-stride: counts past 2^31 and 2^32 elements covered, no index overflow");

	/*
	 * int8 packing runs one block per 256-element group, looping over
	 * groups; past 2^39 elements there are more than 2^31 groups, which a
	 * grid of one block per group (the old launch) cannot express.
	 */
	uint64_t n = 1ull << 40, groups = (n + GK_I8_GROUP - 1) / GK_I8_GROUP;
	unsigned g8 = gk_cuda_grid(n, GK_I8_GROUP);
	ok(groups > 0xffffffffull && g8 == 65535 &&
	   gk_cuda_grid_iters(groups, g8, 1) * g8 >= groups,
	   "int8 groups: 2^32 groups reached by a 65535-block grid looping over them");
	ok((groups - 1) * (4 + GK_I8_GROUP) + 4 + GK_I8_GROUP == gk_i8_wire_bytes(n),
	   "int8 groups: the last group's wire offset is within the wire size");
	return done_testing();
}
