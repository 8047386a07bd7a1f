"""Memory: peak allocated and reserved per device, and who holds the memory at the peak."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch
from .open_spans import owned_stacks

#: Host spans that own an allocation: the innermost one open on the allocating thread.
OWNER_KINDS = ("cpu_op", "dataloader")
NO_OPERATOR = "(no operator)"

_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("device_type", pa.string()),
        ("device", pa.int64()),
        ("peak_allocated_bytes", pa.int64()),
        ("peak_reserved_bytes", pa.int64()),
        ("peak_ts_us", pa.float64()),
        ("operator", pa.string()),
        ("live_bytes", pa.int64()),
        ("blocks", pa.int64()),
        ("pct_of_peak", pa.float64()),
    ]
)


@analyser(
    "memory",
    "Memory",
    default_sort=("rank", "device_type", "device", "-live_bytes"),
    units={"peak_ts_us": "µs", "pct_of_peak": "%"},
)
def memory(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per (rank, device, operator) holding memory at the device's peak:
    peak_allocated_bytes and peak_reserved_bytes of the device (reserved is null when
    the trace has no reserved totals), peak_ts_us (µs; the first instant of the peak,
    when it is reached again later), the operator (innermost host operator running when
    the block was allocated, '(no operator)', or '(allocated before the trace)' for the part of the peak whose
    allocation was not recorded), live_bytes and blocks it holds at the peak, pct_of_peak (%).
    Devices without allocator events have no rows."""
    peaks = fetch(
        profile,
        "SELECT rank, device_type, device, arg_max(ts, (allocated, -ts)) AS pts, max(allocated) AS pa_, max(reserved) AS pr, count(reserved) > 0 AS has_r "
        "FROM memory WHERE allocated IS NOT NULL GROUP BY rank, device_type, device ORDER BY rank, device_type, device",
    )
    rows: list[dict[str, Any]] = []
    for i in range(len(peaks["pts"])):
        r, dt, d, pts = (
            int(peaks["rank"][i]),
            str(peaks["device_type"][i]),
            int(peaks["device"][i]),
            int(peaks["pts"][i]),
        )
        live = fetch(
            profile,
            """
            WITH m AS (SELECT * FROM memory WHERE rank = ? AND device_type = ? AND device = ?),
            a AS (SELECT ts, addr, bytes, pid, tid FROM m WHERE bytes > 0 AND ts <= ?),
            f AS (SELECT ts, addr FROM m WHERE bytes < 0 AND ts <= ?)
            SELECT a.ts, a.bytes, a.pid, a.tid FROM a
            WHERE NOT EXISTS (SELECT 1 FROM f WHERE f.addr = a.addr AND f.ts >= a.ts)
            ORDER BY a.ts, a.pid, a.tid, a.addr, a.bytes
            """,
            [r, dt, d, pts, pts],
        )
        owner = owners(profile, r, live)
        by: dict[str, list[int]] = {}
        for name, b in zip(owner, live["bytes"].tolist()):
            acc = by.setdefault(name, [0, 0])
            acc[0] += int(b)
            acc[1] += 1
        base = {
            "rank": r,
            "device_type": dt,
            "device": d,
            "peak_allocated_bytes": int(peaks["pa_"][i]),
            "peak_reserved_bytes": int(peaks["pr"][i]) if peaks["has_r"][i] else None,
            "peak_ts_us": pts / 1000.0,
        }
        peak = int(peaks["pa_"][i])
        unseen = peak - sum(b for b, _ in by.values())
        if unseen > 0:
            # Blocks allocated before recording began: live, but their owner is unknown.
            by["(allocated before the trace)"] = [unseen, 0]
        if not by:
            rows.append(base | {"operator": None, "live_bytes": 0, "blocks": 0, "pct_of_peak": None})
        for name, (b, n) in by.items():
            rows.append(
                base
                | {
                    "operator": name,
                    "live_bytes": b,
                    "blocks": n,
                    "pct_of_peak": 100.0 * b / peak if peak > 0 else None,
                }
            )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)


def owners(profile: Profile, rank: int, live: dict[str, np.ndarray]) -> list[str]:
    """Innermost operator (a span of OWNER_KINDS) on the allocating thread of ``rank``
    whose span holds each allocation (``ts``, ``pid``, ``tid``), else '(no operator)';
    the spans are read in batches (open_spans.owned_stacks)."""
    out = [NO_OPERATOR] * len(live["ts"])
    for i, stack, names in owned_stacks(profile, rank, live, OWNER_KINDS, OWNER_KINDS):
        out[i] = names[stack[-1] // 2]
    return out
