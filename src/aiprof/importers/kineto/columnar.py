"""The Kineto importer's columnar path: DuckDB parses the events, Arrow makes the rows.

The event path (:mod:`.events`) decodes each event into a Python object and builds the
store's columns from those objects: several µs of interpreter work per event. Here:

1. the event list is copied out of the file as one JSON array into a temporary file
   (gunzipped on the way; an uncompressed file is copied by the kernel), or, when the
   file is damaged, cut event by event by the scanner of :mod:`.jsonstream`, which
   keeps every complete event and says what was lost;
2. DuckDB's JSON reader parses it on every core, in one streaming pass, into typed
   columns: exact ns times from the numbers' text (``DECIMAL``, as :mod:`.timeconv`),
   the typed ``args`` keys (one parse of each ``args``), ``args`` kept as JSON text;
3. each batch of rows becomes store rows with Arrow compute, by the event path's
   rules: ``kind`` by :meth:`.events.ChromeTraceConverter.classify` once per distinct
   (category, name), device placement, correlation, flow text. Batches go to the
   writer, which assigns steps at commit as for every importer.

The rows this does not make (metadata, counters, B/E pairs, string pids and tids,
flows with odd ids or args, events written by ``aiprof timechart`` with their own
classification) go through the event path's converter, in file order, so each rule
lives in one place. When DuckDB cannot read the events at all (a malformed event, a
field of an odd type), the caller imports the whole file by the event path, which
skips what it must and says so: nothing is lost either way.

Small files (under 256 KiB of gzip or 2 MiB of JSON) take the event path, which starts
faster. ``AIPROF_IMPORT_ENGINE=python`` or ``=columnar`` forces one path (the tests run
both on every trace).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from ..jsonstream import ArrayParts, TraceStream, balanced_array
from .decode import Ev
from .rules import (
    C10_DEVICE_TYPES,
    ORIGIN_EVENTS,
    launch_correlation_arrow,
    origin,
    placement_arrow,
    transfer_bytes_arrow,
    vendor_of_spans_arrow,
)

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from ..base import ImportContext
    from .events import ChromeTraceConverter

log = logging.getLogger("aiprof.import")

ENGINE_ENV = "AIPROF_IMPORT_ENGINE"

#: Rows per Arrow batch from DuckDB (at least rules.ORIGIN_EVENTS, so the first
#: batch decides the time origin as the event path does).
_BATCH = 1 << 16
#: Longest single event DuckDB accepts (bytes); a longer one sends the file down the
#: event path.
_MAX_EVENT = 16 << 20

_COLUMNS = (
    "{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', ts: 'VARCHAR', "
    "dur: 'VARCHAR', id: 'JSON', bp: 'VARCHAR', s: 'VARCHAR', args: 'JSON', aiprof_kind: 'VARCHAR', "
    "aiprof_device_type: 'VARCHAR', aiprof_device: 'JSON', aiprof_synthetic: 'JSON'}"
)
#: The typed ``args`` keys, by JSON path (paths are case-sensitive; DuckDB struct
#: fields are not, and Kineto writes both "bytes" and "Bytes").
_ARGS_PATHS = (
    "['$.correlation', '$.\"External id\"', '$.\"external id\"', '$.device', '$.bytes', '$.grid', "
    "'$.block', '$.\"Device Type\"', '$.\"Device Id\"', '$.Addr', '$.Bytes', '$.\"Total Allocated\"', "
    "'$.\"Total Reserved\"']"
)
_FLOWS = "('s', 'f', 't')"
#: Columns of the rows the event path makes, as written.
_AS_WRITTEN = ("pid", "tid", "ts", "dur", "id", "s", "aiprof_kind", "aiprof_device_type", "aiprof_device")


#: Columns each destination reads from a batch.
_EVENTS_IN = (
    "ph",
    "cat",
    "name",
    "pid_i",
    "tid_i",
    "ts_ns",
    "dur_ns",
    "flow_id",
    "a_corr",
    "a_ext",
    "a_device",
    "a_bytes",
    "a_grid",
    "a_block",
    "args",
)
_MEMORY_IN = ("ts_ns", "pid_i", "tid_i", "m_type", "m_device", "m_addr", "m_bytes", "m_allocated", "m_reserved")


#: Bytes of event text per file handed to DuckDB, which parses each file on one core:
#: the list is cut into files of about this size (:class:`..jsonstream.ArrayParts`).
#: Each file costs a query (about 17 ms of planning here): 8 MiB files cost more CPU
#: than they saved on 2 cores (32 MiB ones made a 2 GiB trace's parse 1.5x faster). Each
#: file read at once holds DuckDB's parse of it: 16 MiB files took the peak RSS of a
#: 342.7 MB import from 1.55-1.63x the JSON to 1.26-1.37x (aiprof/allocators.py), at
#: the same CPU time within this machine's noise.
PIECE_BYTES = 16 << 20

#: Below these sizes the event path is faster (DuckDB's start costs ~50 ms): gzip
#: (compressed bytes) and plain JSON.
MIN_GZIP_BYTES = 256 << 10
MIN_JSON_BYTES = 2 << 20


def wanted(path: Path) -> bool:
    """Should ``path`` take the columnar path: ``AIPROF_IMPORT_ENGINE=columnar`` always,
    ``python`` never, else when the file is large enough for it to pay."""
    engine = os.environ.get(ENGINE_ENV, "").lower()
    if engine in ("python", "events"):
        return False
    if engine == "columnar":
        return True
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError:
        return False
    return size >= (MIN_GZIP_BYTES if gz else MIN_JSON_BYTES)


class ColumnarUnavailable(Exception):
    """DuckDB could not take these events; the caller uses the event path instead."""


class PartsRefused(ColumnarUnavailable):
    """DuckDB stopped on events read in parts after rows were written: one cut between
    parts may have fallen inside an event (:class:`..jsonstream.ArrayParts`); the
    caller imports again with the list read as one file."""


def _ns(col: str) -> str:
    """SQL: a µs text (number or string) -> int64 ns, rounded half up at the ns.
    Integers (most traces) skip the decimal cast, which costs ten times more."""
    return (
        f"CASE WHEN contains({col}, '.') OR contains({col}, 'e') OR contains({col}, 'E') OR contains({col}, ' ') "
        f"THEN CAST(round(TRY_CAST(trim({col}) AS DECIMAL(38, 6)), 3) * 1000 AS BIGINT) "
        f"ELSE TRY_CAST({col} AS BIGINT) * 1000 END"
    )


def _int(col: str) -> str:
    """SQL: the text ``col`` as an integer when it is written as one (else NULL)."""
    return (
        f"CASE WHEN contains({col}, '.') OR contains({col}, 'e') OR contains({col}, 'E') THEN NULL "
        f"ELSE TRY_CAST({col} AS BIGINT) END"
    )


def _select(events: list[Path]) -> str:
    """SQL: one row per event, typed, with ``sql_row``: whether Arrow makes this row."""
    a_col = f"CASE WHEN args IS NOT NULL AND ph NOT IN {_FLOWS} THEN json_extract(args, {_ARGS_PATHS}) END"
    written = ", ".join(f"CASE WHEN NOT sql_row THEN {c}::VARCHAR END AS w_{c}" for c in _AS_WRITTEN)
    quoted = ("'" + p.as_posix().replace("'", "''") + "'" for p in events)
    files = "[" + ", ".join(quoted) + "]"
    return f"""
        SELECT ph, cat, coalesce(name, '') AS name, pid_i, tid_i, ts_ns, dur_ns, sql_row,
          sql_row AND ph IN {_FLOWS} AND coalesce(aiprof_synthetic::VARCHAR, '') = 'true' AS drawn,
          CASE WHEN ph IN {_FLOWS} AND sql_row THEN id::BIGINT END AS flow_id,
          bp, TRY_CAST(a[1] AS BIGINT) AS a_corr,
          coalesce(TRY_CAST(a[2] AS BIGINT), TRY_CAST(a[3] AS BIGINT)) AS a_ext,
          TRY_CAST(json_extract_string(a[4], '$') AS INTEGER) AS a_device,
          trunc(TRY_CAST(a[5] AS DOUBLE))::BIGINT AS a_bytes,
          CASE WHEN starts_with(a[6]::VARCHAR, '[') AND a[6]::VARCHAR <> '[]' THEN a[6]::VARCHAR END AS a_grid,
          CASE WHEN starts_with(a[7]::VARCHAR, '[') AND a[7]::VARCHAR <> '[]' THEN a[7]::VARCHAR END AS a_block,
          TRY_CAST(a[8] AS BIGINT) AS m_type, TRY_CAST(a[9] AS INTEGER) AS m_device, TRY_CAST(a[10] AS BIGINT) AS m_addr,
          TRY_CAST(a[11] AS BIGINT) AS m_bytes, TRY_CAST(a[12] AS BIGINT) AS m_allocated,
          TRY_CAST(a[13] AS BIGINT) AS m_reserved,
          CASE WHEN ph IN {_FLOWS} AND sql_row THEN
                 '{{"ph":"' || ph || '","id":' || id::VARCHAR || CASE WHEN bp = 'e' THEN ',"bp":"e"' ELSE '' END || '}}'
               ELSE args::VARCHAR END AS args,
          CASE WHEN NOT sql_row THEN aiprof_synthetic::VARCHAR END AS w_synthetic,
          {written}
        FROM (
          SELECT *, {a_col} AS a, (
              ph IN ('X', 'i', 'I', 's', 'f', 't')
              AND aiprof_kind IS NULL AND aiprof_device_type IS NULL AND aiprof_device IS NULL
              AND (aiprof_synthetic IS NULL OR ph IN {_FLOWS})
              AND (pid IS NULL OR pid_i IS NOT NULL) AND (tid IS NULL OR tid_i IS NOT NULL)
              AND ts_ns IS NOT NULL
              AND (ph NOT IN {_FLOWS} OR (TRY_CAST(id::VARCHAR AS BIGINT) IS NOT NULL AND NOT contains(id::VARCHAR, '.')
                                        AND args IS NULL AND (bp IS NULL OR bp = 'e')))
            ) AS sql_row
          FROM (
            SELECT *, {_ns("ts")} AS ts_ns, {_ns("dur")} AS dur_ns, {_int("pid")} AS pid_i, {_int("tid")} AS tid_i
            FROM read_json({files}, format = 'array', columns = {_COLUMNS},
                           maximum_object_size = {_MAX_EVENT})))
    """


def spool_events(path: Path, folder: Path, ctx: ImportContext, piece: int) -> tuple[TraceStream, list[Path]]:
    """Write the complete events of ``path`` into ``folder`` as JSON array files of about
    ``piece`` bytes each, cut between events (one file when ``piece`` is 0): copied
    whole when the file is intact, else cut event by event by the scanner (which keeps
    every complete event and says what was lost). Returns the stream (header,
    completeness, problems) and the files, in order (none when the list is empty)."""
    stream = TraceStream(path)
    parts = ArrayParts(folder, piece)
    try:
        copied = stream.copy_events(parts, ctx.progress)
    finally:
        parts.close()
    if not copied:
        for p in parts.paths:
            p.unlink()
        stream = TraceStream(path)
        parts = ArrayParts(folder, piece)
        runs = 0
        parts.write(b"[")

        def sink(text: bytes) -> list[Any]:
            nonlocal runs
            body = text[1:-1]  # the scanner hands "[ev, ...]"
            if body.strip():
                if runs:
                    parts.write(b",")
                parts.write(body)
                runs += 1
            return []

        try:
            for _ in stream.batches(sink, sink):
                pass
            parts.write(b"]")
        finally:
            parts.close()
    if len(parts.paths) == 1 and parts.paths[0].stat().st_size <= 2:
        return stream, []
    return stream, parts.paths


def _connect(tmp: Path) -> duckdb.DuckDBPyConnection:
    from ...store import duck

    return duck.connect(threads=None, spill=tmp.as_posix())


def _batches(con: duckdb.DuckDBPyConnection, events: list[Path]) -> _Parts | None:
    """The Arrow batches of :func:`_select` over the event files, in file order (None: no
    rows); the first is fetched here so that a file DuckDB cannot read fails before
    anything is written."""
    parts = _Parts(con, events, workers=max(1, min(len(events), os.cpu_count() or 1)))
    try:
        parts.fetch_first()
    except StopIteration:
        parts.close()
        return None
    except BaseException:
        parts.close()
        raise
    return parts


class _Parts:
    """The batches of :func:`_select` over each event file in turn, in file order.

    DuckDB parses one JSON array file on one thread, and the order of rows read from
    several files at once is not kept by a query that computes columns; so each file is
    read by a query of its own, up to ``workers`` files at once, each on its own cursor
    in a thread of its own (DuckDB works without the GIL), ahead of the consumer, which
    converts and writes the batches in order. A file's batches wait in a short queue
    (one file that is the whole list streams through it in bounded memory).

    The first batch holds at least ``rules.ORIGIN_EVENTS`` rows (from as many files as
    it takes), as the one-file read gives it, so the time origin is the same.
    :meth:`close` stops the threads (before the connection may be closed)."""

    _DONE = object()
    _QUEUED = 2
    """Batches a file's queue holds before its reader waits."""

    def __init__(self, con: duckdb.DuckDBPyConnection, files: list[Path], *, workers: int) -> None:
        self.files = files
        self.queues: dict[int, queue.Queue[Any]] = {}
        self.cond = threading.Condition()
        self.next_file = 0
        self.reading = 0
        """The file the consumer reads now; readers stay within ``workers`` of it."""
        self.workers = workers
        self.stop = threading.Event()
        self.first: Any = None
        self.rest: Any = None
        self.threads = [
            threading.Thread(target=self._read, args=(con.cursor(),), name="aiprof-import-parse", daemon=True)
            for _ in range(workers)
        ]
        for t in self.threads:
            t.start()

    def _read(self, cur: duckdb.DuckDBPyConnection) -> None:
        try:
            while True:
                with self.cond:
                    while not self.stop.is_set() and self.next_file >= self.reading + self.workers:
                        self.cond.wait(0.1)
                    if self.stop.is_set() or self.next_file >= len(self.files):
                        return
                    k = self.next_file
                    self.next_file += 1
                    q: queue.Queue[Any] = queue.Queue(maxsize=self._QUEUED)
                    self.queues[k] = q
                    self.cond.notify_all()
                try:
                    for b in cur.sql(_select([self.files[k]])).to_arrow_reader(_BATCH):
                        if not self._put(q, b):
                            return
                    self._put(q, self._DONE)
                except BaseException as e:  # handed to the consumer
                    self._put(q, e)
                    return
        finally:
            cur.close()

    def _put(self, q: queue.Queue[Any], item: Any) -> bool:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _all(self) -> Any:
        """Every batch, in file order; DuckDB's errors as they come."""
        for k in range(len(self.files)):
            with self.cond:
                self.reading = k
                self.cond.notify_all()
                while k not in self.queues:
                    self.cond.wait(0.1)
                q = self.queues.pop(k)
            while True:
                item = q.get()
                if item is self._DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item

    def fetch_first(self) -> None:
        """Read the first batch (StopIteration: no rows; ColumnarUnavailable: DuckDB
        cannot read the events)."""
        import duckdb
        import pyarrow as pa

        self.rest = self._all()
        got: list[Any] = []
        rows = 0
        try:
            while rows < ORIGIN_EVENTS:
                b = next(self.rest, None)
                if b is None:
                    break
                got.append(b)
                rows += b.num_rows
        except (duckdb.Error, ValueError, OverflowError, OSError) as e:
            refused = PartsRefused if self.cut_suspected(e) else ColumnarUnavailable
            raise refused(str(e).splitlines()[0]) from e
        if not got:
            raise StopIteration
        self.first = got[0] if len(got) == 1 else pa.Table.from_batches(got).combine_chunks().to_batches()[0]

    def __iter__(self) -> Any:
        import duckdb

        yield self.first
        try:
            yield from self.rest
        except (duckdb.Error, ValueError, OverflowError, OSError) as e:
            # Past the first batch rows are written: the caller starts over.
            refused = PartsRefused if self.cut_suspected(e) else ColumnarUnavailable
            raise refused(str(e).splitlines()[0]) from e

    def cut_suspected(self, e: BaseException) -> bool:
        """May DuckDB's error come from a cut between two files that fell inside an
        event? Not when the file it names holds whole values from its '[' to its ']'
        (its brackets balance, by the exact scan of :mod:`..jsonstream`): the events
        themselves are damaged then, and reading them as one file would fail alike."""
        if len(self.files) < 2:
            return False
        named = re.search(r'file "([^"]+)"', str(e))
        if named is None:
            return True
        try:
            text = Path(named.group(1)).read_bytes().rstrip()
        except OSError:
            return True
        return not balanced_array(text)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


class BatchConverter:
    """Turns DuckDB's typed batches into store rows with the event path's rules."""

    def __init__(self, conv: ChromeTraceConverter) -> None:
        self.conv = conv
        self.ctx = conv.ctx
        self.c10_keys = list(C10_DEVICE_TYPES)
        self.c10_values = list(C10_DEVICE_TYPES.values())
        self._kinds: dict[tuple[str | None, str], str] = {}
        """Kind of each (category, name) seen."""

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        ph = batch.column("ph")
        ctx = self.ctx
        if ctx.origin_raw_ns is None:
            # As the event path: the earliest time of the first ORIGIN_EVENTS events.
            head = batch.slice(0, ORIGIN_EVENTS)
            ts = pc.drop_null(head.column("ts_ns").filter(pc.not_equal(head.column("ph"), "M")))
            first = origin(ts.to_numpy(zero_copy_only=False))
            if first is not None:
                ctx.origin(int(first))
        sql_row = batch.column("sql_row")
        if not pc.all(sql_row).as_py():
            self._event_path(batch.filter(pc.invert(sql_row)))
        else:
            sql_row = None
        counts = self.conv.counts_ph
        for item in pc.value_counts(ph if sql_row is None else ph.filter(sql_row)).to_pylist():
            counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
        if not self.conv.vendor_known:
            spans = batch if sql_row is None else batch.filter(sql_row)
            spans = spans.filter(pc.equal(spans.column("ph"), "X"))
            self.conv.note_vendor(vendor_of_spans_arrow(spans.column("cat"), spans.column("name")))
        # One filter per destination, over only the columns it needs (args is wide).
        is_memory = pc.and_(pc.is_in(ph, value_set=_pa_strings(["i", "I"])), pc.equal(batch.column("name"), "[memory]"))
        keep = pc.invert(pc.or_(is_memory, batch.column("drawn")))  # drawn: arrows timechart drew
        if sql_row is not None:
            keep = pc.and_(keep, sql_row)
            is_memory = pc.and_(is_memory, sql_row)
        if pc.any(is_memory).as_py():
            self._memory(batch.select(_MEMORY_IN).filter(is_memory))
        if not pc.all(keep).as_py():
            batch = batch.select(_EVENTS_IN).filter(keep)
        if batch.num_rows:
            ph = batch.column("ph")
            self._events(batch, pc.equal(ph, "X"), pc.is_in(ph, value_set=_pa_strings(["i", "I"])))

    # -- rows -------------------------------------------------------------------------

    def _kind(self, batch: pa.RecordBatch, is_x: pa.Array, is_instant: pa.Array) -> pa.Array:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        # (cat, name) -> one integer per row from the two columns' dictionaries.
        cat = pc.dictionary_encode(batch.column("cat"))
        name = pc.dictionary_encode(batch.column("name"))
        cat_idx = pc.fill_null(cat.indices, len(cat.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
        name_idx = name.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        pairs, inverse = np.unique(cat_idx * len(name.dictionary) + name_idx, return_inverse=True)
        cats = [*cat.dictionary.to_pylist(), None]
        names = name.dictionary.to_pylist()
        keys = [(cats[int(p) // len(names)], names[int(p) % len(names)]) for p in pairs]
        todo = [k for k in keys if k not in self._kinds]
        if todo:
            for k, v in zip(todo, self.conv.classify([c for c, _ in todo], [n for _, n in todo], [None] * len(todo))):
                self._kinds[k] = v
        span_kind = pc.take(pa.array([self._kinds[k] for k in keys], pa.string()), pa.array(inverse))
        return pc.if_else(is_x, span_kind, pc.if_else(is_instant, "instant", "other"))

    def _events(self, batch: pa.RecordBatch, is_x: pa.Array, is_instant: pa.Array) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        conv = self.conv
        n = batch.num_rows
        kind = self._kind(batch, is_x, is_instant)
        cat = batch.column("cat")
        is_flow = pc.invert(pc.or_(is_x, is_instant))
        pid = pc.fill_null(batch.column("pid_i"), 0)
        tid = pc.fill_null(batch.column("tid_i"), 0)
        device_type, device = placement_arrow(kind, cat, batch.column("ph"), pid, batch.column("a_device"), conv.vendor)
        correlation = pc.if_else(
            is_flow, launch_correlation_arrow(cat, batch.column("flow_id")), batch.column("a_corr")
        )
        nbytes = transfer_bytes_arrow(kind, batch.column("a_bytes"))
        ts = pc.subtract(batch.column("ts_ns"), pa.scalar(self.ctx.origin_raw_ns or 0, pa.int64()))
        dur = pc.if_else(is_x, pc.fill_null(batch.column("dur_ns"), 0), pa.scalar(0, pa.int64()))
        conv.ctx.writer.append(
            "events",
            {
                "rank": np.full(n, conv.rank, dtype=np.int32),
                "device_type": device_type,
                "device": device,
                "pid": pid,
                "tid": tid,
                "kind": kind,
                "cat": cat,
                "name": batch.column("name"),
                "ts": ts,
                "dur": dur,
                "correlation": correlation,
                "external_id": pc.if_else(is_flow, pa.nulls(n, pa.int64()), batch.column("a_ext")),
                "bytes": nbytes,
                "grid": batch.column("a_grid"),
                "block": batch.column("a_block"),
                "args": batch.column("args"),
            },
        )
        for item in pc.value_counts(kind).to_pylist():
            self.ctx.kinds[item["values"]] += item["counts"]

    def _memory(self, batch: pa.RecordBatch) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = batch.num_rows
        mtype = pc.fill_null(batch.column("m_type"), 0)
        idx = pc.index_in(mtype, value_set=pa.array(self.c10_keys, pa.int64()))
        dtype = pc.fill_null(pc.take(pa.array(self.c10_values, pa.string()), idx), "cpu")
        self.ctx.writer.append(
            "memory",
            {
                "rank": np.full(n, self.conv.rank, dtype=np.int32),
                "device_type": dtype,
                "device": pc.fill_null(batch.column("m_device"), -1),
                "ts": pc.subtract(batch.column("ts_ns"), pa.scalar(self.ctx.origin_raw_ns or 0, pa.int64())),
                "bytes": batch.column("m_bytes"),
                "allocated": batch.column("m_allocated"),
                "reserved": batch.column("m_reserved"),
                "addr": batch.column("m_addr"),
                "pid": pc.fill_null(batch.column("pid_i"), 0),
                "tid": pc.fill_null(batch.column("tid_i"), 0),
            },
        )
        self.ctx.tables["memory"] += n

    def _event_path(self, batch: pa.RecordBatch) -> None:
        """Rows Arrow does not make, through the event path's converter."""
        cols = {name: batch.column(name).to_pylist() for name in batch.schema.names if name.startswith("w_")}
        ph, cat, name, bp, args = (batch.column(c).to_pylist() for c in ("ph", "cat", "name", "bp", "args"))
        evs = []
        for i in range(batch.num_rows):
            dev = _json_value(cols["w_aiprof_device"][i])
            evs.append(
                Ev(
                    ph=ph[i] or "",
                    cat=cat[i],
                    name=name[i],
                    pid=_scalar(cols["w_pid"][i]),
                    tid=_scalar(cols["w_tid"][i]),
                    ts=cols["w_ts"][i],
                    dur=cols["w_dur"][i],
                    id=_id(cols["w_id"][i]),
                    bp=bp[i],
                    s=cols["w_s"][i],
                    args=msgspec.Raw(args[i].encode()) if args[i] is not None else msgspec.Raw(),
                    aiprof_kind=cols["w_aiprof_kind"][i],
                    aiprof_device_type=cols["w_aiprof_device_type"][i],
                    aiprof_device=dev if type(dev) is int else None,
                    aiprof_synthetic=_json_value(cols["w_synthetic"][i]) is True,
                )
            )
        self.conv.add_batch(evs)


def _pa_strings(values: list[str]) -> pa.Array:
    import pyarrow as pa

    return pa.array(values, pa.string())


def _json_value(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except (orjson.JSONDecodeError, RecursionError):
        return None


def _scalar(text: str | None) -> int | str | None:
    """A pid / tid as written (read as text): an int (a float becomes one, as in the
    event path), else the string; an object or a list, which DuckDB hands as JSON
    text, is None (as the event path)."""
    if text is None:
        return None
    if text[:1] in ("{", "[") and isinstance(_json_value(text), (dict, list)):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        return text
    return int(f) if f == f and -(2**63) <= f < 2**63 else text


def _id(text: str | None) -> int | str | None:
    """An ``id`` as written (read as JSON): an int or a string (else its text)."""
    v = _json_value(text)
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, str)):
        return v
    return text


def load(
    path: Path, ctx: ImportContext, converter: type[ChromeTraceConverter]
) -> tuple[ChromeTraceConverter, TraceStream] | None:
    """Import ``path`` by the columnar path: (converter, stream), or None when DuckDB
    cannot read its events (nothing has been written then)."""
    with tempfile.TemporaryDirectory(prefix="aiprof-import-") as tmpdir:
        tmp = Path(tmpdir)
        piece = PIECE_BYTES if ctx.columnar_parts else 0
        stream, events = spool_events(path, tmp, ctx, piece)
        con = _connect(tmp)
        batches: _Parts | None = None
        try:
            if events:
                try:
                    batches = _batches(con, events)
                except PartsRefused as e:
                    # Maybe a cut inside an event: the list again, as one file.
                    log.info("events in parts refused (%s); reading them as one file", e)
                    ctx.columnar_parts = False
                    return load(path, ctx, converter)
                except ColumnarUnavailable as e:
                    log.info("columnar import not possible (%s); using the event path", e)
                    return None
            conv = converter(ctx, stream.header)
            rows = BatchConverter(conv)
            for batch in batches or ():
                rows.add(batch)
            return conv, stream
        finally:
            if batches is not None:
                batches.close()
            con.close()
