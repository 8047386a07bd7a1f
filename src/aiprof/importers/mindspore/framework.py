"""The raw framework files of a MindSpore 1.x Ascend profiling job (``Framework.host.*``).

Layouts (as MindSpore's framework parser reads them; text, one record a line):

- ``Framework.host.[vm.]task_desc_info.N.slice_K``: ``FULL_OP_NAME BLOCK_DIM TASK_ID
  STREAM_ID`` (a fifth, leading field in some versions is skipped). A task id below
  25,000 names an op only together with its stream (key ``STREAM_TASK``); a higher
  one names it alone (key ``TASK``); the HWTS log uses the same keys;
- ``Framework.host.[vm.]graph_desc_info.N.slice_K``: ``op_name:FULL op_type:TYPE`` then,
  per input and output, ``input_id:I input_format:F input_data_type:D input_shape:"S"``
  (``output_...`` likewise). A record may continue in the next slice (a line that does
  not start with ``op_name:`` belongs to the one before). The ``vm`` backend writes
  formats as words and data types as MindSpore's number types (27..41); the ``ge``
  backend writes both as GE enum numbers, named here as GE names them;
- ``Framework.host.[vm.]point.N.slice_K``: ``TAG FULL_OP_NAME``: the step trace's point
  ids (1 forward start, 2 backward end, then the start and end of each communication).

The short op name is the last path component (``vm``) or the ``+``-joined last
components of each ``Default/`` / ``Gradients/`` part (``ge``), as MindSpore shows it.

Alone, each file imports what it holds as kernel_metrics (it has no times): section
``framework`` (kernel = full op name, launch_id = task id; block_dim, stream_id, op_type,
and the inputs and outputs as JSON text) and ``step_trace_point`` (kernel = full op name,
launch_id = the point id). The job folder (:mod:`.job`) joins them to the
HWTS log and the step trace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ImportFormatError
from .. import jsondoc
from ..base import Detection, ImportContext, Importer, MetricRow, no, write_metrics, yes

NAME = "mindspore-framework"
#: Task ids below this name an op only with their stream (MindSpore's framework parser).
TASK_ID_THRESHOLD = 25000

_VM_TYPES = (
    "BEGIN BOOL INT INT8 INT16 INT32 INT64 UINT UINT8 UINT16 UINT32 UINT64 FLOAT FLOAT16 FLOAT32 FLOAT64 END"
).split()
#: MindSpore's number types (vm backend): 26 + index.
VM_DATA_TYPES = {26 + i: f"NUMBER_TYPE_{n}" for i, n in enumerate(_VM_TYPES)}
#: GE data types (ge backend).
GE_DATA_TYPES = dict(
    enumerate(
        (
            "DT_FLOAT DT_FLOAT16 DT_INT8 DT_INT32 DT_UINT8 DT_5 DT_INT16 DT_UINT16 DT_UINT32 DT_INT64 DT_UINT64 "
            "DT_DOUBLE DT_BOOL DT_STRING DT_DUAL_SUB_INT8 DT_DUAL_SUB_UINT8 DT_COMPLEX64 DT_COMPLEX128 DT_QINT8 "
            "DT_QINT16 DT_QINT32 DT_QUINT8 DT_QUINT16 DT_RESOURCE DT_STRING_REF DT_DUAL DT_UNDEFINED"
        ).split()
    )
)
del GE_DATA_TYPES[5]
#: GE formats (ge backend).
GE_FORMATS = dict(
    enumerate(
        (
            "NCHW NHWC ND NC1HWC0 FRACTAL_Z NC1C0HWPAD NHWC1C0 FSR_NCHW FRACTAL_DECONV C1HWNC0 "
            "FRACTAL_DECONV_TRANSPOSE FRACTAL_DECONV_SP_STRIDE_TRANS NC1HWC0_C04 FRACTAL_Z_C04 CHWN "
            "FRACTAL_DECONV_SP_STRIDE8_TRANS HWCN NC1KHKWHWC0 BN_WEIGHT FILTER_HWCK HASHTABLE_LOOKUP_LOOKUPS "
            "HASHTABLE_LOOKUP_KEYS HASHTABLE_LOOKUP_VALUE HASHTABLE_LOOKUP_OUTPUT HASHTABLE_LOOKUP_HITS "
            "C1HWNCoC0 MD NDHWC FRACTAL_ZZ FRACTAL_NZ NCDHW DHWCN NDC1HWC0 FRACTAL_Z_3D CN NC DHWNC "
            "FRACTAL_Z_3D_TRANSPOSE RESERVED ALL"
        )
        .replace("C1HWNCoC0", "C1HWNCOC0")
        .split()
    )
)
GE_FORMATS = {k: f"FORMAT_{v}" for k, v in GE_FORMATS.items()}

_TASK_LINE = re.compile(r"^\S+( \S+)? \d+ \d+ \d+$")
_POINT_LINE = re.compile(r"^\d+ \S+$")


@dataclass
class FrameworkOp:
    """One operator as the framework files describe it."""

    full_name: str
    op_type: str | None = None
    task_id: int | None = None
    stream_id: int | None = None
    block_dim: int | None = None
    io: dict[str, dict[str, str]] = field(default_factory=dict)
    """``input_0`` / ``output_0`` -> {format, data_type, shape} as MindSpore names them."""

    @property
    def name(self) -> str:
        return short_name(self.full_name)

    def key(self) -> str | None:
        return None if self.task_id is None or self.stream_id is None else task_key(self.task_id, self.stream_id)

    def shapes(self, side: str) -> str:
        """``"128,1;1"``: the shapes of the inputs (or outputs) in order, ``;``-separated."""
        return ";".join(v.get("shape", "") for k, v in sorted(self.io.items(), key=_io_order) if k.startswith(side))

    def formats(self, side: str) -> str:
        return ";".join(v.get("format", "") for k, v in sorted(self.io.items(), key=_io_order) if k.startswith(side))

    def args(self) -> dict[str, Any]:
        """The fields an event of this op carries (MindSpore's timeline names: type, fullname)."""
        out: dict[str, Any] = {"type": self.op_type, "fullname": self.full_name}
        if self.block_dim is not None:
            out["block_dim"] = self.block_dim
        out["input_shapes"] = self.shapes("input")
        out["output_shapes"] = self.shapes("output")
        out["input_formats"] = self.formats("input")
        out["output_formats"] = self.formats("output")
        out.update(dict(sorted(self.io.items(), key=_io_order)))
        return out


def _io_order(kv: tuple[str, Any]) -> tuple[str, int]:
    side, _, idx = kv[0].partition("_")
    return side, int(idx) if idx.isdigit() else 0


def task_key(task_id: int, stream_id: int) -> str:
    """The key that names an op's task in the framework and HWTS files."""
    return f"{stream_id}_{task_id}" if task_id < TASK_ID_THRESHOLD else str(task_id)


def short_name(full: str) -> str:
    scope = full.split("/", 1)[0]
    if scope not in ("Default", "Gradients"):
        return full
    parts = [p for p in full.split(scope + "/") if p]
    return "+".join(p.rstrip("/").split("/")[-1] for p in parts) or full


# -- parsers ---------------------------------------------------------------------------------------


def _text(paths: Iterable[Path]) -> list[str]:
    """The lines of the slices in order; a line not starting a record joins the one before
    when it is the first line of a slice (a record cut at a slice boundary)."""
    lines: list[str] = []
    for p in paths:
        first = True
        for ln in p.read_text(encoding="utf-8", errors="replace").splitlines():
            if first and lines and ln and not ln.startswith("op_name:") and lines[-1].startswith("op_name:"):
                lines[-1] += ln
            elif ln.strip():
                lines.append(ln.strip())
            first = False
    return lines


def parse_task_desc(lines: Iterable[str]) -> tuple[list[FrameworkOp], int]:
    ops: list[FrameworkOp] = []
    bad = 0
    for ln in lines:
        f = ln.split(" ")
        if len(f) == 5:
            f = f[1:]
        # A number past 19 digits is no id (and past 4,300 int() refuses it).
        if len(f) != 4 or not all(x.isdigit() and len(x) <= 19 for x in f[1:]):
            bad += 1
            continue
        ops.append(FrameworkOp(f[0], block_dim=int(f[1]), task_id=int(f[2]), stream_id=int(f[3])))
    return ops, bad


_GE_FORMAT = re.compile(r" (input|output)_format:\d")


def parse_graph_desc(lines: list[str], backend: str | None = None) -> tuple[list[FrameworkOp], int]:
    """The ops of a graph_desc_info file; ``backend`` ``vm`` / ``ge`` (None: from the
    values, GE writing formats as numbers)."""
    ops: list[FrameworkOp] = []
    bad = 0
    if backend is None:
        backend = "ge" if any(_GE_FORMAT.search(ln) for ln in lines[:16]) else "vm"
    for ln in lines:
        if not ln.startswith("op_name:"):
            bad += 1
            continue
        op: FrameworkOp | None = None
        cur: dict[str, str] | None = None
        ok = True
        for tok in ln.split(" "):
            k, sep, v = tok.partition(":")
            if not sep:
                ok = False
                continue
            if k == "op_name":
                op = FrameworkOp(v)
            elif op is None:
                ok = False
            elif k == "op_type":
                op.op_type = v
            elif k in ("input_id", "output_id"):
                cur = op.io.setdefault(f"{k.split('_')[0]}_{v}", {})
            elif k.startswith(("input_", "output_")) and cur is not None:
                attr = k.split("_", 1)[1]
                cur[attr] = _attr(attr, v.strip('"'), backend)
        if op is None:
            bad += 1
            continue
        if not ok:
            bad += 1
        ops.append(op)
    return ops, bad


def _attr(attr: str, value: str, backend: str) -> str:
    if not value.isdigit() or attr == "shape":
        return value
    n = int(value)
    if attr == "data_type":
        return (GE_DATA_TYPES if backend == "ge" else VM_DATA_TYPES).get(n, "UNKNOWN")
    if attr == "format" and backend == "ge":
        return GE_FORMATS.get(n, "UNKNOWN")
    return value


def parse_points(lines: Iterable[str]) -> tuple[dict[int, str], int]:
    points: dict[int, str] = {}
    bad = 0
    for ln in lines:
        f = ln.split(" ")
        if len(f) != 2 or not f[0].isdigit():
            bad += 1
            continue
        points[int(f[0])] = f[1]
    return points, bad


# -- the joined view -------------------------------------------------------------------------------


@dataclass
class Framework:
    """The framework files of one device, joined: ops by task key and by full name."""

    by_key: dict[str, FrameworkOp] = field(default_factory=dict)
    by_name: dict[str, FrameworkOp] = field(default_factory=dict)
    points: dict[int, str] = field(default_factory=dict)
    bad: dict[str, int] = field(default_factory=dict)

    def add_tasks(self, ops: list[FrameworkOp]) -> None:
        for o in ops:
            known = self.by_name.setdefault(o.full_name, o)
            if known is not o:
                known.task_id, known.stream_id, known.block_dim = o.task_id, o.stream_id, o.block_dim
            k = known.key()
            if k is not None:
                self.by_key[k] = known

    def add_graph(self, ops: list[FrameworkOp]) -> None:
        for o in ops:
            known = self.by_name.setdefault(o.full_name, o)
            if known is not o:
                known.op_type, known.io = o.op_type, o.io


def file_kind(path: Path) -> str | None:
    """``task_desc_info``, ``graph_desc_info`` or ``point`` by content (the name is a hint)."""
    try:
        with path.open("rb") as f:
            head = f.read(1 << 14)
    except OSError:
        return None
    if not head.strip() or b"\x00" in head:
        return None
    lines = [ln.strip() for ln in head.decode("utf-8", "replace").splitlines() if ln.strip()]
    if len(head) == 1 << 14 and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut by the head
    if not lines:
        return None  # only separators that str.splitlines takes and bytes.strip does not
    if lines[0].startswith("op_name:") and " op_type:" in lines[0]:
        return "graph_desc_info"
    if all(_TASK_LINE.match(ln) for ln in lines) and "/" in lines[0]:
        return "task_desc_info"
    if all(_POINT_LINE.match(ln) for ln in lines) and "point" in path.name.lower():
        return "point"
    if all(_POINT_LINE.match(ln) for ln in lines) and all("/" in ln for ln in lines):
        return "point"
    return None


def backend_of(path: Path) -> str | None:
    """``vm`` / ``ge`` from a ``Framework.host.vm.*`` / ``Framework.host.*`` name; None when renamed."""
    name = path.name
    return "vm" if ".vm." in name else "ge" if name.startswith("Framework.") else None


def load_framework(files: list[tuple[Path, str]], ctx: ImportContext) -> Framework:
    """Read framework files of one device (slices in name order) into a :class:`Framework`."""
    fw = Framework()
    by_kind: dict[str, list[Path]] = {}
    for p, k in files:
        by_kind.setdefault(k, []).append(p)
    for kind in ("task_desc_info", "graph_desc_info", "point"):
        paths = sorted(by_kind.get(kind, []), key=slice_order)
        if not paths:
            continue
        lines = _text(paths)
        if kind == "task_desc_info":
            ops, bad = parse_task_desc(lines)
            fw.add_tasks(ops)
        elif kind == "graph_desc_info":
            backend = backend_of(paths[0])
            ops, bad = parse_graph_desc(lines, backend)
            fw.add_graph(ops)
        else:
            fw.points, bad = parse_points(lines)
        if bad:
            ctx.warn(f"{paths[0].name}: {bad} unreadable {kind} lines skipped")
        fw.bad[kind] = bad
    return fw


def slice_order(p: Path) -> tuple[str, int]:
    """Sort key of ``NAME.slice_K`` files: slice 10 after slice 9."""
    m = re.search(r"^(.*?)(\d+)$", p.name)
    return (m.group(1), int(m.group(2))) if m else (p.name, 0)


def metric_rows(fw: Framework) -> list[MetricRow]:
    """kernel_metrics rows of the framework files (sections framework, step_trace_point)."""
    out: list[MetricRow] = []
    for o in fw.by_name.values():
        for m, v in (("block_dim", o.block_dim), ("stream_id", o.stream_id), ("task_id", o.task_id)):
            if v is not None:
                out.append((o.task_id, o.full_name, "framework", m, None, float(v), None))
        if o.op_type is not None:
            out.append((o.task_id, o.full_name, "framework", "op_type", None, None, o.op_type))
        if o.io:
            out.append((o.task_id, o.full_name, "framework", "op_info", None, None, jsondoc.text(o.io)))
    for tag, name in sorted(fw.points.items()):
        out.append((tag, name, "step_trace_point", "tag", None, float(tag), None))
    return out


# -- importer --------------------------------------------------------------------------------------


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder (a job folder is read by mindspore-job)")
    k = file_kind(path)
    return yes(f"MindSpore framework {k} records") if k else no("not a MindSpore Framework.host.* file")


def _load(path: Path, ctx: ImportContext) -> None:
    k = file_kind(path)
    if k is None:
        raise ImportFormatError(f"{path}: not a MindSpore Framework.host.* file")
    fw = load_framework([(path, k)], ctx)
    rows = metric_rows(fw)
    if not rows:
        raise ImportFormatError(f"{path}: no {k} record could be read")
    write_metrics(ctx, rows)
    ctx.warn(
        f"{path.name}: framework records have no times; import the job folder (with the hwts.log and "
        "training_trace files) to name the device tasks and step points by operator"
    )
    ctx.writer.add_source(NAME, path, file_kind=k, ops=len(fw.by_name), points=len(fw.points))


IMPORTER = Importer(
    name=NAME,
    description="MindSpore 1.x raw framework files Framework.host.*.task_desc_info / graph_desc_info / point",
    detect=_detect,
    load=_load,
    patterns=("Framework.*",),
)
