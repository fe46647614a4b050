#!/bin/sh
test_description='Slurm: two scripts/slurm-local clusters on one machine

Two clusters whose directories would give them the same port offset (and
so the same ports and job ids), started one after the other and at once,
each get their own ports, job ids and temporary directories, and MPI jobs
launched through pmix on both at the same time all run and give right
results. A stopped cluster gives its offset back.'
. "$(dirname "$0")/lib.sh"
. "$GK_TOP/tests/cli/lib-slurm.sh"

if ! command -v mpirun >/dev/null 2>&1; then
	skip_all="no mpirun (Open MPI)"
	test_done
fi
slurm_start
A=$SLURM_DIR

# More clusters, stopped at exit with the first.
MORE=
more_stop() {
	for d in $MORE; do
		"$GK_TOP/scripts/slurm-local" stop "$d"
		rm -rf "$d"
	done
	slurm_stop
}
trap 'more_stop' EXIT

# A directory whose inode gives the same first offset as $1's (the offset
# a cluster took from its directory's inode alone).
same_offset_dir() {
	want=$(( $(stat -c %i "$1") % 2000 ))
	base=$(mktemp -d /tmp/gk-slurm2-XXXXXX)
	found= i=0
	# new directories take free inodes in no set order: make more until
	# one fits (a few thousand at most)
	while [ -z "$found" ] && [ $i -lt 20 ]; do
		(cd "$base" && seq -f "c$i-%g" 1 1000 | xargs mkdir) || return 1
		found=$(stat -c "%i %n" "$base"/c$i-* |
			awk -v w=$want '$1 % 2000 == w { print $2; exit }')
		i=$((i + 1))
	done
	test -n "$found" || { rm -rf "$base"; echo "no directory with an inode of $want modulo 2000" >&2; return 1; }
	d=$(mktemp -u /tmp/gk-slurm-XXXXXX) &&
	mv "$found" "$d" &&
	rm -rf "$base" &&
	echo "$d"
}

conf() {
	sed -n "s/^$2=//p" "$1/slurm.conf"
}

test_expect_success 'a second cluster whose directory gives the same offset: its own ports and job ids' '
	B=$(same_offset_dir "$A") &&
	MORE="$MORE $B" &&
	test $(( $(stat -c %i "$A") % 2000 )) = $(( $(stat -c %i "$B") % 2000 )) &&
	"$GK_TOP/scripts/slurm-local" start "$B" >outB &&
	test "$(cat outB)" = "export SLURM_CONF=$B/slurm.conf" &&
	test "$(conf "$A" SlurmctldPort)" != "$(conf "$B" SlurmctldPort)" &&
	test "$(conf "$A" SlurmdPort)" != "$(conf "$B" SlurmdPort)" &&
	test "$(conf "$A" SlurmctldPort)" != "$(conf "$B" SlurmdPort)" &&
	test "$(conf "$A" SlurmdPort)" != "$(conf "$B" SlurmctldPort)" &&
	test "$(conf "$A" FirstJobId)" != "$(conf "$B" FirstJobId)" &&
	test "$(conf "$B" TmpFS)" = "$B/tmp" &&
	SLURM_CONF=$B/slurm.conf sinfo -h -o %t >state &&
	grep -E "^(idle|mix)" state &&
	echo "$B" >B
'

# allreduce-bench under srun --mpi=pmix on both clusters at once: every
# size of both has its row and no wrong value (srun exits 0 even when a
# pmix launch fails, so the rows are what counts).
test_expect_success 'pmix MPI jobs on both clusters at once: all run, right results, own job ids' '
	B=$(cat B) &&
	for c in A B; do
		eval "d=\$$c" &&
		SLURM_CONF=$d/slurm.conf sbatch --parsable -n 2 -o job$c.out -e job$c.err --wrap \
			"srun --mpi=pmix allreduce-bench -b 8 -e 64K -f 2 -c 1" >id$c || return 1
	done &&
	SLURM_CONF=$A/slurm.conf slurm_wait $(cat idA) &&
	SLURM_CONF=$B/slurm.conf slurm_wait $(cat idB) &&
	cat jobA.err jobB.err &&
	test "$(cat idA)" != "$(cat idB)" &&
	for c in A B; do
		grep "^# Out of bounds values : 0 OK$" job$c.out &&
		grep -c "float     sum" job$c.out >rows && echo 14 >expect && test_cmp expect rows || return 1
	done &&
	! grep -i -E "error|File exists|launch failed" jobA.err jobB.err
'

test_expect_success 'two clusters started at the same moment, same offset: different ports' '
	C=$(same_offset_dir "$A") && MORE="$MORE $C" &&
	D=$(same_offset_dir "$A") && MORE="$MORE $D" &&
	{ "$GK_TOP/scripts/slurm-local" start "$C" >outC 2>errC & pc=$!; } &&
	{ "$GK_TOP/scripts/slurm-local" start "$D" >outD 2>errD & pd=$!; } &&
	wait $pc && wait $pd &&
	cat errC errD &&
	ports=$(for d in "$A" "$B" "$C" "$D"; do conf "$d" SlurmctldPort; conf "$d" SlurmdPort; done) &&
	test $(echo "$ports" | sort -u | wc -l) = 8 &&
	for d in "$C" "$D"; do
		SLURM_CONF=$d/slurm.conf timeout 60 srun -n 2 true || return 1
	done
'

test_expect_success 'a stopped cluster gives its offset back' '
	off=$(cat "$D/offset") &&
	test -f "/run/gpukit-slurm-local/$off" &&
	"$GK_TOP/scripts/slurm-local" stop "$D" &&
	! test -e "/run/gpukit-slurm-local/$off" &&
	! test -e "$D/offset"
'

test_done
