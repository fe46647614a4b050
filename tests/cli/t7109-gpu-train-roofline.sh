#!/bin/sh
test_description='tools/bench/roofline.sh: the GEMMs it models are the ones
gpu-train --device cuda issues, as the CUDA emulation'"'"'s manifest
(CUEMU_GEMM_LOG) lists them for one step, and a manifest that differs is
refused; the table has a row for every kernel and the step at GPT-2 124M'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

# the CUDA emulation's manifest of GEMMs: make check-cuemu runs this
# test again on the emulation, where the first two cases run
test -n "$GK_CUEMU" && test_set_prereq CUEMU

roofline="$GK_TOP/tools/bench/roofline.sh"
shape="LAYERS=2 HIDDEN=64 HEADS=4 VOCAB=256 SEQ=16 BATCH=2"

test_expect_success CUEMU 'one step on the emulation: its manifest is the modelled GEMMs' '
	train_data &&
	CUEMU_GEMM_LOG=$PWD/gemm.log gpu-train --device cuda --precision bf16 --data train.bin \
		--layers 2 --hidden 64 --heads 4 --vocab 256 --positions 32 --seq 16 --batch 2 \
		--steps 1 --json >one.json &&
	test $(wc -l <gemm.log) = 27 &&
	env $shape "$roofline" --manifest gemm.log >table &&
	grep "^manifest: 27 GEMMs, the modelled ones" table &&
	grep "^gemm.fwd  *6 " table && grep "^gemm.bwd.head.dw  *1 " table &&
	grep "^gemm.fwd.gelu  *2 " table && grep "^gemm.bwd.dinp.dgelu  *2 " table &&
	grep "^flash.bwd  *2 " table && grep "^classifier  *1 " table &&
	! grep "^gelu\." table &&
	grep "^roofline step: " table
'

# GK_CUDA_GELU=kernel: plain c_fc and c_proj GEMMs and gelu.cu's two
# kernels, the model's GELU=kernel; either manifest against the other
# model is refused on the epilogues
test_expect_success CUEMU 'the GELU as kernels: its manifest is GELU=kernel'"'"'s model, not the epilogue'"'"'s' '
	GK_CUDA_GELU=kernel CUEMU_GEMM_LOG=$PWD/gemmk.log gpu-train --device cuda --precision bf16 \
		--data train.bin --layers 2 --hidden 64 --heads 4 --vocab 256 --positions 32 --seq 16 \
		--batch 2 --steps 1 --json >k.json &&
	test $(wc -l <gemmk.log) = 27 && ! grep GELU gemmk.log &&
	env $shape GELU=kernel "$roofline" --manifest gemmk.log >tablek &&
	grep "^gemm.fwd  *8 " tablek && grep "^gelu.fwd  *2 " tablek && grep "^gelu.bwd  *2 " tablek &&
	test_expect_code 1 env $shape "$roofline" --manifest gemmk.log 2>err &&
	grep "^< .* BIAS$" err && grep "^> .* GELU_AUX_BIAS$" err &&
	test_expect_code 1 env $shape GELU=kernel "$roofline" --manifest gemm.log 2>err &&
	test_expect_code 2 env GELU=both "$roofline" 2>err &&
	grep "GELU .both.: epilogue or kernel" err
'

test_expect_success CUEMU 'a manifest of another model, or with a GEMM missing, is refused' '
	test_expect_code 1 env LAYERS=3 HIDDEN=64 HEADS=4 VOCAB=256 SEQ=16 BATCH=2 "$roofline" --manifest gemm.log 2>err &&
	grep "^roofline.sh: the manifest.s GEMMs are not the modelled ones" err &&
	sed 1d gemm.log >short.log &&
	test_expect_code 1 env $shape "$roofline" --manifest short.log 2>err &&
	grep "^< \|^> " err &&
	test_expect_code 2 "$roofline" --manifest nothing.log 2>err &&
	grep "cannot read the manifest" err
'

# cuBLASLt's heuristic is asked once per distinct problem (shape,
# types, alignments, workspace) and its answer kept (matmul_cuda.c):
# over three steps the emulation's cuBLASLt logs each query
# (CUEMU_LT_HEURISTIC_LOG), none twice, fewer than a step's GEMMs, while
# the GEMMs are issued every step.
test_expect_success CUEMU 'three steps: one heuristic query per distinct GEMM problem, not one per GEMM' '
	rm -f heur.log gemm3.log &&
	CUEMU_LT_HEURISTIC_LOG=$PWD/heur.log CUEMU_GEMM_LOG=$PWD/gemm3.log gpu-train --device cuda \
		--precision bf16 --data train.bin --layers 2 --hidden 64 --heads 4 --vocab 256 \
		--positions 32 --seq 16 --batch 2 --steps 3 --json >three.json &&
	test $(wc -l <gemm3.log) = 81 &&
	test $(wc -l <heur.log) -ge 1 &&
	test $(sort heur.log | uniq -d | wc -l) = 0 &&
	test $(wc -l <heur.log) -lt 27 &&
	test $(sed "s/ beta .*//" gemm3.log | sort -u | wc -l) -le $(wc -l <heur.log)
'

test_expect_success 'GPT-2 124M on an H200: a measured step is read against the roofline' '
	GPU="NVIDIA H200" STEP_MS=20 "$roofline" >big &&
	grep "989 TFLOP/s, 4800 GB/s" big &&
	awk "\$1 == \"step\" { f = \$2 } END { exit !(f > 6000 && f < 7500) }" big &&
	grep "^measured step: 20.00 ms, " big
'

test_done
