"""The raw Ascend step trace binary ``training_trace.*`` (MindSpore 1.x profiler).

Layout (as the MindSpore/MindInsight step trace parser reads it): fixed 20-byte
little-endian records ``tag_id u64, task_id u16, stream_id u16, sys_count u64``.
Tags: 0 or a job id above the end tag opens a step, 1 is the forward-propagation start
(fp), 2 the backward-propagation end (bp), 255 the end of the step (65535 in files
written since December 2020: a file holding that tag uses it); any other tag is a
communication point, an odd tag its start and the next even tag its end, per stream
(the framework's ``point`` file names the op of each tag). ``sys_count`` counts the device's
100 MHz system counter (10 ns a tick; the HWTS log and the timeline of the same
profiler folder agree on that rate).

Events: one ``step`` span per step on the NPU (MindInsight's reading: a step starts
where the previous one ended, the first one at its fp point, and ends at tag 255),
with every point of the step in ``args`` as raw ticks, and the iteration interval,
fp-and-bp and tail lengths in ns (MindInsight's step trace breakdown); one
span per pair of points (tid = the stream, cat ``step_trace``), named by the op the
point file gives for its tag (last path component), else ``stream_S_parallel_I`` as
MindInsight names it. MindSpore puts these points around every communication op (and
around the nodes a user names, ``PROFILING_CUSTOM_N``): a pair is ``collective`` as
MindInsight reads it (its "reduce" phase), unless the point file names it by an op that
is not a communication op (:func:`pair_is_comm`), which makes it ``other``
(``args.kind_evidence`` says why).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

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

NAME = "mindspore-step-trace"
RECORD = struct.Struct("<QHHQ")
NS_PER_TICK = 10
FP_TAG, BP_TAG, END_TAG = 1, 2, 255
#: The step end tag of files written since December 2020 (MindSpore's step trace parser).
NEW_END_TAG = 65535
#: HCCL op types (MindSpore's communication primitives; GE's ``Hcom*`` types).
_COMM_TYPE = re.compile(
    r"^(?:Hcom)?(?:AllReduce|AllGather|ReduceScatter|Broadcast|AllToAll|AlltoAll|AlltoAllV|AllToAllv|Send|Receive"
    r"|Recv|NeighborExchange|NeighborExchangeV2|Reduce|Barrier|CollectiveScatter|CollectiveGather|AllSwap)$",
    re.IGNORECASE,
)
_OP_SUFFIX = re.compile(r"-op\d+$")


def pair_is_comm(full_name: str | None) -> bool:
    """Whether a pair of step trace points brackets communication: as MindInsight reads
    them (every pair is its "reduce" phase), unless the point file names the pair by an
    op that is not a communication op (a user's custom point)."""
    return full_name is None or is_comm_op(full_name)


def is_comm_op(full_name: str | None, op_type: str | None = None) -> bool:
    """Whether an op is a communication (HCCL) op, by its type or, without one, by its
    name (``.../AllGather-op136``)."""
    if op_type:
        return bool(_COMM_TYPE.match(op_type))
    if not full_name:
        return False
    return bool(_COMM_TYPE.match(_OP_SUFFIX.sub("", full_name.rsplit("/", 1)[-1])))


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
    reduce_tags: dict[int, list[int]] = field(default_factory=dict)
    """The tag of each point in ``reduce``, in the same order."""
    reduce_tasks: dict[int, list[int]] = field(default_factory=dict)
    """The task id of each point in ``reduce`` (the trace task the point ran as)."""


def _is_step_tag(tag: int, end: int = END_TAG) -> bool:
    return tag == 0 or tag > end


def end_tag(data: bytes) -> int:
    """The step end tag this file uses (65535 when it holds one, else 255)."""
    usable = len(data) - len(data) % RECORD.size
    for tag, _task, _stream, _count in RECORD.iter_unpack(data[:usable]):
        if tag == NEW_END_TAG:
            return NEW_END_TAG
    return END_TAG


def parse_step_trace(data: bytes) -> tuple[list[StepPoints], int]:
    """The steps of a raw step trace, and the count of records that could not be used."""
    steps: list[StepPoints] = []
    cur: StepPoints | None = None
    lost = 0
    prev_end: int | None = None
    usable = len(data) - len(data) % RECORD.size
    lost += 1 if usable != len(data) else 0
    end = end_tag(data)
    for tag, task, stream, count in RECORD.iter_unpack(data[:usable]):
        if _is_step_tag(tag, end):
            if cur is not None:
                lost += 1  # a step opened again before its end: the open one is dropped
            cur = StepPoints(step=len(steps) + 1, tag=tag, tag_point=count)
        elif cur is None:
            lost += 1
        elif tag == end:
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
            cur.reduce_tags.setdefault(stream, []).append(tag)
            cur.reduce_tasks.setdefault(stream, []).append(task)
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
    recs = list(RECORD.iter_unpack(head[: len(head) - len(head) % RECORD.size]))
    end = NEW_END_TAG if any(r[0] == NEW_END_TAG for r in recs) else END_TAG
    for tag, _task, stream, count in recs:
        if _is_step_tag(tag, end):
            jobs.add(tag)
        elif tag in (FP_TAG, BP_TAG, end):
            if count < last_count:
                return no("step trace points out of order")
            last_count = count
        if stream > 0xFFF or count == 0 or count >= 1 << 62:
            return no("not step trace records (stream or counter out of range)")
        tags.add(tag)
    if len(jobs) != 1 or max(jobs) >= 1 << 32:
        return no("no single job tag opening the steps")
    if not {FP_TAG, end} <= tags and not {BP_TAG, end} <= tags:
        return no("no fp/bp and step end points")
    first = RECORD.unpack_from(head)[0]
    if not _is_step_tag(first, end):
        return no("the first record does not open a step")
    return yes("Ascend step trace records (20-byte tag/task/stream/sys_count)")


def comm_spans(
    steps: list[StepPoints], points: Mapping[int, str] | None = None
) -> tuple[list[tuple[int, int, str, int, int, int, int]], int]:
    """The communication spans between a step's points: (step, stream, name, start,
    end, start tag, end tag) in ticks, and the count of points that pair with nothing.
    A start is an odd tag and its end the next point on the stream with the next tag."""
    out: list[tuple[int, int, str, int, int, int, int]] = []
    lone = 0
    for s in steps:
        for stream, pts in sorted(s.reduce.items()):
            tags = s.reduce_tags.get(stream, [])
            i = k = 0
            while i < len(pts):
                if i + 1 < len(pts) and tags[i + 1] - tags[i] == 1 and tags[i + 1] % 2 == 0:
                    full = (points or {}).get(tags[i])
                    name = full.rsplit("/", 1)[-1] if full else f"stream_{stream}_parallel_{k}"
                    out.append((s.step, stream, name, pts[i], pts[i + 1], tags[i], tags[i + 1]))
                    i += 2
                    k += 1
                else:
                    lone += 1
                    i += 1
    return out, lone


@dataclass(frozen=True)
class PointRange:
    """The tasks issued between a pair of points: task ids ``lo < id < hi`` (the trace
    tasks of the two points), named ``name`` (the point file's op, else MindInsight's
    ``stream_S_parallel_I``); ``comm`` when the point file names a communication op."""

    stream: int
    lo: int
    hi: int
    name: str
    label: str
    """``stream_S_parallel_I``."""
    start_tag: int
    end_tag: int
    comm: bool
    fullname: str | None


def point_ranges(steps: list[StepPoints], points: Mapping[int, str] | None = None) -> list[PointRange]:
    """The task id ranges of the point pairs (:func:`comm_spans`' pairing), one per pair
    (a graph's trace tasks keep their ids from step to step)."""
    out: dict[tuple[int, int, int], PointRange] = {}
    for s in steps:
        for stream, pts in sorted(s.reduce.items()):
            tags = s.reduce_tags.get(stream, [])
            tasks = s.reduce_tasks.get(stream, [])
            i = k = 0
            while i < len(pts):
                if i + 1 < len(pts) and tags[i + 1] - tags[i] == 1 and tags[i + 1] % 2 == 0:
                    full = (points or {}).get(tags[i])
                    label = f"stream_{stream}_parallel_{k}"
                    if i + 1 < len(tasks) and tasks[i] < tasks[i + 1]:
                        key = (stream, tasks[i], tasks[i + 1])
                        out.setdefault(
                            key,
                            PointRange(
                                stream,
                                tasks[i],
                                tasks[i + 1],
                                full.rsplit("/", 1)[-1] if full else label,
                                label,
                                tags[i],
                                tags[i + 1],
                                pair_is_comm(full),
                                full,
                            ),
                        )
                    i += 2
                    k += 1
                else:
                    i += 1
    return list(out.values())


def load_file(
    path: Path,
    ctx: ImportContext,
    *,
    points: Mapping[int, str] | None = None,
    device: int = 0,
    as_events: bool = True,
) -> int:
    """Write the step spans of ``path`` and the communication spans between its points;
    ``points`` (tag -> full op name, the framework's point file) names them. Returns
    how many steps. ``as_events`` False (the other spans of the import are on a clock
    these ticks cannot be put on): every point goes to kernel_metrics instead, section
    ``training_trace`` (kernel ``step`` or the communication op, launch_id = step, ticks)."""
    steps, lost = parse_step_trace(path.read_bytes())
    if not steps:
        raise ImportFormatError(f"{path}: no complete step (start, fp, bp, end) in the step trace")
    if lost:
        ctx.warn(f"{path.name}: {lost} step trace records or steps without all their points skipped")
    if not as_events:
        write_metrics(ctx, _point_rows(steps, points))
        return len(steps)
    origin = ctx.origin(min(s.start or 0 for s in steps) * NS_PER_TICK)
    n = len(steps)
    args = []
    named = {k: v for k, v in (("fp_start_op", FP_TAG), ("bp_end_op", BP_TAG)) if points and v in points}
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
        for key, tag in named.items():
            a[key] = (points or {})[tag]
        for stream, pts in sorted(s.reduce.items()):
            for i in range(0, len(pts) - 1, 2):
                a[f"stream_{stream}_parallel_{i // 2}_start_point"] = pts[i]
                a[f"stream_{stream}_parallel_{i // 2}_end_point"] = pts[i + 1]
            if len(pts) % 2:
                a[f"stream_{stream}_unpaired_point"] = pts[-1]
        args.append(jsondoc.text(a))
    append_npu_events(
        ctx,
        device,
        {
            "kind": "step",
            "cat": ["step_trace"] * n,
            "name": [f"step {s.step}" for s in steps],
            "ts": [(s.start or 0) * NS_PER_TICK - origin for s in steps],
            "dur": [((s.end or 0) - (s.start or 0)) * NS_PER_TICK for s in steps],
            "step": [s.step for s in steps],
            "args": args,
        },
    )
    spans, lone = comm_spans(steps, points)
    if lone:
        ctx.warn(f"{path.name}: {lone} communication points without their start or end point not paired")
    if spans:
        m = len(spans)
        full = [(points or {}).get(c[5]) for c in spans]
        comm = [pair_is_comm(f) for f in full]
        append_npu_events(
            ctx,
            device,
            {
                "tid": [c[1] for c in spans],
                "kind": ["collective" if x else "other" for x in comm],
                "cat": ["step_trace"] * m,
                "name": [c[2] for c in spans],
                "ts": [c[3] * NS_PER_TICK - origin for c in spans],
                "dur": [(c[4] - c[3]) * NS_PER_TICK for c in spans],
                "step": [c[0] for c in spans],
                "args": [
                    jsondoc.text(
                        {
                            "start_tag": c[5],
                            "end_tag": c[6],
                            "start_point": c[3],
                            "end_point": c[4],
                            **({"fullname": f} if f else {}),
                            **({} if x else {"kind_evidence": _not_comm(f, c[5])}),
                        }
                    )
                    for c, f, x in zip(spans, full, comm, strict=True)
                ],
            },
        )
    device_clock(ctx)
    return n


def _not_comm(full: str | None, tag: int) -> str:
    why = f"the point file names {full}, not a communication op" if full else "no point file names this tag"
    return (
        f"step trace points {tag}-{tag + 1} mark a communication op or a user's custom node (PROFILING_CUSTOM); {why}"
    )


def _point_rows(steps: list[StepPoints], points: Mapping[int, str] | None) -> list[MetricRow]:
    """Every point of every step, and each communication span's, as kernel_metrics rows."""
    sec = "training_trace"
    out: list[MetricRow] = []
    for s in steps:
        for m, v in (("start_point", s.start), ("fp_point", s.fp), ("bp_point", s.bp), ("end_point", s.end)):
            if v is not None:
                out.append((s.step, "step", sec, m, "tick", float(v), str(v)))
    spans, _lone = comm_spans(steps, points)
    for step, stream, name, start, end, _t0, _t1 in spans:
        out.append((step, name, sec, "start_point", "tick", float(start), str(start)))
        out.append((step, name, sec, "end_point", "tick", float(end), str(end)))
        out.append((step, name, sec, "stream_id", None, float(stream), None))
    return out


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


def load_detail_csv(path: Path, ctx: ImportContext, device: int = 0, *, as_events: bool = True) -> int:
    """``step_trace_raw_N_detail_time.csv`` (MindSpore's step trace parser's output:
    ``step_num, start_point, end_point, total, fp_point, bp_point, iteration_interval,
    fp_and_bp, tail`` and per-stream communication columns, in ticks; rows whose step is
    not a positive number are averages) -> one ``step`` span per step on the NPU, the
    breakdown in ``args`` as :func:`load_file` writes it. Returns how many steps.
    ``as_events`` False: no span is written (the steps cannot be put on the clock of the
    import's other spans; the file's rows are kernel_metrics already), only counted."""
    from ..ascend.tables import read_csv

    header, rows, _bad = read_csv(path)  # the caller warns about malformed rows
    idx = {h: i for i, h in enumerate(header)}
    need = ("step_num", "start_point", "end_point", "fp_point", "bp_point")
    if not all(k in idx for k in need):
        raise ImportFormatError(f"{path}: no step_num / start_point / end_point / fp_point / bp_point columns")
    steps: list[tuple[int, int, int, int, int, list[str]]] = []
    for r in rows:
        vals = [r[idx[k]] for k in need]
        if not all(v.isdigit() for v in vals) or int(vals[0]) <= 0 or int(vals[2]) <= int(vals[1]):
            continue
        step, start, end, fp, bp = (int(v) for v in vals)
        steps.append((step, start, end, fp, bp, r))
    if not steps or not as_events:
        return len(steps)
    origin = ctx.origin(min(s[1] for s in steps) * NS_PER_TICK)
    extra = [h for h in header if h not in idx or h.startswith("stream_")]
    args = []
    for _step, start, end, fp, bp, r in steps:
        a: dict[str, object] = {
            "start_point": start,
            "fp_point": fp,
            "bp_point": bp,
            "end_point": end,
            "iteration_interval_ns": (fp - start) * NS_PER_TICK,
            "fp_and_bp_ns": (bp - fp) * NS_PER_TICK,
            "tail_ns": (end - bp) * NS_PER_TICK,
            "unit": "tick (10 ns)",
        }
        for h in extra:
            if h.startswith("stream_") and r[idx[h]].lstrip("-").isdigit():
                a[h] = int(r[idx[h]])
        args.append(jsondoc.text(a))
    n = len(steps)
    append_npu_events(
        ctx,
        device,
        {
            "kind": "step",
            "cat": ["step_trace"] * n,
            "name": [f"step {s[0]}" for s in steps],
            "ts": [s[1] * NS_PER_TICK - origin for s in steps],
            "dur": [(s[2] - s[1]) * NS_PER_TICK for s in steps],
            "step": [s[0] for s in steps],
            "args": args,
        },
    )
    device_clock(ctx)
    return n
