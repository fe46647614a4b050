#!/bin/sh
test_description='gpu-train --device cpu|cuda|auto and --precision

Without a GPU (decided by nvidia-smi, not by the code under test),
--device cuda ends every rank at once, the reason said once for the
job, and --device auto says why on stderr, once, and trains on the CPU
with the losses of --device cpu, bit for bit. With a GPU, the CUDA
backend trains: fp32 losses close to the CPU'"'"'s, bf16 losses falling
and near them, an exact resume from a checkpoint the GPU wrote, and such a
checkpoint evaluated on the CPU with the GPU'"'"'s loss. --comm: the
gradients through NCCL on the device (a world of one, and two ranks with
two GPUs) give the losses of the path through host memory; ZeRO-1 and
ZeRO-2 over NCCL give ZeRO-0'"'"'s and ZeRO-1'"'"'s, and with --compress
ZeRO-2 ZeRO-1'"'"'s compressed bits and the CPU'"'"'s results. The host
memory a rank allocates and its comm equal mem-estimate'"'"'s on one GPU,
tp 2 and pp 2 x dp 2.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

test_gpu_prereqs HAVE_CUDA
# the CUDA emulation (tests/cuemu), whose fake NCCL fails a rank on demand
test -n "$GK_CUEMU" && test_set_prereq CUEMU

# TINY without its --threads (the device tests set their own). Runs of
# N steps, resumed from step $half; the bit-for-bit comparisons of two
# update paths (ZeRO-2, --offload) $short steps. Under the CUDA emulation
# (tests/cuemu, GK_CUEMU set) a kernel runs about a thousand times slower
# than on a GPU: 4 steps, not 10, each with the kernels, buckets and
# streams of any other (the first two without the learning rate's whole
# warm-up), a resume from step 2, and the comparisons 2 steps, not 4 (the
# second updates with the moments the first left); on a GPU, 10 and 4.
N=10 short=4
test -n "$GK_CUEMU" && N=4 short=2
half=$((N / 2))
A="--data train.bin $TINY --batch 4 --steps $N --json"
why="no usable GPU: \|built without CUDA"

# Each case makes what it compares against, so that each can fail alone:
# a reference run is made by the first case that needs it and reused by
# the others, and it is kept only when gpu-train succeeded, so a case that
# failed leaves nothing half-made behind for the next one.
#   data                 train.bin (lib-train.sh's train_data), once
#   ref NAME CMD...      NAME.json, NAME.err and NAME.losses from CMD (a
#                        gpu-train or mpi command line), once
data() {
	test -f train.bin || train_data
}

ref() {
	name=$1 && shift &&
	if ! test -f "$name.losses"; then
		data &&
		"$@" >"$name.json+" 2>"$name.err+" &&
		losses "$name.json+" >"$name.losses+" &&
		mv "$name.json+" "$name.json" && mv "$name.err+" "$name.err" &&
		mv "$name.losses+" "$name.losses" || {
			echo "reference run $name failed: $*" && cat "$name.err+" 2>/dev/null
			rm -f "$name.json+" "$name.err+" "$name.losses+"
			return 1
		}
	fi
}

test_expect_success 'the CPU run: fp32 on the CPU, a loss a step, nothing on stderr' '
	ref cpu gpu-train $A --device cpu &&
	test_must_be_empty cpu.err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .device == \"cpu\" and .precision == \"fp32\"" cpu.json &&
	test $(wc -l <cpu.losses) = $N
'

test_expect_success 'the default device is the CPU, with no note' '
	ref cpu gpu-train $A --device cpu &&
	gpu-train $A >def.json 2>def.err &&
	test_must_be_empty def.err &&
	losses def.json >def.losses &&
	test_cmp cpu.losses def.losses
'

test_expect_success 'bad --device and --precision are usage errors' '
	data &&
	test_expect_code 2 gpu-train $A --device tpu 2>err &&
	grep "^gpu-train: --device .tpu.: cpu, cuda or auto" err &&
	test_expect_code 2 gpu-train $A --precision fp8 2>err &&
	grep "^gpu-train: --precision .fp8.: bf16, tf32 or fp32" err
'

test_expect_success 'bad --comm, and --comm nccl with --device cpu, are usage errors' '
	data &&
	test_expect_code 2 gpu-train $A --comm gloo 2>err &&
	grep "^gpu-train: --comm .gloo.: auto, nccl or mpi" err &&
	test_expect_code 2 gpu-train $A --comm self 2>err &&
	grep "^gpu-train: --comm .self.: auto, nccl or mpi" err &&
	test_expect_code 2 gpu-train $A --comm nccl 2>err &&
	grep "^gpu-train: --comm nccl reduces a GPU.s gradients: it needs --device cuda or auto" err
'

test_expect_success 'on the CPU --comm mpi and auto change nothing; the start event names the backend' '
	ref cpu gpu-train $A --device cpu &&
	gpu-train $A --comm mpi >cm.json 2>cm.err &&
	test_must_be_empty cm.err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .comm == \"self\"" cm.json &&
	losses cm.json >cm.losses &&
	test_cmp cpu.losses cm.losses
'

test_expect_success NOGPU 'no GPU: --device auto --comm nccl exits 1: the model fell back to the CPU' '
	data &&
	test_expect_code 1 gpu-train $A --device auto --comm nccl >out 2>err &&
	test_must_be_empty out &&
	grep "^gpu-train: --comm nccl reduces gradients on a GPU, and the model is on the CPU: \($why\)" err
'

test_expect_success NOGPU 'no GPU: --device cuda exits 1 saying why' '
	data &&
	test_expect_code 1 timeout 60 gpu-train $A --device cuda >out 2>err &&
	test_must_be_empty out &&
	grep "^gpu-train: \($why\)" err
'

test_expect_success NOGPU 'no GPU: --device auto says so once and trains on the CPU, bit for bit' '
	ref cpu gpu-train $A --device cpu &&
	gpu-train $A --device auto >auto.json 2>auto.err &&
	test $(wc -l <auto.err) = 1 &&
	grep "^gpu-train: \($why\).*; training on the CPU$" auto.err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .device == \"cpu\"" auto.json &&
	losses auto.json >auto.losses &&
	test_cmp cpu.losses auto.losses
'

test_expect_success 'NOGPU,MPI' 'no GPU, 2 ranks: cuda fails on every rank at once, saying why once; auto notes once' '
	data &&
	test_expect_code 1 mpi 2 $A --device cuda >out 2>err &&
	test $(grep -c "^gpu-train: \($why\).* (2 of 2 ranks)$" err) = 1 &&
	test $(grep -c "^gpu-train: " err) = 1 &&
	! grep MPI_ABORT err &&
	mpi 2 $A --device cpu >c2.json &&
	mpi 2 $A --device auto >a2.json 2>a2.err &&
	test $(grep -c "training on the CPU" a2.err) = 1 &&
	losses c2.json >c2.losses &&
	losses a2.json >a2.losses &&
	test_cmp c2.losses a2.losses
'

test_expect_success GPU 'GPU, fp32: the losses within 1e-4 of the CPU'"'"'s' '
	ref cpu gpu-train $A --device cpu &&
	gpu-train $A --device cuda --precision fp32 >g32.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | (.device | startswith(\"cuda:\")) and .precision == \"fp32\"" g32.json &&
	losses g32.json >g32.losses &&
	close_to g32.losses cpu.losses 1e-4
'

test_expect_success GPU 'GPU: the start names the device, the CUDA versions, the attention (tensor cores in bf16) and the GELU' '
	rm -f gs.launch gf.launch &&
	CUEMU_LAUNCH_LOG=$PWD/gs.launch gpu-train ${A% --json} --device cuda --steps 1 >gs.txt &&
	grep -E "^cuda:0: .* \(sm_[0-9]+, [0-9.]+ GiB\); driver for CUDA [0-9]+\.[0-9]+, runtime CUDA [0-9]+\.[0-9]+; fused attention on tensor cores; GELU in the matmul epilogue$" gs.txt &&
	CUEMU_LAUNCH_LOG=$PWD/gf.launch gpu-train ${A% --json} --device cuda --precision fp32 \
		--steps 1 >gf.txt &&
	grep -E "^cuda:0: .*; fused attention; GELU in the matmul epilogue$" gf.txt &&
	# on the emulation: the kernels the line names are the ones launched
	{ test -z "$GK_CUEMU" || { grep "^tc_fwd" gs.launch && ! grep "^tc_" gf.launch; }; } &&
	GK_CUDA_ATTENTION=matmul GK_CUDA_GELU=kernel gpu-train $A --device cuda --steps 1 --json >gm.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .gpu | endswith(\"; matmul attention; GELU kernels\")" gm.json
'

test_expect_success GPU 'GPU, bf16: the losses fall and stay within 3% of the CPU'"'"'s' '
	ref cpu gpu-train $A --device cpu &&
	ref g16 gpu-train $A --device cuda &&
	close_to g16.losses cpu.losses 0.03 &&
	awk "NR == 1 { a = \$1 } END { exit !(\$1 < a) }" g16.losses
'

test_expect_success GPU 'GPU, tf32: attention on the tensor cores, the losses within 1e-3 of the CPU'"'"'s' '
	ref cpu gpu-train $A --device cpu &&
	rm -f gt.launch &&
	CUEMU_LAUNCH_LOG=$PWD/gt.launch gpu-train $A --device cuda --precision tf32 >gt.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .precision == \"tf32\" and
		(.gpu | endswith(\"; fused attention on tensor cores; GELU in the matmul epilogue\"))" gt.json &&
	{ test -z "$GK_CUEMU" || { grep "^tc_fwd" gt.launch && grep "^tc_bwd_dkv" gt.launch; }; } &&
	losses gt.json >gt.losses &&
	close_to gt.losses cpu.losses 1e-3
'

# head size 80: the tensor cores' kernels at their width 128, whose
# backward takes 51 KiB of dynamic shared memory (past the 48 KiB a
# launch gets without cudaFuncSetAttribute, which the emulation checks)
test_expect_success GPU 'GPU, tf32 at head size 80: attention on the tensor cores, the losses within 1e-3 of the CPU'"'"'s' '
	data &&
	W="--data train.bin --layers 1 --hidden 80 --heads 1 --positions 33 --seq 16 --threads 1" &&
	W="$W --lr 3e-3 --warmup 2 --batch 2 --steps $short --json" &&
	gpu-train $W --device cpu >w80c.json &&
	rm -f w80.launch &&
	CUEMU_LAUNCH_LOG=$PWD/w80.launch gpu-train $W --device cuda --precision tf32 >w80.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .precision == \"tf32\" and
		(.gpu | endswith(\"; fused attention on tensor cores; GELU in the matmul epilogue\"))" w80.json &&
	{ test -z "$GK_CUEMU" || { grep "^tc_bwd_dq" w80.launch && grep "^tc_bwd_dkv" w80.launch; }; } &&
	losses w80c.json >w80c.losses &&
	losses w80.json >w80.losses &&
	close_to w80.losses w80c.losses 1e-3
'

test_expect_success GPU 'GPU: a resume from the GPU'"'"'s checkpoint gives the same losses, bit for bit' '
	ref g16 gpu-train $A --device cuda &&
	rm -rf gck &&
	gpu-train $A --device cuda --until $half --ckpt-dir gck >ga.json &&
	gpu-train $A --device cuda --ckpt-dir gck --resume >gb.json &&
	{ losses ga.json && losses gb.json; } >gab.losses &&
	test_cmp g16.losses gab.losses
'

test_expect_success GPU 'GPU: a checkpoint the GPU wrote evaluates on the CPU with the GPU'"'"'s loss' '
	data && rm -rf eck &&
	gpu-train $A --device cuda --until $half --ckpt-dir eck >eck.json &&
	gpu-train --eval-only --init-from eck/latest --data train.bin --seq 16 --batch 4 \
		--eval-batches 8 --device cuda --precision fp32 --json >ge.json &&
	gpu-train --eval-only --init-from eck/latest --data train.bin --seq 16 --batch 4 \
		--eval-batches 8 --device cpu --threads 1 --json >ce.json &&
	jq -r "select(.event == \"eval\") | .loss" ge.json >ge.loss &&
	jq -r "select(.event == \"eval\") | .loss" ce.json >ce.loss &&
	close_to ge.loss ce.loss 1e-4
'

# The classifier's kernel of a training step writes the logits' gradient
# for backward's scale, 1/3 with --grad-accum 3, from the first
# micro-step on: a resumed run is the uninterrupted one, bit for bit.
test_expect_success GPU 'GPU: with --grad-accum 3, a resume from the checkpoint gives the same losses, bit for bit' '
	data && rm -rf ack &&
	G="$A --device cuda --grad-accum 3 --steps 3" &&
	gpu-train $G >acc.json &&
	gpu-train $G --until 1 --ckpt-dir ack >acca.json &&
	gpu-train $G --ckpt-dir ack --resume >accb.json &&
	losses acc.json >acc.losses &&
	{ losses acca.json && losses accb.json; } >accab.losses &&
	test $(wc -l <acc.losses) = 3 &&
	test_cmp acc.losses accab.losses
'

# The classifier (lib/nn/classifier.cu) as the emulation's launch log
# (CUEMU_LAUNCH_LOG) lists it: a training micro-step runs one kernel for
# the loss and the logits' gradient, evaluation (--eval-every's and
# --eval-only's) the forward-only kernel, one a batch.
test_expect_success CUEMU 'GPU: one classifier kernel a training micro-step, the forward-only one a batch of evaluation' '
	data && rm -rf xck xl.log xe.log &&
	CUEMU_LAUNCH_LOG=$PWD/xl.log gpu-train --data train.bin $TINY --batch 4 --steps 2 \
		--grad-accum 2 --val-data train.bin --eval-every 2 --eval-batches 2 \
		--ckpt-dir xck --device cuda --json >xl.json &&
	test $(jq -s "map(select(.event == \"step\" and .val_loss != null)) | length" xl.json) = 1 &&
	test $(grep -c "^xent_fused<T> grid " xl.log) = 4 &&
	test $(grep -c "^xent_fwd<T> grid " xl.log) = 2 &&
	! grep "^xent_bwd<T> " xl.log &&
	CUEMU_LAUNCH_LOG=$PWD/xe.log gpu-train --eval-only --init-from xck/latest --data train.bin \
		--seq 16 --batch 4 --eval-batches 3 --device cuda --json >xe.json &&
	test $(grep -c "^xent_fwd<T> grid " xe.log) = 3 &&
	! grep "^xent_fused<T> \|^xent_bwd<T> " xe.log
'

test_expect_success GPU 'GPU: ZeRO-1 over NCCL in a world of one gives the bits of ZeRO-0; its checkpoint resumes' '
	ref g16 gpu-train $A --device cuda &&
	rm -rf zck &&
	gpu-train $A --device cuda --comm nccl --zero 1 --until $half --ckpt-dir zck >gz1.json &&
	gpu-train $A --device cuda --comm nccl --zero 1 --ckpt-dir zck --resume >gz2.json &&
	{ losses gz1.json && losses gz2.json; } >gz12.losses &&
	test_cmp g16.losses gz12.losses &&
	ckpt-merge --check zck/latest
'

test_expect_success GPU 'GPU: --comm nccl in a world of one: the losses of no communication, bit for bit' '
	ref g16 gpu-train $A --device cuda &&
	gpu-train $A --device cuda --comm nccl >gn.json 2>gn.err &&
	test_must_be_empty gn.err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .comm == \"nccl\"" gn.json &&
	losses gn.json >gn.losses &&
	test_cmp g16.losses gn.losses &&
	gpu-train $A --device cuda --comm nccl --compress bf16 --bucket 64K >gz.json &&
	losses gz.json >gz.losses &&
	close_to gz.losses g16.losses 0.01
'

test_expect_success 'GPU,MPI' 'GPU, 2 ranks through the host: the losses of one rank with the global batch' '
	data &&
	gpu-train --data train.bin $TINY --batch 8 --steps $N --json --device cuda --precision fp32 >g1.json &&
	ref g2 mpi 2 $A --device cuda --precision fp32 --comm mpi &&
	jq -s -e "map(select(.event == \"start\"))[0] | .comm == \"mpi\"" g2.json &&
	losses g1.json >g1.losses &&
	close_to g2.losses g1.losses 1e-4
'

# Straggler reports on the device (gpu-train(1) STRAGGLERS): each rank
# finds its GPU in NVML by the PCI bus id CUDA gives. Under the emulation
# that is the fake driver's GPU 0 (tests/cli/fake-nvml.c: 1980 MHz, 40 C,
# power-capped here), loaded as the real one is; on a GPU, the driver's.
# An emulated step takes about 0.3 s of busy time at this size, so the slow
# rank sleeps 500 ms in each (of two ranks, busy is then about 1.9 times the
# median, their mean).
test_expect_success 'GPU,MPI' 'GPU, 2 ranks: a slow rank is named with its GPU'"'"'s clocks from NVML' '
	data &&
	nv= &&
	if nvidia-smi -L | grep -q "CUDA emulation"; then
		mkdir -p fake &&
		${CC:-cc} -shared -fPIC -o fake/libnvidia-ml.so.1 "$GK_TOP/tests/cli/fake-nvml.c" &&
		nv="-x LD_LIBRARY_PATH -x FAKE_NVML_GPUS=1 -x FAKE_NVML_REASONS_0=0x4"
	fi &&
	(
		if test -n "$nv"; then
			LD_LIBRARY_PATH="$PWD/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" &&
			export LD_LIBRARY_PATH
		fi &&
		timeout 300 mpirun --oversubscribe --bind-to none -np 2 $nv \
			-x GK_TEST_STRAGGLER=1:compute:500 gpu-train $A --device cuda --comm mpi \
			--batch 1 --seq 4 --steps 3 --straggler-every 1 >sg.json 2>sg.err
	) &&
	grep "^gpu-train: warning: rank 1 on host .*most of it in compute (+[0-9.]* ms); GPU [0-9]" sg.err &&
	jq -c "select(.event == \"stragglers\") | .straggler // empty" sg.json >sgs.json &&
	jq -e ".gpu >= 0 and .sm_clock_hz > 0 and .temperature_c > 0" sgs.json &&
	if test -n "$nv"; then
		grep "GPU 0 is power-capped (SM 1980 MHz, 40 C)$" sg.err
	fi
'

test_expect_success 'GPU,MPI' 'GPU, 2 ranks: --zero 1 with --comm mpi is refused' '
	data &&
	test_expect_code 1 mpi 2 $A --device cuda --zero 1 --comm mpi 2>err &&
	grep "^gpu-train: --zero 1 on a GPU shards over NCCL: not with --comm mpi" err
'

test_expect_success 'GPUS,MPI' '2 GPUs: NCCL on the device, overlapped or not, gives the losses of the host path' '
	ref g2 mpi 2 $A --device cuda --precision fp32 --comm mpi &&
	ref gn2 mpi 2 $A --device cuda --precision fp32 --bucket 64K &&
	test_must_be_empty gn2.err &&
	jq -s -e "map(select(.event == \"start\"))[0] | .comm == \"nccl\"" gn2.json &&
	mpi 2 $A --device cuda --precision fp32 --bucket 64K --no-overlap >gn3.json &&
	losses gn3.json >gn3.losses &&
	test_cmp gn2.losses gn3.losses &&
	close_to gn2.losses g2.losses 1e-6
'

# The device paths of two ranks against the CPU'"'"'s two ranks, at each
# precision'"'"'s tolerance (fp32 1e-4, tf32 1e-3, bf16 3%): the overlapped
# buckets (three of 64 KiB) and ZeRO-1'"'"'s reduce to the owners.
test_expect_success 'GPUS,MPI' '2 GPUs over NCCL, overlapped and ZeRO-1, at each precision: the losses of 2 CPU ranks' '
	ref c2 mpi 2 $A --device cpu &&
	mpi 2 $A --device cuda --precision fp32 --bucket 64K >n32.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .comm == \"nccl\"" n32.json &&
	losses n32.json >n32.losses &&
	close_to n32.losses c2.losses 1e-4 &&
	mpi 2 $A --device cuda --precision tf32 --bucket 64K --zero 1 >zt.json &&
	losses zt.json >zt.losses &&
	close_to zt.losses c2.losses 1e-3 &&
	for z in 0 1; do
		mpi 2 $A --device cuda --precision bf16 --bucket 64K --zero $z >z16$z.json &&
		losses z16$z.json >z16$z.losses &&
		close_to z16$z.losses c2.losses 0.03 || return 1
	done
'

test_expect_success 'GPUS,MPI' '2 GPUs: ZeRO-1 on the device gives the losses of ZeRO-0; its rank slices resume on one GPU' '
	ref gn2 mpi 2 $A --device cuda --precision fp32 --bucket 64K &&
	rm -rf z2 &&
	mpi 2 $A --device cuda --precision fp32 --zero 1 --until $half --ckpt-dir z2 >gzz.json &&
	test -f z2/latest/optim-rank-00001-of-00002.safetensors &&
	losses gzz.json >gzz.losses &&
	head -n $half gn2.losses >gn2.first &&
	close_to gzz.losses gn2.first 1e-6 &&
	gpu-train $A --device cuda --precision fp32 --batch 8 --ckpt-dir z2 --resume >gz1r.json &&
	test $(losses gz1r.json | wc -l) = $((N - half))
'

# ZeRO-1 over NCCL: each bucket one reduce-scatter of its owners' pieces
# with ncclAvg (lib/comm's grads.c): one group of a reduce per owner,
# one NCCL operation, where the pieces are unequal (buckets of 64 KiB
# inside ZeRO-1's ranges), and one ncclReduceScatter where they are
# equal (a bucket of the whole model); then the one all-gather of the
# updated ranges. The emulation's NCCL logs each collective called
# (CUEMU_NCCL_LOG); the losses are ZeRO-0's bit for bit (a sum of two,
# halved exactly, in either order).
test_expect_success 'CUEMU,GPUS,MPI' '2 GPUs, ZeRO-1: one reduce-scatter a bucket (a group of reduces, or ncclReduceScatter), ZeRO-0'"'"'s losses' '
	data &&
	Z="$A --steps 2 --device cuda --precision fp32" &&
	mpi 2 $Z --bucket 64K --zero 0 >z0.json &&
	losses z0.json >z0.losses &&
	test $(wc -l <z0.losses) = 2 &&
	for b in 64K 1M; do
		rm -f z1$b.log &&
		CUEMU_NCCL_LOG=$PWD/z1$b.log mpi 2 $Z --bucket $b --zero 1 >z1$b.json &&
		losses z1$b.json >z1$b.losses &&
		test_cmp z0.losses z1$b.losses || return 1
	done &&
	n=$(jq -s "map(select(.event == \"start\"))[0].params_padded" z164K.json) &&
	buckets=$(( (n + 16383) / 16384 )) &&
	test $buckets -ge 2 &&
	for r in 0 1; do
		# 64 KiB: every reduce is ncclAvg inside a group, one group a
		# bucket and step; one all-gather a step
		grep "^rank $r " z164K.log >r$r.64K &&
		test $(grep -c " ncclReduce .* op 4 .* group [1-9]" r$r.64K) -ge $((2 * buckets)) &&
		test $(grep -c " ncclReduce " r$r.64K) = $(grep -c " ncclReduce .* op 4 .* group [1-9]" r$r.64K) &&
		test $(grep " ncclReduce " r$r.64K | sed "s/.* group //" | sort -u | wc -l) = $((2 * buckets)) &&
		test $(grep -c " ncclAllGather count $((n / 2)) type 7 " r$r.64K) = 2 &&
		test $(grep -c " ncclReduceScatter " r$r.64K) = 0 &&
		# the whole model in one bucket, equal pieces: ncclReduceScatter
		grep "^rank $r " z11M.log >r$r.1M &&
		test $(grep -c " ncclReduceScatter count $((n / 2)) type 7 op 4 .* group 0$" r$r.1M) = 2 &&
		test $(grep -c " ncclAllGather count $((n / 2)) type 7 " r$r.1M) = 2 &&
		test $(wc -l <r$r.1M) = 4 || return 1
	done
'

# ZeRO-1 on GPUs in bf16 (lib/nn/dp.c's shard_gather): the all-gather
# after the update moves the bf16 working copy (ncclBfloat16, type 9: 2
# bytes a parameter), each rank's range rounded by the update from its
# fp32 master, which stays sharded; a checkpoint gathers the master whole
# first (one fp32 all-gather, type 7). The losses are ZeRO-0's bit for
# bit (2 ranks: the same sums of two, and the same rounding of the same
# fp32 numbers as ZeRO-0's update of the whole model), and so is each
# step's checkpointed model, the fp32 master (without that gather rank 0
# would write its stale copy of rank 1's range), training on after it.
# The emulation's NCCL log: one bf16 all-gather a step and each
# checkpoint's fp32 one, nothing else gathered; in fp32 the steps'
# all-gathers are fp32 (the case above).
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-1 in bf16: the bf16 working copy gathered, ZeRO-0'"'"'s losses and checkpoint bit for bit' '
	data &&
	Z="$A --steps $short --device cuda --precision bf16 --bucket 64K" &&
	rm -rf bz0 bz1 bz1.log &&
	mpi 2 $Z --zero 0 --ckpt-dir bz0 --ckpt-every 1 >bz0.json &&
	CUEMU_NCCL_LOG=$PWD/bz1.log mpi 2 $Z --zero 1 --ckpt-dir bz1 --ckpt-every 1 >bz1.json &&
	losses bz0.json >bz0.losses && losses bz1.json >bz1.losses &&
	test $(wc -l <bz1.losses) = $short &&
	test_cmp bz0.losses bz1.losses &&
	for s in $(seq $short); do
		f=$(printf "step-%08d/model.safetensors" $s) &&
		cmp bz0/$f bz1/$f || return 1
	done &&
	if test_have_prereq CUEMU; then
		n=$(jq -s "map(select(.event == \"start\"))[0].params_padded" bz1.json) &&
		for r in 0 1; do
			grep "^rank $r ncclAllGather " bz1.log >ag$r &&
			test $(grep -c " count $((n / 2)) type 9 " ag$r) = $short &&
			test $(grep -c " count $((n / 2)) type 7 " ag$r) = $short &&
			test $(wc -l <ag$r) = $((2 * short)) || return 1
		done
	fi
'

# ZeRO-2 over NCCL (lib/comm's comm_nccl.c): each bucket one group of
# ncclReduce calls, one to each owner of a piece, summed into a shard in
# device memory. Without accumulation that is ZeRO-1's reduce to each
# owner (a sum of two), then the one division: the same bits (losses,
# gradient norms, model and moment files). With accumulation (and
# without overlap, each bucket reduced as soon as it is complete) the
# micro-steps' reduced sums are added in the shard
# instead of the micro-steps' gradients in the buffer before one
# reduction: within fp32 rounding (1e-6, as t7112 states on the CPU). The
# model writes its gradients into bucket buffers (the next case says how
# many): the accounting's gradients are the shard (params_padded / 2
# floats), its comm those buffers, and the other parts are ZeRO-1's.
# --offload optimizer updates on the host from the shard copied down: the
# same files.
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-2 over NCCL: ZeRO-1'"'"'s losses, norms and checkpoint bit for bit, also offloaded; with accumulation within 1e-6' '
	data &&
	Z="$A --steps $short --device cuda --precision fp32 --bucket 64K" &&
	mpi 2 $Z --zero 1 --ckpt-dir g2z1 >g2z1.json &&
	mpi 2 $Z --zero 2 --ckpt-dir g2z2 >g2z2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .zero == 2 and .comm == \"nccl\"" g2z2.json &&
	for z in z1 z2; do
		jq -c "select(.event == \"step\") | [.loss, .grad_norm]" g2$z.json >g2$z.steps || return 1
	done &&
	test $(wc -l <g2z2.steps) = $short &&
	test_cmp g2z1.steps g2z2.steps &&
	for f in g2z1/latest/*.safetensors; do
		cmp "$f" "g2z2/latest/${f##*/}" || return 1
	done &&
	python3 - <<-\PY &&
	import json
	def start(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)
	z1, z2 = start("g2z1.json"), start("g2z2.json")
	m1, m2 = z1["memory"], z2["memory"]
	assert m2["gradients"] == 4 * z2["params"] // 2, (m1, m2)
	assert m1["comm"] == 0 < m2["comm"], (m1, m2)
	assert all(m1[k] == m2[k] for k in m1
	           if k not in ("gradients", "padding", "comm", "total")), (m1, m2)
	PY
	mpi 2 $Z --zero 2 --offload optimizer --ckpt-dir g2o >g2o.json &&
	for f in g2z2/latest/*.safetensors; do
		cmp "$f" "g2o/latest/${f##*/}" || return 1
	done &&
	mpi 2 $Z --zero 1 --grad-accum 2 >g2a1.json &&
	mpi 2 $Z --zero 2 --grad-accum 2 --no-overlap >g2a2.json &&
	losses g2a1.json >g2a1.losses && losses g2a2.json >g2a2.losses &&
	close_to g2a2.losses g2a1.losses 1e-6
'

# ZeRO-2's device memory: no buffer of the whole model's gradients
# (lib/nn/dp.c, gk_nn_grad_buckets). At --bucket 64K (16384 floats) each of
# the twelve blocks (12704 floats) is a bucket, the last with the final
# norm's 64, and three buffers of the largest are used in turn (two
# buckets in flight and one being filled; one without overlap); the
# embeddings' gradients (wte's 384 rows and wpe's 33 of 32), which
# backward writes first (the tied head) and last (the encoder), have one
# of their own. At --bucket 16K (4096 floats, less than a block) a bucket
# is one block (and the final norm one of its own); at 160K (40960
# floats) three blocks, the top three with the final norm (three such
# buffers hold more than ZeRO-1's whole buffer less the shard). The sizes
# below are counted from the shapes, not read from the run. What the
# emulation's runtime counts (CUEMU_MEM_LOG: each rank's most device
# memory at once) falls from ZeRO-1's by the whole buffer less the shard
# and those buffers, as the start line accounts (gradients: the shard,
# mem-estimate --zero 2's; comm: the buffers, mem-estimate's dp_buckets
# and zero2_embedding_grads for the same --bucket and --no-overlap);
# ZeRO-0's losses and model file, bit for bit (2 ranks: a sum of two, in
# any order). On a GPU only the losses are compared.
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-2: bucket buffers in device memory, not the whole gradient, offloaded or not, as accounted and as mem-estimate states; ZeRO-0'"'"'s losses and model bit for bit' '
	data &&
	Z="$A --layers 12 --device cuda --precision fp32" &&
	for z in 0 1 2 2n 2s 2l 2o 2b; do
		o= && b=64K && s=2 &&
		case $z in
		2n) o=--no-overlap ;;
		2s) b=16K s=1 ;;
		2l) b=160K s=1 ;;
		2o) o="--offload optimizer" s=1 ;;
		2b) o="--offload optimizer --precision bf16" s=1 ;;
		esac &&
		rm -rf mem$z.* b2z$z &&
		(CUEMU_MEM_LOG=$PWD/mem$z && export CUEMU_MEM_LOG &&
		 mpi 2 $Z --steps $s --bucket $b --zero ${z%[nslob]} $o --ckpt-dir b2z$z \
			>b2z$z.json) &&
		losses b2z$z.json >b2z$z.losses || return 1
	done &&
	test $(wc -l <b2z2.losses) = 2 &&
	test_cmp b2z0.losses b2z2.losses &&
	test_cmp b2z0.losses b2z2n.losses &&
	head -n 1 b2z0.losses >b2z0.first &&
	test_cmp b2z0.first b2z2s.losses &&
	test_cmp b2z0.first b2z2l.losses &&
	test_cmp b2z0.first b2z2o.losses &&
	cmp b2z0/latest/model.safetensors b2z2/latest/model.safetensors &&
	for z in 2 2n 2s 2l 2o; do
		o= && b=64K &&
		case $z in
		2n) o=--no-overlap ;;
		2s) b=16K ;;
		2l) b=160K ;;
		2o) o="--offload optimizer" ;;
		esac &&
		mem-estimate --config b2z2/latest/config.json --precision f32 -b 4 -s 16 \
			--no-dropout --zero 2 --dp 2 --bucket $b $o --json >b2me$z.json || return 1
	done &&
	python3 - "$GK_CUEMU" <<-\PY
	import glob, json, sys
	def start(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)
	C, L, block = 32, 12, 12 * 32 * 32 + 13 * 32
	head = (384 + 33) * C                 # wte (vocab 257 padded) and wpe
	n = head + L * block + 2 * C          # and the final norm
	z1 = start("b2z1.json")
	runs = {z: start("b2z%s.json" % z) for z in ("2", "2n", "2s", "2l")}
	assert runs["2"]["params_padded"] == n and n % 2 == 0, (runs["2"], n)
	# the largest bucket: at 64K the last block with the final norm; at
	# 16K one block (the final norm alone above it); at 160K the last
	# three blocks with the final norm
	bufs = {"2": 4 * (head + 3 * (block + 2 * C)), "2n": 4 * (head + block + 2 * C),
	        "2s": 4 * (head + 3 * block), "2l": 4 * (head + 3 * (3 * block + 2 * C))}
	shard = 4 * n // 2
	for z, s in runs.items():
	    m1, m2 = z1["memory"], s["memory"]
	    me = json.load(open("b2me%s.json" % z))["bytes"]
	    assert m2["gradients"] == me["gradients"] == 4 * s["params"] // 2, (m2, me)
	    assert m2["comm"] == bufs[z], (z, m2, bufs[z])
	    assert me["dp_buckets"] + me["zero2_embedding_grads"] == m2["comm"], (z, me, m2)
	    assert me["zero2_embedding_grads"] == 4 * head, (z, me)
	    saved = 4 * n - shard - bufs[z]
	    assert m1["total"] - m2["total"] == saved + m1["checkpoint"] - m2["checkpoint"], (m1, m2)
	    if sys.argv[1]:
	        # each rank of ZeRO-1 against the same rank of ZeRO-2: the
	        # ranks allocate alike (their ranges are equal)
	        peak = lambda p: sorted(int(open(f).read().split()[1]) for f in glob.glob(p + ".*"))
	        p1, p2 = peak("mem1"), peak("mem" + z)
	        assert len(p1) == len(p2) == 2, (p1, p2)
	        assert all(a - b == saved for a, b in zip(p1, p2)), (z, p1, p2, saved)
	        # at 160K three buffers of three blocks outweigh what the
	        # shard saves of this small model: ZeRO-2 holds more
	        assert (saved > 0) == (z != "2l"), (z, saved)
	# offloaded: the moments leave the device, the shard of the gradients stays
	# there until the update on the host copies it down (mem-estimate
	# zero2_grad_shard beside the buckets)
	o = start("b2z2o.json")
	mo, me = o["memory"], json.load(open("b2me2o.json"))["bytes"]
	assert mo["gradients"] == me["gradients"] == 0 == mo["optimizer"] == me["optimizer"], (mo, me)
	assert me["zero2_grad_shard"] == 4 * o["params"] // 2, me
	assert mo["comm"] == bufs["2"] + me["zero2_grad_shard"], (mo, bufs)
	assert me["dp_buckets"] + me["zero2_embedding_grads"] + me["zero2_grad_shard"] == mo["comm"], (me, mo)
	assert o["offload"] == {"where": "host", "state": me["host_ram"] // 2}, (o["offload"], me)
	if sys.argv[1]:
	    # the moments of the padded shard, f32, are what the device no
	    # longer holds
	    p2, p2o = peak("mem2"), peak("mem2o")
	    assert len(p2o) == 2 and all(a - b == 2 * shard for a, b in zip(p2, p2o)), (p2, p2o, shard)
	    # and in bf16 (the model, not lib/mem, counts its states) the
	    # accounting meets the device as closely as in f32: the shard
	    # counted once
	    b = start("b2z2b.json")
	    assert b["memory"]["gradients"] == 0, b["memory"]
	    assert (b["memory"]["total"] - max(peak("mem2b")) ==
	            o["memory"]["total"] - max(p2o)), (b["memory"], peak("mem2b"), o["memory"], p2o)
	PY
'

# The watchdog and abort paths over the emulation's NCCL: a rank whose
# collective never completes (CUEMU_NCCL_HANG), one that meets an
# asynchronous error (CUEMU_NCCL_ERROR). Every rank ends, none hangs.
test_expect_success 'CUEMU,GPUS,MPI' '2 GPUs, a bucket'"'"'s allreduce hangs on one rank: --timeout aborts NCCL, the job exits 1 naming it' '
	data &&
	start=$(date +%s) &&
	(export CUEMU_NCCL_HANG=1:5 &&
	 test_expect_code 1 mpi 2 $A --device cuda --bucket 64K --timeout 3 >hang.json 2>hang.err) &&
	end=$(date +%s) &&
	grep "^gpu-train: nccl: allreduce of [0-9]* F32 avg: not finished after 3 s (a rank may have failed or stopped); communicator aborted$" hang.err &&
	test $((end - start)) -ge 3 &&
	test $((end - start)) -lt 120
'

# ZeRO-2's first division and sum into the shard are kernels queued
# behind a bucket's reduce: their first launch must not wait for it (the
# module's load under lazy loading waits for the device, outside any
# watchdog), so the nccl backend loads them when it opens.
test_expect_success 'CUEMU,GPUS,MPI' '2 GPUs, ZeRO-2: a bucket'"'"'s grouped reduce hangs on one rank: --timeout aborts NCCL, the job exits 1 naming it' '
	data &&
	start=$(date +%s) &&
	(export CUEMU_NCCL_HANG=1:2 &&
	 test_expect_code 1 mpi 2 $A --device cuda --bucket 64K --zero 2 --timeout 3 \
		>hang2.json 2>hang2.err) &&
	end=$(date +%s) &&
	grep "^gpu-train: nccl: reducescatterv of [0-9]* F32 sum: not finished after 3 s (a rank may have failed or stopped); communicator aborted$" hang2.err &&
	test $((end - start)) -lt 120
'

test_expect_success 'CUEMU,GPUS,MPI' '2 GPUs, ZeRO-1: an asynchronous NCCL error ends the job at once, not at the watchdog' '
	data &&
	start=$(date +%s) &&
	(export CUEMU_NCCL_ERROR=0:7 &&
	 test_expect_code 1 mpi 2 $A --device cuda --bucket 64K --zero 1 --timeout 600 \
		>aerr.json 2>aerr.err) &&
	end=$(date +%s) &&
	grep "^gpu-train: nccl: reducescatterv of [0-9]* F32 avg: unhandled system error: cuemu NCCL: an asynchronous error injected by CUEMU_NCCL_ERROR in ncclReduce (operation 7 of rank 0)$" aerr.err &&
	test $((end - start)) -lt 120
'

# --offload optimizer on a GPU (ZeRO-Offload): the moments in host memory
# and AdamW on the CPU, with the kernel's per-element arithmetic (math.h;
# no FMA contraction on either side): the losses and the checkpoint of the
# update on the device, bit for bit, at bf16 (f32 master on the device) and
# fp32; the device accounts no optimizer state, and the host's is
# mem-estimate --offload optimizer's host_ram.
test_expect_success GPU 'GPU: --offload optimizer updates on the CPU, bit for bit with the device'"'"'s update' '
	data &&
	for p in bf16 fp32; do
		gpu-train $A --steps $short --device cuda --precision $p --ckpt-dir od$p >od$p.json &&
		gpu-train $A --steps $short --device cuda --precision $p --ckpt-dir oh$p \
			--offload optimizer >oh$p.json &&
		losses od$p.json >od$p.losses && losses oh$p.json >oh$p.losses &&
		test_cmp od$p.losses oh$p.losses &&
		cmp od$p/latest/model.safetensors oh$p/latest/model.safetensors &&
		cmp od$p/latest/optim.safetensors oh$p/latest/optim.safetensors || return 1
	done &&
	mem-estimate --config odfp32/latest/config.json --precision f32 -b 4 -s 16 --no-dropout \
		--offload optimizer --gpus-per-node 1 --json >ohme.json &&
	python3 - <<-\PY
	import json
	def start(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)
	off, dev = start("ohfp32.json"), start("odfp32.json")
	me = json.load(open("ohme.json"))["bytes"]
	assert off["memory"]["optimizer"] == me["optimizer"] == 0, (off["memory"], me)
	assert off["offload"] == {"where": "host", "state": me["host_ram"]}, (off, me)
	assert dev["memory"]["optimizer"] == me["host_ram"], (dev["memory"], me)
	assert "offload" not in dev
	PY
'

test_expect_success NOGPU 'no GPU: --offload optimizer with --device auto on the CPU is refused, pointing to optimizer:DIR' '
	data &&
	test_expect_code 2 gpu-train $A --device auto --offload optimizer >out 2>err &&
	grep "^gpu-train: --offload optimizer moves a GPU.s optimizer state to host memory, and this run is on the CPU, which keeps it there: give optimizer:DIR" err
'

# two ranks under ZeRO-1: half the steps on the device, a checkpoint, the
# rest with the update on the CPU, as all of them on the device
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-1: a resume into --offload optimizer continues bit for bit' '
	data &&
	Z="$A --steps $short --device cuda --precision fp32 --zero 1" &&
	mpi 2 $Z --ckpt-dir oz0 >oz0.json &&
	mpi 2 $Z --ckpt-dir oz1 --until $((short / 2)) >oz1a.json &&
	mpi 2 $Z --ckpt-dir oz1 --resume --offload optimizer >oz1.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .memory.optimizer == 0 and .offload.where == \"host\"" oz1.json &&
	losses oz0.json | tail -n $((short - short / 2)) >oz0.losses && losses oz1.json >oz1.losses &&
	test_cmp oz0.losses oz1.losses &&
	for f in oz0/latest/*.safetensors; do
		cmp "$f" "oz1/latest/${f##*/}" || return 1
	done
'

# --compress with ZeRO-2 over NCCL: each bucket is reduce-scattered to its
# owners' pieces by the compressed ring (ncclSend/ncclRecv in a group a
# step, the packing, unpacking and error-feedback kernels on the device),
# into ZeRO-1's error feedback. An element's partial sums take the path
# they take in ZeRO-1's one reduce-scatter of the whole buffer, and bf16
# packs each element alone: ZeRO-1 --compress's losses, norms, model,
# moments and feedback, bit for bit, and a resume moves between the two
# stages with the feedback (2 -> 1 -> 2, as one run of either). At
# --bucket 16K a bucket is a block (12704 floats) or some of the
# embeddings' rows; block 0's, which holds the middle of the buffer, has
# pieces of both ranks, the others one empty piece (no message). The CPU
# backend's ZeRO-2 --compress within 1e-4 (the two backends' fp32
# gradients, rounded to bf16 alike but for a rare tie): the losses, and
# the model, moments and feedback files (stcmp, relative to max(1, |x|));
# and the GPU resumes from the CPU's checkpoint with its feedback (the
# same layout), continuing as the CPU's run within 1e-4.
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-2 --compress bf16 over NCCL: ZeRO-1 --compress'"'"'s losses, norms and checkpoint (feedback too) bit for bit, resumed 2 -> 1 -> 2 alike; the CPU'"'"'s within 1e-4, resumed from it too' '
	data &&
	Z="$A --device cuda --precision fp32 --bucket 16K --compress bf16" &&
	mpi 2 $Z --zero 1 --ckpt-dir gc1 >gc1.json &&
	mpi 2 $Z --zero 2 --ckpt-dir gc2 >gc2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .zero == 2 and .comm == \"nccl\"" gc2.json &&
	for z in 1 2; do
		jq -c "select(.event == \"step\") | [.loss, .grad_norm]" gc$z.json >gc$z.steps || return 1
	done &&
	test $(wc -l <gc2.steps) = $N &&
	test_cmp gc1.steps gc2.steps &&
	test $(ls gc2/latest/feedback-rank-*.safetensors | wc -l) = 2 &&
	for f in gc1/latest/*.safetensors; do
		cmp "$f" "gc2/latest/${f##*/}" || return 1
	done &&
	mpi 2 $Z --zero 2 --until 1 --ckpt-dir gcr >gcr1.json &&
	mpi 2 $Z --zero 1 --until 3 --ckpt-dir gcr --resume >gcr2.json 2>gcr2.err &&
	mpi 2 $Z --zero 2 --ckpt-dir gcr --resume >gcr3.json 2>gcr3.err &&
	! grep "error feedback" gcr2.err gcr3.err &&
	{ losses gcr1.json && losses gcr2.json && losses gcr3.json; } >gcr.losses &&
	losses gc1.json >gc1.losses &&
	test_cmp gc1.losses gcr.losses &&
	for f in gc1/latest/*.safetensors; do
		cmp "$f" "gcr/latest/${f##*/}" || return 1
	done &&
	mpi 2 $A --precision fp32 --bucket 16K --compress bf16 --zero 2 --ckpt-dir cc2 >cc2.json &&
	losses cc2.json >cc2.losses &&
	close_to gc1.losses cc2.losses 1e-4 &&
	for f in gc2/latest/*.safetensors; do
		stcmp "$f" "cc2/latest/${f##*/}" 1e-4 || return 1
	done &&
	mpi 2 $A --precision fp32 --bucket 16K --compress bf16 --zero 2 --until $half \
		--ckpt-dir ccr >/dev/null &&
	mpi 2 $Z --zero 2 --ckpt-dir ccr --resume >ccg.json 2>ccg.err &&
	! grep "error feedback" ccg.err &&
	losses ccg.json >ccg.losses &&
	tail -n $((N - half)) cc2.losses >cc2.tail &&
	close_to ccg.losses cc2.tail 1e-4
'

# The memory a rank accounts on GPUs is mem-estimate's for the same
# config.json and layout (its --pp-stage 0, rank 0's): the host terms
# (host_memory, term by term: the mirrors of a tensor rank's whole table
# on every pipeline stage, the staging, the moments of the rank's pieces)
# on one GPU, tp 2 and pp 2 x dp 2 under ZeRO-1; comm the tensor group's
# buffers (its fp32 sums and the cross-entropy's floats, mem-estimate's
# tp_buffers) and with --compress bf16 over the grid the stage's error
# feedback and wire buffers on the device (its compress_feedback and
# compress_wire) and its pipeline send buffers (pp_buffers).
{ test -n "$GK_CUEMU" || test "$GK_GPUS" -ge 4; } && test_have_prereq GPUS && test_set_prereq GPUS4

test_expect_success 'GPUS4,MPI' 'host memory and comm by layout on GPUs = mem-estimate: one GPU, tp 2, pp 2 x dp 2 --zero 1 --compress bf16' '
	data &&
	M="--data train.bin $TINY --batch 4 --steps 1 --json --device cuda --precision fp32" &&
	gpu-train $M >hm1.json &&
	mpi 2 $M --tp 2 >hmt.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $M --pp 2 --zero 1 --compress bf16 >hmp.json 2>hmp.err) &&
	start_config hm1.json hm.json &&
	E="--config hm.json --precision f32 -b 4 -s 16 --no-dropout --json" &&
	mem-estimate $E >hm1e.json &&
	mem-estimate $E --tp 2 >hmte.json &&
	mem-estimate $E --dp 2 --pp 2 --pp-stage 0 --zero 1 --compress bf16 >hmpe.json &&
	python3 - <<-\PY
	import json
	for g, want_comm in (("hm1", ()), ("hmt", ("tp_buffers",)),
	                     ("hmp", ("compress_feedback", "compress_wire", "pp_buffers"))):
	    start = next(json.loads(l) for l in open(g + ".json") if "\"start\"" in l)
	    me = json.load(open(g + "e.json"))
	    b = me["bytes"]
	    want = {k: v for k, v in b.items() if k.startswith("host_") and k != "host_ram"}
	    got = start["host_memory"]
	    assert {k: v for k, v in got.items() if k != "total"} == want, (g, got, want)
	    assert got["total"] == me["host_per_rank"], (g, got, me["host_per_rank"])
	    comm = sum(b[k] for k in want_comm)
	    assert all(b[k] > 0 for k in want_comm) and start["memory"]["comm"] == comm, \
	        (g, start["memory"], comm)
	PY
'

test_done
