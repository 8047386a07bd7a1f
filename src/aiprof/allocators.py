"""The memory allocators of aiprof's own processes (the CLI's, and its Dask workers').

Arrow and DuckDB each bring an allocator, chosen when their library loads, from the
environment. With their defaults, an import holds on to memory it has freed: Arrow's
mimalloc keeps freed pages in its arenas, and DuckDB's jemalloc keeps freed pages for
ten seconds in each of its arenas, so the peak RSS of importing a trace is mostly
memory that is free. On df_index_resolver repeated 8 times (342.7 MB of JSON,
2 cores), the import's peak RSS was 2.10-2.15x the JSON with the defaults, 1.61-1.68x
with Arrow on jemalloc, and 1.29-1.37x with DuckDB's jemalloc also returning freed pages
at once (``dirty_decay_ms:0``) and 16 MiB parts (importers/kineto/columnar.py).

Arrow's jemalloc costs nothing measurable, so every aiprof command has it (:data:`LEAN`).
DuckDB's immediate return costs system CPU (pages given back and faulted in again):
about 1 s in an import's 10-11 s, but 25% of ``aiprof advise``'s time on
df_index_resolver, whose queries allocate and free much more than they keep; so only a
process that imports a trace has it (:data:`IMPORTING`).

:func:`use_lean` sets them in ``os.environ`` before either library is loaded, unless the
user set them; :func:`job_environment` takes back out what it set, so that a job that
``aiprof record`` runs keeps the allocators it would have had without aiprof. A library
user who calls aiprof's functions keeps their own process's allocators (call
:func:`use_lean` first, before pyarrow and duckdb are imported, to have these).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Mapping, MutableMapping

log = logging.getLogger(__name__)

#: Environment variable -> value, read when the library loads: every aiprof process.
LEAN: dict[str, str] = {
    # Arrow's pool: jemalloc (bundled in pyarrow's x86-64 Linux wheels) returns freed pages on
    # its own; mimalloc, the default, kept ~130 MB after the parse of the trace above.
    "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
}
#: And for a process that imports traces (``aiprof import``, its Dask workers).
IMPORTING: dict[str, str] = {
    # DuckDB's jemalloc (https://duckdb.org/docs/current/internals/jemalloc): freed pages
    # go back to the system at once instead of after 10 s.
    "DUCKDB_JE_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0",
}
_LIBRARIES = ("pyarrow", "duckdb")

_set_here: dict[str, str] = {}
"""What :func:`use_lean` put in this process's environment (the user's values are not here)."""


def use_lean(environ: MutableMapping[str, str] = os.environ, *, importing: bool = False) -> list[str]:
    """Set :data:`LEAN` (and :data:`IMPORTING` for a process that imports traces) in
    ``environ`` where the user did not; the names it set.

    Nothing is set on a platform other than Linux (DuckDB's jemalloc is Linux's, and
    pyarrow's wheels bundle jemalloc on x86-64 Linux only: Arrow warns on every start
    when asked for a pool it lacks), or once pyarrow or duckdb is loaded (their
    allocator is chosen by then)."""
    if not sys.platform.startswith("linux"):
        return []
    loaded = [m for m in _LIBRARIES if m in sys.modules]
    if loaded:
        log.debug("allocators left as they are: %s already loaded", ", ".join(loaded))
        return []
    wanted = {**LEAN, **IMPORTING} if importing else dict(LEAN)
    if platform.machine() not in ("x86_64", "AMD64"):
        wanted.pop("ARROW_DEFAULT_MEMORY_POOL")
    names = []
    for name, value in wanted.items():
        if name not in environ:
            environ[name] = value
            _set_here[name] = value
            names.append(name)
    return names


def job_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without what :func:`use_lean` set (a value the user set stays)."""
    return {k: v for k, v in env.items() if not (k in _set_here and _set_here[k] == v)}


def describe() -> str:
    """The allocators this process has (for ``aiprof -vv``)."""
    import pyarrow as pa

    duck = os.environ.get("DUCKDB_JE_MALLOC_CONF") or "defaults"
    return f"Arrow's memory pool {pa.default_memory_pool().backend_name}, DuckDB's jemalloc {duck}"


__all__ = ["IMPORTING", "LEAN", "describe", "job_environment", "use_lean"]
