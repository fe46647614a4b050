#!/bin/sh
test_description='gpu-train refuses a run that does not fit, and a signal ends a step that cannot

Before allocating, each rank compares its accounting with the memory it
may use: RLIMIT_AS (ulimit -v), the memory cgroup and MemAvailable
(shared by the ranks of the machine), read under GK_TEST_MEM_ROOT here
from fixture trees, and --mem-limit, a limit of each rank alone. A run
that does not fit is refused once, with the figures and the cheapest fix
that mem-estimate --fit finds, which then runs; --force allocates anyway. After SIGTERM or SIGINT a step that
cannot reach its end (GK_TEST_BLOCK_STEP) ends the process after the
grace period, and a second signal ends it at once.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

# /proc/meminfo's MemAvailable in KiB, nothing else to limit
meminfo_root() {
	mkdir -p "$1/proc" &&
	printf "MemTotal: 100000000 kB\nMemAvailable: %s kB\n" "$2" >"$1/proc/meminfo"
}

test_expect_success 'setup: token data' '
	train_data
'

# A sanitizer's shadow memory cannot be mapped under ulimit -v
if sh -c "ulimit -v 3000000 && exec gpu-train --help" >/dev/null 2>&1; then
	test_set_prereq ULIMIT_V
fi

# The issue's reproduction: --positions 8192 --seq 8192 under ulimit -v 3000000
BIG="--layers 2 --hidden 64 --heads 4 --positions 8192 --seq 8192 --steps 1"

test_expect_success ULIMIT_V 'ulimit -v: a run that cannot fit is refused at once, naming RLIMIT_AS and the fix' '
	test_expect_code 1 sh -c "ulimit -v 3000000 && exec timeout 120 gpu-train --data train.bin $BIG" \
		>out 2>err &&
	test $(wc -l <err) = 1 &&
	grep "^gpu-train: memory: a rank needs .* more than the .* that RLIMIT_AS (ulimit -v) leaves; cheapest fix: .*--recompute layer.*mem-estimate --fit.*--force" err &&
	test_must_be_empty out
'

test_expect_success ULIMIT_V 'ulimit -v --force: the check is skipped and the allocation itself fails' '
	test_expect_code 1 sh -c "ulimit -v 3000000 && exec timeout 120 gpu-train --data train.bin $BIG --force" \
		>out 2>err &&
	! grep "memory: a rank needs" err &&
	grep "model activations.*Cannot allocate memory" err
'

test_expect_success 'a cgroup v2 memory.max too small: refused, naming the cgroup' '
	mkdir -p cg/proc/self cg/sys/fs/cgroup/job &&
	echo "0::/job" >cg/proc/self/cgroup &&
	echo "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw" >cg/proc/self/mountinfo &&
	echo 100000000 >cg/sys/fs/cgroup/job/memory.max &&
	echo 0 >cg/sys/fs/cgroup/job/memory.current &&
	test_expect_code 1 env GK_TEST_MEM_ROOT="$PWD/cg" gpu-train --data train.bin $TINY --steps 1 2>err &&
	grep "more than the 95.4 MiB that the cgroup.s memory limit leaves" err &&
	echo max >cg/sys/fs/cgroup/job/memory.max &&
	GK_TEST_MEM_ROOT="$PWD/cg" gpu-train --data train.bin $TINY --steps 1 >out &&
	grep "^summary: 1 steps" out
'

# Activations dominate (T = 512): the run needs more than the process
# margin (128 MiB) plus 40 MiB, and a smaller micro-batch
# brings it under.
M="--layers 2 --hidden 64 --heads 4 --positions 512 --seq 512 --batch 4 --steps 1 --threads 1"

test_expect_success 'MemAvailable too small: refused; the advice fits and runs; --force runs' '
	meminfo_root mi $((168 * 1024)) &&
	test_expect_code 1 env GK_TEST_MEM_ROOT="$PWD/mi" gpu-train --data train.bin $M 2>err &&
	grep "more than the 168 MiB that MemAvailable leaves" err &&
	fix=$(sed -n "s/.*cheapest fix: \(--[^(]*\) (.*/\1/p" err) &&
	test -n "$fix" &&
	GK_TEST_MEM_ROOT="$PWD/mi" gpu-train --data train.bin $M $fix >out &&
	grep "^summary: 1 steps" out &&
	GK_TEST_MEM_ROOT="$PWD/mi" gpu-train --data train.bin $M --force >out &&
	grep "^summary: 1 steps" out
'

test_expect_success MPI '2 ranks share MemAvailable: refused once, with the count' '
	need=$(gpu-train --data train.bin $M --json | jq -r "select(.event == \"start\") | .memory.total") &&
	kib=$(( (need + 128 * 1048576) * 3 / 2 / 1024 )) &&
	meminfo_root mi2 $kib &&
	GK_TEST_MEM_ROOT="$PWD/mi2" gpu-train --data train.bin $M >out &&
	grep "^summary" out &&
	test_expect_code 1 env GK_TEST_MEM_ROOT="$PWD/mi2" \
		timeout 300 mpirun --oversubscribe --bind-to none -x GK_TEST_MEM_ROOT -np 2 \
		gpu-train --data train.bin $M >out 2>err &&
	grep -c "memory: a rank needs" err >n &&
	echo 1 >one &&
	test_cmp one n &&
	grep "2 ranks share MemAvailable.*(2 of 2 ranks)" err
'

# --mem-limit: a rank's own limit on its accounting, with no margin. 4
# blocks of hidden 128 over 4 ranks: ZeRO-0 accounts 13.5 MiB a rank
# (the whole model's parameters, gradients and moments), ZeRO-3 8.8 MiB
# (a quarter of each, and the blocks gathered in turn); 12M lies between.
# The figure refused is the accounting of the same run made without the
# limit (the start line's total, whose parameters, gradients and
# optimizer are mem-estimate's), but for the spare float the check counts
# in each moment's buffer. With --compress bf16 (the error feedback, a
# float for each of the model's parameters, and the ring's wire buffers)
# ZeRO-2 accounts 10.5 MiB and ZeRO-3 9.9: under 10M the advice is
# --zero 3, which trains there with --compress.
L="--data train.bin --layers 4 --hidden 128 --heads 4 --positions 16 --seq 16 --threads 1
	--batch 1 --steps 2 --bucket 16K --json"

test_expect_success MPI '--mem-limit: ZeRO-0 over 4 ranks refused up front with the figure it needs; --zero 3 trains under it, with --compress too' '
	mpi 4 $L >nl.json &&
	jq -s "map(select(.event == \"start\"))[0].memory" nl.json >nl.mem &&
	total=$(jq .total nl.mem) &&
	test $total -gt $((12 << 20)) &&
	test_expect_code 1 mpi 4 $L --mem-limit 12M >ml.json 2>ml.err &&
	cat ml.err &&
	grep -c "memory: a rank needs" ml.err >n &&
	echo 1 >one && test_cmp one n &&
	need=$(sed -n "s/^gpu-train: memory: a rank needs 13.5 MiB (\([0-9]*\) bytes by its accounting, mem-estimate.s model), more than --mem-limit 12.0 MiB; cheapest fix: .* (4 of 4 ranks)$/\1/p" ml.err) &&
	test -n "$need" &&
	test $need -ge $total && test $need -le $((total + 16)) &&
	! grep "\"event\"" ml.json &&
	mpi 4 $L --zero 3 --mem-limit 12M >z3.json &&
	jq -s -e "(map(select(.event == \"start\"))[0].memory.total < 12 * 1048576) and
		(map(select(.event == \"step\")) | length == 2)" z3.json &&
	fix=$(sed -n "s/.*cheapest fix: \(--[^(]*\) (.*/\1/p" ml.err) &&
	test -n "$fix" &&
	mpi 4 $L --mem-limit 12M $fix --ckpt-dir fx >fix.json &&
	jq -s -e "map(select(.event == \"step\")) | length == 2" fix.json &&
	test_expect_code 1 mpi 4 $L --mem-limit 10M --compress bf16 2>mc.err &&
	grep "memory: a rank needs .* more than --mem-limit 10.0 MiB; cheapest fix: --zero 3 (" mc.err &&
	mpi 4 $L --mem-limit 10M --compress bf16 --zero 3 >mc.json &&
	jq -s -e "(map(select(.event == \"start\"))[0].memory.total < 10 * 1048576) and
		(map(select(.event == \"step\")) | length == 2)" mc.json &&
	mem-estimate --config fx/latest/config.json --precision f32 -b 1 -s 16 --no-dropout \
		--zero 0 --dp 4 --json >me0.json &&
	jq -e -s ".[0].parameters == .[1].bytes.parameters and .[0].gradients == .[1].bytes.gradients and
		.[0].optimizer == .[1].bytes.optimizer" nl.mem me0.json
'

# Over a tensor group (tp 2 x dp 2, batch 2) the check prices the rank's
# slice: ZeRO-0 accounts 7.3 MiB, refused under 5.86 MiB (6000K) with
# the figure of its accounting; ZeRO-2 keeps the slice's gradients whole
# until the reduction after backward (5.66 MiB at batch 2), which the
# check counts, so the advice is ZeRO-2 at batch 1 (5.27 MiB), which
# trains under the limit, its accounting the figure the advice named.
test_expect_success MPI '--mem-limit over tp 2 x dp 2: refused with the slice'"'"'s figure; the advice keeps the grid, fits and trains' '
	T="$L --batch 2 --tp 2" &&
	mpi 4 $T >tl.json &&
	total=$(jq -s "map(select(.event == \"start\"))[0].memory.total" tl.json) &&
	test_expect_code 1 mpi 4 $T --mem-limit 6000K 2>tl.err &&
	need=$(sed -n "s/^gpu-train: memory: a rank needs .* (\([0-9]*\) bytes by its accounting, .* (4 of 4 ranks; .*$/\1/p" tl.err) &&
	test -n "$need" && test $need -ge $total && test $need -le $((total + 16)) &&
	fix=$(sed -n "s/.*cheapest fix: \(--[^(]*\) (.*/\1/p" tl.err) &&
	echo "$fix" | grep "^--zero [23] " &&
	said=$(sed -n "s/.*cheapest fix: --[^(]* (\([0-9.]* MiB\) a rank.*/\1/p" tl.err) &&
	mpi 4 $T --mem-limit 6000K $fix >tf.json &&
	jq -s -e "(map(select(.event == \"start\"))[0].memory.total < 6000 * 1024) and
		(map(select(.event == \"step\")) | length == 2)" tf.json &&
	got=$(jq -s "map(select(.event == \"start\"))[0].memory.total" tf.json) &&
	test "$said" = "$(awk -v b=$got "BEGIN { printf \"%.2f MiB\", b / 1048576 }")"
'

test_expect_success '--mem-limit: below 1M, or not a size, is a usage error' '
	test_expect_code 2 gpu-train $L --mem-limit 512 2>err &&
	grep "^gpu-train: --mem-limit .512.: 512 bytes, below 1M (a size takes a suffix: 8G)$" err &&
	test_expect_code 2 gpu-train $L --mem-limit lots 2>err &&
	grep "^gpu-train: .*--mem-limit" err
'

# Wait until the log at $1 shows a step, at most 60 s.
wait_step() {
	for i in $(seq 1 600); do
		grep -q "\"event\":\"step\"" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "no step in $1 after 60 s"
	return 1
}

# Wait until process $1 has ended, at most 60 s, then reap it: its exit
# status in rc. (Not under timeout(1), which sends a signal it forwards to
# the process group as well, so the process would get it twice.)
wait_exit() {
	for i in $(seq 1 600); do
		kill -0 "$1" 2>/dev/null || { wait "$1"; rc=$?; return 0; }
		sleep 0.1
	done
	echo "process $1 still running after 60 s"
	return 1
}

test_expect_success 'SIGTERM in a step that cannot finish: ended after the grace period, said so' '
	{ GK_TEST_BLOCK_STEP=2 GK_TEST_STOP_GRACE_S=2 gpu-train --data train.bin \
		$TINY --steps 100 --json --ckpt-dir ck >t.json 2>t.err & } &&
	pid=$! &&
	test_when_finished "kill -KILL \$pid 2>/dev/null || :" &&
	wait_step t.json &&
	kill -TERM $pid &&
	wait_exit $pid &&
	test $rc = 143 &&
	grep "gpu-train: the step did not reach its end within the grace period after the signal: exiting without a checkpoint" t.err &&
	! jq -e "select(.event == \"summary\")" t.json &&
	! ls ck | grep -v -e "^step-" -e "^latest$"
'

test_expect_success 'a second signal ends the blocked step at once, 128 + the first' '
	{ GK_TEST_BLOCK_STEP=2 GK_TEST_STOP_GRACE_S=3600 gpu-train --data train.bin \
		$TINY --steps 100 --json >s.json 2>s.err & } &&
	pid=$! &&
	test_when_finished "kill -KILL \$pid 2>/dev/null || :" &&
	wait_step s.json &&
	kill -INT $pid &&
	for i in $(seq 1 600); do
		grep -q "gpu-train: stopping at the end of the step" s.err && break
		sleep 0.1
	done &&
	grep "gpu-train: stopping at the end of the step; a second signal" s.err &&
	kill -TERM $pid &&
	wait_exit $pid &&
	test $rc = 130 &&
	grep "gpu-train: a second signal: exiting now, without a checkpoint" s.err
'

test_done
