/*
 * comm_trace.c - the flight recorder (lib/comm/trace.c) and its report
 * (trace_report.c).
 *
 * The ring: a world of one (the self backend) records more operations than
 * it holds; the dump must keep exactly the newest, numbered 1, 2, ... in
 * call order, with the tags and steps given, times in order, and a header
 * whose window says which were dropped. A dump from a signal handler
 * comes out the same. The cost of recording is measured and bounded.
 *
 * The report: hand-made dumps of four-rank and three-rank hangs, each with
 * the verdict written out by hand from the dumps' contents.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/internal.h"
#include "tap.h"

static char tmpdir[] = "/tmp/gk-comm-trace-XXXXXX";

static void put(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

/* A fresh directory under tmpdir. */
static const char *fresh(const char *name)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	return path;
}

/* ---- the ring ---- */

static json_t *lines[64];
static int nlines;

static int read_dump(const char *path)
{
	for (int i = 0; i < nlines; i++)
		json_decref(lines[i]);
	nlines = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char buf[4096];
	while (nlines < 64 && fgets(buf, sizeof buf, f)) {
		json_error_t je;
		lines[nlines] = json_loads(buf, 0, &je);
		if (!lines[nlines]) {
			printf("# %s: %s\n", path, je.text);
			fclose(f);
			return -1;
		}
		nlines++;
	}
	fclose(f);
	return 0;
}

static int64_t num(json_t *o, const char *k)
{
	return (int64_t)json_integer_value(json_object_get(o, k));
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "(null)";
}

static gk_comm *sig_comm;
static void on_usr2(int sig)
{
	(void)sig;
	gk_comm_trace_dump_all("SIGUSR2");
}

static void test_ring(void)
{
	const char *dir = fresh("ring");
	gk_comm_config cfg = {.backend = GK_COMM_BACKEND_SELF, .trace_size = 4, .trace_dir = dir};
	gk_comm *c;
	gk_err err = {0};
	if (!ok(gk_comm_open(&c, &cfg, &err) == 0, "open a world of one with a ring of 4")) {
		printf("# %s\n", err.msg);
		return;
	}
	float x[3] = {1, 2, 3};
	int bad = 0;
	/* 10 operations: seq 1..10; the ring keeps 7..10 */
	for (int i = 0; i < 10; i++) {
		gk_comm_trace_step(c, 100 + i / 3);
		if (i % 2 == 0)
			gk_comm_trace_tag(c, "bucket", i);
		if (i == 8)
			bad |= gk_comm_barrier(c, &err);
		else
			bad |= gk_comm_allreduce(c, x, x, 3, GK_DT_F32, GK_COMM_SUM, NULL, &err);
	}
	ok(!bad, "ten operations");
	is_int(gk_comm_trace_dump(c, "test"), 0, "dump");
	char path[600];
	snprintf(path, sizeof path, "%s/trace-c%d-r00000.jsonl", dir, c->tr.id);
	if (!ok(read_dump(path) == 0, "the dump reads as JSON lines")) {
		gk_comm_close(c);
		return;
	}
	is_int(nlines, 5, "a header and the 4 newest operations");
	json_t *h = lines[0];
	is_int(num(h, "gk_trace"), 1, "format 1");
	is_int(num(h, "capacity"), 4, "capacity");
	is_int(num(h, "first"), 7, "first: 7 (1..6 dropped)");
	is_int(num(h, "next"), 11, "next: 11");
	is_int(num(h, "world"), 1, "world");
	is_str(str(h, "reason"), "test", "reason");
	is_str(str(h, "backend"), "self", "backend");
	is_int(num(h, "pid"), getpid(), "pid");
	int64_t prev_end = 0;
	for (int k = 1; k < nlines; k++) {
		json_t *r = lines[k];
		int i = k + 5; /* the loop's i of seq k + 6 */
		is_int(num(r, "seq"), i + 1, "seq in call order");
		is_str(str(r, "op"), i == 8 ? "barrier" : "allreduce", "op");
		is_int(num(r, "bytes"), i == 8 ? 0 : 12, "bytes");
		is_str(str(r, "tag"), i % 2 == 0 ? "bucket" : "(null)", "a tag only where given");
		is_int(num(r, "index"), i % 2 == 0 ? i : -1, "its index");
		is_int(num(r, "step"), 100 + i / 3, "step");
		is_str(str(r, "state"), "done", "done");
		int64_t q = num(r, "enqueued_ns"), s = num(r, "started_ns"), e = num(r, "ended_ns");
		ok(prev_end <= q && q <= s && s <= e && q > 0,
		   "times in order: %lld <= %lld <= %lld <= %lld", (long long)prev_end,
		   (long long)q, (long long)s, (long long)e);
		prev_end = e;
	}

	/* a dump from a signal handler */
	sig_comm = c;
	struct sigaction sa = {.sa_handler = on_usr2};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
	bad = gk_comm_allreduce(c, x, x, 3, GK_DT_F32, GK_COMM_SUM, NULL, &err);
	raise(SIGUSR2);
	signal(SIGUSR2, SIG_DFL);
	ok(!bad && read_dump(path) == 0 && nlines == 5, "a dump from a signal handler");
	if (nlines == 5) {
		is_str(str(lines[0], "reason"), "SIGUSR2", "its reason");
		is_int(num(lines[0], "first"), 8, "its window moved on by one");
		is_int(num(lines[4], "seq"), 11, "the newest operation");
	}

	/* the cost: enter, start and end, as every operation pays them */
	gk_comm_call k = {.coll = GK_COMM_ALLREDUCE, .count = 1024, .dt = GK_DT_F32};
	int n = 1000000;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		gk_comm_trace_enter(c, &k);
		gk_comm_trace_start(c, &k);
		gk_comm_trace_end(c, k.seq, 0, NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / n;
	printf("# recording one operation costs %.0f ns (two clock reads and a dozen stores)\n", ns);
	ok(ns < 2000, "recording costs under 2 us an operation (%.0f ns)", ns);
	gk_comm_close(c);
	for (int i = 0; i < nlines; i++)
		json_decref(lines[i]);
	nlines = 0;
}

/* ---- the report, on hand-made dumps ---- */

/* A header: rank R of W on HOST, its window [first, next), dumped at mono (s). */
static void header(char *out, size_t n, int rank, int world, const char *host, int first,
		   int next, double mono, const char *silent, const char *error)
{
	snprintf(out, n,
		 "{\"gk_trace\":1,\"comm\":0,\"backend\":\"mpi\",\"rank\":%d,\"world\":%d,"
		 "\"host\":\"%s\",\"pid\":1,\"reason\":\"failure\",\"error\":%s,\"unix_ns\":1,"
		 "\"mono_ns\":%.0f,\"capacity\":8,\"first\":%d,\"next\":%d,\"step\":230,"
		 "\"silent\":[%s]}\n",
		 rank, world, host, error ? error : "null", mono * 1e9, first, next,
		 silent ? silent : "");
}

/* One operation: started at start (s, 0 none), ended at end (s, 0 not). */
static void op(char *out, size_t n, int seq, const char *name, long bytes, const char *tag,
	       int index, int step, const char *state, double start, double end)
{
	char t[64] = "null";
	if (tag)
		snprintf(t, sizeof t, "\"%s\"", tag);
	size_t len = strlen(out);
	snprintf(out + len, n - len,
		 "{\"seq\":%d,\"op\":\"%s\",\"bytes\":%ld,\"dtype\":\"F32\",\"redop\":\"avg\","
		 "\"root\":-1,\"tag\":%s,\"index\":%d,\"step\":%d,\"state\":\"%s\","
		 "\"enqueued_ns\":%.0f,\"started_ns\":%.0f,\"ended_ns\":%.0f,\"peer\":-1}\n",
		 seq, name, bytes, t, index, step, state, start * 1e9, start * 1e9, end * 1e9);
}

static void expect_report(const char *dir, const char *want, const char *name)
{
	char *text = NULL;
	gk_err err = {0};
	int rc = gk_comm_trace_report(dir, &text, &err);
	if (!ok(rc == 0, "%s: the report reads the dumps", name)) {
		printf("#   %s\n", err.msg);
		return;
	}
	is_str(text, want, name);
	free(text);
}

#define MIB4 4194304L

/*
 * Four ranks (hosts a a b b): rank 3 started bucket 7's allreduce (#1842)
 * 312 s before its dump and never returned; ranks 0-2 finished it and
 * wait in bucket 8's (#1843), started 2 s before theirs. Rank 0's ring
 * has dropped #1840, which the others still hold: not a disagreement.
 */
static void test_stuck(void)
{
	const char *dir = fresh("stuck");
	const char *hosts[] = {"a", "a", "b", "b"};
	for (int r = 0; r < 4; r++) {
		char buf[4096], name[64];
		double now = 1000;
		header(buf, sizeof buf, r, 4, hosts[r], r == 0 ? 1841 : 1840, r == 3 ? 1843 : 1844,
		       now, NULL, NULL);
		if (r != 0)
			op(buf, sizeof buf, 1840, "allreduce", MIB4, "bucket", 5, 230, "done", 600, 601);
		op(buf, sizeof buf, 1841, "allreduce", MIB4, "bucket", 6, 230, "done", 650, 651);
		if (r == 3) {
			op(buf, sizeof buf, 1842, "allreduce", MIB4, "bucket", 7, 230, "started",
			   now - 312, 0);
		} else {
			op(buf, sizeof buf, 1842, "allreduce", MIB4, "bucket", 7, 230, "done", 688, 689);
			op(buf, sizeof buf, 1843, "allreduce", MIB4, "bucket", 8, 230, "started",
			   now - 2, 0);
		}
		snprintf(name, sizeof name, "trace-c0-r%05d.jsonl", r);
		put(dir, name, buf);
	}
	expect_report(dir,
		      "rank 3 (on b) is in allreduce #1842 (bucket 7, step 230, 4.00 MiB) since 312 s; "
		      "ranks 0-2 wait in allreduce #1843 (bucket 8, step 230, 4.00 MiB) since 2.0 s\n",
		      "a rank that never returned from a collective");
}

/*
 * Three ranks: rank 1 skipped bucket 0's allreduce (#5): its #5 is the
 * others' #6 (bucket 1), and its #6 the others' #7. All three then time
 * out, in different places.
 */
static void test_skip(void)
{
	const char *dir = fresh("skip");
	for (int r = 0; r < 3; r++) {
		char buf[4096], name[64];
		header(buf, sizeof buf, r, 3, r == 1 ? "node-b" : "node-a", 1, r == 1 ? 7 : 8, 50, NULL,
		       r == 0 ? "\"allreduce: no progress for 2 s\"" : NULL);
		op(buf, sizeof buf, 1, "allreduce", 272, "agree", -1, -1, "done", 1, 1.1);
		op(buf, sizeof buf, 2, "broadcast", 4096, NULL, -1, -1, "done", 2, 2.1);
		op(buf, sizeof buf, 3, "allreduce", 4096, "bucket", 0, 1, "done", 3, 3.1);
		op(buf, sizeof buf, 4, "allreduce", 4096, "bucket", 1, 1, "done", 4, 4.1);
		int b = r == 1 ? 1 : 0; /* bucket 0 of step 2 is missing on rank 1 */
		op(buf, sizeof buf, 5, "allreduce", 4096, "bucket", b, 2, "done", 5, 5.1);
		op(buf, sizeof buf, 6, "allreduce", r == 1 ? 64 : 4096, r == 1 ? NULL : "bucket",
		   r == 1 ? -1 : 1, 2, r == 1 ? "failed" : "done", 6, r == 1 ? 8 : 6.1);
		if (r != 1)
			op(buf, sizeof buf, 7, "allreduce", 64, NULL, -1, 2, "failed", 7, 9);
		snprintf(name, sizeof name, "trace-c0-r%05d.jsonl", r);
		put(dir, name, buf);
	}
	expect_report(dir,
		      "rank 1 (on node-b) skipped allreduce #5 (bucket 0, step 2, 4.00 KiB): its #5 is "
		      "the others' #6; the ranks' operations differ from there on\n"
		      "ranks 0 and 2 failed in allreduce #7 (step 2, 64 B) after 2.0 s; "
		      "rank 1 (on node-b) failed in allreduce #6 (step 2, 64 B) after 2.0 s\n"
		      "rank 0's first failure: allreduce: no progress for 2 s\n",
		      "a rank that skipped a collective");
}

/*
 * Three ranks: rank 1 was killed or stopped and left no dump; ranks 0 and
 * 2 are in allgather #9, and rank 2's watchdog named rank 1 on host c.
 */
static void test_missing(void)
{
	const char *dir = fresh("missing");
	for (int r = 0; r < 3; r += 2) {
		char buf[4096], name[64];
		header(buf, sizeof buf, r, 3, "a", 3, 10, 40, r == 2 ? "{\"rank\":1,\"host\":\"c\"}" :
		       NULL, NULL);
		for (int s = 3; s < 9; s++)
			op(buf, sizeof buf, s, "allreduce", 8, NULL, -1, 1, "done", s, s + 0.5);
		op(buf, sizeof buf, 9, "allgather", 51712, NULL, -1, 4, "started", 40 - 1.5 - r, 0);
		snprintf(name, sizeof name, "trace-c0-r%05d.jsonl", r);
		put(dir, name, buf);
	}
	expect_report(dir,
		      "rank 1 (on c) left no dump and did not answer the others' watchdog (stopped, "
		      "killed, or the network to it is down); ranks 0 and 2 wait in allgather #9 "
		      "(step 4, 50.5 KiB) since 3.5 s\n",
		      "a rank without a dump, named by the others' watchdog");
	/* without the watchdog's word (the launcher's SIGTERM came first) */
	char buf[4096];
	header(buf, sizeof buf, 2, 3, "a", 3, 10, 40, NULL, NULL);
	for (int s = 3; s < 9; s++)
		op(buf, sizeof buf, s, "allreduce", 8, NULL, -1, 1, "done", s, s + 0.5);
	op(buf, sizeof buf, 9, "allgather", 51712, NULL, -1, 4, "started", 40 - 1.5, 0);
	put(dir, "trace-c0-r00002.jsonl", buf);
	expect_report(dir,
		      "rank 1 left no dump (killed, stopped, or it never reached one); ranks 0 and 2 "
		      "wait in allgather #9 (step 4, 50.5 KiB) since 1.5 s\n",
		      "a rank without a dump");
}

/* A message: op() with the peer. */
static void msg(char *out, size_t n, int seq, const char *name, int peer, const char *state,
		double start, double end)
{
	size_t len = strlen(out);
	snprintf(out + len, n - len,
		 "{\"seq\":%d,\"op\":\"%s\",\"bytes\":4096,\"dtype\":\"F32\",\"redop\":null,"
		 "\"root\":-1,\"tag\":null,\"index\":-1,\"step\":7,\"state\":\"%s\","
		 "\"enqueued_ns\":%.0f,\"started_ns\":%.0f,\"ended_ns\":%.0f,\"peer\":%d}\n",
		 seq, name, state, start * 1e9, start * 1e9, end * 1e9, peer);
}

/*
 * A pipeline of three stages: rank 2 stopped and left no dump (rank 1's
 * watchdog named it); rank 0 sent two activations and waits for a
 * gradient from rank 1, which waits for one from rank 2. The ranks'
 * numbers do not align (rank 0's #1 is a send, rank 1's a receive): not
 * a disagreement, and each rank's wait is said with its peer.
 */
static void test_p2p(void)
{
	const char *dir = fresh("p2p");
	char buf[4096];
	header(buf, sizeof buf, 0, 3, "a", 1, 4, 60, NULL, NULL);
	msg(buf, sizeof buf, 1, "send", 1, "done", 10, 10.1);
	msg(buf, sizeof buf, 2, "send", 1, "done", 11, 11.1);
	msg(buf, sizeof buf, 3, "recv", 1, "started", 60 - 4, 0);
	put(dir, "trace-c0-r00000.jsonl", buf);
	buf[0] = 0;
	header(buf, sizeof buf, 1, 3, "b", 1, 6, 60, "{\"rank\":2,\"host\":\"c\"}",
	       "\"point-to-point message: no progress for 2 s\"");
	msg(buf, sizeof buf, 1, "recv", 0, "done", 10, 10.2);
	msg(buf, sizeof buf, 2, "send", 2, "done", 10.3, 10.4);
	msg(buf, sizeof buf, 3, "recv", 0, "done", 11, 11.2);
	msg(buf, sizeof buf, 4, "send", 2, "done", 11.3, 11.4);
	msg(buf, sizeof buf, 5, "recv", 2, "failed", 60 - 3, 60);
	put(dir, "trace-c0-r00001.jsonl", buf);
	expect_report(dir,
		      "rank 2 (on c) left no dump and did not answer the others' watchdog (stopped, "
		      "killed, or the network to it is down); rank 0 (on a) waits in recv #3 from "
		      "rank 1 (step 7, 4.00 KiB) since 4.0 s; rank 1 (on b) failed in recv #5 from "
		      "rank 2 (step 7, 4.00 KiB) after 3.0 s\n"
		      "rank 1's first failure: point-to-point message: no progress for 2 s\n",
		      "a pipeline's messages: each rank's wait, with its peer");
}

/*
 * A split (comm 1): the tensor groups of a tp 2 x dp 2 grid, world ranks
 * 0 and 1, and 2 and 3, each group numbering its ranks 0 and 1. World
 * rank 3 (its group's rank 1) stopped and left no dump; world rank 2's
 * watchdog named it (silent: its group's rank 1) and failed in #40. The
 * report keeps the two groups apart (one communicator number, two
 * groups) and names every rank by its world rank.
 */
static void gheader(char *out, size_t n, int rank, const char *ranks, const char *silent,
		    const char *error, int next)
{
	snprintf(out, n,
		 "{\"gk_trace\":1,\"comm\":1,\"backend\":\"mpi\",\"rank\":%d,\"world\":2,"
		 "\"world_rank\":%d,\"ranks\":[%s],\"host\":\"b\",\"pid\":1,\"reason\":\"failure\","
		 "\"error\":%s,\"unix_ns\":1,\"mono_ns\":%.0f,\"capacity\":64,\"first\":1,"
		 "\"next\":%d,\"step\":4,\"silent\":[%s]}\n",
		 rank, (ranks[0] - '0') + rank, ranks, error ? error : "null", 50 * 1e9, next,
		 silent ? silent : "");
}

static void test_groups(void)
{
	const char *dir = fresh("groups");
	char buf[16384], name[64];
	for (int w = 0; w < 3; w++) {
		int g = w % 2;
		gheader(buf, sizeof buf, g, w < 2 ? "0,1" : "2,3",
			w == 2 ? "{\"rank\":1,\"host\":\"b\"}" : NULL,
			w == 2 ? "\"allreduce among ranks 2 and 3: no progress for 2 s: rank 3 (on b) "
				 "does not answer\"" : NULL, w < 2 ? 52 : 41);
		for (int s = 1; s < (w < 2 ? 52 : 40); s++)
			op(buf, sizeof buf, s, "allreduce", 16384, NULL, -1, 4, "done", s * 0.1,
			   s * 0.1 + 0.05);
		if (w == 2)
			op(buf, sizeof buf, 40, "allreduce", 16384, NULL, -1, 4, "failed", 47, 50);
		snprintf(name, sizeof name, "trace-c1-r%05d.jsonl", w);
		put(dir, name, buf);
	}
	expect_report(dir,
		      "communicator 1 (mpi, the group of ranks 0 and 1): no operation in flight: "
		      "every rank finished #51 and entered no other\n"
		      "communicator 1 (mpi, the group of ranks 2 and 3): rank 3 (on b) left no dump "
		      "and did not answer the others' watchdog (stopped, killed, or the network to "
		      "it is down); rank 2 (on b) failed in allreduce #40 (step 4, 16.0 KiB) after "
		      "3.0 s\n"
		      "rank 2's first failure: allreduce among ranks 2 and 3: no progress for 2 s: "
		      "rank 3 (on b) does not answer\n",
		      "a split's two groups apart, by world ranks");
	/* a dump that says another group for the same lead rank: two runs */
	gheader(buf, sizeof buf, 1, "2,4", NULL, NULL, 1);
	put(dir, "trace-c1-r00004.jsonl", buf);
	char *text = NULL;
	gk_err err = {0};
	ok(gk_comm_trace_report(dir, &text, &err) < 0 && !text &&
	   strstr(err.msg, "is not the other dumps'"), "a group that differs: an error (%s)",
	   err.msg);
}

/* Two ranks: rank 1 finished #4 and never entered #5 (a hung kernel, a slow disk). */
static void test_never_entered(void)
{
	const char *dir = fresh("never");
	char buf[4096];
	header(buf, sizeof buf, 0, 2, "x", 1, 6, 100, NULL, NULL);
	for (int s = 1; s < 5; s++)
		op(buf, sizeof buf, s, "allreduce", 1024, NULL, -1, 7, "done", s, s + 0.1);
	op(buf, sizeof buf, 5, "reducescatter", 2048, NULL, -1, 8, "started", 90, 0);
	put(dir, "trace-c0-r00000.jsonl", buf);
	header(buf, sizeof buf, 1, 2, "y", 1, 5, 100, NULL, NULL);
	for (int s = 1; s < 5; s++)
		op(buf, sizeof buf, s, "allreduce", 1024, NULL, -1, 7, "done", s, s + 0.1);
	put(dir, "trace-c0-r00001.jsonl", buf);
	expect_report(dir,
		      "rank 1 (on y) never entered reducescatter #5 (step 8, 2.00 KiB): its last "
		      "operation, allreduce #4 (step 7, 1.00 KiB), ended 96 s before its dump; "
		      "rank 0 (on x) waits in reducescatter #5 (step 8, 2.00 KiB) since 10 s\n",
		      "a rank that never entered the collective the others wait in");
}

static void test_bad_input(void)
{
	char *text = NULL;
	gk_err err = {0};
	const char *dir = fresh("empty");
	ok(gk_comm_trace_report(dir, &text, &err) < 0 && !text, "no dumps: an error");
	char want[600];
	snprintf(want, sizeof want,
		 "'%s': no flight-recorder dumps (trace-cN-rNNNNN.jsonl) in it", dir);
	is_str(err.msg, want, "naming the directory");
	char buf[4096];
	header(buf, sizeof buf, 0, 2, "x", 1, 3, 100, NULL, NULL);
	strcat(buf, "{\"seq\":1,\"op\":\"allreduce\"\n");
	put(dir, "trace-c0-r00000.jsonl", buf);
	ok(gk_comm_trace_report(dir, &text, &err) < 0, "a torn line: an error");
	snprintf(want, sizeof want,
		 "'%s/trace-c0-r00000.jsonl' line 2: not a JSON object (not a gpukit "
		 "flight-recorder dump?)", dir);
	is_str(err.msg, want, "naming the file and line");
	header(buf, sizeof buf, 0, 2, "x", 1, 3, 100, NULL, NULL);
	put(dir, "trace-c0-r00000.jsonl", buf);
	header(buf, sizeof buf, 1, 3, "x", 1, 3, 100, NULL, NULL);
	put(dir, "trace-c0-r00001.jsonl", buf);
	ok(gk_comm_trace_report(dir, &text, &err) < 0 && strstr(err.msg, "dumps of two runs"),
	   "dumps of different worlds: an error (%s)", err.msg);
}

int main(void)
{
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_ring();
	test_stuck();
	test_skip();
	test_missing();
	test_never_entered();
	test_p2p();
	test_groups();
	test_bad_input();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmpdir);
	return done_testing();
}
