"""What an unmodified training loop does once per iteration, recorded cheaply.

A script that never calls ``prof.step()`` still calls, once per iteration, some of:
``optimizer.step()`` (the optimizer's post hook), ``loss.backward()``
(``torch.autograd.backward``, which ``Tensor.backward`` calls) and the DataLoader
iterator's ``__next__``. Each call is kept as an *anchor* (kind, start, end, thread)
in the controller's marks: one ``time.monotonic_ns()`` pair and a list append, about
a microsecond per call. The finalizer (:mod:`aiprof.record.step_finder`) turns them
into step spans after the job, so nothing is decided inside it. A ``__next__`` that
finds the loader exhausted (``StopIteration``: the loop asked for one more batch and
ended) is kept as its own kind: where the loop's last iteration ended.

At each point where a found step may begin or end (a ``__next__``'s start, the
optimizer's step, the end of ``backward()``), the thread's CPU time and run-queue wait
are read too (the controller's ``anchor_clock``, record.job.sched: a few µs), so a
found step carries them as a marked one does.

At the first training anchor the frame that runs the loop is looked up once (the
first frame outside torch and aiprof, and the innermost loop of its code that holds
the call: a backward jump in the bytecode), so the profile can say where its steps
come from and the finalizer can find where the first iteration began.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from .._log import log

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

#: Anchor kinds, strongest evidence of one training iteration first.
OPTIMIZER = "optimizer"
BACKWARD = "backward"
NEXT = "dataloader_next"
#: A ``__next__`` that raised StopIteration: the loader ran out (not an iteration's start).
EXHAUSTED = "dataloader_end"

_torch_dir = ""
_aiprof_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Sink = Callable[[str, int, int, int], None]
"""(kind, start ns, end ns, native tid)."""

_sink: Sink | None = None
_loop_sink: Callable[[dict[str, Any]], None] | None = None
ClockSink = Callable[[str, int], None]
"""(anchor kind, monotonic ns): read the thread's clock there (Controller.anchor_clock)."""
_clock: ClockSink | None = None
_installed: set[str] = set()


def connect(
    sink: Sink | None, loop_sink: Callable[[dict[str, Any]], None] | None = None, clock: ClockSink | None = None
) -> None:
    """Anchors go to ``sink`` (None: nowhere) from now on, their clock readings to ``clock``."""
    global _sink, _loop_sink, _clock
    _sink = sink
    _loop_sink = loop_sink
    _clock = clock


def _read_clock(kind: str, ts: int) -> None:
    c = _clock
    if c is not None:
        c(kind, ts)


def record(kind: str, start: int, end: int) -> None:
    s = _sink
    if s is not None:
        s(kind, start, end, threading.get_native_id())


def install() -> None:
    """Wrap backward and the DataLoader iterator (once; only what is importable)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    global _torch_dir
    _torch_dir = os.path.dirname(os.path.abspath(torch.__file__ or ""))
    for module, wrap, what in _WRAPS:
        if module in _installed or module not in sys.modules:
            continue
        _installed.add(module)
        try:
            wrap(sys.modules[module])
        except Exception as e:
            log.warning("could not watch %s: %s", what, e)


def _wrap_backward(autograd: Any) -> None:
    orig = autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        if _sink is None:
            return orig(*args, **kwargs)
        t0 = time.monotonic_ns()
        try:
            return orig(*args, **kwargs)
        finally:
            t1 = time.monotonic_ns()
            record(BACKWARD, t0, t1)
            _read_clock(BACKWARD, t1)
            if _loop_sink is not None:
                find_loop(sys._getframe(1))

    backward.__wrapped__ = orig  # type: ignore[attr-defined]
    backward.__doc__ = orig.__doc__
    autograd.backward = backward


def _wrap_next(dl: Any) -> None:
    cls = dl._BaseDataLoaderIter
    orig = cls.__next__

    def __next__(self: Any) -> Any:
        if _sink is None:
            return orig(self)
        t0 = time.monotonic_ns()
        _read_clock(NEXT, t0)  # where an iteration may begin: before the loader's work
        kind = NEXT
        try:
            return orig(self)
        except StopIteration:
            kind = EXHAUSTED
            raise
        finally:
            record(kind, t0, time.monotonic_ns())

    __next__.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.__next__ = __next__


def optimizer_step() -> int | None:
    """Called by the optimizer post hook (the end of ``optimizer.step()``); returns the
    anchor's time (None when not recording)."""
    if _sink is None:
        return None
    t = time.monotonic_ns()
    record(OPTIMIZER, t, t)
    _read_clock(OPTIMIZER, t)
    if _loop_sink is not None:
        find_loop(sys._getframe(1))
    return t


def _wrap_collectives(dist: Any) -> None:
    if getattr(dist, "is_available", lambda: False)():
        from . import collectives

        collectives.install(dist)


_WRAPS: list[tuple[str, Callable[[Any], None], str]] = [
    ("torch.autograd", _wrap_backward, "backward()"),
    ("torch.utils.data.dataloader", _wrap_next, "the DataLoader"),
    ("torch.distributed", _wrap_collectives, "torch.distributed's collectives"),
]
"""(module, wrapper, what it watches), applied by :func:`install` once each."""


def _foreign(path: str) -> bool:
    return path.startswith("<") or (bool(_torch_dir) and path.startswith(_torch_dir)) or path.startswith(_aiprof_dir)


def find_loop(frame: FrameType | None) -> None:
    """Look up, once, the loop that runs the training iteration calling from ``frame``."""
    global _loop_sink
    sink = _loop_sink
    if sink is None:
        return
    _loop_sink = None
    try:
        info = loop_of(frame)
    except Exception as e:  # never break the job for a description
        log.debug("loop lookup failed: %s", e)
        info = None
    if info is not None:
        sink(info)


def loop_of(frame: FrameType | None) -> dict[str, Any] | None:
    """The innermost loop holding the call in the first frame outside torch/aiprof
    (or in its callers, up to a few frames): file, function, call line, header line,
    last line of the body."""
    f = frame
    while f is not None and _foreign(os.path.abspath(f.f_code.co_filename)):
        f = f.f_back
    for _ in range(4):
        if f is None:
            return None
        found = _enclosing_loop(f)
        if found is not None:
            head, last = found
            return {
                "file": f.f_code.co_filename,
                "function": f.f_code.co_name,
                "call_line": f.f_lineno,
                "header_line": head,
                "end_line": last,
            }
        f = f.f_back
    return None


def _enclosing_loop(f: FrameType) -> tuple[int, int] | None:
    """(header line, last body line) of the innermost loop holding the frame's current
    instruction: a backward jump whose target is at or before it and which is after it."""
    import dis

    at = f.f_lasti
    best: tuple[int, int, int, int] | None = None
    line = f.f_code.co_firstlineno
    lines: dict[int, int] = {}
    for ins in dis.get_instructions(f.f_code):
        if ins.starts_line is not None:
            line = ins.starts_line
        lines[ins.offset] = line
    for ins in dis.get_instructions(f.f_code):
        if "JUMP" in ins.opname and isinstance(ins.argval, int) and ins.argval < ins.offset:
            lo, hi = ins.argval, ins.offset
            if lo <= at <= hi and (best is None or hi - lo < best[1] - best[0]):
                best = (lo, hi, lines.get(lo, line), lines.get(hi, line))
    if best is None:
        return None
    head, last = best[2], best[3]
    return head, max(head, last)
