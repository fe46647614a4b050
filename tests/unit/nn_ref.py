#!/usr/bin/env python3
"""Reference values for tests/unit/nn_model.c from transformers' GPT2LMHeadModel.

    nn_ref.py make OUT L C NH V POS B T SEED [OUT L ... SEED]...
        OUT/model/        save_pretrained (config.json, model.safetensors)
        OUT/ref.safetensors
            tokens, targets (B,T) int32 (some targets -100: ignored)
            logits (B,T,V), loss [1], grad.NAME for every parameter
            adamw_loss [10]: loss before each of 10 AdamW steps on the batch
            opt.g1..opt.g3, opt.NAME: AdamW alone, 3 steps with random
            gradients from the saved parameters (lr 1e-3, 2e-3, 3e-3)
    nn_ref.py loss DIR TOKENS OUT [DIR TOKENS OUT]...
        load DIR with GPT2LMHeadModel.from_pretrained, write the loss on the
        (B,T) int32 tokens of safetensors file TOKENS (next-token targets
        in the file too) to OUT as text.

Each command takes several cases (each make seeds torch afresh): one
Python, whose imports of torch and transformers cost seconds, for them all.

AdamW: betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D tensors
only, as gpu-train builds its groups; dropout 0.
"""
import os
import sys

# quiet: the test's output is TAP
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402


def groups(model, wd):
    named = list(model.named_parameters())
    dec = [p for _, p in named if p.dim() >= 2]
    nod = [p for _, p in named if p.dim() < 2]
    return [{"params": dec, "weight_decay": wd},
            {"params": nod, "weight_decay": 0.0}]


def xent(model, tokens, targets):
    logits = model(input_ids=tokens).logits
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),
                           ignore_index=-100)
    return logits, loss


def make(out, L, C, NH, V, POS, B, T, seed):
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=L, n_embd=C, n_head=NH, vocab_size=V,
                     n_positions=POS, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=V - 1, eos_token_id=V - 1)
    model = GPT2LMHeadModel(cfg).float()
    model.eval()  # no dropout anyway; eval keeps it so
    # GPT-2's init gives biases 0 and LayerNorm (1, 0): perturb them so
    # a kernel that ignored one would show
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(f"{out}/model", safe_serialization=True)

    tokens = torch.randint(0, V, (B, T), dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), dtype=torch.int64)
    targets[torch.rand(B, T) < 0.2] = -100
    ref = {"tokens": tokens.to(torch.int32), "targets": targets.to(torch.int32)}

    logits, loss = xent(model, tokens, targets)
    loss.backward()
    ref["logits"] = logits.detach().contiguous()
    ref["loss"] = loss.detach().reshape(1)
    for n, p in model.named_parameters():
        ref["grad." + n] = p.grad.detach().clone().contiguous()
    model.zero_grad(set_to_none=True)

    # AdamW alone: random gradients, changing learning rates
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95),
                            eps=1e-8)
    for s in range(1, 4):
        flat = []
        for n, p in model.named_parameters():
            p.grad = torch.randn_like(p)
            flat.append(p.grad.reshape(-1))
        ref[f"opt.g{s}"] = torch.cat(flat)
        for g in opt.param_groups:
            g["lr"] = 1e-3 * s
        opt.step()
    for n, p in model.named_parameters():
        ref["opt." + n] = p.detach().clone().contiguous()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(start[n])

    # ten AdamW steps on the same batch
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95),
                            eps=1e-8)
    losses = []
    for _ in range(10):
        opt.zero_grad(set_to_none=True)
        _, loss = xent(model, tokens, targets)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    ref["adamw_loss"] = torch.tensor(losses, dtype=torch.float32)
    save_file(ref, f"{out}/ref.safetensors")


def loss_of(d, tokfile, out):
    model = GPT2LMHeadModel.from_pretrained(d).float()
    model.eval()
    t = load_file(tokfile)
    with torch.no_grad():
        _, loss = xent(model, t["tokens"].long(), t["targets"].long())
    with open(out, "w") as f:
        f.write("%.9g\n" % loss.item())


if __name__ == "__main__":
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    args = sys.argv[2:]
    if sys.argv[1] == "make" and args and len(args) % 9 == 0:
        for i in range(0, len(args), 9):
            make(args[i], *map(int, args[i + 1:i + 9]))
    elif sys.argv[1] == "loss" and args and len(args) % 3 == 0:
        for i in range(0, len(args), 3):
            loss_of(*args[i:i + 3])
    else:
        sys.exit("nn_ref.py: unknown command or a partial case: " + " ".join(sys.argv[1:]))
