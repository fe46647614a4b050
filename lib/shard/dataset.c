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
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/internal.h"

typedef struct queue {
	pthread_mutex_t mu;
	pthread_cond_t more, room;
	sh_sample **v;
	size_t cap, head, n;
	int done, stop, failed;
	gk_err err;
} queue;

struct gk_shard_dataset {
	gk_shard_dataset_opts o;
	gk_shard_manifest man;
	char **files;
	gk_shard_index *idx;      /* per shard; nsamples 0 = not loaded */
	int *idx_tried;
	uint64_t part, parts, per;
	uint64_t epoch, pos;
	/* the current epoch's plan */
	uint64_t *order, *prefix;
	/* the window */
	sh_sample **win;
	uint64_t *perm;
	size_t wlen, wpos;
	/* the producer's cursor */
	size_t k;
	uint64_t local, remaining;
	gk_shard_reader *r;
	int fd;                   /* the shard read through its index */
	sh_map *map;              /* or mapped, when it is a plain tar */
	/* prefetch */
	queue q;
	pthread_t thread;
	int running;
	int started;              /* an epoch position is set up */
};

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

static uint64_t window_key(const gk_shard_dataset *d, uint64_t w)
{
	uint64_t k = gk_shard_mix(d->o.seed + 0x51a4d);
	k = gk_shard_mix(k ^ d->epoch);
	k = gk_shard_mix(k ^ d->part);
	return gk_shard_mix(k ^ w);
}

static size_t window_size(const gk_shard_dataset *d)
{
	return d->o.shuffle ? d->o.shuffle_buffer : 1;
}

/* ---- the producer ------------------------------------------------------------ */

static const gk_shard_index *index_of(gk_shard_dataset *d, size_t shard)
{
	if (!d->idx_tried[shard]) {
		gk_err ignored;
		/* No index, or not this shard's: the tar reader reads it. */
		d->idx_tried[shard] = 1;
		if (sh_index_load_for(d->files[shard], &d->idx[shard], &ignored) < 0)
			memset(&d->idx[shard], 0, sizeof(d->idx[shard]));
	}
	return d->idx[shard].nsamples == d->man.v[shard].samples ? &d->idx[shard] : NULL;
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
}

/* Position the cursor at part position p of the current epoch. */
static void cursor_at(gk_shard_dataset *d, uint64_t p)
{
	uint64_t g = d->part * d->per + p;
	size_t k = 0;
	while (k < d->man.n && d->prefix[k + 1] <= g)
		k++;
	d->k = k;
	d->local = g - d->prefix[k];
	d->remaining = d->per - p;
	close_shard(d);
}

/*
 * With an index, a sample is one pread (or one LZ4 frame) straight into
 * its own buffer: no tar parsing and a single copy out of the page cache.
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
 * is being read still can be: shards are meant to be immutable).
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
	if (!m)
		return gk_err_sys(err, ENOMEM, "map '%s'", d->files[shard]);
	m->len = (size_t)idx->end;
	m->p = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, d->fd, 0);
	if (m->p == MAP_FAILED) {
		free(m);
		return gk_err_sys(err, errno, "map '%s'", d->files[shard]);
	}
	madvise(m->p, m->len, MADV_SEQUENTIAL);
	m->refs = 1;
	d->map = m;
	return 0;
}

/* The next sample of the part in stream order: 1, 0 at its end, -1. */
static int produce(gk_shard_dataset *d, sh_sample **out, gk_err *err)
{
	if (d->remaining == 0)
		return 0;
	for (;;) {
		size_t shard = d->order[d->k];
		if (d->local < d->man.v[shard].samples && !d->r && d->fd < 0 &&
		    index_of(d, shard)) {
			d->fd = open(d->files[shard], O_RDONLY | O_CLOEXEC);
			if (d->fd < 0)
				return gk_err_sys(err, errno, "open '%s'", d->files[shard]);
			posix_fadvise(d->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
			if (!index_of(d, shard)->lz4 && map_shard(d, shard, err) < 0)
				return -1;
		}
		if (d->fd >= 0 && d->local < d->man.v[shard].samples) {
			if (from_index(d, shard, index_of(d, shard), out, err) < 0)
				return -1;
			d->local++;
			d->remaining--;
			return 1;
		}
		if (!d->r && d->fd < 0) {
			if (gk_shard_reader_open(&d->r, d->files[shard], err) < 0)
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
	d->remaining--;
	return 1;
}

static void *producer_main(void *arg)
{
	gk_shard_dataset *d = arg;
	queue *q = &d->q;
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

static void producer_stop(gk_shard_dataset *d)
{
	queue *q = &d->q;
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
	queue *q = &d->q;
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
	size_t b = window_size(d);
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
		gk_shard_permute(d->perm, n, window_key(d, w));
	else
		d->perm[0] = 0;
	d->wpos = (size_t)(d->pos - w * b);
	return 0;
}

/* ---- the public face ---------------------------------------------------------- */

static int load_counts(gk_shard_dataset *d, const char *source, gk_err *err)
{
	size_t n = strlen(source);
	if (n > 5 && strcmp(source + n - 5, ".json") == 0) {
		if (gk_shard_manifest_load(source, &d->man, err) < 0)
			return -1;
		if (!(d->files = calloc(d->man.n + 1, sizeof(char *))))
			return gk_err_sys(err, ENOMEM, "dataset");
		for (size_t i = 0; i < d->man.n; i++)
			if (!(d->files[i] = gk_shard_manifest_file(&d->man, i)))
				return gk_err_sys(err, ENOMEM, "dataset");
		if (!(d->idx = calloc(d->man.n + 1, sizeof(*d->idx))) ||
		    !(d->idx_tried = calloc(d->man.n + 1, sizeof(int))))
			return gk_err_sys(err, ENOMEM, "dataset");
		return 0;
	}
	gk_strlist l = {0};
	if (gk_brace_expand(source, 0, &l, err) < 0)
		return -1;
	d->files = l.v;
	if (!d->files || !(d->idx = calloc(l.n + 1, sizeof(*d->idx))) ||
	    !(d->idx_tried = calloc(l.n + 1, sizeof(int)))) {
		gk_strlist_free(&l);
		d->files = NULL;
		return gk_err_sys(err, ENOMEM, "dataset");
	}
	for (size_t i = 0; i < l.n; i++) {
		/* Counts from the shard's own index, else from reading it. */
		int rc = sh_index_load_for(l.v[i], &d->idx[i], err);
		if (rc == 0)
			rc = sh_index_build(l.v[i], &d->idx[i], 0, err);
		d->idx_tried[i] = 1;
		if (rc < 0 || gk_shard_manifest_add(&d->man, l.v[i], d->idx[i].nsamples,
						    0, 0, err) < 0) {
			d->man.n = i; /* files[] stays owned by d */
			return -1;
		}
	}
	return 0;
}

int gk_shard_dataset_open(gk_shard_dataset **out, const char *source,
			  const gk_shard_dataset_opts *o, gk_err *err)
{
	gk_shard_dataset *d = calloc(1, sizeof(*d));
	if (!d)
		return gk_err_sys(err, ENOMEM, "dataset");
	d->o = *o;
	d->fd = -1;
	if (d->o.world < 1)
		d->o.world = 1;
	if (d->o.workers < 1)
		d->o.workers = 1;
	if (!d->o.shuffle_buffer)
		d->o.shuffle_buffer = 1000;
	if (d->o.rank < 0 || d->o.rank >= d->o.world || d->o.worker < 0 ||
	    d->o.worker >= d->o.workers) {
		free(d);
		return gk_errf(err, "dataset: rank %d of %d, worker %d of %d: out of range",
			       o->rank, o->world, o->worker, o->workers);
	}
	d->parts = (uint64_t)d->o.world * (uint64_t)d->o.workers;
	d->part = (uint64_t)d->o.rank * (uint64_t)d->o.workers + (uint64_t)d->o.worker;
	if (load_counts(d, source, err) < 0)
		goto fail;
	if (d->man.n == 0) {
		gk_errf(err, "dataset '%s': no shards", source);
		goto fail;
	}
	d->per = d->man.samples / d->parts;
	if (d->per == 0) {
		gk_errf(err, "dataset '%s': %llu samples cannot give each of %llu ranks x workers one",
			source, (unsigned long long)d->man.samples, (unsigned long long)d->parts);
		goto fail;
	}
	size_t b = window_size(d);
	d->order = malloc(d->man.n * sizeof(uint64_t));
	d->prefix = malloc((d->man.n + 1) * sizeof(uint64_t));
	d->win = calloc(b, sizeof(*d->win));
	d->perm = malloc(b * sizeof(*d->perm));
	d->q.cap = d->o.prefetch ? d->o.prefetch : 1;
	d->q.v = calloc(d->q.cap, sizeof(*d->q.v));
	if (!d->order || !d->prefix || !d->win || !d->perm || !d->q.v) {
		gk_err_sys(err, ENOMEM, "dataset");
		goto fail;
	}
	pthread_mutex_init(&d->q.mu, NULL);
	pthread_cond_init(&d->q.more, NULL);
	pthread_cond_init(&d->q.room, NULL);
	*out = d;
	return 0;
fail:
	d->q.v = NULL;
	gk_shard_dataset_close(d);
	return -1;
}

uint64_t gk_shard_dataset_len(const gk_shard_dataset *d)
{
	return d->per;
}

const gk_shard_manifest *gk_shard_dataset_manifest(const gk_shard_dataset *d)
{
	return &d->man;
}

void gk_shard_dataset_state(const gk_shard_dataset *d, gk_shard_state *st)
{
	st->seed = d->o.seed;
	st->epoch = d->epoch;
	st->pos = d->pos;
	st->samples = d->per;
	st->part = (uint32_t)d->part;
	st->parts = (uint32_t)d->parts;
}

/* Start the producer and the window at (epoch, pos). */
static int go(gk_shard_dataset *d, uint64_t epoch, uint64_t pos, gk_err *err)
{
	producer_stop(d);
	window_clear(d);
	d->epoch = epoch;
	d->pos = pos;
	plan_epoch(d);
	size_t b = window_size(d);
	cursor_at(d, pos / b * b);
	d->started = 1;
	if (pos == d->per)
		return 0;
	if (producer_start(d, err) < 0)
		return -1;
	return window_fill(d, err);
}

int gk_shard_dataset_restore(gk_shard_dataset *d, const gk_shard_state *st,
			     gk_err *err)
{
	if (st->seed != d->o.seed || st->parts != d->parts || st->part != d->part ||
	    st->samples != d->per)
		return gk_errf(err, "dataset state: saved for seed %llu, part %u of %u, %llu samples; this is seed %llu, part %llu of %llu, %llu samples",
			       (unsigned long long)st->seed, st->part, st->parts,
			       (unsigned long long)st->samples, (unsigned long long)d->o.seed,
			       (unsigned long long)d->part, (unsigned long long)d->parts,
			       (unsigned long long)d->per);
	if (st->pos > d->per)
		return gk_errf(err, "dataset state: position %llu is past the epoch's %llu samples",
			       (unsigned long long)st->pos, (unsigned long long)d->per);
	return go(d, st->epoch, st->pos, err);
}

int gk_shard_dataset_set_epoch(gk_shard_dataset *d, uint64_t epoch, gk_err *err)
{
	return go(d, epoch, 0, err);
}

int gk_shard_dataset_next(gk_shard_dataset *d, const gk_shard_sample **s,
			  gk_err *err)
{
	if (!d->started && go(d, 0, 0, err) < 0)
		return -1;
	if (d->pos == d->per) {
		if (!d->o.loop)
			return 0;
		if (go(d, d->epoch + 1, 0, err) < 0)
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
	producer_stop(d);
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
	free(d->order);
	free(d->prefix);
	free(d->win);
	free(d->perm);
	gk_shard_manifest_free(&d->man);
	free(d);
}

int gk_shard_state_format(const gk_shard_state *st, char *buf, size_t len)
{
	return snprintf(buf, len,
			"{\"seed\":%llu,\"epoch\":%llu,\"pos\":%llu,\"samples\":%llu,\"part\":%u,\"parts\":%u}",
			(unsigned long long)st->seed, (unsigned long long)st->epoch,
			(unsigned long long)st->pos, (unsigned long long)st->samples,
			st->part, st->parts);
}

int gk_shard_state_parse(const char *json, gk_shard_state *st, gk_err *err)
{
	struct json_t *j = gk_json_load_buf(json, strlen(json), "dataset state", err);
	int64_t v[6];
	static const char *keys[] = {"seed", "epoch", "pos", "samples", "part", "parts"};
	if (!j)
		return -1;
	for (size_t i = 0; i < 6; i++) {
		if (gk_json_get_int(j, keys[i], &v[i], err) < 0) {
			gk_err_prefix(err, "dataset state");
			goto fail;
		}
		if (v[i] < 0 || (i >= 4 && v[i] > UINT32_MAX)) {
			gk_errf(err, "dataset state: '%s' out of range", keys[i]);
			goto fail;
		}
	}
	st->seed = (uint64_t)v[0];
	st->epoch = (uint64_t)v[1];
	st->pos = (uint64_t)v[2];
	st->samples = (uint64_t)v[3];
	st->part = (uint32_t)v[4];
	st->parts = (uint32_t)v[5];
	json_decref(j);
	return 0;
fail:
	json_decref(j);
	return -1;
}
