"""Planted bottleneck: a host sync per inner iteration (``loss.item()`` inside the inner
loop of a model with many small ops). ``--fix``: accumulate on the device, read once
per step.

Run: python bench/workloads/host_sync.py [--fix] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fix", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(24)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)
    log: list[float] = []
    for _ in range(args.steps):
        opt.zero_grad()
        running = torch.zeros(())
        for _micro in range(8):
            loss = model(x).square().mean()
            loss.backward()
            if args.fix:
                running = running + loss.detach()
            else:
                log.append(loss.item())  # a host read every micro-step
        if args.fix:
            log.append(running.item() / 8)
        opt.step()


if __name__ == "__main__":
    main()
