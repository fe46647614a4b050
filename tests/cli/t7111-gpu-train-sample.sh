#!/bin/sh
test_description='gpu-train --sample --prompt, of a checkpoint, without data; --steps 0

A model transformers made and saved is sampled by gpu-train without
--data: greedy decoding (temperature 0, or top-k 1) after the prompt'"'"'s
bytes gives the tokens transformers'"'"' generate(do_sample=False) gives
from the same bytes; a seeded sample is the same twice, starts with the
prompt, and changes with the seed. --steps 0 trains nothing and writes
nothing: it evaluates --val-data and samples.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"
test_need_python torch transformers

P="Once upon a time"

# a random GPT-2 of the byte vocabulary (weights wider than GPT-2's init,
# so the argmax at each step leads the next logit by far more than the
# float rounding of two implementations), saved, and the 40 tokens
# generate() puts after the prompt's bytes; it fails when a step's top
# two logits are closer than 1e-3 (a tie rounding could break either way)
cat >hf_greedy.py <<'EOF'
import sys, torch, transformers
torch.manual_seed(0)
c = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=257, n_positions=64,
                            initializer_range=0.5)
m = transformers.GPT2LMHeadModel(c).eval()
m.save_pretrained(sys.argv[1])
p = list(sys.argv[2].encode())
x = torch.tensor([p])
with torch.no_grad():
    out = m.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                     max_new_tokens=int(sys.argv[3]), pad_token_id=256)
    lg = m(out).logits[0]
for i in range(len(p) - 1, out.shape[1] - 1):
    top = lg[i].topk(2).values
    assert top[0] - top[1] > 1e-3, "step %d: the top two logits tie" % i
print("\n".join(str(t) for t in out[0, len(p):].tolist()))
EOF

test_expect_success 'setup: a model transformers saved, and its greedy tokens after the prompt' '
	train_data &&
	"$GK_PY" hf_greedy.py hf "$P" 40 >theirs 2>hf.err &&
	test $(wc -l <theirs) = 40
'

test_expect_success 'greedy after a prompt, without data: the tokens of transformers'"'"' generate()' '
	gpu-train --init-from hf --sample 40 --prompt "$P" --temperature 0 --json >g.json &&
	jq -r "select(.event == \"sample\") | .tokens[]" g.json >ours &&
	test_cmp theirs ours &&
	jq -e "select(.event == \"sample\") | .prompt == $(printf %s "$P" | od -An -tu1 -v |
		tr -s " \n" "," | sed "s/^,/[/; s/,\$/]/") and (.text | startswith(\"$P\"))" g.json &&
	gpu-train --init-from hf/model.safetensors --sample 40 --prompt "$P" --top-k 1 --json >k.json &&
	jq -r "select(.event == \"sample\") | .tokens[]" k.json >ours-k1 &&
	test_cmp theirs ours-k1
'

test_expect_success 'a seeded sample: the same twice, after the prompt; another seed, another' '
	gpu-train --init-from hf --sample 60 --prompt "$P" --seed 5 >s1 &&
	gpu-train --init-from hf --sample 60 --prompt "$P" --seed 5 >s2 &&
	gpu-train --init-from hf --sample 60 --prompt "$P" --seed 6 >s3 &&
	test_cmp s1 s2 &&
	! test_cmp s1 s3 >/dev/null &&
	tail -n +4 s1 >text1 &&
	test "$(head -c ${#P} text1)" = "$P" &&
	head -n 3 s1 | grep -Fx "parameters from hf"
'

# What the directory holds and the times of each entry, ck's own included;
# not ck's "..": the trash directory, whose time this test's own files
# change (a run that crossed a minute between the two listings failed).
ck_listing() {
	ls -ld --full-time ck ck/latest/ && ls -lA --full-time ck ck/latest/
}

test_expect_success 'sampling a directory'"'"'s latest with --resume, without data, leaves it as it was' '
	gpu-train --data train.bin $TINY --steps 6 --ckpt-dir ck -q &&
	(cd ck && find . -type f | sort | xargs cat | cksum) >before &&
	ck_listing >ls-before &&
	gpu-train --ckpt-dir ck --resume --sample 20 --prompt "int " --temperature 0 >r.out 2>r.err &&
	test_must_be_empty r.err &&
	grep -Fx "resumed from step 6 of ck/step-00000006" r.out &&
	(cd ck && find . -type f | sort | xargs cat | cksum) >after &&
	ck_listing >ls-after &&
	test_cmp before after &&
	test_cmp ls-before ls-after &&
	gpu-train --init-from ck --sample 20 --prompt "int " --temperature 0 >i.out &&
	test "$(tail -n 1 r.out)" = "$(tail -n 1 i.out)"
'

test_expect_success '--steps 0 with data: the --eval-only loss of --val-data, a sample, no step, no checkpoint' '
	gpu-train --data train.bin --val-data val.bin --init-from ck --seq 16 --steps 0 \
		--sample 10 --json >z.json &&
	gpu-train --eval-only --data val.bin --init-from ck --seq 16 --json >e.json &&
	jq -r "select(.event == \"eval\") | .loss" z.json >z-loss &&
	jq -r "select(.event == \"eval\") | .loss" e.json >e-loss &&
	test_cmp e-loss z-loss &&
	jq -s -e "map(.event) == [\"start\", \"eval\", \"sample\"]" z.json
'

test_expect_success 'what --steps 0, --prompt and a sample without data may not do: usage errors' '
	test_expect_code 2 gpu-train --data train.bin $TINY --steps 0 2>err &&
	grep -Fx "gpu-train: --steps 0 trains nothing: it evaluates --val-data, or samples with --sample N (or use --eval-only)" err &&
	test_expect_code 2 gpu-train --data train.bin $TINY --steps 0 --sample 5 --ckpt-dir ck2 2>err &&
	grep "^gpu-train: --steps 0 trains nothing and writes no checkpoint" err &&
	! test -e ck2 &&
	test_expect_code 2 gpu-train --init-from hf --prompt "$P" 2>err &&
	grep -Fx "gpu-train: --prompt starts the text of --sample: give --sample N" err &&
	test_expect_code 2 gpu-train --sample 5 $TINY 2>err &&
	grep -Fx "gpu-train: --data is required (or a checkpoint to sample: --init-from CKPT, or --ckpt-dir DIR --resume)" err &&
	test_expect_code 2 gpu-train --init-from hf --sample 5 --steps 10 2>err &&
	grep -Fx "gpu-train: --steps 10 trains: it needs --data (without it, --sample samples the checkpoint)" err &&
	test_expect_code 2 gpu-train --init-from hf --sample 5 --metrics m.prom 2>err &&
	grep -Fx "gpu-train: --metrics reports training: not with --steps 0" err &&
	test_expect_code 1 gpu-train --ckpt-dir empty --resume --sample 5 2>err &&
	grep -Fx "gpu-train: --steps 0 --resume: no committed checkpoint in '"'"'empty'"'"'" err
'

test_expect_success 'a prompt for a vocabulary that is not bytes: refused, saying why' '
	gpu-train --data train.bin --layers 2 --hidden 32 --heads 2 --positions 33 --vocab 300 \
		--seq 16 --threads 1 --steps 1 --ckpt-dir v300 -q &&
	test_expect_code 1 gpu-train --init-from v300 --sample 5 --prompt "$P" 2>err &&
	grep -Fx "gpu-train: --prompt: a prompt is read as bytes, the tokens of a model of vocabulary 257; this model'"'"'s is 300 (its tokens need a tokenizer)" err
'

test_done
