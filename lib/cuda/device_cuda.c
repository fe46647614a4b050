/*
 * device_cuda.c - lib/cuda in a CUDA build: checks, the probe, devices,
 * streams, events and memory over the CUDA runtime (linked statically;
 * it loads the driver, libcuda.so.1, when first used).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/internal.h"

int gk_cuda_built(void)
{
	return 1;
}

/* ---- checks ---- */

const char *gk_cuda_status_string(gk_cuda_api api, int status)
{
	switch (api) {
	case GK_CUDA_API_CUBLAS: return gk_cuda_cublas_name(status);
	case GK_CUDA_API_NCCL: return gk_cuda_nccl_name(status);
	default: return cudaGetErrorString((cudaError_t)status);
	}
}

int gk_cuda_check_at(gk_cuda_api api, int status, const char *call,
		     const char *file, int line, gk_err *err)
{
	if (status == 0)
		return 0;
	/* The function's name is enough; its arguments are in the source. */
	int len = (int)strcspn(call, "(");
	return gk_errf(err, "%s:%d: %.*s: %s", file, line, len, call,
		       gk_cuda_status_string(api, status));
}

/* ---- the probe ---- */

static void version_text(int v, char *buf, size_t n)
{
	snprintf(buf, n, "%d.%d", v / 1000, v % 1000 / 10);
}

int gk_cuda_probe(gk_cuda_info *info, gk_err *err)
{
	gk_cuda_info i = {.state = GK_CUDA_FAILED};
	cudaRuntimeGetVersion(&i.runtime_version);
	int rc = -1;

	/*
	 * Ask the loader first: the runtime reports a missing driver with the
	 * same code as an old one, and people need to know which it is.
	 */
	void *so = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!so) {
		i.state = GK_CUDA_NO_DRIVER;
		gk_errf(err, "no usable GPU: cannot load the CUDA driver 'libcuda.so.1' "
			"(is the NVIDIA driver installed?)");
		goto out;
	}
	dlclose(so);
	cudaDriverGetVersion(&i.driver_version);
	char have[16], need[16];
	version_text(i.driver_version, have, sizeof have);
	version_text(i.runtime_version, need, sizeof need);
	if (!gk_cuda_driver_ok(i.driver_version, i.runtime_version)) {
		i.state = GK_CUDA_OLD_DRIVER;
		gk_errf(err, "no usable GPU: the NVIDIA driver supports CUDA %s, gpukit needs %d.0 "
			"or later (update the driver)", have, i.runtime_version / 1000);
		goto out;
	}
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e == cudaErrorInsufficientDriver) {
		i.state = GK_CUDA_OLD_DRIVER;
		gk_errf(err, "no usable GPU: the NVIDIA driver (CUDA %s) is too old for "
			"this runtime (CUDA %s): update the driver", have, need);
	} else if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		i.state = GK_CUDA_NO_DEVICE;
		gk_errf(err, "no usable GPU: the CUDA driver found no device%s%s%s",
			vis ? " (CUDA_VISIBLE_DEVICES='" : "", vis ? vis : "", vis ? "')" : "");
	} else if (e != cudaSuccess) {
		gk_errf(err, "no usable GPU: cudaGetDeviceCount: %s", cudaGetErrorString(e));
	} else {
		i.state = GK_CUDA_OK;
		i.devices = n;
		rc = 0;
	}
	/* A failed call leaves its error as the thread's last error: clear it. */
	cudaGetLastError();
out:
	if (info)
		*info = i;
	return rc;
}

int gk_cuda_describe(int dev, char *buf, size_t n, gk_err *err)
{
	struct cudaDeviceProp p;
	int drv = 0, rt = 0;
	char have[16], built[16];
	if (GK_CUDA_CHECK(cudaGetDeviceProperties(&p, dev), err) < 0)
		return -1;
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	version_text(drv, have, sizeof have);
	version_text(rt, built, sizeof built);
	p.name[sizeof(p.name) - 1] = '\0';
	snprintf(buf, n, "%s (sm_%d%d, %.1f GiB); driver for CUDA %s, runtime CUDA %s", p.name,
		 p.major, p.minor, (double)p.totalGlobalMem / (1 << 30), have, built);
	return 0;
}

int gk_cuda_device_count(const char **why)
{
	static const char *const reasons[] = {
		[GK_CUDA_NOT_BUILT] = "built without CUDA",
		[GK_CUDA_NO_DRIVER] = "no CUDA driver",
		[GK_CUDA_OLD_DRIVER] = "CUDA driver too old",
		[GK_CUDA_NO_DEVICE] = "no CUDA device",
		[GK_CUDA_FAILED] = "CUDA runtime error",
	};
	gk_cuda_info i;
	if (gk_cuda_probe(&i, NULL) == 0)
		return i.devices;
	if (why)
		*why = reasons[i.state];
	return 0;
}

/* ---- devices ---- */

int gk_cuda_set_device(int dev, gk_err *err)
{
	return GK_CUDA_CHECK(cudaSetDevice(dev), err);
}

int gk_cuda_pci_bus_id(int dev, char *buf, size_t len, gk_err *err)
{
	return GK_CUDA_CHECK(cudaDeviceGetPCIBusId(buf, (int)len, dev), err);
}

int gk_cuda_device_select(int want, int *dev, gk_err *err)
{
	gk_cuda_info i;
	if (gk_cuda_probe(&i, err) < 0)
		return -1;
	gk_rank_info ri = {0};
	if (want < 0 && gk_rank_discover(&ri, err) < 0)
		return -1;
	if (gk_cuda_device_pick(want, ri.local_rank, i.devices, dev, err) < 0)
		return -1;
	return gk_cuda_set_device(*dev, err);
}

/* ---- streams and events ---- */

int gk_cuda_stream_new(gk_cuda_stream *s, gk_err *err)
{
	*s = NULL;
	return GK_CUDA_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), err);
}

void gk_cuda_stream_free(gk_cuda_stream s)
{
	if (s)
		cudaStreamDestroy(s);
}

int gk_cuda_stream_sync(gk_cuda_stream s, gk_err *err)
{
	return GK_CUDA_CHECK(cudaStreamSynchronize(s), err);
}

int gk_cuda_stream_wait(gk_cuda_stream s, gk_cuda_event e, gk_err *err)
{
	return GK_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0), err);
}

int gk_cuda_event_new(gk_cuda_event *e, int timing, gk_err *err)
{
	*e = NULL;
	return GK_CUDA_CHECK(cudaEventCreateWithFlags(e, timing ? cudaEventDefault
								 : cudaEventDisableTiming), err);
}

void gk_cuda_event_free(gk_cuda_event e)
{
	if (e)
		cudaEventDestroy(e);
}

int gk_cuda_event_record(gk_cuda_event e, gk_cuda_stream s, gk_err *err)
{
	return GK_CUDA_CHECK(cudaEventRecord(e, s), err);
}

int gk_cuda_event_query(gk_cuda_event e, int *done, gk_err *err)
{
	cudaError_t r = cudaEventQuery(e);
	*done = r == cudaSuccess;
	if (r == cudaErrorNotReady) {
		/*
		 * "Not ready" is an answer, but the runtime keeps it as the
		 * thread's last error like any failure: left there, the next
		 * launch check (cudaGetLastError after a kernel, lib/nn's and
		 * lib/comm's) would report it as that kernel's failure. A
		 * waiter polling this (lib/comm's nccl waits) would make the
		 * first kernel after every wait fail.
		 */
		if (cudaPeekAtLastError() == cudaErrorNotReady)
			cudaGetLastError();
		return 0;
	}
	return GK_CUDA_CHECK(r, err);
}

int gk_cuda_event_sync(gk_cuda_event e, gk_err *err)
{
	return GK_CUDA_CHECK(cudaEventSynchronize(e), err);
}

int gk_cuda_event_elapsed(gk_cuda_event start, gk_cuda_event end, float *ms,
			  gk_err *err)
{
	return GK_CUDA_CHECK(cudaEventElapsedTime(ms, start, end), err);
}

/* ---- memory ---- */

void *gk_cuda_alloc(size_t bytes, gk_cuda_mem_kind kind, gk_err *err)
{
	void *p = NULL;
	if ((unsigned)kind >= GK_CUDA_MEM_KINDS) {
		gk_errf(err, "device memory of kind %d: no such kind", (int)kind);
		return NULL;
	}
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		char sz[32];
		cudaGetLastError();
		gk_errf(err, "device memory for '%s' (%s): %s", gk_cuda_mem_kind_name(kind),
			gk_format_size(bytes, 0, sz, sizeof sz), cudaGetErrorString(e));
		return NULL;
	}
	if (gk_cuda_account_record(p, bytes, kind, err) < 0) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

int gk_cuda_mem_info(uint64_t *free_bytes, uint64_t *total, gk_err *err)
{
	size_t f = 0, t = 0;
	if (GK_CUDA_CHECK(cudaMemGetInfo(&f, &t), err) < 0)
		return -1;
	*free_bytes = f;
	*total = t;
	return 0;
}

void gk_cuda_free(void *p)
{
	if (!p)
		return;
	gk_cuda_account_forget(p);
	cudaFree(p);
}

/* Pinned blocks carry their size in front, for the accounting. */
#define PIN_HDR 64

void *gk_cuda_host_alloc(size_t bytes, gk_err *err)
{
	void *p = NULL;
	if (bytes > SIZE_MAX - PIN_HDR) {
		gk_errf(err, "pinned host memory of %zu bytes: too large", bytes);
		return NULL;
	}
	cudaError_t e = cudaMallocHost(&p, bytes + PIN_HDR);
	if (e != cudaSuccess) {
		char sz[32];
		cudaGetLastError();
		gk_errf(err, "pinned host memory (%s): %s",
			gk_format_size(bytes, 0, sz, sizeof sz), cudaGetErrorString(e));
		return NULL;
	}
	memcpy(p, &bytes, sizeof bytes);
	gk_cuda_account_pinned((int64_t)bytes);
	return (char *)p + PIN_HDR;
}

void gk_cuda_host_free(void *p)
{
	if (!p)
		return;
	size_t bytes;
	char *base = (char *)p - PIN_HDR;
	memcpy(&bytes, base, sizeof bytes);
	gk_cuda_account_pinned(-(int64_t)bytes);
	cudaFreeHost(base);
}

int gk_cuda_copy(void *dst, const void *src, size_t bytes, gk_cuda_stream s,
		 gk_err *err)
{
	if (bytes == 0)
		return 0;
	if (GK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), err) < 0)
		return -1;
	/*
	 * From pageable memory the call can return before the DMA has read
	 * the source; waiting for the stream is what makes src reusable.
	 */
	return gk_cuda_stream_sync(s, err);
}
