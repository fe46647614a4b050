/*
 * comm_world.c - lib/comm's collectives against MPI's own, in whatever
 * world it runs in: directly (world 1, self backend, checked against the
 * definition) or under `mpirun -np N` (t6001 runs N = 1..5), where every
 * algorithm x dtype x op x in/out-of-place x count is compared with
 * MPI_Allreduce (MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast).
 *
 * Inputs are small random integers, so every correct order of reduction
 * gives the same exact result and any difference is a bug. Rank 0 prints
 * the TAP; each check is the AND over all ranks.
 *
 * Point-to-point messages (gk_comm_isend, gk_comm_irecv): refused in a
 * world of one; in a world of several, a ring where every rank starts its
 * send before its receive, with messages larger than MPI's eager limit
 * (so a send completes only once its receive is posted), a pipeline's
 * both directions at once, and the flight recorder's entries.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if GK_HAVE_MPI
#include <mpi.h>
#endif

#include "comm/comm.h"
#include "comm/internal.h" /* the flight recorder's ring, for test_p2p */
#include "core/half.h"
#include "tap.h"

static gk_comm *C;
static int N, R, USE_MPI;

/* Agree on a check: 1 only if it held on every rank. */
static int all(int cond)
{
#if GK_HAVE_MPI
	if (USE_MPI) {
		int v = cond ? 1 : 0;
		MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		return v;
	}
#endif
	return cond;
}

static uint64_t rng;
static uint32_t next32(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static size_t esz(gk_dtype dt) { return gk_dtype_bits(dt) / 8; }

static void put(void *b, size_t i, gk_dtype dt, double v) { gk_dtype_set(b, dt, i, v); }
static double get(const void *b, size_t i, gk_dtype dt) { return gk_dtype_get(b, dt, i); }

/* Random small integers suited to the op (exact in every dtype). */
static void fill(void *b, size_t n, gk_dtype dt, gk_comm_op op)
{
	for (size_t i = 0; i < n; i++) {
		double v;
		if (op == GK_COMM_PROD)
			v = next32() % 8 == 0 ? 2 : (next32() % 2 ? -1 : 1);
		else if (op == GK_COMM_MAX || op == GK_COMM_MIN)
			v = (double)(next32() % 201) - 100;
		else
			v = (double)(next32() % 17) - 8;
		put(b, i, dt, v);
	}
}

/*
 * The reference: MPI over the values widened to double (exact for these
 * inputs), then AVG's one division in the type's arithmetic (comm.h).
 */
static void reference(const void *in, double *out, size_t n, gk_dtype dt,
		      gk_comm_op op)
{
	for (size_t i = 0; i < n; i++)
		out[i] = get(in, i, dt);
#if GK_HAVE_MPI
	if (USE_MPI && n) {
		MPI_Op mop = op == GK_COMM_PROD ? MPI_PROD : op == GK_COMM_MAX ? MPI_MAX :
			     op == GK_COMM_MIN ? MPI_MIN : MPI_SUM;
		MPI_Allreduce(MPI_IN_PLACE, out, (int)n, MPI_DOUBLE, mop, MPI_COMM_WORLD);
	}
#endif
	if (op != GK_COMM_AVG)
		return;
	for (size_t i = 0; i < n; i++) {
		switch (dt) {
		case GK_DT_F64: out[i] = out[i] / N; break;
		case GK_DT_I32: out[i] = (double)((int32_t)out[i] / N); break;
		case GK_DT_F32: out[i] = (float)out[i] / (float)N; break;
		case GK_DT_BF16: out[i] = gk_bf16_to_f32(gk_f32_to_bf16((float)out[i] / (float)N)); break;
		default: out[i] = gk_f16_to_f32(gk_f32_to_f16((float)out[i] / (float)N)); break;
		}
	}
}

static const gk_dtype dts[] = {GK_DT_F32, GK_DT_F64, GK_DT_F16, GK_DT_BF16, GK_DT_I32};
static const size_t counts[] = {0, 1, 3, 4, 7, 1031, 70001};

static void test_allreduce(void)
{
	gk_comm_algo algos[] = {GK_COMM_ALGO_NATIVE, GK_COMM_ALGO_RING, GK_COMM_ALGO_RD,
				GK_COMM_ALGO_RABENSEIFNER, GK_COMM_ALGO_AUTO};
	size_t maxn = 70001;
	void *in = malloc(maxn * 8), *out = malloc(maxn * 8);
	double *ref = malloc(maxn * sizeof *ref);
	for (size_t a = 0; a < GK_ARRAY_SIZE(algos); a++)
		for (size_t d = 0; d < GK_ARRAY_SIZE(dts); d++)
			for (int op = 0; op < GK_COMM_OP_COUNT; op++) {
				int good = 1;
				char why[1100] = "";
				for (size_t k = 0; k < GK_ARRAY_SIZE(counts); k++)
					for (int ip = 0; ip < 2; ip++) {
						size_t n = counts[k];
						gk_dtype dt = dts[d];
						fill(in, n, dt, op);
						reference(in, ref, n, dt, op);
						void *dst = ip ? in : out;
						gk_comm_callopts o = {algos[a], 0, NULL};
						gk_err err = {0};
						if (gk_comm_allreduce(C, in, dst, n, dt, op, &o, &err) < 0) {
							good = 0;
							snprintf(why, sizeof why, "%s", err.msg);
							continue;
						}
						for (size_t i = 0; i < n; i++)
							if (get(dst, i, dt) != ref[i]) {
								if (good)
									snprintf(why, sizeof why, "count %zu %s [%zu]: %g want %g",
										 n, ip ? "in-place" : "out-of-place", i,
										 get(dst, i, dt), ref[i]);
								good = 0;
								break;
							}
					}
				if (!all(good) && why[0])
					diag("rank %d: %s", R, why);
				ok(all(good), "allreduce %s %s %s, world %d", gk_comm_algo_name(algos[a]),
				   gk_dtype_name(dts[d]), gk_comm_op_name(op), N);
			}
	free(in);
	free(out);
	free(ref);
}

/* Fractional data: the order of reduction matters, yet all ranks must agree. */
static void test_bitwise_identical(void)
{
	gk_comm_algo algos[] = {GK_COMM_ALGO_RING, GK_COMM_ALGO_RD, GK_COMM_ALGO_RABENSEIFNER};
	size_t n = 5003;
	float *x = malloc(n * 4);
	for (size_t a = 0; a < GK_ARRAY_SIZE(algos); a++) {
		for (size_t i = 0; i < n; i++)
			x[i] = (float)((int)(next32() % 2000001) - 1000000) * 1e-6f * (float)(R + 1);
		gk_comm_callopts o = {algos[a], 0, NULL};
		int rc = gk_comm_allreduce(C, x, x, n, GK_DT_F32, GK_COMM_SUM, &o, NULL);
		double h[2] = {(double)(gk_xxh3(x, n * 4) >> 12), 0};
		h[1] = -h[0];
#if GK_HAVE_MPI
		if (USE_MPI)
			MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#endif
		ok(all(rc == 0) && h[0] == -h[1], "allreduce %s: bitwise identical on all %d ranks",
		   gk_comm_algo_name(algos[a]), N);
	}
	free(x);
}

static void test_rs_ag_bcast(void)
{
	gk_comm_algo algos[] = {GK_COMM_ALGO_NATIVE, GK_COMM_ALGO_RING};
	size_t per_counts[] = {0, 1, 5, 333};
	for (size_t a = 0; a < 2; a++)
		for (size_t d = 0; d < GK_ARRAY_SIZE(dts); d++) {
			gk_dtype dt = dts[d];
			int good_rs = 1, good_ag = 1;
			for (size_t k = 0; k < GK_ARRAY_SIZE(per_counts); k++)
				for (int ip = 0; ip < 2; ip++)
					for (int op = 0; op < GK_COMM_OP_COUNT; op++) {
						size_t per = per_counts[k], tot = per * (size_t)N;
						char *big = malloc(tot * 8 + 8), *small = malloc(per * 8 + 8);
						double *ref = malloc(tot * sizeof *ref + 8);
						fill(big, tot, dt, op);
						reference(big, ref, tot, dt, op);
						void *dst = ip ? big + (size_t)R * per * esz(dt) : small;
						gk_comm_callopts o = {algos[a], 0, NULL};
						if (gk_comm_reduce_scatter(C, big, dst, per, dt, op, &o, NULL) < 0)
							good_rs = 0;
						for (size_t i = 0; good_rs && i < per; i++)
							if (get(dst, i, dt) != ref[(size_t)R * per + i])
								good_rs = 0;
						/* allgather: rank r's slice is r*1000 + i */
						for (size_t i = 0; i < per; i++)
							put(small, i, dt, (double)((R * 37 + (int)i) % 200 - 100));
						if (ip)
							memcpy(big + (size_t)R * per * esz(dt), small, per * esz(dt));
						const void *src = ip ? big + (size_t)R * per * esz(dt) : small;
						if (gk_comm_allgather(C, src, big, per, dt, &o, NULL) < 0)
							good_ag = 0;
						for (size_t i = 0; good_ag && i < tot; i++)
							if (get(big, i, dt) != (double)(((int)(i / per) * 37 + (int)(i % per)) % 200 - 100))
								good_ag = 0;
						free(big);
						free(small);
						free(ref);
					}
			ok(all(good_rs), "reduce-scatter %s %s, world %d", gk_comm_algo_name(algos[a]),
			   gk_dtype_name(dt), N);
			ok(all(good_ag), "allgather %s %s, world %d", gk_comm_algo_name(algos[a]),
			   gk_dtype_name(dt), N);
		}
	int good = 1;
	for (int root = 0; root < N; root++) {
		int32_t v[77];
		for (int i = 0; i < 77; i++)
			v[i] = R == root ? i * 3 + root : -1;
		if (gk_comm_broadcast(C, v, v, 77, GK_DT_I32, root, NULL) < 0)
			good = 0;
		for (int i = 0; i < 77; i++)
			good &= v[i] == i * 3 + root;
	}
	ok(all(good), "broadcast from every root, world %d", N);
	ok(all(gk_comm_barrier(C, NULL) == 0), "barrier");
}

/*
 * Reduce to every root, each algorithm, dtype and op, in and out of
 * place: the root holds the reference, and every other rank's recv is
 * untouched (a sentinel).
 */
static void test_reduce(void)
{
	gk_comm_algo algos[] = {GK_COMM_ALGO_NATIVE, GK_COMM_ALGO_RING};
	size_t cs[] = {0, 1, 7, 1031};
	for (size_t a = 0; a < 2; a++)
		for (size_t d = 0; d < GK_ARRAY_SIZE(dts); d++) {
			gk_dtype dt = dts[d];
			int good = 1;
			for (int root = 0; root < N; root++)
				for (size_t k = 0; k < GK_ARRAY_SIZE(cs); k++)
					for (int ip = 0; ip < 2; ip++)
						for (int op = 0; op < GK_COMM_OP_COUNT; op++) {
							size_t n = cs[k];
							char *in = malloc(n * 8 + 8), *out = malloc(n * 8 + 8);
							double *ref = malloc(n * 8 + 8);
							fill(in, n, dt, op);
							reference(in, ref, n, dt, op);
							for (size_t i = 0; i < n; i++)
								put(out, i, dt, 99);
							if (ip)
								memcpy(out, in, n * esz(dt));
							gk_comm_callopts o = {algos[a], 0, NULL};
							int rc;
							if (op % 2) {
								gk_comm_req *q;
								rc = gk_comm_ireduce(C, ip ? out : in, out, n, dt,
										     op, root, &o, &q, NULL);
								rc = rc < 0 ? rc : gk_comm_wait(q, NULL);
							} else {
								rc = gk_comm_reduce(C, ip ? out : in, out, n, dt, op,
										    root, &o, NULL);
							}
							good &= rc == 0;
							for (size_t i = 0; i < n; i++)
								good &= R == root ? get(out, i, dt) == ref[i] :
									get(out, i, dt) == (ip ? get(in, i, dt) : 99);
							free(in);
							free(out);
							free(ref);
						}
			ok(all(good), "reduce %s %s to every root, world %d",
			   gk_comm_algo_name(algos[a]), gk_dtype_name(dt), N);
		}
}

/* Several outstanding requests, a blocking call among them, all right. */
static void test_nonblocking(void)
{
	enum { B = 6 };
	size_t sz[B] = {1, 100, 4097, 0, 33, 20000};
	float *buf[B];
	double *ref[B];
	gk_comm_req *req[B];
	int good = 1;
	for (int b = 0; b < B; b++) {
		buf[b] = malloc(sz[b] * 4 + 4);
		ref[b] = malloc(sz[b] * 8 + 8);
		fill(buf[b], sz[b], GK_DT_F32, GK_COMM_SUM);
		reference(buf[b], ref[b], sz[b], GK_DT_F32, GK_COMM_AVG);
		gk_comm_callopts o = {b % 2 ? GK_COMM_ALGO_RING : GK_COMM_ALGO_AUTO, 0, NULL};
		if (gk_comm_iallreduce(C, buf[b], buf[b], sz[b], GK_DT_F32, GK_COMM_AVG, &o,
				       &req[b], NULL) < 0)
			good = 0, req[b] = NULL;
		if (b == 2) {
			int32_t v = R + 1;
			gk_comm_allreduce(C, &v, &v, 1, GK_DT_I32, GK_COMM_SUM, NULL, NULL);
			good &= v == N * (N + 1) / 2;
		}
	}
	int done = 0;
	if (req[B - 1])
		good &= gk_comm_test(req[B - 1], &done, NULL) == 0;
	for (int b = B - 1; b >= 0; b--) {
		if (req[b] && gk_comm_wait(req[b], NULL) < 0)
			good = 0;
		for (size_t i = 0; i < sz[b]; i++)
			good &= buf[b][i] == (float)ref[b][i];
		free(buf[b]);
		free(ref[b]);
	}
	ok(all(good), "6 outstanding iallreduce + a blocking call, waited in reverse, world %d", N);
}

/* Buckets started as "backward" walks down, twice (the object is reused). */
static void test_grads(void)
{
	size_t n = 10007;
	float *g = malloc(n * 4);
	double *ref = malloc(n * 8);
	gk_comm_grads *gr;
	int good = gk_comm_grads_new(&gr, C, g, n, 4096, NULL, NULL) == 0;
	good &= gk_comm_grads_buckets(gr) == (n + 1023) / 1024;
	for (int step = 0; good && step < 2; step++) {
		fill(g, n, GK_DT_F32, GK_COMM_SUM);
		reference(g, ref, n, GK_DT_F32, GK_COMM_AVG);
		for (size_t layer = n; layer > 0; layer = layer > 777 ? layer - 777 : 0)
			good &= gk_comm_grads_ready(gr, layer, NULL) == 0;
		good &= gk_comm_grads_finish(gr, NULL) == 0;
		for (size_t i = 0; i < n; i++)
			good &= g[i] == (float)ref[i];
	}
	gk_comm_grads_free(gr);
	ok(all(good), "gradient buckets: 10 buckets overlapped with backward, two steps, world %d", N);

	/*
	 * ZeRO-1's buckets: each rank gets the average of the elements it
	 * owns, at its place in dst; the gradients stay as they were. per
	 * does not divide the buckets, so buckets span owners.
	 */
	size_t per = (n + (size_t)N - 1) / (size_t)N;
	float *dst = malloc(per * (size_t)N * 4), *keep = malloc(n * 4);
	good = gk_comm_grads_new(&gr, C, g, n, 4096, NULL, NULL) == 0 &&
	       gk_comm_grads_shard(gr, dst, per, NULL) == 0;
	for (int step = 0; good && step < 2; step++) {
		fill(g, n, GK_DT_F32, GK_COMM_SUM);
		memcpy(keep, g, n * 4);
		reference(g, ref, n, GK_DT_F32, GK_COMM_AVG);
		for (size_t i = 0; i < per * (size_t)N; i++)
			dst[i] = -1000;
		for (size_t layer = n; layer > 0; layer = layer > 777 ? layer - 777 : 0)
			good &= gk_comm_grads_ready(gr, layer, NULL) == 0;
		good &= gk_comm_grads_finish(gr, NULL) == 0;
		good &= memcmp(g, keep, n * 4) == 0;
		for (size_t i = (size_t)R * per; i < (size_t)(R + 1) * per && i < n; i++)
			good &= dst[i] == (float)ref[i];
	}
	gk_comm_grads_free(gr);
	ok(all(good), "ZeRO-1 buckets: each rank its own range's average, two steps, world %d", N);
	gk_err err = {0};
	gk_comm_callopts co = {.compress = GK_COMM_COMPRESS_BF16};
	good = gk_comm_grads_new(&gr, C, g, n, 4096, &co, NULL) == 0 &&
	       gk_comm_grads_shard(gr, dst, per, &err) < 0 &&
	       strstr(err.msg, "do not compress") != NULL;
	gk_comm_grads_free(gr);
	good &= gk_comm_grads_new(&gr, C, g, n, 4096, NULL, NULL) == 0 &&
		gk_comm_grads_shard(gr, dst, per / 2, &err) < 0 && strstr(err.msg, "cannot own");
	gk_comm_grads_free(gr);
	ok(all(good), "ZeRO-1 buckets refuse compression and ranges that miss gradients");
	free(dst);
	free(keep);
	free(g);
	free(ref);
}

/*
 * Reduce-scatter of unequal pieces (ZeRO-2's buckets): each rank's piece
 * of the in-place buffer against MPI's sum of the whole, SUM and AVG, in
 * layouts every rank draws alike (their own generator) with empty pieces,
 * one rank holding all, and pieces that are not the ring's equal blocks.
 */
static void test_scatterv(void)
{
	enum { L = 6 };
	uint64_t lr = 12345;
	int good = 1;
	size_t *displ = malloc(((size_t)N + 1) * sizeof *displ);
	for (int l = 0; l < L; l++) {
		displ[0] = 0;
		for (int q = 0; q < N; q++) {
			lr ^= lr << 13, lr ^= lr >> 7, lr ^= lr << 17;
			size_t c = l == 0 ? 0 : l == 1 ? (q == N - 1 ? 5000 : 0) :
				   l == 2 ? 1 : (size_t)(lr >> 20) % (l == 5 ? 30000 : 3000);
			if (l >= 3 && q % 3 == 1)
				c = 0;
			displ[q + 1] = displ[q] + c;
		}
		size_t n = displ[N];
		for (int opi = 0; opi < 2; opi++) {
			gk_comm_op op = opi ? GK_COMM_AVG : GK_COMM_SUM;
			float *b = malloc(n * 4 + 4);
			double *ref = malloc(n * 8 + 8);
			fill(b, n, GK_DT_F32, GK_COMM_SUM);
			reference(b, ref, n, GK_DT_F32, op);
			gk_comm_req *rq;
			if (gk_comm_ireduce_scatterv(C, b, displ, GK_DT_F32, op, NULL, &rq, NULL) < 0 ||
			    gk_comm_wait(rq, NULL) < 0)
				good = 0;
			for (size_t i = displ[R]; i < displ[R + 1]; i++)
				good &= b[i] == (float)ref[i];
			free(b);
			free(ref);
		}
	}
	gk_err err = {0};
	displ[0] = 5, displ[1] = 2;
	gk_comm_req *rq;
	float x[8];
	good &= N == 1 || (gk_comm_ireduce_scatterv(C, x, displ, GK_DT_F32, GK_COMM_SUM, NULL, &rq,
						    &err) < 0 && strstr(err.msg, "ends before"));
	free(displ);
	ok(all(good), "reduce-scatter of unequal pieces (empty, one rank's, uneven): each rank's "
	   "piece the world's sum and average, world %d", N);
}

/*
 * The all-gather of unequal pieces (ZeRO-3's parameters): every rank's
 * piece, written by its owner alone, in every rank's buffer, in the same
 * layouts as the reduce-scatter's (empty pieces, one rank holding all,
 * uneven), and a buffer whose other pieces held garbage before.
 */
static void test_allgatherv(void)
{
	enum { L = 6 };
	uint64_t lr = 54321;
	int good = 1;
	size_t *displ = malloc(((size_t)N + 1) * sizeof *displ);
	for (int l = 0; l < L; l++) {
		displ[0] = 0;
		for (int q = 0; q < N; q++) {
			lr ^= lr << 13, lr ^= lr >> 7, lr ^= lr << 17;
			size_t c = l == 0 ? 0 : l == 1 ? (q == N - 1 ? 5000 : 0) :
				   l == 2 ? 1 : (size_t)(lr >> 20) % (l == 5 ? 30000 : 3000);
			if (l >= 3 && q % 3 == 1)
				c = 0;
			displ[q + 1] = displ[q] + c;
		}
		size_t n = displ[N];
		float *b = malloc(n * 4 + 4);
		for (size_t i = 0; i < n; i++)
			b[i] = -1.0f - (float)R; /* garbage but this rank's piece */
		for (size_t i = displ[R]; i < displ[R + 1]; i++)
			b[i] = (float)(i % 65521) * 0.5f + 1.0f;
		gk_comm_req *rq;
		if (gk_comm_iallgatherv(C, b, displ, GK_DT_F32, &rq, NULL) < 0 ||
		    gk_comm_wait(rq, NULL) < 0)
			good = 0;
		for (size_t i = 0; i < n; i++)
			good &= b[i] == (float)(i % 65521) * 0.5f + 1.0f;
		free(b);
	}
	gk_err err = {0};
	displ[0] = 5, displ[1] = 2;
	gk_comm_req *rq;
	float x[8];
	good &= N == 1 || (gk_comm_iallgatherv(C, x, displ, GK_DT_F32, &rq, &err) < 0 &&
			   strstr(err.msg, "ends before"));
	free(displ);
	ok(all(good), "allgather of unequal pieces (empty, one rank's, uneven): every rank "
	   "holds every piece, world %d", N);
}

/*
 * ZeRO-2 with no buffer of all the gradients (gk_comm_grads_cuts and
 * _place, a GPU's bucket buffers): buckets above below only at the
 * allowed boundaries (as many pieces as fit in the bucket, or one piece
 * larger than it), below it on multiples of align, never across it; each
 * bucket's gradients read where at() puts them (a ring of two buffers
 * above below, reused as soon as the bucket two before is retired), and
 * the shard the world's sum / N, exactly (small integers).
 */
typedef struct {
	size_t below, *lo, nb, n;
	float *head, *ring[2];
} placed;

static float *placed_at(size_t lo, void *ctx)
{
	placed *p = ctx;
	if (lo < p->below)
		return p->head + lo;
	size_t b = 0;
	while (p->lo[b] != lo)
		b++;
	return p->ring[b % 2];
}

static void test_placed(void)
{
	enum { n = 1000 };
	static const size_t cut1[] = {200, 450, 460, 700, 1000}, want1[] = {700, 450, 200, 0};
	static const size_t cut2[] = {100, 600, 1000}, want2[] = {600, 100, 0};
	const size_t *cuts[2] = {cut1, cut2}, ncut[2] = {5, 3}, *want[2] = {want1, want2};
	const size_t nwant[2] = {4, 3};
	size_t per = (n + (size_t)N - 1) / (size_t)N;
	float *shard = malloc(per * 4), *ring = malloc(2 * n * 4), *head = malloc(n * 4);
	for (int k = 0; k < 2; k++) {
		gk_comm_grads *gr;
		placed p = {.below = cuts[k][0], .n = n, .head = head, .ring = {ring, ring + n}};
		int good = shard && ring && head &&
			   gk_comm_grads_new(&gr, C, NULL, n, 300 * 4, NULL, NULL) == 0 &&
			   gk_comm_grads_cuts(gr, cuts[k], ncut[k], cuts[k][0], NULL) == 0 &&
			   gk_comm_grads_partition(gr, shard, per, 50, 1, NULL, NULL, NULL) == 0;
		size_t nb = good ? gk_comm_grads_buckets(gr) : 0, lo[8], hi;
		good &= nb == nwant[k];
		for (size_t b = 0; good && b < nb; b++) {
			gk_comm_grads_bucket(gr, b, &lo[b], &hi);
			good &= lo[b] == want[k][b] && hi == (b ? lo[b - 1] : n);
		}
		p.lo = lo, p.nb = nb;
		if (good)
			gk_comm_grads_place(gr, placed_at, &p);
		/* backward: each bucket written where at() says, as it comes */
		for (size_t b = 0; good && b < nb; b++) {
			hi = b ? lo[b - 1] : n;
			float *w = placed_at(lo[b], &p);
			for (size_t i = lo[b]; i < hi; i++)
				w[i - lo[b]] = (float)((R + 1) * (int)(i % 11));
			good &= gk_comm_grads_ready(gr, lo[b], NULL) == 0;
		}
		good &= good && gk_comm_grads_finish(gr, NULL) == 0;
		for (size_t i = (size_t)R * per; good && i < (size_t)(R + 1) * per && i < n; i++)
			good &= shard[i - (size_t)R * per] ==
				(float)((int)(i % 11) * N * (N + 1) / 2) / (float)N;
		if (nb)
			gk_comm_grads_free(gr);
		ok(all(good), "placed ZeRO-2 buckets (cuts %s): at the allowed boundaries, read "
		   "from a ring of two buffers, the shard the world's sum / %d",
		   k ? "wider than a bucket" : "within a bucket", N);
	}
	free(shard), free(ring), free(head);
}

/* what ZeRO-2's buckets hand back, in order */
typedef struct {
	size_t next, align, calls;
	int good;
	float *g;
} done_log;

static void partition_done(size_t lo, size_t hi, void *ctx)
{
	done_log *d = ctx;
	d->good &= hi == d->next && lo < hi && lo % d->align == 0;
	d->next = lo;
	d->calls++;
	for (size_t i = lo; i < hi; i++)
		d->g[i] = 0; /* released: reads as zeros */
}

/*
 * ZeRO-2's partitioned buckets over three micro-steps, twice: buckets
 * on multiples of align (300, not dividing the bucket), handed back from
 * the end down to 0 exactly once a micro-step, and the shard the sum of
 * every micro-step's world sums divided by the world once (small
 * integers: exact), with two in flight and with each waited at once.
 */
static void test_partition(void)
{
	size_t n = 10007, per = (n + (size_t)N - 1) / (size_t)N;
	float *g = malloc(n * 4), *shard = malloc(per * 4);
	double *ref = malloc(n * 8), *tot = malloc(n * 8);
	for (size_t depth = 0; depth <= 2; depth += 2) {
		gk_comm_grads *gr;
		done_log d = {.align = 300, .good = 1, .g = g};
		int good = gk_comm_grads_new(&gr, C, g, n, 4096, NULL, NULL) == 0 &&
			   gk_comm_grads_partition(gr, shard, per, 300, depth, partition_done, &d,
						   NULL) == 0;
		for (int step = 0; good && step < 2; step++) {
			for (size_t i = 0; i < n; i++)
				tot[i] = 0;
			for (size_t i = 0; i < per; i++)
				shard[i] = -1000;
			for (int a = 0; a < 3; a++) {
				gk_comm_grads_micro(gr, a == 0, a == 2);
				fill(g, n, GK_DT_F32, GK_COMM_SUM);
				reference(g, ref, n, GK_DT_F32, GK_COMM_SUM);
				for (size_t i = 0; i < n; i++)
					tot[i] += ref[i];
				d.next = n, d.calls = 0;
				for (size_t layer = n; layer > 0; layer = layer > 777 ? layer - 777 : 0)
					good &= gk_comm_grads_ready(gr, layer, NULL) == 0;
				good &= gk_comm_grads_finish(gr, NULL) == 0;
				good &= d.next == 0 && d.calls == gk_comm_grads_buckets(gr);
				for (size_t i = 0; i < n; i++)
					good &= g[i] == 0;
			}
			for (size_t i = (size_t)R * per; i < (size_t)(R + 1) * per && i < n; i++)
				good &= shard[i - (size_t)R * per] == (float)tot[i] / (float)N;
		}
		good &= d.good && gk_comm_grads_buckets(gr) >= n / 1200;
		gk_comm_grads_free(gr);
		ok(all(good), "ZeRO-2 buckets (depth %zu): released once each, from the end, on "
		   "multiples of 300; the shard the sum of 3 micro-steps over the world / %d",
		   depth, N);
	}
	gk_err err = {0};
	gk_comm_grads *gr;
	int good = gk_comm_grads_new(&gr, C, g, n, 4096, NULL, NULL) == 0 &&
		   gk_comm_grads_partition(gr, shard, per / 2, 1, 2, NULL, NULL, &err) < 0 &&
		   strstr(err.msg, "cannot own");
	gk_comm_grads_free(gr);
	ok(all(good), "ZeRO-2 buckets refuse ranges that miss gradients");
	free(g);
	free(shard);
	free(ref);
	free(tot);
}

/* Fractional inputs of varied scale; bounds from comm.h. */
/*
 * The compressed tests' input: n floats over six binades, and in double
 * their exact sum and the sum of their magnitudes over the world.
 */
static void compress_input(float *x, double *exact, double *abs_sum, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		x[i] = (float)(((int)(next32() % 2000001) - 1000000) * 1e-6 *
			       ldexp(1, (int)(i / 256 % 6) - 3));
		exact[i] = x[i], abs_sum[i] = fabs(x[i]);
	}
#if GK_HAVE_MPI
	if (USE_MPI) {
		MPI_Allreduce(MPI_IN_PLACE, exact, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		MPI_Allreduce(MPI_IN_PLACE, abs_sum, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	}
#endif
}

/*
 * The S of element i's error bound: its sum of magnitudes, or for int8
 * (group) the largest such sum within 255 elements of i, which covers
 * any group of 256 holding i.
 */
static double bound_sum(const double *abs_sum, size_t n, size_t i, int group)
{
	double a = abs_sum[i];
	for (size_t j = i > 255 ? i - 255 : 0; group && j < n && j <= i + 255; j++)
		a = abs_sum[j] > a ? abs_sum[j] : a;
	return a;
}

/*
 * Compressed reduce-scatter (ZeRO-1's): rank R's block of the sum within
 * the allreduce's bound, AVG the sum over the world, in place the bits of
 * out of place, exact in a world of one; a residual of the whole input.
 */
static void test_compressed_rs(void)
{
	size_t per = 1001, tot = per * (size_t)N;
	float *x = malloc(tot * 4), *buf = malloc(tot * 4), *y = malloc(per * 4);
	float *ya = malloc(per * 4), *resid = calloc(tot, 4);
	double *exact = malloc(tot * 8), *abs_sum = malloc(tot * 8);
	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		compress_input(x, exact, abs_sum, tot);
		gk_comm_callopts o = {GK_COMM_ALGO_AUTO, cz, NULL};
		int good = gk_comm_reduce_scatter(C, x, y, per, GK_DT_F32, GK_COMM_SUM, &o, NULL) == 0;
		const double *ex = exact + (size_t)R * per, *as = abs_sum + (size_t)R * per;
		int exact_one = 1;
		for (size_t i = 0; i < per; i++) {
			double a = bound_sum(as, per, i, cz == GK_COMM_COMPRESS_INT8);
			double b = gk_comm_compress_bound(cz, N, a) + ldexp(fabs(ex[i]), -22);
			good &= fabs(y[i] - ex[i]) <= b;
			exact_one &= y[i] == (float)ex[i];
		}
		if (N == 1)
			ok(good && exact_one, "compressed %s reduce-scatter: exact in a world of 1",
			   gk_comm_compress_name(cz));
		else
			ok(all(good && !exact_one),
			   "compressed %s reduce-scatter within the allreduce's bound, and not exact, world %d",
			   gk_comm_compress_name(cz), N);
		memcpy(buf, x, tot * 4);
		good = gk_comm_reduce_scatter(C, buf, buf + (size_t)R * per, per, GK_DT_F32,
					      GK_COMM_SUM, &o, NULL) == 0 &&
		       memcmp(buf + (size_t)R * per, y, per * 4) == 0;
		memset(resid, 0, tot * 4);
		gk_comm_callopts e = {GK_COMM_ALGO_RING, cz, resid};
		good &= gk_comm_reduce_scatter(C, x, ya, per, GK_DT_F32, GK_COMM_AVG, &e, NULL) == 0;
		for (size_t i = 0; i < per; i++)
			good &= ya[i] == y[i] / (float)N;
		ok(all(good), "%s: in place the bits of out of place; avg the sum / %d, with a residual",
		   gk_comm_compress_name(cz), N);
	}
	free(x), free(buf), free(y), free(ya), free(resid), free(exact), free(abs_sum);
}

/*
 * ZeRO-2's compressed buckets (gk_comm_grads_partition with compression):
 * over two steps, each bucket's compressed reduce-scatter of its pieces
 * gives the shard and the error feedback of ZeRO-1's one compressed
 * reduce-scatter of the whole padded buffer (AVG, residual of Np floats)
 * bit for bit for bf16 and f16, whose packing is per element; int8 packs
 * groups that follow the pieces, so its first shard is held to the bound.
 */
static void test_partition_compressed(void)
{
	size_t n = 10007, per = (n + (size_t)N - 1) / (size_t)N, np = per * (size_t)N;
	float *x = calloc(np, 4), *g1 = malloc(np * 4), *g2 = calloc(np, 4);
	float *shard = malloc(per * 4), *r1 = calloc(np, 4), *r2 = calloc(np, 4);
	double *exact = calloc(np, 8), *abs_sum = calloc(np, 8);
	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		gk_comm_grads *gr;
		gk_comm_callopts co = {.compress = cz, .residual = r2};
		memset(r1, 0, np * 4), memset(r2, 0, np * 4);
		int good = gk_comm_grads_new(&gr, C, g2, n, 4096, &co, NULL) == 0 &&
			   gk_comm_grads_partition(gr, shard, per, 300, 2, NULL, NULL, NULL) == 0 &&
			   gk_comm_grads_residual(gr) == r2;
		int same = 1, bounded = 1;
		for (int step = 0; good && step < 2; step++) {
			compress_input(x, exact, abs_sum, n);
			memcpy(g1, x, np * 4);
			memcpy(g2, x, np * 4);
			gk_comm_callopts o1 = {GK_COMM_ALGO_AUTO, cz, r1};
			good &= gk_comm_reduce_scatter(C, g1, g1 + (size_t)R * per, per, GK_DT_F32,
						       GK_COMM_AVG, &o1, NULL) == 0;
			gk_comm_grads_micro(gr, 1, 1);
			for (size_t layer = n; layer > 0; layer = layer > 777 ? layer - 777 : 0)
				good &= gk_comm_grads_ready(gr, layer, NULL) == 0;
			good &= gk_comm_grads_finish(gr, NULL) == 0;
			size_t lo = (size_t)R * per, m = lo >= n ? 0 : n - lo < per ? n - lo : per;
			same &= memcmp(shard, g1 + lo, m * 4) == 0 && memcmp(r1, r2, np * 4) == 0;
			for (size_t i = 0; step == 0 && i < m; i++) { /* before any feedback */
				double a = bound_sum(abs_sum + lo, m, i, 1);
				double bd = (2 * gk_comm_compress_bound(cz, N, a) +
					     ldexp(fabs(exact[lo + i]), -22)) / N;
				bounded &= fabs(shard[i] - exact[lo + i] / N) <= bd;
			}
		}
		gk_comm_grads_free(gr);
		if (cz == GK_COMM_COMPRESS_INT8)
			ok(all(good && bounded), "ZeRO-2 int8 buckets: the shard within the "
			   "compressed reduce-scatter's bound, world %d", N);
		else
			ok(all(good && same), "ZeRO-2 %s buckets: the shard and the error feedback "
			   "are ZeRO-1's compressed reduce-scatter's, bit for bit, world %d",
			   gk_comm_compress_name(cz), N);
	}
	free(x), free(g1), free(g2), free(shard), free(r1), free(r2), free(exact), free(abs_sum);
}

static void test_compressed(void)
{
	size_t n = 3001;
	float *x = malloc(n * 4), *y = malloc(n * 4);
	double *exact = malloc(n * 8), *abs_sum = malloc(n * 8);
	double *cum = calloc(n, 8);
	for (int cz = GK_COMM_COMPRESS_BF16; cz <= GK_COMM_COMPRESS_INT8; cz++) {
		compress_input(x, exact, abs_sum, n);
		gk_comm_callopts o = {GK_COMM_ALGO_RING, cz, NULL};
		int good = gk_comm_allreduce(C, x, y, n, GK_DT_F32, GK_COMM_SUM, &o, NULL) == 0;
		double worst = 0;
		for (size_t i = 0; i < n; i++) {
			double a = bound_sum(abs_sum, n, i, cz == GK_COMM_COMPRESS_INT8);
			double b = gk_comm_compress_bound(cz, N, a) + ldexp(fabs(exact[i]), -22);
			double e = fabs(y[i] - exact[i]);
			good &= e <= b;
			if (b > 0 && e / b > worst)
				worst = e / b;
		}
		diag("%s world %d: worst error is %.3f of the bound", gk_comm_compress_name(cz), N, worst);
		ok(all(good), "compressed %s allreduce within the documented bound, world %d",
		   gk_comm_compress_name(cz), N);

		/*
		 * Error feedback: T calls on the same input. With feedback the
		 * errors telescope, so the running sum of results stays within
		 * about one call's error of T * exact.
		 */
		enum { T = 16 };
		float *resid = calloc(n, 4);
		double ef_err = 0, one_bound = 0;
		memset(cum, 0, n * 8);
		for (int t = 0; t < T; t++) {
			gk_comm_callopts e = {GK_COMM_ALGO_RING, cz, resid};
			good &= gk_comm_allreduce(C, x, y, n, GK_DT_F32, GK_COMM_SUM, &e, NULL) == 0;
			for (size_t i = 0; i < n; i++)
				cum[i] += y[i];
		}
		int ef_good = 1;
		for (size_t i = 0; i < n; i++) {
			double a = bound_sum(abs_sum, n, i, 1);
			/* one call's bound, for an input grown by the residual */
			double b = 2 * gk_comm_compress_bound(cz, N, 2 * a) + T * ldexp(a, -20);
			double e = fabs(cum[i] - T * exact[i]);
			ef_good &= e <= b;
			ef_err = e > ef_err ? e : ef_err;
			one_bound = b > one_bound ? b : one_bound;
		}
		if (N == 1)
			ok(all(ef_good), "error feedback %s: world 1 is exact", gk_comm_compress_name(cz));
		else
			ok(all(ef_good), "error feedback %s: %d calls stay within one call's error (%.3g <= %.3g)",
			   gk_comm_compress_name(cz), T, ef_err, one_bound);
		free(resid);
	}
	gk_err err = {0};
	gk_comm_callopts o = {GK_COMM_ALGO_RING, GK_COMM_COMPRESS_INT8, NULL};
	int bad = gk_comm_allreduce(C, x, y, n, GK_DT_F32, GK_COMM_MAX, &o, &err);
	ok(all(bad < 0 && strstr(err.msg, "only sum and avg")), "compressed max is refused: %s", err.msg);
	free(x), free(y), free(exact), free(abs_sum), free(cum);
}

static void test_errors(void)
{
	gk_err err = {0};
	float v = 1;
	ok(gk_comm_allreduce(C, &v, &v, 1, GK_DT_I8, GK_COMM_SUM, NULL, &err) < 0 &&
	   strstr(err.msg, "not one of f32"), "i8 refused: %s", err.msg);
	ok(gk_comm_allreduce(C, &v, &v, (size_t)1 << 62, GK_DT_F32, GK_COMM_SUM, NULL, &err) < 0 &&
	   strstr(err.msg, "too large"), "absurd count refused: %s", err.msg);
	ok(gk_comm_broadcast(C, &v, &v, 1, GK_DT_F32, N, &err) < 0 &&
	   strstr(err.msg, "not a rank"), "bad root refused: %s", err.msg);
	gk_comm_callopts o = {GK_COMM_ALGO_RD, 0, NULL};
	ok(gk_comm_allgather(C, &v, &v, 0, GK_DT_F32, &o, &err) < 0 &&
	   strstr(err.msg, "not available"), "rd allgather refused: %s", err.msg);
}

/*
 * One discovery: for each launcher's environment, gk_rank_discover's world
 * and the auto backend agree (mpi where MPI can start the same world, self
 * only for a world of one, a refusal where MPI cannot start it). Run
 * without a launcher only, since it rewrites the environment.
 */
static const char *launcher_vars[] = {
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
	"SLURM_NODEID", "SLURM_TASKS_PER_NODE", "SLURM_STEP_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
	"LOCAL_WORLD_SIZE", "GROUP_RANK",
};

static void launcher_case(const char *name, const char *const *env, int world,
			  int backend, const char *refusal)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(launcher_vars); i++)
		unsetenv(launcher_vars[i]);
	for (size_t i = 0; env[i]; i += 2)
		setenv(env[i], env[i + 1], 1);
	gk_rank_info ri;
	gk_comm_backend b = GK_COMM_BACKEND_COUNT;
	gk_err err = {0};
	int rc = gk_rank_discover(&ri, &err);
	if (rc == 0)
		rc = gk_comm_backend_choose(GK_COMM_BACKEND_AUTO, &ri, &b, &err);
	if (refusal) {
		ok(rc < 0 && ri.world == world && strstr(err.msg, refusal),
		   "%s: world %d, auto refuses: %s", name, ri.world, err.msg);
	} else {
		ok(rc == 0 && ri.world == world && (int)b == backend,
		   "%s: world %d, auto backend %s", name, ri.world, gk_comm_backend_name(b));
	}
	/* the contract the mpi backend checks at open: MPI's world is ri's */
	if (rc == 0 && b == GK_COMM_BACKEND_MPI)
		ok(ri.rank < ri.world && ri.local_rank < ri.local_world,
		   "%s: rank %d of %d, local %d of %d", name, ri.rank, ri.world,
		   ri.local_rank, ri.local_world);
}

static void test_launchers(void)
{
	int mpi = GK_COMM_BACKEND_MPI, self = GK_COMM_BACKEND_SELF;
	const char *none[] = {NULL};
	const char *ompi[] = {"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4",
			      "OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2", NULL};
	const char *ompi1[] = {"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", NULL};
	const char *slurm[] = {"SLURM_STEP_ID", "0", "SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1",
			       "SLURM_NODEID", "1", "SLURM_TASKS_PER_NODE", "4(x2)", NULL};
	const char *torch[] = {"RANK", "6", "WORLD_SIZE", "8", "LOCAL_RANK", "2",
			       "LOCAL_WORLD_SIZE", "4", NULL};
	const char *torch1[] = {"RANK", "0", "WORLD_SIZE", "1", NULL};
	launcher_case("no launcher", none, 1, self, NULL);
	launcher_case("mpirun -np 4", ompi, 4, mpi, NULL);
	launcher_case("mpirun -np 1", ompi1, 1, mpi, NULL);
	launcher_case("srun -n 8", slurm, 8, mpi, NULL);
	const char *batch[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "8", NULL};
	launcher_case("sbatch -n 8 script (no step)", batch, 1, self, NULL);
	launcher_case("torchrun, 8 ranks", torch, 8, 0, "gives MPI nothing to start from");
	launcher_case("torchrun, 1 rank", torch1, 1, self, NULL);

	/* self asked for under mpirun -np 4: a world of one would break the contract */
	launcher_case("mpirun -np 4", ompi, 4, mpi, NULL);
	gk_rank_info ri;
	gk_comm_backend b;
	gk_err err = {0};
	ok(gk_rank_discover(&ri, &err) == 0 &&
	   gk_comm_backend_choose(GK_COMM_BACKEND_SELF, &ri, &b, &err) < 0 &&
	   strstr(err.msg, "self is a world of one"), "mpirun -np 4, self refused: %s", err.msg);
	launcher_case("mpirun -np 1", ompi1, 1, mpi, NULL);
	ok(gk_rank_discover(&ri, &err) == 0 &&
	   gk_comm_backend_choose(GK_COMM_BACKEND_SELF, &ri, &b, &err) == 0 &&
	   b == GK_COMM_BACKEND_SELF, "mpirun -np 1, self allowed");
	for (size_t i = 0; i < GK_ARRAY_SIZE(launcher_vars); i++)
		unsetenv(launcher_vars[i]);
}

/*
 * gk_comm_split as a process grid uses it (tp innermost): the world cut
 * into groups of k consecutive ranks and, across them, the ranks of the
 * same place; each group's allreduce sums its own ranks only, against
 * the sum computed from the ranks' numbers.
 */
static void test_split(void)
{
	gk_err err = {0};
	int k = N % 2 == 0 ? 2 : 1;
	gk_comm *inner = NULL, *outer = NULL;
	int ok1 = gk_comm_split(C, R / k, R % k, &inner, &err) == 0 &&
		  gk_comm_split(C, R % k, R / k, &outer, &err) == 0;
	ok(all(ok1), "split into groups of %d: %s", k, ok1 ? "opened" : err.msg);
	if (!ok1) {
		gk_comm_close(inner);
		gk_comm_close(outer);
		return;
	}
	ok(all(gk_comm_world(inner) == k && gk_comm_rank(inner) == R % k &&
	       gk_comm_world(outer) == N / k && gk_comm_rank(outer) == R / k),
	   "split ranks and sizes: inner %d of %d, outer %d of %d", gk_comm_rank(inner),
	   gk_comm_world(inner), gk_comm_rank(outer), gk_comm_world(outer));
	/* each group's ranks by their world ranks, as messages and dumps name them */
	int wr_ok = gk_comm_world_rank(inner, -1) == R && gk_comm_world_rank(outer, -1) == R &&
		    gk_comm_world_rank(C, -1) == R;
	for (int r = 0; r < gk_comm_world(inner); r++)
		wr_ok &= gk_comm_world_rank(inner, r) == R / k * k + r;
	for (int r = 0; r < gk_comm_world(outer); r++)
		wr_ok &= gk_comm_world_rank(outer, r) == r * k + R % k;
	ok(all(wr_ok), "each group's ranks map to their world ranks");
	double v[2] = {R + 1, R + 1}, want_in = 0, want_out = 0;
	for (int r = 0; r < N; r++) {
		if (r / k == R / k)
			want_in += r + 1;
		if (r % k == R % k)
			want_out += r + 1;
	}
	int rc = gk_comm_allreduce(inner, v, v, 1, GK_DT_F64, GK_COMM_SUM, NULL, &err) == 0 &&
		 gk_comm_allreduce(outer, v + 1, v + 1, 1, GK_DT_F64, GK_COMM_SUM, NULL, &err) == 0;
	ok(all(rc && v[0] == want_in && v[1] == want_out),
	   "an allreduce in each sums its own ranks: %g (want %g), %g (want %g)", v[0], want_in,
	   v[1], want_out);
	gk_comm *bad = NULL;
	ok(gk_comm_split(C, -1, 0, &bad, &err) < 0 && strstr(err.msg, "negative") && !bad,
	   "a negative color is refused: %s", err.msg);
	gk_comm_close(inner);
	gk_comm_close(outer);
}

/* The newest record of c's flight recorder. */
static const gk_comm_trace_rec *last_rec(gk_comm *c, uint64_t back)
{
	if (!c->tr.ring || c->tr.next <= back + 1)
		return NULL;
	return &c->tr.ring[(c->tr.next - 1 - back) % c->tr.cap];
}

static void test_p2p(void)
{
	gk_err err = {0};
	gk_comm_req *rq = NULL;
	float one = 1.0f;
	if (N == 1) {
		ok(gk_comm_isend(C, &one, 1, GK_DT_F32, 0, &rq, &err) < 0 && !rq &&
		   strstr(err.msg, "no peer"), "send in a world of one: refused (%s)", err.msg);
		ok(gk_comm_irecv(C, &one, 1, GK_DT_F32, 1, &rq, &err) < 0 && !rq,
		   "receive in a world of one: refused (%s)", err.msg);
		return;
	}
	ok(all(gk_comm_isend(C, &one, 1, GK_DT_F32, R, &rq, &err) < 0 && !rq &&
	       strstr(err.msg, "not another rank")),
	   "a send to oneself: refused (%s)", err.msg);
	ok(all(gk_comm_irecv(C, &one, 1, GK_DT_F32, N, &rq, &err) < 0 && !rq),
	   "a receive from rank %d of %d: refused (%s)", N, N, err.msg);

	/* a ring, each rank's send started first: 1 MiB is above the eager
	 * limit, so a send that waited for its receive before the rank's own
	 * receive started would deadlock */
	size_t n = (size_t)1 << 18;
	int next = (R + 1) % N, prev = (R + N - 1) % N;
	float *s = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		s[i] = (float)(R * 1000003 + (int)(i % 9973)), r[i] = -1.0f;
	gk_comm_req *sq = NULL, *rcq = NULL;
	int rc = gk_comm_isend(C, s, n, GK_DT_F32, next, &sq, &err) == 0 &&
		 gk_comm_irecv(C, r, n, GK_DT_F32, prev, &rcq, &err) == 0;
	const gk_comm_trace_rec *ts = last_rec(C, 1), *tr = last_rec(C, 0);
	int rec = ts && tr && ts->coll == GK_COMM_CALL_SEND && ts->peer == next &&
		  ts->bytes == n * sizeof(float) && tr->coll == GK_COMM_CALL_RECV &&
		  tr->peer == prev;
	rc = rc && gk_comm_wait(rcq, &err) == 0 && gk_comm_wait(sq, &err) == 0;
	int good = rc;
	for (size_t i = 0; good && i < n; i++)
		good = r[i] == (float)(prev * 1000003 + (int)(i % 9973));
	ok(all(good), "a ring of 1 MiB messages, sends started before receives: %s",
	   rc ? "each rank has its predecessor's" : err.msg);
	ok(all(rec && ts->state == GK_TR_DONE && tr->state == GK_TR_DONE),
	   "the flight recorder has the send (peer %d) and the receive (peer %d), done", next,
	   prev);

	/* a pipeline's two directions between ranks 0 and 1: two forward
	 * messages in a row arrive in order; the backward one meets them */
	if (R < 2) {
		float a[2][3] = {{1, 2, 3}, {4, 5, 6}}, got[2][3] = {{0}}, g = 0, gb = 7;
		gk_comm_req *q[3];
		rc = 1;
		if (R == 0)
			rc = gk_comm_isend(C, a[0], 3, GK_DT_F32, 1, &q[0], &err) == 0 &&
			     gk_comm_isend(C, a[1], 3, GK_DT_F32, 1, &q[1], &err) == 0 &&
			     gk_comm_irecv(C, &g, 1, GK_DT_F32, 1, &q[2], &err) == 0;
		else
			rc = gk_comm_isend(C, &gb, 1, GK_DT_F32, 0, &q[2], &err) == 0 &&
			     gk_comm_irecv(C, got[0], 3, GK_DT_F32, 0, &q[0], &err) == 0 &&
			     gk_comm_irecv(C, got[1], 3, GK_DT_F32, 0, &q[1], &err) == 0;
		for (int i = 0; i < 3; i++)
			rc = gk_comm_wait(q[i], &err) == 0 && rc;
		good = rc && (R == 0 ? g == 7 : !memcmp(got, a, sizeof a));
	} else {
		good = 1;
	}
	ok(all(good), "between ranks 0 and 1: two messages arrive in order, one comes back");
	/* an empty message completes */
	rc = 1;
	if (R < 2)
		rc = gk_comm_isend(C, NULL, 0, GK_DT_F32, 1 - R, &sq, &err) == 0 &&
		     gk_comm_wait(sq, &err) == 0;
	ok(all(rc), "an empty message: nothing to wait for");
	free(s);
	free(r);
}

int main(void)
{
	gk_err err = {0};
	gk_rank_info ri;
	if (gk_rank_discover(&ri, &err) < 0) {
		printf("1..0 # SKIP %s\n", err.msg);
		return 0;
	}
	if (strcmp(ri.launcher, "none") == 0)
		test_launchers();
	if (gk_comm_open(&C, NULL, &err) < 0) {
		printf("1..0 # SKIP %s\n", err.msg);
		return 0;
	}
	N = gk_comm_world(C), R = gk_comm_rank(C);
	USE_MPI = gk_comm_backend_of(C) == GK_COMM_BACKEND_MPI;
	if (R != 0 && !freopen("/dev/null", "w", stdout))
		return 1;
	rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(R + 1) * 0x2545f4914f6cdd1dULL;
	diag("backend %s, world %d", gk_comm_backend_name(gk_comm_backend_of(C)), N);
	ok(all(N == ri.world && R == ri.rank &&
	       gk_comm_backend_of(C) == (ri.mpi ? GK_COMM_BACKEND_MPI : GK_COMM_BACKEND_SELF)),
	   "the communicator is rank %d of %d, as the %s environment says", R, N, ri.launcher);

	test_allreduce();
	test_bitwise_identical();
	test_rs_ag_bcast();
	test_reduce();
	test_nonblocking();
	test_grads();
	test_placed();
	test_scatterv();
	test_allgatherv();
	test_partition();
	test_compressed();
	test_compressed_rs();
	test_partition_compressed();
	test_errors();
	test_split();
	test_p2p();
	gk_comm_close(C);
	return done_testing();
}
