"""The raw-file format between a recording and its finalizer: what a raw folder holds.

A recorded process writes, in a hidden folder beside its profile (:func:`raw_location`),
a :data:`MANIFEST` and one raw data file per collector (marshal format 4, built in, so
nothing is imported into the job and the job's interpreter and aiprof's may differ;
appended by :class:`~aiprof.record.rawstream.RawStream` or replaced whole by
:func:`write_atomic`). The job (job/controller.py), ``aiprof record``'s process
(launcher/outside.py, launcher/outside_stacks.py), :mod:`aiprof.record.finalizer` and
``aiprof recover`` read and write it through this module only.
"""

from __future__ import annotations

import errno
import os

from .rawstream import is_stream, read_stream

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

MANIFEST = "manifest.json"
#: Raw data files: marshal format 4, which every Python 3 reads, so the job's
#: interpreter and aiprof's may differ.
RAW_DATA_SUFFIX = ".marshal"
MARKS = "marks" + RAW_DATA_SUFFIX

#: Errors of a write that mean no room is left: the recording stops, the job runs on.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
DISK_FULL = "no room left for the raw data"

RAW_SUFFIX = ".raw"

MAIN_RAW_SUFFIX = ".main" + RAW_SUFFIX


def raw_location(profile: str | os.PathLike[str], rank: int | None) -> str:
    """The raw folder of ``profile`` (hidden, beside it).

    A process without a rank gets its own name: if it turns out to be a launcher whose
    ranks record too, ``aiprof record`` drops it instead of letting it clash with rank 0.
    """
    # os.path, not pathlib: the job computes it, and pathlib would cost it its import.
    p = os.fspath(profile)
    name = f".{os.path.basename(p)}{RAW_SUFFIX if rank is not None else MAIN_RAW_SUFFIX}"
    return os.path.join(os.path.dirname(p), name)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` all at once: a job killed in the middle of a
    checkpoint leaves the previous complete file, never half of the next one."""
    p = os.fspath(path)
    tmp = p + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except OSError:
        try:
            os.unlink(tmp)  # a full disk keeps no half file
        except FileNotFoundError:
            pass
        raise


def encode_raw(data: Any) -> bytes:
    """Raw data (builtin types only) as bytes: marshal, which the job need not import."""
    import marshal

    return marshal.dumps(data, 4)


def load_raw(path: str | os.PathLike[str]) -> Any:
    """Raw data written by :func:`encode_raw` or appended by a :class:`RawStream`."""
    return load_raw_cut(path)[0]


def load_raw_cut(path: str | os.PathLike[str]) -> tuple[Any, int]:
    """:func:`load_raw`, with the bytes cut off the end of a stream (a job killed while
    appending to it), 0 when every record is whole."""
    import marshal

    with open(path, "rb") as f:
        blob = f.read()
    if is_stream(blob):
        return read_stream(blob)
    return marshal.loads(blob), 0


def hostname() -> str:
    """This machine's name, as the manifest records it."""
    # os.uname() is what socket.gethostname() reads on POSIX, without importing socket.
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()
