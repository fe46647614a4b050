/*
 * topo.c - discovery with hwloc and the nvidia-smi link classification.
 *
 * Reference for the link names: the legend `nvidia-smi topo -m` prints and
 * NVML's nvmlGpuTopologyLevel_t (SINGLE = one PCIe switch, MULTIPLE = no
 * host bridge crossed, HOSTBRIDGE, NODE, SYSTEM).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "topo/topo_impl.h"

#define XML_MAX (256u << 20)

static int busid_cmp(const void *a, const void *b)
{
	hwloc_obj_t x = *(hwloc_obj_t const *)a, y = *(hwloc_obj_t const *)b;
	const struct hwloc_pcidev_attr_s *p = &x->attr->pcidev, *q = &y->attr->pcidev;
	if (p->domain != q->domain)
		return p->domain < q->domain ? -1 : 1;
	if (p->bus != q->bus)
		return p->bus < q->bus ? -1 : 1;
	if (p->dev != q->dev)
		return p->dev < q->dev ? -1 : 1;
	return (int)p->func - (int)q->func;
}

/*
 * An NVIDIA display-class function; or any display-class function that a
 * GPU-memory NUMA node names (hwloc creates those only for NVIDIA GPUs,
 * and some dumps lost the PCI ids).
 */
static int is_gpu(hwloc_topology_t topo, hwloc_obj_t o)
{
	if (o->type != HWLOC_OBJ_PCI_DEVICE || (o->attr->pcidev.class_id >> 8) != 0x03)
		return 0;
	if (o->attr->pcidev.vendor_id == 0x10de)
		return 1;
	char busid[16];
	snprintf(busid, sizeof(busid), "%04x:%02x:%02x.%x", o->attr->pcidev.domain,
		 o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func);
	hwloc_obj_t n = NULL;
	while ((n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n))) {
		const char *b = hwloc_obj_get_info_by_name(n, "PCIBusID");
		if (b && n->subtype && strcmp(n->subtype, "GPUMemory") == 0 &&
		    strcasecmp(b, busid) == 0)
			return 1;
	}
	return 0;
}

static int is_nvswitch(hwloc_obj_t o)
{
	if (o->type != HWLOC_OBJ_PCI_DEVICE)
		return 0;
	if (o->subtype && strcmp(o->subtype, "NVSwitch") == 0)
		return 1;
	return o->attr->pcidev.vendor_id == 0x10de &&
	       (o->attr->pcidev.class_id >> 8) == 0x06;
}

/* The first ancestor that is not an I/O object: where the device is local. */
hwloc_obj_t gk__topo_nonio_parent(hwloc_obj_t o)
{
	while (o && (!o->cpuset || hwloc_obj_type_is_io(o->type)))
		o = o->parent;
	return o;
}

static void list_str(hwloc_const_bitmap_t set, char *buf, size_t len)
{
	if (!set || hwloc_bitmap_iszero(set))
		buf[0] = '\0';
	else
		hwloc_bitmap_list_snprintf(buf, len, set);
}

/* The NUMA nodes of a cpuset-carrying object, GPU memory nodes left out. */
static void normal_nodes(gk_topo *t, hwloc_obj_t o, hwloc_bitmap_t out)
{
	hwloc_bitmap_zero(out);
	if (!o || !o->nodeset)
		return;
	hwloc_obj_t n = NULL;
	while ((n = hwloc_get_next_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE, n))) {
		if (n->subtype && strcmp(n->subtype, "GPUMemory") == 0)
			continue;
		if (hwloc_bitmap_isset(o->nodeset, n->os_index))
			hwloc_bitmap_set(out, n->os_index);
	}
}

static void fill_locality(gk_topo *t, gk_topo_dev *d, hwloc_obj_t pci)
{
	hwloc_obj_t p = gk__topo_nonio_parent(pci);
	hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
	hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
	/* The hardware's locality, like nvidia-smi (bindings mask it with the allowed set). */
	if (p && p->cpuset)
		hwloc_bitmap_copy(cpus, p->cpuset);
	list_str(cpus, d->cpus, sizeof(d->cpus));
	if (p && p->cpuset)
		d->allowed_none = !hwloc_bitmap_intersects(p->cpuset,
				hwloc_topology_get_allowed_cpuset(t->topo));
	normal_nodes(t, p, nodes);
	list_str(nodes, d->numa, sizeof(d->numa));
	d->numa_first = hwloc_bitmap_first(nodes);
	d->local_whole = !p || p == hwloc_get_root_obj(t->topo);
	d->gpu_numa = -1;
	hwloc_bitmap_free(nodes);
	hwloc_bitmap_free(cpus);
}

static void append_name(char *buf, size_t len, const char *name)
{
	size_t n = strlen(buf);
	if (n && n + 1 < len)
		buf[n++] = ',', buf[n] = '\0';
	snprintf(buf + n, len - n, "%s", name);
}

static void setup_gpu(gk_topo *t, gk_topo_dev *d, hwloc_obj_t pci)
{
	const char *cuda = NULL, *nvml = NULL, *model = NULL;
	for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
		if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
			continue;
		append_name(d->osnames, sizeof(d->osnames), c->name);
		if (!cuda && strncmp(c->name, "cuda", 4) == 0)
			cuda = c->name;
		if (!nvml && strncmp(c->name, "nvml", 4) == 0)
			nvml = c->name;
		const char *m = hwloc_obj_get_info_by_name(c, "GPUModel");
		if (m && !model)
			model = m;
	}
	snprintf(d->name, sizeof(d->name), "%s", cuda ? cuda : nvml ? nvml : "");
	if (model)
		snprintf(d->model, sizeof(d->model), "%s", model);
	fill_locality(t, d, pci);
	/* GPU memory exposed as a NUMA node names its GPU by bus id. */
	hwloc_obj_t n = NULL;
	while ((n = hwloc_get_next_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE, n))) {
		const char *b = hwloc_obj_get_info_by_name(n, "PCIBusID");
		if (b && strcasecmp(b, d->busid) == 0)
			d->gpu_numa = (int)n->os_index;
	}
}

static void setup_nic(gk_topo *t, gk_topo_dev *d, hwloc_obj_t pci)
{
	const char *ofed = NULL, *net = NULL;
	for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
		if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
			continue;
		append_name(d->osnames, sizeof(d->osnames), c->name);
		if (!ofed && c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
			ofed = c->name;
		if (!net && c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK)
			net = c->name;
	}
	d->rdma = ofed != NULL;
	snprintf(d->name, sizeof(d->name), "%s", ofed ? ofed : net ? net : "");
	fill_locality(t, d, pci);
}

static int has_nic_osdev(hwloc_obj_t pci)
{
	for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
		if (c->type == HWLOC_OBJ_OS_DEVICE &&
		    (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS ||
		     c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK))
			return 1;
	return 0;
}

/* Index of the GPU whose PCI object is o (or o's parent for an OS device). */
static int gpu_of_obj(const gk_topo *t, hwloc_obj_t o)
{
	if (o && o->type == HWLOC_OBJ_OS_DEVICE)
		o = o->parent;
	for (int i = 0; i < t->ngpus; i++)
		if (t->obj[i] == o)
			return i;
	return -1;
}

/*
 * hwloc's "NVLinkBandwidth" matrix (written by its NVML backend, kept in
 * XML) holds, for each pair, the sum of the unidirectional bandwidth of the
 * links between them: 20000 MB/s per NVLink 1.0 link, 25000 for 2.0 to 4.0
 * (hwloc/topology-nvml.c). Peers that are not GPUs are NVSwitches (DGX-2)
 * or CPUs (POWER8/9). The per-link figure is not stored, so it is inferred:
 * 25000 when every value is a multiple of it, else 20000.
 */
static void nvlinks_from_hwloc(gk_topo *t)
{
	struct hwloc_distances_s *dist[4];
	unsigned nr = 4;
	if (hwloc_distances_get_by_name(t->topo, "NVLinkBandwidth", &nr, dist, 0) < 0 ||
	    nr == 0)
		return;
	struct hwloc_distances_s *d = dist[0];
	unsigned n = d->nbobjs;
	int per = 25000;
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < n; j++)
			if (i != j && d->values[i * n + j] % 25000)
				per = 20000;
	int *sw = calloc((size_t)t->ngpus + 1, sizeof(int));
	for (unsigned i = 0; sw && i < n; i++) {
		int a = gpu_of_obj(t, d->objs[i]);
		if (a < 0)
			continue;
		for (unsigned j = 0; j < n; j++) {
			if (i == j)
				continue;
			int links = (int)(d->values[i * n + j] / (unsigned)per);
			int b = gpu_of_obj(t, d->objs[j]);
			if (b >= 0 && b != a)
				t->nvl[a * t->ngpus + b] = links;
			else if (b < 0 && is_nvswitch(d->objs[j]))
				sw[a] += links;
		}
	}
	if (sw)
		gk__topo_add_switch_links(t, sw);
	free(sw);
	t->nvsrc = "hwloc";
	for (unsigned i = 0; i < nr; i++)
		hwloc_distances_release(t->topo, dist[i]);
}

/*
 * NVSwitches form one fabric (on a DGX-2 the two baseboards' switches are
 * linked to each other), so two GPUs that both reach it talk over as many
 * links as the less connected of the two has: nvidia-smi shows NV6 for
 * every pair of a DGX-2, NV12 on a DGX A100, NV18 on a DGX H100.
 */
void gk__topo_add_switch_links(gk_topo *t, const int *sw)
{
	for (int a = 0; a < t->ngpus; a++)
		for (int b = 0; b < t->ngpus; b++)
			if (a != b && sw[a] && sw[b])
				t->nvl[a * t->ngpus + b] += sw[a] < sw[b] ? sw[a] : sw[b];
}

/*
 * hwloc 2.9 dereferences NULL on some malformed XML (a root object without
 * complete_nodeset, for one: lstopo dies the same way), so the file is read
 * once in a child first and only loaded here when that child survived.
 */
static int probe_xml(const char *buf, size_t len, const char *name, gk_err *err)
{
	pid_t pid = fork();
	if (pid < 0)
		return 0; /* cannot probe: load it and hope */
	if (pid == 0) {
		hwloc_topology_t t;
		/* Die of the signal itself, past any sanitizer's or fuzzer's handler. */
		static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
		for (size_t i = 0; i < GK_ARRAY_SIZE(sigs); i++)
			signal(sigs[i], SIG_DFL);
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 2);
		int ok = hwloc_topology_init(&t) == 0 &&
			 hwloc_topology_set_flags(t, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) == 0 &&
			 hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL) == 0 &&
			 hwloc_topology_set_xmlbuffer(t, buf, (int)len + 1) == 0 &&
			 hwloc_topology_load(t) == 0;
		_exit(ok ? 0 : 1);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 0;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFSIGNALED(st))
		return gk_errf(err, "load '%s': hwloc crashed reading this XML topology (%s)", name,
			       strsignal(WTERMSIG(st)));
	return gk_errf(err, "load '%s': hwloc cannot read this XML topology", name);
}

/* buf is NUL-terminated (len excludes the NUL), as gk_read_file leaves it. */
static int set_xml(gk_topo *t, const char *buf, size_t len, const char *name, gk_err *err)
{
	if (strlen(buf) != len)
		return gk_errf(err, "load '%s': not an hwloc XML topology (binary data)", name);
	if (!strstr(buf, "<topology")) {
		if (strstr(buf, "<system") && strstr(buf, "<cpu"))
			return gk_errf(err, "load '%s': an NCCL topology file (NCCL_TOPO_FILE), "
				       "not an hwloc XML; write one with lstopo --of xml", name);
		return gk_errf(err, "load '%s': not an hwloc XML topology (no <topology> element)",
			       name);
	}
	if (len > INT_MAX - 1 || hwloc_topology_set_xmlbuffer(t->topo, buf, (int)len + 1) < 0)
		return gk_errf(err, "load '%s': hwloc cannot read this XML topology", name);
	return probe_xml(buf, len, name, err);
}

int gk_topo_load(gk_topo **out, const char *xml, gk_err *err)
{
	if (!xml)
		return gk_topo_load_buf(out, NULL, 0, NULL, err);
	char *buf;
	size_t len;
	const char *path = strcmp(xml, "-") == 0 ? "/dev/stdin" : xml;
	if (gk_read_file(path, XML_MAX, &buf, &len, err) < 0)
		return -1;
	int rc = gk_topo_load_buf(out, buf, len, xml, err);
	free(buf);
	return rc;
}

int gk_topo_load_buf(gk_topo **out, const char *xml, size_t len, const char *name,
		     gk_err *err)
{
	/*
	 * hwloc dlopens every plugin it finds when the first topology is
	 * created; the OpenGL and OpenCL ones pull in X11 and the OpenCL ICD
	 * loader and find no device we use. (libxml2 stays: hwloc's own XML
	 * reader refuses files with comments.) A user's own setting wins.
	 */
	setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_gl,hwloc_opencl", 0);
	gk_topo *t = calloc(1, sizeof(*t));
	if (!t)
		return gk_err_sys(err, ENOMEM, "topology");
	t->nvsrc = "none";
	if (hwloc_topology_init(&t->topo) < 0) {
		free(t);
		return gk_err_sys(err, errno, "hwloc_topology_init");
	}
	/*
	 * XML: keep every I/O object the file has (NVSwitches and bridges are
	 * named by the NVLink matrix). This machine: the important ones are
	 * enough and much faster to find.
	 */
	/*
	 * Disallowed CPUs stay in the tree so a device's locality is the
	 * hardware's (what nvidia-smi prints); bindings use the allowed set.
	 */
	hwloc_topology_set_flags(t->topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
	hwloc_topology_set_io_types_filter(t->topo, xml ? HWLOC_TYPE_FILTER_KEEP_ALL
						     : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (xml) {
		if (set_xml(t, xml, len, name, err) < 0)
			goto fail;
	}
	if (hwloc_topology_load(t->topo) < 0) {
		if (xml)
			gk_errf(err, "load '%s': hwloc cannot read this XML topology", name);
		else
			gk_err_sys(err, errno, "hwloc_topology_load");
		goto fail;
	}
	t->root = hwloc_get_root_obj(t->topo);

	/* GPUs and NICs, each sorted by bus id. */
	int npci = 0;
	for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->topo, o));)
		npci++;
	hwloc_obj_t *gpus = calloc((size_t)npci + 1, sizeof(*gpus));
	hwloc_obj_t *nics = calloc((size_t)npci + 1, sizeof(*nics));
	if (!gpus || !nics) {
		free(gpus), free(nics);
		gk_err_sys(err, ENOMEM, "topology");
		goto fail;
	}
	int ng = 0, nn = 0;
	for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->topo, o));) {
		if (is_gpu(t->topo, o))
			gpus[ng++] = o;
		else if (has_nic_osdev(o))
			nics[nn++] = o;
	}
	qsort(gpus, (size_t)ng, sizeof(*gpus), busid_cmp);
	qsort(nics, (size_t)nn, sizeof(*nics), busid_cmp);
	t->ngpus = ng, t->nnics = nn;
	t->dev = calloc((size_t)(ng + nn) + 1, sizeof(*t->dev));
	t->obj = calloc((size_t)(ng + nn) + 1, sizeof(*t->obj));
	t->nvl = calloc((size_t)ng * (size_t)ng + 1, sizeof(*t->nvl));
	if (!t->dev || !t->obj || !t->nvl) {
		free(gpus), free(nics);
		gk_err_sys(err, ENOMEM, "topology");
		goto fail;
	}
	for (int i = 0; i < ng + nn; i++) {
		hwloc_obj_t o = i < ng ? gpus[i] : nics[i - ng];
		gk_topo_dev *d = &t->dev[i];
		const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;
		t->obj[i] = o;
		d->kind = i < ng ? GK_TOPO_GPU : GK_TOPO_NIC;
		d->index = i < ng ? i : i - ng;
		snprintf(d->label, sizeof(d->label), "%s%d", i < ng ? "GPU" : "NIC", d->index);
		snprintf(d->busid, sizeof(d->busid), "%04x:%02x:%02x.%x", p->domain, p->bus,
			 p->dev, p->func);
		snprintf(d->model, sizeof(d->model), "%04x:%04x", p->vendor_id, p->device_id);
		if (i < ng)
			setup_gpu(t, d, o);
		else
			setup_nic(t, d, o);
	}
	free(gpus);
	free(nics);

	/* NUMA nodes. */
	t->nnuma = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_NUMANODE);
	t->numa = calloc((size_t)t->nnuma + 1, sizeof(*t->numa));
	if (!t->numa) {
		gk_err_sys(err, ENOMEM, "topology");
		goto fail;
	}
	for (int i = 0; i < t->nnuma; i++) {
		hwloc_obj_t n = hwloc_get_obj_by_type(t->topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
		gk_topo_numa *m = &t->numa[i];
		hwloc_bitmap_t c = hwloc_bitmap_alloc();
		m->os_index = (int)n->os_index;
		m->memory = n->attr->numanode.local_memory;
		m->gpu_memory = n->subtype && strcmp(n->subtype, "GPUMemory") == 0;
		hwloc_bitmap_and(c, n->cpuset, hwloc_topology_get_allowed_cpuset(t->topo));
		list_str(c, m->cpus, sizeof(m->cpus));
		hwloc_bitmap_free(c);
	}
	list_str(hwloc_topology_get_allowed_cpuset(t->topo), t->allowed, sizeof(t->allowed));

	/* NVLink: NVML when it answers (this machine only), else hwloc's matrix. */
	if (ng > 0 && !(xml == NULL && gk__topo_nvml(t) == 0))
		nvlinks_from_hwloc(t);
	*out = t;
	return 0;
fail:
	gk_topo_free(t);
	return -1;
}

void gk_topo_free(gk_topo *t)
{
	if (!t)
		return;
	if (t->topo)
		hwloc_topology_destroy(t->topo);
	free(t->dev);
	free(t->obj);
	free(t->nvl);
	free(t->numa);
	free(t);
}

int gk_topo_ngpus(const gk_topo *t) { return t->ngpus; }
int gk_topo_nnics(const gk_topo *t) { return t->nnics; }
int gk_topo_nnuma(const gk_topo *t) { return t->nnuma; }
const char *gk_topo_allowed_cpus(const gk_topo *t) { return t->allowed; }
const char *gk_topo_nvlink_source(const gk_topo *t) { return t->nvsrc; }

const gk_topo_dev *gk_topo_dev_at(const gk_topo *t, int i)
{
	return i >= 0 && i < t->ngpus + t->nnics ? &t->dev[i] : NULL;
}

const gk_topo_numa *gk_topo_numa_at(const gk_topo *t, int i)
{
	return i >= 0 && i < t->nnuma ? &t->numa[i] : NULL;
}

int gk_topo_ncores(const gk_topo *t)
{
	hwloc_obj_t *cores;
	int n = gk__topo_cores(t, "", &cores);
	free(cores);
	return n;
}

int gk_topo_find(const gk_topo *t, const char *what)
{
	int n = t->ngpus + t->nnics;
	for (int i = 0; i < n; i++) {
		const gk_topo_dev *d = &t->dev[i];
		if (strcasecmp(what, d->label) == 0 || (d->name[0] && strcmp(what, d->name) == 0) ||
		    strcasecmp(what, d->busid) == 0 || strcasecmp(what, d->busid + 5) == 0)
			return i;
	}
	/* Any OS name of the function (ibp20s0 as well as mlx5_0). */
	for (int i = 0; i < n; i++) {
		char names[sizeof(t->dev[i].osnames)], *save = NULL;
		snprintf(names, sizeof(names), "%s", t->dev[i].osnames);
		for (char *s = strtok_r(names, ",", &save); s; s = strtok_r(NULL, ",", &save))
			if (strcmp(s, what) == 0)
				return i;
	}
	return -1;
}

/* ---- classification ----------------------------------------------------------- */

static int is_host_bridge(hwloc_obj_t o)
{
	return o->type == HWLOC_OBJ_BRIDGE &&
	       o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

static int is_pci_bridge(hwloc_obj_t o)
{
	return o->type == HWLOC_OBJ_BRIDGE && !is_host_bridge(o);
}

/*
 * The lowest common ancestor of a and b, and the number of PCI bridges
 * (host bridges not counted) from each device up to it, the ancestor
 * itself included when it is one.
 */
hwloc_obj_t gk__topo_lca(hwloc_obj_t a, hwloc_obj_t b, int *ba, int *bb)
{
	*ba = *bb = 0;
	for (hwloc_obj_t x = a; x; x = x->parent) {
		int n = 0;
		for (hwloc_obj_t y = b; y; y = y->parent) {
			if (y == x) {
				*bb = n;
				return x;
			}
			if (y != b && is_pci_bridge(y))
				n++;
		}
		if (x != a && is_pci_bridge(x))
			(*ba)++;
	}
	return NULL;
}

/*
 * A PCIe switch shows up as two bridge levels, the upstream port and one
 * downstream port per slot, so bridges 1-2 above a device are its first
 * switch, 3-4 the next (NCCL's sysfs walk skips two levels per switch the
 * same way). A common ancestor that is a bridge within the first switch
 * of both devices makes PIX; any deeper one, PXB.
 */
int gk__topo_classify(const gk_topo *t, hwloc_obj_t a, hwloc_obj_t b)
{
	if (a == b)
		return GK_LINK_X;
	int ba, bb;
	hwloc_obj_t l = gk__topo_lca(a, b, &ba, &bb);
	if (!l)
		return GK_LINK_SYS;
	if (is_pci_bridge(l) || l->type == HWLOC_OBJ_PCI_DEVICE) {
		/* ba counts bridges strictly between a and l, plus l itself. */
		int la = (ba + (is_pci_bridge(l) ? 1 : 0) - 1) / 2;
		int lb = (bb + (is_pci_bridge(l) ? 1 : 0) - 1) / 2;
		return la <= 0 && lb <= 0 ? GK_LINK_PIX : GK_LINK_PXB;
	}
	if (is_host_bridge(l))
		return GK_LINK_PHB;
	/*
	 * l is a CPU-side object. Within one NUMA node, or one package (a
	 * socket split into sub-NUMA clusters), the path stays on the chip.
	 */
	hwloc_obj_t c = gk__topo_nonio_parent(l);
	hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
	normal_nodes((gk_topo *)t, c, nodes);
	int one_node = hwloc_bitmap_weight(nodes) <= 1;
	hwloc_bitmap_free(nodes);
	if (one_node)
		return GK_LINK_NODE;
	for (hwloc_obj_t x = c; x; x = x->parent)
		if (x->type == HWLOC_OBJ_PACKAGE)
			return GK_LINK_NODE;
	if (c && c != t->root) {
		/* A group or die below the machine that lies in one package. */
		hwloc_obj_t p = hwloc_get_next_obj_covering_cpuset_by_type(
			t->topo, c->cpuset, HWLOC_OBJ_PACKAGE, NULL);
		if (p)
			return GK_LINK_NODE;
	}
	return GK_LINK_SYS;
}

int gk_topo_pci_link(const gk_topo *t, int i, int j)
{
	return gk__topo_classify(t, t->obj[i], t->obj[j]);
}

int gk_topo_link(const gk_topo *t, int i, int j, int *nvlinks)
{
	if (nvlinks)
		*nvlinks = 0;
	if (i == j)
		return GK_LINK_X;
	if (i < t->ngpus && j < t->ngpus) {
		int n = t->nvl[i * t->ngpus + j];
		if (n > 0) {
			if (nvlinks)
				*nvlinks = n;
			return GK_LINK_NV;
		}
	}
	return gk_topo_pci_link(t, i, j);
}

char *gk_topo_link_str(int link, int nvlinks, char *buf, size_t len)
{
	static const char *names[] = {"X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"};
	if (link == GK_LINK_NV)
		snprintf(buf, len, "NV%d", nvlinks);
	else
		snprintf(buf, len, "%s", link >= 0 && link <= GK_LINK_SYS ? names[link] : "?");
	return buf;
}

/* ---- explain --------------------------------------------------------------------- */

static void describe(hwloc_obj_t o, char *buf, size_t len)
{
	/*
	 * Not hwloc_obj_type_snprintf: it asserts on bridge kinds it does not
	 * know, and an XML file can declare any.
	 */
	const char *type = o->type == HWLOC_OBJ_BRIDGE ? (is_host_bridge(o) ? "HostBridge" : "PCIBridge")
			   : o->type == HWLOC_OBJ_PCI_DEVICE ? "PCI" : hwloc_obj_type_string(o->type);
	char attr[128] = "";
	if (o->type == HWLOC_OBJ_PCI_DEVICE)
		snprintf(attr, sizeof(attr), " %04x:%02x:%02x.%x [%04x:%04x] class %04x%s%s",
			 o->attr->pcidev.domain, o->attr->pcidev.bus, o->attr->pcidev.dev,
			 o->attr->pcidev.func, o->attr->pcidev.vendor_id,
			 o->attr->pcidev.device_id, o->attr->pcidev.class_id,
			 o->subtype ? " " : "", o->subtype ? o->subtype : "");
	else if (is_host_bridge(o))
		snprintf(attr, sizeof(attr), " %04x:[%02x-%02x] (host bridge)",
			 o->attr->bridge.downstream.pci.domain,
			 o->attr->bridge.downstream.pci.secondary_bus,
			 o->attr->bridge.downstream.pci.subordinate_bus);
	else if (o->type == HWLOC_OBJ_BRIDGE)
		snprintf(attr, sizeof(attr), " %04x:%02x:%02x.%x -> bus %02x-%02x",
			 o->attr->bridge.upstream.pci.domain, o->attr->bridge.upstream.pci.bus,
			 o->attr->bridge.upstream.pci.dev, o->attr->bridge.upstream.pci.func,
			 o->attr->bridge.downstream.pci.secondary_bus,
			 o->attr->bridge.downstream.pci.subordinate_bus);
	else {
		char cpus[64] = "";
		if (o->cpuset)
			hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), o->cpuset);
		snprintf(attr, sizeof(attr), " L#%u (CPUs %s)", o->logical_index, cpus);
	}
	snprintf(buf, len, "%s%s", type, attr);
}

int gk_topo_explain(const gk_topo *t, int i, int j, gk_strlist *out, gk_err *err)
{
	hwloc_obj_t a = t->obj[i], b = t->obj[j];
	int ba, bb;
	hwloc_obj_t l = gk__topo_lca(a, b, &ba, &bb);
	char line[512], what[256];
	for (hwloc_obj_t x = a; x; x = x->parent) {
		describe(x, what, sizeof(what));
		snprintf(line, sizeof(line), "%-6s %s%s", x == a ? t->dev[i].label : "up",
			 what, x == l ? "  <- common ancestor" : "");
		if (gk_strlist_push(out, line, err) < 0)
			return -1;
		if (x == l)
			break;
	}
	/* Down from just below the ancestor to b: collect, then print in order. */
	int n = 0;
	for (hwloc_obj_t y = b; y && y != l; y = y->parent)
		n++;
	hwloc_obj_t *down = calloc((size_t)n + 1, sizeof(*down));
	if (!down)
		return gk_err_sys(err, ENOMEM, "explain");
	int k = n;
	for (hwloc_obj_t y = b; y && y != l; y = y->parent)
		down[--k] = y;
	for (k = 0; k < n; k++) {
		describe(down[k], what, sizeof(what));
		snprintf(line, sizeof(line), "%-6s %s", down[k] == b ? t->dev[j].label : "down",
			 what);
		if (gk_strlist_push(out, line, err) < 0) {
			free(down);
			return -1;
		}
	}
	free(down);
	return 0;
}

/* ---- cores, for the binding ------------------------------------------------------- */

int gk__topo_cores(const gk_topo *t, const char *cpulist, hwloc_obj_t **out)
{
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(t->topo);
	if (cpulist && cpulist[0])
		hwloc_bitmap_list_sscanf(set, cpulist);
	else
		hwloc_bitmap_copy(set, allowed);
	hwloc_bitmap_and(set, set, allowed);
	/* Some XML files (hand-made ones) have PUs and no cores. */
	hwloc_obj_type_t type = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_CORE) > 0
		? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
	int n = 0, cap = hwloc_get_nbobjs_by_type(t->topo, type) + 1;
	hwloc_obj_t *v = calloc((size_t)cap, sizeof(*v));
	hwloc_obj_t c = NULL;
	while (v && (c = hwloc_get_next_obj_by_type(t->topo, type, c)))
		if (hwloc_bitmap_intersects(c->cpuset, set))
			v[n++] = c;
	hwloc_bitmap_free(set);
	*out = v;
	return v ? n : -1;
}

/* PU OS indexes (allowed ones) and logical core indexes of cores [lo, hi). */
void gk__topo_core_lists(const gk_topo *t, hwloc_obj_t *cores, int lo, int hi,
			 char *cpus, size_t clen, char *lcores, size_t llen)
{
	hwloc_bitmap_t pu = hwloc_bitmap_alloc(), lc = hwloc_bitmap_alloc();
	for (int k = lo; k < hi; k++) {
		hwloc_bitmap_or(pu, pu, cores[k]->cpuset);
		hwloc_bitmap_set(lc, cores[k]->logical_index);
	}
	hwloc_bitmap_and(pu, pu, hwloc_topology_get_allowed_cpuset(t->topo));
	list_str(pu, cpus, clen);
	list_str(lc, lcores, llen);
	hwloc_bitmap_free(pu);
	hwloc_bitmap_free(lc);
}
