"""The raw events, for browsing: every column of the events table, times in µs too."""

from __future__ import annotations

from typing import Any

from ..errors import QueryError
from ..store import Profile
from .base import SqlView, analyser


@analyser("events", "Events", default_sort=("ts",), units={"ts": "ns", "dur": "ns", "ts_us": "µs", "dur_us": "µs"})
def events(profile: Profile, params: dict[str, Any]) -> SqlView:
    """Every event: the events table's columns (ts, dur in ns) plus ts_us and dur_us (µs).
    Pass params {"kinds": [...]} to keep only some kinds before the query runs."""
    kinds = params.get("kinds")
    if isinstance(kinds, str):
        kinds = [k for k in kinds.split(",") if k]
    if kinds is not None and (not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds)):
        raise QueryError("params.kinds must be a list of kind names")
    where = ""
    if kinds:
        where = "WHERE kind IN (" + ", ".join("'" + str(k).replace("'", "''") + "'" for k in kinds) + ")"
    return SqlView(f"SELECT *, ts / 1000.0 AS ts_us, dur / 1000.0 AS dur_us FROM events {where}")
