#!/bin/sh
test_description='gpu-train --zero 3 with --tp and --pp on the CPU

ZeRO-3 over a grid shards the parameters a rank'"'"'s pipeline stage or
tensor slice owns over its data-parallel group, by the pieces ZeRO-1 and
2 cut its segments into: a rank keeps its pieces, and each unit (a block
of the stage, its embeddings on the first stage, its final norm and the
tied wte on the last) is gathered before its use and released after.
The gradients and the update are ZeRO-2'"'"'s, so at the same grid and
global batch --zero 3 gives --zero 2'"'"'s losses, norms, model and
moments bit for bit (and ZeRO-0'"'"'s losses and model): pp 2 x dp 2, with
4 micro-batches under 1F1B, GPipe and the interleaved schedule,
prefetched (--overlap, the default) or not, with --reshard-after-forward
no and with an evaluation between steps, and tp 2 x pp 2 x dp 2; at tp 2
x dp 2 with accumulation it gives ZeRO-0'"'"'s losses, model and moments.
The number of gathers a step is the schedule'"'"'s (param_gathers), and so
is the number started before their use (param_prefetched): a pipeline
prefetches the block its schedule uses next, across its forwards and
backwards, and keeps the block at which a stage turns from one to the
other. Rank 0'"'"'s parameters, gradients and optimizer are mem-estimate'"'"'s for the
same grid and --zero 3, its parameters half ZeRO-2'"'"'s (and ZeRO-0'"'"'s).
A checkpoint holds the whole model, so a pp 2 x dp 2 run resumes on one
rank under ZeRO-0 and at tp 2 x dp 2 and dp 4 under ZeRO-3, continuing
the run. A tensor group'"'"'s block gathers are prefetched as without a
grid (t7122 has tp 2 x dp 2 under --sequence-parallel). On GPUs
ZeRO-3 runs over a grid too: t7124 (--tp) and t7123 (--pp).'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

if ! test_have_prereq MPI; then
	skip_all="no mpirun"
	test_done
fi

S="--data train.bin --hidden 32 --heads 2 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2 --clip 1 --json"

# the validation losses of a log (after step 2, and the run's last)
vals() {
	jq -r "select(.val_loss) | .val_loss" "$1"
}

# the gathers of each step of rank 0's log, and those prefetched
gathers() {
	jq -r 'select(.event == "step") | .param_gathers' "$1" | sort -u
}

prefetched() {
	jq -r 'select(.event == "step") | .param_prefetched' "$1" | sort -u
}

mem() {
	jq -s "map(select(.event == \"start\"))[0].memory.$2" "$1"
}

# rank 0's parameters, gradients and optimizer = mem-estimate's (flags $2...)
states_are() {
	log=$1
	shift
	mem-estimate --precision f32 --no-dropout --json "$@" >me.json &&
	states_same $log me.json
}

test_expect_success 'data' '
	train_data
'

# stage 0 of 2 layers: wte, wpe once a step, and block 0, its only one,
# once: prefetched with them, then kept, as each of its uses is the
# schedule's next (forward 0, forward 1, backward 0, backward 1)
P="$S --layers 2 --steps 4 --grad-accum 2 --batch 2 --pp 2"
test_expect_success 'pp 2 x dp 2 --zero 3 = --zero 2 bit for bit (losses, norms, model, moments), = --zero 0 (losses, model)' '
	for z in 0 2 3; do
		mpi 4 $P --zero $z --ckpt-dir p$z >p$z.json || return 1
	done &&
	steps p2.json >p2.s && steps p3.json >p3.s && test_cmp p2.s p3.s &&
	losses p0.json >p0.l && losses p3.json >p3.l && test_cmp p0.l p3.l &&
	stcmp p3/latest/model.safetensors p2/latest/model.safetensors 0 &&
	stcmp p3/latest/optim.safetensors p2/latest/optim.safetensors 0 &&
	stcmp p3/latest/model.safetensors p0/latest/model.safetensors 0 &&
	jq -e ".zero == 3 and .pp == 2" p3/latest/trainer.json &&
	test "$(gathers p3.json)" = 3 && test "$(prefetched p3.json)" = 1
'

test_expect_success 'pp 2 x dp 2 --zero 3: rank 0 keeps half ZeRO-2'"'"'s parameters; its model states are mem-estimate'"'"'s' '
	test $(mem p3.json parameters) = $(($(mem p2.json parameters) / 2)) &&
	test $(mem p3.json gradients) = $(mem p2.json gradients) &&
	test $(mem p3.json comm) -gt $(mem p2.json comm) &&
	states_are p3.json --config p3/latest/config.json -b 2 -s 16 --grad-accum 2 \
		--pp 2 --dp 2 --zero 3
'

# 3 layers, stage 0 of 2 (blocks 0 and 1): 4 micro-batches. Without
# prefetch (--overlap off) each block is gathered before its forward and
# its backward (2 + 2 x 2 x 4 = 18), none started before. With it the
# gather of the block the schedule uses next starts while the one before
# it computes, and the block at which the stage turns from a forward to
# a backward or back is kept: 1F1B'"'"'s passes F0 F1 B0 F2 B1 F3 B2 B3 turn
# 5 times (18 - 5 = 13), GPipe'"'"'s F0..F3 B0..B3 once (17), and every
# block'"'"'s gather is prefetched (11, 15), the edges'"'"' (before the
# schedule) not. With --reshard-after-forward no under GPipe the blocks
# are kept from the first forward to the first backward, then from each
# backward to the next (2 + 2 + 2 x 3 = 10, 8 of them prefetched). The
# evaluations after step 2 and at the end gather the stage whole.
Q="$S --layers 3 --steps 3 --grad-accum 4 --batch 1 --pp 2 --val-data val.bin --eval-every 2"
test_expect_success 'pp 2 x dp 2, 4 micro-batches: --zero 3 under 1F1B and GPipe, prefetched or not, and kept from forward to backward, = --zero 2 bit for bit, evaluation too' '
	mpi 4 $Q --zero 2 --ckpt-dir q2 >q2.json &&
	mpi 4 $Q --zero 3 --ckpt-dir q3 >q3.json &&
	mpi 4 $Q --zero 3 --overlap off --ckpt-dir q3n >q3n.json &&
	mpi 4 $Q --zero 3 --pp-schedule gpipe --ckpt-dir q3g >q3g.json &&
	mpi 4 $Q --zero 3 --pp-schedule gpipe --reshard-after-forward no --ckpt-dir q3k >q3k.json &&
	steps q2.json >q2.s &&
	vals q2.json >q2.v &&
	test $(wc -l <q2.v) = 2 &&
	for r in q3 q3n q3g q3k; do
		steps $r.json >$r.s && test_cmp q2.s $r.s &&
		vals $r.json >$r.v &&
		test_cmp q2.v $r.v &&
		stcmp $r/latest/model.safetensors q2/latest/model.safetensors 0 &&
		stcmp $r/latest/optim.safetensors q2/latest/optim.safetensors 0 || return 1
	done &&
	test "$(gathers q3n.json)" = 18 && test "$(prefetched q3n.json)" = 0 &&
	test "$(gathers q3.json)" = 13 && test "$(prefetched q3.json)" = 11 &&
	test "$(gathers q3g.json)" = 17 && test "$(prefetched q3g.json)" = 15 &&
	test "$(gathers q3k.json)" = 10 && test "$(prefetched q3k.json)" = 8
'

# one stage of 2 layers, its embeddings one unit and the final norm
# another (2 a step); block 0 gathered before its forward and backward,
# block 1, the last, kept from its forward into its backward: 3 a
# micro-batch, 2 of them
T="$S --layers 2 --steps 3 --grad-accum 2 --batch 2 --tp 2"
# (prefetched, as without a grid: each block's gather started during the
# block before it, 6 a step; the edges, gathered before the micro-batches,
# are not)
test_expect_success 'tp 2 x dp 2 with accumulation: --zero 3 = --zero 0 bit for bit (losses, model, moments), prefetched or not; model states mem-estimate'"'"'s' '
	for z in 0 3; do
		mpi 4 $T --zero $z --ckpt-dir t$z >t$z.json || return 1
	done &&
	mpi 4 $T --zero 3 --overlap off --ckpt-dir t3n >t3n.json &&
	losses t0.json >t0.l && losses t3.json >t3.l && test_cmp t0.l t3.l &&
	losses t3n.json >t3n.l && test_cmp t0.l t3n.l &&
	stcmp t3/latest/model.safetensors t0/latest/model.safetensors 0 &&
	stcmp t3/latest/optim.safetensors t0/latest/optim.safetensors 0 &&
	stcmp t3n/latest/model.safetensors t0/latest/model.safetensors 0 &&
	test "$(gathers t3.json)" = 8 && test "$(gathers t3n.json)" = 8 &&
	test "$(jq -r "select(.event == \"step\") | .param_prefetched" t3.json | sort -u)" = 6 &&
	test "$(jq -r "select(.event == \"step\") | .param_prefetched" t3n.json | sort -u)" = 0 &&
	states_are t3.json --config t3/latest/config.json -b 2 -s 16 --tp 2 --dp 2 --zero 3 &&
	test $(mem t3.json parameters) = $(($(mem t0.json parameters) / 2))
'

# The interleaved schedule, 4 layers in 2 chunks a stage (stage 0's are
# layers 0 and 2, a unit each), 4 micro-batches: stage 0's 16 passes use
# chunks 0 0 1 1, then 0 1 0 1 1 0 1 0, then 1 1 0 0 (Megatron-LM's
# order). Without prefetch each pass gathers its block (2 + 16 = 18);
# with it a pass's block is kept from a pass of the same chunk before it
# (2 + 11 = 13), and each of the 11 was started during the pass before.
I="$S --layers 4 --steps 2 --grad-accum 4 --batch 1 --pp 2 --pp-schedule interleaved --pp-chunks 2"
test_expect_success 'pp 2 x dp 2, interleaved (2 chunks a stage, 4 micro-batches): --zero 3, prefetched or not, = --zero 2 bit for bit' '
	mpi 4 $I --zero 2 --ckpt-dir i2 >i2.json &&
	mpi 4 $I --zero 3 --ckpt-dir i3 >i3.json &&
	mpi 4 $I --zero 3 --overlap off --ckpt-dir i3n >i3n.json &&
	steps i2.json >i2.s &&
	for r in i3 i3n; do
		steps $r.json >$r.s && test_cmp i2.s $r.s &&
		stcmp $r/latest/model.safetensors i2/latest/model.safetensors 0 &&
		stcmp $r/latest/optim.safetensors i2/latest/optim.safetensors 0 || return 1
	done &&
	test "$(gathers i3n.json)" = 18 && test "$(prefetched i3n.json)" = 0 &&
	test "$(gathers i3.json)" = 13 && test "$(prefetched i3.json)" = 11
'

# (stage 0's one block gathered once a step, as in pp 2 x dp 2 above)
X="$S --layers 2 --steps 3 --grad-accum 2 --batch 2 --tp 2 --pp 2"
test_expect_success 'tp 2 x pp 2 x dp 2 (8 ranks): --zero 3 = --zero 2 bit for bit; model states mem-estimate'"'"'s' '
	mpi 8 $X --zero 2 --ckpt-dir x2 >x2.json &&
	mpi 8 $X --zero 3 --ckpt-dir x3 >x3.json &&
	steps x2.json >x2.s && steps x3.json >x3.s && test_cmp x2.s x3.s &&
	stcmp x3/latest/model.safetensors x2/latest/model.safetensors 0 &&
	stcmp x3/latest/optim.safetensors x2/latest/optim.safetensors 0 &&
	test "$(gathers x3.json)" = 3 && test "$(prefetched x3.json)" = 1 &&
	states_are x3.json --config x3/latest/config.json -b 2 -s 16 --grad-accum 2 \
		--tp 2 --pp 2 --dp 2 --zero 3
'

# the global batch is 8 sequences in every layout; the run that never
# stopped is pp 2 x dp 2 --zero 3 (p3)
R="$S --layers 2 --steps 4 --grad-accum 2"
test_expect_success 'a pp 2 x dp 2 --zero 3 checkpoint resumes on one rank (ZeRO-0), at tp 2 x dp 2 and dp 4 (ZeRO-3), continuing the run' '
	losses p3.json | tail -n 2 >full.tail &&
	mpi 4 $R --batch 2 --pp 2 --zero 3 --until 2 --ckpt-dir r >/dev/null &&
	for d in r1 rt rd rp; do cp -r r $d || return 1; done &&
	gpu-train $R --batch 4 --ckpt-dir r1 --resume >r1.json 2>err &&
	grep "resumed with --zero 0 (the checkpoint.s run: 3)" err &&
	losses r1.json >r1.l && test $(wc -l <r1.l) = 2 &&
	close_to r1.l full.tail 1e-5 &&
	mpi 4 $R --batch 2 --tp 2 --zero 3 --ckpt-dir rt --resume >rt.json &&
	losses rt.json >rt.l && close_to rt.l full.tail 1e-5 &&
	mpi 4 $R --batch 1 --zero 3 --ckpt-dir rd --resume >rd.json &&
	losses rd.json >rd.l && close_to rd.l full.tail 1e-5 &&
	mpi 4 $R --batch 2 --pp 2 --zero 3 --ckpt-dir rp --resume >rp.json &&
	losses rp.json >rp.l && test_cmp rp.l full.tail
'

test_done
