"""Derived tables: what the overview needs, computed once at import (docs/store.md).

A profile may hold, beside its event tables, small Parquet tables derived from them:

``step_totals.parquet`` (one row per rank and step window, analysis/ranks.py's windows)
    rank, step (-1: no steps, the rank's whole span), whole_span (the window is a rank's
    whole span, not a step), start, end (ns), the breakdown categories' ns (kernel, memcpy,
    memset, communication, runtime, dataloader, cpu_exec), device_busy (kernel + memcpy +
    memset, the breakdown's), busy and compute (device time inside the window, all devices
    of the rank: the steps view's device figures). A figure whose source the rank's
    events lack is null, never 0 (analysis/overview.py: ``measured_of``): the device
    figures without device work, cpu_exec and dataloader without host operators...
``device_totals.parquet`` (one row per rank with device work in HTA's window)
    rank, span, busy, compute (ns): HTA's temporal breakdown before it is split into
    idle / compute / non_compute.
``stream_idle`` (one row per rank, device and stream with device work in HTA's window)
    the idle view's rows (analysis/idle.py), as that view gives them.
``kernel_stats`` (one row per kernel name)
    the kernels view's rows (analysis/kernels.py), as that view gives them. Its medians
    and most common shapes do not combine across profiles: profiles opened together
    compute the kernels view from their events.

profile.json says which version of them the profile holds (``derived``:
``{"version": N, "tables": {name: rows}, "ranks": [...]}``). A profile without them, or with another
version, is read from its events as before (analysis/derived.py), so an old profile
still opens and gives the same answers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

#: Profiles with fewer events are not given derived tables at import: deriving costs a
#: fixed ~0.5 s here (a profile opened, six scans), which would double a small import,
#: while their views from the events take a few tens of ms. An upgrade (``aiprof import
#: OLD.aiprof``) derives whatever the size.
DERIVE_MIN_EVENTS = 50_000

#: Bumped whenever a derived table, or the rule it was computed by, changes (3: a
#: figure not measured is null in step_totals, no longer 0).
DERIVED_VERSION = 3

_CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")

DERIVED_SCHEMAS: dict[str, pa.Schema] = {
    "step_totals": pa.schema(
        [("rank", pa.int64()), ("step", pa.int64()), ("whole_span", pa.bool_()), ("start", pa.int64())]
        + [("end", pa.int64())]
        + [(c, pa.int64()) for c in (*_CATEGORIES, "device_busy", "busy", "compute")]
    ),
    "device_totals": pa.schema(
        [("rank", pa.int64()), ("span", pa.int64()), ("busy", pa.int64()), ("compute", pa.int64())]
    ),
    "stream_idle": pa.schema(
        [("rank", pa.int32()), ("device", pa.int32()), ("stream", pa.int64()), ("ops", pa.int64())]
        + [(c, pa.float64()) for c in ("span_us", "busy_us", "idle_us", "host_wait_us", "kernel_wait_us")]
        + [("other_us", pa.float64()), ("idle_pct", pa.float64())]
    ),
    "kernel_stats": pa.schema(
        [("name", pa.string()), ("kind", pa.string()), ("tensor_core", pa.bool_()), ("count", pa.int64())]
        + [(c, pa.float64()) for c in ("total_us", "mean_us", "median_us", "min_us", "max_us", "pct")]
        + [("grid", pa.string()), ("block", pa.string())]
        + [("registers_per_thread", pa.int64()), ("shared_memory_bytes", pa.int64()), ("occupancy_pct", pa.float64())]
        + [("devices", pa.string()), ("streams", pa.string()), ("ranks", pa.string())]
    ),
}

#: Derived tables of one profile alone (their rows do not combine across profiles).
_ALONE = ("kernel_stats",)

#: Derived columns on the profile's time axis (shifted when profiles are opened together).
_TIMED = {"step_totals": ("start", "end")}


def write_derived(folder: Path, meta: dict[str, Any], tables: dict[str, pa.Table]) -> None:
    """Write ``tables`` (each of DERIVED_SCHEMAS) into ``folder`` and note them in ``meta``
    (with the ranks they hold, so profiles opened together are checked without a read).

    Each file is written beside its final name and renamed, so a profile being upgraded
    in place never shows half a table."""
    rows: dict[str, int] = {}
    ranks: set[int] = set()
    for name, schema in DERIVED_SCHEMAS.items():
        t = tables[name].select(schema.names).cast(schema)
        tmp = folder / f".{name}.parquet.tmp-{os.getpid()}"
        pq.write_table(t, tmp, compression="zstd")
        os.replace(tmp, folder / f"{name}.parquet")
        rows[name] = t.num_rows
        if "rank" in t.column_names:
            ranks |= set(pc.unique(t.column("rank")).to_pylist())
    meta["derived"] = {"version": DERIVED_VERSION, "tables": rows, "ranks": sorted(ranks)}


def has_derived(folder: Path, meta: dict[str, Any]) -> bool:
    """True when ``folder`` holds this aiprof's version of every derived table."""
    d = meta.get("derived")
    if not isinstance(d, dict) or d.get("version") != DERIVED_VERSION or not isinstance(d.get("ranks"), list):
        return False
    return all((folder / f"{name}.parquet").is_file() for name in DERIVED_SCHEMAS)


def read_derived(paths: list[Path], metas: list[dict[str, Any]], name: str) -> pa.Table | None:
    """The derived table ``name`` of profiles opened together, on their shared time axis;
    None when one of them lacks it, when two hold the same rank (their events then
    combine in ways per-profile totals cannot: the caller computes from the events), or
    for a table of ``_ALONE`` when more than one profile is open."""
    if not paths or (len(paths) > 1 and name in _ALONE):
        return None
    if not all(has_derived(p, m) for p, m in zip(paths, metas, strict=True)):
        return None
    seen: set[int] = set()
    for m in metas:
        ranks = {int(r) for r in m["derived"]["ranks"]}
        if ranks & seen:
            return None
        seen |= ranks
    origin = min(int(m.get("time_origin_ns", 0)) for m in metas)
    schema = DERIVED_SCHEMAS[name]
    if len(paths) == 1:
        t = pq.read_table(paths[0] / f"{name}.parquet").cast(schema)
        files = [str(paths[0] / f"{name}.parquet")]
        names = pa.array(files * t.num_rows, pa.string())
    else:
        # One threaded scan of every profile's file (a job's 1,000 ranks: a third of the
        # time of reading them one by one), in the profiles' order, with each row's file.
        files = [str(p / f"{name}.parquet") for p in paths]
        got = ds.dataset(files, format="parquet").to_table(columns=[*schema.names, "__filename"])
        names = got.column("__filename")
        t = got.drop_columns(["__filename"]).cast(schema)
    shifts = {f: int(m.get("time_origin_ns", 0)) - origin for f, m in zip(files, metas, strict=True)}
    if _TIMED.get(name) and any(shifts.values()):
        by_row = pa.array([shifts[f] for f in names.to_pylist()], pa.int64())
        for col in _TIMED[name]:
            t = t.set_column(t.schema.get_field_index(col), col, pc.add(t.column(col), by_row))
    return t
