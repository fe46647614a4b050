/*
 * device_nocuda.c - lib/cuda in a build without CUDA: the probe says so,
 * everything else fails with the same message.
 */
#include "cuda/internal.h"

#define NOT_BUILT "no usable GPU: gpukit was built without CUDA"

int gk_cuda_built(void)
{
	return 0;
}

const char *gk_cuda_status_string(gk_cuda_api api, int status)
{
	switch (api) {
	case GK_CUDA_API_CUBLAS: return gk_cuda_cublas_name(status);
	case GK_CUDA_API_NCCL: return gk_cuda_nccl_name(status);
	default: return status ? "CUDA error (built without CUDA)" : "no error";
	}
}

int gk_cuda_check_at(gk_cuda_api api, int status, const char *call,
		     const char *file, int line, gk_err *err)
{
	if (status == 0)
		return 0;
	return gk_errf(err, "%s:%d: %s: %s", file, line, call,
		       gk_cuda_status_string(api, status));
}

int gk_cuda_probe(gk_cuda_info *info, gk_err *err)
{
	if (info)
		*info = (gk_cuda_info){.state = GK_CUDA_NOT_BUILT};
	return gk_errf(err, NOT_BUILT);
}

int gk_cuda_describe(int dev, char *buf, size_t n, gk_err *err)
{
	(void)dev;
	if (n)
		*buf = '\0';
	return gk_errf(err, NOT_BUILT);
}

int gk_cuda_device_count(const char **why)
{
	if (why)
		*why = "built without CUDA";
	return 0;
}

int gk_cuda_set_device(int dev, gk_err *err) { return gk_errf(err, NOT_BUILT); }
int gk_cuda_device_select(int want, int *dev, gk_err *err) { return gk_errf(err, NOT_BUILT); }
int gk_cuda_stream_new(gk_cuda_stream *s, gk_err *err)
{
	*s = NULL;
	return gk_errf(err, NOT_BUILT);
}
void gk_cuda_stream_free(gk_cuda_stream s) { (void)s; }
int gk_cuda_stream_sync(gk_cuda_stream s, gk_err *err) { return gk_errf(err, NOT_BUILT); }
int gk_cuda_stream_wait(gk_cuda_stream s, gk_cuda_event e, gk_err *err)
{
	return gk_errf(err, NOT_BUILT);
}
int gk_cuda_event_new(gk_cuda_event *e, int timing, gk_err *err)
{
	*e = NULL;
	return gk_errf(err, NOT_BUILT);
}
void gk_cuda_event_free(gk_cuda_event e) { (void)e; }
int gk_cuda_event_record(gk_cuda_event e, gk_cuda_stream s, gk_err *err)
{
	return gk_errf(err, NOT_BUILT);
}
int gk_cuda_event_query(gk_cuda_event e, int *done, gk_err *err)
{
	*done = 0;
	return gk_errf(err, NOT_BUILT);
}
int gk_cuda_event_sync(gk_cuda_event e, gk_err *err) { return gk_errf(err, NOT_BUILT); }
int gk_cuda_event_elapsed(gk_cuda_event start, gk_cuda_event end, float *ms,
			  gk_err *err)
{
	return gk_errf(err, NOT_BUILT);
}
void *gk_cuda_alloc(size_t bytes, gk_cuda_mem_kind kind, gk_err *err)
{
	gk_errf(err, NOT_BUILT);
	return NULL;
}
void gk_cuda_free(void *p) { (void)p; }
int gk_cuda_pci_bus_id(int dev, char *buf, size_t len, gk_err *err)
{
	(void)dev;
	if (len)
		buf[0] = '\0';
	return gk_errf(err, NOT_BUILT);
}
int gk_cuda_mem_info(uint64_t *free_bytes, uint64_t *total, gk_err *err)
{
	*free_bytes = *total = 0;
	return gk_errf(err, NOT_BUILT);
}
void *gk_cuda_host_alloc(size_t bytes, gk_err *err)
{
	gk_errf(err, NOT_BUILT);
	return NULL;
}
void gk_cuda_host_free(void *p) { (void)p; }
int gk_cuda_copy(void *dst, const void *src, size_t bytes, gk_cuda_stream s,
		 gk_err *err)
{
	return gk_errf(err, NOT_BUILT);
}
int gk_cuda_convert(void *dst, gk_dtype dst_dt, const void *src,
		    gk_dtype src_dt, size_t n, gk_cuda_stream s, gk_err *err)
{
	return gk_errf(err, NOT_BUILT);
}
