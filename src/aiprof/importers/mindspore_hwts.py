"""The raw HWTS log of an Ascend profiling job: ``hwts.log.data.45.dev.profiler_default_tag.N.slice_K``.

Layout (as MindSpore's HWTS log parser reads it): 64-byte little-endian records. Byte 0
holds the record type in its low 3 bits (0 Start of task, 1 End of task, 2 Start of
block, 3 End of block, 4 Block PMU), an overflow flag in bit 3 and a 4-bit count in the
high bits; byte 1 is the core id, bytes 4-5 the block id, bytes 6-7 the task id. Types
0-3 carry the system counter (u64) at byte 8 and the stream id (u32) at byte 16; a
Block PMU record carries the stream id at byte 16 and the counter at byte 24 (absent
when the overflow flag is set). The counter ticks at 100 MHz (10 ns), the clock of the
step trace and AI CPU files of the same job. A record of zero bytes is padding.

Tasks are keyed as the framework files key them (:func:`.mindspore_framework.task_key`).
Alone, the log imports one ``kernel`` span per Start/End of task pair (tid = stream,
name ``task KEY``) and says which file names them; in a job folder
(:mod:`.mindspore_job`) the spans are named by their operator. Block records go to
kernel_metrics section ``hwts_block``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from ..errors import ImportFormatError
from .base import Detection, ImportContext, Importer, MetricRow, no, write_metrics, yes
from .mindspore_framework import task_key
from .mindspore_text import pair_hwts, write_hwts_events

NAME = "mindspore-hwts"
RECORD_SIZE = 64
RECORD_TYPES = ("Start of task", "End of task", "Start of block", "End of block", "Block PMU")
_HEAD = struct.Struct("<BBHHH")
_COUNT_STREAM = struct.Struct("<QI")
_PMU = struct.Struct("<IIIIQ")


def parse_hwts_binary(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The records of an HWTS log (the dicts :func:`.mindspore_text.parse_hwts` gives),
    and the count of records that could not be read (a cut last record, unknown types)."""
    records: list[dict[str, Any]] = []
    usable = len(data) - len(data) % RECORD_SIZE
    bad = 1 if usable != len(data) else 0
    zero = bytes(RECORD_SIZE)
    for off in range(0, usable, RECORD_SIZE):
        rec = data[off : off + RECORD_SIZE]
        if rec == zero:
            continue
        b0, core, _, block, task = _HEAD.unpack_from(rec)
        typ = b0 & 7
        if typ > 4:
            bad += 1
            continue
        if typ < 4:
            cycle, stream = _COUNT_STREAM.unpack_from(rec, 8)
        else:
            pmu = _PMU.unpack_from(rec, 8)
            stream, cycle = pmu[2], (pmu[4] if not b0 & 8 else None)
        records.append(
            {
                "type": RECORD_TYPES[typ],
                "cnt": b0 >> 4,
                "core_id": core,
                "block_id": block,
                "task_id": task_key(task, stream),
                "cycle": cycle,
                "stream_id": stream,
            }
        )
    return records, bad


def read_slices(paths: list[Path]) -> bytes:
    return b"".join(p.read_bytes() for p in paths)


def write_hwts(
    records: list[dict[str, Any]], ctx: ImportContext, label: str, *, ops: Any = None, device: int = 0
) -> dict[str, Any]:
    """Write the task spans (and block records) of ``records``; returns the source extras."""
    is_task = [r["type"] in RECORD_TYPES[:2] for r in records]
    tasks = [r for r, t in zip(records, is_task, strict=True) if t]
    blocks = [r for r, t in zip(records, is_task, strict=True) if not t]
    if not tasks:
        raise ImportFormatError(f"{label}: no HWTS task record could be read")
    pairs, unpaired = pair_hwts(tasks)
    if unpaired:
        ctx.warn(f"{label}: {unpaired} HWTS task records without a matching start or end kept as instants")
    named = write_hwts_events(pairs, ctx, ops=ops, device=device)
    if blocks:
        out: list[MetricRow] = []
        for i, r in enumerate(blocks):
            for m, v in (("cycle", r["cycle"]), ("stream_id", r["stream_id"]), ("core_id", r["core_id"])):
                if v is not None:
                    out.append((i, r["task_id"], "hwts_block", m, "tick" if m == "cycle" else None, float(v), None))
            out.append((i, r["task_id"], "hwts_block", "record", None, None, r["type"]))
        write_metrics(ctx, out)
    return {"records": len(records), "tasks": len(pairs) - unpaired, "unmatched": unpaired, "named": named}


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder")
    size = path.stat().st_size
    if size < 2 * RECORD_SIZE:
        return no("shorter than two 64-byte HWTS records")
    with path.open("rb") as f:
        head = f.read(RECORD_SIZE * 256)
    head = head[: len(head) - len(head) % RECORD_SIZE]
    types = set()
    last: dict[int, int] = {}
    for off in range(0, len(head), RECORD_SIZE):
        rec = head[off : off + RECORD_SIZE]
        if not any(rec):
            continue
        b0 = rec[0]
        typ = b0 & 7
        if typ > 4:
            return no("not HWTS records (record type out of range)")
        if typ < 4:
            cycle, stream = _COUNT_STREAM.unpack_from(rec, 8)
            if cycle == 0 or cycle >= 1 << 60 or stream >= 1 << 16:
                return no("not HWTS records (counter or stream out of range)")
            if cycle < last.get(stream, 0) - 10**9:
                return no("not HWTS records (counter runs backwards)")
            last[stream] = cycle
        types.add(typ)
    if not {0, 1} <= types:
        return no("no Start/End of task records in the first 256")
    return yes("Ascend HWTS task records (64-byte start/end of task with stream, task id and cycle)")


def _load(path: Path, ctx: ImportContext) -> None:
    if path.is_dir():
        raise ImportFormatError(f"{path}: a folder, not an HWTS log")
    records, bad = parse_hwts_binary(path.read_bytes())
    if bad:
        ctx.warn(f"{path.name}: {bad} unreadable HWTS records skipped")
    extra = write_hwts(records, ctx, path.name)
    ctx.warn(
        f"{path.name}: tasks are named by stream and task id; the Framework.host.*.task_desc_info file "
        "of the same job names them by operator (import the job folder)"
    )
    ctx.writer.add_source(NAME, path, **extra)


IMPORTER = Importer(
    name=NAME,
    description="Ascend raw HWTS log hwts.log.data.45.dev.* (MindSpore 1.x profiler)",
    detect=_detect,
    load=_load,
    patterns=("hwts.log.data.*",),
)
