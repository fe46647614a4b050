/*
 * pp_sched.c - pipeline parallelism, the trainer's side: the schedule
 * that moves a step's micro-batches through the stages (GPipe, or 1F1B),
 * the tied embedding's gradient summed between the first and the last
 * stage, the global norm with each parameter once, and the stages'
 * parameters and moments put together for a checkpoint (a stage holds
 * only its own range of them and the tied wte: the model's buffers are
 * mapped lazily, and the moments are the range's, dp.c).
 *
 * Every stage of a pipeline reads the same micro-batches (the first
 * needs the tokens, the last the targets), as the ranks of a tensor
 * group do; the data is split over the data-parallel groups only.
 *
 * The schedules (Narayanan et al. 2021, section 2.2; --grad-accum M is
 * the number of micro-batches, S the stages, s this one):
 *   gpipe  all M forwards, then all M backwards
 *   1f1b   min(S - 1 - s, M) forwards (the warm-up), then one forward
 *          and one backward in turn, then the backwards left (the
 *          cool-down): at most S - s micro-batches in flight on stage s
 * Each stage runs its backwards in micro-batch order 0 .. M-1 under both,
 * so both accumulate the same gradients in the same order: the same
 * bits. A stage keeps the activations of its micro-batches in flight, in
 * the model's slots (gk_nn_pp_slots): micro-batch k in slot k mod the
 * slots, min(M, S - s) of them under 1F1B (in flight on stage s are at
 * most the warm-up's S - 1 - s and the one of the steady state), M under
 * GPipe.
 *
 * Messages: activations forward, their gradients backward, each a
 * non-blocking send from a buffer of its own that is waited for only at
 * the end of the schedule, and a receive waited for when its value is
 * needed. A stage thus blocks only on receives, and the schedules' order
 * of receives has no cycle: no deadlock whatever the message sizes.
 *
 * On GPUs (the CUDA backend) the messages are device memory over NCCL, on
 * a communicator of the pipeline's own (and one of the embedding group's),
 * each opened once over the grid's host group (gk_comm_open_device), on
 * the model's stream. NCCL runs a communicator's calls in order on its
 * stream, where a send waits for its receive: a send is therefore held
 * until the stage's next receive and started with it in one group
 * (gk_comm_sendrecv, as Megatron-LM's send_forward_recv_backward), or
 * alone when the stage sends again first or the schedule ends. A send's
 * buffer is a copy on the model's stream (the slot's output is
 * overwritten by a later micro-batch), its request waited for at the end
 * of the schedule; a receive's buffer is the slot's, which NCCL writes
 * after the model's stream has finished with it (the stream contract of
 * lib/comm), and the host waits for it before queueing the kernels that
 * read it. The interleaved schedule's messages take lanes of their own
 * instead (see ilv_task).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"
#include "nn/train_internal.h"

static const char *const sched_names[] = {"1f1b", "gpipe", "interleaved"};
enum { NSCHED = sizeof(sched_names) / sizeof(sched_names[0]) };
/* the doubles of a stage's figures exchanged a step (stages_of) */
enum { NX = 5 };

int gk_nn_pp_sched_parse(const char *s)
{
	for (int i = 0; i < NSCHED; i++)
		if (!strcmp(s, sched_names[i]))
			return i;
	return -1;
}

const char *gk_nn_pp_sched_name(int k)
{
	return k >= 0 && k < NSCHED ? sched_names[k] : "?";
}

int gk_nn_pp_warning(char *buf, size_t len, const gk_nn_train_opts *o)
{
	int pp = o->pp, grad_accum = o->grad_accum;
	buf[0] = '\0';
	if (pp <= grad_accum || o->eval_only || o->steps <= 0)
		return 0;
	snprintf(buf, len, "--pp %d with --grad-accum %d: fewer micro-batches than stages leave "
		 "stages idle most of each step (the bubble, (%d-1)/%d, is %.0f%%); use "
		 "--grad-accum %d or more", pp, grad_accum, pp, grad_accum,
		 100.0 * (pp - 1) / grad_accum, 4 * pp);
	return 1;
}

struct gk_nn_pp {
	int M, S, s;
	int V;              /* model chunks a stage (the interleaved schedule's;
			     * else 1) */
	gk_comm *back;      /* interleaved: the gradients' messages, apart from
			     * the activations' (see ilv_task) */
	int warm;           /* the forwards before the first backward (pass_at) */
	uint64_t sbytes;    /* the send buffers' (sa, sg), allocated */
	int N;              /* interleaved: the group (ilv_task) */
	int *slot_of;       /* interleaved: micro-batch k's chunk c's slot,
			     * at k V + c, while it is in flight */
	int *free_slot;     /* ... the slots free, nfree of them */
	int nfree;
	size_t BT, NC;
	int32_t *in, *tg;   /* M micro-batches of B x T tokens and targets */
	int slots;          /* the model's activation slots */
	void *sa, *sg;      /* M activations and M gradients being sent */
	gk_comm_req **sq;   /* the sends outstanding */
	int nsq;
	gk_dtype dt;        /* the messages' (gk_nn_pp_dtype) */
	size_t es;          /* ... bytes of one element */
	gk_comm *dev, *emb; /* on GPUs: the pipeline's and the embedding
			     * group's device communicators */
	gk_comm *lane[2][3];/* on GPUs, interleaved: the activations' and the
			     * gradients' lanes, by colour (lane_of) */
	const void *hold;   /* on GPUs: a send held for the next receive */
	int hold_peer;
	double wait;        /* seconds waiting for receives this step */
	double span;        /* ... of the schedule's seconds */
	uint64_t bytes;     /* sent this step */
	uint64_t tp0;       /* gk_nn_tp_bytes at the schedule's start */
	double *ex;         /* the stages' wait, span, bytes and tensor-group
			     * bytes, 4 a stage, exchanged after the schedule */
	gk_nn_pp_stage *st; /* ... and what the log makes of them */
	double bubble;      /* the pipeline's (gk_nn_pp_stage) */
	int have;           /* a step's figures are in st */
};

void gk_nn_tr_pp_free(gk_nn_trainer *t)
{
	gk_nn_pp *p = t->pp;
	if (!p)
		return;
	free(p->in);
	free(p->tg);
	if (p->dev) {
		gk_comm_free(p->dev, p->sa);
		gk_comm_free(p->dev, p->sg);
		gk_comm_close(p->dev);
		gk_comm_close(p->emb);
	} else {
		free(p->sa);
		free(p->sg);
	}
	free(p->sq);
	free(p->ex);
	free(p->st);
	free(p->slot_of);
	free(p->free_slot);
	gk_comm_close(p->back);
	for (int k = 0; k < 2; k++)
		for (int c = 0; c < 3; c++)
			gk_comm_close(p->lane[k][c]);
	free(p);
	t->pp = NULL;
}

static int open_device(gk_nn_trainer *t, gk_err *err);
static int ilv_open(gk_nn_trainer *t, gk_err *err);

int gk_nn_tr_pp_open(gk_nn_trainer *t, gk_err *err)
{
	gk_nn_pp *p = calloc(1, sizeof *p);
	if (!p)
		return gk_errf(err, "pipeline: out of memory");
	t->pp = p;
	p->M = t->o.grad_accum;
	p->S = t->grid.pp;
	p->s = t->grid.pp_rank;
	p->V = t->o.pp_sched == GK_NN_PP_INTERLEAVED ? t->o.pp_chunks : 1;
	p->BT = (size_t)t->o.batch * (size_t)t->o.seq;
	p->NC = gk_nn_pp_count(t->m);
	/* a send's buffer of its own for each micro-batch's chunk */
	size_t M = (size_t)p->M * (size_t)p->V;
	p->dt = gk_nn_pp_dtype(t->m);
	p->es = p->dt == GK_DT_BF16 ? 2 : 4;
	if (t->cuda && open_device(t, err) < 0)
		return -1;
	p->in = malloc(M * p->BT * sizeof(int32_t));
	p->tg = malloc(M * p->BT * sizeof(int32_t));
	size_t bytes = M * p->NC * p->es;
	gk_err ignore;
	/* interleaved: the last stage sends its chunks' outputs to the first
	 * (all but the last chunk's), the first its gradients to the last */
	int wrap = p->V > 1;
	p->sa = p->s == p->S - 1 && !wrap ? NULL :
		p->dev ? gk_comm_alloc(p->dev, bytes, &ignore) : malloc(bytes);
	p->sg = p->s == 0 && !wrap ? NULL :
		p->dev ? gk_comm_alloc(p->dev, bytes, &ignore) : malloc(bytes);
	p->sbytes = (uint64_t)((p->sa != NULL) + (p->sg != NULL)) * bytes;
	p->sq = calloc(2 * M, sizeof(*p->sq));
	p->ex = calloc(NX * (size_t)p->S, sizeof(*p->ex));
	p->st = calloc((size_t)p->S, sizeof(*p->st));
	if (!p->in || !p->tg || ((p->s > 0 || wrap) && !p->sg) ||
	    ((p->s < p->S - 1 || wrap) && !p->sa) || !p->sq || !p->ex || !p->st)
		return gk_errf(err, "pipeline: out of memory for %zu micro-batches' buffers", M);
	if (p->V > 1)
		return ilv_open(t, err);
	p->slots = t->o.pp_sched == GK_NN_PP_GPIPE || p->M < p->S - p->s ? p->M : p->S - p->s;
	p->warm = t->o.pp_sched == GK_NN_PP_GPIPE ? p->M : p->S - 1 - p->s < p->M ? p->S - 1 - p->s
										: p->M;
	return gk_nn_pp_slots(t->m, p->slots, err);
}

/*
 * On GPUs: the pipeline's and the embedding group's device communicators,
 * opened over the grid's host groups on this rank's device, on the
 * model's stream. Every rank of the world opens them at once (the
 * trainer's setup), so one that cannot fails every rank.
 */
static int device_comm(gk_nn_trainer *t, gk_comm *host, gk_comm **out, gk_err *err)
{
	gk_comm_config cc = {.backend = GK_COMM_BACKEND_NCCL, .device = t->dev,
			     .timeout = t->o.timeout, .trace_dir = t->o.trace_dir};
	return gk_comm_open_device(host, &cc, out, err) < 0 ||
	       gk_comm_set_stream(*out, gk_nn_stream(t->m), err) < 0 ? -1 : 0;
}

static int open_device(gk_nn_trainer *t, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	int rc = device_comm(t, t->grid.ppc, &p->dev, err) < 0 ||
		 (t->grid.embc && device_comm(t, t->grid.embc, &p->emb, err) < 0) ? -1 : 0;
	if (rc < 0)
		gk_err_prefix(err, "pipeline stage %d: NCCL on the GPU", p->s);
	return rc;
}

/*
 * The lane of a message from stage from (grad: a gradient, to from - 1;
 * else an activation, to from + 1), on GPUs under the interleaved
 * schedule: the colour of the sender's parity, but the ring's wrap's
 * (S - 1 to 0 forward, 0 to S - 1 backward) a third when S is odd. On a
 * lane each stage only sends (to one peer) or only receives (from one),
 * see ilv_task.
 */
static gk_comm *lane_of(const gk_nn_pp *p, int grad, int from)
{
	int wrap = grad ? 0 : p->S - 1;
	return p->lane[grad][p->S % 2 && from == wrap ? 2 : from % 2];
}

/* the communicator of a message from stage from (grad: a gradient) */
static gk_comm *path(gk_nn_trainer *t, int grad, int from)
{
	gk_nn_pp *p = t->pp;
	if (p->lane[0][0])
		return lane_of(p, grad, from);
	if (p->dev)
		return p->dev;
	return grad && p->back ? p->back : t->grid.ppc;
}

/* On GPUs: the send held, alone (the stage sends again, or its schedule ends). */
static int flush(gk_nn_trainer *t, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	gk_comm_req *none;
	if (!p->hold)
		return 0;
	const void *b = p->hold;
	p->hold = NULL;
	return gk_comm_sendrecv(p->dev, b, p->hold_peer, NULL, -1, p->NC, p->dt,
				&p->sq[p->nsq++], &none, err);
}

/* grad: a gradient (the interleaved schedule's own communicator) */
static int recv_wait(gk_nn_trainer *t, void *buf, int peer, int grad, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	gk_comm_req *q, *sq = NULL;
	double t0 = gk_now();
	int rc;
	if (p->dev && !p->lane[0][0]) {
		/* with the send held, in one group */
		rc = gk_comm_sendrecv(p->dev, p->hold, p->hold ? p->hold_peer : -1, buf, peer,
				      p->NC, p->dt, &sq, &q, err);
		if (p->hold && rc == 0)
			p->sq[p->nsq++] = sq;
		p->hold = NULL;
	} else {
		rc = gk_comm_irecv(path(t, grad, peer), buf, p->NC, p->dt, peer, &q, err);
	}
	if (rc == 0)
		rc = gk_comm_wait(q, err);
	p->wait += gk_now() - t0;
	return rc;
}

/* buf's copy k (of the M in mine) sent to peer */
static int send(gk_nn_trainer *t, void *mine, int k, const void *buf, int peer, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	size_t n = p->NC * p->es;
	void *a = (char *)mine + (size_t)k * n;
	gk_comm *c = path(t, mine == p->sg, p->s);
	p->bytes += n;
	if (!p->dev) {
		memcpy(a, buf, n);
		return gk_comm_isend(c, a, p->NC, p->dt, peer, &p->sq[p->nsq++], err);
	}
	/* on the model's stream, after the kernels that wrote buf */
	if (flush(t, err) < 0 || gk_comm_to_device(p->dev, a, buf, n, err) < 0)
		return -1;
	if (p->lane[0][0])
		return gk_comm_isend(c, a, p->NC, p->dt, peer, &p->sq[p->nsq++], err);
	p->hold = a;
	p->hold_peer = peer;
	return 0;
}

/* a message's failure: where (the chunk under the interleaved schedule) */
static int where(const gk_nn_pp *p, int k, int c, const char *what, gk_err *err)
{
	if (p->V > 1)
		return gk_err_prefix(err, "pipeline stage %d, micro-batch %d, chunk %d: the %s",
				     p->s, k, c, what);
	return gk_err_prefix(err, "pipeline stage %d, micro-batch %d: the %s", p->s, k, what);
}

/*
 * Micro-batch k's forward on this stage's chunk c (the model's c S + s-th
 * chunk of layers; c 0 but under the interleaved schedule), in activation
 * slot i: its input from the stage before (the last stage's chunk c - 1
 * for the first stage's chunk c > 0), its output to the next (the first
 * stage's chunk c + 1 from the last stage's chunk c < V - 1).
 */
static int forward(gk_nn_trainer *t, int k, int c, int i, double *lsum, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	int first = p->s == 0 && c == 0, last = p->s == p->S - 1 && c == p->V - 1;
	gk_nn_pp_use_slot(t->m, i);
	gk_nn_pp_use_chunk(t->m, c);
	if (!first && recv_wait(t, gk_nn_pp_input(t->m), (p->s + p->S - 1) % p->S, 0, err) < 0)
		return where(p, k, c, "input", err);
	float l = 0;
	if (gk_nn_forward(t->m, p->in + (size_t)k * p->BT, last ? p->tg + (size_t)k * p->BT : NULL,
			  &l, err) < 0)
		return -1;
	if (last) {
		*lsum += l;
		return 0;
	}
	return send(t, p->sa, k * p->V + c, gk_nn_pp_output(t->m), (p->s + 1) % p->S, err);
}

static int backward(gk_nn_trainer *t, int k, int c, int i, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	int first = p->s == 0 && c == 0, last = p->s == p->S - 1 && c == p->V - 1;
	gk_nn_pp_use_slot(t->m, i);
	gk_nn_pp_use_chunk(t->m, c);
	if (!last && recv_wait(t, gk_nn_pp_grad(t->m), (p->s + 1) % p->S, 1, err) < 0)
		return where(p, k, c, "gradient", err);
	if (gk_nn_backward(t->m, 1.0f / (float)p->M, NULL, NULL, err) < 0)
		return -1;
	if (first)
		return 0;
	return send(t, p->sg, k * p->V + c, gk_nn_pp_grad(t->m), (p->s + p->S - 1) % p->S, err);
}

/*
 * The interleaved schedule (Narayanan et al. 2021, section 2.2.2;
 * Megatron-LM's forward_backward_pipelining_with_interleaving and its
 * get_schedule_table): stage s runs M V forwards and M V backwards in
 * groups of N micro-batches (gk_mem_pp_group: S when S divides M): a
 * group's micro-batches through chunk 0, then the same through chunk 1,
 * and so on, then the next group's; the last group is the M mod N left
 * when there are some (S or more). Its i-th backward is its i-th
 * forward's micro-batch on chunk V - 1 - c. The warm-up is (S - 1 - s) 2
 * + (V - 1) N forwards (all of them when M = S, as Megatron-LM), then one
 * forward and one backward in turn, then the backwards left. The bubble
 * is (S - 1) / (V M) of the busy time where 1F1B's is (S - 1) / M
 * (tools/bench/pp_sim.py checks both, and every N). Each chunk meets its
 * micro-batches in order 0 .. M-1 in both directions, so a layer's
 * gradients and the last stage's losses sum in 1F1B's order: the same
 * bits.
 *
 * The messages: the first and the last stages exchange activations and
 * gradients both ways (the ring's wrap); with S = 2 a pair of stages
 * sends each other activations and gradients, in orders that need not
 * agree (Megatron-LM refused 2 stages under this schedule for that
 * reason until it split the two directions' messages: its issue 750),
 * so the gradients go over a communicator of their own (p->back):
 * on each, a pair's messages are received in the order they were sent
 * (the map from a chunk's i-th forward to the next chunk's, i + S, keeps
 * the order, and likewise backwards).
 *
 * On GPUs NCCL matches a pair's messages in the order posted on a
 * communicator, as MPI does, but a send blocks its communicator's stream
 * until the peer's receive runs: a stage that sends to a peer and then
 * receives from it on one stream waits for a peer that does the same,
 * which 1F1B's send held for the next receive (send) answers, and the
 * interleaved schedule's orders do not (with S = 2 both directions, both
 * kinds, a pair). So each message goes on a lane (lane_of: a device
 * communicator of its own, each with its own stream), one a kind and
 * colour: the sender's parity (a third colour for the wrap when S is
 * odd), so that on a lane a stage only sends, to one peer, or only
 * receives, from one, in the order of the kind's messages above. A send
 * then holds up only the later sends of its lane, which its receiver
 * takes in that order anyway: the host's progress is MPI's, whose
 * schedule has no cycle. Megatron-LM splits its stages' messages the
 * same way by parity (its even_send_odd_recv and even_recv_odd_send
 * groups); a kind each keeps the order without its lockstep batches.
 *
 * The activations: one slot per micro-batch's chunk in flight, taken at
 * its forward and given back after its backward (a chunk's backwards do
 * not come in the order of the forwards), as many as the most in flight:
 * min(M V, warm-up + 1).
 */
static void ilv_task(const gk_nn_pp *p, int i, int fwd, int *k, int *c)
{
	/* the group's first micro-batch g0 and its size n (the last group's
	 * the M - g0 left) */
	int g0 = i / (p->N * p->V) * p->N, n = g0 + p->N < p->M ? p->N : p->M - g0;
	int j = (i - g0 * p->V) / n;
	*k = g0 + (i - g0 * p->V) % n;
	*c = fwd ? j : p->V - 1 - j;
}

static int ilv_warm(const gk_nn_pp *p)
{
	int n = p->M * p->V, w = (p->S - 1 - p->s) * 2 + (p->V - 1) * p->N;
	return p->M == p->S || w > n ? n : w;
}

static int ilv_open(gk_nn_trainer *t, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	size_t n = (size_t)p->M * (size_t)p->V;
	p->N = (int)gk_mem_pp_group(p->M, p->S);
	p->warm = ilv_warm(p);
	p->slots = p->warm + 1 < (int)n ? p->warm + 1 : (int)n;
	p->slot_of = calloc(n, sizeof(*p->slot_of));
	p->free_slot = calloc((size_t)p->slots, sizeof(*p->free_slot));
	if (!p->slot_of || !p->free_slot)
		return gk_errf(err, "pipeline: out of memory for %zu micro-batches' slots", n);
	/* every stage of the pipeline, at once (the trainer's setup) */
	if (!t->cuda && gk_comm_split(t->grid.ppc, 0, p->s, &p->back, err) < 0)
		return gk_err_prefix(err, "pipeline stage %d: the gradients' communicator", p->s);
	for (int k = 0; t->cuda && k < 2; k++)
		for (int c = 0; c < 2 + p->S % 2; c++)
			if (device_comm(t, t->grid.ppc, &p->lane[k][c], err) < 0)
				return gk_err_prefix(err, "pipeline stage %d: NCCL on the GPU, the %s' "
						     "lane %d", p->s, k ? "gradients" : "activations", c);
	return gk_nn_pp_slots(t->m, p->slots, err);
}

static int ilv_forward(gk_nn_trainer *t, int k, int c, double *lsum, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	if (p->nfree == 0)
		return gk_errf(err, "pipeline stage %d: no activation slot free for micro-batch "
			       "%d, chunk %d", p->s, k, c);
	int slot = p->slot_of[k * p->V + c] = p->free_slot[--p->nfree];
	return forward(t, k, c, slot, lsum, err);
}

static int ilv_backward(gk_nn_trainer *t, int k, int c, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	int slot = p->slot_of[k * p->V + c];
	if (backward(t, k, c, slot, err) < 0)
		return -1;
	p->free_slot[p->nfree++] = slot;
	return 0;
}

/*
 * The stage's j-th pass of its 2 M V: *fwd (a forward, else a backward),
 * its micro-batch *k and chunk *c. The three schedules have one shape:
 * p->warm forwards, then a forward and a backward in turn, then the
 * backwards left (GPipe's warm-up is all M forwards; the interleaved
 * schedule's i-th forward and backward are ilv_task's).
 */
static void pass_at(const gk_nn_pp *p, int j, int *fwd, int *k, int *c)
{
	int n = p->M * p->V, w = p->warm, i;
	if (j < w) {
		*fwd = 1;
		i = j;
	} else if (j < 2 * n - w) {
		*fwd = (j - w) % 2 == 0;
		i = (j - w) / 2 + (*fwd ? w : 0);
	} else {
		*fwd = 0;
		i = j - n;
	}
	if (p->V > 1) {
		ilv_task(p, i, *fwd, k, c);
	} else {
		*k = i;
		*c = 0;
	}
}

/*
 * The schedule's passes in turn. Before each, ZeRO-3 hears which pass
 * follows it (gk_nn_dp_next_pass): the data-parallel ranks of a stage
 * run the same schedule, so the gathers it starts ahead are the same
 * on each, in the same order.
 */
static int schedule(gk_nn_trainer *t, double *lsum, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	int n = 2 * p->M * p->V, rc = 0;
	p->nfree = p->slots;
	for (int i = 0; p->V > 1 && i < p->slots; i++)
		p->free_slot[i] = p->slots - 1 - i;
	for (int j = 0; rc == 0 && j < n; j++) {
		int fwd = -1, k, c = 0;
		if (j + 1 < n)
			pass_at(p, j + 1, &fwd, &k, &c);
		gk_nn_dp_next_pass(t->dp, fwd, c);
		pass_at(p, j, &fwd, &k, &c);
		if (p->V > 1)
			rc = fwd ? ilv_forward(t, k, c, lsum, err) : ilv_backward(t, k, c, err);
		else
			rc = fwd ? forward(t, k, 0, k % p->slots, lsum, err) :
			     backward(t, k, 0, k % p->slots, err);
	}
	return rc;
}

/*
 * The stages' figures of the step (gk_nn_pp_stage), every stage's own
 * clocks summed over the pipeline after its schedule (one allreduce of NX
 * doubles a stage, outside the spans it measures), and its accounted
 * activations: each rank of the pipeline learns every stage's, so rank
 * 0's log has them all.
 */
static int stages_of(gk_nn_trainer *t, gk_err *err)
{
	gk_nn_pp *p = t->pp;
	double *x = p->ex;
	memset(x, 0, NX * (size_t)p->S * sizeof(*x));
	x[NX * p->s] = p->wait;
	x[NX * p->s + 1] = p->span;
	x[NX * p->s + 2] = (double)p->bytes;
	x[NX * p->s + 3] = (double)(gk_nn_tp_bytes(t->m) - p->tp0);
	/* exact: bytes below 2^53 */
	x[NX * p->s + 4] = (double)t->mem.bytes[GK_MEM_ACTIVATIONS];
	gk_comm_trace_tag(t->grid.ppc, "stage times", -1); /* for the flight recorder */
	if (gk_comm_allreduce(t->grid.ppc, x, x, NX * (size_t)p->S, GK_DT_F64, GK_COMM_SUM, NULL,
			      err) < 0)
		return gk_err_prefix(err, "pipeline stage %d: the stages' times", p->s);
	double P = 0, idle = 0, busy = 0;
	for (int s = 0; s < p->S; s++)
		if (x[NX * s + 1] > P)
			P = x[NX * s + 1];
	for (int s = 0; s < p->S; s++) {
		gk_nn_pp_stage *g = &p->st[s];
		double b = x[NX * s + 1] - x[NX * s];
		g->busy_ms = b * 1e3;
		g->idle_ms = (P - b) * 1e3;
		g->bubble = b > 0 ? (P - b) / b : NAN;
		g->pp_bytes = (uint64_t)x[NX * s + 2];
		g->tp_bytes = (uint64_t)x[NX * s + 3];
		g->activations = (uint64_t)x[NX * s + 4];
		idle += P - b;
		busy += b;
	}
	p->bubble = busy > 0 ? idle / busy : NAN;
	p->have = 1;
	return 0;
}

int gk_nn_tr_pp_accumulate(gk_nn_trainer *t, double *lsum, double *part, gk_err *err)
{
	if (!t->pp && gk_nn_tr_pp_open(t, err) < 0)
		return -1;
	gk_nn_pp *p = t->pp;
	*lsum = 0;
	p->nsq = 0;
	p->wait = 0;
	p->bytes = 0;
	p->have = 0;
	p->tp0 = gk_nn_tp_bytes(t->m);
	double ta = gk_now();
	for (int k = 0; k < p->M; k++) {
		int r = gk_nn_data_next(t->data, p->in + (size_t)k * p->BT, p->tg + (size_t)k * p->BT,
					err);
		if (r == 0)
			r = gk_errf(err, "data '%s': no more micro-batches", t->o.data);
		if (r < 0)
			return -1;
	}
	double tb = gk_now();
	part[GK_NN_PART_DATA] += tb - ta;
	/* ZeRO-3: the stage's edges (embeddings, final norm) for the schedule */
	if (gk_nn_dp_micro_begin(t->dp, 0, p->M, err) < 0)
		return -1;
	int rc = schedule(t, lsum, err);
	if (rc == 0 && p->dev)
		rc = flush(t, err);
	if (rc < 0)
		return -1; /* the sends are left to MPI: the job ends */
	double tw = gk_now();
	for (int i = 0; i < p->nsq; i++)
		if (gk_comm_wait(p->sq[i], err) < 0)
			return gk_err_prefix(err, "pipeline stage %d", p->s);
	p->nsq = 0;
	p->wait += gk_now() - tw;
	p->span = gk_now() - tb;
	part[GK_NN_PART_COMPUTE] += p->span - p->wait;
	part[GK_NN_PART_COMM] += p->wait;
	return stages_of(t, err);
}

int gk_nn_tr_pp_eval(gk_nn_trainer *t, gk_nn_data *d, int64_t batches, double acc[2],
		     gk_err *err)
{
	gk_nn_pp *p = t->pp;
	/* the slot of micro-batch 0, whose activations the next step makes anew */
	gk_nn_pp_use_slot(t->m, 0);
	for (int64_t k = 0; batches <= 0 || k < batches; k++) {
		/* every stage of the pipeline reads the same batches, and ends
		 * at the same one */
		int r = gk_nn_data_next(d, t->in, t->tg, err);
		if (r <= 0)
			return r;
		/* through the stage's chunks in turn (one but interleaved) */
		for (int c = 0; c < p->V; c++) {
			int first = p->s == 0 && c == 0, last = p->s == p->S - 1 && c == p->V - 1;
			gk_nn_pp_use_chunk(t->m, c);
			if (!first && recv_wait(t, gk_nn_pp_input(t->m), (p->s + p->S - 1) % p->S,
						0, err) < 0)
				return gk_err_prefix(err, "pipeline stage %d, evaluation batch %lld: "
						     "the input", p->s, (long long)k);
			float l = 0;
			if (gk_nn_forward(t->m, t->in, last ? t->tg : NULL, &l, err) < 0)
				return -1;
			if (last) {
				acc[0] += l;
				acc[1] += 1;
				continue;
			}
			gk_comm_req *q;
			if (gk_comm_isend(path(t, 0, p->s), gk_nn_pp_output(t->m), p->NC, p->dt,
					  (p->s + 1) % p->S, &q, err) < 0 ||
			    gk_comm_wait(q, err) < 0)
				return gk_err_prefix(err, "pipeline stage %d, evaluation batch %lld",
						     p->s, (long long)k);
		}
	}
	return 0;
}

gk_comm *gk_nn_tr_pp_messages(const gk_nn_trainer *t)
{
	return t->pp && t->pp->dev ? t->pp->dev : t->grid.ppc;
}

int gk_nn_tr_pp_head_sets(const gk_nn_trainer *t)
{
	return t->pp && t->grid.pp_rank == t->grid.pp - 1 ? t->pp->slots : 0;
}

uint64_t gk_nn_tr_pp_buffer_bytes(const gk_nn_trainer *t)
{
	return t->pp ? t->pp->sbytes : 0;
}

void gk_nn_tr_pp_log(const gk_nn_trainer *t, gk_nn_train_log *lg)
{
	const gk_nn_pp *p = t->pp;
	int have = p && p->have;
	lg->pp_bytes = p ? p->bytes : 0;
	lg->pp_bubble = have ? p->bubble : NAN;
	lg->pp_stages = have ? p->S : 0;
	lg->pp_stage = have ? p->st : NULL;
}

int gk_nn_tr_pp_embed_sum(gk_nn_trainer *t, gk_err *err)
{
	/* Megatron's embedding group: the head's part of wte's gradient (the
	 * last stage's) and the embedding's (the first's), summed on both */
	if (!t->grid.embc)
		return 0;
	/* on GPUs the device's gradients, over the group's NCCL */
	gk_comm *c = t->pp->emb ? t->pp->emb : t->grid.embc;
	float *g = gk_nn_work_grads(t->m, t->m->wte);
	size_t n = t->m->wpe - t->m->wte;
	if (t->dp->ppshard) {
		/* ZeRO-1: this rank's piece of it, the same on both stages */
		g = gk_nn_work_grads(t->m, t->dp->own[1][0]);
		n = t->dp->own[1][1] - t->dp->own[1][0];
	}
	return gk_comm_allreduce(c, g, g, n, GK_DT_F32, GK_COMM_SUM, NULL, err);
}

int gk_nn_tr_pp_moments(gk_nn_trainer *t, int upload, gk_err *err)
{
	gk_nn_dp *dp = t->dp;
	/* the host's layout: the range's pieces, then wte's (dp.c) */
	for (int k = 0; k < 2; k++) {
		size_t at = k ? dp->per[0] : 0;
		if (dp->own[k][1] > dp->own[k][0] &&
		    gk_nn_moments_sync(t->m, dp->own[k][0], dp->own[k][1], dp->mom + at,
				       dp->vel + at, upload, err) < 0)
			return -1;
	}
	return 0;
}

int gk_nn_tr_pp_norm(gk_nn_trainer *t, double *norm, gk_err *err)
{
	/* the stage's own range (wte counted on the first stage only); under
	 * tensor parallelism its split tensors' slices from every rank of the
	 * tensor group, the replicated ones from its rank 0 alone */
	size_t lo, hi, shared;
	gk_nn_pp_range(t->m, t->grid.pp_rank, &lo, &hi, &shared);
	gk_nn_model *m = t->m;
	double ss = 0;
	/* on GPUs the range's on the device */
	if (t->cuda && gk_nn_work_sumsq_once(m, NULL, lo, hi, &ss, err) < 0)
		return -1;
	for (size_t i = 0; !t->cuda && i < m->nt_tensors; i++) {
		const gk_nn_tensor *x = &m->t[i];
		if (x->off >= lo && x->off < hi && (x->split != GK_NN_SPLIT_NONE || m->tpr == 0))
			ss += gk_nn_sumsq(m->grads + x->off, x->numel);
	}
	if ((t->grid.tpc &&
	     gk_comm_allreduce(t->grid.tpc, &ss, &ss, 1, GK_DT_F64, GK_COMM_SUM, NULL, err) < 0) ||
	    gk_comm_allreduce(t->grid.ppc, &ss, &ss, 1, GK_DT_F64, GK_COMM_SUM, NULL, err) < 0)
		return -1;
	*norm = sqrt(ss);
	return 0;
}

/*
 * ZeRO-1: every rank's pieces of the moments (a stage's range, and the
 * first stage's of wte, which the last stage's equal) to the collector,
 * world rank tp_rank (the first stage of the first data-parallel group),
 * over the world's communicator; out[1..2] the collector's, else NULL.
 */
static int collect_pieces(gk_nn_trainer *t, float *out[3], gk_err *err)
{
	const gk_nn_dp *dp = t->dp;
	int tp = t->grid.tp, pp = t->grid.pp, root = t->grid.tp_rank;
	gk_comm_req *q[4];
	int nq = 0;
	if (t->rank != root) {
		for (int k = 0; k < (t->grid.pp_rank == 0 ? 2 : 1); k++) {
			size_t n = dp->own[k][1] - dp->own[k][0], at = k ? dp->per[0] : 0;
			for (int v = 0; n && v < 2; v++)
				if (gk_comm_isend(t->comm, (v ? dp->vel : dp->mom) + at, n, GK_DT_F32,
						  root, &q[nq++], err) < 0)
					return -1;
		}
		for (int i = 0; i < nq; i++)
			if (gk_comm_wait(q[i], err) < 0)
				return -1;
		return 0;
	}
	for (int s = 0; s < pp; s++)
		for (int r = 0; r < t->grid.dp; r++)
			for (int k = 0; k < (s == 0 ? 2 : 1); k++) {
				size_t a, b;
				int w = r * tp * pp + s * tp + root;
				gk_nn_dp_pp_piece(dp, s, r, k, &a, &b);
				for (int v = 0; a < b && v < 2; v++) {
					float *to = out[1 + v] + a;
					gk_comm_req *rq;
					if (w == t->rank)
						memcpy(to, (v ? dp->vel : dp->mom) + (k ? dp->per[0] : 0),
						       (b - a) * sizeof(float));
					else if (gk_comm_irecv(t->comm, to, b - a, GK_DT_F32, w, &rq,
							       err) < 0 ||
						 gk_comm_wait(rq, err) < 0)
						return -1;
				}
			}
	return 0;
}

/*
 * The whole model's parameters and moments, in the flat buffer's layout,
 * put together on the first stage of the first data-parallel group's
 * pipelines (a checkpoint's copy, the only time a rank holds them all):
 * each later stage sends its range of the parameters and of its moments
 * (those of the last stage's shared wte are the first stage's too, the
 * same update on the same gradients). The other pipelines hold replicas
 * and send nothing, but under ZeRO-1, where every rank sends its pieces of
 * the moments (collect_pieces).
 */
static int collect(gk_nn_trainer *t, float *out[3], gk_err *err)
{
	const gk_nn_dp *dp = t->dp;
	size_t N = gk_nn_nparams(t->m), n = dp->hi - dp->lo;
	int in = t->grid.dp_rank == 0, rc = 0;
	out[0] = out[1] = out[2] = NULL;
	for (int k = 0; in && t->grid.pp_rank == 0 && k < 3; k++)
		if (!(out[k] = malloc(N * sizeof(float) + 1)))
			rc = gk_err_sys(err, ENOMEM, "checkpoint: the whole model's copy");
	/* agreed before any message, which would wait for ever otherwise */
	if (gk_nn_tr_agree_local(t, rc, err) < 0) {
		for (int k = 0; k < 3; k++)
			free(out[k]), out[k] = NULL;
		return -1;
	}
	/* ZeRO-1: the moments are pieces, from every rank */
	int K = dp->ppshard ? 1 : 3;
	if (!in)
		return dp->ppshard ? collect_pieces(t, out, err) : 0;
	const float *mine[3] = {gk_nn_params(t->m) + dp->lo, dp->mom, dp->vel};
	if (t->grid.pp_rank > 0) {
		gk_comm_req *q[3];
		for (int k = 0; k < K; k++)
			if (gk_comm_isend(t->grid.ppc, mine[k], n, GK_DT_F32, 0, &q[k], err) < 0)
				return -1;
		for (int k = 0; k < K; k++)
			if (gk_comm_wait(q[k], err) < 0)
				return -1;
		return dp->ppshard ? collect_pieces(t, out, err) : 0;
	}
	for (int k = 0; k < K; k++)
		memcpy(out[k] + dp->lo, mine[k], n * sizeof(float));
	for (int s = 1; s < t->grid.pp; s++) {
		size_t lo, hi, shared;
		gk_nn_pp_range(t->m, s, &lo, &hi, &shared);
		for (int k = 0; k < K; k++) {
			gk_comm_req *q;
			if (gk_comm_irecv(t->grid.ppc, out[k] + lo, hi - lo, GK_DT_F32, s, &q,
					  err) < 0 ||
			    gk_comm_wait(q, err) < 0)
				return -1; /* out[] freed by the caller */
		}
	}
	return dp->ppshard ? collect_pieces(t, out, err) : 0;
}

/*
 * The interleaved schedule's blocks lie stage-major in the flat buffer
 * (gk_nn_pp_place): the parameters are written by their tensors' offsets,
 * but the moments are the flat buffer's, stored in the Hugging Face order
 * that every other layout reads (resume.c, gk_nn_pp_from_hf). Under
 * tensor parallelism the gather that follows (checkpoint.c) places every
 * tensor of both by its offsets, in that order already.
 */
int gk_nn_tr_pp_collect(gk_nn_trainer *t, float *out[3], gk_err *err)
{
	if (collect(t, out, err) < 0)
		return -1;
	if (!out[1] || !t->pp || t->pp->V == 1 || t->grid.tp > 1)
		return 0;
	size_t N = gk_nn_nparams(t->m);
	float *tmp = malloc(N * sizeof(float) + 1);
	if (!tmp)
		return gk_err_sys(err, ENOMEM, "checkpoint: the moments' copy");
	for (int k = 1; k < 3; k++) {
		memcpy(tmp, out[k], N * sizeof(float));
		gk_nn_pp_to_hf(t->m, tmp, out[k]);
	}
	free(tmp);
	return 0;
}
