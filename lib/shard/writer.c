/*
 * writer.c - samples in, deterministic tar shards (+ LZ4 frames, indexes,
 * manifest entries) out.
 *
 * One libarchive encoder (pax_restricted, unblocked) turns every sample
 * into its tar bytes. A sample's encoding does not depend on where it
 * lands, so the writer can decide the rollover once it knows the encoded
 * length (and so never exceed --max-size unless one sample alone does),
 * and an LZ4 shard is just each sample's bytes as one frame. The
 * end-of-archive blocks are captured once from an empty libarchive
 * archive, so every byte of a shard comes from libarchive.
 *
 * Samples held in memory (gk_shard_writer_add) are encoded into a buffer
 * and written in batches, compressed in parallel. Streamed samples
 * (gk_shard_writer_add_stream) are encoded twice: first into a counting
 * sink with no data (libarchive pads the entry with zeros itself), which
 * gives the exact length, then straight into the shard file (through a
 * streaming LZ4 frame) with the data read in chunks, so a member of any
 * size costs one chunk of memory.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <lz4frame.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/internal.h"

/* Where the encoder's output goes. */
enum { SINK_MEM, SINK_COUNT, SINK_SHARD };
enum { CHUNK = 1 << 20 };

typedef struct pending {
	size_t start, len;      /* in w->enc */
	size_t first, n;        /* index members, in w->idx.m */
} pending;

struct gk_shard_writer {
	gk_shard_write_opts o;
	struct archive *enc;    /* the encoder, writing into buf */
	sh_buf buf;             /* encoded samples not yet written */
	sh_buf trailer;         /* the end-of-archive blocks */
	pending *pend;
	size_t npend, pendcap;
	sh_set keys;            /* keys in the current shard */
	unsigned number;        /* of the current shard */
	int single;             /* the pattern names one file */
	int open;               /* a shard is being written */
	gk_atomic *out;         /* its atomic file (NULL when writing to fd) */
	int fd;                 /* where its bytes go */
	char path[4096];
	gk_hash *hash;
	uint64_t bytes, ubytes, count, bytes_in;
	gk_shard_index idx;     /* of the current shard */
	size_t idxcap, mcap;
	gk_shard_manifest man;
	gk_shard_outputs own, *outs; /* files committed (o.outputs or own) */
	gk_err *err;            /* for the write callback */
	int failed;
	locale_t utf8;           /* C.UTF-8 for libarchive's name conversion */
	int sink;               /* SINK_*: where the encoder writes */
	uint64_t sunk;          /* bytes the encoder produced for this sample */
	gk_err sink_err;        /* why SINK_SHARD failed */
	int sink_failed;
	LZ4F_cctx *cctx;        /* streaming LZ4 frame of a streamed sample */
	unsigned char *chunk;   /* CHUNK bytes: data read for the encoder */
	unsigned char *zbuf;    /* compressed output of one chunk */
	size_t zcap;
};

static la_ssize_t buf_write(struct archive *a, void *cookie, const void *p,
			    size_t n)
{
	sh_buf *b = cookie;
	if (sh_buf_append(b, p, n) < 0) {
		archive_set_error(a, ENOMEM, "out of memory");
		return -1;
	}
	return (la_ssize_t)n;
}

static int shard_put(gk_shard_writer *w, const void *p, size_t n, gk_err *err);
static int lz4_put(gk_shard_writer *w, const void *p, size_t n, gk_err *err);

/* The sample encoder's output: memory, a count, or the shard itself. */
static la_ssize_t sink_write(struct archive *a, void *cookie, const void *p,
			     size_t n)
{
	gk_shard_writer *w = cookie;
	int rc = 0;
	if (w->sink == SINK_MEM)
		rc = sh_buf_append(&w->buf, p, n) < 0
			? gk_err_sys(&w->sink_err, ENOMEM, "encode") : 0;
	else if (w->sink == SINK_SHARD)
		rc = w->o.lz4 ? lz4_put(w, p, n, &w->sink_err)
			      : shard_put(w, p, n, &w->sink_err);
	if (rc < 0) {
		w->sink_failed = 1;
		archive_set_error(a, EIO, "%s", w->sink_err.msg);
		return -1;
	}
	w->sunk += n;
	return (la_ssize_t)n;
}

static struct archive *encoder(void *cookie, archive_write_callback *cb,
			       gk_err *err)
{
	struct archive *a = archive_write_new();
	if (!a) {
		gk_errf(err, "tar encoder: out of memory");
		return NULL;
	}
	/*
	 * Unblocked: no padding of the last block to 10240 bytes, the same
	 * bytes on a pipe as in a file (GNU tar and Python's tarfile read
	 * archives ending right after the two zero blocks).
	 */
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open(a, cookie, NULL, cb, NULL) != ARCHIVE_OK) {
		gk_errf(err, "tar encoder: %s", archive_error_string(a));
		archive_write_free(a);
		return NULL;
	}
	return a;
}

int gk_shard_writer_open(gk_shard_writer **out, const gk_shard_write_opts *o,
			 gk_err *err)
{
	gk_shard_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return gk_err_sys(err, ENOMEM, "shard writer");
	w->o = *o;
	w->fd = -1;
	w->outs = o->outputs ? o->outputs : &w->own;
	if (!w->o.lz4 && gk_shard_is_lz4_name(o->pattern))
		w->o.lz4 = 1;
	if (w->o.jobs < 1)
		w->o.jobs = 1;
	w->number = o->first;
	char probe[4096];
	int convs = gk_shard_format_name(o->pattern, o->first, probe, sizeof(probe), err);
	if (convs < 0) {
		free(w);
		return -1;
	}
	w->single = convs == 0;
	/* The trailer: what libarchive writes to close an empty archive. */
	struct archive *t = encoder(&w->trailer, buf_write, err);
	if (!t || archive_write_close(t) != ARCHIVE_OK) {
		if (t)
			archive_write_free(t);
		free(w);
		return -1;
	}
	archive_write_free(t);
	w->enc = encoder(w, sink_write, err);
	if (!w->enc) {
		free(w->trailer.p);
		free(w);
		return -1;
	}
	w->utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	*out = w;
	return 0;
}

uint64_t gk_shard_writer_bytes_in(const gk_shard_writer *w)
{
	return w->bytes_in;
}

/* ---- shard files ----------------------------------------------------------- */

static int shard_begin(gk_shard_writer *w, gk_err *err)
{
	if (w->single && w->number != w->o.first)
		return gk_errf(err, "pattern '%s': the data needs more than one shard; put %%06d in the name",
			       w->o.pattern);
	if (gk_shard_format_name(w->o.pattern, w->number, w->path, sizeof(w->path), err) < 0)
		return -1;
	const char *slash = strrchr(w->path, '/');
	if (slash && slash != w->path) {
		char dir[4096];
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - w->path), w->path);
		if (gk_mkdir_p(dir, err) < 0)
			return -1;
	}
	if (!w->hash && !(w->hash = gk_hash_new()))
		return gk_err_sys(err, ENOMEM, "create '%s'", w->path);
	if (strcmp(w->path, "-") == 0) {
		/* A stream: the caller's descriptor, no atomic file, no index. */
		w->fd = w->o.fd > 0 ? w->o.fd : STDOUT_FILENO;
	} else {
		if (gk_atomic_open(&w->out, w->path, 0644, err) < 0)
			return -1;
		w->fd = gk_atomic_fd(w->out);
	}
	w->open = 1;
	w->bytes = w->ubytes = w->count = 0;
	w->idx.nsamples = w->idx.nmembers = 0;
	sh_set_clear(&w->keys);
	return 0;
}

static int shard_put(gk_shard_writer *w, const void *p, size_t n, gk_err *err)
{
	if (gk_write_full(w->fd, p, n) < 0)
		return gk_err_sys(err, errno, "write '%s'", w->path);
	gk_hash_update(w->hash, p, n);
	w->bytes += n;
	return 0;
}

/* LZ4 frame preferences: content size and checksum, so `lz4 -t` checks. */
static LZ4F_preferences_t lz4_prefs(const gk_shard_writer *w, size_t n)
{
	LZ4F_preferences_t p;
	memset(&p, 0, sizeof(p));
	p.frameInfo.blockSizeID = LZ4F_max4MB;
	p.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
	p.frameInfo.contentSize = n;
	p.compressionLevel = w->o.lz4_level;
	return p;
}

/* Compress the pending samples (in parallel) and write them in order. */
static int flush_lz4(gk_shard_writer *w, gk_err *err)
{
	size_t n = w->npend;
	void **out = calloc(n ? n : 1, sizeof(void *));
	size_t *olen = calloc(n ? n : 1, sizeof(size_t));
	int bad = 0;
	if (!out || !olen) {
		free(out);
		free(olen);
		return gk_err_sys(err, ENOMEM, "compress '%s'", w->path);
	}
#pragma omp parallel for num_threads(w->o.jobs) schedule(dynamic) if (w->o.jobs > 1 && n > 1)
	for (size_t i = 0; i < n; i++) {
		const pending *p = &w->pend[i];
		LZ4F_preferences_t pr = lz4_prefs(w, p->len);
		size_t cap = LZ4F_compressFrameBound(p->len, &pr);
		out[i] = malloc(cap);
		if (!out[i]) {
			bad = 1;
			continue;
		}
		size_t r = LZ4F_compressFrame(out[i], cap, w->buf.p + p->start, p->len, &pr);
		if (LZ4F_isError(r))
			bad = 1;
		else
			olen[i] = r;
	}
	int rc = 0;
	if (bad)
		rc = gk_errf(err, "compress '%s': LZ4 frame failed", w->path);
	for (size_t i = 0; i < n && rc == 0; i++) {
		w->idx.s[w->idx.nsamples - n + i].frame = w->bytes;
		rc = shard_put(w, out[i], olen[i], err);
	}
	for (size_t i = 0; i < n; i++)
		free(out[i]);
	free(out);
	free(olen);
	return rc;
}

/* Write the pending samples of the current shard. */
static int flush(gk_shard_writer *w, gk_err *err)
{
	int rc = 0;
	if (w->npend == 0)
		return 0;
	if (w->o.lz4) {
		rc = flush_lz4(w, err);
	} else {
		const pending *last = &w->pend[w->npend - 1];
		rc = shard_put(w, w->buf.p, last->start + last->len, err);
	}
	w->buf.len = 0;
	w->npend = 0;
	return rc;
}

/* A streamed sample's LZ4 frame: begin (its length is known), chunks, end. */
static int lz4_begin(gk_shard_writer *w, uint64_t len, gk_err *err)
{
	LZ4F_preferences_t pr = lz4_prefs(w, (size_t)len);
	if (!w->cctx && LZ4F_isError(LZ4F_createCompressionContext(&w->cctx, LZ4F_VERSION)))
		return gk_err_sys(err, ENOMEM, "compress '%s'", w->path);
	size_t cap = LZ4F_compressBound(CHUNK, &pr);
	if (cap < LZ4F_HEADER_SIZE_MAX)
		cap = LZ4F_HEADER_SIZE_MAX;
	if (GK_GROW(w->zbuf, w->zcap, cap, "compress", err) < 0)
		return -1;
	size_t r = LZ4F_compressBegin(w->cctx, w->zbuf, w->zcap, &pr);
	if (LZ4F_isError(r))
		return gk_errf(err, "compress '%s': %s", w->path, LZ4F_getErrorName(r));
	return shard_put(w, w->zbuf, r, err);
}

static int lz4_put(gk_shard_writer *w, const void *p, size_t n, gk_err *err)
{
	const unsigned char *c = p;
	while (n > 0) {
		size_t k = n < CHUNK ? n : CHUNK;
		size_t r = LZ4F_compressUpdate(w->cctx, w->zbuf, w->zcap, c, k, NULL);
		if (LZ4F_isError(r))
			return gk_errf(err, "compress '%s': %s", w->path, LZ4F_getErrorName(r));
		if (r && shard_put(w, w->zbuf, r, err) < 0)
			return -1;
		c += k;
		n -= k;
	}
	return 0;
}

static int lz4_end(gk_shard_writer *w, gk_err *err)
{
	size_t r = LZ4F_compressEnd(w->cctx, w->zbuf, w->zcap, NULL);
	if (LZ4F_isError(r))
		return gk_errf(err, "compress '%s': %s", w->path, LZ4F_getErrorName(r));
	return shard_put(w, w->zbuf, r, err);
}

/*
 * Commit the shard, then its index. An index already there under the
 * index's name belongs to an older shard of this name: it goes first, so
 * no reader ever finds the new shard beside the old index. And since a
 * second writer may rename its shard over ours before our index lands,
 * the index is kept only if the shard under the name is still ours.
 */
static int commit(gk_shard_writer *w, uint64_t h, gk_err *err)
{
	gk_atomic *a = w->out;
	struct stat mine;
	char *ip = gk_shard_index_path(w->path), shard[4200], index[4200];
	w->out = NULL;
	if (!ip || fstat(gk_atomic_fd(a), &mine) < 0) {
		gk_err_sys(err, ip ? errno : ENOMEM, "create '%s'", w->path);
		goto fail;
	}
	/*
	 * Both names are replaced below (the index removed even with index
	 * off): neither may be a file this run wrote, or a pattern such as
	 * "x%d/../s.tar" keeps only its last shard.
	 */
	snprintf(shard, sizeof(shard), "shard %u '%s'", w->number, w->path);
	snprintf(index, sizeof(index), "index '%s' of shard %u", ip, w->number);
	if (gk_shard_outputs_check(w->outs, w->path, shard, err) < 0 ||
	    gk_shard_outputs_check(w->outs, ip, index, err) < 0)
		goto fail;
	if (unlink(ip) < 0 && errno != ENOENT) {
		gk_err_sys(err, errno, "remove the old index '%s'", ip);
		goto fail;
	}
	if (gk_atomic_commit(a, err) < 0) {
		a = NULL;
		goto fail;
	}
	a = NULL;
	if (gk_shard_outputs_add(w->outs, w->path, shard, err) < 0)
		goto fail;
	if (w->o.index) {
		struct stat now;
		w->idx.lz4 = w->o.lz4;
		w->idx.bound = 1;
		w->idx.shard_bytes = w->bytes;
		w->idx.shard_xxh3 = h;
		if (gk_shard_index_write(ip, &w->idx, err) < 0)
			goto fail;
		if (stat(w->path, &now) < 0 || now.st_dev != mine.st_dev ||
		    now.st_ino != mine.st_ino)
			unlink(ip);
		else if (gk_shard_outputs_add(w->outs, ip, index, err) < 0)
			goto fail;
	}
	free(ip);
	return 0;
fail:
	if (a)
		gk_atomic_abort(a);
	free(ip);
	return -1;
}

static int shard_end(gk_shard_writer *w, gk_err *err)
{
	if (flush(w, err) < 0)
		return -1;
	w->idx.end = w->ubytes;
	w->idx.frame_end = w->bytes;
	if (w->o.lz4) {
		LZ4F_preferences_t pr = lz4_prefs(w, w->trailer.len);
		unsigned char frame[4096];
		size_t r = LZ4F_compressFrame(frame, sizeof(frame), w->trailer.p,
					      w->trailer.len, &pr);
		if (LZ4F_isError(r))
			return gk_errf(err, "compress '%s': %s", w->path, LZ4F_getErrorName(r));
		if (shard_put(w, frame, r, err) < 0)
			return -1;
	} else if (shard_put(w, w->trailer.p, w->trailer.len, err) < 0) {
		return -1;
	}
	uint64_t h = gk_hash_digest(w->hash);
	gk_hash_free(w->hash);
	w->hash = NULL;
	w->open = 0;
	if (w->out && commit(w, h, err) < 0)
		return -1;
	if (gk_shard_manifest_add(&w->man, w->path, w->count, w->bytes, h, err) < 0)
		return -1;
	w->number++;
	return 0;
}

/*
 * Start the disk writing what the shard has so far (Linux's
 * sync_file_range, without waiting for it), so that its fsync at the end
 * waits for less. For a caller that writes beside other work (tokenizing:
 * between batches, while the threads encode); an error here is fsync's
 * to report.
 */
void sh_writer_writeback(gk_shard_writer *w)
{
#ifdef SYNC_FILE_RANGE_WRITE
	if (w->open && w->out)
		(void)sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
	(void)w;
#endif
}

/* ---- samples --------------------------------------------------------------- */

static int check_sample(const char *key, size_t n, const gk_shard_member *m,
			char *name, size_t len, gk_err *err)
{
	if (n == 0)
		return gk_errf(err, "sample '%s': no members", key);
	for (size_t i = 0; i < n; i++) {
		int r = snprintf(name, len, "%s.%s", key, m[i].ext);
		if (r < 0 || (size_t)r >= len)
			return gk_errf(err, "name '%s.%s': too long", key, m[i].ext);
		if (gk_shard_check_name(name, err) < 0)
			return -1;
		if ((size_t)gk_shard_key_len(name) != strlen(key))
			return gk_errf(err, "name '%s': the key has a dot", name);
		for (size_t j = 0; j < i; j++)
			if (strcasecmp(m[i].ext, m[j].ext) == 0)
				return gk_errf(err, strcmp(m[i].ext, m[j].ext) == 0
						? "sample '%s': extension '%s' given twice"
						: "sample '%s': extensions '%s' and '%s' differ only in case (webdataset lowercases them)",
					       key, m[j].ext, m[i].ext);
	}
	return 0;
}

static int grow_index(gk_shard_writer *w, size_t members, gk_err *err)
{
	gk_shard_index *x = &w->idx;
	size_t old = w->mcap;
	if (GK_GROW(x->s, w->idxcap, x->nsamples + 1, "index", err) < 0 ||
	    GK_GROW(x->m, w->mcap, x->nmembers + members, "index", err) < 0)
		return -1;
	/* Member names are reused from shard to shard: new slots start empty. */
	memset(x->m + old, 0, (w->mcap - old) * sizeof(*x->m));
	return 0;
}

/*
 * Encode one sample into the current sink; doff gets each member's data
 * offset from the sample's start. m is in the writer's order and from[i]
 * is member i's number in the caller's array (for read). The data is
 * m[i].data, or read's chunks, or in SINK_COUNT none at all: libarchive
 * pads an entry to its size with zeros, which only the count sees.
 */
static int encode(gk_shard_writer *w, const char *key, size_t n,
		  const gk_shard_member *m, const size_t *from,
		  gk_shard_read_fn read, void *ctx, uint64_t *doff, gk_err *err)
{
	struct archive_entry *e = archive_entry_new();
	char name[8192];
	int own = 0; /* err already says why (a read failed) */
	if (!e)
		return gk_err_sys(err, ENOMEM, "encode '%s'", key);
	w->sunk = 0;
	w->sink_failed = 0;
	/*
	 * Names are UTF-8 (gk_shard_check_name). libarchive converts them
	 * through the current locale and fails on non-ASCII under "C", so
	 * this thread encodes in C.UTF-8 without touching the process locale.
	 */
	locale_t old = (locale_t)0;
	if (w->utf8)
		old = uselocale(w->utf8);
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s.%s", key, m[i].ext);
		archive_entry_clear(e);
		archive_entry_copy_pathname(e, name);
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0444);
		archive_entry_set_size(e, (la_int64_t)m[i].size);
		archive_entry_set_mtime(e, w->o.mtime, 0);
		archive_entry_set_uid(e, 0);
		archive_entry_set_gid(e, 0);
		if (archive_write_header(w->enc, e) != ARCHIVE_OK)
			goto fail;
		doff[i] = w->sunk;
		for (uint64_t off = 0; w->sink != SINK_COUNT && off < m[i].size;) {
			uint64_t left = m[i].size - off;
			size_t k = left > CHUNK ? CHUNK : (size_t)left;
			const char *p = (const char *)m[i].data + off;
			if (read) {
				if (read(ctx, from[i], off, w->chunk, k, err) < 0) {
					own = 1;
					goto fail;
				}
				p = (const char *)w->chunk;
			}
			while (k > 0) {
				la_ssize_t r = archive_write_data(w->enc, p, k);
				if (r <= 0)
					goto fail;
				p += r;
				k -= (size_t)r;
				off += (uint64_t)r;
			}
		}
		if (archive_write_finish_entry(w->enc) != ARCHIVE_OK)
			goto fail;
	}
	archive_entry_free(e);
	if (old)
		uselocale(old);
	return 0;
fail:
	if (w->sink_failed)
		*err = w->sink_err;
	else if (!own)
		gk_errf(err, "encode '%s': %s", name, archive_error_string(w->enc));
	archive_entry_free(e);
	if (old)
		uselocale(old);
	return -1;
}

static int need_roll(const gk_shard_writer *w, uint64_t len)
{
	if (!w->open || w->count == 0)
		return 0;
	if (w->o.max_count && w->count >= w->o.max_count)
		return 1;
	return w->o.max_size &&
	       w->ubytes + len + w->trailer.len > w->o.max_size;
}

static const gk_shard_member *sort_members;

static int by_ext(const void *a, const void *b)
{
	return strcmp(sort_members[*(const size_t *)a].ext,
		      sort_members[*(const size_t *)b].ext);
}

static int add(gk_shard_writer *w, const char *key, size_t n,
	       const gk_shard_member *m, gk_shard_read_fn read, void *ctx,
	       gk_err *err)
{
	char name[8192];
	gk_shard_member *v = NULL;
	size_t *from = NULL;
	uint64_t *doff = NULL, len, frame = 0;
	int rc = -1;

	if (w->failed)
		return gk_errf(err, "shard writer: an earlier error stopped it");
	if (check_sample(key, n, m, name, sizeof(name), err) < 0)
		return -1;
	v = malloc(n * sizeof(*v));
	from = malloc(n * sizeof(*from));
	doff = malloc(n * sizeof(*doff));
	if (!v || !from || !doff || (read && !w->chunk && !(w->chunk = malloc(CHUNK)))) {
		gk_err_sys(err, ENOMEM, "sample '%s'", key);
		goto out;
	}
	/* Extensions are distinct (check_sample): the order is total. */
	for (size_t i = 0; i < n; i++)
		from[i] = i;
	sort_members = m;
	qsort(from, n, sizeof(*from), by_ext);
	for (size_t i = 0; i < n; i++)
		v[i] = m[from[i]];

	size_t start = w->buf.len;
	if (read) {
		w->sink = SINK_COUNT;
		rc = encode(w, key, n, v, from, NULL, NULL, doff, err);
		w->sink = SINK_MEM;
		rc = rc < 0 ? -1 : 0;
		if (rc < 0)
			goto fail;
		rc = -1;
		len = w->sunk;
	} else {
		if (encode(w, key, n, v, from, NULL, NULL, doff, err) < 0)
			goto fail;
		len = w->buf.len - start;
	}
	if (need_roll(w, len)) {
		if (w->single) {
			gk_errf(err, "pattern '%s': the data needs more than one shard; put %%06d in the name",
				w->o.pattern);
			goto fail;
		}
		/* Write what came before this sample, then move it to the front. */
		w->buf.len = start;
		if (shard_end(w, err) < 0)
			goto fail;
		if (!read)
			memmove(w->buf.p, w->buf.p + start, (size_t)len);
		w->buf.len = read ? 0 : (size_t)len;
		start = 0;
	}
	if (!w->open && shard_begin(w, err) < 0)
		goto fail;
	int added = sh_set_add(&w->keys, key, strlen(key));
	if (added <= 0) {
		if (added < 0)
			gk_err_sys(err, ENOMEM, "sample '%s'", key);
		else
			gk_errf(err, "sample '%s': key given twice in shard '%s'", key, w->path);
		goto fail;
	}
	if (read) {
		/* The samples waiting in memory go first, then this one, streamed. */
		if (flush(w, err) < 0)
			goto fail;
		frame = w->bytes;
		if (w->o.lz4 && lz4_begin(w, len, err) < 0)
			goto fail;
		w->sink = SINK_SHARD;
		int r = encode(w, key, n, v, from, read, ctx, doff, err);
		w->sink = SINK_MEM;
		if (r < 0 || (w->o.lz4 && lz4_end(w, err) < 0))
			goto fail;
		if (w->sunk != len) {
			gk_errf(err, "sample '%s': encoded to %llu bytes, %llu expected", key,
				(unsigned long long)w->sunk, (unsigned long long)len);
			goto fail;
		}
	}
	if (grow_index(w, n, err) < 0)
		goto fail;
	gk_shard_index_sample *s = &w->idx.s[w->idx.nsamples++];
	s->header = s->frame = w->ubytes;
	if (read && w->o.lz4)
		s->frame = frame;
	s->first = w->idx.nmembers;
	s->n = n;
	for (size_t i = 0; i < n; i++) {
		gk_shard_index_member *im = &w->idx.m[w->idx.nmembers++];
		snprintf(name, sizeof(name), "%s.%s", key, v[i].ext);
		free(im->name);
		if (!(im->name = strdup(name))) {
			gk_err_sys(err, ENOMEM, "sample '%s'", key);
			goto fail;
		}
		im->offset = w->ubytes + doff[i];
		im->size = v[i].size;
		w->bytes_in += v[i].size;
	}
	if (!read) {
		if (GK_GROW(w->pend, w->pendcap, w->npend + 1, "pending samples", err) < 0)
			goto fail;
		w->pend[w->npend++] = (pending){start, (size_t)len, s->first, n};
	}
	w->ubytes += len;
	w->count++;
	/* Batches big enough to keep the compression threads busy. */
	size_t batch = w->o.lz4 ? (size_t)w->o.jobs * (4u << 20) : 4u << 20;
	if (w->buf.len >= batch && flush(w, err) < 0)
		goto fail;
	rc = 0;
	goto out;
fail:
	w->failed = 1;
out:
	free(v);
	free(from);
	free(doff);
	return rc;
}

int gk_shard_writer_add(gk_shard_writer *w, const char *key, size_t n,
			const gk_shard_member *m, gk_err *err)
{
	return add(w, key, n, m, NULL, NULL, err);
}

int gk_shard_writer_add_stream(gk_shard_writer *w, const char *key, size_t n,
			       const gk_shard_member *m, gk_shard_read_fn read,
			       void *ctx, gk_err *err)
{
	if (!read)
		return gk_errf(err, "sample '%s': no read function", key);
	return add(w, key, n, m, read, ctx, err);
}

static void writer_free(gk_shard_writer *w)
{
	archive_write_free(w->enc);
	free(w->buf.p);
	free(w->trailer.p);
	free(w->pend);
	sh_set_clear(&w->keys);
	for (size_t i = 0; i < w->mcap; i++)
		free(w->idx.m[i].name);
	free(w->idx.m);
	free(w->idx.s);
	gk_hash_free(w->hash);
	gk_shard_manifest_free(&w->man);
	gk_shard_outputs_free(&w->own);
	LZ4F_freeCompressionContext(w->cctx);
	free(w->chunk);
	free(w->zbuf);
	if (w->utf8)
		freelocale(w->utf8);
	free(w);
}

int gk_shard_writer_close(gk_shard_writer *w, gk_shard_manifest *man,
			  gk_err *err)
{
	int rc = 0;
	if (w->failed)
		rc = gk_errf(err, "shard writer: an earlier error stopped it");
	else if (!w->open)
		rc = gk_errf(err, "pattern '%s': no samples to write", w->o.pattern);
	else
		rc = shard_end(w, err);
	if (rc < 0) {
		gk_shard_writer_abort(w);
		return -1;
	}
	if (man) {
		*man = w->man;
		memset(&w->man, 0, sizeof(w->man));
	}
	writer_free(w);
	return 0;
}

void gk_shard_writer_abort(gk_shard_writer *w)
{
	if (!w)
		return;
	if (w->out)
		gk_atomic_abort(w->out);
	writer_free(w);
}
