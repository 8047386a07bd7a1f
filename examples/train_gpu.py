"""The bundled example's accelerator variant: a small convolutional classifier.

Runs on CUDA when torch sees a GPU, else on the CPU (``--device`` forces one), plain
(``python examples/train_gpu.py``), under ``aiprof record``, or under torch.profiler
alone (``--torch-profiler OUT``: what ``aiprof record --ops`` is compared with).
``--sync-every-step`` plants a common bottleneck: the loss read back with ``.item()``
after every micro-batch, a host-device sync that stalls the launch queue. It prints the
median step time and a checksum of the final weights.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torch import nn


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(64 * 16, 256),
        nn.ReLU(),
        nn.Linear(256, 10),
    )


def train(steps: int, batch: int, micro: int, size: int, device: torch.device, sync: bool, prof: object) -> float:
    """Train ``steps`` steps of ``micro`` micro-batches; return the median step in ms."""
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(batch, 3, size, size, generator=g).to(device)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)
    times: list[float] = []
    seen = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        for _ in range(micro):
            loss = loss_fn(model(x), y) / micro
            loss.backward()
            if sync:
                seen += loss.item()  # the planted sync: one host-device round trip per micro-batch
        opt.step()
        if prof is not None:
            prof.step()  # type: ignore[attr-defined]
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[1:] if len(times) > 1 else times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--micro", type=int, default=4, help="micro-batches per step (gradient accumulation)")
    ap.add_argument("--size", type=int, default=32, help="image side in pixels")
    ap.add_argument("--device", default="auto", help="auto, cuda or cpu")
    ap.add_argument("--sync-every-step", action="store_true", help="plant a .item() sync per micro-batch")
    ap.add_argument("--torch-profiler", metavar="OUT", help="profile with torch.profiler alone into OUT/")
    args = ap.parse_args()
    torch.set_num_threads(1)
    name = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    run = (args.steps, args.batch_size, args.micro, args.size, device, args.sync_every_step)
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        out = Path(args.torch_profiler)
        out.mkdir(parents=True, exist_ok=True)
        with profile(activities=acts) as p:
            median_ms = train(*run, p)
        p.export_chrome_trace(str(out / "trace.json"))
    else:
        median_ms = train(*run, None)
    print(f"device {device} median step {median_ms:.3f} ms")


if __name__ == "__main__":
    main()
