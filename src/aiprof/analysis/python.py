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
        ("rank", pa.int64()),
        ("function", pa.string()),
        ("file", pa.string()),
        ("self_samples", pa.int64()),
        ("total_samples", pa.int64()),
        ("self_pct", pa.float64()),
        ("total_pct", pa.float64()),
        ("self_us", pa.float64()),
        ("total_us", pa.float64()),
    ]
)


#: The row that stands for the samples taken before the first step (imports, setup).
STARTUP = "(before the first step)"


@analyser(
    "python",
    "Python functions",
    default_sort=("-self_samples",),
    units={"self_pct": "%", "total_pct": "%", "self_us": "µs", "total_us": "µs"},
    scope=("step", "thread"),
)
def python(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank and Python function (name and file) seen in the stack samples:
    self_samples (the function was running), total_samples (it was on the stack,
    counted once per sample however deep the recursion), their % of the samples in
    scope, and self_us / total_us (µs, as every view's times) estimated as samples x
    the sampling interval (the median gap between a thread's consecutive samples).

    Scope: by default the samples inside steps, with the ones before the first step
    as one row named "(before the first step)"; ``--filter step=5..20`` keeps those
    steps only, ``--filter thread=NAME_OR_TID`` those threads (both are applied to
    the samples before counting); ``rank`` filters like any column. A rank without
    steps keeps all its samples."""
    leaves = _scoped_leaves(profile, params.get("scope") or [])
    if len(leaves["n"]) == 0:
        return _SCHEMA.empty_table()
    del params
    fr = fetch(profile, "SELECT rank, frame_id, parent, function, file FROM frames")
    interval = profile.sql(
        "SELECT median(d) AS d FROM (SELECT ts - lag(ts) OVER (PARTITION BY rank, pid, tid ORDER BY ts) AS d FROM samples) "
        "WHERE d > 0"
    ).to_pylist()[0]["d"]
    interval_us = float(interval) / 1e3 if interval is not None else 0.0
    parent: dict[tuple[int, int], int] = {}
    func: dict[tuple[int, int], tuple[str, str]] = {}
    for r, f, p, fn, fl in zip(
        fr["rank"].tolist(), fr["frame_id"].tolist(), fr["parent"].tolist(), fr["function"], fr["file"]
    ):
        parent[(r, f)] = p
        func[(r, f)] = (str(fn), str(fl))
    self_n: dict[tuple[int, str, str], int] = {}
    total_n: dict[tuple[int, str, str], int] = {}
    for r, leaf, n, early in zip(
        leaves["rank"].tolist(), leaves["stack_id"].tolist(), leaves["n"].tolist(), leaves["early"].tolist()
    ):
        if early:
            k0 = (r, STARTUP, "")
            self_n[k0] = self_n.get(k0, 0) + n
            total_n[k0] = total_n.get(k0, 0) + n
            continue
        f0 = func.get((r, leaf))
        if f0 is None:
            continue
        key = (r, *f0)
        self_n[key] = self_n.get(key, 0) + n
        seen: set[tuple[int, str, str]] = set()
        node = leaf
        while node is not None and node >= 0 and (r, node) in func:
            k = (r, *func[(r, node)])
            if k not in seen:  # recursion counts once per sample
                seen.add(k)
                total_n[k] = total_n.get(k, 0) + n
            node = parent.get((r, node), -1)
    per_rank: dict[int, int] = {}
    for r, n in zip(leaves["rank"].tolist(), leaves["n"].tolist(), strict=True):
        per_rank[r] = per_rank.get(r, 0) + n
    keys = sorted(total_n)
    all_n = np.array([per_rank[k[0]] for k in keys], dtype=np.float64)
    selfs = np.array([self_n.get(k, 0) for k in keys], dtype=np.int64)
    totals = np.array([total_n[k] for k in keys], dtype=np.int64)
    return pa.table(
        {
            "rank": [k[0] for k in keys],
            "function": [k[1] for k in keys],
            "file": [k[2] for k in keys],
            "self_samples": selfs,
            "total_samples": totals,
            "self_pct": 100.0 * selfs / all_n,
            "total_pct": 100.0 * totals / all_n,
            "self_us": selfs * interval_us,
            "total_us": totals * interval_us,
        },
        schema=_SCHEMA,
    )


def _scoped_leaves(profile: Profile, scope: list[Any]) -> dict[str, np.ndarray]:
    """(rank, stack_id, n, early) of the samples in scope; early = before the first step."""
    from .query import Query
    from .ranks import step_of, step_windows

    s = fetch(
        profile,
        "SELECT s.rank, s.tid, s.ts, s.stack_id, coalesce(t.thread_name, '') AS thread FROM samples s "
        "LEFT JOIN (SELECT DISTINCT rank, tid, any_value(thread_name) AS thread_name FROM tracks GROUP BY rank, tid) t "
        "ON t.rank = s.rank AND t.tid = s.tid",
    )
    w = step_windows(profile)
    step = np.full(len(s["ts"]), -1, dtype=np.int64)
    early = np.zeros(len(s["ts"]), dtype=bool)
    stepped = np.zeros(len(s["ts"]), dtype=bool)
    for r in np.unique(s["rank"]).tolist():
        sel = np.flatnonzero(s["rank"] == r)
        step[sel] = step_of(w, r, s["ts"][sel])
        ws = w["step"][w["rank"] == r] >= 0
        if ws.any():
            stepped[sel] = True
            first = int(w["start"][(w["rank"] == r) & (w["step"] >= 0)].min())
            early[sel] = s["ts"][sel] < first
    table = pa.table(
        {
            "rank": s["rank"],
            "stack_id": s["stack_id"],
            "step": pa.array(step, mask=step < 0),
            "thread": [f"{n}" for n in s["thread"]],
            "tid": s["tid"].astype(str),
            "early": early,
            "keep": ~stepped | (step >= 0) | early,
        }
    )
    steps_filtered = any(f.column == "step" for f in scope)
    thread_f = [f for f in scope if f.column == "thread"]
    rest = [f for f in scope if f.column != "thread"]
    if thread_f:
        # A thread matches by name or by id.
        by_name, _ = Query(thread_f).apply(table)
        tf = [type(f)("tid", f.op, f.values) for f in thread_f]
        by_id, _ = Query(tf).apply(table)
        table = pa.concat_tables([by_name, by_id]) if by_name.num_rows else by_id
    table, _ = Query(rest).apply(table)
    if not steps_filtered:
        table = table.filter(table.column("keep"))
    return fetch_arrow(
        table.group_by(["rank", "stack_id", "early"])
        .aggregate([("stack_id", "count")])
        .rename_columns(["rank", "stack_id", "early", "n"])
    )


def fetch_arrow(t: pa.Table) -> dict[str, np.ndarray]:
    return {c: t.column(c).to_numpy() for c in t.column_names}
