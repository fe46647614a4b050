/*
 * pack.c - from files, file lists and tar streams to the writer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/internal.h"

void gk_shard_source_free(gk_shard_source *src)
{
	gk_strlist_free(&src->names);
	gk_strlist_free(&src->paths);
}

static int add_file(gk_shard_source *src, const char *path, const char *name,
		    gk_err *err)
{
	if (gk_strlist_push(&src->paths, path, err) < 0 ||
	    gk_strlist_push(&src->names, name, err) < 0)
		return -1;
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int walk(gk_shard_source *src, const char *dir, size_t rootlen,
		gk_err *err)
{
	struct dirent **list;
	int n = scandir(dir, &list, NULL, by_name), rc = 0;
	if (n < 0)
		return gk_err_sys(err, errno, "read directory '%s'", dir);
	for (int i = 0; i < n; i++) {
		const char *d = list[i]->d_name;
		char *path = NULL;
		struct stat st;
		if (rc < 0 || !strcmp(d, ".") || !strcmp(d, ".."))
			goto next;
		if (asprintf(&path, "%s/%s", dir, d) < 0) {
			path = NULL;
			rc = gk_err_sys(err, ENOMEM, "walk '%s'", dir);
			goto next;
		}
		/* d_type saves a stat per file where the file system fills it. */
		if (list[i]->d_type == DT_REG) {
			rc = add_file(src, path, path + rootlen, err);
			goto next;
		}
		if (lstat(path, &st) < 0) {
			rc = gk_err_sys(err, errno, "stat '%s'", path);
			goto next;
		}
		if (S_ISDIR(st.st_mode)) {
			rc = walk(src, path, rootlen, err);
			goto next;
		}
		if (S_ISLNK(st.st_mode) && stat(path, &st) < 0) {
			rc = gk_err_sys(err, errno, "stat '%s'", path);
			goto next;
		}
		if (!S_ISREG(st.st_mode))
			rc = gk_errf(err, "walk '%s': not a regular file", path);
		else
			rc = add_file(src, path, path + rootlen, err);
next:
		free(path);
		free(list[i]);
	}
	free(list);
	return rc;
}

/* A path's member name as tar stores it: leading "/" and "./" removed. */
static const char *tar_name(const char *path)
{
	for (;;) {
		if (path[0] == '/')
			path++;
		else if (path[0] == '.' && path[1] == '/')
			path += 2;
		else
			return path;
	}
}

int gk_shard_source_walk(gk_shard_source *src, const char *dir, gk_err *err)
{
	struct stat st;
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	char *root = strndup(dir, len);
	if (!root)
		return gk_err_sys(err, ENOMEM, "walk '%s'", dir);
	int rc;
	if (stat(root, &st) < 0)
		rc = gk_err_sys(err, errno, "stat '%s'", dir);
	else if (S_ISREG(st.st_mode))
		rc = add_file(src, dir, tar_name(dir), err);
	else if (!S_ISDIR(st.st_mode))
		rc = gk_errf(err, "walk '%s': not a directory or a regular file", dir);
	else
		rc = walk(src, root, len + 1, err);
	free(root);
	return rc;
}

int gk_shard_source_list(gk_shard_source *src, FILE *fp, const char *what,
			 gk_err *err)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	for (size_t lineno = 1; (n = getline(&line, &cap, fp)) >= 0; lineno++) {
		/* A name ends at its NUL: the rest of the line would vanish. */
		if (memchr(line, '\0', (size_t)n)) {
			free(line);
			return gk_errf(err, "read file list '%s': line %zu: a NUL byte (the list is one path per line, not find -print0 output)",
				       what, lineno);
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		if (add_file(src, line, tar_name(line), err) < 0) {
			free(line);
			return -1;
		}
	}
	int bad = ferror(fp);
	free(line);
	if (bad)
		return gk_err_sys(err, errno ? errno : EIO, "read file list '%s'", what);
	return 0;
}

int gk_shard_source_drop_outputs(gk_shard_source *src, const char *pattern,
				 unsigned first, const char *manifest,
				 gk_strlist *skipped, gk_err *err)
{
	gk_shard_outputs outs = {0};
	size_t keep = 0;
	char name[4096];
	int rc = -1;
	if (manifest && gk_shard_outputs_add(&outs, manifest, manifest, err) < 0)
		goto out;
	for (unsigned n = first, missing = 0; n < UINT_MAX && missing < 64; n++) {
		int convs = gk_shard_format_name(pattern, n, name, sizeof(name), err);
		if (convs < 0)
			goto out;
		if (strcmp(name, "-") == 0)
			break;
		size_t before = outs.n;
		char *ip = gk_shard_index_path(name);
		if (!ip) {
			gk_err_sys(err, ENOMEM, "pattern '%s'", pattern);
			goto out;
		}
		int r = gk_shard_outputs_add(&outs, name, name, err) < 0 ||
			gk_shard_outputs_add(&outs, ip, ip, err) < 0;
		free(ip);
		if (r)
			goto out;
		missing = outs.n == before ? missing + 1 : 0;
		if (convs == 0)
			break;
	}
	/* Compact both lists in place; after an error the rest stays in. */
	rc = 0;
	for (size_t i = 0; i < src->paths.n; i++) {
		if (rc == 0 && gk_shard_outputs_find(&outs, src->paths.v[i]) &&
		    (rc = gk_strlist_push(skipped, src->paths.v[i], err)) == 0) {
			free(src->paths.v[i]);
			free(src->names.v[i]);
			continue;
		}
		src->paths.v[keep] = src->paths.v[i];
		src->names.v[keep++] = src->names.v[i];
	}
	if (src->paths.n) {
		src->paths.n = src->names.n = keep;
		src->paths.v[keep] = src->names.v[keep] = NULL;
	}
out:
	gk_shard_outputs_free(&outs);
	return rc;
}

static const gk_shard_source *name_src;

static int by_member(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int c = strcmp(name_src->names.v[i], name_src->names.v[j]);
	return c ? c : (i < j ? -1 : i > j);
}

int gk_shard_source_name(gk_shard_source *src, const gk_shard_naming *nm,
			 size_t *nokey, gk_err *err)
{
	size_t n = src->names.n;
	*nokey = SIZE_MAX;
	for (size_t i = 0; i < n; i++) {
		char *m;
		int r = gk_shard_member_name(src->names.v[i], nm, &m, err);
		if (r == GK_SHARD_NO_KEY)
			*nokey = i;
		if (r < 0)
			return r;
		free(src->names.v[i]);
		src->names.v[i] = m;
	}
	/*
	 * Two files under one member name would meet in one sample (the
	 * writer refuses a repeated extension) or, renamed, hide each other:
	 * name both, before anything is written.
	 */
	size_t *ix = malloc((n + 1) * sizeof(*ix));
	if (!ix)
		return gk_err_sys(err, ENOMEM, "pack");
	for (size_t i = 0; i < n; i++)
		ix[i] = i;
	name_src = src;
	qsort(ix, n, sizeof(*ix), by_member);
	int rc = 0;
	for (size_t i = 1; i < n && rc == 0; i++) {
		const char *a = src->paths.v[ix[i - 1]], *b = src->paths.v[ix[i]];
		const char *m = src->names.v[ix[i]];
		if (strcmp(src->names.v[ix[i - 1]], m) != 0)
			continue;
		char *qa = gk_shard_name_quote(a), *qb = gk_shard_name_quote(b),
		     *qm = gk_shard_name_quote(m);
		if (strcmp(a, b) == 0)
			rc = gk_errf(err, "file '%s' is given twice (member '%s')", qa ? qa : a,
				     qm ? qm : m);
		else
			rc = gk_errf(err, "files '%s' and '%s' would both be member '%s'%s",
				     qa ? qa : a, qb ? qb : b, qm ? qm : m,
				     nm && nm->whole ? " (a whole-name key turns the dots of a name into '_')"
				     : !gk_str_ends(a, m) || !gk_str_ends(b, m)
				     ? " (a name without an extension was given one)" : "");
		free(qa);
		free(qb);
		free(qm);
	}
	free(ix);
	return rc;
}

uint64_t gk_shard_source_bytes(const gk_shard_source *src)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < src->paths.n; i++) {
		struct stat st;
		if (stat(src->paths.v[i], &st) < 0 || !S_ISREG(st.st_mode))
			return 0;
		sum += (uint64_t)st.st_size;
	}
	return sum;
}

/* A sample to pack: its files, as indices into the source. */
typedef struct group {
	size_t first, n; /* in the sorted index array */
	size_t order;    /* where its key first appeared */
} group;

static const gk_shard_source *sort_src;

static int by_key(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	const char *x = sort_src->names.v[i], *y = sort_src->names.v[j];
	ssize_t kx = gk_shard_key_len(x), ky = gk_shard_key_len(y);
	size_t lx = kx < 0 ? strlen(x) : (size_t)kx, ly = ky < 0 ? strlen(y) : (size_t)ky;
	int c = memcmp(x, y, lx < ly ? lx : ly);
	if (c == 0 && lx != ly)
		c = lx < ly ? -1 : 1;
	return c ? c : (i < j ? -1 : i > j);
}

static int by_order(const void *a, const void *b)
{
	size_t x = ((const group *)a)->order, y = ((const group *)b)->order;
	return x < y ? -1 : x > y;
}

static int same_key(const char *a, const char *b)
{
	ssize_t ka = gk_shard_key_len(a), kb = gk_shard_key_len(b);
	return ka >= 0 && ka == kb && memcmp(a, b, (size_t)ka) == 0;
}

/*
 * Samples whose files add up to more than this are streamed from the
 * files to the shard (gk_shard_writer_add_stream); smaller ones are read
 * into memory, where LZ4 compresses them in parallel batches.
 */
enum { STREAM_OVER = 4 << 20 };

/* One sample's files, open. */
typedef struct files {
	const gk_shard_source *src;
	const size_t *k;        /* source numbers of the members */
	int *fd;
	uint64_t *size;
	unsigned char **mem;    /* data of the files that are not regular */
} files;

/*
 * A file that is not regular (a fifo, /dev/stdin) has no size until it
 * ends: read it all into memory. A short read is not its end; 0 is.
 */
static int slurp(int fd, const char *path, unsigned char **out, uint64_t *size,
		 gk_err *err)
{
	sh_buf b = {0};
	for (;;) {
		if (sh_buf_reserve(&b, 1 << 16) < 0) {
			free(b.p);
			return gk_err_sys(err, ENOMEM, "read '%s'", path);
		}
		ssize_t r = read(fd, b.p + b.len, b.cap - b.len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(b.p);
			return gk_err_sys(err, errno, "read '%s'", path);
		}
		if (r == 0)
			break;
		b.len += (size_t)r;
	}
	*out = b.p;
	*size = b.len;
	return 0;
}

/*
 * Exactly size bytes of a regular file from off; fewer: it shrank. Files
 * are opened when their first byte is wanted and closed after their last,
 * so a sample of many files holds one descriptor at a time.
 */
static int read_exact(files *f, size_t i, uint64_t off, void *buf, size_t n,
		      gk_err *err)
{
	const char *path = f->src->paths.v[f->k[i]];
	if (f->fd[i] < 0) {
		struct stat st;
		if ((f->fd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return gk_err_sys(err, errno, "open '%s'", path);
		if (fstat(f->fd[i], &st) < 0)
			return gk_err_sys(err, errno, "stat '%s'", path);
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size[i])
			return gk_errf(err, "read '%s': the file changed while being packed", path);
	}
	ssize_t r = gk_pread_full(f->fd[i], buf, n, (off_t)off);
	if (r < 0)
		return gk_err_sys(err, errno, "read '%s'", path);
	if ((size_t)r != n)
		return gk_errf(err, "read '%s': the file shrank while being packed (%llu bytes, was %llu)",
			       path, (unsigned long long)(off + (uint64_t)r),
			       (unsigned long long)f->size[i]);
	/* After the last byte: the file must not have grown either. */
	if (off + n == f->size[i]) {
		struct stat st;
		if (fstat(f->fd[i], &st) == 0 && (uint64_t)st.st_size != f->size[i])
			return gk_errf(err, "read '%s': the file changed size while being packed (%llu bytes, was %llu)",
				       path, (unsigned long long)st.st_size,
				       (unsigned long long)f->size[i]);
		close(f->fd[i]);
		f->fd[i] = -1;
	}
	return 0;
}

static int files_read(void *ctx, size_t i, uint64_t off, void *buf, size_t n,
		      gk_err *err)
{
	files *f = ctx;
	if (f->mem[i]) {
		memcpy(buf, f->mem[i] + off, n);
		return 0;
	}
	return read_exact(f, i, off, buf, n, err);
}

static int pack_group(gk_shard_writer *w, const gk_shard_source *src,
		      const size_t *ix, const group *g, sh_buf *data,
		      gk_shard_member *m, gk_err *err)
{
	const char *first = src->names.v[ix[g->first]];
	ssize_t klen = gk_shard_key_len(first);
	if (klen < 0)
		return gk_errf(err, "name '%s': no KEY.EXT form (webdataset would skip it)", first);
	files f = {src, ix + g->first, calloc(g->n, sizeof(int)),
		   calloc(g->n, sizeof(uint64_t)), calloc(g->n, sizeof(unsigned char *))};
	char *key = strndup(first, (size_t)klen);
	uint64_t total = 0;
	int rc = -1;
	if (!f.fd || !f.size || !f.mem || !key) {
		gk_err_sys(err, ENOMEM, "pack");
		goto out;
	}
	for (size_t i = 0; i < g->n; i++)
		f.fd[i] = -1;
	for (size_t i = 0; i < g->n; i++) {
		const char *path = src->paths.v[f.k[i]];
		struct stat st;
		if (stat(path, &st) < 0) {
			gk_err_sys(err, errno, "open '%s'", path);
			goto out;
		}
		if (S_ISREG(st.st_mode)) {
			f.size[i] = (uint64_t)st.st_size;
		} else {
			/* A fifo or a device: read now, to know its size. */
			if ((f.fd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
				gk_err_sys(err, errno, "open '%s'", path);
				goto out;
			}
			int r = slurp(f.fd[i], path, &f.mem[i], &f.size[i], err);
			close(f.fd[i]);
			f.fd[i] = -1;
			if (r < 0)
				goto out;
		}
		total += f.size[i];
		const char *name = src->names.v[f.k[i]];
		m[i].ext = name + klen + 1;
		m[i].size = f.size[i];
		m[i].data = f.mem[i] ? (const void *)f.mem[i] : (const void *)"";
	}
	if (total > STREAM_OVER) {
		rc = gk_shard_writer_add_stream(w, key, g->n, m, files_read, &f, err);
		goto out;
	}
	/* Small: one buffer for the sample, members back to back. */
	data->len = 0;
	if (sh_buf_reserve(data, (size_t)total) < 0) {
		gk_err_sys(err, ENOMEM, "pack");
		goto out;
	}
	for (size_t i = 0; i < g->n; i++) {
		if (files_read(&f, i, 0, data->p + data->len, (size_t)f.size[i], err) < 0)
			goto out;
		data->len += (size_t)f.size[i];
	}
	for (size_t i = 0, at = 0; i < g->n; at += (size_t)f.size[i], i++)
		m[i].data = data->p + at;
	rc = gk_shard_writer_add(w, key, g->n, m, err);
out:
	for (size_t i = 0; f.fd && i < g->n; i++)
		if (f.fd[i] >= 0)
			close(f.fd[i]);
	for (size_t i = 0; f.mem && i < g->n; i++)
		free(f.mem[i]);
	free(f.fd);
	free(f.size);
	free(f.mem);
	free(key);
	return rc;
}

/*
 * A sample to tokenize: its one text file to the batch. A regular file
 * is read by an encoding thread; any other (a fifo, /dev/stdin) here,
 * now, in input order, as its writer may feed several in that order.
 */
static int tok_group(sh_tokb *b, const gk_shard_tokenize *tz,
		     const gk_shard_source *src, const size_t *ix, const group *g,
		     gk_shard_member *m, gk_err *err)
{
	const char *first = src->names.v[ix[g->first]];
	ssize_t klen = gk_shard_key_len(first);
	char *key = NULL;
	ssize_t t;
	if (klen < 0) {
		gk_errf(err, "name '%s': no KEY.EXT form (webdataset would skip it)", first);
		goto fail;
	}
	for (size_t i = 0; i < g->n; i++)
		m[i] = (gk_shard_member){.ext = src->names.v[ix[g->first + i]] + klen + 1};
	if (!(key = strndup(first, (size_t)klen))) {
		gk_err_sys(err, ENOMEM, "pack");
		goto fail;
	}
	if ((t = sh_tokb_check(tz, key, g->n, m, err)) < 0)
		goto fail;
	const char *path = src->paths.v[ix[g->first + (size_t)t]];
	unsigned char *text = NULL;
	uint64_t size = 0;
	struct stat st;
	int fd, rc;
	if (stat(path, &st) < 0) {
		gk_err_sys(err, errno, "open '%s'", path);
		goto fail;
	}
	if (S_ISREG(st.st_mode)) {
		rc = sh_tokb_add_file(b, key, path, (uint64_t)st.st_size, err);
	} else {
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			gk_err_sys(err, errno, "open '%s'", path);
			goto fail;
		}
		rc = slurp(fd, path, &text, &size, err);
		close(fd);
		if (rc < 0)
			goto fail;
		rc = sh_tokb_add(b, key, text, (size_t)size, err);
	}
	free(key);
	return rc;
fail:
	/* An earlier document's error, if any, comes first. */
	sh_tokb_error(b, err);
	free(key);
	return -1;
}

int gk_shard_pack(gk_shard_writer *w, const gk_shard_source *src, int shuffle,
		  uint64_t seed, gk_shard_tokenize *tz, gk_progress *progress,
		  gk_err *err)
{
	sh_tokb *tb = NULL;
	size_t n = src->names.n, ng = 0, maxn = 1;
	size_t *ix = malloc((n + 1) * sizeof(*ix));
	group *g = malloc((n + 1) * sizeof(*g));
	gk_shard_member *m = NULL;
	sh_buf data = {0};
	int rc = -1;
	if (!ix || !g)
		goto nomem;
	for (size_t i = 0; i < n; i++)
		ix[i] = i;
	sort_src = src;
	qsort(ix, n, sizeof(*ix), by_key);
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || !same_key(src->names.v[ix[i - 1]], src->names.v[ix[i]])) {
			g[ng++] = (group){i, 0, ix[i]};
		}
		g[ng - 1].n++;
		if (g[ng - 1].n > maxn)
			maxn = g[ng - 1].n;
	}
	qsort(g, ng, sizeof(*g), by_order);
	/* Members of a group keep their order in the input; the writer sorts. */
	if (shuffle) {
		uint64_t *perm = malloc((ng + 1) * sizeof(*perm));
		group *tmp = malloc((ng + 1) * sizeof(*tmp));
		if (!perm || !tmp) {
			free(perm);
			free(tmp);
			goto nomem;
		}
		gk_shard_permute(perm, ng, gk_shard_mix(seed));
		for (size_t i = 0; i < ng; i++)
			tmp[i] = g[perm[i]];
		memcpy(g, tmp, ng * sizeof(*g));
		free(perm);
		free(tmp);
	}
	if (!(m = malloc(maxn * sizeof(*m))))
		goto nomem;
	if (tz && sh_tokb_new(&tb, w, tz, progress, err) < 0)
		goto out;
	for (size_t i = 0; i < ng; i++) {
		if (tb) {
			if (tok_group(tb, tz, src, ix, &g[i], m, err) < 0)
				goto out;
			continue;
		}
		if (pack_group(w, src, ix, &g[i], &data, m, err) < 0)
			goto out;
		if (progress)
			gk_progress_update(progress, gk_shard_writer_bytes_in(w));
	}
	if (tb && sh_tokb_finish(tb, err) < 0)
		goto out;
	rc = 0;
	goto out;
nomem:
	gk_err_sys(err, ENOMEM, "pack");
out:
	sh_tokb_free(tb);
	free(ix);
	free(g);
	free(m);
	free(data.p);
	return rc;
}

/* A sample of a tar stream to tokenize: its text member, copied. */
static int tok_sample(sh_tokb *b, const gk_shard_tokenize *tz, const char *key,
		      const gk_shard_sample *s, gk_err *err)
{
	ssize_t t = sh_tokb_check(tz, key, s->n, s->m, err);
	if (t < 0)
		return -1;
	size_t len = (size_t)s->m[t].size;
	unsigned char *text = malloc(len ? len : 1);
	if (!text)
		return gk_err_sys(err, ENOMEM, "tokenize '%s'", key);
	memcpy(text, s->m[t].data, len);
	return sh_tokb_add(b, key, text, len, err);
}

int gk_shard_pack_tar(gk_shard_writer *w, const char *path,
		      const gk_shard_naming *nm, gk_shard_tokenize *tz,
		      gk_progress *progress, gk_err *err)
{
	gk_shard_reader *r;
	const gk_shard_sample *s;
	sh_tokb *tb = NULL;
	int rc;
	if (tz && sh_tokb_new(&tb, w, tz, progress, err) < 0)
		return -1;
	if (gk_shard_reader_open(&r, path, err) < 0) {
		sh_tokb_free(tb);
		return -1;
	}
	sh_reader_pack(r, 1);
	sh_reader_pack_naming(r, nm);
	while ((rc = gk_shard_reader_next(r, &s, err)) == 1) {
		const char *key = s->key;
		while (key[0] == '.' && key[1] == '/')
			key += 2;
		if (tb ? tok_sample(tb, tz, key, s, err) < 0
		       : gk_shard_writer_add(w, key, s->n, s->m, err) < 0) {
			rc = -1;
			break;
		}
		if (progress && !tb)
			gk_progress_update(progress, gk_shard_writer_bytes_in(w));
	}
	if (rc == 0 && tb && sh_tokb_finish(tb, err) < 0)
		rc = -1;
	int nokey = rc < 0 && sh_reader_nokey(r);
	/* A sample failed: an error of the documents before it comes first. */
	if (rc < 0 && tb && sh_tokb_error(tb, err))
		nokey = 0;
	gk_shard_reader_close(r);
	sh_tokb_free(tb);
	return rc < 0 ? (nokey ? GK_SHARD_NO_KEY : -1) : 0;
}
