/*
 * cuda_internal.h - the CUDA backend's pieces inside lib/nn: the kernel
 * launchers (one .cu file per operation), the cuBLASLt matmul, and the
 * host-side launch arithmetic (launch.c, built everywhere and unit-tested
 * without a GPU).
 *
 * Device tensors of activations are in the model's activation type `dt`
 * (GK_DT_BF16 or GK_DT_F32, passed to every launcher); gradients of the
 * parameters, LayerNorm statistics, losses and moments are always f32.
 * Shapes as in internal.h: B batch, T time, C channels, NH heads, hs = C/NH,
 * N = B*T rows, Vp the padded vocabulary. Launchers enqueue on stream s and
 * return 0, or -1 with the launch error in err.
 */
#ifndef GK_NN_CUDA_INTERNAL_H
#define GK_NN_CUDA_INTERNAL_H

#include "cuda/cuda.h"
#include "nn/internal.h"
#include "nn/math.h"

/* ---- launch arithmetic (launch.c) ------------------------------------------------ */

/* Threads of the row kernels (one warp per row): 8 warps a block. */
#define GK_NN_ROW_WARPS 8
/* Blocks of the first pass of the two-pass sums (grad norm). */
#define GK_NN_SUM_BLOCKS 1024
/* Rows a block of the column-sum kernels takes (bias and LN gradients). */
#define GK_NN_COLSUM_ROWS 256
/* Columns a block of the column-sum kernels takes (one per thread). */
#define GK_NN_COLSUM_COLS 128

/*
 * Part k of n items cut into `parts` contiguous ranges, the first n %
 * parts one longer: [*lo, *hi) (empty when parts is 0). Every item in
 * exactly one part, in order; the kernels' fixed summation order rests on
 * this, and kernels and host share this one definition.
 */
GK_HD void gk_nn_part(uint64_t n, uint64_t parts, uint64_t k, uint64_t *lo,
		      uint64_t *hi)
{
	uint64_t per = parts ? n / parts : 0, extra = parts ? n % parts : 0;
	*lo = parts ? k * per + (k < extra ? k : extra) : 0;
	*hi = parts ? *lo + per + (k < extra ? 1 : 0) : 0;
}

/*
 * Blocks of a row kernel over `rows` rows, GK_NN_ROW_WARPS rows a block,
 * grid-stride beyond the cap (gk_cuda_grid).
 */
unsigned gk_nn_row_grid(uint64_t rows);

/* Row chunks of the column sums over N rows: ceil(N / GK_NN_COLSUM_ROWS)
 * in 1..65535 (a grid's y dimension); the scratch holds chunks * columns
 * floats. */
unsigned gk_nn_colsum_chunks(uint64_t N);

/* Floats of the scratch every column sum of a model of C channels over N
 * rows shares: the chunks times the widest sum, the MLP's 4C bias
 * (LayerNorm's weight and bias are 2C; the LM head has no bias). */
uint64_t gk_nn_colsum_floats(uint64_t N, uint64_t C);

/*
 * Bucket the positions of tok[0..N) by token for the embedding backward:
 * uniq[0..nb) the distinct tokens ascending, the positions of uniq[j] are
 * pos[start[j] .. start[j+1]) ascending (a stable counting sort). count
 * is V ints of scratch. Tokens must be in 0..V-1. Returns nb.
 */
int gk_nn_token_buckets(const int32_t *tok, int N, int V, int32_t *uniq,
			int32_t *start, int32_t *pos, int32_t *count);

/* ---- the matmul (matmul_cuda.c) ---------------------------------------------------- */

typedef struct gk_nn_blas gk_nn_blas;

/* Load libcublasLt.so.N, N the toolkit's major version (once per process) and make a handle. */
int gk_nn_blas_new(gk_nn_blas **out, gk_nn_precision prec, void *ws,
		   size_t ws_bytes, gk_cuda_stream s, gk_err *err);
void gk_nn_blas_free(gk_nn_blas *b);

/*
 * Row-major D (M,N) = alpha op(A) op(B) [+ C] [+ bias], batch times with
 * strides sA, sB, sD elements between the batches' matrices. op(A) is
 * (M,K): A is (M,K) with lda, or (K,M) when ta. op(B) is (K,N): B is
 * (K,N), or (N,K) when tb. A and B are of type dt; D and C of type ddt
 * (dt, or F32 for weight gradients). C, when set, has D's layout and is
 * added with beta 1 (C == D accumulates); bias (N values of type dt, only
 * when batch is 1) goes through cuBLASLt's bias epilogue.
 *
 * gelu (batch 1, dt == ddt, ldaux a multiple of 8, aux aligned to its
 * elements): GK_NN_GEMM_GELU makes D = gelu(op(A) op(B) + bias) and
 * writes the pre-activation op(A) op(B) + bias to aux (M,N), leading
 * dimension ldaux, cuBLASLt's GELU_AUX_BIAS (GELU_AUX without a bias);
 * GK_NN_GEMM_DGELU makes D = (op(A) op(B)) * gelu'(aux), aux the
 * pre-activation the forward wrote (cuBLASLt's DGELU); with dbias also
 * dbias (N values of D's type, 16-byte aligned) = the column sums of D,
 * the GELU's bias gradient, written, not added (cuBLASLt's DGELU_BGRAD,
 * whose bias gradient cublasLt.h gives D's type).
 */
enum { GK_NN_GEMM_PLAIN, GK_NN_GEMM_GELU, GK_NN_GEMM_DGELU };

typedef struct gk_nn_gemm {
	int ta, tb;
	int M, N, K;
	const void *A; int lda; long long sA;
	const void *B; int ldb; long long sB;
	void *D; int ldd; long long sD;
	const void *C;
	const void *bias;
	float alpha;
	int batch;
	gk_dtype dt, ddt;
	int gelu;              /* GK_NN_GEMM_*; PLAIN (0) unless set */
	void *aux; int ldaux;  /* the GELU's pre-activation (M,N) */
	void *dbias;           /* DGELU only: the bias gradient (N), or NULL */
} gk_nn_gemm;

int gk_nn_blas_gemm(gk_nn_blas *b, const gk_nn_gemm *g, gk_err *err);

/*
 * What gk_nn_blas_gemm hands cuBLASLt for g (launch.c, tested on the
 * host): a row-major (r, c) matrix with leading dimension ld is the
 * column-major (c, r) one, so D = op(A) op(B) becomes the column-major
 * D^T (m = N, n = M) = op(B)^T op(A)^T: cuBLASLt's first operand is our
 * B, its second our A. Shapes are the stored column-major ones (what
 * cublasLtMatrixLayoutCreate takes); trans_* are cuBLASLt's TRANSA/B.
 */
typedef struct gk_nn_lt_shape {
	int m, n, k;
	int trans_a, trans_b;
	const void *a, *b;
	uint64_t a_rows, a_cols, b_rows, b_cols, d_rows, d_cols;
	int64_t lda, ldb, ldd;
	long long sa, sb, sd;
} gk_nn_lt_shape;

void gk_nn_lt_shape_of(const gk_nn_gemm *g, gk_nn_lt_shape *s);

/* ---- kernels (one .cu per operation) ------------------------------------------------- */

/* encoder.cu: out (N,C) = wte[tok] + wpe[t]; backward by token buckets
 * (gk_nn_token_buckets): one block per distinct token, positions in
 * order, and one thread per (t, c) of wpe summing over b in order. */
int gk_nn_cu_encoder_fwd(void *out, const int32_t *tok, const void *wte,
			 const void *wpe, gk_dtype dt, int B, int T, int C,
			 gk_cuda_stream s, gk_err *err);
int gk_nn_cu_encoder_bwd(float *dwte, float *dwpe, const void *dout,
			 gk_dtype dt, const int32_t *uniq, const int32_t *start,
			 const int32_t *pos, int nb, int B, int T, int C,
			 gk_cuda_stream s, gk_err *err);

/* layernorm.cu: one warp per row. Backward: dinp += (accumulates into
 * the residual gradient); dw, db += column sums through scratch
 * (gk_nn_colsum_chunks(N) * 2C floats). */
int gk_nn_cu_layernorm_fwd(void *out, float *mean, float *rstd,
			   const void *inp, const void *w, const void *b,
			   gk_dtype dt, int N, int C, float eps,
			   gk_cuda_stream s, gk_err *err);
int gk_nn_cu_layernorm_bwd(void *dinp, float *dw, float *db, float *scratch,
			   const void *dout, const void *inp, const void *w,
			   const float *mean, const float *rstd, gk_dtype dt,
			   int N, int C, gk_cuda_stream s, gk_err *err);

/* colsum.cu: db (OC) += column sums of dout (N,OC), two passes through
 * scratch (gk_nn_colsum_chunks(N) * OC floats); the bias gradients.
 * colsum_add: db (OC) += v (OC), a bias gradient summed elsewhere (the
 * matmul's DGELU_BGRAD epilogue), as the second pass adds one chunk. */
int gk_nn_cu_colsum(float *db, float *scratch, const void *dout, gk_dtype dt,
		    int N, int OC, gk_cuda_stream s, gk_err *err);
int gk_nn_cu_colsum_add(float *db, const float *v, int OC, gk_cuda_stream s, gk_err *err);

/* gelu.cu: out = gelu(inp); dinp *= gelu'(inp) in place. */
int gk_nn_cu_gelu_fwd(void *out, const void *inp, gk_dtype dt, size_t n,
		      gk_cuda_stream s, gk_err *err);
int gk_nn_cu_gelu_bwd(void *dinp, const void *inp, gk_dtype dt, size_t n,
		      gk_cuda_stream s, gk_err *err);

/* attention.cu: the head shuffles around the batched matmuls, and the
 * causal softmax. split: dst (B,NH,T,hs) = columns [off, off+C) of src
 * (B,T,ld); merge: the reverse. softmax: rows of T over B*NH*T rows,
 * in place, zero above the diagonal (row t keeps j <= t). */
int gk_nn_cu_heads_split(void *dst, const void *src, gk_dtype dt, int B,
			 int T, int NH, int hs, int ld, int off,
			 gk_cuda_stream s, gk_err *err);
int gk_nn_cu_heads_merge(void *dst, const void *src, gk_dtype dt, int B,
			 int T, int NH, int hs, int ld, int off,
			 gk_cuda_stream s, gk_err *err);
int gk_nn_cu_softmax_causal_fwd(void *att, gk_dtype dt, uint64_t rows,
				int T, gk_cuda_stream s, gk_err *err);
/* datt becomes d pre-softmax (scaled by `scale`), in place. */
int gk_nn_cu_softmax_causal_bwd(void *datt, const void *att, gk_dtype dt,
				uint64_t rows, int T, float scale,
				gk_cuda_stream s, gk_err *err);

/*
 * flash.cu: causal self-attention fused into tiles, no (T,T) matrix.
 * Forward: out (B,T,C) from qkv (B,T,3C), lse (B,NH,T) f32 each row's
 * logsumexp. Backward: dqkv (B,T,3C), every element written, from dout
 * (B,T,C), the forward's qkv, out and lse; dsum (B,NH,T) f32 is scratch.
 * Head sizes 1 to GK_NN_FLASH_MAX_HS (gk_nn_flash_fits); others refused.
 */
#define GK_NN_FLASH_MAX_HS 128
static inline int gk_nn_flash_fits(int hs)
{
	return hs >= 1 && hs <= GK_NN_FLASH_MAX_HS;
}
/*
 * Which kernels run, by the precision (gk_nn_precision: the activations
 * are bf16 in bf16, fp32 otherwise) and the head size:
 *   bf16, hs a multiple of 16 (16 to 128)   the tensor cores' (WMMA, bf16
 *                                            products, fp32 sums, the
 *                                            softmax in fp32; flash_tc.cu)
 *   tf32, hs a multiple of 16 (16 to 128)   the tensor cores' in tf32 (each
 *                                            operand rounded to 10 fraction
 *                                            bits, as cuBLASLt's TF32 GEMMs
 *                                            round theirs; at 80 to 128 with
 *                                            51 KiB of dynamic shared memory
 *                                            in the backward)
 *   fp32; other head sizes 1 to 128         the CUDA cores' fp32 FMAs
 *                                            (flash.cu)
 * and the CUDA cores' also where qkv, out or dout is not 16-byte aligned
 * (cudaMalloc's pointers and the model's buffers are).
 */
static inline int gk_nn_flash_tc(int prec, int hs)
{
	return hs % 16 == 0 && gk_nn_flash_fits(hs) && (prec == GK_NN_BF16 || prec == GK_NN_TF32);
}
static inline const char *gk_nn_flash_path(int prec, int hs)
{
	return !gk_nn_flash_tc(prec, hs) ? "cuda cores"
	       : prec == GK_NN_TF32 ? "tensor cores (wmma, tf32)" : "tensor cores (wmma)";
}
int gk_nn_cu_flash_fwd(void *out, float *lse, const void *qkv, int prec,
		       int B, int T, int NH, int hs, gk_cuda_stream s,
		       gk_err *err);
int gk_nn_cu_flash_bwd(void *dqkv, float *dsum, const void *dout,
		       const void *qkv, const void *out, const float *lse,
		       int prec, int B, int T, int NH, int hs,
		       gk_cuda_stream s, gk_err *err);

/* classifier.cu: per row, lse and loss = lse - logit[target] (0 where
 * the target is < 0); backward overwrites the logits with dlogits
 * (softmax - onehot) * dloss, zero on ignored rows and padded columns;
 * fused, both in one kernel (a training step's): the same lse, loss and
 * dlogits, bit for bit, from one launch. */
int gk_nn_cu_xent_fwd(float *lse, float *loss, const void *logits,
		      const int32_t *targets, gk_dtype dt, int N, int V,
		      int Vp, gk_cuda_stream s, gk_err *err);
int gk_nn_cu_xent_bwd(void *logits, const float *lse, const int32_t *targets,
		      gk_dtype dt, float dloss, int N, int V, int Vp,
		      gk_cuda_stream s, gk_err *err);
int gk_nn_cu_xent_fused(float *lse, float *loss, void *logits,
			const int32_t *targets, gk_dtype dt, float dloss, int N,
			int V, int Vp, gk_cuda_stream s, gk_err *err);

/* adamw.cu: p, g, m, v f32 (n each); pw, when not NULL, the working copy
 * in dt, rounded from the updated p. */
/*
 * Tensor parallelism (tp.c's split; model_cuda.c runs the group's fp32
 * allreduces between these). The vocabulary-parallel cross-entropy of a
 * rank's columns [v0, v0 + ld) of each row, nv of them real
 * (classifier.cu): state writes this rank's row max in mx and gmx (gmx
 * to be allreduced by MAX), its sum of exponentials and the target's
 * logit where it holds it in part[2i], part[2i+1]; rescale puts part[2i]
 * at the group's max (then part is allreduced by SUM); finish writes lse
 * and loss, and with grad the dlogits over the logits (dloss as
 * xent_fused's); tp_xent_bwd is xent_bwd over this rank's columns.
 */
int gk_nn_cu_tp_xent_state(float *mx, float *gmx, float *part, const void *logits,
			   const int32_t *targets, gk_dtype dt, int64_t v0, int N, int nv,
			   int ld, gk_cuda_stream s, gk_err *err);
int gk_nn_cu_tp_xent_rescale(float *part, const float *mx, const float *gmx, int N,
			     gk_cuda_stream s, gk_err *err);
int gk_nn_cu_tp_xent_finish(float *lse, float *loss, void *logits, const float *gmx,
			    const float *part, const int32_t *targets, gk_dtype dt, float dloss,
			    int grad, int64_t v0, int N, int nv, int ld, gk_cuda_stream s,
			    gk_err *err);
int gk_nn_cu_tp_xent_bwd(void *logits, const float *lse, const int32_t *targets, gk_dtype dt,
			 float dloss, int64_t v0, int N, int nv, int ld, gk_cuda_stream s,
			 gk_err *err);
/* tp.cu: acc (N,C) fp32 = the masked lookup of this rank's nv rows of wte
 * from v0 (the group's sum is the embedding); out = acc + wpe[t], in dt;
 * a row-parallel layer's end, out (N,OC) = (res + bias) + sum (res and
 * bias may be NULL), sum the group's fp32 product */
int gk_nn_cu_tp_embed(float *acc, const int32_t *tok, const void *wte, gk_dtype dt, int64_t v0,
		      int nv, int N, int C, gk_cuda_stream s, gk_err *err);
int gk_nn_cu_tp_add_pos(void *out, const float *acc, const void *wpe, gk_dtype dt, int B,
			int T, int t0, int C, gk_cuda_stream s, gk_err *err);
int gk_nn_cu_tp_row_finish(void *out, const float *sum, const void *res, const void *bias,
			   gk_dtype dt, int N, int OC, gk_cuda_stream s, gk_err *err);
/* sequence parallelism (tp.c): (B,T,C) rows of dt into the group's order
 * (tp,B,T/tp,C) when to_ranks, else back (gk_nn_sp_row); a replicated
 * LayerNorm's gradients dw, db (C each) += sums (2C, the group's: dw's
 * then db's) */
int gk_nn_cu_sp_move(void *dst, const void *src, gk_dtype dt, int B, int T, int tp, int C,
		     int to_ranks, gk_cuda_stream s, gk_err *err);
int gk_nn_cu_sp_ln_add(float *dw, float *db, const float *sums, int C, gk_cuda_stream s,
		       gk_err *err);

int gk_nn_cu_adamw(float *p, void *pw, gk_dtype dt, const float *g,
		   float grad_scale, float *m, float *v, size_t n,
		   const gk_nn_adamw_k *k, float decay, gk_cuda_stream s,
		   gk_err *err);

/* norm.cu: *out (device, one double) = sum of g^2 over n, in two passes
 * through partial (GK_NN_SUM_BLOCKS doubles). */
int gk_nn_cu_sumsq(double *out, double *partial, const float *g, size_t n,
		   gk_cuda_stream s, gk_err *err);

/* ---- the model (model_cuda.c; model_nocuda.c without CUDA) ------------------- */

/*
 * The model's device buffers (launch.c, so gk_nn_plan_cuda works in
 * every build): sz the activation pieces and ss the workspace's scratch
 * pieces after the cuBLASLt workspace (GK_NN_CU_WS_BYTES, what llm.c
 * gives it), each in bytes, in model_cuda.c's carve order, every piece
 * rounded up to 256 bytes; out the bytes by category as lib/cuda will
 * count them (the moments come later: optimizer 0). m needs its config,
 * opts, nparams and nflat (a pipeline stage's pp, ppr and table too:
 * gk_nn_cuda_segments); fused: gk_nn_attention_fused's answer.
 */
#define GK_NN_CU_WS_BYTES ((size_t)32 << 20)
enum { GK_NN_CU_NACT = 24, GK_NN_CU_NWS = 17 };
/* bucket_grads: at most this many bucket buffers (lib/nn's ZeRO-2 depth + 1) */
#define GK_NN_CU_SLOTS 4
void gk_nn_cuda_layout(const gk_nn_model *m, int fused,
		       size_t sz[GK_NN_CU_NACT], size_t ss[GK_NN_CU_NWS],
		       gk_nn_mem *out);
/*
 * The segments of the flat buffer a model holds on the device, in its
 * fp32 parameters (but under unit_params, whose master is the rank's
 * pieces), its working copy and its gradients: [lo[k], hi[k]) at element
 * at[k] of each buffer (k = 0, 1). Without a pipeline the whole buffer,
 * [0, nflat), and an empty second; a pipeline stage its range
 * (gk_nn_pp_range: on the last stage to nflat, the flat multiple's tail
 * with it) and on the last stage the tied wte, [0, shared), after it.
 * The two are never adjacent in the flat buffer (the last stage's range
 * starts past wpe): a range of one lies in it whole. Returns the floats
 * of both, what each of those buffers holds.
 */
size_t gk_nn_cuda_segments(const gk_nn_model *m, size_t lo[2], size_t hi[2], size_t at[2]);

int gk_nn_cuda_new(gk_nn_model *m, gk_err *err);
void gk_nn_cuda_free(gk_nn_model *m);
int gk_nn_cuda_forward(gk_nn_model *m, const int32_t *tokens,
		       const int32_t *targets, float *loss, gk_err *err);
int gk_nn_cuda_backward(gk_nn_model *m, float scale, gk_nn_ready_fn ready,
			void *ctx, gk_err *err);
int gk_nn_cuda_zero_grad(gk_nn_model *m, gk_err *err);
/*
 * A pipeline stage on the device (pp.c): its input, output and d input
 * (device memory of gk_nn_cuda_pp_dtype); n activation slots (the one
 * the model has and n - 1 more), and slot to made current in place of
 * from (gpt.c keeps the host's state of each).
 */
void *gk_nn_cuda_pp_input(gk_nn_model *m);
void *gk_nn_cuda_pp_output(gk_nn_model *m);
void *gk_nn_cuda_pp_grad(gk_nn_model *m);
gk_dtype gk_nn_cuda_pp_dtype(const gk_nn_model *m);
int gk_nn_cuda_slots(gk_nn_model *m, int n, gk_err *err);
void gk_nn_cuda_use_slot(gk_nn_model *m, int from, int to);
void gk_nn_cuda_memory(const gk_nn_model *m, gk_nn_mem *out);
uint64_t gk_nn_cuda_pinned(const gk_nn_model *m); /* bytes of the pinned staging */

/* ---- the backend behind nn.h (model_cuda.c; model_nocuda.c without CUDA) ---------------- */

/*
 * With opts.device GK_NN_CUDA, gk_nn_new probes for a device
 * (gk_cuda_probe; its reason is the error) and allocates everything on
 * the current device: fp32 master parameters and gradients in the flat
 * layout above (the same order and offsets, so checkpoints interchange
 * with the CPU backend), a working copy of the parameters in the
 * precision's type, activations, a cuBLASLt workspace. libcublasLt.so.N
 * is loaded with dlopen when the first CUDA model is made, so binaries
 * still start on machines without it. Built without CUDA, gk_nn_new says
 * "built without CUDA".
 *
 * The host buffers of gk_nn_params and gk_nn_grads remain, as mirrors:
 * gk_nn_init and gk_nn_load write the host parameters, and
 * gk_nn_cuda_upload copies the host parameters and/or gradients to the
 * device (a forward before the first upload of the parameters is an
 * error). gk_nn_cuda_download copies the device's parameters and/or
 * gradients back (through pinned memory) for a checkpoint or a host-side
 * allreduce. gk_nn_forward, gk_nn_backward and gk_nn_zero_grad work on
 * the device; gk_nn_logits is valid after a forward without targets (the
 * logits are then copied to the host). In backward, ready is called
 * once the kernels producing the gradients it names are queued on the
 * model's stream (gk_nn_cuda_stream), not when they have finished: the
 * callee orders its own work after them on that stream, as lib/comm's
 * nccl backend does for every collective (comm.h, "Streams"), or
 * synchronises the stream. backward returns with the stream idle.
 *
 * Determinism: no kernel uses atomics; every reduction (embedding and
 * bias gradients, LayerNorm weights, the gradient norm, the loss) sums in
 * a fixed order, so the same inputs on the same GPU and build give the
 * same bits every run.
 *
 * model.c's backend-neutral calls (gk_nn_upload, gk_nn_update, ...) call
 * these for a GPU model only; the trainer calls those.
 */
int gk_nn_cuda_upload(gk_nn_model *m, int what, gk_err *err);
int gk_nn_cuda_download(gk_nn_model *m, int what, gk_err *err);

/*
 * Element off of the device's fp32 gradients (the flat layout, in its
 * segments: gk_nn_cuda_segments; the segment holding off holds the rest
 * of it from there) and the stream (a cudaStream_t) every kernel of the
 * model runs on, for a trainer that reduces the gradients where they
 * are: lib/comm's nccl backend, told the stream with gk_comm_set_stream,
 * its buckets started from backward's ready callback. NULL on a CPU
 * model, and where no segment holds off.
 */
float *gk_nn_cuda_grads(gk_nn_model *m, size_t off);
/* gk_nn_grad_buckets and gk_nn_grad_at on a GPU model (nn.h) */
int gk_nn_cuda_grad_buckets(gk_nn_model *m, size_t head, const size_t *lo, size_t nb,
			    size_t nslot, gk_err *err);
float *gk_nn_cuda_grad_at(gk_nn_model *m, size_t off);
/* gk_nn_param_at, gk_nn_param_dtype, gk_nn_params_own,
 * gk_nn_params_whole and gk_nn_params_put on a GPU model (nn.h) */
void *gk_nn_cuda_param_at(const gk_nn_model *m, size_t off);
gk_dtype gk_nn_cuda_param_dtype(const gk_nn_model *m);
int gk_nn_cuda_params_own(gk_nn_model *m, size_t a, size_t b, gk_err *err);
int gk_nn_cuda_params_whole(gk_nn_model *m, int on, gk_err *err);
int gk_nn_cuda_params_put(gk_nn_model *m, size_t off, const float *src, size_t n, gk_err *err);
void *gk_nn_cuda_stream(const gk_nn_model *m);

/*
 * The AdamW moments of gk_nn_cuda_adamw over the parameters [lo, hi)
 * (hi - lo floats each; the whole flat layout, or a ZeRO-1 rank's range),
 * copied from mom and vel to the device (upload 1) or back (0), for a
 * resume and a checkpoint. They are allocated, zero, on first use, for
 * that range; another range later is an error. An error on a CPU model.
 */
int gk_nn_cuda_moments(gk_nn_model *m, size_t lo, size_t hi, float *mom,
		       float *vel, int upload, gk_err *err);

/*
 * Sum of squares of n device floats g: per-block partial sums in double
 * over fixed contiguous ranges, then one block adding the partials in
 * order (two passes, no atomics). gk_nn_cuda_grad_norm is the square
 * root of it over the model's gradients; a ZeRO-1 rank takes it over
 * its range of the reduced gradients, and the ranks add theirs.
 */
int gk_nn_cuda_sumsq(gk_nn_model *m, const float *g, size_t n, double *sumsq,
		     gk_err *err);
int gk_nn_cuda_grad_norm(gk_nn_model *m, double *norm, gk_err *err);
/* the sum of squares of the device's gradients [lo, hi) (the model's, or
 * those at g[0 .. hi - lo)), each parameter of a tensor group once (the
 * replicated tensors on its rank 0 only) */
int gk_nn_cuda_sumsq_once(gk_nn_model *m, const float *g, size_t lo, size_t hi, double *ss,
			  gk_err *err);
/* tensor parallelism: the tensor group's NCCL communicator on this
 * device, on the model's stream, opened over the host one (m->tpc) by
 * every rank of the group at once; nothing at tp 1 */
struct gk_comm_config;
int gk_nn_cuda_tp_open(gk_nn_model *m, const struct gk_comm_config *cc, gk_err *err);
/* n gradients in device memory at g, the tensor group's rank 0's on
 * every rank of the group: a broadcast in place on its NCCL communicator
 * (gk_nn_tp_agree_replicas) */
int gk_nn_cuda_tp_grads_bcast(gk_nn_model *m, float *g, size_t n, gk_err *err);

/*
 * AdamW on the device over the parameters [lo, hi) (0, nparams: every
 * one; ZeRO-1: this rank's range), with the arithmetic of
 * gk_nn_adamw_step (lib/nn/math.h's gk_nn_adamw_elem on the fp32 master,
 * then the working copy rounded from it), the gradients multiplied by
 * grad_scale first (gradient clipping: min(1, clip / norm)). g holds the
 * range's gradients (hi - lo device floats), or is NULL for the model's
 * own from lo. The moments are the model's (gk_nn_cuda_moments),
 * allocated for the range on first use (optimizer memory).
 */
int gk_nn_cuda_adamw(gk_nn_model *m, const gk_nn_adamw *c, float lr,
		     int64_t t, float grad_scale, size_t lo, size_t hi,
		     const float *g, gk_err *err);
/* gk_nn_update_host on a GPU model: [lo, hi) of the master and of the
 * model's gradients down, gk_nn_adamw_step with the host moments mom and
 * vel, the master up and the working copy of [lo, hi) rounded from it */
int gk_nn_cuda_host_adamw(gk_nn_model *m, const gk_nn_adamw *c, float lr, int64_t t,
			  float grad_scale, size_t lo, size_t hi, float *mom, float *vel,
			  gk_err *err);

/*
 * Element off of the device's fp32 master parameters (the flat layout, in
 * the segments, or under unit_params this rank's pieces; NULL where none
 * holds off), for a trainer that gathers ZeRO-1 ranges into them (fp32
 * and tf32, and a checkpoint's master in bf16: gk_nn_cuda_work_copy);
 * after writing them it calls gk_nn_cuda_params_changed, which rounds
 * the working copy (bf16) from them. NULL and 0 on a CPU model.
 */
float *gk_nn_cuda_params(gk_nn_model *m, size_t off);
int gk_nn_cuda_params_changed(gk_nn_model *m, gk_err *err);
/*
 * Element off of the working copy where it is not the master (bf16; *dt
 * its type): the segments, the flat multiple's tail zero, of which
 * gk_nn_cuda_adamw rounds the range it updates from the master, so a
 * trainer can gather ZeRO-1's ranges in it instead of in the master
 * (half the bytes), no gk_nn_cuda_params_changed after. NULL where the working copy is the
 * master (fp32, tf32), in units (ZeRO-3), or on a CPU model.
 */
void *gk_nn_cuda_work_copy(gk_nn_model *m, size_t off, gk_dtype *dt);

#endif
