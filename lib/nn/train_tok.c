/*
 * train_tok.c - the run's tokenizer: which one (--tokenizer, else the
 * files beside the checkpoint the model comes from), whether the model
 * can take its ids, and its files in every checkpoint the run writes, so
 * that a step directory, ckpt-merge's directory of it and a later
 * --init-from of either decode and encode text as this run did; and
 * --sample's text, from the prompt's tokens to the sampled ones'.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/train_internal.h"

/* The largest tokenizer file read (GPT-2's tokenizer.json is 1.4 MB). */
#define TOK_FILE_MAX ((size_t)256 << 20)

/* 1 when dir holds a tokenizer file of any of its names. */
static int has_tok_files(const char *dir)
{
	static const char *const names[] = {GK_CKPT_TOK_JSON, GK_CKPT_TOK_VOCAB,
					    GK_CKPT_TOK_MERGES};
	for (size_t i = 0; i < GK_ARRAY_SIZE(names); i++) {
		char *p = gk_ckpt_join(dir, names[i]);
		int found = p && access(p, F_OK) == 0;
		free(p);
		if (found)
			return 1;
	}
	return 0;
}

/*
 * The bytes of the files the tokenizer came from, under the names a
 * step directory gives them: one file is a tokenizer.json (whatever it was
 * called), two are vocab.json and merges.txt, in gk_tok_paths' order.
 */
static int read_files(gk_nn_trainer *t, gk_err *err)
{
	const char *const *paths = gk_tok_paths(t->tok);
	size_t n = 0;
	while (paths[n])
		n++;
	if (n < 1 || n > GK_ARRAY_SIZE(t->tok_files))
		return gk_errf(err, "tokenizer '%s': read from %zu files", t->tok_from, n);
	for (size_t i = 0; i < n; i++) {
		struct gk_nn_tok_file *f = &t->tok_files[i];
		f->name = n == 1 ? GK_CKPT_TOK_JSON : i == 0 ? GK_CKPT_TOK_VOCAB : GK_CKPT_TOK_MERGES;
		if (gk_read_file(paths[i], TOK_FILE_MAX, &f->buf, &f->len, err) < 0)
			return -1;
	}
	return 0;
}

int gk_nn_tr_tok_resolve(gk_nn_trainer *t, gk_err *err)
{
	const char *from = t->o.tokenizer;
	int beside = 0;
	if (!from && t->model_dir && has_tok_files(t->model_dir)) {
		from = t->model_dir;
		beside = 1;
	}
	if (!from)
		return 0;
	if (!(t->tok_from = strdup(from)))
		return gk_err_sys(err, ENOMEM, "tokenizer");
	if (gk_tok_open(&t->tok, from, err) < 0) {
		if (!beside)
			return -1;
		gk_err_prefix(err, "the tokenizer of checkpoint '%s'", from);
		size_t l = strlen(err->msg);
		snprintf(err->msg + l, sizeof(err->msg) - l, " (put its files back, or name "
			 "the model's tokenizer with --tokenizer)");
		return -1;
	}
	/* the checkpoint's own, replaced by another: said, in case it is a slip */
	gk_tok *own = NULL;
	gk_err why;
	if (!beside && t->model_dir && has_tok_files(t->model_dir) &&
	    gk_tok_open(&own, t->model_dir, &why) == 0 &&
	    gk_tok_fingerprint(own) != gk_tok_fingerprint(t->tok))
		snprintf(t->tok_note, sizeof(t->tok_note), "--tokenizer '%s' is not the tokenizer "
			 "of checkpoint '%s' (it encodes text otherwise); the run uses '%s', and so do "
			 "its checkpoints", from, t->model_dir, from);
	gk_tok_close(own);
	uint32_t n = gk_tok_vocab_size(t->tok);
	if ((int64_t)n > t->cfg.vocab)
		return gk_errf(err, "tokenizer '%s': %" PRIu32 " tokens, more than the model's "
			       "vocabulary of %" PRId64 " (the ids from %" PRId64 " on have no "
			       "embedding): is it the model's tokenizer?", from, n, t->cfg.vocab,
			       t->cfg.vocab);
	return read_files(t, err);
}

/*
 * Every rank reads the tokenizer for itself, as it reads config.json: a
 * host with other files (a stale copy, none at all) would check shards
 * against another vocabulary than rank 0 samples and checkpoints with.
 * Their fingerprints must agree.
 */
int gk_nn_tr_tok_agree(gk_nn_trainer *t, gk_err *err)
{
	int rc = gk_nn_tr_agree_id(t, gk_nn_trainer_tok_fingerprint(t), err);
	if (rc <= 0)
		return rc;
	return gk_errf(err, "the ranks read different tokenizers (or some none): every rank must "
		       "find the same tokenizer files (--tokenizer, or beside the checkpoint)");
}

int gk_nn_tr_tok_save(const gk_nn_trainer *t, gk_ckpt_stage *s, gk_err *err)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(t->tok_files) && t->tok_files[i].name; i++) {
		const struct gk_nn_tok_file *f = &t->tok_files[i];
		char *p = gk_ckpt_stage_path(s, f->name);
		int rc = p ? gk_atomic_write_file(p, f->buf, f->len, 0644, err)
			   : gk_err_sys(err, ENOMEM, "checkpoint");
		free(p);
		if (rc < 0)
			return -1;
	}
	return 0;
}

void gk_nn_tr_tok_free(gk_nn_trainer *t)
{
	gk_tok_close(t->tok);
	free(t->tok_from);
	for (size_t i = 0; i < GK_ARRAY_SIZE(t->tok_files); i++)
		free(t->tok_files[i].buf);
}

const gk_tok *gk_nn_trainer_tok(const gk_nn_trainer *t)
{
	return t ? t->tok : NULL;
}

const char *gk_nn_trainer_tok_from(const gk_nn_trainer *t, const char **note)
{
	if (note)
		*note = t && t->tok_note[0] ? t->tok_note : NULL;
	return t && t->tok ? t->tok_from : NULL;
}

uint64_t gk_nn_trainer_tok_fingerprint(const gk_nn_trainer *t)
{
	return t && t->tok ? gk_tok_fingerprint(t->tok) : 0;
}

/* out's prompt as tokens (np of them; 0 without one) and room for n ids */
static int sample_begin(gk_nn_trainer *t, const char *prompt, int n, gk_nn_trainer_sampled *out,
			gk_err *err)
{
	int np = 0;
	if (prompt && (np = gk_nn_prompt_encode(&t->cfg, t->tok, prompt, strlen(prompt),
						&out->prompt, err)) < 0)
		return gk_err_prefix(err, "--prompt");
	out->nprompt = np;
	if (!(out->ids = malloc((size_t)n * sizeof(int32_t))))
		return gk_err_sys(err, ENOMEM, "sample");
	return 0;
}

/*
 * A model split over the grid samples in place (sample.c): rank 0 reads
 * the prompt and sends its tokens, its temperature and its top-k to every
 * rank (each rank's own options, and the last stage picks), the first
 * data-parallel group's pipelines generate (on GPUs the activations
 * between stages over the pipeline's NCCL communicator, pp_sched.c's),
 * and rank 0, the first stage's tensor rank 0 of the first, prints.
 * Under ZeRO-3 each rank holds its stage's slices whole while it samples,
 * as evaluation does.
 */
static int sample_grid(gk_nn_trainer *t, const char *prompt, int n, double temperature,
		       int top_k, gk_nn_trainer_sampled *out, gk_err *err)
{
	const gk_nn_train_opts *r = &t->o;
	int rc = t->rank == 0 ? sample_begin(t, prompt, n, out, err) : 0;
	int32_t has[3] = {out->prompt != NULL, out->nprompt, top_k};
	if (gk_nn_tr_agree_local(t, rc, err) < 0 ||
	    gk_comm_broadcast(t->comm, has, has, 3, GK_DT_I32, 0, err) < 0 ||
	    gk_comm_broadcast(t->comm, &temperature, &temperature, 1, GK_DT_F64, 0, err) < 0)
		return -1;
	if (t->rank != 0) {
		out->nprompt = has[1];
		if (!(out->ids = malloc((size_t)n * sizeof(int32_t))) ||
		    (has[0] && !(out->prompt = malloc(((size_t)has[1] + 1) * sizeof(int32_t)))))
			rc = gk_err_sys(err, ENOMEM, "sample");
	}
	if (gk_nn_tr_agree_local(t, rc, err) < 0 ||
	    (has[1] > 0 && gk_comm_broadcast(t->comm, out->prompt, out->prompt, (size_t)has[1],
					     GK_DT_I32, 0, err) < 0) ||
	    gk_nn_dp_params_full(t->dp, err) < 0)
		return -1;
	/* without a prompt, after an end-of-text token (gk_nn_trainer_sample) */
	if (t->grid.dp_rank == 0)
		rc = gk_nn_sample_grid(t->m, t->grid.ppc, gk_nn_tr_pp_messages(t), r->batch, r->seq,
				       has[0] ? out->prompt : &r->eot, has[0] ? has[1] : 1, n,
				       temperature, has[2], r->seed, out->ids, err);
	gk_nn_dp_params_shard(t->dp);
	return rc;
}

int gk_nn_trainer_sample(gk_nn_trainer *t, const char *prompt, int n, double temperature,
			 int top_k, gk_nn_trainer_sampled *out, gk_err *err)
{
	const gk_nn_config *cfg = &t->cfg;
	const gk_nn_train_opts *r = &t->o;
	memset(out, 0, sizeof(*out));
	int rc = 0;
	if (t->grid.tp > 1 || t->grid.pp > 1) {
		if (sample_grid(t, prompt, n, temperature, top_k, out, err) < 0)
			goto fail;
	} else {
		/* ZeRO-3: every rank sends rank 0 its range of the parameters */
		int z3 = t->dp && t->dp->zero3;
		if (t->rank != 0 && !z3)
			return 0;
		if (t->rank == 0)
			rc = sample_begin(t, prompt, n, out, err);
		/* a prompt rank 0 cannot read fails the job before the parameters move */
		if (z3 && (gk_nn_tr_agree_local(t, rc, err) < 0 ||
			   gk_nn_dp_params_root(t->dp, err) < 0))
			goto fail;
		if (rc < 0)
			goto fail;
		if (t->rank != 0)
			return 0;
		/* without a prompt, a sample starts as a document does: after an
		 * end-of-text token, which it does not print */
		rc = gk_nn_sample_prompt(t->m, r->batch, r->seq, out->prompt ? out->prompt : &r->eot,
					 out->prompt ? out->nprompt : 1, n, temperature, top_k,
					 r->seed, out->ids, err);
		if (z3) /* rank 0 keeps its own range again */
			gk_nn_dp_params_shard(t->dp);
		if (rc < 0)
			goto fail;
	}
	if (t->rank != 0) {
		gk_nn_trainer_sample_free(out);
		return 0;
	}
	out->n = (size_t)n;
	out->is_text = t->tok || cfg->vocab == GK_NN_BYTE_VOCAB;
	/* the prompt as given, then the sample's text */
	size_t cap = 0, plen = prompt ? strlen(prompt) : 0;
	if (plen) {
		if (GK_GROW(out->text, cap, plen, "sample", err) < 0)
			goto fail;
		memcpy(out->text, prompt, plen);
		out->len = plen;
	}
	if (gk_nn_sample_text(cfg, t->tok, out->ids, out->n, &out->text, &out->len, &cap, err) < 0)
		goto fail;
	return 0;
fail:
	gk_nn_trainer_sample_free(out);
	return -1;
}

void gk_nn_trainer_sample_free(gk_nn_trainer_sampled *s)
{
	free(s->prompt);
	free(s->ids);
	free(s->text);
	memset(s, 0, sizeof(*s));
}
