/*
 * nccl.cc - a fake NCCL of one rank for the CUDA emulation: the calls
 * lib/comm's nccl backend makes, with their arguments checked (device
 * buffers of the right extent, known types and ops, a root and peers
 * that exist, send/recv to oneself only inside a group) and their work
 * queued on the caller's stream as copies. A non-blocking communicator
 * (config.blocking = 0) answers ncclInProgress to a few polls after its
 * creation, as a real one may. More than one rank is refused with
 * ncclInvalidUsage: a world of processes needs a real NCCL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include <nccl.h>

#include "internal.h"

struct ncclComm {
	int pending_polls; /* ncclInProgress answers left after the init */
	int blocking;
	int aborted;
};

namespace {

thread_local int group_depth;
struct p2p {
	int send;
	const void *sbuf;
	void *rbuf;
	size_t bytes;
	cudaStream_t s;
};
thread_local std::vector<p2p> group_ops;
thread_local char last_error[256];

size_t type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	default: return 0;
	}
}

ncclResult_t bad(const char *what)
{
	snprintf(last_error, sizeof last_error, "cuemu NCCL: %s", what);
	fprintf(stderr, "cuemu: NCCL: %s\n", what);
	return ncclInvalidArgument;
}

ncclResult_t usable(ncclComm_t c)
{
	if (!c)
		return bad("a NULL communicator");
	if (c->aborted)
		return bad("a call on an aborted communicator");
	if (c->pending_polls > 0)
		return bad("a collective before the non-blocking init has completed");
	return ncclSuccess;
}

/* A copy of n elements of t from send to recv on s (in place: nothing). */
ncclResult_t copy(ncclComm_t c, const void *send, void *recv, size_t n, ncclDataType_t t,
		  cudaStream_t s, const char *what)
{
	ncclResult_t r = usable(c);
	if (r != ncclSuccess)
		return r;
	size_t es = type_size(t);
	if (!es)
		return bad("an unknown data type");
	if (n == 0)
		return ncclSuccess;
	if (!cuemu::device_range(send, n * es) || !cuemu::device_range(recv, n * es)) {
		char m[160];
		snprintf(m, sizeof m, "%s: buffers %p -> %p of %zu bytes are not inside device "
			 "allocations", what, send, recv, n * es);
		return bad(m);
	}
	/* queued even in place: it reads and writes the buffers */
	size_t b = n * es;
	std::vector<cuemu::access> acc = {{(uintptr_t)send, (uintptr_t)send + b, 0},
					  {(uintptr_t)recv, (uintptr_t)recv + b, 1}};
	if (cuemu::enqueue(s, [=]() {
		    if (send != recv)
			    memmove(recv, send, b);
	    }, what, acc) != cudaSuccess)
		return ncclUnhandledCudaError;
	return ncclSuccess;
}

ncclResult_t op_ok(ncclRedOp_t op)
{
	return op >= ncclSum && op <= ncclAvg ? ncclSuccess : bad("an unknown reduction");
}

} /* namespace */

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error";
	case ncclSystemError: return "unhandled system error";
	case ncclInternalError: return "internal error";
	case ncclInvalidArgument: return "invalid argument";
	case ncclInvalidUsage: return "invalid usage";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

const char *ncclGetLastError(ncclComm_t)
{
	return last_error;
}

ncclResult_t ncclGetVersion(int *v)
{
	*v = NCCL_VERSION_CODE;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof *id);
	memcpy(id->internal, "cuemu", 5);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
				    ncclConfig_t *config)
{
	*out = NULL;
	if (memcmp(id.internal, "cuemu", 5) != 0)
		return bad("ncclCommInitRankConfig: an id not from ncclGetUniqueId");
	if (nranks != 1 || rank != 0) {
		snprintf(last_error, sizeof last_error,
			 "cuemu NCCL has one rank; rank %d of %d needs a real NCCL", rank, nranks);
		return ncclInvalidUsage;
	}
	ncclComm *c = new ncclComm();
	c->blocking = !config || config->blocking != 0;
	c->pending_polls = c->blocking ? 0 : 3;
	*out = c;
	return c->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
	return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
	if (!c)
		return bad("ncclCommGetAsyncError: a NULL communicator");
	if (c->pending_polls > 0) {
		c->pending_polls--;
		*r = ncclInProgress;
	} else {
		*r = ncclSuccess;
	}
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
	ncclResult_t r = usable(c);
	if (r != ncclSuccess)
		return r;
	if (group_depth)
		return bad("ncclCommFinalize inside a group");
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	if (!c)
		return bad("ncclCommDestroy: a NULL communicator");
	delete c;
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
	if (!c)
		return bad("ncclCommAbort: a NULL communicator");
	/* the handle is gone after an abort, as after a destroy */
	delete c;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			   ncclComm_t c, cudaStream_t st)
{
	ncclResult_t e = op_ok(op);
	return e != ncclSuccess ? e : copy(c, s, r, n, t, st, "ncclAllReduce");
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
	ncclResult_t e = op_ok(op);
	return e != ncclSuccess ? e : copy(c, s, r, n, t, st, "ncclReduceScatter");
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
			   cudaStream_t st)
{
	return copy(c, s, r, n, t, st, "ncclAllGather");
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			   ncclComm_t c, cudaStream_t st)
{
	if (root != 0)
		return bad("ncclBroadcast: a root that is not a rank");
	return copy(c, s, r, n, t, st, "ncclBroadcast");
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			int root, ncclComm_t c, cudaStream_t st)
{
	if (root != 0)
		return bad("ncclReduce: a root that is not a rank");
	ncclResult_t e = op_ok(op);
	return e != ncclSuccess ? e : copy(c, s, r, n, t, st, "ncclReduce");
}

ncclResult_t ncclSend(const void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	ncclResult_t e = usable(c);
	if (e != ncclSuccess)
		return e;
	if (peer != 0)
		return bad("ncclSend: a peer that is not a rank");
	if (!group_depth)
		return bad("ncclSend to oneself outside a group: it would never complete");
	group_ops.push_back({1, buf, NULL, n * type_size(t), st});
	return ncclSuccess;
}

ncclResult_t ncclRecv(void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	ncclResult_t e = usable(c);
	if (e != ncclSuccess)
		return e;
	if (peer != 0)
		return bad("ncclRecv: a peer that is not a rank");
	if (!group_depth)
		return bad("ncclRecv from oneself outside a group: it would never complete");
	group_ops.push_back({0, NULL, buf, n * type_size(t), st});
	return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (group_depth == 0)
		return bad("ncclGroupEnd without ncclGroupStart");
	if (--group_depth)
		return ncclSuccess;
	/* the k-th send to oneself meets the k-th receive */
	std::vector<p2p> sends, recvs;
	for (const p2p &o : group_ops)
		(o.send ? sends : recvs).push_back(o);
	group_ops.clear();
	if (sends.size() != recvs.size())
		return bad("ncclGroupEnd: sends and receives to oneself do not pair up");
	for (size_t i = 0; i < sends.size(); i++) {
		if (sends[i].bytes != recvs[i].bytes || sends[i].s != recvs[i].s)
			return bad("ncclGroupEnd: a send and its receive differ in size or stream");
		if (sends[i].bytes && (!cuemu::device_range(sends[i].sbuf, sends[i].bytes) ||
				       !cuemu::device_range(recvs[i].rbuf, sends[i].bytes)))
			return bad("ncclGroupEnd: send/recv buffers are not device memory");
		if (sends[i].bytes &&
		    cudaMemcpyAsync(recvs[i].rbuf, sends[i].sbuf, sends[i].bytes,
				    cudaMemcpyDeviceToDevice, sends[i].s) != cudaSuccess)
			return ncclUnhandledCudaError;
	}
	return ncclSuccess;
}

} /* extern "C" */
