"""Open a many-rank job folder (``OUT`` of a parallel import) as one profile.

The store's tables are views over the ranks' Parquet files by glob (DuckDB reads a
file only when a query needs it, so opening 1,024 ranks costs little); each rank's
``ts`` is shifted onto the job's time axis as :func:`aiprof.store.open_profile` does.
The cluster index is attached, so the cluster views and the ``ranks`` view read it.
OUT may be an fsspec URL (:mod:`.storage`): DuckDB then reads through fsspec.
"""

from __future__ import annotations

import json
import os
import posixpath
from pathlib import Path
from typing import Any

from ..errors import AiprofError
from ..store import SCHEMAS, TABLES, Profile, duck
from ..store.reader import _TIMED, _sql_str, check_meta
from ..store.writer import META_FILE
from .index import attach, has_index, register
from .storage import Location, is_url, locate

RANK_GLOB = "rank*.aiprof"


def is_job(path: str | os.PathLike[str]) -> bool:
    if is_url(path):
        return has_index(path)
    return Path(path).is_dir() and has_index(path)


def open_job(out: str | os.PathLike[str]) -> Profile:
    loc = locate(out if is_url(out) else Path(out).resolve())
    if not has_index(loc.url):
        raise AiprofError(f"{loc.url}: no cluster index (cluster/index.json)")
    names = sorted({rel.split("/")[0] for rel in loc.glob(f"{RANK_GLOB}/{META_FILE}")}, key=_rank_key)
    if not names:
        raise AiprofError(f"{loc.url}: a cluster index but no rank profiles ({RANK_GLOB})")
    metas = [_meta(loc, n) for n in names]
    origin = min(int(m.get("time_origin_ns", 0)) for m in metas)
    con = duck.connect()
    register(con, loc)
    counts: dict[str, int] = {}
    for table in TABLES:
        present = {rel.split("/")[0] for rel in loc.glob(f"{RANK_GLOB}/{table}.parquet")}
        files = [(i, n, m) for i, (n, m) in enumerate(zip(names, metas)) if n in present]
        if not files:
            con.register(f"empty_{table}", SCHEMAS[table].empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT *, 0::INTEGER AS profile FROM empty_{table}")
            continue
        counts[table] = sum(int(m.get("tables", {}).get(table, 0)) for _, _, m in files)
        shifts = ", ".join(f"({_sql_str(n)}, {i}, {int(m.get('time_origin_ns', 0)) - origin})" for i, n, m in files)
        con.execute(f"CREATE TABLE _files_{table} (folder VARCHAR, profile INTEGER, shift BIGINT)")
        con.execute(f"INSERT INTO _files_{table} VALUES {shifts}")
        glob = _sql_str(loc.join(RANK_GLOB, f"{table}.parquet"))
        ts = "REPLACE (e.ts + s.shift AS ts) " if table in _TIMED else ""
        # Matched on the rank folder's name: a path and a URL spell the rest differently.
        folder = r"regexp_extract(e.filename, '([^/\\]+)[/\\][^/\\]+$', 1)"
        con.execute(
            f"CREATE VIEW {table} AS SELECT e.* EXCLUDE (filename) {ts}, s.profile "
            f"FROM read_parquet({glob}, filename = true) e JOIN _files_{table} s ON s.folder = {folder}"
        )
    prof = Profile(paths=[Path(loc.join(n)) for n in names], metas=metas, con=con, tables=counts)
    attach(prof, loc.url)
    return prof


def _meta(loc: Location, name: str) -> dict[str, Any]:
    where = loc.join(name)
    try:
        meta: Any = json.loads(loc.read_text(name, META_FILE))
    except (OSError, ValueError) as e:
        raise AiprofError(f"{where}: unreadable {META_FILE}: {e}") from None
    return check_meta(meta, where)


def _rank_key(name: str) -> tuple[int, str]:
    digits = "".join(ch for ch in posixpath.basename(name) if ch.isdigit())
    return (int(digits) if digits else 1 << 30, name)
