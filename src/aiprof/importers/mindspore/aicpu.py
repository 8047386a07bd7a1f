"""The raw Ascend AI CPU data file ``DATA_PREPROCESS.dev.AICPU.*`` (MindSpore 1.x).

Layout (as the MindSpore/MindInsight profiler reads it): NUL-separated text records.
A ``Node`` record (``[tick] Node:NAME, Run start:T0, Run end:T1``, or six fields with
``compute start``, ``memcpy start``, ``memcpy end`` before ``Run end``) is followed by
a ``Thread`` record of seven comma-separated fields whose last two are
``dispatchTime=N us`` and ``totalTime=N us``. Run start / end are µs of the device
clock. :func:`render_text` writes the same table MindInsight writes to
``output_data_preprocess_aicpu_N.txt``, byte for byte.

Events: one ``kernel`` span per AI CPU op on the NPU (tid 0 = the AI CPU queue), name =
the op type, with the full node name, dispatch and total times in ``args``.

Some versions write ``Thread`` records alone, naming no node: ``Thread[T] process
device[D]:aicpu[C] task end, tickDrvTopHalf=N, tickDrvBottomHalf=N, tickBeforeRun=N,
tickAfterRun=N, dispatchTime=N us, totalTime=N us``, the ticks counting the device's
100 MHz system counter (the HWTS clock). Each becomes a ``kernel`` span named ``AI CPU
task`` from tickBeforeRun to tickAfterRun, the other fields in ``args``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from ...errors import ImportFormatError
from .. import jsondoc
from ..base import Detection, ImportContext, Importer, append_npu_events, device_clock, no, yes

NAME = "mindspore-aicpu"
COLUMNS = ("serial_number", "node_type_name", "total_time(ms)", "dispatch_time(ms)", "run_start", "run_end")


@dataclass(frozen=True)
class AicpuOp:
    """One AI CPU op: times in ms as the tool reports them, run start/end as written (µs)."""

    serial: int
    op_type: str
    node: str
    total_ms: float
    dispatch_ms: float
    run_start: str
    run_end: str


def _value(field: str, sep: str = ":") -> str:
    return field.split(sep)[-1].strip().split(" ")[0]


def parse_aicpu(data: bytes) -> tuple[list[AicpuOp], int]:
    """The ops in a raw AI CPU file, and the count of Node records that could not be read."""
    text = data.replace(b"\n\x00", b"\x00").decode("utf-8", "replace")
    records = [r.strip() for r in text.split("\x00")]
    ops: list[AicpuOp] = []
    bad = 0
    for node, thread in pairwise(records):
        if "Node" not in node:
            continue
        if "Thread" not in thread:
            bad += 1
            continue
        nf = node.split(",")
        tf = thread.split(",")
        if len(tf) != 7 or len(nf) not in (3, 6):
            bad += 1
            continue
        full = nf[0].split(":")[-1].strip()
        # Three fields: a MindSpore kernel named by its type; six: a graph node path.
        op_type = full if len(nf) == 3 else full.split("/")[-1].split("-")[0]
        start, end = _value(nf[1]), _value(nf[2 if len(nf) == 3 else 5])
        try:
            total = float(_value(tf[-1], "=")) / 1000
            dispatch = float(_value(tf[-2], "=")) / 1000
            int(start), int(end)  # µs counts: a damaged digit costs the record, not the file
        except ValueError:
            bad += 1
            continue
        ops.append(AicpuOp(len(ops) + 1, op_type, full, total, dispatch, start, end))
    return ops, bad


_TICK_FIELD = re.compile(r"(\w+)=(\d+)")
_THREAD = re.compile(r"Thread\[\s*(\d+)\]")
_AICPU = re.compile(r"aicpu\[\s*(\d+)\]")
TICK_NS = 10


def parse_aicpu_ticks(data: bytes) -> tuple[list[dict[str, int]], int]:
    """The Thread-only records of a raw AI CPU file (ticks and µs fields), and the count
    of Thread records without their run ticks."""
    out: list[dict[str, int]] = []
    bad = 0
    for rec in data.replace(b"\n\x00", b"\x00").decode("utf-8", "replace").split("\x00"):
        if "Thread" not in rec:
            continue
        fields = {k: int(v) for k, v in _TICK_FIELD.findall(rec)}
        if "tickBeforeRun" not in fields or "tickAfterRun" not in fields:
            bad += 1
            continue
        t, c = _THREAD.search(rec), _AICPU.search(rec)
        fields["thread"] = int(t.group(1)) if t else -1
        fields["aicpu"] = int(c.group(1)) if c else -1
        out.append(fields)
    return out, bad


def write_tick_events(recs: list[dict[str, int]], ctx: ImportContext, device: int = 0) -> None:
    """One ``kernel`` span per Thread-only AI CPU record, on the NPU's AI CPU queue."""
    origin = ctx.origin(min(r["tickBeforeRun"] for r in recs) * TICK_NS)
    n = len(recs)
    append_npu_events(
        ctx,
        device,
        {
            "kind": "kernel",
            "cat": ["AI_CPU"] * n,
            "name": ["AI CPU task"] * n,
            "ts": [r["tickBeforeRun"] * TICK_NS - origin for r in recs],
            "dur": [(r["tickAfterRun"] - r["tickBeforeRun"]) * TICK_NS for r in recs],
            "args": [jsondoc.text(r | {"unit": "tick (10 ns); dispatchTime, totalTime in us"}) for r in recs],
        },
    )
    device_clock(ctx)


# -- the text table -----------------------------------------------------------------------------


def _cell_type(v: object) -> int:
    """0 int, 1 float, 2 text; numeric strings count as numbers (as tabulate does)."""
    if isinstance(v, bool):
        return 2
    if isinstance(v, int):
        return 0
    if isinstance(v, float):
        return 1
    s = str(v)
    try:
        int(s)
        return 0
    except ValueError:
        pass
    try:
        float(s)
        return 1
    except ValueError:
        return 2


def _fmt(v: object, kind: int) -> str:
    if v is None:
        return ""
    if kind == 1 and not isinstance(v, str):
        return format(float(v), "g")  # type: ignore[arg-type]
    return str(v)


def _after_point(s: str) -> int:
    if "." in s:
        return len(s) - s.index(".") - 1
    return -1


def render_table(headers: tuple[str, ...], rows: list[list[object]]) -> str:
    """A plain-text table: columns two spaces apart, a dashed rule under the headers,
    text left-aligned, numbers right-aligned on their decimal point, each line
    right-stripped, missing cells blank."""
    ncol = len(headers)
    cells = [list(r) + [None] * (ncol - len(r)) for r in rows]
    out_cols: list[list[str]] = []
    widths: list[int] = []
    numeric: list[bool] = []
    for c in range(ncol):
        values = [r[c] for r in cells]
        present = [v for v in values if v is not None and v != ""]
        kind = max((_cell_type(v) for v in present), default=2)
        strs = [_fmt(v, kind) if v is not None else "" for v in values]
        if kind < 2:
            decs = [_after_point(s) for s in strs]
            most = max(decs, default=-1)
            strs = [s + " " * (most - d) if s else s for s, d in zip(strs, decs, strict=True)]
        width = max([len(headers[c]) + 2, *[len(s) for s in strs]])
        out_cols.append([s.rjust(width) if kind < 2 else s.ljust(width) for s in strs])
        widths.append(width)
        numeric.append(kind < 2)
    lines = [
        "  ".join(h.rjust(w) if n else h.ljust(w) for h, w, n in zip(headers, widths, numeric, strict=True)).rstrip()
    ]
    lines.append("  ".join("-" * w for w in widths))
    for i in range(len(cells)):
        lines.append("  ".join(col[i] for col in out_cols).rstrip())
    return "\n".join(lines)


def render_text(ops: list[AicpuOp]) -> str:
    """The ``output_data_preprocess_aicpu_N.txt`` text MindInsight writes for ``ops``."""
    rows: list[list[object]] = [[o.serial, o.op_type, o.total_ms, o.dispatch_ms, o.run_start, o.run_end] for o in ops]
    total = 0.0
    for o in ops:
        total += o.total_ms
    rows.append(["AI CPU Total Time(ms):", format(total, ".6f")])
    return render_table(COLUMNS, rows) + "\n"


# -- importer -------------------------------------------------------------------------------------


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and _detect_file(p))


def _detect(path: Path) -> Detection:
    if path.is_dir():
        n = len(_files(path))
        return yes(f"a folder with {n} AI CPU data file(s)") if n else no("a folder without AI CPU data files")
    return _detect_file(path)


def _detect_file(path: Path) -> Detection:
    with path.open("rb") as f:
        head = f.read(4096)
    if b"Node:" in head and b"Run start" in head.replace(b"Run tart", b"Run start") and b"\x00" in head:
        return yes("NUL-separated AI CPU Node/Thread records")
    if b"Node:" in head and b"Thread[" in head and b"totalTime=" in head:
        return yes("AI CPU Node/Thread records")
    if head.startswith(b"Thread[") and b"tickBeforeRun=" in head and b"totalTime=" in head:
        return yes("AI CPU Thread records with run ticks")
    return no("no AI CPU Node/Thread records in its first 4 KiB")


def _load(path: Path, ctx: ImportContext) -> None:
    if path.is_dir():
        files = _files(path)
        if not files:
            raise ImportFormatError(f"{path}: no AI CPU data file in it")
        from .text import file_kind as text_kind
        from .text import load_kind

        others = [(p, text_kind(p)) for p in sorted(path.iterdir()) if p.is_file() and p not in files]
        left = [p.name for p, k in others if k is None]
        if left:
            ctx.warn(f"{path.name}: not imported (formats not read): {', '.join(left)}")
        for f in files:
            load_file(f, ctx)
        for p, k in others:
            if k is not None:
                # The text rendering of the AI CPU data repeats the ops just read as events.
                extra = load_kind(p, k, ctx, as_events=False)
                ctx.writer.add_source("mindspore-text", p, file_kind=k, **extra)
        return
    load_file(path, ctx)


def load_file(path: Path, ctx: ImportContext, device: int = 0) -> None:
    data = path.read_bytes()
    ops, bad = parse_aicpu(data)
    if not ops:
        recs, bad = parse_aicpu_ticks(data)
        if not recs:
            raise ImportFormatError(f"{path}: no AI CPU op could be read")
        if bad:
            ctx.warn(f"{path.name}: {bad} AI CPU thread records without run ticks skipped")
        write_tick_events(recs, ctx, device)
        ctx.writer.add_source(NAME, path, ops=len(recs))
        return
    if bad:
        ctx.warn(f"{path.name}: {bad} AI CPU node records without readable thread data skipped")
    write_events(ops, ctx, device)
    ctx.writer.add_source(NAME, path, ops=len(ops))


def write_events(ops: list[AicpuOp], ctx: ImportContext, device: int = 0) -> None:
    """One ``kernel`` span per AI CPU op on the NPU's AI CPU queue (run start/end are µs)."""
    starts = [int(o.run_start) * 1000 for o in ops]
    origin = ctx.origin(min(starts))
    n = len(ops)
    append_npu_events(
        ctx,
        device,
        {
            "kind": "kernel",
            "cat": ["AI_CPU"] * n,
            "name": [o.op_type for o in ops],
            "ts": [s - origin for s in starts],
            "dur": [(int(o.run_end) - int(o.run_start)) * 1000 for o in ops],
            "args": [
                jsondoc.text(
                    {
                        "node": o.node,
                        "total_time_ms": o.total_ms,
                        "dispatch_time_ms": o.dispatch_ms,
                        "serial_number": o.serial,
                    }
                )
                for o in ops
            ],
        },
    )
    device_clock(ctx)


IMPORTER = Importer(
    name=NAME,
    description="Ascend AI CPU raw data file DATA_PREPROCESS.dev.AICPU.* (MindSpore 1.x profiler)",
    detect=_detect,
    load=_load,
    patterns=("DATA_PREPROCESS.dev.AICPU.*",),
)
