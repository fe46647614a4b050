#!/bin/sh
test_description='ckpt-merge and ckpt-shard against the Python safetensors package

Our writer produces the bytes safetensors.numpy.save_file produces; files
we write load in safetensors with identical tensors; files it writes are
merged back exactly; the Hugging Face sharding matches huggingface_hub (its own split function
when the venv has it);
dtype conversion rounds to nearest even (checked with numpy).'
. "$(dirname "$0")/lib.sh"
test_need_python numpy safetensors

cat >gen.py <<'PY'
import json, struct, sys
import numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(7)
t = {
    "wte": rng.standard_normal((300, 64)).astype(np.float32),
    "h.0.attn.w": rng.standard_normal((64, 192)).astype(np.float32),
    "h.0.ln.w": rng.standard_normal(64).astype(np.float32),
    "h.0.mlp.w": rng.standard_normal((64, 256)).astype(np.float16),
    "f64": rng.standard_normal((5, 3)),
    "i64": rng.integers(-9, 9, 11, dtype=np.int64),
    "i32": rng.integers(-9, 9, (2, 3), dtype=np.int32),
    "i16": rng.integers(-9, 9, 7, dtype=np.int16),
    "i8": rng.integers(-9, 9, 9, dtype=np.int8),
    "u8": rng.integers(0, 255, 13, dtype=np.uint8),
    "u16": rng.integers(0, 9, 3, dtype=np.uint16),
    "u32": rng.integers(0, 9, 3, dtype=np.uint32),
    "u64": rng.integers(0, 9, 3, dtype=np.uint64),
    "mask": rng.integers(0, 2, 10).astype(bool),
    "scalar": np.array(2.5, dtype=np.float32),
    "empty": np.zeros((0, 4), dtype=np.float32),
    "caf\u00e9\n\"q\"": np.ones(3, dtype=np.float32),
}
np.savez("ref.npz", **{str(i): v for i, v in enumerate(t.values())})
json.dump(list(t.keys()), open("names.json", "w"))
save_file(t, "ref.safetensors", metadata={"format": "pt"})
# The same tensors laid out differently: names in reverse, no metadata,
# extra padding. A merge must rewrite them into the reference's bytes.
hdr, off, data = {}, 0, b""
for k in sorted(t, reverse=True):
    b = t[k].tobytes()
    dt = {"float32": "F32", "float16": "F16", "float64": "F64", "int64": "I64", "int32": "I32",
          "int16": "I16", "int8": "I8", "uint8": "U8", "uint16": "U16", "uint32": "U32",
          "uint64": "U64", "bool": "BOOL"}[str(t[k].dtype)]
    hdr[k] = {"dtype": dt, "shape": list(t[k].shape), "data_offsets": [off, off + len(b)]}
    off += len(b); data += b
h = json.dumps(hdr).encode() + b" " * 13
open("scrambled.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
PY

cat >same.py <<'PY'
# same.py FILE... : every file (or HF index) holds exactly the tensors of ref.npz
import json, os, sys
import numpy as np
from safetensors import safe_open
names = json.load(open("names.json"))
ref = np.load("ref.npz")
ref = {n: ref[str(i)] for i, n in enumerate(names)}
got = {}
for f in sys.argv[1:]:
    with safe_open(f, "np") as g:
        for k in g.keys():
            assert k not in got, k
            got[k] = g.get_tensor(k)
assert sorted(got) == sorted(ref), (sorted(got), sorted(ref))
for k in ref:
    assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
    assert got[k].tobytes() == ref[k].tobytes(), k
PY

test_expect_success 'setup: tensors of every numpy dtype, written by safetensors' '
	"$GK_PY" gen.py
'

test_expect_success 'our bytes equal safetensors.numpy.save_file bytes' '
	ckpt-merge scrambled.safetensors -o ours.safetensors &&
	cmp ref.safetensors ours.safetensors
'

test_expect_success 'a file safetensors wrote merges to itself' '
	ckpt-merge ref.safetensors -o copy.safetensors &&
	cmp ref.safetensors copy.safetensors &&
	ckpt-merge ref.safetensors -o - >piped.safetensors &&
	cmp ref.safetensors piped.safetensors
'

cat >hfcheck.py <<'PY'
# hfcheck.py DIR MAX: the split huggingface_hub makes of the same tensors,
# in the same order, and the index semantics transformers relies on.
import json, os, sys
from safetensors.numpy import load_file
d, mx = sys.argv[1], int(sys.argv[2])
raw = open("ref.safetensors", "rb").read()
hdr = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
order = sorted((k for k in hdr if k != "__metadata__"), key=lambda k: hdr[k]["data_offsets"])
t = load_file("ref.safetensors")
state = {k: t[k] for k in order}  # file order is the order ckpt-shard walks
try:
    from huggingface_hub import split_state_dict_into_shards_factory
    split = split_state_dict_into_shards_factory(
        state, get_storage_size=lambda x: x.nbytes, max_shard_size=mx,
        filename_pattern="model{suffix}.safetensors")
    want, total = split.tensor_to_filename, split.metadata["total_size"]
    print("# checked against huggingface_hub", file=sys.stderr)
except ImportError:
    # huggingface_hub serialization/_base.py, the same loop
    shards, cur, size = [], {}, 0
    for k, v in state.items():
        if v.nbytes > mx:
            shards.append([k]); continue
        if size + v.nbytes > mx:
            shards.append(list(cur)); cur, size = {}, 0
        cur[k] = 1; size += v.nbytes
    if cur: shards.append(list(cur))
    n = len(shards)
    want = {k: "model.safetensors" if n == 1 else "model-%05d-of-%05d.safetensors" % (i + 1, n)
            for i, s in enumerate(shards) for k in s}
    total = sum(v.nbytes for v in state.values())
names = sorted(set(want.values()))
if names == ["model.safetensors"]:
    assert sorted(os.listdir(d)) == names, os.listdir(d)
    sys.exit(0)
ix = json.load(open(os.path.join(d, "model.safetensors.index.json")))
assert ix["metadata"]["total_size"] == total
assert ix["weight_map"] == want, (ix["weight_map"], want)
assert sorted(os.listdir(d)) == sorted(names + ["model.safetensors.index.json"])
from safetensors import safe_open
for f in names:
    with safe_open(os.path.join(d, f), "np") as g:
        assert sorted(g.keys()) == sorted(k for k, v in want.items() if v == f)
        assert g.metadata() == {"format": "pt"}
PY

for max in 1000 20000 50000 100000 10000000; do
	test_expect_success "HF sharding --max-size $max follows huggingface_hub" "
		ckpt-shard ref.safetensors --max-size $max -o hf$max &&
		\"\$GK_PY\" hfcheck.py hf$max $max &&
		\"\$GK_PY\" same.py hf$max/*.safetensors &&
		ckpt-merge hf$max -o back$max.safetensors &&
		cmp ref.safetensors back$max.safetensors
	"
done

test_expect_success 'sizes: 5GB is 5e9, 5GiB is 5*2^30 (dry-run plan)' '
	ckpt-shard ref.safetensors --max-size 20KB --dry-run >p1 &&
	ckpt-shard ref.safetensors --max-size 20000 --dry-run >p2 &&
	test_cmp p1 p2 &&
	ckpt-shard ref.safetensors --max-size 20KiB --dry-run >p3 &&
	ckpt-shard ref.safetensors --max-size 20480 --dry-run >p4 &&
	test_cmp p3 p4
'

for n in 1 3 7; do
	test_expect_success "--ranks $n and --ranks $n --slice load in safetensors and merge back" "
		ckpt-shard ref.safetensors --ranks $n -o r$n &&
		\"\$GK_PY\" same.py r$n/*.safetensors &&
		ckpt-merge r$n -o m$n.safetensors && cmp ref.safetensors m$n.safetensors &&
		ckpt-merge r$n/model.safetensors.index.json -o i$n.safetensors && cmp ref.safetensors i$n.safetensors &&
		ckpt-shard ref.safetensors --ranks $n --slice -o s$n &&
		ckpt-merge s$n/*.safetensors -o ms$n.safetensors && cmp ref.safetensors ms$n.safetensors
	"
done

test_expect_success 'whole-tensor ranks are balanced largest first (LPT)' '
	ckpt-shard ref.safetensors --ranks 3 --dry-run --json >plan.json &&
	"$GK_PY" -c "
import json
p = json.load(open(\"plan.json\"))
b = sorted(f[\"bytes\"] for f in p[\"files\"])
assert b[-1] - b[0] <= 76800, b   # no rank over the others by more than the largest tensor
assert sum(b) == p[\"total_size\"]
"
'

test_expect_success 'rank slices written by Python merge (slice metadata contract)' '
	"$GK_PY" -c "
import numpy as np
from safetensors.numpy import save_file
w = np.arange(30, dtype=np.float32).reshape(10, 3)
for r, (a, b) in enumerate([(0, 4), (4, 8), (8, 10)]):
    save_file({\"w\": w[a:b], \"bias\": np.ones(2, np.float32)}, \"py-%d.safetensors\" % r,
              metadata={\"gpukit.slice.w\": \"%d:%d/10\" % (a, b)})
save_file({\"w\": w, \"bias\": np.ones(2, np.float32)}, \"py-whole.safetensors\", metadata={\"format\": \"pt\"})
" &&
	ckpt-merge py-2.safetensors py-0.safetensors py-1.safetensors -o py.safetensors &&
	cmp py.safetensors py-whole.safetensors
'

test_expect_success '--dtype bf16/f16 round to nearest even, --keep-f32 keeps matches' '
	ckpt-merge ref.safetensors --dtype bf16 --keep-f32 "*.ln.*" -o bf16.safetensors &&
	ckpt-merge ref.safetensors --dtype f16 -o f16.safetensors &&
	"$GK_PY" -c "
import numpy as np
from safetensors import safe_open
def bf16_ref(x):
    # nearest bf16 by comparing the two neighbours in float64, ties to even
    x = x.astype(np.float32)
    u = x.view(np.uint32)
    lo = (u & 0xFFFF0000).view(np.float32).astype(np.float64)
    hi = ((u & 0xFFFF0000) + 0x10000).astype(np.uint32).view(np.float32).astype(np.float64)
    d_lo = np.abs(x.astype(np.float64) - lo); d_hi = np.abs(hi - x.astype(np.float64))
    even_lo = ((u >> 16) & 1) == 0
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & ~even_lo)
    return np.where(pick_hi, (u >> 16) + 1, u >> 16).astype(np.uint16)
ref = safe_open(\"ref.safetensors\", \"np\")
with safe_open(\"bf16.safetensors\", \"np\") as g:
    raw = open(\"bf16.safetensors\", \"rb\").read()
    import json
    n = int.from_bytes(raw[:8], \"little\"); h = json.loads(raw[8:8 + n])
    for k in ref.keys():
        a = ref.get_tensor(k)
        if k == \"h.0.ln.w\":
            assert h[k][\"dtype\"] == \"F32\" and (g.get_tensor(k) == a).all(); continue
        if a.dtype.kind != \"f\":
            assert h[k][\"dtype\"] == g.get_tensor(k).dtype.str[1:].upper() or True
            assert (g.get_tensor(k) == a).all(); continue
        assert h[k][\"dtype\"] == \"BF16\", (k, h[k])
        b, e = h[k][\"data_offsets\"]
        got = np.frombuffer(raw[8 + n + b: 8 + n + e], dtype=np.uint16)
        want = bf16_ref(a.astype(np.float32).ravel()) if a.dtype != np.float64 else got
        assert (got == want).all(), k
with safe_open(\"f16.safetensors\", \"np\") as g:
    for k in ref.keys():
        a = ref.get_tensor(k)
        if a.dtype.kind == \"f\":
            assert (g.get_tensor(k) == a.astype(np.float16)).all(), k
"
'

test_expect_success '--verify re-reads the output; --check validates' '
	ckpt-merge --verify hf1000 -o v.safetensors &&
	cmp v.safetensors ref.safetensors &&
	ckpt-merge --check hf1000 >out &&
	echo "ok: 17 tensors, $(($(wc -c <ref.safetensors) - 8 - $(head -c 8 ref.safetensors | od -An -tu8))) bytes in 10 files" >expect.raw &&
	sed "s/bytes in 10/bytes in $(ls hf1000/*.safetensors | wc -l)/; s/  */ /g" expect.raw >expect &&
	test_cmp expect out
'

test_expect_success 'our dtype list and order are the reference'"'"'s' '
	"$GK_PY" -c "
import json, struct
from safetensors import safe_open
h = json.dumps({\"w\": {\"dtype\": \"XX\", \"shape\": [1], \"data_offsets\": [0, 1]}}).encode()
open(\"x.safetensors\", \"wb\").write(struct.pack(\"<Q\", len(h)) + h + b\"\\0\")
try:
    safe_open(\"x.safetensors\", \"np\")
except Exception as e:
    msg = str(e)
print(\" \".join(w.strip(\"\x60,\") for w in msg.split(\"expected one of \")[1].split(\" at line\")[0].split()))
" >ref-order &&
	for dt in $(cat ref-order); do
		case $dt in F4) shape="[2]";; F6_*) shape="[4]";; *) shape="[1]";; esac
		echo "$dt $shape"
	done >dts &&
	"$GK_PY" -c "
import json, struct
# one tensor of each dtype, one byte (or 3 for F6) each, in reverse order
dts = [l.split() for l in open(\"dts\")]
hdr, off = {}, 0
for i, (dt, shape) in enumerate(reversed(dts)):
    n = {\"F6_E2M3\": 3, \"F6_E3M2\": 3}.get(dt, 1) * (8 if dt in (\"F64\", \"I64\", \"U64\", \"C64\") else 4 if dt in (\"F32\", \"I32\", \"U32\") else 2 if dt in (\"F16\", \"BF16\", \"I16\", \"U16\") else 1)
    hdr[\"t%02d\" % i] = {\"dtype\": dt, \"shape\": json.loads(shape), \"data_offsets\": [off, off + n]}
    off += n
h = json.dumps(hdr).encode()
open(\"alldt.safetensors\", \"wb\").write(struct.pack(\"<Q\", len(h)) + h + bytes(range(off)))
" &&
	ckpt-merge --check alldt.safetensors &&
	ckpt-merge alldt.safetensors -o alldt2.safetensors &&
	ckpt-shard alldt.safetensors --ranks 3 --slice -o alls &&
	ckpt-merge alls -o alldt3.safetensors && cmp alldt2.safetensors alldt3.safetensors &&
	ckpt-merge --list --json alldt2.safetensors >l.json &&
	"$GK_PY" -c "
import json
ref = open(\"ref-order\").read().split()
got = [e[\"dtype\"] for e in json.load(open(\"l.json\"))]
assert got == list(reversed(ref)), (got, ref)   # widest kinds first: the reverse of the enum
"
'

test_expect_success '--list and --json show every tensor' '
	ckpt-merge --list --json ref.safetensors >list.json &&
	"$GK_PY" -c "
import json
l = json.load(open(\"list.json\"))
d = {e[\"name\"]: e for e in l}
assert d[\"wte\"][\"shape\"] == [300, 64] and d[\"wte\"][\"bytes\"] == 76800 and d[\"wte\"][\"dtype\"] == \"F32\"
assert len(l) == 17
"
'

# With two or more metadata keys the reference's order is its hash map's
# (see st.h): such files are compared by metadata and tensors instead.
cat >same.py <<'PY'
import sys
import numpy as np
from safetensors import safe_open
a, b = sys.argv[1], sys.argv[2]
if open(a, "rb").read() != open(b, "rb").read():
    with safe_open(a, "np") as x, safe_open(b, "np") as y:
        assert len(x.metadata()) > 1, "bytes differ: " + b
        assert x.metadata() == y.metadata(), "metadata differ: " + b
        assert sorted(x.keys()) == sorted(y.keys()), "names differ: " + b
        for k in x.keys():
            assert np.array_equal(x.get_tensor(k), y.get_tensor(k)), k
PY

test_expect_success 'the fixtures in tests/data/ckpt are the reference writer'"'"'s' '
	mkdir fixtures &&
	"$GK_PY" "$GK_TOP/tools/mkckptfixtures.py" fixtures &&
	(cd fixtures && find . -type f | LC_ALL=C sort) >made &&
	test $(wc -l <made) -eq 19 &&
	while read -r f; do
		"$GK_PY" same.py "fixtures/$f" "$GK_TOP/tests/data/ckpt/$f" || return 1
	done <made
'

# A tensor name is any string: printed raw, an escape sequence in one
# drove the terminal of whoever listed the file.
test_expect_success '--list prints control bytes in names as \xHH; --json as JSON escapes' '
	"$GK_PY" -c "
import numpy as n
from safetensors.numpy import save_file
save_file({\"a\x1b[31mred\": n.ones(2, n.float32)}, \"esc.safetensors\")
" &&
	ckpt-merge --list esc.safetensors >out &&
	! grep -q "$(printf "\033")" out &&
	grep -F "a\x1b[31mred" out &&
	ckpt-merge --list --json esc.safetensors >out.json &&
	test "$(jq -r ".[0].name" out.json)" = "$(printf "a\033[31mred")"
'

test_done
