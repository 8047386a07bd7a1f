"""Where rank tasks run: a local Dask cluster, or an existing one.

An existing cluster is named as Nsight Systems' recipes do: ``--scheduler ADDRESS``
(or ``AIPROF_DASK_SCHEDULER``), or a scheduler file (``--scheduler-file`` or
``AIPROF_DASK_SCHEDULER_FILE``, what ``dask scheduler --scheduler-file`` writes).
Otherwise a ``LocalCluster`` of ``workers`` processes (one thread each) is started
and torn down around the job. The workers of an existing cluster need aiprof
installed (``pip install aiprof[cluster]``) and must see the input and output paths.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import AiprofError

ENV_SCHEDULER = "AIPROF_DASK_SCHEDULER"
ENV_SCHEDULER_FILE = "AIPROF_DASK_SCHEDULER_FILE"


@dataclass(frozen=True)
class Where:
    """A resolved choice of cluster, for messages and index.json."""

    kind: str  # "local" or "existing"
    address: str | None
    workers: int


def resolve(workers: int | None, scheduler: str | None, scheduler_file: str | None) -> Where:
    scheduler = scheduler or os.environ.get(ENV_SCHEDULER) or None
    scheduler_file = scheduler_file or os.environ.get(ENV_SCHEDULER_FILE) or None
    if scheduler and scheduler_file:
        raise AiprofError("give a scheduler address or a scheduler file, not both")
    if scheduler or scheduler_file:
        return Where("existing", scheduler or f"file:{scheduler_file}", workers or 0)
    n = workers or os.cpu_count() or 1
    if n < 1:
        raise AiprofError("--workers must be at least 1")
    return Where("local", None, n)


def _dask() -> Any:
    try:
        import distributed
    except ImportError:
        raise AiprofError(
            "importing many ranks in parallel needs Dask: pip install 'aiprof[cluster]' (dask, distributed)"
        ) from None
    return distributed


@contextmanager
def client(where: Where) -> Iterator[Any]:
    """A ``distributed.Client`` on the chosen cluster (a local one is shut down after)."""
    distributed = _dask()
    for name in ("distributed", "tornado", "bokeh"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if where.kind == "existing":
        addr = where.address or ""
        try:
            c = (
                distributed.Client(scheduler_file=addr[5:], timeout="30s")
                if addr.startswith("file:")
                else distributed.Client(addr, timeout="30s")
            )
        except (OSError, TimeoutError, ValueError) as e:
            raise AiprofError(f"cannot reach the Dask scheduler {addr}: {e}") from None
        try:
            yield c
        finally:
            c.close()
        return
    cluster = distributed.LocalCluster(
        n_workers=where.workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@dataclass
class Outcome:
    item: Any
    value: Any = None
    error: str | None = None


def map_tasks(
    c: Any,
    fn: Callable[..., Any],
    items: Sequence[Any],
    args: tuple[Any, ...],
    on_change: Callable[[int, int, int], None] = lambda _d, _f, _r: None,
    on_result: Callable[[Outcome], None] = lambda _o: None,
) -> list[Outcome]:
    """Run ``fn(item, *args)`` for each item as one task; a failed task is an outcome with
    its error, never the end of the job. ``on_change(done, failed, running)``."""
    distributed = _dask()
    slots = max(sum(c.nthreads().values()), 1)
    futures = {c.submit(fn, item, *args, key=f"aiprof-import-{i}", pure=False): i for i, item in enumerate(items)}
    out: list[Outcome | None] = [None] * len(items)
    done = failed = 0
    for fut in distributed.as_completed(futures):
        i = futures[fut]
        try:
            res = Outcome(items[i], value=fut.result())
            done += 1
        except Exception as e:  # a task's own failure: reported, the others go on
            res = Outcome(items[i], error=f"{type(e).__name__}: {e}".splitlines()[0])
            failed += 1
        fut.release()
        out[i] = res
        on_result(res)
        on_change(done, failed, min(slots, len(items) - done - failed))
    return [o for o in out if o is not None]
