/*
 * layernorm.cu - LayerNorm forward and backward, one warp per row, with
 * math.h's gk_nn_ln_apply and gk_nn_ln_dinp. Statistics in two passes
 * (mean, then squared deviations) as gk_nn_ln_stats; the weight and bias
 * gradients are column sums in two passes (no atomics). Rows move 16
 * bytes a load where C and the pointers allow (the _vec kernels,
 * kernels.cuh's Packed128), one element a load otherwise.
 *
 * The residual add is not fused here: it is folded into the matmul that
 * produces the residual stream (cuBLASLt's C operand, as the CPU's
 * gk_nn_cpu_matmul_fwd takes res), which saves the same pass.
 *
 * reference: llm.c llmc/layernorm.cuh (layernorm_forward_kernel3,
 * layernorm_backward_kernel10).
 */
#include "nn/kernels.cuh"

template <typename T>
__global__ static void ln_fwd(T *out, float *mean, float *rstd, const T *inp,
			      const T *w, const T *b, int N, int C, float eps)
{
	int lane = threadIdx.x % 32;
	FOR_ROWS(r, (uint64_t)N) {
		const T *x = inp + r * C;
		T *o = out + r * C;
		float s = 0.0f;
		for (int c = lane; c < C; c += 32)
			s += ldf(x[c]);
		float mu = warp_sum(s) / (float)C;
		float v = 0.0f;
		for (int c = lane; c < C; c += 32) {
			float d = ldf(x[c]) - mu;
			v += d * d;
		}
		float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
		for (int c = lane; c < C; c += 32)
			o[c] = stf<T>(gk_nn_ln_apply(ldf(x[c]), mu, rs,
						     ldf(w[c]), ldf(b[c])));
		if (lane == 0) {
			mean[r] = mu;
			rstd[r] = rs;
		}
	}
}

/*
 * Packed (vec16 at launch: C a multiple of W = Packed128<T>::size, every
 * pointer 16-byte aligned): lane l takes the W-element chunks l, l + 32,
 * ... of its row, a 16-byte load each. The sums within a lane then run
 * in another order than the scalar kernel's (rounding only; the tests
 * hold both to the CPU within the same bounds); each element's math is
 * the same call.
 */
template <typename T>
__global__ static void ln_fwd_vec(T *out, float *mean, float *rstd,
				  const T *inp, const T *w, const T *b, int N,
				  int C, float eps)
{
	enum { W = Packed128<T>::size };
	int lane = threadIdx.x % 32;
	FOR_ROWS(r, (uint64_t)N) {
		const T *x = inp + r * C;
		T *o = out + r * C;
		float s = 0.0f;
		for (int c = lane * W; c < C; c += 32 * W) {
			Packed128<T> p = load128(x + c);
			for (int k = 0; k < W; k++)
				s += p.f(k);
		}
		float mu = warp_sum(s) / (float)C;
		float v = 0.0f;
		for (int c = lane * W; c < C; c += 32 * W) {
			Packed128<T> p = load128(x + c);
			for (int k = 0; k < W; k++) {
				float d = p.f(k) - mu;
				v += d * d;
			}
		}
		float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
		for (int c = lane * W; c < C; c += 32 * W) {
			Packed128<T> p = load128cs(x + c), pw = load128(w + c),
				     pb = load128(b + c), q;
			for (int k = 0; k < W; k++)
				q.set(k, gk_nn_ln_apply(p.f(k), mu, rs, pw.f(k),
							pb.f(k)));
			store128(o + c, q);
		}
		if (lane == 0) {
			mean[r] = mu;
			rstd[r] = rs;
		}
	}
}

template <typename T>
__global__ static void ln_bwd_rows(T *dinp, const T *dout, const T *inp,
				   const T *w, const float *mean,
				   const float *rstd, int N, int C)
{
	int lane = threadIdx.x % 32;
	FOR_ROWS(r, (uint64_t)N) {
		const T *d = dout + r * C, *x = inp + r * C;
		T *di = dinp + r * C;
		float mu = mean[r], rs = rstd[r];
		float s1 = 0.0f, s2 = 0.0f;
		for (int c = lane; c < C; c += 32) {
			float dn = ldf(w[c]) * ldf(d[c]);
			s1 += dn;
			s2 += dn * (ldf(x[c]) - mu) * rs;
		}
		s1 = warp_sum(s1) / (float)C;
		s2 = warp_sum(s2) / (float)C;
		for (int c = lane; c < C; c += 32) {
			float nrm = (ldf(x[c]) - mu) * rs;
			float dn = ldf(w[c]) * ldf(d[c]);
			di[c] = stf<T>(ldf(di[c]) +
				       gk_nn_ln_dinp(dn, nrm, s1, s2, rs));
		}
	}
}

/* packed as ln_fwd_vec */
template <typename T>
__global__ static void ln_bwd_rows_vec(T *dinp, const T *dout, const T *inp,
				       const T *w, const float *mean,
				       const float *rstd, int N, int C)
{
	enum { W = Packed128<T>::size };
	int lane = threadIdx.x % 32;
	FOR_ROWS(r, (uint64_t)N) {
		const T *d = dout + r * C, *x = inp + r * C;
		T *di = dinp + r * C;
		float mu = mean[r], rs = rstd[r];
		float s1 = 0.0f, s2 = 0.0f;
		for (int c = lane * W; c < C; c += 32 * W) {
			Packed128<T> pw = load128(w + c), pd = load128(d + c),
				     px = load128(x + c);
			for (int k = 0; k < W; k++) {
				float dn = pw.f(k) * pd.f(k);
				s1 += dn;
				s2 += dn * (px.f(k) - mu) * rs;
			}
		}
		s1 = warp_sum(s1) / (float)C;
		s2 = warp_sum(s2) / (float)C;
		for (int c = lane * W; c < C; c += 32 * W) {
			Packed128<T> pw = load128(w + c), pd = load128cs(d + c),
				     px = load128cs(x + c), pi = load128cg(di + c);
			for (int k = 0; k < W; k++) {
				float nrm = (px.f(k) - mu) * rs;
				float dn = pw.f(k) * pd.f(k);
				pi.set(k, pi.f(k) + gk_nn_ln_dinp(dn, nrm, s1, s2, rs));
			}
			store128(di + c, pi);
		}
	}
}

/* part[k] (2C floats): columns of dout * nrm (dw) then of dout (db) over
 * chunk k's rows, in order */
template <typename T>
__global__ static void ln_bwd_part(float *part, const T *dout, const T *inp,
				   const float *mean, const float *rstd, int N,
				   int C, int chunks)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	uint64_t lo, hi;
	gk_nn_part((uint64_t)N, (uint64_t)chunks, blockIdx.y, &lo, &hi);
	float sw = 0.0f, sb = 0.0f;
	for (uint64_t i = lo; i < hi; i++) {
		float d = ldf(dout[i * C + c]);
		sw += d * ((ldf(inp[i * C + c]) - mean[i]) * rstd[i]);
		sb += d;
	}
	part[(size_t)blockIdx.y * 2 * C + c] = sw;
	part[(size_t)blockIdx.y * 2 * C + C + c] = sb;
}

/* packed: W columns a thread, 16 bytes of dout and of inp a row; each
 * column's sums in the scalar kernel's order, so its bits */
template <typename T>
__global__ static void ln_bwd_part_vec(float *part, const T *dout,
				       const T *inp, const float *mean,
				       const float *rstd, int N, int C,
				       int chunks)
{
	enum { W = Packed128<T>::size };
	int c = (blockIdx.x * blockDim.x + threadIdx.x) * W;
	if (c >= C)
		return;
	uint64_t lo, hi;
	gk_nn_part((uint64_t)N, (uint64_t)chunks, blockIdx.y, &lo, &hi);
	float sw[W] = {0}, sb[W] = {0};
	for (uint64_t i = lo; i < hi; i++) {
		Packed128<T> d = load128cs(dout + i * C + c),
			     x = load128cs(inp + i * C + c);
		for (int k = 0; k < W; k++) {
			sw[k] += d.f(k) * ((x.f(k) - mean[i]) * rstd[i]);
			sb[k] += d.f(k);
		}
	}
	float *pw = part + (size_t)blockIdx.y * 2 * C + c, *pb = pw + C;
	for (int h = 0; h < W; h += 4) {
		Packed128<float> a, b;
		for (int k = 0; k < 4; k++) {
			a.v[k] = sw[h + k];
			b.v[k] = sb[h + k];
		}
		store128(pw + h, a);
		store128(pb + h, b);
	}
}

extern "C" int gk_nn_cu_layernorm_fwd(void *out, float *mean, float *rstd,
				      const void *inp, const void *w,
				      const void *b, gk_dtype dt, int N, int C,
				      float eps, gk_cuda_stream s, gk_err *err)
{
	/* packed where vec16 allows, else the scalar loop */
	WITH_T(dt, if (vec16<T>((uint64_t)C, out, inp, w, b))
			   ln_fwd_vec<T><<<gk_nn_row_grid((uint64_t)N), ROW_THREADS, 0, s>>>(
				   (T *)out, mean, rstd, (const T *)inp, (const T *)w,
				   (const T *)b, N, C, eps);
	       else ln_fwd<T><<<gk_nn_row_grid((uint64_t)N), ROW_THREADS, 0, s>>>(
			   (T *)out, mean, rstd, (const T *)inp, (const T *)w,
			   (const T *)b, N, C, eps));
	return GK_CUDA_LAUNCHED("layernorm forward", err);
}

extern "C" int gk_nn_cu_layernorm_bwd(void *dinp, float *dw, float *db,
				      float *scratch, const void *dout,
				      const void *inp, const void *w,
				      const float *mean, const float *rstd,
				      gk_dtype dt, int N, int C,
				      gk_cuda_stream s, gk_err *err)
{
	unsigned chunks = gk_nn_colsum_chunks((uint64_t)N);
	dim3 grid((C + GK_NN_COLSUM_COLS - 1) / GK_NN_COLSUM_COLS, chunks);
	/* packed where vec16 allows (the scratch too: 2C floats a chunk),
	 * else the scalar loops */
	WITH_T(dt, if (vec16<T>((uint64_t)C, dinp, dout, inp, w, scratch)) {
		ln_bwd_rows_vec<T><<<gk_nn_row_grid((uint64_t)N), ROW_THREADS, 0, s>>>(
			(T *)dinp, (const T *)dout, (const T *)inp, (const T *)w,
			mean, rstd, N, C);
		dim3 gv((C / Packed128<T>::size + GK_NN_COLSUM_COLS - 1) /
				GK_NN_COLSUM_COLS,
			chunks);
		ln_bwd_part_vec<T><<<gv, GK_NN_COLSUM_COLS, 0, s>>>(
			scratch, (const T *)dout, (const T *)inp, mean, rstd, N,
			C, (int)chunks);
	} else {
		ln_bwd_rows<T><<<gk_nn_row_grid((uint64_t)N), ROW_THREADS, 0, s>>>(
			(T *)dinp, (const T *)dout, (const T *)inp, (const T *)w,
			mean, rstd, N, C);
		ln_bwd_part<T><<<grid, GK_NN_COLSUM_COLS, 0, s>>>(
			scratch, (const T *)dout, (const T *)inp, mean, rstd, N,
			C, (int)chunks);
	});
	unsigned g = (C + GK_CUDA_BLOCK - 1) / GK_CUDA_BLOCK;
	colsum_finish<<<g, GK_CUDA_BLOCK, 0, s>>>(dw, scratch, (int)chunks,
						  2 * C, C);
	colsum_finish<<<g, GK_CUDA_BLOCK, 0, s>>>(db, scratch + C, (int)chunks,
						  2 * C, C);
	return GK_CUDA_LAUNCHED("layernorm backward", err);
}
