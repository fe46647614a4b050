/*
 * train.h - gpu-train's trainer (prefix gk_nn_train_, gk_nn_trainer_):
 * data-parallel training of lib/nn's model on lib/nn's data over lib/comm,
 * with checkpoints through lib/ckpt. lib/nn/train_internal.h lists the
 * files that implement it.
 *
 * Errors: functions returning int give 0, or -1 with a message in err.
 * Nothing here prints or exits.
 */
#ifndef GK_NN_TRAIN_H
#define GK_NN_TRAIN_H

#include <signal.h>
#include <stdio.h>
#include <stdio.h>

#include "comm/comm.h"
#include "mem/mem.h"
#include "nn/data.h"
#include "nn/nn.h"
#include "tok/tok.h"

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
 * from any other. Under ZeRO-3 each rank writes its range of the
 * parameters too, model-rank-R-of-W.safetensors (tensors whole, or cut
 * as flat slices: gpukit.flat metadata), and no rank the whole model
 * unless ckpt_gather. The state is copied to host buffers at the step
 * boundary and written by a thread; rank 0 commits once every rank has
 * written (agreed in the step's small allreduce).
 */
/* The pipeline's schedules (pp_sched.c). */
enum { GK_NN_PP_1F1B, GK_NN_PP_GPIPE, GK_NN_PP_INTERLEAVED };
int gk_nn_pp_sched_parse(const char *s);
const char *gk_nn_pp_sched_name(int k);
struct gk_nn_train_opts;
/*
 * A pipeline (o->pp stages) that trains with fewer micro-batches
 * (o->grad_accum) than stages leaves them idle most of each step: the
 * warning's text (without the tool's name) into buf, 1; else 0 and buf
 * "" (evaluation sends one batch at a time whatever --grad-accum says).
 */
int gk_nn_pp_warning(char *buf, size_t len, const struct gk_nn_train_opts *o);

/* Steps skipped in a row (skip_nonfinite) that end a run as broken. */
#define GK_NN_MAX_SKIPS 10

/*
 * The process grid (grid.c): world = dp x pp x tp, tp innermost, so rank
 * r is tensor rank r % tp of pipeline stage (r / tp) % pp of
 * data-parallel group r / (tp pp). gk_nn_grid_layout (pp 1) and
 * gk_nn_grid_layout_pp check the sizes and set the coordinates (no
 * communication); gk_nn_grid_open splits the world once per dimension
 * (collective over it): tpc the tensor group's communicator (NULL at tp
 * 1), ppc the pipeline's (NULL at pp 1), embc the tied embedding's group,
 * the pipeline's first and last stage (NULL at pp 1, and on the stages
 * between), dpc the data-parallel group's (the world itself when tp and
 * pp are 1). gk_nn_grid_close closes what open made, before the world is
 * closed.
 */
typedef struct gk_nn_grid {
	int tp, dp, pp;
	int tp_rank, dp_rank, pp_rank;
	gk_comm *world, *tpc, *dpc, *ppc, *embc;
} gk_nn_grid;
int gk_nn_grid_layout(int world, int tp, int rank, gk_nn_grid *g, gk_err *err);
int gk_nn_grid_layout_pp(int world, int tp, int pp, int rank, gk_nn_grid *g, gk_err *err);
int gk_nn_grid_open(gk_nn_grid *g, gk_comm *world, gk_err *err);
void gk_nn_grid_close(gk_nn_grid *g);
/*
 * The grid of a run of world ranks with o's --tp, --pp, --pp-schedule,
 * --grad-accum and --sequence-parallel, as its start line says it, into
 * buf: "" without tensor or pipeline parallelism, " (dp D x tp T[,
 * sequence-parallel])", or with a pipeline " (dp D x pp P[ x tp T]:
 * layers a-b, ...; SCHED over M micro-batches, bubble (P-1)/M = x)", each
 * stage's layers of the model's layers (gk_nn_pp_layers) and the
 * schedule's expected bubble.
 */
struct gk_nn_train_opts;
void gk_nn_grid_describe(char *buf, size_t len, int world, int64_t layers,
			 const struct gk_nn_train_opts *o);
/*
 * World rank rank's coordinates in the grid of the options' --tp and --pp
 * over world ranks, into buf: "rank R (dp D, pp P, tp T)", or "rank R"
 * without tensor or pipeline parallelism (or a world they do not divide).
 */
void gk_nn_grid_where(char *buf, size_t len, int world, int rank,
		      const struct gk_nn_train_opts *o);

typedef struct gk_nn_train_opts {
	gk_nn_config cfg;       /* used when have_config */
	int have_config;
	gk_nn_config shape;     /* the shape flags given (0: not given): over
				 * a checkpoint's config.json, when cfg came
				 * from the flags alone (no --config) */
	int cfg_from_flags;
	const char *init_from;  /* checkpoint to start from (fine-tuning) */
	const char *tokenizer;  /* a tokenizer (gk_tok_open's path), or NULL:
				 * the files beside the checkpoint, if any */
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
	const char *offload_dir; /* the AdamW moments in a file under this
				  * directory (offload.c), or NULL: in memory */
	size_t offload_chunk;   /* bytes of each moment an update reads at a
				 * time; 0: GK_NN_OFFLOAD_CHUNK */
	int offload_host;       /* on a GPU: the moments in host memory and the
				 * update on the CPU (ZeRO-Offload) */
	int64_t steps;          /* the schedule's length and the last step */
	int64_t until;          /* > 0: stop after this step (checkpointing) */
	int zero;               /* 0, 1, 2 (gradients sharded too) or 3 (and the
				 * parameters): 2 and 3 on the CPU backend */
	int keep_gathered;      /* ZeRO-3: a block's parameters stay from its
				 * forward to its backward (--reshard-after-forward
				 * no); 0 releases them after the forward */
	int tp;                 /* tensor-parallel ranks per group (0 or 1: none):
				 * the CPU backend, ZeRO 0, no compression */
	int seq_par;            /* sequence parallelism over the tensor group
				 * (gk_nn_opts' seq_par): tp > 1, seq a
				 * multiple of tp, no pipeline */
	int pp;                 /* pipeline stages (0 or 1: none): the CPU
				 * backend, ZeRO 0, no compression */
	int pp_sched;           /* GK_NN_PP_1F1B, GK_NN_PP_GPIPE or
				 * GK_NN_PP_INTERLEAVED */
	int pp_chunks;          /* the interleaved schedule's model chunks a
				 * stage (V >= 2; 0 or 1 otherwise): the
				 * layers divide by pp x V, grad_accum by pp */
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
	const char *trace_dir;  /* the flight recorder's dumps, gk_comm_config's */
	const char *ckpt_dir;
	int64_t ckpt_every;
	int resume;             /* continue from ckpt_dir's latest, if any */
	int ckpt_gather;        /* ZeRO-3: gather the model to rank 0, which
				 * writes model.safetensors, instead of each
				 * rank writing its range (model-rank-*) */
	int64_t eval_every, eval_batches; /* eval_batches <= 0: all the data */
	int eval_only;
	int sample;             /* gk_nn_trainer_sample follows the run: its
				 * refusals (gk_nn_train_check) come before
				 * any work */
	int skip_nonfinite;     /* skip (and count) a step whose loss or norm is not
				 * finite; GK_NN_MAX_SKIPS in a row end the run */
	int ckpt_continue;      /* a failed checkpoint: warn (hook) and train on */
	int skip_bad;           /* gk_nn_data_opts' skip_bad */
	void (*data_note)(void *ctx, const char *msg); /* and its note */
	void *data_note_ctx;
	/* Set by the caller's signal handlers: 1 checkpoint and stop at the
	 * next step boundary, 2 stop without a checkpoint. */
	volatile sig_atomic_t *stop;
	/* Set to 1 by the trainer once it acts on *stop (the ranks agreed to
	 * stop at a step boundary), so that a caller that bounds the time a
	 * signal waits (gpu-train) knows the stop is under way; may be NULL. */
	volatile sig_atomic_t *stop_seen;
	const char *mem_root;   /* tests: the tree the memory check reads /proc
				 * and /sys under (gk_host_mem_read); NULL: "" */
	int force;              /* allocate even when the memory check says the
				 * run does not fit (gk_nn_trainer_new) */
	uint64_t mem_limit;     /* --mem-limit: bytes a rank's accounting may
				 * reach (the device's on a GPU); 0: none */
	int test_block_step;    /* tests: step N blocks in its reduction until
				 * the process ends, as a step that cannot finish */
	int64_t test_wait_step; /* tests: with test_wait_micro > 0, after that
				 * many micro-steps of step test_wait_step the
				 * run waits for *stop, so that a signal lands
				 * inside that accumulation, never after it */
	int test_wait_micro;
	int64_t straggler_every; /* exchange the step's parts every N steps
				  * (straggler.c); 0: never, and no collective */
	double straggler_factor; /* a rank whose busy time is this many times
				  * the median's is slow (<= 1: the default) */
	int test_slow_rank;     /* tests: with test_slow_ms > 0, this rank
				 * sleeps test_slow_ms in part test_slow_part
				 * of each step (gk_nn_part) */
	int test_slow_part, test_slow_ms;
	const char *test_gpu_bus; /* tests: a CPU run samples these GPUs through
				   * NVML, one PCI bus id per rank, ','-separated
				   * (a rank past the list: none) */
	uint64_t test_staging;  /* tests: the CUDA model's pinned staging in
				 * bytes (gk_nn_opts' staging; 0: its own) */
	int ckpt_delay_ms;      /* tests: the writer sleeps before writing */
	int ckpt_commit_delay_ms; /* tests: rank 0 sleeps before committing */
	int ckpt_check_delay_ms; /* tests: rank 0 sleeps before checking a
				  * checkpoint it loads */
	const char *ckpt_commit_wait; /* tests: rank 0 waits before committing
				       * a checkpoint until this path exists */
	const gk_err *failed;   /* an error this rank met before the trainer
				 * (its --config unreadable on this node), or
				 * NULL: gk_nn_trainer_new opens the world only
				 * to fail on every rank with it (see there) */
	/* The settings every rank must share, as the caller's option table
	 * names them ({"--batch", value}); the trainer compares them, and what
	 * they resolved to (the model's shape), in its first collective. */
	const gk_comm_setting *agree;
	size_t nagree;
	/* For each of them, the argument as given or its default ("" for a
	 * default computed later), and
	 * what a resumed run may do with it (GK_OPT_RESUME_*, lib/core): each
	 * checkpoint's trainer.json keeps the values and arguments, and
	 * --resume refuses a setting that must stay and notes one that
	 * changed (gk_nn_trainer_resume_notes), stating the learning rate a
	 * changed schedule gives the next step. NULL: none kept. */
	const char *const *agree_arg;
	const int *agree_resume;
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
 * --dump-data: the first n micro-batches each data-parallel rank of a run
 * with these options would read from o->data (d: gk_nn_train_data_opts's),
 * without a model; each through emit, which owns it, as
 * {"rank": R, "micro": K, "rows": [[T inputs..., the last target], ...]}.
 * The ranks of a tensor group and of a pipeline read their data-parallel
 * group's micro-batches: its first rank emits them, as a run of that many
 * ranks without --tp and --pp does. Returns 0; -1 (err says why); -2 when
 * the world does not make the grid (err: the caller's usage error).
 */
int gk_nn_train_dump_data(const gk_nn_train_opts *o, const gk_nn_data_opts *d, int64_t n,
			  void (*emit)(struct json_t *line, void *ctx), void *ctx, gk_err *err);

/*
 * Whether the parallelism and offload settings of o go together: ZeRO's
 * stages with --compress and the device, --offload's forms with the
 * device, --tp and --pp, --offload-chunk. cuda: 1 on a GPU, 0 on the CPU,
 * -1 not known yet (--device auto before every rank looked: the rules of
 * a device are left to the run's check). 0, or -1 with err saying which
 * options and what to give instead (the caller's usage error). gpu-train
 * calls it on its command line (cuda from --device, or -1), the trainer
 * once the device is chosen.
 */
int gk_nn_train_check(const gk_nn_train_opts *o, int cuda, gk_err *err);

/*
 * The tests' hooks of o from the environment (GK_TEST_CKPT_DELAY_MS,
 * GK_TEST_CKPT_CHECK_DELAY_MS, GK_TEST_BLOCK_STEP, GK_TEST_WAIT_SIGNAL,
 * GK_TEST_MEM_ROOT, GK_TEST_CKPT_COMMIT_WAIT, GK_TEST_STRAGGLER,
 * GK_TEST_GPU_BUS, GK_TEST_PIN_BYTES), and GK_TEST_STOP_GRACE_S's
 * seconds into *grace_s (unchanged when unset; stop.h's grace period).
 * -1 with err naming the variable when one is malformed.
 */
int gk_nn_train_test_env(gk_nn_train_opts *o, int *grace_s, gk_err *err);

/*
 * Bytes this rank allocated, by lib/mem's categories (gk_mem_cat).
 * parameters, gradients and optimizer count the model's own parameters
 * (mem-estimate's Psi, AdamW; optimizer divided by the world under ZeRO-1)
 * and are lib/mem's figures for the run (gk_mem_train_estimate). padding
 * is what the padded vocabulary rows and logit columns and ZeRO-1's
 * rounding add; comm the error-feedback residuals of compression.
 */
typedef struct gk_nn_train_mem {
	uint64_t bytes[GK_MEM_NCAT];
	uint64_t total;
	/*
	 * --offload optimizer:DIR (optimizer is then 0, as mem-estimate
	 * --offload optimizer states it): the state offloaded (lib/mem's
	 * figure, its host_ram part for one rank), the file's bytes (the
	 * padding's moments too) and the update's buffer (counted in
	 * workspace); all 0 without offload.
	 */
	uint64_t offload_state, offload_file, offload_buffer;
	const char *offload_path;
	/*
	 * On a GPU, the host memory the rank allocated for the model, by
	 * lib/mem's host terms (gk_mem_host_term: the parameters' and
	 * gradients' mirrors, the pinned staging, the moments' host copies,
	 * --offload optimizer's gradient shard), which mem-estimate states
	 * for the same run; host_total their sum. The checkpoint's copy is
	 * host memory too, in bytes[GK_MEM_CHECKPOINT]. All 0 on the CPU,
	 * where every category is host memory.
	 */
	uint64_t host[GK_MEM_NHOST];
	uint64_t host_total;
} gk_nn_train_mem;

/*
 * A pipeline stage's step (--pp), from the trainer's clocks on that
 * stage, exchanged within the pipeline after the schedule. A stage's
 * schedule runs from the end of its step's data reads to its last send's
 * completion; busy is that span less the time blocked in receives and
 * in the final waits for its sends (its forwards, backwards and the
 * copies of what it sends). The pipeline's time is the longest stage's
 * span, and a stage is idle for the rest of it: idle = pipeline time -
 * busy, and bubble = idle / busy, the measure of (S-1)/m, the idle time
 * of the 1F1B or GPipe schedule over its work (Narayanan et al. 2021,
 * section 2.2).
 */
typedef struct gk_nn_pp_stage {
	double busy_ms, idle_ms, bubble;
	uint64_t pp_bytes;      /* sent to its neighbour stages */
	uint64_t tp_bytes;      /* put into its tensor group's collectives
				 * (gk_nn_tp_bytes; 0 without --tp) */
	uint64_t activations;   /* its accounted activations (its rank's
				 * gk_nn_train_mem, GK_MEM_ACTIVATIONS) */
} gk_nn_pp_stage;

typedef struct gk_nn_train_log {
	int64_t step;
	double loss, lr, grad_norm;
	uint64_t tokens;        /* trained so far, all ranks */
	double tokens_per_s, step_ms, comm_ms, exposed_comm_ms, gflops;
	uint64_t tp_bytes;      /* this rank's into its tensor group's allreduces
				 * this step (gk_nn_tp_bytes); 0 without --tp */
	int64_t gathers;        /* ZeRO-3: parameter gathers waited for this step
				 * (0 otherwise) ... */
	int64_t prefetched;     /* ... of which started before their use (during
				 * the previous block) */
	uint64_t pp_bytes;      /* this rank's pipeline messages sent this step
				 * (activations, gradients); 0 without --pp */
	double pp_bubble;       /* --pp: the measured bubble of this rank's
				 * pipeline, its stages' idle time over their
				 * busy time (gk_nn_pp_stage); NaN without */
	int pp_stages;          /* --pp: the stages of this rank's pipeline ... */
	const gk_nn_pp_stage *pp_stage; /* ... and each one's figures this step
				 * (the trainer's, overwritten by the next
				 * step); 0 and NULL without */
	int skipped;            /* the update was skipped (non-finite) */
	int64_t bad_samples;    /* skipped corrupt samples so far, all ranks */
	double val_loss;        /* NaN unless evaluated at this step */
} gk_nn_train_log;

typedef struct gk_nn_straggler_report gk_nn_straggler_report; /* below */

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
	 * one) and training goes on. Called on rank 0 only, with the first
	 * failing rank's reason (and how many failed, when several did).
	 */
	void (*checkpoint_failed)(int64_t step, const gk_err *why, void *ctx);
	/* After an exchange of the step's parts (--straggler-every), on
	 * rank 0; may be NULL. */
	void (*stragglers)(const gk_nn_straggler_report *r, void *ctx);
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
 * memory_bytes{category} from mem; tp_comm_bytes under --tp; under --pp
 * pp_bubble_ratio and, labelled by stage, pp_stage_bubble_ratio,
 * pp_stage_idle_seconds, pp_comm_bytes and pp_stage_tp_comm_bytes),
 * replacing the previous step's.
 * -1 with err set when m refuses a sample.
 */
int gk_nn_train_metrics(gk_metrics *m, const gk_nn_train_log *l,
			const gk_nn_train_mem *mem, int world, double now,
			gk_err *err);

/*
 * Stragglers (straggler.c, gpu-train(1) "STRAGGLERS"). Every
 * straggler_every steps the ranks exchange what their steps took since
 * the last exchange, by part, in one allgather on the same steps
 * everywhere; rank 0 states the spread and names a rank whose busy time
 * (its steps less the communication it waited for) stayed factor times
 * the median's or more for GK_NN_STRAGGLER_REPORTS exchanges in a row.
 * In synchronous data parallelism every rank's step lasts as long as the
 * slowest's: the others wait in the gradients' reduction, so their
 * exposed communication grows and a straggler's is the smallest. Busy
 * time is what tells them apart.
 *
 * The parts are host times: on a GPU the forward's loss read waits for
 * its kernels, and backward's last kernels finish inside the reduction's
 * wait (counted as communication), so a slow GPU shows in compute by its
 * forward.
 */
#define GK_NN_STRAGGLER_EVERY 50     /* --straggler-every's default */
#define GK_NN_STRAGGLER_FACTOR 1.3   /* --straggler-factor's default */
#define GK_NN_STRAGGLER_REPORTS 3    /* exchanges in a row before a warning */

typedef enum gk_nn_part {
	GK_NN_PART_DATA,        /* waiting for the next micro-batch */
	GK_NN_PART_COMPUTE,     /* forward and backward */
	GK_NN_PART_COMM,        /* communication not hidden behind compute */
	GK_NN_PART_OPTIMIZER,   /* norm, clip, AdamW */
	GK_NN_PART_CHECKPOINT,  /* a checkpoint's copy, start and commit */
	GK_NN_PART_BUSY,        /* all but GK_NN_PART_COMM */
	GK_NN_PART_STEP,        /* the whole step, wall time */
	GK_NN_NPARTS
} gk_nn_part;
/* "data", "compute", "comm", "optimizer", "checkpoint", "busy", "step";
 * and back (-1: not a part). What parse accepts: the first five. */
const char *gk_nn_part_name(int part);
int gk_nn_part_parse(const char *s);

/* What one rank sends: seconds per step of each part, means over the
 * steps since the last exchange; its GPU as NVML read it just before. */
typedef struct gk_nn_rank_times {
	double part[GK_NN_NPARTS];
	double sm_hz, temp_c;   /* NaN: not read (no GPU, no NVML) */
	uint64_t reasons;       /* nvmlClocksEventReasons bits, when have_reasons */
	int32_t gpu;            /* NVML's index of its GPU, -1: none */
	int32_t have_reasons;
} gk_nn_rank_times;

/* The spread of one value over the ranks: the median of an even count is
 * the mean of the two middle values; an extreme held by several ranks is
 * the lowest rank's. */
typedef struct gk_nn_spread {
	double min, median, max;
	int min_rank, max_rank;
} gk_nn_spread;
/* Over v[0], v[stride], ... (n values, n >= 1; stride in doubles). */
void gk_nn_spread_of(const double *v, int n, size_t stride, gk_nn_spread *s);

struct gk_nn_straggler_report {
	int64_t step, steps;    /* this exchange's step, steps it covers */
	int world;
	gk_nn_spread part[GK_NN_NPARTS];
	const gk_nn_rank_times *ranks;   /* world of them */
	const char *const *hosts;        /* each rank's host name */
	const int *run;         /* each rank's exchanges in a row found slow */
	double factor;
	int slow;               /* a rank that reached GK_NN_STRAGGLER_REPORTS
				 * at this exchange (warn), else -1 */
	int slow_part;          /* its part furthest above that part's median */
	int64_t warnings;       /* warnings so far */
	int64_t reports;        /* exchanges so far */
};

/*
 * Rank 0's side, for tests without ranks: judge one exchange's times
 * (world of them) with run (world counters, zero at first) carried from
 * the previous exchange. A rank is slow when its busy time is at least
 * factor times the median's; run counts each rank's exchanges in a row
 * found slow, and r->slow is a rank whose count reached reports now
 * (the lowest rank of several; -1: none). Fills r but for ranks, hosts,
 * step, steps, warnings and reports.
 */
void gk_nn_straggler_judge(gk_nn_straggler_report *r, const gk_nn_rank_times *t, int world,
			   int *run, double factor, int reports);
/*
 * The warning for r->slow, one line without "gpu-train: warning: ":
 * "rank 1 on host b: busy 2.31x the median (152.0 ms a step against
 * 65.8 ms) for 3 exchanges in a row, most of it in data (+98.1 ms);
 * GPU 3 is power-capped (SM 1410 MHz, 81 C)". Returns buf.
 */
char *gk_nn_straggler_warning(const gk_nn_straggler_report *r, char *buf, size_t len);
/*
 * Into m: gpukit_train_straggler_seconds{part,stat} (min, median, max of
 * each part's seconds a step), gpukit_train_straggler_rank{part,stat} (the
 * rank of the min and the max), gpukit_train_straggler_skew_ratio{part}
 * (max / median), gpukit_train_straggler_slow_ranks (ranks slow in this
 * exchange), gpukit_train_straggler_reports_total,
 * gpukit_train_straggler_warnings_total, and with GPUs
 * gpukit_train_gpu_sm_clock_hertz{stat} and gpukit_train_gpu_slowed_ranks
 * (ranks whose GPU a power or thermal limit slows). A label per rank
 * would put world x parts series in one file; these are bounded.
 */
int gk_nn_straggler_metrics(gk_metrics *m, const gk_nn_straggler_report *r, gk_err *err);
/*
 * The report as gpu-train's JSON line (event "stragglers", gpu-train(1)
 * STRAGGLERS): each part's min/median/max in ms with the rank and host of
 * the extremes, the ranks slow at this exchange with their GPUs, and
 * "straggler" with the warning's text when r->slow >= 0. A new
 * reference, or NULL without memory.
 */
struct json_t *gk_nn_straggler_json(const gk_nn_straggler_report *r);

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

/*
 * The progress line of a run on a terminal (train_progress.c; the caller
 * draws it, here are its text and its timing):
 *
 *   step 120/1000  12%  loss 3.4521  2480 tok/s  elapsed 4:02  ETA 29:37
 *
 * The rate behind tok/s and the ETA is the median time of the last
 * GK_NN_PROGRESS_WINDOW steps, without the run's first step (allocation,
 * page faults, a GPU's warm-up make it several times the others; it is
 * used alone only until a second step is done): a slow step (an
 * evaluation, a checkpoint's copy) moves it little. end is the run's last
 * step (--until's or --steps'), step_tokens the tokens of one step over
 * all ranks; times are gk_now()'s.
 */
#define GK_NN_PROGRESS_WINDOW 15
typedef struct gk_nn_progress {
	int64_t end;
	uint64_t step_tokens;
	double interval;        /* the least time between two redraws */
	double start, drawn;    /* the run's start; the last redraw (0: none) */
	double first;           /* the first step's seconds */
	double recent[GK_NN_PROGRESS_WINDOW]; /* a ring of the later steps' */
	int n, next;
	int64_t steps;          /* steps seen */
} gk_nn_progress;
void gk_nn_progress_start(gk_nn_progress *p, int64_t end, uint64_t step_tokens, double interval,
			  double now);
/* Count the step l (its step_ms). */
void gk_nn_progress_step(gk_nn_progress *p, const gk_nn_train_log *l);
/* Seconds a step takes, as above; NaN before the first step. */
double gk_nn_progress_step_seconds(const gk_nn_progress *p);
/* 1 when the line should be redrawn after step: interval since the last
 * redraw has passed, or step is the last (marked drawn now); else 0. */
int gk_nn_progress_due(gk_nn_progress *p, int64_t step, double now);
/* The line after step l at now, into buf (truncated to len); returns buf. */
char *gk_nn_progress_line(const gk_nn_progress *p, const gk_nn_train_log *l, double now,
			  char *buf, size_t len);
const gk_nn_config *gk_nn_trainer_config(const gk_nn_trainer *t);
/* The options as the trainer resolved them: seq from the model's
 * positions when it was 0, threads from the CPUs, grad_accum at least 1,
 * eot from the vocabulary when it was < 0. */
const gk_nn_train_opts *gk_nn_trainer_opts(const gk_nn_trainer *t);
/* "cpu" or "cuda:N"; *note (if not NULL) is why GK_NN_AUTO chose the CPU,
 * or NULL. */
const char *gk_nn_trainer_device(const gk_nn_trainer *t, const char **note);
/* On a GPU, the device, the CUDA driver's and runtime's versions and the
 * attention the model runs ("NVIDIA H200 (sm_90, 139.8 GiB); driver for
 * CUDA 13.0, runtime CUDA 13.0; fused attention"); NULL on the CPU. */
const char *gk_nn_trainer_device_desc(const gk_nn_trainer *t);
/* The gradients' communicator backend ("self", "mpi", "nccl"); *note
 * (if not NULL) is why --comm auto fell back to the host path, or NULL. */
const char *gk_nn_trainer_comm(const gk_nn_trainer *t, const char **note);
/*
 * What --resume found changed since the checkpoint's run, one line per
 * setting ("resumed with --lr 1e-3 (the checkpoint's run: 6e-4)"), and
 * the schedule's change at the next step, '\n'-separated; NULL when
 * nothing changed.
 */
const char *gk_nn_trainer_resume_notes(const gk_nn_trainer *t);
/* Rank 0: what --resume repaired in --ckpt-dir (latest moved on to the
 * step a killed run committed last), or NULL. */
const char *gk_nn_trainer_ckpt_note(const gk_nn_trainer *t);
/* The checkpoint the model was loaded from (the step directory --resume
 * or --init-from resolved to), or NULL for the seeded initialisation. */
const char *gk_nn_trainer_model_from(const gk_nn_trainer *t);
/* Steps done before this run: the resumed checkpoint's step, else 0. */
int64_t gk_nn_trainer_step(const gk_nn_trainer *t);
gk_nn_model *gk_nn_trainer_model(gk_nn_trainer *t);
/*
 * The run's tokenizer, resolved once before the data is opened: the
 * tokenizer option, else the tokenizer files (tokenizer.json, or
 * vocab.json and merges.txt) in the checkpoint directory the model comes
 * from (the resumed step, or --init-from's step or Hugging Face
 * directory, or the one holding its safetensors file); NULL when there is
 * none (the byte vocabulary, or bare ids). Its vocabulary fits the
 * model's (gk_nn_trainer_new refuses one that does not), it sets the
 * default end-of-text token (its <|endoftext|>), and every checkpoint the
 * run writes carries its files. _from is the path it was read from, and
 * *note (if not NULL) says when the tokenizer option replaced a
 * checkpoint's own that encodes otherwise, else NULL; _fingerprint is
 * gk_tok_fingerprint's, or 0 without a tokenizer, what a manifest of
 * tokenized shards is checked against.
 */
const gk_tok *gk_nn_trainer_tok(const gk_nn_trainer *t);
const char *gk_nn_trainer_tok_from(const gk_nn_trainer *t, const char **note);
uint64_t gk_nn_trainer_tok_fingerprint(const gk_nn_trainer *t);
/*
 * A sample of the trained (or loaded) model, for --sample: n tokens
 * generated after prompt (its bytes encoded by gk_nn_prompt_encode; NULL:
 * after an end-of-text token, as a document starts, which the text leaves
 * out) with the run's batch, seq, eot and seed (gk_nn_sample_prompt). out
 * gets the prompt's tokens (NULL without one), the sampled ids, and the
 * text: the prompt as given, then the ids' (gk_nn_sample_text), not
 * NUL-terminated; is_text is 1 when that is text (a tokenizer or the byte
 * vocabulary), 0 when it is ids in decimal. -1 with err set: a prompt the
 * model cannot read (said as "--prompt: ..."), no memory, a failed
 * generation. gk_nn_trainer_sample_free frees out's buffers. Every rank
 * calls it: rank 0 generates, the others return 0 with out empty (under
 * ZeRO-3 once they have sent rank 0 their range of the parameters, which
 * it holds whole while it samples and releases after; a prompt it cannot
 * read is then the job's failure, agreed). Under tensor or pipeline
 * parallelism (the CPU backend) the model is never gathered: the first
 * data-parallel group's pipelines generate together (gk_nn_sample_grid),
 * each rank with its slices and stage (under ZeRO-3 its stage's slices
 * whole for the while), and rank 0 gets out.
 */
typedef struct gk_nn_trainer_sampled {
	int32_t *prompt;
	int nprompt;
	int32_t *ids;
	size_t n;
	char *text;
	size_t len;
	int is_text;
} gk_nn_trainer_sampled;
int gk_nn_trainer_sample(gk_nn_trainer *t, const char *prompt, int n, double temperature,
			 int top_k, gk_nn_trainer_sampled *out, gk_err *err);
void gk_nn_trainer_sample_free(gk_nn_trainer_sampled *s);
int gk_nn_trainer_rank(const gk_nn_trainer *t);
int gk_nn_trainer_world(const gk_nn_trainer *t);
/* 1 when each rank writes its shard of the model at a checkpoint (ZeRO-3
 * without --ckpt-gather: ckpt-merge makes the Hugging Face directory) */
int gk_nn_trainer_ckpt_sharded(const gk_nn_trainer *t);
/*
 * The tokens of one optimizer step, the global batch's once: batch x seq
 * x grad_accum x the data-parallel groups (the ranks of a tensor group or
 * a pipeline read the same tokens, so the world size would count them
 * tp x pp times). The rate of the step lines, the summary and the
 * terminal's line divide it by time.
 */
uint64_t gk_nn_trainer_step_tokens(const gk_nn_trainer *t);
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
/*
 * Before gk_nn_trainer_abort on a rank that does not report the failure
 * (gk_nn_trainer_failed): gk_comm_await_reporter, 0 when there is no
 * reporter to wait for; -1 with err when the rank that was to report a
 * stall did not end the job in time, for the caller to say.
 */
int gk_nn_trainer_await_reporter(gk_nn_trainer *t, gk_err *err);
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
	int host_ranks, cgroup_ranks; /* ranks on this kernel, and in its memory cgroup */
	int tp_span;       /* tensor groups whose ranks are on more than one host */
	double quota;
} gk_nn_placement;
const gk_nn_placement *gk_nn_trainer_placement(const gk_nn_trainer *t);

/*
 * What gpu-train says of a run (report.c), on the rank the caller picks:
 * at the start, the model, its grid and device, the memory per rank and
 * where the parameters came from; at the end, the summary of
 * gk_nn_trainer_run. The _json functions return the --json event, a new
 * object the caller prints and releases (NULL without memory); the
 * _text ones write the lines for a person to out.
 */
struct json_t *gk_nn_report_start_json(gk_nn_trainer *t);
void gk_nn_report_start_text(FILE *out, gk_nn_trainer *t);
/* The notes and warnings before the start's report: why the CPU, the
 * communicator, the tokenizer, --ckpt-dir's repair, what changed since
 * the checkpoint's run, the pipeline's layout, tensor groups across
 * hosts, more threads than CPUs; a line each to out. */
void gk_nn_report_notes(FILE *out, const gk_nn_trainer *t);
struct json_t *gk_nn_report_summary_json(const gk_nn_trainer *t, const gk_nn_train_summary *s);
void gk_nn_report_summary_text(FILE *out, const gk_nn_trainer *t, const gk_nn_train_summary *s);
/*
 * The memory per rank (and the optimizer state's offload): into an
 * event's "memory" and "offload" members when into is not NULL (a step's
 * too), else a line or two to out.
 */
void gk_nn_report_mem(FILE *out, const gk_nn_train_mem *m, struct json_t *into);

#endif
