/*
 * shard_read.c - fuzz the shard reader: any bytes, read as a shard in
 * lenient, strict and sizes-only modes, must give samples or a clean
 * error, and every sample must lie inside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shard/shard.h"

static void read_all(int fd, int strict, int sizes_only, size_t size)
{
	gk_shard_reader *r;
	const gk_shard_sample *s;
	gk_err err;
	if (lseek(fd, 0, SEEK_SET) < 0 || gk_shard_reader_open_fd(&r, fd, "fuzz", &err) < 0)
		return;
	gk_shard_reader_strict(r, strict);
	gk_shard_reader_sizes_only(r, sizes_only);
	while (gk_shard_reader_next(r, &s, &err) == 1) {
		for (size_t i = 0; i < s->n; i++) {
			if (sizes_only) {
				if (s->m[i].data)
					abort(); /* sizes only: no data pointer */
				continue;
			}
			/* Touch every byte: the sanitizers see an overrun. */
			volatile unsigned char sum = 0;
			for (uint64_t j = 0; j < s->m[i].size; j++)
				sum ^= ((const unsigned char *)s->m[i].data)[j];
			(void)sum;
			if (strlen(s->m[i].ext) == 0 && !strict)
				abort(); /* the reader never makes an empty extension */
		}
	}
	(void)size;
	gk_shard_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("shard", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (gk_write_full(fd, data, size) == 0) {
		read_all(fd, 0, 0, size);
		read_all(fd, 1, 0, size);
		read_all(fd, 0, 1, size);
	}
	close(fd);
	return 0;
}
