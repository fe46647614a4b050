/*
 * write.c - carrying out a plan: streaming tensors (or rows of them) from
 * the input files into new safetensors files, converting dtypes on the
 * way, and the Hugging Face index; gk_ckpt_reshard, the check-plan-write
 * pipeline of ckpt-merge and ckpt-shard.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/internal.h"

typedef struct outspec {
	gk_st_spec *spec;
	uint64_t *shapes;
	gk_st_kv *meta;
	size_t nmeta;
} outspec;

static void outspec_free(outspec *o)
{
	for (size_t i = 0; i < o->nmeta; i++) {
		free(o->meta[i].key);
		free(o->meta[i].value);
	}
	free(o->meta);
	free(o->spec);
	free(o->shapes);
}

static int add_meta(outspec *o, const char *k, const char *v)
{
	gk_st_kv *kv = &o->meta[o->nmeta];
	kv->key = strdup(k);
	kv->value = strdup(v);
	if (!kv->key || !kv->value) {
		free(kv->key);
		free(kv->value);
		return -1;
	}
	o->nmeta++;
	return 0;
}

static int build_spec(const gk_ckpt_set *s, const gk_ckpt_plan *p, size_t k,
		      outspec *o, gk_err *err)
{
	const gk_ckpt_outfile *f = &p->f[k];
	size_t dims = 0;
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < f->n; i++)
		dims += (size_t)s->e[f->items[i].entry].ndim;
	o->spec = calloc(f->n + 1, sizeof(*o->spec));
	o->shapes = calloc(dims + 1, sizeof(uint64_t));
	o->meta = calloc(f->n + 4, sizeof(*o->meta));
	if (!o->spec || !o->shapes || !o->meta)
		goto nomem;
	/* The key transformers' loader checks for; always first. */
	if (add_meta(o, "format", "pt"))
		goto nomem;
	if (p->world) {
		char num[32];
		snprintf(num, sizeof(num), "%d", f->rank);
		if (add_meta(o, GK_CKPT_META_RANK, num))
			goto nomem;
		snprintf(num, sizeof(num), "%d", p->world);
		if (add_meta(o, GK_CKPT_META_WORLD, num))
			goto nomem;
	}
	uint64_t *sh = o->shapes;
	for (size_t i = 0; i < f->n; i++) {
		const gk_ckpt_item *it = &f->items[i];
		const gk_ckpt_entry *e = &s->e[it->entry];
		if (e->ndim)
			memcpy(sh, e->shape, (size_t)e->ndim * sizeof(uint64_t));
		if (it->sliced) {
			char key[PATH_MAX + 32], val[96];
			sh[0] = it->rows;
			snprintf(key, sizeof(key), "%s%s", GK_CKPT_META_SLICE, e->name);
			snprintf(val, sizeof(val), "%" PRIu64 ":%" PRIu64 "/%" PRIu64,
				 it->row0, it->row0 + it->rows, e->shape[0]);
			if (add_meta(o, key, val))
				goto nomem;
		}
		o->spec[i] = (gk_st_spec){e->name, e->out_dtype, e->ndim, sh};
		sh += e->ndim;
	}
	return 0;
nomem:
	outspec_free(o);
	return gk_err_sys(err, ENOMEM, "write '%s'", f->name);
}

/* Append rows [row0, row0+rows) of entry e, from whichever parts hold them. */
static int put_rows(const gk_ckpt_set *s, gk_st_writer *w,
		    const gk_ckpt_entry *e, uint64_t row0, uint64_t rows,
		    gk_err *err)
{
	if (e->bytes == 0 || rows == 0)
		return 0;
	/* Bits, not bytes: F4 and F6 rows need not be whole bytes (the
	 * planner only cuts them where they are). */
	uint64_t rowel = 1, bits = gk_dtype_bits(e->dtype);
	for (int d = 1; d < e->ndim; d++)
		rowel *= e->shape[d];
	/* the rows' elements, from each part (row or flat slice) holding some */
	uint64_t a = row0 * rowel, b = (row0 + rows) * rowel;
	for (size_t i = 0; i < e->nparts; i++) {
		const gk_ckpt_part *pt = &e->parts[i];
		uint64_t lo = a > pt->el0 ? a : pt->el0;
		uint64_t hi = b < pt->el0 + pt->nel ? b : pt->el0 + pt->nel;
		if (lo >= hi)
			continue;
		const gk_st_file *f = s->files[pt->file];
		uint64_t off = f->data_off + pt->t->begin + (lo - pt->el0) * bits / 8;
		uint64_t len = (hi - lo) * bits / 8;
		if (lo == pt->el0 && hi == pt->el0 + pt->nel)
			len = pt->t->end - pt->t->begin;
		int rc = e->out_dtype == e->dtype
				 ? gk_st_writer_copy(w, f->fd, off, len, f->path, err)
				 : gk_st_writer_convert(w, f->fd, off, e->dtype, hi - lo, f->path,
							err);
		if (rc)
			return -1;
	}
	return 0;
}

/* Re-read the written file: a valid header, and copies equal their source. */
static int verify_file(const gk_ckpt_set *s, const gk_ckpt_outfile *f,
		       const char *path, gk_err *err)
{
	gk_st_file *o;
	if (gk_st_open(&o, path, err))
		return gk_err_prefix(err, "verify");
	int rc = 0;
	for (size_t i = 0; i < f->n && !rc; i++) {
		const gk_ckpt_entry *e = &s->e[f->items[i].entry];
		const gk_st_tensor *t = gk_st_find(o, e->name);
		if (!t) {
			rc = gk_errf(err, "verify '%s': tensor '%s' missing", path, e->name);
			break;
		}
		if (f->items[i].sliced || e->nparts != 1 || e->out_dtype != e->dtype)
			continue;
		const gk_st_file *src = s->files[e->parts[0].file];
		uint64_t a, b;
		if (gk_xxh3_fd(o->fd, o->data_off + t->begin, t->end - t->begin, &a,
			       path, err) ||
		    gk_xxh3_fd(src->fd, src->data_off + e->parts[0].t->begin,
			       e->bytes, &b, src->path, err))
			rc = -1;
		else if (a != b)
			rc = gk_errf(err, "verify '%s': tensor '%s' differs from '%s'",
				     path, e->name, src->path);
	}
	gk_st_close(o);
	return rc;
}

static int write_one(const gk_ckpt_set *s, const gk_ckpt_plan *p, size_t k,
		     const char *path, const gk_ckpt_write_opts *o,
		     uint64_t *progress_base, const char *also_cleanup,
		     gk_err *err)
{
	const gk_ckpt_outfile *f = &p->f[k];
	outspec os;
	gk_st_writer *w;
	if (build_spec(s, p, k, &os, err))
		return -1;
	int rc = gk_st_writer_open(&w, path, os.spec, f->n, os.meta, os.nmeta, err);
	int slot = -1;
	if (!rc && also_cleanup)
		slot = gk_cleanup_on_signal(also_cleanup);
	size_t i;
	while (!rc && (i = gk_st_writer_next(w)) < f->n) {
		const gk_ckpt_item *it = &f->items[i];
		rc = put_rows(s, w, &s->e[it->entry], it->row0, it->rows, err);
		if (!rc && gk_st_writer_left(w) && gk_st_writer_next(w) == i)
			rc = gk_errf(err, "write '%s': tensor '%s' came up short", path,
				     s->e[it->entry].name);
		if (o && o->progress)
			gk_progress_update(o->progress, *progress_base + gk_st_writer_done(w));
	}
	if (!rc) {
		*progress_base += gk_st_writer_done(w);
		rc = gk_st_writer_close(w, err);
	} else {
		gk_st_writer_abort(w);
	}
	gk_cleanup_forget(slot);
	if (!rc && o && o->verify && strcmp(path, "-") != 0 &&
	    verify_file(s, f, path, err)) {
		unlink(path);
		rc = -1;
	}
	outspec_free(&os);
	return rc;
}

int gk_ckpt_write_file(const gk_ckpt_set *s, const gk_ckpt_plan *p, size_t k,
		       const char *path, const gk_ckpt_write_opts *o,
		       gk_err *err)
{
	uint64_t base = 0;
	return write_one(s, p, k, path, o, &base, NULL, err);
}

static const gk_ckpt_set *name_set;
static int by_entry_name(const void *a, const void *b)
{
	return strcmp(name_set->e[((const size_t *)a)[0]].name,
		      name_set->e[((const size_t *)b)[0]].name);
}

int gk_ckpt_index_write(const gk_ckpt_set *s, const gk_ckpt_plan *p,
			const char *dir, gk_err *err)
{
	/* Pairs (entry, file), sorted by name as transformers writes them. */
	size_t n = 0;
	for (size_t k = 0; k < p->n; k++)
		n += p->f[k].n;
	size_t *pairs = malloc((n + 1) * 2 * sizeof(size_t));
	json_t *j = json_object(), *md = json_object(), *wm = json_object();
	char *path = NULL;
	int rc = -1;
	if (!pairs || !j || !md || !wm || asprintf(&path, "%s/%s", dir, GK_CKPT_INDEX) < 0) {
		path = NULL;
		gk_err_sys(err, ENOMEM, "write index");
		goto out;
	}
	n = 0;
	for (size_t k = 0; k < p->n; k++)
		for (size_t i = 0; i < p->f[k].n; i++) {
			pairs[2 * n] = p->f[k].items[i].entry;
			pairs[2 * n + 1] = k;
			n++;
		}
	name_set = s;
	qsort(pairs, n, 2 * sizeof(size_t), by_entry_name);
	json_object_set_new(md, "total_size", json_integer((json_int_t)p->total));
	for (size_t i = 0; i < n; i++)
		json_object_set_new(wm, s->e[pairs[2 * i]].name,
				    json_string(p->f[pairs[2 * i + 1]].name));
	json_object_set(j, "metadata", md);
	json_object_set(j, "weight_map", wm);
	rc = gk_json_write_file(path, j, err);
out:
	free(pairs);
	free(path);
	json_decref(md);
	json_decref(wm);
	json_decref(j);
	return rc;
}

static int dir_state(const char *dir, gk_err *err)
{
	struct stat st;
	if (stat(dir, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		return gk_err_sys(err, errno, "output '%s'", dir);
	}
	if (!S_ISDIR(st.st_mode))
		return gk_errf(err, "output '%s': exists and is not a directory", dir);
	/* rename(2) replaces an empty directory, so an empty one is fine. */
	DIR *d = opendir(dir);
	if (!d)
		return gk_err_sys(err, errno, "output '%s'", dir);
	struct dirent *de;
	int empty = 1;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = 0;
	closedir(d);
	if (!empty)
		return gk_errf(err, "output '%s': directory is not empty", dir);
	return 0;
}

/*
 * The inputs' config.json beside the tensors, so that the directory loads
 * with transformers' from_pretrained as it is. Inputs that disagree on it
 * make no such directory: which model is it?
 */
static int write_config(const gk_ckpt_set *s, const char *stage, gk_err *err)
{
	if (s->config_other)
		return gk_errf(err, "'%s' and '%s' differ: the inputs are not one model "
			       "(merge into a file, or remove one config.json)",
			       s->config_from, s->config_other);
	char *path = gk_ckpt_join(stage, GK_CKPT_CONFIG);
	if (!path)
		return gk_err_sys(err, ENOMEM, "write config");
	int rc = gk_atomic_write_file(path, s->config, s->config_len, 0666, err);
	free(path);
	return rc;
}

/*
 * The inputs' tokenizer files beside it too, so that transformers'
 * AutoTokenizer and gpu-train --init-from find them; inputs whose
 * tokenizers differ make no such directory either.
 */
static int write_tokenizer(const gk_ckpt_set *s, const char *stage, gk_err *err)
{
	if (s->tok_other)
		return gk_errf(err, "the tokenizer files of '%s' and '%s' differ: the inputs are not "
			       "one model (merge into a file, or remove one's tokenizer files)",
			       s->tok_from, s->tok_other);
	for (size_t i = 0; i < GK_ARRAY_SIZE(s->tok); i++) {
		if (!s->tok[i].buf)
			continue;
		char *path = gk_ckpt_join(stage, gk_ckpt_tok_names[i]);
		int rc = path ? gk_atomic_write_file(path, s->tok[i].buf, s->tok[i].len, 0666, err)
			      : gk_err_sys(err, ENOMEM, "write tokenizer");
		free(path);
		if (rc)
			return -1;
	}
	return 0;
}

/* The name of a directory output's k-th file: the plan's, the index,
 * config.json, the tokenizer's. */
static const char *out_name(const gk_ckpt_plan *p, size_t k)
{
	return k < p->n ? p->f[k].name : k == p->n ? GK_CKPT_INDEX : k == p->n + 1 ? GK_CKPT_CONFIG
											 : gk_ckpt_tok_names[k - p->n - 2];
}

int gk_ckpt_write_dir(const gk_ckpt_set *s, const gk_ckpt_plan *p,
		      const char *dir, const gk_ckpt_write_opts *o,
		      gk_err *err)
{
	char stage[PATH_MAX], path[2 * PATH_MAX];
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	const char *slash = memrchr(dir, '/', len);
	int dl = slash ? (int)(slash - dir) + 1 : 0;
	if (snprintf(stage, sizeof(stage), "%.*s.%.*s.tmp-XXXXXX", dl, dir,
		     (int)len - dl, dir + dl) >= (int)sizeof(stage))
		return gk_errf(err, "output '%s': path too long", dir);
	if (dir_state(dir, err))
		return -1;
	/*
	 * Registered for removal on a signal as it is made, and its files
	 * before each is created: a SIGTERM at any moment leaves nothing.
	 */
	size_t nout = p->n + 2 + GK_ARRAY_SIZE(gk_ckpt_tok_names);
	int *slots = malloc((nout + 1) * sizeof(int));
	if (!slots)
		return gk_err_sys(err, ENOMEM, "output '%s'", dir);
	size_t nslots = 1;
	if (ck_mkdtemp(stage, &slots[0], err)) {
		free(slots);
		return -1;
	}
	for (size_t k = 0; k < nout; k++) {
		snprintf(path, sizeof(path), "%s/%s", stage, out_name(p, k));
		slots[nslots++] = gk_cleanup_on_signal(path);
	}
	int rc = 0;
	uint64_t base = 0;
	for (size_t k = 0; k < p->n && !rc; k++) {
		snprintf(path, sizeof(path), "%s/%s", stage, p->f[k].name);
		rc = write_one(s, p, k, path, o, &base, stage, err);
	}
	if (!rc && p->index)
		rc = gk_ckpt_index_write(s, p, stage, err);
	if (!rc && s->config)
		rc = write_config(s, stage, err);
	if (!rc && s->tok_from)
		rc = write_tokenizer(s, stage, err);
	if (!rc) {
		snprintf(path, sizeof(path), "%s/.", stage);
		rc = gk_fsync_parent(path, err);
	}
	if (!rc && rename(stage, dir) < 0)
		rc = gk_err_sys(err, errno, "rename '%s' to '%s'", stage, dir);
	if (!rc)
		rc = gk_fsync_parent(dir, err);
	if (rc) {
		for (size_t k = 0; k < nout; k++) {
			snprintf(path, sizeof(path), "%s/%s", stage, out_name(p, k));
			unlink(path);
		}
		rmdir(stage);
	}
	for (size_t i = 0; i < nslots; i++)
		gk_cleanup_forget(slots[i]);
	free(slots);
	return rc;
}

int gk_ckpt_reshard(gk_ckpt_set *s, const gk_ckpt_reshard_opts *o,
		    const char *out, gk_ckpt_plan *plan, gk_err *err)
{
	int one = !o->max_size && !o->shards && !o->ranks;
	gk_ckpt_plan p;
	gk_progress pr;
	gk_ckpt_write_opts wo = {&pr, o->verify};
	int rc;

	if (one && !out)
		return gk_errf(err, "one output file: no name given");
	/*
	 * -o DIR/ (or an existing directory): a Hugging Face directory of one
	 * file, model.safetensors, with the inputs' config.json.
	 */
	struct stat st;
	int todir = one && strcmp(out, "-") &&
		    (out[strlen(out) - 1] == '/' || (stat(out, &st) == 0 && S_ISDIR(st.st_mode)));
	if (!o->dry_run && gk_ckpt_verify_set(s, err))
		return -1;
	if (gk_ckpt_set_dtype(s, o->dtype, o->keep_f32, o->nkeep, err))
		return -1;
	rc = o->max_size ? gk_ckpt_plan_size(s, o->max_size, &p, err)
	     : o->shards ? gk_ckpt_plan_count(s, o->shards, &p, err)
	     : o->ranks  ? gk_ckpt_plan_ranks(s, o->ranks, o->slice, &p, err)
			 : gk_ckpt_plan_one(s, todir ? GK_CKPT_SINGLE : out, &p, err);
	if (rc)
		return -1;
	if (o->dry_run) {
		*plan = p;
		return 0;
	}
	gk_progress_start(&pr, o->progress, s->bytes, 1, NULL, o->progress != NULL);
	rc = one && !todir ? gk_ckpt_write_file(s, &p, 0, out, &wo, err)
		 : gk_ckpt_write_dir(s, &p, out, &wo, err);
	gk_progress_finish(&pr);
	gk_ckpt_plan_free(&p);
	return rc;
}

int gk_ckpt_opt_output(const char *opt, const char *s, void *field, gk_err *err)
{
	(void)opt;
	if (!*s)
		return gk_errf(err, "-o: empty path");
	memcpy(field, &s, sizeof(s));
	return 0;
}

int gk_ckpt_opt_dtype(const char *opt, const char *s, void *field, gk_err *err)
{
	gk_dtype dt;
	if (gk_dtype_parse_float(s, opt, &dt, err))
		return -1;
	memcpy(field, &dt, sizeof(dt));
	return 0;
}

int gk_ckpt_opt_keep(const char *opt, const char *s, void *field, gk_err *err)
{
	(void)opt;
	return gk_strlist_push(field, s, err);
}

int gk_ckpt_opt_max_size(const char *opt, const char *s, void *field, gk_err *err)
{
	uint64_t v;
	if (gk_parse_size(s, &v, opt, err) < 0)
		return -1;
	if (!v)
		return gk_errf(err, "%s: must be more than 0", opt);
	memcpy(field, &v, sizeof(v));
	return 0;
}
