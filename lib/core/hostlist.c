/*
 * hostlist.c - host lists as users and Slurm write them.
 *
 * Slurm's bracket ranges (reference: Slurm's hostlist_create, as printed in
 * SLURM_JOB_NODELIST and by `scontrol show hostnames`) are rewritten into
 * brace patterns, so one expander (brace.c) does the work:
 *   node[01-04,07]  ->  node{{01..04},07}
 *   node[5]         ->  node5
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Rewrite one list item's [..] groups into braces. NULL on a syntax error. */
static char *brackets_to_braces(const char *item, gk_err *err)
{
	size_t len = strlen(item);
	/* Each "-" becomes "..", each group gains at most "{}{}": 4x is ample. */
	char *out = malloc(len * 4 + 1), *w = out;
	if (!out) {
		gk_err_sys(err, ENOMEM, "host list");
		return NULL;
	}
	for (const char *p = item; *p;) {
		if (*p == ']') {
			gk_errf(err, "host list '%s': unmatched ']'", item);
			goto bad;
		}
		if (*p != '[') {
			*w++ = *p++;
			continue;
		}
		const char *close = strchr(p, ']');
		if (!close || close == p + 1) {
			gk_errf(err, "host list '%s': %s", item,
				close ? "empty '[]'" : "unmatched '['");
			goto bad;
		}
		int parts = 1;
		for (const char *q = p + 1; q < close; q++)
			parts += *q == ',';
		if (parts > 1)
			*w++ = '{';
		for (const char *q = p + 1; q < close;) {
			const char *end = memchr(q, ',', (size_t)(close - q));
			if (!end)
				end = close;
			const char *dash = memchr(q, '-', (size_t)(end - q));
			if (end == q || (dash && (dash == q || dash + 1 == end))) {
				gk_errf(err, "host list '%s': empty range in brackets", item);
				goto bad;
			}
			if (dash) {
				w += sprintf(w, "{%.*s..%.*s}", (int)(dash - q), q,
					     (int)(end - dash - 1), dash + 1);
			} else {
				memcpy(w, q, (size_t)(end - q));
				w += end - q;
			}
			if (end < close)
				*w++ = ',';
			q = end + (end < close);
		}
		if (parts > 1)
			*w++ = '}';
		p = close + 1;
	}
	*w = '\0';
	return out;
bad:
	free(out);
	return NULL;
}

int gk_hostlist_expand(const char *list, size_t max, gk_strlist *out,
		       gk_err *err)
{
	size_t before = out->n;
	char *buf = strdup(list);
	int rc = 0, depth = 0;

	if (!buf)
		return gk_err_sys(err, ENOMEM, "host list");
	if (max == 0)
		max = 100000;
	char *start = buf;
	for (char *p = buf;; p++) {
		/* Commas inside braces or brackets belong to them. */
		if (*p == '{' || *p == '[')
			depth++;
		else if (*p == '}' || *p == ']')
			depth--;
		if (*p && (*p != ',' || depth > 0))
			continue;
		int last = !*p;
		*p = '\0';
		if (!*start) {
			rc = gk_errf(err, "host list '%s': empty host name", list);
			break;
		}
		char *pattern = brackets_to_braces(start, err);
		if (!pattern) {
			rc = -1;
			break;
		}
		size_t room = max - (out->n - before);
		rc = gk_brace_expand(pattern, room ? room : 1, out, err);
		free(pattern);
		if (rc < 0 || last)
			break;
		start = p + 1;
	}
	free(buf);
	if (rc == 0 && out->n - before > max)
		rc = gk_errf(err, "host list '%s': more than %zu hosts", list, max);
	if (rc < 0) {
		while (out->n > before)
			free(out->v[--out->n]);
		if (out->v)
			out->v[out->n] = NULL;
	}
	return rc;
}
