"""``aiprof report PROFILE``: the overview and the tables, in the terminal, CSV or JSON."""

from __future__ import annotations

import sys
from typing import Any

import click

from .overview import compute_items, print_overview, read_summary, single_profile, write_summary

# The analysis and the store (DuckDB, Arrow) are imported by the command, not here:
# ``aiprof report --help`` and ``aiprof --help`` then cost click alone.


VIEW_NAMES = ("overview", "steps", "operators", "kernels", "idle", "memory", "counters", "python", "events")

#: Why a view has no rows on a profile, where one reason is by far the likeliest.
_EMPTY = {
    "kernels": "no device kernels: a CPU-only profile, or one recorded without device activity",
    "memory": "no memory events: torch.profiler records them with profile_memory=True",
    "allocations": "no memory events: torch.profiler records them with profile_memory=True",
    "communication": "no collectives: a single-process job, or none were traced",
}


@click.command("report")
@click.argument("profile", nargs=-1, required=True)
@click.option(
    "--view", default="overview", show_default=True, help=f"One of: {', '.join(VIEW_NAMES)} (and any added view)."
)
@click.option("--filter", "filters", multiple=True, help="COL=V[,V], COL!=V, COL~TEXT, COL>=N, COL=A..B (repeatable).")
@click.option("--sort", help="Column to sort on; -COL for descending; comma-separated for several.")
@click.option("--limit", type=click.IntRange(min=0), help="Rows to show (default 30 in a table, all in csv/json).")
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--group-by",
    type=click.Choice(["name", "shapes", "stack"]),
    default="name",
    help="operators: by name, name + input shapes, or name + call stack (with_stack=True).",
)
@click.option(
    "--html", "html_out", type=click.Path(dir_okay=False), help="Also write a self-contained HTML report here."
)
def command(
    profile: tuple[str, ...],
    view: str,
    filters: tuple[str, ...],
    sort: str | None,
    limit: int | None,
    offset: int,
    fmt: str,
    group_by: str,
    html_out: str | None,
) -> None:
    """Summarise PROFILE (a .aiprof folder, a folder of them, or a trace file)."""
    overview = view == "overview" and fmt == "table" and not filters
    folder = single_profile(profile) if overview else None
    if folder is not None and not html_out:
        items = read_summary(folder)
        if items is not None:  # kept by an earlier report: the store is not opened
            print_overview([folder], items)
            return
    from ..analysis import Query, run, views
    from ..render.terminal import emit_table
    from .common import open_input

    if limit is None and fmt == "table":
        limit = 30
    q = Query.parse(list(filters), sort, limit, offset)
    params: dict[str, Any] = {"group_by": group_by}
    with open_input(*profile) as prof:
        if html_out:
            _write_html(prof, html_out)
        if overview:
            meta = (folder / "profile.json").read_bytes() if folder is not None else None
            items = compute_items(prof)
            if folder is not None and meta is not None:
                write_summary(folder, meta, items)
            # What the user named: a trace file is imported into a temporary folder,
            # whose name means nothing to them.
            print_overview(list(profile) or prof.paths, items)
            return
        res = run(prof, view, q, params)
        if view == "energy" and res.total == 0 and not filters:
            # An empty box alone reads as a fault; say what was missing.
            click.echo(
                "aiprof: no power or energy counters in this profile (sources: NVML on a GPU, RAPL with a readable "
                "/sys/class/powercap, an SMI log; docs/energy.md)",
                err=True,
            )
        title = views()[view].title
        if res.total == 0 and fmt == "table" and view != "energy":
            # An empty box alone reads as a fault; say why there is nothing.
            why = (
                "none match " + " ".join(f"--filter {f}" for f in filters)
                if filters
                else _EMPTY.get(view, "this profile holds nothing this view reads")
            )
            click.echo(f"aiprof: {title}: no rows ({why})", err=True)
        emit_table(
            res.table,
            fmt,
            title=title,
            total=res.total,
            units=res.units,
            extra={"view": view, "offset": offset, "limit": limit},
        )


def _write_html(prof: Any, path: str) -> None:
    try:
        from ..render.html import write_report  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise click.UsageError("--html needs the web report module, which this build does not have") from None
    write_report(prof, path)
    click.echo(f"wrote {path}", err=True)


def dump_json(obj: Any) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(obj, default=str).decode() + "\n")
