/*
 * internal.h - what the files of lib/comm share: the communicator, the
 * backend entry points, the CPU loops over reduce.h. Not installed.
 */
#ifndef GK_COMM_INTERNAL_H
#define GK_COMM_INTERNAL_H

#include <pthread.h>
#ifndef __cplusplus
#include <stdatomic.h>
#endif

#include "comm/comm.h"

/* One collective call, as queued for the progress thread. */
typedef struct gk_comm_call {
	gk_comm_coll coll;
	const void *send;
	void *recv;
	size_t count; /* allreduce/broadcast: count; rs: recvcount; ag: sendcount */
	gk_dtype dt;
	gk_comm_op op;
	int root;
	gk_comm_algo algo; /* resolved: never AUTO */
	gk_comm_compress compress;
	float *residual;
	const size_t *displ; /* rs of unequal pieces: world + 1 offsets into send
			      * (the caller's, valid until done); NULL: equal */
	uint64_t seq; /* the flight recorder's number (0: not recorded) */
	int fault;    /* GK_TEST_COMM_FAULT's action for this call */
	int queued;   /* started by the progress thread, not when called */
} gk_comm_call;

/*
 * Call codes beyond gk_comm_coll's collectives: a queued barrier
 * (comm.c) and point-to-point messages (p2p.c), whose peer is the call's
 * root field.
 */
#define GK_COMM_CALL_BARRIER ((int)GK_COMM_COLL_COUNT)
#define GK_COMM_CALL_SEND (GK_COMM_CALL_BARRIER + 1)
#define GK_COMM_CALL_RECV (GK_COMM_CALL_BARRIER + 2)
/* "allreduce" ... "barrier" "send" "recv": a call's name in dumps and messages */
const char *gk_comm_call_name(int coll);

struct gk_comm_req {
	gk_comm *c;
	gk_comm_call call;
	int done, status;
	gk_err err;
	void *event; /* nccl: the cudaEvent_t recorded after the call */
	void *p2p;   /* mpi: a send's or receive's MPI requests (p2p_mpi.c) */
	struct gk_comm_req *next;
};

/*
 * The flight recorder (trace.c). One slot per operation, at seq % cap.
 * The caller's thread fills a slot when the operation is called; the
 * thread that runs it (the caller's, or the progress thread) sets the
 * start, end, state and peer. The slot's seq is cleared first and stored
 * last (release), so that a dump, which may interrupt the writer (a
 * signal handler), reads seq, the fields, and seq again, and leaves out
 * a slot whose two reads differ (a seqlock without the retry).
 */
enum { GK_TR_QUEUED = 1, GK_TR_STARTED, GK_TR_DONE, GK_TR_FAILED };
#ifndef __cplusplus /* the .cu files (C++) use none of it; C11's atomics are C's */
#define GK_TR_HOST_LEN 64

typedef struct gk_comm_trace_rec {
	_Atomic uint64_t seq; /* 0: empty or being written */
	uint64_t bytes;       /* per rank: count times the element size */
	const char *tag;      /* static storage, or NULL */
	int64_t index, step;
	int64_t t_enq, t_start, t_end; /* CLOCK_MONOTONIC ns, 0: not yet */
	int32_t root, peer;
	uint8_t coll, dt, op;
	_Atomic uint8_t state;
} gk_comm_trace_rec;

typedef struct gk_comm_trace {
	gk_comm_trace_rec *ring;
	size_t cap;
	uint64_t next;       /* the next operation's seq (the first is 1) */
	_Atomic uint64_t running; /* the operation the backend runs now */
	const char *tag;     /* for the next operation */
	int64_t index, step;
	int id;              /* the communicator's number in the process */
	char *dir, *tmp;     /* the dump's path and temporary path; NULL: never dumped */
	char host[GK_TR_HOST_LEN];
	atomic_flag busy;    /* a dump is being written */
	_Atomic int failed_dumped;
	/* the ranks the watchdog's probe did not hear from (mpi), -1 ended */
	int silent[16];
	char silent_host[16][GK_TR_HOST_LEN];
	/* GK_TEST_COMM_FAULT, up to two: on world rank rank, the n-th call
	 * of coll (counted in seen) gets act (a delay's seconds in delay);
	 * fault_delay: the delay of the call under way */
	struct {
		int act, rank, coll;
		double delay;
		int64_t n, seen;
	} fault[2];
	double fault_delay;
	char error[256];     /* the first failure's message */
} gk_comm_trace;
#endif

struct gk_comm {
	gk_comm_backend backend;
	gk_comm_config cfg;
	int rank, world;
	/*
	 * This process's rank in the world (the communicator gk_comm_open
	 * made), and the world rank of each rank here (world of them), for
	 * messages and dumps: a split's rank numbers are its own, which no
	 * one outside it can find. NULL: the same numbers (the world itself).
	 */
	int world_rank;
	int *wranks;
	void *mpi;  /* comm_mpi.c's state */
	void *nccl; /* comm_nccl.c's state */

	/* Progress thread (mpi backend), started by the first non-blocking call. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int thread_ok; /* MPI allows calls from the progress thread */
	int thread_on, stopping;
	gk_comm_req *head, *tail;

#ifndef __cplusplus
	gk_comm_trace tr; /* last: the C++ view of the struct ends before it */
#endif
};

/* The world rank of rank r of c. */
static inline int gk_comm_wrank(const gk_comm *c, int r)
{
	return c->wranks && r >= 0 && r < c->world ? c->wranks[r] : r;
}

/* ---- the flight recorder (trace.c) ---- */
enum { GK_TR_FAULT_NONE, GK_TR_FAULT_SKIP, GK_TR_FAULT_STOP, GK_TR_FAULT_KILL, GK_TR_FAULT_DELAY,
       GK_TR_FAULT_LATE };
/* At open (after the backend knows rank and world) and close. */
int gk_comm_trace_open(gk_comm *c, gk_err *err);
void gk_comm_trace_close(gk_comm *c);
/*
 * An operation called: fills k->seq (and k->fault). Returns
 * GK_TR_FAULT_SKIP when the test hook says the call is to be skipped
 * (nothing recorded, nothing run), else 0.
 */
int gk_comm_trace_enter(gk_comm *c, gk_comm_call *k);
/* It starts running (and the test hook's stop or kill happens here). */
void gk_comm_trace_start(gk_comm *c, const gk_comm_call *k);
/* It ended with status st (a failure dumps the ring, once). */
void gk_comm_trace_end(gk_comm *c, uint64_t seq, int st, const gk_err *err);
/* Everything started up to now has ended (nccl: the stream was synchronised). */
void gk_comm_trace_end_all(gk_comm *c);
/* The backend waits for rank peer's message (-1: for MPI's own collective). */
void gk_comm_trace_peer(gk_comm *c, int peer);
/* The watchdog's probe heard nothing from these ranks (on these hosts). */
void gk_comm_trace_silent(gk_comm *c, int rank, const char *host);

/* ---- for the benchmark harness (bench.c) ---- */
/* gk_comm_algo_supported for a backend not yet opened. */
int gk_comm_algo_ok(gk_comm_backend b, gk_comm_coll coll, gk_comm_algo algo);
/*
 * Start a collective without waiting for it where the backend queues
 * (nccl: on the communicator's stream); elsewhere it runs to completion.
 * gk_comm_sync waits for everything started.
 */
int gk_comm_post(gk_comm *c, gk_comm_coll coll, const void *send, void *recv,
		 size_t count, gk_dtype dt, gk_comm_op op, int root,
		 const gk_comm_callopts *o, gk_err *err);
int gk_comm_sync(gk_comm *c, gk_err *err);

/* ---- mpi backend (comm_mpi.c and watchdog_mpi.c, or comm_nompi.c without MPI) ---- */
int gk_comm_mpi_open(gk_comm *c, int need_thread, gk_err *err);
void gk_comm_mpi_close(gk_comm *c);
/* c (calloc'ed, cfg set) over the ranks of parent's communicator with this color */
int gk_comm_mpi_split(gk_comm *parent, gk_comm *c, int color, int key, gk_err *err);
int gk_comm_mpi_run(gk_comm *c, const gk_comm_call *k, gk_err *err);
void gk_comm_mpi_abort(gk_comm *c, int code);
/* gk_comm_await_reporter on the mpi backend (watchdog_mpi.c) */
int gk_comm_mpi_await_reporter(gk_comm *c, gk_err *err);
int gk_comm_mpi_barrier(gk_comm *c, gk_err *err);
int gk_comm_mpi_host_allreduce_f64(gk_comm *c, double *v, size_t n,
				   gk_comm_op op, gk_err *err);
/*
 * Point-to-point (p2p_mpi.c): start k (GK_COMM_CALL_SEND or _RECV, peer
 * in k->root) on the caller's thread, *h its MPI requests; wait for them
 * (freeing *h) under the communicator's watchdog, or test them.
 */
int gk_comm_mpi_p2p_start(gk_comm *c, const gk_comm_call *k, void **h, gk_err *err);
int gk_comm_mpi_p2p_wait(gk_comm *c, void *h, gk_err *err);
int gk_comm_mpi_p2p_test(gk_comm *c, void *h, int *done, gk_err *err);
void gk_comm_mpi_p2p_free(void *h);
/* watchdog_mpi.c's wait (gk_comm_mpi_wait) over n MPI_Requests at rq, for p2p_mpi.c */
int gk_comm_mpi_waitall(gk_comm *c, int n, void *rq, const char *what, gk_err *err);
/* ... and the communicator's MPI_Comm, into *out (an MPI_Comm) */
void gk_comm_mpi_handle(gk_comm *c, void *out);
/*
 * For GK_TEST_COMM_FAULT's late: wait until every other rank of c has
 * sent its watchdog's probe (its wait timed out), at most bound seconds;
 * 1 when they have, 0 when the bound passed (or no mpi backend)
 */
int gk_comm_mpi_probed(gk_comm *c, double bound);
/* For the nccl bootstrap: broadcast bytes from rank 0 over MPI_COMM_WORLD. */
int gk_comm_mpi_bcast_bytes(gk_comm *c, void *buf, size_t n, gk_err *err);

/* ---- nccl backend (comm_nccl.c, or comm_nonccl.c) ---- */
int gk_comm_nccl_open(gk_comm *c, gk_err *err);
void gk_comm_nccl_close(gk_comm *c);
/* Enqueue on the communicator's stream; event (if not NULL) gets a
 * cudaEvent_t recorded after it. */
int gk_comm_nccl_run(gk_comm *c, const gk_comm_call *k, void **event,
		     gk_err *err);
/* p2p.c's send and receive (either NULL) in one group, an event after it for each */
int gk_comm_nccl_pair(gk_comm *c, const gk_comm_call *s, const gk_comm_call *r, void **sev,
		      void **rev, gk_err *err);
int gk_comm_nccl_sync(gk_comm *c, gk_err *err);
int gk_comm_nccl_event_query(gk_comm *c, void *event, int *done, gk_err *err);
int gk_comm_nccl_event_wait(gk_comm *c, void *event, gk_err *err);
/* the caller's stream waits for the event on the device (gk_comm_stream_after) */
int gk_comm_nccl_event_order(gk_comm *c, void *event, gk_err *err);
void *gk_comm_nccl_alloc(gk_comm *c, size_t bytes, gk_err *err);
void gk_comm_nccl_free(gk_comm *c, void *p);
int gk_comm_nccl_copy(gk_comm *c, void *dst, const void *src, size_t bytes,
		      int to_device, gk_err *err);
int gk_comm_nccl_available(void); /* a device and libnccl.so.2 */
/* 1 when AVG runs as NCCL's ncclAvg (built with NCCL 2.10 or later): the
 * floating types multiplied by 1/world before the sum (comm.h) */
int gk_comm_nccl_native_avg(void);
/*
 * The communicator's own work on its stream, queued after its collectives
 * (device memory): dst = src (add 0) or dst += src (add 1), n floats;
 * bytes of zeros; AVG's division of n floats by the world. fence: the
 * caller's stream (gk_comm_set_stream) waits for all of it, on the device.
 */
int gk_comm_nccl_accum(gk_comm *c, float *dst, const float *src, size_t n, int add,
		       gk_err *err);
int gk_comm_nccl_zero(gk_comm *c, void *buf, size_t bytes, gk_err *err);
int gk_comm_nccl_avg(gk_comm *c, float *buf, size_t n, gk_err *err);
int gk_comm_nccl_fence(gk_comm *c, gk_err *err);
/*
 * on 1: that own work runs on the caller's stream instead, in its order
 * (the caller has waited on the host for the collectives it reads);
 * fence then has nothing of it to wait for.
 */
void gk_comm_nccl_own_on_user(gk_comm *c, int on);

/* ---- CPU loops over reduce.h (kernels.c) ---- */
size_t gk_comm_dt_size(gk_dtype dt);
/* dst[i] = dst[i] op src[i] */
void gk_comm_reduce_cpu(void *dst, const void *src, size_t n, gk_dtype dt,
			gk_comm_op op);
/* dst[i] = a[i] op b[i] (dst may be a) */
void gk_comm_reduce3_cpu(void *dst, const void *a, const void *b, size_t n,
			 gk_dtype dt, gk_comm_op op);
/* buf[i] = buf[i] / world */
void gk_comm_avg_cpu(void *buf, size_t n, gk_dtype dt, int world);
/* Wire formats of compressed allreduce: bytes for n floats. */
size_t gk_comm_wire_bytes(gk_comm_compress cz, size_t n);
/*
 * Pack n floats to the wire; when err_out is not NULL, store there the
 * error of the packing (x - unpacked(x)) for error feedback.
 */
void gk_comm_pack(void *wire, const float *x, size_t n, gk_comm_compress cz,
		  float *err_out);
/* dst[i] = unpacked[i] (add 0) or dst[i] += unpacked[i] (add 1). */
void gk_comm_unpack(float *dst, const void *wire, size_t n,
		    gk_comm_compress cz, int add);

/* ---- CUDA kernels (reduce.cu); only in CUDA builds ---- */
int gk_comm_cuda_reduce(void *dst, const void *src, size_t n, gk_dtype dt,
			gk_comm_op op, void *stream, gk_err *err);
/* buf[i] = buf[i] / world, as gk_comm_avg_cpu (AVG on nccl: SUM, then this) */
int gk_comm_cuda_avg(void *buf, size_t n, gk_dtype dt, int world, void *stream,
		     gk_err *err);
/* err_out as gk_comm_pack's (device memory, or NULL) */
int gk_comm_cuda_pack(void *wire, const float *x, size_t n,
		      gk_comm_compress cz, float *err_out, void *stream,
		      gk_err *err);
int gk_comm_cuda_unpack(float *dst, const void *wire, size_t n,
			gk_comm_compress cz, int add, void *stream,
			gk_err *err);
/* x[i] += residual[i]; residual[i] = 0 (error feedback, before packing) */
int gk_comm_cuda_absorb(float *x, float *residual, size_t n, void *stream,
			gk_err *err);

#endif
