#!/bin/sh
test_description='gpu-train --tp on --device cuda

A tensor group of GPUs (Megatron-LM'"'"'s split, tp.c'"'"'s layout): each rank
holds its heads'"'"' columns of c_attn, its columns of c_fc and its rows of
both projections and of the padded vocabulary on its device; f and g
are fp32 allreduces on the group'"'"'s NCCL communicator, the
cross-entropy'"'"'s max, sums and target logit too. Against one GPU on
the same batch the losses are within 1e-6 in fp32: a row-parallel
product is two partial sums added (another order of the same fp32
additions, about 1e-7 apart, as the CPU'"'"'s tp 2 against its one rank),
the head'"'"'s sum of exponentials the ranks'"'"' parts added; the
validation loss too; against the CPU backend'"'"'s --tp 2 within fp32'"'"'s
device tolerance (t7106: 1e-4); in bf16 within 1e-4 (the sums are fp32
as in fp32, rounded to bf16 once where one GPU rounds once, so an
order'"'"'s last bit moves a bf16 rounding now and then). A step'"'"'s
tp_comm_bytes is the CPU path'"'"'s formula, a rank'"'"'s model states
mem-estimate --tp'"'"'s. A device checkpoint resumes on one GPU (within
1e-6 of the run that never stopped) and on the CPU (within 1e-4). Two
tensor groups (tp 2 x dp 2) average over NCCL, and under ZeRO 1, within
1e-6 of one GPU on the same global batch (in bf16 under ZeRO 1, gathering
the bf16 working copy, ZeRO 0'"'"'s losses and checkpoints bit for bit),
and under ZeRO 2 (its gradients in bucket buffers reduce-scattered as
backward completes them, into a shard) ZeRO 1'"'"'s losses, norms and
model bit for bit, its device memory less by the buffer it no longer
holds, its buffers mem-estimate'"'"'s, with accumulation ZeRO 1'"'"'s within
1e-6, and with
--offload optimizer (each rank'"'"'s pieces updated on the host) its losses
and norms bit for bit, optimizer 0 and the state mem-estimate
--offload optimizer'"'"'s. Under ZeRO 3 (each tensor rank'"'"'s slices
gathered unit by unit on the device, its gradients ZeRO 2'"'"'s buckets and
shard, 2 micro-batches, stopped and resumed) ZeRO 2'"'"'s losses, norms,
evaluation, model and moments bit for bit, the schedule'"'"'s 16 gathers a
step, none prefetched, its parameters mem-estimate'"'"'s, its device
memory ZeRO 2'"'"'s less the parameters'"'"' saving computed from the shapes
(measured in the emulation, as ZeRO 2'"'"'s below ZeRO 1'"'"'s); its
checkpoint resumes on the CPU, and with --offload optimizer ZeRO 2'"'"'s
too. A pipeline of
two tensor groups (tp 2 x pp 2) is within 1e-6 of one GPU too. With
--compress bf16 under ZeRO 1, tp 2 x dp 2 is the CPU'"'"'s compressed run
within 1e-6, its error feedback too but for a flipped rounding in 1000;
with --compress int8 (the replicated tensors'"'"' gradients broadcast from
the tensor group'"'"'s rank 0 over NCCL) within 1e-6 too, and under ZeRO 2
resumed it is its run through, bit for bit. --sample through the
tensor group (and tp 2 x pp 2) gives one GPU'"'"'s tokens and the CPU'"'"'s.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

test_gpu_prereqs HAVE_CUDA

# Two ranks of a tensor group, each on its own GPU. Under the CUDA
# emulation a kernel runs about a thousand times slower than on a GPU:
# 3 steps, the checkpoint at step 2.
N=3
A="--data train.bin $TINY --batch 4 --steps $N --json"
G="$A --device cuda --precision fp32"
E="--val-data val.bin --eval-every $N --eval-batches 2"

# TINY: L 2 layers, C 32, N = 4 x 16 rows: per step (one micro-step) the
# embedding, 2 allreduces per layer forward and 2 backward, the head's d
# lnf (N x C floats each), the cross-entropy's 3 N floats; --recompute
# layer runs each layer's 2 forward ones again
want=$((4 * ((4 * 2 + 2) * 64 * 32 + 3 * 64)))

# A tensor rank's flat buffer (gpt.c) of a --json start line over tp 2 x
# dp 2, the figures the ZeRO 2 and 3 cases compute their savings from:
# wte's rows over 2, wpe, the blocks (the norms and the row-parallel
# biases whole), ln_f; the embeddings' floats, a block's, the layers and
# the buffer rounded up to the data-parallel group.
cat >tpflat.py <<\PYEOF
def tp_flat(st, t=2, W=2):
    C, L, P = st["hidden"], st["layers"], st["positions"]
    vp = (st["vocab"] + 127) // 128 * 128
    head = vp * C // t + P * C
    block = (12 * C * C + 7 * C) // t + 6 * C
    n = head + L * block + 2 * C
    assert n == st["params_padded"], (n, st["params_padded"])
    return head, block, L, (n + W - 1) // W * W
PYEOF

test_expect_success 'GPUS,MPI' 'tp 2 on GPUs: the losses and the validation loss of one GPU within 1e-6, of the CPU'"'"'s tp 2 within 1e-4; tp_comm_bytes the formula; under ZeRO 2 over NCCL in a data-parallel group of one (nothing to cut) the same steps bit for bit' '
	train_data &&
	gpu-train $G $E >one.json &&
	losses one.json >one &&
	test $(wc -l <one) = $N &&
	mpi 2 $G $E --tp 2 >tp.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | (.device | startswith(\"cuda:\")) and .tp == 2 and .dp == 1" tp.json &&
	losses tp.json >tp &&
	close_to tp one 1e-6 &&
	jq -r "select(.event == \"summary\") | .val_loss" one.json >one.val &&
	jq -r "select(.event == \"summary\") | .val_loss" tp.json >tp.val &&
	grep "^[0-9]" one.val &&
	close_to tp.val one.val 1e-6 &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" tp.json | sort -u)" = "$want" &&
	mpi 2 $G --tp 2 --comm nccl --zero 2 >tpz.json &&
	steps tp.json >tp.steps && steps tpz.json >tpz.steps &&
	test_cmp tp.steps tpz.steps &&
	mpi 2 $A --device cpu --tp 2 >cpu.json &&
	losses cpu.json >cpu &&
	close_to tp cpu 1e-4
'

test_expect_success 'GPUS,MPI' 'tp 2 on GPUs in bf16, recomputing each layer: the losses of one GPU within 1e-4; tp_comm_bytes the formula with the layers'"'"' forward allreduces again' '
	gpu-train $A --device cuda --precision bf16 >one16.json &&
	mpi 2 $A --device cuda --precision bf16 --tp 2 --recompute layer >tp16.json &&
	losses one16.json >one16 &&
	losses tp16.json >tp16 &&
	test $(wc -l <tp16) = $N &&
	close_to tp16 one16 1e-4 &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" tp16.json | sort -u)" = \
		"$((want + 4 * 2 * 2 * 64 * 32))"
'

test_expect_success 'GPUS,MPI' 'a rank of tp 2 on its GPU: parameters, gradients and optimizer = mem-estimate --tp 2' '
	start_config tp.json cfg.json &&
	mem-estimate --config cfg.json --precision f32 -b 4 -s 16 \
		--no-dropout --tp 2 --json >me.json &&
	python3 - tp.json me.json <<-\PY
	import json, sys
	st = next(json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l)
	est = json.load(open(sys.argv[2]))
	g, m = st["memory"], est["bytes"]
	for k in ("parameters", "gradients", "optimizer"):
	    if g[k] != m[k]:
	        sys.exit("%s: gpu-train %d, mem-estimate --tp %d" % (k, g[k], m[k]))
	print("rank 0:", g["parameters"], g["gradients"], g["optimizer"])
	PY
'

test_expect_success 'GPUS,MPI' 'a device tensor group'"'"'s checkpoint resumes on one GPU (within 1e-6) and on the CPU (within 1e-4)' '
	mpi 2 $G --tp 2 --until 2 --ckpt-dir ck >/dev/null &&
	jq -e ".tp == 2" ck/latest/trainer.json &&
	tail -n 1 one >one.tail &&
	cp -R ck ckg &&
	gpu-train $G --ckpt-dir ckg --resume >rg.json 2>err &&
	grep "resumed with --tp 1 (the checkpoint.s run: 2)" err &&
	losses rg.json >rg &&
	test $(wc -l <rg) = 1 &&
	close_to rg one.tail 1e-6 &&
	cp -R ck ckc &&
	gpu-train $A --device cpu --ckpt-dir ckc --resume >rc.json &&
	losses rc.json >rc &&
	test $(wc -l <rc) = 1 &&
	close_to rc one.tail 1e-4
'

# tp 2 x dp 2: four ranks on four GPUs (the emulation makes them:
# CUEMU_GPUS below), two tensor groups, each data-parallel group's NCCL
# communicator over its two ranks (one per tensor group)
{ test -n "$GK_CUEMU" || test "$GK_GPUS" -ge 4; } && test_have_prereq GPUS && test_set_prereq GPUS4

test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 on GPUs: over NCCL, and under ZeRO 1 (its norm counting each tensor group'"'"'s replicated tensors once), within 1e-6 of one GPU on the same global batch' '
	gpu-train $G --batch 8 >one8.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --tp 2 >tn.json &&
	 mpi 4 $G --tp 2 --zero 1 >tz.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 2 and .comm == \"nccl\"" tn.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 2 and .zero == 1" tz.json &&
	losses one8.json >one8 &&
	for f in tn tz; do
		losses $f.json >$f &&
		test $(wc -l <$f) = $N &&
		close_to $f one8 1e-6 || return 1
	done &&
	jq -r "select(.event == \"step\") | .grad_norm" one8.json >one8.norm &&
	jq -r "select(.event == \"step\") | .grad_norm" tz.json >tz.norm &&
	close_to tz.norm one8.norm 1e-6
'

# ZeRO-2 under --tp on GPUs: as without a grid (dp.c), backward writes a
# tensor rank's gradients above the embeddings into bucket buffers cut at
# layers, each reduce-scattered into its owners as backward completes it
# and summed into the rank's shard (its ZeRO-1 piece). 4 layers, --bucket
# 4K (a block a bucket), --no-overlap (one bucket buffer): at two ranks
# each sum is ZeRO-1's (a + b = b + a), so the norm and the model after
# the step are ZeRO-1's bit for bit. The device holds the embeddings'
# buffer, one bucket (a block) and the shard instead of the whole flat
# buffer: the total falls by the difference, computed here from the
# shape, and so does the emulation's measured peak; the buffers (comm, with the tensor group's) are mem-estimate's
# dp_buckets and zero2_embedding_grads, and the shard its gradients. With
# accumulation (2 micro-batches of 2, 2 layers) each micro-step's buckets
# are reduced in its backward, a sum of the ranks' sums instead of ZeRO-1's
# sum of the micro-steps': the norm within 1e-6 of ZeRO-1's on the same
# batch (measured 2e-8 apart)
Z="$G --layers 4 --tp 2 --bucket 4K --no-overlap"
norms() { jq -r "select(.event == \"step\") | .grad_norm" "$@"; }
test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 --zero 2 on GPUs, gradients in buckets: ZeRO 1'"'"'s norm and model bit for bit, its device memory less the figure, measured, the buffers mem-estimate'"'"'s; with accumulation within 1e-6' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 rm -f tm1.* tm2.* &&
	 CUEMU_MEM_LOG=$PWD/tm1 mpi 4 $Z --zero 1 --steps 1 --ckpt-dir cz1 >tz1.json &&
	 CUEMU_MEM_LOG=$PWD/tm2 mpi 4 $Z --zero 2 --steps 1 --ckpt-dir cz2 >tz2.json &&
	 mpi 4 $G --steps 1 --tp 2 --bucket 4K --no-overlap --zero 2 --batch 2 \
		--grad-accum 2 >tz2a.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 2 and .zero == 2" tz2.json &&
	losses tz1.json >tz1 && losses tz2.json >tz2 && test $(wc -l <tz2) = 1 &&
	test_cmp tz1 tz2 &&
	norms tz1.json >tz1.norm && norms tz2.json >tz2.norm && test_cmp tz1.norm tz2.norm &&
	cmp cz1/latest/model.safetensors cz2/latest/model.safetensors &&
	norms tz2a.json >tz2a.norm && test $(wc -l <tz2a.norm) = 1 &&
	head -n 1 tz.norm >tz.norm1 && close_to tz2a.norm tz.norm1 1e-6 &&
	start_config tz2.json cfg4.json &&
	mem-estimate --config cfg4.json --precision f32 -b 4 -s 16 --no-dropout \
		--tp 2 --dp 2 --zero 2 --bucket 4K --no-overlap --json >mez2.json &&
	if test -n "$GK_CUEMU"; then
		for f in tm1 tm2; do
			test $(ls $f.* | wc -l) = 4 &&
			cat $f.* | sort -u >$f.peak &&
			test $(wc -l <$f.peak) = 1 || return 1
		done
	fi &&
	python3 - tz1.json tz2.json mez2.json tm1.peak tm2.peak <<-\PY
	import json, os, sys
	st = [next(json.loads(l) for l in open(f) if "\"start\"" in l) for f in sys.argv[1:3]]
	est = json.load(open(sys.argv[3]))["bytes"]
	m1, m2 = st[0]["memory"], st[1]["memory"]
	from tpflat import tp_flat
	head, block, L, nflat = tp_flat(st[1])
	shard = (4 * nflat // 2 + 63) // 64 * 64
	saved = 4 * nflat - (4 * head + 4 * block + shard)
	assert saved > 0, saved
	if m1["total"] - m2["total"] != saved:
	    sys.exit("ZeRO 1 %d - ZeRO 2 %d bytes: not %d" % (m1["total"], m2["total"], saved))
	if os.path.exists(sys.argv[4]): # the peaks the emulation measured
	    peak = [int(open(f).read().split()[1]) for f in sys.argv[4:6]]
	    if peak[0] - peak[1] != saved:
	        sys.exit("measured: ZeRO 1 %d - ZeRO 2 %d bytes: not %d" % (peak[0], peak[1], saved))
	for k in ("parameters", "gradients", "optimizer"):
	    assert m2[k] == est[k], (k, m2, est)
	assert est["zero2_embedding_grads"] == 4 * head, est
	assert est["dp_buckets"] == 4 * block, est
	assert m2["comm"] == est["dp_buckets"] + est["zero2_embedding_grads"] + est["tp_buffers"], (m2, est)
	assert "host_grads" not in est and "host_grads" not in st[1]["host_memory"], est
	print("saved", saved, "of", 4 * nflat)
	PY
'

# --offload optimizer under ZeRO-2 over the tensor groups: each rank's
# shard copied down and its piece updated on the host (its master and
# gradients down, the master up) with the device kernel's arithmetic:
# ZeRO-2's norm and model bit for bit; optimizer 0 on the device and the
# state mem-estimate --offload optimizer puts in host_ram (the 4 ranks of
# a node), the shard's host copy its host_grad_shard. ZeRO-3 the same
# from the same shard (its gradients are ZeRO-2's), its piece of the
# master coming down from the device as the whole does under ZeRO-2:
# the same norm and model, the same state and shard on the host
test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 --zero 2 and 3 on GPUs, --offload optimizer: the device update'"'"'s norm and model bit for bit; the state mem-estimate'"'"'s' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $Z --zero 2 --steps 1 --offload optimizer --ckpt-dir cz2o >tz2o.json &&
	 mpi 4 $Z --zero 3 --steps 1 --offload optimizer --ckpt-dir cz3o >tz3o.json) &&
	for z in 2 3; do
		norms tz${z}o.json >tz${z}o.norm && test_cmp tz2.norm tz${z}o.norm &&
		cmp cz2/latest/model.safetensors cz${z}o/latest/model.safetensors || return 1
	done &&
	jq -s -e --slurpfile o tz2o.json "map(select(.event == \"start\"))[0] as \$s |
		(\$o | map(select(.event == \"start\"))[0]) as \$t |
		\$s.zero == 3 and \$s.memory.gradients == 0 and \$s.memory.optimizer == 0 and
		\$s.offload == \$t.offload and
		\$s.host_memory.host_grad_shard == \$t.host_memory.host_grad_shard" tz3o.json &&
	mem-estimate --config cfg4.json --precision f32 -b 4 -s 16 --no-dropout --bucket 4K \
		--no-overlap --tp 2 --dp 2 --zero 2 --offload optimizer --gpus-per-node 4 \
		--json >mez2o.json &&
	host=$(jq .bytes.host_ram mez2o.json) &&
	test $host -gt 0 &&
	test $(jq .bytes.optimizer mez2o.json) = 0 &&
	jq -s -e --slurpfile e mez2o.json "map(select(.event == \"start\"))[0] |
		.memory.optimizer == 0 and .offload == {where: \"host\", state: ($host / 4)} and
		.host_memory.host_grad_shard == \$e[0].bytes.host_grad_shard" tz2o.json
'

# ZeRO-3 under --tp: each data-parallel group shards its tensor rank's
# slices by ZeRO-2's pieces (the slice table one segment, cut as the
# fp32 master's one range) and gathers them unit by unit on the device;
# its gradients are ZeRO-2's (above): bucket buffers cut at layers, each
# reduce-scattered into its owners as backward completes it and summed
# into the rank's shard, its piece, which the norm and the update read.
# So on the same buckets (4 layers, --bucket 4K --no-overlap) with 2
# micro-batches (each one's buckets reduced in its own backward), the run
# stopped after step 1 and resumed, its losses, norms, evaluation, model
# and moments are ZeRO-2's bit for bit. A step gathers the embeddings and
# the final norm once, and in each micro-batch blocks 0 to 2 before their
# forward and their backward and block 3, the last, kept from its
# forward into its backward: 2 + 2 x 7 = 16, none prefetched (no gather
# runs beside the tensor group's collectives). Memory: the emulation's
# measured peak (of a run without evaluation, whose whole working copy
# the start line does not count) and the accounted total fall from
# ZeRO-2's by the parameters' saving alone, the whole slice less the
# fp32 piece and the unit buffers (the embeddings, the final norm with
# the padding, one block), computed here from the shapes, and the unit
# buffers are all that comm adds: its device gradients are ZeRO-2's,
# which the case above measured below ZeRO-1's (the whole buffer, which
# ZeRO-3 kept before and reduced into its pieces after backward) by the
# buffer less the shard, the embeddings' buffer and a bucket, on the
# same shapes. Its model states are mem-estimate's (the parameters half
# ZeRO-2's), and so is the rest, term by term: comm is ZeRO-2's buckets
# and embeddings' buffer, the units and the tensor group's buffers, and
# the host memory has no gradients' mirror. The
# checkpoint resumes on the CPU backend (dp 2, the same global batch)
# within fp32's device tolerance of the GPUs' next step.
test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 --zero 3 on GPUs, 2 micro-batches, stopped and resumed: ZeRO 2'"'"'s losses, norms, evaluation, model and moments bit for bit; 16 gathers a step; its device gradients ZeRO 2'"'"'s, measured; its model states, comm and host memory mem-estimate'"'"'s; the checkpoint resumes on the CPU' '
	Z="$G --layers 4 --steps 2 --grad-accum 2 --batch 2 --tp 2 --bucket 4K --no-overlap" &&
	V="--val-data val.bin --eval-every 2 --eval-batches 1" &&
	rm -rf zz2 zz3 zz3c zm2.* zm3.* &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 CUEMU_MEM_LOG=$PWD/zm2 mpi 4 $Z $V --zero 2 --ckpt-dir zz2 >zz2.json &&
	 CUEMU_MEM_LOG=$PWD/zm3 mpi 4 $Z --zero 3 --until 1 --ckpt-dir zz3 >zz3a.json &&
	 cp -R zz3 zz3c &&
	 mpi 4 $Z $V --zero 3 --ckpt-dir zz3 --resume >zz3b.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 2 and .zero == 3" zz3a.json &&
	steps zz2.json >zz2.steps && { steps zz3a.json && steps zz3b.json; } >zz3.steps &&
	test $(wc -l <zz3.steps) = 2 && test_cmp zz2.steps zz3.steps &&
	vals() { jq -r "select(.event == \"summary\") | .val_loss" "$1"; } &&
	vals zz2.json >zz2.val && vals zz3b.json >zz3.val &&
	grep "^[0-9]" zz3.val && test_cmp zz2.val zz3.val &&
	cmp zz2/latest/model.safetensors zz3/latest/model.safetensors &&
	cmp zz2/latest/optim.safetensors zz3/latest/optim.safetensors &&
	jq -s -e "map(select(.event == \"step\")) | length == 1 and
		all(.param_gathers == 16 and .param_prefetched == 0)" zz3a.json &&
	jq -s -e "map(select(.event == \"step\")) | length == 1 and
		all(.param_gathers == 16 and .param_prefetched == 0)" zz3b.json &&
	mem() { jq -s "map(select(.event == \"start\"))[0].memory.$2" "$1"; } &&
	test $(mem zz3a.json parameters) = $(($(mem zz2.json parameters) / 2)) &&
	mem-estimate --config zz3/latest/config.json --precision f32 -b 2 -s 16 --grad-accum 2 \
		--no-dropout --tp 2 --dp 2 --zero 3 --bucket 4K --no-overlap --json >mez3.json &&
	states_same zz3a.json mez3.json &&
	test $(mem zz3a.json comm) = $(jq ".bytes | .dp_buckets + .zero2_embedding_grads +
		.zero3_units + .tp_buffers" mez3.json) &&
	host_same zz3a.json mez3.json &&
	if test -n "$GK_CUEMU"; then
		for f in zm2 zm3; do
			test $(ls $f.* | wc -l) = 4 &&
			cat $f.* | sort -u >$f.peak &&
			test $(wc -l <$f.peak) = 1 || return 1
		done &&
		python3 - zz2.json zz3a.json zm2.peak zm3.peak <<-\PY
		import json, sys
		st = [next(json.loads(l) for l in open(f) if "\"start\"" in l) for f in sys.argv[1:3]]
		peak = [int(open(f).read().split()[1]) for f in sys.argv[3:5]]
		m = [s["memory"] for s in st]
		acc = [x["total"] - x["checkpoint"] for x in m]
		from tpflat import tp_flat
		head, block, L, nflat = tp_flat(st[1])
		per = nflat // 2
		units = 4 * (head + block + nflat - (head + L * block))
		params = 4 * nflat - 4 * per - units
		assert params > 0, params
		if peak[0] - peak[1] != params or acc[0] - acc[1] != params:
		    sys.exit("ZeRO 2 - ZeRO 3: measured %d, accounted %d bytes: not %d" %
		             (peak[0] - peak[1], acc[0] - acc[1], params))
		assert m[1]["gradients"] == m[0]["gradients"], m
		assert m[1]["comm"] - m[0]["comm"] == units, (m, units)
		print("ZeRO 3: the parameters less", params, "bytes, the gradients ZeRO 2'"'"'s")
		PY
	fi &&
	mpi 2 $A --device cpu --layers 4 --steps 2 --grad-accum 2 --batch 2 --ckpt-dir zz3c \
		--resume >zz3c.json &&
	losses zz3c.json >zz3c.l && losses zz3b.json >zz3b.l &&
	test $(wc -l <zz3c.l) = 1 && close_to zz3c.l zz3b.l 1e-4
'

# --compress over the data-parallel groups of a tensor group's ranks
# (pp_shard.c): each slice's reduce-scatter is the compressed ring over
# NCCL, its packing and error feedback the device's kernels, the CPU's
# arithmetic: the losses of the CPU's compressed run within 1e-6
# (measured 2e-8), and each rank's checkpointed feedback the CPU's within
# 1e-6 but for at most one element in 1000 (where fp32's last bits
# differ a bf16 rounding flips, moving the element by a step of its
# bf16: measured 4 of 26048)
test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 --zero 1 --compress bf16 on GPUs: the CPU'"'"'s compressed losses within 1e-6, its error feedback within 1e-6 but a rounding in 1000' '
	C="$A --steps 2 --tp 2 --zero 1 --compress bf16" &&
	mpi 4 $C --device cpu --ckpt-dir ckcc >ccc.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $C --device cuda --precision fp32 --ckpt-dir ckgc >gcc.json) &&
	losses ccc.json >ccc && losses gcc.json >gcc &&
	test $(wc -l <gcc) = 2 && close_to gcc ccc 1e-6 &&
	feedback_close ckgc/latest ckcc/latest
'

# --compress int8 over the same groups: a scale's 256 elements may hold
# a split tensor's slice beside replicated tensors' elements (LayerNorms,
# the row-parallel biases, wpe), whose reduced gradients would then differ
# between a tensor group's ranks; they are taken from its rank 0, a
# broadcast in place over the group's NCCL communicator (dp.c; the CPU's
# over MPI): under ZeRO 1 in the device's gradients, under ZeRO 2 in the
# shard. ZeRO 1: the losses of the CPU's compressed run within 1e-6
# (measured equal in the emulation). ZeRO 2 (its buckets cut at layers,
# so its int8 groups follow other pieces than ZeRO 1's: about 1e-4
# apart at step 2). Each, resumed from its checkpoint of step 1, gives
# bit for bit the loss and norm of its step 2 run through, which
# replicas that drifted apart would not (the checkpoint holds rank 0's).
test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 --compress int8 on GPUs: ZeRO 1 the CPU'"'"'s losses within 1e-6; ZeRO 1 and 2 resumed from step 1 = run through, bit for bit' '
	C="$A --steps 2 --tp 2 --compress int8" &&
	mpi 4 $C --zero 1 --device cpu >c8.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $C --zero 1 --device cuda --precision fp32 --ckpt-every 1 --ckpt-dir ck81 >g8.json &&
	 rm -r ck81/step-00000002 && ln -sfn step-00000001 ck81/latest &&
	 mpi 4 $C --zero 1 --device cuda --precision fp32 --ckpt-dir ck81 --resume >g81r.json &&
	 mpi 4 $C --zero 2 --device cuda --precision fp32 --bucket 4K --ckpt-every 1 \
		--ckpt-dir ck8 >g8z.json &&
	 rm -r ck8/step-00000002 && ln -sfn step-00000001 ck8/latest &&
	 mpi 4 $C --zero 2 --device cuda --precision fp32 --bucket 4K --ckpt-dir ck8 \
		--resume >g8r.json) &&
	losses c8.json >c8 && losses g8.json >g8 &&
	test $(wc -l <g8) = 2 && close_to g8 c8 1e-6 &&
	for z in g8:g81r g8z:g8r; do
		{ losses ${z%:*}.json && norms ${z%:*}.json; } >${z%:*}.ln &&
		test $(wc -l <${z%:*}.ln) = 4 &&
		{ losses ${z#*:}.json && norms ${z#*:}.json; } >${z#*:}.ln &&
		test $(wc -l <${z#*:}.ln) = 2 &&
		sed -n "2p;4p" ${z%:*}.ln >${z%:*}.2 && test_cmp ${z%:*}.2 ${z#*:}.ln || return 1
	done
'

# ZeRO 1 in bf16: a tensor group's run under ZeRO is a pipeline of one
# stage (pp_shard.c), so its gather after the update moves the bf16
# working copy too, the fp32 master gathered at checkpoints only: ZeRO
# 0's losses and every step's checkpoint (2 steps) bit for bit. In the
# emulation's NCCL log (t7123 says how to read it) a step's bf16 gathers
# bring each of the four ranks its tensor rank's params_padded
# elements; the checkpoints' fp32 gathers the same.
test_expect_success 'GPUS4,MPI' 'tp 2 x dp 2 on GPUs in bf16, ZeRO 1: the bf16 working copy gathered; ZeRO 0'"'"'s losses and every step'"'"'s checkpoint bit for bit' '
	B="$A --steps 2 --device cuda --precision bf16 --ckpt-every 1" &&
	{ test -f train.bin || train_data; } &&
	rm -rf tb0 tb1 tb1.log &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $B --tp 2 --zero 0 --ckpt-dir tb0 >tb0.json &&
	 CUEMU_NCCL_LOG=$PWD/tb1.log mpi 4 $B --tp 2 --zero 1 --ckpt-dir tb1 >tb1.json) &&
	losses tb0.json >tb0.losses && losses tb1.json >tb1.losses &&
	test $(wc -l <tb1.losses) = 2 &&
	test_cmp tb0.losses tb1.losses &&
	for s in 1 2; do
		f=$(printf "step-%08d/model.safetensors" $s) &&
		cmp tb0/$f tb1/$f || return 1
	done &&
	if test -n "$GK_CUEMU"; then
		n=$(jq -s "map(select(.event == \"start\"))[0].params_padded" tb1.json) &&
		for t in 9 7; do
			awk -v t=$t "\$7 == t && \$3 == \"ncclAllGather\" { e += 2 * \$5 }
				     \$7 == t && \$3 == \"ncclBroadcast\" { e += \$5 }
				     END { print e + 0 }" tb1.log >moved$t || return 1
		done &&
		echo $((2 * 4 * n)) >moved.expect &&
		test_cmp moved.expect moved9 &&
		test_cmp moved.expect moved7
	fi
'

# tp 2 x pp 2: each of two stages a tensor group of two GPUs (the
# pipeline's messages and the tied embedding's sum per tensor rank, over
# NCCL), 2 micro-batches; stage 0 (rank 0) puts the embedding'"'"'s and its
# layer'"'"'s allreduces into its group, 5 N C floats a micro-step
test_expect_success 'GPUS4,MPI' 'tp 2 x pp 2 on GPUs: the losses and norms of one GPU within 1e-6; stage 0'"'"'s tp_comm_bytes its share of the formula' '
	gpu-train $G --grad-accum 2 >onea.json &&
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $G --grad-accum 2 --tp 2 --pp 2 >tpp.json) &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .pp == 2 and .dp == 1" tpp.json &&
	losses onea.json >onea &&
	losses tpp.json >tpp &&
	test $(wc -l <tpp) = $N &&
	close_to tpp onea 1e-6 &&
	jq -r "select(.event == \"step\") | .grad_norm" onea.json >onea.norm &&
	jq -r "select(.event == \"step\") | .grad_norm" tpp.json >tpp.norm &&
	close_to tpp.norm onea.norm 1e-6 &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" tpp.json | sort -u)" = \
		"$((2 * 4 * 5 * 64 * 32))"
'

# --sample of a split model on GPUs, in place: each token a forward of
# the window (8 positions, passed after the prompt of 3) at the model's
# batch through the tensor group, its sums over NCCL, the vocabulary
# slices of the logits gathered on the host. From a random model of wide
# weights (widen: every head and vocabulary slice moves the text), seeded
# top-k and greedy: one GPU's tokens and the CPU backend's (the group's
# fp32 sums add in another order than one GPU's: only a near tie of two
# logits could move a token), and so where --device auto chose the GPUs,
# with --sequence-parallel
S="--layers 4 --hidden 32 --heads 2 --positions 33 --seq 8 --batch 2 --threads 1"
test_expect_success 'GPUS,MPI' '--sample under tp 2 on GPUs, and with --sequence-parallel: the tokens of one GPU and of the CPU, seeded top-k and greedy' '
	gpu-train --data train.bin $S --steps 1 --lr 1e-9 --warmup 1 --device cpu --ckpt-dir cks -q &&
	widen cks/latest wide &&
	for g in "--temperature 0" "--seed 3 --top-k 20"; do
		K="--init-from wide $S --sample 12 --prompt int --json $g" &&
		gpu-train $K --device cpu >sc.json &&
		gpu-train $K --device cuda --precision fp32 >s1.json &&
		mpi 2 $K --device cuda --precision fp32 --tp 2 >s2.json &&
		mpi 2 $K --device auto --precision fp32 --tp 2 --sequence-parallel >s3.json &&
		jq -s -e "map(select(.event == \"start\"))[0] | (.device | startswith(\"cuda:\")) and .tp == 2" s3.json &&
		sample_tokens s1.json >s1 &&
		test $(jq length s1) = 12 &&
		for f in sc s2 s3; do
			sample_tokens $f.json >$f && test_cmp s1 $f || return 1
		done || return 1
	done &&
	test $(jq "unique | length" s1) -gt 3
'

# tp 2 x pp 2: the window's activations from stage to stage over the
# pipeline's NCCL communicator, each stage a tensor group (seeded, the
# sample above)
test_expect_success 'GPUS4,MPI' '--sample under tp 2 x pp 2 on GPUs: one GPU'"'"'s tokens' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=4 && export CUEMU_GPUS; fi &&
	 mpi 4 $K --device cuda --precision fp32 --tp 2 --pp 2 >s4.json) &&
	sample_tokens s4.json >s4 &&
	test_cmp s1 s4
'

test_done
