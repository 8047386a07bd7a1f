"""Allocated memory where a trace gives only the size of each allocator event.

Some traces carry ``Bytes`` (+ on alloc, - on free) in their ``[memory]`` events but no
``Total Allocated`` (tb-profiler's own ResNet50 sample does). The memory view, the
timeline's memory curve and the HTML report read ``allocated``, so for each device
with sizes and no totals it is derived once, when the profile is committed: the running
sum of ``bytes`` in time order (file order for ties). Frees of blocks allocated before
the trace began would drive that sum below zero; the curve is lifted by the deepest
such dip, the least memory that must already have been held. ``reserved`` is not
derived (no event says what the caching allocator holds).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from . import duck
from .schema import SCHEMAS


def derive_allocated(table: Path) -> list[str]:
    """Fill ``allocated`` in memory.parquet ``table`` where a device has sizes and no
    totals; returns one warning per derived device (empty when nothing was derived)."""
    con = duck.connect(threads=None)
    try:
        src = f"read_parquet('{_quote(table)}', file_row_number = true)"
        devices = con.sql(
            f"SELECT rank, device_type, device FROM {src} GROUP BY ALL "
            "HAVING count(allocated) = 0 AND count(bytes) > 0 ORDER BY ALL"
        ).fetchall()
        if not devices:
            return []
        derived = con.sql(
            f"""
            WITH d AS (SELECT * FROM (VALUES {", ".join("(?, ?, ?)" for _ in devices)}) AS v(r, dt, dv)),
            m AS (
                SELECT t.*, (d.r IS NOT NULL) AS derive,
                       sum(coalesce(t.bytes, 0)) OVER (
                           PARTITION BY t.rank, t.device_type, t.device
                           ORDER BY t.ts, t.file_row_number
                           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running
                FROM {src} t
                LEFT JOIN d ON t.rank IS NOT DISTINCT FROM d.r AND t.device_type IS NOT DISTINCT FROM d.dt
                           AND t.device IS NOT DISTINCT FROM d.dv
            ),
            lifted AS (
                SELECT *, running - least(0, min(running) OVER (PARTITION BY rank, device_type, device)) AS total
                FROM m
            )
            SELECT rank, device_type, device, ts, bytes,
                   CASE WHEN derive THEN total::BIGINT ELSE allocated END AS allocated,
                   reserved, addr, name, pid, tid
            FROM lifted ORDER BY file_row_number
            """,
            params=[v for dev in devices for v in dev],
        ).to_arrow_table()
    finally:
        con.close()
    tmp = table.with_name(f".{table.name}.derived")
    pq.write_table(derived.cast(SCHEMAS["memory"]), tmp, compression="zstd", use_dictionary=True)
    tmp.replace(table)
    return [
        f"memory: allocated on rank {r} {dt}:{dv} derived from the running sum of Bytes "
        "(the trace has no Total Allocated); memory held before the trace began counts only as far as its frees show"
        for r, dt, dv in devices
    ]


def _quote(p: Path) -> str:
    return str(p).replace("'", "''")
