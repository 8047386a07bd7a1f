"""MindSpore 1.x profiler output folder (the ``profiler/`` folder MindInsight reads).

Each file is recognised by its header or shape:

- ascend_timeline_display_N.json -> events: every span is an NPU op (``kernel``;
  ``MemSet`` / ``AtomicAddrClean`` -> ``memset``), tid = stream; spans whose args
  carry no op ``type`` (the AI CPU ops) get cat ``AI_CPU``, the others ``AI_CORE``;
- framework_raw_N.csv -> kernel_metrics section ``framework`` (kernel = full op name,
  launch_id = task id; op_info, type, subgraph as text);
- aicore_intermediate_N_detail.csv / _type.csv -> sections ``aicore_detail`` /
  ``aicore_type`` (ms);
- aicpu_intermediate_N.csv -> section ``aicpu`` (launch_id = serial number);
- step_trace_raw_N_detail_time.csv -> kernel ``step``, launch_id = step (0 = the
  average row), unit ``tick`` (the file does not say the tick rate);
- minddata_pipeline_raw_N.csv -> section ``minddata_pipeline`` (launch_id = op id);
- minddata_cpu_utilization_N.json -> section ``minddata_cpu_utilization/...``
  (launch_id = sample index);
- the text outputs, JSON summaries, cluster CSV and raw step trace beside them ->
  :mod:`.text` (HWTS and AI CPU text go to kernel_metrics when the timeline
  already holds their spans).

One time axis: the timeline counts µs from its own origin, the step trace, HWTS and AI
CPU files the device's counter. :mod:`.clock` finds the counter value of the timeline's
ts = 0 from the spans both sides hold, and the device-tick files are written on the
timeline's axis (profile.json ``time_origin_ns`` = that counter value in ns). Without
such spans the steps stay kernel_metrics rows only (no ``step`` span over kernels of
another clock) and a warning names the files; the device queue's host-clock times are
never tied, which a warning says too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from ...errors import ImportFormatError
from .. import jsondoc
from ..ascend.tables import col, csv_header, flatten, metric_rows, number, read_csv, split_unit
from ..ascend.trace import AscendTraceConverter, TraceScan, bound_converter, looks_like_ascend_trace
from ..base import Detection, ImportContext, Importer, no, write_metrics, yes
from ..kineto import Args, Ev, load_chrome_trace
from . import cluster as mindspore_cluster
from . import step_trace as mindspore_step_trace
from .clock import TimelineClock, timeline_clock
from .text import DUPLICATING, load_kind
from .text import file_kind as text_kind

NAME = "mindspore-legacy"

#: header signature -> (section, kernel column, launch id column)
CSV_KINDS: list[tuple[frozenset[str], str, str, str | None]] = [
    (frozenset({"task_id", "stream_id", "full_op_name", "op_type"}), "framework", "full_op_name", "task_id"),
    (frozenset({"full_op_name", "execution_time"}), "aicore_detail", "full_op_name", None),
    (frozenset({"op_type", "execution_time", "execution_frequency"}), "aicore_type", "op_type", None),
    (frozenset({"serial_number", "kernel_type", "run_start", "run_end"}), "aicpu", "kernel_type", "serial_number"),
    (frozenset({"step_num", "start_point", "end_point", "fp_and_bp"}), "step_trace_raw", "", "step_num"),
    (frozenset({"op_id", "op_type", "num_workers"}), "minddata_pipeline", "op_type", "op_id"),
]
_TIMELINE_RE = re.compile(rb'^\s*\[\s*\{[^{}]*"ph"\s*:\s*"X"')
#: A first event with a category: a Chrome trace written by another tool as a bare array
#: (torch.profiler's events, for one); MindSpore 1.x timeline events have none.
_CATEGORY_RE = re.compile(rb'^\s*\[\s*\{[^{}]*"cat"\s*:')


def csv_kind(header: list[str]) -> tuple[str, str, str | None] | None:
    h = {c.strip() for c in header}
    for sig, section, kcol, lcol in CSV_KINDS:
        if sig <= h and (section != "aicore_detail" or "op_type" not in h):
            return section, kcol, lcol
    return None


def file_kind(path: Path) -> str | None:
    header = csv_header(path)
    if header is not None:
        k = csv_kind(header)
        return k[0] if k else mindspore_cluster.file_kind(path)
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    k2 = mindspore_cluster.file_kind(path)
    if k2 is not None:
        return k2
    if path.suffix == ".json" or head.lstrip()[:1] in (b"[", b"{"):
        if _TIMELINE_RE.match(head) and not _CATEGORY_RE.match(head) and not looks_like_ascend_trace(head):
            return "timeline"
        if b'"sampling_interval"' in head and b'"device_info"' in head:
            return "minddata_cpu_utilization"
        t = head.strip()
        if t[:1] == b"{" and len(t) < 4096 and (b'"fp_start"' in t or b'"num_of_streams"' in t):
            return "summary"
    return None


def _detect(path: Path) -> Detection:
    if path.is_dir():
        kinds = {file_kind(p) for p in path.iterdir() if p.is_file()} - {None}
        cluster = kinds & mindspore_cluster.LOADERS.keys()
        if (
            "framework" in kinds
            or "aicore_detail" in kinds
            or ("timeline" in kinds and len(kinds) > 1)
            or (cluster and "step_trace_raw" in kinds)
        ):
            return yes(f"a MindSpore 1.x profiler folder ({', '.join(sorted(k for k in kinds if k))})")
        return no("no MindSpore 1.x framework / aicore intermediate / step trace and cluster files in it")
    k = file_kind(path)
    if k is None or k == "summary" or k in mindspore_cluster.LOADERS:
        return no("not a MindSpore 1.x profiler intermediate file")
    return yes(f"MindSpore 1.x {k}")


class MindSporeTimelineConverter(AscendTraceConverter):
    """MindSpore 1.x timeline: no metadata; every span is an op on the NPU."""

    importer_name = NAME
    flops: dict[str, int] | None = None
    """Full op name -> FLOPs per launch (flops_N.txt of the same rank)."""

    def refine(self, evs: list[Ev], kinds: list[str], args: list[Args]) -> dict[str, Any]:
        if self.scan.process_names:
            return super().refine(evs, kinds, args)
        for i, e in enumerate(evs):
            name = e.name if isinstance(e.name, str) else ""
            kinds[i] = "memset" if name.startswith(("MemSet", "AtomicAddrClean")) else "kernel"
        n = len(evs)
        out: dict[str, Any] = {
            "device_type": ["npu"] * n,
            "device": [self.device_index] * n,
            "cat": ["AI_CORE" if b'"type"' in bytes(e.args) else "AI_CPU" for e in evs],
        }
        if self.flops:
            out["flops"] = [self.flops.get(_fullname(e)) for e in evs]
        return out


def _fullname(e: Ev) -> str:
    raw = bytes(e.args)
    if b'"fullname"' not in raw:
        return ""
    try:
        a = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    return str(a.get("fullname", "")) if isinstance(a, dict) else ""


def _load_timeline(path: Path, ctx: ImportContext, flops: dict[str, int] | None = None) -> None:
    from ..ascend.trace import ASCEND_FLOW_COLUMNS, scan_trace

    scan: TraceScan = scan_trace(path, ASCEND_FLOW_COLUMNS, ctx)
    conv = load_chrome_trace(path, ctx, converter=bound_converter(MindSporeTimelineConverter, scan, flops=flops))
    if not sum(conv.counts_ph.values()):
        raise ImportFormatError(f"{path}: the timeline holds no events")
    if ctx.writer.meta.get("clock") == "trace":
        ctx.writer.meta["clock"] = "device"


_UNITS = {"execution_time": "ms", "total_time": "ms", "dispatch_time": "ms"}


def _load_csv(path: Path, ctx: ImportContext) -> None:
    header, rows, bad = read_csv(path)
    if bad:
        ctx.warn(f"{path.name}: {bad} malformed or cut-short rows skipped")
    kind = csv_kind(header)
    if kind is None:
        raise ImportFormatError(f"{path}: not a MindSpore 1.x intermediate CSV")
    section, kcol, lcol = kind
    ik = col(header, kcol) if kcol else None
    il = col(header, lcol) if lcol else None
    skip = {header[i] for i in (ik, il) if i is not None}
    out = []
    for ri, m, u, v, t in metric_rows(
        header,
        rows,
        skip,
        exact=frozenset({"run_start", "run_end", "start_point", "end_point", "fp_point", "bp_point"}),
    ):
        lid = number(rows[ri][il]) if il is not None else None
        unit = u or _UNITS.get(m) or ("tick" if section == "step_trace_raw" else None)
        if v is None and t is not None and t.lstrip("-").isdigit():
            v = float(int(t)) if abs(int(t)) < 2**53 else None
        out.append(
            (
                int(lid) if lid is not None and abs(lid) < 2**63 else None,
                rows[ri][ik] if ik is not None else "step",
                section,
                m,
                unit,
                v,
                t,
            )
        )
    write_metrics(ctx, out)


def _load_cpu_utilization(path: Path, ctx: ImportContext) -> None:
    doc = jsondoc.load(path)
    out: list[tuple[int | None, str, str, str, str | None, float | None, str | None]] = []
    for parts, v in flatten(doc):
        key = "/".join(parts)
        if not isinstance(v, list):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append((None, "minddata", "minddata_cpu_utilization", key, None, float(v), None))
            continue
        for i, x in enumerate(v):
            if isinstance(x, dict):
                for p2, v2 in flatten(x):
                    k2 = "/".join(p2)
                    for j, y in enumerate(v2 if isinstance(v2, list) else [v2]):
                        if isinstance(y, (int, float)) and not isinstance(y, bool):
                            out.append(
                                (
                                    j,
                                    f"{key}[{i}]",
                                    "minddata_cpu_utilization",
                                    k2,
                                    "%" if "utilization" in k2 else None,
                                    float(y),
                                    None,
                                )
                            )
            elif isinstance(x, (int, float)) and not isinstance(x, bool):
                metric, unit = split_unit(parts[-1])
                out.append(
                    (
                        i,
                        "minddata",
                        "/".join(["minddata_cpu_utilization", *parts[:-1]]),
                        metric,
                        "%" if "utilization" in metric else unit,
                        float(x),
                        None,
                    )
                )
    write_metrics(ctx, out)


def load_file(
    path: Path,
    kind: str,
    ctx: ImportContext,
    *,
    spans_elsewhere: bool = False,
    flops: dict[str, int] | None = None,
    steps_as_events: bool = True,
) -> dict[str, Any]:
    """Write the rows of one file and its source entry; returns the entry's extras.
    ``steps_as_events`` False: the file's steps are on a clock the import's other spans
    cannot be put on, so they are kept as kernel_metrics rows only."""
    extra: dict[str, Any] = {}
    if kind == "timeline":
        _load_timeline(path, ctx, flops)
        # The Chrome trace loader has recorded the file already: name its kind there.
        for src in reversed(ctx.writer.meta["sources"]):
            if src.get("path") == str(path.resolve()) and src.get("importer") == NAME:
                src["file_kind"] = kind
                return {}
    elif kind in mindspore_cluster.LOADERS:
        extra = mindspore_cluster.load_kind(path, kind, ctx)
    elif kind == "step_trace_raw":
        _load_csv(path, ctx)
        n = mindspore_step_trace.load_detail_csv(path, ctx, as_events=steps_as_events)
        extra = {"steps": n} if steps_as_events else {"steps": 0, "steps_not_aligned": n}
    elif kind == "training_trace" and not steps_as_events:
        n = mindspore_step_trace.load_file(path, ctx, as_events=False)
        extra = {"steps": 0, "steps_not_aligned": n}
    elif kind == "minddata_cpu_utilization":
        _load_cpu_utilization(path, ctx)
    elif kind == "summary":
        kind = text_kind(path) or kind
        if kind == "summary":
            ctx.writer.meta.setdefault("mindspore", {})[path.name] = jsondoc.load(path)
        else:
            extra = load_kind(path, kind, ctx)
    elif kind in _TEXT_KINDS:
        extra = load_kind(path, kind, ctx, as_events=not (spans_elsewhere and kind in DUPLICATING))
    else:
        _load_csv(path, ctx)
    ctx.writer.add_source(NAME, path, file_kind=kind, **extra)
    return extra


_TEXT_KINDS = frozenset(
    {
        "hwts",
        "op_compute_time",
        "aicpu_text",
        "device_queue",
        "pipeline_profiling",
        "timeline_summary",
        "step_trace_point_info",
        "cluster_analyse",
        "training_trace",
    }
)


def _load(path: Path, ctx: ImportContext) -> None:
    if not path.is_dir():
        kind = file_kind(path)
        if kind is None:
            raise ImportFormatError(f"{path}: not a MindSpore 1.x profiler file")
        load_file(path, kind, ctx)
        return
    files = [(p, file_kind(p) or text_kind(p)) for p in sorted(path.iterdir()) if p.is_file()]
    known = [(p, k) for p, k in files if k is not None]
    if not any(k not in _TEXT_KINDS for _, k in known):
        raise ImportFormatError(f"{path}: no MindSpore 1.x profiler file in it")
    left = [p.name for p, k in files if k is None]
    if left:
        ctx.warn(f"{path.name}: not imported (formats not read): {', '.join(left)}")
    # A folder of several ranks' files (MindSpore's cluster output): each file on the
    # rank its name ends with.
    ranks = {mindspore_cluster.rank_in_name(p) for p, _ in known} - {None}
    per_rank = len(ranks) > 1 and ctx.rank is None
    flops = {mindspore_cluster.rank_in_name(p): mindspore_cluster.flops_per_op(p) for p, k in known if k == "flops_txt"}
    timeline = any(k == "timeline" for _, k in known)
    clocks = _timeline_clocks(known, per_rank)
    unaligned: dict[int | None, list[tuple[Path, dict[str, Any]]]] = {}
    try:
        for p, k in sorted(known, key=lambda pk: pk[1] != "timeline"):
            r = mindspore_cluster.rank_in_name(p)
            if per_rank:
                ctx.rank = r
            key = r if per_rank else None
            if k not in DEVICE_TICK_KINDS or key not in clocks:
                load_file(p, k, ctx, spans_elsewhere=timeline, flops=flops.get(r))
                continue
            tl_clock = clocks[key]
            if tl_clock is None:
                extra = load_file(p, k, ctx, spans_elsewhere=timeline, steps_as_events=False)
                if extra.get("steps_not_aligned"):
                    unaligned.setdefault(key, []).append((p, extra))
                continue
            # The device ticks onto the timeline's axis: ts = tick x 10 - (origin + offset).
            base = ctx.origin_raw_ns
            ctx.origin_raw_ns = (base or 0) + tl_clock.offset_ns
            try:
                load_file(p, k, ctx, spans_elsewhere=timeline, flops=flops.get(r))
            finally:
                ctx.origin_raw_ns = base
    finally:
        if per_rank:
            ctx.rank = None
    _clock_notes(path, known, per_rank, clocks, unaligned, ctx)
    if per_rank:
        meta = ctx.writer.meta
        meta["ranks"] = sorted(set(meta["ranks"]) | {r for r in ranks if r is not None})
        meta["world_size"] = max(meta.get("world_size") or 0, len(meta["ranks"]))


#: Kinds whose times count the device's system counter (ticks, or µs of it).
DEVICE_TICK_KINDS = frozenset({"step_trace_raw", "training_trace", "hwts", "aicpu_text"})


def _timeline_clocks(known: list[tuple[Path, str]], per_rank: bool) -> dict[int | None, TimelineClock | None]:
    """Per rank (None: the one rank of the folder) that has a timeline: where the
    timeline's ts = 0 lies on the device counter, or None when no file ties them."""
    out: dict[int | None, TimelineClock | None] = {}
    for p, k in known:
        if k != "timeline":
            continue
        r = mindspore_cluster.rank_in_name(p) if per_rank else None
        same = [(q, kq) for q, kq in known if not per_rank or mindspore_cluster.rank_in_name(q) in (r, None)]
        out[r] = timeline_clock(p, same)
    return out


def _clock_notes(
    path: Path,
    known: list[tuple[Path, str]],
    per_rank: bool,
    clocks: dict[int | None, TimelineClock | None],
    unaligned: dict[int | None, list[tuple[Path, dict[str, Any]]]],
    ctx: ImportContext,
) -> None:
    """Record the clock relation used, and warn once per rank about what stayed apart."""
    meta = ctx.writer.meta
    for r, c in clocks.items():
        tl = next(
            p.name for p, k in known if k == "timeline" and (not per_rank or mindspore_cluster.rank_in_name(p) == r)
        )
        if c is not None:
            meta.setdefault("mindspore", {}).setdefault("clock_alignment", {})[tl] = {
                "device_ns_at_ts_0": c.offset_ns + (ctx.origin_raw_ns or 0),
                "offset_ns": c.offset_ns,
                "pairs": c.pairs,
                "agree": c.agree,
                "via": list(c.via),
            }
            if not per_rank:
                meta["time_origin_ns"], meta["clock"] = (ctx.origin_raw_ns or 0) + c.offset_ns, "device"
        elif r in unaligned:
            files = ", ".join(p.name for p, _ in unaligned[r])
            n = sum(int(e.get("steps_not_aligned", 0)) for _, e in unaligned[r])
            ctx.warn(
                f"{path.name}: {tl} (µs from its own origin) and {files} (device ticks) are on two clocks "
                f"and no AI CPU or HWTS file of the folder ties them (offset unresolved): their {n} steps "
                "are kept in kernel_metrics only, not as step spans over the timeline's kernels"
            )
    queues = [p.name for p, k in known if k == "device_queue"]
    if clocks and queues:
        ctx.warn(
            f"{path.name}: {', '.join(queues)} times are ms of the host clock, which no file of the folder "
            "ties to the device clock of the other files (offset unresolved): its counters are not aligned "
            "with the kernels"
        )


IMPORTER = Importer(
    name=NAME,
    description="MindSpore 1.x profiler folder (framework_raw, aicore/aicpu intermediate, timeline, minddata)",
    detect=_detect,
    load=_load,
    patterns=(
        "profiler",
        "framework_raw_*.csv",
        "aicore_intermediate_*.csv",
        "aicpu_intermediate_*.csv",
        "step_trace_raw_*.csv",
        "minddata_*",
        "ascend_timeline_display_*.json",
    ),
)
