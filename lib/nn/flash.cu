/*
 * flash.cu - causal self-attention fused into tiles (FlashAttention-2's
 * algorithm), so no (T,T) matrix is ever in memory: the forward keeps
 * only each row's logsumexp, the backward recomputes the probabilities
 * from it. q, k and v are read where the QKV matmul left them (B,T,3C),
 * the output written as the projection reads it (B,T,C), and the
 * gradients into dqkv (B,T,3C): no head shuffles either.
 *
 * Forward, per (b, h), a block of BR query rows: Q's rows stay in shared
 * memory, K and V stream through it 32 keys a tile (the tiles the causal
 * mask leaves something of), and each row keeps the online softmax's
 * running maximum, sum and output (math.h, gk_nn_attn_*). A warp takes
 * RW rows together: lane j scores key j of the tile against each of them
 * (one read of k_j from shared memory for RW products), the warp's
 * maximum and sum update each row, and then each lane adds the tile's
 * p v to the head dimensions it owns (d = lane, lane + 32, ...), one
 * read of v for RW rows, the 32 p of a row read from the warp's rows of
 * shared memory. The backward kernels are cut the same way.
 *
 * Backward (per row i, lse its logsumexp, D = sum_d dout o):
 *   p_ij = exp(scale q_i.k_j - lse_i)     dp_ij = dout_i.v_j
 *   ds_ij = p_ij (dp_ij - D_i) scale      (gk_nn_softmax_dpre)
 *   dq_i = sum_j ds_ij k_j   dk_j = sum_i ds_ij q_i   dv_j = sum_i p_ij dout_i
 * in two kernels, each output summed by one thread in a fixed order so a
 * run repeats bit for bit (FlashAttention-2 adds dq with atomics, whose
 * order is the scheduler's): bwd_dq over query rows (streaming K and V;
 * it also stores D), then bwd_dkv over key rows (streaming Q, dout,
 * lse and D). That computes the scores and dp twice, 7 products of a
 * head's size where the atomic version does 5.
 *
 * Precision: inputs and outputs in the activation type (bf16 or fp32),
 * everything in between (scores, p, the sums, lse, D) in fp32; the
 * probabilities are never rounded to bf16 as the matmul path's att is.
 * Head sizes 1 to GK_NN_FLASH_MAX_HS, in three compiled widths (32, 64,
 * 128: the head dimensions a lane owns are registers); others are refused.
 * These kernels' products are the CUDA cores' fp32 FMAs; in bf16 and in
 * tf32 at head sizes that are a multiple of 16 (16 to 128), the tensor
 * cores' kernels of flash_tc.cu run instead (gk_nn_flash_tc says which):
 * tf32 is the precision whose matmuls are cuBLASLt's TF32, and its
 * attention rounds its operands the same way; fp32 stays here, with no
 * tensor core's rounding.
 *
 * references: Dao, "FlashAttention-2: Faster Attention with Better
 * Parallelism and Work Partitioning", 2023, Algorithms 1 and 2; llm.c's
 * dev/cuda/attention_forward.cu (the tiles of its simple flash kernel);
 * the CUDA C++ Programming Guide, "Warp Matrix Functions" (the fragments,
 * precision::tf32 and __float_to_tf32), and the PTX ISA's cvt.rna.tf32.f32.
 */
#include "nn/flash.cuh"

#define FL_WARPS 4  /* warps a block */
#define FL_BC 32    /* keys (forward, dq) or queries (dkv) a tile: a lane each */

/*
 * The compiled widths: HSP >= hs, a multiple of 32. NJ head dimensions a
 * lane owns; HSP + 1 the row stride in shared memory (odd: lane j reading row
 * j's element d hits bank (j + d) % 32, no conflicts); RW rows a warp
 * takes together, so a block's tile of K and V serves BR = 4 RW rows.
 * Shared memory stays under the 48 KiB a block gets without opting in:
 * at HSP 128 the forward holds 16 + 2 x 32 rows of 129 floats and the
 * p of 16 rows (42 KiB), the backward 8 + 2 x 32 (or 2 x 8 + 2 x 32)
 * rows and the p (and ds) of 8 (43 KiB); 41 KiB at most at HSP 64.
 */
template <int HSP> struct fl_shape {
	static constexpr int NJ = HSP / 32;
	static constexpr int RW_FWD = HSP <= 64 ? 8 : 4;
	static constexpr int RW_BWD = HSP <= 64 ? 8 : 2;
};

/*
 * rows [r0, r0 + n) of (b, h) at column off of src (B,T,ld) into dst
 * (n rows of HSP + 1 floats): rows at or past T and head dimensions at
 * or past hs as 0 (a product over them adds nothing, and p = 0 times
 * them is 0, not a NaN of shared memory's garbage).
 */
template <typename T, int HSP>
__device__ static inline void fl_load(float (*dst)[HSP + 1], int n,
				      const T *src, int b, int r0, int T_,
				      int ld, int off, int h, int hs)
{
	for (int x = threadIdx.x; x < n * HSP; x += blockDim.x) {
		int r = x / HSP, d = x % HSP, t = r0 + r;
		dst[r][d] = t < T_ && d < hs
				    ? ldf(src[fl_at(b, t, T_, ld, off, h, hs) + d])
				    : 0.0f;
	}
}

template <typename T, int HSP>
__global__ static void flash_fwd(T *out, float *lse, const T *qkv, int T_,
				 int NH, int hs, float scale)
{
	typedef fl_shape<HSP> S;
	constexpr int RW = S::RW_FWD, BR = FL_WARPS * RW, NJ = S::NJ;
	__shared__ float sq[BR][HSP + 1], sk[FL_BC][HSP + 1];
	__shared__ float sv[FL_BC][HSP + 1], sp[FL_WARPS][RW][FL_BC];
	int C = NH * hs, C3 = 3 * C;
	int b = (int)blockIdx.x / NH, h = (int)blockIdx.x % NH;
	int r0 = FL_TILE() * BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int rend = r0 + BR < T_ ? r0 + BR : T_;
	int t0 = r0 + warp * RW; /* the warp's rows: t0 .. t0 + RW - 1 */

	fl_load<T, HSP>(sq, BR, qkv, b, r0, T_, C3, 0, h, hs);
	float m[RW], l[RW], o[RW][NJ];
FL_UNROLL
	for (int rr = 0; rr < RW; rr++) {
		m[rr] = -INFINITY;
		l[rr] = 0.0f;
FL_UNROLL
		for (int c = 0; c < NJ; c++)
			o[rr][c] = 0.0f;
	}
	for (int k0 = 0; k0 < rend; k0 += FL_BC) {
		__syncthreads(); /* the last tile's readers are done */
		fl_load<T, HSP>(sk, FL_BC, qkv, b, k0, T_, C3, C, h, hs);
		fl_load<T, HSP>(sv, FL_BC, qkv, b, k0, T_, C3, 2 * C, h, hs);
		__syncthreads();
		if (t0 >= T_ || k0 > t0 + RW - 1) /* the mask hides the tile */
			continue;
		/* lane j's key against each of the warp's rows: one read
		 * of k for RW products */
		int j = k0 + lane;
		float sc[RW], corr[RW];
FL_UNROLL
		for (int rr = 0; rr < RW; rr++)
			sc[rr] = 0.0f;
		for (int d = 0; d < hs; d++) {
			float kd = sk[lane][d];
FL_UNROLL
			for (int rr = 0; rr < RW; rr++)
				sc[rr] += sq[warp * RW + rr][d] * kd;
		}
FL_UNROLL
		for (int rr = 0; rr < RW; rr++) {
			int t = t0 + rr, vis = j <= t && t < T_;
			float x = vis ? sc[rr] * scale : -INFINITY;
			/* -inf only while no key of the row was visible:
			 * then p = 0 and corr = 0 */
			float mx = fmaxf(m[rr], warp_max(x));
			float p = gk_nn_attn_p(x, mx, vis);
			corr[rr] = gk_nn_attn_rescale(m[rr], mx);
			l[rr] = l[rr] * corr[rr] + warp_sum(p);
			m[rr] = mx;
			sp[warp][rr][lane] = p;
		}
		__syncwarp(); /* sp holds every p of the tile */
FL_UNROLL
		for (int c = 0; c < NJ; c++) {
			int d = c * 32 + lane;
			float acc[RW];
FL_UNROLL
			for (int rr = 0; rr < RW; rr++)
				acc[rr] = o[rr][c] * corr[rr];
			if (d < hs)
				for (int jj = 0; jj < FL_BC; jj++) {
					float vd = sv[jj][d];
FL_UNROLL
					for (int rr = 0; rr < RW; rr++)
						acc[rr] += sp[warp][rr][jj] * vd;
				}
FL_UNROLL
			for (int rr = 0; rr < RW; rr++)
				o[rr][c] = acc[rr];
		}
		__syncwarp(); /* sp is read before the next tile writes it */
	}
FL_UNROLL
	for (int rr = 0; rr < RW; rr++) {
		int t = t0 + rr;
		if (t >= T_)
			continue;
		float inv = 1.0f / l[rr]; /* > 0: key 0 is visible to every row */
		T *y = out + fl_at(b, t, T_, C, 0, h, hs);
FL_UNROLL
		for (int c = 0; c < NJ; c++) {
			int d = c * 32 + lane;
			if (d < hs)
				y[d] = stf<T>(o[rr][c] * inv);
		}
		if (lane == 0)
			lse[(size_t)blockIdx.x * T_ + t] = gk_nn_attn_lse(m[rr], l[rr]);
	}
}

/* dq, and D = sum_d dout o for each row (into dsum, for bwd_dkv). */
template <typename T, int HSP>
__global__ static void flash_bwd_dq(T *dqkv, float *dsum, const T *dout,
				    const T *qkv, const T *out,
				    const float *lse, int T_, int NH, int hs,
				    float scale)
{
	typedef fl_shape<HSP> S;
	constexpr int RW = S::RW_BWD, BR = FL_WARPS * RW, NJ = S::NJ;
	__shared__ float sq[BR][HSP + 1], sdo[BR][HSP + 1];
	__shared__ float sk[FL_BC][HSP + 1], sv[FL_BC][HSP + 1];
	__shared__ float sp[FL_WARPS][RW][FL_BC];
	int C = NH * hs, C3 = 3 * C;
	int b = (int)blockIdx.x / NH, h = (int)blockIdx.x % NH;
	int r0 = FL_TILE() * BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int rend = r0 + BR < T_ ? r0 + BR : T_;
	int t0 = r0 + warp * RW;
	const float *L = lse + (size_t)blockIdx.x * T_;

	fl_load<T, HSP>(sq, BR, qkv, b, r0, T_, C3, 0, h, hs);
	fl_load<T, HSP>(sdo, BR, dout, b, r0, T_, C, 0, h, hs);
	__syncthreads();
	float D[RW], Lr[RW], dq[RW][NJ];
FL_UNROLL
	for (int rr = 0; rr < RW; rr++) {
		int r = warp * RW + rr, t = t0 + rr;
		float x = 0.0f;
FL_UNROLL
		for (int c = 0; c < NJ; c++) {
			int d = c * 32 + lane;
			dq[rr][c] = 0.0f;
			if (t < T_ && d < hs)
				x += sdo[r][d] * ldf(out[fl_at(b, t, T_, C, 0, h, hs) + d]);
		}
		D[rr] = warp_sum(x);
		Lr[rr] = t < T_ ? L[t] : 0.0f;
		if (t < T_ && lane == 0)
			dsum[(size_t)blockIdx.x * T_ + t] = D[rr];
	}
	for (int k0 = 0; k0 < rend; k0 += FL_BC) {
		__syncthreads();
		fl_load<T, HSP>(sk, FL_BC, qkv, b, k0, T_, C3, C, h, hs);
		fl_load<T, HSP>(sv, FL_BC, qkv, b, k0, T_, C3, 2 * C, h, hs);
		__syncthreads();
		if (t0 >= T_ || k0 > t0 + RW - 1)
			continue;
		int j = k0 + lane;
		float sc[RW], dp[RW];
FL_UNROLL
		for (int rr = 0; rr < RW; rr++)
			sc[rr] = dp[rr] = 0.0f;
		for (int d = 0; d < hs; d++) {
			float kd = sk[lane][d], vd = sv[lane][d];
FL_UNROLL
			for (int rr = 0; rr < RW; rr++) {
				sc[rr] += sq[warp * RW + rr][d] * kd;
				dp[rr] += sdo[warp * RW + rr][d] * vd;
			}
		}
FL_UNROLL
		for (int rr = 0; rr < RW; rr++) {
			int t = t0 + rr;
			float ds = 0.0f;
			if (j <= t && t < T_) {
				float p = gk_nn_attn_p(sc[rr] * scale, Lr[rr], 1);
				ds = gk_nn_softmax_dpre(p, dp[rr], D[rr], scale);
			}
			sp[warp][rr][lane] = ds;
		}
		__syncwarp(); /* sp holds every ds of the tile */
FL_UNROLL
		for (int c = 0; c < NJ; c++) {
			int d = c * 32 + lane;
			if (d < hs)
				for (int jj = 0; jj < FL_BC; jj++) {
					float kd = sk[jj][d];
FL_UNROLL
					for (int rr = 0; rr < RW; rr++)
						dq[rr][c] += sp[warp][rr][jj] * kd;
				}
		}
		__syncwarp();
	}
FL_UNROLL
	for (int rr = 0; rr < RW; rr++) {
		int t = t0 + rr;
		if (t >= T_)
			continue;
		T *y = dqkv + fl_at(b, t, T_, C3, 0, h, hs);
FL_UNROLL
		for (int c = 0; c < NJ; c++) {
			int d = c * 32 + lane;
			if (d < hs)
				y[d] = stf<T>(dq[rr][c]);
		}
	}
}

/* dk and dv: a block of BR key rows, the query rows i >= its first key
 * streamed through shared memory with their lse and D. */
template <typename T, int HSP>
__global__ static void flash_bwd_dkv(T *dqkv, const float *dsum,
				     const T *dout, const T *qkv,
				     const float *lse, int T_, int NH, int hs,
				     float scale)
{
	typedef fl_shape<HSP> S;
	constexpr int RW = S::RW_BWD, BR = FL_WARPS * RW, NJ = S::NJ;
	__shared__ float sk[BR][HSP + 1], sv[BR][HSP + 1];
	__shared__ float sq[FL_BC][HSP + 1], sdo[FL_BC][HSP + 1];
	__shared__ float sl[FL_BC], sd[FL_BC];
	__shared__ float sp[FL_WARPS][RW][FL_BC], sds[FL_WARPS][RW][FL_BC];
	int C = NH * hs, C3 = 3 * C;
	int b = (int)blockIdx.x / NH, h = (int)blockIdx.x % NH;
	int c0 = FL_TILE() * BR, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int j0 = c0 + warp * RW; /* the warp's keys: j0 .. j0 + RW - 1 */
	const float *L = lse + (size_t)blockIdx.x * T_;
	const float *Dr = dsum + (size_t)blockIdx.x * T_;

	fl_load<T, HSP>(sk, BR, qkv, b, c0, T_, C3, C, h, hs);
	fl_load<T, HSP>(sv, BR, qkv, b, c0, T_, C3, 2 * C, h, hs);
	float dk[RW][NJ], dv[RW][NJ];
FL_UNROLL
	for (int rr = 0; rr < RW; rr++)
FL_UNROLL
		for (int c = 0; c < NJ; c++)
			dk[rr][c] = dv[rr][c] = 0.0f;
	for (int q0 = c0 / FL_BC * FL_BC; q0 < T_; q0 += FL_BC) {
		__syncthreads();
		fl_load<T, HSP>(sq, FL_BC, qkv, b, q0, T_, C3, 0, h, hs);
		fl_load<T, HSP>(sdo, FL_BC, dout, b, q0, T_, C, 0, h, hs);
		if ((int)threadIdx.x < FL_BC) {
			int i = q0 + threadIdx.x;
			sl[threadIdx.x] = i < T_ ? L[i] : 0.0f;
			sd[threadIdx.x] = i < T_ ? Dr[i] : 0.0f;
		}
		__syncthreads();
		if (j0 >= T_ || q0 + FL_BC - 1 < j0) /* no query of the tile sees them */
			continue;
		int i = q0 + lane;
		float sc[RW], dp[RW];
FL_UNROLL
		for (int rr = 0; rr < RW; rr++)
			sc[rr] = dp[rr] = 0.0f;
		for (int d = 0; d < hs; d++) {
			float qd = sq[lane][d], dod = sdo[lane][d];
FL_UNROLL
			for (int rr = 0; rr < RW; rr++) {
				sc[rr] += qd * sk[warp * RW + rr][d];
				dp[rr] += dod * sv[warp * RW + rr][d];
			}
		}
FL_UNROLL
		for (int rr = 0; rr < RW; rr++) {
			int j = j0 + rr;
			float p = 0.0f, ds = 0.0f;
			if (i < T_ && i >= j && j < T_) {
				p = gk_nn_attn_p(sc[rr] * scale, sl[lane], 1);
				ds = gk_nn_softmax_dpre(p, dp[rr], sd[lane], scale);
			}
			sp[warp][rr][lane] = p;
			sds[warp][rr][lane] = ds;
		}
		__syncwarp(); /* sp and sds hold the tile's p and ds */
FL_UNROLL
		for (int c = 0; c < NJ; c++) {
			int d = c * 32 + lane;
			if (d >= hs)
				continue;
			for (int ii = 0; ii < FL_BC; ii++) {
				float qd = sq[ii][d], dod = sdo[ii][d];
FL_UNROLL
				for (int rr = 0; rr < RW; rr++) {
					dv[rr][c] += sp[warp][rr][ii] * dod;
					dk[rr][c] += sds[warp][rr][ii] * qd;
				}
			}
		}
		__syncwarp();
	}
FL_UNROLL
	for (int rr = 0; rr < RW; rr++) {
		int j = j0 + rr;
		if (j >= T_)
			continue;
		T *yk = dqkv + fl_at(b, j, T_, C3, C, h, hs);
		T *yv = dqkv + fl_at(b, j, T_, C3, 2 * C, h, hs);
FL_UNROLL
		for (int c = 0; c < NJ; c++) {
			int d = c * 32 + lane;
			if (d < hs) {
				yk[d] = stf<T>(dk[rr][c]);
				yv[d] = stf<T>(dv[rr][c]);
			}
		}
	}
}

/* 16-byte aligned, for the tensor cores' kernels' loads (cudaMalloc's
 * 256 bytes, and the model's buffers, are; a tensor that is not runs the
 * scalar kernels) */
static int fl_aligned(const void *p)
{
	return (uintptr_t)p % 16 == 0;
}

static int fl_check(const char *what, int B, int T_, int NH, int hs,
		    gk_err *err)
{
	if (!gk_nn_flash_fits(hs))
		return gk_errf(err, "%s: head size %d: the kernels take 1 "
			       "to %d (GK_CUDA_ATTENTION=matmul runs the "
			       "matmul path)", what, hs, GK_NN_FLASH_MAX_HS);
	if (B < 1 || T_ < 1 || NH < 1 || (int64_t)B * NH > INT32_MAX ||
	    (T_ + FL_WARPS - 1) / FL_WARPS > 65535)
		return gk_errf(err, "%s: batch %d, sequence %d, heads %d: "
			       "outside the kernel's grid", what, B, T_, NH);
	return 0;
}

extern "C" int gk_nn_cu_flash_fwd(void *out, float *lse, const void *qkv,
				  int prec, int B, int T_, int NH, int hs,
				  gk_cuda_stream s, gk_err *err)
{
	if (fl_check("fused attention", B, T_, NH, hs, err) < 0)
		return -1;
	gk_dtype dt = prec == GK_NN_BF16 ? GK_DT_BF16 : GK_DT_F32;
	float scale = 1.0f / sqrtf((float)hs);
	if (gk_nn_flash_tc(prec, hs) && fl_aligned(qkv))
		return gk_nn_cu_flash_tc_fwd(out, lse, qkv, prec, B, T_, NH, hs, scale, s, err);
	WITH_T(dt, WITH_HSP(32, hs,
		flash_fwd<T, HSP><<<fl_grid(B, T_, NH, FL_WARPS * fl_shape<HSP>::RW_FWD),
				    32 * FL_WARPS, 0, s>>>(
			(T *)out, lse, (const T *)qkv, T_, NH, hs, scale)));
	return GK_CUDA_LAUNCHED("fused attention", err);
}

extern "C" int gk_nn_cu_flash_bwd(void *dqkv, float *dsum, const void *dout,
				  const void *qkv, const void *out,
				  const float *lse, int prec, int B, int T_,
				  int NH, int hs, gk_cuda_stream s,
				  gk_err *err)
{
	if (fl_check("fused attention backward", B, T_, NH, hs, err) < 0)
		return -1;
	gk_dtype dt = prec == GK_NN_BF16 ? GK_DT_BF16 : GK_DT_F32;
	float scale = 1.0f / sqrtf((float)hs);
	if (gk_nn_flash_tc(prec, hs) && fl_aligned(qkv) && fl_aligned(dout) && fl_aligned(out))
		return gk_nn_cu_flash_tc_bwd(dqkv, dsum, dout, qkv, out, lse, prec, B, T_, NH, hs,
					     scale, s, err);
	WITH_T(dt, WITH_HSP(32, hs,
		flash_bwd_dq<T, HSP><<<fl_grid(B, T_, NH, FL_WARPS * fl_shape<HSP>::RW_BWD),
				       32 * FL_WARPS, 0, s>>>(
			(T *)dqkv, dsum, (const T *)dout, (const T *)qkv,
			(const T *)out, lse, T_, NH, hs, scale)));
	if (GK_CUDA_LAUNCHED("fused attention backward (dq)", err) < 0)
		return -1;
	WITH_T(dt, WITH_HSP(32, hs,
		flash_bwd_dkv<T, HSP><<<fl_grid(B, T_, NH, FL_WARPS * fl_shape<HSP>::RW_BWD),
					32 * FL_WARPS, 0, s>>>(
			(T *)dqkv, dsum, (const T *)dout, (const T *)qkv, lse,
			T_, NH, hs, scale)));
	return GK_CUDA_LAUNCHED("fused attention backward (dk, dv)", err);
}
