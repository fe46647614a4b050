/*
 * comm_nccl.c - the nccl backend: device-memory collectives through NCCL.
 *
 * libnccl.so.2 is opened with dlopen when a communicator opens, not linked,
 * so every gpukit binary starts on machines without NCCL (or without a
 * GPU); nccl.h supplies the types and prototypes at build time. The
 * communicator is bootstrapped the standard way: rank 0 makes an
 * ncclUniqueId and MPI broadcasts it (NCCL user guide, "Creating a
 * communicator with options" / examples with MPI).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>

#include "comm/internal.h"

typedef struct nccl_api {
	void *so;
	__typeof__(&ncclGetUniqueId) GetUniqueId;
	__typeof__(&ncclCommInitRank) CommInitRank;
	__typeof__(&ncclCommDestroy) CommDestroy;
	__typeof__(&ncclAllReduce) AllReduce;
	__typeof__(&ncclReduceScatter) ReduceScatter;
	__typeof__(&ncclAllGather) AllGather;
	__typeof__(&ncclBroadcast) Broadcast;
	__typeof__(&ncclGetErrorString) GetErrorString;
} nccl_api;

typedef struct nccl_state {
	nccl_api api;
	ncclComm_t comm;
	cudaStream_t stream;
	int device;
} nccl_state;

#define CUDA_TRY(call)                                                     \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		if (e_ != cudaSuccess)                                     \
			return gk_errf(err, "nccl: %s:%d: %s", __FILE__,   \
				       __LINE__, cudaGetErrorString(e_));  \
	} while (0)

#define NCCL_TRY(st, call)                                                 \
	do {                                                               \
		ncclResult_t r_ = (call);                                  \
		if (r_ != ncclSuccess)                                     \
			return gk_errf(err, "nccl: %s:%d: %s", __FILE__,   \
				       __LINE__,                           \
				       (st)->api.GetErrorString(r_));      \
	} while (0)

static int load(nccl_api *a, gk_err *err)
{
	a->so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!a->so)
		return gk_errf(err, "backend 'nccl': cannot load 'libnccl.so.2': %s",
			       dlerror());
#define SYM(name)                                                            \
	do {                                                                 \
		*(void **)&a->name = dlsym(a->so, "nccl" #name);             \
		if (!a->name) {                                              \
			dlclose(a->so);                                      \
			return gk_errf(err, "backend 'nccl': 'libnccl.so.2' lacks nccl" #name); \
		}                                                            \
	} while (0)
	SYM(GetUniqueId);
	SYM(CommInitRank);
	SYM(CommDestroy);
	SYM(AllReduce);
	SYM(ReduceScatter);
	SYM(AllGather);
	SYM(Broadcast);
	SYM(GetErrorString);
#undef SYM
	return 0;
}

int gk_comm_nccl_available(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		return 0;
	void *so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!so)
		return 0;
	dlclose(so);
	return 1;
}

int gk_comm_nccl_open(gk_comm *c, gk_err *err)
{
	int ndev = 0;
	cudaError_t ce = cudaGetDeviceCount(&ndev);
	if (ce != cudaSuccess || ndev == 0)
		return gk_errf(err, "backend 'nccl': no CUDA device (%s)",
			       ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
	nccl_state *st = calloc(1, sizeof *st);
	if (!st)
		return gk_errf(err, "nccl: out of memory");
	if (load(&st->api, err) < 0) {
		free(st);
		return -1;
	}
	int dev = c->cfg.device;
	if (dev < 0) {
		gk_rank_info ri;
		dev = gk_rank_discover(&ri, NULL) == 0 ? ri.local_rank % ndev : 0;
	}
	st->device = dev;
	c->nccl = st;
	ncclUniqueId id;
	if (c->rank == 0 && st->api.GetUniqueId(&id) != ncclSuccess) {
		gk_errf(err, "backend 'nccl': ncclGetUniqueId failed");
		goto fail;
	}
	if (gk_comm_mpi_bcast_bytes(c, &id, sizeof id, err) < 0)
		goto fail;
	if (cudaSetDevice(dev) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking) != cudaSuccess) {
		gk_errf(err, "backend 'nccl': cannot use CUDA device %d", dev);
		goto fail;
	}
	ncclResult_t r = st->api.CommInitRank(&st->comm, c->world, id, c->rank);
	if (r != ncclSuccess) {
		gk_errf(err, "backend 'nccl': ncclCommInitRank: %s",
			st->api.GetErrorString(r));
		goto fail;
	}
	return 0;
fail:
	if (st->stream)
		cudaStreamDestroy(st->stream);
	dlclose(st->api.so);
	free(st);
	c->nccl = NULL;
	return -1;
}

void gk_comm_nccl_close(gk_comm *c)
{
	nccl_state *st = c->nccl;
	if (!st)
		return;
	cudaStreamSynchronize(st->stream);
	st->api.CommDestroy(st->comm);
	cudaStreamDestroy(st->stream);
	dlclose(st->api.so);
	free(st);
	c->nccl = NULL;
}

static ncclDataType_t nccl_dt(gk_dtype dt)
{
	switch (dt) {
	case GK_DT_F64: return ncclFloat64;
	case GK_DT_F16: return ncclFloat16;
	case GK_DT_BF16: return ncclBfloat16;
	case GK_DT_I32: return ncclInt32;
	default: return ncclFloat32;
	}
}

static ncclRedOp_t nccl_op(gk_comm_op op)
{
	static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
	return ops[op];
}

int gk_comm_nccl_run(gk_comm *c, const gk_comm_call *k, void **event,
		     gk_err *err)
{
	nccl_state *st = c->nccl;
	CUDA_TRY(cudaSetDevice(st->device));
	switch (k->coll) {
	case GK_COMM_ALLREDUCE:
		NCCL_TRY(st, st->api.AllReduce(k->send, k->recv, k->count, nccl_dt(k->dt),
					       nccl_op(k->op), st->comm, st->stream));
		break;
	case GK_COMM_REDUCE_SCATTER:
		NCCL_TRY(st, st->api.ReduceScatter(k->send, k->recv, k->count,
						   nccl_dt(k->dt), nccl_op(k->op),
						   st->comm, st->stream));
		break;
	case GK_COMM_ALLGATHER:
		NCCL_TRY(st, st->api.AllGather(k->send, k->recv, k->count, nccl_dt(k->dt),
					       st->comm, st->stream));
		break;
	default:
		NCCL_TRY(st, st->api.Broadcast(k->send, k->recv, k->count, nccl_dt(k->dt),
					       k->root, st->comm, st->stream));
		break;
	}
	if (event) {
		cudaEvent_t ev;
		CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
		CUDA_TRY(cudaEventRecord(ev, st->stream));
		*event = ev;
	}
	return 0;
}

int gk_comm_nccl_sync(gk_comm *c, gk_err *err)
{
	nccl_state *st = c->nccl;
	CUDA_TRY(cudaStreamSynchronize(st->stream));
	return 0;
}

int gk_comm_nccl_event_query(gk_comm *c, void *event, int *done, gk_err *err)
{
	cudaError_t e = cudaEventQuery((cudaEvent_t)event);
	if (e == cudaErrorNotReady) {
		*done = 0;
		return 0;
	}
	CUDA_TRY(e);
	*done = 1;
	return 0;
}

int gk_comm_nccl_event_wait(gk_comm *c, void *event, gk_err *err)
{
	cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
	cudaEventDestroy((cudaEvent_t)event);
	CUDA_TRY(e);
	return 0;
}

void *gk_comm_nccl_alloc(gk_comm *c, size_t bytes, gk_err *err)
{
	nccl_state *st = c->nccl;
	void *p = NULL;
	cudaSetDevice(st->device);
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		gk_errf(err, "nccl: cudaMalloc of %zu bytes: %s", bytes,
			cudaGetErrorString(e));
		return NULL;
	}
	return p;
}

void gk_comm_nccl_free(gk_comm *c, void *p)
{
	(void)c;
	cudaFree(p);
}

int gk_comm_nccl_copy(gk_comm *c, void *dst, const void *src, size_t bytes,
		      int to_device, gk_err *err)
{
	(void)c;
	CUDA_TRY(cudaMemcpy(dst, src, bytes,
			    to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
	return 0;
}
