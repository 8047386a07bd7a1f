"""Per-rank summaries: the small tables the cluster index is made of (the "map" step).

:func:`summarize` reads one opened profile (one rank, or several ranks of one job) and
returns three Arrow tables; a Dask worker runs it on the rank it just imported, and
the client only ever gathers these. Times are wall-clock ns (the profile's origin
plus ``ts``), so ranks recorded on different clock origins line up.

``steps`` (one row per rank and step; a rank without steps is one window, step null)
    rank, step, start_ns, dur_ns, busy_ns (union of device work), compute_ns (union of
    the non-collective device work), comm_ns (union of collective kernels),
    overlap_ns (communication while compute kernels run), exposed_ns (comm_ns -
    overlap_ns), kernel_ns (union of the compute kernels, memcpy/memset left out),
    device_measured (the rank has device work, overview.measured_ranks: false, the
    device columns before it are 0 as not measured, and the views read them as null;
    an index written before this column has none, and its views read them as measured).
    The overlap columns follow :func:`..analysis.communication.step_overlap`, so the
    ``comm_overlap`` view reads them from the index as the per-rank computation would.

``collectives`` (one row per device collective of a rank)
    rank, step, op (canonical: allreduce, allgather, reducescatter, broadcast, reduce,
    sendrecv, alltoall, or the kernel's own word), pg (process group name, from the
    kernel's or its launching call's args; ``default`` when the trace says none),
    pg_ranks (the group's ranks as written), pg_size, seq (the group's sequence number,
    null when the trace has none), ordinal (order of issue on this rank within pg and
    op, the match key without seq), bytes (the larger of in/out message, null when
    unknown), start_ns, end_ns.

``ranks`` (one row per rank)
    rank, world_size, backend, events, warnings, source (the imported file), first_ns
    and last_ns (the first and last wall-clock ns the rank's timeline covers, by the web
    timeline's rule: a job's span without reading its events), devices_used (JSON: the
    rank's :func:`..analysis.device_use.devices_used` records).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..analysis import intervals as iv
from ..analysis.common import DEVICE_BUSY_SQL, fetch, launch_calls_sql
from ..analysis.communication import DTYPE_BYTES, collectives, step_overlap
from ..analysis.overview import measured_ranks
from ..analysis.ranks import step_of, step_windows
from ..store import Profile
from ..store.vocabulary import collective_op

STEPS_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("step", pa.int32()),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("busy_ns", pa.int64()),
        ("compute_ns", pa.int64()),
        ("comm_ns", pa.int64()),
        ("overlap_ns", pa.int64()),
        ("exposed_ns", pa.int64()),
        ("kernel_ns", pa.int64()),
        ("device_measured", pa.bool_()),
    ]
)

COLLECTIVES_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("step", pa.int32()),
        ("op", pa.string()),
        ("pg", pa.string()),
        ("pg_ranks", pa.string()),
        ("pg_size", pa.int32()),
        ("seq", pa.int64()),
        ("ordinal", pa.int64()),
        ("bytes", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
    ]
)

RANKS_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("world_size", pa.int32()),
        ("backend", pa.string()),
        ("events", pa.int64()),
        ("warnings", pa.int64()),
        ("source", pa.string()),
        ("first_ns", pa.int64()),
        ("last_ns", pa.int64()),
        ("devices_used", pa.string()),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {"steps": STEPS_SCHEMA, "collectives": COLLECTIVES_SCHEMA, "ranks": RANKS_SCHEMA}

#: Canonical collective names: a lower-cased name with ``_`` removed, by what it contains.
_OPS: tuple[tuple[str, str], ...] = (
    ("allreduce", "allreduce"),
    ("reducescatter", "reducescatter"),
    ("allgather", "allgather"),
    ("alltoall", "alltoall"),
    ("broadcast", "broadcast"),
    ("sendrecv", "sendrecv"),
    ("send", "sendrecv"),
    ("recv", "sendrecv"),
    ("reduce", "reduce"),
)


def canonical_op(name: str) -> str:
    """``all_reduce``, ``AllReduce``, ``ncclKernel_AllReduce_RING_LL`` -> ``allreduce``."""
    word = name.lower().replace("_", "")
    for key, op in _OPS:
        if key in word:
            return op
    return word or "unknown"


def summarize(profile: Profile) -> dict[str, pa.Table]:
    """The ``steps``, ``collectives`` and ``ranks`` tables of ``profile`` (module doc).

    The reference computation, by SQL over the profile's views; :func:`summarize_events`
    answers the same from one rank's events in memory."""
    origin = profile.time_origin_ns
    w = step_windows(profile)
    d = fetch(
        profile,
        f"SELECT rank, kind = 'collective' AS comm, kind = 'kernel' AS kern, ts, ts + dur AS te FROM events "
        f"WHERE device_type <> 'cpu' AND kind IN {DEVICE_BUSY_SQL} AND dur > 0",
    )
    return {
        "steps": _steps(d, w, origin, measured_ranks(profile, "device")),
        "collectives": _collectives(_collective_rows(profile), lambda: _host_bytes(collectives(profile)), w, origin),
        "ranks": ranks_table(profile),
    }


def _steps(d: dict[str, np.ndarray], w: dict[str, np.ndarray], origin: int, device: set[int]) -> pa.Table:
    """``d``: the device busy intervals (rank, comm, kern, ts, te) of the profile;
    ``device``: the ranks with device work (overview.measured_ranks)."""
    cols: dict[str, list[Any]] = {n: [] for n in STEPS_SCHEMA.names}
    for r in np.unique(w["rank"]):
        wsel = np.flatnonzero(w["rank"] == r)
        w0, w1 = w["start"][wsel], w["end"][wsel]
        sel = d["rank"] == r
        cm = sel & d["comm"]
        bs, be = iv.merge(d["ts"][sel], d["te"][sel])
        ks, ke = iv.merge(d["ts"][sel & ~cm], d["te"][sel & ~cm])
        busy, comp = iv.covered(bs, be, w0, w1), iv.covered(ks, ke, w0, w1)
        comm, kern, ov = step_overlap(d["ts"], d["te"], cm, sel & d["kern"], w0, w1)
        for j, i in enumerate(wsel):
            cols["rank"].append(int(r))
            cols["step"].append(int(w["step"][i]) if w["step"][i] >= 0 else None)
            cols["start_ns"].append(int(w0[j]) + origin)
            cols["dur_ns"].append(int(w1[j] - w0[j]))
            cols["busy_ns"].append(int(busy[j]))
            cols["compute_ns"].append(int(comp[j]))
            cols["comm_ns"].append(int(comm[j]))
            cols["overlap_ns"].append(int(ov[j]))
            cols["exposed_ns"].append(int(comm[j] - ov[j]))
            cols["kernel_ns"].append(int(kern[j]))
            cols["device_measured"].append(int(r) in device)
    return pa.table(cols, schema=STEPS_SCHEMA)


def _collective_rows(profile: Profile) -> list[dict[str, Any]]:
    """Each device collective with what its kernel's args say (newer PyTorch copies the
    call's parameters into it), the launching call's ``record_param_comms`` as the
    fallback, ordered by rank and start."""
    rows: list[dict[str, Any]] = profile.sql(
        f"""
        WITH l AS ({launch_calls_sql(ext="external_id")}),
        h AS (SELECT rank, external_id, args FROM events
              WHERE device_type = 'cpu' AND name = 'record_param_comms' AND external_id IS NOT NULL)
        SELECT d.rank, d.name, d.ts, d.dur,
               coalesce(json_extract_string(d.args, '$."Collective name"'),
                        json_extract_string(h.args, '$."Collective name"')) AS cname,
               coalesce(json_extract_string(d.args, '$."Process Group Name"'),
                        json_extract_string(h.args, '$."Process Group Name"')) AS pg,
               coalesce(json_extract_string(d.args, '$."Process Group Ranks"'),
                        json_extract_string(h.args, '$."Process Group Ranks"')) AS pg_ranks,
               TRY_CAST(coalesce(json_extract_string(d.args, '$."Group size"'),
                        json_extract_string(h.args, '$."Group size"')) AS INTEGER) AS pg_size,
               TRY_CAST(coalesce(json_extract_string(d.args, '$.Seq'),
                        json_extract_string(h.args, '$.Seq')) AS BIGINT) AS seq,
               TRY_CAST(coalesce(json_extract_string(d.args, '$."In msg nelems"'),
                        json_extract_string(h.args, '$."In msg nelems"')) AS BIGINT) AS n_in,
               TRY_CAST(coalesce(json_extract_string(d.args, '$."Out msg nelems"'),
                        json_extract_string(h.args, '$."Out msg nelems"')) AS BIGINT) AS n_out,
               lower(coalesce(json_extract_string(d.args, '$.dtype'), json_extract_string(h.args, '$.dtype'))) AS dtype
        FROM events d
        LEFT JOIN l ON l.rank = d.rank AND l.correlation = d.correlation
        LEFT JOIN h ON h.rank = d.rank AND h.external_id = l.ext
        WHERE d.kind = 'collective' AND d.device_type <> 'cpu'
        ORDER BY d.rank, d.ts
        """
    ).to_pylist()
    return rows


def _host_bytes(host: dict[str, np.ndarray]) -> dict[tuple[int, int], int]:
    """(rank, start) -> bytes of the collectives whose enclosing host call says them."""
    return {(int(r), int(t)): int(b) for r, t, b in zip(host["rank"], host["ts"], host["bytes"], strict=True) if b >= 0}


def _collectives(
    k: list[dict[str, Any]],
    sizes: Callable[[], dict[tuple[int, int], int]],
    w: dict[str, np.ndarray],
    origin: int,
) -> pa.Table:
    """The collectives table from :func:`_collective_rows`' rows; ``sizes`` (asked only
    when a row needs it) gives the sizes from the enclosing host call
    (analysis.communication), by rank and start."""
    host_bytes: dict[tuple[int, int], int] | None = None
    cols: dict[str, list[Any]] = {n: [] for n in COLLECTIVES_SCHEMA.names}
    ordinal: dict[tuple[int, str, str], int] = {}
    steps_by_rank: dict[int, np.ndarray] = {}
    for rank in {int(x["rank"]) for x in k}:
        ts = np.array([x["ts"] for x in k if x["rank"] == rank], dtype=np.int64)
        steps_by_rank[rank] = step_of(w, rank, ts)
    pos: dict[int, int] = {}
    for x in k:
        r = int(x["rank"])
        i = pos.get(r, 0)
        pos[r] = i + 1
        step = int(steps_by_rank[r][i])
        op = canonical_op(str(x["cname"] or collective_op(str(x["name"]))))
        pg = str(x["pg"]) if x["pg"] is not None else "default"
        o = ordinal.get((r, pg, op), 0)
        ordinal[(r, pg, op)] = o + 1
        nbytes: int | None = None
        size = DTYPE_BYTES.get(str(x["dtype"])) if x["dtype"] else None
        n = max(x["n_in"] or 0, x["n_out"] or 0)
        if size and n:
            nbytes = n * size
        else:
            if host_bytes is None:
                host_bytes = sizes()
            nbytes = host_bytes.get((r, int(x["ts"])))
        cols["rank"].append(r)
        cols["step"].append(step if step >= 0 else None)
        cols["op"].append(op)
        cols["pg"].append(pg)
        cols["pg_ranks"].append(x["pg_ranks"])
        cols["pg_size"].append(x["pg_size"])
        cols["seq"].append(x["seq"])
        cols["ordinal"].append(o)
        cols["bytes"].append(nbytes)
        cols["start_ns"].append(int(x["ts"]) + origin)
        cols["end_ns"].append(int(x["ts"]) + int(x["dur"] or 0) + origin)
    return pa.table(cols, schema=COLLECTIVES_SCHEMA)


def ranks_table(profile: Profile) -> pa.Table:
    """The ``ranks`` table of ``profile``: its metadata, and its span and devices used by
    SQL (no in-memory path: they read the counters and memory tables too)."""
    from ..analysis.device_use import devices_used
    from ..store.spans import spans_by_rank

    used: dict[int, list[dict[str, Any]]] = {}
    for d in devices_used(profile):
        used.setdefault(int(d["rank"]), []).append(d)
    return _ranks(profile.paths, profile.metas, spans_by_rank(profile), used, profile.time_origin_ns)


def _ranks(
    paths: Sequence[Path],
    metas: Sequence[dict[str, Any]],
    spans: dict[int, tuple[int, int]],
    used: dict[int, list[dict[str, Any]]],
    origin: int,
) -> pa.Table:
    rows: list[dict[str, Any]] = []
    for path, meta in zip(paths, metas):
        dist = meta.get("distributed") or {}
        src = (meta.get("sources") or [{}])[0].get("path")
        for r in meta.get("ranks") or [0]:
            rows.append(
                {
                    "rank": int(r),
                    "world_size": meta.get("world_size"),
                    "backend": dist.get("backend") if isinstance(dist, dict) else None,
                    "events": int((meta.get("tables") or {}).get("events", 0)),
                    "warnings": len(meta.get("warnings") or []),
                    "source": str(src or path),
                    "first_ns": spans[int(r)][0] + origin if int(r) in spans else None,
                    "last_ns": spans[int(r)][1] + origin if int(r) in spans else None,
                    "devices_used": json.dumps(used.get(int(r), [])),
                }
            )
    return pa.Table.from_pylist(rows, schema=RANKS_SCHEMA)
