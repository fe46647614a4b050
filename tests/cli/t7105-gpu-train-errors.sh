#!/bin/sh
test_description='gpu-train on bad input: a clear message, exit 1 or 2

Missing and corrupt shards, a config whose heads do not divide hidden, a
vocabulary too small for the token ids or the end-of-text token, a
trainer.json that contradicts its checkpoint, a checkpoint damaged after
its COMMIT or with a file added that COMMIT does not list, a NaN loss (naming the step, or
skipped and counted with --skip-nonfinite), a sequence longer than the
model; no partial checkpoint is left behind. Settings that cannot train,
an unusable or busy --ckpt-dir (refused before step 1), shape flags over
a checkpoint'"'"'s config, outputs that are devices or symlinks.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

A="--data train.bin $TINY --batch 2 --steps 3"

test_expect_success 'data and a checkpoint' '
	train_data &&
	gpu-train $A -q --ckpt-dir ck &&
	test -f ck/latest/COMMIT
'

test_expect_success 'heads that do not divide hidden' '
	test_expect_code 2 gpu-train --data train.bin --layers 2 --hidden 30 --heads 4 --steps 1 2>err &&
	grep "^gpu-train: .*head" err &&
	printf "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 30, \"n_head\": 4, \"vocab_size\": 257, \"n_positions\": 32, \"activation_function\": \"gelu_new\", \"layer_norm_epsilon\": 1e-5}\n" >bad.json &&
	test_expect_code 1 gpu-train --data train.bin --config bad.json --steps 1 2>err &&
	grep "^gpu-train: .*head" err
'

test_expect_success 'a vocabulary too small for the token ids' '
	test_expect_code 1 gpu-train --data train.bin --layers 2 --hidden 32 --heads 2 \
		--positions 33 --seq 16 --vocab 100 --steps 1 2>err &&
	grep "^gpu-train: token file .train.bin. token [0-9]*: id [0-9]* is not below the vocabulary size 100" err
'

# COMMIT rewritten with xxhsum (an XXH3 independent of ours), so that the
# edited trainer.json passes the hash check and meets the step check.
command -v xxhsum >/dev/null 2>&1 && test_set_prereq XXHSUM

test_expect_success XXHSUM 'a resume from a trainer.json that contradicts its step directory' '
	cp -R ck ckj &&
	d=ckj/step-00000003 &&
	for edit in ".step = -5" ".step = 4" ".tokens = -1" ".tokens = 2" ".skipped = 7"; do
		jq "$edit" ck/step-00000003/trainer.json >$d/trainer.json &&
		h=$(xxhsum -H3 $d/trainer.json | sed "s/.* = //") &&
		jq ".files[\"trainer.json\"] = {bytes: $(wc -c <$d/trainer.json), xxh3: \"$h\"}" \
			ck/step-00000003/COMMIT >$d/COMMIT &&
		test_expect_code 1 gpu-train $A --ckpt-dir ckj --resume 2>err &&
		grep "^gpu-train: resume from .ckj/step-00000003.: read .*trainer.json.: step .* do not describe checkpoint step 3$" err ||
		return 1
	done &&
	for edit in ".version = 99" ".format = \"other\"" ".nparams = 5"; do
		jq "$edit" ck/step-00000003/trainer.json >$d/trainer.json &&
		h=$(xxhsum -H3 $d/trainer.json | sed "s/.* = //") &&
		jq ".files[\"trainer.json\"] = {bytes: $(wc -c <$d/trainer.json), xxh3: \"$h\"}" \
			ck/step-00000003/COMMIT >$d/COMMIT &&
		test_expect_code 1 gpu-train $A --ckpt-dir ckj --resume 2>err &&
		grep -E "^gpu-train: resume from .ckj/step-00000003.: read .*trainer.json.: (format .* version|5 parameters)" err ||
		return 1
	done
'

test_expect_success 'a checkpoint damaged after COMMIT is not resumed from or loaded' '
	cp -R ck ckd &&
	m=ckd/step-00000003/model.safetensors &&
	size=$(wc -c <$m) &&
	printf "\377" | dd of=$m bs=1 seek=$((size - 5)) conv=notrunc 2>/dev/null &&
	test_expect_code 1 gpu-train $A --ckpt-dir ckd --resume 2>err &&
	grep "^gpu-train: checkpoint .ckd/step-00000003.: .model.safetensors. does not match its XXH3 in COMMIT$" err &&
	test_expect_code 1 gpu-train $A --init-from ckd/latest 2>err &&
	grep "^gpu-train: checkpoint .ckd/step-00000003.: .model.safetensors. does not match its XXH3 in COMMIT$" err &&
	test_expect_code 1 gpu-train --eval-only --data train.bin --init-from ckd --seq 16 2>err &&
	grep "does not match its XXH3 in COMMIT$" err &&
	# a file of the step is checked as its step
	test_expect_code 1 gpu-train $A --init-from ckd/step-00000003/model.safetensors 2>err &&
	grep "^gpu-train: checkpoint .ckd/step-00000003.: .model.safetensors. does not match its XXH3 in COMMIT$" err &&
	gpu-train $A -q --init-from ck/step-00000003/model.safetensors
'

test_expect_success 'a checkpoint with a tensor file added after COMMIT is not resumed from or loaded' '
	for f in model-zzz.safetensors optim-zzz.safetensors; do
		rm -rf cki && cp -R ck cki &&
		cp cki/step-00000003/model.safetensors cki/step-00000003/$f &&
		test_expect_code 1 gpu-train $A --ckpt-dir cki --resume 2>err &&
		grep "^gpu-train: checkpoint .cki/step-00000003.: .$f. is not listed in COMMIT$" err &&
		test_expect_code 1 gpu-train --eval-only --data train.bin --init-from cki/step-00000003 --seq 16 2>err &&
		grep "^gpu-train: checkpoint .cki/step-00000003.: .$f. is not listed in COMMIT$" err ||
		return 1
	done
'

test_expect_success 'an end-of-text token outside the vocabulary' '
	test_expect_code 1 gpu-train --data train.bin $TINY --eot 300 --steps 1 2>err &&
	grep "^gpu-train: open data .train.bin.: the end-of-text token 300 is not below the vocabulary size 257" err
'

test_expect_success 'missing and corrupt shards' '
	test_expect_code 1 gpu-train --data "none-{00..01}.tar" $TINY --steps 1 2>err &&
	grep "^gpu-train: .*none-00.tar" err &&
	mkdir corpus && cp "$GK_TOP/README.md" corpus/a.txt && cp "$GK_TOP/INSTALL" corpus/b.txt &&
	data-pack -q -c -o s.tar corpus/ &&
	head -c 2000 s.tar >cut.tar &&
	test_expect_code 1 gpu-train --data cut.tar $TINY --steps 1 2>err &&
	grep "^gpu-train: .*cut.tar" err &&
	test_expect_code 1 gpu-train --data corpus $TINY --steps 1 2>err &&
	echo "gpu-train: shard list: directory '\''corpus'\'' holds no shards (*.tar, *.tar.lz4); its files are no shards: pack them first (data-pack -c -o SHARDS/train-%06d.tar corpus)" >want &&
	test_cmp want err &&
	test -f s.idx &&
	test_expect_code 1 gpu-train --data s.idx $TINY --steps 1 2>err &&
	echo "gpu-train: '"'"'s.idx'"'"' is a shard'"'"'s index, not a shard: name the shard beside it" >want &&
	test_cmp want err &&
	test_expect_code 1 gpu-train --data none.idx $TINY --steps 1 2>err &&
	echo "gpu-train: open '"'"'none.idx'"'"': No such file or directory" >want &&
	test_cmp want err
'

test_expect_success 'a sequence longer than the positions' '
	test_expect_code 1 gpu-train --data train.bin $TINY --seq 64 --steps 1 2>err &&
	grep "^gpu-train: sequence length 64 is longer than the model.s 33 positions" err
'

test_expect_success 'NaN loss: exit 1 naming the step; no checkpoint of it' '
	python3 - ck/latest/model.safetensors nan.safetensors <<-\PY &&
	import json, struct, sys
	b = bytearray(open(sys.argv[1], "rb").read())
	n = struct.unpack("<Q", b[:8])[0]
	h = json.loads(b[8:8 + n])
	s, e = h["transformer.ln_f.weight"]["data_offsets"]
	b[8 + n + s:8 + n + e] = struct.pack("<f", float("nan")) * ((e - s) // 4)
	open(sys.argv[2], "wb").write(b)
	PY
	test_expect_code 1 gpu-train --init-from nan.safetensors $A --ckpt-dir ck2 2>err &&
	grep "^gpu-train: step 1: the loss is NaN" err &&
	test ! -e ck2/latest
'

test_expect_success MPI 'a NaN loss on 2 ranks: said once, by rank 0, and no MPI_Abort' '
	test_expect_code 1 mpi 2 --init-from nan.safetensors $A 2>err &&
	test $(grep -c "^gpu-train: step 1: the loss is NaN" err) = 1 &&
	! grep -q MPI_ABORT err
'

test_expect_success MPI 'a --config missing on one rank: every rank exits 1, said once with the count' '
	cat >cfg0.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2,
	 "vocab_size": 257, "n_positions": 33}
	EOF
	test_expect_code 1 timeout 120 mpirun --oversubscribe --bind-to none -np 2 sh -c \
		"exec gpu-train --data train.bin --config cfg\$OMPI_COMM_WORLD_RANK.json --seq 16 --steps 1" 2>err &&
	cat err &&
	test $(grep -c "^gpu-train: open .cfg1.json.: No such file or directory (1 of 2 ranks)$" err) = 1 &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	! grep -q MPI_ABORT err
'

# Failures of what each rank reads or builds alone, before step 1 (the
# data, --val-data, the model's shape): each rank printed its own and
# one called MPI_ABORT.
test_expect_success MPI 'data, --val-data or a shape all ranks fail on: said once with the count' '
	mkdir one && echo "a single sample" >one/a.txt &&
	data-pack -c -q -o one.tar one &&
	test_expect_code 1 mpi 2 --data one.tar $TINY --seq 16 --steps 1 2>err &&
	test $(grep -c "^gpu-train: dataset .one.tar.: 1 samples .* (2 of 2 ranks)$" err) = 1 &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	test_expect_code 1 mpi 2 $A --val-data nothere.tar 2>err &&
	test $(grep -c "^gpu-train: open .nothere.tar.: No such file or directory (2 of 2 ranks)$" err) = 1 &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	test_expect_code 1 mpi 2 --data train.bin $TINY --seq 40 --steps 1 2>err &&
	test $(grep -c "^gpu-train: sequence length 40 is longer than the model.s 33 positions (2 of 2 ranks)$" err) = 1 &&
	! grep -q MPI_ABORT err
'

# A --ckpt-dir each rank sees apart (here: relative to per-rank working
# directories) failed only at the first checkpoint, after its steps.
test_expect_success MPI 'a --ckpt-dir not shared by the ranks: refused before step 1' '
	test_expect_code 1 timeout 120 mpirun --oversubscribe --bind-to none -np 2 sh -c \
		"mkdir -p r\$OMPI_COMM_WORLD_RANK && cd r\$OMPI_COMM_WORLD_RANK &&
		 exec gpu-train --data ../train.bin $TINY --steps 2 --json --ckpt-dir ck" >out 2>err &&
	test $(grep -c "^gpu-train: checkpoint directory .ck.: not the one rank 0 writes .* (1 of 2 ranks)$" err) = 1 &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	! grep -q "\"event\":\"step\"" out r0/out 2>/dev/null &&
	! grep -q MPI_ABORT err &&
	test ! -e r0/ck/latest
'

test_expect_success '--skip-nonfinite skips and counts' '
	gpu-train --init-from nan.safetensors $A --skip-nonfinite --json >s.json &&
	jq -s -e "map(select(.event == \"summary\"))[0].skipped == 3" s.json &&
	jq -s -e "map(select(.event == \"step\") | .skipped) | length == 3 and all" s.json &&
	test_expect_code 1 gpu-train --init-from nan.safetensors $A --skip-nonfinite --steps 30 \
		--ckpt-dir nanck --ckpt-every 5 --json >s30.json 2>err &&
	grep -Fx "gpu-train: step 10: 10 steps in a row skipped (the loss is NaN): the model or the data is broken" err &&
	test "$(jq -s "map(select(.event == \"step\")) | length" s30.json)" = 9 &&
	test ! -e nanck/step-00000010
'

test_expect_success 'no data, bad numbers: usage errors' '
	test_expect_code 2 gpu-train $TINY &&
	test_expect_code 2 gpu-train $A --batch 0 &&
	test_expect_code 2 gpu-train $A --lr abc &&
	test_expect_code 2 gpu-train $A --resume
'

test_expect_success 'settings that cannot train: usage errors before step 1' '
	test_expect_code 2 gpu-train $A --steps 0 2>err &&
	grep "^gpu-train: --steps 0 trains nothing: it evaluates --val-data, or samples" err &&
	test_expect_code 2 gpu-train --eval-only --dump-data 1 --data train.bin $TINY &&
	test_expect_code 2 gpu-train --dump-data 1 --data train.bin --seq 16 --ckpt-dir ck --resume 2>err &&
	grep "^gpu-train: --dump-data prints the data from its start, without a model: not with --resume" err &&
	test_expect_code 2 gpu-train --dump-data 1 --data train.bin --seq 16 --init-from ck 2>err &&
	grep "not with --init-from" err &&
	test_expect_code 2 gpu-train $A --eps 0 2>err &&
	grep "^gpu-train: --eps must be above 0" err &&
	test_expect_code 2 gpu-train $A --min-lr 5 --lr 1e-4 2>err &&
	grep "^gpu-train: --min-lr 5 is above --lr" err &&
	test_expect_code 2 gpu-train $A --eval-every 2 2>err &&
	grep "^gpu-train: --eval-every needs --val-data" err &&
	test_expect_code 2 gpu-train $A --bucket 25 2>err &&
	grep "^gpu-train: --bucket .25.: 25 bytes, below 1K (a size takes a suffix: 25M)" err &&
	gpu-train $A --bucket 1K -q --steps 1
'

test_expect_success 'an --eval-only loss that is NaN exits 1' '
	test_expect_code 1 gpu-train --eval-only --data train.bin --init-from nan.safetensors \
		$TINY >out 2>err &&
	grep "^loss nan" out &&
	grep "^gpu-train: the loss is NaN" err
'

test_expect_success 'shape flags with --init-from go over its config.json' '
	gpu-train --data train.bin --init-from ck/latest --layers 2 --steps 1 -q --threads 1 &&
	test_expect_code 1 gpu-train --data train.bin --init-from ck/latest --layers 3 \
		--steps 1 2>err &&
	grep "^gpu-train: checkpoint .ck/step-00000003.: its model (2 layers, hidden 32, 2 heads, vocab 257, 33 positions) is not the one asked for (3, 32, 2, 257, 33)" err
'

test_expect_success 'an unusable --ckpt-dir fails before step 1' '
	echo x >afile &&
	test_expect_code 1 gpu-train --json $A --steps 1000 --ckpt-dir afile >out 2>err &&
	grep "^gpu-train: create directory .afile.: not a directory" err &&
	! grep "\"event\":\"step\"" out
'

test_expect_success 'an unusable --val-data fails before step 1, not at the first evaluation' '
	test_expect_code 1 gpu-train --json $A --steps 500 --eval-every 400 --val-data nothere.bin \
		--ckpt-dir vck >out 2>err &&
	grep "^gpu-train: open .nothere\.bin.: No such file or directory$" err &&
	! grep "\"event\":\"step\"" out &&
	printf "A\000B\000" >two.bin &&
	test_expect_code 1 gpu-train --json $A --steps 500 --val-data two.bin --ckpt-dir vck >out 2>err &&
	grep "^gpu-train: data .two\.bin.: 2 tokens, fewer than one global micro-batch needs (33)$" err &&
	! grep "\"event\":\"step\"" out
'

# ulimit -f counts 512-byte blocks in dash, 1 KiB in bash: 64 is below the
# 136 KiB model file either way.
test_expect_success 'past ulimit -f a checkpoint fails with EFBIG, named, no staging left' '
	(ulimit -f 64 && test_expect_code 1 gpu-train $A -q --ckpt-dir fsz 2>err) &&
	grep "^gpu-train: write .fsz/\.step-00000003\.tmp-[^/]*/model\.safetensors.: File too large$" err &&
	echo .lock >want.ls &&
	ls -A fsz >got.ls &&
	test_cmp want.ls got.ls &&
	(ulimit -f 64 && test_expect_code 1 gpu-train $A -q --ckpt-dir fsz --ckpt-every 1 \
		--ckpt-error continue 2>err) &&
	test "$(grep -c "^gpu-train: warning: checkpoint step [123] not written, training goes on: .*File too large$" err)" = 3 &&
	grep "^gpu-train: the last checkpoint (step 3) was not written" err &&
	ls -A fsz >got.ls &&
	test_cmp want.ls got.ls
'

test_expect_success '--resume into a directory that does not exist yet starts afresh' '
	gpu-train $A -q --ckpt-dir fresh/ck --resume &&
	test -f fresh/ck/latest/COMMIT
'

test_expect_success 'a second writer to a --ckpt-dir is refused; the first one'"'"'s litter is removed' '
	{ gpu-train $A --steps 1000000 -q --ckpt-dir busy & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	for i in $(seq 1 600); do test -s busy/.lock && break; sleep 0.1; done &&
	test_expect_code 1 gpu-train $A -q --ckpt-dir busy 2>err &&
	grep "^gpu-train: checkpoint directory .busy. is in use by another writer (pid $pid on " err &&
	kill -9 $pid && { wait $pid; true; } &&
	mkdir busy/.step-00000007.tmp-Ab12Cd && echo half >busy/.step-00000007.tmp-Ab12Cd/model.safetensors &&
	gpu-train $A -q --ckpt-dir busy --resume &&
	! ls -d busy/.step-*.tmp-* 2>/dev/null
'

test_expect_success 'a --ckpt-dir removed under the run is locked again when it is recreated' '
	{ gpu-train $A --steps 1000000 -q --ckpt-dir gone --ckpt-every 1 \
		--ckpt-error continue 2>/dev/null & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	for i in $(seq 1 600); do test -e gone/latest && break; sleep 0.1; done &&
	mv gone gone.old && rm -rf gone.old &&
	for i in $(seq 1 600); do test -e gone/latest && break; sleep 0.1; done &&
	test -e gone/latest &&
	test_expect_code 1 gpu-train $A -q --ckpt-dir gone 2>err &&
	grep "^gpu-train: checkpoint directory .gone. is in use by another writer (pid $pid on " err
'

# A device node of our own (a copy of /dev/null's numbers) needs root.
mknod nul c 1 3 2>/dev/null && test_set_prereq MKNOD

test_expect_success MKNOD '--metrics and ckpt-merge -o write through a device node' '
	gpu-train $A -q --metrics nul &&
	ckpt-merge ck/latest -o nul &&
	test -c nul
'

test_expect_success '--metrics follows a symlink, leaving it a symlink' '
	ln -s m.prom run.prom &&
	gpu-train $A -q --metrics run.prom &&
	test -L run.prom && grep "gpukit_train_steps_total{run=\"run\"} 3" m.prom
'

test_expect_success '--sample --json: token ids, and the text as Python decodes the bytes' '
	gpu-train --data train.bin --init-from ck/latest --seq 16 --steps 1 --threads 1 -q \
		--sample 300 --json --seed 3 >s.json &&
	tail -n 1 s.json | python3 -c "
import json, sys
j = json.loads(sys.stdin.read())
t = bytes(x if x < 256 else 10 for x in j[\"tokens\"]).decode(\"utf-8\", errors=\"replace\")
assert j[\"event\"] == \"sample\" and len(j[\"tokens\"]) == 300 and t == j[\"text\"], j
"
'

test_expect_success 'SIGINT or SIGTERM while sampling ends the process at once' '
	for sig in INT TERM; do
		{ gpu-train $A --json --sample 1048576 >samp.json & } &&
		pid=$! &&
		for i in $(seq 1 600); do
			grep -q "\"event\":\"summary\"" samp.json && break
			sleep 0.1
		done &&
		grep -q "\"event\":\"summary\"" samp.json &&
		kill -$sig $pid &&
		{ wait $pid; echo $? >rc; } &&
		case $sig in INT) test "$(cat rc)" = 130 ;; TERM) test "$(cat rc)" = 143 ;; esac ||
		return 1
	done
'

test_expect_success 'stdout closed: the lock file keeps its own content, the run exits 1' '
	test_expect_code 1 gpu-train --data train.bin $TINY --batch 2 --steps 2 --ckpt-dir ckc >&- 2>err &&
	grep "^gpu-train: write standard output: Bad file descriptor" err &&
	grep "^pid [0-9]* on " ckc/.lock &&
	! grep -q step ckc/.lock
'

test_expect_success 'shape errors name their real cause: a missing --init-from, a file without config.json' '
	test_expect_code 1 gpu-train --data train.bin --init-from nowhere --steps 1 2>err &&
	grep "^gpu-train: open .nowhere.: No such file or directory$" err &&
	test_expect_code 1 gpu-train --data train.bin --init-from train.bin --steps 1 2>err &&
	grep "^gpu-train: no model: .train.bin. has no config.json beside it; give --config or the shape flags$" err &&
	test_expect_code 1 gpu-train --data train.bin --ckpt-dir ck --resume --hidden 64 --steps 4 2>err &&
	grep "^gpu-train: checkpoint .*is not the one asked for" err
'

test_expect_success 'FIFOs: --metrics with no reader warns once and training goes on; a FIFO shard is refused' '
	mkfifo mf &&
	timeout 60 gpu-train --data train.bin $TINY --batch 2 --steps 3 -q --metrics mf 2>err &&
	test $(grep -c "^gpu-train: warning: write .mf.: a FIFO with no reader$" err) = 1 &&
	mkfifo fifo.tar &&
	test_expect_code 1 timeout 60 gpu-train --data fifo.tar $TINY --batch 2 --steps 1 2>err &&
	grep "^gpu-train: shard .fifo.tar.: not a regular file" err
'

test_expect_success 'a full stdout in --json mode names ENOSPC, as in text mode' '
	test_expect_code 1 gpu-train --data train.bin $TINY --batch 2 --steps 2 --json >/dev/full 2>err &&
	grep "^gpu-train: write standard output: No space left on device$" err
'

test_expect_success '--eval-only names the model it evaluated: the step latest resolved to, or null' '
	gpu-train --data train.bin $TINY --batch 2 --steps 2 --ckpt-every 1 --ckpt-dir evk -q &&
	gpu-train --eval-only --ckpt-dir evk --resume --data train.bin $TINY --batch 2 \
		--eval-batches 1 --json >ev.json &&
	jq -s -e "map(select(.event == \"eval\"))[0].model == \"evk/step-00000002\"" ev.json &&
	gpu-train --eval-only --init-from evk/latest --data train.bin $TINY --batch 2 \
		--eval-batches 1 >ev.txt &&
	grep "^loss [0-9.]* over 1 micro-batches of 2 x 16 tokens (evk/step-00000002)$" ev.txt &&
	gpu-train --eval-only --data train.bin $TINY --batch 2 --eval-batches 1 --json >ev.json &&
	jq -s -e "map(select(.event == \"eval\"))[0].model == null" ev.json
'

test_expect_success '--eval-only of a checkpoint directory with nothing in it: exit 1, never the untrained model' '
	test_expect_code 1 gpu-train --eval-only --ckpt-dir nodir --resume --data train.bin $TINY \
		--batch 2 --eval-batches 1 --json >ev.json 2>err &&
	grep "^gpu-train: --eval-only --resume: no committed checkpoint in .nodir.$" err &&
	test_must_be_empty ev.json &&
	test ! -e nodir &&
	mkdir empty &&
	test_expect_code 1 gpu-train --eval-only --ckpt-dir empty --resume --data train.bin $TINY \
		--batch 2 2>err &&
	grep "no committed checkpoint in .empty." err &&
	test_expect_code 2 gpu-train --eval-only --ckpt-dir empty --resume --init-from empty \
		--data train.bin $TINY 2>err &&
	grep "^gpu-train: --eval-only evaluates one model: --init-from or --ckpt-dir --resume, not both" err &&
	test_expect_code 2 gpu-train --eval-only --ckpt-dir empty --data train.bin $TINY 2>err &&
	grep "^gpu-train: --eval-only --ckpt-dir evaluates the directory.s latest checkpoint with --resume" err &&
	test_expect_code 2 gpu-train --data train.bin $TINY --ckpt-dir "" 2>err &&
	grep "^gpu-train: --ckpt-dir .\{2\}: an empty directory name" err
'

test_expect_success 'the option table, --help and gpu-train(1) name the same options' '
	# --help is the table (bin/gpu-train.c): the names at the start of its
	# option lines; the man page: every Fl of an .It line of OPTIONS
	gpu-train --help >help &&
	sed -n "s/^  \(-[a-z], \)\{0,1\}\(--[a-z0-9-]*\).*/\2/p" help | sort -u >in-help &&
	sed -n "/^\.Sh OPTIONS/,/^\.Sh /p" "$GK_TOP/man/man1/gpu-train.1" |
		grep "^\.It" | grep -o "Fl \\\\-[a-z0-9-]*" | sed "s/^Fl \\\\-/--/" | sort -u >in-man &&
	test $(wc -l <in-help) -gt 50 &&
	test_cmp in-help in-man &&
	# and each row parses what its help line says it takes
	for o in $(grep -o "^  --[a-z0-9-]* [A-Z][A-Z]*  " help | sed "s/^ *//; s/ .*//"); do
		test_expect_code 2 gpu-train $o 2>err || return 1
		grep -q "^gpu-train: .*$o" err || grep -q "^gpu-train: option .$o. requires an argument" err || return 1
	done
'

test_done
