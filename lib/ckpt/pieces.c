/*
 * pieces.c - the tensors of a set's files put together by name: copies of
 * one tensor checked identical, row slices and flat slices placed in
 * order and checked to cover it exactly once (gpukit-ckpt(5)).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/internal.h"

/* One tensor in one file, before grouping by name. */
typedef struct occ {
	const char *name;
	size_t file, seq;
	const gk_st_tensor *t;
	int sliced;
	uint64_t start, stop, rows;
	/* a flat slice (gpukit.flat.NAME): elements [start, stop) of a tensor
	 * of shape fshape[0..fndim) */
	int flat, fndim;
	uint64_t fshape[GK_CKPT_FLAT_DIMS];
} occ;

/* Pieces in order of their start (few: an insertion sort, stable). */
static void sort_by_start(occ *o, size_t k)
{
	for (size_t i = 1; i < k; i++)
		for (size_t j = i; j > 0 && o[j].start < o[j - 1].start; j--) {
			occ t = o[j];
			o[j] = o[j - 1];
			o[j - 1] = t;
		}
}

static int by_name_seq(const void *a, const void *b)
{
	const occ *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* One decimal number (digits only) that fits 64 bits; advances *p. */
static int slice_num(const char **p, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++)
		if (gk_mul_overflow(v, 10, &v) || gk_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return -2;
	*p = s;
	*out = v;
	return 0;
}

/*
 * "START:STOP/ROWS" (gpukit-ckpt(5)): digits only, no sign, no space, no
 * trailing text, START <= STOP <= ROWS. Returns NULL or why it is bad.
 */
static const char *parse_slice(const char *v, occ *o)
{
	uint64_t n[3];
	const char *p = v;
	for (int i = 0; i < 3; i++) {
		int r = slice_num(&p, &n[i]);
		if (r == -2)
			return "a number does not fit 64 bits";
		if (r || *p != (i == 0 ? ':' : i == 1 ? '/' : '\0'))
			return "expected START:STOP/ROWS";
		if (i < 2)
			p++;
	}
	if (n[0] > n[1])
		return "START is past STOP";
	if (n[1] > n[2])
		return "STOP is past ROWS";
	o->start = n[0];
	o->stop = n[1];
	o->rows = n[2];
	return NULL;
}

/*
 * "START:STOP/D0,D1,..." (gpukit-ckpt(5)): elements START up to STOP of a
 * tensor of that shape in row-major order, 1 to GK_CKPT_FLAT_DIMS
 * dimensions; the same rules for numbers as parse_slice's. Returns NULL
 * or why it is bad.
 */
static const char *parse_flat(const char *v, occ *o)
{
	uint64_t n[2], numel = 1;
	const char *p = v;
	for (int i = 0; i < 2; i++) {
		int r = slice_num(&p, &n[i]);
		if (r == -2)
			return "a number does not fit 64 bits";
		if (r || *p != (i == 0 ? ':' : '/'))
			return "expected START:STOP/D0,D1,...";
		p++;
	}
	o->fndim = 0;
	for (;;) {
		if (o->fndim == GK_CKPT_FLAT_DIMS)
			return "too many dimensions";
		int r = slice_num(&p, &o->fshape[o->fndim]);
		if (r == -2)
			return "a number does not fit 64 bits";
		if (r || (*p != ',' && *p != '\0'))
			return "expected START:STOP/D0,D1,...";
		if (gk_mul_overflow(numel, o->fshape[o->fndim++], &numel))
			return "the shape's size does not fit 64 bits";
		if (!*p++)
			break;
	}
	if (n[0] > n[1])
		return "START is past STOP";
	if (n[1] > numel)
		return "STOP is past the tensor's elements";
	o->start = n[0];
	o->stop = n[1];
	return NULL;
}

/* The slice metadata of one file, sorted by tensor name for bsearch. */
typedef struct slice_kv {
	const char *name, *value;
} slice_kv;

static int by_slice_name(const void *a, const void *b)
{
	return strcmp(((const slice_kv *)a)->name, ((const slice_kv *)b)->name);
}

static slice_kv *file_slices(const gk_st_file *f, const char *prefix, size_t *n)
{
	size_t pl = strlen(prefix), k = 0;
	slice_kv *v = malloc((f->nmeta + 1) * sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < f->nmeta; i++)
		if (strncmp(f->meta[i].key, prefix, pl) == 0)
			v[k++] = (slice_kv){f->meta[i].key + pl, f->meta[i].value};
	if (k)
		qsort(v, k, sizeof(*v), by_slice_name);
	*n = k;
	return v;
}

static const char *find_slice(const slice_kv *v, size_t n, const char *name)
{
	slice_kv key = {name, NULL};
	const slice_kv *r = n ? bsearch(&key, v, n, sizeof(*v), by_slice_name) : NULL;
	return r ? r->value : NULL;
}

static int same_shape(const gk_st_tensor *a, const gk_st_tensor *b, int from)
{
	if (a->ndim != b->ndim)
		return 0;
	for (int i = from; i < a->ndim; i++)
		if (a->shape[i] != b->shape[i])
			return 0;
	return 1;
}

static int make_flat_entry(gk_ckpt_set *s, gk_ckpt_entry *e, occ *o, size_t k, gk_err *err);

/* Build one entry from the occurrences [o, o+k) of one name. */
static int make_entry(gk_ckpt_set *s, gk_ckpt_entry *e, occ *o, size_t k,
		      gk_err *err)
{
	const char *fa = s->files[o[0].file]->path;
	e->name = strdup(o[0].name);
	e->dtype = e->out_dtype = o[0].t->dtype;
	e->ndim = o[0].t->ndim;
	e->shape = calloc((size_t)e->ndim + 1, sizeof(uint64_t));
	e->parts = calloc(k, sizeof(*e->parts));
	if (!e->name || !e->shape || !e->parts)
		return gk_err_sys(err, ENOMEM, "merge");
	if (e->ndim)
		memcpy(e->shape, o[0].t->shape, (size_t)e->ndim * sizeof(uint64_t));
	for (size_t i = 0; i < k; i++)
		if (o[i].flat)
			return make_flat_entry(s, e, o, k, err);
	for (size_t i = 1; i < k; i++)
		if (o[i].sliced != o[0].sliced)
			return gk_errf(err, "tensor '%s': a row slice in '%s' but whole in '%s'",
				       e->name, s->files[o[o[i].sliced ? i : 0].file]->path,
				       s->files[o[o[i].sliced ? 0 : i].file]->path);
	if (!o[0].sliced) {
		/* Copies of one tensor: keep the first when all are identical. */
		for (size_t i = 1; i < k; i++) {
			const char *fb = s->files[o[i].file]->path;
			uint64_t ha, hb;
			if (o[i].t->dtype != o[0].t->dtype || !same_shape(o[i].t, o[0].t, 0))
				return gk_errf(err, "tensor '%s': conflicting copies in '%s' and '%s' (dtype or shape differ)",
					       e->name, fa, fb);
			const gk_st_file *A = s->files[o[0].file], *B = s->files[o[i].file];
			if (gk_xxh3_fd(A->fd, A->data_off + o[0].t->begin,
				       o[0].t->end - o[0].t->begin, &ha, A->path, err) ||
			    gk_xxh3_fd(B->fd, B->data_off + o[i].t->begin,
				       o[i].t->end - o[i].t->begin, &hb, B->path, err))
				return -1;
			if (ha != hb)
				return gk_errf(err, "tensor '%s': conflicting copies in '%s' and '%s' (contents differ)",
					       e->name, fa, fb);
		}
		e->parts[0] = (gk_ckpt_part){o[0].file, o[0].t, 0, e->ndim ? e->shape[0] : 1,
					    0, 0};
		e->nparts = 1;
	} else {
		/* Row slices: sort by start; they must tile [0, rows) exactly. */
		sort_by_start(o, k);
		uint64_t at = 0;
		e->shape[0] = o[0].rows;
		for (size_t i = 0; i < k; i++) {
			const char *fb = s->files[o[i].file]->path;
			if (o[i].t->dtype != o[0].t->dtype || !same_shape(o[i].t, o[0].t, 1) ||
			    o[i].rows != o[0].rows)
				return gk_errf(err, "tensor '%s': slices in '%s' and '%s' disagree on dtype, shape or rows",
					       e->name, s->files[o[0].file]->path, fb);
			if (o[i].start < at)
				return gk_errf(err, "tensor '%s': slices overlap at row %" PRIu64 " ('%s')",
					       e->name, o[i].start, fb);
			if (o[i].start > at)
				return gk_errf(err, "tensor '%s': rows %" PRIu64 " to %" PRIu64 " are in no slice",
					       e->name, at, o[i].start);
			at = o[i].stop;
			if (o[i].stop > o[i].start)
				e->parts[e->nparts++] = (gk_ckpt_part){
					o[i].file, o[i].t, o[i].start, o[i].stop - o[i].start, 0, 0};
		}
		if (at != o[0].rows)
			return gk_errf(err, "tensor '%s': rows %" PRIu64 " to %" PRIu64 " are in no slice",
				       e->name, at, o[0].rows);
	}
	/* each part's elements, now that the shape is known */
	uint64_t nel = 1, rowel = 1;
	for (int d = 0; d < e->ndim; d++)
		if (gk_mul_overflow(nel, e->shape[d], &nel))
			return gk_errf(err, "tensor '%s': size overflows", e->name);
	if (gk_st_nbytes(e->dtype, nel, &e->bytes))
		return gk_errf(err, "tensor '%s': size overflows", e->name);
	e->out_bytes = e->bytes;
	for (int d = 1; d < e->ndim; d++)
		rowel *= e->shape[d];
	for (size_t i = 0; i < e->nparts; i++) {
		e->parts[i].el0 = e->parts[i].row0 * rowel;
		e->parts[i].nel = e->parts[i].rows * rowel;
	}
	return 0;
}

/*
 * An entry some of whose occurrences are flat slices: every occurrence a
 * flat or a row slice (a row slice is the run of elements its rows
 * hold), all of one dtype and whole shape, together covering the
 * tensor's elements exactly once.
 */
static int make_flat_entry(gk_ckpt_set *s, gk_ckpt_entry *e, occ *o, size_t k, gk_err *err)
{
	const occ *f0 = NULL;
	for (size_t i = 0; i < k && !f0; i++)
		if (o[i].flat)
			f0 = &o[i];
	/* the whole tensor's shape, from the first flat slice */
	free(e->shape);
	e->ndim = f0->fndim;
	if (!(e->shape = calloc((size_t)e->ndim + 1, sizeof(uint64_t))))
		return gk_err_sys(err, ENOMEM, "merge");
	memcpy(e->shape, f0->fshape, (size_t)e->ndim * sizeof(uint64_t));
	uint64_t numel = 1, rowel = 1, bits = gk_dtype_bits(e->dtype);
	for (int d = 0; d < e->ndim; d++)
		numel *= e->shape[d];
	for (int d = 1; d < e->ndim; d++)
		rowel *= e->shape[d];
	for (size_t i = 0; i < k; i++) {
		occ *c = &o[i];
		const char *fb = s->files[c->file]->path;
		int same = c->t->dtype == e->dtype;
		if (!c->sliced && !c->flat)
			return gk_errf(err, "tensor '%s': a flat slice in '%s' but whole in '%s'",
				       e->name, s->files[f0->file]->path, fb);
		if (c->flat) {
			same = same && c->fndim == e->ndim &&
			       !memcmp(c->fshape, e->shape, (size_t)e->ndim * sizeof(uint64_t));
		} else {
			/* a row slice: its rows' elements of the same whole shape */
			same = same && c->t->ndim == e->ndim && c->rows == e->shape[0] &&
			       same_shape(c->t, &(gk_st_tensor){.ndim = e->ndim, .shape = e->shape}, 1);
			c->start *= rowel;
			c->stop *= rowel;
		}
		if (!same)
			return gk_errf(err, "tensor '%s': slices in '%s' and '%s' disagree on dtype or shape",
				       e->name, s->files[f0->file]->path, fb);
		/* copied and read in whole bytes */
		if (c->start * bits % 8 || c->stop * bits % 8)
			return gk_errf(err, "read '%s': tensor '%s': a flat slice of %s must start and "
				       "end on a byte", fb, e->name, gk_dtype_name(e->dtype));
	}
	sort_by_start(o, k);
	uint64_t at = 0;
	for (size_t i = 0; i < k; i++) {
		const char *fb = s->files[o[i].file]->path;
		if (o[i].start < at)
			return gk_errf(err, "tensor '%s': slices overlap at element %" PRIu64 " ('%s')",
				       e->name, o[i].start, fb);
		if (o[i].start > at)
			return gk_errf(err, "tensor '%s': elements %" PRIu64 " to %" PRIu64
				       " are in no slice", e->name, at, o[i].start);
		at = o[i].stop;
		if (o[i].stop > o[i].start) {
			uint64_t r0 = rowel ? o[i].start / rowel : 0;
			uint64_t r1 = rowel ? (o[i].stop + rowel - 1) / rowel : 0;
			e->parts[e->nparts++] = (gk_ckpt_part){o[i].file, o[i].t, r0, r1 - r0,
							       o[i].start, o[i].stop - o[i].start};
		}
	}
	if (at != numel)
		return gk_errf(err, "tensor '%s': elements %" PRIu64 " to %" PRIu64 " are in no slice",
			       e->name, at, numel);
	if (gk_st_nbytes(e->dtype, numel, &e->bytes))
		return gk_errf(err, "tensor '%s': size overflows", e->name);
	e->out_bytes = e->bytes;
	return 0;
}

static size_t *entry_seq;
static int by_first_seq(const void *a, const void *b)
{
	size_t x = entry_seq[*(const size_t *)a], y = entry_seq[*(const size_t *)b];
	return x < y ? -1 : x > y;
}

int ck_group(gk_ckpt_set *s, gk_err *err)
{
	size_t n = 0, seq = 0;
	for (size_t i = 0; i < s->nfiles; i++)
		n += s->files[i]->n;
	occ *o = calloc(n + 1, sizeof(*o));
	if (!o)
		return gk_err_sys(err, ENOMEM, "merge");
	for (size_t i = 0; i < s->nfiles; i++) {
		const gk_st_file *f = s->files[i];
		size_t nsl, nfl;
		slice_kv *sl_kv = file_slices(f, GK_CKPT_META_SLICE, &nsl);
		slice_kv *fl_kv = file_slices(f, GK_CKPT_META_FLAT, &nfl);
		if (!sl_kv || !fl_kv) {
			free(sl_kv);
			free(fl_kv);
			free(o);
			return gk_err_sys(err, ENOMEM, "merge");
		}
		for (size_t t = 0; t < f->n; t++, seq++) {
			occ *c = &o[seq];
			c->name = f->t[t].name;
			c->file = i;
			c->seq = seq;
			c->t = &f->t[t];
			const char *sl = find_slice(sl_kv, nsl, c->name);
			if (sl) {
				const char *why = parse_slice(sl, c);
				if (!why && f->t[t].ndim == 0)
					why = "a scalar has no rows";
				if (!why && f->t[t].shape[0] != c->stop - c->start)
					why = "STOP - START differs from the tensor's rows";
				if (why) {
					/* c points into o: format the message before freeing it. */
					gk_errf(err, "read '%s': tensor '%s': bad slice metadata '%s': %s",
						f->path, c->name, sl, why);
					free(sl_kv);
					free(o);
					return -1;
				}
				c->sliced = 1;
			}
			const char *fl = find_slice(fl_kv, nfl, c->name);
			if (fl) {
				const char *why = sl ? "a tensor is a row slice or a flat one, not both" :
						       parse_flat(fl, c);
				if (!why && (f->t[t].ndim != 1 || f->t[t].shape[0] != c->stop - c->start))
					why = "the tensor is not 1-D of STOP - START elements";
				if (why) {
					gk_errf(err, "read '%s': tensor '%s': bad flat slice metadata '%s': %s",
						f->path, c->name, fl, why);
					free(sl_kv);
					free(fl_kv);
					free(o);
					return -1;
				}
				c->flat = 1;
			}
		}
		free(sl_kv);
		free(fl_kv);
	}
	qsort(o, n, sizeof(*o), by_name_seq);
	s->e = calloc(n + 1, sizeof(*s->e));
	size_t *first = calloc(n + 1, sizeof(size_t));
	int rc = 0;
	if (!s->e || !first) {
		free(first);
		free(o);
		return gk_err_sys(err, ENOMEM, "merge");
	}
	for (size_t i = 0; i < n && !rc;) {
		size_t j = i + 1;
		while (j < n && strcmp(o[j].name, o[i].name) == 0)
			j++;
		first[s->n] = o[i].seq;
		rc = make_entry(s, &s->e[s->n++], o + i, j - i, err);
		i = j;
	}
	if (!rc) {
		/* Order of first appearance: the writer's order within each file. */
		size_t *perm = malloc((s->n + 1) * sizeof(size_t));
		gk_ckpt_entry *e = malloc((s->n + 1) * sizeof(*e));
		if (!perm || !e) {
			rc = gk_err_sys(err, ENOMEM, "merge");
		} else {
			for (size_t i = 0; i < s->n; i++)
				perm[i] = i;
			entry_seq = first;
			qsort(perm, s->n, sizeof(size_t), by_first_seq);
			for (size_t i = 0; i < s->n; i++)
				e[i] = s->e[perm[i]];
			memcpy(s->e, e, s->n * sizeof(*e));
			for (size_t i = 0; i < s->n; i++)
				s->bytes += s->e[i].bytes;
		}
		free(perm);
		free(e);
	}
	free(first);
	free(o);
	return rc;
}
