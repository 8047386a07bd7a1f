"""Per-rank step times, their spread across ranks, and who arrives last at collectives.

Also home of the helpers the deeper views share: step windows per rank (host-side
``step`` spans; a rank without steps is one window over its whole span, step null)
and the merged device-busy intervals of a rank.

Views:

``ranks`` (one row per rank)
    rank, steps, step_total_us, step_mean_us (outlier steps left out), step_median_us, step_min_us,
    step_max_us (µs), step_jitter_pct ((max - min) / mean of this rank's steps, %),
    device_busy_us (union of device work inside the steps, µs), busy_pct (% of
    step_total_us); both null where the rank has no device work (not measured:
    overview.measured_ranks, the overview's rule), collectives (device collectives matched across ranks by their
    order of issue per name), last_arrivals (how many of them this rank started
    last), mean_late_us (mean start delay behind the earliest rank, µs),
    comm_us, comm_bytes (bytes where the launching call says), comm_gbps, world_size
    (the job's ranks, as the rank's trace says; null where it says none), note (why the
    communication figures are null: a DDP rank whose all-reduces ran in DDP's C++
    reducer, which default-mode recording does not see; its collectives, last_arrivals
    and comm_us are then null, not measured, not 0).

``utilization`` (one row per rank and time chunk, as nsys analyze's
gpu_time_util splits the trace)
    rank, chunk, start_us, dur_us, busy_us, busy_pct.

``gaps`` (one row per device idle gap of at least ``min_gap_us``, default 500 ms as
nsys analyze's gpu_gaps)
    rank, device, start_us, gap_us, step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from .base import SqlView, analyser
from .common import DEVICE_BUSY_KINDS, fetch, us
from .outliers import outlier_mask

_BUSY_IN = ", ".join(f"'{k}'" for k in DEVICE_BUSY_KINDS)

#: nsys analyze gpu_time_util: the trace is cut into this many chunks.
UTIL_CHUNKS = 30
#: nsys analyze gpu_gaps: the smallest gap reported (ns).
MIN_GAP_NS = 500_000_000


def step_windows(profile: Profile) -> dict[str, np.ndarray]:
    """Step windows: rank, step (-1 = no steps: the rank's whole span), start, end (ns),
    whole_span (the window is a rank without step spans: its whole span).

    The one definition of a step every view and rule uses (the overview's): the
    ``kind = 'step'`` spans of a rank, one window per step number, and a rank without
    any its whole span (a rank whose steps are marked on its device only, as Ascend
    step traces are, takes those). The last step of a rank extends to the end of the device work
    it launched (tb-profiler's rule: the profiler stops the host step before the
    device has finished it)."""
    from .derived import windows

    return profile.memo("step_windows", lambda: windows(profile) or _step_windows(profile))


#: A rank's whole span, where it has no steps: its events', and its Python samples' (the
#: last one standing for one sampling interval, the median gap of its threads' samples):
#: the events alone leave out what ran after the last one (an inference loop after its
#: setup's GC pauses, which ran 2.2 s where its events spanned 1.65 s).
_SPANS_SQL = """
    SELECT rank, min(start) AS start, max(end_) AS end_ FROM (
        SELECT rank, min(ts) AS start, max(ts + dur) AS end_ FROM events
        WHERE kind NOT IN ('other', 'instant') GROUP BY rank {sampled}
    ) GROUP BY rank ORDER BY rank
"""
_SAMPLED_SQL = """
        UNION ALL
        SELECT rank, min(ts) AS start, max(ts) + coalesce(median(gap), 0)::BIGINT AS end_ FROM (
            SELECT rank, ts, ts - lag(ts) OVER (PARTITION BY rank, pid, tid ORDER BY ts) AS gap FROM samples
        ) GROUP BY rank
"""


def _step_windows(profile: Profile) -> dict[str, np.ndarray]:
    steps = fetch(
        profile,
        "WITH s AS (SELECT rank, device_type = 'cpu' AS host, coalesce(step, -1) AS step, min(ts) AS start, "
        "max(ts + dur) AS end_ FROM events WHERE kind = 'step' GROUP BY ALL), "
        "h AS (SELECT DISTINCT rank FROM s WHERE host) "
        "SELECT rank, step, start, end_ FROM s WHERE host OR rank NOT IN (SELECT rank FROM h) ORDER BY rank, start",
    )
    tail = fetch(
        profile,
        f"""WITH last AS (SELECT rank, arg_max(step, ts) AS step FROM events WHERE kind = 'step' AND step IS NOT NULL
                          GROUP BY rank)
            SELECT e.rank, max(e.ts + e.dur) AS dev_end FROM events e JOIN last l ON l.rank = e.rank AND l.step = e.step
            WHERE e.device_type <> 'cpu' AND e.kind IN ({_BUSY_IN}) GROUP BY e.rank""",
    )
    dev_end = dict(zip(tail["rank"].tolist(), tail["dev_end"].tolist(), strict=True))
    end = steps["end_"].copy()
    for r, t in dev_end.items():
        sel = np.flatnonzero(steps["rank"] == r)
        if len(sel):
            last = sel[np.argmax(steps["start"][sel])]
            end[last] = max(int(end[last]), int(t))
    spans = fetch(profile, _SPANS_SQL.format(sampled=_SAMPLED_SQL if profile.tables.get("samples") else ""))
    have = set(steps["rank"].tolist())
    extra = [i for i, r in enumerate(spans["rank"].tolist()) if r not in have]
    return {
        "rank": np.concatenate([steps["rank"], spans["rank"][extra]]).astype(np.int64),
        "step": np.concatenate([steps["step"], np.full(len(extra), -1, dtype=np.int64)]),
        "start": np.concatenate([steps["start"], spans["start"][extra]]).astype(np.int64),
        "end": np.concatenate([end, spans["end_"][extra]]).astype(np.int64),
        "whole_span": np.concatenate([np.zeros(len(end), dtype=bool), np.ones(len(extra), dtype=bool)]),
    }


def device_busy(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Rank -> merged [start, end) intervals (ns) when any device of the rank is busy."""
    return profile.memo("device_busy", lambda: _device_busy(profile))


def _device_busy(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    d = fetch(
        profile,
        f"SELECT rank, ts, ts + dur AS te FROM events WHERE device_type <> 'cpu' AND kind IN ({_BUSY_IN}) AND dur > 0",
    )
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in np.unique(d["rank"]):
        sel = d["rank"] == r
        out[int(r)] = iv.merge(d["ts"][sel], d["te"][sel])
    return out


def step_of(w: dict[str, np.ndarray], rank: int, ts: np.ndarray) -> np.ndarray:
    """The step holding each ts on ``rank`` (-1 when none, or when the rank has no steps)."""
    sel = np.flatnonzero((w["rank"] == rank) & (w["step"] >= 0))
    out = np.full(len(ts), -1, dtype=np.int64)
    if not len(sel) or not len(ts):
        return out
    order = sel[np.argsort(w["start"][sel])]
    st, en, num = w["start"][order], w["end"][order], w["step"][order]
    i = np.searchsorted(st, ts, side="right") - 1
    ic = np.clip(i, 0, None)
    ok = (i >= 0) & (ts < en[ic])
    out[ok] = num[ic[ok]]
    return out


_RANKS_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("steps", pa.int64()),
        ("step_total_us", pa.float64()),
        ("step_mean_us", pa.float64()),
        ("step_median_us", pa.float64()),
        ("step_min_us", pa.float64()),
        ("step_max_us", pa.float64()),
        ("step_jitter_pct", pa.float64()),
        ("device_busy_us", pa.float64()),
        ("busy_pct", pa.float64()),
        ("collectives", pa.int64()),
        ("last_arrivals", pa.int64()),
        ("mean_late_us", pa.float64()),
        ("comm_us", pa.float64()),
        ("comm_bytes", pa.int64()),
        ("comm_gbps", pa.float64()),
        ("world_size", pa.int64()),
        ("note", pa.string()),
    ]
)


@analyser(
    "ranks",
    "Ranks",
    default_sort=("rank",),
    units={c: "µs" for c in _RANKS_SCHEMA.names if c.endswith("_us")}
    | {"step_jitter_pct": "%", "busy_pct": "%", "comm_bytes": "B", "comm_gbps": "GB/s"},
)
def ranks(profile: Profile, params: dict[str, Any]) -> pa.Table | SqlView:
    """One row per rank: step times, jitter, device busy share, straggler counts and
    communication bandwidth (see the module doc for the columns and units)."""
    from ..cluster.views import ranks_from_index
    from .communication import collectives
    from .overview import measured_ranks
    from .rank_waits import DDP_COMM_NOTE, ddp_ranks

    indexed = ranks_from_index(profile)  # a many-rank job: read its cluster index
    if indexed is not None:
        return indexed

    w = step_windows(profile)
    busy = device_busy(profile)
    has_device = measured_ranks(profile, "device")
    coll = collectives(profile)
    # Match the n-th collective of a name on every rank (collectives are issued in
    # the same order everywhere); the one starting last is the rank others wait for.
    last: dict[int, int] = {}
    late_sum: dict[int, float] = {}
    matched: dict[int, int] = {}
    if len(coll["rank"]) and len(np.unique(coll["rank"])) > 1:
        order = np.lexsort((coll["ts"], coll["name"], coll["rank"]))
        keys: dict[tuple[str, int], list[tuple[int, int]]] = {}
        seen: dict[tuple[int, str], int] = {}
        for i in order:
            r, n = int(coll["rank"][i]), str(coll["name"][i])
            k = seen.get((r, n), 0)
            seen[(r, n)] = k + 1
            keys.setdefault((n, k), []).append((r, int(coll["ts"][i])))
        nranks = len(np.unique(coll["rank"]))
        for group in keys.values():
            if len(group) != nranks:
                continue
            t0 = min(t for _, t in group)
            lr, lt = max(group, key=lambda x: x[1])
            for r, t in group:
                matched[r] = matched.get(r, 0) + 1
                late_sum[r] = late_sum.get(r, 0.0) + (t - t0)
            if lt > t0:
                last[lr] = last.get(lr, 0) + 1
    # A DDP rank without any recorded collective: its all-reduces ran unseen (not 0).
    hidden = ddp_ranks(profile) - set(np.unique(coll["rank"]).tolist()) - has_device
    default_ws = profile.metas[0].get("world_size") if profile.metas else None
    world = {int(r): m.get("world_size") for m in profile.metas for r in m.get("ranks") or []}
    rows: list[dict[str, Any]] = []
    for r in np.unique(w["rank"]):
        r = int(r)
        sel = w["rank"] == r
        dur = (w["end"][sel] - w["start"][sel]).astype(np.float64)
        has_steps = bool((w["step"][sel] >= 0).any())
        total = float(dur.sum())
        # Per-step means leave the outlier steps out (analysis/outliers.py).
        typical = dur[~outlier_mask(dur)] if has_steps else dur
        mean = float(typical.mean()) if len(typical) else 0.0
        b = busy.get(r)
        busy_ns: float | None = None  # not measured: the rank has no device work
        if r in has_device:
            busy_ns = float(iv.covered(b[0], b[1], w["start"][sel], w["end"][sel]).sum()) if b else 0.0
        csel = coll["rank"] == r
        cdur = float(coll["dur"][csel].sum())
        cbytes = coll["bytes"][csel]
        known = cbytes >= 0
        cb = int(cbytes[known].sum()) if known.any() else None
        kdur = float(coll["dur"][csel][known].sum())
        rows.append(
            {
                "rank": r,
                "steps": int(sel.sum()) if has_steps else 0,
                "step_total_us": total / 1000.0,
                "step_mean_us": mean / 1000.0,
                "step_median_us": float(np.median(dur)) / 1000.0 if len(dur) else None,
                "step_min_us": float(dur.min()) / 1000.0 if len(dur) else None,
                "step_max_us": float(dur.max()) / 1000.0 if len(dur) else None,
                "step_jitter_pct": 100.0 * float(dur.max() - dur.min()) / mean if has_steps and mean > 0 else None,
                "device_busy_us": busy_ns / 1000.0 if busy_ns is not None else None,
                "busy_pct": 100.0 * busy_ns / total if busy_ns is not None and total > 0 else None,
                "collectives": None if r in hidden else matched.get(r, 0),
                "last_arrivals": None if r in hidden else last.get(r, 0),
                "mean_late_us": late_sum[r] / matched[r] / 1000.0 if matched.get(r) else None,
                "comm_us": None if r in hidden else cdur / 1000.0,
                "comm_bytes": cb,
                "comm_gbps": cb / kdur if cb is not None and kdur > 0 else None,
                "world_size": world.get(r, default_ws),
                "note": DDP_COMM_NOTE if r in hidden else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=_RANKS_SCHEMA)


@analyser(
    "utilization",
    "Device utilization over time",
    default_sort=("rank", "chunk"),
    units={"start_us": "µs", "dur_us": "µs", "busy_us": "µs", "busy_pct": "%"},
)
def utilization(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank and chunk of its profiled span (``chunks`` param, default 30 as
    nsys analyze): chunk, start_us, dur_us, busy_us (device busy inside it), busy_pct (%).
    Ranks without device work have no rows."""
    n = int(params.get("chunks", UTIL_CHUNKS))
    w = step_windows(profile)
    busy = device_busy(profile)
    rows: list[dict[str, Any]] = []
    for r, (ms, me) in sorted(busy.items()):
        sel = w["rank"] == r
        if not sel.any():
            continue
        t0, t1 = int(w["start"][sel].min()), int(w["end"][sel].max())
        edges = np.linspace(t0, t1, n + 1).astype(np.int64)
        cov = iv.covered(ms, me, edges[:-1], edges[1:])
        for i in range(n):
            d = int(edges[i + 1] - edges[i])
            rows.append(
                {
                    "rank": r,
                    "chunk": i,
                    "start_us": edges[i] / 1000.0,
                    "dur_us": d / 1000.0,
                    "busy_us": int(cov[i]) / 1000.0,
                    "busy_pct": 100.0 * int(cov[i]) / d if d > 0 else None,
                }
            )
    schema = pa.schema(
        [
            ("rank", pa.int64()),
            ("chunk", pa.int64()),
            ("start_us", pa.float64()),
            ("dur_us", pa.float64()),
            ("busy_us", pa.float64()),
            ("busy_pct", pa.float64()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


@analyser("gaps", "Device idle gaps", default_sort=("-gap_us",), units={"start_us": "µs", "gap_us": "µs"})
def gaps(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per idle gap between device work of a rank's device inside its profiled
    steps, at least ``min_gap_us`` long (default 500 ms, nsys analyze's gpu_gaps):
    rank, device, step (of the gap's start; null without steps), start_us, gap_us."""
    min_gap = int(float(params.get("min_gap_us", MIN_GAP_NS / 1000)) * 1000)
    w = step_windows(profile)
    d = fetch(
        profile,
        f"SELECT rank, device, ts, ts + dur AS te FROM events WHERE device_type <> 'cpu' AND kind IN ({_BUSY_IN})",
    )
    rows: list[dict[str, Any]] = []
    pairs = sorted({(int(r), int(dv)) for r, dv in zip(d["rank"], d["device"], strict=True)})
    for r, dv in pairs:
        sel = (d["rank"] == r) & (d["device"] == dv)
        ms, me = iv.merge(d["ts"][sel], d["te"][sel])
        if len(ms) < 2:
            continue
        g0, g1 = me[:-1], ms[1:]
        big = np.flatnonzero(g1 - g0 >= min_gap)
        steps = step_of(w, r, g0[big])
        for j, i in enumerate(big):
            rows.append(
                {
                    "rank": r,
                    "device": dv,
                    "step": int(steps[j]) if steps[j] >= 0 else None,
                    "start_us": int(g0[i]) / 1000.0,
                    "gap_us": int(g1[i] - g0[i]) / 1000.0,
                }
            )
    schema = pa.schema(
        [
            ("rank", pa.int64()),
            ("device", pa.int64()),
            ("step", pa.int64()),
            ("start_us", pa.float64()),
            ("gap_us", pa.float64()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


__all__ = ["device_busy", "step_of", "step_windows", "us"]
