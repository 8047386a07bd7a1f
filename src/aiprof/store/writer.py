"""Write a profile folder: Parquet tables plus profile.json, atomically.

Tables are streamed batch by batch through ``pyarrow.parquet.ParquetWriter``, so an
importer never holds a whole trace in memory. Everything goes to a temporary sibling
folder that is renamed into place on success; a failed import leaves no half profile
behind (and an existing profile of the same name is replaced only at the very end).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import __version__
from ..errors import AiprofError
from .arrow_np import from_numpy
from .schema import DEVICE_TYPES, KINDS, SCHEMA_VERSION, SCHEMAS
from .steps import StepIndex

PROFILE_SUFFIX = ".aiprof"
META_FILE = "profile.json"

#: Events are held back until commit (steps are only known once all are seen); past
#: this many bytes of Arrow data they spill to a temporary Arrow IPC file (lz4 buffers:
#: written and read back 3x faster than lz4 Parquet, whose encodings are not needed for
#: a file read once; about twice the size).
SPOOL_BYTES = 64 << 20
#: The spill's file, in the profile's temporary folder.
SPILL = ".events.spill.arrow"
#: Rows per row group of an events table written back from the spill.
SPILL_ROW_GROUP = 1 << 17
#: With ``keep_events``, the other tables are kept too (``kept_table``) while all of
#: them together hold no more than this many bytes of Arrow data.
KEPT_TABLE_BYTES = 64 << 20

_KINDS = frozenset(KINDS)
_DEVICE_TYPES = frozenset(DEVICE_TYPES)


def profile_path(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` with the ``.aiprof`` suffix that marks a profile folder."""
    p = Path(path)
    return p if p.name.endswith(PROFILE_SUFFIX) else p.with_name(p.name + PROFILE_SUFFIX)


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    """Write ``folder``/profile.json whole or not at all (a sibling file renamed over it)."""
    tmp = folder / f".{META_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=1, default=_json_default))
    os.replace(tmp, folder / META_FILE)


class ProfileWriter:
    """Collects table batches and metadata for one profile and commits them atomically.

    Use as a context manager; on a clean exit the profile is committed, on an exception
    the temporary folder is removed and the exception propagates.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = True,
        derive: Callable[[Path, dict[str, Any]], bool] | None = None,
        keep_events: bool = False,
    ) -> None:
        self.path: Path = profile_path(path)
        """Final location of the profile folder."""
        if self.path.exists() and not overwrite:
            raise AiprofError(f"{self.path} already exists")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}-{time.time_ns()}")
        self._tmp.mkdir()
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._sinks: list[pa.NativeFile] = []
        """The buffered files under the writers (a writer given a stream leaves it open)."""
        self._steps = StepIndex()
        self._spool: list[pa.RecordBatch] = []
        self._spool_bytes = 0
        self._spill: pa.ipc.RecordBatchFileWriter | None = None
        self.rows: dict[str, int] = {}
        """Rows written so far, per table."""
        self.unfit: Counter[str] = Counter()
        """``table.column`` -> values that did not fit the column's type (too large, of
        the wrong type): stored as null, and for events kept in ``args``."""
        self.meta: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "aiprof_version": __version__,
            "created_unix_ns": time.time_ns(),
            "sources": [],
            "time_origin_ns": 0,
            "clock": "unknown",
            "hosts": [],
            "ranks": [],
            "world_size": None,
            "devices": [],
            "partial": False,
            "warnings": [],
        }
        """The content of profile.json; importers fill it in."""
        self._derive = derive
        """Called at commit with the folder (tables and profile.json written) and the
        metadata, to add derived tables (store/derived.py) before the folder is moved;
        returns whether it added any (profile.json is then written again)."""
        self._committed = False
        self._keep_events = keep_events
        self.kept_events: pa.Table | None = None
        """With ``keep_events``: after commit, the events table exactly as written to
        events.parquet (steps assigned), when it stayed in memory (not spilled past
        ``SPOOL_BYTES``); else None. What a caller summarises without reading it back."""
        self._kept: dict[str, list[pa.RecordBatch | pa.Table]] | None = {} if keep_events else None
        self._kept_bytes = 0
        self._span: tuple[int, int] | None = None
        """First and last ``ts`` of the rows appended (or times noted) since the last source."""
        self.source_spans: dict[int, tuple[int, int]] = {}
        """Index in ``meta["sources"]`` -> (first, last) ``ts`` (ns from the origin) of the rows
        appended between the previous source's entry and its own (importers add a source
        once its rows are written), and of the times it noted (``note_span``). Not written:
        what the import checks (two runs joined, importers/__init__.py)."""

    # -- tables -------------------------------------------------------------------

    def append(self, table: str, columns: Mapping[str, Sequence[Any] | np.ndarray | pa.Array]) -> int:
        """Append rows to ``table`` from a mapping of column name to values.

        Columns not given are null. Unknown columns are an error (a typo would
        otherwise lose data silently). Returns the number of rows appended.
        """
        schema = SCHEMAS[table]
        unknown = set(columns) - set(schema.names)
        if unknown:
            raise ValueError(f"unknown columns for {table}: {sorted(unknown)}")
        n = -1
        for v in columns.values():
            n = len(v)
            break
        if n <= 0:
            return 0
        arrays: list[pa.Array] = []
        unfit: dict[str, dict[int, Any]] = {}
        for field in schema:
            v = columns.get(field.name)
            if v is None:
                arrays.append(pa.nulls(n, field.type))
                continue
            if len(v) != n:
                raise ValueError(f"{table}.{field.name}: {len(v)} values, expected {n}")
            arr, odd = _column(v, field.type)
            if odd:
                unfit[field.name] = odd
                self.unfit[f"{table}.{field.name}"] += len(odd)
            arrays.append(arr)
        if unfit and table == "events":
            arrays[schema.get_field_index("args")] = _keep_in_args(arrays[schema.get_field_index("args")], unfit)
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        if table == "events":
            _check_vocabulary(batch)
        self.append_batch(table, batch)
        return n

    def append_batch(self, table: str, batch: pa.RecordBatch | pa.Table) -> None:
        """Append an Arrow batch that already has the table's schema."""
        if batch.num_rows == 0:
            return
        if "ts" in batch.schema.names:
            mm = pc.min_max(batch.column("ts"))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is not None and hi is not None:
                self.note_span(int(lo), int(hi))
        if table == "events":
            self._spool_events(batch)
            return
        self._write(table, batch)

    def _write(self, table: str, batch: pa.RecordBatch | pa.Table) -> None:
        w = self._writers.get(table)
        if w is None:
            # Buffered: unbuffered, Parquet's writer makes a system call per page and
            # header (over a hundred for a few rows).
            sink = pa.output_stream(self._tmp / f"{table}.parquet", buffer_size=1 << 20)
            self._sinks.append(sink)
            w = pq.ParquetWriter(
                sink,
                SCHEMAS[table],
                compression="zstd",
                use_dictionary=True,
            )
            self._writers[table] = w
        if isinstance(batch, pa.RecordBatch):
            w.write_batch(batch)
        else:
            w.write_table(batch)
        self.rows[table] = self.rows.get(table, 0) + batch.num_rows
        if self._kept is not None and table != "events":
            self._kept_bytes += batch.nbytes
            if self._kept_bytes > KEPT_TABLE_BYTES:
                self._kept = None  # too big to keep: its callers read the files
            else:
                self._kept.setdefault(table, []).append(batch)

    def kept_table(self, table: str) -> pa.Table | None:
        """With ``keep_events``, a table other than events as its rows were appended (an
        empty table where none were; memory's ``allocated``, which the commit may fill,
        as appended), or None where the tables written outgrew ``KEPT_TABLE_BYTES``."""
        if self._kept is None:
            return None
        parts = self._kept.get(table, [])
        batches = [b for p in parts for b in (p.to_batches() if isinstance(p, pa.Table) else [p])]
        return pa.Table.from_batches(batches, schema=SCHEMAS[table])

    def _spool_events(self, batch: pa.RecordBatch | pa.Table) -> None:
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            self._steps.observe(b)
            self.rows["events"] = self.rows.get("events", 0) + b.num_rows
            if self._spill is not None:
                self._spill.write_batch(b)
                continue
            self._spool.append(b)
            self._spool_bytes += b.nbytes
            if self._spool_bytes > SPOOL_BYTES:
                self._spill = pa.ipc.new_file(
                    self._tmp / SPILL, SCHEMAS["events"], options=pa.ipc.IpcWriteOptions(compression="lz4")
                )
                for sb in self._spool:
                    self._spill.write_batch(sb)
                self._spool.clear()
                self._spool_bytes = 0

    def _flush_events(self) -> None:
        total = self.rows.pop("events", 0)
        repeated = self._steps.repeated()
        if repeated:
            r, n, k = repeated[0]
            more = f" (and {len(repeated) - 1} more step numbers)" if len(repeated) > 1 else ""
            self.warn(
                f"step {n} of rank {r} marks {k} spans at different times{more}: the events of all of them "
                "count as that one step (a trace joined from several runs? import each run on its own)"
            )
        if self._spill is not None:
            self._spill.close()
            self._spill = None
            spill = self._tmp / SPILL
            # Read, not mapped: mapped pages count in the process's RSS until unmapped.
            with pa.OSFile(str(spill)) as source:
                reader = pa.ipc.open_file(source)
                held: list[pa.RecordBatch] = []
                rows = 0
                for i in range(reader.num_record_batches):
                    held.append(reader.get_batch(i))
                    rows += held[-1].num_rows
                    if rows >= SPILL_ROW_GROUP or i == reader.num_record_batches - 1:
                        # Row groups of about SPILL_ROW_GROUP rows, whatever the batches.
                        group = pa.Table.from_batches(held, schema=SCHEMAS["events"]).combine_chunks()
                        for b in group.to_batches():
                            self._write("events", self._steps.apply(b))
                        held, rows = [], 0
                del reader
            spill.unlink()
        else:
            # One write of the batches (one row group, each column compressed once), not
            # one per batch: a small trace's few batches cost a row group each.
            batches = [self._steps.apply(b) for b in self._spool]
            self._spool.clear()
            table = pa.Table.from_batches(batches, schema=SCHEMAS["events"])
            if batches:
                self._write("events", table)
            if self._keep_events:
                self.kept_events = table
        self.rows["events"] = total
        if total and "events" not in self._writers:
            raise AssertionError("events spooled but none written")

    # -- metadata -----------------------------------------------------------------

    def note_span(self, first: int, last: int) -> None:
        """Times (``ts``: ns from the origin) the next source holds beyond the rows it
        appends (a summary whose start times go to a table without ``ts``)."""
        if self._span is not None:
            first, last = min(first, self._span[0]), max(last, self._span[1])
        self._span = (first, last)

    def take_span(self) -> tuple[int, int] | None:
        """The span noted since the last source's entry, now forgotten."""
        span, self._span = self._span, None
        return span

    def add_source(self, importer: str, path: str | os.PathLike[str], **extra: Any) -> None:
        """Record one input (importer name, path, size, fingerprint) in profile.json."""
        p = Path(path)
        entry: dict[str, Any] = {"importer": importer, "path": str(p.resolve())}
        if p.is_file():
            st = p.stat()
            entry["size"] = st.st_size
            entry["mtime_ns"] = st.st_mtime_ns
            entry["sha256_head"] = _head_hash(p)
        entry.update(extra)
        self.meta["sources"].append(entry)
        span = self.take_span()
        if span is not None:
            self.source_spans[len(self.meta["sources"]) - 1] = span

    def warn(self, message: str) -> None:
        """Keep a warning in profile.json (the caller also shows it to the user)."""
        self.meta["warnings"].append(message)

    # -- commit ---------------------------------------------------------------------

    def commit(self) -> Path:
        """Close the tables, write profile.json and move the folder into place."""
        self._flush_events()
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        self._close_sinks()
        if self.rows.get("memory"):
            from .memory_totals import derive_allocated

            for message in derive_allocated(self._tmp / "memory.parquet"):
                self.warn(message)
        self.meta["tables"] = dict(self.rows)
        write_meta(self._tmp, self.meta)
        if self._derive is not None and self._derive(self._tmp, self.meta):
            write_meta(self._tmp, self.meta)
        if self.path.exists():
            old = self.path.with_name(f".{self.path.name}.old-{time.time_ns()}")
            self.path.rename(old)
            self._tmp.rename(self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            self._tmp.rename(self.path)
        self._committed = True
        return self.path

    def abort(self) -> None:
        """Drop everything written so far."""
        self._spool.clear()
        if self._spill is not None:
            try:
                self._spill.close()
            except Exception:
                pass
            self._spill = None
        for w in self._writers.values():
            try:
                w.close()
            except Exception:
                pass
        self._writers.clear()
        for sink in self._sinks:
            try:
                sink.close()
            except Exception:
                pass
        self._sinks.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _close_sinks(self) -> None:
        while self._sinks:
            self._sinks.pop().close()

    def __enter__(self) -> ProfileWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if not self._committed:
                self.commit()
        else:
            self.abort()


def _column(v: Sequence[Any] | np.ndarray | pa.Array, typ: pa.DataType) -> tuple[pa.Array, dict[int, Any]]:
    """``v`` as an Arrow array of ``typ``, and {row: value} of the values that do not fit
    it (an integer past int64, a list where a number belongs): those rows are null."""
    try:
        if isinstance(v, pa.Array):
            arr = v
        elif isinstance(v, np.ndarray):
            arr = from_numpy(v, typ)
        else:
            arr = pa.array(v, type=typ, from_pandas=True)
        if arr.type != typ:
            arr = arr.cast(typ)
        return arr, {}
    except (OverflowError, TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    values = v.to_pylist() if isinstance(v, pa.Array) else list(v)
    odd: dict[int, Any] = {}
    for i, x in enumerate(values):
        try:
            pa.scalar(x, type=typ, from_pandas=True)
        except (OverflowError, TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            odd[i] = x
            values[i] = None
    return pa.array(values, type=typ, from_pandas=True), odd


def _keep_in_args(args: pa.Array, unfit: dict[str, dict[int, Any]]) -> pa.Array:
    """The events' args texts with each value that did not fit its column added under
    that column's name (``"ts (raw)"`` when args has that key already)."""
    texts = args.to_pylist()
    for i in sorted({i for odd in unfit.values() for i in odd}):
        try:
            obj = json.loads(texts[i]) if texts[i] else {}
        except (ValueError, RecursionError):
            obj = {"args (raw)": texts[i]}
        if not isinstance(obj, dict):
            obj = {"args (raw)": obj}
        for col, odd in unfit.items():
            if i in odd:
                obj[col if col not in obj else f"{col} (raw)"] = _jsonable(odd[i])
        try:
            texts[i] = json.dumps(obj, allow_nan=False, default=repr)
        except (ValueError, RecursionError):
            texts[i] = json.dumps({k: _jsonable(v) for k, v in obj.items()})
    return pa.array(texts, type=pa.string())


def _jsonable(x: Any) -> Any:
    """A value JSON text can hold: integers past 64 bits as their digits (DuckDB's JSON
    functions read those as text anyway), what cannot be written as a short text."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return x if -(2**63) <= x < 2**63 else str(x)
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else str(x)
    try:
        text = json.dumps(x, allow_nan=False, default=repr)
    except (ValueError, RecursionError):
        return f"<unreadable {type(x).__name__}>"
    return json.loads(text) if len(text) <= 4096 else text[:4096] + "..."


def _check_vocabulary(batch: pa.RecordBatch) -> None:
    # A kind outside the vocabulary would make every analyser silently miss it.
    kinds = set(batch.column("kind").unique().to_pylist())
    bad = kinds - _KINDS - {None}
    if bad:
        raise ValueError(f"kind outside the vocabulary: {sorted(bad)}")
    dts = set(batch.column("device_type").unique().to_pylist())
    bad = dts - _DEVICE_TYPES - {None}
    if bad:
        raise ValueError(f"device_type outside the vocabulary: {sorted(bad)}")


def _head_hash(p: Path, size: int = 1 << 20) -> str:
    import hashlib

    h = hashlib.sha256()
    with p.open("rb") as f:
        h.update(f.read(size))
    return h.hexdigest()


def _json_default(o: object) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
