"""``aiprof import FILE... -o OUT.aiprof``: foreign profiler output -> a profile."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from ..errors import AiprofError
from ..importers import choose, import_paths
from ..store.writer import profile_path

PROGRESS_MIN_BYTES = 32 << 20

log = logging.getLogger(__name__)


def default_output(first: Path) -> Path:
    """``trace.json.gz`` -> ``trace.aiprof`` next to the current directory."""
    name = first.name
    for suffix in (".gz", ".json", ".sqlite", ".csv", ".txt", ".log"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return profile_path(Path(name.rstrip(".") or "profile"))


def windows_of_one(paths: list[Path]) -> bool:
    """Whether Kineto traces that would be imported as the ranks of a job are windows of
    one process in time (``torch.profiler`` with a schedule that repeats writes a file
    per window: same host, pid and distributedInfo rank, importers/kineto/process.py):
    then one profile of one rank. Traces of several processes where some process has
    several windows are refused: a job import takes one trace per rank."""
    from ..importers.kineto.process import group, trace_process

    groups = [g for g in group([trace_process(p) for p in paths]) if len({t.head for t in g}) == len(g)]
    windowed = [g for g in groups if len(g) > 1]
    if not windowed:
        return False
    if len(windowed) == 1 and len(windowed[0]) == len(paths):
        return True
    said = "; ".join(
        f"pid {g[0].pid}{f' on {g[0].host}' if g[0].host else ''}: {len(g)} windows ({', '.join(t.path.name for t in g)})"
        for g in windowed
    )
    raise AiprofError(
        f"{len(paths)} traces of {len(groups)} processes, some with several windows in time ({said}): "
        "a job import takes one trace per rank; import each process's traces on their own "
        "(aiprof import TRACES... -o NAME.aiprof)"
    )


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    help="Profile folder to write (NAME.aiprof); for the ranks of a job, a folder or an fsspec URL (s3://...).",
)
@click.option("-f", "--format", "forced", help="Skip detection and use this importer.")
@click.option("--rank", type=int, help="Rank of these files when they do not say.")
@click.option("--workers", type=int, help="Rank files of a job: local Dask worker processes (default: the cores).")
@click.option(
    "--scheduler", help="Rank files of a job: address of an existing Dask scheduler (or AIPROF_DASK_SCHEDULER)."
)
@click.option("--scheduler-file", help="Rank files of a job: a Dask scheduler file (or AIPROF_DASK_SCHEDULER_FILE).")
@click.option("--allow-mixed", is_flag=True, help="Import rank files whose distributedInfo disagree, with a warning.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0, min_open=True),
    help="SMI logs without timestamps (dmon without -o T, hl-smi tables): seconds between samples (dmon -d).",
)
@click.option("--force", is_flag=True, help="Replace the profile already at the output (else the import refuses).")
def command(
    files: tuple[Path, ...],
    output: str | None,
    forced: str | None,
    rank: int | None,
    workers: int | None,
    scheduler: str | None,
    scheduler_file: str | None,
    allow_mixed: bool,
    interval: float | None,
    force: bool,
) -> None:
    """Import foreign profiler output (Kineto JSON, ...) into a profile.

    Several Kineto rank files of one job (or a folder of them) are imported in
    parallel on Dask into OUT/rank<N>.aiprof, with the cluster index in OUT/cluster.
    A raw folder that a killed aiprof record left becomes its profile (as aiprof
    recover does). A profile an older aiprof wrote gets, in place, the tables this
    one derives at import (the overview's totals: docs/store.md); a job folder (OUT of a
    parallel import) an older aiprof wrote, the columns its cluster index now keeps.
    """
    from ..cluster.cli import as_job
    from .recover import is_raw, recover

    if all(is_raw(p) for p in files):
        for p in files:
            for line in recover(p):
                click.echo(f"aiprof: {line}", err=True)
        return

    from ..store.reader import is_profile

    if all(is_profile(p) for p in files):
        from ..analysis.derived import upgrade

        for p in files:
            click.echo(f"{'upgraded' if upgrade(p) else 'up to date'}: {p}")
        return

    from ..cluster.opened import is_job as job_folder

    if len(files) == 1 and job_folder(files[0]):
        from ..cluster.index import upgrade_job

        done = upgrade_job(files[0])
        click.echo(f"upgraded: {files[0]}: {len(done)} parts" if done else f"up to date: {files[0]}")
        for part in done:
            click.echo(f"  {part}")
        return
    paths, is_job = as_job(list(files), forced, rank)
    if is_job and windows_of_one(paths):
        is_job = False  # one profile, one rank: import_paths says so in its notes
    if is_job:
        from ..cluster.cli import import_job

        import_job(paths, output, forced, workers, scheduler, scheduler_file, allow_mixed)
        return
    from ..cluster.storage import is_url, locate

    if output and is_url(output):
        local = locate(output).local
        if local is None:
            raise AiprofError(f"{output}: URLs other than file:// are for the rank files of a job")
        output = str(local)
    out = profile_path(Path(output)) if output else default_output(paths[0])
    if out.exists() and not force:
        # What the user imported or recorded there before is never replaced unasked.
        raise AiprofError(f"{out} already exists: give another -o, or --force to replace it")
    chosen = [choose(p, forced) for p in paths]  # fail before writing anything, with the reason
    from ..allocators import describe

    log.debug("memory: %s", describe())
    total = sum(p.stat().st_size for p in paths if p.is_file())
    interval_ns = round(interval * 1e9) if interval else None
    from rich.console import Console

    err = Console(stderr=True)
    if total >= PROGRESS_MIN_BYTES and sys.stderr.isatty():
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=err,
        ) as bar:
            task = bar.add_task("importing (decompressed bytes)", total=None)
            path, ctx = import_paths(
                paths,
                out,
                forced=forced,
                rank=rank,
                progress=lambda n: bar.advance(task, n),
                sample_interval_ns=interval_ns,
                chosen_for=chosen,
            )
    else:
        path, ctx = import_paths(
            paths, out, forced=forced, rank=rank, sample_interval_ns=interval_ns, chosen_for=chosen
        )
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(ctx.kinds.items(), key=lambda kv: -kv[1]))
    tables = ", ".join(f"{k} {v:,}" for k, v in ctx.tables.items() if v)
    click.echo(f"wrote {path}")
    click.echo(f"  events: {sum(ctx.kinds.values()):,} ({kinds})" if ctx.kinds else "  events: 0")
    if tables:
        click.echo(f"  other tables: {tables}")
    for note in ctx.notes:
        click.echo(f"  {note}")
    for w in ctx.warnings:
        click.echo(f"aiprof: warning: {w}", err=True)
    click.echo(f"see: aiprof report {path}")
