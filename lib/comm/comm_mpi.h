/*
 * comm_mpi.h - what the mpi backend's two files share: its state, the
 * tags of its messages, and the wait every one of its calls ends in.
 * comm_mpi.c runs the collectives; watchdog_mpi.c holds the wait, the
 * stall watchdog around it and the probe that names a stopped rank. Not
 * installed.
 */
#ifndef GK_COMM_MPI_H
#define GK_COMM_MPI_H

#include <mpi.h>
#include <stdio.h>

#include "comm/internal.h"

typedef struct mpi_state {
	gk_comm *c; /* for the flight recorder */
	MPI_Comm comm;
	int owned; /* we called MPI_Init_thread */
	MPI_Op op16[2][4]; /* [bf16, f16][sum prod max min] */
	char *tmp, *w1, *w2, *work; /* scratch, grown as sizes grow, kept until close */
	size_t tmp_cap, w1_cap, w2_cap, work_cap;
	double timeout; /* seconds a wait may make no progress; 0: no limit */
	const char *op; /* the collective under way, for the timeout message */
	int stalled;    /* a wait timed out: the world is broken, and every
			 * later wait fails at once (see gk_comm_mpi_wait) */
	/*
	 * For naming the rank a stalled wait waits for (silent_ranks): a
	 * communicator of its own, every rank's host name (HOST_LEN bytes
	 * each, gathered at open), the ranks that did not answer, and the
	 * buffers of the probe's messages, which outlive a wait that gives
	 * up on them.
	 */
	MPI_Comm probe;
	int rank, world;
	char group[96]; /* " among ranks 2 and 3": a split's, by world ranks
			 * (its own numbers name no process); "": the world */
	char *hosts;
	char why[640]; /* the end of the stall's message (silent_ranks) */
	int token, done, gone, *heard; /* PROBE_*; one a rank */
} mpi_state;

enum { TAG_RS = 7001, TAG_AG, TAG_RD, TAG_FOLD, TAG_GATHER, TAG_ALIVE };

/*
 * One thread in MPI at a time. MPI is initialised MPI_THREAD_SERIALIZED
 * (comm_mpi.c), which leaves that to the process, yet a communicator's
 * progress thread (comm.c) makes its calls while the calling thread
 * makes another communicator's: a tensor group's collectives in backward
 * beside the data-parallel group's gradient buckets. So every MPI call of
 * the backend is made under one lock of the process (PyTorch's
 * ProcessGroupMPI keeps a global mutex for the same reason), held for the
 * call alone. No call made while others may be in flight waits for a
 * peer: each starts a request or tests one, and a wait tests and lets go
 * between tests (gk_comm_mpi_wait), so the threads' calls interleave and
 * each communicator progresses. The blocking collectives of open, split
 * and close hold it too; they run when nothing else is in flight.
 */
void gk_comm_mpi_lock(void);
void gk_comm_mpi_unlock(void);
#define MPI_LOCKED(call)                      \
	__extension__({                       \
		gk_comm_mpi_lock();           \
		int r_ = (call);              \
		gk_comm_mpi_unlock();         \
		r_;                           \
	})

/* A host name as the stall message gives it (longer ones are cut). */
#define HOST_LEN 64

static inline int mpi_fail(gk_err *err, int rc, const char *what)
{
	char s[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_LOCKED(MPI_Error_string(rc, s, &len)) != MPI_SUCCESS)
		snprintf(s, sizeof s, "error %d", rc);
	return gk_errf(err, "%s: %s", what, s);
}

#define MPI_TRY(call, what)                                  \
	do {                                                 \
		int rc_ = MPI_LOCKED(call);                  \
		if (rc_ != MPI_SUCCESS)                      \
			return mpi_fail(err, rc_, what);     \
	} while (0)

/*
 * The wait of every message and collective (watchdog_mpi.c): the n
 * requests at rq complete, or fail the call after st->timeout seconds
 * without progress with a message naming the ranks that stopped.
 */
int gk_comm_mpi_wait(mpi_state *st, int n, MPI_Request *rq, const char *what, gk_err *err);

#define MPI_WAIT(n, rq, what)                                         \
	do {                                                          \
		if (gk_comm_mpi_wait(st, (n), (rq), (what), err) < 0) \
			return -1;                                    \
	} while (0)

/* Start a non-blocking call into MPI_Request q_ and wait for it. */
#define MPI_RUN(call, what)                                  \
	do {                                                 \
		MPI_Request q_;                              \
		MPI_TRY(call, what);                         \
		MPI_WAIT(1, &q_, what);                      \
	} while (0)

#endif
