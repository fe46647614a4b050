/*
 * extract.c - write a member below a directory and nowhere else.
 *
 * Checking the name is not enough: a symlink already in the directory
 * ("a -> /etc") would carry "a/passwd.txt" outside. So every component
 * is opened relative to its parent with O_NOFOLLOW, and the file itself
 * is created under a temporary name and renamed, which replaces a
 * planted link instead of writing through it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/internal.h"

/* Where the bytes of the file being extracted come from. */
typedef ssize_t (*chunk_fn)(void *ctx, void *buf, size_t n, gk_err *err);

static int check_path(const char *name, gk_err *err)
{
	if (!*name)
		return gk_errf(err, "extract '': empty name");
	if (*name == '/')
		return gk_errf(err, "extract '%s': absolute path", name);
	for (const char *c = name; c;) {
		const char *end = strchr(c, '/');
		size_t len = end ? (size_t)(end - c) : strlen(c);
		if (len == 0 || (len == 1 && c[0] == '.') ||
		    (len == 2 && c[0] == '.' && c[1] == '.'))
			return gk_errf(err, "extract '%s': '..', '.' or empty path component",
				       name);
		c = end ? end + 1 : NULL;
	}
	return 0;
}

/* Write all that next gives (until it returns 0) to fd. */
static int copy_out(int fd, chunk_fn next, void *ctx, const char *dirname,
		    const char *name, gk_err *err)
{
	static __thread unsigned char buf[1 << 16];
	ssize_t k;
	while ((k = next(ctx, buf, sizeof(buf), err)) > 0)
		if (gk_write_full(fd, buf, (size_t)k) < 0)
			return gk_err_sys(err, errno, "write '%s/%s'", dirname, name);
	return k < 0 ? -1 : 0;
}

static int extract(int dirfd, const char *dirname, const char *name,
		   chunk_fn next, void *ctx, gk_err *err)
{
	/* What out: frees is set before the first goto can jump over it. */
	char *copy = strdup(name), *full = NULL, tmp[64];
	int fd = dup(dirfd), tfd = -1, rc = -1;
	if (!copy || fd < 0) {
		gk_err_sys(err, errno ? errno : ENOMEM, "extract '%s'", name);
		goto out;
	}
	if (check_path(name, err) < 0)
		goto out;
	char *comp = copy, *slash;
	while ((slash = strchr(comp, '/'))) {
		*slash = '\0';
		if (mkdirat(fd, comp, 0777) < 0 && errno != EEXIST) {
			gk_err_sys(err, errno, "create directory '%s/%s'", dirname, copy);
			goto out;
		}
		int sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			gk_err_sys(err, errno, "extract '%s': directory '%s'", name, copy);
			goto out;
		}
		close(fd);
		fd = sub;
		*slash = '/';
		comp = slash + 1;
	}
	/*
	 * The temp file is created and registered for removal on a signal as
	 * one step: a SIGTERM between the two would leave it behind.
	 */
	gk_cleanup_hold();
	for (int tries = 0; tfd < 0 && tries < 100; tries++) {
		snprintf(tmp, sizeof(tmp), ".gk-extract.%ld.%d", (long)getpid(), rand());
		tfd = openat(fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (tfd < 0 && errno != EEXIST)
			break;
	}
	int e = errno, slot = -1;
	if (tfd >= 0 &&
	    asprintf(&full, "%s/%.*s%s", dirname, (int)(comp - copy), name, tmp) < 0) {
		full = NULL;
		unlinkat(fd, tmp, 0);
		close(tfd);
		tfd = -1;
		e = ENOMEM;
	}
	if (tfd >= 0)
		slot = gk_cleanup_on_signal(full);
	gk_cleanup_release();
	if (tfd < 0) {
		gk_err_sys(err, e, "extract '%s'", name);
		goto out;
	}
	int wr = copy_out(tfd, next, ctx, dirname, name, err);
	if (close(tfd) < 0 && wr == 0)
		wr = gk_err_sys(err, errno, "write '%s/%s'", dirname, name);
	if (wr < 0) {
		unlinkat(fd, tmp, 0);
	} else if (renameat(fd, tmp, fd, comp) < 0) {
		gk_err_sys(err, errno, "extract '%s'", name);
		unlinkat(fd, tmp, 0);
	} else {
		rc = 0;
	}
	gk_cleanup_forget(slot);
out:
	free(full);
	if (fd >= 0)
		close(fd);
	free(copy);
	return rc;
}

/* ---- from memory ------------------------------------------------------------- */

typedef struct mem {
	const unsigned char *p;
	size_t left;
} mem;

static ssize_t mem_next(void *ctx, void *buf, size_t n, gk_err *err)
{
	mem *m = ctx;
	(void)err;
	if (n > m->left)
		n = m->left;
	memcpy(buf, m->p, n);
	m->p += n;
	m->left -= n;
	return (ssize_t)n;
}

int gk_shard_extract_file(int dirfd, const char *dirname, const char *name,
			  const void *data, size_t size, gk_err *err)
{
	mem m = {data, size};
	return extract(dirfd, dirname, name, mem_next, &m, err);
}

/* ---- from a shard, member by member ------------------------------------------ */

typedef struct job {
	gk_shard_reader *r;
	int dirfd;
	const char *dirname;
} job;

static ssize_t reader_next(void *ctx, void *buf, size_t n, gk_err *err)
{
	return sh_reader_read(ctx, buf, n, err);
}

static int member(void *ctx, const char *name, uint64_t size, gk_err *err)
{
	job *j = ctx;
	(void)size;
	return extract(j->dirfd, j->dirname, name, reader_next, j->r, err);
}

int gk_shard_extract(const char *shard, int dirfd, const char *dirname,
		     gk_err *err)
{
	job j = {NULL, dirfd, dirname};
	const gk_shard_sample *s;
	int rc;
	if (gk_shard_reader_open(&j.r, shard, err) < 0)
		return -1;
	gk_shard_reader_strict(j.r, 1);
	sh_reader_on_member(j.r, member, &j);
	while ((rc = gk_shard_reader_next(j.r, &s, err)) == 1)
		;
	gk_shard_reader_close(j.r);
	return rc;
}
