/*
 * get.c - one sample or member of a shard by key, through the index.
 *
 * Bytes are copied in chunks: a plain shard by pread at the indexed
 * offsets, an LZ4 shard by decoding the sample's frame from its start
 * (forward only; a member earlier in the frame restarts the decoder).
 */
#include <errno.h>
#include <fcntl.h>
#include <lz4frame.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard/internal.h"

enum { CHUNK = 1 << 20, IN = 64 << 10 };

/* The sample's bytes, for gk_shard_writer_add_stream and for -g KEY.EXT. */
typedef struct source {
	int fd;
	const char *path;
	const gk_shard_index *idx;
	size_t i;
	const gk_shard_member *m;
	/* LZ4: the decoder's position in the frame */
	LZ4F_dctx *dc;
	uint64_t cpos, cend; /* compressed, file offsets */
	uint64_t upos;       /* uncompressed, tar stream offset */
	unsigned char in[IN], junk[IN];
	size_t in_len, in_off;
} source;

static int damaged(source *s, gk_err *err)
{
	return gk_errf(err, "shard '%s': sample %zu: LZ4 frame at byte %llu is damaged or truncated",
		       s->path, s->i, (unsigned long long)s->idx->s[s->i].frame);
}

/* Decode up to n bytes into dst; 0 with *got set, or -1. */
static int lz4_step(source *s, void *dst, size_t n, size_t *got, gk_err *err)
{
	if (s->in_off == s->in_len) {
		if (s->cpos >= s->cend)
			return damaged(s, err);
		size_t k = s->cend - s->cpos < IN ? (size_t)(s->cend - s->cpos) : IN;
		ssize_t r = gk_pread_full(s->fd, s->in, k, (off_t)s->cpos);
		if (r < 0)
			return gk_err_sys(err, errno, "read '%s'", s->path);
		if ((size_t)r != k)
			return damaged(s, err);
		s->in_len = k;
		s->in_off = 0;
		s->cpos += k;
	}
	size_t isz = s->in_len - s->in_off, osz = n;
	size_t r = LZ4F_decompress(s->dc, dst, &osz, s->in + s->in_off, &isz, NULL);
	if (LZ4F_isError(r) || (r == 0 && osz < n && isz == 0))
		return damaged(s, err);
	s->in_off += isz;
	s->upos += osz;
	*got = osz;
	return 0;
}

static int lz4_read(source *s, uint64_t at, void *buf, size_t n, gk_err *err)
{
	const gk_shard_index_sample *is = &s->idx->s[s->i];
	if (!s->dc || at < s->upos) {
		LZ4F_freeDecompressionContext(s->dc);
		s->dc = NULL;
		if (LZ4F_isError(LZ4F_createDecompressionContext(&s->dc, LZ4F_VERSION)))
			return gk_err_sys(err, ENOMEM, "read '%s'", s->path);
		s->cpos = is->frame;
		s->cend = s->i + 1 < s->idx->nsamples ? s->idx->s[s->i + 1].frame
						      : s->idx->frame_end;
		s->upos = is->header;
		s->in_len = s->in_off = 0;
	}
	size_t got;
	while (s->upos < at) {
		uint64_t gap = at - s->upos;
		if (lz4_step(s, s->junk, gap < IN ? (size_t)gap : IN, &got, err) < 0)
			return -1;
	}
	for (size_t done = 0; done < n; done += got)
		if (lz4_step(s, (char *)buf + done, n - done, &got, err) < 0)
			return -1;
	return 0;
}

static int source_read(void *ctx, size_t j, uint64_t off, void *buf, size_t n,
		       gk_err *err)
{
	source *s = ctx;
	uint64_t at = s->m[j].offset + off;
	if (s->idx->lz4)
		return lz4_read(s, at, buf, n, err);
	ssize_t r = gk_pread_full(s->fd, buf, n, (off_t)at);
	if (r < 0)
		return gk_err_sys(err, errno, "read '%s'", s->path);
	if ((size_t)r != n)
		return gk_errf(err, "shard '%s': truncated (sample %zu needs byte %llu)",
			       s->path, s->i, (unsigned long long)(at + n));
	return 0;
}

int gk_shard_get(const char *shard, const char *what, int64_t mtime, int out,
		 gk_err *err)
{
	gk_shard_index idx;
	char *ip = gk_shard_index_path(shard);
	int fd = -1, rc = -1;
	gk_shard_member *m = NULL;
	source *src = NULL;
	void *chunk = NULL;

	memset(&idx, 0, sizeof(idx));
	if (!ip)
		return gk_err_sys(err, ENOMEM, "get '%s'", what);
	if ((fd = open(shard, O_RDONLY | O_CLOEXEC)) < 0) {
		free(ip);
		return gk_err_sys(err, errno, "open '%s'", shard);
	}
	/*
	 * A gzip (bzip2, xz, zstd) shard cannot have an index: say so, rather
	 * than to make one that data-pack --index then refuses.
	 */
	int lz4;
	if (sh_shard_filter(fd, shard, &lz4, err) < 0) {
		close(fd);
		free(ip);
		return -1;
	}
	if (gk_shard_index_load(ip, &idx, err) < 0) {
		close(fd);
		free(ip);
		return gk_err_prefix(err, "get '%s' (make the index with data-pack --index)",
				     what);
	}
	/* KEY.EXT or KEY: keys have no dots in their last component. */
	ssize_t klen = gk_shard_key_len(what);
	char *key = klen < 0 ? strdup(what) : strndup(what, (size_t)klen);
	const char *ext = klen < 0 ? NULL : what + klen + 1;
	/*
	 * The index may be another shard's (one of the same size): its first
	 * and last samples must be where it says before a key it lacks is
	 * called missing, and the sample found must be where it says.
	 */
	int end_blocks;
	if (sh_index_check_ends(&idx, fd, shard, ip, &end_blocks, err) < 0)
		goto out;
	ssize_t i = key ? gk_shard_index_find(&idx, key) : -1;
	if (i < 0) {
		gk_errf(err, "get '%s': no such key in '%s'", what, shard);
		goto out;
	}
	if (gk_shard_index_check(&idx, fd, shard, ip, i, err) < 0)
		goto out;
	const gk_shard_index_sample *is = &idx.s[i];
	if (!(m = calloc(is->n, sizeof(*m))) || !(src = calloc(1, sizeof(*src)))) {
		gk_err_sys(err, ENOMEM, "get '%s'", what);
		goto out;
	}
	for (size_t j = 0; j < is->n; j++) {
		const gk_shard_index_member *im = &idx.m[is->first + j];
		m[j].ext = im->name + gk_shard_key_len(im->name) + 1;
		m[j].size = im->size;
		m[j].offset = im->offset;
	}
	*src = (source){.fd = fd, .path = shard, .idx = &idx, .i = (size_t)i, .m = m};
	if (ext) {
		size_t j = 0;
		while (j < is->n && strcmp(m[j].ext, ext) != 0)
			j++;
		if (j == is->n) {
			gk_errf(err, "get '%s': sample '%s' has no member '.%s'", what,
				key, ext);
			goto out;
		}
		if (!(chunk = malloc(CHUNK))) {
			gk_err_sys(err, ENOMEM, "get '%s'", what);
			goto out;
		}
		for (uint64_t off = 0; off < m[j].size;) {
			size_t k = m[j].size - off < CHUNK ? (size_t)(m[j].size - off) : CHUNK;
			if (source_read(src, j, off, chunk, k, err) < 0)
				goto out;
			if (gk_write_full(out, chunk, k) < 0) {
				gk_err_sys(err, errno, "write the output");
				goto out;
			}
			off += k;
		}
	} else {
		gk_shard_write_opts o = {.pattern = "-", .mtime = mtime, .fd = out};
		gk_shard_writer *w;
		if (gk_shard_writer_open(&w, &o, err) < 0)
			goto out;
		if (gk_shard_writer_add_stream(w, key, is->n, m, source_read, src, err) < 0) {
			gk_shard_writer_abort(w);
			goto out;
		}
		if (gk_shard_writer_close(w, NULL, err) < 0)
			goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (src)
		LZ4F_freeDecompressionContext(src->dc);
	free(src);
	free(chunk);
	free(m);
	free(key);
	free(ip);
	gk_shard_index_free(&idx);
	return rc;
}
