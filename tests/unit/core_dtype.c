/*
 * core_dtype.c - F64 to F16 and BF16 rounds once (core/dtype.c), and the
 * element get/set that lib/comm and gk_convert share.
 *
 * References: the compiler's own double -> _Float16 conversion (a single
 * IEEE round-to-nearest-even, by a different implementation), and a
 * second algorithm written here for both formats: enumerate the two
 * representable neighbours of x and take the nearer, ties to the even
 * one, comparing in exact double arithmetic (every 16-bit value and every
 * midpoint between two of them is exact in a double).
 */
#include <math.h>

#include "core/core.h"
#include "core/half.h"
#include "tap.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t next64(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

static double val16(uint16_t h, int bf)
{
	return bf ? gk_bf16_to_f32(h) : gk_f16_to_f32(h);
}

static uint16_t inf16(int bf) { return bf ? 0x7f80 : 0x7c00; }

/* x finite and >= 0 here; the sign is put back by the caller. */
static uint16_t ref_pos(double x, int bf)
{
	uint16_t lo = 0, hi = inf16(bf);
	/* binary search for the largest pattern whose value is <= x */
	while ((uint16_t)(hi - lo) > 1) {
		uint16_t mid = (uint16_t)(lo + (hi - lo) / 2);
		if (val16(mid, bf) <= x)
			lo = mid;
		else
			hi = mid;
	}
	uint16_t up = (uint16_t)(lo + 1);
	double vlo = val16(lo, bf);
	/* above the largest finite value the next step is 2^(emax+1): infinity */
	double vup = up == inf16(bf) ? ldexp(1, bf ? 128 : 16) : val16(up, bf);
	if (x == vlo)
		return lo;
	double dlo = x - vlo, dup = vup - x;
	if (dlo < dup)
		return lo;
	if (dup < dlo)
		return up;
	return (lo & 1) ? up : lo;
}

static uint16_t ref16(double x, int bf)
{
	if (isnan(x))
		return (uint16_t)(bf ? 0x7fc0 : 0x7e00);
	uint16_t s = signbit(x) ? 0x8000 : 0;
	if (isinf(x))
		return (uint16_t)(s | inf16(bf));
	return (uint16_t)(s | ref_pos(fabs(x), bf));
}

static uint16_t got16(double x, int bf)
{
	uint16_t h;
	gk_dtype_set(&h, bf ? GK_DT_BF16 : GK_DT_F16, 0, x);
	return h;
}

static uint16_t compiler_f16(double x)
{
	_Float16 h = (_Float16)x;
	uint16_t u;
	memcpy(&u, &h, 2);
	return u;
}

int main(void)
{
	/* The case that rounding through f32 gets wrong: just above a tie. */
	double x = 1 + ldexp(1, -11) + ldexp(1, -40);
	is_int(got16(x, 0), 0x3c01, "f16: 1 + 2^-11 + 2^-40 rounds up to 1 + 2^-10");
	ok(gk_f32_to_f16((float)x) == 0x3c00, "(through f32 it would tie and round to 1)");
	x = 1 + ldexp(1, -8) + ldexp(1, -40);
	is_int(got16(x, 1), 0x3f81, "bf16: 1 + 2^-8 + 2^-40 rounds up to 1 + 2^-7");
	ok(gk_f32_to_bf16((float)x) == 0x3f80, "(through f32 it would tie and round to 1)");

	/*
	 * Every finite 16-bit value v and its upper neighbour: the midpoint,
	 * one double ulp either side of it, and v itself, both signs.
	 */
	for (int bf = 0; bf < 2; bf++) {
		int bad = 0, badc = 0, n = 0;
		char why[160] = "";
		for (uint32_t h = 0; h < inf16(bf); h++) {
			double v = val16((uint16_t)h, bf);
			double up = h + 1 == inf16(bf) ? ldexp(1, bf ? 128 : 16) :
				    val16((uint16_t)(h + 1), bf);
			double mid = v + (up - v) / 2;
			double pts[] = {v, mid, nextafter(mid, 0), nextafter(mid, INFINITY),
					mid + (up - v) / 4, mid - (up - v) / 4};
			for (size_t k = 0; k < GK_ARRAY_SIZE(pts); k++)
				for (int sg = 0; sg < 2; sg++) {
					double p = sg ? -pts[k] : pts[k];
					uint16_t want = ref16(p, bf), got = got16(p, bf);
					n++;
					if (got != want && !bad++)
						snprintf(why, sizeof why, "%a: got %04x want %04x",
							 p, got, want);
					if (!bf && compiler_f16(p) != want)
						badc++;
				}
		}
		if (!ok(bad == 0, "%s: %d values at and around every midpoint round once to nearest even",
			bf ? "bf16" : "f16", n))
			diag("%d wrong, first %s", bad, why);
		if (!bf)
			ok(badc == 0, "f16: the reference agrees with the compiler's _Float16 (%d values)", n);
	}

	/* Random doubles over the whole range, against both references. */
	int bad16 = 0, badbf = 0;
	for (int i = 0; i < 2000000; i++) {
		uint64_t u = next64();
		double r;
		/* exponents mostly within reach of the 16-bit formats */
		int e = (int)(u >> 52 & 0xff) - 160;
		r = ldexp((double)(u & ((1ULL << 52) - 1)) / 0x1p52 + 1, e);
		if (u >> 63)
			r = -r;
		if (got16(r, 0) != compiler_f16(r) || got16(r, 0) != ref16(r, 0))
			bad16++;
		if (got16(r, 1) != ref16(r, 1))
			badbf++;
	}
	ok(bad16 == 0, "f16: 2e6 random doubles match _Float16 and the reference (%d wrong)", bad16);
	ok(badbf == 0, "bf16: 2e6 random doubles match the reference (%d wrong)", badbf);

	/* Specials. */
	ok(got16(NAN, 0) == 0x7e00 || (got16(NAN, 0) & 0x7c00) == 0x7c00, "f16: NaN stays NaN");
	ok((got16(-NAN, 1) & 0x7f80) == 0x7f80 && (got16(-NAN, 1) & 0x7f), "bf16: NaN stays NaN");
	is_int(got16(-0.0, 0), 0x8000, "f16: -0 keeps its sign");
	is_int(got16(65519.999, 0), 0x7bff, "f16: just below 65520 is 65504");
	is_int(got16(65520, 0), 0x7c00, "f16: 65520 (the tie past the largest) is infinity");
	is_int(got16(1e300, 1), 0x7f80, "bf16: 1e300 is infinity");
	is_int(got16(ldexp(1, -25), 0), 0x0000, "f16: 2^-25 (half the smallest subnormal) ties to 0");
	is_int(got16(ldexp(1.5, -25), 0), 0x0001, "f16: 1.5 * 2^-25 rounds to the smallest subnormal");
	is_int(got16(ldexp(1, -134) * 1.0000001, 1), 0x0001, "bf16: just above 2^-134 is the smallest subnormal");

	/* gk_convert F64 -> F16/BF16 goes the same single-rounding way. */
	double src[4] = {1 + ldexp(1, -11) + ldexp(1, -40), -3.0, 1e-9, 65536};
	uint16_t h[4], b[4];
	ok(gk_convert(h, GK_DT_F16, src, GK_DT_F64, 4) == 0 &&
	   gk_convert(b, GK_DT_BF16, src, GK_DT_F64, 4) == 0, "gk_convert f64 -> f16, bf16");
	int same = 1;
	for (int i = 0; i < 4; i++)
		same &= h[i] == ref16(src[i], 0) && b[i] == ref16(src[i], 1);
	ok(same, "gk_convert f64 -> 16-bit matches the reference");

	/* get/set: exact round trips in every type lib/comm uses. */
	gk_dtype dts[] = {GK_DT_F64, GK_DT_F32, GK_DT_F16, GK_DT_BF16, GK_DT_I32};
	for (size_t k = 0; k < GK_ARRAY_SIZE(dts); k++) {
		char buf[8 * 5];
		int good = 1;
		double vals[5] = {0, -4, 3, 100, -128};
		for (int i = 0; i < 5; i++)
			gk_dtype_set(buf, dts[k], (size_t)i, vals[i]);
		for (int i = 0; i < 5; i++)
			good &= gk_dtype_get(buf, dts[k], (size_t)i) == vals[i];
		ok(good, "%s: small integers round-trip through set and get", gk_dtype_name(dts[k]));
	}
	int32_t iv;
	gk_dtype_set(&iv, GK_DT_I32, 0, -7.9);
	is_int(iv, -7, "I32: set truncates toward zero");
	return done_testing();
}
