/*
 * comm_cuda.c - lib/comm on the device: the reduce.cu kernels against the
 * CPU loops of kernels.c (the same reduce.h math, so results must be bit
 * for bit the same), and the nccl backend in a world of one. With the
 * argument "pieces", under mpirun (one rank a GPU), only the collectives
 * of unequal pieces and ZeRO-2's partitioned buckets, at the world's size.
 *
 * Without a GPU (asked of the system, tests/unit/gpu.h) the whole file is
 * skipped. With one, everything must work: a probe that does not find it,
 * or a communicator that fails to open, is a failure, not a skip.
 */
#include <dlfcn.h>
#include <float.h>
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

static void test_nccl_pieces(gk_comm *c);

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
	/* a second communicator would open MPI again after the first's close
	 * finalized it: the pieces on this one */
	test_nccl_pieces(c);

	gk_comm_free(c, d), gk_comm_free(c, d2), gk_comm_free(c, db);
	ok(gk_comm_finalize(c, &err) == 0, "nccl teardown reports success");
	gk_comm_close(c);
	gk_cuda_stream_free(us);
	free(h), free(got), free(hb);
}

/*
 * Unequal pieces over NCCL, in place (gk_comm_ireduce_scatterv and
 * gk_comm_iallgatherv: a group of ncclReduce or ncclBroadcast rooted at
 * each owner of a piece): the shapes a bucket or a unit has (all in one
 * owner's piece, an even split with a remainder, the first and the last
 * piece empty), against the host's sums. The values are small integers,
 * so every order of summing gives the same floats; AVG is that sum
 * divided once, as gk_comm_avg_cpu divides.
 */
static void pieces_of(int shape, int world, size_t n, size_t *displ)
{
	for (int q = 0; q <= world; q++) {
		size_t even = n * (size_t)q / (size_t)world;
		displ[q] = shape == 0 ? (q ? n : 0) :
			   shape == 1 ? even :
			   shape == 2 ? (q == 0 ? 0 : n * (size_t)(q - 1) / (size_t)(world > 1 ? world - 1 : 1)) :
			   (q == world ? n : n * (size_t)q / (size_t)(world > 1 ? world - 1 : 1));
		if (displ[q] > n)
			displ[q] = n;
	}
	displ[world] = n;
}

static void test_nccl_avg(gk_comm *c);
static void test_nccl_after(gk_comm *c);
static void test_nccl_compressed_pieces(gk_comm *c);

static void test_nccl_pieces(gk_comm *c)
{
	enum { NP = 1000 };
	int W = gk_comm_world(c), R = gk_comm_rank(c);
	size_t *displ = calloc((size_t)W + 1, sizeof *displ);
	float *h = malloc(NP * sizeof *h), *got = malloc(NP * sizeof *got);
	gk_err err = {0};
	float *d = gk_comm_alloc(c, NP * sizeof *d, &err);
	if (!ok(displ && h && got && d, "pieces: buffers")) {
		diag("%s", err.msg);
		return;
	}
	static const char *const shape_name[] = {"one owner", "even", "first empty",
						 "last empty"};
	for (int shape = 0; shape < 4; shape++) {
		pieces_of(shape, W, NP, displ);
		for (int avg = 0; avg < 2; avg++) {
			for (size_t i = 0; i < NP; i++)
				h[i] = (float)((R + 1) * ((int)(i % 13) - 6));
			gk_comm_req *rq = NULL;
			int rc = gk_comm_to_device(c, d, h, NP * sizeof *h, &err);
			if (rc == 0)
				rc = gk_comm_ireduce_scatterv(c, d, displ, GK_DT_F32,
							      avg ? GK_COMM_AVG : GK_COMM_SUM, NULL, &rq, &err);
			if (rc == 0)
				rc = gk_comm_wait(rq, &err);
			if (rc == 0)
				rc = gk_comm_to_host(c, got, d, NP * sizeof *got, &err);
			/* ncclAvg multiplies each input by 1/world first: the sum
			 * divided once, exactly where the world is a power of two,
			 * else within (world + 2) epsilons of the mean of |x| */
			int pow2 = (W & (W - 1)) == 0;
			size_t bad = 0;
			for (size_t i = displ[R]; rc == 0 && i < displ[R + 1]; i++) {
				float want = (float)(((int)(i % 13) - 6) * W * (W + 1) / 2);
				if (avg)
					want = want / (float)W;
				if (!avg || pow2)
					bad += memcmp(&got[i], &want, sizeof want) != 0;
				else
					bad += !(fabsf(got[i] - want) <=
						 (float)(W + 2) * FLT_EPSILON * fabsf(want));
			}
			ok(rc == 0 && bad == 0, "reduce-scatterv %s over nccl, world %d, %s pieces: "
			   "this rank's piece is the %s%s%s", avg ? "avg" : "sum", W,
			   shape_name[shape], avg ? pow2 ? "sum divided once" : "mean within bounds" : "sum",
			   rc ? ": " : "", rc ? err.msg : "");
		}
		/* every piece its owner's, the rest of the buffer garbage */
		for (size_t i = 0; i < NP; i++)
			h[i] = i >= displ[R] && i < displ[R + 1] ? (float)(R * 10000 + (int)i) : -1;
		gk_comm_req *rq = NULL;
		int rc = gk_comm_to_device(c, d, h, NP * sizeof *h, &err);
		if (rc == 0)
			rc = gk_comm_iallgatherv(c, d, displ, GK_DT_F32, &rq, &err);
		if (rc == 0)
			rc = gk_comm_wait(rq, &err);
		if (rc == 0)
			rc = gk_comm_to_host(c, got, d, NP * sizeof *got, &err);
		size_t bad = 0;
		for (int q = 0; rc == 0 && q < W; q++)
			for (size_t i = displ[q]; i < displ[q + 1]; i++)
				bad += got[i] != (float)(q * 10000 + (int)i);
		ok(rc == 0 && bad == 0, "allgatherv over nccl, world %d, %s pieces: every piece "
		   "its owner's%s%s", W, shape_name[shape], rc ? ": " : "", rc ? err.msg : "");
	}

	/*
	 * ZeRO-2's partitioned buckets on the device: two micro-steps, the
	 * second adding into the shard, the division once; each rank owns per
	 * of the NP gradients (the last rank fewer), buckets of 96 floats
	 * aligned to 32, two in flight. After the first micro-step the
	 * buckets' ranges read as zeros (the next backward adds into them).
	 */
	size_t per = (NP + (size_t)W - 1) / (size_t)W;
	float *shard = gk_comm_alloc(c, per * sizeof *shard, &err);
	gk_comm_grads *g = NULL;
	int rc = shard ? gk_comm_grads_new(&g, c, d, NP, 96 * sizeof(float), NULL, &err) : -1;
	if (rc == 0)
		rc = gk_comm_grads_partition(g, shard, per, 32, 2, NULL, NULL, &err);
	size_t zeros = 0;
	for (int a = 0; rc == 0 && a < 2; a++) {
		for (size_t i = 0; i < NP; i++)
			h[i] = (float)((R + 1) * ((int)(i % 7) - 3 + a));
		gk_comm_grads_micro(g, a == 0, a == 1);
		rc = gk_comm_to_device(c, d, h, NP * sizeof *h, &err);
		for (size_t off = NP; rc == 0 && off > 0; off = off > 100 ? off - 100 : 0)
			rc = gk_comm_grads_ready(g, off > 100 ? off - 100 : 0, &err);
		if (rc == 0)
			rc = gk_comm_grads_finish(g, &err);
		if (rc == 0 && a == 0 && (rc = gk_comm_to_host(c, got, d, NP * sizeof *got, &err)) == 0)
			for (size_t i = 0; i < NP; i++)
				zeros += got[i] == 0;
	}
	size_t mine = (size_t)R * per >= NP ? 0 : (size_t)R * per + per > NP ? NP - (size_t)R * per : per;
	if (rc == 0)
		rc = gk_comm_to_host(c, got, shard, mine * sizeof *got, &err);
	size_t bad = 0;
	for (size_t k = 0; rc == 0 && k < mine; k++) {
		size_t i = (size_t)R * per + k;
		float want = (float)((((int)(i % 7) - 3) * 2 + 1) * W * (W + 1) / 2) / (float)W;
		bad += memcmp(&got[k], &want, sizeof want) != 0;
	}
	ok(rc == 0 && bad == 0 && zeros == NP,
	   "partitioned gradient buckets over nccl, world %d, 2 micro-steps: the shard is the "
	   "average of their sums, the buffer zeros between them (%zu wrong, %zu of %d zeros)%s%s",
	   W, bad, zeros, NP, rc ? ": " : "", rc ? err.msg : "");
	gk_comm_grads_free(g);
	gk_comm_free(c, shard);
	gk_comm_free(c, d);
	free(displ), free(h), free(got);
	test_nccl_avg(c);
	test_nccl_after(c);
	test_nccl_compressed_pieces(c);
}

/*
 * Compressed reduce-scatter of unequal pieces over NCCL (ZeRO-2's
 * buckets with --compress): a buffer of world ranges of per floats, cut
 * into buckets of 96 whose pieces are the owners' parts, each bucket
 * reduce-scattered compressed with its part of the error feedback, twice
 * (the second round adds the first's feedback). The reference is the
 * whole buffer's compressed reduce-scatter (ZeRO-1's, which the CPU's
 * ring checks): an element's partial sums take the same ring path in
 * both, and bf16 and f16 pack each element alone, so this rank's range
 * and the whole feedback must be its bits. int8 scales groups counted
 * from each piece's start: its first round against the exact sum, within
 * gk_comm_compress_bound of the largest sum of magnitudes within a
 * group's length of the element (each group it can be in), and not
 * exact everywhere (it did compress) but in a world of one.
 */
#define PIECES_NP 1000

static float piece_input(size_t i, int rank, int round)
{
	return i < PIECES_NP ? sinf(0.37f * (float)i + (float)(rank + round)) * (float)(1 + i % 5) : 0;
}

static void test_nccl_compressed_pieces(gk_comm *c)
{
	enum { BUCKET = 96 };
	int W = gk_comm_world(c), R = gk_comm_rank(c);
	size_t per = (PIECES_NP + (size_t)W - 1) / (size_t)W, n = per * (size_t)W;
	size_t *displ = calloc((size_t)W + 1, sizeof *displ);
	float *h = calloc(n, sizeof *h), *got = calloc(n, sizeof *got);
	float *want = calloc(n, sizeof *want);
	gk_err err = {0};
	float *d = gk_comm_alloc(c, n * sizeof *d, &err);
	float *ref = d ? gk_comm_alloc(c, n * sizeof *ref, &err) : NULL;
	float *res = ref ? gk_comm_alloc(c, n * sizeof *res, &err) : NULL;
	float *rres = res ? gk_comm_alloc(c, n * sizeof *rres, &err) : NULL;
	if (!ok(displ && h && got && want && rres, "compressed pieces: buffers")) {
		diag("%s", err.msg);
		return;
	}
	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		gk_comm_callopts ro = {.compress = (gk_comm_compress)cz, .residual = rres};
		int rc = gk_comm_to_device(c, res, want, n * sizeof *want, &err); /* zeros */
		if (rc == 0)
			rc = gk_comm_to_device(c, rres, want, n * sizeof *want, &err);
		int int8 = cz == GK_COMM_COMPRESS_INT8;
		size_t bad = 0, badr = 0, exact = 0;
		for (int round = 0; rc == 0 && round < (int8 ? 1 : 2); round++) {
			for (size_t i = 0; i < n; i++)
				h[i] = piece_input(i, R, round);
			rc = gk_comm_to_device(c, d, h, n * sizeof *h, &err);
			if (rc == 0)
				rc = gk_comm_to_device(c, ref, h, n * sizeof *h, &err);
			for (size_t lo = 0; rc == 0 && lo < n; lo += BUCKET) {
				size_t hi = lo + BUCKET < n ? lo + BUCKET : n;
				for (int q = 0; q <= W; q++) {
					size_t at = (size_t)q * per;
					displ[q] = (at < lo ? lo : at > hi ? hi : at) - lo;
				}
				gk_comm_callopts o = {.compress = (gk_comm_compress)cz,
						      .residual = res + lo};
				gk_comm_req *rq = NULL;
				rc = gk_comm_ireduce_scatterv(c, d + lo, displ, GK_DT_F32, GK_COMM_SUM,
							      &o, &rq, &err);
				if (rc == 0)
					rc = gk_comm_wait(rq, &err);
			}
			if (rc == 0)
				rc = gk_comm_reduce_scatter(c, ref, ref + (size_t)R * per, per, GK_DT_F32,
							    GK_COMM_SUM, &ro, &err);
			if (rc == 0)
				rc = gk_comm_to_host(c, got, d, n * sizeof *got, &err);
			if (rc == 0)
				rc = gk_comm_to_host(c, want, ref, n * sizeof *want, &err);
			for (size_t i = (size_t)R * per; rc == 0 && !int8 && i < (size_t)(R + 1) * per;
			     i++)
				bad += gk_f32_bits(got[i]) != gk_f32_bits(want[i]);
			for (size_t i = (size_t)R * per; rc == 0 && int8 && i < (size_t)(R + 1) * per;
			     i++) {
				double sum = 0, most = 0;
				for (int q = 0; q < W; q++)
					sum += piece_input(i, q, 0);
				size_t a = i >= GK_COMM_INT8_GROUP ? i - GK_COMM_INT8_GROUP + 1 : 0;
				for (size_t j = a; j < i + GK_COMM_INT8_GROUP && j < n; j++) {
					double s = 0;
					for (int q = 0; q < W; q++)
						s += fabs(piece_input(j, q, 0));
					most = s > most ? s : most;
				}
				bad += !(fabs(got[i] - sum) <=
					 gk_comm_compress_bound(GK_COMM_COMPRESS_INT8, W, most));
				exact += got[i] == (float)sum;
			}
		}
		if (int8) {
			/* (a world of one packs nothing: exact) */
			ok(rc == 0 && bad == 0 && (W == 1 ? exact == per : exact < per),
			   "compressed int8 reduce-scatterv over nccl, world %d, buckets of %d: "
			   "within the bound of the exact sum, %s (%zu outside, %zu of %zu exact)%s%s",
			   W, BUCKET, W == 1 ? "exact" : "not exact", bad, exact, per,
			   rc ? ": " : "", rc ? err.msg : "");
			break;
		}
		if (rc == 0)
			rc = gk_comm_to_host(c, got, res, n * sizeof *got, &err);
		if (rc == 0)
			rc = gk_comm_to_host(c, want, rres, n * sizeof *want, &err);
		for (size_t i = 0; rc == 0 && i < n; i++)
			badr += gk_f32_bits(got[i]) != gk_f32_bits(want[i]);
		ok(rc == 0 && bad == 0 && badr == 0, "compressed %s reduce-scatterv over nccl, world "
		   "%d, buckets of %d: the whole buffer's reduce-scatter, bit for bit, feedback too "
		   "(%zu, %zu wrong)%s%s", gk_comm_compress_name(cz), W, BUCKET, bad, badr,
		   rc ? ": " : "", rc ? err.msg : "");
		memset(want, 0, n * sizeof *want);
	}
	gk_comm_free(c, d), gk_comm_free(c, ref), gk_comm_free(c, res), gk_comm_free(c, rres);
	free(displ), free(h), free(got), free(want);
}

/*
 * gk_comm_stream_after (ZeRO-3's units on a GPU): the caller's stream
 * ordered after an all-gather on the device, read there before the host
 * has waited for it, which it does after. The emulation's shuffled
 * order runs NCCL's stream and the caller's in either order and fails a
 * read of the gather's bytes that no event orders after it.
 */
static void test_nccl_after(gk_comm *c)
{
	enum { NP = 777 };
	int W = gk_comm_world(c), R = gk_comm_rank(c);
	size_t *displ = calloc((size_t)W + 1, sizeof *displ);
	float *h = malloc(NP * sizeof *h), *got = malloc(NP * sizeof *got);
	gk_err err = {0};
	float *d = gk_comm_alloc(c, NP * sizeof *d, &err);
	int rc = displ && h && got && d ? 0 : -1;
	size_t bad = 0;
	for (int k = 0; rc == 0 && k < 3; k++) {
		pieces_of(1, W, NP, displ);
		for (size_t i = 0; i < NP; i++)
			h[i] = i >= displ[R] && i < displ[R + 1] ? (float)(k * 1000 + R * 100000 + (int)i)
								 : -1;
		gk_comm_req *rq = NULL;
		rc = gk_comm_to_device(c, d, h, NP * sizeof *h, &err);
		if (rc == 0)
			rc = gk_comm_iallgatherv(c, d, displ, GK_DT_F32, &rq, &err);
		if (rc == 0 && (rc = gk_comm_stream_after(rq, &err)) == 0)
			rc = gk_comm_to_host(c, got, d, NP * sizeof *got, &err);
		if (rq) {
			gk_err werr = {0};
			int wrc = gk_comm_wait(rq, &werr);
			if (rc == 0 && wrc < 0)
				rc = wrc, err = werr;
		}
		for (int q = 0; rc == 0 && q < W; q++)
			for (size_t i = displ[q]; i < displ[q + 1]; i++)
				bad += got[i] != (float)(k * 1000 + q * 100000 + (int)i);
	}
	ok(rc == 0 && bad == 0, "allgatherv over nccl, world %d, read on the caller's stream "
	   "ordered after it on the device (gk_comm_stream_after), before the host waits: every "
	   "piece its owner's (%zu wrong)%s%s", W, bad, rc ? ": " : "", rc ? err.msg : "");
	gk_comm_free(c, d);
	free(displ), free(h), free(got);
}

/*
 * AVG allreduce over NCCL (ncclAvg where the headers have it: each input
 * times 1/world, then summed, for the floating types) against the
 * fallback it replaces (SUM, then the division kernel) and against the
 * mean in double. At world 2 the two are the same bits (a product by
 * 1/2 is exact); at any world each lies within (world + 2) epsilons of
 * the type times the mean of |x| of the mean, which a division done
 * twice or left out (a factor of the world) is far from.
 */
static void test_nccl_avg(gk_comm *c)
{
	enum { NA = 777 };
	int W = gk_comm_world(c), R = gk_comm_rank(c);
	gk_err err = {0};
	float *h = malloc(NA * sizeof *h), *f = malloc(NA * sizeof *f), *g = malloc(NA * sizeof *g);
	uint16_t *hb = malloc(NA * sizeof *hb), *fb = malloc(NA * sizeof *fb), *gb = malloc(NA * sizeof *gb);
	double *mean = malloc(NA * sizeof *mean), *mabs = malloc(NA * sizeof *mabs);
	void *d = gk_comm_alloc(c, NA * sizeof(float), &err);
	if (!ok(h && f && g && hb && fb && gb && mean && mabs && d, "avg: buffers")) {
		diag("%s", err.msg);
		return;
	}
	/* rank r's x[i], the same function on every rank */
#define AVG_X(r, i) ((float)((((r) * 7919 + (int)(i) * 104729) % 2001) - 1000) / 1000.0f * \
		     ldexpf(1, (int)(i) % 5 - 2))
	static const gk_dtype dts[] = {GK_DT_F32, GK_DT_BF16};
	for (int t = 0; t < 2; t++) {
		int bf = dts[t] == GK_DT_BF16;
		size_t bytes = NA * (bf ? 2 : 4);
		for (size_t i = 0; i < NA; i++) {
			h[i] = AVG_X(R, i), hb[i] = gk_f32_to_bf16(h[i]);
			mean[i] = mabs[i] = 0;
			for (int r = 0; r < W; r++) {
				double x = bf ? gk_bf16_to_f32(gk_f32_to_bf16(AVG_X(r, i))) : AVG_X(r, i);
				mean[i] += x / W, mabs[i] += fabs(x) / W;
			}
		}
		const void *src = bf ? (void *)hb : (void *)h;
		void *nat = bf ? (void *)fb : (void *)f, *fall = bf ? (void *)gb : (void *)g;
		int rc = gk_comm_to_device(c, d, src, bytes, &err);
		if (rc == 0)
			rc = gk_comm_allreduce(c, d, d, NA, dts[t], GK_COMM_AVG, NULL, &err);
		if (rc == 0)
			rc = gk_comm_to_host(c, nat, d, bytes, &err);
		if (rc == 0)
			rc = gk_comm_to_device(c, d, src, bytes, &err);
		if (rc == 0)
			rc = gk_comm_allreduce(c, d, d, NA, dts[t], GK_COMM_SUM, NULL, &err);
		if (rc == 0)
			rc = gk_comm_cuda_avg(d, NA, dts[t], W, NULL, &err);
		if (rc == 0)
			rc = gk_comm_to_host(c, fall, d, bytes, &err);
		double eps = bf ? ldexp(1, -7) : FLT_EPSILON, worst = 0;
		size_t far = 0, differ = 0;
		for (size_t i = 0; rc == 0 && i < NA; i++) {
			double a = bf ? gk_bf16_to_f32(fb[i]) : f[i];
			double b = bf ? gk_bf16_to_f32(gb[i]) : g[i];
			double bound = (W + 2) * eps * mabs[i];
			far += !(fabs(a - mean[i]) <= bound) + !(fabs(b - mean[i]) <= bound);
			differ += bf ? fb[i] != gb[i] : memcmp(&f[i], &g[i], sizeof *f) != 0;
			if (mabs[i] > 0 && fabs(a - mean[i]) / mabs[i] > worst)
				worst = fabs(a - mean[i]) / mabs[i];
		}
		ok(rc == 0 && far == 0 && (W != 2 || differ == 0),
		   "allreduce avg %s over nccl, world %d: within (world + 2) eps of the mean, as SUM "
		   "and the division kernel are%s (%zu out of bounds, %zu differ from the fallback, "
		   "worst %.2g eps)%s%s", gk_dtype_name(dts[t]), W,
		   W == 2 ? ", and the same bits as they" : "", far, differ, worst / eps,
		   rc ? ": " : "", rc ? err.msg : "");
	}
#undef AVG_X
	gk_comm_free(c, d);
	free(h), free(f), free(g), free(hb), free(fb), free(gb), free(mean), free(mabs);
}

/*
 * NCCL's reductions at the API, a world of one: ncclAvg is one of them
 * (NCCL 2.10 and later), and ncclNumOps, which no
 * ncclRedOpCreatePreMulSum made, is refused with ncclInvalidArgument, as
 * NCCL refuses it (the emulation's NCCL too).
 */
static void test_nccl_ops(void)
{
	void *so = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	__typeof__(&ncclGetUniqueId) uid = so ? (__typeof__(&ncclGetUniqueId))dlsym(so, "ncclGetUniqueId") : NULL;
	__typeof__(&ncclCommInitRank) init = so ? (__typeof__(&ncclCommInitRank))dlsym(so, "ncclCommInitRank") : NULL;
	__typeof__(&ncclAllReduce) ar = so ? (__typeof__(&ncclAllReduce))dlsym(so, "ncclAllReduce") : NULL;
	__typeof__(&ncclCommDestroy) destroy = so ? (__typeof__(&ncclCommDestroy))dlsym(so, "ncclCommDestroy") : NULL;
	gk_err err = {0};
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	float h[4] = {1.5f, -2, 3, 0.25f}, got[4] = {0};
	float *d = gk_cuda_alloc(sizeof h, GK_CUDA_MEM_COMM, &err);
	if (!ok(uid && init && ar && destroy && d && uid(&id) == ncclSuccess &&
		init(&comm, 1, id, 0) == ncclSuccess, "nccl ops: a communicator of one")) {
		diag("%s", err.msg);
		gk_cuda_free(d);
		if (so)
			dlclose(so);
		return;
	}
	int rc = gk_cuda_copy(d, h, sizeof h, NULL, &err);
	ncclResult_t avg = rc ? ncclSystemError : ar(d, d, 4, ncclFloat32, ncclAvg, comm, NULL);
	if (rc == 0 && avg == ncclSuccess)
		rc = gk_cuda_copy(got, d, sizeof got, NULL, &err);
	ok(rc == 0 && avg == ncclSuccess && memcmp(got, h, sizeof h) == 0,
	   "nccl ops: ncclAvg over one rank is the input");
	ok(ar(d, d, 4, ncclFloat32, ncclNumOps, comm, NULL) == ncclInvalidArgument,
	   "nccl ops: ncclNumOps is refused (ncclInvalidArgument)");
	destroy(comm);
	gk_cuda_free(d);
	dlclose(so);
}

static void test_nccl_world(void)
{
	gk_comm *c;
	gk_err err = {0};
	gk_comm_config cfg = {.backend = GK_COMM_BACKEND_NCCL, .device = -1};
	if (!ok(gk_comm_open(&c, &cfg, &err) == 0, "nccl backend opens for the pieces")) {
		diag("%s", err.msg);
		return;
	}
	test_nccl_pieces(c);
	ok(gk_comm_finalize(c, &err) == 0, "nccl teardown after the pieces reports success");
	gk_comm_close(c);
}
#endif

int main(int argc, char **argv)
{
	(void)argc, (void)argv;
	gk_err err = {0};
	char why[256];
	int run = gpu_expect(gk_cuda_probe(NULL, &err) == 0, err.msg, why, sizeof why);
	if (run == 0)
		gpu_skip_all(why);
	if (run < 0)
		return done_testing();
#if GK_HAVE_CUDA
#if GK_HAVE_NCCL
	if (argc > 1 && !strcmp(argv[1], "pieces")) {
		test_nccl_world();
		return done_testing();
	}
#endif
	test_reduce_avg();
	test_pack_unpack();
#if GK_HAVE_NCCL
	test_nccl_ops();
	test_nccl();
#else
	printf("ok %d # SKIP nccl backend: built without NCCL\n", ++tap_n);
#endif
#endif
	return done_testing();
}
