"""The output of ``aiprof record``, checked and locked before the job starts.

An output that cannot be written (a read-only folder, ``-o`` naming a regular file, a
path under /proc) is refused with one line before the job runs, not found out after
it ran unrecorded. Two recordings into one output would mix their raw folders (one
profile holding the other run's job): the second is refused while the first holds the
lock, an ``flock`` on a file in the output folder, released when the process ends
however it ends (so a killed ``aiprof record`` never leaves a stale lock behind).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from ...errors import AiprofError

LOCK_NAME = ".aiprof-record.lock"


class OutputLock:
    """Holds ``output`` for one recording; use as a context manager."""

    def __init__(self, output: Path) -> None:
        self.output = output
        # A name ending in .aiprof is one profile: its folder is the parent.
        self.folder = output.parent if output.name.endswith(".aiprof") else output
        self.path = self.folder / (LOCK_NAME if self.folder == output else f".{output.name}.lock")
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        if self.output.exists() and not self.output.is_dir():
            raise AiprofError(f"cannot record into {self.output}: it is a file, not a folder")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise AiprofError(f"cannot record into {self.output}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AiprofError(
                f"{self.output} is being recorded into by another aiprof record (pid {holder}); "
                "wait for it or choose another -o"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            probe = self.folder / f".aiprof-write-test-{os.getpid()}"
            probe.write_bytes(b"x")
            probe.unlink()
        except OSError as e:
            os.close(fd)
            raise AiprofError(f"cannot record into {self.output}: {e.strerror or e}") from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink()
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


__all__ = ["LOCK_NAME", "OutputLock"]
