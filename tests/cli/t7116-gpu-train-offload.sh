#!/bin/sh
test_description='gpu-train --offload optimizer:DIR: the moments in files

AdamW'"'"'s moments of each rank'"'"'s range live in a file under DIR and
the update streams them through a buffer of --offload-chunk bytes of each.
Losses, gradient norms, the model and the moments of a checkpoint equal
the same run'"'"'s without offload bit for bit, at 1, 2 and 3 ranks and
ZeRO 0 to 3, with accumulation and clipping; runs resume into and
out of offload bit for bit. The accounting says optimizer 0 (mem-estimate
--offload optimizer) and the state mem-estimate puts in host_ram, and the
peak RSS falls by the moments. A directory missing, not a directory or
too small, a file past ulimit -f, and a write that fails during a step
fail the run with the path named and nothing left in DIR.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

# 1K chunks (256 floats) cut every tensor and rank range in several places
A="--data train.bin $TINY --steps 4 --json --clip 1"
OFF="--offload optimizer:off --offload-chunk 1K"

# nothing left in the offload directory
off_empty() {
	test -z "$(ls -A off)" || { ls -A off; return 1; }
}

test_expect_success 'data' '
	train_data &&
	mkdir off
'

test_expect_success 'one rank: the same losses, model and moments as without offload' '
	gpu-train $A --grad-accum 2 --ckpt-dir n1 >n1.json &&
	gpu-train $A --grad-accum 2 --ckpt-dir o1 $OFF >o1.json &&
	same_run n1 o1 &&
	off_empty &&
	jq -se "map(select(.event == \"start\"))[0] | .offload.file | startswith(\"off/.gpu-train-optim-rank-00000.tmp-\")" o1.json
'

for z in 0 1 2 3; do
	test_expect_success MPI "2 ranks, --zero $z, accumulation: bit for bit with and without offload" "
		mpi 2 $A --grad-accum 2 --zero $z --ckpt-dir n2z$z >n2z$z.json &&
		mpi 2 $A --grad-accum 2 --zero $z --ckpt-dir o2z$z $OFF >o2z$z.json &&
		same_run n2z$z o2z$z &&
		off_empty
	"
done

test_expect_success MPI '3 ranks, --zero 1 (ranges that do not divide the tensors)' '
	mpi 3 $A --zero 1 --ckpt-dir n3 >n3.json &&
	mpi 3 $A --zero 1 --ckpt-dir o3 $OFF >o3.json &&
	same_run n3 o3 &&
	off_empty
'

# Two steps, a checkpoint, two more: the losses of the last two and the
# final checkpoint are those of the four steps of the same run without a
# break (name: the runs above, with --grad-accum 2).
resume_across() {
	full=$1 first=$2 second=$3 name=$4
	shift 4
	"$@" $A --grad-accum 2 --until 2 --ckpt-dir $name $first >$name.1.json &&
	"$@" $A --grad-accum 2 --resume --ckpt-dir $name $second >$name.json &&
	steps $full.json | tail -n 2 >$name.want &&
	steps $name.json >$name.got &&
	test_cmp $name.want $name.got &&
	for f in $full/latest/*.safetensors; do
		cmp "$f" "$name/latest/${f##*/}" || return 1
	done
}

test_expect_success 'one rank: resume into and out of offload, bit for bit' '
	resume_across n1 "" "$OFF" in1 gpu-train &&
	resume_across n1 "$OFF" "" out1 gpu-train &&
	off_empty
'

# Into offload, the moments go from the checkpoint into the files (and
# under ZeRO-0, rank 0's to every rank's file, a chunk at a time); out of
# it, the checkpoint is the one without, compared above.
for z in 0 1; do
	test_expect_success MPI "2 ranks, --zero $z: resume into offload, bit for bit" "
		resume_across n2z$z '' '$OFF' in2z$z mpi 2 --zero $z &&
		off_empty
	"
done

# mem-estimate --offload optimizer: optimizer 0 on the device and the
# states in host_ram (per node: --gpus-per-node times a rank's); the runs
# of 2 ranks above, with and without offload.
test_expect_success MPI 'the accounting: optimizer 0 and the offloaded state are mem-estimate --offload optimizer'"'"'s' '
	for z in 0 1; do
		mem-estimate --config n1/latest/config.json --precision f32 -b 4 -s 16 --no-dropout \
			--zero $z --dp 2 --offload optimizer --gpus-per-node 2 --json >me$z.json ||
		return 1
	done &&
	python3 - <<-\PY
	import json
	def start(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)
	for z in (0, 1):
	    off, plain = start("o2z%d.json" % z), start("n2z%d.json" % z)
	    me = json.load(open("me%d.json" % z))["bytes"]
	    m, o = off["memory"], off["offload"]
	    assert m["optimizer"] == me["optimizer"] == 0, (m, me)
	    assert o["state"] * 2 == me["host_ram"], (o, me)
	    # the state a run without offload holds in memory
	    assert o["state"] == plain["memory"]["optimizer"], (o, plain["memory"])
	    # the file: both moments of the range, padding included
	    per = off["params_padded"] // (2 if z else 1)
	    assert o["file_bytes"] == 8 * per, (o, per)
	    # the buffer: a 1K chunk of each moment, in the workspace
	    assert o["buffer"] == 2048, o
	    assert m["workspace"] == plain["memory"]["workspace"] + 2048, (m, plain["memory"])
	    assert plain["memory"]["total"] - m["total"] == 8 * per - 2048, (m, plain["memory"])
	print("ok")
	PY
'

# Each run's peak RSS, through a wrapper that runs it as a child.
cat >rss.py <<'PYEOF'
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)
PYEOF

if ! ldd "$(command -v gpu-train)" 2>/dev/null | grep -q libasan; then
	test_set_prereq NOASAN
fi

# 6.4M parameters: 51 MB of moments in memory without offload, a buffer
# of 8 MiB (the default 4M chunks) with it; the peaks must show at least
# 30 MiB of the 41 MiB difference.
test_expect_success NOASAN 'the moments leave memory: peak RSS falls by them, the buffer stays bounded' '
	B="--data train.bin --layers 2 --hidden 512 --heads 4 --positions 16 --seq 16 --batch 1 --steps 2 --threads 1 --json" &&
	python3 rss.py rss.plain gpu-train $B >big.plain.json &&
	python3 rss.py rss.off gpu-train $B --offload optimizer:off >big.off.json &&
	off_empty &&
	jq -se "map(select(.event == \"start\"))[0] | .offload.buffer == 8388608 and .memory.optimizer == 0" big.off.json &&
	jq -se "map(select(.event == \"start\"))[0] | .memory.optimizer > 50000000" big.plain.json &&
	test $(cat rss.off) -lt $(($(cat rss.plain) - 30 * 1024)) || {
		echo "peak RSS $(cat rss.off) KiB with offload, $(cat rss.plain) KiB without"
		return 1
	}
'

# the offload file of a run in progress, and its steps so far
has_file() {
	test -n "$(ls -A off)"
}
stepped() {
	grep -q "\"event\":\"step\"" "$1"
}

test_expect_success 'SIGTERM: the run checkpoints and stops, its file removed' '
	gpu-train $A --steps 100000 --ckpt-dir sig $OFF >sig.json 2>sig.err &
	pid=$! &&
	test_wait_for 60 "a step of the offloaded run" stepped sig.json &&
	has_file &&
	kill -TERM $pid &&
	wait $pid &&
	test -f sig/latest/COMMIT &&
	off_empty
'

test_expect_success 'SIGKILL leaves the file, and the next run neither reads it nor minds it' '
	gpu-train $A --steps 100000 $OFF >kill.json 2>kill.err &
	pid=$! &&
	test_wait_for 60 "a step of the offloaded run" stepped kill.json &&
	kill -KILL $pid &&
	{ wait $pid; test $? = 137; } &&
	stale=$(ls -A off) &&
	test -n "$stale" &&
	gpu-train $A --grad-accum 2 $OFF >after.json &&
	steps after.json >after.steps && steps n1.json >n1.steps.again &&
	test_cmp n1.steps.again after.steps &&
	test "$(ls -A off)" = "$stale" &&
	rm -f off/$stale
'

test_expect_success 'usage: optimizer without DIR, DIR empty, a GPU, a chunk without offload' '
	test_expect_code 2 gpu-train $A --offload optimizer 2>err &&
	grep "optimizer:DIR" err &&
	test_expect_code 2 gpu-train $A --offload optimizer: 2>err &&
	grep "not none, optimizer or optimizer:DIR" err &&
	test_expect_code 2 gpu-train $A --offload optimizer:off --device cuda 2>err &&
	grep "CPU backend only" err &&
	test_expect_code 2 gpu-train $A --offload-chunk 4K 2>err &&
	grep "give that too" err &&
	test_expect_code 2 gpu-train $A --offload optimizer:off --offload-chunk 12 2>err &&
	grep "not between 1K and 1T" err &&
	gpu-train $A --offload none --steps 1 >none.json
'

test_expect_success 'a missing DIR, or a file: refused before step 1, naming it (a run that trains nothing makes no file)' '
	test_expect_code 1 gpu-train $A --offload optimizer:nowhere 2>err &&
	grep "optimizer offload directory '"'"'nowhere'"'"': No such file or directory" err &&
	test_expect_code 1 gpu-train $A --offload optimizer:train.bin 2>err &&
	grep "'"'"'train.bin'"'"': not a directory" err &&
	gpu-train --eval-only --data train.bin --init-from n1/latest --offload optimizer:nowhere \
		>eval.out
'

# The shim: GK_SHIM_FREE=BYTES makes statvfs report that much free space;
# GK_SHIM_EIO=N fails the Nth pwrite to the offload file and every one
# after with EIO (not counting glibc's one-byte writes where
# posix_fallocate is emulated) (on rank GK_SHIM_RANK only, when set); GK_SHIM_RDONLY
# fails the file'"'"'s creation with EROFS, a read-only file system.
cat >offload-shim.c <<\EOF
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

static int off_fd = -1, writes;

static int mine(void)
{
	const char *r = getenv("GK_SHIM_RANK"), *me = getenv("OMPI_COMM_WORLD_RANK");
	return !r || (me && !strcmp(r, me));
}

static int made(char *tmpl, int fd)
{
	if (fd >= 0 && strstr(tmpl, "gpu-train-optim-rank-"))
		off_fd = fd;
	return fd;
}

#define MKOSTEMP(name)                                                         \
	int name(char *tmpl, int flags)                                        \
	{                                                                      \
		static int (*real)(char *, int);                               \
		if (!real)                                                     \
			real = (int (*)(char *, int))dlsym(RTLD_NEXT, #name); \
		if (getenv("GK_SHIM_RDONLY") && strstr(tmpl, "gpu-train-optim-rank-")) { \
			errno = EROFS;                                         \
			return -1;                                             \
		}                                                              \
		return made(tmpl, real(tmpl, flags));                          \
	}
MKOSTEMP(mkostemp)
MKOSTEMP(mkostemp64)

#define PWRITE(name)                                                                 \
	ssize_t name(int fd, const void *buf, size_t n, off_t off)                   \
	{                                                                            \
		static ssize_t (*real)(int, const void *, size_t, off_t);            \
		if (!real)                                                           \
			real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(  \
				RTLD_NEXT, #name);                                   \
		const char *e = getenv("GK_SHIM_EIO");                               \
		if (e && fd == off_fd && n > 1 && mine() && ++writes >= atoi(e)) {   \
			errno = EIO;                                                 \
			return -1;                                                   \
		}                                                                    \
		return real(fd, buf, n, off);                                        \
	}
PWRITE(pwrite)
PWRITE(pwrite64)

#define STATVFS(name, type)                                                     \
	int name(const char *path, struct type *st)                             \
	{                                                                       \
		static int (*real)(const char *, struct type *);                \
		if (!real)                                                      \
			real = (int (*)(const char *, struct type *))dlsym(     \
				RTLD_NEXT, #name);                              \
		int rc = real(path, st);                                        \
		const char *f = getenv("GK_SHIM_FREE");                         \
		if (rc == 0 && f && mine())                                     \
			st->f_bavail = strtoull(f, NULL, 10) / st->f_frsize;    \
		return rc;                                                      \
	}
STATVFS(statvfs, statvfs)
STATVFS(statvfs64, statvfs64)
EOF
# LD_PRELOAD splits at spaces, and the trash directory's name may have one.
shim=$SHARNESS_TEST_DIRECTORY/t7116-offload-shim.so
${CC:-cc} -shared -fPIC -o "$shim" offload-shim.c -ldl || error "cannot build the test shim"
asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

test_expect_success 'a full disk (statvfs says 64K free): refused before step 1 with the figures' '
	test_expect_code 1 env LD_PRELOAD=$shim ASAN_OPTIONS=$asan GK_SHIM_FREE=65536 \
		gpu-train $A $OFF 2>err &&
	grep "optimizer offload directory '"'"'off'"'"': 64.0 KiB free, and this rank'"'"'s optimizer state needs 303 KiB (free space there" err &&
	! grep "\"step\"" err &&
	off_empty
'

test_expect_success 'an unwritable DIR (a read-only file system): refused, naming it' '
	test_expect_code 1 env LD_PRELOAD=$shim ASAN_OPTIONS=$asan GK_SHIM_RDONLY=1 \
		gpu-train $A $OFF >out 2>err &&
	grep "create '"'"'off/gpu-train-optim-rank-00000'"'"': Read-only file system" err &&
	! grep "\"step\"" out &&
	off_empty
'

test_expect_success 'a file past ulimit -f: refused before step 1, naming the file, nothing left' '
	(trap "" XFSZ; ulimit -f 100; test_expect_code 1 gpu-train $A $OFF >out 2>err) &&
	grep "optimizer offload: allocate 303 KiB in '"'"'off/.gpu-train-optim-rank-00000.tmp-[A-Za-z0-9]*'"'"': File too large" err &&
	! grep "\"step\"" out &&
	off_empty
'

# Writes of a step at 1K chunks: 2 moments x ceil(38816 / 256) = 304; the
# 400th is in step 2.
test_expect_success 'a write that fails in step 2: the run fails naming the file, nothing left' '
	test_expect_code 1 env LD_PRELOAD=$shim ASAN_OPTIONS=$asan GK_SHIM_EIO=400 \
		gpu-train $A $OFF >out 2>err &&
	grep "optimizer offload: write '"'"'off/.gpu-train-optim-rank-00000.tmp-[A-Za-z0-9]*'"'"': Input/output error" err &&
	test "$(jq -r "select(.event == \"step\") | .step" out)" = 1 &&
	off_empty
'

test_expect_success MPI 'one rank'"'"'s write fails under --zero 1: every rank stops, said once' '
	test_expect_code 1 env LD_PRELOAD=$shim ASAN_OPTIONS=$asan GK_SHIM_EIO=200 GK_SHIM_RANK=1 \
		timeout 120 mpirun --oversubscribe --bind-to none -x LD_PRELOAD -x ASAN_OPTIONS \
		-x GK_SHIM_EIO -x GK_SHIM_RANK -np 2 gpu-train $A --zero 1 $OFF >out 2>err &&
	test $(grep -c "optimizer offload: write '"'"'off/.gpu-train-optim-rank-00001.tmp-" err) = 1 &&
	test "$(jq -r "select(.event == \"step\") | .step" out)" = 1 &&
	off_empty
'

test_done
