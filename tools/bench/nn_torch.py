#!/usr/bin/env python3
"""PyTorch's side of tools/bench/nn.sh: the same GPT-2 training step.

    nn_torch.py L C NH T B V THREADS STEPS [DEVICE [PRECISION]]

transformers' GPT2LMHeadModel (gelu_new, dropout 0, fp32), AdamW betas
0.9/0.95, eps 1e-8, weight decay 0.1 on the 2-D tensors only, constant lr,
random windows of a random byte stream. Prints the same key=value line as
build/tools/bench/nn: tok_s and cpu_tok_s from the median step.
DEVICE cuda (tools/bench/train_gpu.sh) runs on the GPU with the fused
AdamW, PRECISION bf16 under torch.autocast (fp32 master weights, as
gpu-train's bf16), each step timed between two synchronisations.
"""
import os
import statistics
import sys
import time

L, C, NH, T, B, V, THREADS, STEPS = map(int, sys.argv[1:9])
DEVICE = sys.argv[9] if len(sys.argv) > 9 else "cpu"
PREC = sys.argv[10] if len(sys.argv) > 10 else "fp32"
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # before torch loads
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.set_num_threads(THREADS)
torch.manual_seed(1)
cfg = GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=T, vocab_size=V,
                 activation_function="gelu_new", resid_pdrop=0.0,
                 embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=V - 1,
                 eos_token_id=V - 1)
model = GPT2LMHeadModel(cfg).float().to(DEVICE)
model.train()
named = list(model.named_parameters())
opt = torch.optim.AdamW(
    [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": 0.1},
     {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}],
    lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=DEVICE == "cuda")
data = torch.randint(0, V, (1 << 20,), dtype=torch.int64, device=DEVICE)
cast = torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=PREC == "bf16")


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()



wall, cpu = [], []
for s in range(STEPS + 1):  # step 0: warm-up
    at = torch.randint(0, data.numel() - T - 1, (B,)).tolist()
    x = torch.stack([data[a:a + T] for a in at])
    y = torch.stack([data[a + 1:a + T + 1] for a in at])
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    opt.zero_grad(set_to_none=True)
    with cast:
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, V).float(), y.view(-1))
    loss.backward()
    opt.step()
    sync()
    if s:
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
w, c = statistics.median(wall), statistics.median(cpu)
print("tok_s=%.0f cpu_tok_s=%.0f step_ms=%.2f min_ms=%.2f loss=%.4f" %
      (B * T / w, B * T / c * THREADS, w * 1e3, min(wall) * 1e3, loss.item()))
