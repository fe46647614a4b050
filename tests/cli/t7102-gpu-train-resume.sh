#!/bin/sh
test_description='gpu-train checkpoints: exact resume, kill -9, signals

20 steps straight equal 10 steps, a checkpoint, --resume and 10 more,
bit for bit (1 rank, and 2 ranks with ZeRO-1); a kill -9 while a
checkpoint is being written leaves the previous one and latest intact,
and resuming from it still reproduces the straight run; SIGTERM (or
SIGUSR1 through mpirun) checkpoints at the next step and exits 0; SIGINT
stops without a checkpoint; another world size resumes within tolerance;
a run killed after committing a step but before moving latest resumes
from that step, and a step of another run above latest is refused. On
shards, a resume on another shard list (reordered, a shard replaced by one
of the same size) is refused naming the first difference, on the same
world and on another; the same shards elsewhere, or from a manifest,
resume bit for bit, and so does a state saved before states named their
list.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

A="--data train.bin $TINY --batch 4 --json"

test_expect_success 'data and a straight 20-step run' '
	train_data &&
	gpu-train $A --steps 20 >full.json &&
	losses full.json >full
'

test_expect_success '10 steps, checkpoint, resume, 10 steps: the same losses bit for bit' '
	gpu-train $A --steps 20 --until 10 --ckpt-dir ck >a.json &&
	test -f ck/step-00000010/COMMIT &&
	test "$(readlink ck/latest)" = step-00000010 &&
	jq -e ".step == 10" ck/latest/trainer.json &&
	gpu-train $A --steps 20 --ckpt-dir ck --resume >b.json &&
	{ losses a.json && losses b.json; } >ab &&
	test_cmp full ab &&
	jq -s -e "map(select(.event == \"step\"))[0].step == 11" b.json
'

test_expect_success 'the checkpoint is whole: ckpt-merge checks it, HF names, unpadded vocab' '
	ckpt-merge --check ck/step-00000010 &&
	ckpt-merge --list --json ck/step-00000010/model.safetensors >list.json &&
	jq -e ".[] | select(.name == \"transformer.wte.weight\") | .shape == [257, 32]" list.json &&
	jq -e ".[] | select(.name == \"transformer.h.1.mlp.c_fc.weight\") | .shape == [32, 128]" list.json &&
	jq -e ".n_layer == 2 and .n_embd == 32 and .vocab_size == 257" ck/step-00000010/config.json
'

test_expect_success 'without --seq a checkpoint'"'"'s positions are the window: eval counts and samples by them' '
	gpu-train --eval-only --init-from ck/step-00000010 --data train.bin --threads 1 \
		--batch 4 --eval-batches 2 --sample 10 --json >es.json &&
	jq -s -e "map(select(.event == \"start\"))[0].seq == 33" es.json &&
	jq -s -e "map(select(.event == \"eval\"))[0].tokens == 264" es.json &&
	jq -s -e "map(select(.event == \"sample\"))[0].tokens | length == 10" es.json
'

test_expect_success '--resume without shape flags takes the checkpoint'"'"'s config.json' '
	cp -r ck ckn &&
	rm -r ckn/step-00000020 && ln -sfn step-00000010 ckn/latest &&
	gpu-train --data train.bin --threads 1 --batch 4 --lr 3e-3 --warmup 2 --steps 20 --until 11 \
		--ckpt-dir ckn --resume --json >n.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .layers == 2 and .hidden == 32 and .seq == 33" n.json
'

test_expect_success MPI '2 ranks, ZeRO-1: resume bit for bit, optimizer in rank slices' '
	mpi 2 $A --zero 1 --steps 12 >f2.json &&
	losses f2.json >f2 &&
	mpi 2 $A --zero 1 --steps 12 --until 6 --ckpt-dir ck2 >a2.json &&
	test -f ck2/step-00000006/optim-rank-00000-of-00002.safetensors &&
	test -f ck2/step-00000006/optim-rank-00001-of-00002.safetensors &&
	ckpt-merge ck2/step-00000006/optim-rank-0000[01]-of-00002.safetensors -o optim.safetensors &&
	mpi 2 $A --zero 1 --steps 12 --ckpt-dir ck2 --resume >b2.json &&
	{ losses a2.json && losses b2.json; } >ab2 &&
	test_cmp f2 ab2
'

test_expect_success MPI '2 ranks, a checkpoint every step: each one committed' '
	mpi 2 $A --steps 6 --ckpt-every 1 --ckpt-dir ck8 >/dev/null &&
	test "$(ls -d ck8/step-* | wc -l)" = 6 &&
	test "$(readlink ck8/latest)" = step-00000006 &&
	ckpt-merge --check ck8
'

test_expect_success MPI 'resume 2 x 4 ZeRO-1 on 1 rank x 8: the same global batch, close losses' '
	mpi 2 $A --zero 1 --steps 12 --until 6 --ckpt-dir ck3 >/dev/null &&
	gpu-train --data train.bin $TINY --batch 8 --json --steps 12 --ckpt-dir ck3 --resume >c.json &&
	losses c.json >c &&
	tail -n 6 f2 >f2tail &&
	close_to c f2tail 1e-5
'

test_expect_success MPI 'shards saved by 3 ranks resume on 2: the epoch is remapped, not guessed' '
	mkdir -p docs &&
	for i in $(seq 1 40); do head -c $((200 + i * 7)) "$GK_TOP/lib/core/io.c" | tail -c 180 >docs/d$i.txt; done &&
	data-pack -q -c -o sh-%02d.tar --max-count 10 docs &&
	S="--data sh-{00..03}.tar --shuffle none $TINY --batch 2 --json" &&
	mpi 3 $S --steps 8 --until 4 --ckpt-dir ckr >/dev/null &&
	mpi 2 $S --steps 8 --ckpt-dir ckr --resume >rr.json &&
	jq -r "select(.note) | .note" rr.json >note &&
	echo "data position remapped from 3 ranks to 2" >expect &&
	test_cmp expect note &&
	test "$(losses rr.json | wc -l)" = 4
'

test_expect_success 'kill -9 while a checkpoint is written: previous one and latest intact' '
	gpu-train $A --steps 8 --until 4 --ckpt-dir ck4 >/dev/null &&
	{ GK_TEST_CKPT_DELAY_MS=60000 gpu-train $A --steps 8 --ckpt-dir ck4 --resume >k.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	for i in $(seq 1 600); do
		ls -d ck4/.step-00000008.tmp-* >/dev/null 2>&1 && break
		sleep 0.1
	done &&
	ls -d ck4/.step-00000008.tmp-* &&
	kill -9 $pid && { wait $pid; true; } &&
	test "$(readlink ck4/latest)" = step-00000004 &&
	test ! -e ck4/step-00000008 &&
	ckpt-merge --check ck4 &&
	gpu-train $A --steps 8 --ckpt-dir ck4 --resume >r.json &&
	losses r.json >r &&
	sed -n "5,8p" full.json >/dev/null &&
	gpu-train $A --steps 8 >f8.json && losses f8.json | tail -n 4 >f8tail &&
	test_cmp f8tail r &&
	test "$(readlink ck4/latest)" = step-00000008
'

# Wait until the log at $1 shows a step, at most 300 s.
wait_step() {
	test_wait_for 300 "a step in $1" grep -q "\"event\":\"step\"" "$1"
}

test_expect_success 'SIGTERM: a committed checkpoint at the next step, exit 0' '
	{ gpu-train $A --steps 1000000 --ckpt-dir ck5 >t.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	wait_step t.json &&
	kill -TERM $pid &&
	wait $pid &&
	s=$(jq -r "select(.event == \"summary\") | .step" t.json) &&
	jq -e "select(.event == \"summary\") | .stopped == \"signal (checkpointed)\"" t.json &&
	test "$(readlink ck5/latest)" = "$(printf step-%08d $s)" &&
	ckpt-merge --check ck5 &&
	jq -e ".step == $s" ck5/latest/trainer.json
'

# After four of step 2's eight micro-steps gpu-train waits for the signal
# (GK_TEST_WAIT_SIGNAL=2:4): the signal, sent when step 1's line appears,
# lands inside step 2's accumulation however slowly a loaded machine runs
# it (a long accumulation instead raced the signal: a step 2 that ended
# first stopped at step 2, with nothing dropped).
test_expect_success 'SIGTERM in a long accumulation stops between micro-steps; the resume is exact' '
	G="--grad-accum 8 --steps 3" &&
	gpu-train $A $G >gs.json &&
	{ GK_TEST_WAIT_SIGNAL=2:4 gpu-train $A $G --ckpt-dir cka >g1.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	wait_step g1.json &&
	kill -TERM $pid &&
	test_wait_for 300 "gpu-train to end after SIGTERM" eval "! kill -0 $pid 2>/dev/null" &&
	wait $pid &&
	jq -e "select(.event == \"summary\") | .step == 1 and .stopped == \"signal (checkpointed)\" and .dropped_micro_batches >= 1 and .dropped_micro_batches <= 4" g1.json &&
	test "$(readlink cka/latest)" = step-00000001 &&
	gpu-train $A $G --ckpt-dir cka --resume >g2.json &&
	{ losses g1.json && losses g2.json; } >g12 &&
	losses gs.json >gs &&
	test_cmp gs g12
'

# Step 2 waits for step 1's checkpoint before it starts its own, and rank 0
# holds step 1's commit until the file go exists
# (GK_TEST_CKPT_COMMIT_WAIT): the signal, sent when step 2's line appears,
# comes during that wait however slowly a loaded machine runs, and the
# test lets the commit go only once gpu-train says it has the signal (a
# checkpoint slowed to 2 s + 2 s instead left a window: a signal sent
# after it stopped a step later).
test_expect_success 'SIGTERM while the previous checkpoint is still written: stop at the checkpoint in hand' '
	{ GK_TEST_CKPT_COMMIT_WAIT=go gpu-train $A --steps 1000000 --ckpt-every 1 \
		--ckpt-dir ckw >w.json 2>w.err & } &&
	pid=$! &&
	test_when_finished "touch go; kill \$pid 2>/dev/null || :" &&
	test_wait_for 300 "step 2 in w.json" grep -q "\"step\":2," w.json &&
	test ! -e ckw/step-00000001 &&
	kill -TERM $pid &&
	test_wait_for 300 "gpu-train to take the SIGTERM (w.err)" \
		grep -q "stopping at the end of the step" w.err &&
	touch go &&
	wait $pid &&
	jq -s -e "map(select(.event == \"summary\"))[0] | .step == 2 and .stopped == \"signal (checkpointed)\"" w.json &&
	jq -s -e "map(select(.event == \"checkpoint\") | .step) == [1, 2]" w.json &&
	test "$(readlink ckw/latest)" = step-00000002
'

# Under mpirun a rank's stdout is a pipe or pty that the launcher's daemon
# drains when it gets to it: on a loaded machine a line's write blocks,
# and the stop signal, forwarded to every rank, came during it. It must
# not fail that write (a handler without SA_RESTART made it fail with
# EINTR: the line was lost and gpu-train exited 1 with "write standard
# output: Input/output error"). Here the pipe stays full until the main
# thread sleeps in write(1, ...) (/proc's syscall), then the signal, then
# the pipe is drained: every step's line must be there, and the stop
# must be the checkpointed one.
blocked_in_write() {
	read -r nr fd rest <"/proc/$1/syscall" &&
	test "$nr $fd" = "1 0x1"
}
# (write is syscall 1 on x86_64)
test "$(uname -m)" = x86_64 && test -r /proc/self/syscall && test_set_prereq WRITE_SYSCALL

test_expect_success WRITE_SYSCALL 'SIGUSR1 while a write to stdout blocks: the write goes on, no line lost' '
	rm -f fifo && mkfifo fifo &&
	{ gpu-train $A --steps 1000000 --ckpt-dir ckp >fifo 2>p.err & } &&
	pid=$! &&
	test_when_finished "exec 7<&-; kill \$pid 2>/dev/null || :" &&
	exec 7<fifo &&
	test_wait_for 300 "gpu-train to block writing to the full pipe (/proc/$pid/syscall)" \
		blocked_in_write $pid &&
	kill -USR1 $pid &&
	cat <&7 >p.json &&
	exec 7<&- &&
	wait $pid &&
	test_must_be_empty p.err &&
	s=$(jq -r "select(.event == \"summary\") | .step" p.json) &&
	jq -s -e "[.[] | select(.event == \"step\") | .step] == [range(1; $s + 1)]" p.json &&
	jq -e "select(.event == \"summary\") | .stopped == \"signal (checkpointed)\"" p.json &&
	test "$(readlink ckp/latest)" = "$(printf step-%08d $s)"
'

test_expect_success MPI 'SIGUSR1 to mpirun: every rank stops at the same step, checkpointed' '
	{ mpirun --oversubscribe --bind-to none -np 2 gpu-train $A --zero 1 \
		--steps 1000000 --ckpt-dir ck6 >u.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	wait_step u.json &&
	kill -USR1 $pid &&
	wait $pid &&
	s=$(jq -r "select(.event == \"summary\") | .step" u.json) &&
	test "$(readlink ck6/latest)" = "$(printf step-%08d $s)" &&
	ckpt-merge --check ck6
'

test_expect_success 'SIGINT: stops without a checkpoint, exit 130' '
	{ gpu-train $A --steps 1000000 --ckpt-dir ck7 --ckpt-every 1000000 >i.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	wait_step i.json &&
	kill -INT $pid &&
	{ wait $pid; test $? = 130; } &&
	test ! -e ck7/latest
'

test_expect_success 'a checkpoint of another shape is refused by name' '
	test_expect_code 1 gpu-train --data train.bin --layers 3 --hidden 32 --heads 2 \
		--positions 33 --seq 16 --steps 30 --ckpt-dir ck --resume 2>err &&
	grep "^gpu-train: checkpoint .*step-00000020.*is not the one asked for" err &&
	test_expect_code 1 gpu-train --data train.bin --layers 2 --hidden 64 --heads 2 \
		--positions 33 --seq 16 --init-from ck/step-00000020/model.safetensors 2>err &&
	grep "^gpu-train: checkpoint .ck/step-00000020.: its model (2 layers, hidden 32, .*) is not the one asked for (2, 64," err &&
	mkdir -p lone && cp ck/step-00000020/model.safetensors lone/ &&
	test_expect_code 1 gpu-train --data train.bin --layers 2 --hidden 64 --heads 2 \
		--positions 33 --seq 16 --init-from lone/model.safetensors 2>err &&
	grep "^gpu-train: load tensor .transformer\..*: shape \[.*\], the model.s is" err
'

test_expect_success 'a directory with checkpoints is not trained into afresh, nor past a step it already has, nor mixed with another run' '
	gpu-train $A --steps 4 --ckpt-dir re >/dev/null &&
	test_expect_code 1 gpu-train $A --steps 8 --ckpt-dir re >out 2>err &&
	test_must_be_empty out &&
	grep "^gpu-train: checkpoint directory .re. holds another run.s checkpoints (step-00000004): --resume continues it" err &&
	mkdir re/step-00000006 &&
	test_expect_code 1 gpu-train $A --steps 8 --ckpt-dir re --resume >out 2>err &&
	test_must_be_empty out &&
	grep "^gpu-train: checkpoint directory .re.: step-00000006 (not committed: no COMMIT) is ahead of step 4, where this run starts" err &&
	rmdir re/step-00000006 &&
	gpu-train $A --steps 8 --ckpt-dir re --resume >/dev/null &&
	gpu-train $A --seed 7 --steps 8 --ckpt-every 4 --ckpt-dir other >/dev/null &&
	rm -r re/step-00000008 && cp -R other/step-00000008 re/ &&
	ln -sfn step-00000004 re/latest &&
	test_expect_code 1 gpu-train $A --steps 8 --ckpt-dir re --resume >out 2>err &&
	test_must_be_empty out &&
	grep "^gpu-train: checkpoint directory .re.: step-00000008 is ahead of step 4" err &&
	test "$(readlink re/latest)" = step-00000004 &&
	rm -r re/step-00000008 &&
	gpu-train $A --steps 8 --ckpt-dir re --resume >/dev/null &&
	test -f re/step-00000008/COMMIT
'

# What a kill -9 between the rename that commits step 8 and the swap of
# latest leaves, built without the race: step-00000008 committed, latest
# still on step-00000004. COMMIT's parent ties 8 to 4.
test_expect_success 'killed before latest moved: --resume goes on from the step committed last' '
	gpu-train $A --steps 12 --until 8 --ckpt-every 4 --ckpt-dir ckl >/dev/null &&
	jq -e ".parent.step == 4" ckl/step-00000008/COMMIT &&
	ln -sfn step-00000004 ckl/latest &&
	gpu-train $A --steps 12 --ckpt-dir ckl --resume >l.json 2>err &&
	echo "gpu-train: checkpoint directory '"'"'ckl'"'"': latest named step-00000004, and step-00000008 continues it (a run killed before it moved latest): latest now names step-00000008" >expect &&
	test_cmp expect err &&
	jq -s -e "map(select(.event == \"step\"))[0].step == 9" l.json &&
	test "$(readlink ckl/latest)" = step-00000012 &&
	jq -e ".parent.step == 8" ckl/step-00000012/COMMIT &&
	gpu-train $A --steps 12 >f12.json &&
	losses f12.json | tail -n 4 >f12tail &&
	losses l.json >l &&
	test_cmp f12tail l
'

test_expect_success 'a step of a run forked from the same checkpoint, copied in, is not taken as this run.s' '
	gpu-train $A --steps 8 --until 4 --ckpt-every 2 --ckpt-dir fa >/dev/null &&
	cp -R fa fc &&
	gpu-train $A --steps 8 --until 6 --ckpt-every 2 --ckpt-dir fc --resume --lr 5e-2 >/dev/null &&
	jq -e ".parent.step == 4" fc/step-00000006/COMMIT &&
	cp -R fc/step-00000006 fa/ &&
	test_expect_code 1 gpu-train $A --steps 8 --ckpt-every 2 --ckpt-dir fa --resume >out 2>err &&
	test_must_be_empty out &&
	grep "^gpu-train: checkpoint directory .fa.: step-00000006 is ahead of step 4" err &&
	test "$(readlink fa/latest)" = step-00000004 &&
	mv fc fc2 &&
	rm -r fc2/latest && ln -s step-00000004 fc2/latest &&
	gpu-train $A --steps 8 --ckpt-every 2 --ckpt-dir fc2 --resume >/dev/null 2>err &&
	grep "latest named step-00000004, and step-00000006 continues it" err
'

test_expect_success MPI 'killed before latest moved, 2 ranks with ZeRO-1: every rank resumes from the same step' '
	mpi 2 $A --zero 1 --steps 6 --until 4 --ckpt-every 2 --ckpt-dir ckm >/dev/null &&
	ln -sfn step-00000002 ckm/latest &&
	mpi 2 $A --zero 1 --steps 6 --ckpt-dir ckm --resume >m.json 2>err &&
	grep "^gpu-train: checkpoint directory .ckm.: latest named step-00000002, and step-00000004 continues it" err &&
	test "$(grep -c "latest named" err)" = 1 &&
	mpi 2 $A --zero 1 --steps 6 >m6.json &&
	losses m6.json | tail -n 2 >m6tail &&
	losses m.json >m &&
	test_cmp m6tail m
'

# 200 documents, 29 to a shard: s-00..s-05 of 29 samples, s-06 of 26.
test_expect_success 'shards for the shard-list resumes' '
	mkdir raw &&
	for i in $(seq -w 0 199); do printf "doc %s " $i $i $i $i >raw/$i.txt || return 1; done &&
	data-pack -q -c -o ds/s-%02d.tar --max-count 29 --manifest ds/m.json raw &&
	jq -e "[.shards[].samples] == [29, 29, 29, 29, 29, 29, 26]" ds/m.json &&
	mkdir moved && cp ds/s-*.tar moved/
'

S="$TINY --batch 2 --json"
why="a state resumes on the same shard list, in the same order"

test_expect_success 'a resume on a reordered shard list is refused, naming the first difference' '
	gpu-train --data "ds/s-{00..05}.tar" $S --steps 10 --until 3 --ckpt-dir dl >/dev/null &&
	test_expect_code 1 gpu-train --data "ds/s-{05..00}.tar" $S --steps 10 --until 5 \
		--ckpt-dir dl --resume -q >out 2>err &&
	test_must_be_empty out &&
	echo "gpu-train: resume from '"'"'dl/step-00000003'"'"': dataset state: saved for shard 0 '"'"'s-00.tar'"'"' (29 samples), this list has '"'"'s-05.tar'"'"' (29 samples) there: $why" >expect &&
	test_cmp expect err &&
	test_expect_code 1 gpu-train --data "ds/s-{00,01,02,04,03,05}.tar" $S --steps 10 \
		--ckpt-dir dl --resume -q 2>err &&
	echo "gpu-train: resume from '"'"'dl/step-00000003'"'"': dataset state: saved for shard 3 '"'"'s-03.tar'"'"' (29 samples), this list has '"'"'s-04.tar'"'"' (29 samples) there: $why" >expect &&
	test_cmp expect err &&
	test_expect_code 1 gpu-train --data "ds/s-{00..06}.tar" $S --steps 10 \
		--ckpt-dir dl --resume -q 2>err &&
	echo "gpu-train: resume from '"'"'dl/step-00000003'"'"': dataset state: saved for a list of 6 shards, this list goes on with shard 6 '"'"'s-06.tar'"'"' (26 samples): $why" >expect &&
	test_cmp expect err &&
	test "$(readlink dl/latest)" = step-00000003
'

test_expect_success 'the same shards in another directory resume bit for bit' '
	gpu-train --data "ds/s-{00..05}.tar" $S --steps 10 >lf.json &&
	losses lf.json >lf &&
	gpu-train --data "ds/s-{00..05}.tar" $S --steps 10 --until 3 --ckpt-dir dd >la.json &&
	gpu-train --data "moved/s-{00..05}.tar" $S --steps 10 --ckpt-dir dd --resume >lb.json &&
	{ losses la.json && losses lb.json; } >lab &&
	test_cmp lf lab
'

test_expect_success 'a manifest and a brace pattern of the same shards are one list' '
	gpu-train --data ds/m.json $S --steps 10 >mf.json &&
	losses mf.json >mf &&
	gpu-train --data ds/m.json $S --steps 10 --until 3 --ckpt-dir dn >ma.json &&
	gpu-train --data "moved/s-{00..06}.tar" $S --steps 10 --ckpt-dir dn --resume >mb.json &&
	{ losses ma.json && losses mb.json; } >mab &&
	test_cmp mf mab &&
	jq ".shards |= [.[0], .[1], .[2], .[4], .[3], .[5], .[6]]" ds/m.json >ds/swapped.json &&
	rm -r dn/step-00000010 && ln -sfn step-00000003 dn/latest &&
	test_expect_code 1 gpu-train --data ds/swapped.json $S --steps 10 --ckpt-dir dn --resume 2>err &&
	echo "gpu-train: resume from '"'"'dn/step-00000003'"'"': dataset state: saved for shard 3 '"'"'s-03.tar'"'"' (29 samples), this list has '"'"'s-04.tar'"'"' (29 samples) there: $why" >expect &&
	test_cmp expect err
'

test_expect_success 'like-named shards of another folder, or two folders swapped, are another list' '
	for l in en de; do
		mkdir -p txt/$l &&
		for i in $(seq -w 1 40); do
			printf "$l text sample $i %.0s" $(seq 30) >txt/$l/k$i.txt || return 1
		done &&
		data-pack -q -c -o two/$l/train-%03d.tar --max-count 10 txt/$l || return 1
	done &&
	test $(wc -c <two/en/train-000.tar) = $(wc -c <two/de/train-000.tar) &&
	gpu-train --data "two/en/train-{000..003}.tar" $S --steps 10 --until 3 --ckpt-dir dx >/dev/null &&
	test_expect_code 1 gpu-train --data "two/de/train-{000..003}.tar" $S --steps 10 \
		--ckpt-dir dx --resume -q 2>err &&
	grep "dataset state: saved for shards of the same names and counts whose sizes or contents differ" err &&
	gpu-train --data "two/{de,en}/train-{000..003}.tar" $S --steps 10 --until 3 --ckpt-dir dy >ya.json &&
	test_expect_code 1 gpu-train --data "two/{en,de}/train-{000..003}.tar" $S --steps 10 \
		--ckpt-dir dy --resume -q 2>err &&
	echo "gpu-train: resume from '"'"'dy/step-00000003'"'"': dataset state: saved for shard 0 '"'"'de/train-000.tar'"'"' (10 samples), this list has '"'"'en/train-000.tar'"'"' (10 samples) there: $why" >expect &&
	test_cmp expect err &&
	gpu-train --data "two/{de,en}/train-{000..003}.tar" $S --steps 10 >yf.json &&
	losses yf.json >yf &&
	mkdir -p far/away && cp -r two far/away/ &&
	gpu-train --data "far/away/two/{de,en}/train-{000..003}.tar" $S --steps 10 --ckpt-dir dy --resume >yb.json &&
	{ losses ya.json && losses yb.json; } >yab &&
	test_cmp yf yab
'

# COMMIT rewritten with xxhsum (an XXH3 independent of ours), so that the
# edited trainer.json passes the hash check.
command -v xxhsum >/dev/null 2>&1 && test_set_prereq XXHSUM

test_expect_success XXHSUM 'a state saved before states named their shard list still resumes bit for bit' '
	gpu-train --data "ds/s-{00..05}.tar" $S --steps 10 --until 3 --ckpt-dir dold >oa.json &&
	d=dold/step-00000003 &&
	jq -e ".data[0].shard | .list and .shards == 6 and (.names | length) == 6" $d/trainer.json &&
	jq "del(.data[].shard.list, .data[].shard.shards, .data[].shard.names, .data[].shard.files)" $d/trainer.json >old.json &&
	mv old.json $d/trainer.json &&
	h=$(xxhsum -H3 $d/trainer.json | sed "s/.* = //") &&
	jq ".files[\"trainer.json\"] = {bytes: $(wc -c <$d/trainer.json), xxh3: \"$h\"}" \
		$d/COMMIT >commit && mv commit $d/COMMIT &&
	gpu-train --data "moved/s-{00..05}.tar" $S --steps 10 --ckpt-dir dold --resume >ob.json &&
	{ losses oa.json && losses ob.json; } >oab &&
	test_cmp lf oab
'

test_expect_success MPI 'states of 3 ranks on another shard list: refused on 2 ranks and on 3' '
	mpi 3 --data "ds/s-{00..05}.tar" $S --steps 8 --until 2 --ckpt-dir dw >/dev/null &&
	echo "gpu-train: resume from '"'"'dw/step-00000002'"'"': dataset state: saved for shard 3 '"'"'s-03.tar'"'"' (29 samples), this list has '"'"'s-04.tar'"'"' (29 samples) there: $why" >expect &&
	for n in 2 3; do
		test_expect_code 1 mpi $n --data "moved/s-{00,01,02,04,03,05}.tar" $S --steps 8 \
			--ckpt-dir dw --resume >out 2>err &&
		# every rank meets it: said once, with the count, no abort
		grep "^gpu-train:" err >err1 &&
		sed "s/\$/ ($n of $n ranks)/" expect >expect$n &&
		test_cmp expect$n err1 &&
		! grep -q MPI_ABORT err ||
		return 1
	done &&
	mpi 2 --data "moved/s-{00..05}.tar" $S --steps 8 --ckpt-dir dw --resume >rw.json &&
	jq -r "select(.note) | .note" rw.json >note &&
	echo "data position remapped from 3 ranks to 2" >expect &&
	test_cmp expect note
'

test_expect_success 'a resume names each setting it changes and the schedule it moves' '
	gpu-train $A --steps 20 --until 10 --ckpt-dir chg >/dev/null 2>err0 &&
	test_must_be_empty err0 &&
	jq -e ".settings[\"--steps\"].arg == \"20\" and .settings[\"--seed\"].arg == \"1337\"" \
		chg/latest/trainer.json &&
	gpu-train $A --steps 20 --until 11 --ckpt-dir chg --resume >same.json 2>err1 &&
	test_must_be_empty err1 &&
	gpu-train $A --steps 40 --until 12 --ckpt-dir chg --resume >more.json 2>err2 &&
	grep -Fx "gpu-train: note: resumed with --steps 40 (the checkpoint'"'"'s run: 20)" err2 &&
	# the rate the note states is the one step 12 trains with, and the old
	# one what the 20-step schedule gives step 12
	gpu-train $A --steps 20 --until 12 >twenty.json &&
	new=$(jq -r "select(.event == \"step\" and .step == 12) | .lr" more.json) &&
	old=$(jq -r "select(.event == \"step\" and .step == 12) | .lr" twenty.json) &&
	want=$(python3 -c "import sys; print(\"gpu-train: note: the schedule changed: step 12%ss learning rate is %.4g (the checkpoint%ss run: %.4g)\" % (chr(39), float(sys.argv[1]), chr(39), float(sys.argv[2])))" "$new" "$old") &&
	grep -Fx "$want" err2 &&
	test $(wc -l <err2) = 2
'

test_expect_success 'a resume that changes what the data position counts in is refused, exit 2' '
	test_expect_code 2 gpu-train $A --steps 20 --ckpt-dir chg --resume --seed 5 >out 2>err &&
	test_must_be_empty out &&
	grep -Fx "gpu-train: resume from '"'"'chg/step-00000012'"'"': --seed 5: the checkpoint'"'"'s run has --seed 1337, and a resumed run keeps it (start a new run from its weights with --init-from)" err &&
	test_expect_code 2 gpu-train $A --steps 20 --ckpt-dir chg --resume --shuffle none 2>err &&
	grep "shuffle none: the checkpoint.s run has --shuffle on" err &&
	test "$(readlink chg/latest)" = step-00000012 &&
	gpu-train $A --steps 20 --until 13 --init-from chg --seed 5 >/dev/null
'

test_expect_success MPI 'two ranks refuse the same setting together: said once, no abort' '
	test_expect_code 2 mpi 2 $A --steps 20 --ckpt-dir chg --resume --seed 6 >out 2>err &&
	test $(grep -c "seed 6: the checkpoint.s run has --seed 1337" err) = 1 &&
	! grep -q MPI_ABORT err
'

test_expect_success 'a checkpoint already at the end: said plainly, and the summary says so' '
	gpu-train $A --steps 3 --ckpt-dir atend >/dev/null &&
	gpu-train $A --steps 3 --ckpt-dir atend --resume >ae.json 2>ae.err &&
	grep -Fx "gpu-train: note: nothing to train: the checkpoint is at step 3, and this run ends at step 3 (--steps)" ae.err &&
	jq -e "select(.event == \"summary\") | .steps == 0 and .step == 3 and .stopped == \"already done\"" ae.json &&
	gpu-train $A --steps 6 --until 2 --ckpt-dir atend --resume >/dev/null 2>ae2.err &&
	grep -Fx "gpu-train: note: nothing to train: the checkpoint is at step 3, and this run ends at step 2 (--until)" ae2.err
'

test_expect_success '--until without --ckpt-dir: a warning that nothing is kept' '
	gpu-train $A --steps 5 --until 2 >u.json 2>u.err &&
	grep -Fx "gpu-train: warning: --until 2 without --ckpt-dir: the run stops at step 2 of 5 and keeps no checkpoint to resume from" u.err &&
	test "$(losses u.json | wc -l)" = 2 &&
	gpu-train $A --steps 5 --until 2 --ckpt-dir uk >/dev/null 2>u2.err &&
	test_must_be_empty u2.err
'

test_expect_success 'token files: a resume on other files is refused, the same tokens under another name are not' '
	python3 -c "import array; d = open(\"train.bin\", \"rb\").read(); t = array.array(\"H\", d[1024:]); t.reverse(); open(\"other.bin\", \"wb\").write(d[:1024] + t.tobytes())" &&
	cp train.bin same.bin &&
	gpu-train $A --steps 6 --until 3 --ckpt-dir tf >/dev/null &&
	jq -e ".data[0].id | test(\"^[0-9a-f]{16}$\")" tf/latest/trainer.json &&
	A2=$(echo "$A" | sed "s/train.bin/other.bin/") &&
	test_expect_code 1 gpu-train $A2 --steps 6 --ckpt-dir tf --resume >out 2>err &&
	test_must_be_empty out &&
	grep -F "resume from '"'"'tf/step-00000003'"'"': data state: saved for other token files (1 file, 60000 tokens; this run reads 1, 60000 tokens, of other contents or in another order)" err &&
	A3=$(echo "$A" | sed "s/train.bin/same.bin/") &&
	gpu-train $A3 --steps 6 --ckpt-dir tf --resume >r.json &&
	gpu-train $A --steps 6 >full6.json &&
	losses full6.json | tail -n 3 >want6 && losses r.json >got6 && test_cmp want6 got6
'

test_expect_success 'a latest that is a copied directory is refused before step 1, with the repair' '
	gpu-train $A --steps 2 --ckpt-dir lc >/dev/null &&
	cp -rL lc lc2 &&
	test_expect_code 1 gpu-train $A --steps 4 --ckpt-dir lc2 --resume >out 2>err &&
	test_must_be_empty out &&
	grep -Fx "gpu-train: checkpoint directory '"'"'lc2'"'"': '"'"'latest'"'"' is a directory, not a symbolic link (a copy made with cp -rL or rsync -L?), and a commit replaces it: remove it and link the step it copies (rm -r '"'"'lc2/latest'"'"' && ln -s step-NNNNNNNN '"'"'lc2/latest'"'"')" err &&
	rm -r lc2/latest && ln -s step-00000002 lc2/latest &&
	gpu-train $A --steps 4 --ckpt-dir lc2 --resume >r.json &&
	test "$(readlink lc2/latest)" = step-00000004
'

test_expect_success 'a step directory moved away and linked back: refused for what it is' '
	gpu-train $A --steps 2 --ckpt-dir sl >/dev/null &&
	mkdir -p moved && mv sl/step-00000002 moved/ &&
	ln -s "$PWD/moved/step-00000002" sl/step-00000002 &&
	test_expect_code 1 gpu-train $A --steps 4 --ckpt-dir sl --resume >out 2>err &&
	grep -F "gpu-train: checkpoint directory '"'"'sl'"'"': step-00000002 is a symbolic link (to '"'"'$PWD/moved/step-00000002'"'"'), and step directories are read and written only as directories of their root" err &&
	! grep "no COMMIT" err &&
	rm sl/step-00000002 && mv moved/step-00000002 sl/ &&
	gpu-train $A --steps 4 --ckpt-dir sl --resume >/dev/null
'

test_expect_success MPI '--compress resumes bit for bit: each rank'"'"'s error feedback is checkpointed (ZeRO 0 and 1)' '
	for z in 0 1; do
		C="$A --steps 8 --compress int8 --zero $z" &&
		rm -rf cf &&
		mpi 2 $C >full.json &&
		mpi 2 $C --until 4 --ckpt-dir cf >a.json &&
		test -f cf/latest/feedback-rank-00001-of-00002.safetensors &&
		ckpt-merge --check cf/latest &&
		mpi 2 $C --ckpt-dir cf --resume >b.json 2>b.err &&
		! grep "error feedback" b.err &&
		losses full.json >f && { losses a.json && losses b.json; } >r &&
		test_cmp f r || return 1
	done &&
	mpi 2 $A --steps 8 --until 4 --ckpt-dir cn >/dev/null &&
	mpi 2 $A --steps 8 --compress int8 --ckpt-dir cn --resume >/dev/null 2>n.err &&
	grep "^gpu-train: note: compressed communication starts from zero error feedback" n.err
'

test_expect_success 'the start says what a run continues from; a terminal hears when nothing is kept' '
	gpu-train $A --steps 4 --until 2 --ckpt-dir from >/dev/null &&
	gpu-train $A --steps 4 --ckpt-dir from --resume >fr.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .from == \"from/step-00000002\" and .from_step == 2" fr.json &&
	P="--data train.bin $TINY --batch 4" &&
	gpu-train $P --steps 4 --until 3 --ckpt-dir from2 >/dev/null &&
	gpu-train $P --steps 4 --ckpt-dir from2 --resume >fr.txt &&
	grep -Fx "resumed from step 3 of from2/step-00000003" fr.txt &&
	gpu-train $A --steps 1 >plain.json 2>plain.err &&
	test_must_be_empty plain.err &&
	script -qec "gpu-train $A --steps 1 -q" /dev/null >tty.out &&
	grep -F "gpu-train: note: no --ckpt-dir: this run keeps no checkpoint, and its model is gone at exit" tty.out
'

test_done
