/*
 * print.c - the formats gpu-topo writes: the nvidia-smi matrix, pairs as
 * TSV, JSON, bindings (TSV, environment, numactl) and Open MPI rankfiles.
 */
#include <jansson.h>
#include <string.h>

#include "topo/topo_impl.h"

/*
 * The legend, word for word as nvidia-smi (r525 and later) prints it, so
 * that scripts written against its output read ours.
 */
static const char legend[] =
	"Legend:\n"
	"\n"
	"  X    = Self\n"
	"  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
	"  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
	"  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
	"  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
	"  PIX  = Connection traversing at most a single PCIe bridge\n"
	"  NV#  = Connection traversing a bonded set of # NVLinks\n";

static const char *numa_affinity(const gk_topo *t, const gk_topo_dev *d)
{
	if (!d->numa[0] || (d->local_whole && t->nnuma > 1))
		return "N/A";
	return d->numa;
}

/*
 * Layout of `nvidia-smi topo -m`: a tab before every column, " X " on the
 * diagonal, GPU rows end with CPU Affinity, NUMA Affinity, an empty field
 * and GPU NUMA ID; NIC rows leave those four fields empty.
 */
int gk_topo_print_matrix(FILE *fp, const gk_topo *t)
{
	int n = t->ngpus + t->nnics;
	char cell[16];
	for (int j = 0; j < n; j++)
		fprintf(fp, "\t%s", t->dev[j].label);
	fputs("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n", fp);
	for (int i = 0; i < n; i++) {
		const gk_topo_dev *d = &t->dev[i];
		fputs(d->label, fp);
		for (int j = 0; j < n; j++) {
			int nv, l = gk_topo_link(t, i, j, &nv);
			fprintf(fp, "\t%s", l == GK_LINK_X ? " X " : gk_topo_link_str(l, nv, cell, sizeof(cell)));
		}
		if (d->kind == GK_TOPO_GPU) {
			char gn[16] = "N/A";
			if (d->gpu_numa >= 0)
				snprintf(gn, sizeof(gn), "%d", d->gpu_numa);
			fprintf(fp, "\t%s\t%s\t\t%s\n", d->cpus, numa_affinity(t, d), gn);
		} else {
			fputs("\t\t\t\t\n", fp);
		}
	}
	fprintf(fp, "\n%s", legend);
	if (t->nnics) {
		fputs("\nNIC Legend:\n\n", fp);
		for (int i = t->ngpus; i < n; i++)
			fprintf(fp, "  %s: %s\n", t->dev[i].label,
				t->dev[i].name[0] ? t->dev[i].name : t->dev[i].busid);
	}
	fputc('\n', fp);
	return ferror(fp) ? -1 : 0;
}

int gk_topo_print_numa(FILE *fp, const gk_topo *t)
{
	char size[32];
	fprintf(fp, "CPUs allowed: %s (%d cores)\n\nNUMA Legend:\n\n", t->allowed,
		gk_topo_ncores(t));
	for (int i = 0; i < t->nnuma; i++) {
		const gk_topo_numa *m = &t->numa[i];
		fprintf(fp, "  NUMA%d: CPUs %s, %s%s\n", m->os_index, m->cpus[0] ? m->cpus : "none",
			gk_format_size(m->memory, 0, size, sizeof(size)),
			m->gpu_memory ? " (GPU memory)" : "");
	}
	fputc('\n', fp);
	return ferror(fp) ? -1 : 0;
}

int gk_topo_print_pairs(FILE *fp, const gk_topo *t)
{
	int n = t->ngpus + t->nnics;
	char a[16], b[16];
	fputs("a\tb\tlink\tpci\tnvlinks\ta_busid\tb_busid\n", fp);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			int nv, l = gk_topo_link(t, i, j, &nv);
			fprintf(fp, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t->dev[i].label, t->dev[j].label,
				gk_topo_link_str(l, nv, a, sizeof(a)),
				gk_topo_link_str(gk_topo_pci_link(t, i, j), 0, b, sizeof(b)), nv,
				t->dev[i].busid, t->dev[j].busid);
		}
	return ferror(fp) ? -1 : 0;
}

/* "0-2,5" as [0,1,2,5]. */
static json_t *json_list(const char *list)
{
	json_t *a = json_array();
	hwloc_bitmap_t s = hwloc_bitmap_alloc();
	unsigned i;
	if (list[0] && hwloc_bitmap_list_sscanf(s, list) == 0)
		hwloc_bitmap_foreach_begin(i, s) json_array_append_new(a, json_integer(i));
		hwloc_bitmap_foreach_end();
	hwloc_bitmap_free(s);
	return a;
}

static json_t *json_names(const char *csv)
{
	json_t *a = json_array();
	char buf[256], *save = NULL;
	snprintf(buf, sizeof(buf), "%s", csv);
	for (char *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save))
		json_array_append_new(a, json_string(s));
	return a;
}

int gk_topo_print_json(FILE *fp, const gk_topo *t, gk_err *err)
{
	json_t *root = json_object(), *gpus = json_array(), *nics = json_array(),
	       *pairs = json_array(), *numa = json_array(), *warn = json_array();
	int n = t->ngpus + t->nnics;
	char s[16];
	json_object_set_new(root, "allowed_cpus", json_string(t->allowed));
	json_object_set_new(root, "cores", json_integer(gk_topo_ncores(t)));
	json_object_set_new(root, "nvlink_source", json_string(t->nvsrc));
	for (int i = 0; i < t->nnuma; i++) {
		const gk_topo_numa *m = &t->numa[i];
		json_array_append_new(numa, json_pack("{s:i, s:I, s:s, s:b}", "os_index", m->os_index,
						      "memory", (json_int_t)m->memory, "cpus",
						      m->cpus, "gpu_memory", m->gpu_memory));
	}
	for (int i = 0; i < n; i++) {
		const gk_topo_dev *d = &t->dev[i];
		json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:o, s:s, s:o}", "label", d->label,
				      "index", d->index, "busid", d->busid, "model", d->model,
				      "os_devices", json_names(d->osnames), "cpus", d->cpus,
				      "numa", json_list(d->numa));
		json_object_set_new(o, "name", d->name[0] ? json_string(d->name) : json_null());
		if (d->kind == GK_TOPO_GPU) {
			json_object_set_new(o, "gpu_numa", d->gpu_numa >= 0 ? json_integer(d->gpu_numa)
									    : json_null());
			json_array_append_new(gpus, o);
		} else {
			json_object_set_new(o, "rdma", json_boolean(d->rdma));
			json_array_append_new(nics, o);
		}
	}
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			int nv, l = gk_topo_link(t, i, j, &nv);
			char p[16];
			json_array_append_new(pairs, json_pack("{s:s, s:s, s:s, s:s, s:i}", "a",
				t->dev[i].label, "b", t->dev[j].label, "link",
				gk_topo_link_str(l, nv, s, sizeof(s)), "pci",
				gk_topo_link_str(gk_topo_pci_link(t, i, j), 0, p, sizeof(p)),
				"nvlinks", nv));
		}
	gk_strlist w = {0};
	if (gk_topo_warnings(t, &w, err) < 0) {
		json_decref(root), json_decref(gpus), json_decref(nics);
		json_decref(pairs), json_decref(numa), json_decref(warn);
		return -1;
	}
	for (size_t i = 0; i < w.n; i++)
		json_array_append_new(warn, json_string(w.v[i]));
	gk_strlist_free(&w);
	json_object_set_new(root, "numa_nodes", numa);
	json_object_set_new(root, "gpus", gpus);
	json_object_set_new(root, "nics", nics);
	json_object_set_new(root, "pairs", pairs);
	json_object_set_new(root, "warnings", warn);
	int rc = gk_json_dump(fp, root, 1, err);
	json_decref(root);
	return rc;
}

static int list_weight(const char *list)
{
	hwloc_bitmap_t s = hwloc_bitmap_alloc();
	int n = hwloc_bitmap_list_sscanf(s, list) == 0 ? hwloc_bitmap_weight(s) : 0;
	hwloc_bitmap_free(s);
	return n > 0 ? n : 1;
}

int gk_topo_print_binding(FILE *fp, const gk_topo *t, const gk_topo_bind *b,
			  int first, int count, int fmt)
{
	if (fmt == GK_BIND_TSV)
		fputs("rank\tgpu\tbusid\tnic\tnuma\tcpus\tcores\n", fp);
	for (int r = first; r < first + count; r++) {
		const gk_topo_bind *x = &b[r];
		const gk_topo_dev *g = x->gpu >= 0 ? &t->dev[x->gpu] : NULL;
		const gk_topo_dev *nic = x->nic >= 0 ? &t->dev[x->nic] : NULL;
		char numa[16] = "-";
		if (x->numa >= 0)
			snprintf(numa, sizeof(numa), "%d", x->numa);
		switch (fmt) {
		case GK_BIND_TSV:
			fprintf(fp, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", x->rank, g ? g->label + 3 : "-",
				g ? g->busid : "-", nic ? (nic->name[0] ? nic->name : nic->label) : "-",
				numa, x->cpus, x->cores);
			break;
		case GK_BIND_ENV:
			/* CUDA numbers GPUs fastest-first unless told to follow the bus. */
			if (g)
				fprintf(fp, "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=%d", g->index);
			if (nic && nic->rdma)
				fprintf(fp, "%sNCCL_IB_HCA==%s", g ? " " : "", nic->name);
			else if (nic && nic->name[0])
				fprintf(fp, "%sNCCL_SOCKET_IFNAME==%s", g ? " " : "", nic->name);
			fprintf(fp, "%sOMP_NUM_THREADS=%d\n", g || nic ? " " : "",
				x->cores[0] ? list_weight(x->cores) : 1);
			break;
		case GK_BIND_NUMACTL:
			fprintf(fp, "numactl --physcpubind=%s", x->cpus);
			if (x->numa >= 0)
				fprintf(fp, " --membind=%d", x->numa);
			fputc('\n', fp);
			break;
		}
	}
	return ferror(fp) ? -1 : 0;
}

int gk_topo_print_rankfile(FILE *fp, const gk_topo_bind *b, int nranks,
			   const gk_strlist *hosts)
{
	for (size_t h = 0; h < hosts->n; h++)
		for (int r = 0; r < nranks; r++)
			fprintf(fp, "rank %zu=%s slot=%s\n", h * (size_t)nranks + (size_t)r,
				hosts->v[h], b[r].cores);
	return ferror(fp) ? -1 : 0;
}
