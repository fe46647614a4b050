/*
 * account.c - lib/cuda's host-side half, built with or without CUDA:
 * memory accounting by kind, status names, the --device choice and the
 * device-picking arithmetic.
 */
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "cuda/internal.h"
#include "mem/mem.h"

/* ---- memory accounting ---- */

typedef struct live {
	const void *p;
	uint64_t bytes;
	gk_cuda_mem_kind kind;
} live;

/*
 * Live allocations in an unordered array: a trainer holds tens of them
 * (one per tensor group and buffer), so a linear search on free is cheaper
 * than any index. The lock covers frees from a second thread.
 */
static struct {
	pthread_mutex_t mu;
	live *v;
	size_t n, cap;
	gk_cuda_mem_stats st;
} acct = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* the kinds are lib/mem's categories, less padding (no allocation is only that) */
static const gk_mem_cat kind_cat[GK_CUDA_MEM_KINDS] = {
	GK_MEM_PARAMETERS, GK_MEM_GRADIENTS, GK_MEM_OPTIMIZER, GK_MEM_ACTIVATIONS,
	GK_MEM_WORKSPACE, GK_MEM_COMM,
};

const char *gk_cuda_mem_kind_name(gk_cuda_mem_kind k)
{
	return (unsigned)k < GK_CUDA_MEM_KINDS ? gk_mem_cat_name(kind_cat[k]) : "?";
}

int gk_cuda_account_record(const void *p, uint64_t bytes, gk_cuda_mem_kind kind,
			   gk_err *err)
{
	if ((unsigned)kind >= GK_CUDA_MEM_KINDS)
		return gk_errf(err, "device memory of kind %d: no such kind", (int)kind);
	pthread_mutex_lock(&acct.mu);
	if (GK_GROW(acct.v, acct.cap, acct.n + 1, "device memory accounting", err) < 0) {
		pthread_mutex_unlock(&acct.mu);
		return -1;
	}
	acct.v[acct.n++] = (live){p, bytes, kind};
	gk_cuda_mem_stats *s = &acct.st;
	s->bytes[kind] += bytes;
	s->total += bytes;
	s->allocs++;
	if (s->bytes[kind] > s->peak[kind])
		s->peak[kind] = s->bytes[kind];
	if (s->total > s->peak_total)
		s->peak_total = s->total;
	pthread_mutex_unlock(&acct.mu);
	return 0;
}

int gk_cuda_account_forget(const void *p)
{
	int found = 0;
	pthread_mutex_lock(&acct.mu);
	for (size_t i = 0; i < acct.n; i++) {
		if (acct.v[i].p != p)
			continue;
		acct.st.bytes[acct.v[i].kind] -= acct.v[i].bytes;
		acct.st.total -= acct.v[i].bytes;
		acct.st.allocs--;
		acct.v[i] = acct.v[--acct.n];
		found = 1;
		break;
	}
	pthread_mutex_unlock(&acct.mu);
	return found;
}

void gk_cuda_account_pinned(int64_t delta)
{
	pthread_mutex_lock(&acct.mu);
	acct.st.host_pinned += (uint64_t)delta;
	if (acct.st.host_pinned > acct.st.host_pinned_peak)
		acct.st.host_pinned_peak = acct.st.host_pinned;
	pthread_mutex_unlock(&acct.mu);
}

void gk_cuda_mem_stats_get(gk_cuda_mem_stats *out)
{
	pthread_mutex_lock(&acct.mu);
	*out = acct.st;
	pthread_mutex_unlock(&acct.mu);
}

void gk_cuda_mem_reset_peaks(void)
{
	pthread_mutex_lock(&acct.mu);
	memcpy(acct.st.peak, acct.st.bytes, sizeof acct.st.peak);
	acct.st.peak_total = acct.st.total;
	acct.st.host_pinned_peak = acct.st.host_pinned;
	pthread_mutex_unlock(&acct.mu);
}

/* ---- status names ---- */

/* cublas_api.h, cublasStatus_t */
const char *gk_cuda_cublas_name(int status)
{
	switch (status) {
	case 0: return "CUBLAS_STATUS_SUCCESS";
	case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
	case 7: return "CUBLAS_STATUS_INVALID_VALUE";
	case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
	case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
	case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
	case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
	case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
	case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
	default: return "unknown cuBLAS status";
	}
}

/* nccl.h, ncclResult_t, with ncclGetErrorString's wording */
const char *gk_cuda_nccl_name(int status)
{
	switch (status) {
	case 0: return "no error";
	case 1: return "unhandled cuda error (ncclUnhandledCudaError)";
	case 2: return "unhandled system error (ncclSystemError)";
	case 3: return "internal error (ncclInternalError)";
	case 4: return "invalid argument (ncclInvalidArgument)";
	case 5: return "invalid usage (ncclInvalidUsage)";
	case 6: return "remote process exited or there was a network error (ncclRemoteError)";
	case 7: return "NCCL operation in progress (ncclInProgress)";
	default: return "unknown NCCL result";
	}
}

/* ---- choosing the device ---- */

int gk_cuda_want_parse(const char *s)
{
	if (strcasecmp(s, "auto") == 0)
		return GK_CUDA_WANT_AUTO;
	if (strcasecmp(s, "cpu") == 0)
		return GK_CUDA_WANT_CPU;
	if (strcasecmp(s, "cuda") == 0 || strcasecmp(s, "gpu") == 0)
		return GK_CUDA_WANT_CUDA;
	return -1;
}

int gk_cuda_device_resolve(gk_cuda_want want, int *note, gk_err *err)
{
	if (note)
		*note = 0;
	if (want == GK_CUDA_WANT_CPU)
		return 0;
	if (gk_cuda_probe(NULL, err) == 0)
		return 1;
	if (want == GK_CUDA_WANT_CUDA)
		return -1;
	if (note)
		*note = 1;
	return 0;
}

int gk_cuda_driver_ok(int driver_version, int runtime_version)
{
	return driver_version > 0 && driver_version / 1000 >= runtime_version / 1000;
}

int gk_cuda_device_pick(int want, int local_rank, int ndev, int *dev,
			gk_err *err)
{
	if (ndev <= 0)
		return gk_errf(err, "CUDA device: none to choose from");
	if (want >= 0) {
		if (want >= ndev)
			return gk_errf(err, "CUDA device %d: this process sees %d device%s (0 to %d)",
				       want, ndev, ndev == 1 ? "" : "s", ndev - 1);
		*dev = want;
		return 0;
	}
	*dev = (local_rank > 0 ? local_rank : 0) % ndev;
	return 0;
}
