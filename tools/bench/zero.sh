#!/bin/sh
# zero.sh - gpu-train's ZeRO-3 on 2 ranks (mpirun, one thread each) against
# its ZeRO-0 and against PyTorch FSDP over gloo (2 processes, one thread
# each), on train.sh's anchor: 4 layers, d 256, 4 heads, T 128, batch 8
# per rank, byte vocabulary, fp32, AdamW 0.9/0.95 wd 0.1, constant lr,
# 1 MiB buckets.
#
# Prints medians over the timed steps (the first two are warm-up) of
#   tok/s            tokens per second of the whole job for
#                      ZeRO-0          gpu-train's defaults (--overlap auto)
#                      ZeRO-3 prefetch --zero 3 --overlap on: the next
#                                      block's gather starts while the
#                                      current one computes
#                      ZeRO-3 no pf    --zero 3 --overlap off: each gather
#                                      is waited for where it is needed
#                      FSDP            torch's fully_shard (FSDP2) when it
#                                      runs on the CPU, else FSDP1's
#                                      FULL_SHARD (tools/bench/train_fsdp.py)
#                    and the ratios ZeRO-3 / ZeRO-0 (target >= 0.85 with
#                    prefetch) and ZeRO-3 prefetch / FSDP (target >= 1.25);
#                    the four run in turn, ROUNDS times each (default 3),
#                    and each figure is the median of its rounds' medians,
#                    so that all meet the same load as it drifts on a
#                    shared machine
#   exposed comm ms  time a step waits on communication (the step line's
#                    exposed_comm_ms: under ZeRO-3 the waits for parameter
#                    gathers and gradient reduce-scatters), with and
#                    without prefetch, and the gathers a step prefetched
#   loss             the first steps' losses of each side: ZeRO-3 must
#                    equal ZeRO-0 (the same reduction order at 2 ranks),
#                    and FSDP, which draws its own initialisation, must
#                    follow the same curve on the same windows (within
#                    LOSS_TOL, default 3 %, relative), so that the anchor
#                    does the same work
#   load average     of the machine, before and after
# torch and transformers come from the test venv (scripts/test-venv);
# without them the FSDP column says n/a.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${GK_BUILD:-build}
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-3}
LOSS_TOL=${LOSS_TOL:-0.03}
NLOSS=5
. "$top/tools/bench/lib.sh"
bench_setup zero.sh
bench_tokens "$tmp/train.bin"

args="--data $tmp/train.bin $anchor --steps $STEPS"
ours() {
	mpirun --oversubscribe --bind-to none -np 2 "$top/bin/gpu-train" $args "$@"
}

losses() { jq -r "select(.event == \"step\" and .step <= $NLOSS) | .loss" "$1"; }
bench_torch

# The anchor: FSDP2 if it trains on the CPU over gloo, else FSDP1; the
# first failure's last line says why.
impl=n/a
if [ -n "$py" ]; then
	for i in fsdp2 fsdp1; do
		if "$py" "$top/tools/bench/train_fsdp.py" "$tmp/train.bin" 3 $i >"$tmp/probe.txt" 2>"$tmp/probe.err" &&
			grep -q '^loss=' "$tmp/probe.txt"; then
			impl=$i
			break
		fi
		echo "zero.sh: $i does not train here: $(grep -v '^[[:space:]]*$' "$tmp/probe.err" | tail -n 1)"
	done
fi

# The four alternate, ROUNDS times each; a side that fails or prints no
# step adds nothing to its column (nan or n/a at the end).
for f in z0 z3 z3off fsdp z0exp z3exp z3offexp z3pf z3offpf; do : >"$tmp/$f.txt"; done
r=0
while [ $r -lt "$ROUNDS" ]; do
	ours >"$tmp/z0.json"
	steps "$tmp/z0.json" tokens_per_s | med >>"$tmp/z0.txt"
	steps "$tmp/z0.json" exposed_comm_ms | med >>"$tmp/z0exp.txt"
	ours --zero 3 --overlap on >"$tmp/z3.json"
	steps "$tmp/z3.json" tokens_per_s | med >>"$tmp/z3.txt"
	steps "$tmp/z3.json" exposed_comm_ms | med >>"$tmp/z3exp.txt"
	steps "$tmp/z3.json" param_prefetched | med >>"$tmp/z3pf.txt"
	ours --zero 3 --overlap off >"$tmp/z3off.json"
	steps "$tmp/z3off.json" tokens_per_s | med >>"$tmp/z3off.txt"
	steps "$tmp/z3off.json" exposed_comm_ms | med >>"$tmp/z3offexp.txt"
	steps "$tmp/z3off.json" param_prefetched | med >>"$tmp/z3offpf.txt"
	if [ "$impl" != n/a ] && "$py" "$top/tools/bench/train_fsdp.py" "$tmp/train.bin" \
		"$STEPS" $impl >"$tmp/fsdp1.txt" 2>/dev/null; then
		v=$(sed -n 's/tok_s=//p' "$tmp/fsdp1.txt" | med)
		[ "$v" = nan ] || { echo "$v" >>"$tmp/fsdp.txt"; cp "$tmp/fsdp1.txt" "$tmp/fsdp_last.txt"; }
	fi
	r=$((r + 1))
done
z0=$(med <"$tmp/z0.txt")
z3=$(med <"$tmp/z3.txt")
z3off=$(med <"$tmp/z3off.txt")
fsdp=n/a
[ -s "$tmp/fsdp.txt" ] && fsdp=$(med <"$tmp/fsdp.txt")
overlap=$(jq -r 'select(.event == "start") | if .overlap then "on" else "off" end' "$tmp/z0.json")

machine_line
load_line
echo "rounds: $ROUNDS, steps: $STEPS (medians of steps 3..$STEPS, then of rounds)"
printf '%-34s %12s  (overlap %s)\n' "gpu-train ZeRO-0 2 ranks tok/s" "$(num %.0f "$z0")" "$overlap"
printf '%-34s %12s\n' "ZeRO-3 prefetch tok/s" "$(num %.0f "$z3")"
printf '%-34s %12s\n' "ZeRO-3 no prefetch tok/s" "$(num %.0f "$z3off")"
printf '%-34s %12s  (%s)\n' "PyTorch FSDP/gloo 2 procs tok/s" "$(num %.0f "$fsdp")" "$impl"
echo "per round tok/s, ZeRO-0 / ZeRO-3 prefetch / ZeRO-3 no pf / FSDP:"
paste "$tmp/z0.txt" "$tmp/z3.txt" "$tmp/z3off.txt" "$tmp/fsdp.txt" |
	awk -F '\t' '{ printf "  round %d  %s  %s  %s  %s\n", NR, $1, $2, $3, $4 == "" ? "n/a" : $4 }' |
	sed 's/\([0-9]\)\.[0-9]*/\1/g'
printf '%-34s %12s  (target >= 0.85)\n' "ratio ZeRO-3 prefetch / ZeRO-0" "$(ratio "$z3" "$z0")"
printf '%-34s %12s\n' "ratio ZeRO-3 no prefetch / ZeRO-0" "$(ratio "$z3off" "$z0")"
printf '%-34s %12s  (target >= 1.25)\n' "ratio ZeRO-3 prefetch / FSDP" "$(ratio "$z3" "$fsdp")"
printf '%-34s %12s\n' "ZeRO-0 exposed comm ms" "$(num %.1f "$(med <"$tmp/z0exp.txt")")"
printf '%-34s %12s  (%s gathers prefetched)\n' "ZeRO-3 exposed comm ms, prefetch" \
	"$(num %.1f "$(med <"$tmp/z3exp.txt")")" "$(med <"$tmp/z3pf.txt")"
printf '%-34s %12s  (%s gathers prefetched)\n' "ZeRO-3 exposed comm ms, no pf" \
	"$(num %.1f "$(med <"$tmp/z3offexp.txt")")" "$(med <"$tmp/z3offpf.txt")"

# The last round's first losses, side by side.
losses "$tmp/z0.json" >"$tmp/l0"
losses "$tmp/z3.json" >"$tmp/l3"
losses "$tmp/z3off.json" >"$tmp/l3off"
: >"$tmp/lf"
[ -s "$tmp/fsdp_last.txt" ] && sed -n 's/^loss=//p' "$tmp/fsdp_last.txt" | head -n $NLOSS >"$tmp/lf"
echo "loss, steps 1..$NLOSS: ZeRO-0 / ZeRO-3 prefetch / ZeRO-3 no pf / FSDP"
paste "$tmp/l0" "$tmp/l3" "$tmp/l3off" "$tmp/lf" | awk -v tol="$LOSS_TOL" -F '\t' '
	{ printf "  step %d  %.6f  %.6f  %.6f  %s\n", NR, $1, $2, $3, $4 == "" ? "n/a" : sprintf("%.6f", $4)
	  if ($1 != $2 || $1 != $3) same = 1
	  if ($4 != "") { d = ($2 - $4) / $4; if (d < 0) d = -d; if (d > m) m = d; nf++ } }
	END {
		printf "  ZeRO-3 = ZeRO-0: %s\n", same ? "NO" : "yes, bit for bit"
		if (nf) printf "  gpu-train vs FSDP: max relative difference %.4f (%s %.2f)\n", m, m <= tol ? "within" : "OUTSIDE", tol
		if (same || (nf && m > tol)) exit 1 }' || { echo "zero.sh: the losses disagree" >&2; exit 1; }
