/*
 * train_internal.h - what the trainer's files share and nothing outside
 * lib/nn reads: the trainer's state and each room's entry points.
 *
 *   trainer.c   set-up (gk_nn_trainer_new), the model's shape and device,
 *               accessors, free
 *   train_mem.c memory accounting, and the check before the model that a
 *               rank's memory fits the machine (with its advice)
 *   agree.c     what the ranks agree on: small collectives, agreed
 *               failures, the options, work rank 0 does alone
 *   place.c     where the ranks run (CPU sets, hosts, --threads' default)
 *   grid.c      the process grid: world = dp x pp x tp, its groups'
 *               communicators (tensor parallelism itself is the model's:
 *               tp.c; a pipeline stage's layers too: pp.c)
 *   pp_sched.c  the pipeline's schedule, its embedding group, norm and
 *               the stages' state put together for checkpoints
 *   dp.c        the gradient path: data parallel, ZeRO-0, 1, 2 and 3 (the
 *               object the loop calls after backward; other ways of
 *               splitting the work are its siblings)
 *   zero3.c     ZeRO-3's parameter units, gathered and released
 *   pp_shard.c  a pipeline stage's segments, reduced and gathered
 *   resume.c    the checkpoint directory's claim, --init-from, resume
 *   checkpoint.c  checkpoints written by a thread and committed
 *   train_tok.c the run's tokenizer: found, checked, carried in checkpoints;
 *               --sample's text (gk_nn_trainer_sample)
 *   train.c     the loop and evaluation
 *   train_metrics.c  the Prometheus samples of a step and of checkpoints
 *   straggler.c the step's parts exchanged every few steps, stragglers named
 *   train_progress.c the progress line of a run on a terminal
 *   report.c    what gpu-train says at a run's start and end (the model,
 *               the memory per rank, the summary), as text or --json
 */
#ifndef GK_NN_TRAIN_INTERNAL_H
#define GK_NN_TRAIN_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "nn/train.h"
#include "tok/tok.h"

typedef struct gk_nn_dp gk_nn_dp;
typedef struct ckpt_job ckpt_job;
typedef struct gk_nn_straggler gk_nn_straggler;
typedef struct gk_nn_pp gk_nn_pp;
#define GK_NN_HOST_MAX 64 /* a host name kept for reports, its '\0' included */

struct gk_nn_trainer {
	gk_nn_train_opts o;
	gk_nn_config cfg;
	gk_comm *comm;        /* the world's, over host memory */
	int rank, world;
	gk_nn_grid grid;      /* world = dp x tp (grid.c): its groups' communicators */
	int lock;             /* rank 0: the flock on --ckpt-dir, or -1 */
	int agreed;           /* every rank failed together: the exit status */
	int reporter;         /* ... and this rank says why (0 unless chosen) */
	gk_nn_model *m;
	gk_nn_dp *dp;         /* gradients, their reduction, the optimizer state */
	gk_nn_data *data;
	int32_t *in, *tg;
	size_t N;             /* parameters (gk_nn_nparams) */
	int64_t step;         /* completed steps */
	uint64_t tokens;
	int64_t skipped;
	int skip_run;         /* steps skipped in a row (non-finite) */
	int64_t ckpt_lost;    /* the latest checkpoint tried failed: its step, else 0 */
	char *snap;           /* the data position at the step's start */
	ckpt_job *job;
	gk_nn_train_mem mem;
	char data_note[160];
	int cuda;                  /* the model is on the GPU */
	int dev;                   /* its CUDA device */
	char device[32];           /* "cpu", "cuda:N" */
	char device_desc[192];     /* on a GPU: its name and CUDA versions (gk_cuda_describe) */
	char device_note[sizeof(((gk_err *)0)->msg) + 32];
	char *init_from;      /* --init-from as rank 0 resolved it, once */
	const char *init_asked; /* ... and as given */
	int eot_asked;          /* --eot given: tokenized data must use it */
	char ckpt_note[PATH_MAX + 192]; /* rank 0: latest repaired, or "" */
	char *resume_notes;        /* settings changed since the checkpoint's run */
	char model_from[PATH_MAX]; /* the checkpoint loaded, or "" */
	char *model_dir;           /* the checkpoint directory the shape came
				    * from (resumed, or --init-from's), or NULL */
	gk_tok *tok;               /* the run's tokenizer (train_tok.c), or NULL */
	char *tok_from;            /* ... what it was read from */
	char tok_note[2 * PATH_MAX + 160]; /* --tokenizer replaced the checkpoint's, or "" */
	struct gk_nn_tok_file {
		const char *name;  /* its name in a step directory */
		char *buf;
		size_t len;
	} tok_files[2];            /* ... and its files' bytes, for checkpoints */
	gk_nn_placement place;     /* this rank's CPUs (place.c) */
	uint64_t kernel;           /* ... and its kernel (boot id), as place.c hashes it */
	gk_nn_straggler *strag;    /* straggler.c's state, or NULL: no exchanges */
	gk_nn_pp *pp;              /* pp_sched.c's buffers (--pp), made by the first step */
	char (*hosts)[GK_NN_HOST_MAX]; /* each rank's host name (place.c), with
				    * --straggler-every in a world of several */
};

/* ---- train_mem.c ---------------------------------------------------------------------- */

/* Before the model is allocated: whether this rank's memory fits the
 * machine, refused with the figures and the cheapest fix unless --force
 * (every rank agrees). */
int gk_nn_tr_check_memory(gk_nn_trainer *t, gk_err *err);
/* Once the run is built: t->mem, the bytes by lib/mem's categories. */
void gk_nn_tr_account(gk_nn_trainer *t);

/* ---- agree.c -------------------------------------------------------------------------- */

/* Rank 0's bytes to every rank (bytes a multiple of 4). */
int gk_nn_tr_bcast(gk_nn_trainer *t, void *buf, size_t bytes, gk_err *err);
/* Every rank's bytes-sized record into all (world * bytes). */
int gk_nn_tr_gather(gk_nn_trainer *t, const void *mine, void *all, size_t bytes,
		    gk_err *err);
/* Sums over the ranks, in place (nothing for a world of one). */
int gk_nn_tr_sum(gk_nn_trainer *t, double *v, size_t n, gk_err *err);
/*
 * A failure that nfail ranks met (every rank knows nfail; mine is this
 * rank's error, or NULL): every rank fails with it and exits cleanly,
 * and the first failing rank says why, once for the job.
 */
int gk_nn_tr_agreed_failure(gk_nn_trainer *t, double nfail, const gk_err *mine,
			    gk_err *err);
/* After work each rank does alone (rc < 0 with err: it failed): whether
 * any rank failed, said once for the job. */
int gk_nn_tr_agree_local(gk_nn_trainer *t, int rc, gk_err *err);
/* Whether every rank holds the same id: 0 yes, 1 no (t->agreed set; the
 * caller says what differs), -1 when the collective failed. */
int gk_nn_tr_agree_id(gk_nn_trainer *t, uint64_t id, gk_err *err);
/* The ranks opened the same data (d read from src). */
int gk_nn_tr_agree_data(gk_nn_trainer *t, const gk_nn_data *d, const char *src,
			gk_err *err);
/* Every rank was started with the same options. */
int gk_nn_tr_agree_options(const gk_nn_trainer *t, gk_err *err);
/* fn run by rank 0 alone while the others wait (see agree.c): on every
 * rank 0 when it succeeded, 1 when it failed (rank 0's *mine says why),
 * or -1. */
int gk_nn_tr_rank0_alone(gk_nn_trainer *t, int (*fn)(gk_nn_trainer *, const char *, gk_err *),
			 const char *arg, gk_err *mine, gk_err *err);

/* ---- place.c -------------------------------------------------------------------------- */

/* t->place, and --threads' default. */
int gk_nn_tr_place(gk_nn_trainer *t, gk_err *err);

/* ---- resume.c ------------------------------------------------------------------------- */

/* Rank 0 creates and locks --ckpt-dir, and the ranks agree it is theirs. */
int gk_nn_tr_claim_ckpt_dir(gk_nn_trainer *t, gk_err *err);
/* Rank 0 resolves --init-from to one step directory, for every rank. */
int gk_nn_tr_resolve_init_from(gk_nn_trainer *t, gk_err *err);
/* A failure reading --init-from, said better when ckpt-prune removed it
 * meanwhile. Returns -1. */
int gk_nn_tr_init_gone(const gk_nn_trainer *t, gk_err *err);
/* Rank 0 checks the COMMIT behind a checkpoint input; the ranks agree. */
int gk_nn_tr_verify_ckpt(gk_nn_trainer *t, const char *in, gk_err *err);
/* Step, data position, model and moments from step directory dir. */
int gk_nn_tr_resume_from(gk_nn_trainer *t, const char *dir, uint64_t want, gk_err *err);

/* ---- checkpoint.c --------------------------------------------------------------------- */

/* Start writing checkpoint t->step from a thread (one in flight). */
int gk_nn_tr_ckpt_start(gk_nn_trainer *t, gk_nn_train_hooks *h, gk_err *err);
/*
 * The host memory a checkpoint's copy of the state takes on this rank
 * (0 without --ckpt-dir): rank 0's parameters (nparams floats), the
 * moments it writes (moments floats each) and its error feedback
 * (feedback floats). The writer thread writes from the copy while the
 * next steps change the state; the trainer counts it as "checkpoint".
 */
uint64_t gk_nn_tr_ckpt_bytes(const gk_nn_trainer *t, size_t nparams, size_t moments,
			     size_t feedback);
/* This rank's part of the counts gk_nn_tr_ckpt_progress takes, summed
 * over the ranks: written, failed, done. */
void gk_nn_tr_ckpt_counts(const gk_nn_trainer *t, double c[3]);
int gk_nn_tr_ckpt_progress(gk_nn_trainer *t, const double c[3], gk_nn_train_hooks *h,
			   gk_err *err);
/* Finish the pending checkpoint on every rank. */
int gk_nn_tr_ckpt_finish(gk_nn_trainer *t, gk_nn_train_hooks *h, gk_err *err);
/* Stop the writer and drop what it did not commit (gk_nn_trainer_free). */
void gk_nn_tr_ckpt_cancel(gk_nn_trainer *t);

/* ---- straggler.c ---------------------------------------------------------------------- */

/* With --straggler-every in a world of several ranks: its state and this
 * rank's GPU through NVML (no collective: place.c gathered the host
 * names); else nothing. */
int gk_nn_tr_straggler_open(gk_nn_trainer *t, gk_err *err);
void gk_nn_tr_straggler_free(gk_nn_trainer *t);
/* Add one step's parts (seconds, gk_nn_part). */
void gk_nn_tr_straggler_step(gk_nn_trainer *t, const double part[GK_NN_NPARTS]);
/* At every straggler_every-th step (the same on every rank): the
 * exchange, and on rank 0 the judgement and h->stragglers. */
int gk_nn_tr_straggler_exchange(gk_nn_trainer *t, int64_t step, gk_nn_train_hooks *h,
				gk_err *err);

/* ---- pp_sched.c ---------------------------------------------------------------------- */

/* The schedule's buffers and the model's activation slots (--pp). */
int gk_nn_tr_pp_open(gk_nn_trainer *t, gk_err *err);
/* A step's micro-batches through the pipeline (--pp): read, then forward
 * and backward by the schedule; *lsum the last stage's sum of losses (0
 * on the others); part's data, compute and communication. */
int gk_nn_tr_pp_accumulate(gk_nn_trainer *t, double *lsum, double *part, gk_err *err);
/*
 * Evaluation through the pipeline, forward only: batches of d (all with
 * batches <= 0) through the stages, the last one's losses summed into
 * acc[0] and counted in acc[1] (the other stages add nothing).
 */
int gk_nn_tr_pp_eval(gk_nn_trainer *t, gk_nn_data *d, int64_t batches, double acc[2],
		     gk_err *err);
/* The communicator of the activations between this rank's stage and its
 * neighbours: on GPUs the pipeline's NCCL one (device memory), else the
 * grid's host group (NULL without --pp). */
gk_comm *gk_nn_tr_pp_messages(const gk_nn_trainer *t);
/* The last step's pipeline figures into lg: this rank's bytes sent, its
 * pipeline's bubble and stages (gk_nn_pp_stage); NaN and none without
 * --pp or before a step. */
void gk_nn_tr_pp_log(const gk_nn_trainer *t, gk_nn_train_log *lg);
/* The sets of logits this rank holds: the activation slots on the last
 * stage, none on the others. */
int gk_nn_tr_pp_head_sets(const gk_nn_trainer *t);
/* The bytes of the stage's send buffers, where the model computes (a
 * GPU's device memory): one a micro-batch's chunk, of its activations to
 * the next stage and of their gradients to the one before
 * (gk_mem_pp_buffers, mem-estimate's pp_buffers); 0 without --pp. */
uint64_t gk_nn_tr_pp_buffer_bytes(const gk_nn_trainer *t);
/* The tied embedding's gradient summed over the first and last stage. */
int gk_nn_tr_pp_embed_sum(gk_nn_trainer *t, gk_err *err);
/* The global gradient norm, each parameter counted once over the stages. */
int gk_nn_tr_pp_norm(gk_nn_trainer *t, double *norm, gk_err *err);
/* For a checkpoint: out[0..2] the whole model's parameters and moments
 * (the flat layout, malloc'ed) on the first stage of data-parallel group
 * 0's pipelines, each stage's range from it; NULL elsewhere. Called by
 * every rank. */
int gk_nn_tr_pp_collect(gk_nn_trainer *t, float *out[3], gk_err *err);
/* On a GPU: this stage's moments (its pieces of its range, and of wte)
 * between the host's (gk_nn_dp's mom and vel) and the device's, up
 * (upload) or down; nothing on the CPU. */
int gk_nn_tr_pp_moments(gk_nn_trainer *t, int upload, gk_err *err);
void gk_nn_tr_pp_free(gk_nn_trainer *t);

/* ---- train_tok.c ---------------------------------------------------------------------- */

/*
 * The run's tokenizer, once the model's shape is known: --tokenizer, else
 * the tokenizer files of t->model_dir (none there: the run has none). Its
 * vocabulary must fit the model's; its files are read into t->tok_files.
 */
int gk_nn_tr_tok_resolve(gk_nn_trainer *t, gk_err *err);
/* The ranks resolved the same tokenizer (or none), by fingerprint. */
int gk_nn_tr_tok_agree(gk_nn_trainer *t, gk_err *err);
/* Rank 0: the tokenizer's files into a checkpoint's staging directory. */
int gk_nn_tr_tok_save(const gk_nn_trainer *t, gk_ckpt_stage *s, gk_err *err);
void gk_nn_tr_tok_free(gk_nn_trainer *t);

/* ---- train.c -------------------------------------------------------------------------- */

int gk_nn_tr_data_open(gk_nn_trainer *t, gk_nn_data **d, const char *src, int loop,
		       int shuffle, gk_err *err);
/* The data position as JSON, malloc'ed (NULL without memory). */
char *gk_nn_tr_data_state(const gk_nn_data *d);
/* --val-data holds a micro-batch on every rank, before step 1. */
int gk_nn_tr_check_val_data(gk_nn_trainer *t, gk_err *err);

/* ---- offload.c: the optimizer state in a file (--offload optimizer:DIR) ----------------- */

/* the default bytes of each moment an update chunk holds */
#define GK_NN_OFFLOAD_CHUNK ((size_t)4 << 20)

typedef struct gk_nn_offload gk_nn_offload;
/* The floats of each moment a chunk takes, of n (chunk_bytes 0: the
 * default), and the buffer's bytes (both moments' chunks). */
size_t gk_nn_offload_chunk(size_t chunk_bytes, size_t n);
uint64_t gk_nn_offload_buffer_bytes(size_t chunk_bytes, size_t n);
/*
 * This rank's file of 2 n floats (the moments, zero) under dir, its space
 * allocated, and the chunk buffer. Fails (naming dir or the file) when dir
 * is missing or unwritable, has less free space than the state, or the
 * file cannot take its size (a full disk, `ulimit -f`).
 */
int gk_nn_offload_open(gk_nn_offload **out, const char *dir, int rank, size_t n,
		       size_t chunk_bytes, gk_err *err);
/* Removes the file. */
void gk_nn_offload_close(gk_nn_offload *o);
const char *gk_nn_offload_path(const gk_nn_offload *o);
uint64_t gk_nn_offload_file_bytes(const gk_nn_offload *o);
/* n floats of moment k (0: m, 1: v) from element a of the range. */
int gk_nn_offload_read(gk_nn_offload *o, int k, size_t a, size_t n, float *dst, gk_err *err);
int gk_nn_offload_write(gk_nn_offload *o, int k, size_t a, size_t n, const float *src,
			gk_err *err);
/* gk_nn_update of the parameters [lo, hi), whose moments are the file's
 * elements from at on, chunk by chunk. */
int gk_nn_offload_update(gk_nn_offload *o, gk_nn_model *m, const gk_nn_adamw *c, float lr,
			 int64_t t, float grad_scale, size_t lo, size_t hi, size_t at,
			 const float *g, gk_err *err);
/* root's moments to every rank of comm, a chunk at a time (ZeRO-0's
 * replicated moments on resume); a failure to read or write is this
 * rank's, returned after every chunk was sent. */
int gk_nn_offload_broadcast(gk_nn_offload *o, gk_comm *comm, int root, gk_err *err);
/* the chunk buffer (2 chunk floats), for staging a resume's moments */
float *gk_nn_offload_buffer(gk_nn_offload *o, size_t *floats);

/* ---- dp.c: the gradient path ------------------------------------------------------------ */

/*
 * Data parallel over the grid's data-parallel group (the world without
 * tensor parallelism): every rank holds the whole model, or its tensor
 * slices, and its
 * gradients; after backward they are averaged (ZeRO-0: bucketed
 * allreduces, overlapped with backward) or each rank receives its own
 * range of them (ZeRO-1: reduce-scatter), the global norm is taken, AdamW
 * updates this rank's range [lo, hi) with its moments, and ZeRO-1 gathers
 * every rank's updated range. The trainer's loop calls only these.
 */
struct gk_nn_dp {
	gk_nn_model *m;
	gk_comm *comm;        /* the world's */
	gk_comm *gcomm;       /* the gradients': comm, or an nccl one (dev_grads) */
	int dev_grads;        /* gradients reduced where the model computes (GPU, NCCL) */
	int via_host;         /* a GPU's gradients reduced through host memory */
	char note[sizeof(((gk_err *)0)->msg) + 64]; /* why --comm auto chose the host */
	int rank, world;
	int pp_stage;         /* a pipeline stage (pp_sched.c), or -1 */
	int zero;
	size_t N, Np, lo, hi; /* parameters, padded, this rank's optimizer range */
	size_t head;          /* a pipeline's last stage: the wte it shares with
			       * the first, [0, head), its moments after [lo, hi)'s */
	/*
	 * A pipeline stage's segments of the flat buffer: seg[0] its range
	 * (without wte under ZeRO-1 on the first stage), seg[1] the tied wte
	 * on the last stage (and under ZeRO-1 on the first). Under ZeRO-1
	 * (ppshard) each is cut over the data-parallel group in pieces of
	 * per[k] floats, own[k] this rank's, displ[k] the owners' offsets in
	 * the segment (world + 1 each); else own[k] is seg[k]. The moments
	 * hold per[0] floats for own[0], then own[1]'s.
	 */
	int ppshard;
	size_t seg[2][2], own[2][2], per[2], *displ[2];
	size_t ppbucket, *bdispl; /* ppshard under ZeRO-2: its buckets' floats, and
				   * the owners' parts of one (world + 1) */
	size_t wte;           /* ... the tied wte's floats, [0, wte) */
	float *mom, *vel;     /* hi - lo (+ head) each, or a stage's per[0] +
			       * per[1] (host; mirrors on a GPU); NULL with off */
	gk_nn_offload *off;   /* --offload optimizer:DIR: the moments in a file */
	gk_nn_trainer *t;     /* the trainer, for its agreed failures */
	int host_update;      /* a GPU's update on the CPU, the moments in host
			       * memory (--offload optimizer) */
	int shard;            /* ZeRO-1 runs: zero and (CPU) world > 1 or (GPU) NCCL */
	int master_stale;     /* a GPU's bf16 working copy was gathered, not the
			       * master: this rank's master is current in
			       * [lo, hi) only, or a pipeline stage's in its
			       * pieces own[k] (gk_nn_dp_master_full) */
	gk_comm_compress compress;
	int overlap;          /* buckets start during backward */
	float *resid;         /* ZeRO-1 to 3 with --compress: its error feedback, Np floats;
			       * a pipeline stage's (any ZeRO) or a tensor slice's (ZeRO
			       * 1 to 3) its segments' (pp_shard.c); nresid floats */
	size_t nresid;
	int tpsync;           /* int8 over a tensor group: its replicated tensors'
			       * reduced gradients agree (dp.c's tp_replicated) */
	float *tpbuf;         /* ... on the CPU through these ntp floats */
	size_t ntp, tprange[2][2]; /* ... from these ranges of the flat buffer */
	int zero2;            /* ZeRO-2 runs: zero >= 2 and shard */
	float *gshard;        /* ... this rank's reduced gradients, Np / world floats
			       * (CPU: the model's buffer is lazy_grads; GPU: device
			       * memory of gcomm's, beside the model's full buffer) */
	float *hshard;        /* ... a GPU's, copied to the host for --offload optimizer */
	gk_comm_grads *grads;
	/*
	 * ZeRO-3 (zero 3, world > 1; a GPU's over NCCL): the parameters are sharded too.
	 * Units: 0 the embeddings (wte, wpe), 1..L the blocks, L + 1 the
	 * final norm and the padding (over a grid a stage's edges and
	 * blocks, zero3.c); each [ulo, uhi) of the flat buffer, gathered
	 * over its owners (udispl: world + 1 offsets a unit) into the lazily
	 * mapped parameters and released outside [lo, hi) (a stage's piece)
	 * after.
	 */
	int zero3;
	int stage3;           /* ZeRO-3 over a grid (--tp, --pp): a sharded stage's
			       * parameters too, its units each within one of
			       * its segments (useg), owned by its pieces */
	int reshard;          /* release a block after its forward (else after
			       * its backward) */
	int prefetch;         /* the next block's gather during this one (overlap) */
	int pipe;             /* stage3 in a pipeline: its schedule says the pass
			       * after each (next_fwd: 1 a forward, 0 a
			       * backward, -1 none; of chunk next_chunk), whose
			       * first block is next */
	int next_fwd, next_chunk;
	int nunits;
	int units;            /* on a GPU: the model's unit buffers (unit_params),
			       * gathered over gcomm in the working copy's type */
	int nuslot;           /* ... its buffers of a block, used in turn */
	size_t *ulo, *uhi, *udispl;
	signed char *useg;    /* stage3: the segment a unit lies in (seg, own) */
	int ublk, nblk;       /* the blocks' units: ublk .. ublk + nblk - 1, the
			       * rest (the embeddings, the final norm) edges */
	int ul0, ulen, ustride; /* ... of layers ul0 + c ustride .. + ulen - 1, each
				 * chunk c of the stage's (zero3.c's unit_of) */
	int nlayers;          /* the model's */
	gk_comm_req **ureq;   /* a unit's gather, until the host has waited for it */
	signed char *ustate;  /* 0 released, 1 in flight, 2 present */
	int dev_order;        /* on a GPU after the first step: present is the model's
			       * stream ordered after the gather (a CUDA event),
			       * its request waited for on the host later */
	int64_t *useq, issued; /* the order the gathers were started in */
	int64_t gathers, prefetched; /* this step's: waited for, started before */
	double comm_start;    /* first bucket of this step started */
	double bwd_wait;      /* ZeRO-2: seconds of this step's micro-steps spent in
			       * the buckets' calls during backward (exposed) */
	int block_at, reduces; /* tests: reduction block_at never ends (gk_nn_train_opts'
				* test_block_step); reductions so far */
};

/* Before the model: the multiple of the flat buffers' length (the world
 * under ZeRO-1, so that equal ranges exist on every rank). */
int gk_nn_dp_flat_multiple(const gk_nn_train_opts *o, int world);
/* Before the model: whether its gradient buffer is lazy_grads (ZeRO-2). */
int gk_nn_dp_lazy_grads(const gk_nn_train_opts *o, int world, int cuda);
/*
 * ZeRO-2's gradient bytes on a rank of a model of nflat floats (padded to
 * the world) whose tied embedding takes the first head floats: the shard
 * it keeps, and the most the lazily mapped buffer holds during backward
 * (the embedding's rows, which live through all of it, and the buckets
 * in flight and being filled).
 */
void gk_nn_dp_zero2_bytes(size_t nflat, int world, size_t head, size_t bucket_bytes,
			  int overlap, uint64_t *shard, uint64_t *transient);
/* Before the model: whether a GPU model has its gradients in buckets
 * (bucket_grads: ZeRO-2 over NCCL, no buffer of all of them) */
int gk_nn_dp_bucket_grads(const gk_nn_train_opts *o, int world, int cuda);
/* Before the model: whether its parameter buffer is lazy_params (ZeRO-3) */
int gk_nn_dp_lazy_params(const gk_nn_train_opts *o, int world, int cuda);
/* Before a GPU model: its unit_params (ZeRO-3 over NCCL: a block's buffers,
 * all the stage's layers with --reshard-after-forward no, 2 with prefetch,
 * else 1), or 0 */
int gk_nn_dp_unit_params(const gk_nn_trainer *t);
/*
 * ZeRO-3's parameter bytes on a rank of a model of nflat floats (padded to
 * the world): the range it owns (shard), and the most the lazily mapped
 * buffer holds besides it during a step (transient): the embeddings and
 * the final norm (edge floats, kept for the step) and two blocks (the
 * one in use and the next, prefetched; block floats the largest), or
 * with keep (--reshard-after-forward no) all layers of them.
 */
void gk_nn_dp_zero3_bytes(size_t nflat, int world, size_t edge, size_t block, int layers,
			  int keep, uint64_t *shard, uint64_t *transient);
/* ZeRO-3: every parameter present (evaluation, a checkpoint's copy over
 * a grid; no gathers around the blocks meanwhile; over a grid every
 * parameter of the stage; on GPUs in a whole working copy on the device,
 * gathered there), then this rank's range (its pieces) only again.
 * Nothing under other stages. */
int gk_nn_dp_params_full(gk_nn_dp *dp, gk_err *err);
/* ZeRO-3: every parameter present on rank 0 alone (--sample), each other
 * rank's range sent to it (on GPUs from device to device);
 * gk_nn_dp_params_shard after, on rank 0. Every rank calls it. Nothing
 * under other stages. */
int gk_nn_dp_params_root(gk_nn_dp *dp, gk_err *err);
/* ZeRO-3 over a grid: every fp32 parameter of the stage in the host's
 * copy (a checkpoint's; on GPUs the caller's gk_nn_download first, then
 * the pieces gathered there over the host communicator, the device
 * untouched), as gk_nn_dp_params_full leaves it on the CPU;
 * gk_nn_dp_params_shard after. Every rank calls it. */
int gk_nn_dp_params_host(gk_nn_dp *dp, gk_err *err);
void gk_nn_dp_params_shard(gk_nn_dp *dp);
/* ZeRO-3 without a grid: the fp32 parameters [0, nparams) into dst on
 * rank 0 (NULL elsewhere), each rank's range from its host copy (on a GPU
 * the caller's gk_nn_download first), sent over the host communicator:
 * no whole copy on any rank but dst (--ckpt-gather's). Every rank calls
 * it. */
int gk_nn_dp_params_to_root(gk_nn_dp *dp, float *dst, gk_err *err);
/* ZeRO-1 and 2 on GPUs in bf16: every rank's fp32 master whole again (a
 * checkpoint's copy), one all-gather of the master's ranges (a pipeline
 * stage's or a tensor group's: of each segment's pieces) where the steps
 * since the last gathered the working copy instead; nothing otherwise.
 * Every rank calls it. */
int gk_nn_dp_master_full(gk_nn_dp *dp, gk_err *err);
/* A pipeline's stage s, data-parallel rank r: its piece [*a, *b) of
 * segment k (gk_nn_dp's seg; the whole segment without ZeRO-1) */
void gk_nn_dp_pp_piece(const gk_nn_dp *dp, int s, int r, int k, size_t *a, size_t *b);
/* zero3.c, for dp.c: the units made (dp->zero3, dp->stage3), and unit u
 * gathered (issue: started; wait: present) and released outside [lo, hi)
 * (a stage's: outside its piece of the unit's segment) */
int gk_nn_z3_open(gk_nn_dp *dp, gk_nn_trainer *t, gk_err *err);
/* the edge units (embeddings, final norm) present for the step, and
 * with prefetch the first block's gather started */
int gk_nn_z3_edges(gk_nn_dp *dp, gk_err *err);
/* ZeRO-3 over a grid: the bytes of the stage's parameters that its units
 * hold gathered at most during a step besides its pieces: the edges, and
 * every block with keep (--reshard-after-forward no), else two (the one
 * in use and the next, prefetched; without prefetch the model's last,
 * kept from its forward into its backward), whole pages each, less the
 * whole pages of the rank's piece within them (counted as parameters) */
uint64_t gk_nn_dp_stage3_bytes(const gk_nn_dp *dp, int keep);
int gk_nn_z3_issue(gk_nn_dp *dp, int u, gk_err *err);
int gk_nn_z3_wait(gk_nn_dp *dp, int u, gk_err *err);
void gk_nn_z3_release(gk_nn_dp *dp, int u);
/* a step's last backward done: the edge units released, and prefetch
 * and the device's ordering on from here where the first step waited on
 * the host (on a GPU) */
void gk_nn_z3_step_done(gk_nn_dp *dp);
/* pp_shard.c, for dp.c: a stage's segments of a pipeline of pp stages
 * (gk_nn_dp's seg, own, per, displ), its pieces averaged into their owners
 * after the schedule, and gathered to all after the update (on GPUs in
 * bf16 the working copy's, leaving master_stale); the fp32 master's
 * pieces gathered whole (a GPU's, for gk_nn_dp_master_full) */
int gk_nn_pp_segments(gk_nn_dp *dp, int pp);
int gk_nn_pp_shard_reduce(gk_nn_dp *dp, gk_err *err);
/* --compress: a stage's error feedback, its length (its segments') and
 * where segment k's starts (NULL without feedback or a stage) */
size_t gk_nn_pp_resid_len(const gk_nn_dp *dp);
float *gk_nn_pp_resid(const gk_nn_dp *dp, int k);
int gk_nn_pp_shard_gather(gk_nn_dp *dp, gk_err *err);
/* each segment's pieces of a buffer of elements of dt (element x at
 * at(m, x): the device's over gcomm, the host's over comm; a segment
 * from its start on in one piece of memory) from their owners to every
 * rank of the group, in place */
int gk_nn_pp_gather_segments(gk_nn_dp *dp, gk_comm *c, void *(*at)(gk_nn_model *, size_t),
			      gk_dtype dt, gk_err *err);
/* at for the host's parameters (gk_nn_params) */
void *gk_nn_pp_host_params_at(gk_nn_model *m, size_t off);
int gk_nn_pp_master_gather(gk_nn_dp *dp, gk_err *err);
/* After the model: this rank's optimizer range and its moments (zero). */
int gk_nn_dp_new(gk_nn_dp **out, gk_nn_trainer *t, gk_err *err);
/* Once the device is chosen: the gradients' communicator (--comm),
 * ZeRO-1's buffers and the buckets. */
int gk_nn_dp_open(gk_nn_dp *dp, gk_nn_trainer *t, gk_err *err);
void gk_nn_dp_free(gk_nn_dp *dp);
/* This rank's optimizer range of the N parameters (not the padding). */
size_t gk_nn_dp_lo(const gk_nn_dp *dp);
size_t gk_nn_dp_hi(const gk_nn_dp *dp);
/* The floats of each moment this rank keeps (a stage's per[0] + per[1]),
 * in memory or (offloaded) in its file. */
size_t gk_nn_dp_moments_len(const gk_nn_dp *dp);
/* Offloaded: the moments into dp->mom and dp->vel from the file for a
 * checkpoint of a grid, and freed again; else nothing. */
int gk_nn_dp_moments_load(gk_nn_dp *dp, gk_err *err);
void gk_nn_dp_moments_drop(gk_nn_dp *dp);
/* backward's ready callback for a micro-step (the step's last or not), or NULL */
gk_nn_ready_fn gk_nn_dp_ready_fn(const gk_nn_dp *dp, int last);
/* Around micro-step a of accum: before its forward, and after its
 * backward (ZeRO-2 finishes the micro-step's buckets there, but the
 * last's, which gk_nn_dp_reduce finishes). ZeRO-3 gathers the
 * embeddings and the final norm before a micro-step. */
int gk_nn_dp_micro_begin(gk_nn_dp *dp, int a, int accum, gk_err *err);
int gk_nn_dp_micro_end(gk_nn_dp *dp, int a, int accum, gk_err *err);
/* A pipeline's schedule, before each of its passes: the pass after it is
 * a forward (fwd 1) or a backward (0) of the stage's chunk of layers
 * chunk (0 but under the interleaved schedule), or none (fwd -1). ZeRO-3
 * prefetches that pass's first block during this one's last. */
void gk_nn_dp_next_pass(gk_nn_dp *dp, int fwd, int chunk);
/* After backward (at time now): the gradients averaged, or this rank's
 * range of them. */
int gk_nn_dp_reduce(gk_nn_dp *dp, double now, gk_err *err);
/* This rank's part of the squared norm: its range under ZeRO-1, else 0. */
int gk_nn_dp_local_sumsq(gk_nn_dp *dp, double *ss, gk_err *err);
/* The global norm, given the ranks' local parts summed. */
int gk_nn_dp_norm(gk_nn_dp *dp, double ss_sum, double *norm, gk_err *err);
/* AdamW on this rank's range, then (ZeRO-1) every rank's range to all;
 * *exposed gets the gather's time. */
int gk_nn_dp_update(gk_nn_dp *dp, const gk_nn_adamw *c, float lr, int64_t step,
		    float grad_scale, double *exposed, gk_err *err);
/* Bytes of the communication buffers (error feedback), for accounting. */
uint64_t gk_nn_dp_comm_bytes(const gk_nn_dp *dp);
/*
 * The error feedback that compressed communication keeps across steps
 * (this rank's own, n floats: N for ZeRO-0's buckets, Np for ZeRO-1's
 * reduce-scatter and ZeRO-2's and 3's buckets, which keep the same values;
 * a pipeline stage's or a tensor slice's its segments', nresid),
 * copied to or from host memory for a checkpoint; *n 0 when the run
 * keeps none. Its layout (GK_NN_FEEDBACK_META in the checkpoint's file):
 * "allreduce" (ZeRO-0's buckets) or "reduce-scatter" (ZeRO-1 to 3); a
 * resume restores only the same layout. In a grid (--tp, --pp) the file
 * also names it (GK_NN_FEEDBACK_GRID_META, gk_nn_dp_feedback_grid: "dp D
 * x pp P x tp T", and the interleaved schedule's chunks, which place the
 * blocks), and a resume restores only the same grid; "" without one.
 */
#define GK_NN_FEEDBACK_META "gpukit.feedback"
#define GK_NN_FEEDBACK_GRID_META "gpukit.feedback.grid"
size_t gk_nn_dp_feedback_len(gk_nn_dp *dp);
const char *gk_nn_dp_feedback_layout(const gk_nn_dp *dp);
void gk_nn_dp_feedback_grid(const gk_nn_dp *dp, char *buf, size_t len);
int gk_nn_dp_feedback_get(gk_nn_dp *dp, float *host, gk_err *err);
int gk_nn_dp_feedback_set(gk_nn_dp *dp, const float *host, gk_err *err);

#endif
