/*
 * hostlist.c - host lists as users and Slurm write them.
 *
 * Slurm's bracket ranges (reference: Slurm's hostlist_create, as printed in
 * SLURM_JOB_NODELIST and by `scontrol show hostnames`) are rewritten into
 * brace patterns, so one expander (brace.c) does the work:
 *   node[01-04,07]  ->  node{{01..04},07}
 *   node[5]         ->  node5
 * Slurm's brackets hold only numbers and ascending ranges of them.
 *
 * The names end up in rankfiles and command lines, one per line, so each
 * must be a host name and nothing more: RFC 1123 sec. 2.1 (RFC 952's
 * syntax, amended to let a label begin with a digit), dot-separated labels
 * of 1 to 63 letters, digits and hyphens, no label beginning or ending with
 * a hyphen, 253 characters in all.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

/* Why s is not an RFC 1123 host name, or NULL when it is one. */
static const char *bad_name(const char *s, char *why, size_t len)
{
	size_t n = strlen(s);
	if (n > 253)
		return "longer than 253 characters";
	for (const char *label = s;;) {
		size_t l = strcspn(label, ".");
		if (l == 0)
			return "an empty label (two dots, or a dot at an end)";
		if (l > 63)
			return "a label longer than 63 characters";
		if (label[0] == '-' || label[l - 1] == '-')
			return "a label beginning or ending with '-'";
		for (size_t i = 0; i < l; i++)
			if (!isalnum((unsigned char)label[i]) && label[i] != '-') {
				snprintf(why, len, "'%c' is not a letter, digit, "
					 "'-' or '.'", label[i]);
				return why;
			}
		if (!label[l])
			return NULL;
		label += l + 1;
	}
}

/* "a-b" or "a" inside brackets: decimal numbers, a <= b (as Slurm parses). */
static int check_range(const char *item, const char *q, const char *end,
		       const char *dash, gk_err *err)
{
	unsigned long long lo, hi;
	for (const char *c = q; c < end; c++)
		if (c != dash && !isdigit((unsigned char)*c))
			return gk_errf(err, "host list '%s': '%.*s' in brackets: "
				       "not a number or a range of numbers", item,
				       (int)(end - q), q);
	if (!dash)
		return 0;
	if (dash - q > 18 || end - dash - 1 > 18)
		return gk_errf(err, "host list '%s': range '%.*s': number too "
			       "large", item, (int)(end - q), q);
	lo = strtoull(q, NULL, 10);
	hi = strtoull(dash + 1, NULL, 10);
	if (lo > hi)
		return gk_errf(err, "host list '%s': range '%.*s' runs backwards",
			       item, (int)(end - q), q);
	return 0;
}

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
			if (check_range(item, q, end, dash, err) < 0)
				goto bad;
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

static int cmp_host(const void *a, const void *b)
{
	return strcasecmp(*(char *const *)a, *(char *const *)b);
}

/* A name given twice (host names ignore case): a rankfile would place
 * two ranks' cores on it twice. NULL, or the name. */
static const char *repeated(char *const *v, size_t n, int *nomem)
{
	const char *dup = NULL;
	char **s = malloc((n ? n : 1) * sizeof(*s));
	*nomem = !s;
	if (!s)
		return NULL;
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_host);
	for (size_t i = 1; i < n && !dup; i++)
		if (strcasecmp(s[i - 1], s[i]) == 0)
			dup = s[i];
	free(s);
	return dup;
}

int gk_hostlist_expand(const char *list, size_t max, gk_strlist *out,
		       gk_err *err)
{
	size_t before = out->n;
	char *buf = strdup(list);
	int rc = 0, depth = 0;

	if (!buf)
		return gk_err_sys(err, ENOMEM, "host list");
	/*
	 * Spaces, control characters and bytes beyond ASCII are never part of
	 * a name; refuse them before the list is echoed in any message.
	 */
	for (const unsigned char *c = (const unsigned char *)list; *c; c++)
		if (*c <= ' ' || *c >= 0x7f) {
			rc = gk_errf(err, "host list: character 0x%02x at offset "
				     "%zu: host names are letters, digits, '-' "
				     "and '.'", *c, (size_t)(c - (const unsigned char *)list));
			free(buf);
			return rc;
		}
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
	for (size_t i = before; rc == 0 && i < out->n; i++) {
		char why[64];
		const char *bad = bad_name(out->v[i], why, sizeof(why));
		if (bad)
			rc = gk_errf(err, "host list '%s': host name '%s': %s",
				     list, out->v[i], bad);
	}
	if (rc == 0) {
		int nomem;
		const char *dup = repeated(out->v + before, out->n - before, &nomem);
		if (nomem)
			rc = gk_err_sys(err, ENOMEM, "host list");
		else if (dup)
			rc = gk_errf(err, "host list '%s': host '%s' is named twice (host names "
				     "ignore case)", list, dup);
	}
	if (rc < 0) {
		while (out->n > before)
			free(out->v[--out->n]);
		if (out->v)
			out->v[out->n] = NULL;
	}
	return rc;
}
