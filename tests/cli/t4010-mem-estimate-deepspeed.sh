#!/bin/sh
test_description='mem-estimate model states against DeepSpeed estimators

DeepSpeed ships estimate_zero2_model_states_mem_needs (stage_1_and_2.py)
and estimate_zero3_model_states_mem_needs (stage3.py). ds.py below is a
re-implementation of their current formulas, used as an independent
reference: each case runs both and compares bytes. Where our model
differs from DeepSpeed on purpose (ZeRO-3 without offload) the test
checks the documented difference.'
. "$(dirname "$0")/lib.sh"

# ds.py needs only the standard library: the system interpreter, no venv.
PY=/usr/bin/python3
if ! test -x "$PY"; then
	skip_all="no $PY for the DeepSpeed reference (standard library only)"
	test_done
fi

cfg="$GK_TOP/tests/data/mem/llama-2-7b.json"

cat >ds.py <<'PY'
import json, sys

# deepspeed/runtime/zero/stage_1_and_2.py
def zero2(total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
          additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)

# deepspeed/runtime/zero/stage3.py
def zero3(total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1,
          cpu_offload=True, cpu_offload_params=True, zero_init=True,
          additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory

case, ours = sys.argv[1], json.load(open(sys.argv[2]))
P = ours["model"]["params"]
n = ours["run"]["dp"]
b = ours["bytes"]
states = ours["model_states"] + b.get("zero3_gather", 0)
host = ours["host_per_node"]
LL = 32000 * 4096  # the embedding, Llama-2-7B's largest module
if case == "z2":
    cpu, gpu = zero2(P, n, cpu_offload=False)
elif case == "z2off":
    cpu, gpu = zero2(P, n, cpu_offload=True)
    assert abs(host * 1.5 - cpu) <= 16, (host * 1.5, cpu)
elif case == "z3off":
    cpu, gpu, _ = zero3(P, LL, n, cpu_offload=True, cpu_offload_params=True)
    assert abs(host * 1.5 - cpu) <= 16, (host * 1.5, cpu)
elif case == "z3offopt":
    cpu, gpu, _ = zero3(P, LL, n, cpu_offload=True, cpu_offload_params=False)
    assert abs(host * 1.5 - cpu) <= 16, (host * 1.5, cpu)
elif case == "z3":
    cpu, gpu, _ = zero3(P, LL, n, cpu_offload=False)
    # DeepSpeed counts 18 bytes/param here; we count 2 (bf16 params) +
    # 2 (bf16 grads) + 4 (f32 grads) + 12 (Adam): 2*P/n more.
    gpu += 2 * P // n
print(states, gpu)
assert abs(states - gpu) <= 8, (states, gpu)
PY

for n in 1 2 4 8 64; do
	test_expect_success "ZeRO-2 on $n GPUs: 2P + 18P/N like DeepSpeed" "
		mem-estimate --config '$cfg' --zero 2 --dp $n --grad-f32 --json >out.json &&
		\"\$PY\" ds.py z2 out.json
	"
done

for n in 1 2 4; do
	test_expect_success "ZeRO-2 + offload on $n GPUs: GPU 2P, host 16P" "
		mem-estimate --config '$cfg' --zero 2 --dp $n --gpus-per-node $n \
			--offload optimizer --json >out.json &&
		\"\$PY\" ds.py z2off out.json
	"
done

for n in 2 8 16; do
	test_expect_success "ZeRO-3 + offload params and optimizer on $n GPUs" "
		mem-estimate --config '$cfg' --zero 3 --dp $n --gpus-per-node $n \
			--offload cpu --json >out.json &&
		\"\$PY\" ds.py z3off out.json
	"
	test_expect_success "ZeRO-3 + offload optimizer on $n GPUs" "
		mem-estimate --config '$cfg' --zero 3 --dp $n --gpus-per-node $n \
			--offload optimizer --json >out.json &&
		\"\$PY\" ds.py z3offopt out.json
	"
	test_expect_success "ZeRO-3 on $n GPUs: DeepSpeed + the 16-bit grad partition" "
		mem-estimate --config '$cfg' --zero 3 --dp $n --grad-f32 --json >out.json &&
		\"\$PY\" ds.py z3 out.json
	"
done

# --reshard-after-forward no (FSDP's reshard_after_forward=False, which
# DeepSpeed's estimator does not know): every layer stays gathered from
# its forward to its backward, the whole model in bf16 instead of the two
# largest modules: 2 bytes times Llama-2-7B's 6,738,415,616 parameters
# (Meta's model card's count), the model states unchanged.
test_expect_success "ZeRO-3, --reshard-after-forward no: 2P gathered, not the largest module twice" "
	mem-estimate --config '$cfg' --zero 3 --dp 8 --json >yes.json &&
	mem-estimate --config '$cfg' --zero 3 --dp 8 --reshard-after-forward no --json >no.json &&
	test_must_fail mem-estimate --config '$cfg' --zero 3 --reshard-after-forward maybe 2>err &&
	grep 'reshard-after-forward' err &&
	\"\$PY\" - <<-\\PY
	import json
	yes, no = json.load(open('yes.json')), json.load(open('no.json'))
	P = 6738415616
	assert no['model']['params'] == P, no['model']
	assert yes['bytes']['zero3_gather'] == 2 * 2 * 32000 * 4096, yes['bytes']
	assert no['bytes']['zero3_gather'] == 2 * P, no['bytes']
	assert no['model_states'] == yes['model_states'], (no, yes)
	PY
"

test_done
