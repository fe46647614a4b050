#!/bin/sh
test_description='gpu-train --sequence-parallel: Megatron'"'"'s sequence parallelism under --tp

On the same global batch, tp 2, tp 2 x dp 2, tp 4 and tp 2 with
gradient accumulation under --sequence-parallel
give the losses and gradient norms of one rank within 1e-5 (tp 2: of
tp 2 without it within 1e-6), step by step; their checkpoints
are the same Hugging Face layout with the values of tp 2 within 1e-6
and of one rank within 1e-5, and one resumes on one rank as the run
that never stopped; --eval-only gives the loss of tp 2; tp 2 x pp 2
under it gives the losses, norms and checkpoint of tp 2 x pp 2 within
1e-6, its stages sending half the bytes; tp 2 x dp 2 under --zero 3
gives --zero 2'"'"'s bit for bit; a step'"'"'s
tp_comm_bytes is the formula of its collectives; the activations it
accounts for drop by what mem-estimate --sp says, and mem-estimate'"'"'s
own drop is Korthikanti'"'"'s (4e + 2d) sbh (1 - 1/t) a layer; a sequence
that does not divide by --tp, and a run without --tp, are refused
before any work.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

S="--data train.bin --layers 2 --hidden 64 --heads 4 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2"
A="$S --steps 4 --json --clip 1"

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

# Tolerances. At tp 2 the sum of two ranks' parts is the same whichever
# collective makes it (a + b = b + a in IEEE arithmetic), and each row's
# LayerNorm, residual and bias is computed as without it: the forward is
# the same bits. What changes is the order in which the LayerNorms'
# parameter gradients are added (each rank's positions, then the two
# sums, instead of every row in turn): a few f32 roundings (2^-24 each)
# of sums of 128 rows. 1e-6 relative is ten times what that gives on
# these gradients and the AdamW steps they feed (but see the keys'
# biases below); a gather or a scatter of
# the wrong positions, or LayerNorm gradients not summed over the group,
# moves the norms and the parameters by 1e-3 and more (lr 3e-3). Against
# one rank, 1e-5 as t7120 (the tensor-parallel sums in another order).
test_expect_success 'data, and the run of one rank x batch 8' '
	train_data &&
	gpu-train $A --batch 8 --until 2 --ckpt-dir ck1r >/dev/null &&
	gpu-train $A --batch 8 >one.json &&
	losses one.json >one && norms one.json >one.n &&
	head -n 2 one >one.2 && head -n 2 one.n >one.n2 && tail -n 2 one >one.tail &&
	test $(wc -l <one) = 4
'

test_expect_success MPI 'tp 2 --sequence-parallel = tp 2 (1e-6) = one rank (1e-5), losses and norms' '
	mpi 2 $A --batch 8 --tp 2 --until 2 --ckpt-dir ckt >tp.json &&
	mpi 2 $A --batch 8 --tp 2 --sequence-parallel --until 2 --ckpt-dir cks >sp.json &&
	losses tp.json >tp && norms tp.json >tp.n &&
	losses sp.json >sp && norms sp.json >sp.n &&
	test $(wc -l <sp) = 2 &&
	jq -s -e "map(select(.event == \"start\"))[0] | .sequence_parallel == true and .tp == 2" sp.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .sequence_parallel == false" tp.json &&
	close_to sp tp 1e-6 && close_to sp.n tp.n 1e-6 &&
	close_to sp one.2 1e-5 && close_to sp.n one.n2 1e-5
'

# the checkpoints: the same tensors in the same shapes, the values within
# a tolerance (stcmp: |x - y| <= tol max(1, |y|)). Except the keys' biases
# (c_attn.bias columns C .. 2C): their gradient is zero in exact
# arithmetic (q.(k + b) adds q.b to every score of a row, which the
# softmax takes away), so what backward computes for them is rounding,
# which AdamW normalises into steps of up to lr whatever its size; they
# are held to 2 lr a step (1.2e-2 after 2 steps), the bound of the
# update itself.
SPCMP="--shape transformer.h.0.attn.c_attn.weight=64,192 --shape transformer.wte.weight=257,64
	--loose attn.c_attn.bias:64:128:1.2e-2"
test_expect_success MPI 'the checkpoint of --sequence-parallel: the Hugging Face layout, the values of tp 2 within 1e-6' '
	jq -e ".tp == 2" cks/latest/trainer.json &&
	stcmp cks/latest/model.safetensors ckt/latest/model.safetensors 1e-6 $SPCMP &&
	stcmp cks/latest/model.safetensors ck1r/latest/model.safetensors 1e-5 $SPCMP &&
	gpu-train $A --batch 8 --until 1 --ckpt-dir ck1s >/dev/null &&
	! stcmp cks/latest/model.safetensors ck1s/latest/model.safetensors 1e-4 $SPCMP
'

test_expect_success MPI '--resume from a --sequence-parallel run on one rank = the run that never stopped' '
	cp -R cks ck1 &&
	gpu-train $A --batch 8 --ckpt-dir ck1 --resume >r1.json 2>err &&
	grep "resumed with --tp 1 (the checkpoint.s run: 2)" err &&
	losses r1.json >r1 &&
	close_to r1 one.tail 1e-5
'

test_expect_success MPI '--eval-only under --sequence-parallel: the loss and batches of tp 2 alone' '
	E="--eval-only --data train.bin --init-from ck1r/latest --seq 16 --batch 4 --eval-batches 3 --threads 1 --json --tp 2" &&
	mpi 2 $E >e0.json && mpi 2 $E --sequence-parallel >e1.json &&
	jq -r "select(.event == \"eval\") | .loss" e0.json >e0 &&
	jq -r "select(.event == \"eval\") | .loss" e1.json >e1 &&
	close_to e1 e0 1e-6 &&
	jq -s -e "map(select(.event == \"eval\"))[0].batches == 3" e1.json
'

test_expect_success MPI 'tp 2 x dp 2 --sequence-parallel (4 ranks x batch 4) = one rank x batch 8' '
	mpi 4 $A --batch 4 --tp 2 --sequence-parallel >spdp.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 2" spdp.json &&
	losses spdp.json >spdp && norms spdp.json >spdp.n &&
	close_to spdp one 1e-5 && close_to spdp.n one.n 1e-5
'

test_expect_success MPI 'tp 4 --sequence-parallel (4 positions a rank) and tp 2 x --grad-accum 2 = one rank' '
	mpi 4 $A --batch 8 --tp 4 --sequence-parallel >sp4.json &&
	mpi 2 $A --batch 4 --grad-accum 2 --tp 2 --sequence-parallel >spga.json &&
	losses sp4.json >sp4 && norms sp4.json >sp4.n &&
	losses spga.json >spga && norms spga.json >spga.n &&
	close_to sp4 one 1e-5 && close_to sp4.n one.n 1e-5 &&
	close_to spga one 1e-5 && close_to spga.n one.n 1e-5
'

# tp 2 x pp 2 (4 ranks, 2 micro-batches of N = 4 x 16 rows, C 64): each
# stage's tensor group holds its positions between the blocks, and what a
# stage sends the next is its rank's T/tp positions of each sequence, 4 m
# N C / t bytes a step (pp_comm_bytes, and each stage's gradients back),
# half of the 4 m N C without it. The forward is tp 2 x pp 2's bits (the
# first loss the same); the LayerNorms' parameter gradients are summed
# in another order, as at tp 2 (1e-6, above).
test_expect_success MPI 'tp 2 x pp 2 --sequence-parallel = tp 2 x pp 2 (1e-6): losses, norms, the checkpoint; a stage sends 1/tp of the bytes' '
	P="$A --batch 4 --grad-accum 2 --tp 2 --pp 2 --until 2" &&
	mpi 4 $P --ckpt-dir ckp >pp.json &&
	mpi 4 $P --sequence-parallel --ckpt-dir ckps >pps.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .sequence_parallel and .tp == 2 and .pp == 2" \
		pps.json &&
	losses pp.json >pp && norms pp.json >pp.n &&
	losses pps.json >pps && norms pps.json >pps.n &&
	test $(wc -l <pps) = 2 &&
	test "$(head -n 1 pps)" = "$(head -n 1 pp)" &&
	close_to pps pp 1e-6 && close_to pps.n pp.n 1e-6 &&
	close_to pps one.2 1e-5 && close_to pps.n one.n2 1e-5 &&
	stcmp ckps/latest/model.safetensors ckp/latest/model.safetensors 1e-6 $SPCMP &&
	stcmp ckps/latest/model.safetensors ck1r/latest/model.safetensors 1e-5 $SPCMP &&
	b=$((4 * 2 * 64 * 64)) &&
	printf "%s %s %s\n" $b $b $b $b $b $b >want &&
	jq -r "select(.event == \"step\") | [.pp_comm_bytes, .pp_stages[].pp_comm_bytes] | join(\" \")" \
		pp.json >ppb &&
	test_cmp want ppb &&
	b=$((b / 2)) &&
	printf "%s %s %s\n" $b $b $b $b $b $b >want &&
	jq -r "select(.event == \"step\") | [.pp_comm_bytes, .pp_stages[].pp_comm_bytes] | join(\" \")" \
		pps.json >ppsb &&
	test_cmp want ppsb
'

# ZeRO-3 at tp 2 x dp 2: the blocks'"'"' units gathered before their use and
# released after as without --sequence-parallel, whose LayerNorm
# gradients are summed over the tensor group inside backward, before
# ZeRO-2'"'"'s reduce-scatter takes them: --zero 2'"'"'s losses, norms and
# model bit for bit, with accumulation and each layer recomputed (its
# block gathered again for it)
test_expect_success MPI 'tp 2 x dp 2 --zero 3 --sequence-parallel = --zero 2 --sequence-parallel, bit for bit' '
	Z="$A --batch 2 --grad-accum 2 --tp 2 --sequence-parallel --until 2" &&
	mpi 4 $Z --zero 2 --ckpt-dir ckz2 >z2.json &&
	mpi 4 $Z --zero 3 --recompute layer --ckpt-dir ckz3 >z3.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .sequence_parallel and .zero == 3 and .dp == 2" \
		z3.json &&
	losses z2.json >z2 && norms z2.json >z2.n &&
	losses z3.json >z3 && norms z3.json >z3.n &&
	test $(wc -l <z3) = 2 &&
	test_cmp z2 z3 && test_cmp z2.n z3.n &&
	cmp ckz2/latest/model.safetensors ckz3/latest/model.safetensors &&
	close_to z3 one.2 1e-5 && close_to z3.n one.n2 1e-5
'

# per micro-step, N = 4 x 16 rows, C 64, L 2, t 2 (lib/nn/nn.h): the
# reduce-scatters (the embedding, 2 a layer forward, 2 backward, the
# head's) N C floats each, the all-gathers N C / t (2 a layer forward,
# 4 backward, lnf forward and again backward, d embedding), the
# cross-entropy'"'"'s 3 N, the LayerNorms'"'"' gradients 2 C (2 a layer, lnf)
test_expect_success MPI 'tp_comm_bytes under --sequence-parallel: the formula of its collectives (and --recompute layer the same step)' '
	N=64 C=64 L=2 &&
	mpi 2 $S --steps 2 --batch 4 --grad-accum 2 --tp 2 --sequence-parallel --json >v.json &&
	want=$((2 * 4 * ((4 * L + 2) * N * C + (6 * L + 3) * N * C / 2 + 3 * N + (4 * L + 2) * C))) &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" v.json | sort -u)" = "$want" &&
	mpi 2 $S --steps 1 --batch 4 --grad-accum 2 --tp 2 --sequence-parallel --recompute layer \
		--json >vr.json &&
	want=$((want + 2 * 4 * L * (2 * N * C + 2 * N * C / 2))) &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" vr.json)" = "$want" &&
	# recomputing each layer (its collectives again) gives the same bits
	test "$(losses vr.json)" = "$(losses v.json | head -n 1)" &&
	test "$(norms vr.json)" = "$(norms v.json | head -n 1)"
'

# The accounting: gpu-train'"'"'s activations at tp 2 with and without
# --sequence-parallel, mem-estimate'"'"'s (layers, final norm, logits) at the
# same settings. At e = 4 (f32), no dropout, s = 32, b = 2, h = 64, L = 3,
# t = 2, mem-estimate'"'"'s drop is L 4e sbh (1 - 1/t) (ln1, ln2 and the two
# residual inputs of each layer) + 2e sbh (1 - 1/t) (lnf and its input,
# the last block'"'"'s output); gpu-train'"'"'s is the same floats and the
# LayerNorms'"'"' mean and 1/std, 2 floats a row of each of 2 L + 1, which
# mem-estimate does not count (1/h of the rest): exactly (2 L + 1) 2 e sb
# (1 - 1/t) more (every buffer a multiple of 16 floats, so no rounding).
# Its total stays within 5 % of mem-estimate'"'"'s, as t7103 holds one
# rank'"'"'s.
test_expect_success MPI 'the activations: --sequence-parallel saves what mem-estimate --tp 2 --sp says' '
	cat >cfg.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 3, "n_embd": 64, "n_head": 4,
	 "vocab_size": 257, "n_positions": 64}
	EOF
	G="--data train.bin --config cfg.json --seq 32 --batch 2 --steps 1 --threads 1 --json --tp 2" &&
	M="--config cfg.json --precision f32 -b 2 -s 32 --no-dropout --tp 2 --json" &&
	mpi 2 $G >g0.json && mpi 2 $G --sequence-parallel >g1.json &&
	mem-estimate $M >m0.json && mem-estimate $M --sp >m1.json &&
	mem-estimate $M --sequence-parallel >m1b.json && test_cmp m1.json m1b.json &&
	python3 - g0.json g1.json m0.json m1.json <<-\PY
	import json, sys
	def act(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)["memory"]["activations"]
	def est(p):
	    m = json.load(open(p))["bytes"]
	    return m["activations"] + m.get("logits", 0) + m.get("final_norm", 0)
	g0, g1 = act(sys.argv[1]), act(sys.argv[2])
	m0, m1 = est(sys.argv[3]), est(sys.argv[4])
	L, e, s, b, h, t = 3, 4, 32, 2, 64, 2
	mdrop = (L * 4 * e + 2 * e) * s * b * h // t
	print("gpu-train", g0, g1, "mem-estimate", m0, m1)
	assert m0 - m1 == mdrop, (m0 - m1, mdrop)
	assert g0 - g1 == mdrop + (2 * L + 1) * 2 * e * s * b // t, (g0 - g1, mdrop)
	assert abs(g1 - m1) <= 0.05 * m1, (g1, m1)
	PY
'

# mem-estimate alone, at its defaults (bf16, dropout masks): the
# layers'"'"' drop is Korthikanti'"'"'s Table 2, sbh (10 + 24/t) to sbh 34/t
# without the 5as/h attention term, so L sbh 10 (1 - 1/t); the final norm
# 2e sbh (1 - 1/t) and the embedding'"'"'s dropout mask sbh (1 - 1/t)
test_expect_success 'mem-estimate --sp: the replicated regions divided by t, exactly' '
	M="--layers 4 --hidden 256 --heads 8 --vocab 1000 -s 128 -b 4 --tp 4 --json" &&
	mem-estimate $M >n0.json && mem-estimate $M --sequence-parallel >n1.json &&
	sbh=$((128 * 4 * 256)) &&
	test $(($(jq .bytes.activations n0.json) - $(jq .bytes.activations n1.json))) = \
		$((4 * 10 * sbh * 3 / 4)) &&
	test $(($(jq .bytes.final_norm n0.json) - $(jq .bytes.final_norm n1.json))) = \
		$((2 * 2 * sbh * 3 / 4)) &&
	test $(($(jq .bytes.embedding_dropout n0.json) - $(jq .bytes.embedding_dropout n1.json))) = \
		$((sbh * 3 / 4)) &&
	test "$(jq .bytes.logits n0.json)" = "$(jq .bytes.logits n1.json)"
'

# refusals: usage errors (2), before a step
test_expect_success 'a sequence that does not divide by --tp: refused with the numbers' '
	test_expect_code 2 gpu-train $A --batch 8 --tp 2 --sequence-parallel --seq 15 >out 2>err &&
	grep "the sequence length 15 does not divide by 2 (each rank keeps 15/2 positions of each sequence): --seq 14 or 16" err &&
	test_must_be_empty out
'

test_expect_success MPI 'the model.s positions as the length (33): refused on every rank before a step' '
	test_expect_code 2 mpi 2 --data train.bin --layers 2 --hidden 64 --heads 4 --positions 33 \
		--threads 1 --steps 2 --json --tp 2 --sequence-parallel >out 2>err &&
	grep "the sequence length 33 does not divide by 2" err &&
	! grep "\"step\"" out
'

test_expect_success 'without --tp: refused' '
	test_expect_code 2 gpu-train $A --batch 8 --sequence-parallel >out 2>err &&
	grep "give --tp N (2 or more) too" err &&
	test_must_be_empty out
'

test_done
