/*
 * dp.c - the gradient path of data parallelism: the world's gradients
 * averaged after backward (ZeRO-0) or each range reduced to the rank
 * that owns it (ZeRO-1, and ZeRO-2 and 3, which keep only that range;
 * ZeRO-3 the parameters' too, gathered around each block's use), the
 * global norm, AdamW on this rank's range of the parameters, and the
 * allgather of the updated ranges.
 *
 * ZeRO-0 (reference: PyTorch DDP's reducer): the flat gradient buffer is
 * cut into buckets from its end, and backward's ready callback starts each
 * bucket's allreduce as soon as its gradients are final, so communication
 * overlaps the rest of backward (lib/comm's gk_comm_grads).
 *
 * ZeRO-1 (reference: DeepSpeed's stage 1, Rajbhandari et al., "ZeRO",
 * SC 2020) reduces and gathers in place, in the model's flat buffers,
 * which the model allocates with Np floats (gk_nn_opts.flat_multiple: the
 * world), so that rank r's range [r per, (r + 1) per) exists on every
 * rank even where it runs past the N parameters: the reduced gradients
 * land in the owner's own range of its gradient buffer, and each rank's
 * updated range is gathered from where it sits in its parameters into
 * everyone's. No copy of either buffer: with two (the reduced gradients
 * and the gathered parameters, 8 bytes a parameter) ZeRO-1 cost more
 * memory than the 8 (1 - 1/world) bytes a parameter that dividing the
 * moments saves, at every world size. Only compression adds a buffer: its
 * error feedback, Np floats, in host memory on the CPU and in device memory
 * from the gradients' communicator on a GPU (counted as comm memory).
 *
 * ZeRO-2 (--zero 2, on the CPU and over NCCL) keeps ZeRO-1's ownership,
 * rank r's contiguous range [r per, (r + 1) per) of the flat buffer padded to Np,
 * so its moments and checkpoints are ZeRO-1's (any stage and world
 * resumes from any other through the same optim-rank files), and shards
 * the gradients too: each bucket, as backward completes it, is one
 * reduce-scatter of unequal pieces (each owner's part of the bucket;
 * lib/comm's gk_comm_ireduce_scatterv, the ring with the owners' blocks)
 * instead of ZeRO-1's reduce per owner, and when it lands the rank adds
 * its piece into its own shard (Np / world floats) and gives the bucket's
 * pages back. DeepSpeed's stage 2 (stage_1_and_2.py, average_tensor)
 * keeps the same contiguous partitions but reduces a bucket with one
 * dist.reduce per owner (its comment calls a bucket contiguous with
 * respect to ranks a future optimisation); PyTorch FSDP's SHARD_GRAD_OP
 * gets one reduce-scatter per unit by padding each unit's flat parameter
 * to the world and giving every rank a slice of every unit, which would
 * scatter a rank's optimizer state over every bucket and tie the
 * checkpoint's layout to the bucket size. One collective of unequal
 * pieces gives both: one call per bucket and ZeRO-1's layout.
 *
 * The model's backward writes into a full-size gradient buffer (its
 * kernels accumulate with beta 1), so under ZeRO-2 that buffer is mapped
 * lazily (gk_nn_opts.lazy_grads): a page takes memory when backward
 * first writes it and goes back (MADV_DONTNEED) once its bucket is summed
 * into the shard, reading as zeros for the next micro-step. Every
 * micro-step's buckets are reduced during its own backward (SUM, copied
 * into the shard on a step's first micro-step and added after), and the
 * division by the world runs once on the last, so accumulation sums into
 * the shard rather than into a full buffer; at most two buckets are in
 * flight while backward fills the next (one, waited at once, without
 * overlap). What the full buffer still holds: the tied embedding's rows,
 * which the LM head writes first and the token embedding last, for the
 * whole of backward, and those buckets (the accounting's comm).
 * Without accumulation the sums are ZeRO-1's element for element where
 * the reduction order is (2 ranks: a sum of two is the same in any
 * order); with it, the sum over micro-steps of the world's sums instead
 * of the world's sum of the micro-steps' sums, equal within fp32
 * rounding.
 *
 * Compressed ZeRO-2: each bucket's reduce-scatter is ZeRO-1's
 * compressed ring over the bucket's pieces (lib/comm's ring_compressed
 * with the pieces as its blocks), feeding back into ZeRO-1's residual
 * (dp->resid, Np floats: every element but the rank's own range is one it
 * packs), each bucket its [lo, hi) of it. An element's partial sums go
 * round the same ring path as in ZeRO-1's one reduce-scatter, so with
 * bf16 and f16 (packed per element) the shard and the feedback are
 * ZeRO-1's bit for bit, and a checkpoint's feedback moves between the two
 * stages; int8's groups follow the pieces. On a GPU the same ring runs
 * over NCCL (ncclSend/ncclRecv, the packing and the feedback kernels on
 * the device, comm_nccl.c) instead of the bucket's group of reduces, with
 * the residual in device memory: the CPU's values, and GPU ZeRO-1's
 * --compress bit for bit, in the same layout.
 *
 * ZeRO-3's parameter units are zero3.c's, a sharded pipeline stage's
 * reduction and gather pp_shard.c's.
 *
 * On a GPU with more than one rank the gradients are reduced where they
 * are: a second communicator, of lib/comm's nccl backend, takes the
 * device's gradient buffer, and each bucket is queued on NCCL's stream
 * behind the backward kernels that produce it (comm.h's stream contract).
 * --comm mpi (or no usable NCCL, under --comm auto) sends them through
 * the host instead: downloaded after backward, allreduced by the same
 * buckets, uploaded. ZeRO-1 on GPUs runs over the NCCL communicator, on
 * the device's buffers (each bucket one reduce-scatter of its owners'
 * pieces, as ZeRO-2's without the shard: gk_comm_grads_shard), and so
 * does ZeRO-2: each bucket's reduce-scatter
 * of unequal pieces is one group of ncclReduce calls, one per owner, in
 * place (comm_nccl.c says why not padded equal pieces), and the piece is
 * summed into the shard in device memory. Device memory has no pages to
 * map lazily, so the GPU model is made without a full gradient buffer
 * (gk_nn_opts.bucket_grads) and backward writes into the buffers
 * gk_nn_grad_buckets makes for the buckets: the embeddings' [0, head),
 * written first by the tied head and last by the encoder, for the whole
 * of backward (the CPU's buffer holds them so too), and above it
 * ZERO2_DEPTH + 1 bucket buffers used in turn (one without overlap). A
 * kernel writes a whole tensor into one buffer, so the buckets above the
 * embeddings are cut at layers (gk_comm_grads_cuts: as many whole blocks
 * as fit in the bucket size, or one), and the buffer of bucket b is b's
 * turn in the ring. Before backward writes a bucket into a buffer, the
 * one before it there is retired: the host waits for its reduction (the
 * watchdog's wait) and its sum into the shard and its zeroing go on the
 * model's stream (lib/comm's gk_comm_grads_place). Without accumulation
 * the sums are ZeRO-1's, a reduce to each owner and the one division:
 * bit for bit on 2 ranks, on more as NCCL orders a piece's sum (its
 * order may follow the count).
 *
 * A tensor slice (--tp without --pp, a data-parallel group of two or more)
 * is a pipeline stage of one for its ownership (pp_shard.c: one segment,
 * the pieces ZeRO-1's ranges of its flat buffer), and on a GPU its ZeRO-2
 * is this one: its buckets, its shard (its piece), and the update, the norm
 * and the int8 agreement of the tensor group's replicas (tp_replicated)
 * read the shard. So is its ZeRO-3's (dp->zero2 beside dp->stage3): the
 * piece that zero3.c gathers its parameters from, and that the fp32 master
 * keeps (gk_nn_pp_piece), is the shard's range, so the update reads the
 * shard there as ZeRO-2's does, and the device holds ZeRO-2's gradients
 * rather than the whole slice's buffer. The replicated tensors need nothing
 * of their own: before a bucket is reduced their gradients are the same on
 * every rank of the group (computed from its summed values; a
 * sequence-parallel LayerNorm's summed over the group inside backward), and
 * after it each rank's piece lies at the same offsets on each. A pipeline
 * stage accumulates its gradients over its whole schedule, so under --pp
 * they stay whole and are reduced after it (pp_shard.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/train_internal.h"

/* ZeRO-2's gradient buckets in flight while backward runs */
#define ZERO2_DEPTH 2

int gk_nn_dp_flat_multiple(const gk_nn_train_opts *o, int world)
{
	return o->zero ? world : 1;
}

int gk_nn_dp_lazy_grads(const gk_nn_train_opts *o, int world, int cuda)
{
	return o->zero >= 2 && world > 1 && !cuda;
}

int gk_nn_dp_bucket_grads(const gk_nn_train_opts *o, int world, int cuda)
{
	/* on a GPU ZeRO-2 and 3 shard over NCCL, or the run stops
	 * (open_grad_comm); a tensor slice's (--tp) too when its
	 * data-parallel group has ranks to cut it over (one has nothing to
	 * shard: its slices reduce as ZeRO-0's); a pipeline stage (--pp)
	 * accumulates the gradients of its whole schedule, and reduces its
	 * pieces after it (pp_shard.c) */
	if (o->zero < 2 || !cuda || o->pp > 1)
		return 0;
	if (o->tp > 1)
		return world > 1 && o->comm != GK_COMM_BACKEND_MPI;
	return world > 1 ? o->comm != GK_COMM_BACKEND_MPI : o->comm == GK_COMM_BACKEND_NCCL;
}

/*
 * ZeRO-2's gradient memory on a rank: its shard (per floats, kept across
 * the step) and what the full buffer holds at most during backward
 * (transient): the tied embedding's rows, which the LM head writes first
 * and the token embedding last, so that they live through the whole of
 * backward (head floats from the buffer's start), and the buckets: depth
 * in flight and the one backward fills; never more than the buffer.
 */
void gk_nn_dp_zero2_bytes(size_t nflat, int world, size_t head, size_t bucket_bytes,
			  int overlap, uint64_t *shard, uint64_t *transient)
{
	size_t pg = gk_nn_grad_page(), per = nflat / (size_t)world;
	size_t bucket = (bucket_bytes ? bucket_bytes : (size_t)25 << 20) / sizeof(float);
	bucket = (bucket + pg - 1) / pg * pg;
	uint64_t all = (nflat + pg - 1) / pg * pg;
	uint64_t live = (head + pg - 1) / pg * pg + (uint64_t)(overlap ? ZERO2_DEPTH + 1 : 1) * bucket;
	*shard = ((uint64_t)per * sizeof(float) + 63) / 64 * 64;
	*transient = (live < all ? live : all) * sizeof(float);
}

size_t gk_nn_dp_moments_len(const gk_nn_dp *dp)
{
	return dp->pp_stage >= 0 ? dp->per[0] + dp->per[1] : dp->hi - dp->lo;
}

/*
 * Offloaded, the moments a checkpoint of a grid puts together (pp_sched.c
 * and checkpoint.c send and gather them from dp->mom and dp->vel): read
 * back from the file for the while, as the checkpoint of plain data
 * parallelism copies its range from it; gk_nn_dp_moments_drop gives them
 * back. Without offload both do nothing.
 */
int gk_nn_dp_moments_load(gk_nn_dp *dp, gk_err *err)
{
	if (!dp->off)
		return 0;
	size_t n = gk_nn_dp_moments_len(dp);
	if (!(dp->mom = gk_alloc_big((n + 1) * sizeof(float))) ||
	    !(dp->vel = gk_alloc_big((n + 1) * sizeof(float)))) {
		gk_nn_dp_moments_drop(dp);
		return gk_err_sys(err, ENOMEM, "checkpoint: the offloaded moments' copy");
	}
	if (gk_nn_offload_read(dp->off, 0, 0, n, dp->mom, err) < 0 ||
	    gk_nn_offload_read(dp->off, 1, 0, n, dp->vel, err) < 0) {
		gk_nn_dp_moments_drop(dp);
		return -1;
	}
	return 0;
}

void gk_nn_dp_moments_drop(gk_nn_dp *dp)
{
	if (!dp->off)
		return;
	free(dp->mom);
	free(dp->vel);
	dp->mom = dp->vel = NULL;
}

size_t gk_nn_dp_lo(const gk_nn_dp *dp)
{
	return dp->lo < dp->N ? dp->lo : dp->N;
}

size_t gk_nn_dp_hi(const gk_nn_dp *dp)
{
	return dp->hi < dp->N ? dp->hi : dp->N;
}
int gk_nn_dp_new(gk_nn_dp **out, gk_nn_trainer *t, gk_err *err)
{
	gk_nn_dp *dp = *out = calloc(1, sizeof(*dp));
	if (!dp)
		return gk_err_sys(err, ENOMEM, "optimizer state");
	dp->m = t->m;
	dp->t = t;
	dp->host_update = t->cuda && t->o.offload_host;
	dp->comm = dp->gcomm = t->grid.dpc;
	/* a tensor-parallel run under ZeRO-1, 2 or 3 is the one stage of a
	 * pipeline of one: its slices cut over its data-parallel group by the same
	 * pieces (gk_nn_dp_pp_piece), reduced, updated, gathered, put together
	 * for a checkpoint and read back as a pipeline stage's are */
	dp->pp_stage = t->grid.pp > 1 ? t->grid.pp_rank : t->grid.tp > 1 && t->o.zero ? 0 : -1;
	dp->rank = t->grid.dp_rank;
	dp->world = t->grid.dp;
	dp->zero = t->o.zero;
	dp->compress = t->o.compress;
	dp->block_at = t->o.test_block_step;
	dp->N = gk_nn_nparams(t->m);
	if (dp->pp_stage >= 0) {
		/* a pipeline stage: its own range, and the last stage the wte
		 * it shares with the first, are all its update touches */
		dp->Np = dp->N;
		gk_nn_pp_range(t->m, dp->pp_stage, &dp->lo, &dp->hi, &dp->head);
		if (gk_nn_pp_segments(dp, t->grid.pp) < 0)
			return gk_err_sys(err, ENOMEM, "optimizer state");
	} else if (dp->zero) {
		dp->Np = (dp->N + (size_t)dp->world - 1) / (size_t)dp->world * (size_t)dp->world;
		size_t per = dp->Np / (size_t)dp->world;
		dp->lo = (size_t)dp->rank * per;
		dp->hi = dp->lo + per;
	} else {
		dp->Np = dp->N;
		dp->lo = 0;
		dp->hi = dp->N;
	}
	/* --offload optimizer:DIR: the moments in a file, streamed (offload.c);
	 * a run that trains nothing (--eval-only, --steps 0) makes none */
	size_t nm = gk_nn_dp_moments_len(dp);
	if (t->o.offload_dir && !t->o.eval_only && t->o.steps > 0)
		return gk_nn_offload_open(&dp->off, t->o.offload_dir, t->rank, nm,
					  t->o.offload_chunk, err);
	dp->mom = gk_alloc_big((nm + 1) * sizeof(float));
	dp->vel = gk_alloc_big((nm + 1) * sizeof(float));
	return dp->mom && dp->vel ? 0 : gk_err_sys(err, ENOMEM, "optimizer state");
}

/*
 * The gradients' communicator (--comm). On the CPU, and on a GPU with
 * --comm mpi, it is the data-parallel group's, over host memory. On a GPU
 * with more than one rank in the group (or --comm nccl, in a group of one
 * too) it is a communicator of the nccl backend on this rank's device, on
 * the model's stream: the world's without a grid, in one (--pp) the
 * group's, opened over its host communicator. When NCCL cannot start on
 * some rank, every rank of the world learns it here (a second vote over
 * the world's, whatever the nccl bootstrap already agreed): auto falls
 * back to the host path with a note, nccl fails.
 */
static int open_grad_comm(gk_nn_dp *dp, gk_nn_trainer *t, gk_err *err)
{
	gk_comm_backend want = t->o.comm;
	if (!t->cuda) {
		if (want == GK_COMM_BACKEND_NCCL)
			return gk_errf(err, "--comm nccl reduces gradients on a GPU, and the "
				       "model is on the CPU%s%s", t->device_note[0] ? ": " : "",
				       t->device_note);
		return 0;
	}
	if (want == GK_COMM_BACKEND_MPI && dp->zero && dp->world > 1)
		return gk_errf(err, "--zero %d on a GPU shards over NCCL: not with --comm mpi",
			       dp->zero);
	if (want == GK_COMM_BACKEND_MPI || (want == GK_COMM_BACKEND_AUTO && dp->world == 1))
		return 0;
	gk_comm_config cc = {.backend = GK_COMM_BACKEND_NCCL, .device = t->dev,
			     .timeout = t->o.timeout, .trace_dir = t->o.trace_dir};
	gk_comm *g = NULL;
	gk_err why = {0};
	/* in a grid (--pp, --tp) over the data-parallel group's ranks only, opened
	 * over its host communicator; without one over the world's */
	int ok = (t->grid.dpc != t->comm ? gk_comm_open_device(t->grid.dpc, &cc, &g, &why)
					   : gk_comm_open(&g, &cc, &why)) == 0 &&
		 gk_comm_set_stream(g, gk_nn_stream(dp->m), &why) == 0;
	double v = ok;
	if (gk_nn_tr_sum(t, &v, 1, err) < 0) {
		gk_comm_close(g);
		return -1;
	}
	if (ok && v == t->world) {
		dp->gcomm = g;
		dp->dev_grads = 1;
		return 0;
	}
	gk_comm_close(g); /* NULL when it did not open */
	if (ok)
		snprintf(why.msg, sizeof(why.msg), "%d of %d ranks could not start NCCL",
			 t->world - (int)v, t->world);
	if (want == GK_COMM_BACKEND_NCCL)
		return gk_errf(err, "--comm nccl: %s", why.msg);
	if (dp->zero)
		return gk_errf(err, "--zero %d on a GPU shards over NCCL, and %s", dp->zero,
			       why.msg);
	snprintf(dp->note, sizeof(dp->note),
		 "%s; gradients go through host memory over MPI", why.msg);
	return 0;
}

/* element off of the flat gradients the reduction and the optimizer
 * read: where the model computes when they are reduced there (on a
 * pipeline stage's GPU in its segment), else the host's */
static float *flat_grads(gk_nn_dp *dp, size_t off)
{
	return dp->dev_grads ? gk_nn_work_grads(dp->m, off) : gk_nn_grads(dp->m) + off;
}

/* ZeRO-2: a bucket's gradients are reduced and summed into the shard:
 * their pages go back to the kernel */
static void release_cb(size_t lo, size_t hi, void *ctx)
{
	gk_nn_dp *dp = ctx;
	gk_nn_grads_release(dp->m, lo, hi);
}

/* ZeRO-2 on a GPU: where a bucket's gradients are (the model's buffers) */
static float *bucket_at(size_t lo, void *ctx)
{
	gk_nn_dp *dp = ctx;
	return gk_nn_grad_at(dp->m, lo);
}

/*
 * ZeRO-2 on a GPU (bucket_grads): the buckets above the embeddings hold
 * whole layers (the final norm's, each block's edges), so that every
 * tensor backward writes lies in one bucket buffer; the model's buffers
 * are then made for them: the embeddings' [0, head), which backward
 * writes first and last, and one buffer for each bucket in flight and the
 * one being filled (or one, without overlap), used in turn.
 */
static int device_buckets(gk_nn_dp *dp, gk_nn_trainer *t, gk_err *err)
{
	int L = (int)t->cfg.layers;
	size_t *cut = calloc((size_t)L + 2, sizeof(*cut)), head, hi, n = 0;
	if (!cut)
		return gk_err_sys(err, ENOMEM, "ZeRO-2 gradient buckets");
	gk_nn_block_range(dp->m, 0, &head, &hi);
	for (int l = 0; l < L; l++)
		gk_nn_block_range(dp->m, l, &cut[n++], &hi);
	cut[n++] = hi; /* the final norm's start */
	if (dp->N > hi)
		cut[n++] = dp->N;
	int rc = gk_comm_grads_cuts(dp->grads, cut, n, head, err);
	free(cut);
	return rc;
}

static int device_buffers(gk_nn_dp *dp, gk_err *err)
{
	size_t nb = gk_comm_grads_buckets(dp->grads), hi, head, x;
	size_t *lo = calloc(nb ? nb : 1, sizeof(*lo)), above = 0;
	if (!lo)
		return gk_err_sys(err, ENOMEM, "ZeRO-2 gradient buckets");
	gk_nn_block_range(dp->m, 0, &head, &x);
	for (size_t b = 0; b < nb; b++) {
		gk_comm_grads_bucket(dp->grads, b, &lo[b], &hi);
		above += lo[b] >= head;
	}
	size_t nslot = dp->overlap ? ZERO2_DEPTH + 1 : 1;
	int rc = gk_nn_grad_buckets(dp->m, head, lo, nb, nslot < above ? nslot : above ? above : 1,
				    err);
	free(lo);
	if (rc == 0)
		gk_comm_grads_place(dp->grads, bucket_at, dp);
	return rc;
}

/* this rank's range of the reduced gradients: ZeRO-2's shard, or where
 * ZeRO-1 reduces it in the flat buffer */
static float *shard_grads(gk_nn_dp *dp)
{
	return dp->gshard ? dp->gshard : flat_grads(dp, dp->lo);
}

/*
 * ZeRO-1, 2 and 3 with --compress: the error feedback, Np floats, zero. A
 * rank packs every element of the padded buffer but its own range (the
 * ring's partial sums it forwards), and keeps the error of each in the
 * element's place: ZeRO-1's one reduce-scatter and ZeRO-2's buckets (each
 * the bucket's [lo, hi) of it; ZeRO-3's gradients are ZeRO-2's) keep the
 * same values in the same layout, so a resume between them restores it.
 * Its own range stays zero. A pipeline stage's, or a tensor slice's under
 * ZeRO 1 to 3, is its segments' (gk_nn_pp_resid), at any ZeRO stage.
 */
static int shard_buffers(gk_nn_dp *dp, gk_err *err)
{
	dp->nresid = dp->pp_stage >= 0 ? gk_nn_pp_resid_len(dp) : dp->Np;
	size_t bytes = dp->nresid * sizeof(float);
	if (dp->compress == GK_COMM_COMPRESS_NONE)
		return 0;
	if (!dp->dev_grads)
		return (dp->resid = gk_alloc_big(bytes)) ? 0 :
			gk_err_sys(err, ENOMEM, "ZeRO-1 error feedback");
	float *zero = calloc(dp->nresid, sizeof(float));
	if (!zero)
		return gk_err_sys(err, ENOMEM, "ZeRO-1 error feedback");
	int rc = (dp->resid = gk_comm_alloc(dp->gcomm, bytes, err)) &&
		 gk_comm_to_device(dp->gcomm, dp->resid, zero, bytes, err) == 0 ? 0 : -1;
	free(zero);
	return rc;
}

/*
 * ZeRO-2's gradient shard: host memory on the CPU; on a GPU device memory
 * of the gradients' communicator, zeroed (the range past the N
 * parameters is never written), and the host copy --offload optimizer
 * updates from.
 */
static int zero2_shard(gk_nn_dp *dp, size_t per, gk_err *err)
{
	size_t bytes = per * sizeof(float);
	if (!dp->dev_grads)
		return (dp->gshard = gk_alloc_big(bytes)) ? 0 :
			gk_err_sys(err, ENOMEM, "ZeRO-2 gradient shard");
	float *zero = calloc(per, sizeof(float));
	if (!zero)
		return gk_err_sys(err, ENOMEM, "ZeRO-2 gradient shard");
	int rc = (dp->gshard = gk_comm_alloc(dp->gcomm, bytes, err)) &&
		 gk_comm_to_device(dp->gcomm, dp->gshard, zero, bytes, err) == 0 ? 0 : -1;
	free(zero);
	if (rc == 0 && dp->host_update && !(dp->hshard = gk_alloc_big(bytes)))
		return gk_err_sys(err, ENOMEM, "ZeRO-2 gradient shard on the host");
	return rc;
}

int gk_nn_dp_open(gk_nn_dp *dp, gk_nn_trainer *t, gk_err *err)
{
	if (open_grad_comm(dp, t, err) < 0)
		return -1;
	dp->via_host = t->cuda && !dp->dev_grads;
	dp->overlap = t->o.overlap;
	/* a pipeline stage (or tensor slice) whose data-parallel group is
	 * one rank has nothing to cut: its segments reduce as ZeRO-0's */
	dp->shard = dp->zero && (t->cuda ? dp->dev_grads : dp->world > 1) &&
		    (dp->pp_stage < 0 || dp->ppshard);
	/* (a pipeline stage's data-parallel group reduces its segments under
	 * ZeRO-0 too) */
	int stage = dp->pp_stage >= 0 && (dp->world > 1 || dp->dev_grads);
	if ((dp->shard || stage) && shard_buffers(dp, err) < 0)
		return -1;
	/*
	 * Gradient buckets, overlapped with backward: allreduced, or with
	 * ZeRO-1 reduced to the ranks that own them, in place.
	 * Compressed ZeRO-1 keeps its one reduce-scatter after backward (its
	 * error feedback runs over the whole padded buffer); compressed
	 * ZeRO-2 reduces each bucket with the same ring and the same feedback,
	 * the bucket's part of it.
	 */
	int sharded = dp->shard && dp->compress == GK_COMM_COMPRESS_NONE;
	/* a tensor slice's pieces are ZeRO-1's ranges of its flat buffer */
	size_t per = dp->ppshard ? dp->per[0] : dp->Np / (size_t)dp->world;
	/* a sharded pipeline stage's ZeRO-2 is its own (pp_shard_reduce); a
	 * tensor slice's on a GPU is this one, into its one segment's pieces
	 * (gk_nn_dp_bucket_grads) */
	dp->zero2 = dp->shard && dp->zero >= 2 &&
		    (!dp->ppshard || gk_nn_dp_bucket_grads(&t->o, dp->world, t->cuda));
	dp->zero3 = dp->shard && dp->zero == 3 && !dp->ppshard;
	dp->stage3 = dp->zero == 3 && dp->ppshard;
	if (dp->ppshard) {
		size_t pg = gk_nn_grad_page();
		dp->ppbucket = (t->o.bucket_bytes ? t->o.bucket_bytes : (size_t)25 << 20) /
			       sizeof(float);
		dp->ppbucket = (dp->ppbucket + pg - 1) / pg * pg;
		if (!(dp->bdispl = calloc((size_t)dp->world + 1, sizeof(size_t))))
			return gk_err_sys(err, ENOMEM, "ZeRO-2 gradient buckets");
	}
	if ((dp->zero3 || dp->stage3) && gk_nn_z3_open(dp, t, err) < 0)
		return -1;
	/*
	 * int8 over a tensor group: its replicas agree (tp_replicated), on
	 * the CPU through a buffer of them, on a GPU in place. The buffer is
	 * as large on every rank, the largest rank's (its pieces hold the
	 * most replicated elements): lib/mem's gk_mem_tp_replicas, a figure
	 * mem-estimate states without knowing the rank.
	 */
	if (t->grid.tpc && dp->compress == GK_COMM_COMPRESS_INT8 && dp->world > 1) {
		/* this rank's reduced gradients: a stage's pieces, or all */
		size_t all[2][2] = {{0, dp->N}, {0, 0}};
		memcpy(dp->tprange, dp->pp_stage >= 0 ? dp->own : all, sizeof(all));
		dp->tpsync = 1;
		for (int q = 0; !t->cuda && q < (dp->ppshard ? dp->world : 1); q++) {
			size_t r[2][2], n;
			memcpy(r, dp->tprange, sizeof(r));
			for (int k = 0; dp->ppshard && k < 2; k++)
				gk_nn_dp_pp_piece(dp, dp->pp_stage, q, k, &r[k][0], &r[k][1]);
			n = gk_nn_tp_replicas(dp->m, (const size_t(*)[2])r, NULL, 0);
			dp->ntp = n > dp->ntp ? n : dp->ntp;
		}
		if (!t->cuda && !(dp->tpbuf = malloc((dp->ntp ? dp->ntp : 1) * sizeof(float))))
			return gk_err_sys(err, ENOMEM, "int8 compression over a tensor group");
	}
	if (dp->zero2 && zero2_shard(dp, per, err) < 0)
		return -1;
	/* a sharded pipeline stage reduces its segments after the schedule */
	if ((dp->world > 1 || dp->dev_grads) && (!dp->shard || sharded || dp->zero2) &&
	    (!dp->ppshard || dp->zero2)) {
		/* ZeRO-2's buckets feed back into ZeRO-1's residual (dp->resid,
		 * Np floats, the same layout), a pipeline stage's into its
		 * range's (gk_nn_pp_resid); ZeRO-0's keep their own */
		gk_comm_callopts co = {.compress = dp->compress,
				       .residual = dp->zero2 ? dp->resid : gk_nn_pp_resid(dp, 0)};
		/* a pipeline stage's range only (the last stage's wte after) */
		size_t g0 = dp->pp_stage >= 0 ? dp->lo : 0;
		size_t gn = dp->pp_stage >= 0 ? dp->hi - dp->lo : dp->N;
		float *g = flat_grads(dp, g0);
		if (gk_comm_grads_new(&dp->grads, dp->gcomm, g, gn, t->o.bucket_bytes, &co,
				      err) < 0)
			return -1;
		/*
		 * ZeRO-2: two buckets in flight while backward fills the next
		 * (mem-estimate's dp_buckets), or each reduced as soon as
		 * it is complete when communication does not overlap.
		 */
		int dev = dp->zero2 && gk_nn_dp_bucket_grads(&t->o, dp->world, t->cuda);
		if (dev && device_buckets(dp, t, err) < 0)
			return -1;
		if (dp->zero2 ? gk_comm_grads_partition(dp->grads, dp->gshard, per,
							gk_nn_grad_page(),
							dp->overlap ? ZERO2_DEPTH : 0,
							release_cb, dp, err) < 0
			      : sharded && gk_comm_grads_shard(dp->grads, g, per, err) < 0)
			return -1;
		if (dev && device_buffers(dp, err) < 0)
			return -1;
	}
	return 0;
}

void gk_nn_dp_free(gk_nn_dp *dp)
{
	if (!dp)
		return;
	gk_comm_grads_free(dp->grads);
	if (dp->dev_grads && dp->resid)
		gk_comm_free(dp->gcomm, dp->resid);
	else
		free(dp->resid);
	if (dp->dev_grads && dp->gshard)
		gk_comm_free(dp->gcomm, dp->gshard);
	else
		free(dp->gshard);
	free(dp->hshard);
	free(dp->tpbuf);
	if (dp->gcomm != dp->comm)
		gk_comm_close(dp->gcomm); /* before the model's stream goes */
	free(dp->mom);
	free(dp->vel);
	gk_nn_offload_close(dp->off);
	free(dp->ulo);
	free(dp->uhi);
	free(dp->udispl);
	free(dp->ureq);
	free(dp->ustate);
	free(dp->useq);
	free(dp->useg);
	free(dp->displ[0]);
	free(dp->displ[1]);
	free(dp->bdispl);
	free(dp);
}

uint64_t gk_nn_dp_comm_bytes(const gk_nn_dp *dp)
{
	uint64_t b = 0;
	if (dp->grads && dp->compress != GK_COMM_COMPRESS_NONE && !dp->resid)
		b += (uint64_t)dp->N * sizeof(float); /* the buckets' error feedback */
	/* ZeRO-1's, 2's and 3's feedback, and the ring's two wire buffers
	 * (host memory on the CPU, the communicator's device memory on a
	 * GPU): of a block of the whole buffer (ZeRO-1) or a piece of a
	 * bucket (ZeRO-2 and 3, within one owner's range: at most as large);
	 * a world of one sends nothing */
	if (dp->resid && dp->pp_stage >= 0) /* a stage's: its segments' */
		b += (uint64_t)dp->nresid * sizeof(float) +
		     (dp->ppshard ? gk_comm_compress_scratch(dp->compress,
							     dp->per[0] > dp->per[1] ? dp->per[0]
										     : dp->per[1])
				  : 0);
	else if (dp->resid)
		b += (uint64_t)dp->Np * sizeof(float) +
		     (dp->world > 1 ? gk_comm_compress_scratch(dp->compress,
							       dp->Np / (size_t)dp->world) : 0);
	/* int8 over a tensor group on the CPU: the replicas' buffer */
	if (dp->tpbuf)
		b += (uint64_t)dp->ntp * sizeof(float);
	return b;
}

static int ready_cb(size_t off, void *ctx, gk_err *err)
{
	gk_nn_dp *dp = ctx;
	double t0 = gk_now();
	if (dp->comm_start == 0)
		dp->comm_start = t0;
	int rc = gk_comm_grads_ready(dp->grads, off, err);
	/* ZeRO-2 waits here for the buckets it retires: backward stands still */
	if (dp->zero2)
		dp->bwd_wait += gk_now() - t0;
	return rc;
}

gk_nn_ready_fn gk_nn_dp_ready_fn(const gk_nn_dp *dp, int last)
{
	/* ZeRO-2 reduces every micro-step's buckets during its backward (with
	 * or without overlap): the full gradients never exist at once */
	if (dp->zero2)
		return ready_cb;
	return last && dp->grads && dp->overlap && !dp->via_host ? ready_cb : NULL;
}

int gk_nn_dp_micro_begin(gk_nn_dp *dp, int a, int accum, gk_err *err)
{
	if (dp->zero2)
		gk_comm_grads_micro(dp->grads, a == 0, a == accum - 1);
	/*
	 * ZeRO-3: the embeddings and the final norm with the tied head, used
	 * first and last by every micro-step, are gathered for the whole
	 * step (released after its last backward); the first block's gather
	 * starts with them. A pipeline calls this once, before its schedule.
	 */
	return dp->zero3 || dp->stage3 ? gk_nn_z3_edges(dp, err) : 0;
}

int gk_nn_dp_micro_end(gk_nn_dp *dp, int a, int accum, gk_err *err)
{
	/*
	 * ZeRO-2 before another micro-step: every bucket summed into the
	 * shard and released, so that the next backward writes into zeros
	 * (the last micro-step's finish is gk_nn_dp_reduce's, which divides).
	 */
	if (dp->zero2 && a < accum - 1) {
		double t0 = gk_now();
		int rc = gk_comm_grads_finish(dp->grads, err);
		dp->bwd_wait += gk_now() - t0;
		return rc;
	}
	return 0;
}

/*
 * Compressed ZeRO-1: this rank's range of the averaged gradients, in
 * place, after backward (compressed as --compress says, with error
 * feedback over the whole padded buffer; the other ranges are left
 * undefined, and the next step zeroes them). Uncompressed, the gradient
 * buckets reduce each range to its owner during backward instead.
 */
static int shard_reduce(gk_nn_dp *dp, gk_err *err)
{
	float *g = flat_grads(dp, 0);
	gk_comm_callopts co = {.compress = dp->compress, .residual = dp->resid};
	return gk_comm_reduce_scatter(dp->gcomm, g, g + dp->lo, dp->Np / (size_t)dp->world,
				      GK_DT_F32, GK_COMM_AVG, &co, err);
}

/*
 * int8 under tensor parallelism: GK_COMM_INT8_GROUP elements share a
 * scale, and a group may hold a split tensor's elements, which differ
 * between the ranks of a tensor group, beside a replicated tensor's
 * (LayerNorms, the row-parallel biases, wpe), whose gradients do not:
 * their reduced gradients would differ between the group's ranks, and so
 * would the replicas. The group's rank 0's are taken by all, an exact
 * broadcast over the tensor group of what this rank reduced of them (the
 * same pieces on every rank of the group): on the CPU one, through
 * dp->tpbuf; on a GPU over the group's NCCL communicator, in place in
 * the device's gradients, after the reduction on the same stream (and
 * after the upload of those reduced through the host). bf16 and f16 pack
 * each element alone, and the same values on the same path round alike:
 * nothing to do. A tensor slice's ZeRO-2 on a GPU holds this rank's
 * reduced gradients in its shard: the broadcasts run there, in place
 * (the same pieces, at the same offsets, on every rank of the group).
 */
static int tp_replicated(gk_nn_dp *dp, gk_err *err)
{
	float *at = dp->zero2 && dp->dev_grads ? dp->gshard : NULL;
	return dp->tpsync ? gk_nn_tp_agree_replicas(dp->m, dp->tprange, dp->tpbuf, at, err) : 0;
}

int gk_nn_dp_reduce(gk_nn_dp *dp, double now, gk_err *err)
{
	/* tests: a step that cannot finish, as one spinning in an allocator
	 * that fails forever; signals are still delivered, and return here */
	if (dp->block_at && ++dp->reduces == dp->block_at)
		for (;;)
			pause();
	if (dp->ppshard && !dp->zero2) {
		dp->comm_start = now;
		if (dp->stage3) /* the schedule's last backward is done */
			gk_nn_z3_step_done(dp);
		return gk_nn_pp_shard_reduce(dp, err) < 0 ? -1 : tp_replicated(dp, err);
	}
	if (dp->grads) {
		if (dp->via_host && gk_nn_download(dp->m, GK_NN_GRADS, err) < 0)
			return -1;
		if (!dp->overlap || dp->via_host) {
			dp->comm_start = now;
			if (gk_comm_grads_ready(dp->grads, 0, err) < 0)
				return -1;
		}
		/* a pipeline's last stage: the head's part of wte, averaged as
		 * the buckets are (through the host, before the gradients go
		 * back up; compressed, on its own part of the feedback) */
		gk_comm_callopts co = {.compress = dp->compress, .residual = gk_nn_pp_resid(dp, 1)};
		if (gk_comm_grads_finish(dp->grads, err) < 0 ||
		    (dp->head && gk_comm_allreduce(dp->gcomm, flat_grads(dp, 0), flat_grads(dp, 0),
						   dp->head, GK_DT_F32, GK_COMM_AVG, &co, err) < 0) ||
		    (dp->via_host && gk_nn_upload(dp->m, GK_NN_GRADS, err) < 0))
			return -1;
		if (dp->zero3 || dp->stage3) /* the step's last backward is done */
			gk_nn_z3_step_done(dp);
		if (tp_replicated(dp, err) < 0)
			return -1;
	} else if (dp->shard) {
		dp->comm_start = now;
		if (shard_reduce(dp, err) < 0)
			return -1;
	}
	return 0;
}

int gk_nn_dp_local_sumsq(gk_nn_dp *dp, double *ss, gk_err *err)
{
	*ss = 0;
	if (dp->ppshard && dp->zero2) {
		/* a tensor slice's shard: its replicated tensors once a group */
		size_t a = dp->own[0][0], b = dp->own[0][1];
		return b > a ? gk_nn_work_sumsq_once(dp->m, dp->gshard, a, b, ss, err) : 0;
	}
	if (dp->ppshard) {
		/* the stage's pieces; wte's on the first stage only (on GPUs
		 * the device's); a tensor group's replicated tensors once */
		for (int k = 0; k < (dp->pp_stage == 0 ? 2 : 1); k++) {
			size_t a = dp->own[k][0], b = dp->own[k][1];
			double s = 0;
			if (!dp->dev_grads)
				s = gk_nn_pp_sumsq(dp->m, a, b);
			else if (b > a && gk_nn_work_sumsq_once(dp->m, NULL, a, b, &s, err) < 0)
				return -1;
			*ss += s;
		}
		return 0;
	}
	if (!dp->shard)
		return 0;
	size_t lo = gk_nn_dp_lo(dp);
	return gk_nn_work_sumsq(dp->m, shard_grads(dp), gk_nn_dp_hi(dp) - lo, ss, err);
}

int gk_nn_dp_norm(gk_nn_dp *dp, double ss_sum, double *norm, gk_err *err)
{
	if (dp->shard) {
		*norm = sqrt(ss_sum);
		return 0;
	}
	return gk_nn_grad_norm(dp->m, norm, err);
}

/*
 * ZeRO-1: every rank's updated range into every rank's parameters, in
 * place. On a GPU in bf16 (reference: llm.c's and DeepSpeed's stage 1
 * and 2 gather the 16-bit parameters) the working copy's, which the
 * update rounded from the range's master (gk_nn_work_copy): 2 bytes a
 * parameter instead of 4, and the same bits the master's gather and its
 * rounding gave, as every rank rounds its range as the others would.
 * The fp32 master stays sharded as ZeRO-1's moments are, current in this
 * rank's range only, until a checkpoint gathers it whole
 * (gk_nn_dp_master_full). fp32 and tf32 gather the master, which is the
 * working copy there.
 */
static int shard_gather(gk_nn_dp *dp, gk_err *err)
{
	size_t per = dp->Np / (size_t)dp->world;
	gk_dtype dt;
	char *w = gk_nn_work_copy(dp->m, 0, &dt);
	if (w) {
		size_t es = gk_dtype_bits(dt) / 8;
		dp->master_stale = dp->world > 1;
		return gk_comm_allgather(dp->gcomm, w + dp->lo * es, w, per, dt, NULL, err);
	}
	float *p = gk_nn_work_params(dp->m, 0);
	if (gk_comm_allgather(dp->gcomm, p + dp->lo, p, per, GK_DT_F32, NULL, err) < 0)
		return -1;
	return gk_nn_params_changed(dp->m, err);
}

int gk_nn_dp_master_full(gk_nn_dp *dp, gk_err *err)
{
	if (!dp->master_stale)
		return 0;
	size_t per = dp->Np / (size_t)dp->world;
	float *p = gk_nn_work_params(dp->m, 0);
	/* (the working copy is already the rounding of what arrives) */
	if (dp->ppshard ? gk_nn_pp_master_gather(dp, err) < 0 :
	    gk_comm_allgather(dp->gcomm, p + dp->lo, p, per, GK_DT_F32, NULL, err) < 0)
		return -1;
	dp->master_stale = 0;
	return 0;
}

/*
 * ZeRO-Offload (Ren et al., "ZeRO-Offload", USENIX ATC 2021): a GPU's
 * update on the CPU, its moments in host memory. The parameters and the
 * (reduced) gradients come down through the model's pinned staging, AdamW
 * runs on this rank's range on the host (gk_nn_adamw_step, the kernel's
 * per-element arithmetic, math.h), and the parameters go back up (the
 * bf16 working copy converted from them); ZeRO-1's gather then sends each
 * rank's range to all on the device, as without offload. The whole model
 * crosses the bus each way, not only the range: simpler, and the range's
 * own transfer is a refinement for later.
 */
static int host_update(gk_nn_dp *dp, const gk_nn_adamw *c, float lr, int64_t step,
		       float grad_scale, size_t lo, size_t hi, gk_err *err)
{
	gk_nn_model *m = dp->m;
	/* ZeRO-2's gradients are the shard: the model has no others */
	if (gk_nn_download(m, GK_NN_PARAMS | (dp->hshard ? 0 : GK_NN_GRADS), err) < 0)
		return -1;
	float *g = gk_nn_grads(m);
	if (dp->hshard) { /* ZeRO-2: the shard from the device */
		g = dp->hshard;
		if (gk_comm_to_host(dp->gcomm, g, dp->gshard, (hi - lo) * sizeof(float), err) < 0)
			return -1;
	} else if (dp->shard) {
		g = dp->gshard ? dp->gshard : g + lo;
	} else {
		g += lo;
	}
	gk_nn_adamw_step(m, c, lr, step, lo, hi, gk_nn_params(m) + lo, g, grad_scale, dp->mom,
			 dp->vel);
	return gk_nn_upload(m, GK_NN_PARAMS, err);
}

int gk_nn_dp_update(gk_nn_dp *dp, const gk_nn_adamw *c, float lr, int64_t step,
		    float grad_scale, double *exposed, gk_err *err)
{
	size_t lo = gk_nn_dp_lo(dp), hi = gk_nn_dp_hi(dp);
	const float *g = dp->shard ? shard_grads(dp) : NULL;
	if (dp->pp_stage >= 0) {
		/* a pipeline stage updates its own range, and the last stage
		 * the tied wte it shares with the first (the same gradients
		 * and moments there: the same update); under ZeRO-1 its
		 * pieces of them, gathered after */
		size_t n = dp->per[0];
		/* a tensor slice's ZeRO-2 on a GPU: its one piece's gradients
		 * are the shard */
		const float *g0 = dp->zero2 ? g : NULL;
		if (dp->off) {
			/* offloaded: the pieces' moments at the same places
			 * of the file, agreed as below */
			int rc = 0;
			for (int k = 0; k < 2 && rc == 0; k++)
				if (dp->own[k][1] > dp->own[k][0])
					rc = gk_nn_offload_update(dp->off, dp->m, c, lr, step,
								  grad_scale, dp->own[k][0],
								  dp->own[k][1], k ? n : 0,
								  k ? NULL : g0, err);
			if (gk_nn_tr_agree_local(dp->t, rc, err) < 0)
				return -1;
		} else if (dp->host_update && dp->zero2) {
			if (host_update(dp, c, lr, step, grad_scale, dp->own[0][0], dp->own[0][1],
					err) < 0)
				return -1;
		} else if (dp->host_update) {
			/* a GPU's, on the host: each piece's parameters and
			 * gradients down, the pieces back up */
			for (int k = 0; k < 2; k++)
				if (dp->own[k][1] > dp->own[k][0] &&
				    gk_nn_update_host(dp->m, c, lr, step, grad_scale, dp->own[k][0],
						      dp->own[k][1], dp->mom + (k ? n : 0),
						      dp->vel + (k ? n : 0), err) < 0)
					return -1;
		} else if ((dp->own[0][1] > dp->own[0][0] &&
			    gk_nn_update(dp->m, c, lr, step, grad_scale, dp->own[0][0],
					 dp->own[0][1], g0, dp->mom, dp->vel, err) < 0) ||
			   (dp->own[1][1] > dp->own[1][0] &&
			    gk_nn_update(dp->m, c, lr, step, grad_scale, dp->own[1][0],
					 dp->own[1][1], NULL, dp->mom + n, dp->vel + n, err) < 0)) {
			return -1;
		}
		*exposed = 0;
		/* ZeRO-3: the pieces reach the others in the next step's gathers */
		if (dp->ppshard && !dp->stage3) {
			double ta = gk_now();
			if (gk_nn_pp_shard_gather(dp, err) < 0)
				return -1;
			*exposed = gk_now() - ta;
		}
		return 0;
	}
	if (dp->host_update) {
		if (host_update(dp, c, lr, step, grad_scale, lo, hi, err) < 0)
			return -1;
	} else if (dp->off) {
		/*
		 * A file that fails (an I/O error, the disk gone) fails one
		 * rank: every rank learns it before the gather, which the
		 * others would otherwise wait in for it.
		 */
		int rc = gk_nn_offload_update(dp->off, dp->m, c, lr, step, grad_scale, lo, hi, 0, g,
					      err);
		if (gk_nn_tr_agree_local(dp->t, rc, err) < 0)
			return -1;
	} else if (gk_nn_update(dp->m, c, lr, step, grad_scale, lo, hi, g, dp->mom, dp->vel,
				err) < 0) {
		return -1;
	}
	*exposed = 0;
	/* ZeRO-3: each rank's updated range reaches the others in the next
	 * step's gathers */
	if (dp->shard && !dp->zero3) {
		double ta = gk_now();
		if (shard_gather(dp, err) < 0)
			return -1;
		*exposed = gk_now() - ta;
	}
	return 0;
}

static float *feedback(gk_nn_dp *dp, size_t *n)
{
	float *r = dp->resid ? dp->resid : gk_comm_grads_residual(dp->grads);
	*n = !r ? 0 : dp->resid ? dp->nresid : dp->N;
	return r;
}

size_t gk_nn_dp_feedback_len(gk_nn_dp *dp)
{
	size_t n;
	feedback(dp, &n);
	return n;
}

const char *gk_nn_dp_feedback_layout(const gk_nn_dp *dp)
{
	return dp->zero ? "reduce-scatter" : "allreduce";
}

void gk_nn_dp_feedback_grid(const gk_nn_dp *dp, char *buf, size_t len)
{
	const gk_nn_trainer *t = dp->t;
	const gk_nn_train_opts *o = &t->o;
	int V = o->pp_sched == GK_NN_PP_INTERLEAVED ? o->pp_chunks : 1;
	buf[0] = '\0';
	if (t->grid.tp == 1 && t->grid.pp == 1)
		return;
	int n = snprintf(buf, len, "dp %d x pp %d x tp %d", t->grid.dp, t->grid.pp, t->grid.tp);
	if (V > 1 && n >= 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ", %d chunks a stage", V);
}

int gk_nn_dp_feedback_get(gk_nn_dp *dp, float *host, gk_err *err)
{
	size_t n;
	float *r = feedback(dp, &n);
	return r ? gk_comm_to_host(dp->gcomm, host, r, n * sizeof(float), err) : 0;
}

int gk_nn_dp_feedback_set(gk_nn_dp *dp, const float *host, gk_err *err)
{
	size_t n;
	float *r = feedback(dp, &n);
	return r ? gk_comm_to_device(dp->gcomm, r, host, n * sizeof(float), err) : 0;
}
