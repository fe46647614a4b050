/*
 * memlimit.c - how much memory the host lets this process have: its
 * memory cgroup's limit, the kernel's estimate of what can be allocated
 * without swapping, and the address-space limit of `ulimit -v`.
 *
 * reference: the kernel's Documentation/admin-guide/cgroup-v2.rst
 * (memory.max, memory.current, memory.stat), cgroup-v1/memory.rst
 * (memory.limit_in_bytes, memory.usage_in_bytes), filesystems/proc.rst
 * (MemAvailable, /proc/PID/limits, VmSize).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"

/* v1's "no limit": LONG_MAX rounded down to a page; anything this large */
#define NO_LIMIT (1ULL << 62)

static FILE *open_at(const char *root, const char *dir, const char *name)
{
	char full[PATH_MAX];
	if ((size_t)snprintf(full, sizeof(full), "%s%s%s", root, dir, name) >= sizeof(full))
		return NULL;
	return fopen(full, "r");
}

/* The first number of a file ("max" and unreadable: 0). */
static uint64_t read_u64(const char *root, const char *dir, const char *name)
{
	FILE *f = open_at(root, dir, name);
	if (!f)
		return 0;
	unsigned long long v = 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/*
 * The number after "KEY" and sep in a keyed file: "file N" in memory.stat
 * (sep ' '), "MemAvailable:   N kB" in /proc/meminfo (sep ':'); 0 without.
 */
static uint64_t read_key(const char *root, const char *dir, const char *name, const char *key,
			 char sep)
{
	FILE *f = open_at(root, dir, name);
	if (!f)
		return 0;
	char line[256];
	size_t n = strlen(key);
	unsigned long long v = 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && line[n] == sep &&
		    sscanf(line + n + 1, "%llu", &v) == 1)
			break;
	fclose(f);
	return v;
}

typedef struct walk {
	gk_host_mem *m;
	uint64_t room; /* the smallest headroom so far */
	int seen;
} walk;

static int limit_at(const char *root, const char *dir, int v2, void *ctx)
{
	walk *w = ctx;
	if (!w->seen) {
		char full[PATH_MAX];
		struct stat st;
		w->seen = 1;
		if ((size_t)snprintf(full, sizeof(full), "%s%s", root, dir) < sizeof(full) &&
		    stat(full, &st) == 0)
			w->m->cgroup_id = (uint64_t)st.st_ino;
	}
	uint64_t max = read_u64(root, dir, v2 ? "/memory.max" : "/memory.limit_in_bytes");
	if (max == 0 || max >= NO_LIMIT)
		return 0;
	uint64_t used = read_u64(root, dir, v2 ? "/memory.current" : "/memory.usage_in_bytes");
	uint64_t cache = v2 ? read_key(root, dir, "/memory.stat", "file", ' ')
			    : read_key(root, dir, "/memory.stat", "total_cache", ' ');
	if (!v2 && !cache)
		cache = read_key(root, dir, "/memory.stat", "cache", ' ');
	used = used > cache ? used - cache : 0;
	uint64_t room = max > used ? max - used : 0;
	if (w->m->cgroup_max == 0 || room < w->room) {
		w->m->cgroup_max = max;
		w->m->cgroup_used = used;
		w->room = room;
	}
	return 0;
}

/* "Key:   N kB" of /proc/meminfo or /proc/self/status, in bytes; 0 without */
static uint64_t read_kb(const char *root, const char *file, const char *key)
{
	return read_key(root, file, "", key, ':') * 1024;
}

/* /proc/self/limits: "Max address space   SOFT   HARD   bytes" */
static uint64_t read_as_limit(const char *root)
{
	FILE *f = open_at(root, "/proc/self/limits", "");
	if (!f)
		return 0;
	char line[256];
	static const char key[] = "Max address space";
	unsigned long long v = 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, sizeof(key) - 1) == 0) {
			/* "unlimited" fails the scan: no limit */
			if (sscanf(line + sizeof(key) - 1, "%llu", &v) != 1)
				v = 0;
			break;
		}
	fclose(f);
	return v;
}

void gk_host_mem_read(const char *root, gk_host_mem *m)
{
	memset(m, 0, sizeof(*m));
	walk w = {.m = m};
	gk_cgroup_walk(root, "memory", limit_at, &w);
	m->available = read_kb(root, "/proc/meminfo", "MemAvailable");
	m->as_max = read_as_limit(root);
	m->as_used = read_kb(root, "/proc/self/status", "VmSize");
}
