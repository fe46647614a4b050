/*
 * sample.c - text from a prompt, and generation one token at a time
 * with a key/value cache, on
 * the CPU model: each new token runs the blocks over one row and attends
 * to the keys and values the earlier positions left in the cache, so n
 * sampled tokens cost n single-row passes instead of n full forwards of
 * the training batch (llm.c and nanoGPT recompute the whole window per
 * token; transformers' generate keeps past_key_values, as here).
 *
 * The same kernels and per-element math as the forward (model.c): the
 * logits agree with a forward over the same prefix to float rounding
 * (the attention sums in another order), which tests/unit/nn_misc.c
 * checks position by position.
 *
 * A model split over a grid decodes in place, never gathered: under
 * tensor parallelism each rank of the group runs its heads (its columns
 * of c_attn and c_fc, its rows of the projections, the sums over the
 * group between them, as model.c's forward) and caches its heads' keys
 * and values; a pipeline stage runs and caches its layers, the row of
 * the residual stream (C floats) passed stage to stage as a message.
 * The head's logits, split by vocabulary rows, are gathered on the
 * group (vocab_pad floats a token, beside the 2 L + 1 allreduces of C
 * floats of the embedding and the layers), as Megatron-LM's text
 * generation gathers them (parallel_output=False): the sampler then
 * reads the whole row in the vocabulary's order, as one rank's does, so
 * that the same logits give the same token; a vocabulary-parallel top-k
 * and softmax would sum the probabilities in another order. The last stage's tensor rank 0 picks,
 * and the token goes to its group and then to every stage of its
 * pipeline, so that each stage keeps the history and knows, without
 * another message, whether the next token goes through the cache or a
 * forward of the window.
 *
 * On GPUs a split model samples in place too, but without the cache
 * (one GPU has none either): each token is a forward of the window
 * through the stages, as evaluation's batches go (pp_sched.c), at the
 * model's batch (one GPU's shapes: its bits), the B x T x C activations
 * sent stage to stage over the pipeline's NCCL communicator in device
 * memory and the tensor group's sums over its own (model_tp_cuda.c); the
 * last stage's logits come to the host, and the rest is the CPU's: the
 * vocabulary slices gathered and the token shared over the host groups.
 * Gathering the model instead would need the whole of it on one device,
 * which a split model is split not to need.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "nn/internal.h"
#include "nn/math.h"

struct gk_nn_decoder {
	gk_nn_model *m;
	int len, max;                /* positions cached; capacity */
	int *at;                     /* layer l's place in the cache; -1: not
				      * this stage's */
	float *k, *v;                /* the stage's layers x max x Cq each */
	float *x, *ln, *qkv, *y, *res, *fch, *fchg, *att, *slice, *logits;
	float mean, rstd;
};

/* a stage's model chunks: the interleaved schedule's, else one */
static int chunks(const gk_nn_model *m)
{
	return m->ppv > 1 ? m->ppv : 1;
}

/* the layers [*l0, *l1) of this stage's chunk c (the model's at pp 1) */
static void chunk_layers(const gk_nn_model *m, int c, int *l0, int *l1)
{
	gk_err ignore;
	gk_nn_pp_chunk_layers(m->c.layers, m->pp, m->ppv, m->ppr, c, l0, l1, &ignore);
}

int gk_nn_decoder_new(gk_nn_decoder **out, gk_nn_model *m, gk_err *err)
{
	*out = NULL;
	if (m->cu)
		return gk_errf(err, "decoding with a cache: the model is on the GPU");
	size_t C = (size_t)m->c.hidden, L = (size_t)m->c.layers, tp = (size_t)m->tp;
	size_t Cq = C / tp, F = 4 * C / tp, Vp = (size_t)m->c.vocab_pad;
	size_t max = (size_t)m->c.positions, held = 0;
	gk_nn_decoder *d = calloc(1, sizeof(*d));
	if (!d || !(d->at = malloc(L * sizeof(int)))) {
		free(d);
		return gk_err_sys(err, ENOMEM, "decoder");
	}
	d->m = m;
	d->max = (int)max;
	for (size_t l = 0; l < L; l++)
		d->at[l] = -1;
	for (int c = 0; c < chunks(m); c++) {
		int l0, l1;
		chunk_layers(m, c, &l0, &l1);
		for (int l = l0; l < l1; l++)
			d->at[l] = (int)held++;
	}
	d->k = malloc(held * max * Cq * sizeof(float));
	d->v = malloc(held * max * Cq * sizeof(float));
	/* one block of scratch, carved in this order (slice: a rank's
	 * vocabulary rows of the logits, zero in its padding) */
	float **part[] = {&d->x, &d->ln, &d->qkv, &d->y, &d->res, &d->fch, &d->fchg,
			  &d->att, &d->logits, &d->slice};
	size_t len[] = {C, C, 3 * Cq, Cq, C, F, F, max, Vp, tp > 1 ? Vp / tp : 0};
	size_t n = 0;
	for (size_t i = 0; i < GK_ARRAY_SIZE(len); i++)
		n += len[i];
	float *s = calloc(n, sizeof(float));
	if (!d->k || !d->v || !s) {
		free(s);
		gk_nn_decoder_free(d);
		return gk_err_sys(err, ENOMEM, "decoder: key/value cache of %zu positions", max);
	}
	for (size_t i = 0; i < GK_ARRAY_SIZE(len); i++) {
		*part[i] = s;
		s += len[i];
	}
	*out = d;
	return 0;
}

void gk_nn_decoder_free(gk_nn_decoder *d)
{
	if (!d)
		return;
	free(d->at);
	free(d->k);
	free(d->v);
	free(d->x);
	free(d);
}

void gk_nn_decoder_reset(gk_nn_decoder *d)
{
	d->len = 0;
}

int gk_nn_decoder_len(const gk_nn_decoder *d)
{
	return d->len;
}

float *gk_nn_decoder_stream(gk_nn_decoder *d)
{
	return d->x;
}

/* y (Cq) = causal attention of the newest row's queries over rows 0..t,
 * for the rank's heads */
static void attend(gk_nn_decoder *d, int l, int t)
{
	const gk_nn_model *m = d->m;
	int C = (int)m->c.hidden, NH = (int)m->c.heads, hs = C / NH;
	int Cq = C / m->tp, NHq = NH / m->tp;
	float scale = 1.0f / sqrtf((float)hs);
	const float *K = d->k + (size_t)d->at[l] * d->max * Cq;
	const float *V = d->v + (size_t)d->at[l] * d->max * Cq;
	for (int h = 0; h < NHq; h++) {
		const float *q = d->qkv + h * hs;
		for (int j = 0; j <= t; j++) {
			const float *k = K + (size_t)j * Cq + h * hs;
			float s = 0.0f;
			for (int i = 0; i < hs; i++)
				s += q[i] * k[i];
			d->att[j] = scale * s;
		}
		gk_nn_cpu_softmax(d->att, t + 1);
		float *y = d->y + h * hs;
		memset(y, 0, (size_t)hs * sizeof(float));
		for (int j = 0; j <= t; j++) {
			const float *v = V + (size_t)j * Cq + h * hs;
			float a = d->att[j];
			for (int i = 0; i < hs; i++)
				y[i] += a * v[i];
		}
	}
}

/* the tensor group's sum of n floats in place; nothing at tp 1 */
static int group_sum(gk_nn_model *m, float *x, size_t n, gk_err *err)
{
	if (m->tp == 1)
		return 0;
	return gk_comm_allreduce(m->tpc, x, x, n, GK_DT_F32, GK_COMM_SUM, NULL, err);
}

/*
 * out (C) = res + inp (K) @ w + b; row-parallel under tensor
 * parallelism, as model.c's proj_fwd: the group's sum of its products,
 * then the residual and the bias once.
 */
static int proj(gk_nn_model *m, float *out, const float *inp, const float *w, const float *b,
		const float *res, int K, gk_err *err)
{
	int C = (int)m->c.hidden;
	if (m->tp == 1) {
		gk_nn_cpu_matmul_fwd(out, inp, w, b, res, NULL, 0, 1, K, C, m->nt);
		return 0;
	}
	gk_nn_cpu_matmul_fwd(out, inp, w, NULL, NULL, NULL, 0, 1, K, C, m->nt);
	if (group_sum(m, out, (size_t)C, err) < 0)
		return -1;
	gk_nn_tp_row_finish(out, res, b, 1, C, m->nt);
	return 0;
}

/* x = the embedding of tok at position t: vocabulary-parallel under
 * tensor parallelism (the group's sum of its masked lookups) */
static int embed(gk_nn_decoder *d, int32_t tok, int t, gk_err *err)
{
	gk_nn_model *m = d->m;
	int C = (int)m->c.hidden;
	const float *p = m->params;
	if (m->tp == 1) {
		for (int c = 0; c < C; c++)
			d->x[c] = p[m->wte + (size_t)tok * C + c] + p[m->wpe + (size_t)t * C + c];
		return 0;
	}
	int64_t Vl = m->c.vocab_pad / m->tp;
	gk_nn_tp_embed_fwd(d->x, &tok, p + m->wte, (int64_t)m->tpr * Vl, (int)Vl, 1, C, m->nt);
	if (group_sum(m, d->x, (size_t)C, err) < 0)
		return -1;
	gk_nn_tp_add_pos(d->x, p + m->wpe, 1, 1, t, C, m->nt);
	return 0;
}

/* The whole row of logits in d->logits from this rank's vocabulary rows
 * (lg, vocab_pad / tp of them): gathered over the tensor group. */
static int gather_logits(gk_nn_decoder *d, const float *lg, gk_err *err)
{
	gk_nn_model *m = d->m;
	size_t Vl = (size_t)(m->c.vocab_pad / m->tp);
	return gk_comm_allgather(m->tpc, lg, d->logits, Vl, GK_DT_F32, NULL, err);
}

int gk_nn_decode_chunk(gk_nn_decoder *d, int chunk, int32_t tok, const float **logits,
		       gk_err *err)
{
	gk_nn_model *m = d->m;
	int C = (int)m->c.hidden, L = (int)m->c.layers, nt = m->nt;
	int Cq = C / m->tp, F = 4 * C / m->tp;
	float eps = m->c.ln_eps;
	int l0, l1;
	*logits = NULL;
	if (chunk < 0 || chunk >= chunks(m))
		return gk_errf(err, "decode: no chunk %d of this stage's %d", chunk, chunks(m));
	if (tok < 0 || tok >= m->c.vocab)
		return gk_errf(err, "decode token %d: not in 0..%" PRId64, tok, m->c.vocab - 1);
	if (d->len >= d->max)
		return gk_errf(err, "decode: all %d positions are used", d->max);
	chunk_layers(m, chunk, &l0, &l1);
	int t = d->len;
	const float *p = m->params;
	gk_nn_cpu_threads(nt);
	if (l0 == 0 && embed(d, tok, t, err) < 0)
		return -1;
	for (int l = l0; l < l1; l++) {
		const gk_nn_block_off *o = &m->blk[l];
		gk_nn_cpu_layernorm_fwd(d->ln, &d->mean, &d->rstd, d->x, p + o->ln1w,
					p + o->ln1b, 1, C, eps, nt);
		gk_nn_cpu_matmul_fwd(d->qkv, d->ln, p + o->qkvw, p + o->qkvb, NULL, NULL,
				     0, 1, C, 3 * Cq, nt);
		size_t at = ((size_t)d->at[l] * d->max + (size_t)t) * Cq;
		memcpy(d->k + at, d->qkv + Cq, (size_t)Cq * sizeof(float));
		memcpy(d->v + at, d->qkv + 2 * Cq, (size_t)Cq * sizeof(float));
		attend(d, l, t);
		if (proj(m, d->res, d->y, p + o->attprojw, p + o->attprojb, d->x, Cq, err) < 0)
			return -1;
		gk_nn_cpu_layernorm_fwd(d->ln, &d->mean, &d->rstd, d->res, p + o->ln2w,
					p + o->ln2b, 1, C, eps, nt);
		gk_nn_cpu_matmul_fwd(d->fch, d->ln, p + o->fcw, p + o->fcb, NULL, d->fchg,
				     0, 1, C, F, nt);
		if (proj(m, d->x, d->fchg, p + o->fcprojw, p + o->fcprojb, d->res, F, err) < 0)
			return -1;
	}
	/* the stage's last chunk: the position is taken */
	if (chunk == chunks(m) - 1)
		d->len++;
	if (l1 < L)
		return 0;
	gk_nn_cpu_layernorm_fwd(d->ln, &d->mean, &d->rstd, d->x, p + m->lnfw, p + m->lnfb,
				1, C, eps, nt);
	if (m->tp == 1) {
		gk_nn_cpu_lmhead_fwd(d->logits, d->ln, p + m->wte, 1, C, (int)m->c.vocab,
				     (int)m->c.vocab_pad, nt);
		*logits = d->logits;
		return 0;
	}
	/* this rank's vocabulary rows (none real: all padding) */
	int64_t Vl = m->c.vocab_pad / m->tp, real = m->c.vocab - (int64_t)m->tpr * Vl;
	int nv = (int)(real < 0 ? 0 : real > Vl ? Vl : real);
	if (nv > 0)
		gk_nn_cpu_lmhead_fwd(d->slice, d->ln, p + m->wte, 1, C, nv, (int)Vl, nt);
	if (gather_logits(d, d->slice, err) < 0)
		return -1;
	*logits = d->logits;
	return 0;
}

int gk_nn_decode(gk_nn_decoder *d, int32_t tok, const float **logits, gk_err *err)
{
	if (d->m->pp > 1)
		return gk_errf(err, "decode: a pipeline stage decodes its chunks "
			       "(gk_nn_decode_chunk)");
	return gk_nn_decode_chunk(d, 0, tok, logits, err);
}

/* ---- a token's pass through the pipeline's stages ---- */

/* n elements of type dt from or to stage peer of the pipeline pipe */
static int recv_from(gk_comm *pipe, void *buf, size_t n, gk_dtype dt, int peer, gk_err *err)
{
	gk_comm_req *r;
	if (gk_comm_irecv(pipe, buf, n, dt, peer, &r, err) < 0 || gk_comm_wait(r, err) < 0)
		return gk_err_prefix(err, "sample: pipeline stage %d's activations", peer);
	return 0;
}

static int send_to(gk_comm *pipe, const void *buf, size_t n, gk_dtype dt, int peer, gk_err *err)
{
	gk_comm_req *r;
	if (gk_comm_isend(pipe, buf, n, dt, peer, &r, err) < 0 || gk_comm_wait(r, err) < 0)
		return gk_err_prefix(err, "sample: to pipeline stage %d", peer);
	return 0;
}

/*
 * Token tok through the cache: this stage's chunks in turn, each after
 * the previous stage's (the ring of the interleaved schedule's chunks),
 * the row of the residual stream received before and sent after. *lg:
 * the logits on the last stage, else NULL.
 */
static int decode_pass(gk_nn_decoder *d, gk_comm *pipe, int32_t tok, const float **lg,
		       gk_err *err)
{
	const gk_nn_model *m = d->m;
	int S = m->pp, s = m->ppr, V = chunks(m);
	size_t C = (size_t)m->c.hidden;
	for (int c = 0; c < V; c++) {
		int first = s == 0 && c == 0, last = s == S - 1 && c == V - 1;
		if ((!first && recv_from(pipe, d->x, C, GK_DT_F32, (s + S - 1) % S, err) < 0) ||
		    gk_nn_decode_chunk(d, c, tok, lg, err) < 0 ||
		    (!last && send_to(pipe, d->x, C, GK_DT_F32, (s + 1) % S, err) < 0))
			return -1;
	}
	return 0;
}

/*
 * The logits after a window of w tokens: one forward of that sequence
 * in the first row of the model's activations, through the stages'
 * chunks as decode_pass, the rows passed between them over act. On the
 * CPU a batch of that one row (the batch size is put back after), T x C
 * floats a message; on a GPU the model's batch, B x T x C elements of
 * gk_nn_pp_dtype in device memory, the other rows its first token (see
 * the top of the file); under sequence parallelism a rank's T/tp
 * positions of them (gk_nn_pp_count). Under tensor parallelism the
 * logits are gathered into full (vocab_pad floats). *logits: on the last
 * stage.
 */
static int window_pass(gk_nn_model *m, gk_comm *act, const int32_t *tokens, int w, float *full,
		       const float **logits, gk_err *err)
{
	int T = m->o.seq, B = m->o.batch, S = m->pp, s = m->ppr, V = chunks(m);
	int nb = m->cu ? B : 1;
	size_t BT = (size_t)nb * (size_t)T;
	gk_dtype dt = gk_nn_pp_dtype(m);
	*logits = NULL;
	if (w < 1 || w > T)
		return gk_errf(err, "forward of one window: %d tokens, not 1..%d", w, T);
	int32_t *row = malloc(BT * sizeof(*row));
	if (!row)
		return gk_err_sys(err, ENOMEM, "forward of one window");
	memcpy(row, tokens, (size_t)w * sizeof(*row));
	for (size_t t = (size_t)w; t < BT; t++) /* after the last: causal, never seen */
		row[t] = tokens[0];
	m->o.batch = nb;
	size_t n = gk_nn_pp_count(m);
	gk_nn_pp_use_slot(m, 0);
	int rc = 0;
	for (int c = 0; c < V && rc == 0; c++) {
		int first = s == 0 && c == 0, last = s == S - 1 && c == V - 1;
		gk_nn_pp_use_chunk(m, c);
		rc = (!first && recv_from(act, gk_nn_pp_input(m), n, dt, (s + S - 1) % S, err) < 0) ||
		     gk_nn_forward(m, row, NULL, NULL, err) < 0 ||
		     (!last && send_to(act, gk_nn_pp_output(m), n, dt, (s + 1) % S, err) < 0) ? -1 : 0;
	}
	m->o.batch = B;
	/* the activations hold the window, not a batch of data: no backward of it */
	m->have_fwd = 0;
	free(row);
	if (rc < 0 || s < S - 1)
		return rc;
	const float *lg = gk_nn_logits(m, 0, w - 1);
	if (m->tp > 1) {
		size_t Vl = (size_t)(m->c.vocab_pad / m->tp);
		if (gk_comm_allgather(m->tpc, lg, full, Vl, GK_DT_F32, NULL, err) < 0)
			return -1;
		lg = full;
	}
	*logits = lg;
	return 0;
}

/*
 * Past the window every position moves, so the cache is of no use: one
 * forward of the window as a batch of one sequence.
 */
int gk_nn_forward_window(gk_nn_model *m, const int32_t *tokens, int w,
			 const float **logits, gk_err *err)
{
	if (m->cu)
		return gk_errf(err, "forward of one window: the model is on the GPU");
	if (m->tp > 1 || m->pp > 1)
		return gk_errf(err, "forward of one window: the model is split by tensor or "
			       "pipeline parallelism (gk_nn_sample_grid samples it)");
	return window_pass(m, NULL, tokens, w, NULL, logits, err);
}

/* ---- sampling ---- */

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

int gk_nn_prompt_encode(const gk_nn_config *c, const gk_tok *tok, const char *text, size_t len,
			int32_t **out, gk_err *err)
{
	*out = NULL;
	if (tok) {
		gk_tok_enc *e = gk_tok_enc_new(tok);
		gk_tok_ids ids = {0};
		int rc = e ? gk_tok_encode(e, text, len, GK_TOK_SPECIAL, &ids, err)
			   : gk_err_sys(err, ENOMEM, "prompt");
		gk_tok_enc_free(e);
		if (rc == 0 && ids.n > INT_MAX)
			rc = gk_errf(err, "a prompt of %zu tokens", ids.n);
		for (size_t i = 0; rc == 0 && i < ids.n; i++)
			if (ids.v[i] >= c->vocab)
				rc = gk_errf(err, "token %" PRIu32 " of the prompt is not in the model's "
					     "vocabulary of %" PRId64, ids.v[i], c->vocab);
		if (rc == 0 && !(*out = malloc((ids.n ? ids.n : 1) * sizeof(int32_t))))
			rc = gk_err_sys(err, ENOMEM, "prompt");
		for (size_t i = 0; rc == 0 && i < ids.n; i++)
			(*out)[i] = (int32_t)ids.v[i];
		free(ids.v);
		return rc < 0 ? -1 : (int)ids.n;
	}
	if (c->vocab != GK_NN_BYTE_VOCAB)
		return gk_errf(err, "a prompt is read as bytes, the tokens of a model of vocabulary %d; "
			       "this model's is %" PRId64 " (its tokens need a tokenizer)",
			       GK_NN_BYTE_VOCAB, c->vocab);
	if (len > INT_MAX)
		return gk_errf(err, "a prompt of %zu bytes", len);
	if (!(*out = malloc((len ? len : 1) * sizeof(int32_t))))
		return gk_err_sys(err, ENOMEM, "prompt");
	for (size_t i = 0; i < len; i++)
		(*out)[i] = (unsigned char)text[i];
	return (int)len;
}

/* Append n bytes to *buf, growing it. */
static int put(char **buf, size_t *len, size_t *cap, const char *s, size_t n, gk_err *err)
{
	if (GK_GROW(*buf, *cap, *len + n, "sample text", err))
		return -1;
	memcpy(*buf + *len, s, n);
	*len += n;
	return 0;
}

int gk_nn_sample_text(const gk_nn_config *c, const gk_tok *tok, const int32_t *ids, size_t n,
		      char **buf, size_t *len, size_t *cap, gk_err *err)
{
	for (size_t i = 0; i < n; i++) {
		char one[16];
		const char *s = one;
		size_t l;
		if (tok) {
			/* U+FFFD, as a decoder's errors="replace" prints a byte it
			 * cannot read */
			if (ids[i] < 0 || !(s = gk_tok_token(tok, (uint32_t)ids[i], &l))) {
				s = "\xef\xbf\xbd";
				l = 3;
			}
		} else if (c->vocab == GK_NN_BYTE_VOCAB) {
			one[0] = ids[i] == GK_NN_BYTE_EOT ? '\n' : (char)ids[i];
			l = 1;
		} else {
			l = (size_t)snprintf(one, sizeof(one), "%s%d", i ? " " : "", ids[i]);
		}
		if (put(buf, len, cap, s, l, err) < 0)
			return -1;
	}
	return 0;
}

int gk_nn_sample(gk_nn_model *m, int batch, int seq, int32_t start, int n,
		 double temperature, int top_k, uint64_t seed, int32_t *out,
		 gk_err *err)
{
	return gk_nn_sample_prompt(m, batch, seq, &start, 1, n, temperature, top_k, seed, out,
				   err);
}

/*
 * The token after the logits lg, picked by the last stage's tensor rank
 * 0 and sent to its tensor group, then from the last stage to every
 * stage of the pipeline (nothing to send on one rank).
 */
static int share_token(gk_nn_model *m, gk_comm *pipe, int32_t *tok, gk_err *err)
{
	int S = m->pp, s = m->ppr;
	if (m->tp > 1 && s == S - 1 &&
	    gk_comm_broadcast(m->tpc, tok, tok, 1, GK_DT_I32, 0, err) < 0)
		return -1;
	if (S > 1 && gk_comm_broadcast(pipe, tok, tok, 1, GK_DT_I32, S - 1, err) < 0)
		return gk_err_prefix(err, "sample: the token from pipeline stage %d", S - 1);
	return 0;
}

static int generate(gk_nn_model *m, gk_comm *pipe, gk_comm *act, int batch, int seq,
		    const int32_t *prompt, int np, int n, double temperature, int top_k,
		    uint64_t seed, int32_t *out, gk_err *err)
{
	const gk_nn_config *c = gk_nn_config_of(m);
	int grid = m->tp > 1 || m->pp > 1;
	if (np < 1)
		return gk_errf(err, "sample: an empty prompt");
	for (int i = 0; i < np; i++)
		if (prompt[i] < 0 || prompt[i] >= c->vocab)
			return gk_errf(err, "sample: prompt token %d at %d is not in 0..%" PRId64,
				       prompt[i], i, c->vocab - 1);
	if (m->pp > 1 && (!pipe || !act))
		return gk_errf(err, "sample: a pipeline stage without its pipeline's communicators");
	int32_t *row = malloc((size_t)batch * (size_t)seq * sizeof(int32_t));
	double *p = malloc((size_t)c->vocab * sizeof(double));
	int32_t *hist = malloc(((size_t)n + (size_t)np) * sizeof(int32_t));
	/* a tensor group's gathered logits on GPUs (the CPU's are the cache's) */
	int gather = m->cu && m->tp > 1;
	float *full = gather ? malloc((size_t)c->vocab_pad * sizeof(float)) : NULL;
	gk_nn_decoder *d = NULL;
	gk_err why;
	if (!row || !p || !hist || (gather && !full)) {
		free(row), free(p), free(hist), free(full);
		return gk_err_sys(err, ENOMEM, "sample");
	}
	/* no cache on a GPU model (or without the memory): full forwards,
	 * through the grid's stages on GPUs; a split CPU model has its
	 * cache, or fails */
	if (!m->cu && gk_nn_decoder_new(&d, m, grid ? err : &why) < 0) {
		d = NULL;
		if (grid) {
			free(row), free(p), free(hist);
			return -1;
		}
	}
	/* who picks: the last stage's tensor rank 0 (the only rank at 1) */
	int picks = m->ppr == m->pp - 1 && m->tpr == 0;
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	memcpy(hist, prompt, (size_t)np * sizeof(int32_t));
	int len = np, rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		const float *lg = NULL;
		if (d && len <= seq) {
			/* the history is the window: positions 0..len-1; the
			 * cache takes those it lacks (the whole prompt first) */
			while (rc == 0 && gk_nn_decoder_len(d) < len)
				rc = decode_pass(d, pipe, hist[gk_nn_decoder_len(d)], &lg, err);
		} else if (d || grid) {
			int first = len > seq ? len - seq : 0;
			rc = window_pass(m, act, hist + first, len - first, d ? d->logits : full, &lg,
					 err);
		} else {
			/* the last seq tokens of the history in row 0 */
			int first = len > seq ? len - seq : 0, w = len - first;
			for (size_t k = 0; k < (size_t)batch * (size_t)seq; k++)
				row[k] = hist[0];
			memcpy(row, hist + first, (size_t)w * sizeof(int32_t));
			rc = gk_nn_forward(m, row, NULL, NULL, err);
			lg = rc == 0 ? gk_nn_logits(m, 0, w - 1) : NULL;
		}
		int32_t tok = 0;
		if (rc == 0 && picks)
			tok = pick(lg, c->vocab, temperature, top_k, &s, p);
		if (rc == 0 && grid)
			rc = share_token(m, pipe, &tok, err);
		if (rc == 0) {
			out[i] = tok;
			hist[len++] = tok;
		}
	}
	gk_nn_decoder_free(d);
	free(row), free(p), free(hist), free(full);
	return rc;
}

int gk_nn_sample_prompt(gk_nn_model *m, int batch, int seq, const int32_t *prompt, int np,
			int n, double temperature, int top_k, uint64_t seed, int32_t *out,
			gk_err *err)
{
	if (m->tp > 1 || m->pp > 1)
		return gk_errf(err, "sample: the model is split by tensor or pipeline "
			       "parallelism (gk_nn_sample_grid samples it)");
	return generate(m, NULL, NULL, batch, seq, prompt, np, n, temperature, top_k, seed, out,
			err);
}

int gk_nn_sample_grid(gk_nn_model *m, gk_comm *pipe, gk_comm *act, int batch, int seq,
		      const int32_t *prompt, int np, int n, double temperature, int top_k,
		      uint64_t seed, int32_t *out, gk_err *err)
{
	if (m->pp == 1)
		pipe = act = NULL;
	else if (!act && !m->cu)
		act = pipe;
	return generate(m, pipe, act, batch, seq, prompt, np, n, temperature, top_k, seed, out,
			err);
}
