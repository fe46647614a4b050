/*
 * write.c - the safetensors writer: the reference's header bytes, then the
 * data streamed in from buffers, other files or a dtype conversion.
 * reference: huggingface/safetensors safetensors/src/tensor.rs `prepare`
 * and serde_json's compact serializer (its string escapes).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st/st.h"

#define CHUNK ((size_t)4 << 20)

typedef struct sbuf {
	char *p;
	size_t n, cap;
	int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (GK_GROW(b->p, b->cap, b->n + n + 1, "safetensors header", NULL)) {
		b->oom = 1;
		return;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void sb_str(sbuf *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

/* A JSON string as serde_json writes it: only '"', '\\' and controls escaped. */
static void sb_json(sbuf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	sb_put(b, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char e[7];
		switch (*p) {
		case '"': sb_put(b, "\\\"", 2); continue;
		case '\\': sb_put(b, "\\\\", 2); continue;
		case '\b': sb_put(b, "\\b", 2); continue;
		case '\f': sb_put(b, "\\f", 2); continue;
		case '\n': sb_put(b, "\\n", 2); continue;
		case '\r': sb_put(b, "\\r", 2); continue;
		case '\t': sb_put(b, "\\t", 2); continue;
		}
		if (*p < 0x20) {
			memcpy(e, "\\u00", 4);
			e[4] = hex[*p >> 4];
			e[5] = hex[*p & 15];
			sb_put(b, e, 6);
		} else {
			sb_put(b, (const char *)p, 1);
		}
	}
	sb_put(b, "\"", 1);
}

static void sb_u64(sbuf *b, uint64_t v)
{
	char num[24];
	sb_put(b, num, (size_t)snprintf(num, sizeof(num), "%" PRIu64, v));
}

static const gk_st_spec *sort_specs;

/* The reference's order: Dtype descending (its enum is in alignment
 * order, which ours mirrors), then name as bytes. */
static int by_dtype_name(const void *a, const void *b)
{
	const gk_st_spec *x = &sort_specs[*(const size_t *)a];
	const gk_st_spec *y = &sort_specs[*(const size_t *)b];
	if (x->dtype != y->dtype)
		return x->dtype > y->dtype ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(sort_specs[*(const size_t *)a].name,
		      sort_specs[*(const size_t *)b].name);
}

int gk_st_header(const gk_st_spec *t, size_t n, const gk_st_kv *meta,
		 size_t nmeta, char **hdr, size_t *hdr_len, size_t **order_out,
		 uint64_t *data_len, gk_err *err)
{
	size_t *order = malloc((n + 1) * sizeof(*order));
	sbuf b = {0};
	if (!order)
		return gk_err_sys(err, ENOMEM, "safetensors header");
	for (size_t i = 0; i < n; i++) {
		order[i] = i;
		if (!t[i].name || strcmp(t[i].name, "__metadata__") == 0 ||
		    !gk_dtype_bits(t[i].dtype) || t[i].dtype == GK_DT_INVALID) {
			free(order);
			return gk_errf(err, "safetensors header: tensor '%s': bad name or dtype",
				       t[i].name ? t[i].name : "(null)");
		}
	}
	/* Names must be unique whatever their dtypes: check in name order. */
	sort_specs = t;
	qsort(order, n, sizeof(*order), by_name);
	for (size_t i = 1; i < n; i++)
		if (strcmp(t[order[i]].name, t[order[i - 1]].name) == 0) {
			gk_errf(err, "safetensors header: tensor '%s' given twice",
				t[order[i]].name);
			free(order);
			return -1;
		}
	/* qsort is not stable, but (dtype, name) is a total order on unique names. */
	qsort(order, n, sizeof(*order), by_dtype_name);
	sb_put(&b, "\0\0\0\0\0\0\0\0{", 9);
	if (nmeta) {
		sb_str(&b, "\"__metadata__\":{");
		for (size_t i = 0; i < nmeta; i++) {
			if (i)
				sb_put(&b, ",", 1);
			sb_json(&b, meta[i].key);
			sb_put(&b, ":", 1);
			sb_json(&b, meta[i].value);
		}
		sb_put(&b, "}", 1);
	}
	uint64_t off = 0;
	for (size_t k = 0; k < n; k++) {
		const gk_st_spec *s = &t[order[k]];
		uint64_t nel = 1, nb;
		for (int d = 0; d < s->ndim; d++)
			if (gk_mul_overflow(nel, s->shape[d], &nel))
				goto overflow;
		if (gk_st_nbytes(s->dtype, nel, &nb) || gk_add_overflow(off, nb, &nb))
			goto overflow;
		if (k || nmeta)
			sb_put(&b, ",", 1);
		sb_json(&b, s->name);
		sb_str(&b, ":{\"dtype\":");
		sb_json(&b, gk_dtype_name(s->dtype));
		sb_str(&b, ",\"shape\":[");
		for (int d = 0; d < s->ndim; d++) {
			if (d)
				sb_put(&b, ",", 1);
			sb_u64(&b, s->shape[d]);
		}
		sb_str(&b, "],\"data_offsets\":[");
		sb_u64(&b, off);
		sb_put(&b, ",", 1);
		sb_u64(&b, nb);
		sb_str(&b, "]}");
		off = nb;
	}
	sb_put(&b, "}", 1);
	/* Pad with spaces so the data, and every tensor in it, starts 8-aligned. */
	while ((b.n - 8) % 8)
		sb_put(&b, " ", 1);
	if (b.oom) {
		free(b.p);
		free(order);
		return gk_err_sys(err, ENOMEM, "safetensors header");
	}
	uint64_t hl = b.n - 8;
	if (hl > GK_ST_MAX_HEADER) {
		free(b.p);
		free(order);
		return gk_errf(err, "safetensors header: %" PRIu64 " bytes, over the limit of %llu",
			       hl, GK_ST_MAX_HEADER);
	}
	for (int i = 0; i < 8; i++)
		b.p[i] = (char)(hl >> (8 * i));
	*hdr = b.p;
	*hdr_len = b.n;
	*data_len = off;
	if (order_out)
		*order_out = order;
	else
		free(order);
	return 0;
overflow:
	free(b.p);
	free(order);
	return gk_errf(err, "safetensors header: tensor sizes overflow 64 bits");
}

struct gk_st_writer {
	gk_atomic *a;
	char *path;
	int fd;
	size_t n, cur;       /* tensors; position in file order */
	size_t *order;
	gk_dtype *dtype;     /* per spec index */
	uint64_t *size;      /* per spec index */
	uint64_t left;       /* bytes still owed to order[cur] */
	uint64_t done, total_left;
	char *buf;
	/*
	 * A copy not yet made: consecutive gk_st_writer_copy calls reading
	 * on from where the last one stopped in the same file (tensors kept
	 * in their order, as a merge of shards does) become one copy, so a
	 * checkpoint of small tensors costs a few large copies, not one
	 * system call per tensor.
	 */
	int pend_fd;
	uint64_t pend_off, pend_len;
	const char *pend_name;
	int size_fd;        /* the source whose size is known ... */
	uint64_t src_size;  /* ... so a short one fails at once */
};

static int flush(gk_st_writer *w, gk_err *err);

static void skip_empty(gk_st_writer *w)
{
	while (w->cur < w->n && w->left == 0) {
		if (++w->cur < w->n)
			w->left = w->size[w->order[w->cur]];
	}
}

int gk_st_writer_open(gk_st_writer **out, const char *path,
		      const gk_st_spec *t, size_t n, const gk_st_kv *meta,
		      size_t nmeta, gk_err *err)
{
	gk_st_writer *w = calloc(1, sizeof(*w));
	char *hdr = NULL;
	size_t hlen;
	uint64_t dlen;
	if (!w)
		return gk_err_sys(err, ENOMEM, "write '%s'", path);
	if (gk_st_header(t, n, meta, nmeta, &hdr, &hlen, &w->order, &dlen, err)) {
		free(w);
		return gk_err_prefix(err, "write '%s'", path);
	}
	w->n = n;
	w->pend_fd = w->size_fd = -1;
	w->path = strdup(path);
	w->dtype = malloc((n + 1) * sizeof(*w->dtype));
	w->size = malloc((n + 1) * sizeof(*w->size));
	if (!w->path || !w->dtype || !w->size) {
		gk_err_sys(err, ENOMEM, "write '%s'", path);
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t nel = 1;
		for (int d = 0; d < t[i].ndim; d++)
			nel *= t[i].shape[d]; /* checked by gk_st_header */
		w->dtype[i] = t[i].dtype;
		gk_st_nbytes(t[i].dtype, nel, &w->size[i]);
	}
	if (gk_atomic_open(&w->a, path, 0666, err))
		goto fail;
	w->fd = gk_atomic_fd(w->a);
	if (gk_write_full(w->fd, hdr, hlen) < 0) {
		gk_err_sys(err, errno, "write '%s'", path);
		goto fail;
	}
	free(hdr);
	w->done = hlen;
	w->total_left = dlen;
	w->left = n ? w->size[w->order[0]] : 0;
	skip_empty(w);
	*out = w;
	return 0;
fail:
	free(hdr);
	gk_st_writer_abort(w);
	return -1;
}

size_t gk_st_writer_next(const gk_st_writer *w)
{
	return w->cur < w->n ? w->order[w->cur] : w->n;
}

uint64_t gk_st_writer_left(const gk_st_writer *w)
{
	return w->cur < w->n ? w->left : 0;
}

uint64_t gk_st_writer_done(const gk_st_writer *w)
{
	return w->done;
}

/* Account for n bytes appended; they may run across tensor boundaries. */
static int consume(gk_st_writer *w, uint64_t n, gk_err *err)
{
	while (n) {
		if (w->cur >= w->n)
			return gk_errf(err, "write '%s': more data than the header declares",
				       w->path);
		uint64_t k = n < w->left ? n : w->left;
		w->left -= k;
		w->total_left -= k;
		n -= k;
		w->done += k;
		skip_empty(w);
	}
	return 0;
}

static uint64_t owed(const gk_st_writer *w)
{
	return w->total_left;
}

int gk_st_writer_write(gk_st_writer *w, const void *buf, size_t n,
		       gk_err *err)
{
	if (n > owed(w))
		return gk_errf(err, "write '%s': more data than the header declares",
			       w->path);
	if (flush(w, err))
		return -1;
	if (gk_write_full(w->fd, buf, n) < 0)
		return gk_err_sys(err, errno, "write '%s'", w->path);
	return consume(w, n, err);
}

static int get_buf(gk_st_writer *w, gk_err *err)
{
	if (!w->buf && !(w->buf = malloc(CHUNK)))
		return gk_err_sys(err, ENOMEM, "write '%s'", w->path);
	return 0;
}

/* Copy n bytes of fd at off to the end of the output. */
static int copy_range(gk_st_writer *w, int fd, uint64_t off, uint64_t n,
		      const char *name, gk_err *err)
{
	int kernel = 1;
	while (n) {
		if (kernel) {
			/* In-kernel copy: no trip through user memory, and a
			 * reflink on file systems that share extents. */
			loff_t in_off = (loff_t)off;
			size_t want = n > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
			ssize_t r = copy_file_range(fd, &in_off, w->fd, NULL, want, 0);
			if (r > 0) {
				off += (uint64_t)r;
				n -= (uint64_t)r;
				continue;
			}
			if (r == 0)
				return gk_errf(err, "read '%s': truncated (the file shrank)", name);
			if (errno == EINTR)
				continue;
			if (errno != EXDEV && errno != EINVAL && errno != ENOSYS &&
			    errno != EOPNOTSUPP && errno != EBADF && errno != EPERM)
				return gk_err_sys(err, errno, "copy '%s' to '%s'", name,
						  w->path);
			kernel = 0;
		}
		if (get_buf(w, err))
			return -1;
		size_t want = n > CHUNK ? CHUNK : (size_t)n;
		ssize_t r = gk_pread_full(fd, w->buf, want, (off_t)off);
		if (r < 0)
			return gk_err_sys(err, errno, "read '%s'", name);
		if ((size_t)r < want)
			return gk_errf(err, "read '%s': truncated (the file shrank)", name);
		if (gk_write_full(w->fd, w->buf, want) < 0)
			return gk_err_sys(err, errno, "write '%s'", w->path);
		off += want;
		n -= want;
	}
	return 0;
}

/* Make the pending copy; every other write to the output calls this first. */
static int flush(gk_st_writer *w, gk_err *err)
{
	if (w->pend_fd < 0)
		return 0;
	int rc = copy_range(w, w->pend_fd, w->pend_off, w->pend_len, w->pend_name, err);
	w->pend_fd = -1;
	w->pend_len = 0;
	return rc;
}

int gk_st_writer_copy(gk_st_writer *w, int fd, uint64_t off, uint64_t n,
		      const char *name, gk_err *err)
{
	if (n > owed(w))
		return gk_errf(err, "write '%s': more data than the header declares",
			       w->path);
	if (n == 0)
		return 0;
	if (w->size_fd != fd) {
		struct stat st;
		if (fstat(fd, &st) < 0)
			return gk_err_sys(err, errno, "stat '%s'", name);
		w->size_fd = fd;
		w->src_size = (uint64_t)st.st_size;
	}
	if (off > w->src_size || n > w->src_size - off)
		return gk_errf(err, "read '%s': truncated (the file shrank)", name);
	if (w->pend_fd != fd || w->pend_off + w->pend_len != off) {
		if (flush(w, err))
			return -1;
		w->pend_fd = fd;
		w->pend_off = off;
		w->pend_name = name;
	}
	w->pend_len += n;
	return consume(w, n, err);
}

int gk_st_writer_convert(gk_st_writer *w, int fd, uint64_t off,
			 gk_dtype src_dt, uint64_t nel, const char *name,
			 gk_err *err)
{
	if (w->cur >= w->n)
		return gk_errf(err, "write '%s': more data than the header declares",
			       w->path);
	gk_dtype dst_dt = w->dtype[w->order[w->cur]];
	unsigned sb = gk_dtype_bits(src_dt) / 8, db = gk_dtype_bits(dst_dt) / 8;
	if (!gk_dtype_is_float(src_dt) || !gk_dtype_is_float(dst_dt))
		return gk_errf(err, "write '%s': cannot convert %s to %s", w->path,
			       gk_dtype_name(src_dt), gk_dtype_name(dst_dt));
	if (nel > w->left / db)
		return gk_errf(err, "write '%s': more data than the header declares",
			       w->path);
	if (get_buf(w, err) || flush(w, err))
		return -1;
	/* Source chunk and converted chunk share the buffer: widening
	 * conversions are done in place from the end (see gk_convert). */
	size_t wide = sb > db ? sb : db;
	size_t per = CHUNK / wide;
	while (nel) {
		size_t k = nel > per ? per : (size_t)nel;
		ssize_t r = gk_pread_full(fd, w->buf, k * sb, (off_t)off);
		if (r < 0)
			return gk_err_sys(err, errno, "read '%s'", name);
		if ((size_t)r < k * sb)
			return gk_errf(err, "read '%s': truncated (the file shrank)", name);
		gk_convert(w->buf, dst_dt, w->buf, src_dt, k);
		if (gk_write_full(w->fd, w->buf, k * db) < 0)
			return gk_err_sys(err, errno, "write '%s'", w->path);
		if (consume(w, k * db, err))
			return -1;
		off += k * sb;
		nel -= k;
	}
	return 0;
}

static void writer_free(gk_st_writer *w)
{
	free(w->path);
	free(w->order);
	free(w->dtype);
	free(w->size);
	free(w->buf);
	free(w);
}

int gk_st_writer_close(gk_st_writer *w, gk_err *err)
{
	uint64_t left = owed(w);
	if (!left && flush(w, err)) {
		gk_st_writer_abort(w);
		return -1;
	}
	if (left) {
		gk_errf(err, "write '%s': %" PRIu64 " bytes of tensor data never written",
			w->path, left);
		gk_st_writer_abort(w);
		return -1;
	}
	int rc = gk_atomic_commit(w->a, err);
	w->a = NULL;
	writer_free(w);
	return rc;
}

void gk_st_writer_abort(gk_st_writer *w)
{
	if (!w)
		return;
	if (w->a)
		gk_atomic_abort(w->a);
	writer_free(w);
}

int gk_st_save(const char *path, const gk_st_spec *t, const void *const *data,
	       size_t n, const gk_st_kv *meta, size_t nmeta, gk_err *err)
{
	gk_st_writer *w;
	if (gk_st_writer_open(&w, path, t, n, meta, nmeta, err))
		return -1;
	size_t i;
	while ((i = gk_st_writer_next(w)) < n)
		if (gk_st_writer_write(w, data[i], gk_st_writer_left(w), err)) {
			gk_st_writer_abort(w);
			return -1;
		}
	return gk_st_writer_close(w, err);
}
