"""The profiler of one notebook cell: the recording API, sampling the kernel from a thread.

The kernel is the process, so the Python stacks are sampled by a thread in it (the
in-job sampler, collectors/python_stacks.py). The kernel's own threads (ipykernel's
IOPub, heartbeat, control and history threads, the servers aiprof started for earlier
cells) are alive before the cell starts and are not the cell's work: they are left out.
Every thread the cell starts, and the cell's own thread, are sampled.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from types import FrameType
from typing import Any

from ..record.api import Profiler
from ..record.collectors.base import Collector
from ..record.collectors.python_stacks import PythonSampler

#: Modules whose threads belong to the kernel, not to the user's code.
KERNEL_MODULES = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "comm", "aiprof", "uvicorn")
#: Names of the threads aiprof starts (its servers, its collectors).
AIPROF_THREAD_PREFIX = "aiprof-"


def _owner(t: threading.Thread) -> str:
    target = getattr(t, "_target", None)
    mod = getattr(target, "__module__", None) if target is not None else None
    return str(mod or type(t).__module__ or "")


def kernel_threads() -> set[int]:
    """Idents of the threads of the kernel itself (not the main thread)."""
    out: set[int] = set()
    main = threading.main_thread()
    for t in threading.enumerate():
        if t is main or t.ident is None:
            continue
        owner = _owner(t)
        if t.name.startswith(AIPROF_THREAD_PREFIX) or owner.split(".", 1)[0] in KERNEL_MODULES:
            out.add(t.ident)
    return out


class CellSampler(PythonSampler):
    """The Python sampler, leaving out the threads given (the kernel's own)."""

    def __init__(self, rate_hz: float, skip: Collection[int]) -> None:
        super().__init__(rate_hz)
        self.skip = frozenset(skip)

    def sample(self, frames: dict[int, FrameType], now_ns: int) -> None:
        skip = self.skip
        super().sample({k: f for k, f in frames.items() if k not in skip}, now_ns)


class CellProfiler(Profiler):
    """:class:`~aiprof.record.api.Profiler` with the cell's sampler."""

    def __init__(self, *args: Any, skip_threads: Collection[int] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.skip_threads = frozenset(skip_threads)

    def _build(self) -> list[Collector]:
        out = super()._build()
        if not any(type(c) is PythonSampler for c in out):
            return out  # no Python sampling, or stacks read from outside (under aiprof record)
        self.python_sampler = f"in the kernel ({len(self.skip_threads)} kernel thread(s) left out)"
        return [CellSampler(self.rate, self.skip_threads) if type(c) is PythonSampler else c for c in out]
