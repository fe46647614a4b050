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
equal mem-estimate --tp; ZeRO-1 at tp 2 x dp 2 (each tensor rank'"'"'s
slices cut over its data-parallel group) gives ZeRO-0'"'"'s losses,
parameters and moments bit for bit and mem-estimate'"'"'s model states, and
its checkpoint resumes in its own layout (ZeRO-0'"'"'s losses bit for
bit) and at dp 2 (ZeRO-0) within 1e-5; ZeRO-2 there gives ZeRO-1'"'"'s bits, half its
gradients and its total; a file some ranks lack is said once, naming the
first by its world rank and grid coordinates; a step'"'"'s tp_comm_bytes is the formula; a
tensor group across hosts is warned about; a rank stopped in a tp 2 x
dp 2 grid is named by its world rank, not by its number in its tensor
or data-parallel group, in the watchdogs'"'"' messages (which say the
group they waited in), the flight recorder'"'"'s dumps and its report;
layouts that cannot be run are refused before any work, with the
numbers.'
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

# MPI is initialised MPI_THREAD_SERIALIZED: with --overlap on, the
# data-parallel group's buckets (its progress thread) run beside the
# tensor group's collectives in backward (the calling thread); the shim
# counts the calls that began while another thread was inside MPI. Its
# library goes beside the trash directory (LD_PRELOAD splits at spaces).
test_expect_success MPI 'tp 2 x dp 2 with the buckets overlapped: never two threads in MPI at once, the same steps' '
	shim=$SHARNESS_TEST_DIRECTORY/t7120-mpi-serial-shim.so &&
	eval "$(sed -n "s/^MPI_\(CFLAGS\|LIBS\) := /MPI_\1=\"/p" "$GK_BUILD/config.mk" | sed "s/\$/\"/")" &&
	${CC:-cc} -shared -fPIC $MPI_CFLAGS -o "$shim" "$GK_TOP/tests/cli/mpi-serial-shim.c" $MPI_LIBS -ldl &&
	mpi 4 $S --steps 4 --json --batch 4 --tp 2 --overlap off >ov0.json &&
	MPI_SHIM_OUT=$PWD/shim \
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		timeout 300 mpirun --oversubscribe --bind-to none -np 4 -x LD_PRELOAD="$shim" \
		-x MPI_SHIM_OUT -x ASAN_OPTIONS gpu-train $S --steps 4 --json --batch 4 \
		--tp 2 --overlap on --bucket 16K >ov1.json &&
	jq -s -e "map(select(.event == \"start\"))[0] | .overlap == true" ov1.json &&
	steps ov0.json >ov0 && steps ov1.json >ov1 && test_cmp ov0 ov1 &&
	test $(cat shim.* | wc -l) = 4 &&
	awk "\$1 < 100 || \$2 != 0 { print FILENAME \": \" \$0; bad = 1 } END { exit bad }" shim.* &&
	rm -f "$shim"
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
test_expect_success MPI 'tp 2 checkpoints the whole model, within 1e-4 of the one-rank run' '
	gpu-train $A --batch 8 --until 10 --ckpt-dir ck1 >/dev/null &&
	mpi 2 $A --batch 8 --tp 2 --until 10 --ckpt-dir ck2 >/dev/null &&
	jq -e ".world == 1 and .tp == 2" ck2/latest/trainer.json &&
	stcmp ck2/latest/model.safetensors ck1/latest/model.safetensors 1e-4 \
		--shape transformer.h.0.attn.c_attn.weight=64,192 --shape transformer.wte.weight=257,64
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

# ZeRO-1 over a tensor group's data-parallel groups: each tensor rank's
# slices cut over its data-parallel group (a pipeline of one stage, the
# pieces of --pp --zero 1), the gradients reduced and the parameters
# gathered by the pieces; at 2 data-parallel ranks every sum is a sum of
# two, in either order the same: ZeRO-0's bits. One ZeRO-0 run of 4 steps
# (checkpoints at 2 and 4) is the reference of ZeRO-1 and 2 stopped at
# step 2 and of their resumes.
Z="$S --steps 4 --json --batch 4 --tp 2"

test_expect_success MPI 'tp 2 x dp 2 --zero 1 = --zero 0 bit for bit (losses, parameters, moments); each rank holds half its moments, as mem-estimate says' '
	mpi 4 $Z --ckpt-every 2 --ckpt-dir z0 >z0.json &&
	mpi 4 $Z --zero 1 --until 2 --ckpt-dir z1 >z1.json &&
	losses z0.json >z0.l && head -n 2 z0.l >z0.l2 && losses z1.json >z1.l &&
	test $(wc -l <z0.l) = 4 &&
	test_cmp z0.l2 z1.l &&
	norms z0.json | head -n 2 >z0.n && norms z1.json >z1.n &&
	close_to z1.n z0.n 1e-12 &&
	stcmp z1/latest/model.safetensors z0/step-00000002/model.safetensors 0 &&
	stcmp z1/latest/optim.safetensors z0/step-00000002/optim.safetensors 0 &&
	jq -e ".zero == 1 and .tp == 2 and .world == 2" z1/latest/trainer.json &&
	opt() { jq -s "map(select(.event == \"start\"))[0].memory.optimizer" "$1"; } &&
	test $(opt z1.json) = $(($(opt z0.json) / 2)) &&
	mem-estimate --config z1/latest/config.json --precision f32 -b 4 -s 16 --no-dropout \
		--tp 2 --dp 2 --zero 1 --json >mez.json &&
	python3 - z1.json mez.json <<-\PY
	import json, sys
	g = next(json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l)["memory"]
	m = json.load(open(sys.argv[2]))["bytes"]
	for k in ("parameters", "gradients", "optimizer"):
	    assert g[k] == m[k], (k, g[k], m[k])
	PY
'

test_expect_success MPI 'a tp 2 x dp 2 --zero 1 checkpoint resumes in its own layout (ZeRO-0'"'"'s losses bit for bit), and at dp 2 within 1e-5' '
	cp -R z1 zr && cp -R z1 zr2 &&
	mpi 4 $Z --zero 1 --ckpt-dir zr --resume >zr4.json &&
	tail -n 2 z0.l >z0.tail && losses zr4.json >zr4.l &&
	test_cmp z0.tail zr4.l &&
	norms z0.json | tail -n 2 >z0.ntail && norms zr4.json >zr4.n &&
	close_to zr4.n z0.ntail 1e-12 &&
	mpi 2 $S --steps 4 --json --batch 4 --ckpt-dir zr2 --resume >zr2.json 2>err &&
	grep "resumed with --tp 1 (the checkpoint.s run: 2)" err &&
	grep "resumed with --zero 0 (the checkpoint.s run: 1)" err &&
	losses zr2.json >zr2.l &&
	test $(wc -l <zr2.l) = 2 &&
	close_to zr2.l z0.tail 1e-5
'

test_expect_success MPI 'tp 2 x dp 2 --zero 2 = --zero 1 bit for bit (losses, parameters, moments); gradients mem-estimate --zero 2'"'"'s, the total ZeRO-1'"'"'s' '
	mpi 4 $Z --zero 2 --until 2 --bucket 4K --ckpt-dir z2 >z2.json &&
	losses z2.json >z2.l && norms z2.json >z2.n &&
	test_cmp z1.l z2.l && test_cmp z1.n z2.n &&
	stcmp z2/latest/model.safetensors z1/latest/model.safetensors 0 &&
	stcmp z2/latest/optim.safetensors z1/latest/optim.safetensors 0 &&
	mem() { jq -s "map(select(.event == \"start\"))[0].memory.$2" "$1"; } &&
	test $(mem z2.json gradients) = $(($(mem z1.json gradients) / 2)) &&
	test $(mem z2.json total) = $(mem z1.json total) &&
	mem-estimate --config z2/latest/config.json --precision f32 -b 4 -s 16 --no-dropout \
		--tp 2 --dp 2 --zero 2 --json >mez2.json &&
	states_same z2.json mez2.json
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

# named.py FILE...: the watchdogs' messages (the ranks' standard error,
# and their dumps' first failures: a rank's line may be lost when the
# launcher ends the job on another's) of a tp 2 x dp 2 grid whose world
# rank 3 stopped. Each says the group it waited in by world ranks ("among
# ranks 2 and 3"; none: the world's) and names ranks of that group only,
# by world rank: rank 3 wherever it is a member (its own number in its
# tensor and data-parallel groups is 1); a rank blocked on rank 3 in
# another group may be named too (it answers no other group's probe), and
# rank 3 itself, woken by the launcher's SIGCONT as the job ends, may
# name the rest of its group
cat >named.py <<'EOF'
import fileinput, re
said = 0
for l in fileinput.input():
    m = re.match(r"(?:gpu-train: )?allreduce(?: among ranks ([0-9, and]+))?: no progress .*?: (ranks? .*) do", l)
    if not m:
        continue
    group = {int(n) for n in re.findall(r"\d+", m.group(1))} if m.group(1) else {0, 1, 2, 3}
    assert group in ({0, 1}, {2, 3}, {0, 2}, {1, 3}, {0, 1, 2, 3}), l
    named = {int(n) for n in re.findall(r"(\d+) \(on ", m.group(2))}
    # rank 3's own, once the launcher's SIGCONT before its SIGTERM woke
    # it: the others of its group, gone
    if 3 in group and named == group - {3}:
        continue
    assert named and named <= group and (3 in named or 3 not in group), l
    said += 3 in named
assert said, "no message names rank 3"
print(said, "messages name rank 3")
EOF

# world rank 3 (dp 1, tp 1) stops in its 40th tensor-parallel allreduce:
# its group's rank 1, which every message and dump must name by its world
# rank (a split's own numbers, 0 and 1 in each group, name no process).
# Rank 3's own dumps are written by its SIGTERM handler once the
# launcher's ending of the job wakes it (SIGCONT, SIGTERM, then SIGKILL
# odls_base_sigkill_timeout s later): Open MPI's 1 s left them unwritten
# in 2 of 25 loops of this run on a loaded 2-core machine, 3 or 5 s in
# none of 26
TAG="t7120-$$"
test_expect_success MPI 'tp 2 x dp 2, world rank 3 stopped: the watchdog and the dumps name rank 3' '
	t0=$(date +%s) &&
	{
		FAULT_TAG=$TAG timeout 120 mpirun --oversubscribe --bind-to none -np 4 \
			--mca odls_base_sigkill_timeout 3 \
			-x FAULT_TAG -x GK_TEST_COMM_FAULT=stop:3:allreduce:40 gpu-train $S \
			--batch 4 --tp 2 --steps 1000 --timeout 2 --trace-dir tr --json \
			>stop.json 2>stop.err
		rc=$?
	} &&
	took=$(($(date +%s) - t0)) &&
	for p in $(pgrep -x gpu-train); do
		if tr "\0" "\n" <"/proc/$p/environ" 2>/dev/null | grep -qx "FAULT_TAG=$TAG"; then
			kill -CONT $p 2>/dev/null
			kill -9 $p 2>/dev/null
		fi
	done &&
	echo "status $rc after $took s" && cat stop.err &&
	test $rc = 1 && test $took -lt 60 &&
	# a dump per communicator and process, named by the world rank
	test -f tr/trace-c1-r00002.jsonl && test -f tr/trace-c1-r00003.jsonl &&
	head -n 1 tr/trace-c1-r00002.jsonl >h2 &&
	jq -e ".error | test(\"^allreduce among ranks 2 and 3: no progress for 2 s: rank 3 \\\\(on \")" h2 &&
	cat tr/trace-* | jq -r "select(.gk_trace) | .error // empty" >errors &&
	python3 named.py stop.err errors &&
	jq -e ".world_rank == 2 and .rank == 0 and
		.ranks == [2, 3] and .silent == [{\"rank\": 1, \"host\": .host}]" h2 &&
	gpu-train --trace-report tr >report &&
	cat report &&
	grep "^communicator 1 (mpi, the group of ranks 2 and 3): rank 3 (on [^)]*) did not answer" report &&
	grep "rank 2 (on [^)]*) failed in allreduce #40 (step [1-9][0-9]*, 16.0 KiB)" report
'

# the same stall from outside: world rank 3 stopped (SIGSTOP) while the
# grid trains; its tensor-group peer (rank 2), its data-parallel peer
# (rank 1) or the world's collectives wait on it, and each watchdog names
# it by its world rank, whichever communicator it waits in
test_expect_success MPI 'tp 2 x dp 2, world rank 3 stopped by SIGSTOP: the watchdogs name it by its world rank' '
	rm -rf pid.* sig.json trs &&
	{
		timeout 120 mpirun --oversubscribe --bind-to none -np 4 sh -c \
			"echo \$\$ >pid.\$OMPI_COMM_WORLD_RANK; exec gpu-train \"\$@\"" sh $S \
			--batch 4 --tp 2 --steps 100000 --timeout 2 --trace-dir trs --json \
			>sig.json 2>sig.err &
	} &&
	run=$! &&
	test_wait_for 60 "a step of the grid" grep -q "\"event\":\"step\"" sig.json &&
	kill -STOP $(cat pid.3) &&
	{ wait $run; rc=$?; } &&
	{ kill -CONT $(cat pid.3) 2>/dev/null; kill -9 $(cat pid.3) 2>/dev/null; true; } &&
	echo "status $rc" && cat sig.err &&
	test $rc = 1 &&
	cat trs/trace-* | jq -r "select(.gk_trace) | .error // empty" >errors &&
	python3 named.py sig.err errors
'

# a failure the ranks agree on (here a --config that ranks 1 and 3 lack)
# is said once, by the first failing rank, with its coordinates
test_expect_success MPI 'tp 2 x dp 2, a file two ranks lack: said once, naming the first by its world rank and coordinates' '
	cat >cfg0.json <<-\EOF &&
	{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
	 "vocab_size": 257, "n_positions": 33}
	EOF
	cp cfg0.json cfg2.json &&
	test_expect_code 1 timeout 120 mpirun --oversubscribe --bind-to none -np 4 sh -c \
		"exec gpu-train --data train.bin --config cfg\$OMPI_COMM_WORLD_RANK.json --seq 16 --steps 1 --tp 2" 2>err &&
	cat err &&
	test $(grep -c "^gpu-train: open .cfg1.json.: No such file or directory (2 of 4 ranks; the first: rank 1 (dp 0, pp 0, tp 1))$" err) = 1 &&
	test $(grep -c "^gpu-train:" err) = 1 &&
	! grep -q MPI_ABORT err
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
