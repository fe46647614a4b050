/*
 * fixture.h - trees of /proc and /sys files for the tests of readers that
 * take a root (gk_cpus_*, gk_host_mem_read): each case writes its files
 * under a fresh root, below a directory made from FIXTURE_TOP (a mkdtemp
 * template the test defines before including this) and removed at its end.
 */
#ifndef GK_TEST_FIXTURE_H
#define GK_TEST_FIXTURE_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static char top[] = FIXTURE_TOP;
static int tree; /* a fresh directory under top for each case */
static char root[256];

/* root/path = text, with its directories */
static void put(const char *path, const char *text)
{
	char p[512];
	snprintf(p, sizeof(p), "%s%s", root, path);
	for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
	FILE *f = fopen(p, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void fresh(void)
{
	snprintf(root, sizeof(root), "%s/%d", top, ++tree);
	mkdir(root, 0755);
}

/* the mount lines of a cgroup v2 system */
#define V2_MOUNT "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"

#endif
