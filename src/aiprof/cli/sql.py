"""``aiprof sql PROFILE QUERY``: SQL over the store's tables (DuckDB dialect)."""

from __future__ import annotations

import click

from ..render.terminal import emit_table
from .common import open_input


@click.command("sql")
@click.argument("profile")
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def command(profile: str, query: str, fmt: str) -> None:
    """Run QUERY over the tables events, counters, memory, samples, frames, tracks, kernel_metrics."""
    with open_input(profile) as prof:
        emit_table(prof.sql(query), fmt, title=None)
