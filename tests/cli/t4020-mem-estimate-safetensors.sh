#!/bin/sh
test_description='mem-estimate --from: parameter counts and dtypes from
safetensors headers written by the Python safetensors package: a single
file, a Hugging Face sharded index, the directories ckpt-merge reads
(Hugging Face layout, rank shards with row slices in a training step
directory, its root), cross-checked with --config; buffers such as
GPT-2'"'"'s causal masks and integer tensors are left out.'
. "$(dirname "$0")/lib.sh"

test_need_python numpy safetensors

test_expect_success 'write a small GPT-2 in HF layout, whole and sharded' '
	cat >config.json <<-\JSON &&
	{"model_type": "gpt2", "n_layer": 3, "n_embd": 64, "n_head": 4,
	 "n_positions": 128, "vocab_size": 1000}
	JSON
	"$GK_PY" - <<-\PY
	import json, numpy as np
	from safetensors.numpy import save_file
	h, L, V, P = 64, 3, 1000, 128
	t = {"wte.weight": np.zeros((V, h), np.float16),
	     "wpe.weight": np.zeros((P, h), np.float16),
	     "ln_f.weight": np.zeros(h, np.float32), "ln_f.bias": np.zeros(h, np.float32)}
	for i in range(L):
	    p = "h.%d." % i
	    for n, s in [("ln_1.weight", (h,)), ("ln_1.bias", (h,)),
	                 ("attn.c_attn.weight", (h, 3 * h)), ("attn.c_attn.bias", (3 * h,)),
	                 ("attn.c_proj.weight", (h, h)), ("attn.c_proj.bias", (h,)),
	                 ("ln_2.weight", (h,)), ("ln_2.bias", (h,)),
	                 ("mlp.c_fc.weight", (h, 4 * h)), ("mlp.c_fc.bias", (4 * h,)),
	                 ("mlp.c_proj.weight", (4 * h, h)), ("mlp.c_proj.bias", (h,))]:
	        t[p + n] = np.zeros(s, np.float32 if "ln" in n else np.float16)
	save_file(t, "model.safetensors")
	names = sorted(t)
	a, b = names[: len(names) // 2], names[len(names) // 2 :]
	save_file({k: t[k] for k in a}, "model-00001-of-00002.safetensors")
	save_file({k: t[k] for k in b}, "model-00002-of-00002.safetensors")
	wm = {k: "model-00001-of-00002.safetensors" for k in a}
	wm.update({k: "model-00002-of-00002.safetensors" for k in b})
	json.dump({"metadata": {}, "weight_map": wm}, open("model.safetensors.index.json", "w"))
	json.dump({"params": sum(x.size for x in t.values()),
	           "F16": sum(x.size for x in t.values() if x.dtype == np.float16),
	           "F32": sum(x.size for x in t.values() if x.dtype == np.float32)},
	          open("want.json", "w"))
	PY
'

check='
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open("want.json"))
m = got["model"]
assert m["params"] == want["params"], (m["params"], want)
assert m["dtypes"] == {"F16": want["F16"], "F32": want["F32"]}, m["dtypes"]
'

test_expect_success '--from model.safetensors counts every element by dtype' '
	mem-estimate --from model.safetensors --json >one.json &&
	"$GK_PY" -c "$check" one.json
'

test_expect_success '--from the index reads each shard once' '
	mem-estimate --from model.safetensors.index.json --json >idx.json &&
	"$GK_PY" -c "$check" idx.json
'

test_expect_success '--from agrees with the architecture in config.json' '
	mem-estimate --config config.json --from model.safetensors --json >both.json &&
	"$GK_PY" -c "$check" both.json &&
	grep "\"activations\"" both.json
'

test_expect_success 'a checkpoint that disagrees with the config is an error' '
	sed "s/\"n_layer\": 3/\"n_layer\": 4/" config.json >config4.json &&
	test_expect_code 1 mem-estimate --config config4.json --from model.safetensors 2>err &&
	grep "checkpoint .model.safetensors.: .* parameters, but the architecture has" err
'

test_expect_success 'an index naming a missing shard fails' '
	sed "s/00002-of/00009-of/" model.safetensors.index.json >bad.index.json &&
	test_expect_code 1 mem-estimate --from bad.index.json 2>err &&
	grep "open .*model-00009-of-00002.safetensors.: No such file" err
'

test_expect_success 'an index naming a tensor its shard lacks fails' '
	"$GK_PY" -c "
import json
j = json.load(open(\"model.safetensors.index.json\"))
j[\"weight_map\"][\"extra.weight\"] = \"model-00001-of-00002.safetensors\"
json.dump(j, open(\"extra.index.json\", \"w\"))
" &&
	test_expect_code 1 mem-estimate --from extra.index.json 2>err &&
	grep "index .extra.index.json.: tensor .extra.weight. is not in .*model-00001-of-00002.safetensors." err
'

test_expect_success '--from a Hugging Face directory reads its index' '
	mkdir hf &&
	cp model-0000?-of-00002.safetensors model.safetensors.index.json hf/ &&
	mem-estimate --from hf --json >hf.json &&
	"$GK_PY" -c "$check" hf.json
'

test_expect_success '--from a directory of plain safetensors files' '
	mkdir plain &&
	cp model.safetensors plain/ &&
	mem-estimate --from plain --json >plain.json &&
	"$GK_PY" -c "$check" plain.json
'

test_expect_success 'row-sliced rank shards in a step directory count whole tensors' '
	ckpt-shard -q --ranks 3 --slice -o sliced model.safetensors &&
	mkdir -p root/step-00000007 &&
	cp sliced/model-rank-*.safetensors root/step-00000007/ &&
	# optimizer state beside the model is not part of the model
	cp model.safetensors root/step-00000007/optim-rank-00000-of-00003.safetensors &&
	test_commit root/step-00000007 7 &&
	mem-estimate --from root/step-00000007 --json >step.json &&
	"$GK_PY" -c "$check" step.json &&
	mem-estimate --from root --json >root.json &&
	"$GK_PY" -c "$check" root.json
'

test_expect_success 'a step directory without COMMIT is refused' '
	mkdir -p root/step-00000009 &&
	cp sliced/model-rank-*.safetensors root/step-00000009/ &&
	test_expect_code 1 mem-estimate --from root/step-00000009 2>err &&
	echo "mem-estimate: read '\''root/step-00000009'\'': incomplete checkpoint (no COMMIT)" >expect &&
	test_cmp expect err
'

test_expect_success 'rank shards missing one slice are refused' '
	mkdir -p gap/step-00000001 &&
	cp sliced/model-rank-00000-of-00003.safetensors sliced/model-rank-00002-of-00003.safetensors gap/step-00000001/ &&
	test_commit gap/step-00000001 1 &&
	test_expect_code 1 mem-estimate --from gap/step-00000001 2>err &&
	grep "^mem-estimate: tensor .*: rows [0-9]* to [0-9]* are in no slice" err
'

# Hugging Face GPT-2 files carry the causal masks (h.N.attn.bias, shape
# (1, 1, P, P)) and masked_bias scalars, which are buffers, not
# parameters: openai-community/gpt2 has 124,439,808 parameters, not those
# plus 12 masks of 1024 x 1024. Integer tensors (position ids) are not
# parameters either.
test_expect_success 'buffers and integer tensors are left out, and said to be' '
	mkdir -p buf &&
	cp config.json buf/ &&
	"$GK_PY" - <<-\PY &&
	import numpy as np
	from safetensors.numpy import load_file, save_file
	t = load_file("model.safetensors")
	P = 128
	for i in range(3):
	    t["h.%d.attn.bias" % i] = np.tril(np.ones((P, P), np.float32)).reshape(1, 1, P, P)
	    t["h.%d.attn.masked_bias" % i] = np.array(-1e4, np.float32)
	t["position_ids"] = np.arange(P, dtype=np.int64).reshape(1, P)
	save_file(t, "buf/model.safetensors")
	PY
	mem-estimate --from buf --config buf/config.json --json >buf.json &&
	"$GK_PY" -c "$check" buf.json &&
	jq -e ".model.left_out == {\"tensors\": 7, \"elements\": $((3 * 128 * 128 + 3 + 128))}" buf.json &&
	mem-estimate --from buf/model.safetensors >buf.txt &&
	grep "^note:  left out 7 tensors that are not parameters (49,283 elements): " buf.txt &&
	mem-estimate --from model.safetensors >plain.txt &&
	! grep "left out" plain.txt &&
	mem-estimate --from model.safetensors --json >plain.json &&
	jq -e ".model.left_out == {\"tensors\": 0, \"elements\": 0}" plain.json
'

# The header of openai-community/gpt2's model.safetensors (F32, no
# "transformer." prefix, a causal mask per block), data left sparse.
test_expect_success 'GPT-2 small as the hub ships it has 124,439,808 parameters' '
	mkdir -p hub &&
	"$GK_PY" - <<-\PY &&
	import json, struct
	C, L, V, P = 768, 12, 50257, 1024
	shapes = {"wte.weight": [V, C], "wpe.weight": [P, C],
	          "ln_f.weight": [C], "ln_f.bias": [C]}
	for i in range(L):
	    for n, s in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.bias", [1, 1, P, P]),
	                 ("attn.c_attn.weight", [C, 3 * C]), ("attn.c_attn.bias", [3 * C]),
	                 ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
	                 ("ln_2.weight", [C]), ("ln_2.bias", [C]),
	                 ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
	                 ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]:
	        shapes["h.%d.%s" % (i, n)] = s
	h, off = {"__metadata__": {"format": "pt"}}, 0
	for k, s in shapes.items():
	    n = 4
	    for d in s:
	        n *= d
	    h[k] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + n]}
	    off += n
	b = json.dumps(h).encode()
	b += b" " * (-len(b) % 8)
	with open("hub/model.safetensors", "wb") as f:
	    f.write(struct.pack("<Q", len(b)) + b)
	    f.truncate(8 + len(b) + off)
	json.dump({"model_type": "gpt2", "n_layer": L, "n_embd": C, "n_head": 12,
	           "n_positions": P, "vocab_size": V}, open("hub/config.json", "w"))
	PY
	mem-estimate --from hub --config hub/config.json >hub.txt &&
	grep "^model: gpt2, 124,439,808 parameters (hub/config.json)$" hub.txt &&
	grep "^note:  left out 12 tensors that are not parameters (12,582,912 elements)" hub.txt
'

test_done
