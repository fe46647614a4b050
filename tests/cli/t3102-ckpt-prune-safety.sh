#!/bin/sh
test_description='ckpt-prune: checkpoints being written, concurrent runs, crashes

The grace period for directories without COMMIT (measured by change
time, which touch -d cannot set back), the flock that keeps two runs
apart, and a run killed with SIGKILL in the middle of a removal.'
. "$(dirname "$0")/lib.sh"
. "$GK_TOP/tests/cli/lib-prune.sh"

# pending ROOT NAME: a checkpoint being written (no COMMIT yet)
pending() {
	mkdir -p "$1/$2" &&
	head -c 4096 /dev/urandom >"$1/$2/model.safetensors"
}

test_expect_success 'in-progress directories younger than the grace period are kept' '
	commit g1 1 && commit g1 2 &&
	pending g1 step-00000003 && pending g1 step-00000000 &&
	pending g1 ".step-00000004.tmp-a b" &&
	ckpt-prune --keep-last 1 g1 >out &&
	echo "removed step-00000001 (12.0 KiB)" >expect &&
	sed "s/(.*)/(12.0 KiB)/" out >actual &&
	test_cmp expect actual &&
	printf "./%s\n" .ckpt-prune.lock ".step-00000004.tmp-a b" step-00000000 \
		step-00000002 step-00000003 >expect &&
	listing g1 >actual &&
	test_cmp expect actual
'

test_expect_success 'backdating with touch -d does not make a directory look abandoned' '
	touch -d "3 days ago" g1/step-00000003 g1/step-00000003/* &&
	ckpt-prune --keep-last 1 -v g1 >out &&
	grep "^kept step-00000003 (no COMMIT, changed [0-9]s ago, grace 1h)$" out
'

# The one slow test: wait until the directories are 4 s old, then give
# step-00000003 fresh writes as a live writer would and run with a 3 s
# grace. Only the still ones go.
test_expect_success 'in-progress directories unchanged for the grace period are removed' '
	sleep 4 &&
	echo more >>g1/step-00000003/model.safetensors &&
	ckpt-prune --keep-last 1 --grace 3 g1 >out &&
	sed -n "s/^removed \(.*\) ([0-9.]* KiB, no COMMIT, unchanged for \([0-9]*\)s)$/\1|\2/p" out >got &&
	test $(wc -l <out) -eq 2 &&
	printf "%s\n" step-00000000 ".step-00000004.tmp-a b" >expect &&
	cut -d "|" -f 1 got >names && test_cmp expect names &&
	for secs in $(cut -d "|" -f 2 got); do test "$secs" -ge 3 || return 1; done &&
	printf "./%s\n" .ckpt-prune.lock step-00000002 step-00000003 >expect &&
	listing g1 >actual &&
	test_cmp expect actual
'

test_expect_success 'a staging directory with COMMIT still goes by the grace rule' '
	commit g2 1 && mkdir g2/.step-00000002.tmp-x && : >g2/.step-00000002.tmp-x/COMMIT &&
	ckpt-prune --keep-last 1 --grace 1h g2 >out &&
	test_must_be_empty out &&
	ckpt-prune --keep-last 1 --grace 0 g2 >out &&
	grep "^removed .step-00000002.tmp-x (.*, no COMMIT, unchanged for " out &&
	! test -e g2/.step-00000002.tmp-x && test -d g2/step-00000001
'

test_expect_success 'a concurrent run is refused by the lock: exit 0, nothing done' '
	for s in 1 2 3; do commit l1 $s || return 1; done &&
	: >l1/.ckpt-prune.lock &&
	flock l1/.ckpt-prune.lock ckpt-prune --keep-last 1 l1 >out 2>err &&
	test_must_be_empty out &&
	echo "ckpt-prune: warning: '\''l1'\'' is being pruned by another ckpt-prune; nothing done" >expect &&
	test_cmp expect err &&
	flock l1/.ckpt-prune.lock ckpt-prune -q --keep-last 1 l1 >out 2>err &&
	test_must_be_empty out && test_must_be_empty err &&
	test -d l1/step-00000001 &&
	ckpt-prune --keep-last 1 -q l1 &&
	! test -e l1/step-00000001
'

test_expect_success 'the lock is held while removing: a second run waits for nothing' '
	for s in 1 2 3; do commit l2 $s || return 1; done &&
	mkdir shim &&
	cat >shim/rm <<-\EOF &&
	#!/bin/sh
	# hold the removal until told to go on (20 s at most)
	: >"$SHIM_DIR/started"
	i=0
	while ! test -e "$SHIM_DIR/go" && test $i -lt 200; do sleep 0.1; i=$((i + 1)); done
	exec /bin/rm "$@"
	EOF
	chmod +x shim/rm &&
	test_when_finished ": >shim/go" &&
	SHIM_DIR=$PWD/shim PATH="$PWD/shim:$PATH" ckpt-prune --keep-last 1 l2 >first &
	pid=$! &&
	i=0 && while ! test -e shim/started && test $i -lt 200; do sleep 0.1; i=$((i + 1)); done &&
	ckpt-prune --keep-last 1 l2 >out 2>err &&
	test_must_be_empty out &&
	grep "is being pruned by another ckpt-prune" err &&
	: >shim/go && wait $pid &&
	printf "removed step-0000000%d (16.0 KiB)\n" 1 2 >expect &&
	sed "s/(.*)/(16.0 KiB)/" first >actual &&
	test_cmp expect actual
'

test_expect_success 'a symlinked lock file is refused, not followed' '
	commit l3 1 && commit l3 2 &&
	ln -s ../elsewhere-lock l3/.ckpt-prune.lock &&
	test_expect_code 1 ckpt-prune --keep-last 1 l3 >out 2>err &&
	echo "ckpt-prune: lock '\''l3/.ckpt-prune.lock'\'': a symbolic link; refusing to follow it" >expect &&
	test_cmp expect err &&
	! test -e elsewhere-lock && test -d l3/step-00000001
'

test_expect_success '--lock FILE replaces DIR/.ckpt-prune.lock' '
	commit l4 1 && commit l4 2 &&
	: >l4.lock &&
	flock l4.lock ckpt-prune --lock l4.lock --keep-last 1 l4 2>err &&
	grep "is being pruned by another ckpt-prune" err &&
	test -d l4/step-00000001 &&
	ckpt-prune --lock l4.lock --keep-last 1 -q l4 &&
	! test -e l4/step-00000001 && ! test -e l4/.ckpt-prune.lock &&
	test_expect_code 1 ckpt-prune --lock nodir/x --keep-last 1 l4 2>err &&
	echo "ckpt-prune: lock '\''nodir/x'\'': No such file or directory" >expect &&
	test_cmp expect err &&
	test_expect_code 2 ckpt-prune --lock "" --keep-last 1 l4 2>err &&
	echo "ckpt-prune: --lock '\'''\'': an empty file name" >expect &&
	head -n 1 err >first && test_cmp expect first
'

test_expect_success 'SIGKILL in the middle of a removal leaves no half checkpoint' '
	commit k1 1 && commit k1 2 && commit k1 3 &&
	mkdir kshim &&
	cat >kshim/rm <<-\EOF &&
	#!/bin/sh
	# delete part of the checkpoint, then the prune dies
	for a; do t=$a; done
	/bin/rm -f "$t/model.safetensors"
	i=0
	while ! test -s "$KSHIM/pid" && test $i -lt 200; do sleep 0.1; i=$((i + 1)); done
	kill -9 "$(cat "$KSHIM/pid")"
	exit 1
	EOF
	chmod +x kshim/rm &&
	{
		KSHIM=$PWD/kshim PATH="$PWD/kshim:$PATH" ckpt-prune --keep-last 1 k1 &
		echo $! >kshim/pid
		wait $!
		echo $? >rc
	} &&
	echo 137 >expect && test_cmp expect rc &&
	! test -e k1/step-00000001 &&
	set -- k1/.deleting-step-00000001.* &&
	test $# -eq 1 && test -d "$1" &&
	test -f "$1/COMMIT" && ! test -e "$1/model.safetensors" &&
	test -d k1/step-00000002 && test -d k1/step-00000003
'

test_expect_success 'the next run removes the leftover, then carries on' '
	ckpt-prune --keep-last 1 k1 >out &&
	sed "s/ (.*)$//" out >actual &&
	cat >expect <<-\EOF &&
	removed .deleting-step-00000001.PID
	removed step-00000002
	EOF
	sed "s/^\(removed .deleting-step-00000001\)\.[0-9]*$/\1.PID/" actual >actual2 &&
	test_cmp expect actual2 &&
	grep "left by an interrupted ckpt-prune)$" out &&
	printf "./%s\n" .ckpt-prune.lock step-00000003 >expect &&
	listing k1 >actual &&
	test_cmp expect actual
'

test_expect_success 'a failed removal is reported (exit 1); the others still go' '
	for s in 1 2 3; do commit f1 $s || return 1; done &&
	mkdir fshim &&
	cat >fshim/rm <<-\EOF &&
	#!/bin/sh
	for a; do t=$a; done
	case $t in
	*step-00000001*) echo "rm: cannot remove '\''$t/x'\'': Permission denied" >&2; exit 1 ;;
	esac
	exec /bin/rm "$@"
	EOF
	chmod +x fshim/rm &&
	test_expect_code 1 env PATH="$PWD/fshim:$PATH" ckpt-prune --keep-last 1 f1 >out 2>err &&
	echo "ckpt-prune: remove '\''step-00000001'\'': Permission denied" >expect &&
	test_cmp expect err &&
	grep "^removed step-00000002 " out && test $(wc -l <out) -eq 1 &&
	! test -e f1/step-00000001 && ! test -e f1/step-00000002 &&
	set -- f1/.deleting-step-00000001.* && test -d "$1"
'

test_expect_success '-q prints nothing, even while removing and warning' '
	commit q1 1 && commit q1 2 && ln -s nowhere q1/latest &&
	ckpt-prune -q --keep-last 1 q1 >out 2>err &&
	test_must_be_empty out && test_must_be_empty err &&
	! test -e q1/step-00000001
'

test_done
