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
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import AiprofError

ENV_SCHEDULER = "AIPROF_DASK_SCHEDULER"
ENV_SCHEDULER_FILE = "AIPROF_DASK_SCHEDULER_FILE"
#: How the LocalCluster starts its worker processes (multiprocessing start method).
ENV_START = "AIPROF_DASK_START"


#: Dask settings of the LocalCluster aiprof starts (an existing cluster keeps its own).
#: Its workers run short CPU-bound tasks: Dask's ``MALLOC_TRIM_THRESHOLD_=65536`` (memory
#: handed back to the OS at every free, for long-lived workers) made each rank's import
#: cost 40-60% more CPU than in one process, and the statistical profiler and the
#: monitors sampling every few ms cost more CPU the longer a loaded machine makes a task
#: last. ``None`` unsets an environment variable for the worker processes.
LOCAL_CONFIG: dict[str, Any] = {
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.gil.enabled": False,
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
}


_PRE_SPAWN = "distributed.nanny.pre-spawn-environ."


def local_config() -> dict[str, Any]:
    """LOCAL_CONFIG, and workers forked from a server process that has imported Dask and
    its packages once (``forkserver``, which Dask supports) instead of each spawned
    worker importing them, where the platform has it (``AIPROF_DASK_START=spawn`` keeps
    Dask's default)."""
    import multiprocessing

    cfg = dict(LOCAL_CONFIG)
    start = os.environ.get(ENV_START, "forkserver")
    if start in multiprocessing.get_all_start_methods():
        cfg["distributed.worker.multiprocessing-method"] = start
    return cfg


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
    cfg = local_config()
    forkserver = where.kind == "local" and cfg.get("distributed.worker.multiprocessing-method") == "forkserver"
    if forkserver:
        _start_forkserver(cfg)  # its imports run while this thread imports Dask's distributed
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
    import dask

    left = {k: os.environ.pop(k) for k in _left_by_dask(cfg)}  # unset while ours start
    try:
        with dask.config.set(cfg):
            cluster = distributed.LocalCluster(
                n_workers=where.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                silence_logs=logging.ERROR,
            )
    finally:
        os.environ.update(left)
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()
        if forkserver:
            _stop_forkserver()


class Starting:
    """A :func:`client` started in a thread of its own, so that the caller's work before
    its first task (reading every rank file's header to rank it) runs while the local
    cluster's fork server imports its modules and forks the workers; on a 2-core machine
    the two use different cores. :meth:`get` waits for the client; :meth:`stop_soon`
    shuts it down in the background (the index is written meanwhile); :meth:`close`
    waits for either, and is safe to call more than once."""

    def __init__(self, where: Where) -> None:
        self.where = where
        self._cm = client(where)
        self._client: Any = None
        self._error: BaseException | None = None
        self._stopper: threading.Thread | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._start, name="aiprof-dask-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self._client = self._cm.__enter__()
        except BaseException as e:  # handed to the caller by get()
            self._error = e

    def get(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._client

    def _stop(self) -> None:
        self._thread.join()
        if self._error is None:
            self._cm.__exit__(None, None, None)

    def stop_soon(self) -> None:
        if self._stopper is None and not self._closed:
            self._stopper = threading.Thread(target=self._stop, name="aiprof-dask-stop", daemon=True)
            self._stopper.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._stopper is not None:
            self._stopper.join()
        else:
            self._stop()


#: Imported by the fork server: what every rank task needs, besides Dask's worker.
PRELOAD = "aiprof.cluster.preload"


def _start_forkserver(cfg: dict[str, Any]) -> None:
    """Start the fork server that the local workers are forked from now, importing
    Dask's worker and :data:`PRELOAD` (about 0.8 s of CPU), rather than when Dask spawns
    its first worker, after this process has imported ``distributed`` and started the
    scheduler: the two then run on different cores. It starts with the variables Dask's
    nanny would have set for it (``distributed.nanny.pre-spawn-environ`` under ``cfg``,
    where a value the user exported wins; None unsets Dask's own), which the libraries
    it imports read once (the BLAS threads, malloc's trim threshold, the hash seed).
    Nothing is done when a fork server already runs in this process."""
    import multiprocessing
    from multiprocessing import forkserver

    try:
        import dask
    except ImportError:
        return  # the caller says what to install
    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is not None:
        return
    with dask.config.set(cfg):
        spec = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    env: dict[str, str | None] = {k: os.environ.get(k, str(v)) for k, v in spec.items() if v is not None}
    env |= dict.fromkeys(_left_by_dask(cfg))
    if env.get("PYTHONHASHSEED", os.environ.get("PYTHONHASHSEED")) in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"  # as the nanny: one hash seed for every worker
    saved = {k: os.environ.get(k) for k in env}
    multiprocessing.get_context("forkserver").set_forkserver_preload(["distributed", PRELOAD])
    try:
        _set_environ(env)
        forkserver.ensure_running()
    finally:
        _set_environ(saved)


def _left_by_dask(cfg: dict[str, Any]) -> list[str]:
    """The variables ``cfg`` unsets that hold Dask's own value in this process's
    environment. Dask's nanny writes its pre-spawn variables there and leaves them: after
    any other LocalCluster in this process they would reach our workers anyway. One a
    user exported (another value) is theirs, and kept."""
    import dask

    dask_env = dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}
    unset = (key.rsplit(".", 1)[1] for key, v in cfg.items() if key.startswith(_PRE_SPAWN) and v is None)
    return [k for k in unset if k in os.environ and k in dask_env and os.environ[k] == str(dask_env[k])]


def _set_environ(values: dict[str, str | None]) -> None:
    """Set each variable of ``values`` in this process's environment (None: unset it)."""
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _stop_forkserver() -> None:
    """End the fork server once its workers are gone, and wait for it: no process
    outlives the import, and its CPU time (its workers' too) counts as this process's
    children's, as spawned workers' does."""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if callable(stop):
        stop()


@dataclass
class Outcome:
    item: Any
    value: Any = None
    error: str | None = None


#: At most this many items in one task (a task per item costs the scheduler, the client
#: and the worker a round trip each; a few per task keep the progress and the load
#: balance fine-grained).
MAX_PER_TASK = 4
#: Tasks per worker thread at least, before items are grouped.
TASKS_PER_SLOT = 8


def per_task(n_items: int, slots: int) -> int:
    """How many items one task runs: 1 up to TASKS_PER_SLOT tasks per slot, then more,
    up to MAX_PER_TASK."""
    return max(1, min(MAX_PER_TASK, n_items // max(1, slots * TASKS_PER_SLOT)))


def task_groups(n_items: int, slots: int, most: int) -> list[list[int]]:
    """The items of each task, in order: ``most`` per task, fewer near the end (a task
    holds at most what is left shared between twice the slots), so that the last
    tasks are single items and the slots finish together instead of one waiting on
    another's last group."""
    out: list[list[int]] = []
    i = 0
    while i < n_items:
        k = max(1, min(most, -(-(n_items - i) // (2 * slots))))
        out.append(list(range(i, i + k)))
        i += k
    return out


def run_items(fn: Callable[..., Any], items: Sequence[Any], *args: Any) -> list[tuple[bool, Any]]:
    """One task: ``fn(item, *args)`` for each item, each failure kept as its one-line
    error (the others still run)."""
    out: list[tuple[bool, Any]] = []
    for item in items:
        try:
            out.append((True, fn(item, *args)))
        except Exception as e:  # an item's own failure: reported, the others go on
            out.append((False, _error_line(e)))
    return out


def _error_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


def map_tasks(
    c: Any,
    fn: Callable[..., Any],
    items: Sequence[Any],
    args: tuple[Any, ...],
    on_change: Callable[[int, int, int], None] = lambda _d, _f, _r: None,
    on_result: Callable[[Outcome], None] = lambda _o: None,
    group: int | None = None,
) -> list[Outcome]:
    """Run ``fn(item, *args)`` for each item, ``group`` items per task (default:
    :func:`per_task`, fewer in the last tasks, :func:`task_groups`); a failed item is an
    outcome with its error, never the end of the job (a task that fails whole, its
    worker lost, fails each of its items). ``on_change(done, failed, running)``."""
    distributed = _dask()
    slots = max(sum(c.nthreads().values()), 1)
    if group:
        chunks = [list(range(i, min(i + group, len(items)))) for i in range(0, len(items), group)]
    else:
        chunks = task_groups(len(items), slots, per_task(len(items), slots))
    futures = {
        c.submit(run_items, fn, [items[i] for i in idx], *args, key=f"aiprof-import-{j}", pure=False): idx
        for j, idx in enumerate(chunks)
    }
    out: list[Outcome | None] = [None] * len(items)
    done = failed = 0
    for fut in distributed.as_completed(futures):
        idx = futures[fut]
        try:
            results: list[tuple[bool, Any]] = fut.result()
        except Exception as e:  # the task itself failed (a lost worker): each item did
            results = [(False, _error_line(e))] * len(idx)
        fut.release()
        for i, (ok, value) in zip(idx, results, strict=True):
            res = Outcome(items[i], value=value) if ok else Outcome(items[i], error=value)
            if ok:
                done += 1
            else:
                failed += 1
            out[i] = res
            on_result(res)
        on_change(done, failed, min(slots, len(items) - done - failed))
    return [o for o in out if o is not None]
