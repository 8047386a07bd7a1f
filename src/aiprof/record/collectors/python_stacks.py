"""Python stack sampler: every thread, at a fixed rate, into the samples/frames tables.

Built as a daemon thread reading ``sys._current_frames()``: it sees every thread
(a signal timer only interrupts the main thread), costs nothing between ticks, and
its cost per tick is one walk per thread stack. bench/overhead.py measures it against
the plain run and against py-spy.

Frames are interned into a tree keyed by (parent node, code object, line), so a stack
seen again costs dictionary lookups only and a sample is one integer (its leaf node).
File and function names are read from the code objects once, when the run is dumped.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from .base import Collector, PollingThread, fail

DEFAULT_RATE_HZ = 100.0


class PythonSampler(Collector):
    """Samples the Python stack of every thread ``rate_hz`` times a second."""

    name = "python"
    checkpoint = True

    def __init__(self, rate_hz: float = DEFAULT_RATE_HZ, clock: Callable[[], int] = time.monotonic_ns) -> None:
        super().__init__()
        if rate_hz <= 0:
            raise ValueError(f"sampling rate must be > 0 Hz, got {rate_hz}")
        self.rate_hz = rate_hz
        self._clock = clock
        self.recording = True
        """False outside the schedule's active windows: ticks take no sample."""
        self._nodes: dict[tuple[int, CodeType, int], int] = {}
        self.ts: list[int] = []
        self.tids: list[int] = []
        self.stacks: list[int] = []
        self._native: dict[int, int] = {}
        self._names: dict[int, str] = {}
        self._poller: PollingThread | None = None

    def start(self) -> None:
        self._poller = PollingThread(
            "aiprof-python-sampler",
            1.0 / self.rate_hz,
            self._tick,
            lambda e: fail(self, e, "sampling"),
            self.own_threads,
        )
        self._poller.start()

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.stop()
            self._poller = None

    def set_recording(self, on: bool) -> None:
        self.recording = on

    def _tick(self) -> None:
        if self.recording:
            self.sample(sys._current_frames(), self._clock())

    def sample(self, frames: dict[int, FrameType], now_ns: int) -> None:
        """Record one sample of each thread in ``frames`` (thread ident -> top frame)."""
        own = self.own_threads
        nodes = self._nodes
        native = self._native
        for ident, frame in frames.items():
            if ident in own:
                continue
            chain: list[tuple[CodeType, int]] = []
            f: FrameType | None = frame
            while f is not None:
                chain.append((f.f_code, f.f_lineno or 0))
                f = f.f_back
            parent = -1
            for code, line in reversed(chain):
                key = (parent, code, line)
                node = nodes.get(key)
                if node is None:
                    node = len(nodes)
                    nodes[key] = node
                parent = node
            tid = native.get(ident)
            if tid is None:
                tid = self._learn_thread(ident)
            self.ts.append(now_ns)
            self.tids.append(tid)
            self.stacks.append(parent)

    def _learn_thread(self, ident: int) -> int:
        # Threads started outside the threading module keep their ident as tid.
        for t in threading.enumerate():
            if t.ident is not None and t.native_id is not None:
                self._native[t.ident] = t.native_id
                self._names[t.native_id] = t.name
        return self._native.setdefault(ident, ident)

    def dump(self, raw_dir: Path) -> dict[str, Any]:
        # May run while sampling goes on (a checkpoint): take the samples first, cut to
        # whole rows, then the frame table, which then holds every frame they use.
        n = min(len(self.ts), len(self.tids), len(self.stacks))
        ts, tids, stacks = self.ts[:n], self.tids[:n], self.stacks[:n]
        frames: list[tuple[int, int, str, str, int]] = []
        for (parent, code, line), node in list(self._nodes.items()):
            func = getattr(code, "co_qualname", code.co_name)
            frames.append((node, parent, func, code.co_filename, line))
        return {
            "rate_hz": self.rate_hz,
            "ts": ts,
            "tid": tids,
            "stack": stacks,
            "frames": frames,
            "thread_names": {str(k): v for k, v in list(self._names.items())},
        }
