"""``aiprof report PROFILE``: the overview and the tables, in the terminal, CSV or JSON."""

from __future__ import annotations

import sys
from typing import Any

import click

from .overview import compute_items, print_overview, read_summary, single_profile, write_summary

# The analysis and the store (DuckDB, Arrow) are imported by the command, not here:
# ``aiprof report --help`` and ``aiprof --help`` then cost click alone.


def view_names() -> list[str]:
    """Every view's name, sorted: the names the registry (``analysis.base.views()``) holds
    once it has imported the modules ``analysis/catalog.py`` names, read from their
    ``@analyser("NAME", ...)`` decorators without importing them, so that ``--help``
    lists every view and still costs click alone (tests/test_cli_start.py). A test holds
    this list to ``views()``."""
    import ast
    import re
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[1]
    catalog = ast.parse((pkg / "analysis" / "catalog.py").read_text())
    files: list[Path] = []
    for node in ast.walk(catalog):
        if isinstance(node, ast.AnnAssign | ast.Assign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "MODULES" for t in targets):
                files += [pkg / "analysis" / f"{m}.py" for m in ast.literal_eval(node.value)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("aiprof."):
            # importlib.import_module("aiprof.cluster.views"): views kept elsewhere
            files.append(pkg.joinpath(*node.value.split(".")[1:]).with_suffix(".py"))
    decorator = re.compile(r'^@analyser\(\s*"([^"]+)"', re.MULTILINE)
    return sorted({name for f in files if f.is_file() for name in decorator.findall(f.read_text())})


#: The views that read --group-by beyond "name" (the operators analyser's params).
GROUP_BY_VIEWS = {"shapes": ("operators",), "stack": ("operators",)}
#: The views that read --name (the analyser's params["name"], the API's param.name): the
#: operator whose device work operator-kernels lists, which it needs.
NAME_VIEWS = ("operator-kernels",)
#: Operator names a missing --name lists, most host time first.
NAME_EXAMPLES = 5


class _ReportCommand(click.Command):
    """``aiprof report``, whose help ends with every view's name (computed when shown)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        import textwrap

        with formatter.section("Views (--view NAME)"):
            # Wrapped here: click's wrapping would break a name at its hyphen (kernel-metrics).
            width = max((formatter.width or 80) - formatter.current_indent, 20)
            names = ", ".join(view_names())
            for line in textwrap.wrap(names, width, break_on_hyphens=False, break_long_words=False):
                formatter.write(" " * formatter.current_indent + line + "\n")
        super().format_epilog(ctx, formatter)


#: Views whose null figures are ones the profile did not measure (steps: a phase without
#: Python samples, a step trace figure without its points): the table leaves out the
#: columns null on every row shown and says so, and a null cell ("-") says it too, as
#: the web UI's Steps page does; CSV and JSON keep every column, null as empty / null.
UNMEASURED_VIEWS = ("steps",)
UNMEASURED_NOTE = "not measured in this profile"


#: Why a view has no rows on a profile, where one reason is by far the likeliest.
_EMPTY = {
    "kernels": "no device kernels: a CPU-only profile, or one recorded without device activity",
    "memory": "no memory events: torch.profiler records them with profile_memory=True",
    "allocations": "no memory events: torch.profiler records them with profile_memory=True",
    "communication": "no collectives: a single-process job, or none were traced",
}


@click.command("report", cls=_ReportCommand)
@click.argument("profile", nargs=-1, required=True)
@click.option("--view", default="overview", show_default=True, help="The view to show: one of those listed below.")
@click.option("--filter", "filters", multiple=True, help="COL=V[,V], COL!=V, COL~TEXT, COL>=N, COL=A..B (repeatable).")
@click.option("--sort", help="Column to sort on; -COL for descending; comma-separated for several.")
@click.option("--limit", type=click.IntRange(min=0), help="Rows to show (default 30 in a table, all in csv/json).")
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--group-by",
    type=click.Choice(["name", "shapes", "stack"]),
    default="name",
    help=f"{', '.join(GROUP_BY_VIEWS['shapes'])}: by name, name + input shapes, or name + call stack "
    "(with_stack=True).",
)
@click.option(
    "--name",
    "op_name",
    metavar="OPERATOR",
    help=f"{', '.join(NAME_VIEWS)}: the operator whose device work to list, as the operators view names it "
    "(the API's param.name).",
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
    op_name: str | None,
    html_out: str | None,
) -> None:
    """Summarise PROFILE (a .aiprof folder, a folder of them, or a trace file)."""
    from ..errors import QueryError

    if group_by != "name" and view not in GROUP_BY_VIEWS[group_by]:
        raise QueryError(
            f"--group-by {group_by}: the {view} view does not group by {group_by}; "
            f"views that do: {', '.join(GROUP_BY_VIEWS[group_by])}"
        )
    if op_name is not None and view not in NAME_VIEWS:
        raise QueryError(f"--name: the {view} view takes no name; views that do: {', '.join(NAME_VIEWS)}")
    overview = view == "overview" and fmt == "table" and not filters
    folder = single_profile(profile) if overview else None
    if folder is not None and not html_out:
        items = read_summary(folder)
        if items is not None:  # kept by an earlier report: the store is not opened
            print_overview(list(profile), items)
            return
    from ..analysis import Query, run, views
    from ..render.terminal import emit_table
    from .common import open_input

    if limit is None and fmt == "table":
        limit = 30
    q = Query.parse(list(filters), sort, limit, offset)
    params: dict[str, Any] = {"group_by": group_by}
    if op_name is not None:
        params["name"] = op_name
    with open_input(*profile) as prof:
        if view in NAME_VIEWS and not op_name:
            raise QueryError(_name_needed(prof, view, profile))
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
        if group_by == "stack" and not _has_stacks(prof, view, params):
            click.echo(
                "aiprof: this trace has no call stacks: call_stack is empty "
                "(record with torch.profiler's with_stack=True)",
                err=True,
            )
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
                else _no_operator(prof, op_name)
                if view in NAME_VIEWS and op_name
                else _EMPTY.get(view, "this profile holds nothing this view reads")
            )
            click.echo(f"aiprof: {title}: no rows ({why})", err=True)
        table = res.table
        notes: list[str] = []
        if view in UNMEASURED_VIEWS and fmt == "table":
            table, notes = _leave_out_unmeasured(table, title)
        emit_table(
            table,
            fmt,
            title=title,
            total=res.total,
            units=res.units,
            extra={"view": view, "offset": offset, "limit": limit},
        )
        for note in notes:  # under the table they are about
            click.echo(note, err=True)


def _leave_out_unmeasured(table: Any, title: str) -> tuple[Any, list[str]]:
    """``table`` without its figure (floating point) columns null on every row, and the
    notes that name them and give the key to the "-" of the figures null in some rows."""
    import pyarrow as pa

    from ..analysis.phases import PHASES

    if not table.num_rows:
        return table, []
    figures = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    gone = [c for c in figures if table.column(c).null_count == table.num_rows]
    some = [c for c in figures if c not in gone and table.column(c).null_count]
    notes = []
    if gone:
        why = " (the phases come from Python stack samples: aiprof record takes them)"
        why = why if any(c.removesuffix("_us") in PHASES for c in gone) else ""
        notes.append(f"aiprof: {title}: {UNMEASURED_NOTE}, so left out: {', '.join(gone)}{why}")
        table = table.drop_columns(gone)
    if some:
        notes.append(f"aiprof: {title}: - in {', '.join(some)}: {UNMEASURED_NOTE}")
    return table, notes


def _quoted(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _name_needed(prof: Any, view: str, paths: tuple[str, ...]) -> str:
    """The one line a view that needs --name says without it: the option, and a few of
    the profile's operator names (``paths``: what the user named, for the command)."""
    import shlex

    from ..analysis.operators import operator_names

    names = operator_names(prof, NAME_EXAMPLES)
    if not names:
        return (
            f"the {view} view needs --name OPERATOR, and this profile has no operators "
            "(no framework operator events: a PyTorch profiler trace, or aiprof record --ops)"
        )
    return (
        f"the {view} view needs --name OPERATOR; operators with the most host time: {_quoted(names)} "
        f"(aiprof report {' '.join(shlex.quote(p) for p in paths)} --view operators lists them all)"
    )


def _no_operator(prof: Any, name: str) -> str:
    """Why operator-kernels has no rows for --name ``name``."""
    from ..analysis.operators import operator_names

    if operator_names(prof, 1, name):
        return f"operator {name!r} launched no device work"
    return f"no operator is named {name!r}; operators with the most host time: {_quoted(operator_names(prof, NAME_EXAMPLES))}"


def _has_stacks(prof: Any, view: str, params: dict[str, Any]) -> bool:
    """Whether any row of ``view`` grouped by stack has one (a view without rows: True,
    its own message says why). The analyser's table is kept by the profile (memo)."""
    from ..analysis import full_table

    table = full_table(prof, view, params)
    if table.num_rows == 0 or "call_stack" not in table.column_names:
        return True
    return any(table.column("call_stack").to_pylist())


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
