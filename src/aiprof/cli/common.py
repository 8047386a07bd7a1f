"""Helpers shared by the verbs that read profiles."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from ..errors import AiprofError
from ..store import Profile, find_profiles, open_profile


@contextmanager
def open_input(*paths: str) -> Iterator[Profile]:
    """Open profiles; a trace file given instead is imported on the fly into a temp dir.
    A many-rank job folder (with a cluster index) opens through its index."""
    from ..cluster.opened import is_job, open_job

    if len(paths) == 1 and is_job(paths[0]):
        job = open_job(paths[0])
        try:
            yield job
        finally:
            job.close()
        return
    with tempfile.TemporaryDirectory(prefix="aiprof-") as tmp:
        folders: list[str] = []
        for i, p in enumerate(paths):
            path = Path(p)
            if find_profiles(path):
                folders.append(p)
                continue
            _refuse_raw(path)
            from ..importers import import_paths, trace_inputs

            for j, f in enumerate(trace_inputs(path)):
                out, ctx = import_paths([f], Path(tmp) / f"input{i}-{j}.aiprof")
                for w in ctx.warnings:
                    click.echo(f"aiprof: warning: {w}", err=True)
                folders.append(str(out))
        prof = open_profile(*folders)
        try:
            yield prof
        finally:
            prof.close()


def _refuse_raw(path: Path) -> None:
    """A folder of raw recordings only (aiprof record was killed): say how to get profiles."""
    from ..record.finalizer import find_raw
    from .recover import is_raw

    if is_raw(path) or any(is_raw(r) for r in find_raw(path)):
        raise AiprofError(
            f"{path}: raw recordings, not profiles yet (aiprof record did not finish): run aiprof recover {path}"
        )
