/*
 * cuda_core.c - lib/cuda on any machine: the probe against what the
 * loader and the build say, the --device choice, device picking, the
 * status checks' messages, and the memory accounting (driven with made-up
 * pointers, so it runs without a GPU). On a machine without a device every
 * entry point must fail with the probe's message, never crash; with one
 * (asked of the system, tests/unit/gpu.h: a probe that misses it fails),
 * memory, copies, streams and events work on it.
 */
#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>

#if GK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cuda/cuda.h"
#include "cuda/internal.h"
#include "tap.h"
#include "gpu.h"

static void test_probe(void)
{
	gk_cuda_info info;
	gk_err err = {0};
	int rc = gk_cuda_probe(&info, &err);
	diag("probe: state %d, %d device(s), driver %d, runtime %d: %s", (int)info.state,
	     info.devices, info.driver_version, info.runtime_version,
	     rc == 0 ? "usable" : err.msg);
	ok((rc == 0) == (info.state == GK_CUDA_OK), "probe: 0 exactly when the state is OK");
	ok(rc == 0 ? info.devices > 0 : info.devices == 0, "probe: devices > 0 exactly when usable");
	ok(rc == 0 || strncmp(err.msg, "no usable GPU: ", 15) == 0,
	   "probe: the reason starts 'no usable GPU: '");
	if (!gk_cuda_built()) {
		char desc[16] = "x";
		ok(gk_cuda_describe(0, desc, sizeof(desc), &err) < 0 && !desc[0],
		   "describe: built without CUDA, an error and an empty text");
		ok(info.state == GK_CUDA_NOT_BUILT, "probe: built without CUDA says so");
		is_str(err.msg, "no usable GPU: gpukit was built without CUDA", "probe: message");
		return;
	}
	/* The loader is the independent witness for "no driver". */
	void *so = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!so) {
		ok(info.state == GK_CUDA_NO_DRIVER, "probe: no libcuda.so.1 is 'no driver'");
		is_str(err.msg, "no usable GPU: cannot load the CUDA driver 'libcuda.so.1' "
		       "(is the NVIDIA driver installed?)", "probe: no-driver message");
	} else {
		dlclose(so);
		ok(info.state != GK_CUDA_NO_DRIVER, "probe: libcuda.so.1 loads, so a driver is there");
		ok(info.driver_version > 0, "probe: the driver reports its version");
	}
	ok(info.runtime_version >= 12000, "probe: runtime version %d is CUDA 12 or later",
	   info.runtime_version);
	const char *why = NULL;
	is_int(gk_cuda_device_count(&why), info.devices, "device_count agrees with the probe");
	ok(info.devices > 0 || (why && *why), "device_count gives a reason for 0");
	/* The start line's description: the name, the compute capability and
	 * memory, and the versions the probe read, in its spelling. */
	char desc[192], want[64];
	gk_err derr = {0};
	int drc = gk_cuda_describe(0, desc, sizeof(desc), &derr);
	if (info.devices > 0) {
		snprintf(want, sizeof(want), "; driver for CUDA %d.%d, runtime CUDA %d.%d",
			 info.driver_version / 1000, info.driver_version % 1000 / 10,
			 info.runtime_version / 1000, info.runtime_version % 1000 / 10);
		diag("describe: %s", drc == 0 ? desc : derr.msg);
		ok(drc == 0 && strstr(desc, " (sm_") && strstr(desc, " GiB)") &&
		   gk_str_ends(desc, want), "describe: name (sm_XY, memory)%s", want);
	} else {
		ok(drc < 0, "describe: no device, an error");
	}
	ok(gk_cuda_describe(info.devices, desc, sizeof(desc), &derr) < 0,
	   "describe: a device past the last is an error");
	/* A second probe gives the same answer (the runtime caches the driver). */
	gk_cuda_info again;
	gk_cuda_probe(&again, NULL);
	ok(again.state == info.state && again.devices == info.devices, "probe: stable");
}

static void test_driver_ok(void)
{
	static const struct { int drv, rt, want; } t[] = {
		{13000, 13000, 1}, {13020, 13000, 1}, {13000, 13020, 1}, /* minor compatibility */
		{12080, 13000, 0}, {12090, 12040, 1}, {0, 13000, 0}, {14000, 13000, 1},
	};
	int good = 1;
	for (size_t i = 0; i < GK_ARRAY_SIZE(t); i++)
		if (gk_cuda_driver_ok(t[i].drv, t[i].rt) != t[i].want) {
			diag("driver %d runtime %d: got %d", t[i].drv, t[i].rt, !t[i].want);
			good = 0;
		}
	ok(good, "driver_ok: same or newer major version, minor versions compatible");
}

static void test_want(void)
{
	is_int(gk_cuda_want_parse("auto"), GK_CUDA_WANT_AUTO, "want: auto");
	is_int(gk_cuda_want_parse("cpu"), GK_CUDA_WANT_CPU, "want: cpu");
	is_int(gk_cuda_want_parse("CUDA"), GK_CUDA_WANT_CUDA, "want: CUDA");
	is_int(gk_cuda_want_parse("gpu"), GK_CUDA_WANT_CUDA, "want: gpu");
	is_int(gk_cuda_want_parse("tpu"), -1, "want: unknown");

	gk_err err = {0}, perr = {0};
	int usable = gk_cuda_probe(NULL, &perr) == 0, note = -1;
	is_int(gk_cuda_device_resolve(GK_CUDA_WANT_CPU, &note, &err), 0, "resolve cpu: the CPU");
	is_int(note, 0, "resolve cpu: no note");
	int rc = gk_cuda_device_resolve(GK_CUDA_WANT_CUDA, &note, &err);
	if (usable) {
		is_int(rc, 1, "resolve cuda with a GPU: the GPU");
	} else {
		is_int(rc, -1, "resolve cuda without a GPU: an error");
		is_str(err.msg, perr.msg, "resolve cuda: the probe's reason");
	}
	gk_err_clear(&err);
	rc = gk_cuda_device_resolve(GK_CUDA_WANT_AUTO, &note, &err);
	if (usable) {
		ok(rc == 1 && note == 0, "resolve auto with a GPU: the GPU, no note");
	} else {
		ok(rc == 0 && note == 1, "resolve auto without a GPU: the CPU, with a note");
		is_str(err.msg, perr.msg, "resolve auto: the note is the probe's reason");
	}
}

static void test_pick(void)
{
	gk_err err = {0};
	int dev = -1, good = 1;
	/* One GPU per local rank, and wrap when ranks outnumber devices. */
	for (int lr = 0; lr < 16; lr++)
		for (int nd = 1; nd <= 8; nd++)
			good &= gk_cuda_device_pick(-1, lr, nd, &dev, &err) == 0 && dev == lr % nd;
	ok(good, "pick: local rank modulo the device count");
	ok(gk_cuda_device_pick(3, 0, 8, &dev, &err) == 0 && dev == 3, "pick: an explicit device");
	is_int(gk_cuda_device_pick(8, 0, 8, &dev, &err), -1, "pick: device 8 of 8 fails");
	is_str(err.msg, "CUDA device 8: this process sees 8 devices (0 to 7)", "pick: message");
	is_int(gk_cuda_device_pick(-1, 0, 0, &dev, &err), -1, "pick: no devices fails");
}

static void test_check(void)
{
	gk_err err = {0};
	is_int(gk_cuda_check_at(GK_CUDA_API_RUNTIME, 0, "cudaFree(p)", "x.c", 7, &err), 0,
	       "check: success is 0");
	is_str(err.msg, "", "check: success leaves err alone");
	is_int(gk_cuda_check_at(GK_CUDA_API_NCCL, 6, "ncclAllReduce(a, b, n)", "lib/x.c", 42, &err),
	       -1, "check: failure is -1");
	if (gk_cuda_built())
		is_str(err.msg, "lib/x.c:42: ncclAllReduce: remote process exited or there was "
		       "a network error (ncclRemoteError)", "check: NCCL message with file:line");
	else
		ok(strstr(err.msg, "lib/x.c:42: ") == err.msg, "check: message with file:line");
	gk_cuda_check_at(GK_CUDA_API_CUBLAS, 15, "cublasGemmEx(h, ...)", "y.c", 3, &err);
	ok(strstr(err.msg, "y.c:3: cublasGemmEx") && strstr(err.msg, "CUBLAS_STATUS_NOT_SUPPORTED"),
	   "check: cuBLAS status by name: %s", err.msg);
	if (gk_cuda_built()) {
		/* cudaErrorMemoryAllocation is 2 in every CUDA release */
		GK_CUDA_CHECK(2, &err);
		ok(strstr(err.msg, "cuda_core.c:") && strstr(err.msg, ": 2: out of memory"),
		   "check: GK_CUDA_CHECK names this file and the runtime's text: %s", err.msg);
	}
}

static void test_accounting(void)
{
	gk_cuda_mem_stats s0, s;
	gk_err err = {0};
	gk_cuda_mem_stats_get(&s0);
	static char fake[3][1];
	ok(gk_cuda_account_record(fake[0], 1000, GK_CUDA_MEM_PARAMS, &err) == 0 &&
	   gk_cuda_account_record(fake[1], 500, GK_CUDA_MEM_GRADS, &err) == 0 &&
	   gk_cuda_account_record(fake[2], 250, GK_CUDA_MEM_PARAMS, &err) == 0,
	   "accounting: three allocations recorded");
	gk_cuda_mem_stats_get(&s);
	ok(s.bytes[GK_CUDA_MEM_PARAMS] - s0.bytes[GK_CUDA_MEM_PARAMS] == 1250 &&
	   s.bytes[GK_CUDA_MEM_GRADS] - s0.bytes[GK_CUDA_MEM_GRADS] == 500 &&
	   s.total - s0.total == 1750 && s.allocs - s0.allocs == 3,
	   "accounting: live bytes by kind and in total");
	is_int(gk_cuda_account_forget(fake[0]), 1, "accounting: forget a known pointer");
	is_int(gk_cuda_account_forget(fake[0]), 0, "accounting: forget it twice: unknown");
	gk_cuda_mem_stats_get(&s);
	ok(s.bytes[GK_CUDA_MEM_PARAMS] - s0.bytes[GK_CUDA_MEM_PARAMS] == 250 &&
	   s.peak[GK_CUDA_MEM_PARAMS] >= s0.bytes[GK_CUDA_MEM_PARAMS] + 1250 &&
	   s.peak_total >= s0.total + 1750 && s.total - s0.total == 750,
	   "accounting: frees lower the live bytes, not the peaks");
	gk_cuda_mem_reset_peaks();
	gk_cuda_mem_stats_get(&s);
	ok(s.peak_total == s.total && s.peak[GK_CUDA_MEM_PARAMS] == s.bytes[GK_CUDA_MEM_PARAMS],
	   "accounting: reset_peaks restarts the peaks at the live values");
	gk_cuda_account_forget(fake[1]);
	gk_cuda_account_forget(fake[2]);
	gk_cuda_mem_stats_get(&s);
	ok(s.total == s0.total && s.allocs == s0.allocs, "accounting: back to the start");
	is_int(gk_cuda_account_record(fake[0], 1, GK_CUDA_MEM_KINDS, &err), -1,
	       "accounting: an unknown kind is refused");
	/* Many live at once: the table grows (GK_GROW) and swap-removes. */
	enum { M = 1000 };
	static char many[M];
	int good = 1;
	for (int i = 0; i < M; i++)
		good &= gk_cuda_account_record(many + i, (uint64_t)i, (gk_cuda_mem_kind)(i % 6), &err) == 0;
	for (int i = M - 1; i >= 0; i -= 2)
		good &= gk_cuda_account_forget(many + i) == 1;
	gk_cuda_mem_stats_get(&s);
	uint64_t even = 0;
	for (int i = 0; i < M; i += 2)
		even += (uint64_t)i;
	good &= s.total - s0.total == even && s.allocs - s0.allocs == M / 2;
	for (int i = 0; i < M; i += 2)
		good &= gk_cuda_account_forget(many + i) == 1;
	gk_cuda_mem_stats_get(&s);
	ok(good && s.total == s0.total, "accounting: 1000 live allocations, freed in two passes");
	is_str(gk_cuda_mem_kind_name(GK_CUDA_MEM_OPTIM), "optimizer", "kind name: optimizer");
	is_str(gk_cuda_mem_kind_name(GK_CUDA_MEM_COMM), "comm", "kind name: comm");
}

/* Without a usable GPU every call fails with a message, and nothing crashes. */
static void test_no_device(void)
{
	gk_err perr = {0}, err = {0};
	if (gk_cuda_probe(NULL, &perr) == 0)
		return;
	gk_cuda_stream s = NULL;
	gk_cuda_event e = NULL;
	int dev = -1;
	ok(gk_cuda_device_select(-1, &dev, &err) == -1 && strcmp(err.msg, perr.msg) == 0,
	   "no GPU: device_select fails with the probe's reason");
	gk_err_clear(&err);
	ok(gk_cuda_alloc(4096, GK_CUDA_MEM_PARAMS, &err) == NULL && err.msg[0],
	   "no GPU: alloc fails with a message: %s", err.msg);
	gk_err_clear(&err);
	ok(gk_cuda_stream_new(&s, &err) == -1 && err.msg[0], "no GPU: stream_new fails: %s", err.msg);
	gk_err_clear(&err);
	ok(gk_cuda_event_new(&e, 0, &err) == -1 && err.msg[0], "no GPU: event_new fails: %s", err.msg);
	gk_cuda_stream_free(s);
	gk_cuda_event_free(e);
	gk_cuda_free(NULL);
	gk_cuda_host_free(NULL);
	gk_cuda_mem_stats st;
	gk_cuda_mem_stats_get(&st);
	is_u64(st.total, 0, "no GPU: nothing counted");
}

/*
 * With a GPU: memory through the device and back, counted under its kind
 * while live; a stream's order and events (a copy recorded, then waited
 * on by a second stream, then timed); pinned host memory counted apart.
 */
#if GK_HAVE_CUDA
/* A host function holding its stream until *arg is set (no CUDA calls). */
static void CUDART_CB hold(void *arg)
{
	while (!atomic_load((atomic_int *)arg))
		sched_yield();
}
#endif

static void test_device(void)
{
	gk_err err = {0};
	char why[256];
	int run = gpu_expect(gk_cuda_probe(NULL, &err) == 0, err.msg, why, sizeof why);
	if (run == 0)
		gpu_skip("memory, copies, streams and events on a device", why);
	if (run <= 0)
		return;
	gk_err_clear(&err);
	int dev = -1;
	/* the call before ok(): its arguments are evaluated in no set order */
	int sel = gk_cuda_device_select(-1, &dev, &err);
	ok(sel == 0 && dev >= 0, "device: selected device %d", dev);
	enum { N = 1 << 20 };
	gk_cuda_mem_stats s0, s;
	gk_cuda_mem_stats_get(&s0);
	uint32_t *h = gk_cuda_host_alloc(N * 4, &err);
	uint32_t *back = malloc(N * 4);
	void *d1 = gk_cuda_alloc(N * 4, GK_CUDA_MEM_GRADS, &err);
	void *d2 = gk_cuda_alloc(N * 4, GK_CUDA_MEM_COMM, &err);
	gk_cuda_mem_stats_get(&s);
	ok(s.bytes[GK_CUDA_MEM_GRADS] - s0.bytes[GK_CUDA_MEM_GRADS] == N * 4 &&
	   s.bytes[GK_CUDA_MEM_COMM] - s0.bytes[GK_CUDA_MEM_COMM] == N * 4 &&
	   s.total - s0.total == 2 * N * 4 && s.allocs - s0.allocs == 2 &&
	   s.host_pinned - s0.host_pinned == N * 4,
	   "device: two allocations and pinned memory counted by kind");
	if (!h || !back || !d1 || !d2) {
		ok(0, "device: allocations: %s", err.msg);
		goto out;
	}
	for (uint32_t i = 0; i < N; i++)
		h[i] = i * 2654435761u;
	gk_cuda_stream a = NULL, b = NULL;
	gk_cuda_event e0 = NULL, e1 = NULL, done = NULL;
	int rc = gk_cuda_stream_new(&a, &err) | gk_cuda_stream_new(&b, &err) |
		 gk_cuda_event_new(&e0, 1, &err) | gk_cuda_event_new(&e1, 1, &err) |
		 gk_cuda_event_new(&done, 0, &err);
	ok(rc == 0, "device: two streams, three events");
	/* host -> d1 on a, recorded; b waits for it, then d1 -> d2 -> host */
	rc = gk_cuda_event_record(e0, a, &err) |
	     gk_cuda_copy(d1, h, N * 4, a, &err) |
	     gk_cuda_event_record(e1, a, &err) |
	     gk_cuda_event_record(done, a, &err) |
	     gk_cuda_stream_wait(b, done, &err) |
	     gk_cuda_copy(d2, d1, N * 4, b, &err) |
	     gk_cuda_copy(back, d2, N * 4, b, &err);
	ok(rc == 0 && memcmp(back, h, N * 4) == 0,
	   "device: 4 MiB host -> device -> device -> host, bit for bit");
	int finished = 0;
	float ms = -1;
	ok(gk_cuda_event_query(done, &finished, &err) == 0 && finished,
	   "device: the event after a finished copy reads done");
	rc = gk_cuda_event_sync(e1, &err);
	if (rc == 0)
		rc = gk_cuda_event_elapsed(e0, e1, &ms, &err);
	ok(rc == 0 && ms >= 0 && ms < 10000, "device: a copy timed by two events (%.3f ms)%s%s",
	   ms, rc ? ": " : "", rc ? err.msg : "");
#if GK_HAVE_CUDA
	/*
	 * An event behind a held stream reads not done, and that answer is
	 * not left as the thread's last error for the next launch check
	 * (the convert kernel's) to report as its own failure.
	 */
	atomic_int go = 0;
	/*
	 * The convert kernel runs once before the stream is held: CUDA loads
	 * a kernel at its first launch (lazy loading, the default since
	 * 12.2), and loading may wait for the whole device, here for `hold`,
	 * which waits for this thread: a hang.
	 */
	int conv = gk_cuda_convert(d2, GK_DT_BF16, d1, GK_DT_F32, 1024, b, &err);
	int held = conv == 0 && cudaLaunchHostFunc(a, hold, &go) == cudaSuccess;
	finished = -1;
	rc = held ? gk_cuda_event_record(done, a, &err) |
		    gk_cuda_event_query(done, &finished, &err) : -1;
	conv = gk_cuda_convert(d2, GK_DT_BF16, d1, GK_DT_F32, 1024, b, &err);
	atomic_store(&go, 1);
	rc |= gk_cuda_stream_sync(a, &err) | gk_cuda_stream_sync(b, &err);
	ok(rc == 0 && finished == 0 && conv == 0,
	   "device: an event not reached yet reads not done, and the next launch "
	   "reports no error%s%s", err.msg[0] ? ": " : "", err.msg);
#endif
	gk_cuda_event_free(e0);
	gk_cuda_event_free(e1);
	gk_cuda_event_free(done);
	gk_cuda_stream_free(a);
	gk_cuda_stream_free(b);
out:
	gk_cuda_free(d1);
	gk_cuda_free(d2);
	gk_cuda_host_free(h);
	free(back);
	gk_cuda_mem_stats_get(&s);
	ok(s.total == s0.total && s.allocs == s0.allocs &&
	   s.host_pinned == s0.host_pinned,
	   "device: freed memory leaves the counters where they started");
}

int main(void)
{
	test_probe();
	test_driver_ok();
	test_want();
	test_pick();
	test_check();
	test_accounting();
	test_no_device();
	test_device();
	return done_testing();
}
