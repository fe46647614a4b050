/*
 * p2p.c - point-to-point messages (comm.h, gk_comm_isend): the checks and
 * the flight recorder, whatever the backend; p2p_mpi.c and comm_nccl.c
 * move the bytes.
 *
 * A message is started on the caller's thread, not queued for the
 * progress thread: that thread runs one call to completion before the
 * next, so a send queued there behind a receive that the peer answers
 * only after its own send (a pipeline's stages, each sending forward and
 * receiving backward) would never start. The communicator's queued
 * collectives are waited for first, so calls on one communicator still
 * run in the order they were made.
 */
#include <stdlib.h>

#include "comm/internal.h"

static int check(gk_comm *c, int coll, void *buf, size_t count, gk_dtype dt, int peer,
		 gk_err *err)
{
	const char *what = coll == GK_COMM_CALL_SEND ? "send" : "receive";
	if (!gk_comm_dtype_ok(dt))
		return gk_errf(err, "%s of type '%s': not one of f32 f64 f16 bf16 i32", what,
			       gk_dtype_name(dt));
	if (c->world < 2)
		return gk_errf(err, "%s: a world of one rank has no peer (point-to-point "
			       "messages need two ranks or more, on the mpi or nccl backend)", what);
	if (peer < 0 || peer >= c->world || peer == c->rank)
		return gk_errf(err, "%s with peer %d: not another rank of this world of %d "
			       "(this is rank %d)", what, peer, c->world, c->rank);
	uint64_t bytes;
	if (gk_mul_overflow(count, gk_comm_dt_size(dt), &bytes) < 0 || bytes > (uint64_t)1 << 56)
		return gk_errf(err, "%s of %zu elements: too large", what, count);
	if (count && !buf)
		return gk_errf(err, "%s: NULL buffer", what);
	return 0;
}

/* A request for k, entered in the flight recorder: NULL when out of
 * memory; *skip when the test hook drops the call (the request done). */
static gk_comm_req *enter(gk_comm *c, gk_comm_call *k, int *skip)
{
	gk_comm_req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->c = c;
	*skip = gk_comm_trace_enter(c, k) == GK_TR_FAULT_SKIP;
	if (*skip)
		r->done = 1; /* the test hook: as if the caller had not called it */
	r->call = *k;
	return r;
}

/* this communicator's queued collectives first: calls run in order */
static void drain(gk_comm *c)
{
	pthread_mutex_lock(&c->mu);
	while (c->head)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

static void failed(gk_comm *c, gk_comm_req *r, gk_err *err)
{
	gk_comm_trace_end(c, r->call.seq, -1, &r->err);
	if (err)
		*err = r->err;
	if (r->p2p)
		gk_comm_mpi_p2p_free(r->p2p);
	free(r);
}

static int p2p(gk_comm *c, int coll, void *buf, size_t count, gk_dtype dt, int peer,
	       gk_comm_req **req, gk_err *err)
{
	*req = NULL;
	if (check(c, coll, buf, count, dt, peer, err) < 0)
		return -1;
	gk_comm_call k = {.coll = coll, .count = count, .dt = dt, .root = peer,
			  .algo = GK_COMM_ALGO_NATIVE};
	if (coll == GK_COMM_CALL_SEND)
		k.send = buf;
	else
		k.recv = buf;
	int skip;
	gk_comm_req *r = enter(c, &k, &skip);
	if (!r)
		return gk_errf(err, "comm: out of memory");
	if (skip) {
		*req = r;
		return 0;
	}
	drain(c);
	gk_comm_trace_start(c, &r->call);
	int st = c->backend == GK_COMM_BACKEND_NCCL ?
		 gk_comm_nccl_run(c, &r->call, &r->event, &r->err) :
		 gk_comm_mpi_p2p_start(c, &r->call, &r->p2p, &r->err);
	if (st < 0) {
		failed(c, r, err);
		return -1;
	}
	if (!r->event && !r->p2p)
		r->done = 1; /* nothing in flight (an empty message) */
	*req = r;
	return 0;
}

int gk_comm_isend(gk_comm *c, const void *buf, size_t count, gk_dtype dt, int peer,
		  gk_comm_req **req, gk_err *err)
{
	return p2p(c, GK_COMM_CALL_SEND, (void *)buf, count, dt, peer, req, err);
}

int gk_comm_irecv(gk_comm *c, void *buf, size_t count, gk_dtype dt, int peer,
		  gk_comm_req **req, gk_err *err)
{
	return p2p(c, GK_COMM_CALL_RECV, buf, count, dt, peer, req, err);
}

int gk_comm_sendrecv(gk_comm *c, const void *sbuf, int speer, void *rbuf, int rpeer,
		     size_t count, gk_dtype dt, gk_comm_req **sreq, gk_comm_req **rreq,
		     gk_err *err)
{
	*sreq = *rreq = NULL;
	if (c->backend != GK_COMM_BACKEND_NCCL) {
		if (speer >= 0 && gk_comm_isend(c, sbuf, count, dt, speer, sreq, err) < 0)
			return -1;
		return rpeer >= 0 ? gk_comm_irecv(c, rbuf, count, dt, rpeer, rreq, err) : 0;
	}
	if ((speer >= 0 && check(c, GK_COMM_CALL_SEND, (void *)sbuf, count, dt, speer, err) < 0) ||
	    (rpeer >= 0 && check(c, GK_COMM_CALL_RECV, rbuf, count, dt, rpeer, err) < 0))
		return -1;
	gk_comm_call ks = {.coll = GK_COMM_CALL_SEND, .send = sbuf, .count = count, .dt = dt,
			   .root = speer, .algo = GK_COMM_ALGO_NATIVE};
	gk_comm_call kr = {.coll = GK_COMM_CALL_RECV, .recv = rbuf, .count = count, .dt = dt,
			   .root = rpeer, .algo = GK_COMM_ALGO_NATIVE};
	gk_comm_req *s = NULL, *r = NULL;
	int skip_s = 1, skip_r = 1;
	if ((speer >= 0 && !(s = enter(c, &ks, &skip_s))) ||
	    (rpeer >= 0 && !(r = enter(c, &kr, &skip_r)))) {
		free(s);
		return gk_errf(err, "comm: out of memory");
	}
	drain(c);
	if (!skip_s)
		gk_comm_trace_start(c, &s->call);
	if (!skip_r)
		gk_comm_trace_start(c, &r->call);
	gk_err e = {0};
	if ((!skip_s || !skip_r) &&
	    gk_comm_nccl_pair(c, skip_s ? NULL : &s->call, skip_r ? NULL : &r->call,
			      s ? &s->event : NULL, r ? &r->event : NULL, &e) < 0) {
		if (s)
			s->err = e, failed(c, s, err);
		if (r)
			r->err = e, failed(c, r, err);
		return -1;
	}
	if (s && !s->event)
		s->done = 1;
	if (r && !r->event)
		r->done = 1;
	*sreq = s;
	*rreq = r;
	return 0;
}
