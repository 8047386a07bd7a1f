"""Python functions by sampled time (a flat profile of the stack samples)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch

_SCHEMA = pa.schema(
    [
        ("function", pa.string()),
        ("file", pa.string()),
        ("self_samples", pa.int64()),
        ("total_samples", pa.int64()),
        ("self_pct", pa.float64()),
        ("total_pct", pa.float64()),
        ("self_ms", pa.float64()),
        ("total_ms", pa.float64()),
    ]
)


@analyser(
    "python",
    "Python functions",
    default_sort=("-self_samples",),
    units={"self_pct": "%", "total_pct": "%", "self_ms": "ms", "total_ms": "ms"},
)
def python(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per Python function (name and file) seen in the stack samples:
    self_samples (the function was running), total_samples (it was on the stack,
    counted once per sample however deep the recursion), their % of all samples, and
    self_ms / total_ms estimated as samples x the sampling interval (the median gap
    between a thread's consecutive samples)."""
    leaves = fetch(profile, "SELECT rank, stack_id, count(*) AS n FROM samples GROUP BY rank, stack_id")
    if len(leaves["n"]) == 0:
        return _SCHEMA.empty_table()
    fr = fetch(profile, "SELECT rank, frame_id, parent, function, file FROM frames")
    interval = profile.sql(
        "SELECT median(d) AS d FROM (SELECT ts - lag(ts) OVER (PARTITION BY rank, pid, tid ORDER BY ts) AS d FROM samples) "
        "WHERE d > 0"
    ).to_pylist()[0]["d"]
    interval_ms = float(interval) / 1e6 if interval is not None else 0.0
    parent: dict[tuple[int, int], int] = {}
    func: dict[tuple[int, int], tuple[str, str]] = {}
    for r, f, p, fn, fl in zip(
        fr["rank"].tolist(), fr["frame_id"].tolist(), fr["parent"].tolist(), fr["function"], fr["file"]
    ):
        parent[(r, f)] = p
        func[(r, f)] = (str(fn), str(fl))
    self_n: dict[tuple[str, str], int] = {}
    total_n: dict[tuple[str, str], int] = {}
    for r, leaf, n in zip(leaves["rank"].tolist(), leaves["stack_id"].tolist(), leaves["n"].tolist()):
        key = func.get((r, leaf))
        if key is None:
            continue
        self_n[key] = self_n.get(key, 0) + n
        seen: set[tuple[str, str]] = set()
        node = leaf
        while node is not None and node >= 0 and (r, node) in func:
            k = func[(r, node)]
            if k not in seen:  # recursion counts once per sample
                seen.add(k)
                total_n[k] = total_n.get(k, 0) + n
            node = parent.get((r, node), -1)
    all_n = int(np.sum(leaves["n"]))
    keys = sorted(total_n)
    selfs = np.array([self_n.get(k, 0) for k in keys], dtype=np.int64)
    totals = np.array([total_n[k] for k in keys], dtype=np.int64)
    return pa.table(
        {
            "function": [k[0] for k in keys],
            "file": [k[1] for k in keys],
            "self_samples": selfs,
            "total_samples": totals,
            "self_pct": 100.0 * selfs / all_n,
            "total_pct": 100.0 * totals / all_n,
            "self_ms": selfs * interval_ms,
            "total_ms": totals * interval_ms,
        },
        schema=_SCHEMA,
    )
