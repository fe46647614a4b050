/*
 * grid.c - the process grid: the world cut once into data-parallel,
 * pipeline and tensor-parallel groups, tp innermost (the tp consecutive
 * ranks of a group sit on one host when the launcher fills hosts in
 * order), then pp, as Megatron-LM's parallel_state and picotron's
 * process_group_manager do. Every parallel path takes its communicator
 * from here.
 */
#include <stdio.h>

#include "nn/train.h"

int gk_nn_grid_layout_pp(int world, int tp, int pp, int rank, gk_nn_grid *g, gk_err *err)
{
	*g = (gk_nn_grid){.tp = 1, .pp = 1, .dp = world};
	if (tp < 1)
		return gk_errf(err, "tensor-parallel groups of %d ranks: not a group size", tp);
	if (pp < 1)
		return gk_errf(err, "a pipeline of %d stages: not a number of stages", pp);
	if (world % ((int64_t)tp * pp)) {
		if (pp == 1)
			return gk_errf(err, "tensor-parallel groups of %d ranks: the world's %d "
				       "ranks do not divide into them (world = data-parallel x "
				       "tensor-parallel)", tp, world);
		return gk_errf(err, "pipelines of %d stages x %d tensor-parallel ranks: the "
			       "world's %d ranks do not divide into them (world = data-parallel "
			       "x pipeline x tensor-parallel; run %d x %d x K ranks)", pp, tp, world,
			       pp, tp);
	}
	g->tp = tp;
	g->pp = pp;
	g->dp = world / (tp * pp);
	g->tp_rank = rank % tp;
	g->pp_rank = rank / tp % pp;
	g->dp_rank = rank / (tp * pp);
	return 0;
}

int gk_nn_grid_layout(int world, int tp, int rank, gk_nn_grid *g, gk_err *err)
{
	return gk_nn_grid_layout_pp(world, tp, 1, rank, g, err);
}

int gk_nn_grid_open(gk_nn_grid *g, gk_comm *world, gk_err *err)
{
	g->world = world;
	g->tpc = g->dpc = g->ppc = g->embc = NULL;
	if (g->tp == 1 && g->pp == 1) {
		g->dpc = world; /* data parallel over the world, as without a grid */
		return 0;
	}
	/* the same calls in the same order on every rank: tensor groups,
	 * pipelines, the embedding's groups, then data-parallel groups */
	int in_pipe = g->dp_rank * g->tp + g->tp_rank;   /* which pipeline */
	int in_dp = g->pp_rank * g->tp + g->tp_rank;     /* which data-parallel group */
	int ends = g->pp_rank == 0 || g->pp_rank == g->pp - 1;
	gk_comm *emb = NULL;
	if (g->tp > 1 &&
	    gk_comm_split(world, g->dp_rank * g->pp + g->pp_rank, g->tp_rank, &g->tpc, err) < 0)
		goto fail;
	if (g->pp > 1 &&
	    (gk_comm_split(world, in_pipe, g->pp_rank, &g->ppc, err) < 0 ||
	     /* the stages between the ends get a group of their own, unused */
	     gk_comm_split(world, ends ? in_pipe : g->dp * g->tp + gk_comm_rank(world),
			   g->pp_rank, &emb, err) < 0))
		goto fail;
	if (ends)
		g->embc = emb;
	else
		gk_comm_close(emb);
	if (gk_comm_split(world, in_dp, g->dp_rank, &g->dpc, err) < 0)
		goto fail;
	return 0;
fail:
	gk_nn_grid_close(g);
	return -1;
}

void gk_nn_grid_close(gk_nn_grid *g)
{
	if (g->dpc != g->world)
		gk_comm_close(g->dpc);
	gk_comm_close(g->tpc);
	gk_comm_close(g->ppc);
	gk_comm_close(g->embc);
	g->tpc = g->ppc = g->embc = NULL;
	g->dpc = g->world;
}

void gk_nn_grid_describe(char *buf, size_t len, int world, int64_t layers,
			 const gk_nn_train_opts *o)
{
	int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1;
	int sched = o->pp_sched, grad_accum = o->grad_accum;
	buf[0] = '\0';
	if (tp > 1 && pp == 1)
		snprintf(buf, len, " (dp %d x tp %d%s)", world / tp, tp,
			 o->seq_par ? ", sequence-parallel" : "");
	if (pp == 1)
		return;
	/* the stages' layers and the schedule's expected bubble */
	int n = tp > 1 ? snprintf(buf, len, " (dp %d x pp %d x tp %d: layers", world / pp / tp, pp,
				  tp)
		       : snprintf(buf, len, " (dp %d x pp %d: layers", world / pp, pp);
	/* the interleaved schedule's chunks a stage, joined by + */
	int V = sched == GK_NN_PP_INTERLEAVED && o->pp_chunks > 1 ? o->pp_chunks : 1;
	for (int s = 0; s < pp && n >= 0 && (size_t)n < len; s++)
		for (int c = 0; c < V && n >= 0 && (size_t)n < len; c++) {
			int l0 = 0, l1 = 0;
			gk_err ignore;
			gk_nn_pp_chunk_layers(layers, pp, V, s, c, &l0, &l1, &ignore);
			n += snprintf(buf + n, len - (size_t)n, "%s%d-%d", c ? "+" : s ? ", " : " ",
				      l0, l1 - 1);
		}
	/* ... and its group, where it is not the stages' count */
	int N = V > 1 ? (int)gk_mem_pp_group(grad_accum, pp) : pp;
	char group[48] = "";
	if (N != pp && N > 0)
		snprintf(group, sizeof(group), " in groups of %d", N);
	if (n >= 0 && (size_t)n < len && V > 1)
		snprintf(buf + n, len - (size_t)n, "; %s, %d chunks a stage, over %d micro-batches%s, "
			 "bubble (%d-1)/(%d x %d) = %.3g)", gk_nn_pp_sched_name(sched), V, grad_accum,
			 group, pp, V, grad_accum, (double)(pp - 1) / ((double)V * grad_accum));
	else if (n >= 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, "; %s over %d micro-batches, bubble (%d-1)/%d = "
			 "%.3g)", gk_nn_pp_sched_name(sched), grad_accum, pp, grad_accum,
			 (double)(pp - 1) / grad_accum);
}

void gk_nn_grid_where(char *buf, size_t len, int world, int rank, const gk_nn_train_opts *o)
{
	gk_nn_grid g;
	gk_err ignore;
	int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1;
	if ((tp == 1 && pp == 1) || gk_nn_grid_layout_pp(world, tp, pp, rank, &g, &ignore) < 0)
		snprintf(buf, len, "rank %d", rank);
	else
		snprintf(buf, len, "rank %d (dp %d, pp %d, tp %d)", rank, g.dp_rank, g.pp_rank,
			 g.tp_rank);
}
