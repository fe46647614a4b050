/*
 * attention_cpu.c - causal self-attention on the CPU: its four matmul
 * shapes as register-tiled loops over each head, the softmax and
 * its backward from ops_cpu.c (math.h's per-element functions).
 *
 * Why not sgemm: a head's products are small (T x T x hs: 128 x 128 x 64
 * at the benchmark's shape), read q, k and v with a stride of 3C, and the
 * causal mask cuts them into triangles. As OpenBLAS calls, in blocks of
 * rows, they ran at half its rate on large products: 3,072 calls a step,
 * each packing its operands, 9 % of the step for 5 % of its FLOPs.
 * Here each head's k (and in backward v) is transposed once into a
 * buffer that stays in L1/L2, 16 x 16 blocks at a time through
 * registers; the forward packs v's rows, the backward reads q, k and
 * dout in place when a head is a whole number of 16-float vectors wide
 * (else they too are packed, zero-padded; head_rows says why); every
 * product walks only the causal triangle in tiles of 4 rows by 16-float
 * vectors. The forward makes two passes over a head: scores and softmax
 * into att's rows, then att v reading those rows in place.
 *
 * Rounding: this file builds with -ffp-contract=fast (the Makefile), so
 * the tiles' multiply-adds are fused, as in OpenBLAS's kernels. The
 * per-element math (softmax, its backward) lives in ops_cpu.c, built
 * without, so it rounds as the CUDA kernels do. Each output is one
 * product summed in a fixed order: runs repeat bit for bit, at any
 * thread count (a thread takes whole (batch, head) pairs).
 *
 * reference: llm.c train_gpt2.c attention_forward/backward (the math).
 */
#include <math.h>
#include <string.h>

#include <omp.h>

#include "nn/internal.h"

typedef float v16 __attribute__((vector_size(64)));
/* the same, at any float's alignment, to load and store through */
typedef float v16u __attribute__((vector_size(64), aligned(4)));

#define VL 16 /* floats in a v16 */
#define R 4   /* rows in a tile */

/* macros, not functions: a v16 passed by value has no baseline ABI */
#define ld(p) (*(const v16u *)(p))
#define st(p, x) (*(v16u *)(p) = (x))

static int up16(int n)
{
	return (n + VL - 1) / VL * VL;
}

/*
 * out (R rows of ldo) [r][j] = scale * sum over d < K of x[r][d] yt[d][j],
 * for j < nj (a multiple of 16). Rows r >= nr repeat row 0 (their
 * results are not used; reading them stays in bounds).
 */
GK_NN_SIMD_CLONES
static void tile_dot(float *out, int ldo, const float *x, int ldx, int nr,
		     const float *yt, int ldy, int K, int nj, float scale)
{
	const float *x0 = x, *x1 = x + (nr > 1 ? ldx : 0);
	const float *x2 = x + (nr > 2 ? 2 * ldx : 0);
	const float *x3 = x + (nr > 3 ? 3 * ldx : 0);
	int j = 0;
	for (; j + 2 * VL <= nj; j += 2 * VL) {
		v16 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0};
		v16 a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
		for (int d = 0; d < K; d++) {
			const float *y = yt + (size_t)d * ldy + j;
			v16 y0 = ld(y), y1 = ld(y + VL);
			a00 += x0[d] * y0, a01 += x0[d] * y1;
			a10 += x1[d] * y0, a11 += x1[d] * y1;
			a20 += x2[d] * y0, a21 += x2[d] * y1;
			a30 += x3[d] * y0, a31 += x3[d] * y1;
		}
		st(out + j, a00 * scale), st(out + j + VL, a01 * scale);
		st(out + ldo + j, a10 * scale);
		st(out + ldo + j + VL, a11 * scale);
		st(out + 2 * ldo + j, a20 * scale);
		st(out + 2 * ldo + j + VL, a21 * scale);
		st(out + 3 * ldo + j, a30 * scale);
		st(out + 3 * ldo + j + VL, a31 * scale);
	}
	for (; j < nj; j += VL) {
		v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
		for (int d = 0; d < K; d++) {
			v16 y0 = ld(yt + (size_t)d * ldy + j);
			a0 += x0[d] * y0, a1 += x1[d] * y0;
			a2 += x2[d] * y0, a3 += x3[d] * y0;
		}
		st(out + j, a0 * scale), st(out + ldo + j, a1 * scale);
		st(out + 2 * ldo + j, a2 * scale);
		st(out + 3 * ldo + j, a3 * scale);
	}
}

/*
 * out (R rows of ldo) [r][c] = sum over j in [j0, j1) of a(r, j) y[j][c],
 * for c < nc (a multiple of 16), where a(r, j) = a[r * ars + j * ajs]: a
 * row-major block (ars the row stride, ajs 1) or a transposed one (ars
 * 1). Rows r >= nr repeat row 0, as in tile_dot.
 */
GK_NN_SIMD_CLONES
static void tile_axpy(float *out, int ldo, const float *a, int ars, int ajs,
		      int nr, const float *y, int ldy, int j0, int j1, int nc)
{
	const float *r0 = a, *r1 = a + (nr > 1 ? ars : 0);
	const float *r2 = a + (nr > 2 ? 2 * ars : 0);
	const float *r3 = a + (nr > 3 ? 3 * ars : 0);
	int c = 0;
	for (; c + 4 * VL <= nc; c += 4 * VL) {
		v16 a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0};
		v16 a10 = {0}, a11 = {0}, a12 = {0}, a13 = {0};
		v16 a20 = {0}, a21 = {0}, a22 = {0}, a23 = {0};
		v16 a30 = {0}, a31 = {0}, a32 = {0}, a33 = {0};
		for (int j = j0; j < j1; j++) {
			const float *yj = y + (size_t)j * ldy + c;
			v16 y0 = ld(yj), y1 = ld(yj + VL);
			v16 y2 = ld(yj + 2 * VL), y3 = ld(yj + 3 * VL);
			size_t o = (size_t)j * ajs;
			float s0 = r0[o], s1 = r1[o], s2 = r2[o], s3 = r3[o];
			a00 += s0 * y0, a01 += s0 * y1, a02 += s0 * y2;
			a03 += s0 * y3;
			a10 += s1 * y0, a11 += s1 * y1, a12 += s1 * y2;
			a13 += s1 * y3;
			a20 += s2 * y0, a21 += s2 * y1, a22 += s2 * y2;
			a23 += s2 * y3;
			a30 += s3 * y0, a31 += s3 * y1, a32 += s3 * y2;
			a33 += s3 * y3;
		}
		float *o0 = out + c, *o1 = o0 + ldo, *o2 = o1 + ldo;
		float *o3 = o2 + ldo;
		st(o0, a00), st(o0 + VL, a01), st(o0 + 2 * VL, a02);
		st(o0 + 3 * VL, a03);
		st(o1, a10), st(o1 + VL, a11), st(o1 + 2 * VL, a12);
		st(o1 + 3 * VL, a13);
		st(o2, a20), st(o2 + VL, a21), st(o2 + 2 * VL, a22);
		st(o2 + 3 * VL, a23);
		st(o3, a30), st(o3 + VL, a31), st(o3 + 2 * VL, a32);
		st(o3 + 3 * VL, a33);
	}
	for (; c < nc; c += VL) {
		v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
		for (int j = j0; j < j1; j++) {
			v16 yj = ld(y + (size_t)j * ldy + c);
			size_t o = (size_t)j * ajs;
			a0 += r0[o] * yj, a1 += r1[o] * yj;
			a2 += r2[o] * yj, a3 += r3[o] * yj;
		}
		st(out + c, a0), st(out + ldo + c, a1);
		st(out + 2 * ldo + c, a2), st(out + 3 * ldo + c, a3);
	}
}

/* n floats from src to dst, in vectors: short rows, too many for a call
 * to memcpy each */
static inline void copy(float *dst, const float *src, int n)
{
	int c = 0;
	for (; c + VL <= n; c += VL)
		st(dst + c, ld(src + c));
	for (; c < n; c++)
		dst[c] = src[c];
}

/*
 * A head's rows (T x hs at stride lds) as the tiles read them, whole
 * vectors wide: in place when hs is a multiple of 16 and inplace is
 * set, else packed into buf (Tp x hp) with zeros past column hs and row
 * T. Sets *ld to the stride.
 *
 * Which: rows read in place, 3C floats apart, share a handful of L1
 * sets. The forward's att v tiles, which read v's rows once per tile of
 * output rows, ran 1.5 times faster on packed rows, and packing v paid
 * for itself; packing the backward's k, q and dout cost more than its
 * tiles gained (measured at T 128, hs 64).
 */
static const float *head_rows(float *buf, int Tp, int hp, const float *src,
			      int lds, int T, int hs, int inplace, int *ld)
{
	if (inplace && hs == hp) {
		*ld = lds;
		return src;
	}
	for (int t = 0; t < Tp; t++) {
		float *d = buf + (size_t)t * hp;
		int n = t < T ? hs : 0;
		copy(d, src + (size_t)t * lds, n);
		for (int c = n; c < hp; c++)
			d[c] = 0.0f;
	}
	*ld = hp;
	return buf;
}

/* 16 rows of dst (stride ldd) = the transpose of a 16 x 16 block of src
 * (stride lds), in registers: 4 rounds, round s swapping the
 * off-diagonal s x s blocks between rows i and i + s (s = 8, 4, 2, 1),
 * 64 two-vector shuffles in all */
typedef int v16i __attribute__((vector_size(64)));
#define SWAP_ROUND(x, s, lo, hi)                                              \
	for (int i = 0; i < VL; i++)                                          \
		if (!(i & (s))) {                                             \
			v16 a_ = x[i], b_ = x[i + (s)];                      \
			x[i] = __builtin_shuffle(a_, b_, lo);                 \
			x[i + (s)] = __builtin_shuffle(a_, b_, hi);           \
		}

GK_NN_SIMD_CLONES
static void transpose16(float *dst, int ldd, const float *src, int lds)
{
	/* lane l of the low row: a[l] where bit s of l is clear, else
	 * b[l - s]; of the high row: a[l + s], else b[l] */
	static const v16i lo8 = {0, 1, 2, 3, 4, 5, 6, 7,
				 16, 17, 18, 19, 20, 21, 22, 23};
	static const v16i hi8 = {8, 9, 10, 11, 12, 13, 14, 15,
				 24, 25, 26, 27, 28, 29, 30, 31};
	static const v16i lo4 = {0, 1, 2, 3, 16, 17, 18, 19,
				 8, 9, 10, 11, 24, 25, 26, 27};
	static const v16i hi4 = {4, 5, 6, 7, 20, 21, 22, 23,
				 12, 13, 14, 15, 28, 29, 30, 31};
	static const v16i lo2 = {0, 1, 16, 17, 4, 5, 20, 21,
				 8, 9, 24, 25, 12, 13, 28, 29};
	static const v16i hi2 = {2, 3, 18, 19, 6, 7, 22, 23,
				 10, 11, 26, 27, 14, 15, 30, 31};
	static const v16i lo1 = {0, 16, 2, 18, 4, 20, 6, 22,
				 8, 24, 10, 26, 12, 28, 14, 30};
	static const v16i hi1 = {1, 17, 3, 19, 5, 21, 7, 23,
				 9, 25, 11, 27, 13, 29, 15, 31};
	v16 x[VL];
	for (int i = 0; i < VL; i++)
		x[i] = ld(src + (size_t)i * lds);
	SWAP_ROUND(x, 8, lo8, hi8);
	SWAP_ROUND(x, 4, lo4, hi4);
	SWAP_ROUND(x, 2, lo2, hi2);
	SWAP_ROUND(x, 1, lo1, hi1);
	for (int i = 0; i < VL; i++)
		st(dst + (size_t)i * ldd, x[i]);
}
#undef SWAP_ROUND

/* dst (ncols x ldd) = the transpose of src (rows x cols, stride lds),
 * zero-padded: whole 16 x 16 blocks through registers, the edges one
 * element at a time */
static void copy_transposed(float *dst, int ldd, int ncols, const float *src,
			    int lds, int rows, int cols)
{
	int r16 = rows / VL * VL, c16 = cols / VL * VL;
	for (int t = 0; t < r16; t += VL)
		for (int d = 0; d < c16; d += VL)
			transpose16(dst + (size_t)d * ldd + t, ldd,
				    src + (size_t)t * lds + d, lds);
	for (int t = 0; t < rows; t++) {
		const float *s = src + (size_t)t * lds;
		for (int d = t < r16 ? c16 : 0; d < cols; d++)
			dst[(size_t)d * ldd + t] = s[d];
	}
	for (int d = 0; d < ncols; d++)
		for (int t = d < cols ? rows : 0; t < ldd; t++)
			dst[(size_t)d * ldd + t] = 0.0f;
}

/*
 * A tile of nr rows of hs outputs, to rows of out (stride ldo): the
 * tiles write R rows whole vectors wide, so they write out in place
 * when that fits, else into tile (R x hp), copied out by put_rows.
 */
static float *tile_out(float *out, int ldo, float *tile, int hp, int hs,
		       int nr, int *ld)
{
	if (hs == hp && nr == R) {
		*ld = ldo;
		return out;
	}
	*ld = hp;
	return tile;
}

static void put_rows(float *out, int ldo, const float *tile, int nr, int hs,
		     int hp)
{
	if (out != tile)
		for (int r = 0; r < nr; r++)
			copy(out + (size_t)r * ldo, tile + (size_t)r * hp, hs);
}

size_t gk_nn_cpu_attention_scratch(int T, int hs)
{
	size_t Tp = (size_t)up16(T), hp = (size_t)up16(hs);
	/* the backward's padded k, q, dout, v^T, d scores and output tile;
	 * the forward's v, k^T, scores and output tile fit in that */
	return 4 * Tp * hp + Tp * Tp + R * hp;
}

/*
 * qkv (B,T,3C) holds q, k, v side by side, head h at columns h*hs of
 * each. Per (b, h), one per thread: att (T,T) = softmax(q k^T / sqrt(hs))
 * over j <= t (zero above the diagonal), out[:, h*hs:] = att v. scratch:
 * gk_nn_cpu_attention_scratch floats per thread.
 */
void gk_nn_cpu_attention_fwd(float *out, float *att, float *scratch,
			     const float *qkv, int B, int T, int C, int NH,
			     int nt)
{
	int hs = C / NH, C3 = 3 * C, Tp = up16(T), hp = up16(hs);
	float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int bh = 0; bh < B * NH; bh++) {
		int b = bh / NH, h = bh % NH, ldv, ldo;
		const float *q = qkv + (size_t)b * T * C3 + h * hs;
		float *kt = scratch + gk_nn_cpu_attention_scratch(T, hs) *
					      (size_t)omp_get_thread_num();
		float *vbuf = kt + (size_t)hp * Tp, *s = vbuf + (size_t)Tp * hp;
		float *tile = s + (size_t)R * Tp;
		float *a = att + (size_t)bh * T * T;
		float *y = out + (size_t)b * T * C + h * hs;
		copy_transposed(kt, Tp, hp, q + C, C3, T, hs);
		const float *v = head_rows(vbuf, Tp, hp, q + 2 * C, C3, T, hs,
					   0, &ldv);
		/* the scores and softmax of every row, then att v */
		for (int t0 = 0; t0 < T; t0 += R) {
			int nr = T - t0 < R ? T - t0 : R;
			/* the tile's rows see columns up to t0 + 3, all
			 * within up16(t0 + 1): t0 is a multiple of 4 */
			int nj = up16(t0 + 1);
			tile_dot(s, Tp, q + (size_t)t0 * C3, C3, nr, kt, Tp,
				 hs, nj, scale);
			for (int r = 0; r < nr; r++)
				gk_nn_cpu_softmax_causal(a + (size_t)(t0 + r) * T,
							 s + (size_t)r * Tp,
							 t0 + r + 1, nj, T);
		}
		for (int t0 = 0; t0 < T; t0 += R) {
			int nr = T - t0 < R ? T - t0 : R;
			float *yt = y + (size_t)t0 * C;
			float *o = tile_out(yt, C, tile, hp, hs, nr, &ldo);
			/* att's rows are zero past the diagonal: the
			 * tile's first rows read some of those zeros */
			tile_axpy(o, ldo, a + (size_t)t0 * T, T, 1, nr, v, ldv,
				  0, t0 + nr, hp);
			put_rows(yt, C, o, nr, hs, hp);
		}
	}
}

/*
 * dqkv (B,T,3C) = d/dqkv (overwritten), from dout (B,T,C), the forward's
 * qkv and att. Per (b, h): d att = dout v^T, d scores = softmax backward
 * (ops_cpu.c), dq = d scores k, dk = d scores^T q, dv = att^T dout, each
 * over the causal triangle only.
 */
void gk_nn_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout,
			     const float *qkv, const float *att, int B, int T,
			     int C, int NH, int nt)
{
	int hs = C / NH, C3 = 3 * C, Tp = up16(T), hp = up16(hs);
	float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int bh = 0; bh < B * NH; bh++) {
		int b = bh / NH, h = bh % NH, ldq, ldk, ldd, ldo;
		size_t base = (size_t)b * T * C3 + h * hs;
		const float *qh = qkv + base;
		float *dq = dqkv + base, *dk = dq + C, *dv = dk + C;
		const float *a = att + (size_t)bh * T * T;
		const float *dh = dout + (size_t)b * T * C + h * hs;
		float *kbuf = scratch + gk_nn_cpu_attention_scratch(T, hs) *
						(size_t)omp_get_thread_num();
		float *qbuf = kbuf + (size_t)Tp * hp, *dbuf = qbuf + (size_t)Tp * hp;
		float *vt = dbuf + (size_t)Tp * hp, *dsc = vt + (size_t)hp * Tp;
		float *tile = dsc + (size_t)Tp * Tp;
		copy_transposed(vt, Tp, hp, qh + 2 * C, C3, T, hs);
		const float *k = head_rows(kbuf, Tp, hp, qh + C, C3, T, hs, 1,
					   &ldk);
		const float *q = head_rows(qbuf, Tp, hp, qh, C3, T, hs, 1, &ldq);
		const float *d = head_rows(dbuf, Tp, hp, dh, C, T, hs, 1, &ldd);
		for (int t0 = 0; t0 < T; t0 += R) {
			int nr = T - t0 < R ? T - t0 : R;
			int nj = up16(t0 + 1);
			float *sc = dsc + (size_t)t0 * Tp;
			/* d att rows [t0, t0 + nr), columns [0, nj) */
			tile_dot(sc, Tp, dh + (size_t)t0 * C, C, nr, vt, Tp, hs,
				 nj, 1.0f);
			/* d scores, zero from the diagonal to nj: the dq
			 * tile below and the dk tiles read up to there */
			for (int r = 0; r < nr; r++)
				gk_nn_cpu_softmax_bwd_row(sc + (size_t)r * Tp,
							  a + (size_t)(t0 + r) * T,
							  t0 + r + 1, nj, T, scale);
			float *dqt = dq + (size_t)t0 * C3;
			float *o = tile_out(dqt, C3, tile, hp, hs, nr, &ldo);
			tile_axpy(o, ldo, sc, Tp, 1, nr, k, ldk, 0, t0 + nr, hp);
			put_rows(dqt, C3, o, nr, hs, hp);
		}
		/* rows [j0, j0 + nr) of dk and dv: the sums over t >= j0
		 * (d scores and att are zero above the diagonal) */
		for (int j0 = 0; j0 < T; j0 += R) {
			int nr = T - j0 < R ? T - j0 : R;
			float *dkt = dk + (size_t)j0 * C3, *dvt = dv + (size_t)j0 * C3;
			float *o = tile_out(dkt, C3, tile, hp, hs, nr, &ldo);
			tile_axpy(o, ldo, dsc + j0, 1, Tp, nr, q, ldq, j0, T, hp);
			put_rows(dkt, C3, o, nr, hs, hp);
			o = tile_out(dvt, C3, tile, hp, hs, nr, &ldo);
			tile_axpy(o, ldo, a + j0, 1, T, nr, d, ldd, j0, T, hp);
			put_rows(dvt, C3, o, nr, hs, hp);
		}
	}
}
