#!/bin/sh
test_description='allreduce-bench --backend nccl, on machines with and without GPUs

What to expect is decided up front, independently of the code under
test: a GPU is there when the driver'"'"'s own nvidia-smi lists one and
the build has NCCL. Without one, the nccl backend must end at once with
a message on every rank (also when several ranks start together under
mpirun); with one, it must run and check out. AVG has one meaning on
every backend (the sum divided once), checked here on the mpi backend at
world sizes where multiplying by 1/n first would round differently.'
. "$(dirname "$0")/lib.sh"

T="timeout 120"
if command -v mpirun >/dev/null 2>&1; then
	test_set_prereq MPIRUN
fi

test_gpu_prereqs HAVE_NCCL

# Under the CUDA emulation (tests/cuemu, GK_CUEMU set) a kernel runs
# about a thousand times slower than on a GPU: the sizes stop at a few
# hundred KiB, which still span many blocks and the compressed ring's
# uneven blocks. Its fake NCCL also fails a rank on demand, for the
# watchdog and abort paths.
big=4M huge=8M
if test -n "$GK_CUEMU"; then
	big=256K huge=256K
	test_set_prereq CUEMU
fi

reason="backend .nccl.: \(no usable GPU: \|gpukit was built without \)"

test_expect_success NOGPU 'no GPU, one process: exit 1 with the reason' '
	test_expect_code 1 $T allreduce-bench --backend nccl -e 64 >out 2>err &&
	test_must_be_empty out &&
	test $(wc -l <err) = 1 &&
	grep "^allreduce-bench: $reason" err
'

# mpirun ends the other ranks as soon as one exits 1, so some may be
# stopped before they print: at least one reason, and no other message.
test_expect_success 'NOGPU,MPIRUN' 'no GPU, 2 and 3 ranks under mpirun: exit 1 promptly, saying why' '
	for n in 2 3; do
		start=$(date +%s) &&
		test_expect_code 1 timeout 60 mpirun -np $n allreduce-bench --backend nccl -e 64 >out 2>err &&
		end=$(date +%s) &&
		test_must_be_empty out &&
		grep "^allreduce-bench: " err >msgs &&
		test $(grep -c "^allreduce-bench: $reason" msgs) -ge 1 &&
		! grep -v "^allreduce-bench: $reason" msgs &&
		test $((end - start)) -lt 30 || return 1
	done
'

test_expect_success GPU 'GPU: one process, every type and op checks out' '
	$T allreduce-bench --backend nccl -b 8 -e 1M -f 8 -d all -o all -n 5 -w 2 >out &&
	test $(grep -c "^# Out of bounds values : 0 OK$" out) = 1 &&
	grep "backend nccl, 1 rank" out
'

test_expect_success 'GPU,MPIRUN,GPUS' 'GPU: one rank per GPU, every type and op, avg exact' '
	$T mpirun -np '"$GK_GPUS"' allreduce-bench --backend nccl -b 4 -e $big -f 16 -d all -o all -n 3 -w 1 >out &&
	grep "^# Out of bounds values : 0 OK$" out
'

test_expect_success GPU 'GPU: reduce (as ZeRO-1 buckets use it) in one process, every type and op' '
	$T allreduce-bench --backend nccl --collective reduce -b 8 -e 1M -f 8 -d all -o all \
		-n 2 -w 1 >out &&
	grep "^# Out of bounds values : 0 OK$" out
'

test_expect_success 'GPU,MPIRUN,GPUS' 'GPU: reduce to the last rank, every type and op, checked at the root' '
	$T mpirun -np '"$GK_GPUS"' allreduce-bench --backend nccl --collective reduce \
		-r $(($GK_GPUS - 1)) -b 4 -e $big -f 16 -d all -o all -n 2 -w 1 >out &&
	grep "^# Out of bounds values : 0 OK$" out
'

# lib/comm's collectives of unequal pieces over NCCL (ZeRO-2's gradient
# buckets, ZeRO-3's units: a group of ncclReduce or ncclBroadcast, one per
# owner; compressed, the ring of ncclSend/ncclRecv) and ZeRO-2's
# partitioned buckets on the device: comm_cuda's own checks against the
# host's sums and the whole buffer's compressed reduce-scatter (int8: the
# exact sum within its bound), one rank per GPU, every rank passing.
test_expect_success 'GPU,MPIRUN,GPUS' 'GPU: reduce-scatter and allgather of unequal pieces, ZeRO-2 buckets, one rank per GPU' '
	prog="$GK_BUILD/tests/unit/comm_cuda" &&
	rm -f pieces.* &&
	$T mpirun -np '"$GK_GPUS"' sh -c "exec \"$prog\" pieces >pieces.\$OMPI_COMM_WORLD_RANK" &&
	for r in $(seq 0 $(($GK_GPUS - 1))); do
		grep "^1\.\.24$" pieces.$r &&
		grep "^ok 15 - partitioned gradient buckets over nccl, world $GK_GPUS," pieces.$r &&
		grep "^ok 18 - allreduce avg BF16 over nccl, world $GK_GPUS: within" pieces.$r &&
		grep "^ok 21 - compressed bf16 reduce-scatterv over nccl, world $GK_GPUS, buckets of 96: the whole buffer" pieces.$r &&
		grep "^ok 22 - compressed f16 reduce-scatterv over nccl, world $GK_GPUS, buckets of 96: the whole buffer" pieces.$r &&
		grep "^ok 23 - compressed int8 reduce-scatterv over nccl, world $GK_GPUS, buckets of 96: within the bound" pieces.$r &&
		test $(grep -c "^ok" pieces.$r) = 24 || return 1
	done
'

# AVG over NCCL is ncclAvg (no division pass behind it): the fake NCCL's
# log of the collectives called shows op 4 (ncclAvg) on every averaging
# call, and comm_cuda's AVG cases pass against the sum-and-divide path
# and the mean at 2 ranks (the same bits) and at 3 (within bounds; the
# emulation's NCCL multiplies by 1/3 first, as NCCL does).
test_expect_success 'CUEMU,MPIRUN,GPUS' 'avg is ncclAvg, at 2 and 3 ranks against the sum-and-divide path and the mean' '
	prog="$GK_BUILD/tests/unit/comm_cuda" &&
	for n in 2 3; do
		rm -f avg.* nccl.log &&
		CUEMU_GPUS=$n CUEMU_NCCL_LOG=$PWD/nccl.log $T mpirun -np $n \
			sh -c "exec \"$prog\" pieces >avg.\$OMPI_COMM_WORLD_RANK" &&
		for r in $(seq 0 $(($n - 1))); do
			grep "^ok 17 - allreduce avg F32 over nccl, world $n: within" avg.$r &&
			grep "^ok 18 - allreduce avg BF16 over nccl, world $n: within" avg.$r &&
			test $(grep -c "^ok" avg.$r) = 24 &&
			# the 2 allreduces and 4 reduce-scatterv groups of AVG:
			# ncclAvg; SUM and the rest op 0
			test $(grep -c "^rank $r ncclAllReduce .* op 4 " nccl.log) = 2 &&
			test $(grep -c "^rank $r ncclAllReduce .* op 0 " nccl.log) = 2 &&
			grep "^rank $r ncclReduce .* op 4 " nccl.log &&
			test $(grep -c "^rank $r .* op [1-35-9]" nccl.log) = 0 || return 1
		done
	done &&
	# allreduce-bench checks ncclAvg at 3 ranks within its bound, the
	# integers exactly (NCCL divides their sum)
	CUEMU_GPUS=3 $T mpirun -np 3 allreduce-bench --backend nccl -b 4 -e 4K -f 4 -d all \
		-o avg -n 1 -w 0 >avg3.out &&
	grep "^# Out of bounds values : 0 OK$" avg3.out &&
	test $(grep -vc "^#" avg3.out) = 30
'

test_expect_success 'GPU,MPIRUN,GPUS' 'GPU: compressed bf16, f16 and int8 on the device, within their bounds' '
	for z in bf16 f16 int8; do
		$T mpirun -np '"$GK_GPUS"' allreduce-bench --backend nccl --compress $z -o avg \
			-b 1K -e $huge -f 8 -n 2 -w 1 >$z.out &&
		grep "^# Out of bounds values : 0 OK$" $z.out || return 1
	done
'

test_expect_success 'GPU,MPIRUN' 'GPU: a rank that sees no device ends the job at setup, not in a hang' '
	test_expect_code 1 timeout 60 mpirun -np 1 allreduce-bench --backend nccl -e 64 : \
		-np 1 env CUDA_VISIBLE_DEVICES= allreduce-bench --backend nccl -e 64 >out 2>err &&
	grep -e "^allreduce-bench: backend .nccl.: rank 1 failed to set up its GPU and NCCL" \
		-e "^allreduce-bench: backend .nccl.: no usable GPU: the CUDA driver found no device (CUDA_VISIBLE_DEVICES=..)$" err
'

# A hung collective: the rank waiting for it gives up after --timeout
# and aborts its communicator; the rank that stopped then sees its peer
# gone. Every rank ends, none hangs; mpirun ends the rest.
test_expect_success 'CUEMU,MPIRUN,GPUS' 'a rank whose allreduce never completes: the watchdog aborts, the job exits 1' '
	start=$(date +%s) &&
	test_expect_code 1 timeout 60 mpirun -np 2 -x CUEMU_NCCL_HANG=1:3 allreduce-bench \
		--backend nccl -b 4 -e 64 -f 4 -n 3 -w 1 --timeout 3 >out 2>err &&
	end=$(date +%s) &&
	grep "^allreduce-bench: nccl: allreduce of 1 F32 sum: not finished after 3 s (a rank may have failed or stopped); communicator aborted$" err &&
	test $((end - start)) -ge 3 &&
	test $((end - start)) -lt 45
'

test_expect_success 'CUEMU,MPIRUN,GPUS' 'an asynchronous NCCL error on one rank ends the job at once, long before the watchdog' '
	start=$(date +%s) &&
	test_expect_code 1 timeout 60 mpirun -np 2 -x CUEMU_NCCL_ERROR=0:5 allreduce-bench \
		--backend nccl -b 4 -e 64 -f 4 -n 3 -w 1 --timeout 600 >out 2>err &&
	end=$(date +%s) &&
	grep "^allreduce-bench: nccl: allreduce of 1 F32 sum: unhandled system error: cuemu NCCL: an asynchronous error injected by CUEMU_NCCL_ERROR in ncclAllReduce (operation 5 of rank 0)$" err &&
	test $((end - start)) -lt 45
'

test_expect_success MPIRUN 'avg at 5, 7 and 10 ranks (mpi): the sum divided once, exactly' '
	for n in 5 7 10; do
		$T mpirun -np $n allreduce-bench --backend mpi -b 4 -e 4K -f 4 -d all -o avg -n 1 -w 0 >avg$n.out &&
		grep "^# Out of bounds values : 0 OK$" avg$n.out &&
		test $(grep -vc "^#" avg$n.out) = 30 || return 1
	done
'

test_done
