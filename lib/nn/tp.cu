/*
 * tp.cu - tensor parallelism's element kernels on a GPU (tp.c has the
 * split and the CPU's): the vocabulary-parallel embedding's masked lookup
 * and its positions, a row-parallel layer's end, and sequence
 * parallelism's order of rows and its LayerNorms' gradients. The group's
 * sums between them are fp32 collectives on the model's stream
 * (model_cuda.c), so these read or write fp32 partial sums beside the
 * activation type.
 * The vocabulary-parallel cross-entropy is classifier.cu's.
 */
#include "nn/kernels.cuh"

/* acc (N,C) = wte[tok[i] - v0] for the tokens this rank holds (its nv
 * rows from v0), else 0: the group's sum is the embedding */
template <typename T>
__global__ static void tp_embed(float *acc, const int32_t *tok, const T *wte, int64_t v0,
				int nv, size_t NC, int C)
{
	GK_CUDA_FOR_EACH(x, NC) {
		size_t i = x / C;
		int64_t v = (int64_t)tok[i] - v0;
		acc[x] = v >= 0 && v < nv ? ldf(wte[(size_t)v * C + x % C]) : 0.0f;
	}
}

/* out (B,T,C) = acc + wpe[t0 + t]: encoder.cu's sum, with the group's
 * lookup (t0 > 0: a rank's positions under sequence parallelism) */
template <typename T>
__global__ static void tp_add_pos(T *out, const float *acc, const T *wpe, size_t NC, int T_,
				  int t0, int C)
{
	GK_CUDA_FOR_EACH(x, NC) {
		int t = t0 + (int)((x / C) % T_);
		out[x] = stf<T>(acc[x] + ldf(wpe[(size_t)t * C + x % C]));
	}
}

/* out (N,OC) = (res + bias) + sum, sum the group's product (math.h) */
template <typename T>
__global__ static void tp_row_finish(T *out, const float *sum, const T *res, const T *bias,
				     size_t n, int OC)
{
	GK_CUDA_FOR_EACH(x, n) {
		out[x] = stf<T>(gk_nn_tp_finish(res ? ldf(res[x]) : 0.0f,
						bias ? ldf(bias[x % OC]) : 0.0f, sum[x]));
	}
}

/* sequence parallelism's rows between (B,T,C) and the group's order
 * (tp,B,T/tp,C), gk_nn_sp_row: a copy either way */
template <typename T>
__global__ static void sp_move(T *dst, const T *src, size_t NC, int B, int T_, int tp, int C,
			       int to_ranks)
{
	GK_CUDA_FOR_EACH(x, NC) {
		size_t i = x / C, j = gk_nn_sp_row(i, B, T_, tp), c = x % C;
		if (to_ranks)
			dst[j * C + c] = src[x];
		else
			dst[x] = src[j * C + c];
	}
}

/* a replicated LayerNorm's gradients += the group's sums s (2C: dw then
 * db) */
__global__ static void sp_ln_add(float *dw, float *db, const float *s, int C)
{
	GK_CUDA_FOR_EACH(c, (size_t)C) {
		dw[c] += s[c];
		db[c] += s[C + c];
	}
}

extern "C" int gk_nn_cu_tp_embed(float *acc, const int32_t *tok, const void *wte, gk_dtype dt,
				 int64_t v0, int nv, int N, int C, gk_cuda_stream s, gk_err *err)
{
	size_t n = (size_t)N * C;
	WITH_T(dt, tp_embed<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(
			   acc, tok, (const T *)wte, v0, nv, n, C));
	return GK_CUDA_LAUNCHED("vocabulary-parallel embedding", err);
}

extern "C" int gk_nn_cu_tp_add_pos(void *out, const float *acc, const void *wpe, gk_dtype dt,
				   int B, int T_, int t0, int C, gk_cuda_stream s, gk_err *err)
{
	size_t n = (size_t)B * T_ * C;
	WITH_T(dt, tp_add_pos<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(
			   (T *)out, acc, (const T *)wpe, n, T_, t0, C));
	return GK_CUDA_LAUNCHED("embedding positions", err);
}

extern "C" int gk_nn_cu_sp_move(void *dst, const void *src, gk_dtype dt, int B, int T_, int tp,
				int C, int to_ranks, gk_cuda_stream s, gk_err *err)
{
	size_t n = (size_t)B * T_ * C;
	WITH_T(dt, sp_move<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(
			   (T *)dst, (const T *)src, n, B, T_, tp, C, to_ranks));
	return GK_CUDA_LAUNCHED("sequence-parallel rows", err);
}

extern "C" int gk_nn_cu_sp_ln_add(float *dw, float *db, const float *sums, int C,
				  gk_cuda_stream s, gk_err *err)
{
	sp_ln_add<<<gk_cuda_grid((size_t)C, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(dw, db, sums, C);
	return GK_CUDA_LAUNCHED("sequence-parallel LayerNorm gradients", err);
}

extern "C" int gk_nn_cu_tp_row_finish(void *out, const float *sum, const void *res,
				      const void *bias, gk_dtype dt, int N, int OC,
				      gk_cuda_stream s, gk_err *err)
{
	size_t n = (size_t)N * OC;
	WITH_T(dt, tp_row_finish<T><<<gk_cuda_grid(n, GK_CUDA_BLOCK), GK_CUDA_BLOCK, 0, s>>>(
			   (T *)out, sum, (const T *)res, (const T *)bias, n, OC));
	return GK_CUDA_LAUNCHED("row-parallel layer's end", err);
}
