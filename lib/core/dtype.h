/*
 * dtype.h - element types, named as safetensors names them, shared by the
 * checkpoint, communication and training modules. Part of core.h.
 */
#ifndef GK_DTYPE_H
#define GK_DTYPE_H

#include <stddef.h>

/*
 * The safetensors dtypes (reference: safetensors/src/tensor.rs `Dtype`),
 * in the reference's order: its writer sorts tensors by this order, so
 * gk_st's byte-exact writer depends on it. F4 and F6 pack several
 * elements per byte; everything else is whole bytes.
 */
typedef enum gk_dtype {
	GK_DT_INVALID = 0,
	GK_DT_BOOL,
	GK_DT_F4,
	GK_DT_F6_E2M3,
	GK_DT_F6_E3M2,
	GK_DT_U8,
	GK_DT_I8,
	GK_DT_F8_E5M2,
	GK_DT_F8_E4M3,
	GK_DT_F8_E8M0,
	GK_DT_F8_E4M3FNUZ,
	GK_DT_F8_E5M2FNUZ,
	GK_DT_I16,
	GK_DT_U16,
	GK_DT_F16,
	GK_DT_BF16,
	GK_DT_I32,
	GK_DT_U32,
	GK_DT_F32,
	GK_DT_C64,
	GK_DT_F64,
	GK_DT_I64,
	GK_DT_U64,
	GK_DT_COUNT
} gk_dtype;

/* "F32", "BF16" ...; "?" for an invalid value. */
const char *gk_dtype_name(gk_dtype dt);
/* Exact safetensors name to dtype; GK_DT_INVALID when unknown. */
gk_dtype gk_dtype_from_name(const char *name);
/*
 * A user's spelling on the command line: "f32" "fp32" "float32" "float",
 * "bf16" "bfloat16", "f16" "fp16" "float16" "half", "f64" "double", "i32"
 * "int32", "i8", "u8", and any safetensors name, case-insensitive.
 */
gk_dtype gk_dtype_parse(const char *s);
/*
 * A training or storage precision from the command line: gk_dtype_parse
 * limited to F32, F16 and BF16 (what --dtype and --precision accept).
 * Anything else: -1 and "WHAT 'S': expected bf16, f16 or f32" in err.
 */
struct gk_err;
int gk_dtype_parse_float(const char *s, const char *what, gk_dtype *out,
			 struct gk_err *err);
/* Size of one element in bits (4 for F4, 6 for F6_*, 8 for BOOL). */
unsigned gk_dtype_bits(gk_dtype dt);
/* True for F64 F32 F16 BF16: the types gk_convert handles. */
int gk_dtype_is_float(gk_dtype dt);

/*
 * Convert n elements between F64, F32, F16 and BF16 (round to nearest
 * even; see half.h). dst and src must not overlap unless they are the same
 * buffer and the destination element is no wider than the source.
 * Returns 0, or -1 for a pair of types it does not convert.
 */
int gk_convert(void *dst, gk_dtype dst_dt, const void *src, gk_dtype src_dt,
	       size_t n);

/*
 * Element i of a buffer of F64, F32, F16, BF16 or I32 as a double (exact),
 * and a double stored as one, rounded once to nearest even (I32: toward
 * zero, and v must fit). Other types read as 0 and are not written.
 */
double gk_dtype_get(const void *buf, gk_dtype dt, size_t i);
void gk_dtype_set(void *buf, gk_dtype dt, size_t i, double v);

#endif
