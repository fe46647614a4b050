/*
 * core_half.c - fp32 <-> fp16/bf16 conversion (core/half.h, gk_convert).
 *
 * References: for fp16, the compiler's own _Float16 conversion (IEEE
 * round-to-nearest-even, done by a different implementation); for bf16, a
 * second algorithm written here: take the two bf16 neighbours of x by
 * truncation and pick the nearer in double arithmetic, ties to even.
 */
#include <math.h>

#include "core/core.h"
#include "core/half.h"
#include "cuda/cuda.h"
#include "tap.h"
#include "gpu.h"
#if GK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next32(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static uint16_t ref_bf16(float x)
{
	uint32_t u = gk_f32_bits(x);
	if (isnan(x))
		return (uint16_t)((u >> 16) | 0x40);
	uint16_t lo = (uint16_t)(u >> 16); /* toward zero */
	uint16_t hi = (uint16_t)(lo + 1);  /* away from zero (maybe to inf) */
	double dx = fabs((double)x);
	double dlo = fabs((double)gk_bf16_to_f32(lo)), dhi = fabs((double)gk_bf16_to_f32(hi));
	if ((lo & 0x7fff) == 0x7f80) /* x is infinite */
		return lo;
	if ((hi & 0x7fff) == 0x7f80) /* past the largest finite: compare to 2^128 */
		dhi = ldexp(1.0, 128);
	double elo = dx - dlo, ehi = dhi - dx;
	if (elo < ehi)
		return lo;
	if (ehi < elo)
		return hi;
	return (lo & 1) ? hi : lo;
}

static uint16_t ref_f16(float x)
{
	_Float16 h = (_Float16)x;
	uint16_t u;
	memcpy(&u, &h, 2);
	return u;
}

/*
 * The kernels run the same functions; compare a device run bit for bit
 * (on a machine whose system shows a GPU, tests/unit/gpu.h).
 */
static void test_gpu(void)
{
	gk_err perr = {0};
	char why[256];
	int run = gpu_expect(gk_cuda_probe(NULL, &perr) == 0, perr.msg, why, sizeof why);
	if (run == 0)
		gpu_skip("GPU f32 -> bf16 and f16 match the CPU path", why);
	if (run <= 0)
		return;
#if GK_HAVE_CUDA
	enum { N = 1 << 20 };
	float *x = malloc(N * sizeof(float));
	uint16_t *got = malloc(N * 2), *want = malloc(N * 2);
	void *dx, *dh;
	gk_err err;
	for (int i = 0; i < N; i++)
		x[i] = gk_bits_f32(next32());
	cudaMalloc(&dx, N * sizeof(float));
	cudaMalloc(&dh, N * 2);
	cudaMemcpy(dx, x, N * sizeof(float), cudaMemcpyHostToDevice);
	gk_dtype dts[2] = {GK_DT_BF16, GK_DT_F16};
	for (int k = 0; k < 2; k++) {
		int rc = gk_cuda_convert(dh, dts[k], dx, GK_DT_F32, N, NULL, &err);
		cudaMemcpy(got, dh, N * 2, cudaMemcpyDeviceToHost);
		gk_convert(want, dts[k], x, GK_DT_F32, N);
		ok(rc == 0 && memcmp(got, want, N * 2) == 0, "GPU f32 -> %s matches the CPU path",
		   gk_dtype_name(dts[k]));
	}
	cudaFree(dx);
	cudaFree(dh);
	free(x);
	free(got);
	free(want);
#endif
}

int main(void)
{
	/* Every fp16 value survives fp16 -> fp32 -> fp16 and matches _Float16. */
	int bad_round = 0, bad_value = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = gk_f16_to_f32((uint16_t)h);
		_Float16 rh;
		uint16_t hb = (uint16_t)h;
		memcpy(&rh, &hb, 2);
		int nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
		if (nan ? !isnan(f) : f != (float)rh && !(f == 0 && (float)rh == 0))
			bad_value++;
		uint16_t back = gk_f32_to_f16(f);
		if (nan ? (back & 0x7e00) != 0x7e00 : back != h)
			bad_round++;
	}
	is_int(bad_value, 0, "all 65536 fp16 values widen exactly (vs _Float16)");
	is_int(bad_round, 0, "all fp16 values round-trip through fp32");

	/* Every bf16 value round-trips; every fp32 bit pattern near each. */
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
		uint16_t back = gk_f32_to_bf16(gk_bf16_to_f32((uint16_t)h));
		if (nan ? (back & 0x7fc0) != 0x7fc0 : back != h)
			bad++;
	}
	is_int(bad, 0, "all bf16 values round-trip through fp32");

	/* Random fp32 bit patterns, plus the halfway cases, vs the references. */
	int bad16 = 0, badbf = 0;
	for (int i = 0; i < 4000000; i++) {
		uint32_t u = next32();
		if (i % 4 == 1)
			u = (u & 0xffff0000u) | 0x8000u; /* bf16 tie */
		if (i % 4 == 2)
			u = (u & 0xffffe000u) | 0x1000u; /* fp16-normal tie */
		float x = gk_bits_f32(u);
		uint16_t a = gk_f32_to_f16(x), b = ref_f16(x);
		if (isnan(x) ? (a & 0x7e00) != 0x7e00 : a != b) {
			if (bad16++ < 5)
				diag("f16 %08x: got %04x want %04x", u, a, b);
		}
		if (gk_f32_to_bf16(x) != ref_bf16(x)) {
			if (badbf++ < 5)
				diag("bf16 %08x: got %04x want %04x", u, gk_f32_to_bf16(x), ref_bf16(x));
		}
	}
	is_int(bad16, 0, "4M fp32 patterns to fp16 match _Float16");
	is_int(badbf, 0, "4M fp32 patterns to bf16 match the neighbour search");

	/* Published values. */
	is_int(gk_f32_to_f16(65504.0f), 0x7bff, "65504 is the largest fp16");
	is_int(gk_f32_to_f16(65519.99f), 0x7bff, "65519.99 rounds down to 65504");
	is_int(gk_f32_to_f16(65520.0f), 0x7c00, "65520 rounds to inf");
	is_int(gk_f32_to_f16(5.9604644775390625e-8f), 0x0001, "2^-24 is the smallest subnormal");
	is_int(gk_f32_to_f16(2.98023223876953125e-8f), 0x0000, "2^-25 ties to even zero");
	is_int(gk_f32_to_f16(-0.0f), 0x8000, "-0 keeps its sign");
	is_int(gk_f32_to_bf16(1.0f), 0x3f80, "bf16(1) = 0x3f80");
	is_int(gk_f32_to_bf16(3.14159265f), 0x4049, "bf16(pi) = 0x4049");
	is_int(gk_f32_to_bf16(gk_bits_f32(0x3f808000u)), 0x3f80, "bf16 tie to even (down)");
	is_int(gk_f32_to_bf16(gk_bits_f32(0x3f818000u)), 0x3f82, "bf16 tie to even (up)");
	is_int(gk_f32_to_bf16(gk_bits_f32(0x7f7fffffu)), 0x7f80, "bf16(FLT_MAX) = inf");
	ok(isnan(gk_bf16_to_f32(gk_f32_to_bf16(NAN))), "bf16 NaN stays NaN");
	is_int(gk_f32_to_bf16(gk_bits_f32(0x7f800001u)), 0x7fc0, "bf16 signalling NaN becomes quiet, not inf");

	/* Bulk gk_convert, including in-place widening. */
	float src[7] = {1.0f, -2.5f, 65504.0f, 1e-8f, 3.14159265f, 0.0f, -0.0f};
	uint16_t h16[7], b16[7];
	float back[7];
	double wide[7];
	ok(gk_convert(h16, GK_DT_F16, src, GK_DT_F32, 7) == 0, "convert f32 -> f16");
	ok(gk_convert(b16, GK_DT_BF16, src, GK_DT_F32, 7) == 0, "convert f32 -> bf16");
	int same = 1;
	for (int i = 0; i < 7; i++)
		same &= h16[i] == gk_f32_to_f16(src[i]) && b16[i] == gk_f32_to_bf16(src[i]);
	ok(same, "bulk matches scalar");
	gk_convert(back, GK_DT_F32, h16, GK_DT_F16, 7);
	ok(back[0] == 1.0f && back[1] == -2.5f && back[2] == 65504.0f, "f16 -> f32");
	gk_convert(wide, GK_DT_F64, src, GK_DT_F32, 7);
	ok(wide[4] == (double)3.14159265f, "f32 -> f64");
	float inplace[8] = {0};
	uint16_t *ip = (uint16_t *)inplace;
	for (int i = 0; i < 7; i++)
		ip[i] = b16[i];
	gk_convert(inplace, GK_DT_F32, inplace, GK_DT_BF16, 7);
	same = 1;
	for (int i = 0; i < 7; i++)
		same &= inplace[i] == gk_bf16_to_f32(b16[i]);
	ok(same, "in-place bf16 -> f32 widening");
	ok(gk_convert(h16, GK_DT_I32, src, GK_DT_F32, 7) == -1, "int conversion refused");

	test_gpu();
	return done_testing();
}
