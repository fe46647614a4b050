#!/bin/sh
test_description='mem-estimate reads config.json as transformers writes it

The configs are written by the installed transformers (GPT2Config,
LlamaConfig, MistralConfig, GPTNeoXConfig and save_pretrained, no
network) with the published shapes of known models; mem-estimate must
read each and count the parameters their papers and model cards give.'
. "$(dirname "$0")/lib.sh"

test_need_python transformers

# published parameter counts: GPT-2 (sum of GPT2LMHeadModel's parameters,
# tied head), Llama 2 7B, Llama 3 8B and Llama 3.2 1B (model cards), Mistral
# 7B (model card), Pythia 160M and 1.4B (Pythia paper, Table 1 "total")
test_expect_success 'transformers writes the configs' '
	HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error "$GK_PY" - <<-\PY
	import json
	from transformers import GPT2Config, LlamaConfig, MistralConfig, GPTNeoXConfig
	cases = {
	    "gpt2": (GPT2Config(), 124439808),
	    "gpt2-medium": (GPT2Config(n_embd=1024, n_layer=24, n_head=16), 354823168),
	    "llama-2-7b": (LlamaConfig(), 6738415616),
	    "llama-3-8b": (LlamaConfig(vocab_size=128256, intermediate_size=14336,
	        num_key_value_heads=8, max_position_embeddings=8192,
	        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}), 8030261248),
	    "llama-3.2-1b": (LlamaConfig(vocab_size=128256, hidden_size=2048,
	        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
	        num_key_value_heads=8, head_dim=64, tie_word_embeddings=True,
	        max_position_embeddings=131072, rope_parameters={"rope_type": "llama3",
	        "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
	        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}), 1235814400),
	    "mistral-7b": (MistralConfig(), 7241732096),
	    "pythia-160m": (GPTNeoXConfig(vocab_size=50304, hidden_size=768,
	        num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
	        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
	        "partial_rotary_factor": 0.25}), 162322944),
	    "pythia-1.4b": (GPTNeoXConfig(vocab_size=50304, hidden_size=2048,
	        num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192),
	        1414647808),
	}
	want = {}
	for name, (cfg, params) in cases.items():
	    cfg.save_pretrained(name)
	    want[name] = params
	json.dump(want, open("want.json", "w"))
	GPT2Config(add_cross_attention=True).save_pretrained("gpt2-cross")
	PY
'

for m in gpt2 gpt2-medium llama-2-7b llama-3-8b llama-3.2-1b mistral-7b pythia-160m pythia-1.4b; do
	test_expect_success "$m: read without warnings, published parameter count" "
		mem-estimate --config $m/config.json --json >$m.json 2>err &&
		test_must_be_empty err &&
		\"\$GK_PY\" -c '
import json, sys
got = json.load(open(\"$m.json\"))[\"model\"][\"params\"]
want = json.load(open(\"want.json\"))[\"$m\"]
assert got == want, (got, want)
'
	"
done

test_expect_success 'the config as written keeps every key we read' '
	grep -q "\"rope_parameters\"" llama-2-7b/config.json &&
	grep -q "\"add_cross_attention\": false" gpt2/config.json &&
	grep -q "\"num_key_value_heads\": 8" mistral-7b/config.json
'

test_expect_success 'Mistral 7B: 8 key/value heads of 32 make a quarter of the KV cache' '
	mem-estimate --config mistral-7b/config.json --infer --precision f16 \
		--seq 4096 --json >kv.json &&
	"$GK_PY" -c "
import json
b = json.load(open(\"kv.json\"))[\"bytes\"]
# 2 (K, V) * 32 layers * 4096 tokens * 8 heads * 128 * 2 bytes
assert b[\"kv_cache\"] == 2 * 32 * 4096 * 8 * 128 * 2, b[\"kv_cache\"]
"
'

test_expect_success 'a GPT-2 with cross-attention is refused by name, exit 1' '
	test_expect_code 1 mem-estimate --config gpt2-cross/config.json >out 2>err &&
	test_must_be_empty out &&
	echo "mem-estimate: config '"'"'gpt2-cross/config.json'"'"': key '"'"'add_cross_attention'"'"': only false is supported" >expect &&
	test_cmp expect err
'

test_expect_success '--allow-unknown-keys warns about each unknown key; -q silences it' '
	sed "s/\"n_layer\"/\"my_setting\": 1, \"n_layer\"/" gpt2/config.json >unknown.json &&
	test_expect_code 1 mem-estimate --config unknown.json 2>err &&
	grep "unknown key .my_setting." err &&
	mem-estimate --config unknown.json --allow-unknown-keys >out 2>err &&
	echo "mem-estimate: warning: config '"'"'unknown.json'"'"': ignoring unknown key '"'"'my_setting'"'"'" >expect &&
	test_cmp expect err &&
	mem-estimate -q --config unknown.json --allow-unknown-keys >out.q 2>err &&
	test_must_be_empty err &&
	test_cmp out out.q
'

test_done
