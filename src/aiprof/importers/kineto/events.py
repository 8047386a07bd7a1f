"""The Kineto event path: decoded events -> store rows, by the rules of :mod:`.rules`.

Other Chrome-trace producers (cnperf, Ascend, MindSpore's legacy traces, aiprof's own
recorder) reuse :class:`ChromeTraceConverter` and override its classification.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import orjson

from .. import jsondoc
from ..base import ImportContext
from ..timeconv import us_to_ns
from .decode import EMPTY_ARGS, Args, Ev, decode_args
from .rules import (
    AIPROF_BASE_KEY,
    C10_DEVICE_TYPES,
    DEVICE_SIDE,
    DRAWN_SAMPLES_CAT,
    ORIGIN_EVENTS,
    device_record,
    flow_placement,
    is_launch_flow,
    kind_for,
    origin,
    own_classification,
    placement,
    transfer_bytes,
    vendor_of_devices,
    vendor_of_spans,
)

NAME = "kineto"
_STREAM_RE = re.compile(r"stream\s*(\d+)", re.IGNORECASE)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class ChromeTraceConverter:
    """Turns decoded Chrome-trace events into store rows, batch by batch."""

    importer_name = NAME

    def __init__(self, ctx: ImportContext, header: dict[str, Any]) -> None:
        self.ctx = ctx
        self.header = header
        self.rank = ctx.default_rank
        self.vendor = "cuda"
        #: Whether the header or a span has told the vendor (else it is still guessed).
        self.vendor_known = False
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
            self.note_vendor(vendor_of_devices([str(p.get("name", "")) for p in props if isinstance(p, dict)]))
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

    def note_vendor(self, vendor: str | None) -> None:
        """Take the vendor a rule found (None: it found none)."""
        if vendor is not None:
            self.vendor, self.vendor_known = vendor, True

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
        return placement(kinds, cats, pids, [a.device for a in args], self.vendor)

    def add_batch(self, evs: list[Ev]) -> None:
        if self.ctx.origin_raw_ns is None and evs:
            # The earliest time of the first ORIGIN_EVENTS events becomes ts = 0 (later
            # ones may still be earlier in an unsorted file: those get ts < 0).
            ts, ok = us_to_ns([e.ts for e in evs[:ORIGIN_EVENTS] if e.ph != "M"])
            first = origin(ts[ok])
            if first is not None:
                self.ctx.origin(first)
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
        return decode_args(raws)

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
        if any(e.aiprof_synthetic for e in evs):
            kept = [e for e in evs if not (e.aiprof_synthetic and e.cat == DRAWN_SAMPLES_CAT)]
            if len(kept) < len(evs):
                # Drawn from the samples table (which a timechart does not hold): not spans.
                self.ctx.warn(
                    f"{len(evs) - len(kept)} Python sample slices drawn by `aiprof timechart` left out "
                    "(pictures of samples, not recorded spans)"
                )
            evs = kept
            if not evs:
                return
        names = [n if isinstance(n, str) else ("" if n is None else str(n)) for n in (e.name for e in evs)]
        cats = [e.cat for e in evs]
        if not self.vendor_known:
            self.note_vendor(vendor_of_spans(cats, names))
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
            kinds, dt, dev = _own(evs, kinds, dt, dev)
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
            "bytes": transfer_bytes(kinds, [a.bytes for a in args]),
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
        self._paired(
            [str(e.name or "") for e in evs],
            [e.cat for e in evs],
            [e.pid for e in evs],
            [self.int_id(e.tid) for e in evs],
            np.array([d[1] for d in done], dtype=np.int64),
            np.array([d[2] for d in done], dtype=np.int64),
            [e.args for e in evs],
        )

    def finish(self) -> None:
        """Spans still open at the end (B without E) are kept, with dur = 0 and a warning."""
        left = [(k, item) for k, stack in self._open.items() for item in stack]
        self._open.clear()
        if not left:
            return
        self.ctx.warn(f"{len(left)} B events never closed; kept with dur = 0")
        self._paired(
            [i[1] for _, i in left],
            [i[2] for _, i in left],
            [k[0] for k, _ in left],
            [k[1] for k, _ in left],
            np.array([i[0] for _, i in left], dtype=np.int64),
            np.zeros(len(left), dtype=np.int64),
            [msgspec.Raw(i[3]) for _, i in left],
        )

    def _paired(
        self,
        names: list[str],
        cats: list[str | None],
        pids_raw: list[Any],
        tids: list[int],
        ts: np.ndarray,
        dur: np.ndarray,
        raws: list[msgspec.Raw],
    ) -> None:
        """Spans made of B/E pairs (or a B left open): classified and written."""
        pids = [self.int_id(p) for p in pids_raw]
        kinds = self.classify(cats, names, pids_raw)
        args = self._decode_args(raws)
        dt, dev = self.device_of(kinds, cats, pids, args)
        self._write_events(kinds, dt, dev, pids, tids, cats, names, ts, dur, raws, args)

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
                launch = launch_cats[c] = is_launch_flow(c)
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
            raws.append(jsondoc.raw(info))  # ids past 64 bits too
        dt, dev = flow_placement([e.ph for e in evs], cats, pids, self.vendor)
        args = [EMPTY_ARGS] * len(evs)
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
                kinds, dts, devs = _own(rest, kinds, dts, devs)
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
        written = self.ctx.tracks_written
        for (pid, tid), rec in sorted(self.track_names.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            p = procs.get(pid, {})
            labels = str(p.get("labels") or "")
            row = {
                "rank": self.rank,
                "pid": pid,
                "tid": tid if tid is not None else -1,
                "process_name": p.get("name") or (labels or None),
                "thread_name": rec.get("name") if tid is not None else None,
                "sort_index": rec.get("sort_index") if isinstance(rec.get("sort_index"), int) else None,
            }
            # Another trace of this import (a window of the same process) wrote it already.
            key = tuple(row.values())
            if key not in written:
                written.add(key)
                rows.append(row)
        if rows:
            self.ctx.writer.append("tracks", {k: [r.get(k) for r in rows] for k in rows[0]})


def _own(evs: list[Ev], kinds: list[str], dt: list[str], dev: list[int]) -> tuple[list[str], list[str], list[int]]:
    return own_classification(
        kinds,
        dt,
        dev,
        [e.aiprof_kind for e in evs],
        [e.aiprof_device_type for e in evs],
        [e.aiprof_device for e in evs],
    )


def _args_text(r: msgspec.Raw | bytes | str) -> str | None:
    """The args column's JSON text from what the decoder or a flow writer gave."""
    if isinstance(r, str):
        return r
    return bytes(r).decode("utf-8", "replace") if r else None


#: Grid and block texts by their dimensions (kernels repeat a few shapes).
_DIMS: dict[tuple[int, ...], str] = {}


def _dims(v: list[int] | None) -> str | None:
    if not v:
        return None
    key = tuple(v)
    text = _DIMS.get(key)
    if text is None:
        text = "[" + ",".join(str(x) for x in v) + "]"
        if len(_DIMS) < 4096:
            _DIMS[key] = text
    return text
