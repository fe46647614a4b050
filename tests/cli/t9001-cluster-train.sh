#!/bin/sh
test_description='gpu-train on several hosts (network namespaces)

2 hosts x 2 ranks x batch 2 give the losses of 1 rank x batch 8 on one
host (the same global batch; tolerance as in t7101); a ZeRO-1
checkpoint written by the 4 ranks on 2 hosts, optimizer state in 4 rank
slices, is resumed by 2 ranks x batch 4 on one host and continues within
the same tolerance of an uninterrupted 2-host run. All namespaces see
the same file system, so the checkpoint directory is shared.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"
. "$GK_TOP/tests/cli/lib-netns.sh"

netns_hosts 2 || { skip_all="could not set up the namespaces"; test_done; }
A=$(netns_addr 0)
B=$(netns_addr 1)

# Remote ranks start in the launcher's working directory (the trash
# directory, which every namespace sees): relative paths reach the same files.
W="--data train.bin $TINY --json --clip 1"

test_expect_success 'data; 1 rank x batch 8 on one host' '
	train_data &&
	gpu-train $W --batch 8 --steps 12 >one.json &&
	losses one.json >one &&
	test $(wc -l <one) = 12
'

test_expect_success '2 hosts x 2 ranks x batch 2: the losses of 1 x 8' '
	netns_mpirun -H $A:2,$B:2 -np 4 gpu-train $W --batch 2 --steps 12 >across.json &&
	losses across.json >across &&
	close_to across one 1e-5 &&
	jq -s -e "map(select(.event == \"start\"))[0].world == 4" across.json
'

# Host 1's ranks have a host name of their own (lib-netns.sh): the job
# spans 2 hosts, where --overlap auto overlaps; on one host, 2 ranks of
# 1 thread on 2 CPUs reduce after backward.
unshare --uts true 2>/dev/null && test_set_prereq UTS
test_expect_success UTS 'overlap auto: on across 2 hosts, off when 2 ranks take the 2 CPUs of one' '
	jq -s -e "map(select(.event == \"start\"))[0].overlap == true" across.json &&
	netns_mpirun -H $A:2 -np 2 gpu-train $W --batch 4 --steps 1 >onehost.json &&
	jq -s -e "map(select(.event == \"start\"))[0].overlap == ($(nproc) > 2)" onehost.json
'

# A straggler on the second host (GK_TEST_STRAGGLER, gpu-train(1)
# STRAGGLERS): the warning and the JSON name that host, by its own name
# (host 0's ranks, started by mpirun itself, keep this machine's).
test_expect_success UTS 'a rank slow on host 1: named with that host' '
	netns_mpirun -H $A:2,$B:2 -np 4 -x GK_TEST_STRAGGLER=3:optimizer:40 gpu-train $W \
		--batch 2 --steps 15 --straggler-every 5 >st.json 2>st.err &&
	grep "^gpu-train: warning: rank 3 on host ${NETNS_PREFIX}h1: .*most of it in optimizer" st.err &&
	jq -c "select(.event == \"stragglers\")" st.json >stx.json &&
	test "$(jq -r ".straggler.host // empty" stx.json)" = "${NETNS_PREFIX}h1" &&
	test "$(jq -r ".parts.optimizer | [.max_rank, .max_host] | @tsv" stx.json | sort -u)" = \
		"$(printf "3\t%sh1" "$NETNS_PREFIX")" &&
	jq -r ".parts[] | .min_host, .max_host" stx.json | sort -u >hosts &&
	! grep -v -x -e "$(hostname)" -e "${NETNS_PREFIX}h1" hosts
'

test_expect_success '2 hosts, ZeRO-1: close to 1 x 8; checkpoint at step 6 in 4 optimizer slices' '
	netns_mpirun -H $A:2,$B:2 -np 4 gpu-train $W --batch 2 --zero 1 --steps 12 \
		>z4.json &&
	losses z4.json >z4 &&
	close_to z4 one 1e-5 &&
	netns_mpirun -H $A:2,$B:2 -np 4 gpu-train $W --batch 2 --zero 1 --steps 12 \
		--until 6 --ckpt-dir ck >a.json &&
	test "$(readlink ck/latest)" = step-00000006 &&
	for r in 0 1 2 3; do
		test -f ck/step-00000006/optim-rank-0000$r-of-00004.safetensors || return 1
	done &&
	ckpt-merge --check ck/step-00000006
'

test_expect_success MPI 'resumed by 2 ranks x batch 4 on one host: continues within 1e-5' '
	mpi 2 $W --batch 4 --zero 1 --steps 12 --ckpt-dir ck --resume >b.json &&
	jq -s -e "map(select(.event == \"step\"))[0].step == 7" b.json &&
	losses b.json >b &&
	tail -n 6 z4 >z4tail &&
	close_to b z4tail 1e-5 &&
	test "$(readlink ck/latest)" = step-00000012
'

test_done
