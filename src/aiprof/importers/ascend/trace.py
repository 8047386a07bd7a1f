"""Huawei Ascend Chrome-trace JSON: torch_npu / MindSpore ``trace_view.json`` and the
CANN msprof timeline files (``msprof_*.json``, ``task_time_*.json``, ``hccl_*.json``,
``step_trace_*.json``).

The Kineto converter reads them (string µs timestamps stay exact to the ns); this
module only says what each span is, from the ``process_name`` metadata of its pid:

- "Ascend Hardware" (one thread per stream): NPU tasks -> ``kernel``; ``MEMCPY*``
  -> ``memcpy``; ``MemSet`` kernels -> ``memset``; event/notify waits and records ->
  ``sync``; HCCL reduce tasks -> ``collective``; its "Step Trace" thread -> ``step``
  for ``Iteration N`` (step = N), ``other`` for the phases inside;
- "CANN" (AscendCL, runtime, GE calls per host thread) -> ``runtime``;
- "HCCL": the communication-op thread -> ``collective``; the per-plane task threads
  repeat the stream tasks, so they are ``other`` (never counted twice);
- "Overlap Analysis" (derived Computing/Communication/Free) -> ``other``;
- "Step Trace" (msprof) -> ``step`` / ``other`` as above;
- anything else (the Python process: cpu_op, enqueue/dequeue) -> Kineto's rules,
  with the torch_npu task-queue categories ``enqueue``/``dequeue`` -> ``runtime``.

Everything on an NPU process gets ``device_type = 'npu'``. Metadata may come after
the events it names, so a cheap first pass reads the metadata and the flow events;
the flows then give ``correlation`` (HostToDevice: CANN call -> NPU task) and
``external_id`` (async_npu: framework op -> NPU task) to the spans at both ends.

With torch_npu's task queue the CANN launch call does not run in the operator: the
operator's thread queues the work (``Enqueue``, an ``async_task_queue`` flow to the
``Dequeue@op`` span on the queue's thread) and the CANN calls run inside that
``Dequeue``, on the same thread id but under the "CANN" process. The ``Enqueue``
takes the correlation of the CANN launch calls inside its ``Dequeue`` (calls of one
``Dequeue`` and their tasks share the first one's value), and it and those calls take
the ``external_id`` of their tasks (the operator's, from async_npu). So operator ->
``Enqueue`` (nested on the operator's thread) -> NPU task holds as operator ->
``cudaLaunchKernel`` -> kernel does in a CUDA trace, while the launch of a task, for its
delay, stays the CANN call (the last host call of a correlation:
analysis/common.py ``launch_calls_sql``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from ...store.vocabulary import is_collective_op
from .. import jsondoc
from ..base import Detection, ImportContext, Importer, no, yes
from ..jsonstream import TraceStream
from ..kineto import DEVICE_SIDE, Args, ChromeTraceConverter, Ev, decode_events, load_chrome_trace, try_decode
from ..timeconv import us_to_ns

NAME = "ascend-trace"

NPU_PROCESSES = frozenset({"Ascend Hardware", "HCCL", "Overlap Analysis", "AI Core Freq", "NPU_MEM", "Stars Soc Info"})
_SYNC_RE = re.compile(r"(EVENT|NOTIFY|STREAM)_?(WAIT|RECORD|RESET)|^(Notify|Event)_(Wait|Record)", re.IGNORECASE)
_ITER_RE = re.compile(r"^Iteration (\d+)$")
#: Flow categories that tie host work to NPU tasks, and the column they fill.
ASCEND_FLOW_COLUMNS: dict[str, str] = {"hosttodevice": "correlation", "async_npu": "external_id"}
#: Flow categories of torch_npu's task queue: from the call that queued an operator's
#: work on the operator's thread (``Enqueue``) to the span that ran it on the queue's
#: thread (``Dequeue@op``), inside which, on that thread id, the launch calls run.
QUEUE_FLOW_CATS = frozenset({"async_task_queue"})


class AscArgs(msgspec.Struct):
    """The Ascend ``args`` keys that decide a span's kind."""

    task_type: str | None = msgspec.field(name="Task Type", default=None)
    task_type_hccl: str | None = msgspec.field(name="task type", default=None)
    iteration: int | None = msgspec.field(name="Iteration ID", default=None)


_ASC_LIST = msgspec.json.Decoder(list[AscArgs])
_ASC_ONE = msgspec.json.Decoder(AscArgs)


def _decode_asc(raws: list[msgspec.Raw]) -> list[AscArgs]:
    try:
        return _ASC_LIST.decode(b"[" + b",".join([bytes(r) if r else b"{}" for r in raws]) + b"]")
    except (msgspec.DecodeError, RecursionError):
        out: list[AscArgs] = []
        for r in raws:
            try:
                out.append(_ASC_ONE.decode(bytes(r)) if r else AscArgs())
            except (msgspec.DecodeError, RecursionError):
                out.append(AscArgs())
        return out


def npu_task_kind(name: str, task_type: str | None) -> str:
    """Kind of one task on an Ascend Hardware stream, from its task type and name."""
    tt = (task_type or "").upper()
    up = name.upper()
    if "MEMCPY" in tt or up.startswith("MEMCPY") or up == "MEMCPY_ASYNC":
        return "memcpy"
    if _SYNC_RE.search(tt) or _SYNC_RE.search(name):
        return "sync"
    if tt in ("HCCL", "HCCL_AI_CPU") or is_collective_op(tt) or is_collective_op(name):
        return "collective"
    if "MEMSET" in up.replace("_", "").replace("-", ""):
        return "memset"
    return "kernel"


def times_ns(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`us_to_ns` with a fast path for the ``"1704161511420306.491"`` strings
    Ascend writes (exactly three decimals: the ns are the digits without the point)."""
    try:
        out = [int(v.replace(".", "")) if type(v) is str and len(v) > 4 and v[-4] == "." else None for v in values]
    except ValueError:
        return us_to_ns(values)
    if None in out or any(not -(2**63) <= v < 2**63 for v in out if v is not None):
        return us_to_ns(values)
    return np.array(out, dtype=np.int64), np.ones(len(out), dtype=bool)


# -- the first pass: metadata and flow bindings --------------------------------------------


@dataclass
class TraceScan:
    """What a first pass over a Chrome-trace file learns: track names and flow ends."""

    process_names: dict[Any, str] = field(default_factory=dict)
    process_labels: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    bindings: dict[tuple[Any, Any, int, int], dict[str, int]] = field(default_factory=dict)
    """(raw pid, raw tid, ts ns, dur ns) of a span -> columns its flows give it."""
    flows_unbound: int = 0
    """Flow ends that no span on their thread encloses."""


def _flow_value(fid: object, synth: dict[str, int]) -> int | None:
    """The flow id as an integer: itself, its digits ("0x1f", "42"), else a number made
    up once per distinct id (a name, a float, a list: any id that ties two ends)."""
    if fid is None or isinstance(fid, bool):
        return None
    if isinstance(fid, int) and -(2**63) <= fid < 2**63:
        return fid
    if not isinstance(fid, str):
        fid = jsondoc.text(fid)
    try:
        v = int(fid, 0)
        if not -(2**63) <= v < 2**63:
            raise ValueError("past 64 bits")
        return v
    except ValueError:
        made = synth.get(fid)
        if made is None:
            made = synth[fid] = (1 << 48) + len(synth)
        return made


def scan_trace(path: Path, flow_columns: dict[str, str] | None, ctx: ImportContext) -> TraceScan:
    """Read metadata and flows of ``path`` and bind each flow to the spans at its ends.

    ``flow_columns`` maps a lower-case flow category to the column it fills
    (``correlation`` or ``external_id``); None binds every flow as ``correlation``.
    A flow end binds to the innermost span on its thread that holds its timestamp.
    With ``flow_columns``, task-queue flows (QUEUE_FLOW_CATS) link queued launches to
    the call that queued them (:func:`_link_queue`).
    """
    scan = TraceScan()
    spans: dict[tuple[Any, Any], list[tuple[np.ndarray, np.ndarray]]] = {}
    starts: dict[tuple[str, Any], tuple[Any, Any, int]] = {}
    ends: dict[tuple[str, Any], list[tuple[Any, Any, int]]] = {}
    queued: dict[Any, tuple[Any, Any, int]] = {}
    dequeued: dict[Any, list[tuple[Any, Any, int]]] = {}
    for evs in TraceStream(path).batches(try_decode, lambda b: decode_events(b, ctx)):
        xs = [e for e in evs if e.ph == "X"]
        if xs:
            ts, ok = times_ns([e.ts for e in xs])
            dur, dok = us_to_ns([e.dur for e in xs])
            dur = np.where(dok, dur, 0)
            keys = [(e.pid, e.tid) for e in xs]
            groups: dict[tuple[Any, Any], list[int]] = {}
            for i, k in enumerate(keys):
                groups.setdefault(k, []).append(i)
            for k, idx in groups.items():
                ia = np.array(idx)
                ia = ia[ok[ia]]
                spans.setdefault(k, []).append((ts[ia], dur[ia]))
        flows: list[tuple[str, Ev]] = []
        for e in evs:
            if e.ph == "M":
                _meta(scan, e)
            elif e.ph in ("s", "f") and e.id is not None:
                cat = (e.cat or "").lower()
                if flow_columns is None or cat in flow_columns or cat in QUEUE_FLOW_CATS:
                    flows.append((cat, e))
        if flows:
            fts, fok = times_ns([e.ts for _, e in flows])
            for (cat, e), t, tok in zip(flows, fts.tolist(), fok.tolist(), strict=True):
                if not tok:
                    continue
                if flow_columns is not None and cat in QUEUE_FLOW_CATS and cat not in flow_columns:
                    if e.ph == "s":
                        queued[e.id] = (e.pid, e.tid, t)
                    else:
                        dequeued.setdefault(e.id, []).append((e.pid, e.tid, t))
                elif e.ph == "s":
                    starts[(cat, e.id)] = (e.pid, e.tid, t)
                else:
                    ends.setdefault((cat, e.id), []).append((e.pid, e.tid, t))
    if not starts:
        return scan
    index: dict[tuple[Any, Any], tuple[np.ndarray, np.ndarray]] = {}
    for k, parts in spans.items():
        ts = np.concatenate([p[0] for p in parts])
        dur = np.concatenate([p[1] for p in parts])
        order = np.lexsort((-dur, ts))  # by start; a parent before a child starting with it
        index[k] = (ts[order], dur[order])

    def enclosing(pid: Any, tid: Any, t: int) -> tuple[int, int] | None:
        got = index.get((pid, tid))
        if got is None:
            return None
        ts, dur = got
        i = int(np.searchsorted(ts, t, side="right")) - 1
        steps = 0
        while i >= 0 and steps < 256:
            if int(ts[i]) + int(dur[i]) >= t:
                return int(ts[i]), int(dur[i])
            i -= 1
            steps += 1
        return None

    synth: dict[str, int] = {}
    by_source: dict[tuple[Any, ...], int] = {}
    launches: list[tuple[Any, Any, int, int]] = []
    """The spans that start a correlation flow (launch calls)."""
    tasks: dict[int, list[tuple[Any, Any, int, int]]] = {}
    """Correlation value -> the spans its flows end in (device tasks)."""
    for (cat, fid), (spid, stid, st) in starts.items():
        col = "correlation" if flow_columns is None else flow_columns[cat]
        value = _flow_value(fid, synth)
        src = enclosing(spid, stid, st)
        if value is None:
            continue
        if src is None:
            scan.flows_unbound += 1
        else:
            skey = (spid, stid, *src)
            # One host call may start several NPU tasks: they all share its value.
            value = by_source.setdefault((col, *skey), value)
            bound = scan.bindings.setdefault(skey, {})
            if col == "correlation" and col not in bound:
                launches.append(skey)
            bound.setdefault(col, value)
        for fpid, ftid, ft in ends.get((cat, fid), []):
            dst = enclosing(fpid, ftid, ft)
            if dst is None:
                scan.flows_unbound += 1
                continue
            dkey = (fpid, ftid, *dst)
            scan.bindings.setdefault(dkey, {}).setdefault(col, value)
            if col == "correlation":
                tasks.setdefault(value, []).append(dkey)
    if queued and launches:
        _link_queue(scan, queued, dequeued, enclosing, launches, tasks)
    return scan


def _link_queue(
    scan: TraceScan,
    queued: dict[Any, tuple[Any, Any, int]],
    dequeued: dict[Any, list[tuple[Any, Any, int]]],
    enclosing: Callable[[Any, Any, int], tuple[int, int] | None],
    launches: list[tuple[Any, Any, int, int]],
    tasks: dict[int, list[tuple[Any, Any, int, int]]],
) -> None:
    """Bind each queueing call (the span holding a task-queue flow's start) to the
    launch calls that ran its work: those starting inside the span that holds the
    flow's end, on a thread of the same id (torch_npu writes the CANN calls of a
    thread under a process of their own). The queueing call takes their correlation
    (the first call's; the others and their tasks take it too: one queued item is one
    launch) and, with them, the external_id of the tasks (the operator's)."""
    b = scan.bindings
    by_tid: dict[Any, tuple[np.ndarray, list[tuple[Any, Any, int, int]]]] = {}
    groups: dict[Any, list[tuple[Any, Any, int, int]]] = {}
    for k in launches:
        groups.setdefault(k[1], []).append(k)
    for tid, ks in groups.items():
        ks.sort(key=lambda k: (k[2], -k[3]))
        by_tid[tid] = (np.array([k[2] for k in ks], dtype=np.int64), ks)
    for qid, (qpid, qtid, qt) in queued.items():
        src = enclosing(qpid, qtid, qt)
        if src is None:
            continue
        qkey = (qpid, qtid, *src)
        for dpid, dtid, dt in dequeued.get(qid, []):
            dst = enclosing(dpid, dtid, dt)
            got = by_tid.get(dtid)
            if dst is None or got is None:
                continue
            starts, ks = got
            lo = int(np.searchsorted(starts, dst[0], side="left"))
            hi = int(np.searchsorted(starts, dst[0] + dst[1], side="right"))
            calls = [k for k in ks[lo:hi] if k not in (qkey, (dpid, dtid, *dst))]
            if not calls:
                continue
            value = b[calls[0]]["correlation"]
            for k in calls[1:]:
                old = b[k]["correlation"]
                if old == value:
                    continue
                for t in tasks.pop(old, []):
                    b[t]["correlation"] = value
                    tasks.setdefault(value, []).append(t)
                b[k]["correlation"] = value
            own = b.setdefault(qkey, {})
            if own.setdefault("correlation", value) != value:
                continue  # the queueing call launched work of its own: keep it
            ext = next((b[t]["external_id"] for t in tasks.get(value, []) if "external_id" in b[t]), None)
            if ext is not None:
                for k in (qkey, *calls):
                    b[k].setdefault("external_id", ext)


def _meta(scan: TraceScan, e: Ev) -> None:
    try:
        a = orjson.loads(bytes(e.args)) if e.args else {}
    except (orjson.JSONDecodeError, RecursionError):
        return
    if not isinstance(a, dict):
        return
    if e.name == "process_name" and isinstance(a.get("name"), str):
        scan.process_names[e.pid] = a["name"]
    elif e.name == "process_labels" and isinstance(a.get("labels"), str):
        scan.process_labels[e.pid] = a["labels"]
    elif e.name == "thread_name" and isinstance(a.get("name"), str):
        scan.thread_names[(e.pid, e.tid)] = a["name"]


# -- the converter --------------------------------------------------------------------------


class FlowBoundConverter(ChromeTraceConverter):
    """A Chrome-trace converter whose spans take correlation ids from a first pass."""

    scan: TraceScan = TraceScan()

    def bound_columns(self, evs: list[Ev]) -> dict[str, list[int | None]]:
        """``correlation`` / ``external_id`` of each span from the flow bindings."""
        if not self.scan.bindings:
            return {}
        ts, _ = times_ns([e.ts for e in evs])
        dur, dok = us_to_ns([e.dur for e in evs])
        dur = np.where(dok, dur, 0)
        b = self.scan.bindings
        got = [b.get((e.pid, e.tid, t, d)) for e, t, d in zip(evs, ts.tolist(), dur.tolist(), strict=True)]
        if not any(got):
            return {}
        out: dict[str, list[int | None]] = {}
        for col in ("correlation", "external_id"):
            vals = [g.get(col) if g else None for g in got]
            if any(v is not None for v in vals):
                out[col] = vals
        return out


class AscendTraceConverter(FlowBoundConverter):
    """Kinds and NPU placement for Ascend spans (see the module docstring)."""

    importer_name = NAME
    device_index: int = 0
    default_rank: int | None = None

    def __init__(self, ctx: ImportContext, header: dict[str, Any]) -> None:
        super().__init__(ctx, header)
        self.vendor = "npu"
        self.vendor_known = True
        if ctx.rank is None and self.default_rank is not None:
            meta = ctx.writer.meta
            if self.rank in meta["ranks"] and self.rank != self.default_rank:
                meta["ranks"].remove(self.rank)
            self.rank = self.default_rank
            if self.rank not in meta["ranks"]:
                meta["ranks"].append(self.rank)

    def _pname(self, pid: Any) -> str:
        n = self.scan.process_names.get(pid)
        if n is None:
            rec = self.track_names.get((self.int_id(pid), None))
            n = str(rec.get("name")) if rec and rec.get("name") else ""
        return n

    def refine(self, evs: list[Ev], kinds: list[str], args: list[Args]) -> dict[str, Any]:
        asc = _decode_asc([e.args for e in evs])
        dt: list[str] = []
        dev: list[int] = []
        steps: list[int | None] = []
        for i, (e, a) in enumerate(zip(evs, asc, strict=True)):
            pname = self._pname(e.pid)
            tname = self.scan.thread_names.get((e.pid, e.tid), "")
            name = e.name if isinstance(e.name, str) else str(e.name or "")
            npu = pname in NPU_PROCESSES or self.scan.process_labels.get(e.pid) == "NPU"
            step: int | None = None
            if pname == "Step Trace" or tname.startswith("Step Trace"):
                m = _ITER_RE.match(name)
                if m or (e.cat or "") == "Iteration Time":
                    kinds[i] = "step"
                    step = a.iteration if a.iteration is not None else (int(m.group(1)) if m else None)
                else:
                    kinds[i] = "other"
                npu = True
            elif pname == "Ascend Hardware":
                kinds[i] = npu_task_kind(name, a.task_type)
            elif pname == "HCCL":
                kinds[i] = "collective" if not tname.startswith("Plane") else "other"
            elif pname == "CANN":
                kinds[i] = "runtime"
            elif pname == "Overlap Analysis":
                kinds[i] = "other"
            elif kinds[i] == "other" and (e.cat or "").lower() in ("enqueue", "dequeue"):
                kinds[i] = "runtime"
            steps.append(step)
            if npu or kinds[i] in DEVICE_SIDE:
                dt.append("npu")
                dev.append(self.device_index)
            else:
                dt.append("cpu")
                dev.append(-1)
        extra: dict[str, Any] = {"device_type": dt, "device": dev}
        if any(s is not None for s in steps):
            extra["step"] = steps
        extra.update(self.bound_columns(evs))
        return extra


def bound_converter(base: type[AscendTraceConverter], scan: TraceScan, **attrs: Any) -> type[AscendTraceConverter]:
    """A converter class carrying one file's first-pass results (and device/rank)."""
    return type(base.__name__, (base,), {"scan": scan, **attrs})


def load_ascend_trace(
    path: Path,
    ctx: ImportContext,
    *,
    device_index: int = 0,
    rank: int | None = None,
    skip: Callable[[Ev], bool] | None = None,
) -> ChromeTraceConverter:
    """Import one Ascend Chrome-trace file; ``skip`` drops events already imported
    from another file (msprof's merged timeline repeats the step trace)."""
    scan = scan_trace(path, ASCEND_FLOW_COLUMNS, ctx)
    attrs: dict[str, Any] = {"device_index": device_index, "default_rank": rank}
    if skip is not None:
        attrs["add_batch"] = _skipping(skip)
    conv = load_chrome_trace(path, ctx, converter=bound_converter(AscendTraceConverter, scan, **attrs))
    if scan.flows_unbound:
        ctx.warn(
            f"{path.name}: {scan.flows_unbound} flow ends enclose no span; those links are kept only as flow events"
        )
    return conv


def _skipping(skip: Callable[[Ev], bool]) -> Callable[[ChromeTraceConverter, list[Ev]], None]:
    def add_batch(self: ChromeTraceConverter, evs: list[Ev]) -> None:
        ChromeTraceConverter.add_batch(self, [e for e in evs if not skip(e)])

    return add_batch


# -- detection --------------------------------------------------------------------------------

_ASCEND_MARKS = (b'"Ascend Hardware"', b'"AscendCL@', b'"CANN"', b'"Overlap Analysis"', b'"Step Trace"', b'"HCCL"')
_STR_TS = re.compile(rb'"ts"\s*:\s*"\d')


def looks_like_ascend_trace(head: bytes) -> Detection:
    """Is this the start of an Ascend Chrome-trace file (a bare array of events)?"""
    text = head.lstrip()
    if text[:1] != b"[":
        return no("not a bare JSON array")
    if b'"ph"' not in head:
        return no("a JSON array without trace events")
    if any(m in head for m in _ASCEND_MARKS):
        return yes("a trace-event array with Ascend process names")
    if _STR_TS.search(head):
        return yes("a trace-event array with string timestamps (torch_npu / MindSpore trace_view)")
    return no("a trace-event array with no Ascend process and numeric timestamps")


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder (see ascend-pt / ascend-msprof)")
    with path.open("rb") as f:
        head = f.read(1 << 16)
    return looks_like_ascend_trace(head)


def _load(path: Path, ctx: ImportContext) -> None:
    load_ascend_trace(path, ctx)


IMPORTER = Importer(
    name=NAME,
    description="Ascend Chrome-trace JSON: torch_npu/MindSpore trace_view.json, msprof timeline JSON",
    detect=_detect,
    load=_load,
    patterns=("trace_view.json", "msprof_*.json", "task_time_*.json", "hccl_*.json", "step_trace_*.json"),
)
