/*
 * selftest.cu - the CUDA emulation catches what it says it catches: each
 * defect below is planted in a small kernel, run in a child process, and
 * the emulation must stop it with a message naming the kernel and the
 * defect; correct kernels (a block tree, butterfly shuffles, votes) must
 * give the right values in every order. Built and run by check-cuemu
 * (tests/cuemu/cuemu.mk), in forward and reverse order.
 */
#include <cuda_runtime.h>
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

__global__ void fill(float *x, float v)
{
	x[threadIdx.x] = v;
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

static float *dev_floats(size_t n)
{
	void *p = NULL;
	cudaMalloc(&p, n * sizeof(float));
	return (float *)p;
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

int main(void)
{
	char got[2048];
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

	(void)cudaGetLastError();
	fill<<<1, 1025>>>(dm, 0.0f);
	ok(cudaGetLastError() == cudaErrorInvalidConfiguration,
	   "a block of 1025 threads is refused at launch (sm_90's limit is 1024)");
	fill<<<dim3(1, 65536), 1>>>(dm, 0.0f);
	ok(cudaGetLastError() == cudaErrorInvalidConfiguration,
	   "a grid y of 65536 is refused at launch");

	/* streams: a read that nothing orders after a write is a race */
	ok(dies_with(run_unordered, "a race on a GPU", got, sizeof got) &&
		   strstr(got, "cudaMemcpyAsync on stream 2 reads") &&
		   strstr(got, "fill, queued before it on stream 1"),
	   "a copy on stream b not ordered after a kernel writing its source on stream a "
	   "is a race");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_missing_wait, "a race on a GPU", got, sizeof got) &&
		   strstr(got, "ncclAllReduce on stream") && strstr(got, "fill, queued before it"),
	   "an allreduce on the communication stream without a wait for the model stream's "
	   "event is a race");
	diag("%.*s", (int)strcspn(got, "\n"), got);
	ok(dies_with(run_hidden_missing_wait, "this run's order hid it", got, sizeof got) &&
		   strstr(got, "ncclAllReduce on stream") && strstr(got, "after fill on stream"),
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
	return done_testing();
}
