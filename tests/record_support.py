"""What the tests of real recordings share: running ``aiprof record`` on a job written
to a file, a free port for a gloo job, and the head of a two-rank job that starts its
own ranks (as a launcher would)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

from aiprof.record.job.collectors.base import Clock

PY = sys.executable

#: The start of a two-rank job: run without RANK it starts both ranks of itself (the
#: port is its first argument) and exits with the worst status; each rank joins the
#: gloo group (one torch thread) and goes on with ``rank`` set.
TWO_RANKS = """
import os, subprocess, sys, time
if "RANK" not in os.environ:
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
    ps = [subprocess.Popen([sys.executable, __file__], env={**env, "RANK": str(r)}) for r in range(2)]
    sys.exit(max(p.wait() for p in ps))
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
"""

#: Job text: ``spin(ms)``, a busy wait (the job must ``import time``).
SPIN = """
def spin(ms):
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1000:
        pass
"""


def slow_backward(ms: int) -> str:
    """Job text: ``Spin``, an autograd function whose backward spins ``ms`` (uses SPIN)."""
    return f"""
class Spin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x
    @staticmethod
    def backward(ctx, g):
        spin({ms})
        return g
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record_run(
    folder: Path, source: str, *options: str, args: tuple[str, ...] = (), name: str = "job", out: str = "out"
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``aiprof record -o folder/OUT OPTIONS -- python folder/NAME.py ARGS`` of ``source``:
    the output folder and the finished run (it must succeed)."""
    script = folder / f"{name}.py"
    script.write_text(source)
    dest = folder / out
    rec = subprocess.run(
        [PY, "-m", "aiprof", "record", "-o", str(dest), *options, "--", PY, str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rec.returncode == 0, rec.stderr
    return dest, rec


def record(
    folder: Path, source: str, *options: str, args: tuple[str, ...] = (), name: str = "job", out: str = "out"
) -> Path:
    """:func:`record_run`'s output folder."""
    return record_run(folder, source, *options, args=args, name=name, out=out)[0]


class FakeClock(Clock):
    """A :class:`~aiprof.record.job.collectors.base.Clock` that stands still until the
    test advances it: a poller on it ticks exactly as often as the time given says."""

    def __init__(self) -> None:
        self.t = 0.0
        self._cv = threading.Condition()
        self._asleep: dict[int, float] = {}  # thread -> until when it sleeps
        self._busy: set[int] = set()  # threads woken and ticking

    def now(self) -> float:
        with self._cv:
            return self.t

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        me = threading.get_ident()
        with self._cv:
            self._busy.discard(me)
            self._asleep[me] = self.t + seconds
            self._cv.notify_all()
            while self.t < self._asleep[me] and not stop.is_set():
                self._cv.wait(0.05)
            del self._asleep[me]
            if not stop.is_set():
                self._busy.add(me)  # until it sleeps again: its tick runs
            self._cv.notify_all()
            return stop.is_set()

    def advance(self, seconds: float, step: float = 0.001) -> None:
        """Let ``seconds`` pass in ``step``s, each once every poller due has woken,
        ticked and gone back to sleep."""
        with self._cv:
            # A poller just started may not sleep yet: wait for one (5 s at the most).
            self._cv.wait_for(lambda: bool(self._asleep), timeout=5)
            end = self.t + seconds
            while self.t < end - 1e-12:
                self.t = min(end, self.t + step)
                self._cv.notify_all()
                while self._busy or any(until <= self.t for until in self._asleep.values()):
                    self._cv.wait(0.05)
