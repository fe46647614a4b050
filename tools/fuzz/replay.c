/*
 * replay.c - run a fuzz target over files without libFuzzer.
 *
 *   build/tools/fuzz/TARGET FILE|DIR...
 *
 * Each tools/fuzz/TARGET.c defines LLVMFuzzerTestOneInput; linked with this
 * main it replays a corpus (make check does, over tools/fuzz/corpus/TARGET
 * and the corrupt fixtures), so every past crash stays a regression test
 * under plain gcc and SAN=1. `make fuzz` builds the same targets with
 * clang's libFuzzer to search for new inputs.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	char *buf;
	size_t len;
	gk_err err;
	if (gk_read_file(path, (size_t)64 << 20, &buf, &len, &err) < 0) {
		fprintf(stderr, "replay: %s\n", err.msg);
		return 1;
	}
	LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 0, rc = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: '%s': no such file or directory\n", argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			rc |= run_file(argv[i]);
			n++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			char p[4096];
			if (e->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
			rc |= run_file(p);
			n++;
		}
		if (d)
			closedir(d);
	}
	printf("replayed %d inputs\n", n);
	return rc;
}
