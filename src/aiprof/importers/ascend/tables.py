"""Shared readers for the CSV and JSON summaries Ascend tools write beside their traces.

Columns are looked up by name. The header rule (:func:`split_unit`, the one place it
lives): a trailing parenthesised suffix is the unit only when it is a unit (:data:`UNITS`:
time, %, sizes, rates, frequency, power, temperature), so ``Duration(us)`` gives the
metric ``Duration`` and the unit ``us``; any other suffix is part of the name, so
``Communication(Not Overlapped)`` stays one metric beside ``Communication``. Values are
stripped of the padding torch_npu leaves in them (``"1736413971558972.912\\t"``).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import ImportFormatError

_UNIT_RE = re.compile(r"^(.*?)\s*\(([^()]*)\)\s*$")

_SIZES = ("B", "Byte", "Bytes", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
#: The parenthesised header suffixes that are units (compared case-insensitively): what
#: Ascend's and MindSpore's CSVs write, and the usual others.
UNITS = frozenset(
    u.lower()
    for u in (
        *("ns", "us", "µs", "μs", "ms", "s", "%"),
        *_SIZES,
        *(f"{b}/s" for b in _SIZES),
        *("Hz", "KHz", "MHz", "GHz", "mW", "W", "C", "°C", "℃"),
        *("cycle", "cycles", "tick", "ticks", "times", "flop", "flops", "GFLOPs", "TFLOPs", "GFLOPS/s", "TFLOPS/s"),
    )
)

#: Size units -> bytes (memory CSVs use KB or MB depending on the CANN version).
SIZE_SCALE = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def split_unit(header: str) -> tuple[str, str | None]:
    """``'Total Time(us)'`` -> ``('Total Time', 'us')``; a suffix that is not one of
    :data:`UNITS` stays in the name: ``'Communication(Not Overlapped)'`` ->
    ``('Communication(Not Overlapped)', None)``; no parentheses -> unit None."""
    m = _UNIT_RE.match(header.strip())
    if m and m.group(2).strip().lower() in UNITS:
        return m.group(1).strip(), m.group(2).strip()
    return header.strip(), None


def number(text: str | None) -> float | None:
    """A float from a CSV cell, or None for blanks, ``N/A`` and other text."""
    if text is None:
        return None
    t = text.strip().strip('"').strip()
    if not t or t.upper() in ("N/A", "NA", "NAN", "NONE", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def integer(text: str | None) -> int | None:
    """An integer from a CSV cell (``"3"``, ``"3.0"``), or None for what :func:`number`
    does not read and for values no int64 holds (``inf``, ``1e999``)."""
    v = number(text)
    if v is None or not math.isfinite(v) or abs(v) >= 2**63:
        return None
    return int(v)


def read_csv(path: Path) -> tuple[list[str], list[list[str]], int]:
    """Header, rows with cells stripped, and the count of malformed rows dropped.

    A last line cut short (fewer cells than the header) counts as malformed.
    """
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as e:
        raise ImportFormatError(f"{path}: cannot read ({e.strerror})") from None
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ImportFormatError(f"{path}: empty file") from None
    except csv.Error as e:
        raise ImportFormatError(f"{path}: not CSV ({e})") from None
    rows: list[list[str]] = []
    bad = 0
    try:
        for r in reader:
            if not r or all(not c.strip() for c in r):
                continue
            if len(r) < len(header):
                bad += 1
                continue
            rows.append([c.strip() for c in r[: len(header)]])
    except csv.Error:
        bad += 1
    return header, rows, bad


def csv_header(path: Path) -> list[str] | None:
    """The header cells of a CSV file, or None when the file does not look like one."""
    try:
        with path.open("rb") as f:
            head = f.read(8192)
    except OSError:
        return None
    if b"\0" in head:
        return None
    line = head.decode("utf-8-sig", "replace").splitlines()[0] if head.strip() else ""
    if "," not in line or line.lstrip()[:1] in ("[", "{"):
        return None
    try:
        return [h.strip() for h in next(csv.reader([line]))]
    except (csv.Error, StopIteration):
        return None


def metric_rows(
    header: list[str],
    rows: list[list[str]],
    skip: set[str],
    *,
    text_columns: bool = True,
    exact: frozenset[str] = frozenset(),
) -> Iterator[tuple[int, str, str | None, float | None, str | None]]:
    """(row index, metric, unit, value, text) for each cell not in ``skip``; a cell that is
    not a number keeps its text (shapes, data types) when ``text_columns``. Columns in
    ``exact`` (absolute timestamps a float64 would round) keep their text only."""
    cols = [(i, *split_unit(h)) for i, h in enumerate(header) if h not in skip]
    for ri, r in enumerate(rows):
        for i, name, unit in cols:
            v = None if name in exact else number(r[i])
            if v is not None:
                yield ri, name, unit, v, None
            elif text_columns and r[i] and r[i].upper() != "N/A":
                yield ri, name, unit, None, r[i].strip('"')


def col(header: list[str], *names: str) -> int | None:
    """Index of the first header among ``names`` (case-insensitive, units ignored)."""
    low = [split_unit(h)[0].lower() for h in header]
    full = [h.lower() for h in header]
    for n in names:
        n2 = n.lower()
        if n2 in full:
            return full.index(n2)
        if n2 in low:
            return low.index(n2)
    return None


def flatten(obj: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Leaves of a nested JSON object as (('a', 'b', 'c'), value); keys may hold '/'."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, (*prefix, str(k)))
    else:
        yield prefix, obj
