"""The raw Ascend step trace binary ``training_trace.*`` (MindSpore 1.x profiler).

Layout (as the MindSpore/MindInsight step trace parser reads it): fixed 20-byte
little-endian records ``tag_id u64, task_id u16, stream_id u16, sys_count u64``.
Tags: 0 or a job id above 255 opens a step, 1 is the forward-propagation start (fp),
2 the backward-propagation end (bp), 255 the end of the step; any other tag is an
all-reduce point, start and end in turn per stream. ``sys_count`` counts the device's
100 MHz system counter (10 ns a tick; the HWTS log and the timeline of the same
profiler folder agree on that rate).

Events: one ``step`` span per step on the NPU (MindInsight's reading: a step starts
where the previous one ended, the first one at its fp point, and ends at tag 255),
with every point of the step in ``args`` as raw ticks, and the iteration interval,
fp-and-bp and tail lengths in ns.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ImportFormatError
from . import jsondoc
from .base import Detection, ImportContext, Importer, no, yes

NAME = "mindspore-step-trace"
RECORD = struct.Struct("<QHHQ")
NS_PER_TICK = 10
FP_TAG, BP_TAG, END_TAG = 1, 2, 255


@dataclass
class StepPoints:
    """One step's points, in ticks of the system counter."""

    step: int
    tag: int | None = None
    tag_point: int | None = None
    fp: int | None = None
    bp: int | None = None
    end: int | None = None
    start: int | None = None
    reduce: dict[int, list[int]] = field(default_factory=dict)


def _is_step_tag(tag: int) -> bool:
    return tag == 0 or tag > END_TAG


def parse_step_trace(data: bytes) -> tuple[list[StepPoints], int]:
    """The steps of a raw step trace, and the count of records that could not be used."""
    steps: list[StepPoints] = []
    cur: StepPoints | None = None
    lost = 0
    prev_end: int | None = None
    usable = len(data) - len(data) % RECORD.size
    lost += 1 if usable != len(data) else 0
    for tag, _task, stream, count in RECORD.iter_unpack(data[:usable]):
        if _is_step_tag(tag):
            if cur is not None:
                lost += 1  # a step opened again before its end: the open one is dropped
            cur = StepPoints(step=len(steps) + 1, tag=tag, tag_point=count)
        elif cur is None:
            lost += 1
        elif tag == END_TAG:
            cur.end = count
            cur.start = prev_end if prev_end is not None else cur.fp
            if cur.start is None or cur.fp is None or cur.bp is None:
                lost += 1
            else:
                steps.append(cur)
                prev_end = count
            cur = None
        elif tag == FP_TAG:
            cur.fp = count
        elif tag == BP_TAG:
            cur.bp = count
        else:
            cur.reduce.setdefault(stream, []).append(count)
    return steps, lost


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder")
    with path.open("rb") as f:
        head = f.read(RECORD.size * 64)
    size = path.stat().st_size
    if size < RECORD.size * 3 or size % RECORD.size:
        return no("not a whole number of 20-byte step trace records")
    tags = set()
    jobs = set()
    last_count = -1
    for tag, _task, stream, count in RECORD.iter_unpack(head[: len(head) - len(head) % RECORD.size]):
        if _is_step_tag(tag):
            jobs.add(tag)
        elif tag in (FP_TAG, BP_TAG, END_TAG):
            if count < last_count:
                return no("step trace points out of order")
            last_count = count
        if stream > 0xFFF or count == 0 or count >= 1 << 62:
            return no("not step trace records (stream or counter out of range)")
        tags.add(tag)
    if len(jobs) != 1 or max(jobs) >= 1 << 32:
        return no("no single job tag opening the steps")
    if not {FP_TAG, END_TAG} <= tags and not {BP_TAG, END_TAG} <= tags:
        return no("no fp/bp and step end points")
    first = RECORD.unpack_from(head)[0]
    if not _is_step_tag(first):
        return no("the first record does not open a step")
    return yes("Ascend step trace records (20-byte tag/task/stream/sys_count)")


def load_file(path: Path, ctx: ImportContext) -> int:
    """Write the step spans of ``path``; returns how many."""
    steps, lost = parse_step_trace(path.read_bytes())
    if not steps:
        raise ImportFormatError(f"{path}: no complete step (start, fp, bp, end) in the step trace")
    if lost:
        ctx.warn(f"{path.name}: {lost} step trace records or steps without all their points skipped")
    origin = ctx.origin(min(s.start or 0 for s in steps) * NS_PER_TICK)
    rank = ctx.rank if ctx.rank is not None else 0
    n = len(steps)
    args = []
    for s in steps:
        assert s.start is not None and s.end is not None and s.fp is not None and s.bp is not None
        a: dict[str, object] = {
            "start_point": s.start,
            "fp_point": s.fp,
            "bp_point": s.bp,
            "end_point": s.end,
            "step_tag": s.tag,
            "step_tag_point": s.tag_point,
            "iteration_interval_ns": (s.fp - s.start) * NS_PER_TICK,
            "fp_and_bp_ns": (s.bp - s.fp) * NS_PER_TICK,
            "tail_ns": (s.end - s.bp) * NS_PER_TICK,
            "unit": "tick (10 ns)",
        }
        for stream, pts in sorted(s.reduce.items()):
            for i in range(0, len(pts) - 1, 2):
                a[f"stream_{stream}_parallel_{i // 2}_start_point"] = pts[i]
                a[f"stream_{stream}_parallel_{i // 2}_end_point"] = pts[i + 1]
            if len(pts) % 2:
                a[f"stream_{stream}_unpaired_point"] = pts[-1]
        args.append(jsondoc.text(a))
    ctx.writer.append(
        "events",
        {
            "rank": [rank] * n,
            "device_type": ["npu"] * n,
            "device": [0] * n,
            "pid": [0] * n,
            "tid": [0] * n,
            "kind": ["step"] * n,
            "cat": ["step_trace"] * n,
            "name": [f"step {s.step}" for s in steps],
            "ts": [(s.start or 0) * NS_PER_TICK - origin for s in steps],
            "dur": [((s.end or 0) - (s.start or 0)) * NS_PER_TICK for s in steps],
            "step": [s.step for s in steps],
            "args": args,
        },
    )
    ctx.kinds["step"] += n
    if ctx.writer.meta.get("clock") in (None, "unknown"):
        ctx.writer.meta["clock"] = "device"
    return n


def _load(path: Path, ctx: ImportContext) -> None:
    if path.is_dir():
        raise ImportFormatError(f"{path}: a folder, not a step trace file")
    n = load_file(path, ctx)
    ctx.writer.add_source(NAME, path, steps=n)


IMPORTER = Importer(
    name=NAME,
    description="Ascend raw step trace binary training_trace.* (MindSpore 1.x profiler)",
    detect=_detect,
    load=_load,
    patterns=("training_trace.*",),
)
