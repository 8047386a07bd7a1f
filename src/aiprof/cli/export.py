"""``aiprof export PROFILE --format speedscope -o FILE``: a profile in another tool's format."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import AiprofError
from .common import open_input

FORMATS = ("speedscope",)
#: Names a user may try for the trace that ``aiprof timechart`` writes.
TRACE_NAMES = ("perfetto", "chrome", "chrome-trace", "chrome_trace", "trace", "json", "timechart", "kineto")


def check_format(fmt: str, profile: str = "PROFILE") -> str:
    """``fmt`` when aiprof export writes it; else AiprofError, pointing a trace to
    ``aiprof timechart`` (with ``profile`` as given)."""
    if fmt in FORMATS:
        return fmt
    import shlex

    hint = f"the Perfetto / Chrome trace is written by: aiprof timechart {shlex.quote(profile)} -o trace.json.gz"
    if fmt.lower() in TRACE_NAMES:
        raise AiprofError(f"--format {fmt!r}: aiprof export writes {', '.join(FORMATS)} only; {hint}")
    raise AiprofError(f"--format {fmt!r}: not a format of aiprof export ({', '.join(FORMATS)}); {hint}")


@click.command("export")
@click.argument("profile")
@click.option(
    "--format",
    "fmt",
    metavar="speedscope",
    required=True,
    help="speedscope: the Python stack samples (a Perfetto / Chrome trace: aiprof timechart)",
)
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="the file to write")
def command(profile: str, fmt: str, output: Path) -> None:
    """Export PROFILE's data in another tool's format (speedscope: Python stack samples).
    The Perfetto / Chrome trace comes from: aiprof timechart PROFILE -o FILE.json.gz"""
    from ..export.speedscope import write_speedscope

    check_format(fmt, profile)

    with open_input(profile) as prof:
        counts = write_speedscope(prof, output, name=Path(profile).name)
    click.echo(
        f"wrote {output}: {counts['profiles']} thread profile(s), {counts['samples']:,} samples, "
        f"{counts['frames']:,} frames; open it in speedscope"
    )
