"""Planted bottleneck: data loading starves the step (num_workers=0, an expensive
``__getitem__``). ``--fix``: two loader workers, persistent (this machine has 2 cores).

Run: python bench/workloads/dataloader_starved.py [--fix] [--steps N]
"""

from __future__ import annotations

import math

import torch
from _args import workload_args
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Expensive(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample costs a Python loop (a decoder or augmentation stand-in)."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        acc = 0.0
        for k in range(3000):
            acc += math.sin(i * 0.001 + k)
        x = torch.full((64,), acc / 3000.0) + torch.arange(64) * 1e-3
        return x, torch.tensor(i % 4)


def main() -> None:
    args = workload_args()
    torch.manual_seed(0)
    kw = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4} if args.fix else {"num_workers": 0}
    loader = DataLoader(Expensive(), batch_size=16, **kw)  # type: ignore[arg-type]
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for n, (x, y) in enumerate(loader):
        if n == args.steps:
            break
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
