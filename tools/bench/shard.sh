#!/bin/sh
# shard.sh - data-pack and the C shard reader against their references,
# side by side in one run (medians of GK_BENCH_RUNS runs, default 3):
#   pack:    data-pack -c   vs  GNU tar -cf   vs  webdataset.ShardWriter
#   iterate: C dataset reader (one core, no prefetch)  vs  webdataset
#   LZ4:     data-pack --lz4 pack MB/s (1 and 2 jobs), C reader unpack MB/s,
#            lz4 -dc for reference
# Every reader reports its own sample and byte counts; the run fails when
# the LZ4 or the Python reader's differ from the C reader's on plain shards.
# Corpus: tools/mkcorpus.py, GK_BENCH_BYTES (default 1 GiB) in
# GK_BENCH_FILES files (default 100000). Inputs are read once first, so
# every contender starts from the page cache.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$top/${GK_BUILD:-build}
bytes=${GK_BENCH_BYTES:-1073741824}
files=${GK_BENCH_FILES:-100000}
runs=${GK_BENCH_RUNS:-3}
w=$build/bench-shard
dp=$top/bin/data-pack
iter=$build/tools/bench/shard
py=$("$top/scripts/test-venv")

corpus=$w/corpus-$bytes-$files
if [ ! -d "$corpus" ]; then
	echo "making corpus: $bytes bytes in $files files" >&2
	rm -rf "$w"/corpus-*
	mkdir -p "$w"
	python3 "$top/tools/mkcorpus.py" "$corpus.tmp" "$bytes" "$files"
	mv "$corpus.tmp" "$corpus"
fi
in_bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
nfiles=$(find "$corpus" -type f | wc -l)
cat $(find "$corpus" -type f) >/dev/null 2>&1 || find "$corpus" -type f -exec cat {} + >/dev/null

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# time_cmd NAME CMD...: run CMD $runs times, print the median seconds
time_cmd() {
	name=$1
	shift
	for i in $(seq "$runs"); do
		rm -rf "$w/out" && mkdir -p "$w/out"
		# Start clean: no dirty pages of an earlier run to write back.
		sync
		t0=$(now)
		"$@" >/dev/null
		t1=$(now)
		echo "$t1 - $t0" | bc -l
	done | median >"$w/t.$name"
}

wds_pack() {
	"$py" - "$corpus" "$w/out" <<-\EOF
	import os, sys, webdataset as wds
	root, out = sys.argv[1], sys.argv[2]
	with wds.ShardWriter(out + "/w-%06d.tar", maxsize=256 << 20, maxcount=10**9, verbose=0) as sink:
	    for d in sorted(os.listdir(root)):
	        names = sorted(os.listdir(os.path.join(root, d)))
	        sample = None
	        for n in names:
	            key, ext = n.split(".", 1)
	            if sample is None or sample["__key__"] != d + "/" + key:
	                if sample:
	                    sink.write(sample)
	                sample = {"__key__": d + "/" + key}
	            with open(os.path.join(root, d, n), "rb") as f:
	                sample[ext] = f.read()
	        if sample:
	            sink.write(sample)
	EOF
}

echo "corpus: $in_bytes bytes in $nfiles files ($corpus)"
time_cmd tar tar -cf "$w/out/gnu.tar" -C "$corpus" .
time_cmd tarsync sh -c "tar -cf '$w/out/gnu.tar' -C '$corpus' . && sync '$w/out/gnu.tar'"
time_cmd dp "$dp" -c -q -o "$w/out/t-%06d.tar" --max-size 256M "$corpus"
time_cmd wds wds_pack
time_cmd lz4_1 "$dp" -c -q --lz4 --jobs 1 -o "$w/out/t-%06d.tar.lz4" --max-size 256M "$corpus"
time_cmd lz4_2 "$dp" -c -q --lz4 --jobs 2 -o "$w/out/t-%06d.tar.lz4" --max-size 256M "$corpus"

# Shards to read, kept outside the per-run output directory.
rm -rf "$w/plain" "$w/lz4"
"$dp" -c -q -o "$w/plain/t-%06d.tar" --max-size 256M --manifest "$w/plain/m.json" "$corpus"
"$dp" -c -q --lz4 --jobs 2 -o "$w/lz4/t-%06d.tar.lz4" --max-size 256M --manifest "$w/lz4/m.json" "$corpus"
cat "$w"/plain/*.tar "$w"/lz4/*.lz4 >/dev/null
shard_bytes=$(cat "$w"/plain/*.tar | wc -c)
lz4_bytes=$(cat "$w"/lz4/*.lz4 | wc -c)

c_iter() {
	for i in $(seq "$runs"); do "$iter" "$1"; done | awk '{print $3, $1, $2}' |
		sort -g | awk '{v[NR] = $0} END {print v[int((NR + 1) / 2)]}'
}
set -- $(c_iter "$w/plain/m.json")
c_sec=$1 c_samples=$2 c_bytes=$3
set -- $(c_iter "$w/lz4/m.json")
c4_sec=$1 c4_samples=$2 c4_bytes=$3
time_cmd lz4dc sh -c "for f in $w/lz4/*.lz4; do lz4 -dc \$f; done"
for i in $(seq "$runs"); do
	"$py" - "$w"/plain/*.tar <<-\EOF
	import sys, time, webdataset as wds
	t0 = time.perf_counter()
	n = b = 0
	for s in wds.WebDataset(sys.argv[1:], shardshuffle=False):
	    n += 1
	    b += sum(len(v) for k, v in s.items() if not k.startswith("__"))
	print(time.perf_counter() - t0, n, b)
	EOF
done | sort -g | awk '{v[NR] = $0} END {print v[int((NR + 1) / 2)]}' >"$w/t.pyiter"
set -- $(cat "$w/t.pyiter")
py_sec=$1 py_samples=$2 py_bytes=$3

# The contenders must have read the same data: each reader's own counts.
for r in "C reader, LZ4:$c4_samples:$c4_bytes" "python webdataset:$py_samples:$py_bytes"; do
	name=${r%%:*} counts=${r#*:}
	if [ "$counts" != "$c_samples:$c_bytes" ]; then
		echo "shard.sh: $name read ${counts%:*} samples, ${counts#*:} bytes;" \
			"the C reader (plain) read $c_samples samples, $c_bytes bytes" >&2
		exit 1
	fi
done

awk -v in_b="$in_bytes" -v shard_b="$shard_bytes" -v lz4_b="$lz4_bytes" \
	-v tar="$(cat "$w/t.tar")" -v tars="$(cat "$w/t.tarsync")" -v dp="$(cat "$w/t.dp")" -v wds="$(cat "$w/t.wds")" \
	-v l1="$(cat "$w/t.lz4_1")" -v l2="$(cat "$w/t.lz4_2")" -v ldc="$(cat "$w/t.lz4dc")" \
	-v cs="$c_sec" -v cn="$c_samples" -v cb="$c_bytes" -v c4="$c4_sec" \
	-v c4n="$c4_samples" -v c4b="$c4_bytes" \
	-v ps="$py_sec" -v pn="$py_samples" -v pb="$py_bytes" -v runs="$runs" 'BEGIN {
	mb = 1e6
	printf "medians of %d runs; MB = 1e6 bytes of input data\n", runs
	printf "%-34s %10s %12s\n", "pack (input MB/s)", "seconds", "MB/s"
	printf "%-34s %10.3f %12.1f\n", "GNU tar -cf", tar, in_b / tar / mb
	printf "%-34s %10.3f %12.1f\n", "GNU tar -cf, then sync (durable)", tars, in_b / tars / mb
	printf "%-34s %10.3f %12.1f\n", "data-pack -c (fsyncs, + indexes)", dp, in_b / dp / mb
	printf "%-34s %10.3f %12.1f\n", "webdataset ShardWriter", wds, in_b / wds / mb
	printf "%-34s %10.3f %12.1f\n", "data-pack -c --lz4 --jobs 1", l1, in_b / l1 / mb
	printf "%-34s %10.3f %12.1f\n", "data-pack -c --lz4 --jobs 2", l2, in_b / l2 / mb
	printf "%-34s %10s %12s %12s\n", "iterate", "seconds", "samples/s", "MB/s"
	printf "%-34s %10.3f %12.0f %12.1f\n", "C reader, plain, 1 core", cs, cn / cs, cb / cs / mb
	printf "%-34s %10.3f %12.0f %12.1f\n", "C reader, LZ4 (uncompressed MB/s)", c4, c4n / c4, c4b / c4 / mb
	printf "%-34s %10.3f %12s %12.1f\n", "lz4 -dc (tar MB/s)", ldc, "-", shard_b / ldc / mb
	printf "%-34s %10.3f %12.0f %12.1f\n", "python webdataset", ps, pn / ps, pb / ps / mb
	printf "ratios: pack data-pack/tar %.2f (target >= 0.9), data-pack/(tar+sync) %.2f,\n", tar / dp, tars / dp
	printf "        data-pack/ShardWriter %.2f,\n", wds / dp
	printf "        iterate C/webdataset %.1fx (target >= 20), C reader %.2f GB/s (target >= 1),\n", ps / cs, cb / cs / 1e9
	printf "        LZ4 size %.3f of plain\n", lz4_b / shard_b
}'
