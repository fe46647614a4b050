/*
 * bench.c - the benchmark harness behind allreduce-bench, as nccl-tests'
 * src/common.cu is behind its *_perf tools: option checks, the memory
 * guard, agreement between ranks, the size sweep, the timing of one size,
 * and the check of its result.
 *
 * Inputs are small integers from a formula of (rank, index), so every rank
 * knows every rank's input and the exact result needs no communication;
 * sums of at most 64 values in [-4, 4] are exact even in bf16. Compressed
 * runs use fractional values of varied magnitude instead (integers would
 * hide the rounding) and are checked against the bound of comm.h.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/internal.h"
#include "core/half.h"

static double val(gk_comm_op op, int n, int r, size_t i)
{
	switch (op) {
	case GK_COMM_PROD:
		if ((size_t)r == i % (size_t)n)
			return 2;
		return (r + i) % 3 == 0 ? -1 : 1;
	case GK_COMM_MAX:
	case GK_COMM_MIN:
		return (double)((r * 5 + i * 3) % 11) - 5;
	default:
		return (double)((r * 3 + i * 7) % 9) - 4;
	}
}

/* Fractional values in [-1, 1) scaled by 2^-4 .. 2^3 per int8 group. */
static double fval(int r, size_t i)
{
	uint64_t h = (uint64_t)r * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 31, h *= 0x94d049bb133111ebULL, h ^= h >> 29;
	double u = (double)(h >> 11) / 9007199254740992.0 * 2 - 1;
	return ldexp(u, (int)((i / GK_COMM_INT8_GROUP) % 8) - 4);
}

/* The exact result of reducing element i over n ranks, in dtype dt. */
static double expect_reduce(gk_comm_op op, gk_dtype dt, int n, size_t i)
{
	double acc = val(op, n, 0, i);
	for (int r = 1; r < n; r++) {
		double v = val(op, n, r, i);
		switch (op) {
		case GK_COMM_PROD: acc *= v; break;
		case GK_COMM_MAX: acc = v > acc ? v : acc; break;
		case GK_COMM_MIN: acc = v < acc ? v : acc; break;
		default: acc += v; break;
		}
	}
	if (op != GK_COMM_AVG)
		return acc;
	/* avg: the exact sum divided once in the type's arithmetic (comm.h). */
	switch (dt) {
	case GK_DT_F64: return acc / n;
	case GK_DT_I32: return (double)((int32_t)acc / n);
	case GK_DT_F32: return (float)acc / (float)n;
	case GK_DT_BF16: return gk_bf16_to_f32(gk_f32_to_bf16((float)acc / (float)n));
	default: return gk_f16_to_f32(gk_f32_to_f16((float)acc / (float)n));
	}
}

/* One size of the sweep. */
typedef struct params {
	gk_comm_coll coll;
	gk_dtype dt;
	gk_comm_op op;
	gk_comm_algo algo;
	gk_comm_compress compress;
	size_t count; /* the "count" column: size / element size */
	int root, warmup, iters, check, blocking;
	gk_comm_bench_avg average;
} params;

typedef struct shape {
	size_t send_n, recv_n; /* elements in the send and receive buffers */
	size_t per;            /* the count argument of the call */
} shape;

static shape shape_of(const params *p, int n)
{
	shape s;
	switch (p->coll) {
	case GK_COMM_REDUCE_SCATTER:
		s.per = p->count / (size_t)n;
		s.send_n = s.per * (size_t)n, s.recv_n = s.per;
		break;
	case GK_COMM_ALLGATHER:
		s.per = p->count / (size_t)n;
		s.send_n = s.per, s.recv_n = s.per * (size_t)n;
		break;
	default:
		s.per = s.send_n = s.recv_n = p->count;
	}
	return s;
}

/* Start one call: queued on device backends, complete on host ones. */
static int post(gk_comm *c, const params *p, const shape *s, const void *send,
		void *recv, gk_err *err)
{
	gk_comm_callopts o = {p->algo, p->compress, NULL};
	return gk_comm_post(c, p->coll, send, recv, s->per, p->dt, p->op, p->root,
			    &o, err);
}

/* A call and its completion, for the checked runs. */
static int call(gk_comm *c, const params *p, const shape *s, const void *send,
		void *recv, gk_err *err)
{
	if (post(c, p, s, send, recv, err) < 0)
		return -1;
	return gk_comm_sync(c, err);
}

/* Fill this rank's input on the host. */
static void fill_input(const params *p, const shape *s, int n,
		       int r, void *h)
{
	for (size_t i = 0; i < s->send_n; i++) {
		double v;
		if (p->compress != GK_COMM_COMPRESS_NONE)
			v = fval(r, i);
		else if (p->coll == GK_COMM_BROADCAST || p->coll == GK_COMM_ALLGATHER)
			v = val(GK_COMM_SUM, n, r, i);
		else
			v = val(p->op, n, r, i);
		gk_dtype_set(h, p->dt, i, v);
	}
}

/*
 * ncclAvg of a floating type multiplies each input by 1/n rounded to
 * the type, then sums (comm.h): exact where n is a power of two, else
 * within (n + 2) epsilons of the type times the mean of |x|, the bound
 * checked then for element i of the inputs.
 */
static double premul_bound(const params *p, int n, size_t i)
{
	double eps = p->dt == GK_DT_F64 ? DBL_EPSILON :
		     p->dt == GK_DT_F32 ? FLT_EPSILON :
		     p->dt == GK_DT_BF16 ? ldexp(1, -7) : ldexp(1, -10);
	double a = 0;
	for (int q = 0; q < n; q++)
		a += fabs(val(p->op, n, q, i));
	return (n + 2) * eps * a / n;
}

/* Count wrong elements of the result h (and compressed errors). premul:
 * AVG ran as NCCL's ncclAvg at a world not a power of two. */
static void verify(const params *p, const shape *s, int n, int r, int premul,
		   const void *h, gk_comm_bench_result *res)
{
	if (p->compress != GK_COMM_COMPRESS_NONE) {
		/* element i of the result is element base + i of the inputs */
		size_t base = p->coll == GK_COMM_REDUCE_SCATTER ? (size_t)r * s->per : 0;
		size_t total = p->coll == GK_COMM_REDUCE_SCATTER ? s->send_n : s->recv_n;
		const size_t G = GK_COMM_INT8_GROUP;
		size_t groups = (total + G - 1) / G;
		double *gmax = calloc(groups ? groups : 1, sizeof *gmax);
		double maxexact = 0;
		for (size_t i = 0; gmax && i < total; i++) {
			double a = 0;
			for (int q = 0; q < n; q++)
				a += fabs((double)(float)fval(q, i));
			if (a > gmax[i / G])
				gmax[i / G] = a;
		}
		for (size_t i = 0; gmax && i < s->recv_n; i++) {
			double exact = 0, abs_sum = 0;
			for (int q = 0; q < n; q++) {
				double x = (float)fval(q, base + i);
				exact += x, abs_sum += fabs(x);
			}
			if (p->compress == GK_COMM_COMPRESS_INT8) {
				/* Any group holding i lies within the aligned chunks around it. */
				size_t g = (base + i) / G;
				abs_sum = gmax[g];
				if (g > 0 && gmax[g - 1] > abs_sum)
					abs_sum = gmax[g - 1];
				if (g + 1 < groups && gmax[g + 1] > abs_sum)
					abs_sum = gmax[g + 1];
			}
			double bound = gk_comm_compress_bound(p->compress, n, abs_sum);
			/* The final f32 store and avg's division: a few f32 ulps. */
			bound += 4 * ldexp(fabs(exact), -24);
			if (p->op == GK_COMM_AVG)
				exact /= n, bound /= n;
			double e = fabs(gk_dtype_get(h, GK_DT_F32, i) - exact);
			if (!(e <= bound))
				res->wrong++;
			if (e > res->max_abs)
				res->max_abs = e;
			if (fabs(exact) > maxexact)
				maxexact = fabs(exact);
		}
		if (!gmax)
			res->wrong += (int64_t)s->recv_n;
		free(gmax);
		res->max_rel = maxexact > 0 ? res->max_abs / maxexact : 0;
		return;
	}
	if (p->coll == GK_COMM_REDUCE && r != p->root)
		return; /* the result is the root's alone */
	for (size_t i = 0; i < s->recv_n; i++) {
		double want;
		switch (p->coll) {
		case GK_COMM_REDUCE_SCATTER:
			want = expect_reduce(p->op, p->dt, n, (size_t)r * s->per + i);
			break;
		case GK_COMM_ALLGATHER:
			want = val(GK_COMM_SUM, n, (int)(i / (s->per ? s->per : 1)),
				   i % (s->per ? s->per : 1));
			break;
		case GK_COMM_BROADCAST:
			want = val(GK_COMM_SUM, n, p->root, i);
			break;
		default:
			want = expect_reduce(p->op, p->dt, n, i);
		}
		double got = gk_dtype_get(h, p->dt, i);
		if (premul && p->op == GK_COMM_AVG && p->coll != GK_COMM_ALLGATHER &&
		    p->coll != GK_COMM_BROADCAST) {
			size_t e = p->coll == GK_COMM_REDUCE_SCATTER ? (size_t)r * s->per + i : i;
			if (!(fabs(got - want) <= premul_bound(p, n, e)))
				res->wrong++;
		} else if (got != want) {
			res->wrong++;
		}
	}
}

/*
 * Combine this rank's seconds per iteration across ranks as nccl-tests'
 * Allreduce(args, &deltaSec, average) does.
 */
static int combine_time(gk_comm *c, gk_comm_bench_avg how, double *t,
			gk_err *err)
{
	gk_comm_op op = GK_COMM_AVG;
	switch (how) {
	case GK_COMM_BENCH_RANK0:
		if (gk_comm_rank(c) != 0)
			*t = 0;
		op = GK_COMM_SUM;
		break;
	case GK_COMM_BENCH_MIN: op = GK_COMM_MIN; break;
	case GK_COMM_BENCH_MAX: op = GK_COMM_MAX; break;
	default: break;
	}
	return gk_comm_host_allreduce_f64(c, t, 1, op, err);
}

/* Time and check one collective at one size, in place or out of place. */
static int run_one(gk_comm *c, const params *p, int in_place,
		   gk_comm_bench_result *res, gk_err *err)
{
	int n = c->world, r = c->rank;
	size_t esz = gk_comm_dt_size(p->dt);
	shape s = shape_of(p, n);
	memset(res, 0, sizeof *res);
	res->wrong = p->check ? 0 : -1;

	/*
	 * In place, NCCL-style: the receive buffer is the big one and the
	 * send buffer is this rank's slice of it (allgather), or the reverse
	 * (reduce-scatter).
	 */
	size_t big = (s.send_n > s.recv_n ? s.send_n : s.recv_n) * esz;
	void *dsend = NULL, *drecv = NULL, *hin = NULL, *hout = NULL;
	int rc = -1;
	drecv = gk_comm_alloc(c, big, err);
	if (!drecv)
		goto out;
	if (!in_place && !(dsend = gk_comm_alloc(c, big, err)))
		goto out;
	hin = malloc(big + 1), hout = malloc(big + 1);
	if (!hin || !hout) {
		gk_errf(err, "comm: out of memory for %zu bytes", big);
		goto out;
	}
	void *send, *recv;
	if (in_place) {
		if (p->coll == GK_COMM_ALLGATHER)
			send = (char *)drecv + (size_t)r * s.per * esz, recv = drecv;
		else if (p->coll == GK_COMM_REDUCE_SCATTER)
			send = drecv, recv = (char *)drecv + (size_t)r * s.per * esz;
		else
			send = recv = drecv;
	} else {
		send = dsend, recv = drecv;
	}

	int premul = gk_comm_backend_of(c) == GK_COMM_BACKEND_NCCL && gk_comm_nccl_native_avg() &&
		     (n & (n - 1)) != 0 && p->dt != GK_DT_I32;
	for (int k = 0; k < p->check; k++) {
		fill_input(p, &s, n, r, hin);
		if (gk_comm_to_device(c, send, hin, s.send_n * esz, err) < 0 ||
		    call(c, p, &s, send, recv, err) < 0 ||
		    gk_comm_to_host(c, hout, recv, s.recv_n * esz, err) < 0)
			goto out;
		/* Test hook: a wrong element on rank 0, to prove the check catches it. */
		if (r == 0 && s.recv_n && getenv("GK_TEST_COMM_CORRUPT"))
			gk_dtype_set(hout, p->dt, s.recv_n / 2,
				     gk_dtype_get(hout, p->dt, s.recv_n / 2) + 1);
		verify(p, &s, n, r, premul, hout, res);
	}
	if (!p->check) {
		fill_input(p, &s, n, r, hin);
		if (gk_comm_to_device(c, send, hin, s.send_n * esz, err) < 0)
			goto out;
	}
	for (int k = 0; k < p->warmup; k++)
		if (post(c, p, &s, send, recv, err) < 0)
			goto out;
	if (gk_comm_sync(c, err) < 0 || gk_comm_barrier(c, err) < 0)
		goto out;
	double t0 = gk_now();
	for (int k = 0; k < p->iters; k++) {
		if (post(c, p, &s, send, recv, err) < 0)
			goto out;
		/* gk_comm_barrier waits for the device stream first. */
		if (p->blocking && gk_comm_barrier(c, err) < 0)
			goto out;
	}
	if (gk_comm_sync(c, err) < 0)
		goto out;
	double t = p->iters ? (gk_now() - t0) / p->iters : 0;
	if (combine_time(c, p->average, &t, err) < 0)
		goto out;
	double wrong = (double)res->wrong;
	if (gk_comm_host_allreduce_f64(c, &wrong, 1, GK_COMM_SUM, err) < 0)
		goto out;
	double errs[2] = {res->max_abs, res->max_rel};
	if (gk_comm_host_allreduce_f64(c, errs, 2, GK_COMM_MAX, err) < 0)
		goto out;
	res->wrong = p->check ? (int64_t)wrong : -1;
	res->max_abs = errs[0], res->max_rel = errs[1];
	res->time_us = t * 1e6;
	res->algbw = t > 0 ? (double)big / t / 1e9 : 0;
	res->busbw = res->algbw * gk_comm_busbw_factor(p->coll, n);
	rc = 0;
out:
	if (drecv)
		gk_comm_free(c, drecv);
	if (dsend)
		gk_comm_free(c, dsend);
	free(hin);
	free(hout);
	return rc;
}

/* ---- options ---- */

void gk_comm_bench_defaults(gk_comm_bench_opts *o)
{
	memset(o, 0, sizeof *o);
	o->coll = GK_COMM_ALLREDUCE;
	o->dt = GK_DT_F32;
	o->op = GK_COMM_SUM;
	o->algo = GK_COMM_ALGO_AUTO;
	o->minbytes = 8, o->maxbytes = (uint64_t)32 << 20;
	o->factor = 2;
	o->warmup = 5, o->iters = 20, o->check = 1;
	o->average = GK_COMM_BENCH_MEAN;
}

static const gk_dtype all_types[] = {GK_DT_F32, GK_DT_F64, GK_DT_F16,
				     GK_DT_BF16, GK_DT_I32};

int gk_comm_bench_validate(const gk_comm_bench_opts *o, gk_comm_backend backend,
			   gk_err *err)
{
	const char *coll = gk_comm_coll_name(o->coll);
	if ((unsigned)o->coll >= GK_COMM_COLL_COUNT)
		return gk_errf(err, "collective %d: not one of allreduce reducescatter allgather broadcast reduce",
			       (int)o->coll);
	if (!o->all_types && !gk_comm_dtype_ok(o->dt))
		return gk_errf(err, "type '%s': not one the collectives take",
			       gk_dtype_name(o->dt));
	if (o->minbytes > o->maxbytes)
		return gk_errf(err, "-b %llu is larger than -e %llu",
			       (unsigned long long)o->minbytes,
			       (unsigned long long)o->maxbytes);
	if (o->factor < 1 || (o->factor == 1 && o->stepbytes == 0))
		return gk_errf(err, "-i 0 (or -f 1): the size must grow from step to step");
	if ((unsigned)o->average >= GK_COMM_BENCH_AVG_COUNT)
		return gk_errf(err, "-a %d: not one of 0 (rank 0) 1 (mean) 2 (min) 3 (max)",
			       (int)o->average);
	if (o->iters < 1 || o->warmup < 0 || o->check < 0)
		return gk_errf(err, "-n %d -w %d -c %d: iterations must be positive",
			       o->iters, o->warmup, o->check);
	if (o->compress != GK_COMM_COMPRESS_NONE) {
		if (o->all_types || o->dt != GK_DT_F32)
			return gk_errf(err, "--compress takes float data (-d float)");
		if (o->all_ops || (o->op != GK_COMM_SUM && o->op != GK_COMM_AVG))
			return gk_errf(err, "--compress works with -o sum or -o avg");
		if (o->coll != GK_COMM_ALLREDUCE && o->coll != GK_COMM_REDUCE_SCATTER)
			return gk_errf(err, "--compress is for --collective allreduce or reducescatter");
		if (!o->all_algos && o->algo != GK_COMM_ALGO_AUTO &&
		    o->algo != GK_COMM_ALGO_RING)
			return gk_errf(err, "--compress runs on the ring, not --algo %s",
				       gk_comm_algo_name(o->algo));
	}
	/* The mpi backend runs the most; what it lacks exists nowhere. */
	if (!o->all_algos) {
		gk_comm_backend b = backend == GK_COMM_BACKEND_NCCL ? backend : GK_COMM_BACKEND_MPI;
		if (!gk_comm_algo_ok(b, o->coll, o->algo))
			return gk_errf(err, "--algo '%s': not available for %s%s",
				       gk_comm_algo_name(o->algo), coll,
				       b == GK_COMM_BACKEND_NCCL ? " on the nccl backend" : "");
	}
	return 0;
}

/* ---- the memory guard ---- */

int gk_comm_bench_host_bytes(const gk_comm_bench_opts *o, int local_ranks,
			     uint64_t *bytes)
{
	uint64_t per;
	if (local_ranks < 1)
		local_ranks = 1;
	if (gk_mul_overflow(o->maxbytes, 4, &per) < 0 ||
	    gk_mul_overflow(per, (uint64_t)local_ranks, bytes) < 0)
		return -1;
	return 0;
}

int gk_comm_bench_fits(const gk_comm_bench_opts *o, int local_ranks,
		       gk_err *err)
{
	char a[32], b[32], m[32];
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t phys = 0, need;
	if (pages > 0 && psz > 0 &&
	    gk_mul_overflow((uint64_t)pages, (uint64_t)psz, &phys) < 0)
		phys = UINT64_MAX;
	gk_format_size(o->maxbytes, 0, a, sizeof a);
	gk_format_size(phys, 0, m, sizeof m);
	if (gk_comm_bench_host_bytes(o, local_ranks, &need) < 0)
		return gk_errf(err, "size '%s': needs more than 16 EiB of host memory on this node, it has %s",
			       a, m);
	if (phys > 0 && need > phys)
		return gk_errf(err, "size '%s': needs %s of host memory on this node, it has %s",
			       a, gk_format_size(need, 0, b, sizeof b), m);
	return 0;
}

/* ---- agreement between ranks ---- */

int gk_comm_bench_agree(gk_comm *c, const gk_comm_bench_opts *o, gk_err *err)
{
	const gk_comm_setting f[] = {
		{"--collective", (uint64_t)o->coll},
		{"-d", o->all_types ? UINT32_MAX : (uint64_t)o->dt},
		{"-o", o->all_ops ? UINT32_MAX : (uint64_t)o->op},
		{"--algo", o->all_algos ? UINT32_MAX : (uint64_t)o->algo},
		{"--compress", (uint64_t)o->compress},
		{"-b", o->minbytes},
		{"-e", o->maxbytes},
		{"-f", o->factor},
		{"-i", o->stepbytes},
		{"-r", (uint64_t)(uint32_t)o->root},
		{"-w", (uint64_t)(uint32_t)o->warmup},
		{"-n", (uint64_t)(uint32_t)o->iters},
		{"-c", (uint64_t)(uint32_t)o->check},
		{"-z", (uint64_t)(uint32_t)o->blocking},
		{"-a", (uint64_t)o->average},
		{"--backend", (uint64_t)c->backend},
		{"--segment", (uint64_t)c->cfg.segment},
	};
	return gk_comm_agree(c, f, GK_ARRAY_SIZE(f), "every rank must run the same benchmark",
			     err);
}

/* ---- the sweep ---- */

/* nccl-tests' rule: whole elements, and a whole number per rank where
 * the collective splits the buffer among ranks. */
static size_t count_of(uint64_t size, gk_comm_coll coll, size_t esz, int n)
{
	uint64_t unit = esz * (coll == GK_COMM_ALLREDUCE || coll == GK_COMM_BROADCAST ||
			       coll == GK_COMM_REDUCE ? 1 : (uint64_t)n);
	return (size_t)(size / unit * unit / esz);
}

/* The next size, or 0 when the sweep is over (past maxbytes or 2^64). */
static uint64_t next_size(const gk_comm_bench_opts *o, uint64_t size)
{
	uint64_t next;
	if (o->factor > 1) {
		if (size == 0)
			return 1 <= o->maxbytes ? 1 : 0;
		if (gk_mul_overflow(size, o->factor, &next) < 0)
			return 0;
	} else if (gk_add_overflow(size, o->stepbytes, &next) < 0) {
		return 0;
	}
	return next <= o->maxbytes ? next : 0;
}

int gk_comm_bench_sweep(gk_comm *c, const gk_comm_bench_opts *o,
			const gk_comm_bench_sink *sink, int64_t *total_wrong,
			gk_err *err)
{
	gk_comm_algo algos[GK_COMM_ALGO_COUNT];
	int nalgo = 0;
	if (gk_comm_bench_validate(o, c->backend, err) < 0)
		return -1;
	if (o->all_algos) {
		for (int a = GK_COMM_ALGO_NATIVE; a < GK_COMM_ALGO_COUNT; a++)
			if (gk_comm_algo_supported(c, o->coll, a) &&
			    (o->compress == GK_COMM_COMPRESS_NONE || a == GK_COMM_ALGO_RING))
				algos[nalgo++] = a;
		/* nccl runs its compressed ring on the device under auto */
		if (nalgo == 0)
			algos[nalgo++] = GK_COMM_ALGO_AUTO;
	} else {
		algos[nalgo++] = o->algo;
	}
	if (o->root < 0 || o->root >= c->world)
		return gk_errf(err, "-r %d: not a rank of a world of %d", o->root, c->world);

	*total_wrong = 0;
	for (int ai = 0; ai < nalgo; ai++) {
		params p = {.coll = o->coll, .dt = o->dt, .op = o->op, .algo = algos[ai],
			    .compress = o->compress, .root = o->root, .warmup = o->warmup,
			    .iters = o->iters, .check = o->check, .blocking = o->blocking,
			    .average = o->average};
		gk_comm_bench_summary sum = {.algo = p.algo};
		int nbw = 0;
		if (sink->begin && sink->begin(sink->ctx, p.algo) < 0)
			return -1;
		for (size_t ti = 0; ti < (o->all_types ? GK_ARRAY_SIZE(all_types) : 1); ti++) {
			if (o->all_types)
				p.dt = all_types[ti];
			for (int oi = 0; oi < (o->all_ops ? GK_COMM_OP_COUNT : 1); oi++) {
				if (o->all_ops)
					p.op = (gk_comm_op)oi;
				for (uint64_t size = o->minbytes; ; ) {
					gk_comm_bench_row row = {.algo = p.algo, .dt = p.dt, .op = p.op,
						.root = p.coll == GK_COMM_BROADCAST ||
							p.coll == GK_COMM_REDUCE ? p.root : -1};
					p.count = count_of(size, p.coll, gk_comm_dt_size(p.dt), c->world);
					row.count = p.count;
					row.bytes = p.count * gk_comm_dt_size(p.dt);
					for (int ip = 0; ip < 2; ip++) {
						if (run_one(c, &p, ip, &row.r[ip], err) < 0)
							return -1;
						if (row.r[ip].wrong > 0)
							sum.wrong += row.r[ip].wrong;
						sum.avg_busbw += row.r[ip].busbw, nbw++;
					}
					sum.last_busbw = row.r[0].busbw;
					if (sink->row && sink->row(sink->ctx, &row) < 0)
						return -1;
					if (!(size = next_size(o, size)))
						break;
				}
			}
		}
		sum.avg_busbw = nbw ? sum.avg_busbw / nbw : 0;
		*total_wrong += sum.wrong;
		if (sink->end && sink->end(sink->ctx, &sum) < 0)
			return -1;
	}
	return 0;
}

/* ---- the memcpy ceiling ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double memcpy_bw(size_t bytes, int reps)
{
	char *a = malloc(bytes), *b = malloc(bytes);
	double t[64], bw = 0;
	if (reps > 64)
		reps = 64;
	if (a && b && reps > 0) {
		memset(a, 1, bytes);
		memset(b, 2, bytes);
		for (int k = 0; k < reps; k++) {
			double t0 = gk_now();
			memcpy(k % 2 ? a : b, k % 2 ? b : a, bytes);
			t[k] = gk_now() - t0;
		}
		qsort(t, (size_t)reps, sizeof *t, cmp_double);
		double med = t[reps / 2];
		bw = med > 0 ? (double)bytes / med / 1e9 : 0;
	}
	free(a);
	free(b);
	return bw;
}

int gk_comm_bench_memcpy(gk_comm *c, uint64_t maxbytes, double *gbs,
			 size_t *bytes, gk_err *err)
{
	const uint64_t lo = (uint64_t)1 << 20, hi = (uint64_t)256 << 20;
	*bytes = (size_t)(maxbytes < lo ? lo : maxbytes > hi ? hi : maxbytes);
	*gbs = 0;
	if (gk_comm_on_device(c))
		return 0;
	if (c->rank == 0)
		*gbs = memcpy_bw(*bytes, 9);
	return gk_comm_barrier(c, err);
}

const char *gk_comm_bench_type_name(gk_dtype dt)
{
	switch (dt) {
	case GK_DT_F64: return "double";
	case GK_DT_F16: return "half";
	case GK_DT_BF16: return "bfloat16";
	case GK_DT_I32: return "int32";
	default: return "float";
	}
}

/*
 * Names by Prometheus' conventions (https://prometheus.io/docs/practices/naming/):
 * bandwidths in bytes per second (the table's GB/s are 1e9 bytes), times
 * in seconds. The tool is allreduce-bench whatever the collective, so the
 * prefix stays gpukit_allreduce_ and the collective is a label.
 */
int gk_comm_bench_metrics_new(gk_metrics **out, const gk_comm *c,
			      const gk_comm_bench_opts *o, gk_err *err)
{
	const char *lab[] = {"collective", gk_comm_coll_name(o->coll), "backend",
			     gk_comm_backend_name(gk_comm_backend_of(c)), NULL};
	return gk_metrics_new(out, lab, err);
}

int gk_comm_bench_metrics_row(gk_metrics *m, const gk_comm_bench_row *w,
			      gk_err *err)
{
	char size[24], root[16];
	snprintf(size, sizeof(size), "%zu", w->bytes);
	snprintf(root, sizeof(root), "%d", w->root);
	for (int ip = 0; ip < 2; ip++) {
		const gk_comm_bench_result *r = &w->r[ip];
		const char *lab[] = {"algo", gk_comm_algo_name(w->algo), "type",
				     gk_comm_bench_type_name(w->dt), "redop", gk_comm_op_name(w->op),
				     "size", size, "placement", ip ? "in" : "out",
				     w->root >= 0 ? "root" : NULL, root, NULL};
		if (gk_metrics_set(m, "gpukit_allreduce_busbw_bytes_per_second", GK_METRIC_GAUGE,
				   "Bus bandwidth (nccl-tests' busbw).", lab, r->busbw * 1e9,
				   err) < 0 ||
		    gk_metrics_set(m, "gpukit_allreduce_algbw_bytes_per_second", GK_METRIC_GAUGE,
				   "Algorithm bandwidth: size over time.", lab, r->algbw * 1e9,
				   err) < 0 ||
		    gk_metrics_set(m, "gpukit_allreduce_time_seconds", GK_METRIC_GAUGE,
				   "Time of one collective, the ranks' times combined as -a says.",
				   lab, r->time_us * 1e-6, err) < 0)
			return -1;
		if (r->wrong >= 0 &&
		    gk_metrics_set(m, "gpukit_allreduce_wrong_elements", GK_METRIC_GAUGE,
				   "Elements out of bounds in the checked runs, all ranks.", lab,
				   (double)r->wrong, err) < 0)
			return -1;
	}
	return 0;
}

int gk_comm_bench_metrics_summary(gk_metrics *m, const gk_comm_bench_summary *s,
				  gk_err *err)
{
	const char *lab[] = {"algo", gk_comm_algo_name(s->algo), NULL};
	if (gk_metrics_set(m, "gpukit_allreduce_avg_busbw_bytes_per_second", GK_METRIC_GAUGE,
			   "Mean bus bandwidth of every run of the sweep.", lab,
			   s->avg_busbw * 1e9, err) < 0 ||
	    gk_metrics_set(m, "gpukit_allreduce_out_of_bounds_elements", GK_METRIC_GAUGE,
			   "Elements out of bounds over the sweep.", lab, (double)s->wrong,
			   err) < 0)
		return -1;
	return 0;
}

int gk_comm_bench_metrics_run(gk_metrics *m, int world, double memcpy_gbs,
			      int64_t wrong, double now, gk_err *err)
{
	if (gk_metrics_set(m, "gpukit_allreduce_world_size", GK_METRIC_GAUGE,
			   "Ranks in the benchmark.", NULL, world, err) < 0 ||
	    gk_metrics_set(m, "gpukit_allreduce_success", GK_METRIC_GAUGE,
			   "1 when every checked result was right, else 0.", NULL,
			   wrong ? 0 : 1, err) < 0 ||
	    gk_metrics_set(m, "gpukit_allreduce_last_run_timestamp_seconds", GK_METRIC_GAUGE,
			   "When the benchmark ended, in Unix time.", NULL, now, err) < 0)
		return -1;
	/* no host copy to compare with on device memory */
	if (memcpy_gbs > 0 &&
	    gk_metrics_set(m, "gpukit_allreduce_memcpy_bytes_per_second", GK_METRIC_GAUGE,
			   "Host memcpy bandwidth, the ceiling of a host collective.", NULL,
			   memcpy_gbs * 1e9, err) < 0)
		return -1;
	return 0;
}
