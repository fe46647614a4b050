#!/bin/sh
test_description='gpu-topo --health: every GPU'"'"'s health from NVML

A fake libnvidia-ml.so.1 (fake-nvml.c), found through the dlopen path
the real one is, reports values made from each GPU'"'"'s index; the
metrics must carry them in base units, promtool must accept the file,
each rule of gpu-topo(1) HEALTH must make its GPU (and only it)
unhealthy with exit 1, an old driver'"'"'s missing calls leave their
metrics out with a note, and no driver is exit 1 with the reason.'
. "$(dirname "$0")/lib.sh"

command -v promtool >/dev/null && test_set_prereq PROMTOOL

# val FILE NAME GPU: the value of NAME's sample of GPU in FILE
val() {
	sed -n "s/^$2{[^}]*gpu=\"$3\"[^}]*} //p" "$1"
}

# health [ENV=VALUE...]: gpu-topo --health with the fake driver, its
# kernel log in kmsg
health() {
	env LD_LIBRARY_PATH="$PWD/fake" GK_TEST_KMSG="$PWD/kmsg" "$@" \
		gpu-topo --health --metrics h.prom
}

test_expect_success 'setup: the fake driver, new and old, and a kernel log' '
	mkdir fake old &&
	${CC:-cc} -shared -fPIC -o fake/libnvidia-ml.so.1 "$GK_TOP/tests/cli/fake-nvml.c" &&
	${CC:-cc} -shared -fPIC -DOLD_DRIVER -o old/libnvidia-ml.so.1 \
		"$GK_TOP/tests/cli/fake-nvml.c" &&
	: >kmsg
'

test_expect_success 'no driver: exit 1, saying so' '
	test_expect_code 1 env LD_LIBRARY_PATH="$PWD/none" gpu-topo --health 2>err &&
	grep "^gpu-topo: no NVIDIA driver (libnvidia-ml.so.1 is not here): no GPU to check$" err
'

test_expect_success 'NVML that does not start: exit 1 with its code' '
	test_expect_code 1 env LD_LIBRARY_PATH="$PWD/fake" FAKE_NVML_INIT=9 \
		gpu-topo --health 2>err &&
	grep "NVML did not start (nvmlInit_v2 returned 9)" err
'

test_expect_success 'healthy GPUs: exit 0, and the values in base units' '
	health FAKE_NVML_GPUS=3 >out &&
	echo "3 GPUs, healthy" >expect &&
	test_cmp expect out &&
	for g in 0 1 2; do
		test "$(val h.prom gpukit_gpu_memory_used_bytes $g)" = $(((10 + g) << 30)) &&
		test "$(val h.prom gpukit_gpu_memory_total_bytes $g)" = $((80 << 30)) &&
		test "$(val h.prom gpukit_gpu_power_watts $g)" = $((300 + g)) &&
		test "$(val h.prom gpukit_gpu_temperature_celsius $g)" = $((40 + g)) &&
		test "$(val h.prom gpukit_gpu_memory_temperature_celsius $g)" = $((50 + g)) &&
		test "$(val h.prom gpukit_gpu_sm_clock_hertz $g)" = 1980000000 &&
		test "$(val h.prom gpukit_gpu_memory_clock_hertz $g)" = 2619000000 &&
		test "$(val h.prom gpukit_gpu_energy_joules_total $g)" = \
			"$(awk "BEGIN { printf \"%.17g\", (1000000000 + $g) / 1000 }")" &&
		test "$(val h.prom gpukit_gpu_healthy $g)" = 1 &&
		test "$(val h.prom gpukit_gpu_last_xid $g)" = 0 || return 1
	done &&
	grep -c "^gpukit_gpu_nvlink_errors_total{.*gpu=\"1\"" h.prom >n &&
	echo 16 >expect && test_cmp expect n &&
	grep "^gpukit_gpu_utilization_ratio{.*gpu=\"1\",uuid=\"GPU-00000000-0000-0000-0000-000000000001\",pci_bus_id=\"0000:38:00.0\",model=\"NVIDIA H100 80GB HBM3\"} 0.51" h.prom
'

test_expect_success PROMTOOL 'promtool accepts the file' '
	promtool check metrics <h.prom
'

test_expect_success NODE_EXPORTER 'node_exporter serves the file' '
	mkdir tf && cp h.prom tf/ &&
	node_exporter_scrape tf scrape &&
	grep "^gpukit_gpu_utilization_ratio{gpu=\"1\",model=\"NVIDIA H100 80GB HBM3\",pci_bus_id=\"0000:38:00.0\",run=\"h\",uuid=\"GPU-00000000-0000-0000-0000-000000000001\"} 0.51$" scrape
'

test_expect_success 'each metric names the dcgm-exporter field it matches' '
	grep "^# HELP " h.prom >help &&
	test "$(grep -vc "DCGM_FI_DEV_\|gpukit_gpu_healthy \|gpukit_gpu_clock_event_reason " help)" = 0
'

test_expect_success 'clock event reasons: the mask and one gauge per reason' '
	health FAKE_NVML_REASONS_1=0x44 >out &&
	test "$(val h.prom gpukit_gpu_clock_event_reasons 1)" = 68 &&
	grep "^gpukit_gpu_clock_event_reason{.*gpu=\"1\".*reason=\"sw_power_cap\"} 1$" h.prom &&
	grep "^gpukit_gpu_clock_event_reason{.*gpu=\"1\".*reason=\"hw_thermal_slowdown\"} 1$" h.prom &&
	test "$(grep -c "^gpukit_gpu_clock_event_reason{.*gpu=\"1\".*} 1$" h.prom)" = 2 &&
	grep "^gpukit_gpu_clock_event_reason{.*gpu=\"0\".*reason=\"gpu_idle\"} 1$" h.prom
'

# unhealthy GPU ENV=VALUE WHAT: ENV makes GPU (only) unhealthy, saying WHAT
unhealthy() {
	gpu=$1 set=$2 what=$3 &&
	test_expect_code 1 health $set >out &&
	grep "^GPU $gpu (0000:[0-9a-f:.]*, NVIDIA H100 80GB HBM3): $what$" out &&
	grep "^2 GPUs, 1 unhealthy$" out &&
	test "$(val h.prom gpukit_gpu_healthy $gpu)" = 0 &&
	test "$(val h.prom gpukit_gpu_healthy $((1 - gpu)))" = 1
}

test_expect_success 'uncorrectable ECC errors since the driver loaded are unhealthy' '
	unhealthy 1 FAKE_NVML_ECC_UNC_VOL_1=2 "2 uncorrectable ECC errors since the driver loaded" &&
	grep "^gpukit_gpu_ecc_errors_total{.*gpu=\"1\".*type=\"uncorrected\",counter=\"volatile\"} 2$" h.prom
'

test_expect_success 'corrected errors and aggregate counts alone are not' '
	health FAKE_NVML_ECC_CORR_VOL_0=100 FAKE_NVML_ECC_UNC_AGG_0=3 >out &&
	grep "^gpukit_gpu_ecc_errors_total{.*gpu=\"0\".*type=\"corrected\",counter=\"volatile\"} 100$" h.prom &&
	grep "^gpukit_gpu_ecc_errors_total{.*gpu=\"0\".*type=\"uncorrected\",counter=\"aggregate\"} 3$" h.prom
'

test_expect_success 'a failed or pending row remapping, pending retired pages: unhealthy' '
	unhealthy 0 FAKE_NVML_REMAP_FAILED_0=1 "a row remapping failed: replace the GPU" &&
	test "$(val h.prom gpukit_gpu_row_remap_failure 0)" = 1 &&
	unhealthy 1 FAKE_NVML_REMAP_PENDING_1=1 "a row remapping is pending: reset the GPU" &&
	unhealthy 0 FAKE_NVML_RETIRED_PENDING_0=1 "retired pages are pending: reset the GPU" &&
	health FAKE_NVML_REMAP_CORR_1=5 FAKE_NVML_RETIRED_SBE_0=3 >out &&
	grep "^gpukit_gpu_remapped_rows{.*gpu=\"1\".*type=\"correctable\"} 5$" h.prom &&
	grep "^gpukit_gpu_retired_pages{.*gpu=\"0\".*cause=\"multiple_sbe\"} 3$" h.prom
'

test_expect_success 'the last XID of each GPU comes from the kernel log; a fatal one is unhealthy' '
	cat >kmsg <<-\EOF &&
	6,1021,5000,-;NVRM: Xid (PCI:0000:18:00): 13, pid=77, Graphics Exception
	4,1022,5100,-;usb 1-1: new device
	6,1023,5200,-;NVRM: Xid (PCI:0000:38:00): 31, pid=78, MMU Fault
	6,1024,5300,-;NVRM: Xid (PCI:0000:38:00): 79, pid=79, GPU has fallen off the bus.
	EOF
	unhealthy 1 A=1 "XID 79 in the kernel log (a fatal XID: reset or replace the GPU)" &&
	test "$(val h.prom gpukit_gpu_last_xid 0)" = 13 &&
	test "$(val h.prom gpukit_gpu_last_xid 1)" = 79 &&
	: >kmsg
'

test_expect_success 'an old driver: its missing calls leave their metrics out, with a note' '
	env LD_LIBRARY_PATH="$PWD/old" GK_TEST_KMSG="$PWD/kmsg" \
		gpu-topo --health -v --metrics h.prom >out 2>err &&
	grep "^gpu-topo: warning: the driver has no nvmlDeviceGetRemappedRows: no row remapping state$" err &&
	test "$(grep -c "no nvmlDeviceGetRemappedRows" err)" = 1 &&
	! grep "gpukit_gpu_remapped_rows\|gpukit_gpu_memory_temperature" h.prom &&
	test "$(val h.prom gpukit_gpu_clock_event_reasons 0)" = 1
'

test_expect_success 'usage: --metrics without --health, with -i, a file that is not metrics' '
	test_expect_code 2 gpu-topo --metrics x.prom 2>err &&
	grep "metrics goes with --health" err &&
	test_expect_code 2 gpu-topo --health -i x.xml 2>err &&
	echo "not metrics" >data.txt &&
	test_expect_code 2 env LD_LIBRARY_PATH="$PWD/fake" gpu-topo --health --metrics data.txt 2>err &&
	echo "not metrics" >expect &&
	test_cmp expect data.txt
'

test_done
