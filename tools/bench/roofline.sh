#!/bin/sh
# roofline.sh - what one training step of the CUDA backend moves and
# computes, kernel by kernel, from the model's shapes, and the least time
# each can take on a GPU: max(FLOPs / peak, bytes / bandwidth).
#
#   roofline.sh [--manifest FILE]
#
# Shapes from the environment: LAYERS HIDDEN HEADS VOCAB SEQ BATCH
# (GPT-2 124M by default: 12 layers, d 768, 12 heads, vocabulary 50257
# padded to 50304, a multiple of 128 as lib/nn/gpt.c pads it, T 1024,
# batch 8), bf16 activations, fp32 master weights and gradients of the
# weights (as gpu-train --precision bf16 keeps them), no recompute. Peaks: PEAK_TFLOPS
# (dense bf16) and PEAK_GBS (memory bandwidth), by default those of an
# H100 SXM (989, 3350) or, with GPU naming an H200, 989 and 4800.
# STEP_MS, a measured step (tools/bench/train_gpu.sh passes its median),
# adds the fraction of the roofline's time the step achieved.
#
# The GEMM rows are the cuBLASLt calls the backend issues, as the CUDA
# emulation's manifest lists them (m n k in cuBLASLt's column-major
# terms); --manifest FILE, a CUEMU_GEMM_LOG of one step (gpu-train
# --steps 1 on the emulation at the same shapes), is checked to
# hold the same calls, and a difference fails. The other rows are the
# kernels of lib/nn modelled from their loops: bytes of the tensors they
# read and write once each, FLOPs of their arithmetic (the attention's
# causal score products; the rest is memory-bound by far).
#
# The MLP's GELU is in the matmuls' epilogues (gpu-train's default,
# GK_CUDA_GELU=epilogue): c_fc's forward (GELU_AUX_BIAS) also writes the
# pre-activation, c_proj's input gradient (DGELU) also reads it, and
# there is no GELU kernel. GELU=kernel models GK_CUDA_GELU=kernel: plain
# c_fc and c_proj GEMMs and gelu.cu's two kernels.
set -eu
manifest=
case ${1:-} in
--manifest) manifest=${2:?roofline.sh: --manifest needs a file}; shift 2 ;;
"") ;;
*) echo "roofline.sh: unknown argument '$1' (usage: roofline.sh [--manifest FILE])" >&2; exit 2 ;;
esac
if [ -n "$manifest" ] && [ ! -r "$manifest" ]; then
	echo "roofline.sh: cannot read the manifest '$manifest'" >&2
	exit 2
fi
L=${LAYERS:-12} C=${HIDDEN:-768} NH=${HEADS:-12} V=${VOCAB:-50257} T=${SEQ:-1024} B=${BATCH:-8}
case ${GPU:-} in *H200*) gbs=4800 ;; *) gbs=3350 ;; esac
PEAK_TFLOPS=${PEAK_TFLOPS:-989} PEAK_GBS=${PEAK_GBS:-$gbs}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gk-roofline.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

case ${GELU:-epilogue} in
epilogue) epi=1 ;;
kernel) epi=0 ;;
*) echo "roofline.sh: GELU '$GELU': epilogue or kernel" >&2; exit 2 ;;
esac

# One line per GEMM of a step: m n k D-type beta bias epilogue.
awk -v L="$L" -v C="$C" -v V="$V" -v T="$T" -v B="$B" -v epi="$epi" 'BEGIN {
	N = B * T; Vp = int((V + 127) / 128) * 128
	# the linear layers: in, out, bias, beta (the residual added in place)
	nl = split("qkv attproj fc fcproj", name, " ")
	ic["qkv"] = C; oc["qkv"] = 3 * C; be["qkv"] = 0
	ic["attproj"] = C; oc["attproj"] = C; be["attproj"] = 1
	ic["fc"] = C; oc["fc"] = 4 * C; be["fc"] = 0
	ic["fcproj"] = 4 * C; oc["fcproj"] = C; be["fcproj"] = 1
	# the epilogues: BIAS, and with epi c_fc GELU_AUX_BIAS, c_proj DGELU
	for (x in oc) { ef[x] = "BIAS"; eb[x] = "DEFAULT" }
	if (epi) { ef["fc"] = "GELU_AUX_BIAS"; eb["fcproj"] = "DGELU" }
	for (l = 0; l < L; l++)
		for (i = 1; i <= nl; i++) {
			x = name[i]
			printf "gemm.fwd.%s %d %d %d 16BF %d 1 %s\n", x, oc[x], N, ic[x], be[x], ef[x]
			printf "gemm.bwd.%s.dinp %d %d %d 16BF 0 0 %s\n", x, ic[x], N, oc[x], eb[x]
			printf "gemm.bwd.%s.dw %d %d %d 32F 1 0 DEFAULT\n", x, oc[x], ic[x], N
		}
	printf "gemm.fwd.head %d %d %d 16BF 0 0 DEFAULT\n", Vp, N, C
	printf "gemm.bwd.head.dinp %d %d %d 16BF 0 0 DEFAULT\n", C, N, Vp
	printf "gemm.bwd.head.dw %d %d %d 32F 1 0 DEFAULT\n", C, Vp, N
}' >"$tmp/gemms"

if [ -n "$manifest" ]; then
	# the manifest: "m M n N k K transa . transb . batch . A . D T compute . bias X beta Y
	# epilogue E"
	awk '{ printf "%s %s %s %s %d %s %s\n", $2, $4, $6, $16, ($22 != 0), $20, $24 }' "$manifest" |
		sort >"$tmp/got"
	awk '{ print $2, $3, $4, $5, $6, $7, $8 }' "$tmp/gemms" | sort >"$tmp/want"
	if ! cmp -s "$tmp/got" "$tmp/want"; then
		echo "roofline.sh: the manifest's GEMMs are not the modelled ones (m n k D beta bias epilogue; < manifest, > model):" >&2
		diff "$tmp/got" "$tmp/want" | grep '^[<>]' | head -n 20 >&2
		exit 1
	fi
	echo "manifest: $(wc -l <"$tmp/got" | tr -d ' ') GEMMs, the modelled ones"
fi

awk -v L="$L" -v C="$C" -v NH="$NH" -v V="$V" -v T="$T" -v B="$B" \
	-v pf="$PEAK_TFLOPS" -v pb="$PEAK_GBS" -v step="${STEP_MS:-}" -v epi="$epi" '
function row(k, calls, flops, bytes) {
	if (!(k in n)) order[++nk] = k
	n[k] += calls; F[k] += calls * flops; M[k] += calls * bytes
}
# the GEMM rows
FNR == NR {
	m = $2; nn = $3; kk = $4; ed = $5 == "32F" ? 4 : 2
	by = (m * kk + kk * nn) * 2 + m * nn * ed * (1 + $6) + $7 * m * 2
	# the GELU epilogues: the aux matrix (shape and type of D) written
	# or read, and the GELU or its derivative per element
	aux = $8 ~ /GELU/
	by += aux * m * nn * ed
	k = $1; sub(/\.(qkv|attproj|fc|fcproj)/, "", k)
	if (aux) k = k ($8 ~ /^D/ ? ".dgelu" : ".gelu")
	row(k, 1, 2 * m * nn * kk + aux * ($8 ~ /^D/ ? 30 : 20) * m * nn, by)
	next
}
END {
	N = B * T; Vp = int((V + 127) / 128) * 128; hs = C / NH; es = 2
	P = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
	# attention: causal, so half of the T x T scores; backward recomputes
	# them and takes 7 score products to forward 2 (doc/DESIGN.md), on
	# the tensor cores (bf16, head size a multiple of 16: the bf16 peak
	# applies; the CUDA-core kernels of other head sizes are slower)
	att = 2 * B * NH * T * T * hs
	row("flash.fwd", L, att, 4 * N * C * es + 4 * N * NH)
	row("flash.bwd", L, 3.5 * att, 8 * N * C * es + 8 * N * NH)
	row("encoder.fwd", 1, N * C, 4 * N + 2 * N * C * es + T * C * es)
	row("encoder.bwd", 1, N * C, N * C * es + 2 * N * C * 4)
	row("layernorm.fwd", 2 * L + 1, 8 * N * C, 2 * N * C * es + 8 * N)
	row("layernorm.bwd", 2 * L + 1, 12 * N * C, 3 * N * C * es + 8 * N + 2 * C * 4)
	if (!epi) {
		row("gelu.fwd", L, 20 * 4 * N * C, 2 * 4 * N * C * es)
		row("gelu.bwd", L, 30 * 4 * N * C, 3 * 4 * N * C * es)
	}
	row("colsum", L, 3 * N * C, 3 * N * C * es + 3 * C * 4 * 2)
	row("colsum", L, N * C, N * C * es + C * 4 * 2)
	row("colsum", L, 4 * N * C, 4 * N * C * es + 4 * C * 4 * 2)
	row("colsum", L, N * C, N * C * es + C * 4 * 2)
	# the classifier, one kernel (xent_fused): a row read for its
	# logsumexp and loss, then read again for dlogits written over it;
	# the second read, of a row the block has just read (100 KB at the
	# vocabulary of GPT-2), counted as served by L2, as the
	# fused_classifier of llm.c counts on (from memory: N * Vp * es more)
	row("classifier", 1, 10 * N * V, 2 * N * Vp * es + 12 * N)
	row("adamw", 1, 12 * P, 30 * P)
	printf "roofline: L %d C %d NH %d V %d (rows of %d) T %d B %d, bf16; %g TFLOP/s, %g GB/s\n",
		L, C, NH, V, Vp, T, B, pf, pb
	printf "%-20s %6s %11s %11s %9s %11s %s\n", "kernel", "calls", "GFLOP", "MB", "FLOP/B",
		"bound us", "by"
	for (i = 1; i <= nk; i++) {
		k = order[i]
		tf = F[k] / (pf * 1e12); tb = M[k] / (pb * 1e9)
		t = tf > tb ? tf : tb; tot += t; tf_all += F[k]; tb_all += M[k]
		printf "%-20s %6d %11.2f %11.1f %9.1f %11.1f %s\n", k, n[k], F[k] / 1e9, M[k] / 1e6,
			F[k] / M[k], t * 1e6, (tf > tb ? "compute" : "memory")
	}
	printf "%-20s %6s %11.2f %11.1f %9.1f %11.1f\n", "step", "", tf_all / 1e9, tb_all / 1e6,
		tf_all / tb_all, tot * 1e6
	printf "roofline step: %.2f ms, MFU at most %.1f %% (these FLOPs over the peak)\n",
		tot * 1e3, tf_all / (pf * 1e12) / tot * 100
	if (step != "")
		printf "measured step: %.2f ms, %.1f %% of the roofline'"'"'s time, MFU %.1f %%\n",
			step, tot * 1e3 / step * 100, tf_all / (pf * 1e12) / (step / 1e3) * 100
}' "$tmp/gemms" /dev/null
