"""CANN msprof output: a ``PROF_*/device_N`` folder (or the ``PROF_*`` folder above).

- ``info.json.N`` -> the device record (AI Core / AI CPU counts, frequencies) and the
  host (name, CPU, memory); its ``rank_id`` is the rank unless ``--rank`` says;
- ``start_info.N`` / ``end_info.N`` -> the clock: timeline timestamps are µs of the
  device's CLOCK_MONOTONIC_RAW, and ``collectionTimeBegin`` (Unix µs) taken together
  with ``clockMonotonicRaw`` (ns) puts them on Unix time;
- ``timeline/*.json`` -> events through the Ascend trace converter. ``msprof_*.json`` is
  the merged view of the task, HCCL and CANN files, so when present it is imported
  alone (plus ``step_trace_*.json``, whose iterations it repeats only in part; its own
  step-trace spans are then left out so no step is counted twice).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import ImportFormatError
from . import jsondoc
from .ascend_trace import load_ascend_trace, looks_like_ascend_trace
from .base import Detection, ImportContext, Importer, no, yes
from .kineto import Ev

NAME = "ascend-msprof"
STEP_TRACE_CATS = frozenset({"Iteration Time", "FP_BP Time", "Iteration Refresh", "Reduce", "Data_aug Bound"})
_INFO_RE = re.compile(r"^info\.json\.(\d+)$")


def _device_dirs(path: Path) -> list[Path]:
    """The device folders under ``path``: itself when it holds info.json.N."""
    if any(_INFO_RE.match(p.name) for p in path.iterdir()):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and any(_INFO_RE.match(q.name) for q in p.iterdir()))


def _detect(path: Path) -> Detection:
    if not path.is_dir():
        return no("not a folder (msprof output is a PROF_*/device_N folder)")
    devs = _device_dirs(path)
    if not devs:
        return no("no info.json.N device record in it or in its subfolders")
    if not any(
        (d / "timeline").is_dir() or (d / "start_info.0").exists() or list(d.glob("start_info.*")) for d in devs
    ):
        return no("device folders without a timeline or start_info")
    return yes(f"a CANN msprof output folder ({len(devs)} device folder(s))")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = jsondoc.load(path)
    except OSError as e:
        raise ImportFormatError(f"{path}: not readable ({e.strerror})") from None
    if not isinstance(obj, dict):
        raise ImportFormatError(f"{path}: expected a JSON object")
    return obj


def device_record(info: dict[str, Any], rank: int) -> list[dict[str, Any]]:
    """profile.json device entries from info.json.N."""
    out = []
    for d in jsondoc.as_list(info.get("DeviceInfo")):
        if not isinstance(d, dict):
            continue
        rec: dict[str, Any] = {
            "rank": rank,
            "type": "npu",
            "index": d.get("id"),
            "name": d.get("chip_name") or d.get("name") or info.get("chip_name"),
            "vendor": "Huawei",
            "memory_bytes": None,
        }
        for k in (
            "ai_core_num",
            "aiv_num",
            "ai_cpu_core_num",
            "ts_cpu_core_num",
            "ctrl_cpu",
            "aic_frequency",
            "aiv_frequency",
            "hwts_frequency",
        ):
            if k in d:
                rec[k] = d[k]
        out.append(rec)
    return out


def _rank_id(v: object) -> bool:
    """A rank number info.json.N may hold (not a bool, not past int32)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31


def _whole(v: object) -> int:
    """An integer written as a number or as digits (start_info has both)."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"not an integer: {type(v).__name__}")
    return int(v)


def clock_offset_ns(dev: Path) -> int | None:
    """Unix ns minus CLOCK_MONOTONIC_RAW ns, from start_info.N (None when absent)."""
    for p in sorted(dev.glob("start_info.*")):
        try:
            st = _read_json(p)
            begin_us = _whole(st["collectionTimeBegin"])
            mono_ns = _whole(st["clockMonotonicRaw"])
        except (KeyError, ValueError, TypeError, ImportFormatError):
            continue
        return begin_us * 1000 - mono_ns
    return None


def _load_device(dev: Path, ctx: ImportContext) -> None:
    meta = ctx.writer.meta
    infos = sorted(p for p in dev.iterdir() if _INFO_RE.match(p.name))
    info = _read_json(infos[0]) if infos else {}
    rank = ctx.rank if ctx.rank is not None else info.get("rank_id") if _rank_id(info.get("rank_id")) else None
    rank_ = rank if rank is not None else 0
    devices = device_record(info, rank_)
    meta["devices"].extend(devices)
    host = {k: info.get(k) for k in ("hostname", "OS", "cpuNums", "memoryTotal", "hwtype") if k in info}
    if host and host not in meta["hosts"]:
        meta["hosts"].append(host)
    index = int(devices[0]["index"]) if devices and isinstance(devices[0].get("index"), int) else 0
    tl = dev / "timeline"
    files = sorted(tl.glob("*.json")) if tl.is_dir() else []
    files = [f for f in files if _is_trace(f)]
    if not files:
        ctx.warn(
            f"{dev.name}: no timeline JSON (run msprof --export=on to write it); nothing but the device record imported"
        )
        return
    merged = [f for f in files if f.name.startswith("msprof")]
    steps = [f for f in files if f.name.startswith("step_trace")]
    chosen = [*merged, *steps] if merged else files
    left = [f.name for f in files if f not in chosen]
    if left:
        meta.setdefault("import_notes", []).append(
            f"{dev.name}: {', '.join(left)} repeat msprof_*.json and were not imported again"
        )
    offset = clock_offset_ns(dev)
    for f in chosen:
        skip = _skip_step_trace if f in merged and steps else None
        load_ascend_trace(f, ctx, device_index=index, rank=rank, skip=skip)
    if offset is not None and ctx.origin_raw_ns is not None and ctx.origin_raw_ns < 10**18:
        meta["time_origin_ns"], meta["clock"] = ctx.origin_raw_ns + offset, "unix"
    summary = dev / "summary"
    if summary.is_dir():
        ctx.warn(f"{dev.name}: summary/ CSVs are not imported (the timeline holds the same tasks)")


def _skip_step_trace(e: Ev) -> bool:
    return (e.cat or "") in STEP_TRACE_CATS


def _is_trace(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    return bool(looks_like_ascend_trace(head)) or (head.lstrip()[:1] == b"[" and b'"ph"' in head)


def _load(path: Path, ctx: ImportContext) -> None:
    devs = _device_dirs(path) if path.is_dir() else []
    if not devs:
        raise ImportFormatError(f"{path}: not a CANN msprof PROF_* / device_N folder")
    for d in devs:
        _load_device(d, ctx)
    ctx.writer.add_source(NAME, path, devices=[d.name for d in devs])


IMPORTER = Importer(
    name=NAME,
    description="CANN msprof PROF_*/device_N folder (timeline JSON, info.json, start_info)",
    detect=_detect,
    load=_load,
    patterns=("PROF_*", "device_*"),
)
