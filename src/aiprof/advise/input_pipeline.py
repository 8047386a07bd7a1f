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
_LOADER_PT = (
    "loader = torch.utils.data.DataLoader(ds, batch_size=B, num_workers=8, pin_memory=True,\n"
    "                                     prefetch_factor=4, persistent_workers=True)"
)
_LOADER_MS = "dataset = dataset.batch(B, num_parallel_workers=8)  # MindSpore: parallel map/batch workers"


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


@rule(
    "input.dataloader_share",
    "Data loading takes a large share of the step",
    anchor="tb-profiler",
    cause="dataloader",
    thresholds={"dataloader_share": DATALOADER_SHARE},
)
@needs(_loader)
def dataloader_share(ctx: Context, got: tuple[list[dict[str, Any]], float, float, int]) -> Outcome:
    _, step, dl, calls = got
    s = share(dl, step)
    if s <= DATALOADER_SHARE:
        return None
    return make(
        f"Data loading takes {100 * s:.1f}% of the step time (threshold {100 * DATALOADER_SHARE:.0f}%).",
        {"dataloader_us": dl, "step_us": step, "dataloader_pct": 100 * s, "loader_calls": calls},
        dl,
        _LOADER_FIX,
        pytorch=_LOADER_PT,
        mindspore=_LOADER_MS,
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
    idle = float(sum(float(r["idle_in_loader_us"] or 0.0) for r in rows))
    s = share(idle, step)
    if s < INPUT_BOUND_MODERATE:
        return None
    level = "highly" if s >= INPUT_BOUND_HIGH else "moderately"
    return make(
        f"The program is {level} input-bound: the device idles {100 * s:.1f}% of the step while the host loads data.",
        {"idle_in_loader_us": idle, "step_us": step, "input_bound_pct": 100 * s},
        idle,
        _LOADER_FIX,
        pytorch=_LOADER_PT,
        mindspore=_LOADER_MS,
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
    return make(
        f"Data loading takes {per / 1000:.1f} ms per step (threshold {DATALOADER_US_PER_STEP / 1000:.0f} ms).",
        {"dataloader_us_per_step": per, "steps": n, "dataloader_us": dl},
        dl,
        _LOADER_FIX,
        pytorch=_LOADER_PT,
        mindspore=_LOADER_MS,
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
