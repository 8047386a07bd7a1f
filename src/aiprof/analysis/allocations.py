"""Allocations: one row per allocator block, with its lifetime, owner and call stack."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import arrays_of, fetch
from .memory import NO_OPERATOR, OWNER_KINDS
from .open_spans import SPAN_ORDER, open_values

_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("device_type", pa.string()),
        ("device", pa.int64()),
        ("ts_us", pa.float64()),
        ("bytes", pa.int64()),
        ("freed_us", pa.float64()),
        ("lifetime_us", pa.float64()),
        ("live_at_peak", pa.bool_()),
        ("operator", pa.string()),
        ("stack", pa.string()),
    ]
)

#: Host spans that make up an allocation's call stack (python frames when the trace
#: was recorded with stacks, framework operators and user annotations otherwise).
STACK_KINDS = ("python", "cpu_op", "user_annotation", "dataloader")
#: Frames kept of a stack (innermost ones); deeper stacks say how many were cut.
STACK_DEPTH = 32
STACK_SEP = " > "
#: Host spans read at a time (their memory is a batch's, whatever the profile's size).
SPAN_BATCH = 1 << 20


@analyser(
    "allocations",
    "Allocations",
    default_sort=("-bytes",),
    units={"ts_us": "µs", "freed_us": "µs", "lifetime_us": "µs", "bytes": "B"},
)
def allocations(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per allocation recorded by the allocator: rank, device_type, device,
    ts_us (when it was allocated, µs), bytes, freed_us and lifetime_us (null when it
    is still held at the end of the trace), live_at_peak (held at the device's peak of
    allocated memory, as in the memory view), operator (innermost host operator
    running on the allocating thread, as in the memory view) and stack (the host spans
    open on that thread, outermost first, joined by ' > ')."""
    t = fetch(
        profile,
        """
        WITH a AS (SELECT rank, device_type, device, ts, bytes, addr, pid, tid FROM memory WHERE bytes > 0),
        f AS (SELECT rank, device_type, device, ts, addr FROM memory WHERE bytes < 0),
        p AS (SELECT rank, device_type, device, arg_max(ts, (allocated, -ts)) AS pts FROM memory
              WHERE allocated IS NOT NULL GROUP BY ALL)
        SELECT a.rank, a.device_type, a.device, a.ts, a.bytes, a.pid, a.tid, f.ts AS freed, f.ts IS NOT NULL AS has_free,
               coalesce(p.pts IS NOT NULL AND a.ts <= p.pts AND (f.ts IS NULL OR f.ts > p.pts), false) AS live
        FROM a ASOF LEFT JOIN f
          ON a.rank = f.rank AND a.device_type = f.device_type AND a.device = f.device
             AND a.addr = f.addr AND f.ts >= a.ts
        LEFT JOIN p ON a.rank = p.rank AND a.device_type = p.device_type AND a.device = p.device
        ORDER BY a.rank, a.pid, a.tid, a.ts, a.device_type, a.device, a.addr, a.bytes
        """,
        codes=("device_type",),
    )
    n = len(t["ts"])
    if not n:
        return _SCHEMA.empty_table()
    t["device_type"] = t.pop("device_type__dict")[t["device_type"]]  # one string object per type
    kinds = ", ".join(f"'{k}'" for k in STACK_KINDS)
    names: list[str] = []
    stacks: list[str] = []
    # A stack is the tuple of its spans' values (name code * 2 + is owner), and equal
    # stacks share one pair of strings; the owner is the innermost open span of
    # OWNER_KINDS (what memory.owners finds over those spans alone).
    text: list[str] = []
    code_of: dict[str, int] = {}
    said: dict[tuple[int, ...], tuple[str, str]] = {}
    nothing = (NO_OPERATOR, "")
    for rank in np.unique(t["rank"]).tolist():
        sel = np.flatnonzero(t["rank"] == rank)
        sub = {k: t[k][sel] for k in ("ts", "pid", "tid")}
        # The host spans of the threads that allocate, read in batches (a big profile's
        # spans never all in memory: bench/huge_import.py).
        sql = (
            f"SELECT e.pid, e.tid, e.ts, e.ts + e.dur AS te, e.name, e.kind FROM events e SEMI JOIN ("
            f"  SELECT DISTINCT pid, tid & 4294967295 AS t FROM memory WHERE rank = {int(rank)} AND bytes > 0"
            f") m ON e.pid = m.pid AND (e.tid & 4294967295) = m.t "
            f"WHERE e.rank = {int(rank)} AND e.device_type = 'cpu' AND e.kind IN ({kinds}) "
            f"ORDER BY {', '.join('e.' + c for c in SPAN_ORDER.split(', '))}"
        )

        def valued(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
            spans = arrays_of(batch, codes=("name", "kind"))
            gid = np.array([code_of.setdefault(str(x), len(code_of)) for x in spans["name__dict"].tolist()], np.int64)
            is_owner = np.isin(spans["kind__dict"], OWNER_KINDS)[spans["kind"]]
            spans["value"] = gid[spans["name"]] * 2 + is_owner
            return spans

        rows = [nothing] * len(sel)
        for i, key_list in open_values(sub, map(valued, profile.batches(sql, SPAN_BATCH))):
            key = tuple(key_list)
            got = said.get(key)
            if got is None:
                if len(text) < len(code_of):
                    text = list(code_of)
                owner = next((text[c // 2] for c in reversed(key) if c % 2), NO_OPERATOR)
                got = said[key] = (owner, _stack([text[c // 2] for c in key]))
            rows[i] = got
        names += [a for a, _ in rows]
        stacks += [b for _, b in rows]
    freed = t["freed"]
    has_free = t["has_free"]
    ts_us = t["ts"] / 1000.0
    freed_us = np.where(has_free, freed / 1000.0, np.nan)
    return pa.table(
        {
            "rank": t["rank"],
            "device_type": t["device_type"],
            "device": t["device"],
            "ts_us": ts_us,
            "bytes": t["bytes"],
            "freed_us": pa.array(freed_us, mask=~has_free),
            "lifetime_us": pa.array(freed_us - ts_us, mask=~has_free),
            "live_at_peak": t["live"],
            "operator": names,
            "stack": stacks,
        },
        schema=_SCHEMA,
    )


def _stack(frames: list[str]) -> str:
    """Frames outermost first, the innermost STACK_DEPTH kept."""
    cut = len(frames) - STACK_DEPTH
    if cut > 0:
        frames = [f"({cut} more)", *frames[cut:]]
    return STACK_SEP.join(frames)
