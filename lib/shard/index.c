/*
 * index.c - the per-shard sidecar index (DALI wds2idx "v1.2" text, plus
 * an LZ4 frame table), random access through it, and whole-shard checks
 * (the dataset's manifest is manifest.c).
 *
 * reference: https://github.com/NVIDIA/DALI/blob/main/tools/wds2idx.py
 */
#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <lz4frame.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/internal.h"

/* ---- index --------------------------------------------------------------- */

int sh_shard_filter(int fd, const char *path, int *lz4, gk_err *err)
{
	/*
	 * Ask libarchive, which the reader decodes with, on the first bytes:
	 * its bidders recognise what the sequential reader would undo.
	 */
	static const struct {
		int code;
		const char *undo;
	} undo[] = {
		{ARCHIVE_FILTER_GZIP, "gunzip it"},   {ARCHIVE_FILTER_BZIP2, "bunzip2 it"},
		{ARCHIVE_FILTER_XZ, "unxz it"},       {ARCHIVE_FILTER_LZMA, "unlzma it"},
		{ARCHIVE_FILTER_ZSTD, "unzstd it"},   {ARCHIVE_FILTER_LZIP, "lzip -d it"},
		{ARCHIVE_FILTER_COMPRESS, "uncompress it"},
	};
	unsigned char head[4096];
	ssize_t n = gk_pread_full(fd, head, sizeof(head), 0);
	*lz4 = 0;
	if (n < 0)
		return 0; /* a directory, an I/O error: the reader says it */
	/*
	 * LZ4 first, by its frame header: libarchive's LZ4 filter decodes a
	 * whole block (up to 4 MiB) before it tells, which these few bytes
	 * may not hold.
	 */
	LZ4F_dctx *dc;
	if (LZ4F_isError(LZ4F_createDecompressionContext(&dc, LZ4F_VERSION)))
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	LZ4F_frameInfo_t fi;
	size_t fsz = (size_t)n;
	size_t fr = LZ4F_getFrameInfo(dc, &fi, head, &fsz);
	LZ4F_freeDecompressionContext(dc);
	if (!LZ4F_isError(fr)) {
		*lz4 = 1;
		return 0;
	}
	struct archive *a = archive_read_new();
	if (!a)
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_open_memory(a, head, (size_t)n);
	int code = archive_filter_code(a, 0);
	char name[64];
	snprintf(name, sizeof(name), "%s", archive_filter_name(a, 0) ? archive_filter_name(a, 0) : "?");
	archive_read_free(a);
	/* -1: no filter could start on these bytes; the reader will say. */
	if (code == ARCHIVE_FILTER_NONE || code < 0)
		return 0;
	const char *how = "decompress it";
	for (size_t i = 0; i < GK_ARRAY_SIZE(undo); i++)
		if (undo[i].code == code)
			how = undo[i].undo;
	return gk_errf(err, "shard '%s' is %s-compressed: random access needs an uncompressed tar (%s)",
		       path, name, how);
}

/* sh_shard_filter of a shard named by path ("-": a stream, not probed). */
int sh_path_filter(const char *path, int *lz4, gk_err *err)
{
	*lz4 = 0;
	if (strcmp(path, "-") == 0)
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return gk_err_sys(err, errno, "open '%s'", path);
	int rc = sh_shard_filter(fd, path, lz4, err);
	close(fd);
	return rc;
}

void gk_shard_index_free(gk_shard_index *idx)
{
	for (size_t i = 0; i < idx->nmembers; i++)
		free(idx->m[i].name);
	free(idx->m);
	free(idx->s);
	memset(idx, 0, sizeof(*idx));
}

int gk_shard_index_write(const char *path, const gk_shard_index *idx,
			 gk_err *err)
{
	gk_atomic *a;
	if (gk_atomic_open(&a, path, 0644, err) < 0)
		return -1;
	FILE *fp = gk_atomic_fp(a, err);
	if (!fp) {
		gk_atomic_abort(a);
		return -1;
	}
	fprintf(fp, "v1.2 %zu\n", idx->nsamples);
	for (size_t i = 0; i < idx->nsamples; i++) {
		const gk_shard_index_sample *s = &idx->s[i];
		for (size_t j = 0; j < s->n; j++) {
			const gk_shard_index_member *m = &idx->m[s->first + j];
			const char *ext = m->name + gk_shard_key_len(m->name) + 1;
			fprintf(fp, "%s%s %" PRIu64 " %" PRIu64 " %s", j ? " " : "", ext,
				m->offset, m->size, m->name);
		}
		fputc('\n', fp);
	}
	if (idx->lz4) {
		fprintf(fp, "lz4 %zu\n", idx->nsamples + 1);
		for (size_t i = 0; i < idx->nsamples; i++)
			fprintf(fp, "%" PRIu64 "\n", idx->s[i].frame);
		fprintf(fp, "%" PRIu64 "\n", idx->frame_end);
	}
	if (idx->bound) {
		char hex[17];
		fprintf(fp, "shard %" PRIu64 " %s\n", idx->shard_bytes,
			gk_xxh3_hex(idx->shard_xxh3, hex));
	}
	if (ferror(fp)) {
		gk_err_sys(err, errno ? errno : EIO, "write '%s'", path);
		gk_atomic_abort(a);
		return -1;
	}
	return gk_atomic_commit(a, err);
}

static int parse_u64(char **p, uint64_t *out)
{
	char *end;
	errno = 0;
	if (**p < '0' || **p > '9')
		return -1;
	unsigned long long v = strtoull(*p, &end, 10);
	if (errno || (*end != ' ' && *end != '\n' && *end != '\0'))
		return -1;
	*out = v;
	*p = end;
	return 0;
}

static char *next_field(char **p)
{
	while (**p == ' ')
		(*p)++;
	char *s = *p;
	while (**p && **p != ' ' && **p != '\n')
		(*p)++;
	return s;
}

/* One sample line: "EXT OFF SIZE NAME" groups. */
static int parse_line(char *line, gk_shard_index *idx, size_t *mcap,
		      const char *path, size_t lineno, gk_err *err)
{
	char *p = line;
	gk_shard_index_sample *s = &idx->s[idx->nsamples];
	s->first = idx->nmembers;
	s->n = 0;
	while (*p && *p != '\n') {
		uint64_t off, size;
		next_field(&p); /* the extension, implied by the name */
		while (*p == ' ')
			p++;
		if (parse_u64(&p, &off) < 0)
			goto bad;
		while (*p == ' ')
			p++;
		if (parse_u64(&p, &size) < 0)
			goto bad;
		char *name = next_field(&p);
		size_t nlen = (size_t)(p - name);
		if (nlen == 0)
			goto bad;
		if (GK_GROW(idx->m, *mcap, idx->nmembers + 1, "index members", err) < 0)
			return gk_err_prefix(err, "index '%s'", path);
		gk_shard_index_member *m = &idx->m[idx->nmembers];
		if (!(m->name = strndup(name, nlen)))
			return gk_err_sys(err, ENOMEM, "index '%s'", path);
		m->offset = off;
		m->size = size;
		idx->nmembers++;
		s->n++;
		while (*p == ' ')
			p++;
	}
	if (s->n == 0)
		goto bad;
	idx->nsamples++;
	return 0;
bad:
	return gk_errf(err, "index '%s' line %zu: not 'EXT OFFSET SIZE NAME' groups",
		       path, lineno);
}

/* Headers follow from data offsets: a sample starts where the previous
 * one's last member (padded to 512) ends. */
static void derive_headers(gk_shard_index *idx)
{
	uint64_t pos = 0;
	for (size_t i = 0; i < idx->nsamples; i++) {
		gk_shard_index_sample *s = &idx->s[i];
		s->header = pos;
		if (!idx->lz4)
			s->frame = pos;
		const gk_shard_index_member *last = &idx->m[s->first + s->n - 1];
		pos = last->offset + (last->size + 511) / 512 * 512;
	}
	idx->end = pos;
	if (!idx->lz4)
		idx->frame_end = pos;
}

int gk_shard_index_load(const char *path, gk_shard_index *idx, gk_err *err)
{
	char *text;
	size_t len, mcap = 0;
	memset(idx, 0, sizeof(*idx));
	if (gk_read_file(path, (size_t)1 << 32, &text, &len, err) < 0)
		return -1;
	char *p = text, *nl;
	size_t lineno = 1;
	unsigned long long n;
	int used;
	if (sscanf(p, "v1.2 %llu%n", &n, &used) != 1 || (p[used] != '\n') ||
	    n > len / 8 + 1) {
		free(text);
		return gk_errf(err, "index '%s': not a DALI v1.2 index (first line 'v1.2 N')",
			       path);
	}
	p += used + 1;
	if (!(idx->s = calloc(n + 1, sizeof(*idx->s)))) {
		free(text);
		return gk_err_sys(err, ENOMEM, "index '%s'", path);
	}
	for (size_t i = 0; i < n; i++) {
		lineno++;
		if (!*p) {
			gk_errf(err, "index '%s': %llu samples announced, %zu found", path, n, (size_t)i);
			goto fail;
		}
		nl = strchr(p, '\n');
		if (nl)
			*nl = '\0';
		if (parse_line(p, idx, &mcap, path, lineno, err) < 0)
			goto fail;
		p = nl ? nl + 1 : p + strlen(p);
	}
	unsigned long long nf;
	if (*p && sscanf(p, "lz4 %llu%n", &nf, &used) == 1 && p[used] == '\n') {
		if (nf != n + 1) {
			gk_errf(err, "index '%s': lz4 table has %llu entries, want %llu", path, nf, n + 1);
			goto fail;
		}
		p += used + 1;
		lineno++;
		idx->lz4 = 1;
		for (size_t i = 0; i <= n; i++) {
			uint64_t v;
			lineno++;
			if (parse_u64(&p, &v) < 0 || *p != '\n') {
				gk_errf(err, "index '%s' line %zu: not a frame offset", path, lineno);
				goto fail;
			}
			p++;
			if (i < n)
				idx->s[i].frame = v;
			else
				idx->frame_end = v;
		}
	}
	if (strncmp(p, "shard ", 6) == 0) {
		char hex[17];
		p += 6;
		lineno++;
		if (parse_u64(&p, &idx->shard_bytes) < 0 || *p != ' ' ||
		    strspn(p + 1, "0123456789abcdef") != 16 || p[17] != '\n') {
			gk_errf(err, "index '%s' line %zu: not 'shard BYTES XXH3'", path, lineno);
			goto fail;
		}
		memcpy(hex, p + 1, 16);
		hex[16] = '\0';
		if (gk_xxh3_parse(hex, &idx->shard_xxh3, err) < 0)
			goto fail;
		idx->bound = 1;
		p += 18;
	}
	if (*p) {
		gk_errf(err, "index '%s': unexpected text after the samples", path);
		goto fail;
	}
	/* Members follow their 512-byte headers in order; frames ascend. */
	for (size_t i = 0, prev = 0; i < idx->nmembers; i++) {
		uint64_t off = idx->m[i].offset;
		if (off % 512 || off < prev + 512 || idx->m[i].size > ((uint64_t)1 << 50)) {
			gk_errf(err, "index '%s': member '%s': offset %llu out of order", path,
				idx->m[i].name, (unsigned long long)off);
			goto fail;
		}
		prev = (size_t)(off + (idx->m[i].size + 511) / 512 * 512);
	}
	for (size_t i = 0; idx->lz4 && i < idx->nsamples; i++) {
		uint64_t next = i + 1 < idx->nsamples ? idx->s[i + 1].frame : idx->frame_end;
		if (idx->s[i].frame >= next) {
			gk_errf(err, "index '%s': LZ4 frame offsets out of order", path);
			goto fail;
		}
	}
	derive_headers(idx);
	free(text);
	return 0;
fail:
	free(text);
	gk_shard_index_free(idx);
	return -1;
}

ssize_t gk_shard_index_find(const gk_shard_index *idx, const char *key)
{
	size_t klen = strlen(key);
	for (size_t i = 0; i < idx->nsamples; i++) {
		const char *name = idx->m[idx->s[i].first].name;
		if ((size_t)gk_shard_key_len(name) == klen && memcmp(name, key, klen) == 0)
			return (ssize_t)i;
	}
	return -1;
}

/* Frame start offsets (compressed, uncompressed) of an LZ4 file, found by
 * decoding it: LZ4F_decompress returns 0 exactly at each frame's end. */
static int lz4_frames(const char *path, uint64_t **coff, uint64_t **uoff,
		      size_t *nframes, gk_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return gk_err_sys(err, errno, "open '%s'", path);
	LZ4F_dctx *dc;
	if (LZ4F_isError(LZ4F_createDecompressionContext(&dc, LZ4F_VERSION))) {
		close(fd);
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	}
	size_t ccap = 0, n = 0;
	uint64_t *c = NULL, *u = NULL;
	enum { IN = 1 << 20, OUT = 4 << 20 };
	unsigned char *in = malloc(IN), *outb = malloc(OUT);
	uint64_t cpos = 0, upos = 0;
	int rc = -1, at_start = 1;
	if (!in || !outb) {
		gk_err_sys(err, ENOMEM, "read '%s'", path);
		goto out;
	}
	for (;;) {
		ssize_t got = gk_read_full(fd, in, IN);
		if (got < 0) {
			gk_err_sys(err, errno, "read '%s'", path);
			goto out;
		}
		if (got == 0)
			break;
		size_t ip = 0;
		while (ip < (size_t)got) {
			if (at_start) {
				size_t ucap = ccap;
				if (GK_GROW(c, ccap, n + 1, "LZ4 frame table", err) < 0 ||
				    GK_GROW(u, ucap, n + 1, "LZ4 frame table", err) < 0) {
					gk_err_prefix(err, "read '%s'", path);
					goto out;
				}
				c[n] = cpos;
				u[n] = upos;
				n++;
				at_start = 0;
			}
			size_t isz = (size_t)got - ip, osz = OUT;
			size_t r = LZ4F_decompress(dc, outb, &osz, in + ip, &isz, NULL);
			if (LZ4F_isError(r)) {
				gk_errf(err, "shard '%s' at byte %llu: LZ4: %s", path,
					(unsigned long long)cpos, LZ4F_getErrorName(r));
				goto out;
			}
			ip += isz;
			cpos += isz;
			upos += osz;
			if (r == 0)
				at_start = 1;
		}
	}
	if (!at_start) {
		gk_errf(err, "shard '%s': truncated LZ4 frame", path);
		goto out;
	}
	*coff = c;
	*uoff = u;
	*nframes = n;
	c = u = NULL;
	rc = 0;
out:
	LZ4F_freeDecompressionContext(dc);
	close(fd);
	free(c);
	free(u);
	free(in);
	free(outb);
	return rc;
}

static int attach_frames(const char *path, gk_shard_index *idx, gk_err *err)
{
	uint64_t *c = NULL, *u = NULL;
	size_t nf = 0, f = 0;
	if (lz4_frames(path, &c, &u, &nf, err) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i <= idx->nsamples && rc == 0; i++) {
		uint64_t want = i < idx->nsamples ? idx->s[i].header : idx->end;
		while (f < nf && u[f] < want)
			f++;
		if (f == nf || u[f] != want)
			rc = gk_errf(err, "shard '%s': sample %zu does not start an LZ4 frame; random access needs one frame per sample (data-pack --lz4 writes that)",
				     path, i);
		else if (i < idx->nsamples)
			idx->s[i].frame = c[f];
		else
			idx->frame_end = c[f];
	}
	idx->lz4 = 1;
	free(c);
	free(u);
	return rc;
}

int sh_index_build(const char *shard, gk_shard_index *idx, int flags,
		   int *end_blocks, gk_err *err)
{
	int strict = flags & SH_STRICT;
	gk_shard_reader *r;
	const gk_shard_sample *s;
	size_t scap = 0, mcap = 0;
	int rc, lz4;
	gk_err why;
	memset(idx, 0, sizeof(*idx));
	/* Offsets need a plain tar or LZ4 frames; verify also reads the others. */
	if (sh_path_filter(shard, &lz4, &why) < 0 && !strict) {
		*err = why;
		return -1;
	}
	if (gk_shard_reader_open(&r, shard, err) < 0)
		return -1;
	/* Building: skip data (a seek on a plain file). Verifying: read it all. */
	sh_reader_skip_data(r, strict ? SH_DISCARD : SH_SKIP);
	gk_shard_reader_strict(r, strict);
	while ((rc = gk_shard_reader_next(r, &s, err)) == 1) {
		if (GK_GROW(idx->s, scap, idx->nsamples + 1, "index", err) < 0 ||
		    GK_GROW(idx->m, mcap, idx->nmembers + s->n, "index", err) < 0)
			goto nomem;
		gk_shard_index_sample *is = &idx->s[idx->nsamples];
		is->first = idx->nmembers;
		is->n = s->n;
		for (size_t j = 0; j < s->n; j++) {
			gk_shard_index_member *m = &idx->m[idx->nmembers];
			if (asprintf(&m->name, "%s.%s", s->key, s->m[j].ext) < 0)
				goto nomem;
			/* DALI's index separates fields by spaces and lines by
			 * newlines: a name with either would corrupt it. */
			if ((flags & SH_NAMES) && gk_shard_check_name(m->name, err) < 0) {
				free(m->name);
				gk_err_prefix(err, "index '%s'", shard);
				goto fail;
			}
			m->offset = s->m[j].offset;
			m->size = s->m[j].size;
			idx->nmembers++;
		}
		idx->nsamples++;
	}
	if (rc < 0)
		goto fail;
	if (idx->nsamples == 0) {
		gk_errf(err, "shard '%s': no samples", shard);
		goto fail;
	}
	if (end_blocks)
		*end_blocks = sh_reader_end_blocks(r);
	gk_shard_reader_close(r);
	r = NULL;
	derive_headers(idx);
	if (lz4 && attach_frames(shard, idx, err) < 0)
		goto fail;
	if (flags & SH_BIND) {
		int fd = open(shard, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			gk_err_sys(err, errno, "open '%s'", shard);
			if (fd >= 0)
				close(fd);
			goto fail;
		}
		idx->shard_bytes = (uint64_t)st.st_size;
		rc = gk_xxh3_fd(fd, 0, UINT64_MAX, &idx->shard_xxh3, shard, err);
		close(fd);
		if (rc < 0)
			goto fail;
		idx->bound = 1;
	}
	return 0;
nomem:
	gk_err_sys(err, ENOMEM, "index '%s'", shard);
fail:
	gk_shard_reader_close(r);
	gk_shard_index_free(idx);
	return -1;
}

int gk_shard_index_build(const char *shard, gk_shard_index *idx, gk_err *err)
{
	return sh_index_build(shard, idx, SH_NAMES | SH_BIND, NULL, err);
}

/*
 * Compare index sample i with the next sample r reads: the same names,
 * sizes and data offsets. With to_end the shard must end after it, and
 * *end_blocks (may be NULL) gets the zero blocks found there. 0, or -1
 * with a message saying where the index and the shard part (and, with
 * why, what the reader found there).
 */
static int same_sample(const gk_shard_index *idx, size_t i, gk_shard_reader *r,
		       int to_end, int *end_blocks, const char *shard,
		       const char *index, int why, gk_err *err)
{
	const gk_shard_sample *s;
	const gk_shard_index_sample *is = &idx->s[i];
	const char *name = idx->m[is->first].name;
	int rc = gk_shard_reader_next(r, &s, err);
	int same = rc == 1 && s->n == is->n;
	for (size_t j = 0; same && j < s->n; j++) {
		const gk_shard_index_member *im = &idx->m[is->first + j];
		size_t klen = strlen(s->key);
		same = strncmp(im->name, s->key, klen) == 0 && im->name[klen] == '.' &&
		       strcmp(im->name + klen + 1, s->m[j].ext) == 0 &&
		       im->size == s->m[j].size && im->offset == s->m[j].offset;
	}
	if (same && to_end) {
		rc = gk_shard_reader_next(r, &s, err);
		if (rc == 0) {
			if (end_blocks)
				*end_blocks = sh_reader_end_blocks(r);
			return 0;
		}
		if (rc == 1)
			return gk_errf(err, "index '%s' does not match '%s': sample '%s' follows its last one (rebuild it with data-pack --index)",
				       index, shard, s->key);
		return gk_err_prefix(err, "index '%s' does not match '%s' after its last sample (rebuild it with data-pack --index)",
				     index, shard);
	}
	if (same)
		return 0;
	if (rc < 0 && why)
		return gk_err_prefix(err, "index '%s' does not match '%s' at sample %zu '%.*s' (rebuild it with data-pack --index)",
				     index, shard, i, (int)gk_shard_key_len(name), name);
	return gk_errf(err, "index '%s' does not match '%s' at sample %zu '%.*s' (rebuild it with data-pack --index)",
		       index, shard, i, (int)gk_shard_key_len(name), name);
}

/* Check sample i of the shard open as fd against idx, reading only its
 * headers (or its LZ4 frame) in small reads; to_end as same_sample. */
static int check_at(const gk_shard_index *idx, int fd, const char *shard,
		    const char *index, size_t i, int to_end, int *end_blocks,
		    gk_err *err)
{
	gk_shard_reader *r;
	if (gk_shard_reader_open_fd(&r, fd, shard, err) < 0)
		return -1;
	sh_reader_block(r, 16 << 10);
	gk_shard_reader_sizes_only(r, 1);
	/* seek leaves sample 0 where the descriptor is: put it there */
	int rc = i == 0 && lseek(fd, 0, SEEK_SET) < 0
			 ? gk_err_sys(err, errno, "seek '%s'", shard)
			 : gk_shard_reader_seek(r, (uint64_t)i, idx, err);
	if (rc == 0)
		rc = same_sample(idx, i, r, to_end, end_blocks, shard, index, 1, err);
	gk_shard_reader_close(r);
	return rc;
}

int gk_shard_index_check(const gk_shard_index *idx, int fd, const char *shard,
			 const char *index, ssize_t i, gk_err *err)
{
	struct stat st;
	int lz4;
	if (sh_shard_filter(fd, shard, &lz4, err) < 0)
		return -1;
	if (fstat(fd, &st) < 0)
		return gk_err_sys(err, errno, "stat '%s'", shard);
	if (idx->bound && (uint64_t)st.st_size != idx->shard_bytes)
		return gk_errf(err, "index '%s' is not the index of '%s': made for %llu bytes, the shard has %llu (rebuild it with data-pack --index)",
			       index, shard, (unsigned long long)idx->shard_bytes,
			       (unsigned long long)st.st_size);
	if (idx->lz4 != lz4)
		return gk_errf(err, "index '%s' is not the index of '%s': made for %s shard, this one is %s (rebuild it with data-pack --index)",
			       index, shard, idx->lz4 ? "an LZ4" : "a plain",
			       lz4 ? "LZ4" : "a plain tar");
	if (i < 0)
		return 0;
	if ((size_t)i >= idx->nsamples)
		return gk_errf(err, "index '%s': no sample %zd", index, i);
	return check_at(idx, fd, shard, index, (size_t)i, 0, NULL, err);
}

int sh_index_check_ends(const gk_shard_index *idx, int fd, const char *shard,
			const char *index, int *end_blocks, gk_err *err)
{
	size_t n = idx->nsamples;
	*end_blocks = -1;
	if (gk_shard_index_check(idx, fd, shard, index, -1, err) < 0)
		return -1;
	if (n == 0)
		return 0;
	if (check_at(idx, fd, shard, index, 0, n == 1, end_blocks, err) < 0)
		return -1;
	return n == 1 ? 0 : check_at(idx, fd, shard, index, n - 1, 1, end_blocks, err);
}

/*
 * Is h (512 bytes) the ustar header of a regular file called name, of
 * size bytes? Only for the plain case: a valid checksum, the "ustar"
 * magic, and name and size in the header's own fields. Anything else (a
 * pax or GNU long name before it, a size in base 256) answers 0 and goes
 * to libarchive.
 * reference: POSIX.1-2008 pax, "ustar Interchange Format"
 */
static int plain_header(const unsigned char *h, const char *name, uint64_t size)
{
	unsigned sum = 8 * ' ', want = 0; /* the checksum field counts as spaces */
	for (int k = 0; k < 512; k++)
		sum += h[k];
	for (int k = 148; k < 156; k++)
		sum -= h[k];
	for (int k = 148; k < 156 && h[k] >= '0' && h[k] <= '7'; k++)
		want = want * 8 + (unsigned)(h[k] - '0');
	if (sum != want || memcmp(h + 257, "ustar", 5) != 0 ||
	    (h[156] != '0' && h[156] != '\0' && h[156] != '7'))
		return 0;
	uint64_t sz = 0;
	int k = 124;
	while (k < 135 && h[k] == ' ')
		k++;
	for (; k < 136 && h[k] >= '0' && h[k] <= '7'; k++)
		sz = sz * 8 + (uint64_t)(h[k] - '0');
	if (sz != size || (k < 136 && h[k] != '\0' && h[k] != ' '))
		return 0;
	/* prefix "/" name in POSIX ustar ("ustar\0"); GNU's has no prefix */
	size_t plen = h[262] == '\0' ? strnlen((const char *)h + 345, 155) : 0;
	size_t nlen = strnlen((const char *)h, 100), len = strlen(name);
	if (plen)
		return len == plen + 1 + nlen && memcmp(name, h + 345, plen) == 0 &&
		       name[plen] == '/' && memcmp(name + plen + 1, h, nlen) == 0;
	return len == nlen && memcmp(name, h, nlen) == 0;
}

int sh_index_check_mem(const gk_shard_index *idx, size_t i, const void *p,
		       const char *shard, const char *index, gk_err *err)
{
	const gk_shard_index_sample *s = &idx->s[i];
	uint64_t end = i + 1 < idx->nsamples ? idx->s[i + 1].header : idx->end;
	/*
	 * The common case in one pass over the headers: each member's
	 * header right where the previous one's data ends (so nothing else
	 * hides in the sample's bytes), naming it with its size.
	 */
	uint64_t at = s->header;
	size_t j = 0;
	for (; j < s->n; j++) {
		const gk_shard_index_member *m = &idx->m[s->first + j];
		if (m->offset != at + 512 || m->offset > end || m->size > end - m->offset ||
		    !plain_header((const unsigned char *)p + (at - s->header), m->name, m->size))
			break;
		at = m->offset + (m->size + 511) / 512 * 512;
	}
	if (j == s->n && at == end)
		return 0;
	gk_shard_reader *r;
	if (sh_reader_open_mem(&r, p, (size_t)(end - s->header), s->header, shard, err) < 0)
		return -1;
	gk_shard_reader_sizes_only(r, 1);
	/* a mismatch in memory is only that: the reader's complaint ("the
	 * file ends at ...") would be about the slice */
	int rc = same_sample(idx, i, r, 0, NULL, shard, index, 0, err);
	gk_shard_reader_close(r);
	return rc;
}

int sh_index_load_for(const char *shard, gk_shard_index *idx, gk_err *stale,
		      int *end_blocks, gk_err *err)
{
	char *ip = gk_shard_index_path(shard);
	memset(idx, 0, sizeof(*idx));
	gk_err_clear(stale);
	*end_blocks = -1;
	if (!ip)
		return gk_err_sys(err, ENOMEM, "index of '%s'", shard);
	/* a file of that name that is not there is not an index either */
	if (strcmp(ip, shard) == 0 && access(shard, F_OK) == 0) {
		free(ip);
		return gk_errf(err, "'%s' is a shard's index, not a shard: name the shard "
			       "beside it", shard);
	}
	if (access(ip, F_OK) < 0) {
		free(ip);
		return 0;
	}
	int lz4, rc, fd = open(shard, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = gk_err_sys(err, errno, "open '%s'", shard);
		free(ip);
		return rc;
	}
	rc = sh_shard_filter(fd, shard, &lz4, err);
	if (rc == 0)
		rc = gk_shard_index_load(ip, idx, err);
	/*
	 * A shard replaced by another of the same size keeps the size test
	 * of a bound index happy: the first and the last sample must also
	 * be where the index puts them, and nothing may follow the last.
	 */
	if (rc == 0) {
		rc = 1;
		if (sh_index_check_ends(idx, fd, shard, ip, end_blocks, stale) < 0) {
			gk_shard_index_free(idx);
			rc = 0;
		}
	}
	close(fd);
	free(ip);
	return rc;
}

/* Size and XXH3 of a file, for the manifest's and the index's bindings. */
static int file_sum(const char *path, uint64_t *bytes, uint64_t *h, gk_err *err)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		gk_err_sys(err, errno, "open '%s'", path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*bytes = (uint64_t)st.st_size;
	int rc = gk_xxh3_fd(fd, 0, UINT64_MAX, h, path, err);
	close(fd);
	return rc;
}

int gk_shard_verify(const char *path, const gk_shard_info *want, gk_err *err)
{
	gk_shard_index built, saved;
	uint64_t bytes = 0, h = 0;
	int have_sum = 0, have_saved = 0, rc = 0;
	char a[17], b[17];
	if (sh_index_build(path, &built, SH_STRICT, NULL, err) < 0)
		return -1;
	char *ip = gk_shard_index_path(path);
	if (!ip) {
		gk_shard_index_free(&built);
		return gk_err_sys(err, ENOMEM, "verify '%s'", path);
	}
	if (access(ip, F_OK) == 0) {
		int lz4;
		if (sh_path_filter(path, &lz4, err) < 0)
			rc = gk_err_prefix(err, "verify '%s': index '%s' cannot be used", path, ip);
		else if (gk_shard_index_load(ip, &saved, err) < 0)
			rc = -1;
		else
			have_saved = 1;
	}
	if (rc == 0 && (want || (have_saved && saved.bound))) {
		rc = file_sum(path, &bytes, &h, err);
		have_sum = rc == 0;
	}
	if (rc == 0 && want && built.nsamples != want->samples)
		rc = gk_errf(err, "verify '%s': %zu samples, the manifest says %" PRIu64,
			     path, built.nsamples, want->samples);
	if (rc == 0 && want && bytes != want->bytes)
		rc = gk_errf(err, "verify '%s': %" PRIu64 " bytes, the manifest says %" PRIu64,
			     path, bytes, want->bytes);
	if (rc == 0 && want && h != want->xxh3)
		rc = gk_errf(err, "verify '%s': XXH3 %s, the manifest says %s", path,
			     gk_xxh3_hex(h, a), gk_xxh3_hex(want->xxh3, b));
	if (rc == 0 && have_saved) {
		int same = saved.nsamples == built.nsamples && saved.nmembers == built.nmembers;
		size_t bad = 0;
		for (; same && bad < built.nmembers; bad += same)
			same = built.m[bad].offset == saved.m[bad].offset &&
			       built.m[bad].size == saved.m[bad].size &&
			       strcmp(built.m[bad].name, saved.m[bad].name) == 0;
		for (size_t i = 0; same && built.lz4 && i < built.nsamples; i++)
			same = built.s[i].frame == saved.s[i].frame;
		if (!same)
			rc = gk_errf(err, "verify '%s': index '%s' does not match the shard (member %zu)",
				     path, ip, bad);
		else if (saved.bound && have_sum &&
			 (saved.shard_bytes != bytes || saved.shard_xxh3 != h))
			rc = gk_errf(err, "verify '%s': index '%s' was made for another shard (%" PRIu64 " bytes, XXH3 %s; this one: %" PRIu64 " bytes, XXH3 %s)",
				     path, ip, saved.shard_bytes, gk_xxh3_hex(saved.shard_xxh3, a),
				     bytes, gk_xxh3_hex(h, b));
	}
	if (have_saved)
		gk_shard_index_free(&saved);
	free(ip);
	gk_shard_index_free(&built);
	return rc;
}

int gk_shard_read_sample(int fd, const char *path, const gk_shard_index *idx,
			 size_t i, void **buf, gk_shard_member *m, gk_err *err)
{
	if (i >= idx->nsamples)
		return gk_errf(err, "shard '%s': no sample %zu", path, i);
	const gk_shard_index_sample *s = &idx->s[i];
	uint64_t start = s->header;
	uint64_t end = i + 1 < idx->nsamples ? idx->s[i + 1].header : idx->end;
	if (end < start || end - start > ((uint64_t)1 << 40))
		return gk_errf(err, "index of '%s': sample %zu has a bad range", path, i);
	unsigned char *b = malloc(end - start + 1);
	if (!b)
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	if (idx->lz4) {
		uint64_t c0 = s->frame;
		uint64_t c1 = i + 1 < idx->nsamples ? idx->s[i + 1].frame : idx->frame_end;
		int good = c1 > c0 && c1 - c0 < ((uint64_t)1 << 40);
		size_t isz = good ? (size_t)(c1 - c0) : 0, osz = (size_t)(end - start), r = 1;
		unsigned char *cb = good ? malloc(isz) : NULL;
		LZ4F_dctx *dc = NULL;
		good = cb && gk_pread_full(fd, cb, isz, (off_t)c0) == (ssize_t)isz &&
		       !LZ4F_isError(LZ4F_createDecompressionContext(&dc, LZ4F_VERSION));
		if (good)
			r = LZ4F_decompress(dc, b, &osz, cb, &isz, NULL);
		LZ4F_freeDecompressionContext(dc);
		free(cb);
		if (!good || LZ4F_isError(r) || r != 0 || osz != end - start) {
			free(b);
			return gk_errf(err, "shard '%s': sample %zu: LZ4 frame at byte %llu is damaged or truncated",
				       path, i, (unsigned long long)c0);
		}
	} else {
		ssize_t got = gk_pread_full(fd, b, end - start, (off_t)start);
		if (got < 0) {
			free(b);
			return gk_err_sys(err, errno, "read '%s'", path);
		}
		if ((uint64_t)got != end - start) {
			free(b);
			return gk_errf(err, "shard '%s': truncated (sample %zu ends at byte %llu)",
				       path, i, (unsigned long long)end);
		}
	}
	for (size_t j = 0; j < s->n; j++) {
		const gk_shard_index_member *im = &idx->m[s->first + j];
		if (im->offset < start || im->offset + im->size > end) {
			free(b);
			return gk_errf(err, "index of '%s': member '%s' lies outside its sample",
				       path, im->name);
		}
		m[j].ext = im->name + gk_shard_key_len(im->name) + 1;
		m[j].data = b + (im->offset - start);
		m[j].size = im->size;
		m[j].offset = im->offset;
	}
	*buf = b;
	return 0;
}
