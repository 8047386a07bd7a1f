"""Framework operators: host time (total and self) and the device time they launched."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch

_HOST_KINDS = "('cpu_op', 'user_annotation', 'python', 'runtime', 'driver', 'dataloader', 'step')"
#: Kinds reported as operators.
_OP_SQL = "kind IN ('cpu_op', 'dataloader')"
_TIME_COLS = ("host_total_us", "host_self_us", "host_mean_us", "device_self_us", "device_total_us")


def nest(
    rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray, dur: np.ndarray, is_op: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nesting of host spans on each thread.

    Returns (parent, op_parent, depth): the index of the innermost span holding each
    span (-1 for roots; spans that only overlap without nesting get none), the index
    of the innermost *operator* holding it or itself being one above it, and its depth.
    """
    order = np.lexsort((-dur, ts, tid, pid, rank)).tolist()
    n = len(ts)
    parent = [-1] * n
    op_parent = [-1] * n
    depth = [0] * n
    # Python lists: element access on numpy arrays costs several times more per item.
    ends = (ts + dur).tolist()
    starts = ts.tolist()
    ops = is_op.tolist()
    keys = (rank * (1 << 40) + pid * (1 << 20) + tid).tolist()
    stack: list[int] = []
    op_stack: list[int] = []  # innermost operator at each stack level (or -1)
    key_prev = None
    for i in order:
        key = keys[i]
        if key != key_prev:
            stack.clear()
            op_stack.clear()
            key_prev = key
        t = starts[i]
        while stack and ends[stack[-1]] <= t:
            stack.pop()
            op_stack.pop()
        e = ends[i]
        while stack and ends[stack[-1]] < e:
            # Overlaps the span above without fitting in it: not its child.
            stack.pop()
            op_stack.pop()
        if stack:
            parent[i] = stack[-1]
            op_parent[i] = op_stack[-1]
            depth[i] = len(stack)
        stack.append(i)
        op_stack.append(i if ops[i] else op_parent[i])
    return np.array(parent, dtype=np.int64), np.array(op_parent, dtype=np.int64), np.array(depth, dtype=np.int64)


def _empty(by_shapes: bool) -> pa.Table:
    cols: dict[str, Any] = {"name": pa.array([], pa.string())}
    if by_shapes:
        cols["input_shapes"] = pa.array([], pa.string())
    cols["calls"] = pa.array([], pa.int64())
    for c in _TIME_COLS:
        cols[c] = pa.array([], pa.float64())
    cols["kernels"] = pa.array([], pa.int64())
    return pa.table(cols)


@analyser(
    "operators",
    "Operators",
    default_sort=("-host_total_us",),
    units={k: "µs" for k in _TIME_COLS},
)
def operators(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per operator name (kinds cpu_op and dataloader), or per name and input
    shapes with params {"group_by": "shapes"}: calls, host_total_us, host_self_us
    (total minus direct children), host_mean_us, device_self_us (device time of the
    kernels, copies and sets it launched itself, through correlation), device_total_us
    (including what its child operators launched), kernels (launches it made itself)."""
    by_shapes = params.get("group_by") == "shapes"
    # The overview's top operators and the advice both ask: the nesting is computed once.
    return profile.memo(f"operators:{by_shapes}", lambda: _operators(profile, by_shapes))


def _operators(profile: Profile, by_shapes: bool) -> pa.Table:
    key_sql = "name || chr(0) || coalesce(json_extract_string(args, '$.\"Input Dims\"'), '')" if by_shapes else "name"
    h = fetch(
        profile,
        f"SELECT e.rank, e.pid, e.tid, e.ts, e.dur, {_OP_SQL} AS is_op, CASE WHEN {_OP_SQL} THEN {key_sql} END AS opkey, "
        "coalesce(d.d, 0) AS dev, coalesce(d.k, 0) AS launches "
        "FROM events e LEFT JOIN ("
        "  SELECT rank, correlation, sum(dur) AS d, count(*) AS k FROM events"
        "  WHERE device_type <> 'cpu' AND correlation IS NOT NULL AND kind IN ('kernel', 'collective', 'memcpy', 'memset')"
        "  GROUP BY rank, correlation) d"
        " ON e.kind IN ('runtime', 'driver') AND d.rank = e.rank AND d.correlation = e.correlation "
        f"WHERE e.device_type = 'cpu' AND e.kind IN {_HOST_KINDS}",
        codes=("opkey",),
    )
    n = len(h["ts"])
    if n == 0 or not h["is_op"].any():
        return _empty(by_shapes)
    parent, op_parent, depth = nest(h["rank"], h["pid"], h["tid"], h["ts"], h["dur"], h["is_op"])
    dur = h["dur"]
    child_sum = np.zeros(n, dtype=np.int64)
    has_parent = parent >= 0
    np.add.at(child_sum, parent[has_parent], dur[has_parent])
    self_ns = dur - child_sum
    # Device time: a launch's work counts for the innermost operator around it (self)
    # and for every operator above that one (total).
    dev, launches = h["dev"], h["launches"]
    owner = np.where(h["is_op"], -1, op_parent)  # launches are never operators themselves
    has_owner = (owner >= 0) & (dev > 0)
    dev_self = np.zeros(n, dtype=np.int64)
    kernels = np.zeros(n, dtype=np.int64)
    np.add.at(dev_self, owner[has_owner], dev[has_owner])
    np.add.at(kernels, owner[has_owner], launches[has_owner])
    dev_total = dev_self.copy()
    is_op = h["is_op"]
    for d in range(int(depth.max()), 0, -1):
        idx = np.flatnonzero((depth == d) & is_op & (op_parent >= 0))
        np.add.at(dev_total, op_parent[idx], dev_total[idx])
    ops = np.flatnonzero(is_op)
    code = h["opkey"][ops]
    names = h["opkey__dict"]
    m = len(names)

    def total(v: np.ndarray) -> np.ndarray:
        return np.bincount(code, weights=v[ops], minlength=m).astype(np.int64)

    calls = np.bincount(code, minlength=m)
    host_total = total(dur)
    keep = np.flatnonzero(calls > 0)
    labels = [str(x) for x in names[keep].tolist()]
    cols: dict[str, Any] = {"name": [x.split("\x00")[0] for x in labels]}
    if by_shapes:
        cols["input_shapes"] = [x.split("\x00", 1)[1] or None if "\x00" in x else None for x in labels]
    cols["calls"] = calls[keep]
    cols["host_total_us"] = host_total[keep] / 1000.0
    cols["host_self_us"] = total(self_ns)[keep] / 1000.0
    cols["host_mean_us"] = host_total[keep] / 1000.0 / calls[keep]
    cols["device_self_us"] = total(dev_self)[keep] / 1000.0
    cols["device_total_us"] = total(dev_total)[keep] / 1000.0
    cols["kernels"] = total(kernels)[keep]
    return pa.table(cols)
