/*
 * dtype.c - dtype names and sizes, and the CPU conversion loops.
 */
#include <math.h>
#include <strings.h>

#include "core/core.h"
#include "core/half.h"

static const struct {
	const char *name;
	unsigned bits;
} dtypes[GK_DT_COUNT] = {
	[GK_DT_INVALID] = {"?", 0},
	[GK_DT_BOOL] = {"BOOL", 8},
	[GK_DT_F4] = {"F4", 4},
	[GK_DT_F6_E2M3] = {"F6_E2M3", 6},
	[GK_DT_F6_E3M2] = {"F6_E3M2", 6},
	[GK_DT_U8] = {"U8", 8},
	[GK_DT_I8] = {"I8", 8},
	[GK_DT_F8_E5M2] = {"F8_E5M2", 8},
	[GK_DT_F8_E4M3] = {"F8_E4M3", 8},
	[GK_DT_F8_E8M0] = {"F8_E8M0", 8},
	[GK_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
	[GK_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
	[GK_DT_I16] = {"I16", 16},
	[GK_DT_U16] = {"U16", 16},
	[GK_DT_F16] = {"F16", 16},
	[GK_DT_BF16] = {"BF16", 16},
	[GK_DT_I32] = {"I32", 32},
	[GK_DT_U32] = {"U32", 32},
	[GK_DT_F32] = {"F32", 32},
	[GK_DT_C64] = {"C64", 64},
	[GK_DT_F64] = {"F64", 64},
	[GK_DT_I64] = {"I64", 64},
	[GK_DT_U64] = {"U64", 64},
};

const char *gk_dtype_name(gk_dtype dt)
{
	if ((unsigned)dt >= GK_DT_COUNT)
		return "?";
	return dtypes[dt].name;
}

gk_dtype gk_dtype_from_name(const char *name)
{
	for (int i = 1; i < GK_DT_COUNT; i++)
		if (strcmp(name, dtypes[i].name) == 0)
			return (gk_dtype)i;
	return GK_DT_INVALID;
}

gk_dtype gk_dtype_parse(const char *s)
{
	static const struct {
		const char *alias;
		gk_dtype dt;
	} aliases[] = {
		{"fp32", GK_DT_F32},    {"float32", GK_DT_F32},
		{"float", GK_DT_F32},   {"bfloat16", GK_DT_BF16},
		{"fp16", GK_DT_F16},    {"float16", GK_DT_F16},
		{"half", GK_DT_F16},    {"fp64", GK_DT_F64},
		{"float64", GK_DT_F64}, {"double", GK_DT_F64},
		{"int32", GK_DT_I32},   {"int64", GK_DT_I64},
		{"int8", GK_DT_I8},     {"uint8", GK_DT_U8},
		{"int16", GK_DT_I16},   {"bool", GK_DT_BOOL},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(aliases); i++)
		if (strcasecmp(s, aliases[i].alias) == 0)
			return aliases[i].dt;
	for (int i = 1; i < GK_DT_COUNT; i++)
		if (strcasecmp(s, dtypes[i].name) == 0)
			return (gk_dtype)i;
	return GK_DT_INVALID;
}

unsigned gk_dtype_bits(gk_dtype dt)
{
	if ((unsigned)dt >= GK_DT_COUNT)
		return 0;
	return dtypes[dt].bits;
}

int gk_dtype_is_float(gk_dtype dt)
{
	return dt == GK_DT_F64 || dt == GK_DT_F32 || dt == GK_DT_F16 ||
	       dt == GK_DT_BF16;
}

/*
 * A double rounded once, to nearest even, to a binary format of p
 * significand bits, smallest normal exponent emin and largest emax
 * (bf16: 8, -126, 127; f16: 11, -14, 15). Every result is a float, so
 * the 16-bit encoding that follows is exact. Going through (float) first
 * would round twice: 1 + 2^-11 + 2^-40 becomes the f16 tie 1 + 2^-11 in
 * f32 and then 1, where the nearest f16 is 1 + 2^-10.
 */
static float round_to(double x, int p, int emin, int emax)
{
	if (!isfinite(x) || x == 0)
		return (float)x; /* inf, NaN and signed zero are exact */
	int e;
	frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
	e--;
	if (e > emax)
		return (float)copysign(INFINITY, x);
	int q = (e < emin ? emin : e) - (p - 1); /* exponent of one ulp */
	double r = ldexp(nearbyint(ldexp(x, -q)), q); /* scaling by 2^k is exact */
	/* A tie above the largest finite value rounds to 2^(emax+1): overflow. */
	if (fabs(r) >= ldexp(1, emax + 1))
		return (float)copysign(INFINITY, x);
	return (float)r;
}

static uint16_t f64_to_bf16(double x)
{
	if (isnan(x))
		return gk_f32_to_bf16((float)x);
	return gk_f32_to_bf16(round_to(x, 8, -126, 127));
}

static uint16_t f64_to_f16(double x)
{
	if (isnan(x))
		return gk_f32_to_f16((float)x);
	return gk_f32_to_f16(round_to(x, 11, -14, 15));
}

double gk_dtype_get(const void *buf, gk_dtype dt, size_t i)
{
	switch (dt) {
	case GK_DT_F64: return ((const double *)buf)[i];
	case GK_DT_F32: return ((const float *)buf)[i];
	case GK_DT_I32: return ((const int32_t *)buf)[i];
	case GK_DT_F16: return gk_f16_to_f32(((const uint16_t *)buf)[i]);
	case GK_DT_BF16: return gk_bf16_to_f32(((const uint16_t *)buf)[i]);
	default: return 0;
	}
}

void gk_dtype_set(void *buf, gk_dtype dt, size_t i, double v)
{
	switch (dt) {
	case GK_DT_F64: ((double *)buf)[i] = v; break;
	case GK_DT_F32: ((float *)buf)[i] = (float)v; break;
	case GK_DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case GK_DT_F16: ((uint16_t *)buf)[i] = f64_to_f16(v); break;
	case GK_DT_BF16: ((uint16_t *)buf)[i] = f64_to_bf16(v); break;
	default: break;
	}
}

int gk_convert(void *dst, gk_dtype dst_dt, const void *src, gk_dtype src_dt,
	       size_t n)
{
	if (!gk_dtype_is_float(dst_dt) || !gk_dtype_is_float(src_dt))
		return -1;
	if (dst_dt == src_dt) {
		if (dst != src)
			memmove(dst, src, n * (gk_dtype_bits(dst_dt) / 8));
		return 0;
	}
	/* Fast paths for the checkpoint and allreduce cases. */
	if (src_dt == GK_DT_F32 && dst_dt == GK_DT_BF16) {
		const float *s = src;
		uint16_t *d = dst;
		for (size_t i = 0; i < n; i++)
			d[i] = gk_f32_to_bf16(s[i]);
		return 0;
	}
	if (src_dt == GK_DT_F32 && dst_dt == GK_DT_F16) {
		const float *s = src;
		uint16_t *d = dst;
		for (size_t i = 0; i < n; i++)
			d[i] = gk_f32_to_f16(s[i]);
		return 0;
	}
	/*
	 * Widening writes elements wider than it reads: walk backwards so an
	 * in-place widening (dst == src, buffer sized for dst) is safe.
	 */
	int widen = gk_dtype_bits(dst_dt) > gk_dtype_bits(src_dt);
	for (size_t k = 0; k < n; k++) {
		size_t i = widen ? n - 1 - k : k;
		/* Every value of the four types is exact in a double. */
		gk_dtype_set(dst, dst_dt, i, gk_dtype_get(src, src_dt, i));
	}
	return 0;
}

int gk_dtype_parse_float(const char *s, const char *what, gk_dtype *out,
			 gk_err *err)
{
	gk_dtype dt = gk_dtype_parse(s);
	if (dt != GK_DT_F32 && dt != GK_DT_F16 && dt != GK_DT_BF16)
		return gk_errf(err, "%s '%s': expected bf16, f16 or f32", what, s);
	*out = dt;
	return 0;
}
