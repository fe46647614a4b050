/*
 * topo.h - GPUs, NICs, NUMA nodes and the links between them (prefix
 * gk_topo_), from hwloc and, when the driver is there, NVML.
 *
 * A gk_topo is one machine: this one (discovered with hwloc, I/O devices
 * included, plus NVML loaded with dlopen when libnvidia-ml.so.1 exists) or
 * another one described by an hwloc XML file (what `lstopo --of xml`
 * writes), which needs no GPU driver at all.
 *
 * Devices are numbered like nvidia-smi numbers them: GPUs are the PCI
 * devices of vendor 0x10de with a display class (0x03xx), in PCI bus id
 * order (CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID); NICs are the
 * PCI functions carrying an OpenFabrics device (mlx5_0) or, failing that,
 * a network interface (eth0), also in bus id order. gk_topo_dev(t, i)
 * gives the GPUs first (i < ngpus), then the NICs.
 *
 * The link between two devices is the one `nvidia-smi topo -m` prints:
 *   X     the device itself
 *   NV#   # NVLinks, direct or through NVSwitches
 *   PIX   at most one PCIe switch (a downstream port and its upstream
 *         port count as one switch, as NCCL counts them)
 *   PXB   several PCIe switches, below one host bridge port
 *   PHB   through a PCIe host bridge
 *   NODE  between host bridges of one NUMA node (or one package)
 *   SYS   across the SMP interconnect between packages / NUMA nodes
 * found by walking parent pointers from both devices to their lowest common
 * ancestor (hwloc_get_common_ancestor_obj cannot be used: I/O objects
 * have no depth in the normal levels).
 */
#ifndef GK_TOPO_H
#define GK_TOPO_H

#include <stdio.h>

#include "core/core.h"

typedef struct gk_topo gk_topo;

enum gk_topo_kind { GK_TOPO_GPU, GK_TOPO_NIC };

/* Ordered from nearest to farthest: smaller is better. */
enum gk_topo_link {
	GK_LINK_X,
	GK_LINK_NV,
	GK_LINK_PIX,
	GK_LINK_PXB,
	GK_LINK_PHB,
	GK_LINK_NODE,
	GK_LINK_SYS
};

typedef struct gk_topo_dev {
	int kind;          /* GK_TOPO_GPU or GK_TOPO_NIC */
	int index;         /* n in GPUn / NICn */
	char label[16];    /* "GPU0", "NIC1" */
	char name[64];     /* OS name: cuda0, nvml0, mlx5_0, eth0; "" if none */
	char osnames[160]; /* every OS device of the function, comma-separated */
	char busid[16];    /* "0000:13:00.0" */
	char model[96];    /* GPU model (hwloc or NVML) or "vvvv:dddd" */
	int rdma;          /* NIC: has an OpenFabrics (verbs) device */
	char cpus[256];    /* local CPUs, list form "0-15,32-47" (allowed or not) */
	int allowed_none;  /* none of them may be used by this process (cgroup) */
	char numa[64];     /* local NUMA nodes (OS indexes, list form), "" none */
	int numa_first;    /* first of those, -1 when none */
	int gpu_numa;      /* GPU: NUMA node of its own memory (GH200, POWER9), -1 */
	int local_whole;   /* locality is the whole machine (no NUMA locality) */
} gk_topo_dev;

typedef struct gk_topo_numa {
	int os_index;
	unsigned long long memory; /* bytes */
	char cpus[256];            /* allowed CPUs, list form */
	int gpu_memory;            /* 1 for a GPU-memory node (hwloc subtype GPUMemory) */
} gk_topo_numa;

/*
 * Discover this machine (xml NULL) or load an hwloc XML file ("-" is
 * standard input). Errors:
 * unreadable file, a file that is not an hwloc topology (an NCCL topology
 * file is recognised and named), hwloc failures.
 */
int gk_topo_load(gk_topo **out, const char *xml, gk_err *err);
/* The same from an XML document in memory (buf[len] must be NUL); name is for messages. */
int gk_topo_load_buf(gk_topo **out, const char *buf, size_t len, const char *name,
		     gk_err *err);
void gk_topo_free(gk_topo *t);

int gk_topo_ngpus(const gk_topo *t);
int gk_topo_nnics(const gk_topo *t);
/* Device i: GPUs in [0, ngpus), NICs in [ngpus, ngpus + nnics). */
const gk_topo_dev *gk_topo_dev_at(const gk_topo *t, int i);
/* "GPU0", "NIC1", a bus id ("13:00.0" or "0000:13:00.0") or an OS name: index or -1. */
int gk_topo_find(const gk_topo *t, const char *what);

int gk_topo_nnuma(const gk_topo *t);
const gk_topo_numa *gk_topo_numa_at(const gk_topo *t, int i);
/* The CPUs this process may use (cgroup/cpuset), list form; the XML's allowed set. */
const char *gk_topo_allowed_cpus(const gk_topo *t);
int gk_topo_ncores(const gk_topo *t); /* allowed cores */
/* Where the NVLink counts came from: "nvml", "hwloc" or "none". */
const char *gk_topo_nvlink_source(const gk_topo *t);

/* The link between devices i and j; *nvlinks gets the count for GK_LINK_NV. */
int gk_topo_link(const gk_topo *t, int i, int j, int *nvlinks);
/* "X", "NV12", "PIX" ... into buf (at least 8 bytes); returns buf. */
char *gk_topo_link_str(int link, int nvlinks, char *buf, size_t len);
/* The PCIe link without NVLink (what NCCL calls the PCI path). */
int gk_topo_pci_link(const gk_topo *t, int i, int j);

/*
 * The path between devices i and j, one line per hwloc object from i up to
 * the common ancestor and down to j ("up   PCIBridge 0000:12:00.0"),
 * appended to out.
 */
int gk_topo_explain(const gk_topo *t, int i, int j, gk_strlist *out,
		    gk_err *err);

/*
 * Things a user should fix or know before launching: a GPU with no NUMA
 * locality, a GPU whose nearest NIC is SYS, GPUs split unevenly across
 * NUMA nodes. One message per line, appended to out.
 */
int gk_topo_warnings(const gk_topo *t, gk_strlist *out, gk_err *err);

/*
 * A binding for n local ranks. Rank r gets GPU r*ngpus/n (so 2 ranks on 8
 * GPUs take GPU0 and GPU4, 16 ranks pair up on each GPU), the nearest NIC
 * (RDMA NICs first when there are any; ties go to the least used NIC), the
 * GPU's NUMA node, and an exclusive share of the cores local to the GPU:
 * the ranks with the same locality split its allowed cores into
 * contiguous runs. Without GPUs, ranks are spread over the NUMA nodes the
 * same way. When there are fewer cores than ranks, cores are shared and
 * `shared` is set.
 */
typedef struct gk_topo_bind {
	int rank;        /* local rank */
	int gpu;         /* device index of the GPU, -1 without GPUs */
	int nic;         /* device index of the NIC, -1 without NICs */
	int numa;        /* NUMA node OS index, -1 when unknown */
	int shared;      /* cores shared with another rank */
	char cpus[256];  /* PU OS indexes (numactl --physcpubind, taskset) */
	char cores[256]; /* logical core indexes (Open MPI rankfile slot=) */
} gk_topo_bind;

int gk_topo_binding(const gk_topo *t, int nranks, gk_topo_bind **out,
		    gk_err *err);
/* Ranks per node when the user says nothing: one per GPU, else one per NUMA node with CPUs. */
int gk_topo_default_ranks(const gk_topo *t);

/* ---- output (the formats gpu-topo prints) ----------------------------------- */

/* The `nvidia-smi topo -m` matrix, legend and NIC legend. */
int gk_topo_print_matrix(FILE *fp, const gk_topo *t);
/* The NUMA nodes and allowed CPUs (the CPU picture for machines with no GPU). */
int gk_topo_print_numa(FILE *fp, const gk_topo *t);
/* One line per pair: a, b, link, pci link, nvlinks, bus ids. Header first. */
int gk_topo_print_pairs(FILE *fp, const gk_topo *t);
/* One JSON document: devices, pairs, NUMA nodes, allowed CPUs, warnings. */
int gk_topo_print_json(FILE *fp, const gk_topo *t, gk_err *err);

enum gk_topo_bind_fmt { GK_BIND_TSV, GK_BIND_ENV, GK_BIND_NUMACTL };
/* Ranks [first, first+count) of a binding in one of the formats above. */
int gk_topo_print_binding(FILE *fp, const gk_topo *t, const gk_topo_bind *b,
			  int first, int count, int fmt);
/*
 * An Open MPI rankfile: hosts x ranks-per-node lines "rank R=HOST
 * slot=CORES" with logical core indexes (mpirun's default reading).
 */
int gk_topo_print_rankfile(FILE *fp, const gk_topo_bind *b, int nranks,
			   const gk_strlist *hosts);

/*
 * GPU health (gpu-topo --health): one NVML read of every GPU of this node
 * into m, as Prometheus samples (gpukit_gpu_*, labels gpu, uuid,
 * pci_bus_id, model; health.c lists them with their dcgm-exporter
 * fields), and the verdict by the rules of gpu-topo(1) HEALTH: each
 * problem a line "GPU 1 (0000:3b:00.0, MODEL): what", and what could not
 * be read (an old driver, an unreadable kernel log) in notes. -1 when
 * nothing can be read (no driver, NVML does not start).
 */
typedef struct gk_topo_health_report {
	int ngpus, unhealthy;
	gk_strlist problems;
	gk_strlist notes;
} gk_topo_health_report;

int gk_topo_health(gk_metrics *m, gk_topo_health_report *h, gk_err *err);
void gk_topo_health_free(gk_topo_health_report *h);

/*
 * One GPU's clocks, as a trainer samples them between steps (gpu-train's
 * straggler reports), through the same run-time NVML as --health. open
 * finds the GPU at PCI bus id bus ("0000:3b:00.0" as CUDA writes it, or
 * NVML's "00000000:3B:00.0"): -1 with err when there is no driver or no
 * such GPU. read fills what the driver answers (NaN, have_reasons 0 for
 * the rest); -1 only when NVML cannot reach the GPU.
 */
typedef struct gk_topo_gpu_clocks {
	int index;              /* NVML's index (nvidia-smi's) */
	double sm_hz, temp_c;   /* NaN when unread */
	uint64_t reasons;       /* nvmlClocksEventReasons bits */
	int have_reasons;
} gk_topo_gpu_clocks;
typedef struct gk_topo_gpu gk_topo_gpu;
int gk_topo_gpu_open(gk_topo_gpu **out, const char *bus, gk_err *err);
int gk_topo_gpu_read(gk_topo_gpu *g, gk_topo_gpu_clocks *c, gk_err *err);
void gk_topo_gpu_close(gk_topo_gpu *g);
/*
 * The reasons among bits that slow a GPU below the clocks it was set to
 * (a power cap or brake, a thermal or hardware slowdown; not idling or
 * an application's clock setting) as words, "power-capped, thermally
 * slowed (hardware)", into buf; "" when none. Returns buf.
 */
char *gk_topo_slowdown_text(uint64_t bits, char *buf, size_t len);
/* The bits gk_topo_slowdown_text names. */
#define GK_TOPO_SLOWDOWN_BITS 0xecull

#endif
