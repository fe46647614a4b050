/* core_rank.c - rank discovery for each launcher's variables. */
#include <stdlib.h>

#include "core/core.h"
#include "tap.h"

static const char *vars[] = {
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
	"SLURM_NODEID", "SLURM_TASKS_PER_NODE", "SLURM_STEP_ID", "SLURM_STEPID",
	"SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
	"LOCAL_WORLD_SIZE", "GROUP_RANK", "OMPI_MCA_odls_base_sigkill_timeout",
};

static void reset(void)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(vars); i++)
		unsetenv(vars[i]);
}

static void expect(const char *name, const char *launcher, int rank, int world,
		   int lrank, int lworld, int node)
{
	gk_rank_info ri;
	gk_err err = {0};
	int rc = gk_rank_discover(&ri, &err);
	if (!ok(rc == 0 && strcmp(ri.launcher, launcher) == 0 && ri.rank == rank &&
		ri.world == world && ri.local_rank == lrank &&
		ri.local_world == lworld && ri.node == node, "%s", name))
		diag("rc %d %s: %s rank %d/%d local %d/%d node %d", rc, err.msg,
		     ri.launcher, ri.rank, ri.world, ri.local_rank, ri.local_world,
		     ri.node);
}

/* Whether the launcher found can start MPI (mpirun, srun: yes; torchrun: no). */
static void can_mpi(const char *name, int want)
{
	gk_rank_info ri;
	ok(gk_rank_discover(&ri, NULL) == 0 && ri.mpi == want, "%s: %s start MPI", name,
	   want ? "can" : "cannot");
}

/* Seconds from the launcher's SIGTERM to its SIGKILL: Open MPI's only. */
static void kill_after(const char *name, int want)
{
	gk_rank_info ri;
	if (!ok(gk_rank_discover(&ri, NULL) == 0 && ri.kill_after == want,
		"%s: SIGKILL %d s after SIGTERM", name, want))
		diag("kill_after %d", ri.kill_after);
}

static void refuse(const char *name, const char *want)
{
	gk_rank_info ri;
	gk_err err = {0};
	ok(gk_rank_discover(&ri, &err) == -1, "%s refused", name);
	is_str(err.msg, want, "  message");
}

int main(void)
{
	reset();
	expect("no launcher: world of one", "none", 0, 1, 0, 1, 0);
	can_mpi("no launcher", 0);
	kill_after("no launcher", -1);

	/* mpirun -np 8 on two nodes, rank 5 */
	setenv("OMPI_COMM_WORLD_RANK", "5", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
	expect("openmpi", "openmpi", 5, 8, 1, 4, -1);
	can_mpi("openmpi", 1);
	kill_after("openmpi, Open MPI's default", 1);
	setenv("OMPI_MCA_odls_base_sigkill_timeout", "8", 1);
	kill_after("openmpi, --mca odls_base_sigkill_timeout 8", 8);
	setenv("OMPI_MCA_odls_base_sigkill_timeout", "0", 1);
	kill_after("openmpi, --mca odls_base_sigkill_timeout 0", 0);
	unsetenv("OMPI_MCA_odls_base_sigkill_timeout");
	/* mpirun inside an sbatch allocation: Open MPI wins over Slurm */
	setenv("SLURM_STEP_ID", "0", 1);
	setenv("SLURM_PROCID", "0", 1);
	setenv("SLURM_NTASKS", "1", 1);
	expect("openmpi inside slurm", "openmpi", 5, 8, 1, 4, -1);
	setenv("OMPI_COMM_WORLD_RANK", "8", 1);
	refuse("openmpi rank == size", "openmpi environment: rank 8 is not below world size 8");
	setenv("OMPI_COMM_WORLD_RANK", "x", 1);
	refuse("openmpi junk", "environment OMPI_COMM_WORLD_RANK='x': not a rank or count");

	/*
	 * An sbatch -n 4 script itself (no step): SLURM_PROCID=0 and the job's
	 * SLURM_NTASKS are set, yet it is one process, not rank 0 of 4.
	 */
	reset();
	setenv("SLURM_PROCID", "0", 1);
	setenv("SLURM_NTASKS", "4", 1);
	setenv("SLURM_LOCALID", "0", 1);
	setenv("SLURM_NODEID", "0", 1);
	setenv("SLURM_TASKS_PER_NODE", "4", 1);
	expect("sbatch script, no step: world of one", "none", 0, 1, 0, 1, 0);

	/* srun -N3 -n11 with tasks per node 4,4,3: rank 9 is on node 2 */
	reset();
	setenv("SLURM_STEP_ID", "0", 1);
	setenv("SLURM_PROCID", "9", 1);
	setenv("SLURM_NTASKS", "11", 1);
	setenv("SLURM_LOCALID", "1", 1);
	setenv("SLURM_NODEID", "2", 1);
	setenv("SLURM_TASKS_PER_NODE", "4(x2),3", 1);
	expect("slurm", "slurm", 9, 11, 1, 3, 2);
	kill_after("slurm", -1);
	can_mpi("slurm", 1);
	setenv("SLURM_NODEID", "0", 1);
	setenv("SLURM_LOCALID", "3", 1);
	setenv("SLURM_PROCID", "3", 1);
	expect("slurm node 0", "slurm", 3, 11, 3, 4, 0);
	setenv("SLURM_TASKS_PER_NODE", "4(x2", 1);
	refuse("slurm malformed tasks per node",
	       "slurm environment: SLURM_TASKS_PER_NODE='4(x2' is malformed or has no entry for node 0");
	/* srun -n 2 inside that job of 11: the step's counts win */
	setenv("SLURM_TASKS_PER_NODE", "4(x2),3", 1);
	setenv("SLURM_STEP_NUM_TASKS", "2", 1);
	setenv("SLURM_STEP_TASKS_PER_NODE", "2", 1);
	setenv("SLURM_PROCID", "1", 1);
	setenv("SLURM_LOCALID", "1", 1);
	expect("srun -n 2 inside a job of 11", "slurm", 1, 2, 1, 2, 0);
	unsetenv("SLURM_STEP_NUM_TASKS");
	unsetenv("SLURM_STEP_TASKS_PER_NODE");
	setenv("SLURM_TASKS_PER_NODE", "4(x2", 1);
	setenv("SLURM_PROCID", "3", 1);
	setenv("SLURM_LOCALID", "3", 1);
	unsetenv("SLURM_NTASKS");
	refuse("slurm without ntasks",
	       "slurm environment: SLURM_PROCID is set but SLURM_NTASKS is not");

	/* torchrun --nnodes 2 --nproc-per-node 4, rank 6 */
	reset();
	setenv("RANK", "6", 1);
	setenv("WORLD_SIZE", "8", 1);
	setenv("LOCAL_RANK", "2", 1);
	setenv("LOCAL_WORLD_SIZE", "4", 1);
	setenv("GROUP_RANK", "1", 1);
	expect("torchrun", "torchrun", 6, 8, 2, 4, 1);
	can_mpi("torchrun", 0);
	setenv("LOCAL_WORLD_SIZE", "9", 1);
	refuse("torchrun local world > world",
	       "torchrun environment: local rank 2 of 9 does not fit a world of 8");
	unsetenv("WORLD_SIZE");
	refuse("torchrun without world size",
	       "torchrun environment: RANK and WORLD_SIZE must both be set");
	return done_testing();
}
