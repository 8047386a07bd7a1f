"""Collective communication: what runs per step, how many bytes, and how much of it
hides behind computation.

``communication`` (one row per rank, step and collective operation)
    rank, step (null without steps), op (AllReduce, Broadcast, SendRecv... from the
    kernel name), calls, total_us, mean_us (µs), bytes (sum over the calls whose
    launching host call records its message size; null when none does),
    sized_calls (how many calls have a size), mean_bytes, gbps (bytes / time of the
    sized calls, GB/s; algorithm bandwidth, waiting included), note. A DDP rank (its
    Python samples show DistributedDataParallel) without any recorded collective has
    one row, op all_reduce, step and figures null and a note: its gradient all-reduces
    ran in DDP's C++ reducer, which default-mode recording does not see (not measured,
    rather than no communication).

``comm_overlap`` (one row per rank and step; Holistic Trace Analysis's definition)
    rank, step, step_us, comm_us (union of collective kernels), compute_us (union of
    the other kernels), overlap_us (communication running while a compute kernel
    runs), overlap_pct (% of comm_us), exposed_us (comm_us - overlap_us).

Message sizes come from the host call that launched the collective: the innermost
enclosing ``record_param_comms`` ("In msg nelems" x dtype) or ``nccl:*`` range
("Input Dims" x "Input type").
"""

from __future__ import annotations

import bisect
import json
from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from ..store.vocabulary import COMM_RANGE_LIBS, COMM_RANGE_SQL_RE, collective_op
from . import intervals as iv
from .base import SqlView, analyser
from .common import fetch, launch_calls_sql
from .ranks import step_of, step_windows

#: Bytes per element, by the dtype spellings PyTorch writes into traces.
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "unsigned int": 4, "c10::complex<float>": 8,
    "double": 8, "float64": 8, "long": 8, "long int": 8, "int64": 8, "c10::complex<double>": 16,
    "half": 2, "c10::half": 2, "float16": 2, "bfloat16": 2, "c10::bfloat16": 2, "short": 2, "int16": 2,
    "char": 1, "signed char": 1, "unsigned char": 1, "byte": 1, "bool": 1, "int8": 1, "uint8": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip


def message_bytes(name: str, args: str | None) -> int | None:
    """Message size of a communication host call from its trace args, or None."""
    if not args:
        return None
    try:
        a = json.loads(args)
    except ValueError:
        return None
    if not isinstance(a, dict):
        return None
    dtype = a.get("dtype")
    n = a.get("In msg nelems")
    if isinstance(n, int) and isinstance(dtype, str) and dtype.lower() in DTYPE_BYTES:
        return n * DTYPE_BYTES[dtype.lower()]
    dims, types = a.get("Input Dims"), a.get("Input type")
    if (
        name.startswith(tuple(f"{lib}:" for lib in COMM_RANGE_LIBS))
        and isinstance(dims, list)
        and isinstance(types, list)
    ):
        total = 0
        for d, t in zip(dims, types, strict=False):
            if not isinstance(d, list) or not isinstance(t, str) or t.lower() not in DTYPE_BYTES:
                return None
            total += int(np.prod(d)) * DTYPE_BYTES[t.lower()] if d else 0
        return total or None
    return None


def collectives(profile: Profile) -> dict[str, np.ndarray]:
    """Collectives: rank, device (-1: host-side), name, ts, dur (ns), bytes (-1 unknown).
    Device ones where a rank has them, else its host-side calls (a CPU / gloo job)."""
    c = fetch(
        profile,
        f"""
        WITH l AS ({launch_calls_sql(pid="pid", tid="tid", lts="ts")})
        SELECT d.rank, d.device, d.name, d.ts, d.dur, l.pid, l.tid, l.lts, l.correlation IS NOT NULL AS launched
        FROM events d LEFT JOIN l ON l.rank = d.rank AND l.correlation = d.correlation
        WHERE d.kind = 'collective' AND d.device_type <> 'cpu' ORDER BY d.rank, d.ts
        """,
    )
    h = fetch(
        profile,
        f"""
        SELECT rank, pid, tid, ts, ts + dur AS te, name, args FROM events
        WHERE device_type = 'cpu' AND kind IN ('cpu_op', 'user_annotation')
          AND (name = 'record_param_comms' OR regexp_matches(name, '{COMM_RANGE_SQL_RE}'))
        ORDER BY rank, pid, tid, ts
        """,
    )
    nbytes = launch_sizes(c, h)
    out = {
        "rank": c["rank"],
        "device": c["device"],
        "name": c["name"],
        "ts": c["ts"],
        "dur": c["dur"],
        "bytes": nbytes,
    }
    return _with_host_collectives(profile, out)


def launch_sizes(c: dict[str, np.ndarray], h: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes of each device collective (``c``: rank, pid, tid, lts, launched; -1 unknown)
    from the innermost host call (``h``: rank, pid, tid, ts, te, name, args, ordered by
    rank, pid, tid, ts) that covers its launch on the launching thread."""
    hosts: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
    for r, p, t, ts, te, n, a in zip(
        h["rank"], h["pid"], h["tid"], h["ts"], h["te"], h["name"], h["args"], strict=True
    ):
        b = message_bytes(str(n), a)
        if b is not None:
            hosts.setdefault((int(r), int(p), int(t)), []).append((int(ts), int(te), b))
    starts = {k: [x[0] for x in v] for k, v in hosts.items()}
    nbytes = np.full(len(c["rank"]), -1, dtype=np.int64)
    for i in range(len(c["rank"])):
        key = (int(c["rank"][i]), int(c["pid"][i]), int(c["tid"][i]))
        lst = hosts.get(key)
        # Not ``lts < 0``: a rank imported with others counts from the first one's
        # origin, so its times may be negative (its sizes were lost that way).
        if not lst or not c["launched"][i]:
            continue
        t = int(c["lts"][i])
        j = bisect.bisect_right(starts[key], t) - 1
        # Walking back from the latest start, the first call that still covers t is
        # the innermost one.
        for _ in range(64):
            if j < 0:
                break
            if lst[j][1] >= t:
                nbytes[i] = lst[j][2]
                break
            j -= 1
    return nbytes


def _with_host_collectives(profile: Profile, dev: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add, for each rank without device events (a CPU job: gloo), its host-side
    ones: the ``collective`` events aiprof record writes for torch.distributed calls,
    else torch.profiler's ``gloo:*`` / ``nccl:*`` ranges (by their op: ``gloo:all_reduce``
    is all_reduce; their size from their own args, :func:`message_bytes`)."""
    h = fetch(
        profile,
        f"""
        WITH c AS (SELECT rank, -1 AS device, name, ts, dur, coalesce(bytes, -1) AS bytes, name AS range_name,
                          NULL AS args, 0 AS pri
                   FROM events WHERE kind = 'collective' AND device_type = 'cpu'
                   UNION ALL
                   SELECT rank, -1, regexp_replace(name, '{COMM_RANGE_SQL_RE}', ''), ts, dur, -1, name, args, 1
                   FROM events
                   WHERE device_type = 'cpu' AND kind IN ('cpu_op', 'user_annotation')
                     AND regexp_matches(name, '{COMM_RANGE_SQL_RE}')),
        best AS (SELECT rank, min(pri) AS pri FROM c GROUP BY rank),
        dev AS (SELECT DISTINCT rank FROM events WHERE device_type <> 'cpu')
        SELECT c.rank, c.device, c.name, c.ts, c.dur, c.bytes, c.range_name, c.args FROM c JOIN best USING (rank)
        WHERE c.pri = best.pri AND c.rank NOT IN (SELECT rank FROM dev) ORDER BY c.rank, c.ts
        """,
    )
    keep = ~np.isin(h["rank"], np.unique(dev["rank"]))
    if not keep.any():
        return dev
    # A range's size from its own args ("Input Dims" x "Input type"), as the cluster
    # index reads it (cluster/summary.py: host_collective_rows).
    for i in np.flatnonzero(keep & (h["bytes"] < 0)):
        a = h["args"][i]
        b = message_bytes(str(h["range_name"][i]), a if isinstance(a, str) else None)
        h["bytes"][i] = b if b is not None else -1
    return {k: np.concatenate([dev[k], h[k][keep]]) for k in dev}


_COMM_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("op", pa.string()),
        ("calls", pa.int64()),
        ("total_us", pa.float64()),
        ("mean_us", pa.float64()),
        ("bytes", pa.int64()),
        ("sized_calls", pa.int64()),
        ("mean_bytes", pa.float64()),
        ("gbps", pa.float64()),
        ("note", pa.string()),
    ]
)


@analyser(
    "communication",
    "Collective communication",
    default_sort=("rank", "step", "-total_us"),
    units={"total_us": "µs", "mean_us": "µs", "bytes": "B", "mean_bytes": "B", "gbps": "GB/s"},
)
def communication(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, step and collective op (see the module doc for the columns)."""
    c = collectives(profile)
    w = step_windows(profile)
    steps = np.full(len(c["rank"]), -1, dtype=np.int64)
    for r in np.unique(c["rank"]):
        sel = np.flatnonzero(c["rank"] == r)
        steps[sel] = step_of(w, int(r), c["ts"][sel])
    groups: dict[tuple[int, int, str], list[int]] = {}
    for i in range(len(c["rank"])):
        groups.setdefault((int(c["rank"][i]), int(steps[i]), collective_op(str(c["name"][i]))), []).append(i)
    rows: list[dict[str, Any]] = []
    for (r, s, op), idx in sorted(groups.items()):
        ix = np.array(idx)
        dur = c["dur"][ix].astype(np.float64)
        b = c["bytes"][ix]
        known = b >= 0
        kb = int(b[known].sum()) if known.any() else None
        kd = float(dur[known].sum())
        rows.append(
            {
                "rank": r,
                "step": s if s >= 0 else None,
                "op": op,
                "calls": len(ix),
                "total_us": float(dur.sum()) / 1000.0,
                "mean_us": float(dur.mean()) / 1000.0,
                "bytes": kb,
                "sized_calls": int(known.sum()),
                "mean_bytes": kb / int(known.sum()) if kb is not None else None,
                "gbps": kb / kd if kb is not None and kd > 0 else None,
                "note": None,
            }
        )
    rows += _hidden_ddp_rows(profile, set(np.unique(c["rank"]).tolist()))
    return pa.Table.from_pylist(rows, schema=_COMM_SCHEMA)


def _hidden_ddp_rows(profile: Profile, seen: set[int]) -> list[dict[str, Any]]:
    """A row per DDP rank with no collective recorded (its device work aside): its
    all-reduces are in DDP's C++ reducer, not measured."""
    from .overview import measured_ranks
    from .rank_waits import DDP_COMM_NOTE, ddp_ranks

    hidden = sorted(ddp_ranks(profile) - seen - measured_ranks(profile, "device"))
    blank = {k: None for k in _COMM_SCHEMA.names}
    return [blank | {"rank": r, "op": "all_reduce", "note": DDP_COMM_NOTE} for r in hidden]


_OVERLAP_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("step_us", pa.float64()),
        ("comm_us", pa.float64()),
        ("compute_us", pa.float64()),
        ("overlap_us", pa.float64()),
        ("overlap_pct", pa.float64()),
        ("exposed_us", pa.float64()),
    ]
)


@analyser(
    "comm_overlap",
    "Communication / computation overlap",
    default_sort=("rank", "step"),
    units={c: "µs" for c in ("step_us", "comm_us", "compute_us", "overlap_us", "exposed_us")} | {"overlap_pct": "%"},
)
def comm_overlap(profile: Profile, params: dict[str, Any]) -> pa.Table | SqlView:
    """One row per rank and step of a rank that runs collectives (module doc: columns)."""
    from ..cluster.views import comm_overlap_from_index

    indexed = comm_overlap_from_index(profile)  # a many-rank job: one SQL pass over its index
    if indexed is not None:
        return indexed
    w = step_windows(profile)
    d = fetch(
        profile,
        "SELECT rank, kind = 'collective' AS comm, kind = 'kernel' AS kern, ts, ts + dur AS te FROM events "
        "WHERE device_type <> 'cpu' AND kind IN ('kernel', 'collective') AND dur > 0",
    )
    rows: list[dict[str, Any]] = []
    for r in np.unique(d["rank"]):
        sel = d["rank"] == r
        if not (sel & d["comm"]).any():
            continue
        wsel = np.flatnonzero(w["rank"] == r)
        w0, w1 = w["start"][wsel], w["end"][wsel]
        comm, comp, ov = step_overlap(d["ts"], d["te"], sel & d["comm"], sel & d["kern"], w0, w1)
        for j, i in enumerate(wsel):
            cu = int(comm[j])
            rows.append(
                {
                    "rank": int(r),
                    "step": int(w["step"][i]) if w["step"][i] >= 0 else None,
                    "step_us": int(w1[j] - w0[j]) / 1000.0,
                    "comm_us": cu / 1000.0,
                    "compute_us": int(comp[j]) / 1000.0,
                    "overlap_us": int(ov[j]) / 1000.0,
                    "overlap_pct": 100.0 * int(ov[j]) / cu if cu > 0 else None,
                    "exposed_us": (cu - int(ov[j])) / 1000.0,
                }
            )
    return pa.Table.from_pylist(rows, schema=_OVERLAP_SCHEMA)


def step_overlap(
    ts: np.ndarray, te: np.ndarray, comm: np.ndarray, kernels: np.ndarray, w0: np.ndarray, w1: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The overlap rule (HTA's): per window [w0, w1), the ns covered by the union of the
    ``comm`` intervals, by the union of the ``kernels`` (computation) intervals, and by
    communication while computation runs (the two unions intersected). Memcpy and memset
    are not computation. ``comm`` and ``kernels`` are masks over the ``ts``/``te`` rows."""
    cs, ce = iv.merge(ts[comm], te[comm])
    ks, ke = iv.merge(ts[kernels], te[kernels])
    both_s, both_e = intersect(cs, ce, ks, ke)
    return iv.covered(cs, ce, w0, w1), iv.covered(ks, ke, w0, w1), iv.covered(both_s, both_e, w0, w1)


def intersect(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two sorted, disjoint interval sets."""
    out0: list[int] = []
    out1: list[int] = []
    i = j = 0
    while i < len(a0) and j < len(b0):
        lo = max(int(a0[i]), int(b0[j]))
        hi = min(int(a1[i]), int(b1[j]))
        if lo < hi:
            out0.append(lo)
            out1.append(hi)
        if a1[i] < b1[j]:
            i += 1
        else:
            j += 1
    return np.array(out0, dtype=np.int64), np.array(out1, dtype=np.int64)
