#!/bin/sh
test_description='an unknown option names the nearest one

The tools whose options are a table (gpu-train, mem-estimate,
allreduce-bench, ckpt-merge, ckpt-shard) answer an option they do not
know with the names it was probably meant to be: the spelling of other
tools (PyTorch, Megatron-LM, llm.c, nccl-tests), underscores for dashes,
typing errors, and every option an ambiguous abbreviation could be;
exit 2, the message first, then the synopsis.'
. "$(dirname "$0")/lib.sh"

# expect_hint TOOL OPTION MESSAGE: TOOL OPTION exits 2 and says "TOOL: MESSAGE" first
expect_hint() {
	test_expect_code 2 "$1" "$2" >out 2>err &&
	test_must_be_empty out &&
	echo "$1: $3" >expect &&
	head -n 1 err >first &&
	test_cmp expect first &&
	grep "^usage: $1 " err
}

test_expect_success 'gpu-train: the names of PyTorch, Megatron-LM and llm.c users' '
	expect_hint gpu-train --batch_size "unrecognized option '\''--batch_size'\''; did you mean --batch?" &&
	expect_hint gpu-train --num-layers "unrecognized option '\''--num-layers'\''; did you mean --layers?" &&
	expect_hint gpu-train --lr-rate "unrecognized option '\''--lr-rate'\''; did you mean --lr?" &&
	expect_hint gpu-train --learning_rate=3e-4 "unrecognized option '\''--learning_rate'\''; did you mean --lr?" &&
	expect_hint gpu-train --n_embd "unrecognized option '\''--n_embd'\''; did you mean --hidden?" &&
	expect_hint gpu-train --gradient_accumulation_steps "unrecognized option '\''--gradient_accumulation_steps'\''; did you mean --grad-accum?" &&
	expect_hint gpu-train --max_steps "unrecognized option '\''--max_steps'\''; did you mean --steps?" &&
	expect_hint gpu-train --grad_accum "unrecognized option '\''--grad_accum'\''; did you mean --grad-accum?"
'

test_expect_success 'gpu-train: typing errors, an ambiguous abbreviation, nothing near' '
	expect_hint gpu-train --lyers "unrecognized option '\''--lyers'\''; did you mean --layers?" &&
	expect_hint gpu-train --warmpu "unrecognized option '\''--warmpu'\''; did you mean --warmup?" &&
	expect_hint gpu-train --eval "option '\''--eval'\'' is ambiguous: --eval-every, --eval-batches, --eval-only" &&
	expect_hint gpu-train --no-such-option "unrecognized option '\''--no-such-option'\''" &&
	expect_hint gpu-train --quiet=1 "option '\''--quiet'\'' doesn'\''t allow an argument" &&
	expect_hint gpu-train --lr "option '\''--lr'\'' requires an argument: --lr LR" &&
	expect_hint gpu-train -y "invalid option -- '\''y'\''"
'

test_expect_success 'mem-estimate: the nearest of its own names' '
	expect_hint mem-estimate --micro_batch_size "unrecognized option '\''--micro_batch_size'\''; did you mean --micro-batch?" &&
	expect_hint mem-estimate --tensor-model-parallel-size "unrecognized option '\''--tensor-model-parallel-size'\''; did you mean --tp?" &&
	expect_hint mem-estimate --seq-length "unrecognized option '\''--seq-length'\''; did you mean --seq?" &&
	expect_hint mem-estimate --learning-rate "unrecognized option '\''--learning-rate'\''"
'

test_expect_success 'allreduce-bench, ckpt-merge, ckpt-shard' '
	expect_hint allreduce-bench --warmup-iters "unrecognized option '\''--warmup-iters'\''; did you mean --warmup_iters?" &&
	expect_hint allreduce-bench --maxbyts "unrecognized option '\''--maxbyts'\''; did you mean --maxbytes?" &&
	expect_hint ckpt-merge --max_size "unrecognized option '\''--max_size'\''; did you mean --max-size?" &&
	expect_hint ckpt-shard --dryrun "unrecognized option '\''--dryrun'\''; did you mean --dry-run?"
'

test_expect_success 'a bad argument is named as it was typed, long or short' '
	test_expect_code 2 allreduce-bench --minbytes 1Q 2>err &&
	grep "^allreduce-bench: --minbytes .1Q.: unknown unit" err &&
	test_expect_code 2 allreduce-bench --minbytes=1Q 2>err &&
	grep "^allreduce-bench: --minbytes .1Q.: unknown unit" err &&
	test_expect_code 2 allreduce-bench -b 1Q 2>err &&
	grep "^allreduce-bench: -b .1Q.: unknown unit" err &&
	test_expect_code 2 allreduce-bench -b1Q 2>err &&
	grep "^allreduce-bench: -b .1Q.: unknown unit" err &&
	test_expect_code 2 gpu-train --batch 0 2>err &&
	grep "^gpu-train: --batch .0.: " err
'

test_done
