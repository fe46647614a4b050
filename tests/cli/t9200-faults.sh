#!/bin/sh
test_description='faults on a 2-rank job: a dead rank, a stopped rank, a full disk,
a corrupt sample

kill -9 of one rank of mpirun -np 2 gpu-train ends the whole job within
a bound, non-zero, with a message naming the lost rank, and --resume
continues from the last committed checkpoint with the losses of an
uninterrupted run, bit for bit; killed inside a ZeRO-3 parameter gather, the
job ends within the watchdog bound with the dead rank named once. A rank stopped with SIGSTOP makes the
collective watchdog (--timeout) end gpu-train and allreduce-bench with a
message naming the operation, the stopped rank and its host instead of
hanging. A token file truncated under
the job is named, exit 1, not a bus error. A disk that fills during
a checkpoint leaves the previous one and latest intact, and stops the run
or, with --ckpt-error continue, warns. A corrupt sample stops the run
naming shard and sample, or with --bad-sample skip is skipped and counted.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

if ! test_have_prereq MPI; then
	skip_all="no mpirun"
	test_done
fi

A="--data train.bin $TINY --batch 4 --json"
# Marks this test's ranks, so that other jobs on the machine are never hit.
TAG="t9200-$$"
# More mpirun options for start_job
MCA=
# The host a stall message names (MPI_Get_processor_name is gethostname)
HOST=$(hostname)

# start_job OUT ERR PROG ARGS...: mpirun -np $NP (default 2) in the
# background, $job its pid. OUT and ERR are removed first: the tests wait
# for a line in OUT, and the job's shell truncates it only once it runs,
# which on a loaded machine comes after the first look for the line (a
# file an earlier test left there then showed a step at once).
NP=2
start_job() {
	out=$1 err=$2
	shift 2
	rm -f "$out" "$err" &&
	{ FAULT_TAG=$TAG timeout 300 mpirun --oversubscribe --bind-to none $MCA -np $NP "$@" \
		>"$out" 2>"$err" & } &&
	job=$!
}

# rank_pid PROG R: the pid of rank R of this test's job, empty if none yet
rank_pid() {
	for p in $(pgrep -x "$1"); do
		tr "\0" "\n" <"/proc/$p/environ" 2>/dev/null >env.$p || continue
		if grep -qx "FAULT_TAG=$TAG" env.$p &&
		   grep -qx "OMPI_COMM_WORLD_RANK=$2" env.$p; then
			rm -f env.$p
			echo "$p"
			return 0
		fi
		rm -f env.$p
	done
}

# wait_job LIMIT: wait for $job at most LIMIT seconds; $rc its status, $took seconds
wait_job() {
	t0=$(date +%s.%N)
	i=0
	while kill -0 $job 2>/dev/null && test $i -lt $(($1 * 20)); do
		sleep 0.05
		i=$((i + 1))
	done
	if kill -0 $job 2>/dev/null; then
		kill $job
		wait $job
		echo "job still running after $1 s" >&2
		return 1
	fi
	wait $job
	rc=$?
	took=$(python3 -c "import sys, time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t0")
	echo "ended ${took} s after the fault, status $rc" >&2
}

# Events the tests wait for (test_wait_for, bounded for a loaded machine).
# stepped LOG: LOG shows a step
stepped() {
	grep -q "\"event\":\"step\"" "$1" 2>/dev/null
}
# ckpt_past_10: ck/latest names a checkpoint after step 10
ckpt_past_10() {
	test -e ck/latest && test "$(readlink ck/latest)" != step-00000010
}
# staged DIR STEP: DIR holds STEP's staging directory; $st its name
staged() {
	st=$(ls -d "$1"/.step-$2.tmp-* 2>/dev/null) && test -n "$st"
}

test_expect_success 'data and an uninterrupted 2-rank run' '
	train_data &&
	mpi 2 $A --steps 300 >full.json &&
	test "$(losses full.json | wc -l)" = 300
'

test_expect_success 'kill -9 of rank 1: the job ends in bounded time, non-zero, naming rank 1' '
	start_job k.json k.err gpu-train $A --steps 300 --ckpt-every 10 --ckpt-dir ck &&
	test_when_finished "kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "a checkpoint past step 10 in ck/latest" ckpt_past_10 &&
	victim=$(rank_pid gpu-train 1) &&
	test -n "$victim" &&
	kill -9 $victim &&
	wait_job 30 &&
	test $rc -ne 0 &&
	awk "BEGIN { exit !($took < 10) }" &&
	grep "rank 1 .*signal 9" k.err &&
	test "$(jq -s "map(select(.event == \"step\")) | last | .step" k.json)" -lt 300
'

test_expect_success 'kill -9: --resume continues from the last commit with the same losses' '
	last=$(readlink ck/latest) &&
	at=$(jq .step ck/latest/trainer.json) &&
	test -f "ck/$last/COMMIT" &&
	ckpt-merge --check ck/latest &&
	mpi 2 $A --steps 300 --ckpt-every 10 --ckpt-dir ck --resume >r.json &&
	test "$(jq -s "map(select(.event == \"step\")) | first | .step" r.json)" = $((at + 1)) &&
	jq -r "select(.event == \"step\" and .step > $at) | .loss" full.json >want &&
	losses r.json >got &&
	test_cmp want got
'

# ZeRO-3 gathers a block's parameters before its forward and again before
# its backward, and the embeddings and the final norm once a step: with 2
# blocks (reshard after forward, the last block kept) 5 gathers a step,
# and no other allgather without evaluation, checkpoint or --sample. The
# hook stops rank 1 once its 8th allgather has started (step 2's fourth
# gather: rank 0 has logged step 1 and no other); the test waits for that
# state and kills it. The launcher ends the job, well within --timeout
# (the watchdog never has to), and the dead rank is named once, by it;
# rank 0 notes the SIGTERM the launcher ends it with, and nothing else.
# stopped_in_gather: rank 1 of this test's job is stopped (state T),
# $victim its pid; or the job has ended (it failed: no use waiting)
stopped_in_gather() {
	kill -0 $job 2>/dev/null || return 0
	victim=$(rank_pid gpu-train 1) &&
	test -n "$victim" &&
	grep -q "^State:[[:space:]]*T" /proc/$victim/status 2>/dev/null
}

test_expect_success 'kill -9 of a rank inside a ZeRO-3 parameter gather: the job ends within the watchdog bound, rank 1 named once' '
	start_job z3.json z3.err env GK_TEST_COMM_FAULT=stop:1:allgather:8 \
		gpu-train $A --steps 100000 --zero 3 --timeout 15 &&
	test_when_finished "kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "rank 1 stopped in its 8th allgather" stopped_in_gather &&
	{ kill -0 $job || { cat z3.err; false; }; } &&
	test_when_finished "kill -9 $victim 2>/dev/null || :" &&
	kill -9 $victim &&
	wait_job 60 &&
	test $rc -ne 0 &&
	awk "BEGIN { exit !($took < 15) }" &&
	jq -s -e "[.[] | select(.event == \"step\") | .step] == [1] and
		(map(select(.event == \"step\"))[0].param_gathers == 5)" z3.json &&
	grep "rank 1" z3.err >named &&
	test $(wc -l <named) = 1 &&
	grep "rank 1 .*signal 9" named &&
	! grep -E "no progress|does not answer|MPI_ABORT" z3.err &&
	# gpu-train itself says at most that a SIGTERM came (mpirun ends the job)
	! grep "^gpu-train:" z3.err | grep -v -e "^gpu-train: stopping at the end of the step; " \
		-e "^gpu-train: SIGTERM from mpirun, which is ending the job: "
'

test_expect_success '--timeout: a stopped rank ends gpu-train naming the collective' '
	start_job s.json s.err gpu-train $A --steps 100000 --timeout 2 &&
	test_when_finished "kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "a step in s.json" stepped s.json &&
	victim=$(rank_pid gpu-train 1) &&
	test -n "$victim" &&
	test_when_finished "kill -CONT $victim 2>/dev/null; kill -9 $victim 2>/dev/null || :" &&
	kill -STOP $victim &&
	wait_job 60 &&
	test $rc -eq 1 &&
	# the step waits in the gradient allreduce or in the barrier before the loss allreduce
	grep -E "^gpu-train: (allreduce|barrier): no progress for 2 s: rank 1 \(on $HOST\) does not answer \(stopped, or its network is down\)$" s.err &&
	awk "BEGIN { exit !($took < 30) }"
'

# The token file is mapped: truncated under the job, the next read past
# its new end is SIGBUS, which the guard turns into a message and exit 1.
# truncated_under_job NAME: a 2-rank job on NAME.bin (mpirun options in
# $MCA), NAME.bin emptied after its first step.
truncated_under_job() {
	cp train.bin $1.bin &&
	start_job $1.json $1.err gpu-train --data $1.bin $TINY --batch 4 --json --steps 100000 &&
	test_when_finished "kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "a step in $1.json" stepped $1.json &&
	truncate -s 0 $1.bin &&
	wait_job 60 &&
	test $rc -ne 0 &&
	grep "^gpu-train: .$1.bin. changed or failed while it was being read (truncated or rewritten in place, or an I\/O error)$" $1.err &&
	! grep -i "bus error" $1.err
}

test_expect_success 'a token file truncated while the job reads it: named, exit 1, no bus error' '
	truncated_under_job shrink
'

# Open MPI's UCX transport (the usual one on InfiniBand; here over shared
# memory) installs a SIGBUS handler of its own in MPI_Init, over the guard.
UCX="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any"
if timeout 60 mpirun $UCX --oversubscribe --bind-to none -np 2 gpu-train $A --steps 1 \
	>/dev/null 2>&1; then
	test_set_prereq UCX
fi

test_expect_success UCX 'the same under UCX: named, exit 1, no bus error' '
	MCA=$UCX &&
	test_when_finished "MCA=" &&
	truncated_under_job shrinku
'

# Rank 0 writes the whole model, the others nothing: its write alone is
# slowed (GK_TEST_CKPT_DELAY_MS=WRITE:COMMIT), past --timeout (more than
# twice it), and its commit not at all.
# --timeout 2, not 1: the ranks agree on the write's progress every
# 100 ms, and a loaded machine has delayed one of those by over a second
# (the watchdog then rightly names the rank as not answering).
test_expect_success '--timeout: a checkpoint write longer than it is not a stopped rank' '
	timeout 300 mpirun --bind-to none -np 1 -x GK_TEST_CKPT_DELAY_MS=4500:0 \
		gpu-train $A --steps 2 --timeout 2 --ckpt-dir slow : \
		-np 1 gpu-train $A --steps 2 --timeout 2 --ckpt-dir slow >w.json 2>w.err &&
	test_must_be_empty w.err &&
	test "$(readlink slow/latest)" = step-00000002 &&
	ckpt-merge --check slow/latest
'

# Then rank 0 alone commits it (COMMIT hashes every rank's files): a
# commit slowed past --timeout (its write not) while the other rank goes
# on to step 4's checkpoint, whose collectives wait for rank 0, is not a
# stopped rank either. Each checkpoint's event comes
# once, in order.
test_expect_success '--timeout: a commit longer than it is not a stopped rank' '
	timeout 300 mpirun --bind-to none -np 1 -x GK_TEST_CKPT_DELAY_MS=0:4500 \
		gpu-train $A --steps 4 --ckpt-every 2 --timeout 2 --ckpt-dir slowc : \
		-np 1 gpu-train $A --steps 4 --ckpt-every 2 --timeout 2 --ckpt-dir slowc \
		>c.json 2>c.err &&
	test_must_be_empty c.err &&
	jq -s -e "[.[] | select(.event == \"checkpoint\") | .step] == [2, 4]" c.json &&
	test "$(readlink slowc/latest)" = step-00000004 &&
	ckpt-merge --check slowc/step-00000002 &&
	ckpt-merge --check slowc/latest
'

# A commit that fails: a directory dropped into step 2's staging
# directory, whose commit rank 0 holds until the directory is there
# (GK_TEST_CKPT_COMMIT_WAIT; hashing refuses anything but regular files).
# Every rank learns it from the step's reduction: --ckpt-error continue
# warns once and trains on; stop ends the job with one message, the
# failing rank's, and no MPI_ABORT.
bad_commit() {
	rm -rf bad bad.go &&
	{ timeout 300 mpirun --bind-to none -np 1 -x GK_TEST_CKPT_COMMIT_WAIT=bad.go \
		gpu-train $A --steps 4 --ckpt-every 2 --ckpt-dir bad --ckpt-error $1 : \
		-np 1 gpu-train $A --steps 4 --ckpt-every 2 --ckpt-dir bad --ckpt-error $1 \
		>bad-$1.json 2>bad-$1.err & } &&
	job=$! &&
	test_when_finished "touch bad.go; kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "the staging directory of step 2 in bad/" staged bad 00000002 &&
	mkdir "$st/not-a-file" &&
	touch bad.go &&
	{ wait $job; rc=$?; } &&
	cat bad-$1.err
}

test_expect_success 'a commit that fails: --ckpt-error continue warns once and trains on' '
	bad_commit continue &&
	test $rc = 0 &&
	grep "^gpu-train: warning: checkpoint step 2 not written, training goes on: read .bad/\.step-00000002\.tmp-.*/not-a-file.: not a regular file$" bad-continue.err &&
	test $(grep -c "^gpu-train:" bad-continue.err) = 1 &&
	jq -s -e "[.[] | select(.event == \"checkpoint\") | .step] == [4]" bad-continue.json &&
	test "$(readlink bad/latest)" = step-00000004
'

test_expect_success 'a commit that fails: --ckpt-error stop exits 1, said once' '
	bad_commit stop &&
	test $rc = 1 &&
	grep "^gpu-train: read .bad/\.step-00000002\.tmp-.*/not-a-file.: not a regular file (1 of 2 ranks)$" bad-stop.err &&
	test $(grep -c "^gpu-train:" bad-stop.err) = 1 &&
	! grep MPI_ABORT bad-stop.err &&
	! test -e bad/latest
'

# GK_TEST_CKPT_CHECK_DELAY_MS slows rank 0's check of the checkpoint it
# resumes from, which the other ranks wait for.
test_expect_success '--timeout: checking the checkpoint resumed longer than it is not a stopped rank' '
	timeout 300 mpirun --bind-to none -np 1 -x GK_TEST_CKPT_CHECK_DELAY_MS=4500 \
		gpu-train $A --steps 3 --timeout 2 --ckpt-dir slow --resume : \
		-np 1 gpu-train $A --steps 3 --timeout 2 --ckpt-dir slow --resume >r.json 2>r.err &&
	# the notes of a resume with another --steps, and nothing else
	! grep -v "^gpu-train: note: " r.err &&
	test "$(readlink slow/latest)" = step-00000003
'

# Each call queued behind a stalled one (a step's gradient buckets, ZeRO-1's
# reduce per owner, the failure's own agreement) used to wait out the
# timeout again: dozens of 4K buckets took minutes. Once one wait times
# out every later one fails at once; 20 s is far below the old total and
# far above timeout + 1 s on a loaded machine.
test_expect_success '--timeout bounds the job, not each queued call (3 ranks, ZeRO-1, 4K buckets)' '
	NP=3 &&
	test_when_finished "NP=2" &&
	start_job zero1.json zero1.err gpu-train $A --steps 100000 --zero 1 --bucket 4K --timeout 2 &&
	test_when_finished "kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "a step in zero1.json" stepped zero1.json &&
	victim=$(rank_pid gpu-train 1) && test -n "$victim" &&
	test_when_finished "kill -CONT $victim 2>/dev/null; kill -9 $victim 2>/dev/null || :" &&
	kill -STOP $victim &&
	wait_job 120 &&
	test $rc -ne 0 &&
	grep "^gpu-train: [a-z-]*: no progress for 2 s: rank 1 (on $HOST) does not answer (stopped, or its network is down)$" zero1.err &&
	! grep "rank [02] (on" zero1.err &&
	awk -v t="$took" "BEGIN { exit !(t < 20) }"
'

# No --timeout covers MPI_Init: rank 1 is stopped once rank 0 has printed
# its header, which comes after the ranks agreed on the options (a
# collective), so past MPI_Init on both. Rank 0's stdout is made line
# buffered (stdbuf's preload, which the sanitizers' runtime must tolerate)
# so that the header is in b.out when it is printed.
test_expect_success '--timeout: a stopped rank ends allreduce-bench naming the collective' '
	start_job b.out b.err env ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" \
		stdbuf -oL allreduce-bench -b 64K -e 64K -n 10000000 -w 0 -c 0 --timeout 1 &&
	test_when_finished "kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "the header of rank 0 in b.out" grep -q "^# allreduce-bench" b.out &&
	victim=$(rank_pid allreduce-bench 1) && test -n "$victim" &&
	test_when_finished "kill -CONT $victim 2>/dev/null; kill -9 $victim 2>/dev/null || :" &&
	kill -STOP $victim &&
	wait_job 60 &&
	test $rc -eq 1 &&
	grep "^allreduce-bench: allreduce: no progress for 1 s: rank 1 (on $HOST) does not answer (stopped, or its network is down)$" b.err
'

# In a ring every rank waits on its left neighbour: with rank 1 of 3
# stopped, rank 0 waits on rank 2, which is alive (and itself waits on
# rank 1). The message must name the rank that stopped, not the peer of
# the exchange that stalled.
test_expect_success '--timeout: 3 ranks on a ring, rank 1 stopped: rank 0 names rank 1, not its neighbour' '
	NP=3 &&
	test_when_finished "NP=2" &&
	start_job r3.out r3.err allreduce-bench --algo ring -b 1M -e 1M -n 10000000 -w 0 -c 0 \
		--timeout 1 &&
	test_when_finished "kill \$job 2>/dev/null || :" &&
	test_wait_for 300 "the header of rank 0 in r3.out" grep -q "^# Algorithm: ring" r3.out &&
	victim=$(rank_pid allreduce-bench 1) && test -n "$victim" &&
	test_when_finished "kill -CONT $victim 2>/dev/null; kill -9 $victim 2>/dev/null || :" &&
	kill -STOP $victim &&
	wait_job 60 &&
	test $rc -eq 1 &&
	grep "^allreduce-bench: allreduce: no progress for 1 s: rank 1 (on $HOST) does not answer (stopped, or its network is down)$" r3.err &&
	! grep "rank [02] (on" r3.err
'

# A small tmpfs of our own (a private mount namespace): full after one checkpoint.
if unshare -rm sh -c "mkdir -p /tmp && mount -t tmpfs -o size=4k tmpfs /tmp" 2>/dev/null; then
	test_set_prereq TMPFS
fi

# in_small_fs DIR CMD: run CMD with a 700 KiB tmpfs on DIR (one tiny checkpoint is 456 KiB)
in_small_fs() {
	mkdir -p "$1" &&
	unshare -rm sh -c "mount -t tmpfs -o size=700k tmpfs '$1' && $2"
}

test_expect_success TMPFS 'disk full during a checkpoint: --ckpt-error stop (default) exits 1, latest intact' '
	mpi 2 $A --steps 12 >s12.json &&
	losses s12.json >s12 &&
	in_small_fs full "
		timeout 300 mpirun --bind-to none -np 2 gpu-train $A --steps 12 --ckpt-every 4 \
			--ckpt-dir full >f1.json 2>f1.err; echo \$? >f1.rc;
		ls -A full >f1.ls; readlink full/latest >f1.latest;
		ckpt-merge --check full/latest >f1.check 2>&1; echo \$? >>f1.check
		timeout 300 mpirun --bind-to none -np 2 gpu-train $A --steps 12 --ckpt-every 4 \
			--ckpt-dir full --resume --ckpt-error continue >f2.json 2>f2.err; echo \$? >f2.rc;
		ls -A full >f2.ls" &&
	test "$(cat f1.rc)" = 1 &&
	grep "^gpu-train: write .full/\.step-00000008\.tmp-.*: No space left on device (1 of 2 ranks)$" f1.err &&
	test $(grep -c "^gpu-train:" f1.err) = 1 &&
	! grep MPI_ABORT f1.err &&
	printf ".lock\nlatest\nstep-00000004\n" >want.ls &&
	test_cmp want.ls f1.ls &&
	test "$(cat f1.latest)" = step-00000004 &&
	test "$(tail -n 1 f1.check)" = 0 &&
	test "$(jq -s "map(select(.event == \"step\")) | last | .step" f1.json)" -lt 12
'

test_expect_success TMPFS 'disk full: --ckpt-error continue warns, trains on with the same losses, and exits 1 for its lost last checkpoint' '
	test "$(cat f2.rc)" = 1 &&
	grep "^gpu-train: the last checkpoint (step 12) was not written: the model trained since the one before is lost$" f2.err &&
	grep -c "^gpu-train: warning: checkpoint step [0-9]* not written, training goes on: .*No space left on device$" f2.err >nwarn &&
	echo 2 >want.n &&
	test_cmp want.n nwarn &&
	test_cmp want.ls f2.ls &&
	losses f2.json >got12 &&
	tail -n 8 s12 >want12 &&
	test_cmp want12 got12
'

# A tmpfs with no inode left after step 4: not even the next staging
# directory can be created (ENOSPC from mkdir, as on a full ext4).
test_expect_success TMPFS 'no room for the staging directory: continue warns and trains on, stop says it once' '
	mkdir -p noino &&
	unshare -rm sh -c "
		mount -t tmpfs -o size=10m tmpfs noino &&
		timeout 300 mpirun --bind-to none -np 2 gpu-train $A --steps 4 --ckpt-dir noino >/dev/null &&
		mount -o remount,nr_inodes=\$((\$(stat -f -c \"%c - %d\" noino))) tmpfs noino &&
		{ timeout 300 mpirun --bind-to none -np 2 gpu-train $A --steps 12 --ckpt-every 4 \
			--ckpt-dir noino --resume --ckpt-error continue >i1.json 2>i1.err; echo \$? >i1.rc; } &&
		{ timeout 300 mpirun --bind-to none -np 2 gpu-train $A --steps 12 --ckpt-every 4 \
			--ckpt-dir noino --resume >i2.json 2>i2.err; echo \$? >i2.rc; } &&
		ls -A noino >i.ls" &&
	printf ".lock\nlatest\nstep-00000004\n" >want.ls &&
	test_cmp want.ls i.ls &&
	test "$(cat i1.rc)" = 1 &&
	test "$(grep -c "^gpu-train: warning: checkpoint step \(8\|12\) not written, training goes on: create directory .noino/\.step-000000[0-9]*\.tmp-.*: No space left on device$" i1.err)" = 2 &&
	grep "^gpu-train: the last checkpoint (step 12) was not written" i1.err &&
	test "$(losses i1.json | wc -l)" = 8 &&
	test "$(cat i2.rc)" = 1 &&
	grep "^gpu-train: " i2.err | grep -v "^gpu-train: note: " >said &&
	test "$(wc -l <said)" = 1 &&
	grep "^gpu-train: create directory .noino/\.step-00000008\.tmp-.*: No space left on device$" said &&
	! grep MPI_ABORT i2.err
'

# The corpus is made here, not copied from the sources: which step meets
# the bad sample follows from the samples' names and sizes, and a new
# source file once moved it past the run's 400 steps.
test_expect_success 'shards with a corrupt sample in the middle of the epoch' '
	mkdir corpus &&
	for n in brace cli dtype err hash hostlist io json metrics parse progress rank; do
		awk -v n=$n "BEGIN { for (i = 0; i < 300; i++) printf \"%s line %d of the corpus\\n\", n, i }" \
			>corpus/$n.txt || return 1
	done &&
	printf "this is not an npy array" >corpus/m-bad.npy &&
	data-pack -q -c -o sh-%02d.tar --max-count 4 corpus/ &&
	tar -tf sh-02.tar >members &&
	grep -x m-bad.npy members
'

B="--data sh-{00..03}.tar $TINY --batch 4 --json --steps 400"

test_expect_success '--bad-sample stop (default): exit 1 naming the shard and sample' '
	test_expect_code 1 mpi 2 $B >c1.json 2>c1.err &&
	grep "^gpu-train: shard .sh-02\.tar. sample .m-bad.: not a \.npy file (no \\\\x93NUMPY magic)$" c1.err &&
	losses c1.json >c1 &&
	test "$(wc -l <c1)" -gt 10 &&
	test "$(wc -l <c1)" -lt 400
'

test_expect_success '--bad-sample skip: the run goes on, the skip counted in steps and summary' '
	mpi 2 $B --bad-sample skip >c2.json 2>c2.err &&
	jq -s -e "map(select(.event == \"summary\"))[0] | .bad_samples == 1 and .step == 400" c2.json &&
	jq -s -e "map(select(.event == \"step\")) | (.[0].bad_samples == 0) and (last.bad_samples == 1)" c2.json &&
	losses c2.json >c2 &&
	head -n "$(wc -l <c1)" c2 >c2head &&
	test_cmp c1 c2head
'

test_expect_success '--bad-sample skip on shards with no usable sample: exit 1 after an epoch, no endless loop' '
	mkdir nogood nogood-shards &&
	printf hello >nogood/a.npy && printf hello >nogood/b.npy &&
	data-pack -q -c -o nogood-shards/s-%02d.tar nogood &&
	test_expect_code 1 timeout 60 gpu-train --data nogood-shards/s-00.tar $TINY --batch 2 \
		--steps 2 --bad-sample skip >out 2>err &&
	grep "^gpu-train: data: every sample of this rank.s part of epoch 1 was skipped as unusable" err
'

test_expect_success '--timeout: bad values are usage errors' '
	test_expect_code 2 gpu-train $A --steps 1 --timeout -1 2>e1 &&
	grep "^gpu-train: .*--timeout" e1 &&
	test_expect_code 2 allreduce-bench --timeout abc 2>e2 &&
	grep "^allreduce-bench: .*--timeout" e2 &&
	test_expect_code 2 gpu-train $A --steps 1 --ckpt-error maybe 2>e3 &&
	grep "^gpu-train: --ckpt-error .maybe.: not one of stop continue$" e3 &&
	test_expect_code 2 gpu-train $A --steps 1 --bad-sample maybe 2>e4 &&
	grep "^gpu-train: --bad-sample .maybe.: not one of stop skip$" e4
'

test_done
