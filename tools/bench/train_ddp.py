"""PyTorch DDP (gloo) on the anchor model: the reference for tools/bench/train.sh.

Started by train.sh as two processes (torch.multiprocessing); each rank
trains transformers' GPT2LMHeadModel (4 layers, d 256, 4 heads, byte
vocabulary, fp32) on windows of the same llm.c token file gpu-train
reads, with torch.optim.AdamW(0.9, 0.95, wd 0.1 on 2-D tensors), constant
lr, one thread per rank. Prints "tok_s=X" per timed step of rank 0.

train_fsdp.py runs the same model, optimizer, windows and timed loop
(run below) with another wrapping of the model.
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers


def ddp(model):
    """The model to call and the module whose parameters the optimizer takes."""
    return torch.nn.parallel.DistributedDataParallel(model), model


def run(rank, world, data, steps, B, T, port, wrap=ddp, impl=None, losses=False):
    """One rank's training: wrap(model) gives the model to call and the module
    whose parameters AdamW updates; impl, when given, is printed first
    ("impl=NAME"); losses adds each step's global-batch loss ("loss=X")."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=257,
                                  n_positions=T, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    model, params = wrap(transformers.GPT2LMHeadModel(cfg))
    decay = [p for p in params.parameters() if p.dim() >= 2]
    rest = [p for p in params.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    if impl and rank == 0:
        print("impl=%s" % impl, flush=True)
    tok = np.fromfile(data, dtype="<u2", offset=1024).astype(np.int64)
    for k in range(steps):
        s = ((k * world + rank) * B * T) % (len(tok) - B * T - 1)
        w = torch.from_numpy(np.stack([tok[s + b * T: s + b * T + T + 1] for b in range(B)]))
        t0 = time.perf_counter()
        logits = model(w[:, :T]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 257), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if losses:
            # the global batch's loss, as gpu-train's step line has it
            # (outside the timed part)
            g = loss.detach().clone()
            dist.all_reduce(g)
            if rank == 0:
                print("loss=%.6f" % (g.item() / world), flush=True)
        if rank == 0 and k >= 2:
            print("tok_s=%.1f" % (world * B * T / dt), flush=True)
    dist.destroy_process_group()


def spawn(data, steps, *rest):
    """Two ranks of run, batch 8 x 128 each; rest as run's after port."""
    mp.spawn(run, args=(2, data, steps, 8, 128, 29500 + os.getpid() % 1000) + rest, nprocs=2)


if __name__ == "__main__":
    spawn(sys.argv[1], int(sys.argv[2]))
