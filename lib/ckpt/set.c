/*
 * set.c - many input files (HF layout, rank shards, plain files, step
 * directories) checked and seen as one list of whole tensors (the pieces
 * of each are put together by pieces.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/internal.h"

/* What an index said, checked once all files are open. */
typedef struct pending_index {
	char *path;
	gk_ckpt_index ix;
	size_t *file; /* ix.files[i] -> set file number */
} pending_index;

typedef struct builder {
	gk_ckpt_set *s;
	size_t files_cap;
	gk_strlist paths;       /* parallel to s->files */
	unsigned char *indexed; /* parallel to s->files: named by an index */
	size_t indexed_cap;
	pending_index *idx;
	size_t nidx, idx_cap;
} builder;

static char *join(const char *dir, const char *name)
{
	char *p;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

/* Open a file once; returns its number in the set. */
static int add_file(builder *b, const char *path, size_t *num, gk_err *err)
{
	char real[PATH_MAX];
	if (!realpath(path, real))
		return gk_err_sys(err, errno, "open '%s'", path);
	for (size_t i = 0; i < b->paths.n; i++)
		if (strcmp(b->paths.v[i], real) == 0) {
			*num = i;
			return 0;
		}
	gk_st_file *f;
	if (gk_st_open(&f, path, err))
		return -1;
	size_t n = b->s->nfiles;
	if (GK_GROW(b->s->files, b->files_cap, n + 1, "open", err) ||
	    GK_GROW(b->indexed, b->indexed_cap, n + 1, "open", err) ||
	    gk_strlist_push(&b->paths, real, err)) {
		gk_st_close(f);
		return gk_err_sys(err, ENOMEM, "open '%s'", path);
	}
	b->indexed[n] = 0;
	b->s->files[n] = f;
	b->s->nfiles = n + 1;
	*num = n;
	return 0;
}

void gk_ckpt_index_free(gk_ckpt_index *ix)
{
	gk_strlist_free(&ix->files);
	gk_strlist_free(&ix->names);
	free(ix->file_of);
	memset(ix, 0, sizeof(*ix));
}

static int bad_path(const char *f)
{
	if (!*f || f[0] == '/')
		return 1;
	for (const char *p = f; *p;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return 1;
		p += n;
		if (*p)
			p++;
	}
	return 0;
}

int gk_ckpt_index_parse(gk_ckpt_index *ix, const char *buf, size_t len,
			const char *name, gk_err *err)
{
	memset(ix, 0, sizeof(*ix));
	ix->total_size = UINT64_MAX;
	json_t *j = gk_json_load_buf(buf, len, name, err);
	if (!j)
		return -1;
	const json_t *wm = json_object_get(j, "weight_map");
	const json_t *md = json_object_get(j, "metadata");
	const char *k;
	json_t *v;
	int rc = -1;
	if (!json_is_object(j) || !json_is_object(wm)) {
		gk_errf(err, "index '%s': no weight_map object", name);
		goto out;
	}
	if (md) {
		const json_t *ts = json_object_get(md, "total_size");
		if (!json_is_object(md) || (ts && (!json_is_integer(ts) ||
						   json_integer_value(ts) < 0))) {
			gk_errf(err, "index '%s': metadata.total_size is not a non-negative integer",
				name);
			goto out;
		}
		if (ts)
			ix->total_size = (uint64_t)json_integer_value(ts);
	}
	ix->file_of = malloc((json_object_size(wm) + 1) * sizeof(size_t));
	if (!ix->file_of) {
		gk_err_sys(err, ENOMEM, "index '%s'", name);
		goto out;
	}
	json_object_foreach((json_t *)wm, k, v) {
		if (!json_is_string(v)) {
			gk_errf(err, "index '%s': weight_map '%s' is not a file name", name, k);
			goto out;
		}
		const char *f = json_string_value(v);
		if (bad_path(f)) {
			gk_errf(err, "index '%s': tensor '%s': file '%s' is not a plain relative path",
				name, k, f);
			goto out;
		}
		size_t i;
		for (i = 0; i < ix->files.n; i++)
			if (strcmp(ix->files.v[i], f) == 0)
				break;
		if (i == ix->files.n && gk_strlist_push(&ix->files, f, err))
			goto out;
		ix->file_of[ix->names.n] = i;
		if (gk_strlist_push(&ix->names, k, err))
			goto out;
	}
	rc = 0;
out:
	json_decref(j);
	if (rc)
		gk_ckpt_index_free(ix);
	return rc;
}

static int add_index(builder *b, const char *path, gk_err *err)
{
	char *buf;
	size_t len;
	if (ck_read_regular(path, (size_t)1 << 30, &buf, &len, err))
		return -1;
	pending_index pi = {0};
	int rc = gk_ckpt_index_parse(&pi.ix, buf, len, path, err);
	free(buf);
	if (rc)
		return -1;
	pi.path = strdup(path);
	pi.file = calloc(pi.ix.files.n + 1, sizeof(size_t));
	if (!pi.path || !pi.file ||
	    GK_GROW(b->idx, b->idx_cap, b->nidx + 1, "index", err)) {
		free(pi.path);
		free(pi.file);
		gk_ckpt_index_free(&pi.ix);
		return gk_err_sys(err, ENOMEM, "index '%s'", path);
	}
	b->idx[b->nidx++] = pi;
	pending_index *p = &b->idx[b->nidx - 1];
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", path);
	const char *dir = dirname(tmp);
	for (size_t i = 0; i < p->ix.files.n; i++) {
		char *fp = join(dir, p->ix.files.v[i]);
		if (!fp)
			return gk_err_sys(err, ENOMEM, "index '%s'", path);
		rc = add_file(b, fp, &p->file[i], err);
		free(fp);
		if (rc)
			return gk_err_prefix(err, "index '%s'", path);
		b->indexed[p->file[i]] = 1;
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every name in dir accepted by keep, sorted, as full paths. */
static int list_dir(const char *dir, int (*keep)(const char *), gk_strlist *out,
		    gk_err *err)
{
	DIR *d = opendir(dir);
	if (!d)
		return gk_err_sys(err, errno, "open directory '%s'", dir);
	struct dirent *e;
	size_t first = out->n;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !keep(e->d_name))
			continue;
		char *p = join(dir, e->d_name);
		if (!p || gk_strlist_push_owned(out, p, err)) {
			closedir(d);
			return gk_err_sys(err, ENOMEM, "read directory '%s'", dir);
		}
	}
	closedir(d);
	if (out->n > first)
		qsort(out->v + first, out->n - first, sizeof(char *), cmp_str);
	return 0;
}

static int is_st(const char *n)
{
	return gk_str_ends(n, ".safetensors");
}

static int is_model_st(const char *n)
{
	return strncmp(n, "model", 5) == 0 && gk_str_ends(n, ".safetensors");
}

static int add_files_of(builder *b, const char *dir, int (*keep)(const char *),
			gk_err *err)
{
	gk_strlist l = {0};
	int rc = list_dir(dir, keep, &l, err);
	if (!rc && l.n == 0)
		rc = gk_errf(err, "read '%s': no safetensors files in it", dir);
	for (size_t i = 0; !rc && i < l.n; i++) {
		size_t num;
		rc = add_file(b, l.v[i], &num, err);
	}
	gk_strlist_free(&l);
	return rc;
}

static int exists(const char *dir, const char *name)
{
	char *p = join(dir, name);
	int r = p && access(p, F_OK) == 0;
	free(p);
	return r;
}

/*
 * A committed step directory is read as the files its COMMIT lists
 * (ck_step_files), whatever else the directory holds: its index when it
 * lists one, else its model*.safetensors. Their sizes and XXH3 are
 * checked by gk_ckpt_verify_set, in this same directory.
 */
static int add_step_dir(builder *b, const char *dir, gk_err *err)
{
	gk_strlist names = {0};
	int rc = -1, indexed = 0;
	size_t nread = 0;
	if (gk_strlist_push(&b->s->steps, dir, err) || ck_step_files(dir, &names, err))
		goto out;
	for (size_t i = 0; i < names.n; i++)
		indexed |= !strcmp(names.v[i], GK_CKPT_INDEX);
	for (size_t i = 0; i < names.n; i++) {
		const char *n = names.v[i];
		if (indexed ? strcmp(n, GK_CKPT_INDEX) != 0 : !is_model_st(n))
			continue;
		char *p = join(dir, n);
		size_t num;
		if (!p) {
			gk_err_sys(err, ENOMEM, "open '%s'", dir);
			goto out;
		}
		int r = indexed ? add_index(b, p, err) : add_file(b, p, &num, err);
		if (r && access(p, F_OK) < 0 && errno == ENOENT && !access(dir, F_OK))
			gk_errf(err, "read '%s': incomplete checkpoint: '%s', listed in its COMMIT, "
				"is missing", dir, n);
		free(p);
		if (r)
			goto out;
		nread++;
	}
	rc = nread ? 0 : gk_errf(err, "read '%s': no safetensors files in its COMMIT", dir);
out:
	gk_strlist_free(&names);
	return rc;
}

const char *const gk_ckpt_tok_names[3] = {GK_CKPT_TOK_JSON, GK_CKPT_TOK_VOCAB,
					   GK_CKPT_TOK_MERGES};

/*
 * Keep dir's tokenizer files, if it has any, as add_config keeps its
 * config.json: the first directory's, and the name of another whose
 * files differ (one more or fewer, or other bytes).
 */
static int add_tokenizer(gk_ckpt_set *s, const char *dir, gk_err *err)
{
	struct gk_ckpt_tok_file f[3] = {{0}};
	int any = 0, same = 1, rc = 0;
	for (size_t i = 0; i < 3 && !rc; i++) {
		char *p = join(dir, gk_ckpt_tok_names[i]);
		if (!p)
			rc = gk_err_sys(err, ENOMEM, "open '%s'", dir);
		else if (access(p, F_OK) == 0 || errno != ENOENT)
			rc = gk_read_file(p, 256u << 20, &f[i].buf, &f[i].len, err);
		any |= f[i].buf != NULL;
		free(p);
	}
	if (!rc && any && !s->tok_from) {
		if (!(s->tok_from = strdup(dir)))
			rc = gk_err_sys(err, ENOMEM, "open '%s'", dir);
		else
			memcpy(s->tok, f, sizeof(f));
		if (!rc)
			return 0;
	}
	for (size_t i = 0; i < 3; i++)
		same &= !f[i].buf == !s->tok[i].buf &&
			(!f[i].buf || (f[i].len == s->tok[i].len &&
				       !memcmp(f[i].buf, s->tok[i].buf, f[i].len)));
	if (!rc && any && !same && !s->tok_other && !(s->tok_other = strdup(dir)))
		rc = gk_err_sys(err, ENOMEM, "open '%s'", dir);
	for (size_t i = 0; i < 3; i++)
		free(f[i].buf);
	return rc;
}

/*
 * Keep dir's config.json, if it has one: the first one read, and the name
 * of another input's that differs from it; and its tokenizer's files.
 */
static int add_config(gk_ckpt_set *s, const char *dir, gk_err *err)
{
	char *p = join(dir, GK_CKPT_CONFIG), *c;
	size_t len;
	if (!p)
		return gk_err_sys(err, ENOMEM, "open '%s'", dir);
	if (access(p, F_OK) < 0 && errno == ENOENT) {
		free(p);
		return add_tokenizer(s, dir, err);
	}
	if (gk_read_file(p, 16u << 20, &c, &len, err)) {
		free(p);
		return -1;
	}
	if (!s->config) {
		s->config = c;
		s->config_len = len;
		s->config_from = p;
		return add_tokenizer(s, dir, err);
	}
	if (!s->config_other && (len != s->config_len || memcmp(c, s->config, len)))
		s->config_other = p;
	else
		free(p);
	free(c);
	return add_tokenizer(s, dir, err);
}

static int add_input(builder *b, const char *in, gk_err *err)
{
	struct stat st;
	if (stat(in, &st) < 0)
		return gk_err_sys(err, errno, "open '%s'", in);
	if (S_ISDIR(st.st_mode) && add_config(b->s, in, err))
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		size_t num;
		if (gk_str_ends(in, ".json"))
			return add_index(b, in, err);
		return add_file(b, in, &num, err);
	}
	if (exists(in, GK_CKPT_COMMIT))
		return add_step_dir(b, in, err);
	/*
	 * A step directory (or its staging directory) without COMMIT is
	 * unfinished however it is reached: by name, through `latest` or
	 * another symbolic link, with a trailing slash. So the rule looks at
	 * the real name.
	 */
	char real[PATH_MAX];
	if (!realpath(in, real))
		return gk_err_sys(err, errno, "open '%s'", in);
	const char *base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
	if (strncmp(base, "step-", 5) == 0 || strncmp(base, ".step-", 6) == 0)
		return gk_errf(err, "read '%s': incomplete checkpoint (no COMMIT)", in);
	if (exists(in, GK_CKPT_INDEX)) {
		char *p = join(in, GK_CKPT_INDEX);
		int rc = p ? add_index(b, p, err) : gk_err_sys(err, ENOMEM, "open");
		free(p);
		return rc;
	}
	uint64_t step;
	int r = gk_ckpt_latest(in, &step, err);
	if (r < 0)
		return -1;
	if (r == 1) {
		char name[64], *p;
		snprintf(name, sizeof(name), GK_CKPT_STEP_FMT, step);
		if (!(p = join(in, name)))
			return gk_err_sys(err, ENOMEM, "open '%s'", in);
		r = add_config(b->s, p, err) ? -1 : add_step_dir(b, p, err);
		free(p);
		return r;
	}
	/* A root whose steps are all unfinished holds no checkpoint yet. */
	gk_strlist l = {0};
	size_t pending = 0;
	if (list_dir(in, is_st, &l, err))
		return -1;
	if (l.n == 0 && (pending = ck_count_uncommitted(in)) > 0) {
		gk_strlist_free(&l);
		return gk_errf(err, "read '%s': no committed checkpoint (%zu step director%s "
			       "without COMMIT: still being written, or left by a killed run)",
			       in, pending, pending == 1 ? "y" : "ies");
	}
	gk_strlist_free(&l);
	return add_files_of(b, in, is_st, err);
}

static int check_indexes(builder *b, gk_err *err)
{
	gk_ckpt_set *s = b->s;
	for (size_t i = 0; i < b->nidx; i++) {
		pending_index *p = &b->idx[i];
		uint64_t total = 0;
		for (size_t k = 0; k < p->ix.names.n; k++) {
			const gk_st_file *f = s->files[p->file[p->ix.file_of[k]]];
			const gk_st_tensor *t = gk_st_find(f, p->ix.names.v[k]);
			if (!t)
				return gk_errf(err, "index '%s': tensor '%s' is not in '%s'",
					       p->path, p->ix.names.v[k], f->path);
			total += t->end - t->begin;
		}
		/* Every tensor of every file must be in the weight_map. */
		gk_strlist sorted = {0};
		for (size_t k = 0; k < p->ix.names.n; k++)
			if (gk_strlist_push(&sorted, p->ix.names.v[k], err)) {
				gk_strlist_free(&sorted);
				return -1;
			}
		if (sorted.n)
			qsort(sorted.v, sorted.n, sizeof(char *), cmp_str);
		for (size_t fi = 0; fi < p->ix.files.n; fi++) {
			const gk_st_file *f = s->files[p->file[fi]];
			for (size_t t = 0; t < f->n; t++) {
				const char *key = f->t[t].name;
				if (!sorted.n || !bsearch(&key, sorted.v, sorted.n, sizeof(char *), cmp_str)) {
					gk_strlist_free(&sorted);
					return gk_errf(err, "index '%s': tensor '%s' in '%s' is not in the weight_map",
						       p->path, key, f->path);
				}
			}
		}
		gk_strlist_free(&sorted);
		if (p->ix.total_size != UINT64_MAX && p->ix.total_size != total)
			return gk_errf(err, "index '%s': metadata.total_size is %" PRIu64 " but the tensors hold %" PRIu64 " bytes",
				       p->path, p->ix.total_size, total);
	}
	return 0;
}

/*
 * A member of a numbered set, "PREFIX-NNNNN-of-MMMMM.safetensors" (the
 * Hugging Face shards count from 1, "KIND-rank-" files from 0): the length
 * of "DIR/PREFIX", its number and the set's size. 0, or -1 for other names.
 */
static int set_member(const char *path, size_t *key_len, uint64_t *num,
		      uint64_t *total, int *from)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	const char *of = strstr(base, "-of-");
	const char *dash, *p;
	if (!of || !gk_str_ends(base, ".safetensors"))
		return -1;
	for (dash = of; dash > base && dash[-1] >= '0' && dash[-1] <= '9'; dash--)
		;
	if (dash == base || dash[-1] != '-' || of - dash < 5 || of - dash > 9)
		return -1;
	p = of + 4;
	size_t nd = strspn(p, "0123456789");
	if (nd < 5 || nd > 9 || strcmp(p + nd, ".safetensors") != 0)
		return -1;
	*num = strtoull(dash, NULL, 10);
	*total = strtoull(p, NULL, 10);
	*key_len = (size_t)(dash - 1 - path);
	*from = dash - 1 - base >= 5 && strncmp(dash - 6, "-rank", 5) == 0 ? 0 : 1;
	return *total ? 0 : -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void dir_of(const char *path, char *buf, size_t len)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(buf, len, ".");
	else
		snprintf(buf, len, "%.*s", (int)(slash == path ? 1 : slash - path), path);
}

/*
 * Numbers present in one set, sorted: the first one missing from
 * [from, from + total), or UINT64_MAX when none is.
 */
static uint64_t first_missing(uint64_t *v, size_t n, uint64_t from,
			      uint64_t total)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	uint64_t want = from;
	for (size_t i = 0; i < n && want < from + total; i++) {
		if (v[i] < want)
			continue; /* a duplicate, or out of range below */
		if (v[i] > want)
			return want;
		want++;
	}
	return want < from + total ? want : UINT64_MAX;
}

/*
 * A set of numbered files or rank shards with a member missing would merge
 * "ok" without its tensors: refuse it. Files named by an index were checked
 * against it; the others are checked by name (PREFIX-NNNNN-of-MMMMM), and
 * rank shards of one directory by their gpukit.rank/gpukit.world metadata.
 */
static int check_sets(builder *b, gk_err *err)
{
	gk_ckpt_set *s = b->s;
	uint64_t *v = malloc((s->nfiles + 1) * sizeof(*v));
	unsigned char *done = calloc(s->nfiles + 1, 1);
	char dir[PATH_MAX];
	int rc = 0;
	if (!v || !done) {
		free(v);
		free(done);
		return gk_err_sys(err, ENOMEM, "open");
	}
	for (size_t i = 0; i < s->nfiles && !rc; i++) {
		size_t kl, kl2;
		uint64_t num, total, num2, total2;
		int from, from2;
		const char *pi = s->files[i]->path;
		if (done[i] || b->indexed[i] || set_member(pi, &kl, &num, &total, &from))
			continue;
		size_t n = 0;
		for (size_t j = i; j < s->nfiles; j++) {
			const char *pj = s->files[j]->path;
			if (done[j] || b->indexed[j] ||
			    set_member(pj, &kl2, &num2, &total2, &from2) || kl2 != kl ||
			    total2 != total || strncmp(pi, pj, kl) != 0)
				continue;
			done[j] = 1;
			if (num2 < (uint64_t)from || num2 - (uint64_t)from >= total) {
				rc = gk_errf(err, "read '%s': number %" PRIu64 " is outside a set of %" PRIu64,
					     pj, num2, total);
				break;
			}
			v[n++] = num2;
		}
		uint64_t miss = rc ? UINT64_MAX : first_missing(v, n, (uint64_t)from, total);
		if (miss != UINT64_MAX) {
			/* The missing name, spelled like its siblings. */
			const char *base = strrchr(pi, '/') ? strrchr(pi, '/') + 1 : pi;
			const char *digits = pi + kl + 1, *of = strstr(digits, "-of-");
			dir_of(pi, dir, sizeof(dir));
			rc = gk_errf(err, "read '%s': incomplete checkpoint: '%.*s%0*" PRIu64 "%s' is missing",
				     dir, (int)(digits - base), base, (int)(of - digits), miss, of);
		}
	}
	/* Rank shards by their metadata, one directory at a time. */
	memset(done, 0, s->nfiles + 1);
	for (size_t i = 0; i < s->nfiles && !rc; i++) {
		const char *w = gk_st_meta_get(s->files[i], GK_CKPT_META_WORLD);
		char dj[PATH_MAX];
		uint64_t world = 0, rank;
		if (done[i] || !w)
			continue;
		dir_of(s->files[i]->path, dir, sizeof(dir));
		size_t n = 0;
		for (size_t j = i; j < s->nfiles && !rc; j++) {
			const char *wj = gk_st_meta_get(s->files[j], GK_CKPT_META_WORLD);
			const char *rj = gk_st_meta_get(s->files[j], GK_CKPT_META_RANK);
			uint64_t wv;
			if (done[j] || !wj)
				continue;
			dir_of(s->files[j]->path, dj, sizeof(dj));
			if (strcmp(dj, dir) != 0)
				continue;
			done[j] = 1;
			if (gk_parse_u64(wj, 99999, &wv, "world", NULL) || wv == 0 || !rj ||
			    gk_parse_u64(rj, wv - 1, &rank, "rank", NULL))
				rc = gk_errf(err, "read '%s': bad %s/%s metadata '%s'/'%s'",
					     s->files[j]->path, GK_CKPT_META_RANK,
					     GK_CKPT_META_WORLD, rj ? rj : "", wj);
			else if (j > i && wv != world)
				rc = gk_errf(err, "read '%s': %s %" PRIu64 " but '%s' says %" PRIu64,
					     s->files[j]->path, GK_CKPT_META_WORLD, wv,
					     s->files[i]->path, world);
			world = wv;
			v[n++] = rank;
		}
		uint64_t miss = rc ? UINT64_MAX : first_missing(v, n, 0, world);
		if (miss != UINT64_MAX)
			rc = gk_errf(err, "read '%s': incomplete checkpoint: rank %" PRIu64 " of %s %" PRIu64 " is missing",
				     dir, miss, GK_CKPT_META_WORLD, world);
	}
	free(v);
	free(done);
	return rc;
}

int gk_ckpt_is_buffer(const char *name)
{
	static const char *const suffix[] = {
		"attn.bias", "attn.masked_bias",           /* GPT-2, GPT-J */
		"attention.bias", "attention.masked_bias", /* GPT-Neo, GPT-NeoX */
		"rotary_emb.inv_freq",                     /* Llama, Mistral, NeoX */
	};
	size_t n = strlen(name);
	for (size_t i = 0; i < GK_ARRAY_SIZE(suffix); i++) {
		size_t k = strlen(suffix[i]);
		if (n >= k && !strcmp(name + n - k, suffix[i]) &&
		    (n == k || name[n - k - 1] == '.'))
			return 1;
	}
	return 0;
}

int gk_ckpt_open(gk_ckpt_set **out, char *const *inputs, size_t n,
		 gk_err *err)
{
	builder b = {0};
	int rc = 0;
	if (!(b.s = calloc(1, sizeof(*b.s))))
		return gk_err_sys(err, ENOMEM, "open");
	for (size_t i = 0; i < n && !rc; i++) {
		/*
		 * Each input is resolved once (ROOT/latest to its step, a root
		 * to its latest committed step) and only that path is read
		 * after, so a writer moving latest cannot mix two steps.
		 */
		char *r;
		if ((rc = gk_ckpt_resolve(inputs[i], &r, err)))
			break;
		rc = add_input(&b, r, err);
		if (rc && strcmp(r, inputs[i]) && access(r, F_OK) < 0 && errno == ENOENT)
			gk_errf(err, "read '%s': its step '%s' was removed while being read "
				"(by ckpt-prune?)", inputs[i], r);
		free(r);
	}
	if (!rc)
		rc = check_indexes(&b, err);
	if (!rc)
		rc = ck_group(b.s, err);
	if (!rc)
		rc = check_sets(&b, err);
	for (size_t i = 0; i < b.nidx; i++) {
		free(b.idx[i].path);
		free(b.idx[i].file);
		gk_ckpt_index_free(&b.idx[i].ix);
	}
	free(b.idx);
	gk_strlist_free(&b.paths);
	free(b.indexed);
	if (rc) {
		gk_ckpt_close(b.s);
		return -1;
	}
	*out = b.s;
	return 0;
}

void gk_ckpt_close(gk_ckpt_set *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].name);
		free(s->e[i].shape);
		free(s->e[i].parts);
	}
	for (size_t i = 0; i < s->nfiles; i++)
		gk_st_close(s->files[i]);
	gk_strlist_free(&s->steps);
	free(s->config);
	free(s->config_from);
	free(s->config_other);
	for (size_t i = 0; i < 3; i++)
		free(s->tok[i].buf);
	free(s->tok_from);
	free(s->tok_other);
	free(s->files);
	free(s->e);
	free(s);
}

int gk_ckpt_set_dtype(gk_ckpt_set *s, gk_dtype dt, char *const *keep_f32,
		      size_t nkeep, gk_err *err)
{
	if (dt != GK_DT_INVALID && !gk_dtype_is_float(dt))
		return gk_errf(err, "dtype '%s': only F32, F16, BF16 and F64 are conversion targets",
			       gk_dtype_name(dt));
	s->bytes = 0;
	for (size_t i = 0; i < s->n; i++) {
		gk_ckpt_entry *e = &s->e[i];
		e->out_dtype = e->dtype;
		if (gk_dtype_is_float(e->dtype)) {
			int keep = 0;
			for (size_t k = 0; k < nkeep && !keep; k++)
				keep = fnmatch(keep_f32[k], e->name, 0) == 0;
			if (keep)
				e->out_dtype = GK_DT_F32;
			else if (dt != GK_DT_INVALID)
				e->out_dtype = dt;
		}
		uint64_t nel = 1;
		for (int d = 0; d < e->ndim; d++)
			nel *= e->shape[d];
		gk_st_nbytes(e->out_dtype, nel, &e->out_bytes);
		s->bytes += e->out_bytes;
	}
	return 0;
}
