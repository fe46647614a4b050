/*
 * attention.cu - the pieces of causal self-attention around its batched
 * matmuls (model_cuda.c runs those through cuBLASLt, one (batch, head) a
 * batch entry): the head shuffles between (B,T,3C) and (B,NH,T,hs), and
 * the causal softmax forward and backward, one warp per row.
 *
 * Forward, per (b, h):  pre = q k^T / sqrt(hs)   att = softmax_causal(pre)
 *                       y = att v
 * Backward:             datt = dy v^T   dv = att^T dy
 *                       dpre = gk_nn_softmax_dpre(att, datt) (scaled)
 *                       dq = dpre k     dk = dpre^T q
 * which is gk_nn_cpu_attention_fwd/bwd's arithmetic.
 *
 * reference: llm.c llmc/attention.cuh (permute_kernel, softmax_forward_kernel5).
 */
#include "nn/kernels.cuh"

/*
 * Element x of the (b, h, t, d) layout, B*NH*T*hs of them, lives at this
 * offset of the (b, t, [off +] h*hs + d) layout with row stride ld.
 */
__device__ static inline size_t heads_offset(size_t x, int T_, int NH, int hs,
					     int ld, int off)
{
	int d = (int)(x % hs);
	size_t r = x / hs;
	int t = (int)(r % T_);
	r /= T_;
	int h = (int)(r % NH);
	size_t b = r / NH;
	return (b * T_ + t) * ld + off + (size_t)h * hs + d;
}

template <typename T>
__global__ static void heads_split(T *dst, const T *src, int B, int T_, int NH,
				   int hs, int ld, int off, size_t n)
{
	GK_CUDA_FOR_EACH(x, n)
		dst[x] = src[heads_offset(x, T_, NH, hs, ld, off)];
}

template <typename T>
__global__ static void heads_merge(T *dst, const T *src, int B, int T_, int NH,
				   int hs, int ld, int off, size_t n)
{
	GK_CUDA_FOR_EACH(x, n)
		dst[heads_offset(x, T_, NH, hs, ld, off)] = src[x];
}

/* row r of (B*NH*T) is position t = r % T: keeps j <= t */
template <typename T>
__global__ static void softmax_fwd(T *att, uint64_t rows, int T_)
{
	int lane = threadIdx.x % 32;
	FOR_ROWS(r, rows) {
		T *x = att + r * (uint64_t)T_;
		int t = (int)(r % T_);
		float mx = -INFINITY;
		for (int j = lane; j <= t; j += 32)
			mx = fmaxf(mx, ldf(x[j]));
		mx = warp_max(mx);
		float s = 0.0f;
		for (int j = lane; j <= t; j += 32)
			s += gk_nn_expf(ldf(x[j]) - mx);
		float inv = 1.0f / warp_sum(s);
		for (int j = lane; j < T_; j += 32)
			x[j] = stf<T>(j <= t ? gk_nn_expf(ldf(x[j]) - mx) * inv : 0.0f);
	}
}

template <typename T>
__global__ static void softmax_bwd(T *datt, const T *att, uint64_t rows,
				   int T_, float scale)
{
	int lane = threadIdx.x % 32;
	FOR_ROWS(r, rows) {
		T *d = datt + r * (uint64_t)T_;
		const T *a = att + r * (uint64_t)T_;
		int t = (int)(r % T_);
		float s = 0.0f;
		for (int j = lane; j <= t; j += 32)
			s += ldf(a[j]) * ldf(d[j]);
		s = warp_sum(s);
		for (int j = lane; j < T_; j += 32)
			d[j] = stf<T>(j <= t ? gk_nn_softmax_dpre(ldf(a[j]),
								  ldf(d[j]), s,
								  scale)
					     : 0.0f);
	}
}

extern "C" int gk_nn_cu_heads_split(void *dst, const void *src, gk_dtype dt,
				    int B, int T_, int NH, int hs, int ld,
				    int off, gk_cuda_stream s, gk_err *err)
{
	size_t n = (size_t)B * NH * T_ * hs;
	WITH_T(dt, heads_split<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK),
				    GK_CUDA_BLOCK, 0, s>>>(
			   (T *)dst, (const T *)src, B, T_, NH, hs, ld, off, n));
	return GK_CUDA_LAUNCHED("attention heads split", err);
}

extern "C" int gk_nn_cu_heads_merge(void *dst, const void *src, gk_dtype dt,
				    int B, int T_, int NH, int hs, int ld,
				    int off, gk_cuda_stream s, gk_err *err)
{
	size_t n = (size_t)B * NH * T_ * hs;
	WITH_T(dt, heads_merge<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK),
				    GK_CUDA_BLOCK, 0, s>>>(
			   (T *)dst, (const T *)src, B, T_, NH, hs, ld, off, n));
	return GK_CUDA_LAUNCHED("attention heads merge", err);
}

extern "C" int gk_nn_cu_softmax_causal_fwd(void *att, gk_dtype dt,
					   uint64_t rows, int T_,
					   gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, softmax_fwd<T><<<gk_nn_row_grid(rows), ROW_THREADS, 0, s>>>(
			   (T *)att, rows, T_));
	return GK_CUDA_LAUNCHED("attention softmax", err);
}

extern "C" int gk_nn_cu_softmax_causal_bwd(void *datt, const void *att,
					   gk_dtype dt, uint64_t rows, int T_,
					   float scale, gk_cuda_stream s,
					   gk_err *err)
{
	WITH_T(dt, softmax_bwd<T><<<gk_nn_row_grid(rows), ROW_THREADS, 0, s>>>(
			   (T *)datt, (const T *)att, rows, T_, scale));
	return GK_CUDA_LAUNCHED("attention softmax backward", err);
}
