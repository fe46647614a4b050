/*
 * pp_shard.c - a pipeline stage's gradient path: its segments of the
 * flat buffer, cut over its data-parallel group, reduced into their
 * owners and gathered after the update (dp.c calls them).
 *
 * A pipeline stage (--pp, ZeRO 0) owns [lo, hi), its range of the flat
 * buffer (gk_nn_pp_range), and the last stage also wte, [0, head), which it
 * shares with the first: its moments are those (hi - lo + head floats,
 * wte's after the range's), its update is of those, and the data-parallel
 * average is of its range's buckets and of wte by one allreduce. The
 * model maps its parameters and gradients lazily, so the stage's memory
 * is its range's; on a GPU the device holds those segments only, each
 * reached from its start (gk_nn_work_grads and the like take the flat
 * offset), never as one range across both. Under ZeRO-1 the stage's
 * segments (its range, and wte apart on the first and last stage) are
 * cut over its data-parallel group (gk_nn_dp's seg and own): each is
 * one reduce-scatter of unequal pieces into their owners after the
 * schedule, the update is of this rank's pieces, and each one
 * all-gather of unequal pieces after it; ZeRO-2 the same in buckets,
 * each bucket's pages outside the rank's pieces given back once it is
 * reduced (pp_shard_reduce); ZeRO-3 the same, its parameters kept as
 * the same pieces too (zero3.c gathers the stage's units from them),
 * with no gather after the update. A tensor-parallel run without --pp
 * under ZeRO-1, 2 or 3 is a pipeline of one stage: one segment, its
 * tensor rank's slices, cut the same way. On GPUs (ZeRO-1 and 2) the
 * same collectives run over the data-parallel group's NCCL communicator
 * (dp.c's gcomm), on the device's gradients and parameters; in bf16 the
 * gather moves the working copy, not the fp32 master. Device memory has
 * no pages to give back, so there a pipeline stage's ZeRO-2 keeps the
 * stage's segments whole and its peak is ZeRO-1's, as on the CPU (and
 * so does its ZeRO-3); a tensor slice's ZeRO-2 and 3 (no --pp) reduce
 * its buckets during backward as without a grid instead (dp.c), and
 * only its update, gather (ZeRO-2's) and checkpoints go through here.
 */
#include <stdlib.h>

#include "nn/train_internal.h"

/*
 * A pipeline stage's segments (the comment of gk_nn_dp's seg): under
 * ZeRO-1 wte is a segment of its own on the first stage as on the last,
 * cut the same way on both, so that the tied embedding's two gradients
 * are summed piece by piece between the same data-parallel ranks of the
 * two stages (their embedding group) and both updates stay the same.
 * Each segment's pieces are equal (the last one shorter, its moments
 * padded), ZeRO-1's ranges over a stage's own parameters.
 */
void gk_nn_dp_pp_piece(const gk_nn_dp *dp, int s, int r, int k, size_t *a, size_t *b)
{
	size_t lo, hi, head;
	if (dp->ppshard) {
		gk_nn_pp_piece(dp->m, s, r, dp->world, k, a, b);
		return;
	}
	gk_nn_pp_range(dp->m, s, &lo, &hi, &head);
	*a = k == 0 ? lo : 0;
	*b = k == 0 ? hi : head;
}

int gk_nn_pp_segments(gk_nn_dp *dp, int pp)
{
	size_t a, b;
	gk_nn_pp_range(dp->m, pp - 1, &a, &b, &dp->wte);
	dp->ppshard = dp->zero && dp->world > 1;
	for (int k = 0; k < 2; k++) {
		gk_nn_dp_pp_piece(dp, dp->pp_stage, 0, k, &dp->seg[k][0], &a);
		gk_nn_dp_pp_piece(dp, dp->pp_stage, dp->world - 1, k, &b, &dp->seg[k][1]);
		gk_nn_dp_pp_piece(dp, dp->pp_stage, dp->rank, k, &dp->own[k][0], &dp->own[k][1]);
		size_t len = dp->seg[k][1] - dp->seg[k][0], W = (size_t)dp->world;
		dp->per[k] = dp->ppshard ? (len + W - 1) / W : len;
		if (!dp->ppshard)
			continue;
		if (!(dp->displ[k] = calloc(W + 1, sizeof(size_t))))
			return -1;
		for (size_t q = 0; q <= W; q++)
			dp->displ[k][q] = q * dp->per[k] < len ? q * dp->per[k] : len;
	}
	return 0;
}

/*
 * --compress: the data-parallel reductions of a stage (or a tensor slice)
 * pack as plain data parallelism's do, over its data-parallel group only
 * (the tensor group's and the pipeline's messages stay f32), and feed
 * back into nresid floats: its segments' one after the other, each
 * indexed from its start. Under ZeRO-0 the range's buckets take seg[0]'s
 * part and the last stage's wte allreduce seg[1]'s; under ZeRO 1 to 3
 * each segment's reduce-scatter (or ZeRO-2's bucket of it) its own. The
 * path an element's partial sums take round the ring is its owner's,
 * whatever the bucket, so ZeRO-2 and 3 keep ZeRO-1's feedback element for
 * element, as without a grid.
 */
size_t gk_nn_pp_resid_len(const gk_nn_dp *dp)
{
	return dp->seg[0][1] - dp->seg[0][0] + dp->seg[1][1] - dp->seg[1][0];
}

float *gk_nn_pp_resid(const gk_nn_dp *dp, int k)
{
	if (!dp->resid || dp->pp_stage < 0)
		return NULL;
	return dp->resid + (k ? dp->seg[0][1] - dp->seg[0][0] : 0);
}

/*
 * A sharded pipeline stage: each segment's pieces averaged into their
 * owners over the data-parallel group, in place (one reduce-scatter of
 * unequal pieces a segment; at 2 ranks each sum is ZeRO-0's allreduce's,
 * a sum of two in either order). Under ZeRO-2 a segment goes in buckets
 * of --bucket floats (each one reduce-scatter of its owners' parts), and
 * once a bucket is reduced its pages outside this rank's piece go back:
 * between the reduction and the next step's backwards the rank holds its
 * pieces of the gradients only (the schedule's messages forbid a
 * collective during it, so the whole stage's gradients still live from
 * its first backward to here). Each element's sum is ZeRO-1's.
 */
int gk_nn_pp_shard_reduce(gk_nn_dp *dp, gk_err *err)
{
	/* on GPUs the device's gradients, over the group's NCCL (whose
	 * gk_nn_grads_release gives nothing back), each segment where the
	 * stage's device holds it */
	gk_comm *c = dp->dev_grads ? dp->gcomm : dp->comm;
	int z2 = dp->zero >= 2;
	for (int k = 0; k < 2; k++) {
		size_t s0 = dp->seg[k][0], s1 = dp->seg[k][1], b1;
		/* element x of the segment at g[x - s0] */
		float *g = dp->dev_grads ? gk_nn_work_grads(dp->m, s0) : gk_nn_grads(dp->m) + s0;
		for (size_t b0 = s0; b0 < s1; b0 = b1) {
			b1 = z2 && s1 - b0 > dp->ppbucket ? b0 + dp->ppbucket : s1;
			const size_t *d = dp->displ[k];
			if (z2) { /* the owners' parts of [b0, b1), from b0 */
				for (int q = 0; q <= dp->world; q++) {
					size_t x = s0 + dp->displ[k][q];
					dp->bdispl[q] = (x < b0 ? b0 : x > b1 ? b1 : x) - b0;
				}
				d = dp->bdispl;
			}
			gk_comm_req *q;
			float *r = gk_nn_pp_resid(dp, k);
			gk_comm_callopts co = {.compress = dp->compress,
					       .residual = r ? r + (b0 - s0) : NULL};
			if (gk_comm_ireduce_scatterv(c, g + (b0 - s0), d, GK_DT_F32, GK_COMM_AVG,
						     &co, &q, err) < 0 ||
			    gk_comm_wait(q, err) < 0)
				return -1;
			if (!z2)
				continue;
			size_t o0 = dp->own[k][0], o1 = dp->own[k][1];
			if (b0 < o0)
				gk_nn_grads_release(dp->m, b0, b1 < o0 ? b1 : o0);
			if (b1 > o1)
				gk_nn_grads_release(dp->m, b0 > o1 ? b0 : o1, b1);
		}
	}
	return 0;
}

int gk_nn_pp_gather_segments(gk_nn_dp *dp, gk_comm *c, void *(*at)(gk_nn_model *, size_t),
			      gk_dtype dt, gk_err *err)
{
	for (int k = 0; k < 2; k++) {
		gk_comm_req *q;
		if (dp->seg[k][1] > dp->seg[k][0] &&
		    (gk_comm_iallgatherv(c, at(dp->m, dp->seg[k][0]), dp->displ[k], dt, &q,
					 err) < 0 ||
		     gk_comm_wait(q, err) < 0))
			return -1;
	}
	return 0;
}

/* element off of the places the gathers write: the working copy (bf16),
 * the fp32 master, a GPU's or the host's */
static void *work_copy_at(gk_nn_model *m, size_t off)
{
	gk_dtype dt;
	return gk_nn_work_copy(m, off, &dt);
}

static void *work_params_at(gk_nn_model *m, size_t off)
{
	return gk_nn_work_params(m, off);
}

void *gk_nn_pp_host_params_at(gk_nn_model *m, size_t off)
{
	return gk_nn_params(m) + off;
}

/*
 * ... and after the update, each owner's pieces of the parameters to all.
 * On GPUs in bf16 the working copy's, which the update rounded from the
 * pieces' master, as shard_gather in dp.c (2 bytes a parameter; the same
 * bits as the master's gather and its rounding): the master stays current
 * in this rank's pieces only until gk_nn_pp_master_gather.
 */
int gk_nn_pp_shard_gather(gk_nn_dp *dp, gk_err *err)
{
	gk_dtype dt;
	if (dp->dev_grads && gk_nn_work_copy(dp->m, 0, &dt)) {
		dp->master_stale = 1;
		return gk_nn_pp_gather_segments(dp, dp->gcomm, work_copy_at, dt, err);
	}
	if (gk_nn_pp_gather_segments(dp, dp->dev_grads ? dp->gcomm : dp->comm,
				     dp->dev_grads ? work_params_at : gk_nn_pp_host_params_at,
				     GK_DT_F32, err) < 0)
		return -1;
	return gk_nn_params_changed(dp->m, err);
}

int gk_nn_pp_master_gather(gk_nn_dp *dp, gk_err *err)
{
	return gk_nn_pp_gather_segments(dp, dp->gcomm, work_params_at, GK_DT_F32, err);
}
