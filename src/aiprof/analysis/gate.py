"""The regression gate of ``aiprof diff``: rules on the verdicts, and which of them fail.

A rule is ``FIGURE>+N%`` (fail when B is significantly higher than A by more than N%
of A's median) or ``FIGURE<-N%`` (fail when significantly lower by more than N%).
FIGURE is a figure of :func:`.regression.verdicts`: ``step_time_us``, a breakdown
category or any other steps-view column (``communication_us``, ``energy_j``...), or
``kernel:GLOB`` / ``operator:GLOB`` (the per-step time of the matching names).
``--fail-if-slower 5%`` is ``steady_step_us>+5%`` where both recordings have enough
undisturbed steps (:mod:`.steady`: the machine's load taken out), else
``step_time_us>+5%``; its result says which, and what that figure cannot tell.

"Significantly" is the verdict of :mod:`.stats` (Mann-Whitney at ALPHA). With too few
steps for a test (one step per run), the rule compares the totals against the
threshold alone, and the report says so.

:func:`judge` is the verdict part of a diff that ``aiprof diff --format json`` and the
API's ``/compare`` share, key for key: note, verdicts, gate, failed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import AiprofError
from .regression import PHASE_FIGURES, PHASE_RULE, STEP_TIME, StepSeries, not_measured, parse_pattern, verdicts
from .stats import TOO_FEW
from .steady import LIMITS, MIN_STEADY_STEPS, STEADY, usable

#: The note of a diff whose figures had too few steps for a test.
TOO_FEW_NOTE = (
    "too few steps for a statistical test (fewer than 4 on a side, one per run without step marks): "
    "the mean step compared only"
)

_RULE = re.compile(r"^\s*(?P<figure>[^<>]+?)\s*(?P<op>[<>])\s*(?P<value>[+-]?\d+(?:\.\d+)?)\s*%\s*$")
_ALIASES = {"step_time": STEP_TIME, "duration_us": STEP_TIME, "step": STEP_TIME}
_UP = ("slower", "higher")
_DOWN = ("faster", "lower")


@dataclass(frozen=True)
class Rule:
    figure: str
    op: str
    """'>' (fail on an increase) or '<' (fail on a decrease)."""
    threshold_pct: float
    text: str
    steady: bool = False
    """``--fail-if-slower``: test the steady step (:mod:`.steady`) where both sides have
    it, the wall step time otherwise."""

    def check(self, row: dict[str, Any] | None) -> tuple[bool, str]:
        """(failed, why) for the verdict row of this rule's figure (None: absent)."""
        if row is None:
            return False, f"{self.figure}: absent from both runs (nothing to compare)"
        change = row.get("change_pct")
        verdict = row["verdict"]
        if change is None:
            # A is zero: something that B alone has (a kernel that appeared) is an
            # unbounded increase; nothing on either side is no change.
            grew = (row.get("b_median") or 0) > 0 if verdict != TOO_FEW else (row.get("b_total") or 0) > 0
            change = math.inf if grew else 0.0
        past = change > self.threshold_pct if self.op == ">" else change < self.threshold_pct
        if verdict == TOO_FEW:
            shown = "from 0" if math.isinf(change) else f"{change:+.1f}%"
            return past, f"{self.figure}: mean step {shown} (too few steps for a test; means only)"
        moved = verdict in (_UP if self.op == ">" else _DOWN)
        p = row.get("p_value")
        ptext = f", p={p:.3g}" if p is not None else ""
        shown = "from 0" if math.isinf(change) else f"{change:+.1f}%"
        what = "sampled mean" if self.figure in PHASE_FIGURES else "median"
        return past and moved, f"{self.figure}: {what} {shown} ({verdict}{ptext})"


def parse_rule(text: str) -> Rule:
    """``FIGURE>+N%`` / ``FIGURE<-N%`` -> :class:`Rule`; bad text raises AiprofError."""
    m = _RULE.match(text)
    if not m:
        raise AiprofError(f"--fail-if {text!r}: expected FIGURE>+N% or FIGURE<-N% (e.g. communication_us>+10%)")
    figure = _ALIASES.get(m["figure"], m["figure"])
    value = float(m["value"])
    return Rule(figure, m["op"], value, text.strip())


def parse_slower(text: str) -> Rule:
    """``--fail-if-slower 5%`` (or ``5``) -> the step-time rule."""
    m = re.fullmatch(r"\s*\+?(\d+(?:\.\d+)?)\s*%?\s*", text)
    if not m:
        raise AiprofError(f"--fail-if-slower {text!r}: expected a percentage such as 5%")
    return Rule(STEP_TIME, ">", float(m[1]), f"--fail-if-slower {m[1]}%", steady=True)


def step_figure(a: StepSeries, b: StepSeries) -> tuple[str, str]:
    """The figure ``--fail-if-slower`` tests, and why: the steady step where both sides
    have MIN_STEADY_STEPS undisturbed steps, else the wall step time."""
    na, nb = usable(a.values), usable(b.values)
    if na >= MIN_STEADY_STEPS and nb >= MIN_STEADY_STEPS:
        return STEADY, f"{LIMITS} ({na} and {nb} undisturbed steps)"
    if STEADY not in a.values or STEADY not in b.values:
        why = "a recording holds no per-step CPU waits (aiprof record on Linux writes them)"
    else:
        why = f"too few steps that did not wait for a CPU ({na} and {nb}, fewer than {MIN_STEADY_STEPS})"
    return STEP_TIME, f"wall step time: {why}, so the machine's load is part of this verdict"


def evaluate(
    rules: list[Rule], rows: list[dict[str, Any]], steady_figure: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """One result per rule: rule, figure, failed (bool), detail, and for ``--fail-if-slower``
    basis (which step figure it tested, and what that figure can and cannot tell)."""
    by_figure = {r["figure"]: r for r in rows}
    out = []
    for rule in rules:
        figure, basis = steady_figure if rule.steady and steady_figure else (rule.figure, None)
        failed, detail = replace(rule, figure=figure).check(by_figure.get(figure))
        res = {"rule": rule.text, "figure": figure, "failed": failed, "detail": detail}
        if basis is not None:
            res["basis"] = basis
        out.append(res)
    return out


def check_rules(rules: list[Rule], a: StepSeries, b: StepSeries) -> None:
    """Raise AiprofError for a rule on a figure that neither side has or that matches nothing."""
    for rule in rules:
        if rule.figure not in a.values or rule.figure not in b.values:
            known = sorted(k for k in a.values if k in b.values)
            raise AiprofError(f"{rule.text}: no figure {rule.figure!r}; figures: {', '.join(known)}")
        if parse_pattern(rule.figure) and not (a.values[rule.figure].any() or b.values[rule.figure].any()):
            raise AiprofError(f"{rule.text}: no {rule.figure.partition(':')[0]} matches in either run")


def judge(a: StepSeries, b: StepSeries, rules: list[Rule]) -> dict[str, Any]:
    """note (why a figure was not tested: too few steps, or too few undisturbed ones for
    the steady step; else None), too_few_steps (a side had too few steps for the test),
    verdicts (one row per figure), gate (one result per
    rule), failed (a rule failed) of B against A, not_measured (the figures left out
    because a run did not measure them: ``a``, ``b``, ``both``) and phase_rule (how the
    phases were compared, where a verdict is of a phase; else None); bad rules raise
    AiprofError."""
    check_rules(rules, a, b)
    rows = verdicts(a, b).to_pylist()
    results = evaluate(rules, rows, step_figure(a, b))
    missing = not_measured(a, b)
    where = {f: {"a": "A", "b": "B", "both": "A and B"}[k] for k, names in missing.items() for f in names}
    for g in results:
        if g["figure"] in where:  # a rule on a figure a run did not measure: nothing to test
            g["detail"] = f"{g['figure']}: not measured in {where[g['figure']]}, so not compared"
    few = {r["figure"] for r in rows if r["verdict"] == TOO_FEW}
    notes = [TOO_FEW_NOTE] if few - {STEADY} else []
    if STEADY in few:
        # Steps enough, but too few of them did not wait for a CPU (a loaded machine):
        # the steady step alone is not tested, not "too few steps" of the run.
        notes.append(
            f"{STEADY} not tested: too few steps that did not wait for a CPU ({usable(a.values)} in A, "
            f"{usable(b.values)} in B; the machine was loaded): --fail-if-slower tests the wall step time"
        )
    phased = any(r["figure"] in PHASE_FIGURES for r in rows)
    return {
        "note": "; ".join(notes) or None,
        "too_few_steps": bool(few - {STEADY}),
        "verdicts": rows,
        "gate": results,
        "failed": any(g["failed"] for g in results),
        "not_measured": missing,
        "phase_rule": PHASE_RULE if phased else None,
    }
