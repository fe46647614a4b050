/*
 * bind.c - where to put local ranks, and the warnings a user should see
 * before launching.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo_impl.h"

/* The NIC nearest to GPU g: RDMA NICs first when any exist, ties to the least used. */
static int nearest_nic(const gk_topo *t, int g, const int *used, int *link)
{
	int any_rdma = 0, best = -1, bl = GK_LINK_SYS + 1;
	for (int k = t->ngpus; k < t->ngpus + t->nnics; k++)
		any_rdma |= t->dev[k].rdma;
	for (int k = t->ngpus; k < t->ngpus + t->nnics; k++) {
		if (any_rdma && !t->dev[k].rdma)
			continue;
		int l = gk_topo_pci_link(t, g, k);
		if (l < bl || (l == bl && used && used[k - t->ngpus] < used[best - t->ngpus]))
			best = k, bl = l;
	}
	if (link)
		*link = bl;
	return best;
}

/* The NIC for a CPU-only rank: one local to its NUMA node, else any. */
static int numa_nic(const gk_topo *t, int numa, const int *used)
{
	int any_rdma = 0, best = -1, bscore = 1 << 30;
	for (int k = t->ngpus; k < t->ngpus + t->nnics; k++)
		any_rdma |= t->dev[k].rdma;
	for (int k = t->ngpus; k < t->ngpus + t->nnics; k++) {
		if (any_rdma && !t->dev[k].rdma)
			continue;
		int score = (t->dev[k].numa_first == numa ? 0 : 1000) + used[k - t->ngpus];
		if (score < bscore)
			best = k, bscore = score;
	}
	return best;
}

int gk_topo_binding(const gk_topo *t, int nranks, gk_topo_bind **out, gk_err *err)
{
	if (nranks < 1)
		return gk_errf(err, "binding: %d ranks per node", nranks);
	/* Without GPUs, ranks go to the NUMA nodes that have CPUs. */
	int nplaces = t->ngpus, *place = NULL;
	if (!nplaces) {
		place = calloc((size_t)t->nnuma + 1, sizeof(int));
		if (!place)
			return gk_err_sys(err, ENOMEM, "binding");
		for (int i = 0; i < t->nnuma; i++)
			if (t->numa[i].cpus[0] && !t->numa[i].gpu_memory)
				place[nplaces++] = i;
	}
	gk_topo_bind *b = calloc((size_t)nranks, sizeof(*b));
	int *used = calloc((size_t)t->nnics + 1, sizeof(int));
	char (*loc)[256] = calloc((size_t)nranks, sizeof(*loc));
	if (!b || !used || !loc) {
		free(b), free(used), free(loc), free(place);
		return gk_err_sys(err, ENOMEM, "binding");
	}
	for (int r = 0; r < nranks; r++) {
		gk_topo_bind *x = &b[r];
		x->rank = r;
		x->gpu = x->nic = x->numa = -1;
		int p = nplaces ? (int)((long long)r * nplaces / nranks) : -1;
		if (t->ngpus) {
			const gk_topo_dev *g = &t->dev[p];
			x->gpu = p;
			x->numa = g->local_whole && t->nnuma > 1 ? -1 : g->numa_first;
			snprintf(loc[r], sizeof(loc[r]), "%s", g->local_whole ? "" : g->cpus);
			x->nic = nearest_nic(t, p, used, NULL);
		} else if (p >= 0) {
			x->numa = t->numa[place[p]].os_index;
			snprintf(loc[r], sizeof(loc[r]), "%s", t->numa[place[p]].cpus);
			x->nic = numa_nic(t, x->numa, used);
		} else {
			x->nic = numa_nic(t, -1, used);
		}
		if (x->nic >= 0)
			used[x->nic - t->ngpus]++;
		/* A locality with no allowed CPU (cgroup) means: anywhere allowed. */
		hwloc_obj_t *c;
		int nc = gk__topo_cores(t, loc[r], &c);
		free(c);
		if (nc == 0)
			loc[r][0] = '\0';
	}
	/*
	 * Ranks with the same locality split its cores into contiguous runs.
	 * Narrow localities choose first, so a GPU local to the whole machine
	 * takes the cores the socket-local GPUs left.
	 */
	int rc = 0, *order = calloc((size_t)nranks, sizeof(int)), *ncores = calloc((size_t)nranks, sizeof(int));
	hwloc_bitmap_t taken = hwloc_bitmap_alloc();
	if (!order || !ncores || !taken)
		rc = gk_err_sys(err, ENOMEM, "binding");
	for (int r = 0; r < nranks && rc == 0; r++) {
		hwloc_obj_t *c;
		ncores[r] = gk__topo_cores(t, loc[r], &c);
		free(c);
		order[r] = r;
	}
	for (int i = 1; i < nranks && rc == 0; i++) /* stable: keeps rank order within a locality */
		for (int k = i; k > 0 && ncores[order[k - 1]] > ncores[order[k]]; k--) {
			int tmp = order[k];
			order[k] = order[k - 1], order[k - 1] = tmp;
		}
	for (int i = 0; i < nranks && rc == 0;) {
		int r0 = order[i], m = 0;
		for (int q = 0; q < nranks; q++)
			m += strcmp(loc[q], loc[r0]) == 0;
		hwloc_obj_t *all, *free_cores;
		int na = gk__topo_cores(t, loc[r0], &all), nf = 0;
		free_cores = calloc((size_t)na + 1, sizeof(*free_cores));
		if (na < 0 || !free_cores) {
			free(all), free(free_cores);
			rc = gk_err_sys(err, ENOMEM, "binding");
			break;
		}
		for (int k = 0; k < na; k++)
			if (!hwloc_bitmap_isset(taken, all[k]->logical_index))
				free_cores[nf++] = all[k];
		/* Not enough free cores: share the locality's cores instead. */
		int shared = nf < m;
		hwloc_obj_t *pool = shared ? all : free_cores;
		int np = shared ? na : nf;
		for (int j = 0; j < m; j++, i++) {
			gk_topo_bind *x = &b[order[i]];
			int lo, hi;
			if (!shared) {
				lo = (int)((long long)j * np / m);
				hi = (int)((long long)(j + 1) * np / m);
			} else {
				lo = np ? j % np : 0, hi = np ? lo + 1 : 0;
				x->shared = 1;
			}
			for (int k = lo; k < hi; k++)
				hwloc_bitmap_set(taken, pool[k]->logical_index);
			if (hi > lo)
				gk__topo_core_lists(t, pool, lo, hi, x->cpus, sizeof(x->cpus),
						    x->cores, sizeof(x->cores));
		}
		free(all), free(free_cores);
	}
	free(order), free(ncores);
	hwloc_bitmap_free(taken);
	free(used), free(loc), free(place);
	if (rc < 0) {
		free(b);
		return -1;
	}
	*out = b;
	return 0;
}

int gk_topo_default_ranks(const gk_topo *t)
{
	int n = t->ngpus;
	for (int i = 0; !t->ngpus && i < t->nnuma; i++)
		n += !t->numa[i].gpu_memory && t->numa[i].cpus[0];
	return n ? n : 1;
}

int gk_topo_warnings(const gk_topo *t, gk_strlist *out, gk_err *err)
{
	char msg[1024];
	int normal = 0;
	for (int i = 0; i < t->nnuma; i++)
		normal += !t->numa[i].gpu_memory && t->numa[i].cpus[0];
	for (int g = 0; g < t->ngpus; g++) {
		const gk_topo_dev *d = &t->dev[g];
		if (normal > 1 && (d->local_whole || !d->numa[0])) {
			snprintf(msg, sizeof(msg), "%s (%s) has no NUMA locality: %s",
				 d->label, d->busid, d->local_whole ?
				 "hwloc attaches it to the whole machine, so no CPU binding is better than another" :
				 "no NUMA node is local to its CPUs");
			if (gk_strlist_push(out, msg, err) < 0)
				return -1;
		}
		if (d->allowed_none && d->cpus[0]) {
			snprintf(msg, sizeof(msg), "%s (%s): none of its local CPUs (%s) may be used "
				 "here (allowed: %s)", d->label, d->busid, d->cpus, t->allowed);
			if (gk_strlist_push(out, msg, err) < 0)
				return -1;
		}
		int l;
		int k = nearest_nic(t, g, NULL, &l);
		if (k >= 0 && l == GK_LINK_SYS) {
			snprintf(msg, sizeof(msg), "%s (%s): its nearest NIC, %s (%s), is SYS: "
				 "network traffic crosses the inter-socket link",
				 d->label, d->busid, t->dev[k].label, t->dev[k].name);
			if (gk_strlist_push(out, msg, err) < 0)
				return -1;
		}
	}
	/* GPUs per NUMA node, over the nodes that have CPUs. */
	if (t->ngpus > 0 && normal > 1) {
		int lo = 1 << 30, hi = 0, loid = -1, hiid = -1;
		for (int i = 0; i < t->nnuma; i++) {
			if (t->numa[i].gpu_memory || !t->numa[i].cpus[0])
				continue;
			int c = 0;
			for (int g = 0; g < t->ngpus; g++)
				c += !t->dev[g].local_whole && t->dev[g].numa_first == t->numa[i].os_index;
			if (c < lo)
				lo = c, loid = t->numa[i].os_index;
			if (c > hi)
				hi = c, hiid = t->numa[i].os_index;
		}
		/* As even as possible means counts differ by at most one, and only when they must. */
		if (hi - lo > (t->ngpus % normal ? 1 : 0)) {
			snprintf(msg, sizeof(msg), "GPUs are split unevenly across NUMA nodes: %d on "
				 "node %d, %d on node %d; ranks on the crowded node share its memory "
				 "bandwidth and cores", hi, hiid, lo, loid);
			if (gk_strlist_push(out, msg, err) < 0)
				return -1;
		}
	}
	return 0;
}
