#!/bin/sh
test_description='gpu-train: the same global batch gives the same losses

1 rank x batch 8 = 2 ranks x 4 = 1 rank x 4 with --grad-accum 2, and 3
ranks x 2 = 1 rank x 6 (token files give every world the same global
batch); ZeRO-1 equals ZeRO-0 bit for bit (the update is elementwise and
the reduced gradients are the same sums); overlap on and off agree bit
for bit; compressed gradients stay close (ZeRO-1'"'"'s reduce-scatter too).'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

A="--data train.bin $TINY --steps 6 --json --clip 1"

test_expect_success 'data' '
	train_data
'

test_expect_success '1 rank x batch 8' '
	gpu-train $A --batch 8 >one8.json &&
	losses one8.json >one8 &&
	test $(wc -l <one8) = 6
'

test_expect_success 'the loss falls' '
	python3 -c "import sys; l = [float(x) for x in open(\"one8\")]; sys.exit(not l[-1] < l[0])"
'

test_expect_success '1 rank x batch 4 x --grad-accum 2 = 1 x 8' '
	gpu-train $A --batch 4 --grad-accum 2 >acc.json &&
	losses acc.json >acc &&
	close_to acc one8 1e-5
'

test_expect_success MPI '2 ranks x batch 4 = 1 x 8' '
	mpi 2 $A --batch 4 >two4.json &&
	losses two4.json >two4 &&
	close_to two4 one8 1e-5
'

test_expect_success MPI '2 ranks, ZeRO-1 = ZeRO-0 bit for bit' '
	mpi 2 $A --batch 4 --zero 1 >z1.json &&
	losses z1.json >z1 &&
	test_cmp two4 z1
'

test_expect_success MPI '2 ranks, overlap off = on bit for bit (small buckets)' '
	mpi 2 $A --batch 4 --bucket 16K --overlap on >on.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .overlap == true" on.json &&
	mpi 2 $A --batch 4 --bucket 16K --no-overlap >off.json &&
	losses on.json >on && losses off.json >off &&
	test_cmp two4 on && test_cmp on off
'

test_expect_success MPI '3 ranks x 2 = 1 x 6, with ZeRO-1 (parameters not divisible by 3)' '
	gpu-train $A --batch 6 >one6.json &&
	mpi 3 $A --batch 2 --zero 1 >three.json &&
	losses one6.json >one6 && losses three.json >three &&
	jq -s -e "map(select(.event == \"start\"))[0].params_padded % 3 != 0" three.json &&
	close_to three one6 1e-5
'

test_expect_success MPI '3 ranks, ZeRO-1 buckets spanning owners: overlap on = off bit for bit, = ZeRO-0 within rounding' '
	mpi 3 $A --batch 2 --bucket 16K >z0.json &&
	mpi 3 $A --batch 2 --bucket 16K --zero 1 --overlap on >zon.json &&
	mpi 3 $A --batch 2 --bucket 16K --zero 1 --no-overlap >zoff.json &&
	losses z0.json >z0 && losses zon.json >zon && losses zoff.json >zoff &&
	test_cmp zon zoff &&
	close_to zon z0 1e-6 &&
	jq -s -e "map(select(.event == \"step\"))[-1].comm_ms > 0" zon.json
'

# mpi() starts ranks with --bind-to none: each sees every CPU of the
# test's set, and 2 ranks share them out. One rank takes them all: its
# threads say how many the machine gives (nproc, or fewer under a CPU
# quota, which the cgroup test below checks).
P="--data train.bin --layers 2 --hidden 32 --heads 2 --positions 33 --seq 16 --steps 1 --json"
test_expect_success MPI 'ranks that share their CPUs share them out: --threads, --overlap auto' '
	gpu-train $P >solo.json &&
	n=$(jq -s "map(select(.event == \"start\"))[0].threads" solo.json) &&
	test "$n" -ge 1 && test "$n" -le "$(nproc)" &&
	share=$((n / 2)) && { [ $share -ge 1 ] || share=1; } &&
	spare=$((n - 2 * share)) &&
	mpi 2 $P >p.json 2>err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .threads == $share and .overlap == ($spare > 0)" p.json &&
	! grep -q warning err &&
	mpi 2 $P --threads 1 >p1.json 2>err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .threads == 1 and .overlap == ($n > 2)" p1.json &&
	mpi 2 $P --threads $((share + 1)) --overlap on >p2.json 2>err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .threads == $((share + 1)) and .overlap" p2.json &&
	grep "warning: --threads $((share + 1)) is more than this rank.s share of its CPUs, $share ($n CPUs.*, shared by 2 ranks of the host)" err &&
	test_expect_code 2 gpu-train $P --overlap sometimes
'

# Ranks share CPUs when they share a kernel (its boot id), whatever
# their host names; they are on one host, for --overlap auto, when they
# share the kernel and the host name. Rank 1 runs in a UTS namespace of
# its own (another host name, the same kernel), then in a mount
# namespace that shows it a boot id of its own (the same host name,
# another machine, as containers started from one image may be).
unshare --uts true 2>/dev/null && test_set_prereq UTS
echo 00000000-0000-4000-8000-000000000001 >"$PWD/boot_id"
unshare -m sh -c "mount --bind '$PWD/boot_id' /proc/sys/kernel/random/boot_id" 2>/dev/null &&
	test_set_prereq MOUNTNS
test_expect_success MPI,UTS,MOUNTNS 'which ranks share CPUs: the boot id; which share a host: it and the host name' '
	n=$(jq -s "map(select(.event == \"start\"))[0].threads" solo.json) &&
	share=$((n / 2)) && { [ $share -ge 1 ] || share=1; } &&
	timeout 300 mpirun --oversubscribe --bind-to none -np 1 gpu-train $P : \
		-np 1 unshare --uts sh -c "hostname gk-t7101-other && exec gpu-train $P" >uts.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .threads == $share and .overlap" uts.json &&
	timeout 300 mpirun --oversubscribe --bind-to none -np 1 gpu-train $P : \
		-np 1 unshare -m sh -c "mount --bind boot_id /proc/sys/kernel/random/boot_id && exec gpu-train $P" \
		>boot.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .threads == $n and .overlap" boot.json
'

# A cgroup whose CPU quota is one CPU (root, 2 CPUs or more, and a cpu
# controller it may write: v1, or v2 with cpu enabled below the root).
cg=
if [ "$(id -u)" = 0 ] && [ "$(nproc)" -ge 2 ]; then
	if [ -w /sys/fs/cgroup/cpu ] && mkdir "/sys/fs/cgroup/cpu/gk-t7101-$$" 2>/dev/null; then
		cg=/sys/fs/cgroup/cpu/gk-t7101-$$
		{ echo 100000 >"$cg/cpu.cfs_period_us" && echo 100000 >"$cg/cpu.cfs_quota_us"; } 2>/dev/null ||
			{ rmdir "$cg"; cg=; }
	elif grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
	     mkdir "/sys/fs/cgroup/gk-t7101-$$" 2>/dev/null; then
		cg=/sys/fs/cgroup/gk-t7101-$$
		echo "100000 100000" 2>/dev/null >"$cg/cpu.max" || { rmdir "$cg"; cg=; }
	fi
fi
[ -n "$cg" ] && test_set_prereq CGROUP
test_expect_success CGROUP 'a cgroup CPU quota of one CPU (a container limit) caps the default threads' '
	sh -c "echo \$\$ >$cg/cgroup.procs && exec gpu-train $P" >q.json &&
	jq -s -e "map(select(.event == \"start\"))[0].threads == 1" q.json &&
	sh -c "echo \$\$ >$cg/cgroup.procs && exec gpu-train $P --threads 2" 2>err >/dev/null &&
	grep "warning: --threads 2 is more than the 1 CPU this rank may use, its cgroup.s CPU quota 1;" err &&
	gpu-train $P >noq.json &&
	test "$(jq -s "map(select(.event == \"start\"))[0].threads" noq.json)" -gt 1
'
[ -z "$cg" ] || rmdir "$cg" 2>/dev/null || :

for c in bf16 int8; do
	test_expect_success MPI "2 ranks, --compress $c: losses within 1e-2 of exact" "
		mpi 2 $A --batch 4 --compress $c >c.json &&
		losses c.json >c &&
		close_to c one8 1e-2
	"
	test_expect_success MPI "3 ranks, ZeRO-1 --compress $c: losses within 1e-2 of exact, not exact" "
		mpi 3 $A --batch 2 --zero 1 --compress $c >zc.json &&
		losses zc.json >zc &&
		close_to zc one6 1e-2 &&
		! test_cmp zc three >/dev/null &&
		jq -s -e 'map(select(.event == \"start\"))[0].memory.comm > 0' zc.json
	"
done

test_expect_success '--eval-every: val_loss at its steps; the last equals --eval-only of the checkpoint' '
	gpu-train $A --batch 4 --val-data val.bin --eval-every 3 --ckpt-dir ev >ev.json &&
	jq -s -e "map(select(.event == \"step\" and .val_loss != null) | .step) == [3, 6]" ev.json &&
	jq -r "select(.event == \"step\" and .step == 6) | .val_loss" ev.json >v6 &&
	gpu-train --eval-only --init-from ev --data val.bin --seq 16 --batch 4 --threads 1 --json >eo.json &&
	jq -r "select(.event == \"eval\") | .loss" eo.json >vo &&
	close_to v6 vo 1e-12
'

test_expect_success MPI 'ranks started with different options: exit 2, rank 0 names them, no collective runs' '
	for opt in "--hidden 64" "--compress int8" "--lr 1e-2" "--grad-accum 2" "--ckpt-dir dx" \
		   "--sample 2"; do
		test_expect_code 2 timeout 60 mpirun --oversubscribe --bind-to none \
			-np 1 gpu-train $A --batch 4 : -np 1 gpu-train $A --batch 4 $opt >out 2>err &&
		test_must_be_empty out &&
		test $(grep -c "^gpu-train: options differ between the 2 ranks (${opt%% *}[,)]" err) = 1 &&
		! grep -q "MPI_ABORT" err || return 1
	done &&
	test ! -e dx &&
	mpi 2 $A --batch 4 --threads 1 --recompute layer >same.json &&
	losses same.json >same && test_cmp two4 same
'

test_expect_success MPI 'ranks that find other files under the same --data: exit 1, said once' '
	mkdir -p ha hb &&
	head -c 31024 train.bin | tail -c 30000 >ha/d.bin &&
	head -c 33024 train.bin | tail -c 32000 >hb/d.bin &&
	test_expect_code 1 timeout 60 mpirun --oversubscribe --bind-to none \
		-np 1 --wdir "$PWD/ha" gpu-train $A --batch 4 --data d.bin : \
		-np 1 --wdir "$PWD/hb" gpu-train $A --batch 4 --data d.bin >out 2>err &&
	test_must_be_empty out &&
	test $(grep -c "^gpu-train: data .d\.bin.: the ranks see different files" err) = 1 &&
	! grep -q "MPI_ABORT" err &&
	cp ha/d.bin hb/d.bin &&
	timeout 60 mpirun --oversubscribe --bind-to none \
		-np 1 --wdir "$PWD/ha" gpu-train $A --batch 4 --data d.bin : \
		-np 1 --wdir "$PWD/hb" gpu-train $A --batch 4 --data d.bin >out &&
	test "$(losses out | wc -l)" = 6
'

test_expect_success MPI 'ranks whose --init-from names other weights on their host: rank 0'"'"'s are trained' '
	gpu-train $A --batch 4 --steps 1 --seed 1 --ckpt-dir w1 >/dev/null &&
	gpu-train $A --batch 4 --steps 1 --seed 2 --ckpt-dir w2 >/dev/null &&
	mkdir -p wa wb &&
	cp -r w1/step-00000001 wa/init && cp -r w2/step-00000001 wb/init &&
	cp train.bin wa/ && cp train.bin wb/ &&
	timeout 60 mpirun --oversubscribe --bind-to none -np 2 --wdir "$PWD/wa" \
		gpu-train $A --batch 4 --init-from init >same.json &&
	timeout 60 mpirun --oversubscribe --bind-to none \
		-np 1 --wdir "$PWD/wa" gpu-train $A --batch 4 --init-from init : \
		-np 1 --wdir "$PWD/wb" gpu-train $A --batch 4 --init-from init >mixed.json &&
	losses same.json >same &&
	losses mixed.json >mixed &&
	test_cmp same mixed
'

test_expect_success 'usage errors exit 2' '
	test_expect_code 2 gpu-train $A --zero 4 &&
	test_expect_code 2 gpu-train --layers 2 &&
	test_expect_code 2 gpu-train $A --recompute some
'

test_done
