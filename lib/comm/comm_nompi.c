/*
 * comm_nompi.c - the mpi backend in a build without MPI: it says so.
 */
#include "comm/internal.h"

static int nompi(gk_err *err)
{
	return gk_errf(err, "backend 'mpi': built without MPI (install Open MPI and rebuild)");
}

int gk_comm_mpi_open(gk_comm *c, int need_thread, gk_err *err) { return nompi(err); }
void gk_comm_mpi_close(gk_comm *c) { (void)c; }
int gk_comm_mpi_split(gk_comm *parent, gk_comm *c, int color, int key, gk_err *err)
{
	return nompi(err);
}
int gk_comm_mpi_run(gk_comm *c, const gk_comm_call *k, gk_err *err) { return nompi(err); }
void gk_comm_mpi_abort(gk_comm *c, int code) { (void)c, (void)code; }
int gk_comm_mpi_await_reporter(gk_comm *c, gk_err *err) { (void)c, (void)err; return 0; }
int gk_comm_mpi_probed(gk_comm *c, double bound) { (void)c, (void)bound; return 0; }
int gk_comm_stall_reporter(void) { return -1; }
int gk_comm_mpi_barrier(gk_comm *c, gk_err *err) { return nompi(err); }
int gk_comm_mpi_host_allreduce_f64(gk_comm *c, double *v, size_t n,
				   gk_comm_op op, gk_err *err)
{
	return nompi(err);
}
int gk_comm_mpi_bcast_bytes(gk_comm *c, void *buf, size_t n, gk_err *err)
{
	return nompi(err);
}
