/*
 * train.c - gpu-train's loop: data-parallel steps over lib/comm, gradient
 * accumulation, clipping, AdamW (whole or ZeRO-1), schedules, evaluation,
 * checkpoints written from a thread through lib/ckpt's staging, and exact
 * resume.
 *
 * One step (reference: llm.c train_gpt2.cu, nanoGPT train.py, PyTorch
 * DDP's reducer):
 *
 *   zero_grad
 *   for each of A micro-steps: next micro-batch, forward, backward(1/A);
 *       on the last one backward reports finished ranges of the flat
 *       gradient buffer and their buckets start allreducing at once
 *   wait for the buckets (ZeRO-0), or reduce-scatter (ZeRO-1)
 *   one small allreduce of [loss, stop request, sumsq, the checkpoint's state]
 *   global norm, clip, AdamW on this rank's range, allgather (ZeRO-1)
 *
 * Every rank applies the same update to the same parameters (the comm
 * layer's results are bitwise equal on every rank), so replicas never
 * need a broadcast after the initial one.
 *
 * On a GPU (--device cuda) forward, backward, the norm and AdamW run on
 * the device, with fp32 master weights and moments there; the host keeps
 * mirrors for checkpoints. With more than one rank the gradients are
 * reduced where they are: a second communicator, of lib/comm's nccl
 * backend, takes the device's gradient buffer, and each bucket is queued
 * on NCCL's stream behind the backward kernels that produce it (comm.h's
 * stream contract), so NCCL overlaps the rest of backward as the CPU
 * path's buckets do. --comm mpi (or no usable NCCL, under --comm auto)
 * sends them through the host instead: downloaded after backward,
 * allreduced by the same buckets, uploaded. ZeRO-1 on GPUs runs over
 * the same NCCL communicator, on device copies of the CPU path's padded
 * buffers: reduce-scatter, AdamW on the rank's range of the fp32 master
 * weights, allgather of the master, the bf16 working copy rounded anew.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "cuda/cuda.h"
#include "nn/nn.h"
#include "st/st.h"

/* Fixed-size exchange buffer (bytes) for names. */
enum { NAME_BYTES = 512 };

/*
 * A checkpoint being written by a thread. Every rank writes its files;
 * once all have, rank 0 commits the step (lib/ckpt hashes every file into
 * COMMIT). The ranks learn each other's state from the step's allreduce
 * (or from ckpt_finish's), so they move on together: none waits alone.
 */
enum { JOB_WRITING, JOB_WRITTEN /* rank 0: committing */, JOB_DONE, JOB_FAILED = -1 };

typedef struct ckpt_job {
	gk_nn_trainer *t;
	gk_ckpt_stage *stage;
	int64_t step;
	double t0;         /* when the copy of the state began */
	float *params;     /* rank 0: a copy of the parameters */
	float *m, *v;      /* copies of this rank's moments */
	size_t lo, n;      /* the moments' range */
	int write_moments; /* this rank writes an optimizer file */
	char *trainer_json;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	atomic_int state;   /* JOB_WRITING ... JOB_FAILED, this rank's */
	int go_commit;      /* rank 0: every rank has written (1), or not (-1) */
	int agreed;         /* every rank saw all write or one fail */
	int rc;
	gk_err err;
} ckpt_job;

struct gk_nn_trainer {
	gk_nn_train_opts o;
	gk_nn_config cfg;
	gk_comm *comm;
	gk_comm *gcomm;       /* the gradients': comm, or an nccl one (dev_grads) */
	int dev_grads;        /* gradients reduced on the GPU, over NCCL */
	char comm_note[sizeof(((gk_err *)0)->msg) + 64];
	int rank, world;
	int lock;             /* rank 0: the flock on --ckpt-dir, or -1 */
	int agreed;           /* every rank failed together: the exit status */
	int reporter;         /* ... and this rank says why (0 unless chosen) */
	gk_nn_model *m;
	gk_nn_data *data;
	int32_t *in, *tg;
	size_t N, Np, lo, hi; /* parameters, padded, this rank's optimizer range */
	float *mom, *vel;     /* hi - lo each */
	int shard;            /* ZeRO-1 runs: zero and (CPU) world > 1 or (GPU) NCCL */
	float *resid;         /* ZeRO-1 with --compress: its error feedback, Np floats */
	gk_comm_grads *grads;
	int64_t step;         /* completed steps */
	uint64_t tokens;
	int64_t skipped;
	int64_t ckpt_lost;    /* the latest checkpoint tried failed: its step, else 0 */
	double comm_start;    /* first bucket of this step started */
	char *snap;           /* the data position at the step's start */
	ckpt_job *job;
	gk_nn_train_mem mem;
	char data_note[160];
	int cuda;                  /* the model is on the GPU */
	int dev;                   /* its CUDA device */
	char device[32];           /* "cpu", "cuda:N" */
	char device_note[sizeof(((gk_err *)0)->msg) + 32];
	char *init_from;      /* --init-from as rank 0 resolved it, once */
	const char *init_asked; /* ... and as given */
	char ckpt_note[PATH_MAX + 192]; /* rank 0: latest repaired, or "" */
	char model_from[PATH_MAX]; /* the checkpoint loaded, or "" */
	gk_nn_placement place;     /* this rank's CPUs (place_ranks) */
};

/* ---- small helpers ---------------------------------------------------------------- */

static int bcast_bytes(gk_nn_trainer *t, void *buf, size_t bytes, gk_err *err)
{
	if (t->world == 1)
		return 0;
	return gk_comm_broadcast(t->comm, buf, buf, bytes / 4, GK_DT_I32, 0, err);
}

/* Every rank's bytes-sized record into all (world * bytes). */
static int gather_bytes(gk_nn_trainer *t, const void *mine, void *all,
			size_t bytes, gk_err *err)
{
	if (t->world == 1) {
		memcpy(all, mine, bytes);
		return 0;
	}
	return gk_comm_allgather(t->comm, mine, all, bytes / 4, GK_DT_I32, NULL, err);
}

static int allreduce_f64(gk_nn_trainer *t, double *v, size_t n, gk_err *err)
{
	if (t->world == 1)
		return 0;
	return gk_comm_host_allreduce_f64(t->comm, v, n, GK_COMM_SUM, err);
}

/*
 * The data position as JSON, malloc'ed, or NULL without memory. It has no
 * fixed bound: a remapped epoch keeps every earlier rank's position.
 */
static char *data_state(const gk_nn_data *d)
{
	int n = gk_nn_data_state(d, NULL, 0);
	char *s = n < 0 ? NULL : malloc((size_t)n + 1);
	if (s)
		gk_nn_data_state(d, s, (size_t)n + 1);
	return s;
}

/* A step directory, a checkpoint root (its latest step) or another path. */
static char *resolve_step_dir(const char *path, gk_err *err)
{
	char *p = NULL, commit[PATH_MAX];
	uint64_t step;
	snprintf(commit, sizeof(commit), "%s/COMMIT", path);
	if (access(commit, F_OK) == 0)
		return strdup(path);
	int r = gk_ckpt_latest(path, &step, err);
	if (r < 0)
		return NULL;
	if (r == 0)
		return strdup(path);
	if (asprintf(&p, "%s/step-%08" PRIu64, path, step) < 0)
		return NULL;
	return p;
}

static int config_equal(const gk_nn_config *a, const gk_nn_config *b)
{
	return a->layers == b->layers && a->hidden == b->hidden && a->heads == b->heads &&
	       a->vocab == b->vocab && a->positions == b->positions;
}

/* ---- memory ------------------------------------------------------------------------ */

/*
 * The categories are those of mem-estimate for an f32 run: parameters,
 * gradients and AdamW's moments of the model's Psi parameters (sharded
 * by the world under ZeRO-1), so the two agree to the byte. What exists
 * only because the embedding is padded to vocab_pad rows (those rows in
 * the parameters, gradients and moments, the logits' extra columns) and
 * ZeRO-1's rounding of the flat buffer is "padding".
 */
static void account(gk_nn_trainer *t)
{
	gk_nn_mem mm;
	gk_nn_memory(t->m, &mm);
	uint64_t pad_rows = (uint64_t)(t->cfg.vocab_pad - t->cfg.vocab);
	uint64_t psi = (uint64_t)t->N - pad_rows * (uint64_t)t->cfg.hidden;
	uint64_t logit_es = t->cuda && t->o.precision == GK_NN_BF16 ? 2 : 4;
	uint64_t logit_pad = logit_es * pad_rows * (uint64_t)t->o.batch * (uint64_t)t->o.seq;
	uint64_t moments = (uint64_t)2 * (t->hi - t->lo) * sizeof(float);
	/* a GPU's working copy (bf16) counts as parameters; the allocator's
	 * rounding and the padded vocabulary's rows are padding */
	uint64_t work = t->cuda && t->o.precision == GK_NN_BF16 ? 2 * psi : 0;
	t->mem.parameters = 4 * psi + work;
	t->mem.gradients = 4 * psi;
	t->mem.optimizer = t->shard ? (uint64_t)llround(8.0 * (double)psi / t->world) : 8 * psi;
	t->mem.activations = mm.activations - logit_pad;
	t->mem.workspace = mm.workspace +
		(uint64_t)2 * (uint64_t)t->o.batch * (uint64_t)t->o.seq * sizeof(int32_t);
	t->mem.padding = (mm.parameters - t->mem.parameters) + (mm.gradients - t->mem.gradients) +
			 (moments - t->mem.optimizer) + logit_pad;
	t->mem.comm = 0;
	/* error feedback */
	if (t->grads && t->o.compress != GK_COMM_COMPRESS_NONE)
		t->mem.comm += (uint64_t)t->N * sizeof(float);
	if (t->resid)
		t->mem.comm += (uint64_t)t->Np * sizeof(float);
	t->mem.total = t->mem.parameters + t->mem.gradients + t->mem.optimizer +
		       t->mem.activations + t->mem.workspace + t->mem.padding + t->mem.comm;
}

const gk_nn_train_mem *gk_nn_trainer_mem(const gk_nn_trainer *t)
{
	return &t->mem;
}

/* ---- set-up ------------------------------------------------------------------------- */

int gk_nn_trainer_rank(const gk_nn_trainer *t)
{
	return t ? t->rank : 0;
}

int gk_nn_trainer_world(const gk_nn_trainer *t)
{
	return t ? t->world : 1;
}

const gk_nn_config *gk_nn_trainer_config(const gk_nn_trainer *t)
{
	return &t->cfg;
}

const gk_nn_train_opts *gk_nn_trainer_opts(const gk_nn_trainer *t)
{
	return &t->o;
}

const char *gk_nn_trainer_device(const gk_nn_trainer *t, const char **note)
{
	if (note)
		*note = t->device_note[0] ? t->device_note : NULL;
	return t->device;
}

const char *gk_nn_trainer_comm(const gk_nn_trainer *t, const char **note)
{
	if (note)
		*note = t->comm_note[0] ? t->comm_note : NULL;
	return gk_comm_backend_name(gk_comm_backend_of(t->gcomm ? t->gcomm : t->comm));
}

const char *gk_nn_trainer_ckpt_note(const gk_nn_trainer *t)
{
	return t->ckpt_note[0] ? t->ckpt_note : NULL;
}

const char *gk_nn_trainer_model_from(const gk_nn_trainer *t)
{
	return t->model_from[0] ? t->model_from : NULL;
}

const gk_nn_placement *gk_nn_trainer_placement(const gk_nn_trainer *t)
{
	return &t->place;
}

gk_nn_model *gk_nn_trainer_model(gk_nn_trainer *t)
{
	return t->m;
}

int gk_nn_trainer_failed(const gk_nn_trainer *t, int *report)
{
	*report = !t || !t->agreed || t->rank == t->reporter;
	return t && t->agreed ? t->agreed : 1;
}

void gk_nn_trainer_abort(gk_nn_trainer *t, int code)
{
	if (t && t->comm && !t->agreed)
		gk_comm_abort(t->comm, code);
}

static int shape_error(const char *dir, const gk_nn_config *ck, const gk_nn_config *want,
		       gk_err *err)
{
	return gk_errf(err, "checkpoint '%s': its model (%" PRId64 " layers, hidden %" PRId64
		       ", %" PRId64 " heads, vocab %" PRId64 ", %" PRId64
		       " positions) is not the one asked for (%" PRId64 ", %" PRId64
		       ", %" PRId64 ", %" PRId64 ", %" PRId64 ")",
		       dir, ck->layers, ck->hidden, ck->heads, ck->vocab, ck->positions,
		       want->layers, want->hidden, want->heads, want->vocab, want->positions);
}

/* 1 when lib/ckpt can open in as a checkpoint, else 0 with its reason
 * (which says why better than a missing config.json does) */
static int ckpt_readable(const char *in, gk_err *err)
{
	gk_ckpt_set *s;
	char *v[] = {(char *)in};
	if (gk_ckpt_open(&s, v, 1, err) < 0)
		return 0;
	gk_ckpt_close(s);
	return 1;
}

/*
 * The model's shape: the checkpoint's config.json (resumed, or beside
 * --init-from) with the shape flags over it; --config must agree with it;
 * without a checkpoint config, --config or the flags over GPT-2 small.
 */
static int choose_config(gk_nn_trainer *t, const char *resume_dir, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	char path[PATH_MAX];
	gk_nn_config from = {0};
	int have_from = 0, rc = 0;
	const char *dir = resume_dir;
	char *init = NULL;
	if (!dir && o->init_from) {
		struct stat st;
		int found = stat(o->init_from, &st) == 0;
		if (found && S_ISDIR(st.st_mode)) {
			if (!(init = resolve_step_dir(o->init_from, err)))
				return -1;
			dir = init;
		} else if (found && S_ISREG(st.st_mode)) {
			/* a safetensors file: the config.json beside it, as
			 * in a step or Hugging Face directory */
			const char *slash = strrchr(o->init_from, '/');
			size_t n = slash == o->init_from ? 1 : (size_t)(slash - o->init_from);
			if (!(init = slash ? strndup(o->init_from, n) : strdup(".")))
				return gk_err_sys(err, ENOMEM, "read '%s'", o->init_from);
			dir = init;
		}
	}
	if (dir) {
		snprintf(path, sizeof(path), "%s/config.json", dir);
		if (access(path, F_OK) == 0) {
			if (gk_nn_config_load(&from, path, err) < 0) {
				free(init);
				return -1;
			}
			have_from = 1;
		}
	}
	if (have_from && (!o->have_config || o->cfg_from_flags)) {
		t->cfg = from;
		const gk_nn_config *f = &o->shape;
		if (f->layers) t->cfg.layers = f->layers;
		if (f->hidden) t->cfg.hidden = f->hidden;
		if (f->heads) t->cfg.heads = f->heads;
		if (f->vocab) t->cfg.vocab = f->vocab;
		if (f->positions) t->cfg.positions = f->positions;
		if (gk_nn_config_finish(&t->cfg, err) < 0)
			rc = -1;
		else if (!config_equal(&t->cfg, &from))
			rc = shape_error(dir, &from, &t->cfg, err);
	} else if (o->have_config) {
		t->cfg = o->cfg;
		if (gk_nn_config_finish(&t->cfg, err) < 0)
			rc = -1;
		else if (have_from && !config_equal(&t->cfg, &from))
			rc = shape_error(dir, &from, &t->cfg, err);
	} else {
		/* --init-from alone: its config.json is the only shape there is */
		struct stat st;
		if (!o->init_from)
			rc = gk_errf(err, "no model: give a config, the shape, or a checkpoint "
				     "to start from");
		else if (stat(o->init_from, &st) < 0)
			rc = gk_err_sys(err, errno, "open '%s'", o->init_from);
		else if (S_ISDIR(st.st_mode) && !ckpt_readable(o->init_from, err))
			rc = -1; /* a root without a committed step, an unfinished step */
		else
			rc = gk_errf(err, "no model: '%s' has no config.json%s; give --config or "
				     "the shape flags", o->init_from, S_ISDIR(st.st_mode) ? "" : " beside it");
	}
	free(init);
	return rc;
}

/* Read this rank's range of the moments from a checkpoint's optimizer files. */
static int load_moments(gk_nn_trainer *t, const char *dir, gk_err *err)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return gk_err_sys(err, errno, "open checkpoint '%s'", dir);
	gk_strlist files = {0};
	struct dirent *de;
	int rc = -1;
	while ((de = readdir(dp))) {
		size_t l = strlen(de->d_name);
		if (!strncmp(de->d_name, "optim", 5) && l > 12 &&
		    !strcmp(de->d_name + l - 12, ".safetensors")) {
			char *p;
			if (asprintf(&p, "%s/%s", dir, de->d_name) < 0 ||
			    gk_strlist_push_owned(&files, p, err) < 0) {
				closedir(dp);
				gk_strlist_free(&files);
				return gk_err_sys(err, ENOMEM, "open checkpoint '%s'", dir);
			}
		}
	}
	closedir(dp);
	if (!files.n) {
		gk_strlist_free(&files);
		return gk_errf(err, "checkpoint '%s': no optimizer files (optim*.safetensors)", dir);
	}
	gk_ckpt_set *s;
	if (gk_ckpt_open(&s, files.v, files.n, err) < 0) {
		gk_strlist_free(&files);
		return -1;
	}
	const char *names[2] = {"m", "v"};
	float *dst[2] = {t->mom, t->vel};
	size_t hi = t->hi < t->N ? t->hi : t->N;
	for (int k = 0; k < 2; k++) {
		const gk_ckpt_entry *e = NULL;
		for (size_t i = 0; i < s->n; i++)
			if (!strcmp(s->e[i].name, names[k]))
				e = &s->e[i];
		if (!e || e->dtype != GK_DT_F32 || e->ndim != 1 || e->shape[0] != t->N) {
			gk_errf(err, "checkpoint '%s': optimizer state '%s' is missing or not %zu f32 values (a checkpoint of another model?)",
				dir, names[k], t->N);
			goto out;
		}
		for (size_t p = 0; p < e->nparts; p++) {
			const gk_ckpt_part *pt = &e->parts[p];
			uint64_t a = pt->row0 > t->lo ? pt->row0 : t->lo;
			uint64_t b = pt->row0 + pt->rows < hi ? pt->row0 + pt->rows : hi;
			if (a >= b)
				continue;
			if (gk_st_read(s->files[pt->file], pt->t, (a - pt->row0) * 4,
				       dst[k] + (a - t->lo), (size_t)(b - a) * 4, err) < 0)
				goto out;
		}
	}
	rc = 0;
out:
	gk_ckpt_close(s);
	gk_strlist_free(&files);
	return rc;
}

static int data_open(gk_nn_trainer *t, gk_nn_data **d, const char *src, int loop,
		     int shuffle, gk_err *err)
{
	gk_nn_data_opts dop = {.rank = t->rank, .world = t->world, .shuffle = shuffle,
			       .seed = t->o.seed, .vocab = t->cfg.vocab, .eot = t->o.eot,
			       .batch = t->o.batch, .seq = t->o.seq, .loop = loop,
			       .skip_bad = t->o.skip_bad, .note = t->o.data_note,
			       .note_ctx = t->o.data_note_ctx};
	return gk_nn_data_open(d, src, &dop, err);
}

/*
 * A failure that nfail ranks met (every rank knows nfail; mine is this
 * rank's error, or NULL): every rank fails with it and exits cleanly,
 * and the first failing rank says why, once for the job.
 */
static int agreed_failure(gk_nn_trainer *t, double nfail, const gk_err *mine,
			  gk_err *err)
{
	double first = mine ? t->rank : t->world;
	if (t->world > 1 &&
	    gk_comm_host_allreduce_f64(t->comm, &first, 1, GK_COMM_MIN, err) < 0)
		return -1;
	t->agreed = 1;
	t->reporter = (int)first;
	if (!mine)
		return gk_errf(err, "rank %d failed", t->reporter);
	if (t->world > 1)
		return gk_errf(err, "%s (%g of %d ranks)", mine->msg, nfail, t->world);
	return gk_errf(err, "%s", mine->msg);
}

/*
 * After work each rank does alone (reading files, allocating), whether
 * any failed (rc < 0 here, with err): a failure that every rank meets,
 * such as a dataset too small for the world, is said once for the job,
 * and one rank's is the job's, without an abort.
 */
static int agree_local(gk_nn_trainer *t, int rc, gk_err *err)
{
	gk_err mine = *err;
	double n = rc < 0;
	if (allreduce_f64(t, &n, 1, err) < 0)
		return -1;
	if (n == 0)
		return 0;
	if (t->world == 1) {
		t->agreed = 1;
		return -1;
	}
	return agreed_failure(t, n, rc < 0 ? &mine : NULL, err);
}

/*
 * --data (and --val-data) is the same string on every rank
 * (agree_options), but hosts with copies of their own may hold other
 * files under it: ranks that see other shard lists or token files of
 * other lengths split the data differently, some samples trained twice
 * and others never, without a word. Compare what they opened.
 */
static int agree_data(gk_nn_trainer *t, const gk_nn_data *d, const char *src, gk_err *err)
{
	if (t->world == 1)
		return 0;
	uint64_t id = gk_nn_data_identity(d);
	double lo[2] = {(double)(id >> 32), (double)(id & UINT32_MAX)}, hi[2] = {lo[0], lo[1]};
	if (gk_comm_host_allreduce_f64(t->comm, lo, 2, GK_COMM_MIN, err) < 0 ||
	    gk_comm_host_allreduce_f64(t->comm, hi, 2, GK_COMM_MAX, err) < 0)
		return -1;
	if (lo[0] == hi[0] && lo[1] == hi[1])
		return 0;
	t->agreed = 1;
	return gk_errf(err, "data '%s': the ranks see different files (shard names or sample "
		       "counts, or token file lengths): every rank must read the same data", src);
}

/*
 * --val-data is first read at the first --eval-every step, or after the
 * last step: one that cannot be opened, or that holds no whole
 * micro-batch on any rank, would end the run there, with the steps since
 * the last checkpoint lost. Look at it before step 1 instead.
 */
static int check_val_data(gk_nn_trainer *t, gk_err *err)
{
	gk_nn_data *d = NULL;
	int r = data_open(t, &d, t->o.val_data, 0, 0, err);
	if (r == 0)
		r = gk_nn_data_next(d, t->in, t->tg, err);
	if (agree_local(t, r < 0 ? -1 : 0, err) < 0) {
		gk_nn_data_close(d);
		return -1;
	}
	if (agree_data(t, d, t->o.val_data, err) < 0)
		r = -1;
	gk_nn_data_close(d);
	if (r < 0)
		return -1;
	double n = r;
	if (allreduce_f64(t, &n, 1, err) < 0)
		return -1;
	if (n > 0)
		return 0;
	t->agreed = 1;
	return gk_errf(err, "evaluate '%s': not one whole micro-batch of %d x %d tokens",
		       t->o.val_data, t->o.batch, t->o.seq + 1);
}

/* Restore step, data position and moments from a step directory. */
/*
 * Check the COMMIT behind a checkpoint input (a step directory's sizes and
 * XXH3 of every file; other inputs have none) before trusting it: rank 0
 * reads it once, and the ranks agree on the outcome.
 */
/*
 * Before step 1, not at the first checkpoint: rank 0 creates --ckpt-dir
 * and claims it (one writer at a time; the litter of killed writers
 * removed), and the ranks agree on the outcome.
 */
/*
 * A training run writes step directories after the one it starts from
 * (the latest committed with --resume, else none): a directory already
 * there would make a checkpoint fail after the steps before it were
 * trained, or leave two runs' steps side by side, so it is refused now.
 * Except what a run killed between committing a step and moving latest
 * leaves: committed steps above latest that continue it (by their
 * COMMIT's parent) are this run's, and latest is moved on to them.
 */
static int check_steps_ahead(gk_nn_trainer *t, gk_err *err)
{
	const char *root = t->o.ckpt_dir;
	uint64_t start = 0, next, from;
	int is_committed, r;
	if (t->o.resume) {
		if ((r = gk_ckpt_repair_latest(root, &from, &start, err)) < 0)
			return -1;
		if (r == 1)
			snprintf(t->ckpt_note, sizeof(t->ckpt_note),
				 "checkpoint directory '%s': latest named step-%08" PRIu64
				 ", and step-%08" PRIu64 " continues it (a run killed before "
				 "it moved latest): latest now names step-%08" PRIu64,
				 root, from, start, start);
		if (gk_ckpt_latest(root, &start, err) < 0)
			return -1;
	}
	r = gk_ckpt_next_after(root, start, &next, &is_committed, err);
	if (r <= 0)
		return r;
	if (!t->o.resume && is_committed)
		return gk_errf(err, "checkpoint directory '%s' holds another run's checkpoints "
			       "(step-%08" PRIu64 "): --resume continues it; or use another "
			       "--ckpt-dir", root, next);
	return gk_errf(err, "checkpoint directory '%s': step-%08" PRIu64 "%s is ahead of "
		       "step %" PRIu64 ", where this run starts, and would collide with its "
		       "checkpoints; move it (and any later step) out of the directory",
		       root, next, is_committed ? "" : " (not committed: no COMMIT)", start);
}

/*
 * Every rank writes its part of each checkpoint into --ckpt-dir, so it
 * must be one directory for all: a path local to each host (or each
 * rank's working directory) would fail only at the first checkpoint,
 * after the steps before it were trained. Each rank reads rank 0's lock
 * file ("pid N on HOST", synced, so an NFS client sees it) and compares
 * it with what rank 0 wrote. A file system without flock leaves it
 * empty: nothing to compare.
 */
static int check_shared(gk_nn_trainer *t, gk_err *err)
{
	char want[64] = {0}, got[64] = {0}, path[PATH_MAX];
	if (t->world == 1)
		return 0;
	if (t->rank == 0 && (fsync(t->lock) < 0 || pread(t->lock, want, sizeof(want) - 1, 0) < 0))
		want[0] = '\0';
	if (bcast_bytes(t, want, sizeof(want), err) < 0)
		return -1;
	if (!want[0])
		return 0;
	int rc = 0;
	if (t->rank != 0) {
		snprintf(path, sizeof(path), "%s/.lock", t->o.ckpt_dir);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || pread(fd, got, sizeof(got) - 1, 0) < 0 || strcmp(got, want) != 0)
			rc = gk_errf(err, "checkpoint directory '%s': not the one rank 0 writes "
				     "(every rank writes its part of each checkpoint there: it "
				     "must be one directory shared by all ranks)", t->o.ckpt_dir);
		if (fd >= 0)
			close(fd);
	}
	return agree_local(t, rc, err);
}

static int claim_ckpt_dir(gk_nn_trainer *t, gk_err *err)
{
	gk_err mine = {0};
	int bad = 0;
	if (t->rank == 0) {
		t->lock = gk_ckpt_lock(t->o.ckpt_dir, &mine);
		bad = t->lock < 0 || (!t->o.eval_only && check_steps_ahead(t, &mine) < 0);
	}
	double v = bad;
	if (allreduce_f64(t, &v, 1, err) < 0)
		return -1;
	if (bad) {
		*err = mine;
		return -1;
	}
	if (v > 0)
		return gk_errf(err, "checkpoint directory '%s': rank 0 cannot use it",
			       t->o.ckpt_dir);
	return check_shared(t, err);
}

/*
 * --init-from ROOT/latest (or ROOT) names whatever step is newest when it
 * is looked at, and a writer may move it on between reading config.json,
 * checking COMMIT and loading the tensors: rank 0 resolves it to one step
 * directory once, for every use and every rank.
 */
static int resolve_init_from(gk_nn_trainer *t, gk_err *err)
{
	char buf[PATH_MAX] = {0}, *r = NULL;
	if (t->rank == 0 && gk_ckpt_resolve(t->o.init_from, &r, NULL) == 0 &&
	    strlen(r) < sizeof(buf))
		snprintf(buf, sizeof(buf), "%s", r);
	free(r);
	if (bcast_bytes(t, buf, sizeof(buf), err) < 0)
		return -1;
	/* unresolved (no memory, too long): as given */
	if (buf[0] && !(t->init_from = strdup(buf)))
		return gk_err_sys(err, ENOMEM, "--init-from");
	t->init_asked = t->o.init_from;
	if (t->init_from)
		t->o.init_from = t->init_from;
	return 0;
}

/*
 * A failure reading --init-from: when it named a root or ROOT/latest and
 * the step it resolved to is gone by now, ckpt-prune (which keeps the
 * newest) removed it under us; say that rather than the ENOENT of
 * whichever file went first. Returns -1.
 */
static int init_gone(const gk_nn_trainer *t, gk_err *err)
{
	struct stat st;
	if (t->init_from && t->init_asked && strcmp(t->init_from, t->init_asked) != 0 &&
	    stat(t->init_from, &st) < 0 && errno == ENOENT)
		gk_errf(err, "checkpoint '%s' (what '%s' named): removed while being read "
			"(by ckpt-prune?); run again to read the newest", t->init_from,
			t->init_asked);
	return -1;
}

/* Work rank 0 does alone, in a thread (rank0_alone). */
typedef struct alone {
	int (*fn)(gk_nn_trainer *t, const char *arg, gk_err *err);
	gk_nn_trainer *t;
	const char *arg;
	gk_err err;
	int rc;
	atomic_int done;
} alone;

static void *alone_main(void *p)
{
	alone *a = p;
	a->rc = a->fn(a->t, a->arg, &a->err);
	atomic_store(&a->done, 1);
	return NULL;
}

/*
 * fn, run by rank 0 alone while the others wait for its outcome. A long
 * one (hashing a large checkpoint on a slow filesystem) would keep them
 * in one collective past --timeout, and the job would end as a stopped
 * rank; so rank 0 runs it in a thread and every rank agrees every 100 ms
 * whether it is done, as the checkpoint writes do. Returns on every rank
 * 0 when fn succeeded, 1 when it failed (rank 0's *mine says why), or -1.
 */
static int rank0_alone(gk_nn_trainer *t, int (*fn)(gk_nn_trainer *, const char *, gk_err *),
		       const char *arg, gk_err *mine, gk_err *err)
{
	alone a = {.fn = fn, .t = t, .arg = arg};
	pthread_t th;
	int threaded = 0;
	if (t->rank == 0) {
		threaded = t->world > 1 && pthread_create(&th, NULL, alone_main, &a) == 0;
		if (!threaded)
			alone_main(&a);
	}
	int rc = 0;
	for (;;) {
		for (int i = 0; threaded && i < 100 && !atomic_load(&a.done); i++)
			usleep(1000);
		double v = t->rank != 0 || atomic_load(&a.done);
		if (gk_comm_host_allreduce_f64(t->comm, &v, 1, GK_COMM_MIN, err) < 0) {
			rc = -1;
			break;
		}
		if (v >= 1)
			break;
	}
	if (threaded)
		pthread_join(th, NULL);
	if (rc < 0)
		return -1;
	double bad = t->rank == 0 && a.rc < 0;
	if (allreduce_f64(t, &bad, 1, err) < 0)
		return -1;
	if (t->rank == 0 && a.rc < 0)
		*mine = a.err;
	return bad > 0;
}

static int verify_input(gk_nn_trainer *t, const char *in, gk_err *err)
{
	if (t->o.ckpt_delay_ms > 0) /* tests: a slow filesystem */
		usleep((useconds_t)t->o.ckpt_delay_ms * 1000);
	return gk_ckpt_verify_input(in, err);
}

static int verify_ckpt(gk_nn_trainer *t, const char *in, gk_err *err)
{
	gk_err mine = {0};
	int bad = rank0_alone(t, verify_input, in, &mine, err);
	if (bad <= 0)
		return bad;
	if (t->rank == 0) {
		*err = mine;
		return -1;
	}
	return gk_errf(err, "checkpoint '%s': rank 0 found it damaged", in);
}

/* Resume from step directory dir, which lib/ckpt committed as step want. */
static int resume_from(gk_nn_trainer *t, const char *dir, uint64_t want, gk_err *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/trainer.json", dir);
	/*
	 * Its COMMIT vouched for it. A remapped epoch's data states carry
	 * the old world's positions on every rank of the new, so the file
	 * grows as old world x new world (about 76 MiB from 2100 ranks to
	 * 2099): the limit only stops a file no run writes.
	 */
	json_t *j = gk_json_load_file(path, (size_t)1 << 30, err);
	if (!j)
		return -1;
	int rc = -1;
	int64_t step, world, tokens, skipped = 0, version, np;
	const char *format;
	json_t *ds = json_object_get(j, "data");
	if (gk_json_get_str(j, "format", &format, err) < 0 ||
	    gk_json_get_int(j, "version", &version, err) < 0 ||
	    gk_json_get_int(j, "nparams", &np, err) < 0)
		goto out;
	if (strcmp(format, "gpu-train") || version != 1) {
		gk_errf(err, "read '%s': format '%s' version %" PRId64 " (this gpu-train reads "
			"'gpu-train' version 1)", path, format, version);
		goto out;
	}
	if (np != (int64_t)t->N) {
		gk_errf(err, "read '%s': %" PRId64 " parameters; this model has %zu", path, np, t->N);
		goto out;
	}
	if (gk_json_get_int(j, "step", &step, err) < 0 ||
	    gk_json_get_int(j, "world", &world, err) < 0 ||
	    gk_json_get_int(j, "tokens", &tokens, err) < 0)
		goto out;
	json_t *sk = json_object_get(j, "skipped");
	if (json_is_integer(sk))
		skipped = json_integer_value(sk);
	if (step < 0 || (uint64_t)step != want || tokens < 0 || skipped < 0 || skipped > step) {
		gk_errf(err, "read '%s': step %" PRId64 ", tokens %" PRId64 ", skipped %" PRId64
			" do not describe checkpoint step %" PRIu64, path, step, tokens, skipped, want);
		goto out;
	}
	if (!json_is_array(ds) || json_array_size(ds) != (size_t)world || world < 1) {
		gk_errf(err, "read '%s': 'data' is not one state per rank", path);
		goto out;
	}
	if (gk_nn_load(t->m, dir, err) < 0 || load_moments(t, dir, err) < 0)
		goto out;
	if (t->data) {
		json_t *mine = json_array_get(ds, world == t->world ? (size_t)t->rank : 0);
		char *s = json_dumps(mine, JSON_COMPACT);
		if (!s) {
			gk_err_sys(err, ENOMEM, "read '%s'", path);
			goto out;
		}
		if (world != t->world && !gk_nn_data_is_bin(t->data)) {
			free(s);
			const char **all = calloc((size_t)world, sizeof(*all));
			char **own = calloc((size_t)world, sizeof(*own));
			int r = all && own ? 0 : gk_err_sys(err, ENOMEM, "read '%s'", path);
			for (int64_t k = 0; r == 0 && k < world; k++) {
				own[k] = json_dumps(json_array_get(ds, (size_t)k), JSON_COMPACT);
				all[k] = own[k];
				if (!own[k])
					r = gk_err_sys(err, ENOMEM, "read '%s'", path);
			}
			if (r == 0)
				r = gk_nn_data_restore_world(t->data, all, (size_t)world, err);
			for (int64_t k = 0; own && k < world; k++)
				free(own[k]);
			free(own);
			free(all);
			if (r < 0)
				goto out;
			snprintf(t->data_note, sizeof(t->data_note),
				 "data position remapped from %" PRId64 " ranks to %d", world, t->world);
		} else {
			int r = gk_nn_data_restore(t->data, s, err);
			free(s);
			if (r < 0)
				goto out;
		}
	}
	t->step = step;
	t->tokens = (uint64_t)tokens;
	t->skipped = skipped;
	rc = 0;
out:
	if (rc < 0)
		gk_err_prefix(err, "resume from '%s'", dir);
	json_decref(j);
	return rc;
}

/*
 * Where the ranks run, from every rank's host and CPU set (one
 * allgather): t->place, and --threads' default, this rank's share of
 * its CPUs. Ranks share CPUs when they run on one kernel (its boot id:
 * containers of one machine share it, whatever their host names) and
 * their sets meet; they are on one host, for --overlap, when they share
 * the kernel and the host name (network namespaces given names of their
 * own stand for hosts in the tests). A host name alone would merge
 * machines that share one, as containers started from one image may.
 * A launcher that binds each rank to its own cores (mpirun
 * with 2 ranks, srun --cpu-bind) gives every rank its set alone; mpirun
 * binds to a whole socket beyond 2 ranks, and --bind-to none leaves
 * every rank all of the host, so a set can be shared by several ranks
 * of the host, and each taking all of it would put several threads on
 * every CPU (2 ranks of 2 threads on 2 CPUs: half the speed of 1 each).
 */
typedef struct rank_place {
	uint64_t kernel;                       /* hash of the boot id */
	uint64_t host;                         /* hash of boot id and host name */
	int32_t threads;                       /* --threads, 0: the default */
	uint32_t cpus[CPU_SETSIZE / 32];       /* the CPU set, as bits */
} rank_place;

static int set_overlaps(const rank_place *a, const rank_place *b)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(a->cpus); i++)
		if (a->cpus[i] & b->cpus[i])
			return 1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int place_ranks(gk_nn_trainer *t, gk_err *err)
{
	rank_place me;
	memset(&me, 0, sizeof(me)); /* padding too: the bytes go to every rank */
	me.threads = t->o.threads > 0 ? t->o.threads : 0;
	/* "<boot id>\n<host name>"; without a boot id the host name stands
	 * for the kernel too */
	char id[512] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (!fgets(id, 64, f))
			id[0] = '\0';
		fclose(f);
	}
	size_t n = strcspn(id, "\n");
	id[n] = '\n';
	gethostname(id + n + 1, sizeof(id) - n - 2);
	me.host = gk_xxh3(id, strlen(id));
	me.kernel = n > 0 ? gk_xxh3(id, n) : me.host;
	cpu_set_t set;
	gk_cpu_set(&set);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			me.cpus[c / 32] |= 1u << (c % 32);
	rank_place *all = calloc((size_t)t->world, sizeof(*all));
	if (!all)
		return gk_err_sys(err, ENOMEM, "placement");
	if (gather_bytes(t, &me, all, sizeof(me), err) < 0) {
		free(all);
		return -1;
	}
	/*
	 * The ranks of this kernel whose sets meet this one's, and their
	 * threads: those given, and how many take the default share. (A
	 * cgroup's CPU quota caps the count, gk_cpus_usable: the ranks of
	 * one container share its quota as they share its CPUs.)
	 */
	gk_nn_placement *p = &t->place;
	memset(p, 0, sizeof(*p));
	p->cpus = gk_cpus_usable(&p->quota);
	int given = 0, defaults = 0;
	for (int r = 0; r < t->world; r++) {
		const rank_place *q = &all[r];
		if (q->kernel == me.kernel && set_overlaps(q, &me)) {
			p->sharing++;
			given += q->threads;
			defaults += q->threads == 0;
		}
	}
	p->share = p->cpus / p->sharing; /* this rank is one of them */
	if (p->share < 1)
		p->share = 1;
	if (t->o.threads <= 0)
		t->o.threads = p->share;
	int busy = given + defaults * p->share;
	p->spare = p->cpus > busy ? p->cpus - busy : 0;
	/* the hosts: distinct ones, sorted (a world may be 100,000 ranks) */
	uint64_t *hs = malloc((size_t)t->world * sizeof(*hs));
	if (!hs) {
		free(all);
		return gk_err_sys(err, ENOMEM, "placement");
	}
	for (int r = 0; r < t->world; r++)
		hs[r] = all[r].host;
	qsort(hs, (size_t)t->world, sizeof(*hs), cmp_u64);
	for (int r = 0; r < t->world; r++)
		p->hosts += r == 0 || hs[r] != hs[r - 1];
	free(hs);
	free(all);
	return 0;
}

/*
 * The device of --device cpu|cuda|auto, the same on every rank: auto
 * falls back to the CPU with a note when a rank has no usable GPU, and a
 * job whose ranks disagree (some with a GPU, some without) runs on the
 * CPU (auto) or fails (cuda) rather than mixing backends.
 */
static int choose_device(gk_nn_trainer *t, gk_err *err)
{
	snprintf(t->device, sizeof(t->device), "cpu");
	if (t->o.device == GK_NN_CPU)
		return 0;
	int note = 0;
	gk_err why = {0};
	gk_cuda_want want = t->o.device == GK_NN_CUDA ? GK_CUDA_WANT_CUDA : GK_CUDA_WANT_AUTO;
	int r = gk_cuda_device_resolve(want, &note, &why);
	double v[2] = {r == 1, r < 0};
	if (allreduce_f64(t, v, 2, err) < 0)
		return -1;
	if (v[1] > 0)
		return agreed_failure(t, v[1], r < 0 ? &why : NULL, err);
	if (v[0] < t->world) {
		if (!note)
			snprintf(why.msg, sizeof(why.msg), "%d of %d ranks have no usable GPU",
				 t->world - (int)v[0], t->world);
		snprintf(t->device_note, sizeof(t->device_note), "%s; training on the CPU",
			 why.msg);
		return 0;
	}
	if (gk_cuda_device_select(-1, &t->dev, err) < 0)
		return -1;
	t->cuda = 1;
	snprintf(t->device, sizeof(t->device), "cuda:%d", t->dev);
	return 0;
}

/*
 * The gradients' communicator (--comm). On the CPU, and on a GPU with
 * --comm mpi, it is t->comm, over host memory. On a GPU with more than
 * one rank (or --comm nccl, in a world of one too) it is a communicator
 * of the nccl backend on this rank's device, on the model's stream. When
 * NCCL cannot start on some rank, every rank learns it here (a second
 * vote over t->comm, whatever the nccl bootstrap already agreed): auto
 * falls back to the host path with a note, nccl fails.
 */
static int open_grad_comm(gk_nn_trainer *t, gk_err *err)
{
	t->gcomm = t->comm;
	gk_comm_backend want = t->o.comm;
	if (!t->cuda) {
		if (want == GK_COMM_BACKEND_NCCL)
			return gk_errf(err, "--comm nccl reduces gradients on a GPU, and the "
				       "model is on the CPU%s%s", t->device_note[0] ? ": " : "",
				       t->device_note);
		return 0;
	}
	if (want == GK_COMM_BACKEND_MPI && t->o.zero && t->world > 1)
		return gk_errf(err, "--zero 1 on a GPU shards over NCCL: not with --comm mpi");
	if (want == GK_COMM_BACKEND_MPI || (want == GK_COMM_BACKEND_AUTO && t->world == 1))
		return 0;
	gk_comm_config cc = {.backend = GK_COMM_BACKEND_NCCL, .device = t->dev,
			     .timeout = t->o.timeout};
	gk_comm *g = NULL;
	gk_err why = {0};
	int ok = gk_comm_open(&g, &cc, &why) == 0 &&
		 gk_comm_set_stream(g, gk_nn_cuda_stream(t->m), &why) == 0;
	double v = ok;
	if (allreduce_f64(t, &v, 1, err) < 0) {
		gk_comm_close(g);
		return -1;
	}
	if (ok && v == t->world) {
		t->gcomm = g;
		t->dev_grads = 1;
		return 0;
	}
	gk_comm_close(g); /* NULL when it did not open */
	if (ok)
		snprintf(why.msg, sizeof(why.msg), "%d of %d ranks could not start NCCL",
			 t->world - (int)v, t->world);
	if (want == GK_COMM_BACKEND_NCCL)
		return gk_errf(err, "--comm nccl: %s", why.msg);
	if (t->o.zero)
		return gk_errf(err, "--zero 1 on a GPU shards over NCCL, and %s", why.msg);
	snprintf(t->comm_note, sizeof(t->comm_note),
		 "%s; gradients go through host memory over MPI", why.msg);
	return 0;
}

static uint64_t fbits(double x)
{
	uint64_t b;
	memcpy(&b, &x, sizeof b);
	return b;
}

/*
 * Every rank must train the same model on the same schedule: ranks
 * started with different options would size their buffers differently
 * and meet in collectives of different lengths (heap corruption inside
 * MPI), or stall in different ones, or drift apart silently. This is the
 * first collective after the world opens. What may differ: --threads and
 * --recompute (they change neither a value nor a collective), and the
 * options only rank 0 acts on (output, sampling).
 */
static int agree_options(const gk_nn_trainer *t, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	const gk_nn_config *c = &o->cfg;
	const gk_comm_setting f[] = {
		{"--config", (uint64_t)o->have_config},
		{"--layers", (uint64_t)c->layers}, {"--hidden", (uint64_t)c->hidden},
		{"--heads", (uint64_t)c->heads}, {"--vocab", (uint64_t)c->vocab},
		{"--positions", (uint64_t)c->positions}, {"layer_norm_epsilon", fbits(c->ln_eps)},
		{"--layers", (uint64_t)o->shape.layers}, {"--hidden", (uint64_t)o->shape.hidden},
		{"--heads", (uint64_t)o->shape.heads}, {"--vocab", (uint64_t)o->shape.vocab},
		{"--positions", (uint64_t)o->shape.positions},
		{"--init-from", gk_comm_setting_str(o->init_from)},
		{"--seed", o->seed},
		{"--data", gk_comm_setting_str(o->data)},
		{"--val-data", gk_comm_setting_str(o->val_data)},
		{"--shuffle", (uint64_t)o->shuffle}, {"--eot", (uint64_t)(uint32_t)o->eot},
		{"--batch", (uint64_t)o->batch}, {"--seq", (uint64_t)o->seq},
		{"--grad-accum", (uint64_t)o->grad_accum},
		{"--device", (uint64_t)o->device}, {"--precision", (uint64_t)o->precision},
		{"--schedule", (uint64_t)o->sched.kind}, {"--lr", fbits(o->sched.lr)},
		{"--min-lr", fbits(o->sched.min_lr)}, {"--warmup", (uint64_t)o->sched.warmup},
		{"--beta1", fbits(o->adamw.beta1)}, {"--beta2", fbits(o->adamw.beta2)},
		{"--eps", fbits(o->adamw.eps)}, {"--weight-decay", fbits(o->adamw.weight_decay)},
		{"--clip", fbits(o->clip)},
		{"--steps", (uint64_t)o->steps}, {"--until", (uint64_t)o->until},
		{"--zero", (uint64_t)o->zero}, {"--compress", (uint64_t)o->compress},
		{"--no-overlap", (uint64_t)o->overlap}, {"--bucket", (uint64_t)o->bucket_bytes},
		{"--comm", (uint64_t)o->comm}, {"--timeout", fbits(o->timeout)},
		{"--ckpt-dir", gk_comm_setting_str(o->ckpt_dir)},
		{"--ckpt-every", (uint64_t)o->ckpt_every}, {"--resume", (uint64_t)o->resume},
		{"--ckpt-error", (uint64_t)o->ckpt_continue},
		{"--eval-every", (uint64_t)o->eval_every},
		{"--eval-batches", (uint64_t)o->eval_batches},
		{"--eval-only", (uint64_t)o->eval_only},
		{"--skip-nonfinite", (uint64_t)o->skip_nonfinite},
		{"--bad-sample", (uint64_t)o->skip_bad},
	};
	return gk_comm_agree(t->comm, f, GK_ARRAY_SIZE(f),
			     "every rank must be started with the same options", err);
}

/* This rank's optimizer range [lo, hi) of the N parameters (not the padding). */
static size_t opt_lo(const gk_nn_trainer *t)
{
	return t->lo < t->N ? t->lo : t->N;
}

static size_t opt_hi(const gk_nn_trainer *t)
{
	return t->hi < t->N ? t->hi : t->N;
}

/*
 * ZeRO-1 reduces and gathers in place, in the model's flat buffers,
 * which it allocates with Np floats (gk_nn_opts.flat_multiple: the
 * world), so that rank r's range [r per, (r + 1) per) exists on every
 * rank even where it runs past the N parameters: the reduced gradients
 * land in the owner's own range of its gradient buffer, and each rank's
 * updated range is gathered from where it sits in its parameters into
 * everyone's. No copy of either buffer: with two (the reduced gradients
 * and the gathered parameters, 8 bytes a parameter) ZeRO-1 cost more
 * memory than the 8 (1 - 1/world) bytes a parameter that dividing the
 * moments saves, at every world size. Only compression adds a buffer: its
 * error feedback, Np floats, in host memory on the CPU and in device memory
 * from the gradients' communicator on a GPU (counted as comm memory).
 */
static int shard_buffers(gk_nn_trainer *t, gk_err *err)
{
	size_t bytes = t->Np * sizeof(float);
	if (t->o.compress == GK_COMM_COMPRESS_NONE)
		return 0;
	if (!t->cuda)
		return (t->resid = gk_alloc_big(bytes)) ? 0 :
			gk_err_sys(err, ENOMEM, "ZeRO-1 error feedback");
	float *zero = calloc(t->Np, sizeof(float));
	if (!zero)
		return gk_err_sys(err, ENOMEM, "ZeRO-1 error feedback");
	int rc = (t->resid = gk_comm_alloc(t->gcomm, bytes, err)) &&
		 gk_comm_to_device(t->gcomm, t->resid, zero, bytes, err) == 0 ? 0 : -1;
	free(zero);
	return rc;
}

/* the flat gradients the optimizer reads: the host's or the device's */
static float *flat_grads(gk_nn_trainer *t)
{
	return t->dev_grads ? gk_nn_cuda_grads(t->m) : gk_nn_grads(t->m);
}

int gk_nn_trainer_new(gk_nn_trainer **out, const gk_nn_train_opts *o,
		      gk_err *err)
{
	*out = NULL;
	gk_nn_trainer *t = calloc(1, sizeof(*t));
	if (!t)
		return gk_err_sys(err, ENOMEM, "trainer");
	t->o = *o;
	t->lock = -1;
	char *resume_dir = NULL;
	uint64_t resume_step = 0;
	if (t->o.grad_accum < 1)
		t->o.grad_accum = 1;
	gk_comm_config cc = {.backend = GK_COMM_BACKEND_AUTO, .timeout = o->timeout};
	if (gk_comm_open(&t->comm, &cc, err) < 0)
		goto fail;
	t->rank = gk_comm_rank(t->comm);
	t->world = gk_comm_world(t->comm);
	/*
	 * A rank that failed before the trainer still opened the world, to
	 * end it with the others: had it exited, they would wait for it in
	 * MPI's start-up (srun keeps a step whose task exited running, unless
	 * --kill-on-bad-exit).
	 */
	double nfail = o->failed != NULL;
	if (allreduce_f64(t, &nfail, 1, err) < 0)
		goto fail;
	if (nfail > 0) {
		agreed_failure(t, nfail, o->failed, err);
		goto fail;
	}
	if (agree_options(t, err) < 0) {
		t->agreed = 2;
		goto fail;
	}
	if (place_ranks(t, err) < 0)
		goto fail;
	/* --eval-only reads a checkpoint and writes none: nothing to claim */
	if (o->ckpt_dir && !o->eval_only && claim_ckpt_dir(t, err) < 0) {
		t->agreed = 1;
		goto fail;
	}
	if (o->init_from && resolve_init_from(t, err) < 0)
		goto fail;
	o = &t->o; /* with --init-from resolved */
	struct stat dst;
	if (o->resume && o->ckpt_dir && (stat(o->ckpt_dir, &dst) == 0 || errno != ENOENT)) {
		int r = gk_ckpt_latest(o->ckpt_dir, &resume_step, err);
		if (r < 0)
			goto fail;
		if (r == 1 && asprintf(&resume_dir, "%s/step-%08" PRIu64, o->ckpt_dir, resume_step) < 0) {
			gk_err_sys(err, ENOMEM, "resume");
			goto fail;
		}
	}
	/* a training job's first run finds nothing to resume and starts;
	 * an evaluation of nothing would print an untrained model's loss */
	if (o->eval_only && o->resume && !resume_dir) {
		gk_errf(err, "--eval-only --resume: no committed checkpoint in '%s'",
			o->ckpt_dir);
		t->agreed = 1;
		goto fail;
	}
	int rc = choose_config(t, resume_dir, err);
	if (rc < 0)
		init_gone(t, err);
	if (rc == 0 && t->o.seq <= 0)
		t->o.seq = (int)t->cfg.positions;
	if (rc == 0 && t->o.seq > t->cfg.positions)
		rc = gk_errf(err, "sequence length %d is longer than the model's %" PRId64
			     " positions", t->o.seq, t->cfg.positions);
	if (agree_local(t, rc, err) < 0)
		goto fail;
	if (choose_device(t, err) < 0)
		goto fail;
	/*
	 * On the CPU the allreduce is memory copies and sums by the ranks'
	 * own cores: while backward computes on every core, running it beside
	 * only makes the two compete (2 ranks of 1 thread on 2 CPUs: 1-7 %,
	 * median 2 %, fewer tokens a second than after backward). It
	 * overlaps where something else does the work: a GPU computing, a
	 * network between hosts, or a CPU the ranks' threads leave free.
	 */
	if (t->o.overlap == GK_NN_AUTO)
		t->o.overlap = t->cuda || t->place.hosts > 1 || t->place.spare > 0;
	gk_nn_opts mo = {.batch = t->o.batch, .seq = t->o.seq, .recompute = t->o.recompute,
			 .threads = t->o.threads, .device = t->cuda ? GK_NN_CUDA : GK_NN_CPU,
			 .precision = t->o.precision, .flat_multiple = t->o.zero ? t->world : 1};
	if (agree_local(t, gk_nn_new(&t->m, &t->cfg, &mo, err), err) < 0)
		goto fail;
	t->N = gk_nn_nparams(t->m);
	if (t->o.zero) {
		t->Np = (t->N + (size_t)t->world - 1) / (size_t)t->world * (size_t)t->world;
		size_t per = t->Np / (size_t)t->world;
		t->lo = (size_t)t->rank * per;
		t->hi = t->lo + per;
	} else {
		t->Np = t->N;
		t->lo = 0;
		t->hi = t->N;
	}
	t->mom = gk_alloc_big((t->hi - t->lo + 1) * sizeof(float));
	t->vel = gk_alloc_big((t->hi - t->lo + 1) * sizeof(float));
	t->in = malloc((size_t)t->o.batch * (size_t)t->o.seq * sizeof(int32_t));
	t->tg = malloc((size_t)t->o.batch * (size_t)t->o.seq * sizeof(int32_t));
	rc = !t->mom || !t->vel || !t->in || !t->tg ?
		     gk_err_sys(err, ENOMEM, "optimizer state") : 0;
	if (agree_local(t, rc, err) < 0)
		goto fail;
	if (!t->o.eval_only && t->o.data &&
	    (agree_local(t, data_open(t, &t->data, t->o.data, 1, t->o.shuffle, err), err) < 0 ||
	     agree_data(t, t->data, t->o.data, err) < 0))
		goto fail;
	if (!t->o.eval_only && t->o.val_data && check_val_data(t, err) < 0)
		goto fail;
	if (open_grad_comm(t, err) < 0)
		goto fail;
	t->shard = t->o.zero && (t->cuda ? t->dev_grads : t->world > 1);
	if (t->shard && shard_buffers(t, err) < 0)
		goto fail;
	/*
	 * Gradient buckets, overlapped with backward: allreduced, or with
	 * ZeRO-1 reduced to the ranks that own them, in place.
	 * Compressed ZeRO-1 keeps its one reduce-scatter after backward (its
	 * error feedback runs over the whole padded buffer).
	 */
	int sharded = t->shard && t->o.compress == GK_COMM_COMPRESS_NONE;
	if ((t->world > 1 || t->dev_grads) && (!t->shard || sharded)) {
		gk_comm_callopts co = {.compress = t->o.compress};
		float *g = flat_grads(t);
		if (gk_comm_grads_new(&t->grads, t->gcomm, g, t->N, t->o.bucket_bytes, &co,
				      err) < 0 ||
		    (sharded && gk_comm_grads_shard(t->grads, g, t->Np / (size_t)t->world,
						    err) < 0))
			goto fail;
	}
	if (resume_dir || o->init_from) {
		const char *from = resume_dir ? resume_dir : o->init_from;
		if (verify_ckpt(t, from, err) < 0) {
			t->agreed = 1;
			if (!resume_dir)
				init_gone(t, err);
			goto fail;
		}
		if (resume_dir ? resume_from(t, resume_dir, resume_step, err) < 0
			       : gk_nn_load(t->m, o->init_from, err) < 0) {
			if (!resume_dir)
				init_gone(t, err);
			goto fail;
		}
		snprintf(t->model_from, sizeof(t->model_from), "%s", from);
	} else {
		gk_nn_init(t->m, t->o.seed);
	}
	/*
	 * The initial broadcast, as PyTorch DDP's of its module states: each
	 * rank loaded or initialised its own parameters, and one whose host
	 * holds another copy of --init-from would train another model from
	 * here on, its loss averaged in, without a word. Rank 0's go to all;
	 * so do ZeRO-0's moments, replicated like them.
	 */
	float *p0 = gk_nn_params(t->m);
	if (t->world > 1 &&
	    (gk_comm_broadcast(t->comm, p0, p0, t->N, GK_DT_F32, 0, err) < 0 ||
	     (!t->o.zero && resume_dir &&
	      (gk_comm_broadcast(t->comm, t->mom, t->mom, t->N, GK_DT_F32, 0, err) < 0 ||
	       gk_comm_broadcast(t->comm, t->vel, t->vel, t->N, GK_DT_F32, 0, err) < 0))))
		goto fail;
	if (t->cuda && (gk_nn_cuda_upload(t->m, GK_NN_PARAMS, err) < 0 ||
			(resume_dir && gk_nn_cuda_moments(t->m, opt_lo(t), opt_hi(t), t->mom,
							  t->vel, 1, err) < 0)))
		goto fail;
	free(resume_dir);
	account(t);
	*out = t;
	return 0;
fail:
	free(resume_dir);
	*out = t; /* the caller can still abort the world */
	return -1;
}

/* ---- checkpoints ------------------------------------------------------------------- */

static int write_model(const ckpt_job *j, const char *path, gk_err *err)
{
	size_t n;
	const gk_nn_tensor *tt = gk_nn_tensors(j->t->m, &n);
	gk_st_spec *spec = calloc(n, sizeof(*spec));
	const void **data = calloc(n, sizeof(*data));
	uint64_t *shapes = calloc(2 * n, sizeof(uint64_t));
	if (!spec || !data || !shapes) {
		free(spec), free(data), free(shapes);
		return gk_err_sys(err, ENOMEM, "write '%s'", path);
	}
	for (size_t i = 0; i < n; i++) {
		shapes[2 * i] = (uint64_t)tt[i].shape[0];
		shapes[2 * i + 1] = (uint64_t)tt[i].shape[1];
		/* wte: the first vocab rows; the padded rows stay behind */
		spec[i] = (gk_st_spec){tt[i].name, GK_DT_F32, tt[i].ndim, shapes + 2 * i};
		data[i] = j->params + tt[i].off;
	}
	gk_st_kv meta[1] = {{"format", "pt"}};
	int rc = gk_st_save(path, spec, data, n, meta, 1, err);
	free(spec), free(data), free(shapes);
	return rc;
}

static int write_moments(const ckpt_job *j, const char *path, gk_err *err)
{
	const gk_nn_trainer *t = j->t;
	uint64_t shape[1] = {j->n};
	gk_st_spec spec[2] = {{"m", GK_DT_F32, 1, shape}, {"v", GK_DT_F32, 1, shape}};
	const void *data[2] = {j->m, j->v};
	char rank[16], world[16], slice[64];
	gk_st_kv meta[5] = {{"format", "pt"}};
	size_t nmeta = 1;
	if (t->o.zero && t->world > 1) {
		snprintf(rank, sizeof(rank), "%d", t->rank);
		snprintf(world, sizeof(world), "%d", t->world);
		snprintf(slice, sizeof(slice), "%zu:%zu/%zu", j->lo, j->lo + j->n, t->N);
		meta[nmeta++] = (gk_st_kv){GK_CKPT_META_RANK, rank};
		meta[nmeta++] = (gk_st_kv){GK_CKPT_META_WORLD, world};
		meta[nmeta++] = (gk_st_kv){GK_CKPT_META_SLICE "m", slice};
		meta[nmeta++] = (gk_st_kv){GK_CKPT_META_SLICE "v", slice};
	}
	return gk_st_save(path, spec, data, 2, meta, nmeta, err);
}

static int job_write(ckpt_job *j, gk_err *err)
{
	gk_nn_trainer *t = j->t;
	char *p = NULL;
	int rc = -1;
	if (t->o.ckpt_delay_ms > 0)
		usleep((useconds_t)t->o.ckpt_delay_ms * 1000);
	if (j->params) {
		if (!(p = gk_ckpt_stage_path(j->stage, GK_CKPT_SINGLE)) || write_model(j, p, err) < 0)
			goto out;
		free(p);
		if (!(p = gk_ckpt_stage_path(j->stage, "config.json")) ||
		    gk_nn_config_save(&t->cfg, p, err) < 0)
			goto out;
		free(p);
		if (!(p = gk_ckpt_stage_path(j->stage, "trainer.json")) ||
		    gk_atomic_write_file(p, j->trainer_json, strlen(j->trainer_json), 0644, err) < 0)
			goto out;
		free(p);
		p = NULL;
	}
	if (j->write_moments) {
		char *name = t->o.zero && t->world > 1 ? gk_ckpt_rank_file("optim", t->rank, t->world)
						       : strdup("optim.safetensors");
		if (!name)
			goto out;
		p = gk_ckpt_stage_path(j->stage, name);
		free(name);
		if (!p || write_moments(j, p, err) < 0)
			goto out;
	}
	rc = 0;
out:
	if (rc < 0 && !err->msg[0])
		gk_err_sys(err, ENOMEM, "checkpoint");
	free(p);
	return rc;
}

static void *job_main(void *arg)
{
	ckpt_job *j = arg;
	j->rc = job_write(j, &j->err);
	/* written: the copies of the state can go now */
	free(j->params), free(j->m), free(j->v), free(j->trainer_json);
	j->params = j->m = j->v = NULL;
	j->trainer_json = NULL;
	if (j->rc < 0 || j->t->rank != 0) {
		atomic_store(&j->state, j->rc < 0 ? JOB_FAILED : JOB_DONE);
		return NULL;
	}
	atomic_store(&j->state, JOB_WRITTEN);
	/* COMMIT hashes every rank's files: wait until they are all there. */
	pthread_mutex_lock(&j->mu);
	while (!j->go_commit)
		pthread_cond_wait(&j->cv, &j->mu);
	int go = j->go_commit;
	pthread_mutex_unlock(&j->mu);
	if (go > 0) {
		if (j->t->o.ckpt_delay_ms > 0) /* tests: a slow filesystem */
			usleep((useconds_t)j->t->o.ckpt_delay_ms * 1000);
		j->rc = gk_ckpt_stage_commit(j->stage, &j->err);
		if (j->rc == 0)
			j->stage = NULL;
	}
	atomic_store(&j->state, j->rc < 0 ? JOB_FAILED : JOB_DONE);
	return NULL;
}

static void job_free(ckpt_job *j)
{
	if (!j)
		return;
	if (j->stage) {
		if (j->t->rank == 0)
			gk_ckpt_stage_abort(j->stage);
		else
			gk_ckpt_stage_free(j->stage);
	}
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j->params);
	free(j->m);
	free(j->v);
	free(j->trainer_json);
	free(j);
}

/* states: every rank's data position, in slots of slot bytes */
static char *trainer_json(gk_nn_trainer *t, const char *states, size_t slot)
{
	json_t *j = json_object(), *d = json_array(), *c = json_object(), *s = json_object();
	json_object_set_new(j, "format", json_string("gpu-train"));
	json_object_set_new(j, "version", json_integer(1));
	json_object_set_new(j, "step", json_integer(t->step));
	json_object_set_new(j, "tokens", json_integer((json_int_t)t->tokens));
	json_object_set_new(j, "skipped", json_integer(t->skipped));
	json_object_set_new(j, "world", json_integer(t->world));
	json_object_set_new(j, "zero", json_integer(t->o.zero));
	json_object_set_new(j, "batch", json_integer(t->o.batch));
	json_object_set_new(j, "seq", json_integer(t->o.seq));
	json_object_set_new(j, "grad_accum", json_integer(t->o.grad_accum));
	json_object_set_new(j, "seed", json_integer((json_int_t)t->o.seed));
	json_object_set_new(j, "nparams", json_integer((json_int_t)t->N));
	json_object_set_new(c, "n_layer", json_integer(t->cfg.layers));
	json_object_set_new(c, "n_embd", json_integer(t->cfg.hidden));
	json_object_set_new(c, "n_head", json_integer(t->cfg.heads));
	json_object_set_new(c, "vocab_size", json_integer(t->cfg.vocab));
	json_object_set_new(c, "n_positions", json_integer(t->cfg.positions));
	json_object_set_new(j, "config", c);
	json_object_set_new(s, "kind", json_string(gk_nn_sched_name(t->o.sched.kind)));
	json_object_set_new(s, "lr", json_real(t->o.sched.lr));
	json_object_set_new(s, "min_lr", json_real(t->o.sched.min_lr));
	json_object_set_new(s, "warmup", json_integer(t->o.sched.warmup));
	json_object_set_new(s, "steps", json_integer(t->o.sched.steps));
	json_object_set_new(j, "schedule", s);
	for (int r = 0; r < t->world; r++)
		json_array_append_new(d, json_loads(states + (size_t)r * slot, 0, NULL));
	json_object_set_new(j, "data", d);
	char *out = json_dumps(j, JSON_INDENT(2));
	json_decref(j);
	return out;
}

/*
 * Rank 0's lock of the checkpoint root, taken again when the root (or its
 * .lock) was removed under the run: the next checkpoint recreates the
 * root, and unlocked it would let a second writer in. A writer that got
 * there meanwhile fails this checkpoint, as any write failure does.
 */
static int relock(gk_nn_trainer *t, gk_err *err)
{
	char path[PATH_MAX];
	struct stat held, now;
	snprintf(path, sizeof(path), "%s/.lock", t->o.ckpt_dir);
	if (t->lock >= 0 && fstat(t->lock, &held) == 0 && stat(path, &now) == 0 &&
	    held.st_dev == now.st_dev && held.st_ino == now.st_ino)
		return 0;
	int fd = gk_ckpt_lock(t->o.ckpt_dir, err);
	if (fd < 0)
		return -1;
	gk_ckpt_unlock(t->lock);
	t->lock = fd;
	return 0;
}

/*
 * Start writing checkpoint t->step: copy state, hand it to a thread. A
 * staging directory rank 0 cannot create (a disk so full that not even a
 * directory fits) fails the checkpoint on every rank at once, as a failed
 * write does: --ckpt-error continue warns and trains on.
 */
static int ckpt_start(gk_nn_trainer *t, gk_nn_train_hooks *h, gk_err *err)
{
	ckpt_job *j = calloc(1, sizeof(*j));
	if (!j)
		return gk_err_sys(err, ENOMEM, "checkpoint");
	j->t = t;
	j->step = t->step;
	j->t0 = gk_now();
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	char name[NAME_BYTES] = {0};
	int rc = 0;
	if (t->rank == 0) {
		rc = relock(t, err) < 0 ? -1 :
		     gk_ckpt_stage_begin(&j->stage, t->o.ckpt_dir, (uint64_t)t->step, err);
		if (rc == 0)
			snprintf(name, sizeof(name), "%s", gk_ckpt_stage_name(j->stage));
	}
	/* A failed begin on rank 0 is sent as an empty name. */
	if (bcast_bytes(t, name, sizeof(name), err) < 0) {
		job_free(j);
		return -1;
	}
	if (!name[0]) {
		job_free(j);
		if (rc == 0)
			gk_errf(err, "checkpoint '%s': rank 0 could not create the staging directory",
				t->o.ckpt_dir);
		/* every rank got the empty name: rank 0 has the reason, and says it */
		t->ckpt_lost = t->step;
		if (t->o.ckpt_continue) {
			if (h && h->checkpoint_failed && t->rank == 0)
				h->checkpoint_failed(t->step, err, h->ctx);
			return 0;
		}
		t->agreed = 1;
		return -1;
	}
	if (t->rank != 0 &&
	    gk_ckpt_stage_join(&j->stage, t->o.ckpt_dir, (uint64_t)t->step, name, err) < 0) {
		job_free(j);
		return -1;
	}
	/* Every rank's data position, in slots of the longest one's size
	 * (in whole 4-byte words, the unit the exchange counts). */
	char *state = t->data ? data_state(t->data) : strdup("null"), *mine = NULL, *all = NULL;
	if (!state) {
		job_free(j);
		return gk_err_sys(err, ENOMEM, "checkpoint");
	}
	double most = (double)strlen(state) + 1;
	if (t->world > 1 && gk_comm_host_allreduce_f64(t->comm, &most, 1, GK_COMM_MAX, err) < 0) {
		free(state);
		job_free(j);
		return -1;
	}
	size_t slot = ((size_t)most + 3) / 4 * 4;
	if ((mine = calloc(1, slot)) && (all = calloc((size_t)t->world, slot)))
		memcpy(mine, state, strlen(state) + 1);
	free(state);
	if (!all) {
		free(mine);
		job_free(j);
		return gk_err_sys(err, ENOMEM, "checkpoint");
	}
	int g = gather_bytes(t, mine, all, slot, err);
	free(mine);
	if (g < 0) {
		free(all);
		job_free(j);
		return -1;
	}
	j->lo = opt_lo(t);
	j->n = opt_hi(t) - j->lo;
	j->write_moments = t->o.zero ? 1 : t->rank == 0;
	if (t->cuda && ((t->rank == 0 && gk_nn_cuda_download(t->m, GK_NN_PARAMS, err) < 0) ||
			(j->write_moments &&
			 gk_nn_cuda_moments(t->m, j->lo, j->lo + j->n, t->mom, t->vel, 0, err) < 0))) {
		free(all);
		job_free(j);
		return -1;
	}
	if (t->rank == 0) {
		j->params = malloc(t->N * sizeof(float));
		j->trainer_json = trainer_json(t, all, slot);
		if (j->params)
			memcpy(j->params, gk_nn_params(t->m), t->N * sizeof(float));
	}
	free(all);
	if (j->write_moments) {
		j->m = malloc(j->n * sizeof(float) + 1);
		j->v = malloc(j->n * sizeof(float) + 1);
		if (j->m && j->v) {
			memcpy(j->m, t->mom, j->n * sizeof(float));
			memcpy(j->v, t->vel, j->n * sizeof(float));
		}
	}
	if ((t->rank == 0 && (!j->params || !j->trainer_json)) ||
	    (j->write_moments && (!j->m || !j->v))) {
		job_free(j);
		return gk_err_sys(err, ENOMEM, "checkpoint: copy of the state");
	}
	if (pthread_create(&j->th, NULL, job_main, j) != 0) {
		job_free(j);
		return gk_errf(err, "checkpoint: cannot start the writer thread");
	}
	t->job = j;
	return 0;
}

/* This rank's part of the counts ckpt_progress takes, to be summed. */
static void ckpt_counts(const gk_nn_trainer *t, double c[3])
{
	int st = t->job ? atomic_load(&t->job->state) : JOB_WRITING;
	c[0] = st == JOB_WRITTEN || st == JOB_DONE;
	c[1] = st == JOB_FAILED;
	c[2] = st == JOB_DONE;
}

/*
 * Move the pending checkpoint on, given c: how many ranks have written
 * their files, failed, and are done (ckpt_counts summed over the ranks,
 * so every rank takes the same turn). Once all have written, rank 0
 * commits; the job ends on every rank once all are done, or once one
 * has failed.
 */
static int ckpt_progress(gk_nn_trainer *t, const double c[3], gk_nn_train_hooks *h,
			 gk_err *err)
{
	ckpt_job *j = t->job;
	double written = c[0], failed = c[1], done = c[2];
	if (!j)
		return 0;
	if (!j->agreed && (failed > 0 || written >= t->world)) {
		j->agreed = 1;
		if (t->rank == 0) {
			pthread_mutex_lock(&j->mu);
			j->go_commit = failed > 0 ? -1 : 1;
			pthread_cond_signal(&j->cv);
			pthread_mutex_unlock(&j->mu);
		}
	}
	if (failed <= 0 && done < t->world)
		return 0;
	pthread_join(j->th, NULL);
	int rc = j->rc;
	/* A rank without an error of its own is not rank 0 failing its
	 * commit (that error is rank 0's): another rank's write failed. */
	if (rc < 0)
		*err = j->err;
	else if (failed > 0)
		gk_errf(err, "checkpoint step %" PRId64 ": another rank failed to write its files",
			j->step);
	int64_t step = j->step;
	double t0 = j->t0;
	job_free(j);
	t->job = NULL;
	t->ckpt_lost = rc < 0 || failed > 0 ? step : 0;
	if ((rc < 0 || failed > 0) && t->o.ckpt_continue) {
		/* Every rank agreed on the failure, so all go on. */
		if (h && h->checkpoint_failed && (rc < 0 || t->rank == 0))
			h->checkpoint_failed(step, err, h->ctx);
		return 0;
	}
	if (rc < 0 || failed > 0) {
		/* the job ends: the first rank that failed says why, once */
		gk_err mine = *err;
		return agreed_failure(t, failed, rc < 0 ? &mine : NULL, err);
	}
	if (h && h->checkpoint && t->rank == 0)
		h->checkpoint(step, gk_now() - t0, h->ctx);
	return 0;
}

/*
 * Finish the pending checkpoint on every rank. The ranks agree on its
 * progress at least every 100 ms while they wait: a rank that has much
 * more to do than the others (rank 0 writes the whole model, then hashes
 * every rank's files to commit) would otherwise keep them in one
 * collective for as long as that takes, and a write longer than
 * --timeout would end the job as a stopped rank.
 */
static int ckpt_finish(gk_nn_trainer *t, gk_nn_train_hooks *h, gk_err *err)
{
	while (t->job) {
		ckpt_job *j = t->job;
		/* wait for what this rank is doing: writing, or committing
		 * once every rank has written */
		int st = atomic_load(&j->state);
		int busy = st == JOB_WRITING || (st == JOB_WRITTEN && j->agreed);
		for (int i = 0; i < 100 && busy && atomic_load(&j->state) == st; i++)
			usleep(1000);
		double c[3];
		ckpt_counts(t, c);
		if (allreduce_f64(t, c, 3, err) < 0 || ckpt_progress(t, c, h, err) < 0)
			return -1;
	}
	return 0;
}

/* ---- the step ------------------------------------------------------------------------ */

static int ready_cb(size_t off, void *ctx, gk_err *err)
{
	gk_nn_trainer *t = ctx;
	if (t->comm_start == 0)
		t->comm_start = gk_now();
	return gk_comm_grads_ready(t->grads, off, err);
}

/*
 * Compressed ZeRO-1: this rank's range of the averaged gradients, in
 * place, after backward (compressed as --compress says, with error
 * feedback over the whole padded buffer; the other ranges are left
 * undefined, and the next step zeroes them). Uncompressed, the gradient
 * buckets reduce each range to its owner during backward instead.
 */
static int shard_reduce(gk_nn_trainer *t, gk_err *err)
{
	float *g = flat_grads(t);
	gk_comm_callopts co = {.compress = t->o.compress, .residual = t->resid};
	return gk_comm_reduce_scatter(t->gcomm, g, g + t->lo, t->Np / (size_t)t->world,
				      GK_DT_F32, GK_COMM_AVG, &co, err);
}

/* ZeRO-1: every rank's updated range into every rank's parameters, in
 * place. */
static int shard_gather(gk_nn_trainer *t, gk_err *err)
{
	size_t per = t->Np / (size_t)t->world;
	float *p = t->cuda ? gk_nn_cuda_params(t->m) : gk_nn_params(t->m);
	if (gk_comm_allgather(t->gcomm, p + t->lo, p, per, GK_DT_F32, NULL, err) < 0)
		return -1;
	return t->cuda ? gk_nn_cuda_params_changed(t->m, err) : 0;
}

/*
 * Whether a signal asks every rank to stop now (two values allreduced):
 * 1 checkpoint and stop, 2 stop, 0 go on, -1 error. Asked between the
 * micro-steps of a long accumulation, so that a signal does not wait for
 * the step's end, which Slurm's --signal grace period (often 60 to 120 s)
 * may not reach (the caller then drops the partial gradients and puts
 * the data back at the step's start, so what is checkpointed is the
 * previous step, exactly); and after waiting for a checkpoint write,
 * during which a signal may have come.
 */
static int agree_stop(gk_nn_trainer *t, gk_err *err)
{
	int sig = (int)*t->o.stop;
	double v[2] = {sig == 1, sig == 2};
	if (allreduce_f64(t, v, 2, err) < 0)
		return -1;
	return v[1] > 0 ? 2 : v[0] > 0;
}

static int eval_loss(gk_nn_trainer *t, const char *src, int64_t batches,
		     double *loss, int64_t *nb, gk_err *err)
{
	gk_nn_data *d;
	if (data_open(t, &d, src, 0, 0, err) < 0)
		return -1;
	if (agree_data(t, d, src, err) < 0) {
		gk_nn_data_close(d);
		return -1;
	}
	double acc[2] = {0, 0};
	int rc = 0;
	for (int64_t k = 0; batches <= 0 || k < batches; k++) {
		int r = gk_nn_data_next(d, t->in, t->tg, err);
		if (r < 0) {
			rc = -1;
			break;
		}
		if (r == 0)
			break;
		float l;
		if (gk_nn_forward(t->m, t->in, t->tg, &l, err) < 0) {
			rc = -1;
			break;
		}
		acc[0] += l;
		acc[1] += 1;
	}
	gk_nn_data_close(d);
	if (rc < 0)
		return -1;
	if (allreduce_f64(t, acc, 2, err) < 0)
		return -1;
	if (acc[1] == 0)
		return gk_errf(err, "evaluate '%s': not one whole micro-batch of %d x %d tokens",
			       src, t->o.batch, t->o.seq + 1);
	*loss = acc[0] / acc[1];
	*nb = (int64_t)acc[1];
	return 0;
}

int gk_nn_trainer_eval(gk_nn_trainer *t, const char *src, int64_t batches,
		       double *loss, int64_t *nbatches, gk_err *err)
{
	return eval_loss(t, src, batches, loss, nbatches, err);
}

int gk_nn_trainer_run(gk_nn_trainer *t, gk_nn_train_hooks *h,
		      gk_nn_train_summary *sum, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	float *params = gk_nn_params(t->m), *grads = gk_nn_grads(t->m);
	memset(sum, 0, sizeof(*sum));
	sum->first_step = t->step + 1;
	sum->data_note = t->data_note[0] ? t->data_note : NULL;
	sum->min_loss = INFINITY;
	double flops = gk_nn_flops(t->m);
	uint64_t step_tokens = (uint64_t)o->batch * (uint64_t)o->seq *
			       (uint64_t)o->grad_accum * (uint64_t)t->world;
	double t_run = gk_now(), loss = NAN;
	int64_t last_ckpt = -1;
	int host = t->cuda && !t->dev_grads; /* a GPU's gradients via host memory */
	int stop = 0;
	while (t->step < o->steps && (o->until <= 0 || t->step < o->until)) {
		int64_t step = t->step + 1;
		double t0 = gk_now(), exposed = 0;
		t->comm_start = 0;
		gk_nn_zero_grad(t->m);
		double lsum = 0;
		int cut = 0, done = 0; /* a signal stopped the step after done micro-steps */
		if (o->grad_accum > 1 && o->stop) {
			free(t->snap);
			if (!(t->snap = data_state(t->data)))
				return gk_err_sys(err, ENOMEM, "step %" PRId64, step);
		}
		for (int a = 0; a < o->grad_accum; a++) {
			if (a > 0 && o->stop && (cut = agree_stop(t, err)) != 0)
				break;
			float l;
			int r = gk_nn_data_next(t->data, t->in, t->tg, err);
			if (r == 0)
				r = gk_errf(err, "data '%s': no more micro-batches", o->data);
			if (r < 0 || gk_nn_forward(t->m, t->in, t->tg, &l, err) < 0)
				return -1;
			lsum += l;
			int last = a == o->grad_accum - 1;
			gk_nn_ready_fn cb = last && t->grads && o->overlap && !host ? ready_cb : NULL;
			if (gk_nn_backward(t->m, 1.0f / (float)o->grad_accum, cb, t, err) < 0)
				return -1;
			done++;
		}
		if (cut < 0)
			return -1;
		if (cut) {
			if (gk_nn_data_restore(t->data, t->snap, err) < 0)
				return gk_err_prefix(err, "step %" PRId64 " stopped by a signal", step);
			sum->dropped = done;
			stop = cut;
			break;
		}
		double tb = gk_now();
		if (t->grads) {
			if (host && gk_nn_cuda_download(t->m, GK_NN_GRADS, err) < 0)
				return -1;
			if (!o->overlap || host) {
				t->comm_start = tb;
				if (gk_comm_grads_ready(t->grads, 0, err) < 0)
					return -1;
			}
			if (gk_comm_grads_finish(t->grads, err) < 0 ||
			    (host && gk_nn_cuda_upload(t->m, GK_NN_GRADS, err) < 0))
				return -1;
		} else if (t->shard) {
			t->comm_start = tb;
			if (shard_reduce(t, err) < 0)
				return -1;
		}
		double tc = gk_now();
		exposed = tc - tb;
		/* Own range of the reduced gradients (host, or device on a GPU). */
		size_t lo = opt_lo(t), n = opt_hi(t) - lo;
		float *g = (t->shard ? flat_grads(t) : grads) + t->lo;
		double ss = 0; /* ZeRO-1: this rank's part of the squared norm */
		if (t->shard && t->cuda && gk_nn_cuda_sumsq(t->m, g, n, &ss, err) < 0)
			return -1;
		if (t->shard && !t->cuda)
			ss = gk_nn_sumsq(g, n);
		int sig = o->stop ? (int)*o->stop : 0;
		/* and v[5..7] the checkpoint's counts */
		double v[8] = {lsum / o->grad_accum, sig == 1, sig == 2, ss,
			       (double)gk_nn_data_bad(t->data)};
		ckpt_counts(t, v + 5);
		if (allreduce_f64(t, v, 8, err) < 0)
			return -1;
		loss = v[0] / t->world;
		double norm;
		if (t->shard) {
			norm = sqrt(v[3]);
		} else if (t->cuda) {
			if (gk_nn_cuda_grad_norm(t->m, &norm, err) < 0)
				return -1;
		} else {
			norm = sqrt(gk_nn_sumsq(grads, t->N));
		}
		exposed += gk_now() - tc;
		double lr = gk_nn_lr(&o->sched, step);
		int skip = 0;
		if (!isfinite(loss) || !isfinite(norm)) {
			t->agreed = !o->skip_nonfinite; /* every rank sees the same loss and norm */
			if (!o->skip_nonfinite)
				return gk_errf(err, "step %" PRId64 ": the %s is %s (use --skip-nonfinite to skip such steps)",
					       step, isfinite(loss) ? "gradient norm" : "loss",
					       isnan(isfinite(loss) ? norm : loss) ? "NaN" : "infinite");
			skip = 1;
			t->skipped++;
		}
		/* torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1 */
		float sc = o->clip > 0 && norm > o->clip ? (float)(o->clip / (norm + 1e-6)) : 1.0f;
		if (!skip && t->cuda) {
			if (gk_nn_cuda_adamw(t->m, &o->adamw, (float)lr, step, sc, lo, lo + n,
					     t->shard ? g : NULL, err) < 0)
				return -1;
		} else if (!skip) {
			gk_nn_adamw_step(t->m, &o->adamw, (float)lr, step, lo, lo + n, params + lo,
					 g, sc, t->mom, t->vel);
		}
		if (!skip && t->shard) {
			double ta = gk_now();
			if (shard_gather(t, err) < 0)
				return -1;
			exposed += gk_now() - ta;
		}
		t->step = step;
		t->tokens += step_tokens;
		double t1 = gk_now();
		if (ckpt_progress(t, v + 5, h, err) < 0)
			return -1;
		gk_nn_train_log lg = {
			.step = step, .loss = loss, .lr = lr, .grad_norm = norm,
			.tokens = t->tokens, .step_ms = (t1 - t0) * 1e3,
			.comm_ms = t->comm_start ? (tc - t->comm_start) * 1e3 : 0,
			.exposed_comm_ms = exposed * 1e3, .skipped = skip,
			.bad_samples = (int64_t)v[4],
			.val_loss = NAN,
		};
		lg.tokens_per_s = step_tokens / (t1 - t0);
		lg.gflops = flops * o->grad_accum / (t1 - t0) / 1e9;
		sum->steps++;
		sum->last_loss = loss;
		sum->bad_samples = lg.bad_samples;
		if (loss < sum->min_loss)
			sum->min_loss = loss;
		if (o->val_data && o->eval_every > 0 && step % o->eval_every == 0) {
			int64_t nb;
			if (eval_loss(t, o->val_data, o->eval_batches, &lg.val_loss, &nb, err) < 0)
				return -1;
			sum->val_loss = lg.val_loss;
		}
		if (h && h->step && t->rank == 0)
			h->step(&lg, h->ctx);
		if (v[2] > 0) {
			stop = 2;
			break;
		}
		int want = o->ckpt_dir && ((o->ckpt_every > 0 && step % o->ckpt_every == 0) || v[1] > 0);
		if (want) {
			/* One checkpoint in flight: an older one must be done first. */
			if (ckpt_finish(t, h, err) < 0 || ckpt_start(t, h, err) < 0)
				return -1;
			last_ckpt = step;
			/* a signal during that wait stops at this checkpoint, not the next step's */
			if (v[1] == 0 && o->stop && (stop = agree_stop(t, err)) != 0)
				break;
		}
		if (v[1] > 0) {
			stop = 1;
			break;
		}
	}
	if (stop < 0)
		return -1;
	if (stop != 2 && o->ckpt_dir && last_ckpt != t->step && t->step > 0 &&
	    sum->steps > 0) {
		if (ckpt_finish(t, h, err) < 0 || ckpt_start(t, h, err) < 0)
			return -1;
	}
	if (ckpt_finish(t, h, err) < 0)
		return -1;
	sum->seconds = gk_now() - t_run;
	sum->tokens = t->tokens;
	sum->step = t->step;
	sum->skipped = t->skipped;
	sum->stopped = stop;
	sum->ckpt_lost = t->ckpt_lost;
	if (sum->steps == 0)
		sum->min_loss = sum->last_loss = NAN; /* no step: no loss, not 0 */
	/* a signal asks for a quick exit (a preemption's grace period) */
	if (o->val_data && !stop && !(o->eval_every > 0 && t->step % o->eval_every == 0)) {
		int64_t nb;
		if (eval_loss(t, o->val_data, o->eval_batches, &sum->val_loss, &nb, err) < 0)
			return -1;
	}
	return 0;
}

/* ---- sampling ------------------------------------------------------------------------- */

/* xorshift64*: the sampler's generator (seeded, the same on every machine). */
static double rng_unit(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

/* The next token from logits lg: greedy, or sampled at temperature among
 * the top_k (0: all); p is scratch of vocab doubles. */
static int32_t pick(const float *lg, int64_t vocab, double temperature, int top_k,
		    uint64_t *s, double *p)
{
	double mx = -INFINITY, z = 0;
	for (int64_t v = 0; v < vocab; v++)
		if (lg[v] > mx)
			mx = lg[v];
	double cut = -INFINITY;
	if (top_k > 0 && top_k < vocab) {
		/* the k-th largest logit: partial selection by counting */
		double lo = -INFINITY;
		for (int k = 0; k < top_k; k++) {
			double best = -INFINITY;
			for (int64_t v = 0; v < vocab; v++)
				if (lg[v] > best && (k == 0 || lg[v] < lo))
					best = lg[v];
			lo = best;
		}
		cut = lo;
	}
	if (temperature <= 0) {
		for (int64_t v = 0; v < vocab; v++)
			if (lg[v] == mx)
				return (int32_t)v;
		return 0;
	}
	for (int64_t v = 0; v < vocab; v++) {
		p[v] = lg[v] >= cut ? exp((lg[v] - mx) / temperature) : 0;
		z += p[v];
	}
	double u = rng_unit(s) * z, acc = 0;
	for (int64_t v = 0; v < vocab; v++) {
		acc += p[v];
		if (p[v] > 0 && u < acc)
			return (int32_t)v;
	}
	return (int32_t)vocab - 1;
}

int gk_nn_sample(gk_nn_model *m, int batch, int seq, int32_t start, int n,
		 double temperature, int top_k, uint64_t seed, int32_t *out,
		 gk_err *err)
{
	const gk_nn_config *c = gk_nn_config_of(m);
	int32_t *row = malloc((size_t)batch * (size_t)seq * sizeof(int32_t));
	double *p = malloc((size_t)c->vocab * sizeof(double));
	int32_t *hist = malloc(((size_t)n + 1) * sizeof(int32_t));
	gk_nn_decoder *d = NULL;
	gk_err why;
	if (!row || !p || !hist) {
		free(row), free(p), free(hist);
		return gk_err_sys(err, ENOMEM, "sample");
	}
	/* no cache on a GPU model (or without the memory): full forwards */
	if (gk_nn_decoder_new(&d, m, &why) < 0)
		d = NULL;
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	hist[0] = start;
	int len = 1, rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		const float *lg;
		if (d && len <= seq) {
			/* the history is the window: positions 0..len-1, all but
			 * the newest already in the cache */
			rc = gk_nn_decode(d, hist[len - 1], &lg, err);
		} else if (d) {
			int first = len > seq ? len - seq : 0;
			rc = gk_nn_forward_window(m, hist + first, len - first, &lg, err);
		} else {
			/* the last seq tokens of the history in row 0 */
			int first = len > seq ? len - seq : 0, w = len - first;
			for (size_t k = 0; k < (size_t)batch * (size_t)seq; k++)
				row[k] = start;
			memcpy(row, hist + first, (size_t)w * sizeof(int32_t));
			rc = gk_nn_forward(m, row, NULL, NULL, err);
			lg = rc == 0 ? gk_nn_logits(m, 0, w - 1) : NULL;
		}
		if (rc == 0) {
			out[i] = pick(lg, c->vocab, temperature, top_k, &s, p);
			hist[len++] = out[i];
		}
	}
	gk_nn_decoder_free(d);
	free(row), free(p), free(hist);
	return rc;
}

void gk_nn_trainer_free(gk_nn_trainer *t)
{
	if (!t)
		return;
	if (t->job) {
		pthread_mutex_lock(&t->job->mu);
		t->job->go_commit = -1;
		pthread_cond_signal(&t->job->cv);
		pthread_mutex_unlock(&t->job->mu);
		pthread_join(t->job->th, NULL);
		job_free(t->job);
	}
	gk_comm_grads_free(t->grads);
	if (t->cuda && t->resid)
		gk_comm_free(t->gcomm, t->resid);
	if (t->gcomm != t->comm)
		gk_comm_close(t->gcomm); /* before the model's stream goes */
	gk_nn_data_close(t->data);
	gk_nn_free(t->m);
	free(t->mom);
	free(t->vel);
	if (!t->cuda)
		free(t->resid);
	free(t->in);
	free(t->tg);
	free(t->snap);
	gk_comm_close(t->comm);
	gk_ckpt_unlock(t->lock);
	free(t->init_from);
	free(t);
}

/*
 * Names by Prometheus' conventions (https://prometheus.io/docs/practices/naming/):
 * base units (seconds, bytes), _total on counters only. steps_total and
 * tokens_total count from the start of training, across resumes, so a
 * rate() over them is the throughput. Memory has no "total" category: a
 * sum() over the label would count it twice.
 */
int gk_nn_train_metrics(gk_metrics *m, const gk_nn_train_log *l,
			const gk_nn_train_mem *mem, int world, double now,
			gk_err *err)
{
	const struct {
		const char *name, *help;
		gk_metric_type type;
		double v;
	} g[] = {
		{"gpukit_train_steps_total", "Optimizer steps done, across resumes.",
		 GK_METRIC_COUNTER, (double)l->step},
		{"gpukit_train_tokens_total", "Tokens trained on by all ranks, across resumes.",
		 GK_METRIC_COUNTER, (double)l->tokens},
		{"gpukit_train_loss", "Training loss of the last step (mean over ranks).",
		 GK_METRIC_GAUGE, l->loss},
		{"gpukit_train_learning_rate", "Learning rate of the last step.",
		 GK_METRIC_GAUGE, l->lr},
		{"gpukit_train_grad_norm", "Global gradient norm of the last step, before clipping.",
		 GK_METRIC_GAUGE, l->grad_norm},
		{"gpukit_train_step_seconds", "Wall time of the last step.",
		 GK_METRIC_GAUGE, l->step_ms / 1e3},
		{"gpukit_train_comm_seconds", "Gradient communication time of the last step.",
		 GK_METRIC_GAUGE, l->comm_ms / 1e3},
		{"gpukit_train_exposed_comm_seconds",
		 "Communication of the last step not hidden behind compute.",
		 GK_METRIC_GAUGE, l->exposed_comm_ms / 1e3},
		{"gpukit_train_tokens_per_second", "Throughput of the last step, all ranks.",
		 GK_METRIC_GAUGE, l->tokens_per_s},
		{"gpukit_train_step_skipped", "1 when the last step's update was skipped (non-finite).",
		 GK_METRIC_GAUGE, l->skipped ? 1 : 0},
		{"gpukit_train_world_size", "Ranks training.", GK_METRIC_GAUGE, world},
		{"gpukit_train_last_step_timestamp_seconds", "When the last step ended, in Unix time.",
		 GK_METRIC_GAUGE, now},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(g); i++)
		if (gk_metrics_set(m, g[i].name, g[i].type, g[i].help, NULL, g[i].v, err) < 0)
			return -1;
	/* kept from the last evaluation until the next */
	if (!isnan(l->val_loss) &&
	    gk_metrics_set(m, "gpukit_train_val_loss", GK_METRIC_GAUGE,
			   "Loss on the validation data at the last evaluation.", NULL,
			   l->val_loss, err) < 0)
		return -1;
	const char *cat[] = {"parameters", "gradients", "optimizer", "activations",
			     "workspace", "padding", "comm"};
	const uint64_t v[] = {mem->parameters, mem->gradients, mem->optimizer,
			      mem->activations, mem->workspace, mem->padding, mem->comm};
	for (size_t i = 0; i < GK_ARRAY_SIZE(cat); i++) {
		const char *lab[] = {"category", cat[i], NULL};
		if (gk_metrics_set(m, "gpukit_train_memory_bytes", GK_METRIC_GAUGE,
				   "Memory rank 0 allocated, by category.", lab, (double)v[i],
				   err) < 0)
			return -1;
	}
	return 0;
}

int gk_nn_train_ckpt_metrics(gk_metrics *m, const gk_nn_ckpt_stats *s, gk_err *err)
{
	if (gk_metrics_set(m, "gpukit_train_checkpoints_failed_total", GK_METRIC_COUNTER,
			   "Checkpoints not written (--ckpt-error continue), this run.", NULL,
			   (double)s->failed, err) < 0)
		return -1;
	if (s->step <= 0)
		return 0;
	const struct {
		const char *name, *help;
		double v;
	} g[] = {
		{"gpukit_train_checkpoint_step", "Step of the last checkpoint committed.",
		 (double)s->step},
		{"gpukit_train_checkpoint_seconds",
		 "Time of the last checkpoint, from the copy of the state to its commit.",
		 s->seconds},
		{"gpukit_train_checkpoint_timestamp_seconds",
		 "When the last checkpoint was committed, in Unix time.", s->when},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(g); i++)
		if (gk_metrics_set(m, g[i].name, GK_METRIC_GAUGE, g[i].help, NULL, g[i].v,
				   err) < 0)
			return -1;
	return 0;
}
