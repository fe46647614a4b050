/*
 * term-shim.c - preloaded (LD_PRELOAD) into a tool to raise SIGTERM the
 * moment it has created a temp file or directory whose name holds the
 * text of GK_TERM_AFTER (".w.safetensors.tmp-"): right after mkostemp,
 * mkdtemp or an openat with O_CREAT made it, before the tool can do
 * anything else, so a test hits that moment every time instead of racing
 * for it with a timed kill. lib.sh's test_term_shim builds it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void after(const char *name)
{
	const char *marker = getenv("GK_TERM_AFTER");
	if (marker && *marker && strstr(name, marker))
		raise(SIGTERM);
}

int mkostemp(char *tmpl, int flags)
{
	static int (*real)(char *, int);
	if (!real)
		real = (int (*)(char *, int))dlsym(RTLD_NEXT, "mkostemp");
	int fd = real(tmpl, flags);
	if (fd >= 0)
		after(tmpl);
	return fd;
}

char *mkdtemp(char *tmpl)
{
	static char *(*real)(char *);
	if (!real)
		real = (char *(*)(char *))dlsym(RTLD_NEXT, "mkdtemp");
	char *made = real(tmpl);
	if (made)
		after(tmpl);
	return made;
}

int openat(int dfd, const char *path, int flags, ...)
{
	static int (*real)(int, const char *, int, ...);
	if (!real)
		real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
	mode_t mode = 0;
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	int fd = real(dfd, path, flags, mode);
	if (fd >= 0 && (flags & O_CREAT))
		after(path);
	return fd;
}
