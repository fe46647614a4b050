#!/bin/sh
# comm.sh - allreduce on 2 ranks: lib/comm's ring and Rabenseifner against
# Open MPI's MPI_Allreduce (its default choice, and each coll_tuned
# algorithm forced) and torch.distributed's gloo backend, at 8 B (latency),
# 1 MiB, 16 MiB and 256 MiB of float32, out-of-place, as nccl-tests
# reports it (time: the mean over the ranks, nccl-tests' -a 1). Runs are
# interleaved and repeated (REPS, default 3); the figures are medians of
# each column on its own (at 8 B busbw rounds to 0.00, so the latency
# median is taken over the time column). Ours is the best of ring,
# rabenseifner (and rd at 8 B); it is compared with Open MPI's default
# MPI_Allreduce and with the best of its coll_tuned algorithms, each
# forced (coll_tuned_use_dynamic_rules 1, coll_tuned_allreduce_algorithm
# 1..6). Two ceilings are printed: the host memcpy bandwidth
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
# gloo needs torch in $GK_BUILD/bench-venv; with GLOO=1 it is installed
# there (pip, 15 minutes at most; the wheels are gigabytes). Without it
# the gloo row says n/a.
set -eu

B=${GK_BUILD:-build}
REPS=${REPS:-3}
BENCH=${BENCH:-bin/allreduce-bench}
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
if [ "${GLOO:-0}" = 1 ] && ! "$venv/bin/python" -c 'import torch.distributed' 2>/dev/null; then
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

# Medians per (size, name), of the time and the busbw columns separately:
# sorting whole lines on busbw would tie at 8 B (0.00 everywhere) and fall
# back to comparing the lines as text.
awk -v mc="$mc" -v gloo="$gloo" '
function median(list,    v, n, i, j, x) {
	n = split(list, v, " ")
	for (i = 2; i <= n; i++) {      # insertion sort, numeric
		x = v[i] + 0
		for (j = i - 1; j >= 1 && v[j] + 0 > x; j--)
			v[j + 1] = v[j]
		v[j + 1] = x
	}
	return v[int((n + 1) / 2)]
}
{
	k = $1 SUBSEP $2
	tl[k] = tl[k] " " $3
	bl[k] = bl[k] " " $4
	if (!($2 in seen)) { seen[$2] = 1; names[++nn] = $2 }
}
END {
	for (k in tl) { t[k] = median(tl[k]); b[k] = median(bl[k]) }
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
	if (!gloo) printf "%-28s %12s %12s %12s %12s  (no torch; GLOO=1 installs it)\n", "gloo", "n/a", "n/a", "n/a", "n/a"

	# ours and Open MPI best-forced, per size: latency at 8 B, busbw above
	for (j = 1; j <= nsz; j++) {
		s = S[j]
		ours[s] = ""; tuned[s] = ""
		for (i = 1; i <= nn; i++) {
			nm = names[i]
			if (!((s, nm) in b)) continue
			mine = nm == "ring" || nm == "rabenseifner" || (s == 8 && nm == "rd")
			forced = nm ~ /^ompi-/ && nm != "ompi-default"
			if (mine && (ours[s] == "" || better(s, nm, ours[s]))) ours[s] = nm
			if (forced && (tuned[s] == "" || better(s, nm, tuned[s]))) tuned[s] = nm
		}
	}
	printf "\nbest of ours, and best forced Open MPI algorithm:\n"
	printf "%-20s %18s %18s %18s %18s\n", "", "8 B", "1 MiB", "16 MiB", "256 MiB"
	printf "%-20s", "ours: best"
	for (j = 1; j <= nsz; j++) printf " %18s", ours[S[j]]
	printf "\n%-20s", "ompi forced: best"
	for (j = 1; j <= nsz; j++) printf " %18s", substr(tuned[S[j]], 6)
	printf "\n\nratios (above 1: ours is better; 8 B: their time / ours, else our busbw / theirs):\n"
	printf "%-28s %12s %12s %12s %12s\n", "", "8 B", "1 MiB", "16 MiB", "256 MiB"
	nr = split("ompi-default tuned gloo", R, " ")
	for (r = 1; r <= nr; r++) {
		if (R[r] != "tuned" && !((1048576, R[r]) in b)) continue
		printf "%-28s", "ours / " (R[r] == "tuned" ? "ompi best forced" : R[r])
		for (j = 1; j <= nsz; j++) {
			s = S[j]; o = ours[s]; th = R[r] == "tuned" ? tuned[s] : R[r]
			if (o == "" || th == "" || !((s, th) in b)) { printf " %12s", "n/a"; continue }
			if (s == 8) printf " %11.2fx", t[s, th] / t[s, o]
			else printf " %11.2fx", b[s, o] / b[s, th]
		}
		printf "\n"
	}
	printf "%-28s", "ours busbw / memcpy"
	for (j = 1; j <= nsz; j++) {
		s = S[j]
		if (s == 8 || ours[s] == "") printf " %12s", "-"; else printf " %11.0f%%", 100 * b[s, ours[s]] / mc
	}
	printf "\n"
}
# at 8 B the lower time wins, above it the higher busbw
function better(s, x, y) { return s == 8 ? t[s, x] < t[s, y] : b[s, x] > b[s, y] }
' "$raw" | tee "$out/summary.txt"
