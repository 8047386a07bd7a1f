"""Saved ``hl-smi`` output (Intel Gaudi): its tables and its ``-Q ... --format csv`` rows.

Tables: AIP-Util -> sm_util %, Temp -> gpu_temp C, Pwr:Usage/Cap -> power and
power_limit W, Memory-Usage -> fb_used and mem_total MB, Volatile Uncor-Events ->
dbecc. CSV rows: by header when there is one; a ``noheader`` log is read with hl-smi's
usual field list only when every value's unit matches it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ImportFormatError
from .base import Detection, ImportContext, Importer, no, yes
from .nvidia.query_csv import noheader_fields, parse_query_csv
from .smi_common import Reading, read_head, read_text, sample_ordinals, write_readings
from .smi_table import detect_table, parse_tables, table_readings

NAME = "hl-smi"


def _detect(path: Path) -> Detection:
    d = detect_table(path, "HL-SMI")
    if d:
        return d
    head = read_head(path)
    if isinstance(head, Detection):
        return head
    for line in head.splitlines()[:50]:
        if line.strip() and not line.lstrip().startswith("#"):
            if noheader_fields([f.strip() for f in line.split(",")]) is not None:
                return yes("hl-smi -Q CSV rows (index, uuid, name, ... with MiB, W, C, % units)")
            break
    return no("no HL-SMI table and no hl-smi -Q CSV rows")


def _load(path: Path, ctx: ImportContext) -> None:
    text = read_text(path)
    tables = [t for t in parse_tables(text) if "hl-smi" in t.title.lower()]
    readings, problems = table_readings(tables)
    log = parse_query_csv(text)
    problems.extend(log.problems)
    first = len(tables)
    for r, s in zip(log.rows, sample_ordinals(r.device for r in log.rows), strict=False):
        readings.append(Reading(r.ts_ns, first + s, r.device, r.values, r.name))
    if not readings:
        raise ImportFormatError(f"{path}: no hl-smi table or CSV row")
    if any(r.ts_ns is not None for r in readings) and any(r.ts_ns is None for r in readings):
        ctx.warn(f"{path.name}: untimed readings left out next to timed ones")
        readings = [r for r in readings if r.ts_ns is not None]
    write_readings(ctx, path, NAME, "hpu", readings, units=log.units, problems=problems, tables=len(tables))


IMPORTER = Importer(
    name=NAME, description="Intel Gaudi hl-smi tables and -Q CSV", detect=_detect, load=_load, patterns=("*hl-smi*",)
)
