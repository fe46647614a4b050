/*
 * outputs.c - the files a run has written, by identity.
 *
 * Names are not enough: "out/x0/../s.tar" and "out/x1/../s.tar" are one
 * file, and so are a manifest and a shard given the same name. Each
 * commit renames over whatever is under its name, so without this a
 * pattern that maps two shard numbers to one file silently keeps only
 * the last.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shard/shard.h"

int gk_shard_outputs_add(gk_shard_outputs *o, const char *path, const char *what,
			 gk_err *err)
{
	struct stat st;
	/* No file there (another run's commit removed an index; a pattern's
	 * name under a file): nothing to keep. */
	if (stat(path, &st) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0
							   : gk_err_sys(err, errno, "stat '%s'", path);
	if (GK_GROW(o->v, o->cap, o->n + 1, "outputs", err) < 0)
		return -1;
	char *w = strdup(what);
	if (!w)
		return gk_err_sys(err, ENOMEM, "outputs");
	o->v[o->n++] = (gk_shard_output){(uint64_t)st.st_dev, (uint64_t)st.st_ino, w};
	return 0;
}

const gk_shard_output *gk_shard_outputs_find(const gk_shard_outputs *o, const char *path)
{
	struct stat st;
	if (!o || o->n == 0 || stat(path, &st) < 0)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (o->v[i].dev == (uint64_t)st.st_dev && o->v[i].ino == (uint64_t)st.st_ino)
			return &o->v[i];
	return NULL;
}

int gk_shard_outputs_check(const gk_shard_outputs *o, const char *path,
			   const char *what, gk_err *err)
{
	const gk_shard_output *x = gk_shard_outputs_find(o, path);
	return x ? gk_errf(err, "%s: the same file as %s, written by this run", what, x->what)
		 : 0;
}

void gk_shard_outputs_free(gk_shard_outputs *o)
{
	for (size_t i = 0; i < o->n; i++)
		free(o->v[i].what);
	free(o->v);
	memset(o, 0, sizeof(*o));
}
