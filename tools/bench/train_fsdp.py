"""PyTorch FSDP (gloo, CPU) on the anchor model: the reference for tools/bench/zero.sh.

train_ddp.py's run with the model fully sharded instead of replicated:
two processes (torch.multiprocessing), each training transformers'
GPT2LMHeadModel (4 layers, d 256, 4 heads, byte vocabulary, fp32) on
windows of the same llm.c token file gpu-train reads, with
torch.optim.AdamW(0.9, 0.95, wd 0.1 on 2-D tensors), constant lr, one
thread per rank, the same windows and the same global batch. Each block is
its own sharding unit and the root (embeddings, the tied head, the final
LayerNorm) another, as FSDP's GPT-2 recipes wrap it; parameters are
released after forward (reshard_after_forward=True, the default).

FSDP2 (fully_shard, per-parameter DTensor shards on dim 0) when this
torch has it and it runs on the CPU over gloo; else FSDP1
(FullyShardedDataParallel, ShardingStrategy.FULL_SHARD, flat parameters),
or the name of the failure. Prints "impl=NAME" first, then "loss=X" for
every step and "tok_s=X" for each timed step (the first two are warm-up)
of rank 0.

    train_fsdp.py TOKENS STEPS [fsdp2|fsdp1]
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers


def fsdp2(model):
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, model


def fsdp1(model):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    wrapped = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                   auto_wrap_policy=ModuleWrapPolicy({GPT2Block}),
                   device_id=torch.device("cpu"), use_orig_params=True)
    return wrapped, wrapped


def run(rank, world, data, steps, B, T, port, impl):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=257,
                                  n_positions=T, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    model = transformers.GPT2LMHeadModel(cfg)
    model, params = (fsdp2 if impl == "fsdp2" else fsdp1)(model)
    # the sharded parameters: DTensors (FSDP2) or views of the flat shard
    # (FSDP1, use_orig_params), the original names and dimensions either way
    decay = [p for p in params.parameters() if p.dim() >= 2]
    rest = [p for p in params.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    if rank == 0:
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
        # the global batch's loss, as gpu-train's step line has it (outside
        # the timed part)
        g = loss.detach().clone()
        dist.all_reduce(g)
        if rank == 0:
            print("loss=%.6f" % (g.item() / world), flush=True)
            if k >= 2:
                print("tok_s=%.1f" % (world * B * T / dt), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    data, steps = sys.argv[1], int(sys.argv[2])
    impl = sys.argv[3] if len(sys.argv) > 3 else "fsdp2"
    mp.spawn(run, args=(2, data, steps, 8, 128, 29500 + os.getpid() % 1000, impl), nprocs=2)
