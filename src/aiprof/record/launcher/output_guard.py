"""The output of ``aiprof record``, checked and locked before the job starts.

An output that cannot be written (a read-only folder, ``-o`` naming a regular file, a
path under /proc) is refused with one line before the job runs, not found out after
it ran unrecorded. Two recordings into one output would mix their raw folders (one
profile holding the other run's job): the second is refused while the first holds the
lock, an ``flock`` on a file in the output folder, released when the process ends
however it ends (so a killed ``aiprof record`` never leaves a stale lock behind).

An output that already holds a recording (the profiles and raw folders an earlier
``aiprof record`` wrote there) is refused too, before the job runs, unless ``--force``
(:func:`check_earlier`): it would be replaced without a word. ``--force`` removes
that recording's own outputs, and nothing else in the folder; profiles something else
wrote there (an import) are refused even then, since the new recording would be read
together with them. The in-process recorders apply the same rule through
:func:`check_earlier`: ``Profiler(output=..., force=...)`` when it is made
(record/job/api.py), and ``%%aiprof -o ... --force`` with it, before the cell runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
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


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, deepest first: what
    recording into it creates."""
    out = []
    p = folder.absolute()
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def remove_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is empty; one that holds anything
    is kept, and so are the ones above it."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:
            return


def earlier_recording(output: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """What is already at ``output`` (a folder, or a name ending in ``.aiprof``) that a
    recording into it would replace or be read with: (the profiles a recording wrote,
    its raw folders (unfinished: ``aiprof recover`` makes profiles of them), the
    profiles something else wrote). ``aiprof report OUT`` reads every profile in OUT."""
    from ..finalizer import find_raw

    if (not output.is_dir() or not any(output.iterdir())) and not find_raw(output):
        # Nothing there (the usual case): a recording's process (``Profiler``) does not
        # load the store's modules (DuckDB, Arrow) before its job runs.
        return [], [], []
    from ...store.reader import find_profiles
    from ...store.writer import META_FILE
    from ..rawfile import RAW_SUFFIX

    ours: list[Path] = []
    others: list[Path] = []
    for p in find_profiles(output):
        try:
            recorded = "record" in json.loads((p / META_FILE).read_text())
        except (OSError, ValueError):
            recorded = False  # unreadable: not known to be a recording, so never removed
        # Only a NAME.aiprof is a profile aiprof record writes at OUT itself; a folder
        # OUT that is a profile would hold the recording inside it.
        ours_here = recorded and (p != output or output.name.endswith(".aiprof"))
        (ours if ours_here else others).append(p)
    raws = set(find_raw(output))
    if output.name.endswith(".aiprof") and output.is_dir() and output not in ours + others:
        # The ranks of a launcher given ``-o NAME.aiprof`` record into NAME.aiprof/.
        raws.update(
            p for p in output.iterdir() if p.is_dir() and p.name.startswith(".") and p.name.endswith(RAW_SUFFIX)
        )
    return ours, sorted(raws), others


def _names(paths: list[Path]) -> str:
    shown = ", ".join(p.name for p in paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def check_earlier(output: Path, force: bool, *, options: tuple[str, str] = ("-o", "--force")) -> None:
    """Refuse ``output`` when it holds an earlier recording (or profiles aiprof record
    did not write); with ``force``, remove that recording's profiles and raw folders
    (only those: other files in the folder are left as they are).

    ``options``: how the message names the output and force where they are given:
    ``aiprof record`` and ``%%aiprof``'s ``-o`` and ``--force``, ``Profiler``'s
    ``output`` and ``force=True``."""
    name_output, name_force = options
    ours, raws, others = earlier_recording(output)
    if others:
        what = "is a profile" if others == [output] else f"already holds profiles ({_names(others)})"
        raise AiprofError(
            f"{output} {what} that aiprof record did not write: give another {name_output} "
            f"({name_force} replaces only an earlier recording)"
        )
    if not (ours or raws):
        return
    if not force:
        redo = f"give another {name_output}, or {name_force} to replace it"
        if ours == [output] and not raws:
            raise AiprofError(f"{output} is an earlier recording: {redo}")
        parts = [_names(ours)] if ours else []
        if raws:
            # A killed aiprof record's raw data: still a recording, which recover finishes.
            parts.append(
                f"{'unfinished ' if ours else ''}{_names(raws)}: aiprof recover {raws[0].parent} writes its profiles"
            )
        what = "a recording" if ours else "an unfinished recording"
        raise AiprofError(f"{output} already holds {what} ({'; '.join(parts)}): {redo}")
    for p in ours + raws:
        try:
            shutil.rmtree(p)
        except OSError as e:
            raise AiprofError(f"cannot replace the recording in {output}: {p}: {e.strerror or e}") from None


__all__ = ["LOCK_NAME", "OutputLock", "check_earlier", "earlier_recording", "missing_folders", "remove_empty"]
