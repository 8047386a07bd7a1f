"""The Kineto rules, stated once: kind, device placement, bytes, vendor and time origin.

Both paths call these: the event path (:mod:`.events`) over Python lists, the columnar
path (:mod:`.columnar`) over Arrow arrays; where a rule needs both forms, they sit side
by side here and share their constants. Decoders only decode; this decides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...store.vocabulary import DATALOADER_PREFIX, PROFILER_STEP_PREFIX, is_collective_kernel

if TYPE_CHECKING:
    import pyarrow as pa

#: Header key of `aiprof timechart`: its ts count from baseTimeNanoseconds.
AIPROF_BASE_KEY = "aiprofTsFromBase"
#: Category of the Python sample slices `aiprof timechart` draws from the samples table
#: (marked ``aiprof_synthetic``): drawn, not recorded, so an import leaves them out.
DRAWN_SAMPLES_CAT = "python_sample"
#: Kinds whose events carry a transfer size (``bytes``); other events' ``bytes`` args are
#: something else (a tensor size, an allocation).
BYTES_KINDS = ("memcpy", "memset")

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
#: trace (metadata left out), the same for both engines whatever their batches: each
#: holds its first reads until it has this many (or the trace ends).
ORIGIN_EVENTS = 1 << 16

#: Kinds whose events run on a device queue (stream), not a host thread.
DEVICE_SIDE = frozenset({"kernel", "memcpy", "memset", "collective", "sync"})
#: Categories placed on the device whatever their kind.
DEVICE_CATS = frozenset({"gpu_user_annotation"})
#: Flow categories whose id is the launch correlation (host call -> device work).
LAUNCH_FLOW_CATS = frozenset({"ac2g", "async_npu", "hosttodevice"})

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


# -- kind ---------------------------------------------------------------------------


def own_classification(
    kinds: list[str],
    dt: list[str],
    dev: list[int],
    own_kinds: Sequence[str | None],
    own_types: Sequence[str | None],
    own_devices: Sequence[int | None],
) -> tuple[list[str], list[str], list[int]]:
    """Kinds and devices as an aiprof export wrote them, where it did and they are valid."""
    from ...store.schema import DEVICE_TYPES, KINDS

    kinds, dt, dev = list(kinds), list(dt), list(dev)
    for i, (k, t, d) in enumerate(zip(own_kinds, own_types, own_devices)):
        if k in KINDS:
            kinds[i] = k
        if t in DEVICE_TYPES:
            dt[i] = t
        if d is not None:
            dev[i] = d
    return kinds, dt, dev


# -- device placement -----------------------------------------------------------------


def _int_or(v: str | int | None, default: int) -> int:
    """Integer of a value that may be written as '0x1' or '3'."""
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return default
    return default if v is None else int(v)


def placement(
    kinds: Sequence[str],
    cats: Sequence[str | None],
    pids: Sequence[int],
    devices: Sequence[int | str | None],
    vendor: str,
) -> tuple[list[str], list[int]]:
    """(device_type, device) of spans: device-side kinds and categories run on the
    ``args.device`` of the vendor's devices (else the pid), the rest on the host (-1)."""
    dt: list[str] = []
    dev: list[int] = []
    for k, c, p, d in zip(kinds, cats, pids, devices):
        if k in DEVICE_SIDE or c in DEVICE_CATS:
            dt.append(vendor)
            dev.append(d if isinstance(d, int) else _int_or(d, p))
        else:
            dt.append("cpu")
            dev.append(-1)
    return dt, dev


def flow_placement(
    phs: Sequence[str], cats: Sequence[str | None], pids: Sequence[int], vendor: str
) -> tuple[list[str], list[int]]:
    """(device_type, device) of flow events: a launch flow's end (``ac2g`` but not its
    start ``s``) is on the device its pid names; every other flow on the host."""
    dt = ["cpu" if ph == "s" else (vendor if c and c.lower() == "ac2g" else "cpu") for ph, c in zip(phs, cats)]
    return dt, [-1 if d == "cpu" else p for d, p in zip(dt, pids)]


def is_launch_flow(cat: str | None) -> bool:
    """Does a flow of this category carry the launch correlation as its id?"""
    return (cat or "").lower() in LAUNCH_FLOW_CATS


def placement_arrow(
    kind: pa.Array, cat: pa.Array, ph: pa.Array, pid: pa.Array, device: pa.Array, vendor: str
) -> tuple[pa.Array, pa.Array]:
    """:func:`placement` and :func:`flow_placement` over Arrow columns (rows of spans,
    instants and flows); ``device``: ``args.device`` as an integer or null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    is_flow = pc.is_in(ph, value_set=pa.array(["s", "f", "t"], pa.string()))
    lcat = pc.utf8_lower(pc.fill_null(cat, ""))
    span_dev = pc.or_(
        pc.is_in(kind, value_set=pa.array(sorted(DEVICE_SIDE), pa.string())),
        pc.fill_null(pc.is_in(cat, value_set=pa.array(sorted(DEVICE_CATS), pa.string())), False),
    )
    flow_dev = pc.and_(pc.not_equal(ph, "s"), pc.equal(lcat, "ac2g"))
    dev_side = pc.if_else(is_flow, flow_dev, span_dev)
    dev = pc.if_else(
        dev_side,
        pc.if_else(is_flow, pid, pc.coalesce(pc.cast(device, pa.int64()), pid)),
        pa.scalar(-1, pa.int64()),
    )
    return pc.if_else(dev_side, vendor, "cpu"), dev


def launch_correlation_arrow(cat: pa.Array, flow_id: pa.Array) -> pa.Array:
    """:func:`is_launch_flow` over Arrow: a flow's id where it is a launch correlation."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lcat = pc.utf8_lower(pc.fill_null(cat, ""))
    launch = pc.is_in(lcat, value_set=pa.array(sorted(LAUNCH_FLOW_CATS), pa.string()))
    return pc.if_else(launch, flow_id, pa.nulls(len(flow_id), pa.int64()))


# -- bytes ------------------------------------------------------------------------------


def transfer_bytes(kinds: Sequence[str], nbytes: Sequence[int | float | None]) -> list[int | None]:
    """The ``bytes`` column: a transfer's size, for memcpy and memset only."""
    return [int(b) if b is not None and k in BYTES_KINDS else None for k, b in zip(kinds, nbytes)]


def transfer_bytes_arrow(kind: pa.Array, nbytes: pa.Array) -> pa.Array:
    """:func:`transfer_bytes` over Arrow columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = pc.is_in(kind, value_set=pa.array(list(BYTES_KINDS), pa.string()))
    return pc.if_else(keep, nbytes, pa.nulls(len(nbytes), pa.int64()))


# -- vendor -----------------------------------------------------------------------------


def vendor_of_devices(names: Sequence[str]) -> str | None:
    """The vendor that ``deviceProperties`` names show; "cuda" for other named devices,
    None when no device is named."""
    text = " ".join(names)
    if re.search(r"AMD|Radeon|Instinct|MI\d{3}", text):
        return "rocm"
    if re.search(r"HPU|Gaudi", text):
        return "hpu"
    if re.search(r"MTIA", text):
        return "mtia"
    return "cuda" if text else None


def vendor_of_spans(cats: Sequence[str | None], names: Sequence[Any]) -> str | None:
    """The vendor that spans show, None if they show none: an MTIA category, else (as
    HTA does) the first runtime call named ``hip*`` (ROCm) or ``cuda*``."""
    distinct = set(cats)  # a few categories: each looked at once, not once per span
    if any(c and c.lower().startswith("mtia") for c in distinct):
        return "mtia"
    runtime = {c for c in distinct if c and "runtime" in c.lower()}
    if not runtime:
        return None
    for c, n in zip(cats, names):
        if c in runtime and isinstance(n, str):
            if n.startswith("hip"):
                return "rocm"
            if n.startswith("cuda"):
                return "cuda"
    return None


def vendor_of_spans_arrow(cat: pa.Array, name: pa.Array) -> str | None:
    """:func:`vendor_of_spans` over the Arrow columns of spans (the few rows that can
    decide are handed to it)."""
    import pyarrow.compute as pc

    lcat = pc.utf8_lower(pc.fill_null(cat, ""))
    mtia = pc.starts_with(lcat, "mtia")
    runtime = pc.and_(
        pc.match_substring(lcat, "runtime"), pc.or_(pc.starts_with(name, "hip"), pc.starts_with(name, "cuda"))
    )
    cats: list[str | None] = []
    names: list[Any] = []
    for mask in (mtia, runtime):
        hit = pc.indices_nonzero(pc.fill_null(mask, False))
        if len(hit):
            i = hit[0].as_py()
            cats.append(cat[i].as_py())
            names.append(name[i].as_py())
    return vendor_of_spans(cats, names)


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


# -- time origin ------------------------------------------------------------------------


def origin(ts_ns: np.ndarray) -> int | None:
    """The time origin (ts = 0) from the ns times of a trace's first ORIGIN_EVENTS
    events (metadata left out, unusable times removed): their earliest; None if none."""
    return int(ts_ns.min()) if len(ts_ns) else None


def time_origin(base: Any, first_ns: int) -> tuple[int, str]:
    """(time_origin_ns, clock) of a trace whose ts = 0 is ``first_ns`` as written:
    Unix time past ``baseTimeNanoseconds`` when the header has one, Unix time when the
    times are that large already, else the trace's own clock."""
    if isinstance(base, int) and not isinstance(base, bool) and base > 0:
        return base + first_ns, "unix"
    if first_ns > 10**18:
        return first_ns, "unix"
    return first_ns, "trace"
