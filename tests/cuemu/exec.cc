/*
 * exec.cc - the kernel executor of the CUDA emulation: a grid as blocks
 * one after another, a block as fibers (one per thread) switched at
 * barriers and warp collectives, and the checks cuemu.h lists.
 *
 * Fibers switch with a few instructions of assembly on x86-64 (ucontext
 * elsewhere, which is slower: it saves the signal mask with a system
 * call). Stacks come from a pool and go back to it when their thread
 * returns, so a kernel without barriers runs its threads one after the
 * other on one warm stack.
 *
 * CUEMU_LAUNCH_LOG=FILE appends one line per launch accepted, in the
 * order the host issued them: "KERNEL grid X Y Z block X Y Z", the
 * kernel as its launch names it (xent_fused<T>), for the tests that
 * count which kernels a step runs.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mutex>
#include <vector>

#include "cuemu.h"
#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/common_interface_defs.h>
enum { STACK = 256 << 10 };
#else
enum { STACK = 64 << 10 };
#endif

thread_local uint3 threadIdx CUEMU_TLS;
thread_local uint3 blockIdx CUEMU_TLS;
thread_local dim3 blockDim CUEMU_TLS;
thread_local dim3 gridDim CUEMU_TLS;

/* ---- context switch ---- */

#if defined(__x86_64__)
extern "C" void cuemu_switch(void **save_sp, void *to_sp);
__asm__(".text\n"
	".globl cuemu_switch\n"
	".type cuemu_switch,@function\n"
	"cuemu_switch:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n"
	"\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tmovq %rsp, (%rdi)\n"
	"\tmovq %rsi, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n"
	"\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
	"\tret\n"
	".size cuemu_switch, .-cuemu_switch\n"
	".section .note.GNU-stack,\"\",@progbits\n"
	".text\n");
#else
#include <ucontext.h>
#endif

namespace {

enum fstate { F_RUN, F_BARRIER, F_WARP, F_DONE };

struct fiber {
	void *sp;
	char *stack;
	int state;
	int started;
	unsigned linear;
	uint3 tid;
	uint64_t xval, xres;
	int xsrc, xpred;
	void *xarg;
#ifdef CUEMU_ASAN
	void *fake;
#endif
#if !defined(__x86_64__)
	ucontext_t uc;
#endif
};

struct warp {
	unsigned arrived, mask;
	const char *what;
};

struct block_run {
	const cuemu::site *at;
	cuemu::body_fn body;
	void *closure;
	std::vector<fiber> f;
	warp w[32];
	unsigned cur;
	void *sched_sp;
#if !defined(__x86_64__)
	ucontext_t sched_uc;
#endif
#ifdef CUEMU_ASAN
	const void *sched_bottom;
	size_t sched_size;
#endif
};

thread_local block_run *running CUEMU_TLS;
thread_local std::vector<char *> stack_pool CUEMU_TLS;

char *stack_get()
{
	if (!stack_pool.empty()) {
		char *s = stack_pool.back();
		stack_pool.pop_back();
		return s;
	}
	/* a guard page below, so an overflow faults instead of corrupting */
	char *m = (char *)mmap(NULL, STACK + 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		cuemu::fail("no memory for a thread's stack");
	mprotect(m, 4096, PROT_NONE);
	return m + 4096;
}

[[noreturn]] void kfail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void kfail(const char *fmt, ...)
{
	block_run *b = running;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (b)
		cuemu::fail("kernel %s (%s:%d), block (%u,%u,%u) of (%u,%u,%u), %u threads: %s",
			    b->at->kernel, b->at->file, b->at->line, blockIdx.x, blockIdx.y,
			    blockIdx.z, gridDim.x, gridDim.y, gridDim.z, (unsigned)b->f.size(), msg);
	cuemu::fail("%s", msg);
}

/* From a fiber back to the scheduler. */
void yield_to_scheduler(fiber &f, int exiting)
{
	block_run *b = running;
#ifdef CUEMU_ASAN
	__sanitizer_start_switch_fiber(exiting ? NULL : &f.fake, b->sched_bottom,
				       b->sched_size);
#else
	(void)exiting;
#endif
#if defined(__x86_64__)
	cuemu_switch(&f.sp, b->sched_sp);
#else
	swapcontext(&f.uc, &b->sched_uc);
#endif
#ifdef CUEMU_ASAN
	__sanitizer_finish_switch_fiber(f.fake, NULL, NULL);
#endif
}

void fiber_main()
{
	block_run *b = running;
#ifdef CUEMU_ASAN
	__sanitizer_finish_switch_fiber(NULL, &b->sched_bottom, &b->sched_size);
#endif
	b->body(b->closure);
	/* the same b: a fiber only runs inside its block */
	fiber &g = b->f[b->cur];
	g.state = F_DONE;
	yield_to_scheduler(g, 1);
	__builtin_unreachable();
}

#if !defined(__x86_64__)
void fiber_entry_uc() { fiber_main(); }
#endif

void resume(block_run *b, unsigned i)
{
	fiber &f = b->f[i];
	b->cur = i;
	threadIdx = f.tid;
	if (!f.started) {
		f.started = 1;
		f.stack = stack_get();
#if defined(__x86_64__)
		void **top = (void **)(f.stack + STACK);
		*--top = NULL;                /* fiber_main's return address */
		*--top = (void *)&fiber_main; /* where cuemu_switch returns */
		for (int r = 0; r < 6; r++)
			*--top = NULL;        /* rbp rbx r12 r13 r14 r15 */
		f.sp = top;
#else
		getcontext(&f.uc);
		f.uc.uc_stack.ss_sp = f.stack;
		f.uc.uc_stack.ss_size = STACK;
		f.uc.uc_link = NULL;
		makecontext(&f.uc, fiber_entry_uc, 0);
#endif
	}
#ifdef CUEMU_ASAN
	void *fake = NULL;
	__sanitizer_start_switch_fiber(&fake, f.stack, STACK);
#endif
#if defined(__x86_64__)
	cuemu_switch(&b->sched_sp, f.sp);
#else
	swapcontext(&b->sched_uc, &f.uc);
#endif
#ifdef CUEMU_ASAN
	__sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
	fiber &g = b->f[i];
	if (g.state == F_DONE) {
		stack_pool.push_back(g.stack);
		g.stack = NULL;
	}
}

const char *state_name(int s)
{
	switch (s) {
	case F_BARRIER: return "waits at __syncthreads";
	case F_WARP: return "waits in a warp collective";
	case F_DONE: return "has returned";
	default: return "runs";
	}
}

/* Nothing can run: release a barrier every live thread has reached, or
 * say why the block is stuck (what a GPU would hang on or mis-compute). */
void unstick(block_run *b)
{
	unsigned n = (unsigned)b->f.size(), done = 0, bar = 0, wrp = 0;
	for (unsigned i = 0; i < n; i++) {
		done += b->f[i].state == F_DONE;
		bar += b->f[i].state == F_BARRIER;
		wrp += b->f[i].state == F_WARP;
	}
	if (wrp) {
		for (unsigned w = 0; w < (n + 31) / 32; w++) {
			warp &x = b->w[w];
			if (!x.arrived)
				continue;
			for (unsigned l = 0; l < 32; l++) {
				if (!(x.mask >> l & 1) || (x.arrived >> l & 1))
					continue;
				unsigned t = w * 32 + l;
				if (t >= n)
					kfail("warp %u: %s with mask %#x names lane %u, which this "
					      "block of %u threads does not have", w, x.what, x.mask, l, n);
				kfail("warp %u: %s with mask %#x: lanes %#x arrived, lane %u %s "
				      "(a warp collective in divergent code, or a wrong mask)",
				      w, x.what, x.mask, x.arrived, l, state_name(b->f[t].state));
			}
		}
		kfail("a warp collective that cannot complete");
	}
	if (bar && done) {
		unsigned first = 0;
		while (b->f[first].state != F_DONE)
			first++;
		kfail("__syncthreads reached by %u threads while %u have returned (thread %u "
		      "first): a barrier in a divergent branch", bar, done, first);
	}
	for (unsigned i = 0; i < n; i++)
		if (b->f[i].state == F_BARRIER)
			b->f[i].state = F_RUN;
}

void run_block(block_run *b, const std::vector<unsigned> &ord)
{
	unsigned n = (unsigned)b->f.size();
	for (;;) {
		int ran = 0;
		for (unsigned k = 0; k < n; k++) {
			unsigned i = ord[k];
			if (b->f[i].state == F_RUN) {
				resume(b, i);
				ran = 1;
			}
		}
		if (ran)
			continue;
		unsigned done = 0;
		for (unsigned i = 0; i < n; i++)
			done += b->f[i].state == F_DONE;
		if (done == n)
			return;
		unstick(b);
	}
}

struct launch_rec {
	cuemu::site at;
	dim3 grid, block;
	size_t shmem;
	cuemu::body_fn body;
	void *closure;
	void (*destroy)(void *);
	char *sh_lo, *sh_hi;
};

uint64_t launches;

/* The running launch's dynamic shared memory (cuemu::dynamic_shared). */
thread_local char *dyn_shared CUEMU_TLS;

/*
 * n bytes of dynamic shared memory, 128-byte aligned, that end where a
 * page that cannot be touched begins (n rounded up to 128), so an access
 * past them faults; the calling thread's, kept from launch to launch.
 */
char *dyn_region(size_t n)
{
	static thread_local char *map;
	static thread_local size_t cap;
	size_t need = (n + 127) / 128 * 128;
	if (need > cap || !map) {
		if (map)
			munmap(map, cap + 4096);
		cap = (need + 4095) / 4096 * 4096;
		map = (char *)mmap(NULL, cap + 4096, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (map == MAP_FAILED)
			cuemu::fail("no memory for %zu bytes of dynamic shared memory", n);
		mprotect(map + cap, 4096, PROT_NONE);
	}
	return map + cap - need;
}

void run_grid(const launch_rec &L)
{
	if (running)
		kfail("a kernel launched from inside a kernel (dynamic parallelism is not used here)");
	block_run b;
	b.at = &L.at;
	b.body = L.body;
	b.closure = L.closure;
	unsigned n = L.block.x * L.block.y * L.block.z;
	b.f.resize(n);
	gridDim = L.grid;
	blockDim = L.block;
	uint64_t nblocks = (uint64_t)L.grid.x * L.grid.y * L.grid.z;
	uint64_t salt = ++launches;
	std::vector<unsigned> ord(n);
	for (unsigned k = 0; k < n; k++)
		ord[k] = (unsigned)cuemu::permute(k, n, salt * 2);
	size_t dyn_bytes = (L.shmem + 127) / 128 * 128;
	dyn_shared = dyn_region(L.shmem);
	running = &b;
	for (uint64_t k = 0; k < nblocks; k++) {
		uint64_t id = cuemu::permute(k, nblocks, salt * 2 + 1);
		blockIdx.x = (unsigned)(id % L.grid.x);
		blockIdx.y = (unsigned)(id / L.grid.x % L.grid.y);
		blockIdx.z = (unsigned)(id / L.grid.x / L.grid.y);
		for (unsigned i = 0; i < n; i++) {
			fiber &f = b.f[i];
			f.state = F_RUN;
			f.started = 0;
			f.linear = i;
			f.tid.x = i % L.block.x;
			f.tid.y = i / L.block.x % L.block.y;
			f.tid.z = i / L.block.x / L.block.y;
		}
		memset(b.w, 0, sizeof b.w);
		/* garbage for every read of shared memory before a write, a
		 * different byte for each block */
		int junk = (int)((cuemu::seed() + salt * 131 + k * 29) % 251 + 3);
		if (L.sh_hi > L.sh_lo)
			memset(L.sh_lo, junk, (size_t)(L.sh_hi - L.sh_lo));
		memset(dyn_shared, 255 - junk, dyn_bytes);
		run_block(&b, ord);
	}
	running = NULL;
	dyn_shared = NULL;
}

} /* namespace */

namespace cuemu {

void *dynamic_shared()
{
	if (!running)
		fail("an extern __shared__ array read outside a kernel (declared at file scope?): "
		     "declare it in the kernel or in a device function");
	return dyn_shared;
}

void submit(const site &at, const void *fn, dim3 grid, dim3 block, size_t shmem,
	    cudaStream_t s, body_fn body, void *closure,
	    void (*destroy)(void *), char *shared_lo, char *shared_hi,
	    const void *const *ptrs, const int *writes, int nptrs)
{
	/* sm_90: cudaDeviceProp's maxThreadsDim, maxGridSize,
	 * maxThreadsPerBlock (cudaErrorInvalidConfiguration); dynamic shared
	 * memory past the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize
	 * (48 KiB, sharedMemPerBlock, unless raised) or past
	 * sharedMemPerBlockOptin (227 KiB, which no attribute raises) is
	 * cudaErrorInvalidValue, "invalid argument" */
	uint64_t threads = (uint64_t)block.x * block.y * block.z;
	size_t allowed = max_dynamic_shared(fn);
	const char *bad = NULL;
	char why[512];
	cudaError_t e = cudaErrorInvalidConfiguration;
	if (!block.x || !block.y || !block.z || !grid.x || !grid.y || !grid.z)
		bad = "a zero dimension";
	else if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024)
		bad = "more than 1024 threads a block, or a block dimension past (1024, 1024, 64)";
	else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
		bad = "a grid dimension past (2^31-1, 65535, 65535)";
	else if (shmem > SHARED_OPTIN) {
		snprintf(why, sizeof why, "%zu bytes of dynamic shared memory, past the %d (227 KiB) "
			 "a block of sm_90 can have", shmem, SHARED_OPTIN);
		bad = why;
		e = cudaErrorInvalidValue;
	} else if (shmem > allowed) {
		snprintf(why, sizeof why, "%zu bytes of dynamic shared memory, past the kernel's "
			 "%zu: above %d (48 KiB) a launch needs cudaFuncSetAttribute(kernel, "
			 "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first%s", shmem, allowed,
			 SHARED_DEFAULT, fn ? "" : " (a kernel template launched with its arguments "
			 "deduced has none here: name them at the launch)");
		bad = why;
		e = cudaErrorInvalidValue;
	}
	if (bad) {
		fprintf(stderr, "cuemu: kernel %s (%s:%d): launch <<<(%u,%u,%u), (%u,%u,%u), %zu>>> "
			"refused: %s\n", at.kernel, at.file, at.line, grid.x, grid.y, grid.z, block.x,
			block.y, block.z, shmem, bad);
		destroy(closure);
		set_error(e);
		return;
	}
	if (const char *log = getenv("CUEMU_LAUNCH_LOG")) {
		if (FILE *f = fopen(log, "a")) {
			fprintf(f, "%s grid %u %u %u block %u %u %u\n", at.kernel, grid.x, grid.y,
				grid.z, block.x, block.y, block.z);
			fclose(f);
		}
	}
	module_load((const void *)body, at.kernel);
	launch_rec L = {at, grid, block, shmem, body, closure, destroy, shared_lo, shared_hi};
	/* a kernel's extent is unknown: its pointers' first bytes */
	std::vector<access> acc;
	for (int i = 0; i < nptrs; i++)
		if (is_device(ptrs[i]))
			acc.push_back({(uintptr_t)ptrs[i], (uintptr_t)ptrs[i] + 1, writes[i]});
	if (enqueue(s, [L]() {
		    run_grid(L);
		    L.destroy(L.closure);
	    }, at.kernel, acc) != cudaSuccess)
		destroy(closure);
}

void syncthreads()
{
	block_run *b = running;
	if (!b)
		fail("__syncthreads outside a kernel");
	fiber &f = b->f[b->cur];
	f.state = F_BARRIER;
	yield_to_scheduler(f, 0);
}

int lane()
{
	block_run *b = running;
	if (!b)
		fail("a warp function outside a kernel");
	return (int)(b->f[b->cur].linear % 32);
}

unsigned active_lanes()
{
	block_run *b = running;
	if (!b)
		fail("__activemask outside a kernel");
	unsigned w = b->f[b->cur].linear / 32, m = 0;
	for (unsigned l = 0; l < 32 && w * 32 + l < b->f.size(); l++)
		m |= (b->f[w * 32 + l].state != F_DONE) << l;
	return m;
}

void misaligned(const void *p, size_t bytes, size_t align, const char *what)
{
	if (!running)
		fail("%s outside a kernel", what);
	unsigned t = running->f[running->cur].linear;
	kfail("thread %u: %s of %zu bytes at %p, which is not %zu-byte aligned (a misaligned "
	      "address fault on a GPU)", t, what, bytes, p, align);
}

void misaligned_arg(const site &at, int argno, const void *p, size_t align)
{
	fail("kernel %s (%s:%d): launch argument %d, %p, is not %zu-byte aligned, as its type "
	     "is (a misaligned address fault on a GPU at its first access)", at.kernel, at.file,
	     at.line, argno, p, align);
}

/* One warp collective: every lane of mask arrives, the last one
 * computes everyone's result (so no lane can overwrite its value before
 * the others have read it), the others wait. */
static uint64_t collective(unsigned mask, uint64_t v, int src, int pred, int vote,
			   const char *what, void *arg = NULL,
			   void (*op)(void *const *args) = NULL)
{
	block_run *b = running;
	if (!b)
		fail("%s outside a kernel", what);
	fiber &f = b->f[b->cur];
	unsigned l = f.linear % 32, wi = f.linear / 32;
	warp &w = b->w[wi];
	if (!(mask >> l & 1))
		kfail("warp %u: lane %u calls %s with mask %#x, which leaves it out", wi, l, what,
		      mask);
	if (w.arrived && (w.mask != mask || strcmp(w.what, what) != 0))
		kfail("warp %u: lane %u calls %s with mask %#x while lanes %#x wait in %s "
		      "with mask %#x", wi, l, what, mask, w.arrived, w.what, w.mask);
	if (!w.arrived) {
		w.mask = mask;
		w.what = what;
	}
	f.xval = v;
	f.xsrc = src;
	f.xpred = pred != 0;
	f.xarg = arg;
	w.arrived |= 1u << l;
	if (w.arrived != mask) {
		f.state = F_WARP;
		yield_to_scheduler(f, 0);
		return b->f[b->cur].xres;
	}
	if (op) {
		/* every lane's argument, in lane order, to the last one */
		void *args[32];
		for (unsigned k = 0; k < 32; k++)
			args[k] = b->f[wi * 32 + k].xarg;
		op(args);
	}
	unsigned ballot = 0;
	for (unsigned k = 0; k < 32; k++)
		if (mask >> k & 1)
			ballot |= (unsigned)b->f[wi * 32 + k].xpred << k;
	for (unsigned k = 0; k < 32; k++) {
		if (!(mask >> k & 1))
			continue;
		fiber &g = b->f[wi * 32 + k];
		if (vote) {
			g.xres = ballot;
		} else {
			if (g.xsrc < 0 || g.xsrc > 31 || !(mask >> g.xsrc & 1))
				kfail("warp %u: lane %u's %s reads lane %d, outside the mask %#x "
				      "(its value is undefined)", wi, k, what, g.xsrc, mask);
			g.xres = b->f[wi * 32 + g.xsrc].xval;
		}
		if (k != l)
			g.state = F_RUN;
	}
	w.arrived = 0;
	return f.xres;
}

uint64_t warp_exchange(unsigned mask, uint64_t v, int src, const char *what)
{
	return collective(mask, v, src, 0, 0, what);
}

unsigned warp_vote(unsigned mask, int pred, const char *what)
{
	return (unsigned)collective(mask, 0, 0, pred, 1, what);
}

void warp_all(const char *what, void *arg, void (*op)(void *const *args))
{
	collective(0xffffffffu, 0, 0, 1, 1, what, arg, op);
}

void kernel_fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	kfail("%s", msg);
}

/*
 * The layout of a kind of WMMA fragment in this run: a permutation of
 * its 256 elements drawn from CUEMU_SEED whatever the order, one per
 * kind, the same for every fragment of the kind (as on a GPU, where it
 * is the architecture's and the fragment type's).
 */
const uint16_t *wmma_layout(unsigned kind)
{
	enum { KINDS = 16 };
	static uint16_t tab[KINDS][256];
	static std::once_flag once;
	std::call_once(once, [] {
		for (unsigned k = 0; k < KINDS; k++)
			for (unsigned e = 0; e < 256; e++)
				tab[k][e] = (uint16_t)seeded_permute(e, 256, 0x77a11ull + k);
	});
	if (kind >= KINDS)
		fail("wmma_layout: kind %u", kind);
	return tab[kind];
}

} /* namespace cuemu */
