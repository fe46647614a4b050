/*
 * internal.h - what the files of lib/comm share: the communicator, the
 * backend entry points, the CPU loops over reduce.h. Not installed.
 */
#ifndef GK_COMM_INTERNAL_H
#define GK_COMM_INTERNAL_H

#include <pthread.h>

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
} gk_comm_call;

struct gk_comm_req {
	gk_comm *c;
	gk_comm_call call;
	int done, status;
	gk_err err;
	void *event; /* nccl: the cudaEvent_t recorded after the call */
	struct gk_comm_req *next;
};

struct gk_comm {
	gk_comm_backend backend;
	gk_comm_config cfg;
	int rank, world;
	void *mpi;  /* comm_mpi.c's state */
	void *nccl; /* comm_nccl.c's state */

	/* Progress thread (mpi backend), started by the first non-blocking call. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int thread_ok; /* MPI allows calls from the progress thread */
	int thread_on, stopping;
	gk_comm_req *head, *tail;
};

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

/* ---- mpi backend (comm_mpi.c, or comm_nompi.c without MPI) ---- */
int gk_comm_mpi_open(gk_comm *c, int need_thread, gk_err *err);
void gk_comm_mpi_close(gk_comm *c);
/* c (calloc'ed, cfg set) over the ranks of parent's communicator with this color */
int gk_comm_mpi_split(gk_comm *parent, gk_comm *c, int color, int key, gk_err *err);
int gk_comm_mpi_run(gk_comm *c, const gk_comm_call *k, gk_err *err);
void gk_comm_mpi_abort(gk_comm *c, int code);
int gk_comm_mpi_barrier(gk_comm *c, gk_err *err);
int gk_comm_mpi_host_allreduce_f64(gk_comm *c, double *v, size_t n,
				   gk_comm_op op, gk_err *err);
/* For the nccl bootstrap: broadcast bytes from rank 0 over MPI_COMM_WORLD. */
int gk_comm_mpi_bcast_bytes(gk_comm *c, void *buf, size_t n, gk_err *err);

/* ---- nccl backend (comm_nccl.c, or comm_nonccl.c) ---- */
int gk_comm_nccl_open(gk_comm *c, gk_err *err);
void gk_comm_nccl_close(gk_comm *c);
/* Enqueue on the communicator's stream; event (if not NULL) gets a
 * cudaEvent_t recorded after it. */
int gk_comm_nccl_run(gk_comm *c, const gk_comm_call *k, void **event,
		     gk_err *err);
int gk_comm_nccl_sync(gk_comm *c, gk_err *err);
int gk_comm_nccl_event_query(gk_comm *c, void *event, int *done, gk_err *err);
int gk_comm_nccl_event_wait(gk_comm *c, void *event, gk_err *err);
void *gk_comm_nccl_alloc(gk_comm *c, size_t bytes, gk_err *err);
void gk_comm_nccl_free(gk_comm *c, void *p);
int gk_comm_nccl_copy(gk_comm *c, void *dst, const void *src, size_t bytes,
		      int to_device, gk_err *err);
int gk_comm_nccl_available(void); /* a device and libnccl.so.2 */

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
