/*
 * model_cuda.c - GPT-2's buffers, forward and backward on a CUDA device:
 * the same blocks as model.c, over the kernels of the .cu files of lib/nn and
 * cuBLASLt (matmul_cuda.c), with every buffer from lib/cuda's accounted
 * allocator. The transfers and the AdamW step are model_state_cuda.c's,
 * the buffers' parallel layouts model_dist_cuda.c's, a layer's products
 * and the tensor group's collectives model_tp_cuda.c's.
 *
 * Buffers (device): the fp32 master parameters and gradients in the flat
 * layout of nn.h (same offsets as the CPU backend; a pipeline stage's
 * segments of it only, its range and on the last stage the tied wte,
 * gk_nn_cuda_segments, each flat offset found through gk_nn_cuda_index),
 * the working copy of the parameters in the activation type (bf16, or
 * the master itself in fp32/TF32; the same segments), activations laid
 * out per layer as gpt.c's alloc_acts does for the recompute mode
 * (attention's (T,T) matrix only on its matmul path: the fused kernels of
 * flash.cu keep a float a row), and one set of backward scratch, sized
 * and ordered by gk_nn_cuda_layout (launch.c).
 * Host: pinned staging for transfers, the logits of a forward without
 * targets, the token buckets of the embedding backward.
 *
 * Precision: activations and the working weights in dt; matmuls
 * accumulate in fp32 (TF32 tensor cores when asked); weight gradients
 * are accumulated by cuBLASLt straight into the fp32 gradient buffer (bf16
 * inputs, fp32 C/D), bias and LayerNorm gradients by the fp32 column sums.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/comm.h"
#include "nn/cuda_internal.h"
#include "nn/model_cuda.h"

#define WS_BYTES GK_NN_CU_WS_BYTES

/* A block's activations on the device (per layer or shared). */
typedef struct dacts {
	void *in, *out, *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fchg;
	float *ln1m, *ln1r, *ln2m, *ln2r;
} dacts;

void *gk_nn_cuda_dalloc(struct gk_nn_cuda *cu, size_t bytes, gk_cuda_mem_kind kind,
			gk_err *err)
{
	if (cu->nallocs == MAX_ALLOCS) {
		gk_errf(err, "model on the GPU: more than %d allocations",
			MAX_ALLOCS);
		return NULL;
	}
	void *p = gk_cuda_alloc(bytes, kind, err);
	if (!p)
		return NULL;
	cu->allocs[cu->nallocs++] = p;
	cu->bytes[kind] += bytes;
	return p;
}

/* 256-byte pieces, so every matmul operand starts aligned for cuBLASLt. */
static size_t r256(size_t bytes)
{
	return (bytes + 255) / 256 * 256;
}

static void *carve(char **cur, size_t bytes)
{
	void *p = *cur;
	*cur += r256(bytes);
	return p;
}

static void layer_acts(const gk_nn_model *m, int l, dacts *a)
{
	const struct gk_nn_cuda *cu = m->cu;
	size_t N = (size_t)m->o.batch * m->o.seq, C = (size_t)m->c.hidden;
	size_t T = (size_t)m->o.seq, es = cu->es;
	size_t Cq = C / (size_t)m->tp, F = 4 * C / (size_t)m->tp;
	/* the LayerNorm and residual regions' rows (gk_nn_cuda_layout) */
	size_t R = m->sp ? N / (size_t)m->tp : N;
	l -= m->l0; /* a pipeline stage holds its layers l0 .. l1-1 only */
	size_t k = m->per_layer ? (size_t)l : 0;
	size_t gl = m->fchg_per_layer ? (size_t)l : 0;
	a->in = (char *)cu->resid + (size_t)l * R * C * es;
	a->out = (char *)cu->resid + (size_t)(l + 1) * R * C * es;
	a->ln1 = (char *)cu->a_ln1 + k * R * C * es;
	a->ln1m = cu->a_ln1m + k * R;
	a->ln1r = cu->a_ln1r + k * R;
	a->qkv = (char *)cu->a_qkv + k * N * 3 * Cq * es;
	/* att: the (T,T) probabilities of the matmul path, or the fused
	 * kernels' logsumexp, one float a row */
	size_t rows = (size_t)m->o.batch * (size_t)(m->c.heads / m->tp) * T;
	a->att = (char *)cu->a_att + k * (cu->fused ? rows * 4 : rows * T * es);
	a->atty = (char *)cu->a_atty + k * N * Cq * es;
	a->res2 = (char *)cu->a_res2 + k * R * C * es;
	a->ln2 = (char *)cu->a_ln2 + k * R * C * es;
	a->ln2m = cu->a_ln2m + k * R;
	a->ln2r = cu->a_ln2r + k * R;
	a->fch = (char *)cu->a_fch + k * N * F * es;
	a->fchg = (char *)cu->a_fchg + gl * N * F * es;
}

static int alloc_all(gk_nn_model *m, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	size_t B = (size_t)m->o.batch, T = (size_t)m->o.seq;
	size_t V = (size_t)m->c.vocab, N = B * T;
	size_t P = m->nparams;
	size_t sz[GK_NN_CU_NACT], ss[GK_NN_CU_NWS];
	gk_nn_mem plan;
	m->per_layer = m->o.recompute != GK_NN_RECOMPUTE_LAYER;
	m->fchg_per_layer = m->o.recompute == GK_NN_RECOMPUTE_NONE;
	gk_nn_cuda_layout(m, cu->fused, sz, ss, &plan);

	/* the segments (the flat multiple's tail with them), zeroed at
	 * creation; bucket_grads: no gradients until gk_nn_cuda_grad_buckets */
	if (!(cu->p = gk_nn_cuda_dalloc(cu, cu->pfloats * 4, GK_CUDA_MEM_PARAMS, err)) ||
	    (!m->o.bucket_grads &&
	     !(cu->g = gk_nn_cuda_dalloc(cu, cu->sfloats * 4, GK_CUDA_MEM_GRADS, err))))
		return -1;
	if (m->o.unit_params) {
		if (gk_nn_cuda_units_alloc(m, err) < 0)
			return -1;
	} else if (cu->dt == GK_DT_F32) {
		cu->pw = cu->p;
	} else if (!(cu->pw = gk_nn_cuda_dalloc(cu, cu->sfloats * cu->es, GK_CUDA_MEM_PARAMS,
						err))) {
		/* (with the flat multiple's tail: ZeRO-1's gather of the
		 * working copy fills it too, gk_nn_cuda_work_copy) */
		return -1;
	}

	/* activations, in carve order (gk_nn_cuda_layout's) */
	char *cur = gk_nn_cuda_dalloc(cu, plan.activations, GK_CUDA_MEM_ACTS, err);
	if (!cur)
		return -1;
	cu->abase[0] = cur;
	cu->abytes = plan.activations;
	size_t i = 0;
	cu->resid = carve(&cur, sz[i++]);
	cu->lnf = carve(&cur, sz[i++]);
	cu->lnfm = carve(&cur, sz[i++]);
	cu->lnfr = carve(&cur, sz[i++]);
	cu->logits = carve(&cur, sz[i++]);
	cu->lse = carve(&cur, sz[i++]);
	cu->loss = carve(&cur, sz[i++]);
	cu->a_ln1 = carve(&cur, sz[i++]);
	cu->a_ln1m = carve(&cur, sz[i++]);
	cu->a_ln1r = carve(&cur, sz[i++]);
	cu->a_qkv = carve(&cur, sz[i++]);
	cu->a_att = carve(&cur, sz[i++]);
	cu->a_atty = carve(&cur, sz[i++]);
	cu->a_res2 = carve(&cur, sz[i++]);
	cu->a_ln2 = carve(&cur, sz[i++]);
	cu->a_ln2m = carve(&cur, sz[i++]);
	cu->a_ln2r = carve(&cur, sz[i++]);
	cu->a_fch = carve(&cur, sz[i++]);
	cu->a_fchg = carve(&cur, sz[i++]);
	cu->tok = carve(&cur, sz[i++]);
	cu->tgt = carve(&cur, sz[i++]);
	cu->uniq = carve(&cur, sz[i++]);
	cu->start = carve(&cur, sz[i++]);
	cu->pos = carve(&cur, sz[i++]);

	/* the cuBLASLt workspace, then the scratch */
	cur = gk_nn_cuda_dalloc(cu, plan.workspace, GK_CUDA_MEM_WORKSPACE, err);
	if (!cur)
		return -1;
	cu->ws = carve(&cur, WS_BYTES);
	i = 0;
	cu->q = carve(&cur, ss[i++]);
	cu->k = carve(&cur, ss[i++]);
	cu->v = carve(&cur, ss[i++]);
	cu->y = carve(&cur, ss[i++]);
	cu->dres = carve(&cur, ss[i++]);
	cu->dln = carve(&cur, ss[i++]);
	cu->datty = carve(&cur, ss[i++]);
	cu->dqkv = carve(&cur, ss[i++]);
	cu->dfc = carve(&cur, ss[i++]);
	cu->datt = carve(&cur, ss[i++]);
	cu->colsum = carve(&cur, ss[i++]);
	cu->norm = carve(&cur, ss[i++]);
	cu->tpf = carve(&cur, ss[i++]);
	cu->tpx = carve(&cur, ss[i++]);
	cu->spg = carve(&cur, ss[i++]);
	cu->sps = carve(&cur, ss[i++]);
	cu->spln = carve(&cur, ss[i++]);

	/* host: pinned staging for the parameters, moments, gradients and
	 * logits, each passing through it in pieces (GK_NN_CUDA_STAGING);
	 * no host copy of the logits until a forward without targets wants
	 * one, since a training batch's logits run to gigabytes per rank */
	cu->pin_bytes = m->o.staging ? m->o.staging : GK_NN_CUDA_STAGING;
	if (cu->pin_bytes > P * 4)
		cu->pin_bytes = P * 4;
	if (cu->pin_bytes < 4)
		return gk_errf(err, "model on the GPU: a pinned staging of %zu bytes; "
			       "4 at least", cu->pin_bytes);
	if (!(cu->pin = gk_cuda_host_alloc(cu->pin_bytes, err)))
		return -1;
	cu->h_uniq = malloc(N * sizeof(int32_t));
	cu->h_start = malloc((N + 1) * sizeof(int32_t));
	cu->h_pos = malloc(N * sizeof(int32_t));
	cu->h_count = malloc(V * sizeof(int32_t));
	cu->h_loss = malloc(N * sizeof(float));
	m->tokens = malloc(N * sizeof(int32_t));
	m->targets = malloc(N * sizeof(int32_t));
	if (!cu->h_uniq || !cu->h_start || !cu->h_pos || !cu->h_count ||
	    !cu->h_loss || !m->tokens || !m->targets)
		return gk_err_sys(err, ENOMEM, "model on the GPU: host buffers");
	return 0;
}

/*
 * The embedding's backward launched once now, on scratch, while nothing
 * is in flight. A kernel's first launch loads its module, which under
 * CUDA's lazy loading may synchronize the context (lib/comm's
 * comm_nccl.c, preload, says more; the emulation does): the encoder's
 * backward is the last kernel of the first backward, and with buckets cut
 * at layers (ZeRO-2 on a GPU) the blocks' buckets are in flight behind
 * it, so its first launch would wait for them, where no watchdog sees a
 * peer that stopped. Every other kernel of backward has run once before
 * the first bucket is complete.
 */
static int preload(gk_nn_model *m, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	size_t C = (size_t)m->c.hidden;
	cu->h_start[0] = 0;
	cu->h_start[1] = 1;
	if (GK_CUDA_CHECK(cudaMemsetAsync(cu->dres, 0, C * cu->es, cu->s), err) < 0 ||
	    GK_CUDA_CHECK(cudaMemsetAsync(cu->uniq, 0, sizeof(int32_t), cu->s), err) < 0 ||
	    GK_CUDA_CHECK(cudaMemsetAsync(cu->pos, 0, sizeof(int32_t), cu->s), err) < 0 ||
	    gk_cuda_copy(cu->start, cu->h_start, 2 * sizeof(int32_t), cu->s, err) < 0 ||
	    GK_CUDA_CHECK(cudaMemsetAsync(cu->colsum, 0, 2 * C * sizeof(float), cu->s), err) < 0)
		return -1;
	/* one token at one position, into the column sums' scratch */
	return gk_nn_cu_encoder_bwd(cu->colsum, cu->colsum + C, cu->dres, cu->dt, cu->uniq,
				    cu->start, cu->pos, 1, 1, 1, (int)C, cu->s, err);
}

int gk_nn_cuda_new(gk_nn_model *m, gk_err *err)
{
	if (gk_cuda_probe(NULL, err) < 0) {
		gk_err_prefix(err, "model on the GPU");
		return -1;
	}
	if (m->o.precision < GK_NN_BF16 || m->o.precision > GK_NN_FP32)
		return gk_errf(err, "model precision %d: unknown",
			       m->o.precision);
	struct gk_nn_cuda *cu = calloc(1, sizeof(*cu));
	if (!cu)
		return gk_err_sys(err, ENOMEM, "model on the GPU");
	m->cu = cu;
	cu->dt = m->o.precision == GK_NN_BF16 ? GK_DT_BF16 : GK_DT_F32;
	cu->es = cu->dt == GK_DT_BF16 ? 2 : 4;
	cu->xscale = 1.0f;
	/* a pipeline stage holds its segments only; the master too, but
	 * under unit_params */
	cu->pfloats = cu->sfloats = gk_nn_cuda_segments(m, cu->slo, cu->shi, cu->sat);
	memcpy(cu->plo, cu->slo, sizeof(cu->plo));
	memcpy(cu->phi, cu->shi, sizeof(cu->phi));
	memcpy(cu->pat, cu->sat, sizeof(cu->pat));
	if (m->o.unit_params) {
		size_t k = m->o.flat_multiple > 1 ? (size_t)m->o.flat_multiple : 1;
		if (m->o.unit_params < 1 || m->o.unit_params > (int)m->c.layers ||
		    m->o.shard_rank < 0 || (size_t)m->o.shard_rank >= k)
			return gk_errf(err, "model on the GPU: %d parameter units for %lld "
				       "blocks, rank %d of %zu", m->o.unit_params,
				       (long long)m->c.layers, m->o.shard_rank, k);
		/* this rank's pieces, each held at its segment's piece length
		 * (the last one's padding unused); without a pipeline one, the
		 * flat multiple's equal range with its padding */
		cu->pfloats = 0;
		for (int j = 0; j < 2; j++) {
			size_t per = gk_nn_pp_piece(m, m->ppr, m->o.shard_rank, (int)k, j,
						    &cu->plo[j], &cu->phi[j]);
			cu->pat[j] = cu->pfloats;
			cu->pfloats += per;
		}
		if (m->pp == 1)
			cu->phi[0] = cu->plo[0] + cu->pfloats;
	}
	if ((cu->fused = gk_nn_attention_fused(&m->c, &m->o, err)) < 0 ||
	    (cu->gelu_epi = gk_nn_gelu_epilogue(&m->c, &m->o, err)) < 0)
		return -1; /* gk_nn_free calls gk_nn_cuda_free */
	if (gk_cuda_stream_new(&cu->s, err) < 0 || alloc_all(m, err) < 0 ||
	    gk_nn_blas_new(&cu->blas, (gk_nn_precision)m->o.precision, cu->ws,
			   WS_BYTES, cu->s, err) < 0)
		return -1; /* gk_nn_free calls gk_nn_cuda_free */
	if ((cu->g && GK_CUDA_CHECK(cudaMemsetAsync(cu->g, 0, cu->sfloats * 4, cu->s),
				    err) < 0) ||
	    GK_CUDA_CHECK(cudaMemsetAsync(cu->p, 0, cu->pfloats * 4, cu->s), err) < 0 ||
	    (cu->pw && cu->pw != cu->p &&
	     GK_CUDA_CHECK(cudaMemsetAsync(cu->pw, 0, cu->sfloats * cu->es, cu->s), err) < 0) ||
	    preload(m, err) < 0)
		return -1;
	return gk_cuda_stream_sync(cu->s, err);
}

void gk_nn_cuda_free(gk_nn_model *m)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu)
		return;
	if (cu->s)
		gk_cuda_stream_sync(cu->s, NULL);
	gk_nn_blas_free(cu->blas);
	gk_comm_close(cu->tpd);
	for (int i = 0; i < cu->nallocs; i++)
		gk_cuda_free(cu->allocs[i]);
	gk_cuda_host_free(cu->pin);
	if (cu->s)
		gk_cuda_stream_free(cu->s);
	free(cu->h_uniq);
	free(cu->h_start);
	free(cu->h_pos);
	free(cu->h_count);
	free(cu->h_loss);
	free(cu->blo);
	free(cu->uslot);
	gk_cuda_free(cu->whole);
	free(m->logits);
	free(m->tokens);
	free(m->targets);
	m->logits = NULL;
	m->tokens = m->targets = NULL;
	free(cu);
	m->cu = NULL;
}

void gk_nn_cuda_memory(const gk_nn_model *m, gk_nn_mem *out)
{
	const struct gk_nn_cuda *cu = m->cu;
	memset(out, 0, sizeof(*out));
	if (!cu)
		return;
	out->parameters = cu->bytes[GK_CUDA_MEM_PARAMS];
	out->gradients = cu->bytes[GK_CUDA_MEM_GRADS];
	out->activations = cu->bytes[GK_CUDA_MEM_ACTS];
	out->workspace = cu->bytes[GK_CUDA_MEM_WORKSPACE];
	out->optimizer = cu->bytes[GK_CUDA_MEM_OPTIM];
	/* (the workspace's carve: gk_nn_cuda_layout's sizes) */
	size_t sz[GK_NN_CU_NACT], ss[GK_NN_CU_NWS];
	gk_nn_mem plan;
	gk_nn_cuda_layout(m, cu->fused, sz, ss, &plan);
	out->tp_buffers = plan.tp_buffers;
}

uint64_t gk_nn_cuda_pinned(const gk_nn_model *m)
{
	return m->cu && m->cu->pin ? m->cu->pin_bytes : 0;
}

/* ---- forward ------------------------------------------------------------------- */

/* the working copy of element off (unit_params: in its unit's buffer) */
#define P(off) ((const char *)gk_nn_cuda_param_at(m, off))

/* ZeRO-3's units around block l's use of them (gk_nn_set_param_fn): the
 * caller's gathers, which it waits for before a kernel reads the unit */
static int param_use(gk_nn_model *m, int phase, int l, gk_err *err)
{
	return m->pfn ? m->pfn(phase, l, m->pctx, err) : 0;
}

/* One batched product over the B*NH heads: D (M,N) = alpha op(A) op(B),
 * each operand its own (rows, ld) per head, heads contiguous. */
static int mm_heads(gk_nn_model *m, int ta, int tb, int M, int N, int K,
		    float alpha, const void *A, int lda, long long sA,
		    const void *Bm, int ldb, long long sB, void *D, int ldd,
		    long long sD, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	gk_nn_gemm g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .A = A,
			.lda = lda, .sA = sA, .B = Bm, .ldb = ldb, .sB = sB,
			.D = D, .ldd = ldd, .sD = sD, .alpha = alpha,
			.batch = m->o.batch * (int)m->c.heads / m->tp, .dt = cu->dt,
			.ddt = cu->dt};
	return gk_nn_blas_gemm(cu->blas, &g, err);
}

static int split_qkv(gk_nn_model *m, const void *qkv, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	/* this rank's heads (tensor parallelism): C their channels */
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden / m->tp;
	int NH = (int)m->c.heads / m->tp, hs = C / NH;
	if (gk_nn_cu_heads_split(cu->q, qkv, cu->dt, B, T, NH, hs, 3 * C, 0,
				 cu->s, err) < 0 ||
	    gk_nn_cu_heads_split(cu->k, qkv, cu->dt, B, T, NH, hs, 3 * C, C,
				 cu->s, err) < 0 ||
	    gk_nn_cu_heads_split(cu->v, qkv, cu->dt, B, T, NH, hs, 3 * C,
				 2 * C, cu->s, err) < 0)
		return -1;
	return 0;
}

static int attention_fwd(gk_nn_model *m, const dacts *a, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	/* this rank's heads (tensor parallelism): C their channels */
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden / m->tp;
	int NH = (int)m->c.heads / m->tp, hs = C / NH;
	long long th = (long long)T * hs, tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);
	if (cu->fused) /* a->att holds each row's logsumexp */
		return gk_nn_cu_flash_fwd(a->atty, (float *)a->att, a->qkv,
					  m->o.precision, B, T, NH, hs, cu->s, err);
	if (split_qkv(m, a->qkv, err) < 0 ||
	    mm_heads(m, 0, 1, T, T, hs, scale, cu->q, hs, th, cu->k, hs, th,
		     a->att, T, tt, err) < 0 ||
	    gk_nn_cu_softmax_causal_fwd(a->att, cu->dt,
					(uint64_t)B * NH * T, T, cu->s,
					err) < 0 ||
	    mm_heads(m, 0, 0, T, hs, T, 1.0f, a->att, T, tt, cu->v, hs, th,
		     cu->y, hs, th, err) < 0)
		return -1;
	return gk_nn_cu_heads_merge(a->atty, cu->y, cu->dt, B, T, NH, hs, C, 0,
				    cu->s, err);
}

/* fchg = gelu(x @ c_fc + b), x ln2 (under sequence parallelism the
 * group's, gathered), fch the GELU's input: in the matmul's epilogue,
 * or the plain matmul and gelu.cu's kernel */
static int mlp_fc_fwd(gk_nn_model *m, const dacts *a, const void *x, const void *w,
		      const void *b, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int N = m->o.batch * m->o.seq, C = (int)m->c.hidden;
	TP_WIDTHS(m);
	if (cu->gelu_epi)
		return gk_nn_cuda_mm_fwd_gelu(m, a->fchg, a->fch, x, w, b, N, C, F, err);
	if (gk_nn_cuda_mm_fwd(m, a->fch, x, w, b, NULL, N, C, F, err) < 0)
		return -1;
	return gk_nn_cu_gelu_fwd(a->fchg, a->fch, cu->dt, (size_t)N * F, cu->s, err);
}

static int block_fwd(gk_nn_model *m, int l, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int N = m->o.batch * m->o.seq, C = (int)m->c.hidden;
	int R = m->sp ? N / m->tp : N;
	const gk_nn_block_off *o = &m->blk[l];
	float eps = m->c.ln_eps;
	TP_WIDTHS(m);
	dacts a;
	layer_acts(m, l, &a);
	const void *x;
	/* under tensor parallelism (tp.c) c_attn and c_fc column-parallel
	 * (f: the replicated LayerNorm output is every rank's input, under
	 * sequence parallelism the group's R rows each gathered), the
	 * projections row-parallel (g: gk_nn_cuda_proj_fwd) */
#define W(off) ((const char *)gk_nn_cuda_param_at(m, off))
	if (gk_nn_cu_layernorm_fwd(a.ln1, a.ln1m, a.ln1r, a.in, W(o->ln1w),
				   W(o->ln1b), cu->dt, R, C, eps, cu->s,
				   err) < 0 ||
	    !(x = gk_nn_cuda_f_input(m, a.ln1, err)) ||
	    gk_nn_cuda_mm_fwd(m, a.qkv, x, W(o->qkvw), W(o->qkvb), NULL, N, C, 3 * Cq,
			      err) < 0 ||
	    attention_fwd(m, &a, err) < 0 ||
	    gk_nn_cuda_proj_fwd(m, a.res2, a.atty, W(o->attprojw), W(o->attprojb), a.in, N,
				Cq, C, err) < 0 ||
	    gk_nn_cu_layernorm_fwd(a.ln2, a.ln2m, a.ln2r, a.res2, W(o->ln2w),
				   W(o->ln2b), cu->dt, R, C, eps, cu->s,
				   err) < 0 ||
	    !(x = gk_nn_cuda_f_input(m, a.ln2, err)) ||
	    mlp_fc_fwd(m, &a, x, W(o->fcw), W(o->fcb), err) < 0 ||
	    gk_nn_cuda_proj_fwd(m, a.out, a.fchg, W(o->fcprojw), W(o->fcprojb), a.res2, N,
				F, C, err) < 0)
		return -1;
#undef W
	return 0;
}

/*
 * The token and position embeddings; under tensor parallelism
 * vocabulary-parallel: this rank's masked lookup in fp32, summed over
 * the group (one row's is nonzero, so the sum is that row exactly), then
 * the positions added as encoder.cu adds them.
 */
static int embed_fwd(gk_nn_model *m, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden;
	if (m->tp == 1)
		return gk_nn_cu_encoder_fwd(cu->resid, cu->tok, P(m->wte), P(m->wpe), cu->dt, B,
					    T, C, cu->s, err);
	int64_t Vl = m->c.vocab_pad / m->tp;
	if (gk_nn_cu_tp_embed(cu->tpf, cu->tok, P(m->wte), cu->dt, (int64_t)m->tpr * Vl, (int)Vl,
			      B * T, C, cu->s, err) < 0)
		return -1;
	if (m->sp) {
		/* the lookups' sum scattered by positions (model.c's), then
		 * each of this rank's rows its position */
		int Tl = T / m->tp;
		if (gk_nn_cuda_sp_reduce(m, cu->tpf, cu->tpf, err) < 0)
			return -1;
		return gk_nn_cu_tp_add_pos(cu->resid, cu->tpf, P(m->wpe), cu->dt, B, Tl,
					   m->tpr * Tl, C, cu->s, err);
	}
	if (gk_nn_cuda_tp_reduce(m, cu->tpf, (size_t)B * T * C, GK_COMM_SUM, err) < 0)
		return -1;
	return gk_nn_cu_tp_add_pos(cu->resid, cu->tpf, P(m->wpe), cu->dt, B, T, 0, C, cu->s, err);
}

int gk_nn_cuda_forward(gk_nn_model *m, const int32_t *tokens,
		       const int32_t *targets, float *loss, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int B = m->o.batch, T = m->o.seq, N = B * T, C = (int)m->c.hidden;
	int V = (int)m->c.vocab;
	int Vp = (int)m->c.vocab_pad;
	size_t es = cu->es;
	TP_WIDTHS(m);

	if (!cu->uploaded)
		return gk_errf(err, "forward on the GPU: the parameters were "
			       "never uploaded (gk_nn_cuda_upload)");
	memcpy(m->tokens, tokens, (size_t)N * 4);
	if (gk_cuda_copy(cu->tok, tokens, (size_t)N * 4, cu->s, err) < 0)
		return -1;
	/* the embedding's backward needs the token buckets: a training
	 * forward's, and a pipeline's first stage's, whose targets are the
	 * last stage's (its first chunk's under the interleaved schedule) */
	if (targets && gk_cuda_copy(cu->tgt, targets, (size_t)N * 4, cu->s, err) < 0)
		return -1;
	if (targets || (m->pp > 1 && m->l0 == 0)) {
		if (targets)
			memcpy(m->targets, targets, (size_t)N * 4);
		cu->nb = gk_nn_token_buckets(tokens, N, V, cu->h_uniq,
					     cu->h_start, cu->h_pos,
					     cu->h_count);
		if (m->tp > 1)
			gk_nn_cuda_tp_buckets(m);
		if (gk_cuda_copy(cu->uniq, cu->h_uniq, (size_t)cu->nb * 4, cu->s,
				 err) < 0 ||
		    gk_cuda_copy(cu->start, cu->h_start,
				 (size_t)(cu->nb + 1) * 4, cu->s, err) < 0 ||
		    gk_cuda_copy(cu->pos, cu->h_pos, (size_t)N * 4, cu->s,
				 err) < 0)
			return -1;
	}
	/* a pipeline stage: the embedding on the first, its layers, the head
	 * on the last (the others leave their output for the next stage in
	 * gk_nn_pp_output; a later one's input is in gk_nn_pp_input); under
	 * the interleaved schedule the first chunk's and the last's */
	if (m->l0 == 0 && embed_fwd(m, err) < 0)
		return -1;
	for (int l = m->l0; l < m->l1; l++)
		if (param_use(m, GK_NN_FWD_PRE, l, err) < 0 || block_fwd(m, l, err) < 0 ||
		    param_use(m, GK_NN_FWD_POST, l, err) < 0)
			return -1;
	if (m->l1 < (int)m->c.layers) {
		m->have_targets = 0;
		m->have_fwd = 1;
		return gk_cuda_stream_sync(cu->s, err);
	}
	int R = m->sp ? N / m->tp : N;
	const char *last = (const char *)cu->resid + (size_t)(m->l1 - m->l0) * R * C * es;
	/* under tensor parallelism this rank's vocabulary columns (of every
	 * row: under sequence parallelism the group's lnf gathered) */
	gk_nn_gemm head = {.tb = 1, .M = N, .N = Vl, .K = C, .lda = C,
			   .B = P(m->wte), .ldb = C, .D = cu->logits, .ldd = Vl,
			   .alpha = 1.0f, .batch = 1, .dt = cu->dt, .ddt = cu->dt};
	if (gk_nn_cu_layernorm_fwd(cu->lnf, cu->lnfm, cu->lnfr, last,
				   P(m->lnfw), P(m->lnfb), cu->dt,
				   R, C, m->c.ln_eps, cu->s, err) < 0 ||
	    !(head.A = gk_nn_cuda_f_input(m, cu->lnf, err)) ||
	    gk_nn_blas_gemm(cu->blas, &head, err) < 0)
		return -1;

	m->have_targets = targets != NULL;
	if (!targets) {
		/* inference: the caller reads the logits (gk_nn_logits),
		 * copied through the staging buffer a piece at a time */
		size_t n = (size_t)N * Vl, per = cu->pin_bytes / es;
		if (!m->logits && !(m->logits = malloc(n * sizeof(float))))
			return gk_err_sys(err, ENOMEM, "model on the GPU: %zu "
					  "logits on the host", n);
		for (size_t o = 0; o < n; o += per) {
			size_t k = n - o < per ? n - o : per;
			if (gk_cuda_copy(cu->pin, (char *)cu->logits + o * es,
					 k * es, cu->s, err) < 0)
				return -1;
			gk_convert(m->logits + o, GK_DT_F32, cu->pin, cu->dt,
				   k);
		}
		m->have_fwd = 1;
		return 0;
	}
	double n = 0.0;
	for (int i = 0; i < N; i++)
		n += targets[i] >= 0;
	/* training: loss and dlogits in one kernel, with backward's dloss
	 * for the scale it is expected to be given (gk_nn_set_grad_scale's,
	 * else the last one's; it rescales the head's GEMMs if it is given
	 * another) */
	float xs = m->gscale != 0.0f ? m->gscale : cu->xscale;
	float dl = n > 0 ? (float)(xs / n) : 0.0f;
	cu->xfused = m->eval ? 0.0f : xs;
	if ((m->tp > 1 ? gk_nn_cuda_tp_xent(m, dl, !m->eval, err) :
	     m->eval ? gk_nn_cu_xent_fwd(cu->lse, cu->loss, cu->logits,
					 cu->tgt, cu->dt, N, V, Vp, cu->s, err)
		     : gk_nn_cu_xent_fused(cu->lse, cu->loss, cu->logits,
					   cu->tgt, cu->dt, dl,
					   N, V, Vp, cu->s, err)) < 0 ||
	    gk_cuda_copy(cu->h_loss, cu->loss, (size_t)N * 4, cu->s, err) < 0)
		return -1;
	/* rows in order, in double, as gk_nn_cpu_xent_fwd */
	double s = 0.0;
	for (int i = 0; i < N; i++)
		if (targets[i] >= 0)
			s += cu->h_loss[i];
	m->nvalid = n;
	m->loss = n > 0 ? (float)(s / n) : NAN;
	if (loss)
		*loss = m->loss;
	m->have_fwd = 1;
	return 0;
}

/* ---- backward ------------------------------------------------------------------ */

static int attention_bwd(gk_nn_model *m, const dacts *a, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	/* this rank's heads (tensor parallelism): C their channels */
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden / m->tp;
	int NH = (int)m->c.heads / m->tp, hs = C / NH;
	long long th = (long long)T * hs, tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);
	gk_cuda_stream s = cu->s;
	if (cu->fused) /* recomputed from q, k, v, out and lse */
		return gk_nn_cu_flash_bwd(cu->dqkv, (float *)cu->datt,
					  cu->datty, a->qkv, a->atty,
					  (const float *)a->att, m->o.precision, B,
					  T, NH, hs, s, err);
	/* dy in y; q, k, v again (later layers overwrote them). Reuse as
	 * each is consumed (one stream keeps the order): dv into v after
	 * datt, dq into y after dv, dk into k after dq. */
	if (gk_nn_cu_heads_split(cu->y, cu->datty, cu->dt, B, T, NH, hs, C, 0,
				 s, err) < 0 ||
	    split_qkv(m, a->qkv, err) < 0 ||
	    mm_heads(m, 0, 1, T, T, hs, 1.0f, cu->y, hs, th, cu->v, hs, th,
		     cu->datt, T, tt, err) < 0 ||
	    mm_heads(m, 1, 0, T, hs, T, 1.0f, a->att, T, tt, cu->y, hs, th,
		     cu->v, hs, th, err) < 0 ||
	    gk_nn_cu_heads_merge(cu->dqkv, cu->v, cu->dt, B, T, NH, hs, 3 * C,
				 2 * C, s, err) < 0 ||
	    gk_nn_cu_softmax_causal_bwd(cu->datt, a->att, cu->dt,
					(uint64_t)B * NH * T, T, scale, s,
					err) < 0 ||
	    mm_heads(m, 0, 0, T, hs, T, 1.0f, cu->datt, T, tt, cu->k, hs, th,
		     cu->y, hs, th, err) < 0 ||
	    gk_nn_cu_heads_merge(cu->dqkv, cu->y, cu->dt, B, T, NH, hs, 3 * C,
				 0, s, err) < 0 ||
	    mm_heads(m, 1, 0, T, hs, T, 1.0f, cu->datt, T, tt, cu->q, hs, th,
		     cu->k, hs, th, err) < 0)
		return -1;
	return gk_nn_cu_heads_merge(cu->dqkv, cu->k, cu->dt, B, T, NH, hs,
				    3 * C, C, s, err);
}

/*
 * A LayerNorm's backward over the rows this rank holds: dinp += d input,
 * the gradients of its weight and bias (at w and b of the flat buffers)
 * += theirs. Under sequence parallelism a rank's rows give part of those
 * sums: they are made in spln, summed over the group, then added, so
 * every rank holds the same replicated gradient (model.c's ln_bwd).
 */
static int ln_bwd(gk_nn_model *m, void *dinp, size_t w, size_t b, const void *dout,
		  const void *inp, const float *mean, const float *rstd, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int N = m->o.batch * m->o.seq, C = (int)m->c.hidden;
	const void *pw = gk_nn_cuda_param_at(m, w);
	float *gw = gk_nn_cuda_grad_at(m, w), *gb = gk_nn_cuda_grad_at(m, b);
	if (!m->sp)
		return gk_nn_cu_layernorm_bwd(dinp, gw, gb, cu->colsum, dout, inp, pw, mean, rstd,
					      cu->dt, N, C, cu->s, err);
	float *sum = cu->spln;
	if (GK_CUDA_CHECK(cudaMemsetAsync(sum, 0, 2 * (size_t)C * sizeof(float), cu->s),
			  err) < 0 ||
	    gk_nn_cu_layernorm_bwd(dinp, sum, sum + C, cu->colsum, dout, inp, pw, mean, rstd,
				   cu->dt, N / m->tp, C, cu->s, err) < 0 ||
	    gk_nn_cuda_tp_reduce(m, sum, 2 * (size_t)C, GK_COMM_SUM, err) < 0)
		return -1;
	return gk_nn_cu_sp_ln_add(gw, gb, sum, C, cu->s, err);
}

/* dres holds d/d(block output); on return d/d(block input) */
static int block_bwd(gk_nn_model *m, int l, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int N = m->o.batch * m->o.seq, C = (int)m->c.hidden;
	const gk_nn_block_off *o = &m->blk[l];
	TP_WIDTHS(m);
	dacts a;
	layer_acts(m, l, &a);
	/* d of the row-parallel outputs and the column-parallel inputs: under
	 * sequence parallelism the group's rows gathered (g's backward, and
	 * f's input again), else dres and the LayerNorms' own */
	const void *dy, *x;

	if (m->o.recompute == GK_NN_RECOMPUTE_LAYER) {
		if (block_fwd(m, l, err) < 0)
			return -1;
	} else if (m->o.recompute == GK_NN_RECOMPUTE_GELU) {
		if (gk_nn_cu_gelu_fwd(a.fchg, a.fch, cu->dt, (size_t)N * F,
				      cu->s, err) < 0)
			return -1;
	}
	/* under tensor parallelism dres passes through g unchanged to every
	 * rank's rows of the projections; the column-parallel layers' input
	 * gradients are summed over the group (f, gk_nn_cuda_mm_bwd's f) */
#define W(off) ((const char *)gk_nn_cuda_param_at(m, off))
#define G(off) gk_nn_cuda_grad_at(m, off)
	/*
	 * dfc: d(c_proj's input) times gelu'(fch), in the epilogue or by
	 * gelu.cu's kernel. In fp32 and TF32 the epilogue sums c_fc's bias
	 * gradient too (DGELU_BGRAD); in bf16 that sum would be bf16 (D's
	 * type, cublasLt.h) where colsum.cu's is fp32, so colsum.cu sums it.
	 */
	float *fcb = cu->gelu_epi && cu->dt == GK_DT_F32 ? G(o->fcb) : NULL;
	if (!(dy = gk_nn_cuda_f_input(m, cu->dres, err)) ||
	    gk_nn_cuda_mm_bwd(m, cu->dfc, G(o->fcprojw), G(o->fcprojb), fcb, dy,
			      a.fchg, W(o->fcprojw), cu->gelu_epi ? a.fch : NULL, 0, N, F,
			      C, err) < 0 ||
	    (!cu->gelu_epi &&
	     gk_nn_cu_gelu_bwd(cu->dfc, a.fch, cu->dt, (size_t)N * F, cu->s,
			       err) < 0) ||
	    !(x = gk_nn_cuda_f_input(m, a.ln2, err)) ||
	    gk_nn_cuda_mm_bwd(m, cu->dln, G(o->fcw), fcb ? NULL : G(o->fcb), NULL, cu->dfc, x,
			      W(o->fcw), NULL, 1, N, C, F, err) < 0 ||
	    ln_bwd(m, cu->dres, o->ln2w, o->ln2b, cu->dln, a.res2, a.ln2m, a.ln2r,
		   err) < 0 ||
	    !(dy = gk_nn_cuda_f_input(m, cu->dres, err)) ||
	    gk_nn_cuda_mm_bwd(m, cu->datty, G(o->attprojw), G(o->attprojb), NULL, dy,
			      a.atty, W(o->attprojw), NULL, 0, N, Cq, C, err) < 0 ||
	    attention_bwd(m, &a, err) < 0 ||
	    !(x = gk_nn_cuda_f_input(m, a.ln1, err)) ||
	    gk_nn_cuda_mm_bwd(m, cu->dln, G(o->qkvw), G(o->qkvb), NULL, cu->dqkv, x,
			      W(o->qkvw), NULL, 1, N, C, 3 * Cq, err) < 0 ||
	    ln_bwd(m, cu->dres, o->ln1w, o->ln1b, cu->dln, a.in, a.ln1m, a.ln1r,
		   err) < 0)
		return -1;
#undef G
#undef W
	return 0;
}

/*
 * ready() is told about gradients whose kernels are queued (nn.h): it
 * orders its work after them on the stream, so the device never waits
 * for the host between layers.
 */
static int notify(gk_nn_model *m, gk_nn_ready_fn ready, void *ctx, size_t off,
		  gk_err *err)
{
	(void)m;
	return ready ? ready(off, ctx, err) : 0;
}

int gk_nn_cuda_backward(gk_nn_model *m, float scale, gk_nn_ready_fn ready,
			void *ctx, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int B = m->o.batch, T = m->o.seq, N = B * T, C = (int)m->c.hidden;
	int V = (int)m->c.vocab;
	int Vp = (int)m->c.vocab_pad;
	size_t es = cu->es;
	TP_WIDTHS(m);
	int64_t v0;
	int nv;
	gk_nn_cuda_vocab_slice(m, &v0, &nv);
	m->have_fwd = 0; /* the logits become dlogits */

	float dloss = m->nvalid > 0 ? (float)(scale / m->nvalid) : 0.0f;
	/* dlogits the forward wrote for another scale: the head's GEMMs
	 * make up the difference (1 when it is the expected one) */
	float alpha = cu->xfused != 0.0f ? scale / cu->xfused : 1.0f;
	int unfused = cu->xfused == 0.0f;
	cu->xfused = 0.0f;
	if (scale != 0.0f && isfinite(scale))
		cu->xscale = scale;
	/* under tensor parallelism this rank's vocabulary columns, and d lnf
	 * summed over the group (f before the head) */
	gk_nn_gemm gi = {.M = N, .N = C, .K = Vl, .A = cu->logits, .lda = Vl,
			 .B = P(m->wte), .ldb = C, .D = cu->dln, .ldd = C,
			 .alpha = alpha, .batch = 1, .dt = cu->dt, .ddt = cu->dt};
	float *gwte = gk_nn_cuda_grad_at(m, m->wte);
	gk_nn_gemm gw = {.ta = 1, .M = Vl, .N = C, .K = N, .A = cu->logits,
			 .lda = Vl, .B = cu->lnf, .ldb = C, .D = gwte,
			 .ldd = C, .C = gwte, .alpha = alpha, .batch = 1,
			 .dt = cu->dt, .ddt = GK_DT_F32};
	int R = m->sp ? N / m->tp : N;
	const char *last = (const char *)cu->resid + (size_t)(m->l1 - m->l0) * R * C * es;
	/* a pipeline stage (chunk) before the last: dres holds d output (the
	 * caller's, gk_nn_pp_grad) */
	if (m->l1 < (int)m->c.layers)
		goto blocks;
	/* (under sequence parallelism wte's gradient reads lnf gathered
	 * again, as the blocks' column-parallel weights do) */
	if ((unfused && (m->tp > 1 ? gk_nn_cu_tp_xent_bwd(cu->logits, cu->lse, cu->tgt, cu->dt,
							  dloss, v0, N, nv, Vl, cu->s, err)
				   : gk_nn_cu_xent_bwd(cu->logits, cu->lse, cu->tgt, cu->dt,
						       dloss, N, V, Vp, cu->s, err)) < 0) ||
	    gk_nn_cuda_f_grad(m, &gi, cu->dln, N, C, err) < 0 ||
	    !(gw.B = gk_nn_cuda_f_input(m, cu->lnf, err)) ||
	    gk_nn_blas_gemm(cu->blas, &gw, err) < 0 ||
	    GK_CUDA_CHECK(cudaMemsetAsync(cu->dres, 0, (size_t)R * C * es,
					  cu->s), err) < 0 ||
	    ln_bwd(m, cu->dres, m->lnfw, m->lnfb, cu->dln, last, cu->lnfm, cu->lnfr,
		   err) < 0 ||
	    notify(m, ready, ctx, m->lnfw, err) < 0)
		return -1;
blocks:
	for (int l = m->l1 - 1; l >= m->l0; l--)
		if (param_use(m, GK_NN_BWD_PRE, l, err) < 0 || block_bwd(m, l, err) < 0 ||
		    notify(m, ready, ctx, m->blk[l].ln1w, err) < 0 ||
		    param_use(m, GK_NN_BWD_POST, l, err) < 0)
			return -1;
	/* a later stage (chunk): dres is d input, for the previous one */
	if (m->l0 > 0)
		return notify(m, ready, ctx, 0, err) < 0 ? -1 : gk_cuda_stream_sync(cu->s, err);
	/* every row's d embedding (under sequence parallelism the group's
	 * rows gathered: the reduce-scatter's backward) */
	const void *dy = gk_nn_cuda_f_input(m, cu->dres, err);
	if (!dy ||
	    gk_nn_cu_encoder_bwd(gwte, gk_nn_cuda_grad_at(m, m->wpe), dy, cu->dt,
				 cu->uniq, cu->start, cu->pos, cu->nb, B, T, C,
				 cu->s, err) < 0 ||
	    notify(m, ready, ctx, 0, err) < 0)
		return -1;
	return gk_cuda_stream_sync(cu->s, err);
}

float *gk_nn_cuda_grads(gk_nn_model *m, size_t off)
{
	struct gk_nn_cuda *cu = m->cu;
	size_t i = cu && cu->g ? gk_nn_cuda_index(cu->slo, cu->shi, cu->sat, off, off) : SIZE_MAX;
	return i == SIZE_MAX ? NULL : cu->g + i;
}

void *gk_nn_cuda_stream(const gk_nn_model *m)
{
	return m->cu ? (void *)m->cu->s : NULL;
}

int gk_nn_cuda_zero_grad(gk_nn_model *m, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!m->o.bucket_grads) {
		/* each segment's gradients (the flat multiple's tail stays zero) */
		for (int k = 0; k < 2; k++) {
			size_t hi = cu->shi[k] < m->nparams ? cu->shi[k] : m->nparams;
			if (hi > cu->slo[k] &&
			    GK_CUDA_CHECK(cudaMemsetAsync(cu->g + cu->sat[k], 0,
							  (hi - cu->slo[k]) * 4, cu->s), err) < 0)
				return -1;
		}
		return 0;
	}
	if (!cu->blo) /* no buckets yet */
		return 0;
	if (GK_CUDA_CHECK(cudaMemsetAsync(cu->g, 0, (cu->ghead ? cu->ghead : 1) * 4, cu->s),
			  err) < 0)
		return -1;
	for (size_t k = 0; k < cu->nslot && cu->slot_len; k++)
		if (GK_CUDA_CHECK(cudaMemsetAsync(cu->slot[k], 0, cu->slot_len * 4, cu->s),
				  err) < 0)
			return -1;
	return 0;
}
