"""``aiprof diff A B``: what changed between two runs, with a verdict, and a CI gate.

A (and B) may be one run (a profile, a folder of one run's rank profiles, or a trace
file) or a folder of several runs (baselines), whose steps are pooled. Exit status: 0,
or 1 when a ``--fail-if``/``--fail-if-slower`` rule finds a significant regression
past its threshold, 2 on bad input.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click
import orjson
import pyarrow as pa

from ..analysis import Query
from ..analysis.compare import compare_runs
from ..analysis.gate import Rule, judge, parse_rule, parse_slower
from ..analysis.job_match import job_differences
from ..analysis.regression import VERDICT_SCHEMA, parse_pattern, side, step_block, step_series
from ..errors import AiprofError
from ..render.diff_report import TOP_CHANGES, junit, markdown, notes
from ..render.terminal import emit_table
from ..store import find_profiles, is_profile
from .common import open_input

FORMATS = ["table", "csv", "json", "markdown", "junit"]
#: The warning before the ways the two jobs differ (the compare page's banner).
NOT_SAME_JOB = "A and B come from different jobs; the comparison may mean little"


def runs_in(path: str) -> list[list[str]]:
    """The runs at ``path``, each a list of profile folders (or one trace file).

    A profile, or a folder of profiles of distinct ranks, is one run; a folder of
    profiles that repeat a rank, or of folders each holding a run, is several runs.
    """
    p = Path(path)
    if not p.exists():
        raise AiprofError(f"{p}: no such file or folder")
    if is_profile(p) or not p.is_dir():
        return [[path]]
    direct = find_profiles(p)
    nested = sorted(c for c in p.iterdir() if c.is_dir() and not is_profile(c) and find_profiles(c))
    if nested and not direct:
        return [[str(c)] for c in nested]
    if direct and not nested:
        ranks = [tuple(json.loads((f / "profile.json").read_text()).get("ranks") or [0]) for f in direct]
        if len(set(ranks)) == len(ranks):
            return [[path]]
        return [[str(f)] for f in direct]
    if direct and nested:
        raise AiprofError(f"{p}: holds both profiles and folders of profiles; give one run or a folder of runs")
    return [[path]]  # open_input says what is wrong with it


@click.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--view", type=click.Choice(["kernels", "operators"]), default="kernels", show_default=True)
@click.option("--filter", "filters", multiple=True, help="Filter on the comparison's columns (as in report).")
@click.option("--sort", default="-delta_us", show_default=True, help="Sort column; -COL for descending.")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "--fail-if-slower", "slower", metavar="N%", help="Exit 1 when the step time is significantly more than N% slower."
)
@click.option(
    "--fail-if",
    "rules",
    multiple=True,
    metavar="EXPR",
    help="Exit 1 when a figure rises (FIG>+N%) or falls (FIG<-N%) significantly past N%: a steps-view "
    "column (communication_us, energy_j...), kernel:GLOB or operator:GLOB. Repeatable.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to a file.")
def command(
    a: str,
    b: str,
    view: str,
    filters: tuple[str, ...],
    sort: str,
    limit: int,
    offset: int,
    fmt: str,
    slower: str | None,
    rules: tuple[str, ...],
    output: Path | None,
) -> None:
    """Compare run B against run A (or a folder of baseline runs): per-step figures with
    a statistical verdict, then the largest changes by name."""
    if output is not None and fmt not in ("json", "markdown", "junit"):
        raise AiprofError(f"--output writes the json, markdown or junit report, not {fmt}")
    gate: list[Rule] = ([parse_slower(slower)] if slower else []) + [parse_rule(r) for r in rules]
    patterns = [r.figure for r in gate if parse_pattern(r.figure)]
    query = Query.parse(list(filters), sort, limit, offset)
    with ExitStack() as stack:
        ra = [stack.enter_context(open_input(*run)) for run in runs_in(a)]
        rb = [stack.enter_context(open_input(*run)) for run in runs_in(b)]
        sa, sb = step_series(ra, patterns), step_series(rb, patterns)
        table, total = query.apply(compare_runs(ra, rb, view))
        other = "operators" if view == "kernels" else "kernels"
        top = {view: table.to_pylist()[:TOP_CHANGES]}
        top[other] = Query.parse([], "-delta_us", TOP_CHANGES, 0).apply(compare_runs(ra, rb, other))[0].to_pylist()
        judged = judge(sa, sb, gate)
        # The compare page's rule (world size, devices, shared operator names): each of
        # B's runs against A's first, as the page puts B beside A.
        differences = list(dict.fromkeys(d for r in rb for d in job_differences(ra[0], r)))
        steps: dict[str, Any] = {"a": step_block(sa), "b": step_block(sb)}
        if steps["a"]["mean_step_us"] and steps["b"]["mean_step_us"]:
            steps["ratio"] = steps["b"]["mean_step_us"] / steps["a"]["mean_step_us"]
        doc: dict[str, Any] = {
            "steps": steps,
            "a": side(a, sa),
            "b": side(b, sb),
            **judged,
            "differences": differences,
            "view": view,
            "rows": table.to_pylist(),
            "total": total,
            "top": top,
        }
    for key in ("a", "b"):
        # On stderr whatever the format: a CI log shows it beside the verdict.
        if doc[key]["partial"]:
            click.echo(f"aiprof: warning: {key.upper()}: {_partial_text(doc[key])}", err=True)
    if differences:
        click.echo(f"aiprof: warning: {NOT_SAME_JOB}: {'; '.join(differences)}", err=True)
        if gate:
            click.echo(
                f"aiprof: warning: the gate's verdict ({'FAIL' if doc['failed'] else 'pass'}: "
                f"{', '.join(r.text for r in gate)}) is over runs of different jobs",
                err=True,
            )
    _write(doc, fmt, output, table, total, view, filtered=bool(filters))
    if doc["failed"]:
        sys.exit(1)


def _partial_text(s: dict[str, Any]) -> str:
    reasons = sorted(set(s["partial"]))
    return (
        f"{len(s['partial'])} partial profile(s) ({'; '.join(reasons)}): their steps end where the run "
        "stopped; compare them knowing that"
    )


def _write(
    doc: dict[str, Any], fmt: str, output: Path | None, table: Any, total: int, view: str, *, filtered: bool = False
) -> None:
    if fmt in ("json", "markdown", "junit"):
        if fmt == "markdown":
            text = markdown(doc)
        elif fmt == "junit":
            text = junit(doc)
        else:
            text = orjson.dumps(doc).decode() + "\n"
        if output is not None:
            try:
                output.write_text(text)
            except OSError as e:
                raise AiprofError(f"{output}: cannot write the report: {e.strerror}") from None
        else:
            sys.stdout.write(text)
        return
    if fmt == "csv":
        # Two blocks, each with its header, as the table format: the verdicts, then the view.
        emit_table(pa.Table.from_pylist(doc["verdicts"], schema=VERDICT_SCHEMA), fmt)
        sys.stdout.write("\n")
        emit_table(table, fmt)
        return
    for key in ("a", "b"):
        s = doc[key]
        click.echo(
            f"{key.upper()}: {s['path']}: {s['runs']} run(s), {s['steps']} steps ({s['outliers']} outliers left out); "
            + ("; ".join(s["devices"]) or "no device recorded")
        )
    if doc["note"]:
        click.echo(doc["note"])
    shown = [
        {
            "figure": r["figure"],
            "a_median": r["a_median"],
            "b_median": r["b_median"],
            "unit": r["unit"],
            # Signed and to 0.1%, as the interval beside it and the markdown report.
            "change_pct": "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}",
            "ci_95_pct": "-" if r["ci_low_pct"] is None else f"[{r['ci_low_pct']:+.1f}, {r['ci_high_pct']:+.1f}]",
            "p_value": r["p_value"],
            "verdict": r["verdict"],
        }
        for r in doc["verdicts"]
    ]
    if shown:
        phased = doc.get("phase_rule") is not None
        title = "per-step figures: B vs A (medians" + ("; phases: sampled means, below)" if phased else ")")
        emit_table(pa.Table.from_pylist(shown), "table", title=title)
    for line in notes(doc):
        click.echo(line)
    for g in doc["gate"]:
        click.echo(f"{'FAIL' if g['failed'] else 'pass'}  {g['rule']}: {g['detail']}")
        if g.get("basis"):
            click.echo(f"      tested on {g['basis']}")
    if table.num_rows == 0 and total == 0:
        # An empty box reads as a rendering fault (a CPU run has no kernels).
        click.echo(f"{view}: none match the filter" if filtered else f"{view}: none in either run")
        return
    emit_table(table, "table", title=f"{view}: B - A", total=total)
