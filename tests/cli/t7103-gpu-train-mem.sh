#!/bin/sh
test_description='gpu-train memory accounting against mem-estimate

For the same config.json, micro-batch and sequence, gpu-train reports
(in its start line) the parameter count (Hugging Face'"'"'s, without the
padded vocabulary rows) and the bytes it allocated; parameters, gradients and
optimizer states equal mem-estimate --precision f32 exactly (also with
ZeRO-1 over 2 and 3 ranks), and the activations (mem-estimate: layer
activations + logits + final norm) agree within 5 %. Over a grid (tp 2,
and tp 2 or pp 2 over 2 data-parallel groups) rank 0'"'"'s model states,
and its comm with --compress, equal mem-estimate'"'"'s for its stage, and a
tensor rank'"'"'s logits count the model'"'"'s share of the vocabulary, the
rest of its padded columns padding.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

cat >cmp.py <<'PYEOF'
import json, sys
start = next(json.loads(l) for l in open(sys.argv[1]) if '"start"' in l)
est = json.load(open(sys.argv[2]))
if start["params"] != est["model"]["params"]:
    sys.exit("params: gpu-train %d, mem-estimate %d" % (start["params"], est["model"]["params"]))
g, m = start["memory"], est["bytes"]
for k in ("parameters", "gradients", "optimizer"):
    if g[k] != m[k]:
        sys.exit("%s: gpu-train %d, mem-estimate %d" % (k, g[k], m[k]))
ma = m["activations"] + m.get("logits", 0) + m.get("final_norm", 0)
if abs(g["activations"] - ma) > 0.05 * ma:
    sys.exit("activations: gpu-train %d, mem-estimate %d" % (g["activations"], ma))
print("ok", g["activations"], ma)
PYEOF

test_expect_success 'a config.json from a checkpoint' '
	train_data &&
	gpu-train --data train.bin --layers 3 --hidden 64 --heads 4 --positions 64 \
		--seq 48 --batch 3 --steps 1 --threads 1 --ckpt-dir ck >/dev/null &&
	test -f ck/latest/config.json
'

run_one() {
	gpu-train --data train.bin --config ck/latest/config.json --seq 48 --batch 3 \
		--steps 1 --threads 1 --json "$@"
}

test_expect_success 'one rank: model states exact, activations within 5 %' '
	run_one >g.json &&
	mem-estimate --config ck/latest/config.json --precision f32 -b 3 -s 48 \
		--no-dropout --json >m.json &&
	python3 cmp.py g.json m.json
'

test_expect_success 'recompute layer = mem-estimate full recomputation (inputs kept)' '
	run_one --recompute layer >g.json &&
	mem-estimate --config ck/latest/config.json --precision f32 -b 3 -s 48 \
		--no-dropout --recompute full --json >m.json &&
	jq -e ".bytes.parameters" m.json &&
	python3 - g.json m.json <<-\PY
	import json, sys
	g = next(json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l)["memory"]
	m = json.load(open(sys.argv[2]))["bytes"]
	for k in ("parameters", "gradients", "optimizer"):
	    assert g[k] == m[k], k
	PY
'

test_expect_success 'an odd shape (hidden 36, vocab 300, 37 positions): model states still exact' '
	cat >odd.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 3, "n_embd": 36, "n_head": 3,
	 "vocab_size": 300, "n_positions": 37}
	EOF
	gpu-train --data train.bin --config odd.json --seq 37 --batch 2 --steps 1 \
		--threads 1 --json >g.json &&
	mem-estimate --config odd.json --precision f32 -b 2 -s 37 --no-dropout --json >m.json &&
	python3 cmp.py g.json m.json
'

for n in 2 3; do
	test_expect_success MPI "ZeRO-1 over $n ranks: optimizer divided exactly" "
		mpi $n --data train.bin --config ck/latest/config.json --seq 48 --batch 3 \
			--steps 1 --threads 1 --json --zero 1 >g$n.json &&
		mem-estimate --config ck/latest/config.json --precision f32 -b 3 -s 48 \
			--no-dropout --zero 1 --dp $n --json >m$n.json &&
		python3 cmp.py g$n.json m$n.json
	"
done

# Each rank's peak RSS, through a wrapper that runs it as a child (GNU
# time is not everywhere): rank r writes rss.r in KiB.
cat >rss.py <<'PYEOF'
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1] + "." + os.environ.get("OMPI_COMM_WORLD_RANK", "0"), "w") as f:
    f.write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)
PYEOF

# 6.5M parameters (52 MB of moments, 26 MB saved a rank at world 2), tiny
# activations: one full-length buffer for the communication would cost
# all 26 MB of the saving, so it cannot hide below the 12 MB asked for
test_expect_success MPI 'ZeRO-1 over 2 ranks: the moments halve, nothing added for the communication, peak RSS down' '
	for z in 0 1; do
		timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
			python3 rss.py rss$z gpu-train --data train.bin --layers 2 --hidden 512 \
			--heads 4 --positions 16 --seq 16 --batch 1 --steps 1 --threads 1 \
			--json --zero $z >z$z.json || return 1
	done &&
	python3 - z0.json z1.json <<-\PY &&
	import json, sys
	z0, z1 = (next(json.loads(l) for l in open(f) if "\"start\"" in l)["memory"]
	          for f in sys.argv[1:])
	assert z1["optimizer"] * 2 == z0["optimizer"], (z0, z1)
	assert z1["comm"] == 0, z1
	saved = z0["optimizer"] - z1["optimizer"]
	assert z0["total"] - z1["total"] >= saved * 0.99, (z0["total"], z1["total"], saved)
	PY
	for r in 0 1; do
		test $(cat rss1.$r) -lt $(($(cat rss0.$r) - 12 * 1024)) || {
			echo "rank $r: peak RSS $(cat rss1.$r) KiB with ZeRO-1, $(cat rss0.$r) without"
			return 1
		}
	done
'

# Peak RSS (VmHWM, ru_maxrss of the wrapped rank) against the run's own
# accounting (the start line's memory.total, which is rank 0's), in every
# mode, at a shape where the model dominates: 4 layers x 512 with GPT-2's
# vocabulary, 38M parameters. Rank 0 holds the most (it alone copies the
# parameters for a checkpoint), and its accounting is the one printed: the
# other ranks' peaks are held to it as a bound. Two steps: the first
# allocates what a step needs (moments, error feedback, buffers), the
# second shows what a step would add again; with a checkpoint every step,
# step 2 runs while step 1's checkpoint is written and then copies its
# own, which is all a longer run repeats.
# (Not under AddressSanitizer, whose shadow memory and quarantine are
# resident memory no trainer allocates.)
if ! ldd "$(command -v gpu-train)" 2>/dev/null | grep -q libasan; then
	test_set_prereq NOASAN
fi
BIGM="--layers 4 --hidden 512 --heads 8 --vocab 50257 --positions 64 --seq 64 --batch 2 --steps 2 --threads 1"

peak_within() {
	python3 - "$@" <<-\PY
	import json, sys
	log, n = sys.argv[1], int(sys.argv[2])
	start = next(json.loads(l) for l in open(log) if "\"start\"" in l)
	total = start["memory"]["total"]
	for r in range(n):
	    kib = int(open("hwm.%d" % r).read())
	    ratio = kib * 1024 / total
	    print("rank %d: peak %d KiB, accounting %d KiB, %.3f" % (r, kib, total // 1024, ratio))
	    if ratio > 1.2:
	        sys.exit("rank %d: peak RSS %.3f times the accounting" % (r, ratio))
	PY
}

test_expect_success NOASAN 'peak RSS within 1.2x of the accounting: one rank, and with a checkpoint every step' '
	rm -f hwm.* &&
	python3 rss.py hwm gpu-train --data train.bin $BIGM --json >p0.json &&
	peak_within p0.json 1 &&
	python3 rss.py hwm gpu-train --data train.bin $BIGM --json --ckpt-dir pk --ckpt-every 1 >p1.json &&
	jq -s -e "map(select(.event == \"start\"))[0].memory.checkpoint > 0" p1.json &&
	peak_within p1.json 1
'

for mode in "--zero 0" "--zero 0 --compress bf16" "--zero 1" "--zero 1 --compress bf16" \
	"--zero 1 --compress bf16 --ckpt-dir pk2 --ckpt-every 1"; do
	name=$(echo "$mode" | tr -d " -")
	test_expect_success MPI,NOASAN "peak RSS within 1.2x of the accounting over 2 ranks: $mode" "
		rm -rf hwm.* pk2 &&
		timeout 600 mpirun --oversubscribe --bind-to none -np 2 \
			python3 rss.py hwm gpu-train --data train.bin \$BIGM --json $mode >p$name.json &&
		peak_within p$name.json 2 &&
		cp hwm.0 hwm$name
	"
done

# ZeRO-1's compressed reduce-scatter adds what the accounting's comm says
# (its error feedback, 4 bytes a parameter, and the ring's two wire
# buffers of a block) and nothing else: a buffer of the gradients' length
# allocated for each step's reduce-scatter would add 4 bytes a parameter
# more.
test_expect_success MPI,NOASAN 'ZeRO-1: --compress adds its accounted comm to the peak, no more' '
	comm=$(jq -s "map(select(.event == \"start\"))[0].memory.comm" pzero1compressbf16.json) &&
	test "$comm" -gt 150000000 &&
	grow=$(( ($(cat hwmzero1compressbf16) - $(cat hwmzero1)) * 1024 )) &&
	echo "peak grows by $grow bytes, the accounting by $comm" &&
	test $grow -lt $((comm * 6 / 5))
'

# The checkpoint's copy: gpu-train's category checkpoint is mem-estimate
# --ckpt-copy's checkpoint_copy (a vocabulary of whole tiles, so that no
# padded rows differ): rank 0's parameters and the moments it writes.
test_expect_success 'the checkpoint copy: gpu-train and mem-estimate --ckpt-copy agree' '
	gpu-train --data train.bin --layers 2 --hidden 64 --heads 4 --vocab 384 --positions 64 \
		--seq 32 --batch 2 --steps 1 --threads 1 --ckpt-dir cc --json >cc.json &&
	mem-estimate --config cc/latest/config.json --precision f32 -b 2 -s 32 --no-dropout \
		--ckpt-copy --json >mc.json &&
	g=$(jq -s "map(select(.event == \"start\"))[0].memory.checkpoint" cc.json) &&
	m=$(jq ".bytes.checkpoint_copy" mc.json) &&
	p=$(jq ".model.params" mc.json) &&
	echo "gpu-train $g, mem-estimate $m, $p parameters" &&
	test "$g" = "$m" && test "$m" = $((12 * p))
'

test_expect_success MPI 'the checkpoint copy under ZeRO-1 over 2 ranks: 4 + 8/2 bytes a parameter' '
	mpi 2 --data train.bin --config cc/latest/config.json --seq 32 --batch 2 --steps 1 \
		--threads 1 --zero 1 --ckpt-dir cc2 --json >cc2.json &&
	mem-estimate --config cc/latest/config.json --precision f32 -b 2 -s 32 --no-dropout \
		--zero 1 --dp 2 --ckpt-copy --json >mc2.json &&
	g=$(jq -s "map(select(.event == \"start\"))[0].memory.checkpoint" cc2.json) &&
	m=$(jq ".bytes.checkpoint_copy" mc2.json) &&
	p=$(jq ".model.params" mc2.json) &&
	echo "gpu-train $g, mem-estimate $m, $p parameters" &&
	test "$g" = "$m" && test "$m" = $((8 * p))
'

test_expect_success MPI 'the checkpoint copy under ZeRO-3 over 2 ranks: each rank its shard, (4 + 8)/2 bytes a parameter' '
	mpi 2 --data train.bin --config cc/latest/config.json --seq 32 --batch 2 --steps 1 \
		--threads 1 --zero 3 --ckpt-dir cc3 --json >cc3.json &&
	mem-estimate --config cc/latest/config.json --precision f32 -b 2 -s 32 --no-dropout \
		--zero 3 --dp 2 --ckpt-copy --json >mc3.json &&
	g=$(jq -s "map(select(.event == \"start\"))[0].memory.checkpoint" cc3.json) &&
	m=$(jq ".bytes.checkpoint_copy" mc3.json) &&
	p=$(jq ".model.params" mc3.json) &&
	echo "gpu-train $g, mem-estimate $m, $p parameters" &&
	test "$g" = "$m" && test "$m" = $((6 * p))
'

# Over a grid, rank 0's (stage 0's, tensor rank 0's) accounting against
# mem-estimate --pp-stage 0 for the same layout: the model states, and
# under ZeRO 0 and 1 with --compress bf16 its comm, which holds nothing
# else there: the error feedback of the stage's segments (with the padded
# vocabulary's rows and the last stage's wte) and under ZeRO-1 the wire
# buffers of the largest piece, mem-estimate's compress_feedback and
# compress_wire, and a pipeline stage's send buffers, its pp_buffers. A
# model of 300 tokens, 384 padded rows, 192 a tensor rank.
cat >grid.json <<\EOF
{"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2,
 "vocab_size": 300, "n_positions": 33}
EOF
cat >cmpg.py <<'PYEOF'
import json, sys
g = next(json.loads(l) for l in open(sys.argv[1]) if '"start"' in l)["memory"]
est = json.load(open(sys.argv[2]))["bytes"]
for k in ("parameters", "gradients", "optimizer"):
    if g[k] != est[k]:
        sys.exit("%s: gpu-train %d, mem-estimate %d" % (k, g[k], est[k]))
want = est.get("compress_feedback", 0) + est.get("compress_wire", 0) + est.get("pp_buffers", 0)
if g["comm"] != want:
    sys.exit("comm: gpu-train %d, mem-estimate %d" % (g["comm"], want))
print("ok", want)
PYEOF

# grid_run RANKS NAME FLAGS...: a layout of RANKS / 2 data-parallel
# groups (FLAGS give --tp 2 or --pp 2) against mem-estimate
grid_run() {
	np=$1 out=$2
	shift 2
	mpi $np --data train.bin --config grid.json --seq 16 --batch 4 --steps 1 --threads 1 \
		--json "$@" >$out.json 2>/dev/null &&
	mem-estimate --config grid.json --precision f32 -b 4 -s 16 --no-dropout --pp-stage 0 \
		--dp $((np / 2)) --json "$@" >${out}e.json &&
	python3 cmpg.py $out.json ${out}e.json
}

test_expect_success MPI 'tp 2, and tp 2 x dp 2 and pp 2 x dp 2 with --compress bf16 under ZeRO 0 and 1: model states and comm = mem-estimate'"'"'s' '
	grid_run 2 t2 --tp 2 &&
	for z in 0 1; do
		grid_run 4 tz$z --tp 2 --zero $z --compress bf16 &&
		grid_run 4 pz$z --pp 2 --zero $z --compress bf16 || return 1
	done
'

# The logits of a tensor rank are its 192 of the 384 padded columns;
# the accounting's activations are the model's share of them, 150 of
# 300 (mem-estimate's logits), the rest padding: with a vocabulary of
# 384, whose allocation is the same, the activations grow by what
# mem-estimate's logits do, and nothing is padding.
test_expect_success MPI 'tp 2: the logits'"'"' padding is a tensor rank'"'"'s share, as mem-estimate counts it' '
	sed "s/\"vocab_size\": 300/\"vocab_size\": 384/" grid.json >grid384.json &&
	mpi 2 --data train.bin --config grid384.json --seq 16 --batch 4 --steps 1 --threads 1 \
		--json --tp 2 >t384.json &&
	mem-estimate --config grid384.json --precision f32 -b 4 -s 16 --no-dropout --tp 2 \
		--json >t384e.json &&
	python3 - t2.json t384.json t2e.json t384e.json <<-\PY
	import json, sys
	def start(f):
	    return next(json.loads(l) for l in open(f) if "\"start\"" in l)["memory"]
	a, b = start(sys.argv[1]), start(sys.argv[2])
	ea, eb = (json.load(open(f))["bytes"] for f in sys.argv[3:5])
	assert a["total"] == b["total"], (a, b)
	grow = eb["logits"] - ea["logits"]
	assert grow == 4 * 4 * 16 * (384 - 300) // 2, grow
	assert b["activations"] - a["activations"] == grow, (a, b, grow)
	assert b["padding"] == 0, b
	PY
'

test_done
