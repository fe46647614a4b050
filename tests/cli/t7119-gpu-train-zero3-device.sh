#!/bin/sh
test_description='gpu-train --zero 3 on GPUs (over NCCL)

Each rank keeps its range of the fp32 parameters in device memory; the
working copy of a block is all-gathered before its forward and again
before its backward into a ring of block buffers (the next block'"'"'s
gather prefetched while one computes), the embeddings and the final norm
with the tied head into buffers of their own for the step; gradients go
as ZeRO-2'"'"'s. On 2 ranks the losses, norms and the model written are
ZeRO-1'"'"'s bit for bit (a reduce to each owner, a sum of two), with and
without prefetch and reshard, in fp32 and bf16, and so are evaluation
and --sample, which gather the whole model from device to device, and
--ckpt-gather'"'"'s model, sent to rank 0; on 3 ranks ZeRO-2'"'"'s, with
accumulation too; the CPU backend'"'"'s ZeRO-3 within 1e-4 (t7106'"'"'s fp32
bound). The device memory falls from ZeRO-2'"'"'s by the
whole parameters less the shard and the unit buffers, as accounted and
as mem-estimate states. Checkpoints: each rank writes its shard, and
device and CPU ZeRO-3 resume from each other. The host memory a rank
allocates for the model (the parameters'"'"' host copy, under ZeRO-3 the
rank'"'"'s range alone, the pinned staging, the moments'"'"' host copies) is
accounted by term as mem-estimate states it and exported by --metrics,
and a run whose host memory exceeds the cgroup'"'"'s limit is refused before
any work. A staging of a few hundred floats passes every transfer in
pieces and changes no bit.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

test_gpu_prereqs HAVE_CUDA
# the CUDA emulation (tests/cuemu), whose fake NCCL hangs a rank on
# demand; three ranks on three GPUs (the emulation makes them:
# CUEMU_GPUS below)
test -n "$GK_CUEMU" && test_set_prereq CUEMU
{ test -n "$GK_CUEMU" || test "$GK_GPUS" -ge 3; } && test_have_prereq GPUS && test_set_prereq GPUS3

# TINY without its --threads; 2 steps (the second updates with the
# moments the first left), a resume from step 1 (4 steps on a GPU, from 2)
short=4
test -n "$GK_CUEMU" && short=2
half=$((short / 2))
A="--data train.bin $TINY --batch 4 --json"
Z="$A --steps $short --device cuda --precision fp32"

# the CPU backend's ZeRO-3 over 2 ranks ($short steps), and the device's
# (its losses and norms in d3p.steps), made by the first case that needs
# them and kept only whole
cpu3() {
	test -f c3.losses || {
		mpi 2 $A --steps $short --threads 1 --precision fp32 --zero 3 >c3.json+ &&
		losses c3.json+ >c3.losses+ && mv c3.json+ c3.json && mv c3.losses+ c3.losses
	}
}
dev3() {
	test -f d3p.steps || {
		mpi 2 $Z --zero 3 --ckpt-dir d3p >d3p.json+ &&
		steps d3p.json+ >d3p.steps+ && mv d3p.json+ d3p.json && mv d3p.steps+ d3p.steps
	}
}

# ZeRO-1 and ZeRO-3 in bf16 with evaluation and --sample (b1.json,
# b3.json), ZeRO-3 with --reshard-after-forward no (d3k.json, d3k/) and
# ZeRO-1 with --offload optimizer (po.json) in fp32, on 2 GPUs: made by
# the first case that needs them and kept only whole
B="$A --steps $short --device cuda --precision bf16 --val-data val.bin --eval-every 1 --sample 8"
bf16() {
	for z in 1 3; do
		test -f b$z.json || { mpi 2 $B --zero $z >b$z.json+ && mv b$z.json+ b$z.json; } ||
		return 1
	done
}
dev3k() {
	test -f d3k.json || {
		rm -rf d3k &&
		mpi 2 $Z --zero 3 --reshard-after-forward no --ckpt-dir d3k >d3k.json+ &&
		mv d3k.json+ d3k.json
	}
}
off1() {
	test -f po.json || { mpi 2 $Z --zero 1 --offload optimizer >po.json+ && mv po.json+ po.json; }
}

test_expect_success 'data' '
	train_data
'

# Units at 2 layers: the embeddings, the final norm, 2 blocks. A step
# gathers the two edge units, each block before its forward (the last is
# kept into backward) and block 0 again before its backward: 5; with
# prefetch 3 of them were started before they were needed (block 0 with
# the edges, block 1 during block 0, block 0 during block 1'"'"'s backward);
# kept (--reshard-after-forward no), 4, 2 prefetched. The first step
# prefetches nothing (the hang case below says why). Without overlap,
# --ckpt-gather: the model file whole, each rank'"'"'s range sent into rank
# 0'"'"'s copy.
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-3: ZeRO-1'"'"'s losses, norms and model bit for bit, with and without prefetch and reshard, and --ckpt-gather'"'"'s; the CPU'"'"'s ZeRO-3 within 1e-4' '
	mpi 2 $Z --zero 1 --ckpt-dir d1 >d1.json &&
	steps d1.json >d1.steps &&
	test $(wc -l <d1.steps) = $short &&
	for o in p n k; do
		case $o in
		p) opt= g=5 f=3 ;;
		n) opt="--no-overlap --ckpt-gather" g=5 f=0 ;;
		k) opt="--reshard-after-forward no" g=4 f=2 ;;
		esac &&
		if test $o = p; then
			rm -rf d3p d3p.steps && dev3
		elif test $o = k; then
			rm -f d3k.json && dev3k && steps d3k.json >d3k.steps
		else
			mpi 2 $Z --zero 3 $opt --ckpt-dir d3$o >d3$o.json &&
			steps d3$o.json >d3$o.steps
		fi &&
		jq -s -e "map(select(.event == \"start\"))[0] | .zero == 3 and .comm == \"nccl\"" d3$o.json &&
		test_cmp d1.steps d3$o.steps &&
		jq -e -s "map(select(.event == \"step\")) | all(.param_gathers == $g) and
			.[0].param_prefetched == 0 and (.[1:] | all(.param_prefetched == $f))" d3$o.json &&
		if test $o = n; then
			! test -e d3n/latest/model-rank-00000-of-00002.safetensors &&
			cp d3n/latest/model.safetensors d3n.safetensors
		else
			! test -e d3$o/latest/model.safetensors &&
			ckpt-merge d3$o/latest -o d3$o.safetensors
		fi &&
		cmp d3$o.safetensors d1/latest/model.safetensors || return 1
	done &&
	cpu3 &&
	losses d3p.json >d3p.losses &&
	close_to d3p.losses c3.losses 1e-4
'

# 3 ranks: the flat buffer padded to 3, ranges that cut tensors and
# units anywhere (a unit with a piece of one owner only, or of three).
# The gradients are ZeRO-2'"'"'s (summed, then divided by 3 once in the
# shard, where ZeRO-1'"'"'s reduce averages with ncclAvg, which rounds
# differently at 3 ranks; at 2 both are exact): ZeRO-2'"'"'s losses and
# norms bit for bit, with accumulation too (the micro-steps'"'"' sums added in
# the shard alike), and ZeRO-1'"'"'s within 1e-6.
test_expect_success 'GPUS3,MPI' '3 GPUs, ZeRO-3: ZeRO-2'"'"'s losses and norms bit for bit, with accumulation too; ZeRO-1'"'"'s within 1e-6' '
	(if test -n "$GK_CUEMU"; then CUEMU_GPUS=3 && export CUEMU_GPUS; fi &&
	 mpi 3 $Z --zero 1 >t1.json &&
	 mpi 3 $Z --zero 2 >t2.json &&
	 mpi 3 $Z --zero 3 >t3.json &&
	 mpi 3 $Z --zero 2 --grad-accum 2 --no-overlap >t2a.json &&
	 mpi 3 $Z --zero 3 --grad-accum 2 --no-overlap >t3a.json) &&
	for f in t2 t3 t2a t3a; do
		steps $f.json >$f.steps || return 1
	done &&
	test $(wc -l <t3.steps) = $short &&
	test_cmp t2.steps t3.steps &&
	test $(wc -l <t3a.steps) = $short &&
	test_cmp t2a.steps t3a.steps &&
	for f in t1 t3; do
		jq -r "select(.event == \"step\") | .loss, .grad_norm" $f.json >$f.values || return 1
	done &&
	close_to t3.values t1.values 1e-6
'

# Evaluation and --sample read the whole model: gathered from device to
# device into a whole working copy while they run (--sample'"'"'s on rank 0,
# the others sending it their ranges), then the units again.
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-3 in bf16: ZeRO-1'"'"'s losses, validation losses and sample bit for bit (the gathered working copy is the one ZeRO-1 rounds)' '
	bf16 &&
	for z in 1 3; do
		jq -c "select(.event == \"step\" or .event == \"summary\") | [.loss, .grad_norm, .val_loss]" b$z.json >b$z.steps &&
		jq -c "select(.event == \"sample\") | .tokens" b$z.json >b$z.sample || return 1
	done &&
	test $(wc -l <b3.steps) = $((short + 1)) &&
	test $(grep -c "null\]" b3.steps) = 0 &&
	test $(wc -l <b3.sample) = 1 &&
	test_cmp b1.steps b3.steps &&
	test_cmp b1.sample b3.sample
'

# Resumes: a device run from a CPU ZeRO-3 step, and the CPU from a device
# step, each continuing as the run it resumed would (within 1e-4, the
# two backends'"'"' fp32); a device run from its own step bit for bit.
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-3 checkpoints: resumed on the GPU from the CPU'"'"'s shards and back, and from its own' '
	cpu3 && dev3 &&
	mpi 2 $A --steps $short --threads 1 --precision fp32 --zero 3 --until $half --ckpt-dir rc >/dev/null &&
	mpi 2 $Z --zero 3 --ckpt-dir rc --resume >rcg.json &&
	losses rcg.json >rcg.losses &&
	test $(wc -l <rcg.losses) = $((short - half)) &&
	tail -n $((short - half)) c3.losses >c3.tail &&
	close_to rcg.losses c3.tail 1e-4 &&
	mpi 2 $Z --zero 3 --until $half --ckpt-dir rg >/dev/null &&
	test -f rg/latest/model-rank-00000-of-00002.safetensors &&
	test -f rg/latest/model-rank-00001-of-00002.safetensors &&
	! test -e rg/latest/model.safetensors &&
	cp -r rg rgc &&
	mpi 2 $A --steps $short --threads 1 --precision fp32 --zero 3 --ckpt-dir rgc --resume >rgcc.json &&
	losses rgcc.json >rgcc.losses &&
	close_to rgcc.losses c3.tail 1e-4 &&
	mpi 2 $Z --zero 3 --ckpt-dir rg --resume >rgg.json &&
	steps rgg.json >rgg.steps &&
	tail -n $((short - half)) d3p.steps >d3p.tail &&
	test_cmp d3p.tail rgg.steps
'

# A gather that never completes on one rank (the emulation's
# CUEMU_NCCL_HANG): the watchdog aborts NCCL and every rank ends, naming
# it. Rank 1's operations in a step at 2 layers: the embeddings' gather
# (one broadcast), the final norm'"'"'s (one), block 0'"'"'s (two: both ranks own
# a piece), block 1'"'"'s (one), block 0'"'"'s again (two), then the gradient
# buckets'"'"' reduces. Operation 4 is block 0'"'"'s in the first step, queued
# with nothing else in flight (the first step prefetches nothing: its
# kernels'"'"' first launches wait for the whole device, where no watchdog
# sees a stopped peer); from the second step on the model'"'"'s stream waits
# for a gather on the device and the host for its request once the last
# block'"'"'s forward or block 0'"'"'s backward is queued, before it reads the
# stream back: 15, block 1'"'"'s before its forward, prefetched during
# block 0'"'"'s; 16, block 0'"'"'s before its backward, prefetched during
# block 1'"'"'s.
test_expect_success 'CUEMU,GPUS,MPI' '2 GPUs, ZeRO-3: a parameter gather hangs on one rank, also a prefetched one before a forward and a backward: --timeout aborts NCCL, the job exits 1 naming it' '
	for op in 4 15 16; do
		start=$(date +%s) &&
		(CUEMU_NCCL_HANG=1:$op && export CUEMU_NCCL_HANG &&
		 test_expect_code 1 mpi 2 $Z --zero 3 --timeout 3 >hang$op.json 2>hang$op.err) &&
		end=$(date +%s) &&
		grep "^gpu-train: nccl: allgatherv of 12704 F32: not finished after 3 s (a rank may have failed or stopped); communicator aborted$" hang$op.err &&
		test $((end - start)) -ge 3 &&
		test $((end - start)) -lt 120 || return 1
	done
'

# Device memory at 12 layers of width 32 (the emulation's CUEMU_MEM_LOG:
# each rank's most device memory at once). ZeRO-2 holds the whole fp32
# parameters (n floats; in fp32 they are the working copy too); ZeRO-3
# its range (n / 2) and the units: the embeddings (wte'"'"'s 384 rows and
# wpe'"'"'s 33), the final norm, and two blocks (one in use, one
# prefetched), or all 12 with --reshard-after-forward no. Counted from the
# shapes, not read from the run.
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-3: the device holds the shard and the unit buffers, not the whole parameters, as accounted and as mem-estimate states' '
	Y="$A --layers 12 --steps 1 --device cuda --precision fp32 --bucket 64K" &&
	for z in 2 3 3k; do
		keep= &&
		if test $z = 3k; then keep="--reshard-after-forward no"; fi &&
		rm -f mem$z.* &&
		(CUEMU_MEM_LOG=$PWD/mem$z && export CUEMU_MEM_LOG &&
		 mpi 2 $Y --zero ${z%k} $keep --ckpt-dir m$z >m$z.json) &&
		mem-estimate --config m$z/latest/config.json --precision f32 -b 4 -s 16 \
			--no-dropout --zero ${z%k} $keep --dp 2 --bucket 64K --json >me$z.json ||
		return 1
	done &&
	python3 - "$GK_CUEMU" <<-\PY
	import glob, json, sys
	def start(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)
	C, L, block = 32, 12, 12 * 32 * 32 + 13 * 32
	head = (384 + 33) * C
	n = head + L * block + 2 * C
	z2, z3 = start("m2.json"), start("m3.json")
	assert z3["params_padded"] == n and n % 2 == 0, (z3, n)
	units = 4 * (head + 2 * C + 2 * block)
	saved = 4 * n - 4 * n // 2 - units
	m2, m3 = z2["memory"], z3["memory"]
	me2 = json.load(open("me2.json"))["bytes"]
	me3 = json.load(open("me3.json"))["bytes"]
	# lib/mem counts the parameters without the padded rows (those are
	# padding), as ZeRO-2'"'"'s gradients in t7106
	assert m3["parameters"] == me3["parameters"] == 4 * z3["params"] // 2, (m3, me3)
	assert m3["comm"] - m2["comm"] == units, (m2, m3, units)
	assert me3["zero3_units"] == units and "zero3_gather" not in me3, (me3, units)
	assert me3["dp_buckets"] + me3["zero2_embedding_grads"] == m2["comm"], (me3, m2)
	# --reshard-after-forward no: a buffer for every block, not two
	z3k, me3k = start("m3k.json"), json.load(open("me3k.json"))["bytes"]
	kept = 4 * (head + 2 * C + L * block)
	assert me3k["zero3_units"] == kept, (me3k, kept)
	assert z3k["memory"]["comm"] - m2["comm"] == kept, (z3k["memory"], m2, kept)
	assert m2["total"] - m3["total"] == saved + m2["checkpoint"] - m3["checkpoint"], (m2, m3)
	assert saved > 0, saved
	# host memory: ZeRO-2'"'"'s parameter mirror is whole (n floats), ZeRO-3'"'"'s
	# copy its range (n / 2, rounded up to 64 bytes); the staging whole,
	# under 64 MiB, the moments'"'"' copies the range (and a float), the
	# gradients'"'"' mirror never written; mem-estimate'"'"'s terms
	for z, me in ((z2, me2), (z3, me3), (z3k, me3k)):
	    params = 4 * n if z is z2 else (4 * (n // 2) + 63) // 64 * 64
	    host = {"host_params": params, "host_staging": 4 * n, "host_moments": 8 * (n // 2 + 1)}
	    want = dict(host, total=sum(host.values()))
	    assert z["host_memory"] == want, (z["host_memory"], want)
	    assert {k: v for k, v in me.items() if k in host} == host, (me, host)
	if sys.argv[1]:
	    peak = lambda p: sorted(int(open(f).read().split()[1]) for f in glob.glob(p + ".*"))
	    p2, p3 = peak("mem2"), peak("mem3")
	    assert len(p2) == len(p3) == 2, (p2, p3)
	    assert all(a - b == saved for a, b in zip(p2, p3)), (p2, p3, saved)
	PY
'

# The checkpoint's copy in host memory (the category checkpoint): each
# rank copies its range of the parameters and its moments, which it
# writes, as on the CPU (t7103), not rank 0 the whole model: mem-estimate
# --ckpt-copy's checkpoint_copy, (4 + 8) / 2 bytes a parameter (a
# vocabulary of whole tiles, so that no padded rows differ).
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-3: the checkpoint copy in host memory is a rank'"'"'s range, as mem-estimate --ckpt-copy states' '
	mpi 2 $A --vocab 384 --steps 1 --device cuda --precision fp32 --zero 3 --ckpt-dir cc3 >cc3.json &&
	mem-estimate --config cc3/latest/config.json --precision f32 -b 4 -s 16 --no-dropout \
		--zero 3 --dp 2 --ckpt-copy --json >mc3.json &&
	g=$(jq -s "map(select(.event == \"start\"))[0].memory.checkpoint" cc3.json) &&
	m=$(jq ".bytes.checkpoint_copy" mc3.json) &&
	p=$(jq ".model.params" mc3.json) &&
	echo "gpu-train $g, mem-estimate $m, $p parameters" &&
	test "$g" = "$m" && test "$m" = $((6 * p))
'

# host_case NAME JSON [OPTION...]: mem-estimate'"'"'s figures (hmNAME.json)
# for the run of JSON, a start line, and the flags of its ZeRO and
# precision plus OPTIONs
host_case() {
	hn=$1 hj=$2 &&
	shift 2 &&
	start_config $hj h$hn.config &&
	mp=$(jq -r "select(.event == \"start\") | .precision" $hj) &&
	if test $mp = fp32; then mp=f32; fi &&
	mem-estimate --config h$hn.config --precision $mp -b 4 -s 16 --no-dropout \
		--zero $(jq -r "select(.event == \"start\") | .zero" $hj) "$@" --dp 2 \
		--json >hm$hn.json
}

# The host terms in bf16 and fp32 (the mirrors are f32 whatever the
# working copy), with the blocks kept gathered, under ZeRO-1 (the
# gradients'"'"' mirror too) and with --offload optimizer (the moments
# themselves; ZeRO-3'"'"'s copy of its gradient shard): the start line'"'"'s
# and the step lines'"'"' host_memory, term by term, are mem-estimate'"'"'s
# for the same flags, and the shape'"'"'s (TINY: 384 padded rows, 33
# positions, 2 blocks of width 32: an even flat buffer of n floats;
# ZeRO-3'"'"'s parameters the range of n / 2, a multiple of 64 bytes here).
# --metrics exports them, those the run has, without a total. The runs
# of the cases above where there is one (ZeRO-1 and 3 in bf16 with
# evaluation, ZeRO-3 kept gathered and ZeRO-1 offloaded in fp32).
test_expect_success 'GPUS,MPI' '2 GPUs: the host memory a rank allocates, by term, is mem-estimate'"'"'s in bf16 and fp32, ZeRO-1 and 3, kept gathered, offloaded, and --metrics'"'"'s' '
	mpi 2 $A --steps 1 --device cuda --precision fp32 --zero 3 --offload optimizer \
		--metrics ho3.prom >ho3.json &&
	bf16 && dev3k && off1 &&
	host_case b3 b3.json &&
	host_case d3k d3k.json --reshard-after-forward no &&
	host_case b1 b1.json &&
	host_case o1 po.json --offload optimizer &&
	host_case o3 ho3.json --offload optimizer &&
	python3 - <<-\PY
	import json, re
	C, L = 32, 2
	n = (384 + 33) * C + L * (12 * C * C + 13 * C) + 2 * C
	assert n % 2 == 0 and (4 * n) % 64 == 0 and (2 * n) % 64 == 0, n
	for name, f, z, off in (("b3", "b3", 3, 0), ("d3k", "d3k", 3, 0), ("b1", "b1", 1, 0),
	                        ("o1", "po", 1, 1), ("o3", "ho3", 3, 1)):
	    lines = [json.loads(l) for l in open("%s.json" % f)]
	    start = next(l for l in lines if l["event"] == "start")
	    step = next(l for l in lines if l["event"] == "step")
	    me = json.load(open("hm%s.json" % name))
	    assert start["params_padded"] == n and start["zero"] == z, start
	    params = 4 * n // 2 if z == 3 else 4 * n
	    want = {"host_params": params, "host_staging": 4 * n, "host_moments": 8 * (n // 2 + 1)}
	    if z < 2:
	        want["host_grads"] = 4 * n
	    if off and z >= 2:
	        want["host_grad_shard"] = 4 * (n // 2)
	    got = start["host_memory"]
	    assert {k: v for k, v in got.items() if k != "total"} == want, (name, got, want)
	    assert got["total"] == sum(want.values()) == me["host_per_rank"], (name, got, me)
	    assert {k: v for k, v in me["bytes"].items() if k.startswith("host_") and
	            k != "host_ram"} == want, (name, me["bytes"], want)
	    assert step["host_memory"] == got, (name, step)
	    if name == "o3":
	        prom = {}
	        for l in open("ho3.prom"):
	            m = re.match(r"gpukit_train_host_memory_bytes\{.*term=.([a-z_]+).*\} (\S+)$", l)
	            if m:
	                prom[m.group(1)] = int(float(m.group(2)))
	        assert prom == want, (prom, want)
	PY
'

# gpu-train on 2 GPUs with a pinned staging of 1030 bytes
# (GK_TEST_PIN_BYTES, for every rank)
mpi_pin() {
	GK_TEST_PIN_BYTES=1030 timeout 300 mpirun --oversubscribe --bind-to none \
		-x GK_TEST_PIN_BYTES -np 2 gpu-train "$@"
}

# A staging of 1030 bytes, where the model'"'"'s own is its n floats: every
# transfer goes in pieces, the last one short and none of whole floats
# (257.5), the bf16 logits of --sample in pieces of 515. The parameters
# up, the parameters and moments down into a checkpoint and up again on
# a resume, ZeRO-1'"'"'s gradients down and parameters up each step of
# --offload optimizer (ZeRO-3'"'"'s evaluation and --sample gather on the
# devices, no transfer): the losses, norms, validation losses, sample and
# checkpoints are the whole-buffer staging'"'"'s (the runs above) bit for
# bit; host_staging is the 1030 bytes.
test_expect_success 'GPUS,MPI' '2 GPUs: a pinned staging of 1030 bytes passes every transfer in pieces, bit for bit, and is accounted as such' '
	dev3 &&
	mpi_pin $Z --zero 3 --until $half --ckpt-dir sp >sp1.json &&
	mpi_pin $Z --zero 3 --ckpt-dir sp --resume >sp2.json &&
	steps sp1.json >sp.steps &&
	steps sp2.json >>sp.steps &&
	test_cmp d3p.steps sp.steps &&
	ckpt-merge sp/latest -o sp.safetensors &&
	ckpt-merge d3p/latest -o d3pm.safetensors &&
	cmp sp.safetensors d3pm.safetensors &&
	bf16 && off1 &&
	mpi_pin $B --zero 3 >pbp.json &&
	mpi_pin $Z --zero 1 --offload optimizer >pop.json &&
	for f in b3:pbp po:pop; do
		jq -c "select(.event == \"step\" or .event == \"summary\" or .event == \"sample\") |
			[.loss, .grad_norm, .val_loss, .tokens]" ${f%:*}.json >${f%:*}.out &&
		jq -c "select(.event == \"step\" or .event == \"summary\" or .event == \"sample\") |
			[.loss, .grad_norm, .val_loss, .tokens]" ${f#*:}.json >${f#*:}.out &&
		test $(grep -c . ${f%:*}.out) -gt $short &&
		test_cmp ${f%:*}.out ${f#*:}.out || return 1
	done &&
	test $(grep -c "\[null,null,null,\[" b3.out) = 1 &&
	for f in sp1 sp2 pbp pop; do
		jq -s -e "map(select(.event == \"start\" or .event == \"step\")) | length > 1 and
			all(.host_memory.host_staging == 1030)" $f.json || return 1
	done &&
	jq -s -e "map(select(.event == \"start\"))[0].host_memory.host_staging > 1030" b3.json &&
	test_expect_code 1 env GK_TEST_PIN_BYTES=3 gpu-train $Z >bad.out 2>bad.err &&
	grep "GK_TEST_PIN_BYTES 3: 4 bytes at least" bad.err
'

# gpu-train on 2 GPUs under the cgroup fixture hcg (GK_TEST_MEM_ROOT, for
# every rank)
mpi_cg() {
	GK_TEST_MEM_ROOT=$PWD/hcg timeout 300 mpirun --oversubscribe --bind-to none \
		-x GK_TEST_MEM_ROOT -np 2 gpu-train "$@"
}

# The check before allocating holds the cgroup's memory.max (shared by
# the 2 ranks) against each rank's host terms (mem-estimate's, which the
# case above finds the accounting's), the batch's token buffers (2 x 4 x
# 16 int32) and the 128 MiB process margin: at the byte where the run no
# longer fits it is refused once for the job, before any work, with the
# figure and a fix (which trains there); a byte more and it trains.
# ZeRO-3, and ZeRO-1, whose gradients' mirror takes more.
test_expect_success 'GPUS,MPI' '2 GPUs: a run whose host memory exceeds the cgroup'"'"'s limit is refused up front on every rank, with the figure and a fix that trains' '
	mkdir -p hcg/proc/self hcg/sys/fs/cgroup/job &&
	echo "0::/job" >hcg/proc/self/cgroup &&
	echo "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw" >hcg/proc/self/mountinfo &&
	echo 0 >hcg/sys/fs/cgroup/job/memory.current &&
	H="$A --steps 1 --device cuda --precision fp32" &&
	for z in 3 1; do
		mem-estimate --layers 2 --hidden 32 --heads 2 --vocab 257 --positions 33 -b 4 -s 16 \
			--precision f32 --zero $z --dp 2 --json >hf$z.json &&
		h=$(jq .host_per_rank hf$z.json) &&
		max=$((2 * (h + 2 * 4 * 16 * 4 + 134217728))) &&
		echo $((max - 1)) >hcg/sys/fs/cgroup/job/memory.max &&
		test_expect_code 1 mpi_cg $H --zero $z >hr$z.json 2>hr$z.err &&
		cat hr$z.err &&
		test_must_be_empty hr$z.json &&
		test $(grep -c "memory: a rank needs" hr$z.err) = 1 &&
		grep "^gpu-train: memory: a rank needs .* and 2 ranks share the cgroup.s memory limit: .*, more than the .* it leaves; cheapest fix: .*; or --force to allocate anyway (2 of 2 ranks)$" hr$z.err &&
		if test $z = 3; then
			fix=$(sed -n "s/.*cheapest fix: \(--[^(]*\) (.*/\1/p" hr$z.err) &&
			test -n "$fix" &&
			mpi_cg $H --zero $z $fix >hx$z.json &&
			test $(jq -s "map(select(.event == \"step\")) | length" hx$z.json) = 1
		fi &&
		echo $max >hcg/sys/fs/cgroup/job/memory.max &&
		mpi_cg $H --zero $z >hm$z.json &&
		test $(jq -s "map(select(.event == \"step\")) | length" hm$z.json) = 1 || return 1
	done
'

# --compress with ZeRO-3 over NCCL: its gradients are ZeRO-2's buckets,
# each reduce-scattered to its owners' pieces by the compressed ring on
# ZeRO-1's error feedback (the gathers carry parameters, f32,
# uncompressed), so ZeRO-2 --compress's losses, norms, model, moments and
# feedback, bit for bit (t7106: ZeRO-2 = ZeRO-1 --compress), and a resume
# 3 -> 2 -> 3 continues as one run. What compression adds to each stage's
# accounting (comm: the feedback, Np floats, and the ring's two wire
# buffers of a block, in device memory; checkpoint: the feedback's host
# copy) is mem-estimate --compress'"'"'s compress_feedback, compress_wire and
# checkpoint_feedback, at ZeRO 1, 2 and 3; under the emulation each rank'"'"'s
# most device memory (CUEMU_MEM_LOG) grows by the feedback and the wire
# buffers: ZeRO-1'"'"'s as accounted, ZeRO-2'"'"'s and 3'"'"'s those of their
# largest piece, a block (less than a rank'"'"'s range, which the accounting
# bounds them by). Counted from the shapes, not read from the run.
cat >cmpz.py <<'PYEOF'
import glob, json, sys
def start(f):
    return next(json.loads(l) for l in open(f) if '"start"' in l)["memory"]
z, cuemu = sys.argv[1], sys.argv[2]
plain, comp = start("zp%s.json" % z), start("zc%s.json" % z)
est = json.load(open("zc%s.me" % z))["bytes"]
fb, wire = est["compress_feedback"], est["compress_wire"]
for k, v in (("comm", fb + wire), ("checkpoint", est["checkpoint_feedback"])):
    if comp[k] - plain[k] != v:
        sys.exit("--zero %s: %s: gpu-train adds %d, mem-estimate --compress %d" %
                 (z, k, comp[k] - plain[k], v))
for k in ("parameters", "gradients", "optimizer", "activations"):
    if comp[k] != plain[k]:
        sys.exit("--zero %s: %s changed with --compress: %d, %d" % (z, k, plain[k], comp[k]))
# the wire buffers the ring grows to: a rank's range (ZeRO-1's blocks),
# or the largest piece of a bucket, a block at --bucket 16K (bf16: two
# bytes an element, each buffer of one more element and a byte)
C = 32
block = 12 * C * C + 13 * C
grown = fb + (wire if z == "1" else 2 * (2 * (block + 1) + 1))
grew = []
if cuemu:
    peak = lambda p: [int(open(f).read().split()[1]) for f in sorted(glob.glob(p + ".*"))]
    pp, pc = peak("zp%s.mem" % z), peak("zc%s.mem" % z)
    grew = [c - p for p, c in zip(pp, pc)]
    if len(pp) != 2 or len(pc) != 2 or not all(g == grown <= fb + wire for g in grew):
        sys.exit("--zero %s: device peaks %s, compressed %s: not the feedback %d and %d of "
                 "wire (at most %d) more" % (z, pp, pc, fb, grown - fb, wire))
print("--zero", z, "ok: feedback", fb, "wire", wire, "device peaks grew by", grew)
PYEOF
test_expect_success 'GPUS,MPI' '2 GPUs, ZeRO-3 --compress bf16: ZeRO-2 --compress'"'"'s losses, norms, model, moments and feedback bit for bit, resumed 3 -> 2 -> 3 alike; ZeRO 1, 2, 3 add mem-estimate --compress'"'"'s feedback and wire buffers' '
	Zc="$A --steps 3 --device cuda --precision fp32 --bucket 16K" &&
	for z in 1 2 3; do
		rm -f zp$z.mem.* zc$z.mem.* &&
		(CUEMU_MEM_LOG=$PWD/zp$z.mem && export CUEMU_MEM_LOG &&
		 mpi 2 $Zc --zero $z --ckpt-dir zp$z >zp$z.json) &&
		(CUEMU_MEM_LOG=$PWD/zc$z.mem && export CUEMU_MEM_LOG &&
		 mpi 2 $Zc --zero $z --compress bf16 --ckpt-dir zc$z >zc$z.json) &&
		steps zc$z.json >zc$z.steps &&
		mem-estimate --config zc$z/latest/config.json --precision f32 -b 4 -s 16 \
			--no-dropout --zero $z --dp 2 --bucket 16K --compress bf16 --ckpt-copy \
			--json >zc$z.me &&
		python3 cmpz.py $z "$GK_CUEMU" || return 1
	done &&
	test $(wc -l <zc3.steps) = 3 &&
	test_cmp zc2.steps zc3.steps &&
	test $(ls zc3/latest/feedback-rank-*.safetensors | wc -l) = 2 &&
	ckpt-merge zc3/latest -o zc3.safetensors &&
	cmp zc3.safetensors zc2/latest/model.safetensors &&
	for f in $(cd zc2/latest && ls optim-rank-* feedback-rank-*); do
		cmp zc2/latest/$f zc3/latest/$f || return 1
	done &&
	mpi 2 $Zc --zero 3 --compress bf16 --until 1 --ckpt-dir zcr >zcr1.json &&
	mpi 2 $Zc --zero 2 --compress bf16 --until 2 --ckpt-dir zcr --resume \
		>zcr2.json 2>zcr2.err &&
	mpi 2 $Zc --zero 3 --compress bf16 --ckpt-dir zcr --resume >zcr3.json 2>zcr3.err &&
	! grep "error feedback" zcr2.err zcr3.err &&
	{ steps zcr1.json && steps zcr2.json && steps zcr3.json; } >zcr.steps &&
	test_cmp zc3.steps zcr.steps &&
	for f in $(cd zc3/latest && ls *.safetensors); do
		cmp zc3/latest/$f zcr/latest/$f || return 1
	done
'

test_done
