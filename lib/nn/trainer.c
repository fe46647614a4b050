/*
 * trainer.c - the trainer's set-up and lifetime: the world, the options
 * every rank agrees on, the checkpoint directory, the model's shape and
 * device, the model, the data, the gradient path (dp.c), what the run
 * starts from (resume.c); the memory it accounts and checks is
 * train_mem.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "nn/train_internal.h"

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

const char *gk_nn_trainer_device_desc(const gk_nn_trainer *t)
{
	return t->cuda && t->device_desc[0] ? t->device_desc : NULL;
}

const char *gk_nn_trainer_comm(const gk_nn_trainer *t, const char **note)
{
	if (note)
		*note = t->dp && t->dp->note[0] ? t->dp->note : NULL;
	return gk_comm_backend_name(gk_comm_backend_of(t->dp ? t->dp->gcomm : t->comm));
}

const char *gk_nn_trainer_ckpt_note(const gk_nn_trainer *t)
{
	return t->ckpt_note[0] ? t->ckpt_note : NULL;
}

const char *gk_nn_trainer_resume_notes(const gk_nn_trainer *t)
{
	return t->resume_notes;
}

int64_t gk_nn_trainer_step(const gk_nn_trainer *t)
{
	return t->step;
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
	/* a failure the ranks agreed on, or a stall, is said by one rank */
	int stall = gk_comm_stall_reporter();
	*report = !t ? 1 : t->agreed ? t->rank == t->reporter :
		  stall < 0 || stall == gk_comm_world_rank(t->comm, -1);
	return t && t->agreed ? t->agreed : 1;
}

int gk_nn_trainer_await_reporter(gk_nn_trainer *t, gk_err *err)
{
	int rep = gk_comm_stall_reporter();
	if (!t || !t->comm || t->agreed || rep < 0 || rep == gk_comm_world_rank(t->comm, -1))
		return 0;
	/* gk_nn_trainer_abort's dump of the gradients' own communicator,
	 * before a wait the launcher may end */
	if (t->dp && t->dp->gcomm && t->dp->gcomm != t->comm)
		gk_comm_trace_dump(t->dp->gcomm, "abort");
	return gk_comm_await_reporter(t->comm, err);
}

void gk_nn_trainer_abort(gk_nn_trainer *t, int code)
{
	/* the gradients' own communicator (nccl) dumps its recorder too */
	if (t && t->comm && !t->agreed && t->dp && t->dp->gcomm && t->dp->gcomm != t->comm)
		gk_comm_trace_dump(t->dp->gcomm, "abort");
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
			/* a step directory, or a root's latest step */
			if (gk_ckpt_resolve(o->init_from, &init, err) < 0)
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
	if (dir && !(t->model_dir = strdup(dir))) {
		free(init);
		return gk_err_sys(err, ENOMEM, "read '%s'", dir);
	}
	if (dir) {
		snprintf(path, sizeof(path), "%s/" GK_CKPT_CONFIG, dir);
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
		gk_nn_config_over(&t->cfg, &o->shape);
		if (gk_nn_config_finish(&t->cfg, err) < 0)
			rc = -1;
		else if (!gk_nn_config_equal(&t->cfg, &from))
			rc = shape_error(dir, &from, &t->cfg, err);
	} else if (o->have_config) {
		t->cfg = o->cfg;
		if (gk_nn_config_finish(&t->cfg, err) < 0)
			rc = -1;
		else if (have_from && !gk_nn_config_equal(&t->cfg, &from))
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
	if (gk_nn_tr_sum(t, v, 2, err) < 0)
		return -1;
	if (v[1] > 0)
		return gk_nn_tr_agreed_failure(t, v[1], r < 0 ? &why : NULL, err);
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
	gk_err ignore;
	if (gk_cuda_describe(t->dev, t->device_desc, sizeof(t->device_desc), &ignore) < 0)
		t->device_desc[0] = '\0'; /* the start line goes without it */
	return 0;
}

/*
 * The world and what every rank must agree on before anything is read:
 * an earlier failure, the options, the placement, --ckpt-dir's claim and
 * --init-from's resolution.
 */
static int open_world(gk_nn_trainer *t, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	gk_comm_config cc = {.backend = GK_COMM_BACKEND_AUTO, .timeout = o->timeout,
			     .trace_dir = o->trace_dir};
	if (gk_comm_open(&t->comm, &cc, err) < 0)
		return -1;
	t->rank = gk_comm_rank(t->comm);
	t->world = gk_comm_world(t->comm);
	/*
	 * A rank that failed before the trainer still opened the world, to
	 * end it with the others: had it exited, they would wait for it in
	 * MPI's start-up (srun keeps a step whose task exited running, unless
	 * --kill-on-bad-exit).
	 */
	double nfail = o->failed != NULL;
	if (gk_nn_tr_sum(t, &nfail, 1, err) < 0)
		return -1;
	if (nfail > 0)
		return gk_nn_tr_agreed_failure(t, nfail, o->failed, err);
	if (gk_nn_tr_agree_options(t, err) < 0) {
		t->agreed = 2;
		return -1;
	}
	/* the grid's sizes: every rank has the same options and world, so
	 * every rank refuses together, before anything is read */
	if (gk_nn_grid_layout_pp(t->world, o->tp > 1 ? o->tp : 1, o->pp > 1 ? o->pp : 1, t->rank,
				 &t->grid, err) < 0) {
		t->agreed = 2;
		return -1;
	}
	if (gk_nn_grid_open(&t->grid, t->comm, err) < 0)
		return -1;
	if (gk_nn_tr_place(t, err) < 0)
		return -1;
	/* --eval-only (and a run of 0 steps) reads a checkpoint and writes
	 * none: nothing to claim */
	if (o->ckpt_dir && !o->eval_only && o->steps > 0 && gk_nn_tr_claim_ckpt_dir(t, err) < 0) {
		t->agreed = 1;
		return -1;
	}
	if (o->init_from && gk_nn_tr_resolve_init_from(t, err) < 0)
		return -1;
	return 0;
}

/* --resume's step directory (*dir, malloc'ed; NULL for a first run). */
static int find_resume(gk_nn_trainer *t, char **dir, uint64_t *step, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	struct stat st;
	*dir = NULL;
	if (o->resume && o->ckpt_dir && (stat(o->ckpt_dir, &st) == 0 || errno != ENOENT)) {
		int r = gk_ckpt_latest(o->ckpt_dir, step, err);
		if (r < 0)
			return -1;
		if (r == 1 && !(*dir = gk_ckpt_step_path(o->ckpt_dir, *step)))
			return gk_err_sys(err, ENOMEM, "resume");
	}
	/* a training job's first run finds nothing to resume and starts;
	 * an evaluation of nothing would print an untrained model's loss */
	if ((o->eval_only || o->steps == 0) && o->resume && !*dir) {
		t->agreed = 1;
		return gk_errf(err, "%s --resume: no committed checkpoint in '%s'",
			       o->eval_only ? "--eval-only" : "--steps 0", o->ckpt_dir);
	}
	return 0;
}

/*
 * The model's shape and device, the model, the gradient path and the
 * data, each failure agreed by the ranks.
 */
static int build(gk_nn_trainer *t, const char *resume_dir, gk_err *err)
{
	int rc = choose_config(t, resume_dir, err);
	if (rc < 0)
		gk_nn_tr_init_gone(t, err);
	if (rc == 0 && t->o.seq <= 0)
		t->o.seq = (int)t->cfg.positions;
	t->eot_asked = t->o.eot >= 0;
	/* before any work: a tokenizer the model cannot take is refused */
	if (rc == 0)
		rc = gk_nn_tr_tok_resolve(t, err);
	if (rc == 0 && t->o.eot < 0 && t->tok) {
		int64_t eot = gk_tok_special(t->tok, "<|endoftext|>");
		if (eot >= 0)
			t->o.eot = (int32_t)eot;
	}
	if (rc == 0 && t->o.eot < 0)
		t->o.eot = (int32_t)(t->cfg.vocab - 1);
	if (rc == 0 && t->o.seq > t->cfg.positions)
		rc = gk_errf(err, "sequence length %d is longer than the model's %" PRId64
			     " positions", t->o.seq, t->cfg.positions);
	if (gk_nn_tr_agree_local(t, rc, err) < 0 || gk_nn_tr_tok_agree(t, err) < 0 ||
	    choose_device(t, err) < 0)
		return -1;
	/* --device auto found a GPU for a setting only the CPU runs: a usage error */
	if (gk_nn_tr_agree_local(t, gk_nn_train_check(&t->o, t->cuda, err), err) < 0) {
		t->agreed = 2;
		return -1;
	}
	/* a layout the model cannot take: refused with the numbers, before
	 * anything is allocated (a usage error, as every rank's) */
	if (t->grid.tp > 1) {
		int r = gk_nn_tp_check(&t->cfg, t->grid.tp, err);
		if (gk_nn_tr_agree_local(t, r, err) < 0) {
			t->agreed = 2;
			return -1;
		}
	}
	if (t->grid.pp > 1) {
		int l0, l1;
		int r = gk_nn_pp_layers(t->cfg.layers, t->grid.pp, t->grid.pp_rank, &l0, &l1, err);
		if (r == 0 && t->o.pp_sched == GK_NN_PP_INTERLEAVED &&
		    (r = gk_nn_pp_chunk_layers(t->cfg.layers, t->grid.pp, t->o.pp_chunks,
					       t->grid.pp_rank, 0, &l0, &l1, err)) < 0)
			gk_err_prefix(err, "--pp %d --pp-chunks %d (give --layers or --pp-chunks "
				      "so that the layers divide by their product)", t->grid.pp,
				      t->o.pp_chunks);
		if (gk_nn_tr_agree_local(t, r, err) < 0) {
			t->agreed = 2;
			return -1;
		}
		/*
		 * The data-parallel sync after the last micro-batch's backward:
		 * no gradient bucket in flight during the schedule. Under
		 * ZeRO-3 (a data-parallel group to shard over) overlap is the
		 * blocks' gathers started ahead, in the order the schedule uses
		 * them (zero3.c), beside its messages (lib/comm makes their MPI
		 * calls one at a time, comm_mpi.h).
		 */
		if (t->o.zero != 3 || t->grid.dp < 2)
			t->o.overlap = 0;
	}
	/*
	 * On the CPU the allreduce is memory copies and sums by the ranks'
	 * own cores: while backward computes on every core, running it beside
	 * only makes the two compete (2 ranks of 1 thread on 2 CPUs: 1-7 %,
	 * median 2 %, fewer tokens a second than after backward). It
	 * overlaps where something else does the work: a GPU computing, a
	 * network between hosts, or a CPU the ranks' threads leave free.
	 * Under ZeRO-3 it overlaps anyway: the next block's parameter gather
	 * (prefetch) is otherwise a wait before every block, which costs
	 * more than the competition for cores (tools/bench/zero.sh, 2 ranks
	 * of 1 thread on 2 CPUs: 1.00-1.02x ZeRO-0's tokens a second with
	 * prefetch, 0.90-0.96x without, in three runs).
	 */
	if (t->o.overlap == GK_NN_AUTO)
		t->o.overlap = t->cuda || t->place.hosts > 1 || t->place.spare > 0 ||
			       t->o.zero == 3;
	gk_nn_opts mo = {.batch = t->o.batch, .seq = t->o.seq, .recompute = t->o.recompute,
			 .threads = t->o.threads, .device = t->cuda ? GK_NN_CUDA : GK_NN_CPU,
			 .precision = t->o.precision,
			 .flat_multiple = gk_nn_dp_flat_multiple(&t->o, t->grid.dp),
			 /* a pipeline stage maps both and touches its range only */
			 .lazy_grads = gk_nn_dp_lazy_grads(&t->o, t->grid.dp, t->cuda) ||
				       t->grid.pp > 1,
			 .bucket_grads = gk_nn_dp_bucket_grads(&t->o, t->grid.dp, t->cuda),
			 .lazy_params = gk_nn_dp_lazy_params(&t->o, t->grid.dp, t->cuda) ||
					t->grid.pp > 1,
			 .unit_params = gk_nn_dp_unit_params(t),
			 .shard_rank = t->grid.dp_rank, .staging = (size_t)t->o.test_staging,
			 .tp = t->grid.tp, .tp_rank = t->grid.tp_rank, .tp_comm = t->grid.tpc,
			 .seq_par = t->o.seq_par, .pp = t->grid.pp, .pp_rank = t->grid.pp_rank,
			 .pp_chunks = t->o.pp_sched == GK_NN_PP_INTERLEAVED ? t->o.pp_chunks : 1,
			 /* ZeRO-2 over a pipeline: a stage's gradients taken
			  * back between steps (dp.c) */
			 .release_grads = gk_nn_dp_lazy_grads(&t->o, t->grid.dp, t->cuda)};
	if (gk_nn_tr_check_memory(t, err) < 0 ||
	    gk_nn_tr_agree_local(t, gk_nn_new(&t->m, &t->cfg, &mo, err), err) < 0)
		return -1;
	/* tensor parallelism on GPUs: the group's collectives over NCCL,
	 * opened by every rank of the group at once (as a pipeline's) */
	gk_comm_config tcc = {.backend = GK_COMM_BACKEND_NCCL, .device = t->dev,
			      .timeout = t->o.timeout, .trace_dir = t->o.trace_dir};
	if (t->cuda && t->grid.tp > 1 &&
	    gk_nn_tr_agree_local(t, gk_nn_tp_device(t->m, &tcc, err), err) < 0)
		return -1;
	/* the start line says which attention the GPU runs (GK_CUDA_ATTENTION,
	 * the precision and the head size) and where the MLP's GELU runs
	 * (GK_CUDA_GELU) */
	gk_err ignore;
	size_t dl = strlen(t->device_desc);
	const char *attn = gk_nn_attention_desc(&t->cfg, &mo);
	if (t->cuda && dl && attn)
		snprintf(t->device_desc + dl, sizeof(t->device_desc) - dl, "; %s; GELU %s", attn,
			 gk_nn_gelu_epilogue(&t->cfg, &mo, &ignore) == 1 ? "in the matmul epilogue"
									  : "kernels");
	t->N = gk_nn_nparams(t->m);
	rc = gk_nn_dp_new(&t->dp, t, err);
	if (rc == 0 && t->grid.pp > 1)
		rc = gk_nn_tr_pp_open(t, err);
	t->in = malloc((size_t)t->o.batch * (size_t)t->o.seq * sizeof(int32_t));
	t->tg = malloc((size_t)t->o.batch * (size_t)t->o.seq * sizeof(int32_t));
	if (rc == 0 && (!t->in || !t->tg))
		rc = gk_err_sys(err, ENOMEM, "optimizer state");
	if (gk_nn_tr_agree_local(t, rc, err) < 0)
		return -1;
	if (!t->o.eval_only && t->o.steps > 0 && t->o.data &&
	    (gk_nn_tr_agree_local(t, gk_nn_tr_data_open(t, &t->data, t->o.data, 1, t->o.shuffle,
							err), err) < 0 ||
	     gk_nn_tr_agree_data(t, t->data, t->o.data, err) < 0))
		return -1;
	if (!t->o.eval_only && t->o.val_data && gk_nn_tr_check_val_data(t, err) < 0)
		return -1;
	return gk_nn_dp_open(t->dp, t, err);
}

/*
 * The parameters (and moments) the run starts from: a resumed step, a
 * checkpoint to fine-tune, or the seeded initialisation; then rank 0's
 * to every rank.
 */
static int start_from(gk_nn_trainer *t, const char *resume_dir, uint64_t resume_step,
		      gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	gk_nn_dp *dp = t->dp;
	if (resume_dir || o->init_from) {
		const char *from = resume_dir ? resume_dir : o->init_from;
		if (gk_nn_tr_verify_ckpt(t, from, err) < 0) {
			t->agreed = 1;
			return resume_dir ? -1 : gk_nn_tr_init_gone(t, err);
		}
		/* ZeRO-3 reads its own range of each tensor, and no more */
		int r = resume_dir ? gk_nn_tr_resume_from(t, resume_dir, resume_step, err) :
			dp->zero3 ? gk_nn_load_range(t->m, o->init_from, dp->lo, dp->hi, err) :
				    gk_nn_load(t->m, o->init_from, err);
		if (r < 0 && !resume_dir)
			gk_nn_tr_init_gone(t, err);
		/*
		 * Every rank reads the same checkpoint, so a refusal (a setting
		 * that must stay, another shard list, rows in no slice) is
		 * usually every rank's: said once, with the count. A setting
		 * refused is a usage error (2) on every rank.
		 */
		int usage = t->agreed == 2;
		if (gk_nn_tr_agree_local(t, r, err) < 0) {
			if (usage)
				t->agreed = 2;
			return -1;
		}
		snprintf(t->model_from, sizeof(t->model_from), "%s", from);
	} else if (gk_nn_tr_agree_local(t, (dp->zero3 ? gk_nn_init_range(t->m, o->seed, dp->lo,
									 dp->hi)
						       : t->grid.pp > 1 ? gk_nn_init_stage(t->m, o->seed)
						       : gk_nn_init(t->m, o->seed)) < 0 ?
					 gk_err_sys(err, ENOMEM, "model initialisation") : 0, err) < 0) {
		return -1;
	}
	/*
	 * The initial broadcast, as PyTorch DDP's of its module states: each
	 * rank loaded or initialised its own parameters, and one whose host
	 * holds another copy of --init-from would train another model from
	 * here on, its loss averaged in, without a word. Rank 0's go to all;
	 * so do ZeRO-0's moments, replicated like them. Under tensor
	 * parallelism each data-parallel group's rank 0 sends its slices to
	 * the ranks that hold the same ones.
	 */
	float *p0 = gk_nn_params(t->m);
	gk_comm *dc = t->grid.dpc;
	/*
	 * ZeRO-3 draws or loads only its own range and holds no replica:
	 * every parameter has one copy, its owner's, so there is nothing to
	 * make equal (and a broadcast would fill the whole buffer).
	 */
	/* a pipeline stage: what it loaded of its range and wte is all it
	 * keeps (the rest of the mapping goes back) and all it sends */
	int stage = t->grid.pp > 1;
	if (stage)
		gk_nn_pp_release(t->m);
	/* (ZeRO-1's moments are each rank's own pieces, read by each) */
	if (stage && t->grid.dp > 1 &&
	    ((dp->head && gk_comm_broadcast(dc, p0, p0, dp->head, GK_DT_F32, 0, err) < 0) ||
	     gk_comm_broadcast(dc, p0 + dp->lo, p0 + dp->lo, dp->hi - dp->lo, GK_DT_F32, 0,
			       err) < 0 ||
	     (resume_dir && !dp->ppshard && !dp->off &&
	      (gk_comm_broadcast(dc, dp->mom, dp->mom, dp->hi - dp->lo + dp->head, GK_DT_F32, 0,
				 err) < 0 ||
	       gk_comm_broadcast(dc, dp->vel, dp->vel, dp->hi - dp->lo + dp->head, GK_DT_F32, 0,
				 err) < 0))))
		return -1;
	if (!stage && t->grid.dp > 1 &&
	    ((!dp->zero3 && gk_comm_broadcast(dc, p0, p0, t->N, GK_DT_F32, 0, err) < 0) ||
	     (!o->zero && resume_dir && !dp->off &&
	      (gk_comm_broadcast(dc, dp->mom, dp->mom, t->N, GK_DT_F32, 0, err) < 0 ||
	       gk_comm_broadcast(dc, dp->vel, dp->vel, t->N, GK_DT_F32, 0, err) < 0))))
		return -1;
	/* offloaded, a chunk at a time through the files (a stage's too) */
	if (t->grid.dp > 1 && !o->zero && resume_dir && dp->off &&
	    gk_nn_tr_agree_local(t, gk_nn_offload_broadcast(dp->off, dc, 0, err), err) < 0)
		return -1;
	/* ZeRO-3: each rank's units as between steps, its own range present */
	gk_nn_dp_params_shard(dp);
	if (gk_nn_upload(t->m, GK_NN_PARAMS, err) < 0 ||
	    (resume_dir && !dp->host_update && !dp->off &&
	     (dp->pp_stage >= 0 ? gk_nn_tr_pp_moments(t, 1, err) :
	      gk_nn_moments_sync(t->m, gk_nn_dp_lo(dp), gk_nn_dp_hi(dp), dp->mom, dp->vel, 1,
				 err)) < 0))
		return -1;
	return 0;
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
	if (t->o.grad_accum < 1)
		t->o.grad_accum = 1;
	char *resume_dir = NULL;
	uint64_t resume_step = 0;
	int rc = open_world(t, err) < 0 || find_resume(t, &resume_dir, &resume_step, err) < 0 ||
		 build(t, resume_dir, err) < 0 ||
		 start_from(t, resume_dir, resume_step, err) < 0 ||
		 (!o->eval_only && o->steps > 0 && gk_nn_tr_straggler_open(t, err) < 0) ? -1 : 0;
	free(resume_dir);
	if (rc == 0)
		gk_nn_tr_account(t);
	*out = t; /* on failure too: the caller can still abort the world */
	return rc;
}

void gk_nn_trainer_free(gk_nn_trainer *t)
{
	if (!t)
		return;
	gk_nn_tr_ckpt_cancel(t);
	gk_nn_tr_straggler_free(t);
	free(t->hosts);
	gk_nn_dp_free(t->dp); /* its communicator before the model's stream */
	gk_nn_data_close(t->data);
	gk_nn_free(t->m);
	gk_nn_tr_pp_free(t);
	free(t->in);
	free(t->tg);
	free(t->snap);
	gk_nn_grid_close(&t->grid);
	gk_comm_close(t->comm);
	gk_ckpt_unlock(t->lock);
	free(t->init_from);
	free(t->model_dir);
	gk_nn_tr_tok_free(t);
	free(t->resume_notes);
	free(t);
}
