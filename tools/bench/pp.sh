#!/bin/sh
# pp.sh - gpu-train's model parallelism on the CPU (mpirun, one thread a
# rank): the pipeline's measured bubble against (N-1)/m (1F1B) and
# (N-1)/(V m) (the interleaved schedule), and the tensor
# group's bytes a step against their formula.
#
# Pipeline: a balanced model (LAYERS, default 8, divisible by every N of
# PPS, default "2 4": the same layers on every stage), byte vocabulary
# (its embedding and head are small beside the layers, so the first and
# last stages do about the work of the others), d HIDDEN 256, 4 heads,
# T SEQ 128, batch BATCH 4, 1F1B, for m = 1, 2, 4 and 8 micro-batches (MBS). For
# each, the median over the timed steps (the first two are warm-up) of
# the step line's pp_bubble, the pipeline's idle time over its busy time
# from the stages' own clocks (gpu-train(1), --pp), beside (N-1)/m and
# their ratio (target: within 20 %), and each stage's bubble.
#
# Ranks that share cores: a stage's busy time is its compute as it runs
# here, waiting for its share of a core included. With N stages on fewer
# cores than N, the warm-up and cool-down, when fewer stages compute, run
# faster than the steady state, when all compete, so the idle time of the
# ramps shrinks against the busy time and the bubble is below (N-1)/m:
# the column "shared" is what the same schedule gives on this machine's
# cores shared fairly, messages free (tools/bench/pp_sim.py), beside
# "ratio", measured over (N-1)/m (the target's); only N <= cores measures
# the schedule as dedicated devices would run it.
# Other load on the machine breaks both references: with more runnable
# processes than cores, a rank's share of a core depends little on how
# many of the stages compute (toward (N-1)/m again), each message's
# receiver waits to be scheduled again (idle time on its clock, more so
# the shorter the stages' compute), and preemption in the middle of a
# stage's compute spreads its busy time from step to step; the load
# average is printed, and the figures are comparable only at a low one.
#
# Interleaved: --pp-schedule interleaved --pp-chunks V (CHUNKS, default
# 2) on the same model and micro-batch counts, where m is a multiple of N
# and LAYERS of N x V: the measured bubble beside (N-1)/(V m), the
# simulator's figure on this machine's cores (pp_sim.py ... V), and
# 1F1B's, measured above, over it (about V when the ramps dominate).
#
# Tensor parallel: --tp 2 on LAYERS layers, 2 micro-batches, and tp 2 x
# pp 2 per stage: the step line's tp_comm_bytes (rank 0's) and each
# stage's, against 4 m ((4 L + 2) N C + 3 N) bytes, N = B x T rows:
# 4 allreduces of N x C floats a layer (2 forward after the row-parallel
# layers, 2 backward before the column-parallel ones), the
# vocabulary-parallel embedding's sum and the head's gradient (N C each),
# the cross-entropy's max, target logit and sum of exponentials (3 N);
# under --pp the first stage has the embedding's and the last the rest.
# A figure off its formula fails the driver.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${GK_BUILD:-build}
STEPS=${STEPS:-8}
LAYERS=${LAYERS:-8}
HIDDEN=${HIDDEN:-256}
PPS=${PPS:-2 4}
MBS=${MBS:-1 2 4 8}
. "$top/tools/bench/lib.sh"
bench_setup pp.sh
bench_tokens "$tmp/train.bin"
cores=$(getconf _NPROCESSORS_ONLN)
Bt=${BATCH:-4}
T=${SEQ:-128}

args="--data $tmp/train.bin --layers $LAYERS --hidden $HIDDEN --heads 4 --positions $T --seq $T
	--batch $Bt --schedule constant --lr 3e-4 --clip 0 --threads 1 --json"
ours() {
	n=$1
	shift
	mpirun --oversubscribe --bind-to none -np "$n" "$top/bin/gpu-train" $args "$@"
}

machine_line
echo "model: $LAYERS layers, d $HIDDEN, T $T, batch $Bt, byte vocabulary; steps: $STEPS (medians of steps 3..$STEPS)"
echo
echo "pipeline bubble (1F1B), idle / busy time of the stages:"
printf '  %-4s %-3s %9s %9s %9s %7s  %-9s %s\n' N m "(N-1)/m" shared measured ratio "step ms" "per stage (median)"
for n in $PPS; do
	for m in $MBS; do
		ours "$n" --pp "$n" --grad-accum "$m" --steps "$STEPS" >"$tmp/pp.json" 2>"$tmp/pp.err" || {
			cat "$tmp/pp.err" >&2
			echo "pp.sh: --pp $n --grad-accum $m failed" >&2
			exit 1
		}
		want=$(awk -v n="$n" -v m="$m" 'BEGIN { printf "%.4f", (n - 1) / m }')
		got=$(steps "$tmp/pp.json" pp_bubble | med)
		ms=$(steps "$tmp/pp.json" step_ms | med)
		per=
		k=0
		while [ $k -lt "$n" ]; do
			per="$per $(num %.3f "$(steps "$tmp/pp.json" "pp_stages[$k].bubble" | med)")"
			k=$((k + 1))
		done
		share=
		shared=-
		if [ "$n" -gt "$cores" ]; then
			shared=$(python3 "$top/tools/bench/pp_sim.py" "$n" "$m" "$cores")
			share="  ($n ranks on $cores cores: $(ratio "$got" "$shared") x shared)"
		fi
		r=$(ratio "$got" "$want")
		within=$(awk -v r="$r" 'BEGIN { if (r ~ /^[0-9.]+$/) print (r >= 0.8 && r <= 1.2) ? "within 20 %" : "OUTSIDE 20 %"; else print "n/a" }')
		printf '  %-4s %-3s %9s %9s %9s %7s  %-9s%s  %s%s\n' "$n" "$m" "$want" "$shared" "$(num %.4f "$got")" \
			"$r" "$(num %.0f "$ms")" "$per" "$within" "$share"
	done
done

VS=${CHUNKS:-2}
echo
echo "pipeline bubble (interleaved, $VS chunks a stage), idle / busy time of the stages:"
printf '  %-4s %-3s %11s %9s %9s %7s  %-9s %s\n' N m "(N-1)/(Vm)" shared measured ratio "step ms" "1f1b/interleaved"
for n in $PPS; do
	for m in $MBS; do
		[ $((m % n)) = 0 ] && [ $((LAYERS % (n * VS))) = 0 ] || continue
		ours "$n" --pp "$n" --grad-accum "$m" --steps "$STEPS" --pp-schedule interleaved \
			--pp-chunks "$VS" >"$tmp/ppi.json" 2>"$tmp/ppi.err" || {
			cat "$tmp/ppi.err" >&2
			echo "pp.sh: --pp $n --grad-accum $m interleaved failed" >&2
			exit 1
		}
		ours "$n" --pp "$n" --grad-accum "$m" --steps "$STEPS" >"$tmp/pp.json" 2>"$tmp/pp.err" || {
			cat "$tmp/pp.err" >&2
			exit 1
		}
		want=$(awk -v n="$n" -v m="$m" -v v="$VS" 'BEGIN { printf "%.4f", (n - 1) / (v * m) }')
		got=$(steps "$tmp/ppi.json" pp_bubble | med)
		f1=$(steps "$tmp/pp.json" pp_bubble | med)
		ms=$(steps "$tmp/ppi.json" step_ms | med)
		shared=$(python3 "$top/tools/bench/pp_sim.py" "$n" "$m" "$cores" 2 "$VS")
		printf '  %-4s %-3s %11s %9s %9s %7s  %-9s %s\n' "$n" "$m" "$want" "$shared" \
			"$(num %.4f "$got")" "$(ratio "$got" "$want")" "$(num %.0f "$ms")" "$(ratio "$f1" "$got")"
	done
done

# Tensor parallel: the bytes are exact, two steps are enough.
m=2
N=$((Bt * T))
C=$HIDDEN
L=$LAYERS
echo
echo "tensor-parallel bytes a step (m $m, N = B x T = $N, C $C, L $L):"
ours 2 --tp 2 --grad-accum $m --steps 2 >"$tmp/tp.json" 2>"$tmp/tp.err" || {
	cat "$tmp/tp.err" >&2
	echo "pp.sh: --tp 2 failed" >&2
	exit 1
}
got=$(jq -r 'select(.event == "step") | .tp_comm_bytes' "$tmp/tp.json" | med)
layers=$((4 * m * 4 * L * N * C))
rest=$((4 * m * (2 * N * C + 3 * N)))
want=$((layers + rest))
bad=0
check() {
	if [ "$2" = "$3" ]; then s="= formula"; else s="OFF the formula"; bad=1; fi
	printf '  %-34s %12s  formula %12s  %s\n' "$1" "$2" "$3" "$s"
}
check "tp 2, rank 0" "$got" "$want"
printf '  %-34s %12s  (4 allreduces of N x C floats a layer, 4 m 4 L N C)\n' "  of which the layers" "$layers"
printf '  %-34s %12s  (embedding and head N C each, cross-entropy 3 N: 4 m (2 N C + 3 N))\n' \
	"  and the vocabulary-parallel ends" "$rest"
# tp 2 x pp 2: half the layers a stage
ours 4 --tp 2 --pp 2 --grad-accum $m --steps 2 >"$tmp/tppp.json" 2>"$tmp/tppp.err" || {
	cat "$tmp/tppp.err" >&2
	echo "pp.sh: --tp 2 --pp 2 failed" >&2
	exit 1
}
Ls=$((L / 2))
check "tp 2 x pp 2, stage 0" \
	"$(jq -r 'select(.event == "step") | .pp_stages[0].tp_comm_bytes' "$tmp/tppp.json" | med)" \
	$((4 * m * ((4 * Ls + 1) * N * C)))
check "tp 2 x pp 2, stage 1" \
	"$(jq -r 'select(.event == "step") | .pp_stages[1].tp_comm_bytes' "$tmp/tppp.json" | med)" \
	$((4 * m * ((4 * Ls + 1) * N * C + 3 * N)))
load_line
[ $bad = 0 ] || { echo "pp.sh: tensor-parallel bytes off their formula" >&2; exit 1; }
