"""torch_npu / MindSpore ``ASCEND_PROFILER_OUTPUT`` folders and the summaries in them.

Takes the folder (or the ``*_ascend_pt`` / ``*_ascend_ms`` folder above it), or any one
of its files. Each file is recognised by its content, never by its name:

- trace_view.json -> events, tracks (see :mod:`.trace`);
- kernel_details.csv -> kernel_metrics, one row per kernel and column: launch_id = row
  number from 0, section ``task`` / ``aic`` / ``aiv``, text columns (shapes, data
  types, the exact start time) in ``text``; kernel events too when no trace_view.json
  is imported with it (their ``args`` carry the same launch_id);
- op_statistic.csv -> kernel_metrics, section ``op_statistic/<core type>``, launch_id null;
- step_trace_time.csv -> kernel_metrics, kernel ``step``, launch_id = step, section
  ``step_trace_time`` (µs);
- operator_memory.csv -> memory: +size at allocation, -size at release (bytes);
- memory_record.csv, npu_module_mem.csv -> counters ``memory.<component>.<column>`` (bytes);
- communication.json -> kernel_metrics, kernel = op, section
  ``communication/<step>/<group>[/<link type>]``;
- communication_matrix.json -> kernel_metrics, section
  ``communication_matrix/<step>/<group>``, text = ``src-dst``.

Summaries carry no timeline of their own, which is why they are metrics and not events.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...errors import ImportFormatError
from .. import jsondoc
from ..base import Detection, ImportContext, Importer, no, write_metrics, yes
from ..timeconv import us_to_ns
from .tables import SIZE_SCALE, col, csv_header, flatten, integer, metric_rows, number, read_csv, split_unit
from .trace import _detect as _detect_trace
from .trace import load_ascend_trace, npu_task_kind

NAME = "ascend-pt"
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


# -- what a file is ----------------------------------------------------------------------------


def csv_kind(header: list[str]) -> str | None:
    """Which torch_npu summary a CSV header belongs to."""
    h = {split_unit(c)[0].lower() for c in header}
    if {"name", "start time", "duration"} <= h and ("task id" in h or "accelerator core" in h or "task type" in h):
        return "kernel_details"
    if {"op type", "count", "total time"} <= h:
        return "op_statistic"
    if {"step", "computing", "free"} <= h and "type" not in h and "index" not in h:
        return "step_trace_time"
    if {"name", "size", "allocation time"} <= h:
        return "operator_memory"
    if "timestamp" in h and "component" in h and any(c.startswith("total reserved") for c in h):
        return "memory_record"
    return None


def json_kind(path: Path) -> str | None:
    """communication.json / communication_matrix.json by shape (object of steps of ops)."""
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    t = head.lstrip()
    if t[:1] != b"{":
        return None
    if b"Communication Time Info" in head or b"Communication Bandwidth Info" in head:
        # msprof-analyze's cluster file starts with a rank-group key like "(0, 1)".
        if re.match(rb'\{\s*"\(\d', t):
            return None
        return "communication"
    if b"Transit Size(MB)" in head and b"Transport Type" in head:
        return "communication_matrix"
    return None


def file_kind(path: Path) -> str | None:
    header = csv_header(path)
    if header is not None:
        return csv_kind(header)
    if _detect_trace(path):
        return "trace_view"
    return json_kind(path)


def _folder(path: Path) -> Path | None:
    """The ASCEND_PROFILER_OUTPUT folder for ``path`` (itself, or one below it)."""
    sub = path / OUTPUT_DIR
    if sub.is_dir():
        return sub
    if any(file_kind(p) for p in sorted(path.iterdir()) if p.is_file()):
        return path
    return None


def _detect(path: Path) -> Detection:
    if path.is_dir():
        found = _folder(path)
        if found is None:
            return no(f"a folder with no {OUTPUT_DIR} and no torch_npu summary or trace_view file")
        return yes(f"a torch_npu/MindSpore profiler output folder ({found.name})")
    k = file_kind(path)
    if k == "trace_view":
        return no("a single trace file: see ascend-trace")
    if k is None:
        return no("not a torch_npu summary CSV or communication JSON")
    return yes(f"torch_npu {k}")


# -- loaders -------------------------------------------------------------------------------------


def _rank(ctx: ImportContext) -> int:
    return ctx.default_rank


def _warn_bad(ctx: ImportContext, path: Path, bad: int) -> None:
    if bad:
        ctx.warn(f"{path.name}: {bad} malformed or cut-short rows skipped")


def load_kernel_details(path: Path, ctx: ImportContext, *, events: bool) -> None:
    """Kernel metrics (and, with ``events``, kernel events) from kernel_details.csv."""
    header, rows, bad = read_csv(path)
    _warn_bad(ctx, path, bad)
    i_name = col(header, "Name")
    if i_name is None:
        raise ImportFormatError(f"{path}: kernel_details without a Name column")
    out: list[tuple[int | None, str, str, str, str | None, float | None, str | None]] = []
    for ri, metric, unit, value, text in metric_rows(header, rows, {header[i_name]}, exact=frozenset({"Start Time"})):
        section = "aic" if metric.startswith("aic_") else "aiv" if metric.startswith("aiv_") else "task"
        out.append((ri, rows[ri][i_name], section, metric, unit, value, text))
    write_metrics(ctx, out)
    if events:
        _kernel_events(path, ctx, header, rows)
    else:
        _note_starts(ctx, header, rows)


def _note_starts(ctx: ImportContext, header: list[str], rows: list[list[str]]) -> None:
    """The kernels' start times, kept as metrics only, are this file's times all the same
    (the import checks that its inputs come from one run)."""
    i_start = col(header, "Start Time")
    if i_start is None:
        return
    ts, ok = us_to_ns([r[i_start] for r in rows])
    if ok.any():
        origin = ctx.origin(int(ts[ok].min()))
        ctx.writer.note_span(int(ts[ok].min()) - origin, int(ts[ok].max()) - origin)


def _kernel_events(path: Path, ctx: ImportContext, header: list[str], rows: list[list[str]]) -> None:
    i_name, i_start, i_dur = col(header, "Name"), col(header, "Start Time"), col(header, "Duration")
    i_stream, i_type, i_core = (
        col(header, "Stream ID"),
        col(header, "Type"),
        col(header, "Accelerator Core", "Task Type"),
    )
    if i_name is None or i_start is None or i_dur is None:
        ctx.warn(f"{path.name}: no Start Time/Duration columns; no kernel events made")
        return
    ts, ok = us_to_ns([r[i_start] for r in rows])
    dur, dok = us_to_ns([r[i_dur] for r in rows])
    keep = np.flatnonzero(ok)
    if len(keep) < len(rows):
        ctx.warn(f"{path.name}: {len(rows) - len(keep)} kernels without a start time left out of the timeline")
    if not len(keep):
        return
    origin = ctx.origin(int(ts[keep].min()))
    n = len(keep)
    sel = [rows[i] for i in keep]
    ctx.writer.append(
        "events",
        {
            "rank": [_rank(ctx)] * n,
            "device_type": ["npu"] * n,
            "device": [0] * n,
            "pid": [0] * n,
            "tid": [(integer(r[i_stream]) or 0) if i_stream is not None else 0 for r in sel],
            "kind": [npu_task_kind(r[i_name], r[i_core] if i_core is not None else None) for r in sel],
            "cat": [r[i_type] if i_type is not None else None for r in sel],
            "name": [r[i_name] for r in sel],
            "ts": ts[keep] - origin,
            "dur": np.where(dok, dur, 0)[keep],
            "args": [jsondoc.text({"launch_id": int(i), **dict(zip(header, rows[i], strict=True))}) for i in keep],
        },
    )
    for r in sel:
        ctx.kinds[npu_task_kind(r[i_name], r[i_core] if i_core is not None else None)] += 1
    meta = ctx.writer.meta
    if meta.get("clock") in (None, "unknown") and origin > 10**18:
        meta["time_origin_ns"], meta["clock"] = origin, "unix"


def load_op_statistic(path: Path, ctx: ImportContext) -> None:
    header, rows, bad = read_csv(path)
    _warn_bad(ctx, path, bad)
    i_op, i_core = col(header, "OP Type"), col(header, "Core Type")
    if i_op is None:
        raise ImportFormatError(f"{path}: op_statistic without an OP Type column")
    skip = {header[i_op]} | ({header[i_core]} if i_core is not None else set())
    out = [
        (None, rows[ri][i_op], "op_statistic" + (f"/{rows[ri][i_core]}" if i_core is not None else ""), m, u, v, t)
        for ri, m, u, v, t in metric_rows(header, rows, skip)
    ]
    write_metrics(ctx, out)


def load_step_trace_time(path: Path, ctx: ImportContext, section: str = "step_trace_time") -> None:
    header, rows, bad = read_csv(path)
    _warn_bad(ctx, path, bad)
    i_step = col(header, "Step")
    skip = {header[i_step]} if i_step is not None else set()
    out: list[tuple[int | None, str, str, str, str | None, float | None, str | None]] = []
    for ri, m, u, v, t in metric_rows(header, rows, skip, text_columns=False):
        s = number(rows[ri][i_step]) if i_step is not None else None
        out.append((int(s) if s is not None else None, "step", section, m, u or "us", v, t))
    write_metrics(ctx, out)


def load_operator_memory(path: Path, ctx: ImportContext) -> None:
    header, rows, bad = read_csv(path)
    _warn_bad(ctx, path, bad)
    i_name, i_size = col(header, "Name"), col(header, "Size")
    i_alloc, i_rel = col(header, "Allocation Time"), col(header, "Release Time")
    i_aa, i_ar = col(header, "Allocation Total Allocated"), col(header, "Allocation Total Reserved")
    i_ra, i_rr = col(header, "Release Total Allocated"), col(header, "Release Total Reserved")
    if i_size is None or i_alloc is None:
        raise ImportFormatError(f"{path}: operator_memory without Size / Allocation Time columns")

    def scale(i: int | None) -> int:
        return SIZE_SCALE.get((split_unit(header[i])[1] or "B").upper(), 1) if i is not None else 1

    recs: list[tuple[str, int, int, int | None, int | None]] = []  # name, ts µs-text ns, bytes, allocated, reserved
    lost = 0
    for r in rows:
        size = number(r[i_size])
        if size is None:
            lost += 1
            continue
        b = int(size * scale(i_size))
        name = r[i_name] if i_name is not None else ""
        for i_t, sign, ia, ir in ((i_alloc, 1, i_aa, i_ar), (i_rel, -1, i_ra, i_rr)):
            if i_t is None or number(r[i_t]) is None:
                continue
            t, _ = us_to_ns([r[i_t]])
            a = number(r[ia]) if ia is not None else None
            rv = number(r[ir]) if ir is not None else None
            recs.append(
                (
                    name,
                    int(t[0]),
                    sign * b,
                    int(a * scale(ia)) if a is not None else None,
                    int(rv * scale(ir)) if rv is not None else None,
                )
            )
    if lost:
        ctx.warn(f"{path.name}: {lost} rows without a size skipped")
    if not recs:
        return
    origin = ctx.origin(min(r[1] for r in recs))
    ctx.writer.append(
        "memory",
        {
            "rank": [_rank(ctx)] * len(recs),
            "device_type": ["npu"] * len(recs),
            "device": [0] * len(recs),
            "ts": [r[1] - origin for r in recs],
            "bytes": [r[2] for r in recs],
            "allocated": [r[3] for r in recs],
            "reserved": [r[4] for r in recs],
            "name": [r[0] for r in recs],
        },
    )
    ctx.tables["memory"] += len(recs)


def load_memory_record(path: Path, ctx: ImportContext) -> None:
    header, rows, bad = read_csv(path)
    _warn_bad(ctx, path, bad)
    i_ts, i_comp = col(header, "Timestamp"), col(header, "Component")
    if i_ts is None:
        raise ImportFormatError(f"{path}: memory record without a Timestamp column")
    ts, ok = us_to_ns([r[i_ts] for r in rows])
    vals = [(i, *split_unit(h)) for i, h in enumerate(header) if split_unit(h)[0].lower().startswith("total ")]
    out: list[tuple[int, str, float]] = []
    for ri, r in enumerate(rows):
        if not ok[ri]:
            continue
        comp = r[i_comp] if i_comp is not None else "npu"
        for i, name, unit in vals:
            v = number(r[i])
            if v is None:
                continue
            key = name.lower().replace(" ", "_")
            out.append((int(ts[ri]), f"memory.{comp}.{key}", v * SIZE_SCALE.get((unit or "B").upper(), 1)))
    if not out:
        return
    origin = ctx.origin(min(o[0] for o in out))
    ctx.writer.append(
        "counters",
        {
            "rank": [_rank(ctx)] * len(out),
            "device_type": ["npu"] * len(out),
            "device": [0] * len(out),
            "ts": [o[0] - origin for o in out],
            "metric": [o[1] for o in out],
            "value": [o[2] for o in out],
            "unit": ["B"] * len(out),
        },
    )
    ctx.tables["counters"] += len(out)


def load_communication(path: Path, ctx: ImportContext, kind: str) -> None:
    """communication.json / communication_matrix.json -> kernel_metrics (see module doc)."""
    doc = jsondoc.load(path)
    if not isinstance(doc, dict):
        raise ImportFormatError(f"{path}: expected a JSON object of steps")
    out: list[tuple[int | None, str, str, str, str | None, float | None, str | None]] = []
    for step, groups in doc.items():
        if not isinstance(groups, dict):
            continue
        for group, ops in groups.items():
            if not isinstance(ops, dict):
                continue
            for op, info in ops.items():
                for parts, v in flatten(info):
                    metric, unit = split_unit(parts[-1])
                    if kind == "communication_matrix":
                        section, text = f"communication_matrix/{step}/{group}", parts[0]
                        metric, unit = split_unit("/".join(parts[1:]) or parts[-1])
                    else:
                        section = "/".join(["communication", str(step), str(group), *parts[:-1]])
                        text = None
                    if isinstance(v, bool) or v is None:
                        continue
                    if isinstance(v, (int, float)):
                        out.append((None, op, section, metric, unit, float(v), text))
                    elif isinstance(v, list):
                        out.append(
                            (
                                None,
                                op,
                                section,
                                metric,
                                unit,
                                None,
                                jsondoc.text(v) if text is None else f"{text} {jsondoc.text(v)}",
                            )
                        )
                    else:
                        out.append((None, op, section, metric, unit, None, str(v) if text is None else f"{text} {v}"))
    write_metrics(ctx, out)


def load_file(path: Path, kind: str, ctx: ImportContext, *, with_trace: bool) -> None:
    """Import one torch_npu output file of a known ``kind``."""
    if kind == "trace_view":
        load_ascend_trace(path, ctx)
    elif kind == "kernel_details":
        load_kernel_details(path, ctx, events=not with_trace)
    elif kind == "op_statistic":
        load_op_statistic(path, ctx)
    elif kind == "step_trace_time":
        load_step_trace_time(path, ctx)
    elif kind == "operator_memory":
        load_operator_memory(path, ctx)
    elif kind == "memory_record":
        load_memory_record(path, ctx)
    elif kind in ("communication", "communication_matrix"):
        load_communication(path, ctx, kind)
    else:
        raise ImportFormatError(f"{path}: not a torch_npu output file")
    ctx.writer.add_source(NAME, path, file_kind=kind)


def _load(path: Path, ctx: ImportContext) -> None:
    if not path.is_dir():
        kind = file_kind(path)
        if kind is None:
            raise ImportFormatError(f"{path}: not a torch_npu summary CSV, trace_view or communication JSON")
        load_file(path, kind, ctx, with_trace=False)
        return
    folder = _folder(path)
    if folder is None:
        raise ImportFormatError(f"{path}: no {OUTPUT_DIR} folder and no torch_npu output file in it")
    files = [(p, file_kind(p)) for p in sorted(folder.iterdir()) if p.is_file()]
    known = [(p, k) for p, k in files if k is not None]
    if not known:
        raise ImportFormatError(f"{folder}: no torch_npu output file in it")
    skipped = [p.name for p, k in files if k is None]
    if skipped:
        ctx.warn(f"{folder.name}: not imported (format not known): {', '.join(skipped)}")
    with_trace = any(k == "trace_view" for _, k in known)
    # The trace first: it fixes the time origin the summaries are placed on.
    for p, k in sorted(known, key=lambda pk: pk[1] != "trace_view"):
        load_file(p, k, ctx, with_trace=with_trace)


IMPORTER = Importer(
    name=NAME,
    description="torch_npu / MindSpore ASCEND_PROFILER_OUTPUT folder and its CSV / JSON summaries",
    detect=_detect,
    load=_load,
    patterns=(
        OUTPUT_DIR,
        "*_ascend_pt",
        "*_ascend_ms",
        "kernel_details*.csv",
        "op_statistic*.csv",
        "step_trace_time*.csv",
        "operator_memory*.csv",
        "memory_record*.csv",
        "npu_module_mem*.csv",
        "communication*.json",
    ),
)
