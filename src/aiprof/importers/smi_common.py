"""What the importers of saved SMI tool output share: reading the head, writing counters.

Every SMI importer turns readings into counters rows (one per device, instant and
metric) with the metric names and units of :data:`aiprof.devices.METRICS`. Readings
without a timestamp (dmon without ``-o T``, hl-smi tables) are placed sample by sample,
the sampling interval apart: the one the user gave (``aiprof import --interval``), else
the one the log names (dmon's ``-d N`` on its own command line), else one second (dmon's
default), with a warning saying which.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..devices.base import metric_unit
from .base import Detection, ImportContext, no

HEAD_BYTES = 1 << 16
ASSUMED_INTERVAL_NS = 1_000_000_000
VENDORS = {"cuda": "NVIDIA", "rocm": "AMD", "npu": "Huawei", "mlu": "Cambricon", "hpu": "Intel Habana"}


@dataclass
class Reading:
    """One device at one instant, as a parser gave it."""

    ts_ns: int | None
    """Unix ns, or None when the source has no clock."""
    sample: int
    """Ordinal of the sample in the file (used when ts_ns is None)."""
    device: int
    values: dict[str, float | None]
    name: str | None = None


def read_head(path: Path) -> str | Detection:
    """The first 64 KiB as text, or a refusal saying why."""
    if path.is_dir():
        return no("a folder, not a text log")
    try:
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError as e:
        return no(f"cannot read: {e.strerror}")
    if head[:2] == b"\x1f\x8b" or b"\x00" in head:
        return no("binary data, not a text log")
    if head.lstrip()[:1] in (b"{", b"["):
        return no("JSON, not a text log")
    return head.decode("utf-8", errors="replace")


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def sample_ordinals(devices: Iterable[int]) -> list[int]:
    """Sample number of each row of a log that prints one row per device per sample:
    a new sample starts whenever the device index does not increase."""
    out: list[int] = []
    sample, last = -1, None
    for d in devices:
        if last is None or d <= last:
            sample += 1
        last = d
        out.append(sample)
    return out


def write_readings(
    ctx: ImportContext,
    path: Path,
    importer: str,
    device_type: str,
    readings: list[Reading],
    *,
    units: dict[str, str] | None = None,
    problems: Iterable[str] = (),
    interval_s: float | None = None,
    **source: object,
) -> int:
    """Write readings as counters rows; record devices, clock and source. Returns rows.

    ``interval_s``: the sampling interval the log itself names, used when it has no
    timestamps and the user gave none."""
    units = units or {}
    for p in problems:
        ctx.warn(f"{path.name}: {p}")
    timed = [r.ts_ns for r in readings if r.ts_ns is not None]
    meta = ctx.writer.meta
    if timed:
        origin = ctx.origin(min(timed))
        if meta.get("clock") in (None, "unknown"):
            meta["clock"] = "unix"
            meta["time_origin_ns"] = origin
        step_ns = ASSUMED_INTERVAL_NS
    else:
        origin = ctx.origin(0)
        step_ns = _untimed_interval(ctx, path, interval_s, bool(readings))
        source["interval_s"] = step_ns / 1e9
    rank = ctx.default_rank
    cols: dict[str, list[object]] = {k: [] for k in ("rank", "device_type", "device", "ts", "metric", "value", "unit")}
    for r in readings:
        ts = r.ts_ns - origin if r.ts_ns is not None else r.sample * step_ns
        for metric, v in r.values.items():
            if v is None:
                continue
            cols["rank"].append(rank)
            cols["device_type"].append(device_type)
            cols["device"].append(r.device)
            cols["ts"].append(ts)
            cols["metric"].append(metric)
            cols["value"].append(float(v))
            cols["unit"].append(metric_unit(metric) or units.get(metric))
    n = ctx.writer.append("counters", cols) if cols["ts"] else 0
    ctx.tables["counters"] += n
    if rank not in meta["ranks"]:
        meta["ranks"].append(rank)
    known = {(d.get("rank"), d.get("type"), d.get("index")) for d in meta["devices"]}
    for r in readings:
        key = (rank, device_type, r.device)
        if key in known:
            continue
        known.add(key)
        meta["devices"].append(
            {"rank": rank, "type": device_type, "index": r.device, "name": r.name, "vendor": VENDORS.get(device_type)}
        )
    ctx.writer.add_source(importer, path, samples=len({(r.sample, r.ts_ns) for r in readings}), **source)
    return n


def _untimed_interval(ctx: ImportContext, path: Path, stated_s: float | None, warn: bool) -> int:
    """ns between the samples of a log without timestamps, and the warning saying whence."""
    if ctx.sample_interval_ns:
        return ctx.sample_interval_ns
    if stated_s:
        if warn:
            ctx.warn(f"{path.name}: no timestamps; samples placed {stated_s:g} s apart, as the log's command line says")
        return round(stated_s * 1e9)
    if warn:
        ctx.warn(
            f"{path.name}: no timestamps; samples placed {ASSUMED_INTERVAL_NS / 1e9:g} s apart "
            "(give the real interval with aiprof import --interval SECONDS)"
        )
    return ASSUMED_INTERVAL_NS
