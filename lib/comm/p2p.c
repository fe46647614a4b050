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

static int p2p(gk_comm *c, int coll, void *buf, size_t count, gk_dtype dt, int peer,
	       gk_comm_req **req, gk_err *err)
{
	const char *what = coll == GK_COMM_CALL_SEND ? "send" : "receive";
	*req = NULL;
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

	gk_comm_call k = {.coll = coll, .count = count, .dt = dt, .root = peer,
			  .algo = GK_COMM_ALGO_NATIVE};
	if (coll == GK_COMM_CALL_SEND)
		k.send = buf;
	else
		k.recv = buf;
	gk_comm_req *r = calloc(1, sizeof *r);
	if (!r)
		return gk_errf(err, "comm: out of memory");
	r->c = c;
	if (gk_comm_trace_enter(c, &k) == GK_TR_FAULT_SKIP) {
		/* the test hook: as if the caller had not called it */
		r->done = 1;
		*req = r;
		return 0;
	}
	r->call = k;
	/* this communicator's queued collectives first: calls run in order */
	pthread_mutex_lock(&c->mu);
	while (c->head)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	gk_comm_trace_start(c, &k);
	int st = c->backend == GK_COMM_BACKEND_NCCL ?
		 gk_comm_nccl_run(c, &k, &r->event, &r->err) :
		 gk_comm_mpi_p2p_start(c, &k, &r->p2p, &r->err);
	if (st < 0) {
		gk_comm_trace_end(c, k.seq, -1, &r->err);
		if (err)
			*err = r->err;
		if (r->p2p)
			gk_comm_mpi_p2p_free(r->p2p);
		free(r);
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
