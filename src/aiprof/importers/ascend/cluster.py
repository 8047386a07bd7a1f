"""msprof-analyze cluster outputs: ``cluster_step_trace_time.csv`` and
``cluster_communication.json`` (a folder holding them, or either file).

- cluster_step_trace_time.csv has no timestamps, only per-rank (and per-stage) totals
  in µs, so it becomes kernel_metrics: kernel ``step``, launch_id = step (null when
  the file leaves it blank), section ``cluster_step_trace_time`` with ``rank`` = the
  rank's Index; ``stage`` rows go to section ``cluster_step_trace_time/stage``, rank
  null, the stage's rank list in ``text``; metric = the column's header by the rule of
  :mod:`.tables` (``Communication(Not Overlapped)`` stays whole, unit ``us``).
- cluster_communication.json gives each communication op its start and elapsed time
  per rank, so each (op, rank) becomes a ``collective`` event on that rank (NPU,
  tid 0), ts from "Start Timestamp(us)" and dur from "Elapse Time(ms)"; the time and
  bandwidth breakdowns (per link type: HCCS, PCIE, RDMA, SDMA) are kept whole in
  ``args`` with the rank group and step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ImportFormatError
from .. import jsondoc
from ..base import Detection, ImportContext, Importer, no, yes
from ..timeconv import ms_to_ns, us_to_ns
from .tables import col, csv_header, integer, metric_rows, read_csv, split_unit

NAME = "ascend-cluster"
_GROUP_RE = re.compile(rb'^\s*\{\s*"\(\s*\d')


def file_kind(path: Path) -> str | None:
    header = csv_header(path)
    if header is not None:
        h = {split_unit(c)[0].lower() for c in header}
        return "cluster_step_trace_time" if {"step", "type", "index", "computing"} <= h else None
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    if _GROUP_RE.match(head) and b"Communication Time Info" in head:
        return "cluster_communication"
    return None


def _detect(path: Path) -> Detection:
    if path.is_dir():
        kinds = sorted({k for p in path.iterdir() if p.is_file() for k in [file_kind(p)] if k})
        return (
            yes(f"an msprof-analyze cluster folder ({', '.join(kinds)})")
            if kinds
            else no("no msprof-analyze cluster file in it")
        )
    k = file_kind(path)
    return yes(f"msprof-analyze {k}") if k else no("not an msprof-analyze cluster file")


def load_step_trace(path: Path, ctx: ImportContext) -> None:
    header, rows, bad = read_csv(path)
    if bad:
        ctx.warn(f"{path.name}: {bad} malformed or cut-short rows skipped")
    i_step, i_type, i_index = col(header, "Step"), col(header, "Type"), col(header, "Index")
    if i_type is None or i_index is None:
        raise ImportFormatError(f"{path}: no Type / Index columns")
    skip = {header[i] for i in (i_step, i_type, i_index) if i is not None}
    cols: dict[str, list[Any]] = {
        k: [] for k in ("rank", "launch_id", "kernel", "section", "metric", "unit", "value", "text")
    }
    for ri, m, u, v, _t in metric_rows(header, rows, skip, text_columns=False):
        r = rows[ri]
        kind = r[i_type].lower()
        step = integer(r[i_step]) if i_step is not None else None
        idx = integer(r[i_index])
        cols["rank"].append(idx if kind == "rank" else None)
        cols["launch_id"].append(step)
        cols["kernel"].append("step")
        cols["section"].append("cluster_step_trace_time" if kind == "rank" else f"cluster_step_trace_time/{kind}")
        cols["metric"].append(m)
        cols["unit"].append(u or "us")
        cols["value"].append(v)
        cols["text"].append(None if kind == "rank" else r[i_index])
    if cols["rank"]:
        ctx.writer.append("kernel_metrics", cols)
        ctx.tables["kernel_metrics"] += len(cols["rank"])
    meta = ctx.writer.meta
    for r in sorted({x for x in cols["rank"] if x is not None}):
        if r not in meta["ranks"]:
            meta["ranks"].append(r)


def load_communication(path: Path, ctx: ImportContext) -> None:
    doc = jsondoc.load(path)
    if not isinstance(doc, dict):
        raise ImportFormatError(f"{path}: expected a JSON object of rank groups")
    recs: list[tuple[int, str, Any, float | None, str]] = []  # rank, op, start µs, elapse ms, args
    skipped = 0
    for group, steps in doc.items():
        for step, ops in (steps or {}).items() if isinstance(steps, dict) else []:
            for op, per_rank in (ops or {}).items() if isinstance(ops, dict) else []:
                for rank, info in (per_rank or {}).items() if isinstance(per_rank, dict) else []:
                    t = info.get("Communication Time Info") if isinstance(info, dict) else None
                    if not isinstance(t, dict) or not str(rank).isdigit():
                        skipped += 1
                        continue
                    args = jsondoc.text({"group": group, "step": step, **info})
                    recs.append((int(rank), op, t.get("Start Timestamp(us)"), t.get("Elapse Time(ms)"), args))
    if skipped:
        ctx.warn(f"{path.name}: {skipped} entries without per-rank time info not imported")
    if not recs:
        return
    ts, ok = us_to_ns([r[2] for r in recs])
    if not ok.all():
        ctx.warn(f"{path.name}: {int((~ok).sum())} ops without a start timestamp kept at ts = origin")
    origin = ctx.origin(int(ts[ok].min()) if ok.any() else 0)
    dur = [ms_to_ns(r[3]) for r in recs]
    n = len(recs)
    ctx.writer.append(
        "events",
        {
            "rank": [r[0] for r in recs],
            "device_type": ["npu"] * n,
            "device": [0] * n,
            "pid": [0] * n,
            "tid": [0] * n,
            "kind": ["collective"] * n,
            "cat": ["hccl"] * n,
            "name": [r[1] for r in recs],
            "ts": np.where(ok, ts - origin, 0),
            "dur": dur,
            "args": [r[4] for r in recs],
        },
    )
    ctx.kinds["collective"] += n
    meta = ctx.writer.meta
    for r in sorted({x[0] for x in recs}):
        if r not in meta["ranks"]:
            meta["ranks"].append(r)
    if origin > 10**18 and meta.get("clock") in (None, "unknown"):
        meta["time_origin_ns"], meta["clock"] = origin, "unix"


def _load(path: Path, ctx: ImportContext) -> None:
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    known = [(p, file_kind(p)) for p in files]
    if not any(k for _, k in known):
        raise ImportFormatError(f"{path}: no msprof-analyze cluster file")
    others = [p.name for p, k in known if k is None]
    if others:
        ctx.warn(f"{path.name}: not imported (formats not read): {', '.join(others)}")
    # Communication first: its timestamps fix the time origin.
    for p, k in sorted(known, key=lambda pk: pk[1] != "cluster_communication"):
        if k == "cluster_communication":
            load_communication(p, ctx)
        elif k == "cluster_step_trace_time":
            load_step_trace(p, ctx)
        else:
            continue
        ctx.writer.add_source(NAME, p, file_kind=k)
    meta = ctx.writer.meta
    if meta["ranks"] and meta.get("world_size") is None:
        meta["world_size"] = len(meta["ranks"])


IMPORTER = Importer(
    name=NAME,
    description="msprof-analyze cluster outputs (cluster_step_trace_time.csv, cluster_communication.json)",
    detect=_detect,
    load=_load,
    patterns=("cluster_analysis_output", "cluster_step_trace_time*.csv", "cluster_communication*.json"),
)
