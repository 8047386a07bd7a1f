"""Planted bottleneck: Python-side preprocessing in the training loop (each sample
normalised element by element). ``--fix``: the same normalisation vectorised.

Run: python bench/workloads/python_preprocess.py [--fix] [--steps N]
"""

from __future__ import annotations

import torch
from _args import workload_args
from torch import nn


def normalise_slow(batch: list[list[float]]) -> torch.Tensor:
    out = []
    for row in batch:
        m = sum(row) / len(row)
        s = (sum((v - m) ** 2 for v in row) / len(row)) ** 0.5 + 1e-6
        out.append([(v - m) / s for v in row])
    return torch.tensor(out)


def normalise_fast(batch: torch.Tensor) -> torch.Tensor:
    m = batch.mean(dim=1, keepdim=True)
    return (batch - m) / (batch.std(dim=1, unbiased=False, keepdim=True) + 1e-6)


def main() -> None:
    args = workload_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    raw = torch.randn(64, 256)
    rows = raw.tolist()
    y = torch.randint(0, 4, (64,))
    for _ in range(args.steps):
        x = normalise_fast(raw) if args.fix else normalise_slow(rows)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
