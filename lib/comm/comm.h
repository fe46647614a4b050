/*
 * comm.h - gpukit's communication layer (prefix gk_comm_).
 *
 * One API over three backends:
 *   self  a world of one process; no MPI needed (collectives are copies)
 *   mpi   host memory over Open MPI; ranks come from mpirun or srun
 *   nccl  device memory over NCCL, whose communicator is bootstrapped by
 *         broadcasting an ncclUniqueId over MPI; libnccl.so.2 is loaded
 *         with dlopen when the communicator opens, so a binary built with
 *         NCCL still runs where it is absent
 *
 * Collectives follow NCCL's shapes: allreduce(count), reduce-scatter
 * (recvcount per rank, send holds world*recvcount), allgather (sendcount
 * per rank), broadcast(count, root), barrier. send == recv means in place
 * (for reduce-scatter and allgather, in place means recv (or send) is the
 * rank's own slice of the big buffer, as in NCCL).
 *
 * Element types F32 F64 F16 BF16 I32. F16 and BF16 are reduced in f32 and
 * rounded once per pairwise reduction. AVG divides the sum by the world
 * size once at the end (integer division toward zero for I32) on the
 * host backends. nccl runs NCCL's ncclAvg (NCCL 2.10 and later; no
 * division pass behind the collective), which divides I32 the same way
 * but multiplies each floating input by 1/n rounded to its type before
 * the sum: the same bits where n is a power of two (outside the
 * subnormals), else within (n + 2) epsilons of the type times the mean
 * of |x| of the mean. Built against older headers, and for compressed
 * collectives (which sum in their own ring), it runs ncclSum and then
 * one division kernel, the same reduce.h function as the CPU path. The
 * ring and Rabenseifner allreduces divide each
 * rank's block as its last reduction lands, before the allgather: the
 * same bits as dividing after it, on an n-th of the data, while it is in
 * cache (16 MiB in place on 2 ranks: 2.77 -> 2.37 ms).
 *
 * Every result is bitwise identical on every rank (the algorithms reduce
 * in the same order everywhere, and IEEE addition is commutative), which
 * data-parallel training needs to keep replicas in step.
 *
 * Errors: functions return 0 or -1 with a message in err. A failure inside
 * a collective leaves the communicator unusable (the other ranks may be
 * waiting); the caller reports and exits, as with MPI's default handler.
 * On nccl, waiting polls ncclCommGetAsyncError: an error reported by NCCL
 * (a peer died, a network failure), or no progress within the config's
 * timeout, aborts the communicator (ncclCommAbort) and fails the call with
 * a message naming the operation, instead of hanging. On mpi every
 * message and collective is started non-blocking and waited on with the
 * same deadline (MPI_Testall polling), so a rank that stops making
 * progress fails the waiting ranks' call with "OP: no progress for N s:
 * rank R (on HOST) does not answer (...)": each rank that times out
 * sends every other rank a small message on a communicator of its own
 * and listens for a second; the ranks that stay silent are named, with
 * the hosts gathered when the communicator opened (the peer of the
 * stalled exchange would be wrong: in a ring it is often a live rank
 * that itself waits). Every later wait on that communicator then fails
 * at once (the calls queued behind it do not each wait out the deadline
 * again), so a job ends about one timeout, plus that second, after the
 * stall.
 *
 * Streams (nccl). Device buffers are written by kernels and copies on the
 * caller's CUDA stream; NCCL runs on the communicator's own stream. The
 * contract: every collective (blocking or not, and each bucket that
 * gk_comm_grads_ready starts) first makes the communicator's stream wait
 * for everything enqueued on the caller's stream up to the call (an event
 * recorded there, cudaStreamWaitEvent), so it never reads inputs before
 * the kernel or copy producing them has finished. The caller's stream is
 * the legacy default stream until gk_comm_set_stream names another.
 * gk_comm_to_device and gk_comm_to_host copy on the caller's stream and
 * return when the copy is done. Results are ready for any stream once the
 * blocking call returns, or gk_comm_wait has returned for a request.
 */
#ifndef GK_COMM_H
#define GK_COMM_H

#include "core/core.h"

typedef enum gk_comm_op {
	GK_COMM_SUM,
	GK_COMM_PROD,
	GK_COMM_MAX,
	GK_COMM_MIN,
	GK_COMM_AVG,
	GK_COMM_OP_COUNT
} gk_comm_op;

typedef enum gk_comm_backend {
	GK_COMM_BACKEND_AUTO, /* see gk_comm_backend_choose (nccl only when asked: device memory) */
	GK_COMM_BACKEND_SELF,
	GK_COMM_BACKEND_MPI,
	GK_COMM_BACKEND_NCCL,
	GK_COMM_BACKEND_COUNT
} gk_comm_backend;

/*
 * Allreduce algorithms over MPI point-to-point (the mpi backend), chosen
 * per call. The nccl backend runs NCCL's own (native) only.
 *   ring          reduce-scatter then allgather around a ring, each block
 *                 cut into segments so reduction overlaps transfer;
 *                 2(n-1)/n of the data on the wire: bandwidth-optimal
 *   rd            recursive doubling: log2(n) full exchanges; latency-optimal
 *   rabenseifner  recursive halving reduce-scatter + recursive doubling
 *                 allgather: log2(n) steps and 2(n-1)/n data
 *   native        MPI_Allreduce (the MPI library's own choice)
 *   auto          rd below 64 KiB, rabenseifner above, ring when the world
 *                 is not a power of two and the message is large
 * Non-power-of-two worlds (rd, rabenseifner): the first 2r ranks, r = n -
 * 2^floor(log2 n), pair up and the even one folds its data into the odd
 * one before and receives the result after (Rabenseifner 2004, section 3).
 */
typedef enum gk_comm_algo {
	GK_COMM_ALGO_AUTO,
	GK_COMM_ALGO_NATIVE,
	GK_COMM_ALGO_RING,
	GK_COMM_ALGO_RD,
	GK_COMM_ALGO_RABENSEIFNER,
	GK_COMM_ALGO_COUNT
} gk_comm_algo;

/*
 * Compressed allreduce and reduce-scatter (F32 data, SUM or AVG, ring
 * algorithm): partial sums travel in a narrow format and are accumulated
 * in f32. A reduce-scatter is the allreduce's first half: each rank's
 * block is its f32 sum of the others' packed partial sums and its own
 * unpacked values, so its error is within the allreduce's bound.
 *   bf16, f16  round to nearest even on each of the n-1 reduce-scatter hops
 *              and once for the allgather
 *   int8       groups of GK_COMM_INT8_GROUP elements share an f32 scale
 *              max|x|/127; elements are rounded to the nearest step
 * Error bounds (n ranks, S_i = sum over ranks of |x_r,i|), derived in
 * comm.c above gk_comm_compress_bound:
 *   bf16 (u = 2^-8), f16 (u = 2^-11):  |err_i| <= gamma(2n) S_i,
 *       gamma(k) = k u / (1 - k u); f16 also needs |partial sums| < 65504
 *   int8:  |err_i| <= ((1 + 1/254 + 2^-20)^n - 1) A_g, where A_g is the
 *       largest S_j over the element's group g
 * On nccl the same ring runs on the device: packing and unpacking are
 * kernels (the CPU path's reduce.h functions, bit for bit) and the packed
 * blocks travel by ncclSend/ncclRecv, then one ncclAllGather.
 * With a residual buffer (error feedback), each rank adds its stored
 * quantisation error to its input and keeps the new one; the sum of the
 * results over T calls then differs from the exact sum by one call's
 * error, not T calls' (it telescopes).
 */
typedef enum gk_comm_compress {
	GK_COMM_COMPRESS_NONE,
	GK_COMM_COMPRESS_BF16,
	GK_COMM_COMPRESS_F16,
	GK_COMM_COMPRESS_INT8,
	GK_COMM_COMPRESS_COUNT
} gk_comm_compress;

#define GK_COMM_INT8_GROUP 256

typedef enum gk_comm_coll {
	GK_COMM_ALLREDUCE,
	GK_COMM_REDUCE_SCATTER,
	GK_COMM_ALLGATHER,
	GK_COMM_BROADCAST,
	GK_COMM_REDUCE, /* to one rank, the root; the others' recv untouched */
	GK_COMM_COLL_COUNT
} gk_comm_coll;

/*
 * The NCCL gpukit was built with (nccl.h's NCCL_VERSION_CODE, 22703 =
 * 2.27.3) and the libnccl.so.2 this process would load (ncclGetVersion);
 * each 0 when unknown. Returns -1 when either is unknown (built without
 * NCCL, no library). The backend needs 2.14 or later, and a library older
 * than the headers may lack what they describe: tools say both, as
 * nccl-tests does ("nccl-headers=22703 nccl-library=22703").
 */
int gk_comm_nccl_versions(int *headers, int *library);

/* Names as the command line spells them; parsers return -1 when unknown. */
const char *gk_comm_op_name(gk_comm_op op);        /* "sum" ... "avg" */
const char *gk_comm_backend_name(gk_comm_backend b); /* "self" "mpi" "nccl" */
const char *gk_comm_algo_name(gk_comm_algo a);     /* "ring" "rd" ... */
const char *gk_comm_compress_name(gk_comm_compress c); /* "none" "bf16" ... */
const char *gk_comm_coll_name(gk_comm_coll c);     /* "allreduce" ... */
int gk_comm_op_parse(const char *s);
int gk_comm_backend_parse(const char *s);
int gk_comm_algo_parse(const char *s); /* also "recursive-doubling" */
int gk_comm_compress_parse(const char *s);
int gk_comm_coll_parse(const char *s); /* also "all_reduce" "reducescatter" ... */
/* 1 when the dtype is one the collectives take (F32 F64 F16 BF16 I32). */
int gk_comm_dtype_ok(gk_dtype dt);

typedef struct gk_comm gk_comm;

typedef struct gk_comm_config {
	gk_comm_backend backend;
	gk_comm_algo algo;  /* default for calls that do not choose */
	size_t segment;     /* ring pipeline segment in bytes (0: 1 MiB) */
	int device;         /* nccl: CUDA device, -1 for the local rank */
	double timeout;     /* seconds a wait may go without completion
			     * before the call fails (0: the default,
			     * negative: wait forever). nccl then aborts the
			     * communicator; mpi fails the call with
			     * "OP: no progress for N s: rank R (on HOST)
			     * does not answer (...)" and the caller ends
			     * the job with gk_comm_abort */
	size_t trace_size;  /* the flight recorder's ring: the last this many
			     * operations (0: GK_COMM_TRACE_DEFAULT) */
	const char *trace_dir; /* where the recorder is dumped (copied at
				* open); NULL: never dumped */
} gk_comm_config;

/* PyTorch's default timeout for NCCL process groups, in seconds. */
#define GK_COMM_DEFAULT_TIMEOUT 600.0

/*
 * Which backend `want` means for a process placed as ri says (from
 * gk_rank_discover, the one reader of the launcher's environment):
 *   auto under mpirun or srun (ri->mpi)        mpi
 *   auto without a launcher, or a world of 1   self
 *   auto under torchrun with world > 1         error: torchrun sets no
 *       MPI environment, so MPI would start each process as a world of
 *       one and every rank would silently run alone
 *   self under a launcher with world > 1       error: each rank would run
 *       alone while any rank that opened MPI waited for the others
 *   self, mpi, nccl                            as asked
 * Returns 0 with *out set, or -1 with a message.
 */
int gk_comm_backend_choose(gk_comm_backend want, const gk_rank_info *ri,
			   gk_comm_backend *out, gk_err *err);

/*
 * Open the world. mpi and nccl call MPI_Init_thread (MPI_THREAD_SERIALIZED)
 * unless MPI is already initialised, in which case the caller keeps
 * ownership and gk_comm_close does not finalise. cfg NULL: all defaults.
 * Every MPI call lib/comm makes, from any thread and on any communicator,
 * is made under one lock of the process (comm_mpi.h), so communicators
 * may run their calls from different threads at once (a progress
 * thread's buckets beside a split's collectives on the calling thread);
 * a caller that makes MPI calls of its own beside them needs
 * MPI_THREAD_MULTIPLE, and must initialise MPI itself.
 * Fails with a clear message when the backend was not built in, when
 * libnccl.so.2 or a GPU is missing, or when MPI cannot start.
 *
 * The contract with the launcher: under any launcher, gk_comm_rank and
 * gk_comm_world equal gk_rank_discover's rank and world (open fails when
 * MPI's MPI_COMM_WORLD differs, as with srun lacking a PMI plugin MPI
 * can use), so a program takes rank, local rank and node from
 * gk_rank_discover and the same rank from the communicator. The nccl
 * backend picks CUDA device local_rank % devices unless cfg->device says.
 */
int gk_comm_open(gk_comm **out, const gk_comm_config *cfg, gk_err *err);
/*
 * A communicator over the ranks of parent that pass the same color (>= 0),
 * ranked by key (ties by parent's rank), as MPI_Comm_split: a process grid
 * splits its world once per dimension. Collective over parent: every rank
 * calls it, in the same order. The new communicator has parent's backend
 * and settings (self stays a world of one); gk_comm_close releases it and
 * leaves MPI to the parent. nccl communicators are refused: split the host
 * one and open nccl on each part.
 */
int gk_comm_split(gk_comm *parent, int color, int key, gk_comm **out, gk_err *err);
/* Waits for outstanding requests, stops the progress thread, finalises. */
void gk_comm_close(gk_comm *c);
/*
 * nccl: finish outstanding work and tear down the NCCL communicator
 * (ncclCommFinalize, then ncclCommDestroy), reporting a failure (and
 * aborting the communicator) instead of ignoring it; gk_comm_close then
 * only releases MPI. Other backends: nothing to do, 0. A tool calls it
 * before gk_comm_close when it wants teardown errors in its exit status.
 */
int gk_comm_finalize(gk_comm *c, gk_err *err);
/*
 * nccl: the caller's CUDA stream (a cudaStream_t; NULL is the legacy
 * default stream) for the stream contract above. Other backends take
 * host memory and ignore it.
 */
int gk_comm_set_stream(gk_comm *c, void *stream, gk_err *err);

/*
 * After a failure on one rank the others may wait forever in a collective:
 * a tool that is about to exit 1 calls this to end the whole job
 * (MPI_Abort with code) when the world has more than one rank, like
 * MPI's default error handler. Returns only for a world of one.
 */
void gk_comm_abort(gk_comm *c, int code);
/*
 * After a wait of this process timed out (the mpi backend's watchdog):
 * the world rank that says why for the job, the lowest of the ranks that
 * survived the stall; -1 before any. The others fail without a word, and
 * their gk_comm_abort leaves the job's end to the reporter's.
 */
int gk_comm_stall_reporter(void);
/*
 * On a rank that leaves a stall's message to another (gk_comm_stall_reporter
 * names a rank other than this one), before gk_comm_abort: wait for the
 * reporter's abort to end the job (this rank's first could have the
 * launcher kill the reporter before it has said why), at most 10 s, far
 * above the moments that takes on a loaded host; the flight recorder's
 * dump, when there is one, is written first. Returns 0 at once when
 * there is nothing to wait for (no stall, this rank is the reporter, a
 * world of one, another backend). When the bound passes the reporter
 * died or hangs, and the job would end with the launcher's words alone:
 * -1, with err naming the rank this one waited for and saying that it
 * aborts the job; the caller says so, then calls gk_comm_abort, which
 * then aborts at once (without this call it waits the same bound, silent).
 */
int gk_comm_await_reporter(gk_comm *c, gk_err *err);

int gk_comm_rank(const gk_comm *c);
int gk_comm_world(const gk_comm *c);
/*
 * The rank in the world (gk_comm_open's communicator) of rank r of c, or
 * of this process when r < 0: a split numbers its ranks 0.. of its own,
 * and every message and dump names world ranks.
 */
int gk_comm_world_rank(const gk_comm *c, int r);
gk_comm_backend gk_comm_backend_of(const gk_comm *c);
/* 1 when buffers are device memory (nccl), 0 for host memory. */
int gk_comm_on_device(const gk_comm *c);

/* Per-call choices beyond the data; NULL means the defaults. */
typedef struct gk_comm_callopts {
	gk_comm_algo algo;         /* GK_COMM_ALGO_AUTO: the communicator's */
	gk_comm_compress compress; /* allreduce and reduce-scatter */
	float *residual;           /* error feedback: count floats (reduce-
				    * scatter: world * recvcount) owned by the
				    * caller (device memory on nccl), zeroed
				    * before first use; NULL: none */
} gk_comm_callopts;

int gk_comm_allreduce(gk_comm *c, const void *send, void *recv, size_t count,
		      gk_dtype dt, gk_comm_op op, const gk_comm_callopts *o,
		      gk_err *err);
/*
 * Scratch a compressed collective keeps on its communicator once it has
 * run (host memory on mpi, device memory on nccl): two wire buffers of a
 * ring block, for a reduce-scatter of recvcount floats per rank, or of
 * pieces none longer than recvcount (mpi's allreduce too, recvcount =
 * count / world; nccl's keeps world more blocks for its allgather). For
 * callers that account for the memory they hold.
 */
size_t gk_comm_compress_scratch(gk_comm_compress cz, size_t recvcount);
int gk_comm_reduce_scatter(gk_comm *c, const void *send, void *recv,
			   size_t recvcount, gk_dtype dt, gk_comm_op op,
			   const gk_comm_callopts *o, gk_err *err);
int gk_comm_allgather(gk_comm *c, const void *send, void *recv,
		      size_t sendcount, gk_dtype dt, const gk_comm_callopts *o,
		      gk_err *err);
int gk_comm_broadcast(gk_comm *c, const void *send, void *recv, size_t count,
		      gk_dtype dt, int root, gk_err *err);
/* recv (at root only; send == recv there reduces in place) = op of every
 * rank's send; AVG divides once at the root */
int gk_comm_reduce(gk_comm *c, const void *send, void *recv, size_t count,
		   gk_dtype dt, gk_comm_op op, int root, const gk_comm_callopts *o,
		   gk_err *err);
int gk_comm_barrier(gk_comm *c, gk_err *err);

/*
 * Non-blocking allreduce for overlapping gradient buckets with backward:
 *
 *   for each bucket b, as backward finishes it:
 *       gk_comm_iallreduce(c, g[b], g[b], n[b], GK_DT_F32, GK_COMM_AVG,
 *                          NULL, &req[b], &err);
 *   for each bucket b: gk_comm_wait(req[b], &err);   then step the optimizer
 *
 * Any number may be outstanding; they run in the order started (the same
 * order on every rank, which collectives require). The buffers must stay
 * untouched until the request completes. On mpi a progress thread runs
 * them; on nccl they are queued on the communicator's stream; on self
 * they complete at once. Blocking calls made while requests are
 * outstanding queue behind them.
 */
typedef struct gk_comm_req gk_comm_req;
int gk_comm_iallreduce(gk_comm *c, const void *send, void *recv, size_t count,
		       gk_dtype dt, gk_comm_op op, const gk_comm_callopts *o,
		       gk_comm_req **req, gk_err *err);
int gk_comm_ireduce(gk_comm *c, const void *send, void *recv, size_t count,
		    gk_dtype dt, gk_comm_op op, int root, const gk_comm_callopts *o,
		    gk_comm_req **req, gk_err *err);
/*
 * Non-blocking reduce-scatter of unequal pieces, in place (MPI's
 * MPI_Reduce_scatter with its recvcounts): buf holds displ[world]
 * elements, rank q's piece [displ[q], displ[q + 1]); when the request
 * completes, this rank's piece holds op over every rank's piece (AVG
 * divides once), and the other pieces are left undefined. One collective
 * for a range whose owners hold unequal parts of it (ZeRO-2's gradient
 * buckets), instead of one reduce per owner. displ (world + 1 offsets,
 * non-decreasing) and buf stay the caller's, untouched until the request
 * completes. mpi: the ring, each piece one of its blocks (empty pieces
 * send nothing); self: nothing to do; nccl: one ncclReduce rooted at
 * each owner of a non-empty piece, in place, in one group (NCCL's
 * reduce-scatter takes equal counts; comm_nccl.c says why not padding).
 * o (may be NULL): o->compress packs the ring's partial sums as the
 * equal blocks' compressed reduce-scatter does, with error feedback in
 * o->residual (displ[world] floats, indexed as buf): on nccl that ring
 * (ncclSend/ncclRecv in a group each step, the packing kernels between)
 * instead of the group of reduces, an element summed along the same path
 * and packed alike on either backend.
 */
int gk_comm_ireduce_scatterv(gk_comm *c, void *buf, const size_t *displ, gk_dtype dt,
			     gk_comm_op op, const gk_comm_callopts *o, gk_comm_req **req,
			     gk_err *err);
/*
 * Non-blocking all-gather of unequal pieces, in place (MPI's
 * MPI_Allgatherv with the pieces where they belong): buf holds
 * displ[world] elements, rank q's piece [displ[q], displ[q + 1]) its own
 * input; when the request completes every rank holds every piece. The
 * sibling of gk_comm_ireduce_scatterv: ZeRO-3's parameters, a range whose
 * owners hold unequal parts of it, gathered in one collective. displ and
 * buf stay the caller's, untouched (but for this rank's piece, read) until
 * the request completes. mpi: the ring, each piece one of its blocks
 * (empty pieces send nothing); self: nothing to do; nccl: one
 * ncclBroadcast rooted at each owner of a non-empty piece, in place, in
 * one group.
 */
int gk_comm_iallgatherv(gk_comm *c, void *buf, const size_t *displ, gk_dtype dt,
			gk_comm_req **req, gk_err *err);
/*
 * Point-to-point messages (a pipeline's activations and their gradients
 * between stages): send count elements of buf to rank peer of c, or
 * receive them from it, without waiting; gk_comm_wait (or gk_comm_test)
 * completes the request, and buf stays untouched until then. A receive
 * matches the peer's send of the same bytes; messages between two ranks
 * arrive in the order they were sent. They start at once on the caller's
 * thread (after this communicator's queued collectives), so a rank may
 * have a send and a receive outstanding with the same peer, each
 * waiting for the other's, without deadlock. mpi: MPI_Isend and
 * MPI_Irecv, waited for under the communicator's timeout (a peer that
 * stopped fails the wait, naming the ranks that do not answer); nccl:
 * ncclSend and ncclRecv on the communicator's stream (device memory, the
 * stream contract above); self (a world of one): refused, there is no
 * peer. The flight recorder shows each as "send" or "recv" with its peer.
 * On mpi another communicator's non-blocking collectives may be in
 * flight meanwhile on its progress thread (a pipeline's messages beside
 * ZeRO-3's gathers): every MPI call is made under the process's one lock
 * (comm_mpi.h), and no wait holds it while it waits.
 */
int gk_comm_isend(gk_comm *c, const void *buf, size_t count, gk_dtype dt, int peer,
		  gk_comm_req **req, gk_err *err);
/*
 * A send and a receive started together (either may be left out: peer
 * -1), each with its own request (*sreq, *rreq; NULL for the one left
 * out). nccl: ncclSend and ncclRecv in one group (ncclGroupStart ..
 * ncclGroupEnd) on the communicator's stream, so that two ranks each
 * sending to the other before receiving, or a chain of them (a pipeline's
 * stages, each sending forward while receiving backward), cannot wait for
 * each other on the stream; mpi: as gk_comm_isend and gk_comm_irecv.
 */
int gk_comm_sendrecv(gk_comm *c, const void *sbuf, int speer, void *rbuf, int rpeer,
		     size_t count, gk_dtype dt, gk_comm_req **sreq, gk_comm_req **rreq,
		     gk_err *err);
/*
 * A device communicator over the ranks of host (an mpi communicator, a
 * process grid's group from gk_comm_split): the nccl backend on cfg's
 * device, bootstrapped over host's group, with cfg's other settings.
 * Collective over host. A grid's dimensions each get one, split once.
 */
int gk_comm_open_device(gk_comm *host, const gk_comm_config *cfg, gk_comm **out, gk_err *err);
int gk_comm_irecv(gk_comm *c, void *buf, size_t count, gk_dtype dt, int peer,
		  gk_comm_req **req, gk_err *err);
/* *done = 1 when complete (the request stays valid until waited on). */
int gk_comm_test(gk_comm_req *r, int *done, gk_err *err);
/* Wait for completion and free the request; returns the operation's status. */
int gk_comm_wait(gk_comm_req *r, gk_err *err);
/*
 * nccl: what is enqueued on the caller's stream (gk_comm_set_stream) from
 * now on runs after r's operation, on the device (the stream waits for the
 * event recorded after it, cudaStreamWaitEvent); the host does not wait.
 * r stays the caller's, to gk_comm_wait still: that wait, which watches
 * NCCL's errors and the timeout, is where a failed or stalled operation is
 * found, so the caller waits for r on the host before it waits for its
 * own stream (which a stalled r holds where no watchdog looks). Other
 * backends have no streams: the host waits for r's operation here, and r
 * still wants gk_comm_wait for its status; not for MPI's messages.
 */
int gk_comm_stream_after(gk_comm_req *r, gk_err *err);

/*
 * Gradient buckets for a data-parallel trainer: the flat gradient buffer
 * (n floats, in place) is cut into buckets of about bucket_bytes from the
 * end, because backward produces the last layers' gradients first. As
 * backward finishes everything from element `off` to the end, the trainer
 * calls gk_comm_grads_ready(g, off): every bucket now complete starts its
 * allreduce (AVG) at once, overlapping the rest of backward. finish starts
 * what is left and waits for all; the object is then ready for the next
 * step. With o->compress set, each bucket keeps an error-feedback residual
 * across steps: o->residual, the caller's (at least n floats, indexed as
 * grad, zeroed, in the communicator's memory), or when NULL n floats made
 * here. bucket_bytes 0: 25 MiB, as
 * PyTorch DDP's default. On nccl grad is device memory, and ready may be
 * called as soon as the kernels finishing the range are queued on the
 * caller's stream (gk_comm_set_stream): each bucket waits for them on the
 * device, by the stream contract above, not on the host.
 *
 *   gk_comm_grads_new(&g, comm, grad, n, 0, NULL, &err);
 *   each step: backward, calling gk_comm_grads_ready(g, layer_offset, &err)
 *              after each layer; gk_comm_grads_finish(g, &err); optimizer
 */
typedef struct gk_comm_grads gk_comm_grads;
int gk_comm_grads_new(gk_comm_grads **out, gk_comm *c, float *grad, size_t n,
		      size_t bucket_bytes, const gk_comm_callopts *o,
		      gk_err *err);
/*
 * ZeRO-1 (set before the first step): instead of every rank getting the
 * whole average, rank r gets the average of the elements it owns, [r *
 * per, (r + 1) * per), at dst + the same offset (dst holds world * per
 * floats, device memory on nccl); grad itself is left as backward made
 * it. Each bucket is reduced to the ranks owning its elements (one reduce
 * per owner it spans), so the reduce-scatter overlaps backward as the
 * allreduce does. On a device communicator with dst == grad (in place),
 * each bucket is instead one gk_comm_ireduce_scatterv of its owners'
 * pieces: one NCCL operation (a group of those reduces, or one
 * ncclReduceScatter where the pieces are equal), one request, and grad
 * is left undefined outside this rank's pieces. Not with compression.
 */
int gk_comm_grads_shard(gk_comm_grads *g, float *dst, size_t per, gk_err *err);
/*
 * ZeRO-2 (set before the first step): rank r owns [r * per, (r + 1) *
 * per) of the gradients and keeps only that, in shard (per floats, its
 * own buffer, not grad's). Each bucket, as
 * backward completes it, is one reduce-scatter of unequal pieces
 * (gk_comm_ireduce_scatterv, SUM) in place in grad; when it completes,
 * this rank's piece is copied into the shard (the first micro-step of a
 * step) or added to it (the others: accumulation sums into the shard),
 * and done(lo, hi, ctx) is told that grad's [lo, hi) is no longer needed
 * (the caller may release its memory, which must read as zeros after).
 * Bucket boundaries are rounded to multiples of align elements (the
 * caller's page, counted from grad, which must be aligned to one) so a
 * bucket's range is whole pages. At most depth buckets are in flight
 * (their gradients in memory); a new one first retires the oldest; depth
 * 0 waits for each as soon as it starts (no overlap with backward). The
 * finish of a step's last micro-step divides the shard by the world
 * once (AVG; gk_comm_grads_micro says which micro-step runs). Compressed
 * (gk_comm_grads_new's o->compress), each bucket's reduce-scatter is the
 * compressed ring of its pieces with the residual's [lo, hi) as its error
 * feedback (an element is summed along the path, and packed as, the
 * whole buffer's compressed reduce-scatter sums it: same bits for bf16
 * and f16), on every backend. On nccl, grad and shard are device
 * memory, and the copy or sum into the shard, AVG's division and the
 * zeroing of each retired bucket's range of grad (device memory has no
 * pages to give back: done is still told, after) run on the
 * communicator's stream behind each bucket's reduction, with no wait on
 * the host until finish, which makes the caller's stream wait for them
 * before it returns.
 */
typedef void (*gk_comm_grads_done_fn)(size_t lo, size_t hi, void *ctx);
int gk_comm_grads_partition(gk_comm_grads *g, float *shard, size_t per, size_t align,
			    size_t depth, gk_comm_grads_done_fn done, void *ctx, gk_err *err);
/*
 * ZeRO-2 where the caller keeps no buffer of all n gradients (a GPU's
 * backward writing into a few bucket-sized buffers). Before partition:
 * cuts lists (ascending) the only boundaries a bucket may have at or
 * above below (the edges of what the caller writes as one piece, whose
 * elements must lie in one buffer); under below any multiple of align
 * stays allowed, and below itself always is. A bucket then holds as many
 * whole pieces as fit in bucket_bytes, and one piece when it alone is
 * larger. After partition: at(lo, ctx) says where the bucket starting at
 * element lo has its gradients (grad is then not read), and the caller
 * may reuse a bucket's memory for a later bucket once it is retired: on
 * nccl the host then waits for each bucket's reduction when it retires
 * it, and the copy or sum into the shard, the zeroing and AVG's division
 * run on the caller's stream, in its order. gk_comm_grads_bucket
 * gives bucket b's range [lo, hi) (b from 0, the last elements, to
 * gk_comm_grads_buckets - 1).
 */
typedef float *(*gk_comm_grads_at_fn)(size_t lo, void *ctx);
/*
 * The buckets partition makes of n elements, with no communicator: the
 * rule above (bucket_bytes, 0 for 25 MiB, rounded up to align elements;
 * the ncut boundaries cut, ascending, at or above below, none: any
 * multiple of align). Writes each bucket's low end into lo, when not
 * NULL, from the last elements' bucket down to 0, and returns how many
 * there are (call it with lo NULL for the count). lib/mem prices a GPU's
 * ZeRO-2 gradient buffers with it (gk_mem_zero2_device).
 */
size_t gk_comm_grads_plan(size_t n, size_t bucket_bytes, size_t align, const size_t *cut,
			  size_t ncut, size_t below, size_t *lo);
/*
 * The align the trainer gives the plan and its shards, in 4-byte elements:
 * one page, so that a rank can hand the pages of gradients it does not
 * own back to the system (ZeRO-2's and ZeRO-3's release). lib/nn cuts its
 * gradient buffer by it and lib/mem prices those cuts by it.
 */
size_t gk_comm_grads_align(void);
int gk_comm_grads_cuts(gk_comm_grads *g, const size_t *cuts, size_t ncuts, size_t below,
		       gk_err *err);
void gk_comm_grads_place(gk_comm_grads *g, gk_comm_grads_at_fn at, void *ctx);
void gk_comm_grads_bucket(const gk_comm_grads *g, size_t b, size_t *lo, size_t *hi);
/* ZeRO-2: the next micro-step is a step's first (the shard is copied
 * into, not added to) and/or its last (finish divides by the world). */
void gk_comm_grads_micro(gk_comm_grads *g, int first, int last);
int gk_comm_grads_ready(gk_comm_grads *g, size_t off, gk_err *err);
int gk_comm_grads_finish(gk_comm_grads *g, gk_err *err);
size_t gk_comm_grads_buckets(const gk_comm_grads *g);
/* The error-feedback residual of compressed buckets (n floats in the
 * communicator's memory: device memory on nccl), or NULL; a trainer saves
 * and restores it (gk_comm_to_host, gk_comm_to_device) so that a resume
 * continues bit for bit. */
float *gk_comm_grads_residual(gk_comm_grads *g);
void gk_comm_grads_free(gk_comm_grads *g);

/*
 * Small host-side reductions for tools (timings, error counts), on any
 * backend, in host memory: v[i] = op over ranks of v[i].
 */
int gk_comm_host_allreduce_f64(gk_comm *c, double *v, size_t n, gk_comm_op op,
			       gk_err *err);

/*
 * Settings every rank must share (a tool's options, a model's shape),
 * compared before the first collective that depends on them: ranks
 * started with different arguments (an MPMD launch, a typo on one node)
 * would otherwise call different collectives, or the same ones on
 * buffers of different sizes, and wait forever or corrupt memory. Each
 * value is compared as 32-bit halves, which the host reduction's doubles
 * hold exactly (min and max over the world); a string is compared by its
 * XXH3 (gk_comm_setting_str). On a difference every rank returns -1 with
 * the same message: "options differ between the N ranks (A, B): why".
 */
typedef struct gk_comm_setting {
	const char *name; /* as the user spells it: "--batch" */
	uint64_t v;
} gk_comm_setting;
uint64_t gk_comm_setting_str(const char *s); /* NULL and "" differ */
int gk_comm_agree(gk_comm *c, const gk_comm_setting *s, size_t n,
		  const char *why, gk_err *err);

/* Memory helpers matching the backend (cudaMalloc for nccl, else malloc). */
void *gk_comm_alloc(gk_comm *c, size_t bytes, gk_err *err);
void gk_comm_free(gk_comm *c, void *p);
int gk_comm_to_device(gk_comm *c, void *dst, const void *src, size_t bytes,
		      gk_err *err);
int gk_comm_to_host(gk_comm *c, void *dst, const void *src, size_t bytes,
		    gk_err *err);

/*
 * Error bound of a compressed allreduce for one element (see above):
 * abs_sum is S_i (bf16, f16) or A_g (int8); n the world size.
 */
double gk_comm_compress_bound(gk_comm_compress cz, int n, double abs_sum);

/*
 * The flight recorder. Every communicator keeps a ring of its last
 * cfg.trace_size operations (collectives, barriers and the host
 * reductions, in the order the caller started them): a sequence number
 * per communicator (1, 2, ... the same on every rank when every rank
 * calls the same collectives in the same order), the operation, its
 * bytes per rank, dtype, reduction and root, the caller's tag ("bucket"
 * 7) and step, the times it was called (enqueued), started and ended
 * (CLOCK_MONOTONIC), its state (queued, started, done, failed) and, on
 * mpi while in flight, the rank whose message it waits for. Recording
 * costs a clock read and a dozen stores per operation, no lock and no
 * allocation (measured in tests/unit/comm_trace.c).
 *
 * With cfg.trace_dir, the ring is dumped as JSON Lines (gpu-train(1),
 * HANGS, "Dump format") to DIR/trace-cC-rRRRRR.jsonl (communicator C,
 * world rank R, five digits: each group of a split has its own rank 0;
 * the header gives both, and a group's world ranks), through a temporary name and rename(2), so a
 * reader sees a whole dump or the previous one: at the first failed
 * operation (the watchdog's timeout is one), at gk_comm_abort, and when
 * the program calls gk_comm_trace_dump. Communicators are numbered in
 * the order a process opens them (0, 1, ...), the same on every rank.
 */
#define GK_COMM_TRACE_DEFAULT 2048

/*
 * Tag the next operation started on c (it applies to that one only):
 * tag is a name of static storage ("bucket"), index a number (-1: none).
 * Cheap: two stores.
 */
void gk_comm_trace_tag(gk_comm *c, const char *tag, int64_t index);
/* The caller's step, recorded with every later operation (-1: none). */
void gk_comm_trace_step(gk_comm *c, int64_t step);
/*
 * Dump c's ring now (reason: a short word of static storage, "SIGUSR2").
 * Async-signal-safe: it formats by hand into a stack buffer and uses
 * only clock_gettime, open, write, rename and close, with no lock and no
 * allocation, so a signal handler may call it. An operation written at
 * the moment of the signal is left out rather than torn. Returns 0, or
 * -1 (no trace_dir, a dump already running, or an I/O error; errno).
 */
int gk_comm_trace_dump(gk_comm *c, const char *reason);
/* The same for every communicator open in the process; async-signal-safe. */
void gk_comm_trace_dump_all(const char *reason);
/*
 * For a tool's --trace-dir, before anything can hang: dir is made if it
 * does not exist (its parent must), and must be a directory this process
 * can write. 0, or -1 with a message naming dir and why.
 */
int gk_comm_trace_dir_check(const char *dir, gk_err *err);

/*
 * Read every rank's dumps in dir and say what the hang is: the first
 * operation some ranks called and others did not (a rank that skipped
 * one, or called another), else the rank that never returned from one,
 * or never entered the one the others wait in, and the ranks that left
 * no dump, each communicator (and each group of a split) on lines of
 * its own, every rank by its world rank. *text (malloc'ed, the caller
 * frees it) is a few lines, the
 * verdict first: "rank 3 (on b) is in allreduce #1842 (bucket 7, step
 * 230, 4.00 MiB) since 312 s; ranks 0-2 wait in allreduce #1843 ...".
 * Returns 0, or -1 with a message (no dumps, a dump that does not parse:
 * named with its line).
 */
int gk_comm_trace_report(const char *dir, char **text, gk_err *err);

/* ---- the benchmark harness (allreduce-bench), as nccl-tests' common.cu ---- */

/* nccl-tests' busbw factor: 2(n-1)/n, (n-1)/n, (n-1)/n, 1. */
double gk_comm_busbw_factor(gk_comm_coll coll, int n);
/* 1 when algo can run coll on this communicator's backend. */
int gk_comm_algo_supported(const gk_comm *c, gk_comm_coll coll,
			   gk_comm_algo algo);

/* How the ranks' times make the reported one (nccl-tests -a). */
typedef enum gk_comm_bench_avg {
	GK_COMM_BENCH_RANK0, /* rank 0's */
	GK_COMM_BENCH_MEAN,  /* the mean over ranks (nccl-tests' default) */
	GK_COMM_BENCH_MIN,
	GK_COMM_BENCH_MAX,   /* the slowest rank's */
	GK_COMM_BENCH_AVG_COUNT
} gk_comm_bench_avg;

/*
 * A sweep: sizes from minbytes to maxbytes, multiplied by factor (> 1) or
 * stepped by stepbytes (factor 1), for each algorithm, dtype and op asked.
 * gk_comm_bench_defaults fills nccl-tests' defaults.
 */
typedef struct gk_comm_bench_opts {
	gk_comm_coll coll;
	gk_dtype dt;
	gk_comm_op op;
	gk_comm_algo algo;
	int all_types, all_ops, all_algos; /* sweep these instead of dt, op, algo */
	gk_comm_compress compress;
	uint64_t minbytes, maxbytes, factor, stepbytes;
	int root;          /* broadcast */
	int warmup, iters;
	int check;         /* checked runs per size (0: none) */
	int blocking;      /* wait and barrier after each iteration (nccl-tests -z) */
	gk_comm_bench_avg average;
} gk_comm_bench_opts;

void gk_comm_bench_defaults(gk_comm_bench_opts *o);

/*
 * The checks that need no communicator (the tool's usage errors, exit 2):
 * sizes and step, an algorithm the collective has on no backend (rd for
 * reduce-scatter), compression outside f32 sum/avg allreduce on the ring,
 * an algorithm the asked backend lacks (nccl runs native only).
 */
int gk_comm_bench_validate(const gk_comm_bench_opts *o, gk_comm_backend backend,
			   gk_err *err);

/*
 * Host memory a rank needs for the largest size: about four buffers of
 * maxbytes (send, receive and their host copies); *bytes is that times
 * local_ranks (the ranks sharing this node). -1 when it overflows 64 bits.
 */
int gk_comm_bench_host_bytes(const gk_comm_bench_opts *o, int local_ranks,
			     uint64_t *bytes);
/* 0 when that fits in this node's physical memory, else -1 with a message. */
int gk_comm_bench_fits(const gk_comm_bench_opts *o, int local_ranks,
		       gk_err *err);

/*
 * Every rank must run the same sweep, or the ranks wait for each other
 * in different collectives forever (an MPMD launch, a typo on one node).
 * Every rank calls this first; each field of o and the communicator's
 * configuration is compared across ranks (min and max over the world),
 * and on a difference every rank returns -1 with the same message naming
 * the options that differ.
 */
int gk_comm_bench_agree(gk_comm *c, const gk_comm_bench_opts *o, gk_err *err);

/* One collective at one size: the "size" and timing columns of a table. */
typedef struct gk_comm_bench_result {
	double time_us;       /* per iteration, the ranks' times combined by o->average */
	double algbw, busbw;  /* GB/s (1e9): size / time, and algbw times the bus factor */
	int64_t wrong;        /* elements off (outside the bound if compressed) over all
			       * ranks; -1 unchecked */
	double max_abs, max_rel; /* compressed: largest error, and it over max |exact| */
} gk_comm_bench_result;

/* One row of the table: a size, out of place and in place. */
typedef struct gk_comm_bench_row {
	gk_comm_algo algo;
	gk_dtype dt;
	gk_comm_op op;
	size_t bytes;  /* the "size" column: the larger buffer, whole elements */
	size_t count;  /* the "count" column: elements per rank */
	int root;      /* the broadcast root, -1 for the others */
	gk_comm_bench_result r[2]; /* [0] out of place, [1] in place */
} gk_comm_bench_row;

/* What a table ends with. */
typedef struct gk_comm_bench_summary {
	gk_comm_algo algo;
	int64_t wrong;       /* "Out of bounds values" */
	double avg_busbw;    /* "Avg bus bandwidth": mean busbw of every run */
	double last_busbw;   /* the largest size, out of place */
} gk_comm_bench_summary;

/*
 * Where the sweep's results go, on every rank (a tool prints on rank 0).
 * Each callback returns 0, or -1 to stop the sweep (err then says why).
 */
typedef struct gk_comm_bench_sink {
	void *ctx;
	int (*begin)(void *ctx, gk_comm_algo algo);
	int (*row)(void *ctx, const gk_comm_bench_row *row);
	int (*end)(void *ctx, const gk_comm_bench_summary *s);
} gk_comm_bench_sink;

/*
 * Run the sweep: for each algorithm (all_algos: those this backend runs
 * for the collective), dtype, op and size, a row. Sizes round down to
 * whole elements, and for reduce-scatter and allgather to a multiple of
 * the world (nccl-tests' rule). Each size runs `check` checked runs,
 * `warmup` untimed and `iters` timed iterations, out of place then in
 * place. Inputs are known on every rank from a formula of (rank, index),
 * so checking needs no communication.
 *
 * Timing, as nccl-tests: a barrier, then the iterations are started back
 * to back and the rank waits once at the end (on device memory the calls
 * are queued on the stream; on host memory each MPI call returns when it
 * is done); with blocking, each iteration waits and a barrier follows.
 * The time is that wait over iters, combined across ranks by o->average.
 * *total_wrong gets the wrong elements of the whole sweep.
 */
int gk_comm_bench_sweep(gk_comm *c, const gk_comm_bench_opts *o,
			const gk_comm_bench_sink *sink, int64_t *total_wrong,
			gk_err *err);

/*
 * Host memcpy bandwidth in GB/s (median of 9) over a buffer of maxbytes
 * clamped to [1 MiB, 256 MiB] (*bytes): the ceiling of a host allreduce.
 * Rank 0 copies while the others wait at a barrier; on device memory
 * (nccl) nothing runs and *gbs is 0.
 */
int gk_comm_bench_memcpy(gk_comm *c, uint64_t maxbytes, double *gbs,
			 size_t *bytes, gk_err *err);

/* nccl-tests' name of a type: "float" "double" "half" "bfloat16" "int32". */
const char *gk_comm_bench_type_name(gk_dtype dt);

/*
 * The sweep as Prometheus metrics (allreduce-bench --metrics), on the rank
 * that writes them. _new labels every sample with the collective and the
 * backend; _row sets, per placement ("out", "in"), the
 * gpukit_allreduce_{busbw,algbw}_bytes_per_second, _time_seconds and (when
 * checked) _wrong_elements samples labelled algo, type, redop, size (the
 * row's bytes), placement and, for broadcast, root; _summary an
 * algorithm's avg_busbw_bytes_per_second and out_of_bounds_elements; _run
 * world_size, success, last_run_timestamp_seconds (now, Unix time) and,
 * when memcpy_gbs > 0, memcpy_bytes_per_second. -1 with err set when m
 * refuses a sample.
 */
int gk_comm_bench_metrics_new(gk_metrics **out, const gk_comm *c,
			      const gk_comm_bench_opts *o, gk_err *err);
int gk_comm_bench_metrics_row(gk_metrics *m, const gk_comm_bench_row *w,
			      gk_err *err);
int gk_comm_bench_metrics_summary(gk_metrics *m, const gk_comm_bench_summary *s,
				  gk_err *err);
int gk_comm_bench_metrics_run(gk_metrics *m, int world, double memcpy_gbs,
			      int64_t wrong, double now, gk_err *err);

#endif
