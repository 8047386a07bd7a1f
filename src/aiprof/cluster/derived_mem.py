"""The derived tables of one rank from its events in memory, with no DuckDB round trip.

A rank task of a parallel import keeps the events it has just written
(:mod:`.summary_mem`); :func:`derive_rank` computes from them the tables
``analysis.derived.derived_tables`` computes with SQL over the profile read back: the
overview's totals (the events classified here, then the view's own reduction,
``overview.breakdown_of`` and ``overview.device_of``), the idle view's rows and the
kernels view's rows. On a rank of a few thousand events each SQL query costs more in
DuckDB's fixed work than in its rows, and these four were half a rank's import.

Where this path cannot answer exactly as the SQL would, it does not try: it raises
:class:`.summary_mem.Unsure` and the caller runs the SQL (as summary_mem.py does; null
devices of device work, null kernel names, kernel args whose values DuckDB would spell
or cast in its own way). tests/test_cluster_derived_mem.py checks both paths give equal
tables on generated ranks and on the real traces of ../shared/data.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ..analysis import intervals as iv
from ..analysis.common import COMM_OP_NAME_RE, COMPUTE_NOT_IN, COMPUTE_NOT_PREFIX, DEVICE_BUSY_KINDS
from ..analysis.derived import tables_of
from ..analysis.idle import KERNEL_WAIT_NS
from ..analysis.overview import SOURCES, Unions, breakdown_of, device_of, measured_of
from ..analysis.tensor_cores import uses_tensor_cores
from ..store.vocabulary import COMM_RANGE_SQL_RE
from .summary_mem import _INT64, RankEvents, Unsure

#: The overview's categories in its priority order (overview._CATEGORY_SQL).
_IDLE_KINDS = ("kernel", "collective", "memcpy", "memset")
_OCC = "est. achieved occupancy %"
_DECIMAL_SCALE = 12  # the SQL's DECIMAL(38, 12)
_INT64_MIN = _INT64[0]


def derive_rank(e: RankEvents) -> dict[str, pa.Table]:
    """The derived tables (analysis.derived.tables_of) of the rank ``e``."""
    sw = e.step_windows()
    w = {"rank": sw["rank"], "step": sw["step"], "ts": sw["start"], "dur": sw["end"] - sw["start"]}
    w["whole_span"] = sw["whole_span"]
    lts = _launch_ts(e)
    window = _hta_window(e, lts)
    b = breakdown_of(_category_unions(e), w) | measured_of({e.rank: _sources(e)} if len(e.ts) else {}, w)
    dev, per = device_of(*_device_unions(e, window), w)
    rows = {"stream_idle": _idle(e, window, lts), "kernel_stats": _kernels(e)}
    return tables_of((w, b, dev, per), rows)


def _by_key(e: RankEvents, key: np.ndarray, sel: np.ndarray) -> Unions:
    """common.unions over the rows ``sel``, keyed (rank, key)."""
    out: Unions = {}
    for k in np.unique(key[sel]).tolist():
        m = sel & (key == k)
        out[(e.rank, int(k))] = iv.merge(e.ts[m], e.te[m])
    return out


def _comm_names(e: RankEvents, rows: np.ndarray) -> np.ndarray:
    """common.COMM_NAME_SQL on the names of ``rows`` (a null name: false; the regexes
    run in RE2, as DuckDB's do)."""
    names = e.t.column("name").take(pa.array(rows, type=pa.int64()))
    hit = pc.or_kleene(pc.match_substring_regex(names, COMM_RANGE_SQL_RE), pc.starts_with(names, "c10d::"))
    hit = pc.or_kleene(hit, pc.equal(names, "record_param_comms"))
    hit = pc.or_kleene(hit, pc.match_substring_regex(pc.utf8_lower(names), COMM_OP_NAME_RE))
    return np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _sources(e: RankEvents) -> dict[str, bool]:
    """overview.SOURCES_SQL for the rank ``e``: which sources of the breakdown it holds."""
    dt = e.t.column("device_type")
    host = np.asarray(pc.equal(dt, "cpu").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    dev = np.asarray(pc.not_equal(dt, "cpu").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    ann = np.flatnonzero(host & e.kind_in("user_annotation"))
    names = e.t.column("name").take(pa.array(ann, type=pa.int64())).fill_null("")
    ours = np.asarray(pc.starts_with(names, "aiprof: ").to_numpy(zero_copy_only=False), dtype=bool)
    got = {
        "device": bool((dev & e.kind_in(*DEVICE_BUSY_KINDS)).any()),
        "operators": bool((host & e.kind_in("cpu_op", "python")).any()),
        "dataloader": bool(e.kind_in("dataloader").any()),
        "annotations": bool((~ours).any()),
        "collectives": bool(e.kind_in("collective").any()),
        "runtime": bool((host & e.kind_in("runtime", "driver")).any()),
    }
    assert tuple(got) == SOURCES
    return got


def _category_unions(e: RankEvents) -> Unions:
    """overview._CATEGORY_SQL's unions per (rank, category) of the events with dur > 0."""
    dev = ~e.cpu
    host_ops = e.cpu & e.kind_in("cpu_op", "user_annotation")
    comm = np.zeros(len(e.ts), dtype=bool)
    hi = np.flatnonzero(host_ops)
    comm[hi] = _comm_names(e, hi)
    conds = [
        dev & e.kind_in("kernel"),
        dev & e.kind_in("memcpy"),
        dev & e.kind_in("memset"),
        e.kind_in("collective") | (host_ops & comm),
        e.cpu & e.kind_in("runtime", "driver"),
        e.kind_in("dataloader"),
        e.cpu & e.kind_in("cpu_op", "user_annotation", "python"),
    ]
    cat = np.select(conds, list(range(len(conds))), -1)
    return _by_key(e, cat, (e.dur > 0) & (cat >= 0))


def _launch_ts(e: RankEvents) -> tuple[np.ndarray, np.ndarray]:
    """For each event, the start of the first host runtime / driver call of its
    correlation (hta_device_window_sql's ``launch``), and where there is one."""
    li, corr = e.launches()
    corr_ok = e.ints("correlation")[1]
    n = len(e.ts)
    lts, has = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if not len(li):
        return lts, has
    first = np.ones(len(li), dtype=bool)
    first[1:] = corr[li][1:] != corr[li][:-1]
    keys, starts = corr[li][first], e.ts[li][first]
    at = np.clip(np.searchsorted(keys, corr), 0, len(keys) - 1)
    has = corr_ok & (keys[at] == corr)
    lts = np.where(has, starts[at], 0)
    return lts, has


def _hta_window(e: RankEvents, launch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """common.hta_device_window_sql's rows (a mask)."""
    busy: np.ndarray = ~e.cpu & e.kind_in(*DEVICE_BUSY_KINDS)
    stepm = e.kind_in("step")
    if int(stepm.sum()) < 2:
        return busy
    lts, has = launch
    window: np.ndarray = busy & has & (lts < e.ts[stepm].max())
    return window


def _compute(e: RankEvents) -> np.ndarray:
    """common.COMPUTE_SQL (coalesced to false)."""
    kern = np.flatnonzero(e.kind_in("kernel"))
    names = e.t.column("name").take(pa.array(kern, type=pa.int64()))
    bad = pc.starts_with(names, COMPUTE_NOT_PREFIX)
    for s in COMPUTE_NOT_IN:
        bad = pc.or_kleene(bad, pc.match_substring(names, s))
    out = np.zeros(len(e.ts), dtype=bool)
    out[kern] = ~np.asarray(bad.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)
    return out


def _device_unions(e: RankEvents, window: np.ndarray) -> tuple[Unions, Unions]:
    """overview._device's unions per (rank, compute): HTA's window, all device work."""
    c = _compute(e).astype(np.int64)
    allk = ~e.cpu & e.kind_in(*DEVICE_BUSY_KINDS)
    return _by_key(e, c, window), _by_key(e, c, allk)


def _idle(e: RankEvents, window: np.ndarray, launch: tuple[np.ndarray, np.ndarray]) -> pa.Table:
    """idle.idle_from_events's rows."""
    rows = np.flatnonzero(window & e.kind_in(*_IDLE_KINDS))
    device, device_ok = e.ints("device")
    if not device_ok[rows].all():
        raise Unsure  # a null device is a group of its own in the SQL
    tid = e.ints("tid")[0]
    rows = rows[np.lexsort((e.dur[rows], e.ts[rows], tid[rows], device[rows]))]
    d, t, ts, te, dur = device[rows], tid[rows], e.ts[rows], e.te[rows], e.dur[rows]
    lts, has = launch[0][rows], launch[1][rows]
    n = len(rows)
    start = np.ones(n, dtype=bool)
    start[1:] = (d[1:] != d[:-1]) | (t[1:] != t[:-1])
    prev = np.concatenate([[0], te[:-1]])
    gap = np.where(start, 0, np.maximum(ts - prev, 0))
    host = ~start & has & (lts > prev)
    kern = ~start & ~host & (ts - prev < KERNEL_WAIT_NS)
    other = ~start & ~host & ~kern
    first = np.flatnonzero(start)
    cols: dict[str, list[Any]] = {k: [] for k in ("device", "stream", "ops", "span_us", "busy_us", "idle_us")}
    cols |= {k: [] for k in ("host_wait_us", "kernel_wait_us", "other_us", "idle_pct")}
    for a, z in zip(first.tolist(), [*first[1:].tolist(), n][: len(first)], strict=True):
        span = int(te[a:z].max()) - int(ts[a:z].min())
        g = int(gap[a:z].sum())
        cols["device"].append(int(d[a]))
        cols["stream"].append(int(t[a]))
        cols["ops"].append(z - a)
        cols["span_us"].append(span / 1000.0)
        cols["busy_us"].append(int(dur[a:z].sum()) / 1000.0)
        cols["idle_us"].append(g / 1000.0)
        for k, m in (("host_wait_us", host), ("kernel_wait_us", kern), ("other_us", other)):
            cols[k].append(int(gap[a:z][m[a:z]].sum()) / 1000.0)
        cols["idle_pct"].append(100.0 * g / span if span != 0 else None)
    schema = e.t.schema
    return pa.table(
        {
            "rank": pa.array([e.rank] * len(first), type=schema.field("rank").type),
            "device": pa.array(cols.pop("device"), type=schema.field("device").type),
            "stream": pa.array(cols.pop("stream"), type=schema.field("tid").type),
            "ops": pa.array(cols.pop("ops"), type=pa.int64()),
        }
        | {k: pa.array(v, type=pa.float64()) for k, v in cols.items()}
    )


_KERNEL_SCHEMA = pa.schema(
    [("name", pa.string()), ("kind", pa.string()), ("tensor_core", pa.bool_()), ("count", pa.int64())]
    + [(c, pa.float64()) for c in ("total_us", "mean_us", "median_us", "min_us", "max_us", "pct")]
    + [("grid", pa.string()), ("block", pa.string())]
    + [("registers_per_thread", pa.int64()), ("shared_memory_bytes", pa.int64()), ("occupancy_pct", pa.float64())]
    + [("devices", pa.string()), ("streams", pa.string()), ("ranks", pa.string())]
)


def _kernel_args(texts: pa.Array) -> dict[str, Any]:
    """The kernel args the kernels view reads (kernels._shape and the TRY_CASTs of
    kernels_from_events), parsed in one pass by Arrow's JSON reader: the shapes as
    texts (None: absent), registers and shared memory as integers and the occupancy
    as the SQL's DECIMAL(38, 12) scaled to an integer, each with where it is valid.
    :class:`Unsure` where the SQL might read a row otherwise: a JSON null (DuckDB
    reads it as a value), a repeated key (DuckDB reads the first), a text that is not
    one JSON object, a field whose type is not the one read here."""
    n = len(texts)
    if n == 0 or texts.null_count == n:
        return {"grid": [None] * n, "block": [None] * n} | {
            k: (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)) for k in ("regs", "smem", "occ")
        }
    texts = pc.fill_null(texts, "{}")
    if pc.any(pc.match_substring_regex(texts, "null|NaN|Infinity")).as_py():
        raise Unsure  # DuckDB's reading of these is its own
    # One text per line: the strings' data, each with a newline after it.
    lines = pc.binary_join_element_wise(texts, pa.scalar(""), "\n")
    width = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    offsets = np.frombuffer(
        lines.buffers()[1], dtype=width, count=len(lines) + 1, offset=lines.offset * width(0).nbytes
    )
    raw = lines.buffers()[2][int(offsets[0]) : int(offsets[-1])]
    try:
        obj = pj.read_json(
            pa.BufferReader(raw),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(raw) + 1),
            parse_options=pj.ParseOptions(newlines_in_values=True),  # the trace's own layout, kept
        )
    except pa.ArrowInvalid:
        raise Unsure from None
    if obj.num_rows != n:
        raise Unsure
    out: dict[str, Any] = {}
    for key, field in (("grid", "grid"), ("block", "block")):
        out[key] = _shapes(obj, field, n)
    for key, field in (("regs", "registers per thread"), ("smem", "shared memory")):
        col = _column(obj, field)
        if col is None:
            out[key] = (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool))
            continue
        if not pa.types.is_int64(col.type):
            raise Unsure  # a float or a text: DuckDB's TRY_CAST rounds or parses it
        out[key] = (col.fill_null(0).to_numpy(zero_copy_only=False), col.is_valid().to_numpy(zero_copy_only=False))
    col = _column(obj, _OCC)
    if col is None:
        out["occ"] = (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool))
    else:
        if not (pa.types.is_int64(col.type) or pa.types.is_float64(col.type)):
            raise Unsure
        v = col.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        if not (np.abs(v) < 1e25).all():
            raise Unsure  # past DECIMAL(38, 12)
        # TRY_CAST(.. AS DOUBLE)::DECIMAL(38, 12): the double scaled and rounded to an integer.
        out["occ"] = (
            [round(x * 10.0**_DECIMAL_SCALE) for x in v.tolist()],
            col.is_valid().to_numpy(zero_copy_only=False),
        )
    return out


def _column(obj: pa.Table, field: str) -> pa.Array | None:
    if field not in obj.column_names:
        return None
    col = obj.column(field).combine_chunks()
    return None if pa.types.is_null(col.type) else col


def _shapes(obj: pa.Table, field: str, n: int) -> list[str | None]:
    """kernels._shape: a list of integers ``[4,106,1]`` as ``4×106×1``."""
    col = _column(obj, field)
    if col is None:
        return [None] * n
    if not (pa.types.is_list(col.type) and pa.types.is_int64(col.type.value_type)):
        raise Unsure  # DuckDB's JSON spelling of anything else
    texts = pc.binary_join(col.cast(pa.list_(pa.string())), "×")
    shapes: list[str | None] = texts.to_pylist()
    return shapes


def _joined(groups: np.ndarray, values: np.ndarray, n: int) -> list[str | None]:
    """Per group 0..n-1, string_agg(DISTINCT v::VARCHAR, ',' ORDER BY v::VARCHAR) of its
    ``values``."""
    texts: list[set[str]] = [set() for _ in range(n)]
    if len(groups):
        for g, v in np.unique(np.stack([groups, values]), axis=1).T.tolist():
            texts[g].add(str(v))
    return [",".join(sorted(t)) if t else None for t in texts]


def _max_by(starts: np.ndarray, values: np.ndarray, ok: np.ndarray) -> list[int | None]:
    """Per group (from ``starts``), the largest of its valid values (None: none)."""
    if not len(starts):
        return []
    top = np.maximum.reduceat(np.where(ok, values, _INT64_MIN), starts)
    any_ok = np.logical_or.reduceat(ok, starts)
    return [int(v) if k else None for v, k in zip(top.tolist(), any_ok.tolist(), strict=True)]


def _most_common(groups: np.ndarray, shapes: list[str | None], n: int) -> list[str | None]:
    """Per group 0..n-1, first(shape ORDER BY n DESC, shape) over its shapes that are
    not null."""
    counts: dict[tuple[int, str], int] = {}
    for g, sh in zip(groups.tolist(), shapes, strict=True):
        if sh is not None:
            counts[(g, sh)] = counts.get((g, sh), 0) + 1
    best: list[tuple[int, str] | None] = [None] * n
    for (g, sh), c in counts.items():
        b = best[g]
        if b is None or (-c, sh) < b:
            best[g] = (-c, sh)
    return [b[1] if b is not None else None for b in best]


@lru_cache(maxsize=1 << 16)
def _tensor_core(name: str) -> bool:
    """tensor_cores.uses_tensor_cores, once per name (the ranks of a job share them)."""
    return uses_tensor_cores(name)


def _kernels(e: RankEvents) -> pa.Table:
    """kernels.kernels_from_events's rows."""
    rows = np.flatnonzero(~e.cpu & e.kind_in("kernel", "collective"))
    take = pa.array(rows, type=pa.int64())
    names = e.t.column("name").take(take).combine_chunks()
    if names.null_count:
        raise Unsure  # a null name is a group of its own in the SQL
    enc = names.dictionary_encode()
    code = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    dur = e.dur[rows]
    order = np.lexsort((dur, code))
    code, dur, rows = code[order], dur[order], rows[order]
    args = _kernel_args(e.t.column("args").take(pa.array(rows, type=pa.int64())).combine_chunks())
    if not len(rows):
        return _KERNEL_SCHEMA.empty_table()
    starts = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1]]))
    ends = np.append(starts[1:], len(code))
    group = np.cumsum(np.concatenate([[0], code[1:] != code[:-1]])).astype(np.int64)  # 0..groups-1
    k = len(starts)
    n = ends - starts
    sums = np.add.reduceat(dur, starts)
    total = int(dur.sum())
    lo, mid = dur[starts + (n - 1) // 2].astype(np.float64), dur[starts + n // 2].astype(np.float64)
    median = np.where(n % 2 == 1, lo, lo + (mid - lo) * 0.5)  # quantile_cont's interpolation
    occ, occ_ok = args["occ"]
    den = np.add.reduceat(np.where(occ_ok, dur, 0), starts)
    # DECIMAL(38, 12) products: exact in Python integers (past int64 for long kernels).
    num = np.add.reduceat(np.where(occ_ok, dur.astype(object) * np.asarray(occ, dtype=object), 0), starts)
    any_occ = np.logical_or.reduceat(occ_ok, starts)
    occ_pct = [
        float(Decimal(int(x)).scaleb(-_DECIMAL_SCALE)) / int(d) if ok and d else None
        for x, d, ok in zip(num.tolist(), den.tolist(), any_occ.tolist(), strict=True)
    ]
    device, device_ok = e.ints("device")
    tid = e.ints("tid")[0]
    dv = device_ok[rows]
    group_names = [enc.dictionary[int(c)].as_py() for c in code[starts].tolist()]
    s_f = sums.astype(np.float64)
    cols: dict[str, Any] = {
        "name": group_names,
        "kind": np.where(np.logical_or.reduceat(e.kind_in("collective")[rows], starts), "collective", "kernel"),
        "tensor_core": [_tensor_core(x) for x in group_names],
        "count": n,
        "total_us": s_f / 1000.0,
        "mean_us": s_f / n / 1000.0,
        "median_us": median / 1000.0,
        "min_us": dur[starts].astype(np.float64) / 1000.0,
        "max_us": dur[ends - 1].astype(np.float64) / 1000.0,
        "pct": (100.0 * s_f / total) if total else [None] * k,
        "grid": _most_common(group, args["grid"], k),
        "block": _most_common(group, args["block"], k),
        "registers_per_thread": _max_by(starts, *args["regs"]),
        "shared_memory_bytes": _max_by(starts, *args["smem"]),
        "occupancy_pct": occ_pct,
        "devices": _joined(group[dv], device[rows][dv], k),
        "streams": _joined(group, tid[rows], k),
        "ranks": [str(e.rank)] * k,
    }
    return pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in _KERNEL_SCHEMA}, schema=_KERNEL_SCHEMA)
