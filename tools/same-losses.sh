#!/bin/bash
# same-losses.sh OLD_BINDIR NEW_BINDIR: do two builds of gpu-train train
# the same, bit for bit? Runs a set of small trainings with each (1, 2 and 3
# ranks; ZeRO 0 and 1; compression; accumulation; recomputation; every
# schedule; evaluation; sampling; resume, also on another world size) and
# compares their JSON logs with the timings taken out: losses, gradient
# norms, learning rates, memory figures, evaluation losses and samples.
# For a restructuring that must not change behaviour:
#
#   git worktree add --detach /tmp/base BASE && make -C /tmp/base -j
#   make -j && tools/same-losses.sh /tmp/base/bin bin
#
# Exit 0 when every log matches; the logs stay in a temporary directory
# named on stderr.
set -euo pipefail
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
echo "same-losses: logs in $work" >&2
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the data of the CLI tests: bytes of the project's sources as llm.c tokens
python3 - "$top" <<'PY'
import struct, sys, glob
b = b"".join(open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/lib/core/*.c")))
t = list(b[:60000])
open("train.bin", "wb").write(struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)) + struct.pack("<%dH" % len(t), *t))
v = list(b"".join(open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/lib/st/*.c")))[:4000])
open("val.bin", "wb").write(struct.pack("<%dH" % len(v), *v))
PY
T="--layers 2 --hidden 32 --heads 2 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2 --data train.bin --json -q"
M="--layers 4 --hidden 128 --heads 4 --positions 64 --seq 64 --data train.bin --json -q --lr 1e-3 --warmup 3"
mpi() { n=$1; shift; timeout 600 mpirun --oversubscribe --bind-to none -np "$n" "$@"; }

runs() {
	local b=$1 o=$2
	mkdir -p "$o"
	"$b" $T --steps 12 --val-data val.bin --eval-every 4 --sample 8 --temperature 0 >"$o/base.json"
	"$b" $T --steps 8 --grad-accum 3 -b 2 --recompute layer >"$o/accum.json"
	"$b" $T --steps 8 --recompute gelu --schedule linear --clip 0.5 --sample 12 \
		--temperature 0.8 --top-k 20 >"$o/gelu.json"
	mpi 2 "$b" $T --steps 10 --val-data val.bin --eval-every 5 >"$o/dp.json"
	mpi 2 "$b" $T --steps 10 --zero 1 --bucket 4K >"$o/z1.json"
	mpi 2 "$b" $T --steps 10 --zero 1 --compress bf16 --no-overlap >"$o/z1c.json"
	mpi 2 "$b" $T --steps 10 --compress int8 --overlap on >"$o/i8.json"
	rm -rf ck && "$b" $T --steps 10 --until 5 --ckpt-dir ck >"$o/res1.json"
	"$b" $T --steps 10 --ckpt-dir ck --resume >"$o/res2.json"
	rm -rf ck && mpi 2 "$b" $T --zero 1 --steps 10 --until 5 --ckpt-dir ck >"$o/zres1.json"
	"$b" $T --steps 10 --ckpt-dir ck --resume >"$o/zres2.json"
	rm -rf ck && mpi 2 "$b" $M --threads 1 --steps 12 --grad-accum 2 --zero 1 --recompute gelu \
		--overlap on --val-data val.bin --eval-every 6 --ckpt-dir ck --ckpt-every 4 >"$o/big1.json"
	mpi 3 "$b" $M --threads 1 --steps 16 --grad-accum 2 --zero 1 --recompute gelu --overlap on \
		--val-data val.bin --eval-every 6 --ckpt-dir ck --resume >"$o/big2.json"
	"$b" --eval-only --init-from ck --data val.bin --seq 64 --threads 1 --json >"$o/eval.json"
	"$b" $M --threads 2 --steps 6 --schedule linear --min-lr 1e-5 --clip 0.3 --weight-decay 0.05 \
		--beta2 0.99 -b 3 --sample 20 --temperature 0.9 --top-k 40 --seed 7 >"$o/big3.json"
	for f in "$o"/*.json; do
		jq -c 'del(.tokens_per_s, .step_ms, .comm_ms, .exposed_comm_ms, .gflops, .seconds)' \
			"$f" >"$f.cmp"
	done
}

runs "$old/gpu-train" old 2>old.err
runs "$new/gpu-train" new 2>new.err
bad=0
for f in old/*.cmp; do
	g=new/${f#old/}
	if cmp -s "$f" "$g"; then
		echo "same  ${f#old/} ($(wc -l <"$f") lines)"
	else
		echo "DIFF  ${f#old/}"
		diff "$f" "$g" | head -n 4
		bad=1
	fi
done
exit $bad
