/*
 * train.c - gpu-train's loop: steps of gradient accumulation, clipping,
 * AdamW and schedules, signals between micro-steps, checkpoints at step
 * boundaries, and evaluation.
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
 * The loop does not know the backend or how the work is split: the model
 * runs forward and backward where it lives (gk_nn_forward, gk_nn_backward),
 * and the gradient path (dp.c: data parallel, ZeRO-0 and ZeRO-1) reduces,
 * takes the norm and updates. The trainer's other rooms are listed in
 * train_internal.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "nn/train_internal.h"
#include "tok/tok.h"

/*
 * The data position as JSON, malloc'ed, or NULL without memory. It has no
 * fixed bound: a remapped epoch keeps every earlier rank's position.
 */
char *gk_nn_tr_data_state(const gk_nn_data *d)
{
	int n = gk_nn_data_state(d, NULL, 0);
	char *s = n < 0 ? NULL : malloc((size_t)n + 1);
	if (s)
		gk_nn_data_state(d, s, (size_t)n + 1);
	return s;
}

/*
 * The model's tokenizer, which tokenized data must have been made with:
 * the run's (train_tok.c: --tokenizer, else the checkpoint's own). 1 and
 * its fingerprint and name, 0 when the run has none.
 */
static int model_tokenizer(const gk_nn_trainer *t, uint64_t *fp, char *name, size_t len)
{
	if (!t->tok)
		return 0;
	*fp = gk_tok_fingerprint(t->tok);
	const char *const *paths = gk_tok_paths(t->tok);
	size_t at = 0;
	name[0] = '\0';
	for (size_t i = 0; paths && paths[i] && at < len; i++) {
		int r = snprintf(name + at, len - at, "%s'%s'", i ? ", " : "", paths[i]);
		at += r > 0 ? (size_t)r : 0;
	}
	return 1;
}

int gk_nn_tr_data_open(gk_nn_trainer *t, gk_nn_data **d, const char *src, int loop,
		     int shuffle, gk_err *err)
{
	gk_nn_data_opts dop;
	gk_nn_train_data_opts(&t->o, t->cfg.vocab, &dop);
	/* the ranks of a tensor group read the same micro-batches */
	dop.rank = t->grid.dp_rank;
	dop.world = t->grid.dp;
	dop.shuffle = shuffle;
	dop.loop = loop;
	if (!t->eot_asked)
		dop.eot = -1; /* tokenized shards' own, else vocab - 1 */
	if (gk_nn_data_open(d, src, &dop, err) < 0)
		return -1;
	/* Data tokenized with another vocabulary than the model's is refused. */
	if (!gk_nn_data_tokenized(*d))
		return 0;
	uint64_t fp;
	char name[1024];
	int k = model_tokenizer(t, &fp, name, sizeof(name));
	if (gk_nn_data_check_tokenizer(*d, k ? &fp : NULL, k ? name : NULL, t->cfg.vocab,
				       err) < 0) {
		gk_err_prefix(err, "data '%s'", src);
		gk_nn_data_close(*d);
		*d = NULL;
		return -1;
	}
	return 0;
}

int gk_nn_train_dump_data(const gk_nn_train_opts *o, const gk_nn_data_opts *base, int64_t n,
			  void (*emit)(struct json_t *line, void *ctx), void *ctx, gk_err *err)
{
	gk_rank_info ri;
	gk_nn_grid g;
	if (gk_rank_discover(&ri, err) < 0)
		return -1;
	if (gk_nn_grid_layout_pp(ri.world, o->tp > 1 ? o->tp : 1, o->pp > 1 ? o->pp : 1, ri.rank,
				 &g, err) < 0)
		return -2;
	if (g.tp_rank || g.pp_rank)
		return 0;
	gk_nn_data_opts dop = *base;
	dop.rank = g.dp_rank;
	dop.world = g.dp;
	dop.loop = 1;
	gk_nn_data *d;
	if (gk_nn_data_open(&d, o->data, &dop, err) < 0)
		return -1;
	size_t bt = (size_t)dop.batch * (size_t)dop.seq;
	int32_t *in = malloc(bt * 4), *tg = malloc(bt * 4);
	int rc = 0;
	if (!in || !tg)
		rc = gk_err_sys(err, ENOMEM, "--dump-data: a batch of %zu tokens", bt);
	for (int64_t k = 0; k < n && rc == 0; k++) {
		if (gk_nn_data_next(d, in, tg, err) <= 0) {
			rc = -1;
			break;
		}
		json_t *rows = json_array(), *line = NULL;
		for (int b = 0; rows && b < dop.batch; b++) {
			json_t *r = json_array();
			for (int t = 0; r && t < dop.seq; t++)
				json_array_append_new(r, json_integer(in[(size_t)b * dop.seq + t]));
			if (r)
				json_array_append_new(r, json_integer(tg[(size_t)b * dop.seq +
									 dop.seq - 1]));
			json_array_append_new(rows, r);
		}
		if (rows)
			line = json_pack("{s:i,s:I,s:o}", "rank", g.dp_rank, "micro", (json_int_t)k,
					 "rows", rows);
		if (!line)
			rc = gk_err_sys(err, ENOMEM, "--dump-data: micro-batch %" PRId64, k);
		else
			emit(line, ctx);
	}
	free(in);
	free(tg);
	gk_nn_data_close(d);
	return rc;
}

/*
 * --val-data is first read at the first --eval-every step, or after the
 * last step: one that cannot be opened, or that holds no whole
 * micro-batch on any rank, would end the run there, with the steps since
 * the last checkpoint lost. Look at it before step 1 instead.
 */
int gk_nn_tr_check_val_data(gk_nn_trainer *t, gk_err *err)
{
	gk_nn_data *d = NULL;
	int r = gk_nn_tr_data_open(t, &d, t->o.val_data, 0, 0, err);
	if (r == 0)
		r = gk_nn_data_next(d, t->in, t->tg, err);
	if (gk_nn_tr_agree_local(t, r < 0 ? -1 : 0, err) < 0) {
		gk_nn_data_close(d);
		return -1;
	}
	if (gk_nn_tr_agree_data(t, d, t->o.val_data, err) < 0)
		r = -1;
	gk_nn_data_close(d);
	if (r < 0)
		return -1;
	double n = r;
	if (gk_nn_tr_sum(t, &n, 1, err) < 0)
		return -1;
	if (n > 0)
		return 0;
	t->agreed = 1;
	return gk_errf(err, "evaluate '%s': not one whole micro-batch of %d x %d tokens",
		       t->o.val_data, t->o.batch, t->o.seq + 1);
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
	if (gk_nn_tr_sum(t, v, 2, err) < 0)
		return -1;
	if ((v[0] > 0 || v[1] > 0) && t->o.stop_seen)
		*t->o.stop_seen = 1; /* the stop is under way */
	return v[1] > 0 ? 2 : v[0] > 0;
}

static int eval_loss(gk_nn_trainer *t, const char *src, int64_t batches,
		     double *loss, int64_t *nb, gk_err *err)
{
	gk_nn_data *d;
	if (gk_nn_tr_data_open(t, &d, src, 0, 0, err) < 0)
		return -1;
	if (gk_nn_tr_agree_data(t, d, src, err) < 0) {
		gk_nn_data_close(d);
		return -1;
	}
	double acc[2] = {0, 0};
	/* ZeRO-3: the whole model, once: the ranks may hold different numbers
	 * of batches, and a gather per block would need the same on all */
	int rc = gk_nn_dp_params_full(t->dp, err);
	gk_nn_set_eval(t->m, 1); /* no backward follows: a GPU reads the logits once */
	/* a pipeline: forward through its stages, the loss on the last */
	if (t->grid.pp > 1)
		rc = gk_nn_tr_pp_eval(t, d, batches, acc, err);
	for (int64_t k = 0; rc == 0 && t->grid.pp == 1 && (batches <= 0 || k < batches); k++) {
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
	gk_nn_set_eval(t->m, 0);
	gk_nn_data_close(d);
	gk_nn_dp_params_shard(t->dp);
	if (rc < 0)
		return -1;
	if (t->grid.tp_rank != 0) /* a tensor group's ranks evaluated the same batches */
		acc[0] = acc[1] = 0;
	if (gk_nn_tr_sum(t, acc, 2, err) < 0)
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

/* tests: the rank of --test_slow_rank spends test_slow_ms more in part */
static void test_slow(const gk_nn_trainer *t, int part)
{
	const gk_nn_train_opts *o = &t->o;
	if (o->test_slow_ms <= 0 || o->test_slow_rank != t->rank || o->test_slow_part != part)
		return;
	struct timespec ts = {o->test_slow_ms / 1000, (o->test_slow_ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* tests: until a signal handler sets *stop, every 10 ms */
static void test_wait_signal(volatile sig_atomic_t *stop)
{
	while (!*stop) {
		struct timespec ts = {0, 10000000L};
		nanosleep(&ts, NULL);
	}
}

/*
 * The micro-steps of one step: forward and backward(1/A) of each, the
 * last one with the gradient path's ready callback, which starts the
 * buckets while backward runs. Returns 0, or the stop a signal asked for
 * between micro-steps (1 or 2; *done of them ran), or -1.
 */
static int accumulate(gk_nn_trainer *t, double *lsum, int *done, double *part, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	int cut;
	*lsum = 0;
	*done = 0;
	/* the scale of every backward below (and of a pipeline's): a GPU's
	 * forward folds it in */
	gk_nn_set_grad_scale(t->m, 1.0f / (float)o->grad_accum);
	if (t->grid.pp > 1) {
		/* the pipeline's schedule: its micro-batches are in flight
		 * together, and a signal waits for the step's end */
		if (gk_nn_tr_pp_accumulate(t, lsum, part, err) < 0)
			return -1;
		*done = o->grad_accum;
		return 0;
	}
	/*
	 * Compressed ZeRO-2 and 3 (dp->zero2 covers both) pack each
	 * micro-step's buckets, moving the error feedback, which the previous
	 * step's checkpoint cannot take back: a signal waits for the step's
	 * end there, as a pipeline's does.
	 */
	int cuttable = o->stop && !(t->dp->zero2 && t->dp->compress != GK_COMM_COMPRESS_NONE);
	for (int a = 0; a < o->grad_accum; a++) {
		if (a > 0 && a == o->test_wait_micro && t->step + 1 == o->test_wait_step && o->stop)
			test_wait_signal(o->stop);
		if (a > 0 && cuttable && (cut = agree_stop(t, err)) != 0)
			return cut;
		float l;
		double ta = gk_now();
		test_slow(t, GK_NN_PART_DATA);
		int r = gk_nn_data_next(t->data, t->in, t->tg, err);
		if (r == 0)
			r = gk_errf(err, "data '%s': no more micro-batches", o->data);
		double tb = gk_now();
		part[GK_NN_PART_DATA] += tb - ta;
		test_slow(t, GK_NN_PART_COMPUTE);
		/* ZeRO-3's gathers before forward are the compute's, less
		 * their waits (bwd_wait), as those during it */
		if (r < 0 || gk_nn_dp_micro_begin(t->dp, a, o->grad_accum, err) < 0 ||
		    gk_nn_forward(t->m, t->in, t->tg, &l, err) < 0)
			return -1;
		*lsum += l;
		int last = a == o->grad_accum - 1;
		gk_nn_ready_fn cb = gk_nn_dp_ready_fn(t->dp, last);
		if (gk_nn_backward(t->m, 1.0f / (float)o->grad_accum, cb, t->dp, err) < 0 ||
		    gk_nn_dp_micro_end(t->dp, a, o->grad_accum, err) < 0)
			return -1;
		part[GK_NN_PART_COMPUTE] += gk_now() - tb;
		(*done)++;
	}
	return 0;
}

/*
 * After backward: the gradients reduced, one small allreduce of
 * v = [loss, checkpoint signal, stop signal, ZeRO-1's sum of squares, bad
 * samples, and in v[5..7] the checkpoint's counts], the global norm, the
 * clip and the update (unless the step is skipped). Fills lg's loss, lr,
 * norm, skipped and communication times, and part's communication and
 * optimizer.
 */
static int update(gk_nn_trainer *t, int64_t step, double lsum, double v[8],
		  gk_nn_train_log *lg, double *part, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	gk_nn_dp *dp = t->dp;
	test_slow(t, GK_NN_PART_COMM);
	double tb = gk_now();
	if (gk_nn_dp_reduce(dp, tb, err) < 0)
		return -1;
	/* a pipeline: the tied embedding's two parts summed (first and last stage) */
	if (t->grid.pp > 1 && gk_nn_tr_pp_embed_sum(t, err) < 0)
		return -1;
	double tc = gk_now(), exposed = tc - tb, ss;
	if (gk_nn_dp_local_sumsq(dp, &ss, err) < 0)
		return -1;
	int sig = o->stop ? (int)*o->stop : 0;
	/* the loss is the last stage's (the others' lsum is 0) */
	v[0] = t->grid.pp_rank == t->grid.pp - 1 ? lsum / o->grad_accum : 0;
	v[1] = sig == 1;
	v[2] = sig == 2;
	v[3] = ss;
	v[4] = t->grid.tp_rank == 0 && t->grid.pp_rank == 0 ? /* once a group */
	       (double)gk_nn_data_bad(t->data) : 0;
	gk_nn_tr_ckpt_counts(t, v + 5);
	if (t->world > 1)
		gk_comm_trace_tag(t->comm, "loss and norm", -1); /* for the flight recorder */
	if (gk_nn_tr_sum(t, v, 8, err) < 0)
		return -1;
	double loss = v[0] / (t->world / t->grid.pp), norm;
	/* a sharded stage's pieces are in v[3], the world's sum */
	if (t->grid.pp > 1 && !dp->ppshard ? gk_nn_tr_pp_norm(t, &norm, err) < 0 :
			     gk_nn_dp_norm(dp, v[3], &norm, err) < 0)
		return -1;
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
		/* every step skipped: the model or the data is broken, and a
		 * run that went on would end "done" and checkpoint it as if it
		 * had trained */
		if (++t->skip_run >= GK_NN_MAX_SKIPS) {
			t->agreed = 1;
			return gk_errf(err, "step %" PRId64 ": %d steps in a row skipped (the %s is %s): "
				       "the model or the data is broken", step, GK_NN_MAX_SKIPS,
				       isfinite(loss) ? "gradient norm" : "loss",
				       isnan(isfinite(loss) ? norm : loss) ? "NaN" : "infinite");
		}
	} else {
		t->skip_run = 0;
	}
	/* torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1 */
	float sc = o->clip > 0 && norm > o->clip ? (float)(o->clip / (norm + 1e-6)) : 1.0f;
	double gathered = 0, tu = gk_now();
	test_slow(t, GK_NN_PART_OPTIMIZER);
	if (!skip && gk_nn_dp_update(dp, &o->adamw, (float)lr, step, sc, &gathered, err) < 0)
		return -1;
	part[GK_NN_PART_OPTIMIZER] += gk_now() - tu - gathered;
	/* ZeRO-2's waits for its buckets stood inside backward's time */
	part[GK_NN_PART_COMM] += exposed + gathered + dp->bwd_wait;
	part[GK_NN_PART_COMPUTE] -= dp->bwd_wait;
	lg->loss = loss;
	lg->lr = lr;
	lg->grad_norm = norm;
	lg->skipped = skip;
	lg->comm_ms = dp->comm_start ? (tc - dp->comm_start) * 1e3 : 0;
	lg->exposed_comm_ms = (exposed + gathered + dp->bwd_wait) * 1e3;
	return 0;
}

uint64_t gk_nn_trainer_step_tokens(const gk_nn_trainer *t)
{
	return (uint64_t)t->o.batch * (uint64_t)t->o.seq * (uint64_t)t->o.grad_accum *
	       (uint64_t)t->grid.dp;
}

int gk_nn_trainer_run(gk_nn_trainer *t, gk_nn_train_hooks *h,
		      gk_nn_train_summary *sum, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	memset(sum, 0, sizeof(*sum));
	sum->first_step = t->step + 1;
	sum->data_note = t->data_note[0] ? t->data_note : NULL;
	sum->min_loss = INFINITY;
	double flops = gk_nn_flops(t->m);
	uint64_t step_tokens = gk_nn_trainer_step_tokens(t);
	double t_run = gk_now();
	int64_t last_ckpt = -1;
	int stop = 0;
	while (t->step < o->steps && (o->until <= 0 || t->step < o->until)) {
		int64_t step = t->step + 1;
		double t0 = gk_now();
		t->dp->comm_start = 0;
		t->dp->bwd_wait = 0;
		t->dp->gathers = t->dp->prefetched = 0;
		/* the flight recorder names each collective's step */
		gk_comm_trace_step(t->comm, step);
		if (t->dp->gcomm && t->dp->gcomm != t->comm)
			gk_comm_trace_step(t->dp->gcomm, step);
		/* and the grid's groups' (a split's stall says its step too) */
		gk_comm *grp[] = {t->grid.tpc, t->grid.ppc, t->grid.embc, t->grid.dpc};
		for (size_t i = 0; i < GK_ARRAY_SIZE(grp); i++)
			if (grp[i] && grp[i] != t->comm && grp[i] != t->dp->gcomm)
				gk_comm_trace_step(grp[i], step);
		gk_nn_zero_grad(t->m);
		if (o->grad_accum > 1 && o->stop) {
			free(t->snap);
			if (!(t->snap = gk_nn_tr_data_state(t->data)))
				return gk_err_sys(err, ENOMEM, "step %" PRId64, step);
		}
		double lsum, part[GK_NN_NPARTS] = {0};
		uint64_t tpb = gk_nn_tp_bytes(t->m);
		int done, cut = accumulate(t, &lsum, &done, part, err);
		if (cut < 0)
			return -1;
		if (cut) {
			if (gk_nn_data_restore(t->data, t->snap, err) < 0)
				return gk_err_prefix(err, "step %" PRId64 " stopped by a signal", step);
			sum->dropped = done;
			stop = cut;
			break;
		}
		double v[8];
		gk_nn_train_log lg = {.step = step, .val_loss = NAN};
		if (update(t, step, lsum, v, &lg, part, err) < 0)
			return -1;
		if ((v[1] > 0 || v[2] > 0) && o->stop_seen)
			*o->stop_seen = 1; /* the stop is under way */
		t->step = step;
		t->tokens += step_tokens;
		double t1 = gk_now();
		test_slow(t, GK_NN_PART_CHECKPOINT);
		if (gk_nn_tr_ckpt_progress(t, v + 5, h, err) < 0)
			return -1;
		part[GK_NN_PART_CHECKPOINT] += gk_now() - t1;
		lg.tokens = t->tokens;
		lg.tp_bytes = gk_nn_tp_bytes(t->m) - tpb;
		lg.gathers = t->dp->gathers;
		lg.prefetched = t->dp->prefetched;
		gk_nn_tr_pp_log(t, &lg);
		lg.step_ms = (t1 - t0) * 1e3;
		lg.bad_samples = (int64_t)v[4];
		lg.tokens_per_s = step_tokens / (t1 - t0);
		lg.gflops = flops * o->grad_accum / (t1 - t0) / 1e9;
		sum->steps++;
		sum->last_loss = lg.loss;
		sum->bad_samples = lg.bad_samples;
		if (lg.loss < sum->min_loss)
			sum->min_loss = lg.loss;
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
			double tk = gk_now();
			/* One checkpoint in flight: an older one must be done first. */
			if (gk_nn_tr_ckpt_finish(t, h, err) < 0 || gk_nn_tr_ckpt_start(t, h, err) < 0)
				return -1;
			part[GK_NN_PART_CHECKPOINT] += gk_now() - tk;
			last_ckpt = step;
			/* a signal during that wait stops at this checkpoint, not the next step's */
			if (v[1] == 0 && o->stop && (stop = agree_stop(t, err)) != 0)
				break;
		}
		/* the step's parts; evaluation and rank 0's output are in none */
		part[GK_NN_PART_STEP] = t1 - t0 + part[GK_NN_PART_CHECKPOINT];
		part[GK_NN_PART_BUSY] = part[GK_NN_PART_STEP] - part[GK_NN_PART_COMM];
		gk_nn_tr_straggler_step(t, part);
		if (gk_nn_tr_straggler_exchange(t, step, h, err) < 0)
			return -1;
		if (v[1] > 0) {
			stop = 1;
			break;
		}
	}
	if (stop < 0)
		return -1;
	if (stop != 2 && o->ckpt_dir && last_ckpt != t->step && t->step > 0 &&
	    sum->steps > 0) {
		if (gk_nn_tr_ckpt_finish(t, h, err) < 0 || gk_nn_tr_ckpt_start(t, h, err) < 0)
			return -1;
	}
	if (gk_nn_tr_ckpt_finish(t, h, err) < 0)
		return -1;
	sum->seconds = gk_now() - t_run;
	sum->tokens_per_s = sum->seconds > 0 ? (double)step_tokens * sum->steps / sum->seconds : 0;
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
