#!/bin/sh
# gpu-suite.sh - the device test suite, for a machine with an NVIDIA GPU.
#
#   tools/gpu-suite.sh [-q] [-o DIR]   from the top of the source tree
#
#   -q       leave out step 3 (make check, which runs on any machine): the
#            device's own checks and the benchmarks only
#   -o DIR   each step's output there (default build/gpu-suite)
#
# A machine without a package mirror builds with the libraries staged by
# scripts/offline-deps: build/offline-deps/env, when there, is taken first.
#
# make check runs everywhere and skips what needs a device ("# SKIP no
# CUDA device"); here those skips are failures. It builds with CUDA=1
# (nvcc required), then:
#   1. the device unit tests (tests/unit/{cuda_core,comm_cuda,core_half,
#      nn_cuda,nn_flash}): every kernel against the CPU path (within the tolerance
#      each test states: sums run in another order on the device), the nccl
#      backend in a world of one, lib/cuda's probe, streams, events and
#      accounting, the model's CUDA backend against its CPU backend
#      (kernels, a step, a 10-step loss curve, determinism);
#      under compute-sanitizer's memcheck and racecheck when it is there;
#   2. tests/cli/t6002 (allreduce-bench --backend nccl): one process, one
#      rank per GPU under mpirun (2 GPUs or more), and a rank that sees
#      no device ending the job at setup instead of hanging it; and
#      tests/cli/t7106 (gpu-train --device cuda): fp32 and bf16 losses
#      against the CPU's, an exact resume, NCCL on the device in a world
#      of one, 2 ranks through the host and (2 GPUs) over NCCL; and
#      tests/cli/t7119 (gpu-train --zero 3 over NCCL, 2 GPUs; 3 for one case);
#      tests/cli/t7123 (gpu-train --pp on GPUs, 2 GPUs): a pipeline's
#      losses against one GPU's and the CPU pipeline's, its checkpoint
#      resumed on one GPU and on the CPU, pp 2 x dp 2 over NCCL, ZeRO 0
#      and 1 (4 GPUs), --sample through the stages against one GPU's and
#      the CPU's tokens; tests/cli/t7124 (gpu-train --tp on GPUs, 2 GPUs):
#      a tensor group's losses against one GPU's and the CPU's --tp,
#      its checkpoint resumed on one GPU and on the CPU, tp 2 x dp 2
#      over NCCL, ZeRO 0 and 1 and --compress int8 (4 GPUs), --sample
#      through the group against one GPU's and the CPU's tokens;
#      tests/cli/t7127 (gpu-train --tp --sequence-parallel on GPUs, 2
#      GPUs): against one GPU and the CPU, tp 2 x dp 2 under ZeRO 1, 2
#      and 3 (4 GPUs);
#   3. make check, the whole suite, on this machine;
#   4. the benchmarks: tools/bench/train_gpu.sh (GPT-2 124M tok/s and MFU
#      against PyTorch) and allreduce-bench against all_reduce_perf.
# Exit 0 when all of it passed with a device, 1 otherwise.
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
quick= out=build/gpu-suite
while getopts qo: opt; do
	case $opt in
	q) quick=1 ;;
	o) out=$OPTARG ;;
	*) sed -n '4,8s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
	esac
done
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
if [ -x build/offline-deps/env ]; then
	eval "$(build/offline-deps/env)"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
step() { printf '%-60s' "$1"; }
pass() { echo "ok"; }
bad() { echo "FAILED ($1)"; fail=1; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$out/gpus" 2>&1; then
	echo "gpu-suite: no GPU here (nvidia-smi -L failed); nothing to run" >&2
	exit 1
fi
sed 's/^/# /' "$out/gpus"
# the versions a result depends on: the driver (and the CUDA it supports),
# the toolkit built with, the NCCL headers and the library found at run time
nvidia-smi | sed -n 's/.*\(Driver Version: *[0-9.]*\).*\(CUDA Version: *[0-9.]*\).*/# \1, \2/p'
"${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>/dev/null | sed -n 's/^Cuda compilation tools, /# nvcc: /p'

step "build (CUDA=1)"
if make -j"$(nproc)" CUDA=1 all >"$out/build.log" 2>&1 &&
   make -j"$(nproc)" CUDA=1 build/tests/unit/cuda_core build/tests/unit/comm_cuda \
	build/tests/unit/core_half build/tests/unit/nn_cuda build/tests/unit/nn_flash \
	>>"$out/build.log" 2>&1; then
	pass
else
	bad "see $out/build.log"
	exit 1
fi

sanitizer=
for s in compute-sanitizer "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer"; do
	if command -v "$s" >/dev/null 2>&1; then
		sanitizer=$s
		break
	fi
done

for t in cuda_core comm_cuda core_half nn_cuda nn_flash; do
	step "unit: $t"
	if ! build/tests/unit/$t >"$out/$t.tap" 2>&1; then
		bad "see $out/$t.tap"
	elif grep -qi "# SKIP" "$out/$t.tap"; then
		bad "skipped on a GPU machine: $(grep -i -m1 '# SKIP' "$out/$t.tap")"
	else
		pass
	fi
	if [ -n "$sanitizer" ] && [ "$t" != cuda_core ]; then
		for tool in memcheck racecheck; do
			step "unit: $t under compute-sanitizer $tool"
			# API errors are the tests' own to check (and
			# cudaEventQuery's "not ready" is one by design)
			if "$sanitizer" --tool $tool --report-api-errors no \
				--error-exitcode 99 build/tests/unit/$t \
				>"$out/$t.$tool" 2>&1; then
				pass
			else
				bad "see $out/$t.$tool"
			fi
		done
	fi
done

# The CLI tests with device runs: only the no-GPU tests, the multi-GPU
# ones on a machine with fewer GPUs (2, 3 or 4), and the emulation's own
# fault cases may skip.
for t in t6002-allreduce-bench-nccl t7106-gpu-train-device t7119-gpu-train-zero3-device t7123-gpu-train-pp-device \
	t7124-gpu-train-tp-device t7127-gpu-train-tp-sp-device; do
	step "cli: $t"
	if ! tests/cli/$t.sh -v >"$out/$t.log" 2>&1; then
		bad "see $out/$t.log"
	elif sed -n 's/.*# skip .*(missing \([^ )]*\).*/\1/p' "$out/$t.log" |
		tr , '\n' | grep -qvx 'NOGPU\|GPUS\|GPUS3\|GPUS4\|CUEMU'; then
		bad "device tests skipped: $(grep -m1 '# skip' "$out/$t.log")"
	else
		pass
	fi
done

if [ -z "$quick" ]; then
	step "make check (the whole suite)"
	if make CUDA=1 check >"$out/check.log" 2>&1; then
		pass
	else
		bad "see $out/check.log"
	fi
fi

# 4. The benchmarks, reported (a failure to run is a failure, a figure
#    below its goal is not): GPT-2 124M tok/s and MFU against PyTorch
#    on this GPU, and allreduce-bench --backend nccl against nccl-tests'
#    all_reduce_perf (goal: busbw within 5 %; algbw on one GPU, where
#    busbw is 0) when all_reduce_perf is on PATH.
step "bench: gpu-train on the GPU (tools/bench/train_gpu.sh)"
if GK_BUILD=build sh tools/bench/train_gpu.sh >"$out/train_gpu.txt" 2>&1; then
	pass
	sed 's/^/# /' "$out/train_gpu.txt"
else
	bad "see $out/train_gpu.txt"
fi

step "bench: allreduce-bench --backend nccl against all_reduce_perf"
ngpu=$(grep -c '^GPU' "$out/gpus")
args="-b 1M -e 256M -f 4 -n 50 -w 10"
if ! command -v all_reduce_perf >/dev/null 2>&1; then
	echo "not run (nccl-tests' all_reduce_perf is not on PATH)"
elif if [ "$ngpu" -gt 1 ]; then
	mpirun --bind-to none -np "$ngpu" bin/allreduce-bench --backend nccl $args &&
		mpirun --bind-to none -np "$ngpu" all_reduce_perf $args
     else
	bin/allreduce-bench --backend nccl $args && all_reduce_perf $args
     fi >"$out/busbw.txt" 2>&1; then
	pass
	# the largest size's out-of-place busbw (algbw on one GPU), ours then theirs
	col=$([ "$ngpu" -gt 1 ] && echo 8 || echo 7)
	awk -v c=$col '$1 == 268435456 { v[n++] = $c }
		END { if (n == 2 && v[1] > 0) printf "# 256 MiB: %s vs %s GB/s: %.1f %% (goal >= 95 %%)\n", v[0], v[1], 100 * v[0] / v[1] }' \
		"$out/busbw.txt"
else
	bad "see $out/busbw.txt"
fi

[ $fail = 0 ] && echo "gpu-suite: all passed" || echo "gpu-suite: failures above" >&2
exit $fail
