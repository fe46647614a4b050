#!/bin/sh
test_description='mem-estimate --from: parameter counts and dtypes from
safetensors headers written by the Python safetensors package: a single
file, a Hugging Face sharded index, the directories ckpt-merge reads
(Hugging Face layout, rank shards with row slices in a training step
directory, its root), cross-checked with --config.'
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

test_done
