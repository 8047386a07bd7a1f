"""A raw MindSpore 1.x Ascend profiling job folder (``JOB*``): the files MindSpore's
profiler parsers read, joined into one profile.

Files (in the folder or its ``data/`` subfolder; slices ``.slice_K`` in order):

- ``hwts.log.data.45.dev.profiler_default_tag.N.slice_K`` (:mod:`.hwts`):
  NPU task spans, named by operator through the framework files;
- ``Framework.host.[vm.]{task_desc_info,graph_desc_info,point}.N.slice_K``
  (:mod:`.framework`): op name, type, formats, shapes per task; the step
  trace's point ids;
- ``training_trace.46.dev.profiler_default_tag.N.slice_K`` (:mod:`.step_trace`):
  the steps, their fp / bp points named by op, and the communication between points;
- ``DATA_PREPROCESS.[dev.]AICPU.N.slice_K`` (:mod:`.aicpu`): AI CPU ops;
- ``host_start.log.N``: the clock. ``N`` is the device id. Its ``clock_realtime``
  (Unix ns) and ``clock_monotonic_raw`` are read; when it also gives ``cntvct`` (the
  system counter at the same moment, newer CANN versions) the device ticks are put
  on Unix time (``realtime + (tick - cntvct) x 10 ns``); without it the profile keeps
  the device clock and the host times are kept in profile.json under ``mindspore``.

Not imported, and said so: ``DATA_PREPROCESS.dev.TDT.*`` (data transfer enqueue
records, which MindSpore's profiler does not read either: their stamps name no clock),
empty files, ``.done`` markers, and any other file.

``host_start.log`` or a TDT file alone is refused with the reason and the files that
are needed.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from ...errors import ImportFormatError
from ..base import Detection, ImportContext, Importer, no, write_metrics, yes
from . import aicpu as mindspore_aicpu
from . import framework as mindspore_framework
from . import hwts as mindspore_hwts
from . import step_trace as mindspore_step_trace

NAME = "mindspore-job"
NS_PER_TICK = 10
_START_LOG = re.compile(r"^host_start\.log(\.(\d+))?$")
_DEVICE_IN_NAME = re.compile(r"\.(\d+)\.slice_\d+$")
_TDT_HEAD = re.compile(rb"^\[\d+\] Enqueue data to ")
#: The files that make a folder a raw job (a step trace and AI CPU file alone are read
#: by mindspore-aicpu's folder import, beside MindSpore's text outputs).
_JOB_KINDS = frozenset({"hwts", "task_desc_info", "graph_desc_info"})


def _head(path: Path, n: int = 4096) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


def is_start_log(path: Path) -> bool:
    head = _head(path)
    return bool(_START_LOG.match(path.name) or head.lstrip().startswith((b"[Device", b"[Host"))) and (
        b"clock_realtime" in head or b"clock_monotonic_raw" in head
    )


def is_tdt(path: Path) -> bool:
    return bool(_TDT_HEAD.match(_head(path)))


def file_kind(path: Path) -> str | None:
    """What a job file is: hwts, framework kinds, training_trace, aicpu, start_log, tdt."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    if is_start_log(path):
        return "start_log"
    if is_tdt(path):
        return "tdt"
    fk = mindspore_framework.file_kind(path)
    if fk:
        return fk
    if mindspore_aicpu.IMPORTER.detect(path):
        return "aicpu"
    if mindspore_step_trace.IMPORTER.detect(path):
        return "training_trace"
    if mindspore_hwts.IMPORTER.detect(path):
        return "hwts"
    return None


def _files(folder: Path) -> list[Path]:
    out = [p for p in sorted(folder.iterdir()) if p.is_file()]
    sub = folder / "data"
    if sub.is_dir():
        out += [p for p in sorted(sub.iterdir()) if p.is_file()]
    return out


def _job_kinds(folder: Path) -> dict[Path, str | None]:
    return {p: file_kind(p) for p in _files(folder)}


def _detect(path: Path) -> Detection:
    if not path.is_dir():
        if is_start_log(path):
            return yes("a MindSpore job's host_start.log (its clock only)")
        if is_tdt(path):
            return yes("a MindSpore job's data transfer (TDT) log")
        return no("not a MindSpore profiling job folder")
    d = _detect_job(path)
    if d:
        return d
    jobs = _sub_jobs(path)
    return yes(f"a folder of {len(jobs)} MindSpore profiling job folders") if jobs else d


def _detect_job(path: Path) -> Detection:
    names = [p.name for p in _files(path)]
    hint = any(n.startswith(("hwts.log", "Framework.", "training_trace", "host_start.log")) for n in names)
    if not hint:
        return no("no hwts.log / Framework.* / training_trace / host_start.log file in it or in data/")
    kinds = {k for k in _job_kinds(path).values() if k}
    if not kinds & _JOB_KINDS:
        return no("no readable HWTS or framework file in it")
    return yes(f"a MindSpore profiling job folder ({', '.join(sorted(kinds))})")


def _sub_jobs(path: Path) -> list[Path]:
    """The job folders (one per device) a folder holds."""
    return [p for p in sorted(path.iterdir()) if p.is_dir() and p.name != "data" and _detect_job(p)]


def read_start_log(path: Path) -> dict[str, int]:
    """``clock_realtime``, ``clock_monotonic_raw``, ``cntvct`` (those present) of a start log."""
    out: dict[str, int] = {}
    for ln in path.read_text(encoding="utf-8", errors="replace").splitlines():
        k, sep, v = ln.replace("=", ":").partition(":")
        if sep and v.strip().isdigit():
            out.setdefault(k.strip(), int(v.strip()))
    return out


def _device_id(paths: list[Path]) -> int | None:
    """The device id the file names give (``host_start.log.N``, ``...N.slice_K``)."""
    for p in paths:
        m = _START_LOG.match(p.name)
        if m and m.group(2):
            return int(m.group(2))
        m = _DEVICE_IN_NAME.search(p.name)
        if m:
            return int(m.group(1))
    return None


def _load(path: Path, ctx: ImportContext) -> None:
    if not path.is_dir():
        what = "its clock (host_start.log)" if is_start_log(path) else "data transfer enqueue records (TDT)"
        raise ImportFormatError(
            f"{path}: holds only a MindSpore job's {what}; import the job folder that holds it "
            "with its hwts.log.data.*, Framework.host.* and training_trace.* files"
        )
    jobs = [path] if _detect_job(path) else _sub_jobs(path)
    if not jobs:
        raise ImportFormatError(f"{path}: no readable HWTS or framework file in it")
    given = ctx.rank
    clock: dict[str, int] = {}
    try:
        for j in jobs:
            _load_job(j, ctx, several=len(jobs) > 1, given=given, clock=clock)
    finally:
        ctx.rank = given
    meta = ctx.writer.meta
    if "offset" in clock and ctx.origin_raw_ns is not None:
        meta["time_origin_ns"], meta["clock"] = ctx.origin_raw_ns + clock["offset"], "unix"
    else:
        meta["clock"] = "device"
        if len(jobs) > 1:
            ctx.warn(
                f"{path.name}: no start log gives cntvct: the {len(jobs)} devices' counters are not aligned "
                "with each other (each keeps its own ticks)"
            )


def _load_job(path: Path, ctx: ImportContext, *, several: bool, given: int | None, clock: dict[str, int]) -> None:
    """One device's job folder; ``clock`` holds the Unix offset of the device that fixed the
    time origin, onto which the others are shifted."""
    kinds = _job_kinds(path)
    by: dict[str, list[Path]] = {}
    for p, k in kinds.items():
        if k:
            by.setdefault(k, []).append(p)
    if not by.keys() & _JOB_KINDS:
        raise ImportFormatError(f"{path}: no readable HWTS or framework file in it")
    meta = ctx.writer.meta
    device = _device_id([p for p, k in kinds.items() if k]) or 0
    rank = device if several else given if given is not None else 0
    ctx.rank = rank
    _not_imported(path, kinds, by, ctx)
    offset = _offset(by.get("start_log", []), ctx)
    base = ctx.origin_raw_ns
    if base is not None and offset is not None and "offset" in clock:
        ctx.origin_raw_ns = base + clock["offset"] - offset

    fw_files = [(p, k) for k in ("task_desc_info", "graph_desc_info", "point") for p in by.get(k, [])]
    fw = mindspore_framework.load_framework(fw_files, ctx)
    for p, k in fw_files:
        ctx.writer.add_source(mindspore_framework.NAME, p, file_kind=k)
    # The HWTS log first: its first task start fixes the time origin.
    hwts = sorted(by.get("hwts", []), key=mindspore_framework.slice_order)
    traces = sorted(by.get("training_trace", []), key=mindspore_framework.slice_order)
    if hwts:
        cols, bad = mindspore_hwts.decode_hwts(mindspore_hwts.read_slices(hwts))
        if bad:
            ctx.warn(f"{hwts[0].name}: {bad} unreadable HWTS records skipped")
        ranges = _point_ranges(traces, fw.points)
        extra = mindspore_hwts.write_columns(cols, ctx, hwts[0].name, ops=fw.by_key, device=device, ranges=ranges)
        _warn_unnamed(hwts[0].name, extra, fw, ranges, bool(traces), ctx)
        for p in hwts:
            ctx.writer.add_source(mindspore_hwts.NAME, p, **(extra if p is hwts[0] else {}))
    for p in traces:
        steps = mindspore_step_trace.load_file(p, ctx, points=fw.points, device=device)
        ctx.writer.add_source(mindspore_step_trace.NAME, p, steps=steps)
    for p in by.get("aicpu", []):
        mindspore_aicpu.load_file(p, ctx, device)
    # Ops the HWTS log never ran keep their description (and the point names) as metrics.
    write_metrics(ctx, mindspore_framework.metric_rows(fw))
    if base is not None:
        ctx.origin_raw_ns = base
    elif offset is not None and ctx.origin_raw_ns is not None:
        clock["offset"] = offset
    meta["devices"].append(
        {"rank": rank, "type": "npu", "index": device, "name": "Ascend", "vendor": "Huawei", "memory_bytes": None}
    )
    if rank not in meta["ranks"]:
        meta["ranks"].append(rank)


def _point_ranges(traces: list[Path], points: dict[int, str]) -> list[mindspore_step_trace.PointRange]:
    """The step trace's point pairs as task id ranges (see :mod:`.hwts`); none when a file
    cannot be parsed (its own import says why)."""
    out: list[mindspore_step_trace.PointRange] = []
    for p in traces:
        try:
            steps, _lost = mindspore_step_trace.parse_step_trace(p.read_bytes())
        except (OSError, struct.error):
            continue
        out += [r for r in mindspore_step_trace.point_ranges(steps, points) if r not in out]
    return out


def _warn_unnamed(
    label: str,
    extra: dict[str, Any],
    fw: mindspore_framework.Framework,
    ranges: list[mindspore_step_trace.PointRange],
    has_trace: bool,
    ctx: ImportContext,
) -> None:
    """One line: how many HWTS tasks no file names by operator, why, and how many took
    the name of the step trace points around them."""
    total = extra["tasks"] + extra["unmatched"]
    comm = extra.get("between_comm_points", 0)
    other = extra.get("between_other_points", 0)
    rest = total - extra["named"] - comm - other
    if not fw.by_key:
        src = "no Framework.host.*.task_desc_info file"
    else:
        streams = sorted({o.stream_id for o in fw.by_key.values() if o.stream_id is not None})
        src = (
            f"task_desc_info names {len(fw.by_key)} tasks, one per kernel op (streams {_span(streams)}), "
            "not the tasks HCCL or the runtime issue"
        )
    if not rest and not comm and not other:
        return
    line = f"{label}: {total - extra['named']} of {total} HWTS tasks have no operator in the task files ({src})"
    if comm or other:
        unnamed = sorted({r.start_tag for r in ranges if r.comm and r.fullname is None})
        line += f"; {comm + other} lie between step trace points and take their name"
        line += f" ({comm} as communication"
        if unnamed:
            line += f", those of points {', '.join(f'{t}-{t + 1}' for t in unnamed)} unnamed by the point file, as MindInsight reads them"
        line += ")"
    if rest:
        line += f"; {rest} are kernels named 'unnamed task KEY'"
        if not has_trace:
            line += " (no training_trace file to place them between its points)"
    ctx.warn(line)


def _span(ids: list[int]) -> str:
    return f"{ids[0]}-{ids[-1]}" if len(ids) > 2 else ", ".join(map(str, ids))


def _not_imported(path: Path, kinds: dict[Path, str | None], by: dict[str, list[Path]], ctx: ImportContext) -> None:
    empty = [p.name for p, k in kinds.items() if k is None and p.stat().st_size == 0]
    done = [p.name for p, k in kinds.items() if k is None and p.name.endswith(".done") and p.name not in empty]
    other = [p.name for p, k in kinds.items() if k is None and p.name not in empty and p.name not in done]
    if empty:
        ctx.warn(f"{path.name}: empty, nothing to import: {', '.join(empty)}")
    if other:
        ctx.warn(f"{path.name}: not imported (formats not read): {', '.join(other)}")
    for p in by.get("tdt", []):
        ctx.warn(
            f"{p.name}: data transfer enqueue records not imported (MindSpore's profiler does not read them "
            "either; their stamps name no clock)"
        )


def _offset(logs: list[Path], ctx: ImportContext) -> int | None:
    """Unix ns minus counter ns from the start log (``clock_realtime`` with ``cntvct``);
    None when it gives no cntvct (the device clock is kept, and the profile says so)."""
    if not logs:
        ctx.warn("no host_start.log: the profile keeps the device clock (10 ns ticks)")
        return None
    info: dict[str, Any] = read_start_log(logs[0])
    ctx.writer.meta.setdefault("mindspore", {})[logs[0].name] = info
    ctx.writer.add_source(NAME, logs[0], file_kind="start_log")
    real, cnt = info.get("clock_realtime"), info.get("cntvct")
    if real is not None and cnt is not None:
        return int(real) - int(cnt) * NS_PER_TICK
    ctx.writer.meta.setdefault("import_notes", []).append(
        f"{logs[0].name} gives no cntvct (system counter at clock_realtime): device ticks are not put on Unix time"
    )
    return None


IMPORTER = Importer(
    name=NAME,
    description="MindSpore 1.x raw Ascend profiling JOB folder (hwts.log, Framework.host.*, training_trace, AI CPU)",
    detect=_detect,
    load=_load,
    patterns=("JOB*", "host_start.log*", "DATA_PREPROCESS.*TDT*"),
)
