#!/bin/sh
test_description='Slurm: scripts/sbatch-train preempted, requeued and resumed

The job (2 tasks on the local one-node Slurm, a tiny model) gets USR1
from `scancel --signal=USR1 --batch` while it runs: gpu-train
checkpoints, the script requeues the job, the job runs again with
--resume and ends with the final loss of an uninterrupted run. A failing
training job hands its exit code and message back.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"
. "$GK_TOP/tests/cli/lib-slurm.sh"

if ! command -v mpirun >/dev/null 2>&1; then
	skip_all="no mpirun (Open MPI)"
	test_done
fi
slurm_start

# The ranks are stopped (SIGSTOP) as soon as both have their signal
# handlers in, USR1 is sent once both are stopped, and they are
# continued once it is pending in each, so the signal
# lands before the run ends however slowly srun, scancel and slurmctld act
# and however loaded the machine is. (The test once waited for the
# periodic checkpoint of step 500 instead: under a loaded CI its commit,
# behind the writer's fsyncs, came so late that the 5,000 steps of this
# tiny model could all but finish first.)
STEPS=5000

# The job's ranks: gpu-train processes writing to the test's CKPT.
ranks() {
	pgrep -f "^gpu-train .*--ckpt-dir $PWD/ck "
}

# Continue stopped ranks (a cleanup when the test fails half-way).
cont_ranks() {
	kill -CONT $(ranks) 2>/dev/null || :
}

# Whether signal 10 (USR1: 0x200) is in one of the masks FIELD... of
# process $1 (SigPnd, ShdPnd: pending; SigCgt: caught by a handler).
usr1_in() {
	pid=$1
	shift
	for f in "$@"; do
		mask=$(sed -n "s/^$f:\t*//p" /proc/$pid/status 2>/dev/null)
		[ -n "$mask" ] && [ $((0x${mask#${mask%???}} & 512)) -ne 0 ] && return 0
	done
	return 1
}

usr1_pending_in() {
	usr1_in $1 SigPnd ShdPnd
}

# Wait until both ranks run and catch USR1; print their pids.
ranks_catching() {
	i=0
	while :; do
		pids=$(ranks)
		if [ $(echo $pids | wc -w) = 2 ]; then
			ok=1
			for pid in $pids; do
				usr1_in $pid SigCgt || ok=
			done
			[ -n "$ok" ] && echo $pids && return 0
		fi
		i=$((i + 1))
		[ "$i" -lt 1200 ] || { echo "ranks_catching: not 2 ranks catching USR1 after 60 s (pids: $pids)" >&2; return 1; }
		sleep 0.05
	done
}

# What a failed wait shows: each rank's and srun's state and signal masks,
# the step as Slurm sees it, and what the script said.
usr1_states() {
	for pid in $(ranks) $(pgrep -f "^srun .*--ckpt-dir $PWD/ck "); do
		echo "pid $pid: $(tr '\0' ' ' </proc/$pid/cmdline 2>/dev/null | cut -c1-60)"
		grep -E "^(State|SigQ|SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt):" /proc/$pid/status 2>/dev/null
	done >&2
	scontrol show step "$(cat jobid).0" >&2 2>&1 || :
	cat job.err >&2 2>/dev/null || :
}

# Wait until each rank has stopped. kill -STOP only queues the signal: a
# rank acts on it when it next runs, and a USR1 that reaches it before
# that is handled first (the kernel takes the lower signal number first),
# so its handler runs, the rank then stops with nothing pending, and the
# wait below never ends. A loaded machine once kept a rank off the CPU
# for the whole of scancel's way to it. Once the rank is stopped (State T)
# a USR1 stays pending until SIGCONT.
ranks_stopped() {
	i=0
	for pid in "$@"; do
		until grep -q "^State:[[:space:]]*T" /proc/$pid/status 2>/dev/null; do
			i=$((i + 1))
			[ "$i" -lt 600 ] || {
				echo "ranks_stopped: rank $pid not stopped 60 s after SIGSTOP" >&2
				usr1_states
				return 1
			}
			sleep 0.1
		done
	done
}

# GK_T9101_FREEZER=DIR (a cgroup v1 freezer directory, as root) widens
# that window to all of it: the ranks are frozen before the SIGSTOP and
# thawed once USR1 is pending in both (or after 3 s, when it is not sent
# before they stop), and the test goes on once they are thawed.
freeze_ranks() {
	thawer=
	[ -n "${GK_T9101_FREEZER:-}" ] || return 0
	mkdir -p "$GK_T9101_FREEZER" || return 1
	for pid in "$@"; do
		for t in /proc/$pid/task/*; do
			echo "${t##*/}" >"$GK_T9101_FREEZER/tasks" || return 1
		done
	done
	echo FROZEN >"$GK_T9101_FREEZER/freezer.state" || return 1
	test_wait_for 30 "the ranks frozen" grep -q FROZEN "$GK_T9101_FREEZER/freezer.state" ||
		return 1
	(
		i=0
		while [ $i -lt 30 ]; do
			n=0
			for pid in "$@"; do
				usr1_pending_in $pid && n=$((n + 1))
			done
			[ $n = $# ] && break
			i=$((i + 1))
			sleep 0.1
		done
		echo THAWED >"$GK_T9101_FREEZER/freezer.state"
	) &
	thawer=$!
}

thawed() {
	[ -z "$thawer" ] || wait $thawer
}

# Wait until USR1 is pending in every rank.
usr1_pending() {
	i=0
	for pid in $(ranks); do
		until usr1_pending_in $pid; do
			i=$((i + 1))
			[ "$i" -lt 600 ] || {
				echo "usr1_pending: USR1 not pending in rank $pid after 60 s" >&2
				usr1_states
				return 1
			}
			sleep 0.1
		done
	done
}

# A requeued job waits for a BeginTime Slurm sets in the future; lift it
# so the test does not sit out the delay, and wait for the job to end.
wait_requeued() {
	i=0 begun=
	while state=$(squeue -h -j "$1" -o "%T %r" 2>/dev/null) && test -n "$state"; do
		case $state in
		"PENDING BeginTime"*)
			# Slurm holds a requeued job back until the old instance's
			# credential expires. Start it sooner, once, but not within
			# the second of the requeue: slurmd refuses a launch whose
			# credential is no newer, in whole seconds, than its revocation
			# ("Job credential revoked": the job FAILED, exit 1).
			if [ -z "$begun" ]; then
				begun=1
				echo "job $1 requeued with a BeginTime: StartTime=now+2"
				scontrol update JobId="$1" StartTime=now+2
			fi ;;
		"PENDING JobHeld"*)
			echo "job $1 requeued held: release"
			scontrol release "$1" ;;
		esac
		i=$((i + 1))
		[ "$i" -lt 600 ] || { echo "wait_requeued: job $1 still queued after 300 s ($state)" >&2; return 1; }
		sleep 0.5
	done
}

test_expect_success 'data; the uninterrupted run, 2 ranks' '
	train_data &&
	mpi 2 --data train.bin $TINY --batch 4 --steps $STEPS --json >ref.json &&
	losses ref.json | tail -n 1 >ref.last
'

# srun without --kill-on-bad-exit keeps a step running when one task
# exits: a rank that exited before MPI started would leave the other
# waiting in MPI_Init for good.
test_expect_success 'plain srun, a --config missing on one rank: both exit 1 at once, said once' '
	cat >cfg0.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2,
	 "vocab_size": 257, "n_positions": 33}
	EOF
	test_expect_code 1 timeout 60 srun -n 2 --mpi=pmix sh -c \
		"exec gpu-train --data train.bin --config cfg\$SLURM_PROCID.json --seq 16 --steps 1" 2>err &&
	cat err &&
	test $(grep -c "^gpu-train: open .cfg1.json.: No such file or directory (1 of 2 ranks)$" err) = 1 &&
	test $(grep -c "^gpu-train:" err) = 1
'

test_expect_success 'sbatch-train: USR1 while it runs, checkpoint, requeue, resume, same final loss' '
	DATA=train.bin MODEL="$TINY" ARGS="--batch 4 --ckpt-every 500" STEPS=$STEPS \
	BIND=0 CKPT="$PWD/ck" LOG=train.jsonl \
		sbatch --parsable -N 1 --ntasks-per-node 2 -o job.out -e job.err \
		"$GK_TOP/scripts/sbatch-train" >jobid &&
	job=$(cat jobid) &&
	test_when_finished "scancel $job 2>/dev/null || :" &&
	pids=$(ranks_catching) &&
	freeze_ranks $pids &&
	kill -STOP $pids &&
	test_when_finished cont_ranks &&
	ranks_stopped $pids &&
	scancel --signal=USR1 --batch $job &&
	thawed &&
	usr1_pending &&
	kill -CONT $(ranks) &&
	wait_requeued $job &&
	cat job.err &&
	grep "USR1: checkpointing and stopping" job.err &&
	grep "requeueing" job.err &&
	scontrol show job $job >show &&
	grep -E "Restarts=1( |$)" show &&
	grep "JobState=COMPLETED" show &&
	grep "ExitCode=0:0" show &&
	jq -s -e "map(select(.event == \"start\")) | length == 2" train.jsonl &&
	jq -s -e "[.[] | select(.event == \"step\") | .step] == [range(1; $STEPS + 1)]" train.jsonl &&
	at=$(sed -n "s/^sbatch-train: stopped at step \([0-9]*\) of $STEPS: requeueing$/\1/p" job.err) &&
	echo "preempted at step $at of $STEPS" &&
	test "$at" -ge 1 && test "$at" -lt $STEPS &&
	test -f ck/step-$(printf %08d $at)/COMMIT &&
	losses train.jsonl | tail -n 1 >job.last &&
	test_cmp ref.last job.last
'

# A stop that comes before the ranks start (the script's first command,
# squeue, signals the batch shell once, as scancel --signal=USR1 --batch
# would; not its $PPID: with traps set, bash runs a command substitution's
# command in a subshell of its own)
# used to kill the script, and the job with it, with no requeue: the run
# now does not start, the job is requeued and its next run trains.
test_expect_success 'sbatch-train: USR1 before the ranks start requeues the job, which then runs' '
	mkdir early &&
	cat >early/squeue <<-EOF &&
	#!/bin/sh
	if mkdir "$PWD/early/signalled" 2>/dev/null; then
		kill -USR1 \$(pgrep -o -f "/job0*\$SLURM_JOB_ID/slurm_script")
	fi
	exec $(command -v squeue) "\$@"
	EOF
	chmod +x early/squeue &&
	PATH="$PWD/early:$PATH" DATA=train.bin MODEL="$TINY" ARGS="--batch 4" STEPS=4 BIND=0 \
		CKPT="$PWD/ck-early" LOG=early.jsonl \
		sbatch --parsable -N 1 --ntasks-per-node 2 -o early.out -e early.err \
		"$GK_TOP/scripts/sbatch-train" >jobid-early &&
	job=$(cat jobid-early) &&
	test_when_finished "scancel $job 2>/dev/null || :" &&
	wait_requeued $job &&
	cat early.err &&
	test -d early/signalled &&
	grep -Fx "sbatch-train: stopped (USR1 or TERM) before the ranks started: requeueing" early.err &&
	scontrol show job $job >show-early &&
	grep -E "Restarts=1( |$)" show-early &&
	grep "JobState=COMPLETED" show-early &&
	jq -s -e "[.[] | select(.event == \"step\") | .step] == [1, 2, 3, 4]" early.jsonl
'

# A stop while srun starts (its wrapper here signals the batch shell once
# and sleeps before it runs srun) used to kill srun, which had not set its
# handler yet (exit 138, the job gone); one srun gets before its tasks run
# is dropped by Slurm. srun now starts with USR1 ignored, and the stop goes
# again once the run has logged its start: the ranks, which wait inside
# step 2 for a signal (GK_TEST_WAIT_SIGNAL, the first run only) and so
# cannot finish without it, stop at step 1's checkpoint, and the job is
# requeued and completes.
test_expect_success 'sbatch-train: USR1 while srun starts reaches the ranks once they run: checkpoint, requeue' '
	mkdir starting &&
	cat >starting/srun <<-EOF &&
	#!/bin/sh
	if mkdir "$PWD/starting/signalled" 2>/dev/null; then
		kill -USR1 \$(pgrep -o -f "/job0*\$SLURM_JOB_ID/slurm_script")
		sleep 1
	else
		unset GK_TEST_WAIT_SIGNAL
	fi
	exec $(command -v srun) "\$@"
	EOF
	chmod +x starting/srun &&
	PATH="$PWD/starting:$PATH" GK_TEST_WAIT_SIGNAL=2:1 DATA=train.bin MODEL="$TINY" \
		ARGS="--batch 4 --grad-accum 2" STEPS=4 BIND=0 CKPT="$PWD/ck-starting" LOG=starting.jsonl \
		sbatch --parsable -N 1 --ntasks-per-node 2 -o starting.out -e starting.err \
		"$GK_TOP/scripts/sbatch-train" >jobid-starting &&
	job=$(cat jobid-starting) &&
	test_when_finished "scancel $job 2>/dev/null || :" &&
	wait_requeued $job &&
	cat starting.err &&
	test -d starting/signalled &&
	grep -Fx "sbatch-train: stopped at step 1 of 4: requeueing" starting.err &&
	test -f ck-starting/step-00000001/COMMIT &&
	scontrol show job $job >show-starting &&
	grep -E "Restarts=1( |$)" show-starting &&
	grep "JobState=COMPLETED" show-starting &&
	jq -s -e "[.[] | select(.event == \"step\") | .step] == [1, 2, 3, 4]" starting.jsonl
'

test_expect_success 'a failing training job: its exit code and message reach the user' '
	test_expect_code 1 timeout 120 env DATA=missing.bin MODEL="$TINY" ARGS="--batch 4" \
		STEPS=4 BIND=0 CKPT="$PWD/ck-bad" LOG=bad.jsonl \
		sbatch --wait -N 1 --ntasks-per-node 2 -o bad.out -e bad.err \
		"$GK_TOP/scripts/sbatch-train" &&
	cat bad.err &&
	grep "gpu-train: .*missing.bin" bad.err &&
	grep "sbatch-train: gpu-train failed (exit 1)" bad.err
'

test_expect_success 'sbatch-train: a run that ends short of STEPS without a signal fails instead of requeueing' '
	test_expect_code 1 timeout 120 env DATA=train.bin MODEL="$TINY" ARGS="--batch 4 --until 3" \
		STEPS=6 BIND=0 CKPT="$PWD/ck-short" LOG=short.jsonl \
		sbatch --wait -N 1 --ntasks-per-node 2 -o short.out -e short.err \
		"$GK_TOP/scripts/sbatch-train" &&
	cat short.err &&
	grep -Fx "sbatch-train: gpu-train ended at step 3 of 6 (done; an --until in ARGS?): not requeueing" short.err &&
	! grep requeueing short.err | grep -v "not requeueing" &&
	test "$(jq -r .step ck-short/latest/COMMIT)" = 3
'

# The documented command as written (1 node x 2 tasks, the default ARGS,
# ranks bound through gpu-topo and numactl), with a small config.json of
# the --seq 1024 the default ARGS ask for, and 2 steps.
test_expect_success 'sbatch-train as documented runs on the local cluster: defaults, numactl binding' '
	cat >small.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2,
	 "vocab_size": 257, "n_positions": 1024}
	EOF
	mkdir doc && (
		cd doc &&
		DATA=../train.bin CONFIG=../small.json STEPS=2 \
			timeout 300 sbatch --wait --parsable "$GK_TOP/scripts/sbatch-train" >jobid
	) &&
	job=$(cat doc/jobid) &&
	cat doc/train-$job.out &&
	test "$(jq -r .step doc/ckpt/latest/COMMIT)" = 2 &&
	jq -s -e "map(select(.event == \"start\"))[0] | .world == 2 and .seq == 1024" doc/train-$job.jsonl &&
	jq -s -e "[.[] | select(.event == \"step\") | .step] == [1, 2]" doc/train-$job.jsonl &&
	! grep -v "^gpu-train" doc/train-$job.out
'

# A node without numactl: a PATH of every command here but numactl (the
# first directory's where two have one: ln refuses a name already made;
# one ln a directory, not one a command, which took seconds under load).
test_expect_success 'a node without numactl: the rank that cannot start is named, not gpu-train' '
	mkdir nonuma &&
	for d in "$GK_TOP/bin" /usr/local/bin /usr/bin /usr/sbin; do
		find -L "$d" -maxdepth 1 -type f -perm /111 ! -name numactl \
			-exec ln -s -t nonuma {} + 2>/dev/null || :
	done &&
	test -x nonuma/gpu-train && test -x nonuma/srun && test -x nonuma/sh &&
	! PATH="$PWD/nonuma" command -v numactl &&
	test_expect_code 127 env PATH="$PWD/nonuma" DATA=train.bin MODEL="$TINY" ARGS="--batch 4" STEPS=4 \
		CKPT="$PWD/ck-nonuma" LOG=nonuma.jsonl timeout 120 \
		sbatch --wait -N 1 --ntasks-per-node 2 -o nonuma.out -e nonuma.err \
		"$GK_TOP/scripts/sbatch-train" &&
	cat nonuma.err &&
	host=$(hostname -s) &&
	grep -Fx "sbatch-train: the ranks did not start (srun exit 127): rank 0 on $host: numactl is not installed (scripts/install-deps installs it; BIND=0 leaves binding to Slurm)" nonuma.err &&
	! grep "gpu-train failed" nonuma.err
'

test_expect_success 'srun that cannot launch the tasks is said as such, not as gpu-train failing' '
	test_expect_code 1 env SRUN_MPI=no-such-plugin DATA=train.bin MODEL="$TINY" ARGS="--batch 4" \
		STEPS=4 BIND=0 CKPT="$PWD/ck-nolaunch" LOG=nolaunch.jsonl timeout 120 \
		sbatch --wait -N 1 --ntasks-per-node 2 -o nolaunch.out -e nolaunch.err \
		"$GK_TOP/scripts/sbatch-train" &&
	cat nolaunch.err &&
	grep "^sbatch-train: the ranks did not start (srun exit 1): srun: error: .*no-such-plugin" nolaunch.err &&
	! grep "gpu-train failed" nolaunch.err
'

# Slurm sends --signal'"'"'s USR1 up to 60 s before the lead: a limit within
# LEAD + 60 s would stop and requeue every run at once, forever.
test_expect_success 'sbatch-train: a --time within the --signal lead is refused, not requeued' '
	test_expect_code 1 env DATA=train.bin MODEL="$TINY" ARGS="--batch 4" STEPS=100000 BIND=0 \
		CKPT="$PWD/ck-time" LOG=time.jsonl timeout 120 \
		sbatch --wait --time=5 -N 1 --ntasks-per-node 2 -o time.out -e time.err \
		"$GK_TOP/scripts/sbatch-train" &&
	cat time.err &&
	grep -Fx "sbatch-train: the time limit (5:00, 300 s) is not longer than the --signal lead (300 s, plus up to 60 s by which Slurm signals early): every run would checkpoint and requeue at once; give --time more than 360 s, or a shorter lead (--signal=B:USR1@N with LEAD=N)" time.err &&
	! test -e time.jsonl
'

test_expect_success 'sbatch-train: a shorter lead given to sbatch and as LEAD lets a short job run' '
	env LEAD=30 DATA=train.bin MODEL="$TINY" ARGS="--batch 4" STEPS=3 BIND=0 \
		CKPT="$PWD/ck-lead" LOG=lead.jsonl timeout 120 \
		sbatch --wait --time=2 --signal=B:USR1@30 -N 1 --ntasks-per-node 2 -o lead.out -e lead.err \
		"$GK_TOP/scripts/sbatch-train" &&
	test "$(jq -r .step ck-lead/latest/COMMIT)" = 3
'

test_done
