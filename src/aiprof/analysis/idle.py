"""Device idle time per stream, by cause (Holistic Trace Analysis's definitions).

Between two consecutive device operations on a stream, the gap is:
- host_wait when the host launched the second one only after the first had ended
  (the device waited on the host);
- kernel_wait when the gap is shorter than 30 µs (back-to-back launch overhead);
- other otherwise (synchronisation, waiting on other streams, ...).
Operations are kernels, collectives, copies and sets in HTA's window (see
common.hta_device_window_sql). HTA sums negative gaps (overlapping operations on one
stream) as they are; we count them as 0, since a stream cannot be idle less than not
at all.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import hta_window

KERNEL_WAIT_NS = 30_000


@analyser(
    "idle",
    "Idle time",
    default_sort=("rank", "device", "stream"),
    units={k: "µs" for k in ("idle_us", "host_wait_us", "kernel_wait_us", "other_us", "busy_us", "span_us")}
    | {"idle_pct": "%"},
)
def idle(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per (rank, device, stream): ops, span_us (first start to last end),
    busy_us, idle_us (sum of gaps), host_wait_us, kernel_wait_us, other_us (µs),
    idle_pct (% of span)."""
    from .derived import load_rows

    kept = load_rows(profile, "stream_idle")
    return kept if kept is not None else idle_from_events(profile)


def idle_from_events(profile: Profile) -> pa.Table:
    """The idle view's rows computed from the events (the rule; kept at import as the
    derived table ``stream_idle``)."""
    window = hta_window(profile)
    # A small aggregate: materialised once, then filtered and paged in memory (one
    # execution instead of one for the count and one for the page).
    return profile.sql(
        f"""
        WITH o AS (SELECT * FROM {window} WHERE kind IN ('kernel', 'collective', 'memcpy', 'memset')),
        g AS (
            SELECT rank, device, tid, ts, dur, launch_ts,
                   lag(ts + dur) OVER (PARTITION BY rank, device, tid ORDER BY ts, dur) AS prev_end
            FROM o),
        c AS (
            SELECT *, greatest(ts - prev_end, 0) AS gap,
                   CASE WHEN prev_end IS NULL THEN NULL
                        WHEN launch_ts IS NOT NULL AND launch_ts > prev_end THEN 'host_wait'
                        WHEN ts - prev_end < {KERNEL_WAIT_NS} THEN 'kernel_wait'
                        ELSE 'other' END AS cause
            FROM g)
        SELECT rank, device, tid AS stream, count(*) AS ops,
               (max(ts + dur) - min(ts)) / 1000.0 AS span_us,
               sum(dur) / 1000.0 AS busy_us,
               coalesce(sum(gap), 0) / 1000.0 AS idle_us,
               coalesce(sum(gap) FILTER (WHERE cause = 'host_wait'), 0) / 1000.0 AS host_wait_us,
               coalesce(sum(gap) FILTER (WHERE cause = 'kernel_wait'), 0) / 1000.0 AS kernel_wait_us,
               coalesce(sum(gap) FILTER (WHERE cause = 'other'), 0) / 1000.0 AS other_us,
               100.0 * coalesce(sum(gap), 0) / nullif(max(ts + dur) - min(ts), 0) AS idle_pct
        FROM c GROUP BY rank, device, tid
        """
    )
