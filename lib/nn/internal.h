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

	int have_fwd, have_targets;
	double nvalid;          /* targets >= 0 in the last forward */
	float loss;
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
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
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

#endif
