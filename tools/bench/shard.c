/*
 * shard.c - iterate a dataset with the C reader, touching every byte:
 *
 *   build/tools/bench/shard SOURCE [PREFETCH] [SHUFFLE_BUFFER]
 *
 * prints "samples bytes seconds" for tools/bench/shard.sh.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "shard/shard.h"

int main(int argc, char **argv)
{
	gk_err err;
	gk_shard_dataset *d;
	const gk_shard_sample *s;
	gk_shard_dataset_opts o = {0};
	if (argc < 2) {
		fprintf(stderr, "usage: shard SOURCE [PREFETCH] [SHUFFLE_BUFFER]\n");
		return 2;
	}
	o.prefetch = argc > 2 ? (size_t)atol(argv[2]) : 0;
	if (argc > 3) {
		o.shuffle = 1;
		o.shuffle_buffer = (size_t)atol(argv[3]);
	}
	double t0 = gk_now();
	if (gk_shard_dataset_open(&d, argv[1], &o, &err) < 0) {
		fprintf(stderr, "shard: %s\n", err.msg);
		return 1;
	}
	uint64_t n = 0, bytes = 0, sum = 0;
	int rc;
	while ((rc = gk_shard_dataset_next(d, &s, &err)) == 1) {
		for (size_t i = 0; i < s->n; i++) {
			const unsigned char *p = s->m[i].data;
			/* One load per cache line: the data is really there. */
			for (uint64_t j = 0; j < s->m[i].size; j += 64)
				sum += p[j];
			bytes += s->m[i].size;
		}
		n++;
	}
	double t = gk_now() - t0;
	gk_shard_dataset_close(d);
	if (rc < 0) {
		fprintf(stderr, "shard: %s\n", err.msg);
		return 1;
	}
	printf("%llu %llu %.6f %llu\n", (unsigned long long)n, (unsigned long long)bytes, t,
	       (unsigned long long)(sum & 1));
	return 0;
}
