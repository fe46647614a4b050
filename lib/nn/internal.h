/*
 * internal.h - what the files of lib/nn share and nothing outside reads:
 * the model's layout (gpt.c builds it, model.c runs it) and the CPU
 * kernels (ops_cpu.c). Shapes follow llm.c: B batch, T time, C channels,
 * NH heads, OC output channels, N = B*T rows.
 */
#ifndef GK_NN_INTERNAL_H
#define GK_NN_INTERNAL_H

#include "nn/nn.h"

/* Offsets of one block's tensors in the flat buffer (HF order). */
typedef struct gk_nn_block_off {
	size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb;
	size_t ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
} gk_nn_block_off;

/*
 * A block's activations. Pointers into the activation buffer: per layer
 * where the recompute mode keeps them, else one buffer every layer
 * shares. in and out are the residual stream around the block
 * (resid[l] and resid[l+1]), which every mode keeps.
 */
typedef struct gk_nn_acts {
	float *in;         /* (B,T,C) */
	float *ln1;        /* (B,T,C) */
	float *ln1m, *ln1r;/* (B,T) mean, 1/std */
	float *qkv;        /* (B,T,3C) */
	float *att;        /* (B,NH,T,T) softmax, zero above the diagonal */
	float *atty;       /* (B,T,C) attention output, heads merged */
	float *res2;       /* (B,T,C) in + attention projection */
	float *ln2;        /* (B,T,C) */
	float *ln2m, *ln2r;/* (B,T) */
	float *fch;        /* (B,T,4C) GeLU input, or its derivative (model.c) */
	float *fchg;       /* (B,T,4C) GeLU output */
	float *out;        /* (B,T,C) res2 + MLP projection */
} gk_nn_acts;

struct gk_nn_model {
	gk_nn_config c;
	gk_nn_opts o;
	int nt;                 /* threads of every op */
	gk_nn_tensor *t;
	size_t nt_tensors;
	size_t nparams;
	size_t nflat;           /* floats allocated per flat buffer (nn.h) */
	size_t wte, wpe, lnfw, lnfb;
	gk_nn_block_off *blk;   /* layers entries */
	float *params, *grads;
	int lazy;               /* grads is lazy_grads' mapping (gpt.c) */
	int lazy_p;             /* params is lazy_params' mapping (gpt.c) */
	gk_nn_param_fn pfn;     /* ZeRO-3: told around each block's use of its
				 * parameters (gk_nn_set_param_fn), or NULL */
	void *pctx;

	/* activations (one allocation; see gpt.c's layout) */
	float *acts;
	size_t acts_n;
	float *resid;           /* (L+1, B,T,C): the embeddings, each block's output */
	float *lnf, *lnfm, *lnfr;
	float *logits;          /* (B,T,Vp); dlogits after backward */
	float *lse;             /* (B,T) logsumexp of each row */
	int32_t *tokens, *targets; /* of the last forward */
	/* per-kind bases and whether each layer has its own copy */
	float *a_ln1, *a_ln1m, *a_ln1r, *a_qkv, *a_att, *a_atty, *a_res2;
	float *a_ln2, *a_ln2m, *a_ln2r, *a_fch, *a_fchg;
	int per_layer;          /* every kind but fchg (NONE, GELU) */
	int fchg_per_layer;     /* NONE only */

	/* backward workspace (one allocation) */
	float *ws;
	size_t ws_n;
	float *dres, *dln, *datty, *dqkv, *dfc, *datt; /* datt: nt * T*T */

	struct gk_nn_cuda *cu;  /* the CUDA backend's state; NULL on the CPU */

	/* tensor parallelism (tp.c): the group's size (1: none), this rank's
	 * place in it and its communicator; the whole model's table (t itself
	 * at tp 1) and its flat length; 3 N floats of the vocabulary-parallel
	 * cross-entropy */
	int tp, tpr;
	struct gk_comm *tpc;
	gk_nn_tensor *ft;
	size_t nft, nfull;
	float *tpx;
	uint64_t tp_bytes;      /* sent into the group's collectives so far */
	/* sequence parallelism (model.c): 1 when the LayerNorm and residual
	 * regions (resid, ln1, res2, ln2, their statistics, lnf, dres) hold
	 * this rank's (B, T/tp, C) positions only; then spg (B,T,C) the
	 * gathered whole or a partial sum before its reduce-scatter, sps
	 * (tp, B,T/tp,C) the collectives' rank-major order, spln (2C) a
	 * LayerNorm's parameter gradients before their sum over the group */
	int sp;
	float *spg, *sps, *spln;

	/* pipeline parallelism (pp.c): pp stages (1: none), this rank's, and
	 * its layers [l0, l1); the activations of micro-batches in flight:
	 * nslots buffers like acts (slot_base[0] is acts' own), the one in
	 * use, and each one's forward state; under the interleaved schedule
	 * ppv chunks, [l0, l1) the one in use, and where block l lies in the
	 * flat buffer (ppat[l], in blocks from the first; NULL: at l) */
	int pp, ppr, l0, l1, ppv;
	int *ppat;
	int nslots, slot;
	float **slot_base;
	struct gk_nn_slot_state {
		int have_fwd, have_targets;
		double nvalid;
		float loss;
	} *slot_state;

	int have_fwd, have_targets;
	double nvalid;          /* targets >= 0 in the last forward */
	float loss;
	int eval;               /* gk_nn_set_eval */
	float gscale;           /* gk_nn_set_grad_scale (0: not set) */
	gk_nn_mem mem;
};

void gk_nn_layer_acts(const gk_nn_model *m, int l, gk_nn_acts *a);

/*
 * The step constants of AdamW (optim.c), shared by the CPU loop and the
 * CUDA kernel so both round them once, the same way. *decay is the
 * factor of tensors with weight decay; the others use 1.
 */
struct gk_nn_adamw_k;
void gk_nn_adamw_consts(const gk_nn_adamw *c, float lr, int64_t t,
			struct gk_nn_adamw_k *k, float *decay);

/* ---- CPU kernels (ops_cpu.c) ---- */

/*
 * Element loops built for each of these, chosen at load time (ifunc):
 * the x86-64 levels v4 (AVX-512) and v3 (AVX2 with FMA: a level, since a
 * comma in target_clones makes one clone per feature, and an "avx2"
 * clone without FMA turns math.h's fmaf into a libm call per element).
 * Not under ThreadSanitizer: the resolvers run while the dynamic loader
 * relocates, before its runtime is up, and its instrumented code faults.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
	!defined(__SANITIZE_THREAD__)
#define GK_NN_SIMD_CLONES                                                      \
	__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3",     \
				     "default")))
#else
#define GK_NN_SIMD_CLONES
#endif

void gk_nn_cpu_threads(int nt);
void gk_nn_cpu_encoder_fwd(float *out, const int32_t *tok, const float *wte,
			   const float *wpe, int B, int T, int C, int nt);
void gk_nn_cpu_encoder_bwd(float *dwte, float *dwpe, const float *dout,
			   const int32_t *tok, int B, int T, int C, int nt);
void gk_nn_cpu_layernorm_fwd(float *out, float *mean, float *rstd,
			     const float *inp, const float *w, const float *b,
			     int N, int C, float eps, int nt);
void gk_nn_cpu_layernorm_bwd(float *dinp, float *dw, float *db,
			     const float *dout, const float *inp,
			     const float *w, const float *mean,
			     const float *rstd, int N, int C, int nt);
void gk_nn_cpu_matmul_fwd(float *out, const float *inp, const float *w,
			  const float *bias, const float *res, float *gelu,
			  int grad, int N, int C, int OC, int nt);
void gk_nn_cpu_matmul_bwd(float *dinp, float *dw, float *db,
			  const float *dout, const float *inp, const float *w,
			  int N, int C, int OC, int nt);
/* math.h's gk_nn_softmax_row, vectorised; returns the row's logsumexp */
float gk_nn_cpu_softmax(float *x, int n);
void gk_nn_cpu_gelu_fwd(float *out, const float *inp, size_t n, int nt);
void gk_nn_cpu_gelu_bwd(float *dinp, float *db, const float *x, int grad,
			int N, int C, int nt);
/* one row of attention's softmax, forward and backward (see ops_cpu.c) */
void gk_nn_cpu_softmax_causal(float *ar, float *x, int n, int nv, int T);
void gk_nn_cpu_softmax_bwd_row(float *dr, const float *ar, int n, int nv,
			       int T, float scale);
/* floats of attention scratch each thread needs */
size_t gk_nn_cpu_attention_scratch(int T, int hs);
void gk_nn_cpu_attention_fwd(float *out, float *att, float *scratch,
			     const float *qkv, int B, int T, int C, int NH,
			     int nt);
void gk_nn_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout,
			     const float *qkv, const float *att, int B, int T,
			     int C, int NH, int nt);
void gk_nn_cpu_lmhead_fwd(float *logits, const float *inp, const float *wte,
			  int N, int C, int V, int Vp, int nt);
void gk_nn_cpu_lmhead_bwd(float *dinp, float *dwte, const float *dlogits,
			  const float *inp, const float *wte, int N, int C,
			  int V, int Vp, int nt);
double gk_nn_cpu_xent_fwd(float *lse, const float *logits,
			  const int32_t *targets, int N, int V, int Vp, int nt);
void gk_nn_cpu_xent_bwd(float *logits, const float *lse,
			const int32_t *targets, float dloss, int N, int V,
			int Vp, int nt);

/*
 * ---- tensor-parallel layers (tp.c) ----
 *
 * Megatron-LM's split (Shoeybi et al., "Megatron-LM", 2019, section 3) as
 * functions of one rank's slices, the collectives left to the caller
 * between them, so that the unit tests can run every rank of a group in
 * one process and compare with the unsharded kernels above. v0 is the
 * first vocabulary row a rank holds, nv the real (unpadded) rows of its
 * slice (0 for a slice wholly in the padding), ld its logits' row stride.
 */
/* out[i] = wte[tok[i] - v0] for the tokens this rank holds, else 0; the
 * group's sum is the embedding (VocabParallelEmbedding's masked lookup) */
void gk_nn_tp_embed_fwd(float *out, const int32_t *tok, const float *wte, int64_t v0, int nv,
			int N, int C, int nt);
/* dwte[tok[i] - v0] += dout[i] for the tokens this rank holds */
void gk_nn_tp_embed_bwd(float *dwte, const float *dout, const int32_t *tok, int64_t v0,
			int nv, int N, int C, int nt);
/* out (B,T,C) += wpe[t0 + t] (after the embedding's allreduce); T the
 * positions of each sequence out holds, from t0 (sequence parallelism: a
 * rank's T/tp from tp_rank T/tp; else all, from 0) */
void gk_nn_tp_add_pos(float *out, const float *wpe, int B, int T, int t0, int C, int nt);
/*
 * Sequence parallelism's reorderings around the group's all-gather and
 * reduce-scatter, which take one contiguous block a rank: rank r holds
 * positions [r T/tp, (r+1) T/tp) of each of the B sequences, so the
 * blocks' order is (tp, B, T/tp, C) and the model's (B, T, C).
 * to_ranks: (B,T,C) src into (tp,B,T/tp,C) dst; from_ranks: back.
 */
void gk_nn_sp_to_ranks(float *dst, const float *src, int B, int T, int tp, int C, int nt);
void gk_nn_sp_from_ranks(float *dst, const float *src, int B, int T, int tp, int C, int nt);
/* dwpe[t] += dout (B,T,C), as gk_nn_cpu_encoder_bwd does (the same bits) */
void gk_nn_tp_pos_bwd(float *dwpe, const float *dout, int B, int T, int C, int nt);
/* The global norm of a tensor-parallel model's gradients: each parameter
 * once over the group (collective over it) */
int gk_nn_tp_grad_norm(gk_nn_model *m, double *norm, gk_err *err);
/* A row-parallel layer's end, after the allreduce of its partial sums in
 * out (N,OC): out = res + bias + out, the bias added once */
void gk_nn_tp_row_finish(float *out, const float *res, const float *bias, int N, int OC,
			 int nt);
/* Vocabulary-parallel cross-entropy, forward: mx[i] the row's largest
 * logit of this rank (-inf when nv is 0), to be allreduced by MAX */
void gk_nn_tp_xent_max(float *mx, const float *logits, int N, int nv, int ld, int nt);
/* then with the group's mx: part[2i] = sum_j exp(x_ij - mx[i]), part[2i+1]
 * = the target's logit when this rank holds it, else 0; allreduced by SUM */
void gk_nn_tp_xent_parts(float *part, const float *logits, const float *mx,
			 const int32_t *targets, int64_t v0, int N, int nv, int ld, int nt);
/* then lse[i] = mx[i] + log(part[2i]), and the sum of lse - target logit
 * over rows whose target is >= 0 (in double, rows in order) */
double gk_nn_tp_xent_finish(float *lse, const float *mx, const float *part,
			    const int32_t *targets, int N);
/* backward: logits (this rank's columns) become d loss / d logits, with
 * no collective (softmax_j - [j == target]) * dloss */
void gk_nn_tp_xent_bwd(float *logits, const float *lse, const int32_t *targets, float dloss,
		       int64_t v0, int N, int nv, int ld, int nt);
/* Between the whole layout (ft, whole) and rank r of tp's (lt, local),
 * tensor by tensor: to_local 1 copies r's slices out of whole, 0 puts
 * them back in place */
void gk_nn_tp_copy(const gk_nn_tensor *ft, const gk_nn_tensor *lt, size_t n, int tp, int r,
		   float *whole, float *local, int to_local);

/* gpt.c: give back the pages of buf (a lazily mapped parameter or
 * gradient buffer of m) wholly inside [lo, hi) of the flat buffer; from
 * hi = nparams on, the mapping's tail too (weights.c's stage init) */
void gk_nn_lazy_release(const gk_nn_model *m, float *buf, size_t lo, size_t hi);

/* the interleaved schedule's blocks in the flat buffer, stage-major
 * (nn.h, gk_nn_pp_chunk_layers): m->ppat, the table's and m->blk's
 * offsets moved; nothing when m->ppv <= 1 (pp.c) */
int gk_nn_pp_place(gk_nn_model *m, gk_err *err);
/* the block at place p of the flat buffer (in blocks, ppat's) counted
 * from this stage's first (chunk c's j-th: c n + j, n a chunk's layers;
 * p itself without a pipeline) */
int gk_nn_pp_block_index(const gk_nn_model *m, int p);

#endif
