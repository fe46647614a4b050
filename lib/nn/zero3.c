/*
 * zero3.c - ZeRO-3's parameter units: gathered before their use,
 * released after, the next one prefetched (dp.c's gradient path calls them).
 *
 * ZeRO-3 (--zero 3, the CPU backend) shards the parameters on the same
 * ranges: a rank keeps only [lo, hi) of them, the model's parameter
 * buffer mapped lazily as ZeRO-2's gradients are (gk_nn_opts.lazy_params).
 * The flat buffer is cut into units: the embeddings (wte, wpe), each
 * block, and the final norm with the padding. Each is gathered by one
 * all-gather of unequal pieces over its owners (gk_comm_iallgatherv, the
 * sibling of the reduce-scatterv) where the model says it is about to be
 * used (gk_nn_set_param_fn) and released (MADV_DONTNEED outside [lo, hi))
 * after: a block before its forward and again before its backward, or
 * kept in between with --reshard-after-forward no (FSDP's
 * reshard_after_forward=False); the last block, whose backward follows at
 * once, is kept. With overlap the next block's gather is started before
 * the current block computes (forward: l + 1, backward: l - 1), as
 * FSDP's forward and backward prefetch do. The embeddings and the final
 * norm, which the tied head uses at both ends of every micro-step, are
 * gathered before a step's first micro-step and released after its last
 * backward. Flat ranges rather than FSDP2's dim-0 shards of each tensor
 * keep the moments and checkpoints ZeRO-1's. Gradients go as ZeRO-2's;
 * the update is of [lo, hi) only, and no allgather follows it: the next
 * step's gathers read the owners' updated ranges. Evaluation gathers
 * the whole model once (gk_nn_dp_params_full), --sample to rank 0 alone
 * (gk_nn_dp_params_root), which generates with it: rank 0 holds the
 * whole model (4 bytes a parameter) while it samples, the others their
 * range. A checkpoint is each rank's range, or with --ckpt-gather the
 * ranges sent into rank 0's copy (gk_nn_dp_params_to_root).
 *
 * On GPUs (over NCCL, world > 1) the units are the model's buffers of its
 * working copy (gk_nn_opts.unit_params: device memory has no pages to
 * map lazily): the model keeps only [lo, hi) of the fp32 parameters (and
 * the host's copy of them only that range, which the transfers, the
 * checkpoints and --offload optimizer's update use, mapped as the CPU's
 * is and never written outside it), the
 * embeddings and the final norm have a buffer each, and the blocks share
 * a ring of them, block l in buffer l mod its length (2 with prefetch, 1
 * without, every block kept with --reshard-after-forward no); releasing
 * a unit frees its buffer for the next. A gather writes this rank's piece
 * from its fp32 range (gk_nn_params_own) on the model's stream, then is one
 * all-gather of unequal pieces in the working copy's type over the
 * gradients' NCCL communicator, whose stream waits for that piece and for
 * the kernels that last read the buffer (comm.h's stream contract: the
 * event it records on the model's stream when the gather is started,
 * which is after the last kernel of the block that used the ring's
 * buffer before, is the reuse's ordering). The unit's kernels are
 * ordered after the gather on the device: the model's stream waits for
 * the event recorded after it (gk_comm_stream_after), and the host goes
 * on queueing kernels. The host waits for the gathers' requests
 * (gk_comm_wait, under the watchdog, which alone sees a peer that
 * stopped) only where it is about to wait for the model's stream anyway:
 * after the last block's forward is queued (the loss is read back next),
 * after block 0's backward (backward ends in a synchronization), and
 * before the whole model is gathered. The first step waits for each
 * gather on the host instead, before the unit's kernels are queued: a
 * kernel's first launch loads its module, which under CUDA's lazy loading
 * waits for the whole device, and a gather in flight then, whose peer has
 * stopped, would hold it where no watchdog looks (prefetch waits for the
 * second step too). Evaluation and --sample gather the whole model
 * from device to device into a whole working copy (gk_nn_params_whole),
 * freed by gk_nn_dp_params_shard: no rank's host holds more than its
 * range of it.
 *
 * Over a grid (--tp, --pp) a sharded stage (pp_shard.c) keeps only its
 * pieces of its segments, and its units are its own: its blocks, and its
 * edges each within one segment (the first stage's wte and wpe, the last
 * stage's final norm and the tied wte its head reads; a tensor group's
 * slices of them). A unit's owners are the pieces of its segment, and a
 * release keeps the rank's piece. The gradients and the update are ZeRO-2's
 * (a pipeline stage's path, or on GPUs a tensor group's buckets, dp.c),
 * without the gather after the update; the edges are gathered before the
 * schedule (a pipeline's micro-batches are its accumulation) and released
 * after its last backward. On the CPU a tensor group's blocks are
 * prefetched as without a grid. A pipeline's are prefetched in the order
 * its schedule uses them (pp_sched.c tells the pass after each,
 * gk_nn_dp_next_pass): a stage alternates forwards and backwards of
 * different micro-batches, so after a pass's last block comes the next
 * pass's first (a forward's lowest block, a backward's highest), the same
 * on every rank of the stage's data-parallel group, which runs the same
 * schedule; and the block at which it turns from a forward to a backward or
 * back, its next use, is kept rather than released and gathered again (FSDP
 * prefetches by the order of use it recorded in the first iteration; a
 * pipeline's is its schedule's, known before it runs). Evaluation and
 * checkpoints gather each stage whole (pp_shard_gather).
 *
 * On GPUs a grid runs it too. A tensor group's one segment (the tensor
 * rank's slice table, gk_nn_pp_segments) is cut into the flat multiple's
 * equal ranges, so a rank's piece is the one range of the fp32 master that
 * unit_params keeps; a pipeline stage's pieces are those of its segments,
 * two on the first and last stage (its layers' and the tied wte's), which
 * the master keeps as two ranges (model_cuda.c, both cut by
 * gk_nn_pp_piece). The units are the model's buffers as without a grid. No
 * gather is prefetched there (may_prefetch says why), but a pipeline's
 * releases still follow its schedule, as the CPU's do when it prefetches:
 * the block at which it turns is kept, and no other (the model's last block
 * kept after its forward would hold the ring's one buffer across the last
 * stage's forwards under GPipe). A pipeline stage keeps its whole gradient
 * buffer on the device, as ZeRO-2 over a pipeline does (pp_shard.c: a stage
 * accumulates over its whole schedule); a tensor group without one keeps
 * ZeRO-2's buckets and shard (dp.c), its piece the shard's range.
 * Evaluation and --sample gather the whole working copy on the device
 * (stage_device); a checkpoint the fp32 pieces on the host
 * (gk_nn_dp_params_host), whose pages outside the pieces go back after.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "nn/train_internal.h"

int gk_nn_dp_lazy_params(const gk_nn_train_opts *o, int world, int cuda)
{
	return o->zero == 3 && world > 1 && !cuda;
}

int gk_nn_dp_unit_params(const gk_nn_trainer *t)
{
	/* kept from forward to backward, every block of the stage's; else the
	 * one in use and, with prefetch (never over a grid: may_prefetch),
	 * the next */
	const gk_nn_train_opts *o = &t->o;
	int l0 = 0, l1 = (int)t->cfg.layers;
	gk_err ignore; /* (the stage's layers were checked by the trainer) */
	if (o->zero != 3 || t->grid.dp < 2 || !t->cuda || o->comm == GK_COMM_BACKEND_MPI)
		return 0;
	if (t->grid.pp > 1)
		gk_nn_pp_layers(t->cfg.layers, t->grid.pp, t->grid.pp_rank, &l0, &l1, &ignore);
	return o->keep_gathered ? l1 - l0 : o->overlap && o->tp < 2 && o->pp < 2 ? 2 : 1;
}

/*
 * On GPUs over a tensor group a gather in flight would run beside the
 * group's collectives, on two NCCL communicators at once, which NCCL's
 * guide ("Using multiple NCCL communicators concurrently") leaves to
 * luck: its kernels block waiting for their peers, and concurrent ones
 * may deadlock. A pipeline's messages are NCCL's too, on communicators
 * of their own (pp_sched.c). There each gather is ordered on the device
 * after the kernels before it (the group's allreduces, the stage's
 * messages on the model's stream) and before the unit's: the
 * communicators take turns.
 */
static int may_prefetch(const gk_nn_dp *dp)
{
	return dp->overlap && !(dp->units && (dp->t->grid.tp > 1 || dp->pipe));
}

void gk_nn_dp_zero3_bytes(size_t nflat, int world, size_t edge, size_t block, int layers,
			  int keep, uint64_t *shard, uint64_t *transient)
{
	size_t pg = gk_nn_grad_page(), per = nflat / (size_t)world;
	uint64_t all = (nflat + pg - 1) / pg * pg;
	/* a unit's pages, and the pages it shares with its neighbours; kept
	 * until backward, every block is present at the end of forward */
	uint64_t blocks = keep ? (uint64_t)layers : 2;
	uint64_t live = (edge + pg - 1) / pg * pg + blocks * ((block + pg - 1) / pg * pg) +
			(blocks + 2) * pg;
	*shard = ((uint64_t)per * sizeof(float) + 63) / 64 * 64;
	*transient = (live < all ? live : all) * sizeof(float);
}

/* where owner q's part starts: of the flat buffer's equal ranges, or
 * over a grid of the unit's segment's pieces (pp_shard.c) */
static size_t owner_at(const gk_nn_dp *dp, int u, int q)
{
	int k = dp->useg[u];
	if (k < 0)
		return (size_t)q * (dp->Np / (size_t)dp->world);
	return dp->seg[k][0] + dp->displ[k][q];
}

/* unit u's pieces: what each owner holds of [ulo, uhi), from ulo */
static void unit_displ(gk_nn_dp *dp, int u)
{
	size_t a = dp->ulo[u], b = dp->uhi[u];
	size_t *d = dp->udispl + (size_t)u * ((size_t)dp->world + 1);
	for (int q = 0; q <= dp->world; q++) {
		size_t x = owner_at(dp, u, q);
		d[q] = (x < a ? a : x > b ? b : x) - a;
	}
}

/* this rank's part of unit u's owners: its range, or over a grid its
 * piece of the unit's segment */
static void own_of(const gk_nn_dp *dp, int u, size_t *lo, size_t *hi)
{
	int k = dp->useg[u];
	*lo = k < 0 ? dp->lo : dp->own[k][0];
	*hi = k < 0 ? dp->hi : dp->own[k][1];
}

static int is_block(const gk_nn_dp *dp, int u)
{
	return u >= dp->ublk && u < dp->ublk + dp->nblk;
}

/*
 * Block l's unit and block unit u's layer: the stage's chunks of ulen
 * layers each (one chunk but under the interleaved schedule), chunk c's
 * from layer ul0 + c ustride, their units in that order from ublk.
 */
static int unit_of(const gk_nn_dp *dp, int l)
{
	int c = (l - dp->ul0) / dp->ustride;
	return dp->ublk + c * dp->ulen + (l - dp->ul0 - c * dp->ustride);
}

static int layer_of(const gk_nn_dp *dp, int u)
{
	int i = u - dp->ublk;
	return dp->ul0 + i / dp->ulen * dp->ustride + i % dp->ulen;
}

/*
 * On a GPU (units): unit u's buffer, and this rank's piece of it written
 * from its fp32 range on the model's stream, which the gather waits for
 * (comm.h's stream contract), as it waits for the kernels that last read
 * the buffer. A block's buffer is shared with the blocks nslot apart: one
 * of them still in use there is a fault of the schedule, said, not a
 * silent overwrite.
 */
static int unit_fill(gk_nn_dp *dp, int u, void **buf, gk_err *err)
{
	if (is_block(dp, u))
		for (int v = dp->ublk; v < dp->ublk + dp->nblk; v++)
			if (v != u && (v - u) % dp->nuslot == 0 && dp->ustate[v] != 0)
				return gk_errf(err, "ZeRO-3: block %d's parameters would be "
					       "gathered over block %d's, still in use",
					       layer_of(dp, u), layer_of(dp, v));
	size_t lo, hi;
	own_of(dp, u, &lo, &hi);
	size_t a = dp->ulo[u] > lo ? dp->ulo[u] : lo;
	size_t b = dp->uhi[u] < hi ? dp->uhi[u] : hi;
	*buf = gk_nn_param_at(dp->m, dp->ulo[u]);
	return a < b ? gk_nn_params_own(dp->m, a, b, err) : 0;
}

/* the host waits for unit u's gather, ordered on the device before */
static int unit_done(gk_nn_dp *dp, int u, gk_err *err)
{
	gk_comm_req *r = dp->ureq[u];
	dp->ureq[u] = NULL;
	return r ? gk_comm_wait(r, err) : 0;
}

/*
 * The host waits, in the order they were started (a gather that stalls
 * is the one named, not one queued behind it), for the gathers that the
 * model's stream was ordered after: before the host itself waits for
 * that stream (see the top of the file).
 */
static int units_done(gk_nn_dp *dp, gk_err *err)
{
	for (;;) {
		int first = -1;
		for (int u = 0; u < dp->nunits; u++)
			if (dp->ureq[u] && dp->ustate[u] != 1 &&
			    (first < 0 || dp->useq[u] < dp->useq[first]))
				first = u;
		if (first < 0)
			return 0;
		if (unit_done(dp, first, err) < 0)
			return -1;
	}
}

int gk_nn_z3_issue(gk_nn_dp *dp, int u, gk_err *err)
{
	if (dp->ustate[u] != 0)
		return 0;
	/* (its last gather not yet waited for on the host: never in the
	 * model's schedule, which waits for them all between its passes) */
	if (unit_done(dp, u, err) < 0)
		return -1;
	void *p = gk_nn_params(dp->m) + dp->ulo[u];
	if (dp->units && unit_fill(dp, u, &p, err) < 0)
		return -1;
	if (gk_comm_iallgatherv(dp->units ? dp->gcomm : dp->comm, p,
				dp->udispl + (size_t)u * ((size_t)dp->world + 1),
				gk_nn_param_dtype(dp->m), &dp->ureq[u], err) < 0)
		return -1;
	dp->ustate[u] = 1;
	dp->useq[u] = dp->issued++;
	return 0;
}

/* unit u present: its gather started if it was not, and the model's
 * stream ordered after it, or (the first step, a CPU's) waited for on the
 * host (the wait is exposed communication, counted with ZeRO-2's bucket
 * waits) */
int gk_nn_z3_wait(gk_nn_dp *dp, int u, gk_err *err)
{
	if (dp->ustate[u] == 2)
		return 0;
	double t0 = gk_now();
	dp->gathers++;
	dp->prefetched += dp->ustate[u] == 1;
	if (gk_nn_z3_issue(dp, u, err) < 0)
		return -1;
	int rc = dp->dev_order ? gk_comm_stream_after(dp->ureq[u], err) : unit_done(dp, u, err);
	dp->bwd_wait += gk_now() - t0;
	if (rc < 0)
		return -1;
	dp->ustate[u] = 2;
	return 0;
}

/* unit u's pages of the host's copy outside this rank's range (over a
 * grid its piece of the unit's segment) go back (whole pages only: one
 * shared with a neighbouring unit or the range stays) */
static void host_release(gk_nn_dp *dp, int u)
{
	size_t a = dp->ulo[u], b = dp->uhi[u], lo, hi;
	own_of(dp, u, &lo, &hi);
	size_t e = b < lo ? b : lo;
	if (e >= dp->N) /* the release of the buffer's end would take the range */
		e = dp->N - 1;
	if (a < e)
		gk_nn_params_release(dp->m, a, e);
	size_t s = a > hi ? a : hi;
	if (s < b)
		gk_nn_params_release(dp->m, s, b);
}

/* unit u released: its pages (the CPU's), or on a GPU its buffer, the
 * next one's of the ring */
void gk_nn_z3_release(gk_nn_dp *dp, int u)
{
	if (dp->ustate[u] != 2)
		return;
	if (!dp->units)
		host_release(dp, u);
	dp->ustate[u] = 0;
}

/*
 * The unit the model uses after block l (unit u) in a forward (fwd) or a
 * backward, or -1: within the pass the next block of its chunk (forward:
 * l + 1, backward: l - 1); after its last, on a pipeline the first of
 * the schedule's next pass (a forward's lowest block of its chunk, a
 * backward's highest), of which nothing is known without one.
 */
static int next_unit(const gk_nn_dp *dp, int fwd, int l, int u)
{
	int a = dp->ul0 + (l - dp->ul0) / dp->ustride * dp->ustride;
	if (fwd ? l + 1 < a + dp->ulen : l > a)
		return fwd ? u + 1 : u - 1;
	if (!dp->pipe || dp->next_fwd < 0)
		return -1;
	return dp->ublk + dp->next_chunk * dp->ulen + (dp->next_fwd ? 0 : dp->ulen - 1);
}

/*
 * The model's calls around block l (unit u): before its forward, its
 * gather waited for and the next unit's started (prefetch); after, it is
 * released (reshard), but the model's last block, whose backward follows
 * at once (on a pipeline's last stage under 1F1B; under GPipe at the end
 * of the forwards); before its backward, gathered again and the next
 * unit's started; after, released. A pipeline that prefetches knows the
 * next unit across its passes, so a unit whose next use is the next one
 * (the block at which a stage turns from a forward to a backward or back,
 * every turn of 1F1B's steady state) is kept instead of released and
 * gathered again, and the model's last block is not otherwise kept:
 * the one in use and the next are all that is gathered.
 */
static int param_cb(int phase, int l, void *ctx, gk_err *err)
{
	gk_nn_dp *dp = ctx;
	int u = unit_of(dp, l), fwd = phase == GK_NN_FWD_PRE || phase == GK_NN_FWD_POST;
	/* a GPU's pipeline keeps its turns without prefetch too (the top of
	 * the file) */
	int sched = dp->pipe && (dp->prefetch || dp->units);
	int next = dp->prefetch || sched ? next_unit(dp, fwd, l, u) : -1;
	switch (phase) {
	case GK_NN_FWD_PRE:
	case GK_NN_BWD_PRE:
		if (gk_nn_z3_wait(dp, u, err) < 0)
			return -1;
		return dp->prefetch && next >= 0 && next != u ? gk_nn_z3_issue(dp, next, err) : 0;
	case GK_NN_FWD_POST:
		if (dp->reshard && !(sched ? next == u : l + 1 == dp->nlayers))
			gk_nn_z3_release(dp, u);
		/* the last block queued: the head's loss is read back next */
		return l + 1 == dp->nlayers ? units_done(dp, err) : 0;
	default:
		if (!sched || next != u)
			gk_nn_z3_release(dp, u);
		/* the first block: backward synchronizes next */
		return l > dp->ul0 ? 0 : units_done(dp, err);
	}
}

/* unit [a, b) in segment k (-1: the flat buffer's equal ranges), if not empty */
static void add_unit(gk_nn_dp *dp, size_t a, size_t b, int k)
{
	if (a >= b)
		return;
	dp->ulo[dp->nunits] = a;
	dp->uhi[dp->nunits] = b;
	dp->useg[dp->nunits++] = (signed char)k;
}

/*
 * The units: the embeddings (wte, wpe), each block, the final norm with
 * the padding. A sharded stage's (stage3) are its own layers' and its
 * edges, each within one of its segments: on the first stage wte
 * (segment 1) and wpe, on the last the final norm and the tied wte
 * (segment 1, which its head reads), a tensor group's its slices of
 * them (one stage: wte and wpe together in segment 0). Under the
 * interleaved schedule a stage's layers are V chunks, c S + s of the
 * model's S V (gk_nn_pp_chunk_layers), whose blocks lie one after the
 * other in the flat buffer (stage-major, gk_nn_pp_place).
 */
static void make_units(gk_nn_dp *dp, gk_nn_trainer *t)
{
	size_t a, b, lo, hi;
	int k = dp->stage3 ? 0 : -1, V = 1, l1 = dp->nlayers;
	dp->ul0 = 0;
	if (dp->stage3) {
		gk_err ignore; /* (the stage's layers were checked by the trainer) */
		V = t->grid.pp > 1 && t->o.pp_sched == GK_NN_PP_INTERLEAVED ? t->o.pp_chunks : 1;
		gk_nn_pp_chunk_layers(t->cfg.layers, t->grid.pp, V, t->grid.pp_rank, 0, &dp->ul0,
				      &l1, &ignore);
		add_unit(dp, dp->seg[1][0], dp->seg[1][1], 1);
		a = dp->seg[0][0];
		b = dp->seg[0][1];
	} else {
		a = 0;
		b = dp->Np;
	}
	dp->ulen = l1 - dp->ul0;
	dp->ustride = dp->ulen * (dp->stage3 ? t->grid.pp : 1);
	gk_nn_block_range(dp->m, dp->ul0, &lo, &hi);
	add_unit(dp, a, lo, k);
	dp->ublk = dp->nunits;
	dp->nblk = V * dp->ulen;
	for (int u = dp->ublk; u < dp->ublk + dp->nblk; u++) {
		gk_nn_block_range(dp->m, layer_of(dp, u), &lo, &hi);
		add_unit(dp, lo, hi, k);
	}
	add_unit(dp, hi, b, k);
}

int gk_nn_z3_open(gk_nn_dp *dp, gk_nn_trainer *t, gk_err *err)
{
	int L = (int)t->cfg.layers, n = L + 3;
	dp->nlayers = L;
	dp->reshard = !t->o.keep_gathered;
	dp->nuslot = gk_nn_dp_unit_params(t);
	dp->units = dp->nuslot > 0;
	/*
	 * On a GPU not in the first step: a kernel's first launch loads its
	 * module, which under CUDA's lazy loading waits for the whole device
	 * (the model's preload says more), and a gather in flight then, whose
	 * peer has stopped, would hold it where no watchdog looks; the first
	 * step launches every kernel of forward and backward with no gather in
	 * flight, waiting for each on the host, and prefetch and the device's
	 * ordering start after it (gk_nn_z3_step_done). Over a tensor group
	 * on the CPU a gather in flight on the data-parallel communicator's
	 * thread runs beside the group's collectives on the calling thread
	 * (lib/comm makes their MPI calls one at a time, comm_mpi.h), and so
	 * does one beside a pipeline's messages, whose schedule says which
	 * unit comes next (gk_nn_dp_next_pass); on GPUs none is in flight
	 * beside a tensor group's collectives or a pipeline's messages
	 * (may_prefetch).
	 */
	dp->prefetch = dp->overlap && !dp->units;
	dp->pipe = t->grid.pp > 1;
	dp->next_fwd = -1;
	dp->ulo = calloc((size_t)n, sizeof(size_t));
	dp->uhi = calloc((size_t)n, sizeof(size_t));
	dp->udispl = calloc((size_t)n * ((size_t)dp->world + 1), sizeof(size_t));
	dp->ureq = calloc((size_t)n, sizeof(*dp->ureq));
	dp->ustate = calloc((size_t)n, 1);
	dp->useq = calloc((size_t)n, sizeof(*dp->useq));
	dp->useg = calloc((size_t)n, 1);
	if (!dp->ulo || !dp->uhi || !dp->udispl || !dp->ureq || !dp->ustate || !dp->useq ||
	    !dp->useg)
		return gk_err_sys(err, ENOMEM, "ZeRO-3 parameter units");
	make_units(dp, t);
	for (int u = 0; u < dp->nunits; u++)
		unit_displ(dp, u);
	gk_nn_set_param_fn(dp->m, param_cb, dp);
	return 0;
}

void gk_nn_dp_next_pass(gk_nn_dp *dp, int fwd, int chunk)
{
	dp->next_fwd = fwd;
	dp->next_chunk = chunk;
}

int gk_nn_z3_edges(gk_nn_dp *dp, gk_err *err)
{
	for (int u = 0; u < dp->nunits; u++)
		if (!is_block(dp, u) && gk_nn_z3_wait(dp, u, err) < 0)
			return -1;
	return dp->prefetch && dp->nblk ? gk_nn_z3_issue(dp, dp->ublk, err) : 0;
}

void gk_nn_z3_step_done(gk_nn_dp *dp)
{
	for (int u = 0; u < dp->nunits; u++)
		if (!is_block(dp, u))
			gk_nn_z3_release(dp, u);
	dp->prefetch = may_prefetch(dp);
	dp->dev_order = dp->units;
}

uint64_t gk_nn_dp_stage3_bytes(const gk_nn_dp *dp, int keep)
{
	size_t pg = gk_nn_grad_page();
	uint64_t edges = 0, top[2] = {0, 0}, blocks = 0;
	for (int u = 0; u < dp->nunits; u++) {
		/* the unit's pages, less the whole pages of this rank's piece
		 * within it (counted among the parameters) */
		size_t lo, hi, a = dp->ulo[u], b = dp->uhi[u];
		own_of(dp, u, &lo, &hi);
		lo = lo > a ? lo : a;
		hi = hi < b ? hi : b;
		size_t mine = hi > lo + 2 * pg ? (hi - lo) / pg * pg - pg : 0;
		uint64_t n = (b - a + pg - 1) / pg * pg + pg - mine;
		if (!is_block(dp, u)) {
			edges += n;
			continue;
		}
		/* every block kept, or the two that cost the most */
		blocks += n;
		if (n > top[0])
			top[1] = top[0], top[0] = n;
		else if (n > top[1])
			top[1] = n;
	}
	return (edges + (keep || dp->nblk <= 2 ? blocks : top[0] + top[1])) * sizeof(float);
}

/* the gathers in flight waited for on the host: nothing in flight, as
 * between steps */
static int units_settle(gk_nn_dp *dp, gk_err *err)
{
	for (int u = 0; u < dp->nunits; u++)
		if (dp->ustate[u] == 1 && gk_nn_z3_wait(dp, u, err) < 0)
			return -1;
	return units_done(dp, err);
}

/* every unit held while the whole model is (gk_nn_dp_params_full, _root):
 * the working copy made whole (on a GPU filled by the caller) is what the
 * kernels read until gk_nn_dp_params_shard */
static void whole_held(gk_nn_dp *dp)
{
	memset(dp->ustate, 2, (size_t)dp->nunits);
	gk_nn_set_param_fn(dp->m, NULL, NULL);
}

/*
 * On a GPU the whole working copy is made on the device: this rank's
 * range from its fp32 master (gk_nn_params_whole), the others' gathered
 * into it in the working copy's type over NCCL, in place, as the units
 * are (a bf16 copy is the rounding of the gathered master either way,
 * elementwise); the host's copy of the parameters stays the range.
 * Every rank's allocation is agreed first, so that a rank without the
 * memory fails the job rather than leaving the others in the gather.
 */
static int whole_device(gk_nn_dp *dp, gk_err *err)
{
	if (gk_nn_tr_agree_local(dp->t, gk_nn_params_whole(dp->m, 1, err), err) < 0)
		return -1;
	size_t per = dp->Np / (size_t)dp->world;
	gk_dtype dt = gk_nn_param_dtype(dp->m);
	char *w = gk_nn_param_at(dp->m, 0);
	size_t es = gk_dtype_bits(dt) / 8;
	return gk_comm_allgather(dp->gcomm, w + dp->lo * es, w, per, dt, NULL, err);
}

/*
 * A sharded stage's on a GPU: the whole working copy made as without a
 * grid, this rank's pieces from its fp32 master and each segment's other
 * pieces gathered into it in the working copy's type over NCCL.
 */
static int stage_device(gk_nn_dp *dp, gk_err *err)
{
	gk_dtype dt = gk_nn_param_dtype(dp->m);
	return gk_nn_tr_agree_local(dp->t, gk_nn_params_whole(dp->m, 1, err), err) < 0 ? -1 :
	       gk_nn_pp_gather_segments(dp, dp->gcomm, gk_nn_param_at, dt, err);
}

int gk_nn_dp_params_full(gk_nn_dp *dp, gk_err *err)
{
	if (!dp->zero3 && !dp->stage3)
		return 0;
	if (units_settle(dp, err) < 0)
		return -1;
	if (dp->stage3) { /* the stage's pieces, as ZeRO-2 gathers after its update */
		if ((dp->units ? stage_device(dp, err) : gk_nn_pp_shard_gather(dp, err)) < 0)
			return -1;
	} else if (dp->units) {
		if (whole_device(dp, err) < 0)
			return -1;
	} else {
		size_t per = dp->Np / (size_t)dp->world;
		float *p = gk_nn_params(dp->m);
		if (gk_comm_allgather(dp->comm, p + dp->lo, p, per, GK_DT_F32, NULL, err) < 0)
			return -1;
	}
	whole_held(dp);
	return 0;
}

int gk_nn_dp_params_host(gk_nn_dp *dp, gk_err *err)
{
	if (!dp->stage3 || !dp->units)
		return gk_nn_dp_params_full(dp, err);
	if (units_settle(dp, err) < 0 ||
	    gk_nn_pp_gather_segments(dp, dp->comm, gk_nn_pp_host_params_at, GK_DT_F32, err) < 0)
		return -1;
	whole_held(dp);
	return 0;
}

/* rank q's part of [0, N) in the flat buffer's equal ranges: *a and *n */
static void range_of(const gk_nn_dp *dp, int q, size_t *a, size_t *n)
{
	size_t per = dp->Np / (size_t)dp->world;
	*a = (size_t)q * per;
	*n = *a >= dp->N ? 0 : dp->N - *a < per ? dp->N - *a : per;
	if (*a > dp->N)
		*a = dp->N;
}

/* each rank's range of src (host floats, the flat layout) to rank 0's dst
 * over comm, one message each, received in place; dst may be src */
static int ranges_to_root(gk_nn_dp *dp, gk_comm *comm, const float *src, float *dst,
			  gk_err *err)
{
	size_t a, n;
	gk_comm_req *r;
	if (dp->rank != 0) {
		range_of(dp, dp->rank, &a, &n);
		return n == 0 ? 0 :
		       gk_comm_isend(comm, src + a, n, GK_DT_F32, 0, &r, err) < 0 ? -1 :
		       gk_comm_wait(r, err);
	}
	range_of(dp, 0, &a, &n);
	if (dst != src)
		memcpy(dst, src, n * sizeof(float));
	for (int q = 1; q < dp->world; q++) {
		range_of(dp, q, &a, &n);
		if (n && (gk_comm_irecv(comm, dst + a, n, GK_DT_F32, q, &r, err) < 0 ||
			  gk_comm_wait(r, err) < 0))
			return -1;
	}
	return 0;
}

/*
 * --sample on GPUs: rank 0's whole working copy on its device, each
 * other rank's fp32 range sent to it from device to device (NCCL's
 * point-to-point), received into a buffer of one range and written into
 * the working copy from there (straight into it in fp32). The others
 * keep their units.
 */
static int root_device(gk_nn_dp *dp, gk_err *err)
{
	size_t a, n;
	gk_comm_req *r;
	if (dp->rank != 0) {
		range_of(dp, dp->rank, &a, &n);
		return gk_nn_tr_agree_local(dp->t, 0, err) < 0 ? -1 : n == 0 ? 0 :
		       gk_comm_isend(dp->gcomm, gk_nn_work_params(dp->m, a), n, GK_DT_F32, 0, &r,
				     err) < 0 ? -1 : gk_comm_wait(r, err);
	}
	int f32 = gk_nn_param_dtype(dp->m) == GK_DT_F32;
	size_t per = dp->Np / (size_t)dp->world;
	float *tmp = NULL;
	int rc = gk_nn_params_whole(dp->m, 1, err);
	if (rc == 0 && !f32 && !(tmp = gk_comm_alloc(dp->gcomm, per * sizeof(float), err)))
		rc = -1;
	if (gk_nn_tr_agree_local(dp->t, rc, err) < 0) {
		gk_comm_free(dp->gcomm, tmp);
		return -1;
	}
	for (int q = 1; q < dp->world && rc == 0; q++) {
		range_of(dp, q, &a, &n);
		float *into = f32 ? (float *)gk_nn_param_at(dp->m, a) : tmp;
		if (n && (gk_comm_irecv(dp->gcomm, into, n, GK_DT_F32, q, &r, err) < 0 ||
			  gk_comm_wait(r, err) < 0 ||
			  (!f32 && gk_nn_params_put(dp->m, a, tmp, n, err) < 0)))
			rc = -1;
	}
	gk_comm_free(dp->gcomm, tmp);
	return rc;
}

/*
 * --sample: the whole model on rank 0 alone, which generates; each other
 * rank sends it its range (one message each, received in place) and
 * keeps only that range, as between steps.
 */
int gk_nn_dp_params_root(gk_nn_dp *dp, gk_err *err)
{
	if (!dp->zero3)
		return 0;
	if (units_settle(dp, err) < 0)
		return -1;
	float *p = gk_nn_params(dp->m);
	if ((dp->units ? root_device(dp, err) : ranges_to_root(dp, dp->comm, p, p, err)) < 0)
		return -1;
	if (dp->rank == 0)
		whole_held(dp);
	return 0;
}

int gk_nn_dp_params_to_root(gk_nn_dp *dp, float *dst, gk_err *err)
{
	return ranges_to_root(dp, dp->comm, gk_nn_params(dp->m), dst, err);
}

void gk_nn_dp_params_shard(gk_nn_dp *dp)
{
	if (!dp->zero3 && !dp->stage3)
		return;
	/* a GPU's whole working copy freed; no failure to report (only the
	 * stream's wait could fail, and the next step's first call says so) */
	gk_err ignore;
	gk_nn_params_whole(dp->m, 0, &ignore);
	for (int u = 0; u < dp->nunits; u++) {
		dp->ustate[u] = dp->ustate[u] == 1 ? 1 : 2;
		gk_nn_z3_release(dp, u);
		/* a stage's host copy, whole for a checkpoint (gk_nn_dp_params_host) */
		if (dp->units && dp->stage3)
			host_release(dp, u);
	}
	gk_nn_set_param_fn(dp->m, param_cb, dp);
}
