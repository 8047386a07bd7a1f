"""``aiprof timechart PROFILE -o trace.json[.gz]``: Chrome Trace JSON for Perfetto."""

from __future__ import annotations

from pathlib import Path

import click

from .common import open_input


@click.command("timechart")
@click.argument("profile")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="trace.json or trace.json.gz")
def command(profile: str, output: Path) -> None:
    """Write PROFILE as Chrome Trace Event JSON (Perfetto, chrome://tracing)."""
    from ..export.chrome_trace import write_chrome_trace

    with open_input(profile) as prof:
        counts = write_chrome_trace(prof, output)
    click.echo(
        f"wrote {output}: {counts['events']:,} events, {counts['flows'] + counts['synthetic_flows']:,} flow events, "
        f"{counts['counters']:,} counter samples, {counts['memory']:,} memory events"
    )
    click.echo("open it in https://ui.perfetto.dev or chrome://tracing")
