#!/bin/sh
test_description='gpu-train --pp on --device cuda

A pipeline of GPUs: each stage runs its layers on its device (the
embedding on the first, the final norm and the head on the last), the
activations and their gradients go between the stages over NCCL (send
and receive in groups on a communicator of the pipeline), the tied
embedding'"'"'s two gradients are summed over NCCL. Against one GPU on the
same global batch the first step'"'"'s loss is the same bits (the same
kernels in the same order on each micro-batch) and the later ones within
1e-6 in fp32: the tied embedding'"'"'s gradient is summed in another order
(each stage'"'"'s total over the micro-batches, then the two; one GPU adds
the head'"'"'s and the embedding'"'"'s micro-batch by micro-batch), so the
parameters after a step differ in their last bits; so does the
validation loss of the pipeline forward; against the
CPU backend'"'"'s --pp 2 within fp32'"'"'s device tolerance (t7106: 1e-4). In
bf16 the first step'"'"'s loss is the same bits too and the later ones
within 1e-5 (below). A
stage'"'"'s model states are mem-estimate --pp'"'"'s; its device holds its
range and the tied wte only, its measured peak the same whatever the
other stage'"'"'s layers (fp32, bf16, ZeRO 1 over pp 2 x dp 2), its padding
the padded vocabulary rows'"'"'. A device pipeline'"'"'s
checkpoint resumes on one GPU (within 1e-6 of the run that never
stopped) and on the CPU (within 1e-4). Two pipelines (pp 2 x dp 2) average
their gradients over NCCL, each data-parallel group on a communicator of
its own (or through host memory with --comm mpi: the same bits), within
1e-6 of one GPU; under ZeRO 1 (each stage cut over its
data-parallel group) the bits of ZeRO 0, resumed exactly, and in bf16,
gathering the bf16 working copy, ZeRO 0'"'"'s losses and checkpoints; under
ZeRO 2 (the same pieces, reduce-scattered in buckets) ZeRO 1'"'"'s losses,
norms and checkpoints bit for bit, its model states mem-estimate'"'"'s, its
checkpoint resumed on the CPU by one rank; under ZeRO 3 (the same pieces
kept as each rank'"'"'s parameters, its units gathered on the device)
ZeRO 1'"'"'s losses, norms, evaluation and checkpoints bit for bit, its
parameters mem-estimate'"'"'s, its checkpoint resumed on the CPU. With
--offload optimizer (each rank'"'"'s pieces updated on the host) the losses and checkpoints are the
device update'"'"'s bits. With --compress bf16 (ZeRO 0) two pipelines are
the CPU'"'"'s compressed run within 1e-6, their error feedback too but for a
flipped rounding in 1000. Under --pp-schedule interleaved (2
chunks a stage, 5 micro-batches in groups of 3), its messages each on a
lane of NCCL communicators, the losses and the validation loss are
1F1B'"'"'s on GPUs bit for bit through a resume into 1F1B and back, the
norms within 1e-12, the CPU'"'"'s interleaved run within 1e-4; under tp 2 x
pp 2 too, and tp 2 x pp 2 under --sequence-parallel (its stages sending
a rank'"'"'s positions only) gives tp 2 x pp 2'"'"'s loss bit for bit, its norm
within 1e-6. --sample through the stages (a forward of the window a token,
its activations over NCCL) gives one GPU'"'"'s tokens and the CPU'"'"'s,
interleaved and in bf16 too.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

test_gpu_prereqs HAVE_CUDA

# Two stages, each on its own GPU (NCCL takes one rank a device in a
# communicator). 3 micro-batches: under 1F1B the first stage keeps 2 in
# flight, each in its own activation slot. Under the CUDA emulation a
# kernel runs about a thousand times slower than on a GPU: 3 steps, the
# checkpoint at step 2.
N=3
A="--data train.bin $TINY --batch 4 --grad-accum 3 --steps $N --json"
G="$A --device cuda --precision fp32"
# evaluation at the last step: the pipeline forward only
E="--val-data val.bin --eval-every $N --eval-batches 2"

# The first step bit for bit, the rest within $3 (1e-6 unless given; above).
first_then_close() {
	head -n 1 "$1" >"$1.first" && head -n 1 "$2" >"$2.first" &&
	test_cmp "$1.first" "$2.first" && close_to "$2" "$1" "${3:-1e-6}"
}

test_expect_success 'GPUS,MPI' 'pp 2 on GPUs: the losses (and the validation loss) of one GPU, the first bit for bit, 1F1B and GPipe, --comm nccl (each stage'"'"'s gradients over NCCL in a group of one, under ZeRO 2 too: nothing to cut, its steps ZeRO 0'"'"'s bits), and of the CPU pipeline within 1e-4' '
	train_data &&
	gpu-train $G $E >one.json &&
	losses one.json >one &&
	test $(wc -l <one) = $N &&
	mpi 2 $G $E --pp 2 >pp.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | (.device | startswith(\"cuda:\")) and .pp == 2 and .dp == 1" pp.json &&
	losses pp.json >pp &&
	first_then_close one pp &&
	jq -r "select(.event == \"summary\") | .val_loss" one.json >one.val &&
	jq -r "select(.event == \"summary\") | .val_loss" pp.json >pp.val &&
	grep "^[0-9]" one.val &&
	close_to pp.val one.val 1e-6 &&
	mpi 2 $G --pp 2 --pp-schedule gpipe >gp.json &&
	losses gp.json >gp &&
	first_then_close one gp &&
	mpi 2 $G --pp 2 --comm nccl >pn1.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .comm == \"nccl\"" pn1.json &&
	losses pn1.json >pn1 &&
	first_then_close one pn1 &&
	mpi 2 $G --pp 2 --comm nccl --zero 2 >pn1z.json &&
	steps pn1.json >pn1.steps && steps pn1z.json >pn1z.steps &&
	test_cmp pn1.steps pn1z.steps &&
	mpi 2 $A --device cpu --pp 2 >cpu.json &&
	losses cpu.json >cpu &&
	close_to pp cpu 1e-4
'

# bf16: the first step is one GPU's bits, as in fp32 (the activations
# sent between the stages are the bf16 values one GPU keeps). After it the
# fp32 masters differ in their last bits as in fp32, and the forward reads
# the bf16 working copy rounded from them: the differences round away,
# except where a master lies that close to a rounding boundary and rounds
# the other way, one bf16 ulp (2^16 fp32 ulps; about 1e-4 for these
# weights of about 0.02). Equal bits after the first step rest on no such
# flip, which the data decide. A flip moves the loss by about the
# weight's gradient times that ulp: a gradient norm of about 2 over 35k
# parameters, 0.01 a weight, so 1e-6; the next step's gradients move with
# it and Adam's update (lr 3e-3 times their relative change) flips tens
# of weights more: a few 1e-6 at step 3. The bound is 1e-5 relative
# (5e-5 at these losses), and one step's progress is 0.07 to 0.15, an lr
# 1% off moves step 2 by 1.2e-4 relative: an update that loses a part
# still fails it. Measured on the emulation: the same bits in 3 steps (and 12);
# one GPU's runs that differ only in the order of every gradient's sums
# (--batch 12, 6, 4, 3, 2 at --grad-accum 1, 2, 3, 4, 6) within 6e-8
# relative in 3 steps and 5e-6 in 8.
test_expect_success 'GPUS,MPI' 'pp 2 on GPUs in bf16 (bf16 activations between the stages): the losses of one GPU, the first bit for bit, the rest within 1e-5' '
	gpu-train $A --device cuda --precision bf16 >one16.json &&
	mpi 2 $A --device cuda --precision bf16 --pp 2 >pp16.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .precision == \"bf16\" and .pp == 2" pp16.json &&
	losses one16.json >one16 &&
	losses pp16.json >pp16 &&
	test $(wc -l <pp16) = $N &&
	first_then_close one16 pp16 1e-5
'

test_expect_success 'GPUS,MPI' 'stage 0 on its GPU: parameters, gradients and optimizer = mem-estimate --pp 2' '
	start_config pp.json cfg.json &&
	mem-estimate --config cfg.json --precision f32 -b 4 -s 16 --grad-accum 3 \
		--no-dropout --pp 2 --json >me.json &&
	python3 - pp.json me.json <<-\PY
	import json, sys
	st = next(json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l)
	est = json.load(open(sys.argv[2]))
	g, m = st["memory"], est["bytes"]
	assert est["stage"] == 0, est["stage"]
	for k in ("parameters", "gradients", "optimizer"):
	    if g[k] != m[k]:
	        sys.exit("%s: gpu-train %d, mem-estimate --pp %d" % (k, g[k], m[k]))
	print("stage 0:", g["parameters"], g["gradients"], g["optimizer"])
	PY
'

# A stage's device holds its segments of the flat buffer only, its range
# and on the last stage the tied wte: the other stage's parameters cost it
# nothing. Each rank's most device memory at once (the emulation's
# CUEMU_MEM_LOG, a step) is the same on stage 0 at 3 layers and at 4 (the
# last stage's 1 and 2), in fp32 and bf16, and on the last stage at 4 and
# 5 (the first's 2 and 3), where the whole flat buffer on every stage
# would add the other stage's block, 12 C^2 + 13 C = 12704 parameters at C
# 32, at 8 bytes each (fp32 master and gradients; 10 in bf16, the working
# copy too: what the change from that buffer measured, 102144 bytes on
# stage 0 of 2 layers); the stage that takes the layer grows by the block
# at 16 bytes (master, gradients, two moments; 18 in bf16) and the
# layer's activations (the step line's). Stage 0's start line counts as
# padding only what the vocabulary's padded rows hold, 127 x 32 of them
# at 4 + 4 + 8 bytes (2 more in bf16).
peaks() {
	log=$1 n=$2 &&
	shift 2 &&
	rm -f $log.* &&
	timeout 300 mpirun --oversubscribe --bind-to none -np $n \
		sh -c "CUEMU_MEM_LOG=$log.\$OMPI_COMM_WORLD_RANK exec gpu-train \"\$@\"" sh "$@"
}
peak() {
	cut -d" " -f2 $1.mem.$2.*
}
test_expect_success 'GPUS,MPI' 'a stage'"'"'s GPU holds its range and the tied wte only: its peak the same whatever the other stage'"'"'s layers, the layer it takes the block'"'"'s 16 bytes a parameter (18 in bf16) and its activations more; padding the padded vocabulary rows'"'"' only' '
	{ test -f train.bin || train_data; } &&
	blk=$((12 * 32 * 32 + 13 * 32)) && rows=$((127 * 32)) &&
	for p in fp32 bf16; do
		e=0 && if test $p = bf16; then e=2; fi &&
		for l in 3 4 $(test $p = bf16 || echo 5); do
			peaks sm$p$l.mem 2 $A --device cuda --precision $p --steps 1 --grad-accum 1 \
				--layers $l --pp 2 >sm$p$l.json || return 1
		done &&
		jq -s -e "map(select(.event == \"start\"))[0].memory.padding == $rows * (16 + $e)" \
			sm${p}3.json &&
		if test -n "$GK_CUEMU"; then
			act() { jq "select(.event == \"step\") | .pp_stages[$2].activations" $1.json; } &&
			# stage $1 from $2 to $3 layers: how much its peak and
			# its activations grow, and what the peak should
			grow() {
				d=$(($(act sm$p$3 $1) - $(act sm$p$2 $1))) &&
				echo $(($(peak sm$p$3 $1) - $(peak sm$p$2 $1))) $d
			} &&
			takes() {
				d=$(($(act sm$p$3 $1) - $(act sm$p$2 $1))) &&
				echo $((blk * (16 + e) + d)) $d
			} &&
			echo "$p, 3 to 4 layers: stage 0 $(grow 0 3 4), stage 1 $(grow 1 3 4)" &&
			test "$(grow 0 3 4)" = "0 0" &&
			test "$(grow 1 3 4)" = "$(takes 1 3 4)" &&
			if test $p = fp32; then
				echo "$p, 4 to 5 layers: stage 0 $(grow 0 4 5), stage 1 $(grow 1 4 5)" &&
				test "$(grow 1 4 5)" = "0 0" &&
				test "$(grow 0 4 5)" = "$(takes 0 4 5)"
			fi
		fi || return 1
	done
'

test_expect_success 'GPUS,MPI' 'a device pipeline'"'"'s checkpoint resumes on one GPU (within 1e-6) and on the CPU (within 1e-4)' '
	mpi 2 $G --pp 2 --until 2 --ckpt-dir ck >/dev/null &&
	jq -e ".pp == 2" ck/latest/trainer.json &&
	tail -n 1 one >one.tail &&
	cp -R ck ckg &&
	gpu-train $G --ckpt-dir ckg --resume >rg.json 2>err &&
	grep "resumed with --pp 1 (the checkpoint.s run: 2)" err &&
	losses rg.json >rg &&
	close_to rg one.tail 1e-6 &&
	cp -R ck ckc &&
	gpu-train $A --device cpu --ckpt-dir ckc --resume >rc.json &&
	losses rc.json >rc &&
	test $(wc -l <rc) = 1 &&
	close_to rc one.tail 1e-4
'

# --pp-schedule interleaved on GPUs: 4 layers, stage 0 runs layers 0 and
# 2, stage 1 layers 1 and 3 (t7125 has the schedule on the CPU); 5
# micro-batches go through the chunks in groups of 3 (0, 1, 2 through
# both chunks, then 3, 4). Between the two stages go activations and
# gradients both ways; each message takes a lane (a device communicator
# of its kind and its sender's parity) where a stage only sends or only
# receives, so NCCL's matching in posting order, and its sends that wait
# for their receives, meet the schedule's order (one communicator, or one
# a kind, hangs: the emulation's NCCL matches and blocks as NCCL does).
# Each chunk meets the micro-batches in 1F1B's order, so the losses are
# 1F1B's bits on GPUs as on the CPU, and the norm, summed over other
# layers, within 1e-12. A run that goes interleaved (a step), 1F1B (one),
# interleaved again (one), resuming each time, is the 1F1B run that never
# stopped, its validation loss (the pipeline forward through the chunks)
# too. A stage's device activations are mem-estimate's sets in flight
# (min(M V, warm-up + 1): 6 on stage 0, 4 on stage 1) of a chunk's
# buffers, which are those of a 1F1B stage of the chunk's one layer (a
# 2-layer pipeline's, whose stages keep mem-estimate's 2 and 1 sets), not
# of the stage's two layers.
I="--pp-schedule interleaved --pp-chunks 2"
P4="--layers 4 --batch 2 --grad-accum 5 --steps 3"
G4="$G $P4"

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

test_expect_success 'GPUS,MPI' 'interleaved pp 2 (V 2, groups of 3) on GPUs, resumed into 1F1B and back: the 1F1B run'"'"'s losses and validation loss bit for bit, its norms within 1e-12; the CPU'"'"'s interleaved run within 1e-4' '
	E4="--val-data val.bin --eval-every 3 --eval-batches 2" &&
	mpi 2 $G4 --pp 2 $E4 >f4.json &&
	mpi 2 $G4 --pp 2 $I --until 1 --ckpt-dir ilv >i4.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .pp_schedule == \"interleaved\" and
		.pp_chunks == 2 and .pp_group == 3 and (.device | startswith(\"cuda:\"))" i4.json &&
	mpi 2 $G4 --pp 2 --until 2 --ckpt-dir ilv --resume >r3.json 2>err &&
	grep "resumed with --pp-schedule 1f1b (the checkpoint.s run: interleaved)" err &&
	mpi 2 $G4 --pp 2 $I $E4 --ckpt-dir ilv --resume >r4.json &&
	losses f4.json >f4 &&
	cat i4.json r3.json r4.json >chain.json &&
	losses chain.json >chain &&
	test $(wc -l <chain) = 3 &&
	test_cmp f4 chain &&
	norms f4.json >f4.n && norms chain.json >chain.n &&
	close_to chain.n f4.n 1e-12 &&
	jq -r "select(.event == \"summary\") | .val_loss" f4.json >f4.val &&
	jq -r "select(.event == \"summary\") | .val_loss" r4.json >r4.val &&
	grep "^[0-9]" f4.val &&
	test_cmp f4.val r4.val &&
	mpi 2 $A $P4 --device cpu --pp 2 $I >c4.json &&
	losses c4.json >c4 &&
	close_to chain c4 1e-4 &&
	mpi 2 $G4 --pp 2 --layers 2 --steps 1 >l2.json &&
	s=0 && while test $s -lt 2; do
		me="mem-estimate --hidden 32 --heads 2 --vocab 257 --positions 33 --precision f32 \
			-b 2 -s 16 --grad-accum 5 --pp 2 --pp-stage $s --json" &&
		n=$($me --layers 4 $I | jq .inflight) &&
		n1=$($me --layers 2 | jq .inflight) &&
		a=$(jq "select(.event == \"step\") | .pp_stages[$s].activations" i4.json) &&
		a1=$(jq "select(.event == \"step\") | .pp_stages[$s].activations" l2.json) &&
		echo "stage $s: $a bytes in $n sets, a 1-layer stage $a1 in $n1" &&
		test $((a * n1)) = $((a1 * n)) || return 1
		s=$((s + 1))
	done
'

# pp 2 x dp 2: four ranks on four GPUs (the emulation makes them:
# CUEMU_GPUS below), each data-parallel group's NCCL communicator over
# its two ranks (one per pipeline), on different devices
{ test -n "$GK_CUEMU" || test "$GK_GPUS" -ge 4; } && test_have_prereq GPUS && test_set_prereq GPUS4

# tp 2 x pp 2: each stage a tensor group of two GPUs, each chunk's
# layers split over it as a stage's are; 4 micro-batches, groups of 2. A
# step: the loss (the forward through the chunks) and the norm (the
# backward's gradients through them)
test_expect_success 'GPUS4,MPI' 'interleaved tp 2 x pp 2 on GPUs: 1F1B'"'"'s loss bit for bit, its norm within 1e-12' '
	T4="$G --layers 4 --batch 2 --grad-accum 4 --steps 1 --tp 2 --pp 2" &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $T4 >tf.json &&
	 mpi 4 $T4 $I >ti.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .pp == 2 and .pp_chunks == 2" ti.json &&
	losses tf.json >tf && losses ti.json >ti &&
	test $(wc -l <ti) = 1 &&
	test_cmp tf ti &&
	norms tf.json >tf.n && norms ti.json >ti.n &&
	close_to ti.n tf.n 1e-12
'

# the same tp 2 x pp 2 under --sequence-parallel: each stage's tensor
# group keeps its positions between the blocks, and a stage sends the
# next a rank's T/2 positions of each sequence, in the activation type
# (pp_comm_bytes 4 m N C / 2: m 4, N 2 x 16, C 32). The forward is the
# same bits; the LayerNorms' parameter gradients add a rank's positions
# first (t7127's 1e-6)
test_expect_success 'GPUS4,MPI' 'tp 2 x pp 2 --sequence-parallel on GPUs: the loss of tp 2 x pp 2 bit for bit, its norm within 1e-6, half the bytes between stages' '
	T4="$G --layers 4 --batch 2 --grad-accum 4 --steps 1 --tp 2 --pp 2" &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $T4 --sequence-parallel >ts.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .sequence_parallel and .tp == 2 and .pp == 2" ts.json &&
	losses ts.json >ts && test $(wc -l <ts) = 1 &&
	test_cmp tf ts &&
	norms ts.json >ts.n && close_to ts.n tf.n 1e-6 &&
	b=$((4 * 4 * 2 * 16 * 32 / 2)) &&
	echo "$b $b $b" >want &&
	jq -r "select(.event == \"step\") | [.pp_comm_bytes, .pp_stages[].pp_comm_bytes] | join(\" \")" \
		ts.json >got &&
	test_cmp want got
'

test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 on GPUs: over NCCL (--comm nccl and auto) within 1e-6 of one GPU on the same global batch and the --comm mpi run'"'"'s bits' '
	gpu-train $G --batch 8 >one8.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --pp 2 --comm nccl >pn.json &&
	 mpi 4 $G --pp 2 >pa.json &&
	 mpi 4 $G --pp 2 --comm mpi >pd.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2 and .comm == \"nccl\"" pn.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2 and .comm == \"nccl\"" pa.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2 and .comm == \"mpi\"" pd.json &&
	losses one8.json >one8 &&
	for f in pn pa pd; do
		losses $f.json >$f &&
		test $(wc -l <$f) = $N &&
		close_to $f one8 1e-6 || return 1
	done &&
	test_cmp pd pn &&
	test_cmp pn pa
'

# --compress under ZeRO 0: each stage's range in compressed buckets and
# the last stage's wte by one compressed allreduce, over NCCL (the
# device's packing and feedback kernels, the CPU's arithmetic), each on
# its part of the stage's feedback: the CPU's compressed losses within
# 1e-6 and its feedback within 1e-6 but a rounding in 1000 (t7124 says
# why)
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 --compress bf16 on GPUs: the CPU'"'"'s compressed losses within 1e-6, its error feedback within 1e-6 but a rounding in 1000' '
	C="$A --steps 2 --pp 2 --compress bf16" &&
	mpi 4 $C --device cpu --ckpt-dir ckcc >ccc.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $C --device cuda --precision fp32 --ckpt-dir ckgc >gcc.json) &&
	losses ccc.json >ccc && losses gcc.json >gcc &&
	test $(wc -l <gcc) = 2 && close_to gcc ccc 1e-6 &&
	feedback_close ckgc/latest ckcc/latest
'

# ZeRO-1: each stage's segments cut over its data-parallel group, each
# one reduce-scatter of unequal pieces over NCCL after the schedule (at 2
# ranks each sum is ZeRO-0's allreduce's, a sum of two), the update of
# this rank's pieces, an all-gather of them after it
# (the stopped run evaluates at step 2: ZeRO 3'"'"'s evaluation below)
Z3E="--val-data val.bin --eval-every 2 --eval-batches 2"
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 on GPUs, ZeRO 1 over NCCL: ZeRO 0'"'"'s losses bit for bit; its checkpoint resumes with the same bits' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --pp 2 --zero 1 >pz.json &&
	 mpi 4 $G --pp 2 --zero 1 --until 2 $Z3E --ckpt-dir zk >zk.json &&
	 mpi 4 $G --pp 2 --zero 1 --ckpt-dir zk --resume >pzr.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2 and .zero == 1 and .comm == \"nccl\"" pz.json &&
	losses pz.json >pz &&
	test_cmp pn pz &&
	tail -n 1 pz >pz.tail &&
	losses pzr.json >pzr &&
	test_cmp pz.tail pzr
'

# ZeRO-1's stages hold their segments only too, each rank its pieces of
# their moments: stage 0's ranks (world ranks 0 and 2) peak the same at 3
# layers as at 4; the last stage's (1 and 3) grow by the block at 4 + 4
# bytes, 4 of moments (its half of the block's 8) and the layer's
# activations (as above)
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 on GPUs, ZeRO 1: a stage'"'"'s peak the same whatever the other stage'"'"'s layers' '
	{ test -f train.bin || train_data; } &&
	blk=$((12 * 32 * 32 + 13 * 32)) &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 for l in 3 4; do
		peaks zm$l.mem 4 $G --steps 1 --grad-accum 1 --layers $l --pp 2 --zero 1 \
			>zm$l.json || return 1
	 done) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2 and .zero == 1" zm4.json &&
	if test -n "$GK_CUEMU"; then
		act() { jq "select(.event == \"step\") | .pp_stages[1].activations" $1.json; } &&
		d=$(($(act zm4) - $(act zm3))) &&
		for r in 0 1 2 3; do
			g=$(($(peak zm4 $r) - $(peak zm3 $r))) &&
			echo "rank $r, 3 to 4 layers: $g" &&
			test $g = $((r % 2 == 0 ? 0 : blk * 12 + d)) || return 1
		done
	fi
'

# ZeRO-2: ZeRO-1's pieces, each segment reduce-scattered over NCCL after
# the schedule in buckets of --bucket (4K: 1024 floats, several a stage,
# each one group of reduces to its owners), summed as ZeRO-1's (each sum
# of two): the losses, norms and checkpoints are ZeRO-1's bits. The
# device's gradient buffer has no pages to give back: the start line
# counts the pieces as gradients (mem-estimate --zero 2'"'"'s) and the rest
# of the stage'"'"'s buffer as comm (mem-estimate'"'"'s pp_zero2_grads, the
# stage'"'"'s segments less the rank'"'"'s pieces, with its send buffers,
# pp_buffers, as on the CPU: t7121), its
# total ZeRO-1'"'"'s; its host memory is mem-estimate'"'"'s term by term (a
# stage keeps ZeRO-1'"'"'s host mirror of its gradients). The checkpoint
# resumes on the CPU on one rank (the same global batch), within the
# CPU'"'"'s device tolerance of the GPUs'"'"' ZeRO-1 run that never stopped.
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 on GPUs, ZeRO 2 over NCCL in buckets: ZeRO 1'"'"'s losses, norms and checkpoint bit for bit; model states mem-estimate --zero 2'"'"'s, the total ZeRO 1'"'"'s; resumed on the CPU (1 rank) within 1e-4' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --pp 2 --zero 2 --bucket 4K --until 2 --ckpt-dir z2 >z2.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2 and .zero == 2 and .comm == \"nccl\"" z2.json &&
	steps zk.json >zk.steps &&
	steps z2.json >z2.steps &&
	test $(wc -l <z2.steps) = 2 &&
	test_cmp zk.steps z2.steps &&
	for f in model optim; do
		stcmp z2/step-00000002/$f.safetensors zk/step-00000002/$f.safetensors 0 || return 1
	done &&
	mem() { jq -s "map(select(.event == \"start\"))[0].memory.$2" "$1"; } &&
	start_config z2.json cfgz2.json &&
	mem-estimate --config cfgz2.json --precision f32 -b 4 -s 16 --grad-accum 3 \
		--no-dropout --pp 2 --dp 2 --zero 2 --json >mez2.json &&
	states_same z2.json mez2.json &&
	test $(mem z2.json gradients) -lt $(mem zk.json gradients) &&
	test $(mem z2.json total) = $(mem zk.json total) &&
	host_same z2.json mez2.json &&
	test $(mem z2.json comm) = $(($(jq .bytes.pp_zero2_grads mez2.json) +
		$(jq .bytes.pp_buffers mez2.json))) &&
	cp -R z2 z2c &&
	gpu-train $A --batch 8 --device cpu --ckpt-dir z2c --resume >z2c.json 2>err &&
	grep "resumed with --pp 1 (the checkpoint.s run: 2)" err &&
	losses z2c.json >z2c.l &&
	test $(wc -l <z2c.l) = 1 &&
	close_to z2c.l pz.tail 1e-4
'

# ZeRO-3: each stage's parameters cut by the same pieces, a rank's fp32
# master its pieces (two ranges on the first and last stage: its layers'
# and the tied wte's), each unit gathered on the device before its use.
# The gradients and the update are ZeRO-2's over a pipeline (the pieces
# reduce-scattered after the schedule), whose sums are ZeRO-1's: the
# losses, norms, evaluation, model and moments are ZeRO-1's bits (3
# micro-batches). Rank 0, stage 0, gathers wte and wpe once a step and
# its one block once, kept from each pass into the next (1F1B's F0 F1 B0
# F2 B1 B2 all use it): 3, none prefetched (no gather runs beside the
# pipeline's NCCL messages). Under GPipe with 4 layers (2 blocks a
# stage) and 2 micro-batches, F0 F1 B0 B1, the releases follow the
# schedule: stage 0 gathers blocks 0 and 1 for F0, again for F1 (block
# 1 then kept into B0), block 0 for B0 and both for B1, 2 + 7 = 9; the
# last stage's last block is not kept after F0 (the ring's one buffer
# would hold it while F1 gathers its first block: the run fails). Its
# model states are mem-estimate --zero 3's (ZeRO-2's pieces), and so is
# the rest, term by term: comm is its units (zero3_units: wte and wpe,
# and one block buffer), the stage's gradients beyond its pieces until
# the reduction (pp_zero2_grads) and its sends (pp_buffers), and its host
# memory (the parameters' copy of its segments' pages). The check before
# allocating prices the same layout: under --mem-limit 1 byte below that
# need (mem-estimate's total, with the GPU's fused attention) the first
# stage is refused, naming the figure; at it the run trains. The checkpoint resumes on the CPU on one
# rank, as ZeRO-2's does.
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 on GPUs, ZeRO 3: ZeRO 1'"'"'s losses, norms, evaluation and checkpoint bit for bit; 3 gathers a step, 9 under GPipe; model states, comm and host memory mem-estimate --zero 3'"'"'s, refused up front a byte below its need; resumed on the CPU (1 rank) within 1e-4' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --pp 2 --zero 3 --until 2 $Z3E --ckpt-dir z3 >z3.json &&
	 mpi 4 $G --layers 4 --pp 2 --pp-schedule gpipe --grad-accum 2 --steps 1 \
		--zero 3 >z3g.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .pp == 2 and .dp == 2 and .zero == 3 and .comm == \"nccl\"" z3.json &&
	steps z3.json >z3.steps &&
	test $(wc -l <z3.steps) = 2 &&
	test_cmp zk.steps z3.steps &&
	vals() { jq -r "select(.event == \"summary\") | .val_loss" "$1"; } &&
	vals zk.json >zk.val && vals z3.json >z3.val &&
	grep "^[0-9]" z3.val && test_cmp zk.val z3.val &&
	for f in model optim; do
		stcmp z3/step-00000002/$f.safetensors zk/step-00000002/$f.safetensors 0 || return 1
	done &&
	jq -s -e "map(select(.event == \"step\")) |
		all(.param_gathers == 3 and .param_prefetched == 0)" z3.json &&
	jq -s -e "map(select(.event == \"step\")) | length == 1 and
		all(.param_gathers == 9 and .param_prefetched == 0)" z3g.json &&
	mem() { jq -s "map(select(.event == \"start\"))[0].memory.$2" "$1"; } &&
	start_config z3.json cfgz3.json &&
	mem-estimate --config cfgz3.json --precision f32 -b 4 -s 16 --grad-accum 3 \
		--no-dropout --pp 2 --dp 2 --zero 3 --json >mez3.json &&
	states_same z3.json mez3.json &&
	test $(mem z3.json parameters) -lt $(mem zk.json parameters) &&
	test $(mem z3.json comm) = $(jq ".bytes | .zero3_units + .pp_zero2_grads + .pp_buffers" \
		mez3.json) &&
	host_same z3.json mez3.json &&
	if test -n "$GK_CUEMU"; then
		need=$(mem-estimate --config cfgz3.json --precision f32 -b 4 -s 16 --grad-accum 3 \
			--no-dropout --attn flash --pp 2 --dp 2 --zero 3 --json | jq .total) &&
		(CUEMU_GPUS=4 && export CUEMU_GPUS &&
		 test_expect_code 1 mpi 4 $G --pp 2 --zero 3 --steps 1 \
			--mem-limit $((need - 1)) 2>lim.err &&
		 mpi 4 $G --pp 2 --zero 3 --steps 1 --mem-limit $need >lim.json) &&
		grep "memory: a rank needs .* ($need bytes by its accounting, .* (2 of 4 ranks; the first: rank 0 (dp 0, pp 0, tp 0))" lim.err &&
		jq -s -e "map(select(.event == \"step\")) | length == 1" lim.json
	fi &&
	cp -R z3 z3c &&
	gpu-train $A --batch 8 --device cpu --ckpt-dir z3c --resume >z3c.json 2>err &&
	grep "resumed with --pp 1 (the checkpoint.s run: 2)" err &&
	losses z3c.json >z3c.l &&
	test $(wc -l <z3c.l) = 1 &&
	close_to z3c.l pz.tail 1e-4
'

# --reshard-after-forward no keeps every block of a stage gathered from
# its forward to its backward: a buffer for each of the stage's blocks,
# not the model's (under the interleaved schedule a stage's two chunks'
# blocks lie together in the flat buffer, placed stage-major, and a
# block's buffer is its place among them). 4 layers over pp 2, V 2, 4
# micro-batches: ZeRO 1's losses and norms bit for bit, and stage 0's
# comm mem-estimate's (its units: the embeddings and 2 block buffers,
# the stage's gradients beyond its pieces, its sends).
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 interleaved on GPUs, ZeRO 3 with every block kept: ZeRO 1'"'"'s losses and norms bit for bit; a buffer for each of the stage'"'"'s blocks (comm mem-estimate'"'"'s)' '
	K="$G --layers 4 --pp 2 --pp-schedule interleaved --pp-chunks 2 --grad-accum 4 --steps 2" &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $K --zero 1 >kp1.json &&
	 mpi 4 $K --zero 3 --reshard-after-forward no >kp3.json) &&
	steps kp1.json >kp1.steps && steps kp3.json >kp3.steps &&
	test $(wc -l <kp3.steps) = 2 && test_cmp kp1.steps kp3.steps &&
	start_config kp3.json cfgkp.json &&
	mem-estimate --config cfgkp.json --precision f32 -b 4 -s 16 --grad-accum 4 --no-dropout \
		--pp 2 --pp-schedule interleaved --pp-chunks 2 --dp 2 --zero 3 \
		--reshard-after-forward no --pp-stage 0 --json >mekp.json &&
	test $(jq -s "map(select(.event == \"start\"))[0].memory.comm" kp3.json) = \
		$(jq ".bytes | .zero3_units + .pp_zero2_grads + .pp_buffers" mekp.json)
'

# ZeRO 1 in bf16: each stage's pieces gathered in the bf16 working copy
# the update rounded from their master (2 bytes a parameter), the fp32
# master staying cut until a checkpoint gathers it whole (t7106 says the
# same of data parallelism alone). The losses and every step's checkpoint
# are ZeRO 0's bits (2 steps: the second's forward on the gathered copy).
# In the emulation's NCCL log a step's bf16 gathers
# (ncclDataType_t 9; an all-gather of equal pieces, count a rank's, or a
# group of broadcasts, count a piece) bring each rank its stage's
# segments, its range and the tied wte: over the four ranks
# 2 (params_padded + wte) elements a step, wte's 32 x 384 (the
# vocabulary's 257 rows padded to 128's multiple); the checkpoint's fp32
# gathers (7) the same.
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 on GPUs in bf16, ZeRO 1: the bf16 working copy gathered; ZeRO 0'"'"'s losses and every step'"'"'s checkpoint bit for bit' '
	B="$A --steps 2 --device cuda --precision bf16 --ckpt-every 1" &&
	{ test -f train.bin || train_data; } &&
	rm -rf bk0 bk1 bk1.log &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $B --pp 2 --zero 0 --ckpt-dir bk0 >bk0.json &&
	 CUEMU_NCCL_LOG=$PWD/bk1.log mpi 4 $B --pp 2 --zero 1 --ckpt-dir bk1 >bk1.json) &&
	losses bk0.json >bk0.losses && losses bk1.json >bk1.losses &&
	test $(wc -l <bk1.losses) = 2 &&
	test_cmp bk0.losses bk1.losses &&
	for s in 1 2; do
		f=$(printf "step-%08d/model.safetensors" $s) &&
		cmp bk0/$f bk1/$f || return 1
	done &&
	if test -n "$GK_CUEMU"; then
		n=$(jq -s "map(select(.event == \"start\"))[0].params_padded" bk1.json) &&
		wte=$((32 * 384)) &&
		for t in 9 7; do
			awk -v t=$t "\$7 == t && \$3 == \"ncclAllGather\" { e += 2 * \$5 }
				     \$7 == t && \$3 == \"ncclBroadcast\" { e += \$5 }
				     END { print e + 0 }" bk1.log >moved$t || return 1
		done &&
		echo $((2 * 2 * (n + wte))) >moved.expect &&
		test_cmp moved.expect moved9 &&
		test_cmp moved.expect moved7
	fi
'

# --offload optimizer over the pipeline (ZeRO-Offload): each rank's
# pieces' moments in host memory, the pieces' master and gradients down
# and the master (and the bf16 working copy rounded from it) up around the
# host's update, with the device kernel's arithmetic: the device update's
# losses and every step's checkpoint, moments included, bit for bit; the
# start line counts optimizer 0 and, offloaded, the state the device
# kept above
test_expect_success 'GPUS4,MPI' 'pp 2 x dp 2 on GPUs in bf16, ZeRO 1, --offload optimizer: the device update'"'"'s losses and checkpoints bit for bit' '
	B="$A --steps 2 --device cuda --precision bf16 --ckpt-every 1" &&
	rm -rf bko &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $B --pp 2 --zero 1 --offload optimizer --ckpt-dir bko >bko.json) &&
	losses bko.json >bko.losses &&
	test_cmp bk1.losses bko.losses &&
	for s in 1 2; do
		for f in model optim; do
			f=$(printf "step-%08d/$f.safetensors" $s) &&
			cmp bk1/$f bko/$f || return 1
		done
	done &&
	kept=$(jq -s "map(select(.event == \"start\"))[0].memory.optimizer" bk1.json) &&
	test $kept -gt 0 &&
	jq -s -e "map(select(.event == \"start\"))[0] | .memory.optimizer == 0 and
		.offload == {where: \"host\", state: $kept}" bko.json
'

# --sample of a pipeline on GPUs, in place: each token a forward of the
# window (8 positions, passed after the prompt of 3) at the model's batch
# through the stages, the activations over the pipeline's NCCL
# communicator (of the activation type: bf16 in bf16), the last stage
# picking. From a random model of wide weights (widen: every layer moves
# the text), seeded top-k and greedy: one GPU's tokens (the same kernels
# on the same rows: the same logits) and the CPU backend's; under the
# interleaved schedule (the ring of 2 chunks a stage) too, and in bf16
# one GPU's bf16 tokens
S="--layers 4 --hidden 32 --heads 2 --positions 33 --seq 8 --batch 2 --threads 1"
test_expect_success 'GPUS,MPI' '--sample under pp 2 on GPUs: the tokens of one GPU and of the CPU, seeded top-k and greedy; interleaved, and in bf16' '
	gpu-train --data train.bin $S --steps 1 --lr 1e-9 --warmup 1 --device cpu --ckpt-dir cks -q &&
	widen cks/latest wide &&
	for g in "--temperature 0" "--seed 3 --top-k 20"; do
		K="--init-from wide $S --sample 12 --prompt int --json $g" &&
		gpu-train $K --device cpu >sc.json &&
		gpu-train $K --device cuda --precision fp32 >s1.json &&
		mpi 2 $K --device cuda --precision fp32 --pp 2 >s2.json &&
		sample_tokens s1.json >s1 &&
		test $(jq length s1) = 12 &&
		for f in sc s2; do
			sample_tokens $f.json >$f && test_cmp s1 $f || return 1
		done || return 1
	done &&
	test $(jq "unique | length" s1) -gt 3 &&
	mpi 2 $K --device cuda --precision fp32 --pp 2 $I >si.json &&
	sample_tokens si.json >si && test_cmp s1 si &&
	gpu-train $K --device cuda --precision bf16 >b1.json &&
	mpi 2 $K --device cuda --precision bf16 --pp 2 >b2.json &&
	sample_tokens b1.json >b1 && sample_tokens b2.json >b2 &&
	test $(jq length b1) = 12 && test_cmp b1 b2
'

test_done
