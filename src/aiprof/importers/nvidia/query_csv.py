"""``nvidia-smi --query-gpu=... --format=csv`` and ``hl-smi -Q ... --format csv`` output.

The header names each field and its unit (``power.draw [W]``); rows carry units too
unless ``nounits`` was given. Fields are looked up by name, in any order. A log written
with ``noheader`` has no names; hl-smi's usual field list (:data:`HLSMI_FIELDS`, the one
``aiprof monitor`` asks for) is assumed only when every value's unit agrees with it.

The importer (below), for files with a header: ``nvidia-smi --query-gpu=... --format=csv`` logs (also hl-smi's ``-Q`` CSV with a header).

Fields are found by header name (``power.draw [W]`` -> power, ``utilization.gpu [%]``
-> sm_util, ``memory.used [MiB]`` -> fb_used ...; any other numeric field is kept as
``smi.<field>``). ``[N/A]`` values are left out. Samples are timed by the ``timestamp``
field when it was queried.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ...errors import ImportFormatError
from ..base import Detection, ImportContext, Importer, no, yes
from ..smi_common import Reading, read_head, read_text, sample_ordinals, write_readings

#: Query field -> counters metric (nvidia-smi and hl-smi spellings).
FIELD_METRICS: dict[str, str] = {
    "power.draw": "power",
    "power.draw.instant": "power",
    "power.limit": "power_limit",
    "power.max": "power_limit",
    "temperature.gpu": "gpu_temp",
    "temperature.aip": "gpu_temp",
    "temperature.memory": "mem_temp",
    "utilization.gpu": "sm_util",
    "utilization.aip": "sm_util",
    "utilization.memory": "mem_util",
    "utilization.encoder": "enc_util",
    "utilization.decoder": "dec_util",
    "clocks.sm": "sm_clock",
    "clocks.current.sm": "sm_clock",
    "clocks.mem": "mem_clock",
    "clocks.current.memory": "mem_clock",
    "memory.used": "fb_used",
    "memory.total": "mem_total",
    "fan.speed": "fan_speed",
    "ecc.errors.corrected.volatile.total": "sbecc",
    "ecc.errors.uncorrected.volatile.total": "dbecc",
    "clocks_event_reasons.active": "throttle_reasons",
    "clocks_throttle_reasons.active": "throttle_reasons",
}
INDEX_FIELDS = ("index", "module_id", "bus_id")
#: Fields that are text, not numbers.
TEXT_FIELDS = ("name", "uuid", "serial", "driver_version", "pci.bus_id", "pstate", "timestamp", "bus_id")

#: hl-smi's field list in ``aiprof monitor`` (and in hl-smi's documentation examples).
HLSMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "power.draw",
    "power.max",
    "temperature.aip",
    "utilization.aip",
)
_HLSMI_UNITS = (None, None, None, None, "MiB", "MiB", "MiB", "W", "W", "C", "%")

_HEADER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\[([^\]]*)\])?\s*$")
_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%]*)\s*$")
_SCALE = {"gib": 1024.0, "kib": 1 / 1024, "mw": 1e-3}


@dataclass
class QueryRow:
    """One device in one query sample."""

    ts_ns: int | None
    """From the ``timestamp`` field (read as UTC), when queried."""
    device: int
    name: str | None
    values: dict[str, float | None]
    """Metric -> value; a numeric field without a metric is kept as ``smi.<field>``."""


@dataclass
class QueryLog:
    rows: list[QueryRow] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)
    fields: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    vendor: str = "cuda"
    """cuda for nvidia-smi, hpu for hl-smi (``.aip`` fields or HL- names)."""


def _fields(line: str) -> list[str]:
    """The CSV fields of one line; a line the csv module refuses (a field over its
    128 KiB limit, a NUL byte) is one field, which no header or row matches."""
    try:
        return next(csv.reader([line], skipinitialspace=True), [])
    except csv.Error:
        return [line]


def header_fields(line: str) -> tuple[list[str], list[str | None]] | None:
    """(field names, units) of a query-CSV header line, or None when it is not one."""
    parts = _fields(line)
    names: list[str] = []
    units: list[str | None] = []
    for p in parts:
        m = _HEADER.match(p)
        if not m:
            return None
        names.append(m.group(1).lower())
        units.append(m.group(2))
    known = sum(1 for n in names if n in FIELD_METRICS or n in INDEX_FIELDS or n in TEXT_FIELDS)
    if len(names) < 2 or known < 2 or not any(n in FIELD_METRICS for n in names):
        return None
    return names, units


def _number(text: str) -> tuple[float | None, str]:
    m = _NUM.match(text)
    if not m:
        return None, ""
    unit = m.group(2)
    return float(m.group(1)) * _SCALE.get(unit.lower(), 1.0), unit


def noheader_fields(row: Sequence[str]) -> list[str] | None:
    """:data:`HLSMI_FIELDS` when a header-less row's units match it, else None."""
    if len(row) != len(HLSMI_FIELDS):
        return None
    for text, unit in zip(row, _HLSMI_UNITS, strict=False):
        if unit is None:
            continue
        value, got = _number(text.strip())
        if value is None and text.strip() not in ("N/A", "[N/A]"):
            return None
        if value is not None and got != unit:
            return None
    if _number(row[0].strip())[0] is None:
        return None
    return list(HLSMI_FIELDS)


def parse_query_csv(text: str, fields: Sequence[str] | None = None) -> QueryLog:
    """Parse query CSV; ``fields`` names the columns of a header-less log."""
    log = QueryLog()
    names: list[str] | None = list(fields) if fields else None
    units: list[str | None] = [None] * len(names) if names else []
    sample_ts: int | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        hdr = header_fields(line)
        if hdr is not None:
            names, units = hdr
            continue
        row = _fields(line)
        if names is None:
            guessed = noheader_fields(row)
            if guessed is None:
                continue
            names, units = guessed, [None] * len(guessed)
        if len(row) != len(names):
            log.problems.append(f"line {lineno}: {len(row)} fields for {len(names)} names, dropped")
            continue
        rec = dict(zip(names, (r.strip() for r in row), strict=False))
        dev = None
        for f in INDEX_FIELDS:
            if f in rec:
                v, _ = _number(rec[f])
                dev = int(v) if v is not None else None
                break
        if dev is None:
            log.problems.append(f"line {lineno}: no device index, dropped")
            continue
        ts = _timestamp(rec["timestamp"]) if "timestamp" in rec else sample_ts
        values: dict[str, float | None] = {}
        for (name, text_v), unit in zip(rec.items(), units, strict=False):
            if name in INDEX_FIELDS or name in TEXT_FIELDS:
                continue
            v, got_unit = _number(text_v)
            metric = FIELD_METRICS.get(name, f"smi.{name}")
            if metric in values and values[metric] is not None:
                continue
            values[metric] = v
            u = unit or got_unit
            if u:
                log.units[metric] = {"MiB": "MB", "GiB": "MB"}.get(u, u)
        dev_name = rec.get("name")
        if any(n.endswith(".aip") for n in names) or (dev_name or "").upper().startswith("HL-"):
            log.vendor = "hpu"
        log.rows.append(QueryRow(ts, dev, dev_name, values))
    log.fields = names or []
    return log


def _timestamp(text: str) -> int | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            dt = datetime.strptime(text.strip(), fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
        return round(dt.timestamp() * 1e6) * 1000
    return None


# -- the importer -------------------------------------------------------------------

NAME = "smi-query-csv"


def _detect(path: Path) -> Detection:
    head = read_head(path)
    if isinstance(head, Detection):
        return head
    for line in head.splitlines()[:50]:
        if line.strip() and not line.lstrip().startswith("#"):
            hdr = header_fields(line)
            if hdr is not None:
                return yes(f"a --query CSV header ({', '.join(hdr[0][:4])}...)")
            return no("first line is not a --query-gpu CSV header")
    return no("empty")


def _load(path: Path, ctx: ImportContext) -> None:
    log = parse_query_csv(read_text(path))
    if not log.fields:
        raise ImportFormatError(f"{path}: no --query CSV header")
    ordinals = sample_ordinals(r.device for r in log.rows)
    readings = [Reading(r.ts_ns, s, r.device, r.values, r.name) for r, s in zip(log.rows, ordinals, strict=False)]
    write_readings(ctx, path, NAME, log.vendor, readings, units=log.units, problems=log.problems, fields=log.fields)


IMPORTER = Importer(
    name=NAME,
    description="nvidia-smi / hl-smi --query CSV logs with a header",
    detect=_detect,
    load=_load,
    patterns=("*query*.csv", "*nvidia-smi*.csv"),
)
