"""Data movement: host/device copies."""

from __future__ import annotations

from .base import Context, NotEnoughData, Outcome, make, rule, share

#: nsys analyze cuda-async-memcpy flags any async copy from pageable memory.
PAGEABLE_MIN_COPIES = 1
#: Host<->device copy time from this share of step time.
MEMCPY_SHARE = 0.05


@rule(
    "data.pageable_memcpy",
    "Asynchronous copies from pageable memory",
    anchor="nsys analyze (cuda-async-memcpy)",
    cause="memcpy",
    thresholds={"min_copies": PAGEABLE_MIN_COPIES},
)
def pageable_memcpy(ctx: Context) -> Outcome:
    rows = ctx.rows("memcpy")
    if not rows:
        return NotEnoughData("no memory copies recorded")
    if all(r["host_memory"] in ("unknown",) or r["direction"] not in ("H2D", "D2H") for r in rows):
        if not any(r["direction"] in ("H2D", "D2H") for r in rows):
            return None
        return NotEnoughData("the copies do not say which host memory they use")
    sel = [r for r in rows if r["host_memory"] == "pageable" and r["is_async"] and r["direction"] in ("H2D", "D2H")]
    n = sum(int(r["copies"]) for r in sel)
    if n < PAGEABLE_MIN_COPIES:
        return None
    t = sum(float(r["total_us"]) for r in sel)
    return make(
        f"{n} asynchronous copies use pageable host memory: they run synchronously and cannot overlap.",
        {
            "copies": n,
            "copy_us": t,
            "bytes": sum(int(r["bytes"] or 0) for r in sel),
            "directions": sorted({str(r["direction"]) for r in sel}),
        },
        t,
        "Allocate the host side in pinned (page-locked) memory and copy with non_blocking=True.",
        pytorch="loader = DataLoader(ds, pin_memory=True)\nx = x.to('cuda', non_blocking=True)",
        ascend="x = x.pin_memory().to('npu', non_blocking=True)",
    )


@rule(
    "data.memcpy_share",
    "Host-device copies take a large share of the step",
    anchor="tb-profiler (memcpy category)",
    cause="memcpy",
    thresholds={"memcpy_share": MEMCPY_SHARE},
)
def memcpy_share(ctx: Context) -> Outcome:
    rows = ctx.rows("steps")
    step = ctx.step_us()
    if not rows or not step:
        return NotEnoughData("no step or trace window")
    t = sum(float(r["memcpy_us"] or 0.0) for r in rows)
    s = share(t, step)
    if s < MEMCPY_SHARE:
        return None
    return make(
        f"Copies occupy {100 * s:.1f}% of the step with nothing else running on the device.",
        {"memcpy_us": t, "step_us": step, "memcpy_pct": 100 * s},
        t,
        "Keep tensors on the device between steps, batch small copies into one, and overlap the rest "
        "with compute on a side stream from pinned memory.",
        pytorch="with torch.cuda.stream(copy_stream):\n    nxt = batch.to('cuda', non_blocking=True)",
    )
