/*
 * comm_nccl.c - the nccl backend: device-memory collectives through NCCL.
 *
 * libnccl.so.2 is opened with dlopen when a communicator opens, not linked,
 * so every gpukit binary starts on machines without NCCL (or without a
 * GPU); nccl.h supplies the types and prototypes at build time. Devices,
 * streams, events and memory come from lib/cuda.
 *
 * The communicator is bootstrapped the standard way, rank 0 making an
 * ncclUniqueId that MPI broadcasts (NCCL user guide, "Creating a
 * communicator"), with two additions so that one rank's failure never
 * leaves the others waiting: the ranks agree on their setup (an
 * MPI_Allreduce of a status) before the broadcast and again after
 * ncclCommInitRankConfig, and the communicator is non-blocking
 * (config.blocking = 0) so that every wait polls ncclCommGetAsyncError,
 * times out, and can end in ncclCommAbort (NCCL user guide, "Fault
 * Tolerance" and "Non-blocking group operation").
 */
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlfcn.h>

#include "comm/internal.h"
#include "cuda/cuda.h"

typedef struct nccl_api {
	void *so;
	__typeof__(&ncclGetUniqueId) GetUniqueId;
	__typeof__(&ncclCommInitRankConfig) CommInitRankConfig;
	__typeof__(&ncclCommFinalize) CommFinalize;
	__typeof__(&ncclCommDestroy) CommDestroy;
	__typeof__(&ncclCommAbort) CommAbort;
	__typeof__(&ncclCommGetAsyncError) CommGetAsyncError;
	__typeof__(&ncclGetLastError) GetLastError;
	__typeof__(&ncclGetErrorString) GetErrorString;
	__typeof__(&ncclAllReduce) AllReduce;
	__typeof__(&ncclReduceScatter) ReduceScatter;
	__typeof__(&ncclAllGather) AllGather;
	__typeof__(&ncclBroadcast) Broadcast;
	__typeof__(&ncclReduce) Reduce;
	__typeof__(&ncclSend) Send;
	__typeof__(&ncclRecv) Recv;
	__typeof__(&ncclGroupStart) GroupStart;
	__typeof__(&ncclGroupEnd) GroupEnd;
} nccl_api;

typedef struct nccl_state {
	nccl_api api;
	ncclComm_t comm;     /* NULL until ncclCommInitRankConfig */
	gk_cuda_stream stream; /* NCCL's */
	gk_cuda_stream user;   /* the caller's: NULL, the legacy default */
	gk_cuda_event ready;   /* recorded on user before each collective */
	gk_cuda_event idle;    /* recorded on stream for blocking waits */
	gk_cuda_event fence;   /* recorded on stream for the caller's to wait on */
	int own_user;          /* gk_comm_nccl_own_on_user: own work on user */
	int device;
	double timeout;
	int broken;            /* aborted: every later call fails */
	void *wire;            /* compressed allreduce's wire buffers (device) */
	size_t wire_cap;
	void *work;            /* compressed reduce-scatter out of place (device) */
	size_t work_cap;
	char last[96];         /* the last collective, for messages */
} nccl_state;

/* A request's handle (comm.c keeps it as the opaque req->event). */
typedef struct nccl_pending {
	gk_cuda_event ev;
	char what[96];
} nccl_pending;

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
			a->so = NULL;                                        \
			return gk_errf(err, "backend 'nccl': 'libnccl.so.2' lacks nccl" #name \
				       " (NCCL 2.14 or later is needed)");   \
		}                                                            \
	} while (0)
	SYM(GetUniqueId);
	SYM(CommInitRankConfig);
	SYM(CommFinalize);
	SYM(CommDestroy);
	SYM(CommAbort);
	SYM(CommGetAsyncError);
	SYM(GetLastError);
	SYM(GetErrorString);
	SYM(AllReduce);
	SYM(ReduceScatter);
	SYM(AllGather);
	SYM(Broadcast);
	SYM(Reduce);
	SYM(Send);
	SYM(Recv);
	SYM(GroupStart);
	SYM(GroupEnd);
#undef SYM
	return 0;
}

int gk_comm_nccl_versions(int *headers, int *library)
{
	*headers = NCCL_VERSION_CODE;
	*library = 0;
	void *so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!so)
		return -1;
	__typeof__(&ncclGetVersion) get;
	*(void **)&get = dlsym(so, "ncclGetVersion");
	if (!get || get(library) != ncclSuccess)
		*library = 0;
	dlclose(so);
	return *library ? 0 : -1;
}

int gk_comm_nccl_available(void)
{
	if (gk_cuda_probe(NULL, NULL) < 0)
		return 0;
	void *so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!so)
		return 0;
	dlclose(so);
	return 1;
}

/* ---- failures, polling and timeouts ---- */

/*
 * A failed NCCL call or an asynchronous error: the communicator cannot be
 * trusted any more (NCCL's guide: abort it), and the other ranks must not
 * be left waiting on it, which ncclCommAbort also sees to.
 */
static int fail(nccl_state *st, ncclResult_t r, const char *what, gk_err *err)
{
	const char *detail = st->comm ? st->api.GetLastError(st->comm) : NULL;
	gk_errf(err, "nccl: %s: %s%s%s", what, st->api.GetErrorString(r),
		detail && *detail ? ": " : "", detail ? detail : "");
	if (st->comm && !st->broken)
		st->api.CommAbort(st->comm);
	st->broken = 1;
	return -1;
}

static int timed_out(nccl_state *st, const char *what, gk_err *err)
{
	gk_errf(err, "nccl: %s: not finished after %.0f s (a rank may have failed or "
		"stopped); communicator aborted", what, st->timeout);
	if (st->comm && !st->broken)
		st->api.CommAbort(st->comm);
	st->broken = 1;
	return -1;
}

/* Spin briefly (collectives take microseconds), then sleep in 100 us steps. */
static void backoff(double t0)
{
	if (gk_now() - t0 < 1e-3) {
		sched_yield();
	} else {
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
}

/* Poll a non-blocking NCCL call that returned ncclInProgress to its end. */
static int settle(nccl_state *st, ncclResult_t r, const char *what, gk_err *err)
{
	double t0 = gk_now();
	while (r == ncclInProgress) {
		if (st->api.CommGetAsyncError(st->comm, &r) != ncclSuccess)
			r = ncclInternalError;
		if (r != ncclInProgress)
			break;
		if (gk_now() - t0 > st->timeout)
			return timed_out(st, what, err);
		backoff(t0);
	}
	return r == ncclSuccess ? 0 : fail(st, r, what, err);
}

/* Wait for an event on NCCL's stream, watching NCCL's error state. */
static int wait_event(nccl_state *st, gk_cuda_event ev, const char *what,
		      gk_err *err)
{
	double t0 = gk_now();
	for (;;) {
		int done = 0;
		if (gk_cuda_event_query(ev, &done, err) < 0) {
			gk_err_prefix(err, "nccl: %s", what);
			if (!st->broken)
				st->api.CommAbort(st->comm);
			st->broken = 1;
			return -1;
		}
		if (done)
			return 0;
		ncclResult_t a = ncclSuccess;
		if (st->api.CommGetAsyncError(st->comm, &a) != ncclSuccess)
			a = ncclInternalError;
		if (a != ncclSuccess && a != ncclInProgress)
			return fail(st, a, what, err);
		if (gk_now() - t0 > st->timeout)
			return timed_out(st, what, err);
		backoff(t0);
	}
}

static int usable(nccl_state *st, gk_err *err)
{
	if (!st)
		return gk_errf(err, "nccl: the communicator is finalized");
	if (st->broken)
		return gk_errf(err, "nccl: the communicator was aborted after an earlier failure");
	return 0;
}

/* ---- open and close ---- */

/*
 * Everything a rank can get wrong on its own (no GPU, no libnccl, a bad
 * device number), before any rank waits on another.
 */
static int setup(gk_comm *c, nccl_state *st, ncclUniqueId *id, gk_err *err)
{
	if (gk_cuda_device_select(c->cfg.device, &st->device, err) < 0)
		return gk_err_prefix(err, "backend 'nccl'");
	if (load(&st->api, err) < 0)
		return -1;
	if (gk_cuda_stream_new(&st->stream, err) < 0 ||
	    gk_cuda_event_new(&st->ready, 0, err) < 0 ||
	    gk_cuda_event_new(&st->idle, 0, err) < 0 ||
	    gk_cuda_event_new(&st->fence, 0, err) < 0)
		return gk_err_prefix(err, "backend 'nccl': CUDA device %d", st->device);
	if (c->rank == 0) {
		ncclResult_t r = st->api.GetUniqueId(id);
		if (r != ncclSuccess)
			return gk_errf(err, "backend 'nccl': ncclGetUniqueId: %s",
				       st->api.GetErrorString(r));
	}
	return 0;
}

/*
 * All ranks say whether they are ready; when one is not, every rank fails
 * (the failing ones with their own message) instead of the others waiting
 * for it forever.
 */
static int agree(gk_comm *c, int ok, const char *stage, gk_err *err)
{
	gk_err merr = {0};
	double v = ok ? c->world : c->rank;
	if (gk_comm_mpi_host_allreduce_f64(c, &v, 1, GK_COMM_MIN, &merr) < 0) {
		if (ok && err)
			*err = merr;
		return -1;
	}
	if (v >= c->world)
		return 0;
	if (ok)
		gk_errf(err, "backend 'nccl': rank %d failed %s (its own message says why)",
			(int)v, stage);
	return -1;
}

/*
 * The kernels this backend queues behind its collectives (AVG's division,
 * ZeRO-2's sum into a shard) launched once now, while nothing is in
 * flight: a kernel's first launch loads its module, which under CUDA's
 * lazy loading (the default since CUDA 12.2) may synchronize the context
 * (the programming guide's "Lazy Loading", and the emulation does), so a
 * first launch behind a collective that never completes (a peer that
 * stopped) could block the host inside the launch, where no watchdog
 * sees it.
 */
static int preload(nccl_state *st, gk_err *err)
{
	float *x = gk_cuda_alloc(sizeof(float), GK_CUDA_MEM_COMM, err);
	int rc = x && GK_CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float), st->stream), err) == 0 &&
		 gk_comm_cuda_avg(x, 1, GK_DT_F32, 2, st->stream, err) == 0 &&
		 gk_comm_cuda_reduce(x, x, 1, GK_DT_F32, GK_COMM_SUM, st->stream, err) == 0 &&
		 gk_cuda_event_record(st->idle, st->stream, err) == 0 &&
		 wait_event(st, st->idle, "loading the communication kernels", err) == 0 ? 0 : -1;
	gk_cuda_free(x);
	return rc;
}

int gk_comm_nccl_open(gk_comm *c, gk_err *err)
{
	nccl_state *st = calloc(1, sizeof *st);
	if (!st)
		return gk_errf(err, "nccl: out of memory");
	/* A negative timeout turns the watchdog off: never give up waiting. */
	st->timeout = c->cfg.timeout > 0 ? c->cfg.timeout :
		      c->cfg.timeout < 0 ? 1e300 : GK_COMM_DEFAULT_TIMEOUT;
	c->nccl = st;
	ncclUniqueId id;
	memset(&id, 0, sizeof id);

	int ok = setup(c, st, &id, err) == 0;
	if (agree(c, ok, "to set up its GPU and NCCL", err) < 0)
		goto fail;
	if (gk_comm_mpi_bcast_bytes(c, &id, sizeof id, err) < 0)
		goto fail;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	ncclResult_t r = st->api.CommInitRankConfig(&st->comm, c->world, id, c->rank,
						      &config);
	if (r != ncclSuccess && r != ncclInProgress)
		st->comm = NULL; /* nothing to poll or abort */
	ok = st->comm ? settle(st, r, "ncclCommInitRank", err) == 0
		      : fail(st, r, "ncclCommInitRank", err) == 0;
	if (ok && preload(st, err) < 0)
		ok = 0;
	if (agree(c, ok, "ncclCommInitRank", err) < 0)
		goto fail;
	return 0;
fail:
	if (st->comm && !st->broken)
		st->api.CommAbort(st->comm);
	gk_cuda_event_free(st->ready);
	gk_cuda_event_free(st->idle);
	gk_cuda_event_free(st->fence);
	gk_cuda_stream_free(st->stream);
	if (st->api.so)
		dlclose(st->api.so);
	free(st);
	c->nccl = NULL;
	return -1;
}

static int teardown(gk_comm *c, gk_err *err)
{
	nccl_state *st = c->nccl;
	int rc = 0;
	if (!st)
		return 0;
	if (st->broken) {
		rc = gk_errf(err, "nccl: the communicator was aborted after an earlier failure");
	} else {
		/* Finalize flushes what is in flight; it may take a while. */
		if (gk_cuda_set_device(st->device, err) < 0 ||
		    gk_cuda_event_record(st->idle, st->stream, err) < 0 ||
		    wait_event(st, st->idle, "finishing outstanding work", err) < 0 ||
		    settle(st, st->api.CommFinalize(st->comm), "ncclCommFinalize", err) < 0)
			rc = -1;
		if (rc < 0 && !st->broken) {
			st->api.CommAbort(st->comm);
			st->broken = 1;
		}
		if (!st->broken && st->api.CommDestroy(st->comm) != ncclSuccess)
			rc = gk_errf(err, "nccl: ncclCommDestroy failed");
	}
	gk_cuda_free(st->wire);
	gk_cuda_free(st->work);
	gk_cuda_event_free(st->ready);
	gk_cuda_event_free(st->idle);
	gk_cuda_event_free(st->fence);
	gk_cuda_stream_free(st->stream);
	dlclose(st->api.so);
	free(st);
	c->nccl = NULL;
	return rc;
}

void gk_comm_nccl_close(gk_comm *c)
{
	teardown(c, NULL);
}

int gk_comm_finalize(gk_comm *c, gk_err *err)
{
	if (c->backend != GK_COMM_BACKEND_NCCL)
		return 0;
	return teardown(c, err);
}

int gk_comm_set_stream(gk_comm *c, void *stream, gk_err *err)
{
	if (c->backend != GK_COMM_BACKEND_NCCL)
		return 0;
	nccl_state *st = c->nccl;
	if (usable(st, err) < 0)
		return -1;
	st->user = (gk_cuda_stream)stream;
	return 0;
}

/* ---- collectives ---- */

/* Block b of a count cut into n: the first count % n blocks one longer. */
static size_t blen(size_t count, int n, int b)
{
	return count / (size_t)n + ((size_t)b < count % (size_t)n);
}

static size_t boff(size_t count, int n, int b)
{
	size_t rem = count % (size_t)n;
	return (size_t)b * (count / (size_t)n) + ((size_t)b < rem ? (size_t)b : rem);
}

/* A device scratch buffer (*buf, *cap bytes) of at least bytes. */
static int room(nccl_state *st, void **buf, size_t *cap, size_t bytes, gk_err *err)
{
	if (bytes <= *cap)
		return 0;
	/* The old buffer may still be read by queued work: wait first. */
	if (*buf && (gk_cuda_event_record(st->idle, st->stream, err) < 0 ||
		     wait_event(st, st->idle, st->last, err) < 0))
		return -1;
	gk_cuda_free(*buf);
	*cap = 0;
	*buf = gk_cuda_alloc(bytes, GK_CUDA_MEM_COMM, err);
	if (!*buf)
		return -1;
	*cap = bytes;
	return 0;
}

/*
 * Compressed allreduce, the same ring as comm_mpi.c's with the packing
 * done by reduce.cu's kernels and the transfers by NCCL, all on NCCL's
 * stream (so each step's kernels and transfers run in order):
 * reduce-scatter in n-1 steps, each packing the partial sum of one block,
 * sending it right (ncclSend/ncclRecv in a group) and adding what came
 * from the left; then each rank packs its finished block once and an
 * allgather of the packed blocks (padded to the longest) lets every rank
 * unpack the same bytes. Each rank packs each block at most once, so the
 * error feedback residual holds exactly the error it introduced. Without
 * gather it stops after the reduce-scatter: block r of buf (the equal
 * blocks, or the caller's pieces displ) is rank r's sum, in f32, its own
 * part never packed. With pieces (gk_comm_ireduce_scatterv, ZeRO-2's
 * buckets) an element's sum takes the path it takes in the whole
 * buffer's ring, as on the host (comm_mpi.c says why), and a piece of
 * no elements goes on no wire, both ends knowing its length. The two
 * wire buffers of a reduce-scatter are the host's
 * (gk_comm_compress_scratch of the largest block), which callers account.
 */
static int ring_compressed(gk_comm *c, nccl_state *st, float *buf, size_t count,
			   const size_t *displ, gk_comm_compress cz, float *residual,
			   int gather, gk_err *err)
{
	int n = c->world, r = c->rank;
	cudaStream_t s = st->stream;
#define BO(i) (displ ? displ[i] : boff(count, n, i))
#define BL(i) (displ ? displ[(i) + 1] - displ[i] : blen(count, n, i))
	size_t most = 0;
	for (int i = 0; i < n; i++)
		most = BL(i) > most ? BL(i) : most;
	size_t half = gk_comm_compress_scratch(cz, most) / 2, wmax = gk_comm_wire_bytes(cz, most);
	if (n == 1)
		return 0;
	if (room(st, &st->wire, &st->wire_cap, 2 * half + (gather ? wmax * (size_t)n : 0),
		 err) < 0)
		return -1;
	/* the receive buffer at an even offset (bf16 and f16 are read as
	 * uint16_t), in the spare byte of the first half if need be */
	unsigned char *ws = st->wire, *wr = ws + (half & ~(size_t)1), *wall = ws + 2 * half;
	if (residual && gk_comm_cuda_absorb(buf, residual, count, s, err) < 0)
		return -1;
	for (int k = 0; k < n - 1; k++) {
		int sb = ((r - k - 1) % n + n) % n, rb = ((r - k - 2) % n + n) % n;
		size_t so = BO(sb), sn = BL(sb);
		size_t ro = BO(rb), rn = BL(rb);
		if (gk_comm_cuda_pack(ws, buf + so, sn, cz, residual ? residual + so : NULL,
				      s, err) < 0)
			return -1;
		ncclResult_t a = ncclSuccess, b = ncclSuccess, g = st->api.GroupStart();
		if (g == ncclSuccess) {
			if (sn)
				a = st->api.Send(ws, gk_comm_wire_bytes(cz, sn), ncclUint8,
						 (r + 1) % n, st->comm, s);
			if (rn)
				b = st->api.Recv(wr, gk_comm_wire_bytes(cz, rn), ncclUint8,
						 (r + n - 1) % n, st->comm, s);
			g = st->api.GroupEnd();
			if (g == ncclSuccess || g == ncclInProgress)
				g = a != ncclSuccess && a != ncclInProgress ? a
				  : b != ncclSuccess && b != ncclInProgress ? b : g;
		}
		if (settle(st, g, st->last, err) < 0 ||
		    gk_comm_cuda_unpack(buf + ro, wr, rn, cz, 1, s, err) < 0)
			return -1;
	}
#undef BO
#undef BL
	if (!gather)
		return 0;
	size_t mo = boff(count, n, r), mn = blen(count, n, r);
	unsigned char *mine = wall + (size_t)r * wmax;
	if (gk_comm_cuda_pack(mine, buf + mo, mn, cz, residual ? residual + mo : NULL,
			      s, err) < 0)
		return -1;
	if (settle(st, st->api.AllGather(mine, wall, wmax, ncclUint8, st->comm, s),
		   st->last, err) < 0)
		return -1;
	for (int b = 0; b < n; b++)
		if (gk_comm_cuda_unpack(buf + boff(count, n, b), wall + (size_t)b * wmax,
					blen(count, n, b), cz, 0, s, err) < 0)
			return -1;
	return 0;
}

/*
 * A compressed reduce-scatter: the ring's first half over the whole send
 * buffer, in place when the call is (recv is this rank's block of send,
 * whose other blocks are then left with partial sums, as NCCL leaves an
 * in-place send buffer undefined), else over a device copy; then this
 * rank's block into recv.
 */
static int compressed_rs(gk_comm *c, nccl_state *st, const gk_comm_call *k,
			 gk_err *err)
{
	size_t total = k->count * (size_t)c->world, bytes = k->count * sizeof(float);
	float *buf = (float *)(void *)k->send; /* in place: written, as NCCL may */
	if (buf + (size_t)c->rank * k->count != (float *)k->recv) {
		if (room(st, &st->work, &st->work_cap, total * sizeof(float), err) < 0 ||
		    GK_CUDA_CHECK(cudaMemcpyAsync(st->work, k->send, total * sizeof(float),
						  cudaMemcpyDeviceToDevice, st->stream), err) < 0)
			return -1;
		buf = st->work;
	}
	if (ring_compressed(c, st, buf, total, NULL, k->compress, k->residual, 0, err) < 0)
		return -1;
	float *mine = buf + (size_t)c->rank * k->count;
	if (mine != (float *)k->recv && bytes &&
	    GK_CUDA_CHECK(cudaMemcpyAsync(k->recv, mine, bytes, cudaMemcpyDeviceToDevice,
					  st->stream), err) < 0)
		return -1;
	return 0;
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

/*
 * AVG is NCCL's own ncclAvg where the headers have it (NCCL 2.10 and
 * later): no division pass behind the collective (comm.h says how it
 * rounds). Older headers: SUM, and the division follows as a kernel.
 * Compressed collectives sum in their own ring and divide after it.
 */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
#define NATIVE_AVG 1
#define AVG_OP ncclAvg
#else
#define NATIVE_AVG 0
#define AVG_OP ncclSum
#endif

int gk_comm_nccl_native_avg(void)
{
	return NATIVE_AVG;
}

static ncclRedOp_t nccl_op(gk_comm_op op)
{
	static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, AVG_OP};
	return ops[op];
}

/*
 * Unequal pieces, in place (gk_comm_ireduce_scatterv, gk_comm_iallgatherv:
 * ZeRO-2's gradient buckets, ZeRO-3's parameter units): one ncclReduce
 * (ncclBroadcast) rooted at each rank whose piece is not empty, over that
 * piece where it lies, all inside one ncclGroupStart/End, which NCCL
 * issues as one operation. NCCL's ncclReduceScatter and ncclAllGather take
 * equal counts, and the pieces are the owners' parts of a bucket of the
 * flat buffer, whose ownership is ZeRO-1's contiguous range per rank (so
 * moments and checkpoints are those of every stage, backend and world).
 * Making them equal instead, by padding each bucket to world equal pieces
 * as FSDP pads its flat parameters, would give every rank a slice of
 * every bucket: another ownership, tying the optimizer state and the
 * checkpoints to the bucket size. Padding each piece to the largest one
 * would keep the ownership but stage world times the largest piece (a
 * bucket inside one owner's range, the common case, sent world times).
 * A bucket spans one owner or two (three and more only when it is larger
 * than a range), so the group holds one or two calls; each moves its
 * piece once, as a reduce-scatter of the bucket would move it.
 * Compressed, a reduce-scatter of pieces is ring_compressed's instead.
 */
static int pieces(gk_comm *c, nccl_state *st, const gk_comm_call *k, gk_err *err)
{
	int reduce = k->coll == GK_COMM_REDUCE_SCATTER;
	char *buf = reduce ? (char *)(uintptr_t)k->send : (char *)k->recv;
	size_t esz = gk_comm_dt_size(k->dt);
	/* equal pieces (a bucket that spans every rank's whole range): NCCL's
	 * own collective, in place (recv is this rank's block of send) */
	size_t cnt = k->displ[1] - k->displ[0];
	int equal = k->displ[0] == 0 && cnt > 0;
	for (int q = 1; equal && q <= c->world; q++)
		equal = k->displ[q] - k->displ[q - 1] == cnt;
	if (equal) {
		void *mine = buf + (size_t)c->rank * cnt * esz;
		ncclResult_t r = reduce ? st->api.ReduceScatter(buf, mine, cnt, nccl_dt(k->dt),
								nccl_op(k->op), st->comm, st->stream)
					: st->api.AllGather(mine, buf, cnt, nccl_dt(k->dt), st->comm,
							    st->stream);
		return settle(st, r, st->last, err);
	}
	ncclResult_t bad = ncclSuccess, g = st->api.GroupStart();
	if (g != ncclSuccess)
		return fail(st, g, st->last, err);
	for (int q = 0; q < c->world; q++) {
		size_t n = k->displ[q + 1] - k->displ[q];
		void *p = buf + k->displ[q] * esz;
		if (n == 0)
			continue;
		ncclResult_t r = reduce ? st->api.Reduce(p, p, n, nccl_dt(k->dt), nccl_op(k->op),
							 q, st->comm, st->stream)
					: st->api.Broadcast(p, p, n, nccl_dt(k->dt), q, st->comm,
							    st->stream);
		if (r != ncclSuccess && r != ncclInProgress && bad == ncclSuccess)
			bad = r;
	}
	/* the group is closed whatever its calls said */
	g = st->api.GroupEnd();
	if (bad != ncclSuccess && (g == ncclSuccess || g == ncclInProgress))
		g = bad;
	return settle(st, g, st->last, err);
}

/* An event recorded on NCCL's stream after what it has, for a request. */
static int pending(nccl_state *st, void **event, gk_err *err)
{
	nccl_pending *p = calloc(1, sizeof *p);
	if (!p)
		return gk_errf(err, "nccl: out of memory");
	memcpy(p->what, st->last, sizeof p->what);
	if (gk_cuda_event_new(&p->ev, 0, err) < 0 ||
	    gk_cuda_event_record(p->ev, st->stream, err) < 0) {
		gk_cuda_event_free(p->ev);
		free(p);
		return -1;
	}
	*event = p;
	return 0;
}

int gk_comm_nccl_run(gk_comm *c, const gk_comm_call *k, void **event,
		     gk_err *err)
{
	nccl_state *st = c->nccl;
	if (usable(st, err) < 0)
		return -1;
	int reduces = k->coll == GK_COMM_ALLREDUCE || k->coll == GK_COMM_REDUCE_SCATTER ||
		      k->coll == GK_COMM_REDUCE;
	snprintf(st->last, sizeof st->last, "%s%s of %zu %s%s%s",
		 gk_comm_call_name(k->coll), k->displ ? "v" : "",
		 k->displ ? k->displ[c->world] : k->count, gk_dtype_name(k->dt),
		 reduces ? " " : "", reduces ? gk_comm_op_name(k->op) : "");
	if (gk_cuda_set_device(st->device, err) < 0)
		return -1;
	/* The stream contract: inputs are final once the caller's stream gets here. */
	if (gk_cuda_event_record(st->ready, st->user, err) < 0 ||
	    gk_cuda_stream_wait(st->stream, st->ready, err) < 0)
		return -1;
	ncclResult_t r = ncclSuccess;
	cudaStream_t s = st->stream;
	switch ((int)k->coll) {
	case GK_COMM_CALL_SEND: /* p2p.c: the peer in root */
		r = st->api.Send(k->send, k->count, nccl_dt(k->dt), k->root, st->comm, s);
		break;
	case GK_COMM_CALL_RECV:
		r = st->api.Recv(k->recv, k->count, nccl_dt(k->dt), k->root, st->comm, s);
		break;
	case GK_COMM_ALLREDUCE:
		if (k->compress != GK_COMM_COMPRESS_NONE) {
			size_t bytes = k->count * sizeof(float);
			if (k->send != k->recv && bytes &&
			    GK_CUDA_CHECK(cudaMemcpyAsync(k->recv, k->send, bytes,
							  cudaMemcpyDeviceToDevice, s), err) < 0)
				return -1;
			if (ring_compressed(c, st, k->recv, k->count, NULL, k->compress,
					    k->residual, 1, err) < 0)
				return -1;
			break;
		}
		r = st->api.AllReduce(k->send, k->recv, k->count, nccl_dt(k->dt),
				      nccl_op(k->op), st->comm, s);
		break;
	case GK_COMM_REDUCE_SCATTER:
		if (k->displ && k->compress != GK_COMM_COMPRESS_NONE) {
			if (ring_compressed(c, st, (float *)(uintptr_t)k->send, k->displ[c->world],
					    k->displ, k->compress, k->residual, 0, err) < 0)
				return -1;
			break;
		}
		if (k->displ) {
			if (pieces(c, st, k, err) < 0)
				return -1;
			break;
		}
		if (k->compress != GK_COMM_COMPRESS_NONE) {
			if (compressed_rs(c, st, k, err) < 0)
				return -1;
			break;
		}
		r = st->api.ReduceScatter(k->send, k->recv, k->count, nccl_dt(k->dt),
					  nccl_op(k->op), st->comm, s);
		break;
	case GK_COMM_ALLGATHER:
		if (k->displ) {
			if (pieces(c, st, k, err) < 0)
				return -1;
			break;
		}
		r = st->api.AllGather(k->send, k->recv, k->count, nccl_dt(k->dt),
				      st->comm, s);
		break;
	case GK_COMM_REDUCE:
		r = st->api.Reduce(k->send, k->recv, k->count, nccl_dt(k->dt),
				   nccl_op(k->op), k->root, st->comm, s);
		break;
	default:
		r = st->api.Broadcast(k->send, k->recv, k->count, nccl_dt(k->dt),
				      k->root, st->comm, s);
		break;
	}
	/* A non-blocking communicator may still be connecting: ncclInProgress. */
	if (settle(st, r, st->last, err) < 0)
		return -1;
	if (k->op == GK_COMM_AVG && reduces &&
	    (!NATIVE_AVG || k->compress != GK_COMM_COMPRESS_NONE) &&
	    (k->coll != GK_COMM_REDUCE || c->rank == k->root) &&
	    gk_comm_cuda_avg(k->recv, k->count, k->dt, c->world, st->stream, err) < 0)
		return -1;
	return event ? pending(st, event, err) : 0;
}

int gk_comm_nccl_pair(gk_comm *c, const gk_comm_call *s, const gk_comm_call *r, void **sev,
		      void **rev, gk_err *err)
{
	nccl_state *st = c->nccl;
	if (usable(st, err) < 0)
		return -1;
	const gk_comm_call *k = s ? s : r;
	if (s && r)
		snprintf(st->last, sizeof st->last, "send of %zu %s to %d with receive from %d",
			 k->count, gk_dtype_name(k->dt), s->root, r->root);
	else
		snprintf(st->last, sizeof st->last, "%s of %zu %s %s %d", s ? "send" : "receive",
			 k->count, gk_dtype_name(k->dt), s ? "to" : "from", k->root);
	if (gk_cuda_set_device(st->device, err) < 0 ||
	    gk_cuda_event_record(st->ready, st->user, err) < 0 ||
	    gk_cuda_stream_wait(st->stream, st->ready, err) < 0)
		return -1;
	ncclResult_t g = st->api.GroupStart(), x = ncclSuccess;
	if (g == ncclSuccess && s)
		x = st->api.Send(s->send, s->count, nccl_dt(s->dt), s->root, st->comm, st->stream);
	if (g == ncclSuccess && r && (x == ncclSuccess || x == ncclInProgress))
		x = st->api.Recv(r->recv, r->count, nccl_dt(r->dt), r->root, st->comm, st->stream);
	/* the group ends whatever its calls said, or it stays open */
	if (g == ncclSuccess)
		g = st->api.GroupEnd();
	if (x != ncclSuccess && x != ncclInProgress)
		g = x;
	if (settle(st, g, st->last, err) < 0)
		return -1;
	if (s && pending(st, sev, err) < 0)
		return -1;
	return r ? pending(st, rev, err) : 0;
}

int gk_comm_nccl_sync(gk_comm *c, gk_err *err)
{
	nccl_state *st = c->nccl;
	if (usable(st, err) < 0)
		return -1;
	if (gk_cuda_event_record(st->idle, st->stream, err) < 0)
		return -1;
	return wait_event(st, st->idle, st->last[0] ? st->last : "synchronize", err);
}

int gk_comm_nccl_event_query(gk_comm *c, void *event, int *done, gk_err *err)
{
	nccl_state *st = c->nccl;
	nccl_pending *p = event;
	*done = 0;
	if (usable(st, err) < 0)
		return -1;
	if (gk_cuda_event_query(p->ev, done, err) < 0)
		return gk_err_prefix(err, "nccl: %s", p->what);
	if (!*done) {
		ncclResult_t a = ncclSuccess;
		if (st->api.CommGetAsyncError(st->comm, &a) != ncclSuccess)
			a = ncclInternalError;
		if (a != ncclSuccess && a != ncclInProgress)
			return fail(st, a, p->what, err);
	}
	return 0;
}

int gk_comm_nccl_event_wait(gk_comm *c, void *event, gk_err *err)
{
	nccl_state *st = c->nccl;
	nccl_pending *p = event;
	int rc = usable(st, err);
	if (rc == 0)
		rc = wait_event(st, p->ev, p->what, err);
	gk_cuda_event_free(p->ev);
	free(p);
	return rc;
}

int gk_comm_nccl_event_order(gk_comm *c, void *event, gk_err *err)
{
	nccl_state *st = c->nccl;
	nccl_pending *p = event;
	if (usable(st, err) < 0 || gk_cuda_set_device(st->device, err) < 0)
		return -1;
	return gk_cuda_stream_wait(st->user, p->ev, err);
}

/* ---- the communicator's own work on its stream (grads.c's ZeRO-2) ---- */

/* Work of the caller's on NCCL's stream, after what is queued there. */
static int own_work(gk_comm *c, gk_err *err)
{
	nccl_state *st = c->nccl;
	return usable(st, err) < 0 || gk_cuda_set_device(st->device, err) < 0 ? -1 : 0;
}

/* where the communicator's own work runs */
static gk_cuda_stream own_stream(const nccl_state *st)
{
	return st->own_user ? st->user : st->stream;
}

void gk_comm_nccl_own_on_user(gk_comm *c, int on)
{
	nccl_state *st = c->nccl;
	st->own_user = on;
}

int gk_comm_nccl_accum(gk_comm *c, float *dst, const float *src, size_t n, int add,
		       gk_err *err)
{
	nccl_state *st = c->nccl;
	if (n == 0)
		return 0;
	if (own_work(c, err) < 0)
		return -1;
	if (add)
		return gk_comm_cuda_reduce(dst, src, n, GK_DT_F32, GK_COMM_SUM, own_stream(st), err);
	return GK_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float),
					     cudaMemcpyDeviceToDevice, own_stream(st)), err);
}

int gk_comm_nccl_zero(gk_comm *c, void *buf, size_t bytes, gk_err *err)
{
	nccl_state *st = c->nccl;
	if (bytes == 0)
		return 0;
	if (own_work(c, err) < 0)
		return -1;
	return GK_CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, own_stream(st)), err);
}

int gk_comm_nccl_avg(gk_comm *c, float *buf, size_t n, gk_err *err)
{
	nccl_state *st = c->nccl;
	if (own_work(c, err) < 0)
		return -1;
	return gk_comm_cuda_avg(buf, n, GK_DT_F32, c->world, own_stream(st), err);
}

int gk_comm_nccl_fence(gk_comm *c, gk_err *err)
{
	nccl_state *st = c->nccl;
	if (own_work(c, err) < 0 || gk_cuda_event_record(st->fence, st->stream, err) < 0)
		return -1;
	return gk_cuda_stream_wait(st->user, st->fence, err);
}

/* ---- memory ---- */

void *gk_comm_nccl_alloc(gk_comm *c, size_t bytes, gk_err *err)
{
	nccl_state *st = c->nccl;
	if (usable(st, err) < 0 || gk_cuda_set_device(st->device, err) < 0)
		return NULL;
	return gk_cuda_alloc(bytes, GK_CUDA_MEM_COMM, err);
}

void gk_comm_nccl_free(gk_comm *c, void *p)
{
	(void)c;
	gk_cuda_free(p);
}

int gk_comm_nccl_copy(gk_comm *c, void *dst, const void *src, size_t bytes,
		      int to_device, gk_err *err)
{
	nccl_state *st = c->nccl;
	(void)to_device; /* unified addressing knows the direction */
	if (usable(st, err) < 0 || gk_cuda_set_device(st->device, err) < 0)
		return -1;
	return gk_cuda_copy(dst, src, bytes, st->user, err);
}
