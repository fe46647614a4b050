/*
 * st.c - the safetensors reader and validator.
 * reference: huggingface/safetensors safetensors/src/tensor.rs
 * (SafeTensors::read_metadata, Metadata::validate).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st/st.h"

static const char lfs_magic[] = "version https://git-lfs.github.com/spec/";

uint64_t gk_st_numel(const gk_st_tensor *t)
{
	uint64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		if (gk_mul_overflow(n, t->shape[i], &n))
			return 0;
	return n;
}

int gk_st_nbytes(gk_dtype dt, uint64_t n, uint64_t *out)
{
	uint64_t bits;
	if (gk_mul_overflow(n, gk_dtype_bits(dt), &bits) || bits % 8)
		return -1;
	*out = bits / 8;
	return 0;
}

char *gk_st_shape_str(const uint64_t *shape, int ndim, char *buf, size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < ndim && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, "%s%" PRIu64, i ? ", " : "",
				      shape[i]);
	if (k < len)
		snprintf(buf + k, len - k, "]");
	return buf;
}

/*
 * Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF),
 * what Rust's str::from_utf8 accepts. Returns the offset of the first bad
 * byte, or len.
 */
static size_t utf8_valid(const unsigned char *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		unsigned c = s[i];
		size_t n;
		unsigned lo = 0x80, hi = 0xbf;
		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			if (c == 0xe0)
				lo = 0xa0;
			if (c == 0xed)
				hi = 0x9f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			if (c == 0xf0)
				lo = 0x90;
			if (c == 0xf4)
				hi = 0x8f;
		} else {
			return i;
		}
		if (i + n >= len)
			return i;
		for (size_t k = 1; k <= n; k++) {
			unsigned b = s[i + k];
			unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
			if (b < l || b > h)
				return i;
		}
		i += n + 1;
	}
	return len;
}

void gk_st_close(gk_st_file *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++) {
		free(f->t[i].name);
		free(f->t[i].shape);
	}
	for (size_t i = 0; i < f->nmeta; i++) {
		free(f->meta[i].key);
		free(f->meta[i].value);
	}
	if (f->fd >= 0)
		close(f->fd);
	free(f->t);
	free(f->by_name);
	free(f->meta);
	free(f->path);
	free(f);
}

static int by_offset(const void *a, const void *b)
{
	const gk_st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

static const gk_st_tensor *name_sort;
static int by_name(const void *a, const void *b)
{
	return strcmp(name_sort[*(const size_t *)a].name,
		      name_sort[*(const size_t *)b].name);
}

static int get_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_tensor(gk_st_tensor *t, const char *name, const json_t *v,
			const char *path, gk_err *err)
{
	const json_t *dt, *shape, *offs;
	if (!json_is_object(v))
		return gk_errf(err, "read '%s': tensor '%s': entry is not an object",
			       path, name);
	if (!(dt = json_object_get(v, "dtype")))
		return gk_errf(err, "read '%s': tensor '%s': no dtype", path, name);
	if (!(shape = json_object_get(v, "shape")))
		return gk_errf(err, "read '%s': tensor '%s': no shape", path, name);
	if (!(offs = json_object_get(v, "data_offsets")))
		return gk_errf(err, "read '%s': tensor '%s': no data_offsets", path,
			       name);
	if (!json_is_string(dt))
		return gk_errf(err, "read '%s': tensor '%s': dtype is not a string",
			       path, name);
	t->dtype = gk_dtype_from_name(json_string_value(dt));
	if (t->dtype == GK_DT_INVALID)
		return gk_errf(err, "read '%s': tensor '%s': unknown dtype '%s'",
			       path, name, json_string_value(dt));
	if (!json_is_array(shape))
		return gk_errf(err, "read '%s': tensor '%s': shape is not a list",
			       path, name);
	t->ndim = (int)json_array_size(shape);
	if (json_array_size(shape) > 1024)
		return gk_errf(err, "read '%s': tensor '%s': shape has more than 1024 dimensions",
			       path, name);
	if (t->ndim && !(t->shape = calloc((size_t)t->ndim, sizeof(uint64_t))))
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	for (int i = 0; i < t->ndim; i++)
		if (get_u64(json_array_get(shape, (size_t)i), &t->shape[i]))
			return gk_errf(err, "read '%s': tensor '%s': shape is not a list of non-negative integers",
				       path, name);
	if (!json_is_array(offs) || json_array_size(offs) != 2 ||
	    get_u64(json_array_get(offs, 0), &t->begin) ||
	    get_u64(json_array_get(offs, 1), &t->end))
		return gk_errf(err, "read '%s': tensor '%s': data_offsets is not two non-negative integers",
			       path, name);
	if (t->end < t->begin)
		return gk_errf(err, "read '%s': tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
			       path, name, t->begin, t->end);
	uint64_t nel = 1, nbytes;
	char sh[128];
	for (int i = 0; i < t->ndim; i++)
		if (gk_mul_overflow(nel, t->shape[i], &nel))
			return gk_errf(err, "read '%s': tensor '%s': shape %s overflows 64 bits",
				       path, name, gk_st_shape_str(t->shape, t->ndim, sh, sizeof(sh)));
	uint64_t bits;
	if (gk_mul_overflow(nel, gk_dtype_bits(t->dtype), &bits))
		return gk_errf(err, "read '%s': tensor '%s': size of shape %s overflows 64 bits",
			       path, name, gk_st_shape_str(t->shape, t->ndim, sh, sizeof(sh)));
	if (bits % 8)
		return gk_errf(err, "read '%s': tensor '%s': %" PRIu64 " elements of %s are not a whole number of bytes",
			       path, name, nel, gk_dtype_name(t->dtype));
	nbytes = bits / 8;
	if (t->end - t->begin != nbytes)
		return gk_errf(err, "read '%s': tensor '%s': data_offsets span %" PRIu64 " bytes but %s %s needs %" PRIu64,
			       path, name, t->end - t->begin, gk_dtype_name(t->dtype),
			       gk_st_shape_str(t->shape, t->ndim, sh, sizeof(sh)), nbytes);
	return 0;
}

static int parse_meta(gk_st_file *f, const json_t *m, const char *path,
		      gk_err *err)
{
	const char *k;
	const json_t *v;
	if (!json_is_object(m))
		return gk_errf(err, "read '%s': __metadata__ is not an object", path);
	f->meta = calloc(json_object_size(m) + 1, sizeof(*f->meta));
	if (!f->meta)
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	json_object_foreach((json_t *)m, k, v) {
		if (!json_is_string(v))
			return gk_errf(err, "read '%s': __metadata__ '%s' is not a string",
				       path, k);
		gk_st_kv *kv = &f->meta[f->nmeta++];
		kv->key = strdup(k);
		kv->value = strdup(json_string_value(v));
		if (!kv->key || !kv->value)
			return gk_err_sys(err, ENOMEM, "read '%s'", path);
	}
	return 0;
}

/* Everything after the header bytes are in hand. */
static int parse_json(gk_st_file *f, const char *hdr, size_t hlen,
		      const char *path, gk_err *err)
{
	json_error_t je;
	size_t bad = utf8_valid((const unsigned char *)hdr, hlen);
	if (bad < hlen)
		return gk_errf(err, "read '%s': header is not UTF-8 (byte %zu)", path,
			       bad + 8);
	json_t *j = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		if (strstr(je.text, "duplicate"))
			return gk_errf(err, "read '%s': header has a duplicate key (line %d column %d)",
				       path, je.line, je.column);
		return gk_errf(err, "read '%s': header is not JSON: line %d column %d: %s",
			       path, je.line, je.column, je.text);
	}
	int rc = -1;
	const char *k;
	json_t *v;
	if (!json_is_object(j)) {
		gk_errf(err, "read '%s': header is not a JSON object", path);
		goto out;
	}
	f->t = calloc(json_object_size(j) + 1, sizeof(*f->t));
	if (!f->t) {
		gk_err_sys(err, ENOMEM, "read '%s'", path);
		goto out;
	}
	json_object_foreach(j, k, v) {
		if (strcmp(k, "__metadata__") == 0) {
			if (parse_meta(f, v, path, err))
				goto out;
			continue;
		}
		gk_st_tensor *t = &f->t[f->n++];
		if (!(t->name = strdup(k))) {
			gk_err_sys(err, ENOMEM, "read '%s'", path);
			goto out;
		}
		if (parse_tensor(t, k, v, path, err))
			goto out;
	}
	/* Writers order tensors as they like; the layout rules are by offset. */
	qsort(f->t, f->n, sizeof(*f->t), by_offset);
	if (!(f->by_name = malloc((f->n + 1) * sizeof(size_t)))) {
		gk_err_sys(err, ENOMEM, "read '%s'", path);
		goto out;
	}
	for (size_t i = 0; i < f->n; i++)
		f->by_name[i] = i;
	name_sort = f->t;
	qsort(f->by_name, f->n, sizeof(size_t), by_name);
	uint64_t at = 0;
	for (size_t i = 0; i < f->n; i++) {
		const gk_st_tensor *t = &f->t[i];
		if (t->begin > at) {
			gk_errf(err, "read '%s': tensor '%s': hole of %" PRIu64 " bytes before its data at offset %" PRIu64,
				path, t->name, t->begin - at, t->begin);
			goto out;
		}
		if (t->begin < at) {
			gk_errf(err, "read '%s': tensor '%s': data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s'",
				path, t->name, t->begin, t->end, f->t[i - 1].name);
			goto out;
		}
		at = t->end;
	}
	uint64_t have = f->size - f->data_off;
	if (at > have)
		gk_errf(err, "read '%s': truncated: tensor data ends at byte %" PRIu64 " but the file has %" PRIu64,
			path, f->data_off + at, f->size);
	else if (at < have)
		gk_errf(err, "read '%s': %" PRIu64 " bytes after the last tensor (the data must end the file)",
			path, have - at);
	else
		rc = 0;
out:
	json_decref(j);
	return rc;
}

/*
 * First checks, on the first bytes: enough bytes for the length, a git-lfs
 * pointer, the length limit, the header inside the file. Returns the header
 * length.
 */
static int check_prefix(const unsigned char *buf, size_t len,
			uint64_t file_size, const char *path, uint64_t *hlen,
			gk_err *err)
{
	size_t m = sizeof(lfs_magic) - 1;
	if (len >= m && memcmp(buf, lfs_magic, m) == 0)
		return gk_errf(err, "read '%s': a git-lfs pointer, not the file (run 'git lfs pull')",
			       path);
	if (file_size < 8)
		return gk_errf(err, "read '%s': not safetensors: %" PRIu64 " bytes, less than the 8-byte header length",
			       path, file_size);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | buf[i];
	if (n > GK_ST_MAX_HEADER)
		return gk_errf(err, "read '%s': not safetensors: header length %" PRIu64 " (its first 8 bytes) is over the limit of %llu bytes",
			       path, n, GK_ST_MAX_HEADER);
	if (n > file_size - 8)
		return gk_errf(err, "read '%s': truncated: header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)",
			       path, n, file_size);
	*hlen = n;
	return 0;
}

static gk_st_file *new_file(const char *path, uint64_t size, gk_err *err)
{
	gk_st_file *f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(path))) {
		free(f);
		gk_err_sys(err, ENOMEM, "read '%s'", path);
		return NULL;
	}
	f->fd = -1;
	f->size = size;
	return f;
}

int gk_st_parse(gk_st_file **out, const void *buf, size_t len,
		uint64_t file_size, const char *name, gk_err *err)
{
	uint64_t hlen;
	if (check_prefix(buf, len, file_size, name, &hlen, err))
		return -1;
	if (len < 8 || hlen > len - 8)
		return gk_errf(err, "read '%s': truncated: header length %" PRIu64 " but %zu bytes given",
			       name, hlen, len);
	gk_st_file *f = new_file(name, file_size, err);
	if (!f)
		return -1;
	f->data_off = 8 + hlen;
	if (parse_json(f, (const char *)buf + 8, hlen, name, err)) {
		gk_st_close(f);
		return -1;
	}
	*out = f;
	return 0;
}

int gk_st_open(gk_st_file **out, const char *path, gk_err *err)
{
	struct stat st;
	int fd = gk_open_regular(path, &st, err);
	if (fd < 0)
		return -1;
	unsigned char first[64];
	uint64_t size = (uint64_t)st.st_size, hlen;
	ssize_t got = gk_pread_full(fd, first, sizeof(first), 0);
	if (got < 0) {
		int e = errno;
		close(fd);
		return gk_err_sys(err, e, "read '%s'", path);
	}
	if (check_prefix(first, (size_t)got, size, path, &hlen, err)) {
		close(fd);
		return -1;
	}
	char *hdr = malloc(hlen + 1);
	if (!hdr) {
		close(fd);
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	}
	got = gk_pread_full(fd, hdr, hlen, 8);
	if (got != (ssize_t)hlen) {
		int e = errno;
		free(hdr);
		close(fd);
		if (got < 0)
			return gk_err_sys(err, e, "read '%s'", path);
		return gk_errf(err, "read '%s': truncated while reading the header", path);
	}
	gk_st_file *f = new_file(path, size, err);
	if (!f) {
		free(hdr);
		close(fd);
		return -1;
	}
	f->fd = fd;
	f->data_off = 8 + hlen;
	int rc = parse_json(f, hdr, hlen, path, err);
	free(hdr);
	if (rc) {
		gk_st_close(f);
		return -1;
	}
	*out = f;
	return 0;
}

const gk_st_tensor *gk_st_find(const gk_st_file *f, const char *name)
{
	size_t lo = 0, hi = f->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(f->t[f->by_name[mid]].name, name);
		if (c == 0)
			return &f->t[f->by_name[mid]];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const char *gk_st_meta_get(const gk_st_file *f, const char *key)
{
	for (size_t i = 0; i < f->nmeta; i++)
		if (strcmp(f->meta[i].key, key) == 0)
			return f->meta[i].value;
	return NULL;
}

int gk_st_read(const gk_st_file *f, const gk_st_tensor *t, uint64_t off,
	       void *buf, size_t n, gk_err *err)
{
	if (off > t->end - t->begin || n > t->end - t->begin - off)
		return gk_errf(err, "read '%s': tensor '%s': range past its end",
			       f->path, t->name);
	ssize_t got = gk_pread_full(f->fd, buf, n,
				    (off_t)(f->data_off + t->begin + off));
	if (got < 0)
		return gk_err_sys(err, errno, "read '%s'", f->path);
	if ((size_t)got < n)
		return gk_errf(err, "read '%s': truncated (the file shrank)", f->path);
	return 0;
}
