/*
 * weights.c - the model's weights: initialisation (GPT-2's, from a seed;
 * a rank's range or a pipeline stage's alone) and loading them from a
 * checkpoint (Hugging Face names, the whole model or a range of the flat
 * buffer). The table they fill, and its buffers, are gpt.c's.
 *
 * reference: transformers/models/gpt2/modeling_gpt2.py (_init_weights,
 * the scaled init of c_proj, the tied lm_head).
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "nn/cuda_internal.h"

/* ---- initialisation ------------------------------------------------------------ */

/* reference: Steele, Lea, Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014 (splitmix64) */
static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1]: 53 random bits, never 0 so log() is finite. */
static double unif(uint64_t *s)
{
	return ((splitmix64(s) >> 11) + 1) * 0x1.0p-53;
}

/*
 * n samples of N(0, std) by Box-Muller from the splitmix64 stream of
 * state *s (each pair of uniforms gives two normals).
 */
static void normal_fill(float *x, size_t n, float std, uint64_t *s)
{
	for (size_t i = 0; i < n; i += 2) {
		double u1 = unif(s), u2 = unif(s);
		double r = sqrt(-2.0 * log(u1));
		x[i] = (float)(r * cos(2 * M_PI * u2) * std);
		if (i + 1 < n)
			x[i + 1] = (float)(r * sin(2 * M_PI * u2) * std);
	}
}

/*
 * Each tensor draws from its own stream, seeded from (seed, tensor index)
 * through splitmix64, so a tensor's values do not depend on the sizes of
 * the ones before it and tensors can be filled in parallel.
 */
static void init_into(const gk_nn_tensor *tt, size_t n, size_t nparams, float *params,
		      int64_t layers, int nt, uint64_t seed, const gk_nn_model *keep,
		      size_t lo, size_t hi, size_t head)
{
	float std = 0.02f;
	float resid_std = 0.02f / sqrtf(2.0f * (float)layers);
	if (!keep)
		memset(params, 0, nparams * sizeof(float));
#pragma omp parallel for schedule(dynamic) num_threads(nt)
	for (size_t i = 0; i < n; i++) {
		const gk_nn_tensor *t = &tt[i];
		float *p = params + t->off;
		uint64_t s = seed ^ (0x6a09e667f3bcc909ull * (i + 1));
		(void)splitmix64(&s);
		if (t->ndim == 2) {
			/* wte: the vocab rows only; padded rows stay zero */
			size_t k = (size_t)t->shape[0] * (size_t)t->shape[1];
			int resid = gk_str_ends(t->name, "attn.c_proj.weight") ||
				    gk_str_ends(t->name, "mlp.c_proj.weight");
			normal_fill(p, k, resid ? resid_std : std, &s);
		} else if (gk_str_ends(t->name, "ln_1.weight") ||
			   gk_str_ends(t->name, "ln_2.weight") ||
			   gk_str_ends(t->name, "ln_f.weight")) {
			for (size_t k = 0; k < t->numel; k++)
				p[k] = 1.0f;
		}
		/* keep: the tensor's pages outside [0, head) and [lo, hi) go
		 * back at once (whole pages of this tensor only: no other
		 * thread's) */
		if (keep) {
			size_t a = t->off, b = t->off + t->numel;
			if (a < head)
				a = head < b ? head : b;
			if (a < lo && a < b)
				gk_nn_lazy_release(keep, params, a, b < lo ? b : lo);
			if (b > hi && b < keep->nparams)
				gk_nn_lazy_release(keep, params, a > hi ? a : hi, b);
		}
	}
}

/*
 * Under tensor parallelism the whole model is drawn and this rank keeps
 * its slices, so that every layout starts from the same parameters.
 */
int gk_nn_init(gk_nn_model *m, uint64_t seed)
{
	if (m->tp == 1) {
		init_into(m->t, m->nt_tensors, m->nparams, m->params, m->c.layers, m->nt, seed,
			  NULL, 0, 0, 0);
		return 0;
	}
	float *full = malloc(m->nfull * sizeof(float));
	if (!full)
		return -1;
	init_into(m->ft, m->nft, m->nfull, full, m->c.layers, m->nt, seed, NULL, 0, 0, 0);
	gk_nn_tp_scatter(m, full, m->params);
	free(full);
	return 0;
}

int gk_nn_init_range(gk_nn_model *m, uint64_t seed, size_t lo, size_t hi)
{
	if (!m->lazy_p || m->tp > 1)
		return gk_nn_init(m, seed);
	init_into(m->t, m->nt_tensors, m->nparams, m->params, m->c.layers, m->nt, seed, m, lo,
		  hi, 0);
	return 0;
}

int gk_nn_init_stage(gk_nn_model *m, uint64_t seed)
{
	size_t lo, hi, shared;
	if (m->pp == 1)
		return gk_nn_init(m, seed);
	if (!m->lazy_p || m->tp > 1) {
		/* tensor parallelism draws the whole model: the rest goes back after */
		if (gk_nn_init(m, seed) < 0)
			return -1;
		gk_nn_pp_release(m);
		return 0;
	}
	gk_nn_pp_range(m, m->ppr, &lo, &hi, &shared);
	init_into(m->t, m->nt_tensors, m->nparams, m->params, m->c.layers, m->nt, seed, m, lo,
		  hi, shared);
	/* the pages small tensors share with their neighbours, whole now */
	gk_nn_pp_release(m);
	return 0;
}

/* ---- loading -------------------------------------------------------------------- */

static const char *strip_prefix(const char *name)
{
	return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

static const gk_nn_tensor *find_tensor(const gk_nn_model *m, const char *name)
{
	const char *s = strip_prefix(name);
	for (size_t i = 0; i < m->nt_tensors; i++)
		if (strcmp(strip_prefix(m->t[i].name), s) == 0)
			return &m->t[i];
	return NULL;
}

/*
 * Read elements [lo, hi) of entry e (in however many parts:
 * row or flat slices) as f32 into dst (hi - lo floats): nothing else of the entry is
 * read.
 */
static int read_entry(const gk_ckpt_set *s, const gk_ckpt_entry *e,
		      float *dst, uint64_t lo, uint64_t hi, gk_err *err)
{
	if (!gk_dtype_is_float(e->dtype))
		return gk_errf(err, "load tensor '%s': dtype %s: not a float "
			       "type", e->name, gk_dtype_name(e->dtype));
	uint64_t esz = 0;
	if (gk_st_nbytes(e->dtype, 1, &esz) < 0 || esz == 0)
		return gk_errf(err, "load tensor '%s': dtype %s", e->name,
			       gk_dtype_name(e->dtype));
	/* converted in pieces so memory stays bounded for big tensors */
	enum { PIECE = 1 << 20 };
	void *tmp = NULL;
	if (e->dtype != GK_DT_F32 && !(tmp = malloc(PIECE * esz)))
		return gk_err_sys(err, ENOMEM, "load tensor '%s'", e->name);
	int rc = 0;
	for (size_t k = 0; k < e->nparts && rc == 0; k++) {
		const gk_ckpt_part *p = &e->parts[k];
		const gk_st_file *f = s->files[p->file];
		/* the part's elements of the entry, and what of them is wanted */
		uint64_t p0 = p->el0, p1 = p0 + p->nel;
		uint64_t a = p0 > lo ? p0 : lo, b = p1 < hi ? p1 : hi;
		for (uint64_t i = a; i < b && rc == 0;) {
			uint64_t c = b - i < PIECE ? b - i : PIECE;
			if (e->dtype == GK_DT_F32) {
				rc = gk_st_read(f, p->t, (i - p0) * 4, dst + (i - lo), c * 4, err);
			} else {
				rc = gk_st_read(f, p->t, (i - p0) * esz, tmp, c * esz,
						err);
				if (rc == 0)
					gk_convert(dst + (i - lo), GK_DT_F32, tmp,
						   e->dtype, c);
			}
			i += c;
		}
	}
	free(tmp);
	return rc;
}

static int shape_is(const gk_ckpt_entry *e, const gk_nn_tensor *t)
{
	if (e->ndim != t->ndim)
		return 0;
	for (int d = 0; d < t->ndim; d++)
		if (e->shape[d] != (uint64_t)t->shape[d])
			return 0;
	return 1;
}

static void shape_str(const gk_nn_tensor *t, char *buf, size_t n)
{
	if (t->ndim == 1)
		snprintf(buf, n, "[%lld]", (long long)t->shape[0]);
	else
		snprintf(buf, n, "[%lld, %lld]", (long long)t->shape[0],
			 (long long)t->shape[1]);
}

/* Load the elements [lo, hi) of m's flat buffer from s; every tensor's
 * name and shape checked, and lm_head.weight against wte in that range. */
static int load_set(gk_nn_model *m, gk_ckpt_set *s, size_t lo, size_t hi, gk_err *err)
{
	unsigned char *seen = calloc(m->nt_tensors, 1);
	const gk_ckpt_entry *head = NULL;
	if (!seen)
		return gk_err_sys(err, ENOMEM, "load");
	int rc = -1;
	for (size_t i = 0; i < s->n; i++) {
		const gk_ckpt_entry *e = &s->e[i];
		if (gk_ckpt_is_buffer(e->name))
			continue; /* causal-mask buffers of older checkpoints */
		if (strcmp(e->name, "lm_head.weight") == 0) {
			head = e;
			continue;
		}
		const gk_nn_tensor *t = find_tensor(m, e->name);
		if (!t) {
			gk_errf(err, "load tensor '%s': not a parameter of "
				"this GPT-2 model", e->name);
			goto out;
		}
		if (!shape_is(e, t)) {
			char want[64], got[64];
			shape_str(t, want, sizeof(want));
			gk_st_shape_str(e->shape, e->ndim, got, sizeof(got));
			gk_errf(err, "load tensor '%s': shape %s, the model's "
				"is %s", e->name, got, want);
			goto out;
		}
		uint64_t numel = (uint64_t)t->shape[0] * (uint64_t)(t->ndim == 2 ? t->shape[1] : 1);
		size_t a = lo > t->off ? lo - t->off : 0;
		size_t b = hi < t->off + numel ? (hi > t->off ? hi - t->off : 0) : numel;
		if (a < b && read_entry(s, e, m->params + t->off + a, a, b, err) < 0)
			goto out;
		seen[t - m->t] = 1;
	}
	for (size_t i = 0; i < m->nt_tensors; i++)
		if (!seen[i]) {
			gk_errf(err, "load tensor '%s': missing", m->t[i].name);
			goto out;
		}
	if (head) {
		const gk_nn_tensor *wte = &m->t[0];
		if (!shape_is(head, wte)) {
			gk_errf(err, "load tensor 'lm_head.weight': shape "
				"differs from wte (the head must be tied)");
			goto out;
		}
		/* its elements [a, b), those of wte that were loaded */
		size_t n = (size_t)wte->shape[0] * (size_t)wte->shape[1];
		size_t a = lo > m->wte ? lo - m->wte : 0;
		size_t b = hi < m->wte + n ? (hi > m->wte ? hi - m->wte : 0) : n;
		if (a > b)
			a = b;
		float *h = malloc((b - a + 1) * sizeof(float));
		if (!h) {
			gk_err_sys(err, ENOMEM, "load tensor 'lm_head.weight'");
			goto out;
		}
		int r = a < b ? read_entry(s, head, h, a, b, err) : 0;
		if (r == 0 && memcmp(h, m->params + m->wte + a, (b - a) * sizeof(float))) {
			gk_errf(err, "load tensor 'lm_head.weight': differs "
				"from wte (only a tied head is supported)");
			r = -1;
		}
		free(h);
		if (r < 0)
			goto out;
	}
	rc = 0;
out:
	free(seen);
	return rc;
}

int gk_nn_load(gk_nn_model *m, const char *path, gk_err *err)
{
	gk_ckpt_set *s = NULL;
	char *in[1] = {(char *)path};
	if (gk_ckpt_open(&s, in, 1, err) < 0)
		return -1;
	/*
	 * Under tensor parallelism the whole model is read (a checkpoint of
	 * any layout holds it) and this rank keeps its slices.
	 */
	gk_nn_model whole = *m;
	if (m->tp > 1) {
		whole.t = m->ft;
		whole.nt_tensors = m->nft;
		whole.nparams = m->nfull;
		whole.wte = 0;
		if (!(whole.params = malloc(m->nfull * sizeof(float)))) {
			gk_ckpt_close(s);
			return gk_err_sys(err, ENOMEM, "load '%s'", path);
		}
	}
	/* padded rows of wte stay zero; a failed load leaves zeros, not a
	 * half-loaded model */
	memset(whole.params, 0, whole.nparams * sizeof(float));
	int rc = load_set(&whole, s, 0, whole.nparams, err);
	if (rc < 0)
		memset(m->params, 0, m->nparams * sizeof(float));
	else if (m->tp > 1)
		gk_nn_tp_scatter(m, whole.params, m->params);
	if (m->tp > 1)
		free(whole.params);
	gk_ckpt_close(s);
	return rc;
}

int gk_nn_load_range(gk_nn_model *m, const char *path, size_t lo, size_t hi, gk_err *err)
{
	if (m->tp > 1)
		return gk_errf(err, "load '%s': a range of a model split by tensor parallelism",
			       path);
	if (hi > m->nparams)
		hi = m->nparams;
	if (lo > hi)
		lo = hi;
	gk_ckpt_set *s = NULL;
	char *in[1] = {(char *)path};
	if (gk_ckpt_open(&s, in, 1, err) < 0)
		return -1;
	/* as gk_nn_load, in the range: padded rows zero, a failure zeros */
	memset(m->params + lo, 0, (hi - lo) * sizeof(float));
	int rc = load_set(m, s, lo, hi, err);
	if (rc < 0)
		memset(m->params + lo, 0, (hi - lo) * sizeof(float));
	gk_ckpt_close(s);
	return rc;
}

