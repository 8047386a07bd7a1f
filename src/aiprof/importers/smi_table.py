"""Parser of the boxed tables that vendor SMI tools print (cnmon, hl-smi, npu-smi).

These tools all draw nvidia-smi's layout: a title box, a header of two or more lines
whose cells hold several field names each, an ``===`` rule, then one block of as many
lines per device. Columns move between versions (CNMON 1.16 and v5.10 differ), so a
value is found by the header name above it, never by position: a header cell
``Fan   Temp      Pwr:Usage/Cap`` names three fields (names are separated by two or
more spaces), and the value cell below it is matched against a pattern per field
(``107 W/ 250 W`` is one usage/cap pair).

The live backends (:mod:`aiprof.devices.cnmon`, ``npusmi``, ``hlsmi``) read it from here;
so do the importers of saved tables (:func:`load_tables`, :func:`detect_table`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .base import Detection, ImportContext, no
from .smi_common import Reading, read_head, read_text, write_readings

_BORDER = re.compile(r"^[+|][-=+|]+$")
#: The top border of an SMI tool's boxed table (``+----+``; a Markdown table's rule is
#: ``|---|``).
_TOP_BORDER = re.compile(r"^\+[-=+]{10,}$")
_NAME_SPLIT = re.compile(r"\s{2,}")
_NUM = r"-?\d+(?:\.\d+)?"
_PAIR = rf"(?:N/A|{_NUM}\s*[A-Za-z%]*)\s*/\s*(?:N/A|{_NUM}\s*[A-Za-z%]*)"
_DATE_FORMATS = ("%a %b %d %H:%M:%S %Y", "%Y-%m-%d %H:%M:%S", "%Y/%m/%d %H:%M:%S")


@dataclass
class SmiTable:
    """One printed table: its title, the date line above it, and one dict per device."""

    title: str
    """Text of the title box (tool and driver versions)."""
    ts_ns: int | None
    """The date line printed before the table (read as UTC), when there is one."""
    devices: list[dict[str, str]] = field(default_factory=list)
    """Per device: header field name -> the value text under it."""
    problems: list[str] = field(default_factory=list)


def _pattern(name: str) -> str:
    low = name.lower()
    if "usage" in low or "/" in low:
        return _PAIR
    return r"\S+"


def split_cell(header: str, value: str) -> dict[str, str] | None:
    """Pair the field names of one header cell with the values of the cell below it."""
    names = [n for n in _NAME_SPLIT.split(header.strip()) if n]
    if not names:
        return {}
    rx = r"\s*" + r"\s+".join(f"({_pattern(n)})" for n in names) + r"\s*"
    m = re.fullmatch(rx, value)
    if m:
        return dict(zip(names, m.groups(), strict=False))
    parts = [p for p in _NAME_SPLIT.split(value.strip()) if p]
    if len(parts) == len(names):
        return dict(zip(names, parts, strict=False))
    if not value.strip():
        return {}
    return None


def _cells(line: str) -> list[str]:
    return line.strip()[1:-1].split("|")


def parse_date(text: str) -> int | None:
    """Unix ns of a date line like ``Wed Nov  8 16:16:45 2023`` (no zone: read as UTC)."""
    norm = " ".join(text.split())
    for fmt in _DATE_FORMATS:
        try:
            dt = datetime.strptime(norm, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
        return int(dt.timestamp()) * 1_000_000_000
    return None


def parse_tables(text: str) -> list[SmiTable]:
    """Every boxed device table in ``text`` (process tables are skipped)."""
    tables: list[SmiTable] = []
    last_date: int | None = None
    # A table is a run of border lines and row lines; segments are the row runs between borders.
    block: list[tuple[str, list[str]]] = []  # (border char before the segment, rows)
    borders: list[str] = []

    def flush() -> None:
        nonlocal last_date
        if block:
            t = _read_block(block, borders, last_date)
            if t is not None:
                tables.append(t)
                last_date = None
        block.clear()
        borders.clear()

    rows: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and _BORDER.match(line):
            kind = "=" if "=" in line else "-"
            if rows or not borders:
                block.append((borders[-1] if borders else "", rows))
            borders.append(kind)
            rows = []
            continue
        if line.startswith("|") and line.endswith("|") and len(line) > 1 and borders:
            rows.append(line)
            continue
        if rows or borders:
            block.append((borders[-1] if borders else "", rows))
            borders.append("")
            rows = []
            flush()
        d = parse_date(line) if line and not line.startswith("#") else None
        if d is not None:
            last_date = d
    if rows or borders:
        block.append((borders[-1] if borders else "", rows))
        borders.append("")
    flush()
    return tables


def _read_block(block: list[tuple[str, list[str]]], borders: list[str], ts: int | None) -> SmiTable | None:
    # borders[i] is the border after segment i (block entries were appended when a border came).
    title: list[str] = []
    header: list[str] | None = None
    process = False
    table = SmiTable("", ts)
    for i, (before, seg) in enumerate(block):
        after = borders[i] if i < len(borders) else ""
        if not seg:
            continue
        if after == "=" and before != "=":
            header = seg
            process = "process" in " ".join(seg).lower()
            continue
        if header is None:
            title.extend(" ".join(c.strip() for c in _cells(r) if c.strip()) for r in seg)
            continue
        if process:
            continue
        if len(seg) != len(header):
            table.problems.append(f"a device block of {len(seg)} lines under a header of {len(header)}")
            continue
        dev: dict[str, str] = {}
        for h, v in zip(header, seg, strict=False):
            hc, vc = _cells(h), _cells(v)
            if len(hc) != len(vc):
                table.problems.append(f"row {v.strip()!r} has {len(vc)} cells, header has {len(hc)}")
                continue
            for hcell, vcell in zip(hc, vc, strict=False):
                got = split_cell(hcell, vcell)
                if got is None:
                    table.problems.append(f"cannot split {vcell.strip()!r} into {hcell.strip()!r}")
                    continue
                dev.update({k: val.strip() for k, val in got.items()})
        if dev:
            table.devices.append(dev)
    table.title = " ".join(" ".join(title).split())
    if header is None or not table.devices:
        return None
    return table


# -- field names -> metrics --------------------------------------------------------------

#: Header names (lower case) that hold the device index.
INDEX_FIELDS = ("card", "aip", "npu", "gpu", "mlu", "device")

#: Header name (lower case) -> metric, or (metric of the first, metric of the second) for pairs.
FIELD_METRICS: dict[str, str | tuple[str, str]] = {
    "temp": "gpu_temp",
    "temp(c)": "gpu_temp",
    "fan": "fan_speed",
    "pwr:usage/cap": ("power", "power_limit"),
    "power(w)": "power",
    "memory-usage": ("fb_used", "mem_total"),
    "memory-usage(mb)": ("fb_used", "mem_total"),
    "hbm-usage(mb)": ("fb_used", "mem_total"),
    "util": "sm_util",
    "aip-util": "sm_util",
    "aicore(%)": "sm_util",
    "ecc-error": "ecc_errors",
    "volatile uncor-events": "dbecc",
}

_UNIT_SCALE = {"gib": 1024.0, "gb": 1024.0, "kib": 1 / 1024, "kb": 1 / 1024, "mw": 1e-3}


def number(text: str | None) -> float | None:
    """The number at the start of ``text`` scaled to MB / W by its unit; None for N/A."""
    if text is None:
        return None
    m = re.match(rf"\s*({_NUM})\s*([A-Za-z]*)", text)
    if not m:
        return None
    return float(m.group(1)) * _UNIT_SCALE.get(m.group(2).lower(), 1.0)


def device_values(fields: dict[str, str]) -> tuple[int | None, str | None, dict[str, float | None]]:
    """(index, name, metric values) of one device's header fields.

    Units: power W, temperatures C, memory MB (MiB as the tools print them), util %.
    HBM usage wins over plain memory usage when it reports a total (Ascend 910).
    """
    index: int | None = None
    name: str | None = None
    values: dict[str, float | None] = {}
    hbm_total = 0.0
    for key, text in fields.items():
        low = key.lower()
        if index is None and low in INDEX_FIELDS:
            n = number(text)
            index = int(n) if n is not None else None
            continue
        if low == "name":
            name = text
            continue
        metric = FIELD_METRICS.get(low)
        if metric is None:
            continue
        if isinstance(metric, tuple):
            first, _, second = text.partition("/")
            a, b = number(first), number(second)
            if low.startswith("memory-usage") and hbm_total > 0:
                continue
            if low.startswith("hbm") and (b or 0) > 0:
                hbm_total = b or 0.0
            elif low.startswith("hbm"):
                continue
            values[metric[0]], values[metric[1]] = a, b
        else:
            values[metric] = number(text)
    return index, name, values


def table_readings(tables: list[SmiTable]) -> tuple[list[Reading], list[str]]:
    """Readings of boxed SMI tables: one sample per table; plus the problems met."""
    readings: list[Reading] = []
    problems: list[str] = []
    for i, t in enumerate(tables):
        problems.extend(f"table {i + 1} ({t.title[:40]}): {p}" for p in t.problems)
        for j, fields in enumerate(t.devices):
            index, name, values = device_values(fields)
            readings.append(Reading(t.ts_ns, i, index if index is not None else j, values, name))
    return readings, problems


def load_tables(path: Path, ctx: ImportContext, importer: str, device_type: str, title_word: str) -> list[SmiTable]:
    """Import every boxed table whose title holds ``title_word``; returns them."""
    from ..errors import ImportFormatError

    tables = [t for t in parse_tables(read_text(path)) if title_word.lower() in t.title.lower()]
    if not tables:
        raise ImportFormatError(f"{path}: no {title_word} table")
    readings, problems = table_readings(tables)
    write_readings(
        ctx, path, importer, device_type, readings, problems=problems, versions=sorted({t.title for t in tables})
    )
    return tables


def detect_table(path: Path, title_word: str) -> Detection:
    """Yes when the head holds a boxed table titled with ``title_word``: a ``|`` line
    naming it right under a ``+---+`` border (a Markdown table row that mentions the tool
    has no such border)."""
    head = read_head(path)
    if isinstance(head, Detection):
        return head
    above = ""
    for line in head.splitlines():
        s = line.strip()
        if s.startswith("|") and title_word.lower() in s.lower() and _TOP_BORDER.match(above):
            return Detection(True, f"a boxed table titled {' '.join(s.strip('|').split())[:40]!r}")
        above = s
    return no(f"no boxed table titled {title_word}")
