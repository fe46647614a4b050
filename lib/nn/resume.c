/*
 * resume.c - where a run starts from: rank 0 claims --ckpt-dir (one
 * writer, no stale steps ahead, one directory shared by every rank),
 * resolves --init-from once, checks the COMMIT of what it loads, and
 * every rank restores the step, the data position, the model and its
 * range of the moments from a step directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "nn/train_internal.h"
#include "st/st.h"

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
				 "checkpoint directory '%s': latest named " GK_CKPT_STEP_FMT
				 ", and " GK_CKPT_STEP_FMT " continues it (a run killed before "
				 "it moved latest): latest now names " GK_CKPT_STEP_FMT,
				 root, from, start, start);
		if (gk_ckpt_latest(root, &start, err) < 0)
			return -1;
	}
	r = gk_ckpt_next_after(root, start, &next, &is_committed, err);
	if (r <= 0)
		return r;
	/* a step directory moved elsewhere and linked back is not read as one
	 * (a link could name another run's step): say that, not "no COMMIT" */
	char *sp = gk_ckpt_step_path(root, next), where[PATH_MAX];
	struct stat st;
	ssize_t wn = sp && lstat(sp, &st) == 0 && S_ISLNK(st.st_mode) ?
			     readlink(sp, where, sizeof(where) - 1) : -1;
	free(sp);
	if (wn >= 0) {
		where[wn] = '\0';
		return gk_errf(err, "checkpoint directory '%s': " GK_CKPT_STEP_FMT " is a symbolic "
			       "link (to '%s'), and step directories are read and written only as "
			       "directories of their root: move it back into '%s' (or start from "
			       "it with --init-from '%s')", root, next, where, root, where);
	}
	if (!t->o.resume && is_committed)
		return gk_errf(err, "checkpoint directory '%s' holds another run's checkpoints "
			       "(" GK_CKPT_STEP_FMT "): --resume continues it; or use another "
			       "--ckpt-dir", root, next);
	return gk_errf(err, "checkpoint directory '%s': " GK_CKPT_STEP_FMT "%s is ahead of "
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
	if (gk_nn_tr_bcast(t, want, sizeof(want), err) < 0)
		return -1;
	if (!want[0])
		return 0;
	int rc = 0;
	if (t->rank != 0) {
		snprintf(path, sizeof(path), "%s/" GK_CKPT_LOCK, t->o.ckpt_dir);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || pread(fd, got, sizeof(got) - 1, 0) < 0 || strcmp(got, want) != 0)
			rc = gk_errf(err, "checkpoint directory '%s': not the one rank 0 writes "
				     "(every rank writes its part of each checkpoint there: it "
				     "must be one directory shared by all ranks)", t->o.ckpt_dir);
		if (fd >= 0)
			close(fd);
	}
	return gk_nn_tr_agree_local(t, rc, err);
}

/*
 * Before step 1, not at the first checkpoint: rank 0 creates --ckpt-dir
 * and claims it (one writer at a time; the litter of killed writers
 * removed), and the ranks agree on the outcome.
 */
int gk_nn_tr_claim_ckpt_dir(gk_nn_trainer *t, gk_err *err)
{
	gk_err mine = {0};
	int bad = 0;
	if (t->rank == 0) {
		t->lock = gk_ckpt_lock(t->o.ckpt_dir, &mine);
		bad = t->lock < 0 || (!t->o.eval_only && check_steps_ahead(t, &mine) < 0);
	}
	double v = bad;
	if (gk_nn_tr_sum(t, &v, 1, err) < 0)
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
int gk_nn_tr_resolve_init_from(gk_nn_trainer *t, gk_err *err)
{
	char buf[PATH_MAX] = {0}, *r = NULL;
	if (t->rank == 0 && gk_ckpt_resolve(t->o.init_from, &r, NULL) == 0 &&
	    strlen(r) < sizeof(buf))
		snprintf(buf, sizeof(buf), "%s", r);
	free(r);
	if (gk_nn_tr_bcast(t, buf, sizeof(buf), err) < 0)
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
int gk_nn_tr_init_gone(const gk_nn_trainer *t, gk_err *err)
{
	struct stat st;
	if (t->init_from && t->init_asked && strcmp(t->init_from, t->init_asked) != 0 &&
	    stat(t->init_from, &st) < 0 && errno == ENOENT)
		gk_errf(err, "checkpoint '%s' (what '%s' named): removed while being read "
			"(by ckpt-prune?); run again to read the newest", t->init_from,
			t->init_asked);
	return -1;
}

static int verify_input(gk_nn_trainer *t, const char *in, gk_err *err)
{
	if (t->o.ckpt_check_delay_ms > 0) /* tests: a slow filesystem */
		usleep((useconds_t)t->o.ckpt_check_delay_ms * 1000);
	return gk_ckpt_verify_input(in, err);
}

/*
 * Check the COMMIT behind a checkpoint input (a step directory's sizes and
 * XXH3 of every file; other inputs have none) before trusting it: rank 0
 * reads it once, and the ranks agree on the outcome.
 */
int gk_nn_tr_verify_ckpt(gk_nn_trainer *t, const char *in, gk_err *err)
{
	gk_err mine = {0};
	int bad = gk_nn_tr_rank0_alone(t, verify_input, in, &mine, err);
	if (bad <= 0)
		return bad;
	if (t->rank == 0) {
		*err = mine;
		return -1;
	}
	return gk_errf(err, "checkpoint '%s': rank 0 found it damaged", in);
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
		if (gk_ckpt_is_optim_file(de->d_name)) {
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
	const gk_nn_dp *o = t->dp;
	float *dst[2] = {o->mom, o->vel};
	size_t lo = o->lo, hi = gk_nn_dp_hi(o), nf = gk_nn_full_nparams(t->m);
	/*
	 * The moments are stored in the whole model's layout; under tensor
	 * parallelism they are read whole and this rank keeps its slices.
	 */
	/* a pipeline stage keeps its range and (the last) wte, read whole
	 * too and copied out: resuming holds one model's moments a while */
	/* (a tensor group under ZeRO: a pipeline of one stage, dp.c) */
	int pp = o->pp_stage >= 0;
	/* the interleaved schedule's blocks lie stage-major in the flat
	 * buffer, the moments' in the Hugging Face order (gk_nn_pp_from_hf;
	 * under tensor parallelism the scatter places each tensor) */
	int placed = pp && t->o.pp_sched == GK_NN_PP_INTERLEAVED && t->grid.tp == 1;
	float *whole = NULL, *local = NULL;
	/* offloaded, a tensor rank's slices are scattered into a copy and
	 * written to the file from it */
	if ((placed || (t->grid.tp > 1 && (pp || o->off))) &&
	    !(local = malloc(gk_nn_nparams(t->m) * sizeof(float)))) {
		gk_err_sys(err, ENOMEM, "resume");
		goto out;
	}
	if (t->grid.tp > 1 || pp) {
		if (!(whole = malloc(nf * sizeof(float)))) {
			gk_err_sys(err, ENOMEM, "resume");
			goto out;
		}
		lo = 0;
		hi = nf;
	}
	for (int k = 0; k < 2; k++) {
		const gk_ckpt_entry *e = NULL;
		for (size_t i = 0; i < s->n; i++)
			if (!strcmp(s->e[i].name, names[k]))
				e = &s->e[i];
		if (!e || e->dtype != GK_DT_F32 || e->ndim != 1 || e->shape[0] != nf) {
			gk_errf(err, "checkpoint '%s': optimizer state '%s' is missing or not %zu f32 values (a checkpoint of another model?)",
				dir, names[k], nf);
			goto out;
		}
		float *to = whole ? whole : dst[k];
		for (size_t p = 0; p < e->nparts; p++) {
			const gk_ckpt_part *pt = &e->parts[p];
			uint64_t a = pt->el0 > lo ? pt->el0 : lo;
			uint64_t b = pt->el0 + pt->nel < hi ? pt->el0 + pt->nel : hi;
			if (a >= b)
				continue;
			if (o->off && !whole) {
				/* offloaded: through the update's buffer, a chunk at a time */
				size_t cap;
				float *buf = gk_nn_offload_buffer(o->off, &cap);
				for (uint64_t c = a; c < b; c += cap) {
					size_t n = b - c < cap ? (size_t)(b - c) : cap;
					if (gk_st_read(s->files[pt->file], pt->t, (c - pt->el0) * 4,
						       buf, n * 4, err) < 0 ||
					    gk_nn_offload_write(o->off, k, (size_t)(c - lo), n, buf,
								err) < 0)
						goto out;
				}
				continue;
			}
			if (gk_st_read(s->files[pt->file], pt->t, (a - pt->el0) * 4,
				       to + (a - lo), (size_t)(b - a) * 4, err) < 0)
				goto out;
		}
		if (whole && !pp) {
			gk_nn_tp_scatter(t->m, whole, o->off ? local : dst[k]);
			if (o->off && gk_nn_offload_write(o->off, k, 0, gk_nn_dp_moments_len(o), local,
							  err) < 0)
				goto out;
		} else if (pp) {
			const float *l = whole;
			if (local) {
				if (placed)
					gk_nn_pp_from_hf(t->m, whole, local);
				else
					gk_nn_tp_scatter(t->m, whole, local);
				l = local;
			}
			/* its pieces under ZeRO-1 (else the range and wte);
			 * offloaded, into the file at the same places */
			for (int g = 0; g < 2; g++) {
				size_t at = g ? o->per[0] : 0, n = o->own[g][1] - o->own[g][0];
				if (!o->off)
					memcpy(dst[k] + at, l + o->own[g][0], n * sizeof(float));
				else if (n && gk_nn_offload_write(o->off, k, at, n, l + o->own[g][0],
								  err) < 0)
					goto out;
			}
		}
	}
	rc = 0;
out:
	free(whole);
	free(local);
	gk_ckpt_close(s);
	gk_strlist_free(&files);
	return rc;
}

/*
 * This rank's error feedback (compressed communication) from the
 * checkpoint's run, when it had the same world, the same layout (ZeRO-0's
 * allreduce, or the reduce-scatter of ZeRO-1, 2 and 3:
 * gk_nn_dp_feedback_layout; a file without it, from before it was
 * written, by its length alone), the same grid (gk_nn_dp_feedback_grid:
 * none, or the same data-parallel groups, stages, tensor groups and
 * chunks, so the same segments; world is the checkpoint's data-parallel
 * groups) and the same length of feedback: then the resume continues bit
 * for bit.
 * Otherwise, or from a checkpoint without it, compression starts from zero
 * feedback, noted.
 */
static int add_note(gk_nn_trainer *t, const char *line, gk_err *err);

static int load_feedback(gk_nn_trainer *t, const char *dir, int64_t world, gk_err *err)
{
	size_t n = gk_nn_dp_feedback_len(t->dp);
	if (!n)
		return 0;
	char *name = gk_ckpt_rank_file(GK_CKPT_FEEDBACK, t->rank, t->world);
	char *path = name ? gk_ckpt_join(dir, name) : NULL;
	free(name);
	if (!path)
		return gk_err_sys(err, ENOMEM, "resume");
	gk_st_file *f = NULL;
	const gk_st_tensor *r = NULL;
	struct stat st;
	int rc = 0;
	if (world == t->grid.dp && stat(path, &st) == 0) {
		if (gk_st_open(&f, path, err) < 0) {
			free(path);
			return -1;
		}
		r = gk_st_find(f, "residual");
		const char *lay = gk_st_meta_get(f, GK_NN_FEEDBACK_META);
		const char *grid = gk_st_meta_get(f, GK_NN_FEEDBACK_GRID_META);
		char mine[64];
		gk_nn_dp_feedback_grid(t->dp, mine, sizeof(mine));
		if (r && (r->dtype != GK_DT_F32 || r->ndim != 1 || r->shape[0] != n ||
			  (lay && strcmp(lay, gk_nn_dp_feedback_layout(t->dp))) ||
			  strcmp(grid ? grid : "", mine)))
			r = NULL;
	}
	float *buf = r ? malloc(n * sizeof(float)) : NULL;
	if (r && !buf)
		rc = gk_err_sys(err, ENOMEM, "resume");
	else if (r && (gk_st_read(f, r, 0, buf, n * sizeof(float), err) < 0 ||
		       gk_nn_dp_feedback_set(t->dp, buf, err) < 0))
		rc = -1;
	else if (!r && t->rank == 0)
		rc = add_note(t, "compressed communication starts from zero error feedback (the "
			      "checkpoint's run kept none for this world and layout): the resume "
			      "is not bit for bit", err);
	free(buf);
	gk_st_close(f);
	free(path);
	return rc;
}

/* "" (a default the caller computes) as the user reads it */
static const char *shown(const char *arg)
{
	return arg && *arg ? arg : "its default";
}

/* One more line of t->resume_notes. */
static int add_note(gk_nn_trainer *t, const char *line, gk_err *err)
{
	char *n;
	if (asprintf(&n, "%s%s%s", t->resume_notes ? t->resume_notes : "",
		     t->resume_notes ? "\n" : "", line) < 0)
		return gk_err_sys(err, ENOMEM, "resume");
	free(t->resume_notes);
	t->resume_notes = n;
	return 0;
}

/*
 * The settings the checkpoint's run was started with (trainer.json's
 * "settings", absent in checkpoints of earlier versions) against this
 * run's: a setting that must stay is refused, one that may change is
 * noted. Every rank reads the same trainer.json, so every rank decides
 * the same (a refusal is agreed, exit 2, said once).
 */
static int compare_settings(gk_nn_trainer *t, json_t *j, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	json_t *set = json_object_get(j, "settings");
	if (!json_is_object(set) || !o->agree_arg || !o->agree_resume)
		return 0;
	for (size_t i = 0; i < o->nagree; i++) {
		json_t *e = json_object_get(set, o->agree[i].name);
		const char *v = json_string_value(json_object_get(e, "value"));
		const char *arg = json_string_value(json_object_get(e, "arg"));
		char now[24];
		snprintf(now, sizeof(now), "%016" PRIx64, o->agree[i].v);
		if (!v || !strcmp(v, now) || o->agree_resume[i] == GK_OPT_RESUME_FREE)
			continue;
		char line[512];
		if (o->agree_resume[i] == GK_OPT_RESUME_SAME) {
			t->agreed = 2;
			return gk_errf(err, "%s %s: the checkpoint's run has %s %s, and a resumed run "
				       "keeps it (start a new run from its weights with --init-from)",
				       o->agree[i].name, shown(o->agree_arg[i]), o->agree[i].name,
				       shown(arg));
		}
		snprintf(line, sizeof(line), "resumed with %s %s (the checkpoint's run: %s)", o->agree[i].name,
			 shown(o->agree_arg[i]), shown(arg));
		if (add_note(t, line, err) < 0)
			return -1;
	}
	/* the schedule as the checkpoint's run had it, at the next step */
	json_t *js = json_object_get(j, "schedule");
	const char *kind = json_string_value(json_object_get(js, "kind"));
	int k = kind ? gk_nn_sched_parse(kind) : -1;
	if (k < 0)
		return 0;
	gk_nn_sched old = {.kind = (gk_nn_sched_kind)k,
			   .lr = json_number_value(json_object_get(js, "lr")),
			   .min_lr = json_number_value(json_object_get(js, "min_lr")),
			   .warmup = json_integer_value(json_object_get(js, "warmup")),
			   .steps = json_integer_value(json_object_get(js, "steps"))};
	int64_t next = json_integer_value(json_object_get(j, "step")) + 1;
	double a = gk_nn_lr(&old, next), b = gk_nn_lr(&o->sched, next);
	if (a != b) {
		char line[256];
		snprintf(line, sizeof(line), "the schedule changed: step %" PRId64 "'s learning "
			 "rate is %.4g (the checkpoint's run: %.4g)", next, b, a);
		return add_note(t, line, err);
	}
	return 0;
}

/* Resume from step directory dir, which lib/ckpt committed as step want. */
int gk_nn_tr_resume_from(gk_nn_trainer *t, const char *dir, uint64_t want, gk_err *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/" GK_CKPT_TRAINER, dir);
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
	if (np != (int64_t)gk_nn_full_nparams(t->m)) {
		gk_errf(err, "read '%s': %" PRId64 " parameters; this model has %zu", path, np,
			gk_nn_full_nparams(t->m));
		goto out;
	}
	if (gk_json_get_int(j, "step", &step, err) < 0 ||
	    gk_json_get_int(j, "world", &world, err) < 0 ||
	    gk_json_get_int(j, "tokens", &tokens, err) < 0)
		goto out;
	json_t *sk = json_object_get(j, "skipped");
	if (json_is_integer(sk))
		skipped = json_integer_value(sk);
	/* every step trains at least one token, and step 0 none */
	if (step < 0 || (uint64_t)step != want || tokens < step || (step == 0 && tokens != 0) ||
	    skipped < 0 || skipped > step) {
		gk_errf(err, "read '%s': step %" PRId64 ", tokens %" PRId64 ", skipped %" PRId64
			" do not describe checkpoint step %" PRIu64, path, step, tokens, skipped, want);
		goto out;
	}
	if (!json_is_array(ds) || json_array_size(ds) != (size_t)world || world < 1) {
		gk_errf(err, "read '%s': 'data' is not one state per rank", path);
		goto out;
	}
	if (compare_settings(t, j, err) < 0)
		goto out;
	/* ZeRO-3: this rank's range of the parameters, as of the moments */
	if ((t->dp->zero3 ? gk_nn_load_range(t->m, dir, t->dp->lo, t->dp->hi, err)
			  : gk_nn_load(t->m, dir, err)) < 0 ||
	    load_moments(t, dir, err) < 0 ||
	    load_feedback(t, dir, world, err) < 0)
		goto out;
	/* world: the checkpoint's data-parallel groups (trainer.json's "world") */
	if (t->data) {
		json_t *mine = json_array_get(ds, world == t->grid.dp ? (size_t)t->grid.dp_rank : 0);
		char *s = json_dumps(mine, JSON_COMPACT);
		if (!s) {
			gk_err_sys(err, ENOMEM, "read '%s'", path);
			goto out;
		}
		if (world != t->grid.dp && !gk_nn_data_is_bin(t->data)) {
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
				 "data position remapped from %" PRId64 " ranks to %d", world, t->grid.dp);
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
