"""Counter and memory series of one profile, downsampled per pixel for a window.

Used by the web API (``/counters/series``, ``/memory/series``) and by the one-file HTML
report; the timeline's events are :mod:`.timeline`'s.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import tiles
from .timeline import Reading, Window, arrow_table


class SeriesQuery:
    """Downsampled counter and memory series, merged per pixel.

    ``lock`` guards the fill of ``cache`` (once per profile); queries run on a
    connection from ``reading`` (by default ``profile`` behind ``lock``)."""

    def __init__(
        self,
        profile: Profile,
        lock: threading.RLock,
        cache: dict[str, Any] | None = None,
        reading: Reading | None = None,
    ) -> None:
        self.profile = profile
        self.lock = lock
        #: Answers that do not depend on the window (memory peaks), kept by the caller
        #: per profile so that each window request does not scan the whole table again.
        self.cache = cache if cache is not None else {}
        self._reading: Reading = reading or self._served

    @contextmanager
    def _served(self) -> Iterator[Profile]:
        with self.lock:
            yield self.profile

    def _kept(self, key: str, make: Callable[[Profile], Any]) -> Any:
        """``cache[key]``, made once by ``make(profile)``."""
        value = self.cache.get(key)
        if value is None:
            with self.lock:
                value = self.cache.get(key)
                if value is None:
                    with self._reading() as prof:
                        value = self.cache[key] = make(prof)
        return value

    def metrics(self) -> list[dict[str, Any]]:
        """Counter series available: rank, device_type, device, metric, unit, samples, min, max."""
        sql = """SELECT rank, device_type, device, metric, any_value(unit) AS unit, count(*) AS samples,
                        min(value) AS min, max(value) AS max
                 FROM counters GROUP BY rank, device_type, device, metric ORDER BY ALL"""
        rows: list[dict[str, Any]] = self._kept("metrics", lambda prof: list(arrow_table(prof, sql).to_pylist()))
        return rows

    def counter(self, w: Window, metric: str, rank: int | None = None, device: int | None = None) -> dict[str, Any]:
        """One metric over [t0, t1]: per pixel ts (first sample), min, max, mean, last."""
        bucket = max(1, math.ceil((w.t1 - w.t0) / w.width))
        cond = ["metric = ?"]
        params: list[Any] = [metric]
        if rank is not None:
            cond.append("rank = ?")
            params.append(rank)
        if device is not None:
            cond.append("device = ?")
            params.append(device)
        # The counters sorted by ts, in memory once: a window is a slice found by a
        # binary search, not a scan of the Parquet files.
        by_ts: pa.Table = self._kept(
            "counters_by_ts",
            lambda prof: arrow_table(prof, "SELECT rank, device, metric, ts, value FROM counters ORDER BY ts"),
        )
        ts = self._kept("counters_ts", lambda _p: by_ts.column("ts").to_numpy(zero_copy_only=False))
        lo, hi = int(np.searchsorted(ts, w.t0, side="left")), int(np.searchsorted(ts, w.t1, side="right"))
        sql = f"""SELECT min(ts) AS ts, min(value) AS min, max(value) AS max, avg(value) AS mean,
                         arg_max(value, ts) AS last
                  FROM tl_counters WHERE {" AND ".join(cond)}
                  GROUP BY floor((ts - {w.t0}) / {bucket}) ORDER BY ts"""
        with self._reading() as prof:
            prof.con.register("tl_counters", by_ts.slice(lo, hi - lo))
            try:
                tab = arrow_table(prof, sql, params)
            finally:
                prof.con.unregister("tl_counters")
        out: dict[str, Any] = {c: tab.column(c).to_pylist() for c in ("ts", "min", "max", "mean", "last")}
        out.update({"metric": metric, "t0": w.t0, "t1": w.t1, "bucket_ns": bucket})
        return out

    def memory(self, w: Window, rank: int | None = None, device: int | None = None) -> dict[str, Any]:
        """Allocator state over [t0, t1] per device: per pixel ts, allocated and reserved
        (the maximum within the pixel, bytes), and the peak of allocated over the whole
        profile (ts, bytes) per device."""
        bucket = max(1, math.ceil((w.t1 - w.t0) / w.width))
        pcond = ["true"]
        for col, v in (("rank", rank), ("device", device)):
            if v is not None:
                pcond.append(f"{col} = {int(v)}")
        psql = f"""SELECT rank, device_type, device, arg_max(ts, allocated) AS peak_ts, max(allocated) AS peak_bytes,
                          max(reserved) AS peak_reserved, count(*) AS events
                   FROM memory WHERE {" AND ".join(pcond)} GROUP BY ALL ORDER BY rank, device"""
        # Once per profile: the series in memory (web/tiles.py), and each peak query.
        arrays: tiles.MaxSeries = self._kept(
            "memory_arrays",
            lambda prof: tiles.MaxSeries(
                # Sorted by DuckDB (in parallel, and far quicker than an Arrow sort).
                arrow_table(
                    prof,
                    "SELECT rank, device_type, device, ts, allocated, reserved FROM memory "
                    "ORDER BY rank NULLS LAST, device NULLS LAST, device_type NULLS LAST, ts NULLS LAST",
                ),
                ("rank", "device", "device_type"),
                ("allocated", "reserved"),
                presorted=True,
            ),
        )
        rows = arrays.window(w.t0, w.t1, bucket, {"rank": rank, "device": device})
        peaks = self._kept(psql, lambda prof: list(arrow_table(prof, psql).to_pylist()))
        series = [{c: r[c] for c in ("rank", "device_type", "device", "ts", "allocated", "reserved")} for r in rows]
        return {"t0": w.t0, "t1": w.t1, "bucket_ns": bucket, "series": series, "peaks": peaks}
