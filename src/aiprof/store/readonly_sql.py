"""SQL over a profile's tables that cannot change anything: the web UI's query page.

Safety comes from the connection, not from reading the text of the query:
- the profile's views (the same ones :func:`aiprof.store.open_profile` makes, read from
  its connection) are written to a DuckDB file of their own, which is then opened
  ``read_only``: no CREATE, DROP, INSERT or UPDATE can succeed;
- on that connection only the profile's folders may be read (``allowed_directories``),
  external access is then switched off (no COPY ... TO, ATTACH, INSTALL/LOAD, no other
  file) and the configuration is locked (no SET or PRAGMA can undo that);
- each request is one statement, checked by DuckDB's own parser to be a SELECT (or an
  EXPLAIN of one); anything else is refused before it runs, with its type named;
- a query runs at most ``timeout_s`` (the connection is interrupted) and returns at
  most ``max_rows`` rows (``truncated`` says there were more).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ..errors import AiprofError
from . import duck
from .reader import Profile
from .schema import SCHEMAS, TABLES

#: Statement types a query may be (DuckDB's parser says which a text is).
ALLOWED = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
#: Defaults and bounds of the two limits.
DEFAULT_ROWS = 1000
MAX_ROWS = 10000
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 60.0


class Refused(AiprofError):
    """A statement that is not a read-only query (or more than one statement)."""


class TimedOut(AiprofError):
    """The query ran past its time limit and was interrupted."""


@dataclass
class SqlAnswer:
    table: pa.Table
    types: list[str]
    """DuckDB's type of each column (BIGINT, VARCHAR...)."""
    truncated: bool
    elapsed_ms: float


class ReadOnlySql:
    """A read-only DuckDB connection over ``profile``'s tables (see the module doc)."""

    def __init__(self, profile: Profile) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="aiprof-sql-"))
        db = self._dir / "views.duckdb"
        try:
            with duck.connect(str(db)) as w:
                for table in TABLES:
                    # The empty tables a profile lacks are Arrow tables registered on
                    # its connection; here they are (empty) tables of the file.
                    empty = SCHEMAS[table].empty_table()  # noqa: F841 (read by DuckDB by name)
                    w.execute(f"CREATE TABLE empty_{table} AS SELECT * FROM empty")
                # The profile's own catalog: its connection may be a session on the
                # process's shared database, whose other catalogs are other profiles'.
                views = profile.con.execute(
                    "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary"
                    " AND database_name = current_database() ORDER BY view_name"
                ).fetchall()
                # The profile's tables only: analysers add views of their own on the
                # connection (over Arrow data registered there, which a file lacks).
                kept = [sql for name, sql in views if name in SCHEMAS]
                _copy_tables_read_by(profile.con, w, kept)
                for sql in kept:
                    w.execute(sql)
            self.con = duck.connect(str(db), read_only=True)
            # The views name the folders as they were opened; a link may resolve elsewhere.
            dirs = sorted(
                {str(p) for p in profile.paths}
                | {str(p.resolve()) for p in profile.paths}
                | set(_folders_read_by(kept))
            )
            self.con.execute("SET allowed_directories = ?", [dirs])
            self.con.execute("SET enable_external_access = false")
            self.con.execute("SET lock_configuration = true")
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.tables = dict(profile.tables)

    def schema(self) -> list[dict[str, Any]]:
        """Each table: name, rows, columns (name, type)."""
        out = []
        cur = self.con.cursor()
        try:
            for table in TABLES:
                cols = cur.execute(f"DESCRIBE {table}").fetchall()
                out.append(
                    {
                        "name": table,
                        "rows": int(self.tables.get(table, 0)),
                        "columns": [{"name": c[0], "type": c[1]} for c in cols],
                    }
                )
        finally:
            cur.close()
        return out

    def query(self, text: str, max_rows: int = DEFAULT_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> SqlAnswer:
        """Run one SELECT; at most ``max_rows`` rows, interrupted after ``timeout_s``."""
        cur = self.con.cursor()
        try:
            check(cur, text)
            done = threading.Event()
            timed_out = threading.Event()

            def stop() -> None:
                if not done.is_set():
                    timed_out.set()
                    cur.interrupt()

            timer = threading.Timer(timeout_s, stop)
            t0 = time.perf_counter()
            timer.start()
            try:
                rel = cur.sql(text)
                types = [str(t) for t in rel.types] if rel is not None else []
                table = rel.limit(max_rows + 1).to_arrow_table() if rel is not None else pa.table({})
            except duckdb.Error as e:
                if timed_out.is_set():
                    raise TimedOut(
                        f"the query ran past its time limit ({timeout_s:g} s) and was stopped; "
                        "narrow it (a WHERE on ts, a LIMIT) or raise the limit"
                    ) from None
                raise AiprofError(f"query failed: {str(e).splitlines()[0]}") from None
            finally:
                done.set()
                timer.cancel()
            elapsed = 1000.0 * (time.perf_counter() - t0)
        finally:
            cur.close()
        truncated = table.num_rows > max_rows
        return SqlAnswer(table.slice(0, max_rows) if truncated else table, types, truncated, elapsed)

    def close(self) -> None:
        self.con.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _copy_tables_read_by(src: duckdb.DuckDBPyConnection, dst: duckdb.DuckDBPyConnection, sqls: list[str]) -> None:
    """Copy into ``dst`` the tables of ``src`` that the views ``sqls`` read (a job folder's
    views join each rank's file to its clock shift in a small table of the connection)."""
    names = [
        r[0]
        for r in src.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT temporary AND database_name = current_database()"
        ).fetchall()
    ]
    for name in names:
        if any(re.search(rf"\b{re.escape(name)}\b", sql) for sql in sqls):
            rows = src.table(name).arrow()  # noqa: F841 (read by DuckDB by name)
            dst.execute(f'CREATE TABLE "{name}" AS SELECT * FROM rows')


def _folders_read_by(sqls: list[str]) -> list[str]:
    """The folders the views' ``read_parquet`` globs list (a job folder, for its
    ``rank*.aiprof/events.parquet``): each glob's path up to the folder of its first wildcard."""
    globs = [p for sql in sqls for p in re.findall(r"read_parquet\('([^']*[*?[][^']*)'", sql)]
    return [os.path.dirname(re.split(r"[*?[]", p, maxsplit=1)[0]) for p in globs]


def check(con: duckdb.DuckDBPyConnection, text: str) -> None:
    """Refuse anything but exactly one SELECT (or EXPLAIN) statement."""
    try:
        stmts = con.extract_statements(text)
    except duckdb.Error as e:
        raise AiprofError(f"query failed: {str(e).splitlines()[0]}") from None
    if not stmts:
        raise Refused("refused: the query is empty")
    if len(stmts) > 1:
        raise Refused(f"refused: one statement at a time ({len(stmts)} were given)")
    kind = stmts[0].type
    if kind not in ALLOWED:
        name = str(kind).rsplit(".", 1)[-1]
        raise Refused(f"refused: {name} statements are not allowed here; the profile is read-only (SELECT only)")


__all__ = ["DEFAULT_ROWS", "DEFAULT_TIMEOUT_S", "MAX_ROWS", "MAX_TIMEOUT_S", "ReadOnlySql", "Refused", "TimedOut"]
