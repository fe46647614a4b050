#!/bin/sh
test_description='gpu-train --pp-schedule interleaved: the virtual pipeline on the CPU

Stage s of S runs the model'"'"'s chunks s, s + S, ... of L / (S V) layers
(Megatron-LM'"'"'s interleaved schedule, --pp-chunks V). Each chunk meets
the micro-batches in the order 0 .. M-1 forward and backward, as 1F1B'"'"'s
stages do, and the tied embedding'"'"'s parts are summed on the same two
stages: the losses of pp 2 (V 2, M 4), pp 3 (V 2, M 6), pp 2 x dp 2
under ZeRO 1 and 2, tp 2 x pp 2 and tp 2 x pp 2 x dp 2 are 1F1B'"'"'s bit
for bit, and one rank'"'"'s within 1e-5 (1F1B'"'"'s own tolerance, t7121); the
global norm, whose sum of squares a stage adds over other layers, within
1e-12. A --grad-accum M that S does not divide goes through the chunks in
groups of N, Megatron-LM'"'"'s microbatch_group_size_per_vp_stage, the
smallest it accepts (S .. M, no last group of fewer than S): pp 2 with
M 5 (N 3) and pp 3 with M 7 (N 4) give 1F1B'"'"'s bits, the start line
states the group and (S-1)/(V M), which tools/bench/pp_sim.py finds for
every N accepted. The checkpoints
are 1F1B'"'"'s byte for byte (the moments in the Hugging Face order, not the
stage-major one of the flat buffer), and --resume goes from interleaved
to 1F1B and back, continuing the run that never stopped bit for bit.
The step lines measure the bubble as 1F1B'"'"'s do; the start line states
(S-1)/(V M). Each stage accounts the activations of min(M V, warm-up + 1)
chunks in flight, as the shapes count them and mem-estimate --pp-chunks
prices them (under tp 2 and with groups too). Layers not dividing by
S x V, --grad-accum below S and a missing --pp-chunks are refused up
front (t7123 runs the schedule on GPUs).'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

S="--data train.bin --hidden 32 --heads 2 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2 --clip 1 --device cpu"
A="$S --layers 4 --steps 6 --json --grad-accum 4 --batch 4"
I="--pp-schedule interleaved --pp-chunks 2"

steps() {
	jq -c 'select(.event == "step") | .loss' "$1"
}

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

# as t7121: every stage'"'"'s busy + idle is the pipeline'"'"'s time
pp_bubble_defined() {
	jq -s -e --argjson S "$2" "map(select(.event == \"step\")) | length > 0 and all(
		(.pp_stages | length == \$S and all(.busy_ms > 0 and .idle_ms >= 0) and
		 map(.busy_ms + .idle_ms) as \$p | (\$p | max) - (\$p | min) <= 1e-9 * (\$p | max) and
		 all(((.bubble - .idle_ms / .busy_ms) | fabs) <= 1e-9 * (1 + .bubble))) and
		(.pp_bubble - ((.pp_stages | map(.idle_ms) | add) / (.pp_stages | map(.busy_ms) | add)) | fabs)
			<= 1e-9 * (1 + .pp_bubble))" "$1"
}

test_expect_success 'data, and one rank (4 layers x 4 micro-batches, 6 x 6)' '
	train_data &&
	gpu-train $A >one.json &&
	gpu-train $S --layers 6 --steps 4 --json --grad-accum 6 --batch 4 >one6.json &&
	steps one.json >one && steps one6.json >one6 && norms one.json >one.n &&
	test $(wc -l <one) = 6
'

test_expect_success MPI 'pp 2, V 2, M 4: 1F1B'"'"'s losses bit for bit, one rank'"'"'s within 1e-5, the norms within 1e-12' '
	mpi 2 $A --pp 2 >f2.json &&
	mpi 2 $A --pp 2 $I >i2.json 2>err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .pp_schedule == \"interleaved\" and
		.pp_chunks == 2 and .pp_bubble == 0.125" i2.json &&
	steps f2.json >f2 && steps i2.json >i2 && norms f2.json >f2.n && norms i2.json >i2.n &&
	test $(wc -l <i2) = 6 &&
	test_cmp f2 i2 &&
	test "$(head -n 1 i2)" = "$(head -n 1 one)" &&
	close_to i2 one 1e-5 &&
	close_to i2.n f2.n 1e-12 &&
	! grep warning err
'

test_expect_success MPI 'the measured bubble: the stages'"'"' idle over busy time, as 1F1B'"'"'s' '
	pp_bubble_defined i2.json 2
'

# a stage'"'"'s chunks are L/S layers in one range, as its block under 1F1B
test_expect_success MPI 'rank 0'"'"'s parameters, gradients and optimizer: 1F1B'"'"'s stage'"'"'s (mem-estimate --pp 2'"'"'s, t7121)' '
	mem() { jq -s -c "map(select(.event == \"start\"))[0].memory |
		[.parameters, .gradients, .optimizer]" "$1"; } &&
	test "$(mem i2.json)" = "$(mem f2.json)" &&
	test "$(mem i2.json)" != "$(mem one.json)"
'

test_expect_success MPI 'pp 3, V 2, M 6 on 6 layers: 1F1B'"'"'s bits; the start line says the chunks and (S-1)/(V M)' '
	B="$S --layers 6 --steps 4 --json --grad-accum 6 --batch 4" &&
	mpi 3 $B --pp 3 >f3.json &&
	mpi 3 $B --pp 3 $I >i3.json &&
	steps f3.json >f3 && steps i3.json >i3 &&
	test $(wc -l <i3) = 4 &&
	test_cmp f3 i3 &&
	close_to i3 one6 1e-5 &&
	mpi 3 $S --layers 6 --steps 1 --grad-accum 6 --batch 4 --pp 3 $I >out &&
	grep "(dp 1 x pp 3: layers 0-0+3-3, 1-1+4-4, 2-2+5-5; interleaved, 2 chunks a stage, over 6 micro-batches, bubble (3-1)/(2 x 6) = 0.167)" out
'

# The activations a stage accounts (its step lines' pp_stages[].activations,
# rank 0's the start line's): one set per micro-batch's chunk in flight,
# min(M V, w + 1) of them with Megatron-LM's warm-up w = 2 (S - 1 - s) +
# (V - 1) S (M V when M = S), each the model's buffers for a chunk of
# L/(S V) layers (lib/nn's act_sizes, counted here from the shapes), the
# last stage's each with the head's (logits of the real vocabulary,
# the padded columns being padding). mem-estimate --pp-schedule
# interleaved --pp-chunks V --pp-stage s states the same sets: its
# activations Korthikanti's f32 layer (64 sbh + 4 a s^2 b bytes without
# dropout) times the chunk's layers and the sets, its logits and final
# norm one per set on the last stage. What gpu-train keeps beyond them is
# exact: a set's LayerNorm means and 1/std (2 floats a row of each norm),
# its tokens and targets, the cross-entropy's log-sum-exp on the last
# stage and elsewhere the chunk's output (kept in the set until sent).
# Stage 0 holds L (1 + (S - 1)/(S V)) layers' worth, more than 1F1B's L
# (Korthikanti et al. 2022 sec. 4.2.3). With groups of N the warm-up is
# 2 (S - 1 - s) + (V - 1) N. Under tensor parallelism a set's attention
# and MLP pieces and the logits are a rank's 1/t (heads, columns, the
# padded vocabulary's rows). The last stage's logits differ there, as
# under 1F1B: mem-estimate prices a rank's Vo/t real columns, gpu-train
# counts rank 0's Vp/t less all Vp - Vo padding columns (which lie on the
# last tensor rank: rank 0's are all real).
cat >ilvmem.py <<\PYEOF
import json, sys
run = [json.loads(l) for l in open(sys.argv[1])]
st = next(r for r in run if r["event"] == "start")
acts = [g["activations"] for g in next(r for r in run if r["event"] == "step")["pp_stages"]]
S, V, M, t = st["pp"], st["pp_chunks"], st["grad_accum"], st["tp"]
L, C, H, Vo = st["layers"], st["hidden"], st["heads"], st["vocab"]
B, T = st["batch"], st["seq"]
Vp = (Vo + 127) // 128 * 128
N = B * T
G = next(g for g in range(S, M + 1) if M % g == 0 or M % g >= S)
assert st["pp_group"] == G, (st["pp_group"], G)
r16 = lambda n: (n + 15) // 16 * 16
assert acts[0] == st["memory"]["activations"], (acts[0], st["memory"])
f = json.load(open(sys.argv[3]))
for s, a in enumerate(acts):
    w = 2 * (S - 1 - s) + (V - 1) * G
    if M == S or w > M * V:
        w = M * V
    sets = min(w + 1, M * V)
    l, head = L // (S * V), int(s == S - 1)
    pieces = [(l + 1) * N * C, head * N * C, head * N, head * N, head * N * Vp // t, head * N,
              l * N * C, l * N, l * N, l * N * 3 * C // t, l * B * H // t * T * T, l * N * C // t,
              l * N * C, l * N * C, l * N, l * N, l * N * 4 * C // t, l * N * 4 * C // t]
    # the logits' columns past the vocabulary, a tensor rank's share of
    # them (gk_mem_logits: its Vp/t columns less the model's Vo/t), are
    # padding, not activations
    pad = 4 * N * (Vp // t) - int(4 * N * Vo / t + 0.5)
    per = 4 * (sum(r16(x) for x in pieces) + 2 * r16(N)) - head * pad
    assert a == sets * per, ("stage %d: gpu-train %d, the shapes %d sets x %d" % (s, a, sets, per))
    est = json.load(open(sys.argv[2] % s))
    b = est["bytes"]
    assert est["stage"] == s and est["inflight"] == sets, (s, est["inflight"], sets)
    # Korthikanti's f32 layer, its attention and MLP pieces split
    # over the tensor group (mem-estimate's 1F1B stage, per layer)
    lay = f["bytes"]["activations"] // (f["inflight"] * L // S)
    if t == 1:
        assert lay == 64 * T * B * C + 4 * H * T * T * B, lay
    assert b["activations"] == sets * l * lay, (s, b)
    assert b.get("logits", 0) * t == head * sets * 4 * N * Vo, (s, b)
    assert b.get("final_norm", 0) == head * sets * 2 * 4 * N * C, (s, b)
    m = b["activations"] + b.get("logits", 0) + b.get("final_norm", 0)
    extra = 4 * sets * (4 * N * l + 2 * N + (3 * N if head else N * C))
    assert a - m == extra, ("stage %d: gpu-train %d - mem-estimate %d = %d, not %d" % (s, a, m, a - m, extra))
    print("stage %d: %d sets of %d layers, gpu-train %d, mem-estimate %d" % (s, sets, l, a, m))
e = json.load(open(sys.argv[2] % 0))["bytes"]["activations"]
if G == S:
    assert e * S * V == f["bytes"]["activations"] * (S * V + S - 1), ("stage 0: interleaved %d, 1F1B %d" % (e, f))
PYEOF

# NAME S M TP, the run NAME.json's
ilvmem() {
	for x in "$@"; do
		set -- $x &&
		jq -c "select(.event == \"start\") | {model_type: \"gpt2\", n_layer: .layers,
			n_embd: .hidden, n_head: .heads, vocab_size: .vocab, n_positions: .positions}" \
			$1.json >$1.cfg &&
		b=$(jq -s "map(select(.event == \"start\"))[0].batch" $1.json) &&
		M="--config $1.cfg --precision f32 -b $b -s 16 --grad-accum $3 --no-dropout --pp $2 --tp $4 --json" &&
		mem-estimate $M --pp-stage 0 >$1.f.json &&
		s=0 && while test $s -lt $2; do
			mem-estimate $M --pp-schedule interleaved --pp-chunks 2 --pp-stage $s >$1.e$s.json ||
				return 1
			s=$((s + 1))
		done &&
		python3 ilvmem.py $1.json "$1.e%d.json" $1.f.json || return 1
	done
}

test_expect_success MPI 'each stage'"'"'s activations: min(M V, warm-up + 1) chunk sets as the shapes count, mem-estimate --pp-chunks'"'"'s (S 2, V 2, M 4 and S 3, V 2, M 6)' '
	ilvmem "i2 2 4 1" "i3 3 6 1"
'

test_expect_success MPI 'tp 2 x pp 2, V 2, M 4 (4 ranks): 1F1B'"'"'s losses bit for bit, one rank'"'"'s within 1e-5, the norms within 1e-12' '
	mpi 4 $A --pp 2 --tp 2 >ft.json &&
	mpi 4 $A --pp 2 --tp 2 $I >t2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .tp == 2 and .dp == 1 and
		.pp_schedule == \"interleaved\" and .pp_bubble == 0.125" t2.json &&
	steps ft.json >ft && steps t2.json >t2 && norms ft.json >ft.n && norms t2.json >t2.n &&
	test $(wc -l <t2) = 6 &&
	test_cmp ft t2 &&
	close_to t2 one 1e-5 &&
	close_to t2.n ft.n 1e-12 &&
	pp_bubble_defined t2.json 2
'

# the tensor group's gather puts each tensor of the moments in its place
# in the Hugging Face order, the resume's scatter takes it back from there
test_expect_success MPI 'tp 2 x pp 2 x dp 2 under ZeRO 1 (8 ranks): 1F1B'"'"'s losses, its checkpoint byte for byte, --resume either way continues the run' '
	B="$S --layers 4 --steps 6 --json --grad-accum 4 --batch 2 --pp 2 --tp 2 --zero 1" &&
	mpi 8 $B >tzfull.json &&
	mpi 8 $B --until 4 --ckpt-dir cktf >tzf.json &&
	mpi 8 $B $I --until 4 --ckpt-dir ckti >tzi.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .dp == 2 and .tp == 2 and .pp == 2" tzi.json &&
	steps tzf.json >tzf && steps tzi.json >tzi &&
	test $(wc -l <tzi) = 4 &&
	test_cmp tzf tzi &&
	cmp cktf/latest/model.safetensors ckti/latest/model.safetensors &&
	cmp cktf/latest/optim.safetensors ckti/latest/optim.safetensors &&
	mpi 8 $B --ckpt-dir ckti --resume >tr_if.json &&
	mpi 8 $B $I --ckpt-dir cktf --resume >tr_fi.json &&
	steps tzfull.json | tail -n 2 >tzfull.tail &&
	steps tr_if.json >tr_if && steps tr_fi.json >tr_fi &&
	test $(wc -l <tr_fi) = 2 &&
	test_cmp tzfull.tail tr_if && test_cmp tzfull.tail tr_fi
'

# M = 5 over 2 stages: groups of 3 (2 leaves a last group of 1), the
# micro-batches 0 1 2 through chunk 0, then chunk 1, then 3 4 likewise;
# M = 7 over 3 stages: groups of 4 (3 leaves 1), then 4 5 6
test_expect_success MPI '--grad-accum 5 over pp 2, 7 over pp 3: groups of 3 and 4, 1F1B'"'"'s bits; the start line says the group and (S-1)/(V M)' '
	B="$S --layers 4 --steps 4 --json --grad-accum 5 --batch 2" &&
	mpi 2 $B --pp 2 >f5.json &&
	mpi 2 $B --pp 2 $I >g5.json &&
	steps f5.json >f5 && steps g5.json >g5 &&
	test $(wc -l <g5) = 4 &&
	test_cmp f5 g5 &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp_group == 3 and .pp_bubble == 0.1" g5.json &&
	pp_bubble_defined g5.json 2 &&
	B="$S --layers 6 --steps 3 --json --grad-accum 7 --batch 2" &&
	mpi 3 $B --pp 3 >f7.json &&
	mpi 3 $B --pp 3 $I >g7.json &&
	steps f7.json >f7 && steps g7.json >g7 &&
	test $(wc -l <g7) = 3 &&
	test_cmp f7 g7 &&
	mpi 3 $S --layers 6 --steps 1 --grad-accum 7 --batch 2 --pp 3 $I >out &&
	grep "(dp 1 x pp 3: layers 0-0+3-3, 1-1+4-4, 2-2+5-5; interleaved, 2 chunks a stage, over 7 micro-batches in groups of 4, bubble (3-1)/(2 x 7) = 0.143)" out
'

test_expect_success MPI 'the activations under tp 2 and in groups: the shapes'"'"', mem-estimate'"'"'s sets (warm-up 2 (S-1-s) + (V-1) N)' '
	ilvmem "t2 2 4 2" "g5 2 5 1" "g7 3 7 1"
'

test_expect_success 'the bubble (S-1)/(V M) for every group Megatron-LM accepts, larger (or a deadlock) for a last group below S (pp_sim.py)' '
	python3 "$GK_TOP/tools/bench/pp_sim.py" --check >sim &&
	grep "pp_sim.py: all at their formulas" sim
'

test_expect_success MPI 'pp 2 x dp 2 under ZeRO 1 and 2: 1F1B'"'"'s losses, and under ZeRO 1 its checkpoint byte for byte' '
	B="$S --layers 4 --steps 4 --json --grad-accum 4 --batch 2 --pp 2" &&
	mpi 4 $B --zero 1 --ckpt-dir ckzf >zf.json &&
	mpi 4 $B --zero 1 --ckpt-dir ckzi $I >zi.json &&
	mpi 4 $B --zero 2 $I >z2.json &&
	steps zf.json >zf && steps zi.json >zi && steps z2.json >z2 &&
	test $(wc -l <zi) = 4 &&
	test_cmp zf zi && test_cmp zf z2 &&
	cmp ckzf/latest/model.safetensors ckzi/latest/model.safetensors &&
	cmp ckzf/latest/optim.safetensors ckzi/latest/optim.safetensors
'

B="$S --layers 4 --steps 8 --json --grad-accum 4 --batch 4 --pp 2"

test_expect_success MPI 'an interleaved checkpoint is 1F1B'"'"'s byte for byte (the moments in the Hugging Face order)' '
	mpi 2 $B >full.json &&
	mpi 2 $B --until 4 --ckpt-dir cf >/dev/null &&
	mpi 2 $B $I --until 4 --ckpt-dir ci >/dev/null &&
	cmp cf/latest/model.safetensors ci/latest/model.safetensors &&
	cmp cf/latest/optim.safetensors ci/latest/optim.safetensors &&
	jq -e ".settings[\"--pp-schedule\"].arg == \"interleaved\" and
		.settings[\"--pp-chunks\"].arg == \"2\"" ci/latest/trainer.json &&
	steps full.json >full && tail -n 4 full >full.tail
'

test_expect_success MPI '--resume: interleaved into 1F1B and 1F1B into interleaved continue the run bit for bit' '
	cp -R ci ci_f && cp -R cf cf_i &&
	mpi 2 $B --ckpt-dir ci_f --resume >r_if.json 2>err &&
	grep "resumed with --pp-schedule 1f1b (the checkpoint.s run: interleaved)" err &&
	mpi 2 $B $I --ckpt-dir cf_i --resume >r_fi.json &&
	steps r_if.json >r_if && steps r_fi.json >r_fi &&
	test $(wc -l <r_if) = 4 &&
	test_cmp full.tail r_if && test_cmp full.tail r_fi
'

test_expect_success MPI '--eval-only through the chunks: one rank'"'"'s loss bit for bit' '
	E="$S --layers 6 --json --eval-only --data val.bin --eval-batches 4 --batch 4" &&
	gpu-train $E >e1.json &&
	mpi 3 $E --pp 3 $I >e3.json &&
	jq -r "select(.event == \"eval\") | .loss" e1.json >e1 &&
	jq -r "select(.event == \"eval\") | .loss" e3.json >e3 &&
	test $(wc -l <e3) = 1 &&
	test_cmp e1 e3
'

test_expect_success 'what the schedule does not take is refused at the command line, with the fix' '
	test_expect_code 2 gpu-train $A --pp 3 $I --grad-accum 2 >out 2>err &&
	grep "interleaved with --pp 3: --grad-accum 2 is fewer micro-batches than the 3 stages .*: --grad-accum 3 or more" err &&
	test_expect_code 2 mem-estimate --params 1B --pp 3 --pp-schedule interleaved --pp-chunks 2 --grad-accum 2 >out 2>err &&
	grep "grad-accum 2 is fewer micro-batches than stages (--grad-accum 3 or more)" err &&
	test_expect_code 2 gpu-train $A --pp 2 --pp-schedule interleaved >out 2>err &&
	grep "give --pp-chunks V" err &&
	test_expect_code 2 gpu-train $A --pp 2 --pp-chunks 2 >out 2>err &&
	grep "the chunks of --pp-schedule interleaved" err &&
	test_expect_code 2 gpu-train $A $I >out 2>err &&
	grep "interleaved: give --pp N (2 or more) too" err
'

test_expect_success MPI 'layers that do not divide by S x V: refused with the numbers, once' '
	test_expect_code 2 mpi 2 $A --pp 2 --pp-schedule interleaved --pp-chunks 3 >out 2>err &&
	grep -c "the model.s 4 layers do not divide into 6 chunks of equal size (6 layers would, or 12)" err >n &&
	echo 1 >one.c && test_cmp one.c n
'

test_done
