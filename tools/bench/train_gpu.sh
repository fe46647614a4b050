#!/bin/sh
# train_gpu.sh - gpu-train --device cuda on one GPU against PyTorch on the
# same GPU: GPT-2 124M (12 layers, d 768, 12 heads, vocabulary 50257),
# T 1024, batch $BATCH, bf16 with fp32 master weights (PyTorch:
# torch.autocast and the fused AdamW), AdamW 0.9/0.95 wd 0.1, constant lr,
# no clipping, random tokens.
#
# Prints the median over the timed steps (the first $WARMUP are dropped) of
#   tok/s   tokens per second, and the ratio gpu-train / PyTorch
#   MFU     gpu-train's model FLOP/s (its "gflops": gk_nn_flops, forward
#           and backward of the matmuls and attention) over the GPU's
#           dense bf16 peak: 989 TFLOP/s for H100 and H200 (SXM), or
#           PEAK_TFLOPS from the environment for another GPU
# then tools/bench/roofline.sh's table: per kernel, the bytes and FLOPs of
# a step from the shapes and the least time each can take at the GPU's
# peaks, and the measured step as a fraction of the roofline's time.
# BATCH defaults to the largest of 64, 48, 32, 16 and 8 whose memory
# mem-estimate puts within 90 % of the GPU's (its bf16 with --grad-f32
# counts 2 bytes a parameter more than gpu-train keeps: gpu-train(1)).
# Without a GPU (nvidia-smi lists none) it says so and exits 0, as the
# other drivers do without their anchors. Not yet run on a GPU.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${GK_BUILD:-build}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) || gpu=
if [ -z "$gpu" ]; then
	echo "train_gpu.sh: no GPU (nvidia-smi lists none); skipped"
	exit 0
fi
case ${PEAK_TFLOPS:-} in
"") case $gpu in *H100* | *H200*) peak=989 ;; *) peak= ;; esac ;;
*) peak=$PEAK_TFLOPS ;;
esac
if [ -z "${BATCH:-}" ]; then
	mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
	BATCH=8
	for b in 64 48 32 16; do
		need=$("$top/bin/mem-estimate" --layers 12 --hidden 768 --heads 12 --vocab 50257 \
			--positions 1024 -s 1024 -b $b --precision bf16 --grad-f32 --attn eager \
			--json | jq .total)
		if [ "$need" -le $((mib * 1048576 / 10 * 9)) ]; then
			BATCH=$b
			break
		fi
	done
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gk-train-gpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# 4M random GPT-2 token ids, llm.c's format (magic 20240520, version 1).
python3 - "$tmp/train.bin" <<'PY'
import random, struct, sys
random.seed(1)
n = 1 << 22
h = [20240520, 1, n] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *h))
    f.write(struct.pack("<%dH" % n, *(random.randrange(50257) for _ in range(n))))
PY

# median of a column of numbers
med() {
	sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'
}

"$top/bin/gpu-train" --device cuda --precision bf16 --data "$tmp/train.bin" \
	--layers 12 --hidden 768 --heads 12 --vocab 50257 --positions 1024 --seq 1024 \
	--batch "$BATCH" --steps "$STEPS" --lr 6e-4 --schedule constant --clip 0 \
	--json >"$tmp/ours.json"
steps() {
	jq -r "select(.event == \"step\" and .step > $WARMUP) | .$1" "$tmp/ours.json" | med
}
ours=$(steps tokens_per_s)
gflops=$(steps gflops)

py=$("$top/scripts/test-venv" 2>/dev/null) || py=
theirs=n/a
if [ -n "$py" ] && "$py" -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
	theirs=$("$py" "$top/tools/bench/nn_torch.py" 12 768 12 1024 "$BATCH" 50257 1 "$STEPS" cuda bf16 |
		sed -n 's/^tok_s=\([0-9.]*\).*/\1/p')
fi

echo "train_gpu bench: $gpu, GPT-2 124M, T 1024, batch $BATCH, bf16; median of steps $((WARMUP + 1))-$STEPS"
printf '%-28s %12s\n' "gpu-train tok/s" "$ours" "PyTorch tok/s" "$theirs"
awk -v o="$ours" -v t="$theirs" -v g="$gflops" -v p="$peak" 'BEGIN {
	if (t != "n/a" && t > 0)
		printf "%-28s %12.2f\n", "ratio", o / t
	if (p != "")
		printf "%-28s %11.1f %%  (%.0f of %d TFLOP/s)\n", "MFU", g / (p * 1000) * 100, g / 1000, p
	else
		printf "%-28s %12s  (set PEAK_TFLOPS)\n", "MFU", "n/a"
}'

# the step against its roofline, kernel by kernel (tools/bench/roofline.sh:
# bytes and FLOPs from the shapes; its GEMMs checked against the CUDA
# emulation's manifest by t7109)
step_ms=$(awk -v o="$ours" -v b="$BATCH" 'BEGIN { if (o > 0) printf "%.3f", b * 1024 / o * 1000 }')
BATCH=$BATCH SEQ=1024 GPU="$gpu" STEP_MS=$step_ms PEAK_TFLOPS=${peak:-989} "$top/tools/bench/roofline.sh"
