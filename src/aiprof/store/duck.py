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
"""

from __future__ import annotations

import itertools
import os
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

MEMORY_ENV = "AIPROF_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "1GiB"

_serial = itertools.count()


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
