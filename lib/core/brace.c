/*
 * brace.c - brace expansion for shard lists, as bash and Python's
 * braceexpand (which webdataset uses) do it.
 *
 * reference: bash(1) "Brace Expansion"; braceexpand's README for the
 * zero-padding rule (the width of the widest endpoint when either endpoint
 * has a leading zero).
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Find the '}' matching the '{' at s[open]; -1 when there is none. */
static long match_brace(const char *s, size_t open)
{
	int depth = 0;
	for (size_t i = open; s[i]; i++) {
		if (s[i] == '\\' && s[i + 1]) {
			i++;
			continue;
		}
		if (s[i] == '{')
			depth++;
		else if (s[i] == '}' && --depth == 0)
			return (long)i;
	}
	return -1;
}

/* Split the inside of a brace at top-level commas into parts. */
static int split_commas(const char *in, size_t len, gk_strlist *parts,
			gk_err *err)
{
	int depth = 0;
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && in[i] == '\\' && i + 1 < len) {
			i++;
			continue;
		}
		if (i < len && in[i] == '{')
			depth++;
		else if (i < len && in[i] == '}')
			depth--;
		else if (i == len || (in[i] == ',' && depth == 0)) {
			if (gk_strlist_push_owned(parts, strndup(in + start, i - start),
						  err))
				return -1;
			start = i + 1;
		}
	}
	return 0;
}

static int is_int(const char *s, size_t len)
{
	size_t i = (len > 0 && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
	if (i == len)
		return 0;
	for (; i < len; i++)
		if (!isdigit((unsigned char)s[i]))
			return 0;
	return 1;
}

/*
 * A range "A..B" or "A..B..STEP" (integers, or single letters). Fills parts
 * and returns 1, returns 0 when in is not a range, -1 on error.
 */
static int expand_range(const char *in, size_t len, size_t max,
			gk_strlist *parts, gk_err *err)
{
	char buf[128];
	if (len >= sizeof(buf))
		return 0;
	memcpy(buf, in, len);
	buf[len] = '\0';
	char *dots = strstr(buf, "..");
	if (!dots)
		return 0;
	char *a = buf, *b = dots + 2, *step = NULL;
	*dots = '\0';
	char *dots2 = strstr(b, "..");
	if (dots2) {
		*dots2 = '\0';
		step = dots2 + 2;
	}
	long long inc = 1;
	if (step) {
		if (!is_int(step, strlen(step)))
			return 0;
		inc = llabs(strtoll(step, NULL, 10));
		if (inc == 0)
			inc = 1;
	}
	if (is_int(a, strlen(a)) && is_int(b, strlen(b))) {
		errno = 0;
		long long x = strtoll(a, NULL, 10), y = strtoll(b, NULL, 10);
		if (errno == ERANGE)
			return gk_errf(err, "brace range '{%.*s}': number too large",
				       (int)len, in);
		/* Zero padding: either endpoint written with a leading zero. */
		int width = 0;
		const char *da = a + (*a == '-' || *a == '+');
		const char *db = b + (*b == '-' || *b == '+');
		if ((da[0] == '0' && da[1]) || (db[0] == '0' && db[1])) {
			width = (int)(strlen(a) > strlen(b) ? strlen(a) : strlen(b));
		}
		unsigned long long span = x <= y ? (unsigned long long)(y - x)
						: (unsigned long long)(x - y);
		if (span / (unsigned long long)inc + 1 > max)
			return gk_errf(err, "brace range '{%.*s}': more than %zu names",
				       (int)len, in, max);
		for (unsigned long long k = 0; k <= span / (unsigned long long)inc; k++) {
			long long v = x <= y ? x + (long long)(k * inc) : x - (long long)(k * inc);
			char num[32];
			if (v < 0)
				snprintf(num, sizeof(num), "-%0*lld", width ? width - 1 : 0, -v);
			else
				snprintf(num, sizeof(num), "%0*lld", width, v);
			if (gk_strlist_push(parts, num, err))
				return -1;
		}
		return 1;
	}
	if (strlen(a) == 1 && strlen(b) == 1 && isalpha((unsigned char)*a) &&
	    isalpha((unsigned char)*b)) {
		int x = *a, y = *b;
		for (int c = x; x <= y ? c <= y : c >= y;
		     c += x <= y ? (int)inc : -(int)inc) {
			char s[2] = {(char)c, '\0'};
			if (gk_strlist_push(parts, s, err))
				return -1;
		}
		return 1;
	}
	return 0;
}

/* Drop the backslash of "\{" "\}" "\," "\\" in a finished name. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (*r == '\\' && (r[1] == '{' || r[1] == '}' || r[1] == ',' ||
				   r[1] == '\\'))
			r++;
		*w++ = *r;
	}
	*w = '\0';
}

/*
 * Find the first brace that expands (has a top-level comma or is a range),
 * expand its alternatives, and recurse on prefix + alternative + suffix.
 */
static int expand(const char *pat, size_t max, gk_strlist *out, int depth,
		  gk_err *err)
{
	if (depth > 64)
		return gk_errf(err, "brace pattern '%s': nested too deeply", pat);
	for (size_t i = 0; pat[i]; i++) {
		if (pat[i] == '\\' && pat[i + 1]) {
			i++;
			continue;
		}
		if (pat[i] == '}')
			return gk_errf(err, "brace pattern '%s': unmatched '}'", pat);
		if (pat[i] != '{')
			continue;
		long close = match_brace(pat, i);
		if (close < 0)
			return gk_errf(err, "brace pattern '%s': unmatched '{'", pat);
		const char *in = pat + i + 1;
		size_t inlen = (size_t)close - i - 1;
		gk_strlist parts = {0};
		int r = expand_range(in, inlen, max, &parts, err);
		if (r < 0)
			goto fail;
		if (r == 0) {
			if (split_commas(in, inlen, &parts, err))
				goto fail;
			if (parts.n < 2) {
				/* "{x}" or "{}": literal, look further right. */
				gk_strlist_free(&parts);
				i = (size_t)close;
				continue;
			}
		}
		const char *suffix = pat + close + 1;
		for (size_t k = 0; k < parts.n; k++) {
			size_t len = i + strlen(parts.v[k]) + strlen(suffix) + 1;
			char *next = malloc(len);
			if (!next) {
				gk_err_sys(err, ENOMEM, "brace pattern");
				goto fail;
			}
			snprintf(next, len, "%.*s%s%s", (int)i, pat, parts.v[k], suffix);
			r = expand(next, max, out, depth + 1, err);
			free(next);
			if (r < 0)
				goto fail;
		}
		gk_strlist_free(&parts);
		return 0;
fail:
		gk_strlist_free(&parts);
		return -1;
	}
	if (out->n >= max)
		return gk_errf(err, "brace pattern: more than %zu names", max);
	char *s = strdup(pat);
	if (!s)
		return gk_err_sys(err, ENOMEM, "brace pattern");
	unescape(s);
	return gk_strlist_push_owned(out, s, err);
}

int gk_brace_expand(const char *pattern, size_t max, gk_strlist *out,
		    gk_err *err)
{
	size_t before = out->n;
	if (max == 0)
		max = 10000000;
	if (expand(pattern, before + max, out, 0, err) < 0) {
		while (out->n > before)
			free(out->v[--out->n]);
		if (out->v)
			out->v[out->n] = NULL;
		return -1;
	}
	return 0;
}
