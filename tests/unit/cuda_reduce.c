/*
 * cuda_reduce.c - the element math the CUDA kernels share with the CPU
 * path (comm/reduce.h), checked through the CPU path on any machine:
 *   - int8 packing of groups holding NaN or infinity (defined, not UB);
 *   - the device's tree reduction of a group's max|x| equals the CPU loop;
 *   - unpack-and-add rounds twice (multiply, then add), never fused;
 *   - AVG is one correctly rounded division of the sum, and NCCL's
 *     ncclAvg (each input times 1/n, then summed) differs from it at 5, 7
 *     and 10 ranks, which is why the nccl backend does not use it.
 * References: double arithmetic rounded once to f32 (exact for one f32
 * operation, since 53 >= 2*24+2 bits: Figueroa, "When is double rounding
 * innocuous?", SIGNUM 1995) and fmaf for what a fused unpack would give.
 */
#include <math.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "comm/internal.h"
#include "comm/reduce.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next32(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}
static float frand(float scale) { return ((float)(next32() % 2000001) / 1e6f - 1) * scale; }

static void test_int8_nonfinite(void)
{
	enum { G = GK_I8_GROUP, N = 4 * G + 100 };
	static float x[N], back[N], resid[N];
	static unsigned char wire[N + 8 * 4];
	for (int i = 0; i < N; i++)
		x[i] = frand(3);
	x[G + 17] = NAN;           /* group 1: a NaN */
	x[2 * G + 200] = INFINITY; /* group 2: +inf */
	x[3 * G] = -INFINITY;      /* group 3: -inf, first element */
	gk_comm_pack(wire, x, N, GK_COMM_COMPRESS_INT8, resid);
	gk_comm_unpack(back, wire, N, GK_COMM_COMPRESS_INT8, 0);

	int nan_groups = 1, zero_q = 1, zero_resid = 1, finite_ok = 1;
	for (int g = 0; g * G < N; g++) {
		int m = N - g * G < G ? N - g * G : G;
		const unsigned char *gw = wire + (size_t)g * (4 + G);
		float sc;
		memcpy(&sc, gw, 4);
		int bad = g >= 1 && g <= 3;
		if (bad) {
			nan_groups &= isnan(sc);
			for (int i = 0; i < m; i++) {
				nan_groups &= isnan(back[g * G + i]) != 0;
				zero_q &= gw[4 + i] == 0;
				zero_resid &= resid[g * G + i] == 0;
			}
			continue;
		}
		/* Clean groups: within max|x|/254 plus f32 rounding, and the residual is exact. */
		double amax = 0;
		for (int i = 0; i < m; i++)
			amax = fmax(amax, fabs(x[g * G + i]));
		for (int i = 0; i < m; i++) {
			double e = fabs((double)x[g * G + i] - back[g * G + i]);
			finite_ok &= e <= amax / 254 * (1 + 1e-6) &&
				     resid[g * G + i] == x[g * G + i] - back[g * G + i];
		}
	}
	ok(nan_groups, "int8: a group holding NaN, +inf or -inf gets a NaN scale and comes back all NaN");
	ok(zero_q, "int8: its int8 values are 0 (no float-to-int conversion of NaN or inf)");
	ok(zero_resid, "int8: its error-feedback residual is 0");
	ok(finite_ok, "int8: the other groups are untouched (error <= max|x|/254)");

	/* Adding into a sum: the NaN group poisons exactly its own elements. */
	static float acc[N];
	for (int i = 0; i < N; i++)
		acc[i] = 1.0f;
	gk_comm_unpack(acc, wire, N, GK_COMM_COMPRESS_INT8, 1);
	int good = 1;
	for (int i = 0; i < N; i++)
		good &= (i >= G && i < 4 * G) == (isnan(acc[i]) != 0);
	ok(good, "int8: unpack-add makes exactly the poisoned groups NaN");

	/* quant itself on the values that used to be undefined */
	ok(gk_i8_quant(NAN, 1.0f) == 0 && gk_i8_quant(INFINITY, 0.0f) == 0 &&
	   gk_i8_quant(INFINITY, 1.0f) == 127 && gk_i8_quant(-INFINITY, 1.0f) == -127 &&
	   gk_i8_quant(1e30f, 1e10f) == 127,
	   "int8: quant maps NaN (and inf*0) to 0 and clamps infinities and huge values");
}

/*
 * The pack kernel reduces a group's max|x| as a tree over 256 threads
 * (s = 128, 64, ..., 1: a[t] = amax(a[t], a[t+s])); replay that order.
 */
static float tree_amax(const float *x, int m)
{
	float a[GK_I8_GROUP];
	for (int t = 0; t < GK_I8_GROUP; t++)
		a[t] = t < m ? gk_i8_amax(0.0f, x[t]) : 0.0f;
	for (int s = GK_I8_GROUP / 2; s > 0; s >>= 1)
		for (int t = 0; t < s; t++)
			a[t] = gk_i8_amax(a[t], a[t + s]);
	return a[0];
}

static void test_amax_tree(void)
{
	int good = 1;
	float x[GK_I8_GROUP];
	for (int k = 0; k < 2000; k++) {
		int m = 1 + (int)(next32() % GK_I8_GROUP);
		for (int i = 0; i < m; i++)
			x[i] = frand(ldexpf(1, (int)(next32() % 40) - 20));
		if (k % 7 == 1)
			x[next32() % m] = NAN;
		if (k % 11 == 2)
			x[next32() % m] = (k & 1) ? INFINITY : -INFINITY;
		float seq = 0;
		for (int i = 0; i < m; i++)
			seq = gk_i8_amax(seq, x[i]);
		float tr = tree_amax(x, m);
		good &= gk_f32_bits(seq) == gk_f32_bits(tr);
	}
	ok(good, "int8: the device's tree of max|x| equals the CPU loop bit for bit (2000 groups, with NaN/inf)");
}

static void test_dequant_add(void)
{
	int good = 1, fused_differs = 0;
	for (int k = 0; k < 200000; k++) {
		int8_t q = (int8_t)((int)(next32() % 255) - 127);
		float s = frand(1) * ldexpf(1, (int)(next32() % 20) - 10);
		float d = frand(1) * ldexpf(1, (int)(next32() % 20) - 10);
		float p = (float)((double)q * (double)s); /* exact product, rounded once */
		float want = (float)((double)d + (double)p);
		float got = gk_i8_dequant_add(d, q, s);
		good &= gk_f32_bits(got) == gk_f32_bits(want);
		fused_differs += gk_f32_bits(fmaf((float)q, s, d)) != gk_f32_bits(want);
	}
	ok(good, "unpack-add: d + q*s rounds the product, then the sum (200000 cases)");
	ok(fused_differs > 0, "unpack-add: a fused multiply-add would differ (%d cases), so the check can fail",
	   fused_differs);
	good = 1;
	for (int k = 0; k < 100000; k++) {
		float d = frand(100), v = frand(100);
		uint16_t h = gk_f32_to_bf16(v);
		float back[1] = {d};
		gk_comm_unpack(back, &h, 1, GK_COMM_COMPRESS_BF16, 1);
		good &= gk_f32_bits(back[0]) ==
			gk_f32_bits((float)((double)d + (double)gk_bf16_to_f32(h)));
	}
	ok(good, "unpack-add bf16: one rounded addition");
}

/* What allreduce-bench sends (bench.c's val() for sum and avg). */
static double val(int n, int r, size_t i)
{
	(void)n;
	return (double)((r * 3 + i * 7) % 9) - 4;
}

static void test_avg(void)
{
	int good = 1;
	for (int k = 0; k < 200000; k++) {
		float x = frand(ldexpf(1, (int)(next32() % 60) - 30));
		int n = 1 + (int)(next32() % 64);
		good &= gk_f32_bits(gk_avg_f32(x, n)) == gk_f32_bits((float)((double)x / n));
	}
	ok(good, "avg f32: sum/n correctly rounded (200000 cases, n 1..64)");
	ok(gk_avg_i32(-7, 2) == -3 && gk_avg_i32(7, 2) == 3 && gk_avg_i32(-9, 4) == -2,
	   "avg i32: divides toward zero");

	/* The right reference for allreduce-bench -o avg at n ranks. */
	for (int n = 2; n <= 10; n++) {
		int ours_ok = 1, premul_wrong = 0;
		for (size_t i = 0; i < 4096; i++) {
			double sum = 0;
			float pre = 0, sumf = 0, inv = 1.0f / (float)n;
			for (int r = 0; r < n; r++) {
				sum += val(n, r, i);
				sumf = gk_red_f32(GK_RED_SUM, sumf, (float)val(n, r, i));
				pre += (float)val(n, r, i) * inv; /* ncclAvg: x * (1/n), then sum */
			}
			float want = (float)(sum / n);
			float buf[1] = {sumf};
			gk_comm_avg_cpu(buf, 1, GK_DT_F32, n);
			ours_ok &= gk_f32_bits(buf[0]) == gk_f32_bits(want);
			premul_wrong += gk_f32_bits(pre) != gk_f32_bits(want);
		}
		int pow2 = (n & (n - 1)) == 0;
		if (n == 5 || n == 7 || n == 10 || pow2)
			ok(ours_ok && (pow2 ? premul_wrong == 0 : premul_wrong > 0),
			   "avg at %d ranks: sum then one division is exact; premultiplying by 1/n is %s (%d of 4096 wrong)",
			   n, pow2 ? "exact too" : "not", premul_wrong);
		else
			ok(ours_ok, "avg at %d ranks: sum then one division is exact", n);
	}

	/* bf16 and f16: one rounding of sum/n, as the kernel does it. */
	good = 1;
	for (int k = 0; k < 20000; k++) {
		float v = frand(1000);
		int n = 1 + (int)(next32() % 16);
		uint16_t b = gk_f32_to_bf16(v), h = gk_f32_to_f16(v), bb[1] = {b}, hh[1] = {h};
		gk_comm_avg_cpu(bb, 1, GK_DT_BF16, n);
		gk_comm_avg_cpu(hh, 1, GK_DT_F16, n);
		good &= bb[0] == gk_f32_to_bf16((float)((double)gk_bf16_to_f32(b) / n)) &&
			hh[0] == gk_f32_to_f16((float)((double)gk_f16_to_f32(h) / n));
	}
	ok(good, "avg bf16/f16: the f32 quotient rounded once to the type");
}

int main(void)
{
	test_int8_nonfinite();
	test_amax_tree();
	test_dequant_add();
	test_avg();
	return done_testing();
}
