/*
 * fake-nvml.c - a libnvidia-ml.so.1 for the tests of gpu-topo --health,
 * loaded through the same dlopen as the real one (LD_LIBRARY_PATH).
 *
 * GPU i (FAKE_NVML_GPUS of them, 2 by default) reports values made from
 * its index, which the tests compute independently:
 *   utilisation 50+i %, memory activity 20+i %, memory 80 GiB of which
 *   10+i GiB used, SM clock 1980 MHz, memory clock 2619 MHz, 40+i C,
 *   memory 50+i C, 300+i W, 1e9+i mJ of energy, clock event reasons
 *   FAKE_NVML_REASONS_i (default 0x1, idle), PCI bus 0000:XX:00.0 with
 *   XX = 0x18 + 0x20 i, NVLinks 0-3 active.
 * Counters are 0 unless set: FAKE_NVML_ECC_<T>_<C>_i (T CORR or UNC, C VOL
 * or AGG), FAKE_NVML_RETIRED_<SBE|DBE>_i, FAKE_NVML_RETIRED_PENDING_i,
 * FAKE_NVML_REMAP_<CORR|UNC|PENDING|FAILED>_i, FAKE_NVML_REPLAY_i,
 * FAKE_NVML_NVLINK_<L>_<COUNTER>_i. FAKE_NVML_INIT is what nvmlInit_v2
 * returns. Built with -DOLD_DRIVER it lacks the calls of r470 and later
 * (row remapping, clock event reasons under their new name, field values)
 * as an old driver does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct {
	char bus_id_legacy[16];
	unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
} pci_t;
typedef struct {
	unsigned field, scope;
	long long timestamp, latency;
	int type, ret;
	union { double d; unsigned u; unsigned long ul; unsigned long long ull; long long sll; } v;
} field_t;

static unsigned long long env(const char *name, unsigned i, unsigned long long def)
{
	char k[96];
	snprintf(k, sizeof(k), "%s_%u", name, i);
	const char *v = getenv(k);
	return v ? strtoull(v, NULL, 0) : def;
}

static unsigned ngpus(void)
{
	const char *v = getenv("FAKE_NVML_GPUS");
	return v ? (unsigned)atoi(v) : 2;
}

/* a handle is the GPU's index + 1 */
static int idx(void *d, unsigned *i)
{
	*i = (unsigned)(unsigned long)d - 1;
	return *i < ngpus() ? 0 : 2; /* NVML_ERROR_INVALID_ARGUMENT */
}

#define DEV(d, i) unsigned i; if (idx(d, &i)) return 2

int nvmlInit_v2(void)
{
	const char *v = getenv("FAKE_NVML_INIT");
	return v ? atoi(v) : 0;
}

int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetCount_v2(unsigned *n)
{
	*n = ngpus();
	return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d)
{
	if (i >= ngpus())
		return 2;
	*d = (void *)(unsigned long)(i + 1);
	return 0;
}

int nvmlDeviceGetName(void *d, char *s, unsigned n)
{
	DEV(d, i);
	snprintf(s, n, "NVIDIA H100 80GB HBM3");
	return 0;
}

int nvmlDeviceGetUUID(void *d, char *s, unsigned n)
{
	DEV(d, i);
	snprintf(s, n, "GPU-00000000-0000-0000-0000-%012u", i);
	return 0;
}

int nvmlDeviceGetPciInfo_v3(void *d, pci_t *p)
{
	DEV(d, i);
	memset(p, 0, sizeof(*p));
	p->bus = 0x18 + 0x20 * i;
	snprintf(p->bus_id, sizeof(p->bus_id), "00000000:%02X:00.0", p->bus);
	p->pci_device_id = 0x233010de;
	return 0;
}

int nvmlDeviceGetUtilizationRates(void *d, util_t *u)
{
	DEV(d, i);
	u->gpu = 50 + i, u->memory = 20 + i;
	return 0;
}

int nvmlDeviceGetMemoryInfo(void *d, mem_t *m)
{
	DEV(d, i);
	m->total = 80ULL << 30;
	m->used = (10ULL + i) << 30;
	m->free = m->total - m->used;
	return 0;
}

int nvmlDeviceGetClockInfo(void *d, int type, unsigned *mhz)
{
	DEV(d, i);
	*mhz = type == 1 ? 1980 : type == 2 ? 2619 : 1755;
	return 0;
}

int nvmlDeviceGetTemperature(void *d, int sensor, unsigned *c)
{
	DEV(d, i);
	if (sensor != 0)
		return 2;
	*c = 40 + i;
	return 0;
}

int nvmlDeviceGetPowerUsage(void *d, unsigned *mw)
{
	DEV(d, i);
	*mw = 300000 + 1000 * i;
	return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(void *d, unsigned long long *mj)
{
	DEV(d, i);
	*mj = 1000000000ULL + i;
	return 0;
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void *d, unsigned long long *r)
{
	DEV(d, i);
	*r = env("FAKE_NVML_REASONS", i, 0x1);
	return 0;
}

int nvmlDeviceGetTotalEccErrors(void *d, int type, int counter, unsigned long long *n)
{
	static const char *const name[2][2] = {{"FAKE_NVML_ECC_CORR_VOL", "FAKE_NVML_ECC_CORR_AGG"},
					       {"FAKE_NVML_ECC_UNC_VOL", "FAKE_NVML_ECC_UNC_AGG"}};
	DEV(d, i);
	if (type < 0 || type > 1 || counter < 0 || counter > 1)
		return 2;
	*n = env(name[type][counter], i, 0);
	return 0;
}

int nvmlDeviceGetRetiredPages(void *d, int cause, unsigned *count, unsigned long long *addr)
{
	DEV(d, i);
	unsigned n = (unsigned)env(cause ? "FAKE_NVML_RETIRED_DBE" : "FAKE_NVML_RETIRED_SBE", i, 0);
	if (*count < n && (*count = n) > 0)
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE, the count set */
	*count = n;
	(void)addr;
	return 0;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void *d, int *pending)
{
	DEV(d, i);
	*pending = (int)env("FAKE_NVML_RETIRED_PENDING", i, 0);
	return 0;
}

int nvmlDeviceGetPcieReplayCounter(void *d, unsigned *n)
{
	DEV(d, i);
	*n = (unsigned)env("FAKE_NVML_REPLAY", i, 0);
	return 0;
}

int nvmlDeviceGetNvLinkState(void *d, unsigned link, int *active)
{
	DEV(d, i);
	if (link >= 4)
		return 2; /* no such link */
	*active = 1;
	return 0;
}

int nvmlDeviceGetNvLinkErrorCounter(void *d, unsigned link, int counter, unsigned long long *n)
{
	static const char *const name[] = {"REPLAY", "RECOVERY", "CRC_FLIT", "CRC_DATA"};
	char k[64];
	DEV(d, i);
	if (link >= 4 || counter < 0 || counter > 3)
		return 2;
	snprintf(k, sizeof(k), "FAKE_NVML_NVLINK_%u_%s", link, name[counter]);
	*n = env(k, i, 0);
	return 0;
}

#ifndef OLD_DRIVER
int nvmlDeviceGetCurrentClocksEventReasons(void *d, unsigned long long *r)
{
	return nvmlDeviceGetCurrentClocksThrottleReasons(d, r);
}

int nvmlDeviceGetRemappedRows(void *d, unsigned *corr, unsigned *unc, unsigned *pending,
			      unsigned *failed)
{
	DEV(d, i);
	*corr = (unsigned)env("FAKE_NVML_REMAP_CORR", i, 0);
	*unc = (unsigned)env("FAKE_NVML_REMAP_UNC", i, 0);
	*pending = (unsigned)env("FAKE_NVML_REMAP_PENDING", i, 0);
	*failed = (unsigned)env("FAKE_NVML_REMAP_FAILED", i, 0);
	return 0;
}

int nvmlDeviceGetFieldValues(void *d, int n, field_t *f)
{
	DEV(d, i);
	for (int k = 0; k < n; k++) {
		f[k].ret = f[k].field == 82 ? 0 : 2; /* NVML_FI_DEV_MEMORY_TEMP */
		f[k].type = 1; /* unsigned int, as the driver gives this field */
		f[k].v.u = 50 + i;
	}
	return 0;
}
#endif
