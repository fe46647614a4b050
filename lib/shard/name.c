/*
 * name.c - member names: the key/extension split webdataset uses, the
 * checks the writer applies, and shard names from printf patterns.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shard/shard.h"

ssize_t gk_shard_key_len(const char *name)
{
	/*
	 * As webdataset's base_plus_ext regular expression: the last
	 * component must start with a non-dot and contain a dot.
	 */
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	const char *dot = strchr(base, '.');
	if (!dot || dot == base)
		return -1;
	return dot - name;
}

/* Length of the UTF-8 sequence at s, or 0 when it is not valid UTF-8. */
static size_t utf8_len(const unsigned char *s)
{
	unsigned c = s[0];
	size_t n;
	unsigned min;
	if (c < 0x80)
		return 1;
	if ((c & 0xe0) == 0xc0)
		n = 2, min = 0x80, c &= 0x1f;
	else if ((c & 0xf0) == 0xe0)
		n = 3, min = 0x800, c &= 0x0f;
	else if ((c & 0xf8) == 0xf0)
		n = 4, min = 0x10000, c &= 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return n;
}

/* "name 'N': why", N quoted as -t prints it: a message stays one line. */
static int bad_name(gk_err *err, const char *name, const char *why)
{
	char *q = gk_shard_name_quote(name);
	gk_errf(err, "name '%s': %s", q ? q : name, why);
	free(q);
	return -1;
}

int gk_shard_check_name(const char *name, gk_err *err)
{
	const unsigned char *s = (const unsigned char *)name;
	if (!*s)
		return gk_errf(err, "name '': empty");
	if (*s == '/')
		return bad_name(err, name, "absolute path");
	for (size_t i = 0; s[i];) {
		size_t n = utf8_len(s + i);
		if (!n)
			return bad_name(err, name, "not valid UTF-8");
		if (n == 1 && (s[i] < 0x20 || s[i] == 0x7f || isspace(s[i])))
			return bad_name(err, name, "contains whitespace or a control character");
		i += n;
	}
	for (const char *c = name; c;) {
		const char *end = strchr(c, '/');
		size_t len = end ? (size_t)(end - c) : strlen(c);
		if (len == 0)
			return bad_name(err, name, "empty path component");
		if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
			return bad_name(err, name, "'.' or '..' component");
		c = end ? end + 1 : NULL;
	}
	ssize_t k = gk_shard_key_len(name);
	if (k < 0)
		return bad_name(err, name, "no KEY.EXT form (webdataset would skip it)");
	if (!name[k + 1])
		return bad_name(err, name, "empty extension");
	return 0;
}

int gk_shard_format_name(const char *pattern, unsigned n, char *buf,
			 size_t len, gk_err *err)
{
	int convs = 0;
	for (const char *p = pattern; *p; p++) {
		if (*p != '%')
			continue;
		if (p[1] == '%') {
			p++;
			continue;
		}
		/* a width, zero-padded or not: the flags ' ', '+', '-' and '#'
		 * would put spaces, signs or "0x" into file names */
		const char *q = p + 1;
		while (isdigit((unsigned char)*q))
			q++;
		if (!*q || !strchr("diuxX", *q))
			return gk_errf(err, "pattern '%s': '%.*s' is not a %%d, %%u or %%x conversion "
				       "(with an optional width such as %%06d; %%%% for a '%%')",
				       pattern, (int)(q - p + (*q != 0)), p);
		convs++;
		p = q;
	}
	if (convs > 1)
		return gk_errf(err, "pattern '%s': more than one conversion", pattern);
	int r;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	r = snprintf(buf, len, pattern, n); /* %% is a '%' with or without a conversion */
#pragma GCC diagnostic pop
	if (r < 0 || (size_t)r >= len)
		return gk_errf(err, "pattern '%s': name too long", pattern);
	return convs;
}

int gk_shard_pattern_tail(const char *pattern, unsigned n, gk_strlist *out,
			  gk_err *err)
{
	char name[4096];
	struct stat st;
	/* past a gap too (a shard of the old run removed by hand): the scan
	 * ends after 64 numbers in a row with no file */
	for (unsigned missing = 0; n < UINT_MAX && missing < 64; n++) {
		int convs = gk_shard_format_name(pattern, n, name, sizeof(name), err);
		if (convs < 0)
			return -1;
		if (convs == 0 || strcmp(name, "-") == 0)
			return 0;
		if (lstat(name, &st) < 0) {
			missing++;
			continue;
		}
		missing = 0;
		if (gk_strlist_push(out, name, err) < 0)
			return -1;
	}
	return 0;
}

int gk_shard_is_lz4_name(const char *path)
{
	return gk_str_ends(path, ".lz4");
}

char *gk_shard_index_path(const char *shard)
{
	const char *base = strrchr(shard, '/');
	base = base ? base + 1 : shard;
	/* DALI's wds2idx: the first dot after the first character of the name. */
	const char *dot = *base ? strchr(base + 1, '.') : NULL;
	size_t keep = dot ? (size_t)(dot - shard) : strlen(shard);
	char *p = malloc(keep + 5);
	if (!p)
		return NULL;
	memcpy(p, shard, keep);
	memcpy(p + keep, ".idx", 5);
	return p;
}

char *gk_shard_name_quote(const char *name)
{
	const unsigned char *s = (const unsigned char *)name;
	size_t len = strlen(name);
	char *out = malloc(len * 4 + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; s[i];) {
		size_t n = utf8_len(s + i);
		unsigned c = s[i];
		if (n > 1) {
			memcpy(o, s + i, n);
			o += n;
			i += n;
			continue;
		}
		if (c == '\\')
			o += sprintf(o, "\\\\");
		else if (c == '\t')
			o += sprintf(o, "\\t");
		else if (c == '\n')
			o += sprintf(o, "\\n");
		else if (n == 0 || c < 0x20 || c == 0x7f)
			o += sprintf(o, "\\x%02x", c);
		else
			*o++ = (char)c;
		i++;
	}
	*o = '\0';
	return out;
}

int gk_shard_utf8_valid(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t n = utf8_len(p);
		if (!n)
			return 0;
		p += n;
	}
	return 1;
}

int gk_shard_naming_check(const gk_shard_naming *nm, gk_err *err)
{
	if (nm->whole && !nm->ext)
		return gk_errf(err, "naming: a whole-name key needs an extension");
	if (!nm->ext)
		return 0;
	/*
	 * The extension is everything after the key's dot: "txt" or
	 * "seg.png"; what the writer refuses in a name (whitespace, control
	 * characters, empty components) it refuses here, said of the
	 * extension once instead of every name.
	 */
	const char *e = nm->ext;
	if (!*e)
		return gk_errf(err, "extension '': empty");
	if (strchr(e, '/'))
		return gk_errf(err, "extension '%s': contains a '/' (it would be a directory of the key)", e);
	if (e[0] == '.' || e[strlen(e) - 1] == '.' || strstr(e, ".."))
		return gk_errf(err, "extension '%s': starts or ends with a dot, or has two in a row (give it without the leading dot: 'txt')", e);
	char probe[512];
	if (snprintf(probe, sizeof(probe), "k.%s", e) >= (int)sizeof(probe))
		return gk_errf(err, "extension '%.32s...': too long", e);
	gk_err why;
	if (gk_shard_check_name(probe, &why) < 0) {
		const char *w = strstr(why.msg, "': ");
		return gk_errf(err, "extension '%s': %s", e, w ? w + 3 : why.msg);
	}
	return 0;
}

int gk_shard_member_name(const char *name, const gk_shard_naming *nm, char **out,
			 gk_err *err)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	*out = NULL;
	if (nm && nm->whole) {
		/* The key ends at the first dot of the last component, so
		 * its dots cannot stay: they become '_'. */
		if (!*base)
			return bad_name(err, name, "no file name after the last '/'");
		if (asprintf(out, "%s.%s", name, nm->ext) < 0) {
			*out = NULL;
			return gk_err_sys(err, ENOMEM, "name");
		}
		for (char *c = *out + (base - name), *end = *out + strlen(name); c < end; c++)
			if (*c == '.')
				*c = '_';
		return 0;
	}
	if (gk_shard_key_len(name) < 0) {
		if (*base == '.') {
			bad_name(err, name, "a hidden file: no KEY.EXT form, as its name starts with a dot (webdataset would skip it)");
			return GK_SHARD_NO_KEY;
		}
		if (!nm || !nm->ext || !*base) {
			bad_name(err, name, "no KEY.EXT form (webdataset would skip it)");
			return GK_SHARD_NO_KEY;
		}
		if (asprintf(out, "%s.%s", name, nm->ext) < 0) {
			*out = NULL;
			return gk_err_sys(err, ENOMEM, "name");
		}
		return 0;
	}
	if (!(*out = strdup(name)))
		return gk_err_sys(err, ENOMEM, "name");
	return 0;
}
