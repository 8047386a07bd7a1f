"""Kernel launch overhead: how long the host takes to launch device work, and how
long the work then waits before it starts (Holistic Trace Analysis's launch stats).

``launches`` (one row per launch: a host runtime/driver call and the device work
with the same correlation)
    rank, step, operator (innermost host operator that made the call, through
    external_id; '(no operator)'), runtime (call name), kind (kernel, memcpy, memset,
    collective), kernel (device work name), device, stream, ts_us (call start),
    runtime_us (call duration), delay_us (device start - call end, µs; HTA's launch
    delay, clipped at 0 as HTA does where the device starts before the call ends:
    ordinary asynchronous launching; advise.clock_skew tells real skew), kernel_us.

``launch`` (one row per rank and operator, plus one row per rank with operator
'(all)')
    rank, operator, launches, runtime_us, runtime_median_us, runtime_p95_us,
    delay_median_us, delay_p95_us, delay_max_us (µs), long_runtime (calls over 50 µs,
    HTA's cutoff), long_delay (delays over 100 µs), kernel_us (kind kernel only),
    negative_delays ('(all)' rows: launches whose device work starts before the call
    ends, clipped to a 0 delay),
    short_kernels (kernels under 10 µs), short_kernel_us, short_kernel_pct (% of
    kernel_us). On the '(all)' rows only: launch_idle_us (time inside the steps the host
    spends in launch-class calls, runtime.py, while every device of the rank is idle:
    XProf's kernel-launch time), delay_idle_us (device idle time inside the steps and
    inside the delays over 100 µs).
Launches, runtime and delay figures count each launch call once: one cudaGraphLaunch
that starts 400 kernels is one launch; its delay is that of its first kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from .base import analyser
from .common import fetch, launch_calls_sql, rank_slice
from .communication import intersect
from .ranks import device_busy, step_windows
from .runtime import runtime_calls

#: HTA's cutoffs (get_cuda_kernel_launch_stats): runtime calls and launch delays
#: longer than these are outliers; kernels shorter than SHORT_KERNEL_NS are "short".
RUNTIME_CUTOFF_NS = 50_000
DELAY_CUTOFF_NS = 100_000
SHORT_KERNEL_NS = 10_000

_LAUNCH_SQL = f"""
    WITH rt AS ({launch_calls_sql(runtime="name", ts="ts", dur="dur", external_id="external_id", step="step")}),
    ops AS (
        SELECT rank, external_id, arg_min(name, dur) AS op FROM events
        WHERE device_type = 'cpu' AND kind = 'cpu_op' AND external_id IS NOT NULL GROUP BY rank, external_id)
    SELECT d.rank, coalesce(d.step, r.step, -1) AS step, coalesce(o.op, '(no operator)') AS operator,
           r.runtime, d.kind, d.name AS kernel, d.device, d.tid AS stream, r.ts, r.dur AS runtime_ns,
           greatest(d.ts - (r.ts + r.dur), 0) AS delay_ns, d.ts - (r.ts + r.dur) < 0 AS negative,
           d.dur AS kernel_ns, d.ts AS kts,
           row_number() OVER (PARTITION BY d.rank, d.correlation ORDER BY d.ts, d.dur) = 1 AS first
    FROM events d
    JOIN rt r ON r.rank = d.rank AND r.correlation = d.correlation
    LEFT JOIN ops o ON o.rank = r.rank AND o.external_id = r.external_id
    WHERE d.device_type <> 'cpu' AND d.kind IN ('kernel', 'memcpy', 'memset', 'collective')
    ORDER BY d.rank, r.ts
"""


def launch_rows(profile: Profile) -> dict[str, np.ndarray]:
    """The launches as numpy columns (ns): see ``launches``; ``first`` marks the first
    device operation of each launch call, ``negative`` a device start before the call's
    end (asynchronous launching; the delay counts as 0, as HTA clips it)."""
    return profile.memo("launch_rows", lambda: fetch(profile, _LAUNCH_SQL, codes=_TEXT), per_event=True)


#: The text columns of launch_rows, held as codes (``c``) into ``c + "__dict"``: one
#: Python string per distinct name, not per launch (a 10 GB trace has millions).
_TEXT = ("operator", "runtime", "kind", "kernel")


def _text(d: dict[str, np.ndarray], column: str) -> pa.Array:
    """A text column of launch_rows as an Arrow string array."""
    values = pa.array([str(x) for x in d[column + "__dict"]], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(d[column], pa.int32()), values).cast(pa.string())


def _code(d: dict[str, np.ndarray], column: str, value: str) -> int:
    """The code of ``value`` in a text column of launch_rows (-2 when absent)."""
    hit = np.flatnonzero(d[column + "__dict"] == value)
    return int(hit[0]) if len(hit) else -2


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
            "operator": _text(d, "operator"),
            "runtime": _text(d, "runtime"),
            "kind": _text(d, "kind"),
            "kernel": _text(d, "kernel"),
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
        ("negative_delays", pa.int64()),
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
    rank: int, op: str, first: np.ndarray, rt: np.ndarray, delay: np.ndarray, k: np.ndarray, kdur: np.ndarray
) -> dict[str, Any]:
    """Figures of one group of launch rows (``k``: the kernels among them). Runtime and
    delay count once per launch call (``first``: the call's first device operation; a
    cudaGraphLaunch that starts 400 kernels is one launch), kernel figures once per kernel."""
    kus = float(kdur[k].sum())
    short = k & (kdur < SHORT_KERNEL_NS)
    sus = float(kdur[short].sum())
    crt, cdl = rt[first], delay[first]
    return {
        "rank": rank,
        "operator": op,
        "launches": len(crt),
        "runtime_us": float(crt.sum()) / 1000.0,
        "runtime_median_us": float(np.median(crt)) / 1000.0,
        "runtime_p95_us": float(np.percentile(crt, 95)) / 1000.0,
        "delay_median_us": float(np.median(cdl)) / 1000.0,
        "delay_p95_us": float(np.percentile(cdl, 95)) / 1000.0,
        "delay_max_us": float(cdl.max()) / 1000.0,
        "long_runtime": int((crt > RUNTIME_CUTOFF_NS).sum()),
        "long_delay": int((cdl > DELAY_CUTOFF_NS).sum()),
        "negative_delays": None,
        "kernel_us": kus / 1000.0,
        "short_kernels": int(short.sum()),
        "short_kernel_us": sus / 1000.0,
        "short_kernel_pct": 100.0 * sus / kus if kus > 0 else None,
        "launch_idle_us": None,
        "delay_idle_us": None,
    }


def _idle_inside(ms: np.ndarray, me: np.ndarray, s: np.ndarray, e: np.ndarray, ws: np.ndarray, we: np.ndarray) -> int:
    """Length of the union of [s, e) inside the windows (ws, we) not covered by the busy intervals (ms, me)."""
    us_, ue = iv.merge(s, e)
    if not len(us_):
        return 0
    xs, xe = intersect(us_, ue, ws, we)
    if not len(xs):
        return 0
    return int((xe - xs).sum() - iv.covered(ms, me, xs, xe).sum())


def long_delay_intervals(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Rank -> [launch call end, device start) of the launches that waited more than
    HTA's 100 µs cutoff (first device operation of each call)."""
    d = launch_rows(profile)
    late = d["first"] & (d["delay_ns"] > DELAY_CUTOFF_NS)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in np.unique(d["rank"][late]):
        sel = late & (d["rank"] == r)
        out[int(r)] = (d["ts"][sel] + d["runtime_ns"][sel], d["kts"][sel])
    return out


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
    w = step_windows(profile)
    # Every launch-class call (runtime.py), also those whose device work the trace lost.
    calls = runtime_calls(profile)
    rows: list[dict[str, Any]] = []
    late_iv = long_delay_intervals(profile)
    empty = np.zeros(0, np.int64)
    for r in np.unique(d["rank"]):
        # The launches and the calls come in rank order: each rank's are one slice, a view.
        sel = rank_slice(d["rank"], r)
        first, rt, delay = d["first"][sel], d["runtime_ns"][sel], d["delay_ns"][sel]
        kind, kdur = d["kind"][sel] == _code(d, "kind", "kernel"), d["kernel_ns"][sel]
        row = _summary(int(r), ALL, first, rt, delay, kind, kdur)
        row["negative_delays"] = int((d["negative"][sel] & first).sum())
        ms, me = busy.get(int(r), (empty, empty))
        wsel = w["rank"] == r
        ws, we = iv.merge(w["start"][wsel], w["end"][wsel])
        csel = rank_slice(calls["rank"], r)
        launching = calls["class"][csel] == "launch"
        cts, cte = calls["ts"][csel][launching], calls["te"][csel][launching]
        row["launch_idle_us"] = _idle_inside(ms, me, cts, cte, ws, we) / 1000.0
        ls, le = late_iv.get(int(r), (empty, empty))
        row["delay_idle_us"] = _idle_inside(ms, me, ls, le, ws, we) / 1000.0
        rows.append(row)
        # Per operator: the rank's launches ordered by operator once, each one a run.
        ops = d["operator"][sel]
        names = d["operator__dict"]
        order = np.argsort(ops, kind="stable")
        by = [a[order] for a in (ops, first, rt, delay, kind, kdur)]
        cut = np.flatnonzero(np.diff(by[0])) + 1
        runs = zip([0, *cut.tolist()], [*cut.tolist(), len(order)], strict=True)
        for a, b in sorted(runs, key=lambda ab: str(names[by[0][ab[0]]])):
            rows.append(_summary(int(r), str(names[by[0][a]]), *(x[a:b] for x in by[1:])))
    return pa.Table.from_pylist(rows, schema=_LAUNCH_SCHEMA)
