"""Open one profile, or a folder of profiles (one per rank or per run), as DuckDB views.

Each table of the store becomes a view of the same name over the Parquet files in
place. Profiles opened together are put on one time axis: every ``ts`` is shifted from
its own profile's origin to the earliest origin among them, so ranks line up.
A table no profile has is still a view, empty, with the store's schema, so analysers
never need to ask whether it exists.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from ..errors import AiprofError
from . import duck
from .schema import SCHEMA_VERSION, SCHEMAS, TABLES
from .writer import META_FILE, PROFILE_SUFFIX

T = TypeVar("T")

_TIMED = {"events", "counters", "memory", "samples"}


#: Profiles opened together past which :meth:`Profile.warnings` does not look for runs
#: far apart (a job's ranks come from one run).
RUNS_APART_MAX_PROFILES = 64


@dataclass
class Profile:
    """Profiles opened for analysis: a DuckDB connection with one view per table."""

    paths: list[Path]
    """The profile folders, in the order their metadata appears in ``metas``."""
    metas: list[dict[str, Any]]
    """profile.json of each profile."""
    con: duckdb.DuckDBPyConnection
    """Connection holding the views ``events``, ``counters``, ``memory`` and the others."""
    tables: dict[str, int] = field(default_factory=dict)
    """Row count of each table, over all the profiles."""
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)
    _per_event: set[str] = field(default_factory=set, repr=False)
    _session: str | None = field(default=None, repr=False)
    """The catalog of ``con``'s session on the process's shared database (store/duck.py),
    dropped on close, or when the profile is garbage-collected unclosed (the catalog
    belongs to the database, which outlives the connection); None for a connection of
    its own."""
    _end: weakref.finalize[Any, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._session is not None:
            self._end = weakref.finalize(self, duck.end_session, self.con, self._session)
            self._end.atexit = False  # at exit the shared database goes whole

    def memo(self, key: str, compute: Callable[[], T], per_event: bool = False) -> T:
        """Compute once per opened profile (profiles are read-only while open), so views
        that share an expensive intermediate (overview and steps) pay for it once.
        ``per_event``: the value holds a row per event (GiBs on a big profile), and
        :meth:`forget_per_event` may drop it."""
        if key not in self._memo:
            self._memo[key] = compute()
            if per_event:
                self._per_event.add(key)
        value: T = self._memo[key]
        return value

    def forget_per_event(self) -> None:
        """Drop the intermediates of a row per event (computed again if asked again):
        for a caller that runs many views on a big profile one after another (the
        advice), whose memory would otherwise hold every view's at once."""
        for key in self._per_event:
            self._memo.pop(key, None)
        self._per_event.clear()

    @property
    def time_origin_ns(self) -> int:
        """Origin of the shared time axis (the earliest of the profiles' origins)."""
        return min(int(m.get("time_origin_ns", 0)) for m in self.metas)

    @property
    def devices(self) -> list[dict[str, Any]]:
        """Device records of all profiles (rank, type, index, name, vendor, memory...)."""
        return [d for m in self.metas for d in m.get("devices", [])]

    @property
    def warnings(self) -> list[str]:
        """The profiles' own warnings, and whether profiles opened together are two runs:
        recorded far apart (:func:`.runs.separate_runs`), or else holding the same rank
        from the same kind of source (:func:`.runs.same_rank`)."""
        own = [w for m in self.metas for w in m.get("warnings", [])]
        apart = self.memo("runs_apart", self._runs_apart)
        if apart is None and len(self.paths) <= RUNS_APART_MAX_PROFILES:
            from .runs import same_rank

            apart = same_rank(self.metas, self.paths)
        return [*own, apart] if apart else own

    def _runs_apart(self) -> str | None:
        """Profiles opened together whose events lie in wall time far apart (each one's
        first to last event start, from its events file's statistics: nothing is read),
        where all of them are on Unix time: two runs, read as one. Past
        ``RUNS_APART_MAX_PROFILES`` (a job's ranks, imported together) it is not asked."""
        import pyarrow.parquet as pq

        from .runs import UNIX_NS_MIN, separate_runs

        if not 2 <= len(self.paths) <= RUNS_APART_MAX_PROFILES or any(m.get("clock") != "unix" for m in self.metas):
            return None
        spans = []
        for folder, meta in zip(self.paths, self.metas, strict=True):
            try:
                md = pq.ParquetFile(folder / "events.parquet").metadata
            except (OSError, pa.ArrowException):
                continue
            col = md.schema.names.index("ts") if "ts" in md.schema.names else -1
            got = [md.row_group(g).column(col).statistics for g in range(md.num_row_groups)] if col >= 0 else []
            lows = [st.min for st in got if st is not None and st.has_min_max]
            highs = [st.max for st in got if st is not None and st.has_min_max]
            base = int(meta.get("time_origin_ns", 0))
            if lows and base + min(lows) >= UNIX_NS_MIN:
                spans.append((base + int(min(lows)), base + int(max(highs)), str(folder)))
        return separate_runs(spans, "open each on its own, or compare them with aiprof diff")

    def sql(self, query: str, params: list[Any] | None = None) -> pa.Table:
        """Run a SQL query over the views and return an Arrow table."""
        try:
            rel = self.con.sql(query, params=params) if params else self.con.sql(query)
            if rel is None:  # a statement that returns nothing (CREATE, SET...)
                return pa.table({})
            return rel.to_arrow_table()
        except duckdb.Error as e:
            raise AiprofError(f"query failed: {str(e).splitlines()[0]}") from None

    def batches(self, query: str, rows: int = 1 << 20, params: list[Any] | None = None) -> Iterator[pa.RecordBatch]:
        """Run a SQL query and yield its rows in Arrow batches of about ``rows``: for a
        caller that reduces the rows as they come, so that its memory holds what it
        keeps, not every row. The connection runs nothing else until the iterator is
        exhausted (DuckDB streams the result from it). A query with no rows yields
        one empty batch (its columns)."""
        try:
            rel = self.con.sql(query, params=params) if params else self.con.sql(query)
            reader = rel.to_arrow_reader(rows)
            none = True
            for batch in reader:
                none = False
                yield batch
            if none:
                yield pa.RecordBatch.from_pylist([], schema=reader.schema)
        except duckdb.Error as e:
            raise AiprofError(f"query failed: {str(e).splitlines()[0]}") from None

    def close(self) -> None:
        if self._end is not None:
            self._end()  # once: a finalizer runs at most once
            self._session = None
        else:
            self.con.close()

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_profile(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and (p / META_FILE).is_file()


def find_profiles(path: str | os.PathLike[str]) -> list[Path]:
    """The profile folders at ``path``: itself, or its direct children that are profiles."""
    p = Path(path)
    if is_profile(p):
        return [p]
    if p.is_dir():
        return sorted(c for c in p.iterdir() if is_profile(c) and not c.name.startswith("."))
    return []


def open_profile(*paths: str | os.PathLike[str]) -> Profile:
    """Open profiles (folders ``NAME.aiprof`` or folders holding several) for analysis."""
    folders: list[Path] = []
    for path in paths:
        found = find_profiles(path)
        if not found:
            p = Path(path)
            if not p.exists():
                raise AiprofError(f"{p}: no such file or folder")
            raise AiprofError(f"{p}: not an aiprof profile (no {META_FILE}; a {PROFILE_SUFFIX} folder was expected)")
        folders.extend(found)
    metas = [_read_meta(f) for f in folders]
    origin = min(int(m.get("time_origin_ns", 0)) for m in metas)
    con, session = duck.session()
    try:
        counts: dict[str, int] = {}
        for table in TABLES:
            parts: list[str] = []
            for idx, (folder, meta) in enumerate(zip(folders, metas)):
                f = folder / f"{table}.parquet"
                if not f.is_file():
                    continue
                counts[table] = counts.get(table, 0) + int(meta.get("tables", {}).get(table, 0))
                src = f"read_parquet({_sql_str(str(f))})"
                shift = int(meta.get("time_origin_ns", 0)) - origin
                cols = [f"{idx}::INTEGER AS profile"]
                if table in _TIMED and shift:
                    parts.append(f"SELECT * REPLACE (ts + {shift} AS ts), {cols[0]} FROM {src}")
                else:
                    parts.append(f"SELECT *, {cols[0]} FROM {src}")
            if parts:
                con.execute(f"CREATE VIEW {table} AS " + " UNION ALL BY NAME ".join(parts))
            else:
                # An empty Arrow table gives the view its typed columns.
                con.register(f"empty_{table}", SCHEMAS[table].empty_table())
                con.execute(f"CREATE VIEW {table} AS SELECT *, 0::INTEGER AS profile FROM empty_{table}")
    except BaseException:
        duck.end_session(con, session)
        raise
    return Profile(paths=folders, metas=metas, con=con, tables=counts, _session=session)


def _read_meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / META_FILE).read_text())
    except (OSError, ValueError) as e:
        raise AiprofError(f"{folder}: unreadable {META_FILE}: {e}") from None
    return check_meta(meta, folder)


def check_meta(meta: Any, folder: object) -> dict[str, Any]:
    """``meta`` (profile.json parsed) when this aiprof reads it, else AiprofError."""
    if not isinstance(meta, dict):
        raise AiprofError(f"{folder}: {META_FILE} is not a JSON object")
    version = meta.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise AiprofError(
            f"{folder}: schema version {version!r} is newer than this aiprof reads ({SCHEMA_VERSION}); upgrade aiprof"
        )
    return meta


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
