"""Planted bottleneck: garbage collection inside the step. A large long-lived heap (the
dataset's metadata) and a step whose objects live until the step ends (a batch of
cyclic records): the young collections see them alive and promote them, so full
collections keep walking the whole heap mid-step. ``--fix``: ``gc.freeze()`` after
setup (full collections skip the frozen heap; the young collections stay).

Run: python bench/workloads/gc_in_step.py [--fix] [--steps N]
"""

from __future__ import annotations

import gc

import torch
from _args import workload_args
from torch import nn


class Record:
    __slots__ = ("other", "value")

    def __init__(self, value: float) -> None:
        self.other: Record | None = None
        self.value = value


def main() -> None:
    args = workload_args()
    torch.manual_seed(0)
    metadata = [{"id": i, "tags": [i, str(i)]} for i in range(300_000)]  # long-lived heap
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
    if args.fix:
        gc.freeze()
    for _ in range(args.steps):
        batch = []
        for k in range(10_000):  # the step's records, cyclic, alive until the step ends
            a, b = Record(k), Record(-k)
            a.other, b.other = b, a
            batch.append(a)
        w = sum(r.value for r in batch) / len(batch)
        loss = nn.functional.cross_entropy(model(x), y) * (1.0 + 0.0 * w)
        opt.zero_grad()
        loss.backward()
        opt.step()
        del batch
    assert len(metadata) == 300_000


if __name__ == "__main__":
    main()
