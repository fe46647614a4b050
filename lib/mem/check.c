/*
 * check.c - whether a run's accounting fits the machine it is about to
 * allocate on: the limits a process meets before the kernel's OOM killer
 * or a failed mmap does (RLIMIT_AS, the memory cgroup, MemAvailable, a
 * device's free memory), each divided among the ranks that share it.
 */
#include "mem/mem.h"

#define MIB (1ULL << 20)

const char *gk_mem_limit_name(gk_mem_limit l)
{
	switch (l) {
	case GK_MEM_LIMIT_AS:
		return "RLIMIT_AS (ulimit -v)";
	case GK_MEM_LIMIT_CGROUP:
		return "the cgroup's memory limit";
	case GK_MEM_LIMIT_AVAILABLE:
		return "MemAvailable";
	case GK_MEM_LIMIT_DEVICE:
		return "the device's free memory";
	case GK_MEM_LIMIT_RANK:
		return "--mem-limit";
	default:
		return "no limit";
	}
}

uint64_t gk_mem_as_margin(int threads)
{
	uint64_t n = threads > 0 ? (uint64_t)threads : 1;
	/* each compute thread: its stack, its malloc arena, its OpenBLAS
	 * buffer; the data prefetch and checkpoint writer threads: a stack
	 * and an arena each */
	return n * (8 + 64 + 64) * MIB + 2 * (8 + 64) * MIB;
}

/* need over avail, as a ratio that orders the limits exceeded */
static void consider(gk_mem_room *out, double *worst, gk_mem_limit l, uint64_t need,
		     uint64_t avail, int ranks)
{
	if (need <= avail)
		return;
	double r = avail ? (double)need / (double)avail : 1e300;
	if (out->limit != GK_MEM_LIMIT_NONE && r <= *worst)
		return;
	*worst = r;
	out->limit = l;
	out->need = need;
	out->avail = avail;
	out->ranks = ranks;
}

int gk_mem_room_check(const gk_mem_room_req *q, gk_mem_room *out)
{
	*out = (gk_mem_room){.limit = GK_MEM_LIMIT_NONE};
	double worst = 0;
	const gk_host_mem *h = &q->host;
	uint64_t rss = q->host_need + GK_MEM_RSS_MARGIN;
	if (h->as_max) {
		uint64_t room = h->as_max > h->as_used ? h->as_max - h->as_used : 0;
		consider(out, &worst, GK_MEM_LIMIT_AS, q->host_need + gk_mem_as_margin(q->threads),
			 room, 1);
	}
	if (h->cgroup_max) {
		int n = q->cgroup_ranks > 0 ? q->cgroup_ranks : 1;
		uint64_t room = h->cgroup_max > h->cgroup_used ? h->cgroup_max - h->cgroup_used : 0;
		consider(out, &worst, GK_MEM_LIMIT_CGROUP, rss * (uint64_t)n, room, n);
	}
	if (h->available) {
		int n = q->host_ranks > 0 ? q->host_ranks : 1;
		consider(out, &worst, GK_MEM_LIMIT_AVAILABLE, rss * (uint64_t)n, h->available, n);
	}
	if (q->dev_need) {
		int n = q->dev_ranks > 0 ? q->dev_ranks : 1;
		consider(out, &worst, GK_MEM_LIMIT_DEVICE, q->dev_need * (uint64_t)n, q->dev_free, n);
	}
	if (q->rank_limit)
		consider(out, &worst, GK_MEM_LIMIT_RANK, q->dev_need ? q->dev_need : q->host_need,
			 q->rank_limit, 1);
	return out->limit == GK_MEM_LIMIT_NONE;
}
