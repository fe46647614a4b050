/*
 * topo_impl.h - what the files of lib/topo share; not part of the public
 * contract (topo.h is).
 */
#ifndef GK_TOPO_IMPL_H
#define GK_TOPO_IMPL_H

#include <hwloc.h>

#include "topo/topo.h"

struct gk_topo {
	hwloc_topology_t topo;
	hwloc_obj_t root;
	int ngpus, nnics, nnuma;
	gk_topo_dev *dev;  /* (ngpus + nnics) */
	hwloc_obj_t *obj;  /* (ngpus + nnics) PCI objects */
	int *nvl;          /* (ngpus, ngpus) NVLink counts between GPU pairs */
	gk_topo_numa *numa;
	const char *nvsrc; /* "nvml", "hwloc", "none" */
	char allowed[256];
};

hwloc_obj_t gk__topo_nonio_parent(hwloc_obj_t o);
hwloc_obj_t gk__topo_lca(hwloc_obj_t a, hwloc_obj_t b, int *ba, int *bb);
int gk__topo_classify(const gk_topo *t, hwloc_obj_t a, hwloc_obj_t b);
void gk__topo_add_switch_links(gk_topo *t, const int *sw);
/* nvml.h's types (r450+) for the entry points nvml.c and health.c load. */
#define NVML_NVLINK_MAX_LINKS 18 /* nvml.h, r535 */
typedef void *nvml_dev;
typedef struct {
	char bus_id_legacy[16];
	unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
} nvml_pci; /* nvmlPciInfo_t */

/* NVML names and NVLink counts: 0 when NVML answered, -1 when absent. */
int gk__topo_nvml(gk_topo *t);
/* Allowed cores intersecting cpulist ("" = all allowed): malloc'ed array. */
int gk__topo_cores(const gk_topo *t, const char *cpulist, hwloc_obj_t **out);
void gk__topo_core_lists(const gk_topo *t, hwloc_obj_t *cores, int lo, int hi,
			 char *cpus, size_t clen, char *lcores, size_t llen);

#endif
