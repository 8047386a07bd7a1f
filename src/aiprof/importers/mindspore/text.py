"""The text, JSON and small CSV files of a MindSpore 1.x profiler folder, one by one.

Each is recognised by its content (the file name is only a hint):

- ``output_format_data_hwts_N.txt`` (``45 HWTS data``: Start / End of task records,
  ``Cycle_counter`` ticks of the 100 MHz system counter, 10 ns each) -> events: one
  ``kernel`` span per start/end pair on the NPU, tid = stream, with the record fields in
  ``args``; when the same spans already come from a timeline (a folder import), section
  ``hwts`` of kernel_metrics instead, so no time is counted twice;
- ``output_op_compute_time_N.txt`` -> kernel_metrics section ``op_compute_time``
  (kernel = op name, ``compute_time`` ms, ``stream_id``);
- ``output_data_preprocess_aicpu_N.txt`` (both layouts: with and without the dashed
  rule) -> events, one AI CPU ``kernel`` span per op (run start / end are µs), or
  section ``aicpu_output`` of kernel_metrics when the ops already come from a timeline
  or the raw AI CPU file;
- ``device_queue_profiling_N.txt`` / ``dataset_iterator_profiling_N.txt`` (lines
  ``type sub_type batch value [end_time_ms]``: type 0 = times in ms, sub type 0 get,
  1 push, 2 total; type 1 = queue, sub type = capacity, value = size) -> counters
  ``device_queue_size`` (batches), ``device_queue_capacity``,
  ``device_queue_{get,push,total}_time`` (ms) at the record's end time; without that
  fifth column (older files) section ``device_queue`` of kernel_metrics, launch_id =
  batch;
- ``pipeline_profiling_N.json`` -> section ``minddata_pipeline_profiling``: kernel =
  ``OpType#op_id``, per-op settings with no launch_id and the output queue size and
  throughput per sample (launch_id = sample index; samples are ``sampling_interval`` ms
  apart from an unknown start, so no counters);
- ``ascend_timeline_summary_N.json`` -> section ``timeline_summary`` (``total_time``
  µs, stream / op counts), ``step_trace_point_info.json`` -> section
  ``step_trace_point_info`` (the fp start / bp end op names as text); both also kept
  in profile.json under ``mindspore``;
- ``ascend_cluster_analyse_MODE_STAGES_RANKS_RANK.csv`` -> section
  ``cluster_analyse`` (kernel ``step``, launch_id = row, unit ``tick``).

The raw step trace binary lives in :mod:`.step_trace`; a folder import (see
:mod:`.legacy`) reads all of these through :func:`file_kind` and
:func:`load_kind`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import ImportFormatError
from .. import jsondoc
from ..ascend.tables import csv_header, number, read_csv, split_unit
from ..base import (
    Detection,
    ImportContext,
    Importer,
    MetricRow,
    append_npu_events,
    device_clock,
    load_by_kind,
    no,
    write_metrics,
    yes,
)
from . import step_trace as mindspore_step_trace
from .aicpu import AicpuOp, write_events

NAME = "mindspore-text"
NS_PER_TICK = 10

Metric = MetricRow

_HWTS_TITLE = re.compile(r"^=+\s*(\d+\s+)?HWTS data\s*=+$")
_HWTS_HEADER = ["Type", "cnt", "Core_ID", "Block_ID", "Task_ID", "Cycle_counter", "Stream_ID"]
_HWTS_ROW = re.compile(r"^(\D+?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)$")
#: A numeric field longer than this is damage (64-bit values have 20 digits; int() refuses
#: past 4300).
_MAX_DIGITS = 40
_OPTIME_HEADER = ["op_name", "compute_time(ms)", "stream_id"]
_AICPU_HEADER = ["serial_number", "node_type_name", "total_time(ms)", "dispatch_time(ms)", "run_start", "run_end"]
_AICPU_TOTAL = "AI CPU Total Time(ms):"
_RULE = re.compile(r"^[-\s]+$")
_QUEUE_ROW = re.compile(r"^[01] \d+ \d+ -?\d+(\.\d+)?( \d+)?$")
_CLUSTER_NAME = re.compile(r"^ascend_cluster_analyse_(.+)_(\d+)_(\d+)_(\d+)\.csv$")

#: Kinds whose rows are events only when no other file of the import holds the same spans.
DUPLICATING = frozenset({"hwts", "aicpu_text"})


def _head(path: Path, n: int = 1 << 16) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _lines(head: bytes) -> list[str]:
    return [ln.strip() for ln in head.decode("utf-8", "replace").splitlines() if ln.strip()]


def _json_object(path: Path, head: bytes) -> dict[str, Any] | None:
    t = head.strip()
    if t[:1] != b"{" or len(t) >= 1 << 16:
        return None
    try:
        doc = jsondoc.load(path)
    except (ImportFormatError, OSError):
        return None
    return doc if isinstance(doc, dict) else None


def file_kind(path: Path) -> str | None:
    """Which of the files above ``path`` is, by content; None when none."""
    if not path.is_file():
        return None
    head = _head(path)
    if not head.strip():
        return None
    if b"\x00" in head:
        return "training_trace" if mindspore_step_trace.IMPORTER.detect(path) else None
    lines = _lines(head)
    if not lines:
        return None  # only characters that are blank as text (form feeds, separators)
    first = lines[0]
    if (_HWTS_TITLE.match(first) and len(lines) > 1 and lines[1].split() == _HWTS_HEADER) or first.split() == (
        _HWTS_HEADER
    ):
        return "hwts"
    for ln in lines[:3]:
        if ln.split() == _OPTIME_HEADER:
            return "op_compute_time"
    if first.split() == _AICPU_HEADER:
        return "aicpu_text"
    if first[:1] == "{":
        doc = _json_object(path, head)
        if doc is None:
            return None
        if isinstance(doc.get("op_info"), list) and "sampling_interval" in doc:
            return "pipeline_profiling"
        if {"total_time", "num_of_streams", "num_of_ops"} <= doc.keys():
            return "timeline_summary"
        if doc and doc.keys() <= {"fp_start", "bp_end"} and all(isinstance(v, str) for v in doc.values()):
            return "step_trace_point_info"
        return None
    header = csv_header(path)
    if header is not None and {"iteration_interval", "fp_and_bp", "tail"} <= set(header) and "step_num" not in header:
        return "cluster_analyse"
    # A complete last line is not needed: the head may cut one short.
    if len(lines) > 1 and not head.endswith(b"\n"):
        lines = lines[:-1]
    if lines and all(_QUEUE_ROW.match(" ".join(ln.split())) for ln in lines):
        return "device_queue"
    return None


# -- kernel_metrics helper ----------------------------------------------------------------------


# -- HWTS -----------------------------------------------------------------------------------------


def parse_hwts(text: str) -> tuple[list[dict[str, Any]], int]:
    """The HWTS records (type, cnt, core, block, task id, cycle, stream), and the count of
    lines that could not be read."""
    records: list[dict[str, Any]] = []
    bad = 0
    for ln in text.splitlines():
        s = ln.strip()
        if not s or _HWTS_TITLE.match(s) or s.split() == _HWTS_HEADER:
            continue
        m = _HWTS_ROW.match(s)
        if m is None or max(len(g) for g in m.groups()) > _MAX_DIGITS:
            bad += 1
            continue
        records.append(
            {
                "type": m.group(1).strip(),
                "cnt": int(m.group(2)),
                "core_id": int(m.group(3)),
                "block_id": int(m.group(4)),
                "task_id": m.group(5),
                "cycle": int(m.group(6)),
                "stream_id": int(m.group(7)),
            }
        )
    return records, bad


HwtsPair = tuple[dict[str, Any], dict[str, Any]]


def pair_hwts(records: list[dict[str, Any]]) -> tuple[list[HwtsPair], int]:
    """Start / End of task records paired per (stream, task), in start order; a record
    without its match stands alone (start is end). Returns the pairs and the count alone.
    (:func:`.hwts.pair_columns` pairs the binary log by the same rule.)"""
    open_: dict[tuple[int, str], dict[str, Any]] = {}
    pairs: list[HwtsPair] = []
    for r in records:
        key = (r["stream_id"], r["task_id"])
        if r["type"] == "Start of task":
            if key in open_:  # started again before it ended: the first start stays alone
                lone = open_[key]
                pairs.append((lone, lone))
            open_[key] = r
        elif r["type"] == "End of task" and key in open_:
            pairs.append((open_.pop(key), r))
        else:
            pairs.append((r, r))
    pairs += [(r, r) for r in open_.values()]
    pairs.sort(key=lambda p: (p[0]["cycle"], p[0]["cnt"]))
    return pairs, sum(1 for s, e in pairs if s is e)


def write_hwts_events(pairs: list[HwtsPair], ctx: ImportContext) -> None:
    """One ``kernel`` span per paired task on the NPU (tid = stream, name ``task KEY``), an
    ``instant`` per lone record, the record fields in ``args``."""
    origin = ctx.origin(pairs[0][0]["cycle"] * NS_PER_TICK)
    n = len(pairs)
    args = []
    for s, e in pairs:
        a: dict[str, Any] = {
            "task_id": s["task_id"],
            "stream_id": s["stream_id"],
            "core_id": s["core_id"],
            "block_id": s["block_id"],
            "start_cnt": s["cnt"],
            "end_cnt": e["cnt"],
            "start_cycle": s["cycle"],
            "end_cycle": e["cycle"],
        }
        if s is e:
            a |= {"record": s["type"], "unmatched": True}
        args.append(jsondoc.text(a))
    append_npu_events(
        ctx,
        0,
        {
            "tid": [s["stream_id"] for s, _ in pairs],
            "kind": ["kernel" if s is not e else "instant" for s, e in pairs],
            "cat": ["HWTS"] * n,
            "name": [f"task {s['task_id']}" for s, _ in pairs],
            "ts": [s["cycle"] * NS_PER_TICK - origin for s, _ in pairs],
            "dur": [(e["cycle"] - s["cycle"]) * NS_PER_TICK for s, e in pairs],
            "args": args,
        },
    )
    device_clock(ctx)


def _load_hwts(path: Path, ctx: ImportContext, as_events: bool) -> dict[str, Any]:
    records, bad = parse_hwts(path.read_text(encoding="utf-8", errors="replace"))
    if not records:
        raise ImportFormatError(f"{path}: no HWTS record could be read")
    if bad:
        ctx.warn(f"{path.name}: {bad} unreadable HWTS lines skipped")
    pairs, unpaired = pair_hwts(records)
    if unpaired:
        ctx.warn(f"{path.name}: {unpaired} HWTS records without a matching start or end of task kept as instants")
    if as_events:
        write_hwts_events(pairs, ctx)
    else:
        out: list[Metric] = []
        for i, (s, e) in enumerate(pairs):
            for m, u, v in (
                ("start_cycle", "tick", s["cycle"]),
                ("end_cycle", "tick", e["cycle"]),
                ("duration", "ns", (e["cycle"] - s["cycle"]) * NS_PER_TICK),
                ("stream_id", None, s["stream_id"]),
                ("matched", None, int(s is not e)),
                ("core_id", None, s["core_id"]),
                ("block_id", None, s["block_id"]),
            ):
                out.append((i, s["task_id"], "hwts", m, u, float(v), None))
        write_metrics(ctx, out)
    return {"records": len(records), "tasks": len(pairs) - unpaired, "unmatched": unpaired}


# -- op compute time --------------------------------------------------------------------------------


def _table_rows(text: str, header: list[str]) -> Iterator[str]:
    """The data lines of a text table after ``header`` (and its dashed rule, if any)."""
    seen = False
    for ln in text.splitlines():
        s = ln.strip()
        if not s:
            continue
        if not seen:
            seen = s.split() == header
            continue
        if _RULE.match(s):
            continue
        yield s


def _load_op_compute_time(path: Path, ctx: ImportContext) -> dict[str, Any]:
    out: list[Metric] = []
    bad = 0
    for s in _table_rows(path.read_text(encoding="utf-8", errors="replace"), _OPTIME_HEADER):
        parts = s.rsplit(None, 2)
        t = number(parts[1]) if len(parts) == 3 else None
        stream = number(parts[2]) if len(parts) == 3 else None
        if t is None or stream is None:
            bad += 1
            continue
        name = parts[0].strip()
        out.append((None, name, "op_compute_time", "compute_time", "ms", t, None))
        out.append((None, name, "op_compute_time", "stream_id", None, stream, None))
    if not out:
        raise ImportFormatError(f"{path}: no op compute time row could be read")
    if bad:
        ctx.warn(f"{path.name}: {bad} unreadable op compute time rows skipped")
    write_metrics(ctx, out)
    return {"ops": len(out) // 2}


# -- AI CPU text ----------------------------------------------------------------------------------


def parse_aicpu_text(text: str) -> tuple[list[AicpuOp], float | None, int]:
    """The ops of an ``output_data_preprocess_aicpu_N.txt``, its total (ms), unreadable rows."""
    ops: list[AicpuOp] = []
    total: float | None = None
    bad = 0
    for s in _table_rows(text, _AICPU_HEADER):
        if s.startswith(_AICPU_TOTAL):
            total = number(s[len(_AICPU_TOTAL) :])
            continue
        f = s.split()
        if len(f) != 6 or not all(f[i].isdigit() and len(f[i]) <= _MAX_DIGITS for i in (0, 4, 5)):
            bad += 1
            continue
        tot, disp = number(f[2]), number(f[3])
        if tot is None or disp is None:
            bad += 1
            continue
        ops.append(AicpuOp(int(f[0]), f[1], f[1], tot, disp, f[4], f[5]))
    return ops, total, bad


def _load_aicpu_text(path: Path, ctx: ImportContext, as_events: bool) -> dict[str, Any]:
    ops, total, bad = parse_aicpu_text(path.read_text(encoding="utf-8", errors="replace"))
    if not ops:
        raise ImportFormatError(f"{path}: no AI CPU op row could be read")
    if bad:
        ctx.warn(f"{path.name}: {bad} unreadable AI CPU rows skipped")
    if as_events:
        write_events(ops, ctx)
    else:
        out: list[Metric] = []
        for o in ops:
            out += [
                (o.serial, o.op_type, "aicpu_output", "total_time", "ms", o.total_ms, None),
                (o.serial, o.op_type, "aicpu_output", "dispatch_time", "ms", o.dispatch_ms, None),
                (o.serial, o.op_type, "aicpu_output", "run_start", "us", float(o.run_start), o.run_start),
                (o.serial, o.op_type, "aicpu_output", "run_end", "us", float(o.run_end), o.run_end),
            ]
        if total is not None:
            out.append((None, "AI CPU Total", "aicpu_output", "total_time", "ms", total, None))
        write_metrics(ctx, out)
    return {"ops": len(ops)}


# -- device queue ---------------------------------------------------------------------------------

_TIME_SUB = {0: "get_time", 1: "push_time", 2: "total_time"}


def _load_device_queue(path: Path, ctx: ImportContext) -> dict[str, Any]:
    rows: list[tuple[str, float, str, int, int | None]] = []  # metric, value, unit, batch, end ms
    bad = 0
    for ln in path.read_text(encoding="utf-8", errors="replace").splitlines():
        f = ln.split()
        if not f:
            continue
        if not _QUEUE_ROW.match(" ".join(f)):
            bad += 1
            continue
        try:
            typ, sub, batch, value = int(f[0]), int(f[1]), int(f[2]), float(f[3])
            end = int(f[4]) if len(f) == 5 else None
        except ValueError:  # a number past int()'s digit limit
            bad += 1
            continue
        if typ == 1:
            rows.append(("device_queue_size", value, "batches", batch, end))
            rows.append(("device_queue_capacity", float(sub), "batches", batch, end))
        else:
            rows.append((f"device_queue_{_TIME_SUB.get(sub, f'time_{sub}')}", value, "ms", batch, end))
    if not rows:
        raise ImportFormatError(f"{path}: no device queue record could be read")
    if bad:
        ctx.warn(f"{path.name}: {bad} unreadable device queue lines skipped")
    timed = [r for r in rows if r[4] is not None]
    if timed:
        origin = ctx.origin(min(r[4] or 0 for r in timed) * 1_000_000)
        rank = ctx.default_rank
        n = len(timed)
        ctx.writer.append(
            "counters",
            {
                "rank": [rank] * n,
                "device_type": ["cpu"] * n,
                "device": [-1] * n,
                "ts": [(r[4] or 0) * 1_000_000 - origin for r in timed],
                "metric": [r[0] for r in timed],
                "value": [r[1] for r in timed],
                "unit": [r[2] for r in timed],
            },
        )
        ctx.tables["counters"] += n
    untimed = [r for r in rows if r[4] is None]
    if untimed:
        write_metrics(ctx, [(r[3], "device_queue", "device_queue", r[0], r[2], r[1], None) for r in untimed])
    return {"records": len(rows)}


# -- JSON summaries ---------------------------------------------------------------------------------


def _load_pipeline(path: Path, ctx: ImportContext) -> dict[str, Any]:
    doc = jsondoc.load(path)
    if not isinstance(doc, dict):
        raise ImportFormatError(f"{path}: expected a JSON object")
    sec = "minddata_pipeline_profiling"
    interval = doc.get("sampling_interval")
    out: list[Metric] = []
    for op in jsondoc.as_list(doc.get("op_info")):
        if not isinstance(op, dict):
            continue
        kernel = f"{op.get('op_type')}#{op.get('op_id')}"
        for key in ("op_id", "num_workers"):
            if isinstance(op.get(key), (int, float)):
                out.append((None, kernel, sec, key, None, float(op[key]), None))
        if isinstance(interval, (int, float)):
            out.append((None, kernel, sec, "sampling_interval", "ms", float(interval), None))
        if op.get("children") is not None:
            out.append((None, kernel, sec, "children", None, None, jsondoc.text(op["children"])))
        queue = jsondoc.as_dict(jsondoc.as_dict(op.get("metrics")).get("output_queue"))
        if isinstance(queue.get("length"), (int, float)):
            out.append((None, kernel, sec, "output_queue_length", "batches", float(queue["length"]), None))
        for key, unit in (("size", "batches"), ("throughput", None)):
            for i, v in enumerate(jsondoc.as_list(queue.get(key))):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out.append((i, kernel, sec, f"output_queue_{key}", unit, float(v), None))
    if not out:
        raise ImportFormatError(f"{path}: no op in the pipeline profile")
    write_metrics(ctx, out)
    return {"ops": len(jsondoc.as_list(doc.get("op_info")))}


_SUMMARY_UNITS = {"total_time": "us"}


def _load_small_json(path: Path, kind: str, ctx: ImportContext) -> dict[str, Any]:
    doc = jsondoc.load(path)
    if not isinstance(doc, dict):
        raise ImportFormatError(f"{path}: expected a JSON object")
    ctx.writer.meta.setdefault("mindspore", {})[path.name] = doc
    out: list[Metric] = []
    kernel = "timeline" if kind == "timeline_summary" else "step"
    for k, v in doc.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append((None, kernel, kind, k, _SUMMARY_UNITS.get(k), float(v), None))
        elif v is not None:
            out.append((None, kernel, kind, k, None, None, v if isinstance(v, str) else jsondoc.text(v)))
    write_metrics(ctx, out)
    return {"keys": len(doc)}


def _load_cluster(path: Path, ctx: ImportContext) -> dict[str, Any]:
    header, rows, bad = read_csv(path)
    if bad:
        ctx.warn(f"{path.name}: {bad} malformed rows skipped")
    out: list[Metric] = []
    for ri, r in enumerate(rows):
        for h, cell in zip(header, r, strict=True):
            name, unit = split_unit(h)
            v = number(cell)
            out.append((ri, "step", "cluster_analyse", name, unit or "tick", v, None if v is not None else cell))
    if not out:
        raise ImportFormatError(f"{path}: no row in the cluster analyse CSV")
    m = _CLUSTER_NAME.match(path.name)
    if m:
        ctx.writer.meta.setdefault("mindspore", {})[path.name] = {
            "parallel_mode": m.group(1),
            "stage_num": int(m.group(2)),
            "rank_size": int(m.group(3)),
            "rank_id": int(m.group(4)),
        }
    write_metrics(ctx, out)
    return {"rows": len(rows)}


# -- entry points ---------------------------------------------------------------------------------


def load_kind(path: Path, kind: str, ctx: ImportContext, *, as_events: bool = True) -> dict[str, Any]:
    """Write the rows of one file of ``kind``; returns the source extras.

    ``as_events`` False: the spans of a duplicating kind are already imported from
    another file, so they go to kernel_metrics instead.
    """
    if kind == "hwts":
        return _load_hwts(path, ctx, as_events)
    if kind == "op_compute_time":
        return _load_op_compute_time(path, ctx)
    if kind == "aicpu_text":
        return _load_aicpu_text(path, ctx, as_events)
    if kind == "device_queue":
        return _load_device_queue(path, ctx)
    if kind == "pipeline_profiling":
        return _load_pipeline(path, ctx)
    if kind in ("timeline_summary", "step_trace_point_info"):
        return _load_small_json(path, kind, ctx)
    if kind == "cluster_analyse":
        return _load_cluster(path, ctx)
    if kind == "training_trace":
        return {"steps": mindspore_step_trace.load_file(path, ctx)}
    raise ImportFormatError(f"{path}: not a MindSpore 1.x profiler text file")


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder")
    kind = file_kind(path)
    if kind is None or kind == "training_trace":
        return no("not a MindSpore 1.x profiler text, JSON summary or cluster CSV file")
    return yes(f"MindSpore 1.x {kind}")


IMPORTER = Importer(
    name=NAME,
    description="MindSpore 1.x profiler text outputs (HWTS, op compute time, AI CPU, device queue, summaries)",
    detect=_detect,
    load=load_by_kind(
        NAME,
        file_kind,
        load_kind,
        "not a MindSpore 1.x profiler text, JSON summary or cluster CSV file",
        refused=("training_trace",),
    ),
    patterns=(
        "output_format_data_hwts_*.txt",
        "output_op_compute_time_*.txt",
        "output_data_preprocess_aicpu_*.txt",
        "device_queue_profiling_*.txt",
        "dataset_iterator_profiling_*.txt",
        "pipeline_profiling_*.json",
        "ascend_timeline_summary_*.json",
        "step_trace_point_info*.json",
        "ascend_cluster_analyse_*.csv",
    ),
)
