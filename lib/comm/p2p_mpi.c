/*
 * p2p_mpi.c - point-to-point messages on the mpi backend (p2p.c): one
 * MPI_Isend or MPI_Irecv a piece of at most 1 GiB (MPI's counts are
 * int), waited for under the communicator's watchdog (watchdog_mpi.c), so a
 * peer that stopped fails the wait with the ranks that do not answer
 * instead of hanging. Messages between two ranks arrive in the order
 * they were sent (MPI's non-overtaking rule, one tag).
 */
#include <mpi.h>
#include <stdlib.h>

#include "comm/comm_mpi.h"

#define TAG_P2P 7101
#define PIECE ((size_t)1 << 30)

typedef struct p2p_reqs {
	int n;
	MPI_Request q[];
} p2p_reqs;

int gk_comm_mpi_p2p_start(gk_comm *c, const gk_comm_call *k, void **h, gk_err *err)
{
	*h = NULL;
	size_t bytes = k->count * gk_comm_dt_size(k->dt);
	if (!bytes)
		return 0;
	size_t n = (bytes + PIECE - 1) / PIECE;
	p2p_reqs *p = calloc(1, sizeof *p + n * sizeof(MPI_Request));
	if (!p)
		return gk_errf(err, "mpi: out of memory");
	MPI_Comm comm;
	gk_comm_mpi_handle(c, &comm);
	int send = k->coll == GK_COMM_CALL_SEND;
	for (size_t i = 0; i < n; i++) {
		size_t off = i * PIECE, len = bytes - off < PIECE ? bytes - off : PIECE;
		int rc = send ? MPI_LOCKED(MPI_Isend((const char *)k->send + off, (int)len,
						     MPI_BYTE, k->root, TAG_P2P, comm, &p->q[i])) :
				MPI_LOCKED(MPI_Irecv((char *)k->recv + off, (int)len, MPI_BYTE,
						     k->root, TAG_P2P, comm, &p->q[i]));
		if (rc != MPI_SUCCESS) {
			char s[MPI_MAX_ERROR_STRING];
			int len_s = 0;
			if (MPI_LOCKED(MPI_Error_string(rc, s, &len_s)) != MPI_SUCCESS)
				snprintf(s, sizeof s, "error %d", rc);
			/* what started is left to MPI: the world is about to end */
			free(p);
			return gk_errf(err, "mpi: %s rank %d: %s", send ? "send to" : "receive from",
				       gk_comm_wrank(c, k->root), s);
		}
		p->n++;
	}
	*h = p;
	return 0;
}

int gk_comm_mpi_p2p_wait(gk_comm *c, void *h, gk_err *err)
{
	p2p_reqs *p = h;
	int st = gk_comm_mpi_waitall(c, p->n, p->q, "point-to-point message", err);
	free(p);
	return st;
}

int gk_comm_mpi_p2p_test(gk_comm *c, void *h, int *done, gk_err *err)
{
	p2p_reqs *p = h;
	(void)c;
	int rc = MPI_LOCKED(MPI_Testall(p->n, p->q, done, MPI_STATUSES_IGNORE));
	if (rc != MPI_SUCCESS)
		return gk_errf(err, "mpi: point-to-point message: MPI error %d", rc);
	return 0;
}

void gk_comm_mpi_p2p_free(void *h)
{
	free(h);
}
