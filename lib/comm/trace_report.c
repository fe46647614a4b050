/*
 * trace_report.c - read every rank's flight-recorder dumps (trace.c) and
 * say what a hang is (comm.h, gk_comm_trace_report).
 *
 * The ranks' operations are aligned by sequence number, per communicator.
 * In the window every dump still holds (a header's "first" is the oldest
 * its ring kept: older records were dropped, not skipped), the first
 * number at which the ranks' operations differ is a desynchronisation:
 * the ranks whose operation differs from the rest's are named, and when
 * their operation there is the others' next one, they skipped one.
 * Otherwise each rank's position is its first operation not done: the
 * ranks furthest behind are named, in the operation they never returned
 * from or short of the one the others wait in. A rank without a dump is
 * named from the world size in the others' headers, with its host when
 * the watchdog's probe named it.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/internal.h"

typedef struct trec {
	int64_t seq, index, step, enq, start, end;
	uint64_t bytes;
	int root, peer, state;
	char op[24], dtype[16], redop[8], tag[48];
} trec;

typedef struct tdump {
	int have;
	char host[GK_TR_HOST_LEN], reason[32], error[256];
	int64_t mono, first, next;
	trec **at; /* at[seq - first], NULL where a record was left out */
	trec *recs;
	size_t n;
} tdump;

typedef struct tcomm {
	int id, world;
	int *wr;           /* the world rank of each rank (the headers' "ranks"
			    * of a split's group), NULL: the world itself */
	char backend[16];
	tdump *d;          /* world of them */
	char (*host)[GK_TR_HOST_LEN]; /* hosts the others' watchdogs named */
	int *silent;       /* named silent by some rank's watchdog */
} tcomm;

typedef struct report {
	tcomm *c;
	size_t n;
} report;

static void report_free(report *rp)
{
	for (size_t i = 0; i < rp->n; i++) {
		tcomm *c = &rp->c[i];
		for (int r = 0; c->d && r < c->world; r++) {
			free(c->d[r].recs);
			free(c->d[r].at);
		}
		free(c->d);
		free(c->host);
		free(c->silent);
		free(c->wr);
	}
	free(rp->c);
}

static void copy_str(char *dst, size_t n, json_t *v)
{
	const char *s = json_string_value(v);
	snprintf(dst, n, "%s", s ? s : "");
}

static int64_t jint(json_t *o, const char *k, int64_t def)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : def;
}

static int bad(gk_err *err, const char *path, size_t line, const char *why)
{
	return gk_errf(err, "'%s' line %zu: %s (not a gpukit flight-recorder dump?)", path, line, why);
}

/*
 * The communicator of a header: its number and, for a split's groups
 * (every group has the number), which group, by the world ranks of its
 * ranks (ranks, NULL for the world), which must be those of the other
 * dumps of the group.
 */
static tcomm *comm_for(report *rp, int id, int world, const char *backend, json_t *ranks,
		       const char *path, gk_err *err)
{
	int lead = json_is_array(ranks) ? (int)json_integer_value(json_array_get(ranks, 0)) : 0;
	if (ranks && (!json_is_array(ranks) || json_array_size(ranks) != (size_t)world))
		return gk_errf(err, "'%s': its ranks are not %d world ranks (not a gpukit "
			       "flight-recorder dump?)", path, world), NULL;
	for (size_t i = 0; i < rp->n; i++) {
		tcomm *c = &rp->c[i];
		if (c->id != id || (c->wr ? c->wr[0] : 0) != lead)
			continue;
		for (int r = 0; c->wr && r < world && r < c->world; r++)
			if (c->wr[r] != (int)json_integer_value(json_array_get(ranks, (size_t)r)))
				return gk_errf(err, "'%s': its group of communicator %d is not the "
					       "other dumps' (dumps of two runs in one directory?)", path,
					       id), NULL;
		return c;
	}
	tcomm *c = realloc(rp->c, (rp->n + 1) * sizeof *c);
	if (!c)
		return gk_errf(err, "trace report: out of memory"), NULL;
	rp->c = c;
	c = &rp->c[rp->n];
	memset(c, 0, sizeof *c);
	c->id = id;
	c->world = world;
	snprintf(c->backend, sizeof c->backend, "%s", backend);
	c->d = calloc((size_t)world, sizeof *c->d);
	c->host = calloc((size_t)world, sizeof *c->host);
	c->silent = calloc((size_t)world, sizeof *c->silent);
	if (ranks && (c->wr = calloc((size_t)world, sizeof *c->wr)))
		for (int r = 0; r < world; r++)
			c->wr[r] = (int)json_integer_value(json_array_get(ranks, (size_t)r));
	rp->n++;
	if (!c->d || !c->host || !c->silent || (ranks && !c->wr))
		return gk_errf(err, "trace report: out of memory"), NULL;
	return c;
}

/* One dump file into rp. */
static int read_dump(report *rp, const char *path, gk_err *err)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return gk_err_sys(err, errno, "open '%s'", path);
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	tcomm *c = NULL;
	tdump *d = NULL;
	int rc = -1;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) > 0) {
		lineno++;
		json_error_t je;
		json_t *o = json_loadb(line, (size_t)len, 0, &je);
		if (!json_is_object(o)) {
			json_decref(o);
			bad(err, path, lineno, "not a JSON object");
			goto out;
		}
		if (lineno == 1) {
			int rank = (int)jint(o, "rank", -1), world = (int)jint(o, "world", 0);
			if (jint(o, "gk_trace", 0) != 1 || world < 1 || world > (1 << 24) ||
			    rank < 0 || rank >= world) {
				json_decref(o);
				bad(err, path, lineno, "no header of format 1 with a rank of its world");
				goto out;
			}
			char backend[16];
			copy_str(backend, sizeof backend, json_object_get(o, "backend"));
			c = comm_for(rp, (int)jint(o, "comm", 0), world, backend,
				     json_object_get(o, "ranks"), path, err);
			if (!c) {
				json_decref(o);
				goto out;
			}
			if (c->world != world) {
				json_decref(o);
				gk_errf(err, "'%s': a world of %d, where other dumps of communicator %d "
					"say %d (dumps of two runs in one directory?)", path, world, c->id,
					c->world);
				goto out;
			}
			d = &c->d[rank];
			if (d->have) {
				json_decref(o);
				gk_errf(err, "'%s': a second dump of rank %d of communicator %d", path,
					rank, c->id);
				goto out;
			}
			d->have = 1;
			copy_str(d->host, sizeof d->host, json_object_get(o, "host"));
			copy_str(d->reason, sizeof d->reason, json_object_get(o, "reason"));
			copy_str(d->error, sizeof d->error, json_object_get(o, "error"));
			snprintf(c->host[rank], sizeof c->host[rank], "%s", d->host);
			d->mono = jint(o, "mono_ns", 0);
			d->first = jint(o, "first", 1);
			d->next = jint(o, "next", 1);
			if (d->first < 1 || d->next < d->first || d->next - d->first > (1 << 24)) {
				json_decref(o);
				bad(err, path, lineno, "its window (first, next) is not one");
				goto out;
			}
			d->at = calloc((size_t)(d->next - d->first) + 1, sizeof *d->at);
			d->recs = calloc((size_t)(d->next - d->first) + 1, sizeof *d->recs);
			if (!d->at || !d->recs) {
				json_decref(o);
				gk_errf(err, "trace report: out of memory");
				goto out;
			}
			json_t *s = json_object_get(o, "silent"), *e;
			size_t i;
			json_array_foreach(s, i, e) {
				int r = (int)jint(e, "rank", -1);
				if (r >= 0 && r < world) {
					c->silent[r] = 1;
					if (!c->host[r][0])
						copy_str(c->host[r], sizeof c->host[r],
							 json_object_get(e, "host"));
				}
			}
			json_decref(o);
			continue;
		}
		int64_t seq = jint(o, "seq", 0);
		if (seq < d->first || seq >= d->next || d->at[seq - d->first]) {
			json_decref(o);
			bad(err, path, lineno, "a sequence number outside the header's window, or twice");
			goto out;
		}
		trec *t = &d->recs[d->n++];
		t->seq = seq;
		copy_str(t->op, sizeof t->op, json_object_get(o, "op"));
		copy_str(t->dtype, sizeof t->dtype, json_object_get(o, "dtype"));
		copy_str(t->redop, sizeof t->redop, json_object_get(o, "redop"));
		copy_str(t->tag, sizeof t->tag, json_object_get(o, "tag"));
		t->bytes = (uint64_t)jint(o, "bytes", 0);
		t->root = (int)jint(o, "root", -1);
		t->index = jint(o, "index", -1);
		t->step = jint(o, "step", -1);
		t->enq = jint(o, "enqueued_ns", 0);
		t->start = jint(o, "started_ns", 0);
		t->end = jint(o, "ended_ns", 0);
		t->peer = (int)jint(o, "peer", -1);
		const char *st = json_string_value(json_object_get(o, "state"));
		t->state = !st ? 0 : !strcmp(st, "queued") ? GK_TR_QUEUED :
			   !strcmp(st, "started") ? GK_TR_STARTED : !strcmp(st, "done") ? GK_TR_DONE :
			   !strcmp(st, "failed") ? GK_TR_FAILED : 0;
		json_decref(o);
		if (!t->op[0] || !t->state) {
			bad(err, path, lineno, "an operation without op or state");
			goto out;
		}
		d->at[seq - d->first] = t;
	}
	if (lineno == 0) {
		gk_errf(err, "'%s': empty (a dump cut short?)", path);
		goto out;
	}
	rc = 0;
out:
	free(line);
	fclose(f);
	return rc;
}

/* ---- words ---- */

/* The world rank of rank r of c. */
static int wr(const tcomm *c, int r)
{
	return c->wr && r >= 0 && r < c->world ? c->wr[r] : r;
}

static int by_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/*
 * "rank 3", "ranks 0 and 2", "ranks 0-2, 5 and 7" of the ranks set in
 * in[], by their world ranks (a split's own numbers name no process)
 */
static void say_ranks(FILE *o, const tcomm *c, const int *in)
{
	int n = 0, groups = 0, done = 0;
	int *v = malloc((size_t)c->world * sizeof *v);
	if (!v)
		return;
	for (int r = 0; r < c->world; r++)
		if (in[r])
			v[n++] = wr(c, r);
	qsort(v, (size_t)n, sizeof *v, by_int);
	for (int i = 0; i < n; i++)
		groups += i == 0 || v[i] != v[i - 1] + 1;
	fputs(n == 1 ? "rank " : "ranks ", o);
	for (int i = 0; i < n;) {
		int e = i;
		while (e + 1 < n && v[e + 1] == v[e] + 1)
			e++;
		done++;
		if (done > 1)
			fputs(done == groups ? " and " : ", ", o);
		if (e == i)
			fprintf(o, "%d", v[i]);
		else if (e == i + 1)
			fprintf(o, "%d%s%d", v[i], done == groups && groups == 1 ? " and " : ", ", v[e]);
		else
			fprintf(o, "%d-%d", v[i], v[e]);
		i = e + 1;
	}
	free(v);
}

static void say_host(FILE *o, const tcomm *c, int r)
{
	if (c->host[r][0])
		fprintf(o, " (on %s)", c->host[r]);
}

/* "allreduce #1842 (bucket 7, step 230, 4.00 MiB)" */
static void say_op(FILE *o, const tcomm *c, const trec *t)
{
	char size[32];
	int any = 0;
	fprintf(o, "%s #%" PRId64, t->op, t->seq);
	if (t->peer >= 0 && !strcmp(t->op, "send"))
		fprintf(o, " to rank %d", wr(c, t->peer));
	else if (t->peer >= 0 && !strcmp(t->op, "recv"))
		fprintf(o, " from rank %d", wr(c, t->peer));
	if (t->tag[0]) {
		fprintf(o, " (%s", t->tag);
		if (t->index >= 0)
			fprintf(o, " %" PRId64, t->index);
		any = 1;
	}
	if (t->step >= 0) {
		fprintf(o, "%sstep %" PRId64, any ? ", " : " (", t->step);
		any = 1;
	}
	if (t->root >= 0) {
		fprintf(o, "%sroot %d", any ? ", " : " (", wr(c, t->root));
		any = 1;
	}
	if (t->bytes) {
		fprintf(o, "%s%s", any ? ", " : " (", gk_format_size(t->bytes, 0, size, sizeof size));
		any = 1;
	}
	if (any)
		fputc(')', o);
}

static void say_age(FILE *o, double s)
{
	if (s < 0)
		s = 0;
	fprintf(o, s < 10 ? "%.1f s" : "%.0f s", s);
}

static const trec *rec_at(const tdump *d, int64_t seq)
{
	if (!d->have || seq < d->first || seq >= d->next)
		return NULL;
	return d->at[seq - d->first];
}

/* How long t has been in flight at the dump, or was until it failed. */
static double rec_age(const tdump *d, const trec *t)
{
	int64_t from = t->start ? t->start : t->enq;
	int64_t to = t->state == GK_TR_FAILED && t->end ? t->end : d->mono;
	return (double)(to - from) / 1e9;
}

static int same_op(const trec *a, const trec *b)
{
	return !strcmp(a->op, b->op) && a->bytes == b->bytes && !strcmp(a->dtype, b->dtype) &&
	       !strcmp(a->redop, b->redop) && a->root == b->root && !strcmp(a->tag, b->tag) &&
	       a->index == b->index && a->step == b->step;
}

/*
 * Where d is: 2 s when in operation s (its first not done), 2 next - 1
 * when every operation it entered is done (short of the next one, and
 * behind a rank in it). SEQ(p) is the operation, IN(p) whether entered.
 */
static int64_t position(const tdump *d)
{
	for (int64_t s = d->first; s < d->next; s++) {
		const trec *t = d->at[s - d->first];
		if (t && t->state != GK_TR_DONE)
			return 2 * s;
	}
	return 2 * d->next - 1;
}
#define SEQ(p) (((p) + 1) / 2)
#define IN(p) ((p) % 2 == 0)

/* Any rank's record of seq, for naming an operation some rank never entered. */
static const trec *any_at(const tcomm *c, int64_t seq)
{
	for (int r = 0; r < c->world; r++) {
		const trec *t = rec_at(&c->d[r], seq);
		if (t)
			return t;
	}
	return NULL;
}

static int failed_at(const tdump *d, int64_t seq)
{
	const trec *t = rec_at(d, seq);
	return t && t->state == GK_TR_FAILED;
}

/*
 * "; ranks 0-2 wait in allreduce #1843 (...) since 2.1 s", for the ranks in
 * set[], grouped by position (lead: no "; " before the first group).
 */
static void say_waiting(FILE *o, const tcomm *c, const int64_t *pos, const int *set, int *mark,
			int lead)
{
	for (int r = 0; r < c->world; r++) {
		if (!set[r] || mark[r])
			continue;
		int *grp = calloc((size_t)c->world, sizeof *grp);
		if (!grp)
			return;
		double oldest = 0;
		for (int q = r; q < c->world; q++) {
			if (!set[q] || mark[q] || pos[q] != pos[r] ||
			    failed_at(&c->d[q], SEQ(pos[q])) != failed_at(&c->d[r], SEQ(pos[r])))
				continue;
			grp[q] = mark[q] = 1;
			const trec *t = IN(pos[q]) ? rec_at(&c->d[q], SEQ(pos[q])) : NULL;
			if (t) {
				double age = rec_age(&c->d[q], t);
				oldest = age > oldest ? age : oldest;
			}
		}
		const trec *t = IN(pos[r]) ? rec_at(&c->d[r], SEQ(pos[r])) : NULL;
		int n = 0;
		for (int q = 0; q < c->world; q++)
			n += grp[q];
		if (!lead)
			fputs("; ", o);
		lead = 0;
		say_ranks(o, c, grp);
		if (n == 1)
			say_host(o, c, r);
		if (t && t->state == GK_TR_FAILED) {
			fputs(" failed in ", o);
			say_op(o, c, t);
			fputs(" after ", o);
			say_age(o, oldest);
		} else if (t) {
			fputs(n == 1 ? " waits in " : " wait in ", o);
			say_op(o, c, t);
			fputs(" since ", o);
			say_age(o, oldest);
		} else {
			fprintf(o, " finished #%" PRId64 " and %s in no operation", SEQ(pos[r]) - 1,
				n == 1 ? "is" : "are");
		}
		free(grp);
	}
}

/* every rank that left a dump, each with what it waits in */
static void say_all_waiting(FILE *o, const tcomm *c, const int64_t *pos, int *set, int *mark)
{
	memset(mark, 0, (size_t)c->world * sizeof *mark);
	for (int r = 0; r < c->world; r++)
		set[r] = c->d[r].have;
	say_waiting(o, c, pos, set, mark, 1);
	fputc('\n', o);
}

/* One communicator's verdict, or nothing when it shows no problem. */
static void analyse(FILE *o, const tcomm *c, int several)
{
	int w = c->world, dumped = 0, said_missing = 0;
	int64_t *pos = calloc((size_t)w, sizeof *pos);
	int *set = calloc((size_t)w, sizeof *set), *mark = calloc((size_t)w, sizeof *mark);
	int *missing = calloc((size_t)w, sizeof *missing);
	if (!pos || !set || !mark || !missing)
		goto out;
	int64_t lo = 0, hi = INT64_MAX;
	for (int r = 0; r < w; r++) {
		const tdump *d = &c->d[r];
		missing[r] = !d->have;
		if (!d->have)
			continue;
		dumped++;
		pos[r] = position(d);
		lo = d->first > lo ? d->first : lo;
		hi = d->next < hi ? d->next : hi;
	}
	if (several && c->wr) {
		/* a split's group: which one, by its world ranks */
		int *all = malloc((size_t)w * sizeof *all);
		if (all) {
			for (int r = 0; r < w; r++)
				all[r] = 1;
			fprintf(o, "communicator %d (%s, the group of ", c->id, c->backend);
			say_ranks(o, c, all);
			fputs("): ", o);
			free(all);
		}
	} else if (several) {
		fprintf(o, "communicator %d (%s): ", c->id, c->backend);
	}

	/*
	 * Point-to-point messages (a pipeline's stages): the ranks send and
	 * receive in orders of their own, so their operations and positions
	 * do not align by number; each rank's own wait is said, with its
	 * peer, after the ranks that left no dump or did not answer.
	 */
	int p2p = 0;
	for (int r = 0; r < w && !p2p; r++)
		for (size_t i = 0; i < c->d[r].n && !p2p; i++)
			p2p = !strcmp(c->d[r].recs[i].op, "send") || !strcmp(c->d[r].recs[i].op, "recv");

	/* the first operation the ranks disagree on */
	for (int64_t s = lo; dumped > 1 && !p2p && s < hi; s++) {
		int *grp = mark; /* grp[r]: the group of rank r's operation at s, 1-based */
		memset(grp, 0, (size_t)w * sizeof *grp);
		const trec *rep[64];
		int ng = 0, size[64] = {0};
		for (int r = 0; r < w; r++) {
			const trec *t = rec_at(&c->d[r], s);
			if (!t)
				continue;
			int g = 0;
			while (g < ng && !same_op(rep[g], t))
				g++;
			if (g == ng && ng < 64)
				rep[ng++] = t;
			if (g < ng) {
				grp[r] = g + 1;
				size[g]++;
			}
		}
		if (ng < 2)
			continue;
		int big = 0; /* the largest group; the others are named */
		for (int g = 1; g < ng; g++)
			big = size[g] > size[big] ? g : big;
		for (int g = 0; g < ng; g++) {
			if (g == big)
				continue;
			memset(set, 0, (size_t)w * sizeof *set);
			int first = -1;
			for (int r = 0; r < w; r++)
				if (grp[r] == g + 1) {
					set[r] = 1;
					first = first < 0 ? r : first;
				}
			int other = -1;
			for (int r = 0; r < w && other < 0; r++)
				if (grp[r] == big + 1)
					other = r;
			const trec *theirs_next = rec_at(&c->d[other], s + 1);
			const trec *mine_next = rec_at(&c->d[first], s + 1);
			say_ranks(o, c, set);
			if (size[g] == 1)
				say_host(o, c, first);
			if (theirs_next && same_op(rep[g], theirs_next)) {
				fputs(" skipped ", o);
				say_op(o, c, rep[big]);
				fprintf(o, ": %s #%" PRId64 " is the others' #%" PRId64, size[g] == 1 ?
					"its" : "their", s, s + 1);
			} else if (mine_next && same_op(rep[big], mine_next)) {
				fputs(" called an operation the others did not: ", o);
				say_op(o, c, rep[g]);
				fprintf(o, ", before the others' #%" PRId64, s);
			} else {
				fputs(" called ", o);
				say_op(o, c, rep[g]);
				fputs(" where the others called ", o);
				say_op(o, c, rep[big]);
			}
			fputs("; the ranks' operations differ from there on\n", o);
		}
		say_all_waiting(o, c, pos, set, mark);
		goto tail;
	}

	/* no disagreement: who is behind */
	int64_t p = INT64_MAX;
	for (int r = 0; r < w; r++)
		if (c->d[r].have && pos[r] < p)
			p = pos[r];
	int ahead = 0, nmissing = 0, nsilent = 0;
	for (int r = 0; r < w; r++) {
		set[r] = c->d[r].have && pos[r] == p;
		ahead += c->d[r].have && pos[r] != p;
		nmissing += missing[r];
		nsilent += c->silent[r];
	}
	if (!dumped) {
		fputs("no rank left a dump\n", o);
		goto out;
	}
	if (p2p) {
		ahead = 0;
		if (!nmissing && !nsilent) {
			say_all_waiting(o, c, pos, set, mark);
			goto tail;
		}
	}
	if (ahead) {
		/* the ranks behind: in the operation, or short of it */
		const trec *t = NULL;
		double oldest = 0;
		int entered = 0;
		for (int r = 0; r < w; r++) {
			if (!set[r] || !IN(p))
				continue;
			const trec *m = rec_at(&c->d[r], SEQ(p));
			if (m) {
				entered = 1;
				t = m;
				double age = rec_age(&c->d[r], m);
				oldest = age > oldest ? age : oldest;
			}
		}
		int one = -1, n = 0;
		for (int r = 0; r < w; r++)
			if (set[r]) {
				one = one < 0 ? r : one;
				n++;
			}
		say_ranks(o, c, set);
		if (n == 1)
			say_host(o, c, one);
		if (entered) {
			fprintf(o, " %s in ", n == 1 ? "is" : "are");
			say_op(o, c, t);
			fputs(" since ", o);
			say_age(o, oldest);
		} else {
			const trec *want = any_at(c, SEQ(p)), *last = rec_at(&c->d[one], SEQ(p) - 1);
			fprintf(o, " never entered ");
			if (want)
				say_op(o, c, want);
			else
				fprintf(o, "#%" PRId64, SEQ(p));
			if (last && n == 1) {
				fputs(": its last operation, ", o);
				say_op(o, c, last);
				fputs(", ended ", o);
				say_age(o, (double)(c->d[one].mono - last->end) / 1e9);
				fputs(" before its dump", o);
			}
		}
		memset(mark, 0, (size_t)w * sizeof *mark);
		for (int r = 0; r < w; r++)
			set[r] = c->d[r].have && pos[r] != p;
		say_waiting(o, c, pos, set, mark, 0);
		fputc('\n', o);
		goto tail;
	}
	if (nmissing || nsilent) {
		/* every dump is at one place: the ranks without one, or that did not answer */
		said_missing = 1;
		memset(set, 0, (size_t)w * sizeof *set);
		int one = -1;
		for (int r = 0; r < w; r++)
			if (missing[r] || c->silent[r]) {
				set[r] = 1;
				one = one < 0 ? r : one;
			}
		say_ranks(o, c, set);
		if (nmissing + nsilent == 1 || (nmissing == 1 && nsilent == 1 && c->silent[one]))
			say_host(o, c, one);
		int both = 1;
		for (int r = 0; r < w; r++)
			if (set[r] && !(missing[r] && c->silent[r]))
				both = 0;
		if (both)
			fputs(" left no dump and did not answer the others' watchdog (stopped, killed, "
			      "or the network to it is down)", o);
		else if (nmissing && !nsilent)
			fputs(" left no dump (killed, stopped, or it never reached one)", o);
		else if (!nmissing)
			fputs(" did not answer the others' watchdog (stopped, or the network to it "
			      "is down)", o);
		else
			fputs(" left no dump or did not answer the others' watchdog", o);
		memset(mark, 0, (size_t)w * sizeof *mark);
		for (int r = 0; r < w; r++)
			set[r] = c->d[r].have && !c->silent[r];
		say_waiting(o, c, pos, set, mark, 0);
		fputc('\n', o);
		goto tail;
	}
	{
		const trec *t = NULL;
		double oldest = 0;
		for (int r = 0; r < w && IN(p); r++) {
			const trec *m = rec_at(&c->d[r], SEQ(p));
			if (m) {
				t = m;
				double age = rec_age(&c->d[r], m);
				oldest = age > oldest ? age : oldest;
			}
		}
		if (t) {
			fputs("every rank is in ", o);
			say_op(o, c, t);
			fputs(" since ", o);
			say_age(o, oldest);
			fputs(": none is behind another; the operation itself does not finish (the "
			      "network, a device, or the library)\n", o);
		} else {
			fprintf(o, "no operation in flight: every rank finished #%" PRId64
				" and entered no other\n", SEQ(p) - 1);
		}
	}
tail:
	/* ranks without a dump the verdict did not name */
	if (!said_missing) {
		int n = 0;
		for (int r = 0; r < w; r++)
			n += missing[r];
		if (n) {
			say_ranks(o, c, missing);
			fprintf(o, " left no dump\n");
		}
	}
	/* what each dump says of itself */
	for (int r = 0; r < w; r++) {
		const tdump *d = &c->d[r];
		if (d->have && d->error[0]) {
			fprintf(o, "rank %d's first failure: %s\n", wr(c, r), d->error);
			break;
		}
	}
out:
	free(pos);
	free(set);
	free(mark);
	free(missing);
}

/* by number, then a split's groups by their first world rank */
static int by_id(const void *a, const void *b)
{
	const tcomm *x = a, *y = b;
	if (x->id != y->id)
		return x->id - y->id;
	return (x->wr ? x->wr[0] : 0) - (y->wr ? y->wr[0] : 0);
}

int gk_comm_trace_report(const char *dir, char **text, gk_err *err)
{
	report rp = {0};
	*text = NULL;
	DIR *dh = opendir(dir);
	if (!dh)
		return gk_err_sys(err, errno, "open directory '%s'", dir);
	struct dirent *e;
	int rc = 0, files = 0;
	while (rc == 0 && (e = readdir(dh))) {
		int id, rank, end = 0;
		if (sscanf(e->d_name, "trace-c%d-r%d.jsonl%n", &id, &rank, &end) != 2 ||
		    e->d_name[end] != '\0' || end == 0)
			continue;
		size_t n = strlen(dir) + strlen(e->d_name) + 2;
		char *path = malloc(n);
		if (!path) {
			rc = gk_errf(err, "trace report: out of memory");
			break;
		}
		snprintf(path, n, "%s/%s", dir, e->d_name);
		rc = read_dump(&rp, path, err);
		free(path);
		files++;
	}
	closedir(dh);
	if (rc == 0 && files == 0)
		rc = gk_errf(err, "'%s': no flight-recorder dumps (trace-cN-rNNNNN.jsonl) in it", dir);
	if (rc < 0) {
		report_free(&rp);
		return -1;
	}
	qsort(rp.c, rp.n, sizeof *rp.c, by_id);
	size_t len = 0;
	FILE *o = open_memstream(text, &len);
	if (!o) {
		report_free(&rp);
		return gk_errf(err, "trace report: out of memory");
	}
	for (size_t i = 0; i < rp.n; i++)
		analyse(o, &rp.c[i], rp.n > 1);
	fclose(o);
	report_free(&rp);
	return 0;
}
