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

#include "shard/shard.h"

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

int gk_shard_extract_file(int dirfd, const char *dirname, const char *name,
			  const void *data, size_t size, gk_err *err)
{
	char *copy = strdup(name);
	int fd = dup(dirfd), rc = -1;
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
	char tmp[64], full[8192];
	int tfd = -1;
	for (int tries = 0; tfd < 0 && tries < 100; tries++) {
		snprintf(tmp, sizeof(tmp), ".gk-extract.%ld.%d", (long)getpid(), rand());
		tfd = openat(fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (tfd < 0 && errno != EEXIST)
			break;
	}
	if (tfd < 0) {
		gk_err_sys(err, errno, "extract '%s'", name);
		goto out;
	}
	snprintf(full, sizeof(full), "%s/%.*s%s", dirname, (int)(comp - copy), name, tmp);
	int slot = gk_cleanup_on_signal(full);
	int wr = gk_write_full(tfd, data, size);
	int e = errno;
	if (close(tfd) < 0 && wr == 0) {
		wr = -1;
		e = errno;
	}
	if (wr < 0) {
		gk_err_sys(err, e, "write '%s/%s'", dirname, name);
		unlinkat(fd, tmp, 0);
	} else if (renameat(fd, tmp, fd, comp) < 0) {
		gk_err_sys(err, errno, "extract '%s'", name);
		unlinkat(fd, tmp, 0);
	} else {
		rc = 0;
	}
	gk_cleanup_forget(slot);
out:
	if (fd >= 0)
		close(fd);
	free(copy);
	return rc;
}
