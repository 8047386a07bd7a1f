"""The proposer: rules grouped by area turn analyser results into ranked advice.

    from aiprof.advise import advise
    for a in advise(profile)[:3]:
        print(a.severity, a.title, a.summary)

Every rule reads analyser views only (through :func:`aiprof.analysis.run`). The
expected gains of the advice on one profile are capped so that they never add up
to more than 100% of the step time (rules overlap: the same idle time can be
claimed by several of them).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..store import Profile
from .base import RULES, SEVERITIES, Advice, Context, NotEnoughData, Rule, severity

#: Rule modules, one per area.
AREAS: list[str] = [
    "input_pipeline",
    "launch",
    "sync",
    "data_movement",
    "precision",
    "memory",
    "communication",
    "kernels",
    "cluster",
    "python_time",
]


def rules() -> dict[str, Rule]:
    """All rules by id."""
    for m in AREAS:
        importlib.import_module(f"{__name__}.{m}")
    return dict(RULES)


@dataclass
class Verdict:
    """What one rule said about a profile: 'fired', 'silent' or 'no_data'."""

    rule: str
    status: str
    advice: Advice | None = None
    reason: str | None = None


def evaluate(profile: Profile, only: list[str] | None = None) -> list[Verdict]:
    """Run every rule (or those in ``only``) and say what each one found."""
    ctx = Context(profile)
    out: list[Verdict] = []
    for rid, r in rules().items():
        if only and rid not in only:
            continue
        res = r.fn(ctx)
        if isinstance(res, Advice):
            out.append(Verdict(rid, "fired", advice=res))
        elif isinstance(res, NotEnoughData):
            out.append(Verdict(rid, "no_data", reason=res.reason))
        else:
            out.append(Verdict(rid, "silent"))
    cap([v.advice for v in out if v.advice is not None])
    return out


def cap(advice: list[Advice]) -> None:
    """Scale gains down proportionally when they add up to more than 100% of step time.

    Severity stays that of the rule's own estimate (raw_gain)."""
    total = sum(a.raw_gain for a in advice)
    for a in advice:
        a.gain = a.raw_gain / total if total > 1.0 else a.raw_gain


def advise(profile: Profile, min_severity: str = "low") -> list[Advice]:
    """Advice for ``profile``, ranked by expected gain (largest first), at least ``min_severity``.

    The report shows the first three under the overview."""
    floor = SEVERITIES.index(min_severity)
    fired = [v.advice for v in evaluate(profile) if v.advice is not None]
    fired = [a for a in fired if SEVERITIES.index(a.severity) >= floor]
    return sorted(fired, key=lambda a: (-a.gain, SEVERITIES.index(a.severity) * -1, a.rule))


__all__ = ["SEVERITIES", "Advice", "NotEnoughData", "Rule", "Verdict", "advise", "cap", "evaluate", "rules", "severity"]
