#!/bin/sh
# topo.sh - gpu-topo's wall time beside lstopo's on the same topology.
#
# Runs each command RUNS times alternately (so drift hits both alike) and
# prints the medians and their ratio: this machine (gpu-topo's default
# matrix against `lstopo-no-graphics --of console`), then a hand-written XML
# of a two-socket GPU server loaded by both. Target: gpu-topo well under
# 50 ms on this machine.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-21}
gt="$top/bin/gpu-topo"
xml="$top/tests/data/topo/two-socket-switches.xml"
command -v lstopo-no-graphics >/dev/null || { echo "topo.sh: lstopo-no-graphics not found" >&2; exit 1; }
test -x "$gt" || { echo "topo.sh: build bin/gpu-topo first (make)" >&2; exit 1; }

now_ns() { date +%s%N; }

# median of the numbers on stdin
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

bench() { # name, then two commands as strings
	name=$1 a=$2 b=$3
	: >"$tmp/a" && : >"$tmp/b"
	i=0
	while [ $i -lt "$RUNS" ]; do
		t0=$(now_ns); sh -c "$a" >/dev/null 2>&1; t1=$(now_ns)
		sh -c "$b" >/dev/null 2>&1; t2=$(now_ns)
		echo $(( (t1 - t0) / 1000 )) >>"$tmp/a"
		echo $(( (t2 - t1) / 1000 )) >>"$tmp/b"
		i=$((i + 1))
	done
	ma=$(median <"$tmp/a") mb=$(median <"$tmp/b")
	awk -v n="$name" -v a="$ma" -v b="$mb" -v r="$RUNS" 'BEGIN {
		printf "%-28s gpu-topo %7.1f ms   lstopo %7.1f ms   ratio %.2f   (median of %d)\n",
			n, a / 1000, b / 1000, a / b, r }'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "# gpu-topo vs lstopo-no-graphics, wall time including process start"
echo "# load average: $(cut -d " " -f1-3 /proc/loadavg) on $(nproc) CPUs"
bench "this machine" "'$gt' -q" "lstopo-no-graphics --of console"
bench "this machine, --json" "'$gt' -q --json" "lstopo-no-graphics --of xml -"
bench "two-socket-switches.xml" "'$gt' -q -i '$xml'" "lstopo-no-graphics -i '$xml' --of console"
