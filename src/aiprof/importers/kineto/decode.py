"""Chrome-trace events as written: msgspec structs and their lenient decoders."""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from ..base import ImportContext
from ..jsonstream import split_events


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
EMPTY_ARGS = Args()


def decode_args(raws: list[msgspec.Raw]) -> list[Args]:
    """The typed keys of each ``args``; an odd one keeps what can be kept."""
    try:
        # One decoder call for the whole batch: per-call overhead dominates otherwise.
        return _ARGS_LIST_DECODER.decode(b"[" + b",".join([r if r else b"{}" for r in raws]) + b"]")
    except (msgspec.DecodeError, TypeError, RecursionError):
        out = []
        for r in raws:
            try:
                out.append(_ARGS_DECODER.decode(r) if r else EMPTY_ARGS)
            except (msgspec.DecodeError, RecursionError):
                out.append(_lenient_args(r))
        return out


def _lenient_args(raw: msgspec.Raw | bytes) -> Args:
    """The typed keys of an ``args`` object with a key of an odd type (Triton writes
    ``"grid": "grid(100,)"``): that key is None, the others are kept."""
    try:
        obj = orjson.loads(bytes(raw))
    except (orjson.JSONDecodeError, RecursionError):
        return EMPTY_ARGS
    if not isinstance(obj, dict):
        return EMPTY_ARGS
    kept: dict[str, Any] = {}
    for key, value in obj.items():
        try:
            kept[key] = value
            _ARGS_DECODER.decode(orjson.dumps(kept))
        except (msgspec.DecodeError, TypeError, RecursionError):
            del kept[key]
    return _ARGS_DECODER.decode(orjson.dumps(kept))


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
    # Text that does not parse: its bytes and the events it seems to hold (an
    # unterminated string makes the text after it one unreadable piece, up to where the
    # structure comes right again; that piece holds many events, not one).
    lost_bytes = lost_events = 0
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
                lost_bytes += len(piece)
                lost_events += max(1, piece.count(b'"ph"'))
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
    if lost_events > bad:
        ctx.warn(
            f"{bad} malformed {'stretch' if bad == 1 else 'stretches'} of the trace skipped "
            f"({lost_bytes:,} bytes, about {lost_events:,} events: "
            "an unterminated string or a broken event leaves the text after it unreadable)"
        )
    elif bad:
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
