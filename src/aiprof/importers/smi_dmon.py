"""``nvidia-smi dmon`` logs: any ``-s`` letters in any order, with or without ``-o DT``.

Each column becomes a counters metric (``pwr`` -> power W, ``sm`` -> sm_util %, ...;
a column without a metric, such as ``jpg``, is kept as ``dmon.jpg``). ``-`` values are
left out; a line cut by ^C is dropped with a warning; a ``pmon`` block is skipped.
A log without ``-o T`` is placed on the interval its own command line names (``-d N``),
or the one given to ``aiprof import --interval`` (see importers/smi_common.py).
"""

from __future__ import annotations

from pathlib import Path

from ..devices.dmon import header_columns, parse_dmon
from ..errors import ImportFormatError
from .base import Detection, ImportContext, Importer, no, yes
from .smi_common import Reading, read_head, write_readings

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
