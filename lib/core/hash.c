/*
 * hash.c - XXH3-64 over buffers, streams and file ranges.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/core.h"

struct gk_hash {
	XXH3_state_t *st;
};

uint64_t gk_xxh3(const void *buf, size_t n)
{
	return XXH3_64bits(buf, n);
}

gk_hash *gk_hash_new(void)
{
	gk_hash *h = malloc(sizeof(*h));
	if (!h)
		return NULL;
	h->st = XXH3_createState();
	if (!h->st) {
		free(h);
		return NULL;
	}
	XXH3_64bits_reset(h->st);
	return h;
}

void gk_hash_update(gk_hash *h, const void *buf, size_t n)
{
	XXH3_64bits_update(h->st, buf, n);
}

uint64_t gk_hash_digest(const gk_hash *h)
{
	return XXH3_64bits_digest(h->st);
}

void gk_hash_free(gk_hash *h)
{
	if (h) {
		XXH3_freeState(h->st);
		free(h);
	}
}

int gk_xxh3_fd(int fd, uint64_t off, uint64_t len, uint64_t *out,
	       const char *name, gk_err *err)
{
	enum { CHUNK = 1 << 20 };
	char *buf = malloc(CHUNK);
	gk_hash *h = gk_hash_new();
	int rc = 0;

	if (!buf || !h) {
		rc = gk_err_sys(err, ENOMEM, "hash '%s'", name);
		goto out;
	}
	while (len > 0) {
		size_t want = len < CHUNK ? (size_t)len : CHUNK;
		ssize_t r = gk_pread_full(fd, buf, want, (off_t)off);
		if (r < 0) {
			rc = gk_err_sys(err, errno, "read '%s'", name);
			goto out;
		}
		if (r == 0) {
			if (len != UINT64_MAX)
				rc = gk_errf(err, "read '%s': truncated at byte %" PRIu64,
					     name, off);
			break;
		}
		gk_hash_update(h, buf, (size_t)r);
		off += (uint64_t)r;
		if (len != UINT64_MAX)
			len -= (uint64_t)r;
	}
	if (rc == 0)
		*out = gk_hash_digest(h);
out:
	free(buf);
	gk_hash_free(h);
	return rc;
}

char *gk_xxh3_hex(uint64_t h, char buf[17])
{
	snprintf(buf, 17, "%016" PRIx64, h);
	return buf;
}

int gk_xxh3_parse(const char *hex, uint64_t *out, gk_err *err)
{
	uint64_t v = 0;
	size_t i;
	for (i = 0; hex[i]; i++) {
		char c = hex[i];
		int d = c >= '0' && c <= '9' ? c - '0'
		      : c >= 'a' && c <= 'f' ? c - 'a' + 10
		      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0 || i >= 16)
			break;
		v = v << 4 | (uint64_t)d;
	}
	if (i != 16 || hex[i])
		return gk_errf(err, "xxh3 '%s': not 16 hex digits", hex);
	*out = v;
	return 0;
}
