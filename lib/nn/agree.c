/*
 * agree.c - what the ranks agree on before and between steps: a few
 * small collectives over the world's communicator, failures said once
 * for the job (every rank exits cleanly, the first failing rank says
 * why), the options every rank must share, and work rank 0 does alone
 * while the others wait without meeting --timeout.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/train_internal.h"

/* Rank 0's bytes to every rank. */
int gk_nn_tr_bcast(gk_nn_trainer *t, void *buf, size_t bytes, gk_err *err)
{
	if (t->world == 1)
		return 0;
	return gk_comm_broadcast(t->comm, buf, buf, bytes / 4, GK_DT_I32, 0, err);
}

/* Every rank's bytes-sized record into all (world * bytes). */
int gk_nn_tr_gather(gk_nn_trainer *t, const void *mine, void *all,
			size_t bytes, gk_err *err)
{
	if (t->world == 1) {
		memcpy(all, mine, bytes);
		return 0;
	}
	return gk_comm_allgather(t->comm, mine, all, bytes / 4, GK_DT_I32, NULL, err);
}

int gk_nn_tr_sum(gk_nn_trainer *t, double *v, size_t n, gk_err *err)
{
	if (t->world == 1)
		return 0;
	return gk_comm_host_allreduce_f64(t->comm, v, n, GK_COMM_SUM, err);
}

/*
 * A failure that nfail ranks met (every rank knows nfail; mine is this
 * rank's error, or NULL): every rank fails with it and exits cleanly,
 * and the first failing rank says why, once for the job; in a grid (--tp,
 * --pp) naming itself by its world rank and coordinates, which the count
 * alone leaves to guess.
 */
int gk_nn_tr_agreed_failure(gk_nn_trainer *t, double nfail, const gk_err *mine,
			  gk_err *err)
{
	double first = mine ? t->rank : t->world;
	if (t->world > 1 &&
	    gk_comm_host_allreduce_f64(t->comm, &first, 1, GK_COMM_MIN, err) < 0)
		return -1;
	t->agreed = 1;
	t->reporter = (int)first;
	if (!mine)
		return gk_errf(err, "rank %d failed", t->reporter);
	if (t->world > 1 && (t->o.tp > 1 || t->o.pp > 1)) {
		char at[64];
		gk_nn_grid_where(at, sizeof(at), t->world, t->reporter, &t->o);
		return gk_errf(err, "%s (%g of %d ranks; %s%s)", mine->msg, nfail, t->world,
			       nfail > 1 ? "the first: " : "", at);
	}
	if (t->world > 1)
		return gk_errf(err, "%s (%g of %d ranks)", mine->msg, nfail, t->world);
	return gk_errf(err, "%s", mine->msg);
}

/*
 * After work each rank does alone (reading files, allocating), whether
 * any failed (rc < 0 here, with err): a failure that every rank meets,
 * such as a dataset too small for the world, is said once for the job,
 * and one rank's is the job's, without an abort.
 */
int gk_nn_tr_agree_local(gk_nn_trainer *t, int rc, gk_err *err)
{
	gk_err mine = *err;
	double n = rc < 0;
	if (gk_nn_tr_sum(t, &n, 1, err) < 0)
		return -1;
	if (n == 0)
		return 0;
	if (t->world == 1) {
		t->agreed = 1;
		return -1;
	}
	return gk_nn_tr_agreed_failure(t, n, rc < 0 ? &mine : NULL, err);
}

/*
 * Whether every rank holds the same 64-bit identity: its smallest and
 * largest over the ranks, in two halves of 32 bits (exact in a double),
 * must be equal. When they are not, every rank knows (1, t->agreed set)
 * and the caller says what differs.
 */
int gk_nn_tr_agree_id(gk_nn_trainer *t, uint64_t id, gk_err *err)
{
	if (t->world == 1)
		return 0;
	double lo[2] = {(double)(id >> 32), (double)(id & UINT32_MAX)}, hi[2] = {lo[0], lo[1]};
	if (gk_comm_host_allreduce_f64(t->comm, lo, 2, GK_COMM_MIN, err) < 0 ||
	    gk_comm_host_allreduce_f64(t->comm, hi, 2, GK_COMM_MAX, err) < 0)
		return -1;
	if (lo[0] == hi[0] && lo[1] == hi[1])
		return 0;
	t->agreed = 1;
	return 1;
}

/*
 * --data (and --val-data) is the same string on every rank
 * (agree_options), but hosts with copies of their own may hold other
 * files under it: ranks that see other shard lists or token files of
 * other lengths split the data differently, some samples trained twice
 * and others never, without a word. Compare what they opened.
 */
int gk_nn_tr_agree_data(gk_nn_trainer *t, const gk_nn_data *d, const char *src, gk_err *err)
{
	int rc = gk_nn_tr_agree_id(t, gk_nn_data_identity(d), err);
	if (rc <= 0)
		return rc;
	return gk_errf(err, "data '%s': the ranks see different files (shard names or sample "
		       "counts, or token file lengths): every rank must read the same data", src);
}

static uint64_t fbits(double x)
{
	uint64_t b;
	memcpy(&b, &x, sizeof b);
	return b;
}

/*
 * Every rank must train the same model on the same schedule: ranks
 * started with different options would size their buffers differently
 * and meet in collectives of different lengths (heap corruption inside
 * MPI), or stall in different ones, or drift apart silently. This is the
 * first collective after the world opens. The caller's option table says
 * which options must agree (gpu-train: all but --threads and --recompute,
 * which change neither a value nor a collective, and what only rank 0
 * acts on: output, sampling); to them the trainer adds what they resolved
 * to on this rank, the model's shape from a config.json that each node
 * reads for itself.
 */
int gk_nn_tr_agree_options(const gk_nn_trainer *t, gk_err *err)
{
	const gk_nn_train_opts *o = &t->o;
	const gk_nn_config *c = &o->cfg;
	const gk_comm_setting mine[] = {
		{"--config", (uint64_t)o->have_config},
		{"config.json n_layer", (uint64_t)c->layers},
		{"config.json n_embd", (uint64_t)c->hidden},
		{"config.json n_head", (uint64_t)c->heads},
		{"config.json vocab_size", (uint64_t)c->vocab},
		{"config.json n_positions", (uint64_t)c->positions},
		{"config.json layer_norm_epsilon", fbits(c->ln_eps)},
	};
	/* no allocation: a rank that failed one would miss the collective */
	gk_comm_setting all[160];
	size_t n = o->nagree + GK_ARRAY_SIZE(mine);
	if (n > GK_ARRAY_SIZE(all))
		return gk_errf(err, "%zu options to compare: more than %zu", n, GK_ARRAY_SIZE(all));
	if (o->nagree)
		memcpy(all, o->agree, o->nagree * sizeof(*all));
	memcpy(all + o->nagree, mine, sizeof(mine));
	return gk_comm_agree(t->comm, all, n, "every rank must be started with the same options",
			     err);
}

/* Work rank 0 does alone, in a thread (rank0_alone). */
typedef struct alone {
	int (*fn)(gk_nn_trainer *t, const char *arg, gk_err *err);
	gk_nn_trainer *t;
	const char *arg;
	gk_err err;
	int rc;
	atomic_int done;
} alone;

static void *alone_main(void *p)
{
	alone *a = p;
	a->rc = a->fn(a->t, a->arg, &a->err);
	atomic_store(&a->done, 1);
	return NULL;
}

/*
 * fn, run by rank 0 alone while the others wait for its outcome. A long
 * one (hashing a large checkpoint on a slow filesystem) would keep them
 * in one collective past --timeout, and the job would end as a stopped
 * rank; so rank 0 runs it in a thread and every rank agrees every 100 ms
 * whether it is done, as the checkpoint writes do. Returns on every rank
 * 0 when fn succeeded, 1 when it failed (rank 0's *mine says why), or -1.
 */
int gk_nn_tr_rank0_alone(gk_nn_trainer *t, int (*fn)(gk_nn_trainer *, const char *, gk_err *),
		       const char *arg, gk_err *mine, gk_err *err)
{
	alone a = {.fn = fn, .t = t, .arg = arg};
	pthread_t th;
	int threaded = 0;
	if (t->rank == 0) {
		threaded = t->world > 1 && pthread_create(&th, NULL, alone_main, &a) == 0;
		if (!threaded)
			alone_main(&a);
	}
	int rc = 0;
	for (;;) {
		for (int i = 0; threaded && i < 100 && !atomic_load(&a.done); i++)
			usleep(1000);
		double v = t->rank != 0 || atomic_load(&a.done);
		if (gk_comm_host_allreduce_f64(t->comm, &v, 1, GK_COMM_MIN, err) < 0) {
			rc = -1;
			break;
		}
		if (v >= 1)
			break;
	}
	if (threaded)
		pthread_join(th, NULL);
	if (rc < 0)
		return -1;
	double bad = t->rank == 0 && a.rc < 0;
	if (gk_nn_tr_sum(t, &bad, 1, err) < 0)
		return -1;
	if (t->rank == 0 && a.rc < 0)
		*mine = a.err;
	return bad > 0;
}
