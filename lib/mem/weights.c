/*
 * weights.c - a model's exact parameter count and dtypes from a safetensors
 * checkpoint (one file, or the Hugging Face index of a sharded one).
 */
#include <fcntl.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem/mem.h"

/* safetensors refuses headers above 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE). */
#define MAX_HEADER 100000000ULL

/*
 * The header of one safetensors file: u64 little-endian length N, then N
 * bytes of JSON. Only what counting needs is checked here: each tensor's
 * dtype, shape and data_offsets agree with each other and with the file's
 * size. This is the one place lib/mem reads safetensors itself; lib/st's
 * header reader replaces it once that module exists.
 */
static json_t *read_st_header(const char *path, gk_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		gk_err_sys(err, errno, "open '%s'", path);
		return NULL;
	}
	json_t *j = NULL;
	char *buf = NULL;
	struct stat st;
	unsigned char lenb[8];
	if (fstat(fd, &st) < 0) {
		gk_err_sys(err, errno, "stat '%s'", path);
		goto out;
	}
	if (gk_read_exact(fd, lenb, 8, path, err))
		goto out;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | lenb[i];
	if (n > MAX_HEADER || n + 8 > (uint64_t)st.st_size) {
		gk_errf(err, "safetensors '%s': header length %llu does not fit "
			"the file of %lld bytes", path, (unsigned long long)n,
			(long long)st.st_size);
		goto out;
	}
	buf = malloc(n ? n : 1);
	if (!buf) {
		gk_errf(err, "safetensors '%s': out of memory", path);
		goto out;
	}
	if (gk_read_exact(fd, buf, n, path, err))
		goto out;
	j = gk_json_load_buf(buf, n, path, err);
	if (!j)
		goto out;
	uint64_t data = (uint64_t)st.st_size - 8 - n;
	const char *name;
	json_t *t;
	json_object_foreach(j, name, t) {
		if (strcmp(name, "__metadata__") == 0)
			continue;
		json_t *dt = json_object_get(t, "dtype");
		json_t *sh = json_object_get(t, "shape");
		json_t *off = json_object_get(t, "data_offsets");
		gk_dtype d = json_is_string(dt) ?
			gk_dtype_from_name(json_string_value(dt)) : GK_DT_INVALID;
		uint64_t numel = 1, bits;
		size_t i;
		json_t *x;
		if (d == GK_DT_INVALID) {
			gk_errf(err, "safetensors '%s': tensor '%s': unknown dtype "
				"'%s'", path, name, json_is_string(dt) ?
				json_string_value(dt) : "(none)");
			goto bad;
		}
		if (!json_is_array(sh) || !json_is_array(off) ||
		    json_array_size(off) != 2) {
			gk_errf(err, "safetensors '%s': tensor '%s': needs shape "
				"and data_offsets", path, name);
			goto bad;
		}
		json_array_foreach(sh, i, x) {
			if (!json_is_integer(x) || json_integer_value(x) < 0 ||
			    gk_mul_overflow(numel, json_integer_value(x), &numel)) {
				gk_errf(err, "safetensors '%s': tensor '%s': bad "
					"shape", path, name);
				goto bad;
			}
		}
		json_t *jb = json_array_get(off, 0), *je = json_array_get(off, 1);
		json_int_t b = json_integer_value(jb), e = json_integer_value(je);
		if (!json_is_integer(jb) || !json_is_integer(je) || b < 0 || e < b) {
			gk_errf(err, "safetensors '%s': tensor '%s': bad "
				"data_offsets", path, name);
			goto bad;
		}
		if ((uint64_t)e > data) {
			gk_errf(err, "safetensors '%s': tensor '%s': data_offsets "
				"end %lld is past the %llu data bytes", path, name,
				(long long)e, (unsigned long long)data);
			goto bad;
		}
		if (gk_mul_overflow(numel, gk_dtype_bits(d), &bits) ||
		    (uint64_t)(e - b) != (bits + 7) / 8) {
			gk_errf(err, "safetensors '%s': tensor '%s': data_offsets "
				"hold %lld bytes, shape and dtype need %llu", path,
				name, (long long)(e - b),
				(unsigned long long)((bits + 7) / 8));
			goto bad;
		}
		/* Keep what counting needs in the object itself. */
		json_object_set_new(t, "numel", json_integer((json_int_t)numel));
		json_object_set_new(t, "dt", json_integer(d));
	}
	goto out;
bad:
	json_decref(j);
	j = NULL;
out:
	free(buf);
	close(fd);
	return j;
}

/* "model.layers.12.mlp..." or "transformer.h.3.attn..." -> 12, 3; else -1. */
static long layer_index(const char *name)
{
	static const char *marks[] = {".layers.", ".h.", "layers.", "h."};
	for (size_t i = 0; i < GK_ARRAY_SIZE(marks); i++) {
		const char *p = strstr(name, marks[i]);
		if (!p || (i >= 2 && p != name))
			continue;
		p += strlen(marks[i]);
		char *end;
		long v = strtol(p, &end, 10);
		if (end != p && *end == '.' && v >= 0 && v < 1000000)
			return v;
	}
	return -1;
}

typedef struct count {
	gk_mem_model *m;
	uint64_t *layer; /* params per layer index */
	long nlayer;
	uint64_t tensors;
} count;

static int add_file(count *c, const char *path, json_t *want, gk_err *err)
{
	json_t *h = read_st_header(path, err);
	if (!h)
		return -1;
	const char *name;
	json_t *t;
	int rc = -1;
	json_object_foreach(h, name, t) {
		if (strcmp(name, "__metadata__") == 0)
			continue;
		if (want) {
			json_t *w = json_object_get(want, name);
			/* an index maps each tensor to exactly one shard */
			if (!w || strcmp(json_string_value(w), "") == 0)
				continue;
			json_object_set_new(want, name, json_string(""));
		}
		uint64_t n = json_integer_value(json_object_get(t, "numel"));
		gk_dtype d = json_integer_value(json_object_get(t, "dt"));
		json_t *sh = json_object_get(t, "shape");
		c->m->params += n;
		c->m->dtype_params[d] += n;
		c->tensors++;
		if (json_array_size(sh) == 2)
			c->m->factored +=
				json_integer_value(json_array_get(sh, 0)) +
				json_integer_value(json_array_get(sh, 1));
		else
			c->m->factored += n;
		if (n > c->m->largest)
			c->m->largest = n;
		long li = layer_index(name);
		if (li >= 0) {
			if (li >= c->nlayer) {
				uint64_t *p = realloc(c->layer,
						      (li + 1) * sizeof(*p));
				if (!p) {
					gk_errf(err, "out of memory");
					goto out;
				}
				memset(p + c->nlayer, 0,
				       (li + 1 - c->nlayer) * sizeof(*p));
				c->layer = p;
				c->nlayer = li + 1;
			}
			c->layer[li] += n;
		}
	}
	rc = 0;
out:
	json_decref(h);
	return rc;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int add_index(count *c, const char *path, gk_err *err)
{
	json_t *j = gk_json_load_file(path, 64 << 20, err);
	if (!j)
		return -1;
	int rc = -1;
	char *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
	json_t *map = json_object_get(j, "weight_map"), *todo = NULL;
	json_t *done = json_object();
	if (!dir || !done) {
		gk_errf(err, "out of memory");
		goto out;
	}
	if (slash)
		slash[1] = 0;
	else
		dir[0] = 0;
	if (!json_is_object(map)) {
		gk_errf(err, "index '%s': no 'weight_map' object", path);
		goto out;
	}
	todo = json_deep_copy(map);
	const char *tensor;
	json_t *file;
	json_object_foreach(map, tensor, file) {
		const char *f = json_string_value(file);
		if (!f || !*f || strchr(f, '/') || strcmp(f, "..") == 0) {
			gk_errf(err, "index '%s': tensor '%s': shard name is not "
				"a file name in the index's directory", path,
				tensor);
			goto out;
		}
		if (json_object_get(done, f))
			continue;
		char shard[PATH_MAX];
		if (snprintf(shard, sizeof(shard), "%s%s", dir, f) >=
		    (int)sizeof(shard)) {
			gk_errf(err, "index '%s': shard '%s': path too long",
				path, f);
			goto out;
		}
		if (add_file(c, shard, todo, err))
			goto out;
		json_object_set_new(done, f, json_true());
	}
	json_object_foreach(todo, tensor, file) {
		if (strcmp(json_string_value(file), "") != 0) {
			gk_errf(err, "index '%s': tensor '%s': not in its shard "
				"'%s'", path, tensor, json_string_value(file));
			goto out;
		}
	}
	rc = 0;
out:
	json_decref(todo);
	json_decref(done);
	json_decref(j);
	free(dir);
	return rc;
}

int gk_mem_model_from_safetensors(gk_mem_model *m, const char *path,
				  gk_err *err)
{
	memset(m, 0, sizeof(*m));
	m->arch = GK_MEM_ARCH_PARAMS;
	count c = {.m = m};
	int rc = ends_with(path, ".json") ? add_index(&c, path, err)
					  : add_file(&c, path, NULL, err);
	if (rc == 0 && m->params == 0)
		rc = gk_errf(err, "safetensors '%s': no tensors", path);
	if (rc == 0) {
		uint64_t best = 0;
		for (int d = 0; d < GK_DT_COUNT; d++)
			if (m->dtype_params[d] > best) {
				best = m->dtype_params[d];
				m->dtype = d;
			}
		for (long i = 0; i < c.nlayer; i++)
			if (c.layer[i] > m->layer_params)
				m->layer_params = c.layer[i];
		m->layers = c.nlayer;
		rc = gk_mem_model_finish(m, err);
	}
	free(c.layer);
	return rc;
}
