#!/bin/sh
test_description='Slurm: the sbatch examples in scripts/ on a local one-node Slurm

scripts/slurm-local starts munged, slurmctld and slurmd in a scratch
directory; the fabric check job runs allreduce-bench across its
allocation, and a failing job hands its exit code and message back.'
. "$(dirname "$0")/lib.sh"
. "$GK_TOP/tests/cli/lib-slurm.sh"

slurm_start

test_expect_success 'srun starts ranks that gpukit sees as Slurm ranks' '
	timeout 60 srun -n 2 sh -c "echo \$SLURM_PROCID/\$SLURM_NTASKS" | sort >actual &&
	printf "%s\n" 0/2 1/2 >expect &&
	test_cmp expect actual
'

test_expect_success 'sbatch-fabric-check: allreduce-bench across the allocation, every result right' '
	MAX=64K timeout 300 sbatch --wait -N 1 --ntasks-per-node 2 -o fabric.out -e fabric.err \
		"$GK_TOP/scripts/sbatch-fabric-check" &&
	grep "^# Out of bounds values : 0 OK$" fabric.out &&
	grep "2 ranks" fabric.out &&
	grep -c "float     sum" fabric.out >rows && echo 14 >expect && test_cmp expect rows
'

# Slurm 22.05'"'"'s srun exits 0 when a pmix task launch fails: a benchmark that
# ran nowhere (here, one that prints its header and no row) must fail the job.
test_expect_success 'sbatch-fabric-check: no result rows is a failure, not a healthy fabric' '
	mkdir -p fake &&
	printf "#!/bin/sh\necho \"# allreduce-bench: nothing ran\"\n" >fake/allreduce-bench &&
	chmod +x fake/allreduce-bench &&
	test_expect_code 1 env PATH="$PWD/fake:$PATH" MAX=64K timeout 300 sbatch --wait -N 1 \
		--ntasks-per-node 2 -o fake.out -e fake.err "$GK_TOP/scripts/sbatch-fabric-check" &&
	grep -Fx "sbatch-fabric-check: 0 result rows of the 14 sizes 8 B to 64K (did every rank start?)" fake.err
'

test_expect_success 'a failing job: sbatch --wait returns its exit code, its message reaches the error file' '
	test_expect_code 2 timeout 120 sbatch --wait -n 1 -o bad.out -e bad.err \
		--wrap "allreduce-bench -b 8 -e 4 " &&
	grep "allreduce-bench" bad.err
'

test_done
