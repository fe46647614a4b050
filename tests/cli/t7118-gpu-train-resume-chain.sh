#!/bin/sh
test_description='gpu-train --resume along a chain of stages and world sizes

One 8-step run is cut into four, each resuming the checkpoint of the one
before at another ZeRO stage and world size, with the same global batch
(12 sequences): ZeRO-3 on 4 ranks (steps 1-2), ZeRO-0 on 1 (3-4), ZeRO-2
on 3 (5-6), ZeRO-3 with the moments offloaded to files on 2 (7-8). As
gpu-train(1) (CHECKPOINTS) says, a resume restores the parameters, the
moments, the step and the data position, so every stage trains on the
tokens the uninterrupted run trains on: the first stage equals that run
(4 ranks) bit for bit, and each later one, whose world size sums the
gradients in another order, within 1e-6 of its losses (relative to
max(1, |loss|)), its final parameters within 1e-5 (stcmp; the largest
differences seen are 3e-8 and 5e-7). Where the world size does not
change, a resume is bit for bit: the last stage,
itself stopped after step 7 and resumed on 2 ranks, equals a straight
2-rank run from the same checkpoint in losses, model and moments.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

if ! test_have_prereq MPI; then
	skip_all="no mpirun"
	test_done
fi

A="--data train.bin $TINY --steps 8 --json --clip 1 --bucket 16K"
OFF="--offload optimizer:off --offload-chunk 1K"

# the losses of steps $2 to $3 of the --json log $1
steps_of() {
	jq -r "select(.event == \"step\" and .step >= $2 and .step <= $3) | .loss" "$1"
}

# the model of checkpoint directory $1 as one file $2: ZeRO-3's rank
# shards merged, ZeRO-0's file as it is
model_of() {
	if test -f $1/model.safetensors; then
		cp $1/model.safetensors $2
	else
		ckpt-merge $1 -o $2
	fi
}

test_expect_success 'data and the uninterrupted run: ZeRO-3 on 4 ranks, prefetching' '
	train_data &&
	mkdir off &&
	mpi 4 $A --batch 3 --zero 3 --ckpt-dir ref >ref.json &&
	test "$(losses ref.json | wc -l)" = 8 &&
	# --overlap auto prefetches under ZeRO-3, on every core or not
	jq -s -e "map(select(.event == \"start\"))[0].overlap == true" ref.json &&
	jq -s -e "map(select(.event == \"step\") | .param_prefetched) | min > 0" ref.json &&
	model_of ref/latest ref.model
'

test_expect_success 'ZeRO-3 on 4 ranks, steps 1-2: the uninterrupted run'"'"'s losses bit for bit' '
	mpi 4 $A --batch 3 --zero 3 --until 2 --ckpt-dir ch >s1.json &&
	test "$(readlink ch/latest)" = step-00000002 &&
	test -f ch/latest/model-rank-00003-of-00004.safetensors &&
	losses s1.json >s1 && steps_of ref.json 1 2 >r1 &&
	test_cmp r1 s1
'

test_expect_success '-> ZeRO-0 on 1 rank, steps 3-4: within 1e-6' '
	gpu-train $A --batch 12 --resume --until 4 --ckpt-dir ch >s2.json &&
	jq -s -e "map(select(.event == \"step\")) | map(.step) == [3, 4]" s2.json &&
	test -f ch/latest/model.safetensors &&
	losses s2.json >s2 && steps_of ref.json 3 4 >r2 &&
	close_to s2 r2 1e-6
'

test_expect_success '-> ZeRO-2 on 3 ranks, steps 5-6: within 1e-6' '
	mpi 3 $A --batch 4 --zero 2 --resume --until 6 --ckpt-dir ch >s3.json &&
	jq -s -e "map(select(.event == \"step\")) | map(.step) == [5, 6]" s3.json &&
	test -f ch/latest/optim-rank-00002-of-00003.safetensors &&
	losses s3.json >s3 && steps_of ref.json 5 6 >r3 &&
	close_to s3 r3 1e-6 &&
	cp -a ch straight
'

test_expect_success '-> ZeRO-3 --offload optimizer:DIR on 2 ranks, steps 7-8 (stopped after 7 and resumed): within 1e-6, parameters within 1e-5' '
	mpi 2 $A --batch 6 --zero 3 $OFF --resume --until 7 --ckpt-dir ch >s4a.json &&
	mpi 2 $A --batch 6 --zero 3 $OFF --resume --ckpt-dir ch >s4b.json &&
	test -z "$(ls -A off)" &&
	{ losses s4a.json && losses s4b.json; } >s4 &&
	steps_of ref.json 7 8 >r4 &&
	test "$(wc -l <s4)" = 2 &&
	close_to s4 r4 1e-6 &&
	model_of ch/latest ch.model &&
	stcmp ch.model ref.model 1e-5
'

test_expect_success 'the last stage resumed on 2 ranks = a straight 2-rank run from the same checkpoint, bit for bit' '
	mpi 2 $A --batch 6 --zero 3 $OFF --resume --ckpt-dir straight >st.json &&
	losses st.json >st &&
	test_cmp st s4 &&
	model_of straight/latest st.model &&
	cmp st.model ch.model &&
	for r in 0 1; do
		f=$(printf "optim-rank-%05d-of-00002.safetensors" $r) &&
		cmp straight/latest/$f ch/latest/$f || return 1
	done
'

test_done
