"""What a data-loading fix has to work with: where the loading runs, and the CPU the
job and the rest of the host used during the steps.

``loader_cpu`` (one row per rank with sampled steps)
    rank; loading_samples (samples of the data_loading phase inside steps, see
    analysis/phases.py); worker_samples (those of them waiting for DataLoader worker
    processes: a ``_MultiProcessingDataLoaderIter`` frame on the stack, so the loading
    already runs outside the main process); proc_cpu_pct (the rank's process CPU
    during its steps, 100 = one core: the recorder's ``proc_cpu`` counter),
    children_cpu_pct (that of its child processes, the DataLoader workers among them,
    100 = one core: ``children_cpu``, recorded from 2026-12-07; null where not recorded
    or the rank had no child process) and sys_cpu_pct (the host's, 100 = every core
    busy: ``sys_cpu``), the means of the counter samples inside the rank's step windows,
    null where not recorded. A reading
    less than half the median polling interval after the previous one is left out: over
    next to no time psutil reads 0%.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch

_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("loading_samples", pa.int64()),
        ("worker_samples", pa.int64()),
        ("proc_cpu_pct", pa.float64()),
        ("children_cpu_pct", pa.float64()),
        ("sys_cpu_pct", pa.float64()),
    ]
)


def _in_steps(profile: Profile, metric: str) -> dict[int, float]:
    """Rank -> mean of ``metric``'s host samples inside the rank's step windows."""
    from .ranks import step_windows

    if not profile.tables.get("counters"):
        return {}
    c = fetch(
        profile,
        "SELECT rank, ts, value FROM counters WHERE metric = ? AND device_type = 'cpu' ORDER BY rank, ts",
        [metric],
    )
    w = step_windows(profile)
    out: dict[int, float] = {}
    for r in np.unique(c["rank"]).tolist():
        sel = c["rank"] == r
        ts, v = c["ts"][sel], c["value"][sel]
        if len(ts) > 2:
            # A reading taken right after another covers next to no time and reads 0% or
            # 100% whatever the load: recordings made before the recorder stopped taking
            # them (record/job/collectors/system.py), and imported counters.
            gap = np.diff(ts)
            keep = np.concatenate([[True], gap >= 0.5 * float(np.median(gap))])
            ts, v = ts[keep], v[keep]
        wr = np.flatnonzero(w["rank"] == r)
        if not len(wr):
            continue
        order = wr[np.argsort(w["start"][wr])]
        st, en = w["start"][order], w["end"][order]
        i = np.searchsorted(st, ts, side="right") - 1
        ic = np.clip(i, 0, None)
        inside = (i >= 0) & (ts < en[ic])
        if inside.any():
            out[int(r)] = float(v[inside].mean())
    return out


@analyser(
    "loader_cpu",
    "Data loading: in the main process or in workers, and the CPU during the steps",
    default_sort=("rank",),
    units={"proc_cpu_pct": "%", "children_cpu_pct": "%", "sys_cpu_pct": "%"},
)
def loader_cpu(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank with sampled steps (see the module doc)."""
    from .phases import PHASES, classify

    c = classify(profile)
    ok = (c.window >= 0) & (c.phase == PHASES.index("data_loading"))
    proc, host = _in_steps(profile, "proc_cpu"), _in_steps(profile, "sys_cpu")
    kids = _in_steps(profile, "children_cpu")
    rows = []
    for r in np.unique(c.rank[c.window >= 0]).tolist():
        mine = ok & (c.rank == r)
        rows.append(
            {
                "rank": r,
                "loading_samples": int(mine.sum()),
                "worker_samples": int((mine & c.in_workers).sum()),
                "proc_cpu_pct": proc.get(r),
                "children_cpu_pct": kids.get(r),
                "sys_cpu_pct": host.get(r),
            }
        )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
