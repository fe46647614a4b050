/* core_memlimit.c - what the host lets a process have (gk_host_mem_read),
 * from trees laid out as the kernel shows them: cgroup v2 and v1 memory
 * limits ("max", v1's page-rounded LONG_MAX, nested limits, page cache),
 * MemAvailable, RLIMIT_AS and VmSize; and this process against getrlimit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "tap.h"

#define FIXTURE_TOP "/tmp/gk-memlimit-XXXXXX"
#include "fixture.h"

#define V1_MOUNTS                                                                         \
	"31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"                      \
	"33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"     \
	"34 31 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"

#define MIB (1ULL << 20)

static void expect_cg(const char *name, uint64_t max, uint64_t used)
{
	gk_host_mem m;
	gk_host_mem_read(root, &m);
	if (!ok(m.cgroup_max == max && m.cgroup_used == used, "%s: limit %llu MiB, used %llu MiB",
		name, (unsigned long long)(max / MIB), (unsigned long long)(used / MIB)))
		diag("got limit %llu, used %llu", (unsigned long long)m.cgroup_max,
		     (unsigned long long)m.cgroup_used);
}

int main(void)
{
	if (!mkdtemp(top)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return done_testing();
	}

	/* a container in its own cgroup namespace (docker --memory 2g) */
	fresh();
	put("/proc/self/cgroup", "0::/\n");
	put("/proc/self/mountinfo", V2_MOUNT);
	put("/sys/fs/cgroup/memory.max", "2147483648\n");
	put("/sys/fs/cgroup/memory.current", "524288000\n");
	put("/sys/fs/cgroup/memory.stat", "anon 100000000\nfile 209715200\nkernel 1000\n");
	expect_cg("v2, namespaced, 2 GiB, 500 MiB used of which 200 MiB page cache",
		  2048 * MIB, 300 * MIB);
	put("/sys/fs/cgroup/memory.max", "max\n");
	expect_cg("v2, max: no limit", 0, 0);

	/* the host's view of a pod: the smallest headroom on the way up */
	fresh();
	put("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
	put("/proc/self/mountinfo", V2_MOUNT);
	put("/sys/fs/cgroup/kubepods/memory.max", "17179869184\n");
	put("/sys/fs/cgroup/kubepods/memory.current", "16106127360\n"); /* 15 GiB */
	put("/sys/fs/cgroup/kubepods/pod1/memory.max", "4294967296\n");
	put("/sys/fs/cgroup/kubepods/pod1/memory.current", "1073741824\n");
	put("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
	expect_cg("v2, nested: the node's 1 GiB of room under the pod's 3", 16384 * MIB,
		  15360 * MIB);
	put("/sys/fs/cgroup/kubepods/memory.current", "1073741824\n");
	expect_cg("v2, nested: the pod's 3 GiB of room under the node's 15", 4096 * MIB,
		  1024 * MIB);

	/* cgroup v1: the memory controller's mount; LONG_MAX rounded down to
	 * a page is no limit; total_cache is the page cache */
	fresh();
	put("/proc/self/cgroup", "4:cpu,cpuacct:/docker/abc\n7:memory:/docker/abc\n0::/\n");
	put("/proc/self/mountinfo", V1_MOUNTS);
	put("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
	put("/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "104857600\n");
	expect_cg("v1, page-rounded LONG_MAX: no limit", 0, 0);
	put("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "1073741824\n");
	put("/sys/fs/cgroup/memory/docker/abc/memory.stat", "cache 1\ntotal_cache 52428800\n");
	expect_cg("v1, 1 GiB, 100 MiB used less 50 MiB total_cache", 1024 * MIB, 50 * MIB);

	/* /proc/meminfo, /proc/self/limits, /proc/self/status */
	fresh();
	put("/proc/meminfo", "MemTotal:       24000000 kB\nMemFree:  100 kB\n"
			     "MemAvailable:   20480000 kB\n");
	put("/proc/self/limits",
	    "Limit                     Soft Limit           Hard Limit           Units     \n"
	    "Max stack size            8388608              unlimited            bytes     \n"
	    "Max address space         3072000000           unlimited            bytes     \n");
	put("/proc/self/status", "Name:\tgpu-train\nVmPeak:\t  999999 kB\nVmSize:\t  204800 kB\n");
	gk_host_mem m;
	gk_host_mem_read(root, &m);
	is_u64(m.available, 20480000ULL * 1024, "MemAvailable in bytes");
	is_u64(m.as_max, 3072000000ULL, "Max address space: the soft limit");
	is_u64(m.as_used, 204800ULL * 1024, "VmSize, not VmPeak");
	is_u64(m.cgroup_max, 0, "no cgroup files: no cgroup limit");
	put("/proc/self/limits",
	    "Max address space         unlimited            unlimited            bytes     \n");
	gk_host_mem_read(root, &m);
	is_u64(m.as_max, 0, "Max address space unlimited: no limit");

	/* nothing to read */
	fresh();
	gk_host_mem_read(root, &m);
	ok(m.cgroup_max == 0 && m.available == 0 && m.as_max == 0 && m.as_used == 0,
	   "no /proc: every field 0");

	/* this process: its own limit as getrlimit says (not lowered here: a
	 * sanitizer's shadow memory needs the whole address space) */
	struct rlimit rl;
	getrlimit(RLIMIT_AS, &rl);
	gk_host_mem_read("", &m);
	is_u64(m.as_max, rl.rlim_cur == RLIM_INFINITY ? 0 : (uint64_t)rl.rlim_cur,
	       "this process: RLIMIT_AS as getrlimit gives it (0: unlimited)");
	ok(m.as_used > 0 && (m.as_max == 0 || m.as_used < m.as_max),
	   "this process: VmSize %llu, below any limit", (unsigned long long)m.as_used);
	ok(m.available > 0, "this machine: MemAvailable %llu", (unsigned long long)m.available);

	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	if (system(cmd) != 0)
		diag("could not remove %s", top);
	return done_testing();
}
