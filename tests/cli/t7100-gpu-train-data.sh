#!/bin/sh
test_description='gpu-train --dump-data: the micro-batches of every rank

A Python reference (tarfile, struct, ast: nothing of ours) predicts the
first micro-batches of rank r from the shards and token files, following
the windowing gpu-train(1) documents: samples of the rank part joined by
the end-of-text token, row b of micro-batch k = stream[k*B*T + b*T :
k*B*T + b*T + T + 1]; token files: micro-batch k of rank r starts at
(k*world + r)*B*T of the files joined.'
. "$(dirname "$0")/lib.sh"

cat >ref.py <<'EOF'
import ast, json, struct, sys, tarfile

def npy_tokens(b):
    assert b[:6] == b"\x93NUMPY"
    if b[6] == 1:
        hl, pre = struct.unpack("<H", b[8:10])[0], 10
    else:
        hl, pre = struct.unpack("<I", b[8:12])[0], 12
    h = ast.literal_eval(b[pre:pre + hl].decode("latin1"))
    fmt = {"<u2": "H", "<i4": "i"}[h["descr"]]
    n = h["shape"][0]
    return list(struct.unpack("<%d%s" % (n, fmt), b[pre + hl:]))

def shard_samples(paths):
    out = []
    for p in paths:
        with tarfile.open(p) as t:
            cur, key = {}, None
            for m in t.getmembers():
                base = m.name.rsplit("/", 1)[-1]
                k = m.name[: len(m.name) - len(base)] + base.split(".", 1)[0]
                ext = base.split(".", 1)[1]
                if k != key and cur:
                    out.append(cur)
                    cur = {}
                key = k
                cur[ext] = t.extractfile(m).read()
            if cur:
                out.append(cur)
    return out

def main():
    kind, rank, world, B, T, K, eot = sys.argv[1:8]
    rank, world, B, T, K, eot = map(int, (rank, world, B, T, K, eot))
    paths = sys.argv[8:]
    if kind == "bin":
        toks = []
        for p in paths:
            b = open(p, "rb").read()
            if len(b) >= 1024 and struct.unpack("<i", b[:4])[0] == 20240520:
                n = struct.unpack("<i", b[8:12])[0]
                b = b[1024:1024 + 2 * n]
            toks += list(struct.unpack("<%dH" % (len(b) // 2), b))
        starts = [(k * world + rank) * B * T for k in range(K)]
    else:
        s = shard_samples(paths)
        per = len(s) // world
        toks = []
        for smp in s[rank * per:(rank + 1) * per]:
            doc = npy_tokens(smp["npy"]) if "npy" in smp else list(smp["txt"])
            toks += doc
            # one end-of-text token between documents: a tokenized
            # document (.npy) that ends with it gets no second one
            if "npy" not in smp or not doc or doc[-1] != eot:
                toks.append(eot)
        starts = [k * B * T for k in range(K)]
    for k, h in enumerate(starts):
        rows = [toks[h + b * T: h + b * T + T + 1] for b in range(B)]
        print(json.dumps({"rank": rank, "micro": k, "rows": rows}, separators=(",", ":")))

main()
EOF

# Pretty-print both sides the same way for test_cmp.
norm() {
	python3 -c 'import json,sys
for l in sys.stdin:
    print(json.dumps(json.loads(l), sort_keys=True))' <"$1" | sort >"$1.n"
}

test_expect_success 'a text corpus and npy documents, packed as shards' '
	mkdir -p corpus npy &&
	for i in 0 1 2 3 4 5 6 7 8 9 10 11 12; do
		head -c $((200 + i * 53)) "$GK_TOP/README.md" | tail -c $((40 + i * 17)) >corpus/doc$i.txt || return 1
	done &&
	data-pack -q -c -o txt-%02d.tar --max-count 4 corpus/ &&
	cp "$GK_TOP/tests/data/npy/u2.npy" npy/a.npy &&
	cp "$GK_TOP/tests/data/npy/i4.npy" npy/b.npy &&
	cp "$GK_TOP/tests/data/npy/v2.npy" npy/c.npy &&
	data-pack -q -c -o npy-00.tar npy/
'

test_expect_success 'one rank: .txt shards, the documented windows' '
	gpu-train --dump-data 5 --data "txt-{00..03}.tar" --batch 3 --seq 7 --shuffle none >out &&
	python3 ref.py shard 0 1 3 7 5 256 txt-00.tar txt-01.tar txt-02.tar txt-03.tar >want &&
	norm out && norm want && test_cmp want.n out.n
'

test_expect_success 'a shard listed twice (or by a second name) is read twice, with a note' '
	gpu-train --dump-data 1 --data "txt-{00..01}.tar" --batch 1 --seq 7 >/dev/null 2>err &&
	test_must_be_empty err &&
	gpu-train --dump-data 1 --data "txt-{00,01,00}.tar" --batch 1 --seq 7 >/dev/null 2>err &&
	echo "gpu-train: note: shard '"'"'txt-00.tar'"'"' is listed 2 times, so its samples are read 2 times an epoch" >expect &&
	test_cmp expect err &&
	ln -s txt-01.tar again.tar &&
	gpu-train --dump-data 1 --data "{txt-00,txt-01,again,txt-00}.tar" --batch 1 --seq 7 \
		>/dev/null 2>err &&
	grep "^gpu-train: note: shard .txt-0[01].tar. is listed 2 times, .* (and other shards are listed more than once too)$" err &&
	gpu-train --data "txt-{00..01}.tar" --val-data "txt-{00,00}.tar" --eval-every 1 \
		--eval-batches 1 --layers 1 --hidden 32 --heads 2 --positions 16 --batch 1 --seq 7 \
		--steps 3 --threads 1 -q 2>err &&
	echo "gpu-train: note: shard '"'"'txt-00.tar'"'"' is listed 2 times, so its samples are read 2 times an epoch" >expect &&
	test_cmp expect err
'

test_expect_success 'one rank: .npy shards (uint16, int32, npy 2.0), GPT-2 vocabulary' '
	gpu-train --dump-data 8 --data npy-00.tar --vocab 50257 --batch 2 --seq 16 --shuffle none >out &&
	python3 ref.py shard 0 1 2 16 8 50256 npy-00.tar >want &&
	norm out && norm want && test_cmp want.n out.n
'

if command -v mpirun >/dev/null 2>&1; then
	test_set_prereq MPI
fi

test_expect_success MPI 'two ranks: each rank reads its part of the shards' '
	timeout 120 mpirun --oversubscribe --bind-to none -np 2 gpu-train --dump-data 3 \
		--data "txt-{00..03}.tar" --batch 2 --seq 5 --shuffle none >out &&
	{ python3 ref.py shard 0 2 2 5 3 256 txt-00.tar txt-01.tar txt-02.tar txt-03.tar &&
	  python3 ref.py shard 1 2 2 5 3 256 txt-00.tar txt-01.tar txt-02.tar txt-03.tar; } >want &&
	norm out && norm want && test_cmp want.n out.n
'

test_expect_success 'token files: llm.c header and raw nanoGPT' '
	python3 -c "
import struct
t = [(i * 37 + i // 5) % 50257 for i in range(3000)]
h = [20240520, 1, 2000] + [0] * 253
open(\"a.bin\", \"wb\").write(struct.pack(\"<256i\", *h) + struct.pack(\"<2000H\", *t[:2000]))
open(\"b.bin\", \"wb\").write(struct.pack(\"<1000H\", *t[2000:]))
" &&
	gpu-train --dump-data 6 --data "{a,b}.bin" --vocab 50257 --batch 4 --seq 9 >out &&
	python3 ref.py bin 0 1 4 9 6 50256 a.bin b.bin >want &&
	norm out && norm want && test_cmp want.n out.n
'

test_expect_success MPI 'token files, three ranks: interleaved global batches' '
	timeout 120 mpirun --oversubscribe --bind-to none -np 3 gpu-train --dump-data 4 \
		--data "{a,b}.bin" --vocab 50257 --batch 2 --seq 11 >out &&
	for r in 0 1 2; do python3 ref.py bin $r 3 2 11 4 50256 a.bin b.bin || return 1; done >want &&
	norm out && norm want && test_cmp want.n out.n
'

test_expect_success 'a token id outside the vocabulary names the shard and sample' '
	test_expect_code 1 gpu-train --dump-data 50 --data npy-00.tar --vocab 300 --batch 2 --seq 8 2>err &&
	grep "^gpu-train: shard .npy-00.tar. sample .a.: token 43 is 301, not in \[0, 300)" err
'

test_expect_success 'missing and corrupt shards fail with a message' '
	test_expect_code 1 gpu-train --dump-data 1 --data nothere.tar --batch 1 --seq 4 2>err &&
	grep "^gpu-train: .*nothere.tar" err &&
	head -c 3000 txt-00.tar >bad.tar &&
	test_expect_code 1 gpu-train --dump-data 1 --data bad.tar --batch 1 --seq 4 2>err &&
	grep "^gpu-train: .*bad.tar" err
'

# Two shards of the same size whose samples differ: the first in the first
# sample, the second only in the middle (same first and last layout).
test_expect_success 'a stale index of the same size is noticed, the tar read instead' '
	python3 -c "
import os
for d, sizes in ((\"sa\", [100, 700] * 3), (\"sb\", [700, 100] * 3),
                 (\"sc\", [100, 100, 700, 700]), (\"sd\", [100, 700, 100, 700])):
    os.makedirs(d)
    for i, n in enumerate(sizes):
        open(\"%s/%03d.txt\" % (d, i), \"w\").write(chr(65 + i) * n)
" &&
	data-pack -q -c -o A.tar sa && data-pack -q -c -o B.tar sb &&
	data-pack -q -c -o C.tar sc && data-pack -q -c -o D.tar sd &&
	test $(wc -c <A.tar) = $(wc -c <B.tar) && test $(wc -c <C.tar) = $(wc -c <D.tar) &&
	cp B.tar A.tar && cp D.tar C.tar &&
	for s in A C; do
		gpu-train --dump-data 40 --data $s.tar --batch 2 --seq 16 --shuffle none >out 2>$s.err &&
		python3 ref.py shard 0 1 2 16 40 256 $s.tar >want &&
		norm out && norm want && test_cmp want.n out.n || return 1
	done &&
	cat >expect <<-\EOF &&
	gpu-train: note: index '\''A.idx'\'' does not match '\''A.tar'\'' at sample 0 '\''000'\'' (rebuild it with data-pack --index): reading the tar instead
	gpu-train: note: index '\''C.idx'\'' does not match '\''C.tar'\'' at sample 1 '\''001'\'' (rebuild it with data-pack --index): reading the tar instead
	EOF
	cat A.err C.err >actual && test_cmp expect actual
'

test_expect_success 'a shard cut at a member boundary is read, with notes' '
	data-pack -q -c -o E.tar sd && head -c 5120 E.tar >cut.tar && cp E.idx cut.idx &&
	gpu-train --dump-data 3 --data cut.tar --batch 1 --seq 8 --shuffle none >out 2>err &&
	python3 ref.py shard 0 1 1 8 3 256 cut.tar >want &&
	norm out && norm want && test_cmp want.n out.n &&
	cat >expect <<-\EOF &&
	gpu-train: note: index '\''cut.idx'\'' is not the index of '\''cut.tar'\'': made for 6144 bytes, the shard has 5120 (rebuild it with data-pack --index): reading the tar instead
	gpu-train: note: shard '\''cut.tar'\'' has no end-of-archive blocks (truncated?): reading its 4 whole samples
	EOF
	test_cmp expect err
'

test_expect_success 'a compressed shard is refused, with or without an index' '
	cp txt-00.tar z.tar && gzip z.tar &&
	echo "gpu-train: shard '\''z.tar.gz'\'' is gzip-compressed: random access needs an uncompressed tar (gunzip it)" >expect &&
	test_expect_code 1 gpu-train --dump-data 1 --data z.tar.gz --batch 1 --seq 4 2>err &&
	test_cmp expect err &&
	cp txt-00.idx z.idx &&
	test_expect_code 1 gpu-train --dump-data 1 --data z.tar.gz --batch 1 --seq 4 2>err &&
	test_cmp expect err &&
	printf "{\"format\":\"gpukit-shards\",\"version\":1,\"samples\":4,\"bytes\":1,\"shards\":[{\"path\":\"z.tar.gz\",\"samples\":4,\"bytes\":1,\"xxh3\":\"0000000000000000\"}]}" >z.json &&
	test_expect_code 1 gpu-train --dump-data 1 --data z.json --batch 1 --seq 4 2>err &&
	test_cmp expect err
'

test_expect_success 'a glob and a directory list the shards in byte order, as the brace pattern' '
	mkdir -p byglob &&
	cp txt-00.tar byglob/b-1.tar && cp txt-01.tar byglob/b-0.tar && cp txt-02.tar byglob/B-2.tar &&
	cp txt-00.idx byglob/b-1.idx && printf "{}" >byglob/m.json &&
	python3 ref.py shard 0 1 3 7 5 256 byglob/B-2.tar byglob/b-0.tar byglob/b-1.tar >want &&
	norm want &&
	for src in "byglob/*.tar" byglob byglob/ "byglob/{B,b}-[0-2].tar"; do
		gpu-train --dump-data 5 --data "$src" --batch 3 --seq 7 --shuffle none >out &&
		norm out && test_cmp want.n out.n || return 1
	done
'

test_expect_success 'token files: a glob of .bin files, as llm.c users write it' '
	mkdir -p tok && cp a.bin tok/fw_train_000000.bin && cp b.bin tok/fw_train_000001.bin &&
	cp b.bin tok/fw_val_000000.bin &&
	gpu-train --dump-data 6 --data "tok/*train*.bin" --vocab 50257 --batch 4 --seq 9 >out &&
	python3 ref.py bin 0 1 4 9 6 50256 a.bin b.bin >want &&
	norm out && norm want && test_cmp want.n out.n
'

test_expect_success 'an empty glob or a directory without shards is an error that says what is there' '
	test_expect_code 1 gpu-train --dump-data 1 --data "byglob/*.tar.lz4" --batch 1 --seq 4 2>err &&
	echo "gpu-train: shard list: no file matches '\''byglob/*.tar.lz4'\''" >expect &&
	test_cmp expect err &&
	test_expect_code 1 gpu-train --dump-data 1 --data tok --batch 1 --seq 4 2>err &&
	echo "gpu-train: shard list: directory '\''tok'\'' holds no shards (*.tar, *.tar.lz4); token files are listed by a glob, e.g. '\''tok/*train*.bin'\''" >expect &&
	test_cmp expect err &&
	mkdir -p none &&
	test_expect_code 1 gpu-train --dump-data 1 --data none/ --batch 1 --seq 4 2>err &&
	echo "gpu-train: shard list: directory '\''none/'\'' holds no shards (*.tar, *.tar.lz4)" >expect &&
	test_cmp expect err
'

test_done
