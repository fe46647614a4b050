/*
 * internal.h - what the pieces of libcuemu.so share: the fake runtime's
 * streams and memory map (runtime.cc), the kernel executor (exec.cc), the
 * fake cuBLASLt (cublaslt.cc) and NCCL (nccl.cc).
 */
#ifndef CUEMU_INTERNAL_H
#define CUEMU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <mutex>
#include <vector>

namespace cuemu {

/* The order of blocks, threads and ready streams: CUEMU_ORDER. */
enum order_kind { ORDER_FORWARD, ORDER_REVERSE, ORDER_SHUFFLE };
order_kind order();
uint64_t seed();

/* Print "cuemu: ..." and abort: a use of CUDA that a GPU would not
 * report reliably (a hang, garbage), so the test run must stop here. */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Set the calling thread's last error (cudaGetLastError) and return e. */
cudaError_t set_error(cudaError_t e);

/* Device memory [lo, hi) an operation reads or writes. */
struct access {
	uintptr_t lo, hi;
	int write;
};

/*
 * Queue fn on stream s (NULL: the legacy default stream), to run when a
 * synchronisation needs it. what names it in messages. acc: the device
 * memory it touches. When it runs, an operation queued earlier on
 * another stream that has not run yet is not ordered before it (it
 * would have run first); if the two touch the same memory and either
 * writes it, that is a race on a GPU, and reported as one.
 */
cudaError_t enqueue(cudaStream_t s, std::function<void()> fn, const char *what,
		    std::vector<access> acc = std::vector<access>());

/*
 * Queue an operation that may have to wait (a collective waiting for
 * the other ranks): fn is called, when the stream gets to it, until it
 * returns true; until then the stream goes no further, a
 * synchronisation waits and a query answers not ready. remote: it
 * waits for other processes, which the progress thread (see
 * progress_start) must not leave waiting on this one.
 */
cudaError_t enqueue_poll(cudaStream_t s, std::function<bool()> fn, const char *what,
			 std::vector<access> acc, int remote);

/* The runtime's lock, held while operations run: the fakes take it
 * where their state is shared with queued work. */
std::recursive_mutex &runtime_lock();

/* Start the thread that runs the streams holding remote work without
 * the host (a GPU's independent progress); once per process. */
void progress_start();

/*
 * Before the first launch of a kernel (key: one per kernel): the CUDA
 * runtime loads kernels when first launched (CUDA_MODULE_LOADING=LAZY,
 * the default since CUDA 12.2), and loading "might require context
 * synchronization" (CUDA programming guide, "Lazy Loading"). Here it
 * always does: the device is drained, and a host function queued on a
 * stream (which may wait for the launching thread) is a deadlock on a
 * GPU, reported as one.
 */
void module_load(const void *key, const char *kernel);

/* sm_90's shared memory a block: without opting in (sharedMemPerBlock),
 * and at most (sharedMemPerBlockOptin). */
enum { SHARED_DEFAULT = 48 << 10, SHARED_OPTIN = 227 << 10 };

/* The most dynamic shared memory a launch of kernel fn on the current
 * device may ask: SHARED_DEFAULT unless cudaFuncSetAttribute's
 * cudaFuncAttributeMaxDynamicSharedMemorySize set it (runtime.cc). */
size_t max_dynamic_shared(const void *fn);

/* 1 when [p, p+n) lies inside one live device allocation. */
int device_range(const void *p, size_t n);
/* 1 when p is inside a device allocation (any extent). */
int is_device(const void *p);

/* A position in a permutation of n (the order of CUEMU_ORDER, salt
 * varying it between uses). */
uint64_t permute(uint64_t i, uint64_t n, uint64_t salt);

/* A permutation of [0, n) drawn by (CUEMU_SEED, salt) whatever the
 * order: the layouts of WMMA fragments (exec.cc). */
uint64_t seeded_permute(uint64_t i, uint64_t n, uint64_t salt);

/* The next of a sequence of draws from CUEMU_SEED (the runtime's lock
 * held): which stream goes next in shuffled order. */
uint64_t draw(void);

} /* namespace cuemu */

#endif
