"""The step thread's CPU time and its wait for a CPU, read where a step may begin or end.

Linux keeps, per thread, ``/proc/thread-self/schedstat``: the time the thread ran on
a CPU, the time it was ready to run but waited in a run queue (other processes had
the CPUs), and how often it was scheduled in. Its run-queue wait is exact (it grows
when the thread is scheduled in); its CPU time is only brought up to date at a
scheduler tick (4 ms at 250 Hz), a switch or a wake-up on its CPU.

:meth:`ThreadClock.read` gives both, read so that reading them does not move the job's
time around:

- the schedstat file is read with ``pread`` called through ctypes' ``PyDLL``, which
  keeps the GIL (``os.pread`` hands it over: a thread waiting for it, a DataLoader's
  pin-memory thread or the job's own, would then run first, up to the 5 ms switch
  interval, inside the call being timed; a precaution: no effect of it was measured on
  the trial's job);
- the exact CPU time (``time.thread_time_ns()``) is read only where the caller asks
  (``exact=True``: an explicit step mark, the user's own boundary between steps, and
  the start of the recording). That clock makes the kernel account the running
  thread's time on the spot, and when the thread has used its time slice while another
  process waits for its CPU, the kernel switches it out right there instead of at its
  next tick (4 ms at most later): the machine's load lands inside the call that reads
  it. Read in the optimizer's step hook, with two DataLoader workers on 2 cores, the
  job's own median ``opt.step()`` went from 0.26 ms to 2.6 ms recorded, and the Python
  samples blamed the optimizer; read at a DataLoader ``__next__``, the waits showed as
  ``ThreadClock.read`` (other Python) under load. At the anchors of unmarked steps
  (``exact=False``: a ``__next__``'s start, the optimizer's step, the end of
  ``backward()``) the CPU time is schedstat's: a step's is within a tick, the sum of
  many exact to two, and the run-queue wait stays exact.

Elsewhere than Linux (macOS, Windows, a kernel without schedstat) :meth:`ThreadClock.read`
gives None and steps carry no such figures.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

SCHEDSTAT = "/proc/thread-self/schedstat"
#: Bytes read of the schedstat file (three decimal numbers and a newline).
READ_SIZE = 128

Reader = Callable[[int], bytes]
"""fd -> the first :data:`READ_SIZE` bytes of the file, read at offset 0."""


def _gil_keeping_pread() -> Callable[[], Reader]:
    """A factory of per-thread readers that call libc's ``pread`` with the GIL held
    (ctypes ``PyDLL``); ``os.pread`` where ctypes cannot give one."""
    try:
        import ctypes

        libc = ctypes.PyDLL(None, use_errno=True)
        pread = libc.pread
        pread.restype = ctypes.c_ssize_t
        pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
    except (ImportError, OSError, AttributeError):
        return lambda: lambda fd: os.pread(fd, READ_SIZE, 0)
    string_at, get_errno = ctypes.string_at, ctypes.get_errno

    def make() -> Reader:
        # One buffer per thread: another thread may run between the call and string_at.
        buf = ctypes.create_string_buffer(READ_SIZE)
        addr = ctypes.addressof(buf)

        def read(fd: int) -> bytes:
            n = pread(fd, addr, READ_SIZE, 0)
            if n < 0:
                raise OSError(get_errno(), "pread failed")
            return string_at(addr, n)

        read.buffer = buf  # type: ignore[attr-defined]  # kept alive with the reader
        return read

    return make


class ThreadClock:
    """(cpu_ns, runq_ns) of the calling thread, from a schedstat file it keeps open."""

    __slots__ = ("_make", "_ok", "_readers")

    def __init__(self) -> None:
        self._readers: dict[int, tuple[int, Reader]] = {}
        self._make: Callable[[], Reader] | None = None
        self._ok = True

    def read(self, exact: bool = True) -> tuple[int, int] | None:
        """The calling thread's CPU time and run-queue wait (ns), or None where not
        available. ``exact``: the CPU time from ``time.thread_time_ns()`` (see the
        module doc for where that must not be read), else schedstat's, within a tick."""
        if not self._ok:
            return None
        tid = threading.get_native_id()
        got = self._readers.get(tid)
        try:
            if got is None:
                if self._make is None:
                    self._make = _gil_keeping_pread()
                # /proc/thread-self resolves at open: the fd stays this thread's.
                got = self._readers[tid] = (os.open(SCHEDSTAT, os.O_RDONLY), self._make())
            fields = got[1](got[0]).split()
            runq = int(fields[1])
            return (time.thread_time_ns() if exact else int(fields[0])), runq
        except (OSError, ValueError, IndexError):
            self._ok = False
            return None

    def close(self) -> None:
        for fd, _ in self._readers.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._readers.clear()
