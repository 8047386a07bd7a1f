"""Output of ``aiprof monitor``: dmon-compatible lines, CSV, JSON lines.

dmon's metric groups (-s letters) and column names come from METRICS. Columns follow
the order of the letters given, as dmon does. Devices that have no value for a dmon
column under its GPU name (a CPU has no "sm") show their own equivalent (cpu_util),
so one table reads the same for every device type.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TextIO

from ..devices.base import METRICS, Sample
from ..errors import AiprofError
from ..importers.nvidia import dmon

#: -s letter -> metric names, in dmon's column order.
GROUPS: dict[str, list[str]] = {}
for _m in METRICS.values():
    if _m.group:
        GROUPS.setdefault(_m.group, []).append(_m.name)

#: A dmon column's metric -> the metric standing in for it on devices that lack it.
EQUIVALENT: dict[str, str] = {
    "sm_util": "cpu_util",
    "sm_clock": "cpu_freq",
    "gpu_temp": "cpu_temp",
    "fb_used": "mem_used",
}

FORMATS = ("dmon", "csv", "json")


def parse_groups(text: str) -> list[str]:
    """Metric names for ``-s`` letters, in the order given (``-s cu`` -> clocks first)."""
    bad = sorted({c for c in text if c not in GROUPS})
    if not text or bad:
        raise AiprofError(f"-s {text!r}: unknown metric group {''.join(bad)!r}; known: {''.join(GROUPS)}")
    out: list[str] = []
    for c in dict.fromkeys(text):
        out.extend(GROUPS[c])
    return out


def parse_options(text: str | None) -> tuple[bool, bool]:
    """(date, time) from ``-o D|T|DT``."""
    if not text:
        return False, False
    up = text.upper()
    if set(up) - {"D", "T"}:
        raise AiprofError(f"-o {text!r}: use D, T or DT")
    return "D" in up, "T" in up


def value_of(sample: Sample, metric: str) -> float | None:
    """The sample's value for ``metric``, or its stand-in on devices that lack it."""
    v = sample.values.get(metric)
    if v is None and metric in EQUIVALENT:
        v = sample.values.get(EQUIVALENT[metric])
    return v


def device_label(sample: Sample, mixed: bool) -> str:
    """``0`` like dmon; ``cuda:0`` when several device types are shown together."""
    return f"{sample.device_type}:{sample.device}" if mixed else str(sample.device)


class LineRenderer:
    """Writes samples as dmon lines, CSV or JSON lines to a text stream."""

    def __init__(
        self,
        out: TextIO,
        metrics: Sequence[str],
        *,
        fmt: str = "dmon",
        date: bool = False,
        time: bool = False,
        mixed: bool = False,
        label_width: int = 1,
    ) -> None:
        if fmt not in FORMATS:
            raise AiprofError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
        self.out = out
        self.metrics = list(metrics)
        self.fmt = fmt
        self.date, self.time = date, time
        self.mixed = mixed
        self.label_width = label_width
        self._header_done = False

    def header(self) -> None:
        if self._header_done:
            return
        self._header_done = True
        if self.fmt == "dmon":
            cols = [METRICS[m].dmon or m for m in self.metrics]
            for line in dmon.header_lines(cols, date=self.date, time=self.time, label_width=self.label_width):
                self.out.write(line + "\n")
        elif self.fmt == "csv":
            units = [f"{m} [{METRICS[m].unit}]" for m in self.metrics]
            self.out.write(",".join(["timestamp", "device_type", "device", *units]) + "\n")

    def write(self, samples: Sequence[Sample]) -> None:
        """One line per device of this tick."""
        self.header()
        for s in samples:
            if self.fmt == "dmon":
                vals = [value_of(s, m) for m in self.metrics]
                line = dmon.data_line(
                    device_label(s, self.mixed),
                    vals,
                    ts_ns=s.ts_ns,
                    date=self.date,
                    time=self.time,
                    label_width=self.label_width,
                )
            elif self.fmt == "csv":
                vals = [value_of(s, m) for m in self.metrics]
                cells = ["" if v is None else f"{v:.6g}" for v in vals]
                line = ",".join([_iso(s.ts_ns), s.device_type, str(s.device), *cells])
            else:
                line = json.dumps(
                    {
                        "ts": _iso(s.ts_ns),
                        "ts_ns": s.ts_ns,
                        "device_type": s.device_type,
                        "device": s.device,
                        "values": s.values,
                    },
                    separators=(",", ":"),
                )
            self.out.write(line + "\n")
        self.out.flush()


def _iso(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds")
