#!/bin/sh
test_description='gpu-train --tp: tensor parallelism (Megatron'"'"'s split) on the CPU

On the same global batch, 20 steps of tp 2 (2 ranks), tp 2 x dp 2 (4
ranks) and tp 4 give the losses and the global gradient norms of one
rank within 1e-5 relative, step by step (a norm that counted the
replicated LayerNorms and biases on every rank would be larger);
checkpoints hold the whole model in the Hugging Face layout, so --resume
goes from tp 2 to one rank, from one rank to tp 2 and from tp 2 to
tp 2 x dp 2, each continuing the losses of the run that never stopped,
and --init-from loads one into any layout; the per-rank model states
equal mem-estimate --tp; a step'"'"'s tp_comm_bytes is the formula; a
tensor group across hosts is warned about; layouts that cannot be run
are refused before any work, with the numbers.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

S="--data train.bin --layers 2 --hidden 64 --heads 4 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2"
A="$S --steps 20 --json --clip 1"

norms() {
	jq -r 'select(.event == "step") | .grad_norm' "$1"
}

test_expect_success 'data, and the run of one rank x batch 8' '
	train_data &&
	gpu-train $A --batch 8 >one.json &&
	losses one.json >one && norms one.json >one.n &&
	test $(wc -l <one) = 20
'

test_expect_success MPI 'tp 2 (2 ranks x batch 8) = one rank, losses and norms' '
	mpi 2 $A --batch 8 --tp 2 >tp2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 1 and .world == 2" tp2.json &&
	losses tp2.json >tp2 && norms tp2.json >tp2.n &&
	close_to tp2 one 1e-5 &&
	close_to tp2.n one.n 1e-5
'

test_expect_success MPI 'a rank of tp 2 holds about half the parameters' '
	jq -s -e "(map(select(.event == \"start\"))[0].params_padded) as \$p |
		\$p > 0 and \$p < 0.6 * ($(jq -s "map(select(.event == \"start\"))[0].params_padded" one.json))" tp2.json
'

test_expect_success MPI 'tp 2 x dp 2 (4 ranks x batch 4) = one rank x batch 8' '
	mpi 4 $A --batch 4 --tp 2 >tp2dp2.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .tp == 2 and .dp == 2" tp2dp2.json &&
	losses tp2dp2.json >tp2dp2 && norms tp2dp2.json >tp2dp2.n &&
	close_to tp2dp2 one 1e-5 &&
	close_to tp2dp2.n one.n 1e-5
'

test_expect_success MPI 'tp 4 (a rank whose vocabulary rows are all padding) = one rank' '
	mpi 4 $A --batch 8 --tp 4 >tp4.json &&
	losses tp4.json >tp4 &&
	close_to tp4 one 1e-5
'

test_expect_success MPI '--init-from a whole checkpoint: tp 2 continues as one rank does' '
	gpu-train $S --steps 3 --batch 8 --ckpt-dir ck >/dev/null &&
	gpu-train $S --steps 5 --batch 8 --json --init-from ck/latest >i1.json &&
	mpi 2 $S --steps 5 --batch 8 --json --tp 2 --init-from ck/latest >i2.json &&
	losses i1.json >i1 && losses i2.json >i2 &&
	test $(wc -l <i2) = 5 &&
	close_to i2 i1 1e-5 &&
	! close_to i2 one 1e-3
'

test_expect_success MPI '--eval-only under tp 2: the loss and the batches of one rank' '
	E="--eval-only --data train.bin --init-from ck/latest --seq 16 --batch 4 --eval-batches 5 --threads 1 --json" &&
	gpu-train $E >e1.json &&
	mpi 2 $E --tp 2 >e2.json &&
	jq -r "select(.event == \"eval\") | .loss" e1.json >e1 &&
	jq -r "select(.event == \"eval\") | .loss" e2.json >e2 &&
	close_to e2 e1 1e-5 &&
	jq -s -e "map(select(.event == \"eval\"))[0].batches == 5" e2.json
'

# L 2 layers, N = 4 x 16 rows, C 64, 2 micro-steps: per micro-step the
# embedding, 2 per layer forward, 2 per layer backward and the head'"'"'s
# d lnf (N x C floats each) and the cross-entropy'"'"'s 3 N floats
test_expect_success MPI 'tp_comm_bytes: the formula, (4 L + 2) N C + 3 N floats a micro-step' '
	mpi 2 $S --steps 2 --batch 4 --grad-accum 2 --tp 2 --json >v.json &&
	want=$((2 * 4 * ((4 * 2 + 2) * 64 * 64 + 3 * 64))) &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" v.json | sort -u)" = "$want" &&
	mpi 2 $S --steps 1 --batch 4 --grad-accum 2 --tp 2 --recompute layer --json >vr.json &&
	want=$((want + 2 * 4 * 2 * 2 * 64 * 64)) &&
	test "$(jq -r "select(.event == \"step\") | .tp_comm_bytes" vr.json)" = "$want" &&
	! jq -e "select(.event == \"step\") | .tp_comm_bytes" one.json
'

# the whole-model checkpoint: every tensor in the Hugging Face shape,
# and (after 10 steps) the values of the one-rank run within 1e-4
cat >st.py <<'PYEOF'
import json, struct, sys, array
def read(path):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    base = 8 + n
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        f.seek(base + v["data_offsets"][0])
        a = array.array("f")
        a.frombytes(f.read(v["data_offsets"][1] - v["data_offsets"][0]))
        out[k] = (v["shape"], a)
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
assert a["transformer.h.0.attn.c_attn.weight"][0] == [64, 192]
assert a["transformer.wte.weight"][0] == [257, 64]
worst = 0.0
for k in a:
    assert a[k][0] == b[k][0], (k, a[k][0], b[k][0])
    for x, y in zip(a[k][1], b[k][1]):
        worst = max(worst, abs(x - y) / (1 + abs(y)))
assert worst < 1e-4, worst
print("largest difference", worst)
PYEOF

test_expect_success MPI 'tp 2 checkpoints the whole model, within 1e-4 of the one-rank run' '
	gpu-train $A --batch 8 --until 10 --ckpt-dir ck1 >/dev/null &&
	mpi 2 $A --batch 8 --tp 2 --until 10 --ckpt-dir ck2 >/dev/null &&
	jq -e ".world == 1 and .tp == 2" ck2/latest/trainer.json &&
	python3 st.py ck2/latest/model.safetensors ck1/latest/model.safetensors
'

test_expect_success MPI '--resume from tp 2 on one rank = the run that never stopped' '
	cp -R ck2 ck21 &&
	gpu-train $A --batch 8 --ckpt-dir ck21 --resume >r21.json 2>err &&
	grep "resumed with --tp 1 (the checkpoint.s run: 2)" err &&
	losses r21.json >r21 && tail -n 10 one >one.tail &&
	close_to r21 one.tail 1e-5
'

test_expect_success MPI '--resume from one rank under tp 2 = the run that never stopped' '
	cp -R ck1 ck12 &&
	mpi 2 $A --batch 8 --tp 2 --ckpt-dir ck12 --resume >r12.json &&
	losses r12.json >r12 &&
	close_to r12 one.tail 1e-5
'

test_expect_success MPI '--resume from tp 2 under tp 2 x dp 2 (batch 4) = the run that never stopped' '
	cp -R ck2 ck24 &&
	mpi 4 $A --batch 4 --tp 2 --ckpt-dir ck24 --resume >r24.json &&
	losses r24.json >r24 &&
	close_to r24 one.tail 1e-5
'

test_expect_success MPI 'per-rank model states = mem-estimate --tp 2' '
	cat >cfg.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 3, "n_embd": 64, "n_head": 4,
	 "vocab_size": 257, "n_positions": 64}
	EOF
	mpi 2 --data train.bin --config cfg.json --seq 48 --batch 3 --steps 1 --threads 1 \
		--json --tp 2 >g.json &&
	mem-estimate --config cfg.json --precision f32 -b 3 -s 48 --no-dropout --tp 2 \
		--json >m.json &&
	python3 - g.json m.json <<-\PY
	import json, sys
	g = next(json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l)["memory"]
	m = json.load(open(sys.argv[2]))["bytes"]
	for k in ("parameters", "gradients", "optimizer"):
	    assert g[k] == m[k], (k, g[k], m[k])
	PY
'

# hosts faked with a UTS namespace per rank (the host is the boot id and
# the host name): a tensor group on two hosts is warned about
if unshare -u true 2>/dev/null; then
	test_set_prereq UTS
fi
hosts_by() {
	expr=$1
	shift
	timeout 300 mpirun --oversubscribe --bind-to none -np 4 sh -c \
		"exec unshare -u sh -c 'hostname h\$(($expr)); exec gpu-train \"\$@\"' sh \"\$@\"" \
		sh "$@"
}

test_expect_success MPI,UTS 'a tensor group across hosts is warned about, one per host is not' '
	hosts_by "OMPI_COMM_WORLD_RANK % 2" $S --steps 1 --batch 4 --tp 2 --json >out 2>err &&
	grep "warning: 2 of the 2 tensor groups span hosts" err &&
	grep "\"step\"" out &&
	hosts_by "OMPI_COMM_WORLD_RANK / 2" $S --steps 1 --batch 4 --tp 2 --json >out 2>err &&
	! grep "span hosts" err &&
	grep "\"step\"" out
'

# refusals: a usage error (2) on every rank, before a step or a file
test_expect_success 'what --tp does not do is refused at the command line' '
	for o in "--zero 1" "--compress bf16" "--device cuda" "--device auto" "--sample 5" \
		"--dump-data 1"; do
		test_expect_code 2 gpu-train $A --batch 8 --tp 2 $o >out 2>err &&
		grep -- "--tp 2: not with" err &&
		test_must_be_empty out || return 1
	done
'

test_expect_success 'a world that is not a multiple of --tp: refused with the numbers' '
	test_expect_code 2 gpu-train $A --batch 8 --tp 2 >out 2>err &&
	grep "groups of 2 ranks: the world.s 1 ranks do not divide" err &&
	! grep "\"step\"" out
'

test_expect_success MPI '3 ranks, --tp 2: refused by rank 0 alone, before any step' '
	test_expect_code 2 mpi 3 $A --batch 8 --tp 2 >out 2>err &&
	test $(grep -c "world.s 3 ranks do not divide" err) = 1 &&
	! grep "\"step\"" out
'

test_expect_success MPI 'heads that do not divide by --tp: refused with the numbers' '
	test_expect_code 2 mpi 2 --data train.bin --layers 1 --hidden 48 --heads 3 --seq 16 \
		--threads 1 --steps 3 --json --tp 2 >out 2>err &&
	grep "the model.s 3 heads do not divide by 2" err &&
	! grep "\"step\"" out
'

test_expect_success MPI 'a padded vocabulary that does not divide by --tp: refused with the numbers' '
	test_expect_code 2 mpi 5 --data train.bin --layers 1 --hidden 40 --heads 5 --seq 16 \
		--threads 1 --steps 3 --json --tp 5 >out 2>err &&
	grep "padded vocabulary of 384 rows (vocab_size 257" err &&
	! grep "\"step\"" out
'

test_done
