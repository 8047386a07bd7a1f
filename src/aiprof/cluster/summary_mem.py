"""The per-rank summaries from one rank's events in memory, with no DuckDB round trip.

A rank task has the events table it just wrote (``ProfileWriter(keep_events=True)``);
:func:`summarize_events` answers :func:`.summary.summarize` from it with numpy and
pyarrow: the same step windows (``analysis.ranks.step_windows``), device busy
intervals, collective rows and launch sizes as that function's SQL, then the same
code builds the tables. What this path cannot answer exactly as the SQL would, it
does not try: it returns None and the caller opens the profile and runs the SQL
(several ranks in one file, null times or kinds, derived tables, args with values
other than texts and integers where a collective field is read, duplicate JSON keys,
two ``record_param_comms`` of one op, Python samples: DDP's waits are read from them). tests/test_cluster_summary.py checks both
paths give equal tables on generated ranks and on real traces.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.common import DEVICE_BUSY_KINDS
from ..analysis.communication import launch_sizes
from ..store.vocabulary import COMM_RANGE_LIBS, COMM_RANGE_SQL_RE
from .summary import _collectives, _host_bytes, _steps, host_collective_rows

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_DIGITS = re.compile(r"-?[0-9]+")
_COMM_PREFIXES = tuple(f"{lib}:" for lib in COMM_RANGE_LIBS)
#: The collective fields read from args, as the SQL reads them (json_extract_string).
_FIELDS = {
    "cname": "Collective name",
    "pg": "Process Group Name",
    "pg_ranks": "Process Group Ranks",
    "pg_size": "Group size",
    "seq": "Seq",
    "n_in": "In msg nelems",
    "n_out": "Out msg nelems",
    "dtype": "dtype",
}
#: Fields TRY_CAST to an integer type, with its range.
_INTS = {"pg_size": _INT32, "seq": _INT64, "n_in": _INT64, "n_out": _INT64}


class Unsure(Exception):
    """Input this module (or derived_mem.py) does not answer exactly as the SQL would."""


def summarize_events(events: pa.Table, folder: Path, meta: dict[str, Any]) -> dict[str, pa.Table] | None:
    """The ``steps`` and ``collectives`` tables of the one-rank profile at ``folder``
    (profile.json ``meta``) from its events table, or None where only the SQL path
    answers exactly (module doc); the ``ranks`` table is :func:`.summary.ranks_table`'s."""
    try:
        return summarize_rank(rank_events(events, meta), meta)
    except Unsure:
        return None


def rank_events(events: pa.Table, meta: dict[str, Any]) -> RankEvents:
    """The one rank's events of a profile written without derived tables, as arrays;
    :class:`Unsure` where this module's paths do not answer (nulls where the SQL's
    rules read, several ranks)."""
    if meta.get("derived") or events.num_rows == 0:
        raise Unsure  # step windows come from the derived tables there
    for c in ("rank", "kind", "device_type", "ts", "dur", "pid", "tid"):
        if events.column(c).null_count:
            raise Unsure
    mm = pc.min_max(events.column("rank")).as_py()
    if mm["min"] != mm["max"]:
        raise Unsure
    return RankEvents(events, int(mm["min"]))


def summarize_rank(e: RankEvents, meta: dict[str, Any]) -> dict[str, pa.Table]:
    """:func:`summarize_events` on the events as arrays (:class:`Unsure` where it declines)."""
    origin = int(meta.get("time_origin_ns", 0))
    w = e.step_windows()
    busy = ~e.cpu & e.kind_in(*DEVICE_BUSY_KINDS) & (e.dur > 0)
    d = {
        "rank": np.full(int(busy.sum()), e.rank, dtype=np.int64),
        "comm": e.kind_in("collective")[busy],
        "kern": e.kind_in("kernel")[busy],
        "ts": e.ts[busy],
        "te": e.te[busy],
    }
    if int((meta.get("tables") or {}).get("samples") or 0):
        raise Unsure  # DDP's waits and ranks come from the samples (analysis/rank_waits.py)
    rows, dev = e.collective_rows()
    host = e.host_collectives()
    from .derived_mem import _sources  # overview.SOURCES_SQL on these arrays (it imports this module)

    return {
        "steps": _steps(d, w, origin, {e.rank} if _sources(e)["device"] else set(), host),
        "collectives": _collectives(rows + host, lambda: e.host_bytes(dev), w, origin),
    }


#: The tables besides events whose times count in a rank's span (store/spans.py).
SPAN_TABLES = ("samples", "counters", "memory")


def ranks_of(e: RankEvents, other: dict[str, pa.Table | None], path: Path, meta: dict[str, Any]) -> pa.Table:
    """:func:`.summary.ranks_table` of the one-rank profile at ``path`` from its events
    and its ``samples``, ``counters`` and ``memory`` tables in memory (:class:`Unsure`
    where one of them was not kept, or holds a null rank)."""
    from ..analysis.device_use import device_records
    from ..store.schema import DEVICE_KINDS
    from .summary import _ranks

    tables = {}
    for name in SPAN_TABLES:
        t = other.get(name)
        if t is None or t.column("rank").null_count:
            raise Unsure
        tables[name] = t
    args = e.t.column("args")
    flow = e.kind_in("other") & (e.dur == 0) & pc.starts_with(args, '{"ph":').fill_null(False).to_numpy()
    drawn = ~flow
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}
    if drawn.any():
        lo[e.rank] = int(e.ts[drawn].min())
        hi[e.rank] = int((e.ts[drawn] + np.maximum(e.dur[drawn], 0)).max())
    counts: dict[tuple[int, str, int], int] = {}
    device, device_ok = e.ints("device")
    dev = ~e.cpu & e.kind_in(*sorted(DEVICE_KINDS)) & device_ok & (device >= 0)
    types = e.t.column("device_type")
    _count(counts, np.full(int(dev.sum()), e.rank), types.filter(pa.array(dev)), pa.array(device[dev]))
    for name, t in tables.items():
        ts = t.column("ts")
        for r, a, z in _min_max_by(t.column("rank"), ts):
            if a is not None and z is not None:
                lo[r], hi[r] = min(lo.get(r, a), a), max(hi.get(r, z), z)
        if name == "samples":
            continue
        d = t.column("device")
        keep = pc.and_(pc.and_(pc.not_equal(t.column("device_type"), "cpu"), pc.is_valid(d)), pc.greater_equal(d, 0))
        keep = keep.fill_null(False)
        _count(
            counts,
            t.column("rank").filter(keep).to_numpy(),
            t.column("device_type").filter(keep),
            pa.array(d.filter(keep).to_numpy(), type=pa.int64()),
        )
    rows = [{"rank": r, "device_type": dt, "device": dv, "records": n} for (r, dt, dv), n in sorted(counts.items())]
    used: dict[int, list[dict[str, Any]]] = {}
    for d in device_records(rows, list(meta.get("devices", []))):
        used.setdefault(int(d["rank"]), []).append(d)
    spans = {r: (lo[r], hi[r]) for r in lo}
    return _ranks([path], [meta], spans, used, int(meta.get("time_origin_ns", 0)))


def _count(counts: dict[tuple[int, str, int], int], ranks: Any, types: Any, devices: Any) -> None:
    """Add the rows per (rank, device type, device) to ``counts``."""
    t = pa.table({"rank": pa.array(np.asarray(ranks, dtype=np.int64)), "type": types, "device": devices})
    if t.num_rows == 0:
        return
    g = t.group_by(["rank", "type", "device"]).aggregate([([], "count_all")])
    for r, dt, dv, n in zip(*(g.column(c).to_pylist() for c in ("rank", "type", "device", "count_all")), strict=True):
        counts[(r, dt, dv)] = counts.get((r, dt, dv), 0) + n


def _min_max_by(ranks: pa.ChunkedArray, ts: pa.ChunkedArray) -> list[tuple[int, int | None, int | None]]:
    """Per rank, min(ts) and max(ts) (None where every ts is null)."""
    if len(ranks) == 0:
        return []
    g = pa.table({"rank": ranks, "ts": ts}).group_by("rank").aggregate([("ts", "min"), ("ts", "max")])
    return list(zip(g.column("rank").to_pylist(), g.column("ts_min").to_pylist(), g.column("ts_max").to_pylist()))


class RankEvents:
    """The columns of one rank's events the summaries read, as numpy arrays."""

    def __init__(self, t: pa.Table, rank: int) -> None:
        self.t = t
        self.rank = rank
        kind = t.column("kind").combine_chunks().dictionary_encode()
        self._kind_codes = kind.indices.to_numpy(zero_copy_only=False)
        self._kind_of = {k: i for i, k in enumerate(kind.dictionary.to_pylist())}
        self.cpu = pc.equal(t.column("device_type"), "cpu").to_numpy()
        self.ts = t.column("ts").to_numpy()
        self.dur = t.column("dur").to_numpy()
        self.te = self.ts + self.dur
        self._windows: dict[str, np.ndarray] | None = None

    def kind_in(self, *kinds: str) -> np.ndarray:
        codes = [self._kind_of[k] for k in kinds if k in self._kind_of]
        return np.isin(self._kind_codes, codes) if codes else np.zeros(len(self.ts), dtype=bool)

    def ints(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A column's values (nulls as 0) and where they are valid."""
        col = self.t.column(name)
        return col.fill_null(0).to_numpy().astype(np.int64), pc.is_valid(col).to_numpy()

    def strings(self, name: str, rows: np.ndarray) -> list[Any]:
        values: list[Any] = self.t.column(name).take(pa.array(rows, type=pa.int64())).to_pylist()
        return values

    # -- analysis.ranks._step_windows ---------------------------------------------

    def step_windows(self) -> dict[str, np.ndarray]:
        if self._windows is None:
            self._windows = self._step_windows()
        return self._windows

    def _step_windows(self) -> dict[str, np.ndarray]:
        stepm = self.kind_in("step")
        step, step_ok = self.ints("step")
        key = np.where(step_ok, step, -1)
        # The host's step spans where the rank has any, else its device's.
        g = stepm & self.cpu if (stepm & self.cpu).any() else stepm
        gi = np.flatnonzero(g)
        uk, inv = np.unique(key[gi], return_inverse=True)
        start = np.full(len(uk), _INT64[1], dtype=np.int64)
        end = np.full(len(uk), _INT64[0], dtype=np.int64)
        np.minimum.at(start, inv, self.ts[gi])
        np.maximum.at(end, inv, self.te[gi])
        order = np.lexsort((uk, start))
        uk, start, end = uk[order], start[order], end[order]
        numbered = np.flatnonzero(stepm & step_ok)
        if len(numbered) and len(uk):
            last = step[numbered[np.argmax(self.ts[numbered])]]
            tail = (step == last) & step_ok & ~self.cpu & self.kind_in(*DEVICE_BUSY_KINDS)
            if tail.any():
                i = int(np.argmax(start))
                end[i] = max(int(end[i]), int(self.te[tail].max()))
        if len(uk):
            return {
                "rank": np.full(len(uk), self.rank, dtype=np.int64),
                "step": uk.astype(np.int64),
                "start": start,
                "end": end,
                "whole_span": np.zeros(len(uk), dtype=bool),
            }
        # No steps: the rank's whole span is one window.
        spans = ~self.kind_in("other", "instant")
        n = 1 if spans.any() else 0
        return {
            "rank": np.full(n, self.rank, dtype=np.int64),
            "step": np.full(n, -1, dtype=np.int64),
            "start": np.array([self.ts[spans].min()] if n else [], dtype=np.int64),
            "end": np.array([self.te[spans].max()] if n else [], dtype=np.int64),
            "whole_span": np.ones(n, dtype=bool),
        }

    # -- summary._collective_rows ---------------------------------------------------

    def launches(self) -> tuple[np.ndarray, np.ndarray]:
        """Host runtime/driver rows with a correlation, sorted by (correlation, ts)."""
        corr, corr_ok = self.ints("correlation")
        li = np.flatnonzero(self.cpu & self.kind_in("runtime", "driver") & corr_ok)
        li = li[np.lexsort((self.ts[li], corr[li]))]
        return li, corr

    def collective_rows(self) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The rows of summary._collective_rows, and the events they come from."""
        dev = np.flatnonzero(self.kind_in("collective") & ~self.cpu)
        dev = dev[np.argsort(self.ts[dev], kind="stable")]
        if not len(dev):
            return [], dev
        corr, corr_ok = self.ints("correlation")
        ext, ext_ok = self.ints("external_id")
        # l: per correlation, the external id of its first launch that has one.
        li = np.flatnonzero(self.cpu & self.kind_in("runtime", "driver") & corr_ok & ext_ok)
        li = li[np.lexsort((self.ts[li], corr[li]))]
        first = np.ones(len(li), dtype=bool)
        first[1:] = corr[li][1:] != corr[li][:-1]
        ext_of = dict(zip(corr[li][first].tolist(), ext[li][first].tolist(), strict=True))
        # h: the record_param_comms of each external id.
        names = self.t.column("name")
        hi = np.flatnonzero(self.cpu & pc.equal(names, "record_param_comms").fill_null(False).to_numpy() & ext_ok)
        h_ext = ext[hi].tolist()
        wanted = {ext_of.get(c) for c, ok in zip(corr[dev].tolist(), corr_ok[dev].tolist(), strict=True) if ok}
        h_args: dict[int, Any] = {}
        for x, a in zip(h_ext, self.strings("args", hi), strict=True):
            if x not in wanted:
                continue
            if x in h_args:
                raise Unsure  # two rows in the SQL's join
            h_args[x] = a
        d_names = self.strings("name", dev)
        d_args = self.strings("args", dev)
        rows: list[dict[str, Any]] = []
        for i, j in enumerate(dev.tolist()):
            x = ext_of.get(int(corr[j])) if corr_ok[j] else None
            d_obj = parse_args(d_args[i])
            h_obj = parse_args(h_args[x]) if x is not None and x in h_args else None
            row: dict[str, Any] = {
                "rank": self.rank,
                "name": d_names[i],
                "ts": int(self.ts[j]),
                "dur": int(self.dur[j]),
            }
            for field, key in _FIELDS.items():
                v = _text(d_obj, key)
                if v is None:
                    v = _text(h_obj, key)
                row[field] = _cast(v, _INTS[field]) if field in _INTS else v
            if row["dtype"] is not None:
                if not row["dtype"].isascii():
                    raise Unsure
                row["dtype"] = row["dtype"].lower()
            rows.append(row)
        return rows, dev

    # -- summary.HOST_COLLECTIVES_SQL -----------------------------------------------------

    def host_collectives(self) -> list[dict[str, Any]]:
        """summary.host_collective_rows of this rank: its host-side collectives where it
        has no event off the CPU (aiprof record's ``collective`` events, else the
        ``gloo:*`` / ``nccl:*`` ranges)."""
        if not self.cpu.all():
            return []
        names = self.t.column("name")
        recorded = np.flatnonzero(self.kind_in("collective"))
        pri = 0
        if not len(recorded):
            ranged = pc.match_substring_regex(names, COMM_RANGE_SQL_RE).fill_null(False).to_numpy(zero_copy_only=False)
            recorded = np.flatnonzero(self.kind_in("cpu_op", "user_annotation") & ranged)
            pri = 1
        if not len(recorded):
            return []
        nbytes, ok = self.ints("bytes")
        h = {
            "rank": np.full(len(recorded), self.rank, dtype=np.int64),
            "name": self.strings("name", recorded),
            "ts": self.ts[recorded],
            "dur": self.dur[recorded],
            "bytes": np.where(ok[recorded], nbytes[recorded], -1) if pri == 0 else np.full(len(recorded), -1),
            "args": self.strings("args", recorded),
            "pri": np.full(len(recorded), pri, dtype=np.int64),
        }
        return host_collective_rows(h)

    # -- analysis.communication.collectives (the device part) -------------------------

    def host_bytes(self, dev: np.ndarray) -> dict[tuple[int, int], int]:
        corr, corr_ok = self.ints("correlation")
        pid, _ = self.ints("pid")
        tid, _ = self.ints("tid")
        li, _ = self.launches()
        first = np.ones(len(li), dtype=bool)
        first[1:] = corr[li][1:] != corr[li][:-1]
        launch = {c: j for c, j in zip(corr[li][first].tolist(), li[first].tolist(), strict=True)}
        at = [launch.get(int(corr[j])) if corr_ok[j] else None for j in dev.tolist()]
        c = {
            "rank": np.full(len(dev), self.rank, dtype=np.int64),
            "pid": np.array([pid[j] if j is not None else -1 for j in at], dtype=np.int64),
            "tid": np.array([tid[j] if j is not None else -1 for j in at], dtype=np.int64),
            "lts": np.array([self.ts[j] if j is not None else -1 for j in at], dtype=np.int64),
            "launched": np.array([j is not None for j in at], dtype=bool),
        }
        names = self.t.column("name")
        comm = pc.or_(pc.equal(names, "record_param_comms"), pc.starts_with(names, _COMM_PREFIXES[0])).fill_null(False)
        for pre in _COMM_PREFIXES[1:]:
            comm = pc.or_(comm, pc.starts_with(names, pre).fill_null(False))
        hi = np.flatnonzero(self.cpu & self.kind_in("cpu_op", "user_annotation") & comm.to_numpy(zero_copy_only=False))
        hi = hi[np.lexsort((self.ts[hi], tid[hi], pid[hi]))]
        h = {
            "rank": np.full(len(hi), self.rank, dtype=np.int64),
            "pid": pid[hi],
            "tid": tid[hi],
            "ts": self.ts[hi],
            "te": self.te[hi],
            "name": np.array(self.strings("name", hi), dtype=object),
            "args": np.array(self.strings("args", hi), dtype=object),
        }
        nbytes = launch_sizes(c, h)
        return _host_bytes({"rank": c["rank"], "ts": self.ts[dev], "bytes": nbytes})


def _no_dup(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise Unsure  # DuckDB reads the first of a repeated key
    return out


def _no_constant(_s: str) -> Any:
    raise Unsure  # NaN, Infinity: not JSON to DuckDB


def parse_args(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text, object_pairs_hook=_no_dup, parse_constant=_no_constant)
    except ValueError:
        raise Unsure from None  # DuckDB's json functions fail on it


def _text(obj: Any, key: str) -> str | None:
    """json_extract_string(obj, '$."key"') for the values whose text is certain."""
    if not isinstance(obj, dict):
        return None
    v = obj.get(key)
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]:
        return str(v)
    raise Unsure  # floats, booleans, lists, objects: DuckDB's own spelling


def _cast(v: str | None, bounds: tuple[int, int]) -> int | None:
    """TRY_CAST(v AS INTEGER/BIGINT) for plain digits (None when out of range)."""
    if v is None:
        return None
    if not _DIGITS.fullmatch(v):
        raise Unsure
    n = int(v)
    return n if bounds[0] <= n <= bounds[1] else None
