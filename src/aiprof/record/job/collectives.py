"""torch.distributed's collectives, recorded in default mode (no torch.profiler).

Each call of a wrapped function becomes one ``collective`` event on the calling
thread: op, start and end (for an ``async_op=True`` call: the enqueue only), bytes of
the tensor(s) it was given, the process group's name and size, and the call's sequence
number in that group (the n-th call of a group matches the n-th on every rank). The
wrapper costs a few microseconds per call; collectives are a handful per step.

DDP's gradient all-reduces are issued by its C++ reducer, not through these Python
functions: in default mode their wait shows inside ``backward`` (analysis/phases.py);
``--ops`` records them as torch.profiler's ``record_param_comms`` / ``gloo:*`` /
``nccl:*`` ranges, which the communication views read too.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

#: The functions wrapped, in torch.distributed (and its distributed_c10d module).
OPS = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "reduce", "all_to_all",
    "all_to_all_single", "send", "recv", "isend", "irecv", "gather", "scatter", "all_reduce_coalesced",
    "all_gather_coalesced", "batch_isend_irecv",
)  # fmt: skip

if TYPE_CHECKING:
    Sink = Callable[[tuple[Any, ...]], None]
"""(start, end, op, bytes, group, group size, seq, tid)."""

_sink: Sink | None = None
_seq: dict[str, int] = {}
_installed = False


def connect(sink: Sink | None) -> None:
    global _sink
    _sink = sink


def _nbytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    total = 0
    for a in (*args, *kwargs.values()):
        items = a if isinstance(a, (list, tuple)) else (a,)
        for t in items:
            numel = getattr(t, "numel", None)
            size = getattr(t, "element_size", None)
            if callable(numel) and callable(size):
                total += int(numel()) * int(size())
    return total


def _group(c10d: Any, kwargs: dict[str, Any], args: tuple[Any, ...]) -> tuple[str, int]:
    pg = kwargs.get("group")
    if pg is None:
        pg = next(
            (a for a in args if type(a).__name__ in ("ProcessGroup", "ProcessGroupGloo", "ProcessGroupNCCL")), None
        )
    try:
        name = str(c10d._get_process_group_name(pg)) if pg is not None else "default"
    except Exception:
        name = "default" if pg is None else f"group@{id(pg):x}"
    try:
        size = int(c10d.get_world_size(pg))
    except Exception:
        size = -1
    return name, size


def install(dist: Any) -> None:
    """Wrap the collectives of ``torch.distributed`` (once)."""
    global _installed
    if _installed:
        return
    _installed = True
    c10d = getattr(dist, "distributed_c10d", None)
    for op in OPS:
        orig = getattr(dist, op, None)
        if orig is None or not callable(orig):
            continue
        wrapped = _wrap(c10d, op, orig)
        setattr(dist, op, wrapped)
        if c10d is not None and getattr(c10d, op, None) is orig:
            setattr(c10d, op, wrapped)


def _wrap(c10d: Any, op: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def call(*args: Any, **kwargs: Any) -> Any:
        sink = _sink
        if sink is None:
            return orig(*args, **kwargs)
        t0 = time.monotonic_ns()
        try:
            return orig(*args, **kwargs)
        finally:
            t1 = time.monotonic_ns()
            try:
                group, size = _group(c10d, kwargs, args)
                seq = _seq.get(group, 0)
                _seq[group] = seq + 1
                sink((t0, t1, op, _nbytes(args, kwargs), group, size, seq, threading.get_native_id()))
            except Exception:  # a description never breaks the job
                pass

    return call
