/*
 * topo_classify.c - link classification, NVLink counts, lookup and the
 * binding on hand-written hwloc XML fixtures, against tables derived by
 * hand from the PCIe trees drawn in each fixture's comment.
 */
#include <stdlib.h>

#include "topo/topo.h"
#include "tap.h"

#define DATA "tests/data/topo/"

/*
 * two-socket-switches.xml: rows/columns GPU0-4 then NIC0-3. GPU0/GPU1/NIC0
 * hang from one switch (PIX), GPU2 from a switch below it (PXB), NIC1 from
 * another root port of the same host bridge (PHB), NIC2 from another host
 * bridge of socket 0 (NODE); GPU3/GPU4/NIC3 share a switch on socket 1.
 */
static const char *want[9][9] = {
	{"X", "NV4", "NV2", "SYS", "SYS", "PIX", "PHB", "NODE", "SYS"},
	{"NV4", "X", "PXB", "SYS", "SYS", "PIX", "PHB", "NODE", "SYS"},
	{"NV2", "PXB", "X", "SYS", "SYS", "PXB", "PHB", "NODE", "SYS"},
	{"SYS", "SYS", "SYS", "X", "NV12", "SYS", "SYS", "SYS", "PIX"},
	{"SYS", "SYS", "SYS", "NV12", "X", "SYS", "SYS", "SYS", "PIX"},
	{"PIX", "PIX", "PXB", "SYS", "SYS", "X", "PHB", "NODE", "SYS"},
	{"PHB", "PHB", "PHB", "SYS", "SYS", "PHB", "X", "NODE", "SYS"},
	{"NODE", "NODE", "NODE", "SYS", "SYS", "NODE", "NODE", "X", "SYS"},
	{"SYS", "SYS", "SYS", "PIX", "PIX", "SYS", "SYS", "SYS", "X"},
};
/* Without NVLink, the PCIe path of the NVLinked pairs. */
static const char *want_pci[3][2] = {{"GPU1", "PIX"}, {"GPU2", "PXB"}, {"GPU4", "PIX"}};

static void test_matrix(void)
{
	gk_topo *t;
	gk_err err;
	if (!ok(gk_topo_load(&t, DATA "two-socket-switches.xml", &err) == 0, "load fixture")) {
		diag("%s", err.msg);
		return;
	}
	is_int(gk_topo_ngpus(t), 5, "5 GPUs");
	is_int(gk_topo_nnics(t), 4, "4 NICs");
	is_str(gk_topo_nvlink_source(t), "hwloc", "NVLink counts from hwloc's matrix");
	for (int i = 0; i < 9; i++)
		for (int j = 0; j < 9; j++) {
			char s[16];
			int nv, l = gk_topo_link(t, i, j, &nv);
			char name[64];
			snprintf(name, sizeof(name), "%s-%s", gk_topo_dev_at(t, i)->label,
				 gk_topo_dev_at(t, j)->label);
			is_str(gk_topo_link_str(l, nv, s, sizeof(s)), want[i][j], name);
		}
	for (int k = 0; k < 3; k++) {
		char s[16];
		int a = k == 2 ? 3 : 0, b = gk_topo_find(t, want_pci[k][0]);
		is_str(gk_topo_link_str(gk_topo_pci_link(t, a, b), 0, s, sizeof(s)), want_pci[k][1],
		       "PCIe path under the NVLink");
	}
	const gk_topo_dev *g0 = gk_topo_dev_at(t, 0), *n0 = gk_topo_dev_at(t, 5);
	is_str(g0->name, "cuda0", "GPU0 OS name");
	is_str(g0->busid, "0000:03:00.0", "GPU0 bus id");
	is_str(g0->model, "NVIDIA A100-SXM4-40GB", "GPU0 model from hwloc");
	is_str(g0->cpus, "0-3,8-11", "GPU0 local CPUs");
	is_int(g0->numa_first, 0, "GPU0 NUMA node");
	is_str(gk_topo_dev_at(t, 3)->cpus, "4-7,12-15", "GPU3 local CPUs");
	is_str(n0->name, "mlx5_0", "NIC0 is the verbs device");
	is_str(n0->osnames, "mlx5_0,ib0", "NIC0 OS devices");
	is_int(n0->rdma, 1, "NIC0 RDMA");
	is_int(gk_topo_dev_at(t, 7)->rdma, 0, "NIC2 (eth2) not RDMA");
	is_int(gk_topo_find(t, "GPU4"), 4, "find GPU4");
	is_int(gk_topo_find(t, "nic1"), 6, "find nic1");
	is_int(gk_topo_find(t, "85:00.0"), 8, "find short bus id");
	is_int(gk_topo_find(t, "0000:08:00.0"), 2, "find bus id");
	is_int(gk_topo_find(t, "ib0"), 5, "find secondary OS name");
	is_int(gk_topo_find(t, "GPU9"), -1, "no GPU9");
	is_int(gk_topo_ncores(t), 8, "8 cores");

	gk_topo_bind *b;
	if (ok(gk_topo_binding(t, 5, &b, &err) == 0, "binding of 5 ranks")) {
		/* 4 cores per socket: 3 ranks on socket 0 get 1, 1, 2 cores; 2 on socket 1 get 2 each. */
		static const char *cores[5] = {"0", "1", "2-3", "4-5", "6-7"};
		static const char *cpus[5] = {"0,8", "1,9", "2-3,10-11", "4-5,12-13", "6-7,14-15"};
		static const int nic[5] = {5, 5, 5, 8, 8};
		for (int r = 0; r < 5; r++) {
			is_int(b[r].gpu, r, "rank r on GPU r");
			is_int(b[r].nic, nic[r], "nearest RDMA NIC");
			is_int(b[r].numa, r < 3 ? 0 : 1, "NUMA node");
			is_str(b[r].cores, cores[r], "logical cores");
			is_str(b[r].cpus, cpus[r], "PUs");
			is_int(b[r].shared, 0, "exclusive");
		}
		free(b);
	}
	if (ok(gk_topo_binding(t, 10, &b, &err) == 0, "binding of 10 ranks")) {
		/* 6 ranks on 4 cores of socket 0 must share; socket 1 has 4 for 4. */
		is_int(b[0].gpu, 0, "rank 0 on GPU0");
		is_int(b[1].gpu, 0, "rank 1 on GPU0");
		is_int(b[9].gpu, 4, "rank 9 on GPU4");
		is_int(b[0].shared, 1, "socket 0 shares");
		is_int(b[9].shared, 0, "socket 1 does not");
		is_str(b[9].cpus, "7,15", "rank 9 gets the last core");
		free(b);
	}
	ok(gk_topo_binding(t, 0, &b, &err) < 0, "0 ranks refused");
	gk_strlist w = {0};
	ok(gk_topo_warnings(t, &w, &err) == 0 && w.n == 0, "no warnings on a balanced machine");
	gk_strlist_free(&w);
	gk_topo_free(t);
}

static void test_warnings(void)
{
	gk_topo *t;
	gk_err err;
	if (!ok(gk_topo_load(&t, DATA "uneven-nolocal.xml", &err) == 0, "load uneven fixture"))
		return;
	is_int(gk_topo_ngpus(t), 4, "VGA-class NVIDIA function counts as a GPU");
	char s[16];
	is_str(gk_topo_link_str(gk_topo_link(t, 0, 1, NULL), 0, s, sizeof(s)), "PHB",
	       "two root ports of one host bridge");
	is_str(gk_topo_link_str(gk_topo_link(t, 0, 3, NULL), 0, s, sizeof(s)), "SYS",
	       "socket GPU to machine GPU");
	is_int(gk_topo_dev_at(t, 3)->local_whole, 1, "GPU3 local to the whole machine");
	gk_strlist w = {0};
	gk_topo_warnings(t, &w, &err);
	is_int(w.n, 6, "six warnings");
	int nolocal = 0, sys = 0, uneven = 0;
	for (size_t i = 0; i < w.n; i++) {
		nolocal += strstr(w.v[i], "GPU3 (0000:c1:00.0) has no NUMA locality") != NULL;
		sys += strstr(w.v[i], "is SYS") != NULL;
		uneven += strstr(w.v[i], "3 on node 0, 0 on node 1") != NULL;
	}
	is_int(nolocal, 1, "GPU3 has no NUMA locality");
	is_int(sys, 4, "every GPU's nearest NIC is SYS");
	is_int(uneven, 1, "uneven split");
	gk_strlist_free(&w);
	gk_topo_bind *b;
	if (ok(gk_topo_binding(t, 4, &b, &err) == 0, "binding")) {
		is_str(b[3].cpus, "1", "machine-local GPU takes the core the others left");
		is_int(b[0].shared, 1, "three ranks share socket 0's core");
		free(b);
	}
	gk_topo_free(t);
}

static void test_errors(void)
{
	static const struct {
		const char *file, *msg;
	} bad[] = {
		{DATA "not-xml.xml", "load '" DATA "not-xml.xml': not an hwloc XML topology (no <topology> element)"},
		{DATA "nccl-system.xml", "load '" DATA "nccl-system.xml': an NCCL topology file (NCCL_TOPO_FILE), not an hwloc XML; write one with lstopo --of xml"},
		{DATA "truncated.xml", "load '" DATA "truncated.xml': hwloc cannot read this XML topology"},
		{DATA "no-such-file.xml", "open '" DATA "no-such-file.xml': No such file or directory"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(bad); i++) {
		gk_topo *t = NULL;
		gk_err err;
		ok(gk_topo_load(&t, bad[i].file, &err) < 0 && t == NULL, "%s refused", bad[i].file);
		is_str(err.msg, bad[i].msg, "its message");
	}

	/*
	 * A root without complete_nodeset (and other damage) crashes hwloc
	 * 2.9 inside its XML reader. What matters is that it does not take
	 * us with it: the load either fails with a message that names the
	 * file and blames hwloc (a crash, or a clean refusal from a hwloc
	 * that checks), or, should a later hwloc repair the file as it
	 * reads it, gives a topology that answers queries.
	 */
	gk_topo *t = NULL;
	gk_err err;
	const char *f = DATA "root-no-complete-nodeset.xml";
	if (gk_topo_load(&t, f, &err) < 0) {
		const char *crash = "load '" DATA "root-no-complete-nodeset.xml': "
				    "hwloc crashed reading this XML topology (";
		const char *refuse = "load '" DATA "root-no-complete-nodeset.xml': "
				     "hwloc cannot read this XML topology";
		ok(t == NULL, "hwloc-crashing XML: refused, no topology");
		ok(strncmp(err.msg, crash, strlen(crash)) == 0 ||
		   strcmp(err.msg, refuse) == 0,
		   "names the file and blames hwloc: %s", err.msg);
	} else {
		gk_strlist w = {0};
		ok(t != NULL, "hwloc-crashing XML: a fixed hwloc loads it");
		ok(gk_topo_ngpus(t) >= 0 && gk_topo_ncores(t) >= 1 &&
		   gk_topo_warnings(t, &w, &err) == 0, "and the topology answers");
		gk_strlist_free(&w);
		gk_topo_free(t);
	}

	char s[16];
	is_str(gk_topo_link_str(GK_LINK_NV, 18, s, sizeof(s)), "NV18", "NV18");
	is_str(gk_topo_link_str(GK_LINK_NODE, 0, s, sizeof(s)), "NODE", "NODE");
}

int main(void)
{
	test_matrix();
	test_warnings();
	test_errors();
	return done_testing();
}
