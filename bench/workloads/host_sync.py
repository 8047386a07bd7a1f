"""Planted bottleneck: host reads of device values inside the inner loop of a model with
many small ops. Each micro-step reads the loss with ``loss.item()`` and scores the batch
one sample at a time (``out[i].argmax().item()``, a read per element). ``--fix``:
accumulate the loss and the score on the device and read them once per step.

On a CPU one ``.item()`` costs little (there is no device queue to drain), so the
planted fault is the read per element, which costs host time on any device; on a GPU
each of those reads also waits for the queued kernels.

Run: python bench/workloads/host_sync.py [--fix] [--steps N]
"""

from __future__ import annotations

import torch
from _args import workload_args
from torch import nn


def main() -> None:
    args = workload_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)], nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 32), torch.randint(0, 4, (128,))
    log: list[float] = []
    for _ in range(args.steps):
        opt.zero_grad()
        running, hits = torch.zeros(()), torch.zeros((), dtype=torch.long)
        correct = 0
        for _micro in range(4):
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            if args.fix:
                running = running + loss.detach()
                hits = hits + (out.argmax(1) == y).sum()
            else:
                log.append(loss.item())  # a host read every micro-step
                for i in range(len(y)):  # and one per sample
                    correct += int(out[i].argmax().item() == y[i].item())
        if args.fix:
            log.append(running.item() / 4)
            correct = int(hits.item())
        opt.step()


if __name__ == "__main__":
    main()
