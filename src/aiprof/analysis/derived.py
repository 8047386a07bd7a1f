"""The derived tables kept in the profile (store/derived.py) and read back.

``derive`` computes them at import from the events, by each view's own rule
(overview.compute_totals, idle.idle_from_events, kernels.kernels_from_events);
``load_totals``, ``windows`` and ``load_rows`` give them back in the shapes the views use,
or None for a profile without them (the views then compute from the events, and answer
the same).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from ..store.derived import DERIVE_MIN_EVENTS, read_derived, write_derived
from .overview import CATEGORIES, MEASURED, Totals, compute_totals, measured

__all__ = [
    "DERIVE_MIN_EVENTS",
    "derive",
    "derived_tables",
    "load_rows",
    "load_totals",
    "tables_of",
    "upgrade",
    "windows",
]


def derive(folder: Path, meta: dict[str, Any]) -> None:
    """Compute the derived tables of the profile in ``folder`` and write them there
    (``meta``, its profile.json, notes them; the caller writes it). Where the events
    defeat the overview's rule, the profile is kept without them, with a warning: its
    views then compute from the events, and say why where they fail."""
    from ..store import open_profile

    with open_profile(folder) as p:
        tables = derived_tables(p, meta)
    if tables is not None:
        write_derived(folder, meta, tables)


def derived_tables(p: Profile, meta: dict[str, Any]) -> dict[str, pa.Table] | None:
    """The derived tables of the opened profile ``p`` (one profile, alone); None, with a
    warning in ``meta``, where the events defeat a view's rule. A rank of a parallel
    import is derived here on the profile its summaries were just read from (its memo
    shares the step windows)."""
    from .idle import idle_from_events
    from .kernels import kernels_from_events

    try:
        totals = compute_totals(p)
        rows = {"stream_idle": idle_from_events(p), "kernel_stats": kernels_from_events(p)}
    except Exception as e:  # the import's tables are whole: never lose them to a view's failure
        first = str(e).splitlines()[0][:200] if str(e) else ""
        meta.setdefault("warnings", []).append(f"the derived tables were not written ({type(e).__name__}: {first})")
        return None
    return tables_of(totals, rows)


def tables_of(totals: Totals, rows: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The derived tables from the overview's totals and the idle and kernels views' rows
    (``stream_idle``, ``kernel_stats``), however computed (cluster/derived_mem.py
    computes them from a rank's events in memory)."""
    w, b, dev, per = totals
    step_totals: dict[str, Any] = {
        "rank": w["rank"],
        "step": w["step"],
        "whole_span": w["whole_span"],
        "start": w["ts"],
        "end": w["ts"] + w["dur"],
    }
    # A figure whose source the rank's events lack is null (overview.measured_of).
    dm = ~measured(b, "device")
    step_totals |= {c: pa.array(b[c], pa.int64(), mask=~measured(b, c)) for c in CATEGORIES}
    step_totals["device_busy"] = pa.array(b["device_busy"], pa.int64(), mask=dm)
    step_totals |= {c: pa.array(per[c], pa.int64(), mask=dm) for c in ("busy", "compute")}
    return {"step_totals": pa.table(step_totals), "device_totals": pa.table(dev)} | rows


def load_rows(profile: Profile, name: str) -> pa.Table | None:
    """The derived table ``name`` (a view's own rows), or None without it."""
    return profile.memo(f"derived:{name}", lambda: read_derived(profile.paths, profile.metas, name))


def _tables(profile: Profile) -> dict[str, dict[str, np.ndarray]] | None:
    def read() -> dict[str, dict[str, np.ndarray]] | None:
        st, dt = load_rows(profile, "step_totals"), load_rows(profile, "device_totals")
        if st is None or dt is None:
            return None
        # Null: not measured (overview.measured_of); the arrays hold 0 there, and the
        # masks say which (as compute_totals gives them).
        s = {
            c: (st.column(c) if st.column(c).null_count == 0 else st.column(c).fill_null(0)).to_numpy()
            for c in st.column_names
        }
        for c in CATEGORIES:
            s[MEASURED + c] = st.column(c).is_valid().to_numpy()
        s[MEASURED + "device"] = st.column("busy").is_valid().to_numpy()
        # The windows' order from the events: step windows by rank and start, then the
        # ranks without steps by rank (already so for one profile; a stable sort keeps it).
        order = np.lexsort((s["start"], s["rank"], s["whole_span"]))
        d = {c: dt.column(c).to_numpy() for c in dt.column_names}
        by_rank = np.argsort(d["rank"], kind="stable")
        return {"steps": {k: v[order] for k, v in s.items()}, "device": {k: v[by_rank] for k, v in d.items()}}

    return profile.memo("derived_tables", read)


def windows(profile: Profile) -> dict[str, np.ndarray] | None:
    """ranks.step_windows from the derived table, or None without it."""
    t = _tables(profile)
    if t is None:
        return None
    s = t["steps"]
    return {k: s[k] for k in ("rank", "step", "start", "end", "whole_span")}


def load_totals(profile: Profile) -> Totals | None:
    """overview.compute_totals from the derived tables, or None without them."""
    t = _tables(profile)
    if t is None:
        return None
    s = t["steps"]
    w = {"rank": s["rank"], "step": s["step"], "ts": s["start"], "dur": s["end"] - s["start"]}
    w["whole_span"] = s["whole_span"]
    b = {c: s[c] for c in (*CATEGORIES, "device_busy")} | {k: v for k, v in s.items() if k.startswith(MEASURED)}
    return w, b, dict(t["device"]), {"busy": s["busy"], "compute": s["compute"]}


def upgrade(folder: Path) -> bool:
    """Add the derived tables (and a big profile's timeline, web/timeline_store.py) to
    a profile written without them (an older aiprof), in place; False when it has them
    already. The tables are renamed into place before
    profile.json names them, so a profile cut short here still opens (without them)."""
    from ..store.derived import has_derived
    from ..store.reader import _read_meta
    from ..store.writer import write_meta
    from ..web.timeline_store import keep, wanted

    meta = _read_meta(folder)
    tables, timeline = not has_derived(folder, meta), wanted(folder, meta)
    if tables:
        derive(folder, meta)
    if timeline:
        keep(folder, meta)
    if tables or timeline:
        write_meta(folder, meta)
    return tables or timeline
