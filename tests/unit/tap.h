/*
 * tap.h - a tiny TAP producer for the C unit tests (prove reads it).
 *
 *   ok(cond, "name %d", i);  is_int(got, want, "name"); is_str(...);
 *   skip_all("no CUDA device");  return done_testing();
 *
 * Each check prints "ok N - name" or "not ok N - name" plus what differed.
 */
#ifndef GK_TAP_H
#define GK_TAP_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

static int tap_vok(int cond, const char *fmt, va_list ap)
{
	tap_n++;
	if (!cond)
		tap_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap_n);
	vprintf(fmt, ap);
	putchar('\n');
	fflush(stdout);
	return cond;
}

static inline int __attribute__((format(printf, 2, 3)))
ok(int cond, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = tap_vok(cond, fmt, ap);
	va_end(ap);
	return r;
}

#define TAP_CMP(cond, fmtspec, got, want, name)                             \
	do {                                                                \
		if (!ok((cond), "%s", (name)))                              \
			printf("#   got:  " fmtspec "\n#   want: " fmtspec "\n", \
			       got, want);                                  \
	} while (0)

#define is_int(got, want, name)                                              \
	do {                                                                 \
		long long g_ = (long long)(got), w_ = (long long)(want);     \
		TAP_CMP(g_ == w_, "%lld", g_, w_, name);                     \
	} while (0)
#define is_u64(got, want, name)                                              \
	do {                                                                 \
		unsigned long long g_ = (got), w_ = (want);                  \
		TAP_CMP(g_ == w_, "%llu", g_, w_, name);                     \
	} while (0)
#define is_str(got, want, name)                                              \
	do {                                                                 \
		const char *g_ = (got), *w_ = (want);                        \
		TAP_CMP(g_ && w_ && strcmp(g_, w_) == 0, "'%s'",             \
			g_ ? g_ : "(null)", w_ ? w_ : "(null)", name);       \
	} while (0)

static inline void diag(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("# ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
}

static inline void skip_all(const char *why)
{
	printf("1..0 # SKIP %s\n", why);
	exit(0);
}

static inline int done_testing(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
