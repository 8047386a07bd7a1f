"""``aiprof report PROFILE``: the overview and the tables, in the terminal, CSV or JSON."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    import pyarrow as pa

# The analysis and the store (DuckDB, Arrow) are imported by the command, not here:
# ``aiprof report --help`` and ``aiprof --help`` then cost click alone.


def format_cell(v: Any) -> str:
    """:func:`aiprof.render.terminal.format_cell`, imported at first use (it imports Arrow)."""
    from ..render.terminal import format_cell as fmt

    return fmt(v)


VIEW_NAMES = ("overview", "steps", "operators", "kernels", "idle", "memory", "counters", "python", "events")


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
        if view == "overview" and fmt == "table" and not filters:
            _overview_table(prof)
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


def _energy_lines(console: Any, prof: Any) -> None:
    """One line per device with power or energy counters (docs/energy.md)."""
    from ..analysis.energy import device_summary

    for e in device_summary(prof):
        line = f"energy: rank {e['rank']} {e['device_type']} {e['device']}: {format_cell(e['energy_j'])} J"
        line += f" (±{format_cell(e['error_j'])}), {format_cell(e['avg_w'])} W average"
        if e["j_per_step"] is not None:
            line += f", {format_cell(e['j_per_step'])} J per step"
        if e["j_per_sample"] is not None:
            line += f", {format_cell(e['j_per_sample'])} J per sample"
        console.print(line, highlight=False)


def _device_label(d: dict[str, Any]) -> str:
    """A device's name, else its type and index (an SMI log names no model): never "None"."""
    if d.get("name"):
        return str(d["name"])
    return " ".join(str(d[k]) for k in ("type", "index") if d.get(k) is not None) or "unnamed device"


def _overview_table(prof: Any) -> None:
    """The overview as a person reads it: profile facts, then the all-steps split."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..analysis import Query, run

    console = Console()
    metas = prof.metas
    devices = prof.devices
    ranks = sorted({r for m in metas for r in m.get("ranks", [])})
    console.print(f"[bold]aiprof report[/bold]  {escape(', '.join(str(p) for p in prof.paths))}")
    srcs = [s for m in metas for s in m.get("sources", [])]
    if srcs:
        console.print(
            "sources: " + escape(", ".join(f"{s.get('importer')}:{s.get('path', '').rsplit('/', 1)[-1]}" for s in srcs))
        )
    console.print(
        escape(f"ranks: {ranks or '-'}   devices: " + (", ".join(sorted({_device_label(d) for d in devices})) or "-"))
    )
    for w in prof.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    if any(m.get("partial") for m in metas):
        console.print("[yellow]this profile is partial: the recording or file was cut short[/yellow]")
    ov = run(prof, "overview", Query()).table.to_pylist()
    st = run(prof, "steps", Query()).table
    console.print(escape(steps_line(metas, st.to_pylist())))
    _energy_lines(console, prof)
    for rank in sorted({r["rank"] for r in ov}):
        mine = [r for r in ov if r["rank"] == rank and r["step"] is None]
        bd = [r for r in mine if r["section"] == "breakdown"]
        ph = [r for r in mine if r["section"] == "phases"]
        # Without operator events the breakdown is all "other": the phases say more.
        if not ph or any(r["time_us"] for r in bd if r["category"] != "other"):
            _split_table(console, f"rank {rank}: step time breakdown (all steps)", bd)
        if ph:
            title = f"rank {rank}: step time by phase (all steps, from Python samples)"
            _split_table(console, title, [r for r in ph if r["time_us"]])
        dev = [r for r in ov if r["rank"] == rank and r["section"] in ("device", "utilization")]
        if dev and not any(r["time_us"] for r in dev):
            # A host-only recording: a table of zeros would read as an idle device.
            console.print(f"rank {rank}: no device activity in the profile")
        elif dev:
            t2 = Table(title=f"rank {rank}: device time", header_style="bold")
            t2.add_column("figure")
            t2.add_column("time (µs)", justify="right")
            t2.add_column("%", justify="right")
            for r in dev:
                label = {"device_busy": "busy (of step time)"}.get(r["category"], f"{r['category']} (of active span)")
                t2.add_row(label, format_cell(r["time_us"]), format_cell(r["percent"]))
            console.print(t2)
    _top_advice(console, prof)
    top = run(prof, "kernels", Query.parse([], "-total_us", 5)).table
    if top.num_rows:
        emit_top(console, top, "top kernels by total time", ["name", "count", "total_us", "pct"])
    ops = run(prof, "operators", Query.parse([], "-host_self_us", 5)).table
    if ops.num_rows and "host_self_us" in ops.column_names:
        emit_top(console, ops, "top operators by host self time", ["name", "calls", "host_self_us", "device_total_us"])
    if prof.tables.get("samples"):
        py = run(prof, "python", Query.parse([], "-self_samples", 5)).table
        if py.num_rows:
            emit_top(
                console,
                py,
                "top Python functions by sampled self time",
                ["function", "self_pct", "self_ms", "total_pct"],
            )
    console.print(
        "[dim]more: aiprof report PROFILE --view steps|operators|kernels|idle|memory|counters|energy|python|events[/dim]"
    )


def _split_table(console: Any, title: str, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    t = Table(title=title, header_style="bold")
    t.add_column("category")
    t.add_column("time (µs)", justify="right")
    t.add_column("%", justify="right")
    for r in rows:
        t.add_row(r["category"], format_cell(r["time_us"]), format_cell(r["percent"]))
    console.print(t)


def steps_line(metas: list[dict[str, Any]], steps: list[dict[str, Any]]) -> str:
    """ "steps: N per rank" (or each rank's count when they differ), and how they were found."""
    per: dict[int, int] = {}
    for r in steps:
        if r["step"] is not None:
            per[r["rank"]] = per.get(r["rank"], 0) + 1
    if not per:
        text = "steps: none found (mark them with aiprof.record.mark_step())"
    elif len(set(per.values())) == 1:
        n = next(iter(per.values()))
        text = f"steps: {n}" + (f" per rank ({len(per)} ranks)" if len(per) > 1 else "")
    else:
        text = "steps: " + ", ".join(f"rank {r}: {n}" for r, n in sorted(per.items()))
    rules = {str((m.get("record") or {}).get("steps", {}).get("rule")) for m in metas if m.get("record")}
    if not rules:  # an imported trace: the recording package is not worth its import
        return text
    from ..record.finalizer import HOW_TEXT

    words = [HOW_TEXT[r] for r in sorted(rules) if r in HOW_TEXT]
    return text + (f" ({'; '.join(words)})" if per and words else "")


def emit_top(console: Any, table: pa.Table, title: str, cols: list[str]) -> None:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, header_style="bold")
    for c in cols:
        text = c in ("name", "function")
        t.add_column(c, justify="left" if text else "right", overflow="fold", max_width=70 if text else None)
    for row in table.select(cols).to_pylist():
        t.add_row(*[Text(format_cell(v)) for v in row.values()])
    console.print(t)


def _top_advice(console: Any, prof: Any) -> None:
    """The three advice items with the largest expected gain, when the proposer exists."""
    try:
        from .. import advise as adv  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return
    from rich.markup import escape

    items = adv.advise(prof)[:3]
    if not items:
        return
    console.print("[bold]top advice[/bold] (aiprof advise PROFILE for all)")
    for a in items:
        console.print(
            escape(f"  - [{a.severity}] {a.title}: {a.summary} (expected gain {100 * a.gain:.1f}% of step time)")
        )


def dump_json(obj: Any) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(obj, default=str).decode() + "\n")
