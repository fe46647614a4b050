"""torch.distributed gloo allreduce timing, the reference for tools/bench/comm.sh.

Usage: comm_gloo.py BYTES ITERS WARMUP   (spawns 2 local ranks)
Prints one line: "gloo BYTES TIME_US BUSBW_GBS" (time per iteration, the
mean over ranks as nccl-tests and allreduce-bench report it by default;
busbw as nccl-tests defines it for allreduce).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def run(rank, nbytes, iters, warmup, port, q):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    x = torch.ones(max(nbytes // 4, 1), dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(x)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    t = (time.perf_counter() - t0) / iters
    tt = torch.tensor([t], dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.SUM)
    if rank == 0:
        q.put(tt.item() / WORLD)
    dist.destroy_process_group()


def main():
    nbytes, iters, warmup = (int(a) for a in sys.argv[1:4])
    port = 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, nbytes, iters, warmup, port, q))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    t = q.get(timeout=600)
    for p in procs:
        p.join()
    busbw = nbytes / t / 1e9 * 2 * (WORLD - 1) / WORLD
    print(f"gloo {nbytes} {t * 1e6:.3f} {busbw:.4f}")


if __name__ == "__main__":
    main()
