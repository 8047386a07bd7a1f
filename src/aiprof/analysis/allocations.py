"""Allocations: one row per allocator block, with its lifetime, owner and call stack."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch
from .memory import NO_OPERATOR, OWNER_KINDS
from .open_spans import owned_stacks

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
    names: list[str] = []
    stacks: list[str] = []
    # Equal stacks share one pair of strings; the owner is the innermost open span of
    # OWNER_KINDS (what memory.owners finds over those spans alone).
    said: dict[tuple[int, ...], tuple[str, str]] = {}
    nothing = (NO_OPERATOR, "")
    for rank in np.unique(t["rank"]).tolist():
        sel = np.flatnonzero(t["rank"] == rank)
        sub = {k: t[k][sel] for k in ("ts", "pid", "tid")}
        rows = [nothing] * len(sel)
        for i, key, text in owned_stacks(profile, rank, sub, STACK_KINDS, OWNER_KINDS):
            got = said.get(key)
            if got is None:
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
