/*
 * grads.c - gradient buckets over the non-blocking allreduce (comm.h):
 * the overlap of communication with backward that DDP-style trainers do
 * (Li et al., "PyTorch Distributed: Experiences on Accelerating Data
 * Parallel Training", VLDB 2020, section 3.2.3).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/internal.h"

struct gk_comm_grads {
	gk_comm *c;
	float *grad;
	size_t n, nb;
	size_t *lo;         /* bucket b is [lo[b], lo[b-1]) counting from the end; lo[-1] = n */
	gk_comm_req **req;  /* in flight: nreq of them */
	size_t nreq;
	size_t started;     /* buckets 0..started-1 are in flight */
	float *dst;         /* ZeRO-1: owned averages go here (else in place) */
	size_t per;         /* ... rank r owning [r * per, (r + 1) * per) */
	gk_comm_callopts o;
	float *residual;    /* n floats when compressing */
};

int gk_comm_grads_new(gk_comm_grads **out, gk_comm *c, float *grad, size_t n,
		      size_t bucket_bytes, const gk_comm_callopts *o,
		      gk_err *err)
{
	size_t per = (bucket_bytes ? bucket_bytes : (size_t)25 << 20) / sizeof(float);
	if (per == 0)
		per = 1;
	gk_comm_grads *g = calloc(1, sizeof *g);
	if (!g)
		return gk_errf(err, "comm: out of memory");
	g->c = c, g->grad = grad, g->n = n;
	g->nb = n ? (n + per - 1) / per : 0;
	g->lo = calloc(g->nb + 1, sizeof *g->lo);
	g->req = calloc(g->nb + 1, sizeof *g->req);
	if (o)
		g->o = *o;
	g->o.residual = NULL;
	if (!g->lo || !g->req) {
		size_t nb = g->nb;
		gk_comm_grads_free(g);
		return gk_errf(err, "comm: out of memory for %zu gradient buckets", nb);
	}
	if (g->o.compress != GK_COMM_COMPRESS_NONE) {
		/* The residual lives where the gradients do (device memory on nccl). */
		float *zero = calloc(n ? n : 1, sizeof(float));
		g->residual = gk_comm_alloc(c, n * sizeof(float), err);
		if (!zero || !g->residual ||
		    gk_comm_to_device(c, g->residual, zero, n * sizeof(float), err) < 0) {
			if (!zero)
				gk_errf(err, "comm: out of memory for a residual of %zu floats", n);
			free(zero);
			gk_comm_grads_free(g);
			return -1;
		}
		free(zero);
	}
	for (size_t b = 0; b < g->nb; b++)
		g->lo[b] = (b + 1) * per >= n ? 0 : n - (b + 1) * per;
	*out = g;
	return 0;
}

int gk_comm_grads_shard(gk_comm_grads *g, float *dst, size_t per, gk_err *err)
{
	int world = gk_comm_world(g->c);
	if (g->residual)
		return gk_errf(err, "comm: sharded gradient buckets do not compress");
	if (!dst || per == 0 || per > SIZE_MAX / (size_t)world || per * (size_t)world < g->n)
		return gk_errf(err, "comm: %d ranks of %zu gradients each cannot own %zu",
			       world, per, g->n);
	/* a bucket spans at most world owners; each boundary adds one piece */
	gk_comm_req **req = realloc(g->req, (g->nb + (size_t)world + 1) * sizeof *req);
	if (!req)
		return gk_errf(err, "comm: out of memory for %zu requests", g->nb + (size_t)world);
	g->req = req;
	g->dst = dst, g->per = per;
	return 0;
}

static int start_bucket(gk_comm_grads *g, size_t b, gk_err *err)
{
	size_t hi = b ? g->lo[b - 1] : g->n, lo = g->lo[b];
	if (g->dst) {
		/* one reduce to each rank owning part of [lo, hi) */
		for (size_t r = lo / g->per; r * g->per < hi; r++) {
			size_t a = r * g->per > lo ? r * g->per : lo;
			size_t e = (r + 1) * g->per < hi ? (r + 1) * g->per : hi;
			gk_comm_trace_tag(g->c, "bucket", (int64_t)b);
			if (gk_comm_ireduce(g->c, g->grad + a, g->dst + a, e - a, GK_DT_F32,
					    GK_COMM_AVG, (int)r, NULL, &g->req[g->nreq], err) < 0)
				return -1;
			g->nreq++;
		}
		return 0;
	}
	gk_comm_callopts o = g->o;
	if (g->residual)
		o.residual = g->residual + lo;
	gk_comm_trace_tag(g->c, "bucket", (int64_t)b);
	return gk_comm_iallreduce(g->c, g->grad + lo, g->grad + lo, hi - lo, GK_DT_F32,
				  GK_COMM_AVG, &o, &g->req[g->nreq++], err);
}

int gk_comm_grads_ready(gk_comm_grads *g, size_t off, gk_err *err)
{
	while (g->started < g->nb && g->lo[g->started] >= off) {
		if (start_bucket(g, g->started, err) < 0)
			return -1;
		g->started++;
	}
	return 0;
}

int gk_comm_grads_finish(gk_comm_grads *g, gk_err *err)
{
	int rc = gk_comm_grads_ready(g, 0, err);
	for (size_t i = 0; i < g->nreq; i++)
		if (gk_comm_wait(g->req[i], rc < 0 ? NULL : err) < 0)
			rc = -1;
	g->nreq = 0;
	g->started = 0;
	return rc;
}

size_t gk_comm_grads_buckets(const gk_comm_grads *g) { return g->nb; }

void gk_comm_grads_free(gk_comm_grads *g)
{
	if (!g)
		return;
	free(g->lo);
	free(g->req);
	if (g->residual)
		gk_comm_free(g->c, g->residual);
	free(g);
}

float *gk_comm_grads_residual(gk_comm_grads *g)
{
	return g ? g->residual : NULL;
}
