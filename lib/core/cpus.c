/*
 * cpus.c - how many CPUs this process may compute on: its affinity set,
 * capped by its cgroup's CPU quota. A container's CPU limit (Kubernetes'
 * resources.limits.cpu, docker --cpus) is a quota, not a CPU set: the
 * process still sees every CPU of the host, and as many threads as that
 * would be throttled for most of each period.
 *
 * reference: the kernel's Documentation/admin-guide/cgroup-v2.rst (cpu.max)
 * and scheduler/sched-bwc.rst (v1 cpu.cfs_quota_us, cpu.cfs_period_us).
 */
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

/* root, dir and name joined (name may be ""); NULL when too long */
static FILE *open_at(const char *root, const char *dir, const char *name)
{
	char full[PATH_MAX];
	if ((size_t)snprintf(full, sizeof(full), "%s%s%s", root, dir, name) >= sizeof(full))
		return NULL;
	return fopen(full, "r");
}

/* 1 when the comma-separated list has the word */
static int has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *s = list; s; s = strchr(s, ',')) {
		s += *s == ',';
		if (strncmp(s, word, n) == 0 && (s[n] == ',' || s[n] == '\0'))
			return 1;
	}
	return 0;
}

/* One cgroup directory's quota in CPUs; 0 for none or unreadable. */
static double dir_quota(const char *root, const char *dir, int v2)
{
	double q = 0, p = 0;
	FILE *f;
	if (v2) {
		char max[32];
		if (!(f = open_at(root, dir, "/cpu.max")))
			return 0;
		/* "max 100000" (none) or "200000 100000" */
		int n = fscanf(f, "%31s %lf", max, &p);
		fclose(f);
		if (n != 2 || strcmp(max, "max") == 0)
			return 0;
		q = strtod(max, NULL);
	} else {
		if (!(f = open_at(root, dir, "/cpu.cfs_quota_us")))
			return 0;
		int n = fscanf(f, "%lf", &q); /* -1: none */
		fclose(f);
		if (n != 1 || !(f = open_at(root, dir, "/cpu.cfs_period_us")))
			return 0;
		n = fscanf(f, "%lf", &p);
		fclose(f);
		if (n != 1)
			return 0;
	}
	return q > 0 && p > 0 ? q / p : 0;
}

/*
 * The hierarchy's mount: for v2 the cgroup2 mount, for v1 the cgroup
 * mount whose options name the controller. mnt gets its mount point,
 * top the cgroup path it shows (a container's namespace shows "/").
 */
static int find_mount(const char *root, int v2, const char *ctrl, char *mnt, char *top)
{
	FILE *f = open_at(root, "/proc/self/mountinfo", "");
	if (!f)
		return -1;
	char line[4096];
	int found = -1;
	while (found < 0 && fgets(line, sizeof(line), f)) {
		/* id parent maj:min root mountpoint opts [optional...] - type source superopts */
		char r[PATH_MAX], m[PATH_MAX], type[64], opts[1024];
		const char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", type, opts) != 2)
			continue;
		if (v2 ? strcmp(type, "cgroup2") == 0
		       : strcmp(type, "cgroup") == 0 && has_word(opts, ctrl)) {
			strcpy(mnt, m);
			strcpy(top, r);
			found = 0;
		}
	}
	fclose(f);
	return found;
}

int gk_cgroup_walk(const char *root, const char *ctrl,
		   int (*fn)(const char *root, const char *dir, int v2, void *ctx), void *ctx)
{
	FILE *f = open_at(root, "/proc/self/cgroup", "");
	if (!f)
		return 0;
	/* hierarchy-id:controllers:path; v2 is "0::path" */
	char line[4096], path[2][PATH_MAX] = {"", ""};
	int have[2] = {0, 0}; /* [v1, v2] */
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2 || strlen(c2 + 1) >= PATH_MAX)
			continue;
		*c1 = '\0', *c2 = '\0';
		const char *ctrls = c1 + 1;
		int v2 = strcmp(line, "0") == 0 && *ctrls == '\0';
		if (v2 || has_word(ctrls, ctrl)) {
			strcpy(path[v2], c2 + 1);
			have[v2] = 1;
		}
	}
	fclose(f);
	int r = 0;
	for (int v2 = 0; v2 < 2 && r == 0; v2++) {
		char mnt[PATH_MAX], top[PATH_MAX], dir[PATH_MAX];
		if (!have[v2] || find_mount(root, v2, ctrl, mnt, top) < 0)
			continue;
		/* the process's cgroup below the mount; the mount itself when
		 * the path is outside what it shows */
		const char *rel = path[v2];
		size_t n = strlen(top);
		if (strcmp(top, "/") == 0)
			n = 0;
		if (strncmp(rel, top, n) == 0 && (rel[n] == '/' || rel[n] == '\0'))
			rel += n;
		else
			rel = "";
		if ((size_t)snprintf(dir, sizeof(dir), "%s%s", mnt, rel) >= sizeof(dir))
			continue;
		/* from the process's own cgroup up to the mount */
		size_t stop = strlen(mnt);
		for (;;) {
			if ((r = fn(root, dir, v2, ctx)) != 0)
				break;
			char *slash = strrchr(dir, '/');
			if (!slash || (size_t)(slash - dir) < stop)
				break;
			*slash = '\0';
		}
	}
	return r;
}

/* a limit anywhere on the way up applies: the smallest */
static int quota_at(const char *root, const char *dir, int v2, void *ctx)
{
	double *best = ctx, q = dir_quota(root, dir, v2);
	if (q > 0 && (*best == 0 || q < *best))
		*best = q;
	return 0;
}

double gk_cgroup_cpu_quota(const char *root)
{
	double best = 0;
	gk_cgroup_walk(root, "cpu", quota_at, &best);
	return best;
}

void gk_cpu_set(cpu_set_t *set)
{
	if (sched_getaffinity(0, sizeof(*set), set) == 0 && CPU_COUNT(set) > 0)
		return;
	CPU_ZERO(set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	for (long i = 0; i < (n > 0 ? n : 1) && i < CPU_SETSIZE; i++)
		CPU_SET((int)i, set);
}

int gk_cpus_usable(double *quota)
{
	cpu_set_t set;
	gk_cpu_set(&set);
	int n = CPU_COUNT(&set);
	double q = gk_cgroup_cpu_quota("");
	if (quota)
		*quota = q;
	if (q > 0 && ceil(q) < n)
		n = (int)ceil(q);
	return n > 0 ? n : 1;
}
