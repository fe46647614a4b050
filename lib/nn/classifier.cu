/*
 * classifier.cu - the fused classifier: softmax, cross-entropy and
 * dlogits without ever storing the probabilities. A training step runs
 * xent_fused: one kernel per step that takes each row's logsumexp and
 * loss in one pass (online softmax, gk_nn_msum in nn/math.h) and then
 * overwrites the row in place with its dlogits, gk_nn_xent_grad (the
 * CPU's function) scaled by dloss. Evaluation runs xent_fwd, the same
 * first pass alone, and xent_bwd is the second pass alone, for a
 * backward after an evaluation forward. All read and write 16 bytes at a
 * time where the rows allow. One block per row, states merged in a fixed
 * tree, so the loss is the same bits every run and in every kernel.
 *
 * reference: llm.c llmc/fused_classifier.cuh.
 */
#include "nn/kernels.cuh"

#define XENT_THREADS 256

/* 16 bytes of a row at a time where its rows allow (xent_vec): 4 floats
 * or 8 bf16 a load, as llm.c's x128 */
__device__ __forceinline__ void ld16(float *v, const float *p)
{
	float4 q = *(const float4 *)p;
	v[0] = q.x;
	v[1] = q.y;
	v[2] = q.z;
	v[3] = q.w;
}
__device__ __forceinline__ void ld16(float *v, const uint16_t *p)
{
	uint4 q = *(const uint4 *)p;
	uint32_t w[4] = {q.x, q.y, q.z, q.w};
	for (int k = 0; k < 4; k++) { /* little-endian: the lower half first */
		v[2 * k] = ldf((uint16_t)(w[k] & 0xffffu));
		v[2 * k + 1] = ldf((uint16_t)(w[k] >> 16));
	}
}
__device__ __forceinline__ void st16(float *p, const float *v)
{
	*(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void st16(uint16_t *p, const float *v)
{
	uint32_t w[4];
	for (int k = 0; k < 4; k++)
		w[k] = (uint32_t)stf<uint16_t>(v[2 * k]) |
		       (uint32_t)stf<uint16_t>(v[2 * k + 1]) << 16;
	*(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
}

/* The block's states merged in a fixed tree: the same bits every run. */
__device__ __forceinline__ gk_nn_msum block_merge(gk_nn_msum a, gk_nn_msum *sh)
{
	sh[threadIdx.x] = a;
	__syncthreads();
	for (int w = XENT_THREADS / 2; w > 0; w >>= 1) {
		if ((int)threadIdx.x < w)
			sh[threadIdx.x] = gk_nn_msum_merge(sh[threadIdx.x], sh[threadIdx.x + w]);
		__syncthreads();
	}
	gk_nn_msum r = sh[0];
	__syncthreads();
	return r;
}

/*
 * Pass one over a row (online softmax): every thread folds its 16-byte
 * chunks (vec) or single values into a state, the block merges them.
 * The tail past the last full chunk of V goes value by value. Each
 * thread walks its part from the row's end to its start, so that pass
 * two of the fused kernel, which walks it forwards, starts on what was
 * read last (still in L2, as llm.c's prepare_softmax_blockwide3). Both
 * kernels fold the same way: training's and evaluation's losses are the
 * same bits.
 */
template <typename T>
__device__ __forceinline__ gk_nn_msum row_state(const T *x, int V, int vec,
						 gk_nn_msum *sh)
{
	enum { W = 16 / sizeof(T) };
	gk_nn_msum a = gk_nn_msum_empty();
	int full = vec ? V / W : 0;
	for (int j = full * W + threadIdx.x; j < V; j += XENT_THREADS) {
		float v = ldf(x[j]);
		a = gk_nn_msum_chunk(a, &v, 1);
	}
	int mine = full > (int)threadIdx.x ? (full - 1 - (int)threadIdx.x) / XENT_THREADS + 1 : 0;
	for (int r = mine - 1; r >= 0; r--) {
		float v[W];
		ld16(v, x + (size_t)(threadIdx.x + r * XENT_THREADS) * W);
		a = gk_nn_msum_chunk(a, v, W);
	}
	return block_merge(a, sh);
}

/* evaluation: lse and loss per row, the logits left as they are */
template <typename T>
__global__ static void xent_fwd(float *lse, float *loss, const T *logits,
				const int32_t *targets, int N, int V, int Vp,
				int vec)
{
	__shared__ gk_nn_msum sh[XENT_THREADS];
	for (int i = blockIdx.x; i < N; i += gridDim.x) {
		const T *x = logits + (size_t)i * Vp;
		gk_nn_msum a = row_state(x, V, vec, sh);
		if (threadIdx.x == 0) {
			float l = gk_nn_msum_lse(a);
			int y = targets ? targets[i] : -1;
			lse[i] = l;
			loss[i] = y >= 0 ? l - ldf(x[y]) : 0.0f;
		}
	}
}

/* dlogits of one value: zero on padded columns and ignored rows (ok
 * 0); y is the target's column in the row, which under tensor
 * parallelism may lie outside this rank's columns */
__device__ __forceinline__ float xent_d(float x, float l, int j, int y, int ok,
					int V, float dloss)
{
	return ok && j < V ? gk_nn_xent_grad(x, l, j == y, dloss) : 0.0f;
}

/* Pass two over a row: its dlogits over it, in place, the block's
 * threads striding over it 16 bytes (vec) or one value at a time. */
template <typename T>
__device__ __forceinline__ void row_grad(T *x, float l, int y, int ok, float dloss,
					 int V, int Vp, int vec)
{
	enum { W = 16 / sizeof(T) };
	if (vec) {
		for (int k = threadIdx.x; k < Vp / W; k += blockDim.x) {
			float v[W];
			ld16(v, x + (size_t)k * W);
			for (int e = 0; e < W; e++)
				v[e] = xent_d(v[e], l, k * W + e, y, ok, V, dloss);
			st16(x + (size_t)k * W, v);
		}
		return;
	}
	for (int j = threadIdx.x; j < Vp; j += blockDim.x)
		x[j] = stf<T>(xent_d(ldf(x[j]), l, j, y, ok, V, dloss));
}

/* a backward after an evaluation forward: pass two, from its lse (v0:
 * the first column's vocabulary row, tensor parallelism's) */
template <typename T>
__global__ static void xent_bwd(T *logits, const float *lse,
				const int32_t *targets, float dloss, int64_t v0,
				int N, int V, int Vp, int vec)
{
	for (int i = blockIdx.x; i < N; i += gridDim.x)
		row_grad(logits + (size_t)i * Vp, lse[i], (int)(targets[i] - v0),
			 targets[i] >= 0, dloss, V, Vp, vec);
}

/*
 * Training: forward and backward in one kernel (llm.c's
 * fused_classifier). Pass one is xent_fwd's, so lse and loss are its
 * bits; the target's logit is read before the block's merge, whose
 * barriers order it before any thread overwrites the row; pass two
 * reads the row again (from L2, mostly) and writes xent_bwd's dlogits
 * over it in place, 16 bytes at a time where the rows allow, with the
 * same values, bit for bit.
 */
template <typename T>
__global__ static void xent_fused(float *lse, float *loss, T *logits,
				  const int32_t *targets, float dloss, int N,
				  int V, int Vp, int vec)
{
	__shared__ gk_nn_msum sh[XENT_THREADS];
	for (int i = blockIdx.x; i < N; i += gridDim.x) {
		T *x = logits + (size_t)i * Vp;
		int y = targets[i];
		float xy = threadIdx.x == 0 && y >= 0 ? ldf(x[y]) : 0.0f;
		float l = gk_nn_msum_lse(row_state((const T *)x, V, vec, sh));
		if (threadIdx.x == 0) {
			lse[i] = l;
			loss[i] = y >= 0 ? l - xy : 0.0f;
		}
		row_grad(x, l, y, y >= 0, dloss, V, Vp, vec);
	}
}

/* 16-byte loads: rows that start on 16 bytes, as every row does when
 * the first does and a row is a whole number of 16-byte chunks. */
static int xent_vec(const void *logits, gk_dtype dt, int Vp)
{
	int w = dt == GK_DT_F32 ? 4 : 8;
	return (uintptr_t)logits % 16 == 0 && Vp % w == 0;
}

extern "C" int gk_nn_cu_xent_fwd(float *lse, float *loss, const void *logits,
				 const int32_t *targets, gk_dtype dt, int N,
				 int V, int Vp, gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, xent_fwd<T><<<gk_cuda_grid((uint64_t)N, 1), XENT_THREADS, 0,
				 s>>>(lse, loss, (const T *)logits, targets, N,
				      V, Vp, xent_vec(logits, dt, Vp)));
	return GK_CUDA_LAUNCHED("classifier forward", err);
}

extern "C" int gk_nn_cu_xent_bwd(void *logits, const float *lse,
				 const int32_t *targets, gk_dtype dt,
				 float dloss, int N, int V, int Vp,
				 gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, xent_bwd<T><<<gk_cuda_grid((uint64_t)N, 1), GK_CUDA_BLOCK, 0,
				 s>>>((T *)logits, lse, targets, dloss, 0, N, V,
				      Vp, xent_vec(logits, dt, Vp)));
	return GK_CUDA_LAUNCHED("classifier backward", err);
}

extern "C" int gk_nn_cu_xent_fused(float *lse, float *loss, void *logits,
				   const int32_t *targets, gk_dtype dt,
				   float dloss, int N, int V, int Vp,
				   gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, xent_fused<T><<<gk_cuda_grid((uint64_t)N, 1), XENT_THREADS,
				   0, s>>>(lse, loss, (T *)logits, targets,
					   dloss, N, V, Vp,
					   xent_vec(logits, dt, Vp)));
	return GK_CUDA_LAUNCHED("classifier", err);
}

/*
 * ---- tensor parallelism: the vocabulary-parallel cross-entropy ----
 *
 * A rank holds the columns [v0, v0 + ld) of every row (nv of them real,
 * the rest padding). The fused kernel's two passes need the group's max
 * and sum between them, so they are three kernels here with the group's
 * allreduces (model_cuda.c) between: tp_state, pass one over this rank's
 * columns (the same fold as row_state's); tp_rescale, this rank's sum at
 * the group's max (gk_nn_msum_at); tp_finish, the row's lse and loss from
 * the group's sums and, in training, pass two (row_grad) over this rank's
 * columns. tp 1 keeps xent_fused.
 */
template <typename T>
__global__ static void tp_state(float *mx, float *gmx, float *part, const T *logits,
				const int32_t *targets, int64_t v0, int N, int nv, int ld,
				int vec)
{
	__shared__ gk_nn_msum sh[XENT_THREADS];
	for (int i = blockIdx.x; i < N; i += gridDim.x) {
		const T *x = logits + (size_t)i * ld;
		gk_nn_msum a = row_state(x, nv, vec, sh);
		if (threadIdx.x == 0) {
			int64_t y = targets[i] >= 0 ? targets[i] - v0 : -1;
			mx[i] = gmx[i] = a.m;
			part[2 * i] = a.s;
			part[2 * i + 1] = y >= 0 && y < nv ? ldf(x[y]) : 0.0f;
		}
	}
}

__global__ static void tp_rescale(float *part, const float *mx, const float *gmx, int N)
{
	GK_CUDA_FOR_EACH(i, (size_t)N) {
		gk_nn_msum a = {mx[i], part[2 * i]};
		part[2 * i] = gk_nn_msum_at(a, gmx[i]);
	}
}

template <typename T>
__global__ static void tp_finish(float *lse, float *loss, T *logits, const float *gmx,
				 const float *part, const int32_t *targets, float dloss,
				 int grad, int64_t v0, int N, int nv, int ld, int vec)
{
	for (int i = blockIdx.x; i < N; i += gridDim.x) {
		gk_nn_msum a = {gmx[i], part[2 * i]};
		float l = gk_nn_msum_lse(a);
		int ok = targets[i] >= 0;
		if (threadIdx.x == 0) {
			lse[i] = l;
			loss[i] = ok ? l - part[2 * i + 1] : 0.0f;
		}
		if (grad)
			row_grad(logits + (size_t)i * ld, l, (int)(targets[i] - v0), ok, dloss, nv,
				 ld, vec);
	}
}

extern "C" int gk_nn_cu_tp_xent_state(float *mx, float *gmx, float *part, const void *logits,
				      const int32_t *targets, gk_dtype dt, int64_t v0, int N,
				      int nv, int ld, gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, tp_state<T><<<gk_cuda_grid((uint64_t)N, 1), XENT_THREADS, 0, s>>>(
			   mx, gmx, part, (const T *)logits, targets, v0, N, nv, ld,
			   xent_vec(logits, dt, ld)));
	return GK_CUDA_LAUNCHED("vocabulary-parallel classifier, pass one", err);
}

extern "C" int gk_nn_cu_tp_xent_rescale(float *part, const float *mx, const float *gmx, int N,
					gk_cuda_stream s, gk_err *err)
{
	tp_rescale<<<gk_cuda_grid((uint64_t)N, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(part, mx,
										gmx, N);
	return GK_CUDA_LAUNCHED("vocabulary-parallel classifier, rescale", err);
}

extern "C" int gk_nn_cu_tp_xent_finish(float *lse, float *loss, void *logits, const float *gmx,
				       const float *part, const int32_t *targets, gk_dtype dt,
				       float dloss, int grad, int64_t v0, int N, int nv, int ld,
				       gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, tp_finish<T><<<gk_cuda_grid((uint64_t)N, 1), XENT_THREADS, 0, s>>>(
			   lse, loss, (T *)logits, gmx, part, targets, dloss, grad, v0, N, nv, ld,
			   xent_vec(logits, dt, ld)));
	return GK_CUDA_LAUNCHED("vocabulary-parallel classifier, pass two", err);
}

extern "C" int gk_nn_cu_tp_xent_bwd(void *logits, const float *lse, const int32_t *targets,
				    gk_dtype dt, float dloss, int64_t v0, int N, int nv, int ld,
				    gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, xent_bwd<T><<<gk_cuda_grid((uint64_t)N, 1), GK_CUDA_BLOCK, 0, s>>>(
			   (T *)logits, lse, targets, dloss, v0, N, nv, ld,
			   xent_vec(logits, dt, ld)));
	return GK_CUDA_LAUNCHED("vocabulary-parallel classifier backward", err);
}
