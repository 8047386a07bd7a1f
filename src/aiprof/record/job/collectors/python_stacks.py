"""Python stack sampler: every thread, at a fixed rate, into the samples/frames tables.

This is the sampler inside the job: for the Profiler API used without ``aiprof
record``, and under ``aiprof record`` when a process's stacks cannot be read from
outside (python_outside.py, which ``aiprof record`` prefers: it takes nothing from
the job, where this thread must take the job's GIL at every tick).

Built as a daemon thread reading ``sys._current_frames()``: it sees every thread
(a signal timer only interrupts the main thread), costs nothing between ticks, and
its cost per tick is one walk per thread stack. bench/overhead.py measures it against
the plain run and against py-spy.

Cost per sample (the job pays it: the sampler holds the GIL) is one walk of each
stack reading only ``f_code`` and ``f_lasti`` (``f_lineno`` decodes the line table at
every frame), into a flat tuple that a dict maps to the stack's interned leaf node:
a stack seen again costs that walk, one hash and one lookup. New stacks are interned
into a tree keyed by (parent node, code, instruction offset), each new node with its
line (``f_lineno``, once). Names and files are resolved when the run is dumped, where
nodes on the same line merge, so the raw frames are (parent, function, file, line).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from .base import SHOWN_AS, Collector, PollingThread, fail

DEFAULT_RATE_HZ = 100.0


#: Switch interval while a sample is taken: long enough that no other thread runs
#: before the sampler lets the GIL go (a walk takes tens of microseconds).
GIL_HOLD_S = 1.0

#: Distinct stacks remembered by the fast path; past that it starts afresh (the tree,
#: and so the data, is not affected: only new stacks cost an intern walk again).
STACK_CACHE_SIZE = 20_000


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
        self._stacks: dict[tuple[int, ...], int] = {}
        """(id(code), f_lasti, ...) from leaf to root -> raw leaf node (the fast path)."""
        self._nodes: dict[tuple[int, int, int], int] = {}
        """(parent raw node, id(code), f_lasti) -> raw node."""
        self._node_list: list[tuple[int, CodeType, int, int]] = []
        """Raw node -> (parent, code, f_lasti, line); holds the code objects, so ids stay
        theirs. The line is read once, when the node is new (``f_lineno`` decodes the
        line table in C: far cheaper than decoding it in Python when the run is dumped,
        which the job would pay at exit)."""
        self.ts: list[int] = []
        self.tids: list[int] = []
        self.stacks: list[int] = []
        """Raw leaf node of each sample."""
        self._native: dict[int, int] = {}
        self._names: dict[int, str] = {}
        self._poller: PollingThread | None = None
        # Resolved at dump, incrementally: raw node -> frame (same line: same frame).
        self._canon: list[int] = []
        self._frame_ids: dict[tuple[int, CodeType, int], int] = {}
        self._frames: list[tuple[int, int, str, str, int]] = []
        self._dumped_stacks: list[int] = []

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
        if not self.recording:
            return
        # Keep the GIL for the whole walk, and until no frame object of another
        # thread is held: a thread that ran in the middle of it could pop the frames
        # being walked. Reading frames that another thread changes under the reader is
        # a known crash of in-process samplers on 3.11 (gh-99110; ddtrace and sentry
        # reports); the job crashed once in bench/overhead.py with --sample-inside.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(GIL_HOLD_S)
        try:
            frames = sys._current_frames()
            self.sample(frames, self._clock())
            del frames
        finally:
            sys.setswitchinterval(switch)

    def sample(self, frames: dict[int, FrameType], now_ns: int) -> None:
        """Record one sample of each thread in ``frames`` (thread ident -> top frame)."""
        own = self.own_threads
        known = self._stacks
        native = self._native
        for ident, frame in frames.items():
            if ident in own:
                continue
            walk: list[int] = []
            push = walk.append
            f: FrameType | None = frame
            while f is not None:
                push(id(f.f_code))
                push(f.f_lasti)
                f = f.f_back
            key = tuple(walk)
            leaf = known.get(key)
            if leaf is None:
                leaf = self._intern(frame)
                if len(known) >= STACK_CACHE_SIZE:
                    known.clear()
                known[key] = leaf
            tid = native.get(ident)
            if tid is None:
                tid = self._learn_thread(ident)
            self.ts.append(now_ns)
            self.tids.append(tid)
            self.stacks.append(leaf)

    def _intern(self, frame: FrameType) -> int:
        chain: list[FrameType] = []
        f: FrameType | None = frame
        while f is not None:
            chain.append(f)
            f = f.f_back
        nodes = self._nodes
        parent = -1
        for f in reversed(chain):
            code, lasti = f.f_code, f.f_lasti
            shown = SHOWN_AS.get(code)
            if shown is not None:
                code, lasti = shown, -1
            key = (parent, id(code), lasti)
            node = nodes.get(key)
            if node is None:
                node = len(self._node_list)
                self._node_list.append((parent, code, lasti, 0 if shown is not None else f.f_lineno or 0))
                nodes[key] = node
            parent = node
        return parent

    def _learn_thread(self, ident: int) -> int:
        # Threads started outside the threading module keep their ident as tid.
        for t in threading.enumerate():
            if t.ident is not None and t.native_id is not None:
                self._native[t.ident] = t.native_id
                self._names[t.native_id] = t.name
        return self._native.setdefault(ident, ident)

    def _resolve(self, upto: int) -> None:
        """Give raw nodes below ``upto`` their frame (new ones only)."""
        canon, frame_ids, frames = self._canon, self._frame_ids, self._frames
        for parent, code, _lasti, line in self._node_list[len(canon) : upto]:
            up = canon[parent] if parent >= 0 else -1
            key = (up, code, line)
            fid = frame_ids.get(key)
            if fid is None:
                fid = frame_ids[key] = len(frames)
                frames.append((fid, up, getattr(code, "co_qualname", code.co_name), code.co_filename, line))
            canon.append(fid)

    def dump(self, raw_dir: str) -> dict[str, Any]:
        # May run while sampling goes on (a checkpoint): take the samples first, cut to
        # whole rows; every node they use was interned before they were appended.
        n = min(len(self.ts), len(self.tids), len(self.stacks))
        self._resolve(len(self._node_list))
        done, canon = len(self._dumped_stacks), self._canon
        if n > done:
            self._dumped_stacks.extend([canon[s] for s in self.stacks[done:n]])
        return {
            "rate_hz": self.rate_hz,
            "ts": self.ts[:n],
            "tid": self.tids[:n],
            "stack": self._dumped_stacks[:n],
            "frames": list(self._frames),
            "thread_names": {str(k): v for k, v in list(self._names.items())},
        }
