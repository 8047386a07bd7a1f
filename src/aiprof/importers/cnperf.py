"""Cambricon CNPerf ``cnperf-cli timechart`` Chrome-trace JSON.

Quirks handled: a ``metadata`` block before ``traceEvents`` (device name, core count,
peak bandwidth and FLOP/s -> profile.json devices; the UTC start -> the time origin);
an empty ``{}`` first event (dropped: it holds nothing); unsorted µs float timestamps
relative to the ``start_tracing`` marker; STRING pids and tids ("Device0 task[Async]",
"[PID 138269] Ctx:1 Q:1") -> stable integer ids with the strings kept in the tracks
table; flow events host -> device -> ``correlation`` on the host call and on the
device task. Device tasks have ``device_type = 'mlu'``; the device index is the N of
"DeviceN"; memcpy bytes and bandwidth come from ``args`` where CNPerf writes them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ImportFormatError
from .ascend.trace import FlowBoundConverter, scan_trace
from .base import Detection, ImportContext, Importer, no, yes
from .kineto import Args, ChromeTraceConverter, Ev, load_chrome_trace

NAME = "cnperf"
#: Devices one CNPerf capture can describe (a count past this is damage).
MAX_DEVICES = 4096

_DEVICE_RE = re.compile(r"Device\s*(\d+)", re.IGNORECASE)
#: CNPerf categories -> kind; a device task's category names what it is.
CATEGORY_KINDS: dict[str, str] = {
    "kernel": "kernel",
    "memcpy": "memcpy",
    "memcpy_async": "memcpy",
    "memset": "memset",
    "notifier": "sync",
    "notify": "sync",
    "atomic_operation": "sync",
    "host_func": "other",
    "cnpx": "user_annotation",
    "overhead": "other",
}
_SIZE_KEYS = ("size", "bytes", "Bytes", "Size", "copy_size", "memcpy_size")


class CnperfArgs(msgspec.Struct):
    """The CNPerf ``args`` keys that become columns."""

    dimx: int | None = None
    dimy: int | None = None
    dimz: int | None = None
    size: int | float | None = None
    bytes: int | float | None = None
    Size: int | float | None = None
    copy_size: int | float | None = None
    bandwidth: int | float | str | None = None


_CN_LIST = msgspec.json.Decoder(list[CnperfArgs])


class CnperfConverter(FlowBoundConverter):
    """Chrome-trace converter for CNPerf: MLU device tasks, string ids, flows."""

    importer_name = NAME

    def __init__(self, ctx: ImportContext, header: dict[str, Any]) -> None:
        super().__init__(ctx, header)
        self.vendor = "mlu"
        self.vendor_known = True
        self._threads: set[tuple[Any, str]] = set()

    def apply_header(self, header: dict[str, Any]) -> None:
        # The metadata block replaces Kineto's deviceProperties.
        meta = self.ctx.writer.meta
        if self.rank not in meta["ranks"]:
            meta["ranks"].append(self.rank)
        md = header.get("metadata")
        if isinstance(md, dict) and not any(
            d.get("type") == "mlu" and d.get("rank") == self.rank for d in meta["devices"]
        ):
            meta["devices"].extend(device_records(md, self.rank))
            sysinfo = md.get("systemInformation")
            if isinstance(sysinfo, dict):
                host = _strip_keys(sysinfo).get("hostname")
                if host and host not in meta["hosts"]:
                    meta["hosts"].append(host)
            meta.setdefault("trace_info", {})["cnperf"] = {
                k: v for k, v in _strip_keys(md.get("programInformation") or {}).items()
            }

    def add_batch(self, evs: list[Ev]) -> None:
        # CNPerf writes an empty {} first: no phase, no name, nothing to keep.
        kept = [e for e in evs if e.ph or e.name is not None or e.ts is not None]
        for e in kept:
            if isinstance(e.tid, str):
                self._threads.add((e.pid, e.tid))
        super().add_batch(kept)

    def write_tracks(self) -> None:
        """String tids name threads of their process, not processes of their own."""
        pids = set()
        for pid, tid in self._threads:
            ipid = self.int_id(pid)
            pids.add(pid)
            self.track_names.setdefault((ipid, self.int_id(tid)), {}).setdefault("name", tid)
        for _pid, tid in self._threads:
            if tid not in pids:
                self._str_ids.pop(tid, None)
        super().write_tracks()

    def is_device(self, pid: Any) -> bool:
        return isinstance(pid, str) and _DEVICE_RE.search(pid) is not None

    def classify(self, cats: list[str | None], names: list[str], pids: list[Any]) -> list[str]:
        out: list[str] = []
        for c, n, p in zip(cats, names, pids, strict=True):
            cl = (c or "").lower()
            if self.is_device(p):
                out.append(CATEGORY_KINDS.get(cl, "kernel" if not cl else "other"))
            elif (n.startswith(("cnrt", "cn")) and n[2:3].isupper()) or n.startswith("cnnl"):
                out.append("runtime")
            else:
                out.append(CATEGORY_KINDS.get(cl, "other") if cl else "other")
        return out

    def refine(self, evs: list[Ev], kinds: list[str], args: list[Args]) -> dict[str, Any]:
        raws = [bytes(e.args) if e.args else b"{}" for e in evs]
        try:
            cn = _CN_LIST.decode(b"[" + b",".join(raws) + b"]")
        except (msgspec.DecodeError, RecursionError):
            cn = [CnperfArgs()] * len(evs)
        dt: list[str] = []
        dev: list[int] = []
        grid: list[str | None] = []
        nbytes: list[int | None] = []
        for e, k, a in zip(evs, kinds, cn, strict=True):
            m = _DEVICE_RE.search(e.pid) if isinstance(e.pid, str) else None
            if m:
                dt.append("mlu")
                dev.append(int(m.group(1)))
            else:
                dt.append("cpu")
                dev.append(-1)
            grid.append(f"[{a.dimx},{a.dimy},{a.dimz}]" if a.dimx is not None else None)
            size = next((v for v in (a.size, a.bytes, a.Size, a.copy_size) if v is not None), None)
            nbytes.append(int(size) if size is not None and k in ("memcpy", "memset") else None)
        extra: dict[str, Any] = {"device_type": dt, "device": dev, "grid": grid, "bytes": nbytes}
        extra.update(self.bound_columns(evs))
        return extra


def _strip_keys(d: object) -> dict[str, Any]:
    """CNPerf numbers its keys for display ("09#device name"): drop the number. What is
    not an object reads as an empty one."""
    return {k.split("#", 1)[-1]: v for k, v in d.items()} if isinstance(d, dict) else {}


def _find(obj: Any, key: str) -> Any:
    """First value under ``key`` anywhere in a nested JSON object."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            got = _find(v, key)
            if got is not None:
                return got
    return None


def device_records(md: dict[str, Any], rank: int) -> list[dict[str, Any]]:
    """profile.json device entries from the CNPerf metadata block.

    ``peak_bandwidth_Bps`` from ``max_bandwidth`` (CNPerf gives MB/s); ``peak_flops``
    per data type from ``max_perform`` (zeros mean unknown and are left out).
    """
    sysinfo = _strip_keys(md.get("systemInformation") or {})
    basic = _find(md, "m_dev_basic_info") or {}
    ids = _find(md, "m_real_ids")
    count = sysinfo.get("device count") or (len(ids) if isinstance(ids, list) else 1)
    ids = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)] if isinstance(ids, list) else None
    count = count if isinstance(count, int) and 0 < count <= MAX_DEVICES else 1
    indices = ids or list(range(count))
    name = basic.get("dev_name") or sysinfo.get("device name")
    peak: dict[str, float] = {}
    perf = basic.get("max_perform")
    if isinstance(perf, dict):
        # CNPerf reports TOPS-style peaks per data type; the unit is not written down.
        peak = {k: float(v) for k, v in perf.items() if isinstance(v, (int, float)) and v > 0}
    bw = basic.get("max_bandwidth")
    out = []
    for i in indices:
        rec: dict[str, Any] = {
            "rank": rank,
            "type": "mlu",
            "index": i,
            "name": name,
            "vendor": "Cambricon",
            "memory_bytes": None,
            "core_count": basic.get("core_count"),
            "cluster_count": basic.get("cluster_count"),
            "core_frequency_mhz": basic.get("core_frequency"),
            "driver_version": sysinfo.get("driver version") or _find(md, "m_driver_vsersion"),
        }
        if isinstance(bw, (int, float)) and bw > 0:
            rec["peak_bandwidth_Bps"] = float(bw) * 1e6
        if peak:
            rec["peak_flops"] = peak
        out.append(rec)
    return out


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder, not a CNPerf timechart")
    with path.open("rb") as f:
        head = f.read(1 << 16)
    if head.lstrip()[:1] != b"{":
        return no("not a JSON object")
    if b'"traceEvents"' not in head and b'"metadata"' not in head:
        return no("a JSON object without traceEvents or metadata")
    if b"cnperf" in head.lower() or b'"m_dev_basic_info"' in head or b"dltrace" in head:
        return yes("a Chrome trace with a CNPerf metadata block")
    return no("a JSON object without CNPerf metadata in its first 64 KiB")


def _load(path: Path, ctx: ImportContext) -> None:
    scan = scan_trace(path, None, ctx)
    cls = type("CnperfConverter", (CnperfConverter,), {"scan": scan})
    conv: ChromeTraceConverter = load_chrome_trace(path, ctx, converter=cls)
    if not sum(conv.counts_ph.values()):
        raise ImportFormatError(f"{path}: the timechart holds no events")
    if scan.flows_unbound:
        ctx.warn(
            f"{path.name}: {scan.flows_unbound} flow ends enclose no span; those links are kept only as flow events"
        )
    md = conv.header.get("metadata")
    utc = _find(md, "utcStartTimestamp") if isinstance(md, dict) else None
    meta = ctx.writer.meta
    if (
        isinstance(utc, int)
        and utc > 0
        and ctx.origin_raw_ns is not None
        and meta.get("sources", [{}])[0].get("importer") == NAME
    ):
        # Timestamps count from the start_tracing marker, whose UTC time CNPerf records.
        meta["time_origin_ns"], meta["clock"] = utc + ctx.origin_raw_ns, "unix"


IMPORTER = Importer(
    name=NAME,
    description="Cambricon CNPerf timechart JSON (cnperf-cli timechart)",
    detect=_detect,
    load=_load,
    patterns=("cnperf*.json", "*timechart*.json"),
)
