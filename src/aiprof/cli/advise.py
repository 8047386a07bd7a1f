"""``aiprof advise PROFILE``: optimization advice with evidence, ranked by expected gain."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from ..advise import SEVERITIES, advise_json, shown_snippet
from .common import open_input


def to_markdown(doc: dict[str, Any]) -> str:
    """The advice (``advise_json``'s document) as Markdown."""
    items = doc["advice"]
    of = doc.get("gain_of", "step time")
    out: list[str] = [f"> Warning: {w}\n" for w in doc.get("warnings", [])]
    if not items:
        return "".join(out) + "\n".join(not_judged_lines(doc, markdown=True)) + "\n"
    for i, a in enumerate(items, 1):
        out.append(f"## {i}. {a['title']} ({a['severity']}, expected gain {a['gain_pct']:.1f}% of {of})\n")
        out.append(f"{a['summary']}\n")
        out.append(_gain_line(a) + "\n")
        out.append("Evidence: " + ", ".join(f"{k} = {v}" for k, v in a["evidence"].items()) + "\n")
        out.append(f"Fix: {a['fix']}\n")
        for name, code in a["snippets"].items():
            out.append(f"```python\n# {name}\n{code}\n```\n")
        for o in a["also"]:
            out.append(f"Same time, also seen: **{o['title']}** (`{o['rule']}`): {o['summary']} Fix: {o['fix']}\n")
        out.append(f"Rule `{a['rule']}`\n")
    out.append(f"Sum of the gains: {doc['gain_sum_pct']:.1f}% of {of} (each µs counted for one cause).\n")
    out.extend(not_judged_lines(doc, markdown=True)[1:2])
    return "\n".join(out)


def not_judged_lines(doc: dict[str, Any], markdown: bool = False) -> list[str]:
    """What to say of the rules that could not judge (``doc["not_judged"]``). Without
    advice: that no rule fired on the data there is, and, per missing data, the rules it
    kept from judging (a profile lacking what the main rules read, say the Python
    samples of a recovered recording, must not read as "nothing wrong"). With advice:
    a line that counts them."""
    groups = doc.get("not_judged") or []
    n = sum(len(g["rules"]) for g in groups)
    bullet = "- " if markdown else "  - "
    if not doc["advice"]:
        if not groups:
            return ["No advice: every rule had the data it reads, and none fired."]
        lines = [
            "No advice: no rule fired on the data this profile holds.",
            f"{n} rules could not judge for lack of data:",
        ]
        lines += [f"{bullet}{g['missing']}: {', '.join(g['rules'])}" for g in groups]
        return lines
    if not n:
        return []
    return [
        "",
        f"{n} rules could not judge for lack of data (aiprof advise --format json lists them under not_judged).",
    ]


def _gain_line(a: dict[str, Any]) -> str:
    if not a["cause"]:
        return "Gain: this advice saves no step time."
    return (
        f"Gain: {a['gain_us'] / 1000:,.2f} ms, the rule's estimate ({a['estimate_us'] / 1000:,.2f} ms) bounded by "
        f"the time attributed to {a['cause']} ({a['cause_us'] / 1000:,.2f} ms)."
    )


@click.command("advise")
@click.argument("profile")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option(
    "--min-severity",
    type=click.Choice([s for s in SEVERITIES if s != "info"]),
    default="low",
    show_default=True,
    help="Leave out advice below this severity.",
)
@click.option("--all", "show_all", is_flag=True, help="Also show the items under 1% gain, as info.")
def command(profile: str, fmt: str, min_severity: str, show_all: bool) -> None:
    """Optimization advice for PROFILE (a profile folder, a folder of them, or a trace file).

    Each µs of step time is attributed to one cause; an item's gain is what its fix
    can save of that cause's time, so the gains add up to at most 100%."""
    with open_input(profile) as prof:
        doc = advise_json(prof, include_info=show_all, min_severity=min_severity)
    if fmt == "json":
        sys.stdout.write(orjson.dumps(doc, default=str).decode() + "\n")
        return
    if fmt == "markdown":
        sys.stdout.write(to_markdown(doc))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console = Console()
    for w in doc["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    t = Table(title="Advice", header_style="bold", show_lines=True)
    for col in ("#", "severity", "gain %", "advice", "evidence", "fix"):
        t.add_column(col, overflow="fold")
    for i, a in enumerate(doc["advice"], 1):
        ev = "\n".join(f"{k}: {v}" for k, v in a["evidence"].items())
        also = "".join(f"\n[dim]same time: {escape(o['title'])}: {escape(o['summary'])}[/dim]" for o in a["also"])
        t.add_row(
            str(i),
            a["severity"],
            f"{a['gain_pct']:.1f}",
            f"[bold]{escape(a['title'])}[/bold]\n{escape(a['summary'])}\n[dim]{escape(_gain_line(a))}[/dim]{also}",
            escape(ev),
            escape(a["fix"]) + (f"\n\n[dim]code: below, fix #{i}[/dim]" if shown_snippet(a) else ""),
        )
    console.print(t)
    # The code under the table, line by line and never folded: a cell would break it
    # mid-identifier (torch.amp.GradS / caler), and it must paste as written.
    for i, a in enumerate(doc["advice"], 1):
        shown = shown_snippet(a)
        if shown:
            console.print(f"[bold]fix #{i}[/bold] ({escape(a['title'])}), {shown[0]}:", soft_wrap=True)
            console.print(Text(shown[1]), soft_wrap=True)
    if not doc["advice"]:
        lines = not_judged_lines(doc)
        lines[0] = lines[0][:-1] + ("." if show_all else " (--all shows the items under 1% gain).")
        for line in lines:
            console.print(escape(line), soft_wrap=True)
    else:
        of = doc.get("gain_of", "step time")
        console.print(f"Sum of the gains: {doc['gain_sum_pct']:.1f}% of {of} (each µs counted for one cause).")
        for line in not_judged_lines(doc)[1:]:
            console.print(escape(line), soft_wrap=True)
