"""The many-rank side of ``aiprof import``: when it applies, and what it prints."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import AiprofError, ImportFormatError
from ..importers import choose
from .engine import resolve
from .job import expand
from .parallel import run_import
from .storage import locate

#: The format whose files are one rank each (several of them are a job).
RANK_FORMAT = "kineto"


def as_job(files: list[Path], forced: str | None, rank: int | None) -> tuple[list[Path], bool]:
    """The inputs, folders of traces expanded, and whether they are the ranks of a job
    (two or more Kineto traces, no --rank): imported in parallel, one profile each."""
    paths: list[Path] = []
    for p in files:
        if p.is_dir():
            try:
                choose(p, forced)  # a format that is a folder (Ascend, MindSpore...)
                paths.append(p)
                continue
            except ImportFormatError:
                try:
                    paths.extend(expand([p]))
                except ImportFormatError:
                    paths.append(p)  # nothing to expand: the importers say why not
                continue
        else:
            paths.append(p)
    if len(paths) < 2 or rank is not None or (forced and forced != RANK_FORMAT):
        return paths, False
    return paths, all(p.is_file() and choose(p, forced).name == RANK_FORMAT for p in paths)


def import_job(
    paths: list[Path],
    output: str | None,
    forced: str | None,
    workers: int | None,
    scheduler: str | None,
    scheduler_file: str | None,
    allow_mixed: bool,
) -> None:
    out = output or "job"
    loc = locate(out)
    if loc.process_local:
        raise AiprofError(f"{out}: a {out.split(':')[0]}:// folder lives in one process, gone when aiprof exits")
    if loc.local is not None and loc.local.exists() and not loc.local.is_dir():
        raise AiprofError(f"{out}: exists and is not a folder")
    where = resolve(workers, scheduler, scheduler_file)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    err = Console(stderr=True)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task(f"ranks on {where.kind} Dask", total=len(paths))

        def changed(done: int, failed: int, running: int) -> None:
            bar.update(
                task,
                completed=done + failed,
                description=f"ranks: {done} done, {failed} failed, {running} running",
            )

        rep = run_import(paths, out, where, forced=forced, allow_mixed=allow_mixed, on_change=changed)
    click.echo(
        f"wrote {len(rep.imported)} ranks to {out}/rank<N>.aiprof in {rep.seconds:.1f} s ({where.kind} Dask cluster)"
    )
    rows = ", ".join(f"{k} {v:,}" for k, v in rep.index_rows.items())
    click.echo(f"  cluster index: {out}/cluster ({rows}; {rep.index_bytes / 2**20:.2f} MiB gathered)")
    click.echo(f"  client peak RSS: {rep.client_peak_rss / 2**20:.0f} MiB")
    for r, p, e in rep.failed:
        click.echo(f"aiprof: error: rank {r} ({p}) failed and was skipped: {e}", err=True)
    for w in rep.warnings:
        click.echo(f"aiprof: warning: {w}", err=True)
    click.echo(f"see: aiprof report {out} --view stragglers|collectives|links|ranks; aiprof advise {out}")
