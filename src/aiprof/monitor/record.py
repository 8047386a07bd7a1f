"""``--record OUT.aiprof``: monitor samples into the counters table of a profile."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..devices.base import DeviceInfo, Sample, metric_unit
from ..store.writer import ProfileWriter

FLUSH_ROWS = 4096
_COLS = ("rank", "device_type", "device", "ts", "metric", "value", "unit")


class CounterRecorder:
    """Buffers samples as counters rows and writes them in batches; commit() finishes.

    ``ts`` counts from the first sample's Unix ns (the profile's time origin).
    Values that a device cannot give (None) are not written.
    """

    def __init__(self, path: str | os.PathLike[str], devices: Sequence[DeviceInfo], backends: Sequence[str]) -> None:
        self.writer = ProfileWriter(path)
        self.origin: int | None = None
        self._cols: dict[str, list[Any]] = {c: [] for c in _COLS}
        meta = self.writer.meta
        meta["clock"] = "unix"
        meta["hosts"] = [socket.gethostname()]
        meta["ranks"] = [0]
        meta["devices"] = [
            {
                "rank": 0,
                "type": d.device_type,
                "index": d.index,
                "name": d.name,
                "vendor": d.vendor,
                "memory_bytes": d.memory_bytes,
            }
            for d in devices
        ]
        meta["sources"].append({"importer": "aiprof monitor", "backends": list(backends)})

    def add(self, samples: Sequence[Sample]) -> None:
        c = self._cols
        for s in samples:
            if self.origin is None:
                self.origin = s.ts_ns
                self.writer.meta["time_origin_ns"] = s.ts_ns
            for metric, v in s.values.items():
                if v is None:
                    continue
                c["rank"].append(0)
                c["device_type"].append(s.device_type)
                c["device"].append(s.device)
                c["ts"].append(s.ts_ns - self.origin)
                c["metric"].append(metric)
                c["value"].append(float(v))
                c["unit"].append(metric_unit(metric))
        if len(c["ts"]) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._cols["ts"]:
            self.writer.append("counters", self._cols)
            self._cols = {c: [] for c in _COLS}

    def commit(self) -> Path:
        """Write what is buffered and move the profile into place."""
        self.flush()
        return self.writer.commit()

    def abort(self) -> None:
        self.writer.abort()
