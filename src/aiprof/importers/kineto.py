"""PyTorch profiler (Kineto) Chrome-trace JSON: ``.json`` / ``.json.gz``.

Covers every Kineto generation seen in the wild: 2021 categories ("Operator",
"Kernel", "Runtime", "Memcpy"), today's ("cpu_op", "kernel", "cuda_runtime",
"gpu_memcpy", "ac2g" flows, "cuda_sync"), AMD ROCm (HIP names), MTIA/PrivateUse1
runtimes, CPU-only traces, and writers that put timestamps in strings (Ascend's
trace_view.json). Other Chrome-trace producers reuse :class:`ChromeTraceConverter`
and override its classification.

Mapping:
- ``ph: X`` spans and ``B``/``E`` pairs -> events, ``kind`` from the category (table
  below); a category with no home is ``other`` with the category kept in ``cat``;
- ``s``/``f``/``t`` flows -> events of kind ``other`` (their id in ``correlation`` for
  launch flows), so a round trip keeps them;
- ``i``/``I`` instants -> ``instant`` events, except ``[memory]`` -> the memory table;
- ``C`` counters -> counters; ``M`` metadata -> the tracks table;
- ``deviceProperties`` -> devices, ``distributedInfo`` -> rank and world size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from ..errors import ImportFormatError
from ..store.vocabulary import DATALOADER_PREFIX, PROFILER_STEP_PREFIX, is_collective_kernel
from .base import Detection, ImportContext, Importer, no, yes
from .jsonstream import TraceStream, split_events
from .timeconv import us_to_ns

NAME = "kineto"
#: Header key of `aiprof timechart`: its ts count from baseTimeNanoseconds.
AIPROF_BASE_KEY = "aiprofTsFromBase"


class Ev(msgspec.Struct):
    """One Chrome-trace event as written; unknown keys are ignored by design."""

    ph: str = ""
    cat: str | None = None
    name: str | int | float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | str | None = None
    dur: int | float | str | None = None
    id: int | str | None = None
    bp: str | None = None
    s: str | None = None
    args: msgspec.Raw = msgspec.Raw()
    # Written by `aiprof timechart`: the store's own classification, taken back as is.
    aiprof_kind: str | None = None
    aiprof_device_type: str | None = None
    aiprof_device: int | None = None
    aiprof_synthetic: bool | None = None


class Args(msgspec.Struct):
    """The ``args`` keys that become typed columns."""

    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    device: int | str | None = None
    stream: int | str | None = None
    bytes: int | float | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    # [memory] instants
    dev_type: int | None = msgspec.field(name="Device Type", default=None)
    dev_id: int | None = msgspec.field(name="Device Id", default=None)
    addr: int | None = msgspec.field(name="Addr", default=None)
    mbytes: int | None = msgspec.field(name="Bytes", default=None)
    allocated: int | None = msgspec.field(name="Total Allocated", default=None)
    reserved: int | None = msgspec.field(name="Total Reserved", default=None)


_EV_DECODER = msgspec.json.Decoder(list[Ev])
_ARGS_DECODER = msgspec.json.Decoder(Args)
_ARGS_LIST_DECODER = msgspec.json.Decoder(list[Args])
_EMPTY_ARGS = Args()

#: Lower-cased category -> kind. Names refine this below (steps, NCCL, DataLoader).
CATEGORY_KINDS: dict[str, str] = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "user_annotation",
    "python_function": "python",
    "python": "python",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "driver": "driver",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "sync",
    "gc": "gc",
    "dataloader": "dataloader",
    "cpu_instant_event": "instant",
    "mtia_ccp_events": "kernel",
}

#: The time origin (ts = 0) is the earliest time among this many first events of a
#: trace, the same for both engines whatever their batches (a file whose first read
#: holds fewer events uses those).
ORIGIN_EVENTS = 1 << 16

#: Kinds whose events run on a device queue (stream), not a host thread.
DEVICE_SIDE = frozenset({"kernel", "memcpy", "memset", "collective", "sync"})
#: Categories placed on the device whatever their kind.
DEVICE_CATS = frozenset({"gpu_user_annotation"})
#: Flow categories whose id is the launch correlation (host call -> device work).
LAUNCH_FLOW_CATS = frozenset({"ac2g", "async_npu", "hosttodevice"})
_STREAM_RE = re.compile(r"stream\s*(\d+)", re.IGNORECASE)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

#: c10::DeviceType numbers used in [memory] events -> our device_type.
C10_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "rocm", 9: "xpu", 12: "xpu", 14: "hpu", 20: "npu"}


def kind_for(cat: str | None, name: str) -> str:
    """The kind of a span from its category and name (Kineto conventions)."""
    c = (cat or "").lower()
    kind = CATEGORY_KINDS.get(c)
    if kind is None:
        if c.endswith("_runtime"):
            kind = "runtime"
        elif c.endswith("_driver"):
            kind = "driver"
        else:
            return "other"
    if kind == "kernel" and is_collective_kernel(name):
        return "collective"
    if kind in ("user_annotation", "cpu_op") and c != "gpu_user_annotation":
        # gpu_user_annotation is the device-side shadow of a host range, not a step.
        if name.startswith(PROFILER_STEP_PREFIX):
            return "step"
        if name.startswith(DATALOADER_PREFIX):
            return "dataloader"
    return kind


class ChromeTraceConverter:
    """Turns decoded Chrome-trace events into store rows, batch by batch."""

    importer_name = NAME

    def __init__(self, ctx: ImportContext, header: dict[str, Any]) -> None:
        self.ctx = ctx
        self.header = header
        self.rank = ctx.default_rank
        self.vendor = "cuda"
        self._vendor_known = False
        self._str_ids: dict[str, int] = {}
        self._kind_cache: dict[tuple[str | None, str], str] = {}
        self._launch_cats: dict[str | None, bool] = {}
        self._named_pids: set[int] = set()
        self.track_names: dict[tuple[int, int | None], dict[str, Any]] = {}
        self._open: dict[tuple[int, int], list[tuple[int, str, str | None, bytes]]] = {}
        self.counts_ph: dict[str, int] = {}
        self.apply_header(header)

    # -- header ---------------------------------------------------------------------

    def apply_header(self, header: dict[str, Any]) -> None:
        dist = header.get("distributedInfo")
        meta = self.ctx.writer.meta
        if isinstance(dist, dict):
            if self.ctx.rank is None and isinstance(dist.get("rank"), int):
                self.rank = dist["rank"]
            if isinstance(dist.get("world_size"), int):
                meta["world_size"] = dist["world_size"]
            meta["distributed"] = {k: v for k, v in dist.items() if k != "pg_config" or len(str(v)) < 4096}
        if self.rank not in meta["ranks"]:
            meta["ranks"].append(self.rank)
        props = header.get("deviceProperties")
        if isinstance(props, list):
            names = " ".join(str(p.get("name", "")) for p in props if isinstance(p, dict))
            if re.search(r"AMD|Radeon|Instinct|MI\d{3}", names):
                self.vendor, self._vendor_known = "rocm", True
            elif re.search(r"HPU|Gaudi", names):
                self.vendor, self._vendor_known = "hpu", True
            elif re.search(r"MTIA", names):
                self.vendor, self._vendor_known = "mtia", True
            elif names:
                self._vendor_known = True
            known = {(d.get("rank"), d.get("index")) for d in meta["devices"]}
            for p in props:
                if not isinstance(p, dict) or not isinstance(p.get("id"), (int, str, type(None))):
                    continue
                if (self.rank, p.get("id")) in known:
                    continue
                meta["devices"].append(device_record(p, self.rank, self.vendor))
        if header.get(AIPROF_BASE_KEY) is True and isinstance(header.get("baseTimeNanoseconds"), int):
            # aiprof's own timechart: ts are already relative to baseTimeNanoseconds,
            # the exported profile's origin; keeping it makes round trips exact.
            self.ctx.origin(0)
        # Every other top-level key (trace name, time unit, job and host labels, the
        # profiler's INFO log...) is kept as written.
        for key, value in header.items():
            if key not in ("deviceProperties", "distributedInfo", "traceEvents"):
                meta.setdefault("trace_info", {})[key] = value

    def _infer_vendor(self, names: Sequence[Any]) -> None:
        # HTA infers the vendor from runtime symbol names; do the same once.
        for n in names:
            if isinstance(n, str):
                if n.startswith("hip"):
                    self.vendor = "rocm"
                    self._vendor_known = True
                    return
                if n.startswith("cuda"):
                    self._vendor_known = True
                    return

    # -- ids ------------------------------------------------------------------------

    def int_id(self, v: int | str | float | None, *, stream: bool = False) -> int:
        """Integer pid/tid; strings get stable synthetic ids and keep their text as a
        track name (``"stream 7"`` keeps 7)."""
        if isinstance(v, bool) or v is None:
            return 0
        if isinstance(v, int):
            if _INT64_MIN <= v <= _INT64_MAX:
                return v
            v = str(v)
        elif isinstance(v, float):
            if v == v and _INT64_MIN <= v < _INT64_MAX:
                return int(v)
            v = repr(v)
        if stream:
            m = _STREAM_RE.fullmatch(v.strip())
            if m:
                return int(m.group(1))
        try:
            return int(v)
        except ValueError:
            pass
        i = self._str_ids.get(v)
        if i is None:
            i = (1 << 32) + len(self._str_ids)
            self._str_ids[v] = i
        return i

    # -- batches --------------------------------------------------------------------

    def classify(self, cats: list[str | None], names: list[str], pids: list[Any]) -> list[str]:
        """Kind of each span. Subclasses for other producers override this."""
        cache = self._kind_cache
        out: list[str] = []
        for c, n in zip(cats, names):
            key = (c, n)
            k = cache.get(key)
            if k is None:
                k = kind_for(c, n)
                if len(cache) < 200_000:  # names repeat; a trace with unbounded names just misses
                    cache[key] = k
            out.append(k)
        return out

    def refine(self, evs: list[Ev], kinds: list[str], args: list[Args]) -> dict[str, Any]:
        """Hook for other producers, after ``classify``: may rewrite ``kinds`` in place
        from what the decoded ``args`` say, and return extra columns for these spans
        (correlation, external_id, step...). Kineto needs none: no change, no columns."""
        return {}

    def device_of(
        self, kinds: list[str], cats: list[str | None], pids: list[int], args: list[Args]
    ) -> tuple[list[str], list[int]]:
        dt: list[str] = []
        dev: list[int] = []
        vendor = self.vendor
        for k, c, p, a in zip(kinds, cats, pids, args):
            if k in DEVICE_SIDE or c in DEVICE_CATS:
                dt.append(vendor)
                dev.append(a.device if isinstance(a.device, int) else _int_or(a.device, p))
            else:
                dt.append("cpu")
                dev.append(-1)
        return dt, dev

    def add_batch(self, evs: list[Ev]) -> None:
        if self.ctx.origin_raw_ns is None and evs:
            # The earliest time of the first ORIGIN_EVENTS events becomes ts = 0 (later
            # ones may still be earlier in an unsorted file: those get ts < 0).
            ts, ok = us_to_ns([e.ts for e in evs[:ORIGIN_EVENTS] if e.ph != "M"])
            if ok.any():
                self.ctx.origin(int(ts[ok].min()))
        spans: list[Ev] = []
        flows: list[Ev] = []
        other: list[Ev] = []
        for e in evs:
            ph = e.ph
            if ph == "X":
                spans.append(e)
            elif ph in ("s", "f", "t"):
                flows.append(e)
            else:
                other.append(e)
            self.counts_ph[ph] = self.counts_ph.get(ph, 0) + 1
        extra_spans: list[tuple[Ev, Any]] = []
        instants: list[Ev] = []
        for e in other:
            ph = e.ph
            if ph in ("i", "I"):
                instants.append(e)
            elif ph == "C":
                self._counter(e)
            elif ph == "M":
                self._metadata(e)
            elif ph == "B":
                extra_spans.append((e, "B"))
            elif ph == "E":
                extra_spans.append((e, "E"))
            else:
                flows.append(e)  # async/object/sample events: kept as 'other'
        if spans:
            self._spans(spans)
        if extra_spans:
            self._begin_end(extra_spans)
        if flows:
            self._flows(flows)
        if instants:
            self._instants(instants)

    def _name_tracks(self, evs: list[Ev], pids: list[int], tids: list[int]) -> None:
        """A process or thread given by name ("Spans", "Device0 task[Async]") keeps it."""
        if not self._str_ids:
            return
        # Most batches name nothing: a C-level pass over the types decides.
        types = set(map(type, (e.tid for e in evs))) | set(map(type, (e.pid for e in evs)))
        if str not in types:
            return
        for e, p, t in zip(evs, pids, tids):
            if type(e.tid) is str:
                self.track_names.setdefault((p, t), {}).setdefault("name", e.tid)
            if type(e.pid) is str:
                self._named_pids.add(p)

    def _decode_args(self, raws: list[msgspec.Raw]) -> list[Args]:
        try:
            # One decoder call for the whole batch: per-call overhead dominates otherwise.
            return _ARGS_LIST_DECODER.decode(b"[" + b",".join([r if r else b"{}" for r in raws]) + b"]")
        except (msgspec.DecodeError, TypeError, RecursionError):
            out = []
            for r in raws:
                try:
                    out.append(_ARGS_DECODER.decode(r) if r else _EMPTY_ARGS)
                except (msgspec.DecodeError, RecursionError):
                    out.append(_lenient_args(r))
            return out

    def _times(self, evs: list[Ev]) -> tuple[np.ndarray, np.ndarray]:
        ts, ok = us_to_ns([e.ts for e in evs])
        if not ok.all():
            bad = int((~ok).sum())
            self.ctx.warn(f"{bad} events without a usable timestamp were kept at ts = origin")
        if len(ts):
            origin = self.ctx.origin(int(ts[ok].min()) if ok.any() else 0)
            ts = ts - origin
        return ts, ok

    def _spans(self, evs: list[Ev]) -> None:
        names = [n if isinstance(n, str) else ("" if n is None else str(n)) for n in (e.name for e in evs)]
        cats = [e.cat for e in evs]
        if not self._vendor_known:
            if any(c and c.lower().startswith("mtia") for c in cats):
                self.vendor, self._vendor_known = "mtia", True
            else:
                self._infer_vendor([n for n, c in zip(names, cats) if c and "runtime" in c.lower()])
        pids_raw = [e.pid for e in evs]
        pids = [p if type(p) is int else self.int_id(p) for p in pids_raw]
        kinds = self.classify(cats, names, pids_raw)
        raws = [e.args for e in evs]
        args = self._decode_args(raws)
        extra = self.refine(evs, kinds, args)
        tids = [
            t if type(t) is int else self.int_id(t, stream=k in DEVICE_SIDE)
            for t, k in zip((e.tid for e in evs), kinds)
        ]
        self._name_tracks(evs, pids, tids)
        ts, _ = self._times(evs)
        dur, dok = us_to_ns([e.dur for e in evs])
        dur = np.where(dok, dur, 0)
        dt, dev = self.device_of(kinds, cats, pids, args)
        if any(e.aiprof_kind is not None for e in evs):
            kinds, dt, dev = _own_classification(evs, kinds, dt, dev)
        self._write_events(kinds, dt, dev, pids, tids, cats, names, ts, dur, raws, args, extra=extra)

    def _write_events(
        self,
        kinds: list[str],
        dt: list[str],
        dev: list[int],
        pids: list[int],
        tids: list[int],
        cats: list[str | None],
        names: list[str],
        ts: np.ndarray,
        dur: np.ndarray,
        raws: Sequence[msgspec.Raw | bytes | str],
        args: list[Args],
        correlation: list[int | None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        n = len(kinds)
        if correlation is None:
            correlation = [a.correlation for a in args]
        cols = {
            "rank": np.full(n, self.rank, dtype=np.int32),
            "device_type": dt,
            "device": dev,
            "pid": pids,
            "tid": tids,
            "kind": kinds,
            "cat": cats,
            "name": names,
            "ts": ts,
            "dur": dur,
            "correlation": correlation,
            "external_id": [a.external_id if a.external_id is not None else a.external_id_old for a in args],
            "bytes": [
                int(a.bytes) if a.bytes is not None and k in ("memcpy", "memset") else None for a, k in zip(args, kinds)
            ],
            "grid": [_dims(a.grid) if a.grid else None for a in args],
            "block": [_dims(a.block) if a.block else None for a in args],
            "args": [_args_text(r) for r in raws],
        }
        if extra:
            cols.update(extra)
        self.ctx.writer.append("events", cols)
        for k in kinds:
            self.ctx.kinds[k] += 1

    def _begin_end(self, items: list[tuple[Ev, str]]) -> None:
        # Chrome B/E pairs: an E closes the latest open B on the same thread.
        done: list[tuple[Ev, int, int]] = []
        ts_all, _ = self._times([e for e, _ in items])
        for (e, ph), t in zip(items, ts_all):
            key = (self.int_id(e.pid), self.int_id(e.tid))
            stack = self._open.setdefault(key, [])
            if ph == "B":
                stack.append((int(t), str(e.name or ""), e.cat, bytes(e.args)))
                continue
            if not stack:
                self.ctx.warn(f"an E event on pid {e.pid} tid {e.tid} has no matching B; kept as an instant")
                done.append((e, int(t), 0))
                continue
            start, name, cat, raw = stack.pop()
            done.append(
                (Ev(ph="X", cat=cat, name=name, pid=e.pid, tid=e.tid, args=msgspec.Raw(raw)), start, int(t) - start)
            )
        if not done:
            return
        evs = [d[0] for d in done]
        names = [str(e.name or "") for e in evs]
        cats = [e.cat for e in evs]
        pids = [self.int_id(e.pid) for e in evs]
        kinds = self.classify(cats, names, [e.pid for e in evs])
        args = self._decode_args([e.args for e in evs])
        dt, dev = self.device_of(kinds, cats, pids, args)
        self._write_events(
            kinds,
            dt,
            dev,
            pids,
            [self.int_id(e.tid) for e in evs],
            cats,
            names,
            np.array([d[1] for d in done], dtype=np.int64),
            np.array([d[2] for d in done], dtype=np.int64),
            [e.args for e in evs],
            args,
        )

    def finish(self) -> None:
        """Spans still open at the end (B without E) are kept, with dur = 0 and a warning."""
        left = [(k, item) for k, stack in self._open.items() for item in stack]
        self._open.clear()
        if not left:
            return
        self.ctx.warn(f"{len(left)} B events never closed; kept with dur = 0")
        names = [i[1] for _, i in left]
        cats = [i[2] for _, i in left]
        pids = [k[0] for k, _ in left]
        kinds = self.classify(cats, names, pids)
        args = self._decode_args([msgspec.Raw(i[3]) for _, i in left])
        dt, dev = self.device_of(kinds, cats, pids, args)
        self._write_events(
            kinds,
            dt,
            dev,
            pids,
            [k[1] for k, _ in left],
            cats,
            names,
            np.array([i[0] for _, i in left], dtype=np.int64),
            np.zeros(len(left), dtype=np.int64),
            [i[3] for _, i in left],
            args,
        )

    def _flows(self, evs: list[Ev]) -> None:
        # Arrows that `aiprof timechart` drew from correlation were never recorded.
        evs = [e for e in evs if not e.aiprof_synthetic]
        if not evs:
            return
        ts, _ = self._times(evs)
        names = [str(e.name) if e.name is not None else "" for e in evs]
        cats = [e.cat for e in evs]
        pids = [e.pid if type(e.pid) is int else self.int_id(e.pid) for e in evs]
        tids = [e.tid if type(e.tid) is int else self.int_id(e.tid) for e in evs]
        self._name_tracks(evs, pids, tids)
        kinds = ["other"] * len(evs)
        raws: list[bytes | str] = []
        corr: list[int | None] = []
        launch_cats = self._launch_cats
        for e in evs:
            c = e.cat
            launch = launch_cats.get(c)
            if launch is None:
                launch = launch_cats[c] = (c or "").lower() in LAUNCH_FLOW_CATS
            eid = e.id
            corr.append(eid if launch and type(eid) is int else None)
            if not e.args and type(eid) is int and e.ph in ("s", "f", "t"):
                # The common flows, written without a JSON encoder call.
                if e.bp is None:
                    raws.append(f'{{"ph":"{e.ph}","id":{eid}}}')
                    continue
                if e.bp == "e":
                    raws.append(f'{{"ph":"{e.ph}","id":{eid},"bp":"e"}}')
                    continue
            info: dict[str, Any] = {"ph": e.ph}
            if e.id is not None:
                info["id"] = e.id
            if e.bp is not None:
                info["bp"] = e.bp
            if e.args:
                try:
                    info["args"] = orjson.loads(bytes(e.args))
                except (orjson.JSONDecodeError, RecursionError):
                    info["args_raw"] = bytes(e.args).decode("utf-8", "replace")
            raws.append(orjson.dumps(info))
        dt = [
            "cpu" if e.ph == "s" else (self.vendor if c and c.lower() == "ac2g" else "cpu") for e, c in zip(evs, cats)
        ]
        dev = [-1 if d == "cpu" else p for d, p in zip(dt, pids)]
        args = [_EMPTY_ARGS] * len(evs)
        self._write_events(
            kinds, dt, dev, pids, tids, cats, names, ts, np.zeros(len(evs), dtype=np.int64), raws, args, corr
        )

    def _instants(self, evs: list[Ev]) -> None:
        mem = [e for e in evs if e.name == "[memory]"]
        rest = [e for e in evs if e.name != "[memory]"] if mem else evs
        if mem:
            ts, _ = self._times(mem)
            args = self._decode_args([e.args for e in mem])
            self.ctx.writer.append(
                "memory",
                {
                    "rank": np.full(len(mem), self.rank, dtype=np.int32),
                    "device_type": [
                        C10_DEVICE_TYPES.get(a.dev_type if a.dev_type is not None else 0, "cpu") for a in args
                    ],
                    "device": [a.dev_id if a.dev_id is not None else -1 for a in args],
                    "ts": ts,
                    "bytes": [a.mbytes for a in args],
                    "allocated": [a.allocated for a in args],
                    "reserved": [a.reserved for a in args],
                    "addr": [a.addr for a in args],
                    "pid": [self.int_id(e.pid) for e in mem],
                    "tid": [self.int_id(e.tid) for e in mem],
                },
            )
            self.ctx.tables["memory"] += len(mem)
        if rest:
            ts, _ = self._times(rest)
            names = [str(e.name) if e.name is not None else "" for e in rest]
            cats = [e.cat for e in rest]
            pids = [self.int_id(e.pid) for e in rest]
            tids = [self.int_id(e.tid) for e in rest]
            self._name_tracks(rest, pids, tids)
            args = self._decode_args([e.args for e in rest])
            kinds, dts, devs = ["instant"] * len(rest), ["cpu"] * len(rest), [-1] * len(rest)
            if any(e.aiprof_kind is not None for e in rest):
                kinds, dts, devs = _own_classification(rest, kinds, dts, devs)
            self._write_events(
                kinds,
                dts,
                devs,
                pids,
                tids,
                cats,
                names,
                ts,
                np.zeros(len(rest), dtype=np.int64),
                [e.args for e in rest],
                args,
            )

    def _counter(self, e: Ev) -> None:
        ts, _ = self._times([e])
        try:
            values = orjson.loads(bytes(e.args)) if e.args else {}
        except (orjson.JSONDecodeError, RecursionError):
            values = {}
        if not isinstance(values, dict):
            values = {}
        name = str(e.name or "counter")
        rows = [(k, v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not rows:
            self.ctx.warn(f"counter event {name!r} has no numeric value; skipped")
            return
        pid = self.int_id(e.pid)
        self.ctx.writer.append(
            "counters",
            {
                "rank": [self.rank] * len(rows),
                "device_type": ["cpu"] * len(rows),
                # A process named by a string has a synthetic id past int32: no device.
                "device": [pid if -(2**31) <= pid < 2**31 else -1] * len(rows),
                "ts": [int(ts[0])] * len(rows),
                "metric": [name if k in (name, "value") or len(rows) == 1 else f"{name}.{k}" for k, _ in rows],
                "value": [float(v) for _, v in rows],
                "unit": [None] * len(rows),
            },
        )
        self.ctx.tables["counters"] += len(rows)

    def _metadata(self, e: Ev) -> None:
        try:
            a = orjson.loads(bytes(e.args)) if e.args else {}
        except (orjson.JSONDecodeError, RecursionError):
            a = {}
        if not isinstance(a, dict):
            return
        pid = self.int_id(e.pid)
        kind = e.name
        if kind in ("process_name", "process_labels", "process_sort_index"):
            rec = self.track_names.setdefault((pid, None), {})
        elif kind in ("thread_name", "thread_sort_index"):
            rec = self.track_names.setdefault((pid, self.int_id(e.tid, stream=True)), {})
        else:
            return
        if kind.endswith("_name"):
            rec["name"] = a.get("name")
        elif kind.endswith("sort_index"):
            rec["sort_index"] = a.get("sort_index")
        elif kind == "process_labels":
            rec["labels"] = a.get("labels")

    def write_tracks(self) -> None:
        """The tracks table: one row per named process and thread (synthetic ids too)."""
        for text, i in self._str_ids.items():
            # A string pid names its own process when no metadata does.
            if i in self._named_pids:
                self.track_names.setdefault((i, None), {}).setdefault("name", text)
        procs = {pid: rec for (pid, tid), rec in self.track_names.items() if tid is None}
        rows: list[dict[str, Any]] = []
        for (pid, tid), rec in sorted(self.track_names.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            p = procs.get(pid, {})
            labels = str(p.get("labels") or "")
            rows.append(
                {
                    "rank": self.rank,
                    "pid": pid,
                    "tid": tid if tid is not None else -1,
                    "process_name": p.get("name") or (labels or None),
                    "thread_name": rec.get("name") if tid is not None else None,
                    "sort_index": rec.get("sort_index") if isinstance(rec.get("sort_index"), int) else None,
                }
            )
        if rows:
            self.ctx.writer.append("tracks", {k: [r.get(k) for r in rows] for k in rows[0]})


def _own_classification(
    evs: list[Ev], kinds: list[str], dt: list[str], dev: list[int]
) -> tuple[list[str], list[str], list[int]]:
    """Kinds and devices as an aiprof export wrote them, where it did and they are valid."""
    from ..store.schema import DEVICE_TYPES, KINDS

    kinds, dt, dev = list(kinds), list(dt), list(dev)
    for i, e in enumerate(evs):
        if e.aiprof_kind in KINDS:
            kinds[i] = e.aiprof_kind
        if e.aiprof_device_type in DEVICE_TYPES:
            dt[i] = e.aiprof_device_type
        if e.aiprof_device is not None:
            dev[i] = e.aiprof_device
    return kinds, dt, dev


def _lenient_args(raw: msgspec.Raw | bytes) -> Args:
    """The typed keys of an ``args`` object with a key of an odd type (Triton writes
    ``"grid": "grid(100,)"``): that key is None, the others are kept."""
    try:
        obj = orjson.loads(bytes(raw))
    except (orjson.JSONDecodeError, RecursionError):
        return _EMPTY_ARGS
    if not isinstance(obj, dict):
        return _EMPTY_ARGS
    kept: dict[str, Any] = {}
    for key, value in obj.items():
        try:
            kept[key] = value
            _ARGS_DECODER.decode(orjson.dumps(kept))
        except (msgspec.DecodeError, TypeError, RecursionError):
            del kept[key]
    return _ARGS_DECODER.decode(orjson.dumps(kept))


def _args_text(r: msgspec.Raw | bytes | str) -> str | None:
    """The args column's JSON text from what the decoder or a flow writer gave."""
    if isinstance(r, str):
        return r
    return bytes(r).decode("utf-8", "replace") if r else None


def _int_or(v: str | int | None, default: int) -> int:
    """Integer of a value that may be written as '0x1' or '3'."""
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return default
    return default if v is None else int(v)


def _dims(v: list[int] | None) -> str | None:
    if not v:
        return None
    return "[" + ",".join(str(x) for x in v) + "]"


def device_record(p: dict[str, Any], rank: int, vendor: str) -> dict[str, Any]:
    """profile.json device entry from a Kineto deviceProperties item."""
    rec: dict[str, Any] = {
        "rank": rank,
        "type": vendor,
        "index": p.get("id"),
        "name": p.get("name"),
        "vendor": "AMD" if vendor == "rocm" else "NVIDIA" if vendor == "cuda" else None,
        "memory_bytes": p.get("totalGlobalMem"),
    }
    if "computeMajor" in p:
        rec["compute_capability"] = f"{p.get('computeMajor')}.{p.get('computeMinor')}"
    for k in ("numSms", "warpSize", "maxThreadsPerBlock", "sharedMemPerBlock", "regsPerBlock"):
        if k in p:
            rec[k] = p[k]
    return rec


def try_decode(batch: bytes) -> list[Ev] | None:
    """Decode a run of whole events, or None if it is not one (or has odd fields)."""
    try:
        return _EV_DECODER.decode(batch)
    except (msgspec.DecodeError, RecursionError):
        return None


def decode_events(batch: bytes, ctx: ImportContext) -> list[Ev]:
    """Decode a batch of whole events; a malformed event is skipped with a warning."""
    got = try_decode(batch)
    if got is not None:
        return got
    # Slow path: decode one by one so one bad event does not cost the batch.
    bad = 0
    try:
        items = orjson.loads(batch)
    except (orjson.JSONDecodeError, RecursionError):
        # Malformed JSON somewhere in the run: cut it into events by structure and
        # keep every one that parses.
        items = []
        for piece in split_events(batch):
            try:
                items.append(orjson.loads(piece))
            except (orjson.JSONDecodeError, RecursionError):
                bad += 1
        if not items and not bad:
            ctx.warn(f"a run of events could not be parsed; {len(batch)} bytes skipped")
            return []
    out: list[Ev] = []
    conv = msgspec.json.Decoder(Ev)
    for item in items if isinstance(items, list) else []:
        try:
            out.append(conv.decode(orjson.dumps(item)))
        except (msgspec.DecodeError, TypeError, RecursionError):
            ev = _coerce(item)
            if ev is None:
                bad += 1
            else:
                out.append(ev)
    if bad:
        ctx.warn(f"{bad} malformed trace events (not objects or unreadable fields) skipped")
    return out


def _coerce(item: Any) -> Ev | None:
    """Keep what can be kept of an event with odd field types."""
    if not isinstance(item, dict):
        return None

    def scalar(v: Any) -> Any:
        return v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else None

    args = item.get("args")
    return Ev(
        ph=item["ph"] if isinstance(item.get("ph"), str) else "",
        cat=str(item["cat"]) if isinstance(item.get("cat"), (str, int, float)) else None,
        name=scalar(item.get("name")),
        pid=scalar(item.get("pid")),
        tid=scalar(item.get("tid")),
        ts=scalar(item.get("ts")),
        dur=scalar(item.get("dur")),
        id=scalar(item.get("id")),
        args=_raw_args(args),
    )


def _raw_args(args: Any) -> msgspec.Raw:
    """An args object as raw JSON text; nothing for what is not an object or cannot be
    written back (nested past orjson's limit, integers past 64 bits)."""
    if not isinstance(args, dict):
        return msgspec.Raw()
    try:
        return msgspec.Raw(orjson.dumps(args))
    except (orjson.JSONEncodeError, RecursionError):
        return msgspec.Raw()


def load_chrome_trace(
    path: Path, ctx: ImportContext, converter: type[ChromeTraceConverter] = ChromeTraceConverter
) -> ChromeTraceConverter:
    """Stream a Chrome-trace file through ``converter`` into the context's writer.

    Kineto traces take the columnar path (:mod:`.kineto_columnar`) when DuckDB can read
    their events; otherwise, and for the producers that refine the rules (subclasses),
    every event goes through ``converter`` here.
    """
    from . import kineto_columnar

    columnar = ctx.columnar and converter is ChromeTraceConverter and kineto_columnar.wanted(path)
    got = kineto_columnar.load(path, ctx, converter) if columnar else None
    if got is not None:
        return _finish_trace(path, ctx, got[0], got[1], converter)
    stream = TraceStream(path)
    conv: ChromeTraceConverter | None = None
    batches = stream.batches(try_decode, lambda b: decode_events(b, ctx))
    done = 0
    early_rank = False
    for evs in batches:
        if conv is None:
            conv = converter(ctx, stream.header)
            early_rank = "distributedInfo" in stream.header
        conv.add_batch(evs)
        ctx.progress(stream.bytes_in - done)
        done = stream.bytes_in
    if conv is None:
        conv = converter(ctx, stream.header)
    else:
        late = stream.header.get("distributedInfo")
        if not early_rank and isinstance(late, dict) and late.get("rank") not in (None, conv.rank) and ctx.rank is None:
            ctx.warn(
                f"distributedInfo (rank {late.get('rank')}) comes after the events; they keep rank {conv.rank}: "
                "re-import with --rank to set it"
            )
        conv.apply_header(stream.header)
    return _finish_trace(path, ctx, conv, stream, converter)


def _finish_trace(
    path: Path,
    ctx: ImportContext,
    conv: ChromeTraceConverter,
    stream: TraceStream,
    converter: type[ChromeTraceConverter],
) -> ChromeTraceConverter:
    conv.apply_header(stream.header)
    conv.finish()
    conv.write_tracks()
    for p in stream.problems:
        ctx.warn(f"{path.name}: {p}")
    base = stream.header.get("baseTimeNanoseconds")
    meta = ctx.writer.meta
    origin = ctx.origin_raw_ns or 0
    if isinstance(base, int) and base > 0:
        meta["time_origin_ns"], meta["clock"] = base + origin, "unix"
    elif origin > 10**18:
        meta["time_origin_ns"], meta["clock"] = origin, "unix"
    else:
        meta["time_origin_ns"], meta["clock"] = origin, "trace"
    meta["partial"] = meta.get("partial", False) or not stream.complete
    ctx.writer.add_source(converter.importer_name, path, complete=stream.complete, events_by_phase=conv.counts_ph)
    return conv


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder, not a trace file")
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
    except OSError as e:
        return no(f"cannot read: {e.strerror}")
    if head[:2] == b"\x1f\x8b":
        from . import gunzip

        try:
            head = gunzip.head(head, 1 << 16)
        except gunzip.ERRORS:
            return no("gzip data that does not decompress")
    text = head.lstrip()
    if text[:1] == b"{":
        if b'"traceEvents"' in head:
            return yes("a JSON object with traceEvents")
        return no("a JSON object without traceEvents in its first 64 KiB")
    if text[:1] == b"[":
        if b'"ph"' in head:
            return yes("a JSON array of events with ph fields")
        return no("a JSON array whose first 64 KiB hold no trace event (no 'ph')")
    return no("not JSON")


def _load(path: Path, ctx: ImportContext) -> None:
    conv = load_chrome_trace(path, ctx)
    if not sum(conv.counts_ph.values()):
        raise ImportFormatError(f"{path}: the trace holds no events")


IMPORTER = Importer(
    name=NAME,
    description="PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz)",
    detect=_detect,
    load=_load,
    patterns=("*.pt.trace.json", "*.pt.trace.json.gz", "*trace*.json", "*trace*.json.gz", "*.json.gz"),
)
