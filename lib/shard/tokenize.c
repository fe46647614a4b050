/*
 * tokenize.c - text documents in, token ids out (data-pack --tokenize):
 * every sample's one text member becomes KEY.npy, the ids of its bytes
 * under a GPT-2 byte-level BPE (lib/tok) and the end-of-text id.
 *
 * The sources (files, a tar stream) hand documents to a batch; a full
 * batch is encoded by the threads, one document per task (the costly
 * part), each thread with its own encoder, and the .npy members are then
 * added to the writer in input order. The writer sees the same samples
 * in the same order whatever the thread count, so the shards are the same
 * bytes: threads change only when the work is done.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "shard/internal.h"

/*
 * A batch is flushed past this many bytes of text per thread, or this
 * many documents per thread: enough work to share out (documents vary in
 * length), little enough memory.
 */
enum { BATCH_BYTES = 4 << 20, BATCH_DOCS = 512 };

typedef struct doc {
	char *key;
	unsigned char *text;  /* len bytes, owned */
	size_t len;
	unsigned char *npy;   /* the member, made by a thread */
	size_t size;
	uint64_t ids;         /* in it, eot included */
	int failed;           /* out of memory */
} doc;

struct sh_tokb {
	gk_shard_writer *w;
	gk_shard_tokenize *tz;
	gk_progress *progress;
	int jobs, itemsize;
	gk_tok_enc **enc;     /* one per thread */
	gk_tok_ids *ids;      /* one per thread, reused */
	doc *d;
	size_t n, cap, bytes; /* documents and text bytes held */
	uint64_t read;        /* text bytes written, for progress */
};

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
	b->enc = calloc((size_t)b->jobs, sizeof(*b->enc));
	b->ids = calloc((size_t)b->jobs, sizeof(*b->ids));
	if (!b->enc || !b->ids)
		goto nomem;
	for (int i = 0; i < b->jobs; i++)
		if (!(b->enc[i] = gk_tok_enc_new(tz->tok)))
			goto nomem;
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

void sh_tokb_free(sh_tokb *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++)
		doc_free(&b->d[i]);
	free(b->d);
	for (int i = 0; b->enc && i < b->jobs; i++)
		gk_tok_enc_free(b->enc[i]);
	for (int i = 0; b->ids && i < b->jobs; i++)
		free(b->ids[i].v);
	free(b->enc);
	free(b->ids);
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

/* Document i: encode, append eot, make its .npy bytes (on any thread). */
static void encode_doc(sh_tokb *b, doc *d, int t)
{
	gk_tok_ids *ids = &b->ids[t];
	gk_err e;
	ids->n = 0;
	if (gk_tok_encode(b->enc[t], d->text, d->len, 0, ids, &e) < 0 ||
	    GK_GROW(ids->v, ids->cap, ids->n + 1, "tokenize", &e) < 0) {
		d->failed = 1;
		return;
	}
	ids->v[ids->n++] = (uint32_t)b->tz->eot;
	unsigned char hdr[GK_SHARD_NPY_HEADER_MAX];
	size_t h = gk_shard_npy_header(hdr, b->itemsize, ids->n);
	d->size = h + ids->n * (size_t)b->itemsize;
	if (!(d->npy = malloc(d->size))) {
		d->failed = 1;
		return;
	}
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
}

static int flush(sh_tokb *b, gk_err *err)
{
	size_t n = b->n;
	int rc = 0;
#pragma omp parallel for num_threads(b->jobs) schedule(dynamic) if (b->jobs > 1 && n > 1)
	for (size_t i = 0; i < n; i++) {
		int t = 0;
#ifdef _OPENMP
		t = omp_get_thread_num();
#endif
		encode_doc(b, &b->d[i], t);
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		doc *d = &b->d[i];
		if (d->failed) {
			rc = gk_err_sys(err, ENOMEM, "tokenize '%s'", d->key);
			break;
		}
		gk_shard_member m = {.ext = "npy", .data = d->npy, .size = d->size};
		rc = gk_shard_writer_add(b->w, d->key, 1, &m, err);
		b->tz->tokens += d->ids;
		b->read += d->len;
		free(d->npy);
		d->npy = NULL;
		if (b->progress)
			gk_progress_update(b->progress, b->read);
	}
	for (size_t i = 0; i < n; i++)
		doc_free(&b->d[i]);
	b->n = b->bytes = 0;
	return rc;
}

int sh_tokb_add(sh_tokb *b, const char *key, unsigned char *text, size_t len,
		gk_err *err)
{
	char *k = strdup(key);
	if (!k || GK_GROW(b->d, b->cap, b->n + 1, "tokenize", err) < 0) {
		free(k);
		free(text);
		return k ? -1 : gk_err_sys(err, ENOMEM, "tokenize");
	}
	b->d[b->n++] = (doc){.key = k, .text = text, .len = len};
	b->bytes += len;
	if (b->bytes >= (size_t)b->jobs * BATCH_BYTES || b->n >= (size_t)b->jobs * BATCH_DOCS)
		return flush(b, err);
	return 0;
}

int sh_tokb_finish(sh_tokb *b, gk_err *err)
{
	return b->n ? flush(b, err) : 0;
}
