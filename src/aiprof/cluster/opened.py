"""Open a many-rank job folder (``OUT`` of a parallel import) as one profile.

The store's tables are views over the ranks' Parquet files by glob (DuckDB reads a
file only when a query needs it, so opening 1,024 ranks costs little); each rank's
``ts`` is shifted onto the job's time axis as :func:`aiprof.store.open_profile` does.
The cluster index is attached, so the cluster views and the ``ranks`` view read it.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from ..errors import AiprofError
from ..store import SCHEMAS, TABLES, Profile
from ..store.reader import _TIMED, _read_meta, _sql_str
from .index import attach, has_index

RANK_GLOB = "rank*.aiprof"


def is_job(path: str | Path) -> bool:
    return Path(path).is_dir() and has_index(path)


def open_job(out: str | Path) -> Profile:
    out = Path(out).resolve()
    if not has_index(out):
        raise AiprofError(f"{out}: no cluster index (cluster/index.json)")
    folders = sorted((p for p in out.glob(RANK_GLOB) if (p / "profile.json").is_file()), key=_rank_key)
    if not folders:
        raise AiprofError(f"{out}: a cluster index but no rank profiles ({RANK_GLOB})")
    metas = [_read_meta(f) for f in folders]
    origin = min(int(m.get("time_origin_ns", 0)) for m in metas)
    con = duckdb.connect(":memory:")
    con.execute("SET threads TO 2")
    counts: dict[str, int] = {}
    for table in TABLES:
        files = [
            (i, f / f"{table}.parquet", m)
            for i, (f, m) in enumerate(zip(folders, metas))
            if (f / f"{table}.parquet").is_file()
        ]
        if not files:
            con.register(f"empty_{table}", SCHEMAS[table].empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT *, 0::INTEGER AS profile FROM empty_{table}")
            continue
        counts[table] = sum(int(m.get("tables", {}).get(table, 0)) for _, _, m in files)
        shifts = ", ".join(
            f"({_sql_str(str(p))}, {i}, {int(m.get('time_origin_ns', 0)) - origin})" for i, p, m in files
        )
        con.execute(f"CREATE TABLE _files_{table} (filename VARCHAR, profile INTEGER, shift BIGINT)")
        con.execute(f"INSERT INTO _files_{table} VALUES {shifts}")
        glob = _sql_str(str(out / RANK_GLOB / f"{table}.parquet"))
        ts = "REPLACE (e.ts + s.shift AS ts) " if table in _TIMED else ""
        con.execute(
            f"CREATE VIEW {table} AS SELECT e.* EXCLUDE (filename) {ts}, s.profile "
            f"FROM read_parquet({glob}, filename = true) e JOIN _files_{table} s ON s.filename = e.filename"
        )
    prof = Profile(paths=folders, metas=metas, con=con, tables=counts)
    attach(prof, out)
    return prof


def _rank_key(p: Path) -> tuple[int, str]:
    digits = "".join(ch for ch in p.name if ch.isdigit())
    return (int(digits) if digits else 1 << 30, p.name)
