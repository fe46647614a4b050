/*
 * manifest.c - the dataset manifest: the shards of a dataset with their
 * sample counts, sizes and XXH3 (gpukit-shard(5)), paths relative to the
 * manifest's directory.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shard/internal.h"

void gk_shard_tok_info_free(gk_shard_tok_info *t)
{
	for (size_t i = 0; i < t->nfiles; i++)
		free(t->files[i].path);
	free(t->files);
	memset(t, 0, sizeof(*t));
}

void gk_shard_manifest_free(gk_shard_manifest *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->v[i].path);
	free(m->v);
	free(m->dir);
	gk_shard_tok_info_free(&m->tok);
	memset(m, 0, sizeof(*m));
}

/* The "tokenizer" object of a manifest (gpukit-shard(5)); NULL: no memory. */
static json_t *tok_json(const gk_shard_tok_info *t)
{
	char hex[17];
	json_t *files = json_array(), *o = json_object();
	if (!files || !o) {
		json_decref(files);
		json_decref(o);
		return NULL;
	}
	json_object_set_new(o, "fingerprint", json_string(gk_xxh3_hex(t->fingerprint, hex)));
	json_object_set_new(o, "vocab_size", json_integer((json_int_t)t->vocab));
	json_object_set_new(o, "eot", json_integer((json_int_t)t->eot));
	json_object_set_new(o, "dtype", json_string(t->itemsize == 2 ? "<u2" : "<i4"));
	json_object_set_new(o, "tokens", json_integer((json_int_t)t->tokens));
	for (size_t i = 0; i < t->nfiles; i++)
		json_array_append_new(files, json_pack("{s:s, s:s}", "path", t->files[i].path,
						       "xxh3", gk_xxh3_hex(t->files[i].xxh3, hex)));
	json_object_set_new(o, "files", files);
	return o;
}

static int tok_load(const json_t *o, gk_shard_tok_info *t, gk_err *err)
{
	const char *fp, *dtype, *p, *hex;
	int64_t vocab, eot, tokens;
	json_t *files = json_object_get(o, "files");
	if (!json_is_object(o))
		return gk_errf(err, "not an object");
	if (gk_json_get_str(o, "fingerprint", &fp, err) < 0 ||
	    gk_xxh3_parse(fp, &t->fingerprint, err) < 0 ||
	    gk_json_get_int(o, "vocab_size", &vocab, err) < 0 ||
	    gk_json_get_int(o, "eot", &eot, err) < 0 ||
	    gk_json_get_str(o, "dtype", &dtype, err) < 0 ||
	    gk_json_get_int(o, "tokens", &tokens, err) < 0)
		return -1;
	if (vocab < 1 || vocab > (int64_t)GK_TOK_MAX_ID + 1 || eot < 0 || eot >= vocab ||
	    tokens < 0)
		return gk_errf(err, "vocab_size %lld, eot %lld or tokens %lld out of range",
			       (long long)vocab, (long long)eot, (long long)tokens);
	if (strcmp(dtype, "<u2") != 0 && strcmp(dtype, "<i4") != 0)
		return gk_errf(err, "dtype '%s' is not <u2 or <i4", dtype);
	if (!json_is_array(files))
		return gk_errf(err, "'files' is not an array");
	t->vocab = (uint64_t)vocab;
	t->eot = eot;
	t->itemsize = dtype[2] == '2' ? 2 : 4;
	t->tokens = (uint64_t)tokens;
	size_t n = json_array_size(files), cap = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *f = json_array_get(files, i);
		uint64_t h;
		if (gk_json_get_str(f, "path", &p, err) < 0 ||
		    gk_json_get_str(f, "xxh3", &hex, err) < 0 || gk_xxh3_parse(hex, &h, err) < 0)
			return gk_err_prefix(err, "file %zu", i);
		if (GK_GROW(t->files, cap, t->nfiles + 1, "manifest", err) < 0)
			return -1;
		if (!(t->files[t->nfiles].path = strdup(p)))
			return gk_err_sys(err, ENOMEM, "manifest");
		t->files[t->nfiles++].xxh3 = h;
	}
	t->present = 1;
	return 0;
}

int gk_shard_manifest_add(gk_shard_manifest *m, const char *path,
			  uint64_t samples, uint64_t bytes, uint64_t xxh3,
			  gk_err *err)
{
	if (GK_GROW(m->v, m->cap, m->n + 1, "manifest", err) < 0)
		return -1;
	gk_shard_info *v = m->v;
	if (!(v[m->n].path = strdup(path)))
		return gk_err_sys(err, ENOMEM, "manifest");
	v[m->n].samples = samples;
	v[m->n].bytes = bytes;
	v[m->n].xxh3 = xxh3;
	m->n++;
	m->samples += samples;
	m->bytes += bytes;
	return 0;
}

int gk_shard_manifest_locate(const gk_shard_manifest *m, uint64_t global,
			     size_t *shard, uint64_t *local)
{
	/* Binary search would need a prefix table; shard lists are short. */
	for (size_t i = 0; i < m->n; i++) {
		if (global < m->v[i].samples) {
			*shard = i;
			*local = global;
			return 0;
		}
		global -= m->v[i].samples;
	}
	return -1;
}

char *gk_shard_manifest_file(const gk_shard_manifest *m, size_t i)
{
	char *p;
	const char *path = m->v[i].path;
	if (path[0] == '/' || !m->dir || !*m->dir)
		return strdup(path);
	return asprintf(&p, "%s/%s", m->dir, path) < 0 ? NULL : p;
}

/* dirname of path as a new string ("" for the current directory). */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup("");
	return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* The shard path relative to the manifest's directory, when it is under it. */
static const char *relative_to(const char *shard, char *rel, size_t len,
			       const char *mdir)
{
	char a[PATH_MAX], b[PATH_MAX];
	char *sdir = dir_of(shard);
	const char *base = strrchr(shard, '/');
	base = base ? base + 1 : shard;
	if (!sdir || !realpath(*sdir ? sdir : ".", a) || !realpath(*mdir ? mdir : ".", b)) {
		free(sdir);
		return shard;
	}
	free(sdir);
	size_t bl = strlen(b);
	if (strcmp(a, b) == 0)
		snprintf(rel, len, "%s", base);
	else if (strncmp(a, b, bl) == 0 && a[bl] == '/')
		snprintf(rel, len, "%s/%s", a + bl + 1, base);
	else
		snprintf(rel, len, "%s/%s", a, base);
	return rel;
}

int gk_shard_manifest_write(const char *path, const gk_shard_manifest *m,
			    gk_err *err)
{
	char *mdir = dir_of(path);
	json_t *shards = json_array(), *root = json_object();
	char rel[2 * PATH_MAX + 2], hex[17];
	if (!mdir || !shards || !root)
		goto nomem;
	json_object_set_new(root, "format", json_string("gpukit-shards"));
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "samples", json_integer((json_int_t)m->samples));
	json_object_set_new(root, "bytes", json_integer((json_int_t)m->bytes));
	for (size_t i = 0; i < m->n; i++) {
		json_t *s = json_object();
		if (!s)
			goto nomem;
		json_object_set_new(s, "path", json_string(relative_to(m->v[i].path, rel,
								       sizeof(rel), mdir)));
		json_object_set_new(s, "samples", json_integer((json_int_t)m->v[i].samples));
		json_object_set_new(s, "bytes", json_integer((json_int_t)m->v[i].bytes));
		json_object_set_new(s, "xxh3", json_string(gk_xxh3_hex(m->v[i].xxh3, hex)));
		json_array_append_new(shards, s);
	}
	json_object_set(root, "shards", shards);
	if (m->tok.present) {
		json_t *t = tok_json(&m->tok);
		if (!t)
			goto nomem;
		json_object_set_new(root, "tokenizer", t);
	}
	int rc = gk_json_write_file(path, root, err);
	json_decref(shards);
	json_decref(root);
	free(mdir);
	return rc;
nomem:
	json_decref(shards);
	json_decref(root);
	free(mdir);
	return gk_err_sys(err, ENOMEM, "manifest '%s'", path);
}

int gk_shard_manifest_load(const char *path, gk_shard_manifest *m, gk_err *err)
{
	memset(m, 0, sizeof(*m));
	json_t *root = gk_json_load_file(path, (size_t)1 << 30, err);
	if (!root)
		return -1;
	const char *fmt, *p, *hex;
	int64_t v, samples, bytes, total_samples, total_bytes;
	json_t *shards = json_object_get(root, "shards");
	if (gk_json_get_str(root, "format", &fmt, err) < 0 ||
	    gk_json_get_int(root, "version", &v, err) < 0 ||
	    gk_json_get_int(root, "samples", &total_samples, err) < 0 ||
	    gk_json_get_int(root, "bytes", &total_bytes, err) < 0) {
		gk_err_prefix(err, "manifest '%s'", path);
		goto fail;
	}
	if (strcmp(fmt, "gpukit-shards") != 0 || v != 1) {
		gk_errf(err, "manifest '%s': not a gpukit-shards version 1 manifest", path);
		goto fail;
	}
	if (!json_is_array(shards)) {
		gk_errf(err, "manifest '%s': 'shards' is not an array", path);
		goto fail;
	}
	for (size_t i = 0; i < json_array_size(shards); i++) {
		json_t *s = json_array_get(shards, i);
		uint64_t h;
		if (gk_json_get_str(s, "path", &p, err) < 0 ||
		    gk_json_get_int(s, "samples", &samples, err) < 0 ||
		    gk_json_get_int(s, "bytes", &bytes, err) < 0 ||
		    gk_json_get_str(s, "xxh3", &hex, err) < 0 ||
		    gk_xxh3_parse(hex, &h, err) < 0) {
			gk_err_prefix(err, "manifest '%s' shard %zu", path, i);
			goto fail;
		}
		if (samples < 0 || bytes < 0) {
			gk_errf(err, "manifest '%s' shard %zu: negative count", path, i);
			goto fail;
		}
		if (gk_shard_manifest_add(m, p, (uint64_t)samples, (uint64_t)bytes, h, err) < 0)
			goto fail;
	}
	json_t *tok = json_object_get(root, "tokenizer");
	if (tok && tok_load(tok, &m->tok, err) < 0) {
		gk_err_prefix(err, "manifest '%s': tokenizer", path);
		goto fail;
	}
	/* The totals are redundant: a disagreement means an edited or mixed manifest. */
	if ((uint64_t)total_samples != m->samples || (uint64_t)total_bytes != m->bytes) {
		gk_errf(err, "manifest '%s': totals say %lld samples, %lld bytes; its shards add up to %llu samples, %llu bytes",
			path, (long long)total_samples, (long long)total_bytes,
			(unsigned long long)m->samples, (unsigned long long)m->bytes);
		goto fail;
	}
	if (!(m->dir = dir_of(path))) {
		gk_err_sys(err, ENOMEM, "manifest '%s'", path);
		goto fail;
	}
	json_decref(root);
	return 0;
fail:
	json_decref(root);
	gk_shard_manifest_free(m);
	return -1;
}
