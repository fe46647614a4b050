/*
 * get.c - one sample or member of a shard by key, through the index.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard/shard.h"

int gk_shard_get(const char *shard, const char *what, int64_t mtime,
		 gk_err *err)
{
	gk_shard_index idx;
	char *ip = gk_shard_index_path(shard);
	int fd = -1, rc = -1;
	void *buf = NULL;
	gk_shard_member *m = NULL;

	if (!ip || gk_shard_index_load(ip, &idx, err) < 0) {
		free(ip);
		return gk_err_prefix(err, "get '%s' (make the index with data-pack --index)",
				     what);
	}
	/* KEY.EXT or KEY: keys have no dots in their last component. */
	ssize_t klen = gk_shard_key_len(what);
	char *key = klen < 0 ? strdup(what) : strndup(what, (size_t)klen);
	const char *ext = klen < 0 ? NULL : what + klen + 1;
	ssize_t i = key ? gk_shard_index_find(&idx, key) : -1;
	if (i < 0) {
		gk_errf(err, "get '%s': no such key in '%s'", what, shard);
		goto out;
	}
	if ((fd = open(shard, O_RDONLY | O_CLOEXEC)) < 0) {
		gk_err_sys(err, errno, "open '%s'", shard);
		goto out;
	}
	if (!(m = calloc(idx.s[i].n, sizeof(*m)))) {
		gk_err_sys(err, ENOMEM, "get '%s'", what);
		goto out;
	}
	if (gk_shard_read_sample(fd, shard, &idx, (size_t)i, &buf, m, err) < 0)
		goto out;
	if (ext) {
		size_t j = 0;
		while (j < idx.s[i].n && strcmp(m[j].ext, ext) != 0)
			j++;
		if (j == idx.s[i].n) {
			gk_errf(err, "get '%s': sample '%s' has no member '.%s'", what,
				key, ext);
			goto out;
		}
		if (gk_write_full(STDOUT_FILENO, m[j].data, m[j].size) < 0) {
			gk_err_sys(err, errno, "write standard output");
			goto out;
		}
	} else {
		gk_shard_write_opts o = {.pattern = "-", .mtime = mtime};
		gk_shard_writer *w;
		if (gk_shard_writer_open(&w, &o, err) < 0)
			goto out;
		if (gk_shard_writer_add(w, key, idx.s[i].n, m, err) < 0) {
			gk_shard_writer_abort(w);
			goto out;
		}
		if (gk_shard_writer_close(w, NULL, err) < 0)
			goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	free(m);
	free(key);
	free(ip);
	gk_shard_index_free(&idx);
	return rc;
}
