"""Chrome Trace Event JSON (``aiprof timechart``), which Perfetto and chrome://tracing load.

What is written:
- a header before the events: ``displayTimeUnit``, ``baseTimeNanoseconds`` (the
  profile's time origin, Unix ns), ``deviceProperties`` and ``distributedInfo`` (so the
  Kineto importer gets devices and rank back);
- ``M`` metadata: process_name / thread_name / sort indexes from the tracks table
  (integer pid and tid, as the events carry them; host threads and device streams are
  different tracks already);
- every event, sorted by ts: spans as ``X``, instants as ``i``; events of kind
  ``other`` that came from flows or async markers (their args JSON starts with
  ``{"ph": ...}``) are written back with that phase, id and binding point, so that
  import -> timechart -> import gives the same events;
- when the profile holds no flow events at all, ``s``/``f`` pairs built from
  ``correlation`` (host launch -> device work), marked ``aiprof_synthetic`` so a
  re-import does not take them for recorded events;
- on every span and instant, ``aiprof_kind``, ``aiprof_device_type`` and
  ``aiprof_device``: the store's classification, which the importer takes back as is;
- counters as ``C`` events and allocator events as Kineto's ``[memory]`` instants.

Tracks of their own (a tid of their own beside the thread's, named after it), so that
every thread's slices nest as torch's own traces do:
- aiprof's steps (and the span before the first step), which begin and end where the
  recorder saw them, inside torch's operators (the optimizer's step hook);
- aiprof's other marks: annotations, GC pauses, torch.distributed calls;
- the Python samples as a sampled flame chart (export.sample_slices), unless
  ``python_samples=False``; they are marked ``aiprof_synthetic`` (drawn, not recorded).

``ts`` and ``dur`` are µs written with exactly three decimals from the int64 ns, so
no precision is lost (the numbers are text built by DuckDB, never a binary float).
With several ranks, pids become ``rank * 10**7 + pid`` so ranks do not collide.
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path
from typing import IO, Any, cast

import orjson

from ..record.finalizer import BEFORE_FIRST_STEP, OWN_CATS
from ..store import Profile
from .sample_slices import sample_slices
from .samples import THREAD_NAMES_SQL, thread_names

_FLOW = "(kind = 'other' AND dur = 0 AND starts_with(args, '{\"ph\":'))"


#: The tid of a thread's own aiprof tracks: the thread's tid plus these (Linux tids stay
#: below 2**22, so a track never takes a real thread's tid, and all fit in 32 bits).
TRACK_OFFSETS = {"aiprof steps": 1 << 29, "aiprof": 2 << 29, "Python samples": 3 << 29}
_OWN = f"(cat IN ({', '.join(repr(c) for c in OWN_CATS)}) AND tid >= 0 AND tid < {1 << 29})"
_STEPS = f"(kind = 'step' OR name = '{BEFORE_FIRST_STEP}')"
_TID = (
    f"(CASE WHEN {_OWN} AND {_STEPS} THEN tid + {TRACK_OFFSETS['aiprof steps']} "
    f"WHEN {_OWN} THEN tid + {TRACK_OFFSETS['aiprof']} ELSE tid END)"
)


def _us(col: str) -> str:
    """SQL: int ns column -> exact µs text with three decimals."""
    return (
        f"(CASE WHEN {col} < 0 THEN '-' ELSE '' END || (abs({col}) // 1000)::VARCHAR || '.' || "
        f"lpad((abs({col}) % 1000)::VARCHAR, 3, '0'))"
    )


#: With several ranks, flow ids of rank R > 0 are moved up by R << 40, so two ranks'
#: arrows never join (rank 0's ids, and a single-rank profile's, are written as they came).
def _rank_id(num: str, rank: str, multi: bool) -> str:
    if not multi:
        return f"{num}::VARCHAR"
    return f"(CASE WHEN coalesce({rank}, 0) = 0 THEN {num} ELSE ({rank}::BIGINT << 40) + {num} END)::VARCHAR"


def _flow_id(multi: bool) -> str:
    raw = "json_extract(args, '$.id')::VARCHAR"
    if not multi:
        return raw
    n = "TRY_CAST(json_extract_string(args, '$.id') AS BIGINT)"
    return (
        f"CASE WHEN coalesce(rank, 0) = 0 THEN {raw} WHEN {n} IS NOT NULL THEN {_rank_id(n, 'rank', True)} "
        "ELSE to_json(rank::VARCHAR || ':' || json_extract_string(args, '$.id'))::VARCHAR END"
    )


def _js(col: str) -> str:
    """SQL: a value as JSON text (null stays null)."""
    return f"coalesce(to_json({col})::VARCHAR, 'null')"


def write_chrome_trace(
    profile: Profile,
    path: str | os.PathLike[str],
    *,
    batch_rows: int = 100_000,
    window: tuple[int, int] | None = None,
    python_samples: bool = True,
) -> dict[str, int]:
    """Write ``profile`` as Chrome Trace JSON to ``path`` (gzipped when it ends in .gz).

    ``window``: (t0, t1) ns on the profile's time axis; only the events that overlap it
    (and the counter and memory samples inside it) are written. ``python_samples``: the
    Python samples as a flame chart on a track beside each sampled thread.
    Returns counts of what was written: events, flows, counters, memory, metadata,
    python_slices.
    """
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    counts = {
        "events": 0,
        "flows": 0,
        "synthetic_flows": 0,
        "counters": 0,
        "memory": 0,
        "metadata": 0,
        "python_slices": 0,
    }
    try:
        raw = cast(IO[bytes], gzip.open(tmp, "wb", compresslevel=6)) if out.name.endswith(".gz") else open(tmp, "wb")
        with raw as f:
            _write(profile, f, counts, batch_rows, window, python_samples)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return counts


def _header(profile: Profile) -> dict[str, Any]:
    h: dict[str, Any] = {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": profile.time_origin_ns,
        "aiprofTsFromBase": True,  # importers.kineto.AIPROF_BASE_KEY: ts count from the base
    }
    ranks = sorted({r for m in profile.metas for r in m.get("ranks", [])})
    if len(ranks) == 1:
        ws = profile.metas[0].get("world_size")
        h["distributedInfo"] = {"rank": ranks[0], **({"world_size": ws} if isinstance(ws, int) else {})}
    props = []
    for d in profile.devices:
        if d.get("type") == "cpu" or d.get("index") is None:
            continue
        p: dict[str, Any] = {"id": d.get("index"), "name": d.get("name")}
        if d.get("memory_bytes") is not None:
            p["totalGlobalMem"] = d["memory_bytes"]
        cc = str(d.get("compute_capability") or "")
        if "." in cc:
            major, _, minor = cc.partition(".")
            if major.isdigit() and minor.isdigit():
                p["computeMajor"], p["computeMinor"] = int(major), int(minor)
        for k in ("numSms", "warpSize", "maxThreadsPerBlock", "sharedMemPerBlock", "regsPerBlock"):
            if k in d:
                p[k] = d[k]
        props.append(p)
    if props:
        h["deviceProperties"] = props
    return h


def chrome_trace_bytes(profile: Profile, window: tuple[int, int] | None = None) -> tuple[bytes, dict[str, int]]:
    """The Chrome Trace JSON of ``profile`` (or of ``window``, see write_chrome_trace) in memory."""
    buf = io.BytesIO()
    counts = dict.fromkeys(("events", "flows", "synthetic_flows", "counters", "memory", "metadata", "python_slices"), 0)
    _write(profile, buf, counts, 100_000, window, python_samples=False)
    return buf.getvalue(), counts


def _sources(window: tuple[int, int] | None) -> tuple[str, str, str]:
    """The events, counters and memory tables to read: whole, or what overlaps the window."""
    if window is None:
        return "events", "counters", "memory"
    t0, t1 = int(window[0]), int(window[1])
    return (
        f"(SELECT * FROM events WHERE ts <= {t1} AND ts + greatest(dur, 0) >= {t0})",
        f"(SELECT * FROM counters WHERE ts BETWEEN {t0} AND {t1})",
        f"(SELECT * FROM memory WHERE ts BETWEEN {t0} AND {t1})",
    )


def _own_tracks(profile: Profile, slices: bool, pid_of: Any) -> list[str]:
    """thread_name metadata of the tracks aiprof adds beside a thread."""
    names = thread_names(profile)
    rows = profile.sql(
        f"SELECT DISTINCT rank, pid, tid, {_STEPS} AS steps FROM events WHERE {_OWN}"
        + (" UNION SELECT DISTINCT rank, pid, tid, NULL FROM samples" if slices else "")
        + " ORDER BY 1, 2, 3, 4 NULLS FIRST"
    ).to_pylist()
    out = []
    for r in rows:
        key = (int(r["rank"]), int(r["pid"]), int(r["tid"]))
        track = "Python samples" if r["steps"] is None else "aiprof steps" if r["steps"] else "aiprof"
        name = f"{names.get(key) or f'thread {key[2]}'} · {track}"
        pid = pid_of(key[0], key[1])
        out.append(
            f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{key[2] + TRACK_OFFSETS[track]},'
            f'"args":{{"name":{orjson.dumps(name).decode()}}}}}'
        )
    return out


def _write(
    profile: Profile,
    f: IO[bytes],
    counts: dict[str, int],
    batch_rows: int,
    window: tuple[int, int] | None = None,
    python_samples: bool = True,
) -> None:
    con = profile.con
    events, counters, memory = _sources(window)
    multi = next(iter(con.execute("SELECT count(DISTINCT rank) FROM events").fetchall()), None)
    many = bool(multi and int(multi[0]) > 1)

    def pid_of(col: str, prefix: str = "") -> str:
        return f"({prefix}rank::BIGINT * 10000000 + {col})" if many else col

    pid = pid_of("pid")
    header = _header(profile)
    f.write(b"{")
    for k, v in header.items():
        f.write(orjson.dumps(k) + b":" + orjson.dumps(v) + b",\n")
    f.write(b'"traceEvents": [\n')
    first = True

    def emit(lines: list[str]) -> None:
        nonlocal first
        if not lines:
            return
        data = ",\n".join(lines)
        f.write((data if first else ",\n" + data).encode("utf-8"))
        first = False

    # Metadata: names and sort indexes of processes and threads.
    meta_sql = f"""
        SELECT '{{"ph":"M","name":"process_name","pid":' || {pid} || ',"tid":0,"args":{{"name":'
               || to_json(process_name)::VARCHAR || '}}}}' FROM tracks WHERE tid = -1 AND process_name IS NOT NULL
        UNION ALL
        SELECT '{{"ph":"M","name":"process_sort_index","pid":' || {pid} || ',"tid":0,"args":{{"sort_index":'
               || sort_index || '}}}}' FROM tracks WHERE tid = -1 AND sort_index IS NOT NULL
        UNION ALL
        SELECT '{{"ph":"M","name":"thread_name","pid":' || {pid} || ',"tid":' || tid || ',"args":{{"name":'
               || to_json(thread_name)::VARCHAR || '}}}}' FROM ({THREAD_NAMES_SQL})
        UNION ALL
        SELECT '{{"ph":"M","name":"thread_sort_index","pid":' || {pid} || ',"tid":' || tid || ',"args":{{"sort_index":'
               || sort_index || '}}}}' FROM tracks WHERE tid <> -1 AND sort_index IS NOT NULL
    """
    rows = [r[0] for r in con.execute(meta_sql).fetchall()]
    slices = sample_slices(profile) if python_samples else None
    has_slices = slices is not None and slices.num_rows > 0
    rows += _own_tracks(profile, has_slices, lambda r, p: r * 10_000_000 + p if many else p)
    counts["metadata"] = len(rows)
    emit(rows)

    has_flows = next(iter(con.execute(f"SELECT count(*) FROM events WHERE {_FLOW}").fetchall()), None)
    n_ranks = next(iter(con.execute("SELECT count(DISTINCT rank) FROM events").fetchall()), (0,))
    many_ranks = int(n_ranks[0] or 0) > 1
    synth = not (has_flows and int(has_flows[0]) > 0)
    ev_args = (
        "CASE WHEN args IS NOT NULL AND starts_with(ltrim(args), '{') THEN args "
        "WHEN correlation IS NOT NULL OR external_id IS NOT NULL THEN "
        "'{\"correlation\":' || coalesce(correlation::VARCHAR, 'null') || ',\"External id\":' || "
        "coalesce(external_id::VARCHAR, 'null') || '}' ELSE '{}' END"
    )
    common = (
        f"',\"cat\":' || {_js('cat')} || ',\"name\":' || {_js('coalesce(name, ' + chr(39) * 2 + ')')}"
        f" || ',\"pid\":' || {pid} || ',\"tid\":' || {_TID} || ',\"ts\":' || {_us('ts')}"
        # The store's own classification, so a re-import gets the same kinds and
        # devices whatever vendor vocabulary `cat` holds (viewers ignore these keys).
        f" || ',\"aiprof_kind\":' || {_js('kind')} || ',\"aiprof_device_type\":' || {_js('device_type')}"
        f" || ',\"aiprof_device\":' || {_js('device')}"
    )
    flow_ph = "json_extract_string(args, '$.ph')"
    parts = [
        # Flows and async markers, back to their phase.
        f"""SELECT ts, 1 AS k, '{{"ph":' || to_json({flow_ph})::VARCHAR || {common}
               || coalesce(',"id":' || {_flow_id(many_ranks)}, '')
               || coalesce(',"bp":' || json_extract(args, '$.bp')::VARCHAR, '')
               || coalesce(',"args":' || json_extract(args, '$.args')::VARCHAR, '') || '}}' AS j, 0 AS d
            FROM {events} WHERE {_FLOW}""",
        # Instants.
        f"""SELECT ts, 0 AS k, '{{"ph":"i","s":"t"' || {common} || ',"args":' || {ev_args} || '}}' AS j, 0 AS d
            FROM {events} WHERE kind = 'instant' AND NOT coalesce({_FLOW}, FALSE)""",
        # Spans.
        f"""SELECT ts, 0 AS k, '{{"ph":"X"' || {common} || ',"dur":' || {_us("dur")} || ',"args":' || {ev_args}
               || '}}' AS j, dur AS d
            FROM {events} WHERE kind <> 'instant' AND NOT coalesce({_FLOW}, FALSE)""",
        # Counters.
        f"""SELECT ts, 2 AS k, '{{"ph":"C","name":' || to_json(metric)::VARCHAR || ',"pid":'
               || {pid_of("coalesce(device, 0)")} || ',"tid":0,"ts":'
               || {_us("ts")} || ',"args":{{' || to_json(metric)::VARCHAR || ':'
               || CASE WHEN isfinite(value) THEN value::VARCHAR ELSE '0' END || '}}}}' AS j, 0 AS d
            FROM {counters}""",
        # Allocator events, as Kineto writes them.
        f"""SELECT ts, 3 AS k, '{{"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":'
               || {pid_of("coalesce(pid, 0)")}
               || ',"tid":' || coalesce(tid, 0) || ',"ts":' || {_us("ts")} || ',"args":{{"Device Type":'
               || CASE device_type WHEN 'cpu' THEN 0 WHEN 'cuda' THEN 1 WHEN 'rocm' THEN 6 WHEN 'xpu' THEN 12
                  WHEN 'hpu' THEN 14 WHEN 'npu' THEN 20 ELSE 0 END
               || ',"Device Id":' || coalesce(device, -1) || ',"Addr":' || coalesce(addr, 0)
               || ',"Bytes":' || coalesce(bytes, 0) || ',"Total Allocated":' || coalesce(allocated, 0)
               || ',"Total Reserved":' || coalesce(reserved, 0) || '}}}}' AS j, 0 AS d
            FROM {memory}""",
    ]
    if has_slices:
        con.register("_aiprof_sample_slices", slices)
        parts.append(
            f"""SELECT ts, 5 AS k, '{{"ph":"X","cat":"python_sample","name":' || to_json(name)::VARCHAR
                   || ',"pid":' || {pid} || ',"tid":' || (tid + {TRACK_OFFSETS["Python samples"]}) || ',"ts":'
                   || {_us("ts")} || ',"dur":' || {_us("dur")} || ',"aiprof_synthetic":true,"args":{{"file":'
                   || {_js("file")} || ',"depth":' || depth || '}}}}' AS j, dur AS d
                FROM _aiprof_sample_slices"""
        )
    if synth:
        # No flow events were imported: draw launch -> kernel arrows from correlation.
        parts.append(
            f"""WITH d AS (SELECT * FROM {events} WHERE correlation IS NOT NULL AND device_type <> 'cpu'
                           AND kind IN ('kernel', 'memcpy', 'memset', 'collective')),
                     h AS (SELECT * FROM {events} WHERE correlation IS NOT NULL AND kind IN ('runtime', 'driver'))
                SELECT h.ts, 4 AS k, '{{"ph":"s","cat":"ac2g","name":"ac2g","aiprof_synthetic":true,"id":' || {_rank_id("h.correlation", "h.rank", many_ranks)}
                       || ',"pid":' || {pid_of("h.pid", "h.")}
                       || ',"tid":' || h.tid || ',"ts":' || {_us("h.ts")} || '}},' ||
                       '{{"ph":"f","cat":"ac2g","name":"ac2g","aiprof_synthetic":true,"id":' || {_rank_id("h.correlation", "h.rank", many_ranks)} || ',"bp":"e"'
                       || ',"pid":' || {pid_of("d.pid", "d.")}
                       || ',"tid":' || d.tid || ',"ts":' || {_us("d.ts")} || '}}' AS j, 0 AS d
                FROM d JOIN h ON h.correlation = d.correlation AND h.rank = d.rank"""
        )
    kinds_seen = {0: "events", 1: "flows", 2: "counters", 3: "memory", 4: "synthetic_flows", 5: "python_slices"}
    # Longer spans first at one ts: a viewer reading in order sees the parent first.
    sql = " UNION ALL ".join(f"({p})" for p in parts)
    reader = con.sql(f"SELECT j, k FROM ({sql}) ORDER BY ts, k, d DESC").to_arrow_reader(batch_rows)
    for batch in reader:
        js = batch.column(0).to_pylist()
        ks = batch.column(1).to_pylist()
        for k in ks:
            counts[kinds_seen[k]] += 1
        emit([j for j in js if j is not None])
    f.write(b"\n]}\n")
