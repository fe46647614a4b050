/*
 * comm.c - the backend-independent half of lib/comm: names, argument
 * checks, the self backend, algorithm choice, the progress thread behind
 * the non-blocking calls, and the compression error bounds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm/internal.h"

/* Internal collective code for a queued barrier. */
#define COLL_BARRIER GK_COMM_CALL_BARRIER

/* ---- names ---- */

static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};
static const char *const backend_names[] = {"auto", "self", "mpi", "nccl"};
static const char *const algo_names[] = {"auto", "native", "ring", "rd",
					 "rabenseifner"};
static const char *const compress_names[] = {"none", "bf16", "f16", "int8"};
static const char *const coll_names[] = {"allreduce", "reducescatter",
					 "allgather", "broadcast", "reduce"};

#define NAME(tab, i) ((unsigned)(i) < GK_ARRAY_SIZE(tab) ? tab[i] : "?")

const char *gk_comm_op_name(gk_comm_op op) { return NAME(op_names, op); }
const char *gk_comm_backend_name(gk_comm_backend b) { return NAME(backend_names, b); }
const char *gk_comm_algo_name(gk_comm_algo a) { return NAME(algo_names, a); }
const char *gk_comm_compress_name(gk_comm_compress c) { return NAME(compress_names, c); }
const char *gk_comm_coll_name(gk_comm_coll c) { return NAME(coll_names, c); }
const char *gk_comm_call_name(int coll)
{
	return coll == GK_COMM_CALL_BARRIER ? "barrier" : coll == GK_COMM_CALL_SEND ? "send" :
	       coll == GK_COMM_CALL_RECV ? "recv" : gk_comm_coll_name((gk_comm_coll)coll);
}

static int lookup(const char *const *tab, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(tab[i], s) == 0)
			return (int)i;
	return -1;
}

int gk_comm_op_parse(const char *s)
{
	return lookup(op_names, GK_ARRAY_SIZE(op_names), s);
}
int gk_comm_backend_parse(const char *s)
{
	return lookup(backend_names, GK_ARRAY_SIZE(backend_names), s);
}
int gk_comm_algo_parse(const char *s)
{
	if (strcasecmp(s, "recursive-doubling") == 0)
		return GK_COMM_ALGO_RD;
	if (strcasecmp(s, "rab") == 0)
		return GK_COMM_ALGO_RABENSEIFNER;
	return lookup(algo_names, GK_ARRAY_SIZE(algo_names), s);
}
int gk_comm_compress_parse(const char *s)
{
	if (strcasecmp(s, "fp16") == 0)
		return GK_COMM_COMPRESS_F16;
	return lookup(compress_names, GK_ARRAY_SIZE(compress_names), s);
}
int gk_comm_coll_parse(const char *s)
{
	static const char *const alt[] = {"all_reduce", "reduce_scatter",
					  "all_gather", "bcast"};
	int i = lookup(coll_names, GK_ARRAY_SIZE(coll_names), s);
	if (i < 0)
		i = lookup(alt, GK_ARRAY_SIZE(alt), s);
	if (i < 0 && strcasecmp(s, "reduce-scatter") == 0)
		i = GK_COMM_REDUCE_SCATTER;
	return i;
}

int gk_comm_dtype_ok(gk_dtype dt) { return gk_comm_dt_size(dt) != 0; }

/* ---- open and close ---- */

int gk_comm_backend_choose(gk_comm_backend want, const gk_rank_info *ri,
			   gk_comm_backend *out, gk_err *err)
{
	if ((unsigned)want >= GK_COMM_BACKEND_COUNT)
		return gk_errf(err, "backend %d: not one of auto self mpi nccl", (int)want);
	/*
	 * self under a launcher with several ranks would run each rank alone,
	 * and any rank that does open MPI would wait for the others forever.
	 */
	if (want == GK_COMM_BACKEND_SELF && ri->world > 1)
		return gk_errf(err, "backend 'self': the %s environment says rank %d of %d, "
			       "and self is a world of one (use mpi, or run without a launcher)",
			       ri->launcher, ri->rank, ri->world);
	if (want != GK_COMM_BACKEND_AUTO) {
		*out = want;
		return 0;
	}
	if (ri->mpi) {
		*out = GK_COMM_BACKEND_MPI;
		return 0;
	}
	/*
	 * A launcher MPI cannot start from (torchrun) with several ranks: each
	 * process would open a world of one and run alone, which looks like
	 * success. Refuse instead.
	 */
	if (ri->world > 1)
		return gk_errf(err, "backend 'auto': the %s environment says rank %d of %d, "
			       "but it gives MPI nothing to start from (launch with mpirun or srun)",
			       ri->launcher, ri->rank, ri->world);
	*out = GK_COMM_BACKEND_SELF;
	return 0;
}

int gk_comm_open(gk_comm **out, const gk_comm_config *cfg, gk_err *err)
{
	gk_rank_info ri;
	gk_comm_backend b;
	gk_comm_config cf = {.device = -1};
	if (cfg)
		cf = *cfg;
	if (gk_rank_discover(&ri, err) < 0 ||
	    gk_comm_backend_choose(cf.backend, &ri, &b, err) < 0)
		return -1;
	gk_comm *c = calloc(1, sizeof *c);
	if (!c)
		return gk_errf(err, "comm: out of memory");
	c->cfg = cf;
	c->rank = 0, c->world = 1;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->backend = b;
	int rc = 0;
	if (b == GK_COMM_BACKEND_MPI || b == GK_COMM_BACKEND_NCCL) {
		rc = gk_comm_mpi_open(c, 1, err);
		/*
		 * MPI's world must be the launcher's: srun without a PMI plugin
		 * MPI can use, or a launcher MPI does not know, starts every
		 * process as a world of one.
		 */
		if (rc == 0 && strcmp(ri.launcher, "none") != 0 &&
		    (c->world != ri.world || c->rank != ri.rank)) {
			rc = gk_errf(err, "mpi: MPI started rank %d of %d, but the %s environment says rank %d of %d%s",
				     c->rank, c->world, ri.launcher, ri.rank, ri.world,
				     strcmp(ri.launcher, "slurm") == 0 ? " (try srun --mpi=pmix)" :
				     ri.mpi ? "" : " (launch with mpirun or srun)");
			gk_comm_mpi_close(c);
		}
	}
	if (rc == 0 && b == GK_COMM_BACKEND_NCCL) {
		rc = gk_comm_nccl_open(c, err);
		if (rc < 0)
			gk_comm_mpi_close(c);
	}
	c->world_rank = c->rank;
	if (rc == 0 && gk_comm_trace_open(c, err) < 0) {
		if (b == GK_COMM_BACKEND_NCCL)
			gk_comm_nccl_close(c);
		if (c->mpi)
			gk_comm_mpi_close(c);
		rc = -1;
	}
	if (rc < 0) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
		return -1;
	}
	*out = c;
	return 0;
}

int gk_comm_split(gk_comm *parent, int color, int key, gk_comm **out, gk_err *err)
{
	*out = NULL;
	if (parent->backend == GK_COMM_BACKEND_NCCL)
		return gk_errf(err, "comm: split of an nccl communicator: not supported "
			       "(split the host communicator and open nccl on each part)");
	if (color < 0)
		return gk_errf(err, "comm: split color %d: negative", color);
	gk_comm *c = calloc(1, sizeof *c);
	if (!c)
		return gk_errf(err, "comm: out of memory");
	c->cfg = parent->cfg;
	c->backend = parent->backend;
	c->rank = 0, c->world = 1;
	c->world_rank = parent->world_rank;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	if (parent->mpi && gk_comm_mpi_split(parent, c, color, key, err) < 0) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
		return -1;
	}
	/* a group's operations are in the flight recorder too (every rank
	 * splits in the same order, so the communicators' numbers agree) */
	if (gk_comm_trace_open(c, err) < 0) {
		gk_comm_close(c);
		return -1;
	}
	*out = c;
	return 0;
}

int gk_comm_open_device(gk_comm *host, const gk_comm_config *cfg, gk_comm **out, gk_err *err)
{
	*out = NULL;
	if (host->backend != GK_COMM_BACKEND_MPI)
		return gk_errf(err, "comm: a device communicator over a group: the group's "
			       "communicator must be an mpi one (this one is %s)",
			       gk_comm_backend_name(host->backend));
	/* the group's own copy of host's MPI communicator, for the bootstrap */
	gk_comm *c;
	if (gk_comm_split(host, 0, host->rank, &c, err) < 0)
		return -1;
	c->cfg = *cfg;
	c->cfg.backend = GK_COMM_BACKEND_NCCL;
	c->cfg.trace_dir = host->cfg.trace_dir;
	if (gk_comm_nccl_open(c, err) < 0) {
		gk_comm_close(c);
		return -1;
	}
	c->backend = GK_COMM_BACKEND_NCCL;
	*out = c;
	return 0;
}

void gk_comm_close(gk_comm *c)
{
	if (!c)
		return;
	if (c->thread_on) {
		pthread_mutex_lock(&c->mu);
		c->stopping = 1;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->thread, NULL);
	}
	gk_comm_trace_close(c);
	if (c->backend == GK_COMM_BACKEND_NCCL)
		gk_comm_nccl_close(c);
	if (c->mpi)
		gk_comm_mpi_close(c);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c->wranks);
	free(c);
}

void gk_comm_abort(gk_comm *c, int code)
{
	if (c && c->tr.dir)
		gk_comm_trace_dump(c, "abort");
	if (c && c->mpi && c->world > 1)
		gk_comm_mpi_abort(c, code);
}

int gk_comm_await_reporter(gk_comm *c, gk_err *err)
{
	return c && c->mpi && c->world > 1 ? gk_comm_mpi_await_reporter(c, err) : 0;
}

int gk_comm_rank(const gk_comm *c) { return c->rank; }
int gk_comm_world(const gk_comm *c) { return c->world; }
int gk_comm_world_rank(const gk_comm *c, int r) { return gk_comm_wrank(c, r < 0 ? c->rank : r); }
gk_comm_backend gk_comm_backend_of(const gk_comm *c) { return c->backend; }
int gk_comm_on_device(const gk_comm *c) { return c->backend == GK_COMM_BACKEND_NCCL; }

/* ---- algorithm choice and argument checks ---- */

int gk_comm_algo_ok(gk_comm_backend b, gk_comm_coll coll, gk_comm_algo algo)
{
	if (algo == GK_COMM_ALGO_AUTO)
		return 1;
	if ((unsigned)algo >= GK_COMM_ALGO_COUNT)
		return 0;
	if (b == GK_COMM_BACKEND_NCCL)
		return algo == GK_COMM_ALGO_NATIVE;
	switch (coll) {
	case GK_COMM_ALLREDUCE: return 1;
	case GK_COMM_REDUCE_SCATTER:
	case GK_COMM_ALLGATHER:
	case GK_COMM_REDUCE:
		return algo == GK_COMM_ALGO_NATIVE || algo == GK_COMM_ALGO_RING;
	default: return algo == GK_COMM_ALGO_NATIVE;
	}
}

int gk_comm_algo_supported(const gk_comm *c, gk_comm_coll coll,
			   gk_comm_algo algo)
{
	return gk_comm_algo_ok(c->backend, coll, algo);
}

/*
 * auto: recursive doubling while latency dominates (log2 n messages of the
 * whole vector beat 2(n-1) small ones), then Rabenseifner on power-of-two
 * worlds (log2 n steps at ring's bandwidth), else the ring, whose cost
 * does not care about the world's shape.
 */
static gk_comm_algo resolve(const gk_comm *c, gk_comm_coll coll,
			    gk_comm_algo a, size_t bytes, gk_comm_compress cz)
{
	if (a == GK_COMM_ALGO_AUTO)
		a = c->cfg.algo;
	if (c->backend == GK_COMM_BACKEND_NCCL)
		return GK_COMM_ALGO_NATIVE;
	if (cz != GK_COMM_COMPRESS_NONE)
		return GK_COMM_ALGO_RING;
	if (a != GK_COMM_ALGO_AUTO)
		return a;
	if (coll == GK_COMM_BROADCAST)
		return GK_COMM_ALGO_NATIVE;
	if (coll != GK_COMM_ALLREDUCE)
		return GK_COMM_ALGO_RING;
	if (bytes < 64 * 1024)
		return GK_COMM_ALGO_RD;
	if ((c->world & (c->world - 1)) == 0)
		return GK_COMM_ALGO_RABENSEIFNER;
	return GK_COMM_ALGO_RING;
}

static int check_call(gk_comm *c, gk_comm_call *k, gk_comm_algo algo,
		      gk_err *err)
{
	const char *what = gk_comm_coll_name(k->coll);
	if (!gk_comm_dtype_ok(k->dt))
		return gk_errf(err, "%s of type '%s': not one of f32 f64 f16 bf16 i32",
			       what, gk_dtype_name(k->dt));
	if ((unsigned)k->op >= GK_COMM_OP_COUNT)
		return gk_errf(err, "%s: invalid reduction op %d", what, (int)k->op);
	if ((unsigned)k->compress >= GK_COMM_COMPRESS_COUNT)
		return gk_errf(err, "%s: invalid compression %d", what, (int)k->compress);
	uint64_t bytes, total;
	if (gk_mul_overflow(k->count, gk_comm_dt_size(k->dt), &bytes) < 0 ||
	    gk_mul_overflow(bytes, (uint64_t)c->world, &total) < 0 ||
	    total > (uint64_t)1 << 56)
		return gk_errf(err, "%s of %zu elements: too large", what, k->count);
	if (k->count && (!k->send || !k->recv))
		return gk_errf(err, "%s: NULL buffer", what);
	if ((k->coll == GK_COMM_BROADCAST || k->coll == GK_COMM_REDUCE) &&
	    (k->root < 0 || k->root >= c->world))
		return gk_errf(err, "%s root %d: not a rank of a world of %d", what,
			       k->root, c->world);
	if (k->compress != GK_COMM_COMPRESS_NONE) {
		if (k->coll != GK_COMM_ALLREDUCE && k->coll != GK_COMM_REDUCE_SCATTER)
			return gk_errf(err, "%s: compression is for allreduce and reduce-scatter only",
				       what);
		if (k->dt != GK_DT_F32)
			return gk_errf(err, "compressed %s of '%s': it takes f32 data (accumulated in f32)",
				       what, gk_dtype_name(k->dt));
		if (k->op != GK_COMM_SUM && k->op != GK_COMM_AVG)
			return gk_errf(err, "compressed %s with op '%s': only sum and avg",
				       what, gk_comm_op_name(k->op));
		if (algo != GK_COMM_ALGO_AUTO && algo != GK_COMM_ALGO_RING)
			return gk_errf(err, "compressed %s with algorithm '%s': it runs on the ring",
				       what, gk_comm_algo_name(algo));
	}
	if ((unsigned)algo >= GK_COMM_ALGO_COUNT || !gk_comm_algo_supported(c, k->coll, algo))
		return gk_errf(err, "%s with algorithm '%s': not available on the %s backend",
			       what, gk_comm_algo_name(algo),
			       gk_comm_backend_name(c->backend));
	k->algo = resolve(c, k->coll, algo, bytes, k->compress);
	return 0;
}

/* ---- the self backend ---- */

static int self_run(gk_comm *c, const gk_comm_call *k)
{
	size_t bytes = k->count * gk_comm_dt_size(k->dt);
	(void)c;
	if (k->coll != COLL_BARRIER && k->send != k->recv && bytes)
		memmove(k->recv, k->send, bytes);
	return 0;
}

/* ---- running a call: directly, or through the progress thread ---- */

static int run_backend(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	switch (c->backend) {
	case GK_COMM_BACKEND_MPI:
		if (k->coll == COLL_BARRIER)
			return gk_comm_mpi_barrier(c, err);
		return gk_comm_mpi_run(c, k, err);
	case GK_COMM_BACKEND_NCCL:
		if (k->coll == COLL_BARRIER)
			return gk_comm_nccl_sync(c, err) < 0 ? -1 :
				gk_comm_mpi_barrier(c, err);
		if (gk_comm_nccl_run(c, k, NULL, err) < 0)
			return -1;
		return gk_comm_nccl_sync(c, err);
	default:
		return self_run(c, k);
	}
}

static int run_now(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	gk_comm_trace_start(c, k);
	int st = run_backend(c, k, err);
	gk_comm_trace_end(c, k->seq, st, err);
	return st;
}

/*
 * The progress thread takes calls in the order they were started and runs
 * them one at a time; a request leaves the queue only when it is done, so
 * head is always the call in flight.
 */
static void *progress_main(void *p)
{
	gk_comm *c = p;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->head && !c->stopping)
			pthread_cond_wait(&c->cv, &c->mu);
		if (!c->head)
			break;
		gk_comm_req *r = c->head;
		pthread_mutex_unlock(&c->mu);
		int st = run_now(c, &r->call, &r->err);
		pthread_mutex_lock(&c->mu);
		r->status = st;
		r->done = 1;
		c->head = r->next;
		if (!c->head)
			c->tail = NULL;
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static int enqueue(gk_comm *c, gk_comm_req *r, gk_err *err)
{
	pthread_mutex_lock(&c->mu);
	if (!c->thread_on) {
		if (pthread_create(&c->thread, NULL, progress_main, c) != 0) {
			pthread_mutex_unlock(&c->mu);
			return gk_errf(err, "comm: cannot start the progress thread");
		}
		c->thread_on = 1;
	}
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* Start a call already entered in the flight recorder. */
static int start_entered(gk_comm *c, const gk_comm_call *k, gk_comm_req **out,
			 gk_err *err)
{
	gk_comm_req *r = calloc(1, sizeof *r);
	if (!r) {
		gk_comm_trace_end(c, k->seq, -1, NULL);
		return gk_errf(err, "comm: out of memory");
	}
	r->c = c;
	r->call = *k;
	r->call.queued = 1; /* when it runs there, its start is its own */
	int queued = 0;
	if (c->backend == GK_COMM_BACKEND_NCCL) {
		gk_comm_trace_start(c, k);
		r->status = gk_comm_nccl_run(c, k, &r->event, &r->err);
		if (r->status < 0)
			gk_comm_trace_end(c, k->seq, -1, &r->err);
	} else if (c->backend == GK_COMM_BACKEND_MPI && c->thread_ok) {
		if (enqueue(c, r, err) < 0) {
			gk_comm_trace_end(c, k->seq, -1, err);
			free(r);
			return -1;
		}
		queued = 1;
	} else {
		r->status = run_now(c, k, &r->err);
		r->done = 1;
	}
	if (!queued && r->status < 0 && !r->event) {
		/* Failed before anything was in flight: report it now. */
		if (err)
			*err = r->err;
		free(r);
		return -1;
	}
	*out = r;
	return 0;
}

static int start(gk_comm *c, gk_comm_call *k, gk_comm_req **out, gk_err *err)
{
	if (gk_comm_trace_enter(c, k) == GK_TR_FAULT_SKIP) {
		/* the test hook: as if the caller had not called it */
		gk_comm_req *r = calloc(1, sizeof *r);
		if (!r)
			return gk_errf(err, "comm: out of memory");
		r->c = c;
		r->done = 1;
		*out = r;
		return 0;
	}
	return start_entered(c, k, out, err);
}

int gk_comm_test(gk_comm_req *r, int *done, gk_err *err)
{
	gk_comm *c = r->c;
	if (r->p2p) {
		if (gk_comm_mpi_p2p_test(c, r->p2p, done, err) < 0)
			return -1;
		if (*done)
			gk_comm_trace_end(c, r->call.seq, 0, NULL);
		return 0;
	}
	if (r->event) {
		if (gk_comm_nccl_event_query(c, r->event, done, err) < 0)
			return -1;
		if (*done)
			gk_comm_trace_end(c, r->call.seq, 0, NULL);
		return 0;
	}
	pthread_mutex_lock(&c->mu);
	*done = r->done;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int gk_comm_wait(gk_comm_req *r, gk_err *err)
{
	gk_comm *c = r->c;
	int st;
	if (r->p2p) {
		st = gk_comm_mpi_p2p_wait(c, r->p2p, &r->err);
		gk_comm_trace_end(c, r->call.seq, st, &r->err);
	} else if (r->event) {
		st = r->status < 0 ? -1 : gk_comm_nccl_event_wait(c, r->event, &r->err);
		gk_comm_trace_end(c, r->call.seq, st, &r->err);
	} else {
		pthread_mutex_lock(&c->mu);
		while (!r->done)
			pthread_cond_wait(&c->cv, &c->mu);
		pthread_mutex_unlock(&c->mu);
		st = r->status;
	}
	if (st < 0 && err)
		*err = r->err;
	free(r);
	return st;
}

int gk_comm_stream_after(gk_comm_req *r, gk_err *err)
{
	gk_comm *c = r->c;
	if (r->event) {
		if (r->status < 0) {
			if (err)
				*err = r->err;
			return -1;
		}
		return gk_comm_nccl_event_order(c, r->event, err);
	}
	if (r->p2p)
		return gk_errf(err, "comm: a point-to-point message has no stream to order");
	pthread_mutex_lock(&c->mu);
	while (!r->done)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* A blocking call: queued behind outstanding ones when the thread runs. */
static int run(gk_comm *c, gk_comm_call *k, gk_err *err)
{
	if (gk_comm_trace_enter(c, k) == GK_TR_FAULT_SKIP)
		return 0; /* the test hook: as if the caller had not called it */
	if (!c->thread_on)
		return run_now(c, k, err);
	gk_comm_req *r;
	if (start_entered(c, k, &r, err) < 0)
		return -1;
	return gk_comm_wait(r, err);
}

static void fill(gk_comm_call *k, gk_comm_coll coll, const void *send,
		 void *recv, size_t count, gk_dtype dt, gk_comm_op op,
		 const gk_comm_callopts *o)
{
	memset(k, 0, sizeof *k);
	k->coll = coll, k->send = send, k->recv = recv, k->count = count;
	k->dt = dt, k->op = op;
	if (o) {
		k->compress = o->compress;
		k->residual = o->residual;
	}
}

int gk_comm_allreduce(gk_comm *c, const void *send, void *recv, size_t count,
		      gk_dtype dt, gk_comm_op op, const gk_comm_callopts *o,
		      gk_err *err)
{
	gk_comm_call k;
	fill(&k, GK_COMM_ALLREDUCE, send, recv, count, dt, op, o);
	if (check_call(c, &k, o ? o->algo : GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return run(c, &k, err);
}

int gk_comm_iallreduce(gk_comm *c, const void *send, void *recv, size_t count,
		       gk_dtype dt, gk_comm_op op, const gk_comm_callopts *o,
		       gk_comm_req **req, gk_err *err)
{
	gk_comm_call k;
	fill(&k, GK_COMM_ALLREDUCE, send, recv, count, dt, op, o);
	if (check_call(c, &k, o ? o->algo : GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return start(c, &k, req, err);
}

int gk_comm_ireduce(gk_comm *c, const void *send, void *recv, size_t count,
		    gk_dtype dt, gk_comm_op op, int root, const gk_comm_callopts *o,
		    gk_comm_req **req, gk_err *err)
{
	gk_comm_call k;
	fill(&k, GK_COMM_REDUCE, send, recv, count, dt, op, o);
	k.root = root;
	if (check_call(c, &k, o ? o->algo : GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return start(c, &k, req, err);
}

int gk_comm_reduce(gk_comm *c, const void *send, void *recv, size_t count,
		   gk_dtype dt, gk_comm_op op, int root, const gk_comm_callopts *o,
		   gk_err *err)
{
	gk_comm_call k;
	fill(&k, GK_COMM_REDUCE, send, recv, count, dt, op, o);
	k.root = root;
	if (check_call(c, &k, o ? o->algo : GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return run(c, &k, err);
}

int gk_comm_reduce_scatter(gk_comm *c, const void *send, void *recv,
			   size_t recvcount, gk_dtype dt, gk_comm_op op,
			   const gk_comm_callopts *o, gk_err *err)
{
	gk_comm_call k;
	fill(&k, GK_COMM_REDUCE_SCATTER, send, recv, recvcount, dt, op, o);
	if (check_call(c, &k, o ? o->algo : GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return run(c, &k, err);
}

int gk_comm_ireduce_scatterv(gk_comm *c, void *buf, const size_t *displ, gk_dtype dt,
			     gk_comm_op op, const gk_comm_callopts *o, gk_comm_req **req,
			     gk_err *err)
{
	gk_comm_call k;
	if (!displ)
		return gk_errf(err, "reduce-scatter: no pieces");
	for (int i = 0; i < c->world; i++)
		if (displ[i + 1] < displ[i])
			return gk_errf(err, "reduce-scatter: piece %d ends before it starts", i);
	size_t esz = gk_comm_dt_size(dt);
	fill(&k, GK_COMM_REDUCE_SCATTER, buf, (char *)buf + displ[c->rank] * (esz ? esz : 1),
	     displ[c->rank + 1] - displ[c->rank], dt, op, o);
	k.displ = displ;
	if (check_call(c, &k, o ? o->algo : GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	if (displ[c->world] > (size_t)1 << 54)
		return gk_errf(err, "reduce-scatter of %zu elements: too large", displ[c->world]);
	return start(c, &k, req, err);
}

/* displ: world + 1 non-decreasing offsets, not too many elements */
static int check_displ(gk_comm *c, const size_t *displ, const char *what, gk_err *err)
{
	if (!displ)
		return gk_errf(err, "%s: no pieces", what);
	for (int i = 0; i < c->world; i++)
		if (displ[i + 1] < displ[i])
			return gk_errf(err, "%s: piece %d ends before it starts", what, i);
	if (displ[c->world] > (size_t)1 << 54)
		return gk_errf(err, "%s of %zu elements: too large", what, displ[c->world]);
	return 0;
}

int gk_comm_iallgatherv(gk_comm *c, void *buf, const size_t *displ, gk_dtype dt,
			gk_comm_req **req, gk_err *err)
{
	gk_comm_call k;
	if (check_displ(c, displ, "allgather", err) < 0)
		return -1;
	size_t esz = gk_comm_dt_size(dt);
	fill(&k, GK_COMM_ALLGATHER, (char *)buf + displ[c->rank] * (esz ? esz : 1), buf,
	     displ[c->rank + 1] - displ[c->rank], dt, GK_COMM_SUM, NULL);
	k.displ = displ;
	if (check_call(c, &k, GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return start(c, &k, req, err);
}

int gk_comm_allgather(gk_comm *c, const void *send, void *recv,
		      size_t sendcount, gk_dtype dt, const gk_comm_callopts *o,
		      gk_err *err)
{
	gk_comm_call k;
	fill(&k, GK_COMM_ALLGATHER, send, recv, sendcount, dt, GK_COMM_SUM, o);
	if (check_call(c, &k, o ? o->algo : GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return run(c, &k, err);
}

int gk_comm_broadcast(gk_comm *c, const void *send, void *recv, size_t count,
		      gk_dtype dt, int root, gk_err *err)
{
	gk_comm_call k;
	fill(&k, GK_COMM_BROADCAST, send, recv, count, dt, GK_COMM_SUM, NULL);
	k.root = root;
	if (check_call(c, &k, GK_COMM_ALGO_AUTO, err) < 0)
		return -1;
	return run(c, &k, err);
}

int gk_comm_post(gk_comm *c, gk_comm_coll coll, const void *send, void *recv,
		 size_t count, gk_dtype dt, gk_comm_op op, int root,
		 const gk_comm_callopts *o, gk_err *err)
{
	gk_comm_call k;
	fill(&k, coll, send, recv, count, dt, op, o);
	k.root = root;
	gk_comm_algo a = o && coll != GK_COMM_BROADCAST ? o->algo : GK_COMM_ALGO_AUTO;
	if (check_call(c, &k, a, err) < 0)
		return -1;
	if (c->backend != GK_COMM_BACKEND_NCCL)
		return run(c, &k, err);
	if (gk_comm_trace_enter(c, &k) == GK_TR_FAULT_SKIP)
		return 0;
	gk_comm_trace_start(c, &k);
	if (gk_comm_nccl_run(c, &k, NULL, err) < 0) {
		gk_comm_trace_end(c, k.seq, -1, err);
		return -1;
	}
	return 0;
}

int gk_comm_sync(gk_comm *c, gk_err *err)
{
	if (c->backend != GK_COMM_BACKEND_NCCL)
		return 0;
	int rc = gk_comm_nccl_sync(c, err);
	if (rc == 0)
		gk_comm_trace_end_all(c);
	else
		gk_comm_trace_end(c, atomic_load(&c->tr.running), -1, err);
	return rc;
}

int gk_comm_barrier(gk_comm *c, gk_err *err)
{
	gk_comm_call k;
	memset(&k, 0, sizeof k);
	k.coll = COLL_BARRIER;
	return run(c, &k, err);
}

int gk_comm_host_allreduce_f64(gk_comm *c, double *v, size_t n, gk_comm_op op,
			       gk_err *err)
{
	const char *tag = c->tr.tag;
	c->tr.tag = NULL; /* the tag was for this call, whatever it does */
	if (!c->mpi)
		return 0;
	int64_t index = c->tr.index;
	if (c->thread_on) {
		/* Drain the queue first: MPI here is serialized, not concurrent. */
		if (gk_comm_barrier(c, err) < 0)
			return -1;
	}
	gk_comm_call k;
	fill(&k, GK_COMM_ALLREDUCE, v, v, n, GK_DT_F64, op, NULL);
	gk_comm_trace_tag(c, tag, index); /* the caller's, not the barrier's */
	if (gk_comm_trace_enter(c, &k) == GK_TR_FAULT_SKIP)
		return 0;
	gk_comm_trace_start(c, &k);
	int rc = gk_comm_mpi_host_allreduce_f64(c, v, n, op, err);
	gk_comm_trace_end(c, k.seq, rc, err);
	return rc;
}

/* ---- memory ---- */

void *gk_comm_alloc(gk_comm *c, size_t bytes, gk_err *err)
{
	if (c->backend == GK_COMM_BACKEND_NCCL)
		return gk_comm_nccl_alloc(c, bytes, err);
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		gk_errf(err, "comm: out of memory for %zu bytes", bytes);
	return p;
}

void gk_comm_free(gk_comm *c, void *p)
{
	if (c->backend == GK_COMM_BACKEND_NCCL)
		gk_comm_nccl_free(c, p);
	else
		free(p);
}

int gk_comm_to_device(gk_comm *c, void *dst, const void *src, size_t bytes,
		      gk_err *err)
{
	if (c->backend == GK_COMM_BACKEND_NCCL)
		return gk_comm_nccl_copy(c, dst, src, bytes, 1, err);
	if (bytes)
		memcpy(dst, src, bytes);
	return 0;
}

int gk_comm_to_host(gk_comm *c, void *dst, const void *src, size_t bytes,
		    gk_err *err)
{
	if (c->backend == GK_COMM_BACKEND_NCCL)
		return gk_comm_nccl_copy(c, dst, src, bytes, 0, err);
	if (bytes)
		memcpy(dst, src, bytes);
	return 0;
}

/* ---- settings every rank shares ---- */

uint64_t gk_comm_setting_str(const char *s)
{
	return s ? gk_xxh3(s, strlen(s)) ^ 1 : 0;
}

int gk_comm_agree(gk_comm *c, const gk_comm_setting *s, size_t n,
		  const char *why, gk_err *err)
{
	if (c->world == 1 || n == 0)
		return 0;
	double *lo = malloc(4 * n * sizeof *lo), *hi = lo ? lo + 2 * n : NULL;
	if (!lo)
		return gk_errf(err, "comm: out of memory");
	for (size_t i = 0; i < n; i++) {
		lo[2 * i] = hi[2 * i] = (double)(s[i].v >> 32);
		lo[2 * i + 1] = hi[2 * i + 1] = (double)(s[i].v & UINT32_MAX);
	}
	int rc = 0;
	gk_comm_trace_tag(c, "agree", -1);
	if (gk_comm_host_allreduce_f64(c, lo, 2 * n, GK_COMM_MIN, err) < 0 ||
	    (gk_comm_trace_tag(c, "agree", -1),
	     gk_comm_host_allreduce_f64(c, hi, 2 * n, GK_COMM_MAX, err) < 0)) {
		rc = -1;
	} else {
		char which[256] = "";
		size_t len = 0;
		for (size_t i = 0; i < n; i++) {
			int differs = lo[2 * i] != hi[2 * i] || lo[2 * i + 1] != hi[2 * i + 1];
			for (size_t j = 0; differs && j < i; j++) /* each name once */
				differs = strcmp(s[j].name, s[i].name) != 0 ||
					  (lo[2 * j] == hi[2 * j] && lo[2 * j + 1] == hi[2 * j + 1]);
			if (differs)
				len += (size_t)snprintf(which + len,
							len < sizeof which ? sizeof which - len : 0,
							"%s%s", len ? ", " : "", s[i].name);
		}
		if (len)
			rc = gk_errf(err, "options differ between the %d ranks (%s): %s", c->world,
				     which, why);
	}
	free(lo);
	return rc;
}

/* ---- bounds and factors ---- */

/*
 * Compressed ring, one element, n ranks, exact sum s = sum_r x_r and
 * S = sum_r |x_r|.
 *
 * bf16/f16 (unit roundoff u): the partial sum crosses n-1 hops, each a
 * rounding to the wire format followed by an f32 addition, and the final
 * sum is rounded once more for the allgather: at most 2n-1 roundings,
 * each with relative error at most u (u_f32 = 2^-24 < u), applied to
 * partial sums bounded by S. The standard summation analysis (Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2)
 * then gives |result - s| <= gamma(2n-1) S <= gamma(2n) S, with
 * gamma(k) = k u / (1 - k u). Underflow (f16 subnormals) adds at most
 * 2n * 2^-25 absolute, folded in below.
 *
 * int8: quantising a group whose largest magnitude is M errs by at most
 * M/254 per element, plus f32 rounding of x/s and q*s (< 2^-20 M). Let
 * A be the largest S_j in the group and E_k the error after k
 * quantisations; partial sums are at most A + E_k, so
 * E_{k+1} <= E_k + (A + E_k) c with c = 1/254 + 2^-20, and n
 * quantisations give E_n <= ((1 + c)^n - 1) A.
 */
double gk_comm_compress_bound(gk_comm_compress cz, int n, double abs_sum)
{
	double u;
	switch (cz) {
	case GK_COMM_COMPRESS_BF16: u = ldexp(1, -8); break;
	case GK_COMM_COMPRESS_F16: u = ldexp(1, -11); break;
	case GK_COMM_COMPRESS_INT8:
		return (pow(1 + 1.0 / 254 + ldexp(1, -20), n) - 1) * abs_sum;
	default: return 0;
	}
	if (n <= 1)
		return 0;
	double k = 2.0 * n, g = k * u / (1 - k * u);
	double tiny = cz == GK_COMM_COMPRESS_F16 ? 2 * n * ldexp(1, -25) : 0;
	return g * abs_sum + tiny;
}

double gk_comm_busbw_factor(gk_comm_coll coll, int n)
{
	if (n <= 1)
		return coll == GK_COMM_BROADCAST || coll == GK_COMM_REDUCE ? 1 : 0;
	switch (coll) {
	case GK_COMM_ALLREDUCE: return 2.0 * (n - 1) / n;
	case GK_COMM_REDUCE_SCATTER:
	case GK_COMM_ALLGATHER: return (double)(n - 1) / n;
	default: return 1;
	}
}

size_t gk_comm_compress_scratch(gk_comm_compress cz, size_t recvcount)
{
	/* ring_compressed's w1 and w2: the wire bytes of the largest block, + 1 */
	return cz == GK_COMM_COMPRESS_NONE ? 0 : 2 * (gk_comm_wire_bytes(cz, recvcount + 1) + 1);
}
