/*
 * cuda.h - the one home of libgpukit's device plumbing (prefix gk_cuda_):
 * status checks, the "is there a usable GPU" probe, device choice,
 * streams and events, device memory with accounting, pinned host memory,
 * and kernel launch geometry.
 *
 * Every function exists in every build. Built without CUDA (no nvcc, or
 * CUDA=0), the probe says so and everything else fails with that message;
 * built with CUDA on a machine without a driver or a device, the probe
 * says which, and nothing crashes: the CUDA runtime is linked statically
 * and finds the driver (libcuda.so.1) only when first used. Nothing here
 * prints or exits; errors come back in a gk_err.
 *
 * Kernel math lives in __host__ __device__ functions (core/half.h,
 * comm/reduce.h) that the CPU path runs too, so tests check it without a
 * GPU; the launch geometry below is plain C for the same reason.
 *
 * Streams and events are the CUDA runtime's own handles under C names
 * (gk_cuda_stream is cudaStream_t, gk_cuda_event is cudaEvent_t), so C
 * code needs no CUDA header and CUDA code needs no casts. A NULL stream is
 * the legacy default stream.
 */
#ifndef GK_CUDA_H
#define GK_CUDA_H

#include "core/core.h"

typedef struct CUstream_st *gk_cuda_stream;
typedef struct CUevent_st *gk_cuda_event;

/* 1 when this build has CUDA code in it. */
int gk_cuda_built(void);

/* ---- status checks ----------------------------------------------------------- */

/*
 * Turn a status from one of the device APIs into a gk_err carrying the
 * call and where it was made, and return -1 (0 on success, err untouched):
 *
 *   if (GK_CUDA_CHECK(cudaStreamSynchronize(s), err) < 0) return -1;
 *   -> "lib/comm/comm_nccl.c:212: cudaStreamSynchronize: an illegal
 *       memory access was encountered"
 *
 * nccl-tests' CUDACHECK/NCCLCHECK, returning instead of exiting. The
 * statuses are cudaError_t, cublasStatus_t and ncclResult_t passed as
 * int; names come from tables here, so a cuBLAS or NCCL status can be
 * reported without loading those libraries.
 */
typedef enum gk_cuda_api {
	GK_CUDA_API_RUNTIME, /* cudaError_t, cudaSuccess == 0 */
	GK_CUDA_API_CUBLAS,  /* cublasStatus_t, CUBLAS_STATUS_SUCCESS == 0 */
	GK_CUDA_API_NCCL     /* ncclResult_t, ncclSuccess == 0 */
} gk_cuda_api;

int gk_cuda_check_at(gk_cuda_api api, int status, const char *call,
		     const char *file, int line, gk_err *err);
/* The status as text: "out of memory", "CUBLAS_STATUS_NOT_SUPPORTED", ... */
const char *gk_cuda_status_string(gk_cuda_api api, int status);

#define GK_CUDA_CHECK(call, err) \
	gk_cuda_check_at(GK_CUDA_API_RUNTIME, (int)(call), #call, __FILE__, __LINE__, (err))
#define GK_CUBLAS_CHECK(call, err) \
	gk_cuda_check_at(GK_CUDA_API_CUBLAS, (int)(call), #call, __FILE__, __LINE__, (err))
#define GK_NCCL_CHECK(call, err) \
	gk_cuda_check_at(GK_CUDA_API_NCCL, (int)(call), #call, __FILE__, __LINE__, (err))

/* ---- is there a usable GPU ----------------------------------------------------- */

typedef enum gk_cuda_state {
	GK_CUDA_OK,         /* at least one device is usable */
	GK_CUDA_NOT_BUILT,  /* built without CUDA */
	GK_CUDA_NO_DRIVER,  /* libcuda.so.1 cannot be loaded */
	GK_CUDA_OLD_DRIVER, /* the driver is older than the runtime needs */
	GK_CUDA_NO_DEVICE,  /* a driver, but no device (or none visible) */
	GK_CUDA_FAILED      /* anything else the runtime reports */
} gk_cuda_state;

typedef struct gk_cuda_info {
	gk_cuda_state state;
	int devices;         /* usable devices (0 unless state is GK_CUDA_OK) */
	int driver_version;  /* CUDA version the driver supports, 13000 = 13.0; 0 unknown */
	int runtime_version; /* version of the runtime built in; 0 without CUDA */
} gk_cuda_info;

/*
 * Find out whether this process can use a GPU. Returns 0 when it can
 * (info->devices > 0), else -1 with the reason in err, written for the
 * person at the terminal:
 *   "no usable GPU: gpukit was built without CUDA"
 *   "no usable GPU: cannot load the CUDA driver 'libcuda.so.1' (is the
 *    NVIDIA driver installed?)"
 *   "no usable GPU: the NVIDIA driver supports CUDA 12.4, gpukit needs
 *    13.0 or later (update the driver)"
 *   "no usable GPU: the CUDA driver found no device (CUDA_VISIBLE_DEVICES='')"
 * info (may be NULL) gets the details either way. Cheap after the first
 * call (the runtime caches the driver), and safe from any thread.
 *
 * How a tool's --device option uses it (the message is the tool's to
 * print; the library never does):
 *   --device cuda  probe fails: exit 1 with "tool: no usable GPU: ..."
 *   --device auto  probe fails: "tool: no usable GPU: ...; training on the
 *                  CPU" (gpu-train) on stderr, then run on the CPU
 *   --device cpu   no probe
 * gk_cuda_device_resolve does exactly this choice.
 */
int gk_cuda_probe(gk_cuda_info *info, gk_err *err);

typedef enum gk_cuda_want {
	GK_CUDA_WANT_AUTO,
	GK_CUDA_WANT_CPU,
	GK_CUDA_WANT_CUDA
} gk_cuda_want;

/* "auto" "cpu" "cuda" (also "gpu"); -1 when unknown. */
int gk_cuda_want_parse(const char *s);

/*
 * Resolve a --device choice: 1 run on the GPU, 0 run on the CPU, -1 when
 * CUDA was demanded and cannot be had (err says why). When auto falls
 * back to the CPU, *note (if not NULL) is set to 1 and err holds the
 * reason, for the tool to print as a warning.
 */
int gk_cuda_device_resolve(gk_cuda_want want, int *note, gk_err *err);

/*
 * 1 when driver_version (cudaDriverGetVersion's 1000*major + 10*minor)
 * can run a runtime of runtime_version: same or newer major version
 * (CUDA's minor version compatibility covers the minor). For tests.
 */
int gk_cuda_driver_ok(int driver_version, int runtime_version);

/*
 * Device dev as a start line names it, with the versions that decide
 * what runs on it: "NVIDIA H200 (sm_90, 139.8 GiB); driver for CUDA 13.0,
 * runtime CUDA 13.0". -1 when the device cannot be asked (err says why).
 */
int gk_cuda_describe(int dev, char *buf, size_t n, gk_err *err);

/* Number of usable devices: 0 (why, if not NULL, gets a short reason). */
int gk_cuda_device_count(const char **why);

/* ---- devices ------------------------------------------------------------------ */

/*
 * The device for this process: want >= 0 picks that device; want < 0 the
 * launcher's local rank modulo the number of devices (gk_rank_discover),
 * the usual one-GPU-per-rank mapping; under Slurm's --gpus-per-task, where
 * each task sees one device, every rank gets device 0.
 * gk_cuda_device_pick is the arithmetic (for tests); gk_cuda_device_select
 * probes, picks and makes the device current for the calling thread.
 */
int gk_cuda_device_pick(int want, int local_rank, int ndev, int *dev,
			gk_err *err);
int gk_cuda_device_select(int want, int *dev, gk_err *err);
/* Make dev current for the calling thread (CUDA keeps it per thread). */
int gk_cuda_set_device(int dev, gk_err *err);
/* Device dev's PCI bus id ("0000:3b:00.0", cudaDeviceGetPCIBusId), the
 * name NVML finds it by (CUDA's device numbers are not NVML's). */
int gk_cuda_pci_bus_id(int dev, char *buf, size_t len, gk_err *err);

/* ---- streams and events ---------------------------------------------------------- */

/*
 * A stream that does not synchronise with the legacy default stream
 * (cudaStreamNonBlocking), on the current device. Ordering with other
 * streams is the caller's, through events.
 */
int gk_cuda_stream_new(gk_cuda_stream *s, gk_err *err);
void gk_cuda_stream_free(gk_cuda_stream s);
int gk_cuda_stream_sync(gk_cuda_stream s, gk_err *err);
/* Work enqueued on s from now on waits for the event's last record. */
int gk_cuda_stream_wait(gk_cuda_stream s, gk_cuda_event e, gk_err *err);

/* timing 0: a synchronisation-only event (cheaper); 1: one that times. */
int gk_cuda_event_new(gk_cuda_event *e, int timing, gk_err *err);
void gk_cuda_event_free(gk_cuda_event e);
int gk_cuda_event_record(gk_cuda_event e, gk_cuda_stream s, gk_err *err);
/* *done = 1 when the work before the record has finished; not yet is no
 * error, and leaves none behind for a later launch check. */
int gk_cuda_event_query(gk_cuda_event e, int *done, gk_err *err);
int gk_cuda_event_sync(gk_cuda_event e, gk_err *err);
/* Milliseconds between two recorded timing events. */
int gk_cuda_event_elapsed(gk_cuda_event start, gk_cuda_event end, float *ms,
			  gk_err *err);

/* ---- memory ------------------------------------------------------------------------ */

/*
 * Device memory by what it holds, so a trainer's memory report (and the
 * check of mem-estimate against it) reads real allocations.
 */
typedef enum gk_cuda_mem_kind {
	GK_CUDA_MEM_PARAMS,
	GK_CUDA_MEM_GRADS,
	GK_CUDA_MEM_OPTIM,     /* optimizer states */
	GK_CUDA_MEM_ACTS,      /* activations */
	GK_CUDA_MEM_WORKSPACE, /* cuBLAS workspace, scratch */
	GK_CUDA_MEM_COMM,      /* communication buffers */
	GK_CUDA_MEM_KINDS
} gk_cuda_mem_kind;

/* "parameters" "gradients" "optimizer" "activations" "workspace" "comm" */
const char *gk_cuda_mem_kind_name(gk_cuda_mem_kind k);

/*
 * cudaMalloc on the current device, counted under kind. bytes 0 gives a
 * valid one-byte allocation (counted as 0). NULL with err on failure
 * ("device memory for 'gradients' (1.50 GiB): out of memory").
 */
void *gk_cuda_alloc(size_t bytes, gk_cuda_mem_kind kind, gk_err *err);
/* Free memory from gk_cuda_alloc (NULL is fine). */
void gk_cuda_free(void *p);
/* The current device's free and total bytes (cudaMemGetInfo), as the
 * driver sees them: other processes' allocations are not free. */
int gk_cuda_mem_info(uint64_t *free_bytes, uint64_t *total, gk_err *err);

/*
 * Page-locked host memory (cudaMallocHost): what asynchronous copies need
 * to overlap with compute. Counted separately from device memory.
 */
void *gk_cuda_host_alloc(size_t bytes, gk_err *err);
void gk_cuda_host_free(void *p);

typedef struct gk_cuda_mem_stats {
	uint64_t bytes[GK_CUDA_MEM_KINDS]; /* live, by kind */
	uint64_t peak[GK_CUDA_MEM_KINDS];  /* largest live, by kind */
	uint64_t total, peak_total;        /* all device kinds together */
	uint64_t host_pinned, host_pinned_peak;
	uint64_t allocs;                   /* live device allocations */
} gk_cuda_mem_stats;

/* A snapshot of the counters (process-wide, all devices). */
void gk_cuda_mem_stats_get(gk_cuda_mem_stats *out);
/* Restart the peaks at the live values (per phase reporting). */
void gk_cuda_mem_reset_peaks(void);

/*
 * Copy bytes between any two of host, pinned host and device memory
 * (unified addressing picks the direction) on stream s, then wait for the
 * stream: on return dst holds the data and src may be reused.
 */
int gk_cuda_copy(void *dst, const void *src, size_t bytes, gk_cuda_stream s,
		 gk_err *err);

/* ---- launch geometry ------------------------------------------------------------- */

/*
 * Kernels loop grid-stride (GK_CUDA_FOR_EACH in cuda/kernel.cuh: for (i =
 * blockIdx.x*blockDim.x + threadIdx.x; i < n; i += gridDim.x*blockDim.x),
 * with size_t i), so any n fits any grid: the grid is ceil(n/block)
 * capped at GK_CUDA_MAX_GRID blocks (enough to fill any current GPU many
 * times over), and at least one. Counts past 2^31 elements are fine: the index is 64-bit.
 */
#define GK_CUDA_BLOCK 256
#define GK_CUDA_MAX_GRID 65535u

static inline unsigned gk_cuda_grid(uint64_t n, unsigned block)
{
	uint64_t b = block ? (n + block - 1) / block : 1;
	if (b > GK_CUDA_MAX_GRID)
		b = GK_CUDA_MAX_GRID;
	return b ? (unsigned)b : 1;
}

/* Iterations of the grid-stride loop the busiest thread runs. */
static inline uint64_t gk_cuda_grid_iters(uint64_t n, unsigned grid,
					  unsigned block)
{
	uint64_t span = (uint64_t)grid * block;
	return span ? (n + span - 1) / span : 0;
}

/*
 * Convert n elements between F32, F16 and BF16 in device memory, on
 * stream s, with the same rounding as gk_convert (bit for bit: the same
 * core/half.h functions). Asynchronous; errors from the launch only.
 */
int gk_cuda_convert(void *dst, gk_dtype dst_dt, const void *src,
		    gk_dtype src_dt, size_t n, gk_cuda_stream s, gk_err *err);

#endif
