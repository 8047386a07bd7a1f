"""A CPU training job whose input pipeline is its bottleneck, as many real ones are.

Each sample is "decoded" and augmented in Python inside the Dataset's ``__getitem__``
(random crop, flip, jitter, normalisation, per item), and the DataLoader loads in the
training process (``num_workers=0``, PyTorch's default): the model waits for its data
at every step. No aiprof markers: ``aiprof record`` finds the steps by itself.

    python examples/slow_loader.py                 # the job as written
    python examples/slow_loader.py --batched       # the fix: augment whole batches
    python examples/slow_loader.py --workers 2     # the other fix, where cores are free

It prints the median step time it measured itself, so runs with and without the
fix compare without a profiler.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Synthetic 3x32x32 images, each built and augmented in Python when fetched."""

    def __init__(self, n: int, passes: int, per_item: bool = True) -> None:
        self.n = n
        self.passes = passes
        self.per_item = per_item

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 32, 32, generator=g)
        if self.per_item:
            for _ in range(self.passes):
                img = augment(img, g)
        return img, torch.tensor(i % 10)


def augment(img: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A random 24x24 crop (padded back to 32x32), a flip, brightness jitter and per-channel normalisation."""
    x0, y0 = (int(v) for v in torch.randint(0, 9, (2,), generator=g))
    out = img[:, y0 : y0 + 24, x0 : x0 + 24]
    if float(torch.rand(1, generator=g)) < 0.5:
        out = out.flip(2)
    out = out * (0.8 + 0.4 * float(torch.rand(1, generator=g)))
    mean = out.mean(dim=(1, 2), keepdim=True)
    std = out.std(dim=(1, 2), keepdim=True) + 1e-6
    out = (out - mean) / std
    return nn.functional.pad(out, (4, 4, 4, 4))


def augment_batch(imgs: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """:func:`augment` on a whole batch at once (one crop offset per batch)."""
    n = imgs.shape[0]
    x0, y0 = (int(v) for v in torch.randint(0, 9, (2,), generator=g))
    out = imgs[:, :, y0 : y0 + 24, x0 : x0 + 24]
    flip = (torch.rand(n, 1, 1, 1, generator=g) < 0.5).expand_as(out)
    out = torch.where(flip, out.flip(3), out)
    out = out * (0.8 + 0.4 * torch.rand(n, 1, 1, 1, generator=g))
    mean = out.mean(dim=(2, 3), keepdim=True)
    std = out.std(dim=(2, 3), keepdim=True) + 1e-6
    return nn.functional.pad((out - mean) / std, (4, 4, 4, 4))


class BatchedCollate:
    """Stack the raw images, then augment the batch: the per-item Python work, vectorised."""

    def __init__(self, passes: int) -> None:
        self.passes = passes
        self.g = torch.Generator().manual_seed(0)

    def __call__(self, items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        imgs = torch.stack([x for x, _ in items])
        for _ in range(self.passes):
            imgs = augment_batch(imgs, self.g)
        return imgs, torch.stack([y for _, y in items])


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(512, 10),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--passes", type=int, default=48, help="augmentation passes per sample")
    ap.add_argument("--batched", action="store_true", help="augment whole batches in collate (the fix)")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (the fix: 2)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = Augmented(args.steps * args.batch_size, args.passes, per_item=not args.batched)
    extra: dict[str, Any] = {"persistent_workers": True, "prefetch_factor": 4} if args.workers else {}
    if args.batched:
        extra["collate_fn"] = BatchedCollate(args.passes)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, **extra)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    t = time.perf_counter()
    for x, y in loader:
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - t)
        t = now
    # The first steps start the workers; the median is the steady state.
    print(f"steps {len(times)}  median step {1000 * statistics.median(times):.1f} ms")


if __name__ == "__main__":
    main()
