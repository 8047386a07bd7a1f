"""Energy per step, per sample and average watts per device, from power or energy counters.

Every device backend and SMI importer writes ``power`` (W) samples into the counters
table (NVML, ``nvidia-smi dmon`` ``pwr``, hl-smi, npu-smi, cnmon, RAPL through the CPU
backend); NVML and RAPL also give a cumulative ``energy`` counter (J). For each step
window of a rank and each device of that rank with such counters:

- with an ``energy`` counter: the counter's increase over the window, read by linear
  interpolation between the samples around each edge;
- else with ``power``: the integral of the piecewise-linear interpolation of the power
  samples (the trapezoid rule), cut at the window's edges.

Outside the sampled range the edge sample's value is held. The error bound
(``error_j``) assumes power moves monotonically between two consecutive samples (a
spike shorter than the sampling interval is invisible to any sampler); docs/energy.md
derives it. Without step marks each rank's span is one window (step null); a profile
with counters but no events (an SMI log) gets one window per device: its sampled span.

Samples per step: the sum of the ``samples`` counts the script gave
``aiprof.annotate(name, samples=N)`` inside the step, else the recording's
``--batch-size`` (profile.json ``record.options.batch_size``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch

#: Counter metrics read, in order of preference per device.
ENERGY_METRIC, POWER_METRIC = "energy", "power"


def _distinct(ts: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Samples sorted by time, one per timestamp (the mean of readings taken at once)."""
    t = np.asarray(ts, dtype=np.float64)
    x = np.asarray(v, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    t, x = t[order], x[order]
    uniq, inv = np.unique(t, return_inverse=True)
    if len(uniq) == len(t):
        return t, x
    return uniq, np.bincount(inv, weights=x) / np.bincount(inv)


def integrate_power(ts: np.ndarray, w: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Joules of power samples (``ts`` ns sorted, ``w`` watts) over windows [w0, w1) ns,
    and the error bound of each (docs/energy.md)."""
    ts, w = _distinct(ts, w)
    w0 = np.asarray(w0, dtype=np.float64)
    w1 = np.asarray(w1, dtype=np.float64)
    if len(ts) == 1:
        return w[0] * (w1 - w0) / 1e9, np.zeros(len(w0))
    h = np.diff(ts)
    dp = np.diff(w)
    cum = np.concatenate([[0.0], np.cumsum(h * (w[:-1] + w[1:]) / 2.0)])  # W·ns at each sample

    def prim(x: np.ndarray) -> np.ndarray:
        """Integral of the interpolant from ts[0] to x (edge values held outside)."""
        k = np.clip(np.searchsorted(ts, x, side="right") - 1, 0, len(ts) - 2)
        d = x - ts[k]
        inside = cum[k] + w[k] * d + dp[k] * d * d / (2.0 * h[k])
        before = w[0] * (x - ts[0])
        after = cum[-1] + w[-1] * (x - ts[-1])
        return np.asarray(np.where(x < ts[0], before, np.where(x > ts[-1], after, inside)))

    joules = (prim(w1) - prim(w0)) / 1e9
    # Error: an interval wholly inside the window is off by at most h·|Δp|/2 (the
    # trapezoid is the midpoint of [h·min, h·max]); a part o of an interval cut by an
    # edge by at most o·|Δp|; held values outside the sampled span by length·(max-min).
    lo = np.maximum(ts[:-1][None, :], w0[:, None])
    hi = np.minimum(ts[1:][None, :], w1[:, None])
    overlap = np.clip(hi - lo, 0.0, None)
    full = overlap >= h[None, :]
    err = (np.where(full, 0.5, 1.0) * overlap * np.abs(dp)[None, :]).sum(axis=1)
    outside = np.clip(np.minimum(w1, ts[0]) - w0, 0.0, None) + np.clip(w1 - np.maximum(w0, ts[-1]), 0.0, None)
    err += outside * float(w.max() - w.min())
    return joules, err / 1e9


def integrate_energy(ts: np.ndarray, e: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Joules of a cumulative energy counter (``e`` J at ``ts`` ns) over windows, and the
    error bound: at each edge inside a sampling interval the split of that interval's
    energy is unknown, off by at most max(f, 1 - f) of it (f: the edge's position)."""
    ts, e = _distinct(ts, e)
    # A counter that went back (driver reload, wrap) restarts: keep it monotone.
    inc = np.concatenate([[0.0], np.clip(np.diff(e), 0.0, None)])
    cum = np.cumsum(inc)
    if len(ts) == 1:
        return np.zeros(len(np.asarray(w0))), np.zeros(len(np.asarray(w0)))
    h = np.diff(ts)
    rate = np.diff(cum) / h  # J/ns per interval
    w0 = np.asarray(w0, dtype=np.float64)
    w1 = np.asarray(w1, dtype=np.float64)

    def at(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = np.clip(np.searchsorted(ts, x, side="right") - 1, 0, len(ts) - 2)
        d = x - ts[k]
        value = np.where(
            x < ts[0],
            rate[0] * (x - ts[0]),
            np.where(x > ts[-1], cum[-1] + rate[-1] * (x - ts[-1]), cum[k] + rate[k] * d),
        )
        f = np.clip(d / h[k], 0.0, 1.0)
        inside = (x > ts[0]) & (x < ts[-1])
        err = np.where(inside, np.maximum(f, 1.0 - f) * (cum[k + 1] - cum[k]), 0.0)
        return value, err

    v0, e0 = at(w0)
    v1, e1 = at(w1)
    outside = np.clip(np.minimum(w1, ts[0]) - w0, 0.0, None) + np.clip(w1 - np.maximum(w0, ts[-1]), 0.0, None)
    err = e0 + e1 + outside * float(rate.max() - rate.min())
    # Both edges in one interval: the window's share of it is known only to that interval.
    return v1 - v0, err


def batch_size(profile: Profile) -> int | None:
    """Samples per step the recording was told (``aiprof record --batch-size``), if one."""
    sizes = {((m.get("record") or {}).get("options") or {}).get("batch_size") for m in profile.metas}
    sizes.discard(None)
    if len(sizes) == 1:
        value = sizes.pop()
        return int(value) if isinstance(value, int | float) and value > 0 else None
    return None


def step_samples(profile: Profile) -> dict[tuple[int, int], float]:
    """(rank, step) -> samples counted by ``annotate(..., samples=N)``; step -1 holds a
    rank's total (for the whole-span window of a run without step marks)."""
    t = profile.sql(
        "SELECT rank, coalesce(step, -1) AS step, sum(TRY_CAST(json_extract_string(args, '$.samples') AS DOUBLE)) "
        "FROM events WHERE kind = 'user_annotation' AND cat = 'aiprof' AND args LIKE '%\"samples\"%' GROUP BY ALL"
    )
    out: dict[tuple[int, int], float] = {}
    for r, s, n in zip(*(t.column(i).to_pylist() for i in range(3))):
        if not n:
            continue
        out[(int(r), int(s))] = out.get((int(r), int(s)), 0.0) + float(n)
        if s != -1:
            out[(int(r), -1)] = out.get((int(r), -1), 0.0) + float(n)
    return out


def _samples_of(counted: dict[tuple[int, int], float], batch: int | None, rank: int, step: int | None) -> float | None:
    n = counted.get((rank, -1 if step is None else step))
    return n if n else (float(batch) if batch else None)


def _windows(profile: Profile) -> dict[str, np.ndarray]:
    from .overview import _compute_all

    w: dict[str, np.ndarray] = _compute_all(profile)[0]
    return w


def _energy(profile: Profile) -> list[dict[str, Any]]:
    def compute() -> list[dict[str, Any]]:
        c = fetch(
            profile,
            "SELECT rank, device_type, device, metric, ts, value FROM counters "
            "WHERE metric IN (?, ?) AND value IS NOT NULL AND isfinite(value) ORDER BY rank, device_type, device, metric, ts",
            [ENERGY_METRIC, POWER_METRIC],
        )
        if not len(c["ts"]):
            return []
        w = _windows(profile)
        batch = batch_size(profile)
        counted = step_samples(profile)
        rows: list[dict[str, Any]] = []
        keys = sorted({(int(r), str(t), int(d)) for r, t, d in zip(c["rank"], c["device_type"], c["device"])})
        for rank, dtype, dev in keys:
            sel = (c["rank"] == rank) & (c["device_type"] == dtype) & (c["device"] == dev)
            metrics = set(c["metric"][sel].tolist())
            metric = (
                ENERGY_METRIC
                if ENERGY_METRIC in metrics and (sel & (c["metric"] == ENERGY_METRIC)).sum() > 1
                else POWER_METRIC
            )
            msel = sel & (c["metric"] == metric)
            ts, val = c["ts"][msel], c["value"][msel]
            if not len(ts):
                continue
            wsel = np.flatnonzero(w["rank"] == rank)
            if len(wsel):
                w0 = w["ts"][wsel].astype(np.float64)
                w1 = w0 + w["dur"][wsel]
                steps = [int(s) if s >= 0 else None for s in w["step"][wsel]]
            else:  # counters only: the sampled span is the window
                w0 = np.array([float(ts[0])])
                w1 = np.array([float(ts[-1]) if ts[-1] > ts[0] else float(ts[0]) + 1e9])
                steps = [None]
            fn = integrate_energy if metric == ENERGY_METRIC else integrate_power
            joules, err = fn(ts, val, w0, w1)
            inside = np.searchsorted(ts, w1, side="right") - np.searchsorted(ts, w0, side="left")
            for i, step in enumerate(steps):
                dur_s = (w1[i] - w0[i]) / 1e9
                samples = _samples_of(counted, batch, rank, step)
                rows.append(
                    {
                        "rank": rank,
                        "step": step,
                        "device_type": dtype,
                        "device": dev,
                        "source": metric,
                        "readings": int(inside[i]),
                        "duration_us": (w1[i] - w0[i]) / 1000.0,
                        "energy_j": float(joules[i]),
                        "error_j": float(err[i]),
                        "avg_w": float(joules[i] / dur_s) if dur_s > 0 else None,
                        "j_per_sample": float(joules[i] / samples) if samples else None,
                    }
                )
        return rows

    return profile.memo("energy", compute)


_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("device_type", pa.string()),
        ("device", pa.int64()),
        ("source", pa.string()),
        ("readings", pa.int64()),
        ("duration_us", pa.float64()),
        ("energy_j", pa.float64()),
        ("error_j", pa.float64()),
        ("avg_w", pa.float64()),
        ("j_per_sample", pa.float64()),
    ]
)


@analyser(
    "energy",
    "Energy",
    default_sort=("rank", "step", "device_type", "device"),
    units={"duration_us": "µs", "energy_j": "J", "error_j": "J", "avg_w": "W", "j_per_sample": "J"},
)
def energy(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, step window and device with power or energy counters: source
    (energy: a cumulative counter; power: integrated samples), readings (counter readings
    inside the window), duration_us, energy_j and its bound error_j (J), avg_w (W),
    j_per_sample (J, when the batch size is known). Step null: the rank's whole span
    (no step marks) or an SMI log's sampled span."""
    return pa.Table.from_pylist(_energy(profile), schema=_SCHEMA)


def step_columns(profile: Profile, rank: np.ndarray, step: np.ndarray, dur_ns: np.ndarray) -> dict[str, np.ndarray]:
    """energy_j, energy_error_j, avg_w and (batch size known) j_per_sample for the steps
    view's rows (``rank``, ``step``: -1 = no step, ``dur_ns``), all devices of the rank
    summed; an empty dict when the profile has no power or energy counters."""
    rows = _energy(profile)
    if not rows:
        return {}
    joules: dict[tuple[int, int], float] = {}
    errs: dict[tuple[int, int], float] = {}
    for r in rows:
        key = (r["rank"], -1 if r["step"] is None else r["step"])
        joules[key] = joules.get(key, 0.0) + r["energy_j"]
        errs[key] = errs.get(key, 0.0) + r["error_j"]
    keys = list(zip(rank.tolist(), step.tolist()))
    out = {
        "energy_j": np.array([joules.get(k, np.nan) for k in keys]),
        "energy_error_j": np.array([errs.get(k, np.nan) for k in keys]),
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        out["avg_w"] = np.where(dur_ns > 0, out["energy_j"] / (np.asarray(dur_ns) / 1e9), np.nan)
    batch = batch_size(profile)
    counted = step_samples(profile)
    if batch or counted:
        n = np.array([_samples_of(counted, batch, r, None if s < 0 else s) or np.nan for r, s in keys])
        out["j_per_sample"] = out["energy_j"] / n
    return out


def device_summary(profile: Profile) -> list[dict[str, Any]]:
    """Per rank and device, over all its windows: windows, energy_j, error_j, avg_w,
    j_per_step (median over marked steps; None without step marks) and j_per_sample
    (when known): the overview's energy lines."""
    groups: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for r in _energy(profile):
        groups.setdefault((r["rank"], r["device_type"], r["device"]), []).append(r)
    out = []
    for (rank, dtype, dev), rows in sorted(groups.items()):
        joules = sum(r["energy_j"] for r in rows)
        secs = sum(r["duration_us"] for r in rows) / 1e6
        per_step = [r["energy_j"] for r in rows if r["step"] is not None]
        per_sample = [r["j_per_sample"] for r in rows if r["j_per_sample"] is not None]
        out.append(
            {
                "rank": rank,
                "device_type": dtype,
                "device": dev,
                "windows": len(rows),
                "energy_j": joules,
                "error_j": sum(r["error_j"] for r in rows),
                "avg_w": joules / secs if secs > 0 else None,
                "j_per_step": float(np.median(per_step)) if per_step else None,
                "j_per_sample": float(np.median(per_sample)) if per_sample else None,
            }
        )
    return out
