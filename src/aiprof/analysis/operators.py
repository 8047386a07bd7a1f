"""Framework operators: host time (total and self) and the device time they launched."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch
from .tensor_cores import tensor_core_sql

#: The host spans the view nests, one thread at a time (its cost grows with their count).
HOST_KINDS = ("cpu_op", "user_annotation", "python", "runtime", "driver", "dataloader", "step")
_HOST_KINDS = "(" + ", ".join(f"'{k}'" for k in HOST_KINDS) + ")"
#: Kinds reported as operators.
_OP_SQL = "kind IN ('cpu_op', 'dataloader')"
_TIME_COLS = ("host_total_us", "host_self_us", "host_mean_us", "device_self_us", "device_total_us")


#: Host spans past which a profile is big: the operators view nests every host span,
#: about 290 bytes each at its peak (7.35 GiB and 70 s for the 26M spans of
#: bench/huge_import.py's 10 GiB trace). The report leaves out what nests them, and the
#: advice drops each view's per-event intermediates once it has its rows.
BIG_PROFILE_HOST_SPANS = 7_000_000
#: The environment variable that sets another bound (a machine with more memory, or a
#: test of the big-profile paths on a small one).
ENV_BIG_PROFILE = "AIPROF_BIG_PROFILE_SPANS"
#: The views that nest every host span (an operator for each row): on a big profile the
#: HTML report leaves them out and the web UI computes them only when asked.
NEST_HOST_SPANS = ("operators", "allocations")


def big_profile(metas: list[dict[str, Any]]) -> int | None:
    """The profiles' host spans (:func:`host_spans`) where they are past the bound
    (BIG_PROFILE_HOST_SPANS, or the ``AIPROF_BIG_PROFILE_SPANS`` environment variable):
    there the operators view and the advice, which reads it, take minutes and GiBs, and
    the report, the HTML report and the web UI leave them to be asked for. None for a
    profile below it."""
    import os

    raw = os.environ.get(ENV_BIG_PROFILE, "").strip()
    bound = int(raw) if raw.isdigit() else BIG_PROFILE_HOST_SPANS
    n = host_spans(metas)
    return n if n > bound else None


def left_out(what: str, spans: int, how: str) -> str:
    """Why ``what`` (a view, the advice) is not computed yet on a big profile of
    ``spans`` host spans, and ``how`` to have it: the one wording every face shows."""
    return f"on a profile this size ({spans:,} host spans) {what} takes minutes and GiBs to compute: {how}"


def host_spans(metas: list[dict[str, Any]]) -> int:
    """How many host spans the view would nest, from the profiles' import summaries
    (their events counted by kind), without reading the events; a profile without a
    summary counts all its events."""
    n = 0
    for m in metas:
        by_kind = (m.get("import_summary") or {}).get("events_by_kind")
        if isinstance(by_kind, dict) and by_kind:
            n += sum(int(by_kind.get(k, 0)) for k in HOST_KINDS)
        else:
            n += int((m.get("tables") or {}).get("events", 0))
    return n


def nest(
    rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray, dur: np.ndarray, is_op: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nesting of host spans on each thread.

    Returns (parent, op_parent, depth): the index of the innermost span holding each
    span (-1 for roots; spans that only overlap without nesting get none), the index
    of the innermost *operator* holding it or itself being one above it, and its depth.
    """
    n = len(ts)
    # Typed arrays (array.array): element access on numpy arrays costs several times
    # more per item, and a Python list takes a 28-byte int per item besides its 8-byte
    # slot (a 10 GB trace has tens of millions of host spans: bench/huge_import.py).
    order = _q(np.lexsort((-dur, ts, tid, pid, rank)))
    parent = array("q", [-1]) * n
    op_parent = array("q", [-1]) * n
    depth = array("q", [0]) * n
    ends = _q(ts + dur)
    starts = _q(ts)
    ops = array("b", np.ascontiguousarray(is_op, dtype=np.int8).tobytes())
    keys = _q(rank * (1 << 40) + pid * (1 << 20) + tid)
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
    return (
        np.frombuffer(parent, dtype=np.int64),
        np.frombuffer(op_parent, dtype=np.int64),
        np.frombuffer(depth, dtype=np.int64),
    )


def _q(a: np.ndarray) -> array[int]:
    """``a`` as a typed array of int64."""
    return array("q", np.ascontiguousarray(a, dtype=np.int64).tobytes())


#: group_by values beyond "name": the column each adds and the Kineto arg it holds.
GROUPS: dict[str, tuple[str, str]] = {"shapes": ("input_shapes", "Input Dims"), "stack": ("call_stack", "Call stack")}


def _empty(group: tuple[str, str] | None) -> pa.Table:
    cols: dict[str, Any] = {"name": pa.array([], pa.string())}
    if group:
        cols[group[0]] = pa.array([], pa.string())
    cols["calls"] = pa.array([], pa.int64())
    for c in _TIME_COLS:
        cols[c] = pa.array([], pa.float64())
    cols["kernels"] = pa.array([], pa.int64())
    return pa.table(cols)


#: Python frames kept of an operator's call stack (innermost), and frames left out:
#: torch's own code and built-ins (the stack names the user's code that called it).
STACK_FRAMES = 6
_LIBRARY_FRAMES = ("torch/", "<built-in", "threading.py", "runpy.py")


def _stack_keys(
    ops: np.ndarray, code: np.ndarray, names: np.ndarray, parent: np.ndarray, py: np.ndarray, py_names: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Operator keys ``name\0stack`` where the stack is the trace's ``Call stack`` arg, or
    else the Python frames (``python_function`` events of ``with_stack=True``) around
    the call, outermost first, joined by ' > '."""
    memo: dict[int, tuple[str, ...]] = {}

    def frames(j: int) -> tuple[str, ...]:
        path: list[int] = []
        while j >= 0 and j not in memo:
            path.append(j)
            j = int(parent[j])
        out = memo.get(j, ())
        for k in reversed(path):
            name = str(py_names[py[k]]) if py[k] >= 0 else ""
            if name and not name.startswith(_LIBRARY_FRAMES):
                out = (*out, name)[-STACK_FRAMES:]
            memo[k] = out
        return out

    labels = []
    for i, c in zip(ops.tolist(), code.tolist(), strict=True):
        name, _, arg = str(names[c]).partition("\x00")
        labels.append(name + "\x00" + (arg or " > ".join(frames(int(parent[i])))))
    uniq, inverse = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return inverse.astype(np.int64), uniq


@analyser(
    "operators",
    "Operators",
    default_sort=("-host_total_us",),
    units={k: "µs" for k in _TIME_COLS},
)
def operators(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per operator name (kinds cpu_op and dataloader), or per name and input
    shapes with params {"group_by": "shapes"} (column input_shapes), or per name and
    recorded call stack with {"group_by": "stack"} (column call_stack, Kineto's
    "Call stack" arg of ``with_stack=True``; empty when not recorded): calls, host_total_us, host_self_us
    (total minus direct children), host_mean_us, device_self_us (device time of the
    kernels, copies and sets it launched itself, through correlation), device_total_us
    (including what its child operators launched), kernels (launches it made itself)."""
    grouping = str(params.get("group_by", "name"))
    # The overview's top operators and the advice both ask: the nesting is computed once.
    return profile.memo(f"operators:{grouping}", lambda: _operators(profile, GROUPS.get(grouping)))


def _operators(profile: Profile, group: tuple[str, str] | None) -> pa.Table:
    key_sql = f"name || chr(0) || coalesce(json_extract_string(args, '$.\"{group[1]}\"'), '')" if group else "name"
    by_stack = "true" if group == GROUPS["stack"] else "false"
    h = fetch(
        profile,
        f"SELECT e.rank, e.pid, e.tid, e.ts, e.dur, {_OP_SQL} AS is_op, CASE WHEN {_OP_SQL} THEN {key_sql} END AS opkey, "
        "coalesce(d.d, 0) AS dev, coalesce(d.k, 0) AS launches, "
        f"CASE WHEN e.kind = 'python' AND {by_stack} THEN e.name END AS pyname "
        "FROM events e LEFT JOIN ("
        "  SELECT rank, correlation, sum(dur) AS d, count(*) AS k FROM events"
        "  WHERE device_type <> 'cpu' AND correlation IS NOT NULL AND kind IN ('kernel', 'collective', 'memcpy', 'memset')"
        "  GROUP BY rank, correlation) d"
        " ON e.kind IN ('runtime', 'driver') AND d.rank = e.rank AND d.correlation = e.correlation "
        f"WHERE e.device_type = 'cpu' AND e.kind IN {_HOST_KINDS}",
        codes=("opkey", "pyname"),
    )
    n = len(h["ts"])
    if n == 0 or not h["is_op"].any():
        return _empty(group)
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
    if group == GROUPS["stack"]:
        code, names = _stack_keys(ops, code, names, parent, h["pyname"], h["pyname__dict"])
    m = len(names)

    def total(v: np.ndarray) -> np.ndarray:
        return np.bincount(code, weights=v[ops], minlength=m).astype(np.int64)

    calls = np.bincount(code, minlength=m)
    host_total = total(dur)
    keep = np.flatnonzero(calls > 0)
    labels = [str(x) for x in names[keep].tolist()]
    cols: dict[str, Any] = {"name": [x.split("\x00")[0] for x in labels]}
    if group:
        cols[group[0]] = [x.split("\x00", 1)[1] or None if "\x00" in x else None for x in labels]
    cols["calls"] = calls[keep]
    cols["host_total_us"] = host_total[keep] / 1000.0
    cols["host_self_us"] = total(self_ns)[keep] / 1000.0
    cols["host_mean_us"] = host_total[keep] / 1000.0 / calls[keep]
    cols["device_self_us"] = total(dev_self)[keep] / 1000.0
    cols["device_total_us"] = total(dev_total)[keep] / 1000.0
    cols["kernels"] = total(kernels)[keep]
    return pa.table(cols)


@analyser(
    "operator-kernels",
    "Kernels an operator launched",
    default_sort=("-total_us",),
    units={"total_us": "µs", "mean_us": "µs"},
)
def operator_kernels(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """The device work launched inside the operator named params["name"] (and, with
    params["input_shapes"], only its calls with those shapes, as the operators view
    groups them; of every call site when grouped by stack), itself or through its child operators (the operators
    view's device_total_us): one row per kernel name with kind, count, total_us, mean_us
    and tensor_core (tb-profiler's name rule). No rows without params["name"]."""
    name = params.get("name")
    if not name:  # no operator named: no rows (the columns stay)
        name = "\x00"
    where, args = [_OP_SQL, "device_type = 'cpu'", "name = ?"], [str(name)]
    col, arg = GROUPS["shapes"]
    if col in params:
        where.append(f"coalesce(json_extract_string(args, '$.\"{arg}\"'), '') = ?")
        args.append(str(params[col] or ""))
    return profile.sql(
        f"""
        WITH ops AS (SELECT rank, pid, tid, ts, ts + dur AS te FROM events WHERE {" AND ".join(where)}),
        launched AS (
            SELECT DISTINCT r.rank, r.correlation FROM events r JOIN ops o
              ON r.rank = o.rank AND r.pid = o.pid AND r.tid = o.tid AND r.ts >= o.ts AND r.ts + r.dur <= o.te
            WHERE r.kind IN ('runtime', 'driver') AND r.correlation IS NOT NULL)
        SELECT k.name, any_value(k.kind) AS kind, count(*) AS count, sum(k.dur) / 1000.0 AS total_us,
               avg(k.dur) / 1000.0 AS mean_us, {tensor_core_sql("k.name")} AS tensor_core
        FROM events k JOIN launched l ON k.rank = l.rank AND k.correlation = l.correlation
        WHERE k.device_type <> 'cpu' AND k.kind IN ('kernel', 'collective', 'memcpy', 'memset')
        GROUP BY k.name
        """,
        args,
    )
