/*
 * reduce.h - the element math of lib/comm, shared by the CPU path and the
 * CUDA kernels (reduce.cu): pairwise reduction for each dtype and op, and
 * the compressed wire formats. Internal to lib/comm.
 *
 * F16 and BF16 are widened to f32, combined, and rounded back once, so a
 * pairwise reduction has one rounding, as NCCL's does.
 * I32 SUM and PROD wrap modulo 2^32 (done in uint32_t: signed overflow
 * is undefined in C, and MPI implementations wrap in practice).
 *
 * Device and host results are bitwise equal. Every function here is one
 * IEEE operation per rounding (add, multiply, divide, rint, compare) and
 * the integer code of core/half.h, and neither side fuses a multiply
 * into an add: on the device the one multiply-then-add (int8 unpack)
 * goes through GK_FMUL/GK_FADD, which are __fmul_rn/__fadd_rn there
 * (nvcc never contracts those into an FMA); on the host the Makefile
 * builds with -ffp-contract=off. Division on the device is IEEE-rounded
 * as long as nvcc keeps its default -prec-div=true (no --use_fast_math).
 * tests/unit/comm_cuda.c compares the kernels with the CPU loops bit for
 * bit on a GPU machine (and on the CPU's emulation of CUDA, tests/cuemu).
 *
 * NaN: the two sides disagree on the NaN an operation makes. x86 keeps
 * the payload of a NaN operand and makes 0xffc00000 of inf - inf or
 * 0 * inf; NVIDIA GPUs make 0x7fffffff for all of them. So every result
 * here that can be NaN goes through gk_nan_f32 (gk_nan_f64), which gives
 * the one quiet NaN 0x7fc00000 (bf16 0x7fc0, f16 0x7e00) whatever the
 * operands were: a NaN in a gradient then packs, unpacks and reduces to
 * the same bits on both. A NaN's payload carries nothing a reduction
 * needs; that it is NaN is kept.
 */
#ifndef GK_COMM_REDUCE_H
#define GK_COMM_REDUCE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "comm/comm.h"
#include "core/half.h"

#ifdef __CUDA_ARCH__
#define GK_FADD(a, b) __fadd_rn((a), (b))
#define GK_FMUL(a, b) __fmul_rn((a), (b))
#else
#define GK_FADD(a, b) ((a) + (b))
#define GK_FMUL(a, b) ((a) * (b))
#endif

/*
 * Same numbering as gk_comm_op (comm.h), so an op passes through as an
 * int; AVG reduces as SUM. kernels.c asserts the numbering at compile time.
 */
enum { GK_RED_SUM, GK_RED_PROD, GK_RED_MAX, GK_RED_MIN };

/* x, or the canonical quiet NaN when x is a NaN (see above). */
GK_HD float gk_nan_f32(float x)
{
	return x == x ? x : gk_bits_f32(0x7fc00000u);
}

GK_HD double gk_nan_f64(double x)
{
	uint64_t u = 0x7ff8000000000000ull;
	double d;
	memcpy(&d, &u, 8);
	return x == x ? x : d;
}

GK_HD float gk_red_f32(int op, float a, float b)
{
	switch (op) {
	case GK_RED_PROD: return gk_nan_f32(a * b);
	case GK_RED_MAX: return gk_nan_f32(a > b ? a : b);
	case GK_RED_MIN: return gk_nan_f32(a < b ? a : b);
	default: return gk_nan_f32(a + b);
	}
}

GK_HD double gk_red_f64(int op, double a, double b)
{
	switch (op) {
	case GK_RED_PROD: return gk_nan_f64(a * b);
	case GK_RED_MAX: return gk_nan_f64(a > b ? a : b);
	case GK_RED_MIN: return gk_nan_f64(a < b ? a : b);
	default: return gk_nan_f64(a + b);
	}
}

GK_HD int32_t gk_red_i32(int op, int32_t a, int32_t b)
{
	switch (op) {
	case GK_RED_PROD: return (int32_t)((uint32_t)a * (uint32_t)b);
	case GK_RED_MAX: return a > b ? a : b;
	case GK_RED_MIN: return a < b ? a : b;
	default: return (int32_t)((uint32_t)a + (uint32_t)b);
	}
}

GK_HD uint16_t gk_red_bf16(int op, uint16_t a, uint16_t b)
{
	return gk_f32_to_bf16(gk_red_f32(op, gk_bf16_to_f32(a), gk_bf16_to_f32(b)));
}

GK_HD uint16_t gk_red_f16(int op, uint16_t a, uint16_t b)
{
	return gk_f32_to_f16(gk_red_f32(op, gk_f16_to_f32(a), gk_f16_to_f32(b)));
}

/*
 * The final AVG step: x / n computed in f32 (f64 for F64) and rounded
 * once; integers divide toward zero.
 */
GK_HD float gk_avg_f32(float x, int n) { return gk_nan_f32(x / (float)n); }
GK_HD double gk_avg_f64(double x, int n) { return gk_nan_f64(x / (double)n); }
GK_HD int32_t gk_avg_i32(int32_t x, int n) { return x / n; }
GK_HD uint16_t gk_avg_bf16(uint16_t x, int n)
{
	return gk_f32_to_bf16(gk_avg_f32(gk_bf16_to_f32(x), n));
}
GK_HD uint16_t gk_avg_f16(uint16_t x, int n)
{
	return gk_f32_to_f16(gk_avg_f32(gk_f16_to_f32(x), n));
}

/*
 * The 16-bit wire formats: w's value as f32, what packing x to w lost
 * (the error feedback residual, x - unpacked), and unpack with add.
 */
GK_HD float gk_w16_f32(uint16_t w, int bf)
{
	return bf ? gk_bf16_to_f32(w) : gk_f16_to_f32(w);
}
GK_HD float gk_w16_resid(float x, uint16_t w, int bf)
{
	return gk_nan_f32(x - gk_w16_f32(w, bf));
}
GK_HD float gk_w16_add(float d, uint16_t w, int bf)
{
	return gk_nan_f32(GK_FADD(d, gk_w16_f32(w, bf)));
}

/*
 * int8 wire format for a run of elements: groups of 256 (GK_COMM_INT8_GROUP),
 * each an f32 scale s = max|x|/127 followed by 256 int8 q = rint(x/s)
 * (the last group may be shorter). x = q*s on the way back. Rounding to
 * the nearest step errs by at most s/2 = max|x|/254, plus the f32
 * rounding of x/s and q*s (a few 2^-24 relative).
 *
 * NaN and infinity: int8 has neither, and converting a NaN or an
 * out-of-range float to an integer is undefined behaviour in C. A group
 * holding a NaN or an infinity gets a NaN scale instead, so every element
 * of that group comes back NaN (its q are 0). The result of the allreduce
 * is then NaN there, which is what the overflow checks of mixed-precision
 * training look for; sending 0 would hide a diverged step. The error
 * feedback residual of such a group is 0, so one bad step does not poison
 * the steps after it.
 */
/*
 * Running max|x| of a group: m is the max so far (start at 0). NaN once
 * any element is NaN or infinite. Commutative and associative, so the
 * device's tree reduction and the CPU's loop agree exactly.
 */
GK_HD float gk_i8_amax(float m, float x)
{
	float a = fabsf(x);
	if (m != m || !(a <= 3.40282347e38f))
		return gk_bits_f32(0x7fc00000u);
	return a > m ? a : m;
}

GK_HD float gk_i8_scale(float absmax) { return gk_nan_f32(absmax / 127.0f); }

/* 1/scale; 0 for an all-zero group and for a NaN scale (q are then 0). */
GK_HD float gk_i8_inv(float scale) { return scale > 0 ? 1.0f / scale : 0.0f; }

GK_HD int8_t gk_i8_quant(float x, float inv_scale)
{
	float q = rintf(GK_FMUL(x, inv_scale));
	if (q != q) /* inf * 0 in a NaN-scaled group */
		q = 0;
	q = q > 127.0f ? 127.0f : q;
	q = q < -127.0f ? -127.0f : q;
	return (int8_t)q;
}

GK_HD float gk_i8_dequant(int8_t q, float scale)
{
	return gk_nan_f32(GK_FMUL((float)q, scale));
}

/* d + q*scale, rounded twice on both sides (never one fused rounding). */
GK_HD float gk_i8_dequant_add(float d, int8_t q, float scale)
{
	return gk_nan_f32(GK_FADD(d, gk_i8_dequant(q, scale)));
}

/* The error feedback residual x - q*scale; 0 in a NaN-scaled group. */
GK_HD float gk_i8_resid(float x, int8_t q, float scale)
{
	if (scale != scale)
		return 0.0f;
	return x - gk_i8_dequant(q, scale);
}

/* Bytes on the wire for n elements in int8 format. */
GK_HD size_t gk_i8_wire_bytes(size_t n)
{
	return (n + GK_COMM_INT8_GROUP - 1) / GK_COMM_INT8_GROUP * 4 + n;
}

#endif
