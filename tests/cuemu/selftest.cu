/*
 * selftest.cu - the CUDA emulation catches what it says it catches: each
 * defect below is planted in a small kernel, run in a child process, and
 * the emulation must stop it with a message naming the kernel and the
 * defect; correct kernels (a block tree, butterfly shuffles, votes) must
 * give the right values in every order. Built and run by check-cuemu
 * (tests/cuemu/cuemu.mk) in each order; the tests of the orders
 * themselves run this program again as children with CUEMU_ORDER set.
 * The fake cuBLASLt's GELU epilogues: their values against a double
 * reference, and the descriptors cublasLt.h's rules forbid refused.
 * Dynamic shared memory: a launch past 48 KiB without
 * cudaFuncSetAttribute, or past sm_90's 227 KiB, refused as on the
 * device and named; 227 KiB with the attribute usable to its last byte;
 * read before a write, garbage that differs between blocks and launches.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

__global__ void tree_sum(float *out, const float *in)
{
	__shared__ float sh[256];
	sh[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
	__syncthreads();
	for (int w = 128; w > 0; w >>= 1) {
		if ((int)threadIdx.x < w)
			sh[threadIdx.x] += sh[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = sh[0];
}

__global__ void warp_ops(float *sum, unsigned *ballot, int *down)
{
	float v = (float)threadIdx.x;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	unsigned b = __ballot_sync(0xffffffffu, threadIdx.x % 3 == 0);
	int d = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1);
	sum[threadIdx.x] = v;
	ballot[threadIdx.x] = b;
	down[threadIdx.x] = d;
}

/* ---- planted defects ---- */

__global__ void divergent_barrier(float *out)
{
	if (threadIdx.x < 16)
		__syncthreads();
	out[threadIdx.x] = 1.0f;
}

__global__ void half_warp_shuffle(float *out)
{
	float v = 1.0f;
	if (threadIdx.x % 32 < 16)
		v = __shfl_xor_sync(0xffffffffu, v, 1);
	out[threadIdx.x] = v;
}

__global__ void shuffle_outside_mask(float *out)
{
	float v = 1.0f;
	if (threadIdx.x < 16)
		v = __shfl_xor_sync(0x0000ffffu, v, 16);
	out[threadIdx.x] = v;
}

__global__ void masks_disagree(float *out)
{
	float v = __shfl_xor_sync(threadIdx.x < 16 ? 0x0000ffffu : 0xffffffffu, 1.0f, 1);
	out[threadIdx.x] = v;
}

__global__ void full_shuffle(float *out)
{
	out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/* Two rounds of a block sum without the barrier after reading sh[0]: the
 * thread writing sh[0] in the next round (thread 0, or with shift 1
 * thread 63) may do so before the others have read it. Which order shows
 * it depends on which thread writes it: the reason for two orders. */
__global__ void missing_trailing_barrier(float *out, int shift)
{
	__shared__ float sh[64];
	float r = 0.0f;
	for (int round = 1; round <= 2; round++) {
		sh[(threadIdx.x + shift) % 64] = (float)round;
		__syncthreads();
		for (int w = 32; w > 0; w >>= 1) {
			if ((int)threadIdx.x < w)
				sh[threadIdx.x] += sh[threadIdx.x + w];
			__syncthreads();
		}
		r += sh[0];
	}
	out[threadIdx.x] = r;
}

__global__ void read_before_write(unsigned *out)
{
	__shared__ unsigned sh[4];
	out[blockIdx.x] = sh[1];
	sh[1] = 0;
}

/* 16 bytes a thread through the cache hints, at in + off floats: aligned
 * with off 0, a misaligned vector load (a fault on a GPU) with off 1 */
__global__ void copy128(float4 *out, const float *in, int off)
{
	float4 v = __ldcs((const float4 *)(in + off) + threadIdx.x);
	__stcs(out + threadIdx.x, v);
}

__global__ void fill(float *x, float v)
{
	x[threadIdx.x] = v;
}

/* n floats of dynamic shared memory: thread i writes i, i + blockDim.x,
 * ... as floats, thread 0 sums them all (so every byte is written and
 * read) */
__global__ void dyn_sum(float *out, int n)
{
	extern __shared__ __align__(16) float dyn[];
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		dyn[i] = (float)i;
	__syncthreads();
	if (threadIdx.x == 0) {
		float s = 0.0f;
		for (int i = 0; i < n; i++)
			s += dyn[i];
		out[blockIdx.x] = s;
	}
}

__global__ void dyn_read_before_write(unsigned *out)
{
	extern __shared__ unsigned dynu[];
	out[blockIdx.x] = dynu[1];
	dynu[1] = 0;
}

/* one float past n of dynamic shared memory */
__global__ void dyn_overrun(float *out, int n)
{
	extern __shared__ float dyn[];
	dyn[n] = 1.0f;
	out[0] = dyn[0];
}


/* ---- WMMA (include/mma.h) ---- */

namespace wmma = nvcuda::wmma;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_frag;

static __device__ const __nv_bfloat16 *as_bf(const uint16_t *p)
{
	return reinterpret_cast<const __nv_bfloat16 *>(p);
}

/* c (32 x 32, row major) = a b on one warp: a row major, b row major
 * (bt null) or given as its transpose bt (col_major fragments); c
 * stored column major when col */
__global__ void wmma_gemm(float *c, const uint16_t *a, const uint16_t *b, const uint16_t *bt,
			  int col)
{
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) {
			acc_frag f;
			wmma::fill_fragment(f, 0.0f);
			for (int k = 0; k < 2; k++) {
				wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
				wmma::load_matrix_sync(fa, as_bf(a + i * 16 * 32 + k * 16), 32);
				if (bt) {
					wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
						       wmma::col_major> fb;
					wmma::load_matrix_sync(fb, as_bf(bt + j * 16 * 32 + k * 16), 32);
					wmma::mma_sync(f, fa, fb, f);
				} else {
					wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
						       wmma::row_major> fb;
					wmma::load_matrix_sync(fb, as_bf(b + k * 16 * 32 + j * 16), 32);
					wmma::mma_sync(f, fa, fb, f);
				}
			}
			if (col)
				wmma::store_matrix_sync(c + j * 16 * 32 + i * 16, f, 32, wmma::mem_col_major);
			else
				wmma::store_matrix_sync(c + i * 16 * 32 + j * 16, f, 32, wmma::mem_row_major);
		}
}

/* A planted defect: the elements of an accumulator taken to be where
 * sm_80 puts them (lane l's x[i] at row l / 4 + 8 (i / 2 % 2), column
 * 2 (l % 4) + i % 2 + 8 (i / 4)), which the guide leaves unspecified. */
__global__ void wmma_mapping(float *out, const float *m)
{
	acc_frag f;
	wmma::load_matrix_sync(f, m, 16, wmma::mem_row_major);
	int l = threadIdx.x % 32;
	for (int i = 0; i < f.num_elements; i++)
		out[(l / 4 + 8 * (i / 2 % 2)) * 16 + 2 * (l % 4) + i % 2 + 8 * (i / 4)] = f.x[i];
}

/* The legal way to an element's row: a fragment loaded from a matrix of
 * row numbers has each x[i] where every accumulator has it. Row r of m
 * times scale[r]. */
__global__ void wmma_rows(float *out, const float *m, const float *rows, const float *scale)
{
	acc_frag f, rowid;
	wmma::load_matrix_sync(f, m, 16, wmma::mem_row_major);
	wmma::load_matrix_sync(rowid, rows, 16, wmma::mem_row_major);
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] *= scale[(int)rowid.x[i]];
	wmma::store_matrix_sync(out, f, 16, wmma::mem_row_major);
}

/* planted: half a warp in a load (off 0), an ldm of 12 bf16 (24 bytes,
 * off 1), a pointer 16 bytes past 32-byte alignment (off 2), lanes
 * passing different pointers (off 3) */
__global__ void wmma_bad(float *out, const uint16_t *a, int what)
{
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
	if (what == 0 && threadIdx.x < 16)
		wmma::load_matrix_sync(fa, as_bf(a), 16);
	else if (what == 1)
		wmma::load_matrix_sync(fa, as_bf(a), 12);
	else if (what == 2)
		wmma::load_matrix_sync(fa, as_bf(a + 8), 16);
	else if (what == 3)
		wmma::load_matrix_sync(fa, as_bf(a + (threadIdx.x / 16) * 256), 16);
	out[threadIdx.x] = 1.0f;
}

/* c (16 x 16, row major) = a b on one warp in tf32 (m16n16k8): a 16 x 32
 * row major, b 32 x 16 row major or given as its transpose bt (16 x 32,
 * col_major fragments); the operands through __float_to_tf32 when cvt,
 * else as loaded */
__global__ void wmma_tf32(float *c, const float *a, const float *b, const float *bt, int cvt)
{
	wmma::fragment<wmma::accumulator, 16, 16, 8, float> f;
	wmma::fill_fragment(f, 0.0f);
	for (int k = 0; k < 4; k++) {
		wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
		wmma::load_matrix_sync(fa, a + k * 8, 32);
		for (int i = 0; cvt && i < fa.num_elements; i++)
			fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
		if (bt) {
			wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32,
				       wmma::col_major> fb;
			wmma::load_matrix_sync(fb, bt + k * 8, 32);
			for (int i = 0; cvt && i < fb.num_elements; i++)
				fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
			wmma::mma_sync(f, fa, fb, f);
		} else {
			wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32,
				       wmma::row_major> fb;
			wmma::load_matrix_sync(fb, b + k * 8 * 16, 16);
			for (int i = 0; cvt && i < fb.num_elements; i++)
				fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
			wmma::mma_sync(f, fa, fb, f);
		}
	}
	wmma::store_matrix_sync(c, f, 16, wmma::mem_row_major);
}

/* planted, tf32: an ldm of 6 floats (24 bytes, what 0), a pointer 16
 * bytes past 32-byte alignment (what 1) */
__global__ void wmma_tf32_bad(float *out, const float *a, int what)
{
	wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
	if (what == 0)
		wmma::load_matrix_sync(fa, a, 6);
	else
		wmma::load_matrix_sync(fa, a + 4, 8);
	out[threadIdx.x] = 1.0f;
}

/* ---- orders (CUEMU_ORDER) ---- */

/* The order blocks and the threads of each block run in: blocks run
 * one at a time here and threads without a barrier one after another,
 * so a plain counter numbers them (a race on a GPU, a record here). */
__global__ void record_order(unsigned *blocks, unsigned *threads, unsigned *n)
{
	if (threadIdx.x == 0)
		blocks[blockIdx.x] = n[0]++;
	if (blockIdx.x == 0)
		threads[threadIdx.x] = n[1]++;
}

/* A planted defect: block b reads what block b-1 wrote, an order CUDA
 * never promises (it holds in forward order only). */
__global__ void chain(float *x)
{
	x[blockIdx.x] = blockIdx.x ? x[blockIdx.x - 1] + 1.0f : 0.0f;
}

__global__ void copy_floats(float *y, const float *x, int off)
{
	y[threadIdx.x] = x[off + threadIdx.x];
}

/*
 * A planted defect the race check cannot see: stream a copies the top
 * half of x, and stream b then overwrites it without waiting for a
 * (a write after a read). The copy is given x and an offset, the
 * overwrite x + 32, and the check knows a kernel's accesses by its
 * pointers' first element only: to it they touch different bytes. The host waits for a first: with the work
 * deferred (forward or reverse order), a runs before b has run at all
 * and the copy is right by luck; a GPU may run b first, as the shuffled
 * order's early runs do for some seeds.
 */
static int war_hidden(int wait)
{
	cudaStream_t a, b;
	cudaEvent_t e;
	cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
	cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
	cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
	void *px = NULL, *py = NULL;
	cudaMalloc(&px, 64 * sizeof(float));
	cudaMalloc(&py, 32 * sizeof(float));
	float *x = (float *)px, *y = (float *)py, h[32];
	fill<<<1, 64>>>(x, 1.0f);
	cudaDeviceSynchronize();
	copy_floats<<<1, 32, 0, a>>>(y, x, 32);
	if (wait) {
		cudaEventRecord(e, a);
		cudaStreamWaitEvent(b, e, 0);
	}
	fill<<<1, 32, 0, b>>>(x + 32, 2.0f);
	cudaStreamSynchronize(a);
	cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
	cudaDeviceSynchronize();
	cudaStreamDestroy(a);
	cudaStreamDestroy(b);
	cudaEventDestroy(e);
	cudaFree(px);
	cudaFree(py);
	int wrong = 0;
	for (int i = 0; i < 32; i++)
		wrong += h[i] != 1.0f;
	return wrong;
}

/* The child's side of the order tests (argv[1] "orders"), run with
 * CUEMU_ORDER and CUEMU_SEED set: one line of block and thread orders
 * for two launches, then whether chain and war_hidden went wrong. */
static int child_orders(void)
{
	void *pb = NULL, *pt = NULL, *pn = NULL, *pc = NULL;
	cudaMalloc(&pb, 2 * 16 * sizeof(unsigned));
	cudaMalloc(&pt, 2 * 64 * sizeof(unsigned));
	cudaMalloc(&pn, 2 * sizeof(unsigned));
	cudaMalloc(&pc, 16 * sizeof(float));
	unsigned *b = (unsigned *)pb, *t = (unsigned *)pt, hb[32], ht[128];
	for (int launch = 0; launch < 2; launch++) {
		cudaMemset(pn, 0, 2 * sizeof(unsigned));
		record_order<<<16, 64>>>(b + 16 * launch, t + 64 * launch, (unsigned *)pn);
	}
	cudaMemcpy(hb, b, sizeof hb, cudaMemcpyDeviceToHost);
	cudaMemcpy(ht, t, sizeof ht, cudaMemcpyDeviceToHost);
	for (int i = 0; i < 32; i++)
		printf("%u ", hb[i]);
	for (int i = 0; i < 128; i++)
		printf("%u ", ht[i]);
	float c[16];
	chain<<<16, 1>>>((float *)pc);
	cudaMemcpy(c, pc, sizeof c, cudaMemcpyDeviceToHost);
	int wrong = 0;
	for (int i = 0; i < 16; i++)
		wrong += c[i] != (float)i;
	printf("chain %d war %d war_waited %d\n", wrong, war_hidden(0), war_hidden(1));
	return 0;
}

struct orders {
	unsigned blocks[2][16], threads[2][64];
	int chain, war, war_waited;
};

/* Run this program's child_orders with order and seed; 1 when it
 * printed a full line. */
static int run_orders(const char *order, unsigned seed, struct orders *o)
{
	char cmd[512], line[4096];
	snprintf(cmd, sizeof cmd, "CUEMU_ORDER=%s CUEMU_SEED=%u /proc/%d/exe orders", order, seed,
		 (int)getpid());
	fflush(stdout);
	FILE *f = popen(cmd, "r");
	if (!f)
		return 0;
	int got = fgets(line, sizeof line, f) != NULL;
	int st = pclose(f);
	if (!got || st != 0)
		return 0;
	char *p = line, *end;
	for (int i = 0; i < 32 + 128; i++) {
		unsigned long v = strtoul(p, &end, 10);
		if (end == p)
			return 0;
		if (i < 32)
			o->blocks[i / 16][i % 16] = (unsigned)v;
		else
			o->threads[(i - 32) / 64][(i - 32) % 64] = (unsigned)v;
		p = end;
	}
	return sscanf(p, " chain %d war %d war_waited %d", &o->chain, &o->war, &o->war_waited) == 3;
}

/* 1 when v[0..n) holds each of 0..n-1 once. */
static int is_perm(const unsigned *v, int n)
{
	unsigned char seen[64] = {0};
	for (int i = 0; i < n; i++) {
		if (v[i] >= (unsigned)n || seen[v[i]])
			return 0;
		seen[v[i]] = 1;
	}
	return 1;
}

/* 0 forward (v[i] = i), 1 reverse, 2 neither. */
static int direction(const unsigned *v, int n)
{
	int fwd = 1, rev = 1;
	for (int i = 0; i < n; i++) {
		fwd &= v[i] == (unsigned)i;
		rev &= v[i] == (unsigned)(n - 1 - i);
	}
	return fwd ? 0 : rev ? 1 : 2;
}

static void test_orders(void)
{
	struct orders f, r, s1, s2, s3;
	const char *env = getenv("CUEMU_SEED");
	/* the pass's seed (check-cuemu prints it), else a fixed one */
	unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 0) : 12345u;
	int okf = run_orders("forward", 0, &f), okr = run_orders("reverse", 0, &r);
	int ok1 = run_orders("shuffle", seed, &s1), ok2 = run_orders("shuffle", seed, &s2);
	int ok3 = run_orders("shuffle", seed + 1, &s3);
	ok(okf && okr && ok1 && ok2 && ok3, "the order children ran (seed %u)", seed);
	if (!(okf && okr && ok1 && ok2 && ok3))
		return;
	ok(direction(f.blocks[0], 16) == 0 && direction(f.threads[0], 64) == 0 &&
		   direction(r.blocks[0], 16) == 1 && direction(r.threads[0], 64) == 1,
	   "forward and reverse run blocks and threads in their order");
	int perms = 1, neither = 1;
	for (int l = 0; l < 2; l++) {
		perms &= is_perm(s1.blocks[l], 16) && is_perm(s1.threads[l], 64);
		neither &= direction(s1.blocks[l], 16) == 2 && direction(s1.threads[l], 64) == 2;
	}
	ok(perms && neither, "shuffled, every block and thread runs once, in neither forward "
	   "nor reverse order");
	/* an affine order (a i + c mod n) keeps neighbours a fixed stride
	 * apart: n of its n! orders, every pair of neighbours alike */
	int strides = 0;
	for (int l = 0; l < 2; l++) {
		unsigned d0 = (s1.threads[l][1] + 64 - s1.threads[l][0]) % 64;
		for (int i = 2; i < 64; i++)
			if ((s1.threads[l][i] + 64 - s1.threads[l][i - 1]) % 64 != d0) {
				strides++;
				break;
			}
	}
	ok(strides == 2, "shuffled threads are not an affine order (neighbours at varying strides)");
	ok(memcmp(s1.blocks[0], s1.blocks[1], sizeof s1.blocks[0]) != 0 &&
		   memcmp(s1.threads[0], s1.threads[1], sizeof s1.threads[0]) != 0,
	   "each launch draws its own order");
	ok(memcmp(s1.blocks, s2.blocks, sizeof s1.blocks) == 0 &&
		   memcmp(s1.threads, s2.threads, sizeof s1.threads) == 0,
	   "the same seed replays the same orders");
	ok(memcmp(s1.blocks, s3.blocks, sizeof s1.blocks) != 0 ||
		   memcmp(s1.threads, s3.threads, sizeof s1.threads) != 0,
	   "another seed draws other orders");
	ok(f.chain == 0 && r.chain > 0 && s1.chain > 0,
	   "a kernel whose blocks depend on the block before is right in forward order only "
	   "(wrong blocks: reverse %d, shuffled %d of 16)", r.chain, s1.chain);

	/* the write after a read that the race check cannot see: hidden by
	 * deferred work in forward and reverse order, shown by an early run
	 * for some seeds; with the event it is right for every seed */
	int caught = 0, waited_wrong = f.war_waited + r.war_waited, seeds = 0;
	for (unsigned k = 1; k <= 24; k++) {
		struct orders x;
		if (!run_orders("shuffle", k, &x))
			break;
		seeds++;
		caught += x.war > 0;
		waited_wrong += x.war_waited;
	}
	ok(seeds == 24 && f.war == 0 && r.war == 0 && caught > 0,
	   "a missing stream wait the race check cannot see: hidden in forward and reverse "
	   "order, wrong for %d of seeds 1 to 24 shuffled", caught);
	ok(seeds == 24 && waited_wrong == 0,
	   "with the wait, right in every order and for every seed");
}

/* Run f in a child; 1 when it died by abort with `want` in its stderr. */
static int dies_with(void (*f)(void), const char *want, char *got, size_t n)
{
	int p[2];
	got[0] = 0;
	if (pipe(p) < 0)
		return 0;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		f();
		_exit(0);
	}
	close(p[1]);
	size_t len = 0;
	ssize_t r;
	while (len + 1 < n && (r = read(p[0], got + len, n - 1 - len)) > 0)
		len += (size_t)r;
	got[len] = 0;
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(got, want) != NULL;
}

/* Run f in a child; 1 when it returned 1 with `want` in its stderr. */
static int says(int (*f)(void), const char *want, char *got, size_t n)
{
	int p[2];
	got[0] = 0;
	if (pipe(p) < 0)
		return 0;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		_exit(f() ? 0 : 1);
	}
	close(p[1]);
	size_t len = 0;
	ssize_t r;
	while (len + 1 < n && (r = read(p[0], got + len, n - 1 - len)) > 0)
		len += (size_t)r;
	got[len] = 0;
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(got, want) != NULL;
}

static float *dev_floats(size_t n)
{
	void *p = NULL;
	cudaMalloc(&p, n * sizeof(float));
	return (float *)p;
}

/*
 * One fp32 GEMM through the fake cuBLASLt, column-major: D (M,N) = A (M,K)
 * B (K,N) with an epilogue; aux (leading dimension auxld, type auxtype
 * unless -1) and bias set when given. aux_at_heur, bias_at_heur: the aux
 * and bias pointers the heuristic sees, when they differ from the
 * matmul's. Returns the first status that is not success.
 */
enum { LM = 16, LN = 3, LK = 5 };

static cublasStatus_t lt_gemm(uint32_t epi, float *D, const float *A, const float *Bm,
			      void *bias, void *aux, int64_t auxld, int32_t auxtype,
			      void *aux_at_heur, void *bias_at_heur = NULL)
{
	cublasLtHandle_t h;
	cublasLtMatmulDesc_t d;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulPreference_t pr;
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	cublasStatus_t st;
	cublasLtCreate(&h);
	cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, LM, LK, LM);
	cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, LK, LN, LK);
	cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, LM, LN, LM);
	cublasLtMatmulPreferenceCreate(&pr);
	float alpha = 1.0f, beta = 0.0f;
	void *heur_aux = aux_at_heur ? aux_at_heur : aux;
	void *heur_bias = bias_at_heur ? bias_at_heur : bias;
	if ((st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
						 sizeof epi)) ||
	    (heur_bias && (st = cublasLtMatmulDescSetAttribute(d,
					CUBLASLT_MATMUL_DESC_BIAS_POINTER, &heur_bias,
					sizeof heur_bias))) ||
	    (heur_aux && (st = cublasLtMatmulDescSetAttribute(d,
					CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &heur_aux,
					sizeof heur_aux))) ||
	    (auxld && (st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
							   &auxld, sizeof auxld))) ||
	    (auxtype != -1 && (st = cublasLtMatmulDescSetAttribute(d,
					CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &auxtype,
					sizeof auxtype))) ||
	    (st = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, ld, ld, pr, 1, &res, &found)))
		goto out;
	if ((aux_at_heur &&
	     (st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
						  &aux, sizeof aux))) ||
	    (bias_at_heur &&
	     (st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
						  sizeof bias))))
		goto out;
	st = cublasLtMatmul(h, d, &alpha, A, la, Bm, lb, &beta, D, ld, D, ld, &res.algo, NULL, 0,
			    NULL);
	cudaDeviceSynchronize();
out:
	cublasLtMatmulPreferenceDestroy(pr);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(ld);
	cublasLtMatmulDescDestroy(d);
	cublasLtDestroy(h);
	return st;
}

/* GPT-2's gelu_new and its derivative in double, written from the formula. */
static double gelu_ref(double x)
{
	double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
	return 0.5 * x * (1.0 + tanh(u));
}

static double gelu_grad_ref(double x)
{
	double h = 1e-4; /* central difference: a second way to the derivative */
	return (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
}

static void test_lt_gelu(void)
{
	static float ha[LM * LK], hb[LK * LN], hbias[LM], hd[LM * LN], haux[LM * LN], hg[LM];
	double pre[LM * LN], prod[LM * LN];
	for (int i = 0; i < LM * LK; i++)
		ha[i] = (float)((i * 7) % 11 - 5) * 0.125f;
	for (int i = 0; i < LK * LN; i++)
		hb[i] = (float)((i * 5) % 7 - 3) * 0.25f;
	for (int i = 0; i < LM; i++)
		hbias[i] = (float)(i % 5 - 2) * 0.5f;
	for (int j = 0; j < LN; j++)
		for (int i = 0; i < LM; i++) {
			double acc = 0;
			for (int p = 0; p < LK; p++)
				acc += (double)ha[i + p * LM] * hb[p + j * LK];
			prod[i + j * LM] = acc;
			pre[i + j * LM] = acc + hbias[i];
		}
	float *A = dev_floats(LM * LK), *Bm = dev_floats(LK * LN), *bias = dev_floats(LM + 4);
	float *D = dev_floats(LM * LN), *aux = dev_floats(LM * LN + 64);
	cudaMemcpy(A, ha, sizeof ha, cudaMemcpyHostToDevice);
	cudaMemcpy(Bm, hb, sizeof hb, cudaMemcpyHostToDevice);
	cudaMemcpy(bias, hbias, sizeof hbias, cudaMemcpyHostToDevice);

	/* forward: D = gelu(AB + bias), aux = AB + bias */
	cublasStatus_t st = lt_gemm(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, D, A, Bm, bias, aux, LM, -1,
				    NULL);
	cudaMemcpy(hd, D, sizeof hd, cudaMemcpyDeviceToHost);
	cudaMemcpy(haux, aux, sizeof haux, cudaMemcpyDeviceToHost);
	double wd = 0, wa = 0;
	for (int i = 0; i < LM * LN; i++) {
		wd = fmax(wd, fabs(hd[i] - gelu_ref(pre[i])));
		wa = fmax(wa, fabs(haux[i] - pre[i]));
	}
	ok(st == CUBLAS_STATUS_SUCCESS && wd < 1e-5 && wa < 1e-6,
	   "cuBLASLt GELU_AUX_BIAS: D is gelu_new(AB + bias) (off by %.2g), aux AB + bias (%.2g)",
	   wd, wa);

	/* backward: D = AB * gelu'(aux), the bias gradient its row sums */
	st = lt_gemm(CUBLASLT_EPILOGUE_DGELU_BGRAD, D, A, Bm, bias, aux, LM, -1, NULL);
	cudaMemcpy(hd, D, sizeof hd, cudaMemcpyDeviceToHost);
	cudaMemcpy(hg, bias, sizeof hg, cudaMemcpyDeviceToHost);
	double wg = 0, wb = 0;
	for (int i = 0; i < LM; i++) {
		double sum = 0;
		for (int j = 0; j < LN; j++) {
			double want = prod[i + j * LM] * gelu_grad_ref(pre[i + j * LM]);
			wg = fmax(wg, fabs(hd[i + j * LM] - want));
			sum += want;
		}
		wb = fmax(wb, fabs(hg[i] - sum));
	}
	ok(st == CUBLAS_STATUS_SUCCESS && wg < 1e-5 && wb < 1e-5,
	   "cuBLASLt DGELU_BGRAD: D is AB * gelu'(aux) (off by %.2g), the bias gradient its row "
	   "sums (%.2g)", wg, wb);

	/* what cublasLt.h's rules forbid */
	ok(lt_gemm(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, D, A, Bm, bias, aux, 20, -1, NULL) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt GELU_AUX_BIAS: an aux leading dimension of 20 (no multiple of 8) is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_DGELU, D, A, Bm, NULL, aux, 8, -1, NULL) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt DGELU: an aux leading dimension of 8 below D's 16 rows is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_GELU_AUX, D, A, Bm, NULL, NULL, LM, -1, NULL) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt GELU_AUX: without an aux pointer it is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_GELU_AUX, D, A, Bm, NULL, aux, LM, CUDA_R_16BF, NULL) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt GELU_AUX: a bf16 aux matrix with an fp32 D is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_DGELU_BGRAD, D, A, Bm, NULL, aux, LM, -1, NULL) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt DGELU_BGRAD: without the bias gradient's pointer it is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_GELU_AUX, D, A, Bm, NULL, aux + 1, LM, -1, aux) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt GELU_AUX: an aux pointer less aligned than the heuristic's is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_DGELU_BGRAD, D, A, Bm, bias + 1, aux, LM, -1, NULL, bias) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt DGELU_BGRAD: a bias gradient pointer less aligned than the heuristic's "
	   "is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_BIAS, D, A, Bm, bias + 1, NULL, 0, -1, NULL, bias) ==
		   CUBLAS_STATUS_INVALID_VALUE,
	   "cuBLASLt BIAS: a bias pointer less aligned than the heuristic's is refused");
	ok(lt_gemm(CUBLASLT_EPILOGUE_GELU, D, A, Bm, NULL, NULL, 0, -1, NULL) ==
		   CUBLAS_STATUS_SUCCESS,
	   "cuBLASLt GELU (no aux) needs no aux pointer");
	cudaFree(A), cudaFree(Bm), cudaFree(bias), cudaFree(D), cudaFree(aux);
}

static void run_divergent(void)
{
	divergent_barrier<<<1, 32>>>(dev_floats(32));
	cudaDeviceSynchronize();
}
static void run_half_warp(void)
{
	half_warp_shuffle<<<1, 64>>>(dev_floats(64));
	cudaDeviceSynchronize();
}
static void run_outside(void)
{
	shuffle_outside_mask<<<1, 32>>>(dev_floats(32));
	cudaDeviceSynchronize();
}
static void run_disagree(void)
{
	masks_disagree<<<1, 32>>>(dev_floats(32));
	cudaDeviceSynchronize();
}
static void run_partial_warp(void)
{
	/* a full mask in a block of 40 threads: lanes 8..31 of warp 1 do not exist */
	full_shuffle<<<1, 40>>>(dev_floats(40));
	cudaDeviceSynchronize();
}

static void run_misaligned(void)
{
	copy128<<<1, 4>>>((float4 *)dev_floats(16), dev_floats(20), 1);
	cudaDeviceSynchronize();
}

static void run_misaligned_arg(void)
{
	fill<<<1, 4>>>((float *)((char *)dev_floats(8) + 2), 1.0f);
	cudaDeviceSynchronize();
}

/* ---- dynamic shared memory ---- */

enum { KIB = 1024, OPTIN = 227 * KIB };

/* 64 KiB without the attribute: refused as on sm_90, said, nothing run */
static int run_dyn_unset(void)
{
	float *d = dev_floats(1), h = -1.0f;
	cudaMemcpy(d, &h, 4, cudaMemcpyHostToDevice);
	dyn_sum<<<1, 256, 64 * KIB>>>(d, 16 * KIB);
	int refused = cudaGetLastError() == cudaErrorInvalidValue;
	cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost);
	return refused && h == -1.0f;
}

/* 48 KiB + 16 with the attribute set to 48 KiB: refused */
static int run_dyn_short(void)
{
	float *d = dev_floats(1);
	int set = cudaFuncSetAttribute(dyn_sum, cudaFuncAttributeMaxDynamicSharedMemorySize,
				       48 * KIB) == cudaSuccess;
	dyn_sum<<<1, 256, 48 * KIB + 16>>>(d, 12 * KIB + 4);
	return set && cudaGetLastError() == cudaErrorInvalidValue;
}

/* past sm_90's 227 KiB: the attribute refused, and the launch */
static int run_dyn_past_optin(void)
{
	float *d = dev_floats(1);
	int attr = cudaFuncSetAttribute(dyn_sum, cudaFuncAttributeMaxDynamicSharedMemorySize,
					OPTIN + 4);
	cudaGetLastError();
	dyn_sum<<<1, 256, OPTIN + 4>>>(d, OPTIN / 4 + 1);
	return attr == cudaErrorInvalidValue && cudaGetLastError() == cudaErrorInvalidValue;
}

/* every byte of 227 KiB, with the attribute: the sum of 0 .. n - 1 */
static int dyn_full(void)
{
	float *d = dev_floats(2), h[2];
	int n = OPTIN / 4;
	if (cudaFuncSetAttribute(dyn_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, OPTIN) !=
	    cudaSuccess)
		return 0;
	dyn_sum<<<2, 1024, OPTIN>>>(d, n);
	if (cudaGetLastError() != cudaSuccess)
		return 0;
	cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
	/* the float sum of 0 .. n - 1 in order, as thread 0 adds them */
	float want = 0.0f;
	for (int i = 0; i < n; i++)
		want += (float)i;
	return h[0] == want && h[1] == want;
}

static void run_dyn_overrun(void)
{
	dyn_overrun<<<1, 1, 4 * KIB>>>(dev_floats(1), KIB);
	cudaDeviceSynchronize();
}

/* Run f in a child; 1 when it faulted: killed by SIGSEGV, or (under
 * SAN=1) stopped by AddressSanitizer's report of the SEGV. */
static int faults(void (*f)(void))
{
	char got[4096];
	int p[2];
	if (pipe(p) < 0)
		return 0;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		f();
		_exit(0);
	}
	close(p[1]);
	size_t len = 0;
	ssize_t r;
	while (len + 1 < sizeof got && (r = read(p[0], got + len, sizeof got - 1 - len)) > 0)
		len += (size_t)r;
	got[len] = 0;
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	return (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) ||
	       (WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(got, "AddressSanitizer: SEGV"));
}

static void test_dynamic_shared(void)
{
	char got[4096];
	ok(says(run_dyn_unset, "kernel dyn_sum", got, sizeof got) &&
		   strstr(got, "65536 bytes of dynamic shared memory, past the kernel's 49152") &&
		   strstr(got, "cudaFuncAttributeMaxDynamicSharedMemorySize"),
	   "64 KiB of dynamic shared memory without cudaFuncSetAttribute: the launch is refused "
	   "(cudaErrorInvalidValue), named, and nothing runs");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(says(run_dyn_short, "49168 bytes of dynamic shared memory, past the kernel's 49152",
		got, sizeof got),
	   "48 KiB + 16 bytes with the attribute at 48 KiB: refused");
	ok(says(run_dyn_past_optin, "232452 bytes of dynamic shared memory, past the 232448 (227 "
		"KiB) a block of sm_90 can have", got, sizeof got) &&
		   strstr(got, "cudaFuncSetAttribute(kernel") && strstr(got, "kernel dyn_sum"),
	   "227 KiB + 4 bytes: the attribute and the launch refused, named");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dyn_full(), "227 KiB with the attribute: every byte written and read back by a block "
	   "of 1024 threads, in two blocks");
	void *du = NULL;
	unsigned u[2][8];
	cudaMalloc(&du, sizeof u[0]);
	for (int k = 0; k < 2; k++) {
		dyn_read_before_write<<<8, 1, 64>>>((unsigned *)du);
		cudaMemcpy(u[k], du, sizeof u[k], cudaMemcpyDeviceToHost);
	}
	/* each block leaves 0 where the next one reads */
	int differ = 0, zero = 0;
	for (int i = 0; i < 8; i++) {
		differ += i && u[0][i] != u[0][i - 1];
		zero += !u[0][i] + !u[1][i];
	}
	ok(differ == 7 && zero == 0 && memcmp(u[0], u[1], sizeof u[0]) != 0,
	   "dynamic shared memory read before a write is garbage that differs from block to "
	   "block and from launch to launch");
	ok(faults(run_dyn_overrun),
	   "a write one float past 4 KiB of dynamic shared memory faults");
	cudaFree(du);
}

static void CUDART_CB spin(void *arg)
{
	while (!*(volatile int *)arg)
		;
}

/* The first launch of a kernel while a host function holds a stream. */
static void run_lazy_load(void)
{
	static int go;
	cudaStream_t a;
	cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
	cudaLaunchHostFunc(a, spin, &go);
	full_shuffle<<<1, 32>>>(dev_floats(32));
	go = 1;
	cudaDeviceSynchronize();
}

/*
 * The gradients of a model stream reduced by NCCL on a communication
 * stream; with order, the communication stream waits for an event the
 * model stream recorded after the kernel. With hide, the host waits for
 * the model stream before the collective runs: without the event the
 * result is then right by luck, and a GPU may still run the collective
 * first.
 */
static float model_to_comm(int order, int hide)
{
	cudaStream_t model, comm;
	cudaEvent_t e;
	cudaStreamCreateWithFlags(&model, cudaStreamNonBlocking);
	cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking);
	cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
	ncclUniqueId id;
	ncclComm_t c;
	ncclGetUniqueId(&id);
	if (ncclCommInitRank(&c, 1, id, 0) != ncclSuccess)
		return -1;
	float *g = dev_floats(64), *r = dev_floats(64), hr[64];
	fill<<<1, 64, 0, model>>>(g, 2.5f);
	if (order) {
		cudaEventRecord(e, model);
		cudaStreamWaitEvent(comm, e, 0);
	}
	ncclAllReduce(g, r, 64, ncclFloat32, ncclSum, c, comm);
	if (hide)
		cudaStreamSynchronize(model);
	cudaMemcpyAsync(hr, r, sizeof hr, cudaMemcpyDeviceToHost, comm);
	ncclCommDestroy(c);
	float bad = 0;
	for (int i = 0; i < 64; i++)
		bad += hr[i] != 2.5f;
	return bad;
}

static void run_missing_wait(void)
{
	model_to_comm(0, 0);
}

static void run_hidden_missing_wait(void)
{
	model_to_comm(0, 1);
}

static void run_unordered(void)
{
	cudaStream_t a, b;
	cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
	cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
	float *x = dev_floats(1), *y = dev_floats(1), hy = 0;
	fill<<<1, 1, 0, a>>>(x, 3.0f);
	cudaMemcpyAsync(y, x, 4, cudaMemcpyDeviceToDevice, b);
	cudaMemcpyAsync(&hy, y, 4, cudaMemcpyDeviceToHost, b);
	cudaDeviceSynchronize();
}


/* The child's side of the WMMA layout test (argv[1] "wmma"), run with
 * CUEMU_SEED set: wmma_mapping's and wmma_rows's 256 values on a line. */
static int child_wmma(void)
{
	float h[256], rows[256], scale[16], o[256];
	for (int i = 0; i < 256; i++) {
		h[i] = (float)i;
		rows[i] = (float)(i / 16);
	}
	for (int r = 0; r < 16; r++)
		scale[r] = (float)(r + 1);
	void *dm, *dr, *ds, *dout;
	cudaMalloc(&dm, sizeof h);
	cudaMalloc(&dr, sizeof rows);
	cudaMalloc(&ds, sizeof scale);
	cudaMalloc(&dout, sizeof o);
	cudaMemcpy(dm, h, sizeof h, cudaMemcpyHostToDevice);
	cudaMemcpy(dr, rows, sizeof rows, cudaMemcpyHostToDevice);
	cudaMemcpy(ds, scale, sizeof scale, cudaMemcpyHostToDevice);
	wmma_mapping<<<1, 32>>>((float *)dout, (const float *)dm);
	cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost);
	for (int i = 0; i < 256; i++)
		printf("%g ", o[i]);
	wmma_rows<<<1, 32>>>((float *)dout, (const float *)dm, (const float *)dr,
			     (const float *)ds);
	cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost);
	for (int i = 0; i < 256; i++)
		printf("%g ", o[i]);
	printf("\n");
	return 0;
}

/* this program's child_wmma under seed: the two kernels' values */
static int run_wmma_child(unsigned seed, float *map, float *rows)
{
	char cmd[512];
	static char line[16384];
	snprintf(cmd, sizeof cmd, "CUEMU_SEED=%u /proc/%d/exe wmma", seed, (int)getpid());
	fflush(stdout);
	FILE *f = popen(cmd, "r");
	if (!f)
		return 0;
	int got = fgets(line, sizeof line, f) != NULL;
	if (pclose(f) != 0 || !got)
		return 0;
	char *p = line, *end;
	for (int i = 0; i < 512; i++) {
		float v = strtof(p, &end);
		if (end == p)
			return 0;
		if (i < 256)
			map[i] = v;
		else
			rows[i - 256] = v;
		p = end;
	}
	return 1;
}

static void run_wmma_half(void)
{
	wmma_bad<<<1, 32>>>(dev_floats(32), (const uint16_t *)dev_floats(512), 0);
	cudaDeviceSynchronize();
}
static void run_wmma_ldm(void)
{
	wmma_bad<<<1, 32>>>(dev_floats(32), (const uint16_t *)dev_floats(512), 1);
	cudaDeviceSynchronize();
}
static void run_wmma_align(void)
{
	wmma_bad<<<1, 32>>>(dev_floats(32), (const uint16_t *)dev_floats(512), 2);
	cudaDeviceSynchronize();
}
static void run_wmma_ptrs(void)
{
	wmma_bad<<<1, 32>>>(dev_floats(32), (const uint16_t *)dev_floats(512), 3);
	cudaDeviceSynchronize();
}

static void run_wmma_tf32_ldm(void)
{
	wmma_tf32_bad<<<1, 32>>>(dev_floats(32), dev_floats(512), 0);
	cudaDeviceSynchronize();
}
static void run_wmma_tf32_align(void)
{
	wmma_tf32_bad<<<1, 32>>>(dev_floats(32), dev_floats(512), 1);
	cudaDeviceSynchronize();
}

/* x to tf32 (11 significant bits) in double: to nearest with ties away
 * from zero (C's round) or toward zero (trunc) */
static float tf32_of(float x, int nearest)
{
	if (x == 0.0f || !isfinite(x))
		return x;
	int e;
	frexp(x, &e);
	if (e < -125)
		e = -125; /* subnormal: fp32's spacing, 2^-149, past 13 bits */
	double q = ldexp(1.0, e - 11);
	return (float)((nearest ? round(x / q) : trunc(x / q)) * q);
}

/* tf32: a product of small integers is exact in either matrix_b layout;
 * a column of values near the rounding boundaries comes out as rna
 * rounds them (the operands converted) or as the tensor core truncates
 * them (not converted); misaligned and mis-strided loads stop the run */
static void test_wmma_tf32(void)
{
	char got[2048];
	static float a[512], b[512], bt[512], c[256];
	float *da = dev_floats(512), *db = dev_floats(512), *dbt = dev_floats(512);
	float *dc = dev_floats(256);
	for (int i = 0; i < 16; i++)
		for (int k = 0; k < 32; k++) {
			a[i * 32 + k] = (float)((i * 7 + k * 3) % 9 - 4);
			b[k * 16 + i] = (float)((k * 5 + i * 11) % 7 - 3);
			bt[i * 32 + k] = b[k * 16 + i];
		}
	cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
	cudaMemcpy(dbt, bt, sizeof bt, cudaMemcpyHostToDevice);
	for (int v = 0; v < 2; v++) {
		wmma_tf32<<<1, 32>>>(dc, da, db, v ? dbt : (float *)NULL, 1);
		cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
		int wrong = 0;
		for (int i = 0; i < 16; i++)
			for (int j = 0; j < 16; j++) {
				int want = 0;
				for (int k = 0; k < 32; k++)
					want += ((i * 7 + k * 3) % 9 - 4) * ((k * 5 + j * 11) % 7 - 3);
				wrong += c[i * 16 + j] != (float)want;
			}
		ok(wrong == 0, "wmma tf32: a 16 x 16 x 32 product of small integers is exact "
		   "(matrix_b %s major)", v ? "col" : "row");
	}
	/* a's column 0 the values, b's row 0 ones: c[i][j] = tf32(a[i][0]) */
	static const float vals[16] = {
		1.0f + 0x1p-11f,		/* a tie: away from zero */
		-(1.0f + 0x1p-11f),		/* a tie, negative */
		1.0f + 0x1p-12f,		/* under half: down */
		1.0f + 0x1p-11f + 0x1p-12f,	/* over half: up */
		1.0f + 0x1p-11f - 0x1p-23f,	/* just under the tie */
		3.0f + 0x1p-10f,		/* a tie at exponent 1 */
		0x1.fffffep127f,		/* up past the largest: inf */
		0x1.234p-130f,			/* subnormal */
		-0.1f, 0.1f, 1.0f / 3.0f, 3.14159265f, 1e30f, -7e-20f, 0.0f, 2.0f};
	memset(a, 0, sizeof a);
	memset(b, 0, sizeof b);
	for (int i = 0; i < 16; i++) {
		a[i * 32] = vals[i];
		b[i] = 1.0f;
	}
	cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
	for (int cvt = 1; cvt >= 0; cvt--) {
		wmma_tf32<<<1, 32>>>(dc, da, db, (const float *)NULL, cvt);
		cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
		int wrong = 0;
		for (int i = 0; i < 16; i++)
			for (int j = 0; j < 16; j++) {
				float want = tf32_of(vals[i], cvt);
				if (memcmp(&c[i * 16 + j], &want, 4) && !wrong++)
					diag("%a: got %a, want %a", vals[i], c[i * 16 + j], want);
			}
		ok(wrong == 0, "wmma tf32: 16 values near rounding boundaries %s", cvt
		   ? "through __float_to_tf32 come out rounded to nearest, ties away (cvt.rna)"
		   : "not converted come out truncated, as a tensor core reads them");
	}
	ok(tf32_of(1.0f + 0x1p-11f, 1) == 1.0f + 0x1p-10f && tf32_of(1.0f + 0x1p-11f, 0) == 1.0f,
	   "tf32: 1 + 2^-11 rounds to 1 + 2^-10 and truncates to 1 (the reference's own check)");
	ok(dies_with(run_wmma_tf32_ldm, "ldm 6", got, sizeof got) &&
		   strstr(got, "multiple of 16 bytes"),
	   "a tf32 wmma load with ldm 6 floats (24 bytes) stops the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_wmma_tf32_align, "not 256-bit (32-byte) aligned", got, sizeof got),
	   "a tf32 wmma load 16 bytes past 32-byte alignment stops the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
}

/* bf16 bits of small integers (exact) */
static uint16_t bf_int(int v)
{
	float f = (float)v;
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

static void test_wmma(void)
{
	char got[2048];
	static uint16_t a[1024], b[1024], bt[1024];
	for (int i = 0; i < 32; i++)
		for (int k = 0; k < 32; k++) {
			a[i * 32 + k] = bf_int((i * 7 + k * 3) % 9 - 4);
			b[i * 32 + k] = bf_int((i * 5 + k * 11) % 7 - 3);
			bt[k * 32 + i] = b[i * 32 + k];
		}
	void *da, *db, *dbt;
	cudaMalloc(&da, sizeof a);
	cudaMalloc(&db, sizeof b);
	cudaMalloc(&dbt, sizeof bt);
	cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
	cudaMemcpy(dbt, bt, sizeof bt, cudaMemcpyHostToDevice);
	float *dc = dev_floats(1024);
	static float c[1024];
	for (int v = 0; v < 3; v++) {
		/* b row major, row-major c; b as its transpose (col_major);
		 * column-major c */
		wmma_gemm<<<1, 32>>>(dc, (const uint16_t *)da, (const uint16_t *)db,
				     v == 1 ? (const uint16_t *)dbt : NULL, v == 2);
		cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
		int wrong = 0;
		for (int i = 0; i < 32; i++)
			for (int j = 0; j < 32; j++) {
				int want = 0;
				for (int k = 0; k < 32; k++)
					want += ((i * 7 + k * 3) % 9 - 4) * ((k * 5 + j * 11) % 7 - 3);
				wrong += (v == 2 ? c[j * 32 + i] : c[i * 32 + j]) != (float)want;
			}
		ok(wrong == 0, "wmma: a 32 x 32 x 32 product of small integers in bf16 is exact "
		   "(%s, %s-major result)", v == 1 ? "matrix_b col_major" : "matrix_b row_major",
		   v == 2 ? "column" : "row");
	}

	/* the layout: a mapping assumed is caught, one learned is not */
	const char *env = getenv("CUEMU_SEED");
	unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 0) : 12345u;
	static float map[2][256], rows[2][256];
	int ran = run_wmma_child(seed, map[0], rows[0]) && run_wmma_child(seed + 1, map[1], rows[1]);
	ok(ran, "the wmma children ran (seeds %u, %u)", seed, seed + 1);
	if (ran) {
		int wrong[2] = {0, 0}, differ = 0, perm = 1, rows_wrong = 0;
		for (int s = 0; s < 2; s++) {
			unsigned char seen[256] = {0};
			for (int i = 0; i < 256; i++) {
				wrong[s] += map[s][i] != (float)i;
				int v = (int)map[s][i];
				perm &= v >= 0 && v < 256 && !seen[v];
				if (v >= 0 && v < 256)
					seen[v] = 1;
				if (rows[s][i] != (float)i * (float)(i / 16 + 1) && !rows_wrong++)
					diag("seed %u: row-scaled element %d is %g, want %g", seed + s, i,
					     rows[s][i], (float)i * (float)(i / 16 + 1));
			}
		}
		for (int i = 0; i < 256; i++)
			differ += map[0][i] != map[1][i];
		ok(wrong[0] > 200 && wrong[1] > 200 && differ > 200 && perm,
		   "wmma: a kernel assuming sm_80's element-to-thread mapping misplaces %d and %d of "
		   "256 elements, differently under two seeds (%d differ)", wrong[0], wrong[1],
		   differ);
		ok(rows_wrong == 0, "wmma: rows learned from a fragment of row numbers are right "
		   "under both seeds");
	}

	ok(dies_with(run_wmma_half, "wmma::load_matrix_sync with mask 0xffffffff", got,
		     sizeof got) && strstr(got, "has returned") && strstr(got, "wmma_bad"),
	   "a wmma load reached by half a warp stops the kernel, named");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_wmma_ldm, "ldm 12", got, sizeof got) &&
		   strstr(got, "multiple of 16 bytes"),
	   "a wmma load with ldm 12 bf16 (24 bytes) stops the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_wmma_align, "not 256-bit (32-byte) aligned", got, sizeof got),
	   "a wmma load 16 bytes past 32-byte alignment stops the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_wmma_ptrs, "all lanes of the warp must pass the same", got, sizeof got),
	   "lanes of one wmma load passing different pointers stop the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
}

int main(int argc, char **argv)
{
	char got[2048];
	if (argc > 1 && !strcmp(argv[1], "orders"))
		return child_orders();
	if (argc > 1 && !strcmp(argv[1], "wmma"))
		return child_wmma();
	static float h[4096];
	float *din = dev_floats(4096), *dout = dev_floats(16);
	for (int i = 0; i < 4096; i++)
		h[i] = (float)(i % 97) * 0.25f;
	cudaMemcpy(din, h, sizeof h, cudaMemcpyHostToDevice);
	tree_sum<<<16, 256>>>(dout, din);
	float sums[16];
	cudaMemcpy(sums, dout, sizeof sums, cudaMemcpyDeviceToHost);
	int good = 1;
	for (int b = 0; b < 16; b++) {
		double want = 0;
		for (int i = 0; i < 256; i++)
			want += h[b * 256 + i];
		good &= sums[b] == (float)want;
	}
	ok(good, "a block tree sum over 16 blocks of 256 threads is exact");

	float *ds = dev_floats(32);
	void *db = NULL, *dd = NULL;
	cudaMalloc(&db, 32 * sizeof(unsigned));
	cudaMalloc(&dd, 32 * sizeof(int));
	warp_ops<<<1, 32>>>(ds, (unsigned *)db, (int *)dd);
	float s[32];
	unsigned bal[32];
	int down[32];
	cudaMemcpy(s, ds, sizeof s, cudaMemcpyDeviceToHost);
	cudaMemcpy(bal, db, sizeof bal, cudaMemcpyDeviceToHost);
	cudaMemcpy(down, dd, sizeof down, cudaMemcpyDeviceToHost);
	good = 1;
	for (int l = 0; l < 32; l++)
		good &= s[l] == 496.0f && bal[l] == 0x49249249u && down[l] == (l < 31 ? l + 1 : 31);
	ok(good, "butterfly sum, ballot and shuffle down over a warp");
	test_lt_gelu();

	ok(dies_with(run_divergent, "__syncthreads reached by 16 threads while 16 have returned", got,
		     sizeof got) && strstr(got, "divergent_barrier"),
	   "a barrier in a divergent branch stops the kernel, named");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_half_warp, "__shfl_xor_sync with mask 0xffffffff", got, sizeof got) &&
		   strstr(got, "has returned"),
	   "a full-mask shuffle reached by half a warp stops the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_outside, "outside the mask", got, sizeof got),
	   "a shuffle reading a lane outside its mask stops the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok((dies_with(run_disagree, "while lanes", got, sizeof got) ||
	    dies_with(run_disagree, "has returned", got, sizeof got)) &&
		   strstr(got, "masks_disagree"),
	   "lanes of one shuffle with different masks stop the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_partial_warp, "does not have", got, sizeof got),
	   "a full mask in a partial warp stops the kernel");
	diag("%.*s", (int)strcspn(got, "\n"), got);

	float *d4 = dev_floats(32), h4[16];
	copy128<<<1, 4>>>((float4 *)d4, din, 0);
	cudaMemcpy(h4, d4, sizeof h4, cudaMemcpyDeviceToHost);
	ok(!memcmp(h4, h, sizeof h4), "16-byte __ldcs and __stcs at aligned addresses copy");
	ok(dies_with(run_misaligned, "__ldcs of 16 bytes at", got, sizeof got) &&
		   strstr(got, "not 16-byte aligned") && strstr(got, "copy128"),
	   "a 16-byte load at an address that is no multiple of 16 stops the kernel, named");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_misaligned_arg, "launch argument 1", got, sizeof got) &&
		   strstr(got, "not 4-byte aligned") && strstr(got, "kernel fill"),
	   "a float pointer argument at an address that is no multiple of 4 stops the launch, named");
	diag("%.*s", (int)strcspn(got, "\n"), got);

	float *dm = dev_floats(64), m[64];
	const char *order = getenv("CUEMU_ORDER");
	int reverse = order && !strcmp(order, "reverse");
	for (int shift = 0; shift <= 1; shift++) {
		missing_trailing_barrier<<<1, 64>>>(dm, shift);
		cudaMemcpy(m, dm, sizeof m, cudaMemcpyDeviceToHost);
		int wrong = 0;
		for (int i = 0; i < 64; i++)
			wrong += m[i] != 64.0f + 128.0f;
		if (order && strcmp(order, "forward") && !reverse)
			ok(1, "# SKIP a missing trailing barrier: shuffled order");
		else if (shift == reverse)
			ok(wrong > 0, "a missing trailing barrier (writer thread %d) gives wrong sums "
			   "in %s order (%d of 64 threads)", shift ? 63 : 0,
			   reverse ? "reverse" : "forward", wrong);
	}

	void *du = NULL;
	unsigned u[8];
	cudaMalloc(&du, sizeof u);
	read_before_write<<<8, 1>>>((unsigned *)du);
	cudaMemcpy(u, du, sizeof u, cudaMemcpyDeviceToHost);
	int differ = 0;
	for (int i = 1; i < 8; i++)
		differ += u[i] != u[0];
	ok(differ > 0 && u[0] != 0, "shared memory read before a write is garbage that differs "
	   "from block to block");

	test_dynamic_shared();

	(void)cudaGetLastError();
	fill<<<1, 1025>>>(dm, 0.0f);
	ok(cudaGetLastError() == cudaErrorInvalidConfiguration,
	   "a block of 1025 threads is refused at launch (sm_90's limit is 1024)");
	fill<<<dim3(1, 65536), 1>>>(dm, 0.0f);
	ok(cudaGetLastError() == cudaErrorInvalidConfiguration,
	   "a grid y of 65536 is refused at launch");

	/* streams: a read that nothing orders after a write is a race;
	 * shuffled, the writer may have run early (then the report says
	 * the run's order hid it), or the reader early (the other form) */
	int shuffled = order && !strcmp(order, "shuffle");
	ok(dies_with(run_unordered, "a race on a GPU", got, sizeof got) &&
		   strstr(got, "cudaMemcpyAsync on stream 2 reads") &&
		   (strstr(got, "fill, queued before it on stream 1") ||
		    (shuffled && strstr(got, "after fill on stream 1"))),
	   "a copy on stream b not ordered after a kernel writing its source on stream a "
	   "is a race");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_missing_wait, "a race on a GPU", got, sizeof got) &&
		   strstr(got, "ncclAllReduce on stream") &&
		   (strstr(got, "fill, queued before it") ||
		    (shuffled && strstr(got, "after fill on stream"))),
	   "an allreduce on the communication stream without a wait for the model stream's "
	   "event is a race");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_hidden_missing_wait, "a race on a GPU", got, sizeof got) &&
		   strstr(got, "ncclAllReduce on stream") &&
		   ((strstr(got, "this run's order hid it") && strstr(got, "after fill on stream")) ||
		    (shuffled && strstr(got, "fill, queued before it"))),
	   "so is the same hole when the host's wait for the model stream ran the kernel first");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(model_to_comm(1, 0) == 0 && model_to_comm(1, 1) == 0,
	   "with the event, the allreduce reduces the kernel's output");
	ok(dies_with(run_lazy_load, "lazy loading", got, sizeof got) &&
		   strstr(got, "full_shuffle"),
	   "a kernel's first launch while a host function holds a stream is a deadlock");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	cudaStream_t a, b;
	cudaEvent_t e;
	cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
	cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
	cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
	float *x = dev_floats(1), *y = dev_floats(1), hy = 0;
	fill<<<1, 1, 0, a>>>(x, 5.0f);
	cudaEventRecord(e, a);
	cudaStreamWaitEvent(b, e, 0);
	cudaMemcpyAsync(y, x, 4, cudaMemcpyDeviceToDevice, b);
	cudaMemcpyAsync(&hy, y, 4, cudaMemcpyDeviceToHost, b);
	ok(hy == 5.0f, "with an event between them, it reads the kernel's output");
	cudaStreamDestroy(a);
	cudaStreamDestroy(b);
	cudaEventDestroy(e);
	test_orders();
	test_wmma();
	test_wmma_tf32();
	return done_testing();
}
