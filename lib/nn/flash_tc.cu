/*
 * flash_tc.cu - the fused attention of flash.cu on the tensor cores:
 * bf16 and tf32, head sizes a multiple of 16.
 *
 * The same algorithm and the same grid of (b, h) by row tiles, with the
 * products of the tiles on the tensor cores through WMMA, fp32 sums: in
 * bf16 16 x 16 x 16 fragments of bf16 operands, in tf32 16 x 16 x 8
 * fragments of tf32 operands (fp32 in memory, each element rounded by
 * __float_to_tf32 once loaded into its fragment: the tensor core reads
 * only a float's top 19 bits, which would truncate). A block's four warps
 * take 16 rows each (TC_BR = 64 a block) and K/V (or Q/dout) stream
 * through shared memory in the activation type (E: bf16 bits or fp32),
 * TC_BC = 32 a tile. Per tile a warp computes its 16 x 32 scores (and
 * dp) as fragments, stores them to its part of shared memory, and there
 * two lanes a row run the online softmax in fp32 exactly as the scalar
 * kernels do (gk_nn_attn_*); the p (ds) they write are the next
 * product's matrix_a: in bf16 rounded to bf16 into the warp's rows past
 * its scores, in tf32 as floats over the scores themselves (each element
 * written by the lane that read its score), which saves a block 9 KiB of
 * shared memory at width 128 (18 KiB in dk, dv). The output, dq, dk and dv stay fp32 accumulator
 * fragments across the tiles, written once at the end through the same
 * staging rows.
 *
 * WMMA leaves the mapping of a fragment's elements to threads
 * unspecified, and nothing here depends on it: every element a thread
 * reads or writes as a number passes through shared memory
 * (store_matrix_sync, load_matrix_sync), except the forward's rescaling
 * of the output rows by exp(m - m'), which learns each element's row
 * from a fragment loaded from a matrix of row numbers (rowid: element x[i]
 * of every accumulator fragment is at the same position, the guide's
 * elementwise x[i] of two fragments relies on the same), and tf32's
 * rounding of each operand, which is the same for every element.
 *
 * Precision against the scalar path: in bf16 q.k and dout.v are exact
 * products of the bf16 inputs summed in fp32, as there; p (forward, dkv)
 * and ds are rounded to bf16 as the operands of the second products
 * (2^-9 relative each). In tf32 every operand of every product (q, k, v,
 * dout, p, ds) is rounded to nearest at 10 fraction bits (2^-11 relative
 * each), the products of two exact and summed in fp32. The running sums
 * l, the logsumexp and D stay fp32 in both.
 *
 * Shared memory, all of it dynamic (tc_smem): 2 TC_BC rows of HSP + 16
 * bytes of E, and a warp's 16 rows of scores (two in the backward) with
 * bf16's p (ds) past them: at HSP 128 in bf16 32 KiB (forward) to 45 KiB
 * (dk, dv); in tf32 the tiles' rows are twice as wide, 35 KiB (dk, dv) at
 * HSP 64, and at HSP 128 43 KiB (forward) and 51 KiB (dq; dk, dv), past
 * the 48 KiB a block gets without opting in: those launches raise their
 * kernel's cudaFuncAttributeMaxDynamicSharedMemorySize first (tc_allow),
 * which needs the memory to be dynamic (a static __shared__ array past
 * 48 KiB does not compile). So both precisions take head sizes that are
 * a multiple of 16 up to 128 here (gk_nn_flash_tc), in widths 16, 32, 64
 * and 128 (80 to 112 padded with zero columns to 128); the others run
 * flash.cu's scalar kernels.
 */
#include <cuda_bf16.h>
#include <mma.h>

#include "nn/flash.cuh"

#define TC_WARPS 4
#define TC_BR (16 * TC_WARPS) /* rows a block: 16 a warp */
#define TC_BC 32              /* keys (forward, dq) or queries (dkv) a tile */
#define TC_SS (TC_BC + 4)     /* row stride of a warp's fp32 scores (16 bytes) */
#define TC_SP (TC_BC + 8)     /* row stride of a warp's bf16 p (16 bytes) */
static_assert(TC_BR == 2 * TC_BC, "a block's rows are staged in the two tiles' rows");

namespace tcw = nvcuda::wmma;

/*
 * The tensor cores' types for activations of E: K the fragments' depth,
 * the fragments, LD the row stride of the tiles in shared memory (16
 * bytes past HSP: a fragment's first element, at a row that is a
 * multiple of 8 and a column that is a multiple of K, is then 32-byte
 * aligned as WMMA's loads require), the warp's operand rows (p, ds) over
 * its scores S (their stride SP, PX the floats they take past S).
 */
template <typename E> struct tc_ty;
template <> struct tc_ty<uint16_t> { /* bf16 */
	enum { K = 16, PX = 16 * TC_SP / 2, SP = TC_SP };
	typedef __nv_bfloat16 W;
	typedef tcw::fragment<tcw::matrix_a, 16, 16, 16, W, tcw::row_major> a;
	typedef tcw::fragment<tcw::matrix_b, 16, 16, 16, W, tcw::row_major> brow;
	typedef tcw::fragment<tcw::matrix_b, 16, 16, 16, W, tcw::col_major> bcol;
	typedef tcw::fragment<tcw::accumulator, 16, 16, 16, float> acc;
	__device__ static const W *ptr(const uint16_t *p)
	{
		return reinterpret_cast<const W *>(p);
	}
	template <typename F> __device__ static void round(F &) {}
	__device__ static uint16_t *ops(float *S)
	{
		return reinterpret_cast<uint16_t *>(S + 16 * TC_SS);
	}
};
template <> struct tc_ty<float> { /* tf32 */
	enum { K = 8, PX = 0, SP = TC_SS };
	typedef tcw::precision::tf32 W;
	typedef tcw::fragment<tcw::matrix_a, 16, 16, 8, W, tcw::row_major> a;
	typedef tcw::fragment<tcw::matrix_b, 16, 16, 8, W, tcw::row_major> brow;
	typedef tcw::fragment<tcw::matrix_b, 16, 16, 8, W, tcw::col_major> bcol;
	typedef tcw::fragment<tcw::accumulator, 16, 16, 8, float> acc;
	__device__ static const float *ptr(const float *p) { return p; }
	template <typename F> __device__ static void round(F &f)
	{
FL_UNROLL
		for (int i = 0; i < f.num_elements; i++)
			f.x[i] = tcw::__float_to_tf32(f.x[i]);
	}
	__device__ static float *ops(float *S) { return S; }
};

/* an operand's fragment from shared memory, in the tensor core's type */
template <typename E, typename F>
__device__ static inline void tc_ld(F &f, const E *p, int ldm)
{
	tcw::load_matrix_sync(f, tc_ty<E>::ptr(p), ldm);
	tc_ty<E>::round(f);
}

/*
 * A block's shared memory at width HSP, in bytes, carved in this order
 * from the launch's dynamic region (each part a multiple of 32 bytes, so
 * each starts 32-byte aligned as WMMA's pointers must): TILES, 2 TC_BC
 * rows of LD elements (the block's rows of Q, dout, K or V, then a tile
 * of K and V, or of Q and dout); SCORES, each warp's WARP floats (16 rows
 * of scores, bf16's p or ds past them); then the forward's row numbers
 * (256) and rescalings (16 a warp), dq's dp (16 rows a warp), or dk and
 * dv's second SCORES (dp, and bf16's ds past it) and a tile's lse and D.
 */
template <typename E, int HSP> struct tc_smem {
	static constexpr size_t LD = HSP + 16 / sizeof(E), WARP = 16 * TC_SS + tc_ty<E>::PX;
	static constexpr size_t TILES = 2 * TC_BC * LD * sizeof(E);
	static constexpr size_t SCORES = TC_WARPS * WARP * sizeof(float);
	static constexpr size_t FWD = TILES + SCORES + (256 + TC_WARPS * 16) * sizeof(float);
	static constexpr size_t DQ = TILES + SCORES + TC_WARPS * 16 * TC_SS * sizeof(float);
	static constexpr size_t DKV = TILES + 2 * SCORES + 2 * TC_BC * sizeof(float);
	static_assert(TILES % 32 == 0 && SCORES % 32 == 0 && (16 * TC_SS * 4) % 32 == 0,
		      "each part 32-byte aligned");
};

/* the block's dynamic shared memory (tc_smem's layout) */
__device__ static inline unsigned char *tc_shared()
{
	extern __shared__ __align__(32) unsigned char tc_dyn[];
	return tc_dyn;
}

/* rows [r0, r0 + n) of (b, h) at column off of src (B,T,ld) into dst (n
 * rows of HSP + 16 bytes), rows at or past T and head dimensions at or
 * past hs as 0. 16 bytes a load: hs, ld and off are multiples of 16 and
 * src 16-byte aligned (gk_nn_cu_flash_* check it), so a group is all
 * inside hs or all past it. */
template <typename E, int HSP>
__device__ static inline void tc_load(E *dst, int n, const E *src, int b, int r0, int T_,
				      int ld, int off, int h, int hs)
{
	constexpr int V = 16 / sizeof(E), G = HSP / V, LD = HSP + V;
	for (int x = threadIdx.x; x < n * G; x += blockDim.x) {
		int r = x / G, d = x % G * V, t = r0 + r;
		uint4 v = make_uint4(0, 0, 0, 0);
		if (t < T_ && d < hs)
			v = *reinterpret_cast<const uint4 *>(src + fl_at(b, t, T_, ld, off, h, hs) + d);
		*reinterpret_cast<uint4 *>(dst + r * LD + d) = v;
	}
}

/* The warp's two score tiles against TC_BC / 16 tiles of 16 columns:
 * S = a1 b1^T and DP = a2 b2^T (a1, a2 the KF fragments of the head
 * dimension, the b's rows of LD elements in shared memory), each stored
 * row-major in rows of TC_SS: the backward's S and dP (dq), or S^T and
 * dP^T (dk, dv) */
template <typename E, int KF>
__device__ static inline void tc_two_products(float *S, float *DP,
					      const typename tc_ty<E>::a *a1,
					      const typename tc_ty<E>::a *a2, const E *b1,
					      const E *b2, int LD)
{
	typedef tc_ty<E> Y;
FL_UNROLL
	for (int n = 0; n < TC_BC / 16; n++) {
		typename Y::acc s, dp;
		tcw::fill_fragment(s, 0.0f);
		tcw::fill_fragment(dp, 0.0f);
FL_UNROLL
		for (int kk = 0; kk < KF; kk++) {
			typename Y::bcol x, y;
			tc_ld(x, b1 + n * 16 * LD + kk * Y::K, LD);
			tcw::mma_sync(s, a1[kk], x, s);
			tc_ld(y, b2 + n * 16 * LD + kk * Y::K, LD);
			tcw::mma_sync(dp, a2[kk], y, dp);
		}
		tcw::store_matrix_sync(S + n * 16, s, TC_SS, tcw::mem_row_major);
		tcw::store_matrix_sync(DP + n * 16, dp, TC_SS, tcw::mem_row_major);
	}
}

/* acc[c] += a b over a tile: a the TC_BC / K fragments of the warp's
 * operand rows, b the tile's rows (LD elements) at column c * 16 */
template <typename E, int NF>
__device__ static inline void tc_tile_product(typename tc_ty<E>::acc *acc,
					      const typename tc_ty<E>::a *a, const E *b,
					      int LD)
{
	typedef tc_ty<E> Y;
FL_UNROLL
	for (int c = 0; c < NF; c++)
FL_UNROLL
		for (int kk = 0; kk < TC_BC / Y::K; kk++) {
			typename Y::brow x;
			tc_ld(x, b + kk * Y::K * LD + c * 16, LD);
			tcw::mma_sync(acc[c], a[kk], x, acc[c]);
		}
}

/* The warp's 16 rows of f[0..NF) times mul into row t's y[0..hs) (y NULL
 * past T), through S, two fragments (32 columns) at a time: lanes 2r and
 * 2r + 1 write row r, 16 columns each. */
template <typename E, int NF>
__device__ static inline void tc_write(const typename tc_ty<E>::acc *f, float *S, int r,
				       int hf, E *y, int hs, float mul)
{
	__syncwarp(); /* the warp's last reads of S (of p and ds over it, in tf32) done */
	for (int c0 = 0; c0 < NF; c0 += 2) {
		tcw::store_matrix_sync(S, f[c0], TC_SS, tcw::mem_row_major);
		if (c0 + 1 < NF)
			tcw::store_matrix_sync(S + 16, f[c0 + 1], TC_SS, tcw::mem_row_major);
		__syncwarp();
		int c = c0 + hf;
		if (y && c < NF)
			for (int e = 0; e < 16; e++) {
				int d = c * 16 + e;
				if (d < hs)
					y[d] = stf<E>(S[r * TC_SS + hf * 16 + e] * mul);
			}
		__syncwarp(); /* S is read before the next fragments overwrite it */
	}
}

template <typename E, int HSP>
__global__ static void tc_fwd(E *out, float *lse, const E *qkv, int T_, int NH, int hs,
			      float scale)
{
	typedef tc_ty<E> Y;
	constexpr int NF = HSP / 16, KF = HSP / Y::K, LD = HSP + 16 / sizeof(E);
	typedef tc_smem<E, HSP> M;
	/* the block's rows of Q, then a tile of K (rows 0..31) and V */
	E *skv = reinterpret_cast<E *>(tc_shared());
	float *ss = reinterpret_cast<float *>(tc_shared() + M::TILES);
	float *srow = ss + TC_WARPS * M::WARP, *scorr = srow + 256;
	int C = NH * hs, C3 = 3 * C;
	int b = (int)blockIdx.x / NH, h = (int)blockIdx.x % NH;
	int r0 = FL_TILE() * TC_BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int rend = r0 + TC_BR < T_ ? r0 + TC_BR : T_;
	int t0 = r0 + warp * 16; /* the warp's rows: t0 .. t0 + 15 */
	int r = lane / 2, hf = lane % 2, t = t0 + r; /* the row of this lane's softmax */
	const E *sk = skv, *sv = skv + TC_BC * LD;
	float *S = ss + warp * M::WARP;
	auto *P = Y::ops(S);

	tc_load<E, HSP>(skv, TC_BR, qkv, b, r0, T_, C3, 0, h, hs);
	for (int x = threadIdx.x; x < 256; x += blockDim.x)
		srow[x] = (float)(x / 16);
	__syncthreads();
	typename Y::a qa[KF];
	typename Y::acc o[NF], rowid;
FL_UNROLL
	for (int kk = 0; kk < KF; kk++)
		tc_ld(qa[kk], skv + warp * 16 * LD + kk * Y::K, LD);
FL_UNROLL
	for (int c = 0; c < NF; c++)
		tcw::fill_fragment(o[c], 0.0f);
	tcw::load_matrix_sync(rowid, srow, 16, tcw::mem_row_major);
	float m = -INFINITY, l = 0.0f;
	for (int k0 = 0; k0 < rend; k0 += TC_BC) {
		__syncthreads(); /* Q's fragments loaded, the last tile's readers done */
		tc_load<E, HSP>(skv, TC_BC, qkv, b, k0, T_, C3, C, h, hs);
		tc_load<E, HSP>(skv + TC_BC * LD, TC_BC, qkv, b, k0, T_, C3, 2 * C, h, hs);
		__syncthreads();
		if (t0 >= T_ || k0 > t0 + 15) /* the mask hides the tile */
			continue;
		/* S = Q K^T: K's rows are K^T's columns */
FL_UNROLL
		for (int n = 0; n < TC_BC / 16; n++) {
			typename Y::acc s;
			tcw::fill_fragment(s, 0.0f);
FL_UNROLL
			for (int kk = 0; kk < KF; kk++) {
				typename Y::bcol kb;
				tc_ld(kb, sk + n * 16 * LD + kk * Y::K, LD);
				tcw::mma_sync(s, qa[kk], kb, s);
			}
			tcw::store_matrix_sync(S + n * 16, s, TC_SS, tcw::mem_row_major);
		}
		__syncwarp();
		/* the online softmax of row r, keys hf * 16 .. + 15 here */
		float x[16], mx = -INFINITY, sum = 0.0f;
FL_UNROLL
		for (int e = 0; e < 16; e++) {
			int c = hf * 16 + e, vis = k0 + c <= t && t < T_;
			x[e] = vis ? S[r * TC_SS + c] * scale : -INFINITY;
			mx = fmaxf(mx, x[e]);
		}
		mx = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
FL_UNROLL
		for (int e = 0; e < 16; e++) {
			int c = hf * 16 + e, vis = k0 + c <= t && t < T_;
			float p = gk_nn_attn_p(x[e], mx, vis);
			sum += p;
			P[r * Y::SP + c] = stf<E>(p);
		}
		float corr = gk_nn_attn_rescale(m, mx);
		l = l * corr + (sum + __shfl_xor_sync(0xffffffffu, sum, 1));
		m = mx;
		if (!hf)
			scorr[warp * 16 + r] = corr;
		__syncwarp(); /* P and scorr hold the tile's p and rescaling */
FL_UNROLL
		for (int c = 0; c < NF; c++)
FL_UNROLL
			for (int i = 0; i < o[c].num_elements; i++)
				o[c].x[i] *= scorr[warp * 16 + (int)rowid.x[i]];
		typename Y::a pa[TC_BC / Y::K];
FL_UNROLL
		for (int kk = 0; kk < TC_BC / Y::K; kk++)
			tc_ld(pa[kk], P + kk * Y::K, Y::SP);
		tc_tile_product<E, NF>(o, pa, sv, LD);
	}
	/* l > 0 for a row before T: key 0 is visible to every row */
	tc_write<E, NF>(o, S, r, hf, t < T_ ? out + fl_at(b, t, T_, C, 0, h, hs) : NULL, hs,
			1.0f / l);
	if (t < T_ && !hf)
		lse[(size_t)blockIdx.x * T_ + t] = gk_nn_attn_lse(m, l);
}

/* dq, and D = sum_d dout o for each row (into dsum, for tc_bwd_dkv) */
template <typename E, int HSP>
__global__ static void tc_bwd_dq(E *dqkv, float *dsum, const E *dout, const E *qkv,
				 const E *out, const float *lse, int T_, int NH, int hs,
				 float scale)
{
	typedef tc_ty<E> Y;
	constexpr int NF = HSP / 16, KF = HSP / Y::K, LD = HSP + 16 / sizeof(E);
	typedef tc_smem<E, HSP> M;
	E *skv = reinterpret_cast<E *>(tc_shared());
	float *ss = reinterpret_cast<float *>(tc_shared() + M::TILES);
	float *sdp = ss + TC_WARPS * M::WARP;
	int C = NH * hs, C3 = 3 * C;
	int b = (int)blockIdx.x / NH, h = (int)blockIdx.x % NH;
	int r0 = FL_TILE() * TC_BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int rend = r0 + TC_BR < T_ ? r0 + TC_BR : T_;
	int t0 = r0 + warp * 16;
	int r = lane / 2, hf = lane % 2, t = t0 + r;
	const E *sk = skv, *sv = skv + TC_BC * LD;
	float *S = ss + warp * M::WARP, *DP = sdp + warp * 16 * TC_SS;
	auto *DS = Y::ops(S);

	typename Y::a qa[KF], da[KF];
	typename Y::acc dq[NF];
	tc_load<E, HSP>(skv, TC_BR, qkv, b, r0, T_, C3, 0, h, hs);
	__syncthreads();
FL_UNROLL
	for (int kk = 0; kk < KF; kk++)
		tc_ld(qa[kk], skv + warp * 16 * LD + kk * Y::K, LD);
	__syncthreads();
	tc_load<E, HSP>(skv, TC_BR, dout, b, r0, T_, C, 0, h, hs);
	__syncthreads();
FL_UNROLL
	for (int kk = 0; kk < KF; kk++)
		tc_ld(da[kk], skv + warp * 16 * LD + kk * Y::K, LD);
FL_UNROLL
	for (int c = 0; c < NF; c++)
		tcw::fill_fragment(dq[c], 0.0f);
	/* D of row r, hf of its head dimensions a lane */
	float D = 0.0f, L = 0.0f;
	if (t < T_) {
		size_t at = fl_at(b, t, T_, C, 0, h, hs);
		for (int d = hf; d < hs; d += 2)
			D += ldf(dout[at + d]) * ldf(out[at + d]);
		L = lse[(size_t)blockIdx.x * T_ + t];
	}
	D += __shfl_xor_sync(0xffffffffu, D, 1);
	if (t < T_ && !hf)
		dsum[(size_t)blockIdx.x * T_ + t] = D;
	for (int k0 = 0; k0 < rend; k0 += TC_BC) {
		__syncthreads(); /* dout's fragments loaded, the last tile's readers done */
		tc_load<E, HSP>(skv, TC_BC, qkv, b, k0, T_, C3, C, h, hs);
		tc_load<E, HSP>(skv + TC_BC * LD, TC_BC, qkv, b, k0, T_, C3, 2 * C, h, hs);
		__syncthreads();
		if (t0 >= T_ || k0 > t0 + 15)
			continue;
		/* S = Q K^T, dP = dout V^T */
		tc_two_products<E, KF>(S, DP, qa, da, sk, sv, LD);
		__syncwarp();
FL_UNROLL
		for (int e = 0; e < 16; e++) {
			int c = hf * 16 + e;
			float ds = 0.0f;
			if (k0 + c <= t && t < T_) {
				float p = gk_nn_attn_p(S[r * TC_SS + c] * scale, L, 1);
				ds = gk_nn_softmax_dpre(p, DP[r * TC_SS + c], D, scale);
			}
			DS[r * Y::SP + c] = stf<E>(ds);
		}
		__syncwarp(); /* DS holds the tile's ds */
		typename Y::a dsa[TC_BC / Y::K];
FL_UNROLL
		for (int kk = 0; kk < TC_BC / Y::K; kk++)
			tc_ld(dsa[kk], DS + kk * Y::K, Y::SP);
		/* dq += dS K */
		tc_tile_product<E, NF>(dq, dsa, sk, LD);
	}
	tc_write<E, NF>(dq, S, r, hf, t < T_ ? dqkv + fl_at(b, t, T_, C3, 0, h, hs) : NULL,
			hs, 1.0f);
}

/* dk and dv: a block of TC_BR key rows (16 a warp, lane pair r on key
 * j0 + r), the query rows i >= its first key streamed through shared
 * memory with their lse and D; the products transposed (S^T = K Q^T). */
template <typename E, int HSP>
__global__ static void tc_bwd_dkv(E *dqkv, const float *dsum, const E *dout, const E *qkv,
				  const float *lse, int T_, int NH, int hs, float scale)
{
	typedef tc_ty<E> Y;
	constexpr int NF = HSP / 16, KF = HSP / Y::K, LD = HSP + 16 / sizeof(E);
	/* the block's rows of K, then of V; then a tile of Q (rows 0..31)
	 * and of dout */
	typedef tc_smem<E, HSP> M;
	E *sqd = reinterpret_cast<E *>(tc_shared());
	float *ss = reinterpret_cast<float *>(tc_shared() + M::TILES);
	float *sdp = ss + TC_WARPS * M::WARP, *sl = sdp + TC_WARPS * M::WARP, *sd = sl + TC_BC;
	int C = NH * hs, C3 = 3 * C;
	int b = (int)blockIdx.x / NH, h = (int)blockIdx.x % NH;
	int c0 = FL_TILE() * TC_BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int j0 = c0 + warp * 16; /* the warp's keys: j0 .. j0 + 15 */
	int r = lane / 2, hf = lane % 2, j = j0 + r;
	const float *L = lse + (size_t)blockIdx.x * T_;
	const float *Dr = dsum + (size_t)blockIdx.x * T_;
	const E *sq = sqd, *sdo = sqd + TC_BC * LD;
	float *S = ss + warp * M::WARP, *DP = sdp + warp * M::WARP;
	auto *P = Y::ops(S), *DS = Y::ops(DP);

	typename Y::a ka[KF], va[KF];
	typename Y::acc dk[NF], dv[NF];
	tc_load<E, HSP>(sqd, TC_BR, qkv, b, c0, T_, C3, C, h, hs);
	__syncthreads();
FL_UNROLL
	for (int kk = 0; kk < KF; kk++)
		tc_ld(ka[kk], sqd + warp * 16 * LD + kk * Y::K, LD);
	__syncthreads();
	tc_load<E, HSP>(sqd, TC_BR, qkv, b, c0, T_, C3, 2 * C, h, hs);
	__syncthreads();
FL_UNROLL
	for (int kk = 0; kk < KF; kk++)
		tc_ld(va[kk], sqd + warp * 16 * LD + kk * Y::K, LD);
FL_UNROLL
	for (int c = 0; c < NF; c++) {
		tcw::fill_fragment(dk[c], 0.0f);
		tcw::fill_fragment(dv[c], 0.0f);
	}
	for (int q0 = c0 / TC_BC * TC_BC; q0 < T_; q0 += TC_BC) {
		__syncthreads(); /* V's fragments loaded, the last tile's readers done */
		tc_load<E, HSP>(sqd, TC_BC, qkv, b, q0, T_, C3, 0, h, hs);
		tc_load<E, HSP>(sqd + TC_BC * LD, TC_BC, dout, b, q0, T_, C, 0, h, hs);
		if ((int)threadIdx.x < TC_BC) {
			int i = q0 + threadIdx.x;
			sl[threadIdx.x] = i < T_ ? L[i] : 0.0f;
			sd[threadIdx.x] = i < T_ ? Dr[i] : 0.0f;
		}
		__syncthreads();
		if (j0 >= T_ || q0 + TC_BC - 1 < j0) /* no query of the tile sees them */
			continue;
		/* S^T = K Q^T, dP^T = V dout^T */
		tc_two_products<E, KF>(S, DP, ka, va, sq, sdo, LD);
		__syncwarp();
FL_UNROLL
		for (int e = 0; e < 16; e++) {
			int c = hf * 16 + e, i = q0 + c;
			float p = 0.0f, ds = 0.0f;
			if (i < T_ && i >= j && j < T_) {
				p = gk_nn_attn_p(S[r * TC_SS + c] * scale, sl[c], 1);
				ds = gk_nn_softmax_dpre(p, DP[r * TC_SS + c], sd[c], scale);
			}
			P[r * Y::SP + c] = stf<E>(p);
			DS[r * Y::SP + c] = stf<E>(ds);
		}
		__syncwarp(); /* P and DS hold the tile's p and ds */
		typename Y::a pa[TC_BC / Y::K], dsa[TC_BC / Y::K];
FL_UNROLL
		for (int kk = 0; kk < TC_BC / Y::K; kk++) {
			tc_ld(pa[kk], P + kk * Y::K, Y::SP);
			tc_ld(dsa[kk], DS + kk * Y::K, Y::SP);
		}
		/* dv += P^T dout, dk += dS^T Q */
FL_UNROLL
		for (int c = 0; c < NF; c++)
FL_UNROLL
			for (int kk = 0; kk < TC_BC / Y::K; kk++) {
				typename Y::brow ob, qb;
				tc_ld(ob, sdo + kk * Y::K * LD + c * 16, LD);
				tcw::mma_sync(dv[c], pa[kk], ob, dv[c]);
				tc_ld(qb, sq + kk * Y::K * LD + c * 16, LD);
				tcw::mma_sync(dk[c], dsa[kk], qb, dk[c]);
			}
	}
	tc_write<E, NF>(dk, S, r, hf, j < T_ ? dqkv + fl_at(b, j, T_, C3, C, h, hs) : NULL, hs,
			1.0f);
	tc_write<E, NF>(dv, S, r, hf, j < T_ ? dqkv + fl_at(b, j, T_, C3, 2 * C, h, hs) : NULL,
			hs, 1.0f);
}

/*
 * Before a launch of kernel k with bytes of dynamic shared memory: past
 * the 48 KiB a block gets by default (tf32's backward at width 128), the
 * kernel's maximum raised to bytes. Before every such launch: one host
 * call beside kernels that take far longer, and the attribute is the
 * device's (a flag kept here would have to be one per device). -1 with
 * what failed in err.
 */
template <typename K>
static int tc_allow(K *k, size_t bytes, const char *what, gk_err *err)
{
	if (bytes <= 48 << 10)
		return 0;
	return gk_cuda_check_at(GK_CUDA_API_RUNTIME,
				(int)cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
							  (int)bytes),
				what, __FILE__, __LINE__, err);
}

/* the tensor cores' kernels for activations of E */
template <typename E>
static int tc_run_fwd(void *out, float *lse, const void *qkv, int B, int T_, int NH, int hs,
		      float scale, gk_cuda_stream s, gk_err *err)
{
	const char *what = "fused attention (tensor cores)";
	WITH_HSP(16, hs,
		 if (tc_allow(tc_fwd<E, HSP>, tc_smem<E, HSP>::FWD, what, err) < 0)
			 return -1;
		 tc_fwd<E, HSP><<<fl_grid(B, T_, NH, TC_BR), 32 * TC_WARPS, tc_smem<E, HSP>::FWD,
				  s>>>((E *)out, lse, (const E *)qkv, T_, NH, hs, scale));
	return GK_CUDA_LAUNCHED(what, err);
}

template <typename E>
static int tc_run_bwd(void *dqkv, float *dsum, const void *dout, const void *qkv,
		      const void *out, const float *lse, int B, int T_, int NH, int hs,
		      float scale, gk_cuda_stream s, gk_err *err)
{
	const char *wq = "fused attention backward (dq, tensor cores)";
	const char *wkv = "fused attention backward (dk, dv, tensor cores)";
	WITH_HSP(16, hs,
		 if (tc_allow(tc_bwd_dq<E, HSP>, tc_smem<E, HSP>::DQ, wq, err) < 0)
			 return -1;
		 tc_bwd_dq<E, HSP><<<fl_grid(B, T_, NH, TC_BR), 32 * TC_WARPS,
				     tc_smem<E, HSP>::DQ, s>>>(
			 (E *)dqkv, dsum, (const E *)dout, (const E *)qkv, (const E *)out, lse,
			 T_, NH, hs, scale));
	if (GK_CUDA_LAUNCHED(wq, err) < 0)
		return -1;
	WITH_HSP(16, hs,
		 if (tc_allow(tc_bwd_dkv<E, HSP>, tc_smem<E, HSP>::DKV, wkv, err) < 0)
			 return -1;
		 tc_bwd_dkv<E, HSP><<<fl_grid(B, T_, NH, TC_BR), 32 * TC_WARPS,
				      tc_smem<E, HSP>::DKV, s>>>(
			 (E *)dqkv, dsum, (const E *)dout, (const E *)qkv, lse, T_, NH, hs,
			 scale));
	return GK_CUDA_LAUNCHED(wkv, err);
}

int gk_nn_cu_flash_tc_fwd(void *out, float *lse, const void *qkv, int prec, int B, int T_,
			  int NH, int hs, float scale, gk_cuda_stream s, gk_err *err)
{
	return prec == GK_NN_BF16
		       ? tc_run_fwd<uint16_t>(out, lse, qkv, B, T_, NH, hs, scale, s, err)
		       : tc_run_fwd<float>(out, lse, qkv, B, T_, NH, hs, scale, s, err);
}

int gk_nn_cu_flash_tc_bwd(void *dqkv, float *dsum, const void *dout, const void *qkv,
			  const void *out, const float *lse, int prec, int B, int T_, int NH,
			  int hs, float scale, gk_cuda_stream s, gk_err *err)
{
	return prec == GK_NN_BF16
		       ? tc_run_bwd<uint16_t>(dqkv, dsum, dout, qkv, out, lse, B, T_, NH, hs,
					      scale, s, err)
		       : tc_run_bwd<float>(dqkv, dsum, dout, qkv, out, lse, B, T_, NH, hs, scale,
					   s, err);
}
