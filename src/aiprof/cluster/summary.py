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
    an index written before this column has none, and its views read them as measured),
    wait_ns (the rank's wait for the other ranks in the step, from its Python samples:
    DDP's waits in backward, :func:`..analysis.rank_waits.window_waits`; null where not
    measured: ranks without DDP samples, and every index written before this column).
    The overlap columns follow :func:`..analysis.communication.step_overlap`, so the
    ``comm_overlap`` view reads them from the index as the per-rank computation would.
    On a rank without device work the communication columns come from its host-side
    collectives (:func:`host_collective_rows`): comm_ns is the union of their calls;
    the calls aiprof record writes block the thread that makes them, so overlap_ns is
    0 and exposed_ns comm_ns; torch.profiler's ``gloo:*`` ranges run on the backend's
    own threads beside the rank's work, which is not measured: both null. A DDP rank
    (its samples show DistributedDataParallel) without any recorded collective has its
    all-reduces in DDP's C++ reducer: comm_ns, overlap_ns and exposed_ns are null (not
    measured), not 0.

``collectives`` (one row per device collective of a rank; on a rank without device
work, one per host-side collective: :func:`host_collective_rows`)
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
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..analysis import intervals as iv
from ..analysis.common import DEVICE_BUSY_SQL, fetch, launch_calls_sql
from ..analysis.communication import DTYPE_BYTES, collectives, message_bytes, step_overlap
from ..analysis.overview import measured_ranks
from ..analysis.ranks import step_of, step_windows
from ..store import Profile
from ..store.vocabulary import COMM_RANGE_SQL_RE, collective_op

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
        ("wait_ns", pa.int64()),
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
    host = host_collective_rows(fetch(profile, HOST_COLLECTIVES_SQL))
    waits, ddp = _waits(profile, w)
    return {
        "steps": _steps(d, w, origin, measured_ranks(profile, "device"), host, waits, ddp),
        "collectives": _collectives(
            _collective_rows(profile) + host, lambda: _host_bytes(collectives(profile)), w, origin
        ),
        "ranks": ranks_table(profile),
    }


#: The host-side collectives of the ranks without device work (no event off the CPU):
#: the ``collective`` events aiprof record writes for torch.distributed's calls where
#: a rank has them, else torch.profiler's ``gloo:*`` / ``nccl:*`` ... ranges (the rule
#: of analysis/communication.py's host collectives, which the ranks and communication
#: views read); ``pri`` 0 for the first, 1 for the ranges.
HOST_COLLECTIVES_SQL = f"""
WITH c AS (SELECT rank, name, ts, coalesce(dur, 0) AS dur, bytes, args, 0 AS pri FROM events
           WHERE kind = 'collective' AND device_type = 'cpu'
           UNION ALL
           SELECT rank, name, ts, coalesce(dur, 0), NULL, args, 1 FROM events
           WHERE device_type = 'cpu' AND kind IN ('cpu_op', 'user_annotation')
             AND regexp_matches(name, '{COMM_RANGE_SQL_RE}')),
best AS (SELECT rank, min(pri) AS pri FROM c GROUP BY rank)
SELECT c.rank, c.name, c.ts, c.dur, c.bytes, c.args, c.pri FROM c JOIN best ON best.rank = c.rank AND best.pri = c.pri
WHERE c.ts IS NOT NULL AND c.rank NOT IN (SELECT DISTINCT rank FROM events WHERE device_type <> 'cpu' AND rank IS NOT NULL)
"""

_RANGE_PREFIX = re.compile(COMM_RANGE_SQL_RE)


def host_collective_rows(h: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of :func:`_collective_rows` for host-side collectives (``h``: rank, name,
    ts, dur, bytes, args, pri as :data:`HOST_COLLECTIVES_SQL` selects them), ordered by
    rank and start, each with its ``bytes`` (the recorded size, else the range's own
    args: :func:`..analysis.communication.message_bytes`) and ``blocking`` (written by
    aiprof record: the call blocks its thread). Group, group size and sequence number
    from the args aiprof record writes (``group``, ``group_size``, ``seq``), else
    torch.profiler's (``Process Group Name``...). Both summary paths call this."""
    rows: list[dict[str, Any]] = []
    for r, n, t, du, b, a, pri in zip(
        h["rank"], h["name"], h["ts"], h["dur"], h["bytes"], h["args"], h["pri"], strict=True
    ):
        name = str(n)
        args = _json_object(a)
        nbytes = int(b) if b is not None and not (isinstance(b, float) and np.isnan(b)) and int(b) >= 0 else None
        if nbytes is None:
            nbytes = message_bytes(name, a if isinstance(a, str) else None)
        ranks = args.get("Process Group Ranks")
        rows.append(
            {
                "rank": int(r),
                "name": name,
                "ts": int(t),
                "dur": int(du),
                "cname": _text(args.get("Collective name")) or _RANGE_PREFIX.sub("", name),
                "pg": _text(args.get("group")) or _text(args.get("Process Group Name")),
                "pg_ranks": ranks if isinstance(ranks, str) or ranks is None else json.dumps(ranks),
                "pg_size": _int(args.get("group_size"), args.get("Group size"), bound=2**31 - 1),
                "seq": _int(args.get("seq"), args.get("Seq"), bound=2**63 - 1),
                "bytes": nbytes,
                "blocking": int(pri) == 0,
            }
        )
    rows.sort(key=lambda x: (x["rank"], x["ts"], x["dur"], x["name"], str(x["pg"]), x["seq"] or -1))
    return rows


def _json_object(text: Any) -> dict[str, Any]:
    if not isinstance(text, str):
        return {}
    try:
        obj = json.loads(text)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _int(*values: Any, bound: int) -> int | None:
    """The first of ``values`` that is an integer (or a text of digits) within +-bound."""
    for v in values:
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool) and -bound - 1 <= v <= bound:
            return v
    return None


def _waits(profile: Profile, w: dict[str, np.ndarray]) -> tuple[np.ndarray | None, set[int]]:
    """Per step window of ``w``: the rank's wait for the others (ns; -1 not measured),
    None where no window has one; and the DDP ranks (analysis/rank_waits.py)."""
    from ..analysis.rank_waits import ddp_ranks, window_waits

    ddp = ddp_ranks(profile)
    if len(ddp) < 2:
        return None, ddp
    ww = window_waits(profile)
    out = np.full(len(w["rank"]), -1, dtype=np.int64)
    n = min(len(ww), len(out))
    out[:n] = ww[:n]
    out[~np.isin(w["rank"], sorted(ddp)) | (w["step"] < 0)] = -1
    return out, ddp


def _host_intervals(host: list[dict[str, Any]]) -> dict[int, tuple[np.ndarray, np.ndarray, bool]]:
    """Rank -> the merged intervals of its host-side collectives, and whether they block."""
    out: dict[int, tuple[np.ndarray, np.ndarray, bool]] = {}
    for r in sorted({x["rank"] for x in host}):
        xs = [x for x in host if x["rank"] == r]
        ts = np.array([x["ts"] for x in xs], dtype=np.int64)
        te = ts + np.array([max(x["dur"], 0) for x in xs], dtype=np.int64)
        s, e = iv.merge(ts, te)
        out[r] = (s, e, all(x["blocking"] for x in xs))
    return out


def _steps(
    d: dict[str, np.ndarray],
    w: dict[str, np.ndarray],
    origin: int,
    device: set[int],
    host: list[dict[str, Any]] | None = None,
    waits: np.ndarray | None = None,
    ddp: set[int] | None = None,
) -> pa.Table:
    """``d``: the device busy intervals (rank, comm, kern, ts, te) of the profile;
    ``device``: the ranks with device work (overview.measured_ranks); ``host``: the
    host-side collectives (:func:`host_collective_rows`), read on ranks without device
    work; ``waits``: per window of ``w``, the rank's wait for the others (-1 none);
    ``ddp``: the DDP ranks (a rank of them without collectives: communication null)."""
    cols: dict[str, list[Any]] = {n: [] for n in STEPS_SCHEMA.names}
    hosts = _host_intervals(host or [])
    for r in np.unique(w["rank"]):
        wsel = np.flatnonzero(w["rank"] == r)
        w0, w1 = w["start"][wsel], w["end"][wsel]
        sel = d["rank"] == r
        cm = sel & d["comm"]
        bs, be = iv.merge(d["ts"][sel], d["te"][sel])
        ks, ke = iv.merge(d["ts"][sel & ~cm], d["te"][sel & ~cm])
        busy, comp = iv.covered(bs, be, w0, w1), iv.covered(ks, ke, w0, w1)
        comm, kern, ov = step_overlap(d["ts"], d["te"], cm, sel & d["kern"], w0, w1)
        c: list[int | None] = [int(x) for x in comm]
        o: list[int | None] = [int(x) for x in ov]
        x: list[int | None] = [int(a - b) for a, b in zip(comm, ov, strict=True)]
        if int(r) not in device and int(r) in hosts:
            hs, he, blocking = hosts[int(r)]
            c = [int(v) for v in iv.covered(hs, he, w0, w1)]
            o = [0 if blocking else None for _ in c]
            x = [v if blocking else None for v in c]
        elif int(r) not in device and int(r) in (ddp or set()):
            c = o = x = [None] * len(wsel)
        for j, i in enumerate(wsel):
            cols["rank"].append(int(r))
            cols["step"].append(int(w["step"][i]) if w["step"][i] >= 0 else None)
            cols["start_ns"].append(int(w0[j]) + origin)
            cols["dur_ns"].append(int(w1[j] - w0[j]))
            cols["busy_ns"].append(int(busy[j]))
            cols["compute_ns"].append(int(comp[j]))
            cols["comm_ns"].append(c[j])
            cols["overlap_ns"].append(o[j])
            cols["exposed_ns"].append(x[j])
            cols["kernel_ns"].append(int(kern[j]))
            cols["device_measured"].append(int(r) in device)
            cols["wait_ns"].append(int(waits[i]) if waits is not None and waits[i] >= 0 else None)
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
        size = DTYPE_BYTES.get(str(x["dtype"])) if x.get("dtype") else None
        n = max(x.get("n_in") or 0, x.get("n_out") or 0)
        if "blocking" in x:  # a host-side collective: its own size (host_collective_rows)
            nbytes = x["bytes"]
        elif size and n:
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
