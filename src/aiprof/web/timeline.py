"""Timeline windows: the events of [t0, t1] on chosen tracks, merged to a pixel width.

The browser never receives more than a few thousand items for one window, whatever
the profile's size: DuckDB does the merging. Events at least one pixel wide come back
one by one; narrower ones are merged per (track, depth, pixel) into one item that
carries how many events it stands for and the name of the longest.

On first use a :class:`Timeline` builds these tables (this is the only state it keeps),
as Arrow tables in memory: each request registers them, zero-copy, on the connection
it was handed (:meth:`aiprof.web.library.Entry.reading`), so that summaries, search and
events run on any of a profile's connections at once, and windows on none:

``tl_tracks``  one row per track: track (dense id, host tracks first), rank, pid, tid,
               device_type, device, is_device, name, events
``tl``         one row per drawable event (flow markers excluded), sorted by ts:
               track, depth (nesting level on its track), ts, dur (ns), name_id,
               kind, correlation
``tl_names``   name_id -> name

The rows of ``tl`` (and, for big profiles, levels of detail: the rows pre-merged per
pixel of ever coarser grids) are also held as numpy columns, from which windows are
merged and summaries totalled (:mod:`.tiles`); events and search are SQL over the tables.

Times in and out are int64 ns on the profile's time axis.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import QueryError
from ..store import DEVICE_KINDS, Profile
from ..store.spans import FLOW_SQL
from . import tiles

#: A window never returns more merged items than this (the bucket widens instead).
MAX_ITEMS = 5000
#: Profiles with more drawable events than this get pre-merged levels of detail (the
#: finest of LOD_BUCKETS buckets over the whole span, each next one LOD_FACTOR times
#: coarser) that wide windows read instead of the events.
LOD_MIN_EVENTS = 200_000
LOD_BUCKETS = 40_000
LOD_FACTOR = 4
#: A window reads the coarsest level whose bucket is at most 1/LOD_PER_PIXEL of its own.
LOD_PER_PIXEL = 4
#: At most this many launch -> kernel arrows per window.
MAX_FLOWS = 2000
#: The most matches one search answer lists (the count covers them all).
SEARCH_LIMIT = 5000
#: Kineto's own bookkeeping, which every PyTorch profiler trace carries beside the job's
#: activity: in its "Spans" process one span per profiler, named "<profiler> (<iteration>)"
#: on the thread of the profiler's name ("PyTorch Profiler (0)", "__cupti_profiler__
#: (-1)"); in its "Traces" process an instant "Iteration Start: <profiler>" per profiler;
#: and the global instant "Record Window End" (pid ""). A host track that holds these
#: and nothing else is a placeholder row, not the job's: the track list leaves it out.
KINETO_SPANS, KINETO_TRACES = "Spans", "Traces"
KINETO_WINDOW_END = "Record Window End"
KINETO_ITERATION = "Iteration Start: "
#: A placeholder track holds a few markers (one per profiler); more is the job's.
KINETO_MAX_MARKERS = 8

_DEVICE_KINDS_SQL = ", ".join(f"'{k}'" for k in sorted(DEVICE_KINDS))


@dataclass(frozen=True)
class Window:
    """A window request, validated."""

    t0: int
    t1: int
    width: int
    tracks: tuple[int, ...] | None = None
    max_items: int = MAX_ITEMS

    @classmethod
    def parse(cls, t0: Any, t1: Any, width: Any = 1000, tracks: Any = None, max_items: Any = MAX_ITEMS) -> Window:
        """From request values (strings or numbers); raises QueryError on bad input."""
        try:
            a, b = int(t0), int(t1)
            w = int(width if width is not None else 1000)
            m = int(max_items if max_items is not None else MAX_ITEMS)
        except (TypeError, ValueError):
            raise QueryError("t0, t1, width and max_items must be integers (t0, t1 in ns)") from None
        if b < a:
            raise QueryError("t1 must be >= t0")
        if not 1 <= w <= 20000:
            raise QueryError("width must be between 1 and 20000 pixels")
        if not 1 <= m <= 100000:
            raise QueryError("max_items must be between 1 and 100000")
        return cls(a, b, w, parse_tracks(tracks), m)


def parse_tracks(value: Any) -> tuple[int, ...] | None:
    """``"1,2,5"`` or ``[1, 2, 5]`` -> (1, 2, 5); empty or None -> None (all tracks)."""
    if value is None or value == "" or value == []:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise QueryError("tracks must be a list of track ids or 'a,b,c'")
    try:
        return tuple(int(x) for x in items if str(x).strip() != "")
    except (TypeError, ValueError):
        raise QueryError("track ids are integers") from None


#: Hands out a profile (DuckDB connection) that the calling thread alone uses until the
#: context ends: the server's pool (Entry.reading), or one profile behind a lock.
Reading = Callable[[], AbstractContextManager[Profile]]


class Timeline:
    """Window queries over one opened profile, thread-safe.

    ``lock`` guards the build (on ``profile``'s own connection); after it, windows read
    the numpy columns with no lock, and SQL answers run on a connection from
    ``reading`` (by default ``profile`` behind ``lock``), several at once."""

    def __init__(self, profile: Profile, reading: Reading | None = None, lod_min_events: int = LOD_MIN_EVENTS) -> None:
        self.profile = profile
        self.lock = threading.RLock()
        self._reading: Reading = reading or self._served
        self._tables: dict[str, pa.Table] = {}
        self._track_rows: list[dict[str, Any]] | None = None
        self._built = False
        #: True once the events are indexed (tl, level 0, launches): see build_events.
        self._events = False
        self._events_lock = threading.Lock()
        self._levels: list[tiles.Level] = []
        #: (bucket ns, level) from the finest to the coarsest, on the grid from span[0];
        #: a kept level is read from its file when a window first needs it.
        self._lods: list[tuple[int, tiles.Level | None]] = []
        self._lod_lock = threading.Lock()
        self._kept: Any = None  # timeline_store.Kept when read back from the profile
        self.lod_min_events = lod_min_events
        self._launches: tiles.Launches | None = None
        #: Without the events indexed: the start of each device row a launch arrow may
        #: point at (Launches.dev.ts), enough to tell a window that has too many.
        self._flow_ts: np.ndarray | None = None
        self._names_by_id: list[str] = []
        self.span: tuple[int, int] = (0, 0)
        self._shown: tuple[int, int] | None = None

    # -- building -------------------------------------------------------------------

    @property
    def built(self) -> bool:
        """Whether :meth:`build` has run (the tracks and the span are known)."""
        return self._built

    def build(self) -> None:
        """Make what the track list and wide windows need (once): tl_tracks, tl_names,
        the span and the levels of detail. Read back from the profile when it keeps
        them (:mod:`.timeline_store`, written at import): then the events themselves
        (tl, for narrow windows, summaries, search and flows) are read only when first
        needed (:meth:`build_events`), so the first paint waits on the coarsest level
        only. Else everything is built from the profile's events at once."""
        if self._built:
            return
        with self.lock:
            if self._built:
                return
            try:
                self.profile.con.execute("SET enable_progress_bar = false")
            except duckdb.Error:
                pass  # in Jupyter without ipywidgets DuckDB refuses the setting (off there already)
            from .timeline_store import load

            kept = load(self.profile)
            if kept is None:
                self._index(*self._from_events(), lods=None)
            else:
                self._kept = kept
                self.span = kept.span
                self._names_by_id = [str(x) for x in kept.names.column("name").to_pylist()]
                self._tables = {"tl_tracks": kept.tracks, "tl_names": kept.names}
                self._lods = [(b, None) for b in kept.lods]
                self._flow_ts = kept.flow_ts
            self._built = True

    @property
    def events_indexed(self) -> bool:
        """Whether the events themselves are indexed yet (see :meth:`build`)."""
        return self._events

    def build_events(self) -> None:
        """Index the events (tl, level 0, launch arrows) once; see :meth:`build`."""
        self.build()
        if self._events:
            return
        with self._events_lock:
            if self._events:
                return
            from .timeline_store import read_events

            tl = read_events(self._kept)
            if tl is None:  # a kept file unreadable since it was listed: from the events
                self._fallback()
            else:
                self._index_events(tl)
                self._tables = {"tl": tl, **self._tables}
                self._events = True

    def _from_events(self) -> tuple[pa.Table, pa.Table, pa.Table, tuple[int, int]]:
        """tl_tracks, tl_names, tl and the span, computed from the profile's tables.

        The events are read once (their drawable rows and the columns the timeline
        keeps); the tracks group them in DuckDB, the names are their dictionary (sorted,
        the ids its order), so no query joins the events on their names."""
        con = self.profile.con
        ev = arrow_table(
            self.profile,
            f"""
            SELECT rank, pid, tid, device_type, device, kind, coalesce(name, '') AS name, ts,
                   greatest(dur, 0) AS dur, correlation
            FROM events WHERE NOT coalesce({FLOW_SQL}, FALSE)
            """,
        )
        con.register("tl_ev", ev)
        tracks = arrow_table(
            self.profile,
            f"""
            WITH ev AS (
              SELECT rank, pid, tid, any_value(device_type) FILTER (WHERE device_type <> 'cpu') AS dt,
                     any_value(device) FILTER (WHERE device_type <> 'cpu') AS dev,
                     bool_or(kind IN ({_DEVICE_KINDS_SQL})) AS is_device, count(*) AS events
              FROM tl_ev GROUP BY ALL
            ), th AS (
              SELECT rank, pid, tid, any_value(thread_name) AS thread_name, min(sort_index) AS sort_index
              FROM tracks WHERE tid <> -1 GROUP BY ALL
            ), pr AS (
              SELECT rank, pid, any_value(process_name) AS process_name FROM tracks GROUP BY ALL
            )
            SELECT (row_number() OVER (ORDER BY ev.is_device, ev.rank, ev.pid,
                    coalesce(th.sort_index, ev.tid), ev.tid) - 1)::INTEGER AS track,
                   ev.rank, ev.pid, ev.tid, coalesce(ev.dt, 'cpu') AS device_type, ev.dev AS device,
                   ev.is_device, pr.process_name, th.thread_name, ev.events
            FROM ev LEFT JOIN th USING (rank, pid, tid) LEFT JOIN pr USING (rank, pid)
            ORDER BY track
            """,
        )
        con.unregister("tl_ev")
        # The names: the distinct ones in byte order (DuckDB's ORDER BY name), each row's
        # id its name's place there.
        coded = pc.dictionary_encode(ev.column("name").combine_chunks())
        order = pc.sort_indices(coded.dictionary).to_numpy()
        place = np.empty(len(order), dtype=np.int32)
        place[order] = np.arange(len(order), dtype=np.int32)
        names = pa.table(
            {"name_id": pa.array(np.arange(len(order), dtype=np.int32)), "name": coded.dictionary.take(order)}
        )
        name_id = place[coded.indices.to_numpy(zero_copy_only=False)]
        ev = pa.table(
            {
                "rank": ev.column("rank"),
                "pid": ev.column("pid"),
                "tid": ev.column("tid"),
                "ts": ev.column("ts"),
                "dur": ev.column("dur"),
                "name_id": pa.array(name_id, pa.int32()),
                "kind": ev.column("kind"),
                "correlation": ev.column("correlation"),
                "i": pa.array(np.arange(ev.num_rows, dtype=np.int64)),
            }
        )
        del coded, order, place, name_id
        con.register("tl_ev", ev)
        con.register("tl_tracks", tracks)
        con.register("tl_names", names)
        base = arrow_table(
            self.profile,
            """
            SELECT t.track, ev.ts, ev.dur, ev.name_id, ev.kind, ev.correlation
            FROM tl_ev ev JOIN tl_tracks t USING (rank, pid, tid) ORDER BY ev.i
            """,
        )
        con.unregister("tl_ev")
        del ev
        depth = nesting_depth(
            base.column("track").to_numpy(zero_copy_only=False),
            base.column("ts").to_numpy(zero_copy_only=False),
            base.column("dur").to_numpy(zero_copy_only=False),
        )
        tl_src = base.append_column("depth", pa.array(depth, type=pa.int16()))
        con.register("tl_src", tl_src)
        tl = arrow_table(
            self.profile, "SELECT track, depth, ts, dur, name_id, kind, correlation FROM tl_src ORDER BY ts"
        )
        con.unregister("tl_src")
        # kind dictionary-encoded once (the numpy columns hold its codes; SQL reads text).
        tl = tl.combine_chunks()
        tl = tl.set_column(5, "kind", pc.dictionary_encode(tl.column("kind")))
        del base, tl_src
        con.register("tl", tl)
        row = next(iter(con.execute("SELECT count(*), min(ts), max(ts + dur) FROM tl").fetchall()), None)
        for name in ("tl", "tl_tracks", "tl_names"):
            con.unregister(name)
        n = int(row[0]) if row else 0
        span = (int(row[1] or 0), int(row[2] or 0)) if row else (0, 0)
        # Samples, counters and allocator events are on the same axis: the span
        # covers them too (a recording may hold samples and no events at all).
        other = next(
            iter(
                con.execute(
                    "SELECT min(ts), max(ts) FROM (SELECT ts FROM samples UNION ALL SELECT ts FROM counters "
                    "UNION ALL SELECT ts FROM memory)"
                ).fetchall()
            ),
            None,
        )
        if other and other[0] is not None:
            lo, hi = int(other[0]), int(other[1])
            span = (min(lo, span[0]), max(hi, span[1])) if n else (lo, hi)
        return tracks, names, tl, span

    def _index(
        self,
        tracks: pa.Table,
        names: pa.Table,
        tl: pa.Table,
        span: tuple[int, int],
        lods: list[tuple[int, tiles.Spans]] | None,
    ) -> None:
        """The numpy columns windows and summaries read (web/tiles.py), from the tables;
        ``lods``: the levels of detail when kept, else None (made here)."""
        self.span = span
        spans = self._index_events(tl)
        # Levels of detail for wide windows: the events pre-merged per (track, depth,
        # bucket) on a grid from the span's start, each level LOD_FACTOR times
        # coarser than the one before, so that a zoomed-out window merges a few
        # rows per pixel instead of every event (tiles.pyramid).
        if lods is None:
            lods = self.pyramid(spans)
        self._lods = [(b, tiles.Level(rows, tiles.long_threshold(rows.dur))) for b, rows in lods]
        self._names_by_id = [str(x) for x in names.column("name").to_pylist()]
        self._tables = {"tl": tl, "tl_tracks": tracks, "tl_names": names}
        self._kept = None
        self._events = True

    def _fallback(self) -> None:
        """Everything from the events, when a kept file listed at :meth:`build` cannot
        be read: with levels of detail on the same grid when the profile kept some."""
        with self.lock:  # the tables are made on the served connection
            if self._kept is not None and self._kept.lods:
                self.lod_min_events = 0
            self._index(*self._from_events(), lods=None)

    def _index_events(self, tl: pa.Table) -> tiles.Spans:
        """Level 0 (every event) and the launch arrows, from ``tl``."""
        spans = tiles.Spans.from_arrow(tl)
        corr = tl.column("correlation")
        self._launches = tiles.Launches(
            spans,
            np.asarray(corr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64),
            np.asarray(corr.is_valid().to_numpy(zero_copy_only=False), dtype=bool),
            set(DEVICE_KINDS),
        )
        # "Long" events are few and always scanned; the others are found by a ts
        # range (a binary search).
        self._levels = [tiles.Level(spans, tiles.long_threshold(spans.dur))]
        return spans

    def _lod(self, i: int) -> tiles.Level:
        """Level of detail ``i`` (0: the finest), read from its file on first use."""
        b, level = self._lods[i]
        if level is not None:
            return level
        with self._lod_lock:
            b, level = self._lods[i]
            if level is None:
                from .timeline_store import read_level

                rows = read_level(self._kept, b)
                if rows is None:  # unreadable since it was listed: everything from the events
                    with self._events_lock:  # (never taken before _lod_lock: no deadlock)
                        self._fallback()
                    made = self._lods[min(i, len(self._lods) - 1)][1] if self._lods else self._levels[0]
                    assert made is not None
                    return made
                level = tiles.Level(rows, tiles.long_threshold(rows.dur))
                self._lods[i] = (b, level)
            return level

    def pyramid(self, spans: tiles.Spans) -> list[tuple[int, tiles.Spans]]:
        """The levels of detail of ``spans`` (the events), none for a small profile."""
        if len(spans.ts) <= self.lod_min_events:
            return []
        lb = max(1, (self.span[1] - self.span[0]) // LOD_BUCKETS)
        return tiles.pyramid(spans, self.span[0], lb, LOD_FACTOR, MAX_ITEMS)

    def table(self, name: str) -> pa.Table:
        """One of the built tables: tl, tl_tracks or tl_names."""
        if name == "tl":
            self.build_events()
        self.build()
        return self._tables[name]

    def levels(self) -> list[tuple[int, tiles.Spans]]:
        """The levels of detail: (bucket ns, rows sorted by ts), finest first."""
        self.build()
        out = []
        for i, (b, _) in enumerate(self._lods):
            out.append((b, tiles.by_ts(self._lod(i).rows(self.span[0], self.span[1], None))))
        return out

    def flow_starts(self) -> np.ndarray:
        """The start of each device row a launch arrow may point at, sorted (what
        timeline_store keeps for windows answered before the events are indexed)."""
        self.build_events()
        assert self._launches is not None
        return self._launches.dev.ts

    @contextmanager
    def _served(self) -> Iterator[Profile]:
        with self.lock:
            yield self.profile

    @contextmanager
    def _sql(self, **extra: pa.Table) -> Iterator[Callable[..., list[dict[str, Any]]]]:
        """Rows of SQL over the timeline's tables (and ``extra`` ones), on a connection
        this thread alone uses while the context lasts."""
        self.build_events()
        with self._reading() as prof:
            for name, table in {**self._tables, **extra}.items():
                prof.con.register(name, table)

            def rows(sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
                return list(arrow_table(prof, sql, params).to_pylist())

            try:
                yield rows
            finally:
                for name in extra:
                    prof.con.unregister(name)

    # -- queries --------------------------------------------------------------------

    def query(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Rows of one SQL query over the timeline's tables (tl, tl_tracks, tl_names)
        and the profile's views."""
        self.build()
        with self._sql() as rows:
            return rows(sql, params)

    def tracks(self) -> list[dict[str, Any]]:
        """Track list: track, rank, pid, tid, device_type, device, is_device, name,
        process_name, thread_name, events, max_depth. Tracks that hold no event, and
        Kineto's placeholder rows (:data:`KINETO_SPANS`: tracks holding only the
        profiler's own markers), are left out; their events stay in the profile."""
        self.build()
        if self._track_rows is None:  # the same for every request: computed once
            # The deepest row of each track, from the coarsest level: merging keeps each
            # row's (track, depth), so every level holds every (track, depth) of the events.
            deep = self._lod(len(self._lods) - 1).spans if self._lods else self._level0().spans
            tracks = self._tables["tl_tracks"].to_pylist()
            size = max([int(t["track"]) + 1 for t in tracks] + [int(deep.track.max()) + 1 if len(deep.track) else 0])
            deepest = np.zeros(size, np.int64)
            np.maximum.at(deepest, deep.track, deep.depth)
            placeholders = self._kineto_placeholders(tracks, deep)
            listed = [
                {**t, "max_depth": int(deepest[int(t["track"])])}
                for t in tracks
                if int(t["events"] or 0) > 0 and int(t["track"]) not in placeholders
            ]
            shown = np.zeros(size, dtype=bool)
            shown[[int(t["track"]) for t in listed]] = True
            # The extent first: a request that finds the rows set (several run at once)
            # finds it set too.
            self._shown = self._shown_extent(deep, shown)
            self._track_rows = listed
        rows = [dict(r) for r in self._track_rows]
        many = len({r["rank"] for r in rows}) > 1
        for r in rows:
            r["name"] = (f"rank {r['rank']} " if many else "") + track_name(r)
        return rows

    def shown_span(self) -> tuple[int, int]:
        """[t0, t1] (ns) of what the timeline draws: the events of the tracks
        :meth:`tracks` lists, and the samples, counters and memory events; the first
        view. ``span`` (the axis the levels of detail are cut on) may be wider: it also
        covers the events of the tracks left out, such as Kineto's placeholder span,
        which starts when the profiler was set up (95 ms before the first event of
        kineto/V100's rank-0 trace). ``span`` itself where nothing is drawn."""
        self.tracks()
        assert self._shown is not None
        return self._shown

    def _shown_extent(self, deep: tiles.Spans, shown: np.ndarray) -> tuple[int, int]:
        """:meth:`shown_span` from ``deep`` (a level of the events: a merged row spans
        exactly the events it merges) and ``shown`` (track id -> listed)."""
        lo: int | None = None
        hi: int | None = None
        at = shown[deep.track] if len(deep.track) else np.zeros(0, dtype=bool)
        if at.any():
            ts = deep.ts[at]
            lo, hi = int(ts.min()), int((ts + deep.dur[at]).max())
        # Samples, counters and allocator events are drawn too (their own tracks).
        with self._reading() as prof:
            row = next(
                iter(
                    prof.con.execute(
                        "SELECT min(ts), max(ts) FROM (SELECT ts FROM samples UNION ALL SELECT ts FROM counters "
                        "UNION ALL SELECT ts FROM memory)"
                    ).fetchall()
                ),
                None,
            )
        if row and row[0] is not None:
            lo = int(row[0]) if lo is None else min(lo, int(row[0]))
            hi = int(row[1]) if hi is None else max(hi, int(row[1]))
        if lo is None or hi is None:
            return self.span
        return max(lo, self.span[0]), min(hi, self.span[1])

    def _kineto_placeholders(self, tracks: list[dict[str, Any]], deep: tiles.Spans) -> set[int]:
        """The ids of the host tracks holding only Kineto's markers (see
        :data:`KINETO_SPANS`), told from the rows of ``deep`` (a level of the events:
        a track of a few events has them unmerged there, n = 1 each; a merged row keeps
        its track)."""
        few = {
            int(t["track"]): t for t in tracks if not t["is_device"] and 0 < int(t["events"] or 0) <= KINETO_MAX_MARKERS
        }
        if not few:
            return set()
        at = np.flatnonzero(np.isin(deep.track, np.fromiter(few, dtype=np.int64)))
        rows: dict[int, list[tuple[str, str, int]]] = {}
        for i in at.tolist():
            rows.setdefault(int(deep.track[i]), []).append(
                (self._names_by_id[int(deep.name[i])], deep.kinds[int(deep.kind[i])], int(deep.n[i]))
            )
        out = set()
        for track, evs in rows.items():
            t = few[track]
            if sum(n for _, _, n in evs) == int(t["events"]) and all(
                n == 1 and kineto_marker(name, kind, t.get("process_name"), t.get("thread_name"))
                for name, kind, n in evs
            ):
                out.add(track)
        return out

    def window(self, w: Window) -> dict[str, Any]:
        """Merged items of the window (columnar): track, depth, ts, dur (ns), name
        (index into ``names``), kind, n (events merged into the item; 1 = one event)."""
        self.build()
        bucket = max(1, math.ceil((w.t1 - w.t0) / w.width))
        # No lock: the built columns are only read (several windows run at once).
        # A wide window reads the coarsest level of detail at least LOD_PER_PIXEL times
        # finer than its bucket, and merges it on that level's grid (from span[0]) with
        # its bucket rounded up to a whole multiple of the level's: the very items that
        # merging the events so would give (tiles.merge). Otherwise the events, on the
        # grid from t0.
        at, origin, grid = -1, w.t0, 1
        for i, (b, _) in enumerate(self._lods):
            if b * LOD_PER_PIXEL <= bucket:
                at, origin, grid = i, self.span[0], b
        level = self._lod(at) if at >= 0 else self._level0()
        bucket = -(-bucket // grid) * grid
        rows = level.rows(w.t0, w.t1, w.tracks)
        for _ in range(8):
            merged = tiles.merge(rows, origin, bucket)
            if len(merged.ts) <= w.max_items:
                break
            bucket = bucket * max(2, math.ceil(len(merged.ts) / w.max_items))
            rows = merged  # a whole multiple of the bucket: merging the merged is the same
        cols = tiles.items(merged)
        flows, truncated = self._flows(w)
        ids = sorted(set(cols["name"]) | {f[6] for f in flows} | {f[7] for f in flows})
        names = [self._names_by_id[i] for i in ids]
        remap = {nid: i for i, nid in enumerate(ids)}
        cols["name"] = [remap[n] for n in cols["name"]]
        return {
            "t0": w.t0,
            "t1": w.t1,
            "bucket_ns": bucket,
            "items": cols,
            "names": names,
            "flows": {
                "from_track": [f[0] for f in flows],
                "from_depth": [f[1] for f in flows],
                "from_ts": [f[2] for f in flows],
                "to_track": [f[3] for f in flows],
                "to_depth": [f[4] for f in flows],
                "to_ts": [f[5] for f in flows],
            },
            "flows_truncated": truncated,
        }

    def summary(self, w: Window, limit: int = 20) -> dict[str, Any]:
        """What a selection covers: per kind and per name, events (count) and the time
        they spend inside [t0, t1] (ns, clipped at the edges)."""
        self.build()
        # From the numpy columns: the rows of the window, then two groupings (tiles.totals).
        rows = self._level0().rows(w.t0, w.t1, w.tracks)
        kinds, names = tiles.totals(rows, w.t0, w.t1, self._names_by_id, int(limit))
        return {
            "t0": w.t0,
            "t1": w.t1,
            "events": sum(int(k["events"]) for k in kinds),
            "by_kind": kinds,
            "top": names,
        }

    def _level0(self) -> tiles.Level:
        self.build_events()
        return self._levels[0]

    def _flows(self, w: Window) -> tuple[list[tuple[int, ...]], bool]:
        """The launch arrows of the window (tiles.Launches.between). A window with too
        many device rows has none: told from their starts alone when the events are not
        indexed yet (the first, widest windows of a kept timeline)."""
        most = 4 * MAX_FLOWS
        if self._launches is None and self._flow_ts is not None:
            ts = self._flow_ts
            if int(np.searchsorted(ts, w.t1, side="right")) - int(np.searchsorted(ts, w.t0, side="left")) >= most:
                return [], True
        self.build_events()
        assert self._launches is not None
        return self._launches.between(w.t0, w.t1, w.tracks, MAX_FLOWS, most)

    def events_at(self, track: int, ts: int) -> list[dict[str, Any]]:
        """The full rows of the events on ``track`` starting at ``ts`` (longest first),
        with the events linked to them by ``correlation``."""
        self.build()
        with self._sql() as sql:
            t = sql("SELECT rank, pid, tid FROM tl_tracks WHERE track = ?", [track])
            if not t:
                raise QueryError(f"no track {track}")
            rows = sql(
                f"""SELECT * EXCLUDE (profile) FROM events WHERE rank = ? AND pid = ? AND tid = ? AND ts = ?
                    AND NOT coalesce({FLOW_SQL}, FALSE) ORDER BY dur DESC, name, kind LIMIT 50""",
                [t[0]["rank"], t[0]["pid"], t[0]["tid"], ts],
            )
            for r in rows:
                r["linked"] = []
                if r.get("correlation") is not None:
                    r["linked"] = sql(
                        """SELECT l.track, l.depth, l.ts, l.dur, l.kind, n.name FROM tl l JOIN tl_names n USING (name_id)
                           WHERE l.correlation = ? AND NOT (l.track = ? AND l.ts = ?)
                           ORDER BY l.ts, l.track, l.depth LIMIT 20""",
                        [r["correlation"], track, ts],
                    )
        return rows

    def search(
        self,
        q: str,
        *,
        regex: bool = False,
        exact: bool = False,
        kind: str | None = None,
        t0: int | None = None,
        t1: int | None = None,
        order: str = "ts",
        limit: int = 500,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Events whose name contains ``q`` (case-insensitive), equals it (``exact``) or
        matches it as an RE2 regular expression (``regex``). The names are matched once
        in ``tl_names``; the events are then found by name id. Returns q, regex, total
        (events), names (distinct names), matches (track, depth, ts, dur ns, name, kind;
        in time order or longest first), truncated."""
        self.build()
        if regex:
            cond, arg = "regexp_matches(name, ?)", q
        elif exact:
            cond, arg = "name = ?", q
        else:
            cond, arg = "contains(lower(name), lower(?))", q
        with self._sql() as sql:
            try:
                hit = sql(f"SELECT name_id FROM tl_names WHERE {cond} ORDER BY name_id", [arg])
            except duckdb.Error as e:
                raise QueryError(f"bad search pattern: {str(e).splitlines()[0]}") from None
        # The events of those names, from the numpy columns (tiles.find): a few passes
        # over the name ids, then a sort of the first page's candidates only.
        level = self._level0().spans
        names = np.zeros(len(self._names_by_id) + 1, dtype=bool)
        names[[int(h["name_id"]) for h in hit]] = True
        kind_code = None if not kind else (level.kinds.index(kind) if kind in level.kinds else -1)
        n, idx = tiles.find(level, names, kind_code, t0, t1, order == "-dur", int(limit), int(offset))
        kinds = level.kinds
        rows = [
            {"track": tr, "depth": d, "ts": t, "dur": du, "name": self._names_by_id[nm], "kind": kinds[k]}
            for tr, d, t, du, nm, k in zip(
                *(getattr(level, c)[idx].tolist() for c in ("track", "depth", "ts", "dur", "name", "kind")),
                strict=True,
            )
        ]
        return {
            "q": q,
            "regex": regex,
            "total": n,
            "names": len(hit),
            "matches": rows,
            "truncated": offset + len(rows) < n,
        }

    # -- internals ------------------------------------------------------------------


def nesting_depth(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Nesting level of each span on its track (0 = outermost), vectorised.

    For properly nested spans, the depth of a span is the number of spans of its
    track that started before it (longer first at equal times) minus the number that
    ended at or before its start. Zero-length events end just after their start, so
    they sit inside what covers them. Overlapping, non-nested spans get the number of
    spans open at their start.
    """
    n = len(ts)
    if n == 0:
        return np.zeros(0, dtype=np.int16)
    track = track.astype(np.int64)
    ts = ts.astype(np.int64)
    dur = np.maximum(dur.astype(np.int64), 0)
    t0 = int(ts.min())
    rel = ts - t0
    order = np.lexsort((-dur, rel, track))  # by track, then ts, then longer first
    first_of_track = np.searchsorted(track[order], track, side="left")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    started_before = rank - first_of_track
    # Ends as one sorted key per track: 2 * time (+1 for zero-length events).
    shift = 2 * int((rel + dur).max()) + 2
    end_key = track * shift + 2 * (rel + dur) + (dur == 0)
    end_key.sort()
    start_key = track * shift + 2 * rel
    ended = np.searchsorted(end_key, start_key, side="right") - np.searchsorted(end_key, track * shift, side="left")
    out: np.ndarray = np.clip(started_before - ended, 0, np.iinfo(np.int16).max).astype(np.int16)
    return out


def arrow_table(profile: Profile, sql: str, params: list[Any] | None = None) -> pa.Table:
    """``sql`` on ``profile``'s connection, as an Arrow table."""
    if params:
        return profile.con.sql(sql, params=params).to_arrow_table()
    return profile.con.sql(sql).to_arrow_table()


def kineto_marker(name: str, kind: str, process_name: str | None, thread_name: str | None) -> bool:
    """Whether an event is one of Kineto's own markers (:data:`KINETO_SPANS`), not the
    job's: the profiler's span in the "Spans" process, its "Iteration Start" instant in
    the "Traces" process, the "Record Window End" instant."""
    proc = (process_name or "").strip()
    if kind == "instant" and name == KINETO_WINDOW_END:
        return True
    if kind == "instant" and proc == KINETO_TRACES:
        return name.startswith(KINETO_ITERATION)
    if kind == "other" and proc == KINETO_SPANS:
        profiler = re.escape((thread_name or "").strip()) or ".+"
        return re.fullmatch(rf"{profiler} \(-?\d+\)", name) is not None
    return False


def track_name(r: dict[str, Any]) -> str:
    """A readable track label: "GPU 0 stream 7", "rank 0 / pt_main_thread (1102)"."""
    thread = (r.get("thread_name") or "").strip()
    if r.get("is_device"):
        dev = r.get("device")
        dt = str(r.get("device_type") or "device").upper()
        dev_s = f"{dt} {dev}" if dev is not None and dev >= 0 else dt
        return f"{dev_s} {thread or 'stream ' + str(r.get('tid'))}"
    proc = (r.get("process_name") or "").strip()
    label = thread or f"thread {r.get('tid')}"
    if len(proc) > 24 or not proc:
        proc = f"pid {r.get('pid')}"
    return f"{proc} / {label}"
