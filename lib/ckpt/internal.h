/*
 * internal.h - helpers shared by the lib/ckpt sources; not public.
 */
#ifndef GK_CKPT_INTERNAL_H
#define GK_CKPT_INTERNAL_H

#include "ckpt/ckpt.h"

/*
 * Open an input read-only, refusing anything but a regular file ("read
 * 'PATH': not a regular file"): a FIFO, a device or a socket would block
 * or never end. The open itself does not block (O_NONBLOCK, cleared after
 * the check). Returns the fd or -1.
 */
int ck_open_regular(const char *path, gk_err *err);
/* ck_open_regular, then read all of it (at most max bytes), NUL-terminated. */
int ck_read_regular(const char *path, size_t max, char **out, size_t *len,
		    gk_err *err);

/*
 * mkdtemp(3) makes the directory 0700; a staging directory renamed into
 * place must end up as mkdir(2) would have made it: 0777 & ~umask.
 */
int ck_mkdtemp(char *tmpl, gk_err *err);

#endif
