/* core_cpus.c - the cgroup CPU quota from trees laid out as the kernel
 * shows them (v1, v2, a container's namespace, nested limits). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "tap.h"

#define FIXTURE_TOP "/tmp/gk-cpus-XXXXXX"
#include "fixture.h"

#define V1_MOUNTS                                                                         \
	"31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"                      \
	"33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"             \
	"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"

static void expect(const char *name, double want)
{
	double got = gk_cgroup_cpu_quota(root);
	if (!ok(got == want, "%s: %g CPUs", name, want))
		diag("got %g", got);
}

int main(void)
{
	if (!mkdtemp(top)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return done_testing();
	}

	/* a container in its own cgroup namespace (what docker --cpus 1.5 shows) */
	fresh();
	put("/proc/self/cgroup", "0::/\n");
	put("/proc/self/mountinfo", V2_MOUNT);
	put("/sys/fs/cgroup/cpu.max", "150000 100000\n");
	expect("v2, namespaced, 150000 of 100000", 1.5);
	put("/sys/fs/cgroup/cpu.max", "max 100000\n");
	expect("v2, max: none", 0);
	put("/sys/fs/cgroup/cpu.max", "lots\n");
	expect("v2, unreadable cpu.max: none", 0);

	/* the host's view of a pod: the smallest limit on the way up applies */
	fresh();
	put("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
	put("/proc/self/mountinfo", V2_MOUNT);
	put("/sys/fs/cgroup/kubepods/cpu.max", "800000 100000\n");
	put("/sys/fs/cgroup/kubepods/pod1/cpu.max", "400000 100000\n");
	put("/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
	expect("v2, nested: the pod's 4 under the node's 8", 4);
	put("/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "50000 100000\n");
	expect("v2, nested: the container's 0.5", 0.5);

	/* cgroup v1: the cpu controller's mount, not cpuacct's */
	fresh();
	put("/proc/self/cgroup", "4:cpu,cpuacct:/docker/abc\n5:cpuacct:/other\n0::/\n");
	put("/proc/self/mountinfo", V1_MOUNTS);
	put("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
	put("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
	put("/sys/fs/cgroup/cpuacct/other/cpu.cfs_quota_us", "100000\n");
	put("/sys/fs/cgroup/cpuacct/other/cpu.cfs_period_us", "100000\n");
	expect("v1 cpu,cpuacct, 250000 of 100000 (cpuacct alone is not read)", 2.5);
	put("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
	expect("v1, quota -1: none", 0);
	put("/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "300000\n");
	put("/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
	expect("v1, none here, 3 a level up", 3);

	/* a v1 mount of the cgroup itself (its root is the cgroup's path) */
	fresh();
	put("/proc/self/cgroup", "4:cpu:/docker/abc\n");
	put("/proc/self/mountinfo",
	    "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu\n");
	put("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "100000\n");
	put("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
	expect("v1, the cgroup mounted as the root", 1);

	/* nothing to read */
	fresh();
	expect("no /proc", 0);
	put("/proc/self/cgroup", "0::/\n");
	expect("no mount of the hierarchy", 0);
	put("/proc/self/mountinfo", V2_MOUNT);
	expect("no cpu.max (the cpu controller is off)", 0);

	/* this process: at least 1, at most its CPU set, and the quota's bound */
	double q = -1;
	int n = gk_cpus_usable(&q);
	cpu_set_t set;
	int aff = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : n;
	ok(n >= 1 && n <= aff && q >= 0 && (q == 0 || n <= (int)q + 1),
	   "this process: %d usable of %d in its set (quota %g)", n, aff, q);

	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	if (system(cmd) != 0)
		diag("could not remove %s", top);
	return done_testing();
}
