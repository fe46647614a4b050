/*
 * nn.h - a GPT-2 model and its training step (prefix gk_nn_).
 *
 * The model is GPT-2's architecture with GPT-2's Hugging Face tensor names
 * and layout (transformers' GPT2LMHeadModel): learned token and position
 * embeddings, pre-norm blocks (LayerNorm, causal multi-head attention,
 * LayerNorm, 4h MLP with the tanh GeLU "gelu_new"), a final LayerNorm and
 * an LM head tied to the token embedding. Linear weights are Conv1D-shaped
 * (in, out), as GPT-2 stores them.
 *
 * All parameters live in one flat f32 buffer, and the gradients in a
 * second of the same layout, so the trainer reduces, clips, updates and
 * checkpoints contiguous ranges. The order is
 *
 *   wte, wpe, h.0.*, h.1.*, ..., h.(L-1).*, ln_f.*
 *
 * so that backward, which finishes ln_f first and the embeddings last
 * (wte is also the LM head, the first thing backward touches), completes
 * the buffer from the end towards the start: gradient buckets cut from the
 * end become ready in backward order (gk_comm_grads_ready).
 *
 * Backends share the model, the parameter table, the step and the
 * per-element math (lib/nn/math.h, GK_HD functions): the CPU backend
 * (OpenBLAS + OpenMP) is ops_cpu.c; a CUDA backend implements the same
 * ops in .cu files of lib/nn over lib/cuda.
 *
 * Errors: functions returning int give 0, or -1 with a message in err.
 * Nothing here prints or exits.
 */
#ifndef GK_NN_H
#define GK_NN_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* ---- configuration ---------------------------------------------------------- */

typedef struct gk_nn_config {
	int64_t layers;    /* n_layer */
	int64_t hidden;    /* n_embd, C */
	int64_t heads;     /* n_head; hidden % heads == 0 */
	int64_t vocab;     /* vocab_size, as checkpoints store it */
	int64_t positions; /* n_positions: the longest sequence */
	int64_t vocab_pad; /* rows of wte held internally (vocab rounded up to
			    * a multiple of 128 by gk_nn_config_finish); the
			    * padded rows are zero, never trained, never in a
			    * checkpoint and never sampled */
	float ln_eps;      /* layer_norm_epsilon (1e-5) */
} gk_nn_config;

/*
 * Byte-level vocabulary for .txt data: bytes 0..255 and one end-of-text
 * token, 256.
 */
#define GK_NN_BYTE_VOCAB 257
#define GK_NN_BYTE_EOT 256

/* Check the fields (positive, heads dividing hidden, sane bounds so no
 * size overflows) and set vocab_pad. */
int gk_nn_config_finish(gk_nn_config *c, gk_err *err);
/*
 * Read a GPT-2 config.json (the file transformers writes and mem-estimate
 * reads: n_layer, n_embd, n_head, vocab_size, n_positions,
 * layer_norm_epsilon; activation_function must be gelu_new and the model
 * GPT-2's). Calls gk_nn_config_finish.
 */
int gk_nn_config_load(gk_nn_config *c, const char *path, gk_err *err);
/* Write config.json in GPT-2's format (loads with GPT2Config.from_pretrained). */
int gk_nn_config_save(const gk_nn_config *c, const char *path, gk_err *err);

/* ---- the parameter table ---------------------------------------------------------- */

typedef struct gk_nn_tensor {
	char name[64];     /* Hugging Face name: "transformer.h.0.attn.c_attn.weight" */
	int ndim;          /* 1 or 2 */
	int64_t shape[2];  /* as the checkpoint stores it (wte: vocab, hidden) */
	size_t off;        /* first element in the flat buffer */
	size_t numel;      /* elements in the flat buffer (wte: vocab_pad * hidden) */
	int decay;         /* AdamW weight decay applies (2-D tensors) */
} gk_nn_tensor;

/* ---- the model ---------------------------------------------------------------- */

typedef enum gk_nn_recompute {
	GK_NN_RECOMPUTE_NONE,  /* keep every activation backward needs */
	GK_NN_RECOMPUTE_GELU,  /* recompute the GeLU output from its input */
	GK_NN_RECOMPUTE_LAYER  /* keep each block's input; redo the block in backward */
} gk_nn_recompute;

typedef struct gk_nn_opts {
	int batch, seq;               /* B, T of every forward (T <= positions) */
	gk_nn_recompute recompute;
	int threads;                  /* compute threads; 0: OpenMP's default. One
				       * OpenMP pool runs every op; OpenBLAS is set
				       * to 1 thread and called inside it */
} gk_nn_opts;

typedef struct gk_nn_model gk_nn_model;

/* Allocate parameters, gradients and activations for opts' B x T. The
 * parameters are zero until gk_nn_init or gk_nn_load. */
int gk_nn_new(gk_nn_model **out, const gk_nn_config *c, const gk_nn_opts *o,
	      gk_err *err);
void gk_nn_free(gk_nn_model *m);
const gk_nn_config *gk_nn_config_of(const gk_nn_model *m);

/*
 * GPT-2's initialisation from seed: N(0, 0.02) for weights and
 * embeddings, zero biases, LayerNorm weights 1, and the residual
 * projections (attn.c_proj.weight, mlp.c_proj.weight) N(0, 0.02/sqrt(2L)).
 * The same seed gives the same parameters on every machine and rank.
 */
void gk_nn_init(gk_nn_model *m, uint64_t seed);
/*
 * Load parameters from a checkpoint: anything gk_ckpt_open takes (a
 * .safetensors file, a Hugging Face directory or index, a training step
 * directory or its root). Names with or without the "transformer."
 * prefix; lm_head.weight, when present, must equal wte (tied); the
 * attention mask buffers older checkpoints carry (attn.bias,
 * attn.masked_bias) are ignored; F32, F16 and BF16 are converted. A
 * missing tensor or one of another shape is an error naming it.
 */
int gk_nn_load(gk_nn_model *m, const char *path, gk_err *err);

float *gk_nn_params(gk_nn_model *m);
float *gk_nn_grads(gk_nn_model *m);
size_t gk_nn_nparams(const gk_nn_model *m); /* elements of the flat buffers */
/* The table, in buffer order; *n tensors. */
const gk_nn_tensor *gk_nn_tensors(const gk_nn_model *m, size_t *n);

/* ---- the step ------------------------------------------------------------------ */

/*
 * Forward over B x T tokens (row-major, B rows of T). With targets, *loss
 * is the mean cross-entropy over the B*T positions (a target < 0 is
 * ignored and not counted, as PyTorch's ignore_index); without, only the
 * logits are computed. Token ids must be < vocab (an error names the
 * first bad one).
 */
int gk_nn_forward(gk_nn_model *m, const int32_t *tokens,
		  const int32_t *targets, float *loss, gk_err *err);
/* Logits of row b, position t after a forward: vocab_pad floats (the
 * padded ones are not meaningful; use the first vocab). Valid until the
 * next backward, which turns them into their gradient in place. */
const float *gk_nn_logits(const gk_nn_model *m, int b, int t);

/* Zero the gradient buffer (before the first micro-step of a step). */
void gk_nn_zero_grad(gk_nn_model *m);

/*
 * Called during backward when the gradients of elements [off, nparams)
 * are final: after ln_f, after each block (its first element), and with
 * off 0 at the end. The trainer starts bucket allreduces there.
 */
typedef int (*gk_nn_ready_fn)(size_t off, void *ctx, gk_err *err);

/*
 * Backward of the last forward (which had targets), accumulating into the
 * gradient buffer: grads += scale * d(loss)/d(params). With gradient
 * accumulation over k micro-steps, scale = 1/k gives the gradient of the
 * mean loss. ready may be NULL (no callbacks: the micro-steps before the
 * last one); an error it returns stops backward and is returned.
 */
int gk_nn_backward(gk_nn_model *m, float scale, gk_nn_ready_fn ready,
		   void *ctx, gk_err *err);

/* Sum of squares of n gradient elements (for the global norm; double
 * accumulation, deterministic for a given thread count). */
double gk_nn_sumsq(const float *g, size_t n);

/* Floating-point operations of one forward+backward over B x T (the
 * trainer's GFLOP/s and MFU): 6 * matmul params * tokens + attention. */
double gk_nn_flops(const gk_nn_model *m);

/* ---- the optimizer -------------------------------------------------------------- */

typedef struct gk_nn_adamw {
	float beta1, beta2, eps, weight_decay; /* 0.9 0.95 1e-8 0.1 */
} gk_nn_adamw;

/*
 * One AdamW step (torch.optim.AdamW's arithmetic: decoupled weight decay
 * p -= lr*wd*p on tensors with decay set, bias-corrected moments) on the
 * flat range [lo, hi) of the model's parameters, with g the gradients of
 * that range and m, v the moments of that range (hi - lo floats each,
 * zero before step 1). t is the 1-based step. A rank of ZeRO-1 passes its
 * own range; without ZeRO the range is everything.
 */
void gk_nn_adamw_step(const gk_nn_model *model, const gk_nn_adamw *c,
		      float lr, int64_t t, size_t lo, size_t hi, float *params,
		      const float *g, float *m, float *v);

/* ---- schedules ------------------------------------------------------------------ */

typedef enum gk_nn_sched_kind {
	GK_NN_SCHED_COSINE,   /* to min_lr at steps */
	GK_NN_SCHED_LINEAR,   /* to min_lr at steps */
	GK_NN_SCHED_CONSTANT
} gk_nn_sched_kind;

typedef struct gk_nn_sched {
	gk_nn_sched_kind kind;
	double lr, min_lr;
	int64_t warmup, steps; /* linear warmup from lr/warmup over `warmup` steps */
} gk_nn_sched;

/* Learning rate of 1-based step t. */
double gk_nn_lr(const gk_nn_sched *s, int64_t t);
const char *gk_nn_sched_name(gk_nn_sched_kind k);
int gk_nn_sched_parse(const char *s); /* -1 when unknown */

/* ---- memory -------------------------------------------------------------------- */

/* Bytes the model allocated, by category (keys as lib/mem's parts). */
typedef struct gk_nn_mem {
	uint64_t parameters, gradients, activations, workspace;
} gk_nn_mem;

void gk_nn_memory(const gk_nn_model *m, gk_nn_mem *out);

#endif
