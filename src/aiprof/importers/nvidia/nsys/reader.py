"""What every table's reader shares: the export, the context, the clock shift, batches of
rows, and the columns common to every event row."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...base import ImportContext
from .schema import NsysExport, _decode, _int64s, _q

#: Rows fetched from SQLite per batch written to the store.
BATCH_ROWS = 100_000


class ExportReader:
    """One export being read into ``ctx``: its state, its clock and its row batches."""

    def __init__(self, ex: NsysExport, ctx: ImportContext, path: Path) -> None:
        self.ex = ex
        self.ctx = ctx
        self.path = path
        self.rank = ctx.default_rank
        self.pids: set[int] = set()
        self.threads: set[tuple[int, int]] = set()
        self.streams: set[tuple[int, int, int]] = set()  # pid, device, stream
        self.partial = False
        self.counts: dict[str, int] = {}
        self._session_start_unix, self._session_clock = self._session_start()
        self._shift = 0

    def _session_start(self) -> tuple[int | None, int | None]:
        t = "TARGET_INFO_SESSION_START_TIME"
        if not self.ex.has(t, "utcEpochNs"):
            return None, None
        clock = "systemClockNs" if self.ex.has(t, "systemClockNs") else "NULL"
        row = self.ex.con.execute(f"SELECT utcEpochNs, {clock} FROM {t} LIMIT 1").fetchone()
        if not row or row[0] is None:
            return None, None
        return int(row[0]), (int(row[1]) if row[1] is not None else None)

    def _fix_origin(self, first_raw: int | None) -> None:
        """Set the shift that turns the file's ns into the context's raw clock, and the origin."""
        start = self._session_start_unix
        if start is not None:
            # Session-relative times (the usual export) get the wall-clock start added;
            # an export written in the raw system clock is moved by its own session start.
            base = (
                self._session_clock
                if (self._session_clock and first_raw and first_raw > self._session_clock // 2)
                else 0
            )
            self._shift = start - base
        prev_clock = self.ctx.writer.meta.get("clock")
        had_origin = self.ctx.origin_raw_ns is not None
        origin = self.ctx.origin((first_raw or 0) + self._shift)
        meta = self.ctx.writer.meta
        clock = "unix" if start is not None else "trace"
        if had_origin and prev_clock not in (None, "unknown", clock):
            self.ctx.warn(
                f"{self.path.name}: its clock ({clock}) differs from the earlier inputs' ({prev_clock}); "
                "times may not line up"
            )
        meta["time_origin_ns"], meta["clock"] = origin, clock
        self._origin = origin

    def _first_time(self, tables: list[tuple[str, str]]) -> int | None:
        best: int | None = None
        for table, col in tables:
            if not self.ex.has(table, col):
                continue
            try:
                v = self.ex.con.execute(f"SELECT min({_q(col)}) FROM {_q(table)}").fetchone()[0]
            except sqlite3.DatabaseError:
                continue
            if v is not None and (best is None or v < best):
                best = int(v)
        return best

    def _rows(self, sql: str) -> Iterator[list[tuple[Any, ...]]]:
        """Batches of rows. Text is decoded by SQLite's own (fast) UTF-8 path; a batch with
        bytes that are not UTF-8 is read again, from where it began, with replacement."""
        con = self.ex.con
        done = 0
        con.text_factory = str
        try:
            cur = con.execute(sql)
            while True:
                try:
                    rows = cur.fetchmany(BATCH_ROWS)
                except sqlite3.OperationalError as e:
                    if "decode" not in str(e).lower():
                        raise
                    con.text_factory = _decode
                    cur = con.execute(f"{sql} LIMIT -1 OFFSET {done}")
                    continue
                if not rows:
                    return
                done += len(rows)
                yield rows
        finally:
            con.text_factory = _decode

    def _write(self, table: str, cols: dict[str, Any], kinds: list[str]) -> None:
        n = self.ctx.writer.append("events", cols)
        self.ctx.kinds.update(Counter(kinds))
        self.counts[table] = self.counts.get(table, 0) + n

    def _times(self, start: Sequence[Any], end: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(ts from the origin, dur) in ns; a missing end (-1 or null) gives dur 0."""
        s = _int64s(start, 0)
        off = self._shift - self._origin
        e_raw = _int64s(end, -1)
        dur = np.where(e_raw >= s, e_raw - s, 0)
        return s + off, dur

    def _common(self, rows: list[tuple[Any, ...]], kinds: list[str], names: list[str], **extra: Any) -> dict[str, Any]:
        cols = list(zip(*rows, strict=True))
        ts, dur = self._times(cols[0], cols[1])
        n = len(rows)
        dev, streams, pids = cols[2], cols[3], cols[5]
        self.streams.update(set(zip(pids, dev, streams, strict=True)))
        out = {
            "rank": np.full(n, self.rank, dtype=np.int32),
            "device_type": ["cuda"] * n,
            "device": dev,
            "pid": pids,
            "tid": streams,
            "kind": kinds,
            "cat": extra.pop("cat", None) or ["cuda"] * n,
            "name": names,
            "ts": ts,
            "dur": dur,
            "correlation": list(cols[4]),
            "args": list(cols[-1]),
        }
        out.update(extra)
        return out


_TAILS: dict[tuple[tuple[str, Any], ...], str] = {}


def _with(base: str | None, extra: dict[str, Any]) -> str:
    """``base`` (JSON object text) with ``extra``'s non-null members appended.

    ``extra`` repeats across rows (a copy direction, a function name), so its JSON text
    is made once and spliced in, instead of parsing and re-writing every row's object."""
    key = tuple(extra.items())
    tail = _TAILS.get(key)
    if tail is None:
        tail = json.dumps({k: v for k, v in extra.items() if v is not None}, separators=(",", ":"))[1:-1]
        if len(_TAILS) < 65536:
            _TAILS[key] = tail
    if not tail:
        return base or "{}"
    if not base or base == "{}":
        return "{" + tail + "}"
    return base[:-1] + "," + tail + "}"


def _merge_args(base: str | None, extra: dict[str, Any]) -> str:
    """``base`` (JSON object text) with ``extra``'s non-null members added."""
    d: dict[str, Any] = json.loads(base) if base else {}
    d.update({k: v for k, v in extra.items() if v is not None})
    return json.dumps(d, separators=(",", ":"))
