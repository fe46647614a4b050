/*
 * err.c - error messages and string lists.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/core.h"

static void vset(gk_err *err, const char *fmt, va_list ap)
{
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
}

int gk_errf(gk_err *err, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vset(err, fmt, ap);
		va_end(ap);
		err->sys = 0;
	}
	return -1;
}

int gk_err_sys(gk_err *err, int errnum, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vset(err, fmt, ap);
		va_end(ap);
		size_t len = strlen(err->msg);
		snprintf(err->msg + len, sizeof(err->msg) - len, ": %s",
			 strerror(errnum));
		err->sys = errnum;
	}
	return -1;
}

int gk_err_prefix(gk_err *err, const char *fmt, ...)
{
	if (err) {
		char pre[512], old[sizeof(err->msg)];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(pre, sizeof(pre), fmt, ap);
		va_end(ap);
		memcpy(old, err->msg, sizeof(old));
		snprintf(err->msg, sizeof(err->msg), "%.500s: %.520s", pre, old);
	}
	return -1;
}

void gk_err_clear(gk_err *err)
{
	if (err) {
		err->sys = 0;
		err->msg[0] = '\0';
	}
}

int gk_strlist_push_owned(gk_strlist *l, char *s, gk_err *err)
{
	if (!s)
		return gk_err_sys(err, ENOMEM, "string list");
	if (GK_GROW(l->v, l->cap, l->n + 2, "string list", err) < 0) {
		free(s);
		return -1;
	}
	l->v[l->n++] = s;
	l->v[l->n] = NULL;
	return 0;
}

int gk_strlist_push(gk_strlist *l, const char *s, gk_err *err)
{
	return gk_strlist_push_owned(l, strdup(s), err);
}

void gk_strlist_free(gk_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

int gk_str_ends(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

int gk_grow(void *pp, size_t *cap, size_t need, size_t size, const char *what,
	    gk_err *err)
{
	void *p, *np;
	size_t n, bytes;

	if (need <= *cap)
		return 0;
	n = *cap + *cap / 2;
	if (n < need)
		n = need;
	if (n < 16)
		n = 16;
	if (__builtin_mul_overflow(n, size, &bytes)) {
		n = need;
		if (__builtin_mul_overflow(n, size, &bytes))
			return gk_err_sys(err, ENOMEM, "%s", what);
	}
	/* pp is the address of a T*: read and write it as bytes (no aliasing). */
	memcpy(&p, pp, sizeof(p));
	np = realloc(p, bytes);
	if (!np)
		return gk_err_sys(err, ENOMEM, "%s", what);
	memcpy(pp, &np, sizeof(np));
	*cap = n;
	return 0;
}

void *gk_alloc_big(size_t n)
{
	size_t huge = (size_t)2 << 20, align = n >= huge ? huge : 64;
	void *p = NULL;
	if (posix_memalign(&p, align, n ? n : 1) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	/* advice only (a kernel without THP says EINVAL: small pages, as
	 * without the call), over the whole huge pages inside the buffer:
	 * a huge page over its tail would add up to 2 MiB of memory no one
	 * asked for */
	if (align == huge)
		(void)madvise(p, n / huge * huge, MADV_HUGEPAGE);
#endif
	memset(p, 0, n);
	return p;
}
