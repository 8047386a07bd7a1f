"""Framework operators: host time (total and self) and the device time they launched."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch

_HOST_KINDS = "('cpu_op', 'user_annotation', 'python', 'runtime', 'driver', 'dataloader', 'step')"
_OP_KINDS = frozenset({"cpu_op", "dataloader"})


def nest(rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Parent index of each host span (the innermost span on the same thread that holds
    it), -1 for roots. Spans that only overlap without nesting get no parent."""
    order = np.lexsort((-dur, ts, tid, pid, rank))
    parent = np.full(len(ts), -1, dtype=np.int64)
    stack: list[int] = []
    key_prev: tuple[int, int, int] | None = None
    end = ts + dur
    for i in order.tolist():
        key = (int(rank[i]), int(pid[i]), int(tid[i]))
        if key != key_prev:
            stack.clear()
            key_prev = key
        t = ts[i]
        while stack and end[stack[-1]] <= t:
            stack.pop()
        if stack and end[i] <= end[stack[-1]]:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


@analyser(
    "operators",
    "Operators",
    default_sort=("-host_total_us",),
    units={k: "µs" for k in ("host_total_us", "host_self_us", "host_mean_us", "device_self_us", "device_total_us")},
)
def operators(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per operator name (kinds cpu_op and dataloader), or per name and input
    shapes with params {"group_by": "shapes"}: calls, host_total_us, host_self_us
    (total minus direct children), host_mean_us, device_self_us (device time of the
    kernels, copies and sets it launched itself, through correlation), device_total_us
    (including what its child operators launched), kernels (launches it made itself)."""
    by_shapes = params.get("group_by") == "shapes"
    shape_col = ", json_extract_string(args, '$.\"Input Dims\"') AS shapes" if by_shapes else ""
    h = fetch(
        profile,
        f"SELECT rank, pid, tid, kind, name, ts, dur, correlation{shape_col} FROM events "
        f"WHERE device_type = 'cpu' AND kind IN {_HOST_KINDS}",
    )
    n = len(h["ts"])
    if n == 0:
        empty: dict[str, Any] = {"name": pa.array([], pa.string())}
        if by_shapes:
            empty["input_shapes"] = pa.array([], pa.string())
        empty["calls"] = pa.array([], pa.int64())
        for c in ("host_total_us", "host_self_us", "host_mean_us", "device_self_us", "device_total_us"):
            empty[c] = pa.array([], pa.float64())
        empty["kernels"] = pa.array([], pa.int64())
        return pa.table(empty)
    parent = nest(h["rank"], h["pid"], h["tid"], h["ts"], h["dur"])
    child_sum = np.zeros(n, dtype=np.int64)
    has_parent = parent >= 0
    np.add.at(child_sum, parent[has_parent], h["dur"][has_parent])
    self_ns = h["dur"] - child_sum
    # Device time per launch (rank, correlation).
    dev = fetch(
        profile,
        "SELECT rank, correlation, sum(dur) AS d, count(*) AS k FROM events "
        "WHERE device_type <> 'cpu' AND correlation IS NOT NULL AND kind IN ('kernel', 'collective', 'memcpy', 'memset') "
        "GROUP BY rank, correlation",
    )
    dev_self = np.zeros(n, dtype=np.int64)
    dev_total = np.zeros(n, dtype=np.int64)
    launches = np.zeros(n, dtype=np.int64)
    if len(dev["d"]):
        lookup = {
            (int(r), int(c)): (int(d), int(k))
            for r, c, d, k in zip(dev["rank"], dev["correlation"], dev["d"], dev["k"])
        }
        is_op = np.array([k in _OP_KINDS for k in h["kind"]], dtype=bool)
        launch_idx = np.flatnonzero((h["correlation"] >= 0) & np.isin(h["kind"], ["runtime", "driver"]))
        for i in launch_idx.tolist():
            got = lookup.get((int(h["rank"][i]), int(h["correlation"][i])))
            if got is None:
                continue
            d, k = got
            j = int(parent[i])
            first = True
            while j >= 0:
                if is_op[j]:
                    if first:
                        dev_self[j] += d
                        launches[j] += k
                        first = False
                    dev_total[j] += d
                j = int(parent[j])
    ops = np.flatnonzero(np.array([k in _OP_KINDS for k in h["kind"]], dtype=bool))
    keys = h["name"][ops]
    if by_shapes:
        keys = np.array([f"{a}\x00{b}" for a, b in zip(h["name"][ops], h["shapes"][ops])], dtype=object)
    uniq, inv = np.unique(keys.astype(str), return_inverse=True)
    m = len(uniq)

    def total(v: np.ndarray) -> np.ndarray:
        out = np.zeros(m, dtype=np.int64)
        np.add.at(out, inv, v[ops])
        return out

    calls = np.bincount(inv, minlength=m)
    host_total = total(h["dur"])
    cols: dict[str, Any] = {"name": [u.split("\x00")[0] for u in uniq.tolist()]}
    if by_shapes:
        cols["input_shapes"] = [u.split("\x00")[1] if "\x00" in u else None for u in uniq.tolist()]
    cols.update(
        {
            "calls": calls,
            "host_total_us": host_total / 1000.0,
            "host_self_us": total(self_ns) / 1000.0,
            "host_mean_us": host_total / 1000.0 / np.maximum(calls, 1),
            "device_self_us": total(dev_self) / 1000.0,
            "device_total_us": total(dev_total) / 1000.0,
            "kernels": total(launches),
        }
    )
    return pa.table(cols)
