# lib.sh - what the gpu-train drivers (train.sh, zero.sh, pp.sh) share,
# sourced after they set top (the source tree). Not a driver itself: the
# Makefile's bench target runs tools/bench/*.sh, and this file runs
# nothing when sourced but defines:
#
#   bench_setup NAME   mpirun as root allowed; without mpirun, says
#                      "NAME: no mpirun; skipped" and exits 0; tmp, a
#                      temporary directory removed on exit; load0, the
#                      load average now
#   bench_tokens FILE  token data: the project's own sources as bytes, in
#                      llm.c's format
#   bench_torch        py, the test venv's python when it has torch,
#                      transformers and gloo (scripts/test-venv), else empty
#   med                the median of the numbers on stdin, one a line
#                      ("nan" when there is none)
#   num FMT X          X printed with FMT when it is a number, else as is
#   ratio A B          A / B to 2 decimals, or n/a
#   steps FILE FIELD   FIELD of each step line past the warm-up (steps
#                      1 and 2) of a --json run
#   anchor             gpu-train's options for the anchor of train.sh and
#                      zero.sh, train_ddp.py's model and training: 4
#                      layers, d 256, 4 heads, T 128, batch 8 a rank,
#                      byte vocabulary, constant lr 3e-4, no clipping, one
#                      thread, 1 MiB buckets, --json
#   machine_line       "machine: CPU, N CPUs"
#   load_line          "load average: BEFORE before, NOW after"

anchor="--layers 4 --hidden 256 --heads 4 --positions 128 --seq 128 --batch 8
	--schedule constant --lr 3e-4 --clip 0 --threads 1 --bucket 1M --json"

bench_setup() {
	OMPI_ALLOW_RUN_AS_ROOT=1
	OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
	command -v mpirun >/dev/null 2>&1 || { echo "$1: no mpirun; skipped"; exit 0; }
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/gk-${1%.sh}-bench.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
}

bench_tokens() {
	python3 - "$top" "$1" <<'PY'
import glob, struct, sys
b = b"".join(open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/lib/*/*.c")))
h = [20240520, 1, len(b)] + [0] * 253
open(sys.argv[2], "wb").write(struct.pack("<256i", *h) + b"".join(struct.pack("<H", c) for c in b))
PY
}

bench_torch() {
	py=$("$top/scripts/test-venv" 2>/dev/null) || py=
	if [ -n "$py" ] && ! "$py" -c 'import torch.distributed as d, transformers; assert d.is_gloo_available()' 2>/dev/null; then
		py=
	fi
}

med() {
	sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'
}

num() { awk -v x="$2" -v f="$1" 'BEGIN { if (x ~ /^[0-9.eE+-]+$/) printf f, x; else printf "%s", x }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.eE+-]+$/ && b ~ /^[0-9.eE+-]+$/ && b > 0) printf "%.2f", a / b; else printf "n/a" }'; }

steps() { jq -r "select(.event == \"step\" and .step > 2) | .$2" "$1"; }

machine_line() {
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
	echo "machine: ${cpu:-unknown CPU}, $(getconf _NPROCESSORS_ONLN) CPUs"
}

load_line() {
	echo "load average: $load0 before, $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) after"
}
