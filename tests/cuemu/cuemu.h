/*
 * cuemu.h - CUDA's execution model on the CPU, the device side: what nvcc
 * gives a .cu file and g++ does not. Included by the emulation's
 * cuda_runtime.h (tests/cuemu/include), after the toolkit's own header.
 *
 * A launch runs every block of the grid, one block at a time, in the
 * order CUEMU_ORDER asks (forward, reverse, or shuffle with CUEMU_SEED),
 * and within a block every thread as a fiber (exec.cc), in that order
 * too. A thread runs until it reaches a barrier, a warp collective or
 * its end. Checked, with an error naming the kernel and the block:
 *   - __syncthreads reached by some threads of a block while others have
 *     returned or wait elsewhere (a barrier in a divergent branch);
 *   - a warp shuffle, vote or __syncwarp whose mask leaves out the
 *     calling lane, disagrees with another lane's mask, reads a lane
 *     outside it, or names a lane that never arrives;
 *   - nvcuda::wmma's collectives (include/mma.h) not called by the whole
 *     warp with the same arguments, or with a misaligned pointer or ldm;
 *   - the launch limits of sm_90 (threads and dimensions of a block, the
 *     grid's dimensions), and its dynamic shared memory: up to 48 KiB a
 *     launch, more only up to what cudaFuncSetAttribute's
 *     cudaFuncAttributeMaxDynamicSharedMemorySize allowed the kernel
 *     (runtime.cc), never past the 227 KiB a block can opt in to; a
 *     refused launch is said on stderr with the kernel's name and is
 *     the thread's last error, cudaErrorInvalidValue, as on the device;
 *   - a load or store through the cache-hint intrinsics (__ldg, __ldcg,
 *     __ldcs, __stcg, __stcs) at an address that is not a multiple of
 *     its type's alignment: a 16-byte int4 or float4 at an address that
 *     is no multiple of 16 is a misaligned address fault on a GPU, and
 *     works on the CPU. lib/nn's 128-bit accesses (kernels.cuh's
 *     Packed128) all go through these, so each one is checked here.
 * __shared__ variables live in one section that is filled with a new
 * garbage pattern before every block, so a read before a write gives a
 * different value from run to run and from block to block. An extern
 * __shared__ array (launch-rewrite makes it a pointer to
 * cuemu::dynamic_shared()) is the launch's dynamic shared memory: as many
 * bytes as its third argument asks, 128-byte aligned, refilled with
 * garbage before every block too, ending at a page that faults when
 * touched (an access up to 127 bytes past the end is not seen unless the
 * size is a multiple of 128). A kernel's static shared memory is not
 * added to its dynamic (the section holds every kernel's), so a launch
 * whose sum passes 48 KiB, or the attribute's maximum, passes here.
 *
 * It cannot see races within a warp (the lanes of a warp run one after
 * the other between collectives), real timing, or the GPU's own
 * arithmetic: float operations are the CPU's, except the __f*_rn
 * intrinsics, which give the canonical NaN 0x7fffffff as the GPU does.
 */
#ifndef CUEMU_H
#define CUEMU_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

/* Device code is host code here. */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#define __global__ __attribute__((unused)) /* a kernel in a header need not be launched */
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static __attribute__((section("cuemu_shared"), aligned(16)))
/* What the library's device code tests for (lib/comm/reduce.h). */
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif

#define CUEMU_TLS __attribute__((tls_model("initial-exec")))
extern thread_local uint3 threadIdx CUEMU_TLS;
extern thread_local uint3 blockIdx CUEMU_TLS;
extern thread_local dim3 blockDim CUEMU_TLS;
extern thread_local dim3 gridDim CUEMU_TLS;
static const int warpSize = 32;

/* The section of the __shared__ variables (the linker names its ends). */
extern "C" char __start_cuemu_shared[] __attribute__((weak));
extern "C" char __stop_cuemu_shared[] __attribute__((weak));

namespace cuemu {

/* Where a launch was written, for the messages. */
struct site {
	const char *kernel, *file;
	int line;
};

typedef void (*body_fn)(void *closure);

/*
 * Check the configuration and queue the launch on stream s (exec.cc); a
 * bad configuration is the thread's last error, as for a real launch.
 * Takes the closure; destroy frees it once the kernel has run.
 */
void submit(const site &at, const void *fn, dim3 grid, dim3 block, size_t shmem,
	    cudaStream_t s, body_fn body, void *closure,
	    void (*destroy)(void *), char *shared_lo, char *shared_hi,
	    const void *const *ptrs, const int *writes, int nptrs);

/* The running block's dynamic shared memory (extern __shared__). */
void *dynamic_shared();

/* Stops the run: argument argno (from 1) of the launch at at, p, is not
 * aligned to its type's align bytes. */
[[noreturn]] void misaligned_arg(const site &at, int argno, const void *p, size_t align);

/* A pointer argument of a launch: where the kernel may read (pointer to
 * const) or write, for the runtime's check of races between streams; and
 * aligned to its type, which the kernel's accesses through it assume (a
 * misaligned address fault on a GPU, at the first access: here at the
 * launch, named). argno counts every argument. */
template <typename T>
inline void note_arg(const site &at, const T &v, const void **p, int *w, int &n, int &argno)
{
	argno++;
	if constexpr (std::is_pointer<T>::value) {
		typedef typename std::remove_cv<typename std::remove_pointer<T>::type>::type E;
		if constexpr (!std::is_void<E>::value && !std::is_function<E>::value)
			if ((uintptr_t)v % alignof(E))
				misaligned_arg(at, argno, (const void *)v, alignof(E));
		p[n] = (const void *)v;
		w[n] = !std::is_const<typename std::remove_pointer<T>::type>::value;
		n++;
	}
}

void syncthreads();
/* The lane's value of v after a warp collective over mask in which
 * every lane names the lane it reads (src). */
uint64_t warp_exchange(unsigned mask, uint64_t v, int src, const char *what);
/* The ballot of pred over mask. */
unsigned warp_vote(unsigned mask, int pred, const char *what);
int lane();
unsigned active_lanes();
/* A collective of the whole warp named what (nvcuda::wmma's _sync
 * functions, include/mma.h): every lane of the warp arrives with arg,
 * checked as the shuffles' full mask is; the last calls op with the 32
 * lanes' args in lane order, the others wait for it. */
void warp_all(const char *what, void *arg, void (*op)(void *const *args));
/* Stop the run with a message naming the running kernel and block. */
[[noreturn]] void kernel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* This run's layout of a kind of WMMA fragment: element e (lane e / 8,
 * x[e % 8]) holds the matrix's element at row tab[e] / 16, column
 * tab[e] % 16 (a permutation by CUEMU_SEED). */
const uint16_t *wmma_layout(unsigned kind);
/* Stops the kernel: what (an intrinsic) of bytes at p, not aligned to align. */
[[noreturn]] void misaligned(const void *p, size_t bytes, size_t align, const char *what);
template <typename V> inline void check_aligned(const V *p, const char *what)
{
	if ((uintptr_t)p % alignof(V))
		misaligned((const void *)p, sizeof(V), alignof(V), what);
}

/*
 * A launch: cuemu::launch_at("k", __FILE__, __LINE__, grid, block, shmem,
 * stream) gives a launcher; .kernel(f) names the kernel as a callable f
 * (a generic lambda calling k, so that a kernel template's arguments are
 * deduced from the launch's arguments as nvcc does); then (args) copies
 * the arguments, as a launch does, and queues the grid.
 */
template <typename F, typename... A> struct closure {
	F f;
	std::tuple<A...> args;
};

struct config {
	site at;
	const void *fn; /* the kernel, as cudaFuncSetAttribute names it */
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
};

template <typename F> struct launcher {
	config c;
	F f;

	template <typename... A> void operator()(A &&...a) const
	{
		typedef closure<F, typename std::decay<A>::type...> C;
		C *p = new C{f, std::tuple<typename std::decay<A>::type...>(std::forward<A>(a)...)};
		const void *ptrs[sizeof...(A) + 1];
		int wr[sizeof...(A) + 1], n = 0, argno = 0;
		std::apply([&](const auto &...x) { (note_arg(c.at, x, ptrs, wr, n, argno), ...); },
			   p->args);
		submit(c.at, c.fn, c.grid, c.block, c.shmem, c.stream, &run<C>, p, &destroy<C>,
		       __start_cuemu_shared, __stop_cuemu_shared, ptrs, wr, n);
	}
	template <typename C> static void run(void *p)
	{
		C *c = static_cast<C *>(p);
		std::apply(c->f, c->args);
	}
	template <typename C> static void destroy(void *p)
	{
		delete static_cast<C *>(p);
	}
};

struct pending {
	config c;
	template <typename F> launcher<F> kernel(F f) const
	{
		return launcher<F>{c, f};
	}
};

/* k<<<grid, block, shmem, stream>>>(args) is rewritten (launch-rewrite) into
 * cuemu::launch_at("k", __FILE__, __LINE__, &k, grid, block, shmem, stream)
 *	.kernel([](auto... p) { k(p...); })(args) */
template <typename K>
inline pending launch_at(const char *name, const char *file, int line, K *k, dim3 grid,
			 dim3 block, size_t shmem = 0, cudaStream_t s = 0)
{
	return pending{{{name, file, line}, reinterpret_cast<const void *>(k), grid, block, shmem,
			s}};
}
/* a kernel template launched with its arguments deduced: no attributes */
inline pending launch_at(const char *name, const char *file, int line, std::nullptr_t, dim3 grid,
			 dim3 block, size_t shmem = 0, cudaStream_t s = 0)
{
	return pending{{{name, file, line}, nullptr, grid, block, shmem, s}};
}

template <typename T> inline T shfl(unsigned mask, T v, int src, const char *what)
{
	static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
		      "a shuffle moves at most 8 bytes");
	uint64_t b = 0;
	memcpy(&b, &v, sizeof v);
	b = warp_exchange(mask, b, src, what);
	T r;
	memcpy(&r, &b, sizeof r);
	return r;
}

/* The GPU's arithmetic gives this NaN whatever the operands' payloads. */
inline float gpu_nan(float r)
{
	if (r != r) {
		uint32_t u = 0x7fffffffu;
		memcpy(&r, &u, 4);
	}
	return r;
}

} /* namespace cuemu */

/* The runtime's C++ API that the toolkit's cuda_runtime.h gives nvcc
 * only: a kernel as its function. */
template <class T>
inline cudaError_t cudaFuncSetAttribute(T *func, enum cudaFuncAttribute attr, int value)
{
	return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}

inline void __syncthreads() { cuemu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	cuemu::warp_vote(mask, 1, "__syncwarp");
}
inline unsigned __activemask() { return cuemu::active_lanes(); }
inline unsigned __ballot_sync(unsigned mask, int pred)
{
	return cuemu::warp_vote(mask, pred, "__ballot_sync");
}
inline int __all_sync(unsigned mask, int pred)
{
	return cuemu::warp_vote(mask, pred, "__all_sync") == mask;
}
inline int __any_sync(unsigned mask, int pred)
{
	return cuemu::warp_vote(mask, pred, "__any_sync") != 0;
}

/* Lanes past the caller's segment of width read their own value. */
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
	int l = cuemu::lane(), src = l ^ lane_mask;
	if (src / width != l / width)
		src = l;
	return cuemu::shfl(mask, v, src, "__shfl_xor_sync");
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32)
{
	int l = cuemu::lane();
	return cuemu::shfl(mask, v, l / width * width + src_lane % width, "__shfl_sync");
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
	int l = cuemu::lane(), src = l + (int)delta;
	if (src / width != l / width)
		src = l;
	return cuemu::shfl(mask, v, src, "__shfl_down_sync");
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
	int l = cuemu::lane(), src = l - (int)delta;
	if (src < l / width * width)
		src = l;
	return cuemu::shfl(mask, v, src, "__shfl_up_sync");
}

/* The cache hints change nothing here but the alignment check. */
template <typename V> inline V cuemu_ld(const V *p, const char *what)
{
	cuemu::check_aligned(p, what);
	V v;
	memcpy((void *)&v, (const void *)p, sizeof v);
	return v;
}
template <typename V> inline void cuemu_st(V *p, const V &v, const char *what)
{
	cuemu::check_aligned(p, what);
	memcpy((void *)p, (const void *)&v, sizeof v);
}
template <typename V> inline V __ldg(const V *p) { return cuemu_ld(p, "__ldg"); }
template <typename V> inline V __ldcg(const V *p) { return cuemu_ld(p, "__ldcg"); }
template <typename V> inline V __ldcs(const V *p) { return cuemu_ld(p, "__ldcs"); }
template <typename V> inline void __stcg(V *p, V v) { cuemu_st(p, v, "__stcg"); }
template <typename V> inline void __stcs(V *p, V v) { cuemu_st(p, v, "__stcs"); }

inline float __fadd_rn(float a, float b) { return cuemu::gpu_nan(a + b); }
inline float __fsub_rn(float a, float b) { return cuemu::gpu_nan(a - b); }
inline float __fmul_rn(float a, float b) { return cuemu::gpu_nan(a * b); }
inline float __fdiv_rn(float a, float b) { return cuemu::gpu_nan(a / b); }
inline float __fmaf_rn(float a, float b, float c) { return cuemu::gpu_nan(fmaf(a, b, c)); }

#endif
