/*
 * list.c - the files a shard list names: brace patterns, globs and
 * directories, in one order that every rank computes alike (byte order,
 * never the locale's collation, which can differ between hosts).
 */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shard/shard.h"

static int by_bytes(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/* A *, ? or [ (escaped or not: glob(3) takes the backslash away): the
 * word goes through glob. */
static int has_glob(const char *w)
{
	return strpbrk(w, "*?[") != NULL;
}

int gk_shard_list_is_shard(const char *name)
{
	return gk_str_ends(name, ".tar") || gk_str_ends(name, ".tar.lz4");
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/*
 * A directory's shards: the files in it (not in its subdirectories)
 * named *.tar or *.tar.lz4, in byte order. None is an error that says
 * what the directory holds instead.
 */
static int list_dir(const char *dir, gk_strlist *out, gk_err *err)
{
	struct dirent **v;
	int n = scandir(dir, &v, NULL, by_name), rc = 0;
	size_t found = 0, bins = 0, others = 0;
	const char *sep = gk_str_ends(dir, "/") ? "" : "/";
	char *json = NULL;
	if (n < 0)
		return gk_err_sys(err, errno, "shard list: read directory '%s'", dir);
	for (int i = 0; i < n; i++) {
		const char *d = v[i]->d_name;
		char *path = NULL;
		if (rc == 0 && gk_shard_list_is_shard(d)) {
			if (asprintf(&path, "%s%s%s", dir, sep, d) < 0)
				rc = gk_err_sys(err, ENOMEM, "shard list '%s'", dir);
			else if (!is_dir(path))
				rc = gk_strlist_push(out, path, err), found++;
			free(path);
		}
		bins += gk_str_ends(d, ".bin");
		others += d[0] != '.' && !gk_str_ends(d, ".bin") && !gk_str_ends(d, ".json");
		if (!json && gk_str_ends(d, ".json"))
			json = strdup(d);
		free(v[i]);
	}
	free(v);
	if (rc == 0 && found == 0) {
		char hint[600] = "";
		if (json)
			snprintf(hint, sizeof(hint), "; a manifest is read when named: '%s%s%s'", dir, sep,
				 json);
		else if (bins)
			snprintf(hint, sizeof(hint), "; token files are listed by a glob, e.g. '%s%s*train*.bin'",
				 dir, sep);
		else if (others)
			snprintf(hint, sizeof(hint), "; its files are no shards: pack them first (data-pack -c -o SHARDS/train-%%06d.tar %s)",
				 dir);
		rc = gk_errf(err, "shard list: directory '%s' holds no shards (*.tar, *.tar.lz4)%s",
			     dir, hint);
	}
	free(json);
	return rc;
}

/* A glob's files in byte order; one that matches nothing is an error,
 * unless the word names a file as it is (a name with a '[' in it). */
static int list_glob(const char *word, gk_strlist *out, gk_err *err)
{
	glob_t g;
	struct stat st;
	int r = glob(word, GLOB_NOSORT, NULL, &g), rc = 0;
	if (r == GLOB_NOMATCH) {
		globfree(&g);
		if (stat(word, &st) == 0)
			return gk_strlist_push(out, word, err);
		return gk_errf(err, "shard list: no file matches '%s'", word);
	}
	if (r != 0) {
		globfree(&g);
		return r == GLOB_NOSPACE ? gk_err_sys(err, ENOMEM, "shard list '%s'", word)
					 : gk_errf(err, "shard list '%s': cannot read a directory it names", word);
	}
	qsort(g.gl_pathv, g.gl_pathc, sizeof(*g.gl_pathv), by_bytes);
	for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
		const char *f = g.gl_pathv[i];
		/*
		 * A glob of every file of a folder of shards also matches
		 * the indexes and the manifest beside them, which would be
		 * read as tars: say so instead of "unrecognized archive
		 * format".
		 */
		if (gk_str_ends(f, ".idx") || gk_str_ends(f, ".json"))
			rc = gk_errf(err, "shard list: '%s' matches '%s', %s, not a shard (narrow it to the shards, e.g. '*.tar')",
				     word, f, gk_str_ends(f, ".idx") ? "an index" : "a manifest or other JSON");
		else
			rc = is_dir(f) ? list_dir(f, out, err) : gk_strlist_push(out, f, err);
	}
	globfree(&g);
	return rc;
}

int gk_shard_list_expand(const char *source, gk_strlist *out, gk_err *err)
{
	gk_strlist words = {0};
	int rc = gk_brace_expand(source, 0, &words, err);
	for (size_t i = 0; i < words.n && rc == 0; i++) {
		const char *w = words.v[i];
		if (has_glob(w))
			rc = list_glob(w, out, err);
		else if (is_dir(w))
			rc = list_dir(w, out, err);
		else
			rc = gk_strlist_push(out, w, err);
	}
	gk_strlist_free(&words);
	return rc;
}
