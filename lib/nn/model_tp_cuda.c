/*
 * model_tp_cuda.c - a CUDA model's layer products and its tensor group:
 * the GEMMs of a layer's forward and backward (cuBLASLt, matmul_cuda.c),
 * and around them tensor parallelism's collectives on the group's NCCL
 * communicator (tp.c's split, model.c's order): the f and g operators,
 * sequence parallelism's all-gather and reduce-scatter of the LayerNorm
 * regions' rows, and the vocabulary-parallel embedding's buckets and
 * cross-entropy's sums. model_cuda.c's forward and backward call them.
 */
#include <stdlib.h>

#include "comm/comm.h"
#include "nn/cuda_internal.h"
#include "nn/model_cuda.h"

/* out (N,OC) = inp (N,IC) @ w (IC,OC) [+ bias] [+ res] */
int gk_nn_cuda_mm_fwd(gk_nn_model *m, void *out, const void *inp, const void *w,
		      const void *bias, const void *res, int N, int IC, int OC,
		      gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	gk_nn_gemm g = {.M = N, .N = OC, .K = IC, .A = inp, .lda = IC,
			.B = w, .ldb = OC, .D = out, .ldd = OC, .C = res,
			.bias = bias, .alpha = 1.0f, .batch = 1, .dt = cu->dt,
			.ddt = cu->dt};
	return gk_nn_blas_gemm(cu->blas, &g, err);
}

/* The MLP's c_fc with the GELU in the epilogue: out (N,OC) =
 * gelu(inp @ w + bias), pre (N,OC) = inp @ w + bias (GELU_AUX_BIAS). */
int gk_nn_cuda_mm_fwd_gelu(gk_nn_model *m, void *out, void *pre, const void *inp,
			   const void *w, const void *bias, int N, int IC, int OC,
			   gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	gk_nn_gemm g = {.M = N, .N = OC, .K = IC, .A = inp, .lda = IC,
			.B = w, .ldb = OC, .D = out, .ldd = OC, .bias = bias,
			.alpha = 1.0f, .batch = 1, .dt = cu->dt, .ddt = cu->dt,
			.gelu = GK_NN_GEMM_GELU, .aux = pre, .ldaux = OC};
	return gk_nn_blas_gemm(cu->blas, &g, err);
}

static int no_tpd(gk_nn_model *m, gk_err *err)
{
	return gk_errf(err, "tensor group rank %d of %d on the GPU: no NCCL communicator "
		       "(gk_nn_cuda_tp_open)", m->tpr, m->tp);
}

/*
 * Tensor parallelism's collectives (tp.c): the group's op over n floats
 * of the device at x, in place, on the model's stream; the bytes sent
 * counted as model.c counts them, so the step's tp_bytes are the CPU's.
 */
int gk_nn_cuda_tp_reduce(gk_nn_model *m, float *x, size_t n, gk_comm_op op, gk_err *err)
{
	if (!m->cu->tpd)
		return no_tpd(m, err);
	m->tp_bytes += n * sizeof(float);
	return gk_comm_allreduce(m->cu->tpd, x, x, n, GK_DT_F32, op, NULL, err);
}

int gk_nn_cuda_tp_grads_bcast(gk_nn_model *m, float *g, size_t n, gk_err *err)
{
	if (!m->cu->tpd)
		return no_tpd(m, err);
	return gk_comm_broadcast(m->cu->tpd, g, g, n, GK_DT_F32, 0, err);
}

/*
 * Sequence parallelism (tp.c; model.c's sp_gather and sp_reduce): the
 * LayerNorm and residual regions hold R = N/tp rows, this rank's T/tp
 * positions of each sequence, in the order (B, T/tp, C). sp_gather puts
 * the group's local (R,C) rows together into spg (B,T,C), in the
 * activation type (f forward, g backward: an all-gather, exact in any
 * type, its bytes a rank's part); gk_nn_cuda_sp_reduce sums the group's
 * fp32 partial full (B,T,C) and leaves this rank's rows in local (R,C),
 * fp32 (g forward, f backward: a reduce-scatter; local may be full
 * itself).
 */
static int sp_gather(gk_nn_model *m, const void *local, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden;
	size_t n = (size_t)B * T / (size_t)m->tp * C;
	if (!cu->tpd)
		return no_tpd(m, err);
	m->tp_bytes += n * cu->es;
	if (gk_comm_allgather(cu->tpd, local, cu->sps, n, cu->dt, NULL, err) < 0)
		return -1;
	return gk_nn_cu_sp_move(cu->spg, cu->sps, cu->dt, B, T, m->tp, C, 0, cu->s, err);
}

int gk_nn_cuda_sp_reduce(gk_nn_model *m, const float *full, float *local, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int B = m->o.batch, T = m->o.seq, C = (int)m->c.hidden;
	size_t n = (size_t)B * T / (size_t)m->tp * C;
	if (!cu->tpd)
		return no_tpd(m, err);
	if (gk_nn_cu_sp_move(cu->sps, full, GK_DT_F32, B, T, m->tp, C, 1, cu->s, err) < 0)
		return -1;
	m->tp_bytes += n * (size_t)m->tp * sizeof(float);
	return gk_comm_reduce_scatter(cu->tpd, cu->sps, local, n, GK_DT_F32, GK_COMM_SUM, NULL,
				      err);
}

/*
 * The input of a column-parallel layer (f's forward): x itself, or under
 * sequence parallelism the group's rows gathered into spg; as on the
 * CPU a LayerNorm's output is gathered again for its weight's gradient
 * in backward rather than kept whole.
 */
const void *gk_nn_cuda_f_input(gk_nn_model *m, const void *x, gk_err *err)
{
	if (!m->sp)
		return x;
	return sp_gather(m, x, err) < 0 ? NULL : m->cu->spg;
}

/*
 * The gradient of a column-parallel layer's input (the f operator's
 * backward) into dinp (N,IC) from the product gi of this rank's columns:
 * made in fp32 (dinp itself in fp32, else tpf), summed over the group,
 * then in the activation type; under sequence parallelism the product
 * (N,IC) in tpf, reduce-scattered: this rank's rows of the sum, (R,IC)
 * in dinp. At tp 1 the product alone.
 */
int gk_nn_cuda_f_grad(gk_nn_model *m, gk_nn_gemm *gi, void *dinp, int N, int IC, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (m->tp == 1)
		return gk_nn_blas_gemm(cu->blas, gi, err);
	float *acc = cu->dt == GK_DT_F32 ? dinp : cu->tpf;
	size_t n = (size_t)N * IC;
	gi->D = m->sp ? cu->tpf : acc;
	gi->ddt = GK_DT_F32;
	if (gk_nn_blas_gemm(cu->blas, gi, err) < 0)
		return -1;
	if (m->sp) {
		n /= (size_t)m->tp;
		if (gk_nn_cuda_sp_reduce(m, cu->tpf, acc, err) < 0)
			return -1;
	} else if (gk_nn_cuda_tp_reduce(m, acc, n, GK_COMM_SUM, err) < 0) {
		return -1;
	}
	return acc == dinp ? 0 : gk_cuda_convert(dinp, cu->dt, acc, GK_DT_F32, n, cu->s, err);
}

/*
 * dinp (N,IC) = dout @ w^T, times gelu'(pre) when pre is given (c_proj's
 * DGELU epilogue: pre the (N,IC) input of the GELU whose output was
 * inp), summed over the tensor group when f (a column-parallel layer's
 * input, gk_nn_cuda_f_grad); dw (IC,OC) += inp^T @ dout; db += column
 * sums (none when db is NULL). dpre_b (with pre): the GELU's layer's
 * bias gradient (IC) += the column sums of dinp, summed by the epilogue
 * (DGELU_BGRAD) into the column sums' scratch, then added.
 */
int gk_nn_cuda_mm_bwd(gk_nn_model *m, void *dinp, float *dw, float *db, float *dpre_b,
		      const void *dout, const void *inp, const void *w,
		      const void *pre, int f, int N, int IC, int OC, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	gk_nn_gemm gi = {.tb = 1, .M = N, .N = IC, .K = OC, .A = dout,
			 .lda = OC, .B = w, .ldb = OC, .D = dinp, .ldd = IC,
			 .alpha = 1.0f, .batch = 1, .dt = cu->dt, .ddt = cu->dt,
			 .gelu = pre ? GK_NN_GEMM_DGELU : GK_NN_GEMM_PLAIN,
			 .aux = (void *)pre, .ldaux = IC,
			 .dbias = dpre_b ? cu->colsum : NULL};
	gk_nn_gemm gw = {.ta = 1, .M = IC, .N = OC, .K = N, .A = inp,
			 .lda = IC, .B = dout, .ldb = OC, .D = dw, .ldd = OC,
			 .C = dw, .alpha = 1.0f, .batch = 1, .dt = cu->dt,
			 .ddt = GK_DT_F32};
	if ((f ? gk_nn_cuda_f_grad(m, &gi, dinp, N, IC, err) : gk_nn_blas_gemm(cu->blas, &gi, err)) < 0 ||
	    (dpre_b && gk_nn_cu_colsum_add(dpre_b, cu->colsum, IC, cu->s, err) < 0) ||
	    gk_nn_blas_gemm(cu->blas, &gw, err) < 0)
		return -1;
	return db ? gk_nn_cu_colsum(db, cu->colsum, dout, cu->dt, N, OC, cu->s, err) : 0;
}

/*
 * A projection onto the residual stream, out = res + inp @ w + b: under
 * tensor parallelism row-parallel (the g operator), each rank's product
 * of its rows in fp32, summed over the group, then the residual and the
 * bias once (gk_nn_tp_finish's order, the CPU's); under sequence
 * parallelism the sum reduce-scattered, out and res this rank's rows.
 */
int gk_nn_cuda_proj_fwd(gk_nn_model *m, void *out, const void *inp, const void *w,
			const void *b, const void *res, int N, int K, int OC, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (m->tp == 1)
		return gk_nn_cuda_mm_fwd(m, out, inp, w, b, res, N, K, OC, err);
	gk_nn_gemm g = {.M = N, .N = OC, .K = K, .A = inp, .lda = K, .B = w, .ldb = OC,
			.D = cu->tpf, .ldd = OC, .alpha = 1.0f, .batch = 1, .dt = cu->dt,
			.ddt = GK_DT_F32};
	if (gk_nn_blas_gemm(cu->blas, &g, err) < 0 ||
	    (m->sp ? gk_nn_cuda_sp_reduce(m, cu->tpf, cu->tpf, err) :
		     gk_nn_cuda_tp_reduce(m, cu->tpf, (size_t)N * OC, GK_COMM_SUM, err)) < 0)
		return -1;
	if (m->sp)
		N /= m->tp;
	return gk_nn_cu_tp_row_finish(out, cu->tpf, res, b, cu->dt, N, OC, cu->s, err);
}

/* This rank's vocabulary rows (tensor parallelism; model.c's
 * vocab_slice): the first v0, the real ones nv; all of them at tp 1 */
void gk_nn_cuda_vocab_slice(const gk_nn_model *m, int64_t *v0, int *nv)
{
	int64_t Vl = m->c.vocab_pad / m->tp;
	*v0 = (int64_t)m->tpr * Vl;
	int64_t real = m->c.vocab - *v0;
	*nv = (int)(real < 0 ? 0 : real > Vl ? Vl : real);
}

/*
 * The embedding backward's token buckets under tensor parallelism: those
 * of this rank's rows only, as rows of its slice (gk_nn_token_buckets
 * sorts them by token, so they are one run); the positions stay.
 */
void gk_nn_cuda_tp_buckets(gk_nn_model *m)
{
	struct gk_nn_cuda *cu = m->cu;
	int64_t Vl = m->c.vocab_pad / m->tp, v0 = (int64_t)m->tpr * Vl;
	int a = 0, b;
	while (a < cu->nb && cu->h_uniq[a] < v0)
		a++;
	for (b = a; b < cu->nb && cu->h_uniq[b] < v0 + Vl; b++) {
		cu->h_uniq[b - a] = (int32_t)(cu->h_uniq[b] - v0);
		cu->h_start[b - a] = cu->h_start[b];
	}
	cu->h_start[b - a] = cu->h_start[b];
	cu->nb = b - a;
}

/*
 * The vocabulary-parallel cross-entropy (tp.c): this rank's columns'
 * state, the group's max (N floats), the sums at it and the target's
 * logit (2N), then each row's lse and loss and, when grad, the dlogits
 * over this rank's logits with dloss (xent_fused's two passes, the
 * group's allreduces between them).
 */
int gk_nn_cuda_tp_xent(gk_nn_model *m, float dloss, int grad, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	int N = m->o.batch * m->o.seq, nv;
	int64_t v0;
	TP_WIDTHS(m);
	gk_nn_cuda_vocab_slice(m, &v0, &nv);
	float *mx = cu->tpx, *gmx = mx + N, *part = gmx + N;
	if (gk_nn_cu_tp_xent_state(mx, gmx, part, cu->logits, cu->tgt, cu->dt, v0, N, nv, Vl,
				   cu->s, err) < 0 ||
	    gk_nn_cuda_tp_reduce(m, gmx, (size_t)N, GK_COMM_MAX, err) < 0 ||
	    gk_nn_cu_tp_xent_rescale(part, mx, gmx, N, cu->s, err) < 0 ||
	    gk_nn_cuda_tp_reduce(m, part, 2 * (size_t)N, GK_COMM_SUM, err) < 0)
		return -1;
	return gk_nn_cu_tp_xent_finish(cu->lse, cu->loss, cu->logits, gmx, part, cu->tgt, cu->dt,
				       dloss, grad, v0, N, nv, Vl, cu->s, err);
}

int gk_nn_cuda_tp_open(gk_nn_model *m, const struct gk_comm_config *cc, gk_err *err)
{
	struct gk_nn_cuda *cu = m->cu;
	if (!cu || m->tp == 1 || cu->tpd)
		return 0;
	if (gk_comm_open_device(m->tpc, cc, &cu->tpd, err) < 0 ||
	    gk_comm_set_stream(cu->tpd, cu->s, err) < 0)
		return gk_err_prefix(err, "tensor group rank %d of %d: NCCL on the GPU", m->tpr,
				     m->tp);
	return 0;
}
