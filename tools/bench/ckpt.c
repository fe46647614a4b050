/*
 * ckpt.c - helpers for tools/bench/ckpt.sh.
 *
 *   ckpt make FILE MIB [KIB]
 *                          a GPT-like checkpoint of about MIB MiB of F32
 *                          (pseudo-random values), written with gk_st_writer;
 *                          with KIB, tensors of KIB KiB each instead
 *   ckpt convert MIB       f32 -> bf16 with gk_convert on one core: GB/s
 *                          (median of 5 runs over MIB MiB of input)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st/st.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)(int32_t)(rng >> 32) * 0x1p-31f;
}

static int make(const char *path, uint64_t mib, uint64_t kib)
{
	/* Layers of [4096, 1024] and [1024] F32 tensors until the size is
	 * reached, or MIB / KIB tensors of [KIB * 256]. */
	uint64_t big = 4096 * 1024 * 4ull, small = 1024 * 4ull;
	size_t layers = (size_t)((mib << 20) / (big + small)), n;
	if (kib)
		layers = (size_t)((mib << 10) / kib / 2);
	if (layers == 0)
		layers = 1;
	n = 2 * layers;
	gk_st_spec *t = calloc(n, sizeof(*t));
	static uint64_t sb[2] = {4096, 1024}, ss[1] = {1024}, sk[1];
	sk[0] = kib * 256;
	char **names = calloc(n, sizeof(char *));
	for (size_t i = 0; i < layers; i++) {
		asprintf(&names[2 * i], "h.%05zu.mlp.w", i);
		asprintf(&names[2 * i + 1], "h.%05zu.ln.w", i);
		t[2 * i] = (gk_st_spec){names[2 * i], GK_DT_F32, kib ? 1 : 2, kib ? sk : sb};
		t[2 * i + 1] = (gk_st_spec){names[2 * i + 1], GK_DT_F32, 1, kib ? sk : ss};
	}
	if (kib * 1024 > big)
		big = kib * 1024;
	gk_st_writer *w;
	gk_err err;
	if (gk_st_writer_open(&w, path, t, n, NULL, 0, &err))
		goto fail;
	float *buf = malloc(big);
	for (size_t i = 0; i < big / 4; i++)
		buf[i] = next();
	while (gk_st_writer_next(w) < n) {
		uint64_t left = gk_st_writer_left(w);
		buf[rng % 1024] = next(); /* tensors differ from each other */
		if (gk_st_writer_write(w, buf, left, &err))
			goto fail;
	}
	if (gk_st_writer_close(w, &err))
		goto fail;
	return 0;
fail:
	fprintf(stderr, "ckpt: %s\n", err.msg);
	return 1;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int convert(uint64_t mib)
{
	size_t n = (size_t)(mib << 20) / 4;
	float *src = malloc(n * 4);
	uint16_t *dst = malloc(n * 2);
	double t[5];
	for (size_t i = 0; i < n; i++)
		src[i] = next();
	gk_convert(dst, GK_DT_BF16, src, GK_DT_F32, n); /* fault the pages in */
	for (int r = 0; r < 5; r++) {
		double t0 = gk_now();
		gk_convert(dst, GK_DT_BF16, src, GK_DT_F32, n);
		t[r] = gk_now() - t0;
	}
	qsort(t, 5, sizeof(double), cmp_d);
	printf("%.2f\n", (double)n * 4 / t[2] / 1e9);
	free(src);
	free(dst);
	return 0;
}

int main(int argc, char **argv)
{
	if ((argc == 4 || argc == 5) && strcmp(argv[1], "make") == 0)
		return make(argv[2], strtoull(argv[3], NULL, 10),
			    argc == 5 ? strtoull(argv[4], NULL, 10) : 0);
	if (argc == 3 && strcmp(argv[1], "convert") == 0)
		return convert(strtoull(argv[2], NULL, 10));
	fprintf(stderr, "usage: ckpt make FILE MIB [KIB] | ckpt convert MIB\n");
	return 2;
}
