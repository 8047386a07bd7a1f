"""MindSpore's per-rank cluster outputs (the files MindInsight's cluster pages read), one
by one; a profiler folder holding them for several ranks is one multi-rank job (see
:mod:`.legacy`, which reads each file of such a folder on the rank its name
gives).

Layouts (as MindSpore writes them; ``N`` is the rank id):

- ``hccl_raw_N.csv``: ``step_num, communication_cost, wait_cost, link_info,
  communication_operator_cost``, one row per step and a last row of averages (step
  ``-``). Costs in ms; ``link_info`` is JSON ``{"SRC-DST": {"RDMA"|"SDMA": [time ms,
  size KB, bandwidth KB/s(, wait ms)]}}``; ``communication_operator_cost`` JSON
  ``{OP: [step, cost ms, wait ms, link_info]}``. -> kernel_metrics on rank N: section
  ``hccl_raw`` (kernel ``step``, launch_id = step, null for the averages),
  ``hccl_raw/link`` (kernel ``SRC-DST LINK``: time, size, bandwidth, wait) and
  ``hccl_raw/operator`` (kernel = the op: cost, wait);
- ``ascend_cluster_analyse_MODE_STAGES_RANKS_N.csv`` with ``computation_time,
  communication_alone_time[, stage_time, receive_alone_time,
  collective_communication_alone_time]`` (ms; a row per step, the last one the
  averages, as MindInsight reads it) -> section ``cluster_analyse`` on rank N;
  the parallel mode, stage count, rank size and the rank's pipeline stage
  (``N // (RANKS / STAGES)``, MindInsight's rule, counted from 0) -> section
  ``parallel`` (kernel ``rank``: metrics ``stage``, ``stage_num``, ``rank_size``,
  text = the mode). The older layout (``iteration_interval, fp_and_bp, tail`` in
  ticks) is :mod:`.text`'s;
- ``flops_summary_N.json`` (``FLOPs`` MFLOPs per step, ``FLOPS`` GFLOP/s,
  ``FLOPS_Utilization`` %) -> section ``flops_summary`` on rank N;
- ``flops_N.txt`` (``full_kernel_name, MFLOPs(10^6 cube), GFLOPS(10^9 cube), FLOPS
  utilization(cube), MFLOPs(10^6 vector), GFLOPS(10^9 vector), FLOPS
  utilization(vec)``) -> section ``flops`` on rank N (kernel = the full op name); in
  a folder import the kernels of that rank whose full name it lists get ``flops``
  (cube + vector, per launch);
- ``dynamic_shape_info_N.json`` (per step, each op's type, duration µs and input
  shapes; each kernel's launch) -> section ``dynamic_shape`` (kernel = the op name,
  launch_id = step: ``dur`` µs, text = the shapes) and ``dynamic_shape/kernel``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from ...errors import ImportFormatError
from .. import jsondoc
from ..ascend.tables import csv_header, number, read_csv, split_unit
from ..base import Detection, ImportContext, Importer, MetricRow, load_by_kind, no, write_metrics, yes

NAME = "mindspore-cluster"
_RANK_IN_NAME = re.compile(r"_(\d+)(?:_detail_time|_detail|_type)?\.(?:csv|json|txt)$")
_CLUSTER_NAME = re.compile(r"^ascend_cluster_analyse_(.+)_(\d+)_(\d+)_(\d+)\.csv$")
HCCL_HEADER = ["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"]
CLUSTER_COLUMNS = frozenset({"computation_time", "communication_alone_time"})
FLOPS_SUMMARY_KEYS = frozenset({"FLOPs", "FLOPS", "FLOPS_Utilization"})
_LINK_FIELDS = (("time", "ms"), ("size", "KB"), ("bandwidth", "KB/s"), ("wait", "ms"))
#: Units of the flops_summary keys (MindSpore's flops parser).
_FLOPS_UNITS = {"FLOPs": "MFLOP", "FLOPS": "GFLOP/s", "FLOPS_Utilization": "%"}


def rank_in_name(path: Path) -> int | None:
    """The rank id a MindSpore output's name ends with (``hccl_raw_3.csv`` -> 3)."""
    m = _CLUSTER_NAME.match(path.name)
    if m:
        return int(m.group(4))
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _head(path: Path, n: int = 1 << 16) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


def file_kind(path: Path) -> str | None:
    if not path.is_file():
        return None
    header = csv_header(path)
    if header is not None:
        h = [c.strip() for c in header]
        if h == HCCL_HEADER:
            return "hccl_raw"
        if CLUSTER_COLUMNS <= set(h):
            return "cluster_analyse_time"
        if h and h[0] == "full_kernel_name" and any(c.startswith("MFLOPs") for c in h):
            return "flops_txt"
        return None
    head = _head(path).strip()
    if head[:1] != b"{":
        return None
    if b'"FLOPS_Utilization"' in head and len(head) < 4096:
        return "flops_summary"
    if head.startswith(b"{") and b'"operator"' in head[:64] and b'"op_type"' in head:
        return "dynamic_shape_info"
    return None


def _rank(path: Path, ctx: ImportContext) -> int:
    if ctx.rank is not None:
        return ctx.rank
    r = rank_in_name(path)
    return r if r is not None else 0


def _append(ctx: ImportContext, rank: int, rows: list[MetricRow]) -> None:
    write_metrics(ctx, rows, rank)
    if rows and rank not in ctx.writer.meta["ranks"]:
        ctx.writer.meta["ranks"].append(rank)


def _json_file(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise ImportFormatError(f"{path}: not valid JSON ({e})") from None


def _json_cell(cell: str) -> Any:
    try:
        return orjson.loads(cell)
    except orjson.JSONDecodeError:
        return None


def _links(step: int | None, links: Any, section: str) -> list[MetricRow]:
    out: list[MetricRow] = []
    for pair, by_type in (links or {}).items() if isinstance(links, dict) else []:
        for link, vals in (by_type or {}).items() if isinstance(by_type, dict) else []:
            for (m, unit), v in zip(_LINK_FIELDS, vals if isinstance(vals, list) else [], strict=False):
                if isinstance(v, (int, float)):
                    out.append((step, f"{pair} {link}", section, m, unit, float(v), None))
    return out


def load_hccl(path: Path, ctx: ImportContext) -> dict[str, Any]:
    _, rows, bad = read_csv(path)
    if bad:
        ctx.warn(f"{path.name}: {bad} malformed rows skipped")
    out: list[MetricRow] = []
    steps = 0
    for r in rows:
        step = int(r[0]) if r[0].isdigit() else None
        steps += step is not None
        for m, cell in (("communication_cost", r[1]), ("wait_cost", r[2])):
            v = number(cell)
            if v is not None:
                out.append((step, "step", "hccl_raw", m, "ms", v, None))
        out += _links(step, _json_cell(r[3]), "hccl_raw/link")
        ops = _json_cell(r[4])
        for op, vals in ops.items() if isinstance(ops, dict) else []:
            if isinstance(vals, list) and len(vals) >= 3:
                for m, v in (("communication_cost", vals[1]), ("wait_cost", vals[2])):
                    if isinstance(v, (int, float)):
                        out.append((step, op, "hccl_raw/operator", m, "ms", float(v), None))
                if len(vals) > 3:
                    out += _links(step, vals[3], f"hccl_raw/operator/{op}")
    if not out:
        raise ImportFormatError(f"{path}: no communication row could be read")
    _append(ctx, _rank(path, ctx), out)
    return {"steps": steps}


def stage_of(rank: int, stage_num: int, rank_size: int) -> int:
    """MindInsight's pipeline stage of a rank (counted from 0)."""
    per = max(rank_size // max(stage_num, 1), 1)
    return rank // per


def load_cluster_time(path: Path, ctx: ImportContext) -> dict[str, Any]:
    header, rows, bad = read_csv(path)
    if bad:
        ctx.warn(f"{path.name}: {bad} malformed rows skipped")
    rank = _rank(path, ctx)
    out: list[MetricRow] = []
    for ri, r in enumerate(rows):
        # One row per step, the last one the averages (MindInsight reads it so).
        step = None if ri == len(rows) - 1 and len(rows) > 1 else ri + 1
        for h, cell in zip(header, r, strict=True):
            name = split_unit(h)[0].removesuffix("_time")
            v = number(cell)
            if v is not None:
                out.append((step, "step", "cluster_analyse", name, "ms", v, None))
    m = _CLUSTER_NAME.match(path.name)
    if m:
        mode, stages, size = m.group(1), int(m.group(2)), int(m.group(3))
        stage = stage_of(int(m.group(4)), stages, size)
        out += [
            (None, "rank", "parallel", "stage", None, float(stage), mode),
            (None, "rank", "parallel", "stage_num", None, float(stages), mode),
            (None, "rank", "parallel", "rank_size", None, float(size), mode),
        ]
        meta = ctx.writer.meta
        par = meta.setdefault("mindspore", {}).setdefault("parallel", {"mode": mode, "stage_num": stages})
        par["rank_size"] = size
        par.setdefault("stages", {})[str(rank)] = stage
        if meta.get("world_size") is None or meta["world_size"] < size:
            meta["world_size"] = size
    if not out:
        raise ImportFormatError(f"{path}: no row in the cluster analyse CSV")
    _append(ctx, rank, out)
    return {"rows": len(rows)}


def load_flops_summary(path: Path, ctx: ImportContext) -> dict[str, Any]:
    doc = _json_file(path)
    out: list[MetricRow] = [
        (None, "step", "flops_summary", k, _FLOPS_UNITS.get(k), float(v), None)
        for k, v in (doc.items() if isinstance(doc, dict) else [])
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    if not out:
        raise ImportFormatError(f"{path}: no FLOPs figure in it")
    _append(ctx, _rank(path, ctx), out)
    return {"keys": len(out)}


def read_flops(path: Path) -> tuple[list[str], list[list[str]], int]:
    """flops_N.txt: its header and rows (``, ``-separated)."""
    lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    if not lines:
        raise ImportFormatError(f"{path}: empty file")
    header = [c.strip() for c in lines[0].split(",")]
    rows, bad = [], 0
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.rsplit(",", len(header) - 1)]
        if len(cells) != len(header):
            bad += 1
            continue
        rows.append(cells)
    return header, rows, bad


def flops_per_op(path: Path) -> dict[str, int]:
    """Full op name -> FLOPs of one launch (cube + vector MFLOPs), from flops_N.txt."""
    header, rows, _ = read_flops(path)
    cols = [i for i, h in enumerate(header) if h.startswith("MFLOPs")]
    out: dict[str, int] = {}
    for r in rows:
        vals = [number(r[i]) for i in cols]
        if any(v is not None for v in vals):
            out[r[0]] = round(sum(v for v in vals if v is not None) * 1e6)
    return out


def _flops_unit(header: str) -> str:
    return "MFLOP" if header.startswith("MFLOPs") else "GFLOP/s" if header.startswith("GFLOPS") else "%"


def load_flops_txt(path: Path, ctx: ImportContext) -> dict[str, Any]:
    header, rows, bad = read_flops(path)
    if bad:
        ctx.warn(f"{path.name}: {bad} malformed rows skipped")
    out: list[MetricRow] = []
    for r in rows:
        for h, cell in zip(header[1:], r[1:], strict=True):
            v = number(cell)
            if v is not None:
                out.append((None, r[0], "flops", h, _flops_unit(h), v, None))
    if not out:
        raise ImportFormatError(f"{path}: no operator FLOPs row could be read")
    _append(ctx, _rank(path, ctx), out)
    return {"ops": len(rows)}


def load_dynamic_shape(path: Path, ctx: ImportContext) -> dict[str, Any]:
    doc = _json_file(path)
    out: list[MetricRow] = []
    for sec, key in (("dynamic_shape", "operator"), ("dynamic_shape/kernel", "kernel")):
        for step, ops in (doc.get(key) or {}).items() if isinstance(doc, dict) else []:
            for op in ops if isinstance(ops, list) else []:
                if not isinstance(op, dict) or not isinstance(op.get("dur"), (int, float)):
                    continue
                lid = int(op["step"]) if isinstance(op.get("step"), int) else int(step) if str(step).isdigit() else None
                text = op.get("shape_info") if key == "operator" else op.get("op_full_name")
                out.append((lid, str(op.get("op_name")), sec, "dur", "us", float(op["dur"]),
                            jsondoc.text(text) if text is not None else op.get("op_type")))  # fmt: skip
    if not out:
        raise ImportFormatError(f"{path}: no operator duration in it")
    _append(ctx, _rank(path, ctx), out)
    return {"rows": len(out)}


LOADERS = {
    "hccl_raw": load_hccl,
    "cluster_analyse_time": load_cluster_time,
    "flops_summary": load_flops_summary,
    "flops_txt": load_flops_txt,
    "dynamic_shape_info": load_dynamic_shape,
}


def load_kind(path: Path, kind: str, ctx: ImportContext) -> dict[str, Any]:
    return LOADERS[kind](path, ctx)


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder (a MindSpore profiler folder is read by mindspore-legacy)")
    k = file_kind(path)
    return yes(f"MindSpore {k}") if k else no("not a MindSpore cluster, FLOPs or dynamic shape file")


IMPORTER = Importer(
    name=NAME,
    description="MindSpore cluster outputs (hccl_raw, ascend_cluster_analyse, flops, dynamic_shape_info)",
    detect=_detect,
    load=load_by_kind(NAME, file_kind, load_kind, "not a MindSpore cluster, FLOPs or dynamic shape file"),
    patterns=("hccl_raw_*.csv", "flops_*.txt", "flops_summary_*.json", "dynamic_shape_info_*.json"),
)
