"""The timeline's tables kept in a profile, written at import and read back when served.

Building a :class:`~aiprof.web.timeline.Timeline` from the events scans them three
times, sorts them and nests them (seconds on millions of events); the page's first
paint waits on it. A profile of at least :data:`KEEP_MIN_EVENTS` events therefore keeps
what the build makes, in ``timeline/`` beside its tables (Arrow IPC files, LZ4):

``tl.arrow``        the drawable events (tl: track, depth, ts, dur, name_id, kind, correlation)
``tracks.arrow``    tl_tracks
``names.arrow``     tl_names
``lod-B.arrow``     the level of detail of bucket B ns (track, depth, ts, dur, name_id,
                    kind, n, wdur), one file per level
``flows.arrow``     ts: the start of each device row a launch arrow may point at, sorted
                    (enough for a wide window to know it has too many to draw)

profile.json's ``timeline`` names them: ``{"version": N, "span": [t0, t1], "lods": [B, ...]}``.
They are read back only for one profile opened alone (on its own time axis) with this
version; otherwise the timeline is built from the events as before, with the same rows.
When served, the small ones are read at once and the others when first needed: a level
when a window first reads it, ``tl.arrow`` (the events) for the first narrow window,
summary, search or event (or by the server's warm-up), so the first paint of a big
profile reads its coarsest level only.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from ..store import Profile
from . import tiles

log = logging.getLogger(__name__)

#: Bumped whenever the kept tables, or the rules they were built by, change.
TIMELINE_VERSION = 2
#: Profiles with fewer events build their timeline at once when served (well under a
#: second), so an import does not spend time keeping it.
KEEP_MIN_EVENTS = 200_000
#: Peak memory of the build per event (measured: 4.9M events of V100/df_index_resolver
#: repeated took 0.78 GiB above the import's own), and the most an import spends on it:
#: a bigger profile is kept without its timeline, so that an import's memory stays
#: bounded whatever the trace's size (bench/huge_import.py); ``aiprof import P.aiprof``
#: keeps it later, and ``aiprof serve`` builds it in memory when first opened.
BUILD_BYTES_PER_EVENT = 170
IMPORT_BUDGET_BYTES = 2 << 30
KEEP_MAX_AT_IMPORT = IMPORT_BUDGET_BYTES // BUILD_BYTES_PER_EVENT
_NOT_KEPT = "the timeline's index was not kept"
FOLDER = "timeline"


@dataclass
class Kept:
    """What :func:`load` reads at once, and where the rest is (:func:`read_events`,
    :func:`read_level`)."""

    folder: Path
    tracks: pa.Table
    names: pa.Table
    span: tuple[int, int]
    lods: list[int]
    flow_ts: np.ndarray


def _read(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as f:
        return ipc.open_file(f).read_all()


def _write(path: Path, table: pa.Table) -> None:
    opts = ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(str(path), "wb") as f, ipc.new_file(f, table.schema, options=opts) as w:
        w.write_table(table.combine_chunks())  # one batch: read back as one chunk per column


def load(profile: Profile) -> Kept | None:
    """The tables ``profile`` keeps, or None (several profiles opened together, none
    kept, another version, or a file missing or unreadable). The events and the levels
    of detail are only listed here: read them with :func:`read_events` and :func:`read_level`."""
    if len(profile.paths) != 1:
        return None
    folder, meta = profile.paths[0] / FOLDER, profile.metas[0]
    info = meta.get("timeline")
    if not isinstance(info, dict) or info.get("version") != TIMELINE_VERSION:
        return None
    try:
        span = (int(info["span"][0]), int(info["span"][1]))
        lods = [int(b) for b in info["lods"]]
        for f in ["tl.arrow", *(f"lod-{b}.arrow" for b in lods)]:
            if not (folder / f).is_file():
                raise OSError(f"no {f}")
        flow_ts = np.asarray(_read(folder / "flows.arrow").column("ts").to_numpy(), dtype=np.int64)
        return Kept(folder, _read(folder / "tracks.arrow"), _read(folder / "names.arrow"), span, lods, flow_ts)
    except (OSError, pa.ArrowException, KeyError, TypeError, ValueError, IndexError):
        log.debug("the kept timeline of %s is unreadable: built from the events", profile.paths[0], exc_info=True)
        return None


def read_events(kept: Kept) -> pa.Table | None:
    """The kept tl (the drawable events), or None when it cannot be read."""
    try:
        return _read(kept.folder / "tl.arrow")
    except (OSError, pa.ArrowException):
        log.debug("the kept events of %s are unreadable: built from the events", kept.folder, exc_info=True)
        return None


def read_level(kept: Kept, bucket: int) -> tiles.Spans | None:
    """The kept level of detail of ``bucket`` ns, or None when it cannot be read."""
    try:
        return tiles.Spans.from_arrow(_read(kept.folder / f"lod-{int(bucket)}.arrow"))
    except (OSError, pa.ArrowException, KeyError):
        log.debug("a kept level of %s is unreadable: built from the events", kept.folder, exc_info=True)
        return None


def wanted(folder: Path, meta: dict[str, Any]) -> bool:
    """True when the profile in ``folder`` should keep its timeline and does not (or
    keeps another version of it)."""
    if int(meta.get("tables", {}).get("events", 0)) < KEEP_MIN_EVENTS:
        return False
    info = meta.get("timeline")
    return not (isinstance(info, dict) and info.get("version") == TIMELINE_VERSION and (folder / FOLDER).is_dir())


def keep(
    folder: Path,
    meta: dict[str, Any],
    min_events: int = KEEP_MIN_EVENTS,
    lod_min_events: int | None = None,
    max_events: int | None = None,
) -> None:
    """Build the timeline of the profile in ``folder`` and keep its tables there
    (``meta``, its profile.json, names them; the caller writes it), for a profile of
    at least ``min_events`` events (``lod_min_events``: the timeline's own size for
    levels of detail by default) and at most ``max_events`` (None: no bound; past it
    the profile says why it keeps none). On failure the profile is kept without them,
    with a warning (its timeline is then built from the events when served)."""
    events = int(meta.get("tables", {}).get("events", 0))
    if events < min_events:
        return
    if max_events is not None and events > max_events:
        need = events * BUILD_BYTES_PER_EVENT / 2**30
        meta.setdefault("warnings", []).append(
            f"{_NOT_KEPT}: indexing {events:,} events takes about {need:.1f} GiB, more than "
            f"an import spends ({IMPORT_BUDGET_BYTES / 2**30:.0f} GiB); every view reads the tables as usual, "
            f"`aiprof serve` indexes them when the timeline is first opened, and `aiprof import` on the profile keeps the index"
        )
        return
    from ..store import open_profile
    from .timeline import LOD_MIN_EVENTS, Timeline

    meta.pop("timeline", None)
    tmp = folder / f".{FOLDER}.tmp-{os.getpid()}"
    try:
        with open_profile(folder) as p:
            p.metas[0].pop("timeline", None)  # built from the events, whatever the folder keeps
            tl = Timeline(p, lod_min_events=LOD_MIN_EVENTS if lod_min_events is None else lod_min_events)
            tl.build()
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            for name, table in (("tl", "tl"), ("tracks", "tl_tracks"), ("names", "tl_names")):
                _write(tmp / f"{name}.arrow", tl.table(table))
            _write(tmp / "flows.arrow", pa.table({"ts": pa.array(tl.flow_starts(), pa.int64())}))
            buckets = []
            for b, level in tl.levels():
                _write(tmp / f"lod-{b}.arrow", to_arrow(level))
                buckets.append(b)
        shutil.rmtree(folder / FOLDER, ignore_errors=True)
        os.replace(tmp, folder / FOLDER)
    except Exception as e:  # the import's tables are whole: never lose them to the timeline's failure
        shutil.rmtree(tmp, ignore_errors=True)
        first = str(e).splitlines()[0][:200] if str(e) else ""
        meta.setdefault("warnings", []).append(f"the timeline was not kept ({type(e).__name__}: {first})")
        return
    meta["timeline"] = {"version": TIMELINE_VERSION, "span": list(tl.span), "lods": buckets}
    if meta.get("warnings"):  # an import's "not kept" is no longer true
        meta["warnings"] = [w for w in meta["warnings"] if not str(w).startswith(_NOT_KEPT)]


def to_arrow(s: tiles.Spans) -> pa.Table:
    """Rows of a level as the table :meth:`tiles.Spans.from_arrow` reads."""
    kind = pa.DictionaryArray.from_arrays(pa.array(s.kind, pa.int32()), pa.array(s.kinds, pa.string()))
    cols: dict[str, Any] = {c: pa.array(np.asarray(getattr(s, c))) for c in ("track", "depth", "ts", "dur")}
    cols |= {"name_id": pa.array(s.name), "kind": kind, "n": pa.array(s.n), "wdur": pa.array(s.wdur)}
    return pa.table(cols)
