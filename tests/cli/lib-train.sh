# lib-train.sh - helpers for the gpu-train tests (sourced after lib.sh).
#
#   train_data             writes train.bin (llm.c format, bytes of the
#                          project's sources) in the trash directory
#   TINY                   a small model and step shape for fast runs
#   losses FILE            the losses of the step lines of a --json log
#   close_to A B TOL       every line of A within TOL (relative) of B's
#   stcmp A B TOL [...]    two safetensors files' tensors within TOL
#                          (tests/cli/stcmp.py: its options and metric)
#   mpi N ARGS...          gpu-train under mpirun with N ranks
#   feedback_close A B     every rank's error feedback (feedback-rank-*)
#                          in checkpoint directory A within 1e-6 of B's
#                          but for at most 1 element in 1000 (a device's
#                          fp32 last bits flip a bf16 rounding now and
#                          then), and B's not all zero
#   start_config LOG OUT   the model of a --json log's start line as a
#                          Hugging Face config.json (for mem-estimate)
#   widen SRC DST          checkpoint SRC's model with its matrices times
#                          25 as a directory DST for --init-from (see there)
#   sample_tokens LOG      the tokens of a --json log's sample line
#   states_same LOG EST    the start line's parameters, gradients and
#                          optimizer of a --json log those of mem-estimate
#                          --json's EST
#   host_same LOG EST      the start line's host_memory of a --json log
#                          term by term the host terms of mem-estimate
#                          --json's EST (host_ram, a node's, aside)

TINY="--layers 2 --hidden 32 --heads 2 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2"

train_data() {
	python3 - "$GK_TOP" <<-'EOF'
	import struct, sys, glob
	b = b"".join(open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/lib/core/*.c")))
	t = list(b[:60000])
	h = [20240520, 1, len(t)] + [0] * 253
	open("train.bin", "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
	v = list(b"".join(open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/lib/st/*.c")))[:4000])
	open("val.bin", "wb").write(struct.pack("<%dH" % len(v), *v))
	EOF
}

stcmp() {
	python3 "$GK_TOP/tests/cli/stcmp.py" "$@"
}

losses() {
	jq -r 'select(.event == "step") | .loss' "$1"
}

# each step's loss and gradient norm of a --json log, a line each
steps() {
	jq -c 'select(.event == "step") | [.loss, .grad_norm]' "$1"
}

# runs $1 and $2 (logs $1.json and $2.json, checkpoints under $1/ and
# $2/): the same losses and norms, and byte-identical safetensors files,
# the optimizer's among them
same_run() {
	steps "$1.json" >"$1.steps" && steps "$2.json" >"$2.steps" &&
	test_cmp "$1.steps" "$2.steps" &&
	test -s "$1.steps" &&
	for f in "$1"/latest/*.safetensors; do
		cmp "$f" "$2/latest/${f##*/}" || return 1
	done &&
	ls "$1"/latest/optim*.safetensors >/dev/null
}

close_to() {
	python3 - "$1" "$2" "$3" <<-'EOF'
	import sys
	a = [float(x) for x in open(sys.argv[1])]
	b = [float(x) for x in open(sys.argv[2])]
	tol = float(sys.argv[3])
	if len(a) != len(b) or not a:
	    sys.exit("different lengths: %d %d" % (len(a), len(b)))
	bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if abs(x - y) > tol * max(1.0, abs(y))]
	if bad:
	    sys.exit("outside %g: %r" % (tol, bad[:5]))
	EOF
}

start_config() {
	python3 - "$1" "$2" <<-'EOF'
	import json, sys
	st = next(json.loads(l) for l in open(sys.argv[1]) if '"start"' in l)
	json.dump({"model_type": "gpt2", "n_layer": st["layers"], "n_embd": st["hidden"],
	           "n_head": st["heads"], "vocab_size": st["vocab"],
	           "n_positions": st["positions"]}, open(sys.argv[2], "w"))
	EOF
}

feedback_close() {
	python3 - "$1" "$2" <<-'EOF'
	import array, glob, json, os, struct, sys
	def read(p):
	    with open(p, "rb") as f:
	        n = struct.unpack("<Q", f.read(8))[0]
	        json.loads(f.read(n))
	        a = array.array("f")
	        a.frombytes(f.read())
	    return a
	names = sorted(os.path.basename(p) for p in glob.glob(sys.argv[2] + "/feedback-rank-*"))
	if not names:
	    sys.exit("no feedback in " + sys.argv[2])
	for name in names:
	    a, b = read(sys.argv[1] + "/" + name), read(sys.argv[2] + "/" + name)
	    off = sum(1 for x, y in zip(a, b) if abs(x - y) > 1e-6 * max(1.0, abs(y)))
	    if len(a) != len(b) or off * 1000 > len(b) or not any(b):
	        sys.exit("%s: %d and %d elements, %d apart" % (name, len(a), len(b), off))
	EOF
}

# A random model of wide weights: the seeded initialisation's matrices
# (std 0.02) times 25, as GPT-2 with initializer_range 0.5, so that every
# head and every vocabulary slice moves the sampled bytes (a model trained
# a few steps on bytes samples nearly the same text whatever its heads do).
widen() {
	python3 - "$1" "$2" <<-'EOF'
	import array, json, os, shutil, struct, sys
	src, dst = sys.argv[1], sys.argv[2]
	b = open(os.path.join(src, "model.safetensors"), "rb").read()
	n = struct.unpack("<Q", b[:8])[0]
	h = json.loads(b[8:8 + n])
	data = bytearray(b[8 + n:])
	for name, t in h.items():
	    if name != "__metadata__" and len(t["shape"]) == 2:
	        lo, hi = t["data_offsets"]
	        data[lo:hi] = array.array("f", (x * 25 for x in array.array("f", data[lo:hi]))).tobytes()
	os.makedirs(dst)
	shutil.copy(os.path.join(src, "config.json"), dst)
	open(os.path.join(dst, "model.safetensors"), "wb").write(b[:8 + n] + bytes(data))
	EOF
}

sample_tokens() {
	jq -c 'select(.event == "sample") | .tokens' "$1"
}

states_same() {
	for k in parameters gradients optimizer; do
		test "$(jq -s "map(select(.event == \"start\"))[0].memory.$k" "$1")" = \
			"$(jq ".bytes.$k" "$2")" || {
			echo "$k: $1 says $(jq -s "map(select(.event == \"start\"))[0].memory.$k" "$1"), $2 $(jq ".bytes.$k" "$2")"
			return 1
		}
	done
}

host_same() {
	jq -s -c 'map(select(.event == "start"))[0].host_memory |
		with_entries(select(.key != "total"))' "$1" >"$1.host" &&
	jq -c '.bytes | with_entries(select(.key | startswith("host_")) |
		select(.key != "host_ram"))' "$2" >"$2.host" &&
	test_cmp "$2.host" "$1.host"
}

mpi() {
	n=$1
	shift
	timeout 300 mpirun --oversubscribe --bind-to none -np "$n" gpu-train "$@"
}

if command -v mpirun >/dev/null 2>&1; then
	test_set_prereq MPI
fi
