#!/bin/sh
# ckpt.sh - ckpt-merge against its references, side by side in one run.
#
#   merge of a 1 GiB checkpoint of 1,024 one-MiB tensors in 8 shards vs
#   `cat shards > out && sync out` (the I/O limit; target >= 0.9x), in
#   PAIRS interleaved pairs (default 9) so that a busy moment of a shared
#   machine hits both sides alike; medians of each side and their ratio;
#   vs a Python merge with safetensors (target >= 3x); peak RSS of
#   ckpt-merge at two sizes (target <= 64 MiB, flat); f32 -> bf16
#   conversion on one core (target >= 1 GB/s).
# ckpt-merge fsyncs its output, so cat and the durable Python variant
# sync too. Other medians are of RUNS runs (default 3). Needs GK_BUILD
# (make bench sets it). SIZE_MIB (default 1024), TENSOR_KIB (default
# 1024) and WORK (default a temp dir under build/) can be set; about 3x
# SIZE_MIB of disk is used and removed at the end.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${GK_BUILD:-build}
case $B in /*) ;; *) B=$top/$B ;; esac
helper=$B/tools/bench/ckpt
SIZE_MIB=${SIZE_MIB:-1024}
TENSOR_KIB=${TENSOR_KIB:-1024}
RUNS=${RUNS:-3}
PAIRS=${PAIRS:-9}
PATH=$top/bin:$PATH
WORK=$(mktemp -d "${WORK:-$B}/ckpt-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
cd "$WORK"

# Python with safetensors: the test venv, else a bench venv of our own.
py=$("$top/scripts/test-venv" --path)
if ! "$py" -c 'import safetensors, numpy' 2>/dev/null; then
	python3 -m venv "$B/bench-venv" && "$B/bench-venv/bin/pip" -q install numpy safetensors
	py=$B/bench-venv/bin/python
fi

# median of the wall times of RUNS runs of "$@" (output removed each time)
median() {
	i=0
	while [ $i -lt "$RUNS" ]; do
		rm -f out.safetensors
		s=$(date +%s.%N)
		"$@"
		e=$(date +%s.%N)
		echo "$e - $s" | bc -l
		i=$((i + 1))
	done | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p"
}

# elapsed CMD...: wall seconds of one run
elapsed() {
	s=$(date +%s.%N)
	"$@"
	e=$(date +%s.%N)
	echo "$e - $s" | bc -l
}
# med FILE: the median of the numbers in FILE
med() { sort -n "$1" | sed -n "$(( ($(wc -l <"$1") + 1) / 2 ))p"; }

"$helper" make full.safetensors "$SIZE_MIB" "$TENSOR_KIB"
ckpt-shard -q full.safetensors --shards 8 -o in
rm full.safetensors
bytes=$(cat in/*.safetensors | wc -c)
cat in/* >/dev/null # same warm page cache for everyone

cat >merge.py <<'PY'
import glob, os, sys
from safetensors.numpy import load_file, save_file
t = {}
for f in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
    t.update(load_file(f))
save_file(t, sys.argv[2], metadata={"format": "pt"})
if len(sys.argv) > 3:  # durable, as ckpt-merge's output is (it fsyncs)
    fd = os.open(sys.argv[2], os.O_RDONLY); os.fsync(fd); os.close(fd)
PY

i=0
: >cat.times
: >gk.times
while [ $i -lt "$PAIRS" ]; do
	rm -f out.safetensors
	elapsed sh -c 'cat in/*.safetensors > out.safetensors && sync out.safetensors' >>cat.times
	rm -f out.safetensors
	elapsed ckpt-merge -q in -o out.safetensors >>gk.times
	i=$((i + 1))
done
t_cat=$(med cat.times)
t_gk=$(med gk.times)
ckpt-merge --check -q out.safetensors
t_py=$(median "$py" merge.py in out.safetensors)
t_pys=$(median "$py" merge.py in out.safetensors fsync)
cmp_ok=$(ckpt-merge -q in -o ours.safetensors && cmp -s ours.safetensors out.safetensors && echo identical || echo DIFFERENT)
rm -f ours.safetensors out.safetensors

rss() { /usr/bin/time -v "$@" 2>&1 >/dev/null | sed -n 's/.*Maximum resident set size (kbytes): //p'; }
rss_big=$(rss ckpt-merge -q in --dtype bf16 -o out.safetensors); rm -f out.safetensors
"$helper" make small.safetensors $((SIZE_MIB / 8))
ckpt-shard -q small.safetensors --shards 8 -o in-small && rm small.safetensors
rss_small=$(rss ckpt-merge -q in-small --dtype bf16 -o out.safetensors); rm -f out.safetensors
gbs=$("$helper" convert 256)
t_conv=$(median ckpt-merge -q in --dtype bf16 -o out.safetensors)

gib=$(echo "$bytes / 1073741824" | bc -l)
ntensors=$(ckpt-merge --list in | tail -n +2 | wc -l)
printf 'checkpoint: %.2f GiB, %d tensors in 8 shards; cat and ckpt-merge: medians of %d interleaved pairs, others of %d runs\n' \
	"$gib" "$ntensors" "$PAIRS" "$RUNS"
printf '%-34s %8.3f s  %7.2f GiB/s\n' "cat shards > out (+sync)" "$t_cat" "$(echo "$gib / $t_cat" | bc -l)"
printf '%-34s %8.3f s  %7.2f GiB/s\n' "ckpt-merge" "$t_gk" "$(echo "$gib / $t_gk" | bc -l)"
printf '%-34s %8.3f s  %7.2f GiB/s\n' "python safetensors load+save" "$t_py" "$(echo "$gib / $t_py" | bc -l)"
printf '%-34s %8.3f s  %7.2f GiB/s\n' "python load+save+fsync" "$t_pys" "$(echo "$gib / $t_pys" | bc -l)"
printf '%-34s %8.3f s  %7.2f GiB/s (input)\n' "ckpt-merge --dtype bf16" "$t_conv" "$(echo "$gib / $t_conv" | bc -l)"
printf 'ratio ckpt-merge / cat:    %.2fx (target >= 0.9)\n' "$(echo "$t_cat / $t_gk" | bc -l)"
printf 'ratio ckpt-merge / python: %.2fx, durable python: %.2fx (target >= 3)\n' \
	"$(echo "$t_py / $t_gk" | bc -l)" "$(echo "$t_pys / $t_gk" | bc -l)"
printf 'output vs python output: %s\n' "$cmp_ok"
printf 'peak RSS ckpt-merge --dtype bf16: %d MiB at %d MiB, %d MiB at %d MiB (target <= 64)\n' \
	$((rss_small / 1024)) $((SIZE_MIB / 8)) $((rss_big / 1024)) "$SIZE_MIB"
printf 'f32 -> bf16 gk_convert, one core: %s GB/s (target >= 1)\n' "$gbs"
