"""Planted bottleneck: a slow rank in a 2-process gloo DDP job (rank 1 gets three times
the work per step; rank 0 waits for it in the gradient all-reduce). ``--fix``: the same
work balanced (two micro-batches on each rank). Started with torchrun:

Run: torchrun --nproc_per_node=2 bench/workloads/slow_rank.py [--fix] [--steps N]
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _args import workload_args
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    args = workload_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # Rank 1's data shard is three times larger; balanced, each rank takes half of the four.
    micro = 2 if args.fix else (1 if rank == 0 else 3)
    x, y = torch.randn(512, 256), torch.randint(0, 4, (512,))
    for _ in range(args.steps):
        opt.zero_grad()
        for m in range(micro):
            if m < micro - 1:
                with model.no_sync():
                    nn.functional.cross_entropy(model(x), y).backward()
            else:
                nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
