/*
 * kernels.c - the CPU path of lib/comm's element math: loops over the
 * reduce.h functions that the CUDA kernels (reduce.cu) also use.
 *
 * The op is switched outside the loop so each loop body is one inlined
 * expression the compiler can vectorise; the reduction runs at memory
 * bandwidth, which is what an allreduce on one host is bound by.
 */
#include <string.h>

#include "comm/internal.h"
#include "comm/reduce.h"

#define HOT __attribute__((optimize("O3")))

/* reduce.h's op numbers are gk_comm_op's: the loops below pass one as the other. */
_Static_assert(GK_RED_SUM == (int)GK_COMM_SUM && GK_RED_PROD == (int)GK_COMM_PROD &&
	       GK_RED_MAX == (int)GK_COMM_MAX && GK_RED_MIN == (int)GK_COMM_MIN,
	       "GK_RED_* must follow gk_comm_op");

size_t gk_comm_dt_size(gk_dtype dt)
{
	switch (dt) {
	case GK_DT_F64: return 8;
	case GK_DT_F32: case GK_DT_I32: return 4;
	case GK_DT_F16: case GK_DT_BF16: return 2;
	default: return 0;
	}
}

#define LOOP(T, FN, OP)                                               \
	do {                                                          \
		T *d_ = dst;                                          \
		const T *s_ = src;                                    \
		for (size_t i = 0; i < n; i++)                        \
			d_[i] = FN(OP, d_[i], s_[i]);                 \
	} while (0)

/* Expand one loop per op so OP is a constant in each. */
#define BY_OP(T, FN)                                                   \
	do {                                                           \
		switch (red) {                                         \
		case GK_RED_PROD: LOOP(T, FN, GK_RED_PROD); break;     \
		case GK_RED_MAX: LOOP(T, FN, GK_RED_MAX); break;       \
		case GK_RED_MIN: LOOP(T, FN, GK_RED_MIN); break;       \
		default: LOOP(T, FN, GK_RED_SUM); break;               \
		}                                                      \
	} while (0)

HOT void gk_comm_reduce_cpu(void *dst, const void *src, size_t n, gk_dtype dt,
			    gk_comm_op op)
{
	int red = op == GK_COMM_AVG ? GK_RED_SUM : (int)op;
	switch (dt) {
	case GK_DT_F32: BY_OP(float, gk_red_f32); break;
	case GK_DT_F64: BY_OP(double, gk_red_f64); break;
	case GK_DT_I32: BY_OP(int32_t, gk_red_i32); break;
	case GK_DT_BF16: BY_OP(uint16_t, gk_red_bf16); break;
	case GK_DT_F16: BY_OP(uint16_t, gk_red_f16); break;
	default: break;
	}
}

#define LOOP3(T, FN, OP)                                              \
	do {                                                          \
		T *d_ = dst;                                          \
		const T *a_ = a, *b_ = b;                             \
		for (size_t i = 0; i < n; i++)                        \
			d_[i] = FN(OP, a_[i], b_[i]);                 \
	} while (0)

#define BY_OP3(T, FN)                                                  \
	do {                                                           \
		switch (red) {                                         \
		case GK_RED_PROD: LOOP3(T, FN, GK_RED_PROD); break;    \
		case GK_RED_MAX: LOOP3(T, FN, GK_RED_MAX); break;      \
		case GK_RED_MIN: LOOP3(T, FN, GK_RED_MIN); break;      \
		default: LOOP3(T, FN, GK_RED_SUM); break;              \
		}                                                      \
	} while (0)

HOT void gk_comm_reduce3_cpu(void *dst, const void *a, const void *b, size_t n,
			     gk_dtype dt, gk_comm_op op)
{
	int red = op == GK_COMM_AVG ? GK_RED_SUM : (int)op;
	switch (dt) {
	case GK_DT_F32: BY_OP3(float, gk_red_f32); break;
	case GK_DT_F64: BY_OP3(double, gk_red_f64); break;
	case GK_DT_I32: BY_OP3(int32_t, gk_red_i32); break;
	case GK_DT_BF16: BY_OP3(uint16_t, gk_red_bf16); break;
	case GK_DT_F16: BY_OP3(uint16_t, gk_red_f16); break;
	default: break;
	}
}

HOT void gk_comm_avg_cpu(void *buf, size_t n, gk_dtype dt, int world)
{
	switch (dt) {
	case GK_DT_F32: {
		float *b = buf;
		for (size_t i = 0; i < n; i++)
			b[i] = gk_avg_f32(b[i], world);
		break;
	}
	case GK_DT_F64: {
		double *b = buf;
		for (size_t i = 0; i < n; i++)
			b[i] = gk_avg_f64(b[i], world);
		break;
	}
	case GK_DT_I32: {
		int32_t *b = buf;
		for (size_t i = 0; i < n; i++)
			b[i] = gk_avg_i32(b[i], world);
		break;
	}
	case GK_DT_BF16: {
		uint16_t *b = buf;
		for (size_t i = 0; i < n; i++)
			b[i] = gk_avg_bf16(b[i], world);
		break;
	}
	case GK_DT_F16: {
		uint16_t *b = buf;
		for (size_t i = 0; i < n; i++)
			b[i] = gk_avg_f16(b[i], world);
		break;
	}
	default: break;
	}
}

size_t gk_comm_wire_bytes(gk_comm_compress cz, size_t n)
{
	switch (cz) {
	case GK_COMM_COMPRESS_BF16: case GK_COMM_COMPRESS_F16: return 2 * n;
	case GK_COMM_COMPRESS_INT8: return gk_i8_wire_bytes(n);
	default: return 4 * n;
	}
}

HOT void gk_comm_pack(void *wire, const float *x, size_t n,
		      gk_comm_compress cz, float *err_out)
{
	if (cz == GK_COMM_COMPRESS_BF16 || cz == GK_COMM_COMPRESS_F16) {
		uint16_t *w = wire;
		int bf = cz == GK_COMM_COMPRESS_BF16;
		for (size_t i = 0; i < n; i++) {
			w[i] = bf ? gk_f32_to_bf16(x[i]) : gk_f32_to_f16(x[i]);
			if (err_out)
				err_out[i] = gk_w16_resid(x[i], w[i], bf);
		}
		return;
	}
	if (cz == GK_COMM_COMPRESS_INT8) {
		unsigned char *w = wire;
		for (size_t g = 0; g < n; g += GK_COMM_INT8_GROUP) {
			size_t m = n - g < GK_COMM_INT8_GROUP ? n - g : GK_COMM_INT8_GROUP;
			float amax = 0;
			for (size_t i = 0; i < m; i++)
				amax = gk_i8_amax(amax, x[g + i]);
			float s = gk_i8_scale(amax), inv = gk_i8_inv(s);
			memcpy(w, &s, 4);
			int8_t *q = (int8_t *)(w + 4);
			for (size_t i = 0; i < m; i++) {
				q[i] = gk_i8_quant(x[g + i], inv);
				if (err_out)
					err_out[g + i] = gk_i8_resid(x[g + i], q[i], s);
			}
			w += 4 + m;
		}
		return;
	}
	memcpy(wire, x, n * 4);
	if (err_out)
		memset(err_out, 0, n * 4);
}

HOT void gk_comm_unpack(float *dst, const void *wire, size_t n,
			gk_comm_compress cz, int add)
{
	if (cz == GK_COMM_COMPRESS_BF16 || cz == GK_COMM_COMPRESS_F16) {
		const uint16_t *w = wire;
		int bf = cz == GK_COMM_COMPRESS_BF16;
		for (size_t i = 0; i < n; i++)
			dst[i] = add ? gk_w16_add(dst[i], w[i], bf) : gk_w16_f32(w[i], bf);
		return;
	}
	if (cz == GK_COMM_COMPRESS_INT8) {
		const unsigned char *w = wire;
		for (size_t g = 0; g < n; g += GK_COMM_INT8_GROUP) {
			size_t m = n - g < GK_COMM_INT8_GROUP ? n - g : GK_COMM_INT8_GROUP;
			float s;
			memcpy(&s, w, 4);
			const int8_t *q = (const int8_t *)(w + 4);
			for (size_t i = 0; i < m; i++)
				dst[g + i] = add ? gk_i8_dequant_add(dst[g + i], q[i], s)
						 : gk_i8_dequant(q[i], s);
			w += 4 + m;
		}
		return;
	}
	const float *w = wire;
	for (size_t i = 0; i < n; i++)
		dst[i] = add ? dst[i] + w[i] : w[i];
}
