#!/bin/sh
test_description='allreduce-bench: nccl-tests output, checks, sizes, bad input

One process (world 1, no launcher) and, where mpirun exists, 2 and 3
ranks: the header and summary are nccl-tests'"'"' own, busbw/algbw is the
collective'"'"'s factor, every result is checked, and wrong results or bad
options end with the right exit code and a clear message.'
. "$(dirname "$0")/lib.sh"

T="timeout 120"
if command -v mpirun >/dev/null 2>&1; then
	test_set_prereq MPIRUN
fi
mpi() {
	n=$1
	shift
	$T mpirun --oversubscribe -np "$n" "$@"
}

test_expect_success 'world 1: nccl-tests header lines, exactly' '
	allreduce-bench -b 8 -e 1K -f 4 -n 2 -w 1 >out &&
	cat >expect <<-\EOF_ &&
	#                                                              out-of-place                       in-place          
	#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
	#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
	EOF_
	grep -A2 "out-of-place" out >actual &&
	test_cmp expect actual &&
	grep "^# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 4(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0$" out &&
	grep "^# Out of bounds values : 0 OK$" out &&
	grep "^# Avg bus bandwidth    : " out &&
	grep "^# memcpy bandwidth     : .* GB/s" out
'

test_expect_success 'world 1: sizes 8 32 128 512, counts, type, redop, root, #wrong 0' '
	allreduce-bench -b 8 -e 512 -f 4 -n 2 -w 0 >out &&
	grep -v "^#" out | awk "{print \$1, \$2, \$3, \$4, \$5, \$9, \$13}" >actual &&
	cat >expect <<-\EOF_ &&
	8 2 float sum -1 0 0
	32 8 float sum -1 0 0
	128 32 float sum -1 0 0
	512 128 float sum -1 0 0
	EOF_
	test_cmp expect actual
'

test_expect_success 'world 1: -i steps by bytes, sizes round down to whole elements' '
	allreduce-bench -b 6 -e 26 -i 10 -d double -o max -n 1 -w 0 >out &&
	grep -v "^#" out | awk "{print \$1, \$2, \$3, \$4}" >actual &&
	printf "%s\n" "0 0 double max" "16 2 double max" "24 3 double max" >expect &&
	test_cmp expect actual
'

test_expect_success 'world 1: every type and op checks out (-d all -o all)' '
	allreduce-bench -b 4 -e 4K -f 32 -d all -o all -n 1 -w 0 >out &&
	test $(grep -vc "^#" out) = 75 &&
	grep "^# Out of bounds values : 0 OK$" out
'

test_expect_success 'a wrong result is counted and exits 1' '
	GK_COMM_BENCH_CORRUPT=1 test_expect_code 1 allreduce-bench -b 64 -e 64 -n 1 >out 2>err &&
	grep "^# Out of bounds values : 2 FAILED$" out &&
	grep "^allreduce-bench: 2 wrong results$" err
'

test_expect_success '--csv and --json carry the same rows' '
	allreduce-bench -b 8 -e 128 -f 2 -n 1 -w 0 --csv >csv &&
	head -1 csv | grep "^algo,size,count,type,redop,root,time_oop" &&
	test $(wc -l <csv) = 6 &&
	allreduce-bench -b 8 -e 128 -f 2 -n 1 -w 0 --json >json &&
	if command -v python3 >/dev/null; then
		python3 -c "import json,sys; d=json.load(open(\"json\")); r=d[\"results\"]; assert len(r)==5 and r[4][\"size\"]==128 and r[4][\"in_place\"][\"nwrong\"]==0 and d[\"out_of_bounds\"]==0, d"
	fi
'

test_expect_success 'compressed runs print max abs and rel error within bounds' '
	allreduce-bench -b 4K -e 4K --compress int8 -n 1 -w 0 >out &&
	grep "max_abs    max_rel" out &&
	grep "^# Out of bounds values : 0 OK$" out
'

test_expect_success 'usage errors exit 2' '
	test_expect_code 2 allreduce-bench --no-such-option 2>err &&
	test_expect_code 2 allreduce-bench -d int8 2>err &&
	grep "^allreduce-bench: -d .int8.: not one of float double half bfloat16 int32 all$" err &&
	test_expect_code 2 allreduce-bench -b 1M -e 1K 2>err &&
	grep "is larger than -e" err &&
	test_expect_code 2 allreduce-bench -f 0 2>err &&
	test_expect_code 2 allreduce-bench -n 0 2>err &&
	test_expect_code 2 allreduce-bench -e 12Q 2>err &&
	test_expect_code 2 allreduce-bench --algo fastest 2>err &&
	test_expect_code 2 allreduce-bench --collective alltoall 2>err &&
	test_expect_code 2 allreduce-bench --compress int8 -o max 2>err &&
	grep "compress works with -o sum or -o avg" err &&
	test_expect_code 2 allreduce-bench --compress bf16 -d half 2>err &&
	test_expect_code 2 allreduce-bench -r 3 2>err &&
	grep "^allreduce-bench: -r 3: not a rank of a world of 1$" err &&
	test_expect_code 2 allreduce-bench extra-arg 2>err
'

test_expect_success 'absurd sizes fail at once with a clear message' '
	test_expect_code 1 $T allreduce-bench -b 8 -e 1P >out 2>err &&
	grep "^allreduce-bench: size .1.00 PiB.: needs .* of host memory on this node, it has " err &&
	test_must_be_empty out
'

test_expect_success 'an algorithm a collective lacks is an error' '
	test_expect_code 1 allreduce-bench --collective allgather --algo rd 2>err &&
	grep "^allreduce-bench: --algo .rd.: not available for allgather on the self backend$" err
'

test_expect_success MPIRUN '2 ranks, --algo all: four algorithms, busbw = algbw' '
	mpi 2 allreduce-bench -b 1K -e 256K -f 16 --algo all -n 2 -w 1 --csv >csv &&
	cut -d, -f1 csv | sort -u >algos &&
	printf "%s\n" algo native rabenseifner rd ring >expect &&
	test_cmp expect algos &&
	awk -F, "NR > 1 && \$8 > 0 { r = \$9 / \$8; if (r < 0.999 || r > 1.001) bad++ } END { exit bad }" csv &&
	awk -F, "NR > 1 && (\$10 != 0 || \$14 != 0) { bad++ } END { exit bad }" csv
'

test_expect_success MPIRUN '3 ranks: busbw factors 4/3, 2/3, 2/3 and 1' '
	for c in allreduce:1.3333 reducescatter:0.6667 allgather:0.6667 broadcast:1; do
		coll=${c%:*} f=${c#*:} &&
		mpi 3 allreduce-bench --collective $coll -b 3K -e 96K -f 4 -n 2 -w 1 --json >$coll.json &&
		mpi 3 allreduce-bench --collective $coll -b 3K -e 96K -f 4 -n 2 -w 1 --csv >$coll.csv &&
		awk -F, -v f=$f "NR > 1 && \$8 > 0 { r = \$9 / \$8; if (r < f * 0.999 || r > f * 1.001) bad++ } NR > 1 && (\$10 != 0 || \$14 != 0) { bad++ } END { exit bad }" $coll.csv ||
		return 1
	done
'

test_expect_success MPIRUN '3 ranks: every type and op, every algorithm, odd sizes' '
	mpi 3 allreduce-bench -b 4 -e 3000 -i 997 -d all -o all --algo all -n 1 -w 0 >out &&
	test $(grep -c "^# Out of bounds values : 0 OK$" out) = 4
'

test_expect_success MPIRUN '3 ranks: compressed bf16, f16, int8 within their bounds' '
	for z in bf16 f16 int8; do
		mpi 3 allreduce-bench -b 1K -e 300K -f 17 --compress $z -o avg -n 1 -w 0 >$z.out &&
		grep "^# Out of bounds values : 0 OK$" $z.out || return 1
	done
'

test_expect_success MPIRUN 'a wrong result under mpirun exits 1' '
	GK_COMM_BENCH_CORRUPT=1 test_expect_code 1 mpi 2 -x GK_COMM_BENCH_CORRUPT allreduce-bench -b 64 -e 64 -n 1 >out 2>err &&
	grep "FAILED" out
'

test_done
