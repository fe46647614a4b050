#!/bin/sh
test_description='gpu-train --offload optimizer:DIR with --pp and --tp

Each rank'"'"'s share of the optimizer state (its pieces of its stage'"'"'s
or its tensor slice'"'"'s segments over its data-parallel group) lives in
its file under DIR, streamed a chunk at a time. Losses, gradient norms,
the model and the moments of a checkpoint equal the same grid'"'"'s without
offload bit for bit: pp 2 x dp 2 and tp 2 x dp 2 under ZeRO 1 and 2,
tp 2 x dp 2 under ZeRO-3, with accumulation. A chain of resumes across
layouts (pp 2 x dp 2 under ZeRO-1 offloaded, one rank without, tp 2 x
dp 2 under ZeRO-0 and pp 2 x dp 2 under ZeRO-2 offloaded) is the chain
without offload bit for bit, leg by leg, and continues the run of one
rank within 1e-5. Every rank'"'"'s file is mem-estimate
--offload optimizer'"'"'s state for its stage (and the padded vocabulary
rows mem-estimate does not count); rank 0 accounts optimizer 0 and that
state, and at tp 2 x dp 2 under ZeRO 1 to 3 mem-estimate'"'"'s model
states. A missing DIR, or one a single rank cannot write, fails every
rank with one message.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

# 1K chunks (256 floats) cut every piece in several places; batch 2 on
# each of 2 data-parallel groups, 2 micro-batches a step
S="--data train.bin $TINY --clip 1 --json --grad-accum 2"
A="$S --steps 3 --batch 2"
OFF="--offload optimizer:off --offload-chunk 1K"

# nothing left in the offload directory
off_empty() {
	test -z "$(ls -A off)" || { ls -A off; return 1; }
}

# a grid's run without and with offload
both() {
	name=$1
	shift
	mpi 4 $A "$@" --ckpt-dir n$name >n$name.json &&
	mpi 4 $A "$@" --ckpt-dir o$name $OFF >o$name.json &&
	same_run n$name o$name &&
	off_empty
}

test_expect_success 'data' '
	train_data &&
	mkdir off
'

# (pp 2 x dp 2 under ZeRO 1 and 2 and tp 2 x dp 2 under ZeRO-0 are legs
# of the resume chain below, compared there.) Rank 0's model states are
# mem-estimate --tp 2 --dp 2 --offload optimizer's, its offloaded state
# host_ram's share of one of the 4 ranks, its file that and its share of
# the padded vocabulary rows, (Vpad - V) C / (tp dp) floats of each moment.
test_expect_success MPI 'tp 2 x dp 2, ZeRO 1, 2 and 3, accumulation: bit for bit with and without offload; rank 0'"'"'s state mem-estimate'"'"'s' '
	both tz1 --tp 2 --zero 1 &&
	both tz2 --tp 2 --zero 2 &&
	both tz3 --tp 2 --zero 3 &&
	start_config otz1.json cfgt.json &&
	for z in 1 2 3; do
		mem-estimate --config cfgt.json --precision f32 -b 2 -s 16 --grad-accum 2 --no-dropout \
			--zero $z --dp 2 --tp 2 --offload optimizer --gpus-per-node 4 --json >met$z.json ||
		return 1
	done &&
	python3 - <<-\PY
	import json
	for z in (1, 2, 3):
	    st = next(json.loads(l) for l in open("otz%d.json" % z) if "\"start\"" in l)
	    me = json.load(open("met%d.json" % z))["bytes"]
	    m, o = st["memory"], st["offload"]
	    for k in ("parameters", "gradients", "optimizer"):
	        assert m[k] == me[k], (z, k, m, me)
	    assert m["optimizer"] == 0 and o["state"] == me["host_ram"] // 4, (z, o, me)
	    C, V = st["hidden"], st["vocab"]
	    Vpad = (V + 127) // 128 * 128
	    assert o["file_bytes"] == o["state"] + 8 * (Vpad - V) * C // 4, (z, o)
	print("ok")
	PY
'

# Steps 1-2 at pp 2 x dp 2 (ZeRO-1) offloaded, 3-4 on one rank without,
# 5-6 at tp 2 x dp 2 (ZeRO-0: each rank its slices of the moments, sent
# to its group's files from its rank 0's) and 7-8 at pp 2 x dp 2 (ZeRO-2:
# each rank its pieces of its stage's range and of wte) offloaded: each
# leg reads the last one's checkpoint.
chain() {
	c=$1 off=$2
	mpi 4 $S --batch 2 --steps 8 --until 2 --pp 2 --zero 1 --ckpt-dir $c $off >$c.1.json &&
	gpu-train $S --batch 4 --steps 8 --until 4 --resume --ckpt-dir $c >$c.2.json &&
	mpi 4 $S --batch 2 --steps 8 --until 6 --tp 2 --resume --ckpt-dir $c $off >$c.3.json &&
	mpi 4 $S --batch 2 --steps 8 --pp 2 --zero 2 --resume --ckpt-dir $c $off >$c.4.json &&
	for i in 1 2 3 4; do steps $c.$i.json; done >$c.steps &&
	test $(wc -l <$c.steps) = 8
}

test_expect_success MPI 'resume across layouts: offloaded pp 2 x dp 2 -> one rank -> offloaded tp 2 x dp 2 -> offloaded pp 2 x dp 2, each leg bit for bit with the same without offload' '
	chain plain "" &&
	chain moved "$OFF" &&
	test_cmp plain.steps moved.steps &&
	for s in 2 4 6 8; do
		d=step-0000000$s &&
		ls plain/$d/optim.safetensors &&
		for f in plain/$d/*.safetensors; do
			cmp "$f" "moved/$d/${f##*/}" || return 1
		done || return 1
	done &&
	off_empty &&
	gpu-train $S --batch 4 --steps 8 >one.json &&
	losses one.json >one &&
	jq ".[0]" moved.steps >moved.losses &&
	close_to moved.losses one 1e-5
'

# Every rank's file while the run holds its checkpoint's commit
# (GK_TEST_CKPT_COMMIT_WAIT): world rank r of pp 2 x dp 2 is stage r % 2.
# mem-estimate --pp-stage S --offload optimizer puts the 4 ranks' state
# in host_ram; the file adds the stage's share of the padded vocabulary
# rows (wte is on both stages), (Vpad - V) C / dp floats of each moment.
test_expect_success MPI 'every rank'"'"'s file is mem-estimate'"'"'s state for its stage; rank 0 accounts optimizer 0' '
	{
		GK_TEST_CKPT_COMMIT_WAIT=go timeout 120 mpirun --oversubscribe --bind-to none \
			-x GK_TEST_CKPT_COMMIT_WAIT -np 4 gpu-train $A --steps 1 --pp 2 --zero 1 \
			--ckpt-dir live $OFF >live.json &
	} &&
	four() { test $(ls -A off | wc -l) = 4; } &&
	test_wait_for 60 "the 4 offload files" four &&
	for r in 0 1 2 3; do
		echo $r $(stat -c %s off/.gpu-train-optim-rank-0000$r.tmp-*) || return 1
	done >sizes &&
	touch go &&
	wait &&
	off_empty &&
	start_config live.json cfg.json &&
	for s in 0 1; do
		mem-estimate --config cfg.json --precision f32 -b 2 -s 16 --grad-accum 2 --no-dropout \
			--zero 1 --dp 2 --pp 2 --pp-stage $s --offload optimizer --gpus-per-node 4 \
			--json >me$s.json &&
		mem-estimate --config cfg.json --precision f32 -b 2 -s 16 --grad-accum 2 --no-dropout \
			--zero 1 --dp 2 --pp 2 --pp-stage $s --gpus-per-node 4 --json >plain$s.json ||
		return 1
	done &&
	python3 - <<-\PY
	import json
	st = next(json.loads(l) for l in open("live.json") if "\"start\"" in l)
	C, V = st["hidden"], st["vocab"]
	Vpad = (V + 127) // 128 * 128
	me = [json.load(open("me%d.json" % s))["bytes"] for s in (0, 1)]
	plain = [json.load(open("plain%d.json" % s))["bytes"] for s in (0, 1)]
	for s in (0, 1):
	    assert me[s]["optimizer"] == 0, me[s]
	    # the state offloaded is the state held without offload
	    assert me[s]["host_ram"] == 4 * plain[s]["optimizer"], (me[s], plain[s])
	sizes = dict(map(int, l.split()) for l in open("sizes"))
	for r, size in sorted(sizes.items()):
	    s = r % 2
	    want = me[s]["host_ram"] // 4 + 8 * (Vpad - V) * C // 2
	    assert size == want, (r, size, want)
	m, o = st["memory"], st["offload"]
	assert m["optimizer"] == 0, m
	assert o["state"] == me[0]["host_ram"] // 4, (o, me[0])
	assert o["file_bytes"] == sizes[0], (o, sizes)
	print("files", sizes)
	PY
'

test_expect_success MPI 'a missing DIR: every rank fails before step 1, said once' '
	test_expect_code 1 mpi 4 $A --pp 2 --offload optimizer:nowhere >out 2>err &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	grep "^gpu-train: optimizer offload directory .nowhere.: No such file or directory (4 of 4 ranks; the first: rank 0 (dp 0, pp 0, tp 0))$" err &&
	! grep "\"step\"" out
'

# GK_SHIM_RANK's file under DIR cannot be created: EROFS, a read-only
# file system
cat >rdonly-shim.c <<\EOF
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MKOSTEMP(name)                                                          \
	int name(char *tmpl, int flags)                                         \
	{                                                                       \
		static int (*real)(char *, int);                                \
		const char *r = getenv("GK_SHIM_RANK"), *me = getenv("OMPI_COMM_WORLD_RANK"); \
		if (!real)                                                      \
			real = (int (*)(char *, int))dlsym(RTLD_NEXT, #name);  \
		if (r && me && !strcmp(r, me) && strstr(tmpl, "gpu-train-optim-rank-")) { \
			errno = EROFS;                                          \
			return -1;                                              \
		}                                                               \
		return real(tmpl, flags);                                       \
	}
MKOSTEMP(mkostemp)
MKOSTEMP(mkostemp64)
EOF
# LD_PRELOAD splits at spaces, and the trash directory's name may have one.
shim=$SHARNESS_TEST_DIRECTORY/t7128-rdonly-shim.so
${CC:-cc} -shared -fPIC -o "$shim" rdonly-shim.c -ldl || error "cannot build the test shim"
asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

test_expect_success MPI 'a DIR one rank cannot write (tp 2 x dp 2): every rank fails, said once, naming it' '
	test_expect_code 1 env LD_PRELOAD=$shim ASAN_OPTIONS=$asan GK_SHIM_RANK=3 \
		timeout 120 mpirun --oversubscribe --bind-to none -x LD_PRELOAD -x ASAN_OPTIONS \
		-x GK_SHIM_RANK -np 4 gpu-train $A --tp 2 --zero 1 $OFF >out 2>err &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	grep "^gpu-train: create .off/gpu-train-optim-rank-00003.: Read-only file system (1 of 4 ranks; rank 3 (dp 1, pp 0, tp 1))$" err &&
	! grep "\"step\"" out &&
	off_empty
'

test_done
