#!/bin/sh
# train.sh - gpu-train end to end on 2 ranks (mpirun, one thread each)
# against PyTorch DDP over gloo (2 processes, one thread each) on the
# anchor: 4 layers, d 256, 4 heads, T 128, batch 8 per rank, byte
# vocabulary, fp32, AdamW 0.9/0.95 wd 0.1, constant lr.
#
# Prints medians over the timed steps (the first two are warm-up) of
#   tok/s            tokens per second of the whole job, and the ratio
#                    gpu-train / DDP (target >= 1.5); the two run in turn,
#                    ROUNDS times each (default 3), and each side's
#                    figure is the median of its rounds. gpu-train runs
#                    with its defaults (--overlap auto: after backward
#                    when the ranks' threads take every core, as here)
#   exposed comm ms  time a step waits for gradients after backward, with
#                    the bucketed allreduce overlapped with backward
#                    (--overlap on) and not (off): overlap should shrink
#                    it; their tok/s say what it costs the cores. 1 MiB
#                    buckets, so a 13 MB model has more than one; the
#                    same for ZeRO-1's bucketed reduces
#   peak RSS         of rank 0 (GNU time) against gpu-train's own total
#                    (target <= 1.2x), and with ZeRO-1 (half the moments
#                    a rank, and nothing added for its collectives) and
#                    ZeRO-2 (half the gradients too, less the buckets in
#                    flight and the tied embedding's rows)
# torch and transformers come from the test venv (scripts/test-venv);
# without them the DDP column says n/a.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${GK_BUILD:-build}
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-3}
. "$top/tools/bench/lib.sh"
bench_setup train.sh
bench_tokens "$tmp/train.bin"

args="--data $tmp/train.bin $anchor --steps $STEPS"
ours() {
	mpirun --oversubscribe --bind-to none -np 2 \
		sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec /usr/bin/time -f "rss_kb=%M" -o "$0" "$@"; else exec "$@"; fi' \
		"$tmp/rss" "$top/bin/gpu-train" $args "$@"
}

bench_torch

# gpu-train and DDP alternate, ROUNDS times each, so that
# both meet the same load as it drifts on a shared machine; each side's
# figure is the median over rounds of a round's median step.
: >"$tmp/tok.txt"
: >"$tmp/ddp.txt"
r=0
while [ $r -lt "$ROUNDS" ]; do
	ours >"$tmp/def.json"
	steps "$tmp/def.json" tokens_per_s | med >>"$tmp/tok.txt"
	# a DDP run that fails or prints no step adds nothing (n/a at the end)
	if [ -n "$py" ] && "$py" "$top/tools/bench/train_ddp.py" "$tmp/train.bin" \
		"$STEPS" >"$tmp/ddp1.txt" 2>/dev/null; then
		v=$(sed -n 's/tok_s=//p' "$tmp/ddp1.txt" | med)
		[ "$v" = nan ] || echo "$v" >>"$tmp/ddp.txt"
	fi
	r=$((r + 1))
done
tok=$(med <"$tmp/tok.txt")
overlap=$(jq -r 'select(.event == "start") | if .overlap then "on" else "off" end' "$tmp/def.json")
ddp=n/a
[ -s "$tmp/ddp.txt" ] && ddp=$(med <"$tmp/ddp.txt")

ours --overlap on >"$tmp/on.json"
exp_on=$(steps "$tmp/on.json" exposed_comm_ms | med)
comm_on=$(steps "$tmp/on.json" comm_ms | med)
tok_on=$(steps "$tmp/on.json" tokens_per_s | med)
ours --overlap off >"$tmp/off.json"
exp_off=$(steps "$tmp/off.json" exposed_comm_ms | med)
tok_off=$(steps "$tmp/off.json" tokens_per_s | med)
ours --zero 1 --overlap on >"$tmp/z_on.json"
ours --zero 1 --overlap off >"$tmp/z_off.json"
zrss=$(sed -n 's/rss_kb=//p' "$tmp/rss")
zexp_on=$(steps "$tmp/z_on.json" exposed_comm_ms | med)
zexp_off=$(steps "$tmp/z_off.json" exposed_comm_ms | med)
ztok=$(steps "$tmp/z_on.json" tokens_per_s | med)
ours --zero 2 --overlap on >"$tmp/z2_on.json"
z2rss=$(sed -n 's/rss_kb=//p' "$tmp/rss")
ours --zero 2 --overlap off >"$tmp/z2_off.json"
z2exp_on=$(steps "$tmp/z2_on.json" exposed_comm_ms | med)
z2exp_off=$(steps "$tmp/z2_off.json" exposed_comm_ms | med)
z2tok=$(steps "$tmp/z2_on.json" tokens_per_s | med)
z2tok_off=$(steps "$tmp/z2_off.json" tokens_per_s | med)
total=$(jq -r 'select(.event == "start") | .memory.total' "$tmp/on.json")
ours >/dev/null
rss=$(sed -n 's/rss_kb=//p' "$tmp/rss")

machine_line
printf '%-34s %12s  (overlap %s)\n' "gpu-train 2 ranks tok/s" "$(num %.0f "$tok")" "$overlap"
printf '%-34s %12s\n' "PyTorch DDP/gloo 2 procs tok/s" "$(num %.0f "$ddp")"
[ "$ddp" != n/a ] && awk -v a="$tok" -v b="$ddp" 'BEGIN { printf "%-34s %12.2f  (target >= 1.5)\n", "ratio", a / b }'
printf '%-34s %12s\n' "comm ms (overlapped window)" "$(num %.1f "$comm_on")"
printf '%-34s %12s\n' "exposed comm ms, --overlap on" "$(num %.1f "$exp_on")"
printf '%-34s %12s\n' "exposed comm ms, --overlap off" "$(num %.1f "$exp_off")"
printf '%-34s %12s / %s  (one run each)\n' "tok/s, --overlap on / off" "$(num %.0f "$tok_on")" "$(num %.0f "$tok_off")"
printf '%-34s %12s\n' "ZeRO-1 tok/s, --overlap on" "$(num %.0f "$ztok")"
printf '%-34s %12s\n' "ZeRO-1 exposed ms, --overlap on" "$(num %.1f "$zexp_on")"
printf '%-34s %12s\n' "ZeRO-1 exposed ms, --overlap off" "$(num %.1f "$zexp_off")"
awk -v r="$rss" -v t="$total" 'BEGIN { printf "%-34s %12.1f MiB vs accounted %.1f MiB: %.2fx  (target <= 1.2)\n", "peak RSS rank 0", r / 1024, t / 1048576, r * 1024 / t }'
awk -v z="$zrss" -v r="$rss" 'BEGIN { printf "%-34s %12.1f MiB (%+.1f MiB)\n", "ZeRO-1 peak RSS rank 0", z / 1024, (z - r) / 1024 }'
printf '%-34s %12s / %s\n' "ZeRO-2 tok/s, --overlap on / off" "$(num %.0f "$z2tok")" "$(num %.0f "$z2tok_off")"
printf '%-34s %12s / %s\n' "ZeRO-2 exposed ms, on / off" "$(num %.1f "$z2exp_on")" "$(num %.1f "$z2exp_off")"
awk -v z="$z2rss" -v r="$rss" 'BEGIN { printf "%-34s %12.1f MiB (%+.1f MiB)\n", "ZeRO-2 peak RSS rank 0", z / 1024, (z - r) / 1024 }'
