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
 * The module's other public headers: nn/data.h (the trainer's token
 * stream) and nn/train.h (the trainer).
 *
 * Errors: functions returning int give 0, or -1 with a message in err.
 * Nothing here prints or exits.
 */
#ifndef GK_NN_H
#define GK_NN_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "tok/tok.h"

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

/*
 * The CUDA model's pinned staging (gk_nn_opts' staging): 64 MiB, or the
 * model's nparams floats if fewer. A piece of 64 MiB is 1.3 to 2.7 ms of
 * DMA at 25 to 50 GB/s, against tens of microseconds to start and wait
 * for each copy, so pieces cost under 2% over one copy of the whole; and
 * the copies were never overlapped with the host's memcpy into the
 * staging, so whole-buffer staging was no faster. lib/mem's
 * GK_MEM_GPU_STAGING is the same bytes.
 */
#define GK_NN_CUDA_STAGING ((size_t)64 << 20)

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
 * GPT-2's), through lib/hf's reader with unknown keys allowed. Calls
 * gk_nn_config_finish.
 */
int gk_nn_config_load(gk_nn_config *c, const char *path, gk_err *err);
/* Write config.json in GPT-2's format (loads with GPT2Config.from_pretrained). */
int gk_nn_config_save(const gk_nn_config *c, const char *path, gk_err *err);

/* ---- the parameter table ---------------------------------------------------------- */

/*
 * How tensor parallelism (gk_nn_opts' tp) splits a tensor over the ranks
 * of a tensor group (Megatron-LM's layout; lib/nn/tp.c):
 *   NONE  replicated (LayerNorms, wpe, the row-parallel layers' biases)
 *   COLS  the columns of each of `groups` equal groups: c_attn's [Q|K|V]
 *         (3 groups, so each rank holds its heads of each), c_fc (1); the
 *         biases likewise
 *   ROWS  a block of rows: attn.c_proj and mlp.c_proj (row-parallel),
 *         and wte's padded vocabulary (vocab_pad / tp rows a rank)
 */
enum { GK_NN_SPLIT_NONE, GK_NN_SPLIT_COLS, GK_NN_SPLIT_ROWS };

typedef struct gk_nn_tensor {
	char name[64];     /* Hugging Face name: "transformer.h.0.attn.c_attn.weight" */
	int ndim;          /* 1 or 2 */
	int64_t shape[2];  /* as the checkpoint stores it (wte: vocab, hidden),
			    * whole: the same under tensor parallelism */
	size_t off;        /* first element in the flat buffer */
	size_t numel;      /* elements in the flat buffer (wte: vocab_pad * hidden;
			    * a rank's slice under tensor parallelism) */
	int decay;         /* AdamW weight decay applies (2-D tensors) */
	int split, groups; /* GK_NN_SPLIT_*, and COLS' groups (1 or 3) */
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

/*
 * Attention on the CUDA backend. AUTO (0): the fused kernels (flash.cu:
 * tiles, online softmax, no (T,T) matrix; head sizes up to 128) when the
 * head size allows, else the matmul path (cuBLASLt's products around a
 * causal softmax, a (B,NH,T,T) matrix a layer), unless the environment's
 * GK_CUDA_ATTENTION says "fused" or "matmul". FUSED refuses a head size
 * it does not take. The CPU backend has one attention.
 */
typedef enum gk_nn_attention {
	GK_NN_ATTN_AUTO, GK_NN_ATTN_FUSED, GK_NN_ATTN_MATMUL
} gk_nn_attention;

typedef struct gk_nn_opts {
	int batch, seq;               /* B, T of every forward (T <= positions) */
	gk_nn_recompute recompute;
	int threads;                  /* compute threads; 0: OpenMP's default. One
				       * OpenMP pool runs every op; OpenBLAS is set
				       * to 1 thread and called inside it */
	int device;                   /* GK_NN_CPU (0) | GK_NN_CUDA */
	int precision;                /* GK_NN_BF16 (0) | GK_NN_TF32 | GK_NN_FP32;
				       * CUDA only: the CPU computes in fp32 */
	int attention;                /* gk_nn_attention (CUDA only) */
	int flat_multiple;            /* 0 or 1: the flat parameter and gradient
				       * buffers hold nparams floats; k: their
				       * length rounded up to a multiple of k
				       * (gk_nn_nflat), the tail zero and never
				       * written by the model, so k ranks' equal
				       * ZeRO-1 ranges reduce-scatter and
				       * allgather in place in them */
	int lazy_grads;               /* CPU: the gradient buffer is mapped, not
				       * allocated: a page takes memory when
				       * backward first writes it, and
				       * gk_nn_grads_release gives pages back
				       * (ZeRO-2, whose rank keeps only its
				       * shard); gk_nn_memory and gk_nn_plan
				       * count it 0, or under pp the stage's
				       * range (a pipeline stage's gradients) */
	int bucket_grads;             /* CUDA: no gradient buffer of the whole
				       * model on the device (ZeRO-2, whose rank
				       * keeps only its shard): backward writes
				       * into the buffers gk_nn_grad_buckets
				       * makes, which must be called before the
				       * first backward; the host mirror is
				       * mapped and never written */
	int tp, tp_rank;              /* tensor parallelism (tp.c): 0 or 1 none;
				       * else this rank's place in a group of tp
				       * ranks, each holding its slices of the
				       * split tensors (gk_nn_tensor's split).
				       * The CPU backend only; heads and vocab_pad
				       * must divide by tp (gk_nn_tp_check) */
	struct gk_comm *tp_comm;      /* the tensor group's communicator (tp > 1),
				       * the caller's; every rank of the group
				       * calls forward and backward together */
	int seq_par;                  /* sequence parallelism over the tensor
				       * group (tp > 1; Korthikanti et al. 2022):
				       * the LayerNorm and residual regions hold
				       * rank tp_rank's seq / tp positions of each
				       * sequence, and so does what a pipeline
				       * stage passes to the next (gk_nn_pp_count);
				       * seq must divide by tp (gk_nn_sp_check) */
	int unit_params;              /* CUDA: ZeRO-3, with unit_params buffers
				       * of a block (1 to layers): the device
				       * holds this rank's range of the fp32
				       * parameters only, [shard_rank * per,
				       * + per) with per = nflat / flat_multiple,
				       * or a pipeline stage's pieces of its
				       * segments (gk_nn_pp_piece over
				       * flat_multiple ranks; two on the first
				       * and last stage) (updates are of them;
				       * upload and download copy them), and the
				       * working copy in units:
				       * the embeddings [0, block 0), the final
				       * norm [block L-1's end, nflat), and block
				       * l in buffer l % unit_params. The caller
				       * fills a unit (gk_nn_param_at,
				       * gk_nn_params_own) before its kernels
				       * read it: gk_nn_set_param_fn hears of each
				       * block's use. The host's parameters are
				       * mapped as lazy_params', and only the
				       * range's pages are ever written
				       * (gk_nn_init_range, gk_nn_load_range,
				       * the transfers) */
	int shard_rank;
	size_t staging;               /* CUDA: bytes of the pinned staging every
				       * transfer between host and device passes
				       * through, a piece at a time (0:
				       * GK_NN_CUDA_STAGING); at most 4 nparams
				       * are taken, at least 4 are needed */
	int lazy_params;              /* CPU: the parameter buffer is mapped like
				       * lazy_grads' (ZeRO-3, whose rank keeps
				       * only its range between a block's uses);
				       * gk_nn_params_release gives pages back,
				       * gk_nn_memory counts it 0, or under pp
				       * the stage's range (gk_nn_pp_floats) */
	int pp, pp_rank;              /* pipeline parallelism (pp.c): 0 or 1 none;
				       * else this rank is stage pp_rank of pp and
				       * forward and backward run its layers only
				       * (gk_nn_pp_layers). The CPU backend only */
	int pp_chunks;                /* pp > 1: the stage's model chunks (0 or 1:
				       * one, its contiguous block of layers; V:
				       * the interleaved schedule's chunks s, s +
				       * pp, ..., gk_nn_pp_chunk_layers) */
	int release_grads;            /* pp > 1 with lazy_grads: gk_nn_zero_grad
				       * gives the stage's whole pages back
				       * instead of zeroing them (ZeRO-2 over a
				       * pipeline, whose rank keeps only its
				       * pieces between steps) */
} gk_nn_opts;

typedef struct gk_nn_model gk_nn_model;
struct gk_comm;

/*
 * 1 when a CUDA model of c and o uses the fused attention, 0 when the
 * matmul path, -1 with the reason in err when o (or GK_CUDA_ATTENTION)
 * asks for what cannot be: an unknown name, or the fused kernels at a
 * head size they do not take.
 */
int gk_nn_attention_fused(const gk_nn_config *c, const gk_nn_opts *o, gk_err *err);
/*
 * What the start line calls a CUDA model's attention: "fused attention on
 * tensor cores" (bf16 at head sizes a multiple of 16), "fused attention"
 * (the CUDA cores' kernels), "matmul attention"; NULL where
 * gk_nn_attention_fused refuses.
 */
const char *gk_nn_attention_desc(const gk_nn_config *c, const gk_nn_opts *o);

/*
 * 1 when a CUDA model of c and o runs the MLP's GELU in cuBLASLt's
 * epilogues (c_fc's GELU_AUX_BIAS forward, c_proj's DGELU backward), 0
 * when as gelu.cu's kernels between the matmuls. GK_CUDA_GELU chooses:
 * "epilogue", "kernel", or unset (the epilogue where cuBLASLt takes it:
 * the aux matrix's leading dimension 4 * hidden a multiple of 8, so an
 * odd hidden size runs the kernels); -1 with the reason in err for an
 * unknown name or the epilogue asked for where it cannot run.
 */
int gk_nn_gelu_epilogue(const gk_nn_config *c, const gk_nn_opts *o, gk_err *err);

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
 * The same seed gives the same parameters on every machine and rank,
 * and under tensor parallelism each rank's slices of them.
 */
int gk_nn_init(gk_nn_model *m, uint64_t seed); /* -1: no memory (tp's whole model) */
/* lazy_params (and a GPU's unit_params): the same values in [lo, hi), and
 * no memory taken for the others (each tensor's pages outside it released
 * as it is drawn) */
int gk_nn_init_range(gk_nn_model *m, uint64_t seed, size_t lo, size_t hi);
/* ... a pipeline stage's: its range and, on the last stage, the wte it
 * shares with the first (gk_nn_pp_range) */
int gk_nn_init_stage(gk_nn_model *m, uint64_t seed);
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
/*
 * The same for the elements [lo, hi) of the flat buffer only (ZeRO-3's
 * range of the parameters, lazy_params or unit_params): each tensor's
 * part in the range read from its safetensors slices and no more, nothing
 * outside the range written (its pages untouched); every tensor's name and shape
 * checked, lm_head.weight against wte in the range. Not under tensor
 * parallelism.
 */
int gk_nn_load_range(gk_nn_model *m, const char *path, size_t lo, size_t hi, gk_err *err);

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

/* ---- tensor parallelism (tp.c) ---------------------------------------------------- */

/*
 * Whether tp ranks can split model c (heads and the padded vocabulary
 * divisible by tp): 0, or -1 with the numbers in err.
 */
int gk_nn_tp_check(const gk_nn_config *c, int tp, gk_err *err);
/*
 * The whole model's layout (every rank's slices put together: the tensor
 * table and flat buffer of the same model at tp 1), which checkpoints,
 * gk_nn_init and gk_nn_load use whatever the layout of the run. At tp 1
 * these are gk_nn_tensors and gk_nn_nparams.
 */
const gk_nn_tensor *gk_nn_full_tensors(const gk_nn_model *m, size_t *n);
size_t gk_nn_full_nparams(const gk_nn_model *m);
/* This rank's slices of a whole-layout flat buffer (full, full_nparams
 * floats) into a local one (nparams floats). No communication. */
void gk_nn_tp_scatter(const gk_nn_model *m, const float *full, float *local);
/*
 * The whole-layout buffer from every rank's local one (a buffer in the
 * layout of the parameters: the parameters, AdamW's moments), over the
 * tensor group: an allgather, then each rank's slices put in place. full
 * (full_nparams floats) is written on every rank of the group.
 * Collective over the group.
 */
int gk_nn_tp_gather(gk_nn_model *m, const float *local, float *full, gk_err *err);
/*
 * A model on a GPU: the tensor group's collectives over NCCL, on a
 * communicator of its device opened over the host one (gk_nn_opts'
 * tp_comm) with cc's settings, on the model's stream. Collective over
 * the group; nothing on the CPU or at tp 1.
 */
struct gk_comm_config;
int gk_nn_tp_device(gk_nn_model *m, const struct gk_comm_config *cc, gk_err *err);
/*
 * Bytes this rank has put into the tensor group's allreduces of
 * activations and their gradients since the model was made (0 at tp 1):
 * per micro-step, with L layers and N = B*T rows, the embedding's sum and
 * 2 per layer forward (the g operators), 2 per layer backward (f) and
 * the head's d lnf, each N x C floats, and the cross-entropy's 3 N:
 * 4 ((4 L + 2) N C + 3 N), and 8 L N C more when backward recomputes each
 * layer. The norm's one double is not counted.
 */
uint64_t gk_nn_tp_bytes(const gk_nn_model *m);
/*
 * The replicated tensors' (not split: the same on every rank of the
 * tensor group) parts of the gradients' ranges r[0] and r[1] of the flat
 * buffer: copied into buf, one after the other (out 1), or back from it
 * (out 0), or with buf NULL only counted. Returns their floats.
 */
size_t gk_nn_tp_replicas(gk_nn_model *m, const size_t r[2][2], float *buf, int out);
/*
 * The replicated tensors' parts of the gradients' ranges r[0] and r[1]
 * made the tensor group's rank 0's on every rank of the group: on the
 * CPU through buf (gk_nn_tp_replicas' count of floats: copied out, one
 * broadcast over the group, copied back), on a GPU in place in the
 * device's gradients over the group's NCCL communicator, on the model's
 * stream (buf unused): the model's buffer, or with at (device memory,
 * ZeRO-2's shard) there, r[0] from at[0] and r[1] empty. Collective over
 * the group; nothing at tp 1.
 */
int gk_nn_tp_agree_replicas(gk_nn_model *m, const size_t r[2][2], float *buf, float *at,
			    gk_err *err);
/*
 * Whether sequence parallelism (gk_nn_opts' seq_par) can run over tp ranks
 * at sequence length seq: 0, or -1 with the numbers in err. Under it,
 * gk_nn_tp_bytes counts what this rank puts into each collective: N x C
 * floats a reduce-scatter (the g operator forward, f backward), N/tp x C
 * an all-gather (f forward; g backward; the LayerNorm outputs and lnf
 * gathered again in backward, as Megatron-LM does instead of keeping them
 * whole; on a GPU elements of the activation type, 2 bytes in bf16), 2 C
 * a LayerNorm's parameter gradients (summed over the group: each rank's
 * come from its positions).
 */
int gk_nn_sp_check(int tp, int seq, gk_err *err);

/* ---- pipeline parallelism (pp.c) ------------------------------------------------- */

/*
 * Stage s of pp's layers [*l0, *l1) of L: contiguous blocks, L / pp each
 * and one more on each of the first L % pp stages (the embedding is on
 * the first stage, the final LayerNorm and the head on the last). -1 with
 * the numbers in err when pp < 1 or pp > L (a stage without a layer).
 */
int gk_nn_pp_layers(int64_t L, int pp, int s, int *l0, int *l1, gk_err *err);
/*
 * The interleaved schedule's placement (Narayanan et al. 2021, section
 * 2.2.2): the L layers in pp x V chunks of L / (pp V) layers, chunk j the
 * layers [j L/(pp V), (j+1) L/(pp V)), and stage s holding the chunks s,
 * s + pp, ..., s + (V - 1) pp (its chunk c the model's c pp + s): the
 * layers [*l0, *l1) of stage s's chunk c. V <= 1 is gk_nn_pp_layers (c
 * 0). -1 with the numbers in err when L does not divide by pp x V.
 *
 * In the flat buffer a stage's chunks lie together (gk_nn_new): wte, wpe,
 * stage 0's blocks (its chunk 0's, then its chunk 1's, ...), stage 1's,
 * ..., ln_f, each block as in the Hugging Face order, so that a stage's
 * parameters are one range (gk_nn_pp_range) as under contiguous blocks.
 * The tensors' names, shapes and table order (gk_nn_tensors) are the
 * model's; only their offsets differ, and gk_nn_pp_to_hf and
 * gk_nn_pp_from_hf move a flat buffer (the optimizer's moments in a
 * checkpoint) between this order and the Hugging Face one.
 */
int gk_nn_pp_chunk_layers(int64_t L, int pp, int V, int s, int c, int *l0, int *l1,
			  gk_err *err);
/* forward and backward run chunk c of this stage's (0 .. pp_chunks - 1) */
void gk_nn_pp_use_chunk(gk_nn_model *m, int c);
/* a flat buffer of nparams floats, from this model's order to the
 * Hugging Face one (dst) and back; a copy when the orders agree */
void gk_nn_pp_to_hf(const gk_nn_model *m, const float *src, float *dst);
void gk_nn_pp_from_hf(const gk_nn_model *m, const float *src, float *dst);
/*
 * A stage's model (gk_nn_opts' pp > 1) maps the whole flat buffers on the
 * host, but forward and backward touch only its layers (with lazy_params
 * and lazy_grads only the stage's pages take memory); on a GPU its device
 * holds only its range and the shared wte (the work calls below):
 *   forward   the first stage embeds tokens; any other reads its input,
 *             gk_nn_pp_count elements, from gk_nn_pp_input (the previous
 *             stage's output, put there by the caller). The last stage
 *             runs the head and the loss (targets); the others leave their
 *             output in gk_nn_pp_output and take no targets (NULL).
 *   backward  the last stage starts from the loss; any other from d
 *             output, which the caller puts in gk_nn_pp_grad before the
 *             call. After it, a stage other than the first has d input in
 *             gk_nn_pp_grad. The wte gradient of the last stage is the
 *             head's part only, of the first the embedding's: the
 *             trainer sums them (the tied embedding's group).
 * The parameters of the stage are [*lo, *hi) of the flat buffer (the first
 * stage's range starts at wte, the last's ends at ln_f), and the last
 * stage (when not the first) shares wte: *shared gets its length, else 0.
 */
/*
 * A stage's micro-batches in flight (1F1B keeps up to pp - stage of
 * them, GPipe all): gk_nn_pp_slots gives the model n sets of activations
 * (the one it has and n - 1 more, counted in gk_nn_memory's
 * activations), gk_nn_pp_use_slot makes set i the one forward and
 * backward use, each set keeping its own forward (a backward of set i
 * differentiates set i's last forward).
 *
 * On the CUDA backend the input, output and gradient are device memory
 * in the activations' type (gk_nn_pp_dtype: bf16 or f32; f32 on the
 * CPU), which the caller moves between the stages with lib/comm's
 * device path.
 */
int gk_nn_pp_slots(gk_nn_model *m, int n, gk_err *err);
void gk_nn_pp_use_slot(gk_nn_model *m, int i);
void *gk_nn_pp_input(gk_nn_model *m);
void *gk_nn_pp_output(gk_nn_model *m);
void *gk_nn_pp_grad(gk_nn_model *m);
/*
 * The elements of each of those three: a micro-batch's activations,
 * B x T x C, and under sequence parallelism this rank's T/tp positions of
 * each sequence, B x T/tp x C (in gk_nn_sp_row's order), as Megatron-LM's
 * stages pass their shard of the sequence (the tensor shape its
 * p2p_communication sends: megatron/core/pipeline_parallel/schedules.py,
 * get_tensor_shapes, seq_length / the tensor group's size under
 * sequence_parallel).
 */
size_t gk_nn_pp_count(const gk_nn_model *m);
gk_dtype gk_nn_pp_dtype(const gk_nn_model *m);
void gk_nn_pp_range(const gk_nn_model *m, int s, size_t *lo, size_t *hi, size_t *shared);
/*
 * Stage s's segment k cut over W data-parallel ranks (ZeRO 1 to 3 over a
 * grid, pp_shard.c): segment 0 its range (without wte on the first
 * stage), segment 1 the tied wte (on the first and last stage; empty
 * elsewhere and at pp 1); rank r's piece [*a, *b). Returns the floats of
 * each piece, the last one shorter.
 */
size_t gk_nn_pp_piece(const gk_nn_model *m, int s, int r, int W, int k, size_t *a, size_t *b);
/* this stage's parameters: its range and the shared wte */
size_t gk_nn_pp_floats(const gk_nn_model *m);
/* lazy_params: the pages outside this stage's range and wte given back
 * (after a load or a checkpoint that filled them); nothing at pp 1 */
void gk_nn_pp_release(gk_nn_model *m);
/*
 * The sum of squares of the gradients in [lo, hi) of the flat buffer that
 * this rank counts towards the global norm (pieces of tensors included,
 * as a ZeRO-1 stage owns them): under tensor parallelism its split
 * tensors' slices, and the replicated tensors on tensor rank 0 only.
 */
double gk_nn_pp_sumsq(const gk_nn_model *m, size_t lo, size_t hi);

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
/*
 * Evaluation (on) or training (off, the default): whether the forwards
 * with targets that follow are followed by a backward. Results are the
 * same either way; what differs is the work: in training, the CUDA
 * backend's forward computes the loss and the logits' gradient in one
 * kernel over the logits (the gradient written over them, for the scale
 * the backward is expected to be given), and backward starts from it;
 * in evaluation, forward only reads the logits for the loss, and a
 * backward that follows all the same computes the gradient there. The
 * CPU backend does the same work either way.
 */
void gk_nn_set_eval(gk_nn_model *m, int on);
/*
 * Training: the scale the backwards that follow will be given (with k
 * micro-steps of accumulation, 1/k); until it is set, the last
 * backward's, 1 before the first. A backward given another scale is
 * right all the same, within rounding (the CUDA backend rescales the
 * head's products); with the one expected, its bits do not depend on
 * what came before (a resumed run's first step is the uninterrupted
 * run's).
 */
void gk_nn_set_grad_scale(gk_nn_model *m, float scale);
/* Logits of row b, position t after a forward: vocab_pad floats (the
 * padded ones are not meaningful; use the first vocab); under tensor
 * parallelism this rank's vocab_pad / tp, from row tp_rank * that. Valid until the
 * next backward, which turns them into their gradient in place. On a GPU,
 * only a forward without targets brings them to the host. */
const float *gk_nn_logits(const gk_nn_model *m, int b, int t);

/* Zero the gradient buffer (before the first micro-step of a step);
 * with lazy_grads, release all of it; a pipeline stage zeroes its range
 * and wte only (gk_nn_pp_range), all its backward writes (with
 * release_grads, their whole pages released and the ends zeroed). */
void gk_nn_zero_grad(gk_nn_model *m);
/*
 * lazy_grads: the whole pages of gradient elements [lo, hi) (up to the
 * buffer's end when hi is nparams or more) go back to the kernel and read
 * as zeros after (madvise MADV_DONTNEED on a private anonymous mapping);
 * a page the range shares with its neighbours stays. Nothing otherwise.
 * GK_NN_GRAD_PAGE: the floats of a page, which the caller aligns ranges to.
 */
void gk_nn_grads_release(gk_nn_model *m, size_t lo, size_t hi);
/* lazy_params: the same for the parameters' whole pages in [lo, hi) */
void gk_nn_params_release(gk_nn_model *m, size_t lo, size_t hi);
size_t gk_nn_grad_page(void);

/*
 * Called during backward when the gradients of elements [off, nparams)
 * are final: after ln_f, after each weight of a block on the CPU (after
 * each block on CUDA, where it means queued), and with off 0 at the end.
 * The trainer starts bucket allreduces there.
 */
typedef int (*gk_nn_ready_fn)(size_t off, void *ctx, gk_err *err);

/*
 * ZeRO-3 (the CPU): fn hears of each block's use of its parameters, in
 * the order forward and backward use them: GK_NN_FWD_PRE before block
 * l's forward reads them, GK_NN_FWD_POST after, GK_NN_BWD_PRE before its
 * backward (and its recomputation) reads them, GK_NN_BWD_POST after. fn
 * makes them present (gathers them) and may release them after. The
 * embeddings, the final norm and the tied head, used around the blocks,
 * are the caller's to keep present. NULL: no calls.
 */
enum { GK_NN_FWD_PRE, GK_NN_FWD_POST, GK_NN_BWD_PRE, GK_NN_BWD_POST };
typedef int (*gk_nn_param_fn)(int phase, int layer, void *ctx, gk_err *err);
void gk_nn_set_param_fn(gk_nn_model *m, gk_nn_param_fn fn, void *ctx);
/* block l's parameters: elements [*lo, *hi) of the flat buffer */
void gk_nn_block_range(const gk_nn_model *m, int l, size_t *lo, size_t *hi);

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
	uint64_t tp_buffers; /* of the workspace, a tensor group's collectives'
				buffers on CUDA (lib/mem's gk_mem_tp_buffers) */
} gk_nn_mem;

void gk_nn_memory(const gk_nn_model *m, gk_nn_mem *out);
/*
 * What a CUDA model holds in host memory (gk_nn_memory's bytes are the
 * device's): the f32 mirrors of the parameters and of the gradients in
 * the flat layout, as allocated (nflat floats rounded up to 64 bytes;
 * the parameters' under unit_params the range's, nflat / flat_multiple
 * floats so rounded; the gradients' 0 under bucket_grads, mapped and
 * never written), and
 * the pinned staging of its transfers (gk_nn_opts' staging, or
 * GK_NN_CUDA_STAGING, at most nparams floats). All 0 for a CPU model,
 * whose gk_nn_memory is host memory.
 */
typedef struct gk_nn_host_mem {
	uint64_t params, grads, pinned;
} gk_nn_host_mem;
void gk_nn_host_memory(const gk_nn_model *m, gk_nn_host_mem *out);
/*
 * What gk_nn_new(c, o) allocates in host memory, by the same sizes,
 * without allocating: on the CPU backend all of it, on CUDA the host
 * copies of the parameters and gradients (the device's bytes are lib/mem's
 * estimate). -1 with err for a shape gk_nn_new would refuse.
 */
int gk_nn_plan(const gk_nn_config *c, const gk_nn_opts *o, gk_nn_mem *out, gk_err *err);
/*
 * The device bytes by category a CUDA model of c and o will allocate
 * (lib/cuda's accounting of gk_nn_new's buffers, the moments not yet:
 * optimizer 0), in any build, without a device: the attention as
 * gk_nn_attention_fused chooses it.
 */
int gk_nn_plan_cuda(const gk_nn_config *c, const gk_nn_opts *o, gk_nn_mem *out, gk_err *err);

/* ---- generation (sample.c) ---------------------------------------------------------- */

/*
 * Generation with a key/value cache (CPU models): gk_nn_decode appends
 * token tok at the next position (0, 1, ... up to the model's positions)
 * and sets *logits to the vocab_pad logits that follow it, valid until
 * the next call. A CUDA model is refused. A model split by tensor
 * parallelism caches its heads' keys and values, and every rank of the
 * group calls each function together (its sums are the group's; *logits
 * is the whole row, gathered).
 *
 * A pipeline stage (pp > 1) caches its layers and decodes with
 * gk_nn_decode_chunk, chunk c of its layers (0 .. pp_chunks - 1; 0 alone
 * but under the interleaved schedule): the first chunk of the first
 * stage embeds tok; any other reads the C floats of
 * gk_nn_decoder_stream, the previous chunk's output (the previous
 * stage's, put there by the caller), and leaves its own there; the last
 * chunk of the last stage sets *logits (else NULL). The position moves
 * on after the stage's last chunk.
 */
typedef struct gk_nn_decoder gk_nn_decoder;
int gk_nn_decoder_new(gk_nn_decoder **out, gk_nn_model *m, gk_err *err);
int gk_nn_decode(gk_nn_decoder *d, int32_t tok, const float **logits,
		 gk_err *err);
int gk_nn_decode_chunk(gk_nn_decoder *d, int chunk, int32_t tok, const float **logits,
		       gk_err *err);
float *gk_nn_decoder_stream(gk_nn_decoder *d);
int gk_nn_decoder_len(const gk_nn_decoder *d);
void gk_nn_decoder_reset(gk_nn_decoder *d);
void gk_nn_decoder_free(gk_nn_decoder *d);
/*
 * The logits after a window of w <= seq tokens (CPU model): a forward of
 * that one sequence, not of the whole training batch. A backward then
 * needs a new gk_nn_forward first. A split model is refused (its window
 * is gk_nn_sample_grid's).
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
/*
 * The same after the np >= 1 tokens of prompt (each in the vocabulary):
 * the history starts with them, as transformers' generate() starts from
 * its input_ids, and out gets the n tokens that follow. A model split by
 * tensor or pipeline parallelism is refused (gk_nn_sample_grid).
 */
int gk_nn_sample_prompt(gk_nn_model *m, int batch, int seq, const int32_t *prompt, int np,
			int n, double temperature, int top_k, uint64_t seed, int32_t *out,
			gk_err *err);
/*
 * The same on a model split over a grid (tensor parallelism, pipeline
 * stages), in place: every rank of one pipeline calls it with the same
 * arguments, pipe the pipeline's host communicator (its ranks the stages
 * in order) and act the one of the stages' activations (NULL on the CPU:
 * pipe; on a GPU model the pipeline's on the device, its buffers device
 * memory); both ignored at pp 1. On the CPU decoded with the cache: each
 * token passes the stages' chunks as messages (the row of the residual
 * stream, C floats; past the window a forward of it, T x C); on a GPU
 * each token is a forward of the window at the model's batch, B x T x C
 * elements of gk_nn_pp_dtype a message. The tensor group gathers the
 * logits, the last stage's tensor rank 0 picks as gk_nn_sample_prompt
 * does and the token goes to every rank over the host groups: out is the
 * same on all, and the tokens are one rank's for the same logits. -1
 * with err: as gk_nn_sample_prompt, a message that failed.
 */
int gk_nn_sample_grid(gk_nn_model *m, struct gk_comm *pipe, struct gk_comm *act, int batch,
		      int seq, const int32_t *prompt, int np, int n, double temperature,
		      int top_k, uint64_t seed, int32_t *out, gk_err *err);
/*
 * The tokens of the len bytes of text, for a model of configuration c
 * and its tokenizer tok (NULL: none): the one place text becomes tokens.
 * With a tokenizer, its encoding, special tokens ("<|endoftext|>") in the
 * text recognised as transformers' tokenizer(text) does, each id within
 * the model's vocabulary. Without one only the byte vocabulary
 * (GK_NN_BYTE_VOCAB) reads text: each byte is its token. Returns the
 * count with *out malloc'ed (the caller frees), or -1 with err set:
 * another vocabulary without a tokenizer, an id the model lacks, no memory.
 */
int gk_nn_prompt_encode(const gk_nn_config *c, const gk_tok *tok, const char *text, size_t len,
			int32_t **out, gk_err *err);
/*
 * The text of n generated tokens, appended to *buf (realloc'ed; *len and
 * *cap updated, not NUL-terminated): with a tokenizer each token's bytes,
 * an id the tokenizer lacks (the model's vocabulary may be larger) as
 * U+FFFD; for the byte vocabulary each byte, its end-of-text token as a
 * newline; for another vocabulary the ids in decimal, space-separated.
 * The bytes need not be UTF-8 (a token may end inside a character):
 * print them as they are. -1 only when out of memory.
 */
int gk_nn_sample_text(const gk_nn_config *c, const gk_tok *tok, const int32_t *ids, size_t n,
		      char **buf, size_t *len, size_t *cap, gk_err *err);

/* ---- the step's other parts, wherever the model computes ----------------------------- */

/*
 * The trainer's calls after backward, the same on every backend, so that
 * it never asks where the model runs. The "working" buffers are where the
 * model computes: the host's flat buffers (gk_nn_params, gk_nn_grads) on
 * the CPU, the device's fp32 master parameters and gradients on a GPU (the
 * flat layout, nflat floats; a pipeline stage's device holds its range
 * and the tied wte only, two segments, gk_nn_pp_range; under ZeRO-3's
 * unit_params the master is this rank's pieces). Each call gives
 * where element off is, and a range from there lies in the same buffer
 * as far as the segment holding off goes (a stage's range, its wte, a
 * piece of either): never across the two. NULL on a GPU where no
 * segment holds off. On a GPU the host buffers stay as mirrors:
 * gk_nn_init and gk_nn_load write the host's parameters, gk_nn_upload
 * copies them (GK_NN_PARAMS) and/or the gradients (GK_NN_GRADS) to the
 * device, gk_nn_download back (a stage's segments), for a checkpoint or
 * a host-side allreduce. On the CPU the copies do nothing.
 */
#define GK_NN_PARAMS 1
#define GK_NN_GRADS 2
int gk_nn_upload(gk_nn_model *m, int what, gk_err *err);
int gk_nn_download(gk_nn_model *m, int what, gk_err *err);
float *gk_nn_work_params(gk_nn_model *m, size_t off);
float *gk_nn_work_grads(gk_nn_model *m, size_t off);
/*
 * A GPU model's working copy where it is not the fp32 master (bf16; *dt
 * its type), element off, as the two above: gk_nn_update rounds the
 * range it updates into it, so ZeRO-1 can gather the ranges there (half
 * the bytes of the master's gather), leaving each rank's master current
 * in its own range only. NULL on the CPU and where the working copy is
 * the master (fp32, tf32) or in ZeRO-3's units.
 */
void *gk_nn_work_copy(gk_nn_model *m, size_t off, gk_dtype *dt);
/*
 * A GPU model made with bucket_grads: where backward writes the gradients.
 * [0, head) (the embeddings, which backward writes first through the tied
 * head and last in the encoder) stays in one buffer for the whole of
 * backward; above it bucket b, [lo[b], lo[b - 1]) (lo[-1] the model's
 * nparams; b from 0, the last elements, as lib/comm's gradient buckets
 * count them, descending), is in buffer b % nslot of nslot, each of the
 * largest such bucket. A bucket above head must hold whole layers (its
 * edges among gk_nn_block_range's, the final norm's start, nparams), so
 * that every tensor backward writes lies in one buffer; the buffers start
 * zero, and whoever reduces a bucket zeroes it before its buffer's next
 * bucket is written (lib/comm's retire does). Counted as the model's
 * gradients. gk_nn_grad_at gives where element off of the flat layout
 * is written (a bucket's start for the reduction). -1 on a CPU model or
 * bad buckets.
 */
int gk_nn_grad_buckets(gk_nn_model *m, size_t head, const size_t *lo, size_t nb, size_t nslot,
		       gk_err *err);
float *gk_nn_grad_at(gk_nn_model *m, size_t off);
/*
 * The working copy of the parameters where forward and backward read
 * them: element off (of the flat layout) in gk_nn_param_dtype's type, on
 * the device for a GPU model (with unit_params in its unit's buffer, the
 * whole unit from there on), the host's parameters on the CPU.
 * gk_nn_params_own writes the working copy of [a, b), inside this rank's
 * range and one unit, from the fp32 parameters, on the model's stream
 * (nothing on the CPU). gk_nn_params_whole (on 1) makes a working copy of
 * the whole model (nflat elements from gk_nn_param_at(m, 0); a pipeline
 * stage's of its range and the shared wte, each from its start) that the
 * kernels read instead of the units, until it is called with 0
 * (evaluation, --sample under ZeRO-3), with this rank's range written
 * from its fp32 parameters on the device; the caller fills the rest,
 * gathered there over the ranks or with gk_nn_params_put, which writes
 * [off, off + n) of it from n fp32 parameters in device memory (src), on
 * the model's stream, returning with the stream idle. No host memory
 * takes part. Nothing on the CPU.
 */
void *gk_nn_param_at(gk_nn_model *m, size_t off);
gk_dtype gk_nn_param_dtype(const gk_nn_model *m);
int gk_nn_params_own(gk_nn_model *m, size_t a, size_t b, gk_err *err);
int gk_nn_params_whole(gk_nn_model *m, int on, gk_err *err);
int gk_nn_params_put(gk_nn_model *m, size_t off, const float *src, size_t n, gk_err *err);
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
/* Sum of squares of the working gradients [lo, hi), the model's or,
 * with g (device memory on a GPU), those at g[0 .. hi - lo), under tensor
 * parallelism each parameter of the group once: the replicated tensors'
 * on its rank 0 only (gk_nn_pp_sumsq's rule; no communication) */
int gk_nn_work_sumsq_once(gk_nn_model *m, const float *g, size_t lo, size_t hi, double *ss,
			  gk_err *err);
int gk_nn_grad_norm(gk_nn_model *m, double *norm, gk_err *err); /* tp: collective
								 * over the group, each
								 * parameter once */

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
/*
 * ZeRO-Offload's update of [lo, hi) on the host, mom and vel its moments
 * in host memory (hi - lo floats each): on a GPU the range's parameters
 * and the model's gradients of it come down through the pinned staging,
 * gk_nn_adamw_step runs on them, and the parameters go back up (with the
 * working copy rounded from them); only the range crosses the bus. On the
 * CPU it is gk_nn_update.
 */
int gk_nn_update_host(gk_nn_model *m, const gk_nn_adamw *c, float lr, int64_t t,
		      float grad_scale, size_t lo, size_t hi, float *mom, float *vel,
		      gk_err *err);

#endif
