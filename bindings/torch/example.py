#!/usr/bin/env python3
"""DDP training with the chorus backend.

  PYTHONPATH=build/bindings/torch torchrun --redirects 2 --tee 2 --nproc_per_node 4 \
      bindings/torch/example.py

(--redirects/--tee work around Debian torchrun 1.13's failure under Python 3.11.)

or without torchrun, one process per rank, with torch's usual variables:

  MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 python3 example.py &
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 python3 example.py

Options: --steps N, --quantized (int8 gradient all-reduce through chorus_torch's DDP hook).
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch  # registers the "chorus" backend


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--quantized", action="store_true")
    args = p.parse_args()

    dist.init_process_group("chorus")  # rank, size and store from the environment (env://)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 1)))
    if args.quantized:
        model.register_comm_hook(None, chorus_torch.quantized_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    # Each rank fits its own shard of y = sum(x) + noise.
    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(64, 32, generator=gen)
        y = x.sum(dim=1, keepdim=True) + 0.01 * torch.randn(64, 1, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:3d}  mean loss over {world} ranks {avg.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
