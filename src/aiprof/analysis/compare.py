"""What changed between two runs: step time and the largest differences by name.

Pure functions over two opened profiles, returning tables the common query pages
(``aiprof diff``, the web UI's compare page).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import full_table

#: view -> (key column, value column, count column) compared by :func:`compare`.
COMPARABLE: dict[str, tuple[str, str, str]] = {
    "kernels": ("name", "total_us", "count"),
    "operators": ("name", "host_total_us", "calls"),
    "steps": ("step", "duration_us", "rank"),
}


def step_summary(profile: Profile) -> dict[str, Any]:
    """steps, mean_step_us, median_step_us, total_us over all ranks' marked steps."""
    t = full_table(profile, "steps").to_pylist()
    durs = sorted(r["duration_us"] for r in t if r["step"] is not None) or sorted(r["duration_us"] for r in t)
    if not durs:
        return {"steps": 0, "mean_step_us": None, "median_step_us": None, "total_us": 0.0}
    return {
        "steps": len(durs),
        "mean_step_us": sum(durs) / len(durs),
        "median_step_us": durs[len(durs) // 2],
        "total_us": float(sum(durs)),
    }


def compare(a: Profile, b: Profile, view: str = "kernels") -> pa.Table:
    """One row per name found in either profile's ``view`` (kernels or operators):
    name, a_us, b_us (µs), delta_us = b - a, delta_pct (% of a; null when a is 0),
    a_count, b_count, and status: same, slower, faster, added (only in B), removed
    (only in A)."""
    if view not in ("kernels", "operators"):
        raise ValueError(f"compare works on kernels or operators, not {view!r}")
    return compare_tables(full_table(a, view), full_table(b, view), view)


def compare_tables(ta: pa.Table, tb: pa.Table, view: str) -> pa.Table:
    """:func:`compare` on the two profiles' full ``view`` tables (for callers that
    already hold them, like the server's cache)."""
    key, value, count = COMPARABLE[view]

    def index(t: pa.Table) -> dict[str, tuple[float, int]]:
        out: dict[str, tuple[float, int]] = {}
        for r in t.select([key, value, count]).to_pylist():
            v, c = out.get(r[key], (0.0, 0))
            out[r[key]] = (v + float(r[value] or 0.0), c + int(r[count] or 0))
        return out

    ia, ib = index(ta), index(tb)
    rows: list[dict[str, Any]] = []
    for name in sorted(set(ia) | set(ib)):
        av, ac = ia.get(name, (0.0, 0))
        bv, bc = ib.get(name, (0.0, 0))
        delta = bv - av
        if name not in ia:
            status = "added"
        elif name not in ib:
            status = "removed"
        elif abs(delta) <= 1e-9 * max(abs(av), 1.0):
            status = "same"
        else:
            status = "slower" if delta > 0 else "faster"
        rows.append(
            {
                "name": name,
                "a_us": av,
                "b_us": bv,
                "delta_us": delta,
                "delta_pct": 100.0 * delta / av if av else None,
                "a_count": ac,
                "b_count": bc,
                "status": status,
            }
        )
    schema = pa.schema(
        [
            ("name", pa.string()),
            ("a_us", pa.float64()),
            ("b_us", pa.float64()),
            ("delta_us", pa.float64()),
            ("delta_pct", pa.float64()),
            ("a_count", pa.int64()),
            ("b_count", pa.int64()),
            ("status", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def compare_runs(a: list[Profile], b: list[Profile], view: str = "kernels") -> pa.Table:
    """:func:`compare` with a side made of several runs (a baseline folder): each side's
    times and counts are the mean over its runs, so one run of B compares with a typical
    run of A. Kernels match by name within their device type (a CUDA run against an
    Ascend run: a ``device_type`` column says which); operators match by name."""
    if view == "operators":
        return compare_tables(_mean_table(a, view), _mean_table(b, view), view)
    if view != "kernels":
        raise ValueError(f"compare works on kernels or operators, not {view!r}")
    ka, kb = _kernels_by_type(a), _kernels_by_type(b)
    empty = _mean_rows({}, 1, view)
    parts = []
    for dtype in sorted(set(ka) | set(kb)):
        t = compare_tables(ka.get(dtype, empty), kb.get(dtype, empty), view)
        parts.append(t.append_column("device_type", pa.array([dtype] * t.num_rows, pa.string())))
    if not parts:
        t = compare_tables(empty, empty, view)
        return t.append_column("device_type", pa.array([], pa.string()))
    return pa.concat_tables(parts)


def _kernels_by_type(runs: list[Profile]) -> dict[str, pa.Table]:
    """Device type -> the kernels view's (name, total_us, count), mean over the runs."""
    sums: dict[str, dict[str, list[float]]] = {}
    for p in runs:
        t = p.sql(
            "SELECT device_type, name, sum(dur) / 1000.0 AS total_us, count(*) AS count FROM events "
            "WHERE device_type <> 'cpu' AND kind IN ('kernel', 'collective') GROUP BY ALL"
        )
        for r in t.to_pylist():
            acc = sums.setdefault(r["device_type"], {}).setdefault(r["name"], [0.0, 0.0])
            acc[0] += float(r["total_us"] or 0.0)
            acc[1] += float(r["count"] or 0)
    return {dtype: _mean_rows(by_name, len(runs), "kernels") for dtype, by_name in sums.items()}


def _mean_table(runs: list[Profile], view: str) -> pa.Table:
    key, value, count = COMPARABLE[view]
    sums: dict[str, list[float]] = {}
    for p in runs:
        for r in full_table(p, view).select([key, value, count]).to_pylist():
            acc = sums.setdefault(r[key], [0.0, 0.0])
            acc[0] += float(r[value] or 0.0)
            acc[1] += float(r[count] or 0)
    return _mean_rows(sums, len(runs), view)


def _mean_rows(sums: dict[str, list[float]], runs: int, view: str) -> pa.Table:
    key, value, count = COMPARABLE[view]
    n = max(runs, 1)
    return pa.table(
        {
            key: pa.array(list(sums), pa.string()),
            value: pa.array([v[0] / n for v in sums.values()], pa.float64()),
            count: pa.array([round(v[1] / n) for v in sums.values()], pa.int64()),
        }
    )
