"""Kernel launch overhead: how long the host takes to launch device work, and how
long the work then waits before it starts (Holistic Trace Analysis's launch stats).

``launches`` (one row per launch: a host runtime/driver call and the device work
with the same correlation)
    rank, step, operator (innermost host operator that made the call, through
    external_id; '(no operator)'), runtime (call name), kind (kernel, memcpy, memset,
    collective), kernel (device work name), device, stream, ts_us (call start),
    runtime_us (call duration), delay_us (device start - call end, µs; HTA's launch
    delay), kernel_us.

``launch`` (one row per rank and operator, plus one row per rank with operator
'(all)')
    rank, operator, launches, runtime_us, runtime_median_us, runtime_p95_us,
    delay_median_us, delay_p95_us, delay_max_us (µs), long_runtime (calls over 50 µs,
    HTA's cutoff), long_delay (delays over 100 µs), kernel_us (kind kernel only),
    short_kernels (kernels under 10 µs), short_kernel_us, short_kernel_pct (% of
    kernel_us). On the '(all)' rows only: launch_idle_us (time the host spends in
    launch calls while every device of the rank is idle: XProf's kernel-launch time),
    delay_idle_us (device idle time inside the delays over 100 µs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from .base import analyser
from .common import fetch
from .ranks import device_busy

#: HTA's cutoffs (get_cuda_kernel_launch_stats): runtime calls and launch delays
#: longer than these are outliers; kernels shorter than SHORT_KERNEL_NS are "short".
RUNTIME_CUTOFF_NS = 50_000
DELAY_CUTOFF_NS = 100_000
SHORT_KERNEL_NS = 10_000

_LAUNCH_SQL = """
    WITH rt AS (
        SELECT rank, correlation, arg_min(name, ts) AS runtime, min(ts) AS ts, arg_min(dur, ts) AS dur,
               arg_min(external_id, ts) AS external_id, arg_min(step, ts) AS step
        FROM events WHERE device_type = 'cpu' AND kind IN ('runtime', 'driver') AND correlation IS NOT NULL
        GROUP BY rank, correlation),
    ops AS (
        SELECT rank, external_id, arg_min(name, dur) AS op FROM events
        WHERE device_type = 'cpu' AND kind = 'cpu_op' AND external_id IS NOT NULL GROUP BY rank, external_id)
    SELECT d.rank, coalesce(d.step, r.step, -1) AS step, coalesce(o.op, '(no operator)') AS operator,
           r.runtime, d.kind, d.name AS kernel, d.device, d.tid AS stream, r.ts, r.dur AS runtime_ns,
           d.ts - (r.ts + r.dur) AS delay_ns, d.dur AS kernel_ns, d.ts AS kts
    FROM events d
    JOIN rt r ON r.rank = d.rank AND r.correlation = d.correlation
    LEFT JOIN ops o ON o.rank = r.rank AND o.external_id = r.external_id
    WHERE d.device_type <> 'cpu' AND d.kind IN ('kernel', 'memcpy', 'memset', 'collective')
    ORDER BY d.rank, r.ts
"""


def launch_rows(profile: Profile) -> dict[str, np.ndarray]:
    """The launches as numpy columns (ns): see ``launches``."""
    return fetch(profile, _LAUNCH_SQL)


_LAUNCHES_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("operator", pa.string()),
        ("runtime", pa.string()),
        ("kind", pa.string()),
        ("kernel", pa.string()),
        ("device", pa.int64()),
        ("stream", pa.int64()),
        ("ts_us", pa.float64()),
        ("runtime_us", pa.float64()),
        ("delay_us", pa.float64()),
        ("kernel_us", pa.float64()),
    ]
)


@analyser(
    "launches",
    "Kernel launches",
    default_sort=("-delay_us",),
    units={"ts_us": "µs", "runtime_us": "µs", "delay_us": "µs", "kernel_us": "µs"},
)
def launches(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per launch (see the module doc for the columns)."""
    d = launch_rows(profile)
    step = d["step"]
    return pa.table(
        {
            "rank": d["rank"],
            "step": pa.array(step, mask=step < 0),
            "operator": d["operator"].astype(str),
            "runtime": d["runtime"].astype(str),
            "kind": d["kind"].astype(str),
            "kernel": d["kernel"].astype(str),
            "device": d["device"],
            "stream": d["stream"],
            "ts_us": d["ts"] / 1000.0,
            "runtime_us": d["runtime_ns"] / 1000.0,
            "delay_us": d["delay_ns"] / 1000.0,
            "kernel_us": d["kernel_ns"] / 1000.0,
        },
        schema=_LAUNCHES_SCHEMA,
    )


_LAUNCH_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("operator", pa.string()),
        ("launches", pa.int64()),
        ("runtime_us", pa.float64()),
        ("runtime_median_us", pa.float64()),
        ("runtime_p95_us", pa.float64()),
        ("delay_median_us", pa.float64()),
        ("delay_p95_us", pa.float64()),
        ("delay_max_us", pa.float64()),
        ("long_runtime", pa.int64()),
        ("long_delay", pa.int64()),
        ("kernel_us", pa.float64()),
        ("short_kernels", pa.int64()),
        ("short_kernel_us", pa.float64()),
        ("short_kernel_pct", pa.float64()),
        ("launch_idle_us", pa.float64()),
        ("delay_idle_us", pa.float64()),
    ]
)

ALL = "(all)"


def _summary(
    rank: int, op: str, rt: np.ndarray, delay: np.ndarray, kind: np.ndarray, kdur: np.ndarray
) -> dict[str, Any]:
    k = kind == "kernel"
    kus = float(kdur[k].sum())
    short = k & (kdur < SHORT_KERNEL_NS)
    sus = float(kdur[short].sum())
    return {
        "rank": rank,
        "operator": op,
        "launches": len(rt),
        "runtime_us": float(rt.sum()) / 1000.0,
        "runtime_median_us": float(np.median(rt)) / 1000.0,
        "runtime_p95_us": float(np.percentile(rt, 95)) / 1000.0,
        "delay_median_us": float(np.median(delay)) / 1000.0,
        "delay_p95_us": float(np.percentile(delay, 95)) / 1000.0,
        "delay_max_us": float(delay.max()) / 1000.0,
        "long_runtime": int((rt > RUNTIME_CUTOFF_NS).sum()),
        "long_delay": int((delay > DELAY_CUTOFF_NS).sum()),
        "kernel_us": kus / 1000.0,
        "short_kernels": int(short.sum()),
        "short_kernel_us": sus / 1000.0,
        "short_kernel_pct": 100.0 * sus / kus if kus > 0 else None,
        "launch_idle_us": None,
        "delay_idle_us": None,
    }


def _idle_inside(ms: np.ndarray, me: np.ndarray, s: np.ndarray, e: np.ndarray) -> int:
    """Length of the union of [s, e) not covered by the busy intervals (ms, me)."""
    us_, ue = iv.merge(s, e)
    if not len(us_):
        return 0
    return int((ue - us_).sum() - iv.covered(ms, me, us_, ue).sum())


@analyser(
    "launch",
    "Launch overhead",
    default_sort=("rank", "-runtime_us"),
    units={c: "µs" for c in _LAUNCH_SCHEMA.names if c.endswith("_us")} | {"short_kernel_pct": "%"},
)
def launch(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """Launch statistics per rank and operator, and per rank (module doc: columns)."""
    d = launch_rows(profile)
    busy = device_busy(profile)
    # Every launch call (also those that only queue work), for the launch-bound time.
    calls = fetch(
        profile,
        "SELECT rank, ts, ts + dur AS te FROM events WHERE device_type = 'cpu' AND kind IN ('runtime', 'driver') "
        "AND correlation IS NOT NULL AND NOT regexp_matches(name, '(?i)synchroni[sz]e|sync$|query')",
    )
    rows: list[dict[str, Any]] = []
    for r in np.unique(d["rank"]):
        sel = d["rank"] == r
        rt, delay, kind, kdur = d["runtime_ns"][sel], d["delay_ns"][sel], d["kind"][sel], d["kernel_ns"][sel]
        row = _summary(int(r), ALL, rt, delay, kind, kdur)
        ms, me = busy.get(int(r), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        csel = calls["rank"] == r
        row["launch_idle_us"] = _idle_inside(ms, me, calls["ts"][csel], calls["te"][csel]) / 1000.0
        late = delay > DELAY_CUTOFF_NS
        ends = d["ts"][sel] + rt
        row["delay_idle_us"] = _idle_inside(ms, me, ends[late], d["kts"][sel][late]) / 1000.0
        rows.append(row)
        ops = d["operator"][sel]
        for op in sorted(set(ops.tolist())):
            o = ops == op
            rows.append(_summary(int(r), str(op), rt[o], delay[o], kind[o], kdur[o]))
    return pa.Table.from_pylist(rows, schema=_LAUNCH_SCHEMA)
