#!/bin/sh
# mem.sh - mem-estimate's wall time per process against references, one run,
# medians of many runs side by side:
#   - a DeepSpeed-style estimate in Python (estimate_zero2/3 formulas, model
#     states only, no activations): what users run today;
#   - the Python interpreter starting and doing nothing (the floor any
#     Python estimator pays).
# Targets: one estimate well under 10 ms; --fit over thousands of candidates
# under 100 ms.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${GK_BUILD:-build}
t="$top/$B/tools/bench/mem"
me="$top/bin/mem-estimate"
cfg="$top/tests/data/mem/llama-2-7b.json"
runs=${RUNS:-200}
# the system interpreter, not a version-manager shim that adds its own start-up
py=/usr/bin/python3
test -x "$py" || py=$(command -v python3)

ds='
P, N, LL = 6738415616, 8, 131072000
gpu2 = 2 * P + int(18 * P / N)
gpu3 = 4 * LL + int(18 * P / N)
print("%.2f GiB %.2f GiB" % (gpu2 / 2**30, gpu3 / 2**30))
'
tries=$("$me" --config "$cfg" --gpu A100-80 --world 64 --global-batch 512 --json |
	sed -n 's/.*"tried": \([0-9]*\).*/\1/p')

row() { # variable, label, then the command; the median goes to the variable
	var=$1 label=$2
	shift 2
	set -- $("$t" "$runs" "$@")
	printf '%-44s %9s %9s\n' "$label" "$1" "$2"
	eval "$var=$1"
}

echo "mem-estimate bench: $runs runs each, wall ms per process (median, min)"
printf '%-44s %9s %9s\n' "command" "median" "min"
row py0 "python3 -c pass (interpreter start)" "$py" -c pass
row pyds "python3 DeepSpeed-style estimate" "$py" -c "$ds"
row one "mem-estimate --config (one estimate)" "$me" --config "$cfg" --dp 8 --zero 2
row expl "mem-estimate --explain --json" "$me" --config "$cfg" --dp 8 --zero 2 --explain --json
row fit "mem-estimate --gpu A100-80 ($tries tried)" "$me" --config "$cfg" --gpu A100-80 --world 64 --global-batch 512
awk -v a="$py0" -v d="$pyds" -v o="$one" -v f="$fit" 'BEGIN {
	printf "ratio: python3 start / one estimate        = %6.1fx\n", a / o
	printf "ratio: DeepSpeed-style python / one estimate = %6.1fx\n", d / o
	printf "ratio: DeepSpeed-style python / full --fit   = %6.1fx\n", d / f
	printf "targets: one estimate %s < 10 ms, --fit %s < 100 ms\n", o, f
}'
