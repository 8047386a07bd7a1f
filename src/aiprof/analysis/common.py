"""Shared building blocks of the analysers: column fetches and event classes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from ..store.vocabulary import COMM_RANGE_SQL_RE

#: Device-side kinds that keep a device busy (Holistic Trace Analysis counts these).
DEVICE_BUSY_KINDS = ("kernel", "collective", "memcpy", "memset", "sync")
DEVICE_BUSY_SQL = "(" + ", ".join(f"'{k}'" for k in DEVICE_BUSY_KINDS) + ")"
#: Host-side names of communication calls (c10d, NCCL/Gloo/HCCL wrappers).
#: The collective operator names, lower-cased, that COMM_NAME_SQL knows by their start.
COMM_OP_NAME_RE = "^(all_?reduce|all_?gather|reduce_?scatter|broadcast|all_to_all|alltoall|barrier)"
COMM_NAME_SQL = (
    f"(regexp_matches(name, '{COMM_RANGE_SQL_RE}') OR name LIKE 'c10d::%' "
    f"OR name = 'record_param_comms' OR regexp_matches(lower(name), '{COMM_OP_NAME_RE}'))"
)


def unions(
    profile: Profile, sql: str, keys: int = 1, rows: int = 1 << 20
) -> dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]:
    """Key -> the union of its intervals (intervals.merge), for ``sql`` selecting
    ``keys`` integer key columns, then start and end (ns). The rows are read in batches
    and each batch's intervals merged at once, so that memory holds unions (nested CPU
    operators merge into their outermost), never every event: a 10 GB trace's tens of
    millions of events fit (bench/huge_import.py). A union of unions is the union of
    all, so the answer is the one a single read gives. Nulls read as -1; ``rows``:
    the batch size."""
    from . import intervals as iv

    parts: dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray]]] = {}
    for batch in profile.batches(sql, rows):
        if not batch.num_rows:
            continue
        cols = [c.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) for c in batch.columns]
        ts, te = cols[keys], cols[keys + 1]
        if keys == 0:
            parts.setdefault((), []).append(iv.merge(ts, te))
            continue
        distinct, inverse = _group(cols[:keys])
        # Each key's rows in their order (a stable sort by key), split at the keys.
        order = np.argsort(inverse, kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(inverse, minlength=len(distinct)))[:-1])
        for k, rows_k in zip(distinct, groups, strict=True):
            parts.setdefault(k, []).append(iv.merge(ts[rows_k], te[rows_k]))
    out = {}
    for k, got in parts.items():
        if len(got) == 1:
            out[k] = got[0]
        else:
            out[k] = iv.merge(np.concatenate([a for a, _ in got]), np.concatenate([b for _, b in got]))
        got.clear()
    return out


def _group(keys: list[np.ndarray]) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The distinct rows of the integer columns ``keys``, in ascending order (as
    ``np.unique(axis=0)``), and each row's index among them. The columns are coded one
    by one and the codes combined into one int64, which numpy sorts many times faster
    than rows of several columns."""
    code = np.zeros(len(keys[0]), dtype=np.int64)
    span = 1
    for col in keys:
        values, inverse = np.unique(col, return_inverse=True)
        span *= len(values)
        if span >= 1 << 62:  # too many combinations for one int64: rows, as numpy does them
            rows, inv = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
            return [tuple(r) for r in rows.tolist()], inv.reshape(-1)
        code = code * len(values) + inverse.reshape(-1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    distinct = list(zip(*(col[first].tolist() for col in keys), strict=True))
    return distinct, inverse.reshape(-1)


#: Rows a fetch converts at a time: DuckDB's whole result is never in memory beside its
#: arrays (a row per launch of a 10 GB trace: 1.7 GiB of Arrow, strings and all).
FETCH_BATCH = 1 << 20


def fetch(
    profile: Profile, sql: str, params: list[Any] | None = None, codes: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Run ``sql`` and return its columns as numpy arrays (nulls become -1 for ints).

    String columns named in ``codes`` come back dictionary-encoded, which is far cheaper
    than Python strings on millions of rows: ``out[c]`` holds int codes and
    ``out[c + "__dict"]`` the distinct values they index (in order of first appearance).
    The rows are read and converted in batches (FETCH_BATCH).
    """
    parts = [arrays_of(b, codes) for b in profile.batches(sql, FETCH_BATCH, params)]
    if len(parts) == 1:
        return parts[0]
    for c in codes:  # each batch's codes into one dictionary
        seen: dict[Any, int] = {}
        for part in parts:
            part[c] = recode(seen, part.pop(c + "__dict").tolist())[part[c]]
        parts[0][c + "__dict"] = np.array(list(seen), dtype=object)
    out: dict[str, np.ndarray] = {}
    for name in list(parts[0]):  # a column at a time, its pieces freed once joined
        pieces = [part.pop(name) for part in parts if name in part]
        out[name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        del pieces
    return out


def arrays_of(t: pa.Table | pa.RecordBatch, codes: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """A table's (or a batch's) columns as numpy arrays, as :func:`fetch` returns them."""
    # Each column's chunks are freed once converted (millions of rows: never every column
    # twice). The numpy arrays are writable copies (astype): callers assign into them.
    names, cols = t.column_names, list(t.columns)
    del t
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(names):
        col, cols[i] = cols[i], None
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        del col
        if name in codes:
            enc = arr.dictionary_encode() if not pa.types.is_dictionary(arr.type) else arr
            out[name] = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            out[name + "__dict"] = np.array(enc.dictionary.to_pylist(), dtype=object)
        elif pa.types.is_boolean(arr.type):
            out[name] = arr.fill_null(False).to_numpy(zero_copy_only=False)
        elif pa.types.is_integer(arr.type):
            out[name] = arr.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        elif pa.types.is_floating(arr.type):
            out[name] = arr.fill_null(np.nan).to_numpy(zero_copy_only=False)
        elif pa.types.is_decimal(arr.type):
            out[name] = np.array(arr.to_pylist(), dtype=np.float64)
        else:
            out[name] = np.array(arr.to_pylist(), dtype=object)
    return out


def recode(seen: dict[Any, int], values: list[Any]) -> np.ndarray:
    """A batch's dictionary (``values``) as codes into one dictionary of every batch
    (``seen``: value -> code, in order of first appearance, extended here). The result
    maps a batch code to its code in ``seen``; its last entry is -1, so that a null
    code (-1) stays -1."""
    return np.array([seen.setdefault(v, len(seen)) for v in values] + [-1], dtype=np.int64)


def rank_slice(ranks: np.ndarray, r: Any) -> slice:
    """The rows of rank ``r`` in ``ranks``, sorted (a fetch ordered by rank): one slice,
    so that a rank's columns are views, not copies."""
    return slice(int(np.searchsorted(ranks, r, "left")), int(np.searchsorted(ranks, r, "right")))


def us(ns: Any) -> Any:
    """ns -> µs as float (the unit every view reports times in)."""
    return np.asarray(ns, dtype=np.float64) / 1000.0


def pct(part: Any, whole: Any) -> Any:
    whole_arr = np.asarray(whole, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(
            whole_arr > 0, 100.0 * np.asarray(part, dtype=np.float64) / np.where(whole_arr > 0, whole_arr, 1), np.nan
        )
    return r


def launch_calls_sql(**cols: str) -> str:
    """SQL: one row per (rank, correlation) of the host calls that launch device work,
    ``cols`` (output name -> column) of *the* launch call of that correlation: the last
    runtime or driver call that carries it, the hop nearest the device. CUDA traces have
    one call per correlation; torch_npu's operator enqueues its task (``Enqueue``, on the
    operator's thread) and a queue thread makes the AscendCL call that launches it, both
    with the task's correlation (importers/ascend/trace.py): the AscendCL call is the
    launch, the ``Enqueue`` ties the work to its operator. ``ts`` as a column is the
    call's start."""
    picked = ", ".join(f"max(ts) AS {k}" if v == "ts" else f"arg_max({v}, ts) AS {k}" for k, v in cols.items())
    return (
        f"SELECT rank, correlation, {picked} FROM events "
        "WHERE device_type = 'cpu' AND kind IN ('runtime', 'driver') AND correlation IS NOT NULL "
        "GROUP BY rank, correlation"
    )


def hta_device_window_sql() -> str:
    """Device events in Holistic Trace Analysis's window, per rank.

    HTA drops everything from the start of the last ``ProfilerStep`` onward when a
    trace has two or more steps (the last step is usually cut short by the profiler),
    keeping device work whose launching host call started before it; with fewer steps
    it keeps all device work. We follow that rule so the figures are comparable.
    Columns: rank, device, tid, kind, name, ts, dur, step, correlation, launch_ts.
    """
    kinds = ", ".join(f"'{k}'" for k in DEVICE_BUSY_KINDS)
    return f"""
        WITH st AS (SELECT rank, count(*) AS n, max(ts) AS last_start FROM events WHERE kind = 'step' GROUP BY rank),
        launch AS ({launch_calls_sql(lts="ts")})
        SELECT d.rank, d.device, d.tid, d.kind, d.name, d.ts, d.dur, d.step, d.correlation, l.lts AS launch_ts
        FROM events d
        LEFT JOIN st ON st.rank = d.rank
        LEFT JOIN launch l ON l.rank = d.rank AND l.correlation = d.correlation
        WHERE d.device_type <> 'cpu' AND d.kind IN ({kinds})
          AND (coalesce(st.n, 0) < 2 OR (l.lts IS NOT NULL AND l.lts < st.last_start))
    """


#: SQL for HTA's COMPUTATION kernels (not NCCL, copies, sets or syncs; on MTIA and
#: other accelerators, kernels whose name starts with ``dma`` move memory, as in HTA).
COMPUTE_NOT_IN = ("Sync", "Memcpy")
COMPUTE_NOT_PREFIX = "dma"
COMPUTE_SQL = (
    "(kind = 'kernel' AND "
    + " AND ".join(f"name NOT LIKE '%{s}%'" for s in COMPUTE_NOT_IN)
    + f" AND NOT starts_with(name, '{COMPUTE_NOT_PREFIX}'))"
)


def hta_window(profile: Profile) -> str:
    """Name of a temporary table holding :func:`hta_device_window_sql` plus a boolean
    ``compute`` column, built once per opened profile."""

    def build() -> str:
        profile.con.execute(
            f"CREATE OR REPLACE TEMP TABLE _hta_window AS SELECT *, {COMPUTE_SQL} AS compute FROM ({hta_device_window_sql()})"
        )
        return "_hta_window"

    return profile.memo("hta_window", build)
