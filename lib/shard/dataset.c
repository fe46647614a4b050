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
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
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
	uint64_t list_id;         /* the shard list's identity (gk_shard_state.list) */
	uint64_t files_id;        /* and by path, size and head (gk_shard_state.files) */
	size_t common;            /* length of the files' common directory, its '/' included */
	const gk_shard_state_shard *base_names; /* basenames, for states with no "files" */
	gk_shard_state_shard *names; /* the list, when states carry it */
	size_t nnames;
	gk_shard_index *idx;      /* per shard; nsamples 0 = not loaded */
	int *idx_tried;           /* IDX_*: where idx[i] came from */
	unsigned char **checked;  /* per shard, a bit per sample whose tar
				     headers were found where idx puts them */
	uint64_t part, parts, per;
	uint64_t per0;            /* samples per part in a normal epoch */
	uint64_t epoch, pos;
	/*
	 * A remapped epoch (gk_shard_dataset_restore_world): the part reads
	 * the stream samples list[0..per), ascending, instead of the range
	 * [part*per, (part+1)*per); hist is the remap history the list was
	 * computed from (gk_shard_state.hist).
	 */
	uint64_t *list, *hist;
	size_t nhist;
	/* the current epoch's plan */
	uint64_t *order, *prefix;
	/* the window */
	sh_sample **win;
	uint64_t *perm;
	size_t wlen, wpos;
	/* the producer's cursor: part position j is stream sample
	 * prefix[k] + local */
	size_t k;
	uint64_t j, local, remaining;
	gk_shard_reader *r;
	int fd;                   /* the shard read through its index */
	sh_map *map;              /* or mapped, when it is a plain tar */
	char *ipath;              /* its index file's name, for messages */
	/* prefetch */
	queue q;
	pthread_t thread;
	int running;
	int started;              /* an epoch position is set up */
};

/* d->idx_tried[i]: not yet, the shard's .idx (or none), built from the tar. */
enum { IDX_NOT_TRIED, IDX_FILE, IDX_BUILT };

/* One line for the caller (o.note), when the dataset works around a
 * problem in the data and goes on. */
static void note(const gk_shard_dataset *d, const char *fmt, ...) GK_PRINTF(2, 3);
static void note(const gk_shard_dataset *d, const char *fmt, ...)
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
static void note_end(const gk_shard_dataset *d, const char *file, int end_blocks,
		     size_t n)
{
	if (end_blocks == 0 || end_blocks == 1)
		note(d, "shard '%s' %s (truncated?): reading its %zu whole samples", file,
		     end_blocks ? "ends with a lone zero block" : "has no end-of-archive blocks",
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

/* Window w of part `part` in remap generation gen (0: a normal epoch). */
static uint64_t window_key(const gk_shard_dataset *d, uint64_t epoch,
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

static size_t window_size(const gk_shard_dataset *d)
{
	return d->o.shuffle ? d->o.shuffle_buffer : 1;
}

/* ---- the producer ------------------------------------------------------------ */

static const gk_shard_index *index_of(gk_shard_dataset *d, size_t shard)
{
	if (d->idx_tried[shard] == IDX_NOT_TRIED) {
		gk_err ignored, stale;
		int end_blocks;
		/* No index, or not this shard's: the tar reader reads it. */
		d->idx_tried[shard] = IDX_FILE;
		int rc = sh_index_load_for(d->files[shard], &d->idx[shard], &stale, &end_blocks,
					   &ignored);
		if (rc < 0)
			memset(&d->idx[shard], 0, sizeof(d->idx[shard]));
		else if (rc == 0 && stale.msg[0])
			note(d, "%s: reading the tar instead", stale.msg);
		else if (rc == 1)
			note_end(d, d->files[shard], end_blocks, d->idx[shard].nsamples);
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
	d->idx_tried[shard] = IDX_BUILT;
	if (sh_index_build(d->files[shard], idx, 0, &end_blocks, err) < 0)
		return -1;
	if (idx->nsamples != d->man.v[shard].samples)
		return gk_errf(err, "shard '%s': %zu samples; the manifest or its index said %llu (rebuild the index with data-pack --index)",
			       d->files[shard], idx->nsamples,
			       (unsigned long long)d->man.v[shard].samples);
	note_end(d, d->files[shard], end_blocks, idx->nsamples);
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
	if (d->idx_tried[shard] == IDX_BUILT)
		return gk_errf(err, "shard '%s' changed while it was read: sample %zu is not where it was when the dataset opened it",
			       d->files[shard], i);
	note(d, "%s: reading the tar instead", why.msg);
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
		gk_shard_permute(d->perm, n, window_key(d, d->epoch, d->part,
						       generations(d->hist, d->nhist), w));
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
		    !(d->idx_tried = calloc(d->man.n + 1, sizeof(int))) ||
		    !(d->checked = calloc(d->man.n + 1, sizeof(*d->checked))))
			return gk_err_sys(err, ENOMEM, "dataset");
		return 0;
	}
	gk_strlist l = {0};
	if (gk_brace_expand(source, 0, &l, err) < 0)
		return -1;
	d->files = l.v;
	if (!d->files || !(d->idx = calloc(l.n + 1, sizeof(*d->idx))) ||
	    !(d->idx_tried = calloc(l.n + 1, sizeof(int))) ||
	    !(d->checked = calloc(l.n + 1, sizeof(*d->checked)))) {
		gk_strlist_free(&l);
		d->files = NULL;
		return gk_err_sys(err, ENOMEM, "dataset");
	}
	for (size_t i = 0; i < l.n; i++) {
		/*
		 * Epochs read a shard again and again, at any sample: a FIFO or
		 * a device would block in open or give its bytes once.
		 */
		struct stat st;
		if (stat(l.v[i], &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
			d->man.n = i;
			return gk_errf(err, "shard '%s': not a regular file (a dataset reads its "
				       "shards more than once)", l.v[i]);
		}
		/*
		 * Counts from the shard's own index, else from reading it
		 * (an index found not to be its own is said and replaced).
		 */
		gk_err stale;
		int end_blocks;
		int rc = sh_index_load_for(l.v[i], &d->idx[i], &stale, &end_blocks, err);
		d->idx_tried[i] = IDX_FILE;
		if (rc == 0) {
			if (stale.msg[0])
				note(d, "%s: reading the tar instead", stale.msg);
			rc = sh_index_build(l.v[i], &d->idx[i], 0, &end_blocks, err);
			d->idx_tried[i] = IDX_BUILT;
		}
		if (rc >= 0)
			note_end(d, l.v[i], end_blocks, d->idx[i].nsamples);
		if (rc < 0 || gk_shard_manifest_add(&d->man, l.v[i], d->idx[i].nsamples,
						    0, 0, err) < 0) {
			d->man.n = i; /* files[] stays owned by d */
			return -1;
		}
	}
	return 0;
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

/*
 * Write s as a JSON string, the way snprintf writes (the length it needs,
 * whatever fits). s is UTF-8: only quotes, backslashes and control
 * characters are escaped.
 */
static size_t json_str(char *buf, size_t len, const char *s)
{
	size_t n = 0;
	char e[8];
#define OUT(c)                         \
	do {                           \
		if (n + 1 < len)       \
			buf[n] = (c);  \
		n++;                   \
	} while (0)
	OUT('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			OUT('\\');
			OUT((char)*p);
		} else if (*p < 0x20) {
			snprintf(e, sizeof(e), "\\u%04x", *p);
			for (size_t i = 0; e[i]; i++)
				OUT(e[i]);
		} else {
			OUT((char)*p);
		}
	}
	OUT('"');
#undef OUT
	if (len)
		buf[n < len ? n : len - 1] = '\0';
	return n;
}

/* Bytes of a shard's head that go into the list's identity. */
enum { HEAD_BYTES = 4096 };

/*
 * Length of the longest directory prefix (up to and with its last '/')
 * that every file of the list shares: "" when one is absolute and
 * another not, or when none has a directory.
 */
static size_t common_dir(char *const *files, size_t n)
{
	size_t len = n ? strlen(files[0]) : 0;
	for (size_t i = 1; i < n && len; i++) {
		size_t k = 0;
		while (k < len && files[i][k] && files[i][k] == files[0][k])
			k++;
		len = k;
	}
	while (len && files[0][len - 1] != '/')
		len--;
	return len;
}

/* A shard's file, wherever the list names it from: note_repeats. */
typedef struct file_id {
	dev_t dev;
	ino_t ino;
	size_t i;
} file_id;

static int cmp_file_id(const void *a, const void *b)
{
	const file_id *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * One shard's part of the list identity past its name and count: its
 * size and the XXH3 of its first HEAD_BYTES (one open and one read, at
 * open; a shard's index would bind the whole file, but a manifest list
 * reads no index and DALI's indexes carry no binding, so both sources
 * use the head and give the same identity).
 */
static int shard_head(const char *path, unsigned char out[16], struct stat *sto,
		      gk_err *err)
{
	char buf[HEAD_BYTES];
	struct stat st;
	ssize_t n = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 ||
	    (n = pread(fd, buf, (size_t)st.st_size < sizeof(buf) ? (size_t)st.st_size : sizeof(buf), 0)) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return gk_err_sys(err, e, "shard '%s'", path);
	}
	close(fd);
	*sto = st;
	uint64_t v[2] = {(uint64_t)st.st_size, gk_xxh3(buf, (size_t)n)};
	for (int j = 0; j < 2; j++)
		for (int k = 0; k < 8; k++)
			out[8 * j + k] = (unsigned char)(v[j] >> (8 * k));
	return 0;
}

/*
 * What a state says of the shard list. "files" (gk_shard_state.files):
 * each shard's path relative to the list's common directory, its count,
 * its size and the hash of its head, so the same tree moved elsewhere,
 * or listed by a manifest instead of a pattern, is the same list, while
 * en/train-000.tar and de/train-000.tar are not, nor two folders of
 * like-named shards listed on their own. "list" is today's older
 * identity (basenames and counts), kept to check states saved before
 * "files". The names (relative paths) go into states only while they
 * are short: a state is saved per rank and worker (trainer.json) and
 * exchanged in fixed-size buffers; a long list is the hashes alone.
 */
static int list_identity(gk_shard_dataset *d, file_id *ids, gk_err *err)
{
	gk_hash *h = gk_hash_new(), *f = gk_hash_new();
	size_t json = 1; /* [...] */
	int names = 1, rc = -1;
	if (!h || !f) {
		gk_err_sys(err, ENOMEM, "dataset");
		goto out;
	}
	d->common = common_dir(d->files, d->man.n);
	for (size_t i = 0; i < d->man.n; i++) {
		const char *b = base_name(d->man.v[i].path), *rel = d->files[i] + d->common;
		unsigned char le[8], head[16];
		struct stat st;
		for (int k = 0; k < 8; k++)
			le[k] = (unsigned char)(d->man.v[i].samples >> (8 * k));
		gk_hash_update(h, b, strlen(b) + 1);
		gk_hash_update(h, le, sizeof(le));
		if (shard_head(d->files[i], head, &st, err) < 0)
			goto out;
		ids[i] = (file_id){st.st_dev, st.st_ino, i};
		gk_hash_update(f, rel, strlen(rel) + 1);
		gk_hash_update(f, le, sizeof(le));
		gk_hash_update(f, head, sizeof(head));
		if (names) {
			json_t *js = json_string(rel); /* NULL: not UTF-8 */
			/* ["NAME",N] and a comma or the closing ] */
			json += json_str(NULL, 0, rel) + 4 +
				(size_t)snprintf(NULL, 0, "%llu",
						 (unsigned long long)d->man.v[i].samples);
			names = js && json <= GK_SHARD_STATE_NAMES;
			json_decref(js);
		}
	}
	d->list_id = gk_hash_digest(h);
	d->files_id = gk_hash_digest(f);
	rc = 0;
	if (!names)
		goto out;
	gk_shard_state_shard *v = calloc(2 * d->man.n, sizeof(*v));
	if (!v) {
		rc = gk_err_sys(err, ENOMEM, "dataset");
		goto out;
	}
	for (size_t i = 0; i < d->man.n; i++) {
		v[i] = (gk_shard_state_shard){d->files[i] + d->common, d->man.v[i].samples};
		v[d->man.n + i] = (gk_shard_state_shard){base_name(d->man.v[i].path),
							 d->man.v[i].samples};
	}
	d->names = v;
	d->base_names = v + d->man.n;
	d->nnames = d->man.n;
out:
	gk_hash_free(h);
	gk_hash_free(f);
	return rc;
}

/*
 * A shard listed more than once (the same file, by any name) is read that
 * many times an epoch: a way to weight it, or a typo in a brace list, so
 * it is allowed and said once. v: the list's files, as list_identity
 * found them (sorted here).
 */
static void note_repeats(gk_shard_dataset *d, file_id *v)
{
	size_t k = d->man.n, groups = 0, first = 0, times = 0;
	if (!d->o.note)
		return;
	qsort(v, k, sizeof(*v), cmp_file_id);
	for (size_t i = 0, j; i < k; i = j) {
		for (j = i + 1; j < k && v[j].dev == v[i].dev && v[j].ino == v[i].ino; j++)
			;
		if (j - i > 1 && groups++ == 0)
			first = v[i].i, times = j - i;
	}
	if (groups)
		note(d, "shard '%s' is listed %zu times, so its samples are read %zu times an "
		     "epoch%s", d->man.v[first].path, times, times,
		     groups > 1 ? " (and other shards are listed more than once too)" : "");
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
	file_id *ids = malloc(d->man.n * sizeof(*ids));
	if (!ids) {
		gk_err_sys(err, ENOMEM, "dataset");
		goto fail;
	}
	if (list_identity(d, ids, err) < 0) {
		free(ids);
		goto fail;
	}
	note_repeats(d, ids);
	free(ids);
	d->per = d->per0 = d->man.samples / d->parts;
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
	st->window = window_size(d);
	st->hist = d->hist;
	st->nhist = d->nhist;
	st->list = d->list_id;
	st->files = d->files_id;
	st->has_files = 1;
	st->shards = d->man.n;
	st->names = d->names;
	st->nnames = d->nnames;
}

/* ---- remapping an epoch to another world size --------------------------------- */

/*
 * Append to out the samples of a part's list (elements L[0..n), or the
 * range start.. when L is NULL) that the part had not returned at pos:
 * the part read its list in windows of B, window w permuted by key(w),
 * so the returned ones are all windows before pos/B and, in window pos/B,
 * the elements at the first pos%B permuted positions.
 */
static int unseen(const gk_shard_dataset *d, uint64_t epoch, uint64_t part,
		  uint64_t gen, const uint64_t *L, uint64_t start, uint64_t n,
		  uint64_t pos, uint64_t B, uint64_t *out, size_t *nout, gk_err *err)
{
	uint64_t w = pos / B, j = pos % B, w0 = w * B;
	uint64_t wn = w0 < n ? (n - w0 < B ? n - w0 : B) : 0;
	unsigned char *seen = NULL;
	if (j > 0) {
		uint64_t *perm = malloc(wn * sizeof(*perm));
		seen = calloc(wn, 1);
		if (!perm || !seen) {
			free(perm);
			free(seen);
			return gk_err_sys(err, ENOMEM, "dataset remap");
		}
		if (B > 1)
			gk_shard_permute(perm, (size_t)wn, window_key(d, epoch, part, gen, w));
		else
			perm[0] = 0;
		for (uint64_t t = 0; t < j; t++)
			seen[perm[t]] = 1;
		free(perm);
	}
	for (uint64_t t = w0; t < n; t++)
		if (!seen || t >= w0 + wn || !seen[t - w0])
			out[(*nout)++] = L ? L[t] : start + t;
	free(seen);
	return 0;
}

/* Part q of P when n samples are cut evenly: the first n mod P get one more. */
static void split(uint64_t n, uint64_t P, uint64_t q, uint64_t *off, uint64_t *len)
{
	uint64_t base = n / P, r = n % P;
	*off = q * base + (q < r ? q : r);
	*len = base + (q < r);
}

/*
 * The samples of part q of P in the epoch a history describes: replay it
 * generation by generation (each part's unseen samples, in stream order,
 * cut evenly among the next generation's parts), then cut the last
 * generation's unseen samples into P. *list is malloc'ed (NULL with
 * want_list 0: only *len). Checks the history fits this dataset.
 */
static int remap(const gk_shard_dataset *d, uint64_t epoch, const uint64_t *hist,
		 size_t nhist, uint64_t P, uint64_t q, uint64_t **list, uint64_t *len,
		 gk_err *err)
{
	uint64_t S = d->man.samples, *U = NULL, *next = NULL, gen = 0;
	size_t nU = 0;
	int rc = -1;
	for (size_t i = 0; i < nhist; gen++) {
		uint64_t Pg = i + 2 <= nhist ? hist[i] : 0, B = i + 2 <= nhist ? hist[i + 1] : 0;
		if (Pg == 0 || B == 0 || Pg > nhist - i - 2 || (gen == 0 && S / Pg == 0)) {
			gk_errf(err, "dataset state: remap history: generation %llu is malformed",
				(unsigned long long)gen);
			goto out;
		}
		const uint64_t *pos = hist + i + 2;
		size_t cap = gen == 0 ? (size_t)(S / Pg * Pg) : nU, nn = 0;
		if (!(next = malloc((cap + 1) * sizeof(*next)))) {
			gk_err_sys(err, ENOMEM, "dataset remap");
			goto out;
		}
		for (uint64_t p = 0; p < Pg; p++) {
			uint64_t off, n;
			if (gen == 0)
				off = p * (S / Pg), n = S / Pg;
			else
				split(nU, Pg, p, &off, &n);
			if (pos[p] > n) {
				gk_errf(err, "dataset state: remap history: part %llu of %llu at %llu of its %llu samples",
					(unsigned long long)p, (unsigned long long)Pg,
					(unsigned long long)pos[p], (unsigned long long)n);
				goto out;
			}
			if (unseen(d, epoch, p, gen, gen ? U + off : NULL, off, n, pos[p], B,
				   next, &nn, err) < 0)
				goto out;
		}
		free(U);
		U = next;
		next = NULL;
		nU = nn;
		i += 2 + (size_t)Pg;
	}
	uint64_t off, n;
	split(nU, P, q, &off, &n);
	*len = n;
	if (list) {
		if (!(*list = malloc((n + 1) * sizeof(**list)))) {
			gk_err_sys(err, ENOMEM, "dataset remap");
			goto out;
		}
		memcpy(*list, U + off, n * sizeof(**list));
	}
	rc = 0;
out:
	free(U);
	free(next);
	return rc;
}

/* Make the current epoch remapped by hist (copied; list is taken), or normal. */
static int set_remap(gk_shard_dataset *d, const uint64_t *hist, size_t nhist,
		     uint64_t *list, uint64_t len, gk_err *err)
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

/* Start the producer and the window at (epoch, pos) of the current plan. */
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

/* A new epoch is a normal one, whatever the last one was. */
static int go_epoch(gk_shard_dataset *d, uint64_t epoch, gk_err *err)
{
	producer_stop(d);
	if (set_remap(d, NULL, 0, NULL, 0, err) < 0)
		return -1;
	return go(d, epoch, 0, err);
}

/* Same run options: a state's window says how its part was read. */
static int check_window(const gk_shard_dataset *d, const gk_shard_state *st,
			gk_err *err)
{
	if (st->window && st->window != window_size(d))
		return gk_errf(err, "dataset state: saved with a shuffle window of %llu samples; this dataset reads %llu (same seed, shuffle and buffer to resume)",
			       (unsigned long long)st->window,
			       (unsigned long long)window_size(d));
	return 0;
}

/*
 * Same shard list: the positions are into the stream of this list's
 * samples, so another list (reordered, a shard replaced by another of
 * the same count, the same names in another folder) would resume at
 * other samples, repeating some and skipping others. Named by the first
 * difference when the state holds the list. A state with "files" is
 * checked on it (paths below the common directory, counts, sizes,
 * heads); one saved before it, with only "list", on basenames and
 * counts as it was then; one from before lists were named (shards 0) on
 * its counts alone.
 */
static int check_list(const gk_shard_dataset *d, const gk_shard_state *st,
		      gk_err *err)
{
	static const char why[] = "a state resumes on the same shard list, in the same order";
	size_t n = d->man.n;
	if (st->shards == 0)
		return 0;
	/* d->names is NULL for a long list: compare only while st's are there */
	const gk_shard_state_shard *mine = st->has_files ? d->names : d->base_names;
	for (size_t i = 0; mine && st->nnames == st->shards && i <= st->nnames && i <= n; i++) {
		const gk_shard_state_shard *a = i < st->nnames ? &st->names[i] : NULL;
		const char *b = i < n ? mine[i].name : NULL;
		if (a && b && strcmp(a->name, b) == 0 && a->samples == d->man.v[i].samples)
			continue;
		if (a && b)
			return gk_errf(err, "dataset state: saved for shard %zu '%s' (%llu samples), this list has '%s' (%llu samples) there: %s",
				       i, a->name, (unsigned long long)a->samples, b,
				       (unsigned long long)d->man.v[i].samples, why);
		if (a)
			return gk_errf(err, "dataset state: saved for shard %zu '%s' (%llu samples), this list ends before it, after %zu shards: %s",
				       i, a->name, (unsigned long long)a->samples, n, why);
		if (b)
			return gk_errf(err, "dataset state: saved for a list of %zu shards, this list goes on with shard %zu '%s' (%llu samples): %s",
				       i, i, b, (unsigned long long)d->man.v[i].samples, why);
	}
	uint64_t want = st->has_files ? st->files : st->list;
	uint64_t have = st->has_files ? d->files_id : d->list_id;
	if (want == have && st->shards == n)
		return 0;
	char x[17], y[17];
	if (st->has_files && st->shards == n && st->list == d->list_id && st->nnames == n)
		return gk_errf(err, "dataset state: saved for shards of the same names and counts whose sizes or contents differ (identity %s, this list %s): %s",
			       gk_xxh3_hex(want, x), gk_xxh3_hex(have, y), why);
	return gk_errf(err, "dataset state: saved for another shard list (%llu shards, identity %s), this list has %zu (identity %s): %s (%s)",
		       (unsigned long long)st->shards, gk_xxh3_hex(want, x), n,
		       gk_xxh3_hex(have, y), why,
		       st->has_files ? "paths below their common directory, sample counts, sizes and first 4 KiB"
				     : "basenames and sample counts");
}

int gk_shard_dataset_restore(gk_shard_dataset *d, const gk_shard_state *st,
			     gk_err *err)
{
	uint64_t *list = NULL, len = d->per0;
	if (st->seed != d->o.seed || st->parts != d->parts || st->part != d->part)
		return gk_errf(err, "dataset state: saved with seed %llu for part %u of %u, "
			       "restored with seed %llu for part %llu of %llu: the order of the "
			       "samples is the seed's, so a state resumes with its own",
			       (unsigned long long)st->seed, st->part, st->parts,
			       (unsigned long long)d->o.seed, (unsigned long long)d->part,
			       (unsigned long long)d->parts);
	if (check_list(d, st, err) < 0 || check_window(d, st, err) < 0)
		return -1;
	if (st->nhist && remap(d, st->epoch, st->hist, st->nhist, d->parts, d->part,
			       &list, &len, err) < 0)
		return -1;
	if (st->samples != len || st->pos > len) {
		free(list);
		return gk_errf(err, "dataset state: position %llu of %llu samples; this part has %llu in that epoch",
			       (unsigned long long)st->pos, (unsigned long long)st->samples,
			       (unsigned long long)len);
	}
	producer_stop(d);
	if (set_remap(d, st->hist, st->nhist, list, len, err) < 0)
		return -1;
	return go(d, st->epoch, st->pos, err);
}

int gk_shard_dataset_restore_world(gk_shard_dataset *d, const gk_shard_state *st,
				   size_t n, gk_err *err)
{
	if (n == 0)
		return gk_errf(err, "dataset states: none given");
	const gk_shard_state *a = &st[0];
	if (a->parts != n)
		return gk_errf(err, "dataset states: %zu given for a world of %u parts (give every rank's and worker's)",
			       n, a->parts);
	unsigned char *have = calloc(n, 1);
	if (!have)
		return gk_err_sys(err, ENOMEM, "dataset states");
	uint64_t *hist = NULL, *list = NULL, len;
	int rc = -1;
	for (size_t i = 0; i < n; i++) {
		const gk_shard_state *s = &st[i];
		if (s->seed != d->o.seed || s->epoch != a->epoch || s->parts != a->parts ||
		    s->nhist != a->nhist || s->window != a->window ||
		    s->list != a->list || s->shards != a->shards ||
		    s->has_files != a->has_files || s->files != a->files ||
		    (s->nhist && memcmp(s->hist, a->hist, s->nhist * sizeof(*s->hist)))) {
			gk_errf(err, "dataset states: state %zu (part %u) is not from the run of state 0 (seed %llu, epoch %llu, %u parts)",
				i, s->part, (unsigned long long)a->seed,
				(unsigned long long)a->epoch, a->parts);
			goto out;
		}
		if (s->part >= n || have[s->part]++) {
			gk_errf(err, "dataset states: part %u is out of range or given twice", s->part);
			goto out;
		}
		if (check_window(d, s, err) < 0)
			goto out;
	}
	/* The states agree on their list (above): it must be this one. */
	if (check_list(d, a, err) < 0)
		goto out;
	/* Every part's count must be what this dataset gives it: same data. */
	for (size_t i = 0; i < n; i++) {
		const gk_shard_state *s = &st[i];
		uint64_t want = s->parts ? d->man.samples / s->parts : 0;
		if (s->nhist && remap(d, s->epoch, s->hist, s->nhist, s->parts, s->part, NULL,
				      &want, err) < 0)
			goto out;
		if (s->samples != want || s->pos > want) {
			gk_errf(err, "dataset states: part %u at %llu of %llu samples; this dataset gives it %llu",
				s->part, (unsigned long long)s->pos,
				(unsigned long long)s->samples, (unsigned long long)want);
			goto out;
		}
	}
	if (a->parts == d->parts) {
		/* The same world: every part resumes exactly where it was. */
		for (size_t i = 0; i < n; i++)
			if (st[i].part == d->part)
				rc = gk_shard_dataset_restore(d, &st[i], err);
		goto out;
	}
	/* Another world: one more generation, each old part at its position. */
	size_t nh = a->nhist + 2 + n;
	if (!(hist = malloc(nh * sizeof(*hist)))) {
		gk_err_sys(err, ENOMEM, "dataset states");
		goto out;
	}
	if (a->nhist)
		memcpy(hist, a->hist, a->nhist * sizeof(*hist));
	hist[a->nhist] = n;
	hist[a->nhist + 1] = a->window ? a->window : window_size(d);
	for (size_t i = 0; i < n; i++)
		hist[a->nhist + 2 + st[i].part] = st[i].pos;
	if (remap(d, a->epoch, hist, nh, d->parts, d->part, &list, &len, err) < 0)
		goto out;
	producer_stop(d);
	if (set_remap(d, hist, nh, list, len, err) < 0)
		goto out;
	rc = go(d, a->epoch, 0, err);
out:
	free(have);
	free(hist);
	return rc;
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
	if (!d->started && go(d, 0, 0, err) < 0)
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

int gk_shard_state_format(const gk_shard_state *st, char *buf, size_t len)
{
	size_t n = 0;
	int r = snprintf(buf, len,
			 "{\"seed\":%llu,\"epoch\":%llu,\"pos\":%llu,\"samples\":%llu,\"part\":%u,\"parts\":%u,\"window\":%llu",
			 (unsigned long long)st->seed, (unsigned long long)st->epoch,
			 (unsigned long long)st->pos, (unsigned long long)st->samples,
			 st->part, st->parts, (unsigned long long)st->window);
	/* Like snprintf: the length it needs, whatever fits. */
#define PUT(...)                                                                   \
	do {                                                                       \
		if (r < 0)                                                         \
			return -1;                                                 \
		n += (size_t)r;                                                    \
		r = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, __VA_ARGS__); \
	} while (0)
	if (st->shards) {
		char x[17];
		PUT(",\"list\":\"%s\",\"shards\":%llu", gk_xxh3_hex(st->list, x),
		    (unsigned long long)st->shards);
		if (st->has_files)
			PUT(",\"files\":\"%s\"", gk_xxh3_hex(st->files, x));
	}
	if (st->shards && st->nnames == st->shards) {
		PUT(",\"names\":[");
		for (size_t i = 0; i < st->nnames; i++) {
			PUT("%s[", i ? "," : "");
			n += (size_t)r;
			r = (int)json_str(n < len ? buf + n : NULL, n < len ? len - n : 0,
					  st->names[i].name);
			PUT(",%llu]", (unsigned long long)st->names[i].samples);
		}
		PUT("]");
	}
	if (st->nhist) {
		PUT(",\"hist\":[");
		for (size_t i = 0; i < st->nhist; i++)
			PUT("%s%llu", i ? "," : "", (unsigned long long)st->hist[i]);
		PUT("]");
	}
	PUT("}");
	if (r < 0)
		return -1;
	n += (size_t)r;
#undef PUT
	return n > INT_MAX ? -1 : (int)n;
}

/*
 * "list", "shards" and "names" (gk_shard_state.list); a state saved
 * before them has none: shards stays 0. The names go in one block, the
 * array followed by the strings.
 */
static int parse_list(const json_t *j, gk_shard_state *st, gk_err *err)
{
	const json_t *l = json_object_get(j, "list"), *k = json_object_get(j, "shards"),
		     *v = json_object_get(j, "names"), *f = json_object_get(j, "files");
	if (!l && !k && !v && !f)
		return 0;
	if (f) {
		if (!json_is_string(f) || strlen(json_string_value(f)) != 16 ||
		    gk_xxh3_parse(json_string_value(f), &st->files, err) < 0)
			return gk_errf(err, "dataset state: 'files' is not 16 hex digits");
		st->has_files = 1;
	}
	if (!json_is_string(l) || strlen(json_string_value(l)) != 16 ||
	    gk_xxh3_parse(json_string_value(l), &st->list, err) < 0)
		return gk_errf(err, "dataset state: 'list' is not 16 hex digits");
	if (!json_is_integer(k) || json_integer_value(k) < 1)
		return gk_errf(err, "dataset state: 'shards' is not a count of shards");
	st->shards = (uint64_t)json_integer_value(k);
	if (!v)
		return 0;
	size_t n = json_array_size(v), bytes = 0, i;
	const json_t *e;
	if (!json_is_array(v) || n != st->shards)
		goto bad;
	json_array_foreach(v, i, e) {
		const json_t *name = json_array_get(e, 0), *c = json_array_get(e, 1);
		if (json_array_size(e) != 2 || !json_is_string(name) || !json_is_integer(c) ||
		    json_integer_value(c) < 0 || strlen(json_string_value(name)) !=
						     json_string_length(name))
			goto bad;
		bytes += json_string_length(name) + 1;
	}
	gk_shard_state_shard *names = malloc(n * sizeof(*names) + bytes);
	if (!names)
		return gk_err_sys(err, ENOMEM, "dataset state");
	char *p = (char *)(names + n);
	json_array_foreach(v, i, e) {
		const json_t *name = json_array_get(e, 0);
		size_t len = json_string_length(name) + 1;
		memcpy(p, json_string_value(name), len);
		names[i] = (gk_shard_state_shard){p, (uint64_t)json_integer_value(json_array_get(e, 1))};
		p += len;
	}
	st->names = names;
	st->nnames = n;
	return 0;
bad:
	return gk_errf(err, "dataset state: 'names' does not give a name and a count for each of its 'shards' (%llu)",
		       (unsigned long long)st->shards);
}

int gk_shard_state_parse(const char *json, gk_shard_state *st, gk_err *err)
{
	struct json_t *j = gk_json_load_buf(json, strlen(json), "dataset state", err);
	int64_t v[7] = {0};
	static const char *keys[] = {"seed", "epoch", "pos", "samples", "part", "parts", "window"};
	memset(st, 0, sizeof(*st));
	if (!j)
		return -1;
	for (size_t i = 0; i < 7; i++) {
		/* "window" came later: a state without it is read as "as now". */
		if (i == 6 && !json_object_get(j, keys[i]))
			break;
		if (gk_json_get_int(j, keys[i], &v[i], err) < 0) {
			gk_err_prefix(err, "dataset state");
			goto fail;
		}
		if (v[i] < 0 || ((i == 4 || i == 5) && v[i] > UINT32_MAX)) {
			gk_errf(err, "dataset state: '%s' out of range", keys[i]);
			goto fail;
		}
	}
	json_t *h = json_object_get(j, "hist");
	if (h) {
		size_t n = json_array_size(h);
		uint64_t *hist = malloc((n + 1) * sizeof(*hist));
		if (!json_is_array(h) || n == 0 || !hist) {
			free(hist);
			gk_errf(err, "dataset state: 'hist' is not a list of counts");
			goto fail;
		}
		for (size_t i = 0; i < n; i++) {
			json_t *e = json_array_get(h, i);
			if (!json_is_integer(e) || json_integer_value(e) < 0) {
				free(hist);
				gk_errf(err, "dataset state: 'hist' is not a list of counts");
				goto fail;
			}
			hist[i] = (uint64_t)json_integer_value(e);
		}
		st->hist = hist;
		st->nhist = n;
	}
	if (parse_list(j, st, err) < 0)
		goto fail;
	st->seed = (uint64_t)v[0];
	st->epoch = (uint64_t)v[1];
	st->pos = (uint64_t)v[2];
	st->samples = (uint64_t)v[3];
	st->part = (uint32_t)v[4];
	st->parts = (uint32_t)v[5];
	st->window = (uint64_t)v[6];
	json_decref(j);
	return 0;
fail:
	gk_shard_state_free(st);
	json_decref(j);
	return -1;
}

void gk_shard_state_free(gk_shard_state *st)
{
	free((void *)st->hist);
	st->hist = NULL;
	st->nhist = 0;
	/* a parsed state's names: one block, the strings after the array */
	free((void *)st->names);
	st->names = NULL;
	st->nnames = 0;
}
