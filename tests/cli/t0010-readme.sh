#!/bin/sh
test_description='every example in README.md runs as written

README.md'"'"'s commands (its indented code blocks, continuation lines
joined, trailing comments dropped) are listed below in the order the
README gives them, each with what runs here in its place: "=" for the
command as written, else the command with what this machine needs
instead (a small model and few steps for GPT-2 and 20000, the
local host for a cluster'"'"'s and 2 to 4 of its ranks for 8 to 32, the
first ones of its rank file, fixtures for a user'"'"'s files). The
first test fails when the README and the list differ, so an example
cannot change without running; each section of the README runs in a
directory of its own, its examples in order, as a reader would.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"
test_need_python transformers

# "## NAME" starts a README section (a fresh copy of the fixtures),
# "@ CMD" is a README command and the lines after it what runs for it:
# "=" the command itself, "skip: WHERE" for those another test runs (the
# demo, a local Slurm cluster) or the suite itself.
cat >examples <<'EOF'
## two-commands
@ make demo
skip: the demo runs in t8101
@ make check
skip: this is make check

## chain
@ gpu-topo --rankfile > ranks
gpu-topo --rankfile -n 8 > ranks
test $(wc -l <ranks) = 8
@ mem-estimate --config config.json --fit 80GiB
=
@ find raw/ -type f | data-pack -c -T - -o shards/train-%06d.tar --max-size 256M
=
@ mpirun -np 8 --rankfile ranks gpu-train --data 'shards/train-*.tar' --ckpt-dir ckpt
mpirun -np 2 --rankfile ranks gpu-train --data 'shards/train-*.tar' --ckpt-dir ckpt $TINY_RUN
@ allreduce-bench -b 8 -e 1G -f 2 -c 1
allreduce-bench -b 8 -e 1M -f 2 -c 1
@ ckpt-merge ckpt/latest -o model.safetensors
=
@ ckpt-shard model.safetensors -o hf/ --max-size 5GB
=
@ ckpt-prune --keep-last 3 --keep-every 10000 ckpt
=

## data-pack
@ find raw/ -type f | data-pack -c -T - --shuffle 1 -o shards/train-%06d.tar --max-size 256M --manifest shards/manifest.json
=
@ data-pack --verify shards/manifest.json
=
@ data-pack -g raw/0042.json shards/train-000000.tar
data-pack -g raw/0042.json shards/train-000000.tar >got && cmp got raw/0042.json
@ data-pack -x -C out/ shards/train-000000.tar
mkdir out && data-pack -x -C out/ shards/train-000000.tar && diff -r raw out/raw
@ data-pack -c -o docs/docs-%06d.tar --ext txt --name-as-key notes/
mkdir notes && printf "read me" >notes/README && printf "MIT" >notes/LICENSE && printf "# a" >notes/a.md
=
data-pack -t docs/docs-000000.tar >list && cut -f 2,3 list >keys && printf "LICENSE\ttxt\nREADME\ttxt\na_md\ttxt\n" >want && cmp want keys
@ data-pack -cf one.tar --ext txt notes/ && data-pack -tf one.tar
data-pack -cf one.tar --ext txt notes/ && data-pack -tf one.tar >list
printf "one.tar\tLICENSE\ttxt\t3\none.tar\tREADME\ttxt\t7\none.tar\ta\tmd\t3\n" >want && cmp want list
@ data-pack -c -o text/text-%06d.tar --tokenize gpt2/ --manifest text/text.json books/
mkdir books && cp raw/*.txt books/
"$GK_PY" -c 'import glob, os, tokenizers; t = tokenizers.ByteLevelBPETokenizer(); t.train(sorted(glob.glob("books/*.txt")), vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False); os.makedirs("gpt2"); t.save_model("gpt2")'
=
test "$(jq -r '.samples, .tokenizer.dtype' text/text.json | tr '\n' ' ')" = "60 <u2 "
test "$(data-pack -t text/text-000000.tar | cut -f 3 | sort -u)" = npy

## gpu-train
@ data-pack -c -o shards/train-%06d.tar --max-size 256M corpus/
=
@ mpirun -np 8 gpu-train --data 'shards/train-*.tar' --config config.json --batch 8 --seq 1024 --grad-accum 4 --lr 6e-4 --warmup 700 --steps 20000 --ckpt-dir ckpt --ckpt-every 1000 --resume --zero 1 --json > train.jsonl
mpirun -np 2 gpu-train --data 'shards/train-*.tar' --config config.json --batch 2 --seq 64 --grad-accum 2 --lr 6e-4 --warmup 1 --steps 2 --ckpt-dir ckpt --ckpt-every 1 --resume --zero 1 --json > train.jsonl
test $(jq -s 'map(select(.event == "step")) | length' train.jsonl) = 2
@ ckpt-merge ckpt/latest -o model/
=
"$GK_PY" -c 'import transformers; transformers.GPT2LMHeadModel.from_pretrained("model")'
@ gpu-train --eval-only --init-from ckpt --data val.bin --seq 1024
gpu-train --eval-only --init-from ckpt --data val.bin --seq 64
@ gpu-train --init-from ckpt --sample 200 --prompt 'int main(' --temperature 0
gpu-train --init-from ckpt --sample 200 --prompt 'int main(' --temperature 0 >sample.txt
grep "^int main(" sample.txt

## mem-estimate
@ mem-estimate --config config.json --dp 8 --zero 3 --recompute selective --explain
=
@ mem-estimate --config config.json --gpu A100-80 --world 64 --global-batch 512
=
@ mem-estimate --config config.json --infer --batch 16 --seq 4096 --kv-dtype f8_e4m3 --json
=

## gpu-topo
@ gpu-topo
=
@ ssh gpu-node lstopo --of xml - | gpu-topo -i -
cat "$GK_TOP/tests/data/topo/two-socket-switches.xml" | gpu-topo -i -
@ gpu-topo --rankfile --hosts 'node{01..04}' -n 8 > ranks
=
test $(grep -c "^rank .*=node0[1-4] slot=" ranks) = 32
@ mpirun -np 32 --rankfile ranks gpu-train ...
sed "s/=node0[1-4] /=$(hostname) /" ranks >here
mpirun -np 4 --rankfile here gpu-train --data val.bin $TINY_RUN --steps 1
@ gpu-topo --health -q --metrics /var/lib/node_exporter/textfile/gpu.prom
if test -e /dev/nvidiactl; then gpu-topo --health -q --metrics gpu.prom; else ! gpu-topo --health -q --metrics gpu.prom 2>err; grep "no NVIDIA driver" err; fi

## allreduce-bench
@ allreduce-bench -b 8 -e 64M -f 4
allreduce-bench -b 8 -e 1M -f 4
@ mpirun -np 4 allreduce-bench -b 1M -e 256M -f 4 --algo all
mpirun -np 4 allreduce-bench -b 1M -e 4M -f 4 --algo all
@ mpirun -np 4 allreduce-bench -b 16M -e 16M --compress bf16 -o avg
mpirun -np 4 allreduce-bench -b 1M -e 1M --compress bf16 -o avg

## ckpt
@ ckpt-merge ckpt/latest --dtype bf16 --keep-f32 '*ln*' -o model.safetensors
gpu-train --data val.bin $TINY_RUN --ckpt-dir ckpt -q
ckpt-merge ckpt/latest --dtype bf16 --keep-f32 '*ln*' -o model.safetensors
@ ckpt-shard model.safetensors --max-size 5GB -o hf/
=
@ ckpt-shard model.safetensors --ranks 8 --slice -o ranks/
=
@ ckpt-merge ranks/ -o again.safetensors && cmp model.safetensors again.safetensors
=

## ckpt-prune
@ ckpt-prune -nv --keep-last 3 --keep-every 10000 ckpt
gpu-train --data val.bin $TINY_RUN --steps 6 --ckpt-every 1 --ckpt-dir ckpt -q
ckpt-prune -nv --keep-last 3 --keep-every 10000 ckpt
test $(ls -d ckpt/step-* | wc -l) = 6
@ @hourly ckpt-prune --keep-last 3 --keep-every 10000 /data/ckpt >>/data/prune.log 2>&1
ckpt-prune --keep-last 3 --keep-every 10000 "$PWD/ckpt" >>prune.log 2>&1
test $(ls -d ckpt/step-* | wc -l) = 3

## cluster
@ mpirun --hostfile hosts -np 16 --bind-to none gpu-train ... --ckpt-dir /shared/ckpt --resume
echo "$(hostname) slots=16" >hosts
mpirun --hostfile hosts -np 2 --bind-to none gpu-train --data val.bin $TINY_RUN --ckpt-dir shared/ckpt --resume
@ mpirun -np 8 --rankfile ranks gpu-train ...
gpu-topo --rankfile -n 8 > ranks
mpirun -np 2 --rankfile ranks gpu-train --data val.bin $TINY_RUN

## scripts
@ gpu-train ... --json > train.jsonl
gpu-train --data val.bin $TINY_RUN --steps 4 --json > train.jsonl
@ scripts/plot-loss -o loss.png train.jsonl
"$GK_TOP/scripts/plot-loss" -o loss.png train.jsonl
head -c 8 loss.png | od -c | grep -q "P   N   G"
@ eval "$(scripts/slurm-local start /tmp/slurm)"
skip: t9100, t9101 and t9102 start local clusters (and need root)
@ DATA='shards/train-{000000..000031}.tar' CONFIG=config.json sbatch scripts/sbatch-train
skip: t9101 runs sbatch-train as documented on a local cluster
@ MAX=64K sbatch -N 1 --ntasks-per-node 2 scripts/sbatch-fabric-check
skip: t9100 runs sbatch-fabric-check with these settings on a local cluster
@ scripts/slurm-local stop /tmp/slurm
skip: t9100, t9101 and t9102 stop their clusters
EOF

# README.md's commands, one per line, in order.
readme_commands() {
	python3 - "$GK_TOP/README.md" <<-'PYEOF'
	import re, sys
	lines = open(sys.argv[1]).read().split("\n")
	out, block, prev_blank = [], [], True
	def flush():
	    cmd = ""
	    for l in block:
	        if cmd.endswith("\\"):
	            cmd = cmd[:-1].rstrip() + " " + l.strip()
	            continue
	        if cmd:
	            out.append(cmd)
	        cmd = l.strip()
	    if cmd:
	        out.append(cmd)
	    block.clear()
	section = ""
	for l in lines:
	    if l.startswith("## "):
	        section = l[3:].strip()
	    # the Layout section's block is a picture of the tree, not commands
	    code = l.startswith("    ") and (block or prev_blank) and section != "Layout"
	    if code:
	        block.append(re.sub(r"\s{2,}#.*$", "", l[4:]).rstrip())
	    elif block:
	        flush()
	    prev_blank = l.strip() == ""
	flush()
	for c in out:
	    if c:
	        print(c)
	PYEOF
}

test_expect_success 'the list below has every README command, in order' '
	readme_commands >readme &&
	sed -n "s/^@ //p" examples >listed &&
	test_cmp readme listed
'

test_expect_success 'setup: fixtures a reader would have' '
	train_data &&
	mkdir fix fix/raw &&
	cp val.bin fix/ &&
	python3 - <<-\PYEOF &&
	import json, os
	for i in range(60):
	    open("fix/raw/%04d.txt" % i, "w").write("sample %d: %s\n" % (i, "gpukit " * (i + 5)))
	    json.dump({"i": i}, open("fix/raw/%04d.json" % i, "w"))
	json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2,
	           "n_embd": 32, "n_head": 2, "n_positions": 64, "n_ctx": 64, "vocab_size": 257},
	          open("fix/config.json", "w"))
	PYEOF
	cp -R fix/raw fix/corpus
'

# A small model and few steps for the examples that train GPT-2 small.
TINY_RUN="--layers 2 --hidden 32 --heads 2 --positions 64 --seq 16 --batch 2 --steps 2 --threads 1"
export TINY_RUN

# Each example's commands as a script; the test's title is the README line.
python3 - <<'PYEOF'
import os
sec, n, cur, title = None, 0, None, {}
for line in open("examples").read().split("\n"):
    if line.startswith("## "):
        sec = line[3:]
        continue
    if line.startswith("@ "):
        n += 1
        cur = line[2:]
        os.makedirs("ex", exist_ok=True)
        with open("ex/%03d" % n, "w") as f:
            f.write("%s\n%s\n" % (sec, cur))
        continue
    if not line.strip() or cur is None:
        continue
    with open("ex/%03d" % n, "a") as f:
        f.write((cur if line == "=" else line) + "\n")
PYEOF

for ex in ex/*; do
	sec=$(sed -n 1p "$ex")
	title=$(sed -n 2p "$ex")
	# not run here: the list says where it runs
	sed -n 3p "$ex" | grep -q "^skip: " && continue
	sed 1,2d "$ex" >"$ex.sh"
	test_expect_success "README ($sec): $title" '
		{ test -d "sec-$sec" || cp -R fix "sec-$sec"; } &&
		(cd "sec-$sec" && set -e && . "../$ex.sh") >"$ex.log" 2>&1 ||
		{ cat "$ex.log"; false; }
	'
done

test_done
