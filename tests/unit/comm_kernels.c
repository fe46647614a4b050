/*
 * comm_kernels.c - lib/comm's element math on the CPU path (reduce.h via
 * kernels.c), the wire formats, the bounds and the names.
 *
 * References: fp16 arithmetic by the compiler's _Float16 (one IEEE
 * rounding of the exact sum, a different implementation from ours); bf16
 * by rounding the double-precision result to the nearer bf16 neighbour;
 * int32 by 64-bit arithmetic reduced modulo 2^32.
 */
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/internal.h"
#include "comm/reduce.h"
#include "tap.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint32_t next32(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}
static float frand(void) { return ((float)(next32() % 2000001) - 1e6f) * 1e-3f; }

/* The bf16 nearest to v (ties to even), from the two neighbours of f32(v). */
static uint16_t ref_bf16(double v)
{
	uint32_t u = gk_f32_bits((float)v);
	uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
	double dl = fabs(v - gk_bf16_to_f32(lo)), dh = fabs(v - gk_bf16_to_f32(hi));
	/* (float)v may have rounded across a bf16 boundary: check the one below too */
	uint16_t lo2 = (uint16_t)(lo - 1);
	double dl2 = fabs(v - gk_bf16_to_f32(lo2));
	uint16_t best = lo;
	double bd = dl;
	if (dh < bd || (dh == bd && !(hi & 1)))
		best = hi, bd = dh;
	if (dl2 < bd || (dl2 == bd && !(lo2 & 1)))
		best = lo2;
	return best;
}

static void test_pairwise(void)
{
	int good16 = 1, goodbf = 1, goodi = 1, goodmm = 1;
	for (int k = 0; k < 100000; k++) {
		float a = frand() * 0.01f, b = frand() * 0.01f;
		uint16_t ha = gk_f32_to_f16(a), hb = gk_f32_to_f16(b);
		_Float16 fa, fb, fs, fp;
		memcpy(&fa, &ha, 2);
		memcpy(&fb, &hb, 2);
		fs = fa + fb, fp = fa * fb;
		uint16_t ws, wp;
		memcpy(&ws, &fs, 2);
		memcpy(&wp, &fp, 2);
		good16 &= gk_red_f16(GK_RED_SUM, ha, hb) == ws;
		good16 &= gk_red_f16(GK_RED_PROD, ha, hb) == wp;

		uint16_t ba = gk_f32_to_bf16(a), bb = gk_f32_to_bf16(b);
		double da = gk_bf16_to_f32(ba), db = gk_bf16_to_f32(bb);
		goodbf &= gk_red_bf16(GK_RED_SUM, ba, bb) == ref_bf16(da + db);
		goodmm &= gk_red_bf16(GK_RED_MAX, ba, bb) == (da > db ? ba : bb);
		goodmm &= gk_red_bf16(GK_RED_MIN, ba, bb) == (da < db ? ba : bb);

		int32_t ia = (int32_t)next32() * 2 + 1, ib = (int32_t)next32() * 3;
		goodi &= gk_red_i32(GK_RED_SUM, ia, ib) == (int32_t)(uint32_t)((int64_t)ia + ib);
		goodi &= gk_red_i32(GK_RED_PROD, ia, ib) == (int32_t)(uint32_t)((uint64_t)(int64_t)ia * (uint64_t)(int64_t)ib);
	}
	ok(good16, "f16 sum and prod: one rounding, as _Float16 arithmetic");
	ok(goodbf, "bf16 sum: the nearest bf16 of the exact sum");
	ok(goodmm, "bf16 max and min");
	ok(goodi, "i32 sum and prod wrap modulo 2^32");
	ok(gk_avg_i32(-7, 2) == -3 && gk_avg_i32(7, 2) == 3, "i32 avg divides toward zero");
	ok(gk_avg_f16(gk_f32_to_f16(1.0f), 3) == gk_f32_to_f16(1.0f / 3.0f),
	   "f16 avg: one rounding of x/n");
}

static void test_loops(void)
{
	enum { N = 1001 };
	float a[N], b[N], want[N];
	int32_t ia[N], ib[N];
	int good = 1, goodi = 1;
	for (int op = 0; op < GK_COMM_OP_COUNT; op++) {
		for (int i = 0; i < N; i++) {
			a[i] = frand(), b[i] = frand();
			ia[i] = (int32_t)(next32() % 2001) - 1000, ib[i] = (int32_t)(next32() % 2001) - 1000;
			want[i] = op == GK_COMM_PROD ? a[i] * b[i] : op == GK_COMM_MAX ? fmaxf(a[i], b[i]) :
				  op == GK_COMM_MIN ? fminf(a[i], b[i]) : a[i] + b[i];
		}
		int32_t iw[N];
		for (int i = 0; i < N; i++)
			iw[i] = op == GK_COMM_PROD ? ia[i] * ib[i] : op == GK_COMM_MAX ? (ia[i] > ib[i] ? ia[i] : ib[i]) :
				op == GK_COMM_MIN ? (ia[i] < ib[i] ? ia[i] : ib[i]) : ia[i] + ib[i];
		gk_comm_reduce_cpu(a, b, N, GK_DT_F32, op);
		gk_comm_reduce_cpu(ia, ib, N, GK_DT_I32, op);
		for (int i = 0; i < N; i++)
			good &= a[i] == want[i], goodi &= ia[i] == iw[i];
	}
	ok(good, "f32 loop: sum prod max min avg match scalar C arithmetic");
	ok(goodi, "i32 loop: sum prod max min avg match scalar C arithmetic");
	float s[5] = {3, 6, -9, 1, 0};
	gk_comm_avg_cpu(s, 5, GK_DT_F32, 3);
	ok(s[0] == 1 && s[1] == 2 && s[2] == -3 && s[3] == 1.0f / 3.0f && s[4] == 0,
	   "f32 avg divides by the world");
}

static void test_wire(void)
{
	enum { N = 1000 }; /* three full int8 groups and a short one */
	float x[N], y[N], e[N];
	unsigned char w[8 * N];
	for (int i = 0; i < N; i++)
		x[i] = frand() * (float)ldexp(1, i / 256 * 3 - 4);
	is_u64(gk_comm_wire_bytes(GK_COMM_COMPRESS_INT8, N), 4 * 4 + N, "int8 wire: 4-byte scale per 256");
	is_u64(gk_comm_wire_bytes(GK_COMM_COMPRESS_BF16, N), 2 * N, "bf16 wire: 2 bytes each");

	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		gk_comm_pack(w, x, N, cz, e);
		gk_comm_unpack(y, w, N, cz, 0);
		int good = 1, exact_err = 1;
		for (int i = 0; i < N; i++) {
			double bound;
			if (cz == GK_COMM_COMPRESS_INT8) {
				float m = 0;
				for (int j = i / 256 * 256; j < N && j < i / 256 * 256 + 256; j++)
					m = fabsf(x[j]) > m ? fabsf(x[j]) : m;
				bound = m / 254.0 + ldexp(m, -20);
			} else {
				bound = fabs(x[i]) * ldexp(1, cz == GK_COMM_COMPRESS_BF16 ? -8 : -11);
			}
			good &= fabs((double)y[i] - x[i]) <= bound;
			exact_err &= e[i] == x[i] - y[i];
		}
		ok(good, "%s: each element within one rounding of the format",
		   gk_comm_compress_name(cz));
		ok(exact_err, "%s: the stored error is exactly x - unpacked(x)",
		   gk_comm_compress_name(cz));
		gk_comm_unpack(y, w, N, cz, 1);
		int add = 1;
		for (int i = 0; i < N; i++)
			add &= fabsf(y[i] - 2 * (x[i] - e[i])) <= 1e-6f * fabsf(x[i]);
		ok(add, "%s: unpack with add accumulates", gk_comm_compress_name(cz));
	}
	float z[300] = {0};
	gk_comm_pack(w, z, 300, GK_COMM_COMPRESS_INT8, NULL);
	gk_comm_unpack(y, w, 300, GK_COMM_COMPRESS_INT8, 0);
	int zero = 1;
	for (int i = 0; i < 300; i++)
		zero &= y[i] == 0;
	ok(zero, "int8: an all-zero group stays zero (scale 0)");
}

/*
 * Every NaN the element math makes is the one quiet NaN 0x7fc00000 (bf16
 * 0x7fc0, f16 0x7e00), whatever the NaNs it was given: the CPU keeps an
 * operand's payload (and makes 0xffc00000 of inf - inf) where a GPU
 * makes 0x7fffffff, so the device kernels (reduce.cu, the same functions)
 * could only match the CPU bit for bit this way.
 */
static void test_nan(void)
{
	enum { N = 300 }; /* a full int8 group and a short one */
	static const uint32_t odd[] = {0x7fa00001u, 0xffc12345u, 0x7f800000u, 0xff800000u};
	float x[N], acc[N], e[N], y[N];
	unsigned char w[8 * N];
	for (int i = 0; i < N; i++) {
		x[i] = frand();
		acc[i] = frand();
	}
	for (int k = 0; k < 4; k++)
		x[10 + 70 * k] = gk_bits_f32(odd[k]);
	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		gk_comm_pack(w, x, N, cz, e);
		int resid = 1, sum = 1, wire = 1;
		for (int i = 0; i < N; i++)
			resid &= e[i] == e[i] || gk_f32_bits(e[i]) == 0x7fc00000u;
		if (cz == GK_COMM_COMPRESS_INT8) {
			float sc;
			memcpy(&sc, w, 4);
			wire = gk_f32_bits(sc) == 0x7fc00000u;
		}
		memcpy(y, acc, sizeof y);
		gk_comm_unpack(y, w, N, cz, 1);
		int nans = 0;
		for (int i = 0; i < N; i++) {
			nans += y[i] != y[i];
			sum &= y[i] == y[i] || gk_f32_bits(y[i]) == 0x7fc00000u;
		}
		ok(resid && sum && wire && nans > 0,
		   "%s: a NaN or infinity packs, unpacks and adds to the canonical NaN 0x7fc00000",
		   gk_comm_compress_name(cz));
	}
	float a[4], b[4] = {1, 2, 3, 4}, inf = gk_bits_f32(0x7f800000u);
	int good = 1;
	for (int op = 0; op < GK_COMM_OP_COUNT; op++) {
		for (int k = 0; k < 4; k++)
			a[k] = gk_bits_f32(odd[k]);
		if (op == GK_COMM_SUM)
			a[2] = inf, b[2] = -inf; /* inf + -inf */
		gk_comm_reduce_cpu(a, b, 4, GK_DT_F32, op);
		for (int k = 0; k < 4; k++)
			good &= a[k] == a[k] || gk_f32_bits(a[k]) == 0x7fc00000u;
		b[2] = 3;
	}
	uint16_t h[2] = {0x7fa1, 0xffc3}, g[2] = {0x3f80, 0x3f80};
	gk_comm_reduce_cpu(h, g, 2, GK_DT_BF16, GK_COMM_SUM);
	good &= h[0] == 0x7fc0 && h[1] == 0x7fc0;
	double d = gk_bits_f32(0xffc12345u), d1 = 1;
	gk_comm_reduce_cpu(&d, &d1, 1, GK_DT_F64, GK_COMM_SUM);
	uint64_t db;
	memcpy(&db, &d, 8);
	good &= db == 0x7ff8000000000000ull;
	ok(good, "reductions of NaNs and inf - inf give the canonical NaN (f32, bf16, f64)");
}

static void test_bounds_names(void)
{
	double u = ldexp(1, -8);
	ok(fabs(gk_comm_compress_bound(GK_COMM_COMPRESS_BF16, 2, 1) - 4 * u / (1 - 4 * u)) < 1e-15,
	   "bf16 bound, 2 ranks: gamma(4)");
	ok(gk_comm_compress_bound(GK_COMM_COMPRESS_F16, 1, 5) == 0, "world 1: exact");
	ok(fabs(gk_comm_compress_bound(GK_COMM_COMPRESS_INT8, 1, 254) - (1 + 254 * ldexp(1, -20))) < 1e-9,
	   "int8 bound, one quantisation: A/254 (+ f32 slack)");
	ok(gk_comm_busbw_factor(GK_COMM_ALLREDUCE, 4) == 1.5, "allreduce busbw 2(n-1)/n");
	ok(gk_comm_busbw_factor(GK_COMM_ALLGATHER, 4) == 0.75, "allgather busbw (n-1)/n");
	ok(gk_comm_busbw_factor(GK_COMM_REDUCE_SCATTER, 4) == 0.75, "reducescatter busbw (n-1)/n");
	ok(gk_comm_busbw_factor(GK_COMM_BROADCAST, 4) == 1, "broadcast busbw 1");
	int names = 1;
	for (int i = 0; i < GK_COMM_OP_COUNT; i++)
		names &= gk_comm_op_parse(gk_comm_op_name(i)) == i;
	for (int i = 0; i < GK_COMM_ALGO_COUNT; i++)
		names &= gk_comm_algo_parse(gk_comm_algo_name(i)) == i;
	for (int i = 0; i < GK_COMM_COLL_COUNT; i++)
		names &= gk_comm_coll_parse(gk_comm_coll_name(i)) == i;
	for (int i = 0; i < GK_COMM_COMPRESS_COUNT; i++)
		names &= gk_comm_compress_parse(gk_comm_compress_name(i)) == i;
	ok(names, "names parse back");
	ok(gk_comm_coll_parse("all_reduce") == GK_COMM_ALLREDUCE &&
	   gk_comm_algo_parse("recursive-doubling") == GK_COMM_ALGO_RD &&
	   gk_comm_op_parse("mean") < 0, "aliases, and unknown names");
}

/* The harness's checks that need no communicator. */
static void test_bench_opts(void)
{
	gk_comm_bench_opts o;
	gk_err err = {0};
	uint64_t need;
	gk_comm_bench_defaults(&o);
	ok(gk_comm_bench_validate(&o, GK_COMM_BACKEND_AUTO, &err) == 0 &&
	   o.minbytes == 8 && o.maxbytes == 32 << 20 && o.factor == 2 && o.iters == 20 &&
	   o.warmup == 5 && o.check == 1 && o.average == GK_COMM_BENCH_MEAN,
	   "defaults: nccl-tests' sweep, the mean of the ranks' times");
	o.maxbytes = (uint64_t)1 << 30;
	ok(gk_comm_bench_host_bytes(&o, 8, &need) == 0 && need == (uint64_t)32 << 30,
	   "host memory: 4 buffers of 1 GiB on each of 8 ranks is 32 GiB");
	o.maxbytes = (uint64_t)1 << 62;
	ok(gk_comm_bench_host_bytes(&o, 1, &need) < 0, "4 x 2^62 overflows: refused, not 0");
	o.maxbytes = ((uint64_t)1 << 62) - 1;
	ok(gk_comm_bench_host_bytes(&o, 1, &need) == 0 && need == UINT64_MAX - 3,
	   "4 x (2^62 - 1) fits in 64 bits");
	ok(gk_comm_bench_host_bytes(&o, 2, &need) < 0, "... twice it does not");
	ok(gk_comm_bench_fits(&o, 1, &err) < 0 && strstr(err.msg, "of host memory on this node"),
	   "fits: %s", err.msg);

	struct {
		const char *what, *want;
		gk_comm_coll coll;
		gk_comm_algo algo;
		gk_comm_compress cz;
		gk_comm_backend b;
	} bad[] = {
		{"compress on rd", "--compress runs on the ring", GK_COMM_ALLREDUCE,
		 GK_COMM_ALGO_RD, GK_COMM_COMPRESS_BF16, GK_COMM_BACKEND_AUTO},
		{"reduce-scatter on rd", "not available for reducescatter", GK_COMM_REDUCE_SCATTER,
		 GK_COMM_ALGO_RD, GK_COMM_COMPRESS_NONE, GK_COMM_BACKEND_MPI},
		{"broadcast on the ring", "not available for broadcast", GK_COMM_BROADCAST,
		 GK_COMM_ALGO_RING, GK_COMM_COMPRESS_NONE, GK_COMM_BACKEND_AUTO},
		{"ring on nccl", "on the nccl backend", GK_COMM_ALLREDUCE,
		 GK_COMM_ALGO_RING, GK_COMM_COMPRESS_NONE, GK_COMM_BACKEND_NCCL},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(bad); i++) {
		gk_comm_bench_defaults(&o);
		o.coll = bad[i].coll, o.algo = bad[i].algo, o.compress = bad[i].cz;
		err.msg[0] = 0;
		ok(gk_comm_bench_validate(&o, bad[i].b, &err) < 0 && strstr(err.msg, bad[i].want),
		   "refused before running: %s (%s)", bad[i].what, err.msg);
	}
	gk_comm_bench_defaults(&o);
	o.compress = GK_COMM_COMPRESS_INT8;
	ok(gk_comm_bench_validate(&o, GK_COMM_BACKEND_NCCL, &err) == 0,
	   "compressed allreduce on nccl (its device ring) is fine");
	gk_comm_bench_defaults(&o);
	o.coll = GK_COMM_ALLGATHER, o.algo = GK_COMM_ALGO_RING;
	ok(gk_comm_bench_validate(&o, GK_COMM_BACKEND_AUTO, &err) == 0, "allgather on the ring is fine");
	o.factor = 1, o.stepbytes = 0;
	ok(gk_comm_bench_validate(&o, GK_COMM_BACKEND_AUTO, &err) < 0, "a sweep that never grows is refused");
}

int main(void)
{
	test_pairwise();
	test_loops();
	test_wire();
	test_nan();
	test_bounds_names();
	test_bench_opts();
	return done_testing();
}
