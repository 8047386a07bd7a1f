"""Device memory: too full, or mostly unused."""

from __future__ import annotations

from typing import Any

from .base import Context, NotEnoughData, Outcome, make, needs, rule

#: tb-profiler: peak allocated memory above this share of device memory.
PEAK_HIGH = 0.90
#: DLProf / tb-profiler: peak below this share leaves room for a larger batch.
PEAK_LOW = 0.50
#: Reserved memory this many times the allocated peak suggests fragmentation.
FRAGMENTATION_RATIO = 1.5


def _peaks(ctx: Context) -> list[tuple[dict[str, Any], float, float, float]] | NotEnoughData:
    """(device, peak allocated, peak reserved, device memory) per device with allocator events."""
    rows = ctx.rows("memory")
    if not rows:
        return NotEnoughData("no allocator events (profile with profile_memory=True)")
    devs = {(d.get("rank"), d.get("index")): d for d in ctx.devices}
    out = []
    seen: set[tuple[Any, Any]] = set()
    for r in rows:
        key = (r["rank"], r["device"])
        if r.get("device_type") == "cpu" or key in seen:
            continue
        seen.add(key)
        d = devs.get(key)
        if not d or not d.get("memory_bytes"):
            continue
        out.append(
            (d, float(r["peak_allocated_bytes"] or 0), float(r["peak_reserved_bytes"] or 0), float(d["memory_bytes"]))
        )
    if not out:
        return NotEnoughData("no device with both allocator events and a known memory size")
    return out


@rule(
    "memory.peak_high",
    "Device memory nearly full",
    anchor="tb-profiler",
    cause=None,
    thresholds={"peak_share": PEAK_HIGH},
)
@needs(_peaks)
def peak_high(ctx: Context, got: list[tuple[dict[str, Any], float, float, float]]) -> Outcome:
    d, pa_, _, cap = max(got, key=lambda x: x[1] / x[3])
    s = pa_ / cap
    if s <= PEAK_HIGH:
        return None
    return make(
        f"Peak allocated memory reaches {100 * s:.1f}% of {d.get('name')}'s memory.",
        {"peak_allocated_bytes": int(pa_), "memory_bytes": int(cap), "peak_pct": 100 * s, "device": d.get("index")},
        0.0,
        "Trade compute for memory: activation checkpointing, mixed precision, or a smaller micro-batch with "
        "gradient accumulation; this avoids out-of-memory failures and allocator retries rather than saving time.",
        pytorch="from torch.utils.checkpoint import checkpoint\ny = checkpoint(block, x, use_reentrant=False)",
    )


@rule(
    "memory.underused",
    "Device memory mostly unused: try a larger batch",
    anchor="DLProf / tb-profiler",
    cause="host",
    thresholds={"peak_share": PEAK_LOW},
)
@needs(_peaks)
def underused(ctx: Context, got: list[tuple[dict[str, Any], float, float, float]]) -> Outcome:
    _, pa_, _, cap = max(got, key=lambda x: x[1] / x[3])
    s = pa_ / cap
    if s >= PEAK_LOW:
        return None
    steps = ctx.rows("steps") or []
    idle = sum(float(r["idle_us"] or 0.0) for r in steps)
    return make(
        f"Peak allocated memory is only {100 * s:.1f}% of the device's memory.",
        {"peak_allocated_bytes": int(pa_), "memory_bytes": int(cap), "peak_pct": 100 * s, "device_idle_us": idle},
        # A larger batch spreads the host's per-step work (the time the device waits for
        # the host) over more samples; that time is the most it can win.
        idle * (1.0 - s),
        "Increase the batch size (scale the learning rate accordingly) to give each kernel more work.",
        pytorch="loader = DataLoader(ds, batch_size=2 * B)",
    )


@rule(
    "memory.fragmentation",
    "Reserved memory far above allocated (fragmentation)",
    anchor="PyTorch caching allocator guidance",
    cause=None,
    thresholds={"reserved_over_allocated": FRAGMENTATION_RATIO},
)
@needs(_peaks)
def fragmentation(ctx: Context, got: list[tuple[dict[str, Any], float, float, float]]) -> Outcome:
    _, pa_, pr, cap = max(got, key=lambda x: x[2] / max(x[1], 1.0))
    if pa_ <= 0 or pr / pa_ <= FRAGMENTATION_RATIO:
        return None
    return make(
        f"The allocator reserves {pr / pa_:.2f}x the peak allocated memory.",
        {"peak_reserved_bytes": int(pr), "peak_allocated_bytes": int(pa_), "ratio": pr / pa_, "memory_bytes": int(cap)},
        0.0,
        "Let the caching allocator grow segments instead of splitting fixed blocks.",
        pytorch="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py",
        ascend="PYTORCH_NPU_ALLOC_CONF=expandable_segments:True python train.py",
    )
