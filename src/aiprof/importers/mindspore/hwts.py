"""The raw HWTS log of an Ascend profiling job: ``hwts.log.data.45.dev.profiler_default_tag.N.slice_K``.

Layout (as MindSpore's HWTS log parser reads it): 64-byte little-endian records. Byte 0
holds the record type in its low 3 bits (0 Start of task, 1 End of task, 2 Start of
block, 3 End of block, 4 Block PMU), an overflow flag in bit 3 and a 4-bit count in the
high bits; byte 1 is the core id, bytes 4-5 the block id, bytes 6-7 the task id. Types
0-3 carry the system counter (u64) at byte 8 and the stream id (u32) at byte 16; a
Block PMU record carries the stream id at byte 16 and the counter at byte 24 (absent
when the overflow flag is set). The counter ticks at 100 MHz (10 ns), the clock of the
step trace and AI CPU files of the same job. A record of zero bytes is padding.

Tasks are keyed as the framework files key them (:func:`.framework.task_key`).
Alone, the log imports one ``kernel`` span per Start/End of task pair (tid = stream,
name ``task KEY``) and says which file names them; in a job folder
(:mod:`.job`) the spans are named by their operator (task_desc_info). The task_desc_info
file names one task per kernel op: the tasks HCCL issues for a communication op (on its
stream and its slave streams) and the runtime's own tasks (events, stream switches) are
not in it. A task the step trace's point pair brackets (its id between the ids of the
two trace tasks, :func:`.step_trace.point_ranges`; per stream where ids are per stream)
takes the pair's name (the point file's op, else ``stream_S_parallel_I`` as MindInsight
names it) and, where the pair is communication (:func:`.step_trace.pair_is_comm`:
MindInsight's reading, unless the point file names another op), ``collective``; any
other task no file names is ``kernel`` ``unnamed task KEY``. Block records go to kernel_metrics section ``hwts_block``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ImportFormatError
from .. import jsondoc
from ..base import (
    Detection,
    ImportContext,
    Importer,
    MetricRow,
    append_npu_events,
    device_clock,
    no,
    write_metrics,
    yes,
)
from .framework import TASK_ID_THRESHOLD, task_key
from .step_trace import PointRange

NAME = "mindspore-hwts"
RECORD_SIZE = 64
RECORD_TYPES = ("Start of task", "End of task", "Start of block", "End of block", "Block PMU")
NS_PER_TICK = 10
#: Cycles at or past this are damage: their ns would not fit an int64 timestamp.
MAX_CYCLE = (1 << 62) // NS_PER_TICK
#: Op types that set memory rather than compute (MindSpore's timeline shows them apart).
MEMSET_TYPES = ("MemSet", "AtomicAddrClean")
_COUNT_STREAM = struct.Struct("<QI")


def read_slices(paths: list[Path]) -> bytes:
    return b"".join(p.read_bytes() for p in paths)


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
    cols, bad = decode_hwts(path.read_bytes())
    if bad:
        ctx.warn(f"{path.name}: {bad} unreadable HWTS records skipped")
    extra = write_columns(cols, ctx, path.name)
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


# -- the columnar path (large logs) -----------------------------------------------------------------

_DTYPE = np.dtype(
    [
        ("b0", "u1"),
        ("core", "u1"),
        ("_r", "<u2"),
        ("block", "<u2"),
        ("task", "<u2"),
        ("cycle", "<u8"),
        ("stream", "<u4"),
        ("_w", "<u4"),
        ("pmu_cycle", "<u8"),
        ("_rest", "V32"),
    ]
)


@dataclass
class HwtsColumns:
    """The records of an HWTS log as columns (padding dropped), in file order."""

    typ: np.ndarray
    cnt: np.ndarray
    core: np.ndarray
    block: np.ndarray
    task: np.ndarray
    cycle: np.ndarray
    """-1 where a Block PMU record has no counter."""
    stream: np.ndarray

    def key_code(self) -> np.ndarray:
        """One int per task key (:func:`.framework.task_key`)."""
        small = self.task < TASK_ID_THRESHOLD
        return np.where(small, (self.stream.astype(np.int64) << 16) | self.task, (1 << 40) | self.task.astype(np.int64))

    def key_text(self, i: int) -> str:
        return task_key(int(self.task[i]), int(self.stream[i]))


def decode_hwts(data: bytes) -> tuple[HwtsColumns, int]:
    """The records of an HWTS log as columns (see the module doc for the layout), and the
    count of records that could not be read (a cut last record, unknown types)."""
    usable = len(data) - len(data) % RECORD_SIZE
    bad = 1 if usable != len(data) else 0
    a = np.frombuffer(data, dtype=_DTYPE, count=usable // RECORD_SIZE)
    raw = np.frombuffer(data, dtype=np.uint8, count=usable).reshape(-1, RECORD_SIZE)
    typ = a["b0"] & 7
    keep = raw.any(axis=1) & (typ <= 4)
    bad += int((raw.any(axis=1) & (typ > 4)).sum())
    a, typ = a[keep], typ[keep]
    pmu = typ == 4
    raw_cycle = np.where(pmu, a["pmu_cycle"], a["cycle"])
    no_cycle = pmu & ((a["b0"] & 8) != 0)
    # A damaged record's cycle can be any 64-bit value; one that would not fit a
    # timestamp in int64 ns is unreadable (a real one is a few days of 100 MHz ticks).
    sane = no_cycle | (raw_cycle < MAX_CYCLE)
    bad += int((~sane).sum())
    a, typ, pmu, raw_cycle, no_cycle = a[sane], typ[sane], pmu[sane], raw_cycle[sane], no_cycle[sane]
    cycle = np.where(no_cycle, -1, raw_cycle.astype(np.int64))
    return (
        HwtsColumns(
            typ.astype(np.int64),
            (a["b0"] >> 4).astype(np.int64),
            a["core"].astype(np.int64),
            a["block"].astype(np.int64),
            a["task"].astype(np.int64),
            cycle,
            a["stream"].astype(np.int64),
        ),
        bad,
    )


def pair_columns(c: HwtsColumns) -> tuple[np.ndarray, np.ndarray]:
    """Start / End of task pairs per task key, by :func:`.text.pair_hwts`'s rule: (start index, end index) per event, a lone record its own end; in start
    (cycle, cnt) order."""
    idx = np.nonzero(c.typ <= 1)[0]
    key = c.key_code()[idx]
    order = idx[np.lexsort((idx, key))]
    k, t = c.key_code()[order], c.typ[order]
    starts = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        starts[:-1] = (t[:-1] == 0) & (t[1:] == 1) & (k[:-1] == k[1:])
    ends = np.zeros(len(order), dtype=bool)
    ends[1:] = starts[:-1]
    lone = ~(starts | ends)
    s = np.concatenate([order[starts], order[lone]])
    e = np.concatenate([order[np.nonzero(starts)[0] + 1], order[lone]])
    by = np.lexsort((c.cnt[s], c.cycle[s]))
    return s[by], e[by]


def _in_range(task: int, stream: int, ranges: list[PointRange]) -> PointRange | None:
    """The point pair whose trace tasks bracket a task: by id alone where ids name a task
    alone (:data:`.framework.TASK_ID_THRESHOLD`), else on the same stream."""
    for r in ranges:
        if r.lo < task < r.hi and (task >= TASK_ID_THRESHOLD or stream == r.stream):
            return r
    return None


def write_columns(
    c: HwtsColumns,
    ctx: ImportContext,
    label: str,
    *,
    ops: Any = None,
    device: int = 0,
    ranges: list[PointRange] | None = None,
) -> dict[str, Any]:
    """:func:`write_hwts` over columns: the same events and block metrics. ``ops`` (key ->
    framework op) names the tasks; ``ranges`` (the step trace's point pairs) names the
    tasks ``ops`` does not (see the module doc); with either, a task neither names is
    ``unnamed task KEY``."""
    s, e = pair_columns(c)
    if not len(s):
        raise ImportFormatError(f"{label}: no HWTS task record could be read")
    alone = s == e
    unpaired = int(alone.sum())
    if unpaired:
        ctx.warn(f"{label}: {unpaired} HWTS task records without a matching start or end kept as instants")
    _, first, inv = np.unique(c.key_code()[s], return_index=True, return_inverse=True)
    keys = [c.key_text(int(s[p])) for p in first]
    found = [ops.get(k) if ops else None for k in keys]
    joined = ops is not None or ranges is not None
    bracket = [
        _in_range(int(c.task[s[p]]), int(c.stream[s[p]]), ranges) if ranges and f is None else None
        for p, f in zip(first, found, strict=True)
    ]
    origin = ctx.origin(int(c.cycle[s[0]]) * NS_PER_TICK)
    names, kinds, args = [], [], []
    named = by_comm = by_point = 0
    for i, j, u in zip(s.tolist(), e.tolist(), inv.tolist(), strict=True):
        op = found[u]
        rng = bracket[u]
        lone = i == j
        a: dict[str, Any] = {
            "task_id": keys[u],
            "stream_id": int(c.stream[i]),
            "core_id": int(c.core[i]),
            "block_id": int(c.block[i]),
            "start_cnt": int(c.cnt[i]),
            "end_cnt": int(c.cnt[j]),
            "start_cycle": int(c.cycle[i]),
            "end_cycle": int(c.cycle[j]),
        }
        kind = "instant" if lone else "kernel"
        if op is not None:
            named += 1
            names.append(op.name)
            a = op.args() | a
            if not lone and (op.op_type or "").startswith(MEMSET_TYPES):
                kind = "memset"
        elif rng is not None:
            what = f"between step trace points {rng.start_tag}-{rng.end_tag} (stream {rng.stream})"
            a = {"fullname": rng.fullname, "op_by": what} | a if rng.fullname else {"op_by": what} | a
            names.append(rng.name)
            if rng.comm:
                by_comm += 1
                if rng.fullname is None:
                    a = {
                        "kind_evidence": "the point file does not name this pair; MindInsight reads every pair as communication"
                    } | a
                if not lone:
                    kind = "collective"
            else:
                by_point += 1
        else:
            names.append(f"unnamed task {keys[u]}" if joined else f"task {keys[u]}")
        if lone:
            a |= {"record": RECORD_TYPES[int(c.typ[i])], "unmatched": True}
        kinds.append(kind)
        args.append(jsondoc.text(a))
    append_npu_events(
        ctx,
        device,
        {
            "tid": c.stream[s],
            "kind": kinds,
            "cat": ["HWTS"] * len(s),
            "name": names,
            "ts": c.cycle[s] * NS_PER_TICK - origin,
            "dur": (c.cycle[e] - c.cycle[s]) * NS_PER_TICK,
            "args": args,
        },
    )
    device_clock(ctx)
    blocks = np.nonzero(c.typ >= 2)[0]
    if len(blocks):
        out: list[MetricRow] = []
        for n, i in enumerate(blocks.tolist()):
            key = c.key_text(i)
            if c.cycle[i] >= 0:
                out.append((n, key, "hwts_block", "cycle", "tick", float(c.cycle[i]), None))
            out.append((n, key, "hwts_block", "stream_id", None, float(c.stream[i]), None))
            out.append((n, key, "hwts_block", "core_id", None, float(c.core[i]), None))
            out.append((n, key, "hwts_block", "record", None, None, RECORD_TYPES[int(c.typ[i])]))
        write_metrics(ctx, out)
    n_rec = len(c.typ)
    out_counts = {"records": n_rec, "tasks": len(s) - unpaired, "unmatched": unpaired, "named": named}
    if ranges is not None:
        out_counts |= {"between_comm_points": by_comm, "between_other_points": by_point}
    return out_counts
