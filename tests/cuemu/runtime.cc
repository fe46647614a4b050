/*
 * runtime.cc - a strict fake of the CUDA runtime API for the emulation:
 * one device whose memory is host memory, and streams that defer their
 * work.
 *
 * Device memory is aligned host memory filled with a garbage pattern
 * (uninitialised device memory is not zero). Every copy and memset is
 * checked to lie inside one allocation.
 *
 * Work queued on a stream runs only when something needs it: a stream or
 * event synchronisation, an event query, a wait of another stream that
 * is being run, a copy to pageable host memory, cudaFree. Work on other
 * streams that nothing has ordered before it stays queued, so a missing
 * event between two streams shows as a wrong result rather than being
 * hidden by an eager device. Copies follow the runtime's documented
 * synchronisation rules ("API synchronization behavior"): from pageable
 * host memory the source is read at the call; to pageable host memory
 * the call returns once the stream has reached and done the copy; with
 * pinned memory the copy is queued like a kernel.
 *
 * With CUEMU_ORDER=shuffle the converse happens too: a GPU runs work as
 * soon as it can, so after an operation is queued a stream drawn from
 * CUEMU_SEED may run some of its work early, and a drain of the device
 * interleaves the streams' operations one at a time (eager_progress,
 * drain_interleaved). Either way only the streams' own order, events
 * and waits hold.
 *
 * The legacy default stream (NULL) is ordered with blocking streams (flag
 * 0) by running them before it and it before them; non-blocking streams
 * (the library's) are not ordered with it at all.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "internal.h"

/*
 * What is ordered before what: a vector clock, for each stream (by id)
 * the last of its operations known to be done before (the host's, a
 * stream's next operation's, an event's).
 */
typedef std::map<uint64_t, uint64_t> vclock;

static void join(vclock &a, const vclock &b)
{
	for (const auto &kv : b) {
		uint64_t &v = a[kv.first];
		if (kv.second > v)
			v = kv.second;
	}
}

static uint64_t at(const vclock &a, uint64_t id)
{
	auto it = a.find(id);
	return it == a.end() ? 0 : it->second;
}

/* The CUDA handles are pointers to these. */
struct cuemu_op {
	std::function<void()> fn;
	const char *what;
	uint64_t seq; /* in the host's order of calls */
	std::vector<cuemu::access> acc;
	/* instead of fn: an operation that may have to wait (a stream wait,
	 * a collective), true once done; it stays at the front until then */
	std::function<bool()> poll;
	int remote;  /* poll waits for other processes (NCCL's ranks) */
	int started; /* poll was called once (races checked) */
	uint64_t sid; /* its stream's id */
	vclock vc;    /* what is ordered before it, itself included */
};

struct CUstream_st {
	std::deque<cuemu_op> q;
	unsigned flags;
	uint64_t id;
	int dead;
	int remote; /* queued operations that wait for other processes */
	vclock vc;  /* what its next operation is ordered after */
};

struct CUevent_st {
	unsigned flags;
	uint64_t recorded, done; /* records made, and done */
	CUstream_st *stream;     /* of the last record */
	double time_ms;
	vclock vc;               /* what its last record is ordered after */
	int waiters;             /* queued stream waits on it */
	int dead;                /* destroyed, freed once nothing queued needs it */
};

namespace {

std::recursive_mutex mu;
CUstream_st legacy = {{}, 0, 0, 0, 0, {}};
uint64_t next_seq = 1;
/*
 * Made once and never destroyed: the leak checker of SAN=1 runs after
 * the static destructors, and would find everything they let go.
 */
std::vector<CUstream_st *> &streams = *new std::vector<CUstream_st *>; /* live, not legacy */
std::vector<CUstream_st *> &destroyed = *new std::vector<CUstream_st *>; /* events may name them */
uint64_t next_stream_id = 1;
std::map<uintptr_t, size_t> &dev_mem = *new std::map<uintptr_t, size_t>;
std::map<uintptr_t, size_t> &pinned_mem = *new std::map<uintptr_t, size_t>;
double clock_ms;
int device;
thread_local cudaError_t last_error = cudaSuccess;

CUstream_st *S(cudaStream_t s)
{
	return s ? (CUstream_st *)s : &legacy;
}

/* The allocation (base, size) holding p in m, or m.end(). */
std::map<uintptr_t, size_t>::iterator find(std::map<uintptr_t, size_t> &m, const void *p)
{
	uintptr_t a = (uintptr_t)p;
	auto it = m.upper_bound(a);
	if (it == m.begin())
		return m.end();
	--it;
	return a < it->first + (it->second ? it->second : 1) ? it : m.end();
}

int in(std::map<uintptr_t, size_t> &m, const void *p, size_t n)
{
	auto it = find(m, p);
	return it != m.end() && (uintptr_t)p + n <= it->first + it->second;
}

/*
 * Device memory operations touched, by operations that have run and that
 * the host has not yet seen done: an operation that runs later on
 * another stream and touches the same memory (one of them writing) must
 * be ordered after them, or it is a race whatever order this run took.
 */
struct touch {
	uintptr_t lo, hi;
	int write;
	uint64_t sid, seq;
	const char *what;
};
std::vector<touch> &touched = *new std::vector<touch>;
vclock host; /* what the host has seen done */

/* The operation op, about to be queued on s: what it is ordered after. */
void stamp(CUstream_st *s, cuemu_op &op);

/* Run the front of s once; 0 when it was empty, blocked by a host
 * function (stop_at_host) or by an operation that cannot complete yet
 * (a collective waiting for other ranks). */
int step(CUstream_st *s, int stop_at_host);

/*
 * The caller waits (a synchronisation) and s cannot go on: another
 * process (a rank) has to get somewhere first. That takes its own
 * time: sleep a little, holding the lock (this thread drives the
 * streams meanwhile, the progress thread is not needed).
 */
void stall(unsigned *n)
{
	if (++*n < 64) {
		sched_yield();
	} else {
		struct timespec ts = {0, 50000};
		nanosleep(&ts, NULL);
	}
}

void run_until_empty(CUstream_st *s)
{
	unsigned n = 0;
	while (!s->q.empty())
		if (!step(s, 0))
			stall(&n);
}

/* What a new operation on s is ordered after (the legacy stream's
 * implicit synchronisation), done eagerly, which is always legal. */
void legacy_order(CUstream_st *s)
{
	if (s == &legacy) {
		for (CUstream_st *o : streams)
			if (!(o->flags & cudaStreamNonBlocking))
				run_until_empty(o);
	} else if (!(s->flags & cudaStreamNonBlocking)) {
		run_until_empty(&legacy);
	}
}

int stepping; /* inside step: no eager progress from there */

/*
 * Shuffled order: the streams' operations interleaved, one at a time
 * from a stream drawn among those with work, until all are empty. A
 * stream whose front cannot run yet (a wait, a collective) gives way to
 * the others.
 */
void drain_interleaved()
{
	unsigned n = 0;
	for (;;) {
		std::vector<CUstream_st *> live;
		for (CUstream_st *o : streams)
			if (!o->q.empty())
				live.push_back(o);
		if (!legacy.q.empty())
			live.push_back(&legacy);
		if (live.empty())
			return;
		size_t first = (size_t)(cuemu::draw() % live.size()), k;
		for (k = 0; k < live.size(); k++)
			if (step(live[(first + k) % live.size()], 0))
				break;
		if (k == live.size())
			stall(&n);
	}
}

void drain_all()
{
	/* in reverse or shuffled order too: only the streams' own order and
	 * their waits hold */
	if (cuemu::order() == cuemu::ORDER_SHUFFLE) {
		drain_interleaved();
		return;
	}
	std::vector<CUstream_st *> all(streams);
	all.push_back(&legacy);
	for (size_t k = 0; k < all.size(); k++)
		run_until_empty(all[cuemu::permute(k, all.size(), 7)]);
}

/*
 * Shuffled order, after an operation is queued: a GPU may run queued
 * work at any moment, so every other time or so a stream with work,
 * drawn at random, runs one to four of its operations early (never a
 * host function, which may wait for this thread, nor a wait or a
 * collective, whose polls may run another stream's host function).
 */
void eager_progress()
{
	if (cuemu::order() != cuemu::ORDER_SHUFFLE || stepping)
		return;
	uint64_t r = cuemu::draw();
	if (r % 2)
		return;
	std::vector<CUstream_st *> ready;
	for (CUstream_st *o : streams)
		if (!o->q.empty())
			ready.push_back(o);
	if (!legacy.q.empty())
		ready.push_back(&legacy);
	if (ready.empty())
		return;
	CUstream_st *s = ready[(size_t)(r >> 8) % ready.size()];
	for (uint64_t k = (r >> 32) % 4 + 1; k > 0 && !s->q.empty() && !s->q.front().poll &&
					       step(s, 1); k--)
		;
}

/* The name of a queued host function, which marks it: a query never
 * runs one, and a lazy load finds it. */
const char host_fn_mark[] = "cudaLaunchHostFunc";

/* x is about to run on s: see enqueue in internal.h. */
void check_races(CUstream_st *s, const cuemu_op &x)
{
	if (x.acc.empty())
		return;
	for (const touch &y : touched) {
		if (y.sid == x.sid || at(x.vc, y.sid) >= y.seq)
			continue;
		for (const cuemu::access &a : x.acc)
			if (a.lo < y.hi && y.lo < a.hi && (a.write || y.write))
				cuemu::fail("%s on stream %llu %s [%p, %p) after %s on stream %llu %s "
					    "[%p, %p), which no event or synchronisation orders before "
					    "it: a race on a GPU (this run's order hid it)",
					    x.what, (unsigned long long)s->id,
					    a.write ? "writes" : "reads", (void *)a.lo, (void *)a.hi,
					    y.what, (unsigned long long)y.sid,
					    y.write ? "writes" : "reads", (void *)y.lo, (void *)y.hi);
	}
	for (const cuemu::access &a : x.acc)
		touched.push_back({a.lo, a.hi, a.write, x.sid, x.seq, x.what});
	std::vector<CUstream_st *> all(streams);
	all.push_back(&legacy);
	for (CUstream_st *o : all) {
		if (o == s)
			continue;
		for (const cuemu_op &y : o->q) {
			if (y.seq > x.seq)
				break;
			for (const cuemu::access &a : x.acc)
				for (const cuemu::access &b : y.acc)
					if (a.lo < b.hi && b.lo < a.hi && (a.write || b.write))
						cuemu::fail("%s on stream %llu %s [%p, %p) while %s, queued "
							    "before it on stream %llu and not ordered before it "
							    "by any event, %s [%p, %p): a race on a GPU",
							    x.what, (unsigned long long)s->id,
							    a.write ? "writes" : "reads", (void *)a.lo,
							    (void *)a.hi, y.what, (unsigned long long)o->id,
							    b.write ? "writes" : "reads", (void *)b.lo,
							    (void *)b.hi);
		}
	}
}

/*
 * The host has seen v done (a synchronisation): everything issued from
 * now on is ordered after it, and a touch that every queued operation
 * is also ordered after can be forgotten.
 */
void learn(const vclock &v)
{
	join(host, v);
	std::vector<CUstream_st *> all(streams);
	all.push_back(&legacy);
	size_t k = 0;
	for (const touch &t : touched) {
		int keep = at(host, t.sid) < t.seq;
		for (size_t i = 0; !keep && i < all.size(); i++)
			for (const cuemu_op &o : all[i]->q)
				if (o.sid != t.sid && at(o.vc, t.sid) < t.seq) {
					keep = 1;
					break;
				}
		if (keep)
			touched[k++] = t;
	}
	touched.resize(k);
}

void learn_all()
{
	vclock v;
	std::vector<CUstream_st *> all(streams);
	all.push_back(&legacy);
	for (CUstream_st *o : all)
		join(v, o->vc);
	learn(v);
}

void stamp(CUstream_st *s, cuemu_op &op)
{
	/* the legacy stream's implicit order with the blocking streams */
	if (s == &legacy) {
		for (CUstream_st *o : streams)
			if (!(o->flags & cudaStreamNonBlocking))
				join(s->vc, o->vc);
	} else if (!(s->flags & cudaStreamNonBlocking)) {
		join(s->vc, legacy.vc);
	}
	join(s->vc, host);
	s->vc[s->id] = op.seq;
	op.sid = s->id;
	op.vc = s->vc;
}

int step_once(CUstream_st *s, int stop_at_host);

int step(CUstream_st *s, int stop_at_host)
{
	stepping++;
	int r = step_once(s, stop_at_host);
	stepping--;
	return r;
}

int step_once(CUstream_st *s, int stop_at_host)
{
	if (s->q.empty())
		return 0;
	if (stop_at_host && s->q.front().what == host_fn_mark)
		return 0;
	if (s->q.front().poll) {
		cuemu_op &f = s->q.front();
		if (!f.started) {
			check_races(s, f);
			f.started = 1;
		}
		/* f stays valid: nothing pops s's front but this */
		if (!f.poll())
			return 0;
		if (f.remote)
			s->remote--;
		s->q.pop_front();
		clock_ms += 0.001;
		return 1;
	}
	cuemu_op op = std::move(s->q.front());
	s->q.pop_front();
	check_races(s, op);
	op.fn();
	clock_ms += 0.001;
	return 1;
}

/* Run the stream of e's record number gen until that record is done;
 * block: wait for what cannot run yet, else return 0. */
int reach(CUevent_st *e, uint64_t gen, CUstream_st *s, int stop_at_host, int block)
{
	unsigned n = 0;
	while (e->done < gen) {
		if (step(s, stop_at_host))
			continue;
		if (e->done >= gen || !block || s->q.empty() ||
		    (stop_at_host && s->q.front().what == host_fn_mark))
			return e->done >= gen;
		stall(&n);
	}
	return 1;
}

/* Free a destroyed event once no queued record or wait refers to it. */
void release_event(CUevent_st *ev)
{
	if (ev->dead && ev->done >= ev->recorded && ev->waiters == 0)
		delete ev;
}

const char *mem_kind(const void *p)
{
	if (find(dev_mem, p) != dev_mem.end())
		return "device";
	if (find(pinned_mem, p) != pinned_mem.end())
		return "pinned";
	return "pageable";
}

} /* namespace */

namespace cuemu {

static order_kind ord_kind = ORDER_FORWARD;
static uint64_t ord_seed = 1;

__attribute__((constructor)) static void read_env()
{
	const char *o = getenv("CUEMU_ORDER"), *s = getenv("CUEMU_SEED");
	if (o && !strcmp(o, "reverse"))
		ord_kind = ORDER_REVERSE;
	else if (o && !strcmp(o, "shuffle"))
		ord_kind = ORDER_SHUFFLE;
	else if (o && *o && strcmp(o, "forward")) {
		fprintf(stderr, "cuemu: CUEMU_ORDER='%s': not forward, reverse or shuffle\n", o);
		exit(2);
	}
	if (s && *s)
		ord_seed = strtoull(s, NULL, 0);
}

order_kind order()
{
	return ord_kind;
}

uint64_t seed()
{
	return ord_seed;
}

static uint64_t mix(uint64_t x)
{
	/* splitmix64's finaliser */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * A permutation of [0, n) drawn by (seed, salt): four rounds of a Feistel
 * network over the smallest even power of two at least n, walked until
 * it lands inside [0, n) (a bijection of the larger domain restricted to
 * its cycle through i). Neighbours land anywhere, unlike an affine map
 * (a i + c mod n), which keeps them a fixed stride apart and has only
 * a few orders of n; nothing is stored, so a grid of any size costs a
 * few hashes a block.
 */
static uint64_t feistel(uint64_t i, uint64_t n, uint64_t key)
{
	int half = 1;
	while (half < 32 && (1ull << (2 * half)) < n)
		half++;
	uint64_t mask = (1ull << half) - 1;
	uint64_t x = i;
	do {
		uint64_t l = x >> half, r = x & mask;
		for (uint64_t round = 0; round < 4; round++) {
			uint64_t t = l ^ (mix(r ^ key ^ round * 0x9e3779b97f4a7c15ull) & mask);
			l = r;
			r = t;
		}
		x = l << half | r;
	} while (x >= n);
	return x;
}

uint64_t permute(uint64_t i, uint64_t n, uint64_t salt)
{
	switch (ord_kind) {
	case ORDER_REVERSE:
		return n - 1 - i;
	case ORDER_SHUFFLE:
		return n < 2 ? 0 : feistel(i, n, mix(ord_seed * 0x9e3779b97f4a7c15ull + salt));
	default:
		return i;
	}
}

uint64_t seeded_permute(uint64_t i, uint64_t n, uint64_t salt)
{
	return n < 2 ? 0 : feistel(i, n, mix(ord_seed * 0x9e3779b97f4a7c15ull + salt));
}

uint64_t draw(void)
{
	static uint64_t k;
	return mix(mix(ord_seed) + ++k);
}

void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("cuemu: ", stderr);
	vfprintf(stderr, fmt, ap);
	if (ord_kind == ORDER_SHUFFLE)
		fprintf(stderr, " [CUEMU_ORDER=shuffle CUEMU_SEED=%llu replays this run's orders]",
			(unsigned long long)ord_seed);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

cudaError_t set_error(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> fn, const char *what,
		    std::vector<access> acc)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	CUstream_st *st = S(s);
	if (st->dead)
		return set_error(cudaErrorInvalidResourceHandle);
	legacy_order(st);
	st->q.push_back(cuemu_op{std::move(fn), what, next_seq++, std::move(acc), nullptr, 0, 0, 0, {}});
	stamp(st, st->q.back());
	eager_progress();
	return cudaSuccess;
}

cudaError_t enqueue_poll(cudaStream_t s, std::function<bool()> fn, const char *what,
			 std::vector<access> acc, int remote)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	CUstream_st *st = S(s);
	if (st->dead)
		return set_error(cudaErrorInvalidResourceHandle);
	legacy_order(st);
	cuemu_op op{nullptr, what, next_seq++, std::move(acc), std::move(fn), remote, 0, 0, {}};
	st->q.push_back(std::move(op));
	stamp(st, st->q.back());
	st->remote += remote;
	eager_progress();
	return cudaSuccess;
}

/*
 * The device's own progress, for work that waits on other processes: a
 * GPU runs a collective whether or not its host thread waits for it,
 * and the rank at the other end may be waiting for this one while this
 * host is busy elsewhere (an MPI call). Every millisecond the thread
 * runs each stream that holds such work, as far as it can without
 * waiting, and never into a host function.
 */
static void *progress(void *)
{
	for (;;) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
		std::lock_guard<std::recursive_mutex> g(mu);
		std::vector<CUstream_st *> all(streams);
		all.push_back(&legacy);
		for (CUstream_st *st : all)
			while (st->remote > 0 && step(st, 1))
				;
	}
	return NULL;
}

std::recursive_mutex &runtime_lock()
{
	return mu;
}

void progress_start()
{
	static std::once_flag once;
	std::call_once(once, []() {
		pthread_t t;
		if (pthread_create(&t, NULL, progress, NULL) != 0)
			fail("cannot start the progress thread of the NCCL ranks");
		pthread_detach(t);
	});
}

void module_load(const void *key, const char *kernel)
{
	static std::set<const void *> &loaded = *new std::set<const void *>;
	std::lock_guard<std::recursive_mutex> g(mu);
	if (!loaded.insert(key).second)
		return;
	std::vector<CUstream_st *> all(streams);
	all.push_back(&legacy);
	for (CUstream_st *st : all)
		for (const cuemu_op &o : st->q)
			if (o.what == host_fn_mark)
				fail("the first launch of kernel %s loads it, which waits for the device "
				     "(lazy loading, CUDA's default), while stream %llu holds a host "
				     "function that may wait for this thread: a deadlock on a GPU "
				     "(launch the kernel once before, or CUDA_MODULE_LOADING=EAGER)",
				     kernel, (unsigned long long)st->id);
	drain_all();
}

/* cudaFuncAttributeMaxDynamicSharedMemorySize of each (device, kernel)
 * that cudaFuncSetAttribute set: an attribute of the kernel as its
 * device's context loaded it. */
static std::map<std::pair<int, const void *>, int> &max_dyn =
	*new std::map<std::pair<int, const void *>, int>;

size_t max_dynamic_shared(const void *fn)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	auto it = max_dyn.find(std::make_pair(device, fn));
	return it == max_dyn.end() ? (size_t)SHARED_DEFAULT : (size_t)it->second;
}

int device_range(const void *p, size_t n)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	return in(dev_mem, p, n);
}

int is_device(const void *p)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	return find(dev_mem, p) != dev_mem.end();
}

} /* namespace cuemu */

using cuemu::set_error;

#define LOCK std::lock_guard<std::recursive_mutex> lock_(mu)

extern "C" {

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInsufficientDriver:
		return "CUDA driver version is insufficient for CUDA runtime version";
	default: return "unknown error (cuemu)";
	}
}

const char *cudaGetErrorName(cudaError_t e)
{
	return cudaGetErrorString(e);
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
	*v = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
	*v = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
	/* CUEMU_GPUS devices (1 by default), each with its own memory in
	 * each process; "" in CUDA_VISIBLE_DEVICES hides them */
	const char *vis = getenv("CUDA_VISIBLE_DEVICES"), *g = getenv("CUEMU_GPUS");
	int count = g && *g ? atoi(g) : 1;
	*n = (vis && !*vis) || count < 0 ? 0 : count;
	return *n ? cudaSuccess : set_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d)
{
	int n;
	if (cudaGetDeviceCount(&n) != cudaSuccess || d < 0 || d >= n)
		return set_error(cudaErrorInvalidDevice);
	device = d;
	return cudaSuccess;
}

/* The one device's bus: the fake NVML's GPU 0 (tests/cli/fake-nvml.c). */
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int d)
{
	int n;
	if (cudaGetDeviceCount(&n) != cudaSuccess || d < 0 || d >= n || len < 13)
		return set_error(cudaErrorInvalidValue);
	snprintf(buf, (size_t)len, "0000:18:00.0");
	return cudaSuccess;
}

/* One sm_90 device (the launch limits the emulation checks), its memory
 * what cudaMemGetInfo reports. */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
	int n;
	if (cudaGetDeviceCount(&n) != cudaSuccess || d < 0 || d >= n)
		return set_error(cudaErrorInvalidDevice);
	size_t free_b, total_b;
	cudaMemGetInfo(&free_b, &total_b);
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "CPU emulation of CUDA (cuemu)");
	p->major = 9;
	p->minor = 0;
	p->totalGlobalMem = total_b;
	p->warpSize = 32;
	p->maxThreadsPerBlock = 1024;
	p->sharedMemPerBlock = cuemu::SHARED_DEFAULT;
	p->sharedMemPerBlockOptin = cuemu::SHARED_OPTIN;
	p->pciBusID = 0x18; /* as cudaDeviceGetPCIBusId says */
	return cudaSuccess;
}

/*
 * The one attribute the library sets: the most dynamic shared memory a
 * launch of func may ask, up to sm_90's 227 KiB (sharedMemPerBlockOptin;
 * on a GPU less the kernel's static shared memory, which the emulation
 * does not know); past that, or below 0, cudaErrorInvalidValue. Any
 * other attribute stops the run: the emulation does not model it.
 */
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	if (!func)
		return set_error(cudaErrorInvalidDeviceFunction);
	if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
		cuemu::fail("cudaFuncSetAttribute: attribute %d is not emulated (only "
			    "cudaFuncAttributeMaxDynamicSharedMemorySize is)", (int)attr);
	if (value < 0 || value > cuemu::SHARED_OPTIN) {
		fprintf(stderr, "cuemu: cudaFuncSetAttribute(kernel %p, "
			"cudaFuncAttributeMaxDynamicSharedMemorySize, %d) refused: outside 0 to the "
			"%d bytes (227 KiB) a block of sm_90 can opt in to\n", func, value,
			cuemu::SHARED_OPTIN);
		return set_error(cudaErrorInvalidValue);
	}
	LOCK;
	cuemu::max_dyn[std::make_pair(device, func)] = value;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
	*d = device;
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	LOCK;
	drain_all();
	learn_all();
	return cudaSuccess;
}

/* ---- memory ---- */

/*
 * CUEMU_MEM_LOG=PATH: the most device memory this process has held at once
 * (cudaMalloc's bytes, as asked), written to PATH.<pid> at each new high,
 * so that a test can compare what a run allocates with what it accounts.
 */
static size_t dev_used, dev_peak;

static void mem_high(void)
{
	if (dev_used <= dev_peak)
		return;
	dev_peak = dev_used;
	const char *log = getenv("CUEMU_MEM_LOG");
	if (!log || !*log)
		return;
	char path[4096];
	snprintf(path, sizeof(path), "%s.%ld", log, (long)getpid());
	FILE *f = fopen(path, "w");
	if (!f)
		cuemu::fail("CUEMU_MEM_LOG: cannot write '%s'", path);
	fprintf(f, "peak %zu\n", dev_peak);
	if (fclose(f) != 0)
		cuemu::fail("CUEMU_MEM_LOG: cannot write '%s'", path);
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	LOCK;
	*p = NULL;
	if (n == 0)
		return cudaSuccess;
	void *m = NULL;
	if (n > ((size_t)1 << 40) || posix_memalign(&m, 256, n))
		return set_error(cudaErrorMemoryAllocation);
	/* not zero: a read before a write must not look initialised */
	memset(m, 0xa5, n);
	dev_mem[(uintptr_t)m] = n;
	dev_used += n;
	mem_high();
	*p = m;
	return cudaSuccess;
}

/*
 * The device's memory as the fake sees it: CUEMU_MEM_GIB (80 by default, an
 * H100's) less what is allocated, so a caller checking free memory before
 * it allocates (gpu-train's memory check) sees its own allocations.
 */
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	LOCK;
	const char *g = getenv("CUEMU_MEM_GIB");
	size_t total = (size_t)(g ? atof(g) * (1 << 30) : 80.0 * (1 << 30)), used = 0;
	for (auto &m : dev_mem)
		used += m.second;
	*total_b = total;
	*free_b = used < total ? total - used : 0;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	LOCK;
	if (!p)
		return cudaSuccess;
	/* cudaFree waits for the device: work queued on p must still see it */
	drain_all();
	learn_all();
	auto it = dev_mem.find((uintptr_t)p);
	if (it == dev_mem.end())
		cuemu::fail("cudaFree(%p): not the start of a live device allocation (%s memory)",
			    p, mem_kind(p));
	dev_used -= it->second;
	dev_mem.erase(it);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
	LOCK;
	void *m = NULL;
	if (posix_memalign(&m, 4096, n ? n : 1))
		return set_error(cudaErrorMemoryAllocation);
	memset(m, 0x5a, n);
	pinned_mem[(uintptr_t)m] = n;
	*p = m;
	return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
	LOCK;
	if (!p)
		return cudaSuccess;
	drain_all();
	learn_all();
	auto it = pinned_mem.find((uintptr_t)p);
	if (it == pinned_mem.end())
		cuemu::fail("cudaFreeHost(%p): not from cudaMallocHost", p);
	pinned_mem.erase(it);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	LOCK;
	if (n == 0)
		return cudaSuccess;
	if (!in(dev_mem, p, n))
		cuemu::fail("cudaMemsetAsync(%p, %zu bytes): not inside one device allocation (%s memory)",
			    p, n, mem_kind(p));
	return cuemu::enqueue(s, [=]() { memset(p, v, n); }, "cudaMemsetAsync",
			      {{(uintptr_t)p, (uintptr_t)p + n, 1}});
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
			    cudaStream_t s)
{
	LOCK;
	if (n == 0)
		return cudaSuccess;
	int dd = find(dev_mem, dst) != dev_mem.end(), sd = find(dev_mem, src) != dev_mem.end();
	int dp = find(pinned_mem, dst) != pinned_mem.end();
	int sp = find(pinned_mem, src) != pinned_mem.end();
	if ((dd && !in(dev_mem, dst, n)) || (sd && !in(dev_mem, src, n)) ||
	    (dp && !in(pinned_mem, dst, n)) || (sp && !in(pinned_mem, src, n)))
		cuemu::fail("cudaMemcpyAsync(%p, %p, %zu bytes): past the end of an allocation",
			    dst, src, n);
	int ok;
	switch (kind) {
	case cudaMemcpyHostToDevice: ok = dd && !sd; break;
	case cudaMemcpyDeviceToHost: ok = sd && !dd; break;
	case cudaMemcpyDeviceToDevice: ok = sd && dd; break;
	case cudaMemcpyHostToHost: ok = !sd && !dd; break;
	case cudaMemcpyDefault: ok = 1; break;
	default: ok = 0;
	}
	if (!ok)
		cuemu::fail("cudaMemcpyAsync: kind %d does not match the pointers (dst %s, src %s)",
			    (int)kind, mem_kind(dst), mem_kind(src));
	CUstream_st *st = S(s);
	if (st->dead)
		return set_error(cudaErrorInvalidResourceHandle);
	std::vector<cuemu::access> acc;
	if (dd)
		acc.push_back({(uintptr_t)dst, (uintptr_t)dst + n, 1});
	if (sd)
		acc.push_back({(uintptr_t)src, (uintptr_t)src + n, 0});
	if (!dd && !dp) {
		/* to pageable host memory: done when the call returns */
		cuemu::enqueue(s, [=]() { memmove(dst, src, n); }, "cudaMemcpyAsync to pageable",
			       acc);
		run_until_empty(st);
		learn(st->vc);
		return cudaSuccess;
	}
	if (!sd && !sp) {
		/* from pageable host memory: staged now */
		std::shared_ptr<std::vector<char>> stage =
			std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
		return cuemu::enqueue(s, [=]() { memcpy(dst, stage->data(), n); },
				      "cudaMemcpyAsync from pageable", acc);
	}
	return cuemu::enqueue(s, [=]() { memmove(dst, src, n); }, "cudaMemcpyAsync", acc);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
	LOCK;
	cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, NULL);
	if (e == cudaSuccess) {
		run_until_empty(&legacy);
		learn(legacy.vc);
	}
	return e;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
	LOCK;
	cudaError_t e = cudaMemsetAsync(p, v, n, NULL);
	if (e == cudaSuccess) {
		run_until_empty(&legacy);
		learn(legacy.vc);
	}
	return e;
}

/* ---- streams ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	LOCK;
	CUstream_st *st = new CUstream_st();
	st->flags = flags;
	st->id = next_stream_id++;
	streams.push_back(st);
	*s = st;
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	LOCK;
	if (!s)
		return set_error(cudaErrorInvalidResourceHandle);
	CUstream_st *st = S(s);
	/* its work still completes (the runtime lets it finish) */
	run_until_empty(st);
	for (size_t i = 0; i < streams.size(); i++)
		if (streams[i] == st)
			streams.erase(streams.begin() + (long)i);
	st->dead = 1;
	st->q.clear();
	destroyed.push_back(st);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	LOCK;
	CUstream_st *st = S(s);
	if (st->dead)
		return set_error(cudaErrorInvalidResourceHandle);
	if (st == &legacy)
		legacy_order(st);
	run_until_empty(st);
	learn(st->vc);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	LOCK;
	CUstream_st *st = S(s);
	while (step(st, 1))
		;
	if (!st->q.empty())
		return set_error(cudaErrorNotReady);
	learn(st->vc);
	return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg)
{
	LOCK;
	CUstream_st *st = S(s);
	if (st->dead)
		return set_error(cudaErrorInvalidResourceHandle);
	legacy_order(st);
	/* marked, so that a query never runs it: it may wait for the host */
	st->q.push_back(cuemu_op{[=]() { fn(arg); }, host_fn_mark, next_seq++, {}, nullptr, 0, 0, 0, {}});
	stamp(st, st->q.back());
	return cudaSuccess;
}

/* ---- events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	CUevent_st *ev = new CUevent_st();
	ev->flags = flags;
	*e = ev;
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	LOCK;
	if (!e)
		return set_error(cudaErrorInvalidResourceHandle);
	/* as the runtime does, the call returns at once; a record or wait
	 * still queued keeps it until done (no drain here: one would wait
	 * for a collective that a GPU leaves running) */
	CUevent_st *ev = (CUevent_st *)e;
	if (ev->dead)
		cuemu::fail("cudaEventDestroy(%p): destroyed twice", e);
	ev->dead = 1;
	release_event(ev);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	LOCK;
	CUevent_st *ev = (CUevent_st *)e;
	if (!ev)
		return set_error(cudaErrorInvalidResourceHandle);
	CUstream_st *st = S(s);
	uint64_t gen = ++ev->recorded;
	ev->stream = st;
	if (ev->dead)
		cuemu::fail("cudaEventRecord(%p): a destroyed event", e);
	cudaError_t r = cuemu::enqueue(s, [=]() {
		ev->done = gen;
		ev->time_ms = clock_ms;
		release_event(ev);
	}, "cudaEventRecord");
	if (r == cudaSuccess)
		ev->vc = st->vc;
	return r;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	LOCK;
	CUevent_st *ev = (CUevent_st *)e;
	if (!ev)
		return set_error(cudaErrorInvalidResourceHandle);
	/* progress, but never into a host function (it may be waiting for
	 * this very thread) */
	if (ev->done >= ev->recorded || reach(ev, ev->recorded, ev->stream, 1, 0)) {
		learn(ev->vc);
		return cudaSuccess;
	}
	/* as the runtime does, the answer is also the thread's last error */
	return set_error(cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	LOCK;
	CUevent_st *ev = (CUevent_st *)e;
	if (!ev)
		return set_error(cudaErrorInvalidResourceHandle);
	reach(ev, ev->recorded, ev->stream, 0, 1);
	learn(ev->vc);
	return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
	LOCK;
	CUevent_st *ev = (CUevent_st *)e;
	if (!ev || flags)
		return set_error(ev ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
	if (ev->recorded == 0)
		return cudaSuccess; /* never recorded: nothing to wait for */
	if (ev->dead)
		cuemu::fail("cudaStreamWaitEvent(%p): a destroyed event", e);
	uint64_t gen = ev->recorded;
	CUstream_st *from = ev->stream;
	ev->waiters++;
	join(S(s)->vc, ev->vc);
	return cuemu::enqueue_poll(s, [=]() {
		if (!reach(ev, gen, from, 0, 0))
			return false;
		ev->waiters--;
		release_event(ev);
		return true;
	}, "cudaStreamWaitEvent", {}, 0);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	LOCK;
	CUevent_st *x = (CUevent_st *)a, *y = (CUevent_st *)b;
	if (!ms)
		return set_error(cudaErrorInvalidValue);
	if (!x || !y || !x->recorded || !y->recorded ||
	    (x->flags & cudaEventDisableTiming) || (y->flags & cudaEventDisableTiming))
		return set_error(cudaErrorInvalidResourceHandle);
	if (x->done < x->recorded || y->done < y->recorded)
		return set_error(cudaErrorNotReady);
	*ms = (float)(y->time_ms - x->time_ms);
	return cudaSuccess;
}

} /* extern "C" */
