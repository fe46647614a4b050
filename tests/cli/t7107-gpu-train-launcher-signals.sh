#!/bin/sh
test_description='SIGTERM to the launcher: what Open MPI does, and the settings that keep the checkpoint

Open MPI 4.1'\''s mpirun cannot forward SIGTERM (ess_base_forward_signals
refuses it). On SIGTERM it sends the ranks SIGCONT, waits
odls_base_sigkill_timeout seconds (1 by default), sends SIGTERM, waits as
long again, then SIGKILL; while it waits it forwards no output. So with
the default a checkpoint that takes longer than a second is lost; with
--mca odls_base_sigkill_timeout N the ranks have N seconds to commit; a
shell that turns SIGTERM into SIGUSR1 for mpirun (which mpirun forwards)
stops at the next step with no launcher limit at all. gpu-train(1),
SIGNALS, documents each. Rank 0'\''s note on a SIGTERM from mpirun says
so, where one from anything else says it stops at the end of the step.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

if ! test_have_prereq MPI; then
	skip_all="no mpirun"
	test_done
fi

A="--data train.bin $TINY --batch 4 --json --zero 1 --steps 1000000"

# The jobs are not run under timeout(1): it passes a signal on to its
# whole process group, mpirun's ranks included, which is not what a
# signal to mpirun alone does. wait_pid bounds them instead, and each
# test ends its job (mpirun, or the shell and its mpirun) when it ends.

# wait_line FILE PATTERN: until FILE has a line matching PATTERN, at most
# 300 s (two ranks starting and training a step on a loaded machine)
wait_line() {
	test_wait_for 300 "a line '$2' in $1" grep -q "$2" "$1"
}

# term_caught PID: PID has a handler for SIGTERM (15: 0x4000 in SigCgt)
term_caught() {
	mask=$(sed -n "s/^SigCgt:\t*//p" /proc/$1/status 2>/dev/null) &&
	test -n "$mask" && test $((0x${mask#${mask%????}} & 0x4000)) -ne 0
}

# wait_pid PID LIMIT: wait for PID at most LIMIT seconds; $rc its status
wait_pid() {
	i=0
	while kill -0 $1 2>/dev/null && test $i -lt $(($2 * 10)); do
		sleep 0.1
		i=$((i + 1))
	done
	if kill -0 $1 2>/dev/null; then
		echo "still running after $2 s" >&2
		pkill -P $1 mpirun
		kill $1
		return 1
	fi
	wait $1
	rc=$?
}

# committed DIR LOG: the summary of LOG says it stopped on a signal and
# checkpointed, and DIR's latest is that step, committed
committed() {
	s=$(jq -r "select(.event == \"summary\") | .step" "$2") &&
	test -n "$s" &&
	jq -e "select(.event == \"summary\") | .stopped == \"signal (checkpointed)\"" "$2" &&
	test "$(readlink "$1/latest")" = "$(printf step-%08d $s)" &&
	ckpt-merge --check "$1" &&
	jq -e ".step == $s" "$1/latest/trainer.json"
}

test_expect_success 'data' '
	train_data
'

# Each rank writes its JSON lines to a file of its own: mpirun forwards no
# output while it waits, and a rank whose lines filled the terminal or
# pipe would block in write() until killed. The checkpoint's write is
# slowed to 2 s (GK_TEST_CKPT_DELAY_MS): longer than Open MPI's default
# second between SIGTERM and SIGKILL; to 60 s where that second must win,
# however late a loaded machine runs mpirun after its sleep.
RUN='exec gpu-train "$@" >$0.$OMPI_COMM_WORLD_RANK'

# the note rank 0 (alone) says on a SIGTERM from mpirun, SIGKILL $1 s later
mpirun_note() {
	printf "%s\n" "gpu-train: SIGTERM from mpirun, which is ending the job: it kills the ranks $1 s after this signal (odls_base_sigkill_timeout); the step and its checkpoint are kept only if they end before that; SIGUSR1 to mpirun (which forwards it) waits for them" >note.want &&
	grep "^gpu-train: .*signal" "$2" >note.got &&
	test_cmp note.want note.got
}

# mpirun exits 1 when a SIGTERM ended its job.
test_expect_success 'kill -TERM mpirun, Open MPI'\''s default: SIGKILL 1 s after the ranks'\'' SIGTERM, no checkpoint, and the note says so' '
	{ mpirun --oversubscribe --bind-to none -np 2 -x GK_TEST_CKPT_DELAY_MS=60000 \
		sh -c "$RUN" d $A --ckpt-dir ckd 2>d.err & } &&
	pid=$! &&
	test_when_finished "pkill -P \$pid mpirun; kill \$pid 2>/dev/null || :" &&
	wait_line d.0 "\"event\":\"step\"" &&
	kill -TERM $pid &&
	wait_pid $pid 300 &&
	test $rc -eq 1 &&
	! grep "\"event\":\"summary\"" d.0 &&
	! test -e ckd/latest &&
	mpirun_note 1 d.err
'

test_expect_success 'kill -TERM mpirun with --mca odls_base_sigkill_timeout 8: a committed checkpoint' '
	{ mpirun --oversubscribe --bind-to none -np 2 -x GK_TEST_CKPT_DELAY_MS=2000 \
		--mca odls_base_sigkill_timeout 8 sh -c "$RUN" g $A --ckpt-dir ckg 2>g.err & } &&
	pid=$! &&
	test_when_finished "pkill -P \$pid mpirun; kill \$pid 2>/dev/null || :" &&
	wait_line g.0 "\"event\":\"step\"" &&
	kill -TERM $pid &&
	wait_pid $pid 300 &&
	committed ckg g.0 &&
	jq -e "select(.event == \"summary\")" g.1 >/dev/null &&
	mpirun_note 8 g.err
'

# A SIGTERM to a rank itself, not from mpirun, is the stop protocol'\''s:
# every rank stops at the end of the step and checkpoints, and mpirun
# exits 0. $0.pid$RANK is the rank'\''s pid (sh execs gpu-train).
RUNPID='echo $$ >$0.pid$OMPI_COMM_WORLD_RANK; exec gpu-train "$@" >$0.$OMPI_COMM_WORLD_RANK'

test_expect_success 'kill -TERM rank 0 under mpirun: stop at the end of the step, checkpoint, exit 0' '
	{ mpirun --oversubscribe --bind-to none -np 2 -x GK_TEST_CKPT_DELAY_MS=2000 \
		sh -c "$RUNPID" r $A --ckpt-dir ckr 2>r.err & } &&
	pid=$! &&
	test_when_finished "pkill -P \$pid mpirun; kill \$pid 2>/dev/null || :" &&
	wait_line r.0 "\"event\":\"step\"" &&
	kill -TERM $(cat r.pid0) &&
	wait_pid $pid 300 &&
	test $rc -eq 0 &&
	committed ckr r.0 &&
	jq -e "select(.event == \"summary\") | .stopped == \"signal (checkpointed)\"" r.1 &&
	echo "gpu-train: stopping at the end of the step; a second signal, or a step that does not end within the grace period, ends the process without a checkpoint" >note.want &&
	grep "^gpu-train: .*signal" r.err >note.got &&
	test_cmp note.want note.got
'

# The recipe of gpu-train(1): a shell between the service manager and
# mpirun turns SIGTERM into SIGUSR1, which mpirun forwards at once.
# Output goes through mpirun as usual.
WRAP='mpirun "$@" & pid=$!
trap "kill -USR1 \$pid" TERM
wait $pid
wait $pid'

test_expect_success 'kill -TERM of a shell that sends mpirun SIGUSR1: checkpoint at the next step, exit 0' '
	{ sh -c "$WRAP" sh --oversubscribe --bind-to none -np 2 \
		-x GK_TEST_CKPT_DELAY_MS=2000 gpu-train $A --ckpt-dir ckw >w.json 2>w.err & } &&
	pid=$! &&
	test_when_finished "pkill -P \$pid mpirun; kill \$pid 2>/dev/null || :" &&
	wait_line w.json "\"event\":\"step\"" &&
	test_wait_for 300 "the shell $pid to trap SIGTERM" term_caught $pid &&
	kill -TERM $pid &&
	wait_pid $pid 300 &&
	test $rc -eq 0 &&
	committed ckw w.json
'

test_done
