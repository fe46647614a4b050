/*
 * model_cuda.h - the CUDA model's state, shared by model_cuda.c (the model),
 * model_state_cuda.c (its transfers and update), model_dist_cuda.c (its
 * buffers in data- and pipeline-parallel layouts) and model_tp_cuda.c (its
 * layer products and tensor group); private to those files.
 */
#ifndef GK_NN_MODEL_CUDA_H
#define GK_NN_MODEL_CUDA_H

#include "comm/comm.h"
#include "nn/cuda_internal.h"

#define MAX_ALLOCS 64
#define PP_SLOTS 16 /* a pipeline stage's activation slots, at most */

struct gk_nn_cuda {
	gk_dtype dt;
	size_t es;             /* bytes of one dt element */
	int fused;             /* attention: flash.cu's kernels, else the
				  matmul path (gk_nn_attention_fused) */
	int gelu_epi;          /* the MLP's GELU in c_fc's and c_proj's
				  matmul epilogues, else gelu.cu's kernels
				  (gk_nn_gelu_epilogue) */
	gk_cuda_stream s;
	gk_nn_blas *blas;
	void *ws;

	float *p, *g;          /* master parameters, gradients (f32) */
	/* the flat buffer's segments g and pw hold, and p but under
	 * unit_params (gk_nn_cuda_segments): [slo[k], shi[k]) at element
	 * sat[k], sfloats in all */
	size_t slo[2], shi[2], sat[2], sfloats;
	/* bucket_grads (gk_nn_cuda_grad_buckets): g holds [0, ghead) only,
	 * and bucket b above it, [blo[b], blo[b - 1]), is in slot[b % nslot] */
	size_t ghead, nbk, nslot, slot_len;
	size_t *blo;
	float *slot[GK_NN_CU_SLOTS];
	void *pw;              /* working copy in dt (== p in f32); NULL with units */
	/* p holds [plo[k], phi[k]) at pat[k] (k = 0, 1): the segments, or
	 * under unit_params (ZeRO-3) this rank's pieces
	 * (gk_nn_pp_piece: a range of the flat multiple's equal ones, or a
	 * pipeline stage's piece of its layers and of the tied wte), and the
	 * working copy is in units: [0, uhead) in ue[0], [utail, nflat) in
	 * ue[1], block l in uslot[l % nuslot] (each ulen elements); whole,
	 * when not NULL, a working copy of the segments (the whole model
	 * without a pipeline) that replaces them */
	size_t plo[2], phi[2], pat[2], pfloats, uhead, utail, ulen, nuslot;
	void *ue[2], **uslot, *whole;
	/* AdamW moments, from the first update, of up to two ranges of the
	 * parameters (a pipeline's last stage: its own and the tied wte) */
	float *mom[2], *vel[2];
	size_t mlo[2], mhi[2];
	int nmom;

	void *resid, *lnf, *logits;
	float *lnfm, *lnfr, *lse, *loss;
	void *a_ln1, *a_qkv, *a_att, *a_atty, *a_res2, *a_ln2, *a_fch, *a_fchg;
	float *a_ln1m, *a_ln1r, *a_ln2m, *a_ln2r;
	int32_t *tok, *tgt, *uniq, *start, *pos;
	int nb;                /* distinct tokens of the last forward */

	/* scratch: q, k, v, y per head (B,NH,T,hs), matmul path only;
	 * backward gradients; datt (B,NH,T,T), or the fused backward's
	 * row sums D (B,NH,T f32) */
	void *q, *k, *v, *y;
	void *dres, *dln, *datty, *dqkv, *dfc, *datt;
	float *colsum;
	double *norm;          /* GK_NN_SUM_BLOCKS partials, then the sum */

	void *pin;             /* pinned staging (gk_nn_cuda_put, _get) */
	size_t pin_bytes;
	int32_t *h_uniq, *h_start, *h_pos, *h_count;
	float *h_loss;
	int uploaded;
	/* the classifier (gk_nn_set_eval): the scale a training forward
	 * folds into the dlogits it writes when gk_nn_set_grad_scale has
	 * not said, the last backward's (1 before the first), and that of
	 * the dlogits the last forward wrote over the logits (0: none, the
	 * logits are there) */
	float xscale, xfused;

	/* a pipeline stage's activation slots (gk_nn_pp_slots): slot i's
	 * activations at abase[i], the tokens' count of its last forward */
	char *abase[PP_SLOTS];
	int anb[PP_SLOTS];
	float axf[PP_SLOTS];
	size_t abytes;

	/* tensor parallelism (tp.c's split): the tensor group's device
	 * communicator on s (gk_nn_cuda_tp_open); fp32 scratch for the
	 * group's sums: tpf (N,C), a row-parallel product, the embedding's
	 * lookup or a column-parallel input's gradient; tpx 4N, the
	 * cross-entropy's mx, gmx and part (gk_nn_cu_tp_xent_state) */
	struct gk_comm *tpd;
	float *tpf, *tpx;
	/* sequence parallelism (tp.c): spg (N,C) in dt, a column-parallel
	 * layer's input or a row-parallel one's output gradient gathered
	 * from the group; sps (N,C) fp32, the collectives' rank-major order
	 * (tp,B,T/tp,C); spln 2C, a LayerNorm's gradients summed over the
	 * group */
	void *spg;
	float *sps, *spln;

	void *allocs[MAX_ALLOCS];
	int nallocs;
	uint64_t bytes[GK_CUDA_MEM_KINDS];
};

/* a device buffer freed with the model, its bytes counted in kind */
void *gk_nn_cuda_dalloc(struct gk_nn_cuda *cu, size_t bytes, gk_cuda_mem_kind kind,
			gk_err *err);
/* bytes from host to device and back through the pinned staging, a
 * staging's worth at a time (gk_cuda_copy's: waited for) */
int gk_nn_cuda_put(struct gk_nn_cuda *cu, void *dev, const void *host, size_t bytes,
		   gk_err *err);
int gk_nn_cuda_get(struct gk_nn_cuda *cu, void *host, const void *dev, size_t bytes,
		   gk_err *err);
/* the fp32 master of [a, b) in p, or NULL when one of its ranges does
 * not hold it all */
float *gk_nn_cuda_master_at(struct gk_nn_cuda *cu, size_t a, size_t b);
/* where [a, b) of the flat buffer is in a buffer holding [lo[k], hi[k])
 * at element at[k] (k = 0, 1), or SIZE_MAX when neither holds it all:
 * the one lookup behind gk_nn_cuda_master_at, gk_nn_cuda_grad_at,
 * gk_nn_cuda_grads and gk_nn_cuda_param_at */
size_t gk_nn_cuda_index(const size_t lo[2], const size_t hi[2], const size_t at[2], size_t a,
			size_t b);
/* unit_params' buffers (gk_nn_cuda_new, when the model has units) */
int gk_nn_cuda_units_alloc(gk_nn_model *m, gk_err *err);

/*
 * A rank's widths under tensor parallelism (tp.c, as model.c's): Cq of
 * attention's C and NHq of its heads, F of the MLP's 4C, Vl of the padded
 * vocabulary; the whole at tp 1.
 */
#define TP_WIDTHS(m)                                                           \
	int Cq = (int)(m)->c.hidden / (m)->tp, NHq = (int)(m)->c.heads / (m)->tp; \
	int F = 4 * (int)(m)->c.hidden / (m)->tp;                              \
	int Vl = (int)(m)->c.vocab_pad / (m)->tp;                             \
	(void)Cq, (void)NHq, (void)F, (void)Vl

/* ---- a layer's products and the tensor group (model_tp_cuda.c) ---------------- */

/* the GEMMs of a layer: out = inp @ w [+ bias] [+ res]; with the GELU
 * epilogue; a projection onto the residual stream (g under tensor
 * parallelism); backward, the input's gradient summed over the group
 * when f (a column-parallel layer) */
int gk_nn_cuda_mm_fwd(gk_nn_model *m, void *out, const void *inp, const void *w,
		      const void *bias, const void *res, int N, int IC, int OC, gk_err *err);
int gk_nn_cuda_mm_fwd_gelu(gk_nn_model *m, void *out, void *pre, const void *inp,
			   const void *w, const void *bias, int N, int IC, int OC, gk_err *err);
int gk_nn_cuda_proj_fwd(gk_nn_model *m, void *out, const void *inp, const void *w,
			const void *b, const void *res, int N, int K, int OC, gk_err *err);
int gk_nn_cuda_mm_bwd(gk_nn_model *m, void *dinp, float *dw, float *db, float *dpre_b,
		      const void *dout, const void *inp, const void *w, const void *pre, int f,
		      int N, int IC, int OC, gk_err *err);
/* f: a column-parallel layer's input (gathered under sequence
 * parallelism) and its gradient from the product gi */
const void *gk_nn_cuda_f_input(gk_nn_model *m, const void *x, gk_err *err);
int gk_nn_cuda_f_grad(gk_nn_model *m, gk_nn_gemm *gi, void *dinp, int N, int IC, gk_err *err);
/* the group's op over n device floats in place; sequence parallelism's
 * reduce-scatter of fp32 (B,T,C) rows into this rank's */
int gk_nn_cuda_tp_reduce(gk_nn_model *m, float *x, size_t n, gk_comm_op op, gk_err *err);
int gk_nn_cuda_sp_reduce(gk_nn_model *m, const float *full, float *local, gk_err *err);
/* the vocabulary: this rank's rows, its embedding buckets, the
 * vocabulary-parallel cross-entropy */
void gk_nn_cuda_vocab_slice(const gk_nn_model *m, int64_t *v0, int *nv);
void gk_nn_cuda_tp_buckets(gk_nn_model *m);
int gk_nn_cuda_tp_xent(gk_nn_model *m, float dloss, int grad, gk_err *err);

#endif
