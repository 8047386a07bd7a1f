"""Synchronization: host calls that wait for the device, and GC pauses."""

from __future__ import annotations

from typing import Any

from .base import Context, NotEnoughData, Outcome, make, needs, rule, share

#: nsys analyze flags every synchronizing call; we fire from this share of step time.
SYNC_SHARE = 0.01
#: msprof-analyze "frequent synchronize": more blocking calls than this per step.
SYNC_CALLS_PER_STEP = 10
#: .item() / .to('cpu') blocking time from this share of step time.
ITEM_SHARE = 0.01
#: nsys analyze cuda-memcpy-sync / cuda-memset-sync: blocking copies or sets, share of step.
SYNC_COPY_SHARE = 0.01
#: msprof-analyze / MindInsight: GC pauses longer than this (µs).
GC_PAUSE_US = 1000.0
#: Many short collections add up: in-step GC time above this share of the step time is
#: advice too (tb-profiler's 5% floor for one cause of step time, as for the DataLoader).
GC_SHARE = 0.05


def _in_steps(ctx: Context) -> tuple[list[dict[str, Any]], float] | NotEnoughData:
    rows = ctx.rows("sync")
    step = ctx.step_us()
    if rows is None or not step:
        return NotEnoughData("no step or trace window")
    if not ctx.rows("launch"):
        return NotEnoughData("no host runtime calls linked to device work")
    has_steps = ctx.steps() > 0
    # With step markers only blocking inside the steps costs step time.
    return [r for r in rows if r["step"] is not None or not has_steps], step


def _blocked(rows: list[dict[str, Any]], cats: tuple[str, ...]) -> tuple[float, int, list[str]]:
    sel = [r for r in rows if r["category"] in cats]
    names = sorted({str(r["name"]) for r in sel})
    return sum(float(r["blocked_us"]) for r in sel), sum(int(r["calls"]) for r in sel), names


_SYNC_FIX = (
    "Remove synchronizing calls from the training loop: keep values on the device, record events "
    "and query them later, and synchronize once per logging interval."
)
_SYNC_PT = (
    "# instead of torch.cuda.synchronize() every step:\n"
    "done = torch.cuda.Event(); done.record()\n"
    "...\n"
    "if step % log_every == 0: done.synchronize()"
)
_SYNC_NPU = "# Ascend: the same with torch.npu.Event(); avoid torch.npu.synchronize() in the loop"


@rule(
    "sync.sync_api",
    "Synchronizing API calls in the step",
    anchor="nsys analyze (cuda-api-sync)",
    cause="sync",
    thresholds={"sync_share": SYNC_SHARE},
)
@needs(_in_steps)
def sync_api(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, step = got
    t, n, names = _blocked(rows, ("sync_api",))
    s = share(t, step)
    if s < SYNC_SHARE:
        return None
    return make(
        f"Synchronize calls block the host {100 * s:.1f}% of the step ({', '.join(names)}).",
        {"blocked_us": t, "calls": n, "step_us": step, "blocked_pct": 100 * s, "calls_names": names},
        t,
        _SYNC_FIX,
        pytorch=_SYNC_PT,
        ascend=_SYNC_NPU,
    )


@rule(
    "sync.frequent_sync",
    "Frequent synchronization",
    anchor="msprof-analyze",
    cause="sync",
    thresholds={"calls_per_step": SYNC_CALLS_PER_STEP},
)
@needs(_in_steps)
def frequent_sync(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, _step = got
    steps = ctx.steps()
    if steps == 0:
        return NotEnoughData("no step markers, so no per-step count")
    host = [r for r in rows if r["category"] in ("sync_api", "item", "to_host", "sync_memcpy", "sync_memset")]
    calls = sum(int(r["calls"]) for r in host if r["name"] != "aten::_local_scalar_dense")
    per = calls / steps
    if per <= SYNC_CALLS_PER_STEP:
        return None
    t = sum(float(r["blocked_us"]) for r in rows if r["category"] == "all")
    return make(
        f"{per:.1f} blocking calls per step (threshold {SYNC_CALLS_PER_STEP}).",
        {"calls_per_step": per, "calls": calls, "steps": steps, "blocked_us": t},
        t,
        _SYNC_FIX,
        pytorch=_SYNC_PT,
        ascend=_SYNC_NPU,
    )


@rule(
    "sync.item",
    ".item() / .to('cpu') stalls",
    anchor="nsys analyze / PyTorch performance guide",
    cause="sync",
    thresholds={"item_share": ITEM_SHARE},
)
@needs(_in_steps)
def item(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, step = got
    t, n, names = _blocked([r for r in rows if r["name"] != "aten::_local_scalar_dense"], ("item", "to_host"))
    s = share(t, step)
    if s < ITEM_SHARE:
        return None
    return make(
        f"Reading device values on the host (.item(), .cpu()) blocks {100 * s:.1f}% of the step.",
        {"blocked_us": t, "calls": n, "step_us": step, "blocked_pct": 100 * s, "ops": names},
        t,
        "Accumulate metrics on the device and read them every N steps; use non_blocking copies "
        "into pinned buffers when the host needs the values.",
        pytorch="running = running + loss.detach()  # no .item() per step\n"
        "if step % 100 == 0: print(running.item() / 100)",
    )


def _blocking_rule(category: str, what: str, title: str, anchor: str, fix: str, **snippets: str) -> None:
    """Register rule ``sync.CATEGORY``: blocking calls of one ``sync`` view category
    (synchronous copies, synchronous memsets) above SYNC_COPY_SHARE of the step."""

    @rule(
        f"sync.{category}",
        title,
        anchor=anchor,
        cause="sync",
        thresholds={"sync_copy_share": SYNC_COPY_SHARE},
    )
    @needs(_in_steps)
    def blocking(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
        rows, step = got
        t, n, names = _blocked(rows, (category,))
        s = share(t, step)
        if s < SYNC_COPY_SHARE:
            return None
        return make(
            f"Synchronous {what} ({', '.join(names)}) block the host {100 * s:.1f}% of the step.",
            {"blocked_us": t, "calls": n, "step_us": step, "blocked_pct": 100 * s, "apis": names},
            t,
            fix,
            **snippets,
        )


_blocking_rule(
    "sync_memcpy",
    "copies",
    "Synchronous memory copies",
    "nsys analyze (cuda-memcpy-sync)",
    "Copy with the asynchronous API from pinned memory so the host goes on while the copy runs.",
    pytorch="x = x.pin_memory().to('cuda', non_blocking=True)",
    rocm="x = x.pin_memory().to('cuda', non_blocking=True)  # hipMemcpyAsync under the hood",
)
_blocking_rule(
    "sync_memset",
    "memsets",
    "Synchronous memsets",
    "nsys analyze (cuda-memset-sync)",
    "Use cudaMemsetAsync on the work stream (PyTorch's zero_() already does).",
    pytorch="buf.zero_()  # asynchronous on the current stream",
)


#: CPython names its collections ``gc gen<N>`` (record/job/collectors/system.py); the oldest
#: generation's are the full collections that walk the long-lived heap.
FULL_GC = "gc gen2"


def _young(name: object) -> bool:
    """A young generation's collection (named ``gc gen<N>``, N below the oldest): the
    fix leaves it; pauses of unknown generation count as removable."""
    return str(name).startswith("gc gen") and name != FULL_GC


def _gc_under_imports(ctx: Context) -> dict[str, float]:
    """The GC pauses of a run without steps that ran under an import (the step thread's
    samples say so: :func:`..analysis.phases.under_imports`): gc_us, young_us, pauses,
    and max_us, the longest pause of the others. None of them where no sample tells."""
    import numpy as np

    from ..analysis.phases import under_imports

    ev = ctx.profile.sql("SELECT rank, name, ts, dur FROM events WHERE kind = 'gc' ORDER BY rank, ts").to_pydict()
    rank, name = np.array(ev["rank"], dtype=np.int64), np.array(ev["name"], dtype=object)
    ts, dur = np.array(ev["ts"], dtype=np.int64), np.array(ev["dur"], dtype=np.int64)
    mask = np.zeros(len(ts), dtype=bool)
    if ctx.profile.tables.get("samples"):
        for r in np.unique(rank).tolist():
            sel = np.flatnonzero(rank == r)
            mask[sel] = under_imports(ctx.profile, int(r), ts[sel], ts[sel] + dur[sel])
    young = np.array([_young(n) for n in name], dtype=bool)
    return {
        "gc_us": float(dur[mask].sum()) / 1000.0,
        "young_us": float(dur[mask & young].sum()) / 1000.0,
        "pauses": float(mask.sum()),
        "max_us": float(dur[~mask].max()) / 1000.0 if (~mask).any() else 0.0,
    }


@rule(
    "sync.gc_pauses",
    "Garbage-collector pauses",
    anchor="msprof-analyze / MindInsight",
    cause="gc",
    thresholds={"gc_pause_us": GC_PAUSE_US, "gc_share": GC_SHARE},
)
def gc_pauses(ctx: Context) -> Outcome:
    rows = ctx.rows("sync")
    if rows is None:
        return NotEnoughData("no events")
    every = [r for r in rows if r["category"] == "gc"]
    if not every:
        return NotEnoughData("no GC events recorded (kind gc)")
    # Only pauses inside the steps cost step time (those at import and setup do not).
    gc = [r for r in every if r["step"] is not None or ctx.steps() == 0]
    worst = max((float(r["max_us"]) for r in gc), default=0.0)
    t = sum(float(r["blocked_us"]) for r in gc)
    # The fix (freeze the long-lived heap, collect between steps) removes the full
    # collections' walk of that heap; the young objects the steps make still have to be
    # collected, so the young generations' pauses stay. Pauses of unknown generation
    # (other importers name them otherwise) count as removable.
    young = sum(float(r["blocked_us"]) for r in gc if _young(r["name"]))
    pauses = sum(int(r["calls"]) for r in gc)
    imports = {"gc_us": 0.0, "young_us": 0.0, "pauses": 0, "max_us": worst}
    if not ctx.steps():
        # Without steps every pause counts, as a share of the run (the profiled time),
        # but those under an import (import torch's) come before any setup a freeze
        # could follow: they are not this fix's.
        imports = _gc_under_imports(ctx)
        t, young, pauses = t - imports["gc_us"], young - imports["young_us"], pauses - int(imports["pauses"])
        worst = imports["max_us"]
    step = ctx.step_us()
    share = t / step if step else 0.0
    if worst <= GC_PAUSE_US and share <= GC_SHARE:
        return None
    outside = max(0.0, sum(float(r["blocked_us"]) for r in every) - t - imports["gc_us"])
    full = t - young
    under = (
        f" {imports['gc_us'] / 1000:.1f} ms more ran under imports, which no freeze after setup removes."
        if imports["gc_us"] >= 1000
        else ""
    )
    return make(
        f"Garbage collection pauses {'the steps' if ctx.steps() else 'the run'} for up to {worst / 1000:.1f} ms "
        f"({t / 1000:.1f} ms in all; "
        f"{full / 1000:.1f} ms in full collections, which walk the long-lived heap).{under}",
        {
            "max_pause_us": worst,
            "gc_us": t,
            "full_gc_us": full,
            "young_gc_us": young,
            "pauses": pauses,
            "gc_outside_steps_us": outside,
            "gc_under_imports_us": imports["gc_us"],
            "gc_pct_of_steps": 100 * share,
        },
        full,
        "Freeze the long-lived objects after setup so full collections skip them (and, to keep pauses "
        "out of the steps, collect at step boundaries); the young objects a step makes are still collected.",
        pytorch="import gc\ngc.collect(); gc.freeze()  # after model and data setup",
    )
