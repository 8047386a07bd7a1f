"""Nsight Compute CSV: the details page (``ncu --csv --page details``) and the raw page
(``ncu --csv --page raw``), as captured from a terminal or a log.

Such captures mix the CSV with ``==PROF==`` lines and the program's own output, end
metric rows with a trailing comma, and may write numbers with thousands separators;
all of that is expected. Columns are found by their header name, never by position.

Everything goes into the ``kernel_metrics`` table in long form, one row per
(launch, section, metric): ``value`` holds the number, or null with the original
string in ``text``. Per launch, three kinds of extra rows are written:
- section ``launch``: the identity columns (process, context, stream, grid, block,
  device, CC...);
- the rule rows of the details page: metric ``rule:NAME``, ``text`` = "TYPE: message",
  ``value`` = estimated speedup (``unit`` says "%" plus its global/local type);
- section ``aiprof``, metric ``bound``: the launch's class from its Speed-of-Light
  figures, decided as Nsight Compute's own SOLBottleneck rule does (see :func:`bound`).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import ImportFormatError
from ..base import Detection, ImportContext, Importer, no, yes

NAME = "ncu"

# Thresholds of Nsight Compute's SOLBottleneck rule (sections/SpeedOfLight*.py), in % of peak.
#: Both SM and memory throughput below this: the launch is latency-bound.
LATENCY_BOUND_PCT = 60.0
#: Either throughput at or above this: bound by the higher of the two.
NO_BOUND_PCT = 80.0
#: Between the two bands, SM and memory within this many points of each other: balanced.
BALANCED_PCT = 10.0

BOUND_CLASSES = ("compute-bound", "memory-bound", "latency-bound", "balanced")

#: Names of the SOL figures, details page first, then older releases, then the raw page.
SM_PCT_NAMES = (
    "Compute (SM) Throughput",
    "Compute (SM) [%]",
    "SM [%]",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
MEM_PCT_NAMES = (
    "Memory Throughput",
    "Memory [%]",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
)
DURATION_NAMES = ("Duration", "gpu__time_duration.sum")

_DETAIL_COLS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
_RULE_COLS = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")
_NUM_RE = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d*)?([eE][+-]?\d+)?$")
_TIME_UNITS_NS = {
    "ns": 1.0,
    "nsecond": 1.0,
    "usecond": 1e3,
    "us": 1e3,
    "msecond": 1e6,
    "ms": 1e6,
    "second": 1e9,
    "s": 1e9,
}


def bound(sm_pct: float | None, mem_pct: float | None) -> str | None:
    """The Speed-of-Light class of one launch, as Nsight Compute's SOLBottleneck rule says.

    - SM and memory throughput both under :data:`NO_BOUND_PCT`:
      both under :data:`LATENCY_BOUND_PCT` -> ``latency-bound``; else, the two more than
      :data:`BALANCED_PCT` apart -> the higher one's ``compute-bound`` / ``memory-bound``;
      else ``balanced``.
    - Otherwise the higher one (SM on a tie) bounds the launch.
    Returns None when either figure is missing.
    """
    if sm_pct is None or mem_pct is None or math.isnan(sm_pct) or math.isnan(mem_pct):
        return None
    if sm_pct < NO_BOUND_PCT and mem_pct < NO_BOUND_PCT:
        if sm_pct < LATENCY_BOUND_PCT and mem_pct < LATENCY_BOUND_PCT:
            return "latency-bound"
        if abs(sm_pct - mem_pct) >= BALANCED_PCT:
            return "compute-bound" if sm_pct > mem_pct else "memory-bound"
        return "balanced"
    return "compute-bound" if sm_pct >= mem_pct else "memory-bound"


def parse_value(s: str) -> float | None:
    """A metric value as a float: '1,239,496,049.13' -> 1239496049.13; None if not a number."""
    t = s.strip()
    if not t:
        return None
    if _NUM_RE.match(t):
        return float(t.replace(",", ""))
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _is_header(fields: list[str]) -> bool:
    return len(fields) > 2 and fields[0] == "ID" and "Kernel Name" in fields


def _csv_lines(lines: Iterable[str]) -> Iterable[tuple[int, str]]:
    for i, line in enumerate(lines):
        if line.startswith('"'):
            yield i, line


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder, not a CSV file")
    with path.open("rb") as f:
        head = f.read(1 << 16)
    if b"\x00" in head:
        return no("binary data, not CSV")
    text = head.decode("utf-8", "replace")
    for line in text.splitlines():
        if line.startswith('"ID"'):
            try:
                fields = next(csv.reader([line]))
            except (csv.Error, StopIteration):
                continue
            if _is_header(fields):
                page = "details" if all(c in fields for c in _DETAIL_COLS) else "raw"
                return yes(f"Nsight Compute CSV ({page} page)")
    return no('no Nsight Compute CSV header ("ID",...,"Kernel Name",...) in the first 64 KiB')


class _Rows:
    """Collects kernel_metrics rows and writes them in batches."""

    BATCH = 50_000

    def __init__(self, ctx: ImportContext, rank: int) -> None:
        self.ctx = ctx
        self.rank = rank
        self.cols: dict[str, list[Any]] = {
            k: [] for k in ("launch_id", "kernel", "section", "metric", "unit", "value", "text")
        }
        self.n = 0

    def add(
        self,
        launch: int,
        kernel: str,
        section: str | None,
        metric: str,
        unit: str | None,
        raw: str | None,
        value: float | None = None,
        text: str | None = None,
    ) -> None:
        """One row; ``value`` parsed from ``raw`` unless given; ``text`` = ``raw`` when it is no number."""
        c = self.cols
        if value is None and raw is not None:
            value = parse_value(raw)
        if text is None and value is None and raw not in (None, ""):
            text = raw
        c["launch_id"].append(launch)
        c["kernel"].append(kernel)
        c["section"].append(section or None)
        c["metric"].append(metric)
        c["unit"].append(unit or None)
        c["value"].append(value)
        c["text"].append(text)
        if len(c["launch_id"]) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        c = self.cols
        if not c["launch_id"]:
            return
        n = len(c["launch_id"])
        self.ctx.writer.append("kernel_metrics", {"rank": [self.rank] * n, **c})
        self.ctx.tables["kernel_metrics"] += n
        self.n += n
        for v in c.values():
            v.clear()


class _Launch:
    __slots__ = ("identity", "kernel", "mem", "sm")

    def __init__(self, kernel: str, identity: dict[str, str]) -> None:
        self.kernel = kernel
        self.identity = identity
        self.sm: float | None = None
        self.mem: float | None = None


def _load(path: Path, ctx: ImportContext) -> None:
    raw_text = path.read_bytes().decode("utf-8", "replace")
    ctx.progress(len(raw_text))
    lines = raw_text.splitlines()
    rank = ctx.default_rank
    header: list[str] | None = None
    header_line = -1
    prof: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("==") and "==" in line[2:]:
            prof.append(line)
        if header is None and line.startswith('"ID"'):
            try:
                fields = next(csv.reader([line]))
            except (csv.Error, StopIteration):
                continue
            if _is_header(fields):
                header, header_line = fields, i
    if header is None:
        raise ImportFormatError(f'{path}: no Nsight Compute CSV header ("ID",...,"Kernel Name",...) found')
    idx = {name: i for i, name in enumerate(header)}
    details = all(c in idx for c in _DETAIL_COLS)
    out = _Rows(ctx, rank)
    launches: dict[int, _Launch] = {}
    bad = 0
    cut = False
    units: dict[str, str] = {}
    body = [(i, ln) for i, ln in _csv_lines(lines[header_line + 1 :])]
    reader_lines = [ln for _, ln in body]
    try:
        rows = list(csv.reader(reader_lines))
    except csv.Error:  # a field past the csv module's 128 KiB limit: line by line
        rows = []
        for ln in reader_lines:
            try:
                rows.extend(csv.reader([ln]))
            except csv.Error:
                bad += 1
    id_cols = [c for c in header if c not in _DETAIL_COLS and c not in _RULE_COLS and c not in ("ID", "Kernel Name")]
    metric_cols: list[str] = []
    if not details:
        # Raw page: identity columns hold no metric ids ("__"); the rest are metrics.
        metric_cols = [c for c in header if "__" in c or "." in c]
        id_cols = [c for c in header if c not in metric_cols and c not in ("ID", "Kernel Name")]
    for n_row, fields in enumerate(rows):
        if fields == header:
            continue  # a second process prints the header again
        end = len(fields)
        while end > len(header) and fields[end - 1] == "":
            end -= 1  # the trailing comma of metric rows
        fields = fields[:end]
        if len(fields) < len(header):
            # Metric rows stop before the rule columns; shorter than that is damage.
            need = max(idx[c] for c in _DETAIL_COLS) + 1 if details else len(header)
            if len(fields) < need:
                if n_row == len(rows) - 1 and len(fields) > 0:
                    cut = True
                else:
                    bad += 1
                continue
            fields = fields + [""] * (len(header) - len(fields))
        rid = fields[idx["ID"]].strip()
        if not rid:
            if not details and not units:
                units = {c: fields[i] for c, i in idx.items()}
            continue
        try:
            launch_id = int(rid.replace(",", ""))
        except ValueError:
            bad += 1
            continue
        kernel = fields[idx["Kernel Name"]]
        la = launches.get(launch_id)
        if la is None:
            la = launches[launch_id] = _Launch(kernel, {c: fields[idx[c]] for c in id_cols})
            for c, v in la.identity.items():
                out.add(launch_id, kernel, "launch", c, None, v)
        if details:
            rule = fields[idx["Rule Name"]].strip() if "Rule Name" in idx else ""
            section = fields[idx["Section Name"]]
            if rule:
                rtype = fields[idx["Rule Type"]] if "Rule Type" in idx else ""
                desc = fields[idx["Rule Description"]] if "Rule Description" in idx else ""
                stype = fields[idx["Estimated Speedup Type"]] if "Estimated Speedup Type" in idx else ""
                speed = fields[idx["Estimated Speedup"]] if "Estimated Speedup" in idx else ""
                value = parse_value(speed)
                unit = ("% " + stype).strip() if value is not None else None
                text = f"{rtype}: {desc}" if rtype else desc
                out.add(launch_id, kernel, section, f"rule:{rule}", unit, None, value, text)
                continue
            metric = fields[idx["Metric Name"]]
            unit = fields[idx["Metric Unit"]]
            raw = fields[idx["Metric Value"]]
            value = parse_value(raw)
            out.add(launch_id, kernel, section, metric, unit, raw, value)
            _note_sol(la, metric, value)
        else:
            for c in metric_cols:
                raw = fields[idx[c]]
                value = parse_value(raw)
                out.add(launch_id, kernel, "raw", c, units.get(c), raw, value)
                _note_sol(la, c, value)
    unclassified = 0
    for launch_id, la in launches.items():
        cls = bound(la.sm, la.mem)
        if cls is None:
            unclassified += 1
            continue
        out.add(launch_id, la.kernel, "aiprof", "bound", None, None, None, cls)
    out.flush()
    if not launches:
        raise ImportFormatError(f"{path}: an Nsight Compute CSV header but no metric rows")
    if cut:
        ctx.warn(f"{path.name}: the last CSV row is cut short (file truncated?); that row was lost")
        ctx.writer.meta["partial"] = True
    if bad:
        ctx.warn(f"{path.name}: {bad} CSV rows did not fit the header and were skipped")
    if unclassified:
        ctx.warn(
            f"{path.name}: {unclassified} of {len(launches)} launches lack the Speed-of-Light throughput "
            "metrics (SpeedOfLight section); they have no bound class"
        )
    _devices(ctx, rank, launches)
    meta = ctx.writer.meta
    if rank not in meta["ranks"]:
        meta["ranks"].append(rank)
    ctx.writer.add_source(
        NAME,
        path,
        page="details" if details else "raw",
        launches=len(launches),
        rows=out.n,
        prof_lines=prof[:50],
    )


def _note_sol(la: _Launch, metric: str, value: float | None) -> None:
    if value is None:
        return
    if metric in SM_PCT_NAMES and la.sm is None:
        la.sm = value
    elif metric in MEM_PCT_NAMES and la.mem is None:
        la.mem = value


def _devices(ctx: ImportContext, rank: int, launches: dict[int, _Launch]) -> None:
    meta = ctx.writer.meta
    known = {(d.get("rank"), d.get("type"), d.get("index")) for d in meta["devices"]}
    for la in launches.values():
        dev = parse_value(la.identity.get("Device", ""))
        if dev is None:
            continue
        key = (rank, "cuda", int(dev))
        if key in known:
            continue
        known.add(key)
        rec: dict[str, Any] = {"rank": rank, "type": "cuda", "index": int(dev), "vendor": "NVIDIA"}
        if la.identity.get("CC"):
            rec["compute_capability"] = la.identity["CC"]
        meta["devices"].append(rec)


def duration_ns(value: float | None, unit: str | None) -> float | None:
    """A Duration metric in ns, whatever time unit ncu printed it in."""
    if value is None:
        return None
    return value * _TIME_UNITS_NS.get((unit or "ns").strip().lower(), 1.0)


IMPORTER = Importer(
    name=NAME,
    description="Nsight Compute CSV (ncu --csv --page details / raw), program output mixed in is fine",
    detect=_detect,
    load=_load,
    patterns=("*ncu*.csv", "*ncu*.log", "*ncu*.txt"),
)

__all__ = ["BOUND_CLASSES", "IMPORTER", "bound", "duration_ns", "parse_value"]
