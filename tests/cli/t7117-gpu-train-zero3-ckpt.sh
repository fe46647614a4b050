#!/bin/sh
test_description='gpu-train --zero 3 checkpoints: each rank writes its shard

Under ZeRO-3 no rank holds the whole model, and none gathers it to write
a checkpoint: each writes the tensors of its range of the flat buffer,
whole where the range holds all of one and as flat slices where it cuts
one (gpukit.flat metadata), beside its optimizer file, and COMMIT covers
them all. The shards put together (by a Python reader of the format, and
by ckpt-merge) are the model a ZeRO-0 run of the same steps writes; any
stage and world resumes from them as from the gathered model; a step
with a shard missing or damaged is refused, naming it.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

A="--data train.bin $TINY --steps 3 --json --clip 1 --bucket 16K"

# shards.py DIR WORLD REF TOL: the model-rank files of step DIR, read
# here from the format's description (gpukit-ckpt(5)) and put together,
# equal REF's tensors (bit for bit at TOL 0, else within TOL relative);
# no rank file holds the whole model, each element is in one file, and
# the flat slices cut inside a row somewhere (prints how many)
cat >shards.py <<'PYEOF'
import glob, json, os, struct, sys

def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    meta = h.pop("__metadata__", {})
    return meta, {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
                  for k, v in h.items()}

def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n

d, world, ref, tol = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
if os.path.exists(os.path.join(d, "model.safetensors")):
    sys.exit("%s: a rank wrote the whole model" % d)
files = sorted(glob.glob(os.path.join(d, "model-rank-*-of-*.safetensors")))
if len(files) != world:
    sys.exit("%d rank files, want %d" % (len(files), world))
_, want = load(ref)
total = sum(numel(s) for _, s, _ in want.values())
pieces, cuts, seen = {}, 0, 0
for r, path in enumerate(files):
    meta, ts = load(path)
    if meta.get("gpukit.rank") != str(r) or meta.get("gpukit.world") != str(world):
        sys.exit("%s: rank/world metadata %r" % (path, meta))
    held = 0
    for name, (dt, shape, b) in ts.items():
        if dt != "F32":
            sys.exit("%s: %s is %s" % (path, name, dt))
        fl = meta.get("gpukit.flat." + name)
        if fl:
            span, full = fl.split("/")
            a, z = map(int, span.split(":"))
            full = [int(x) for x in full.split(",")]
            if shape != [z - a]:
                sys.exit("%s: %s: shape %r for %s" % (path, name, shape, fl))
            row = numel(full[1:])
            cuts += (a % row != 0) + (z % row != 0 and z != numel(full))
        else:
            a, z, full = 0, numel(shape), shape
        pieces.setdefault(name, []).append((a, z, full, b))
        held += z - a
    if held >= total:
        sys.exit("%s holds %d of %d elements: the whole model" % (path, held, total))
    seen += held
if seen != total or sorted(pieces) != sorted(want):
    sys.exit("elements %d of %d; tensors %r" % (seen, total, sorted(set(pieces) ^ set(want))))
for name, ps in pieces.items():
    ps.sort(key=lambda p: p[0])
    dt, shape, wb = want[name]
    at, out = 0, b""
    for a, z, full, b in ps:
        if full != shape or a != at:
            sys.exit("%s: piece %d:%d of %r (shape %r, at %d)" % (name, a, z, full, shape, at))
        at, out = z, out + b
    if at != numel(shape):
        sys.exit("%s: elements %d to %d in no file" % (name, at, numel(shape)))
    if tol == 0 and out != wb:
        sys.exit("%s differs from %s" % (name, ref))
    x = struct.unpack("<%df" % (len(out) // 4), out)
    y = struct.unpack("<%df" % (len(wb) // 4), wb)
    bad = [i for i, (p, q) in enumerate(zip(x, y)) if abs(p - q) > tol * max(1.0, abs(q))]
    if bad:
        sys.exit("%s: element %d: %r, want %r" % (name, bad[0], x[bad[0]], y[bad[0]]))
print(cuts)
PYEOF

optim_same() {
	r=0 &&
	while test $r -lt $3; do
		f=$(printf "optim-rank-%05d-of-%05d.safetensors" $r $3) &&
		cmp $1/latest/$f $2/latest/$f &&
		r=$((r + 1)) || return 1
	done
}

test_expect_success 'data' '
	train_data
'

test_expect_success MPI '2 ranks: a shard per rank, none the whole model; put together, and merged, they are ZeRO-0'"'"'s model, byte for byte' '
	mpi 2 $A --batch 4 --zero 3 --ckpt-dir z2 >z2.json &&
	mpi 2 $A --batch 4 --ckpt-dir z0 >z0.json &&
	losses z0.json >z0.l && losses z2.json >z2.l && test_cmp z0.l z2.l &&
	jq -s -e "map(select(.event == \"start\"))[0].ckpt_sharded == true" z2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | has(\"ckpt_sharded\") | not" z0.json &&
	python3 shards.py z2/latest 2 z0/latest/model.safetensors 0 >cuts &&
	ckpt-merge z2/latest -o z2.safetensors &&
	cmp z2.safetensors z0/latest/model.safetensors &&
	ckpt-merge z2/latest -o hf2/ &&
	cmp hf2/model.safetensors z0/latest/model.safetensors &&
	cmp hf2/config.json z0/latest/config.json
'

test_expect_success MPI '3 ranks: shards cut inside rows; merged, the model --ckpt-gather writes byte for byte, ZeRO-0'"'"'s within 1e-5' '
	mpi 3 $A --batch 2 --zero 3 --ckpt-dir z3 >z3.json &&
	mpi 3 $A --batch 2 --zero 3 --ckpt-gather --ckpt-dir z3g >z3g.json &&
	mpi 3 $A --batch 2 --ckpt-dir z30 >z30.json &&
	test -f z3g/latest/model.safetensors &&
	! test -f z3g/latest/model-rank-00000-of-00003.safetensors &&
	jq -s -e "map(select(.event == \"start\"))[0] | has(\"ckpt_sharded\") | not" z3g.json &&
	python3 shards.py z3/latest 3 z3g/latest/model.safetensors 0 >cuts &&
	test $(cat cuts) -gt 0 &&
	python3 shards.py z3/latest 3 z30/latest/model.safetensors 1e-5 &&
	ckpt-merge z3/latest -o z3.safetensors &&
	cmp z3.safetensors z3g/latest/model.safetensors &&
	optim_same z3 z3g 3
'

# "As from the gathered model": the same run checkpointed with
# --ckpt-gather resumes to the same bits; where the world stays, a
# resumed run is the uninterrupted one.
B="--data train.bin $TINY --steps 6 --json --clip 1 --bucket 16K"
test_expect_success MPI 'resume: ZeRO-3 on 2 -> ZeRO-0 on 1, as from the gathered checkpoint' '
	mpi 2 $B --batch 4 --zero 3 --until 3 --ckpt-dir r2 >p2.json &&
	mpi 2 $B --batch 4 --zero 3 --ckpt-gather --until 3 --ckpt-dir r2g >p2g.json &&
	gpu-train $B --batch 8 --ckpt-dir r2 --resume >h2.json &&
	gpu-train $B --batch 8 --ckpt-dir r2g --resume >h2g.json &&
	losses h2.json >h2.l && losses h2g.json >h2g.l &&
	test $(wc -l <h2.l) = 3 && test_cmp h2g.l h2.l &&
	cmp r2/latest/model.safetensors r2g/latest/model.safetensors &&
	cmp r2/latest/optim.safetensors r2g/latest/optim.safetensors
'

test_expect_success MPI 'resume: ZeRO-3 on 3 -> ZeRO-3 on 2 as from the gathered checkpoint, and on 3 bit for bit' '
	mpi 3 $B --batch 2 --zero 3 --ckpt-dir f3 >f3.json &&
	mpi 3 $B --batch 2 --zero 3 --until 3 --ckpt-dir r3 >p3.json &&
	cp -a r3 r33 &&
	mpi 3 $B --batch 2 --zero 3 --ckpt-gather --until 3 --ckpt-dir r3g >p3g.json &&
	mpi 2 $B --batch 3 --zero 3 --ckpt-dir r3 --resume >k.json &&
	mpi 2 $B --batch 3 --zero 3 --ckpt-gather --ckpt-dir r3g --resume >kg.json &&
	losses k.json >k.l && losses kg.json >kg.l &&
	test $(wc -l <k.l) = 3 && test_cmp kg.l k.l &&
	ckpt-merge r3/latest -o k.safetensors &&
	cmp k.safetensors r3g/latest/model.safetensors &&
	mpi 3 $B --batch 2 --zero 3 --ckpt-dir r33 --resume >u.json &&
	losses f3.json >f3.l && { losses p3.json && losses u.json; } >pu.l &&
	test_cmp f3.l pu.l &&
	ckpt-merge r33/latest -o u.safetensors &&
	ckpt-merge f3/latest -o f3.safetensors &&
	cmp u.safetensors f3.safetensors &&
	optim_same r33 f3 3
'

test_expect_success MPI 'a step missing a rank'"'"'s shard, or with one damaged, is refused naming it' '
	cp -a z3 miss && cp -a z3 bad &&
	s=$(readlink z3/latest) &&
	rm miss/$s/model-rank-00001-of-00003.safetensors &&
	test_expect_code 1 ckpt-merge miss/latest -o x.safetensors 2>err &&
	grep "incomplete checkpoint: .model-rank-00001-of-00003.safetensors., listed in its COMMIT, is missing" err &&
	! test -e x.safetensors &&
	test_expect_code 1 gpu-train $B --batch 6 --ckpt-dir miss --resume 2>err &&
	grep "incomplete: .model-rank-00001-of-00003.safetensors., listed in its COMMIT, is missing" err &&
	test_expect_code 1 mpi 2 $B --batch 3 --zero 3 --init-from miss/latest 2>err &&
	grep -c "model-rank-00001-of-00003.safetensors., listed in its COMMIT, is missing" err >n &&
	echo 1 >one && test_cmp one n &&
	f=bad/$s/model-rank-00002-of-00003.safetensors &&
	python3 -c "
import sys
f = open(sys.argv[1], \"r+b\"); f.seek(-6, 2); b = f.read(1); f.seek(-6, 2); f.write(bytes([b[0] ^ 1]))" $f &&
	test_expect_code 1 ckpt-merge bad/latest -o x.safetensors 2>err &&
	grep "model-rank-00002-of-00003.safetensors. does not match its XXH3 in COMMIT" err &&
	! test -e x.safetensors &&
	test_expect_code 1 gpu-train $B --batch 6 --ckpt-dir bad --resume 2>err &&
	grep "model-rank-00002-of-00003.safetensors. does not match its XXH3 in COMMIT" err
'

# w (2, 3) in pieces, each holding the values of the elements it holds
cat >pieces.py <<'PYEOF'
import json, struct
def save(path, meta, shape, first):
    n = 1
    for d in shape:
        n *= d
    h = {"__metadata__": meta, "w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4 * n]}}
    b = json.dumps(h, separators=(",", ":")).encode()
    b += b" " * (-len(b) % 8)
    data = struct.pack("<%df" % n, *range(first, first + n))
    open(path, "wb").write(struct.pack("<Q", len(b)) + b + data)
save("f0.safetensors", {"gpukit.flat.w": "0:5/2,3"}, [5], 0)
save("f1.safetensors", {"gpukit.flat.w": "5:7/2,3"}, [2], 5)
save("g1.safetensors", {"gpukit.flat.w": "4:6/2,3"}, [2], 4)
save("r0.safetensors", {"gpukit.slice.w": "0:1/2"}, [1, 3], 0)
save("p1.safetensors", {"gpukit.flat.w": "3:5/2,3"}, [2], 3)
save("p2.safetensors", {"gpukit.flat.w": "5:6/2,3"}, [1], 5)
save("whole.safetensors", {"format": "pt"}, [2, 3], 0)
PYEOF

test_expect_success 'a row slice and flat slices of one tensor merge into it whole' '
	python3 pieces.py &&
	ckpt-merge p2.safetensors r0.safetensors p1.safetensors -o rp.safetensors &&
	cmp rp.safetensors whole.safetensors
'

test_expect_success 'a flat slice that does not fit its tensor is refused, naming the file and tensor' '
	test_expect_code 1 ckpt-merge f0.safetensors f1.safetensors -o x.safetensors 2>err &&
	grep "f1.safetensors.: tensor .w.: bad flat slice metadata .5:7/2,3.: STOP is past the tensor" err &&
	test_expect_code 1 ckpt-merge f0.safetensors g1.safetensors -o x.safetensors 2>err &&
	grep "tensor .w.: slices overlap at element 4" err &&
	test_expect_code 1 ckpt-merge f0.safetensors -o x.safetensors 2>err &&
	grep "tensor .w.: elements 5 to 6 are in no slice" err
'

test_expect_success '--ckpt-gather without --zero 3: a usage error' '
	test_expect_code 2 gpu-train $A --zero 1 --ckpt-gather --ckpt-dir no 2>err &&
	grep "ckpt-gather: only --zero 3 shards the model" err
'

test_done
