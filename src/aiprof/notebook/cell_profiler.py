"""The profiler of one notebook cell: the recording API, sampling the kernel from a thread.

The kernel is the process, so the Python stacks are sampled by a thread in it (the
in-job sampler, collectors/python_stacks.py). The kernel's own threads (ipykernel's
IOPub, heartbeat, control and shell-channel threads, the servers aiprof started in the
kernel and their worker threads) are not the cell's work: they are left out, told by the
module their thread class or target comes from, once per thread. The cell's thread and
every other thread are sampled.
"""

from __future__ import annotations

import threading
from types import FrameType

from ..record.job.api import Profiler
from ..record.job.collectors.base import Collector
from ..record.job.collectors.python_stacks import PythonSampler

#: Top-level packages whose threads belong to the kernel or to aiprof's servers in it,
#: not to the user's code (anyio: the servers' request workers, and ipykernel 7's).
KERNEL_MODULES = frozenset(
    {"ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "comm", "anyio", "uvicorn", "aiprof"}
)
#: Names of the threads aiprof starts (its servers, its collectors).
AIPROF_THREAD_PREFIX = "aiprof-"


def is_kernel_thread(t: threading.Thread) -> bool:
    """True for a thread of the kernel itself (never the main thread)."""
    if t is threading.main_thread():
        return False
    if t.name.startswith(AIPROF_THREAD_PREFIX):
        return True
    target = getattr(t, "_target", None)
    owner = getattr(target, "__module__", None) if target is not None else None
    return str(owner or type(t).__module__ or "").split(".", 1)[0] in KERNEL_MODULES


def _threads() -> dict[int, threading.Thread]:
    active = threading.__dict__.get("_active")  # ident -> Thread, what current_thread() reads
    if isinstance(active, dict):
        return active
    return {t.ident: t for t in threading.enumerate() if t.ident is not None}


class CellSampler(PythonSampler):
    """The Python sampler, leaving out the kernel's own threads."""

    def __init__(self, rate_hz: float) -> None:
        super().__init__(rate_hz)
        self._kernel: dict[threading.Thread, bool] = {}
        """Thread -> is the kernel's (keyed by the object: a new thread may reuse an ident)."""

    def sample(self, frames: dict[int, FrameType], now_ns: int) -> None:
        threads = _threads()
        kernel = self._kernel
        keep: dict[int, FrameType] = {}
        for ident, f in frames.items():
            t = threads.get(ident)
            if t is not None:
                skip = kernel.get(t)
                if skip is None:
                    skip = kernel[t] = is_kernel_thread(t)
                if skip:
                    continue
            keep[ident] = f
        super().sample(keep, now_ns)


class CellProfiler(Profiler):
    """:class:`~aiprof.record.job.api.Profiler` with the cell's sampler."""

    #: A refused output is named as the magic's options name it.
    _output_names = ("-o", "--force")

    def _build(self) -> list[Collector]:
        out = super()._build()
        if not any(type(c) is PythonSampler for c in out):
            return out  # no Python sampling, or stacks read from outside (under aiprof record)
        self.python_sampler = "in the kernel (its own threads left out)"
        return [CellSampler(self.rate) if type(c) is PythonSampler else c for c in out]


__all__ = ["CellProfiler", "CellSampler", "is_kernel_thread"]
