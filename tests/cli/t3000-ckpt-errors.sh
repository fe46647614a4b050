#!/bin/sh
test_description='ckpt-merge and ckpt-shard reject every bad input with its exact message

Each corrupt safetensors file in tests/data/st/ breaks one rule of the
format; each case in tests/data/ckpt/ breaks one rule of the index or
of row slices. errors.tsv beside them holds the exact message.'
. "$(dirname "$0")/lib.sh"

st="$GK_TOP/tests/data/st"
ck="$GK_TOP/tests/data/ckpt"

while IFS='	' read -r name msg; do
	test_expect_success "st: $name" "
		cp '$st/$name.safetensors' . &&
		echo \"ckpt-merge: $msg\" >expect &&
		test_expect_code 1 ckpt-merge --check $name.safetensors 2>err &&
		test_cmp expect err &&
		test_expect_code 1 ckpt-merge $name.safetensors -o out.safetensors 2>err2 &&
		test_cmp expect err2 &&
		! test -e out.safetensors &&
		test -z \"\$(ls -A | grep tmp-)\"
	"
done <"$st/errors.tsv"

while IFS='	' read -r name msg; do
	test_expect_success "ckpt: $name" "
		rm -rf case && mkdir case && cp -R '$ck'/* case/ &&
		(cd case && echo \"ckpt-merge: $msg\" >../expect &&
		 test_expect_code 1 ckpt-merge --check $name 2>../err &&
		 test_expect_code 1 ckpt-shard --ranks 2 -o ../sh $name 2>../err2) &&
		test_cmp expect err &&
		sed 's/^ckpt-merge:/ckpt-shard:/' expect >expect2 &&
		test_cmp expect2 err2 &&
		! test -e sh
	"
done <"$ck/errors.tsv"

test_expect_success 'slices that tile dim 0 merge back exactly (empty slice included)' '
	ckpt-merge "$ck/slices-ok" -o a.safetensors &&
	cmp a.safetensors "$ck/expect-a.safetensors"
'

test_expect_success 'identical copies of a tensor are merged' '
	ckpt-merge "$ck/dup" -o d.safetensors &&
	cmp d.safetensors "$ck/expect.safetensors"
'

test_expect_success 'a step directory without COMMIT is refused' '
	mkdir -p root/step-00000010 &&
	cp "$ck/expect.safetensors" root/step-00000010/model-rank-00000-of-00001.safetensors &&
	echo "ckpt-merge: read '\''root/step-00000010'\'': incomplete checkpoint (no COMMIT)" >expect &&
	test_expect_code 1 ckpt-merge --check root/step-00000010 2>err &&
	test_cmp expect err
'

test_expect_success 'usage errors exit 2' '
	test_expect_code 2 ckpt-merge x.safetensors 2>err && grep "no output" err &&
	test_expect_code 2 ckpt-shard -o d --shards 2 --ranks 2 x 2>err &&
	test_expect_code 2 ckpt-shard -o d --slice --shards 2 x 2>err &&
	test_expect_code 2 ckpt-merge --dtype i8 -o y x 2>err &&
	test_expect_code 2 ckpt-shard -o d --max-size 5QB x 2>err
'

test_expect_success 'a non-empty output directory is refused, untouched' '
	mkdir full && echo keep >full/file &&
	test_expect_code 1 ckpt-shard --shards 1 -o full "$ck/expect.safetensors" 2>err &&
	grep "directory is not empty" err &&
	echo keep >expect && test_cmp expect full/file
'

test_done
