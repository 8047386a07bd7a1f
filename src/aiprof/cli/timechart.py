"""``aiprof timechart PROFILE -o trace.json[.gz]``: Chrome Trace JSON for Perfetto."""

from __future__ import annotations

from pathlib import Path

import click

from .common import open_input


@click.command("timechart")
@click.argument("profile")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="trace.json or trace.json.gz")
@click.option(
    "--python-samples/--no-python-samples",
    default=True,
    show_default=True,
    help="Draw a recording's Python samples as a flame chart track per thread.",
)
def command(profile: str, output: Path, python_samples: bool) -> None:
    """Write PROFILE as Chrome Trace Event JSON (Perfetto, chrome://tracing).

    aiprof's own steps, marks (annotations, GC, collectives) and the Python samples go
    on tracks of their own beside each thread, so torch's operators nest as they came."""
    from ..export.chrome_trace import write_chrome_trace

    with open_input(profile) as prof:
        counts = write_chrome_trace(prof, output, python_samples=python_samples)
    click.echo(
        f"wrote {output}: {counts['events']:,} events, {counts['flows'] + counts['synthetic_flows']:,} flow events, "
        f"{counts['counters']:,} counter samples, {counts['memory']:,} memory events, "
        f"{counts['python_slices']:,} Python sample slices"
    )
    click.echo("open it in https://ui.perfetto.dev or chrome://tracing")
