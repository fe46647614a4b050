/*
 * bench.c - timing and checking one collective, for allreduce-bench.
 *
 * Inputs are small integers from a formula of (rank, index), so every rank
 * knows every rank's input and the exact result needs no communication;
 * sums of at most 64 values in [-4, 4] are exact even in bf16. Compressed
 * runs use fractional values of varied magnitude instead (integers would
 * hide the rounding) and are checked against the bound of comm.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* Fractional values in [-1, 1) scaled by 2^-4 .. 2^3 per 256-group. */
static double fval(int r, size_t i)
{
	uint64_t h = (uint64_t)r * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 31, h *= 0x94d049bb133111ebULL, h ^= h >> 29;
	double u = (double)(h >> 11) / 9007199254740992.0 * 2 - 1;
	return ldexp(u, (int)((i / 256) % 8) - 4);
}

static void store(void *buf, size_t i, gk_dtype dt, double v)
{
	switch (dt) {
	case GK_DT_F32: ((float *)buf)[i] = (float)v; break;
	case GK_DT_F64: ((double *)buf)[i] = v; break;
	case GK_DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case GK_DT_BF16: ((uint16_t *)buf)[i] = gk_f32_to_bf16((float)v); break;
	default: ((uint16_t *)buf)[i] = gk_f32_to_f16((float)v); break;
	}
}

static double load(const void *buf, size_t i, gk_dtype dt)
{
	switch (dt) {
	case GK_DT_F32: return ((const float *)buf)[i];
	case GK_DT_F64: return ((const double *)buf)[i];
	case GK_DT_I32: return ((const int32_t *)buf)[i];
	case GK_DT_BF16: return gk_bf16_to_f32(((const uint16_t *)buf)[i]);
	default: return gk_f16_to_f32(((const uint16_t *)buf)[i]);
	}
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

typedef struct shape {
	size_t send_n, recv_n; /* elements in the send and receive buffers */
	size_t per;            /* the count argument of the call */
} shape;

static shape shape_of(const gk_comm_bench_params *p, int n)
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

static int call(gk_comm *c, const gk_comm_bench_params *p, const shape *s,
		const void *send, void *recv, gk_err *err)
{
	gk_comm_callopts o = {p->algo, p->compress, NULL};
	switch (p->coll) {
	case GK_COMM_REDUCE_SCATTER:
		return gk_comm_reduce_scatter(c, send, recv, s->per, p->dt, p->op, &o, err);
	case GK_COMM_ALLGATHER:
		return gk_comm_allgather(c, send, recv, s->per, p->dt, &o, err);
	case GK_COMM_BROADCAST:
		return gk_comm_broadcast(c, send, recv, s->per, p->dt, p->root, err);
	default:
		return gk_comm_allreduce(c, send, recv, s->per, p->dt, p->op, &o, err);
	}
}

/* Fill this rank's input on the host. */
static void fill_input(const gk_comm_bench_params *p, const shape *s, int n,
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
		store(h, i, p->dt, v);
	}
}

/* Count wrong elements of the result h (and compressed errors). */
static void verify(const gk_comm_bench_params *p, const shape *s, int n, int r,
		   const void *h, gk_comm_bench_result *res)
{
	if (p->compress != GK_COMM_COMPRESS_NONE) {
		size_t groups = (s->recv_n + 255) / 256;
		double *gmax = calloc(groups ? groups : 1, sizeof *gmax);
		double maxexact = 0;
		for (size_t i = 0; gmax && i < s->recv_n; i++) {
			double a = 0;
			for (int q = 0; q < n; q++)
				a += fabs((double)(float)fval(q, i));
			if (a > gmax[i / 256])
				gmax[i / 256] = a;
		}
		for (size_t i = 0; gmax && i < s->recv_n; i++) {
			double exact = 0, abs_sum = 0;
			for (int q = 0; q < n; q++) {
				double x = (float)fval(q, i);
				exact += x, abs_sum += fabs(x);
			}
			if (p->compress == GK_COMM_COMPRESS_INT8) {
				/* Any group holding i lies within the aligned chunks around it. */
				size_t g = i / 256;
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
			double e = fabs(load(h, i, GK_DT_F32) - exact);
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
		if (load(h, i, p->dt) != want)
			res->wrong++;
	}
}

int gk_comm_bench_run(gk_comm *c, const gk_comm_bench_params *p, int in_place,
		      gk_comm_bench_result *res, gk_err *err)
{
	int n = c->world, r = c->rank;
	size_t esz = gk_comm_dt_size(p->dt);
	shape s = shape_of(p, n);
	memset(res, 0, sizeof *res);
	res->bytes = (s.send_n > s.recv_n ? s.send_n : s.recv_n) * esz;
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
		gk_errf(err, "allreduce-bench: out of memory for %zu bytes", big);
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

	for (int k = 0; k < p->check; k++) {
		fill_input(p, &s, n, r, hin);
		if (gk_comm_to_device(c, send, hin, s.send_n * esz, err) < 0 ||
		    call(c, p, &s, send, recv, err) < 0 ||
		    gk_comm_to_host(c, hout, recv, s.recv_n * esz, err) < 0)
			goto out;
		/* Test hook: a wrong element on rank 0, to prove the check catches it. */
		if (r == 0 && s.recv_n && getenv("GK_COMM_BENCH_CORRUPT"))
			store(hout, s.recv_n / 2, p->dt, load(hout, s.recv_n / 2, p->dt) + 1);
		verify(p, &s, n, r, hout, res);
	}
	if (!p->check) {
		fill_input(p, &s, n, r, hin);
		if (gk_comm_to_device(c, send, hin, s.send_n * esz, err) < 0)
			goto out;
	}
	for (int k = 0; k < p->warmup; k++)
		if (call(c, p, &s, send, recv, err) < 0)
			goto out;
	if (gk_comm_barrier(c, err) < 0)
		goto out;
	double t0 = gk_now();
	for (int k = 0; k < p->iters; k++) {
		if (call(c, p, &s, send, recv, err) < 0)
			goto out;
		if (p->blocking && gk_comm_barrier(c, err) < 0)
			goto out;
	}
	double t = p->iters ? (gk_now() - t0) / p->iters : 0;
	double agg[5] = {t, 0, 0, 0, 0};
	if (gk_comm_host_allreduce_f64(c, agg, 1, GK_COMM_MAX, err) < 0)
		goto out;
	double stats[3] = {(double)res->wrong, 0, 0};
	if (gk_comm_host_allreduce_f64(c, stats, 1, GK_COMM_SUM, err) < 0)
		goto out;
	double errs[2] = {res->max_abs, res->max_rel};
	if (gk_comm_host_allreduce_f64(c, errs, 2, GK_COMM_MAX, err) < 0)
		goto out;
	res->wrong = p->check ? (int64_t)stats[0] : -1;
	res->max_abs = errs[0], res->max_rel = errs[1];
	res->time_us = agg[0] * 1e6;
	res->algbw = agg[0] > 0 ? (double)res->bytes / agg[0] / 1e9 : 0;
	res->busbw = res->algbw * gk_comm_busbw_factor(p->coll, n);
	rc = 0;
out:
	gk_comm_free(c, drecv);
	if (dsend)
		gk_comm_free(c, dsend);
	free(hin);
	free(hout);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double gk_comm_memcpy_bw(size_t bytes, int reps)
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
