"""Device kernels by name."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import analyser


@analyser(
    "kernels",
    "Kernels",
    default_sort=("-total_us",),
    units={k: "µs" for k in ("total_us", "mean_us", "median_us", "min_us", "max_us")} | {"pct": "%"},
)
def kernels(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per kernel name (device kinds kernel and collective):
    name, kind, count, total_us, mean_us, median_us, min_us, max_us (µs),
    pct (% of all kernel time), devices and streams (comma-separated), ranks."""
    # A small aggregate: materialised once, then filtered and paged in memory (one
    # execution instead of one for the count and one for the page).
    return profile.sql(
        """
        WITH k AS (
            SELECT * FROM events WHERE device_type <> 'cpu' AND kind IN ('kernel', 'collective'))
        SELECT name, any_value(kind) AS kind, count(*) AS count,
               sum(dur) / 1000.0 AS total_us, avg(dur) / 1000.0 AS mean_us,
               median(dur) / 1000.0 AS median_us, min(dur) / 1000.0 AS min_us, max(dur) / 1000.0 AS max_us,
               100.0 * sum(dur) / nullif((SELECT sum(dur) FROM k), 0) AS pct,
               string_agg(DISTINCT device::VARCHAR, ',' ORDER BY device::VARCHAR) AS devices,
               string_agg(DISTINCT tid::VARCHAR, ',' ORDER BY tid::VARCHAR) AS streams,
               string_agg(DISTINCT rank::VARCHAR, ',' ORDER BY rank::VARCHAR) AS ranks
        FROM k GROUP BY name
        """
    )
