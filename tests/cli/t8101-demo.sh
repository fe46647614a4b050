#!/bin/sh
test_description='scripts/demo: keeps what it makes, shows the training and the loss, ends with a summary

The demo (shortened with DEMO_STEPS) leaves its shards, checkpoints,
merged model, loss plot and sample in the directory it is given, shows
the training as it runs and the loss curve in the terminal, prunes
checkpoints it made, keeps each step short and ends with a summary whose
every path exists. Its text is token ids of the tokenizer the project
ships (data/tokenizer): the manifest records those files, the sample is
text after the prompt, and where the test venv is there transformers
loads the merged directory, its AutoTokenizer encodes the prompt to the
sample'"'"'s ids and decodes them to its text. A previous demo directory is
reused; any other non-empty directory is refused untouched.'
. "$(dirname "$0")/lib.sh"

for c in gnuplot jq; do
	if ! command -v $c >/dev/null 2>&1; then
		skip_all="$c is not installed (scripts/install-deps)"
		test_done
	fi
done

STEPS=12

# IHDR: width and height, big-endian, at bytes 16..23 after the signature.
png_size() {
	test "$(head -c 8 "$1" | od -An -tx1 | tr -d " \n")" = 89504e470d0a1a0a &&
	od -An -tu1 -j16 -N8 "$1" |
	awk "{ print \$1*16777216 + \$2*65536 + \$3*256 + \$4 \"x\" \$5*16777216 + \$6*65536 + \$7*256 + \$8 }"
}

test_expect_success 'the demo runs and keeps its directory' '
	DEMO_STEPS=$STEPS timeout 600 "$GK_TOP/scripts/demo" "$PWD/out dir" >out 2>err &&
	cat out err &&
	test -f "out dir/.gpukit-demo"
'

test_expect_success 'shards: verified, and the corpus packed' '
	data-pack -q --verify "out dir/shards/manifest.json" &&
	data-pack -q --verify "out dir/corpus-shards/manifest.json" &&
	test $(ls "out dir"/shards/*.tar | wc -l) = 3 &&
	test $(ls "out dir"/corpus-shards/*.tar | wc -l) -ge 1 &&
	grep "^corpus-shards/: " out
'

# The shipped tokenizer: what the manifest records of it (its files'"'"'
# XXH3 by xxhsum, its size and <|endoftext|> by jq, the fingerprint that
# data-pack gives it packing anew), and every corpus sample is .npy ids.
command -v xxhsum >/dev/null 2>&1 && test_set_prereq XXHSUM
test_expect_success XXHSUM 'the corpus is token ids of the tokenizer in data/tokenizer' '
	m="out dir/corpus-shards/manifest.json" &&
	jq -r ".tokenizer.files[] | (.path | split(\"/\") | .[-2:] | join(\"/\")) + \" \" + .xxh3" "$m" >actual &&
	for f in vocab.json merges.txt; do
		echo "tokenizer/$f $(xxhsum -H3 "$GK_TOP/data/tokenizer/$f" | sed "s/.* = //")" || return 1
	done >expect &&
	test_cmp expect actual &&
	jq -r ".tokenizer | .vocab_size, .eot" "$m" >actual &&
	jq -r "length, .[\"<|endoftext|>\"]" "$GK_TOP/data/tokenizer/vocab.json" >expect &&
	test_cmp expect actual &&
	test $(jq -r .tokenizer.vocab_size "$m") = 4096 &&
	mkdir one && echo "int x;" >one/a.txt &&
	data-pack -q -c --tokenize "$GK_TOP/data/tokenizer" -o one.tar --manifest one.json one &&
	test "$(jq -r .tokenizer.fingerprint one.json)" = "$(jq -r .tokenizer.fingerprint "$m")" &&
	for t in "out dir"/corpus-shards/*.tar; do data-pack -t "$t" >>members || return 1; done &&
	cut -f 3 members | sort -u >exts &&
	echo npy >expect && test_cmp expect exts &&
	test "$(jq -r "select(.event == \"start\") | .tokenizer" "out dir/train.jsonl")" = "$GK_TOP/data/tokenizer"
'

test_expect_success 'the sample is text: the prompt, then 120 tokens decoded' '
	jq -c "select(.event == \"sample\") | [(.prompt | length > 0), (.tokens | length)]" \
		"out dir/train.jsonl" >actual &&
	echo "[true,120]" >expect && test_cmp expect actual &&
	head -c 11 "out dir/sample.txt" >actual && printf "static int " >expect && test_cmp expect actual &&
	grep -F "the trained model'"'"'s text after the prompt '"'"'static int '"'"': 120 tokens" out
'

test_expect_success 'training: every step in the log, progress on the screen as it ran' '
	jq -s -e "[.[] | select(.event == \"step\") | .step] == [range(1; $STEPS + 1)]" "out dir/train.jsonl" &&
	jq -s -e "map(select(.event == \"summary\"))[0].stopped == \"done\"" "out dir/train.jsonl" &&
	grep "^step 1/$STEPS  loss " out &&
	grep "^step $STEPS/$STEPS  loss " out &&
	test $(grep -c "^step [0-9]*/$STEPS  loss [0-9.]*  [0-9]* tokens/s$" out) -ge 5
'

test_expect_success 'the loss curve: a PNG, and the terminal plot in the output' '
	echo 900x540 >expect && png_size "out dir/loss.png" >actual && test_cmp expect actual &&
	grep "gpu-train loss, $STEPS steps" out &&
	grep "^ *[0-9.]* |.*|" out
'

test_expect_success 'checkpoints: the prune removed the older ones and kept the 2 newest' '
	ls "out dir/ckpt" >actual &&
	printf "%s\n" latest step-00000009 step-00000012 >expect &&
	test_cmp expect actual &&
	grep -Fx "removed 2, kept 2, freed $(sed -n "s/^removed 2, kept 2, freed //p" "out dir/prune.txt")" out &&
	grep -c "^removed step-" "out dir/prune.txt" >n && echo 2 >expect && test_cmp expect n
'

test_expect_success 'the merged model is the last checkpoint, with its config.json' '
	ckpt-merge -q "out dir/ckpt/latest" -o merged.safetensors &&
	cmp merged.safetensors "out dir/model/model.safetensors" &&
	cmp "out dir/ckpt/latest/config.json" "out dir/model/config.json"
'

# The summary says transformers loads model/: where the test venv is
# there (scripts/test-venv), load it and count its parameters against
# gpu-train's.
if test -x "$GK_PY" && "$GK_PY" -c "import transformers, torch" 2>/dev/null; then
	test_set_prereq TRANSFORMERS
fi
test_expect_success TRANSFORMERS 'model/ has the tokenizer; AutoTokenizer encodes the prompt and decodes the sample as gpu-train did' '
	cmp "$GK_TOP/data/tokenizer/vocab.json" "out dir/model/vocab.json" &&
	cmp "$GK_TOP/data/tokenizer/merges.txt" "out dir/model/merges.txt" &&
	HF_HUB_OFFLINE=1 "$GK_PY" -c "
import json, sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
s = [e for e in map(json.loads, open(sys.argv[2])) if e[\"event\"] == \"sample\"][0]
for f, v in ((\"ours\", s), (\"theirs\", {\"prompt\": t(\"static int \").input_ids,
                                      \"text\": t.decode(s[\"prompt\"] + s[\"tokens\"])})):
    open(f, \"w\").write(json.dumps([v[\"prompt\"], v[\"text\"]]) + \"\\n\")
" "$PWD/out dir/model" "out dir/train.jsonl" &&
	test_cmp ours theirs
'

test_expect_success TRANSFORMERS 'model/ loads as GPT2LMHeadModel, every parameter there' '
	HF_HUB_OFFLINE=1 "$GK_PY" -c "
import sys
from transformers import GPT2LMHeadModel
m = GPT2LMHeadModel.from_pretrained(sys.argv[1])
print(sum(p.numel() for p in m.parameters()))
" "$PWD/out dir/model" >actual &&
	jq -r "select(.event == \"start\") | .params" "out dir/train.jsonl" >expect &&
	test_cmp expect actual
'

test_expect_success 'the sample is the run'"'"'s sample' '
	jq -r "select(.event == \"sample\") | .text" "out dir/train.jsonl" >expect &&
	test -s expect &&
	test_cmp expect "out dir/sample.txt"
'

# A screen: 24 lines. Each step (a "== " heading and what follows) fits
# one; the summary is the last, and every path it names is there.
test_expect_success 'short steps, and a one-screen summary whose every path exists' '
	awk "/^== / { n = 0; h = \$0 } { n++; if (n > 24) { print \"too long: \" h; exit 1 } }" out &&
	sed -n "/^== what the demo made, in /,\$p" out >summary &&
	test $(wc -l <summary) -le 12 &&
	grep -F "== what the demo made, in $PWD/out dir" summary &&
	for p in shards/ corpus-shards/ train.jsonl loss.png ckpt/ model/model.safetensors \
		config.json rank-shards/ sample.txt prune.txt mem.txt topo.txt bench.txt llama-7b.txt; do
		grep -F "$p" summary >/dev/null || { echo "$p: not in the summary"; return 1; }
	done &&
	for p in shards corpus-shards train.jsonl loss.png ckpt model/model.safetensors \
		model/config.json rank-shards sample.txt prune.txt mem.txt topo.txt bench.txt llama-7b.txt; do
		test -e "out dir/$p" || { echo "$p: named, not there"; return 1; }
	done &&
	grep "^  checkpoints   ckpt/: step-00000009 step-00000012 kept, 2 pruned; latest -> step-00000012$" summary
'

test_expect_success 'a previous demo directory is reused; any other is refused untouched' '
	echo keep >"out dir/mine" &&
	DEMO_STEPS=4 DEMO_DIR="$PWD/out dir" timeout 600 "$GK_TOP/scripts/demo" >out2 2>err2 &&
	! test -e "out dir/mine" &&
	jq -s -e "[.[] | select(.event == \"step\")] | length == 4" "out dir/train.jsonl" &&
	mkdir other && echo keep >other/notes &&
	test_expect_code 1 "$GK_TOP/scripts/demo" other >out3 2>err3 &&
	grep -F "demo: '"'"'other'"'"' exists and is not a previous demo'"'"'s directory: name another (scripts/demo DIR or DEMO_DIR=DIR)" err3 &&
	test "$(ls other)" = notes && test "$(cat other/notes)" = keep
'

test_done
