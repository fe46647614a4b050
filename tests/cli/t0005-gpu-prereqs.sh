#!/bin/sh
test_description='the test library decides up front whether to expect a GPU

test_gpu_prereqs sets GPU only when nvidia-smi lists a GPU and the build
under test was configured with the feature, reading the configuration
from that build ($GK_BUILD/config.mk); a GPU with a configuration it
cannot read is an error rather than a silent "no GPU", which would skip
every GPU test and fail the no-GPU ones on a GPU machine.'
. "$(dirname "$0")/lib.sh"

# a fake nvidia-smi listing $1 GPUs, and a build directory saying VAR := $2
fake() {
	mkdir -p smi"$1" &&
	printf '#!/bin/sh\ni=0\nwhile [ $i -lt %s ]; do echo "GPU $i: NVIDIA H100 (UUID: GPU-$i)"; i=$((i + 1)); done\n' "$1" >smi"$1"/nvidia-smi &&
	chmod +x smi"$1"/nvidia-smi &&
	mkdir -p build"$2" &&
	{ test "$2" = none || echo "HAVE_CUDA := $2" >build"$2"/config.mk; }
}

# prints the prerequisites that test_gpu_prereqs set, in a subshell
prereqs() {
	(
		PATH="$PWD/smi$1:$PATH" GK_BUILD="$PWD/build$2"
		unset CUDA_VISIBLE_DEVICES
		test_gpu_prereqs HAVE_CUDA >/dev/null
		for p in GPU GPUS NOGPU; do
			test_have_prereq $p && echo $p
		done
		:
	)
}

test_expect_success 'one GPU and a CUDA build: GPU, not NOGPU' '
	fake 1 1 && prereqs 1 1 >out &&
	echo GPU >expect && test_cmp expect out
'

test_expect_success 'two GPUs and a CUDA build: GPU and GPUS' '
	fake 2 1 && prereqs 2 1 >out &&
	printf "GPU\nGPUS\n" >expect && test_cmp expect out
'

test_expect_success 'a GPU and a build without CUDA: NOGPU' '
	fake 1 0 && prereqs 1 0 >out &&
	echo NOGPU >expect && test_cmp expect out
'

test_expect_success 'no GPU listed: NOGPU whatever the build' '
	fake 0 1 && prereqs 0 1 >out &&
	echo NOGPU >expect && test_cmp expect out &&
	fake 0 none && prereqs 0 none >out &&
	test_cmp expect out
'

test_expect_success 'CUDA_VISIBLE_DEVICES empty hides the GPUs' '
	fake 1 1 &&
	(CUDA_VISIBLE_DEVICES= PATH="$PWD/smi1:$PATH" GK_BUILD="$PWD/build1" &&
	 export CUDA_VISIBLE_DEVICES && test_gpu_prereqs HAVE_CUDA >/dev/null &&
	 test_have_prereq NOGPU && ! test_have_prereq GPU)
'

test_expect_success 'a GPU and a build configuration it cannot read: an error' '
	fake 1 none &&
	test_expect_code 1 prereqs 1 none 2>err &&
	grep "config.mk says nothing of HAVE_CUDA" err
'

test_expect_success 'the build under test has the configuration it reads' '
	grep -E "^HAVE_CUDA := [01]$" "$GK_BUILD/config.mk" &&
	grep -E "^HAVE_NCCL := [01]$" "$GK_BUILD/config.mk"
'

test_done
