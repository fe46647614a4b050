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
if command -v jq >/dev/null 2>&1; then
	test_set_prereq JQ
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
	GK_TEST_COMM_CORRUPT=1 test_expect_code 1 allreduce-bench -b 64 -e 64 -n 1 >out 2>err &&
	grep "^# Out of bounds values : 2 FAILED$" out &&
	grep "^allreduce-bench: 2 wrong results$" err
'

# The deterministic columns of every row: size count type redop root
# #wrong(out of place) #wrong(in place); sizes 8..128 by 2 in floats.
cat >rows.expect <<-\EOF_
8 2 float sum -1 0 0
16 4 float sum -1 0 0
32 8 float sum -1 0 0
64 16 float sum -1 0 0
128 32 float sum -1 0 0
EOF_

test_expect_success 'the table and --csv carry the same rows, by content' '
	allreduce-bench -b 8 -e 128 -f 2 -n 1 -w 0 >table &&
	grep -v "^#" table | awk "{ print \$1, \$2, \$3, \$4, \$5, \$9, \$13 }" >table.rows &&
	test_cmp rows.expect table.rows &&
	allreduce-bench -b 8 -e 128 -f 2 -n 1 -w 0 --csv >csv &&
	head -1 csv | grep "^algo,size,count,type,redop,root,time_oop,algbw_oop,busbw_oop,wrong_oop,time_ip,algbw_ip,busbw_ip,wrong_ip$" &&
	sed 1d csv | awk -F, "{ print \$2, \$3, \$4, \$5, \$6, \$10, \$14 }" >csv.rows &&
	test_cmp rows.expect csv.rows &&
	sed 1d csv | cut -d, -f1 | sort -u >algos &&
	echo auto >algos.expect &&
	test_cmp algos.expect algos
'

test_expect_success JQ '--json carries the same rows, by content' '
	allreduce-bench -b 8 -e 128 -f 2 -n 1 -w 0 --json >json &&
	jq -r ".results[] | \"\(.size) \(.count) \(.type) \(.redop) \(.root) \(.out_of_place.nwrong) \(.in_place.nwrong)\"" json >json.rows &&
	test_cmp rows.expect json.rows &&
	test "$(jq -r ".out_of_bounds, .world, .average, .results[0].algo" json | tr "\n" " ")" = "0 1 1 auto "
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
	test_expect_code 2 allreduce-bench --compress bf16 --collective allgather 2>err &&
	grep "compress is for --collective allreduce or reducescatter" err &&
	test_expect_code 2 allreduce-bench -r 3 2>err &&
	grep "^allreduce-bench: -r 3: not a rank of a world of 1$" err &&
	test_expect_code 2 allreduce-bench extra-arg 2>err
'

test_expect_success 'absurd sizes fail at once with a clear message' '
	test_expect_code 1 $T allreduce-bench -b 8 -e 1P >out 2>err &&
	grep "^allreduce-bench: size .1.00 PiB.: needs 4.00 PiB of host memory on this node, it has " err &&
	test_must_be_empty out &&
	# 4 buffers of 2^62 bytes: 2^64 overflows the count, it is not 0 B
	test_expect_code 1 $T allreduce-bench -b 4611686018427387904 -e 4611686018427387904 >out 2>err &&
	grep "^allreduce-bench: size .4.00 EiB.: needs more than 16 EiB of host memory on this node, it has " err &&
	test_must_be_empty out &&
	for e in 4611686018427387903 9223372036854775808 18446744073709551615; do
		test_expect_code 1 $T allreduce-bench -b 8 -e $e >out 2>err &&
		grep "^allreduce-bench: size .*: needs .* of host memory on this node, it has " err &&
		test_must_be_empty out || return 1
	done
'

test_expect_success 'usage errors found before running exit 2' '
	test_expect_code 2 allreduce-bench --compress bf16 --algo rd 2>err &&
	grep "^allreduce-bench: --compress runs on the ring, not --algo rd$" err &&
	test_expect_code 2 allreduce-bench --collective reducescatter --algo rd 2>err &&
	grep "^allreduce-bench: --algo .rd.: not available for reducescatter$" err &&
	test_expect_code 2 allreduce-bench --collective allgather --algo rabenseifner 2>err &&
	test_expect_code 2 allreduce-bench --collective broadcast --algo ring 2>err &&
	test_expect_code 2 allreduce-bench --backend nccl --algo ring 2>err &&
	grep "^allreduce-bench: --algo .ring.: not available for allreduce on the nccl backend$" err &&
	test_expect_code 2 allreduce-bench -f 1 2>err &&
	grep "the size must grow" err &&
	test_expect_code 2 allreduce-bench -a 4 2>err
'

test_expect_success 'under torchrun, the auto backend refuses rather than run world 1' '
	test_expect_code 1 env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 allreduce-bench -e 64 -n 1 >out 2>err &&
	grep "^allreduce-bench: backend .auto.: the torchrun environment says rank 1 of 2, but it gives MPI nothing to start from (launch with mpirun or srun)$" err &&
	test_must_be_empty out &&
	RANK=0 WORLD_SIZE=1 allreduce-bench -e 64 -n 1 >out &&
	grep "^# allreduce-bench (gpukit) .*: allreduce, backend self, 1 rank$" out
'

test_expect_success MPIRUN 'srun without an MPI plugin: MPI world of 1 is not the launcher world of 2' '
	test_expect_code 1 env SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=2 $T allreduce-bench -e 64 -n 1 >out 2>err &&
	grep "^allreduce-bench: mpi: MPI started rank 0 of 1, but the slurm environment says rank 0 of 2 (try srun --mpi=pmix)$" err
'

test_expect_success 'an sbatch -n 2 script itself (no srun step) is one process: world 1' '
	env SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_TASKS_PER_NODE=2 allreduce-bench -e 64 -n 1 >out &&
	grep "^# allreduce-bench (gpukit) .*: allreduce, backend self, 1 rank$" out
'

test_expect_success MPIRUN '2 ranks, --algo all: four algorithms, busbw = algbw' '
	mpi 2 allreduce-bench -b 1K -e 256K -f 16 --algo all -n 2 -w 1 --csv >csv &&
	cut -d, -f1 csv | sort -u >algos &&
	printf "%s\n" algo native rabenseifner rd ring >expect &&
	test_cmp expect algos &&
	awk -F, "NR > 1 && \$8 > 0 { r = \$9 / \$8; if (r < 0.999 || r > 1.001) bad++ } END { exit bad }" csv &&
	awk -F, "NR > 1 && (\$10 != 0 || \$14 != 0) { bad++ } END { exit bad }" csv
'

test_expect_success MPIRUN '3 ranks: busbw factors 4/3, 2/3, 2/3, 1 and 1' '
	for c in allreduce:1.3333 reducescatter:0.6667 allgather:0.6667 broadcast:1 reduce:1; do
		coll=${c%:*} f=${c#*:} &&
		mpi 3 allreduce-bench --collective $coll -b 3K -e 96K -f 4 -n 2 -w 1 --json >$coll.json &&
		mpi 3 allreduce-bench --collective $coll -b 3K -e 96K -f 4 -n 2 -w 1 --csv >$coll.csv &&
		awk -F, -v f=$f "NR > 1 && \$8 > 0 { r = \$9 / \$8; if (r < f * 0.999 || r > f * 1.001) bad++ } NR > 1 && (\$10 != 0 || \$14 != 0) { bad++ } END { exit bad }" $coll.csv ||
		return 1
	done
'

test_expect_success MPIRUN '3 ranks: reduce to rank 2, every type and op, ring and native, checked at the root' '
	for a in ring native; do
		mpi 3 allreduce-bench --collective reduce -r 2 --algo $a -b 4 -e 300K -f 9 \
			-d all -o all -n 1 -w 0 >reduce.$a &&
		grep "^# Out of bounds values : 0 OK$" reduce.$a &&
		grep "^# Collective test concluded: reduce$" reduce.$a || return 1
	done &&
	test_expect_code 2 allreduce-bench --collective reduce --algo rd 2>err &&
	grep "^allreduce-bench: --algo .rd.: not available for reduce$" err &&
	test_expect_code 2 allreduce-bench --collective foo 2>err &&
	grep "allreduce reducescatter allgather broadcast reduce" err &&
	allreduce-bench --help >help &&
	grep -- "^  --collective NAME  *allreduce reducescatter allgather broadcast reduce$" help
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

test_expect_success MPIRUN '3 ranks: compressed reduce-scatter within the bounds, and not exact' '
	for z in bf16 int8; do
		mpi 3 allreduce-bench -b 1K -e 300K -f 17 --collective reducescatter --compress $z \
			-n 1 -w 0 >rs$z.out &&
		grep "^# Out of bounds values : 0 OK$" rs$z.out &&
		awk "/^ +[0-9]/ && \$NF > 0 { n++ } END { exit !(n > 0) }" rs$z.out || return 1
	done
'

test_expect_success MPIRUN 'a wrong result under mpirun exits 1, said once' '
	GK_TEST_COMM_CORRUPT=1 test_expect_code 1 mpi 2 -x GK_TEST_COMM_CORRUPT allreduce-bench -b 64 -e 64 -n 1 >out 2>err &&
	grep "^# Out of bounds values : 2 FAILED$" out &&
	test $(grep -c "^allreduce-bench: 2 wrong results$" err) = 1
'

test_expect_success MPIRUN 'a usage error under mpirun -np 4 is printed once, every rank exits 2' '
	test_expect_code 2 mpi 4 allreduce-bench -d int8 >out 2>err &&
	test $(grep -c "^allreduce-bench: -d .int8.: not one of" err) = 1 &&
	test $(grep -c "^usage: allreduce-bench" err) = 1 &&
	test_expect_code 2 mpi 4 allreduce-bench --no-such-option >out 2>err &&
	test $(grep -c "unrecognized option" err) = 1 &&
	test $(grep -c "^usage: allreduce-bench" err) = 1 &&
	test_expect_code 2 mpi 3 allreduce-bench -r 5 >out 2>err &&
	test $(grep -c "^allreduce-bench: -r 5: not a rank of a world of 3$" err) = 1 &&
	test_must_be_empty out
'

# mpirun's MPMD form (A : B) gives each rank its own command line.
for d in "-e 1K:-e 2K:-e" "--algo ring:--algo rd:--algo" "-n 2:-n 3:-n" \
	 "-c 1:-c 0:-c" "--collective allreduce:--collective allgather:--collective" \
	 "--compress int8:--compress bf16:--compress" "-d float:-d all:-d" \
	 "--segment 4K:--segment 8K:--segment" "-e 1K --algo rd:-e 2K:--algo, -e"; do
	a=${d%%:*} rest=${d#*:} b=${rest%%:*} which=${rest#*:}
	test_expect_success MPIRUN "MPMD launch, '$a' on rank 0 and '$b' on rank 1: exit 2, no hang" "
		test_expect_code 2 $T mpirun -np 1 allreduce-bench -b 1K -n 1 -w 0 $a : \
			-np 1 allreduce-bench -b 1K -n 1 -w 0 $b >out 2>err &&
		grep -Fx 'allreduce-bench: options differ between the 2 ranks ($which): every rank must run the same benchmark' err >msg &&
		test \$(wc -l <msg) = 1 &&
		test_must_be_empty out
	"
done

test_expect_success MPIRUN 'MPMD launch with the same options runs' '
	$T mpirun -np 1 allreduce-bench -b 1K -e 4K -n 1 -w 0 : -np 2 allreduce-bench -b 1K -e 4K -n 1 -w 0 >out &&
	grep "^# allreduce-bench (gpukit) .*: allreduce, backend mpi, 3 ranks$" out &&
	grep "^# Out of bounds values : 0 OK$" out
'

test_expect_success MPIRUN 'MPMD launch with self on one rank: refused, no hang' '
	test_expect_code 1 $T mpirun -np 1 allreduce-bench -e 1K : -np 1 allreduce-bench -e 1K --backend self >out 2>err &&
	grep "^allreduce-bench: backend .self.: the openmpi environment says rank 1 of 2, and self is a world of one" err
'

test_expect_success MPIRUN 'absurd sizes under mpirun -np 3: 3 ranks of 4 buffers overflow, said once' '
	test_expect_code 1 mpi 3 allreduce-bench -b 8 -e 2305843009213693952 >out 2>err &&
	grep "^allreduce-bench: size .2.00 EiB.: needs more than 16 EiB of host memory on this node" err >msg &&
	test $(wc -l <msg) = 1
'

test_expect_success MPIRUN,JQ '-a 0 1 2 3 (rank 0, mean, min, max of the ranks) all run' '
	for a in 0 1 2 3; do
		mpi 2 allreduce-bench -b 1K -e 1K -n 2 -w 0 -a $a --json >a$a.json &&
		test "$(jq -r .average a$a.json)" = $a || return 1
	done
'

# nccl-tests' options (src/common.cu at a0b82b2, the getopt string
# "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"), by hand
test_expect_success 'every nccl-tests option letter and long name is an option here' '
	allreduce-bench --help >help &&
	for l in t g b e i f n m w N p I K c o d r z y T G C a R x D V J S M u; do
		grep -q "^  -$l, --" help || { echo "no -$l"; return 1; }
	done &&
	for o in nthreads ngpus minbytes maxbytes stepbytes stepfactor iters agg_iters \
		warmup_iters run_cycles parallel_init check op datatype root blocking \
		stream_null timeout cudagraph report_cputime report_timestamps output_file \
		average local_register cta_policy device_implementation device_cta_count \
		memory unalign per_iter_timing per_iter_skip; do
		grep -q "^  -., --$o " help || { echo "no --$o"; return 1; }
	done
'

test_expect_success 'an all_reduce_perf command line with -g 1 -t 1 -m 1 -p 1 runs the same sweep' '
	allreduce-bench -b 8 -e 1K -f 4 -n 2 -w 1 -c 1 --json >plain.json &&
	allreduce-bench -b 8 -e 1K -f 4 -g 1 -t 1 -m 1 -p 1 -N 1 -n 2 -w 1 -c 1 -T 60 -y 0 \
		-G 0 -C 0 -S 0 -R 0 -D 0 -M 0 -u 0 -I 0 -K 0 --json >nccl.json &&
	jq -c "[.results[] | [.size, .count, .type, .redop, .out_of_place.nwrong]]" plain.json >want &&
	jq -c "[.results[] | [.size, .count, .type, .redop, .out_of_place.nwrong]]" nccl.json >got &&
	test_cmp want got &&
	test "$(jq length got)" = 4
'

# OPTION VALUE, then the reason allreduce-bench gives for refusing it
cat >refusals <<\EOF
-t 8 one thread per rank here: start a rank per GPU (mpirun -np N)
-g 2 one GPU per rank here: start a rank per GPU (mpirun -np N)
-m 4 lib/comm launches one collective at a time, never a group of them; -n sets the iterations
-N 0 one sweep per run here: run the command again
-G 10 lib/comm's collectives are not captured in CUDA graphs
-J out.json --json prints allreduce-bench's own JSON on standard output (--json >FILE); its shape is not nccl-tests'
-x 1 lib/comm sets no NCCL CTA policy
-R 1 lib/comm registers no buffers with NCCL
EOF

test_expect_success 'an nccl-tests value that means something else here: exit 2, not supported, why' '
	while read -r opt val why; do
		test_expect_code 2 allreduce-bench $opt $val >out 2>err || return 1
		test_must_be_empty out &&
		head -n 1 err >first &&
		echo "allreduce-bench: $opt $val: not supported: $why" >expect &&
		test_cmp expect first || return 1
	done <refusals &&
	test_expect_code 2 allreduce-bench -t many 2>err &&
	grep "^allreduce-bench: -t .many.: not an integer" err
'

test_expect_success 'the option table, --help and allreduce-bench(1) name the same options' '
	# --help is the table (bin/allreduce-bench.c): every name at the start
	# of its option lines, "-b, --minbytes SIZE" giving -b and --minbytes;
	# the man page: every Fl of an .It line of OPTIONS ("Fl Fl name")
	allreduce-bench --help >help &&
	test_help_options help >in-help &&
	test_man_options "$GK_TOP/man/man1/allreduce-bench.1" >in-man &&
	test $(wc -l <in-help) -gt 35 &&
	test_cmp in-help in-man &&
	# and getopt takes an argument exactly for the rows whose help line
	# shows one: a flag leaves the next word to be an unexpected argument
	test_options_take_args help allreduce-bench &&
	for o in $(sed -n "s/^  \(-[a-z], \)\{0,1\}\(--[a-z0-9_-]*\)  .*/\2/p" help); do
		case $o in --help | --version) continue ;; esac
		test_expect_code 2 allreduce-bench $o word >out 2>err || return 1
		grep -q "^allreduce-bench: unexpected argument .word.$" err || return 1
	done
'

test_done
