"""``aiprof export PROFILE --format speedscope -o FILE``: a profile in another tool's format."""

from __future__ import annotations

from pathlib import Path

import click

from .common import open_input


@click.command("export")
@click.argument("profile")
@click.option(
    "--format", "fmt", type=click.Choice(["speedscope"]), required=True, help="speedscope: the Python stack samples"
)
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="the file to write")
def command(profile: str, fmt: str, output: Path) -> None:
    """Export PROFILE's data in another tool's format (speedscope: Python stack samples)."""
    from ..export.speedscope import write_speedscope

    with open_input(profile) as prof:
        counts = write_speedscope(prof, output, name=Path(profile).name)
    click.echo(
        f"wrote {output}: {counts['profiles']} thread profile(s), {counts['samples']:,} samples, "
        f"{counts['frames']:,} frames; open it in speedscope"
    )
