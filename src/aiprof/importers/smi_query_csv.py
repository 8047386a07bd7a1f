"""``nvidia-smi --query-gpu=... --format=csv`` logs (also hl-smi's ``-Q`` CSV with a header).

Fields are found by header name (``power.draw [W]`` -> power, ``utilization.gpu [%]``
-> sm_util, ``memory.used [MiB]`` -> fb_used ...; any other numeric field is kept as
``smi.<field>``). ``[N/A]`` values are left out. Samples are timed by the ``timestamp``
field when it was queried.
"""

from __future__ import annotations

from pathlib import Path

from ..devices.query_csv import header_fields, parse_query_csv
from ..errors import ImportFormatError
from .base import Detection, ImportContext, Importer, no, yes
from .smi_common import Reading, read_head, read_text, sample_ordinals, write_readings

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
