/*
 * reduce.h - the element math of lib/comm, shared by the CPU path and the
 * CUDA kernels (reduce.cu): pairwise reduction for each dtype and op, and
 * the compressed wire formats. Internal to lib/comm.
 *
 * F16 and BF16 are widened to f32, combined, and rounded back once, so a
 * pairwise reduction has one rounding, as NCCL's does.
 * I32 SUM and PROD wrap modulo 2^32 (done in uint32_t: signed overflow
 * is undefined in C, and MPI implementations wrap in practice).
 */
#ifndef GK_COMM_REDUCE_H
#define GK_COMM_REDUCE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/half.h"

/*
 * Same numbering as gk_comm_op (comm.h), so an op passes through as an
 * int; AVG reduces as SUM. kernels.c asserts the numbering at compile time.
 */
enum { GK_RED_SUM, GK_RED_PROD, GK_RED_MAX, GK_RED_MIN };

GK_HD float gk_red_f32(int op, float a, float b)
{
	switch (op) {
	case GK_RED_PROD: return a * b;
	case GK_RED_MAX: return a > b ? a : b;
	case GK_RED_MIN: return a < b ? a : b;
	default: return a + b;
	}
}

GK_HD double gk_red_f64(int op, double a, double b)
{
	switch (op) {
	case GK_RED_PROD: return a * b;
	case GK_RED_MAX: return a > b ? a : b;
	case GK_RED_MIN: return a < b ? a : b;
	default: return a + b;
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
GK_HD float gk_avg_f32(float x, int n) { return x / (float)n; }
GK_HD double gk_avg_f64(double x, int n) { return x / (double)n; }
GK_HD int32_t gk_avg_i32(int32_t x, int n) { return x / n; }
GK_HD uint16_t gk_avg_bf16(uint16_t x, int n)
{
	return gk_f32_to_bf16(gk_bf16_to_f32(x) / (float)n);
}
GK_HD uint16_t gk_avg_f16(uint16_t x, int n)
{
	return gk_f32_to_f16(gk_f16_to_f32(x) / (float)n);
}

/*
 * int8 wire format for a run of elements: groups of GK_COMM_INT8_GROUP (256),
 * each an f32 scale s = max|x|/127 followed by 256 int8 q = rint(x/s)
 * (the last group may be shorter). x = q*s on the way back. Rounding to
 * the nearest step errs by at most s/2 = max|x|/254, plus the f32
 * rounding of x/s and q*s (a few 2^-24 relative).
 */
GK_HD float gk_i8_scale(float absmax) { return absmax / 127.0f; }

GK_HD int8_t gk_i8_quant(float x, float inv_scale)
{
	float q = rintf(x * inv_scale);
	q = q > 127.0f ? 127.0f : q;
	q = q < -127.0f ? -127.0f : q;
	return (int8_t)q;
}

GK_HD float gk_i8_dequant(int8_t q, float scale) { return (float)q * scale; }

/* Bytes on the wire for n elements in int8 format. */
GK_HD size_t gk_i8_wire_bytes(size_t n)
{
	return (n + GK_COMM_INT8_GROUP - 1) / GK_COMM_INT8_GROUP * 4 + n;
}

#endif
