"""Host calls that wait for the device, and garbage-collector pauses.

``sync`` (one row per rank, step and blocking call name)
    rank, step (null outside steps or without steps), category, name, calls,
    blocked_us (total duration, µs), max_us.

Categories:
- ``sync_api``: runtime synchronize calls (cudaDeviceSynchronize,
  cudaStreamSynchronize, cudaEventSynchronize, hip*/aclrt*/cnrt* equivalents);
- ``sync_memcpy``, ``sync_memset``: blocking copies and sets (cudaMemcpy, cudaMemset
  without Async, and their hip equivalents);
- ``item``: ``.item()`` / scalar reads (aten::item, aten::_local_scalar_dense);
- ``to_host``: aten::to / aten::copy_ / aten::_to_copy calls that launched a
  device-to-host copy (``tensor.to('cpu')``, ``.cpu()``, ``.numpy()``);
- ``device_sync``: device-side ``cuda_sync`` events (kind sync: event syncs, stream
  waits); they are device records of the waits above, not extra host time;
- ``gc``: garbage-collector pauses (kind gc).
One row per rank and step with category ``all`` and name ``(all)`` holds the union of
the host-side blocking time (sync_api, sync_memcpy, sync_memset, item, to_host), so
nested calls (an item() that contains a stream sync) count once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from .base import analyser
from .common import fetch
from .ranks import step_of, step_windows

SYNC_API_RE = (
    r"^(cuda|hip)(Device|Stream|Event|Ctx|Context)Synchroni[sz]e|^cu(Ctx|Stream|Event)Synchroni[sz]e"
    r"|(^|@)aclrtSynchroni[sz]e|^cnrt(SyncDevice|QueueSync|SyncQueue|SyncNotifier)|^(hl|synStream|synEvent|synDevice)Synchroni[sz]e"
)
SYNC_MEMCPY_RE = (
    r"^(cuda|hip)Memcpy(2D|3D|Peer|ToSymbol|FromSymbol|DtoH|HtoD|DtoD|WithStream)?$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?$"
)
SYNC_MEMSET_RE = r"^(cuda|hip)Memset(2D|3D)?$|^cuMemsetD(8|16|32)(_v2)?$"
ITEM_OPS = ("aten::item", "aten::_local_scalar_dense")
TO_HOST_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")
HOST_BLOCKING = ("sync_api", "sync_memcpy", "sync_memset", "item", "to_host")

_SQL = f"""
    WITH d2h AS (
        SELECT DISTINCT r.rank, r.external_id FROM events m
        JOIN events r ON r.rank = m.rank AND r.correlation = m.correlation AND r.device_type = 'cpu'
                      AND r.kind IN ('runtime', 'driver')
        WHERE m.kind = 'memcpy' AND m.device_type <> 'cpu'
          AND regexp_matches(m.name, '(?i)DtoH|Device -> (Pageable|Pinned)|D2H')
          AND r.external_id IS NOT NULL)
    SELECT e.rank, e.ts, e.dur, e.name,
        CASE
          WHEN e.kind = 'gc' THEN 'gc'
          WHEN e.kind = 'sync' THEN 'device_sync'
          WHEN e.kind IN ('runtime', 'driver') AND regexp_matches(e.name, '{SYNC_API_RE}') THEN 'sync_api'
          WHEN e.kind IN ('runtime', 'driver') AND regexp_matches(e.name, '{SYNC_MEMCPY_RE}') THEN 'sync_memcpy'
          WHEN e.kind IN ('runtime', 'driver') AND regexp_matches(e.name, '{SYNC_MEMSET_RE}') THEN 'sync_memset'
          WHEN e.kind = 'cpu_op' AND e.name IN {ITEM_OPS} THEN 'item'
          WHEN e.kind = 'cpu_op' AND e.name IN {TO_HOST_OPS} AND d2h.rank IS NOT NULL THEN 'to_host'
        END AS category
    FROM events e LEFT JOIN d2h ON d2h.rank = e.rank AND d2h.external_id = e.external_id
    WHERE e.kind IN ('gc', 'sync', 'runtime', 'driver', 'cpu_op')
"""


def blocking_calls(profile: Profile) -> dict[str, np.ndarray]:
    """Host calls that block on the device (the categories in HOST_BLOCKING): rank, ts, te (ns)."""
    cats = ", ".join(f"'{c}'" for c in HOST_BLOCKING)
    return fetch(profile, f"SELECT rank, ts, ts + dur AS te FROM ({_SQL}) WHERE category IN ({cats})")


_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("category", pa.string()),
        ("name", pa.string()),
        ("calls", pa.int64()),
        ("blocked_us", pa.float64()),
        ("max_us", pa.float64()),
    ]
)


@analyser(
    "sync", "Synchronization and pauses", default_sort=("-blocked_us",), units={"blocked_us": "µs", "max_us": "µs"}
)
def sync(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, step and blocking call (see the module doc for the columns)."""
    e = fetch(profile, f"SELECT * FROM ({_SQL}) WHERE category IS NOT NULL ORDER BY rank, ts")
    w = step_windows(profile)
    steps = np.full(len(e["rank"]), -1, dtype=np.int64)
    for r in np.unique(e["rank"]):
        sel = np.flatnonzero(e["rank"] == r)
        steps[sel] = step_of(w, int(r), e["ts"][sel])
    groups: dict[tuple[int, int, str, str], list[int]] = {}
    for i in range(len(e["rank"])):
        groups.setdefault((int(e["rank"][i]), int(steps[i]), str(e["category"][i]), str(e["name"][i])), []).append(i)
        if e["category"][i] in HOST_BLOCKING:
            groups.setdefault((int(e["rank"][i]), int(steps[i]), "all", "(all)"), []).append(i)
    rows: list[dict[str, Any]] = []
    for (r, s, cat, name), idx in sorted(groups.items()):
        ix = np.array(idx)
        dur = e["dur"][ix]
        blocked = iv.length(e["ts"][ix], e["ts"][ix] + dur) if cat == "all" else int(dur.sum())
        rows.append(
            {
                "rank": r,
                "step": s if s >= 0 else None,
                "category": cat,
                "name": name,
                "calls": len(ix),
                "blocked_us": blocked / 1000.0,
                "max_us": float(dur.max()) / 1000.0,
            }
        )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
