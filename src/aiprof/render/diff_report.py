"""``aiprof diff`` reports for CI: Markdown (a pull-request comment) and JUnit XML.

Both take the document ``aiprof diff --format json`` prints (see cli/diff.py): the
sides (paths, runs, steps, devices), the verdicts, the gate's rule results and the
top changed kernels and operators.
"""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree as ET

from .terminal import format_cell

#: Changed kernels / operators listed in a report.
TOP_CHANGES = 10


#: Characters XML 1.0 cannot carry at all (control characters other than tab, LF, CR).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _x(text: str) -> str:
    return _NOT_XML.sub("?", text)


def _side(doc: dict[str, Any], key: str) -> str:
    s = doc[key]
    runs = f"{s['runs']} runs, " if s["runs"] > 1 else ""
    dev = "; ".join(s["devices"]) or "no device recorded"
    return f"{s['path']} ({runs}{s['steps']} steps, {s['outliers']} outliers left out; {dev})"


def _ci(r: dict[str, Any]) -> str:
    if r["ci_low_pct"] is None:
        return "-"
    return f"[{r['ci_low_pct']:+.1f}%, {r['ci_high_pct']:+.1f}%]"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def notes(doc: dict[str, Any]) -> list[str]:
    """The lines every report says once under its verdicts: the figures left out as not
    measured, and how the phases of the Python samples were compared."""
    from ..analysis.regression import not_measured_text

    out = [not_measured_text(doc.get("not_measured") or {}), doc.get("phase_rule")]
    return [x for x in out if x]


def markdown(doc: dict[str, Any]) -> str:
    """The report as GitHub-flavoured Markdown."""
    failed = [g for g in doc["gate"] if g["failed"]]
    head = "❌ regression" if failed else ("✅ no regression" if doc["gate"] else "aiprof diff")
    lines = [f"### {head}", "", f"- **A**: {_side(doc, 'a')}", f"- **B**: {_side(doc, 'b')}"]
    if doc.get("note"):
        lines.append(f"- {doc['note']}")
    if doc["gate"]:
        lines += ["", "| rule | result | detail |", "|---|---|---|"]
        for g in doc["gate"]:
            lines.append(f"| `{g['rule']}` | {'FAIL' if g['failed'] else 'pass'} | {g['detail']} |")
        lines += [f"- `{g['rule']}` tested on {g['basis']}" for g in doc["gate"] if g.get("basis")]
    lines += [
        "",
        "| figure | A median | B median | change | 95% CI | p | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc["verdicts"]:
        p = "-" if r["p_value"] is None else f"{r['p_value']:.3g}"
        lines.append(
            f"| {r['figure']} | {format_cell(r['a_median'])} {r['unit']} | {format_cell(r['b_median'])} {r['unit']} "
            f"| {_pct(r['change_pct'])} | {_ci(r)} | {p} | {r['verdict']} |"
        )
    if notes(doc):
        lines += ["", *(f"- {n}" for n in notes(doc))]
    for view, rows in doc["top"].items():
        if not rows:
            continue
        lines += ["", f"**Top changed {view}** (B - A, µs per run)", "", "| name | A µs | B µs | Δ µs | Δ | status |"]
        lines.append("|---|---:|---:|---:|---:|---|")
        for r in rows[:TOP_CHANGES]:
            name = str(r["name"]).replace("|", "\\|")
            if len(name) > 80:
                name = name[:79] + "…"
            where = f" ({r['device_type']})" if r.get("device_type") else ""
            lines.append(
                f"| `{name}`{where} | {format_cell(r['a_us'])} | {format_cell(r['b_us'])} | {format_cell(r['delta_us'])} "
                f"| {_pct(r['delta_pct'])} | {r['status']} |"
            )
    return "\n".join(lines) + "\n"


def junit(doc: dict[str, Any]) -> str:
    """The report as JUnit XML: one test case per gate rule (failed = regression) and
    one per figure compared (informational, never failed), the top changes in
    system-out."""
    suite = ET.Element("testsuite", name="aiprof diff")
    cases = 0
    failures = 0
    for g in doc["gate"]:
        case = ET.SubElement(suite, "testcase", classname="aiprof.gate", name=_x(g["rule"]))
        cases += 1
        detail = g["detail"] + (f"; tested on {g['basis']}" if g.get("basis") else "")
        if g["failed"]:
            failures += 1
            ET.SubElement(case, "failure", message=_x(g["detail"]), type="regression").text = _x(detail)
        else:
            ET.SubElement(case, "system-out").text = _x(detail)
    for r in doc["verdicts"]:
        case = ET.SubElement(suite, "testcase", classname="aiprof.figures", name=_x(r["figure"]))
        cases += 1
        p = "-" if r["p_value"] is None else f"{r['p_value']:.3g}"
        ET.SubElement(case, "system-out").text = (
            f"A median {format_cell(r['a_median'])} {r['unit']}, B median {format_cell(r['b_median'])} {r['unit']}, "
            f"change {_pct(r['change_pct'])}, 95% CI {_ci(r)}, p {p}: {r['verdict']}"
        )
    out = [f"A: {_side(doc, 'a')}", f"B: {_side(doc, 'b')}"]
    if doc.get("note"):
        out.append(doc["note"])
    out += notes(doc)
    for view, rows in doc["top"].items():
        for r in rows[:TOP_CHANGES]:
            where = f" ({r['device_type']})" if r.get("device_type") else ""
            out.append(
                f"{view}: {r['name']}{where}: {format_cell(r['delta_us'])} µs ({_pct(r['delta_pct'])}, {r['status']})"
            )
    ET.SubElement(suite, "system-out").text = _x("\n".join(out))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    root = ET.Element("testsuites", name="aiprof", tests=str(cases), failures=str(failures))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
