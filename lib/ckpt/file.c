/*
 * file.c - opening the files a checkpoint is read from.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/internal.h"

int ck_read_regular_at(int dfd, const char *name, const char *path, size_t max,
		       char **out, size_t *len, gk_err *err)
{
	struct stat st;
	/* O_NONBLOCK inside: a FIFO put in a checkpoint must not make us wait */
	int fd = gk_open_regular_at(dfd, name, path, &st, err);
	if (fd < 0)
		return -1;
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return gk_errf(err, "read '%s': larger than %zu bytes", path, max);
	}
	size_t n = (size_t)st.st_size;
	char *buf = malloc(n + 1);
	if (!buf) {
		close(fd);
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	}
	ssize_t got = gk_read_full(fd, buf, n);
	int e = errno;
	close(fd);
	if (got < 0) {
		free(buf);
		return gk_err_sys(err, e, "read '%s'", path);
	}
	/* A file that shrank meanwhile reads short; what is there is parsed. */
	buf[got] = '\0';
	*out = buf;
	if (len)
		*len = (size_t)got;
	return 0;
}

int ck_read_regular(const char *path, size_t max, char **out, size_t *len,
		    gk_err *err)
{
	return ck_read_regular_at(AT_FDCWD, path, path, max, out, len, err);
}

int ck_mkdtemp(char *tmpl, int *slot, gk_err *err)
{
	gk_cleanup_hold();
	char *made = mkdtemp(tmpl);
	int e = errno;
	if (made && slot)
		*slot = gk_cleanup_on_signal(tmpl);
	gk_cleanup_release();
	if (!made)
		return gk_err_sys(err, e, "create directory '%s'", tmpl);
	mode_t mask = umask(0);
	umask(mask);
	if (chmod(tmpl, 0777 & ~mask) < 0) {
		e = errno;
		rmdir(tmpl);
		if (slot) {
			gk_cleanup_forget(*slot);
			*slot = -1;
		}
		return gk_err_sys(err, e, "chmod '%s'", tmpl);
	}
	return 0;
}
