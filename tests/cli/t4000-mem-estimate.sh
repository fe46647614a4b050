#!/bin/sh
test_description='mem-estimate: outputs, units, explain, fit, and bad input

Corrupt and invalid inputs are named fixtures in tests/data/mem/bad/ with
the exact message expected (NAME.err); unreadable input exits 1, bad
usage exits 2.'
. "$(dirname "$0")/lib.sh"

# The JSON checks need only the standard library: the system python3 will do.

data="$GK_TOP/tests/data/mem"

for f in "$data"/bad/*.json "$data"/bad/*.safetensors; do
	name=$(basename "$f")
	case $name in
	*.index.json) opt=--from ;;
	*.json) opt=--config ;;
	*) opt=--from ;;
	esac
	test_expect_success "refuses bad/$name with its message, exit 1" "
		(cd '$data' && test_expect_code 1 mem-estimate $opt 'bad/$name' >\"\$OLDPWD/out\" 2>\"\$OLDPWD/err\") &&
		test_must_be_empty out &&
		test_cmp '$data/bad/${name%.*}.err' err
	"
done

test_expect_success 'unreadable config exits 1' '
	test_expect_code 1 mem-estimate --config no-such.json 2>err &&
	grep "^mem-estimate: open .no-such.json.: No such file" err
'

usage_case() {
	test_expect_success "usage error: $1" "
		test_expect_code 2 mem-estimate $2 >out 2>err &&
		test_must_be_empty out &&
		grep -F -e \"$3\" err &&
		grep -i usage err
	"
}
usage_case 'no model' '--zero 1' 'no model'
usage_case 'tp not dividing heads' "--config $data/llama-2-7b.json --tp 3" \
	"tensor-parallel degree '3': must divide the 32 attention heads"
usage_case 'more stages than layers' "--config $data/gpt2.json --pp 13" \
	"pipeline-parallel degree '13': more stages than the 12 layers"
usage_case 'serving: pp not dividing layers' "--config $data/gpt2.json --infer --pp 5" \
	"pipeline-parallel degree '5': must divide the 12 layers"
usage_case 'zero stage 4' '--params 7B --zero 4' '--zero'
usage_case 'zero parameters' '--params 0' "--params '0'"
usage_case 'negative parameters' '--params -7B' "--params '-7B'"
usage_case 'bad precision' '--params 7B --precision f8' "--precision 'f8'"
usage_case 'zero sequence' '--params 7B --seq 0' '--seq'
usage_case 'unknown GPU' '--params 7B --gpu Z80' "--gpu 'Z80'"
usage_case 'config and flags' "--config $data/gpt2.json --layers 2" 'both describe'
usage_case 'absurd activations' "--config $data/gpt2.json --seq 100000000 -b 16000000" 'exceeds 4 EB'
usage_case 'heads not dividing hidden' '--layers 2 --hidden 100 --heads 3' 'must divide the hidden size 100'
usage_case 'fit a GPU of 0 bytes' "--config $data/gpt2.json --fit 0" "--fit '0'"
usage_case 'fit a GPU of 0 GiB' "--config $data/gpt2.json --fit 0GiB" "--fit '0GiB'"
usage_case 'config and --untied' "--config $data/gpt2.json --untied" 'both describe'
usage_case 'unknown recomputation' '--params 7B --recompute some' "--recompute 'some'"
usage_case 'unknown pipeline schedule' "--config $data/gpt2.json --pp 2 --pp-schedule zb" \
	"--pp-schedule 'zb'"
usage_case 'interleaved without chunks' \
	"--config $data/gpt2.json --pp 2 --grad-accum 2 --pp-schedule interleaved" \
	'give --pp-chunks V'
usage_case 'interleaved without stages' \
	"--config $data/gpt2.json --pp-schedule interleaved --pp-chunks 2" 'give --pp N'
usage_case 'chunks without the interleaved schedule' "--config $data/gpt2.json --pp 2 --pp-chunks 2" \
	'the chunks of --pp-schedule interleaved'
usage_case 'interleaved micro-batches fewer than the stages' \
	"--config $data/gpt2.json --pp 3 --pp-schedule interleaved --pp-chunks 2 --grad-accum 2" \
	'--grad-accum 2 is fewer micro-batches than stages (--grad-accum 3 or more)'
usage_case 'layers not dividing into the chunks' \
	"--config $data/gpt2.json --pp 4 --pp-schedule interleaved --pp-chunks 2 --grad-accum 4" \
	'the 12 layers do not divide into 8 chunks'
usage_case 'a stage past the pipeline' "--config $data/gpt2.json --pp 2 --pp-stage 2" \
	'--pp-stage 2: not one of the 2 stages (0 to 1)'
usage_case 'fit with a schedule' "--config $data/gpt2.json --pp 2 --pp-schedule gpipe --fit 80GiB" \
	'drop --pp-schedule and --pp-stage'

# GPT-2 small (12 layers), 4 stages, 8 micro-batches, bf16 with dropout:
# 1F1B keeps min(p - k, m) micro-batches of 3 layers on stage k, GPipe
# all 8, the interleaved schedule of 3 chunks min(m V, w + 1) chunks of 1
# layer, w = 2 (p - 1 - k) + (V - 1) p: 15 on stage 0, 9 on stage 3.
# Stage 0 so holds 15 layers' worth, 1 + (p-1)/(pV) = 5/4 of 1F1B's 12
# (Korthikanti et al. 2022 sec. 4.2.3); the embedding's dropout mask one
# a set in flight, the last stage's logits and final norm one a set (the
# last stage is then the more loaded, the one reported by default).
# With 10 micro-batches the interleaved schedule takes them in groups of
# N = 5 (4 would leave a last group of 2, fewer than the stages:
# Megatron-LM's rule), w = 2 (p - 1 - k) + (V - 1) N: 17 on stage 0, 11 on
# stage 3
# 12 layers over 5 stages, as gpu-train runs them: 3, 3, 2, 2 and 2 (the
# first 12 mod 5 stages one more); a block of GPT-2 small holds 12 h^2 +
# 13 h parameters, and a stage's activations are its layers'
test_expect_success 'pp 5 over 12 layers: 3 layers on stage 1, 2 on stage 2' '
	G="--config $data/gpt2.json -b 2 -s 512 --pp 5 --json" &&
	mem-estimate $G --pp-stage 1 >s1.json &&
	mem-estimate $G --pp-stage 2 >s2.json &&
	blk=$((12 * 768 * 768 + 13 * 768)) &&
	test $(jq .stage_params s1.json) = $((3 * blk)) &&
	test $(jq .stage_params s2.json) = $((2 * blk)) &&
	test $(($(jq .bytes.activations s1.json) * 2)) = $(($(jq .bytes.activations s2.json) * 3))
'

test_expect_success 'the schedules'"'"' activations in flight, stage 0 and the last' '
	T="--config $data/gpt2.json -b 2 -s 512 --pp 4 --grad-accum 8" && M="$T --json" &&
	I="--pp-schedule interleaved --pp-chunks 3" &&
	for k in 0 3; do
		mem-estimate $M --pp-stage $k >f$k.json &&
		mem-estimate $M --pp-stage $k --pp-schedule gpipe >g$k.json &&
		mem-estimate $M --pp-stage $k $I >i$k.json &&
		mem-estimate $M --pp-stage $k $I --grad-accum 10 >j$k.json || return 1
	done &&
	mem-estimate $M --pp-schedule 1f1b >d.json &&
	mem-estimate $T $I --pp-stage 0 >text &&
	mem-estimate $M $I >di.json &&
	mem-estimate --config $data/gpt2.json -b 2 -s 512 --grad-accum 8 --pp-schedule gpipe \
		--json >one.json &&
	grep "pipeline stage 0 of 4 .*interleaved, 15 micro-batch chunks in flight" text &&
	python3 - <<-\PY
	import json
	J = lambda p: json.load(open(p))
	s, b, h, V, e = 512, 2, 768, 50257, 2
	layer = s * b * h * 34 + 5 * 12 * s * s * b  # Table 2, bytes at 2-byte activations
	want = {"f0": (4, 3), "f3": (1, 3), "g0": (8, 3), "g3": (8, 3), "i0": (15, 1), "i3": (9, 1),
	        "j0": (17, 1), "j3": (11, 1)}
	for n, (m, l) in want.items():
	    x = J(n + ".json")
	    assert x["inflight"] == m and x["stage"] == int(n[1]), (n, x["inflight"])
	    assert x["bytes"]["activations"] == m * l * layer, (n, x["bytes"]["activations"])
	    if n[1] == "0":
	        assert x["bytes"]["embedding_dropout"] == m * s * b * h, n
	    else:
	        assert x["bytes"]["logits"] == m * (e + 4) * s * b * V, n
	        assert x["bytes"]["final_norm"] == m * 2 * e * s * b * h, n
	    assert x["run"]["pp_schedule"] == {"f": "1f1b", "g": "gpipe", "i": "interleaved",
	                                       "j": "interleaved"}[n[0]]
	assert J("i0.json")["bytes"]["activations"] * 4 == J("f0.json")["bytes"]["activations"] * 5
	# the default is 1F1B, and without --pp-stage the more loaded stage
	d = J("d.json")
	most = lambda a, b: max(J(a), J(b), key=lambda x: x["total"])["bytes"]
	assert d["run"]["pp_chunks"] == 1 and d["bytes"] == most("f0.json", "f3.json")
	assert J("di.json")["bytes"] == most("i0.json", "i3.json")
	# without a pipeline no schedule: one micro-batch of 12 layers at a time
	assert J("one.json")["inflight"] == 1
	assert J("one.json")["bytes"]["activations"] == 12 * layer
	PY
'

test_expect_success 'JSON: every part in bytes, parts add up to the total' '
	mem-estimate --config "$data/gpt2.json" -b 4 --zero 1 --dp 8 --json >out.json &&
	python3 -c "
import json
j = json.load(open(\"out.json\"))
assert j[\"units\"] == \"bytes\" and j[\"model\"][\"params\"] == 124439808
b = j[\"bytes\"]
# the host terms of gpu-train on GPUs (host RAM of each rank): not the GPU total
host = sum(v for k, v in b.items() if k.startswith(\"host_\"))
assert host and host == j[\"host_per_rank\"], (host, j)
assert sum(b.values()) - host == j[\"total\"], (sum(b.values()), j[\"total\"])
P = 124439808
assert b[\"parameters\"] == 2 * P and b[\"gradients\"] == 2 * P
assert abs(b[\"optimizer\"] - 12 * P / 8) <= 1
s, bb, h, a, L, V = 1024, 4, 768, 12, 12, 50257
assert abs(b[\"activations\"] - L * s * bb * h * (34 + 5 * a * s / h)) <= 1
assert b[\"logits\"] == 6 * s * bb * V
"
'

# gpu-train'"'"'s host memory on GPUs, each rank'"'"'s (the trainer'"'"'s own
# accounting of it is t7119'"'"'s): GPT-2 small'"'"'s flat buffer F, its
# vocabulary padded to 50304 rows, rounded up to 5 ranks under ZeRO 1 to
# 3 (124475904 is not a multiple of 5), then to 64 bytes (ZeRO-3'"'"'s
# parameters: a rank'"'"'s range R of it alone, so rounded); the pinned
# staging 64 MiB, or the flat buffer'"'"'s 4F bytes if fewer (width 256 and
# 4 layers: 4F just under 64 MiB; 5 layers: just over). Only where the
# device terms are gpu-train'"'"'s: 2 or more ranks, no --tp, a GPT-2.
test_expect_success 'gpu-train on GPUs: each rank'"'"'s host terms from the shape (1 rank, dp, tp), not in the GPU total' '
	for z in 0 1 2 3; do
		mem-estimate --config "$data/gpt2.json" --dp 5 --zero $z --json >h$z.json &&
		mem-estimate --config "$data/gpt2.json" --dp 5 --zero $z --offload optimizer \
			--json >ho$z.json || return 1
	done &&
	mem-estimate --config "$data/gpt2.json" --dp 5 --zero 3 >h3.txt &&
	mem-estimate --config "$data/gpt2.json" --zero 3 --json >one.json &&
	mem-estimate --config "$data/gpt2.json" --dp 4 --tp 2 --zero 1 --json >tp.json &&
	mem-estimate --config "$data/llama-2-7b.json" --dp 4 --zero 3 --json >ll.json &&
	for l in 4 5; do
		sed -e "s/\"n_embd\": 768/\"n_embd\": 256/" -e "s/\"n_head\": 12/\"n_head\": 4/" \
		    -e "s/\"n_layer\": 12/\"n_layer\": $l/" "$data/gpt2.json" >small$l.json &&
		mem-estimate --config small$l.json --dp 2 --zero 3 --json >s$l.json || return 1
	done &&
	python3 - <<-\PY
	import json
	for l in (4, 5):
	    F = (50304 + 1024) * 256 + l * (12 * 256 * 256 + 13 * 256) + 2 * 256
	    assert (4 * F < 64 << 20) == (l == 4), (l, F)
	    b = json.load(open("s%d.json" % l))["bytes"]
	    assert b["host_staging"] == min(4 * F, 64 << 20), (l, F, b)
	    assert b["host_params"] == -(-4 * (-(-F // 2)) // 64) * 64, (l, F, b)
	C, L, V, P, N = 768, 12, 50304, 1024, 5
	F = (V + P) * C + L * (12 * C * C + 13 * C) + 2 * C
	assert F == 124439808 + (V - 50257) * C and F % N, F
	def want(z, off):
	    Fr = -(-F // N) * N if z else F
	    R = Fr // N if z else F
	    mirror = -(-4 * Fr // 64) * 64
	    w = {"host_params": mirror if z < 3 else -(-4 * R // 64) * 64,
	         "host_staging": 64 << 20, "host_moments": 8 * (R + 1)}
	    if z < 2:
	        w["host_grads"] = mirror
	    if off and z >= 2:
	        w["host_grad_shard"] = 4 * R
	    return w
	TERMS = ("host_params", "host_grads", "host_staging", "host_moments", "host_grad_shard")
	for z in range(4):
	    for off in (0, 1):
	        j = json.load(open("%s%d.json" % ("ho" if off else "h", z)))
	        b = j["bytes"]
	        got = {k: v for k, v in b.items() if k in TERMS}
	        assert got == want(z, off), (z, off, got, want(z, off))
	        assert j["host_per_rank"] == sum(got.values()), j
	        assert ("host_ram" in b) == bool(off), b
	        gpu = sum(v for k, v in b.items() if k not in TERMS and k != "host_ram")
	        assert gpu == j["total"], (z, off, gpu, j["total"])
	b = json.load(open("h3.json"))["bytes"]
	rows = [l.split() for l in open("h3.txt") if l.startswith("host RAM per rank: ")]
	assert [r[4] for r in rows] == ["host_params", "host_staging", "host_moments"], rows
	for r in rows:
	    assert abs(float(r[5]) - b[r[4]] / 2**30) < 0.001 and r[6] == "GiB", (r, b)
	def terms(f):
	    j = json.load(open(f))
	    got = {k: v for k, v in j["bytes"].items() if k in TERMS}
	    assert j["host_per_rank"] == sum(got.values()), j
	    return got
	# one rank: ZeRO shards nothing, the mirrors and moments are whole
	assert terms("one.json") == want(0, 0), terms("one.json")
	# a tensor rank of tp 2 (ZeRO-1 over dp 4): its half of wte and of
	# the blocks'"'"' split weights, the norms and row-parallel biases whole;
	# its moments its quarter, the segment cut in pieces of ceil(n/4)
	n = V * C // 2 + P * C + L * ((12 * C * C + 7 * C) // 2 + 6 * C) + 2 * C
	mirror = -(-4 * (-(-n // 4) * 4) // 64) * 64
	assert terms("tp.json") == {"host_params": mirror, "host_grads": mirror,
	                            "host_staging": 64 << 20,
	                            "host_moments": 8 * (-(-n // 4) + 1)}, terms("tp.json")
	j = json.load(open("ll.json"))
	assert "host_per_rank" not in j and not set(j["bytes"]) & set(TERMS), j
	PY
'

test_expect_success 'text output states units and matches JSON (GiB and --si GB)' '
	mem-estimate --config "$data/gpt2.json" >gib.txt &&
	mem-estimate --config "$data/gpt2.json" --si >gb.txt &&
	mem-estimate --config "$data/gpt2.json" --json >out.json &&
	grep "^  total .* GiB$" gib.txt && grep "^  total .* GB$" gb.txt &&
	python3 -c "
import json
t = json.load(open(\"out.json\"))[\"total\"]
gib = float(open(\"gib.txt\").read().split(\"total\")[1].split()[0])
gb = float(open(\"gb.txt\").read().split(\"total\")[1].split()[0])
assert abs(gib - t / 2**30) < 0.001 and abs(gb - t / 1e9) < 0.001, (gib, gb, t)
"
'

test_expect_success '--explain shows formulas, numbers and sources' '
	mem-estimate --config "$data/gpt2.json" --explain >out &&
	grep -F "L*m*sbh*(10 + 24/t + 5as/(ht))" out &&
	grep -F "12*1*1024*1*768*(10 + 24/1 + 5*12*1024/(768*1))" out &&
	grep -F "[Korthikanti et al. 2022" out &&
	grep -F "K*Psi, K=12 (f32 master + adamw)" out &&
	grep -F "[ZeRO (Rajbhandari et al. 2020)" out
'

test_expect_success 'inference: Llama-2-7B fp16 KV cache is 0.5 MiB per token' '
	mem-estimate --config "$data/llama-2-7b.json" --infer --precision f16 \
		--batch 2 --seq 4096 --json >out.json &&
	python3 -c "
import json
b = json.load(open(\"out.json\"))[\"bytes\"]
assert b[\"kv_cache\"] == 2 * 4096 * 2**19, b[\"kv_cache\"]
assert b[\"parameters\"] == 2 * 6738415616
"
'

test_expect_success 'ZeRO Figure 1 from the command line (--si, model states)' '
	for z in 0 1 2 3; do
		mem-estimate --params 7.5B --dp 64 --zero $z --json >z$z.json || return 1
	done &&
	python3 -c "
import json
fig = [120, 31.4, 16.6, 1.9]
for z in range(4):
    got = json.load(open(\"z%d.json\" % z))[\"model_states\"] / 1e9
    assert round(got, 1) == fig[z], (z, got)
"
'

test_expect_success '--gpu: a ranked table of configurations that fit' '
	mem-estimate --config "$data/llama-2-7b.json" --gpu A100-80 --world 16 \
		--global-batch 64 >out &&
	grep "^fit: .*A100-80" out && grep "^cost:" out &&
	grep "^   1 " out && grep "^   5 " out
'

test_expect_success '--fit --json: candidates fit and are sorted by cost' '
	mem-estimate --config "$data/llama-2-7b.json" --fit 40GiB --world 16 \
		--global-batch 64 --top 20 --json >out.json &&
	python3 -c "
import json
j = json.load(open(\"out.json\"))
c = j[\"candidates\"]
assert len(c) == 20 and j[\"fits\"] >= 20 and j[\"tried\"] > 500
assert all(x[\"total\"] <= 40 * 2**30 for x in c)
assert all(x[\"dp\"] * x[\"tp\"] * x[\"pp\"] == 16 for x in c)
assert [x[\"step_s\"] for x in c] == sorted(x[\"step_s\"] for x in c)
"
'

test_expect_success '--fit: nothing fits is a failure with a message' '
	test_expect_code 1 mem-estimate --config "$data/llama-2-7b.json" --fit 8GiB >out 2>err &&
	grep "no configuration fits 8.00 GiB" err
'

test_expect_success '--list-gpus' '
	mem-estimate --list-gpus >out &&
	grep "^H100-80 " out && grep "^RTX4090-24 " out
'

test_expect_success 'flags describe the same model as config.json' '
	mem-estimate --layers 32 --hidden 4096 --heads 32 --kv-heads 8 \
		--ffn 14336 --vocab 32000 --arch llama --json >a.json &&
	python3 -c "
import json
assert json.load(open(\"a.json\"))[\"model\"][\"params\"] == 7241732096
"
'

test_expect_success 'GPT-2 from flags is GPT2Config: tied, 50257 tokens, 1024 positions' '
	mem-estimate --layers 12 --hidden 768 --heads 12 --json >f.json &&
	mem-estimate --config "$data/gpt2.json" --json >c.json &&
	mem-estimate --layers 12 --hidden 768 --heads 12 --untied --json >u.json &&
	python3 -c "
import json
f, c, u = (json.load(open(n)) for n in (\"f.json\", \"c.json\", \"u.json\"))
assert f[\"model\"][\"params\"] == 124439808, f[\"model\"]
assert f[\"bytes\"] == c[\"bytes\"] and f[\"run\"] == c[\"run\"], (f, c)
assert f[\"run\"][\"seq\"] == 1024 and not f[\"run\"][\"flash\"]
assert u[\"model\"][\"params\"] == 124439808 + 50257 * 768
"
'

test_expect_success 'the sequence comes from the model, or 2048 for a bare count' '
	mem-estimate --config "$data/llama-2-7b.json" --json >l.json &&
	mem-estimate --params 7B --json >p.json &&
	mem-estimate --params 7B --infer --json >i.json &&
	python3 -c "
import json
l, p, i = (json.load(open(n))[\"run\"] for n in (\"l.json\", \"p.json\", \"i.json\"))
assert l[\"seq\"] == 4096 and p[\"seq\"] == 2048, (l, p)
assert not l[\"flash\"] and i[\"flash\"], (l, i)
"
'

test_expect_success '--recompute gelu drops the GeLU output: L*b*s*4h*e bytes' '
	mem-estimate --config "$data/gpt2.json" -b 4 --json >n.json &&
	mem-estimate --config "$data/gpt2.json" -b 4 --recompute gelu --json >g.json &&
	python3 -c "
import json
n, g = (json.load(open(x))[\"bytes\"][\"activations\"] for x in (\"n.json\", \"g.json\"))
assert n - g == 12 * 4 * 1024 * 4 * 768 * 2, (n, g)
"
'

test_expect_success '--no-logits-f32 drops the f32 copy of the logits: 4*s*b*V bytes in bf16, none in f32' '
	mem-estimate --config "$data/gpt2.json" -b 4 --json >c.json &&
	mem-estimate --config "$data/gpt2.json" -b 4 --no-logits-f32 --json >n.json &&
	mem-estimate --config "$data/gpt2.json" -b 4 --precision f32 --json >fc.json &&
	mem-estimate --config "$data/gpt2.json" -b 4 --precision f32 --no-logits-f32 --json >fn.json &&
	python3 -c "
import json
c, n, fc, fn = (json.load(open(x)) for x in (\"c.json\", \"n.json\", \"fc.json\", \"fn.json\"))
assert c[\"bytes\"][\"logits\"] == 6 * 1024 * 4 * 50257, c[\"bytes\"]
assert n[\"bytes\"][\"logits\"] == 2 * 1024 * 4 * 50257, n[\"bytes\"]
assert c[\"total\"] - n[\"total\"] == 4 * 1024 * 4 * 50257
assert fc[\"bytes\"] == fn[\"bytes\"], (fc[\"bytes\"], fn[\"bytes\"])
assert c[\"run\"][\"logits_f32\"] and not n[\"run\"][\"logits_f32\"]
"
'

test_expect_success 'the option table, --help and mem-estimate(1) name the same options' '
	# --help is the table (bin/mem-estimate.c): every name at the start of
	# its option lines, "-b, --micro-batch N" giving -b and --micro-batch;
	# the man page: every Fl of an .It line of OPTIONS
	mem-estimate --help >help &&
	test_help_options help >in-help &&
	test_man_options "$GK_TOP/man/man1/mem-estimate.1" >in-man &&
	test $(wc -l <in-help) -gt 50 &&
	test_cmp in-help in-man &&
	# and getopt takes an argument exactly for the rows whose help line
	# shows one (--list-gpus needs no model, so a flag alone is accepted)
	test_options_take_args help mem-estimate --list-gpus &&
	for o in $(sed -n "s/^  \(-[a-z], \)\{0,1\}\(--[a-z0-9-]*\)  .*/\2/p" help); do
		mem-estimate --list-gpus $o >out 2>err || return 1
	done
'

test_expect_success '--seq past the model'\''s positions: a warning, the estimate still made' '
	mem-estimate --layers 2 --hidden 64 --heads 4 --positions 64 --seq 128 --json >long.json 2>err &&
	echo "mem-estimate: warning: --seq 128 exceeds the model'\''s 64 positions: GPT-2'\''s learned position embeddings end there, so no run has this shape (gpu-train refuses it); give --positions 128, or --seq 64 or less" >expect &&
	test_cmp expect err &&
	test "$(jq .run.seq long.json)" = 128 &&
	mem-estimate --config "$data/gpt2.json" --seq 2048 >/dev/null 2>err &&
	grep "^mem-estimate: warning: --seq 2048 exceeds the model.s 1024 positions: GPT-2.s learned" err &&
	mem-estimate --config "$data/llama-2-7b.json" --seq 8192 >/dev/null 2>err &&
	echo "mem-estimate: warning: --seq 8192 exceeds the model'\''s 4096 positions (max_position_embeddings): it was not trained that far; the memory figures hold, the model'\''s output may not" >expect &&
	test_cmp expect err &&
	mem-estimate --config "$data/gpt2.json" --seq 1024 >/dev/null 2>err &&
	test_must_be_empty err &&
	mem-estimate -q --config "$data/gpt2.json" --seq 2048 >/dev/null 2>err &&
	test_must_be_empty err
'

test_done
