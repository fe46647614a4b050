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

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "comm/comm.h"

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

/* Bounds of a model's shape that keep every size product far from overflow. */
#define GK_NN_MAX_LAYERS 1024
#define GK_NN_MAX_HIDDEN 65536
#define GK_NN_MAX_HEADS 1024
#define GK_NN_MAX_VOCAB (1 << 24)
#define GK_NN_MAX_POSITIONS (1 << 20)

/* Check the fields (positive, heads dividing hidden, the bounds above) and
 * set vocab_pad. */
int gk_nn_config_finish(gk_nn_config *c, gk_err *err);
/* GPT-2 small's shape on the byte vocabulary: 12 layers, hidden 768, 12
 * heads, 1024 positions (before gk_nn_config_finish). */
extern const gk_nn_config gk_nn_gpt2_small;
/* The fields of f that are set (not 0) over c: shape flags over a config. */
void gk_nn_config_over(gk_nn_config *c, const gk_nn_config *f);
/* The same shape (layers, hidden, heads, vocab, positions). */
int gk_nn_config_equal(const gk_nn_config *a, const gk_nn_config *b);
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
/* "none", "gelu", "layer"; -1 when unknown. */
int gk_nn_recompute_parse(const char *s);

/* Where the model runs (see "the CUDA backend" below). */
typedef enum gk_nn_device {
	GK_NN_CPU,  /* OpenBLAS + OpenMP, fp32 */
	GK_NN_CUDA, /* the current CUDA device (gk_cuda_device_select) */
	GK_NN_AUTO  /* the trainer only: CUDA when every rank has a usable
		     * GPU, else the CPU with a note */
} gk_nn_device;
/* "cpu", "cuda" (or "gpu"), "auto"; -1 when unknown. */
int gk_nn_device_parse(const char *s);

/* Arithmetic of the CUDA backend's matmuls and activations. */
typedef enum gk_nn_precision {
	GK_NN_BF16, /* bf16 activations and working weights, fp32 accumulation,
		     * fp32 master weights, gradients and moments (default) */
	GK_NN_TF32, /* fp32 storage, TF32 tensor-core matmuls */
	GK_NN_FP32  /* fp32 everywhere */
} gk_nn_precision;
/* "bf16", "tf32", "fp32"; -1 when unknown. gk_nn_precision_name: back. */
int gk_nn_precision_parse(const char *s);
const char *gk_nn_precision_name(int p);

typedef struct gk_nn_opts {
	int batch, seq;               /* B, T of every forward (T <= positions) */
	gk_nn_recompute recompute;
	int threads;                  /* compute threads; 0: OpenMP's default. One
				       * OpenMP pool runs every op; OpenBLAS is set
				       * to 1 thread and called inside it */
	int device;                   /* GK_NN_CPU (0) | GK_NN_CUDA */
	int precision;                /* GK_NN_BF16 (0) | GK_NN_TF32 | GK_NN_FP32;
				       * CUDA only: the CPU computes in fp32 */
	int flat_multiple;            /* 0 or 1: the flat parameter and gradient
				       * buffers hold nparams floats; k: their
				       * length rounded up to a multiple of k
				       * (gk_nn_nflat), the tail zero and never
				       * written by the model, so k ranks' equal
				       * ZeRO-1 ranges reduce-scatter and
				       * allgather in place in them */
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
 * buffers Hugging Face checkpoints carry (gk_ckpt_is_buffer: attn.bias,
 * attn.masked_bias) are ignored; F32, F16 and BF16 are converted. A
 * missing tensor or one of another shape is an error naming it.
 */
int gk_nn_load(gk_nn_model *m, const char *path, gk_err *err);

float *gk_nn_params(gk_nn_model *m);
float *gk_nn_grads(gk_nn_model *m);
size_t gk_nn_nparams(const gk_nn_model *m); /* elements of the flat buffers */
/* floats allocated for each flat buffer (host, and device on a GPU):
 * nparams rounded up to opts' flat_multiple */
size_t gk_nn_nflat(const gk_nn_model *m);
/* The model's parameters as Hugging Face counts them (sum of numel over
 * GPT2LMHeadModel's tensors, the tied lm_head once): nparams less the
 * padded vocabulary rows. */
size_t gk_nn_param_count(const gk_nn_model *m);
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
 * are final: after ln_f, after each weight of a block on the CPU (after
 * each block on CUDA, where it means queued), and with off 0 at the end.
 * The trainer starts bucket allreduces there.
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
 * that range, each taken times gscale (the clipping factor, rounded to
 * float as torch's in-place g *= coef; 1: as they are), and m, v the
 * moments of that range (hi - lo floats each, zero before step 1). t is
 * the 1-based step. A rank of ZeRO-1 passes its own range; without ZeRO
 * the range is everything.
 */
void gk_nn_adamw_step(const gk_nn_model *model, const gk_nn_adamw *c,
		      float lr, int64_t t, size_t lo, size_t hi, float *params,
		      const float *g, float gscale, float *m, float *v);

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

/*
 * Bytes the model allocated, by category (keys as lib/mem's parts). On the
 * CUDA backend these are device bytes from lib/cuda's accounting of this
 * model's allocations (gk_cuda_alloc by kind): parameters hold the fp32
 * master and the bf16 working copy, optimizer the AdamW moments (0 until
 * the first gk_nn_cuda_adamw); the CPU backend's optimizer is 0 (its
 * moments are the caller's).
 */
typedef struct gk_nn_mem {
	uint64_t parameters, gradients, activations, workspace;
	uint64_t optimizer;
} gk_nn_mem;

void gk_nn_memory(const gk_nn_model *m, gk_nn_mem *out);

/* ---- training data (data.c) ------------------------------------------------------ */

/*
 * The trainer's token stream, from either
 *   shards   a manifest or a brace pattern of shard files (lib/shard's
 *            dataset: the rank split, the (seed, epoch) shuffle, resume);
 *            a sample's tokens are its .npy member (1-D '<u2' or '<i4')
 *            or else its .txt member's bytes; samples are joined with the
 *            end-of-text token into one stream per rank;
 *   tokens   .bin files (every name ending in .bin): llm.c's (a
 *            1024-byte header of int32: magic 20240520, version 1, token
 *            count; then uint16 tokens) or nanoGPT's (raw uint16), told
 *            apart by the magic and the exact size; the files are one
 *            stream shared by all ranks, and micro-batch k of rank r
 *            starts at token (k*world + r)*B*T (llm.c's loader), so a
 *            global batch is the same tokens at any world size.
 * Row b of a micro-batch is tokens [h + b*T, h + b*T + T + 1) of the
 * stream from the head h: inputs are the first T, targets the last T;
 * the head then moves by B*T (shards) or world*B*T (tokens).
 */
typedef struct gk_nn_data_opts {
	int rank, world;
	int shuffle;        /* shards: lib/shard's shard and window shuffle */
	uint64_t seed;
	int64_t vocab;      /* every token id must be below it */
	int32_t eot;        /* end-of-text token; < 0: vocab - 1 (GPT-2's
			     * 50256, the byte vocabulary's 256) */
	int batch, seq;     /* B, T */
	int loop;           /* go on into the next epoch at the end */
	int skip_bad;       /* shards: skip (and count) a sample that cannot
			     * be decoded or holds a token >= vocab,
			     * instead of failing */
	/* shards: gk_shard_dataset_opts' note (a problem worked around) */
	void (*note)(void *ctx, const char *msg);
	void *note_ctx;
} gk_nn_data_opts;

typedef struct gk_nn_data gk_nn_data;

/* Samples skipped so far under skip_bad (0 otherwise). */
uint64_t gk_nn_data_bad(const gk_nn_data *d);

/* Open source; a token >= vocab is an error naming the shard and sample
 * (shards: when the sample is read) or the file (tokens: at open). */
int gk_nn_data_open(gk_nn_data **out, const char *source,
		    const gk_nn_data_opts *o, gk_err *err);
/* Fill B*T inputs and targets: 1, or 0 at the end of the data (without
 * loop), or -1. */
int gk_nn_data_next(gk_nn_data *d, int32_t *inputs, int32_t *targets,
		    gk_err *err);
/* The position as one line of JSON (what a checkpoint keeps), as much
 * as fits in buf; returns, as snprintf does, the length of the whole
 * (which has no fixed bound: a remapped epoch keeps every earlier rank's
 * position), or -1. */
int gk_nn_data_state(const gk_nn_data *d, char *buf, size_t len);
/* Go back to a saved position: the next micro-batch is the one that
 * followed it. Token files: the global token position, so another world
 * size resumes at the same place. */
int gk_nn_data_restore(gk_nn_data *d, const char *json, gk_err *err);
/*
 * Shards saved by another world size: json holds every old rank's state
 * (n of them, in rank order); lib/shard's gk_shard_dataset_restore_world
 * splits the epoch's unseen samples evenly over the new ranks, so within
 * the epoch no sample is skipped and none is seen twice. The sample each
 * old rank was partway through is among them; the new rank that gets it
 * starts it at the token where the old rank stopped, so no token is
 * trained on twice either. (Its state carries that cut until the epoch
 * ends, for a restore that reads the sample again.)
 */
int gk_nn_data_restore_world(gk_nn_data *d, const char *const *json, size_t n,
			     gk_err *err);
uint64_t gk_nn_data_epoch(const gk_nn_data *d);
/*
 * What d reads, as a number that ranks can compare: for shards the
 * list's names and sample counts (gk_shard_state.list), for token files
 * the token count of each. Equal on ranks that split the same data.
 */
uint64_t gk_nn_data_identity(const gk_nn_data *d);
int gk_nn_data_is_bin(const gk_nn_data *d);
void gk_nn_data_close(gk_nn_data *d);

/* A parsed .npy array (numpy/lib/format.py, versions 1 to 3). */
typedef struct gk_nn_npy {
	const unsigned char *data; /* inside the buffer given */
	uint64_t count;            /* elements */
	int itemsize, is_signed;   /* '<u2': 2, 0; '<i4': 4, 1 */
} gk_nn_npy;

/* Accepts 1-D, C order, '<u2' or '<i4', data filling the rest exactly. */
int gk_nn_npy_parse(const void *buf, size_t len, gk_nn_npy *out, gk_err *err);

/* ---- the trainer (train.c) --------------------------------------------------------- */

/*
 * gpu-train's loop. Ranks come from gk_rank_discover through lib/comm
 * (mpi under a launcher, self alone). One step: A micro-steps of forward
 * and backward(1/A); on the last, backward's ready callbacks start
 * bucketed allreduces (ZeRO-0) that overlap the rest of backward, or a
 * reduce-scatter follows it (ZeRO-1, over the flat buffer padded to a
 * multiple of the world); then global-norm clipping, AdamW on this rank's
 * range, and for ZeRO-1 an allgather of the parameters.
 *
 * Checkpoints (gpu-train(1), "CHECKPOINTS"): a lib/ckpt step directory
 * with model.safetensors (Hugging Face names, unpadded vocabulary),
 * config.json, trainer.json (step, tokens, every rank's data state, the
 * schedule, world and shape), and the AdamW moments as 1-D f32 tensors
 * "m" and "v" over the flat parameter buffer: optim.safetensors whole, or
 * with ZeRO-1 one optim-rank-R-of-W.safetensors per rank holding its
 * range as a row slice (gpukit.slice metadata), so any world resumes
 * from any other. The state is copied to host buffers at the step
 * boundary and written by a thread; rank 0 commits once every rank has
 * written (agreed in the step's small allreduce).
 */
typedef struct gk_nn_train_opts {
	gk_nn_config cfg;       /* used when have_config */
	int have_config;
	gk_nn_config shape;     /* the shape flags given (0: not given): over
				 * a checkpoint's config.json, when cfg came
				 * from the flags alone (no --config) */
	int cfg_from_flags;
	const char *init_from;  /* checkpoint to start from (fine-tuning) */
	uint64_t seed;          /* init, shuffle and sampling */
	const char *data, *val_data;
	int shuffle;
	int32_t eot;            /* < 0: vocab - 1 */
	int batch, seq, grad_accum;
	gk_nn_recompute recompute;
	int threads;            /* <= 0: this rank's share of its CPUs
				 * (gk_nn_placement) */
	int device;             /* GK_NN_CPU (0), GK_NN_CUDA or GK_NN_AUTO */
	int precision;          /* gk_nn_precision, on a GPU */
	gk_nn_sched sched;
	gk_nn_adamw adamw;
	double clip;            /* global-norm clip; 0: off */
	int64_t steps;          /* the schedule's length and the last step */
	int64_t until;          /* > 0: stop after this step (checkpointing) */
	int zero;               /* 0 or 1 */
	gk_comm_compress compress;   /* the buckets' allreduce, or ZeRO-1's
				      * reduce-scatter (not its allgather) */
	int overlap;            /* allreduce buckets during backward (1), after
				 * it (0), or GK_NN_AUTO: during it on a GPU,
				 * across hosts, or when the threads of the
				 * ranks sharing this rank's CPUs leave one
				 * free; else after (gk_nn_trainer_new) */
	size_t bucket_bytes;    /* 0: lib/comm's default (25 MiB) */
	gk_comm_backend comm;   /* the gradients' on a GPU: AUTO (nccl when the
				 * world is larger than 1, the host path when
				 * NCCL cannot start), MPI (through host
				 * memory), NCCL (required; in a world of one
				 * too); on the CPU only AUTO and MPI */
	double timeout;         /* collective watchdog, gk_comm_config's */
	const char *ckpt_dir;
	int64_t ckpt_every;
	int resume;             /* continue from ckpt_dir's latest, if any */
	int64_t eval_every, eval_batches; /* eval_batches <= 0: all the data */
	int eval_only;
	int skip_nonfinite;
	int ckpt_continue;      /* a failed checkpoint: warn (hook) and train on */
	int skip_bad;           /* gk_nn_data_opts' skip_bad */
	void (*data_note)(void *ctx, const char *msg); /* and its note */
	void *data_note_ctx;
	/* Set by the caller's signal handlers: 1 checkpoint and stop at the
	 * next step boundary, 2 stop without a checkpoint. */
	volatile sig_atomic_t *stop;
	int ckpt_delay_ms;      /* tests: the writer sleeps before writing and
				 * (rank 0) before committing, rank 0 before
				 * checking a checkpoint it loads */
	const gk_err *failed;   /* an error this rank met before the trainer
				 * (its --config unreadable on this node), or
				 * NULL: gk_nn_trainer_new opens the world only
				 * to fail on every rank with it (see there) */
	/* The settings every rank must share, as the caller's option table
	 * names them ({"--batch", value}); the trainer compares them, and what
	 * they resolved to (the model's shape), in its first collective. */
	const gk_comm_setting *agree;
	size_t nagree;
} gk_nn_train_opts;

/*
 * What the options leave to be computed, once: the schedule's length
 * (steps) and final rate (min_lr < 0: lr / 10); the model's shape from
 * config_path (a GPT-2 config.json, or NULL) with the shape flags
 * (o->shape) over it, over GPT-2 small when neither is given; seq, when
 * 0, from the shape's positions. With init_from or resume a checkpoint's
 * config.json takes GPT-2 small's place under the flags, and the trainer
 * finishes the shape and seq once it has read it (gk_nn_trainer_new).
 * Returns 0; -1 when config_path cannot be read; -2 when the shape of the
 * flags alone cannot be built (err says why: the caller's usage error).
 */
int gk_nn_train_resolve(gk_nn_train_opts *o, const char *config_path, gk_err *err);
/* The data reader's options of a run with these options and this
 * vocabulary (rank and world 0 and 1: set them). */
void gk_nn_train_data_opts(const gk_nn_train_opts *o, int64_t vocab, gk_nn_data_opts *d);

/*
 * Bytes this rank allocated, by category. parameters, gradients and
 * optimizer count the model's own parameters (mem-estimate's Psi, f32,
 * AdamW; optimizer divided by the world under ZeRO-1): they equal
 * mem-estimate's figures. padding is what the padded vocabulary rows and
 * logit columns and ZeRO-1's rounding add; comm the ZeRO-1 buffers and
 * error-feedback residuals.
 */
typedef struct gk_nn_train_mem {
	uint64_t parameters, gradients, optimizer, activations, workspace, padding;
	uint64_t comm, total;
} gk_nn_train_mem;

typedef struct gk_nn_train_log {
	int64_t step;
	double loss, lr, grad_norm;
	uint64_t tokens;        /* trained so far, all ranks */
	double tokens_per_s, step_ms, comm_ms, exposed_comm_ms, gflops;
	int skipped;            /* the update was skipped (non-finite) */
	int64_t bad_samples;    /* skipped corrupt samples so far, all ranks */
	double val_loss;        /* NaN unless evaluated at this step */
} gk_nn_train_log;

/* Called on rank 0 only; the caller prints. */
typedef struct gk_nn_train_hooks {
	void (*step)(const gk_nn_train_log *l, void *ctx);
	/* committed; seconds from the start of its copy to host memory
	 * until every rank knew it committed */
	void (*checkpoint)(int64_t step, double seconds, void *ctx);
	void *ctx;
	/*
	 * With ckpt_continue, checkpoint step failed (why says how; the
	 * staging directory is removed, latest still names the previous
	 * one) and training goes on. Called on the ranks that failed, and
	 * on rank 0 when another rank did.
	 */
	void (*checkpoint_failed)(int64_t step, const gk_err *why, void *ctx);
} gk_nn_train_hooks;

typedef struct gk_nn_train_summary {
	int64_t first_step, step, steps, skipped;
	int64_t bad_samples;    /* as in the last step's log */
	uint64_t tokens;
	double seconds, last_loss, min_loss, val_loss;
	int stopped;            /* 0 done, 1 by a checkpoint signal, 2 interrupted */
	int dropped;            /* micro-batches of the step a signal stopped
				 * between micro-steps (its gradients are
				 * dropped, the data put back), else 0 */
	int64_t ckpt_lost;      /* the last checkpoint failed (--ckpt-error
				 * continue): its step, else 0 */
	const char *data_note;  /* a remark on the data position, or NULL */
	double tokens_per_s;    /* over the steps of this run, all ranks */
} gk_nn_train_summary;

typedef struct gk_nn_trainer gk_nn_trainer;

/*
 * Open the world, build or load the model (resume: ckpt_dir's latest
 * step; else init_from; else GPT-2 init from seed) and the data. On
 * failure *out may still be set so the caller can gk_nn_trainer_abort
 * the other ranks and then free it.
 *
 * A rank that failed before it could call this (o->failed) still calls
 * it: its first collective tells every rank, all fail (exit 1 together,
 * no MPI_Abort), and gk_nn_trainer_failed picks the first failing rank
 * to report o->failed, with how many ranks met it. A rank that exited
 * instead would leave the others waiting in MPI's start-up.
 */
int gk_nn_trainer_new(gk_nn_trainer **out, const gk_nn_train_opts *o,
		      gk_err *err);
/* Train to o->steps (or until), checkpointing; fills *sum. */
int gk_nn_trainer_run(gk_nn_trainer *t, gk_nn_train_hooks *h,
		      gk_nn_train_summary *sum, gk_err *err);
/* Mean loss over batches micro-batches of src (<= 0: one pass), over
 * every rank's windows. */
int gk_nn_trainer_eval(gk_nn_trainer *t, const char *src, int64_t batches,
		       double *loss, int64_t *nbatches, gk_err *err);
const gk_nn_train_mem *gk_nn_trainer_mem(const gk_nn_trainer *t);

/*
 * A step's log as Prometheus metrics (gpu-train --metrics): sets the
 * gpukit_train_* samples of m (steps_total, tokens_total, loss,
 * learning_rate, grad_norm, step_seconds, comm_seconds,
 * exposed_comm_seconds, tokens_per_second, step_skipped, world_size,
 * last_step_timestamp_seconds at now (Unix time), val_loss once evaluated,
 * memory_bytes{category} from mem), replacing the previous step's.
 * -1 with err set when m refuses a sample.
 */
int gk_nn_train_metrics(gk_metrics *m, const gk_nn_train_log *l,
			const gk_nn_train_mem *mem, int world, double now,
			gk_err *err);

/* What rank 0 knows of this run's checkpoints (from the hooks). */
typedef struct gk_nn_ckpt_stats {
	int64_t step;   /* the last committed, 0: none yet */
	double seconds; /* its time, as the checkpoint hook gives it */
	double when;    /* its commit, in Unix time */
	int64_t failed; /* checkpoints not written (--ckpt-error continue) */
} gk_nn_ckpt_stats;

/*
 * Into m: gpukit_train_checkpoints_failed_total, and once a checkpoint
 * is committed gpukit_train_checkpoint_step, _checkpoint_seconds and
 * _checkpoint_timestamp_seconds. -1 with err set when m refuses a sample.
 */
int gk_nn_train_ckpt_metrics(gk_metrics *m, const gk_nn_ckpt_stats *s, gk_err *err);
const gk_nn_config *gk_nn_trainer_config(const gk_nn_trainer *t);
/* The options as the trainer resolved them: seq from the model's
 * positions when it was 0, threads from the CPUs, grad_accum at least 1,
 * eot from the vocabulary when it was < 0. */
const gk_nn_train_opts *gk_nn_trainer_opts(const gk_nn_trainer *t);
/* "cpu" or "cuda:N"; *note (if not NULL) is why GK_NN_AUTO chose the CPU,
 * or NULL. */
const char *gk_nn_trainer_device(const gk_nn_trainer *t, const char **note);
/* The gradients' communicator backend ("self", "mpi", "nccl"); *note
 * (if not NULL) is why --comm auto fell back to the host path, or NULL. */
const char *gk_nn_trainer_comm(const gk_nn_trainer *t, const char **note);
/* Rank 0: what --resume repaired in --ckpt-dir (latest moved on to the
 * step a killed run committed last), or NULL. */
const char *gk_nn_trainer_ckpt_note(const gk_nn_trainer *t);
/* The checkpoint the model was loaded from (the step directory --resume
 * or --init-from resolved to), or NULL for the seeded initialisation. */
const char *gk_nn_trainer_model_from(const gk_nn_trainer *t);
gk_nn_model *gk_nn_trainer_model(gk_nn_trainer *t);
int gk_nn_trainer_rank(const gk_nn_trainer *t);
int gk_nn_trainer_world(const gk_nn_trainer *t);
/*
 * After gk_nn_trainer_new or gk_nn_trainer_run failed (t may be NULL): the
 * exit status, and in *report whether this rank says why. A failure
 * every rank met together is reported by rank 0 alone and each rank ends
 * normally: options that differ between the ranks (2, as a usage error),
 * a checkpoint directory or checkpoint that rank 0 refused, a loss or
 * gradient norm that is not finite (1). Any other is 1, reported by the
 * rank that met it.
 */
int gk_nn_trainer_failed(const gk_nn_trainer *t, int *report);
/* After a failure on this rank: end the whole job (MPI_Abort) when the
 * world has more than one rank, unless every rank met the failure
 * together (gk_nn_trainer_failed); returns for a world of one. */
void gk_nn_trainer_abort(gk_nn_trainer *t, int code);
void gk_nn_trainer_free(gk_nn_trainer *t);

/*
 * Where a rank runs, as gk_nn_trainer_new found it from every rank's
 * host name and CPU set: its CPUs, the ranks of its host whose sets meet
 * its own (itself included: mpirun binds to a socket beyond 2 ranks, and
 * --bind-to none gives every rank the whole host), its share of the CPUs
 * (cpus / sharing, at least 1: --threads' default), the CPUs the threads
 * of those ranks leave free, and the hosts of the job. cpus is at most
 * the cgroup's CPU quota (quota, in CPUs, 0 for none: a container's CPU
 * limit), rounded up (gk_cpus_usable).
 */
typedef struct gk_nn_placement {
	int cpus, sharing, share, spare, hosts;
	double quota;
} gk_nn_placement;
const gk_nn_placement *gk_nn_trainer_placement(const gk_nn_trainer *t);

/*
 * Generation with a key/value cache (CPU models): gk_nn_decode appends
 * token tok at the next position (0, 1, ... up to the model's positions)
 * and sets *logits to the vocab_pad logits that follow it, valid until
 * the next call. A CUDA model is refused.
 */
typedef struct gk_nn_decoder gk_nn_decoder;
int gk_nn_decoder_new(gk_nn_decoder **out, gk_nn_model *m, gk_err *err);
int gk_nn_decode(gk_nn_decoder *d, int32_t tok, const float **logits,
		 gk_err *err);
int gk_nn_decoder_len(const gk_nn_decoder *d);
void gk_nn_decoder_reset(gk_nn_decoder *d);
void gk_nn_decoder_free(gk_nn_decoder *d);
/*
 * The logits after a window of w <= seq tokens (CPU model): a forward of
 * that one sequence, not of the whole training batch. A backward then
 * needs a new gk_nn_forward first.
 */
int gk_nn_forward_window(gk_nn_model *m, const int32_t *tokens, int w,
			 const float **logits, gk_err *err);

/*
 * Generate n tokens after start (temperature <= 0: greedy; top_k > 0:
 * only the k most likely), each from the logits after the last seq tokens;
 * seeded, so the same seed gives the same text. While the history fits in
 * seq, a CPU model decodes with the cache (one row per token); beyond it
 * the window slides, every position moves, and each token takes a forward
 * of the window, one sequence of seq rows (on a GPU, of the whole batch).
 */
int gk_nn_sample(gk_nn_model *m, int batch, int seq, int32_t start, int n,
		 double temperature, int top_k, uint64_t seed, int32_t *out,
		 gk_err *err);

/* ---- the step's other parts, wherever the model computes ----------------------------- */

/*
 * The trainer's calls after backward, the same on every backend, so that
 * it never asks where the model runs. The "working" buffers are where the
 * model computes: the host's flat buffers (gk_nn_params, gk_nn_grads) on
 * the CPU, the device's fp32 master parameters and gradients on a GPU (the
 * flat layout, nflat floats). On a GPU the host buffers stay as mirrors:
 * gk_nn_init and gk_nn_load write the host's parameters, gk_nn_upload
 * copies them (GK_NN_PARAMS) and/or the gradients (GK_NN_GRADS) to the
 * device, gk_nn_download back, for a checkpoint or a host-side
 * allreduce. On the CPU the copies do nothing.
 */
#define GK_NN_PARAMS 1
#define GK_NN_GRADS 2
int gk_nn_upload(gk_nn_model *m, int what, gk_err *err);
int gk_nn_download(gk_nn_model *m, int what, gk_err *err);
float *gk_nn_work_params(gk_nn_model *m);
float *gk_nn_work_grads(gk_nn_model *m);
/* The stream (a cudaStream_t) every kernel of a GPU model runs on, for a
 * communicator that orders its work after backward's (comm.h, "Streams");
 * NULL on the CPU. */
void *gk_nn_stream(const gk_nn_model *m);
/* After writing the working parameters (a ZeRO-1 allgather): a GPU model
 * rounds its bf16 working copy from them; the CPU has nothing to do. */
int gk_nn_params_changed(gk_nn_model *m, gk_err *err);

/*
 * Sum of squares of n working floats g (gk_nn_sumsq on the CPU; on a GPU
 * two passes in double, no atomics), and the global norm of the model's
 * own gradients, the square root of it over all of them.
 */
int gk_nn_work_sumsq(gk_nn_model *m, const float *g, size_t n, double *sumsq,
		     gk_err *err);
int gk_nn_grad_norm(gk_nn_model *m, double *norm, gk_err *err);

/*
 * AdamW (gk_nn_adamw_step's arithmetic) on the working parameters
 * [lo, hi), with g the range's working gradients, or NULL for the model's
 * own from lo. mom and vel (hi - lo floats each) are the moments on the
 * CPU; a GPU model keeps its own on the device (allocated for the range
 * on first use) and mom and vel are their host mirrors, copied by
 * gk_nn_moments_sync (upload 1: to the device, for a resume; 0: back, for
 * a checkpoint), which does nothing on the CPU.
 */
int gk_nn_update(gk_nn_model *m, const gk_nn_adamw *c, float lr, int64_t t,
		 float grad_scale, size_t lo, size_t hi, const float *g, float *mom,
		 float *vel, gk_err *err);
int gk_nn_moments_sync(gk_nn_model *m, size_t lo, size_t hi, float *mom, float *vel,
		       int upload, gk_err *err);

#endif
