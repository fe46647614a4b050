#!/bin/sh
# zero_pp.sh - gpu-train's ZeRO-3 over a pipeline, pp 2 x dp 2 (4 ranks
# of one thread, mpirun), with the blocks' gathers prefetched in the
# schedule's order (--overlap on) and without (--overlap off), on
# train.sh's anchor model (4 layers, d 256, 4 heads, T 128, byte
# vocabulary), 1F1B, 4 micro-batches of 2 sequences a data-parallel rank.
#
# Prints, for each side, the median over the timed steps (the first two
# are warm-up) of tokens a second of the whole job and of the exposed
# communication (the step line's exposed_comm_ms: the waits for the
# gathers and the reduction), per round and the median of the rounds;
# the two run in turn, ROUNDS times each (default 3), so that both meet
# the same load as it drifts on a shared machine; rank 0's gathers a
# step and those prefetched; and the first steps' losses of both, which
# must be the same bits. 4 ranks on fewer cores share them: the gather
# in flight competes with the compute for a core, as train.sh's overlap
# does (gpu-train(1), --overlap).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${STEPS:-12}
ROUNDS=${ROUNDS:-3}
NLOSS=3
. "$top/tools/bench/lib.sh"
bench_setup zero_pp.sh
bench_tokens "$tmp/train.bin"

args="--data $tmp/train.bin $anchor --batch 2 --grad-accum 4 --pp 2 --zero 3 --steps $STEPS"
ours() {
	mpirun --oversubscribe --bind-to none -np 4 "$top/bin/gpu-train" $args "$@"
}
losses() { jq -r "select(.event == \"step\" and .step <= $NLOSS) | .loss" "$1"; }

for f in on off onx offx; do : >"$tmp/$f.txt"; done
r=0
while [ $r -lt "$ROUNDS" ]; do
	for o in on off; do
		ours --overlap $o >"$tmp/$o.json"
		steps "$tmp/$o.json" tokens_per_s | med >>"$tmp/$o.txt"
		steps "$tmp/$o.json" exposed_comm_ms | med >>"$tmp/${o}x.txt"
	done
	r=$((r + 1))
done

machine_line
load_line
echo "rounds: $ROUNDS, steps: $STEPS (medians of steps 3..$STEPS, then of rounds)"
for o in on off; do
	printf '%-30s %10s  (rounds: %s)\n' "--overlap $o tok/s" "$(num %.0f "$(med <"$tmp/$o.txt")")" \
		"$(awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 }' "$tmp/$o.txt")"
	printf '%-30s %10s  (rounds: %s)\n' "--overlap $o exposed comm ms" \
		"$(num %.0f "$(med <"$tmp/${o}x.txt")")" \
		"$(awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 }' "$tmp/${o}x.txt")"
	printf '%-30s %10s  (%s prefetched)\n' "--overlap $o gathers a step" \
		"$(steps "$tmp/$o.json" param_gathers | med)" "$(steps "$tmp/$o.json" param_prefetched | med)"
done
printf '%-30s %10s\n' "ratio tok/s on / off" "$(ratio "$(med <"$tmp/on.txt")" "$(med <"$tmp/off.txt")")"
losses "$tmp/on.json" >"$tmp/lon"
losses "$tmp/off.json" >"$tmp/loff"
if cmp -s "$tmp/lon" "$tmp/loff"; then
	echo "loss, steps 1..$NLOSS: the same bits with and without prefetch"
else
	echo "zero_pp.sh: the losses with and without prefetch differ" >&2
	exit 1
fi
