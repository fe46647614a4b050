/*
 * comm_cuda.c - lib/comm on the device: the reduce.cu kernels against the
 * CPU loops of kernels.c (the same reduce.h math, so results must be bit
 * for bit the same), and the nccl backend in a world of one.
 *
 * Without a GPU (asked of the system, tests/unit/gpu.h) the whole file is
 * skipped. With one, everything must work: a probe that does not find it,
 * or a communicator that fails to open, is a failure, not a skip.
 */
#include <dlfcn.h>
#include <math.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/internal.h"
#include "comm/reduce.h"
#include "cuda/cuda.h"
#include "tap.h"
#include "gpu.h"

#if GK_HAVE_NCCL
#include <nccl.h>
#endif

#if GK_HAVE_CUDA
static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint32_t next32(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static void fill(void *buf, size_t n, gk_dtype dt)
{
	for (size_t i = 0; i < n; i++) {
		float v = ((float)(next32() % 20001) - 10000) * 1e-3f;
		switch (dt) {
		case GK_DT_F32: ((float *)buf)[i] = v; break;
		case GK_DT_F64: ((double *)buf)[i] = (double)v * 1.0000001; break;
		case GK_DT_I32: ((int32_t *)buf)[i] = (int32_t)(next32() - 0x80000000u); break;
		case GK_DT_BF16: ((uint16_t *)buf)[i] = gk_f32_to_bf16(v); break;
		default: ((uint16_t *)buf)[i] = gk_f32_to_f16(v); break;
		}
	}
}

static void *dev_copy(const void *h, size_t bytes, gk_err *err)
{
	void *d = gk_cuda_alloc(bytes, GK_CUDA_MEM_WORKSPACE, err);
	if (d && gk_cuda_copy(d, h, bytes, NULL, err) < 0) {
		gk_cuda_free(d);
		return NULL;
	}
	return d;
}

/* Past the grid cap (65535 blocks of 256), so the grid-stride loop wraps. */
enum { N = 65535 * 256 + 4099 };

static void test_reduce_avg(void)
{
	static const gk_dtype dts[] = {GK_DT_F32, GK_DT_F64, GK_DT_I32, GK_DT_BF16, GK_DT_F16};
	gk_err err = {0};
	size_t n = 100003;
	for (size_t t = 0; t < GK_ARRAY_SIZE(dts); t++) {
		size_t bytes = n * gk_comm_dt_size(dts[t]);
		char *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
		fill(a, n, dts[t]);
		fill(b, n, dts[t]);
		for (int op = 0; op < GK_COMM_OP_COUNT; op++) {
			void *da = dev_copy(a, bytes, &err), *db = dev_copy(b, bytes, &err);
			memcpy(want, a, bytes);
			gk_comm_reduce_cpu(want, b, n, dts[t], op);
			int rc = da && db ? gk_comm_cuda_reduce(da, db, n, dts[t], op, NULL, &err) : -1;
			if (rc == 0)
				rc = gk_cuda_copy(got, da, bytes, NULL, &err);
			ok(rc == 0 && memcmp(got, want, bytes) == 0, "device reduce %s %s = CPU%s%s",
			   gk_dtype_name(dts[t]), gk_comm_op_name(op), rc ? ": " : "", rc ? err.msg : "");
			gk_cuda_free(da);
			gk_cuda_free(db);
		}
		for (int world = 5; world <= 10; world += world == 5 ? 2 : 3) {
			void *da = dev_copy(a, bytes, &err);
			memcpy(want, a, bytes);
			gk_comm_avg_cpu(want, n, dts[t], world);
			int rc = da ? gk_comm_cuda_avg(da, n, dts[t], world, NULL, &err) : -1;
			if (rc == 0)
				rc = gk_cuda_copy(got, da, bytes, NULL, &err);
			ok(rc == 0 && memcmp(got, want, bytes) == 0, "device avg %s over %d ranks = CPU",
			   gk_dtype_name(dts[t]), world);
			gk_cuda_free(da);
		}
		free(a), free(b), free(want), free(got);
	}
}

static void test_pack_unpack(void)
{
	gk_err err = {0};
	float *x = malloc(N * sizeof *x), *acc = malloc(N * sizeof *acc);
	float *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
	float *resid = malloc(N * sizeof *resid);
	size_t wmax = gk_comm_wire_bytes(GK_COMM_COMPRESS_INT8, N) + gk_comm_wire_bytes(GK_COMM_COMPRESS_BF16, N);
	unsigned char *hw = malloc(wmax), *dw_host = malloc(wmax);
	for (size_t i = 0; i < N; i++) {
		x[i] = ((float)(next32() % 2000001) / 1e6f - 1) * ldexpf(1, (int)(i / 256 % 12) - 6);
		acc[i] = ((float)(next32() % 2001) - 1000) * 1e-3f;
	}
	x[300] = NAN, x[5000] = INFINITY, x[N - 1] = -INFINITY;
	float *dx = dev_copy(x, N * sizeof *x, &err);
	void *dwire = gk_cuda_alloc(wmax, GK_CUDA_MEM_COMM, &err);
	float *dacc = gk_cuda_alloc(N * sizeof *dacc, GK_CUDA_MEM_WORKSPACE, &err);
	float *dres = gk_cuda_alloc(N * sizeof *dres, GK_CUDA_MEM_WORKSPACE, &err);
	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		size_t wb = gk_comm_wire_bytes(cz, N);
		gk_comm_pack(hw, x, N, cz, resid);
		int rc = gk_comm_cuda_pack(dwire, dx, N, cz, dres, NULL, &err);
		if (rc == 0)
			rc = gk_cuda_copy(dw_host, dwire, wb, NULL, &err);
		if (rc == 0)
			rc = gk_cuda_copy(got, dres, N * sizeof *got, NULL, &err);
		ok(rc == 0 && memcmp(dw_host, hw, wb) == 0, "device pack %s = CPU (%d elements, NaN and inf)",
		   gk_comm_compress_name(cz), N);
		ok(rc == 0 && memcmp(got, resid, N * sizeof *got) == 0,
		   "device pack %s: error feedback residual = CPU", gk_comm_compress_name(cz));
		for (int add = 0; add <= 1; add++) {
			memcpy(want, acc, N * sizeof *want);
			gk_comm_unpack(want, hw, N, cz, add);
			rc = gk_cuda_copy(dacc, acc, N * sizeof *acc, NULL, &err);
			if (rc == 0)
				rc = gk_comm_cuda_unpack(dacc, dwire, N, cz, add, NULL, &err);
			if (rc == 0)
				rc = gk_cuda_copy(got, dacc, N * sizeof *got, NULL, &err);
			ok(rc == 0 && memcmp(got, want, N * sizeof *got) == 0, "device unpack %s%s = CPU",
			   gk_comm_compress_name(cz), add ? " (add)" : "");
		}
	}
	/* absorb: x += residual, residual = 0 */
	int rc = gk_cuda_copy(dacc, acc, N * sizeof *acc, NULL, &err);
	if (rc == 0)
		rc = gk_comm_cuda_absorb(dacc, dres, N, NULL, &err);
	if (rc == 0)
		rc = gk_cuda_copy(got, dacc, N * sizeof *got, NULL, &err);
	int good = rc == 0;
	for (size_t i = 0; good && i < N; i++)
		good = gk_f32_bits(got[i]) == gk_f32_bits(acc[i] + resid[i]);
	if (rc == 0)
		rc = gk_cuda_copy(got, dres, N * sizeof *got, NULL, &err);
	for (size_t i = 0; good && i < N; i++)
		good = got[i] == 0;
	ok(good, "device absorb: x + residual, then the residual is zero");
	gk_cuda_free(dx), gk_cuda_free(dwire), gk_cuda_free(dacc), gk_cuda_free(dres);
	free(x), free(acc), free(want), free(got), free(hw), free(dw_host), free(resid);
}

static void test_nccl(void)
{
	gk_comm *c;
	gk_err err = {0};
	char trdir[] = "/tmp/gk-comm-cuda-XXXXXX";
	gk_comm_config cfg = {.backend = GK_COMM_BACKEND_NCCL, .device = -1,
			      .trace_dir = mkdtemp(trdir)};
	/* the versions: nccl.h's, and the library's own answer, which the
	 * loader finds the same way the backend does */
	int headers, library, lib2 = 0;
	int vrc = gk_comm_nccl_versions(&headers, &library);
	void *so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	int (*get)(int *) = so ? (int (*)(int *))dlsym(so, "ncclGetVersion") : NULL;
	if (get)
		get(&lib2);
	if (so)
		dlclose(so);
	diag("nccl-headers=%d nccl-library=%d", headers, library);
#if GK_HAVE_NCCL
	ok(headers == NCCL_VERSION_CODE && library == lib2 && (vrc == 0) == (lib2 > 0),
	   "nccl versions: the headers' and the loaded library's");
#else
	ok(vrc < 0 && !headers && !library, "nccl versions: none without NCCL");
#endif
	if (!ok(gk_comm_open(&c, &cfg, &err) == 0, "nccl backend opens on a machine with a GPU")) {
		diag("%s", err.msg);
		return;
	}
	enum { M = 1 << 20 };
	float *h = malloc(M * sizeof *h), *got = malloc(M * sizeof *got);
	uint16_t *hb = malloc(M * sizeof *hb);
	for (size_t i = 0; i < M; i++)
		hb[i] = gk_f32_to_bf16((float)((int)(i % 17) - 8));
	for (size_t i = 0; i < M; i++)
		h[i] = gk_bf16_to_f32(hb[i]);

	gk_cuda_mem_stats s0, s1;
	gk_cuda_mem_stats_get(&s0);
	float *d = gk_comm_alloc(c, M * sizeof *d, &err), *d2 = gk_comm_alloc(c, M * sizeof *d2, &err);
	uint16_t *db = gk_comm_alloc(c, M * sizeof *db, &err);
	gk_cuda_mem_stats_get(&s1);
	ok(d && d2 && db && s1.bytes[GK_CUDA_MEM_COMM] - s0.bytes[GK_CUDA_MEM_COMM] == M * 10,
	   "nccl buffers are counted as comm memory");

	/*
	 * The stream contract: the input is produced by a kernel on the
	 * caller's stream and the collective is started right after, with no
	 * host synchronisation in between.
	 */
	gk_cuda_stream us = NULL;
	int rc = gk_cuda_stream_new(&us, &err);
	if (rc == 0)
		rc = gk_comm_set_stream(c, us, &err);
	if (rc == 0)
		rc = gk_comm_to_device(c, db, hb, M * sizeof *hb, &err);
	if (rc == 0)
		rc = gk_cuda_convert(d, GK_DT_F32, db, GK_DT_BF16, M, us, &err);
	if (rc == 0)
		rc = gk_comm_allreduce(c, d, d2, M, GK_DT_F32, GK_COMM_SUM, NULL, &err);
	if (rc == 0)
		rc = gk_comm_to_host(c, got, d2, M * sizeof *got, &err);
	ok(rc == 0 && memcmp(got, h, M * sizeof *got) == 0,
	   "nccl allreduce after a kernel on the caller's stream reads its output (world %d)%s%s",
	   gk_comm_world(c), rc ? ": " : "", rc ? err.msg : "");

	/* Non-blocking, and the gradient buckets, in place. */
	gk_comm_req *req = NULL;
	rc = gk_cuda_convert(d, GK_DT_F32, db, GK_DT_BF16, M, us, &err);
	if (rc == 0)
		rc = gk_comm_iallreduce(c, d, d, M, GK_DT_F32, GK_COMM_AVG, NULL, &req, &err);
	if (rc == 0)
		rc = gk_comm_wait(req, &err);
	if (rc == 0)
		rc = gk_comm_to_host(c, got, d, M * sizeof *got, &err);
	ok(rc == 0 && memcmp(got, h, M * sizeof *got) == 0, "nccl iallreduce avg, world 1: the input");

	gk_comm_grads *g = NULL;
	rc = gk_comm_grads_new(&g, c, d, M, 1 << 18, NULL, &err);
	for (size_t off = M; rc == 0 && off > 0; off -= M / 8)
		rc = gk_comm_grads_ready(g, off - M / 8, &err);
	if (rc == 0)
		rc = gk_comm_grads_finish(g, &err);
	if (rc == 0)
		rc = gk_comm_to_host(c, got, d, M * sizeof *got, &err);
	ok(rc == 0 && gk_comm_grads_buckets(g) == 16 && memcmp(got, h, M * sizeof *got) == 0,
	   "nccl gradient buckets, world 1: the input");
	gk_comm_grads_free(g);

	/* Compressed on the device: in a world of one nothing is rounded. */
	gk_comm_callopts co = {GK_COMM_ALGO_AUTO, GK_COMM_COMPRESS_INT8, NULL};
	rc = gk_comm_to_device(c, d, h, M * sizeof *h, &err);
	if (rc == 0)
		rc = gk_comm_allreduce(c, d, d2, M, GK_DT_F32, GK_COMM_SUM, &co, &err);
	if (rc == 0)
		rc = gk_comm_to_host(c, got, d2, M * sizeof *got, &err);
	ok(rc == 0 && memcmp(got, h, M * sizeof *got) == 0,
	   "nccl compressed allreduce, world 1: the input%s%s", rc ? ": " : "", rc ? err.msg : "");
	/* and a compressed reduce-scatter, in place and out of place */
	rc = gk_comm_reduce_scatter(c, d, d, M, GK_DT_F32, GK_COMM_AVG, &co, &err);
	if (rc == 0)
		rc = gk_comm_reduce_scatter(c, d, d2, M, GK_DT_F32, GK_COMM_SUM, &co, &err);
	if (rc == 0)
		rc = gk_comm_to_host(c, got, d2, M * sizeof *got, &err);
	ok(rc == 0 && memcmp(got, h, M * sizeof *got) == 0,
	   "nccl compressed reduce-scatter, world 1: the input%s%s", rc ? ": " : "",
	   rc ? err.msg : "");

	/*
	 * The flight recorder: every operation above, in order, ended once
	 * the host saw it end (a blocking call's synchronisation, a wait).
	 */
	char path[128];
	snprintf(path, sizeof path, "%s/trace-c%d-r00000.jsonl", trdir, c->tr.id);
	ok(gk_comm_trace_dump(c, "test") == 0, "nccl: the flight recorder dumps");
	FILE *f = fopen(path, "r");
	char line[1024];
	int n = 0, done = 0, buckets = 0;
	int order = 1;
	while (f && fgets(line, sizeof line, f)) {
		json_t *j = json_loads(line, 0, NULL);
		const char *op = json_string_value(json_object_get(j, "op"));
		const char *st = json_string_value(json_object_get(j, "state"));
		const char *tag = json_string_value(json_object_get(j, "tag"));
		if (n > 0) {
			done += st && !strcmp(st, "done");
			if (tag && !strcmp(tag, "bucket") &&
			    json_integer_value(json_object_get(j, "index")) == buckets)
				buckets++;
			/* 2 allreduces, 16 buckets, 1 compressed allreduce, 2 reduce-scatters */
			order &= op && !strcmp(op, n <= 19 ? "allreduce" : "reducescatter") &&
				 json_integer_value(json_object_get(j, "seq")) == n;
		}
		json_decref(j);
		n++;
	}
	if (f)
		fclose(f);
	ok(n == 22 && done == 21 && buckets == 16 && order,
	   "nccl: 21 operations recorded in order, all done, 16 buckets tagged (%d %d %d %d)",
	   n - 1, done, buckets, order);
	remove(path);
	rmdir(trdir);

	gk_comm_free(c, d), gk_comm_free(c, d2), gk_comm_free(c, db);
	ok(gk_comm_finalize(c, &err) == 0, "nccl teardown reports success");
	gk_comm_close(c);
	gk_cuda_stream_free(us);
	free(h), free(got), free(hb);
}
#endif

int main(void)
{
	gk_err err = {0};
	char why[256];
	int run = gpu_expect(gk_cuda_probe(NULL, &err) == 0, err.msg, why, sizeof why);
	if (run == 0)
		gpu_skip_all(why);
	if (run < 0)
		return done_testing();
#if GK_HAVE_CUDA
	test_reduce_avg();
	test_pack_unpack();
#if GK_HAVE_NCCL
	test_nccl();
#else
	printf("ok %d # SKIP nccl backend: built without NCCL\n", ++tap_n);
#endif
#endif
	return done_testing();
}
