/*
 * nvml.c - GPU names and NVLink counts from NVML, loaded at run time.
 *
 * Debian's hwloc is built without its NVML backend, and the binaries must
 * start on machines with no driver, so libnvidia-ml.so.1 is dlopen'ed;
 * its absence is the normal case here, not an error. Only the few entry
 * points below are used; their prototypes are those of nvml.h (r450+).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo_impl.h"

struct nvml {
	int (*init)(void);
	int (*shutdown)(void);
	int (*count)(unsigned *);
	int (*handle)(unsigned, nvml_dev *);
	int (*pci)(nvml_dev, nvml_pci *);
	int (*name)(nvml_dev, char *, unsigned);
	int (*link_state)(nvml_dev, unsigned, int *);
	int (*link_pci)(nvml_dev, unsigned, nvml_pci *);
};

static int find_gpu(const gk_topo *t, const nvml_pci *p)
{
	for (int i = 0; i < t->ngpus; i++) {
		const struct hwloc_pcidev_attr_s *a = &t->obj[i]->attr->pcidev;
		if (a->domain == p->domain && a->bus == p->bus && a->dev == p->device)
			return i;
	}
	return -1;
}

int gk__topo_nvml(gk_topo *t)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return -1;
	struct nvml n;
	*(void **)&n.init = dlsym(h, "nvmlInit_v2");
	*(void **)&n.shutdown = dlsym(h, "nvmlShutdown");
	*(void **)&n.count = dlsym(h, "nvmlDeviceGetCount_v2");
	*(void **)&n.handle = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&n.pci = dlsym(h, "nvmlDeviceGetPciInfo_v3");
	*(void **)&n.name = dlsym(h, "nvmlDeviceGetName");
	*(void **)&n.link_state = dlsym(h, "nvmlDeviceGetNvLinkState");
	*(void **)&n.link_pci = dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
	unsigned count = 0;
	if (!n.init || !n.shutdown || !n.count || !n.handle || !n.pci || !n.name ||
	    n.init() != 0) {
		dlclose(h);
		return -1;
	}
	int *sw = calloc((size_t)t->ngpus + 1, sizeof(int));
	if (!sw || n.count(&count) != 0) {
		free(sw);
		n.shutdown();
		dlclose(h);
		return -1;
	}
	for (unsigned k = 0; k < count; k++) {
		nvml_dev d;
		nvml_pci p;
		if (n.handle(k, &d) != 0 || n.pci(d, &p) != 0)
			continue;
		int a = find_gpu(t, &p);
		if (a < 0)
			continue;
		char name[96];
		if (n.name(d, name, sizeof(name)) == 0)
			snprintf(t->dev[a].model, sizeof(t->dev[a].model), "%s", name);
		if (!t->dev[a].name[0])
			snprintf(t->dev[a].name, sizeof(t->dev[a].name), "nvml%u", k);
		for (unsigned l = 0; n.link_state && n.link_pci && l < NVML_NVLINK_MAX_LINKS; l++) {
			int active = 0;
			nvml_pci r;
			if (n.link_state(d, l, &active) != 0)
				break; /* no such link: the GPU has no more */
			if (!active || n.link_pci(d, l, &r) != 0)
				continue;
			int b = find_gpu(t, &r);
			if (b >= 0 && b != a)
				t->nvl[a * t->ngpus + b]++;
			else if (b < 0 && (r.pci_device_id & 0xffff) == 0x10de)
				sw[a]++; /* an NVSwitch; IBM NPUs (POWER CPUs) are not */
		}
	}
	gk__topo_add_switch_links(t, sw);
	free(sw);
	n.shutdown();
	dlclose(h);
	t->nvsrc = "nvml";
	return 0;
}
