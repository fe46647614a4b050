#!/bin/sh
test_description='gpu-train --tp --sequence-parallel on --device cuda

Megatron'"'"'s sequence parallelism on a tensor group of GPUs (t7122 is the
CPU'"'"'s): each rank keeps its T/tp positions of the residual stream and
the LayerNorms, g is an fp32 reduce-scatter along the sequence and f an
all-gather in the activation type, on the group'"'"'s NCCL communicator.
Against one GPU on the same batch the losses, gradient norms and the
validation loss are within 1e-6 in fp32 (recomputing each layer too)
and 1e-4 in bf16 (t7124'"'"'s tolerances: the forward is tp 2'"'"'s bits,
the LayerNorms'"'"' parameter gradients add a rank'"'"'s positions first),
against the CPU'"'"'s --tp 2 --sequence-parallel within 1e-4 (t7124'"'"'s
device tolerance); two tensor groups under ZeRO 1 on four GPUs within
1e-6 of one GPU on the same global batch, and under ZeRO 2 and 3 ZeRO
1'"'"'s bits. A step'"'"'s tp_comm_bytes is
the formula of its collectives, the all-gathers at 2 bytes an element
in bf16; the activations drop by what mem-estimate --tp 2 --sp says.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

test_gpu_prereqs HAVE_CUDA

# Under the CUDA emulation a kernel runs about a thousand times slower
# than on a GPU: 3 steps of TINY (L 2, C 32, N = 4 x 16 rows)
N=3
A="--data train.bin $TINY --batch 4 --steps $N --json"
G="$A --device cuda --precision fp32"
E="--val-data val.bin --eval-every $N --eval-batches 2"

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

# per micro-step (t7122, nn.h): the reduce-scatters (the embedding, 2 a
# layer forward and 2 backward, the head's) N C fp32 each, the
# all-gathers N C / 2 elements (2 a layer forward, 4 backward, lnf
# forward and again backward, d embedding), the cross-entropy's 3 N
# floats, the LayerNorms' gradients 2 C floats (2 a layer, lnf);
# --recompute layer runs each layer's 2 reduce-scatters and 2
# all-gathers of forward again
RS=$((4 * (4 * 2 + 2) * 64 * 32))
AG=$(((6 * 2 + 3) * 64 * 32 / 2))
REST=$((4 * (3 * 64 + (4 * 2 + 2) * 32)))
RECOMP=$((2 * (2 * 4 * 64 * 32 + 2 * 4 * 64 * 32 / 2)))

test_expect_success 'GPUS,MPI' 'tp 2 --sequence-parallel on GPUs, recomputing each layer: losses, norms and the validation loss of one GPU within 1e-6, of the CPU'"'"'s within 1e-4; tp_comm_bytes the formula' '
	train_data &&
	gpu-train $G $E >one.json &&
	mpi 2 $G $E --tp 2 --sequence-parallel --recompute layer >sp.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | (.device | startswith(\"cuda:\")) and .tp == 2 and .sequence_parallel == true" sp.json &&
	losses one.json >one && norms one.json >one.n &&
	losses sp.json >sp && norms sp.json >sp.n &&
	test $(wc -l <sp) = $N &&
	close_to sp one 1e-6 && close_to sp.n one.n 1e-6 &&
	jq -r "select(.event == \"summary\") | .val_loss" one.json >one.val &&
	jq -r "select(.event == \"summary\") | .val_loss" sp.json >sp.val &&
	grep "^[0-9]" one.val &&
	close_to sp.val one.val 1e-6 &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" sp.json | sort -u)" = \
		"$((RS + 4 * AG + REST + RECOMP))" &&
	mpi 2 $A --device cpu --tp 2 --sequence-parallel >cpu.json &&
	losses cpu.json >cpu && norms cpu.json >cpu.n &&
	close_to sp cpu 1e-4 && close_to sp.n cpu.n 1e-4
'

test_expect_success 'GPUS,MPI' 'in bf16: the losses and norms of one GPU within 1e-4; tp_comm_bytes with the all-gathers in bf16' '
	gpu-train $A --device cuda --precision bf16 >one16.json &&
	mpi 2 $A --device cuda --precision bf16 --tp 2 --sequence-parallel >sp16.json &&
	losses one16.json >one16 && norms one16.json >one16.n &&
	losses sp16.json >sp16 && norms sp16.json >sp16.n &&
	test $(wc -l <sp16) = $N &&
	close_to sp16 one16 1e-4 && close_to sp16.n one16.n 1e-4 &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" sp16.json | sort -u)" = \
		"$((RS + 2 * AG + REST))"
'

# The accounting, as t7122 on the CPU: at e = 4 (fp32), s = 32, b = 4,
# h = 32, L = 2, t = 2, mem-estimate's drop is L 4e sbh (1 - 1/t) (ln1,
# ln2 and the two residual inputs of each layer) + 2e sbh (1 - 1/t) (lnf
# and its input); gpu-train's is that and the LayerNorms' mean and
# 1/std, 2 floats a row of each of 2 L + 1 (every buffer a multiple of
# 256 bytes with and without, so no rounding). The workspace grows by
# the gathered (N,C) input, the collectives' fp32 (N,C) and 2C floats.
test_expect_success 'GPUS,MPI' 'the activations on GPUs: --sequence-parallel saves what mem-estimate --tp 2 --sp says' '
	start_config sp.json cfg.json &&
	M="--config cfg.json --precision f32 -b 4 -s 32 --no-dropout --tp 2 --json" &&
	mpi 2 $G --seq 32 --steps 1 --tp 2 >g0.json &&
	mpi 2 $G --seq 32 --steps 1 --tp 2 --sequence-parallel >g1.json &&
	mem-estimate $M >m0.json && mem-estimate $M --sp >m1.json &&
	python3 - g0.json g1.json m0.json m1.json <<-\PY
	import json, sys
	def mem(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)["memory"]
	def est(p):
	    m = json.load(open(p))["bytes"]
	    return m["activations"] + m.get("logits", 0) + m.get("final_norm", 0)
	g0, g1 = mem(sys.argv[1]), mem(sys.argv[2])
	m0, m1 = est(sys.argv[3]), est(sys.argv[4])
	L, e, s, b, h, t = 2, 4, 32, 4, 32, 2
	mdrop = (L * 4 * e + 2 * e) * s * b * h // t
	print("gpu-train", g0["activations"], g1["activations"], "mem-estimate", m0, m1)
	assert m0 - m1 == mdrop, (m0 - m1, mdrop)
	assert g0["activations"] - g1["activations"] == mdrop + (2 * L + 1) * 2 * e * s * b // t, \
	    (g0["activations"] - g1["activations"], mdrop)
	assert g1["workspace"] - g0["workspace"] == s * b * h * e + s * b * h * 4 + 2 * h * 4, \
	    (g1["workspace"] - g0["workspace"])
	PY
'

# tp 2 x dp 2: four ranks on four GPUs (the emulation makes them), two
# tensor groups each splitting the sequence, ZeRO 1 over the
# data-parallel groups (and ZeRO 2)
{ test -n "$GK_CUEMU" || test "$GK_GPUS" -ge 4; } && test_have_prereq GPUS && test_set_prereq GPUS4

test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 --sequence-parallel --zero 1 on GPUs: the losses and norms of one GPU on the same global batch within 1e-6' '
	gpu-train $G --batch 8 --steps 2 >one8.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --steps 2 --tp 2 --sequence-parallel --zero 1 >spz.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 2 and .zero == 1 and .sequence_parallel == true" spz.json &&
	losses one8.json >one8 && norms one8.json >one8.n &&
	losses spz.json >spz && norms spz.json >spz.n &&
	test $(wc -l <spz) = 2 &&
	close_to spz one8 1e-6 && close_to spz.n one8.n 1e-6
'

# ZeRO 2: the gradients in bucket buffers of a block each (--bucket 4K),
# each reduce-scattered into its owners as backward completes it; a
# LayerNorm's gradient is summed over the tensor group inside backward,
# before its bucket is reduced, so each sum is ZeRO 1's (two ranks).
# ZeRO 3: the blocks gathered on the device as without sequence
# parallelism (t7124), its gradients ZeRO 2's buckets, the LayerNorms'
# summed in backward before their bucket is reduced: ZeRO 1's bits too.
test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 --sequence-parallel --zero 2 and 3 on GPUs: ZeRO 1'"'"'s losses and norms bit for bit' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --steps 2 --tp 2 --sequence-parallel --zero 2 --bucket 4K >spz2.json &&
	 mpi 4 $G --steps 2 --tp 2 --sequence-parallel --zero 3 >spz3.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .zero == 2 and .sequence_parallel == true" spz2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .zero == 3 and .sequence_parallel == true" spz3.json &&
	jq -s -e "map(select(.event == \"step\")) | length == 2 and all(.param_gathers > 0)" spz3.json &&
	losses spz2.json >spz2 && norms spz2.json >spz2.n &&
	losses spz3.json >spz3 && norms spz3.json >spz3.n &&
	test_cmp spz spz2 && test_cmp spz.n spz2.n &&
	test_cmp spz spz3 && test_cmp spz.n spz3.n
'

test_done
