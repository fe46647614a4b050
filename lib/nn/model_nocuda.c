/*
 * model_nocuda.c - the CUDA backend in a build without CUDA: making a
 * CUDA model fails with the reason; nothing else can be reached.
 */
#include <string.h>

#include "nn/cuda_internal.h"

int gk_nn_cuda_new(gk_nn_model *m, gk_err *err)
{
	return gk_errf(err, "model on the GPU: gpukit was built without CUDA");
}

void gk_nn_cuda_free(gk_nn_model *m)
{
}

int gk_nn_cuda_forward(gk_nn_model *m, const int32_t *tokens,
		       const int32_t *targets, float *loss, gk_err *err)
{
	return gk_errf(err, "forward on the GPU: gpukit was built without CUDA");
}

int gk_nn_cuda_backward(gk_nn_model *m, float scale, gk_nn_ready_fn ready,
			void *ctx, gk_err *err)
{
	return gk_errf(err, "backward on the GPU: gpukit was built without CUDA");
}

void *gk_nn_cuda_pp_input(gk_nn_model *m)
{
	return NULL;
}

void *gk_nn_cuda_pp_output(gk_nn_model *m)
{
	return NULL;
}

void *gk_nn_cuda_pp_grad(gk_nn_model *m)
{
	return NULL;
}

gk_dtype gk_nn_cuda_pp_dtype(const gk_nn_model *m)
{
	return GK_DT_F32;
}

int gk_nn_cuda_slots(gk_nn_model *m, int n, gk_err *err)
{
	return gk_errf(err, "activation slots on the GPU: gpukit was built without CUDA");
}

void gk_nn_cuda_use_slot(gk_nn_model *m, int from, int to)
{
}

int gk_nn_cuda_zero_grad(gk_nn_model *m, gk_err *err)
{
	return gk_errf(err, "zero gradients on the GPU: gpukit was built "
		       "without CUDA");
}

void gk_nn_cuda_memory(const gk_nn_model *m, gk_nn_mem *out)
{
	memset(out, 0, sizeof(*out));
}

uint64_t gk_nn_cuda_pinned(const gk_nn_model *m)
{
	return 0;
}

int gk_nn_cuda_upload(gk_nn_model *m, int what, gk_err *err)
{
	return 0; /* only CPU models exist in this build */
}

int gk_nn_cuda_download(gk_nn_model *m, int what, gk_err *err)
{
	return 0;
}

float *gk_nn_cuda_grads(gk_nn_model *m, size_t off)
{
	return NULL;
}

int gk_nn_cuda_grad_buckets(gk_nn_model *m, size_t head, const size_t *lo, size_t nb,
			    size_t nslot, gk_err *err)
{
	return gk_errf(err, "gradient buckets on the GPU: gpukit was built without CUDA");
}

float *gk_nn_cuda_grad_at(gk_nn_model *m, size_t off)
{
	return NULL;
}

void *gk_nn_cuda_stream(const gk_nn_model *m)
{
	return NULL;
}

void *gk_nn_cuda_param_at(const gk_nn_model *m, size_t off)
{
	return NULL;
}

gk_dtype gk_nn_cuda_param_dtype(const gk_nn_model *m)
{
	return GK_DT_F32;
}

int gk_nn_cuda_params_own(gk_nn_model *m, size_t a, size_t b, gk_err *err)
{
	return gk_errf(err, "parameters on the GPU: gpukit was built without CUDA");
}

int gk_nn_cuda_params_whole(gk_nn_model *m, int on, gk_err *err)
{
	return gk_errf(err, "parameters on the GPU: gpukit was built without CUDA");
}

int gk_nn_cuda_params_put(gk_nn_model *m, size_t off, const float *src, size_t n, gk_err *err)
{
	return gk_errf(err, "parameters on the GPU: gpukit was built without CUDA");
}

int gk_nn_cuda_moments(gk_nn_model *m, size_t lo, size_t hi, float *mom,
		       float *vel, int upload, gk_err *err)
{
	return gk_errf(err, "AdamW moments on the GPU: gpukit was built "
		       "without CUDA");
}

int gk_nn_cuda_host_adamw(gk_nn_model *m, const gk_nn_adamw *c, float lr, int64_t t,
			  float grad_scale, size_t lo, size_t hi, float *mom, float *vel,
			  gk_err *err)
{
	return gk_errf(err, "AdamW on the host of a GPU model: gpukit was built without CUDA");
}

int gk_nn_cuda_sumsq(gk_nn_model *m, const float *g, size_t n, double *sumsq,
		     gk_err *err)
{
	return gk_errf(err, "sum of squares on the GPU: gpukit was built "
		       "without CUDA");
}

int gk_nn_cuda_grad_norm(gk_nn_model *m, double *norm, gk_err *err)
{
	return gk_errf(err, "gradient norm on the GPU: gpukit was built "
		       "without CUDA");
}

int gk_nn_cuda_adamw(gk_nn_model *m, const gk_nn_adamw *c, float lr,
		     int64_t t, float grad_scale, size_t lo, size_t hi,
		     const float *g, gk_err *err)
{
	return gk_errf(err, "AdamW on the GPU: gpukit was built without CUDA");
}

float *gk_nn_cuda_params(gk_nn_model *m, size_t off)
{
	return NULL;
}

void *gk_nn_cuda_work_copy(gk_nn_model *m, size_t off, gk_dtype *dt)
{
	(void)off;
	(void)dt;
	return NULL;
}

int gk_nn_cuda_params_changed(gk_nn_model *m, gk_err *err)
{
	return gk_errf(err, "parameters on the GPU: gpukit was built without CUDA");
}

int gk_nn_cuda_tp_open(gk_nn_model *m, const struct gk_comm_config *cc, gk_err *err)
{
	return m->cu ? gk_errf(err, "tensor parallelism on the GPU: gpukit was built without CUDA")
		     : 0;
}

int gk_nn_cuda_tp_grads_bcast(gk_nn_model *m, float *g, size_t n, gk_err *err)
{
	return gk_errf(err, "tensor parallelism on the GPU: gpukit was built without CUDA");
}

int gk_nn_cuda_sumsq_once(gk_nn_model *m, const float *g, size_t lo, size_t hi, double *ss,
			  gk_err *err)
{
	return gk_errf(err, "sum of squares on the GPU: gpukit was built without CUDA");
}
