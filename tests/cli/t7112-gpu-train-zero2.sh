#!/bin/sh
test_description='gpu-train --zero 2: gradients sharded over the ranks

Each gradient bucket is one reduce-scatter into the ranks that own its
elements, and a rank keeps only its own shard. On 2 ranks ZeRO-2 equals
ZeRO-1 and ZeRO-0 bit for bit (losses, gradient norms, parameters and
moments), overlapped or not; on 3 ranks (parameters not divisible by 3)
and with accumulation the sums are taken in another order: within fp32
rounding. Checkpoints resume across stages and world sizes, and a
checkpoint signal in the middle of an accumulation resumes bit for bit.
The memory it accounts is mem-estimate'"'"'s --zero 2, and its peak RSS
stays within the accounting and below ZeRO-1'"'"'s. With --compress each
bucket is reduce-scattered compressed on ZeRO-1'"'"'s error feedback:
ZeRO-1'"'"'s bits for bf16 and f16, resumed exactly, its memory
mem-estimate --compress'"'"'s.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

A="--data train.bin $TINY --steps 6 --json --clip 1"

# stcmp holds each element within tol of the other relative to max(1, |b|)
# (Adam moves a parameter by about lr whatever its gradient's size: near 0
# a difference in the last bit of a tiny gradient moves it by up to lr, so
# small values are held to tol absolutely)

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

test_expect_success 'data' '
	train_data
'

# The gradient norm is summed by shards under ZeRO-1 and 2 (in double):
# ZeRO-0's whole-buffer sum differs in a double's last digits only.
test_expect_success MPI '2 ranks: ZeRO-2 = ZeRO-1 = ZeRO-0 bit for bit (losses, norms, parameters, moments), overlap on and off' '
	mpi 2 $A --batch 4 --bucket 16K --ckpt-dir k0 >z0.json &&
	mpi 2 $A --batch 4 --bucket 16K --zero 1 --ckpt-dir k1 >z1.json &&
	mpi 2 $A --batch 4 --bucket 16K --zero 2 --overlap on --ckpt-dir k2 >z2.json &&
	mpi 2 $A --batch 4 --bucket 16K --zero 2 --no-overlap --ckpt-dir k2off >z2off.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .zero == 2 and .overlap == true" z2.json &&
	for z in 0 1 2 2off; do losses z$z.json >l$z && norms z$z.json >n$z || return 1; done &&
	test $(wc -l <l2) = 6 &&
	test_cmp l0 l2 && test_cmp l1 l2 && test_cmp l2 l2off &&
	test_cmp n1 n2 && test_cmp n2 n2off && close_to n2 n0 1e-12 &&
	cmp k0/latest/model.safetensors k2/latest/model.safetensors &&
	cmp k2/latest/model.safetensors k2off/latest/model.safetensors &&
	for r in 00000 00001; do
		f=optim-rank-$r-of-00002.safetensors &&
		cmp k1/latest/$f k2/latest/$f && cmp k2/latest/$f k2off/latest/$f || return 1
	done &&
	jq -s -e "map(select(.event == \"step\"))[-1].comm_ms > 0" z2.json
'

test_expect_success MPI '3 ranks (parameters not divisible by 3): ZeRO-2 within 1e-6 of ZeRO-1 and ZeRO-0, parameters within 1e-5' '
	mpi 3 $A --batch 2 --bucket 16K --ckpt-dir t0 >t0.json &&
	mpi 3 $A --batch 2 --bucket 16K --zero 1 --ckpt-dir t1 >t1.json &&
	mpi 3 $A --batch 2 --bucket 16K --zero 2 --overlap on --ckpt-dir t2 >t2.json &&
	mpi 3 $A --batch 2 --bucket 16K --zero 2 --no-overlap >t2off.json &&
	jq -s -e "map(select(.event == \"start\"))[0].params_padded % 3 != 0" t2.json &&
	losses t0.json >m0 && losses t1.json >m1 && losses t2.json >m2 && losses t2off.json >m2off &&
	test_cmp m2 m2off &&
	close_to m2 m1 1e-6 && close_to m2 m0 1e-6 &&
	stcmp t2/latest/model.safetensors t1/latest/model.safetensors 1e-5 &&
	stcmp t2/latest/model.safetensors t0/latest/model.safetensors 1e-5
'

test_expect_success MPI 'accumulation sums each micro-step into the shard: 2 and 3 ranks within 1e-6 of ZeRO-1, the parameters within 1e-5' '
	mpi 2 $A --batch 2 --grad-accum 2 --bucket 16K --zero 1 --ckpt-dir a1 >a1.json &&
	mpi 2 $A --batch 2 --grad-accum 2 --bucket 16K --zero 2 --overlap on --ckpt-dir a2 >a2.json &&
	mpi 3 $A --batch 2 --grad-accum 3 --bucket 16K --zero 1 >b1.json &&
	mpi 3 $A --batch 2 --grad-accum 3 --bucket 16K --zero 2 --no-overlap >b2.json &&
	losses a1.json >la1 && losses a2.json >la2 && losses b1.json >lb1 && losses b2.json >lb2 &&
	close_to la2 la1 1e-6 && close_to lb2 lb1 1e-6 &&
	stcmp a2/latest/model.safetensors a1/latest/model.safetensors 1e-5
'

test_expect_success MPI '--recompute layer: ZeRO-2 = ZeRO-1 bit for bit' '
	mpi 2 $A --batch 4 --recompute layer --zero 1 >r1.json &&
	mpi 2 $A --batch 4 --recompute layer --zero 2 --overlap on >r2.json &&
	losses r1.json >lr1 && losses r2.json >lr2 &&
	test_cmp lr1 lr2
'

test_expect_success MPI 'resume across stages on 2 ranks bit for bit: ZeRO-2 -> ZeRO-1 and ZeRO-1 -> ZeRO-2' '
	mpi 2 $A --batch 4 --zero 1 --steps 8 >f.json &&
	losses f.json >lf &&
	mpi 2 $A --batch 4 --zero 2 --steps 8 --until 4 --ckpt-dir s21 >p.json &&
	mpi 2 $A --batch 4 --zero 1 --steps 8 --ckpt-dir s21 --resume >q.json &&
	mpi 2 $A --batch 4 --zero 1 --steps 8 --until 4 --ckpt-dir s12 >p2.json &&
	mpi 2 $A --batch 4 --zero 2 --steps 8 --ckpt-dir s12 --resume >q2.json &&
	{ losses p.json && losses q.json; } >l21 &&
	{ losses p2.json && losses q2.json; } >l12 &&
	test_cmp lf l21 && test_cmp lf l12 &&
	test -f s21/step-00000004/optim-rank-00001-of-00002.safetensors
'

test_expect_success MPI 'resume across stages and worlds: ZeRO-2 on 2 -> ZeRO-0 on 3 -> ZeRO-2 on 3, within 1e-5 of ZeRO-0 throughout' '
	mpi 2 $A --batch 3 --steps 9 >g.json &&
	losses g.json >lg &&
	mpi 2 $A --batch 3 --zero 2 --steps 9 --until 3 --ckpt-dir w >w1.json &&
	mpi 3 $A --batch 2 --steps 9 --until 6 --ckpt-dir w --resume >w2.json &&
	mpi 3 $A --batch 2 --zero 2 --steps 9 --ckpt-dir w --resume >w3.json &&
	{ losses w1.json && losses w2.json && losses w3.json; } >lw &&
	test $(wc -l <lw) = 9 &&
	close_to lw lg 1e-5 &&
	test -f w/step-00000009/optim-rank-00002-of-00003.safetensors
'

cat >cmp.py <<'PYEOF'
import json, sys
start = next(json.loads(l) for l in open(sys.argv[1]) if '"start"' in l)
est = json.load(open(sys.argv[2]))
g, m = start["memory"], est["bytes"]
for k in ("parameters", "gradients", "optimizer"):
    if g[k] != m[k]:
        sys.exit("%s: gpu-train %d, mem-estimate %d" % (k, g[k], m[k]))
# comm: the full buffer'"'"'s pages that live during backward, the tied
# embedding'"'"'s rows (vocab x hidden floats, padded rows included) and
# the buckets, never more than the whole padded buffer
emb = 4 * start["vocab"] * start["hidden"]
full = 4 * start["params_padded"]
if not emb <= g["comm"] <= full + 4096:
    sys.exit("comm %d: not between the embedding %d and the buffer %d" % (g["comm"], emb, full))
print("ok", g["gradients"], g["comm"])
PYEOF

for n in 2 3; do
	test_expect_success MPI "memory over $n ranks: parameters, gradients and optimizer = mem-estimate --zero 2 --dp $n" "
		test -f k0/latest/config.json &&
		mpi $n --data train.bin --config k0/latest/config.json --seq 16 --batch 3 \
			--steps 1 --threads 1 --json --zero 2 >mg$n.json &&
		mem-estimate --config k0/latest/config.json --precision f32 -b 3 -s 16 \
			--no-dropout --zero 2 --dp $n --json >me$n.json &&
		python3 cmp.py mg$n.json me$n.json
	"
done

# Each rank's peak RSS (VmHWM), through a wrapper that runs it as a child.
cat >rss.py <<'PYEOF'
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1] + "." + os.environ.get("OMPI_COMM_WORLD_RANK", "0"), "w") as f:
    f.write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)
PYEOF

if ! ldd "$(command -v gpu-train)" 2>/dev/null | grep -q libasan; then
	test_set_prereq NOASAN
fi

# 6.5M parameters and a vocabulary of 257: the gradients (26 MB) are
# nearly all in the blocks, so keeping a half of them (13 MB) and buckets
# of 1 MiB in flight saves about 11 MB a rank over ZeRO-1 by the
# accounting; the peaks must show at least 6 MB of it.
test_expect_success MPI,NOASAN 'ZeRO-2 over 2 ranks: gradients halve in the accounting and peak RSS falls below ZeRO-1'"'"'s' '
	for z in 1 2; do
		timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
			python3 rss.py rss$z gpu-train --data train.bin --layers 2 --hidden 512 \
			--heads 4 --positions 16 --seq 16 --batch 1 --steps 2 --threads 1 \
			--bucket 1M --json --zero $z >y$z.json || return 1
	done &&
	python3 - y1.json y2.json <<-\PY &&
	import json, sys
	y1, y2 = (next(json.loads(l) for l in open(f) if "\"start\"" in l)["memory"]
	          for f in sys.argv[1:])
	assert y2["gradients"] * 2 == y1["gradients"], (y1, y2)
	assert y2["optimizer"] == y1["optimizer"], (y1, y2)
	assert y1["total"] - y2["total"] >= 10 << 20, (y1["total"], y2["total"])
	PY
	for r in 0 1; do
		test $(cat rss2.$r) -lt $(($(cat rss1.$r) - 6 * 1024)) || {
			echo "rank $r: peak RSS $(cat rss2.$r) KiB with ZeRO-2, $(cat rss1.$r) with ZeRO-1"
			return 1
		}
	done
'

# GPT-2's vocabulary: the tied embedding (26M of 38M parameters) lives
# through backward and is in the accounting (comm); the peak stays
# within 1.2x of it.
test_expect_success MPI,NOASAN 'ZeRO-2 over 2 ranks, GPT-2 vocabulary: peak RSS within 1.2x of the accounting' '
	rm -f hwm.* &&
	timeout 600 mpirun --oversubscribe --bind-to none -np 2 python3 rss.py hwm gpu-train \
		--data train.bin --layers 4 --hidden 512 --heads 8 --vocab 50257 --positions 64 \
		--seq 64 --batch 2 --steps 2 --threads 1 --bucket 4M --json --zero 2 >big.json &&
	python3 - big.json <<-\PY
	import json, sys
	start = next(json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l)
	mem = start["memory"]
	assert mem["comm"] >= 4 * 50257 * 512, mem
	for r in range(2):
	    kib = int(open("hwm.%d" % r).read())
	    ratio = kib * 1024 / mem["total"]
	    print("rank %d: peak %d KiB, accounting %d KiB, %.3f" % (r, kib, mem["total"] // 1024, ratio))
	    if ratio > 1.2:
	        sys.exit("rank %d: peak RSS %.3f times the accounting" % (r, ratio))
	PY
'

# Wait until the log at $1 shows a step, at most 300 s.
wait_step() {
	test_wait_for 300 "a step in $1" grep -q "\"event\":\"step\"" "$1"
}

# After four of step 2's eight micro-steps the ranks wait for the signal
# (GK_TEST_WAIT_SIGNAL=2:4), so the signal, sent when step 1's line
# appears, lands inside step 2's accumulation with micro-steps summed into
# the shard, however slowly a loaded machine runs the ranks (a long
# accumulation instead left a race: a step 2 that ended before the signal
# came stopped at step 2, with nothing dropped).
test_expect_success MPI 'SIGUSR1 in a long accumulation: the micro-steps summed into the shard are dropped, the resume is exact' '
	G="--batch 2 --grad-accum 8 --steps 3 --zero 2" &&
	mpi 2 $A $G >gs.json &&
	{ GK_TEST_WAIT_SIGNAL=2:4 mpirun --oversubscribe --bind-to none -np 2 \
		gpu-train $A $G --ckpt-dir cz >g1.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	wait_step g1.json &&
	kill -USR1 $pid &&
	test_wait_for 300 "mpirun to end after SIGUSR1" eval "! kill -0 $pid 2>/dev/null" &&
	{ wait $pid || { echo "mpirun exited $?"; false; }; } &&
	{ jq -e "select(.event == \"summary\") | .step == 1 and .dropped_micro_batches >= 1 and .dropped_micro_batches <= 4" g1.json ||
		{ echo "stopped as: $(jq -c "select(.event == \"summary\")" g1.json)"; false; }; } &&
	test "$(readlink cz/latest)" = step-00000001 &&
	mpi 2 $A $G --ckpt-dir cz --resume >g2.json &&
	{ losses g1.json && losses g2.json; } >g12 &&
	losses gs.json >gs &&
	test_cmp gs g12
'

test_expect_success MPI '--metrics with ZeRO-2: the memory by category, gradients the shard' '
	mpi 2 $A --batch 4 --zero 2 --metrics zm.prom >/dev/null &&
	g=$(jq -s "map(select(.event == \"start\"))[0].memory.gradients" z2.json) &&
	grep "^gpukit_train_memory_bytes{.*category=\"gradients\".*} $g\$" zm.prom
'

# --compress: each bucket is reduce-scattered compressed as backward
# completes it, with ZeRO-1's error feedback (the same values in the
# same layout). An element's partial sums take the ring's path from the
# rank after its owner to the owner whether the ring runs over the whole
# buffer's blocks (ZeRO-1) or a bucket's pieces (ZeRO-2), and bf16 and
# f16 pack each element alone: the same bits at any world size, and the
# checkpoints (model, moments, feedback) byte for byte. int8 packs groups
# of 256 counted from each piece's start, which follow the buckets: its
# losses within 1e-4 of ZeRO-1's. ZeRO-0's allreduce packs the owner's sum
# again for its allgather: within 1e-4 too.
C="$A --bucket 16K"
# (bf16 at 2 ranks, with --no-overlap and ZeRO-0; f16 and int8 at 3,
# where the parameters do not divide by the world)
for c in 2:bf16 3:f16; do
	n=${c%:*} cz=${c#*:}
	test_expect_success MPI "--compress $cz over $n ranks: ZeRO-2 = ZeRO-1 bit for bit (losses, norms, model, moments, feedback)" "
		mpi $n \$C --batch 2 --zero 1 --compress $cz --ckpt-dir c1$cz >c1$cz.json &&
		mpi $n \$C --batch 2 --zero 2 --compress $cz --ckpt-dir c2$cz >c2$cz.json &&
		losses c1$cz.json >l1 && losses c2$cz.json >l2 && test_cmp l1 l2 &&
		norms c1$cz.json >n1 && norms c2$cz.json >n2 && test_cmp n1 n2 &&
		test \$(ls c2$cz/latest/feedback-rank-*.safetensors | wc -l) = $n &&
		for f in \$(cd c1$cz/latest && ls *.safetensors); do
			cmp c1$cz/latest/\$f c2$cz/latest/\$f || return 1
		done
	"
done
test_expect_success MPI '--compress bf16 over 2 ranks: without overlap the same bits; ZeRO-0 within 1e-4' '
	mpi 2 $C --batch 2 --zero 2 --compress bf16 --no-overlap >c2off.json &&
	mpi 2 $C --batch 2 --zero 0 --compress bf16 >c0b.json &&
	losses c2bf16.json >l2 && losses c2off.json >loff && losses c0b.json >lb0 &&
	test_cmp l2 loff && close_to l2 lb0 1e-4
'
test_expect_success MPI '--compress int8 over 3 ranks: ZeRO-2 within 1e-4 of ZeRO-1' '
	mpi 3 $C --batch 2 --zero 1 --compress int8 >c1i.json &&
	mpi 3 $C --batch 2 --zero 2 --compress int8 >c2i.json &&
	losses c1i.json >li1 && losses c2i.json >li2 && close_to li2 li1 1e-4
'

# With accumulation ZeRO-2 packs each micro-step's sums (its feedback
# carried from one to the next) where ZeRO-1 packs the step's sum once.
test_expect_success MPI '--compress with accumulation over 3 ranks: ZeRO-2 within 1e-5 of ZeRO-1' '
	mpi 3 $C --batch 2 --grad-accum 2 --zero 1 --compress bf16 >ca1.json &&
	mpi 3 $C --batch 2 --grad-accum 2 --zero 2 --compress bf16 >ca2.json &&
	losses ca1.json >la1 && losses ca2.json >la2 &&
	close_to la2 la1 1e-5
'

# The feedback is restored at the same world size and layout: a ZeRO-2
# run resumes bit for bit, and so does a move between ZeRO-1 and 2 (the
# same feedback); ZeRO-0's (an allreduce's, of the same length at 2 ranks
# here) is not restored into ZeRO-2, with the note.
test_expect_success MPI '--compress resume: ZeRO-2 -> ZeRO-2 and ZeRO-1 -> ZeRO-2 -> ZeRO-1 bit for bit; ZeRO-0 -> ZeRO-2 starts from zero feedback, noted' '
	R="$C --batch 2 --compress bf16 --steps 8" &&
	mpi 2 $R --zero 2 >rf.json &&
	mpi 2 $R --zero 2 --until 4 --ckpt-dir r22 >rp.json &&
	mpi 2 $R --zero 2 --ckpt-dir r22 --resume >rq.json 2>rq.err &&
	! grep "error feedback" rq.err &&
	losses rf.json >lrf && { losses rp.json && losses rq.json; } >lr22 && test_cmp lrf lr22 &&
	mpi 2 $R --zero 1 --until 3 --ckpt-dir r12 >sp.json &&
	mpi 2 $R --zero 2 --until 6 --ckpt-dir r12 --resume >sq.json 2>sq.err &&
	mpi 2 $R --zero 1 --ckpt-dir r12 --resume >sr.json 2>sr.err &&
	! grep "error feedback" sq.err sr.err &&
	{ losses sp.json && losses sq.json && losses sr.json; } >lr12 && test_cmp lrf lr12 &&
	mpi 2 $R --zero 0 --until 4 --ckpt-dir r02 >tp.json &&
	jq -s -e "map(select(.event == \"start\"))[0].params_padded % 2 == 0" tp.json &&
	mpi 2 $R --zero 2 --ckpt-dir r02 --resume >tq.json 2>tq.err &&
	grep "^gpu-train: note: compressed communication starts from zero error feedback" tq.err
'

# A signal inside an accumulation waits for the step's end under
# --compress (the dropped micro-steps would have moved the feedback, which
# the previous checkpoint cannot take back): nothing dropped, and the
# resume is bit for bit.
test_expect_success MPI '--compress: SIGUSR1 in an accumulation stops at the step'"'"'s end, the resume is exact' '
	G="--batch 2 --grad-accum 4 --steps 3 --zero 2 --compress bf16" &&
	mpi 2 $C $G >hs.json &&
	{ GK_TEST_WAIT_SIGNAL=2:2 mpirun --oversubscribe --bind-to none -np 2 \
		gpu-train $C $G --ckpt-dir hz >h1.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	wait_step h1.json &&
	kill -USR1 $pid &&
	test_wait_for 300 "mpirun to end after SIGUSR1" eval "! kill -0 $pid 2>/dev/null" &&
	{ wait $pid || { echo "mpirun exited $?"; false; }; } &&
	{ jq -e "select(.event == \"summary\") | .step == 2 and .dropped_micro_batches == null" h1.json ||
		{ echo "stopped as: $(jq -c "select(.event == \"summary\")" h1.json)"; false; }; } &&
	test "$(readlink hz/latest)" = step-00000002 &&
	mpi 2 $C $G --ckpt-dir hz --resume >h2.json 2>h2.err &&
	! grep "error feedback" h2.err &&
	{ losses h1.json && losses h2.json; } >h12 &&
	losses hs.json >hs &&
	test_cmp hs h12
'

cat >cmpc.py <<'PYEOF'
import json, sys
def start(f):
    return next(json.loads(l) for l in open(f) if '"start"' in l)["memory"]
plain, comp = start(sys.argv[1]), start(sys.argv[2])
est = json.load(open(sys.argv[3]))["bytes"]
want = est["compress_feedback"] + est.get("compress_wire", 0)
for k, v in (("comm", want), ("checkpoint", est["checkpoint_feedback"])):
    if comp[k] - plain[k] != v:
        sys.exit("%s: gpu-train adds %d, mem-estimate --compress %d" % (k, comp[k] - plain[k], v))
for k in ("parameters", "gradients", "optimizer"):
    if comp[k] != plain[k]:
        sys.exit("%s changed with --compress: %d, %d" % (k, plain[k], comp[k]))
print("ok", want)
PYEOF

for n in 2 3; do
	test_expect_success MPI "--compress int8 over $n ranks: the feedback and wire buffers gpu-train adds (comm, checkpoint) = mem-estimate --compress, ZeRO 0, 1 and 2" "
		for z in 0 1 2; do
			mpi $n --data train.bin $TINY --batch 3 --steps 1 --json --zero \$z \
				--ckpt-dir mp$n\$z >mp.json &&
			mpi $n --data train.bin $TINY --batch 3 --steps 1 --json --zero \$z \
				--compress int8 --ckpt-dir mc$n\$z >mc.json &&
			mem-estimate --config mc$n\$z/latest/config.json --precision f32 -b 3 \
				-s 16 --no-dropout --zero \$z --dp $n --compress int8 --ckpt-copy \
				--json >mce.json &&
			python3 cmpc.py mp.json mc.json mce.json || return 1
		done
	"
done

test_expect_success 'refused: --zero 4 (a usage error)' '
	test_expect_code 2 gpu-train $A --zero 4 2>err &&
	grep "zero" err
'

test_done
