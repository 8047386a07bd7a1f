"""``aiprof recover OUT``: profiles from the raw folders a killed ``aiprof record`` left.

``aiprof record`` writes the profiles after the job; killed itself (SIGKILL, a lost
terminal), it leaves the job's raw folders (``OUT/.rankN.aiprof.raw``), which the job
kept up to date every second, and into which ``aiprof record`` appended the stacks it
sampled from outside the job until it died. This turns each into its profile, marked
partial. The telemetry ``aiprof record`` polled is not in them. ``aiprof import RAW`` does the same for one raw folder.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import AiprofError

REASON = "recovered from the raw data: aiprof record did not finish"


def is_raw(path: Path) -> bool:
    """A raw recording folder (``.NAME.aiprof.raw`` with its marks or manifest)?"""
    from ..record.rawfile import MANIFEST, MARKS, RAW_SUFFIX

    return (
        path.is_dir()
        and path.name.endswith(RAW_SUFFIX)
        and any((path / n).is_file() for n in (MANIFEST, MANIFEST + ".tmp", MARKS))
    )


def recover(folder: Path) -> list[str]:
    """Finalize the raw folders in (or at) ``folder``; the summary lines."""
    from ..record.finalizer import finalize, find_raw
    from ..record.launcher.output_guard import OutputLock
    from ..record.rawfile import MAIN_RAW_SUFFIX

    raws = [folder] if is_raw(folder) else [r for r in find_raw(folder) if is_raw(r)]
    if not raws:
        raise AiprofError(f"{folder}: no raw recording (.NAME.aiprof.raw folder) to recover")
    ranked = [r for r in raws if not r.name.endswith(MAIN_RAW_SUFFIX)]
    lines: list[str] = []
    with OutputLock(raws[0].parent):
        for raw in raws:
            if ranked and raw.name.endswith(MAIN_RAW_SUFFIX):
                continue  # a launcher's own recording: its ranks hold the job
            _refuse_live(raw)
            lines += finalize(raw, partial_reason=REASON).lines()
    return lines


def _refuse_live(raw: Path) -> None:
    """A recording whose process still runs on this host is not ours to finish."""
    import os

    from ..record.finalizer import read_manifest
    from ..record.rawfile import hostname

    m = read_manifest(raw)
    pid = m.get("pid")
    if not isinstance(pid, int) or m.get("host") != hostname() or not m.get("partial"):
        return
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    except PermissionError:
        pass
    raise AiprofError(f"{raw}: its recording process (pid {pid}) is still running; recover it once that ends")


@click.command("recover")
@click.argument("folder", type=click.Path(path_type=Path, exists=True))
def command(folder: Path) -> None:
    """Write the profiles of the raw recordings in FOLDER (after aiprof record was killed)."""
    for line in recover(folder):
        click.echo(f"aiprof: {line}", err=True)
    click.echo(f"aiprof: see more: aiprof report {folder}", err=True)
