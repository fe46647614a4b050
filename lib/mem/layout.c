/*
 * layout.c - gpu-train's own buffers as lib/mem states them, for the
 * estimate (estimate.c) and for gpu-train's check before it allocates:
 * its flat layout over the grid (a tensor rank's table, a stage's
 * segments, a rank's pieces of them), ZeRO-2's and ZeRO-3's device
 * buffers (a tensor rank's too), a GPU rank's host terms, --compress's
 * feedback and wire buffers and, under int8 over a tensor group on the
 * CPU, the replicated tensors' buffer, a tensor group's buffers and the
 * logits' padded columns.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "hf/hf.h"
#include "mem/mem.h"

int gk_mem_zero2_device(int64_t layers, int64_t hidden, int64_t vocab, int64_t positions,
			int64_t tp, uint64_t bucket, int overlap, uint64_t *head, uint64_t *ring,
			size_t *nbuckets, gk_err *err)
{
	gk_mem_shape s = {.layers = layers, .hidden = hidden, .vocab = vocab,
			  .positions = positions, .tp = tp};
	gk_mem_flat f;
	if (gk_mem_flat_layout(&s, &f, err) < 0)
		return gk_err_prefix(err, "ZeRO-2 gradient buffers");
	/* gpu-train's flat layout (a tensor rank's): wte (padded rows, its
	 * slice), wpe, the blocks (ln_1, c_attn, attn.c_proj, ln_2, c_fc,
	 * mlp.c_proj: 12 C^2 + 7 C over tp, + 6 C), ln_f; a block's edges and
	 * the final norm's start are the cuts */
	size_t C = (size_t)hidden, L = (size_t)layers, T = tp > 1 ? (size_t)tp : 1;
	size_t vp = (size_t)gk_hf_vocab_padded(vocab);
	size_t below = vp * C / T + (size_t)positions * C, block = (12 * C * C + 7 * C) / T + 6 * C;
	size_t n = (size_t)f.n;
	size_t *cut = calloc(L + 2, sizeof(*cut)), *lo = NULL, nb = 0, above = 0, len = 0;
	if (!cut)
		return gk_errf(err, "ZeRO-2 gradient buffers: out of memory");
	for (size_t l = 0; l <= L; l++)
		cut[l] = below + l * block;
	cut[L + 1] = n;
	size_t align = gk_comm_grads_align();
	nb = gk_comm_grads_plan(n, bucket, align, cut, L + 2, below, NULL);
	if (!(lo = calloc(nb + 1, sizeof(*lo)))) {
		free(cut);
		return gk_errf(err, "ZeRO-2 gradient buffers: out of memory");
	}
	gk_comm_grads_plan(n, bucket, align, cut, L + 2, below, lo);
	for (size_t i = 0; i < nb; i++) {
		size_t hi = i ? lo[i - 1] : n;
		if (lo[i] >= below) {
			above++;
			if (hi - lo[i] > len)
				len = hi - lo[i];
		}
	}
	size_t nslot = overlap ? 3 : 1;
	if (nslot > above)
		nslot = above;
	*head = (uint64_t)below * sizeof(float);
	*ring = (uint64_t)nslot * len * sizeof(float);
	if (nbuckets)
		*nbuckets = above;
	free(lo);
	free(cut);
	return 0;
}

int gk_mem_zero3_device(const gk_mem_shape *s, int es, int nslot, uint64_t *edge,
			uint64_t *ring, gk_err *err)
{
	gk_mem_flat f;
	if (gk_mem_flat_layout(s, &f, err) < 0)
		return gk_err_prefix(err, "ZeRO-3 parameter units");
	if ((es != 2 && es != 4) || nslot < 1 || nslot > s->layers)
		return gk_errf(err, "ZeRO-3 parameter units: %d-byte elements and %d block "
			       "buffers for %lld blocks are out of bounds", es, nslot,
			       (long long)s->layers);
	/*
	 * gpu-train's flat layout (a tensor rank's slices, padded to the
	 * data-parallel group): the embeddings, the blocks, the final norm
	 * and the padding. A pipeline's first stage holds the embeddings'
	 * unit, its last the tied wte and the final norm's, one between them
	 * neither (model_dist_cuda.c's units)
	 */
	uint64_t C = (uint64_t)s->hidden, T = (uint64_t)(s->tp > 1 ? s->tp : 1);
	uint64_t S = (uint64_t)(s->pp > 1 ? s->pp : 1), st = (uint64_t)s->stage;
	uint64_t wte = (uint64_t)gk_hf_vocab_padded(s->vocab) * C / T;
	uint64_t below = wte + (uint64_t)s->positions * C, block = (12 * C * C + 7 * C) / T + 6 * C;
	uint64_t head = st == 0 ? below : st == S - 1 ? wte : 0;
	uint64_t tail = st == S - 1 ? f.nflat - (below + (uint64_t)s->layers * block) : 0;
	*edge = (uint64_t)es * (head + tail);
	*ring = (uint64_t)es * (uint64_t)nslot * block;
	return 0;
}

int gk_mem_flat_layout(const gk_mem_shape *s, gk_mem_flat *out, gk_err *err)
{
	int64_t dp = s->dp ? s->dp : 1, tp = s->tp ? s->tp : 1, pp = s->pp ? s->pp : 1;
	int64_t vp = gk_hf_vocab_padded(s->vocab);
	if (s->layers < 1 || s->layers > (1 << 16) || s->hidden < 1 || s->hidden > (1 << 16) ||
	    s->vocab < 1 || s->vocab > ((int64_t)1 << 32) || s->positions < 0 ||
	    s->positions > ((int64_t)1 << 32) || dp < 1 || dp > (1 << 24) || tp < 1 ||
	    tp > (1 << 16) || pp < 1 || pp > (1 << 16) || s->stage < 0 || s->stage >= pp ||
	    s->zero < 0 || s->zero > 3)
		return gk_errf(err, "gpu-train's layout: a GPT-2 of %lld layers, width %lld, %lld "
			       "tokens and %lld positions at stage %d of dp %lld x pp %lld x tp "
			       "%lld under ZeRO %d is out of bounds", (long long)s->layers,
			       (long long)s->hidden, (long long)s->vocab, (long long)s->positions,
			       s->stage, (long long)dp, (long long)pp, (long long)tp, s->zero);
	if (s->hidden % tp || vp % tp || s->layers < pp)
		return gk_errf(err, "gpu-train's layout: tp %lld must divide the width %lld and "
			       "the padded vocabulary %lld, pp %lld be at most the %lld layers",
			       (long long)tp, (long long)s->hidden, (long long)vp, (long long)pp,
			       (long long)s->layers);
	/* lib/nn's table (gpt.c): wte (its rows split), wpe, the blocks (the
	 * norms and the row-parallel biases whole, the rest split: 12 C^2 +
	 * 7 C over tp, + 6 C), ln_f */
	uint64_t C = (uint64_t)s->hidden, T = (uint64_t)tp, W = (uint64_t)dp, S = (uint64_t)pp;
	uint64_t wte = (uint64_t)vp * C / T, wpe = (uint64_t)s->positions * C;
	uint64_t blk = (12 * C * C + 7 * C) / T + 6 * C, L = (uint64_t)s->layers;
	/* the stage's layers l0 .. l1 - 1, the first L mod pp stages one more
	 * (gk_nn_pp_layers) */
	uint64_t st = (uint64_t)s->stage, q = L / S, rem = L % S;
	uint64_t l0 = st * q + (st < rem ? st : rem), l1 = l0 + q + (st < rem);
	memset(out, 0, sizeof(*out));
	out->n = wte + wpe + L * blk + 2 * C;
	out->grid = tp > 1 || pp > 1;
	out->shard = s->zero > 0 && dp > 1;
	out->nflat = out->shard ? (out->n + W - 1) / W * W : out->n;
	if (!out->grid) {
		out->seg[0] = out->nflat;
	} else {
		/* gk_nn_pp_range: the stage's blocks, the embeddings on the
		 * first and the final norm on the last, which also holds wte
		 * (the tied head's) apart; a sharded first stage cuts its wte
		 * as a segment of its own, as the last does (pp_shard.c) */
		uint64_t lo = st == 0 ? 0 : wte + wpe + l0 * blk;
		uint64_t hi = st == S - 1 ? out->n : wte + wpe + l1 * blk;
		int apart = S > 1 && (st == S - 1 || (st == 0 && out->shard));
		out->seg[1] = apart ? wte : 0;
		out->seg[0] = hi - lo - (apart && st == 0 ? wte : 0);
	}
	for (int k = 0; k < 2; k++)
		out->piece[k] = out->shard ? (out->seg[k] + W - 1) / W : out->seg[k];
	return 0;
}

static const char *const host_names[GK_MEM_NHOST] = {
	"host_params", "host_grads", "host_staging", "host_moments", "host_grad_shard"};

const char *gk_mem_host_name(gk_mem_host_term t)
{
	return (unsigned)t < GK_MEM_NHOST ? host_names[t] : "?";
}

static uint64_t fbytes(uint64_t floats)
{
	return (4 * floats + 63) / 64 * 64;
}

int gk_mem_gpu_host(const gk_mem_shape *s, int offload, uint64_t out[GK_MEM_NHOST],
		    gk_err *err)
{
	gk_mem_flat f;
	if (gk_mem_flat_layout(s, &f, err) < 0)
		return -1;
	/* ZeRO-3's host copy is its range (the whole model goes device to
	 * device); a pipeline stage's mirrors are the pages of its segments,
	 * as its device holds them */
	uint64_t R = f.piece[0] + f.piece[1], stage = f.seg[0] + f.seg[1];
	int z3 = f.shard && s->zero == 3, z2 = f.shard && s->zero >= 2;
	int pp = (s->pp ? s->pp : 1) > 1;
	out[GK_MEM_HOST_PARAMS] = fbytes(pp ? stage : z3 ? R : f.nflat);
	/* ZeRO-2's gradient buckets, a tensor slice's too (not a pipeline
	 * stage's: its whole segments, pp_shard.c) */
	int buckets = z2 && !pp;
	out[GK_MEM_HOST_GRADS] = buckets ? 0 : fbytes(pp ? stage : f.nflat);
	out[GK_MEM_HOST_STAGING] = 4 * f.n < GK_MEM_GPU_STAGING ? 4 * f.n : GK_MEM_GPU_STAGING;
	out[GK_MEM_HOST_MOMENTS] = 2 * 4 * (R + 1);
	out[GK_MEM_HOST_GRAD_SHARD] = offload && buckets ? 4 * R : 0;
	return 0;
}

int gk_mem_compress_bytes(const gk_mem_shape *s, int compress, uint64_t *feedback,
			  uint64_t *wire, gk_err *err)
{
	gk_mem_flat f;
	if (gk_mem_flat_layout(s, &f, err) < 0)
		return -1;
	/* ZeRO-0's buckets: the whole buffer, unrounded; ZeRO-1's
	 * reduce-scatter (and ZeRO-2's and 3's buckets, the same feedback):
	 * the flat buffer; a stage's or a tensor slice's: its segments */
	*feedback = 4 * (f.grid ? f.seg[0] + f.seg[1] : f.shard ? f.nflat : f.n);
	uint64_t piece = f.piece[0] > f.piece[1] ? f.piece[0] : f.piece[1];
	*wire = f.shard ? gk_comm_compress_scratch((gk_comm_compress)compress, (size_t)piece) : 0;
	return 0;
}

/*
 * The replicated floats of a tensor rank's table in [0, x): wpe, and in
 * each block ln_1, then attn.c_proj's bias with ln_2, then mlp.c_proj's
 * bias (lib/nn's gpt.c order: ln_1, c_attn, attn.c_proj, ln_2, c_fc,
 * mlp.c_proj, each weight before its bias), then ln_f.
 */
static uint64_t replicas_below(uint64_t x, uint64_t C, uint64_t T, uint64_t wte, uint64_t wpe,
			       uint64_t L)
{
	uint64_t a = (4 * C * C + 3 * C) / T, f = (8 * C * C + 4 * C) / T;
	uint64_t blk = 6 * C + a + f, base = wte + wpe;
	if (x <= wte)
		return 0;
	if (x <= base)
		return x - wte;
	if (x >= base + L * blk)
		return wpe + 6 * C * L + (x - base - L * blk);
	uint64_t l = (x - base) / blk, o = (x - base) % blk;
	uint64_t r = o < 2 * C ? o : 2 * C;
	r += o <= 2 * C + a ? 0 : o - (2 * C + a) < 3 * C ? o - (2 * C + a) : 3 * C;
	r += o <= 5 * C + a + f ? 0 : o - (5 * C + a + f);
	return wpe + 6 * C * l + r;
}

int gk_mem_tp_replicas(const gk_mem_shape *s, uint64_t *floats, gk_err *err)
{
	gk_mem_flat f;
	if (gk_mem_flat_layout(s, &f, err) < 0)
		return -1;
	uint64_t C = (uint64_t)s->hidden, T = (uint64_t)(s->tp ? s->tp : 1);
	uint64_t W = (uint64_t)(s->dp ? s->dp : 1), L = (uint64_t)s->layers;
	uint64_t wte = (uint64_t)gk_hf_vocab_padded(s->vocab) * C / T;
	uint64_t wpe = (uint64_t)s->positions * C;
	/* the stage's segments (gk_mem_flat_layout's): seg[0] ends where the
	 * stage does, seg[1] is wte's [0, seg[1]) */
	uint64_t S = (uint64_t)(s->pp ? s->pp : 1), st = (uint64_t)s->stage;
	uint64_t q = L / S, rem = L % S, l1 = (st + 1) * q + (st + 1 < rem ? st + 1 : rem);
	uint64_t hi = st == S - 1 ? f.n : wte + wpe + l1 * 6 * C +
				  l1 * ((12 * C * C + 7 * C) / T);
	uint64_t s0[2] = {hi - f.seg[0], 0};
	*floats = 0;
	for (uint64_t r = 0; r < (f.shard ? W : 1); r++) {
		uint64_t n = 0;
		for (int k = 0; k < 2; k++) {
			uint64_t p = f.piece[k], len = f.seg[k];
			uint64_t a = s0[k] + (r * p < len ? r * p : len);
			uint64_t b = s0[k] + ((r + 1) * p < len ? (r + 1) * p : len);
			n += replicas_below(b, C, T, wte, wpe, L) -
			     replicas_below(a, C, T, wte, wpe, L);
		}
		*floats = n > *floats ? n : *floats;
	}
	return 0;
}

uint64_t gk_mem_pp_zero2_live(const gk_mem_flat *f)
{
	/* the stage's segments less the rank's pieces, each rounded as
	 * lib/nn maps them (64 bytes) */
	return fbytes(f->seg[0] + f->seg[1]) - fbytes(f->piece[0] + f->piece[1]);
}

uint64_t gk_mem_tp_buffers(uint64_t tokens, int64_t hidden, int cuda)
{
	if (cuda)
		return (4 * tokens * (uint64_t)hidden + 255) / 256 * 256 +
		       (16 * tokens + 255) / 256 * 256;
	return 4 * ((3 * tokens + 15) / 16 * 16);
}

uint64_t gk_mem_pp_buffers(int64_t pp, int64_t stage, int64_t chunks, int64_t micro,
			   uint64_t count, int es)
{
	if (pp < 2)
		return 0;
	int wrap = chunks > 1;
	uint64_t sends = (uint64_t)(stage < pp - 1 || wrap) + (uint64_t)(stage > 0 || wrap);
	return sends * (uint64_t)micro * (uint64_t)(chunks > 1 ? chunks : 1) * count *
	       (uint64_t)es;
}

void gk_mem_logits(int64_t vocab, int64_t tp, uint64_t tokens, int es, uint64_t *alloc,
		   uint64_t *model)
{
	uint64_t t = tp > 1 ? (uint64_t)tp : 1;
	*alloc = tokens * (uint64_t)es * ((uint64_t)gk_hf_vocab_padded(vocab) / t);
	*model = (uint64_t)llround((double)tokens * es * (double)vocab / (double)t);
}
