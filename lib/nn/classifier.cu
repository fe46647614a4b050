/*
 * classifier.cu - the fused classifier: softmax, cross-entropy and
 * dlogits without ever storing the probabilities. Forward keeps each
 * row's logsumexp and loss; backward overwrites the logits in place with
 * gk_nn_xent_grad (the CPU's function). One block per row, reductions in
 * a fixed tree (block_reduce), so the loss is the same bits every run.
 *
 * reference: llm.c llmc/fused_classifier.cuh.
 */
#include "nn/kernels.cuh"

#define XENT_THREADS 256

template <typename T>
__global__ static void xent_fwd(float *lse, float *loss, const T *logits,
				const int32_t *targets, int N, int V, int Vp)
{
	__shared__ float sh[XENT_THREADS];
	for (int i = blockIdx.x; i < N; i += gridDim.x) {
		const T *x = logits + (size_t)i * Vp;
		float mx = -INFINITY;
		for (int j = threadIdx.x; j < V; j += XENT_THREADS)
			mx = fmaxf(mx, ldf(x[j]));
		mx = block_reduce<XENT_THREADS, float>(mx, sh, true);
		float s = 0.0f;
		for (int j = threadIdx.x; j < V; j += XENT_THREADS)
			s += gk_nn_expf(ldf(x[j]) - mx);
		s = block_reduce<XENT_THREADS, float>(s, sh, false);
		if (threadIdx.x == 0) {
			float l = mx + logf(s);
			int y = targets ? targets[i] : -1;
			lse[i] = l;
			loss[i] = y >= 0 ? l - ldf(x[y]) : 0.0f;
		}
	}
}

template <typename T>
__global__ static void xent_bwd(T *logits, const float *lse,
				const int32_t *targets, float dloss, int N,
				int V, int Vp)
{
	for (int i = blockIdx.x; i < N; i += gridDim.x) {
		T *x = logits + (size_t)i * Vp;
		int y = targets[i];
		float l = lse[i];
		for (int j = threadIdx.x; j < Vp; j += blockDim.x)
			x[j] = stf<T>(y >= 0 && j < V ? gk_nn_xent_grad(
							       ldf(x[j]), l,
							       j == y, dloss)
						      : 0.0f);
	}
}

extern "C" int gk_nn_cu_xent_fwd(float *lse, float *loss, const void *logits,
				 const int32_t *targets, gk_dtype dt, int N,
				 int V, int Vp, gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, xent_fwd<T><<<gk_cuda_grid((uint64_t)N, 1), XENT_THREADS, 0,
				 s>>>(lse, loss, (const T *)logits, targets, N,
				      V, Vp));
	return GK_CUDA_LAUNCHED("classifier forward", err);
}

extern "C" int gk_nn_cu_xent_bwd(void *logits, const float *lse,
				 const int32_t *targets, gk_dtype dt,
				 float dloss, int N, int V, int Vp,
				 gk_cuda_stream s, gk_err *err)
{
	WITH_T(dt, xent_bwd<T><<<gk_cuda_grid((uint64_t)N, 1), GK_CUDA_BLOCK, 0,
				 s>>>((T *)logits, lse, targets, dloss, N, V,
				      Vp));
	return GK_CUDA_LAUNCHED("classifier backward", err);
}
