/*
 * tokenize.c - text documents in, token ids out (data-pack --tokenize):
 * every sample's one text member becomes KEY.npy, the ids of its bytes
 * under a GPT-2 byte-level BPE (lib/tok) and the end-of-text id.
 *
 * The sources (files, a tar stream) hand documents to a batch; a full
 * batch is done by the threads, one document per task, largest first (so
 * that a batch ends with short tasks, not one thread alone on a long
 * one), each thread with its own encoder: a document given as a file is
 * read there, encoded (the costly part), and its .npy bytes made.
 * Meanwhile one of the threads adds the previous batch's members to the
 * writer (which encodes the tar entries, hashes, compresses and writes
 * them, and starts the disk on them), in input order, then joins the
 * encoding. Of the work here, only listing the documents (a
 * stat each) and reading a tar stream or a fifo are left to one thread,
 * so the rest scales with the threads. The writer sees the same samples
 * in the same order whatever the thread count, so the shards are the
 * same bytes: threads change only when the work is done. And the error
 * reported is that of the first document, in input order, that fails
 * (documents after it are skipped, those before it all run; a source
 * that fails on a document first finishes those before it, see
 * sh_tokb_error), so it too is the same at any thread count.
 *
 * Memory: the batch being encoded (its text, then its ids) and the one
 * being written, each some MiB per thread, plus the writer's buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "shard/internal.h"

/*
 * A batch is full past this many bytes of text per thread, or this many
 * documents per thread: enough work to share out (documents vary in
 * length), little enough memory.
 */
enum { BATCH_BYTES = 4 << 20, BATCH_DOCS = 512 };

typedef struct doc {
	char *key;
	const char *path;     /* a regular file a thread reads, or NULL: text given */
	uint64_t want;        /* bytes it counts for in the batch (its stat size) */
	unsigned char *text;  /* len bytes, owned */
	size_t len;
	unsigned char *npy;   /* the member, made by a thread */
	size_t size;
	uint64_t ids;         /* in it, eot included */
} doc;

/* A document of a batch: its number and size, to sort. */
struct rank {
	uint64_t want;
	size_t i;
};

typedef struct batch {
	doc *d;
	size_t n, cap;
	uint64_t bytes;       /* of text, read or to read */
} batch;

struct sh_tokb {
	gk_shard_writer *w;
	gk_shard_tokenize *tz;
	gk_progress *progress;
	int jobs, itemsize;
	size_t batch_docs;    /* per thread */
	gk_tok_enc **enc;     /* one per thread */
	gk_tok_ids *ids;      /* one per thread, reused */
	batch fill;           /* the sources add to it */
	batch done;           /* encoded, to be written */
	struct rank *order;   /* the filled batch's documents, largest first */
	size_t order_cap;
	uint64_t read;        /* text bytes written, for progress */
	size_t fail_at;       /* first failing document of the batch encoded, or SIZE_MAX */
	gk_err fail;          /* why it failed */
	int failed;           /* a flush failed: the batches are no longer to be written */
	gk_shard_tokclock queue; /* the source's time since it last handed a document */
};

/* ---- where the time goes ---------------------------------------------------- */

/*
 * The thread's CPU clock is a system call, where a busy machine often
 * preempts the thread: read it first, so that such a wait is charged to
 * the stage that ends, not to the next one (whose wall time it made 20
 * times its CPU time).
 */
void gk_shard_tokclock_start(gk_shard_tokclock *c)
{
	struct timespec ts;
	c->cpu = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0
		       ? (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 : 0;
	c->wall = gk_now();
}

void gk_shard_tokstats_begin(gk_shard_tokstats *s, gk_shard_tokclock *c)
{
	memset(s, 0, sizeof(*s));
	gk_shard_tokclock_start(c);
	s->start = c->wall;
}

void gk_shard_tokstats_add(gk_shard_tokstats *s, int stage, gk_shard_tokclock *c,
			   int serial)
{
	if (!s)
		return;
	gk_shard_tokclock now;
	gk_shard_tokclock_start(&now);
	s->wall[stage] += now.wall - c->wall;
	s->cpu[stage] += now.cpu - c->cpu;
	if (serial)
		s->serial[stage] += now.wall - c->wall;
	*c = now;
}

void gk_shard_tokstats_print(const gk_shard_tokstats *s, const char *prefix, FILE *fp)
{
	static const char *const name[GK_TOKST_N] = {
		"load", "list", "queue", "read", "encode", "npy", "write", "wait", "close",
	};
	double total = gk_now() - s->start, serial = total - s->parallel, known = 0;
	fprintf(fp, "%s: tokenize: %.3f s, %" PRIu64 " documents, %" PRIu64 " batch%s, %d thread%s\n",
		prefix, total, s->docs, s->batches, s->batches == 1 ? "" : "es", s->jobs,
		s->jobs == 1 ? "" : "s");
	fprintf(fp, "%s: %-8s %9s %9s %9s\n", prefix, "stage", "wall s", "cpu s", "serial s");
	for (int i = 0; i < GK_TOKST_N; i++) {
		fprintf(fp, "%s: %-8s %9.3f %9.3f %9.3f\n", prefix, name[i], s->wall[i], s->cpu[i],
			s->serial[i]);
		known += s->serial[i];
	}
	fprintf(fp, "%s: %-8s %9s %9s %9.3f\n", prefix, "other", "", "", serial - known);
	fprintf(fp, "%s: serial path %.3f s of %.3f s (%.1f%%)\n", prefix, serial, total,
		total > 0 ? 100 * serial / total : 0.0);
}

int gk_shard_tokenize_is_text(const gk_shard_tokenize *tz, const char *ext)
{
	return strcasecmp(ext, "txt") == 0 || (tz->ext && strcasecmp(ext, tz->ext) == 0);
}

int gk_shard_tokenize_itemsize(const gk_shard_tokenize *tz)
{
	return gk_tok_vocab_size(tz->tok) <= 65536 ? 2 : 4;
}

int gk_shard_tokenize_info(const gk_shard_tokenize *tz, gk_shard_tok_info *out,
			   gk_err *err)
{
	gk_shard_tok_info_free(out);
	const char *const *paths = gk_tok_paths(tz->tok);
	size_t n = 0;
	while (paths && paths[n])
		n++;
	out->files = calloc(n ? n : 1, sizeof(*out->files));
	if (!out->files)
		return gk_err_sys(err, ENOMEM, "tokenizer");
	for (size_t i = 0; i < n; i++) {
		int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			gk_err_sys(err, errno, "read tokenizer file '%s'", paths[i]);
			goto fail;
		}
		uint64_t h;
		int r = gk_xxh3_fd(fd, 0, UINT64_MAX, &h, paths[i], err);
		close(fd);
		if (r < 0)
			goto fail;
		if (!(out->files[i].path = strdup(paths[i]))) {
			gk_err_sys(err, ENOMEM, "tokenizer");
			goto fail;
		}
		out->files[i].xxh3 = h;
		out->nfiles++;
	}
	out->fingerprint = gk_tok_fingerprint(tz->tok);
	out->vocab = gk_tok_vocab_size(tz->tok);
	out->eot = tz->eot;
	out->itemsize = gk_shard_tokenize_itemsize(tz);
	out->tokens = tz->tokens;
	out->present = 1;
	return 0;
fail:
	gk_shard_tok_info_free(out);
	return -1;
}

int sh_tokb_new(sh_tokb **out, gk_shard_writer *w, gk_shard_tokenize *tz,
		gk_progress *progress, gk_err *err)
{
	sh_tokb *b = calloc(1, sizeof(*b));
	if (!b)
		return gk_err_sys(err, ENOMEM, "tokenize");
	int64_t vocab = gk_tok_vocab_size(tz->tok);
	size_t len;
	if (tz->eot < 0 || tz->eot >= vocab || !gk_tok_token(tz->tok, (uint32_t)tz->eot, &len)) {
		free(b);
		return gk_errf(err, "tokenize: end-of-text id %lld is no token of the vocabulary (%lld ids)",
			       (long long)tz->eot, (long long)vocab);
	}
	b->w = w;
	b->tz = tz;
	b->progress = progress;
	b->jobs = tz->jobs > 1 ? tz->jobs : 1;
	b->itemsize = gk_shard_tokenize_itemsize(tz);
	/*
	 * GK_TEST_TOK_BATCH: documents per thread in a batch, so that tests
	 * reach many batches (the overlap of encoding and writing, an error
	 * after batches were written) with a few hundred small documents.
	 */
	const char *tb = getenv("GK_TEST_TOK_BATCH");
	char *end;
	long v = tb ? strtol(tb, &end, 10) : 0;
	b->batch_docs = tb && *end == '\0' && v > 0 && v <= BATCH_DOCS ? (size_t)v : BATCH_DOCS;
	b->enc = calloc((size_t)b->jobs, sizeof(*b->enc));
	b->ids = calloc((size_t)b->jobs, sizeof(*b->ids));
	if (!b->enc || !b->ids)
		goto nomem;
	for (int i = 0; i < b->jobs; i++)
		if (!(b->enc[i] = gk_tok_enc_new(tz->tok)))
			goto nomem;
	if (tz->stats)
		tz->stats->jobs = b->jobs;
	gk_shard_tokclock_start(&b->queue);
	*out = b;
	return 0;
nomem:
	sh_tokb_free(b);
	return gk_err_sys(err, ENOMEM, "tokenize");
}

static void doc_free(doc *d)
{
	free(d->key);
	free(d->text);
	free(d->npy);
	memset(d, 0, sizeof(*d));
}

static void batch_clear(batch *t)
{
	for (size_t i = 0; i < t->n; i++)
		doc_free(&t->d[i]);
	t->n = 0;
	t->bytes = 0;
}

void sh_tokb_free(sh_tokb *b)
{
	if (!b)
		return;
	batch_clear(&b->fill);
	batch_clear(&b->done);
	free(b->fill.d);
	free(b->done.d);
	for (int i = 0; b->enc && i < b->jobs; i++)
		gk_tok_enc_free(b->enc[i]);
	for (int i = 0; b->ids && i < b->jobs; i++)
		free(b->ids[i].v);
	free(b->enc);
	free(b->ids);
	free(b->order);
	free(b);
}

ssize_t sh_tokb_check(const gk_shard_tokenize *tz, const char *key, size_t n,
		      const gk_shard_member *m, gk_err *err)
{
	char exts[300];
	snprintf(exts, sizeof(exts), ".txt%s%s", tz->ext ? " or ." : "", tz->ext ? tz->ext : "");
	char *q = gk_shard_name_quote(key);
	const char *k = q ? q : key;
	ssize_t text = -1;
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (!gk_shard_tokenize_is_text(tz, m[i].ext)) {
			char *e = gk_shard_name_quote(m[i].ext);
			rc = gk_errf(err, "tokenize: member '%s.%s' is not text (the documents to tokenize are the %s members): leave it out of the input",
				     k, e ? e : m[i].ext, exts);
			free(e);
		} else if (text >= 0) {
			rc = gk_errf(err, "tokenize: sample '%s' has two text members ('.%s' and '.%s'): a tokenized sample is one document",
				     k, m[text].ext, m[i].ext);
		} else {
			text = (ssize_t)i;
		}
	}
	free(q);
	return rc < 0 ? -1 : text;
}

/*
 * A document's file, read whole (to its end, whatever its size was when
 * the source saw it) into one buffer of the size fstat gives, grown if
 * the file grew.
 */
static int read_text(doc *d, gk_err *err)
{
	int fd = open(d->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return gk_err_sys(err, errno, "open '%s'", d->path);
	struct stat st;
	size_t cap = fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
	unsigned char *p = malloc(cap);
	int rc = -1;
	if (!p) {
		gk_err_sys(err, ENOMEM, "read '%s'", d->path);
		goto out;
	}
	for (;;) {
		if (n == cap) {
			unsigned char *q = realloc(p, cap * 2);
			if (!q) {
				gk_err_sys(err, ENOMEM, "read '%s'", d->path);
				goto out;
			}
			p = q;
			cap *= 2;
		}
		ssize_t r = read(fd, p + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			gk_err_sys(err, errno, "read '%s'", d->path);
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	d->text = p;
	d->len = n;
	p = NULL;
	rc = 0;
out:
	free(p);
	close(fd);
	return rc;
}

/* A thread's share of a batch's time: its stages, and what it did last (write or encode). */
typedef struct tclock {
	gk_shard_tokstats part;
	gk_shard_tokclock c;
	int last;
} tclock;

static void tick(tclock *tc, int stage)
{
	if (tc) {
		gk_shard_tokstats_add(&tc->part, stage, &tc->c, 0);
		tc->last = stage == GK_TOKST_WRITE ? stage : GK_TOKST_ENCODE;
	}
}

/*
 * A document, on thread t: read, encode, append eot, make its .npy bytes.
 * tc: the thread's clock, or NULL.
 */
static int encode_doc(sh_tokb *b, doc *d, int t, tclock *tc, gk_err *err)
{
	gk_tok_ids *ids = &b->ids[t];
	if (d->path && read_text(d, err) < 0)
		return -1;
	tick(tc, GK_TOKST_READ);
	ids->n = 0;
	if (gk_tok_encode(b->enc[t], d->text, d->len, 0, ids, err) < 0 ||
	    GK_GROW(ids->v, ids->cap, ids->n + 1, "tokenize", err) < 0)
		return gk_err_prefix(err, "tokenize '%s'", d->key);
	tick(tc, GK_TOKST_ENCODE);
	ids->v[ids->n++] = (uint32_t)b->tz->eot;
	unsigned char hdr[GK_SHARD_NPY_HEADER_MAX];
	size_t h = gk_shard_npy_header(hdr, b->itemsize, ids->n);
	d->size = h + ids->n * (size_t)b->itemsize;
	if (!(d->npy = malloc(d->size)))
		return gk_err_sys(err, ENOMEM, "tokenize '%s'", d->key);
	memcpy(d->npy, hdr, h);
	unsigned char *p = d->npy + h;
	/* .npy data is little-endian ('<'), whatever the host is. */
	for (size_t i = 0; i < ids->n; i++) {
		uint32_t v = ids->v[i];
		*p++ = (unsigned char)v;
		*p++ = (unsigned char)(v >> 8);
		if (b->itemsize == 4) {
			*p++ = (unsigned char)(v >> 16);
			*p++ = (unsigned char)(v >> 24);
		}
	}
	d->ids = ids->n;
	free(d->text);
	d->text = NULL;
	tick(tc, GK_TOKST_NPY);
	return 0;
}

/* The encoded batch's members to the writer, in order; the batch is emptied. */
static int write_batch(sh_tokb *b, batch *t, gk_err *err)
{
	int rc = 0;
	for (size_t i = 0; i < t->n && rc == 0; i++) {
		doc *d = &t->d[i];
		gk_shard_member m = {.ext = "npy", .data = d->npy, .size = d->size};
		rc = gk_shard_writer_add(b->w, d->key, 1, &m, err);
		b->tz->tokens += d->ids;
		b->read += d->len;
		free(d->npy);
		d->npy = NULL;
		if (b->progress)
			gk_progress_update(b->progress, b->read);
	}
	/* beside the encoding: less for the fsync that ends the shard */
	if (rc == 0 && t->n)
		sh_writer_writeback(b->w);
	batch_clear(t);
	return rc;
}

/* Largest first, then in input order (qsort is not stable). */
static int by_size(const void *a, const void *b)
{
	const struct rank *x = a, *y = b;
	return x->want != y->want ? (x->want < y->want) - (x->want > y->want)
				  : (x->i > y->i) - (x->i < y->i);
}

/*
 * Encode the filled batch while the previous one is written; then the
 * filled one waits in done for the next flush (or sh_tokb_finish). The
 * threads all return before this does, also on error.
 */
static int flush(sh_tokb *b, gk_err *err)
{
	batch *in = &b->fill;
	size_t n = in->n;
	size_t stop = SIZE_MAX; /* documents past it are skipped */
	int wrc = 0;
	gk_err werr;
	gk_shard_tokstats *st = b->tz->stats;
	/* the region's start, when its first thread ran out of work, its threads' idle time */
	double t0 = 0, first_idle = DBL_MAX, last_idle = -DBL_MAX, idle = 0;
	int idlers = 0, last_stage = GK_TOKST_ENCODE;
	/*
	 * The threads take the documents largest first: the batch ends with
	 * the small ones, so that no thread is left encoding a long document
	 * alone while the others wait at its end (the writer, done with the
	 * previous batch, joins in for the small ones). The ids still reach
	 * the writer in input order, and the error reported is still that of
	 * the first failing document in input order: a document runs unless
	 * an earlier one failed.
	 */
	if (GK_GROW(b->order, b->order_cap, n + 1, "tokenize", err) < 0) {
		b->failed = 1;
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		b->order[i] = (struct rank){in->d[i].want, i};
	qsort(b->order, n, sizeof(*b->order), by_size);
	gk_shard_tokstats_add(st, GK_TOKST_QUEUE, &b->queue, 1);
	if (st)
		t0 = b->queue.wall;
	b->fail_at = SIZE_MAX;
#pragma omp parallel num_threads(b->jobs) if (b->jobs > 1)
	{
		int t = 0;
#ifdef _OPENMP
		t = omp_get_thread_num();
#endif
		tclock tcs, *tc = NULL;
		if (st) {
			memset(&tcs, 0, sizeof(tcs));
			tc = &tcs;
			gk_shard_tokclock_start(&tc->c);
			tc->last = -1;
		}
#pragma omp single nowait
		{
			if (write_batch(b, &b->done, &werr) < 0) {
				wrc = -1;
#pragma omp atomic write
				stop = 0;
			}
			tick(tc, GK_TOKST_WRITE);
		}
#pragma omp for schedule(dynamic) nowait
		for (size_t k = 0; k < n; k++) {
			size_t i = b->order[k].i, s;
#pragma omp atomic read
			s = stop;
			if (i > s)
				continue;
			gk_err e;
			if (encode_doc(b, &in->d[i], t, tc, &e) < 0) {
#pragma omp critical(sh_tokb_fail)
				{
					if (i < b->fail_at) {
						b->fail_at = i;
						b->fail = e;
#pragma omp atomic write
						stop = i;
					}
				}
			}
		}
		if (tc) {
#pragma omp critical(sh_tokb_stats)
			{
				for (int k = 0; k < GK_TOKST_N; k++) {
					st->wall[k] += tc->part.wall[k];
					st->cpu[k] += tc->part.cpu[k];
				}
				first_idle = tc->c.wall < first_idle ? tc->c.wall : first_idle;
				if (tc->c.wall > last_idle && tc->last >= 0) {
					last_idle = tc->c.wall;
					last_stage = tc->last;
				}
				idle -= tc->c.wall;
				idlers++;
			}
		}
	}
	if (st) {
		/* After the first thread ran out of work, the others ran alone. */
		gk_shard_tokclock_start(&b->queue);
		double end = b->queue.wall, tail = end - first_idle;
		st->wall[GK_TOKST_WAIT] += idle + idlers * end;
		st->serial[last_stage] += tail;
		st->parallel += first_idle - t0;
		st->batches++;
		st->docs += n;
	}
	if (wrc < 0 || b->fail_at != SIZE_MAX) {
		*err = wrc < 0 ? werr : b->fail;
		b->failed = 1;
		return -1;
	}
	batch t = b->done;
	b->done = *in;
	*in = t;
	return 0;
}

static int add(sh_tokb *b, const char *key, const char *path, uint64_t want,
	       unsigned char *text, size_t len, gk_err *err)
{
	batch *t = &b->fill;
	char *k = strdup(key);
	if (!k || GK_GROW(t->d, t->cap, t->n + 1, "tokenize", err) < 0) {
		free(k);
		free(text);
		return k ? -1 : gk_err_sys(err, ENOMEM, "tokenize");
	}
	t->d[t->n++] = (doc){.key = k, .path = path, .want = want, .text = text, .len = len};
	t->bytes += want;
	if (t->bytes >= (uint64_t)b->jobs * BATCH_BYTES || t->n >= (size_t)b->jobs * b->batch_docs)
		return flush(b, err);
	return 0;
}

int sh_tokb_add(sh_tokb *b, const char *key, unsigned char *text, size_t len,
		gk_err *err)
{
	return add(b, key, NULL, len, text, len, err);
}

int sh_tokb_add_file(sh_tokb *b, const char *key, const char *path, uint64_t size,
		     gk_err *err)
{
	return add(b, key, path, size, NULL, 0, err);
}

int sh_tokb_finish(sh_tokb *b, gk_err *err)
{
	if (b->failed)
		return gk_errf(err, "tokenize: an earlier error stopped it");
	if (b->fill.n && flush(b, err) < 0)
		return -1;
	gk_shard_tokstats_add(b->tz->stats, GK_TOKST_QUEUE, &b->queue, 1);
	int rc = write_batch(b, &b->done, err);
	/* the last batch is written alone */
	gk_shard_tokstats_add(b->tz->stats, GK_TOKST_WRITE, &b->queue, 1);
	if (rc < 0) {
		b->failed = 1;
		return -1;
	}
	return 0;
}

int sh_tokb_error(sh_tokb *b, gk_err *err)
{
	gk_err e;
	if (b->failed || sh_tokb_finish(b, &e) == 0)
		return 0;
	*err = e;
	return 1;
}
