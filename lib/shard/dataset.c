/*
 * dataset.c - the trainer's iterator over many shards: split, shuffle,
 * prefetch, exact resume. The epoch order is spelled out in shard.h.
 *
 * A producer walks this part's slice of the epoch stream in stream order
 * (on a thread when prefetching) and hands whole samples over without
 * copying them; the consumer fills a window, permutes it, and returns
 * samples from it. Because the order is a pure function of (seed, epoch,
 * part), restoring a state only restarts the producer at the start of the
 * state's window.
 *
 * This file is the iterator itself; opening, resuming and the state's
 * text are its siblings (dataset_internal.h lists them).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/dataset_internal.h"

void sh_dataset_note(const gk_shard_dataset *d, const char *fmt, ...)
{
	char msg[sizeof(((gk_err *)0)->msg) + 256];
	va_list ap;
	if (!d->o.note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	d->o.note(d->o.note_ctx, msg);
}

/*
 * libarchive, GNU tar and Python read a tar cut at a member boundary or
 * after one zero block; it is also how a truncated copy looks.
 */
void sh_dataset_note_end(const gk_shard_dataset *d, const char *file,
			 int end_blocks, size_t n)
{
	if (end_blocks == 0 || end_blocks == 1)
		sh_dataset_note(d, "shard '%s' %s (truncated?): reading its %zu whole samples",
				file, end_blocks ? "ends with a lone zero block"
						 : "has no end-of-archive blocks",
				n);
}

uint64_t gk_shard_mix(uint64_t x)
{
	/* splitmix64: reference https://prng.di.unimi.it/splitmix64.c */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void gk_shard_permute(uint64_t *v, size_t n, uint64_t key)
{
	uint64_t s = key;
	for (size_t i = 0; i < n; i++)
		v[i] = i;
	for (size_t i = n; i > 1; i--) {
		s = gk_shard_mix(s);
		/* Lemire's multiply-shift: unbiased enough for n << 2^32. */
		size_t j = (size_t)(((unsigned __int128)s * i) >> 64);
		uint64_t t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* ---- the plan ---------------------------------------------------------------- */

static void plan_epoch(gk_shard_dataset *d)
{
	size_t n = d->man.n;
	if (d->o.shuffle)
		gk_shard_permute(d->order, n, gk_shard_mix(d->o.seed ^ gk_shard_mix(d->epoch)));
	else
		for (size_t i = 0; i < n; i++)
			d->order[i] = i;
	d->prefix[0] = 0;
	for (size_t i = 0; i < n; i++)
		d->prefix[i + 1] = d->prefix[i] + d->man.v[d->order[i]].samples;
}

uint64_t sh_dataset_window_key(const gk_shard_dataset *d, uint64_t epoch,
			       uint64_t part, uint64_t gen, uint64_t w)
{
	uint64_t k = gk_shard_mix(d->o.seed + 0x51a4d);
	k = gk_shard_mix(k ^ epoch);
	k = gk_shard_mix(k ^ part);
	if (gen)
		k = gk_shard_mix(k ^ (0x7e3a9ull << 32 | gen));
	return gk_shard_mix(k ^ w);
}

/* Remap generations in a history: [P, B, pos[0..P)] per generation. */
static uint64_t generations(const uint64_t *hist, size_t nhist)
{
	uint64_t g = 0;
	for (size_t i = 0; i + 2 <= nhist; i += 2 + (size_t)hist[i])
		g++;
	return g;
}

int sh_dataset_set_remap(gk_shard_dataset *d, const uint64_t *hist,
			 size_t nhist, uint64_t *list, uint64_t len, gk_err *err)
{
	uint64_t *h = NULL;
	if (nhist && !(h = malloc(nhist * sizeof(*h)))) {
		free(list);
		return gk_err_sys(err, ENOMEM, "dataset remap");
	}
	if (nhist)
		memcpy(h, hist, nhist * sizeof(*h));
	free(d->hist);
	free(d->list);
	d->hist = h;
	d->nhist = nhist;
	d->list = list;
	d->per = nhist ? len : d->per0;
	return 0;
}

/* ---- the producer ------------------------------------------------------------ */

static const gk_shard_index *index_of(gk_shard_dataset *d, size_t shard)
{
	if (d->idx_tried[shard] == SH_IDX_NOT_TRIED) {
		gk_err ignored, stale;
		int end_blocks;
		/* No index, or not this shard's: the tar reader reads it. */
		d->idx_tried[shard] = SH_IDX_FILE;
		int rc = sh_index_load_for(d->files[shard], &d->idx[shard], &stale, &end_blocks,
					   &ignored);
		if (rc < 0)
			memset(&d->idx[shard], 0, sizeof(d->idx[shard]));
		else if (rc == 0 && stale.msg[0])
			sh_dataset_note(d, "%s: reading the tar instead", stale.msg);
		else if (rc == 1)
			sh_dataset_note_end(d, d->files[shard], end_blocks,
					    d->idx[shard].nsamples);
	}
	return d->idx[shard].nsamples == d->man.v[shard].samples ? &d->idx[shard] : NULL;
}

/*
 * The index of a shard was found not to be its own after all (a sample
 * in the middle is not where it says): read the tar's headers instead,
 * as for a shard without an index. The counts were planned from it, so
 * they must not change.
 */
static int index_rebuild(gk_shard_dataset *d, size_t shard, gk_err *err)
{
	int end_blocks;
	gk_shard_index *idx = &d->idx[shard];
	gk_shard_index_free(idx);
	free(d->checked[shard]);
	d->checked[shard] = NULL;
	d->idx_tried[shard] = SH_IDX_BUILT;
	if (sh_index_build(d->files[shard], idx, 0, &end_blocks, err) < 0)
		return -1;
	if (idx->nsamples != d->man.v[shard].samples)
		return gk_errf(err, "shard '%s': %zu samples; the manifest or its index said %llu (rebuild the index with data-pack --index)",
			       d->files[shard], idx->nsamples,
			       (unsigned long long)d->man.v[shard].samples);
	sh_dataset_note_end(d, d->files[shard], end_blocks, idx->nsamples);
	return 0;
}

static void close_shard(gk_shard_dataset *d)
{
	gk_shard_reader_close(d->r);
	d->r = NULL;
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
	sh_map_unref(d->map);
	d->map = NULL;
	free(d->ipath);
	d->ipath = NULL;
}

/* Stream sample of part position j in the current epoch. */
static uint64_t stream_at(const gk_shard_dataset *d, uint64_t j)
{
	return d->list ? d->list[j] : d->part * d->per + j;
}

/* Position the cursor at part position p of the current epoch. */
static void cursor_at(gk_shard_dataset *d, uint64_t p)
{
	uint64_t g = p < d->per ? stream_at(d, p) : 0;
	size_t k = 0;
	while (k < d->man.n && d->prefix[k + 1] <= g)
		k++;
	d->k = k;
	d->j = p;
	d->local = g - d->prefix[k];
	d->remaining = d->per - p;
	close_shard(d);
}

/*
 * A remapped part's samples are ascending but may have gaps: move the
 * cursor forward to stream sample g, within the open shard when it is
 * there (skipping samples through the tar reader, or only counting them
 * with an index), else by reopening.
 */
static int cursor_to(gk_shard_dataset *d, uint64_t g, gk_err *err)
{
	size_t k = d->k;
	while (k < d->man.n && d->prefix[k + 1] <= g)
		k++;
	uint64_t local = g - d->prefix[k];
	if (k == d->k && local == d->local)
		return 0;
	if (k != d->k || local < d->local || (d->r && local - d->local > 64)) {
		close_shard(d);
		d->k = k;
		d->local = local;
		return 0;
	}
	if (d->r) {
		const gk_shard_sample *s;
		gk_shard_reader_sizes_only(d->r, 1);
		for (; d->local < local; d->local++)
			if (gk_shard_reader_next(d->r, &s, err) != 1) {
				gk_shard_reader_sizes_only(d->r, 0);
				return gk_errf(err, "shard '%s': ends before sample %llu",
					       d->files[d->order[k]], (unsigned long long)local);
			}
		gk_shard_reader_sizes_only(d->r, 0);
	}
	d->local = local;
	return 0;
}

/*
 * The first time a sample is read, its tar headers must be where the
 * index puts them (the bytes are in memory: mapped or decoded). 0 when
 * they are, 1 when the index was replaced (read the sample again), -1.
 */
static int check_sample(gk_shard_dataset *d, size_t shard, const gk_shard_index *idx,
			const void *bytes, gk_err *err)
{
	size_t i = (size_t)d->local;
	unsigned char **bits = &d->checked[shard];
	if (*bits && (*bits)[i / 8] & (1u << (i % 8)))
		return 0;
	if (!*bits && !(*bits = calloc(idx->nsamples / 8 + 1, 1)))
		return gk_err_sys(err, ENOMEM, "read '%s'", d->files[shard]);
	gk_err why;
	if (sh_index_check_mem(idx, i, bytes, d->files[shard], d->ipath, &why) == 0) {
		(*bits)[i / 8] |= (unsigned char)(1u << (i % 8));
		return 0;
	}
	if (d->idx_tried[shard] == SH_IDX_BUILT)
		return gk_errf(err, "shard '%s' changed while it was read: sample %zu is not where it was when the dataset opened it",
			       d->files[shard], i);
	sh_dataset_note(d, "%s: reading the tar instead", why.msg);
	close_shard(d);
	return index_rebuild(d, shard, err) < 0 ? -1 : 1;
}

/*
 * With an index, a sample is one pread (or one LZ4 frame) straight into
 * its own buffer: no tar parsing and a single copy out of the page cache.
 * 1 when the index turned out not to be the shard's and was replaced
 * (nothing read).
 */
static int from_index(gk_shard_dataset *d, size_t shard, const gk_shard_index *idx,
		      sh_sample **out, gk_err *err)
{
	const gk_shard_index_sample *is = &idx->s[d->local];
	sh_sample *x = calloc(1, sizeof(*x));
	void *buf = NULL;
	if (!x || !(x->m = calloc(is->n, sizeof(*x->m))) ||
	    !(x->ext_off = calloc(is->n, sizeof(uint64_t))) ||
	    !(x->data_off = calloc(is->n, sizeof(uint64_t)))) {
		sh_sample_free(x);
		return gk_err_sys(err, ENOMEM, "read '%s'", d->files[shard]);
	}
	x->mcap = is->n;
	if (d->map) {
		/* Zero copy: the members point into the mapping, which the
		 * sample keeps alive. */
		for (size_t j = 0; j < is->n; j++) {
			const gk_shard_index_member *im = &idx->m[is->first + j];
			x->m[j].ext = im->name + gk_shard_key_len(im->name) + 1;
			x->m[j].data = (const char *)d->map->p + im->offset;
			x->m[j].size = im->size;
			x->m[j].offset = im->offset;
		}
		x->map = sh_map_ref(d->map);
	} else if (gk_shard_read_sample(d->fd, d->files[shard], idx, (size_t)d->local,
					&buf, x->m, err) < 0) {
		sh_sample_free(x);
		return -1;
	}
	x->data.p = buf;
	int rc = check_sample(d, shard, idx,
			      buf ? buf : (const char *)d->map->p + is->header, err);
	if (rc != 0) {
		sh_sample_free(x);
		return rc;
	}
	const char *first = idx->m[is->first].name;
	size_t klen = (size_t)gk_shard_key_len(first);
	if (sh_buf_append(&x->names, first, klen) < 0 || sh_buf_append(&x->names, "", 1) < 0)
		goto nomem;
	for (size_t j = 0; j < is->n; j++) {
		x->ext_off[j] = x->names.len;
		if (sh_buf_append(&x->names, x->m[j].ext, strlen(x->m[j].ext) + 1) < 0)
			goto nomem;
	}
	x->s.key = (const char *)x->names.p;
	x->s.n = is->n;
	x->s.m = x->m;
	for (size_t j = 0; j < is->n; j++)
		x->m[j].ext = (const char *)x->names.p + x->ext_off[j];
	x->s.shard = shard;
	x->s.index = d->local;
	*out = x;
	return 0;
nomem:
	sh_sample_free(x);
	return gk_err_sys(err, ENOMEM, "read '%s'", d->files[shard]);
}

/*
 * Map a plain shard whose index we trust. A file shorter than its index
 * says is an error here, not a SIGBUS later (a shard truncated while it
 * is being read still can be, shards being meant to be immutable: the
 * tools' SIGBUS handler then names it, gk_map_watch).
 */
static int map_shard(gk_shard_dataset *d, size_t shard, gk_err *err)
{
	const gk_shard_index *idx = index_of(d, shard);
	struct stat st;
	if (fstat(d->fd, &st) < 0)
		return gk_err_sys(err, errno, "stat '%s'", d->files[shard]);
	if ((uint64_t)st.st_size < idx->end)
		return gk_errf(err, "shard '%s': %llu bytes, its index needs %llu (truncated?)",
			       d->files[shard], (unsigned long long)st.st_size,
			       (unsigned long long)idx->end);
	if (idx->end == 0)
		return 0;
	sh_map *m = calloc(1, sizeof(*m));
	if (!m || !(m->path = strdup(d->files[shard]))) {
		free(m);
		return gk_err_sys(err, ENOMEM, "map '%s'", d->files[shard]);
	}
	m->len = (size_t)idx->end;
	m->p = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, d->fd, 0);
	if (m->p == MAP_FAILED) {
		int e = errno;
		free(m->path);
		free(m);
		return gk_err_sys(err, e, "map '%s'", d->files[shard]);
	}
	madvise(m->p, m->len, MADV_SEQUENTIAL);
	gk_map_watch(m->p, m->len, m->path);
	m->refs = 1;
	d->map = m;
	return 0;
}

/* The next sample of the part in stream order: 1, 0 at its end, -1. */
static int produce(gk_shard_dataset *d, sh_sample **out, gk_err *err)
{
	if (d->remaining == 0)
		return 0;
	if (d->list && cursor_to(d, d->list[d->j], err) < 0)
		return -1;
	for (;;) {
		size_t shard = d->order[d->k];
		if (d->local < d->man.v[shard].samples && !d->r && d->fd < 0 &&
		    index_of(d, shard)) {
			d->fd = open(d->files[shard], O_RDONLY | O_CLOEXEC);
			if (d->fd < 0)
				return gk_err_sys(err, errno, "open '%s'", d->files[shard]);
			if (!(d->ipath = gk_shard_index_path(d->files[shard])))
				return gk_err_sys(err, ENOMEM, "open '%s'", d->files[shard]);
			posix_fadvise(d->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
			if (!index_of(d, shard)->lz4 && map_shard(d, shard, err) < 0)
				return -1;
		}
		if (d->fd >= 0 && d->local < d->man.v[shard].samples) {
			int rc = from_index(d, shard, index_of(d, shard), out, err);
			if (rc < 0)
				return -1;
			if (rc == 1)
				continue; /* read it through the rebuilt index */
			d->local++;
			d->j++;
			d->remaining--;
			return 1;
		}
		if (!d->r && d->fd < 0) {
			/* The dataset seeks: a gzipped shard would be read
			 * from its start at every resume. */
			int lz4;
			if (sh_path_filter(d->files[shard], &lz4, err) < 0 ||
			    gk_shard_reader_open(&d->r, d->files[shard], err) < 0)
				return -1;
			sh_reader_set_base(d->r, shard);
			if (gk_shard_reader_seek(d->r, d->local, index_of(d, shard), err) < 0)
				return -1;
		}
		if (d->local < d->man.v[shard].samples)
			break;
		close_shard(d);
		d->k++;
		d->local = 0;
	}
	const gk_shard_sample *s;
	int rc = gk_shard_reader_next(d->r, &s, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return gk_errf(err, "shard '%s': ends after %llu samples; the manifest or index says %llu",
			       d->files[d->order[d->k]], (unsigned long long)d->local,
			       (unsigned long long)d->man.v[d->order[d->k]].samples);
	*out = sh_reader_detach(d->r);
	d->local++;
	d->j++;
	d->remaining--;
	return 1;
}

static void *producer_main(void *arg)
{
	gk_shard_dataset *d = arg;
	sh_queue *q = &d->q;
	for (;;) {
		sh_sample *x = NULL;
		gk_err err;
		int rc = produce(d, &x, &err);
		pthread_mutex_lock(&q->mu);
		if (rc <= 0) {
			if (rc < 0) {
				q->failed = 1;
				q->err = err;
			}
			q->done = 1;
			pthread_cond_signal(&q->more);
			pthread_mutex_unlock(&q->mu);
			return NULL;
		}
		while (q->n == q->cap && !q->stop)
			pthread_cond_wait(&q->room, &q->mu);
		if (q->stop) {
			pthread_mutex_unlock(&q->mu);
			sh_sample_free(x);
			return NULL;
		}
		q->v[(q->head + q->n) % q->cap] = x;
		q->n++;
		pthread_cond_signal(&q->more);
		pthread_mutex_unlock(&q->mu);
	}
}

void sh_dataset_stop(gk_shard_dataset *d)
{
	sh_queue *q = &d->q;
	if (!d->running)
		return;
	pthread_mutex_lock(&q->mu);
	q->stop = 1;
	pthread_cond_signal(&q->room);
	pthread_mutex_unlock(&q->mu);
	pthread_join(d->thread, NULL);
	d->running = 0;
	for (; q->n; q->n--, q->head = (q->head + 1) % q->cap)
		sh_sample_free(q->v[q->head]);
	q->head = 0;
	q->done = q->stop = q->failed = 0;
}

static int producer_start(gk_shard_dataset *d, gk_err *err)
{
	if (!d->o.prefetch)
		return 0;
	int e = pthread_create(&d->thread, NULL, producer_main, d);
	if (e)
		return gk_err_sys(err, e, "dataset: start the prefetch thread");
	d->running = 1;
	return 0;
}

/* One sample from the producer, through the queue when prefetching. */
static int take(gk_shard_dataset *d, sh_sample **out, gk_err *err)
{
	if (!d->o.prefetch)
		return produce(d, out, err);
	sh_queue *q = &d->q;
	pthread_mutex_lock(&q->mu);
	while (q->n == 0 && !q->done)
		pthread_cond_wait(&q->more, &q->mu);
	int rc = 1;
	if (q->n) {
		*out = q->v[q->head];
		q->head = (q->head + 1) % q->cap;
		q->n--;
		pthread_cond_signal(&q->room);
	} else if (q->failed) {
		*err = q->err;
		rc = -1;
	} else {
		rc = 0;
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

/* ---- the window --------------------------------------------------------------- */

static void window_clear(gk_shard_dataset *d)
{
	for (size_t i = 0; i < d->wlen; i++)
		sh_sample_free(d->win[i]);
	d->wlen = d->wpos = 0;
}

static int window_fill(gk_shard_dataset *d, gk_err *err)
{
	size_t b = sh_dataset_window(d);
	uint64_t w = d->pos / b;
	uint64_t left = d->per - w * b;
	size_t n = left < b ? (size_t)left : b;
	window_clear(d);
	for (size_t i = 0; i < n; i++) {
		int rc = take(d, &d->win[i], err);
		if (rc <= 0) {
			d->wlen = i;
			window_clear(d);
			if (rc == 0)
				return gk_errf(err, "dataset: the shards ended early");
			return -1;
		}
		d->wlen = i + 1;
	}
	if (d->o.shuffle)
		gk_shard_permute(d->perm, n,
				 sh_dataset_window_key(d, d->epoch, d->part,
						       generations(d->hist, d->nhist), w));
	else
		d->perm[0] = 0;
	d->wpos = (size_t)(d->pos - w * b);
	return 0;
}

/* ---- moving through epochs ------------------------------------------------------ */

int sh_dataset_go(gk_shard_dataset *d, uint64_t epoch, uint64_t pos, gk_err *err)
{
	sh_dataset_stop(d);
	window_clear(d);
	d->epoch = epoch;
	d->pos = pos;
	plan_epoch(d);
	size_t b = sh_dataset_window(d);
	cursor_at(d, pos / b * b);
	d->started = 1;
	if (pos == d->per)
		return 0;
	if (producer_start(d, err) < 0)
		return -1;
	return window_fill(d, err);
}

/* A new epoch is a normal one, whatever the last one was. */
static int go_epoch(gk_shard_dataset *d, uint64_t epoch, gk_err *err)
{
	sh_dataset_stop(d);
	if (sh_dataset_set_remap(d, NULL, 0, NULL, 0, err) < 0)
		return -1;
	return sh_dataset_go(d, epoch, 0, err);
}

int gk_shard_dataset_part_has(const gk_shard_dataset *d, uint64_t shard,
			      uint64_t index)
{
	if (!d->started || shard >= d->man.n || index >= d->man.v[shard].samples)
		return 0;
	size_t k = 0;
	while (d->order[k] != shard)
		k++;
	uint64_t g = d->prefix[k] + index;
	if (!d->list)
		return g >= d->part * d->per && g < (d->part + 1) * d->per;
	size_t lo = 0, hi = (size_t)d->per; /* list is ascending */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (d->list[mid] < g)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < d->per && d->list[lo] == g;
}

int gk_shard_dataset_set_epoch(gk_shard_dataset *d, uint64_t epoch, gk_err *err)
{
	return go_epoch(d, epoch, err);
}

int gk_shard_dataset_next(gk_shard_dataset *d, const gk_shard_sample **s,
			  gk_err *err)
{
	if (!d->started && sh_dataset_go(d, 0, 0, err) < 0)
		return -1;
	if (d->pos == d->per) {
		if (!d->o.loop)
			return 0;
		if (go_epoch(d, d->epoch + 1, err) < 0)
			return -1;
	}
	if (d->wpos == d->wlen && window_fill(d, err) < 0)
		return -1;
	sh_sample *x = d->win[d->perm[d->wpos]];
	d->wpos++;
	d->pos++;
	x->s.epoch = d->epoch;
	*s = &x->s;
	return 1;
}

void gk_shard_dataset_close(gk_shard_dataset *d)
{
	if (!d)
		return;
	sh_dataset_stop(d);
	window_clear(d);
	close_shard(d);
	if (d->q.v) {
		pthread_mutex_destroy(&d->q.mu);
		pthread_cond_destroy(&d->q.more);
		pthread_cond_destroy(&d->q.room);
	}
	free(d->q.v);
	if (d->files)
		for (size_t i = 0; d->files[i]; i++)
			free(d->files[i]);
	free(d->files);
	if (d->idx)
		for (size_t i = 0; i < d->man.n; i++)
			gk_shard_index_free(&d->idx[i]);
	free(d->idx);
	free(d->idx_tried);
	if (d->checked)
		for (size_t i = 0; i < d->man.n; i++)
			free(d->checked[i]);
	free(d->checked);
	free(d->order);
	free(d->prefix);
	free(d->win);
	free(d->perm);
	free(d->list);
	free(d->hist);
	free(d->names);
	gk_shard_manifest_free(&d->man);
	free(d);
}
