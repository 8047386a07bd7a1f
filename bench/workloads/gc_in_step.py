"""Planted bottleneck: garbage collection inside the step. A large long-lived heap (the
dataset's metadata) and a step that makes many cyclic objects: the collector keeps
walking the heap mid-step. ``--fix``: ``gc.freeze()`` after setup, and the collector
run by hand every 10 steps between steps.

Run: python bench/workloads/gc_in_step.py [--fix] [--steps N]
"""

from __future__ import annotations

import argparse
import gc

import torch
from torch import nn


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fix", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    metadata = [{"id": i, "tags": [i, str(i)]} for i in range(600_000)]  # long-lived heap
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
    if args.fix:
        gc.freeze()
        gc.disable()
    for step in range(args.steps):
        if args.fix and step % 10 == 0:
            gc.collect(1)  # young generations only, between steps: the frozen heap is skipped
        for _ in range(20_000):  # cyclic garbage made by the step
            a, b = Node(), Node()
            a.other, b.other = b, a
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert len(metadata) == 600_000


if __name__ == "__main__":
    main()
