#!/bin/sh
test_description='gpu-train reads and writes text with the model'"'"'s tokenizer

A byte-level BPE tokenizer trained here with Hugging Face tokenizers
(GPT-2'"'"'s files: vocab.json + merges.txt, and tokenizer.json) and a random
GPT-2 of its vocabulary saved by transformers make a Hugging Face
directory. gpu-train --init-from it finds the tokenizer beside the model
(or takes --tokenizer), encodes --prompt with it and decodes --sample:
greedy decoding gives the prompt ids, the tokens and the text of
transformers'"'"' AutoTokenizer + generate(do_sample=False). A fine-tune on
token data carries the tokenizer into every checkpoint (listed in COMMIT),
ckpt-merge -o DIR/ carries it on, AutoTokenizer loads that directory, and
both sample as transformers does. A tokenizer larger than the model, and
missing or corrupt tokenizer files, are refused before any work; a
--tokenizer that encodes otherwise than the checkpoint'"'"'s own is noted (the
same vocabulary as tokenizer.json is not); ranks that find different
tokenizers are refused together.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"
test_need_python torch transformers tokenizers

P="<|endoftext|>static int gk_err_sys(gk_err *err, int n) { // it's the 2nd"

# the tokenizer, the model (weights wider than GPT-2's init, so that the
# greedy choices lead by far more than two implementations' rounding) and
# token data: C-like documents drawn from a seed, an end-of-text token after each;
# then, in the same process (importing torch and transformers takes seconds),
# the model's greedy continuation of PROMPT (hf_greedy.py) into the file GREEDY
#   make_hf.py TOP OUT PROMPT N GREEDY
cat >make_hf.py <<'EOF'
import glob, os, random, struct, sys
import torch, transformers
from tokenizers import ByteLevelBPETokenizer
from hf_greedy import greedy
top, out = sys.argv[1], sys.argv[2]
# C-like documents drawn from a fixed seed, not the tree's own files: an
# edit anywhere in the sources would train another tokenizer, and another
# random model could have a greedy step whose top two logits tie
r = random.Random(20240520)
words = ("static int void char const size_t return if for while else gk_err err gk_errf "
         "gk_err_sys errno NULL sizeof struct buf len rc fd path name n i out in free "
         "malloc memcpy strlen open read write close the a file not found it's 2nd of "
         "to is and or 0 1 2 16 100").split()
punct = [" ", " ", " ", " ", "(", ")", ";\n", ", ", " = ", " { ", " }\n", " // ", " *", "\n\t"]
os.makedirs("corpus")
files = []
for k in range(60):
    f = "corpus/doc-%02d.txt" % k
    with open(f, "w") as o:
        o.write("".join(r.choice(words) + r.choice(punct) for _ in range(1500)))
    files.append(f)
t = ByteLevelBPETokenizer()
t.train(files, vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"],
        show_progress=False)
torch.manual_seed(0)
c = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=t.get_vocab_size(),
                            n_positions=128, initializer_range=0.5)
transformers.GPT2LMHeadModel(c).save_pretrained(out)
t.save_model(out)
os.makedirs("tj")
t.save("tj/tokenizer.json")
s = ByteLevelBPETokenizer()
s.train(files, vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"],
        show_progress=False)
os.makedirs("small")
s.save_model("small")
eot = t.token_to_id("<|endoftext|>")
ids = []
for p in files[:6]:
    ids += t.encode(open(p).read()).ids + [eot]
h = [20240520, 1, len(ids)] + [0] * 253
open("tok.bin", "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(ids), *ids))
open(sys.argv[5], "w").write(greedy(out, sys.argv[3], int(sys.argv[4])) + "\n")
EOF

# transformers' greedy continuation of the prompt with the directory's own
# tokenizer, as gpu-train's --json sample event spells it; it fails when a
# step's top two logits are closer than 1e-3 (a tie rounding could break
# either way)
cat >hf_greedy.py <<'EOF'
import json, sys, torch, transformers

def greedy(d, p, n):
    tok = transformers.AutoTokenizer.from_pretrained(d)
    m = transformers.AutoModelForCausalLM.from_pretrained(d).eval()
    ids = tok(p).input_ids
    x = torch.tensor([ids])
    with torch.no_grad():
        out = m.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                         pad_token_id=0)
        lg = m(out).logits[0]
    for i in range(len(ids) - 1, out.shape[1] - 1):
        top = lg[i].topk(2).values
        assert top[0] - top[1] > 1e-3, "step %d: the top two logits tie" % i
    return json.dumps({"prompt": ids, "tokens": out[0, len(ids):].tolist(),
                       "text": tok.decode(out[0].tolist())})

if __name__ == "__main__":
    print(greedy(sys.argv[1], sys.argv[2], int(sys.argv[3])))
EOF

# the sample event of a --json log, as hf_greedy.py prints it
sample_of() {
	jq -c "select(.event == \"sample\") | {prompt, tokens, text}" "$1"
}

test_expect_success 'setup: a Hugging Face directory with its tokenizer, and token data' '
	"$GK_PY" make_hf.py "$GK_TOP" hf "$P" 40 theirs.raw >make.out 2>&1 &&
	test -f hf/vocab.json && test -f hf/merges.txt && test -f hf/model.safetensors &&
	jq -c "{prompt, tokens, text}" theirs.raw >theirs &&
	test $(jq ".tokens | length" theirs) = 40
'

test_expect_success 'greedy after a prompt: the prompt ids, tokens and text of transformers'"'"' generate()' '
	gpu-train --init-from hf --steps 0 --sample 40 --prompt "$P" --temperature 0 \
		--json >g.json &&
	sample_of g.json >ours &&
	test_cmp theirs ours &&
	jq -s -e "map(select(.event == \"start\"))[0].tokenizer == \"hf\"" g.json &&
	gpu-train --init-from hf --sample 40 --prompt "$P" --temperature 0 >g.txt &&
	head -n 1 g.txt | grep "; tokenizer hf\$" &&
	jq -j .text ours >expect.txt && echo >>expect.txt &&
	tail -n +4 g.txt >got.raw &&
	"$GK_PY" -c "import sys; sys.stdout.write(open(sys.argv[1], \"rb\").read().decode(\"utf-8\", \"replace\"))" \
		got.raw >got.txt &&
	test_cmp expect.txt got.txt
'

test_expect_success '--tokenizer names a tokenizer.json for a model without one' '
	mkdir bare &&
	cp hf/config.json hf/model.safetensors bare/ &&
	gpu-train --init-from bare --tokenizer tj/tokenizer.json --sample 40 --prompt "$P" \
		--temperature 0 --json >b.json &&
	sample_of b.json >ours-tj &&
	test_cmp theirs ours-tj &&
	gpu-train --init-from bare --sample 3 --temperature 0 >none.txt &&
	head -n 1 none.txt | grep "; no tokenizer: token ids\$" &&
	test_expect_code 1 gpu-train --init-from bare --sample 3 --prompt "$P" 2>err &&
	grep -F "gpu-train: --prompt: a prompt is read as bytes" err
'

test_expect_success '--tokenizer over the checkpoint'"'"'s own: a note when it encodes otherwise' '
	gpu-train --init-from hf --tokenizer small --sample 3 --prompt "$P" >out 2>err &&
	echo "gpu-train: note: --tokenizer '"'"'small'"'"' is not the tokenizer of checkpoint '"'"'hf'"'"' (it encodes text otherwise); the run uses '"'"'small'"'"', and so do its checkpoints" >expect &&
	test_cmp expect err &&
	head -n 1 out | grep "; tokenizer small\$" &&
	gpu-train --init-from hf --tokenizer tj/tokenizer.json --sample 40 --prompt "$P" \
		--temperature 0 --json >same.json 2>err &&
	test_must_be_empty err &&
	sample_of same.json >ours-same &&
	test_cmp theirs ours-same
'

test_expect_success 'a fine-tune on token data: each checkpoint carries the tokenizer, listed in COMMIT' '
	gpu-train --data tok.bin --init-from hf --steps 12 --seq 32 --lr 3e-3 --ckpt-every 6 \
		--ckpt-dir ck --json >ft.json &&
	jq -s -e "map(select(.event == \"start\"))[0].tokenizer == \"hf\"" ft.json &&
	for s in 00000006 00000012; do
		cmp hf/vocab.json ck/step-$s/vocab.json || return 1
	done &&
	cmp hf/merges.txt ck/latest/merges.txt &&
	jq -e ".files | has(\"vocab.json\") and has(\"merges.txt\") and (has(\"tokenizer.json\") | not)" \
		ck/latest/COMMIT &&
	gpu-train --data tok.bin --ckpt-dir ck --resume --steps 14 --seq 32 -q &&
	cmp hf/vocab.json ck/latest/vocab.json &&
	grep -F "\"step\": 14" ck/latest/COMMIT
'

test_expect_success 'the merged directory loads in AutoTokenizer; both sample as transformers does' '
	ckpt-merge -q ck/latest -o merged/ &&
	ls merged >files &&
	printf "%s\n" config.json merges.txt model.safetensors vocab.json >expect &&
	test_cmp expect files &&
	"$GK_PY" hf_greedy.py merged "$P" 30 >ft-theirs.raw 2>ft.err &&
	jq -c "{prompt, tokens, text}" ft-theirs.raw >ft-theirs &&
	gpu-train --init-from ck --sample 30 --prompt "$P" --temperature 0 --json >s1.json &&
	sample_of s1.json >ft-ours &&
	test_cmp ft-theirs ft-ours &&
	gpu-train --init-from merged --sample 30 --prompt "$P" --temperature 0 --json >s2.json &&
	sample_of s2.json >ft-ours2 &&
	test_cmp ft-theirs ft-ours2
'

test_expect_success 'ckpt-merge: inputs whose tokenizer files differ make no directory' '
	cp -r merged other &&
	cp tj/tokenizer.json other/ &&
	test_expect_code 1 ckpt-merge -q merged other -o both/ 2>err &&
	echo "ckpt-merge: the tokenizer files of '"'"'merged'"'"' and '"'"'other'"'"' differ: the inputs are not one model (merge into a file, or remove one'"'"'s tokenizer files)" >expect &&
	test_cmp expect err &&
	! test -e both &&
	ckpt-merge -q merged other -o both.safetensors &&
	mkdir notok &&
	cp merged/config.json merged/model.safetensors notok/ &&
	ckpt-merge -q notok merged -o one/ &&
	cmp merged/vocab.json one/vocab.json &&
	cmp merged/merges.txt one/merges.txt
'

test_expect_success 'a run on --tokenizer tokenizer.json checkpoints it as tokenizer.json' '
	gpu-train --data tok.bin --init-from bare --tokenizer tj/tokenizer.json --steps 2 \
		--seq 32 --ckpt-dir ckj -q &&
	cmp tj/tokenizer.json ckj/latest/tokenizer.json &&
	! test -e ckj/latest/vocab.json &&
	jq -e ".files | has(\"tokenizer.json\")" ckj/latest/COMMIT &&
	ckpt-merge -q ckj/latest -o mj/ &&
	cmp tj/tokenizer.json mj/tokenizer.json &&
	"$GK_PY" -c "
import sys, transformers
t = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
assert t(sys.argv[2]).input_ids == transformers.AutoTokenizer.from_pretrained(\"hf\")(sys.argv[2]).input_ids
" mj "$P"
'

test_expect_success 'a tokenizer larger than the model: refused before any work' '
	test_expect_code 1 gpu-train --data tok.bin --layers 2 --hidden 32 --heads 2 \
		--positions 33 --vocab 300 --tokenizer hf --steps 1 --ckpt-dir v300 >out 2>err &&
	test_must_be_empty out &&
	echo "gpu-train: tokenizer '"'"'hf'"'"': 400 tokens, more than the model'"'"'s vocabulary of 300 (the ids from 300 on have no embedding): is it the model'"'"'s tokenizer?" >expect &&
	test_cmp expect err &&
	! ls v300/step-* 2>/dev/null
'

test_expect_success 'missing or corrupt tokenizer files: refused, naming the file' '
	mkdir nomerges corrupt &&
	cp hf/config.json hf/model.safetensors hf/vocab.json nomerges/ &&
	cp hf/config.json hf/model.safetensors hf/merges.txt corrupt/ &&
	head -c 100 hf/vocab.json >corrupt/vocab.json &&
	test_expect_code 1 gpu-train --init-from nomerges --sample 3 >out 2>err &&
	test_must_be_empty out &&
	grep -Fx "gpu-train: the tokenizer of checkpoint '"'"'nomerges'"'"': open '"'"'nomerges/merges.txt'"'"': No such file or directory (put its files back, or name the model'"'"'s tokenizer with --tokenizer)" err &&
	test_expect_code 1 gpu-train --init-from corrupt --sample 3 2>err &&
	grep "^gpu-train: the tokenizer of checkpoint .corrupt.: parse .corrupt/vocab.json.: " err &&
	test_expect_code 1 gpu-train --init-from hf --tokenizer no-such --sample 3 2>err &&
	grep -Fx "gpu-train: tokenizer '"'"'no-such'"'"': No such file or directory" err &&
	gpu-train --init-from nomerges --tokenizer hf --sample 40 --prompt "$P" --temperature 0 \
		--json >nm.json &&
	sample_of nm.json >ours-nm &&
	test_cmp theirs ours-nm
'

test_expect_success MPI 'ranks that find different tokenizers: refused together, said once' '
	mkdir r0 r1 &&
	cp -r hf r0/ && cp -r hf r1/ &&
	cp small/vocab.json small/merges.txt r1/hf/ &&
	test_expect_code 1 timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
		sh -c "cd r\$OMPI_COMM_WORLD_RANK && exec gpu-train --init-from hf --sample 3 --threads 1" \
		>out 2>err &&
	grep -Fx "gpu-train: the ranks read different tokenizers (or some none): every rank must find the same tokenizer files (--tokenizer, or beside the checkpoint)" err >said &&
	test $(wc -l <said) = 1 &&
	cp small/vocab.json small/merges.txt r0/hf/ &&
	timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
		sh -c "cd r\$OMPI_COMM_WORLD_RANK && exec gpu-train --init-from hf --sample 3 --threads 1" \
		>out 2>err &&
	head -n 1 out | grep "; tokenizer hf\$"
'

test_expect_success 'without a tokenizer a byte model says so and samples bytes' '
	train_data &&
	gpu-train --data train.bin $TINY --steps 1 >bytes.out &&
	head -n 1 bytes.out | grep "; no tokenizer: bytes\$"
'

test_done
