#!/bin/sh
test_description='gpu-train checkpoints in transformers

A trained checkpoint, merged with ckpt-merge into a directory (-o hf/,
which carries the step'"'"'s config.json), loads as
transformers.GPT2LMHeadModel as it is, and its mean
cross-entropy over the windows gpu-train(1) documents equals
gpu-train --eval-only on the same tokens; a checkpoint written by
transformers loads in gpu-train (--init-from) with the same loss.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"
test_need_python torch transformers numpy

# transformers' references, in one process (importing torch and
# transformers takes seconds): the --max-size and --ranks directories load
# as GPT2LMHeadModel; the mean cross-entropy of hf over val.bin's windows
# (theirs); a model transformers initializes and saves (saved) and its own
# (theirs2).
cat >hf_refs.py <<'PYEOF'
import numpy as np
import torch
import transformers

def hf_loss(model, data, B, T):
    m = transformers.GPT2LMHeadModel.from_pretrained(model).eval()
    t = np.fromfile(data, dtype="<u2").astype(np.int64)
    ls = []
    for k in range((len(t) - 1) // (B * T)):
        w = np.stack([t[k * B * T + b * T: k * B * T + b * T + T + 1] for b in range(B)])
        x = torch.from_numpy(w)
        with torch.no_grad():
            lg = m(x[:, :T]).logits
        ls.append(torch.nn.functional.cross_entropy(
            lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1)).item())
    return "%.9g\n" % (sum(ls) / len(ls))

for d in ("hfs", "ranks"):
    transformers.GPT2LMHeadModel.from_pretrained(d)
open("theirs", "w").write(hf_loss("hf", "val.bin", 4, 16))
torch.manual_seed(0)
c = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=257, n_positions=33)
transformers.GPT2LMHeadModel(c).save_pretrained("saved")
open("theirs2", "w").write(hf_loss("saved", "val.bin", 4, 16))
PYEOF

test_expect_success 'train a little, merge the checkpoint' '
	train_data &&
	gpu-train --data train.bin $TINY --batch 4 --steps 8 -q --ckpt-dir ck &&
	ckpt-merge -q ck/latest -o hf/ &&
	ls hf >files &&
	printf "%s\n" config.json model.safetensors >expect &&
	test_cmp expect files &&
	cmp ck/latest/config.json hf/config.json
'

test_expect_success 'sharded (--max-size) and rank (ckpt-shard --ranks) directories carry it too' '
	ckpt-merge -q ck/latest --max-size 40K -o hfs &&
	cmp ck/latest/config.json hfs/config.json &&
	ckpt-shard -q ck/latest --ranks 2 -o ranks/ &&
	cmp ck/latest/config.json ranks/config.json &&
	"$GK_PY" hf_refs.py
'

test_expect_success 'inputs with different config.json make no directory, a file is still made' '
	cp -r hfs other &&
	sed "s/\"n_layer\"/\"n_layer_changed\"/" hfs/config.json >other/config.json &&
	! cmp hfs/config.json other/config.json &&
	test_expect_code 1 ckpt-merge -q hfs other -o both/ 2>err &&
	grep "config.json.* differ: the inputs are not one model" err &&
	! test -e both &&
	ckpt-merge -q hfs other -o both.safetensors &&
	ckpt-merge -q hfs hfs -o same/ &&
	cmp hfs/config.json same/config.json
'

test_expect_success 'GPT2LMHeadModel gives the loss gpu-train --eval-only gives' '
	gpu-train --eval-only --init-from ck --data val.bin --seq 16 --batch 4 --json >e.json &&
	jq -r "select(.event == \"eval\") | .loss" e.json >ours &&
	close_to ours theirs 1e-5
'

test_expect_success 'a model transformers saved fine-tunes in gpu-train' '
	gpu-train --eval-only --init-from saved --data val.bin --seq 16 --batch 4 --json >e2.json &&
	jq -r "select(.event == \"eval\") | .loss" e2.json >ours2 &&
	close_to ours2 theirs2 1e-5 &&
	gpu-train --eval-only --init-from saved/model.safetensors --data val.bin --seq 16 \
		--batch 4 --json >e3.json &&
	jq -r "select(.event == \"eval\") | .loss" e3.json >ours3 &&
	test_cmp ours2 ours3 &&
	gpu-train --init-from saved --data train.bin --seq 16 --batch 4 --steps 2 --threads 1 -q
'

test_done
