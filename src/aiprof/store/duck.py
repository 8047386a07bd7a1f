"""The store's DuckDB connections, each with a bounded memory and its own spill folder.

DuckDB's own default lets one database take 80% of the machine's memory and spills to
``.tmp`` in the current folder. A profiler runs beside the job it profiles and opens one
database per profile, so every connection aiprof opens here is given:

- ``memory_limit``: :data:`MEMORY_ENV` (DuckDB's syntax, ``"4GB"``, ``"75%"``), by default
  :data:`DEFAULT_MEMORY_LIMIT`; a query that needs more spills its sorts, joins and
  aggregates to disk instead of growing the process (a 10 GB trace imports and every
  view answers within it: bench/huge_import.py);
- ``temp_directory``: a folder of its own under the system's temporary folder, made by
  DuckDB when it first spills and removed when the connection closes (two processes,
  or two connections in one, never share spill files);
- ``threads``: 2 unless told (the views' queries are small; the import asks for every core).

Opening a DuckDB database costs 25-55 ms (DuckDB 2.0, on this project's 2-core machine),
more than a small profile's whole view. A profile opened for analysis
(``store/reader.py``) and a query's filter (``analysis/query.py``) therefore take a
*session* instead: a cursor on one in-memory database the process shares (made on first
use, with the limits above; one per process, made again in a forked child, and again if
``AIPROF_MEMORY_LIMIT`` changed), with a catalog of its own attached (about 1 ms). Each
session's views and tables, the user's own included, live in its catalog and go with it:
two profiles open in one process never see each other's ``events``. The memory limit is
then the process's, shared by its open profiles, and the spill folder is the shared
database's, removed when the process exits.
"""

from __future__ import annotations

import atexit
import itertools
import os
import tempfile
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

MEMORY_ENV = "AIPROF_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "1GiB"

_serial = itertools.count()
_sessions = itertools.count()
_shared_lock = threading.Lock()
#: (pid, memory limit) -> the process's shared database. A database inherited from a
#: parent through fork() is never used by the child (DuckDB's threads do not survive a
#: fork) and never closed there (its destructor would wait for them): it stays here.
_shared: dict[tuple[int, str], duckdb.DuckDBPyConnection] = {}


def memory_limit() -> str:
    """The memory limit of each connection (DuckDB's syntax)."""
    return os.environ.get(MEMORY_ENV, "").strip() or DEFAULT_MEMORY_LIMIT


def spill_folder() -> str:
    """A folder name no other connection uses (not made: DuckDB makes it when it
    spills, and then removes it on close)."""
    return os.path.join(tempfile.gettempdir(), f"aiprof-duckdb-{os.getpid()}-{next(_serial)}")


def connect(
    database: str = ":memory:", *, threads: int | None = 2, read_only: bool = False, spill: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the store's limits (see the module's docstring);
    ``threads=None`` leaves DuckDB's default (every core); ``spill``: a spill folder the
    caller owns, instead of one of its own."""
    import duckdb

    from ..errors import AiprofError

    config: dict[str, str | int] = {"temp_directory": spill or spill_folder()}
    if threads is not None:
        config["threads"] = threads
    try:
        con = duckdb.connect(database, read_only=read_only, config={**config, "memory_limit": memory_limit()})
    except (duckdb.InvalidInputException, duckdb.ParserException) as e:
        if MEMORY_ENV not in os.environ:
            raise
        raise AiprofError(
            f"{MEMORY_ENV}={os.environ[MEMORY_ENV]!r}: not a memory size ({str(e).splitlines()[0]})"
        ) from None
    return con


def _database() -> duckdb.DuckDBPyConnection:
    key = (os.getpid(), memory_limit())
    with _shared_lock:
        db = _shared.get(key)
        if db is None:
            db = _shared[key] = connect()
            if len(_shared) == 1:
                atexit.register(_close_shared)
        return db


def _close_shared() -> None:
    for (pid, _), db in list(_shared.items()):
        if pid == os.getpid():
            try:
                db.close()  # removes its spill folder
            except Exception:
                pass


def cursor() -> duckdb.DuckDBPyConnection:
    """A connection to the process's shared database (see the module's docstring), for
    a short query on registered Arrow tables; close it when done."""
    return _database().cursor()


def session() -> tuple[duckdb.DuckDBPyConnection, str]:
    """A connection to the shared database with a catalog of its own, made the default:
    its ``CREATE VIEW`` and ``CREATE TABLE`` land there and nowhere else. Returns the
    connection and the catalog's name, for :func:`end_session`."""
    con = cursor()
    name = f"aiprof_s{os.getpid()}_{next(_sessions)}"
    con.execute(f"ATTACH ':memory:' AS {name}")
    con.execute(f"USE {name}")
    return con, name


def end_session(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Drop the session's catalog with everything in it, and close the connection."""
    import duckdb

    try:
        con.execute("USE memory")
        con.execute(f"DETACH {name}")
    except duckdb.Error:
        pass  # closed already, or the database is going: its catalog goes with it
    finally:
        con.close()
