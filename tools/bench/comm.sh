#!/bin/sh
# comm.sh - allreduce on 2 ranks: lib/comm's ring and Rabenseifner against
# Open MPI's MPI_Allreduce (its default choice, and each coll_tuned
# algorithm forced) and torch.distributed's gloo backend, at 8 B (latency),
# 1 MiB, 16 MiB and 256 MiB of float32, out-of-place, as nccl-tests
# reports it. Runs are interleaved and repeated (REPS, default 5); the
# figures are medians. Two ceilings are printed: the host memcpy bandwidth
# of one process, and p2p-exchange, an allgather of 2 ranks (one exchange
# of half the buffer each way, whose busbw is the rate one rank receives
# at), which is what an allreduce's busbw can reach between processes.
#
# Why busbw stays well below memcpy on one host: with 2 ranks each rank,
# per S bytes of allreduce, copies S/2 in (reduce-scatter), reduces S/2
# (two reads and a write) and copies S/2 in again (allgather): about 3.5S
# bytes of memory traffic against memcpy's 2S for S bytes, and both ranks
# share the memory bus, so the ceiling is near 2/3.5/2 = 29% of one
# process's memcpy bandwidth, less on a loaded machine.
#
# gloo needs torch: it is installed into $GK_BUILD/bench-venv on first use
# (pip, 15 minutes at most); when that fails its column says n/a.
set -eu

B=${GK_BUILD:-build}
REPS=${REPS:-3}
BENCH=bin/allreduce-bench
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
out=$B/bench/comm
mkdir -p "$out"
raw=$out/raw.txt
: >"$raw"

command -v mpirun >/dev/null 2>&1 || { echo "comm.sh: no mpirun; skipped"; exit 0; }

venv=$B/bench-venv
gloo=0
if ! "$venv/bin/python" -c 'import torch.distributed' 2>/dev/null; then
	echo "comm.sh: installing torch into $venv for the gloo reference" >&2
	{ python3 -m venv "$venv" && timeout 900 "$venv/bin/pip" install -q torch; } >&2 || true
fi
if "$venv/bin/python" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
	gloo=1
fi

sizes="8 1048576 16777216 268435456"
# name and the mpirun/bench arguments for each contender
tuned_names="basic_linear nonoverlapping recursive_doubling ring segmented_ring rabenseifner"

iters() {
	case $1 in
	8) echo "-n 2000 -w 200" ;;
	1048576) echo "-n 40 -w 5" ;;
	16777216) echo "-n 8 -w 2" ;;
	*) echo "-n 2 -w 1" ;;
	esac
}

# One run: append "size name time_us busbw" (the out-of-place columns).
run() {
	size=$1 name=$2
	shift 2
	line=$(timeout 600 "$@" | awk '!/^#/ && NF >= 13 { print $6, $8 }')
	[ -n "$line" ] || { echo "comm.sh: $name at $size failed" >&2; exit 1; }
	echo "$size $name $line" >>"$raw"
}

memcpy_bw=
for rep in $(seq "$REPS"); do
	for s in $sizes; do
		it=$(iters "$s")
		for a in ring rabenseifner rd; do
			run "$s" "$a" mpirun -np 2 "$BENCH" -b "$s" -e "$s" $it -c 0 --algo "$a"
		done
		# One exchange of size/2 each way: the point-to-point ceiling.
		run "$s" p2p-exchange mpirun -np 2 "$BENCH" -b "$s" -e "$s" $it -c 0 \
			--collective allgather --algo native
		run "$s" ompi-default mpirun -np 2 "$BENCH" -b "$s" -e "$s" $it -c 0 --algo native
		k=1
		for t in $tuned_names; do
			run "$s" "ompi-$t" mpirun -np 2 --mca coll_tuned_use_dynamic_rules 1 \
				--mca coll_tuned_allreduce_algorithm $k \
				"$BENCH" -b "$s" -e "$s" $it -c 0 --algo native
			k=$((k + 1))
		done
		if [ $gloo = 1 ]; then
			n=$(echo "$it" | awk '{ print $2 }') w=$(echo "$it" | awk '{ print $4 }')
			g=$("$venv/bin/python" tools/bench/comm_gloo.py "$s" "$n" "$w" 2>/dev/null | awk '/^gloo/ { print $3, $4 }')
			[ -n "$g" ] && echo "$s gloo $g" >>"$raw"
		fi
	done
	m=$("$BENCH" -b 256M -e 256M -n 1 -w 0 -c 0 | sed -n 's/^# memcpy bandwidth *: \([0-9.]*\) GB.*/\1/p')
	memcpy_bw="$memcpy_bw $m"
done
mc=$(echo $memcpy_bw | tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')

# Medians per (size, name).
sort -k1,1n -k2,2 -k4,4g "$raw" | awk -v mc="$mc" -v gloo="$gloo" '
function flush() {
	if (key == "") return
	split(key, k, " ")
	t[k[1], k[2]] = tv[int((n + 1) / 2)]
	b[k[1], k[2]] = bv[int((n + 1) / 2)]
}
{
	cur = $1 " " $2
	if (cur != key) { flush(); key = cur; n = 0 }
	n++; bv[n] = $4; tv[n] = $3
	if (!($2 in seen)) { seen[$2] = 1; names[++nn] = $2 }
	sz[$1] = 1
}
END {
	flush()
	nsz = split("8 1048576 16777216 268435456", S, " ")
	printf "allreduce, 2 ranks, float32, out-of-place; medians of runs; memcpy %.2f GB/s\n\n", mc
	printf "%-28s %12s %12s %12s %12s\n", "busbw GB/s (8 B: time us)", "8 B", "1 MiB", "16 MiB", "256 MiB"
	for (i = 1; i <= nn; i++) {
		nm = names[i]
		printf "%-28s", nm
		for (j = 1; j <= nsz; j++) {
			s = S[j]
			if ((s, nm) in b) {
				if (s == 8) printf " %10.2fus", t[s, nm]; else printf " %12.3f", b[s, nm]
			} else printf " %12s", "n/a"
		}
		printf "\n"
	}
	if (!gloo) printf "%-28s %12s %12s %12s %12s  (torch not installable)\n", "gloo", "n/a", "n/a", "n/a", "n/a"
	printf "\nratios (ours: the best of ring and rabenseifner; at 8 B also rd):\n"
	printf "%-28s %12s %12s %12s %12s\n", "", "8 B", "1 MiB", "16 MiB", "256 MiB"
	split("ompi-default gloo", R, " ")
	for (r = 1; r <= 2; r++) {
		if (!((1048576, R[r]) in b)) continue
		printf "%-28s", "ours / " R[r]
		for (j = 1; j <= nsz; j++) {
			s = S[j]
			if (s == 8) {
				best = t[s, "ring"] < t[s, "rabenseifner"] ? t[s, "ring"] : t[s, "rabenseifner"]
				best = t[s, "rd"] < best ? t[s, "rd"] : best
				printf " %11.2fx", t[s, R[r]] / best   # latency: their time / ours
			} else {
				best = b[s, "ring"] > b[s, "rabenseifner"] ? b[s, "ring"] : b[s, "rabenseifner"]
				printf " %11.2fx", best / b[s, R[r]]
			}
		}
		printf "\n"
	}
	printf "%-28s", "ours busbw / memcpy"
	for (j = 1; j <= nsz; j++) {
		s = S[j]
		best = b[s, "ring"] > b[s, "rabenseifner"] ? b[s, "ring"] : b[s, "rabenseifner"]
		if (s == 8) printf " %12s", "-"; else printf " %11.0f%%", 100 * best / mc
	}
	printf "\n"
}' | tee "$out/summary.txt"
