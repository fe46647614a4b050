/*
 * comm_mpi.c - the mpi backend: host-memory collectives over Open MPI,
 * with allreduce algorithms of our own over point-to-point messages. Every
 * call ends in the stall watchdog's wait (watchdog_mpi.c).
 *
 * References: Thakur, Rabenseifner, Gropp, "Optimization of Collective
 * Communication Operations in MPICH", IJHPCA 19(1), 2005 (ring, recursive
 * doubling, recursive halving/doubling and the fold for non-power-of-two
 * worlds); Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms
 * for clusters of workstations", JPDC 69(2), 2009 (the ring).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_mpi.h"
#include "comm/reduce.h"

/* The largest message we hand MPI at once (its counts are int). */
#define MAX_MSG ((size_t)1 << 30)

/* ---- user ops for f16 and bf16 (MPI has no 16-bit float types) ---- */

#define OP16(NAME, FN, RED)                                                   \
	static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt)   \
	{                                                                     \
		(void)dt;                                                     \
		const uint16_t *a = in;                                       \
		uint16_t *b = inout;                                          \
		for (int i = 0; i < *len; i++)                                \
			b[i] = FN(RED, b[i], a[i]);                           \
	}
OP16(op_bf16_sum, gk_red_bf16, GK_RED_SUM)
OP16(op_bf16_prod, gk_red_bf16, GK_RED_PROD)
OP16(op_bf16_max, gk_red_bf16, GK_RED_MAX)
OP16(op_bf16_min, gk_red_bf16, GK_RED_MIN)
OP16(op_f16_sum, gk_red_f16, GK_RED_SUM)
OP16(op_f16_prod, gk_red_f16, GK_RED_PROD)
OP16(op_f16_max, gk_red_f16, GK_RED_MAX)
OP16(op_f16_min, gk_red_f16, GK_RED_MIN)

static MPI_User_function *const op16_fn[2][4] = {
	{op_bf16_sum, op_bf16_prod, op_bf16_max, op_bf16_min},
	{op_f16_sum, op_f16_prod, op_f16_max, op_f16_min},
};

static MPI_Datatype mpi_dt(gk_dtype dt)
{
	switch (dt) {
	case GK_DT_F32: return MPI_FLOAT;
	case GK_DT_F64: return MPI_DOUBLE;
	case GK_DT_I32: return MPI_INT32_T;
	default: return MPI_UINT16_T;
	}
}

static MPI_Op mpi_op(mpi_state *st, gk_dtype dt, gk_comm_op op)
{
	int red = op == GK_COMM_AVG ? GK_RED_SUM : (int)op;
	if (dt == GK_DT_BF16 || dt == GK_DT_F16)
		return st->op16[dt == GK_DT_F16][red];
	static const MPI_Op ops[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
	return ops[red];
}

/*
 * A communicator of our own over base (MPI_COMM_WORLD, or a split of a
 * parent's), with what a stall message needs, known before anything can
 * stall: a communicator for the probe and every rank's host. Without
 * memory the message names no rank; nothing else changes.
 */
static void setup(gk_comm *c, mpi_state *st, MPI_Comm base, int dup)
{
	st->c = c; /* for the flight recorder */
	gk_comm_mpi_lock();
	/* Our own communicator: our tags never meet the caller's messages. */
	if (dup)
		MPI_Comm_dup(base, &st->comm);
	else
		st->comm = base;
	MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(st->comm, &c->rank);
	MPI_Comm_size(st->comm, &c->world);
	st->rank = c->rank;
	st->world = c->world;
	MPI_Comm_dup(st->comm, &st->probe);
	MPI_Comm_set_errhandler(st->probe, MPI_ERRORS_RETURN);
	char me[MPI_MAX_PROCESSOR_NAME + 1] = "", mine[HOST_LEN] = "";
	int len = 0;
	MPI_Get_processor_name(me, &len);
	snprintf(mine, sizeof mine, "%s", me);
	st->hosts = calloc((size_t)c->world, HOST_LEN);
	st->heard = calloc((size_t)c->world, sizeof *st->heard);
	int have = st->hosts && st->heard, all = 0;
	MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, st->comm);
	if (all)
		MPI_Allgather(mine, HOST_LEN, MPI_CHAR, st->hosts, HOST_LEN, MPI_CHAR, st->comm);
	if (!all) {
		free(st->hosts);
		free(st->heard);
		st->hosts = NULL;
		st->heard = NULL;
	}
	for (int t = 0; t < 2; t++)
		for (int o = 0; o < 4; o++)
			MPI_Op_create(op16_fn[t][o], 1, &st->op16[t][o]);
	gk_comm_mpi_unlock();
	/* Same meaning as for nccl: 0 is the default, negative turns it off. */
	st->timeout = c->cfg.timeout > 0 ? c->cfg.timeout :
		      c->cfg.timeout < 0 ? 0 : GK_COMM_DEFAULT_TIMEOUT;
	c->mpi = st;
}

int gk_comm_mpi_open(gk_comm *c, int need_thread, gk_err *err)
{
	mpi_state *st = calloc(1, sizeof *st);
	if (!st)
		return gk_errf(err, "mpi: out of memory");
	int inited = 0, provided = 0;
	MPI_Initialized(&inited);
	if (!inited) {
		int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
		if (rc != MPI_SUCCESS) {
			free(st);
			return gk_errf(err, "mpi: MPI_Init_thread failed");
		}
		st->owned = 1;
		/*
		 * Open MPI's UCX (the usual transport on InfiniBand) installs
		 * its own SIGBUS handler when MPI_Init loads it, over the
		 * tool's: a shard truncated under the job would be UCX's
		 * backtrace and a bus error instead of a message naming it.
		 */
		gk_map_guard(NULL);
	} else {
		MPI_Query_thread(&provided);
	}
	(void)need_thread;
	/* Without it, non-blocking calls run at wait time on the caller's thread. */
	c->thread_ok = provided >= MPI_THREAD_SERIALIZED;
	setup(c, st, MPI_COMM_WORLD, 1);
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/*
 * " among ranks 2 and 3", " among ranks 0-3", " among ranks 0, 8, 16 and
 * 24" of a split's world ranks, cut with ", ..." where it would not fit
 */
static void group_words(mpi_state *st, const int *ranks, int n)
{
	size_t cap = sizeof st->group, w = 0;
	int runs = 0, done = 0;
	int *wr = malloc((size_t)n * sizeof *wr);
	if (!wr)
		return; /* the message names no group; nothing else changes */
	memcpy(wr, ranks, (size_t)n * sizeof *wr);
	qsort(wr, (size_t)n, sizeof *wr, cmp_int);
	for (int i = 0; i < n; i++)
		runs += i == 0 || wr[i] != wr[i - 1] + 1;
	w += (size_t)snprintf(st->group, cap, " among ranks ");
	for (int i = 0; i < n && w < cap;) {
		int e = i;
		while (e + 1 < n && wr[e + 1] == wr[e] + 1)
			e++;
		char one[32];
		const char *sep = ++done == 1 ? "" : done == runs ? " and " : ", ";
		if (e == i)
			snprintf(one, sizeof one, "%s%d", sep, wr[i]);
		else if (e == i + 1)
			snprintf(one, sizeof one, "%s%d%s%d", sep, wr[i], runs == 1 ? " and " : ", ",
				 wr[e]);
		else
			snprintf(one, sizeof one, "%s%d-%d", sep, wr[i], wr[e]);
		if (w + strlen(one) + 6 >= cap) {
			snprintf(st->group + w, cap - w, ", ...");
			break;
		}
		w += (size_t)snprintf(st->group + w, cap - w, "%s", one);
		i = e + 1;
	}
	free(wr);
}

int gk_comm_mpi_split(gk_comm *parent, gk_comm *c, int color, int key, gk_err *err)
{
	mpi_state *ps = parent->mpi;
	mpi_state *st = calloc(1, sizeof *st);
	if (!st)
		return gk_errf(err, "mpi: out of memory");
	MPI_Comm sub;
	int rc = MPI_LOCKED(MPI_Comm_split(ps->comm, color, key, &sub));
	if (rc != MPI_SUCCESS) {
		free(st);
		return mpi_fail(err, rc, "mpi: MPI_Comm_split");
	}
	c->thread_ok = parent->thread_ok;
	setup(c, st, sub, 0); /* owned: MPI stays the parent's to finalise */
	/* the world rank of each of its ranks, for messages and dumps */
	c->wranks = calloc((size_t)c->world, sizeof *c->wranks);
	if (!c->wranks) {
		gk_comm_mpi_close(c);
		return gk_errf(err, "mpi: out of memory");
	}
	rc = MPI_LOCKED(MPI_Allgather(&parent->world_rank, 1, MPI_INT, c->wranks, 1, MPI_INT,
				      st->comm));
	if (rc != MPI_SUCCESS) {
		gk_comm_mpi_close(c);
		free(c->wranks);
		c->wranks = NULL;
		return mpi_fail(err, rc, "mpi: MPI_Allgather");
	}
	int all = 0;
	MPI_LOCKED(MPI_Comm_size(MPI_COMM_WORLD, &all));
	if (c->world < all)
		group_words(st, c->wranks, c->world);
	return 0;
}

void gk_comm_mpi_close(gk_comm *c)
{
	mpi_state *st = c->mpi;
	if (!st)
		return;
	gk_comm_mpi_lock();
	for (int t = 0; t < 2; t++)
		for (int o = 0; o < 4; o++)
			MPI_Op_free(&st->op16[t][o]);
	MPI_Comm_free(&st->probe);
	MPI_Comm_free(&st->comm);
	if (st->owned)
		MPI_Finalize();
	gk_comm_mpi_unlock();
	free(st->tmp);
	free(st->w1);
	free(st->w2);
	free(st->work);
	free(st->hosts);
	free(st->heard);
	free(st);
	c->mpi = NULL;
}

static char *grow(char **p, size_t *cap, size_t n, gk_err *err)
{
	if (GK_GROW(*p, *cap, n, "mpi: scratch buffer", err) < 0)
		return NULL;
	return *p;
}

/* ---- point-to-point in segments ---- */

typedef void (*seg_fn)(void *ctx, size_t off, size_t len);

/*
 * Send sbytes to `to` while receiving rbytes from `from`, both cut into
 * seg-byte segments; fn (if any) runs on each received segment as soon as
 * it lands, while later segments are still in flight. At most WINDOW
 * segments are outstanding in each direction.
 */
#define WINDOW 8
static int xchg(mpi_state *st, const void *sbuf, size_t sbytes, int to,
		void *rbuf, size_t rbytes, int from, size_t seg, int tag,
		seg_fn fn, void *ctx, gk_err *err)
{
	if (seg == 0 || seg > MAX_MSG)
		seg = MAX_MSG;
	size_t ns = (sbytes + seg - 1) / seg, nr = (rbytes + seg - 1) / seg;
	size_t n = ns > nr ? ns : nr;
	/* the flight recorder: whose message this rank waits for now */
	gk_comm_trace_peer(st->c, from != MPI_PROC_NULL ? from : to);
	if (ns == 1 && nr == 1) {
		/* One segment each way: the cheapest call, for small messages. */
		MPI_Request q[2];
		MPI_TRY(MPI_Irecv(rbuf, (int)rbytes, MPI_BYTE, from, tag, st->comm,
				  &q[0]),
			"mpi: receive");
		MPI_TRY(MPI_Isend(sbuf, (int)sbytes, MPI_BYTE, to, tag, st->comm,
				  &q[1]),
			"mpi: send");
		MPI_WAIT(2, q, "mpi: exchange");
		if (fn)
			fn(ctx, 0, rbytes);
		return 0;
	}
	for (size_t base = 0; base < n; base += WINDOW) {
		MPI_Request rq[WINDOW], sq[WINDOW];
		int nrq = 0, nsq = 0;
		for (size_t k = base; k < n && k < base + WINDOW; k++) {
			if (k < nr) {
				size_t off = k * seg, len = rbytes - off < seg ? rbytes - off : seg;
				MPI_TRY(MPI_Irecv((char *)rbuf + off, (int)len, MPI_BYTE,
						  from, tag, st->comm, &rq[nrq++]),
					"mpi: receive");
			}
			if (k < ns) {
				size_t off = k * seg, len = sbytes - off < seg ? sbytes - off : seg;
				MPI_TRY(MPI_Isend((const char *)sbuf + off, (int)len, MPI_BYTE,
						  to, tag, st->comm, &sq[nsq++]),
					"mpi: send");
			}
		}
		for (int i = 0; i < nrq; i++) {
			MPI_WAIT(1, &rq[i], "mpi: receive");
			if (fn) {
				/* fn may write where segment i is sent from (recursive doubling). */
				if (i < nsq)
					MPI_WAIT(1, &sq[i], "mpi: send");
				size_t off = (base + (size_t)i) * seg;
				fn(ctx, off, rbytes - off < seg ? rbytes - off : seg);
			}
		}
		MPI_WAIT(nsq, sq, "mpi: send");
	}
	return 0;
}

static int send_all(mpi_state *st, const void *buf, size_t bytes, int to,
		    int tag, gk_err *err)
{
	return xchg(st, buf, bytes, to, NULL, 0, MPI_PROC_NULL, 0, tag, NULL,
		    NULL, err);
}

static int recv_all(mpi_state *st, void *buf, size_t bytes, int from, int tag,
		    gk_err *err)
{
	return xchg(st, NULL, 0, MPI_PROC_NULL, buf, bytes, from, 0, tag, NULL,
		    NULL, err);
}

/* Reduce a received segment of tmp into the matching part of dst. */
typedef struct red_ctx {
	char *dst;
	const char *src; /* dst = src op tmp; src == dst for in place */
	const char *tmp;
	gk_dtype dt;
	gk_comm_op op;
	size_t esz;
	int divide; /* > 0: AVG's last reduction, then this division */
} red_ctx;

/*
 * A segment reduced as it lands. AVG's division runs on the final sums
 * the same way wherever it runs (each element once, reduce.h's
 * gk_avg_*), so on the last reduction of a reduce-scatter it runs
 * here, on the owned block's segments while they are in cache, rather
 * than as a pass over the whole buffer after the allgather: the same
 * bits, an n-th of the work.
 */
static void red_seg(void *p, size_t off, size_t len)
{
	red_ctx *r = p;
	gk_comm_reduce3_cpu(r->dst + off, r->src + off, r->tmp + off, len / r->esz,
			    r->dt, r->op);
	if (r->divide > 0)
		gk_comm_avg_cpu(r->dst + off, len / r->esz, r->dt, r->divide);
}

/* Block i of n over count elements: the first count % n blocks get one more. */
static size_t boff(size_t count, int n, int i)
{
	size_t q = count / (size_t)n, rem = count % (size_t)n;
	return (size_t)i * q + ((size_t)i < rem ? (size_t)i : rem);
}
static size_t blen(size_t count, int n, int i)
{
	return boff(count, n, i + 1) - boff(count, n, i);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Segment size in bytes: a whole number of elements. */
static size_t seg_bytes(const gk_comm *c, size_t esz)
{
	size_t s = c->cfg.segment ? c->cfg.segment : (size_t)1 << 20;
	s -= s % esz;
	return s ? s : esz;
}

/* ---- ring: reduce-scatter then allgather ---- */

/*
 * Reduce-scatter in place over buf, whose n blocks are given by off/len
 * functions of count: after n-1 steps rank r holds block r fully reduced
 * (and divided by n when divide is set: AVG's division, red_seg).
 * Step s: send block r-s-1 (reduced s times so far), receive block r-s-2
 * from the left and fold it in as segments arrive.
 */
static int ring_rsv(gk_comm *c, const char *src, char *buf, size_t count,
		    const size_t *displ, gk_dtype dt, gk_comm_op op, int divide, gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank;
	size_t esz = gk_comm_dt_size(dt), most = 0;
#define BO(i) (displ ? displ[i] : boff(count, n, i))
#define BL(i) (displ ? displ[(i) + 1] - displ[i] : blen(count, n, i))
	for (int i = 0; i < n; i++)
		most = BL(i) > most ? BL(i) : most;
	char *tmp = grow(&st->tmp, &st->tmp_cap, most * esz + 1, err);
	if (!tmp)
		return -1;
	for (int s = 0; s < n - 1; s++) {
		int sb = mod(r - s - 1, n), rb = mod(r - s - 2, n);
		/*
		 * Out of place, the first step sends straight from src and every
		 * reduction reads src, so the input is never copied as a whole.
		 */
		const char *from = s == 0 ? src : buf;
		red_ctx rc = {buf + BO(rb) * esz, src + BO(rb) * esz,
			      tmp, dt, op, esz, divide && s == n - 2 ? n : 0};
		if (xchg(st, from + BO(sb) * esz, BL(sb) * esz,
			 mod(r + 1, n), tmp, BL(rb) * esz, mod(r - 1, n),
			 seg_bytes(c, esz), TAG_RS, red_seg, &rc, err) < 0)
			return -1;
	}
#undef BO
#undef BL
	return 0;
}

static int ring_rs(gk_comm *c, const char *src, char *buf, size_t count,
		   gk_dtype dt, gk_comm_op op, int divide, gk_err *err)
{
	return ring_rsv(c, src, buf, count, NULL, dt, op, divide, err);
}

/* Allgather in place: rank r starts with block r, ends with all; the
 * blocks the ring's equal ones, or the caller's (displ). */
static int ring_agv(gk_comm *c, char *buf, size_t count, const size_t *displ, size_t esz,
		    gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank;
#define BO(i) (displ ? displ[i] : boff(count, n, i))
#define BL(i) (displ ? displ[(i) + 1] - displ[i] : blen(count, n, i))
	for (int s = 0; s < n - 1; s++) {
		int sb = mod(r - s, n), rb = mod(r - s - 1, n);
		if (xchg(st, buf + BO(sb) * esz, BL(sb) * esz, mod(r + 1, n),
			 buf + BO(rb) * esz, BL(rb) * esz, mod(r - 1, n), seg_bytes(c, esz),
			 TAG_AG, NULL, NULL, err) < 0)
			return -1;
	}
#undef BO
#undef BL
	return 0;
}

static int ring_ag(gk_comm *c, char *buf, size_t count, size_t esz, gk_err *err)
{
	return ring_agv(c, buf, count, NULL, esz, err);
}

static int ring_allreduce(gk_comm *c, const char *src, char *buf, size_t count,
			  gk_dtype dt, gk_comm_op op, gk_err *err)
{
	if (c->world == 1 && src != buf)
		memcpy(buf, src, count * gk_comm_dt_size(dt));
	if (ring_rs(c, src, buf, count, dt, op, op == GK_COMM_AVG, err) < 0)
		return -1;
	return ring_ag(c, buf, count, gk_comm_dt_size(dt), err);
}

/* ---- the fold for non-power-of-two worlds ---- */

/*
 * With n = p2 + rem ranks, the first 2*rem pair up: the even one of each
 * pair sends everything to the odd one and sits out. Returns the virtual
 * rank in the power-of-two world, or -1 for a rank sitting out.
 */
static int fold_in(gk_comm *c, char *buf, size_t count, gk_dtype dt,
		   gk_comm_op op, int *p2_out, gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank, p2 = 1;
	while (p2 * 2 <= n)
		p2 *= 2;
	int rem = n - p2;
	size_t esz = gk_comm_dt_size(dt), bytes = count * esz;
	*p2_out = p2;
	if (r < 2 * rem) {
		if (r % 2 == 0) {
			if (send_all(st, buf, bytes, r + 1, TAG_FOLD, err) < 0)
				return -2;
			return -1;
		}
		char *tmp = grow(&st->tmp, &st->tmp_cap, bytes + 1, err);
		if (!tmp || recv_all(st, tmp, bytes, r - 1, TAG_FOLD, err) < 0)
			return -2;
		gk_comm_reduce_cpu(buf, tmp, count, dt, op);
		return r / 2;
	}
	return r - rem;
}

static int fold_out(gk_comm *c, char *buf, size_t bytes, gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank, p2 = 1;
	while (p2 * 2 <= n)
		p2 *= 2;
	int rem = n - p2;
	if (r >= 2 * rem)
		return 0;
	if (r % 2 == 0)
		return recv_all(st, buf, bytes, r + 1, TAG_FOLD, err);
	return send_all(st, buf, bytes, r - 1, TAG_FOLD, err);
}

/* Real rank of virtual rank v in the folded world. */
static int real_rank(int v, int rem) { return v < rem ? 2 * v + 1 : v + rem; }

/* ---- recursive doubling ---- */

static int rd_allreduce(gk_comm *c, char *buf, size_t count, gk_dtype dt,
			gk_comm_op op, gk_err *err)
{
	mpi_state *st = c->mpi;
	int p2, v = fold_in(c, buf, count, dt, op, &p2, err);
	if (v == -2)
		return -1;
	size_t esz = gk_comm_dt_size(dt), bytes = count * esz;
	int rem = c->world - p2;
	if (v >= 0) {
		char *tmp = grow(&st->tmp, &st->tmp_cap, bytes + 1, err);
		if (!tmp)
			return -1;
		for (int mask = 1; mask < p2; mask <<= 1) {
			int peer = real_rank(v ^ mask, rem);
			red_ctx rc = {buf, buf, tmp, dt, op, esz, 0};
			if (xchg(st, buf, bytes, peer, tmp, bytes, peer,
				 seg_bytes(c, esz), TAG_RD, red_seg, &rc, err) < 0)
				return -1;
		}
	}
	return fold_out(c, buf, bytes, err);
}

/* ---- Rabenseifner: recursive halving, then recursive doubling ---- */

static int rab_allreduce(gk_comm *c, const char *src, char *buf, size_t count,
			 gk_dtype dt, gk_comm_op op, gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world;
	/* The fold works in buf; without one the first halving reads src. */
	if (src != buf && ((n & (n - 1)) != 0 || n == 1)) {
		memcpy(buf, src, count * gk_comm_dt_size(dt));
		src = buf;
	}
	int p2, v = fold_in(c, buf, count, dt, op, &p2, err);
	if (v == -2)
		return -1;
	size_t esz = gk_comm_dt_size(dt);
	int rem = c->world - p2;
	if (v >= 0) {
		char *tmp = grow(&st->tmp, &st->tmp_cap, count * esz + 1, err);
		if (!tmp)
			return -1;
		/*
		 * Halving: the window [lo, hi) of blocks halves each step; the
		 * rank whose bit `dist` is clear keeps the lower half. It ends
		 * as block v, fully reduced.
		 */
		int lo = 0, hi = p2;
		for (int dist = p2 / 2; dist >= 1; dist /= 2) {
			int peer = real_rank(v ^ dist, rem), mid = lo + (hi - lo) / 2;
			int klo = (v & dist) ? mid : lo, khi = (v & dist) ? hi : mid;
			int slo = (v & dist) ? lo : mid, shi = (v & dist) ? mid : hi;
			size_t ko = boff(count, p2, klo), kn = boff(count, p2, khi) - ko;
			size_t so = boff(count, p2, slo), sn = boff(count, p2, shi) - so;
			const char *from = dist == p2 / 2 ? src : buf;
			/* the last halving leaves block v final: AVG divides it */
			red_ctx rc = {buf + ko * esz, from + ko * esz, tmp, dt, op, esz,
				      op == GK_COMM_AVG && dist == 1 ? c->world : 0};
			if (xchg(st, from + so * esz, sn * esz, peer, tmp, kn * esz, peer,
				 seg_bytes(c, esz), TAG_RS, red_seg, &rc, err) < 0)
				return -1;
			lo = klo, hi = khi;
		}
		/* Doubling: swap windows with the partner; they are adjacent. */
		for (int dist = 1; dist < p2; dist *= 2) {
			int peer = real_rank(v ^ dist, rem);
			int plo = (v & dist) ? lo - dist : hi, phi = plo + dist;
			size_t mo = boff(count, p2, lo), mn = boff(count, p2, hi) - mo;
			size_t po = boff(count, p2, plo), pn = boff(count, p2, phi) - po;
			if (xchg(st, buf + mo * esz, mn * esz, peer, buf + po * esz,
				 pn * esz, peer, seg_bytes(c, esz), TAG_AG, NULL, NULL,
				 err) < 0)
				return -1;
			lo = lo < plo ? lo : plo;
			hi = hi > phi ? hi : phi;
		}
	}
	return fold_out(c, buf, count * esz, err);
}

/* ---- native ---- */

static int native_allreduce(gk_comm *c, const void *send, void *recv,
			    size_t count, gk_dtype dt, gk_comm_op op, gk_err *err)
{
	mpi_state *st = c->mpi;
	size_t esz = gk_comm_dt_size(dt), step = INT_MAX / 2;
	for (size_t o = 0; o < count; o += step) {
		size_t m = count - o < step ? count - o : step;
		const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + o * esz;
		MPI_RUN(MPI_Iallreduce(s, (char *)recv + o * esz, (int)m, mpi_dt(dt),
				       mpi_op(st, dt, op), st->comm, &q_),
			"mpi: MPI_Allreduce");
	}
	return 0;
}

/* ---- compressed ring ---- */

typedef struct unpack_ctx {
	float *dst;
	const char *wire;
	gk_comm_compress cz;
	size_t seg_elems, seg_wire, n;
} unpack_ctx;

static void unpack_seg(void *p, size_t off, size_t len)
{
	unpack_ctx *u = p;
	size_t e0 = off / u->seg_wire * u->seg_elems;
	size_t m = u->n - e0 < u->seg_elems ? u->n - e0 : u->seg_elems;
	(void)len;
	gk_comm_unpack(u->dst + e0, u->wire + off, m, u->cz, 1);
}

/*
 * The ring with partial sums packed on the wire and accumulated in f32:
 * each rank packs each block at most once (n-1 blocks in reduce-scatter,
 * its own block for the allgather), so with error feedback its residual
 * holds exactly the error it introduced. The allgather forwards packed
 * blocks unchanged, so every rank unpacks the same bytes. Without gather
 * it stops after the reduce-scatter: block r of buf (blen, boff, or the
 * caller's pieces displ) is rank r's sum, in f32, its own part never
 * packed. An element's sum takes the same path whatever the blocks (from
 * the rank after its owner round to the owner, packed at each hop), so a
 * bucket's pieces (gk_comm_ireduce_scatterv, ZeRO-2) sum each element as
 * the whole buffer's blocks (ZeRO-1) do; only int8's groups of
 * GK_COMM_INT8_GROUP, counted from each block's start, follow the blocks.
 */
static int ring_compressed(gk_comm *c, float *buf, size_t count, const size_t *displ,
			   gk_comm_compress cz, float *residual, int gather,
			   gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank;
#define BO(i) (displ ? displ[i] : boff(count, n, i))
#define BL(i) (displ ? displ[(i) + 1] - displ[i] : blen(count, n, i))
	size_t seg_e = seg_bytes(c, 4) / 4, most = 0;
	seg_e = seg_e < GK_COMM_INT8_GROUP ? GK_COMM_INT8_GROUP : seg_e - seg_e % GK_COMM_INT8_GROUP;
	size_t seg_w = gk_comm_wire_bytes(cz, seg_e);
	for (int i = 0; i < n; i++)
		most = BL(i) > most ? BL(i) : most;
	size_t wmax = gk_comm_wire_bytes(cz, most) + 1;
	char *ws = grow(&st->w1, &st->w1_cap, wmax, err);
	char *wr = ws ? grow(&st->w2, &st->w2_cap, wmax, err) : NULL;
	if (!wr)
		return -1;
	if (n == 1)
		return 0; /* nothing goes on a wire */
	if (residual) {
		for (size_t i = 0; i < count; i++)
			buf[i] += residual[i];
		memset(residual, 0, count * sizeof *residual);
	}
	for (int s = 0; s < n - 1; s++) {
		int sb = mod(r - s - 1, n), rb = mod(r - s - 2, n);
		size_t so = BO(sb), sn = BL(sb);
		size_t ro = BO(rb), rn = BL(rb);
		gk_comm_pack(ws, buf + so, sn, cz, residual ? residual + so : NULL);
		unpack_ctx u = {buf + ro, wr, cz, seg_e, seg_w, rn};
		if (xchg(st, ws, gk_comm_wire_bytes(cz, sn), mod(r + 1, n), wr,
			 gk_comm_wire_bytes(cz, rn), mod(r - 1, n), seg_w, TAG_RS,
			 unpack_seg, &u, err) < 0)
			return -1;
	}
#undef BO
#undef BL
	if (!gather)
		return 0;
	size_t mo = boff(count, n, r), mn = blen(count, n, r);
	gk_comm_pack(ws, buf + mo, mn, cz, residual ? residual + mo : NULL);
	gk_comm_unpack(buf + mo, ws, mn, cz, 0);
	for (int s = 0; s < n - 1; s++) {
		int sb = mod(r - s, n), rb = mod(r - s - 1, n);
		size_t rn = blen(count, n, rb);
		if (xchg(st, ws, gk_comm_wire_bytes(cz, blen(count, n, sb)),
			 mod(r + 1, n), wr, gk_comm_wire_bytes(cz, rn),
			 mod(r - 1, n), seg_w, TAG_AG, NULL, NULL, err) < 0)
			return -1;
		gk_comm_unpack(buf + boff(count, n, rb), wr, rn, cz, 0);
		char *t = ws;
		ws = wr, wr = t;
	}
	return 0;
}

/* ---- the collectives ---- */

static int allreduce(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	size_t esz = gk_comm_dt_size(k->dt), bytes = k->count * esz;
	int divided = 0; /* AVG's division done on the owned blocks (red_seg) */
	if (k->algo == GK_COMM_ALGO_NATIVE && k->compress == GK_COMM_COMPRESS_NONE) {
		if (native_allreduce(c, k->send, k->recv, k->count, k->dt, k->op, err) < 0)
			return -1;
	} else {
		int own = k->algo == GK_COMM_ALGO_RING || k->algo == GK_COMM_ALGO_RABENSEIFNER;
		if (k->send != k->recv && bytes && (!own || k->compress))
			memcpy(k->recv, k->send, bytes);
		int rc;
		if (k->compress != GK_COMM_COMPRESS_NONE)
			rc = ring_compressed(c, k->recv, k->count, NULL, k->compress,
					     k->residual, 1, err);
		else if (k->algo == GK_COMM_ALGO_RING)
			rc = ring_allreduce(c, k->send, k->recv, k->count, k->dt, k->op, err);
		else if (k->algo == GK_COMM_ALGO_RD)
			rc = rd_allreduce(c, k->recv, k->count, k->dt, k->op, err);
		else
			rc = rab_allreduce(c, k->send, k->recv, k->count, k->dt, k->op, err);
		if (rc < 0)
			return -1;
		divided = own && !k->compress && c->world > 1;
	}
	if (k->op == GK_COMM_AVG && !divided)
		gk_comm_avg_cpu(k->recv, k->count, k->dt, c->world);
	return 0;
}

static int reduce_scatter(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank;
	size_t esz = gk_comm_dt_size(k->dt), bytes = k->count * esz;
	if (k->displ) {
		/*
		 * Unequal pieces, in place (gk_comm_ireduce_scatterv): the ring
		 * with the caller's blocks, whatever the algorithm (a piece of
		 * zero elements costs no message, both ends knowing its length),
		 * compressed as the equal blocks' reduce-scatter is.
		 */
		char *buf = (char *)(uintptr_t)k->send;
		if ((k->compress != GK_COMM_COMPRESS_NONE ?
		     ring_compressed(c, (float *)(void *)buf, k->displ[n], k->displ, k->compress,
				     k->residual, 0, err) :
		     ring_rsv(c, k->send, buf, k->displ[n], k->displ, k->dt, k->op, 0, err)) < 0)
			return -1;
		if (k->op == GK_COMM_AVG)
			gk_comm_avg_cpu(k->recv, k->count, k->dt, n);
		return 0;
	}
	if (k->algo == GK_COMM_ALGO_NATIVE) {
		if (k->count > INT_MAX)
			return gk_errf(err, "mpi: reduce-scatter of %zu elements per rank: more than MPI's int count",
				       k->count);
		const void *s = k->send == (char *)k->recv - (size_t)r * bytes ?
			MPI_IN_PLACE : k->send;
		if (s == MPI_IN_PLACE) {
			/* MPI's in-place form keeps the result at the start. */
			MPI_RUN(MPI_Ireduce_scatter_block(MPI_IN_PLACE, (void *)k->send,
							  (int)k->count, mpi_dt(k->dt),
							  mpi_op(st, k->dt, k->op), st->comm,
							  &q_),
				"mpi: MPI_Reduce_scatter_block");
			memmove(k->recv, k->send, bytes);
		} else {
			MPI_RUN(MPI_Ireduce_scatter_block(k->send, k->recv, (int)k->count,
							  mpi_dt(k->dt), mpi_op(st, k->dt, k->op),
							  st->comm, &q_),
				"mpi: MPI_Reduce_scatter_block");
		}
	} else {
		/*
		 * The rings reduce in the buffer they are given. In place (recv
		 * is this rank's slice of send, as ZeRO-1 calls it every step)
		 * that is send itself, whose other slices are left undefined
		 * as MPI's and NCCL's in-place forms leave them, and the result
		 * lands where it belongs; out of place, a copy of send.
		 */
		size_t total = bytes * (size_t)n;
		int in_place = (const char *)k->send + (size_t)r * bytes == (const char *)k->recv;
		char *work = in_place ? (char *)(uintptr_t)k->send : malloc(total + 1);
		if (!work)
			return gk_errf(err, "mpi: out of memory for a %zu-byte buffer", total);
		if (!in_place)
			memcpy(work, k->send, total);
		int rc = k->compress != GK_COMM_COMPRESS_NONE ?
			ring_compressed(c, (float *)(void *)work, k->count * (size_t)n, NULL,
					k->compress, k->residual, 0, err) :
			ring_rs(c, work, work, k->count * (size_t)n, k->dt, k->op, 0, err);
		if (!in_place) {
			if (rc == 0)
				memcpy(k->recv, work + (size_t)r * bytes, bytes);
			free(work);
		}
		if (rc < 0)
			return -1;
	}
	if (k->op == GK_COMM_AVG)
		gk_comm_avg_cpu(k->recv, k->count, k->dt, n);
	return 0;
}

static int allgather(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank;
	size_t esz = gk_comm_dt_size(k->dt), bytes = k->count * esz;
	char *mine = (char *)k->recv + (size_t)r * bytes;
	/* unequal pieces, in place (gk_comm_iallgatherv): the ring with the
	 * caller's blocks, whatever the algorithm */
	if (k->displ)
		return ring_agv(c, k->recv, k->displ[n], k->displ, esz, err);
	if (k->algo == GK_COMM_ALGO_NATIVE) {
		if (k->count > INT_MAX / 2)
			return gk_errf(err, "mpi: allgather of %zu elements per rank: more than MPI's int count",
				       k->count);
		const void *s = k->send == mine ? MPI_IN_PLACE : k->send;
		MPI_RUN(MPI_Iallgather(s, (int)bytes, MPI_BYTE, k->recv, (int)bytes,
				       MPI_BYTE, st->comm, &q_),
			"mpi: MPI_Allgather");
		return 0;
	}
	if (k->send != mine && bytes)
		memcpy(mine, k->send, bytes);
	return ring_ag(c, k->recv, k->count * (size_t)n, esz, err);
}

static int broadcast(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	mpi_state *st = c->mpi;
	size_t bytes = k->count * gk_comm_dt_size(k->dt);
	if (c->rank == k->root && k->send != k->recv && bytes)
		memcpy(k->recv, k->send, bytes);
	for (size_t o = 0; o < bytes; o += MAX_MSG) {
		size_t m = bytes - o < MAX_MSG ? bytes - o : MAX_MSG;
		MPI_RUN(MPI_Ibcast((char *)k->recv + o, (int)m, MPI_BYTE, k->root,
				   st->comm, &q_),
			"mpi: MPI_Bcast");
	}
	return 0;
}

/*
 * Reduce to the root. ring: the ring's reduce-scatter (into the root's
 * recv, or scratch elsewhere), then each rank sends its reduced block to
 * the root: (n-1)/n of the data in and out of each rank, as the
 * reduce-scatter alone, without libnbc's schedule that an MPI_Ireduce
 * waits on. native: MPI's own (counts are ints: pieces of at most
 * MAX_MSG bytes). AVG divides at the root, the only rank with a result.
 */
static int reduce(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	mpi_state *st = c->mpi;
	int n = c->world, r = c->rank;
	size_t esz = gk_comm_dt_size(k->dt), per = MAX_MSG / esz;
	int root = r == k->root;
	if (k->algo == GK_COMM_ALGO_RING) {
		char *buf = root ? k->recv : grow(&st->work, &st->work_cap, k->count * esz + 1, err);
		if (n == 1 && k->send != k->recv && k->count)
			memcpy(k->recv, k->send, k->count * esz);
		if (!buf || ring_rs(c, k->send, buf, k->count, k->dt, k->op, 0, err) < 0)
			return -1;
		if (!root && send_all(st, buf + boff(k->count, n, r) * esz,
				      blen(k->count, n, r) * esz, k->root, TAG_GATHER, err) < 0)
			return -1;
		for (int q = 0; root && q < n; q++)
			if (q != r && recv_all(st, buf + boff(k->count, n, q) * esz,
					       blen(k->count, n, q) * esz, q, TAG_GATHER, err) < 0)
				return -1;
		if (root && k->op == GK_COMM_AVG)
			gk_comm_avg_cpu(k->recv, k->count, k->dt, n);
		return 0;
	}
	for (size_t o = 0; o < k->count; o += per) {
		size_t m = k->count - o < per ? k->count - o : per;
		const void *s = root && k->send == k->recv ? MPI_IN_PLACE :
			(const void *)((const char *)k->send + o * esz);
		MPI_RUN(MPI_Ireduce(s, (char *)k->recv + o * esz, (int)m, mpi_dt(k->dt),
				    mpi_op(st, k->dt, k->op), k->root, st->comm, &q_),
			"mpi: MPI_Reduce");
	}
	if (root && k->op == GK_COMM_AVG)
		gk_comm_avg_cpu(k->recv, k->count, k->dt, c->world);
	return 0;
}

int gk_comm_mpi_run(gk_comm *c, const gk_comm_call *k, gk_err *err)
{
	static const char *const names[] = {
		[GK_COMM_ALLREDUCE] = "allreduce",
		[GK_COMM_REDUCE_SCATTER] = "reduce-scatter",
		[GK_COMM_ALLGATHER] = "allgather",
		[GK_COMM_BROADCAST] = "broadcast",
		[GK_COMM_REDUCE] = "reduce",
	};
	mpi_state *st = c->mpi;
	st->op = names[k->coll];
	switch (k->coll) {
	case GK_COMM_ALLREDUCE: return allreduce(c, k, err);
	case GK_COMM_REDUCE_SCATTER: return reduce_scatter(c, k, err);
	case GK_COMM_ALLGATHER: return allgather(c, k, err);
	case GK_COMM_REDUCE: return reduce(c, k, err);
	default: return broadcast(c, k, err);
	}
}

int gk_comm_mpi_barrier(gk_comm *c, gk_err *err)
{
	mpi_state *st = c->mpi;
	st->op = "barrier";
	MPI_RUN(MPI_Ibarrier(st->comm, &q_), "mpi: MPI_Barrier");
	return 0;
}

int gk_comm_mpi_host_allreduce_f64(gk_comm *c, double *v, size_t n,
				   gk_comm_op op, gk_err *err)
{
	mpi_state *st = c->mpi;
	if (n > INT_MAX)
		return gk_errf(err, "mpi: host allreduce of %zu values: too many", n);
	st->op = "allreduce";
	MPI_RUN(MPI_Iallreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE,
			       mpi_op(st, GK_DT_F64, op), st->comm, &q_),
		"mpi: MPI_Allreduce");
	if (op == GK_COMM_AVG)
		for (size_t i = 0; i < n; i++)
			v[i] /= c->world;
	return 0;
}

int gk_comm_mpi_bcast_bytes(gk_comm *c, void *buf, size_t n, gk_err *err)
{
	mpi_state *st = c->mpi;
	st->op = "broadcast";
	MPI_RUN(MPI_Ibcast(buf, (int)n, MPI_BYTE, 0, st->comm, &q_), "mpi: MPI_Bcast");
	return 0;
}

/* ---- for p2p_mpi.c ---- */

void gk_comm_mpi_handle(gk_comm *c, void *out)
{
	mpi_state *st = c->mpi;
	*(MPI_Comm *)out = st->comm;
}
