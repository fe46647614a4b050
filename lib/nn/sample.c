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
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"
#include "nn/math.h"

struct gk_nn_decoder {
	gk_nn_model *m;
	int len, max;                /* positions cached; capacity */
	float *k, *v;                /* layers x max x C each */
	float *x, *ln, *qkv, *y, *res, *fch, *fchg, *att, *logits;
	float mean, rstd;
};

int gk_nn_decoder_new(gk_nn_decoder **out, gk_nn_model *m, gk_err *err)
{
	*out = NULL;
	if (m->cu)
		return gk_errf(err, "decoding with a cache: the model is on the GPU");
	if (m->tp > 1)
		return gk_errf(err, "decoding with a cache: the model is split by tensor "
			       "parallelism (it decodes whole)");
	size_t C = (size_t)m->c.hidden, L = (size_t)m->c.layers;
	size_t max = (size_t)m->c.positions;
	gk_nn_decoder *d = calloc(1, sizeof(*d));
	if (!d)
		return gk_err_sys(err, ENOMEM, "decoder");
	d->m = m;
	d->max = (int)max;
	d->k = malloc(L * max * C * sizeof(float));
	d->v = malloc(L * max * C * sizeof(float));
	/* one block of scratch, carved in this order */
	float **part[] = {&d->x, &d->ln, &d->qkv, &d->y, &d->res, &d->fch, &d->fchg,
			  &d->att, &d->logits};
	size_t len[] = {C, C, 3 * C, C, C, 4 * C, 4 * C, max, (size_t)m->c.vocab_pad};
	size_t n = 0;
	for (size_t i = 0; i < GK_ARRAY_SIZE(len); i++)
		n += len[i];
	float *s = malloc(n * sizeof(float));
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

/* y (C) = causal attention of the newest row's queries over rows 0..t */
static void attend(gk_nn_decoder *d, int l, int t)
{
	const gk_nn_model *m = d->m;
	int C = (int)m->c.hidden, NH = (int)m->c.heads, hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	const float *K = d->k + (size_t)l * d->max * C;
	const float *V = d->v + (size_t)l * d->max * C;
	for (int h = 0; h < NH; h++) {
		const float *q = d->qkv + h * hs;
		for (int j = 0; j <= t; j++) {
			const float *k = K + (size_t)j * C + h * hs;
			float s = 0.0f;
			for (int i = 0; i < hs; i++)
				s += q[i] * k[i];
			d->att[j] = scale * s;
		}
		gk_nn_cpu_softmax(d->att, t + 1);
		float *y = d->y + h * hs;
		memset(y, 0, (size_t)hs * sizeof(float));
		for (int j = 0; j <= t; j++) {
			const float *v = V + (size_t)j * C + h * hs;
			float a = d->att[j];
			for (int i = 0; i < hs; i++)
				y[i] += a * v[i];
		}
	}
}

int gk_nn_decode(gk_nn_decoder *d, int32_t tok, const float **logits,
		 gk_err *err)
{
	gk_nn_model *m = d->m;
	int C = (int)m->c.hidden, L = (int)m->c.layers, nt = m->nt;
	int V = (int)m->c.vocab, Vp = (int)m->c.vocab_pad;
	float eps = m->c.ln_eps;
	if (tok < 0 || tok >= V)
		return gk_errf(err, "decode token %d: not in 0..%d", tok, V - 1);
	if (d->len >= d->max)
		return gk_errf(err, "decode: all %d positions are used", d->max);
	int t = d->len;
	const float *p = m->params;
	gk_nn_cpu_threads(nt);
	for (int c = 0; c < C; c++)
		d->x[c] = p[m->wte + (size_t)tok * C + c] + p[m->wpe + (size_t)t * C + c];
	for (int l = 0; l < L; l++) {
		const gk_nn_block_off *o = &m->blk[l];
		gk_nn_cpu_layernorm_fwd(d->ln, &d->mean, &d->rstd, d->x, p + o->ln1w,
					p + o->ln1b, 1, C, eps, nt);
		gk_nn_cpu_matmul_fwd(d->qkv, d->ln, p + o->qkvw, p + o->qkvb, NULL, NULL,
				     0, 1, C, 3 * C, nt);
		size_t at = ((size_t)l * d->max + (size_t)t) * C;
		memcpy(d->k + at, d->qkv + C, (size_t)C * sizeof(float));
		memcpy(d->v + at, d->qkv + 2 * C, (size_t)C * sizeof(float));
		attend(d, l, t);
		gk_nn_cpu_matmul_fwd(d->res, d->y, p + o->attprojw, p + o->attprojb, d->x,
				     NULL, 0, 1, C, C, nt);
		gk_nn_cpu_layernorm_fwd(d->ln, &d->mean, &d->rstd, d->res, p + o->ln2w,
					p + o->ln2b, 1, C, eps, nt);
		gk_nn_cpu_matmul_fwd(d->fch, d->ln, p + o->fcw, p + o->fcb, NULL, d->fchg,
				     0, 1, C, 4 * C, nt);
		gk_nn_cpu_matmul_fwd(d->x, d->fchg, p + o->fcprojw, p + o->fcprojb, d->res,
				     NULL, 0, 1, 4 * C, C, nt);
	}
	gk_nn_cpu_layernorm_fwd(d->ln, &d->mean, &d->rstd, d->x, p + m->lnfw, p + m->lnfb,
				1, C, eps, nt);
	gk_nn_cpu_lmhead_fwd(d->logits, d->ln, p + m->wte, 1, C, V, Vp, nt);
	d->len++;
	*logits = d->logits;
	return 0;
}

/*
 * Past the window every position moves, so the cache is of no use: one
 * forward of the window as a batch of one sequence (the first row of the
 * model's activations; the batch size is put back after).
 */
int gk_nn_forward_window(gk_nn_model *m, const int32_t *tokens, int w,
			 const float **logits, gk_err *err)
{
	int T = m->o.seq, B = m->o.batch;
	if (m->cu)
		return gk_errf(err, "forward of one window: the model is on the GPU");
	if (m->tp > 1)
		return gk_errf(err, "forward of one window: the model is split by tensor "
			       "parallelism (it samples whole)");
	if (w < 1 || w > T)
		return gk_errf(err, "forward of one window: %d tokens, not 1..%d", w, T);
	int32_t *row = malloc((size_t)T * sizeof(*row));
	if (!row)
		return gk_err_sys(err, ENOMEM, "forward of one window");
	memcpy(row, tokens, (size_t)w * sizeof(*row));
	for (int t = w; t < T; t++) /* after the last: causal, never seen */
		row[t] = tokens[0];
	m->o.batch = 1;
	int rc = gk_nn_forward(m, row, NULL, NULL, err);
	m->o.batch = B;
	/* the activations hold one row, not the batch: no backward of it */
	m->have_fwd = 0;
	free(row);
	if (rc == 0)
		*logits = gk_nn_logits(m, 0, w - 1);
	return rc;
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

int gk_nn_sample_prompt(gk_nn_model *m, int batch, int seq, const int32_t *prompt, int np,
			int n, double temperature, int top_k, uint64_t seed, int32_t *out,
			gk_err *err)
{
	const gk_nn_config *c = gk_nn_config_of(m);
	if (np < 1)
		return gk_errf(err, "sample: an empty prompt");
	for (int i = 0; i < np; i++)
		if (prompt[i] < 0 || prompt[i] >= c->vocab)
			return gk_errf(err, "sample: prompt token %d at %d is not in 0..%" PRId64,
				       prompt[i], i, c->vocab - 1);
	int32_t *row = malloc((size_t)batch * (size_t)seq * sizeof(int32_t));
	double *p = malloc((size_t)c->vocab * sizeof(double));
	int32_t *hist = malloc(((size_t)n + (size_t)np) * sizeof(int32_t));
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
	memcpy(hist, prompt, (size_t)np * sizeof(int32_t));
	int len = np, rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		const float *lg = NULL;
		if (d && len <= seq) {
			/* the history is the window: positions 0..len-1; the
			 * cache takes those it lacks (the whole prompt first) */
			while (rc == 0 && gk_nn_decoder_len(d) < len)
				rc = gk_nn_decode(d, hist[gk_nn_decoder_len(d)], &lg, err);
		} else if (d) {
			int first = len > seq ? len - seq : 0;
			rc = gk_nn_forward_window(m, hist + first, len - first, &lg, err);
		} else {
			/* the last seq tokens of the history in row 0 */
			int first = len > seq ? len - seq : 0, w = len - first;
			for (size_t k = 0; k < (size_t)batch * (size_t)seq; k++)
				row[k] = hist[0];
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
