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

A device written in slices (``KIND_D_M_1.json`` ... ``KIND_D_M_10.json``, one name but
the last number) is merged per kind before import: an event that a later slice repeats
word for word (the step trace each slice holds again) is one event; repeats inside one
slice are kept. Several device folders (``PROF_*/device_N``, or ``device_N`` folders
side by side, or a folder of ``PROF_*`` folders of one job) are one profile: each device
is a rank (the ``rank_id`` of its info.json when the folders' rank ids are distinct, else
its device id), its times put on Unix time by its own ``start_info``.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from ...errors import ImportFormatError
from .. import jsondoc
from ..base import Detection, ImportContext, Importer, no, yes
from ..kineto import Ev
from .trace import load_ascend_trace, looks_like_ascend_trace

NAME = "ascend-msprof"
STEP_TRACE_CATS = frozenset({"Iteration Time", "FP_BP Time", "Iteration Refresh", "Reduce", "Data_aug Bound"})
_INFO_RE = re.compile(r"^info\.json\.(\d+)$")


_SLICE_RE = re.compile(r"^(.+)_(\d+)\.json$")


def _has_info(d: Path) -> bool:
    return any(_INFO_RE.match(q.name) for q in d.iterdir())


def _device_dirs(path: Path) -> list[Path]:
    """The device folders under ``path``: itself when it holds info.json.N, else its
    subfolders that do, else theirs (a folder of ``PROF_*`` folders)."""
    if _has_info(path):
        return [path]
    subs = sorted(p for p in path.iterdir() if p.is_dir())
    found = [p for p in subs if _has_info(p)]
    if found:
        return found
    return [q for p in subs for q in sorted(p.iterdir()) if q.is_dir() and _has_info(q)]


def slice_groups(files: list[Path]) -> dict[str, list[Path]]:
    """Timeline files by kind: ``msprof_0_2_1.json`` ... ``msprof_0_2_10.json`` are one
    kind (``msprof_0_2``), their slices in number order."""
    groups: dict[str, list[tuple[int, Path]]] = {}
    for f in files:
        m = _SLICE_RE.match(f.name)
        key, n = (m.group(1), int(m.group(2))) if m else (f.stem, 0)
        groups.setdefault(key, []).append((n, f))
    return {k: [f for _, f in sorted(v)] for k, v in groups.items()}


def merge_slices(slices: list[Path], out: Path) -> tuple[int, int]:
    """Write the events of ``slices`` as one JSON array at ``out``, an event repeated from
    an earlier slice once; returns (events written, repeats dropped)."""
    seen: Counter[bytes] = Counter()
    merged: list[Any] = []
    dropped = 0
    for f in slices:
        try:
            events = orjson.loads(f.read_bytes())
        except (OSError, orjson.JSONDecodeError) as err:
            raise ImportFormatError(f"{f}: not readable JSON ({err})") from None
        if isinstance(events, dict):
            events = events.get("traceEvents") or []
        mine: Counter[bytes] = Counter()
        for ev in events if isinstance(events, list) else []:
            key = orjson.dumps(ev, option=orjson.OPT_SORT_KEYS)
            mine[key] += 1
            if mine[key] <= seen[key]:
                dropped += 1
                continue
            merged.append(ev)
        seen |= mine
    out.write_bytes(orjson.dumps(merged))
    return len(merged), dropped


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


def _info(dev: Path) -> dict[str, Any]:
    infos = sorted(p for p in dev.iterdir() if _INFO_RE.match(p.name))
    return _read_json(infos[0]) if infos else {}


def device_ranks(devs: list[Path]) -> list[int | None]:
    """The rank of each device folder: its ``rank_id`` when every folder has a distinct
    one, else (several folders) its device id; None for one folder without rank_id."""
    infos = [_info(d) for d in devs]
    ids = [i.get("rank_id") for i in infos]
    if all(_rank_id(r) for r in ids) and len(set(ids)) == len(ids):
        return [int(r) for r in ids if isinstance(r, int)]
    if len(devs) == 1:
        return [None]
    out: list[int | None] = []
    for i in infos:
        recs = device_record(i, 0)
        out.append(int(recs[0]["index"]) if recs and isinstance(recs[0].get("index"), int) else None)
    return out


def _load_device(dev: Path, ctx: ImportContext, rank: int | None, *, tmp: Path, clock: dict[str, int]) -> int | None:
    """Import one device folder; returns its rank. ``clock`` holds the Unix offset of
    the device that fixed the time origin (the first one with a start_info)."""
    meta = ctx.writer.meta
    info = _info(dev)
    devices = device_record(info, 0)
    index = int(devices[0]["index"]) if devices and isinstance(devices[0].get("index"), int) else 0
    for d in devices:
        d["rank"] = rank if rank is not None else 0
    meta["devices"].extend(devices)
    host = {k: info.get(k) for k in ("hostname", "OS", "cpuNums", "memoryTotal", "hwtype") if k in info}
    if host and host not in meta["hosts"]:
        meta["hosts"].append(host)
    tl = dev / "timeline"
    files = sorted(tl.glob("*.json")) if tl.is_dir() else []
    files = [f for f in files if _is_trace(f)]
    if not files:
        ctx.warn(
            f"{dev.name}: no timeline JSON (run msprof --export=on to write it); nothing but the device record imported"
        )
        return rank
    groups = slice_groups(files)
    kinds: dict[str, Path] = {}
    for key, slices in groups.items():
        if len(slices) == 1:
            kinds[key] = slices[0]
            continue
        out = tmp / f"{dev.parent.name}_{dev.name}_{key}_{len(slices)}_slices.json"
        n, dropped = merge_slices(slices, out)
        kinds[key] = out
        meta.setdefault("import_notes", []).append(
            f"{dev.name}: {len(slices)} slices of {key} merged ({n} events; {dropped} repeated in later slices counted once)"
        )
    reps = list(kinds.values())
    merged = [f for k, f in kinds.items() if k.startswith("msprof")]
    steps = [f for k, f in kinds.items() if k.startswith("step_trace")]
    chosen = [*merged, *steps] if merged else reps
    left = [k for k, f in kinds.items() if f not in chosen]
    if left:
        meta.setdefault("import_notes", []).append(
            f"{dev.name}: {', '.join(left)} repeat msprof_*.json and were not imported again"
        )
    offset = clock_offset_ns(dev)
    base = ctx.origin_raw_ns
    if base is not None and offset is not None and "offset" in clock:
        # Another device fixed the origin: shift this one's clock onto it.
        ctx.origin_raw_ns = base + clock["offset"] - offset
    for f in chosen:
        skip = _skip_step_trace if f in merged and steps else None
        load_ascend_trace(f, ctx, device_index=index, rank=rank, skip=skip)
    if base is not None:
        ctx.origin_raw_ns = base
    elif offset is not None and ctx.origin_raw_ns is not None and ctx.origin_raw_ns < 10**18:
        clock["offset"] = offset
    if "offset" in clock and ctx.origin_raw_ns is not None:
        meta["time_origin_ns"], meta["clock"] = ctx.origin_raw_ns + clock["offset"], "unix"
    summary = dev / "summary"
    if summary.is_dir():
        ctx.warn(f"{dev.name}: summary/ CSVs are not imported (the timeline holds the same tasks)")
    return rank


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
    meta = ctx.writer.meta
    ranks: list[int] = []
    clock: dict[str, int] = {}
    wanted = device_ranks(devs)
    if len(devs) == 1 and ctx.rank is not None:
        wanted = [ctx.rank]
    elif len(devs) > 1 and ctx.rank is not None:
        ctx.warn(f"{path.name}: {len(devs)} device folders: each keeps its own rank, --rank is not applied")
    given, ctx.rank = ctx.rank, (ctx.rank if len(devs) == 1 else None)
    try:
        with tempfile.TemporaryDirectory(prefix="aiprof-msprof-") as tmp:
            for d, want in zip(devs, wanted, strict=True):
                r = _load_device(d, ctx, want, tmp=Path(tmp), clock=clock)
                if r is not None:
                    ranks.append(r)
    finally:
        ctx.rank = given
    if len(devs) > 1:
        meta["ranks"] = sorted(set(ranks))
        meta["world_size"] = meta.get("world_size") or len(set(ranks))
    ctx.writer.add_source(NAME, path, devices=[f"{d.parent.name}/{d.name}" for d in devs])


IMPORTER = Importer(
    name=NAME,
    description="CANN msprof PROF_*/device_N folder (timeline JSON, info.json, start_info)",
    detect=_detect,
    load=_load,
    patterns=("PROF_*", "device_*"),
)
