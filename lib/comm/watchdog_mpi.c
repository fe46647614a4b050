/*
 * watchdog_mpi.c - the mpi backend's stall watchdog: the wait every
 * message and collective ends in (gk_comm_mpi_wait), which fails a call
 * that makes no progress for the timeout; the probe that then finds the
 * ranks that still answer and names the others (silent_ranks); and the
 * rule that one rank, the lowest survivor, says a stall for the job
 * while the others wait for its abort, and say so when it does not come
 * (gk_comm_mpi_await_reporter).
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_mpi.h"

/*
 * The world rank that says a stall for the job (silent_ranks), -1 while
 * no wait of this process has stalled. Of the survivors of a stall the
 * lowest is the reporter: the others fail quietly (gk_comm_stall_reporter)
 * and leave the job's end to its abort (gk_comm_mpi_abort).
 */
static _Atomic int stall_reporter = -1;

/* The lock of every MPI call (comm_mpi.h), and how many threads wait for it. */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int mpi_waiting;

void gk_comm_mpi_lock(void)
{
	if (pthread_mutex_trylock(&mpi_mu) == 0)
		return;
	atomic_fetch_add(&mpi_waiting, 1);
	pthread_mutex_lock(&mpi_mu);
	atomic_fetch_sub(&mpi_waiting, 1);
}

void gk_comm_mpi_unlock(void)
{
	pthread_mutex_unlock(&mpi_mu);
}

/* How long the survivors of a stall listen for each other. */
#define PROBE_SECONDS 1.0

/*
 * After this rank's first wait timed out: which ranks still answer. The
 * stalled collective's own messages cannot tell (in a ring every rank
 * waits on its left neighbour, alive or not, and MPI's collectives name
 * no peer), so each rank that times out sends every other rank a small
 * message on the probe communicator and listens for theirs for
 * PROBE_SECONDS. The survivors time out within moments of each other,
 * waiting on the same collective; a stopped rank, or one behind a dead
 * link, never sends.
 *
 * A rank that is only late (descheduled on a loaded host for a little
 * longer than the timeout) is no failure: the stalled call's own
 * requests (n of them in rq) are tested throughout the probe, and when
 * they complete the probe ends and we return 1 with nothing named.
 * Our probe message then reaches the late rank's queue, where a probe of
 * its own, in a later stall, would take it for an answer: so a rank
 * ends every probe with a word to every rank its message went to,
 * PROBE_DONE when its call completed (the message is stale), PROBE_GONE
 * when it gave up (it fails the call and exits). A receiver takes each
 * peer's messages in order (MPI does not reorder one sender's messages
 * on one tag): a peer answered when its last word is PROBE_ALIVE, or
 * PROBE_GONE after an answer (it gave up while we listened, and we give
 * up with it: the job fails, whatever our call does next). A
 * PROBE_GONE already in our queue when we start to listen means the
 * peer gave up on this call before we timed out in it: we were the late
 * one (stopped, and continued by the launcher's SIGCONT before its
 * SIGTERM, or descheduled), and say that instead of calling the ranks
 * that waited for us silent, or the stall nameless.
 *
 * Fills st->why with the end of the message: "rank 1 (on a) does not
 * answer (...)", "ranks 1 (on a) and 2 (on b) gave up on it first (...)",
 * or "" when every rank answered and the call still did not complete.
 * Returns 1 when the stalled call completed, 0 when it did not, -1 (with
 * *rc) when testing it failed.
 */
enum { PROBE_ALIVE = 1, PROBE_DONE = 2, PROBE_GONE = 3 };
enum { HEARD_NOTHING, HEARD_ANSWER, HEARD_STALE, HEARD_GONE_BEFORE };

/* "rank 1 (on a)", "ranks 1 (on a) and 3 (on b)": the ranks p with is[p] == v */
static void rank_list(const mpi_state *st, const char *is, char v, char *buf, size_t cap)
{
	size_t w = 0;
	int k = 0, count = 0;
	buf[0] = '\0';
	for (int p = 0; p < st->world; p++)
		count += p != st->rank && is[p] == v;
	for (int p = 0; p < st->world && w < cap; p++) {
		if (p == st->rank || is[p] != v)
			continue;
		k++;
		/* the world's number: a split's own numbers name no process */
		w += (size_t)snprintf(buf + w, cap - w, "%s%s %d (on %s)",
				      k == 1 ? "" : k == count ? " and" : ",",
				      k == 1 ? (count > 1 ? "ranks" : "rank") : "",
				      gk_comm_wrank(st->c, p), st->hosts + (size_t)p * HOST_LEN);
	}
}

static int silent_ranks(mpi_state *st, int ncall, MPI_Request *call, int *rc)
{
	int n = st->world, me = st->rank, ret = 0;
	MPI_Request *rq = malloc(2 * (size_t)n * sizeof *rq);
	char *heard = calloc((size_t)n, 1); /* HEARD_*, a rank */
	st->why[0] = '\0';
	for (int p = 0; rq && p < 2 * n; p++)
		rq[p] = MPI_REQUEST_NULL;
	if (!rq || !heard || !st->heard || !st->hosts)
		goto out;
	st->token = PROBE_ALIVE;
	st->done = PROBE_DONE;
	st->gone = PROBE_GONE;
	for (int p = 0; p < n; p++)
		if (p != me &&
		    (MPI_LOCKED(MPI_Irecv(&st->heard[p], 1, MPI_INT, p, TAG_ALIVE, st->probe,
					  &rq[p])) ||
		     MPI_LOCKED(MPI_Isend(&st->token, 1, MPI_INT, p, TAG_ALIVE, st->probe,
					  &rq[n + p]))))
			goto out;
	/*
	 * The whole window, even once every peer has answered: a stale
	 * PROBE_ALIVE may come before its PROBE_DONE is matched, and a call
	 * whose every rank is alive may still complete. The pass that finds
	 * the window over tests the call and takes the answers once more: a
	 * rank descheduled across the window's end (a loaded host) would
	 * otherwise name ranks whose answers, or whose arrival in the call,
	 * wait for it in its queue.
	 */
	double t0 = gk_now();
	for (int first = 1;; first = 0) {
		int last = gk_now() - t0 >= PROBE_SECONDS, done = 0, gone = 0;
		for (int p = 0; p < n; p++) {
			if (p == me)
				continue;
			for (;;) { /* every message of p's already here, in order */
				done = 0;
				if (MPI_LOCKED(MPI_Test(&rq[p], &done, MPI_STATUS_IGNORE)) !=
				    MPI_SUCCESS)
					goto out;
				if (!done)
					break;
				int w = st->heard[p];
				gone |= w == PROBE_GONE;
				heard[p] = w == PROBE_ALIVE ? HEARD_ANSWER :
					   w == PROBE_DONE ? HEARD_STALE :
					   heard[p] == HEARD_ANSWER && !first ? HEARD_ANSWER :
					   HEARD_GONE_BEFORE;
				if (MPI_LOCKED(MPI_Irecv(&st->heard[p], 1, MPI_INT, p, TAG_ALIVE,
							 st->probe, &rq[p])))
					goto out;
			}
		}
		/*
		 * A rank that gave up fails the job: its abort continues a
		 * stopped rank (the launcher's SIGCONT) whose arrival would
		 * complete our call after the job failed, leaving us the one
		 * rank that went on. So we give up too, before testing the call
		 * (its word came before anything the abort set off).
		 */
		if (gone)
			break;
		*rc = MPI_LOCKED(MPI_Testall(ncall, call, &done, MPI_STATUSES_IGNORE));
		if (*rc != MPI_SUCCESS) {
			ret = -1;
			goto out;
		}
		if (done) {
			ret = 1;
			break;
		}
		if (last)
			break;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	/* our probe message is stale, or we give up: say so to every rank it went to */
	for (int p = 0; p < n; p++) {
		MPI_Request q;
		if (p != me && MPI_LOCKED(MPI_Isend(ret == 1 ? &st->done : &st->gone, 1, MPI_INT, p,
						    TAG_ALIVE, st->probe, &q)) == MPI_SUCCESS)
			MPI_LOCKED(MPI_Request_free(&q));
	}
	if (ret == 1)
		goto out;
	/*
	 * The reporter: the lowest of this rank and those that answered; or,
	 * when some gave up before we timed out, the lowest of those (they
	 * said it). Every survivor that answered a lower one stays quiet,
	 * and the lowest answered no lower one, so one of them speaks.
	 */
	int rep = gk_comm_wrank(st->c, me), before = 0;
	for (int p = 0; p < n; p++)
		before |= p != me && heard[p] == HEARD_GONE_BEFORE;
	if (before)
		rep = INT_MAX;
	for (int p = 0; p < n; p++)
		if (p != me && heard[p] == (before ? HEARD_GONE_BEFORE : HEARD_ANSWER) &&
		    gk_comm_wrank(st->c, p) < rep)
			rep = gk_comm_wrank(st->c, p);
	int none = -1;
	atomic_compare_exchange_strong(&stall_reporter, &none, rep);
	/* the ranks not heard from, as the message names them */
	char list[512];
	for (int p = 0; p < n; p++)
		if (p != me && (heard[p] == HEARD_NOTHING || heard[p] == HEARD_STALE)) {
			heard[p] = HEARD_NOTHING;
			gk_comm_trace_silent(st->c, p, st->hosts + (size_t)p * HOST_LEN);
		}
	rank_list(st, heard, HEARD_NOTHING, list, sizeof list);
	if (list[0]) {
		int many = list[4] == 's';
		snprintf(st->why, sizeof st->why, ": %s %s not answer (stopped, or %s network is down)",
			 list, many ? "do" : "does", many ? "their" : "its");
		goto out;
	}
	rank_list(st, heard, HEARD_GONE_BEFORE, list, sizeof list);
	if (list[0])
		snprintf(st->why, sizeof st->why, ": %s gave up on it first (this rank was stopped, "
			 "or late by more than the timeout)", list);
out:
	/*
	 * The pending receives are cancelled; the sends may go out when
	 * their peer wakes, from buffers that stay in st until close.
	 */
	for (int p = 0; rq && p < 2 * n; p++) {
		if (rq[p] == MPI_REQUEST_NULL)
			continue;
		if (p < n)
			MPI_LOCKED(MPI_Cancel(&rq[p]));
		MPI_LOCKED(MPI_Request_free(&rq[p]));
	}
	free(rq);
	free(heard);
	return ret;
}

/*
 * The watchdog. Every message and collective is started non-blocking and
 * finished here, so a peer that stopped (SIGSTOP, a hung device, a dead
 * link that TCP has not noticed yet) fails the call after st->timeout
 * seconds instead of blocking it forever, as NCCL's and PyTorch's
 * watchdogs do. MPI_Testall drives Open MPI's progress engine like
 * MPI_Wait would. Small collectives finish in microseconds, so for the
 * first millisecond we test back to back (as MPI_Wait spins; yielding
 * there cost 5 us per small allreduce on a busy host, so we yield only
 * to another thread waiting for MPI's lock), then sleep 100 us between
 * tests so that a stuck wait does not take a core from the ranks that
 * share the machine. Without a timeout (st->timeout 0) the wait tests
 * all the same: blocking in MPI_Waitall would hold MPI's lock while
 * another thread's call, which a peer may be waiting for, waits for it.
 * A timed-out wait goes on testing its requests while it probes the
 * other ranks (silent_ranks): a rank late by less than the timeout and
 * PROBE_SECONDS together (a host that descheduled it) fails nothing.
 */
int gk_comm_mpi_wait(mpi_state *st, int n, MPI_Request *rq, const char *what,
		     gk_err *err)
{
	if (n == 0)
		return 0;
	/*
	 * Once a wait has timed out, a peer is gone or the messages of the
	 * stalled call are half delivered: no later call on this world can
	 * complete. Waiting out the timeout again for each call still queued
	 * (a step's gradient buckets, the failure's own agreement) would end
	 * the job only after many timeouts; every later wait fails at once,
	 * so the job ends about one timeout after the stall.
	 */
	if (st->stalled)
		return gk_errf(err, "%s%s: not run: an earlier collective made no progress for %.0f s%s",
			       st->op ? st->op : "mpi", st->group, st->timeout,
			       st->why[0] ? st->why : " (a rank stopped or the network is down)");
	double t0 = gk_now();
	for (;;) {
		int done = 0;
		int rc = MPI_LOCKED(MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE));
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, rc, what);
		if (done)
			return 0;
		double dt = gk_now() - t0;
		if (st->timeout > 0 && dt > st->timeout) {
			/* late by less than the probe: done, nothing named */
			int r = silent_ranks(st, n, rq, &rc);
			if (r < 0)
				return mpi_fail(err, rc, what);
			if (r > 0)
				return 0;
			st->stalled = 1;
			return gk_errf(err, "%s%s: no progress for %.0f s%s", st->op ? st->op : "mpi",
				       st->group, st->timeout,
				       st->why[0] ? st->why : " (a rank stopped or the network is down)");
		}
		if (dt >= 1e-3) {
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
		} else if (atomic_load(&mpi_waiting)) {
			sched_yield(); /* another thread's call first */
		}
	}
}

/*
 * After a stall that another rank reports: its abort ends the job once it
 * has said why. Ours first could have the launcher kill it before it
 * does, so we wait for the launcher to end us, and abort ourselves only
 * after a bound far above the moments that takes on a loaded host.
 * When the bound passes, the reporter died or hangs before its abort
 * (a launcher that does not end the job when one rank dies, as srun
 * without --kill-on-bad-exit, leaves us waiting): we say so, through the
 * caller (gk_comm_await_reporter), rather than end the job with the
 * launcher's words alone. The wait runs once: gk_comm_mpi_abort after
 * it aborts at once. GK_TEST_REPORTER_WAIT_S (tests only) shortens it,
 * for a test whose reporter is known to be dead.
 */
#define REPORTER_WAIT_SECONDS 10.0
static _Atomic int reporter_waited;

static double reporter_wait(void)
{
	const char *s = getenv("GK_TEST_REPORTER_WAIT_S");
	char *end;
	double v = s ? strtod(s, &end) : 0;
	return s && end != s && !*end && v > 0 && v <= 3600 ? v : REPORTER_WAIT_SECONDS;
}

/*
 * dump: first write the flight recorder's dump that gk_comm_abort would
 * (the launcher may end us while we wait)
 */
static int await_reporter(gk_comm *c, int dump, gk_err *err)
{
	mpi_state *st = c->mpi;
	int rep = atomic_load(&stall_reporter);
	if (rep < 0 || rep == c->world_rank || atomic_exchange(&reporter_waited, 1))
		return 0;
	if (dump && c->tr.dir)
		gk_comm_trace_dump(c, "abort");
	double t0 = gk_now(), bound = reporter_wait();
	struct timespec ts = {0, 50 * 1000 * 1000};
	while (gk_now() - t0 < bound)
		nanosleep(&ts, NULL);
	/* its host, where this communicator has it (the world's number may
	 * be no rank of a split's) */
	const char *host = NULL;
	for (int p = 0; st && st->hosts && p < st->world; p++)
		if (gk_comm_wrank(c, p) == rep)
			host = st->hosts + (size_t)p * HOST_LEN;
	char on[HOST_LEN + 8] = "";
	if (host)
		snprintf(on, sizeof on, " (on %s)", host);
	return gk_errf(err, "rank %d%s, which was to report the stall and end the job, did not "
		       "within %g s (it died or hangs): rank %d aborts it", rep, on, bound,
		       c->world_rank);
}

int gk_comm_mpi_await_reporter(gk_comm *c, gk_err *err)
{
	return await_reporter(c, 1, err);
}

void gk_comm_mpi_abort(gk_comm *c, int code)
{
	mpi_state *st = c->mpi;
	gk_err err;
	await_reporter(c, 0, &err); /* gk_comm_abort has dumped */
	MPI_LOCKED(MPI_Abort(st->comm, code));
}

int gk_comm_stall_reporter(void)
{
	return atomic_load(&stall_reporter);
}

/*
 * GK_TEST_COMM_FAULT's late (trace.c): wait until every other rank of c
 * has sent this rank its probe message, which a rank sends once its wait
 * timed out, at most bound seconds. The messages stay queued for the
 * probes to come. Returns 1 when they came, 0 when the bound passed.
 */
int gk_comm_mpi_probed(gk_comm *c, double bound)
{
	mpi_state *st = c->mpi;
	double t0 = gk_now();
	for (int p = 0; st && p < st->world;) {
		int here = p == st->rank;
		if (!here && MPI_LOCKED(MPI_Iprobe(p, TAG_ALIVE, st->probe, &here, MPI_STATUS_IGNORE)))
			return 0;
		if (here) {
			p++;
			continue;
		}
		if (gk_now() - t0 > bound)
			return 0;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return 1;
}

/* ---- for p2p_mpi.c ---- */

int gk_comm_mpi_waitall(gk_comm *c, int n, void *rq, const char *what, gk_err *err)
{
	mpi_state *st = c->mpi;
	st->op = what;
	return gk_comm_mpi_wait(st, n, rq, what, err);
}
