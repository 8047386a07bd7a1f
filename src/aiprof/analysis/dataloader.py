"""Time in data loading per step, and how much of it leaves the device idle.

``dataloader`` (one row per rank and step; a rank without steps is one row, step null)
    rank, step, step_us (µs), loader_calls (DataLoader spans: kind dataloader, i.e.
    ``enumerate(DataLoader)#...__next__`` ranges, and host ops whose name holds
    'DataLoader'), dataloader_us (union of their time inside the step), idle_in_loader_us
    (time inside those spans when no device of the rank is busy: the device waits
    for input; null where the rank has no device work, so nothing says whether a
    device waited: overview.measured_ranks, the overview's rule), gap_before_us (host time between the end of the previous step and the
    start of this one: the step interval; null for the first step).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from .base import analyser
from .common import fetch
from .communication import intersect
from .overview import measured_ranks
from .ranks import device_busy, step_windows

_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("step_us", pa.float64()),
        ("loader_calls", pa.int64()),
        ("dataloader_us", pa.float64()),
        ("idle_in_loader_us", pa.float64()),
        ("gap_before_us", pa.float64()),
    ]
)


#: What counts as data loading: DataLoader spans, and host ops named for the DataLoader.
LOADER_SQL = (
    "device_type = 'cpu' AND (kind = 'dataloader' "
    "OR (kind IN ('cpu_op', 'user_annotation', 'python') AND name LIKE '%DataLoader%'))"
)


def loader_spans(profile: Profile) -> dict[str, np.ndarray]:
    """The data loading spans: rank, ts, te (ns)."""
    return fetch(profile, f"SELECT rank, ts, ts + dur AS te FROM events WHERE {LOADER_SQL}")


@analyser(
    "dataloader",
    "Data loading",
    default_sort=("rank", "step"),
    units={"step_us": "µs", "dataloader_us": "µs", "idle_in_loader_us": "µs", "gap_before_us": "µs"},
)
def dataloader(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank and step (see the module doc for the columns)."""
    w = step_windows(profile)
    busy = device_busy(profile)
    has_device = measured_ranks(profile, "device")
    dl = loader_spans(profile)
    rows: list[dict[str, Any]] = []
    empty = np.zeros(0, dtype=np.int64)
    for r in np.unique(w["rank"]):
        sel = np.flatnonzero(w["rank"] == r)
        sel = sel[np.argsort(w["start"][sel])]
        w0, w1 = w["start"][sel], w["end"][sel]
        dsel = dl["rank"] == r
        ls, le = iv.merge(dl["ts"][dsel], dl["te"][dsel])
        loader = iv.covered(ls, le, w0, w1)
        bs, be = busy.get(int(r), (empty, empty))
        # The device waits for input where the loader runs and nothing is busy.
        xs, xe = intersect(ls, le, bs, be)
        idle_arr = loader - iv.covered(xs, xe, w0, w1)
        starts = dl["ts"][dsel]
        for j, i in enumerate(sel):
            calls = int(((starts >= w0[j]) & (starts < w1[j])).sum())
            rows.append(
                {
                    "rank": int(r),
                    "step": int(w["step"][i]) if w["step"][i] >= 0 else None,
                    "step_us": int(w1[j] - w0[j]) / 1000.0,
                    "loader_calls": calls,
                    "dataloader_us": int(loader[j]) / 1000.0,
                    "idle_in_loader_us": int(idle_arr[j]) / 1000.0 if int(r) in has_device else None,
                    "gap_before_us": max(int(w0[j] - w1[j - 1]), 0) / 1000.0
                    if j > 0 and w["step"][i] >= 0 and w["step"][sel[j - 1]] == w["step"][i] - 1
                    else None,
                }
            )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
