/*
 * checkpoint.c - the trainer's checkpoints: the state copied at a step
 * boundary and written by a thread into a lib/ckpt staging directory;
 * rank 0 commits once every rank has written. The ranks learn each
 * other's progress from the step's small allreduce (or, waiting, from
 * gk_nn_tr_ckpt_finish's), so they move on together: none waits alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "nn/train_internal.h"
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
	float *shard;      /* ZeRO-3: a copy of this rank's range [slo, slo+sn) */
	size_t slo, sn;
	float *m, *v;      /* copies of this rank's moments */
	float *fb;         /* a copy of this rank's error feedback, nfb floats */
	size_t nfb;
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

/* every rank writes its range of the moments (ZeRO over data parallelism
 * alone; a pipeline's, and a tensor group's, are put together on rank 0
 * whatever its ZeRO) */
static int sharded_moments(const gk_nn_trainer *t)
{
	return t->o.zero && t->world > 1 && t->grid.pp == 1 && t->grid.tp == 1;
}

/* ZeRO-3 without --ckpt-gather: every rank writes its range of the
 * model, no rank the whole (write_shard) */
static int sharded_model(const gk_nn_trainer *t)
{
	return t->dp->zero3 && !t->o.ckpt_gather && t->grid.tp == 1 && t->grid.pp == 1;
}

int gk_nn_trainer_ckpt_sharded(const gk_nn_trainer *t)
{
	return t->o.ckpt_dir && !t->o.eval_only && sharded_model(t);
}

static int write_model(const ckpt_job *j, const char *path, gk_err *err)
{
	size_t n;
	/* the whole model, whatever the layout of the run */
	const gk_nn_tensor *tt = gk_nn_full_tensors(j->t->m, &n);
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

/*
 * ZeRO-3: this rank's range of the flat buffer, each tensor it meets in
 * its Hugging Face name: whole where the range holds all of it, else the
 * piece it holds as a 1-D flat slice (gpukit.flat.NAME "A:B/ROWS,COLS",
 * the tensor's elements [A, B) in row-major order), which the range cuts
 * anywhere, inside rows too. The rank files of a step put together
 * (lib/ckpt, ckpt-merge) are the model model.safetensors holds.
 */
static int write_shard(const ckpt_job *j, const char *path, gk_err *err)
{
	const gk_nn_trainer *t = j->t;
	size_t n, k = 0, m = 0;
	const gk_nn_tensor *tt = gk_nn_full_tensors(t->m, &n);
	gk_st_spec *spec = calloc(n + 1, sizeof(*spec));
	const void **data = calloc(n + 1, sizeof(*data));
	uint64_t *shapes = calloc(2 * n + 1, sizeof(uint64_t));
	gk_st_kv *meta = calloc(n + 3, sizeof(*meta));
	char *text = calloc(n + 1, 2 * NAME_BYTES);
	char rank[16], world[16];
	int rc = -1;
	if (!spec || !data || !shapes || !meta || !text) {
		gk_err_sys(err, ENOMEM, "write '%s'", path);
		goto out;
	}
	snprintf(rank, sizeof(rank), "%d", t->rank);
	snprintf(world, sizeof(world), "%d", t->world);
	meta[m++] = (gk_st_kv){"format", "pt"};
	meta[m++] = (gk_st_kv){GK_CKPT_META_RANK, rank};
	meta[m++] = (gk_st_kv){GK_CKPT_META_WORLD, world};
	for (size_t i = 0; i < n; i++) {
		/* wte: the first vocab rows; the padded rows are no tensor's */
		uint64_t rows = (uint64_t)tt[i].shape[0];
		uint64_t cols = tt[i].ndim == 2 ? (uint64_t)tt[i].shape[1] : 1;
		size_t lo = tt[i].off, hi = tt[i].off + (size_t)(rows * cols);
		size_t a = lo > j->slo ? lo : j->slo, b = hi < j->slo + j->sn ? hi : j->slo + j->sn;
		if (a >= b)
			continue;
		data[k] = j->shard + (a - j->slo);
		if (a == lo && b == hi) {
			shapes[2 * k] = rows;
			shapes[2 * k + 1] = cols;
			spec[k] = (gk_st_spec){tt[i].name, GK_DT_F32, tt[i].ndim, shapes + 2 * k};
		} else {
			char *key = text + 2 * NAME_BYTES * k, *val = key + NAME_BYTES;
			shapes[2 * k] = b - a;
			spec[k] = (gk_st_spec){tt[i].name, GK_DT_F32, 1, shapes + 2 * k};
			snprintf(key, NAME_BYTES, GK_CKPT_META_FLAT "%s", tt[i].name);
			if (tt[i].ndim == 2)
				snprintf(val, NAME_BYTES, "%zu:%zu/%" PRIu64 ",%" PRIu64, a - lo,
					 b - lo, rows, cols);
			else
				snprintf(val, NAME_BYTES, "%zu:%zu/%" PRIu64, a - lo, b - lo, rows);
			meta[m++] = (gk_st_kv){key, val};
		}
		k++;
	}
	rc = gk_st_save(path, spec, data, k, meta, m, err);
out:
	free(spec), free(data), free(shapes), free(meta), free(text);
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
	if (sharded_moments(t)) {
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

/* This rank's error feedback (compressed communication), its own. */
static int write_feedback(const ckpt_job *j, const char *path, gk_err *err)
{
	const gk_nn_trainer *t = j->t;
	uint64_t shape[1] = {j->nfb};
	gk_st_spec spec[1] = {{"residual", GK_DT_F32, 1, shape}};
	const void *data[1] = {j->fb};
	char rank[16], world[16], lay[32], grid[64];
	snprintf(rank, sizeof(rank), "%d", t->rank);
	snprintf(world, sizeof(world), "%d", t->world);
	snprintf(lay, sizeof(lay), "%s", gk_nn_dp_feedback_layout(t->dp));
	/* in a grid, which one: its stage's or slice's segments */
	gk_nn_dp_feedback_grid(t->dp, grid, sizeof(grid));
	gk_st_kv meta[5] = {{"format", "pt"}, {GK_CKPT_META_RANK, rank},
			    {GK_CKPT_META_WORLD, world}, {GK_NN_FEEDBACK_META, lay},
			    {GK_NN_FEEDBACK_GRID_META, grid}};
	return gk_st_save(path, spec, data, 1, meta, grid[0] ? 5 : 4, err);
}

static int job_write(ckpt_job *j, gk_err *err)
{
	gk_nn_trainer *t = j->t;
	char *p = NULL;
	int rc = -1;
	if (t->o.ckpt_delay_ms > 0)
		usleep((useconds_t)t->o.ckpt_delay_ms * 1000);
	if (j->shard) {
		char *name = gk_ckpt_rank_file("model", t->rank, t->world);
		p = name ? gk_ckpt_stage_path(j->stage, name) : NULL;
		free(name);
		if (!p || write_shard(j, p, err) < 0)
			goto out;
		free(p);
		p = NULL;
	}
	if (t->rank == 0) {
		if (j->params && (!(p = gk_ckpt_stage_path(j->stage, GK_CKPT_SINGLE)) ||
				  write_model(j, p, err) < 0))
			goto out;
		free(p);
		if (!(p = gk_ckpt_stage_path(j->stage, GK_CKPT_CONFIG)) ||
		    gk_nn_config_save(&t->cfg, p, err) < 0)
			goto out;
		free(p);
		if (!(p = gk_ckpt_stage_path(j->stage, GK_CKPT_TRAINER)) ||
		    gk_atomic_write_file(p, j->trainer_json, strlen(j->trainer_json), 0644, err) < 0)
			goto out;
		free(p);
		p = NULL;
		/* the run's tokenizer: the step decodes and encodes as it did */
		if (gk_nn_tr_tok_save(t, j->stage, err) < 0)
			goto out;
	}
	if (j->write_moments) {
		char *name = gk_ckpt_optim_file(sharded_moments(t), t->rank, t->world);
		if (!name)
			goto out;
		p = gk_ckpt_stage_path(j->stage, name);
		free(name);
		if (!p || write_moments(j, p, err) < 0)
			goto out;
	}
	if (j->fb) {
		char *name = gk_ckpt_rank_file(GK_CKPT_FEEDBACK, t->rank, t->world);
		free(p);
		p = name ? gk_ckpt_stage_path(j->stage, name) : NULL;
		free(name);
		if (!p || write_feedback(j, p, err) < 0)
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
	free(j->params), free(j->shard), free(j->m), free(j->v), free(j->fb);
	free(j->trainer_json);
	j->params = j->shard = j->m = j->v = j->fb = NULL;
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
		if (j->t->o.ckpt_commit_delay_ms > 0) /* tests: a slow filesystem */
			usleep((useconds_t)j->t->o.ckpt_commit_delay_ms * 1000);
		/* tests: the staging directory stays as it is until the test
		 * has done what it does to it */
		while (j->t->o.ckpt_commit_wait && access(j->t->o.ckpt_commit_wait, F_OK) < 0)
			usleep(10000);
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
	free(j->shard);
	free(j->m);
	free(j->v);
	free(j->fb);
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
	/* the data's world: the data-parallel groups (the ranks of a tensor
	 * group read the same data), so that any layout of the same data
	 * world resumes the same positions */
	json_object_set_new(j, "world", json_integer(t->grid.dp));
	json_object_set_new(j, "tp", json_integer(t->grid.tp));
	json_object_set_new(j, "pp", json_integer(t->grid.pp));
	json_object_set_new(j, "zero", json_integer(t->o.zero));
	json_object_set_new(j, "batch", json_integer(t->o.batch));
	json_object_set_new(j, "seq", json_integer(t->o.seq));
	json_object_set_new(j, "grad_accum", json_integer(t->o.grad_accum));
	json_object_set_new(j, "seed", json_integer((json_int_t)t->o.seed));
	json_object_set_new(j, "nparams", json_integer((json_int_t)gk_nn_full_nparams(t->m)));
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
	/* the settings a resumed run compares (gk_nn_train_opts.agree_arg) */
	json_t *set = t->o.agree_arg ? json_object() : NULL;
	for (size_t i = 0; set && i < t->o.nagree; i++) {
		char v[24];
		snprintf(v, sizeof(v), "%016" PRIx64, t->o.agree[i].v);
		json_object_set_new(set, t->o.agree[i].name,
				    json_pack("{s:s,s:s}", "value", v, "arg", t->o.agree_arg[i]));
	}
	if (set)
		json_object_set_new(j, "settings", set);
	/* each data-parallel group's first rank (tp innermost, then pp) */
	for (int r = 0; r < t->world; r += t->grid.tp * t->grid.pp)
		json_array_append_new(d, json_loads(states + (size_t)r * slot, 0, NULL));
	json_object_set_new(j, "data", d);
	char *out = json_dumps(j, JSON_INDENT(2));
	json_decref(j);
	return out;
}

/*
 * Under tensor parallelism: the whole model and moments in the layout of
 * one rank, gathered within rank 0's tensor group (the other groups hold
 * the same slices) into rank 0's copies, so that any layout resumes from
 * them. Under ZeRO the moments of src are those its tensor rank's pieces
 * were put together into (gk_nn_tr_pp_collect). Called by every rank (the
 * buffers' allocation is agreed over the world first).
 */
static int ckpt_gather(gk_nn_trainer *t, ckpt_job *j, float *const src[3], gk_err *err)
{
	size_t nf = gk_nn_full_nparams(t->m);
	/* a pipeline's: the first stage's group, which src holds the stages' in */
	int in = t->grid.dp_rank == 0 && t->grid.pp_rank == 0;
	float *p = NULL, *m = NULL, *v = NULL;
	int rc = 0;
	if (in && (!(p = malloc(nf * sizeof(float))) || !(m = malloc(nf * sizeof(float))) ||
		   !(v = malloc(nf * sizeof(float)))))
		rc = gk_err_sys(err, ENOMEM, "checkpoint: the whole model's copy");
	if (gk_nn_tr_agree_local(t, rc, err) < 0)
		goto fail;
	if (in && (gk_nn_tp_gather(t->m, src[0], p, err) < 0 ||
		   gk_nn_tp_gather(t->m, src[1], m, err) < 0 ||
		   gk_nn_tp_gather(t->m, src[2], v, err) < 0))
		goto fail;
	if (t->rank == 0) {
		j->params = p, j->m = m, j->v = v;
		j->lo = 0;
		j->n = nf;
		return 0;
	}
	rc = 0;
	goto out;
fail:
	rc = -1;
out:
	free(p), free(m), free(v);
	return rc;
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
	snprintf(path, sizeof(path), "%s/" GK_CKPT_LOCK, t->o.ckpt_dir);
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
int gk_nn_tr_ckpt_start(gk_nn_trainer *t, gk_nn_train_hooks *h, gk_err *err)
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
	if (gk_nn_tr_bcast(t, name, sizeof(name), err) < 0) {
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
	char *state = t->data ? gk_nn_tr_data_state(t->data) : strdup("null"), *mine = NULL, *all = NULL;
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
	int g = gk_nn_tr_gather(t, mine, all, slot, err);
	free(mine);
	if (g < 0) {
		free(all);
		job_free(j);
		return -1;
	}
	/* a pipeline: each stage's parameters and moments from the stage that
	 * keeps them current, put together on its first stage (rank 0's copy,
	 * or under tensor parallelism what rank 0's group gathers from) */
	float *pc[3] = {NULL, NULL, NULL};
	/* (a tensor group under ZeRO: a pipeline of one stage, dp.c) */
	int pp = t->dp->pp_stage >= 0;
	j->lo = pp ? 0 : gk_nn_dp_lo(t->dp);
	j->n = pp ? t->N : gk_nn_dp_hi(t->dp) - j->lo;
	j->write_moments = sharded_moments(t) || t->rank == 0;
	/* (ZeRO-3 on a GPU: each rank its range, which it writes or sends
	 * to rank 0's copy (--ckpt-gather); a
	 * pipeline's every stage sends its range of them, pp_sched.c; a
	 * tensor group's every rank its slices, ckpt_gather; ZeRO-1 on
	 * GPUs in bf16 gathers the master whole first, its steps having
	 * gathered the working copy, dp.c) */
	int tp = t->grid.tp > 1;
	if (gk_nn_dp_master_full(t->dp, err) < 0 ||
	    ((t->rank == 0 || t->dp->zero3 || pp || tp) &&
	     gk_nn_download(t->m, GK_NN_PARAMS, err) < 0) ||
	    (pp && !t->dp->host_update && !t->dp->off && gk_nn_tr_pp_moments(t, 0, err) < 0) ||
	    (!pp && (j->write_moments || tp) && !t->dp->host_update &&
	     gk_nn_moments_sync(t->m, gk_nn_dp_lo(t->dp), gk_nn_dp_hi(t->dp), t->dp->mom,
				t->dp->vel, 0, err) < 0)) {
		free(all);
		job_free(j);
		return -1;
	}
	if (t->rank == 0)
		j->trainer_json = trainer_json(t, all, slot);
	free(all);
	/* offloaded over a grid: each rank's moments from its file while they
	 * are put together (every rank's read agreed before any message) */
	if ((pp || tp) && gk_nn_tr_agree_local(t, gk_nn_dp_moments_load(t->dp, err), err) < 0) {
		job_free(j);
		return -1;
	}
	/* ZeRO-3 over a grid: each stage's parameters whole for the copy,
	 * its pieces alone again after */
	if ((pp || tp) && gk_nn_dp_params_host(t->dp, err) < 0) {
		gk_nn_dp_moments_drop(t->dp);
		job_free(j);
		return -1;
	}
	if (pp && gk_nn_tr_pp_collect(t, pc, err) < 0) {
		gk_nn_dp_moments_drop(t->dp);
		free(pc[0]), free(pc[1]), free(pc[2]);
		job_free(j);
		return -1;
	}
	if (t->grid.tp > 1) {
		float *own[3] = {gk_nn_params(t->m), t->dp->mom, t->dp->vel};
		int r = ckpt_gather(t, j, pp ? pc : own, err);
		gk_nn_dp_moments_drop(t->dp);
		gk_nn_dp_params_shard(t->dp);
		free(pc[0]), free(pc[1]), free(pc[2]);
		if (r < 0) {
			job_free(j);
			return -1;
		}
	} else if (pp) {
		/* rank 0's copies are the collected ones */
		gk_nn_dp_moments_drop(t->dp);
		gk_nn_dp_params_shard(t->dp);
		j->params = pc[0], j->m = pc[1], j->v = pc[2];
	} else if (sharded_model(t)) {
		/* ZeRO-3: each rank writes its own range, no gather */
		j->slo = gk_nn_dp_lo(t->dp);
		j->sn = gk_nn_dp_hi(t->dp) - j->slo;
		if ((j->shard = malloc(j->sn * sizeof(float) + 1)))
			memcpy(j->shard, gk_nn_params(t->m) + j->slo, j->sn * sizeof(float));
	} else if (t->dp->zero3) {
		/* ZeRO-3 with --ckpt-gather: every rank's range sent into rank
		 * 0's copy, whose allocation is agreed first (the others would
		 * send into nothing) */
		int r = t->rank == 0 && !(j->params = malloc(t->N * sizeof(float))) ?
			gk_err_sys(err, ENOMEM, "checkpoint: copy of the state") : 0;
		if (gk_nn_tr_agree_local(t, r, err) < 0 ||
		    gk_nn_dp_params_to_root(t->dp, j->params, err) < 0) {
			job_free(j);
			return -1;
		}
	} else if (t->rank == 0 && (j->params = malloc(t->N * sizeof(float)))) {
		/* ZeRO 0 to 2: rank 0's whole copy */
		memcpy(j->params, gk_nn_params(t->m), t->N * sizeof(float));
	}
	if (j->write_moments && t->grid.tp == 1 && !pp) {
		j->m = malloc(j->n * sizeof(float) + 1);
		j->v = malloc(j->n * sizeof(float) + 1);
		if (j->m && j->v && t->dp->off) {
			/* offloaded: read back, so the file is the one written without */
			if (gk_nn_offload_read(t->dp->off, 0, 0, j->n, j->m, err) < 0 ||
			    gk_nn_offload_read(t->dp->off, 1, 0, j->n, j->v, err) < 0) {
				job_free(j);
				return -1;
			}
		} else if (j->m && j->v) {
			memcpy(j->m, t->dp->mom, j->n * sizeof(float));
			memcpy(j->v, t->dp->vel, j->n * sizeof(float));
		}
	}
	/* compression's error feedback, so that a resume continues bit for bit */
	j->nfb = gk_nn_dp_feedback_len(t->dp);
	if (j->nfb && (j->fb = malloc(j->nfb * sizeof(float))) &&
	    gk_nn_dp_feedback_get(t->dp, j->fb, err) < 0) {
		job_free(j);
		return -1;
	}
	int sharded = sharded_model(t);
	if ((t->rank == 0 && ((!sharded && !j->params) || !j->trainer_json)) ||
	    (sharded && !j->shard) ||
	    (j->write_moments && (!j->m || !j->v)) || (j->nfb && !j->fb)) {
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

uint64_t gk_nn_tr_ckpt_bytes(const gk_nn_trainer *t, size_t nparams, size_t moments,
			     size_t feedback)
{
	if (!t->o.ckpt_dir || t->o.eval_only)
		return 0;
	/* ZeRO-3 on the CPU (lazy_params) or on GPUs (unit_params), as
	 * sharded_model says once the data-parallel state exists (over a
	 * grid a stage's checkpoint is ZeRO-2's) */
	int z3 = (gk_nn_dp_lazy_params(&t->o, t->grid.dp, t->cuda) ||
		  gk_nn_dp_unit_params(t) > 0) &&
		 t->grid.tp == 1 && t->grid.pp == 1;
	uint64_t b = t->rank == 0 ? (uint64_t)nparams * sizeof(float) : 0;
	/* ZeRO-3: each rank copies its range, that of its moments (with
	 * --ckpt-gather rank 0 the whole model, the ranges sent into it) */
	if (z3 && !t->o.ckpt_gather)
		b = (uint64_t)moments * sizeof(float);
	if (sharded_moments(t) || t->rank == 0)
		b += (uint64_t)2 * moments * sizeof(float);
	return b + (uint64_t)feedback * sizeof(float);
}

/* This rank's part of the counts ckpt_progress takes, to be summed. */
void gk_nn_tr_ckpt_counts(const gk_nn_trainer *t, double c[3])
{
	int st = t->job ? atomic_load(&t->job->state) : JOB_WRITING;
	c[0] = st == JOB_WRITTEN || st == JOB_DONE;
	c[1] = st == JOB_FAILED;
	c[2] = st == JOB_DONE;
}

/*
 * A failure nfail ranks met, this one (mine) or not: *err becomes on every
 * rank the first failing rank's message, with the count when several
 * failed (a full disk every rank writes to), for rank 0 to say once.
 */
static int first_says(gk_nn_trainer *t, int mine, double nfail, gk_err *err)
{
	if (t->world == 1)
		return 0;
	double first = mine ? t->rank : t->world;
	if (gk_comm_host_allreduce_f64(t->comm, &first, 1, GK_COMM_MIN, err) < 0)
		return -1;
	if (first >= t->world)
		return 0;
	char msg[sizeof(err->msg) / 4 * 4];
	snprintf(msg, sizeof(msg), "%s", err->msg);
	if (gk_comm_broadcast(t->comm, msg, msg, sizeof(msg) / 4, GK_DT_I32, (int)first, err) < 0)
		return -1;
	msg[sizeof(msg) - 1] = '\0';
	if (nfail > 1)
		gk_errf(err, "%s (%g of %d ranks)", msg, nfail, t->world);
	else
		gk_errf(err, "%s", msg);
	return 0;
}

/*
 * Move the pending checkpoint on, given c: how many ranks have written
 * their files, failed, and are done (ckpt_counts summed over the ranks,
 * so every rank takes the same turn). Once all have written, rank 0
 * commits; the job ends on every rank once all are done, or once one
 * has failed.
 */
int gk_nn_tr_ckpt_progress(gk_nn_trainer *t, const double c[3], gk_nn_train_hooks *h,
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
		/* Every rank agreed on the failure, so all go on; rank 0 says
		 * why, once, in the words of the first rank that failed */
		if (first_says(t, rc < 0, failed, err) < 0)
			return -1;
		if (h && h->checkpoint_failed && t->rank == 0)
			h->checkpoint_failed(step, err, h->ctx);
		return 0;
	}
	if (rc < 0 || failed > 0) {
		/* the job ends: the first rank that failed says why, once */
		gk_err mine = *err;
		return gk_nn_tr_agreed_failure(t, failed, rc < 0 ? &mine : NULL, err);
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
int gk_nn_tr_ckpt_finish(gk_nn_trainer *t, gk_nn_train_hooks *h, gk_err *err)
{
	while (t->job) {
		ckpt_job *j = t->job;
		/* wait for what this rank is doing: writing, or committing
		 * once every rank has written */
		int st = atomic_load(&j->state);
		int busy = st == JOB_WRITING || (st == JOB_WRITTEN && j->agreed);
		/* 100 ms by the clock, not 100 sleeps of 1 ms: on a loaded
		 * host each wake-up can wait for a CPU for tens of ms, and 100
		 * of them outlasted --timeout 2 while the others waited */
		double until = gk_now() + 0.1;
		while (busy && atomic_load(&j->state) == st && gk_now() < until)
			usleep(1000);
		double c[3];
		gk_nn_tr_ckpt_counts(t, c);
		if (gk_nn_tr_sum(t, c, 3, err) < 0 || gk_nn_tr_ckpt_progress(t, c, h, err) < 0)
			return -1;
	}
	return 0;
}

void gk_nn_tr_ckpt_cancel(gk_nn_trainer *t)
{
	ckpt_job *j = t->job;
	if (!j)
		return;
	pthread_mutex_lock(&j->mu);
	j->go_commit = -1;
	pthread_cond_signal(&j->cv);
	pthread_mutex_unlock(&j->mu);
	pthread_join(j->th, NULL);
	job_free(j);
	t->job = NULL;
}
