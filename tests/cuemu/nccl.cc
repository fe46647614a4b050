/*
 * nccl.cc - a fake NCCL for the CUDA emulation: the calls lib/comm's
 * nccl backend makes, with their arguments checked (device buffers of
 * the right extent, known types and ops, a root and peers that exist,
 * the same collective with the same count, type, op and root on every
 * rank) and their work queued on the caller's stream.
 *
 * Ranks are processes (mpirun starts them, as the library's bootstrap
 * expects): ncclGetUniqueId names a POSIX shared memory segment, the
 * first rank to initialise creates it and every rank maps it. Each
 * collective is the k-th of its communicator on every rank: a rank
 * posts its input to its slot of the segment, waits until every rank
 * has posted the k-th, then computes its own output from all the slots
 * in rank order (so every rank gets the same bits) and marks the slot
 * consumed; a slot is reused once every rank has consumed it. Send and
 * receive go through a channel per ordered pair of ranks, the same
 * way; a send completes, as NCCL's does, only once its receive has
 * taken the data, so two ranks that each send to the other before
 * receiving, outside a group, hang here as they would on GPUs. A
 * group's sends and receives are one operation of its stream, done when
 * all of them are (NCCL runs them together). None of this blocks the host: the operations wait at the front
 * of their stream (a query answers not ready, a synchronisation
 * waits), and the runtime's progress thread moves them on while the
 * host is busy elsewhere, as a GPU would. A world of one takes the
 * same checks and copies its buffers directly.
 *
 * A non-blocking communicator (config.blocking = 0) answers
 * ncclInProgress to a few polls after its creation, and until every rank
 * has joined. Two ranks on one device are refused, as NCCL does.
 *
 * Faults on demand, for the watchdog and abort paths, in worlds of two
 * or more (R a rank, N the N-th operation, collective, send or receive,
 * that the rank issues; 1 when left out):
 *   CUEMU_NCCL_HANG=R[:N]    the operation never completes (a rank that
 *                            stopped); only ncclCommAbort ends it
 *   CUEMU_NCCL_ERROR=R[:N]   the communicator meets an asynchronous error
 *                            there (ncclCommGetAsyncError: ncclSystemError
 *                            on R, ncclRemoteError on the other ranks once
 *                            they wait for R)
 * CUEMU_NCCL_SLOT_MIB (default 64): the largest message, per rank.
 * CUEMU_NCCL_LOG=FILE appends one line per collective called, as it is
 * called (a group's calls each): "rank R NAME count N type T op O root
 * Q group G" (the ncclDataType_t and ncclRedOp_t numbers; G numbers the
 * process's groups from 1, 0 outside one), for the tests that count the
 * collectives of a step by kind and op, and the groups.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include <nccl.h>

#include "internal.h"

#define LOCK std::lock_guard<std::recursive_mutex> lock_(cuemu::runtime_lock())

namespace {

const int MAXRANKS = 64;
const uint32_t MAGIC = 0x4e43454d; /* set once the segment is ready */

enum { ST_OK, ST_ABORTED, ST_ERROR };

/* What a rank posted for its k-th collective, compared across ranks. */
struct meta {
	int coll; /* an index into coll_names */
	int dt, op, root;
	size_t count;
};

struct shm_rank {
	std::atomic<uint64_t> posted, consumed;
	std::atomic<int> joined, state, device;
	meta m;
};

struct shm_chan {
	std::atomic<uint64_t> posted, acked;
	size_t bytes;
};

/* The segment: this header, nranks^2 channels, nranks collective slots,
 * nranks^2 channel slots, slot bytes each. */
struct shm_hdr {
	std::atomic<uint32_t> magic;
	int nranks;
	size_t slot;
	std::atomic<int> attached;
	shm_rank r[MAXRANKS];
};

} /* namespace */

struct ncclComm {
	int nranks, rank;
	int pending_polls; /* ncclInProgress answers left after the init */
	int blocking;
	int aborted;       /* ncclCommAbort: queued work ends, undone */
	int destroyed;     /* the handle is gone; freed with its last work */
	int pending;       /* queued operations not done */
	ncclResult_t async; /* an asynchronous error of this rank */
	shm_hdr *h;        /* NULL in a world of one */
	size_t map_bytes;
	char name[64];
	uint64_t coll_seq;  /* collectives issued */
	std::vector<uint64_t> sent, received; /* per peer */
	uint64_t ops;       /* operations issued, for the faults */
	uint64_t hang_at, error_at;
	char err[200];
};

namespace {

thread_local int group_depth;
thread_local unsigned long group_serial; /* the groups begun, for CUEMU_NCCL_LOG */
struct p2p {
	int send;
	const void *sbuf;
	void *rbuf;
	size_t bytes;
	cudaStream_t s;
	ncclComm_t c;
	int peer;
};
thread_local std::vector<p2p> group_ops;
/* collectives called inside a group, issued at its ncclGroupEnd */
thread_local std::vector<std::function<ncclResult_t()>> group_colls;
thread_local char last_error[256];

const char *const coll_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
				  "ncclBroadcast", "ncclReduce"};
enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE };

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

int init_done(ncclComm_t c)
{
	return !c->h || c->h->attached.load() >= c->nranks;
}

ncclResult_t usable(ncclComm_t c)
{
	if (!c)
		return bad("a NULL communicator");
	if (c->destroyed)
		return bad("a call on a destroyed communicator");
	if (c->aborted)
		return bad("a call on an aborted communicator");
	if (c->pending_polls > 0 || !init_done(c))
		return bad("a call before the non-blocking init has completed");
	return ncclSuccess;
}

/* "R[:N]" from name for this rank: the operation number, or 0. */
uint64_t fault_at(const char *name, int rank)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return 0;
	char *end;
	long r = strtol(v, &end, 10);
	unsigned long long n = 1;
	if (*end == ':')
		n = strtoull(end + 1, &end, 10);
	if (*end || end == v || n == 0)
		cuemu::fail("%s='%s': not RANK or RANK:N (N from 1)", name, v);
	return r == rank ? n : 0;
}

void release(ncclComm_t c)
{
	if (c->h) {
		munmap(c->h, c->map_bytes);
		shm_unlink(c->name); /* when a rank never joined */
	}
	delete c;
}

/* One of c's operations done. */
void done(ncclComm_t c)
{
	if (--c->pending == 0 && c->destroyed)
		release(c);
}

/* ---- reductions, in rank order, rounding to the type at each step ----
 *
 * ncclAvg as NCCL computes it (its enqueue.cc, hostToDevRedOp): for the
 * floating types a sum of each input multiplied first by 1/nranks
 * rounded to the type (ncclDevPreMulSum), for the integers the sum
 * divided at the end (ncclDevSumPostDiv). */

template <class T> T red(T a, T b, ncclRedOp_t op)
{
	switch (op) {
	case ncclProd: return (T)(a * b);
	case ncclMax: return a > b ? a : b;
	case ncclMin: return a < b ? a : b;
	default: return (T)(a + b);
	}
}

template <class T> constexpr bool floating() { return (T)0.5 != (T)0; }

template <class T> void reduce_t(T *out, const char *const *in, int n, size_t off, size_t count,
				 ncclRedOp_t op)
{
	const bool pre = op == ncclAvg && floating<T>();
	const T s = (T)(1.0 / n);
	for (size_t i = 0; i < count; i++) {
		T acc = ((const T *)in[0])[off + i];
		if (pre)
			acc = (T)(acc * s);
		for (int r = 1; r < n; r++) {
			T x = ((const T *)in[r])[off + i];
			acc = red(acc, pre ? (T)(x * s) : x, op);
		}
		if (op == ncclAvg && !pre)
			acc = (T)(acc / (T)n);
		out[i] = acc;
	}
}

/* Small integers and halves reduce in a wider type, rounded back at
 * every step (as a chain of ranks would). */
template <class T, class W> void reduce_w(T *out, const char *const *in, int n, size_t off,
					  size_t count, ncclRedOp_t op)
{
	const bool pre = op == ncclAvg && floating<T>();
	const T s = (T)(float)(1.0 / n);
	for (size_t i = 0; i < count; i++) {
		T acc = ((const T *)in[0])[off + i];
		if (pre)
			acc = (T)((W)acc * (W)s);
		for (int r = 1; r < n; r++) {
			T x = ((const T *)in[r])[off + i];
			acc = (T)red((W)acc, pre ? (W)(T)((W)x * (W)s) : (W)x, op);
		}
		if (op == ncclAvg && !pre)
			acc = (T)((W)acc / (W)n);
		out[i] = acc;
	}
}

float bf16_f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t f_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

void reduce_bf16(uint16_t *out, const char *const *in, int n, size_t off, size_t count,
		 ncclRedOp_t op)
{
	const bool pre = op == ncclAvg;
	const float s = bf16_f(f_bf16((float)(1.0 / n)));
	for (size_t i = 0; i < count; i++) {
		float acc = bf16_f(((const uint16_t *)in[0])[off + i]);
		if (pre)
			acc = bf16_f(f_bf16(acc * s));
		for (int r = 1; r < n; r++) {
			float x = bf16_f(((const uint16_t *)in[r])[off + i]);
			acc = bf16_f(f_bf16(red(acc, pre ? bf16_f(f_bf16(x * s)) : x, op)));
		}
		out[i] = f_bf16(acc);
	}
}

/* out[0, count) = the reduction of in[r][off, off + count) over the ranks. */
void reduce(void *out, const char *const *in, int n, size_t off, size_t count,
	    ncclDataType_t t, ncclRedOp_t op)
{
	switch (t) {
	case ncclInt8: reduce_w<int8_t, int>((int8_t *)out, in, n, off, count, op); break;
	case ncclUint8: reduce_w<uint8_t, unsigned>((uint8_t *)out, in, n, off, count, op); break;
	case ncclInt32: reduce_w<int32_t, int64_t>((int32_t *)out, in, n, off, count, op); break;
	case ncclUint32: reduce_t<uint32_t>((uint32_t *)out, in, n, off, count, op); break;
	case ncclInt64: reduce_w<int64_t, __int128>((int64_t *)out, in, n, off, count, op); break;
	case ncclUint64: reduce_t<uint64_t>((uint64_t *)out, in, n, off, count, op); break;
	case ncclFloat16: reduce_w<_Float16, float>((_Float16 *)out, in, n, off, count, op); break;
	case ncclBfloat16: reduce_bf16((uint16_t *)out, in, n, off, count, op); break;
	case ncclFloat32: reduce_t<float>((float *)out, in, n, off, count, op); break;
	default: reduce_t<double>((double *)out, in, n, off, count, op); break;
	}
}

/* ---- the shared segment ---- */

char *coll_slot(ncclComm_t c, int r)
{
	return (char *)c->h + sizeof(shm_hdr) + sizeof(shm_chan) * (size_t)c->nranks * c->nranks +
	       c->h->slot * (size_t)r;
}

shm_chan *chan(ncclComm_t c, int from, int to)
{
	return (shm_chan *)((char *)c->h + sizeof(shm_hdr)) + (size_t)from * c->nranks + to;
}

char *chan_slot(ncclComm_t c, int from, int to)
{
	return coll_slot(c, c->nranks) + c->h->slot * ((size_t)from * c->nranks + to);
}

double now()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Map the segment of id (creating it when this rank is the first). */
ncclResult_t attach(ncclComm_t c, const ncclUniqueId &id)
{
	memcpy(c->name, id.internal + 6, sizeof c->name - 1);
	c->name[sizeof c->name - 1] = 0;
	const char *mib = getenv("CUEMU_NCCL_SLOT_MIB");
	size_t slot = (size_t)(mib && *mib ? atof(mib) : 64) << 20;
	size_t n = (size_t)c->nranks;
	size_t bytes = sizeof(shm_hdr) + sizeof(shm_chan) * n * n + slot * (n + n * n);
	int fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL, 0600);
	int creator = fd >= 0;
	if (!creator) {
		if (errno != EEXIST)
			return bad("shm_open failed creating the communicator's segment");
		fd = shm_open(c->name, O_RDWR, 0600);
		if (fd < 0)
			return bad("shm_open failed opening the communicator's segment");
		/* the creator sizes it: wait for that */
		struct stat sb;
		double t0 = now();
		for (;;) {
			if (fstat(fd, &sb) != 0) {
				close(fd);
				return bad("fstat of the communicator's segment failed");
			}
			if ((size_t)sb.st_size >= sizeof(shm_hdr))
				break;
			if (now() - t0 > 60) {
				close(fd);
				return bad("the communicator's segment was never sized");
			}
			usleep(1000);
		}
		bytes = (size_t)sb.st_size;
	} else if (ftruncate(fd, (off_t)bytes) != 0) {
		close(fd);
		shm_unlink(c->name);
		return bad("ftruncate of the communicator's segment failed");
	}
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return bad("mmap of the communicator's segment failed");
	c->h = (shm_hdr *)m;
	c->map_bytes = bytes;
	if (creator) {
		/* a new segment is zero: counters, states, channels */
		c->h->nranks = c->nranks;
		c->h->slot = slot;
		c->h->magic.store(MAGIC);
	} else {
		double t0 = now();
		while (c->h->magic.load() != MAGIC) {
			if (now() - t0 > 60)
				return bad("the communicator's segment was never initialised");
			usleep(1000);
		}
		if (c->h->nranks != c->nranks) {
			char m2[160];
			snprintf(m2, sizeof m2, "rank %d says %d ranks, the communicator's creator %d",
				 c->rank, c->nranks, c->h->nranks);
			return bad(m2);
		}
	}
	int dev = 0;
	cudaGetDevice(&dev);
	for (int r = 0; r < c->nranks; r++)
		if (r != c->rank && c->h->r[r].joined.load() && c->h->r[r].device.load() == dev) {
			/* NCCL: "Duplicate GPU detected" */
			snprintf(last_error, sizeof last_error,
				 "cuemu NCCL: rank %d and rank %d both use device %d (one GPU per rank)",
				 r, c->rank, dev);
			fprintf(stderr, "cuemu: NCCL: %s\n", last_error + strlen("cuemu NCCL: "));
			return ncclInvalidUsage;
		}
	c->h->r[c->rank].device.store(dev);
	if (c->h->r[c->rank].joined.exchange(1)) {
		char m2[96];
		snprintf(m2, sizeof m2, "rank %d joined the communicator twice", c->rank);
		return bad(m2);
	}
	if (c->h->attached.fetch_add(1) + 1 == c->nranks)
		shm_unlink(c->name); /* all mapped: the name may go */
	return ncclSuccess;
}

/* A rank other than c's that has failed (aborted or errored), or -1. */
int failed_peer(ncclComm_t c)
{
	for (int r = 0; r < c->nranks; r++)
		if (r != c->rank && c->h->r[r].state.load() != ST_OK)
			return r;
	return -1;
}

/*
 * The fault this operation is to meet: 1 hang, 2 asynchronous error.
 * Counted when issued, so that the N-th operation is the host's N-th
 * call.
 */
int fault(ncclComm_t c)
{
	c->ops++;
	if (c->hang_at && c->ops == c->hang_at)
		return 1;
	if (c->error_at && c->ops == c->error_at)
		return 2;
	return 0;
}

/* The fault f at c's operation what: true when the operation is over. */
bool faulted(ncclComm_t c, int f, const char *what, uint64_t opn)
{
	if (f == 2 && c->async == ncclSuccess) {
		c->async = ncclSystemError;
		snprintf(c->err, sizeof c->err,
			 "cuemu NCCL: an asynchronous error injected by CUEMU_NCCL_ERROR in %s "
			 "(operation %llu of rank %d)", what, (unsigned long long)opn, c->rank);
		c->h->r[c->rank].state.store(ST_ERROR);
	}
	return false; /* both: never done until an abort */
}

struct coll_args {
	int coll;
	const void *send;
	void *recv;
	size_t count; /* per rank: the reduce-scatter's output, the all-gather's input */
	ncclDataType_t t;
	ncclRedOp_t op;
	int root;
};

/* The bytes a rank posts for a collective. */
size_t posted_bytes(const coll_args &a, int nranks)
{
	size_t b = a.count * type_size(a.t);
	return a.coll == C_REDUCE_SCATTER ? b * (size_t)nranks : b;
}

/* The k-th collective of c on this rank, its opn-th operation, one step
 * as far as it can. */
bool coll_poll(ncclComm_t c, const coll_args &a, uint64_t k, uint64_t opn, int f, int *state)
{
	if (c->aborted) {
		done(c);
		return true; /* an abort ends queued work */
	}
	if (f)
		return faulted(c, f, coll_names[a.coll], opn);
	int n = c->nranks, me = c->rank;
	shm_hdr *h = c->h;
	if (*state == 0) {
		for (int r = 0; r < n; r++)
			if (h->r[r].consumed.load(std::memory_order_acquire) + 1 < k)
				return false;
		size_t b = posted_bytes(a, n);
		/* the broadcast's data is the root's alone */
		if (b && (a.coll != C_BROADCAST || me == a.root))
			memcpy(coll_slot(c, me), a.send, b);
		h->r[me].m = meta{a.coll, (int)a.t, (int)a.op, a.root, a.count};
		h->r[me].posted.store(k, std::memory_order_release);
		*state = 1;
	}
	for (int r = 0; r < n; r++)
		if (h->r[r].posted.load(std::memory_order_acquire) < k)
			return false;
	const meta &mine = h->r[me].m;
	for (int r = 0; r < n; r++) {
		const meta &o = h->r[r].m;
		int reduces = a.coll == C_ALLREDUCE || a.coll == C_REDUCE_SCATTER ||
			      a.coll == C_REDUCE;
		int rooted = a.coll == C_BROADCAST || a.coll == C_REDUCE;
		if (o.coll != mine.coll || o.count != mine.count || o.dt != mine.dt ||
		    (reduces && o.op != mine.op) || (rooted && o.root != mine.root))
			cuemu::fail("NCCL collective %llu: rank %d calls %s of %zu elements of type "
				    "%d (op %d, root %d), rank %d %s of %zu of type %d (op %d, root %d): "
				    "on a GPU, a hang or garbage",
				    (unsigned long long)k, me, coll_names[mine.coll], mine.count,
				    mine.dt, mine.op, mine.root, r, coll_names[o.coll], o.count, o.dt,
				    o.op, o.root);
	}
	std::vector<const char *> in((size_t)n);
	for (int r = 0; r < n; r++)
		in[(size_t)r] = coll_slot(c, r);
	size_t es = type_size(a.t), cnt = a.count;
	switch (a.coll) {
	case C_ALLREDUCE:
		reduce(a.recv, in.data(), n, 0, cnt, a.t, a.op);
		break;
	case C_REDUCE:
		if (me == a.root)
			reduce(a.recv, in.data(), n, 0, cnt, a.t, a.op);
		break;
	case C_REDUCE_SCATTER:
		reduce(a.recv, in.data(), n, (size_t)me * cnt, cnt, a.t, a.op);
		break;
	case C_ALLGATHER:
		for (int r = 0; r < n; r++)
			memcpy((char *)a.recv + (size_t)r * cnt * es, in[(size_t)r], cnt * es);
		break;
	default:
		memcpy(a.recv, in[(size_t)a.root], cnt * es);
		break;
	}
	h->r[me].consumed.store(k, std::memory_order_release);
	done(c);
	return true;
}

ncclResult_t issue(ncclComm_t c, const coll_args &a, cudaStream_t s,
		   const std::vector<cuemu::access> &acc, size_t out_b);

/* A collective on s: checks, then the copy (one rank) or the exchange,
 * at once or at the end of the group it is called in. */
ncclResult_t collective(ncclComm_t c, coll_args a, cudaStream_t s)
{
	LOCK;
	const char *what = coll_names[a.coll];
	ncclResult_t r = usable(c);
	if (r != ncclSuccess)
		return r;
	size_t es = type_size(a.t);
	if (!es)
		return bad("an unknown data type");
	if ((a.coll == C_ALLREDUCE || a.coll == C_REDUCE_SCATTER || a.coll == C_REDUCE) &&
	    !(a.op >= ncclSum && a.op <= ncclAvg))
		return bad("an unknown reduction");
	if ((a.coll == C_BROADCAST || a.coll == C_REDUCE) && (a.root < 0 || a.root >= c->nranks)) {
		char m[96];
		snprintf(m, sizeof m, "%s: root %d is not a rank of %d", what, a.root, c->nranks);
		return bad(m);
	}
	size_t n = (size_t)c->nranks;
	size_t in_b = a.count * es, out_b = a.count * es;
	if (a.coll == C_REDUCE_SCATTER)
		in_b *= n;
	if (a.coll == C_ALLGATHER)
		out_b *= n;
	int reads = a.coll != C_BROADCAST || c->rank == a.root;
	int writes = a.coll != C_REDUCE || c->rank == a.root;
	if (in_b && ((reads && !cuemu::device_range(a.send, in_b)) ||
		     (writes && !cuemu::device_range(a.recv, out_b)))) {
		char m[200];
		snprintf(m, sizeof m, "%s: buffers %p (%zu bytes) -> %p (%zu bytes) are not inside "
			 "device allocations", what, a.send, reads ? in_b : 0, a.recv,
			 writes ? out_b : 0);
		return bad(m);
	}
	/* in place (NCCL's rule): the all-gather's input is this rank's
	 * block of its output, the reduce-scatter's output this rank's block
	 * of its input, at rank * count * the type's size; a block elsewhere
	 * in the buffer (an offset in another type's size) is undefined */
	if (in_b && (a.coll == C_ALLGATHER || a.coll == C_REDUCE_SCATTER)) {
		const char *whole = (const char *)(a.coll == C_ALLGATHER ? a.recv : a.send);
		const char *part = (const char *)(a.coll == C_ALLGATHER ? a.send : a.recv);
		size_t blk = a.count * es;
		if (part + blk > whole && part < whole + blk * n &&
		    part != whole + (size_t)c->rank * blk) {
			char m[200];
			snprintf(m, sizeof m, "%s in place: rank %d's block at byte %td of the "
				 "buffer, not %zu (rank * count %zu * type size %zu)", what, c->rank,
				 part - whole, (size_t)c->rank * blk, a.count, es);
			return bad(m);
		}
	}
	if (const char *log = getenv("CUEMU_NCCL_LOG")) {
		char line[160];
		int len = snprintf(line, sizeof line,
				   "rank %d %s count %zu type %d op %d root %d group %lu\n", c->rank,
				   what, a.count, (int)a.t, (int)a.op, a.root,
				   group_depth ? group_serial : 0ul);
		int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd >= 0) {
			/* one write per line: the ranks' lines never interleave */
			if (write(fd, line, (size_t)len) != len)
				fprintf(stderr, "cuemu: nccl: CUEMU_NCCL_LOG %s: %s\n", log,
					strerror(errno));
			close(fd);
		}
	}
	if (in_b == 0)
		return ncclSuccess;
	std::vector<cuemu::access> acc;
	if (reads)
		acc.push_back({(uintptr_t)a.send, (uintptr_t)a.send + in_b, 0});
	if (writes)
		acc.push_back({(uintptr_t)a.recv, (uintptr_t)a.recv + out_b, 1});
	/*
	 * Inside a group NCCL launches nothing until ncclGroupEnd: an event
	 * recorded or a stream waited on between the call and the group's
	 * end does not cover it, and an operation that waits for it before
	 * then would hang on a GPU.
	 */
	if (group_depth) {
		group_colls.push_back([=]() { return issue(c, a, s, acc, out_b); });
		return ncclSuccess;
	}
	return issue(c, a, s, acc, out_b);
}

/* A checked collective onto its stream: the copy (one rank) or the exchange. */
ncclResult_t issue(ncclComm_t c, const coll_args &a, cudaStream_t s,
		   const std::vector<cuemu::access> &acc, size_t out_b)
{
	LOCK;
	const char *what = coll_names[a.coll];
	ncclResult_t r = usable(c);
	if (r != ncclSuccess)
		return r;
	if (!c->h) {
		/* a world of one: the output is the input (avg, sum, ... of one) */
		if (cuemu::enqueue(s, [=]() {
			    if (a.send != a.recv)
				    memmove(a.recv, a.send, out_b);
		    }, what, acc) != cudaSuccess)
			return ncclUnhandledCudaError;
		return ncclSuccess;
	}
	if (posted_bytes(a, c->nranks) > c->h->slot) {
		char m[200];
		snprintf(m, sizeof m, "%s of %zu bytes: more than a slot of %zu MiB "
			 "(CUEMU_NCCL_SLOT_MIB)", what, posted_bytes(a, c->nranks), c->h->slot >> 20);
		return bad(m);
	}
	uint64_t k = ++c->coll_seq;
	int f = fault(c);
	uint64_t opn = c->ops;
	auto state = std::make_shared<int>(0);
	c->pending++;
	if (cuemu::enqueue_poll(s, [=]() { return coll_poll(c, a, k, opn, f, state.get()); }, what, acc,
				1) != cudaSuccess) {
		c->pending--;
		return ncclUnhandledCudaError;
	}
	cuemu::progress_start();
	return ncclSuccess;
}

/* A send (to peer) or a receive (from peer), k-th on its channel. */
bool p2p_poll(ncclComm_t c, p2p o, uint64_t k, uint64_t opn, int f)
{
	if (c->aborted) {
		done(c);
		return true;
	}
	if (f)
		return faulted(c, f, o.send ? "ncclSend" : "ncclRecv", opn);
	shm_chan *ch = o.send ? chan(c, c->rank, o.peer) : chan(c, o.peer, c->rank);
	if (o.send) {
		if (ch->posted.load(std::memory_order_acquire) < k) {
			if (ch->acked.load(std::memory_order_acquire) + 1 < k)
				return false;
			memcpy(chan_slot(c, c->rank, o.peer), o.sbuf, o.bytes);
			ch->bytes = o.bytes;
			ch->posted.store(k, std::memory_order_release);
		}
		/* done when the receive has it */
		if (ch->acked.load(std::memory_order_acquire) < k)
			return false;
	} else {
		if (ch->posted.load(std::memory_order_acquire) < k)
			return false;
		if (ch->bytes != o.bytes)
			cuemu::fail("NCCL: rank %d receives %zu bytes from rank %d, which sends %zu: "
				    "on a GPU, a hang or garbage", c->rank, o.bytes, o.peer, ch->bytes);
		memcpy(o.rbuf, chan_slot(c, o.peer, c->rank), o.bytes);
		ch->acked.store(k, std::memory_order_release);
	}
	done(c);
	return true;
}

/* one send or receive of a stream operation, numbered on its channel */
struct p2p_op {
	p2p o;
	uint64_t k, opn;
	int f;
};

/* ops (one stream's): one operation of it, done when all of them are */
ncclResult_t p2p_queue(const std::vector<p2p> &ops)
{
	LOCK;
	auto st = std::make_shared<std::vector<p2p_op>>();
	auto fin = std::make_shared<std::vector<char>>(ops.size(), 0);
	std::vector<cuemu::access> acc;
	for (const p2p &o : ops) {
		ncclComm_t c = o.c;
		const void *buf = o.send ? o.sbuf : o.rbuf;
		if (o.bytes && !cuemu::device_range(buf, o.bytes))
			return bad(o.send ? "ncclSend: the buffer is not device memory"
					  : "ncclRecv: the buffer is not device memory");
		if (o.bytes > c->h->slot)
			return bad("a send of more than a slot (CUEMU_NCCL_SLOT_MIB)");
	}
	for (const p2p &o : ops) {
		ncclComm_t c = o.c;
		const void *buf = o.send ? o.sbuf : o.rbuf;
		uint64_t k = o.send ? ++c->sent[(size_t)o.peer] : ++c->received[(size_t)o.peer];
		int f = fault(c);
		st->push_back({o, k, c->ops, f});
		if (o.bytes)
			acc.push_back({(uintptr_t)buf, (uintptr_t)buf + o.bytes, !o.send});
		c->pending++;
	}
	const char *what = ops.size() > 1 ? "a group of ncclSend and ncclRecv" :
			   ops[0].send ? "ncclSend" : "ncclRecv";
	if (cuemu::enqueue_poll(ops[0].s, [=]() {
		    bool all = true;
		    for (size_t i = 0; i < st->size(); i++) {
			    const p2p_op &x = (*st)[i];
			    if (!(*fin)[i] && p2p_poll(x.o.c, x.o, x.k, x.opn, x.f))
				    (*fin)[i] = 1;
			    all = all && (*fin)[i];
		    }
		    return all;
	    }, what, acc, 1) != cudaSuccess) {
		for (const p2p &o : ops)
			o.c->pending--;
		return ncclUnhandledCudaError;
	}
	cuemu::progress_start();
	return ncclSuccess;
}

ncclResult_t p2p_call(int send, void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	ncclResult_t e = usable(c);
	if (e != ncclSuccess)
		return e;
	if (!type_size(t))
		return bad("an unknown data type");
	if (peer < 0 || peer >= c->nranks)
		return bad(send ? "ncclSend: a peer that is not a rank"
				: "ncclRecv: a peer that is not a rank");
	if (!group_depth && peer == c->rank)
		return bad(send ? "ncclSend to oneself outside a group: it would never complete"
				: "ncclRecv from oneself outside a group: it would never complete");
	p2p o = {send, send ? buf : NULL, send ? NULL : buf, n * type_size(t), st, c, peer};
	if (!group_depth)
		return p2p_queue({o});
	group_ops.push_back(o);
	return ncclSuccess;
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

const char *ncclGetLastError(ncclComm_t c)
{
	if (c && c->err[0])
		return c->err;
	return last_error;
}

ncclResult_t ncclGetVersion(int *v)
{
	*v = NCCL_VERSION_CODE;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	static std::atomic<unsigned> serial;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	memset(id, 0, sizeof *id);
	memcpy(id->internal, "cuemu", 6);
	snprintf(id->internal + 6, sizeof id->internal - 6, "/cuemu-nccl-%ld-%u-%lx",
		 (long)getpid(), serial.fetch_add(1), (unsigned long)ts.tv_nsec);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
				    ncclConfig_t *config)
{
	*out = NULL;
	if (memcmp(id.internal, "cuemu", 6) != 0)
		return bad("ncclCommInitRankConfig: an id not from ncclGetUniqueId");
	if (nranks < 1 || nranks > MAXRANKS || rank < 0 || rank >= nranks) {
		char m[120];
		snprintf(m, sizeof m, "ncclCommInitRankConfig: rank %d of %d (1 to %d ranks)", rank,
			 nranks, MAXRANKS);
		return bad(m);
	}
	ncclComm *c = new ncclComm();
	c->nranks = nranks;
	c->rank = rank;
	c->sent.assign((size_t)nranks, 0);
	c->received.assign((size_t)nranks, 0);
	c->hang_at = fault_at("CUEMU_NCCL_HANG", rank);
	c->error_at = fault_at("CUEMU_NCCL_ERROR", rank);
	if (nranks > 1) {
		ncclResult_t r = attach(c, id);
		if (r != ncclSuccess) {
			if (c->h)
				munmap(c->h, c->map_bytes);
			delete c;
			return r;
		}
	}
	c->blocking = !config || config->blocking != 0;
	c->pending_polls = c->blocking ? 0 : 3;
	*out = c;
	if (!c->blocking)
		return ncclInProgress;
	double t0 = now();
	while (!init_done(c)) {
		if (now() - t0 > 300) {
			snprintf(c->err, sizeof c->err, "cuemu NCCL: the other ranks did not join "
				 "in 300 s");
			return ncclSystemError;
		}
		usleep(1000);
	}
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
	return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
	LOCK;
	if (!c || c->destroyed)
		return bad("ncclCommGetAsyncError: a NULL or destroyed communicator");
	*r = ncclSuccess;
	if (c->async != ncclSuccess) {
		*r = c->async;
	} else if (c->pending_polls > 0) {
		c->pending_polls--;
		*r = ncclInProgress;
	} else if (!init_done(c)) {
		*r = ncclInProgress;
	} else if (c->h && c->pending > 0) {
		/* work waits, and a rank it waits for has failed */
		int p = failed_peer(c);
		if (p >= 0) {
			snprintf(c->err, sizeof c->err,
				 "cuemu NCCL: rank %d %s while rank %d waits for it", p,
				 c->h->r[p].state.load() == ST_ERROR ? "met an error" : "aborted",
				 c->rank);
			*r = c->async = ncclRemoteError;
		}
	}
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
	LOCK;
	ncclResult_t r = usable(c);
	if (r != ncclSuccess)
		return r;
	if (group_depth)
		return bad("ncclCommFinalize inside a group");
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	LOCK;
	if (!c || c->destroyed)
		return bad("ncclCommDestroy: a NULL or destroyed communicator");
	c->destroyed = 1;
	if (c->pending == 0)
		release(c);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
	LOCK;
	if (!c || c->destroyed)
		return bad("ncclCommAbort: a NULL or destroyed communicator");
	/* queued work ends undone; the handle is gone, as after a destroy */
	c->aborted = 1;
	if (c->h)
		c->h->r[c->rank].state.store(ST_ABORTED);
	c->destroyed = 1;
	if (c->pending == 0)
		release(c);
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			   ncclComm_t c, cudaStream_t st)
{
	return collective(c, {C_ALLREDUCE, s, r, n, t, op, 0}, st);
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
	return collective(c, {C_REDUCE_SCATTER, s, r, n, t, op, 0}, st);
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
			   cudaStream_t st)
{
	return collective(c, {C_ALLGATHER, s, r, n, t, ncclSum, 0}, st);
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			   ncclComm_t c, cudaStream_t st)
{
	return collective(c, {C_BROADCAST, s, r, n, t, ncclSum, root}, st);
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			int root, ncclComm_t c, cudaStream_t st)
{
	return collective(c, {C_REDUCE, s, r, n, t, op, root}, st);
}

ncclResult_t ncclSend(const void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	return p2p_call(1, (void *)buf, n, t, peer, c, st);
}

ncclResult_t ncclRecv(void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	return p2p_call(0, buf, n, t, peer, c, st);
}

ncclResult_t ncclGroupStart(void)
{
	if (group_depth++ == 0)
		group_serial++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (group_depth == 0)
		return bad("ncclGroupEnd without ncclGroupStart");
	if (--group_depth)
		return ncclSuccess;
	std::vector<p2p> ops;
	ops.swap(group_ops);
	std::vector<std::function<ncclResult_t()>> colls;
	colls.swap(group_colls);
	/* the group's collectives in the order called, as every rank calls them */
	for (auto &issue_one : colls) {
		ncclResult_t r = issue_one();
		if (r != ncclSuccess)
			return r;
	}
	/* a world of one: the k-th send to oneself meets the k-th receive */
	std::vector<p2p> sends, recvs;
	for (const p2p &o : ops)
		if (!o.c->h)
			(o.send ? sends : recvs).push_back(o);
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
	/* more ranks: each stream's sends and receives one operation of it,
	 * done when all are (a ring's step cannot wait on itself whatever
	 * order the caller gave) */
	std::vector<cudaStream_t> streams;
	for (const p2p &o : ops)
		if (o.c->h) {
			bool seen = false;
			for (cudaStream_t x : streams)
				seen = seen || x == o.s;
			if (!seen)
				streams.push_back(o.s);
		}
	for (cudaStream_t x : streams) {
		std::vector<p2p> mine;
		for (const p2p &o : ops)
			if (o.c->h && o.s == x)
				mine.push_back(o);
		ncclResult_t r = p2p_queue(mine);
		if (r != ncclSuccess)
			return r;
	}
	return ncclSuccess;
}

} /* extern "C" */
