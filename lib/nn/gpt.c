/*
 * gpt.c - GPT-2's configuration, parameter table, buffers and plan; the
 * weights' initialisation and loading are weights.c's.
 *
 * reference: transformers/models/gpt2/modeling_gpt2.py (names, Conv1D
 * (in, out) weights, tied lm_head) and configuration_gpt2.py.
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "hf/hf.h"
#include "nn/cuda_internal.h"

int gk_nn_config_finish(gk_nn_config *c, gk_err *err)
{
	if (c->layers < 1 || c->layers > GK_NN_MAX_LAYERS)
		return gk_errf(err, "model config 'n_layer': %lld: not in "
			       "1..%d", (long long)c->layers, GK_NN_MAX_LAYERS);
	if (c->hidden < 1 || c->hidden > GK_NN_MAX_HIDDEN)
		return gk_errf(err, "model config 'n_embd': %lld: not in 1..%d",
			       (long long)c->hidden, GK_NN_MAX_HIDDEN);
	if (c->heads < 1 || c->heads > c->hidden || c->hidden % c->heads)
		return gk_errf(err, "model config 'n_head': %lld: does not "
			       "divide n_embd %lld", (long long)c->heads,
			       (long long)c->hidden);
	/* at least one token besides the end-of-text token */
	if (c->vocab < 2 || c->vocab > GK_NN_MAX_VOCAB)
		return gk_errf(err, "model config 'vocab_size': %lld: not in "
			       "2..%d", (long long)c->vocab, GK_NN_MAX_VOCAB);
	if (c->positions < 1 || c->positions > GK_NN_MAX_POSITIONS)
		return gk_errf(err, "model config 'n_positions': %lld: not in "
			       "1..%d", (long long)c->positions, GK_NN_MAX_POSITIONS);
	if (!(c->ln_eps > 0.0f && c->ln_eps < 1.0f))
		return gk_errf(err, "model config 'layer_norm_epsilon': %g: "
			       "not in (0, 1)", (double)c->ln_eps);
	c->vocab_pad = gk_hf_vocab_padded(c->vocab);
	return 0;
}

/* Keys whose other values change GPT-2's arithmetic, so must be refused. */
const gk_nn_config gk_nn_gpt2_small = {.layers = 12, .hidden = 768, .heads = 12,
					.vocab = GK_NN_BYTE_VOCAB, .positions = 1024,
					.ln_eps = 1e-5f};

void gk_nn_config_over(gk_nn_config *c, const gk_nn_config *f)
{
	if (f->layers) c->layers = f->layers;
	if (f->hidden) c->hidden = f->hidden;
	if (f->heads) c->heads = f->heads;
	if (f->vocab) c->vocab = f->vocab;
	if (f->positions) c->positions = f->positions;
}

int gk_nn_config_equal(const gk_nn_config *a, const gk_nn_config *b)
{
	return a->layers == b->layers && a->hidden == b->hidden && a->heads == b->heads &&
	       a->vocab == b->vocab && a->positions == b->positions;
}

/*
 * The keys lib/hf reads as stated and leaves to us: each value but the
 * one this model computes changes GPT-2's arithmetic, so is refused.
 */
static int check_stated(const gk_hf_config *h, const char *path, gk_err *err)
{
	if (isnan(h->ln_eps))
		return gk_errf(err, "config '%s': key 'layer_norm_epsilon': "
			       "not a number", path);
	if (strcmp(h->activation, "gelu_new") != 0)
		return gk_errf(err, "config '%s': key 'activation_function': only "
			       "gelu_new is supported", path);
	if (h->scale_attn_weights != 1)
		return gk_errf(err, "config '%s': key 'scale_attn_weights': only "
			       "true is supported", path);
	if (h->scale_attn_by_inverse_layer_idx != 0)
		return gk_errf(err, "config '%s': key "
			       "'scale_attn_by_inverse_layer_idx': only false is "
			       "supported", path);
	return 0;
}

int gk_nn_config_load(gk_nn_config *c, const char *path, gk_err *err)
{
	gk_hf_config h;
	/* unknown keys allowed: transformers adds keys from release to
	 * release, and the ones that matter are checked below */
	int rc = gk_hf_config_load(&h, path, 1, NULL, err);
	/* before lib/hf's own refusal, whose message lists the architectures
	 * it reads, not the one this model builds */
	if (h.arch != GK_HF_NONE && strcmp(h.model_type, "gpt2") != 0)
		return gk_errf(err, "config '%s': model_type '%s': gpu-train "
			       "builds gpt2 only", path, h.model_type);
	if (rc < 0)
		return -1;
	if (h.ffn != 4 * h.hidden)
		return gk_errf(err, "config '%s': key 'n_inner': only 4 * n_embd "
			       "is supported", path);
	if (!h.tied)
		return gk_errf(err, "config '%s': key 'tie_word_embeddings': only "
			       "true is supported", path);
	if (check_stated(&h, path, err))
		return -1;
	memset(c, 0, sizeof(*c));
	c->layers = h.layers;
	c->hidden = h.hidden;
	c->heads = h.heads;
	c->vocab = h.vocab;
	c->positions = h.positions;
	c->ln_eps = (float)h.ln_eps;
	if (gk_nn_config_finish(c, err) < 0)
		return gk_err_prefix(err, "config '%s'", path);
	return 0;
}

int gk_nn_config_save(const gk_nn_config *c, const char *path, gk_err *err)
{
	json_t *j = json_object();
	json_t *arch = json_array();
	if (!j || !arch) {
		json_decref(j);
		json_decref(arch);
		return gk_err_sys(err, ENOMEM, "write '%s'", path);
	}
	json_array_append_new(arch, json_string("GPT2LMHeadModel"));
	json_object_set_new(j, "activation_function", json_string("gelu_new"));
	json_object_set_new(j, "architectures", arch);
	/* trained without dropout; 0 keeps a fine-tune from adding it */
	json_object_set_new(j, "attn_pdrop", json_real(0.0));
	json_object_set_new(j, "bos_token_id", json_integer(c->vocab - 1));
	json_object_set_new(j, "embd_pdrop", json_real(0.0));
	json_object_set_new(j, "eos_token_id", json_integer(c->vocab - 1));
	json_object_set_new(j, "initializer_range", json_real(0.02));
	/* the float as written by Python: shortest repr of the f32 value */
	char eps[32];
	snprintf(eps, sizeof(eps), "%.9g", (double)c->ln_eps);
	json_object_set_new(j, "layer_norm_epsilon", json_real(strtod(eps, NULL)));
	json_object_set_new(j, "model_type", json_string("gpt2"));
	json_object_set_new(j, "n_ctx", json_integer(c->positions));
	json_object_set_new(j, "n_embd", json_integer(c->hidden));
	json_object_set_new(j, "n_head", json_integer(c->heads));
	json_object_set_new(j, "n_inner", json_null());
	json_object_set_new(j, "n_layer", json_integer(c->layers));
	json_object_set_new(j, "n_positions", json_integer(c->positions));
	json_object_set_new(j, "resid_pdrop", json_real(0.0));
	json_object_set_new(j, "scale_attn_by_inverse_layer_idx", json_false());
	json_object_set_new(j, "scale_attn_weights", json_true());
	json_object_set_new(j, "tie_word_embeddings", json_true());
	json_object_set_new(j, "vocab_size", json_integer(c->vocab));
	int rc = gk_json_write_file(path, j, err);
	json_decref(j);
	return rc;
}

/* ---- the table ------------------------------------------------------------- */

static size_t add(gk_nn_tensor *t, size_t *n, size_t *off, const char *name,
		  int ndim, int64_t d0, int64_t d1, size_t numel)
{
	gk_nn_tensor *x = &t[(*n)++];
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->ndim = ndim;
	x->shape[0] = d0;
	x->shape[1] = ndim == 2 ? d1 : 0;
	x->off = *off;
	x->numel = numel ? numel : (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
	x->decay = ndim == 2;
	*off += x->numel;
	return x->off;
}

/*
 * A tensor that tensor parallelism may split over tp ranks: the flat
 * buffer holds its slice (numel / tp) when split, the whole otherwise;
 * shape stays the whole tensor's.
 */
static size_t add_split(gk_nn_tensor *t, size_t *n, size_t *off, const char *name, int ndim,
			int64_t d0, int64_t d1, size_t whole, int split, int groups, int tp)
{
	size_t numel = whole ? whole : (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
	size_t o = add(t, n, off, name, ndim, d0, d1, split == GK_NN_SPLIT_NONE ? 0 : numel / (size_t)tp);
	t[*n - 1].split = split;
	t[*n - 1].groups = groups;
	return o;
}

/* the table at tp ranks (1: the whole model) into m->t and m->blk */
static int build_table_tp(gk_nn_model *m, int tp, gk_err *err)
{
	const gk_nn_config *c = &m->c;
	int64_t C = c->hidden;
	size_t L = (size_t)c->layers;
	m->t = calloc(4 + 12 * L, sizeof(*m->t));
	m->blk = calloc(L, sizeof(*m->blk));
	if (!m->t || !m->blk)
		return gk_err_sys(err, ENOMEM, "model parameter table");
	size_t n = 0, off = 0;
	char nm[64];
	m->wte = add_split(m->t, &n, &off, "transformer.wte.weight", 2, c->vocab, C,
			   (size_t)c->vocab_pad * (size_t)C, GK_NN_SPLIT_ROWS, 1, tp);
	m->wpe = add(m->t, &n, &off, "transformer.wpe.weight", 2, c->positions,
		     C, 0);
	for (size_t l = 0; l < L; l++) {
		gk_nn_block_off *b = &m->blk[l];
#define T(field, suffix, nd, d0, d1, split, groups)                          \
	snprintf(nm, sizeof(nm), "transformer.h.%zu.%s", l, suffix);         \
	b->field = add_split(m->t, &n, &off, nm, nd, d0, d1, 0, split, groups, tp)
		/* Megatron's split: c_attn and c_fc column-parallel (c_attn by
		 * heads within each of Q, K and V), the projections
		 * row-parallel with their biases whole */
		T(ln1w, "ln_1.weight", 1, C, 0, GK_NN_SPLIT_NONE, 0);
		T(ln1b, "ln_1.bias", 1, C, 0, GK_NN_SPLIT_NONE, 0);
		T(qkvw, "attn.c_attn.weight", 2, C, 3 * C, GK_NN_SPLIT_COLS, 3);
		T(qkvb, "attn.c_attn.bias", 1, 3 * C, 0, GK_NN_SPLIT_COLS, 3);
		T(attprojw, "attn.c_proj.weight", 2, C, C, GK_NN_SPLIT_ROWS, 1);
		T(attprojb, "attn.c_proj.bias", 1, C, 0, GK_NN_SPLIT_NONE, 0);
		T(ln2w, "ln_2.weight", 1, C, 0, GK_NN_SPLIT_NONE, 0);
		T(ln2b, "ln_2.bias", 1, C, 0, GK_NN_SPLIT_NONE, 0);
		T(fcw, "mlp.c_fc.weight", 2, C, 4 * C, GK_NN_SPLIT_COLS, 1);
		T(fcb, "mlp.c_fc.bias", 1, 4 * C, 0, GK_NN_SPLIT_COLS, 1);
		T(fcprojw, "mlp.c_proj.weight", 2, 4 * C, C, GK_NN_SPLIT_ROWS, 1);
		T(fcprojb, "mlp.c_proj.bias", 1, C, 0, GK_NN_SPLIT_NONE, 0);
#undef T
	}
	m->lnfw = add(m->t, &n, &off, "transformer.ln_f.weight", 1, C, 0, 0);
	m->lnfb = add(m->t, &n, &off, "transformer.ln_f.bias", 1, C, 0, 0);
	m->nt_tensors = n;
	m->nparams = off;
	return 0;
}

/* this rank's table, and under tensor parallelism the whole model's too */
static int build_table(gk_nn_model *m, gk_err *err)
{
	int tp = m->o.tp > 1 ? m->o.tp : 1;
	if (tp > 1) {
		gk_nn_model f = {.c = m->c};
		if (build_table_tp(&f, 1, err) < 0) {
			free(f.t);
			free(f.blk);
			return -1;
		}
		free(f.blk);
		m->ft = f.t;
		m->nft = f.nt_tensors;
		m->nfull = f.nparams;
	}
	if (build_table_tp(m, tp, err) < 0)
		return -1;
	if (tp == 1) {
		m->ft = m->t;
		m->nft = m->nt_tensors;
		m->nfull = m->nparams;
	}
	return 0;
}

/* ---- buffers ---------------------------------------------------------------- */

/*
 * 64-byte aligned (2 MiB and huge pages from 2 MiB up: gk_alloc_big),
 * zeroed, counted in *bytes (gk_nn_memory reports what was really
 * allocated).
 */
static size_t fbytes(size_t n)
{
	size_t sz = (n * sizeof(float) + 63) / 64 * 64;
	return sz ? sz : 64;
}

static float *falloc(size_t n, uint64_t *bytes)
{
	size_t sz = fbytes(n);
	float *p = gk_alloc_big(sz);
	if (p)
		*bytes += sz;
	return p;
}

/*
 * ZeRO-2's gradients: a private anonymous mapping, reserved but not
 * committed (MAP_NORESERVE), so that only the pages backward writes take
 * memory and gk_nn_grads_release can return them whole; small pages
 * (MADV_NOHUGEPAGE), since a bucket released inside a huge page would
 * only split it. NULL on failure.
 */
static size_t lazy_bytes(const gk_nn_model *m)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (m->nflat * sizeof(float) + pg - 1) / pg * pg + pg;
}

static float *lazy_alloc(gk_nn_model *m, int *flag)
{
	void *p = mmap(NULL, lazy_bytes(m), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
#ifdef MADV_NOHUGEPAGE
	(void)madvise(p, lazy_bytes(m), MADV_NOHUGEPAGE);
#endif
	*flag = 1;
	return p;
}

size_t gk_nn_grad_page(void)
{
	return gk_comm_grads_align();
}

void gk_nn_lazy_release(const gk_nn_model *m, float *buf, size_t lo, size_t hi)
{
	size_t pg = gk_nn_grad_page();
	size_t a = (lo + pg - 1) / pg * pg;
	size_t e = hi >= m->nparams ? lazy_bytes(m) / sizeof(float) : hi / pg * pg;
	if (e > a)
		(void)madvise(buf + a, (e - a) * sizeof(float), MADV_DONTNEED);
}

void gk_nn_grads_release(gk_nn_model *m, size_t lo, size_t hi)
{
	if (m->lazy)
		gk_nn_lazy_release(m, m->grads, lo, hi);
}

void gk_nn_params_release(gk_nn_model *m, size_t lo, size_t hi)
{
	if (m->lazy_p)
		gk_nn_lazy_release(m, m->params, lo, hi);
}

void gk_nn_set_param_fn(gk_nn_model *m, gk_nn_param_fn fn, void *ctx)
{
	m->pfn = fn;
	m->pctx = ctx;
}

void gk_nn_block_range(const gk_nn_model *m, int l, size_t *lo, size_t *hi)
{
	/* the blocks are of one size, from block 0's start (in every
	 * placement) to the final norm's, in the order of the layers but
	 * stage-major under the interleaved schedule (gk_nn_pp_place) */
	*lo = m->blk[l].ln1w;
	*hi = *lo + (m->lnfw - m->blk[0].ln1w) / (size_t)m->c.layers;
}

/* Carve consecutive pieces of one buffer, each rounded to 16 floats. */
static float *carve(float **cur, size_t n)
{
	float *p = *cur;
	*cur += (n + 15) / 16 * 16;
	return p;
}

static size_t r16(size_t n)
{
	return (n + 15) / 16 * 16;
}

/*
 * The pieces of the activation buffer (sz, in carve order) and of the
 * backward workspace (ws) for batch B, sequence T and nt threads; the
 * floats each buffer takes in *acts and *work. gk_nn_plan sizes a model
 * with them before it exists.
 */
enum { NSZ = 18, NWS = 10 };
static void act_sizes(const gk_nn_config *c, const gk_nn_opts *o, int nt, size_t sz[NSZ],
		      size_t ws[NWS], size_t *acts, size_t *work)
{
	size_t B = (size_t)o->batch, T = (size_t)o->seq;
	size_t tp = o->tp > 1 ? (size_t)o->tp : 1;
	size_t C = (size_t)c->hidden, NH = (size_t)c->heads / tp;
	size_t L = (size_t)c->layers, Vp = (size_t)c->vocab_pad / tp;
	size_t N = B * T;
	/* sequence parallelism: R rows in the LayerNorm and residual regions,
	 * a rank's T/tp positions of each sequence (model.c) */
	size_t sp = o->seq_par && tp > 1, R = sp ? N / tp : N;
	/* a pipeline stage: its layers only, and the head's buffers on the
	 * last stage alone */
	int head = 1;
	if (o->pp > 1) {
		int l0 = 0, l1 = (int)L;
		gk_err ignore;
		/* under the interleaved schedule a slot holds one chunk's */
		if (gk_nn_pp_chunk_layers(c->layers, o->pp, o->pp_chunks, o->pp_rank, 0, &l0, &l1,
					  &ignore) == 0)
			L = (size_t)(l1 - l0);
		head = o->pp_rank == o->pp - 1;
	}
	/* a rank's heads and MLP columns (tp.c): Cq of attention's C, F of
	 * the MLP's 4C */
	size_t Cq = C / tp, F = 4 * C / tp;
	gk_nn_recompute r = o->recompute;
	size_t kl = r != GK_NN_RECOMPUTE_LAYER ? L : 1;
	size_t kg = r == GK_NN_RECOMPUTE_NONE ? L : 1;
	size_t a[NSZ] = {
		(L + 1) * R * C,     /* resid */
		head * R * C, head * R, head * R, /* lnf */
		head * N * Vp, head * N,          /* logits, lse */
		kl * R * C, kl * R, kl * R,   /* ln1 */
		kl * N * 3 * Cq,     /* qkv */
		kl * B * NH * T * T, /* att */
		kl * N * Cq,         /* atty */
		kl * R * C,          /* res2 */
		kl * R * C, kl * R, kl * R,   /* ln2 */
		kl * N * F,          /* fch */
		kg * N * F,          /* fchg */
	};
	/* backward: dres, dln (B,T,C); datty (B,T,Cq); dqkv (B,T,3Cq);
	 * dfc (B,T,F); attention's scratch, per thread (a head's copies and
	 * a (T,T)); under tensor parallelism the cross-entropy's per-row
	 * max, sum of exponentials and target logit (3 N); under sequence
	 * parallelism dres of R rows, and spg, sps and spln (internal.h) */
	size_t w[NWS] = {R * C, N * C, N * Cq, N * 3 * Cq, N * F,
			 (size_t)nt * gk_nn_cpu_attention_scratch((int)T, (int)(Cq / NH)),
			 tp > 1 ? 3 * N : 0, sp * N * C, sp * N * C, sp * 2 * C};
	memcpy(sz, a, sizeof(a));
	memcpy(ws, w, sizeof(w));
	*acts = *work = 0;
	for (size_t i = 0; i < NSZ; i++)
		*acts += r16(sz[i]);
	/* tokens and targets, as floats' worth of int32 */
	*acts += 2 * r16(N);
	for (size_t i = 0; i < NWS; i++)
		*work += r16(ws[i]);
}

static int alloc_acts(gk_nn_model *m, gk_err *err)
{
	size_t N = (size_t)m->o.batch * (size_t)m->o.seq;
	gk_nn_recompute r = m->o.recompute;
	m->per_layer = r != GK_NN_RECOMPUTE_LAYER;
	m->fchg_per_layer = r == GK_NN_RECOMPUTE_NONE;
	size_t sz[NSZ], ws[NWS], total, wtotal;
	act_sizes(&m->c, &m->o, m->nt, sz, ws, &total, &wtotal);
	m->acts_n = total;
	m->acts = falloc(total, &m->mem.activations);
	if (!m->acts)
		return gk_err_sys(err, ENOMEM, "model activations (%zu MiB)",
				  total * 4 >> 20);
	float *cur = m->acts;
	m->resid = carve(&cur, sz[0]);
	m->lnf = carve(&cur, sz[1]);
	m->lnfm = carve(&cur, sz[2]);
	m->lnfr = carve(&cur, sz[3]);
	m->logits = carve(&cur, sz[4]);
	m->lse = carve(&cur, sz[5]);
	m->a_ln1 = carve(&cur, sz[6]);
	m->a_ln1m = carve(&cur, sz[7]);
	m->a_ln1r = carve(&cur, sz[8]);
	m->a_qkv = carve(&cur, sz[9]);
	m->a_att = carve(&cur, sz[10]);
	m->a_atty = carve(&cur, sz[11]);
	m->a_res2 = carve(&cur, sz[12]);
	m->a_ln2 = carve(&cur, sz[13]);
	m->a_ln2m = carve(&cur, sz[14]);
	m->a_ln2r = carve(&cur, sz[15]);
	m->a_fch = carve(&cur, sz[16]);
	m->a_fchg = carve(&cur, sz[17]);
	m->tokens = (int32_t *)carve(&cur, N);
	m->targets = (int32_t *)carve(&cur, N);

	total = wtotal;
	m->ws_n = total;
	m->ws = falloc(total, &m->mem.workspace);
	if (!m->ws)
		return gk_err_sys(err, ENOMEM, "model workspace (%zu MiB)",
				  total * 4 >> 20);
	cur = m->ws;
	m->dres = carve(&cur, ws[0]);
	m->dln = carve(&cur, ws[1]);
	m->datty = carve(&cur, ws[2]);
	m->dqkv = carve(&cur, ws[3]);
	m->dfc = carve(&cur, ws[4]);
	m->datt = carve(&cur, ws[5]);
	m->tpx = carve(&cur, ws[6]);
	m->spg = carve(&cur, ws[7]);
	m->sps = carve(&cur, ws[8]);
	m->spln = carve(&cur, ws[9]);
	return 0;
}

void gk_nn_layer_acts(const gk_nn_model *m, int l, gk_nn_acts *a)
{
	size_t N = (size_t)m->o.batch * (size_t)m->o.seq;
	size_t C = (size_t)m->c.hidden, T = (size_t)m->o.seq;
	size_t tp = m->tp > 1 ? (size_t)m->tp : 1;
	size_t Cq = C / tp, F = 4 * C / tp;
	/* the LayerNorm and residual regions' rows (act_sizes) */
	size_t R = m->sp ? N / tp : N;
	/* a pipeline stage holds its layers l0 .. l1-1 only */
	l -= m->l0;
	size_t k = m->per_layer ? (size_t)l : 0;
	size_t g = m->fchg_per_layer ? (size_t)l : 0;
	a->in = m->resid + (size_t)l * R * C;
	a->out = m->resid + (size_t)(l + 1) * R * C;
	a->ln1 = m->a_ln1 + k * R * C;
	a->ln1m = m->a_ln1m + k * R;
	a->ln1r = m->a_ln1r + k * R;
	a->qkv = m->a_qkv + k * N * 3 * Cq;
	a->att = m->a_att + k * (size_t)m->o.batch * ((size_t)m->c.heads / tp) * T * T;
	a->atty = m->a_atty + k * N * Cq;
	a->res2 = m->a_res2 + k * R * C;
	a->ln2 = m->a_ln2 + k * R * C;
	a->ln2m = m->a_ln2m + k * R;
	a->ln2r = m->a_ln2r + k * R;
	a->fch = m->a_fch + k * N * F;
	a->fchg = m->a_fchg + g * N * F;
}

int gk_nn_new(gk_nn_model **out, const gk_nn_config *c, const gk_nn_opts *o,
	      gk_err *err)
{
	*out = NULL;
	gk_nn_config cc = *c;
	if (gk_nn_config_finish(&cc, err) < 0)
		return -1;
	if (o->batch < 1 || o->seq < 1)
		return gk_errf(err, "model batch %d x sequence %d: both must "
			       "be positive", o->batch, o->seq);
	if (o->seq > cc.positions)
		return gk_errf(err, "model sequence length %d: longer than "
			       "n_positions %lld", o->seq,
			       (long long)cc.positions);
	if ((int64_t)o->batch * o->seq > (1 << 24))
		return gk_errf(err, "model batch %d x sequence %d: more than "
			       "%d tokens", o->batch, o->seq, 1 << 24);
	if (o->recompute < GK_NN_RECOMPUTE_NONE ||
	    o->recompute > GK_NN_RECOMPUTE_LAYER)
		return gk_errf(err, "model recompute mode %d: unknown",
			       (int)o->recompute);
	if (o->threads < 0 || o->threads > 4096)
		return gk_errf(err, "model threads %d: not in 0..4096",
			       o->threads);
	if (o->device != GK_NN_CPU && o->device != GK_NN_CUDA)
		return gk_errf(err, "model device %d: unknown", o->device);
	if (o->flat_multiple < 0)
		return gk_errf(err, "model flat_multiple %d: negative",
			       o->flat_multiple);
	if (o->tp > 1) {
		if (gk_nn_tp_check(&cc, o->tp, err) < 0)
			return -1;
		if (o->tp_rank < 0 || o->tp_rank >= o->tp || !o->tp_comm)
			return gk_errf(err, "model tensor-parallel rank %d of %d: no such rank "
				       "or no communicator", o->tp_rank, o->tp);
	}
	if (o->seq_par && gk_nn_sp_check(o->tp, o->seq, err) < 0)
		return -1;
	int l0 = 0, l1 = (int)cc.layers;
	if (o->pp > 1) {
		if (o->pp_rank < 0 || o->pp_rank >= o->pp)
			return gk_errf(err, "model pipeline stage %d of %d: no such stage",
				       o->pp_rank, o->pp);
		if (gk_nn_pp_chunk_layers(cc.layers, o->pp, o->pp_chunks, o->pp_rank, 0, &l0, &l1,
					  err) < 0)
			return -1;
	} else if (o->pp_chunks > 1) {
		return gk_errf(err, "model pipeline chunks %d: without pipeline stages",
			       o->pp_chunks);
	}
	gk_nn_model *m = calloc(1, sizeof(*m));
	if (!m)
		return gk_err_sys(err, ENOMEM, "model");
	m->c = cc;
	m->o = *o;
	m->nt = o->threads > 0 ? o->threads : omp_get_max_threads();
	m->tp = o->tp > 1 ? o->tp : 1;
	m->tpr = m->tp > 1 ? o->tp_rank : 0;
	m->tpc = m->tp > 1 ? o->tp_comm : NULL;
	m->sp = o->seq_par != 0;
	m->pp = o->pp > 1 ? o->pp : 1;
	m->ppr = m->pp > 1 ? o->pp_rank : 0;
	m->l0 = l0;
	m->l1 = l1;
	m->ppv = m->pp > 1 && o->pp_chunks > 1 ? o->pp_chunks : 1;
	if (build_table(m, err) < 0 || gk_nn_pp_place(m, err) < 0)
		goto fail;
	size_t k = o->flat_multiple > 1 ? (size_t)o->flat_multiple : 1;
	m->nflat = (m->nparams + k - 1) / k * k;
	/* a GPU's unit_params: the host's copy is its range, mapped the same
	 * way, whose pages alone are ever written (the whole model goes from
	 * device to device); a GPU's pipeline stage: its segments', as the
	 * CPU's (its device holds those alone) */
	int pp = m->pp > 1 && o->device == GK_NN_CUDA;
	m->params = (o->device != GK_NN_CUDA ? o->lazy_params
					     : o->unit_params || (pp && o->lazy_params)) ?
		    lazy_alloc(m, &m->lazy_p) :
		    falloc(m->nflat, &m->mem.parameters);
	/* a GPU's bucket_grads: the host mirror is never written either */
	m->grads = (o->device != GK_NN_CUDA ? o->lazy_grads
					    : o->bucket_grads || (pp && o->lazy_grads)) ?
		   lazy_alloc(m, &m->lazy) :
		   falloc(m->nflat, &m->mem.gradients);
	if (!m->params || !m->grads) {
		gk_err_sys(err, ENOMEM, "model parameters (%zu MiB)",
			   m->nparams * 4 >> 20);
		goto fail;
	}
	if (o->device == GK_NN_CUDA && m->lazy_p)
		m->mem.parameters = fbytes(m->nflat / k);
	/* a pipeline stage's mappings take its own range's pages only */
	if (m->pp > 1 && m->lazy_p)
		m->mem.parameters = fbytes(gk_nn_pp_floats(m));
	if (m->pp > 1 && m->lazy)
		m->mem.gradients = fbytes(gk_nn_pp_floats(m));
	if ((o->device == GK_NN_CUDA ? gk_nn_cuda_new(m, err)
				     : alloc_acts(m, err)) < 0)
		goto fail;
	gk_nn_cpu_threads(m->nt);
	*out = m;
	return 0;
fail:
	gk_nn_free(m);
	return -1;
}

int gk_nn_attention_fused(const gk_nn_config *c, const gk_nn_opts *o, gk_err *err)
{
	int want = o->attention;
	const char *env = getenv("GK_CUDA_ATTENTION");
	if (want == GK_NN_ATTN_AUTO && env && *env) {
		if (strcmp(env, "fused") == 0 || strcmp(env, "flash") == 0)
			want = GK_NN_ATTN_FUSED;
		else if (strcmp(env, "matmul") == 0)
			want = GK_NN_ATTN_MATMUL;
		else
			return gk_errf(err, "GK_CUDA_ATTENTION '%s': must be fused "
				       "(or flash) or matmul", env);
	}
	if (want < GK_NN_ATTN_AUTO || want > GK_NN_ATTN_MATMUL)
		return gk_errf(err, "model attention %d: unknown", want);
	int hs = c->heads > 0 ? (int)(c->hidden / c->heads) : 0;
	if (want == GK_NN_ATTN_MATMUL)
		return 0;
	if (gk_nn_flash_fits(hs))
		return 1;
	if (want == GK_NN_ATTN_FUSED)
		return gk_errf(err, "fused attention: head size %d: the kernels "
			       "take 1 to %d (GK_CUDA_ATTENTION=matmul runs the "
			       "matmul path)", hs, GK_NN_FLASH_MAX_HS);
	return 0;
}

const char *gk_nn_attention_desc(const gk_nn_config *c, const gk_nn_opts *o)
{
	gk_err ignore;
	int fused = gk_nn_attention_fused(c, o, &ignore);
	int hs = c->heads > 0 ? (int)(c->hidden / c->heads) : 0;
	return fused < 0 ? NULL : !fused ? "matmul attention" :
	       gk_nn_flash_tc(o->precision, hs) ? "fused attention on tensor cores" :
	       "fused attention";
}

int gk_nn_gelu_epilogue(const gk_nn_config *c, const gk_nn_opts *o, gk_err *err)
{
	(void)o;
	const char *env = getenv("GK_CUDA_GELU");
	int want = -1; /* auto */
	if (env && *env) {
		if (strcmp(env, "epilogue") == 0)
			want = 1;
		else if (strcmp(env, "kernel") == 0)
			want = 0;
		else
			return gk_errf(err, "GK_CUDA_GELU '%s': must be epilogue or "
				       "kernel", env);
	}
	if (want == 0)
		return 0;
	/* cuBLASLt's EPILOGUE_AUX_LD: a multiple of 8 elements */
	int fits = (4 * (uint64_t)c->hidden) % 8 == 0;
	if (!fits && want == 1)
		return gk_errf(err, "GELU epilogue: hidden size %lld: cuBLASLt takes "
			       "the aux matrix's leading dimension (4 x hidden) "
			       "only as a multiple of 8 (GK_CUDA_GELU=kernel runs "
			       "the GELU as a kernel)", (long long)c->hidden);
	return fits;
}

/*
 * What gk_nn_plan and gk_nn_plan_cuda share: *m as c and o make it,
 * finished, its batch and sequence checked; plan_table then builds its
 * table (m->nflat padded to o->flat_multiple) and plan_free frees it.
 */
static int plan_model(gk_nn_model *m, const gk_nn_config *c, const gk_nn_opts *o,
		      gk_nn_mem *out, gk_err *err)
{
	memset(out, 0, sizeof(*out));
	*m = (gk_nn_model){.c = *c, .o = *o};
	if (gk_nn_config_finish(&m->c, err) < 0)
		return -1;
	if (o->batch < 1 || o->seq < 1 || o->seq > m->c.positions || o->flat_multiple < 0)
		return gk_errf(err, "model batch %d x sequence %d: not a model's", o->batch, o->seq);
	return 0;
}

static int plan_table(gk_nn_model *m, gk_err *err)
{
	if (build_table(m, err) < 0)
		return -1;
	size_t k = m->o.flat_multiple > 1 ? (size_t)m->o.flat_multiple : 1;
	m->nflat = (m->nparams + k - 1) / k * k;
	return 0;
}

static void plan_free(gk_nn_model *m)
{
	if (m->ft != m->t)
		free(m->ft);
	free(m->t);
	free(m->blk);
}

int gk_nn_plan(const gk_nn_config *c, const gk_nn_opts *o, gk_nn_mem *out, gk_err *err)
{
	gk_nn_model m;
	if (plan_model(&m, c, o, out, err) < 0)
		return -1;
	if (o->tp > 1 && gk_nn_tp_check(&m.c, o->tp, err) < 0)
		return -1;
	if (o->seq_par && gk_nn_sp_check(o->tp, o->seq, err) < 0)
		return -1;
	m.nt = o->threads > 0 ? o->threads : omp_get_max_threads();
	int rc = plan_table(&m, err);
	if (rc == 0) {
		out->parameters = out->gradients = fbytes(m.nflat);
		if (o->lazy_grads && o->device != GK_NN_CUDA)
			out->gradients = 0;
		if (o->pp > 1 && o->device != GK_NN_CUDA) {
			/* a stage's range (gk_nn_new's accounting of its mappings) */
			m.pp = o->pp;
			m.ppr = o->pp_rank;
			size_t n = gk_nn_pp_floats(&m);
			if (o->lazy_params)
				out->parameters = fbytes(n);
			if (o->lazy_grads)
				out->gradients = fbytes(n);
		}
		if (o->device != GK_NN_CUDA) {
			size_t sz[NSZ], ws[NWS], acts, work;
			act_sizes(&m.c, o, m.nt, sz, ws, &acts, &work);
			out->activations = fbytes(acts);
			out->workspace = fbytes(work);
		}
	}
	plan_free(&m);
	return rc;
}

int gk_nn_plan_cuda(const gk_nn_config *c, const gk_nn_opts *o, gk_nn_mem *out, gk_err *err)
{
	gk_nn_model m;
	if (plan_model(&m, c, o, out, err) < 0)
		return -1;
	int fused = gk_nn_attention_fused(&m.c, o, err);
	if (fused < 0)
		return -1;
	int rc = plan_table(&m, err);
	/* a stage's segments (gk_nn_cuda_segments) */
	m.pp = o->pp > 1 ? o->pp : 1;
	m.ppr = o->pp_rank;
	if (rc == 0) {
		size_t sz[GK_NN_CU_NACT], ss[GK_NN_CU_NWS];
		gk_nn_cuda_layout(&m, fused, sz, ss, out);
	}
	plan_free(&m);
	return rc;
}

void gk_nn_free(gk_nn_model *m)
{
	if (!m)
		return;
	gk_nn_cuda_free(m);
	if (m->ft != m->t)
		free(m->ft);
	free(m->t);
	free(m->blk);
	free(m->ppat);
	if (m->lazy_p)
		munmap(m->params, lazy_bytes(m));
	else
		free(m->params);
	if (m->lazy)
		munmap(m->grads, lazy_bytes(m));
	else
		free(m->grads);
	if (m->slot_base && m->acts) { /* (the device's went with it) */
		gk_nn_pp_use_slot(m, 0); /* acts' own pointers back */
		for (int i = 1; i < m->nslots; i++)
			free(m->slot_base[i]);
	}
	free(m->slot_base);
	free(m->slot_state);
	free(m->acts);
	free(m->ws);
	free(m);
}

int gk_nn_pp_slots(gk_nn_model *m, int n, gk_err *err)
{
	if (m->slot_base || n < 1)
		return gk_errf(err, "model: %d activation slots (once, at least 1)", n);
	m->slot_base = calloc((size_t)n, sizeof *m->slot_base);
	m->slot_state = calloc((size_t)n, sizeof *m->slot_state);
	if (!m->slot_base || !m->slot_state)
		return gk_err_sys(err, ENOMEM, "model activation slots");
	m->nslots = 1;
	m->slot = 0;
	m->slot_base[0] = m->acts;
	if (m->cu) {
		/* the device's activations (the slots' bases are the backend's) */
		if (gk_nn_cuda_slots(m, n, err) < 0)
			return -1;
		m->nslots = n;
		return 0;
	}
	for (int i = 1; i < n; i++) {
		if (!(m->slot_base[i] = falloc(m->acts_n, &m->mem.activations)))
			return gk_err_sys(err, ENOMEM, "model activations of %d micro-batches "
					  "(%zu MiB)", n, (size_t)n * m->acts_n * 4 >> 20);
		m->nslots++;
	}
	return 0;
}

void gk_nn_pp_use_slot(gk_nn_model *m, int i)
{
	if (!m->slot_base || i == m->slot || i < 0 || i >= m->nslots)
		return;
	struct gk_nn_slot_state *was = &m->slot_state[m->slot], *now = &m->slot_state[i];
	*was = (struct gk_nn_slot_state){m->have_fwd, m->have_targets, m->nvalid, m->loss};
	if (m->cu) {
		gk_nn_cuda_use_slot(m, m->slot, i);
		goto state;
	}
	/* every activation pointer is acts plus an offset (alloc_acts) */
	ptrdiff_t d = m->slot_base[i] - m->acts;
	float **f[] = {&m->resid, &m->lnf, &m->lnfm, &m->lnfr, &m->logits, &m->lse,
		       &m->a_ln1, &m->a_ln1m, &m->a_ln1r, &m->a_qkv, &m->a_att, &m->a_atty,
		       &m->a_res2, &m->a_ln2, &m->a_ln2m, &m->a_ln2r, &m->a_fch, &m->a_fchg};
	for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
		*f[k] += d;
	m->tokens = (int32_t *)((float *)m->tokens + d);
	m->targets = (int32_t *)((float *)m->targets + d);
	m->acts = m->slot_base[i];
state:
	m->slot = i;
	m->have_fwd = now->have_fwd;
	m->have_targets = now->have_targets;
	m->nvalid = now->nvalid;
	m->loss = now->loss;
}

const gk_nn_config *gk_nn_config_of(const gk_nn_model *m)
{
	return &m->c;
}

float *gk_nn_params(gk_nn_model *m)
{
	return m->params;
}

float *gk_nn_grads(gk_nn_model *m)
{
	return m->grads;
}

size_t gk_nn_nparams(const gk_nn_model *m)
{
	return m->nparams;
}

size_t gk_nn_nflat(const gk_nn_model *m)
{
	return m->nflat;
}

size_t gk_nn_param_count(const gk_nn_model *m)
{
	return m->nfull - (size_t)(m->c.vocab_pad - m->c.vocab) * (size_t)m->c.hidden;
}

const gk_nn_tensor *gk_nn_full_tensors(const gk_nn_model *m, size_t *n)
{
	*n = m->nft;
	return m->ft;
}

size_t gk_nn_full_nparams(const gk_nn_model *m)
{
	return m->nfull;
}

const gk_nn_tensor *gk_nn_tensors(const gk_nn_model *m, size_t *n)
{
	*n = m->nt_tensors;
	return m->t;
}

void gk_nn_memory(const gk_nn_model *m, gk_nn_mem *out)
{
	if (m->cu) {
		gk_nn_cuda_memory(m, out);
		return;
	}
	*out = m->mem;
}

void gk_nn_host_memory(const gk_nn_model *m, gk_nn_host_mem *out)
{
	*out = (gk_nn_host_mem){0};
	if (!m->cu)
		return;
	/* (bucket_grads' mapping adds nothing to m->mem) */
	out->params = m->mem.parameters;
	out->grads = m->mem.gradients;
	out->pinned = gk_nn_cuda_pinned(m);
}

/* ---- accounting ------------------------------------------------------------------- */

double gk_nn_flops(const gk_nn_model *m)
{
	double L = (double)m->c.layers, C = (double)m->c.hidden;
	double V = (double)m->c.vocab, T = (double)m->o.seq;
	double tokens = (double)m->o.batch * T;
	/* the matmul weights: 12 C^2 per block and the LM head */
	double n = L * 12.0 * C * C + V * C;
	/* reference: PaLM (Chowdhery et al. 2022) appendix B: 6N + 12 L C T
	 * per token, attention counted over the whole T x T square */
	return tokens * (6.0 * n + 12.0 * L * C * T);
}

/* sum of g[i]^2 over one chunk, in 8 interleaved double lanes (element
 * i into lane i % 8) added in order at the end: the same bits at every
 * SIMD width, and no chain of dependent adds through the whole chunk */
GK_NN_SIMD_CLONES
static double sumsq_chunk(const float *g, size_t n)
{
	double acc[8] = {0};
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			acc[l] += (double)g[i + l] * (double)g[i + l];
	for (; i < n; i++)
		acc[i % 8] += (double)g[i] * (double)g[i];
	double s = 0.0;
	for (int l = 0; l < 8; l++)
		s += acc[l];
	return s;
}

double gk_nn_sumsq(const float *g, size_t n)
{
	/* fixed chunks summed in order: the same result on every run and
	 * for every thread count */
	enum { CHUNK = 1 << 16 };
	size_t nc = (n + CHUNK - 1) / CHUNK;
	double *part = malloc((nc ? nc : 1) * sizeof(double));
	double s = 0.0;
	if (!part) {
		for (size_t k = 0; k < nc; k++)
			s += sumsq_chunk(g + k * CHUNK,
					 k + 1 < nc ? CHUNK : n - k * CHUNK);
		return s;
	}
#pragma omp parallel for schedule(static)
	for (size_t k = 0; k < nc; k++)
		part[k] = sumsq_chunk(g + k * CHUNK,
				      k + 1 < nc ? CHUNK : n - k * CHUNK);
	for (size_t k = 0; k < nc; k++)
		s += part[k];
	free(part);
	return s;
}
