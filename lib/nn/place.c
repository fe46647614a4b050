/*
 * place.c - where the ranks run: the trainer's placement and --threads'
 * default, from every rank's host and CPU set.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/train_internal.h"

/*
 * Where the ranks run, from every rank's host and CPU set (one
 * allgather): t->place, and --threads' default, this rank's share of
 * its CPUs. Ranks share CPUs when they run on one kernel (its boot id:
 * containers of one machine share it, whatever their host names) and
 * their sets meet; they are on one host, for --overlap, when they share
 * the kernel and the host name (network namespaces given names of their
 * own stand for hosts in the tests). A host name alone would merge
 * machines that share one, as containers started from one image may.
 * A launcher that binds each rank to its own cores (mpirun
 * with 2 ranks, srun --cpu-bind) gives every rank its set alone; mpirun
 * binds to a whole socket beyond 2 ranks, and --bind-to none leaves
 * every rank all of the host, so a set can be shared by several ranks
 * of the host, and each taking all of it would put several threads on
 * every CPU (2 ranks of 2 threads on 2 CPUs: half the speed of 1 each).
 */
typedef struct rank_place {
	uint64_t kernel;                       /* hash of the boot id */
	uint64_t host;                         /* hash of boot id and host name */
	uint64_t cgroup;                       /* its memory cgroup (gk_host_mem) */
	int32_t threads;                       /* --threads, 0: the default */
	uint32_t cpus[CPU_SETSIZE / 32];       /* the CPU set, as bits */
	char name[GK_NN_HOST_MAX];             /* the host name, for reports */
} rank_place;

static int set_overlaps(const rank_place *a, const rank_place *b)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(a->cpus); i++)
		if (a->cpus[i] & b->cpus[i])
			return 1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

int gk_nn_tr_place(gk_nn_trainer *t, gk_err *err)
{
	rank_place me;
	memset(&me, 0, sizeof(me)); /* padding too: the bytes go to every rank */
	me.threads = t->o.threads > 0 ? t->o.threads : 0;
	/* "<boot id>\n<host name>"; without a boot id the host name stands
	 * for the kernel too */
	char id[512] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (!fgets(id, 64, f))
			id[0] = '\0';
		fclose(f);
	}
	size_t n = strcspn(id, "\n");
	id[n] = '\n';
	gethostname(id + n + 1, sizeof(id) - n - 2);
	snprintf(me.name, sizeof(me.name), "%s", id + n + 1);
	me.host = gk_xxh3(id, strlen(id));
	me.kernel = n > 0 ? gk_xxh3(id, n) : me.host;
	gk_host_mem hm;
	gk_host_mem_read("", &hm);
	me.cgroup = hm.cgroup_id;
	cpu_set_t set;
	gk_cpu_set(&set);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			me.cpus[c / 32] |= 1u << (c % 32);
	rank_place *all = calloc((size_t)t->world, sizeof(*all));
	if (!all)
		return gk_err_sys(err, ENOMEM, "placement");
	if (gk_nn_tr_gather(t, &me, all, sizeof(me), err) < 0) {
		free(all);
		return -1;
	}
	/*
	 * The ranks of this kernel whose sets meet this one's, and their
	 * threads: those given, and how many take the default share. (A
	 * cgroup's CPU quota caps the count, gk_cpus_usable: the ranks of
	 * one container share its quota as they share its CPUs.)
	 */
	gk_nn_placement *p = &t->place;
	memset(p, 0, sizeof(*p));
	t->kernel = me.kernel;
	p->cpus = gk_cpus_usable(&p->quota);
	int given = 0, defaults = 0;
	for (int r = 0; r < t->world; r++) {
		const rank_place *q = &all[r];
		/* one kernel's ranks share its memory; a cgroup's, its limit */
		p->host_ranks += q->kernel == me.kernel;
		p->cgroup_ranks += q->kernel == me.kernel && q->cgroup == me.cgroup;
		if (q->kernel == me.kernel && set_overlaps(q, &me)) {
			p->sharing++;
			given += q->threads;
			defaults += q->threads == 0;
		}
	}
	p->share = p->cpus / p->sharing; /* this rank is one of them */
	if (p->share < 1)
		p->share = 1;
	if (t->o.threads <= 0)
		t->o.threads = p->share;
	int busy = given + defaults * p->share;
	p->spare = p->cpus > busy ? p->cpus - busy : 0;
	/* the hosts: distinct ones, sorted (a world may be 100,000 ranks) */
	uint64_t *hs = malloc((size_t)t->world * sizeof(*hs));
	if (!hs) {
		free(all);
		return gk_err_sys(err, ENOMEM, "placement");
	}
	/*
	 * Tensor groups (the grid's tp consecutive ranks) on more than one
	 * host: every layer's allreduces of a step would cross the network.
	 */
	int tp = t->grid.tp > 1 ? t->grid.tp : 1;
	for (int g = 0; tp > 1 && g + tp <= t->world; g += tp)
		for (int r = g + 1; r < g + tp; r++)
			if (all[r].host != all[g].host) {
				p->tp_span++;
				break;
			}
	for (int r = 0; r < t->world; r++)
		hs[r] = all[r].host;
	qsort(hs, (size_t)t->world, sizeof(*hs), cmp_u64);
	for (int r = 0; r < t->world; r++)
		p->hosts += r == 0 || hs[r] != hs[r - 1];
	free(hs);
	/* the host names, kept for the straggler reports (straggler.c) */
	if (t->o.straggler_every > 0 && t->world > 1) {
		if (!(t->hosts = calloc((size_t)t->world, sizeof(*t->hosts)))) {
			free(all);
			return gk_err_sys(err, ENOMEM, "placement");
		}
		for (int r = 0; r < t->world; r++)
			snprintf(t->hosts[r], sizeof(t->hosts[r]), "%.*s", GK_NN_HOST_MAX - 1,
				 all[r].name);
	}
	free(all);
	return 0;
}
