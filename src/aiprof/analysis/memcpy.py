"""Memory copies and sets by direction, host memory kind and host API.

``memcpy`` (one row per rank, direction, host memory kind and API)
    rank, direction (H2D, D2H, D2D, P2P, H2H, or 'memset'), host_memory (pageable,
    pinned, managed, device (no host side), unknown), api (the host call that issued
    it: cudaMemcpyAsync, cudaMemcpy, hipMemcpyWithStream...; '(unknown)'), is_async
    (whether the call returns before the copy ends; null when the call is unknown),
    copies, bytes (null when no copy of the group says), total_us, mean_us (µs),
    mean_bytes, gbps (bytes / time of the sized copies, GB/s), api_us (host time in
    the issuing calls, µs).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import launch_calls_sql
from .sync import SYNC_MEMCPY_RE, SYNC_MEMSET_RE

_DIRECTIONS = (
    (re.compile(r"HtoD|H2D|Host *-> *Device", re.I), "H2D"),
    (re.compile(r"DtoH|D2H|Device *-> *(Host|Pageable|Pinned)", re.I), "D2H"),
    (re.compile(r"PtoP|P2P|Peer", re.I), "P2P"),
    (re.compile(r"DtoD|D2D", re.I), "D2D"),
    (re.compile(r"HtoH|H2H", re.I), "H2H"),
)
_SYNC = re.compile(SYNC_MEMCPY_RE + "|" + SYNC_MEMSET_RE)


def direction(name: str, kind: str) -> str:
    """H2D, D2H, D2D, P2P, H2H from a copy's name; 'memset' for sets; else 'unknown'."""
    if kind == "memset":
        return "memset"
    for rx, d in _DIRECTIONS:
        if rx.search(name):
            return d
    return "unknown"


def host_memory(name: str, d: str) -> str:
    """pageable / pinned / managed from the copy's name; 'device' when no host side."""
    n = name.lower()
    for k in ("pageable", "pinned", "managed"):
        if k in n:
            return k
    if d in ("D2D", "P2P", "memset"):
        return "device"
    return "unknown"


_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("direction", pa.string()),
        ("host_memory", pa.string()),
        ("api", pa.string()),
        ("is_async", pa.bool_()),
        ("copies", pa.int64()),
        ("bytes", pa.int64()),
        ("total_us", pa.float64()),
        ("mean_us", pa.float64()),
        ("mean_bytes", pa.float64()),
        ("gbps", pa.float64()),
        ("api_us", pa.float64()),
    ]
)


@analyser(
    "memcpy",
    "Memory copies",
    default_sort=("-total_us",),
    units={"total_us": "µs", "mean_us": "µs", "api_us": "µs", "bytes": "B", "mean_bytes": "B", "gbps": "GB/s"},
)
def memcpy(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, direction, host memory kind and API (module doc: columns)."""
    t = profile.sql(
        f"""
        WITH rt AS ({launch_calls_sql(api="name", api_dur="dur")})
        SELECT d.rank, d.kind, d.name, coalesce(r.api, '(unknown)') AS api, r.api_dur, d.dur, d.bytes
        FROM events d LEFT JOIN rt r ON r.rank = d.rank AND r.correlation = d.correlation
        WHERE d.device_type <> 'cpu' AND d.kind IN ('memcpy', 'memset')
        """
    ).to_pylist()
    groups: dict[tuple[int, str, str, str], list[dict[str, Any]]] = {}
    for e in t:
        d = direction(e["name"] or "", e["kind"])
        groups.setdefault((e["rank"], d, host_memory(e["name"] or "", d), e["api"]), []).append(e)
    rows: list[dict[str, Any]] = []
    for (r, d, hm, api), es in sorted(groups.items()):
        total = sum(e["dur"] or 0 for e in es)
        sized = [e for e in es if e["bytes"] is not None]
        b = sum(e["bytes"] for e in sized) if sized else None
        sdur = sum(e["dur"] or 0 for e in sized)
        rows.append(
            {
                "rank": r,
                "direction": d,
                "host_memory": hm,
                "api": api,
                "is_async": None if api == "(unknown)" else not _SYNC.search(api),
                "copies": len(es),
                "bytes": b,
                "total_us": total / 1000.0,
                "mean_us": total / len(es) / 1000.0,
                "mean_bytes": b / len(sized) if b is not None else None,
                "gbps": b / sdur if b is not None and sdur > 0 else None,
                "api_us": sum(e["api_dur"] or 0 for e in es) / 1000.0,
            }
        )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
