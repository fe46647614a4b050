/*
 * shard_index.c - fuzz the index parser: any text loads or fails
 * cleanly, and a loaded index is consistent (members inside samples,
 * offsets inside the tar when it is used for random access), and checking
 * it against a shard that is not its own (the index text itself) fails
 * cleanly too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shard/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	gk_shard_index idx;
	gk_err err;
	int fd = memfd_create("idx", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (gk_write_full(fd, data, size) == 0 && gk_shard_index_load(path, &idx, &err) == 0) {
		for (size_t i = 0; i < idx.nsamples; i++)
			if (idx.s[i].first + idx.s[i].n > idx.nmembers || idx.s[i].n == 0)
				abort();
		/* Random access on an empty file: must fail, never read out of bounds. */
		gk_shard_member m[64];
		void *buf = NULL;
		if (idx.nsamples && idx.s[0].n <= 64 &&
		    gk_shard_read_sample(fd, "fuzz", &idx, 0, &buf, m, &err) == 0)
			free(buf);
		/*
		 * The binding (the size matches: only the kind of file, plain,
		 * LZ4 or compressed otherwise, may still refuse it), then the
		 * tar headers of the last sample.
		 */
		if (idx.bound && idx.shard_bytes == size &&
		    gk_shard_index_check(&idx, fd, "fuzz", path, -1, &err) < 0 &&
		    strstr(err.msg, "bytes, the shard has"))
			abort();
		if (idx.nsamples)
			(void)gk_shard_index_check(&idx, fd, "fuzz", path,
						   (ssize_t)idx.nsamples - 1, &err);
		gk_shard_index_free(&idx);
	}
	close(fd);
	return 0;
}
