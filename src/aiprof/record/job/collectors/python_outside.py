"""The job's side of Python stacks sampled from outside (aiprof.record.launcher.outside_stacks).

Under ``aiprof record``, the stacks of every recorded process of the job (the job,
or each rank of a launcher) are read from ``aiprof record``'s own process
(aiprof.record.launcher.pystate), so it runs no sampler thread and never hands its GIL to
one. The recorded process only:

1. measures its interpreter's layout at start and sends it to ``aiprof record``
   through the Unix socket named by :data:`ENV_STACKS` (:func:`connect`); if the
   layout cannot be measured, or ``aiprof record`` cannot read the job's memory, the
   job samples itself as before (:class:`~.python_stacks.PythonSampler`);
2. keeps, as the ``python`` collector, what only it knows: when the schedule
   recorded, which threads are aiprof's own, thread names, and the frames shown
   under another name (``SHOWN_AS``). ``aiprof record`` merges its samples with
   these into the raw ``python`` data, in the in-process sampler's format.
"""

from __future__ import annotations

import os
import threading
import time

from ...environment import ANSWER_TIMEOUT_S, ENV_STACKS, read_line
from .base import SHOWN_AS, Collector

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any


class OutsideSampler(Collector):
    """Stands for the stack sampler of ``aiprof record``; holds the job's side."""

    name = "python"
    checkpoint = True

    def __init__(self, rate_hz: float) -> None:
        super().__init__()
        self.rate_hz = rate_hz
        self.windows: list[tuple[int, bool]] = []
        """(monotonic ns, recording) at each change of the schedule, and at stop."""
        self._names: dict[int, str] = {}

    def set_recording(self, on: bool) -> None:
        self.windows.append((time.monotonic_ns(), on))

    def stop(self) -> None:
        self.windows.append((time.monotonic_ns(), False))
        self._learn_names()

    def _learn_names(self) -> None:
        for t in threading.enumerate():
            if t.native_id is not None:
                self._names[t.native_id] = t.name

    def dump(self, raw_dir: str) -> dict[str, Any]:
        self._learn_names()
        shown = [[c.co_qualname, c.co_filename, s.co_name] for c, s in list(SHOWN_AS.items())]
        return {
            "rate_hz": self.rate_hz,
            "ts": [],
            "tid": [],
            "stack": [],
            "frames": [],
            "thread_names": {str(k): v for k, v in self._names.items()},
            "outside": {"windows": list(self.windows), "own": sorted(self.own_threads), "shown_as": shown},
        }


def connect(rate_hz: float, *, stacks: bool = True, telemetry: bool = False) -> tuple[OutsideSampler | None, str, bool]:
    """Offer this process to ``aiprof record``: its layout (``stacks``), and its
    telemetry to poll (``telemetry``). Returns the stack collector to use if the
    layout was taken (else None) and why not, and whether the telemetry was taken."""
    name = os.environ.get(ENV_STACKS)
    if not name:
        return None, "aiprof record did not offer to read them (--sample-inside)", False
    # _socket, not socket: the job should not pay for importing socket.py.
    import _socket

    from .. import wire

    msg: dict[str, Any] = {"pid": os.getpid(), "telemetry": telemetry}
    if stacks:
        from ...launcher.pystate import LayoutError, calibrate

        try:
            msg["layout"] = calibrate()
        except (LayoutError, OSError) as e:
            msg["error"] = f"interpreter layout: {e}"
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_TIMEOUT_S)
        sock.connect("\0" + name)
        sock.sendall((wire.dumps(msg) + "\n").encode())
        line = read_line(sock)
    except OSError as e:
        return None, f"cannot reach aiprof record: {e}", False
    finally:
        sock.close()
    try:
        answer = wire.loads(line)
        took_stacks, took_telemetry = str(answer["stacks"]), bool(answer["telemetry"])
    except (ValueError, KeyError, TypeError):
        return None, line.decode(errors="replace").strip() or "no answer", False
    if not stacks:
        return None, "", took_telemetry
    if took_stacks != "ok":
        return None, msg.get("error") or took_stacks, took_telemetry
    return OutsideSampler(rate_hz), "", took_telemetry
