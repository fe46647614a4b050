/*
 * dataset_state.c - a dataset state (gk_shard_state) as one line of JSON
 * and back, as a trainer saves it per rank and worker.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/dataset_internal.h"

size_t sh_json_str(char *buf, size_t len, const char *s)
{
	size_t n = 0;
	char e[8];
#define OUT(c)                         \
	do {                           \
		if (n + 1 < len)       \
			buf[n] = (c);  \
		n++;                   \
	} while (0)
	OUT('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			OUT('\\');
			OUT((char)*p);
		} else if (*p < 0x20) {
			snprintf(e, sizeof(e), "\\u%04x", *p);
			for (size_t i = 0; e[i]; i++)
				OUT(e[i]);
		} else {
			OUT((char)*p);
		}
	}
	OUT('"');
#undef OUT
	if (len)
		buf[n < len ? n : len - 1] = '\0';
	return n;
}

int gk_shard_state_format(const gk_shard_state *st, char *buf, size_t len)
{
	size_t n = 0;
	int r = snprintf(buf, len,
			 "{\"seed\":%llu,\"epoch\":%llu,\"pos\":%llu,\"samples\":%llu,\"part\":%u,\"parts\":%u,\"window\":%llu",
			 (unsigned long long)st->seed, (unsigned long long)st->epoch,
			 (unsigned long long)st->pos, (unsigned long long)st->samples,
			 st->part, st->parts, (unsigned long long)st->window);
	/* Like snprintf: the length it needs, whatever fits. */
#define PUT(...)                                                                   \
	do {                                                                       \
		if (r < 0)                                                         \
			return -1;                                                 \
		n += (size_t)r;                                                    \
		r = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, __VA_ARGS__); \
	} while (0)
	if (st->shards) {
		char x[17];
		PUT(",\"list\":\"%s\",\"shards\":%llu", gk_xxh3_hex(st->list, x),
		    (unsigned long long)st->shards);
		if (st->has_files)
			PUT(",\"files\":\"%s\"", gk_xxh3_hex(st->files, x));
	}
	if (st->shards && st->nnames == st->shards) {
		PUT(",\"names\":[");
		for (size_t i = 0; i < st->nnames; i++) {
			PUT("%s[", i ? "," : "");
			n += (size_t)r;
			r = (int)sh_json_str(n < len ? buf + n : NULL, n < len ? len - n : 0,
					     st->names[i].name);
			PUT(",%llu]", (unsigned long long)st->names[i].samples);
		}
		PUT("]");
	}
	if (st->nhist) {
		PUT(",\"hist\":[");
		for (size_t i = 0; i < st->nhist; i++)
			PUT("%s%llu", i ? "," : "", (unsigned long long)st->hist[i]);
		PUT("]");
	}
	PUT("}");
	if (r < 0)
		return -1;
	n += (size_t)r;
#undef PUT
	return n > INT_MAX ? -1 : (int)n;
}

/*
 * "list", "shards" and "names" (gk_shard_state.list); a state saved
 * before them has none: shards stays 0. The names go in one block, the
 * array followed by the strings.
 */
static int parse_list(const json_t *j, gk_shard_state *st, gk_err *err)
{
	const json_t *l = json_object_get(j, "list"), *k = json_object_get(j, "shards"),
		     *v = json_object_get(j, "names"), *f = json_object_get(j, "files");
	if (!l && !k && !v && !f)
		return 0;
	if (f) {
		if (!json_is_string(f) || strlen(json_string_value(f)) != 16 ||
		    gk_xxh3_parse(json_string_value(f), &st->files, err) < 0)
			return gk_errf(err, "dataset state: 'files' is not 16 hex digits");
		st->has_files = 1;
	}
	if (!json_is_string(l) || strlen(json_string_value(l)) != 16 ||
	    gk_xxh3_parse(json_string_value(l), &st->list, err) < 0)
		return gk_errf(err, "dataset state: 'list' is not 16 hex digits");
	if (!json_is_integer(k) || json_integer_value(k) < 1)
		return gk_errf(err, "dataset state: 'shards' is not a count of shards");
	st->shards = (uint64_t)json_integer_value(k);
	if (!v)
		return 0;
	size_t n = json_array_size(v), bytes = 0, i;
	const json_t *e;
	if (!json_is_array(v) || n != st->shards)
		goto bad;
	json_array_foreach(v, i, e) {
		const json_t *name = json_array_get(e, 0), *c = json_array_get(e, 1);
		if (json_array_size(e) != 2 || !json_is_string(name) || !json_is_integer(c) ||
		    json_integer_value(c) < 0 || strlen(json_string_value(name)) !=
						     json_string_length(name))
			goto bad;
		bytes += json_string_length(name) + 1;
	}
	gk_shard_state_shard *names = malloc(n * sizeof(*names) + bytes);
	if (!names)
		return gk_err_sys(err, ENOMEM, "dataset state");
	char *p = (char *)(names + n);
	json_array_foreach(v, i, e) {
		const json_t *name = json_array_get(e, 0);
		size_t len = json_string_length(name) + 1;
		memcpy(p, json_string_value(name), len);
		names[i] = (gk_shard_state_shard){p, (uint64_t)json_integer_value(json_array_get(e, 1))};
		p += len;
	}
	st->names = names;
	st->nnames = n;
	return 0;
bad:
	return gk_errf(err, "dataset state: 'names' does not give a name and a count for each of its 'shards' (%llu)",
		       (unsigned long long)st->shards);
}

int gk_shard_state_parse(const char *json, gk_shard_state *st, gk_err *err)
{
	struct json_t *j = gk_json_load_buf(json, strlen(json), "dataset state", err);
	int64_t v[7] = {0};
	static const char *keys[] = {"seed", "epoch", "pos", "samples", "part", "parts", "window"};
	memset(st, 0, sizeof(*st));
	if (!j)
		return -1;
	for (size_t i = 0; i < 7; i++) {
		/* "window" came later: a state without it is read as "as now". */
		if (i == 6 && !json_object_get(j, keys[i]))
			break;
		if (gk_json_get_int(j, keys[i], &v[i], err) < 0) {
			gk_err_prefix(err, "dataset state");
			goto fail;
		}
		if (v[i] < 0 || ((i == 4 || i == 5) && v[i] > UINT32_MAX)) {
			gk_errf(err, "dataset state: '%s' out of range", keys[i]);
			goto fail;
		}
	}
	json_t *h = json_object_get(j, "hist");
	if (h) {
		size_t n = json_array_size(h);
		uint64_t *hist = malloc((n + 1) * sizeof(*hist));
		if (!json_is_array(h) || n == 0 || !hist) {
			free(hist);
			gk_errf(err, "dataset state: 'hist' is not a list of counts");
			goto fail;
		}
		for (size_t i = 0; i < n; i++) {
			json_t *e = json_array_get(h, i);
			if (!json_is_integer(e) || json_integer_value(e) < 0) {
				free(hist);
				gk_errf(err, "dataset state: 'hist' is not a list of counts");
				goto fail;
			}
			hist[i] = (uint64_t)json_integer_value(e);
		}
		st->hist = hist;
		st->nhist = n;
	}
	if (parse_list(j, st, err) < 0)
		goto fail;
	st->seed = (uint64_t)v[0];
	st->epoch = (uint64_t)v[1];
	st->pos = (uint64_t)v[2];
	st->samples = (uint64_t)v[3];
	st->part = (uint32_t)v[4];
	st->parts = (uint32_t)v[5];
	st->window = (uint64_t)v[6];
	json_decref(j);
	return 0;
fail:
	gk_shard_state_free(st);
	json_decref(j);
	return -1;
}

void gk_shard_state_free(gk_shard_state *st)
{
	free((void *)st->hist);
	st->hist = NULL;
	st->nhist = 0;
	/* a parsed state's names: one block, the strings after the array */
	free((void *)st->names);
	st->names = NULL;
	st->nnames = 0;
}
