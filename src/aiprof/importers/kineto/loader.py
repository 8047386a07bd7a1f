"""The Kineto importer: detection, and a trace streamed through the columnar path or
the event path, then its header, tracks and time origin written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ImportFormatError
from ..base import Detection, ImportContext, Importer, no, yes
from ..jsonstream import TraceStream
from .decode import Ev, decode_events, try_decode
from .events import NAME, ChromeTraceConverter
from .rules import ORIGIN_EVENTS, time_origin


def load_chrome_trace(
    path: Path, ctx: ImportContext, converter: type[ChromeTraceConverter] = ChromeTraceConverter
) -> ChromeTraceConverter:
    """Stream a Chrome-trace file through ``converter`` into the context's writer.

    Kineto traces take the columnar path (:mod:`.columnar`) when DuckDB can read
    their events; otherwise, and for the producers that refine the rules (subclasses),
    every event goes through ``converter`` here.
    """
    from . import columnar

    use_columnar = ctx.columnar and converter is ChromeTraceConverter and columnar.wanted(path)
    got = columnar.load(path, ctx, converter) if use_columnar else None
    if got is not None:
        return _finish_trace(path, ctx, got[0], got[1], converter)
    stream = TraceStream(path)
    conv: ChromeTraceConverter | None = None
    batches = stream.batches(try_decode, lambda b: decode_events(b, ctx))
    done = 0
    early_rank = False
    held: list[Ev] = []
    """The first events, held until there are ORIGIN_EVENTS of them: the time origin is
    taken from as many events as the columnar path takes it from, whatever the reads."""
    for evs in batches:
        if conv is None:
            conv = converter(ctx, stream.header)
            early_rank = "distributedInfo" in stream.header
        if ctx.origin_raw_ns is None and len(held) + len(evs) < ORIGIN_EVENTS:
            held.extend(evs)
        else:
            conv.add_batch(held + evs if held else evs)
            held = []
        ctx.progress(stream.bytes_in - done)
        done = stream.bytes_in
    if conv is not None and held:
        conv.add_batch(held)
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
    meta["time_origin_ns"], meta["clock"] = time_origin(base, ctx.origin_raw_ns or 0)
    meta["partial"] = meta.get("partial", False) or not stream.complete
    extra: dict[str, Any] = {}
    if converter.importer_name == NAME:
        # Which process it traced: windows of one process are one rank (process.py).
        from .process import trace_process

        proc = trace_process(path).as_source()
        if proc:
            extra["process"] = proc
    ctx.writer.add_source(
        converter.importer_name, path, complete=stream.complete, events_by_phase=conv.counts_ph, **extra
    )
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
        from .. import gunzip

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
