"""Input pipeline: time in data loading, the device waiting for input, step gaps."""

from __future__ import annotations

from typing import Any

from .base import Context, NotEnoughData, Outcome, make, needs, rule, share

#: tb-profiler: DataLoader time above this share of the step time.
DATALOADER_SHARE = 0.05
#: XProf input-bound classification: device idle waiting for input, share of step.
INPUT_BOUND_MODERATE = 0.05
INPUT_BOUND_HIGH = 0.20
#: msprof-analyze / MindInsight: data loading longer than this per step (µs).
DATALOADER_US_PER_STEP = 10_000.0
#: msprof-analyze: host time between two steps above this share of the mean step.
STEP_INTERVAL_SHARE = 0.05

_LOADER_FIX = (
    "Load data in parallel with compute: more DataLoader workers, pinned memory, "
    "prefetching, and persistent workers; move heavy decoding off the training process."
)
#: Without an accelerator there is no copy to a device for pinned memory to speed up.
_LOADER_FIX_HOST = (
    "Load data in parallel with compute: DataLoader workers (as many as the host has cores to spare), "
    "prefetching, and persistent workers; move heavy decoding off the training process."
)
_LOADER_MS = "dataset = dataset.batch(B, num_parallel_workers=8)  # MindSpore: parallel map/batch workers"
#: Workers proposed where the host's cores are not known.
DEFAULT_WORKERS = 8


def _loader(ctx: Context) -> tuple[list[dict[str, Any]], float, float, int] | NotEnoughData:
    rows = ctx.rows("dataloader")
    if not rows:
        return NotEnoughData("the dataloader view has no rows (no events)")
    calls = sum(int(r["loader_calls"] or 0) for r in rows)
    if calls == 0:
        return NotEnoughData("no DataLoader spans in the profile (enumerate(DataLoader) ranges or DataLoader ops)")
    step = float(sum(float(r["step_us"] or 0.0) for r in rows))
    dl = float(sum(float(r["dataloader_us"] or 0.0) for r in rows))
    return rows, step, dl, calls


def _fix(
    ctx: Context, rows: list[dict[str, Any]], claimed_us: float, threshold_us: float
) -> tuple[float, str, dict[str, str], str, dict[str, Any]] | None:
    """(estimate, fix, snippets, a note for the summary, evidence) of a data-loading rule
    that claims ``claimed_us`` of the DataLoader spans' time, or None where its fix has
    nothing to gain. Where the recording measured the host's CPU, the fix is the one
    :func:`.python_time.loader_plan` finds (workers bounded by the idle CPU, else the
    per-item Python made cheaper) and the estimate is at most what it saves; the
    snippet's workers are the host's cores (at most 8), pinned memory only where the
    profile has an accelerator to copy to; workers that wait rather than compute get
    more workers than cores (:data:`.python_time.WAITING_WORKERS_FIX`)."""
    from .python_time import (
        VECTORISE_FIX,
        VECTORISE_PT,
        WAITING_WORKERS_FIX,
        WAITING_WORKERS_PT,
        loader_plan,
        waiting_workers,
    )

    accel = bool(ctx.device_types())
    per: dict[int, tuple[float, float]] = {}
    for r in rows:
        if r["step"] is not None or ctx.steps() == 0:
            t, load = per.get(int(r["rank"]), (0.0, 0.0))
            per[int(r["rank"])] = (t + float(r["step_us"] or 0.0), load + float(r["dataloader_us"] or 0.0))
    # The DataLoader spans hold every sample of the loading, whatever its phase (a
    # float() per element under --ops is a "sync" sample inside the span).
    plan = loader_plan(ctx, per, threshold_us, ("data_loading", "sync", "other_python"))
    if plan is None:
        return None
    if plan.vectorise:
        return min(claimed_us, plan.estimate_us), VECTORISE_FIX, {"pytorch": VECTORISE_PT}, plan.note(), plan.evidence()
    if waiting_workers(plan.cpu):
        # Workers that wait (files, network, a sleep) rather than compute: more of them
        # than cores overlap their waits (python.data_loading's fix, the same words).
        fix = WAITING_WORKERS_FIX
        return min(claimed_us, plan.estimate_us), fix, {"pytorch": WAITING_WORKERS_PT}, plan.note(), plan.evidence()
    workers = min(plan.cores, DEFAULT_WORKERS) if plan.cores is not None else DEFAULT_WORKERS
    code = (
        f"loader = torch.utils.data.DataLoader(ds, batch_size=B, num_workers={workers}"
        + (", pin_memory=True" if accel else "")
        + ",\n                                     prefetch_factor=4, persistent_workers=True)"
    )
    estimate = claimed_us if plan.cores is None else min(claimed_us, plan.estimate_us)
    return (
        estimate,
        _LOADER_FIX if accel else _LOADER_FIX_HOST,
        {"pytorch": code, "mindspore": _LOADER_MS},
        plan.note(),
        plan.evidence(),
    )


def _fired(
    ctx: Context, rows: list[dict[str, Any]], summary: str, evidence: dict[str, Any], claimed_us: float, share_: float
) -> Outcome:
    got = _fix(ctx, rows, claimed_us, share_ * ctx.total_us())
    if got is None:
        return None
    estimate, fix, snippets, note, more = got
    return make(summary + note, evidence | more, estimate, fix, **snippets)


@rule(
    "input.dataloader_share",
    "Data loading takes a large share of the step",
    anchor="tb-profiler",
    cause="dataloader",
    thresholds={"dataloader_share": DATALOADER_SHARE},
)
@needs(_loader)
def dataloader_share(ctx: Context, got: tuple[list[dict[str, Any]], float, float, int]) -> Outcome:
    rows, step, dl, calls = got
    s = share(dl, step)
    if s <= DATALOADER_SHARE:
        return None
    return _fired(
        ctx,
        rows,
        f"Data loading takes {100 * s:.1f}% of the step time (threshold {100 * DATALOADER_SHARE:.0f}%).",
        {"dataloader_us": dl, "step_us": step, "dataloader_pct": 100 * s, "loader_calls": calls},
        dl,
        DATALOADER_SHARE,
    )


@rule(
    "input.input_bound",
    "The device waits for input (input-bound)",
    anchor="XProf",
    cause="dataloader",
    thresholds={"moderate": INPUT_BOUND_MODERATE, "high": INPUT_BOUND_HIGH},
)
@needs(_loader)
def input_bound(ctx: Context, got: tuple[list[dict[str, Any]], float, float, int]) -> Outcome:
    rows, step, _, _ = got
    if not ctx.device_types():
        # A CPU-only job: no device waits; the host's own loading is input.dataloader_share's.
        return NotEnoughData("no accelerator in the profile: no device to wait for input")
    if not ctx.device_work():
        return NotEnoughData("no device work recorded (kernels, copies), so no device idle time is measured")
    idle = float(sum(float(r["idle_in_loader_us"] or 0.0) for r in rows))
    s = share(idle, step)
    if s < INPUT_BOUND_MODERATE:
        return None
    level = "highly" if s >= INPUT_BOUND_HIGH else "moderately"
    return _fired(
        ctx,
        rows,
        f"The program is {level} input-bound: the device idles {100 * s:.1f}% of the step while the host loads data.",
        {"idle_in_loader_us": idle, "step_us": step, "input_bound_pct": 100 * s},
        idle,
        INPUT_BOUND_MODERATE,
    )


@rule(
    "input.dataloader_per_step",
    "Data loading is slow per step",
    anchor="msprof-analyze / MindInsight",
    cause="dataloader",
    thresholds={"dataloader_us_per_step": DATALOADER_US_PER_STEP},
)
@needs(_loader)
def dataloader_per_step(ctx: Context, got: tuple[list[dict[str, Any]], float, float, int]) -> Outcome:
    rows, _step, dl, _ = got
    # The per-step mean leaves the outlier steps out (they get their own advice).
    out = ctx.outliers()
    normal = [r for r in rows if r["step"] is not None and (int(r["rank"]), int(r["step"])) not in out]
    n = len(normal)
    if n == 0:
        return NotEnoughData("no step markers, so no per-step figure")
    per = sum(float(r["dataloader_us"] or 0.0) for r in normal) / n
    if per <= DATALOADER_US_PER_STEP:
        return None
    return _fired(
        ctx,
        rows,
        f"Data loading takes {per / 1000:.1f} ms per step (threshold {DATALOADER_US_PER_STEP / 1000:.0f} ms).",
        {"dataloader_us_per_step": per, "steps": n, "dataloader_us": dl},
        dl,
        DATALOADER_SHARE,
    )


@rule(
    "input.step_interval",
    "Long gaps between steps",
    anchor="msprof-analyze",
    cause="between_steps",
    thresholds={"step_interval_share": STEP_INTERVAL_SHARE},
)
def step_interval(ctx: Context) -> Outcome:
    rows = ctx.rows("dataloader")
    if not rows:
        return NotEnoughData("no events")
    out = ctx.outliers()
    normal = [r for r in rows if r["step"] is None or (int(r["rank"]), int(r["step"])) not in out]
    gaps = [float(r["gap_before_us"]) for r in normal if r["gap_before_us"] is not None]
    steps = [float(r["step_us"] or 0.0) for r in normal if r["step"] is not None]
    if not gaps or not steps:
        return NotEnoughData("fewer than two steps on a rank")
    mean_gap = sum(gaps) / len(gaps)
    mean_step = sum(steps) / len(steps)
    s = share(mean_gap, mean_step)
    if s <= STEP_INTERVAL_SHARE:
        return None
    return make(
        f"Between two steps the host spends {mean_gap / 1000:.2f} ms ({100 * s:.1f}% of a step) outside any step.",
        {"mean_gap_us": mean_gap, "mean_step_us": mean_step, "gap_pct": 100 * s, "gaps": len(gaps)},
        sum(float(r["gap_before_us"] or 0.0) for r in rows),
        "Move per-step host work (logging, metrics, checkpoint checks, .item() calls) out of the loop "
        "or make it asynchronous, and prefetch the next batch before the step ends.",
        pytorch="if step % 100 == 0:\n    log(loss.item())  # not every step",
    )
