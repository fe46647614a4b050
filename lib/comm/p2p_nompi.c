/*
 * p2p_nompi.c - point-to-point messages in a build without MPI: a world
 * of one has no peer, and p2p.c refuses before these are reached.
 */
#include "comm/internal.h"

int gk_comm_mpi_p2p_start(gk_comm *c, const gk_comm_call *k, void **h, gk_err *err)
{
	(void)c, (void)k;
	*h = NULL;
	return gk_errf(err, "point-to-point messages: built without MPI (install Open MPI "
		       "and rebuild)");
}
int gk_comm_mpi_p2p_wait(gk_comm *c, void *h, gk_err *err) { return 0; }
int gk_comm_mpi_p2p_test(gk_comm *c, void *h, int *done, gk_err *err)
{
	*done = 1;
	return 0;
}
void gk_comm_mpi_p2p_free(void *h) { (void)h; }
