/*
 * mpi-serial-shim.c - an LD_PRELOAD library for the tests: counts the MPI
 * calls lib/comm makes to start and test messages and collectives, and
 * how many of them began while another thread of the process was inside
 * MPI, which MPI_THREAD_SERIALIZED forbids. At exit it writes
 * "CALLS OVERLAPPING" to $MPI_SHIM_OUT.PID.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static _Atomic long calls, overlapping;
static _Atomic int inside;

static void enter(void)
{
	calls++;
	if (atomic_fetch_add(&inside, 1) > 0)
		overlapping++;
}

#define WRAP(name, params, args)                                 \
	int name params                                          \
	{                                                        \
		static int(*real) params;                        \
		if (!real)                                       \
			*(void **)&real = dlsym(RTLD_NEXT, #name); \
		enter();                                         \
		int rc_ = real args;                             \
		inside--;                                        \
		return rc_;                                      \
	}

WRAP(MPI_Isend, (const void *b, int n, MPI_Datatype d, int p, int t, MPI_Comm c, MPI_Request *q),
     (b, n, d, p, t, c, q))
WRAP(MPI_Irecv, (void *b, int n, MPI_Datatype d, int p, int t, MPI_Comm c, MPI_Request *q),
     (b, n, d, p, t, c, q))
WRAP(MPI_Test, (MPI_Request *q, int *f, MPI_Status *s), (q, f, s))
WRAP(MPI_Testall, (int n, MPI_Request *q, int *f, MPI_Status *s), (n, q, f, s))
WRAP(MPI_Iallreduce,
     (const void *a, void *b, int n, MPI_Datatype d, MPI_Op o, MPI_Comm c, MPI_Request *q),
     (a, b, n, d, o, c, q))
WRAP(MPI_Ibcast, (void *b, int n, MPI_Datatype d, int r, MPI_Comm c, MPI_Request *q),
     (b, n, d, r, c, q))

static void __attribute__((destructor)) report(void)
{
	const char *out = getenv("MPI_SHIM_OUT");
	char path[4096];
	if (!out || snprintf(path, sizeof path, "%s.%d", out, (int)getpid()) >= (int)sizeof path)
		return;
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "%ld %ld\n", (long)calls, (long)overlapping);
		fclose(f);
	}
}
