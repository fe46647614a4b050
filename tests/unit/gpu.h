/*
 * gpu.h - whether the device tests must run, decided by asking the system,
 * not the code under test (tests/cli/lib.sh's test_gpu_prereqs does the
 * same for the CLI tests). Include after tap.h.
 *
 * The system has a GPU for this process when `nvidia-smi -L` succeeds and
 * lists one ("GPU N: ..." lines) or the driver's device nodes
 * /dev/nvidia0, /dev/nvidia1, ... exist, unless CUDA_VISIBLE_DEVICES is
 * set and empty (which hides them all). A build without CUDA has none.
 *
 *   gpu_expect(probe_ok, probe_msg, why, n)
 *	holds the code's own probe (probe_ok: it found a usable device;
 *	probe_msg: its reason when not) to the system's answer:
 *	 1  run the device tests: the system has a GPU and the probe found
 *	    it (or the probe found one the system does not list, which the
 *	    device tests themselves then check);
 *	 0  skip them: no GPU, and the probe agrees; why says why, for
 *	    gpu_skip or gpu_skip_all;
 *	-1  the system lists a GPU and the probe says there is none: a failed
 *	    test has been printed; run nothing that needs the device.
 *   gpu_skip(what, why)      "ok N # SKIP no CUDA device (WHY)"
 *   gpu_skip_all(why)        "1..0 # SKIP no CUDA device (WHY)", and exit
 *   gpu_dev, gpu_back        device buffers to and from the host (CUDA builds)
 *
 * So a broken probe on a GPU machine is a failure, not every device test
 * quietly skipped. The skip reads "no CUDA device (...)" with nothing
 * between the test number and "# SKIP": .ci/run counts skips in that form
 * and allows that reason.
 */
#ifndef GK_TEST_GPU_H
#define GK_TEST_GPU_H

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tap.h"

/* 1 when the system shows this process a GPU; desc says what it saw. */
static inline int gpu_system(char *desc, size_t n)
{
#if !GK_HAVE_CUDA
	snprintf(desc, n, "built without CUDA");
	return 0;
#else
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	if (visible && !*visible) {
		snprintf(desc, n, "CUDA_VISIBLE_DEVICES is empty");
		return 0;
	}
	int listed = 0, status = -1;
	fflush(stdout);
	FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
	if (p) {
		char line[512];
		while (fgets(line, sizeof line, p))
			listed += strncmp(line, "GPU ", 4) == 0;
		status = pclose(p);
	}
	if (status != 0)
		listed = 0;
	glob_t g;
	size_t nodes = 0;
	if (glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0) {
		nodes = g.gl_pathc;
		globfree(&g);
	}
	char smi[64], dev[64];
	if (status == 0)
		snprintf(smi, sizeof smi, "nvidia-smi -L lists %d GPU%s", listed,
			 listed == 1 ? "" : "s");
	else if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127)
		snprintf(smi, sizeof smi, "no nvidia-smi");
	else
		snprintf(smi, sizeof smi, "nvidia-smi -L failed");
	if (nodes)
		snprintf(dev, sizeof dev, "%zu /dev/nvidia[0-9]* node%s", nodes,
			 nodes == 1 ? "" : "s");
	else
		snprintf(dev, sizeof dev, "no /dev/nvidia[0-9]*");
	snprintf(desc, n, "%s, %s", smi, dev);
	return listed > 0 || nodes > 0;
#endif
}

static inline int gpu_expect(int probe_ok, const char *probe_msg, char *why, size_t n)
{
	char sys[160];
	int have = gpu_system(sys, sizeof sys);
	if (have && probe_ok)
		return 1;
	if (!have && probe_ok) {
		diag("the probe finds a GPU the system does not show (%s): "
		     "running the device tests", sys);
		return 1;
	}
	if (have) {
		ok(0, "the code's probe finds the GPU the system shows");
		diag("  system: %s", sys);
		diag("  probe:  %s", probe_msg && *probe_msg ? probe_msg : "(no reason)");
		return -1;
	}
	snprintf(why, n, "%s", sys);
	diag("nothing to run on a device (%s); the code's probe agrees: %s", sys,
	     probe_msg && *probe_msg ? probe_msg : "(no reason)");
	return 0;
}

static inline void gpu_skip(const char *what, const char *why)
{
	/* not "skipped: ", which .ci/run would read as a skip's reason */
	diag("not run without a device: %s", what);
	printf("ok %d # SKIP no CUDA device (%s)\n", ++tap_n, why);
}

static inline void gpu_skip_all(const char *why)
{
	char line[320];
	snprintf(line, sizeof line, "no CUDA device (%.256s)", why);
	skip_all(line);
}

#if GK_HAVE_CUDA
#include "cuda/cuda.h"

/*
 * The device tests' buffers: bytes of device memory holding host's bytes
 * (host NULL: as allocated), and a device buffer's bytes back to the
 * host. A failure is said (diag) and ends the test program: nothing after
 * it can run.
 */
static inline void *gpu_dev(const void *host, size_t bytes)
{
	gk_err err = {0};
	void *d = gk_cuda_alloc(bytes, GK_CUDA_MEM_WORKSPACE, &err);
	if (!d || (host && gk_cuda_copy(d, host, bytes, NULL, &err) < 0)) {
		diag("device buffer: %s", err.msg);
		exit(1);
	}
	return d;
}

static inline void gpu_back(void *host, const void *d, size_t bytes)
{
	gk_err err = {0};
	if (gk_cuda_copy(host, d, bytes, NULL, &err) < 0) {
		diag("copy back: %s", err.msg);
		exit(1);
	}
}
#endif

#endif
