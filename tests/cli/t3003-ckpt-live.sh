#!/bin/sh
test_description='reading a checkpoint root while a writer moves latest

ckpt-merge, ckpt-merge --check and gpu-train --init-from resolve latest
(or a root) to one step once, and check and read that step, however
latest moves meanwhile; a step removed under a reader (ckpt-prune) is
reported as removed, not as damaged; a root with only unfinished steps
says so. The races are made deterministic by a shim preloaded into the
reader, which moves latest (or removes the step) right after the first
open of a given file.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

# After the first successful open of a file whose name ends in $SHIM_ON,
# run $SHIM_RUN (once, without the shim).
cat >shim.c <<\EOF
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static void fire(const char *path)
{
	const char *on = getenv("SHIM_ON"), *run = getenv("SHIM_RUN");
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t a = strlen(base), b = on ? strlen(on) : 0;
	if (!on || !run || a < b || strcmp(base + a - b, on))
		return;
	char *cmd = strdup(run);
	unsetenv("SHIM_RUN");
	unsetenv("LD_PRELOAD");
	if (!cmd || system(cmd) != 0)
		abort();
	free(cmd);
}

static mode_t mode_of(int fl, va_list ap)
{
	return fl & (O_CREAT | O_TMPFILE) ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN(name)                                                         \
	int name(const char *p, int fl, ...)                               \
	{                                                                  \
		static int (*real)(const char *, int, ...);                \
		va_list ap;                                                \
		va_start(ap, fl);                                          \
		mode_t m = mode_of(fl, ap);                                \
		va_end(ap);                                                \
		if (!real)                                                 \
			real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name); \
		int fd = real(p, fl, m);                                   \
		if (fd >= 0)                                               \
			fire(p);                                           \
		return fd;                                                 \
	}
#define OPENAT(name)                                                       \
	int name(int d, const char *p, int fl, ...)                        \
	{                                                                  \
		static int (*real)(int, const char *, int, ...);           \
		va_list ap;                                                \
		va_start(ap, fl);                                          \
		mode_t m = mode_of(fl, ap);                                \
		va_end(ap);                                                \
		if (!real)                                                 \
			real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name); \
		int fd = real(d, p, fl, m);                                \
		if (fd >= 0)                                               \
			fire(p);                                           \
		return fd;                                                 \
	}
OPEN(open)
OPEN(open64)
OPENAT(openat)
OPENAT(openat64)
EOF
# LD_PRELOAD splits at spaces, and the trash directory's name has one.
shim=$SHARNESS_TEST_DIRECTORY/t3003-shim.so
${CC:-cc} -shared -fPIC -o "$shim" shim.c -ldl || error "cannot build the test shim"
# shimmed ON RUN CMD...: CMD, and RUN once CMD has opened a file named *ON
shimmed() {
	on=$1 run=$2 && shift 2 &&
	SHIM_ON=$on SHIM_RUN=$run LD_PRELOAD=$shim \
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "$@"
}
# latest on step 1, and the move to step 2 ready (rename(2), as a writer does)
MOVE="mv -T r/.next r/latest"
at_step1() {
	ln -sfn step-00000001 r/latest && ln -sfn step-00000002 r/.next
}

test_expect_success 'setup: two committed steps of a tiny run' '
	train_data &&
	gpu-train --data train.bin $TINY --batch 2 --steps 2 --ckpt-every 1 --ckpt-dir r -q &&
	test "$(readlink r/latest)" = step-00000002 &&
	! cmp -s r/step-00000001/model.safetensors r/step-00000002/model.safetensors &&
	ckpt-merge -q r/step-00000001 -o one.safetensors
'

test_expect_success 'ckpt-merge --check latest: COMMIT and files of one step, latest moving' '
	at_step1 &&
	shimmed COMMIT "$MOVE" ckpt-merge -q --check r/latest &&
	test "$(readlink r/latest)" = step-00000002
'

test_expect_success 'ckpt-merge latest: the step checked is the step merged' '
	at_step1 &&
	shimmed COMMIT "$MOVE" ckpt-merge -q r/latest -o m1.safetensors &&
	test "$(readlink r/latest)" = step-00000002 &&
	cmp one.safetensors m1.safetensors &&
	at_step1 &&
	shimmed model.safetensors "$MOVE" ckpt-merge -q r/latest -o m2.safetensors &&
	cmp one.safetensors m2.safetensors
'

test_expect_success 'gpu-train --init-from latest: config, COMMIT and tensors of one step' '
	E="--eval-only --data train.bin --batch 2 --seq 16 --eval-batches 2 --json" &&
	gpu-train $E --init-from r/step-00000001 >e1.json &&
	at_step1 &&
	shimmed COMMIT "$MOVE" gpu-train $E --init-from r/latest >el.json &&
	jq -r "select(.event == \"eval\") | .loss" e1.json >expect &&
	jq -r "select(.event == \"eval\") | .loss" el.json >actual &&
	test_cmp expect actual &&
	at_step1 &&
	shimmed COMMIT "$MOVE" gpu-train $E --init-from r >er.json &&
	jq -r "select(.event == \"eval\") | .loss" er.json >actual &&
	test_cmp expect actual
'

test_expect_success 'a root is one step: the step read is the step checked' '
	cp -R r d &&
	f=d/step-00000001/model.safetensors &&
	printf "\377" | dd of=$f bs=1 seek=$(($(wc -c <$f) - 1)) conv=notrunc 2>/dev/null &&
	ln -sfn step-00000001 d/latest && ln -sfn step-00000002 d/.next &&
	echo "ckpt-merge: checkpoint '\''d/step-00000001'\'': '\''model.safetensors'\'' does not match its XXH3 in COMMIT" >expect &&
	test_expect_code 1 shimmed model.safetensors "mv -T d/.next d/latest" \
		ckpt-merge -q d -o bad.safetensors 2>err &&
	test_cmp expect err &&
	! test -e bad.safetensors
'

# Removed after opening COMMIT: found by gk_ckpt_open, which reads the
# files COMMIT lists; after optim.safetensors (which only the check reads):
# by the check.
test_expect_success 'a step removed while it is read is reported as removed' '
	rm -rf p && cp -R r p &&
	ln -sfn step-00000001 p/latest &&
	echo "ckpt-merge: read '\''p/latest'\'': its step '\''p/step-00000001'\'' was removed while being read (by ckpt-prune?)" >expect &&
	test_expect_code 1 shimmed COMMIT \
		"mv p/step-00000001 p/.deleting-step-00000001.1 && rm -r p/.deleting-step-00000001.1" \
		ckpt-merge -q --check p/latest 2>err &&
	test_cmp expect err &&
	rm -rf p && cp -R r p &&
	ln -sfn step-00000001 p/latest &&
	echo "ckpt-merge: checkpoint '\''p/step-00000001'\'': removed while being read (by ckpt-prune?)" >expect &&
	test_expect_code 1 shimmed optim.safetensors \
		"mv p/step-00000001 p/.deleting-step-00000001.1 && rm -r p/.deleting-step-00000001.1" \
		ckpt-merge -q --check p/latest 2>err &&
	test_cmp expect err
'

test_expect_success 'gpu-train --init-from latest: a step pruned under it is reported as removed' '
	E="--eval-only --data train.bin --batch 2 --seq 16 --eval-batches 2" &&
	for on in config.json model.safetensors; do
		rm -rf q && cp -R r q && ln -sfn step-00000001 q/latest &&
		echo "gpu-train: checkpoint '\''q/step-00000001'\'' (what '\''q/latest'\'' named): removed while being read (by ckpt-prune?); run again to read the newest" >expect &&
		test_expect_code 1 shimmed $on \
			"mv q/step-00000001 q/.deleting-step-00000001.1 && rm -r q/.deleting-step-00000001.1" \
			gpu-train $E --init-from q/latest 2>err &&
		test_cmp expect err || return 1
	done
'

test_expect_success 'a root with only unfinished steps: no committed checkpoint' '
	mkdir -p w/step-00000003 w/.step-00000004.tmp-abc &&
	cp one.safetensors w/step-00000003/model.safetensors &&
	msg="read '\''w'\'': no committed checkpoint (2 step directories without COMMIT: still being written, or left by a killed run)" &&
	echo "ckpt-merge: $msg" >expect &&
	test_expect_code 1 ckpt-merge --check w 2>err &&
	test_cmp expect err &&
	test_expect_code 1 ckpt-merge w -o w.safetensors 2>err &&
	test_cmp expect err &&
	echo "mem-estimate: $msg" >expect &&
	test_expect_code 1 mem-estimate --from w 2>err &&
	test_cmp expect err &&
	echo "gpu-train: $msg" >expect &&
	test_expect_code 1 gpu-train --eval-only --init-from w --data train.bin --seq 8 2>err &&
	test_cmp expect err &&
	ln -sfn step-00000003 w/latest &&
	echo "gpu-train: read '\''w/latest'\'': incomplete checkpoint (no COMMIT)" >expect &&
	test_expect_code 1 gpu-train --eval-only --init-from w/latest --data train.bin --seq 8 2>err &&
	test_cmp expect err &&
	rm w/latest &&
	rmdir w/.step-00000004.tmp-abc &&
	echo "ckpt-merge: read '\''w'\'': no committed checkpoint (1 step directory without COMMIT: still being written, or left by a killed run)" >expect &&
	test_expect_code 1 ckpt-merge --check w 2>err &&
	test_cmp expect err
'

test_done
