/*
 * mem.h - the memory model of transformer training and inference (gk_mem_).
 *
 * A model is described by its architecture (gk_mem_model, filled from flags,
 * a Hugging Face config.json or a safetensors header); a run by gk_mem_run
 * (precision, optimizer, ZeRO stage, parallel degrees, micro-batch,
 * recomputation, offload). gk_mem_estimate turns both into the bytes each
 * GPU of the most-loaded pipeline stage holds, one gk_mem_part per term,
 * each with the formula it came from and its source. gk_mem_fit searches
 * the run settings for configurations that fit a capacity.
 *
 * Sources (cited in every part):
 *   ZeRO      Rajbhandari et al., "ZeRO: Memory Optimizations Toward
 *             Training Trillion Parameter Models", SC 2020, sec. 3.1, 5.
 *   Korthikanti  Korthikanti et al., "Reducing Activation Recomputation in
 *             Large Transformer Models", MLSys 2023 (arXiv:2205.05198),
 *             sec. 4, Table 2.
 *
 * Errors: functions returning int give 0, or -1 with a message in err.
 */
#ifndef GK_MEM_H
#define GK_MEM_H

#include <stdint.h>

#include "core/core.h"

/* ---- the model ------------------------------------------------------------- */

typedef enum gk_mem_arch {
	GK_MEM_ARCH_PARAMS, /* only a parameter count is known */
	GK_MEM_ARCH_GPT2,   /* 4h GeLU MLP, learned positions, biases, LayerNorm */
	GK_MEM_ARCH_LLAMA,  /* SwiGLU (3 matrices), RoPE, RMSNorm, no biases */
	GK_MEM_ARCH_NEOX    /* GPT-NeoX: GPT-2's blocks, RoPE, untied head */
} gk_mem_arch;

typedef struct gk_mem_model {
	gk_mem_arch arch;
	int64_t layers, hidden, heads, kv_heads, ffn, vocab;
	int64_t head_dim; /* 0: hidden / heads */
	int64_t positions; /* learned position embeddings (GPT-2) or max context */
	int tied;          /* the LM head shares the token embedding */
	int bias;          /* linear layers have biases (Llama: attention_bias) */
	/*
	 * Derived by gk_mem_model_finish (or read from a safetensors header):
	 * params = embed + layers * layer + head (+ final norm in head).
	 */
	uint64_t params, layer_params, embed_params, head_params;
	/*
	 * What tensor parallelism does not split: per layer (norms, the biases
	 * of row-parallel linears), in the embedding (learned positions) and
	 * the final norm. largest: the biggest single module (DeepSpeed's
	 * "largest layer", what ZeRO-3 gathers at once).
	 */
	uint64_t layer_repl, embed_repl, norm_params, largest;
	/* Adafactor's factored state: sum of rows+cols of matrices, n of vectors. */
	uint64_t factored;
	gk_dtype dtype; /* of a safetensors checkpoint; INVALID when unknown */
	uint64_t dtype_params[GK_DT_COUNT]; /* parameters per stored dtype */
	/* tensors of the checkpoint that are not parameters, and their elements */
	uint64_t left_out, left_out_elems;
} gk_mem_model;

const char *gk_mem_arch_name(gk_mem_arch a);
/* "gpt2", "llama", "neox"; -1 when unknown. */
int gk_mem_arch_parse(const char *s);

/*
 * Defaults of a model given by its shape rather than a config.json, the
 * values of the architecture's Hugging Face config class: GPT-2's
 * vocabulary (GPT2Config vocab_size) and context (n_positions).
 */
enum {
	GK_MEM_DEFAULT_VOCAB = 50257,
	GK_MEM_DEFAULT_POSITIONS = 1024,
	GK_MEM_DEFAULT_SEQ = 2048 /* a run's sequence when the model has none */
};

/*
 * Check the architecture fields with lib/hf's shape rules
 * (gk_hf_config_finish: positive, heads divide hidden, kv_heads divide
 * heads, sizes below sane bounds so no product overflows) and compute the
 * exact parameter counts. Defaults first: kv_heads = heads, ffn = 4*hidden
 * (GPT-2, NeoX). For GK_MEM_ARCH_PARAMS only params is used.
 */
int gk_mem_model_finish(gk_mem_model *m, gk_err *err);

/*
 * A model from its shape (command-line flags, a trainer's own settings):
 * m holds layers, hidden and heads (Llama also ffn) and whatever else the
 * caller knows; the rest takes the defaults of arch's Hugging Face config
 * class: vocab GK_MEM_DEFAULT_VOCAB; GPT-2's learned positions seq when
 * seq > 0, else GK_MEM_DEFAULT_POSITIONS; biases except Llama's; the head
 * tied for GPT-2 and not otherwise, unless tied is 0 or 1 (-1: the
 * default). Then gk_mem_model_finish. Errors name the missing field.
 */
int gk_mem_model_from_shape(gk_mem_model *m, gk_mem_arch arch, int tied,
			    int64_t seq, gk_err *err);

/*
 * Read a Hugging Face config.json (model_type gpt2, llama, mistral,
 * gpt_neox; gpu-train writes GPT-2's) with lib/hf's gk_hf_config_parse,
 * whose rules and messages these are: missing required keys and keys the
 * reader does not know are errors, so a config whose meaning we would
 * guess is refused; allow_unknown lists the unknown keys in *unknown
 * (owned by the caller, may be NULL) instead. Then gk_mem_model_finish.
 */
int gk_mem_model_from_config(gk_mem_model *m, const char *path,
			     int allow_unknown, gk_strlist *unknown,
			     gk_err *err);
int gk_mem_model_from_config_buf(gk_mem_model *m, const char *buf, size_t len,
				 const char *name, int allow_unknown,
				 gk_strlist *unknown, gk_err *err);

/*
 * Parameter count and dtypes from a checkpoint's safetensors headers: path
 * is anything gk_ckpt_open takes (a .safetensors file, an index, a Hugging
 * Face directory, a training step directory or its root; rank-shard row
 * slices count as their whole tensor, identical copies once). Sets arch to
 * GK_MEM_ARCH_PARAMS, params, dtype_params, dtype (the most common one),
 * factored; layer_params is the largest "*.layers.N." / "*.h.N." block.
 * Tensors that are not parameters are left out and counted in left_out
 * and left_out_elems: buffers (gk_ckpt_is_buffer: causal masks, rotary
 * frequencies) and integer or bool tensors (masks, position ids).
 */
int gk_mem_model_from_safetensors(gk_mem_model *m, const char *path,
				  gk_err *err);

/*
 * Combine a model with the checkpoint at path (read as above): a model with
 * an architecture must have the checkpoint's exact parameter count (else
 * an error naming both); a bare parameter count, or an empty model (arch
 * GK_MEM_ARCH_PARAMS, params 0), is replaced by the checkpoint's. Either
 * way m takes the checkpoint's dtypes and left_out counts. A model with only a parameter count
 * and a checkpoint both giving it is the caller's error to refuse.
 */
int gk_mem_model_add_checkpoint(gk_mem_model *m, const char *path,
				gk_err *err);

/*
 * A count of things as people write it: "124439808", "124M", "7B",
 * "1.5T", "350K" (powers of 1000: K, M, B or G, T). Rounded to a whole
 * number; 0 and values above 1e15 are errors naming what.
 */
int gk_mem_parse_count(const char *s, uint64_t *out, const char *what,
		       gk_err *err);

/* ---- the run ---------------------------------------------------------------- */

typedef enum gk_mem_opt {
	GK_MEM_OPT_ADAMW,
	GK_MEM_OPT_SGD, /* with momentum */
	GK_MEM_OPT_ADAFACTOR,
	GK_MEM_OPT_ADAM8BIT
} gk_mem_opt;

typedef enum gk_mem_recompute {
	GK_MEM_RC_NONE,
	GK_MEM_RC_SELECTIVE, /* Korthikanti: the attention core (s^2 tensors) */
	GK_MEM_RC_FULL,      /* only each layer's input is kept ("layer") */
	GK_MEM_RC_GELU       /* the MLP activation's output is recomputed
				from its input in the backward pass (llm.c's
				recompute=1); the fit search leaves it out */
} gk_mem_recompute;

enum {
	GK_MEM_OFFLOAD_NONE,
	GK_MEM_OFFLOAD_OPTIMIZER, /* optimizer states, master weights, f32 grads */
	GK_MEM_OFFLOAD_ALL        /* and, with ZeRO-3, the parameters */
};

/* The pipeline's schedules (Narayanan et al. 2021, sec. 2.2), as gpu-train
 * runs them: the activations a stage s of S keeps for M micro-batches are
 * min(M, S - s) micro-batches' under 1F1B, M under GPipe and, under the
 * interleaved schedule of V chunks, min(M V, w + 1) chunks' with the
 * warm-up w = 2 (S - 1 - s) + (V - 1) N (M V when M = S), N the schedule's
 * group (gk_mem_pp_group) */
enum { GK_MEM_PP_1F1B, GK_MEM_PP_GPIPE, GK_MEM_PP_INTERLEAVED };
const char *gk_mem_pp_sched_name(int s);
int gk_mem_pp_sched_parse(const char *s);

/*
 * The interleaved schedule's group for M micro-batches over S stages:
 * a chunk takes its micro-batches N at a time, the last group the M mod
 * N left when there are some (Megatron-LM's
 * microbatch_group_size_per_vp_stage and get_schedule_table). Megatron-LM
 * takes N from the user (S by default) and refuses one outside S .. M or
 * leaving a last group of fewer than S, which would stall the pipeline;
 * this is the smallest N it accepts: S when S divides M, and for every
 * M >= S one exists (M itself). The warm-up, and so a stage's memory,
 * grows with N; the bubble is (S - 1)/(V M) for any N accepted
 * (tools/bench/pp_sim.py). Returns 0 when M < S (no such N).
 */
int64_t gk_mem_pp_group(int64_t M, int64_t S);

typedef struct gk_mem_run {
	int infer;           /* inference: weights + KV cache, no training state */
	gk_dtype precision;  /* F32, BF16 or F16 (16-bit: mixed, f32 master) */
	gk_dtype kv_dtype;   /* inference KV cache; INVALID: the precision */
	gk_mem_opt opt;
	int zero;            /* 0..3; FSDP full sharding is 3 */
	int64_t dp, tp, pp;  /* degrees; world = dp*tp*pp */
	int pp_sched;        /* GK_MEM_PP_*: the schedule's micro-batches in
				flight on a stage (gpu-train --pp-schedule) */
	int64_t pp_chunks;   /* GK_MEM_PP_INTERLEAVED: V chunks of
				layers/(pp V) layers a stage (--pp-chunks) */
	int sp;              /* Megatron sequence parallelism (needs tp > 1) */
	int64_t micro_batch, grad_accum; /* grad_accum: micro-batches/step */
	int64_t seq;         /* 0: the model's positions, else GK_MEM_DEFAULT_SEQ */
	gk_mem_recompute recompute;
	int offload;         /* GK_MEM_OFFLOAD_*: what lives in host RAM */
	int grad_f32;        /* mixed precision: an f32 gradient buffer */
	int flash;           /* fused attention: no s^2 tensors kept; -1:
				fused for inference (as serving engines run),
				eager for training (as Korthikanti counts) */
	int dropout;         /* dropout masks kept (1 byte per element) */
	int logits_f32;      /* 16-bit runs: an f32 copy of the logits for
				the loss (torch's cross entropy); 0: the loss
				read from the 16-bit logits in place, as
				gpu-train's classifier does */
	int64_t gpus_per_node; /* host RAM is per node */
	uint64_t bucket;     /* gradient bucket bytes (each of 2 in flight;
				gpu-train's ZeRO-2 on a GPU: gk_mem_zero2_device) */
	int overlap;         /* gradient buckets reduced while backward runs
				(1, the default); 0: gpu-train --no-overlap */
	int keep_gathered;   /* ZeRO-3: a layer's parameters stay gathered
				from its forward to its backward (FSDP's
				reshard_after_forward=False, gpu-train
				--reshard-after-forward no) */
	int host_backend;    /* gpu-train's CPU backend (gk_mem_train without
				cuda): ZeRO-2's buckets are not its GPU ring */
	uint64_t reserve;    /* CUDA context, cuBLAS/NCCL workspaces */
	int ckpt_copy;       /* checkpoints written while training goes on:
				a host copy of the f32 parameters and this
				rank's optimizer states ("checkpoint_copy") */
	int compress;        /* gpu-train --compress (lib/comm's
				gk_comm_compress; 0: none): its error feedback
				("compress_feedback"), the compressed
				reduce-scatter's wire buffers ("compress_wire",
				ZeRO 1 and 2), with ckpt_copy the feedback's
				copy ("checkpoint_feedback") and, int8 over tp
				on the host backend, the replicated tensors'
				buffer ("compress_replicas",
				gk_mem_tp_replicas) */
} gk_mem_run;

/*
 * The defaults: bf16 AdamW, ZeRO 0, all degrees 1, micro-batch 1, seq 0
 * and flash -1 (resolved against the model, below), dropout, 2 x 25 MiB
 * buckets, 1 GiB reserve, 8 GPUs per node.
 */
void gk_mem_run_default(gk_mem_run *r);

/*
 * Replace the settings that depend on the model by their values: seq 0
 * becomes the model's positions (n_positions, max_position_embeddings), or
 * GK_MEM_DEFAULT_SEQ when it has none; flash -1 becomes r->infer.
 * gk_mem_estimate and gk_mem_fit do this on their own copy; call it to
 * report the run as estimated.
 */
void gk_mem_run_resolve(gk_mem_run *r, const gk_mem_model *m);

const char *gk_mem_opt_name(gk_mem_opt o);
int gk_mem_opt_parse(const char *s);
const char *gk_mem_recompute_name(gk_mem_recompute rc);
int gk_mem_recompute_parse(const char *s);

/*
 * gpu-train's ZeRO-2 gradient buffers on a GPU (lib/nn/dp.c), for a GPT-2
 * of layers blocks of width hidden, vocab tokens (its wte padded to a
 * multiple of GK_HF_VOCAB_TILE rows, as gpu-train holds it) and
 * positions learned positions, on a rank of a tensor group of tp (0: 1;
 * its slices, gk_mem_flat_layout's table): f32, backward writes the embeddings' into
 * one buffer of their own (*head bytes: the tied head writes them first
 * and the encoder last), and the rest into a ring of buffers each of the
 * largest bucket (*ring bytes: 3, two in flight and one filling; 1
 * without overlap; never more than there are buckets), the buckets cut
 * at layer edges by lib/comm's rule (gk_comm_grads_plan: as many whole
 * blocks as fit in bucket bytes, 0 for 25 MiB, or one block when it alone
 * is larger). *nbuckets (may be NULL): the buckets above the embeddings.
 * -1 (err) for a shape out of bounds.
 */
int gk_mem_zero2_device(int64_t layers, int64_t hidden, int64_t vocab, int64_t positions,
			int64_t tp, uint64_t bucket, int overlap, uint64_t *head, uint64_t *ring,
			size_t *nbuckets, gk_err *err);

/*
 * gpu-train's flat buffer of a GPT-2 (lib/nn's parameter table, dp.c's
 * ranges and pp_shard.c's segments) on one rank of its grid: layers
 * blocks of width hidden, vocab tokens (wte padded to a multiple of
 * GK_HF_VOCAB_TILE rows and split by rows over the tensor group) and
 * positions learned positions; dp x pp x tp ranks (0: 1), the rank at
 * pipeline stage stage, under ZeRO zero (which shards nothing over one
 * data-parallel rank).
 */
typedef struct gk_mem_shape {
	int64_t layers, hidden, vocab, positions;
	int64_t dp, tp, pp;
	int stage, zero;
} gk_mem_shape;

/*
 * The layout of a shape. n: the floats of a tensor rank's table (every
 * stage's layers: a stage's model holds the whole table), the padded
 * rows' share (vocab padded - vocab) * hidden / tp among them; nflat: n
 * rounded up to a multiple of dp under ZeRO (the flat buffer). Over a
 * grid (tp or pp above 1) the stage's segments: seg[0] its range (on the
 * first stage of a sharded pipeline, less wte) and seg[1] the wte it
 * holds apart (the last stage's copy of the tied embedding, and the
 * first stage's own when sharded); without one seg[0] is the flat buffer,
 * nflat. piece[k]: what a rank updates of seg[k], ceil(seg/dp) when ZeRO
 * shards (shard: ZeRO and dp above 1), else seg. A stage's layers are
 * lib/nn's: layers / pp, one more on each of the first layers mod pp
 * stages. -1 (err) for a shape out of bounds, tp not dividing hidden and
 * the padded vocabulary, or more stages than layers.
 */
typedef struct gk_mem_flat {
	uint64_t n, nflat, seg[2], piece[2];
	int grid, shard;
} gk_mem_flat;
int gk_mem_flat_layout(const gk_mem_shape *s, gk_mem_flat *out, gk_err *err);

/*
 * gpu-train's ZeRO-2 and 3 over a pipeline (or, on the CPU, a tensor
 * group): a stage accumulates its gradients over its whole schedule and
 * reduces them after it, so the bytes beyond the rank's pieces live from
 * its first backward to that reduction: the stage's segments less its
 * pieces, each rounded up to 64 bytes as lib/nn maps them. f's layout.
 */
uint64_t gk_mem_pp_zero2_live(const gk_mem_flat *f);

/*
 * gpu-train's ZeRO-3 parameter units on a GPU (lib/nn/zero3.c), for a rank
 * of s's layout (gk_mem_flat_layout: a tensor rank's slices, a pipeline
 * stage's units), es bytes an element of the working copy (4 fp32/tf32,
 * 2 bf16): *edge the embeddings' unit (wte's padded rows and wpe; a
 * pipeline's first stage) with the final norm's and the flat buffer's
 * padding to the data-parallel group (its last stage, which also holds
 * the tied wte's unit), held for a step; *ring nslot buffers of one
 * block. gpu-train allocates these (gk_nn_opts' unit_params) and counts
 * them as comm. -1 (err) for a shape out of bounds.
 */
int gk_mem_zero3_device(const gk_mem_shape *s, int es, int nslot, uint64_t *edge,
			uint64_t *ring, gk_err *err);


/*
 * What a rank of gpu-train on GPUs holds in host memory for the model
 * (lib/nn's CUDA backend and lib/nn/dp.c), one term each, 0 where the run
 * has none, on s's layout (gk_mem_flat_layout): the f32 mirror of the
 * parameters, the flat buffer of nflat floats rounded up to 64 bytes
 * ("host_params"; under ZeRO-3 the rank's range R of it; a pipeline
 * stage's the pages of its segments, seg[0] + seg[1], so rounded), the
 * same of the gradients ("host_grads"; under ZeRO-2 and 3 where the
 * device keeps its gradients in buckets, without a pipeline, mapped and
 * never written, 0), the pinned staging of transfers ("host_staging",
 * GK_MEM_GPU_STAGING bytes, or 4 n if fewer), the AdamW moments' host
 * copies, which a checkpoint reads and --offload optimizer updates
 * ("host_moments", 2 * 4 * (R + 1), R the rank's pieces, piece[0] +
 * piece[1]), and --offload optimizer's copy of the gradient shard under
 * ZeRO-2 and 3 without a pipeline ("host_grad_shard", 4 R). ZeRO-3's
 * mirror is its range because the whole model never passes through a
 * rank's host (evaluation and --sample gather it device to device). The
 * keys name the estimate's parts too. -1 (err) as gk_mem_flat_layout.
 */
#define GK_MEM_GPU_STAGING ((uint64_t)64 << 20) /* lib/nn's GK_NN_CUDA_STAGING */
typedef enum gk_mem_host_term {
	GK_MEM_HOST_PARAMS, GK_MEM_HOST_GRADS, GK_MEM_HOST_STAGING, GK_MEM_HOST_MOMENTS,
	GK_MEM_HOST_GRAD_SHARD, GK_MEM_NHOST
} gk_mem_host_term;
const char *gk_mem_host_name(gk_mem_host_term t);
int gk_mem_gpu_host(const gk_mem_shape *s, int offload, uint64_t out[GK_MEM_NHOST],
		    gk_err *err);

/*
 * gpu-train --compress (lib/comm's gk_comm_compress kind compress, not
 * none) on s's layout over dp ranks (2 or more): *feedback the bytes of
 * a rank's error feedback, f32, one float an element it packs: without a
 * grid the flat buffer (n floats, nflat under ZeRO 1 to 3), over one the
 * stage's segments (seg[0] + seg[1]); *wire the compressed ring's two
 * wire buffers (gk_comm_compress_scratch) of its largest piece when ZeRO
 * shards (a block of the flat buffer, or of a segment), else 0. -1 (err)
 * as gk_mem_flat_layout.
 */
/*
 * gpu-train --compress int8 on the CPU over a tensor group (tp above 1)
 * and dp ranks (2 or more): the floats of the buffer through which the
 * group's rank 0 broadcasts the replicated tensors' reduced gradients
 * (wpe, the LayerNorms, the row-parallel biases; lib/nn/dp.c): those in
 * what a rank reduces (its pieces of the stage's segments under ZeRO,
 * the segments without), the largest rank's, which every rank
 * allocates. -1 (err) as gk_mem_flat_layout.
 */
int gk_mem_tp_replicas(const gk_mem_shape *s, uint64_t *floats, gk_err *err);
int gk_mem_compress_bytes(const gk_mem_shape *s, int compress, uint64_t *feedback,
			  uint64_t *wire, gk_err *err);

/*
 * gpu-train's buffers for a tensor group's collectives, bytes a rank,
 * over tokens rows of width hidden: on GPUs (cuda) the fp32 sums of a
 * row-parallel output or of a column-parallel input's gradient (tokens x
 * hidden floats) and the vocabulary-parallel cross-entropy's 4 floats a
 * row, each rounded up to 256 bytes (lib/nn's carve); on the CPU the
 * cross-entropy's 3 floats a row (its sums are made in place), rounded
 * up to 16 floats.
 */
uint64_t gk_mem_tp_buffers(uint64_t tokens, int64_t hidden, int cuda);

/*
 * gpu-train's send buffers on pipeline stage stage of pp, bytes a rank: a
 * buffer of its own for each of the micro micro-batches' chunks (chunks
 * a stage, 1 but under the interleaved schedule), so that no send waits
 * for an earlier one to complete before it is posted, of count
 * elements of es bytes each (a micro-batch's activations: tokens x
 * hidden, a tensor rank's tokens / tp under sequence parallelism), for
 * its activations to the next stage (all but the last) and their
 * gradients to the one before (all but the first; interleaved, every
 * stage both, the last and first exchanging chunks). What a stage
 * receives goes straight into the model's buffers.
 */
uint64_t gk_mem_pp_buffers(int64_t pp, int64_t stage, int64_t chunks, int64_t micro,
			   uint64_t count, int es);

/*
 * The logits of a tensor rank, tokens rows of es-byte elements: *alloc
 * its columns as gpu-train allocates them, the padded vocabulary's share
 * (vocab padded / tp), and *model the model's vocabulary's share
 * (vocab / tp, rounded to the byte; the estimate's "logits"): the
 * difference is the padding's share of the rank.
 */
void gk_mem_logits(int64_t vocab, int64_t tp, uint64_t tokens, int es, uint64_t *alloc,
		   uint64_t *model);

/* ---- the estimate ------------------------------------------------------------ */

/* more than lib/mem/estimate.c's add()s run (each once; gpu_host's, GK_MEM_NHOST) */
enum { GK_MEM_MAX_PARTS = 40 };

/*
 * The keys of the parts are an interface: mem-estimate --json prints them
 * and trainers compare their own accounting against them by name, so a key
 * never changes its meaning or its name. Training: "parameters",
 * "gradients", "optimizer", "grad_f32", "host_ram", "activations",
 * "recompute_working_set", "embedding_dropout", "logits", "final_norm",
 * "dp_buckets", "zero2_embedding_grads" (gpu-train --zero 2 on GPUs),
 * "zero3_gather", "tp_buffers", "pp_buffers",
 * "cuda_reserve", "checkpoint_copy" (host RAM, of the rank that writes
 * the model), and gpu-train's host terms on GPUs, host RAM of each rank
 * (gk_mem_gpu_host's: "host_params", "host_grads", "host_staging",
 * "host_moments", "host_grad_shard"); inference: "parameters",
 * "kv_cache", "activations", "logits", "tp_buffers", "cuda_reserve". A
 * part that does not apply to a run is absent rather than 0.
 */
typedef struct gk_mem_part {
	const char *key;    /* JSON name: "parameters", "gradients" ... */
	uint64_t bytes;     /* per GPU (host RAM parts: per node, or per rank) */
	int host;           /* 1: host RAM per node (or of the rank that writes
			       a checkpoint), 2: host RAM of each rank; not
			       counted in the GPU total */
	char formula[160];  /* symbolic, e.g. "2*Psi/(tp*pp)" */
	char values[200];   /* the same with numbers substituted */
	const char *source; /* paper and equation, or "assumption: ..." */
} gk_mem_part;

typedef struct gk_mem_est {
	gk_mem_part part[GK_MEM_MAX_PARTS];
	int nparts;
	uint64_t total;      /* GPU bytes of the most-loaded rank */
	uint64_t host;       /* host bytes per node (the parts of host 1) */
	uint64_t host_rank;  /* host bytes of each rank (the parts of host 2) */
	uint64_t model_states; /* parameters + gradients + optimizer states */
	uint64_t stage_params; /* parameters held by that rank's stage and TP slice */
	int stage;           /* the most-loaded pipeline stage (0 or pp-1) */
	int64_t inflight;    /* micro-batches (chunks of them under the
				interleaved schedule) whose activations the
				stage keeps */
} gk_mem_est;

/*
 * Estimate per-GPU memory. Validates the run against the model (degrees
 * dividing heads, kv_heads and layers; ZeRO with dp; sizes) and fails with
 * a message naming the option. explain: fill formula/values (skip for
 * speed in searches).
 */
int gk_mem_estimate(const gk_mem_model *m, const gk_mem_run *r, int explain,
		    gk_mem_est *e, gk_err *err);

/* The same for one pipeline stage (0 .. pp - 1), whichever is the most
 * loaded: what a rank of that stage holds. */
int gk_mem_estimate_stage(const gk_mem_model *m, const gk_mem_run *r, int stage,
			  int explain, gk_mem_est *e, gk_err *err);

/* The part named key, or NULL when the estimate has none. */
const gk_mem_part *gk_mem_part_get(const gk_mem_est *e, const char *key);

/* ---- a trainer's own accounting ------------------------------------------------ */

/*
 * The categories a trainer reports the memory it allocated in (gpu-train's
 * start line and --metrics, lib/cuda's device accounting): the first three
 * are the estimate's parts of the same names, computed by
 * gk_mem_train_estimate for the trainer's layout; activations and
 * workspace are what the trainer allocated for them; padding what its
 * layout adds beyond the model (a vocabulary padded to whole tiles, ZeRO's
 * rounding); comm its communication buffers.
 */
typedef enum gk_mem_cat {
	GK_MEM_PARAMETERS, GK_MEM_GRADIENTS, GK_MEM_OPTIMIZER, GK_MEM_ACTIVATIONS,
	GK_MEM_WORKSPACE, GK_MEM_PADDING, GK_MEM_COMM, GK_MEM_CHECKPOINT, GK_MEM_NCAT
} gk_mem_cat;
/* "parameters", "gradients", "optimizer", "activations", "workspace",
 * "padding", "comm", "checkpoint" (the state's copy a checkpoint is
 * written from): the JSON keys and the Prometheus label values */
const char *gk_mem_cat_name(gk_mem_cat c);

/*
 * A GPT-2 training run as a trainer states it (gpu-train's settings), for
 * checking its own memory accounting against the model by category. Zero
 * fields take the defaults: seq = positions, batch 1, precision bf16
 * (mixed, f32 master weights), dp 1. The optimizer is AdamW; ZeRO 0, 1 or 2.
 * The default layout is gpu-train's: fused attention (eager = 1 keeps the
 * s^2 scores) and no dropout masks (dropout = 1 keeps them).
 */
typedef struct gk_mem_train {
	int64_t layers, hidden, heads;
	int64_t vocab;      /* rows of the token embedding as allocated,
			       padding included (gk_nn_config.vocab_pad);
			       config.json's vocab_size counts without it */
	int64_t positions;  /* learned position embeddings */
	int64_t seq;        /* tokens per sequence; at most positions */
	int64_t batch;      /* sequences per micro-batch on each rank */
	int64_t grad_accum; /* micro-batches a step (0: 1): a pipeline's */
	gk_dtype precision; /* GK_DT_F32 or GK_DT_BF16 */
	int zero;           /* 0 to 3 */
	int64_t dp;         /* data-parallel ranks */
	int64_t tp;         /* tensor-parallel ranks (0: 1) */
	int sp;             /* sequence parallelism over them (gk_mem_run's) */
	int64_t pp;         /* pipeline stages (0: 1); with more than one,
			       the estimate is of stage's ranks
			       (gk_mem_estimate_stage), and the layers must
			       divide by pp */
	int stage;
	int pp_sched;       /* GK_MEM_PP_* (lib/nn's GK_NN_PP_* in order) */
	int64_t pp_chunks;  /* GK_MEM_PP_INTERLEAVED's chunks a stage */
	gk_mem_recompute recompute; /* NONE, GELU or FULL: lib/nn's
				       none, gelu and layer */
	int eager, dropout;
	int logits_f32;     /* an f32 copy of the logits (gpu-train keeps none) */
	int grad_f32;       /* bf16 with an f32 gradient buffer */
	int ckpt_copy;      /* checkpoints from a copy (gk_mem_run's) */
	int offload;        /* the optimizer state off the device (gk_mem_run's
			       GK_MEM_OFFLOAD_OPTIMIZER) */
	uint64_t bucket;    /* gradient bucket bytes (0: gk_mem_run's default) */
	int no_overlap;     /* gk_mem_run's overlap 0 */
	int keep_gathered;  /* gk_mem_run's */
	int cuda;           /* the CUDA backend (else the CPU's: gk_mem_run's
			       host_backend) */
} gk_mem_train;

/*
 * Estimate a gk_mem_train run: builds the tied GPT-2 model and the run with
 * the library's defaults (so mem-estimate --config on the trainer's
 * config.json with the same settings gives the same bytes), then
 * gk_mem_estimate. m and r (each may be NULL) receive what was estimated.
 * Settings outside the list above are errors naming them.
 */
int gk_mem_train_estimate(const gk_mem_train *t, gk_mem_est *e,
			  gk_mem_model *m, gk_mem_run *r, gk_err *err);

/* ---- fitting ------------------------------------------------------------------- */

typedef struct gk_mem_gpu {
	const char *name;   /* "A100-80" */
	uint64_t bytes;     /* memory.total as nvidia-smi reports it */
	double tflops;      /* dense bf16 tensor TFLOP/s (for the cost model) */
	double nvlink_gbs;  /* intra-node bus bandwidth per GPU, GB/s */
} gk_mem_gpu;

/* The table; NULL-name terminated. */
extern const gk_mem_gpu gk_mem_gpus[];
const gk_mem_gpu *gk_mem_gpu_find(const char *name);

typedef struct gk_mem_cand {
	gk_mem_run run;
	uint64_t total;
	double step_s;          /* cost model: estimated seconds per step */
	double compute_s, bubble_s, recompute_s, comm_s;
	double comm_bytes;      /* per GPU per step */
} gk_mem_cand;

/*
 * What a search is asked. Zero fields take the defaults, and gk_mem_fit
 * writes back the values it used: world = dp*tp*pp of the base run,
 * global_batch = dp*micro_batch*grad_accum of the base run, gpu = the
 * GK_MEM_FIT_GPU row, capacity = gpu->bytes, inter_gbs = GK_MEM_FIT_INTER_GBS.
 */
typedef struct gk_mem_fit_req {
	int64_t world;          /* GPUs in the job */
	int64_t global_batch;   /* sequences per optimizer step */
	uint64_t capacity;      /* bytes a GPU offers */
	const gk_mem_gpu *gpu;  /* the cost model's GPU */
	double inter_gbs;       /* per-GPU network bandwidth between nodes, GB/s */
	/*
	 * What the trainer can run (0: no bound): the largest TP and PP
	 * degrees and ZeRO stage, and the recomputations, a mask of
	 * 1 << gk_mem_recompute (0: none, selective and full).
	 */
	int64_t tp_max, pp_max;
	int zero_max;
	unsigned recompute;
} gk_mem_fit_req;

#define GK_MEM_FIT_GPU "H100-80"
#define GK_MEM_FIT_INTER_GBS 25.0 /* 200 Gb/s InfiniBand HDR per GPU */

/*
 * Search ZeRO stage, TP (powers of two dividing heads and kv_heads, at most
 * gpus_per_node), PP (dividing layers), SP, recomputation (none, selective,
 * full) and micro-batch over req->world GPUs and req->global_batch
 * sequences per step (the rest of the run, such as precision, optimizer
 * and offload, comes from base) for configurations whose total fits
 * req->capacity. Ranks them by the cost model (see gk_mem_cost) and keeps
 * the best max_out in out (sorted, cheapest first). *nout: how many were
 * kept, *tried / *fits: the size of the search.
 */
int gk_mem_fit(const gk_mem_model *m, const gk_mem_run *base,
	       gk_mem_fit_req *req, gk_mem_cand *out, int max_out, int *nout,
	       int *tried, int *fits, gk_err *err);

/*
 * The cost model, for one candidate: compute = 6*Psi*tokens (8*Psi with
 * full recomputation, plus the attention score flops for selective) at
 * gpu->tflops * 0.5 utilisation per GPU; pipeline bubble (pp-1)/m of it;
 * communication volume per GPU (DP all-reduce 2Psi, reduce-scatter +
 * all-gather, ZeRO-3 3Psi, at the working copy's width e; with grad_f32
 * the gradients' Psi at 4 bytes, the gathers' at e; TP 4 all-reduces of b*s*h per layer and
 * micro-batch; PP sends) over NVLink inside a node, inter_gbs across.
 */
void gk_mem_cost(const gk_mem_model *m, const gk_mem_run *r,
		 const gk_mem_gpu *gpu, double inter_gbs, gk_mem_cand *c);

/* ---- will it fit here ------------------------------------------------------------ */

/*
 * What limits a run on one machine, tightest first when several do. The
 * host's limits are shared by the ranks that run there: the cgroup's by
 * the ranks in it, MemAvailable by the ranks of the kernel, a device's
 * free memory by the ranks on it; RLIMIT_AS is each process's own, and
 * so is a limit the caller sets (gpu-train --mem-limit), which bounds the
 * rank's accounting alone, with no margin: the figure mem-estimate's
 * model gives, as a device's capacity bounds it.
 */
typedef enum gk_mem_limit {
	GK_MEM_LIMIT_NONE, GK_MEM_LIMIT_AS, GK_MEM_LIMIT_CGROUP, GK_MEM_LIMIT_AVAILABLE,
	GK_MEM_LIMIT_DEVICE, GK_MEM_LIMIT_RANK
} gk_mem_limit;
/* "RLIMIT_AS (ulimit -v)", "the cgroup's memory limit", "MemAvailable",
 * "the device's free memory", "--mem-limit" */
const char *gk_mem_limit_name(gk_mem_limit l);

typedef struct gk_mem_room_req {
	uint64_t host_need;   /* host bytes one rank allocates (its accounting) */
	uint64_t dev_need;    /* device bytes one rank allocates; 0: none */
	gk_host_mem host;     /* gk_host_mem_read's figures on this rank */
	int host_ranks;       /* ranks on this kernel, this one included */
	int cgroup_ranks;     /* ... and in its memory cgroup */
	uint64_t dev_free;    /* the device's free bytes */
	int dev_ranks;        /* ranks on the device */
	int threads;          /* threads a rank computes with */
	uint64_t rank_limit;  /* bytes the rank's accounting may reach (the
			       * device's on a GPU, else the host's); 0: none */
} gk_mem_room_req;

typedef struct gk_mem_room {
	gk_mem_limit limit;   /* the tightest limit the run exceeds; NONE: it fits */
	uint64_t need;        /* what the ranks under it need, margins included */
	uint64_t avail;       /* what it leaves them */
	int ranks;            /* how many ranks share it */
} gk_mem_room;

/*
 * The margins over a rank's own accounting, bytes a process holds that
 * no trainer counts. RSS: the libraries, the communication library's
 * shared-memory segments and buffers, OpenBLAS's per-thread pack buffers
 * touched (GK_MEM_RSS_MARGIN). Address space, which RLIMIT_AS bounds, is
 * larger than the RSS: every thread maps a stack (8 MiB, RLIMIT_STACK's
 * usual default) and, once it calls malloc, a 64 MiB glibc arena
 * (HEAP_MAX_SIZE, reserved whole), and OpenBLAS maps a buffer per thread
 * (64 MiB here); so the margin over the address space already mapped
 * when the check runs, gk_mem_as_margin(threads), is 136 MiB a compute
 * thread and 72 MiB for each of two service threads (data prefetch,
 * checkpoint writer). Measured on gpu-train (2 layers x 64, seq 1024,
 * the smallest `ulimit -v` that runs 2 steps): 137 MiB over the mapped
 * space and the accounting with 1 thread, 269 MiB with 2; the margin
 * says 280 and 416 MiB.
 */
#define GK_MEM_RSS_MARGIN (128ULL << 20)
uint64_t gk_mem_as_margin(int threads);

/*
 * Whether one rank's host_need and dev_need fit under every limit of
 * req, with the margins above: 1 when they do (out->limit NONE), 0 with
 * the tightest limit exceeded in *out (the largest need over what is
 * available).
 */
int gk_mem_room_check(const gk_mem_room_req *req, gk_mem_room *out);

#endif
