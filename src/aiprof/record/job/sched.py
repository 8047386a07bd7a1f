"""The step-marking thread's CPU time and its wait for a CPU, read at each step mark.

Linux keeps, per thread, ``/proc/thread-self/schedstat``: the time the thread ran on
a CPU, the time it was ready to run but waited in a run queue (other processes had
the CPUs), and how often it was scheduled in. Its run-queue wait is exact (it grows
when the thread is scheduled in); its CPU time is only brought up to date at a
scheduler tick (4 ms) or a switch, so the CPU time comes from
``time.thread_time_ns()`` instead. The controller reads both at every step mark (a
``pread`` on a file kept open per thread and a clock read, about 5 µs on a VM), so
each marked step gets its CPU time and its run-queue wait. ``aiprof diff`` uses them to
take the machine's load out of step time (analysis.regression, the steady step).

Elsewhere (macOS, Windows, a kernel without schedstat) :meth:`ThreadClock.read`
gives None and steps carry no such figures.
"""

from __future__ import annotations

import os
import threading
import time

SCHEDSTAT = "/proc/thread-self/schedstat"


class ThreadClock:
    """(cpu_ns, runq_ns) of the calling thread, from a schedstat file it keeps open."""

    __slots__ = ("_fds", "_ok")

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}
        self._ok = True

    def read(self) -> tuple[int, int] | None:
        if not self._ok:
            return None
        tid = threading.get_native_id()
        fd = self._fds.get(tid)
        try:
            if fd is None:
                # /proc/thread-self resolves at open: the fd stays this thread's.
                fd = self._fds[tid] = os.open(SCHEDSTAT, os.O_RDONLY)
            runq = int(os.pread(fd, 96, 0).split()[1])
            return time.thread_time_ns(), runq
        except (OSError, ValueError):
            self._ok = False
            return None

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
