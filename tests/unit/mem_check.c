/* mem_check.c - the decision of gk_mem_room_check (each limit, the ranks
 * that share it, the margins, the tightest one named), and gk_mem_fit's
 * bounds to what a trainer can run. */
#include <stdio.h>

#include "mem/mem.h"
#include "tap.h"

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)

static gk_mem_room check(const gk_mem_room_req *q, int *fits)
{
	gk_mem_room r;
	*fits = gk_mem_room_check(q, &r);
	return r;
}

int main(void)
{
	int fits;
	gk_mem_room r;

	/* no limit readable: fits */
	gk_mem_room_req q = {.host_need = 100 * GIB, .host_ranks = 2, .cgroup_ranks = 2,
			     .threads = 4};
	r = check(&q, &fits);
	ok(fits && r.limit == GK_MEM_LIMIT_NONE, "no limits: fits");

	/* the first-hour case: 2 ranks of 12 GiB on a machine with 22 GiB available */
	q = (gk_mem_room_req){.host_need = 12 * GIB, .host_ranks = 2, .cgroup_ranks = 2,
			      .threads = 1, .host.available = 22 * GIB};
	r = check(&q, &fits);
	ok(!fits && r.limit == GK_MEM_LIMIT_AVAILABLE && r.ranks == 2 &&
		   r.need == 2 * (12 * GIB + GK_MEM_RSS_MARGIN) && r.avail == 22 * GIB,
	   "2 x 12 GiB over 22 GiB MemAvailable: refused, 2 ranks, margins counted");
	q.host_ranks = 1;
	r = check(&q, &fits);
	ok(fits, "1 rank of 12 GiB in 22 GiB: fits");

	/* the cgroup: its room is the limit less what it uses besides cache */
	q = (gk_mem_room_req){.host_need = 880 * MIB, .host_ranks = 4, .cgroup_ranks = 2,
			      .threads = 1, .host.available = 64 * GIB,
			      .host.cgroup_max = 4 * GIB, .host.cgroup_used = 2 * GIB};
	r = check(&q, &fits);
	ok(fits, "2 ranks of 880 MiB (+128 MiB) in a cgroup with 2 GiB of room: fits");
	q.host.cgroup_used = 2 * GIB + 100 * MIB;
	r = check(&q, &fits);
	ok(!fits && r.limit == GK_MEM_LIMIT_CGROUP && r.ranks == 2 &&
		   r.avail == 2 * GIB - 100 * MIB,
	   "... with 100 MiB more used: the cgroup refuses, 2 ranks share it");

	/* RLIMIT_AS: each process's own, less what is mapped, with the margin */
	uint64_t m1 = gk_mem_as_margin(1), m8 = gk_mem_as_margin(8);
	ok(m1 == 280 * MIB && m8 == 8 * 136 * MIB + 144 * MIB,
	   "address-space margin: 136 MiB a thread + 144 MiB (1: %llu MiB, 8: %llu MiB)",
	   (unsigned long long)(m1 / MIB), (unsigned long long)(m8 / MIB));
	q = (gk_mem_room_req){.host_need = 1 * GIB, .host_ranks = 8, .cgroup_ranks = 8,
			      .threads = 1, .host.as_max = 3000000ULL * 1024,
			      .host.as_used = 200 * MIB};
	r = check(&q, &fits);
	ok(fits, "1 GiB + margin under ulimit -v 3000000 with 200 MiB mapped: fits");
	q.host_need = 3000000ULL * 1024 - 200 * MIB - m1 + 1;
	r = check(&q, &fits);
	ok(!fits && r.limit == GK_MEM_LIMIT_AS && r.ranks == 1 && r.need == q.host_need + m1,
	   "one byte over ulimit -v with the margin: RLIMIT_AS refuses, one rank");
	q.host_need -= 1;
	r = check(&q, &fits);
	ok(fits, "exactly at the limit: fits");

	/* the device: free memory shared by the ranks on it, no margin */
	q = (gk_mem_room_req){.host_need = 1 * GIB, .dev_need = 30 * GIB, .dev_free = 79 * GIB,
			      .dev_ranks = 2, .threads = 1};
	r = check(&q, &fits);
	ok(fits, "2 ranks of 30 GiB on an 80 GiB device: fits");
	q.dev_ranks = 3;
	r = check(&q, &fits);
	ok(!fits && r.limit == GK_MEM_LIMIT_DEVICE && r.ranks == 3 && r.need == 90 * GIB,
	   "3 ranks of 30 GiB: the device refuses");

	/* --mem-limit: the rank's own accounting, no margin, the device's on a GPU */
	q = (gk_mem_room_req){.host_need = 12 * MIB, .host_ranks = 4, .cgroup_ranks = 4,
			      .threads = 1, .host.available = 64 * GIB, .rank_limit = 12 * MIB};
	r = check(&q, &fits);
	ok(fits, "--mem-limit 12M, an accounting of exactly 12 MiB: fits (no margin)");
	q.host_need += 1;
	r = check(&q, &fits);
	ok(!fits && r.limit == GK_MEM_LIMIT_RANK && r.ranks == 1 && r.need == 12 * MIB + 1 &&
		   r.avail == 12 * MIB,
	   "one byte more: --mem-limit refuses, this rank alone");
	q.dev_need = 2 * MIB, q.dev_free = 80 * GIB, q.dev_ranks = 1;
	r = check(&q, &fits);
	ok(fits, "on a GPU it bounds the device's 2 MiB, not the host's");
	is_str(gk_mem_limit_name(GK_MEM_LIMIT_RANK), "--mem-limit", "its name");

	/* several exceeded: the tightest (need over available) is named */
	q = (gk_mem_room_req){.host_need = 10 * GIB, .host_ranks = 1, .cgroup_ranks = 1,
			      .threads = 1, .host.available = 9 * GIB,
			      .host.as_max = 4 * GIB};
	r = check(&q, &fits);
	ok(!fits && r.limit == GK_MEM_LIMIT_AS, "RLIMIT_AS 4 GiB is tighter than 9 GiB available");
	is_str(gk_mem_limit_name(GK_MEM_LIMIT_AS), "RLIMIT_AS (ulimit -v)", "its name");

	/* the fit search, bounded as gpu-train bounds it */
	gk_mem_model m = {.layers = 12, .hidden = 768, .heads = 12, .vocab = 50257,
			  .positions = 1024};
	gk_err err;
	if (gk_mem_model_from_shape(&m, GK_MEM_ARCH_GPT2, 1, 1024, &err) < 0) {
		ok(0, "model: %s", err.msg);
		return done_testing();
	}
	gk_mem_run base;
	gk_mem_run_default(&base);
	base.precision = GK_DT_F32;
	base.dp = 8;
	base.micro_batch = 8;
	gk_mem_cand c[64];
	int n, tried, fits_n, bad = 0, tp = 0;
	gk_mem_fit_req open = {.capacity = 6 * GIB};
	if (gk_mem_fit(&m, &base, &open, c, 64, &n, &tried, &fits_n, &err) == 0)
		for (int i = 0; i < n; i++)
			tp += c[i].run.tp > 1 || c[i].run.pp > 1 || c[i].run.zero > 1 ||
			      c[i].run.recompute == GK_MEM_RC_SELECTIVE;
	ok(n > 0 && tp > 0, "unbounded: %d of %d candidates use TP, PP, ZeRO-2/3 or selective",
	   tp, n);
	gk_mem_fit_req bounded = {.capacity = 6 * GIB, .tp_max = 1, .pp_max = 1, .zero_max = 1,
				  .recompute = 1u << GK_MEM_RC_NONE | 1u << GK_MEM_RC_FULL};
	int nb = 0;
	if (gk_mem_fit(&m, &base, &bounded, c, 64, &nb, &tried, &fits_n, &err) == 0)
		for (int i = 0; i < nb; i++)
			bad += c[i].run.tp != 1 || c[i].run.pp != 1 || c[i].run.zero > 1 ||
			       c[i].run.recompute == GK_MEM_RC_SELECTIVE || c[i].total > 6 * GIB ||
			       c[i].run.dp * c[i].run.micro_batch * c[i].run.grad_accum != 64;
	ok(nb > 0 && bad == 0, "bounded: %d candidates, all DP with ZeRO 0/1, none or full "
	   "recomputation, 64 sequences a step, within 6 GiB (%d not)", nb, bad);
	return done_testing();
}
