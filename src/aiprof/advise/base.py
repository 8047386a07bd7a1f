"""The proposer's building blocks: rules, the advice they return, severities.

A rule is a small function over a :class:`Context` (the profile and the analyser
views it may read, nothing else). It returns:
- a :class:`Finding` (built with :func:`make`) when its threshold is crossed, with the
  numbers that crossed it; the proposer turns it into :class:`Advice` under the rule's
  registered id, title and cause;
- :class:`NotEnoughData` when the profile lacks what the rule needs (it never guesses);
- ``None`` when the data is there and nothing is wrong.

Severity follows msprof-analyze: high when the expected gain is at least 5% of the
step time, medium from 3%, low from 1%; below 1% an item is ``info`` (hidden unless
asked for: ``aiprof advise --all``).

Gains are never rescaled. Each rule names the cause it claims (analysis/attribution.py
gives each µs of step time to at most one cause) and estimates the time its fix can
save (``estimate_us``); its gain is that estimate, bounded by the time attributed to
its cause, as a share of the profiled step time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.base import run, views
from ..errors import AiprofError
from ..store import Profile

T = TypeVar("T")

#: Expected gain (share of step time) from which advice is high / medium (msprof-analyze)...
HIGH = 0.05
MEDIUM = 0.03
#: ...and below which it is only information, hidden by default (issue 12: a 162 µs copy
#: is not worth an engineer's time).
INFO_BELOW = 0.01
SEVERITIES = ("info", "low", "medium", "high")


def severity(gain: float) -> str:
    """'high' (>= 5% of step time), 'medium' (>= 3%), 'low' (>= 1%) or 'info'."""
    if gain >= HIGH:
        return "high"
    if gain >= MEDIUM:
        return "medium"
    if gain >= INFO_BELOW:
        return "low"
    return "info"


@dataclass
class Advice:
    """One piece of advice, with the evidence that triggered it."""

    rule: str
    """Rule id, ``area.name``."""
    title: str
    area: str
    summary: str
    """One sentence: what was seen."""
    evidence: dict[str, Any]
    """The numbers that triggered the rule; keys end in their unit (``_us``, ``_pct``...)."""
    gain: float
    """Expected gain as a share of the profiled step time (0..1): the rule's estimate,
    bounded by the time attributed to its cause."""
    fix: str
    snippets: dict[str, str] = field(default_factory=dict)
    """Code for the fix: 'pytorch', and the vendor's equivalent where it differs."""
    raw_gain: float = 0.0
    """The rule's own estimate as a share of step time, before the bound by its cause."""
    severity: str = "low"
    thresholds: dict[str, float] = field(default_factory=dict)
    cause: str | None = None
    """The attribution cause whose time the fix saves (None: the advice saves no step time)."""
    estimate_us: float = 0.0
    """What the rule estimates its fix saves (µs)."""
    cause_us: float = 0.0
    """Time attributed to ``cause`` in the profile (µs): the most any advice about it can gain."""
    gain_us: float = 0.0
    """min(estimate_us, cause_us)."""
    also: list[dict[str, Any]] = field(default_factory=list)
    """Other rules that fired about the same cause (the same time): merged into this item."""

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "area": self.area,
            "severity": self.severity,
            "gain_pct": round(100.0 * self.gain, 3),
            "raw_gain_pct": round(100.0 * self.raw_gain, 3),
            "gain_us": round(self.gain_us, 3),
            "estimate_us": round(self.estimate_us, 3),
            "cause": self.cause,
            "cause_us": round(self.cause_us, 3),
            "summary": self.summary,
            "evidence": self.evidence,
            "fix": self.fix,
            "snippets": self.snippets,
            "thresholds": self.thresholds,
            "also": self.also,
        }


@dataclass
class NotEnoughData:
    """The profile lacks what the rule needs; the reason says what."""

    reason: str


@dataclass
class Finding:
    """What a rule saw: :func:`make` builds it, and the proposer turns it into
    :class:`Advice` under the rule's registered id, title, cause and thresholds."""

    summary: str
    evidence: dict[str, Any]
    estimate_us: float
    fix: str
    snippets: dict[str, str]
    title: str | None = None
    """The advice's title where it differs from the rule's (the wording for a profile
    without an accelerator, say); None: the rule's registered title."""


Outcome = Finding | NotEnoughData | None


#: SQL over events.name: the operators a compiled model's trace holds (torch.compile).
COMPILED_SQL = "name IN ('CompiledFunction', 'CompiledFunctionBackward') OR starts_with(name, 'Torch-Compiled Region')"


class Context:
    """What a rule may read: analyser views (cached) and the profile's metadata."""

    def __init__(self, profile: Profile) -> None:
        from ..analysis.operators import big_profile

        self.profile = profile
        self._cache: dict[str, Any] = {}
        self.cache: dict[str, Any] = {}
        """What rules (and the advice's warnings) work out once and share within one advice."""
        # A big profile's views are computed one at a time: each view's per-event
        # intermediates go once its rows are kept (a view that needs one again computes
        # it again), so the memory is the biggest view's, not every view's at once.
        self._one_at_a_time = big_profile(profile.metas) is not None

    def table(self, view: str, **params: Any) -> pa.Table | None:
        """All rows of ``view`` as an Arrow table (None when the view is missing or
        fails): for a view of a row per event (``launches``), whose rows as Python
        dicts would take about 1 KB each (GiBs on a big profile), where :meth:`rows`
        suits a summary. Its text columns are dictionary-encoded (one string per
        distinct value: the table is kept for the whole advice)."""
        got: pa.Table | None = self._view("table", view, params)
        return got

    def rows(self, view: str, **params: Any) -> list[dict[str, Any]] | None:
        """All rows of ``view`` (None when the view is missing or fails)."""
        got: list[dict[str, Any]] | None = self._view("rows", view, params)
        return got

    def _view(self, shape: str, view: str, params: dict[str, Any]) -> Any:
        key = shape + ":" + view + repr(sorted(params.items()))
        if key not in self._cache:
            try:
                compact = functools.partial(_compact, view=view) if shape == "table" else None
                res = run(self.profile, view, params=params, before=compact)
                self._cache[key] = res.table if shape == "table" else res.rows
            except AiprofError:
                self._cache[key] = None
            self.done_with_events()
        return self._cache[key]

    def done_with_events(self) -> None:
        """On a big profile, drop the per-event intermediates a view (or a rule reading
        them itself) just used: the advice holds one view's at a time."""
        if self._one_at_a_time:
            self.profile.forget_per_event()

    @property
    def devices(self) -> list[dict[str, Any]]:
        return self.profile.devices

    @property
    def metas(self) -> list[dict[str, Any]]:
        return self.profile.metas

    def attributed(self) -> dict[str, float]:
        """Cause -> time attributed to it over all ranks and steps (µs)."""
        out: dict[str, float] = {}
        for r in self.rows("attribution") or []:
            out[r["cause"]] = out.get(r["cause"], 0.0) + float(r["time_us"])
        return out

    def total_us(self) -> float:
        """All attributed time (the steps and the gaps between them, all ranks; µs): the
        denominator of every gain."""
        return float(sum(self.attributed().values()))

    def cores(self) -> dict[int, int]:
        """Rank -> CPU cores of its host (the recorder's ``cpu_util.core<N>`` counters), for
        the ranks that recorded them; ranks sharing a host share its cores."""
        per: dict[int, set[str]] = {}
        for r in self.rows("counters") or []:
            m = str(r["metric"] or "")
            if m.startswith("cpu_util.core") and r["rank"] is not None:
                per.setdefault(int(r["rank"]), set()).add(m)
        hosts = max(len({h for m in self.metas for h in m.get("hosts", [])}), 1)
        share = max(len(per) // hosts, 1)  # ranks per host
        return {r: max(len(c) // share, 1) for r, c in per.items()}

    def outliers(self) -> set[tuple[int, int]]:
        """(rank, step) of the outlier steps (analysis/outliers.py)."""
        return {(int(r["rank"]), int(r["step"])) for r in self.rows("steps") or [] if r.get("outlier")}

    def step_us(self) -> float | None:
        """Total step time over all ranks (µs): the sum of the ``steps`` view's windows."""
        rows = self.rows("steps")
        if not rows:
            return None
        total = float(sum(r["duration_us"] or 0.0 for r in rows))
        return total if total > 0 else None

    def steps(self) -> int:
        """Number of (rank, step) windows with a step number; 0 when there are no steps."""
        rows = self.rows("steps") or []
        return sum(1 for r in rows if r.get("step") is not None)

    def device_types(self) -> set[str]:
        """The accelerators' types (cuda, npu, ...): profile.json's devices and the
        events' device types (an import may know its devices' type without their
        properties, torch_npu's trace). The host's CPU (a recording's ``cpu`` device) is
        no accelerator: empty on a CPU-only job, and where the profile names no device."""

        def find() -> set[str]:
            got = self.profile.con.execute(
                "SELECT DISTINCT device_type FROM events WHERE device_type IS NOT NULL AND device_type <> 'cpu'"
            ).fetchall()
            named = {str(d.get("type")) for d in self.devices if d.get("type")}
            return ({str(r[0]) for r in got} | named) - {"cpu"}

        found: set[str] = self.profile.memo("advise:device_types", find)
        return found

    def device_work(self) -> bool:
        """Whether the profile holds work that ran on an accelerator (kernels, copies,
        sets, device-side collectives): without it, no device idle time is measured,
        even where the profile names a device (telemetry alone, ``--no-device-trace``)."""

        def find() -> bool:
            got = self.profile.con.execute(
                "SELECT count(*) FROM (SELECT 1 FROM events WHERE device_type IS NOT NULL AND device_type <> 'cpu' "
                "LIMIT 1)"
            ).fetchall()
            return bool(got and got[0][0])

        found: bool = self.profile.memo("advise:device_work", find)
        return found

    def mindspore(self) -> bool:
        """Whether any input came from MindSpore's profiler (its importers' names)."""
        return any(str(s.get("importer", "")).startswith("mindspore") for m in self.metas for s in m.get("sources", []))

    def compiled(self) -> bool:
        """Whether the model already runs compiled (torch.compile's AOTAutograd
        ``CompiledFunction`` / ``CompiledFunctionBackward`` operators, or Dynamo's
        ``Torch-Compiled Region``): advice then does not tell it to compile."""

        def find() -> bool:
            got = self.profile.con.execute(
                f"SELECT count(*) FROM events WHERE kind = 'cpu_op' AND ({COMPILED_SQL}) LIMIT 1"
            ).fetchall()
            return bool(got and got[0][0])

        found: bool = self.profile.memo("advise:compiled", find)
        return found

    def windows(self) -> int:
        """Number of (rank, step) windows, counting a rank without steps as one."""
        return len(self.rows("steps") or [])


RuleFn = Callable[[Context], Outcome]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    area: str
    fn: RuleFn
    thresholds: dict[str, float]
    anchor: str
    """Which tool's rule this follows (tb-profiler, HTA, nsys analyze, XProf, ...)."""
    cause: str | None = None
    """The attribution cause whose time this rule's fix saves."""

    def advise(self, found: Finding) -> Advice:
        """The advice of this rule from what it found (the gain is set later)."""
        return Advice(
            rule=self.id,
            title=found.title or self.title,
            area=self.area,
            summary=found.summary,
            evidence=found.evidence,
            gain=0.0,
            fix=found.fix,
            snippets=found.snippets,
            thresholds=dict(self.thresholds),
            cause=self.cause,
            estimate_us=max(found.estimate_us, 0.0) if self.cause else 0.0,
        )


RULES: dict[str, Rule] = {}


def rule(
    rule_id: str,
    title: str,
    *,
    anchor: str,
    cause: str | None,
    thresholds: dict[str, float] | None = None,
) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as rule ``rule_id`` (``area.name``), claiming time of ``cause``."""

    def deco(fn: RuleFn) -> RuleFn:
        RULES[rule_id] = Rule(rule_id, title, rule_id.split(".")[0], fn, dict(thresholds or {}), anchor, cause)
        return fn

    return deco


def make(summary: str, evidence: dict[str, Any], estimate_us: float, fix: str, **snippets: str) -> Finding:
    """What a rule found: one sentence, the numbers behind it (floats rounded to 3
    places), what it expects its fix to save (µs), the fix and its code snippets. The
    rule's id, title and cause come from its registration (:func:`rule`); the gain is
    set by the proposer (:func:`aiprof.advise.evaluate`), which bounds the estimate by
    the cause's time."""
    return Finding(
        summary=summary,
        evidence={k: (round(v, 3) if isinstance(v, float) else v) for k, v in evidence.items()},
        estimate_us=float(estimate_us),
        fix=fix,
        snippets=dict(snippets),
    )


def needs(
    precondition: Callable[[Context], T | NotEnoughData],
) -> Callable[[Callable[[Context, T], Outcome]], RuleFn]:
    """A rule that runs on what ``precondition`` reads from the context; where that
    says there is not enough data, the rule says so too without running."""

    def deco(fn: Callable[[Context, T], Outcome]) -> RuleFn:
        @functools.wraps(fn)
        def run(ctx: Context) -> Outcome:
            got = precondition(ctx)
            if isinstance(got, NotEnoughData):
                return got
            return fn(ctx, got)

        return run

    return deco


def stack_frames(ctx: Context, rank: int) -> dict[int, tuple[int, str, str, int]]:
    """Frame id -> (parent, function, file, line) of the stack frames of ``rank``'s
    Python samples, read once per advice run."""
    from ..analysis.common import fetch

    key = f"advise:frames:{rank}"
    if key not in ctx.cache:
        fr = fetch(ctx.profile, "SELECT frame_id, parent, function, file, line FROM frames WHERE rank = ?", [rank])
        ctx.cache[key] = {
            int(f): (int(p), str(fn), str(fl), int(ln))
            for f, p, fn, fl, ln in zip(
                fr["frame_id"].tolist(),
                fr["parent"].tolist(),
                fr["function"],
                fr["file"],
                fr["line"].tolist(),
                strict=True,
            )
        }
    got: dict[int, tuple[int, str, str, int]] = ctx.cache[key]
    return got


def share(part: float | None, whole: float | None) -> float:
    """part / whole, 0 when either is missing or whole is 0."""
    if not part or not whole:
        return 0.0
    return float(part) / float(whole)


def _compact(table: pa.Table, view: str) -> pa.Table:
    """``table`` with its text columns dictionary-encoded, a column at a time, before the
    query sorts it (the 5.6M launches of bench/huge_import.py's trace: 1.67 GiB as text,
    and as much again sorted). ``name``, which breaks the sort's ties, stays text (Arrow
    sorts no dictionary column), as do the columns ``view`` sorts on by default."""
    keep = {"name"} | {c.lstrip("-") for c in views()[view].default_sort}
    cols = []
    for name, col in zip(table.column_names, table.columns, strict=True):
        if name not in keep and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = pc.dictionary_encode(col.combine_chunks())
        cols.append(col)
    return pa.table(cols, names=table.column_names)
