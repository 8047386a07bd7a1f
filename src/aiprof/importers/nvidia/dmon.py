"""``nvidia-smi dmon`` text: reading saved logs and writing the same layout.

dmon prints two ``#`` header lines (column names, then units) and one line per device
per sample. Columns follow the letters of ``-s`` and ``-o D/T`` adds Date and Time in
front, so every column is looked up by its name. ``-`` is a value the device cannot
give. A ``pmon`` block (its header has a ``pid`` column) may follow; its lines are
skipped. A log stopped with ^C can hold a stray ``^C`` or a cut last line.

Without ``-o T`` a log has no clock; the sampling interval is then known only where
the log names the command that wrote it (a ``#`` line with ``nvidia-smi dmon ... -d N``,
as saved logs often begin), else it is the caller's to give.

The importer (below): ``nvidia-smi dmon`` logs: any ``-s`` letters in any order, with or without ``-o DT``.

Each column becomes a counters metric (``pwr`` -> power W, ``sm`` -> sm_util %, ...;
a column without a metric, such as ``jpg``, is kept as ``dmon.jpg``). ``-`` values are
left out; a line cut by ^C is dropped with a warning; a ``pmon`` block is skipped.
A log without ``-o T`` is placed on the interval its own command line names (``-d N``),
or the one given to ``aiprof import --interval`` (see importers/smi_common.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ...devices.base import METRICS
from ...errors import ImportFormatError
from ..base import Detection, ImportContext, Importer, no, yes
from ..smi_common import Reading, read_head, write_readings

#: dmon column -> metric name of the counters table.
DMON_TO_METRIC: dict[str, str] = {m.dmon: m.name for m in METRICS.values() if m.dmon}
_TIME_COLS = ("date", "time")
#: A comment naming the command that wrote the log, with its ``-d``/``--delay`` seconds.
_COMMAND_DELAY = re.compile(r"nvidia-smi\s+dmon\b.*?(?:\s-d\s*|\s--delay[=\s]\s*)(\d+(?:\.\d+)?)\b")


@dataclass
class DmonRow:
    """One device at one instant."""

    ts_ns: int | None
    """Unix ns from the Date/Time columns (read as UTC), or None when the log has none."""
    sample: int
    """Ordinal of the sample this line belongs to (0, 1, ...), counted in the file."""
    device: int
    values: dict[str, float | None]
    """Metric name -> value; dmon columns without a metric keep their name as ``dmon.<col>``."""


@dataclass
class DmonLog:
    """A parsed dmon log."""

    rows: list[DmonRow] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)
    """Metric name -> unit, from the log's units line."""
    problems: list[str] = field(default_factory=list)
    """What could not be read (cut lines), to be shown as warnings."""
    headers: int = 0
    """How many dmon header lines were seen (0: not a dmon log)."""
    interval_s: float | None = None
    """Seconds between samples named by the log's own command line (``-d N``), if any."""


def header_columns(line: str) -> list[str] | None:
    """Column names of a dmon header line (``# gpu pwr ...`` / ``#Date Time gpu ...``), else None."""
    s = line.strip()
    if not s.startswith("#"):
        return None
    cols = s[1:].split()
    low = [c.lower() for c in cols]
    if "gpu" not in low or "pid" in low:
        return None
    if not any(c in DMON_TO_METRIC for c in low):
        return None
    return low


def is_pmon_header(line: str) -> bool:
    s = line.strip()
    if not s.startswith("#"):
        return False
    low = s[1:].lower().split()
    return "gpu" in low and "pid" in low


def metric_of(col: str) -> str:
    """Counters-table metric for a dmon column."""
    return DMON_TO_METRIC.get(col, f"dmon.{col}")


def _value(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_dmon(lines: Iterable[str]) -> DmonLog:
    """Parse dmon output (any -s order, with or without -o DT)."""
    log = DmonLog()
    cols: list[str] | None = None
    expect_units = False
    in_pmon = False
    sample = -1
    last_dev: int | None = None
    last_ts: int | None = None
    day_offset = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        hdr = header_columns(line)
        if hdr is not None:
            cols, expect_units, in_pmon = hdr, True, False
            log.headers += 1
            continue
        if is_pmon_header(line):
            in_pmon, cols = True, None
            continue
        if line.lstrip().startswith("#"):
            delay = _COMMAND_DELAY.search(line)
            if delay and log.interval_s is None and float(delay.group(1)) > 0:
                log.interval_s = float(delay.group(1))
            if expect_units and cols is not None:
                units = line.strip()[1:].split()
                if len(units) == len(cols):
                    for c, u in zip(cols, units, strict=False):
                        if c not in _TIME_COLS and c != "gpu":
                            log.units[metric_of(c)] = u
            expect_units = False
            continue
        expect_units = False
        if in_pmon or cols is None or not line.strip():
            continue
        toks = line.split()
        cut = any("^C" in t for t in toks)
        toks = [t for t in toks if t != "^C"]
        if len(toks) != len(cols) or any("^C" in t for t in toks):
            if cut or len(toks) < len(cols):
                log.problems.append(f"line {lineno}: cut short ({len(toks)} of {len(cols)} columns), dropped")
            else:
                log.problems.append(f"line {lineno}: {len(toks)} values for {len(cols)} columns, dropped")
            continue
        rec = dict(zip(cols, toks, strict=False))
        try:
            dev = int(rec["gpu"])
        except ValueError:
            log.problems.append(f"line {lineno}: device {rec['gpu']!r} is not a number, dropped")
            continue
        ts = _timestamp(rec.get("date"), rec.get("time"))
        if ts is not None and "date" not in rec:
            # Time only: a day passes when the clock goes backwards.
            ts += day_offset
            if last_ts is not None and ts < last_ts - 3600 * 10**9:
                day_offset += 86400 * 10**9
                ts += 86400 * 10**9
        if last_dev is None or dev <= last_dev or (ts is not None and last_ts is not None and ts != last_ts):
            sample += 1
        last_dev, last_ts = dev, ts
        values = {metric_of(c): _value(v) for c, v in rec.items() if c not in _TIME_COLS and c != "gpu"}
        log.rows.append(DmonRow(ts, sample, dev, values))
    return log


def _timestamp(date: str | None, clock: str | None) -> int | None:
    try:
        if date and clock:
            dt = datetime.strptime(f"{date} {clock}", "%Y%m%d %H:%M:%S")
        elif date:
            dt = datetime.strptime(date, "%Y%m%d")
        elif clock:
            dt = datetime.strptime(f"19700101 {clock}", "%Y%m%d %H:%M:%S")
        else:
            return None
    except ValueError:
        return None
    return int(dt.replace(tzinfo=timezone.utc).timestamp()) * 1_000_000_000


# -- writing ---------------------------------------------------------------------------


def header_lines(columns: Sequence[str], *, date: bool, time: bool, label_width: int = 1) -> list[str]:
    """dmon's two header lines for these dmon columns (names, then units)."""
    lines = []
    for first, dcol, tcol, unit in (("gpu", "Date", "Time", False), ("Idx", "YYYYMMDD", "HH:MM:SS", True)):
        parts = [f" {dcol:<8}" if date else "", f"{tcol:>12}" if time else ""]
        parts.append(first.rjust(_label_width(label_width, date or time)))
        parts.extend(f" {(_unit(c) if unit else c):>6}" for c in columns)
        line = "".join(parts)
        lines.append("#" + line[1:] if line[0] == " " else "#" + line)
    return lines


def _label_width(label_width: int, timed: bool) -> int:
    return max(label_width + 1, 8 if timed else 5)


def _unit(col: str) -> str:
    m = METRICS.get(DMON_TO_METRIC.get(col, ""))
    if m is None:
        return "-"
    return {"bool": "bool", "errors": "errs"}.get(m.unit, m.unit)


def format_value(v: float | None) -> str:
    """dmon prints integers and ``-`` for what a device cannot give."""
    if v is None or not math.isfinite(v):
        return "-"
    return str(round(v))


def data_line(
    label: str, values: Sequence[float | None], *, ts_ns: int | None, date: bool, time: bool, label_width: int = 1
) -> str:
    """One dmon data line: optional Date/Time (local time, as dmon prints), the device, the values."""
    parts: list[str] = []
    if date or time:
        dt = datetime.fromtimestamp((ts_ns or 0) / 1e9)
        if date:
            parts.append(" " + dt.strftime("%Y%m%d"))
        if time:
            parts.append(dt.strftime("%H:%M:%S").rjust(12))
    parts.append(label.rjust(_label_width(label_width, date or time)))
    parts.extend(f" {format_value(v):>6}" for v in values)
    return "".join(parts)


# -- the importer -------------------------------------------------------------------

NAME = "nvidia-dmon"


def _detect(path: Path) -> Detection:
    head = read_head(path)
    if isinstance(head, Detection):
        return head
    for line in head.splitlines():
        cols = header_columns(line)
        if cols is not None:
            return yes(f"a dmon header with columns {' '.join(cols[:6])}...")
    return no("no '# gpu ...' dmon header line")


def _load(path: Path, ctx: ImportContext) -> None:
    with path.open(encoding="utf-8", errors="replace") as f:
        log = parse_dmon(f)
    if not log.headers:
        raise ImportFormatError(f"{path}: no dmon header line")
    readings = [Reading(r.ts_ns, r.sample, r.device, r.values) for r in log.rows]
    write_readings(ctx, path, NAME, "cuda", readings, units=log.units, problems=log.problems, interval_s=log.interval_s)


IMPORTER = Importer(
    name=NAME,
    description="nvidia-smi dmon logs (-s any groups, -o DT)",
    detect=_detect,
    load=_load,
    patterns=("*dmon*.txt", "*dmon*.log"),
)
