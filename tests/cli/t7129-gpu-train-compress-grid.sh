#!/bin/sh
test_description='gpu-train --compress with --tp and --pp on the CPU

Compression applies to the data-parallel reduction of each pipeline
stage and tensor slice, over its data-parallel group only; the tensor
group'"'"'s and the pipeline'"'"'s messages stay f32. Without a data-parallel
group (tp 2 x pp 2 on 4 ranks) --compress changes nothing, bit for bit.
Exact: ZeRO-2 (small buckets) and ZeRO-3 over pp 2 x dp 2 give ZeRO-1'"'"'s
compressed losses, model and feedback files bit for bit (an element'"'"'s
partial sums take its owner'"'"'s path round the ring whatever the bucket);
a run stopped and resumed in its own layout continues bit for bit
(pp 2 x dp 2 bf16; tp 2 x dp 2 int8, whose replicated tensors the
tensor group takes from its rank 0: replicas that drifted apart would
not resume so); tp_comm_bytes and pp_comm_bytes are the uncompressed
run'"'"'s; the memory'"'"'s comm is the feedback (4 bytes an element of the
stage'"'"'s or slice'"'"'s segments) and the ring'"'"'s two wire buffers of the
largest piece, 2 (2 (piece + 1) + 1) bytes in bf16, and under int8 the
buffer through which the tensor group agrees on its replicated tensors'"'"'
gradients. Within a stated
tolerance (measured: bf16 moves these losses by 2e-6 relative, int8 by
1e-4): bf16 within 1e-4 and int8 within 1e-3 of the uncompressed grid'"'"'s
losses, and not equal; against plain data parallelism'"'"'s compressed run
(dp 2, ZeRO-1), tp 2 x dp 2 within 1e-7 (measured 2e-8: the same
elements mostly fall in the same rank'"'"'s ring block, rounded alike, and
tensor parallelism'"'"'s f32 sums differ in the last bits), which its
uncompressed run is not, and pp 2 x dp 2 within 1e-5 (measured 2e-6: a
stage'"'"'s segments cut the ring'"'"'s blocks elsewhere). A resume into
another layout starts from zero feedback, with a note (int8 with --tp
on GPUs: t7124).'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

A="--data train.bin $TINY --steps 6 --json --grad-accum 2 --clip 1"

test_expect_success 'data' '
	train_data
'

test_expect_success MPI 'tp 2 x pp 2 with no data-parallel group: --compress changes nothing, bit for bit' '
	mpi 4 $A --batch 8 --tp 2 --pp 2 --ckpt-dir cku1 >u1.json &&
	mpi 4 $A --batch 8 --tp 2 --pp 2 --ckpt-dir ckc1 --compress bf16 >c1.json &&
	losses u1.json >u1 && losses c1.json >c1 && test_cmp u1 c1 &&
	cmp cku1/latest/model.safetensors ckc1/latest/model.safetensors &&
	! ls ckc1/latest | grep feedback
'

test_expect_success MPI 'pp 2 x dp 2: ZeRO-2 and 3 compressed = ZeRO-1 compressed, bit for bit; the uncompressed within 1e-4' '
	mpi 4 $A --batch 4 --pp 2 --zero 1 >pu.json &&
	mpi 4 $A --batch 4 --pp 2 --zero 1 --compress bf16 --ckpt-dir ckp1 >p1.json &&
	mpi 4 $A --batch 4 --pp 2 --zero 2 --compress bf16 --bucket 4K --until 3 --ckpt-dir ckp2 >p2a.json &&
	mpi 4 $A --batch 4 --pp 2 --zero 3 --compress bf16 --bucket 4K --ckpt-dir ckp2 --resume \
		>p2b.json 2>p2b.err &&
	! grep "error feedback" p2b.err &&
	losses p1.json >p1 && { losses p2a.json && losses p2b.json; } >p2 && test_cmp p1 p2 &&
	cmp ckp1/latest/model.safetensors ckp2/latest/model.safetensors &&
	for r in 0 1 2 3; do
		cmp ckp1/latest/feedback-rank-0000$r-of-00004.safetensors \
		    ckp2/latest/feedback-rank-0000$r-of-00004.safetensors || return 1
	done &&
	ckpt-merge --check ckp1/latest &&
	losses pu.json >pu && close_to p1 pu 1e-4 && ! test_cmp p1 pu
'

test_expect_success MPI 'tp 2 x dp 2: bf16 within 1e-4 of the uncompressed' '
	mpi 4 $A --batch 4 --tp 2 >tu.json &&
	mpi 4 $A --batch 4 --tp 2 --zero 1 --compress bf16 >tb.json &&
	losses tu.json >tu && losses tb.json >tb &&
	close_to tb tu 1e-4 && ! test_cmp tb tu
'

test_expect_success MPI 'tp 2 x dp 2: int8 within 1e-3 of the uncompressed, resumed bit for bit' '
	mpi 4 $A --batch 4 --tp 2 --zero 1 --compress int8 >t8.json &&
	mpi 4 $A --batch 4 --tp 2 --zero 1 --compress int8 --until 3 --ckpt-dir ckt8 >t8a.json &&
	mpi 4 $A --batch 4 --tp 2 --zero 1 --compress int8 --ckpt-dir ckt8 --resume >t8b.json 2>t8b.err &&
	! grep "error feedback" t8b.err &&
	losses t8.json >t8 && { losses t8a.json && losses t8b.json; } >t8r &&
	test_cmp t8 t8r &&
	close_to t8 tu 1e-3 && ! test_cmp t8 tu
'

test_expect_success MPI 'plain data parallelism compressed (dp 2): tp 2 x dp 2 within 1e-7 (the uncompressed is not), pp 2 x dp 2 within 1e-5' '
	mpi 2 $A --batch 4 --zero 1 --compress bf16 >dp.json &&
	losses dp.json >dp &&
	close_to tb dp 1e-7 && ! close_to tu dp 1e-7 &&
	close_to p1 dp 1e-5
'

test_expect_success MPI 'the tensor and pipeline messages stay f32: their bytes are the uncompressed run'"'"'s' '
	jq -r "select(.event == \"step\") | .tp_comm_bytes" tu.json >tu.b &&
	jq -r "select(.event == \"step\") | .tp_comm_bytes" tb.json >tb.b &&
	test_cmp tu.b tb.b && test $(sort -u tb.b) -gt 0 &&
	jq -r "select(.event == \"step\") | .pp_comm_bytes" pu.json >pu.b &&
	jq -r "select(.event == \"step\") | .pp_comm_bytes" p1.json >p1.b &&
	test_cmp pu.b p1.b && test $(sort -u p1.b) -gt 0
'

# rank 0's memory.comm: the feedback of its segments and the wire buffers
# of its largest piece (bf16: 2 bytes an element, + 1 each); a stage 0 of
# pp 2 holds wte (the padded vocabulary's rows), wpe and block 0, its
# segments wte and the rest, and sends its micro-batches' activations
# from buffers of its own (t7121); a tensor slice is one segment, its
# floats params_padded
test_expect_success MPI 'memory.comm is the compressed feedback and wire formula' '
	python3 - p1.json tb.json <<-\EOF
	import json, sys
	def start(p):
	    return next(json.loads(l) for l in open(p) if "\"start\"" in l)
	def wire(piece):
	    return 2 * (2 * (piece + 1) + 1)
	s = start(sys.argv[1])
	C, V = s["hidden"], s["vocab"]
	Vp = (V + 127) // 128 * 128
	wte, wpe, blk = Vp * C, s["positions"] * C, 12 * C * C + 13 * C
	segs = [wpe + blk, wte]
	sends = 4 * s["grad_accum"] * s["batch"] * s["seq"] * C
	want = 4 * sum(segs) + wire(max((n + 1) // 2 for n in segs)) + sends
	assert s["memory"]["comm"] == want, (s["memory"]["comm"], want)
	s = start(sys.argv[2])
	n = s["params_padded"]
	want = 4 * n + wire((n + 1) // 2)
	assert s["memory"]["comm"] == want, (s["memory"]["comm"], want)
	EOF
'

# int8 over a tensor group: the replicated tensors' reduced gradients go
# from the group's rank 0 to the others through a buffer of those in a
# rank's piece (dp.c), as large on every rank: the largest rank's count,
# here from the tensor table (gpt.c's order; a tensor rank holds wte's
# rows over 2, the split weights' columns or rows over 2, the rest whole)
test_expect_success MPI 'memory.comm under int8 with --tp adds the replicated tensors'"'"' buffer' '
	python3 - t8.json <<-\EOF
	import json, sys
	s = next(json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l)
	C, L, P, t = s["hidden"], s["layers"], s["positions"], 2
	Vp = (s["vocab"] + 127) // 128 * 128
	table = [(Vp * C // t, 0), (P * C, 1)]
	for l in range(L):
	    table += [(C, 1), (C, 1), (C * 3 * C // t, 0), (3 * C // t, 0), (C // t * C, 0),
	              (C, 1), (C, 1), (C, 1), (C * 4 * C // t, 0), (4 * C // t, 0),
	              (4 * C // t * C, 0), (C, 1)]
	table += [(C, 1), (C, 1)]
	rep = []
	for n, r in table:
	    rep += [r] * n
	n = len(rep)
	assert n == s["params_padded"], (n, s["params_padded"])
	per = (n + 1) // 2
	most = max(sum(rep[:per]), sum(rep[per:]))
	piece = per + 1
	wire = 2 * ((piece + 255) // 256 * 4 + piece + 1)
	want = 4 * n + wire + 4 * most
	assert s["memory"]["comm"] == want, (s["memory"]["comm"], want, most)
	print("replicas", most, "of", sum(rep))
	EOF
'

test_expect_success MPI 'a resume into another layout starts from zero feedback, with a note' '
	mpi 4 $A --batch 4 --tp 2 --zero 1 --compress bf16 --ckpt-dir ckp2 --steps 8 --resume >x.json 2>x.err &&
	grep "^gpu-train: note: compressed communication starts from zero error feedback" x.err &&
	losses x.json >x && test $(wc -l <x) = 2 &&
	mpi 4 $A --batch 4 --pp 2 --compress bf16 --ckpt-dir ckp1 --steps 7 --resume >y.json 2>y.err &&
	grep "^gpu-train: note: compressed communication starts from zero error feedback" y.err
'

test_done
