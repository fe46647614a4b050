/*
 * json.c - loading, dumping and typed access over jansson.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

json_t *gk_json_load_buf(const char *buf, size_t len, const char *name,
			 gk_err *err)
{
	json_error_t je;
	/* Duplicate keys are an error: the last one silently winning hides bugs. */
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		gk_errf(err, "parse '%s': line %d column %d: %s", name, je.line,
			je.column, je.text);
	return j;
}

json_t *gk_json_load_file(const char *path, size_t max, gk_err *err)
{
	char *buf;
	size_t len;
	if (gk_read_file(path, max ? max : (size_t)1 << 30, &buf, &len, err))
		return NULL;
	json_t *j = gk_json_load_buf(buf, len, path, err);
	free(buf);
	return j;
}

static size_t dump_flags(int pretty)
{
	return (pretty ? JSON_INDENT(2) : JSON_COMPACT) | JSON_PRESERVE_ORDER |
	       JSON_ENCODE_ANY;
}

int gk_json_dump(FILE *fp, const json_t *j, int pretty, gk_err *err)
{
	if (json_dumpf(j, fp, dump_flags(pretty)) < 0 || fputc('\n', fp) == EOF)
		return gk_err_sys(err, errno ? errno : EIO, "write JSON");
	return 0;
}

int gk_json_write_file(const char *path, const json_t *j, gk_err *err)
{
	char *s = json_dumps(j, dump_flags(1));
	if (!s)
		return gk_err_sys(err, ENOMEM, "write '%s'", path);
	size_t n = strlen(s);
	/* json_dumps leaves no final newline; text files want one. */
	char *t = realloc(s, n + 2);
	if (!t) {
		free(s);
		return gk_err_sys(err, ENOMEM, "write '%s'", path);
	}
	t[n] = '\n';
	int rc = gk_atomic_write_file(path, t, n + 1, 0666, err);
	free(t);
	return rc;
}

static const json_t *member(const json_t *obj, const char *key, gk_err *err)
{
	if (!json_is_object(obj)) {
		gk_errf(err, "JSON key '%s': parent is not an object", key);
		return NULL;
	}
	const json_t *v = json_object_get(obj, key);
	if (!v)
		gk_errf(err, "JSON key '%s': missing", key);
	return v;
}

int gk_json_get_int(const json_t *obj, const char *key, int64_t *out,
		    gk_err *err)
{
	const json_t *v = member(obj, key, err);
	if (!v)
		return -1;
	if (!json_is_integer(v))
		return gk_errf(err, "JSON key '%s': not an integer", key);
	*out = json_integer_value(v);
	return 0;
}

int gk_json_get_str(const json_t *obj, const char *key, const char **out,
		    gk_err *err)
{
	const json_t *v = member(obj, key, err);
	if (!v)
		return -1;
	if (!json_is_string(v))
		return gk_errf(err, "JSON key '%s': not a string", key);
	*out = json_string_value(v);
	return 0;
}

int gk_json_get_num(const json_t *obj, const char *key, double *out,
		    gk_err *err)
{
	const json_t *v = member(obj, key, err);
	if (!v)
		return -1;
	if (!json_is_number(v))
		return gk_errf(err, "JSON key '%s': not a number", key);
	*out = json_number_value(v);
	return 0;
}
