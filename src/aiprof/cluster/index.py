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
