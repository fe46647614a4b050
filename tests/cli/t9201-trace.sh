#!/bin/sh
test_description='the flight recorder on real hangs: a stopped rank, a skipped
collective, a killed rank

Three ranks of gpu-train under mpirun, with the collective watchdog at 2 s
and --trace-dir. A test hook (GK_TEST_COMM_FAULT=ACTION:RANK:OP:N) makes
rank 1 stop itself (SIGSTOP) once its N-th allreduce has started, skip its
N-th allreduce as if the trainer had not called it, or die (SIGKILL) in
its N-th allgather (ZeRO-1 gathers the parameters every step). Each job
ends within the watchdog bound; every rank that can leaves a dump, and
gpu-train --trace-report names rank 1 and the collective, whose number is
read independently from rank 0'"'"'s dump (the N-th allreduce or allgather
there: every rank calls the same ones). A rank that was to report a
stall and died before it could leaves the message to the next survivor.
SIGUSR2 dumps a running job without stopping it.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

if ! test_have_prereq MPI; then
	skip_all="no mpirun"
	test_done
fi

A="--data train.bin $TINY --batch 4 --json --steps 100000 --timeout 2"
TAG="t9201-$$"
HOST=$(hostname)

# hang NAME FAULT ARGS...: 3 ranks of gpu-train with the hook, dumps in NAME/;
# $rc its status, $took its seconds
hang() {
	name=$1 fault=$2
	shift 2
	t0=$(date +%s)
	FAULT_TAG=$TAG timeout 120 mpirun --oversubscribe --bind-to none -np 3 \
		-x GK_TEST_COMM_FAULT=$fault gpu-train $A --trace-dir $name "$@" \
		>$name.json 2>$name.err
	rc=$?
	took=$(($(date +%s) - t0))
	echo "ended after $took s, status $rc" >&2
	kill_tagged
}

# kill_tagged: a stopped rank the launcher did not end
kill_tagged() {
	for p in $(pgrep -x gpu-train); do
		# (a rank that exited meanwhile has no environ)
		if { tr "\0" "\n" <"/proc/$p/environ"; } 2>/dev/null | grep -qx "FAULT_TAG=$TAG"; then
			kill -CONT $p 2>/dev/null
			kill -9 $p 2>/dev/null
		fi
	done
	:
}

# nth_seq DUMP OP N: the sequence number of the N-th OP in DUMP
nth_seq() {
	jq -s -r "map(select(.op == \"$2\")) | .[$3 - 1].seq" "$1"
}

test_expect_success 'data' '
	train_data
'

# Said once for the job: by rank 0, the lowest of the ranks that answered
# each other's probes (rank 2 said it too before).
test_expect_success 'a rank stopped in an allreduce: the job ends, rank 1 and the allreduce named' '
	hang stop stop:1:allreduce:30 --bucket 8K &&
	test $rc -eq 1 &&
	test $took -lt 30 &&
	grep "^gpu-train: " stop.err >said &&
	echo "gpu-train: allreduce: no progress for 2 s: rank 1 (on $HOST) does not answer (stopped, or its network is down)" >want &&
	test_cmp want said &&
	test -f stop/trace-c0-r00000.jsonl &&
	test -f stop/trace-c0-r00002.jsonl &&
	s=$(nth_seq stop/trace-c0-r00000.jsonl allreduce 30) &&
	test -n "$s" && test "$s" != null &&
	jq -s -e "map(select(.seq == $s)) | length == 1 and .[0].state == \"failed\"" \
		stop/trace-c0-r00000.jsonl &&
	gpu-train --trace-report stop >stop.report &&
	cat stop.report &&
	grep -E "^rank 1 \(on $HOST\) (left no dump and )?did not answer the others. watchdog \(stopped, (killed, )?or the network to it is down\); ranks 0 and 2 (wait|failed) in allreduce #$s " stop.report
'

test_expect_success 'a rank that skips an allreduce: rank 1 and the one it skipped named' '
	hang skip skip:1:allreduce:40 --bucket 8K &&
	test $rc -ne 0 &&
	test $took -lt 30 &&
	for r in 0 1 2; do test -f skip/trace-c0-r0000$r.jsonl || return 1; done &&
	s=$(nth_seq skip/trace-c0-r00000.jsonl allreduce 40) &&
	test -n "$s" && test "$s" != null &&
	what=$(jq -r "select(.seq == $s) | if .tag then \"\(.tag) \(.index), step \(.step)\" else \"step \(.step)\" end" \
		skip/trace-c0-r00000.jsonl) &&
	gpu-train --trace-report skip >skip.report &&
	cat skip.report &&
	grep "^rank 1 (on $HOST) skipped allreduce #$s ($what, [0-9.]* [KM]*i*B): its #$s is the others. #$((s + 1)); " skip.report
'

# The survivors dump when their watchdog fails the allgather (failed) or
# when the launcher's SIGTERM comes first (waits): on a loaded host one
# of them can be seconds ahead of the others, and time out before rank 1
# even enters the allgather, while the other is ended still waiting; the
# report then says each rank's state apart.
test_expect_success 'a rank killed in an allgather: rank 1 and the allgather named' '
	hang kill kill:1:allgather:6 --zero 1 &&
	test $rc -ne 0 &&
	test $took -lt 30 &&
	! test -f kill/trace-c0-r00001.jsonl &&
	test -f kill/trace-c0-r00000.jsonl &&
	test -f kill/trace-c0-r00002.jsonl &&
	s=$(nth_seq kill/trace-c0-r00000.jsonl allgather 6) &&
	test -n "$s" && test "$s" != null &&
	gpu-train --trace-report kill >kill.report &&
	cat kill.report &&
	in="in allgather #$s \(step [0-9]+, " &&
	grep -E "^rank 1 (\(on $HOST\) )?left no dump.*; (ranks 0 and 2 (wait|failed) $in|rank 0 \(on $HOST\) (waits|failed) $in.*; rank 2 \(on $HOST\) (waits|failed) $in)" kill.report
'

# late:1:allreduce:5: rank 1's 5th allreduce starts only once the
# watchdog of every other rank has timed out in it (--timeout 1) and sent
# rank 1 its probe: rank 1 is late by the timeout, not by the probe's
# second, however loaded the host (a sleep of a fixed length raced the
# others' timeout and probe on one). The allreduce completes within the
# probe: the job succeeds, silent, with the losses of a run without the
# fault. A rank late by far more than the probe (delay=30) is named.
test_expect_success 'a rank late by less than --timeout and the probe is no failure' '
	L="--data train.bin $TINY --batch 4 --json --steps 8 --timeout 1 --bucket 8K" &&
	mpirun --oversubscribe --bind-to none -np 2 gpu-train $L >ontime.json 2>ontime.err &&
	test_must_be_empty ontime.err &&
	FAULT_TAG=$TAG timeout 120 mpirun --oversubscribe --bind-to none -np 2 \
		-x GK_TEST_COMM_FAULT=late:1:allreduce:5 gpu-train $L >late.json 2>late.err &&
	test_must_be_empty late.err &&
	jq -c "select(.event == \"step\") | [.step, .loss]" ontime.json >ontime.loss &&
	jq -c "select(.event == \"step\") | [.step, .loss]" late.json >late.loss &&
	test $(wc -l <late.loss) -eq 8 &&
	test_cmp ontime.loss late.loss &&
	FAULT_TAG=$TAG test_expect_code 1 timeout 120 mpirun --oversubscribe --bind-to none -np 2 \
		-x GK_TEST_COMM_FAULT=delay=30:1:allreduce:5 gpu-train $L >toolate.json 2>toolate.err &&
	grep "no progress for 1 s: rank 1 (on $HOST) does not answer" toolate.err
'

# The late rank of the first case, then rank 0 stopped for good: ranks 1
# and 2 find in their queues the probe messages rank 0 (and rank 2, in
# rank 1's) sent while rank 1 was late, each followed by the word that it
# was stale, and still name rank 0, alone.
test_expect_success 'a stale probe from a late rank counts no stopped rank as alive' '
	hang stale late:1:allreduce:5,stop:0:allreduce:12 --timeout 1 --bucket 8K &&
	cat stale.err &&
	test $rc -eq 1 &&
	test $took -lt 30 &&
	grep "no progress for 1 s: rank 0 (on $HOST) does not answer" stale.err &&
	! grep "does not answer" stale.err | grep -v "rank 0 (on $HOST) does not answer" &&
	! grep "a rank stopped or the network is down" stale.err
'

# Rank 1 stopped in its 5th allreduce, and continued once rank 0 gave up
# on it (Open MPI sends SIGCONT before SIGTERM, then SIGKILL after
# odls_base_sigkill_timeout, 3 s here rather than 1 so that a loaded host
# cannot kill it before it would speak): it finds in its queue rank 0's
# probe followed by the word that rank 0 gave up, and leaves the job's
# message to rank 0 (its own, in its dump, says that rank 0 gave up on it
# first). It took the probe for an answer before, and said that no rank
# was silent ("a rank stopped or the network is down"), naming no one.
test_expect_success 'a stopped rank continued after the others gave up on it leaves the message to them' '
	L="--data train.bin $TINY --batch 4 --json --steps 100 --timeout 1" &&
	FAULT_TAG=$TAG test_expect_code 1 timeout 120 mpirun --mca odls_base_sigkill_timeout 3 \
		--oversubscribe --bind-to none -np 2 -x GK_TEST_COMM_FAULT=stop:1:allreduce:5 \
		gpu-train $L --trace-dir cont >cont.json 2>cont.err &&
	kill_tagged &&
	cat cont.err &&
	grep "^gpu-train: " cont.err >said &&
	echo "gpu-train: allreduce: no progress for 1 s: rank 1 (on $HOST) does not answer (stopped, or its network is down)" >want &&
	test_cmp want said &&
	jq -r "select(.reason) | .error" cont/trace-c0-r00001.jsonl >why1 &&
	echo "allreduce: no progress for 1 s: rank 0 (on $HOST) gave up on it first (this rank was stopped, or late by more than the timeout)" >want1 &&
	test_cmp want1 why1
'

# A grid's stall in a collective of the whole world (here in the setup's,
# before the first step) is said once too, by the lowest survivor.
test_expect_success 'a stopped rank of a --tp 2 --pp 2 grid: said once' '
	FAULT_TAG=$TAG test_expect_code 1 timeout 120 mpirun --oversubscribe --bind-to none -np 4 \
		-x GK_TEST_COMM_FAULT=stop:2:allreduce:5 gpu-train --data train.bin $TINY --batch 4 \
		--json --steps 4 --grad-accum 2 --tp 2 --pp 2 --timeout 1 >grid.json 2>grid.err &&
	kill_tagged &&
	cat grid.err &&
	grep "^gpu-train: " grid.err >said &&
	echo "gpu-train: allreduce: no progress for 1 s: rank 2 (on $HOST) does not answer (stopped, or its network is down)" >want &&
	test_cmp want said
'

# Rank 1 stopped in its 30th allreduce; rank 0, the lowest survivor and
# so the rank to report the stall, killed in its 31st, which it starts
# once the 30th has failed, after the probe that made it the reporter.
# Under a launcher that lets a job run on when a rank dies (Slurm's srun
# without --kill-on-bad-exit; mpirun's orte_enable_recovery here) rank 2
# waited for rank 0's abort and then aborted the job with Open MPI's
# banner alone. It now says the stall itself, with the rank it waited
# for, and ends the job. GK_TEST_REPORTER_WAIT_S=2 shortens its wait
# (10 s) for a reporter this test knows to be dead. In recovery mode
# mpirun exits 0 whatever its ranks did: the status is not checked.
test_expect_success 'the rank to report a stall killed before it does: the next says it and ends the job' '
	t0=$(date +%s) &&
	FAULT_TAG=$TAG timeout 120 mpirun --mca orte_enable_recovery 1 --oversubscribe \
		--bind-to none -np 3 -x GK_TEST_COMM_FAULT=stop:1:allreduce:30,kill:0:allreduce:31 \
		-x GK_TEST_REPORTER_WAIT_S=2 gpu-train --data train.bin $TINY --batch 4 --json \
		--steps 100000 --timeout 1 --bucket 8K --trace-dir dead >dead.json 2>dead.err
	took=$(($(date +%s) - t0)) &&
	kill_tagged &&
	cat dead.err &&
	test $took -lt 30 &&
	grep "^gpu-train: " dead.err >said &&
	echo "gpu-train: allreduce: no progress for 1 s: rank 1 (on $HOST) does not answer (stopped, or its network is down); rank 0 (on $HOST), which was to report the stall and end the job, did not within 2 s (it died or hangs): rank 2 aborts it" >want &&
	test_cmp want said &&
	jq -r "select(.reason) | .reason" dead/trace-c0-r00002.jsonl >why2 &&
	echo abort >want2 &&
	test_cmp want2 why2
'

# GK_TEST_BLOCK_STEP=3 on rank 1 alone: its step 3 never reaches the
# gradients' reduction (--overlap off: no bucket starts before it), while
# ranks 0 and 2 wait in its first bucket. Rank 1 dumps when mpirun's
# SIGTERM comes before its SIGKILL, which Open MPI does not promise: the
# verdict names it either way.
test_expect_success 'a rank that never enters the allreduce the others wait in' '
	t0=$(date +%s) &&
	B="$A --overlap off --trace-dir block" &&
	test_expect_code 1 timeout 120 mpirun --oversubscribe --bind-to none -np 1 gpu-train $B : \
		-np 1 -x GK_TEST_BLOCK_STEP=3 gpu-train $B : -np 1 gpu-train $B >block.json 2>block.err &&
	test $(($(date +%s) - t0)) -lt 30 &&
	s=$(jq -r "select(.seq and .state != \"done\") | .seq" block/trace-c0-r00000.jsonl | head -n 1) &&
	jq -s -e "map(select(.seq == $s)) | length == 1 and (.[0] | .op == \"allreduce\" and .tag == \"bucket\" and .index == 0 and .step == 3)" \
		block/trace-c0-r00000.jsonl &&
	gpu-train --trace-report block >block.report &&
	cat block.report &&
	grep -E "^rank 1 \(on $HOST\) (never entered allreduce #$s \(bucket 0, step 3, [^)]*\): its last operation, .* ended [0-9.]+ s before its dump|left no dump and did not answer the others. watchdog .*); ranks 0 and 2 (wait|failed) in allreduce #$s " block.report
'

# the header of rank 0 in b.out: the sweep has started (stdout line buffered)
test_expect_success 'SIGUSR2 dumps a running job and it runs on' '
	{ FAULT_TAG=$TAG timeout 120 mpirun --oversubscribe --bind-to none -np 2 \
		env ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" stdbuf -oL \
		allreduce-bench -b 4K -e 4K -n 10000000 -w 0 -c 0 --trace-dir usr2 \
		>b.out 2>b.err & } &&
	job=$! &&
	test_when_finished "kill \$job 2>/dev/null; wait \$job; :" &&
	test_wait_for 120 "the header of rank 0 in b.out" grep -q "^# allreduce-bench" b.out &&
	for p in $(pgrep -x allreduce-bench); do
		tr "\0" "\n" <"/proc/$p/environ" >env.$p 2>/dev/null || continue
		if grep -qx "FAULT_TAG=$TAG" env.$p && grep -qx "OMPI_COMM_WORLD_RANK=0" env.$p; then
			victim=$p
		fi
		rm -f env.$p
	done &&
	test -n "$victim" &&
	kill -USR2 $victim &&
	test_wait_for 60 "rank 0 dump in usr2/" test -f usr2/trace-c0-r00000.jsonl &&
	jq -e -s ".[0].reason == \"SIGUSR2\" and .[0].rank == 0 and .[0].world == 2 and
		(.[1:] | length) >= ([.[0].next - .[0].first, .[0].capacity] | min) - 1 and
		(.[1:] | map(.op) | unique) - [\"allreduce\", \"barrier\"] == []" \
		usr2/trace-c0-r00000.jsonl &&
	kill -0 $victim &&
	! test -f usr2/trace-c0-r00001.jsonl
'

test_expect_success 'bad uses: --trace-report alone, a missing directory, a file for --trace-dir' '
	test_expect_code 2 gpu-train --trace-report stop --data train.bin 2>e1 &&
	grep "^gpu-train: --trace-report reads the dumps of a run: not with --data$" e1 &&
	test_expect_code 1 gpu-train --trace-report nowhere 2>e2 &&
	grep "^gpu-train: open directory .nowhere.: No such file or directory$" e2 &&
	mkdir empty &&
	test_expect_code 1 gpu-train --trace-report empty 2>e3 &&
	grep "^gpu-train: .empty.: no flight-recorder dumps (trace-cN-rNNNNN.jsonl) in it$" e3 &&
	test_expect_code 1 gpu-train $A --steps 1 --trace-dir train.bin 2>e4 &&
	grep "^gpu-train: --trace-dir: .train.bin.: not a directory$" e4
'

test_done
