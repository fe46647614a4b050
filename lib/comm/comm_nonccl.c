/*
 * comm_nonccl.c - the nccl backend in a build without NCCL (no nvcc, or
 * no nccl.h at build time): it says so.
 */
#include "comm/internal.h"

static int nonccl(gk_err *err)
{
	return gk_errf(err, "backend 'nccl': gpukit was built without %s",
		       GK_HAVE_CUDA ? "NCCL (nccl.h not found under NCCL_HOME)" : "CUDA and NCCL");
}

int gk_comm_nccl_available(void) { return 0; }
int gk_comm_nccl_native_avg(void) { return 0; }
int gk_comm_nccl_versions(int *headers, int *library)
{
	*headers = *library = 0;
	return -1;
}
int gk_comm_nccl_open(gk_comm *c, gk_err *err) { return nonccl(err); }
void gk_comm_nccl_close(gk_comm *c) { (void)c; }
int gk_comm_nccl_run(gk_comm *c, const gk_comm_call *k, void **event,
		     gk_err *err)
{
	return nonccl(err);
}
int gk_comm_nccl_pair(gk_comm *c, const gk_comm_call *s, const gk_comm_call *r, void **sev,
		      void **rev, gk_err *err)
{
	return nonccl(err);
}
int gk_comm_nccl_sync(gk_comm *c, gk_err *err) { return nonccl(err); }
int gk_comm_nccl_event_query(gk_comm *c, void *event, int *done, gk_err *err)
{
	return nonccl(err);
}
int gk_comm_nccl_event_wait(gk_comm *c, void *event, gk_err *err)
{
	return nonccl(err);
}
int gk_comm_nccl_event_order(gk_comm *c, void *event, gk_err *err)
{
	return nonccl(err);
}
int gk_comm_nccl_accum(gk_comm *c, float *dst, const float *src, size_t n, int add,
		       gk_err *err)
{
	return nonccl(err);
}
int gk_comm_nccl_zero(gk_comm *c, void *buf, size_t bytes, gk_err *err) { return nonccl(err); }
int gk_comm_nccl_avg(gk_comm *c, float *buf, size_t n, gk_err *err) { return nonccl(err); }
int gk_comm_nccl_fence(gk_comm *c, gk_err *err) { return nonccl(err); }
void gk_comm_nccl_own_on_user(gk_comm *c, int on) { (void)c, (void)on; }
void *gk_comm_nccl_alloc(gk_comm *c, size_t bytes, gk_err *err)
{
	nonccl(err);
	return NULL;
}
void gk_comm_nccl_free(gk_comm *c, void *p) { (void)c, (void)p; }
int gk_comm_nccl_copy(gk_comm *c, void *dst, const void *src, size_t bytes,
		      int to_device, gk_err *err)
{
	return nonccl(err);
}
/* Only the nccl backend has device state to finalize or a stream to use. */
int gk_comm_finalize(gk_comm *c, gk_err *err) { return 0; }
int gk_comm_set_stream(gk_comm *c, void *stream, gk_err *err) { return 0; }
