/*
 * trace.c - the flight recorder: a ring of each communicator's last
 * operations, and its dump as JSON Lines, which a signal handler may
 * call (comm.h, "The flight recorder"). trace_report.c reads the dumps.
 *
 * What PyTorch's NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE, its
 * fr_trace analyzer) taught, and what is done differently here:
 *   - its users ask for self-describing dumps (pytorch/pytorch#117883):
 *     each file starts with a header naming the rank, world, host, pid,
 *     the reason and the clocks, and the oldest sequence number still in
 *     the ring, so the analyzer knows where a rank's window starts and
 *     does not read dropped records as missing ones;
 *   - a rank that cannot dump must still be named (pytorch#196968, and
 *     fr_trace's --allow-incomplete-ranks): the header lists the world,
 *     and the ranks the watchdog's probe did not hear from, with their
 *     hosts, so the analyzer names a stopped or killed rank from the
 *     others' dumps;
 *   - file names that a prefix cannot match (pytorch#140879): ours are
 *     fixed, trace-cC-rRRRRR.jsonl, whatever the host;
 *   - the dump runs in whatever thread notices (the watchdog's, a signal
 *     handler), not in a monitor thread that a stuck process may never
 *     schedule: it is async-signal-safe.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/internal.h"

/* The open communicators, for gk_comm_trace_dump_all (a signal handler). */
#define MAX_OPEN 16
static gk_comm *_Atomic open_comms[MAX_OPEN];
static atomic_int dumping_all; /* dump_all calls under way */
static atomic_int next_id;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * GK_TEST_COMM_FAULT=ACTION:RANK:OP:N[,ACTION:RANK:OP:N] (tests only):
 * see gk_comm_trace_enter.
 */
static int parse_fault(gk_comm_trace *t, const char *all, gk_err *err)
{
	const char *s = all;
	for (int i = 0; i < 2 && s; i++) {
		char act[16], op[32];
		int rank = -1, n = 0;
		double delay = 0;
		/* delay=SECONDS:RANK:OP:N, or ACTION:RANK:OP:N */
		if (sscanf(s, "delay=%lf:%d:%31[a-z-]:%d", &delay, &rank, op, &n) == 4)
			snprintf(act, sizeof act, "%s", delay > 0 && delay < 3600 ? "delay" : "");
		else if (sscanf(s, "%15[a-z]:%d:%31[a-z-]:%d", act, &rank, op, &n) != 4)
			n = 0;
		if (n < 1 || rank < 0)
			return gk_errf(err, "GK_TEST_COMM_FAULT '%s': not ACTION:RANK:OP:N[,...]", all);
		t->fault[i].act = !strcmp(act, "skip") ? GK_TR_FAULT_SKIP : !strcmp(act, "stop") ?
			GK_TR_FAULT_STOP : !strcmp(act, "kill") ? GK_TR_FAULT_KILL :
			!strcmp(act, "delay") ? GK_TR_FAULT_DELAY :
			!strcmp(act, "late") ? GK_TR_FAULT_LATE : 0;
		t->fault[i].delay = delay;
		t->fault[i].coll = !strcmp(op, "barrier") ? GK_COMM_CALL_BARRIER :
				   !strcmp(op, "send") ? GK_COMM_CALL_SEND :
				   !strcmp(op, "recv") ? GK_COMM_CALL_RECV : gk_comm_coll_parse(op);
		if (!t->fault[i].act || t->fault[i].coll < 0)
			return gk_errf(err, "GK_TEST_COMM_FAULT '%s': ACTION is skip, stop, kill, late "
				       "or delay=SECONDS, OP a collective, barrier, send or recv", all);
		t->fault[i].rank = rank;
		t->fault[i].n = n;
		s = strchr(s, ',');
		if (s)
			s++;
	}
	if (s)
		return gk_errf(err, "GK_TEST_COMM_FAULT '%s': at most two faults", all);
	return 0;
}

int gk_comm_trace_open(gk_comm *c, gk_err *err)
{
	gk_comm_trace *t = &c->tr;
	t->cap = c->cfg.trace_size ? c->cfg.trace_size : GK_COMM_TRACE_DEFAULT;
	t->next = 1;
	t->index = -1;
	t->step = -1;
	t->silent[0] = -1;
	atomic_flag_clear(&t->busy);
	gethostname(t->host, sizeof t->host - 1);
	const char *f = getenv("GK_TEST_COMM_FAULT");
	if (f && parse_fault(t, f, err) < 0)
		return -1;
	t->ring = calloc(t->cap, sizeof *t->ring);
	if (!t->ring)
		return gk_errf(err, "comm: out of memory for a flight recorder of %zu operations",
			       t->cap);
	t->id = atomic_fetch_add(&next_id, 1);
	if (c->cfg.trace_dir) {
		size_t n = strlen(c->cfg.trace_dir) + 64;
		t->dir = malloc(2 * n);
		if (!t->dir) {
			free(t->ring);
			t->ring = NULL;
			return gk_errf(err, "comm: out of memory");
		}
		/* the final and the temporary name, made now: the dump formats
		 * nothing it can avoid; the world rank, which is one process's
		 * in every group of a split (a split's rank 0 is in each) */
		snprintf(t->dir, n, "%s/trace-c%d-r%05d.jsonl", c->cfg.trace_dir, t->id,
			 c->world_rank);
		snprintf(t->dir + n, n, "%s/.trace-c%d-r%05d.jsonl.tmp", c->cfg.trace_dir, t->id,
			 c->world_rank);
		t->tmp = t->dir + n;
	}
	for (int i = 0; i < MAX_OPEN; i++) {
		gk_comm *none = NULL;
		if (atomic_compare_exchange_strong(&open_comms[i], &none, c))
			break;
	}
	return 0;
}

void gk_comm_trace_close(gk_comm *c)
{
	for (int i = 0; i < MAX_OPEN; i++) {
		gk_comm *me = c;
		atomic_compare_exchange_strong(&open_comms[i], &me, NULL);
	}
	/* another thread's dump_all may hold c: wait for it (a handler on this
	 * thread has returned before we get here) */
	while (atomic_load(&dumping_all) > 0)
		sched_yield();
	while (atomic_flag_test_and_set(&c->tr.busy))
		sched_yield();
	free(c->tr.ring);
	free(c->tr.dir);
	c->tr.ring = NULL;
	c->tr.dir = NULL;
}

void gk_comm_trace_tag(gk_comm *c, const char *tag, int64_t index)
{
	c->tr.tag = tag;
	c->tr.index = index;
}

void gk_comm_trace_step(gk_comm *c, int64_t step) { c->tr.step = step; }

/*
 * The test hook (GK_TEST_COMM_FAULT=ACTION:RANK:OP:N, or two of them
 * joined by a comma): on world rank RANK
 * (whatever its numbers in the communicators split from the world), the
 * N-th call of OP on a communicator (each counts its own from its open)
 * is skipped as if the caller had not made it (nothing recorded, nothing
 * run: its later calls pair with the others' earlier ones), or the rank
 * stops (SIGSTOP), dies (SIGKILL) or sleeps SECONDS (delay=SECONDS: a
 * late rank, as a loaded host makes one) once the call has started; or,
 * late, the call waits until the watchdog of every other rank has timed
 * out and probes it (the mpi backend's probe messages are in its queue,
 * at most 60 s, said on stderr when they did not come), then runs: a
 * rank late by the timeout and not by the probe's window, whatever the
 * load on the host (a sleep of a fixed length can be too short, or too
 * long, by the time the others take to time out).
 */
int gk_comm_trace_enter(gk_comm *c, gk_comm_call *k)
{
	gk_comm_trace *t = &c->tr;
	k->seq = 0;
	k->fault = 0;
	for (int i = 0; i < 2; i++) {
		if (!t->fault[i].act || (int)k->coll != t->fault[i].coll ||
		    c->world_rank != t->fault[i].rank || ++t->fault[i].seen != t->fault[i].n)
			continue;
		if (t->fault[i].act == GK_TR_FAULT_SKIP) {
			t->tag = NULL;
			return GK_TR_FAULT_SKIP;
		}
		k->fault = t->fault[i].act;
		t->fault_delay = t->fault[i].delay;
	}
	if (!t->ring)
		return 0;
	uint64_t s = t->next++;
	gk_comm_trace_rec *r = &t->ring[s % t->cap];
	atomic_store_explicit(&r->seq, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	r->coll = (uint8_t)k->coll;
	r->dt = (uint8_t)k->dt;
	r->op = (uint8_t)k->op;
	r->root = k->coll == GK_COMM_BROADCAST || k->coll == GK_COMM_REDUCE ? k->root : -1;
	/* a message's peer is known when it is called; a collective's
	 * when the backend waits for one (gk_comm_trace_peer) */
	r->peer = k->coll == GK_COMM_CALL_SEND || k->coll == GK_COMM_CALL_RECV ? k->root : -1;
	r->bytes = (uint64_t)k->count * gk_comm_dt_size(k->dt);
	r->tag = t->tag;
	r->index = t->tag ? t->index : -1;
	r->step = t->step;
	r->t_enq = now_ns();
	r->t_start = r->t_end = 0;
	atomic_store_explicit(&r->state, GK_TR_QUEUED, memory_order_relaxed);
	atomic_store_explicit(&r->seq, s, memory_order_release);
	t->tag = NULL;
	k->seq = s;
	return 0;
}

static gk_comm_trace_rec *slot(gk_comm *c, uint64_t seq)
{
	if (!seq || !c->tr.ring)
		return NULL;
	gk_comm_trace_rec *r = &c->tr.ring[seq % c->tr.cap];
	return atomic_load_explicit(&r->seq, memory_order_acquire) == seq ? r : NULL;
}

void gk_comm_trace_start(gk_comm *c, const gk_comm_call *k)
{
	gk_comm_trace_rec *r = slot(c, k->seq);
	if (r) {
		/* run as it is called: one clock read for both */
		r->t_start = k->queued ? now_ns() : r->t_enq;
		atomic_store_explicit(&r->state, GK_TR_STARTED, memory_order_release);
		atomic_store_explicit(&c->tr.running, k->seq, memory_order_relaxed);
	}
	if (k->fault == GK_TR_FAULT_STOP)
		raise(SIGSTOP);
	else if (k->fault == GK_TR_FAULT_KILL)
		raise(SIGKILL);
	else if (k->fault == GK_TR_FAULT_DELAY) {
		double s = c->tr.fault_delay;
		struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	} else if (k->fault == GK_TR_FAULT_LATE && !gk_comm_mpi_probed(c, 60)) {
		fprintf(stderr, "GK_TEST_COMM_FAULT: late: rank %d saw no probe from every other rank "
			"within 60 s (no --timeout, or not the mpi backend?)\n", c->world_rank);
	}
}

void gk_comm_trace_peer(gk_comm *c, int peer)
{
	gk_comm_trace_rec *r = slot(c, atomic_load_explicit(&c->tr.running, memory_order_relaxed));
	if (r)
		r->peer = peer;
}

void gk_comm_trace_end(gk_comm *c, uint64_t seq, int st, const gk_err *err)
{
	gk_comm_trace_rec *r = slot(c, seq);
	if (r && atomic_load_explicit(&r->state, memory_order_relaxed) < GK_TR_DONE) {
		r->t_end = now_ns();
		atomic_store_explicit(&r->state, st < 0 ? GK_TR_FAILED : GK_TR_DONE,
				      memory_order_release);
	}
	if (st < 0 && c->tr.dir && !atomic_exchange(&c->tr.failed_dumped, 1)) {
		if (err) {
			size_t n = strnlen(err->msg, sizeof c->tr.error - 1);
			memcpy(c->tr.error, err->msg, n);
			c->tr.error[n] = '\0';
		}
		gk_comm_trace_dump(c, "failure");
	}
}

void gk_comm_trace_end_all(gk_comm *c)
{
	gk_comm_trace *t = &c->tr;
	int64_t now = now_ns();
	for (uint64_t s = t->next - 1; s >= 1 && s + t->cap >= t->next; s--) {
		gk_comm_trace_rec *r = slot(c, s);
		if (!r)
			break;
		uint8_t st = atomic_load_explicit(&r->state, memory_order_relaxed);
		if (st >= GK_TR_DONE)
			break; /* a stream runs them in order: the earlier ones ended too */
		if (st == GK_TR_STARTED) {
			r->t_end = now;
			atomic_store_explicit(&r->state, GK_TR_DONE, memory_order_release);
		}
	}
}

void gk_comm_trace_silent(gk_comm *c, int rank, const char *host)
{
	gk_comm_trace *t = &c->tr;
	int i = 0;
	while (i < 15 && t->silent[i] >= 0)
		i++;
	if (i == 15)
		return;
	snprintf(t->silent_host[i], sizeof t->silent_host[i], "%s", host ? host : "");
	t->silent[i + 1] = -1;
	t->silent[i] = rank;
}

/* ---- the dump: async-signal-safe (no stdio, no malloc, no lock) ---- */

typedef struct wbuf {
	int fd, bad;
	size_t n;
	char b[4096];
} wbuf;

static void w_flush(wbuf *w)
{
	size_t o = 0;
	while (o < w->n && !w->bad) {
		ssize_t k = write(w->fd, w->b + o, w->n - o);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			w->bad = 1;
		else
			o += (size_t)k;
	}
	w->n = 0;
}

static void w_ch(wbuf *w, char ch)
{
	if (w->n == sizeof w->b)
		w_flush(w);
	w->b[w->n++] = ch;
}

static void w_s(wbuf *w, const char *s)
{
	while (*s)
		w_ch(w, *s++);
}

static void w_i(wbuf *w, int64_t v)
{
	char d[24];
	int n = 0;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	do
		d[n++] = (char)('0' + u % 10);
	while ((u /= 10) && n < 24);
	if (v < 0)
		w_ch(w, '-');
	while (n)
		w_ch(w, d[--n]);
}

/* A JSON string; bytes outside ASCII become '?' (a message may hold any). */
static void w_str(wbuf *w, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	if (!s) {
		w_s(w, "null");
		return;
	}
	w_ch(w, '"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			w_ch(w, '\\');
			w_ch(w, (char)ch);
		} else if (ch < 0x20) {
			w_s(w, "\\u00");
			w_ch(w, hex[ch >> 4]);
			w_ch(w, hex[ch & 15]);
		} else {
			w_ch(w, ch < 0x80 ? (char)ch : '?');
		}
	}
	w_ch(w, '"');
}

static void w_key(wbuf *w, const char *k)
{
	w_ch(w, ',');
	w_str(w, k);
	w_ch(w, ':');
}

static const char *const state_names[] = {"?", "queued", "started", "done", "failed"};

static void w_rec(wbuf *w, const gk_comm_trace_rec *r, uint64_t seq)
{
	w_s(w, "{\"seq\":");
	w_i(w, (int64_t)seq);
	w_key(w, "op");
	w_str(w, gk_comm_call_name(r->coll));
	w_key(w, "bytes");
	w_i(w, (int64_t)r->bytes);
	w_key(w, "dtype");
	w_str(w, r->coll != GK_COMM_CALL_BARRIER ? gk_dtype_name(r->dt) : NULL);
	int reduces = r->coll == GK_COMM_ALLREDUCE || r->coll == GK_COMM_REDUCE_SCATTER ||
		      r->coll == GK_COMM_REDUCE;
	w_key(w, "redop");
	w_str(w, reduces ? gk_comm_op_name(r->op) : NULL);
	w_key(w, "root");
	w_i(w, r->root);
	w_key(w, "tag");
	w_str(w, r->tag);
	w_key(w, "index");
	w_i(w, r->index);
	w_key(w, "step");
	w_i(w, r->step);
	uint8_t st = atomic_load_explicit(&r->state, memory_order_relaxed);
	w_key(w, "state");
	w_str(w, state_names[st <= GK_TR_FAILED ? st : 0]);
	w_key(w, "enqueued_ns");
	w_i(w, r->t_enq);
	w_key(w, "started_ns");
	w_i(w, r->t_start);
	w_key(w, "ended_ns");
	w_i(w, r->t_end);
	w_key(w, "peer");
	w_i(w, r->peer);
	w_s(w, "}\n");
}

int gk_comm_trace_dump(gk_comm *c, const char *reason)
{
	gk_comm_trace *t = &c->tr;
	int saved = errno;
	if (!t->dir || !t->ring) {
		errno = EINVAL;
		return -1;
	}
	if (atomic_flag_test_and_set(&t->busy)) {
		errno = EBUSY;
		return -1;
	}
	wbuf w = {.fd = open(t->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
	int rc = -1;
	if (w.fd < 0)
		goto out;
	struct timespec real;
	clock_gettime(CLOCK_REALTIME, &real);
	uint64_t next = t->next, first = next > t->cap ? next - t->cap : 1;
	w_s(&w, "{\"gk_trace\":1");
	w_key(&w, "comm");
	w_i(&w, t->id);
	w_key(&w, "backend");
	w_str(&w, gk_comm_backend_name(c->backend));
	w_key(&w, "rank");
	w_i(&w, c->rank);
	w_key(&w, "world");
	w_i(&w, c->world);
	/* a split's numbers are its own: this process's in the world, and
	 * its ranks' (the report names world ranks) */
	w_key(&w, "world_rank");
	w_i(&w, c->world_rank);
	if (c->wranks) {
		w_key(&w, "ranks");
		w_ch(&w, '[');
		for (int i = 0; i < c->world; i++) {
			if (i)
				w_ch(&w, ',');
			w_i(&w, c->wranks[i]);
		}
		w_ch(&w, ']');
	}
	w_key(&w, "host");
	w_str(&w, t->host);
	w_key(&w, "pid");
	w_i(&w, getpid());
	w_key(&w, "reason");
	w_str(&w, reason ? reason : "");
	w_key(&w, "error");
	w_str(&w, t->error[0] ? t->error : NULL);
	w_key(&w, "unix_ns");
	w_i(&w, (int64_t)real.tv_sec * 1000000000 + real.tv_nsec);
	w_key(&w, "mono_ns");
	w_i(&w, now_ns());
	w_key(&w, "capacity");
	w_i(&w, (int64_t)t->cap);
	w_key(&w, "first");
	w_i(&w, (int64_t)first);
	w_key(&w, "next");
	w_i(&w, (int64_t)next);
	w_key(&w, "step");
	w_i(&w, t->step);
	w_key(&w, "silent");
	w_ch(&w, '[');
	for (int i = 0; i < 15 && t->silent[i] >= 0; i++) {
		w_s(&w, i ? ",{\"rank\":" : "{\"rank\":");
		w_i(&w, t->silent[i]);
		w_key(&w, "host");
		w_str(&w, t->silent_host[i]);
		w_ch(&w, '}');
	}
	w_s(&w, "]}\n");
	for (uint64_t s = first; s < next; s++) {
		const gk_comm_trace_rec *r = &t->ring[s % t->cap];
		gk_comm_trace_rec copy;
		uint64_t s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
		memcpy(&copy, r, sizeof copy); /* memcpy is async-signal-safe (POSIX 2016) */
		atomic_thread_fence(memory_order_acquire);
		uint64_t s2 = atomic_load_explicit(&r->seq, memory_order_relaxed);
		if (s1 != s || s2 != s)
			continue; /* being written: left out rather than torn */
		w_rec(&w, &copy, s);
	}
	w_flush(&w);
	if (!w.bad && close(w.fd) == 0 && rename(t->tmp, t->dir) == 0)
		rc = 0;
	else if (w.bad)
		close(w.fd);
	if (rc < 0)
		unlink(t->tmp);
out:
	atomic_flag_clear(&t->busy);
	if (rc == 0)
		errno = saved;
	return rc;
}

void gk_comm_trace_dump_all(const char *reason)
{
	int saved = errno;
	atomic_fetch_add(&dumping_all, 1);
	for (int i = 0; i < MAX_OPEN; i++) {
		gk_comm *c = atomic_load(&open_comms[i]);
		if (c)
			gk_comm_trace_dump(c, reason);
	}
	atomic_fetch_sub(&dumping_all, 1);
	errno = saved;
}

int gk_comm_trace_dir_check(const char *dir, gk_err *err)
{
	struct stat sb;
	if (mkdir(dir, 0777) < 0 && errno != EEXIST)
		return gk_err_sys(err, errno, "create directory '%s'", dir);
	if (stat(dir, &sb) < 0)
		return gk_err_sys(err, errno, "'%s'", dir);
	if (!S_ISDIR(sb.st_mode))
		return gk_errf(err, "'%s': not a directory", dir);
	if (access(dir, W_OK | X_OK) < 0)
		return gk_err_sys(err, errno, "'%s': cannot write there", dir);
	return 0;
}
