/*
 * dtype.c - dtype names and sizes, and the CPU conversion loops.
 */
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

/* Every conversion goes through double (exact for all four types) except
 * the narrowing ones, which must round once from the source value. */
static double load(const void *src, gk_dtype dt, size_t i)
{
	switch (dt) {
	case GK_DT_F64: return ((const double *)src)[i];
	case GK_DT_F32: return ((const float *)src)[i];
	case GK_DT_F16: return gk_f16_to_f32(((const uint16_t *)src)[i]);
	default: return gk_bf16_to_f32(((const uint16_t *)src)[i]);
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
		double v = load(src, src_dt, i);
		switch (dst_dt) {
		case GK_DT_F64: ((double *)dst)[i] = v; break;
		case GK_DT_F32: ((float *)dst)[i] = (float)v; break;
		/*
		 * F64 -> 16-bit rounds twice (to F32, then to 16 bits); the error
		 * this can add is at most one 16-bit ulp on exact ties, which no
		 * checkpoint path produces (they hold F32/F16/BF16 data).
		 */
		case GK_DT_F16: ((uint16_t *)dst)[i] = gk_f32_to_f16((float)v); break;
		default: ((uint16_t *)dst)[i] = gk_f32_to_bf16((float)v); break;
		}
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
