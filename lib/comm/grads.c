/*
 * grads.c - gradient buckets over the non-blocking allreduce (comm.h):
 * the overlap of communication with backward that DDP-style trainers do
 * (Li et al., "PyTorch Distributed: Experiences on Accelerating Data
 * Parallel Training", VLDB 2020, section 3.2.3).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/internal.h"

struct gk_comm_grads {
	gk_comm *c;
	float *grad;
	size_t n, nb;
	size_t bucket;      /* elements of a bucket, as asked */
	size_t *lo;         /* bucket b is [lo[b], lo[b-1]) counting from the end; lo[-1] = n */
	gk_comm_req **req;  /* in flight: nreq of them */
	size_t nreq;
	size_t started;     /* buckets 0..started-1 are in flight */
	float *dst;         /* ZeRO-1: owned averages go here (else in place) */
	size_t per;         /* ... rank r owning [r * per, (r + 1) * per) */
	/* ZeRO-2 (gk_comm_grads_partition): each bucket one reduce-scatter of
	 * unequal pieces, its own piece summed into shard when it completes */
	float *shard;
	size_t *displ;      /* bucket b's pieces: displ + b * (world + 1) */
	size_t retired;     /* buckets 0..retired-1 are summed and released */
	size_t depth;       /* at most this many in flight; 0: each waited at once */
	int add, divide;    /* this micro-step adds (else copies); finish divides */
	gk_comm_grads_done_fn done;
	void *done_ctx;
	/* gk_comm_grads_cuts: the boundaries a bucket may have above below
	 * (sorted, ncut of them), any multiple of align under it */
	size_t *cut, ncut, below;
	/* gk_comm_grads_place: where bucket b's gradients are, when not in
	 * grad (reused memory: each retire fences the caller's stream) */
	gk_comm_grads_at_fn at;
	void *at_ctx;
	gk_comm_callopts o;
	float *residual;    /* n floats when compressing */
	int own_residual;   /* made here (else the caller's o->residual) */
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
	g->c = c, g->grad = grad, g->n = n, g->bucket = per;
	g->nb = n ? (n + per - 1) / per : 0;
	g->lo = calloc(g->nb + 1, sizeof *g->lo);
	g->req = calloc(g->nb + 1, sizeof *g->req);
	if (o)
		g->o = *o;
	g->residual = g->o.compress != GK_COMM_COMPRESS_NONE ? g->o.residual : NULL;
	g->o.residual = NULL;
	if (!g->lo || !g->req) {
		size_t nb = g->nb;
		gk_comm_grads_free(g);
		return gk_errf(err, "comm: out of memory for %zu gradient buckets", nb);
	}
	if (g->o.compress != GK_COMM_COMPRESS_NONE && !g->residual) {
		g->own_residual = 1;
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
	if (!gk_comm_on_device(g->c) || dst != g->grad)
		return 0;
	/*
	 * On a device communicator, in place: each bucket is one
	 * reduce-scatter of its owners' pieces (gk_comm_ireduce_scatterv:
	 * one group of a reduce per owner, issued as one NCCL operation and
	 * waited on as one request; one ncclReduceScatter where the pieces
	 * are equal, a bucket spanning every rank's whole range) instead of
	 * a collective per owner. The host backends keep the reduce per
	 * owner, whose sums the CPU's tests hold bit for bit.
	 */
	free(g->displ);
	g->displ = calloc(g->nb * ((size_t)world + 1) + 1, sizeof *g->displ);
	if (!g->displ)
		return gk_errf(err, "comm: out of memory for %zu gradient buckets", g->nb);
	for (size_t b = 0; b < g->nb; b++) {
		size_t bhi = b ? g->lo[b - 1] : g->n, blo = g->lo[b];
		size_t *d = g->displ + b * ((size_t)world + 1);
		for (int q = 0; q <= world; q++) {
			size_t at = (size_t)q * per;
			d[q] = (at < blo ? blo : at > bhi ? bhi : at) - blo;
		}
	}
	return 0;
}

int gk_comm_grads_cuts(gk_comm_grads *g, const size_t *cut, size_t ncut, size_t below,
		       gk_err *err)
{
	free(g->cut);
	g->cut = NULL;
	g->ncut = 0;
	g->below = below;
	if (ncut == 0)
		return 0;
	if (!(g->cut = malloc(ncut * sizeof *g->cut)))
		return gk_errf(err, "comm: out of memory for %zu bucket boundaries", ncut);
	memcpy(g->cut, cut, ncut * sizeof *g->cut);
	g->ncut = ncut;
	for (size_t i = 1; i < ncut; i++)
		if (cut[i] <= cut[i - 1])
			return gk_errf(err, "comm: bucket boundaries not ascending at %zu", i);
	return 0;
}

/*
 * The low end of the bucket below hi, wanting it at want (< hi): under
 * below any multiple of align; above it, of the allowed boundaries in
 * [want, hi) the lowest, or when none lies there the highest under want
 * (a bucket of one piece between two boundaries, larger than asked).
 */
static size_t cut_at(const size_t *cut, size_t ncut, size_t below, size_t want, size_t hi,
		     size_t align)
{
	if (!cut || want < below) {
		size_t lo = want / align * align;
		return cut && lo < below && hi > below ? below : lo;
	}
	size_t best = below;
	for (size_t i = 0; i < ncut; i++) {
		if (cut[i] >= hi)
			break;
		if (cut[i] >= want)
			return cut[i];
		if (cut[i] > best)
			best = cut[i];
	}
	return best;
}

size_t gk_comm_grads_align(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	return pg > 0 ? (size_t)pg / sizeof(float) : 1024;
}

size_t gk_comm_grads_plan(size_t n, size_t bucket_bytes, size_t align, const size_t *cut,
			  size_t ncut, size_t below, size_t *lo)
{
	size_t per = (bucket_bytes ? bucket_bytes : (size_t)25 << 20) / sizeof(float), nb = 0;
	if (per == 0)
		per = 1;
	if (align == 0)
		align = 1;
	if (!ncut)
		cut = NULL;
	size_t bper = (per + align - 1) / align * align;
	for (size_t hi = n; hi > 0; nb++) {
		size_t want = hi > bper ? hi - bper : 0;
		hi = cut_at(cut, ncut, below, want, hi, align);
		if (lo)
			lo[nb] = hi;
	}
	return nb;
}

int gk_comm_grads_partition(gk_comm_grads *g, float *shard, size_t per, size_t align,
			    size_t depth, gk_comm_grads_done_fn done, void *ctx, gk_err *err)
{
	int world = gk_comm_world(g->c);
	if (!shard || per == 0 || per > SIZE_MAX / (size_t)world || per * (size_t)world < g->n)
		return gk_errf(err, "comm: %d ranks of %zu gradients each cannot own %zu",
			       world, per, g->n);
	if (align == 0)
		align = 1;
	/*
	 * Buckets again, each starting on a multiple of align elements (the
	 * caller's pages), so that a bucket's range can be released whole
	 * once its reduction is summed: of bucket_bytes rounded up to align
	 * (gk_comm_grads_plan, which lib/mem's estimate calls too).
	 */
	size_t bytes = g->bucket * sizeof(float);
	size_t nb = gk_comm_grads_plan(g->n, bytes, align, g->cut, g->ncut, g->below, NULL);
	size_t *lo = realloc(g->lo, (nb + 1) * sizeof *lo);
	if (!lo)
		return gk_errf(err, "comm: out of memory for gradient buckets");
	g->lo = lo;
	gk_comm_grads_plan(g->n, bytes, align, g->cut, g->ncut, g->below, lo);
	g->nb = nb;
	free(g->displ);
	gk_comm_req **req = realloc(g->req, (nb + 1) * sizeof *req);
	g->displ = calloc(nb * ((size_t)world + 1) + 1, sizeof *g->displ);
	if (req)
		g->req = req;
	if (!req || !g->displ)
		return gk_errf(err, "comm: out of memory for %zu gradient buckets", nb);
	for (size_t b = 0; b < nb; b++) {
		size_t bhi = b ? lo[b - 1] : g->n, blo = lo[b];
		size_t *d = g->displ + b * ((size_t)world + 1);
		for (int q = 0; q <= world; q++) {
			size_t at = (size_t)q * per;
			d[q] = (at < blo ? blo : at > bhi ? bhi : at) - blo;
		}
	}
	g->shard = shard, g->per = per, g->depth = depth;
	g->done = done, g->done_ctx = ctx;
	g->add = 0, g->divide = 1;
	return 0;
}

void gk_comm_grads_bucket(const gk_comm_grads *g, size_t b, size_t *lo, size_t *hi)
{
	*lo = g->lo[b];
	*hi = b ? g->lo[b - 1] : g->n;
}

void gk_comm_grads_place(gk_comm_grads *g, gk_comm_grads_at_fn at, void *ctx)
{
	g->at = at;
	g->at_ctx = ctx;
	if (gk_comm_on_device(g->c))
		gk_comm_nccl_own_on_user(g->c, at != NULL);
}

/* where bucket [lo, ...)'s gradients are */
static float *bucket_at(const gk_comm_grads *g, size_t lo)
{
	return g->at ? g->at(lo, g->at_ctx) : g->grad + lo;
}

void gk_comm_grads_micro(gk_comm_grads *g, int first, int last)
{
	g->add = !first;
	g->divide = last;
}

/*
 * ZeRO-2: bucket b's reduction has been started; wait for it, put this
 * rank's piece into the shard (copied on a micro-step's first pass over
 * the shard, added after), and hand the bucket's range back to the
 * caller, whose gradients there are no longer needed.
 *
 * On a device communicator the host waits for nothing here: the copy or
 * sum and the zeroing of the bucket's range (device memory has no pages
 * to give back; the next micro-step's backward adds into zeros) are
 * queued on the communicator's stream behind the reduction, and the
 * request stays for finish to wait on, so backward's kernels keep being
 * queued while the buckets reduce. Placed (gk_comm_grads_place), the
 * bucket's memory is a later bucket's, which the caller's stream writes:
 * the host waits for the reduction (under the communicator's watchdog),
 * and the copy or sum and the zeroing go on the caller's stream, before
 * that bucket's kernels. A fence of the caller's stream on the
 * communicator's would instead also wait for the buckets started after
 * this one, and a hang among them would stop the caller's stream, whose
 * synchronisation no watchdog ends.
 */
static int retire(gk_comm_grads *g, gk_err *err)
{
	size_t b = g->retired;
	size_t hi = b ? g->lo[b - 1] : g->n, lo = g->lo[b];
	int world = gk_comm_world(g->c), rank = gk_comm_rank(g->c);
	int dev = gk_comm_on_device(g->c);
	const size_t *d = g->displ + b * ((size_t)world + 1);
	int rc = 0;
	if (!dev || g->at) {
		rc = gk_comm_wait(g->req[b], err);
		g->req[b] = NULL;
	}
	g->retired++;
	if (rc < 0)
		return -1;
	size_t a = lo + d[rank], e = lo + d[rank + 1];
	float *dst = e > a ? g->shard + (a - (size_t)rank * g->per) : g->shard;
	float *base = bucket_at(g, lo);
	const float *src = base + (a - lo);
	if (dev) {
		if (gk_comm_nccl_accum(g->c, dst, src, e - a, g->add, err) < 0 ||
		    gk_comm_nccl_zero(g->c, base, (hi - lo) * sizeof(float), err) < 0)
			return -1;
	} else if (e > a) {
		if (g->add)
			for (size_t i = 0; i < e - a; i++)
				dst[i] += src[i];
		else
			memcpy(dst, src, (e - a) * sizeof(float));
	}
	if (g->done)
		g->done(lo, hi, g->done_ctx);
	return 0;
}

static int start_bucket(gk_comm_grads *g, size_t b, gk_err *err)
{
	size_t hi = b ? g->lo[b - 1] : g->n, lo = g->lo[b];
	if (g->shard) {
		size_t depth = g->depth ? g->depth : 1;
		while (g->started - g->retired >= depth)
			if (retire(g, err) < 0)
				return -1;
		size_t *d = g->displ + b * ((size_t)gk_comm_world(g->c) + 1);
		/* compressed: the bucket's part of the error feedback */
		gk_comm_callopts o = g->o;
		o.residual = g->residual ? g->residual + lo : NULL;
		return gk_comm_ireduce_scatterv(g->c, bucket_at(g, lo), d, GK_DT_F32, GK_COMM_SUM,
						&o, &g->req[b], err);
	}
	if (g->dst && g->displ) {
		size_t *d = g->displ + b * ((size_t)gk_comm_world(g->c) + 1);
		gk_comm_trace_tag(g->c, "bucket", (int64_t)b);
		return gk_comm_ireduce_scatterv(g->c, g->grad + lo, d, GK_DT_F32, GK_COMM_AVG,
						NULL, &g->req[g->nreq++], err);
	}
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
		if (g->shard && g->depth == 0 && retire(g, err) < 0)
			return -1;
	}
	return 0;
}

static int finish_partition(gk_comm_grads *g, gk_err *err)
{
	int rc = gk_comm_grads_ready(g, 0, err), dev = gk_comm_on_device(g->c);
	size_t nb = g->started;
	while (g->retired < g->started)
		if (rc < 0) /* the communicator is broken: collect the rest */
			g->retired++;
		else if (retire(g, err) < 0)
			rc = -1;
	g->started = g->retired = 0;
	if (rc == 0 && g->divide) {
		/* AVG's division, once, on the sums of every micro-step */
		int world = gk_comm_world(g->c);
		size_t n = g->per;
		if ((size_t)(gk_comm_rank(g->c) + 1) * g->per > g->n)
			n = (size_t)gk_comm_rank(g->c) * g->per >= g->n ? 0
				: g->n - (size_t)gk_comm_rank(g->c) * g->per;
		if (!dev)
			gk_comm_avg_cpu(g->shard, n, GK_DT_F32, world);
		else if (gk_comm_nccl_avg(g->c, g->shard, n, err) < 0)
			rc = -1;
	}
	/* a device's shard and zeroed buckets: the caller's stream waits for
	 * them (the optimizer, the next backward) */
	if (rc == 0 && dev && gk_comm_nccl_fence(g->c, err) < 0)
		rc = -1;
	/* what is still in flight: a device's requests, or a broken
	 * communicator's, collected (their status is the first failure's) */
	for (size_t b = 0; b < nb; b++)
		if (g->req[b]) {
			if (gk_comm_wait(g->req[b], rc < 0 ? NULL : err) < 0)
				rc = -1;
			g->req[b] = NULL;
		}
	return rc;
}

int gk_comm_grads_finish(gk_comm_grads *g, gk_err *err)
{
	if (g->shard)
		return finish_partition(g, err);
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
	free(g->displ);
	free(g->cut);
	if (g->own_residual)
		gk_comm_free(g->c, g->residual);
	free(g);
}

float *gk_comm_grads_residual(gk_comm_grads *g)
{
	return g ? g->residual : NULL;
}
