"""``aiprof advise PROFILE``: optimization advice with evidence, ranked by expected gain."""

from __future__ import annotations

import sys

import click
import orjson

from ..advise import SEVERITIES, Advice, advise
from .common import open_input


def to_markdown(items: list[Advice]) -> str:
    """The advice as a Markdown document."""
    if not items:
        return "No advice: no rule fired.\n"
    out: list[str] = []
    for i, a in enumerate(items, 1):
        out.append(f"## {i}. {a.title} ({a.severity}, expected gain {100 * a.gain:.1f}% of step time)\n")
        out.append(f"{a.summary}\n")
        out.append("Evidence: " + ", ".join(f"{k} = {v}" for k, v in a.evidence.items()) + "\n")
        out.append(f"Fix: {a.fix}\n")
        for name, code in a.snippets.items():
            out.append(f"```python\n# {name}\n{code}\n```\n")
        out.append(f"Rule `{a.rule}`\n")
    return "\n".join(out)


@click.command("advise")
@click.argument("profile")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option(
    "--min-severity",
    type=click.Choice(list(SEVERITIES)),
    default="low",
    show_default=True,
    help="Leave out advice below this severity.",
)
def command(profile: str, fmt: str, min_severity: str) -> None:
    """Optimization advice for PROFILE (a profile folder, a folder of them, or a trace file)."""
    with open_input(profile) as prof:
        items = advise(prof, min_severity=min_severity)
    if fmt == "json":
        sys.stdout.write(orjson.dumps({"advice": [a.to_json() for a in items]}, default=str).decode() + "\n")
        return
    if fmt == "markdown":
        sys.stdout.write(to_markdown(items))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="Advice", header_style="bold", show_lines=True)
    for col in ("#", "severity", "gain %", "advice", "evidence", "fix"):
        t.add_column(col, overflow="fold")
    for i, a in enumerate(items, 1):
        ev = "\n".join(f"{k}: {v}" for k, v in a.evidence.items())
        t.add_row(
            str(i),
            a.severity,
            f"{100 * a.gain:.1f}",
            f"[bold]{escape(a.title)}[/bold]\n{escape(a.summary)}",
            escape(ev),
            escape(a.fix + ("\n\n" + a.snippets["pytorch"] if "pytorch" in a.snippets else "")),
        )
    Console().print(t)
    if not items:
        Console().print("No advice: no rule fired.")
