#!/bin/sh
test_description='ckpt-merge and ckpt-shard reject every bad input with its exact message

Each corrupt safetensors file in tests/data/st/ breaks one rule of the
format; each case in tests/data/ckpt/ breaks one rule of the index, of
row slices or of a complete set of shards (tools/mkckptfixtures.py made
the slice-* and set-* cases with the reference writer). errors.tsv
beside them holds the exact message, which every reader gives.'
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
		 test_expect_code 1 ckpt-merge $name -o ../m.safetensors 2>../err1 &&
		 test_expect_code 1 ckpt-shard --ranks 2 -o ../sh $name 2>../err2 &&
		 test_expect_code 1 mem-estimate --from $name 2>../err3) &&
		test_cmp expect err &&
		test_cmp expect err1 &&
		sed 's/^ckpt-merge:/ckpt-shard:/' expect >expect2 &&
		test_cmp expect2 err2 &&
		sed 's/^ckpt-merge:/mem-estimate:/' expect >expect3 &&
		test_cmp expect3 err3 &&
		! test -e sh && ! test -e m.safetensors &&
		test -z \"\$(ls -A | grep tmp-)\"
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

test_expect_success 'a step directory without COMMIT is refused through latest too' '
	mkdir -p lroot/step-00000010 &&
	cp "$ck/expect.safetensors" lroot/step-00000010/model-rank-00000-of-00001.safetensors &&
	ln -s step-00000010 lroot/latest &&
	for in in lroot/latest lroot/latest/ lroot/step-00000010/; do
		echo "ckpt-merge: read '\''$in'\'': incomplete checkpoint (no COMMIT)" >expect &&
		test_expect_code 1 ckpt-merge --check $in 2>err &&
		test_cmp expect err || return 1
	done &&
	mkdir -p lroot/.step-00000011.tmp-abc &&
	cp "$ck/expect.safetensors" lroot/.step-00000011.tmp-abc/ &&
	echo "ckpt-merge: read '\''lroot/.step-00000011.tmp-abc'\'': incomplete checkpoint (no COMMIT)" >expect &&
	test_expect_code 1 ckpt-merge --check lroot/.step-00000011.tmp-abc 2>err &&
	test_cmp expect err
'

# Each input that is a FIFO, not a file: refused at once (timeout would
# say 124 if a reader waited for a writer).
test_expect_success 'FIFOs among the inputs are refused, not waited on' '
	mkdir -p fifo1 fifo2 fifo3/step-00000001 &&
	cp "$ck/expect.safetensors" fifo1/ && mkfifo fifo1/more.safetensors &&
	mkfifo fifo2/model.safetensors.index.json &&
	cp "$ck/expect.safetensors" fifo3/step-00000001/model.safetensors &&
	mkfifo fifo3/step-00000001/COMMIT fifo.json fifo.safetensors &&
	cat >cases <<-\EOF &&
	fifo1	fifo1/more.safetensors
	fifo2	fifo2/model.safetensors.index.json
	fifo3/step-00000001	fifo3/step-00000001/COMMIT
	fifo.json	fifo.json
	fifo.safetensors	fifo.safetensors
	EOF
	while IFS="	" read -r in what; do
		echo "ckpt-merge: read '\''$what'\'': not a regular file" >expect &&
		test_expect_code 1 timeout 20 ckpt-merge --check $in 2>err &&
		test_cmp expect err || return 1
	done <cases
'

test_expect_success 'output directories get 0777 & ~umask, like mkdir' '
	(umask 022 && ckpt-shard -q --shards 2 -o m022 "$ck/expect.safetensors") &&
	(umask 027 && ckpt-merge -q --max-size 40 -o m027 "$ck/expect.safetensors") &&
	(umask 077 && ckpt-shard -q --ranks 2 -o m077 "$ck/expect.safetensors") &&
	stat -c "%a %n" m022 m027 m077 >actual &&
	printf "755 m022\n750 m027\n700 m077\n" >expect &&
	test_cmp expect actual
'

test_expect_success 'an output file replaced keeps its permission bits' '
	cp "$ck/expect.safetensors" p.safetensors &&
	chmod 600 p.safetensors &&
	ckpt-merge -q p.safetensors -o p.safetensors &&
	cmp p.safetensors "$ck/expect.safetensors" &&
	chmod 640 p.safetensors &&
	ln -s p.safetensors plink &&
	(umask 0 && ckpt-merge -q "$ck/expect.safetensors" -o plink) &&
	(umask 077 && ckpt-merge -q "$ck/expect.safetensors" -o new.safetensors) &&
	stat -c "%a %n" p.safetensors new.safetensors >actual &&
	printf "640 p.safetensors\n600 new.safetensors\n" >expect &&
	test_cmp expect actual &&
	test -L plink
'

test_expect_success '--max-size 0 is a usage error' '
	test_expect_code 2 ckpt-shard --max-size 0 -o z "$ck/expect.safetensors" 2>err &&
	head -n 1 err >first &&
	echo "ckpt-shard: --max-size: must be more than 0" >expect &&
	test_cmp expect first &&
	test_expect_code 2 ckpt-merge --max-size 0 -o z "$ck/expect.safetensors" 2>err &&
	! test -e z
'

test_expect_success 'an empty -o is a usage error, before any work' '
	test_expect_code 2 ckpt-merge -o "" "$ck/expect.safetensors" 2>err &&
	head -n 1 err >first &&
	echo "ckpt-merge: -o: empty path" >expect &&
	test_cmp expect first &&
	test_expect_code 2 ckpt-shard --shards 2 -o "" "$ck/expect.safetensors" 2>err &&
	head -n 1 err >first &&
	echo "ckpt-shard: -o: empty path" >expect &&
	test_cmp expect first &&
	test_expect_code 2 ckpt-merge --output= "$ck/expect.safetensors"
'

# COMMIT is written with xxhsum, an XXH3 independent of ours.
if command -v xxhsum >/dev/null 2>&1; then test_set_prereq XXHSUM; fi

test_expect_success XXHSUM 'a file damaged after COMMIT is not merged or resharded' '
	d=croot/step-00000005 && mkdir -p $d &&
	cp "$ck/expect.safetensors" $d/model.safetensors &&
	h=$(xxhsum -H3 $d/model.safetensors | sed "s/.* = //") &&
	printf "{\"step\":5,\"files\":{\"model.safetensors\":{\"bytes\":%d,\"xxh3\":\"%s\"}}}\n" \
		$(wc -c <$d/model.safetensors) $h >$d/COMMIT &&
	ckpt-merge -q croot -o good.safetensors &&
	cmp good.safetensors "$ck/expect.safetensors" &&
	printf "\377" | dd of=$d/model.safetensors bs=1 seek=190 conv=notrunc 2>/dev/null &&
	echo "ckpt-merge: checkpoint '\''croot/step-00000005'\'': '\''model.safetensors'\'' does not match its XXH3 in COMMIT" >expect &&
	test_expect_code 1 ckpt-merge croot -o bad.safetensors 2>err &&
	test_cmp expect err &&
	test_expect_code 1 ckpt-merge $d --max-size 1K -o baddir 2>err &&
	test_cmp expect err &&
	test_expect_code 1 ckpt-shard --shards 2 -o baddir2 $d 2>err &&
	sed "s/^ckpt-merge:/ckpt-shard:/" expect >expect2 &&
	test_cmp expect2 err &&
	! test -e bad.safetensors && ! test -e baddir && ! test -e baddir2
'

# COMMIT lists every file the writer wrote; one beside them that it does
# not list was never checked, and must not be read as part of the step.
test_expect_success XXHSUM 'a safetensors file that COMMIT does not list is refused' '
	d=iroot/step-00000001 && mkdir -p $d &&
	cp "$ck/expect.safetensors" $d/model.safetensors &&
	test_commit $d 1 &&
	ckpt-merge -q iroot -o clean.safetensors &&
	cmp clean.safetensors "$ck/expect.safetensors" &&
	cp "$ck/expect-a.safetensors" $d/model-zzz.safetensors &&
	echo "ckpt-merge: checkpoint '\''iroot/step-00000001'\'': '\''model-zzz.safetensors'\'' is not listed in COMMIT" >expect &&
	test_expect_code 1 ckpt-merge -q iroot -o injected.safetensors 2>err &&
	test_cmp expect err &&
	test_expect_code 1 ckpt-merge -q --check $d 2>err &&
	test_cmp expect err &&
	test_expect_code 1 ckpt-merge --list iroot/ 2>err &&
	test_cmp expect err &&
	test_expect_code 1 ckpt-shard -q --shards 2 -o injected $d 2>err &&
	sed "s/^ckpt-merge:/ckpt-shard:/" expect >expect2 &&
	test_cmp expect2 err &&
	test_expect_code 1 mem-estimate --from iroot 2>err &&
	sed "s/^ckpt-merge:/mem-estimate:/" expect >expect3 &&
	test_cmp expect3 err &&
	! test -e injected.safetensors && ! test -e injected &&
	# an index or optimizer state is read too
	mv $d/model-zzz.safetensors $d/optim-rank-00000-of-00001.safetensors &&
	test_expect_code 1 ckpt-merge -q --check $d 2>err &&
	grep "^ckpt-merge: checkpoint .*: .optim-rank-00000-of-00001.safetensors. is not listed in COMMIT$" err &&
	rm $d/optim-rank-00000-of-00001.safetensors &&
	echo "{\"weight_map\": {}}" >$d/model.safetensors.index.json &&
	test_expect_code 1 ckpt-merge -q --check $d 2>err &&
	grep "^ckpt-merge: checkpoint .*: .model.safetensors.index.json. is not listed in COMMIT$" err &&
	rm $d/model.safetensors.index.json &&
	# other files are not read, and not refused: notes, or the tokenizer
	# files that make a step loadable by Hugging Face
	echo notes >$d/README &&
	echo "{}" >$d/tokenizer.json && echo "{}" >$d/generation_config.json &&
	ckpt-merge -q --check $d &&
	echo "{}" >$d/trainer.json &&
	test_expect_code 1 ckpt-merge -q --check $d 2>err &&
	grep "^ckpt-merge: checkpoint .*: .trainer.json. is not listed in COMMIT$" err &&
	rm $d/trainer.json
'

test_expect_success XXHSUM 'a COMMIT of another step is refused' '
	cp -R iroot/step-00000001 iroot/step-00000002 &&
	echo "ckpt-merge: checkpoint '\''iroot/step-00000002'\'': COMMIT says step 1 (copied from another step?)" >expect &&
	test_expect_code 1 ckpt-merge -q iroot -o other.safetensors 2>err &&
	test_cmp expect err &&
	jq "del(.step)" iroot/step-00000001/COMMIT >iroot/step-00000002/COMMIT &&
	test_expect_code 1 ckpt-merge -q --check iroot/step-00000002 2>err &&
	grep "^ckpt-merge: checkpoint .iroot/step-00000002.: COMMIT has no step$" err &&
	! test -e other.safetensors
'

for t in ckpt-merge ckpt-shard; do
	test_expect_success "the option table, --help and $t(1) name the same options" '
		# --help is the table (bin/'$t'.c): every name at the start of its
		# option lines, "-o, --output OUT" giving -o and --output; the man
		# page: every Fl of an .It line of OPTIONS ("Fl Fl name")
		'$t' --help >help &&
		test_help_options help >in-help &&
		test_man_options "$GK_TOP/man/man1/'$t'.1" >in-man &&
		test $(wc -l <in-help) -gt 12 &&
		test_cmp in-help in-man &&
		# and getopt takes an argument exactly for the rows whose help
		# line shows one: a flag alone leaves no input
		test_options_take_args help '$t' &&
		for o in $(sed -n "s/^  \(-[a-z], \)\{0,1\}\(--[a-z0-9-]*\)  .*/\2/p" help); do
			case $o in --help | --version) continue ;; esac
			test_expect_code 2 '$t' $o >out 2>err || return 1
			grep -q "^'$t': no input$" err || return 1
		done
	'
done

test_done
