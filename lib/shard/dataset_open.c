/*
 * dataset_open.c - opening a dataset: the shard list from a manifest or
 * a list (list.c: brace patterns, globs, directories), each shard's sample count (from its index, else from
 * reading it), and the list's identity that a saved state is checked
 * against (dataset_resume.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/dataset_internal.h"

static int load_counts(gk_shard_dataset *d, const char *source, gk_err *err)
{
	size_t n = strlen(source);
	if (n > 5 && strcmp(source + n - 5, ".json") == 0) {
		if (gk_shard_manifest_load(source, &d->man, err) < 0)
			return -1;
		if (!(d->files = calloc(d->man.n + 1, sizeof(char *))))
			return gk_err_sys(err, ENOMEM, "dataset");
		for (size_t i = 0; i < d->man.n; i++)
			if (!(d->files[i] = gk_shard_manifest_file(&d->man, i)))
				return gk_err_sys(err, ENOMEM, "dataset");
		if (!(d->idx = calloc(d->man.n + 1, sizeof(*d->idx))) ||
		    !(d->idx_tried = calloc(d->man.n + 1, sizeof(int))) ||
		    !(d->checked = calloc(d->man.n + 1, sizeof(*d->checked))))
			return gk_err_sys(err, ENOMEM, "dataset");
		return 0;
	}
	gk_strlist l = {0};
	if (gk_shard_list_expand(source, &l, err) < 0) {
		gk_strlist_free(&l);
		return -1;
	}
	d->files = l.v;
	if (!d->files || !(d->idx = calloc(l.n + 1, sizeof(*d->idx))) ||
	    !(d->idx_tried = calloc(l.n + 1, sizeof(int))) ||
	    !(d->checked = calloc(l.n + 1, sizeof(*d->checked)))) {
		gk_strlist_free(&l);
		d->files = NULL;
		return gk_err_sys(err, ENOMEM, "dataset");
	}
	for (size_t i = 0; i < l.n; i++) {
		/*
		 * Epochs read a shard again and again, at any sample: a FIFO or
		 * a device would block in open or give its bytes once.
		 */
		struct stat st;
		if (stat(l.v[i], &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
			d->man.n = i;
			return gk_errf(err, "shard '%s': not a regular file (a dataset reads its "
				       "shards more than once)", l.v[i]);
		}
		/*
		 * Counts from the shard's own index, else from reading it
		 * (an index found not to be its own is said and replaced).
		 */
		gk_err stale;
		int end_blocks;
		int rc = sh_index_load_for(l.v[i], &d->idx[i], &stale, &end_blocks, err);
		d->idx_tried[i] = SH_IDX_FILE;
		if (rc == 0) {
			if (stale.msg[0])
				sh_dataset_note(d, "%s: reading the tar instead", stale.msg);
			rc = sh_index_build(l.v[i], &d->idx[i], 0, &end_blocks, err);
			d->idx_tried[i] = SH_IDX_BUILT;
		}
		if (rc >= 0)
			sh_dataset_note_end(d, l.v[i], end_blocks, d->idx[i].nsamples);
		if (rc < 0 || gk_shard_manifest_add(&d->man, l.v[i], d->idx[i].nsamples,
						    0, 0, err) < 0) {
			d->man.n = i; /* files[] stays owned by d */
			return -1;
		}
	}
	return sh_dataset_beside(d, err);
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

/* Bytes of a shard's head that go into the list's identity. */
enum { HEAD_BYTES = 4096 };

/*
 * Length of the longest directory prefix (up to and with its last '/')
 * that every file of the list shares: "" when one is absolute and
 * another not, or when none has a directory.
 */
static size_t common_dir(char *const *files, size_t n)
{
	size_t len = n ? strlen(files[0]) : 0;
	for (size_t i = 1; i < n && len; i++) {
		size_t k = 0;
		while (k < len && files[i][k] && files[i][k] == files[0][k])
			k++;
		len = k;
	}
	while (len && files[0][len - 1] != '/')
		len--;
	return len;
}

/* A shard's file, wherever the list names it from: note_repeats. */
typedef struct file_id {
	dev_t dev;
	ino_t ino;
	size_t i;
} file_id;

static int cmp_file_id(const void *a, const void *b)
{
	const file_id *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * One shard's part of the list identity past its name and count: its
 * size and the XXH3 of its first HEAD_BYTES (one open and one read, at
 * open; a shard's index would bind the whole file, but a manifest list
 * reads no index and DALI's indexes carry no binding, so both sources
 * use the head and give the same identity).
 */
static int shard_head(const char *path, unsigned char out[16], struct stat *sto,
		      gk_err *err)
{
	char buf[HEAD_BYTES];
	struct stat st;
	ssize_t n = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 ||
	    (n = pread(fd, buf, (size_t)st.st_size < sizeof(buf) ? (size_t)st.st_size : sizeof(buf), 0)) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return gk_err_sys(err, e, "shard '%s'", path);
	}
	close(fd);
	*sto = st;
	uint64_t v[2] = {(uint64_t)st.st_size, gk_xxh3(buf, (size_t)n)};
	for (int j = 0; j < 2; j++)
		for (int k = 0; k < 8; k++)
			out[8 * j + k] = (unsigned char)(v[j] >> (8 * k));
	return 0;
}

/*
 * What a state says of the shard list. "files" (gk_shard_state.files):
 * each shard's path relative to the list's common directory, its count,
 * its size and the hash of its head, so the same tree moved elsewhere,
 * or listed by a manifest instead of a pattern, is the same list, while
 * en/train-000.tar and de/train-000.tar are not, nor two folders of
 * like-named shards listed on their own. "list" is today's older
 * identity (basenames and counts), kept to check states saved before
 * "files". The names (relative paths) go into states only while they
 * are short: a state is saved per rank and worker (trainer.json) and
 * exchanged in fixed-size buffers; a long list is the hashes alone.
 */
static int list_identity(gk_shard_dataset *d, file_id *ids, gk_err *err)
{
	gk_hash *h = gk_hash_new(), *f = gk_hash_new();
	size_t json = 1; /* [...] */
	int names = 1, rc = -1;
	if (!h || !f) {
		gk_err_sys(err, ENOMEM, "dataset");
		goto out;
	}
	d->common = common_dir(d->files, d->man.n);
	for (size_t i = 0; i < d->man.n; i++) {
		const char *b = base_name(d->man.v[i].path), *rel = d->files[i] + d->common;
		unsigned char le[8], head[16];
		struct stat st;
		for (int k = 0; k < 8; k++)
			le[k] = (unsigned char)(d->man.v[i].samples >> (8 * k));
		gk_hash_update(h, b, strlen(b) + 1);
		gk_hash_update(h, le, sizeof(le));
		if (shard_head(d->files[i], head, &st, err) < 0)
			goto out;
		ids[i] = (file_id){st.st_dev, st.st_ino, i};
		gk_hash_update(f, rel, strlen(rel) + 1);
		gk_hash_update(f, le, sizeof(le));
		gk_hash_update(f, head, sizeof(head));
		if (names) {
			json_t *js = json_string(rel); /* NULL: not UTF-8 */
			/* ["NAME",N] and a comma or the closing ] */
			json += sh_json_str(NULL, 0, rel) + 4 +
				(size_t)snprintf(NULL, 0, "%llu",
						 (unsigned long long)d->man.v[i].samples);
			names = js && json <= GK_SHARD_STATE_NAMES;
			json_decref(js);
		}
	}
	d->list_id = gk_hash_digest(h);
	d->files_id = gk_hash_digest(f);
	rc = 0;
	if (!names)
		goto out;
	gk_shard_state_shard *v = calloc(2 * d->man.n, sizeof(*v));
	if (!v) {
		rc = gk_err_sys(err, ENOMEM, "dataset");
		goto out;
	}
	for (size_t i = 0; i < d->man.n; i++) {
		v[i] = (gk_shard_state_shard){d->files[i] + d->common, d->man.v[i].samples};
		v[d->man.n + i] = (gk_shard_state_shard){base_name(d->man.v[i].path),
							 d->man.v[i].samples};
	}
	d->names = v;
	d->base_names = v + d->man.n;
	d->nnames = d->man.n;
out:
	gk_hash_free(h);
	gk_hash_free(f);
	return rc;
}

/*
 * A shard listed more than once (the same file, by any name) is read that
 * many times an epoch: a way to weight it, or a typo in a brace list, so
 * it is allowed and said once. v: the list's files, as list_identity
 * found them (sorted here).
 */
static void note_repeats(gk_shard_dataset *d, file_id *v)
{
	size_t k = d->man.n, groups = 0, first = 0, times = 0;
	if (!d->o.note)
		return;
	qsort(v, k, sizeof(*v), cmp_file_id);
	for (size_t i = 0, j; i < k; i = j) {
		for (j = i + 1; j < k && v[j].dev == v[i].dev && v[j].ino == v[i].ino; j++)
			;
		if (j - i > 1 && groups++ == 0)
			first = v[i].i, times = j - i;
	}
	if (groups)
		sh_dataset_note(d, "shard '%s' is listed %zu times, so its samples are read %zu "
				"times an epoch%s", d->man.v[first].path, times, times,
				groups > 1 ? " (and other shards are listed more than once too)" : "");
}

int gk_shard_dataset_open(gk_shard_dataset **out, const char *source,
			  const gk_shard_dataset_opts *o, gk_err *err)
{
	gk_shard_dataset *d = calloc(1, sizeof(*d));
	if (!d)
		return gk_err_sys(err, ENOMEM, "dataset");
	d->o = *o;
	d->fd = -1;
	if (d->o.world < 1)
		d->o.world = 1;
	if (d->o.workers < 1)
		d->o.workers = 1;
	if (!d->o.shuffle_buffer)
		d->o.shuffle_buffer = 1000;
	if (d->o.rank < 0 || d->o.rank >= d->o.world || d->o.worker < 0 ||
	    d->o.worker >= d->o.workers) {
		free(d);
		return gk_errf(err, "dataset: rank %d of %d, worker %d of %d: out of range",
			       o->rank, o->world, o->worker, o->workers);
	}
	d->parts = (uint64_t)d->o.world * (uint64_t)d->o.workers;
	d->part = (uint64_t)d->o.rank * (uint64_t)d->o.workers + (uint64_t)d->o.worker;
	if (load_counts(d, source, err) < 0)
		goto fail;
	if (d->man.n == 0) {
		gk_errf(err, "dataset '%s': no shards", source);
		goto fail;
	}
	file_id *ids = malloc(d->man.n * sizeof(*ids));
	if (!ids) {
		gk_err_sys(err, ENOMEM, "dataset");
		goto fail;
	}
	if (list_identity(d, ids, err) < 0) {
		free(ids);
		goto fail;
	}
	note_repeats(d, ids);
	free(ids);
	d->per = d->per0 = d->man.samples / d->parts;
	if (d->per == 0) {
		gk_errf(err, "dataset '%s': %llu samples cannot give each of %llu ranks x workers one",
			source, (unsigned long long)d->man.samples, (unsigned long long)d->parts);
		goto fail;
	}
	size_t b = sh_dataset_window(d);
	d->order = malloc(d->man.n * sizeof(uint64_t));
	d->prefix = malloc((d->man.n + 1) * sizeof(uint64_t));
	d->win = calloc(b, sizeof(*d->win));
	d->perm = malloc(b * sizeof(*d->perm));
	d->q.cap = d->o.prefetch ? d->o.prefetch : 1;
	d->q.v = calloc(d->q.cap, sizeof(*d->q.v));
	if (!d->order || !d->prefix || !d->win || !d->perm || !d->q.v) {
		gk_err_sys(err, ENOMEM, "dataset");
		goto fail;
	}
	pthread_mutex_init(&d->q.mu, NULL);
	pthread_cond_init(&d->q.more, NULL);
	pthread_cond_init(&d->q.room, NULL);
	*out = d;
	return 0;
fail:
	d->q.v = NULL;
	gk_shard_dataset_close(d);
	return -1;
}

uint64_t gk_shard_dataset_len(const gk_shard_dataset *d)
{
	return d->per;
}

const gk_shard_manifest *gk_shard_dataset_manifest(const gk_shard_dataset *d)
{
	return &d->man;
}
