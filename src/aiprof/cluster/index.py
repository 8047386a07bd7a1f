"""The cluster index: the per-rank summaries of a job, as Parquet in ``OUT/cluster/``.

``aiprof import`` of many ranks writes ``OUT/rank<N>.aiprof`` (one profile per rank) and
this index beside them: ``steps.parquet``, ``collectives.parquet``, ``ranks.parquet``
(:mod:`.summary` documents the columns) and ``index.json`` (job facts, how it was
built). The cluster views read the index through the DuckDB views ``cluster_steps``,
``cluster_collectives`` and ``cluster_ranks``; :func:`ensure` attaches them to any
opened profile, computing them in memory from the events when there is no index
(a folder of a few rank profiles, or one profile holding several ranks). OUT may be an
fsspec URL (:mod:`.storage`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import AiprofError
from ..store import Profile
from .storage import Location, locate
from .summary import SCHEMAS, summarize

INDEX_DIR = "cluster"
INDEX_META = "index.json"
#: DuckDB view name of each index table.
VIEWS = {name: f"cluster_{name}" for name in SCHEMAS}
_MEMO = "cluster.index"


def has_index(path: str | os.PathLike[str]) -> bool:
    return locate(path).exists(INDEX_DIR, INDEX_META)


def write_index(out: Location, parts: dict[str, list[pa.Table]], meta: dict[str, Any]) -> dict[str, int]:
    """Write the gathered per-rank tables as the index of ``out``; returns rows per table."""
    if out.local is not None:
        return _write_index(out.local / INDEX_DIR, parts, meta)
    scratch = Path(tempfile.mkdtemp(prefix="aiprof-index-"))
    try:
        rows = _write_index(scratch, parts, meta)
        out.upload(scratch, INDEX_DIR, last=INDEX_META)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def _write_index(d: Path, parts: dict[str, list[pa.Table]], meta: dict[str, Any]) -> dict[str, int]:
    d.mkdir(parents=True, exist_ok=True)
    rows: dict[str, int] = {}
    for name, schema in SCHEMAS.items():
        tables = [t for t in parts.get(name, []) if t.num_rows]
        table = pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()
        table = table.sort_by([("rank", "ascending")])
        tmp = d / f".{name}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        tmp.replace(d / f"{name}.parquet")
        rows[name] = table.num_rows
    meta = dict(meta, tables=rows)
    (d / INDEX_META).write_text(json.dumps(meta, indent=1, default=str))
    return rows


def read_meta(out: str | os.PathLike[str]) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(locate(out).read_text(INDEX_DIR, INDEX_META))
    return meta


def attach(profile: Profile, out: str | os.PathLike[str]) -> None:
    """Make the index of ``out`` the profile's cluster views (read in place, lazily)."""
    loc = locate(out)
    register(profile.con, loc)
    for name, view in VIEWS.items():
        f = loc.join(INDEX_DIR, f"{name}.parquet").replace("'", "''")
        profile.con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM read_parquet('{f}')")
    profile._memo[_MEMO] = str(out)


def register(con: duckdb.DuckDBPyConnection, loc: Location) -> None:
    """Let a DuckDB connection read ``loc``'s fsspec filesystem (once per connection)."""
    if loc.fs is None:
        return
    name = loc.fs.protocol if isinstance(loc.fs.protocol, str) else loc.fs.protocol[0]
    if name not in con.list_filesystems():
        con.register_filesystem(loc.fs)


def from_index(profile: Profile) -> bool:
    """Were the cluster views attached from an index on disk (not computed here)?"""
    return isinstance(profile._memo.get(_MEMO), str)


#: The views of a job's distributed page (the API's ``/profiles/{pid}/cluster``), in order.
PAGE_VIEWS = ("stragglers", "collectives", "links", "exposed_comm")


def job_facts(profile: Profile) -> dict[str, Any]:
    """What the job is: from_index (read from OUT/cluster, else computed from the events),
    ranks, world_size, failed ranks, mixed, warnings and the index's table sizes."""
    ensure(profile)
    out = profile._memo.get(_MEMO)
    if isinstance(out, str):
        meta = read_meta(out)
        return {
            "from_index": True,
            "ranks": list(meta.get("ranks") or []),
            "world_size": meta.get("world_size"),
            "failed": list(meta.get("failed") or []),
            "mixed": bool(meta.get("mixed")),
            "warnings": list(meta.get("warnings") or []),
            "tables": dict(meta.get("tables") or {}),
        }
    ranks = sorted({int(r) for m in profile.metas for r in m.get("ranks") or [0]})
    tables = {
        name: int(profile.sql(f"SELECT count(*) FROM {view}").column(0)[0].as_py()) for name, view in VIEWS.items()
    }
    return {
        "from_index": False,
        "ranks": ranks,
        "world_size": None,
        "failed": [],
        "mixed": False,
        "warnings": [],
        "tables": tables,
    }


def ensure(profile: Profile) -> None:
    """Give ``profile`` the cluster views: its index, else summaries computed from its events."""
    if _MEMO in profile._memo:
        return
    tables = summarize(profile)
    for name, view in VIEWS.items():
        profile.con.register(f"_{view}_arrow", tables[name])
        profile.con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM _{view}_arrow")
    profile._memo[_MEMO] = True


def job_meta(profile: Profile) -> dict[str, Any] | None:
    """What the API's profile metadata reads of a job opened from its index (never its
    events): span_ns (the timeline's span on the job's axis, from each rank's first_ns and
    last_ns), steps (one row per rank and step window: rank, step, start_us, duration_us,
    as the steps view gives them) and devices_used (each rank's records). None for a
    profile without an index, or one written before the index kept spans."""
    out = profile._memo.get(_MEMO)
    if not isinstance(out, str):
        return None
    cols = {str(r[0]) for r in profile.con.execute(f"DESCRIBE SELECT * FROM {VIEWS['ranks']}").fetchall()}
    if not {"first_ns", "last_ns", "devices_used"} <= cols:
        return None
    origin = profile.time_origin_ns
    lo, hi = profile.con.execute(f"SELECT min(first_ns), max(last_ns) FROM {VIEWS['ranks']}").fetchall()[0]
    steps = profile.sql(
        f"SELECT rank::BIGINT AS rank, step::BIGINT AS step, (start_ns - {origin}) / 1000.0 AS start_us, "
        f"dur_ns / 1000.0 AS duration_us FROM {VIEWS['steps']} ORDER BY rank, step NULLS FIRST"
    ).to_pylist()
    used = [
        d
        for (text,) in profile.con.execute(f"SELECT devices_used FROM {VIEWS['ranks']} ORDER BY rank").fetchall()
        for d in json.loads(text or "[]")
    ]
    span = [0, 0] if lo is None else [int(lo) - origin, int(hi) - origin]
    return {"span_ns": span, "steps": steps, "devices_used": used}


def upgrade_job(out: str | os.PathLike[str]) -> list[str]:
    """Bring a job folder an older aiprof wrote up to this one, in place (``aiprof import
    JOB``): each rank without this version's derived tables gets them (whatever its
    size, as a parallel import now gives them), and an index whose ranks table lacks
    first_ns, last_ns and devices_used gets them, from each rank's profile. Returns what
    was upgraded (empty: up to date)."""
    from ..analysis.derived import upgrade
    from .opened import RANK_GLOB, _rank_key

    loc = locate(out)
    if loc.local is None:
        raise AiprofError(f"{out}: a job folder is upgraded in place on a local disk")
    folders = [
        f for f in sorted(loc.local.glob(RANK_GLOB), key=lambda p: _rank_key(p.name)) if (f / "profile.json").is_file()
    ]
    done = [f"{f.name} (derived tables)" for f in folders if upgrade(f)]
    if not upgrade_ranks(loc.local, folders):
        return done
    return [*done, f"{INDEX_DIR}/ranks.parquet (span and devices per rank)"]


def upgrade_ranks(out: Path, folders: list[Path]) -> bool:
    """The index's ranks table with first_ns, last_ns and devices_used, recomputed from
    the rank profiles ``folders`` of the job ``out`` when it lacks them; False when not."""
    from ..store import open_profile
    from .summary import ranks_table

    d = out / INDEX_DIR
    if {"first_ns", "last_ns", "devices_used"} <= set(pq.read_schema(d / "ranks.parquet").names):
        return False
    parts = []
    for folder in folders:
        with open_profile(folder) as prof:
            parts.append(ranks_table(prof))
    table = pa.concat_tables(parts).cast(SCHEMAS["ranks"]) if parts else SCHEMAS["ranks"].empty_table()
    tmp = d / ".ranks.parquet.tmp"
    pq.write_table(table.sort_by([("rank", "ascending")]), tmp, compression="zstd")
    tmp.replace(d / "ranks.parquet")
    return True
