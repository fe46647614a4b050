/*
 * mem.c - time a command's whole process, wall clock, many runs:
 *
 *   build/tools/bench/mem RUNS COMMAND [ARG...]
 *
 * prints "median_ms min_ms" over RUNS runs (stdout to /dev/null). Fork and
 * exec directly so no shell start-up is measured.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int64_t runs;
	gk_err err;
	if (argc < 3 || gk_parse_i64(argv[1], 1, 100000, &runs, "RUNS", &err)) {
		fprintf(stderr, "usage: mem RUNS COMMAND [ARG...]\n");
		return 2;
	}
	double *t = malloc(runs * sizeof(*t));
	for (int64_t i = 0; i < runs; i++) {
		double t0 = gk_now();
		pid_t pid = fork();
		if (pid == 0) {
			int fd = open("/dev/null", O_WRONLY);
			dup2(fd, 1);
			execvp(argv[2], argv + 2);
			_exit(127);
		}
		int st;
		waitpid(pid, &st, 0);
		t[i] = (gk_now() - t0) * 1e3;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "mem: '%s' failed\n", argv[2]);
			return 1;
		}
	}
	qsort(t, runs, sizeof(*t), cmp);
	printf("%.3f %.3f\n", t[runs / 2], t[0]);
	free(t);
	return 0;
}
