"""``aiprof diff A B``: what changed between two runs."""

from __future__ import annotations

import sys

import click
import orjson

from ..analysis import Query
from ..analysis.compare import compare, step_summary
from ..render import emit_table, format_cell
from .common import open_input


@click.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--view", type=click.Choice(["kernels", "operators"]), default="kernels", show_default=True)
@click.option("--filter", "filters", multiple=True, help="Filter on the comparison's columns (as in report).")
@click.option("--sort", default="-delta_us", show_default=True, help="Sort column; -COL for descending.")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def command(a: str, b: str, view: str, filters: tuple[str, ...], sort: str, limit: int, offset: int, fmt: str) -> None:
    """Compare run B against run A: step time, then the largest changes by name."""
    with open_input(a) as pa_, open_input(b) as pb:
        sa, sb = step_summary(pa_), step_summary(pb)
        table, total = Query.parse(list(filters), sort, limit, offset).apply(compare(pa_, pb, view))
    steps = {"a": sa, "b": sb}
    if sa["mean_step_us"] and sb["mean_step_us"]:
        steps["ratio"] = sb["mean_step_us"] / sa["mean_step_us"]
    if fmt == "json":
        doc = {"steps": steps, "view": view, "rows": table.to_pylist(), "total": total}
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return
    if fmt == "table":
        line = f"step time: A {format_cell(sa['mean_step_us'])} µs mean over {sa['steps']} steps; "
        line += f"B {format_cell(sb['mean_step_us'])} µs over {sb['steps']}"
        if "ratio" in steps:
            line += f"  (B/A = {steps['ratio']:.3f})"
        click.echo(line)
    emit_table(table, fmt, title=f"{view}: B - A", total=total)
