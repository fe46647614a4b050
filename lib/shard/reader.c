/*
 * reader.c - one shard in, samples out, in order.
 *
 * libarchive does the tar and LZ4 decoding (it reads concatenated LZ4
 * frames as one stream, like the lz4 tool). To know that a sample has
 * ended the reader must see the next member's header, so it keeps that
 * header as a lookahead and reads its data on the next call.
 *
 * A sample's data is held in memory only when the caller wants it there
 * (gk_shard_reader_next without sizes-only: the trainer's samples).
 * Listing and indexing skip the data (a seek on a plain file), verifying
 * reads it through a fixed buffer, extracting hands it on in chunks.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/internal.h"

struct gk_shard_reader {
	struct archive *a;
	int fd, own_fd, strict, opened, eof, skip;
	int pack;            /* repacking: say what would be dropped */
	const gk_shard_naming *naming; /* repacking: member names (may be NULL) */
	int nokey;           /* the error was a name without a key */
	const void *mem;     /* reading a buffer instead of fd: mem_len bytes */
	size_t mem_len;
	size_t block;        /* bytes per read from fd */
	int plain;           /* a regular file without compression: sizes */
	uint64_t file_size;  /* claimed by headers can be checked against it */
	sh_member_fn on_member;
	void *on_ctx;
	uint64_t left;       /* of the member being handed to on_member */
	char *name;
	uint64_t base;       /* uncompressed offset where reading started */
	uint64_t shard;      /* reported in samples */
	uint64_t next_index; /* number of the next sample */
	int have_ahead;      /* a header read but not yet used */
	char *ahead_name;
	uint64_t ahead_size, ahead_off;
	uint64_t entry_end;  /* where the last entry's padded data ends */
	int end_blocks;      /* zero blocks found at the end: 0, 1 or 2 */
	sh_set seen;         /* keys of finished samples */
	sh_sample *cur;
};

static int archive_fail(gk_shard_reader *r, gk_err *err);

static int open_archive(gk_shard_reader *r, gk_err *err)
{
	r->a = archive_read_new();
	if (!r->a)
		return gk_err_sys(err, ENOMEM, "read '%s'", r->name);
	if (r->mem) {
		/* Tar bytes from r->base on, already decoded. */
		r->plain = 1;
		r->file_size = r->base + r->mem_len;
		archive_read_support_format_tar(r->a);
		if (archive_read_open_memory(r->a, r->mem, r->mem_len) != ARCHIVE_OK)
			return archive_fail(r, err);
		r->opened = 1;
		return 0;
	}
	struct stat st;
	if (fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode)) {
		if (st.st_size == 0)
			return gk_errf(err, "shard '%s': empty file", r->name);
		r->plain = 1; /* until a compression filter shows up */
		r->file_size = (uint64_t)st.st_size;
	}
	archive_read_support_format_tar(r->a);
	/* Shards are plain or LZ4; any other filter helps --from-tar. */
	archive_read_support_filter_all(r->a);
	if (archive_read_open_fd(r->a, r->fd, r->block) != ARCHIVE_OK)
		return gk_errf(err, "read '%s': %s", r->name, archive_error_string(r->a));
	r->opened = 1;
	return 0;
}

int gk_shard_reader_open_fd(gk_shard_reader **out, int fd, const char *name,
			    gk_err *err)
{
	gk_shard_reader *r = calloc(1, sizeof(*r));
	if (!r || !(r->name = strdup(name))) {
		free(r);
		return gk_err_sys(err, ENOMEM, "read '%s'", name);
	}
	r->fd = fd;
	r->block = 1 << 20;
	*out = r;
	return 0;
}

int sh_reader_open_mem(gk_shard_reader **out, const void *p, size_t n,
		       uint64_t base, const char *name, gk_err *err)
{
	if (gk_shard_reader_open_fd(out, -1, name, err) < 0)
		return -1;
	(*out)->mem = p;
	(*out)->mem_len = n;
	(*out)->base = base;
	return 0;
}

void sh_reader_block(gk_shard_reader *r, size_t block)
{
	r->block = block;
}

int gk_shard_reader_open(gk_shard_reader **out, const char *path, gk_err *err)
{
	int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return gk_err_sys(err, errno, "open '%s'", path);
	/* a pipe streams (webdataset reads them too); a directory would fail
	 * in libarchive as "Error reading fd N" */
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		if (fd != STDIN_FILENO)
			close(fd);
		return gk_err_sys(err, EISDIR, "open '%s'", path);
	}
	if (gk_shard_reader_open_fd(out, fd, path, err) < 0) {
		if (fd != STDIN_FILENO)
			close(fd);
		return -1;
	}
	(*out)->own_fd = fd != STDIN_FILENO;
	return 0;
}

void gk_shard_reader_strict(gk_shard_reader *r, int strict)
{
	r->strict = strict;
}

void sh_reader_pack_naming(gk_shard_reader *r, const gk_shard_naming *nm)
{
	r->naming = nm;
}

int sh_reader_nokey(const gk_shard_reader *r)
{
	return r->nokey;
}

void sh_reader_pack(gk_shard_reader *r, int on)
{
	r->pack = on;
}

void sh_reader_skip_data(gk_shard_reader *r, int skip)
{
	r->skip = skip;
}

void gk_shard_reader_sizes_only(gk_shard_reader *r, int on)
{
	r->skip = on ? SH_SKIP : SH_BUFFER;
}

void sh_reader_on_member(gk_shard_reader *r, sh_member_fn fn, void *ctx)
{
	r->on_member = fn;
	r->on_ctx = ctx;
}

ssize_t sh_reader_read(gk_shard_reader *r, void *buf, size_t n, gk_err *err)
{
	if (r->left == 0)
		return 0;
	if (n > r->left)
		n = (size_t)r->left;
	la_ssize_t k = archive_read_data(r->a, buf, n);
	if (k < 0)
		return archive_fail(r, err);
	if (k == 0)
		return gk_errf(err, "shard '%s': member '%s': truncated", r->name,
			       r->ahead_name);
	r->left -= (uint64_t)k;
	return (ssize_t)k;
}

void sh_reader_set_base(gk_shard_reader *r, uint64_t shard)
{
	r->shard = shard;
}

int sh_reader_end_blocks(const gk_shard_reader *r)
{
	return r->eof ? r->end_blocks : -1;
}

uint64_t gk_shard_reader_offset(const gk_shard_reader *r)
{
	return r->opened ? r->base + (uint64_t)archive_filter_bytes(r->a, 0) : r->base;
}

static int archive_fail(gk_shard_reader *r, gk_err *err)
{
	const char *why = archive_error_string(r->a);
	return gk_errf(err, "shard '%s' at byte %llu: %s", r->name,
		       (unsigned long long)gk_shard_reader_offset(r),
		       why ? why : "unreadable");
}

/*
 * After the end blocks of a plain shard (a file or memory) only zeros may
 * follow: tar pads its last record with them. Anything else is data no
 * tar reader sees, such as a second shard appended with cat. A
 * compressed stream cannot be read past libarchive's end: not checked.
 */
static int check_tail(gk_shard_reader *r, uint64_t at, gk_err *err)
{
	unsigned char buf[1 << 16];
	if (!r->plain || at >= r->file_size ||
	    (!r->mem && archive_filter_code(r->a, 0) != ARCHIVE_FILTER_NONE))
		return 0;
	for (uint64_t off = at; off < r->file_size;) {
		size_t n = r->file_size - off < sizeof(buf) ? (size_t)(r->file_size - off)
							  : sizeof(buf);
		const unsigned char *p = buf;
		if (r->mem) {
			p = (const unsigned char *)r->mem + (off - r->base);
		} else {
			ssize_t k = gk_pread_full(r->fd, buf, n, (off_t)off);
			if (k < 0)
				return gk_err_sys(err, errno, "read '%s'", r->name);
			if ((size_t)k < n)
				return 0; /* shrank meanwhile: nothing there */
		}
		for (size_t i = 0; i < n; i++)
			if (p[i])
				return gk_errf(err, "shard '%s': data after the end-of-archive blocks at byte %llu (no tar reader sees it)",
					       r->name, (unsigned long long)(off + i));
		off += n;
	}
	return 0;
}

/* Read the next header worth keeping into the lookahead; 0 at the end. */
static int read_ahead(gk_shard_reader *r, gk_err *err)
{
	struct archive_entry *e;
	for (;;) {
		int rc = archive_read_next_header(r->a, &e);
		if (rc == ARCHIVE_EOF) {
			/*
			 * libarchive consumes the zero blocks it finds (one or
			 * two) and reports the end, also when there are none.
			 * GNU tar and Python accept a tar cut right after a
			 * member (GNU tar warns of a lone zero block); that is
			 * how a truncated copy looks, so in strict mode the end
			 * must be the two zero blocks tar writes.
			 */
			uint64_t at = gk_shard_reader_offset(r);
			uint64_t gap = at > r->entry_end ? at - r->entry_end : 0;
			r->eof = 1;
			r->end_blocks = gap >= 1024 ? 2 : (int)(gap / 512);
			if (r->strict && r->end_blocks == 0)
				return gk_errf(err, "shard '%s': truncated at byte %llu (between members: no end-of-archive blocks)",
					       r->name, (unsigned long long)r->entry_end);
			if (r->strict && r->end_blocks == 1)
				return gk_errf(err, "shard '%s': truncated at byte %llu (a lone zero block: the end of a tar is two)",
					       r->name, (unsigned long long)(r->entry_end + 512));
			return r->strict ? check_tail(r, at, err) : 0;
		}
		if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
			return archive_fail(r, err);
		la_int64_t esize = archive_entry_size(e);
		r->entry_end = gk_shard_reader_offset(r) +
			       ((uint64_t)(esize > 0 ? esize : 0) + 511) / 512 * 512;
		const char *name = archive_entry_pathname(e);
		if (!name)
			name = "";
		/* A hard link is no regular file to webdataset (tarfile's
		 * isreg()), whatever type libarchive gives it. */
		const char *hard = archive_entry_hardlink(e);
		if (archive_entry_filetype(e) != AE_IFREG || hard) {
			const char *sym = archive_entry_symlink(e);
			if (r->pack && hard)
				return gk_errf(err, "shard '%s': member '%s': a hard link to '%s', not a regular file (GNU tar --hard-dereference stores the file)",
					       r->name, name, hard);
			if (r->pack && sym)
				return gk_errf(err, "shard '%s': member '%s': a symbolic link to '%s', not a regular file (GNU tar --dereference stores the file)",
					       r->name, name, sym);
			if (r->strict || (r->pack && archive_entry_filetype(e) != AE_IFDIR))
				return gk_errf(err, "shard '%s': member '%s': not a regular file",
					       r->name, name);
			continue;
		}
		if (r->strict && gk_shard_check_name(name, err) < 0)
			return gk_err_prefix(err, "shard '%s'", r->name);
		char *mapped = NULL;
		if (r->pack) {
			/* As data-pack -T says it of a file. */
			while (name[0] == '.' && name[1] == '/')
				name += 2;
			int m = gk_shard_member_name(name, r->naming, &mapped, err);
			if (m < 0) {
				r->nokey = m == GK_SHARD_NO_KEY;
				return -1;
			}
			name = mapped;
		} else if (gk_shard_key_len(name) < 0) {
			continue; /* webdataset skips these too */
		}
		/*
		 * GNU tar --sparse (typeflag 'S', or pax GNU.sparse.* keys)
		 * stores only the data regions: the size is the file's, the
		 * bytes are fewer, so the data is not at its offset and an
		 * index could not point at it.
		 */
		if (archive_entry_sparse_count(e) > 0) {
			gk_errf(err, "shard '%s': member '%s' is a sparse file (GNU tar --sparse), which shards do not support (archive it without --sparse)",
				r->name, name);
			free(mapped);
			return -1;
		}
		free(r->ahead_name);
		r->ahead_name = mapped ? mapped : strdup(name);
		if (!r->ahead_name)
			return gk_err_sys(err, ENOMEM, "read '%s'", r->name);
		r->ahead_size = (uint64_t)archive_entry_size(e);
		r->ahead_off = gk_shard_reader_offset(r);
		r->have_ahead = 1;
		/*
		 * In a plain file the data lies at its offset, so a size the
		 * file cannot hold is a truncation, said before any seek past
		 * the end or any allocation of the claimed size.
		 */
		if (r->plain && archive_filter_code(r->a, 0) == ARCHIVE_FILTER_NONE &&
		    (r->ahead_off > r->file_size || r->ahead_size > r->file_size - r->ahead_off))
			return gk_errf(err, "shard '%s': truncated: member '%s' at byte %llu claims %llu bytes, the file ends at byte %llu",
				       r->name, name, (unsigned long long)r->ahead_off,
				       (unsigned long long)r->ahead_size,
				       (unsigned long long)r->file_size);
		return 1;
	}
}

static sh_sample *sample_new(void)
{
	return calloc(1, sizeof(sh_sample));
}

static void sample_reset(sh_sample *x)
{
	x->s.n = 0;
	x->data.len = 0;
	x->names.len = 0;
}

/* Append the lookahead member to x, reading (or skipping) its data. */
static int take_member(gk_shard_reader *r, sh_sample *x, int skip, gk_err *err)
{
	size_t klen = (size_t)gk_shard_key_len(r->ahead_name);
	const char *ext = r->ahead_name + klen + 1;
	if (x->s.n == x->mcap) {
		/* Three parallel arrays of one capacity: it moves when all grew. */
		size_t c1 = x->mcap, c2 = x->mcap, c3 = x->mcap;
		if (GK_GROW(x->m, c1, x->s.n + 1, "sample members", err) < 0 ||
		    GK_GROW(x->ext_off, c2, x->s.n + 1, "sample members", err) < 0 ||
		    GK_GROW(x->data_off, c3, x->s.n + 1, "sample members", err) < 0)
			return gk_err_prefix(err, "read '%s'", r->name);
		x->mcap = c1;
	}
	if (x->s.n == 0 && (sh_buf_append(&x->names, r->ahead_name, klen) < 0 ||
			    sh_buf_append(&x->names, "", 1) < 0))
		return gk_err_sys(err, ENOMEM, "read '%s'", r->name);
	for (size_t i = 0; i < x->s.n; i++) {
		const char *prev = (const char *)x->names.p + x->ext_off[i];
		if (strcasecmp(prev, ext) == 0)
			return gk_errf(err, strcmp(prev, ext) == 0
					? "shard '%s': sample '%s': member '%s' appears twice"
					: "shard '%s': sample '%s': extensions of '%s' and '%s' differ only in case",
				       r->name, (const char *)x->names.p, r->ahead_name,
				       prev);
	}
	size_t n = x->s.n;
	x->ext_off[n] = x->names.len;
	if (sh_buf_append(&x->names, ext, strlen(ext) + 1) < 0)
		return gk_err_sys(err, ENOMEM, "read '%s'", r->name);
	x->m[n].size = r->ahead_size;
	x->m[n].offset = r->ahead_off;
	x->data_off[n] = x->data.len;
	if (r->on_member) {
		r->left = r->ahead_size;
		if (r->on_member(r->on_ctx, r->ahead_name, r->ahead_size, err) < 0)
			return -1;
		if (r->left && archive_read_data_skip(r->a) != ARCHIVE_OK)
			return archive_fail(r, err);
		r->left = 0;
	} else if (skip == SH_SKIP) {
		if (archive_read_data_skip(r->a) != ARCHIVE_OK)
			return archive_fail(r, err);
	} else if (skip == SH_DISCARD) {
		/* Every byte read (LZ4 checksums, I/O errors), none kept. */
		static __thread unsigned char sink[1 << 16];
		r->left = r->ahead_size;
		ssize_t k;
		while ((k = sh_reader_read(r, sink, sizeof(sink), err)) > 0)
			;
		if (k < 0)
			return -1;
	} else {
		if (r->ahead_size > SIZE_MAX / 2 || sh_buf_reserve(&x->data, r->ahead_size) < 0)
			return gk_errf(err, "shard '%s': member '%s': %llu bytes do not fit in memory",
				       r->name, r->ahead_name, (unsigned long long)r->ahead_size);
		uint64_t got = 0;
		while (got < r->ahead_size) {
			la_ssize_t k = archive_read_data(r->a, x->data.p + x->data.len + got,
							 r->ahead_size - got);
			if (k < 0)
				return archive_fail(r, err);
			if (k == 0)
				return gk_errf(err, "shard '%s': member '%s': truncated",
					       r->name, r->ahead_name);
			got += (uint64_t)k;
		}
		x->data.len += r->ahead_size;
	}
	x->s.n = n + 1;
	r->have_ahead = 0;
	return 0;
}

/* Point the public view into the storage (after the buffers stopped moving). */
static void sample_finish(sh_sample *x, int skip)
{
	x->s.key = (const char *)x->names.p;
	x->s.m = x->m;
	for (size_t i = 0; i < x->s.n; i++) {
		x->m[i].ext = (const char *)x->names.p + x->ext_off[i];
		x->m[i].data = skip ? NULL
			       : x->data.p ? x->data.p + x->data_off[i] : (const void *)"";
	}
}

static int next_sample(gk_shard_reader *r, int skip, gk_err *err)
{
	if (!r->opened && open_archive(r, err) < 0)
		return -1;
	if (!r->cur && !(r->cur = sample_new()))
		return gk_err_sys(err, ENOMEM, "read '%s'", r->name);
	sh_sample *x = r->cur;
	sample_reset(x);
	for (;;) {
		if (!r->have_ahead) {
			if (r->eof)
				break;
			int rc = read_ahead(r, err);
			if (rc < 0)
				return -1;
			if (rc == 0)
				break;
		}
		size_t klen = (size_t)gk_shard_key_len(r->ahead_name);
		if (x->s.n > 0) {
			if (strlen(x->s.key) != klen || memcmp(x->s.key, r->ahead_name, klen))
				break; /* the lookahead starts the next sample */
		} else if (sh_set_has(&r->seen, r->ahead_name, klen)) {
			return gk_errf(err, "shard '%s': sample '%.*s': members are not consecutive (or the key is used twice)",
				       r->name, (int)klen, r->ahead_name);
		}
		if (take_member(r, x, skip, err) < 0)
			return -1;
		x->s.key = (const char *)x->names.p;
	}
	if (x->s.n == 0)
		return 0;
	if (sh_set_add(&r->seen, x->s.key, strlen(x->s.key)) < 0)
		return gk_err_sys(err, ENOMEM, "read '%s'", r->name);
	sample_finish(x, skip || r->on_member);
	x->s.shard = r->shard;
	x->s.index = r->next_index++;
	return 1;
}

int gk_shard_reader_next(gk_shard_reader *r, const gk_shard_sample **s,
			 gk_err *err)
{
	int rc = next_sample(r, r->skip, err);
	if (rc == 1)
		*s = &r->cur->s;
	return rc;
}

sh_sample *sh_reader_detach(gk_shard_reader *r)
{
	sh_sample *x = r->cur;
	r->cur = NULL;
	return x;
}

int gk_shard_reader_seek(gk_shard_reader *r, uint64_t i,
			 const gk_shard_index *idx, gk_err *err)
{
	if (r->opened || r->next_index)
		return gk_errf(err, "shard '%s': seek after reading began", r->name);
	if (i == 0)
		return 0;
	if (idx) {
		if (i > idx->nsamples)
			return gk_errf(err, "shard '%s': sample %llu is past its %zu samples",
				       r->name, (unsigned long long)i, idx->nsamples);
		uint64_t hdr = i == idx->nsamples ? idx->end : idx->s[i].header;
		uint64_t pos = i == idx->nsamples ? idx->frame_end : idx->s[i].frame;
		if (!idx->lz4)
			pos = hdr;
		if (lseek(r->fd, (off_t)pos, SEEK_SET) < 0)
			return gk_err_sys(err, errno, "seek '%s'", r->name);
		r->base = hdr;
		r->next_index = i;
		return 0;
	}
	for (uint64_t k = 0; k < i; k++) {
		int rc = next_sample(r, 1, err);
		if (rc < 0)
			return -1;
		if (rc == 0)
			return gk_errf(err, "shard '%s': sample %llu is past its %llu samples",
				       r->name, (unsigned long long)i, (unsigned long long)k);
	}
	return 0;
}

void gk_shard_reader_close(gk_shard_reader *r)
{
	if (!r)
		return;
	if (r->a)
		archive_read_free(r->a);
	if (r->own_fd)
		close(r->fd);
	free(r->name);
	free(r->ahead_name);
	sh_set_clear(&r->seen);
	sh_sample_free(r->cur);
	free(r);
}
