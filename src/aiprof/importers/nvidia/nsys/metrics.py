"""GPU_METRICS (nsys --gpu-metrics-devices): the counters table."""

from __future__ import annotations

import re

import numpy as np

from .reader import ExportReader

_UNIT_RE = re.compile(r"^(.*?)\s*\[(.*)\]\s*$")


class GpuMetrics(ExportReader):
    """The GPU_METRICS table and its metric names."""

    def _gpu_metrics(self) -> None:
        table = "GPU_METRICS"
        ex = self.ex
        c = ex.cols(table)
        tcol = "timestamp" if "timestamp" in c else "start" if "start" in c else None
        if tcol is None or "value" not in c or "metricId" not in c:
            n = ex.count(table)
            if n:
                self.ctx.warn(
                    f"{self.path.name}: GPU_METRICS has a layout aiprof does not know ({', '.join(c)}); "
                    f"{n:,} samples not imported"
                )
            return
        names: dict[tuple[int, int], str] = {}
        by_metric: dict[int, str] = {}
        info = "TARGET_INFO_GPU_METRICS"
        if ex.has(info, "metricId", "metricName"):
            tsel = "typeId" if "typeId" in ex.cols(info) else "0"
            for t, m, nm in ex.con.execute(f"SELECT DISTINCT {tsel}, metricId, metricName FROM {info}"):
                names[(int(t or 0), int(m))] = nm
                by_metric.setdefault(int(m), nm)
        type_col = "t.typeId" if "typeId" in c else "0"
        sql = f"SELECT t.{tcol}, {type_col}, t.metricId, t.value FROM GPU_METRICS t"
        split: dict[str, tuple[str, str | None]] = {}
        off = self._shift - self._origin
        for rows in self._rows(sql):
            cols = list(zip(*rows, strict=True))
            ts = np.array(cols[0], dtype=np.int64) + off
            metric: list[str] = []
            unit: list[str | None] = []
            dev: list[int] = []
            for ty, m in zip(cols[1], cols[2], strict=True):
                raw = names.get((int(ty or 0), int(m)), by_metric.get(int(m), f"metric {m}"))
                got = split.get(raw)
                if got is None:
                    got = split[raw] = _metric_unit(raw)
                metric.append(got[0])
                unit.append(got[1])
                # The low byte of typeId is the GPU id (the exporter's own convention).
                dev.append(int(ty or 0) & 0xFF)
            n = len(rows)
            self.ctx.writer.append(
                "counters",
                {
                    "rank": np.full(n, self.rank, dtype=np.int32),
                    "device_type": ["cuda"] * n,
                    "device": dev,
                    "ts": ts,
                    "metric": metric,
                    "value": [float(v) if v is not None else None for v in cols[3]],
                    "unit": unit,
                },
            )
            self.ctx.tables["counters"] += n
            self.counts[table] = self.counts.get(table, 0) + n


def _metric_unit(raw: str) -> tuple[str, str | None]:
    """'SMs Active [Throughput %]' -> ('SMs Active', '%'); 'GPC Clock Frequency [MHz]' -> (.., 'MHz')."""
    m = _UNIT_RE.match(raw)
    if not m:
        return raw, None
    unit = m.group(2).strip()
    return m.group(1), "%" if unit.endswith("%") else unit
