/*
 * rank.c - rank and world from the launcher's environment: the one place
 * that reads it (lib/comm and the tools ask gk_rank_discover).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Read an integer variable; 0 when unset, -1 (with err) when malformed. */
static int env_int(const char *name, int *out, int *found, gk_err *err)
{
	const char *s = getenv(name);
	*found = s != NULL && *s != '\0';
	if (!*found)
		return 0;
	if (gk_parse_int(s, 0, 1 << 24, out, "", err) < 0)
		return gk_errf(err, "environment %s='%s': not a rank or count", name,
			       s);
	return 0;
}

/*
 * SLURM_TASKS_PER_NODE is a run-length list: "4(x2),3" means nodes 0 and 1
 * run 4 tasks, node 2 runs 3. Return the count for node `node`.
 */
static int slurm_tasks_on_node(const char *s, int node, int *out)
{
	int idx = 0;
	while (*s) {
		char *end;
		long n = strtol(s, &end, 10), reps = 1;
		if (end == s || n <= 0)
			return -1;
		s = end;
		if (strncmp(s, "(x", 2) == 0) {
			reps = strtol(s + 2, &end, 10);
			if (end == s + 2 || *end != ')' || reps <= 0)
				return -1;
			s = end + 1;
		}
		if (node < idx + reps) {
			*out = (int)n;
			return 0;
		}
		idx += (int)reps;
		if (*s == ',')
			s++;
		else if (*s)
			return -1;
	}
	return -1;
}

static int check(gk_rank_info *ri, gk_err *err)
{
	if (ri->world < 1 || ri->rank >= ri->world)
		return gk_errf(err, "%s environment: rank %d is not below world size %d",
			       ri->launcher, ri->rank, ri->world);
	if (ri->local_world < 1 || ri->local_rank >= ri->local_world ||
	    ri->local_world > ri->world)
		return gk_errf(err, "%s environment: local rank %d of %d does not fit a world of %d",
			       ri->launcher, ri->local_rank, ri->local_world,
			       ri->world);
	return 0;
}

int gk_rank_discover(gk_rank_info *ri, gk_err *err)
{
	int f1, f2, f3, f4;

	memset(ri, 0, sizeof(*ri));
	ri->world = ri->local_world = 1;
	ri->node = -1;
	ri->launcher = "none";
	ri->kill_after = -1;

	/* mpirun inside a Slurm allocation sets both; mpirun is the truth. */
	if (env_int("OMPI_COMM_WORLD_RANK", &ri->rank, &f1, err) ||
	    env_int("OMPI_COMM_WORLD_SIZE", &ri->world, &f2, err))
		return -1;
	if (f1 || f2) {
		ri->launcher = "openmpi";
		ri->mpi = 1;
		if (!(f1 && f2))
			return gk_errf(err, "openmpi environment: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE must both be set");
		if (env_int("OMPI_COMM_WORLD_LOCAL_RANK", &ri->local_rank, &f3, err) ||
		    env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &ri->local_world, &f4, err))
			return -1;
		if (!f3)
			ri->local_rank = ri->rank;
		if (!f4)
			ri->local_world = ri->world;
		/* mpirun passes its --mca settings and OMPI_MCA_ variables on to
		 * the ranks; it refuses a malformed one itself */
		const char *k = getenv("OMPI_MCA_odls_base_sigkill_timeout");
		gk_err ignored = {0};
		ri->kill_after = 1;
		if (k && *k && gk_parse_int(k, 0, 1 << 24, &ri->kill_after, "", &ignored) < 0)
			ri->kill_after = 1;
		return check(ri, err);
	}

	/*
	 * srun's tasks carry SLURM_STEP_ID; an sbatch script itself does not,
	 * though it sees SLURM_PROCID=0 and the job's SLURM_NTASKS: it is one
	 * process, not rank 0 of the job's tasks. A step's own task counts
	 * (srun -n 2 inside a job of 8) are the SLURM_STEP_* ones.
	 */
	int step = getenv("SLURM_STEP_ID") != NULL || getenv("SLURM_STEPID") != NULL;
	f1 = f2 = 0;
	if (step && (env_int("SLURM_PROCID", &ri->rank, &f1, err) ||
		     env_int("SLURM_STEP_NUM_TASKS", &ri->world, &f2, err) ||
		     (!f2 && env_int("SLURM_NTASKS", &ri->world, &f2, err))))
		return -1;
	if (f1) {
		ri->launcher = "slurm";
		/* srun's PMI (--mpi=pmix) is what MPI_Init reads under Slurm. */
		ri->mpi = 1;
		if (!f2)
			return gk_errf(err, "slurm environment: SLURM_PROCID is set but SLURM_NTASKS is not");
		if (env_int("SLURM_LOCALID", &ri->local_rank, &f3, err) ||
		    env_int("SLURM_NODEID", &ri->node, &f4, err))
			return -1;
		if (!f3)
			ri->local_rank = 0;
		if (!f4)
			ri->node = -1;
		const char *tpn = getenv("SLURM_STEP_TASKS_PER_NODE");
		if (!tpn || !*tpn)
			tpn = getenv("SLURM_TASKS_PER_NODE");
		ri->local_world = ri->world;
		if (tpn && *tpn) {
			if (slurm_tasks_on_node(tpn, f4 ? ri->node : 0,
						&ri->local_world) < 0)
				return gk_errf(err, "slurm environment: SLURM_TASKS_PER_NODE='%s' is malformed or has no entry for node %d",
					       tpn, ri->node);
		}
		return check(ri, err);
	}

	if (env_int("RANK", &ri->rank, &f1, err) ||
	    env_int("WORLD_SIZE", &ri->world, &f2, err))
		return -1;
	if (f1 || f2) {
		ri->launcher = "torchrun";
		/*
		 * torchrun's rendezvous (MASTER_ADDR, TORCHELASTIC_*) is for
		 * torch.distributed; it sets nothing MPI_Init can use.
		 */
		ri->mpi = 0;
		if (!(f1 && f2))
			return gk_errf(err, "torchrun environment: RANK and WORLD_SIZE must both be set");
		if (env_int("LOCAL_RANK", &ri->local_rank, &f3, err) ||
		    env_int("LOCAL_WORLD_SIZE", &ri->local_world, &f4, err))
			return -1;
		if (!f3)
			ri->local_rank = ri->rank;
		if (!f4)
			ri->local_world = ri->world;
		int node;
		if (env_int("GROUP_RANK", &node, &f3, err))
			return -1;
		ri->node = f3 ? node : -1;
		return check(ri, err);
	}
	ri->node = 0;
	return 0;
}
