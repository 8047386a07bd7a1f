"""Where a job folder lives: a local path, or any fsspec URL the workers can write.

``aiprof import RANKS... -o OUT`` takes OUT as a path or a URL (``file:///data/job``,
``s3://bucket/job``, ``gcs://...``, ``memory://job``; a scheme needs its fsspec
package, s3fs for s3). A local path or a ``file://`` URL is written in place. Any other
filesystem is written through fsspec: each task imports its rank into a local scratch
folder on its worker, summarises it there, and uploads the folder's files, its
``profile.json`` last, so a reader never takes a half-uploaded folder for a profile;
the client uploads the index the same way (``index.json`` last). The job folder opens
from the same URL (:mod:`.opened`: DuckDB reads the Parquet files through fsspec).

``memory://`` lives in one process: it works with a cluster whose workers are threads
of the client's process (a test, a notebook), not from the command line.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AiprofError

#: Filesystems that exist in one process only.
PROCESS_LOCAL = ("memory",)


@dataclass(frozen=True)
class Location:
    """A job folder: ``local`` (a path written in place) or ``fs`` + ``root`` (fsspec)."""

    url: str
    local: Path | None
    fs: Any = None
    root: str = ""

    @property
    def process_local(self) -> bool:
        return self.fs is not None and any(p in PROCESS_LOCAL for p in _protocols(self.fs))

    def join(self, *parts: str) -> str:
        """``OUT/part/...`` as a path or a URL."""
        if self.local is not None:
            return str(self.local.joinpath(*parts))
        url: str = self.fs.unstrip_protocol(posixpath.join(self.root, *parts))
        return url

    def exists(self, *parts: str) -> bool:
        if self.local is not None:
            return self.local.joinpath(*parts).exists()
        return bool(self.fs.exists(posixpath.join(self.root, *parts)))

    def read_text(self, *parts: str) -> str:
        if self.local is not None:
            return self.local.joinpath(*parts).read_text()
        with self.fs.open(posixpath.join(self.root, *parts), "r") as f:
            text: str = f.read()
        return text

    def glob(self, pattern: str) -> list[str]:
        """Paths below OUT (relative, ``/``-separated) matching ``pattern``: one listing."""
        if self.local is not None:
            return sorted(p.relative_to(self.local).as_posix() for p in self.local.glob(pattern))
        base = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        found = self.fs.glob(posixpath.join(self.root, pattern))
        return sorted(p[len(base) :] if p.startswith(base) else posixpath.basename(p) for p in found)

    def mkdir(self) -> None:
        if self.local is not None:
            if self.local.exists() and not self.local.is_dir():
                raise AiprofError(f"{self.local}: exists and is not a folder")
            self.local.mkdir(parents=True, exist_ok=True)
            return
        self.fs.makedirs(self.root, exist_ok=True)

    def upload(self, folder: Path, name: str, last: str) -> None:
        """Copy the files of local ``folder`` to ``OUT/name/``, the file ``last`` last."""
        files = sorted((f for f in folder.rglob("*") if f.is_file()), key=lambda f: (f.name == last, str(f)))
        for f in files:
            dest = posixpath.join(self.root, name, f.relative_to(folder).as_posix())
            self.fs.makedirs(posixpath.dirname(dest), exist_ok=True)
            self.fs.put_file(str(f), dest)


def _protocols(fs: Any) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


def is_url(text: str | os.PathLike[str]) -> bool:
    s = str(text)
    return "://" in s and s.split("://", 1)[0].isidentifier()


def locate(out: str | os.PathLike[str]) -> Location:
    """The Location of ``out``: a path, ``file://`` (local), or another fsspec URL."""
    text = str(out)
    if not is_url(text):
        return Location(text, Path(text))
    try:
        import fsspec
    except ImportError:
        raise AiprofError(f"{text}: a URL needs fsspec: pip install 'aiprof[cluster]'") from None
    try:
        fs, root = fsspec.core.url_to_fs(text)
    except (ImportError, ValueError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AiprofError(f"{text}: cannot use this URL: {msg}") from None
    if "file" in _protocols(fs) or "local" in _protocols(fs):
        return Location(text, Path(root))
    return Location(text, None, fs, root.rstrip("/"))
