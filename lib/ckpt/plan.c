/*
 * plan.c - deciding which tensors (or rows of them) go to which file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

void gk_ckpt_plan_free(gk_ckpt_plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->f[i].name);
		free(p->f[i].items);
	}
	free(p->f);
	memset(p, 0, sizeof(*p));
}

static int plan_files(gk_ckpt_plan *p, size_t n, gk_err *err)
{
	memset(p, 0, sizeof(*p));
	p->f = calloc(n + 1, sizeof(*p->f));
	if (!p->f)
		return gk_err_sys(err, ENOMEM, "plan");
	p->n = n;
	for (size_t i = 0; i < n; i++)
		p->f[i].rank = -1;
	return 0;
}

static int push(gk_ckpt_outfile *f, gk_ckpt_item it, uint64_t bytes,
		gk_err *err)
{
	if (GK_GROW(f->items, f->cap, f->n + 1, "plan", err))
		return -1;
	f->items[f->n++] = it;
	f->bytes += bytes;
	return 0;
}

static gk_ckpt_item whole(const gk_ckpt_set *s, size_t i)
{
	const gk_ckpt_entry *e = &s->e[i];
	return (gk_ckpt_item){i, 0, e->ndim ? e->shape[0] : 1, 0};
}

/* HF names: model.safetensors alone, else model-0000i-of-0000N + index. */
static int hf_names(gk_ckpt_plan *p, gk_err *err)
{
	for (size_t i = 0; i < p->n; i++) {
		int r = p->n == 1 ? asprintf(&p->f[i].name, "%s", GK_CKPT_SINGLE)
				  : asprintf(&p->f[i].name, "model-%05zu-of-%05zu.safetensors",
					     i + 1, p->n);
		if (r < 0)
			return gk_err_sys(err, ENOMEM, "plan");
	}
	p->index = p->n > 1;
	return 0;
}

int gk_ckpt_plan_one(const gk_ckpt_set *s, const char *name, gk_ckpt_plan *p,
		     gk_err *err)
{
	if (plan_files(p, 1, err))
		return -1;
	if (!(p->f[0].name = strdup(name)))
		return gk_err_sys(err, ENOMEM, "plan");
	for (size_t i = 0; i < s->n; i++)
		if (push(&p->f[0], whole(s, i), s->e[i].out_bytes, err))
			return -1;
	p->total = s->bytes;
	return 0;
}

/*
 * reference: huggingface_hub serialization/_base.py
 * split_state_dict_into_shards_factory. The open shard stays open while
 * an oversized tensor is emitted as a shard of its own, so that shard
 * comes first in the list.
 */
int gk_ckpt_plan_size(const gk_ckpt_set *s, uint64_t max, gk_ckpt_plan *p,
		      gk_err *err)
{
	/*
	 * group[i]: the shard entry i joins, numbered as shards are opened;
	 * pos[g]: its place in the list, given when the shard is closed.
	 */
	size_t *group = malloc((s->n + 1) * sizeof(size_t));
	size_t *pos = malloc((s->n + 1) * sizeof(size_t));
	size_t ngroups = 0, nshards = 0, cur = SIZE_MAX;
	uint64_t cur_size = 0;
	if (!group || !pos) {
		free(group);
		free(pos);
		return gk_err_sys(err, ENOMEM, "plan");
	}
	for (size_t i = 0; i < s->n; i++) {
		uint64_t sz = s->e[i].out_bytes;
		if (sz > max) {
			group[i] = ngroups;
			pos[ngroups++] = nshards++;
			continue;
		}
		if (cur != SIZE_MAX && cur_size + sz > max) {
			pos[cur] = nshards++;
			cur = SIZE_MAX;
			cur_size = 0;
		}
		if (cur == SIZE_MAX)
			cur = ngroups++;
		group[i] = cur;
		cur_size += sz;
	}
	if (cur != SIZE_MAX)
		pos[cur] = nshards++;
	size_t *shard = group;
	for (size_t i = 0; i < s->n; i++)
		shard[i] = pos[group[i]];
	free(pos);
	if (nshards == 0)
		nshards = 1; /* no tensors: one empty model.safetensors */
	if (plan_files(p, nshards, err) || hf_names(p, err)) {
		free(shard);
		return -1;
	}
	for (size_t i = 0; i < s->n; i++)
		if (push(&p->f[shard[i]], whole(s, i), s->e[i].out_bytes, err)) {
			free(shard);
			return -1;
		}
	free(shard);
	p->total = s->bytes;
	return 0;
}

int gk_ckpt_plan_count(const gk_ckpt_set *s, size_t n, gk_ckpt_plan *p,
		       gk_err *err)
{
	if (n == 0 || n > s->n)
		return gk_errf(err, "shards: cannot make %zu shards of %zu tensors", n,
			       s->n);
	if (plan_files(p, n, err) || hf_names(p, err))
		return -1;
	/*
	 * Each tensor goes to the shard its midpoint falls in, moving at most
	 * one shard on at a time and early enough that no shard stays empty.
	 */
	uint64_t before = 0, total = s->bytes ? s->bytes : 1;
	size_t cur = 0;
	for (size_t i = 0; i < s->n; i++) {
		uint64_t sz = s->e[i].out_bytes;
		long double mid = (long double)before + (long double)sz / 2;
		size_t want = (size_t)(mid * (long double)n / (long double)total);
		if (i > 0 && want > cur && p->f[cur].n > 0)
			cur++;
		if (n - cur > s->n - i)
			cur = n - (s->n - i);
		if (cur >= n)
			cur = n - 1;
		if (push(&p->f[cur], whole(s, i), sz, err))
			return -1;
		before += sz;
	}
	p->total = s->bytes;
	return 0;
}

static int rank_names(gk_ckpt_plan *p, gk_err *err)
{
	for (size_t i = 0; i < p->n; i++) {
		p->f[i].rank = (int)i;
		if (!(p->f[i].name = gk_ckpt_rank_file("model", (int)i, (int)p->n)))
			return gk_err_sys(err, ENOMEM, "plan");
	}
	p->world = (int)p->n;
	return 0;
}

static const gk_ckpt_set *size_set;
static int by_size_desc(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	uint64_t sx = size_set->e[x].out_bytes, sy = size_set->e[y].out_bytes;
	if (sx != sy)
		return sx > sy ? -1 : 1;
	return x < y ? -1 : x > y;
}

int gk_ckpt_plan_ranks(const gk_ckpt_set *s, size_t n, int slice,
		       gk_ckpt_plan *p, gk_err *err)
{
	if (n == 0 || n > 99999)
		return gk_errf(err, "ranks: %zu is not between 1 and 99999", n);
	if (plan_files(p, n, err) || rank_names(p, err))
		return -1;
	p->total = s->bytes;
	if (slice) {
		for (size_t i = 0; i < s->n; i++) {
			const gk_ckpt_entry *e = &s->e[i];
			uint64_t rowel = 1;
			for (int d = 1; d < e->ndim; d++)
				rowel *= e->shape[d];
			/* Scalars, and sub-byte rows (F4, F6) that cannot be cut on a
			 * byte boundary, stay whole on rank 0. */
			if (e->ndim == 0 || rowel * gk_dtype_bits(e->out_dtype) % 8) {
				if (push(&p->f[0], whole(s, i), e->out_bytes, err))
					return -1;
				continue;
			}
			uint64_t rows = e->shape[0], chunk = (rows + n - 1) / n;
			uint64_t rowbytes = rows ? e->out_bytes / rows : 0;
			for (size_t r = 0; r < n; r++) {
				uint64_t a = r * chunk < rows ? r * chunk : rows;
				uint64_t b = a + chunk < rows ? a + chunk : rows;
				gk_ckpt_item it = {i, a, b - a, 1};
				if (push(&p->f[r], it, (b - a) * rowbytes, err))
					return -1;
			}
		}
		return 0;
	}
	/* Largest first to the least-full rank (LPT); ties to the lower rank. */
	size_t *ord = malloc((s->n + 1) * sizeof(size_t));
	if (!ord)
		return gk_err_sys(err, ENOMEM, "plan");
	for (size_t i = 0; i < s->n; i++)
		ord[i] = i;
	size_set = s;
	qsort(ord, s->n, sizeof(size_t), by_size_desc);
	for (size_t k = 0; k < s->n; k++) {
		size_t best = 0;
		for (size_t r = 1; r < n; r++)
			if (p->f[r].bytes < p->f[best].bytes)
				best = r;
		if (push(&p->f[best], whole(s, ord[k]), s->e[ord[k]].out_bytes, err)) {
			free(ord);
			return -1;
		}
	}
	free(ord);
	p->index = 1;
	return 0;
}

char *gk_ckpt_rank_file(const char *kind, int rank, int world)
{
	char *p;
	if (asprintf(&p, "%s-rank-%05d-of-%05d.safetensors", kind, rank, world) < 0)
		return NULL;
	return p;
}
