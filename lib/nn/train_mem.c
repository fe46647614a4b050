/*
 * train_mem.c - the trainer's memory: what a rank of the run allocates,
 * by lib/mem's categories (accounted once the model exists), and the
 * check before the model is allocated that it fits the machine, refused
 * with the figures and the cheapest configuration that fits.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "mem/mem.h"
#include "nn/train_internal.h"

/*
 * The model states (parameters, gradients, AdamW's moments of the model's
 * Psi parameters, the moments sharded over the world under ZeRO-1) as
 * lib/mem computes them for this run, so that gpu-train and mem-estimate
 * agree because they are one computation. f32 runs only: a GPU's bf16
 * run keeps f32 master weights, a bf16 working copy and f32 gradients
 * with no bf16 gradient buffer, a layout lib/mem's mixed precision (bf16
 * gradients, optionally beside f32 ones) does not describe; there the
 * bytes allocated are counted as they are (-1 here).
 */
static int model_states(const gk_nn_trainer *t, uint64_t *b, uint64_t *offload_state)
{
	if (t->cuda && t->o.precision == GK_NN_BF16)
		return -1;
	gk_mem_train mt = {.layers = t->cfg.layers, .hidden = t->cfg.hidden,
			   .heads = t->cfg.heads, .vocab = t->cfg.vocab,
			   .positions = t->cfg.positions, .seq = t->o.seq, .batch = t->o.batch,
			   .precision = GK_DT_F32, .zero = t->dp->shard ? t->o.zero : 0,
			   .dp = t->grid.dp, .tp = t->grid.tp, .sp = t->o.seq_par, .pp = t->grid.pp,
			   .stage = t->grid.pp_rank, .recompute = GK_MEM_RC_NONE,
			   .offload = t->dp->off || t->dp->host_update};
	gk_mem_est e;
	gk_mem_run r;
	gk_err err;
	if (gk_mem_train_estimate(&mt, &e, NULL, &r, &err) < 0)
		return -1;
	/* offloaded: host_ram is the state of every rank of a node */
	const gk_mem_part *h = gk_mem_part_get(&e, "host_ram");
	int64_t world = r.dp * r.tp * r.pp;
	int64_t local = world < r.gpus_per_node ? world : r.gpus_per_node;
	if (mt.offload && (!h || local < 1))
		return -1;
	*offload_state = mt.offload ? h->bytes / (uint64_t)local : 0;
	const gk_mem_part *p = gk_mem_part_get(&e, "parameters"),
			  *g = gk_mem_part_get(&e, "gradients"),
			  *o = gk_mem_part_get(&e, "optimizer");
	if (!p || !g || !o)
		return -1;
	b[GK_MEM_PARAMETERS] = p->bytes;
	b[GK_MEM_GRADIENTS] = g->bytes;
	b[GK_MEM_OPTIMIZER] = o->bytes;
	return 0;
}

/* The tied embedding's floats, at the flat buffer's start (ZeRO-2's
 * gradient that lives through backward) */
static size_t zero2_head(const gk_nn_trainer *t)
{
	return (size_t)t->cfg.vocab_pad * (size_t)t->cfg.hidden;
}

/* ZeRO-3's units (dp.c): the embeddings and the final norm, kept for a
 * step, and a block (the unit gathered and released) */
static void zero3_units(const gk_nn_trainer *t, size_t *edge, size_t *block)
{
	size_t C = (size_t)t->cfg.hidden;
	*edge = ((size_t)t->cfg.vocab_pad + (size_t)t->cfg.positions + 2) * C;
	*block = 12 * C * C + 13 * C;
}

_Static_assert(GK_NN_CUDA_STAGING == GK_MEM_GPU_STAGING,
	       "lib/nn's pinned staging is lib/mem's host_staging");
_Static_assert((int)GK_NN_PP_1F1B == (int)GK_MEM_PP_1F1B &&
	       (int)GK_NN_PP_GPIPE == (int)GK_MEM_PP_GPIPE &&
	       (int)GK_NN_PP_INTERLEAVED == (int)GK_MEM_PP_INTERLEAVED,
	       "lib/nn's pipeline schedules are lib/mem's");

/*
 * A GPU's host memory for the model, as allocated (lib/mem's host terms,
 * gk_mem_gpu_host's computation from the shape, which mem-estimate
 * states): the model's mirrors and pinned staging, the moments' host
 * copies (the update's own under --offload optimizer; the spare float
 * each that gk_nn_dp_new allocates) and --offload optimizer's copy of
 * the gradient shard.
 */
static void host_terms(gk_nn_trainer *t)
{
	const gk_nn_dp *dp = t->dp;
	uint64_t *h = t->mem.host;
	memset(h, 0, sizeof(t->mem.host));
	t->mem.host_total = 0;
	if (!t->cuda)
		return;
	gk_nn_host_mem hm;
	gk_nn_host_memory(t->m, &hm);
	size_t nm = dp->pp_stage >= 0 ? dp->per[0] + dp->per[1] : dp->hi - dp->lo + dp->head;
	h[GK_MEM_HOST_PARAMS] = hm.params;
	h[GK_MEM_HOST_GRADS] = hm.grads;
	h[GK_MEM_HOST_STAGING] = hm.pinned;
	h[GK_MEM_HOST_MOMENTS] = dp->mom ? (uint64_t)2 * (nm + 1) * sizeof(float) : 0;
	h[GK_MEM_HOST_GRAD_SHARD] = dp->hshard ? (uint64_t)gk_nn_dp_moments_len(dp) * sizeof(float)
					       : 0;
	for (int i = 0; i < GK_MEM_NHOST; i++)
		t->mem.host_total += h[i];
}

/*
 * Bytes by lib/mem's categories. What exists only because the embedding is
 * padded to vocab_pad rows (those rows in the parameters, gradients and
 * moments, the logits' extra columns) and ZeRO-1's rounding of the flat
 * buffer is "padding".
 */
void gk_nn_tr_account(gk_nn_trainer *t)
{
	gk_nn_mem mm;
	gk_nn_memory(t->m, &mm);
	uint64_t *b = t->mem.bytes;
	uint64_t pad_rows = (uint64_t)(t->cfg.vocab_pad - t->cfg.vocab);
	uint64_t psi = (uint64_t)t->N - pad_rows * (uint64_t)t->cfg.hidden;
	uint64_t logit_es = t->cuda && t->o.precision == GK_NN_BF16 ? 2 : 4;
	/*
	 * The logits' columns past the vocabulary: a tensor rank's share of
	 * them (its vocab_pad / tp columns less lib/mem's vocab / tp, as the
	 * padded rows of wte split), on a pipeline's last stage one set a
	 * micro-batch in flight
	 */
	uint64_t logit_all, logit_model;
	gk_mem_logits(t->cfg.vocab, t->grid.tp, (uint64_t)t->o.batch * (uint64_t)t->o.seq,
		      (int)logit_es, &logit_all, &logit_model);
	uint64_t logit_pad = (logit_all - logit_model) *
			     (t->grid.pp > 1 ? (uint64_t)gk_nn_tr_pp_head_sets(t) : 1);
	/* offloaded, the moments are in a file or (a GPU's) host memory:
	 * none where the model computes */
	uint64_t moments = t->dp->off || t->dp->host_update ? 0 :
			   t->dp->pp_stage >= 0 ? (uint64_t)2 * (t->dp->per[0] + t->dp->per[1]) * sizeof(float) :
			   (uint64_t)2 * (t->dp->hi - t->dp->lo + t->dp->head) * sizeof(float);
	/* a pipeline stage: the parameters of its range (wte on the first
	 * and last, with its padding rows) */
	if (t->grid.pp > 1) {
		int ends = (t->grid.pp_rank == 0) + (t->grid.pp_rank == t->grid.pp - 1);
		psi = gk_nn_pp_floats(t->m) -
		      (uint64_t)ends * pad_rows * (uint64_t)t->cfg.hidden / (uint64_t)t->grid.tp;
	}
	/* lib/mem's figures, or where it takes no such run (bf16 on a GPU)
	 * the model's own count */
	if (model_states(t, b, &t->mem.offload_state) < 0) {
		/* a GPU's working copy (bf16) counts as parameters; ZeRO-3's
		 * units are comm */
		b[GK_MEM_PARAMETERS] = t->dp->zero3 || t->dp->stage3 ?
				       (uint64_t)llround(4.0 * (double)psi / t->grid.dp) :
				       4 * psi + (logit_es == 2 ? 2 * psi : 0);
		/* ZeRO-2 keeps its shard of the f32 gradients (a sharded
		 * stage its pieces) */
		b[GK_MEM_GRADIENTS] = t->dp->zero2 || (t->dp->ppshard && t->dp->zero >= 2) ?
				      (uint64_t)llround(4.0 * (double)psi / t->grid.dp) : 4 * psi;
		b[GK_MEM_OPTIMIZER] = t->dp->shard ? (uint64_t)llround(8.0 * (double)psi / t->grid.dp)
						   : 8 * psi;
		/* offloaded: in host memory, none on the device; ZeRO-2's
		 * gradients streamed there too (lib/mem's rule), their shard
		 * on the device counted as comm below */
		t->mem.offload_state = t->dp->host_update ? b[GK_MEM_OPTIMIZER] : 0;
		if (t->dp->host_update)
			b[GK_MEM_OPTIMIZER] = 0;
		if (t->dp->host_update && t->dp->zero2)
			b[GK_MEM_GRADIENTS] = 0;
	}
	b[GK_MEM_ACTIVATIONS] = mm.activations - logit_pad;
	/* (a GPU's tensor-group buffers are comm, below) */
	b[GK_MEM_WORKSPACE] = mm.workspace - mm.tp_buffers +
		(uint64_t)2 * (uint64_t)t->o.batch * (uint64_t)t->o.seq * sizeof(int32_t);
	if (t->dp->off) {
		/* the offloaded update's buffer, what it holds of the moments */
		t->mem.offload_buffer = gk_nn_offload_buffer_bytes(t->o.offload_chunk,
								   gk_nn_dp_moments_len(t->dp));
		t->mem.offload_file = gk_nn_offload_file_bytes(t->dp->off);
		t->mem.offload_path = gk_nn_offload_path(t->dp->off);
		b[GK_MEM_WORKSPACE] += t->mem.offload_buffer;
	}
	/*
	 * ZeRO-2: the gradients a rank keeps are its shard (lib/mem's 4 Psi /
	 * N); the lazily mapped full buffer holds, during backward, the
	 * tied embedding's rows (the head writes them first, the embedding
	 * last: they live through all of backward, which mem-estimate's
	 * ZeRO-2 does not count) and the buckets in flight (its dp_buckets):
	 * counted as comm.
	 */
	uint64_t live = 0;
	if (t->dp->ppshard && t->dp->zero >= 2 && !t->dp->zero2) {
		/*
		 * ZeRO-2 and 3 over a pipeline (or a tensor group on the
		 * CPU): the rank keeps its pieces; the rest of the stage's
		 * gradients lives from its first backward to the reduction
		 * after the schedule (comm; on a GPU the whole step,
		 * pp_shard.c). A GPU stage's buffer holds the stage's
		 * segments only, as under ZeRO 0 and 1 (gk_nn_cuda_segments)
		 */
		uint64_t all = ((uint64_t)gk_nn_pp_floats(t->m) * sizeof(float) + 63) / 64 * 64;
		uint64_t mine = ((uint64_t)(t->dp->per[0] + t->dp->per[1]) * sizeof(float) + 63) /
				64 * 64;
		live = all - mine;
		mm.gradients = t->cuda ? mm.gradients - live : mine;
	} else if (t->dp->zero2 && t->cuda) {
		/*
		 * A GPU's: the model's bucket buffers (the embeddings' and
		 * those in flight, gk_nn_grad_buckets) are the live pages, and
		 * the shard, from the gradients' communicator, what it keeps.
		 * Offloaded, lib/mem streams the gradients to the host (none
		 * kept on the device), and the shard, on the device until the
		 * update copies it down, is comm too: mem-estimate's
		 * zero2_grad_shard, 4 Psi / N; its part of the vocabulary's
		 * padding rows stays padding. A tensor slice's (--tp, ZeRO-2
		 * and 3) the same, of its flat buffer: its piece is the shard.
		 */
		uint64_t shard = ((uint64_t)gk_nn_dp_moments_len(t->dp) * sizeof(float) + 63) / 64 *
				 64;
		live = mm.gradients;
		mm.gradients = shard;
		if (t->dp->host_update) {
			uint64_t psi_shard = (uint64_t)llround(4.0 * (double)psi / t->grid.dp);
			live += psi_shard;
			mm.gradients = b[GK_MEM_GRADIENTS] + (shard - psi_shard);
		}
	} else if (t->dp->zero2) {
		gk_nn_dp_zero2_bytes(t->dp->Np, t->grid.dp, zero2_head(t), t->o.bucket_bytes,
				     t->dp->overlap, &mm.gradients, &live);
	}
	/*
	 * ZeRO-3: the parameters a rank keeps are its range (lib/mem's 4 Psi
	 * / N); the lazily mapped full buffer holds, during a step, the
	 * embeddings and the final norm with the tied head, and two blocks
	 * (the one in use and the one prefetched): counted as comm, as
	 * ZeRO-2's live gradients are. mem-estimate's zero3_gather prices
	 * two of the largest tensor instead.
	 */
	if (t->dp->units) {
		/* a GPU's: its range of the fp32 parameters (over a tensor
		 * group its piece, the same equal range of its slices; a
		 * pipeline stage's its pieces, as the master holds them), and
		 * the model's unit buffers (gk_nn_opts' unit_params) live
		 * (comm) */
		size_t n = t->dp->stage3 ? t->dp->per[0] + t->dp->per[1] :
					   t->dp->Np / (size_t)t->grid.dp;
		uint64_t shard = (uint64_t)n * sizeof(float);
		live += mm.parameters - shard;
		mm.parameters = shard;
	} else if (t->dp->stage3) {
		/* over a grid: the stage's pieces, as its gradients' above
		 * (mem-estimate's parameters), and what its units hold
		 * gathered at most (comm) */
		mm.parameters = ((uint64_t)(t->dp->per[0] + t->dp->per[1]) * sizeof(float) + 63) /
				64 * 64;
		live += gk_nn_dp_stage3_bytes(t->dp, t->o.keep_gathered);
	} else if (t->dp->zero3) {
		size_t edge, block;
		uint64_t plive;
		zero3_units(t, &edge, &block);
		gk_nn_dp_zero3_bytes(t->dp->Np, t->grid.dp, edge, block, (int)t->cfg.layers,
				     t->o.keep_gathered, &mm.parameters, &plive);
		live += plive;
	}
	b[GK_MEM_PADDING] = (mm.parameters - b[GK_MEM_PARAMETERS]) +
			    (mm.gradients - b[GK_MEM_GRADIENTS]) + (moments - b[GK_MEM_OPTIMIZER]) +
			    logit_pad;
	b[GK_MEM_COMM] = gk_nn_dp_comm_bytes(t->dp) + live + mm.tp_buffers +
			 gk_nn_tr_pp_buffer_bytes(t);
	/* under tensor parallelism rank 0's copy is of the whole model */
	size_t nf = gk_nn_full_nparams(t->m);
	/* ... and so is a pipeline's (rank 0 puts the stages' ranges together) */
	b[GK_MEM_CHECKPOINT] = t->grid.tp > 1 || t->grid.pp > 1 ?
			       gk_nn_tr_ckpt_bytes(t, nf, nf, gk_nn_dp_feedback_len(t->dp)) :
			       gk_nn_tr_ckpt_bytes(t, t->N, gk_nn_dp_hi(t->dp) - gk_nn_dp_lo(t->dp),
						   gk_nn_dp_feedback_len(t->dp));
	/* offloaded over a grid: while a checkpoint puts the moments
	 * together, each rank holds its own, read back from its file */
	if (t->dp->off && (t->grid.tp > 1 || t->grid.pp > 1) && b[GK_MEM_CHECKPOINT])
		b[GK_MEM_CHECKPOINT] += (uint64_t)2 * gk_nn_dp_moments_len(t->dp) * sizeof(float);
	t->mem.total = 0;
	for (int c = 0; c < GK_MEM_NCAT; c++)
		t->mem.total += b[c];
	host_terms(t);
}

const gk_nn_train_mem *gk_nn_trainer_mem(const gk_nn_trainer *t)
{
	return &t->mem;
}

/* a step's micro-batches at micro-batch batch, the global batch kept */
static int64_t micro_batches(const gk_nn_trainer *t, int64_t batch)
{
	int64_t seqs = (int64_t)t->o.grad_accum * t->o.batch;
	return batch > 0 && seqs % batch == 0 ? seqs / batch : t->o.grad_accum;
}

/*
 * The run as lib/mem states it (the model states' and the fit's base),
 * this rank's stage of it, with micro-batch batch and the global batch
 * kept (the micro-batches a step a pipeline holds sends for).
 */
static gk_mem_train mem_train(const gk_nn_trainer *t, int recompute, int64_t batch, int zero)
{
	static const gk_mem_recompute rc[] = {
		[GK_NN_RECOMPUTE_NONE] = GK_MEM_RC_NONE, [GK_NN_RECOMPUTE_GELU] = GK_MEM_RC_GELU,
		[GK_NN_RECOMPUTE_LAYER] = GK_MEM_RC_FULL};
	gk_nn_opts no = {.attention = GK_NN_ATTN_AUTO};
	gk_err why;
	return (gk_mem_train){.layers = t->cfg.layers, .hidden = t->cfg.hidden,
			      .heads = t->cfg.heads, .vocab = t->cfg.vocab,
			      .positions = t->cfg.positions, .seq = t->o.seq, .batch = batch,
			      .precision = t->cuda && t->o.precision == GK_NN_BF16 ? GK_DT_BF16
										 : GK_DT_F32,
			      .grad_accum = micro_batches(t, batch),
			      .zero = zero, .dp = t->grid.dp, .tp = t->grid.tp,
			      .sp = t->o.seq_par, .pp = t->grid.pp, .stage = t->grid.pp_rank,
			      .pp_sched = t->o.pp_sched,
			      .pp_chunks = t->o.pp_sched == GK_NN_PP_INTERLEAVED ? t->o.pp_chunks : 0,
			      .offload = t->o.offload_host,
			      .cuda = t->cuda, .bucket = t->o.bucket_bytes,
			      .no_overlap = !t->o.overlap, .keep_gathered = t->o.keep_gathered,
			      .recompute = rc[recompute],
			      /* the CPU's attention keeps its (T,T) scores, and
			       * so does the GPU's matmul path */
			      .eager = !t->cuda || gk_nn_attention_fused(&t->cfg, &no, &why) != 1};
}

/*
 * What a rank of this run would allocate with ZeRO zero, micro-batch
 * batch and recomputation rc (lib/nn's), before allocating: on the host
 * the model's buffers (gk_nn_plan), the moments, the batch, compression's
 * error feedback (host memory on the CPU) and the checkpoint's copy, on a
 * GPU its host terms for the model's buffers and the moments; on the
 * device lib/mem's estimate (the bytes mem-estimate states). -1 for a shape
 * gk_nn_new refuses (it says why).
 */
static int need_of(const gk_nn_trainer *t, int zero, int batch, int rc, uint64_t *host,
		   uint64_t *dev)
{
	gk_nn_train_opts o = t->o;
	o.zero = zero;
	gk_nn_opts mo = {.batch = batch, .seq = t->o.seq, .recompute = rc,
			 .threads = t->o.threads, .device = t->cuda ? GK_NN_CUDA : GK_NN_CPU,
			 .precision = t->o.precision,
			 .flat_multiple = gk_nn_dp_flat_multiple(&o, t->grid.dp),
			 .lazy_grads = gk_nn_dp_lazy_grads(&o, t->grid.dp, t->cuda), .tp = t->grid.tp,
			 .seq_par = t->o.seq_par};
	gk_nn_mem pl;
	gk_err why;
	if (gk_nn_plan(&t->cfg, &mo, &pl, &why) < 0)
		return -1;
	size_t nflat = pl.parameters / sizeof(float), whole = nflat;
	size_t per = zero && t->world > 1 ? nflat / (size_t)t->world : nflat;
	if (t->grid.pp > 1) {
		/* a stage: its range's parameters, gradients and moments; rank
		 * 0's checkpoint copy is of the whole model */
		gk_nn_mem st;
		gk_nn_opts so = mo;
		so.pp = t->grid.pp;
		so.pp_rank = t->grid.pp_rank;
		so.lazy_params = so.lazy_grads = 1;
		if (gk_nn_plan(&t->cfg, &so, &st, &why) < 0)
			return -1;
		pl.parameters = st.parameters;
		pl.gradients = st.gradients;
		per = st.parameters / sizeof(float);
	}
	/* over a grid a rank's moments are its pieces of the stage's
	 * segments (lib/mem's layout, pp_shard.c's) */
	gk_mem_shape sh = {.layers = t->cfg.layers, .hidden = t->cfg.hidden,
			   .vocab = t->cfg.vocab, .positions = t->cfg.positions, .dp = t->grid.dp,
			   .tp = t->grid.tp, .pp = t->grid.pp, .stage = t->grid.pp_rank, .zero = zero};
	gk_mem_flat fl;
	if (t->grid.tp > 1 || t->grid.pp > 1) {
		if (gk_mem_flat_layout(&sh, &fl, &why) < 0)
			return -1;
		per = (size_t)(fl.piece[0] + fl.piece[1]);
	}
	/* (ZeRO-3 over a grid: at most the stage's, or the tensor rank's,
	 * parameters) */
	if (gk_nn_dp_lazy_params(&o, t->grid.dp, t->cuda) && t->grid.pp == 1 && t->grid.tp == 1) {
		size_t edge, block;
		uint64_t shard, live;
		zero3_units(t, &edge, &block);
		gk_nn_dp_zero3_bytes(nflat, t->world, edge, block, (int)t->cfg.layers,
				     t->o.keep_gathered, &shard, &live);
		pl.parameters = shard + live;
	}
	/* (ZeRO-2 over a pipeline or a tensor group: the stage's whole
	 * gradients until the reduction after the schedule: a tensor
	 * slice's, which the plan's mapping leaves out) */
	if (mo.lazy_grads && t->grid.pp == 1 && t->grid.tp > 1)
		pl.gradients = pl.parameters;
	if (mo.lazy_grads && t->grid.pp == 1 && t->grid.tp == 1) {
		uint64_t shard, live;
		gk_nn_dp_zero2_bytes(nflat, t->world, zero2_head(t), t->o.bucket_bytes,
				     t->o.overlap != 0, &shard, &live);
		pl.gradients = shard + live;
	}
	size_t fb = t->world > 1 && t->o.compress != GK_COMM_COMPRESS_NONE ? nflat : 0;
	uint64_t model = pl.parameters + pl.gradients + pl.activations + pl.workspace +
			 (t->o.offload_dir ? gk_nn_offload_buffer_bytes(t->o.offload_chunk, per)
					   : (uint64_t)2 * (per + 1) * sizeof(float));
	if (t->cuda) {
		/*
		 * A GPU's host terms (host_terms, gk_nn_train_mem's host):
		 * lib/mem's, which mem-estimate states, on this rank's layout
		 */
		uint64_t h[GK_MEM_NHOST];
		if (gk_mem_gpu_host(&sh, t->o.offload_host, h, &why) < 0)
			return -1;
		model = 0;
		for (int i = 0; i < GK_MEM_NHOST; i++)
			model += h[i];
	}
	*host = model + (uint64_t)2 * (uint64_t)batch * (uint64_t)t->o.seq * sizeof(int32_t) +
		(t->cuda ? 0 : (uint64_t)fb * sizeof(float)) +
		/* tensor parallelism: rank 0 copies the whole model, at most tp
		 * times its slices */
		(t->grid.pp > 1 ? gk_nn_tr_ckpt_bytes(t, whole * (size_t)t->grid.tp,
						      whole * (size_t)t->grid.tp, fb)
				: gk_nn_tr_ckpt_bytes(t, nflat * (size_t)t->grid.tp,
						      per * (size_t)t->grid.tp, fb));
	if (!t->cuda && fb && zero) /* the reduce-scatter's wire buffers */
		*host += gk_comm_compress_scratch(t->o.compress, per);
	/* a pipeline stage's send buffers (pp_sched.c; on a GPU in lib/mem's
	 * estimate below) */
	if (!t->cuda && t->grid.pp > 1) {
		int sp = t->o.seq_par && t->grid.tp > 1 ? t->grid.tp : 1;
		*host += gk_mem_pp_buffers(t->grid.pp, t->grid.pp_rank,
					   t->o.pp_sched == GK_NN_PP_INTERLEAVED ? t->o.pp_chunks : 1,
					   micro_batches(t, batch),
					   (uint64_t)batch * (uint64_t)t->o.seq *
						   (uint64_t)t->cfg.hidden / (uint64_t)sp,
					   sizeof(float));
	}
	/* int8 over a tensor group: the replicas' buffer (dp.c) */
	uint64_t rep = 0;
	if (!t->cuda && t->o.compress == GK_COMM_COMPRESS_INT8 && t->grid.tp > 1 &&
	    t->grid.dp > 1 && gk_mem_tp_replicas(&sh, &rep, &why) == 0)
		*host += 4 * rep;
	*dev = 0;
	if (t->cuda) {
		/*
		 * ZeRO-2 on a GPU: lib/mem's figures (the shard, and the
		 * model's gradient buffers, gk_nn_grad_buckets: the
		 * embeddings' and the ring of layer-cut buckets,
		 * gk_mem_zero2_device); where lib/mem does not price them (a
		 * world of one over NCCL), the embeddings' (with the final
		 * norm's, an upper bound) and three buffers, one without
		 * overlap, each of a bucket or a block, whichever is larger:
		 * at least what the run allocates
		 */
		gk_mem_train mt = mem_train(t, rc, batch, zero);
		gk_mem_est e;
		if (gk_mem_train_estimate(&mt, &e, NULL, NULL, &why) < 0)
			return -1;
		*dev = e.total;
		if (gk_nn_dp_bucket_grads(&o, t->grid.dp, t->cuda) &&
		    !gk_mem_part_get(&e, "zero2_embedding_grads")) {
			size_t edge, block, bucket = t->o.bucket_bytes ? t->o.bucket_bytes
								       : (size_t)25 << 20;
			zero3_units(t, &edge, &block);
			*dev += (uint64_t)edge * sizeof(float) +
				(uint64_t)(block * sizeof(float) > bucket ? block * sizeof(float)
									  : bucket) *
					(t->o.overlap ? 3 : 1);
		}
	}
	return 0;
}

/*
 * The cheapest configuration gpu-train can run here: lib/mem's search
 * (mem-estimate --fit) over what changes without changing the run's grid
 * (ZeRO 0 to 3, recomputation none or layer, the global batch kept
 * through --batch and --grad-accum) ranks the candidates, over the
 * data-parallel group, that fit cap bytes a rank (over a tensor group or
 * a pipeline, whose stages the search does not price, all of them), and
 * the first whose own need on this rank's layout (need_of) passes the
 * check q failed is the advice, with its need of the device's memory
 * (dev) or the host's.
 */
static void fit_advice(const gk_nn_trainer *t, const gk_mem_room_req *q, uint64_t cap, int dev,
		       char *out, size_t len)
{
	gk_mem_train mt = mem_train(t, t->o.recompute, t->o.batch, t->o.zero);
	gk_mem_model m;
	gk_mem_run r;
	gk_mem_est e;
	gk_err err;
	snprintf(out, len, "none by mem-estimate --fit: fewer ranks on the machine, a shorter --seq "
		 "or a smaller model");
	if (gk_mem_train_estimate(&mt, &e, &m, &r, &err) < 0)
		return;
	if (!t->cuda)
		r.reserve = 0; /* no CUDA context in host memory */
	if (t->o.bucket_bytes)
		r.bucket = t->o.bucket_bytes; /* the run's, not torch DDP's 25M */
	int grid = t->grid.tp > 1 || t->grid.pp > 1;
	gk_mem_fit_req req = {.world = t->grid.dp,
			      .global_batch = (int64_t)t->grid.dp * t->o.batch * t->o.grad_accum,
			      .capacity = grid ? UINT64_MAX / 4 : cap, .tp_max = 1, .pp_max = 1,
			      .zero_max = 3,
			      .recompute = 1u << GK_MEM_RC_NONE | 1u << GK_MEM_RC_FULL};
	enum { NCAND = 64 };
	gk_mem_cand *c = calloc(NCAND, sizeof(*c));
	int n = 0, tried, fits;
	if (!c || gk_mem_fit(&m, &r, &req, c, NCAND, &n, &tried, &fits, &err) < 0)
		n = 0;
	for (int i = 0; i < n; i++) {
		int rc = c[i].run.recompute == GK_MEM_RC_FULL ? GK_NN_RECOMPUTE_LAYER
							      : GK_NN_RECOMPUTE_NONE;
		gk_mem_room_req v = *q;
		gk_mem_room room;
		/* a stage the run's other options refuse is no advice */
		gk_nn_train_opts o = t->o;
		o.zero = c[i].run.zero;
		if (gk_nn_train_check(&o, t->cuda, &err) < 0)
			continue;
		if (c[i].run.micro_batch > INT32_MAX ||
		    need_of(t, c[i].run.zero, (int)c[i].run.micro_batch, rc, &v.host_need,
			    &v.dev_need) < 0 ||
		    !gk_mem_room_check(&v, &room))
			continue;
		/* the settings that change */
		size_t k = 0;
		char sz[32];
		if (c[i].run.zero != t->o.zero)
			k += (size_t)snprintf(out + k, len - k, "--zero %d ", c[i].run.zero);
		if (rc != (int)t->o.recompute && k < len)
			k += (size_t)snprintf(out + k, len - k, "--recompute %s ",
					      rc == GK_NN_RECOMPUTE_LAYER ? "layer" : "none");
		if (c[i].run.micro_batch != t->o.batch && k < len)
			k += (size_t)snprintf(out + k, len - k, "--batch %" PRId64
					      " --grad-accum %" PRId64 " ",
					      c[i].run.micro_batch, c[i].run.grad_accum);
		if (k < len)
			snprintf(out + k, len - k, "(%s a rank, the same global batch; by "
				 "mem-estimate --fit)",
				 gk_format_size(dev ? v.dev_need : v.host_need, 0, sz, sizeof(sz)));
		break;
	}
	free(c);
}

/*
 * Before the model is allocated, whether this rank's accounting fits the
 * limits of the machine it runs on, shared with the ranks that run
 * there (lib/mem's gk_mem_room_check): a run that does not fit is killed
 * by the kernel's OOM killer with no word, or spins in a library's
 * allocator under RLIMIT_AS. Refused, said once with the figures and the
 * cheapest fix, unless --force.
 */
int gk_nn_tr_check_memory(gk_nn_trainer *t, gk_err *err)
{
	gk_mem_room_req q = {.host_ranks = t->place.host_ranks,
			     .cgroup_ranks = t->place.cgroup_ranks, .threads = t->o.threads,
			     .rank_limit = t->o.mem_limit};
	gk_mem_room room = {.limit = GK_MEM_LIMIT_NONE};
	gk_err why;
	int planned = need_of(t, t->o.zero, t->o.batch, t->o.recompute, &q.host_need,
			      &q.dev_need) == 0;
	gk_host_mem_read(t->o.mem_root ? t->o.mem_root : "", &q.host);
	if (t->cuda) {
		/* the ranks of this kernel on this device share its memory */
		uint64_t me[2] = {t->kernel, (uint64_t)t->dev}, *all, total;
		if (!(all = calloc((size_t)t->world, sizeof(me))))
			return gk_err_sys(err, ENOMEM, "memory check");
		if (gk_nn_tr_gather(t, me, all, sizeof(me), err) < 0) {
			free(all);
			return -1;
		}
		for (int r = 0; r < t->world; r++)
			q.dev_ranks += all[2 * r] == me[0] && all[2 * r + 1] == me[1];
		free(all);
		if (gk_cuda_mem_info(&q.dev_free, &total, &why) < 0)
			q.dev_need = 0; /* gk_nn_new will say what is wrong */
	}
	int rc = 0;
	if (planned && !gk_mem_room_check(&q, &room) && !t->o.force) {
		char need[32], avail[32], each[32], fix[256];
		/* --mem-limit bounds the device's bytes on a GPU */
		int dev = room.limit == GK_MEM_LIMIT_DEVICE ||
			  (room.limit == GK_MEM_LIMIT_RANK && q.dev_need);
		uint64_t mine = dev ? q.dev_need : q.host_need;
		/* a GPU's host too small: the candidates still fit its device */
		uint64_t cap = room.avail / (uint64_t)room.ranks;
		if (t->cuda && !dev && q.dev_need)
			cap = q.dev_free / (uint64_t)(q.dev_ranks > 0 ? q.dev_ranks : 1);
		fit_advice(t, &q, cap, dev, fix, sizeof(fix));
		gk_format_size(mine, 0, each, sizeof(each));
		gk_format_size(room.need, 0, need, sizeof(need));
		gk_format_size(room.avail, 0, avail, sizeof(avail));
		const char *with = room.limit == GK_MEM_LIMIT_AS ? "the address-space margin"
				   : room.limit == GK_MEM_LIMIT_DEVICE ? "nothing more"
								       : "the process margin";
		if (room.limit == GK_MEM_LIMIT_RANK)
			rc = gk_errf(err, "memory: a rank needs %s (%" PRIu64 " bytes by its accounting, "
				     "mem-estimate's model), more than --mem-limit %s; cheapest fix: "
				     "%s; or --force to allocate anyway", each, mine, avail, fix);
		else if (room.ranks == 1)
			rc = gk_errf(err, "memory: a rank needs %s (%s with %s), more than the %s that "
				     "%s leaves; cheapest fix: %s; or --force to allocate anyway",
				     each, need, with, avail, gk_mem_limit_name(room.limit), fix);
		else
			rc = gk_errf(err, "memory: a rank needs %s and %d ranks share %s: %s with %s, "
				     "more than the %s it leaves; cheapest fix: %s; or --force to "
				     "allocate anyway", each, room.ranks, gk_mem_limit_name(room.limit),
				     need, with, avail, fix);
	}
	return gk_nn_tr_agree_local(t, rc, err);
}
