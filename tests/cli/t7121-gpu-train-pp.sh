#!/bin/sh
test_description='gpu-train --pp: pipeline parallelism on the CPU

On the same global batch, pp 2 (2 ranks), pp 2 x dp 2 (4 ranks), pp 3 on
a model of 3 layers and pp 3 on one of 4 (stages of 2, 1 and 1 layers)
and tp 2 x pp 2 (4 ranks) give the losses and global gradient norms of
one rank within 1e-5
relative, step by step. Step 1 is bit for bit: every stage computes the
same kernels on the same inputs as one rank. Later steps differ in the
last bits because the tied embedding'"'"'s gradient is summed in another
order: one rank adds the head'"'"'s and the embedding'"'"'s parts of each
micro-batch into one buffer in turn, a pipeline accumulates the head'"'"'s
on the last stage and the embedding'"'"'s on the first and adds the two
sums (and the norm'"'"'s sum of squares is summed per stage). The GPipe
and 1F1B schedules run each stage'"'"'s backwards in the same order: the
same bits. Checkpoints hold the whole model (each stage'"'"'s layers from
the stage that trained them), so --resume goes from pp 2 to one rank and
from one rank to pp 3 and from tp 2 x pp 2 to pp 2, each continuing the
run that never stopped. A stage holds only its range of the
parameters, gradients and moments: rank 0'"'"'s accounting is mem-estimate
--pp'"'"'s (and --tp 2 --pp 2'"'"'s) and the flat layout'"'"'s, and a stage of
2 on a larger model peaks 48 MB below a rank of --pp 1.
ZeRO-1 at pp 2 x dp 2 (each stage'"'"'s moments cut over its
data-parallel group) gives the losses, parameters and moments of ZeRO-0
bit for bit and half the moments on rank 0, and its checkpoint resumes
on one rank and at dp 4 under ZeRO-1, continuing the run (in its own
layout, bit for bit); ZeRO-2 there (ZeRO-1'"'"'s pieces reduce-scattered
in buckets after the schedule, the rest of the gradients given back)
gives ZeRO-1'"'"'s bits, mem-estimate --zero 2'"'"'s model states and ZeRO-1'"'"'s
total, and its checkpoint resumes on one rank. A
rank that stops mid-step ends the whole grid with one message naming it
(the watchdog of --timeout), one killed ends it through the launcher, a
file one rank of a tp 2 x pp 2 grid lacks is said once with its world
rank and coordinates;
layouts and options --pp does not take are refused with the numbers or
the alternative.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

S="--data train.bin --hidden 32 --heads 2 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2 --clip 1"
A="$S --layers 2 --steps 8 --json --grad-accum 4"

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

test_expect_success 'data, and the runs of one rank (2, 3 and 4 layers, batch 4 x 4 micro-batches)' '
	train_data &&
	gpu-train $A --batch 4 >one.json &&
	losses one.json >one && norms one.json >one.n &&
	test $(wc -l <one) = 8 &&
	gpu-train $S --layers 3 --steps 8 --json --grad-accum 4 --batch 4 >one3.json &&
	gpu-train $S --layers 4 --steps 8 --json --grad-accum 4 --batch 4 >one4.json &&
	losses one3.json >one3 && losses one4.json >one4
'

test_expect_success MPI 'pp 2 (2 ranks) = one rank: step 1 bit for bit, then within 1e-5' '
	mpi 2 $A --batch 4 --pp 2 >pp2.json 2>err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 1 and .tp == 1 and
		.world == 2 and .pp_schedule == \"1f1b\" and .pp_bubble == 0.25" pp2.json &&
	losses pp2.json >pp2 && norms pp2.json >pp2.n &&
	test "$(head -n 1 pp2)" = "$(head -n 1 one)" &&
	close_to pp2 one 1e-5 &&
	close_to pp2.n one.n 1e-5 &&
	! grep warning err
'

# rank 0 (stage 0) sends each of the 4 micro-batches' activations,
# B x T x C = 4 x 16 x 32 floats: 4 x 4 x 16 x 32 x 4 bytes a step, and
# the last stage as many gradients back
test_expect_success MPI 'a step'"'"'s pp_comm_bytes: M B T C floats from stage 0, as many back from stage 1' '
	jq -s -e "map(select(.event == \"step\")) | length == 8 and
		all(.pp_comm_bytes == 4 * 4 * 16 * 32 * 4 and
		    (.pp_stages | map(.pp_comm_bytes)) == [32768, 32768])" pp2.json
'

# the pipeline's time P is the longest stage's span, so busy + idle is P
# on every stage; a stage's bubble is idle / busy, the pipeline's the
# sums' (the measure of the start line's (S-1)/m)
pp_bubble_defined() {
	jq -s -e --argjson S "$2" "map(select(.event == \"step\")) | length > 0 and all(
		(.pp_stages | length == \$S and all(.busy_ms > 0 and .idle_ms >= 0) and
		 map(.busy_ms + .idle_ms) as \$p | (\$p | max) - (\$p | min) <= 1e-9 * (\$p | max) and
		 all(((.bubble - .idle_ms / .busy_ms) | fabs) <= 1e-9 * (1 + .bubble))) and
		(.pp_bubble - ((.pp_stages | map(.idle_ms) | add) / (.pp_stages | map(.busy_ms) | add)) | fabs)
			<= 1e-9 * (1 + .pp_bubble))" "$1"
}

test_expect_success MPI 'pp_bubble: the stages'"'"' idle time over their busy time in the pipeline'"'"'s time' '
	pp_bubble_defined pp2.json 2
'

test_expect_success MPI 'GPipe and 1F1B: the same bits' '
	mpi 2 $A --batch 4 --pp 2 --pp-schedule gpipe >gpipe.json &&
	jq -s -e "map(select(.event == \"start\"))[0].pp_schedule == \"gpipe\"" gpipe.json &&
	steps gpipe.json >gpipe.steps && steps pp2.json >pp2.steps &&
	test $(wc -l <gpipe.steps) = 8 &&
	test_cmp pp2.steps gpipe.steps
'

# stage 0 of 2 keeps the activations of its micro-batches in flight: 2
# under 1F1B (the warm-up's one and the steady state's), all 4 under
# GPipe; a set holds its one layer and no head, less than one rank's
test_expect_success MPI 'rank 0'"'"'s activations: 2 micro-batches'"'"' under 1F1B, 4 under GPipe' '
	act() { jq -s "map(select(.event == \"start\"))[0].memory.activations" "$1"; } &&
	a1=$(act one.json) && a2=$(act pp2.json) && a4=$(act gpipe.json) &&
	echo "one rank $a1, 1f1b $a2, gpipe $a4" &&
	set=$((a2 / 2)) &&
	test $a2 = $((2 * set)) && test $a4 = $((4 * set)) &&
	test $set -lt $((a1 * 3 / 4))
'

test_expect_success MPI 'pp 2 x dp 2 (4 ranks x batch 2) = one rank x batch 4' '
	mpi 4 $A --batch 2 --pp 2 >pp2dp2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2" pp2dp2.json &&
	losses pp2dp2.json >pp2dp2 && norms pp2dp2.json >pp2dp2.n &&
	close_to pp2dp2 one 1e-5 &&
	close_to pp2dp2.n one.n 1e-5
'

test_expect_success MPI 'tp 2 x pp 2 (4 ranks x batch 4) = one rank' '
	mpi 4 $A --batch 4 --pp 2 --tp 2 --metrics tp2pp2.prom >tp2pp2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .tp == 2 and .dp == 1" tp2pp2.json &&
	losses tp2pp2.json >tp2pp2 && norms tp2pp2.json >tp2pp2.n &&
	close_to tp2pp2 one 1e-5 &&
	close_to tp2pp2.n one.n 1e-5
'

# N = B x T = 64 rows, C 32, one layer a stage, 4 micro-batches: per
# micro-batch stage 0 sums the vocabulary-parallel embedding (N C
# floats) and its layer'"'"'s 2 allreduces forward and 2 backward (4 N C),
# stage 1 its layer'"'"'s 4 N C, the head'"'"'s d lnf backward (N C) and the
# cross-entropy'"'"'s max, target logit and sum of exponentials (3 N)
test_expect_success MPI 'tp 2 x pp 2: each stage'"'"'s tp_comm_bytes is the formula of its layers, embedding and head' '
	jq -s -e "map(select(.event == \"step\")) | length == 8 and all(
		.tp_comm_bytes == 4 * 4 * 5 * 64 * 32 and
		(.pp_stages | map(.tp_comm_bytes)) == [4 * 4 * 5 * 64 * 32, 4 * 4 * (5 * 64 * 32 + 3 * 64)])" tp2pp2.json &&
	pp_bubble_defined tp2pp2.json 2
'

test_expect_success MPI '--metrics: the last step'"'"'s pp_bubble, each stage'"'"'s figures and the tensor-parallel bytes' '
	jq -r "select(.event == \"step\") | \"gpukit_train_tp_comm_bytes{run=\\\"tp2pp2\\\"} \(.tp_comm_bytes)\",
		\"gpukit_train_pp_bubble_ratio{run=\\\"tp2pp2\\\"} \(.pp_bubble)\",
		(.pp_stages[] | \"gpukit_train_pp_stage_bubble_ratio{run=\\\"tp2pp2\\\",stage=\\\"\(.stage)\\\"} \(.bubble)\",
			\"gpukit_train_pp_comm_bytes{run=\\\"tp2pp2\\\",stage=\\\"\(.stage)\\\"} \(.pp_comm_bytes)\",
			\"gpukit_train_pp_stage_tp_comm_bytes{run=\\\"tp2pp2\\\",stage=\\\"\(.stage)\\\"} \(.tp_comm_bytes)\")" \
		tp2pp2.json | tail -n 8 | sort >want.prom &&
	grep -E "^gpukit_train_(tp_comm_bytes|pp_bubble_ratio|pp_stage_bubble_ratio|pp_comm_bytes|pp_stage_tp_comm_bytes)" \
		tp2pp2.prom | sort >got.prom &&
	cat got.prom &&
	test $(wc -l <got.prom) = 8 &&
	awk "NR == FNR { w[\$1] = \$2; next } !(\$1 in w) || (\$2 - w[\$1]) ^ 2 > 1e-20 * (1 + w[\$1] ^ 2) { bad = 1; print \"differs: \" \$0 } END { exit bad }" \
		want.prom got.prom
'

test_expect_success MPI 'pp 3 on 3 layers, and on 4 (stages of 2, 1, 1 layers) = one rank' '
	mpi 3 $S --layers 3 --steps 8 --json --grad-accum 4 --batch 4 --pp 3 >pp3.json &&
	losses pp3.json >pp3 && close_to pp3 one3 1e-5 &&
	pp_bubble_defined pp3.json 3 &&
	jq -s -e "map(select(.event == \"step\")) | all((.pp_stages | map(.pp_comm_bytes)) ==
		[32768, 65536, 32768])" pp3.json &&
	mpi 3 $S --layers 4 --steps 1 --grad-accum 4 --batch 4 --pp 3 >pp34.out &&
	grep "3 ranks (dp 1 x pp 3: layers 0-1, 2-2, 3-3; 1f1b over 4 micro-batches, bubble (3-1)/4 = 0.5)" pp34.out &&
	mpi 3 $S --layers 4 --steps 8 --json --grad-accum 4 --batch 4 --pp 3 >pp34.json &&
	losses pp34.json >pp34 && close_to pp34 one4 1e-5
'

test_expect_success MPI 'fewer micro-batches than stages: warned about, and still the same losses' '
	gpu-train $S --layers 3 --steps 3 --json --grad-accum 2 --batch 4 >m2.json &&
	mpi 3 $S --layers 3 --steps 3 --json --grad-accum 2 --batch 4 --pp 3 >m2pp.json 2>err &&
	test $(grep -c "warning: --pp 3 with --grad-accum 2: fewer micro-batches than stages" err) = 1 &&
	losses m2.json >m2 && losses m2pp.json >m2pp &&
	close_to m2pp m2 1e-5
'

# the accounting of rank 0 (stage 0: wte, wpe and its layers) against
# mem-estimate --pp, which reports the most loaded stage, the first; and
# against the flat layout: each float of the stage's range is 4 bytes of
# parameters, 4 of gradients and 8 of moments, those of the padded
# vocabulary rows in padding. Its comm is its send buffers, one for each
# of the step's micro-batches of a micro-batch's activations (stage 0
# sends no gradients), mem-estimate's pp_buffers, counted here from the
# shapes.
cat >pcmp.py <<\PYEOF
import json, sys
st = next(json.loads(l) for l in open(sys.argv[1]) if '"start"' in l)
est = json.load(open(sys.argv[2]))
g, m = st["memory"], est["bytes"]
assert est["stage"] == 0, est["stage"]
for k in ("parameters", "gradients", "optimizer"):
    if g[k] != m[k]:
        sys.exit("%s: gpu-train %d, mem-estimate --pp %d" % (k, g[k], m[k]))
if st["tp"] == 1:
    C, L, S = st["hidden"], st["layers"], st["pp"]
    l0 = L // S + (L % S > 0)  # the first stage's layers
    floats = st["params_padded"] - (L - l0) * (12 * C * C + 13 * C) - 2 * C
    whole = 2 * ((4 * floats + 63) // 64 * 64) + 8 * floats
    got = g["parameters"] + g["gradients"] + g["optimizer"] + g["padding"]
    if got != whole:
        sys.exit("stage 0 holds %d floats: %d bytes, accounted %d" % (floats, whole, got))
if st["tp"] == 1:
    sends = st["grad_accum"] * st["batch"] * st["seq"] * st["hidden"] * 4
    if not g["comm"] == m["pp_buffers"] == sends:
        sys.exit("comm: gpu-train %d, mem-estimate's pp_buffers %d, the sends' %d" %
                 (g["comm"], m["pp_buffers"], sends))
print("stage 0:", g["parameters"], g["gradients"], g["optimizer"], g["comm"])
PYEOF

test_expect_success MPI 'memory of stage 0: parameters, gradients and optimizer = mem-estimate --pp 2 (and --tp 2 --pp 2)' '
	start_config pp2.json cfg.json &&
	mem-estimate --config cfg.json --precision f32 -b 4 -s 16 --grad-accum 4 \
		--no-dropout --pp 2 --json >me.json &&
	python3 pcmp.py pp2.json me.json &&
	mem-estimate --config cfg.json --precision f32 -b 4 -s 16 --grad-accum 4 \
		--no-dropout --pp 2 --tp 2 --json >me4.json &&
	python3 pcmp.py tp2pp2.json me4.json
'

# ZeRO-1 over a pipeline: each stage's moments cut over its data-parallel
# group (wte a piece of its own on both ends), the gradients reduced and
# the parameters gathered by the pieces; at 2 data-parallel ranks every
# sum is a sum of two, in either order the same: ZeRO-0's bits
Z="$S --layers 2 --steps 2 --json --grad-accum 2 --batch 2 --pp 2"

test_expect_success MPI 'pp 2 x dp 2 --zero 1 = --zero 0 bit for bit (losses, parameters, moments); rank 0 holds half the moments, as mem-estimate says' '
	mpi 4 $Z --ckpt-dir z0 >z0.json &&
	mpi 4 $Z --zero 1 --ckpt-dir z1 >z1.json &&
	losses z0.json >z0.l && losses z1.json >z1.l &&
	test $(wc -l <z1.l) = 2 &&
	test_cmp z0.l z1.l &&
	norms z0.json >z0.n && norms z1.json >z1.n &&
	close_to z1.n z0.n 1e-12 &&
	cmp z0/latest/model.safetensors z1/latest/model.safetensors &&
	cmp z0/latest/optim.safetensors z1/latest/optim.safetensors &&
	jq -e ".zero == 1 and .pp == 2 and .world == 2" z1/latest/trainer.json &&
	opt() { jq -s "map(select(.event == \"start\"))[0].memory.optimizer" "$1"; } &&
	test $(opt z1.json) = $(($(opt z0.json) / 2)) &&
	start_config z1.json cfgz.json &&
	mem-estimate --config cfgz.json --precision f32 -b 2 -s 16 --grad-accum 2 \
		--no-dropout --pp 2 --dp 2 --zero 1 --json >mez.json &&
	test $(jq .bytes.optimizer mez.json) = $(opt z1.json)
'

test_expect_success MPI 'a pp 2 x dp 2 --zero 1 checkpoint resumes on one rank (ZeRO-0) and at dp 4 (ZeRO-1), continuing the run, and in its own layout bit for bit' '
	R="$S --layers 2 --steps 4 --json --grad-accum 2" &&
	gpu-train $R --batch 4 >zone.json &&
	mpi 4 $R --batch 2 --pp 2 --zero 1 >zfull.json &&
	mpi 4 $R --batch 2 --pp 2 --zero 1 --until 2 --ckpt-dir zr >zr0.json &&
	cp -R zr zr4 && cp -R zr zr2 &&
	mpi 4 $R --batch 2 --pp 2 --zero 1 --ckpt-dir zr2 --resume >zr2.json &&
	steps zfull.json >zfull.s && { steps zr0.json && steps zr2.json; } >zr2.s &&
	test $(wc -l <zr2.s) = 4 &&
	test_cmp zfull.s zr2.s &&
	gpu-train $R --batch 4 --ckpt-dir zr --resume >zr1.json 2>err &&
	grep "resumed with --pp 1 (the checkpoint.s run: 2)" err &&
	grep "resumed with --zero 0 (the checkpoint.s run: 1)" err &&
	mpi 4 $R --batch 1 --zero 1 --ckpt-dir zr4 --resume >zr4.json &&
	losses zone.json >zone && tail -n 2 zone >zone.tail &&
	losses zr1.json >zr1.l && losses zr4.json >zr4.l &&
	test $(wc -l <zr1.l) = 2 && test $(wc -l <zr4.l) = 2 &&
	close_to zr1.l zone.tail 1e-5 &&
	close_to zr4.l zone.tail 1e-5
'

# ZeRO-2 over a pipeline: ZeRO-1's pieces, each segment reduce-scattered
# in buckets after the schedule (here of 1024 floats: several a stage)
# and the pages outside the rank's pieces given back; its sums are
# ZeRO-1's, its model states mem-estimate --zero 2's, and the rest of the
# stage's gradients, live from its first backward to the reduction, is
# counted as comm: the total is ZeRO-1's, and the comm is mem-estimate's
# pp_zero2_grads (the stage's segments less the rank's pieces, padded
# vocabulary rows included: 127 rows of 32 on stage 0) and pp_buffers
# (the stage's sends)
test_expect_success MPI 'pp 2 x dp 2 --zero 2 = --zero 1 bit for bit (losses, parameters, moments); gradients mem-estimate --zero 2'"'"'s, the total ZeRO-1'"'"'s' '
	mpi 4 $Z --zero 2 --bucket 4K --ckpt-dir z2 >z2.json &&
	losses z2.json >z2.l &&
	test_cmp z1.l z2.l &&
	norms z2.json >z2.n &&
	test_cmp z1.n z2.n &&
	stcmp z2/latest/model.safetensors z1/latest/model.safetensors 0 &&
	stcmp z2/latest/optim.safetensors z1/latest/optim.safetensors 0 &&
	jq -e ".zero == 2 and .pp == 2" z2/latest/trainer.json &&
	mem() { jq -s "map(select(.event == \"start\"))[0].memory.$2" "$1"; } &&
	test $(mem z2.json gradients) = $(($(mem z1.json gradients) / 2)) &&
	test $(mem z2.json total) = $(mem z1.json total) &&
	test $(mem z2.json comm) -gt 0 &&
	mem-estimate --config z2/latest/config.json --precision f32 -b 2 -s 16 --grad-accum 2 \
		--no-dropout --pp 2 --dp 2 --zero 2 --json >mez2.json &&
	states_same z2.json mez2.json &&
	test $(mem z2.json comm) = $(($(jq .bytes.pp_zero2_grads mez2.json) +
		$(jq .bytes.pp_buffers mez2.json)))
'

test_expect_success MPI 'a pp 2 x dp 2 --zero 2 checkpoint resumes on one rank, continuing the run within 1e-5' '
	R="$S --layers 2 --steps 4 --json --grad-accum 2" &&
	mpi 4 $R --batch 2 --pp 2 --zero 2 --until 2 --ckpt-dir z2r >/dev/null &&
	gpu-train $R --batch 4 --ckpt-dir z2r --resume >z2r1.json 2>err &&
	grep "resumed with --pp 1 (the checkpoint.s run: 2)" err &&
	losses z2r1.json >z2r1.l &&
	test $(wc -l <z2r1.l) = 2 &&
	close_to z2r1.l zone.tail 1e-5
'

# Each rank's peak RSS (VmHWM), through a wrapper that runs it as a child.
cat >rss.py <<\PYEOF
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1] + "." + os.environ.get("OMPI_COMM_WORLD_RANK", "0"), "w") as f:
    f.write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)
PYEOF

if ! ldd "$(command -v gpu-train)" 2>/dev/null | grep -q libasan; then
	test_set_prereq NOASAN
fi

# 12 blocks of hidden 256 (9.5M parameters, 152 MB of parameters,
# gradients and moments, nearly all in the blocks): a stage of 2 holds
# half of them, 76 MB less than a rank of --pp 1 (2 data-parallel ranks)
# by the accounting; its peak RSS must show at least 48 MB of it
test_expect_success MPI,NOASAN 'a stage of 2 holds half the model: the accounting halves and peak RSS falls by 48 MB' '
	for p in 1 2; do
		timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
			python3 rss.py rss$p gpu-train --data train.bin --layers 12 --hidden 256 \
			--heads 4 --positions 16 --seq 16 --batch 1 --grad-accum 2 --steps 1 \
			--threads 1 --json --pp $p >y$p.json || return 1
	done &&
	python3 - y1.json y2.json <<-\PY &&
	import json, sys
	y1, y2 = (next(json.loads(l) for l in open(f) if "\"start\"" in l)["memory"]
	          for f in sys.argv[1:])
	s1 = y1["parameters"] + y1["gradients"] + y1["optimizer"]
	s2 = y2["parameters"] + y2["gradients"] + y2["optimizer"]
	assert 0.45 * s1 < s2 < 0.55 * s1, (y1, y2)
	assert y1["total"] - y2["total"] >= 70 << 20, (y1["total"], y2["total"])
	PY
	for r in 0 1; do
		echo "rank $r: peak RSS $(cat rss2.$r) KiB under --pp 2, $(cat rss1.$r) under --pp 1" &&
		test $(cat rss2.$r) -lt $(($(cat rss1.$r) - 48 * 1024)) || return 1
	done
'

B="$S --layers 3 --steps 8 --json --grad-accum 4 --batch 4"

test_expect_success MPI 'pp 2 checkpoints the whole model (the last stage'"'"'s layers too), within 1e-4 of one rank' '
	gpu-train $B --until 4 --ckpt-dir ck1 >/dev/null &&
	mpi 2 $B --pp 2 --until 4 --ckpt-dir ck2 >/dev/null &&
	jq -e ".world == 1 and .pp == 2 and .tp == 1" ck2/latest/trainer.json &&
	stcmp ck2/latest/model.safetensors ck1/latest/model.safetensors 1e-4 \
		--shape transformer.h.2.attn.c_attn.weight=32,96
'

test_expect_success MPI '--resume from pp 2 on one rank = the run that never stopped' '
	cp -R ck2 ck21 &&
	gpu-train $B --ckpt-dir ck21 --resume >r21.json 2>err &&
	grep "resumed with --pp 1 (the checkpoint.s run: 2)" err &&
	losses r21.json >r21 && tail -n 4 one3 >one3.tail &&
	test $(wc -l <r21) = 4 &&
	close_to r21 one3.tail 1e-5
'

test_expect_success MPI '--resume from one rank under pp 3 = the run that never stopped' '
	cp -R ck1 ck13 &&
	mpi 3 $B --pp 3 --ckpt-dir ck13 --resume >r13.json &&
	losses r13.json >r13 &&
	test $(wc -l <r13) = 4 &&
	close_to r13 one3.tail 1e-5
'

test_expect_success MPI 'tp 2 x pp 2 checkpoints the whole model; --resume from it under pp 2 continues' '
	mpi 4 $B --pp 2 --tp 2 --until 4 --ckpt-dir ck4 >/dev/null &&
	jq -e ".world == 1 and .pp == 2 and .tp == 2" ck4/latest/trainer.json &&
	stcmp ck4/latest/model.safetensors ck1/latest/model.safetensors 1e-4 \
		--shape transformer.h.2.attn.c_attn.weight=32,96 &&
	mpi 2 $B --pp 2 --ckpt-dir ck4 --resume >r42.json 2>err &&
	grep "resumed with --tp 1 (the checkpoint.s run: 2)" err &&
	losses r42.json >r42 &&
	test $(wc -l <r42) = 4 &&
	close_to r42 one3.tail 1e-5
'

# evaluation runs the pipeline forward only, a batch at a time; the last
# stage has the loss and every rank learns it
evl() {
	jq -r "select(.event == \"eval\") | .loss" "$1"
}

# (pp 2 x dp 2 at batch 2 is dp 2'"'"'s batches, each rank'"'"'s sum added to
# the other'"'"'s: the sums of one rank at batch 4 are of other batches)
test_expect_success MPI '--eval-only through the pipeline: pp 2 = one rank and pp 2 x dp 2 = dp 2, bit for bit' '
	E="$S --layers 3 --json --eval-only --data val.bin --eval-batches 8 --init-from ck1/latest" &&
	gpu-train $E --batch 4 >e1.json &&
	mpi 2 $E --batch 4 --pp 2 >e2.json 2>err &&
	mpi 2 $E --batch 2 >d2.json &&
	mpi 4 $E --batch 2 --pp 2 >e4.json &&
	evl e1.json >e1 && evl e2.json >e2 && evl d2.json >d2 && evl e4.json >e4 &&
	test $(wc -l <e2) = 1 &&
	test_cmp e1 e2 && test_cmp d2 e4 &&
	jq -s -e "map(select(.event == \"eval\"))[0].batches == 8" e2.json &&
	test_must_be_empty err
'

test_expect_success MPI '--val-data with --pp 2: the validation losses of one rank within 1e-5' '
	V="$S --layers 3 --steps 2 --json --grad-accum 2 --batch 4 --val-data val.bin --eval-every 1 --eval-batches 4" &&
	gpu-train $V >v1.json &&
	mpi 2 $V --pp 2 --metrics v2.prom >v2.json &&
	jq -r "select(.event == \"step\") | .val_loss" v1.json >v1 &&
	jq -r "select(.event == \"step\") | .val_loss" v2.json >v2 &&
	test $(wc -l <v2) = 2 &&
	close_to v2 v1 1e-5 &&
	grep "^gpukit_train_val_loss{run=\"v2\"} $(tail -n 1 v2 | cut -c1-6)" v2.prom
'

TAG="t7121-$$"
test_expect_success MPI 'a rank that stops mid-step: the grid ends with one message naming it' '
	t0=$(date +%s) &&
	{
		FAULT_TAG=$TAG timeout 120 mpirun --oversubscribe --bind-to none -np 2 \
			-x GK_TEST_COMM_FAULT=stop:1:send:3 gpu-train $B --steps 1000 --timeout 2 \
			--pp 2 >stop.json 2>stop.err
		rc=$?
	} &&
	took=$(($(date +%s) - t0)) &&
	for p in $(pgrep -x gpu-train); do
		if tr "\0" "\n" <"/proc/$p/environ" 2>/dev/null | grep -qx "FAULT_TAG=$TAG"; then
			kill -CONT $p 2>/dev/null
			kill -9 $p 2>/dev/null
		fi
	done &&
	echo "status $rc after $took s" &&
	test $rc = 1 && test $took -lt 60 &&
	test $(grep -c "^gpu-train: " stop.err) = 1 &&
	grep "^gpu-train: pipeline stage 0, micro-batch [0-9]*: the gradient: point-to-point message: no progress for 2 s: rank 1 (on [^)]*) does not answer" stop.err
'

test_expect_success MPI 'a rank killed mid-step: the launcher ends the grid, naming it, without a wait' '
	t0=$(date +%s) &&
	{
		timeout 120 mpirun --oversubscribe --bind-to none -np 2 \
			-x GK_TEST_COMM_FAULT=kill:1:send:3 gpu-train $B --steps 1000 --pp 2 \
			>kill.json 2>kill.err
		rc=$?
	} &&
	took=$(($(date +%s) - t0)) &&
	echo "status $rc after $took s" &&
	test $rc != 0 && test $rc != 124 && test $took -lt 60 &&
	test $(grep -c "process rank 1 .* exited on signal 9" kill.err) = 1 &&
	! grep "\"event\":\"summary\"" kill.json
'

test_expect_success MPI 'tp 2 x pp 2, a file one rank lacks: said once, naming it by its world rank and coordinates' '
	cat >cfg0.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2,
	 "vocab_size": 257, "n_positions": 33}
	EOF
	cp cfg0.json cfg1.json && cp cfg0.json cfg2.json &&
	test_expect_code 1 timeout 120 mpirun --oversubscribe --bind-to none -np 4 sh -c \
		"exec gpu-train --data train.bin --config cfg\$OMPI_COMM_WORLD_RANK.json --seq 16 --steps 1 --tp 2 --pp 2" 2>err &&
	cat err &&
	test $(grep -c "^gpu-train: open .cfg3.json.: No such file or directory (1 of 4 ranks; rank 3 (dp 0, pp 1, tp 1))$" err) = 1 &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	! grep -q MPI_ABORT err
'

test_expect_success 'a world that is not a multiple of --pp: refused with the numbers' '
	test_expect_code 2 gpu-train $A --batch 4 --pp 2 >out 2>err &&
	grep "pipelines of 2 stages x 1 tensor-parallel ranks: the world.s 1 ranks do not divide" err &&
	! grep "\"step\"" out
'

test_expect_success MPI 'more stages than layers: refused with the numbers, once' '
	test_expect_code 2 mpi 3 $A --batch 4 --pp 3 >out 2>err &&
	test $(grep -c "over 3 stages: the model has 2 layers, and each stage needs one at least (use --pp 2 or fewer)" err) = 1 &&
	! grep "\"step\"" out
'

test_expect_success '--pp-schedule takes 1f1b, gpipe or interleaved' '
	test_expect_code 2 gpu-train $A --batch 4 --pp-schedule zb >out 2>err &&
	grep "1f1b, gpipe or interleaved" err
'

test_done
