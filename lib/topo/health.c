/*
 * health.c - one NVML read of every GPU of this node, as Prometheus
 * samples for node_exporter's textfile collector, and a verdict by
 * stated rules (gpu-topo --health).
 *
 * What is read is what dcgm-exporter's default counters read (each
 * metric's HELP names its DCGM field), in base units, through the same
 * run-time loading of libnvidia-ml.so.1 as nvml.c: an entry point the
 * driver lacks (an old driver) leaves its metric out, said once in the
 * notes; a call that fails for one GPU leaves that GPU's sample out.
 * NVML reports no past XID, so the last XID of each GPU comes from the
 * kernel log (/dev/kmsg), as node health checks read it.
 *
 * A GPU is unhealthy when (gpu-topo(1), HEALTH):
 *   - it has uncorrectable (double-bit) ECC errors since the driver loaded;
 *   - a row remapping failed, or one is pending (a reset is needed);
 *   - retired pages are pending (a reset is needed);
 *   - its last XID is one of fatal_xids below.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "topo/topo_impl.h"

/* nvml.h's values (r535) */
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_CLOCK_SM = 1,
	NVML_CLOCK_MEM = 2,
	NVML_TEMPERATURE_GPU = 0,
	NVML_MEMORY_ERROR_CORRECTED = 0,
	NVML_MEMORY_ERROR_UNCORRECTED = 1,
	NVML_VOLATILE_ECC = 0,
	NVML_AGGREGATE_ECC = 1,
	NVML_PAGE_RETIREMENT_MULTIPLE_SBE = 0,
	NVML_PAGE_RETIREMENT_DBE = 1,
	NVML_FI_DEV_MEMORY_TEMP = 82,
};

typedef struct { unsigned gpu, memory; } nvml_util;
typedef struct { unsigned long long total, free, used; } nvml_mem;
typedef struct {
	unsigned field, scope;
	long long timestamp, latency;
	int type, ret;
	union { double d; unsigned u; unsigned long ul; unsigned long long ull; long long sll;
		int si; } v;
} nvml_field;

/* a field's value by its nvmlValueType_t */
static double field_value(const nvml_field *f)
{
	switch (f->type) {
	case 0: return f->v.d;
	case 1: return f->v.u;
	case 2: return (double)f->v.ul;
	case 3: return (double)f->v.ull;
	case 4: return (double)f->v.sll;
	case 5: return f->v.si;
	default: return NAN;
	}
}

/* The entry points used; NULL when the driver lacks one. */
typedef struct nvml {
	void *so;
	int (*init)(void);
	int (*shutdown)(void);
	int (*count)(unsigned *);
	int (*handle)(unsigned, nvml_dev *);
	int (*name)(nvml_dev, char *, unsigned);
	int (*uuid)(nvml_dev, char *, unsigned);
	int (*pci)(nvml_dev, nvml_pci *);
	int (*util)(nvml_dev, nvml_util *);
	int (*mem)(nvml_dev, nvml_mem *);
	int (*clock)(nvml_dev, int, unsigned *);
	int (*temp)(nvml_dev, int, unsigned *);
	int (*fields)(nvml_dev, int, nvml_field *);
	int (*power)(nvml_dev, unsigned *);
	int (*energy)(nvml_dev, unsigned long long *);
	int (*reasons)(nvml_dev, unsigned long long *);
	int (*ecc)(nvml_dev, int, int, unsigned long long *);
	int (*retired)(nvml_dev, int, unsigned *, unsigned long long *);
	int (*retired_pending)(nvml_dev, int *);
	int (*remapped)(nvml_dev, unsigned *, unsigned *, unsigned *, unsigned *);
	int (*replay)(nvml_dev, unsigned *);
	int (*link_state)(nvml_dev, unsigned, int *);
	int (*link_errors)(nvml_dev, unsigned, int, unsigned long long *);
} nvml;

/* nvmlClocksEventReasons (r535; "throttle reasons" before it) */
static const struct { unsigned long long bit; const char *name; } reasons[] = {
	{0x1, "gpu_idle"},
	{0x2, "applications_clocks_setting"},
	{0x4, "sw_power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
};

/* nvmlNvLinkErrorCounter_t */
static const char *const link_counters[] = {"replay", "recovery", "crc_flit", "crc_data"};

/*
 * XIDs that make a GPU unhealthy until it is reset or replaced (NVIDIA's
 * XID catalogue): 48 double-bit ECC error, 63/64 ECC page retirement or
 * row remapping event/failure, 74 NVLink error, 79 fallen off the bus,
 * 92 high single-bit ECC rate, 94/95 contained/uncontained ECC error,
 * 119/120 GSP RPC timeout/error.
 */
static const int fatal_xids[] = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120};

static void *sym(nvml *n, const char *name, const char *alt)
{
	void *p = dlsym(n->so, name);
	return p || !alt ? p : dlsym(n->so, alt);
}

static int nvml_open(nvml *n, gk_err *err)
{
	memset(n, 0, sizeof(*n));
	if (!(n->so = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)))
		return gk_errf(err, "no NVIDIA driver (libnvidia-ml.so.1 is not here): no GPU to check");
	*(void **)&n->init = sym(n, "nvmlInit_v2", NULL);
	*(void **)&n->shutdown = sym(n, "nvmlShutdown", NULL);
	*(void **)&n->count = sym(n, "nvmlDeviceGetCount_v2", NULL);
	*(void **)&n->handle = sym(n, "nvmlDeviceGetHandleByIndex_v2", NULL);
	*(void **)&n->name = sym(n, "nvmlDeviceGetName", NULL);
	*(void **)&n->uuid = sym(n, "nvmlDeviceGetUUID", NULL);
	*(void **)&n->pci = sym(n, "nvmlDeviceGetPciInfo_v3", NULL);
	*(void **)&n->util = sym(n, "nvmlDeviceGetUtilizationRates", NULL);
	*(void **)&n->mem = sym(n, "nvmlDeviceGetMemoryInfo", NULL);
	*(void **)&n->clock = sym(n, "nvmlDeviceGetClockInfo", NULL);
	*(void **)&n->temp = sym(n, "nvmlDeviceGetTemperature", NULL);
	*(void **)&n->fields = sym(n, "nvmlDeviceGetFieldValues", NULL);
	*(void **)&n->power = sym(n, "nvmlDeviceGetPowerUsage", NULL);
	*(void **)&n->energy = sym(n, "nvmlDeviceGetTotalEnergyConsumption", NULL);
	*(void **)&n->reasons = sym(n, "nvmlDeviceGetCurrentClocksEventReasons",
				    "nvmlDeviceGetCurrentClocksThrottleReasons");
	*(void **)&n->ecc = sym(n, "nvmlDeviceGetTotalEccErrors", NULL);
	*(void **)&n->retired = sym(n, "nvmlDeviceGetRetiredPages", NULL);
	*(void **)&n->retired_pending = sym(n, "nvmlDeviceGetRetiredPagesPendingStatus", NULL);
	*(void **)&n->remapped = sym(n, "nvmlDeviceGetRemappedRows", NULL);
	*(void **)&n->replay = sym(n, "nvmlDeviceGetPcieReplayCounter", NULL);
	*(void **)&n->link_state = sym(n, "nvmlDeviceGetNvLinkState", NULL);
	*(void **)&n->link_errors = sym(n, "nvmlDeviceGetNvLinkErrorCounter", NULL);
	int rc;
	if (!n->init || !n->shutdown || !n->count || !n->handle) {
		dlclose(n->so);
		return gk_errf(err, "libnvidia-ml.so.1 lacks nvmlInit_v2 or the device calls "
			       "(a driver older than r450?)");
	}
	if ((rc = n->init()) != NVML_SUCCESS) {
		dlclose(n->so);
		return gk_errf(err, "NVML did not start (nvmlInit_v2 returned %d): is the "
			       "driver loaded (nvidia-smi)?", rc);
	}
	return 0;
}

static void nvml_close(nvml *n)
{
	n->shutdown();
	dlclose(n->so);
}

/* One GPU being read: its handle, its labels, and where its samples go. */
typedef struct gpu {
	nvml_dev dev;
	gk_metrics *m;
	gk_topo_health_report *h;
	char index[16], uuid[96], bus[32], model[96];
	int bad;
} gpu;

/* A sample of the GPU: its labels, then up to two pairs (k1 NULL: none). */
static int put(gpu *g, const char *name, gk_metric_type type, const char *help,
	       const char *k1, const char *v1, const char *k2, const char *v2,
	       double value, gk_err *err)
{
	const char *l[] = {"gpu", g->index, "uuid", g->uuid, "pci_bus_id", g->bus,
			   "model", g->model, k1, v1, k2, v2, NULL};
	return gk_metrics_set(g->m, name, type, help, l, value, err);
}

#define GAUGE(g, name, help, v) \
	put(g, name, GK_METRIC_GAUGE, help, NULL, NULL, NULL, NULL, v, err)
#define COUNTER(g, name, help, v) \
	put(g, name, GK_METRIC_COUNTER, help, NULL, NULL, NULL, NULL, v, err)

/* A GPU's problem: said in h->problems, and the GPU is unhealthy. */
static int problem(gpu *g, gk_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int problem(gpu *g, gk_err *err, const char *fmt, ...)
{
	char what[256], line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(line, sizeof(line), "GPU %s (%s, %s): %s", g->index, g->bus, g->model, what);
	g->bad = 1;
	return gk_strlist_push(&g->h->problems, line, err);
}

/* An entry point the driver lacks: said once, in the notes. */
static int missing(gk_topo_health_report *h, const char *fn, const char *what, gk_err *err)
{
	char line[256];
	snprintf(line, sizeof(line), "the driver has no %s: no %s", fn, what);
	for (size_t i = 0; i < h->notes.n; i++)
		if (!strcmp(h->notes.v[i], line))
			return 0;
	return gk_strlist_push(&h->notes, line, err);
}

static int usage(const nvml *n, gpu *g, gk_err *err)
{
	nvml_util u;
	nvml_mem mm;
	unsigned v;
	if (n->util && n->util(g->dev, &u) == NVML_SUCCESS &&
	    (GAUGE(g, "gpukit_gpu_utilization_ratio",
		   "Fraction of the last sample period a kernel ran (DCGM_FI_DEV_GPU_UTIL / 100).",
		   u.gpu / 100.0) < 0 ||
	     GAUGE(g, "gpukit_gpu_memory_utilization_ratio",
		   "Fraction of the last sample period device memory was read or written "
		   "(DCGM_FI_DEV_MEM_COPY_UTIL / 100).", u.memory / 100.0) < 0))
		return -1;
	if (n->mem && n->mem(g->dev, &mm) == NVML_SUCCESS &&
	    (GAUGE(g, "gpukit_gpu_memory_used_bytes",
		   "Device memory in use (DCGM_FI_DEV_FB_USED, in MiB there).", (double)mm.used) < 0 ||
	     GAUGE(g, "gpukit_gpu_memory_free_bytes",
		   "Device memory free (DCGM_FI_DEV_FB_FREE, in MiB there).", (double)mm.free) < 0 ||
	     GAUGE(g, "gpukit_gpu_memory_total_bytes",
		   "Device memory (DCGM_FI_DEV_FB_TOTAL, in MiB there).", (double)mm.total) < 0))
		return -1;
	if (n->clock && n->clock(g->dev, NVML_CLOCK_SM, &v) == NVML_SUCCESS &&
	    GAUGE(g, "gpukit_gpu_sm_clock_hertz", "SM clock (DCGM_FI_DEV_SM_CLOCK, in MHz there).",
		  v * 1e6) < 0)
		return -1;
	if (n->clock && n->clock(g->dev, NVML_CLOCK_MEM, &v) == NVML_SUCCESS &&
	    GAUGE(g, "gpukit_gpu_memory_clock_hertz",
		  "Memory clock (DCGM_FI_DEV_MEM_CLOCK, in MHz there).", v * 1e6) < 0)
		return -1;
	return 0;
}

static int thermal_power(const nvml *n, gpu *g, gk_err *err)
{
	unsigned v;
	unsigned long long e, r;
	nvml_field f = {.field = NVML_FI_DEV_MEMORY_TEMP};
	if (n->temp && n->temp(g->dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS &&
	    GAUGE(g, "gpukit_gpu_temperature_celsius",
		  "GPU temperature (DCGM_FI_DEV_GPU_TEMP).", v) < 0)
		return -1;
	if (n->fields && n->fields(g->dev, 1, &f) == NVML_SUCCESS && f.ret == NVML_SUCCESS &&
	    !isnan(field_value(&f)) &&
	    GAUGE(g, "gpukit_gpu_memory_temperature_celsius",
		  "Memory temperature (DCGM_FI_DEV_MEMORY_TEMP).", field_value(&f)) < 0)
		return -1;
	if (n->power && n->power(g->dev, &v) == NVML_SUCCESS &&
	    GAUGE(g, "gpukit_gpu_power_watts",
		  "Power draw (DCGM_FI_DEV_POWER_USAGE).", v / 1e3) < 0)
		return -1;
	if (n->energy && n->energy(g->dev, &e) == NVML_SUCCESS &&
	    COUNTER(g, "gpukit_gpu_energy_joules_total",
		    "Energy used since the driver loaded (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, "
		    "in mJ there).", (double)e / 1e3) < 0)
		return -1;
	if (!n->reasons)
		return missing(g->h, "nvmlDeviceGetCurrentClocksEventReasons", "clock event reasons",
			       err);
	if (n->reasons(g->dev, &r) != NVML_SUCCESS)
		return 0;
	if (GAUGE(g, "gpukit_gpu_clock_event_reasons",
		  "Why the clocks are held down, nvmlClocksEventReasons bits "
		  "(DCGM_FI_DEV_CLOCKS_EVENT_REASONS).", (double)r) < 0)
		return -1;
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		if (put(g, "gpukit_gpu_clock_event_reason", GK_METRIC_GAUGE,
			"1 when this reason holds the clocks down (one bit of "
			"gpukit_gpu_clock_event_reasons).",
			"reason", reasons[i].name, NULL, NULL, !!(r & reasons[i].bit), err) < 0)
			return -1;
	return 0;
}

static int memory_errors(const nvml *n, gpu *g, gk_err *err)
{
	static const char *const type[] = {"corrected", "uncorrected"};
	static const char *const counter[] = {"volatile", "aggregate"};
	if (!n->ecc)
		return missing(g->h, "nvmlDeviceGetTotalEccErrors", "ECC counts", err);
	for (int t = 0; t < 2; t++)
		for (int c = 0; c < 2; c++) {
			unsigned long long v;
			if (n->ecc(g->dev, t, c, &v) != NVML_SUCCESS)
				continue; /* ECC off, or not an ECC GPU */
			if (put(g, "gpukit_gpu_ecc_errors_total", GK_METRIC_COUNTER,
				"ECC errors, corrected (single-bit) or not (double-bit), since the "
				"driver loaded (volatile) or ever (aggregate) "
				"(DCGM_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL).",
				"type", type[t], "counter", counter[c], (double)v, err) < 0)
				return -1;
			if (t == NVML_MEMORY_ERROR_UNCORRECTED && c == NVML_VOLATILE_ECC && v &&
			    problem(g, err, "%llu uncorrectable ECC error%s since the driver loaded",
				    v, v == 1 ? "" : "s") < 0)
				return -1;
		}
	return 0;
}

static int retirement(const nvml *n, gpu *g, gk_err *err)
{
	static const char *const cause[] = {"multiple_sbe", "dbe"};
	unsigned corr, unc, pending, failed;
	int pend;
	for (int c = 0; n->retired && c < 2; c++) {
		unsigned count = 0;
		int rc = n->retired(g->dev, c, &count, NULL);
		if ((rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE) &&
		    put(g, "gpukit_gpu_retired_pages", GK_METRIC_GAUGE,
			"Pages retired, by cause (DCGM_FI_DEV_RETIRED_SBE, DCGM_FI_DEV_RETIRED_DBE; "
			"GPUs before Ampere).", "cause", cause[c], NULL, NULL, count, err) < 0)
			return -1;
	}
	if (n->retired_pending && n->retired_pending(g->dev, &pend) == NVML_SUCCESS) {
		if (GAUGE(g, "gpukit_gpu_retired_pages_pending",
			  "1 when retired pages wait for a reset (DCGM_FI_DEV_RETIRED_PENDING).",
			  !!pend) < 0 ||
		    (pend && problem(g, err, "retired pages are pending: reset the GPU") < 0))
			return -1;
	}
	if (!n->remapped)
		return missing(g->h, "nvmlDeviceGetRemappedRows", "row remapping state", err);
	if (n->remapped(g->dev, &corr, &unc, &pending, &failed) != NVML_SUCCESS)
		return 0; /* not an Ampere or later GPU */
	if (put(g, "gpukit_gpu_remapped_rows", GK_METRIC_GAUGE,
		"Memory rows remapped, for correctable or uncorrectable errors "
		"(DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS).",
		"type", "correctable", NULL, NULL, corr, err) < 0 ||
	    put(g, "gpukit_gpu_remapped_rows", GK_METRIC_GAUGE, NULL, "type", "uncorrectable",
		NULL, NULL, unc, err) < 0 ||
	    GAUGE(g, "gpukit_gpu_row_remap_pending",
		  "1 when a row remapping waits for a reset (DCGM_FI_DEV_ROW_REMAP_PENDING).",
		  !!pending) < 0 ||
	    GAUGE(g, "gpukit_gpu_row_remap_failure",
		  "1 when a row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE).", !!failed) < 0)
		return -1;
	if (failed && problem(g, err, "a row remapping failed: replace the GPU") < 0)
		return -1;
	if (pending && problem(g, err, "a row remapping is pending: reset the GPU") < 0)
		return -1;
	return 0;
}

static int links(const nvml *n, gpu *g, gk_err *err)
{
	unsigned v;
	if (n->replay && n->replay(g->dev, &v) == NVML_SUCCESS &&
	    COUNTER(g, "gpukit_gpu_pcie_replays_total",
		    "PCIe replays (DCGM_FI_DEV_PCIE_REPLAY_COUNTER).", v) < 0)
		return -1;
	for (unsigned l = 0; n->link_state && n->link_errors && l < NVML_NVLINK_MAX_LINKS; l++) {
		int active;
		char link[8];
		if (n->link_state(g->dev, l, &active) != NVML_SUCCESS)
			break; /* no such link: the GPU has no more */
		if (!active)
			continue;
		snprintf(link, sizeof(link), "%u", l);
		for (int c = 0; c < 4; c++) {
			unsigned long long e;
			if (n->link_errors(g->dev, l, c, &e) != NVML_SUCCESS)
				continue;
			if (put(g, "gpukit_gpu_nvlink_errors_total", GK_METRIC_COUNTER,
				"NVLink errors by link and counter "
				"(DCGM_FI_DEV_NVLINK_{REPLAY,RECOVERY,CRC_FLIT,CRC_DATA}_ERROR_COUNT_TOTAL, "
				"summed over links there).",
				"link", link, "counter", link_counters[c], (double)e, err) < 0)
				return -1;
		}
	}
	return 0;
}

/* "0000:3b:00" or "00000000:3B:00.0" as (domain, bus, device) */
static int parse_bus(const char *s, unsigned *dom, unsigned *bus, unsigned *dev)
{
	char *e;
	unsigned long d = strtoul(s, &e, 16);
	if (*e != ':')
		return -1;
	unsigned long b = strtoul(e + 1, &e, 16);
	if (*e != ':')
		return -1;
	unsigned long v = strtoul(e + 1, &e, 16);
	*dom = (unsigned)d, *bus = (unsigned)b, *dev = (unsigned)v;
	return 0;
}

/*
 * The last XID the kernel logged for each GPU: NVRM's lines "NVRM: Xid
 * (PCI:0000:3b:00): 79, pid=..., ..." in /dev/kmsg (GK_TEST_KMSG names a
 * file of such lines instead). Unreadable (dmesg_restrict without
 * CAP_SYSLOG): a note, and no XID metric.
 */
static int read_xids(gk_topo_health_report *h, const nvml_pci *pci, int *xid, unsigned n, gk_err *err)
{
	const char *path = getenv("GK_TEST_KMSG");
	int fd = open(path ? path : "/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		char line[256];
		snprintf(line, sizeof(line), "cannot read the kernel log (%s: %s): no XIDs",
			 path ? path : "/dev/kmsg", strerror(errno));
		return gk_strlist_push(&h->notes, line, err);
	}
	/* /dev/kmsg gives one record per read; a file, lines: both end in \n */
	char buf[8192];
	size_t have = 0;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (r < 0 && errno == EPIPE)
			continue; /* records overwritten under us */
		if (r <= 0)
			break;
		have += (size_t)r;
		buf[have] = '\0';
		char *line = buf, *nl;
		while ((nl = strchr(line, '\n'))) {
			*nl = '\0';
			const char *x = strstr(line, "NVRM: Xid (PCI:");
			unsigned d, b, v;
			if (x && parse_bus(x + 15, &d, &b, &v) == 0) {
				const char *c = strstr(x, "): ");
				int id = c ? atoi(c + 3) : 0;
				for (unsigned i = 0; i < n && id > 0; i++)
					if (pci[i].domain == d && pci[i].bus == b && pci[i].device == v)
						xid[i] = id;
			}
			line = nl + 1;
		}
		have = strlen(line);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			have = 0; /* a line longer than any NVRM line: not one */
	}
	close(fd);
	return 1;
}

static int xid_is_fatal(int x)
{
	for (size_t i = 0; i < sizeof(fatal_xids) / sizeof(fatal_xids[0]); i++)
		if (fatal_xids[i] == x)
			return 1;
	return 0;
}

int gk_topo_health(gk_metrics *m, gk_topo_health_report *h, gk_err *err)
{
	nvml n;
	unsigned count;
	memset(h, 0, sizeof(*h));
	if (nvml_open(&n, err) < 0)
		return -1;
	int rc = n.count(&count);
	if (rc != NVML_SUCCESS) {
		nvml_close(&n);
		return gk_errf(err, "NVML cannot count the GPUs (nvmlDeviceGetCount_v2 returned %d)", rc);
	}
	nvml_pci *pci = calloc(count + 1, sizeof(*pci));
	int *xid = calloc(count + 1, sizeof(*xid));
	gpu *gs = calloc(count + 1, sizeof(*gs));
	int kmsg = 0;
	rc = pci && xid && gs ? 0 : gk_err_sys(err, ENOMEM, "health");
	for (unsigned i = 0; !rc && i < count; i++) {
		nvml_dev d;
		if (n.handle(i, &d) != NVML_SUCCESS || !n.pci || n.pci(d, &pci[i]) != 0)
			pci[i].domain = ~0u; /* matches no XID line */
	}
	if (!rc)
		kmsg = read_xids(h, pci, xid, count, err);
	rc = kmsg < 0 ? -1 : rc;
	for (unsigned i = 0; !rc && i < count; i++) {
		gpu *g = &gs[i];
		g->m = m, g->h = h;
		snprintf(g->index, sizeof(g->index), "%u", i);
		if (n.handle(i, &g->dev) != NVML_SUCCESS) {
			snprintf(g->bus, sizeof(g->bus), "?");
			snprintf(g->model, sizeof(g->model), "?");
			rc = problem(g, err, "NVML cannot reach it (nvmlDeviceGetHandleByIndex_v2 failed)");
			h->ngpus++, h->unhealthy++;
			continue;
		}
		if (!n.name || n.name(g->dev, g->model, sizeof(g->model)) != NVML_SUCCESS)
			snprintf(g->model, sizeof(g->model), "unknown");
		if (!n.uuid || n.uuid(g->dev, g->uuid, sizeof(g->uuid)) != NVML_SUCCESS)
			snprintf(g->uuid, sizeof(g->uuid), "unknown");
		if (pci[i].domain != ~0u)
			snprintf(g->bus, sizeof(g->bus), "%04x:%02x:%02x.0", pci[i].domain & 0xffff,
				 pci[i].bus, pci[i].device);
		else
			snprintf(g->bus, sizeof(g->bus), "unknown");
		rc = usage(&n, g, err) < 0 || thermal_power(&n, g, err) < 0 ||
		     memory_errors(&n, g, err) < 0 || retirement(&n, g, err) < 0 ||
		     links(&n, g, err) < 0 ? -1 : 0;
		if (!rc && kmsg > 0)
			rc = GAUGE(g, "gpukit_gpu_last_xid",
				   "The last XID the kernel logged for the GPU, 0 for none "
				   "(DCGM_FI_DEV_XID_ERRORS).", xid[i]);
		if (!rc && xid_is_fatal(xid[i]))
			rc = problem(g, err, "XID %d in the kernel log (a fatal XID: reset or "
				     "replace the GPU)", xid[i]);
		if (!rc)
			rc = GAUGE(g, "gpukit_gpu_healthy",
				   "1 when no rule of gpu-topo(1) HEALTH finds the GPU unhealthy.",
				   !g->bad);
		h->ngpus++;
		h->unhealthy += g->bad;
	}
	free(pci);
	free(xid);
	free(gs);
	nvml_close(&n);
	return rc;
}

void gk_topo_health_free(gk_topo_health_report *h)
{
	gk_strlist_free(&h->problems);
	gk_strlist_free(&h->notes);
}

/* ---- one GPU's clocks, between a trainer's steps ---------------------------------------- */

struct gk_topo_gpu {
	nvml n;
	nvml_dev dev;
	int index;
};

int gk_topo_gpu_open(gk_topo_gpu **out, const char *bus, gk_err *err)
{
	unsigned dom, b, d, count;
	*out = NULL;
	if (parse_bus(bus, &dom, &b, &d) < 0)
		return gk_errf(err, "GPU '%s': not a PCI bus id (0000:3b:00.0)", bus);
	gk_topo_gpu *g = calloc(1, sizeof(*g));
	if (!g)
		return gk_err_sys(err, ENOMEM, "GPU '%s'", bus);
	if (nvml_open(&g->n, err) < 0) {
		free(g);
		return -1;
	}
	if (!g->n.pci || g->n.count(&count) != NVML_SUCCESS)
		count = 0;
	for (unsigned i = 0; i < count; i++) {
		nvml_pci p;
		if (g->n.handle(i, &g->dev) == NVML_SUCCESS && g->n.pci(g->dev, &p) == NVML_SUCCESS &&
		    p.domain == dom && p.bus == b && p.device == d) {
			g->index = (int)i;
			*out = g;
			return 0;
		}
	}
	nvml_close(&g->n);
	free(g);
	return gk_errf(err, "GPU '%s': NVML has no GPU at that PCI bus id", bus);
}

int gk_topo_gpu_read(gk_topo_gpu *g, gk_topo_gpu_clocks *c, gk_err *err)
{
	unsigned v;
	unsigned long long r;
	*c = (gk_topo_gpu_clocks){.index = g->index, .sm_hz = NAN, .temp_c = NAN};
	if (g->n.clock) {
		int rc = g->n.clock(g->dev, NVML_CLOCK_SM, &v);
		if (rc == NVML_SUCCESS)
			c->sm_hz = v * 1e6;
		else if (rc == NVML_ERROR_GPU_IS_LOST)
			return gk_errf(err, "GPU %d: NVML cannot reach it (fallen off the bus?)",
				       g->index);
	}
	if (g->n.temp && g->n.temp(g->dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
		c->temp_c = v;
	if (g->n.reasons && g->n.reasons(g->dev, &r) == NVML_SUCCESS) {
		c->reasons = r;
		c->have_reasons = 1;
	}
	return 0;
}

void gk_topo_gpu_close(gk_topo_gpu *g)
{
	if (!g)
		return;
	nvml_close(&g->n);
	free(g);
}

char *gk_topo_slowdown_text(uint64_t bits, char *buf, size_t len)
{
	static const struct { uint64_t bit; const char *what; } w[] = {
		{0x4, "power-capped"},
		{0x80, "power-braked"},
		{0x20, "thermally slowed"},
		{0x40, "thermally slowed (hardware)"},
		{0x8, "slowed by the hardware (power or temperature)"},
	};
	size_t k = 0;
	if (len)
		buf[0] = '\0';
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		if ((bits & w[i].bit) && k < len)
			k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? ", " : "", w[i].what);
	return buf;
}
