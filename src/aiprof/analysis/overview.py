"""Where the time goes: the step time breakdown, device temporal breakdown, utilization.

Two views share the computation:

``overview`` (long form, one row per figure)
    section      'breakdown' (tb-profiler's split of step time), 'device' (Holistic
                 Trace Analysis's idle / compute / non_compute), 'utilization', or
                 'phases' (the step time by phase from the Python samples:
                 forward, backward, optimizer... analysis/phases.py)
    rank, device device is null for host-side figures
    step         null = over all steps
    category     breakdown: kernel, memcpy, memset, communication, runtime,
                 dataloader, cpu_exec, other; device: idle, compute, non_compute;
                 utilization: device_busy
    time_us      µs
    percent      % of the step time (breakdown, utilization) or of the device's
                 active span (device, as HTA defines it)

``steps`` (one row per rank and step)
    rank, step, start_us, duration_us, the breakdown categories as <category>_us,
    device_busy_us, idle_us, compute_us, non_compute_us (device figures inside the
    step's window, all devices of the rank together), outlier (analysis/outliers.py),
    <phase>_us for each phase of analysis/phases.py (forward_us, backward_us,
    optimizer_us, data_loading_us, sync_us, collective_us, logging_us,
    other_python_us; null where the step has no Python sample: not measured, as on a
    trace imported from a vendor's profiler); with power or energy counters also
    energy_j, energy_error_j, avg_w and j_per_sample (see energy.py).

Breakdown: each instant of a step is counted once, in the first category active at
that instant in this priority: kernel > memcpy > memset > communication > runtime >
dataloader > cpu_exec; what is left is other. Without step markers the whole trace
span of a rank is one window, reported as step null.

A figure whose source the rank's events lack is null (not measured), never 0
(:data:`SOURCES_SQL`, :func:`measured_of`): without device work (kernels, copies,
memsets, collectives or syncs on a device) kernel, memcpy, memset, device_busy, idle,
compute and non_compute; without host operators (``cpu_op`` / ``python`` events: a
recording without ``--ops``) cpu_exec, unless the job's own annotations cover it, and
dataloader, unless DataLoader spans do; communication needs device work, operators or
collective events, runtime device work, operators or runtime calls; other (the step
time in none of the measured categories) is null where no category is measured. A
category measured as zero stays 0. Profiles with device work and operators (every
Kineto trace of a GPU job) have every figure, unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from . import step_trace
from .base import analyser
from .common import COMM_NAME_SQL, COMPUTE_SQL, DEVICE_BUSY_SQL, hta_window, pct, unions, us
from .outliers import outlier_mask
from .ranks import step_windows

#: Key -> the union of its intervals (common.unions).
Unions = dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]

CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")

_CATEGORY_SQL = f"""
    CASE
      WHEN device_type <> 'cpu' AND kind = 'kernel' THEN 0
      WHEN device_type <> 'cpu' AND kind = 'memcpy' THEN 1
      WHEN device_type <> 'cpu' AND kind = 'memset' THEN 2
      WHEN kind = 'collective' THEN 3
      WHEN device_type = 'cpu' AND kind IN ('cpu_op', 'user_annotation') AND {COMM_NAME_SQL} THEN 3
      WHEN device_type = 'cpu' AND kind IN ('runtime', 'driver') THEN 4
      WHEN kind = 'dataloader' THEN 5
      WHEN device_type = 'cpu' AND kind IN ('cpu_op', 'user_annotation', 'python') THEN 6
      ELSE -1 END
"""


#: Per rank, the sources of the breakdown the events hold (see the module doc).
SOURCES = ("device", "operators", "dataloader", "annotations", "collectives", "runtime")
SOURCES_SQL = f"""
    SELECT rank,
      bool_or(device_type <> 'cpu' AND kind IN {DEVICE_BUSY_SQL}) AS device,
      bool_or(device_type = 'cpu' AND kind IN ('cpu_op', 'python')) AS operators,
      bool_or(kind = 'dataloader') AS dataloader,
      bool_or(device_type = 'cpu' AND kind = 'user_annotation' AND NOT starts_with(coalesce(name, ''), 'aiprof: '))
        AS annotations,
      bool_or(kind = 'collective') AS collectives,
      bool_or(device_type = 'cpu' AND kind IN ('runtime', 'driver')) AS runtime
    FROM events GROUP BY rank
"""
#: Figure -> the sources any one of which measures it. ``device`` stands for the device
#: figures (device_busy, idle, compute, non_compute); ``other`` is measured where any
#: category is.
NEEDS: dict[str, tuple[str, ...]] = {
    "kernel": ("device",),
    "memcpy": ("device",),
    "memset": ("device",),
    "communication": ("device", "operators", "collectives"),
    "runtime": ("device", "operators", "runtime"),
    "dataloader": ("operators", "dataloader"),
    "cpu_exec": ("operators", "annotations"),
    "device": ("device",),
}
#: The key of a figure's measured mask (one bool per window) among the breakdown's arrays.
MEASURED = "measured:"


def sources(profile: Profile) -> dict[int, dict[str, bool]]:
    """Rank -> which sources of the breakdown its events hold (:data:`SOURCES_SQL`)."""
    t = profile.sql(SOURCES_SQL).to_pylist()
    return {int(r["rank"]): {k: bool(r[k]) for k in SOURCES} for r in t if r["rank"] is not None}


def measured_ranks(profile: Profile, figure: str) -> set[int]:
    """The ranks where ``figure`` (a key of :data:`NEEDS`) is measured: those whose events
    hold one of its sources. The views outside the breakdown whose figures come from the
    same source (the ranks view's device busy time, the dataloader view's idle time, the
    cluster index's device columns) read it here, so a figure is null on the same
    profiles. From the derived tables where the profile has them (as the overview reads
    them), else by :data:`SOURCES_SQL`."""
    from .derived import load_totals

    def compute() -> set[int]:
        totals = load_totals(profile)
        if totals is not None:
            w, b = totals[0], totals[1]
            return {int(r) for r in np.unique(w["rank"][measured(b, figure)])}
        return {r for r, s in sources(profile).items() if any(s[k] for k in NEEDS[figure])}

    return profile.memo(f"measured_ranks:{figure}", compute)


def measured_of(src: dict[int, dict[str, bool]], w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per window, whether each figure of :data:`NEEDS` is measured, keyed MEASURED + figure."""
    out: dict[str, np.ndarray] = {}
    ranks = w["rank"].tolist()
    for fig, needs in NEEDS.items():
        have = [any(src.get(int(r), {}).get(k, False) for k in needs) for r in ranks]
        out[MEASURED + fig] = np.array(have, dtype=bool)
    return out


def measured(b: dict[str, np.ndarray], figure: str) -> np.ndarray:
    """Per window, whether ``figure`` (a category, ``device`` or ``other``) is measured."""
    if figure == "other":
        return np.asarray(np.logical_or.reduce([measured(b, c) for c in CATEGORIES]), dtype=bool)
    m = b.get(MEASURED + figure)
    return np.ones(len(b[CATEGORIES[0]]), dtype=bool) if m is None else np.asarray(m, dtype=bool)


def _windows(profile: Profile) -> dict[str, np.ndarray]:
    """Step windows per rank (ranks.step_windows, the one definition) as ts / dur."""
    w = step_windows(profile)
    return {
        "rank": w["rank"],
        "step": w["step"],
        "ts": w["start"],
        "dur": w["end"] - w["start"],
        "whole_span": w["whole_span"],
    }


def _breakdown(profile: Profile, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per window: time of each category (ns), with the priority rule."""
    # (rank, category) -> union: the priority rule reads only unions.
    sql = (
        f"SELECT rank, {_CATEGORY_SQL} AS cat, ts, ts + dur AS te FROM events WHERE dur > 0 AND ({_CATEGORY_SQL}) >= 0"
    )
    return breakdown_of(unions(profile, sql, keys=2), w)


def breakdown_of(by_cat: Unions, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The priority rule over the unions of each (rank, category index) (consumed)."""
    none = np.zeros(0, dtype=np.int64)
    n = len(w["rank"])
    out = {c: np.zeros(n, dtype=np.int64) for c in CATEGORIES}
    out["device_busy"] = np.zeros(n, dtype=np.int64)
    for r in np.unique(w["rank"]):
        wsel = np.flatnonzero(w["rank"] == r)
        w0 = w["ts"][wsel]
        w1 = w0 + w["dur"][wsel]
        prev = np.zeros(len(wsel), dtype=np.int64)
        acc_s, acc_e = none, none
        for ci, c in enumerate(CATEGORIES):
            s, e = by_cat.pop((int(r), ci), (none, none))
            acc_s, acc_e = iv.merge(np.concatenate([acc_s, s]), np.concatenate([acc_e, e]))
            cov = iv.covered(acc_s, acc_e, w0, w1)
            out[c][wsel] = cov - prev
            prev = cov
            if ci == 2:  # kernel + memcpy + memset: the device is busy
                out["device_busy"][wsel] = cov
    return out


def _device(profile: Profile, w: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """HTA's temporal breakdown per rank (overall: span, busy, compute ns), and the
    device's busy and compute time per step window. Every figure is a length of a
    union, so the device operations are read as unions per (rank, compute) (common.unions)."""
    d = unions(
        profile,
        f"SELECT rank, coalesce(compute, false)::INTEGER AS c, ts, ts + dur AS te FROM {hta_window(profile)}",
        2,
    )
    allk = unions(
        profile,
        f"SELECT rank, coalesce({COMPUTE_SQL}, false)::INTEGER AS c, ts, ts + dur AS te FROM events "
        f"WHERE device_type <> 'cpu' AND kind IN {DEVICE_BUSY_SQL}",
        2,
    )
    return device_of(d, allk, w)


def device_of(d: Unions, allk: Unions, w: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`_device` from the unions per (rank, compute) of the device operations in
    HTA's window (``d``) and of all of them (``allk``)."""
    none = np.zeros(0, dtype=np.int64)

    def both(u: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]], r: int) -> tuple[np.ndarray, np.ndarray]:
        (s0, e0), (s1, e1) = u.get((r, 0), (none, none)), u.get((r, 1), (none, none))
        return iv.merge(np.concatenate([s0, s1]), np.concatenate([e0, e1]))

    dev: dict[str, list[int]] = {k: [] for k in ("rank", "span", "busy", "compute")}
    n = len(w["rank"])
    per = {k: np.zeros(n, dtype=np.int64) for k in ("busy", "compute")}
    for r in sorted({k[0] for k in d} | {k[0] for k in allk}):
        ms, me = both(d, r)
        if len(ms):
            cs, ce = d.get((r, 1), (none, none))
            for k, v in (
                ("rank", int(r)),
                ("span", int(me.max() - ms.min())),
                ("busy", int((me - ms).sum())),
                ("compute", int((ce - cs).sum())),
            ):
                dev[k].append(v)
        wsel = np.flatnonzero(w["rank"] == r)
        ms, me = both(allk, r)
        if len(ms) and len(wsel):
            w0 = w["ts"][wsel]
            w1 = w0 + w["dur"][wsel]
            per["busy"][wsel] = iv.covered(ms, me, w0, w1)
            cs, ce = allk.get((r, 1), (none, none))
            per["compute"][wsel] = iv.covered(cs, ce, w0, w1)
    return {k: np.array(v, dtype=np.int64) for k, v in dev.items()}, per


def _device_rows(dev: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The 'device' section: idle / compute / non_compute of each rank's active span."""
    rows: list[dict[str, Any]] = []
    for r, span, busy, compute in zip(*(dev[k].tolist() for k in ("rank", "span", "busy", "compute")), strict=True):
        for cat, v in (("idle", span - busy), ("compute", compute), ("non_compute", busy - compute)):
            rows.append(
                {
                    "section": "device",
                    "rank": r,
                    "device": None,
                    "step": None,
                    "category": cat,
                    "time_us": v / 1000.0,
                    "percent": float(pct(v, span)),
                }
            )
    return rows


Totals = tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]
"""Step windows (rank, step, ts, dur, whole_span), the breakdown per window, HTA's device
figures per rank, the device's busy / compute per window: all ns."""


def compute_totals(profile: Profile) -> Totals:
    """The overview's totals computed from the events (the rule; store/derived.py keeps
    them at import)."""
    w = _windows(profile)
    b = _breakdown(profile, w) | measured_of(sources(profile), w)
    dev, per = _device(profile, w)
    return w, b, dev, per


def _compute_all(profile: Profile) -> Totals:
    from .derived import load_totals

    return profile.memo("overview", lambda: load_totals(profile) or compute_totals(profile))


_OVERVIEW_SCHEMA = pa.schema(
    [
        ("section", pa.string()),
        ("rank", pa.int64()),
        ("device", pa.int64()),
        ("step", pa.int64()),
        ("category", pa.string()),
        ("time_us", pa.float64()),
        ("percent", pa.float64()),
    ]
)


@analyser("overview", "Overview", units={"time_us": "µs", "percent": "%"})
def overview(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """Step time breakdown, device temporal breakdown and utilization (see module doc)."""
    w, b, dev, per = _compute_all(profile)
    m = {f: measured(b, f) for f in (*CATEGORIES, "other", "device")}
    rows: list[dict[str, Any]] = []
    for r in np.unique(w["rank"]):
        sel = np.flatnonzero(w["rank"] == r)
        total = int(w["dur"][sel].sum())
        has_steps = bool((w["step"][sel] >= 0).any())
        scopes: list[tuple[int | None, np.ndarray]] = [(None, sel)]
        if has_steps:
            scopes += [(int(w["step"][i]), np.array([i])) for i in sel]
        for step, idx in scopes:
            win = int(w["dur"][idx].sum())
            used = 0
            for c in CATEGORIES:
                v = int(b[c][idx].sum()) if bool(m[c][idx].any()) else None
                used += v or 0
                rows.append(_figure("breakdown", int(r), step, c, v, win))
            other = max(win - used, 0) if bool(m["other"][idx].any()) else None
            rows.append(_figure("breakdown", int(r), step, "other", other, win))
        busy = int(per["busy"][sel].sum()) if bool(m["device"][sel].any()) else None
        rows.append(_figure("utilization", int(r), None, "device_busy", busy, total))
    rows.extend(_device_rows(dev))
    rows.extend(phase_section(profile))
    return pa.Table.from_pylist(rows, schema=_OVERVIEW_SCHEMA)


def _figure(section: str, rank: int, step: int | None, category: str, ns: int | None, of: int) -> dict[str, Any]:
    """One overview row; ``ns`` None: not measured (time and share null)."""
    return {
        "section": section,
        "rank": rank,
        "device": None,
        "step": step,
        "category": category,
        "time_us": None if ns is None else ns / 1000.0,
        "percent": None if ns is None else float(pct(ns, of)),
    }


def phase_section(profile: Profile) -> list[dict[str, Any]]:
    """The 'phases' section: step time by phase from the Python samples (analysis.phases)."""
    from .phases import phase_rows

    return [
        {"section": "phases", "rank": r["rank"], "device": None, "step": r["step"], "category": r["phase"]}
        | {"time_us": r["time_us"], "percent": r["percent"]}
        for r in phase_rows(profile)
    ]


@analyser("steps", "Steps", default_sort=("rank", "step"), units={"duration_us": "µs", "start_us": "µs"})
def steps(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank and step: start_us, duration_us, <category>_us for the
    breakdown categories and other_us, device_busy_us, idle_us, compute_us,
    non_compute_us (all µs), outlier (the step is an outlier: analysis/outliers.py;
    per-step means leave it out); where the step trace has its points, MindInsight's
    iteration_interval_us, fp_and_bp_us, tail_us and step_trace_comm_us too; the
    phases from the Python samples as <phase>_us. A figure the profile did not measure
    is null, never 0: a breakdown category or device figure whose source the rank's
    events lack (module doc: no device work, no host operators), a phase in a step
    without Python samples (every trace imported from a vendor's profiler), a step trace
    figure of a step without its points, the step trace's communication where it has no
    communication points."""
    w, b, _, per = _compute_all(profile)
    m = {f: measured(b, f) for f in (*CATEGORIES, "other", "device")}
    used = sum(np.where(m[c], b[c], 0) for c in CATEGORIES)
    cols: dict[str, Any] = {
        "rank": w["rank"],
        "step": pa.array(w["step"], mask=w["step"] < 0),
        "start_us": us(w["ts"]),
        "duration_us": us(w["dur"]),
    }

    def fig(ns: np.ndarray, ok: np.ndarray) -> pa.Array:
        return pa.array(us(ns), type=pa.float64(), mask=~ok)

    for c in CATEGORIES:
        cols[f"{c}_us"] = fig(b[c], m[c])
    cols["other_us"] = fig(np.maximum(w["dur"] - used, 0), m["other"])
    dm = m["device"]
    cols["device_busy_us"] = fig(per["busy"], dm)
    cols["idle_us"] = fig(np.maximum(w["dur"] - per["busy"], 0), dm)
    cols["compute_us"] = fig(per["compute"], dm)
    cols["non_compute_us"] = fig(per["busy"] - per["compute"], dm)
    cols["outlier"] = _outliers(w)

    from .energy import step_columns  # energy reads this module's windows

    cols.update(step_columns(profile, w["rank"], w["step"], w["dur"]))
    cols.update(step_trace.columns(profile, w["rank"], w["step"]))  # where the step trace has its points
    cols.update(phase_columns(profile, w["rank"], w["step"]))
    return pa.table(cols)


def _outliers(w: dict[str, np.ndarray]) -> np.ndarray:
    """True for the outlier steps of each rank (analysis/outliers.py's rule)."""
    out = np.zeros(len(w["rank"]), dtype=bool)
    for r in np.unique(w["rank"]):
        sel = np.flatnonzero((w["rank"] == r) & (w["step"] >= 0))
        out[sel] = outlier_mask(w["dur"][sel].astype(np.float64))
    return out


def phase_columns(profile: Profile, rank: np.ndarray, step: np.ndarray) -> dict[str, Any]:
    """<phase>_us per (rank, step) window, from the Python samples (analysis.phases):
    null where the window holds no sample of the step thread (not measured: a trace
    without Python samples, or a step shorter than the sampling interval); a phase
    none of the window's samples fell in is a measured 0."""
    from .phases import PHASES, classify, window_times

    c = classify(profile)
    counts, ns = window_times(profile)
    at = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(c.w_rank.tolist(), c.w_step.tolist(), strict=True))}
    idx = np.array([at.get((int(r), int(s)), -1) for r, s in zip(rank, step, strict=True)], dtype=np.int64)
    sampled = counts.sum(axis=1) > 0 if len(counts) else np.zeros(0, dtype=bool)
    measured = (idx >= 0) & (sampled[np.clip(idx, 0, None)] if len(sampled) else False)
    return {
        f"{p}_us": pa.array(
            us(np.where(measured, ns[p][np.clip(idx, 0, None)] if len(ns[p]) else 0, 0)), mask=~measured
        )
        for p in PHASES
    }
