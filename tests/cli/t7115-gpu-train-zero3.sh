#!/bin/sh
test_description='gpu-train --zero 3: parameters sharded over the ranks

Outside its own range of the flat buffer a rank holds no parameters
between uses: each block is gathered (one all-gather of unequal pieces
over its owners) before its forward and again before its backward, and
released after; the embeddings and the final norm with the tied head stay
gathered for the step. Gradients go as ZeRO-2'"'"'s. The parameters a rank
computes with are the owners'"'"' bits, and the gradient path is ZeRO-2'"'"'s,
so ZeRO-3 equals ZeRO-2 bit for bit (losses, gradient norms, the model
file and every moment file) at 2 and 3 ranks, with accumulation, with
the blocks released after forward or kept until backward; at 2 ranks
ZeRO-1 too. Checkpoints resume across stages and worlds, a rank reading
only its range of each tensor, its memory is mem-estimate'"'"'s --zero 3,
and what it cannot do is refused. With --compress its buckets go as
ZeRO-2'"'"'s compressed ones: ZeRO-2'"'"'s bits, feedback files included. --sample
gathers the whole model to rank 0, after training or from a checkpoint,
and samples what ZeRO-1 and one rank sample.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

A="--data train.bin $TINY --steps 6 --json --clip 1 --bucket 16K"

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

# the model of run $1's latest checkpoint, as one file: ZeRO-3's rank
# shards merged (t7117 checks the shards themselves)
model_of() {
	if test -f $1/latest/model.safetensors; then
		echo $1/latest/model.safetensors
	else
		ckpt-merge $1/latest -o $1.model.safetensors && echo $1.model.safetensors
	fi
}

# losses, norms, model and moment files of runs $2.. (--ckpt-dir each's
# name) all equal, bit for bit, at world $1
same_runs() {
	w=$1 &&
	shift &&
	ref=$1 &&
	losses $ref.json >$ref.l && norms $ref.json >$ref.n &&
	test $(wc -l <$ref.l) = 6 &&
	for x in "$@"; do
		losses $x.json >$x.l && norms $x.json >$x.n &&
		test_cmp $ref.l $x.l && test_cmp $ref.n $x.n &&
		cmp $(model_of $ref) $(model_of $x) &&
		r=0 &&
		while test $r -lt $w; do
			f=$(printf "optim-rank-%05d-of-%05d.safetensors" $r $w) &&
			cmp $ref/latest/$f $x/latest/$f &&
			r=$((r + 1)) || return 1
		done || return 1
	done
}

# every step's parameter gathers as ZeRO-3 makes them, in $1 run with
# --grad-accum $2, blocks released after forward ($3 = 1) or not, and the
# next block's gather started during the current one ($4 = 1) or not:
# the embeddings and the final norm once a step, each micro-step's
# forward every block, its backward every block but the last again when
# released after forward; each block's gather prefetched, or none
gathers() {
	jq -s -e --argjson a $2 --argjson r $3 --argjson p $4 "
		(map(select(.event == \"start\"))[0].layers) as \$l |
		(\$a * (\$l + \$r * (\$l - 1))) as \$blocks |
		map(select(.event == \"step\")) | length > 0 and
		all(.param_gathers == 2 + \$blocks and .param_prefetched == \$p * \$blocks)" "$1" || {
		echo "$1: gathers $(jq -c "select(.event == \"step\") | [.param_gathers, .param_prefetched]" "$1" | sort -u)"
		false
	}
}

test_expect_success 'data' '
	train_data
'

# evaluation: every rank gathers the whole model once (the ranks may
# hold different numbers of batches)
V="--val-data val.bin --eval-every 3 --eval-batches 2"
# --sample after training (seeded, temperature 1): rank 0 alone gathers
# the whole model and samples
S="--sample 24 --prompt int"

# the sample event of a --json log
sample_of() {
	jq -c "select(.event == \"sample\") | {prompt, tokens, text}" "$1" >"$1.s" &&
	test $(jq -r ".tokens | length" "$1.s") = 24
}

test_expect_success MPI '2 ranks: ZeRO-3 = ZeRO-2 = ZeRO-1 bit for bit (and the validation losses), released after forward or kept until backward, prefetched or not' '
	mpi 2 $A --batch 4 --zero 1 $S --ckpt-dir a1 >a1.json &&
	mpi 2 $A --batch 4 --zero 2 $V --ckpt-dir a2 >a2.json &&
	mpi 2 $A --batch 4 --zero 3 $V $S --overlap on --ckpt-dir a3 >a3.json &&
	mpi 2 $A --batch 4 --zero 3 --no-overlap --ckpt-dir a3off >a3off.json &&
	mpi 2 $A --batch 4 --zero 3 --reshard-after-forward no --overlap on --ckpt-dir a3k >a3k.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .zero == 3 and .reshard_after_forward" a3.json &&
	jq -s -e "map(select(.event == \"start\"))[0].reshard_after_forward == false" a3k.json &&
	gathers a3.json 1 1 1 && gathers a3off.json 1 1 0 && gathers a3k.json 1 0 1 &&
	same_runs 2 a2 a1 a3 a3off a3k &&
	jq -r "select(.event == \"step\" and .val_loss != null) | .val_loss" a2.json >a2.v &&
	jq -r "select(.event == \"step\" and .val_loss != null) | .val_loss" a3.json >a3.v &&
	test $(wc -l <a3.v) = 2 && test_cmp a2.v a3.v &&
	sample_of a1.json && sample_of a3.json && test_cmp a1.json.s a3.json.s
'

test_expect_success MPI '3 ranks (parameters not divisible by 3), --recompute layer: ZeRO-3 = ZeRO-2 bit for bit' '
	R="--batch 2 --recompute layer" &&
	mpi 3 $A $R --zero 2 $S --ckpt-dir b2 >b2.json &&
	mpi 3 $A $R --zero 3 $S --overlap on --ckpt-dir b3 >b3.json &&
	mpi 3 $A $R --zero 3 --reshard-after-forward no --no-overlap --ckpt-dir b3k >b3k.json &&
	gathers b3.json 1 1 1 && gathers b3k.json 1 0 0 &&
	jq -s -e "map(select(.event == \"start\"))[0].params_padded % 3 != 0" b3.json &&
	same_runs 3 b2 b3 b3k &&
	sample_of b2.json && sample_of b3.json && test_cmp b2.json.s b3.json.s
'

test_expect_success MPI '--sample from a checkpoint (--init-from, --resume) at 2 and 3 ranks: one rank'"'"'s sample' '
	T="--sample 24 --prompt int --temperature 0 --json" &&
	gpu-train --init-from a1/latest $T >i1.json &&
	mpi 2 --init-from a1/latest --zero 3 $T >i2.json &&
	mpi 3 --init-from a1/latest --zero 3 $T >i3.json &&
	sample_of i1.json && sample_of i2.json && sample_of i3.json &&
	test_cmp i1.json.s i2.json.s && test_cmp i1.json.s i3.json.s &&
	gpu-train --ckpt-dir b3 --resume --zero 3 $S --json >r1.json &&
	mpi 3 --ckpt-dir b3 --resume --zero 3 $S --json >r3.json &&
	sample_of r1.json && sample_of r3.json && test_cmp r1.json.s r3.json.s
'

test_expect_success MPI '--sample at --zero 3 with a prompt rank 0 cannot read: the job fails once, no hang' '
	gpu-train --data train.bin $TINY --vocab 300 --steps 1 --ckpt-dir v300 -q &&
	test_expect_code 1 mpi 2 --init-from v300 --zero 3 --sample 5 --prompt int 2>err &&
	grep -c "^gpu-train: --prompt: a prompt is read as bytes" err >n &&
	echo 1 >one && test_cmp one n
'

test_expect_success MPI '--grad-accum 2 at 2 and 3 ranks: ZeRO-3 = ZeRO-2 bit for bit' '
	mpi 2 $A --batch 2 --grad-accum 2 --zero 2 --ckpt-dir c2 >c2.json &&
	mpi 2 $A --batch 2 --grad-accum 2 --zero 3 --overlap on --ckpt-dir c3 >c3.json &&
	mpi 2 $A --batch 2 --grad-accum 2 --zero 3 --reshard-after-forward no --no-overlap \
		--ckpt-dir c3k >c3k.json &&
	gathers c3.json 2 1 1 && gathers c3k.json 2 0 0 &&
	same_runs 2 c2 c3 c3k &&
	mpi 3 $A --batch 2 --grad-accum 2 --zero 2 --ckpt-dir d2 >d2.json &&
	mpi 3 $A --batch 2 --grad-accum 2 --zero 3 --ckpt-dir d3 >d3.json &&
	same_runs 3 d2 d3
'

# A ZeRO-3 checkpoint is ZeRO-1's (each rank's moments) with each rank's
# range of the model beside them, so ZeRO-0 on one rank continues it as it
# continues ZeRO-1's.
test_expect_success MPI 'resume across stages: ZeRO-3 on 2 -> ZeRO-3 on 2 and -> ZeRO-0 on 1, bit for bit' '
	mpi 2 $A --batch 4 --zero 3 --steps 8 >f.json &&
	losses f.json >lf &&
	mpi 2 $A --batch 4 --zero 3 --steps 8 --until 4 --ckpt-dir s33 >p.json &&
	cp -a s33 s30 &&
	mpi 2 $A --batch 4 --zero 3 --steps 8 --ckpt-dir s33 --resume >q.json &&
	{ losses p.json && losses q.json; } >l33 &&
	test_cmp lf l33 &&
	test -f s33/step-00000004/optim-rank-00001-of-00002.safetensors &&
	gpu-train $A --batch 8 --steps 8 --ckpt-dir s30 --resume >h3.json &&
	mpi 2 $A --batch 4 --zero 1 --steps 8 --until 4 --ckpt-dir s10 >p1.json &&
	gpu-train $A --batch 8 --steps 8 --ckpt-dir s10 --resume >h1.json &&
	losses h3.json >lh3 && losses h1.json >lh1 &&
	test $(wc -l <lh3) = 4 &&
	test_cmp lh1 lh3 &&
	cmp s30/latest/model.safetensors s10/latest/model.safetensors &&
	cmp s30/latest/optim.safetensors s10/latest/optim.safetensors &&
	{ losses p.json && cat lh3; } >l30 &&
	close_to l30 lf 1e-5
'

# A rank reads only its range of each tensor from the checkpoint: at 3
# ranks the ranges cut tensors in the middle.
test_expect_success MPI '--init-from at 3 ranks: ZeRO-3 = ZeRO-2 bit for bit' '
	mpi 3 $A --batch 2 --steps 2 --zero 2 --init-from b2/latest --ckpt-dir g2 >g2.json &&
	mpi 3 $A --batch 2 --steps 2 --zero 3 --init-from b2/latest --ckpt-dir g3 >g3.json &&
	losses g2.json >g2.l && losses g3.json >g3.l &&
	test $(wc -l <g2.l) = 2 && test_cmp g2.l g3.l &&
	cmp g2/latest/model.safetensors $(model_of g3)
'

cat >cmp.py <<'PYEOF'
import json, sys
start = next(json.loads(l) for l in open(sys.argv[1]) if '"start"' in l)
est = json.load(open(sys.argv[2]))
g, m = start["memory"], est["bytes"]
for k in ("parameters", "gradients", "optimizer"):
    if g[k] != m[k]:
        sys.exit("%s: gpu-train %d, mem-estimate %d" % (k, g[k], m[k]))
# comm: what the lazily mapped buffers hold during a step: at least the
# embeddings (parameters, and the tied gradient rows) and at most both
# whole padded buffers
emb = 4 * start["vocab"] * start["hidden"]
full = 4 * start["params_padded"]
if not 2 * emb <= g["comm"] <= 2 * full + 8 * 4096:
    sys.exit("comm %d: not between twice the embedding %d and the buffers %d" % (g["comm"], emb, full))
print("ok", g["parameters"], g["comm"])
PYEOF

test_expect_success MPI 'memory over 2 and 3 ranks: parameters, gradients and optimizer = mem-estimate --zero 3 --dp N' '
	mem-estimate --config a1/latest/config.json --precision f32 -b 4 -s 16 \
		--no-dropout --zero 3 --dp 2 --json >me2.json &&
	python3 cmp.py a3.json me2.json &&
	mem-estimate --config a1/latest/config.json --precision f32 -b 2 -s 16 \
		--no-dropout --zero 3 --dp 3 --json >me3.json &&
	python3 cmp.py b3.json me3.json
'

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

BIG="--layers 12 --hidden 256 --heads 4 --positions 16 --seq 16 --threads 1"

# 12 blocks of hidden 256 (9.5M parameters, 38 MB, nearly all in the
# blocks): a rank keeps half of them and holds the embeddings and two
# blocks besides (6.5 MB), about 12 MB less than ZeRO-2 by the
# accounting; a fresh ZeRO-3 run draws only its own range, so the peaks
# (VmHWM) must show at least 6 MB of it. Both overlap (ZeRO-3 does by
# default, prefetching), so their buckets in flight are the same.
test_expect_success MPI,NOASAN 'ZeRO-3 over 2 ranks: parameters halve in the accounting and peak RSS falls below ZeRO-2'"'"'s' '
	for z in 2 3; do
		timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
			python3 rss.py rss$z gpu-train --data train.bin $BIG --batch 1 --steps 2 \
			--bucket 1M --overlap on --json --zero $z >y$z.json || return 1
	done &&
	python3 - y2.json y3.json <<-\PY &&
	import json, sys
	y2, y3 = (next(json.loads(l) for l in open(f) if "\"start\"" in l)["memory"]
	          for f in sys.argv[1:])
	assert y3["parameters"] * 2 == y2["parameters"], (y2, y3)
	assert y3["gradients"] == y2["gradients"] and y3["optimizer"] == y2["optimizer"], (y2, y3)
	assert y2["total"] - y3["total"] >= 10 << 20, (y2["total"], y3["total"])
	PY
	for r in 0 1; do
		test $(cat rss3.$r) -lt $(($(cat rss2.$r) - 6 * 1024)) || {
			echo "rank $r: peak RSS $(cat rss3.$r) KiB with ZeRO-3, $(cat rss2.$r) with ZeRO-2"
			return 1
		}
	done
'

# Loading that model'"'"'s checkpoint (--steps 0, --sample 1: rank 0
# gathers the model to sample, rank 1 keeps its range): rank 1 reads
# only its half of each tensor, 19 MB, where ZeRO-2'"'"'s reads the whole
# model.
test_expect_success MPI,NOASAN 'ZeRO-3 --init-from and --resume: rank 1'"'"'s peak RSS is its half of the model, not the whole' '
	mpi 2 --data train.bin $BIG --batch 1 --steps 1 --bucket 1M --zero 3 --ckpt-dir y3 -q &&
	for z in 2 3; do
		timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
			python3 rss.py rssi$z gpu-train --init-from y3/latest $BIG --sample 1 \
			--zero $z >/dev/null &&
		timeout 300 mpirun --oversubscribe --bind-to none -np 2 \
			python3 rss.py rssr$z gpu-train --ckpt-dir y3 --resume $BIG --sample 1 \
			--zero $z >/dev/null || return 1
	done &&
	for k in i r; do
		test $(cat rss${k}3.1) -lt $(($(cat rss${k}2.1) - 12 * 1024)) || {
			echo "--init-from/--resume ($k): rank 1 peak RSS $(cat rss${k}3.1) KiB with ZeRO-3, $(cat rss${k}2.1) with ZeRO-2"
			return 1
		}
	done
'

# --compress: ZeRO-3's gradients are ZeRO-2's buckets, each
# reduce-scatter compressed on ZeRO-1's error feedback (the gathers carry
# parameters, f32), so ZeRO-3 equals ZeRO-2 --compress bit for bit,
# feedback files included, and their checkpoints resume into each other
# with the feedback (its layout reduce-scatter). The feedback and the
# ring's wire buffers are what mem-estimate --zero 3 --compress prices.
C="$A --batch 4 --steps 8"

# losses, norms, model, moment and feedback files of runs $2 and $3 (their
# --ckpt-dir and $x.json) equal, bit for bit, at world $1
same_compressed() {
	losses $2.json >$2.l && losses $3.json >$3.l && test_cmp $2.l $3.l &&
	norms $2.json >$2.n && norms $3.json >$3.n && test_cmp $2.n $3.n &&
	cmp $(model_of $2) $(model_of $3) &&
	test $(ls $3/latest/feedback-rank-*-of-*.safetensors | wc -l) = $1 &&
	for f in $(cd $3/latest && ls optim-rank-* feedback-rank-*); do
		cmp $2/latest/$f $3/latest/$f || return 1
	done
}

cat >cmpc.py <<'PYEOF'
import json, sys
def start(f):
    return next(json.loads(l) for l in open(f) if '"start"' in l)["memory"]
plain, comp = start(sys.argv[1]), start(sys.argv[2])
est = json.load(open(sys.argv[3]))["bytes"]
want = est["compress_feedback"] + est["compress_wire"]
for k, v in (("comm", want), ("checkpoint", est["checkpoint_feedback"])):
    if comp[k] - plain[k] != v:
        sys.exit("%s: gpu-train adds %d, mem-estimate --compress %d" % (k, comp[k] - plain[k], v))
for k in ("parameters", "gradients", "optimizer"):
    if comp[k] != est[k]:
        sys.exit("%s: gpu-train %d, mem-estimate --compress %d" % (k, comp[k], est[k]))
print("ok", want)
PYEOF

test_expect_success MPI '--compress bf16 over 2 ranks: ZeRO-3 = ZeRO-2 bit for bit (feedback files too); resumed ZeRO-3 -> ZeRO-2 -> ZeRO-3 with the feedback, bit for bit; comm and checkpoint add mem-estimate --compress'"'"'s' '
	mpi 2 $C --zero 2 --compress bf16 --ckpt-dir e2 >e2.json &&
	mpi 2 $C --zero 3 --compress bf16 --ckpt-dir e3 >e3.json &&
	same_compressed 2 e2 e3 &&
	mpi 2 $C --zero 3 --compress bf16 --until 3 --ckpt-dir e323 >ep.json &&
	mpi 2 $C --zero 2 --compress bf16 --until 6 --ckpt-dir e323 --resume >eq.json 2>eq.err &&
	mpi 2 $C --zero 3 --compress bf16 --ckpt-dir e323 --resume >er.json 2>er.err &&
	! grep "error feedback" eq.err er.err &&
	{ losses ep.json && losses eq.json && losses er.json; } >e323.l &&
	test_cmp e3.l e323.l &&
	cmp $(model_of e3) $(model_of e323) &&
	for f in $(cd e3/latest && ls optim-rank-* feedback-rank-*); do
		cmp e3/latest/$f e323/latest/$f || return 1
	done &&
	mem-estimate --config e3/latest/config.json --precision f32 -b 4 -s 16 --no-dropout \
		--zero 3 --dp 2 --compress bf16 --ckpt-copy --json >mce2.json &&
	python3 cmpc.py a3.json e3.json mce2.json
'

# A signal inside an accumulation waits for the step'"'"'s end under
# --compress, as ZeRO-2'"'"'s does (the micro-steps move the feedback).
test_expect_success MPI '--compress f16 over 3 ranks with --grad-accum 2: ZeRO-3 = ZeRO-2 bit for bit; SIGUSR1 in an accumulation stops at the step'"'"'s end, the resume is exact' '
	G="$A --batch 2 --grad-accum 2 --steps 3 --compress f16" &&
	mpi 3 $G --zero 2 --ckpt-dir h2 >h2.json &&
	mpi 3 $G --zero 3 --ckpt-dir h3 >h3.json &&
	same_compressed 3 h2 h3 &&
	{ GK_TEST_WAIT_SIGNAL=2:1 mpirun --oversubscribe --bind-to none -np 3 \
		gpu-train $G --zero 3 --ckpt-dir hz >hz1.json & } &&
	pid=$! &&
	test_when_finished "kill \$pid 2>/dev/null || :" &&
	test_wait_for 300 "a step in hz1.json" grep -q "\"event\":\"step\"" hz1.json &&
	kill -USR1 $pid &&
	test_wait_for 300 "mpirun to end after SIGUSR1" eval "! kill -0 $pid 2>/dev/null" &&
	{ wait $pid || { echo "mpirun exited $?"; false; }; } &&
	{ jq -e "select(.event == \"summary\") | .step == 2 and .dropped_micro_batches == null" hz1.json ||
		{ echo "stopped as: $(jq -c "select(.event == \"summary\")" hz1.json)"; false; }; } &&
	test "$(readlink hz/latest)" = step-00000002 &&
	mpi 3 $G --zero 3 --ckpt-dir hz --resume >hz2.json 2>hz2.err &&
	! grep "error feedback" hz2.err &&
	{ losses hz1.json && losses hz2.json; } >hz.l &&
	test_cmp h3.l hz.l &&
	cmp $(model_of h3) $(model_of hz) &&
	mem-estimate --config h3/latest/config.json --precision f32 -b 2 -s 16 --no-dropout \
		--zero 3 --dp 3 --compress f16 --ckpt-copy --json >mce3.json &&
	python3 cmpc.py b3.json h3.json mce3.json
'

test_expect_success 'refused: --reshard-after-forward maybe (a usage error)' '
	test_expect_code 2 gpu-train $A --zero 3 --reshard-after-forward maybe 2>err &&
	grep "reshard-after-forward" err
'

test_done
