/*
 * st.h - safetensors files (prefix gk_st_): a validating reader and a
 * streaming writer whose bytes equal the reference implementation's.
 *
 * Format (reference: huggingface/safetensors, safetensors/src/tensor.rs):
 *   u64 LE N | N bytes of UTF-8 JSON header | data
 * The header maps tensor names to {"dtype","shape","data_offsets":[b,e]}
 * (offsets relative to the data section) plus an optional "__metadata__"
 * object of string values. Data is little-endian, C order.
 *
 * Reader rules (each failure has its own message, "read 'PATH': why"):
 * the file holds at least the 8-byte length; N <= 100,000,000 and the
 * header lies inside the file; the header is UTF-8, JSON, an object, with
 * no duplicate keys; __metadata__ maps strings to strings; every tensor has
 * a known dtype, a shape of non-negative integers, exactly two non-negative
 * offsets with begin <= end; sizes do not overflow 64 bits; end - begin is
 * the shape's element count times the dtype size (whole bytes for the
 * sub-byte F4/F6 kinds); sorted by offset the tensors start at 0 and are
 * contiguous (no hole, no overlap); the data ends exactly at end of file.
 * A git-lfs pointer file (a clone without `git lfs pull`) is named as such.
 */
#ifndef GK_ST_H
#define GK_ST_H

#include <stdint.h>

#include "core/core.h"

#define GK_ST_MAX_HEADER 100000000ull /* the reference's MAX_HEADER_SIZE */

typedef struct gk_st_tensor {
	char *name;
	gk_dtype dtype;
	int ndim;
	uint64_t *shape;    /* ndim entries (NULL for a scalar) */
	uint64_t begin, end; /* byte offsets in the data section */
} gk_st_tensor;

typedef struct gk_st_kv {
	char *key, *value;
} gk_st_kv;

typedef struct gk_st_file {
	char *path;
	int fd;             /* open read-only; -1 for a parsed buffer */
	uint64_t size;      /* whole file */
	uint64_t data_off;  /* 8 + header length: where tensor data begins */
	gk_st_tensor *t;    /* sorted by offset */
	size_t n;
	gk_st_kv *meta;     /* __metadata__, in file order */
	size_t nmeta;
	size_t *by_name;    /* t indices sorted by name, for gk_st_find */
} gk_st_file;

/* Open and validate path (the header only is read: O(header) memory). */
int gk_st_open(gk_st_file **out, const char *path, gk_err *err);
/*
 * Validate a header given its first bytes (at least the 8-byte length and
 * the header, or fewer: then the message says what is missing) and the
 * size of the whole file; name is used in messages. For fuzzing and tools
 * that hold the bytes already. The result has fd -1.
 */
int gk_st_parse(gk_st_file **out, const void *buf, size_t len,
		uint64_t file_size, const char *name, gk_err *err);
void gk_st_close(gk_st_file *f);

/* Binary search by name: O(log n), for checkpoints of 100k tensors. */
const gk_st_tensor *gk_st_find(const gk_st_file *f, const char *name);
const char *gk_st_meta_get(const gk_st_file *f, const char *key);
/* Element count of a tensor (1 for a scalar); 0 on overflow cannot happen
 * for a validated file. */
uint64_t gk_st_numel(const gk_st_tensor *t);
/* Bytes of n elements of dt; -1 on overflow or a fraction of a byte. */
int gk_st_nbytes(gk_dtype dt, uint64_t n, uint64_t *out);
/* Read bytes [off, off+n) of tensor t's data. */
int gk_st_read(const gk_st_file *f, const gk_st_tensor *t, uint64_t off,
	       void *buf, size_t n, gk_err *err);
/* "[2, 3]" into buf (truncated to len). */
char *gk_st_shape_str(const uint64_t *shape, int ndim, char *buf, size_t len);

/* ---- writer ---------------------------------------------------------------- */

/* What the writer needs to know about each tensor before the first byte. */
typedef struct gk_st_spec {
	const char *name;
	gk_dtype dtype;
	int ndim;
	const uint64_t *shape;
} gk_st_spec;

/*
 * Build the header the reference writes for these tensors: tensors sorted
 * by dtype (the reference's Dtype order, widest kinds first) then name,
 * compact JSON, __metadata__ first when nmeta > 0 (in the order given:
 * the reference uses a hash map, so with two or more keys its order is
 * arbitrary), padded with spaces to a multiple of 8. *order (malloc'ed,
 * may be NULL) receives spec indices in file order. Returns the whole
 * prefix (u64 length + header) in *hdr, *hdr_len.
 */
int gk_st_header(const gk_st_spec *t, size_t n, const gk_st_kv *meta,
		 size_t nmeta, char **hdr, size_t *hdr_len, size_t **order,
		 uint64_t *data_len, gk_err *err);

/*
 * Streaming writer. gk_st_writer_open writes the header to a temp file
 * beside path (gk_atomic; "-" is stdout); then the data of each tensor is
 * appended in file order (gk_st_writer_next says which tensor comes next)
 * from buffers, from other files (copy_file_range, falling back to pread
 * and write), or converted between float types. gk_st_writer_close checks
 * that every byte was written, then fsyncs and renames into place; abort
 * removes the temp. Memory: the header and one 4 MiB buffer.
 */
typedef struct gk_st_writer gk_st_writer;

int gk_st_writer_open(gk_st_writer **out, const char *path,
		      const gk_st_spec *t, size_t n, const gk_st_kv *meta,
		      size_t nmeta, gk_err *err);
/* Spec index of the tensor whose bytes come next; n when all are done. */
size_t gk_st_writer_next(const gk_st_writer *w);
/* Bytes of data still owed to the current tensor. */
uint64_t gk_st_writer_left(const gk_st_writer *w);
int gk_st_writer_write(gk_st_writer *w, const void *buf, size_t n,
		       gk_err *err);
/*
 * Append n bytes of fd at off (name for messages). The copy may be made
 * later, joined with the next ones when they continue in the same file:
 * fd must stay open and unchanged, and name valid, until the next call on
 * w; a read error may then be reported by that call or by close.
 */
int gk_st_writer_copy(gk_st_writer *w, int fd, uint64_t off, uint64_t n,
		      const char *name, gk_err *err);
/* Append nel elements of src_dt read from fd at off, converted to the
 * current tensor's dtype (gk_convert: round to nearest even). */
int gk_st_writer_convert(gk_st_writer *w, int fd, uint64_t off,
			 gk_dtype src_dt, uint64_t nel, const char *name,
			 gk_err *err);
/* Bytes written so far (header included), for progress. */
uint64_t gk_st_writer_done(const gk_st_writer *w);
int gk_st_writer_close(gk_st_writer *w, gk_err *err);
void gk_st_writer_abort(gk_st_writer *w);

/* Write whole in-memory tensors (data[i] holds tensor i) to path. */
int gk_st_save(const char *path, const gk_st_spec *t, const void *const *data,
	       size_t n, const gk_st_kv *meta, size_t nmeta, gk_err *err);

#endif
