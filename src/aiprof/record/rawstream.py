"""Append-only raw data files: what a collector gathered reaches the disk as it grows.

A checkpoint appends only what changed since the last one (the new tail of each list,
the values that changed), one framed record at a time: ``length, crc32, marshal``. A
job killed at any moment (SIGKILL, the OOM killer, a segfault) leaves every whole
record readable; a record cut by the kill fails its length or crc and is dropped, with
the number of bytes lost. Nothing already written is ever rewritten, so a checkpoint
costs what was collected since the last one, not the whole run.

The contract on the data (a collector's ``dump``): a dict whose lists only grow at
their end (a list that shrank is written again whole) and whose dicts only gain keys.
A short list of containers (system's ``[timestamps, values]``) is followed item by item;
other short lists are written again whenever they change.
"""

from __future__ import annotations

import marshal
import os
import struct
import zlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

MAGIC = b"AIPROF-RAWSTREAM-1\n"
_FRAME = struct.Struct("<II")
#: Lists up to this long whose items are all lists or dicts are records of columns,
#: followed item by item; longer ones (and lists of plain rows) are appended to.
SHORT_LIST = 8

if TYPE_CHECKING:
    Path_ = tuple[Any, ...]


def _is_record(v: list[Any]) -> bool:
    return 0 < len(v) <= SHORT_LIST and all(isinstance(x, list | dict) for x in v)


def _delta(v: Any, old: Any, path: Path_, ops: list[tuple[str, Path_, Any]]) -> Any:
    """Append to ``ops`` what turns the data described by ``old`` into ``v``; returns the
    description of ``v`` (lengths of lists, nested descriptions, plain values)."""
    if isinstance(v, dict):
        prev = old[1] if isinstance(old, tuple) and old[0] == "d" else None
        if prev is None:
            ops.append(("r", path, {}))
            prev = {}
        return ("d", {k: _delta(x, prev.get(k), (*path, k), ops) for k, x in list(v.items())})
    if isinstance(v, list):
        if _is_record(v):
            prev_items = old[1] if isinstance(old, tuple) and old[0] == "rec" and len(old[1]) == len(v) else None
            if prev_items is None:
                ops.append(("r", path, [None] * len(v)))
                prev_items = [None] * len(v)
            return ("rec", [_delta(x, p, (*path, i), ops) for i, (x, p) in enumerate(zip(v, prev_items, strict=True))])
        if len(v) <= SHORT_LIST * SHORT_LIST:
            return _value(v, old, path, ops)
        # A long list: appended to, when what was written last is still where it was
        # (the contract; the check catches a list rebuilt in place).
        grew = isinstance(old, tuple) and old[0] == "l" and 0 < old[1] <= len(v) and v[old[1] - 1] == old[2]
        if not grew:
            ops.append(("r", path, list(v)))
        elif len(v) > old[1]:
            ops.append(("a", path, v[old[1] :]))
        return ("l", len(v), v[-1])
    return _value(v, old, path, ops)


def _value(v: Any, old: Any, path: Path_, ops: list[tuple[str, Path_, Any]]) -> Any:
    """A plain value (or a short list): written again whenever it changed."""
    if not (isinstance(old, tuple) and old[0] == "v" and type(old[1]) is type(v) and old[1] == v):
        ops.append(("r", path, list(v) if isinstance(v, list) else v))
    return ("v", list(v) if isinstance(v, list) else v)


class RawStream:
    """One collector's append-only raw data file; :meth:`write` appends a checkpoint."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.size = 0
        """Bytes of whole records written (a failed write is cut back to this)."""
        self._fd: int | None = None
        self._shape: Any = None

    def write(self, data: dict[str, Any]) -> None:
        """Append what changed in ``data``; an OSError (a full disk) leaves the file as it
        was before the call, every earlier record intact."""
        ops: list[tuple[str, Path_, Any]] = []
        shape = _delta(data, self._shape, (), ops)
        if not ops:
            return
        payload = marshal.dumps(ops, 4)
        frame = _FRAME.pack(len(payload), zlib.crc32(payload)) + payload
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            frame = MAGIC + frame
        try:
            view = memoryview(frame)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            try:
                os.ftruncate(self._fd, self.size)  # frees the blocks of the cut record
            except OSError:
                pass
            raise
        self.size += len(frame)
        self._shape = shape

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def is_stream(head: bytes) -> bool:
    return head.startswith(MAGIC)


def read_stream(blob: bytes) -> tuple[Any, int]:
    """The data of a stream file's bytes, and how many bytes at its end were cut (0 when
    the last record is whole)."""
    state: Any = None
    pos = len(MAGIC)
    while pos + _FRAME.size <= len(blob):
        n, crc = _FRAME.unpack_from(blob, pos)
        payload = blob[pos + _FRAME.size : pos + _FRAME.size + n]
        if len(payload) < n or zlib.crc32(payload) != crc:
            break
        try:
            ops = marshal.loads(payload)
        except (EOFError, ValueError, TypeError):
            break
        for op, path, value in ops:
            state = _apply(state, op, path, value)
        pos += _FRAME.size + n
    return state, len(blob) - pos


def _apply(state: Any, op: str, path: Path_, value: Any) -> Any:
    if not path:
        return value if op == "r" else [*state, *value]
    node = state
    for k in path[:-1]:
        node = node[k]
    last = path[-1]
    if op == "r":
        node[last] = value
    else:
        node[last].extend(value)
    return state


__all__ = ["MAGIC", "RawStream", "is_stream", "read_stream"]
