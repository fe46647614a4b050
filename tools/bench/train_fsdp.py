"""PyTorch FSDP (gloo, CPU) on the anchor model: the reference for tools/bench/zero.sh.

train_ddp.py's run (the same model, optimizer, windows, global batch and
timed loop) with the model fully sharded instead of replicated. Each
block is its own sharding unit and the root (embeddings, the tied head,
the final LayerNorm) another, as FSDP's GPT-2 recipes wrap it; parameters
are released after forward (reshard_after_forward=True, the default).

FSDP2 (fully_shard, per-parameter DTensor shards on dim 0) when this
torch has it and it runs on the CPU over gloo; else FSDP1
(FullyShardedDataParallel, ShardingStrategy.FULL_SHARD, flat parameters),
or the name of the failure. Prints "impl=NAME" first, then "loss=X" for
every step and "tok_s=X" for each timed step (the first two are warm-up)
of rank 0.

    train_fsdp.py TOKENS STEPS [fsdp2|fsdp1]
"""
import sys

import torch
import torch.distributed as dist

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import train_ddp  # noqa: E402


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
    # the sharded parameters are views of the flat shard (use_orig_params),
    # with the original names and dimensions, as FSDP2's DTensors
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    wrapped = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                   auto_wrap_policy=ModuleWrapPolicy({GPT2Block}),
                   device_id=torch.device("cpu"), use_orig_params=True)
    return wrapped, wrapped


if __name__ == "__main__":
    impl = sys.argv[3] if len(sys.argv) > 3 else "fsdp2"
    train_ddp.spawn(sys.argv[1], int(sys.argv[2]), fsdp2 if impl == "fsdp2" else fsdp1, impl, True)
