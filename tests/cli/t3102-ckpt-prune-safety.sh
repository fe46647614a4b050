#!/bin/sh
test_description='ckpt-prune: checkpoints being written, concurrent runs, crashes

The grace period for directories without COMMIT (measured by change
time, which touch -d cannot set back), the flock that keeps two runs
apart, and a run killed with SIGKILL in the middle of a removal.'
. "$(dirname "$0")/lib.sh"
. "$GK_TOP/tests/cli/lib-prune.sh"

# The removal is held, cut short by SIGKILL or made to fail by a shim
# preloaded into ckpt-prune (it deletes through renameat and unlinkat):
#   SHIM=hold  the first rename waits for $SHIM_DIR/go (300 s at most),
#              after creating $SHIM_DIR/started
#   SHIM=kill  the first unlink deletes model.safetensors, then SIGKILL
#   SHIM=fail  removing a directory .deleting-step-00000001* fails (EACCES)
cat >shim.c <<\EOF
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *mode(void) { const char *m = getenv("SHIM"); return m ? m : ""; }

int renameat(int a, const char *from, int b, const char *to)
{
	static int (*real)(int, const char *, int, const char *);
	static int held;
	char p[4096];
	if (!real)
		real = (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
	if (!strcmp(mode(), "hold") && !held++) {
		snprintf(p, sizeof(p), "%s/started", getenv("SHIM_DIR"));
		close(open(p, O_WRONLY | O_CREAT, 0644));
		snprintf(p, sizeof(p), "%s/go", getenv("SHIM_DIR"));
		for (int i = 0; i < 3000 && access(p, F_OK) != 0; i++)
			usleep(100000);
	}
	return real(a, from, b, to);
}

int unlinkat(int fd, const char *name, int flags)
{
	static int (*real)(int, const char *, int);
	if (!real)
		real = (int (*)(int, const char *, int))dlsym(RTLD_NEXT, "unlinkat");
	if (!strcmp(mode(), "kill")) {
		real(fd, "model.safetensors", 0);
		kill(getpid(), SIGKILL);
	}
	if (!strcmp(mode(), "fail") && (flags & AT_REMOVEDIR) &&
	    !strncmp(name, ".deleting-step-00000001", 23)) {
		errno = EACCES;
		return -1;
	}
	return real(fd, name, flags);
}
EOF
# LD_PRELOAD splits at spaces, and the trash directory's name has one.
shim=$SHARNESS_TEST_DIRECTORY/t3102-shim.so
${CC:-cc} -shared -fPIC -o "$shim" shim.c -ldl || error "cannot build the test shim"
# shimmed MODE CMD...: CMD with the shim preloaded (the sanitizers' runtime
# need not come first in a test)
shimmed() {
	SHIM=$1 && shift &&
	SHIM=$SHIM LD_PRELOAD=$shim \
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "$@"
}

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
	test_when_finished ": >shim/go" &&
	SHIM_DIR=$PWD/shim shimmed hold ckpt-prune --keep-last 1 l2 >first &
	pid=$! &&
	test_wait_for 300 "the first ckpt-prune to hold its lock (shim/started)" test -e shim/started &&
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
	{
		shimmed kill ckpt-prune --keep-last 1 k1
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
	test_expect_code 1 shimmed fail ckpt-prune --keep-last 1 f1 >out 2>err &&
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

test_expect_success 'a lock file that is not a regular file is refused, without waiting' '
	commit n1 1 && commit n1 2 &&
	mkfifo fifo.lock && mkdir dir.lock &&
	test_expect_code 1 timeout 20 ckpt-prune --lock fifo.lock --keep-last 1 n1 >out 2>err &&
	echo "ckpt-prune: lock '\''fifo.lock'\'': not a regular file" >expect &&
	test_cmp expect err && test_must_be_empty out &&
	test_expect_code 1 ckpt-prune --lock dir.lock --keep-last 1 n1 2>err &&
	echo "ckpt-prune: lock '\''dir.lock'\'': Is a directory" >expect &&
	test_cmp expect err &&
	mkfifo n1/.ckpt-prune.lock &&
	test_expect_code 1 timeout 20 ckpt-prune --keep-last 1 n1 2>err &&
	echo "ckpt-prune: lock '\''n1/.ckpt-prune.lock'\'': not a regular file" >expect &&
	test_cmp expect err &&
	test -d n1/step-00000001
'

test_done
