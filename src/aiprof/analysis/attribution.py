"""Each microsecond of step time, given to at most one cause: what the advice's gains are.

The overview's breakdown counts each instant once, in a priority order; this view does
the same with causes a fix can act on. Every instant of a rank's profiled time (its
step windows and the gaps between consecutive steps) goes to the first cause active at
that instant, in the order of :data:`CAUSES`; what none of them covers is
``unaccounted``. A piece of advice gains at most the time given to its cause, so the
gains of advice about different causes add up to at most 100% by construction.

Causes, highest priority first:

- ``between_steps``: host time between the end of one step and the start of the next;
- ``outlier_step``: the whole of a step that is an outlier (analysis/outliers.py), but
  its garbage-collector pauses (they go to ``gc``);
- ``compute``: device compute kernels (HTA's COMPUTATION kernels);
- ``communication``: collectives on the device, and host communication calls
  (gloo / c10d ops) while no compute runs;
- ``memcpy``: device copies and sets, and kernels that only move memory;
- ``launch_delay``: the device idle inside a launch that waited more than HTA's
  100 µs to start (the work is queued; the host is not what it waits for);
- ``gc``: garbage-collector pauses while the device is idle;
- ``sync``: the host blocked in a synchronizing call (synchronize, blocking copies,
  ``.item()``, ``.cpu()``) or a device-side wait, while nothing above runs;
- ``dataloader``: data loading while the device is idle;
- ``launch``, ``context_init``, ``memory_mgmt``, ``setup``: runtime calls of the
  classes launch, context, memory and setup (analysis/runtime.py) while the device is
  idle (``context_init``: the call that created the device context, a long first
  ``cudaMalloc`` for instance: one-time start-up, not allocator time);
- ``host``: any other host operator or annotation while the device is idle (the device
  waits for the host's Python and framework work);
- ``unaccounted``: nothing recorded explains the time.

New causes plug in with :func:`register` (a name, a place in the order, and a function
returning the cause's intervals per rank); the rules that claim them name the cause.

``attribution`` (one row per rank, step and cause with time; a rank without steps
has one window, step null)
    rank, step, outlier (the step is an outlier), cause, time_us (µs), window_us (the
    step and the gap before it, µs), pct (% of window_us).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from .base import analyser
from .common import COMM_NAME_SQL, COMPUTE_SQL, fetch, unions
from .dataloader import loader_spans
from .launch import long_delay_intervals
from .outliers import outlier_mask
from .ranks import step_windows
from .runtime import runtime_calls
from .sync import blocking_calls

Intervals = dict[int, tuple[np.ndarray, np.ndarray]]
"""Rank -> (starts, ends) in ns, merged or not: the causes are read as unions."""


@dataclass(frozen=True)
class Cause:
    name: str
    title: str
    intervals: Callable[[Profile], Intervals]


def by_rank(d: dict[str, np.ndarray], start: str = "ts", end: str = "te") -> Intervals:
    """Columns rank / start / end of a fetch, split per rank."""
    out: Intervals = {}
    for r in np.unique(d["rank"]):
        sel = d["rank"] == r
        out[int(r)] = (d[start][sel].astype(np.int64), d[end][sel].astype(np.int64))
    return out


def _sql(where: str) -> Callable[[Profile], Intervals]:
    def f(profile: Profile) -> Intervals:
        # Merged as read (the causes are used as unions): memory holds the unions.
        got = unions(profile, f"SELECT rank, ts, ts + dur AS te FROM events WHERE dur > 0 AND ({where})")
        return {k[0]: v for k, v in got.items()}

    return f


def _runtime(cls: str) -> Callable[[Profile], Intervals]:
    def f(profile: Profile) -> Intervals:
        c = runtime_calls(profile)
        sel = c["class"] == cls
        return by_rank({k: c[k][sel] for k in ("rank", "ts", "te")})

    return f


def _sync(profile: Profile) -> Intervals:
    host = blocking_calls(profile)
    dev = fetch(
        profile,
        "SELECT rank, ts, ts + dur AS te FROM events WHERE device_type <> 'cpu' AND dur > 0 "
        "AND (kind = 'sync' OR (kind = 'kernel' AND name LIKE '%Sync%'))",
    )
    return by_rank({k: np.concatenate([host[k], dev[k]]) for k in ("rank", "ts", "te")})


def _windows_of(kind: str) -> Callable[[Profile], Intervals]:
    def f(profile: Profile) -> Intervals:
        w = windows(profile)
        sel = w["kind"] == kind
        return by_rank({"rank": w["rank"][sel], "ts": w["start"][sel], "te": w["end"][sel]})

    return f


def minus(s: np.ndarray, e: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals (s, e) less the intervals (cs, ce), ns."""
    if not len(cs) or not len(s):
        return s, e
    ms, me = iv.merge(cs, ce)
    out_s: list[int] = []
    out_e: list[int] = []
    for a, b in zip(s.tolist(), e.tolist(), strict=True):
        i = int(np.searchsorted(me, a, side="right"))
        cur = a
        while i < len(ms) and ms[i] < b:
            if ms[i] > cur:
                out_s.append(cur)
                out_e.append(int(ms[i]))
            cur = max(cur, int(me[i]))
            i += 1
        if cur < b:
            out_s.append(cur)
            out_e.append(b)
    return np.array(out_s, dtype=np.int64), np.array(out_e, dtype=np.int64)


def _outlier_steps(profile: Profile) -> Intervals:
    """Outlier steps less their garbage-collector pauses: a step that is an outlier
    because the collector walked the heap in it has a cause (``gc``), which takes that
    time in its own place in the order."""
    steps = _windows_of("outlier")(profile)
    gc = _sql(f"{_HOST} AND kind = 'gc'")(profile)
    empty = np.zeros(0, dtype=np.int64)
    return {r: minus(s, e, *gc.get(r, (empty, empty))) for r, (s, e) in steps.items()}


_DEVICE = "device_type <> 'cpu'"
_HOST = "device_type = 'cpu'"

#: The causes in priority order (module doc). Edit through :func:`register`.
CAUSES: list[Cause] = [
    Cause("between_steps", "Between steps", _windows_of("gap")),
    Cause("outlier_step", "Outlier steps", _outlier_steps),
    Cause("compute", "Device compute", _sql(f"{_DEVICE} AND {COMPUTE_SQL}")),
    Cause(
        "communication",
        "Communication",
        _sql(
            f"({_DEVICE} AND kind = 'collective') OR ({_HOST} AND kind IN ('cpu_op', 'user_annotation') AND {COMM_NAME_SQL})"
        ),
    ),
    Cause(
        "memcpy",
        "Copies and sets",
        _sql(f"{_DEVICE} AND (kind IN ('memcpy', 'memset') OR (kind = 'kernel' AND NOT {COMPUTE_SQL}))"),
    ),
    Cause("launch_delay", "Long launch delays", lambda p: long_delay_intervals(p)),
    Cause("gc", "Garbage collection", _sql(f"{_HOST} AND kind = 'gc'")),
    Cause("sync", "Synchronization", _sync),
    Cause("dataloader", "Data loading", lambda p: by_rank(loader_spans(p))),
    Cause("launch", "Launch calls", _runtime("launch")),
    Cause("context_init", "Device context creation", _runtime("context")),
    Cause("memory_mgmt", "Allocator calls", _runtime("memory")),
    Cause("setup", "Setup calls", _runtime("setup")),
    Cause("host", "Host work", _sql(f"{_HOST} AND kind IN ('cpu_op', 'user_annotation', 'python')")),
]
UNACCOUNTED = "unaccounted"


def register(cause: Cause, before: str = "host") -> None:
    """Insert ``cause`` into the priority order just before the cause named ``before``
    (or replace a cause of the same name in place)."""
    names = [c.name for c in CAUSES]
    if cause.name in names:
        CAUSES[names.index(cause.name)] = cause
        return
    CAUSES.insert(names.index(before), cause)


def windows(profile: Profile) -> dict[str, np.ndarray]:
    """The windows time is attributed in: the steps (kind 'step', or 'outlier' for an
    outlier step) and the gaps between consecutive steps of a rank (kind 'gap', labelled
    with the step after them). rank, step, kind, start, end (ns)."""

    def build() -> dict[str, np.ndarray]:
        w = step_windows(profile)
        rank: list[int] = []
        step: list[int] = []
        kind: list[str] = []
        start: list[int] = []
        end: list[int] = []
        for r in np.unique(w["rank"]):
            sel = np.flatnonzero(w["rank"] == r)
            sel = sel[np.argsort(w["start"][sel], kind="stable")]
            s0, s1, num = w["start"][sel], w["end"][sel], w["step"][sel]
            out = outlier_mask((s1 - s0).astype(np.float64)) if (num >= 0).all() else np.zeros(len(sel), bool)
            reach = None
            for j in range(len(sel)):
                # A gap follows the step before it (its number minus one): between two
                # windows of a profiler's schedule (steps 8, then 13) nothing was recorded.
                if reach is not None and s0[j] > reach and num[j] >= 0 and num[j - 1] == num[j] - 1:
                    rank.append(int(r))
                    step.append(int(num[j]))
                    kind.append("gap")
                    start.append(int(reach))
                    end.append(int(s0[j]))
                rank.append(int(r))
                step.append(int(num[j]))
                kind.append("outlier" if out[j] else "step")
                start.append(int(s0[j]))
                end.append(int(s1[j]))
                reach = int(s1[j]) if reach is None else max(reach, int(s1[j]))
        return {
            "rank": np.array(rank, dtype=np.int64),
            "step": np.array(step, dtype=np.int64),
            "kind": np.array(kind, dtype=object),
            "start": np.array(start, dtype=np.int64),
            "end": np.array(end, dtype=np.int64),
        }

    return profile.memo("attribution_windows", build)


def attribute(profile: Profile) -> dict[str, Any]:
    """Per window (see :func:`windows`): the time of each cause, ns. Returns the windows
    and ``time``: cause name -> int64 array aligned with them."""

    def build() -> dict[str, Any]:
        w = windows(profile)
        n = len(w["rank"])
        names = [c.name for c in CAUSES]
        time = {c: np.zeros(n, dtype=np.int64) for c in [*names, UNACCOUNTED]}
        sources = [c.intervals(profile) for c in CAUSES]
        empty = np.zeros(0, dtype=np.int64)
        for r in np.unique(w["rank"]):
            wsel = np.flatnonzero(w["rank"] == r)
            w0, w1 = w["start"][wsel], w["end"][wsel]
            acc_s, acc_e = empty, empty
            prev = np.zeros(len(wsel), dtype=np.int64)
            for name, src in zip(names, sources, strict=True):
                s, e = src.get(int(r), (empty, empty))
                if len(s):
                    acc_s, acc_e = iv.merge(np.concatenate([acc_s, s]), np.concatenate([acc_e, e]))
                cov = iv.covered(acc_s, acc_e, w0, w1) if len(acc_s) else prev
                time[name][wsel] = cov - prev
                prev = cov
            time[UNACCOUNTED][wsel] = (w1 - w0) - prev
        return {"windows": w, "time": time}

    return profile.memo("attribution", build)


_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("outlier", pa.bool_()),
        ("cause", pa.string()),
        ("time_us", pa.float64()),
        ("window_us", pa.float64()),
        ("pct", pa.float64()),
    ]
)


@analyser(
    "attribution",
    "Step time by cause",
    default_sort=("rank", "step", "-time_us"),
    units={"time_us": "µs", "window_us": "µs", "pct": "%"},
)
def attribution(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, step and cause that has time (module doc: causes and columns)."""
    a = attribute(profile)
    w, time = a["windows"], a["time"]
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(len(w["rank"])):
        groups.setdefault((int(w["rank"][i]), int(w["step"][i])), []).append(i)
    rows: list[dict[str, Any]] = []
    for (r, s), idx in sorted(groups.items()):
        ix = np.array(idx)
        win = int((w["end"][ix] - w["start"][ix]).sum())
        outlier = bool((w["kind"][ix] == "outlier").any())
        for cause, t in time.items():
            v = int(t[ix].sum())
            if v <= 0:
                continue
            rows.append(
                {
                    "rank": r,
                    "step": s if s >= 0 else None,
                    "outlier": outlier,
                    "cause": cause,
                    "time_us": v / 1000.0,
                    "window_us": win / 1000.0,
                    "pct": 100.0 * v / win if win > 0 else None,
                }
            )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
