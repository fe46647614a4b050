/*
 * grid.c - the process grid: the world cut once into data-parallel and
 * tensor-parallel groups, tp innermost (the tp consecutive ranks of a
 * group sit on one host when the launcher fills hosts in order), as
 * Megatron-LM's parallel_state and picotron's process_group_manager do.
 * Every parallel path takes its communicator from here.
 */
#include "nn/train.h"

int gk_nn_grid_layout(int world, int tp, int rank, gk_nn_grid *g, gk_err *err)
{
	*g = (gk_nn_grid){.tp = 1, .dp = world};
	if (tp < 1)
		return gk_errf(err, "tensor-parallel groups of %d ranks: not a group size", tp);
	if (world % tp)
		return gk_errf(err, "tensor-parallel groups of %d ranks: the world's %d ranks do "
			       "not divide into them (world = data-parallel x tensor-parallel)",
			       tp, world);
	g->tp = tp;
	g->dp = world / tp;
	g->tp_rank = rank % tp;
	g->dp_rank = rank / tp;
	return 0;
}

int gk_nn_grid_open(gk_nn_grid *g, gk_comm *world, gk_err *err)
{
	g->world = world;
	g->tpc = g->dpc = NULL;
	if (g->tp == 1) {
		g->dpc = world; /* data parallel over the world, as without a grid */
		return 0;
	}
	/* the same calls in the same order on every rank: tensor groups, then
	 * data-parallel groups */
	if (gk_comm_split(world, g->dp_rank, g->tp_rank, &g->tpc, err) < 0 ||
	    gk_comm_split(world, g->tp_rank, g->dp_rank, &g->dpc, err) < 0) {
		gk_nn_grid_close(g);
		return -1;
	}
	return 0;
}

void gk_nn_grid_close(gk_nn_grid *g)
{
	if (g->dpc != g->world)
		gk_comm_close(g->dpc);
	gk_comm_close(g->tpc);
	g->tpc = NULL;
	g->dpc = g->world;
}
