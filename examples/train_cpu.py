"""A small but real training job on the CPU, with aiprof step markers and ranges.

Runs plain (``python examples/train_cpu.py``), under ``aiprof record -- python
examples/train_cpu.py``, or with ``--profile OUT`` through the Python API. It prints a
checksum of the final weights, which must not depend on whether it was profiled.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    from aiprof.record import Profiler, annotate, mark_step
except ImportError:  # the example runs without aiprof too
    Profiler = None  # type: ignore[assignment,misc]

    def annotate(name: str) -> contextlib.AbstractContextManager[None]:  # type: ignore[misc]
        return contextlib.nullcontext()

    def mark_step() -> None:
        pass


class Spirals(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Two interleaved noisy spirals in 16 dimensions (a deterministic toy problem)."""

    def __init__(self, n: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        t = torch.rand(n, generator=g) * 12.0
        label = torch.randint(0, 2, (n,), generator=g)
        sign = label.float() * 2 - 1
        xy = torch.stack([t.cos() * t * sign, t.sin() * t * sign], dim=1)
        proj = torch.randn(2, 16, generator=g)
        self.x = xy @ proj + 0.1 * torch.randn(n, 16, generator=g)
        self.y = label

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))


def batches(loader: DataLoader[Any], steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    n = 0
    while True:
        for b in loader:
            if n == steps:
                return
            n += 1
            yield b


def train(steps: int, batch_size: int, slowdown: float = 0.0, clip_grad_norm: float = 0.0) -> float:
    """Train for ``steps`` steps; return the checksum of the final weights.

    Two regressions for ``bench/diff_power.py``: ``clip_grad_norm`` (> 0) clips the
    gradients' norm before each optimizer step, a change a user makes for stability
    that costs this small model about a sixth of its step (the norm of every
    parameter's gradient, then a scaling of each); ``slowdown`` (a fraction, 0.15 = 15%)
    makes every step that much longer with more work of its own (it computes for that
    share of the step's time), a program uniformly slower."""
    torch.manual_seed(0)
    data = Spirals(4096)
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(1))
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in batches(loader, steps):
        t0 = time.perf_counter()
        with annotate("forward"):
            loss = loss_fn(model(x), y)
        with annotate("backward"):
            opt.zero_grad()
            loss.backward()
        with annotate("optimizer"):
            if clip_grad_norm > 0:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            opt.step()
        if slowdown > 0:
            end = time.perf_counter() + (time.perf_counter() - t0) * slowdown
            while time.perf_counter() < end:
                pass
        mark_step()
    with torch.no_grad():
        return float(sum((p.double() * (i + 1)).sum() for i, p in enumerate(model.parameters())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--slowdown", type=float, default=0.0, help="plant a slowdown: 0.15 makes each step 15%% longer")
    ap.add_argument("--clip-grad-norm", type=float, default=0.0, help="clip the gradients' norm to this (0: no clipping)")
    ap.add_argument("--profile", metavar="OUT", help="record with the aiprof Python API into OUT")
    ap.add_argument("--force", action="store_true", help="with --profile: replace a recording already in OUT")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.profile:
        if Profiler is None:
            raise SystemExit("--profile needs aiprof installed")
        from aiprof.errors import AiprofError

        try:
            profiler = Profiler(output=args.profile, force=args.force)
        except AiprofError as e:  # an earlier recording in OUT: one line, not a traceback
            raise SystemExit(f"train_cpu.py: {e} (here: --force)") from None
        with profiler:
            checksum = train(args.steps, args.batch_size, args.slowdown, args.clip_grad_norm)
    else:
        checksum = train(args.steps, args.batch_size, args.slowdown, args.clip_grad_norm)
    print(f"checksum {checksum:.10f}")


if __name__ == "__main__":
    main()
