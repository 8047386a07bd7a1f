"""Counter series summarised per metric."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import analyser


@analyser("counters", "Counters", default_sort=("rank", "device_type", "device", "metric"))
def counters(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per (rank, device_type, device, metric, unit): samples, min, mean, max,
    last (in the metric's unit), first_ts_us and last_ts_us (µs)."""
    # A small aggregate: materialised once, then filtered and paged in memory (one
    # execution instead of one for the count and one for the page).
    return profile.sql(
        """
        SELECT rank, device_type, device, metric, unit, count(*) AS samples,
               min(value) AS min, avg(value) AS mean, max(value) AS max,
               arg_max(value, ts) AS last, min(ts) / 1000.0 AS first_ts_us, max(ts) / 1000.0 AS last_ts_us
        FROM counters GROUP BY ALL
        """
    )
