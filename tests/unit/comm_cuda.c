/*
 * comm_cuda.c - lib/comm on the device: the reduce.cu kernels against the
 * CPU loops (the same reduce.h math, so results must be bit-identical),
 * and the nccl backend in a world of one. Skips without a CUDA device.
 */
#include <string.h>

#include "comm/comm.h"
#include "comm/internal.h"
#include "cuda/cuda.h"
#include "tap.h"
#if GK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int main(void)
{
	const char *why = NULL;
	if (gk_cuda_device_count(&why) == 0)
		skip_all("no CUDA device");
#if GK_HAVE_CUDA
	enum { N = 4099 };
	static float a[N], b[N], got[N];
	static unsigned char wire[8 * N];
	for (int i = 0; i < N; i++)
		a[i] = (float)(i % 97) * 0.37f - 11, b[i] = (float)(i % 13) * 1.5f - 4;
	float *da, *db;
	void *dw;
	cudaMalloc((void **)&da, sizeof a);
	cudaMalloc((void **)&db, sizeof b);
	cudaMalloc(&dw, sizeof wire);
	for (int op = 0; op < GK_COMM_OP_COUNT; op++) {
		float want[N];
		memcpy(want, a, sizeof a);
		gk_comm_reduce_cpu(want, b, N, GK_DT_F32, op);
		cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
		cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
		ok(gk_comm_cuda_reduce(da, db, N, GK_DT_F32, op, NULL, NULL) == 0, "reduce launches");
		cudaMemcpy(got, da, sizeof got, cudaMemcpyDeviceToHost);
		ok(memcmp(got, want, sizeof got) == 0, "device reduce %s = CPU", gk_comm_op_name(op));
	}
	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		size_t wb = gk_comm_wire_bytes(cz, N);
		unsigned char want[8 * N];
		gk_comm_pack(want, a, N, cz, NULL);
		cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
		gk_comm_cuda_pack(dw, da, N, cz, NULL, NULL);
		cudaMemcpy(wire, dw, wb, cudaMemcpyDeviceToHost);
		ok(memcmp(wire, want, wb) == 0, "device pack %s = CPU", gk_comm_compress_name(cz));
	}
	cudaFree(da), cudaFree(db), cudaFree(dw);

	gk_comm *c;
	gk_err err = {0};
	gk_comm_config cfg = {.backend = GK_COMM_BACKEND_NCCL, .device = -1};
	if (gk_comm_open(&c, &cfg, &err) < 0) {
		diag("nccl backend: %s", err.msg);
	} else {
		float *d = gk_comm_alloc(c, sizeof a, &err);
		gk_comm_to_device(c, d, a, sizeof a, &err);
		ok(gk_comm_allreduce(c, d, d, N, GK_DT_F32, GK_COMM_SUM, NULL, &err) == 0,
		   "nccl allreduce, world %d", gk_comm_world(c));
		gk_comm_to_host(c, got, d, sizeof got, &err);
		ok(memcmp(got, a, sizeof a) == 0, "world 1: allreduce is the input");
		gk_comm_free(c, d);
		gk_comm_close(c);
	}
#endif
	return done_testing();
}
