"""The proposer: rules grouped by area turn analyser results into ranked advice.

    from aiprof.advise import advise
    for a in advise(profile)[:3]:
        print(a.severity, a.title, a.summary)

Every rule reads analyser views only (through :func:`aiprof.analysis.run`). Gains are
never rescaled: the attribution view (analysis/attribution.py) gives each µs of step
time to at most one cause, each rule names the cause its fix acts on, and its gain is
its own estimate bounded by the time of that cause. Rules about the same cause (the
same time) become one piece of advice, the one with the largest gain, that lists the
others under ``also``; so the gains of the advice add up to at most 100%.

All faces (``aiprof advise``, the report's top advice, the HTML file, the REST API)
call :func:`advise_json` or :func:`advise`.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from ..store import Profile
from .base import RULES, SEVERITIES, Advice, Context, Finding, NotEnoughData, Rule, severity

#: Rule modules, one per area.
AREAS: list[str] = [
    "steps",
    "input_pipeline",
    "runtime",
    "launch",
    "sync",
    "data_movement",
    "precision",
    "memory",
    "communication",
    "kernels",
    "cluster",
    "cluster_job",
    "python_time",
]


def rules() -> dict[str, Rule]:
    """All rules by id, in the order of :data:`AREAS` (then each module's own), whatever
    order their modules were first imported in: the verdicts, and the not-judged list
    made from them, read the same in every process (a test session that imported one
    rule module early had listed its rules first)."""
    for m in AREAS:
        importlib.import_module(f"{__name__}.{m}")
    place = {f"{__name__}.{m}": i for i, m in enumerate(AREAS)}
    ordered = sorted(RULES.values(), key=lambda r: place.get(r.fn.__module__, len(AREAS)))
    return {r.id: r for r in ordered}


@dataclass
class Verdict:
    """What one rule said about a profile: 'fired', 'silent' or 'no_data'."""

    rule: str
    status: str
    advice: Advice | None = None
    reason: str | None = None


def evaluate(profile: Profile, only: list[str] | None = None, ctx: Context | None = None) -> list[Verdict]:
    """Run every rule (or those in ``only``) and say what each one found; the advice of
    each fired rule carries its gain (its estimate bounded by its cause's time)."""
    from ..cluster.index import from_index

    indexed = from_index(profile)
    if only is None and indexed:
        # A many-rank job opened through its index: the across-rank rules only (each
        # rank's own advice: aiprof advise OUT/rank<N>.aiprof).
        only = [rid for rid in rules() if rid.startswith("cluster.")]
    ctx = ctx or Context(profile)
    out: list[Verdict] = []
    for rid, r in rules().items():
        if only and rid not in only:
            continue
        res = r.fn(ctx)
        if isinstance(res, Finding):
            advice = fit_snippets(r.advise(res), ctx.device_types(), mindspore=ctx.mindspore())
            out.append(Verdict(rid, "fired", advice=without_steps(advice) if not ctx.steps() else advice))
        elif isinstance(res, NotEnoughData):
            out.append(Verdict(rid, "no_data", reason=res.reason))
        else:
            out.append(Verdict(rid, "silent"))
    ctx.cache[VERDICTS] = out
    fired = [v.advice for v in out if v.advice is not None]
    if fired and indexed:
        # The index holds per-rank summaries, no events to attribute: each item is
        # bounded by the job's step time alone.
        from .cluster_job import job_us

        total = job_us(ctx)
        bound(fired, {a.cause: total for a in fired if a.cause}, total)
    elif fired:
        bound(fired, ctx.attributed(), ctx.total_us())
    return out


#: Where a profile marks no steps, its "step" is the rank's whole profiled window
#: (analysis/ranks.py): the advice says so instead of speaking of steps it does not have.
_STEP_WORDS = (
    (re.compile(r"\bof the step time\b|\bof the step\b(?!s)"), "of the profiled time (no steps marked)"),
    (re.compile(r"\b(inside|in) the steps\b"), "in the profiled time"),
)


def without_steps(advice: Advice) -> Advice:
    """``advice`` worded for a profile without steps (:data:`_STEP_WORDS`)."""
    for pattern, words in _STEP_WORDS:
        advice.summary = pattern.sub(words, advice.summary)
        advice.title = pattern.sub(words, advice.title)
    return advice


#: CUDA's PyTorch API as torch_npu spells it (it mirrors ``torch.cuda`` as ``torch.npu``
#: and takes the device ``'npu'``); NCCL's logs as HCCL's.
TO_NPU = (
    ("torch.cuda.CUDAGraph", "torch.npu.NPUGraph"),
    ("torch.cuda.", "torch.npu."),
    ("'cuda'", "'npu'"),
    ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET", "ASCEND_GLOBAL_LOG_LEVEL=1 (HCCL's logs)"),
    ("NCCL_DEBUG=INFO", "ASCEND_GLOBAL_LOG_LEVEL=1 (HCCL's logs)"),
    ("CUDA graphs", "graphs"),
)


#: The snippets in PyTorch (and torch_npu, the Ascend form): never shown for a MindSpore profile.
TORCH_SNIPPETS = ("pytorch", "ascend")


def fit_snippets(advice: Advice, types: set[str], mindspore: bool = False) -> Advice:
    """``advice``'s code for the profile's framework and devices. Where the profile comes
    from MindSpore (``mindspore``), its MindSpore form alone, or no code where the rule
    has none (its fix then says what to change): never PyTorch code
    (:data:`TORCH_SNIPPETS`). Elsewhere no MindSpore form, and, where the devices are
    known, no Ascend form where none is an Ascend NPU (a CUDA trace's reader has no use
    for torch_npu); where all the accelerators are Ascend NPUs, the PyTorch code as
    torch_npu spells it (:data:`TO_NPU`), with the Ascend form after it. ``types``: the
    accelerators' types (:meth:`.base.Context.device_types`; cpu left out)."""
    types = types - {"cpu"}
    if mindspore:
        advice.snippets = {k: v for k, v in advice.snippets.items() if k not in TORCH_SNIPPETS}
        return advice
    advice.snippets = {k: v for k, v in advice.snippets.items() if k != "mindspore"}
    if types and "npu" not in types:
        advice.snippets = {k: v for k, v in advice.snippets.items() if k != "ascend"}
    elif types and "cuda" not in types and "pytorch" in advice.snippets:
        code = advice.snippets["pytorch"]
        for cuda, npu in TO_NPU:
            code = code.replace(cuda, npu)
        if "npu" in code:
            code = "import torch_npu  # Ascend\n" + code
        extra = advice.snippets.get("ascend")
        advice.snippets = {k: v for k, v in advice.snippets.items() if k != "ascend"} | {
            "pytorch": code + (f"\n{extra}" if extra else "")
        }
    return advice


#: The one snippet a short face (the terminal table, the notebook) shows: PyTorch's, else
#: MindSpore's (a MindSpore profile has no PyTorch code: :func:`fit_snippets`).
SHOWN_SNIPPETS = (("pytorch", "PyTorch"), ("mindspore", "MindSpore"))


def shown_snippet(item: dict[str, Any]) -> tuple[str, str] | None:
    """(framework, code) of the snippet a short face shows for ``item`` (an
    :meth:`Advice.to_json`), or None where the fix has no code."""
    snippets = item.get("snippets") or {}
    for key, label in SHOWN_SNIPPETS:
        if key in snippets:
            return label, str(snippets[key])
    return None


def bound(advice: list[Advice], attributed: dict[str, float], total_us: float) -> None:
    """Set each item's gain: its estimate, at most the time attributed to its cause, as
    a share of ``total_us``. Nothing is rescaled."""
    for a in advice:
        a.cause_us = attributed.get(a.cause, 0.0) if a.cause else 0.0
        a.gain_us = min(a.estimate_us, a.cause_us)
        a.gain = a.gain_us / total_us if total_us > 0 else 0.0
        a.raw_gain = a.estimate_us / total_us if total_us > 0 else 0.0
        a.severity = severity(a.gain)


def merge(advice: list[Advice]) -> list[Advice]:
    """One item per cause: the rule with the largest gain (ties: rule order), listing the
    other rules about the same time under ``also``. Items without a cause stay alone."""
    order = {rid: i for i, rid in enumerate(rules())}
    groups: dict[str, list[Advice]] = {}
    alone: list[Advice] = []
    for a in advice:
        if a.cause is None:
            alone.append(a)
        else:
            groups.setdefault(a.cause, []).append(a)
    out = list(alone)
    for items in groups.values():
        items.sort(key=lambda a: (-a.gain_us, -a.estimate_us, order.get(a.rule, 0)))
        head = items[0]
        head.also = [
            {
                "rule": o.rule,
                "title": o.title,
                "summary": o.summary,
                "gain_pct": round(100.0 * o.gain, 3),
                "evidence": o.evidence,
                "fix": o.fix,
            }
            for o in items[1:]
        ]
        out.append(head)
    return out


def advise(
    profile: Profile, min_severity: str = "low", include_info: bool = False, ctx: Context | None = None
) -> list[Advice]:
    """Advice for ``profile``, one item per cause, ranked by expected gain (largest
    first), at least ``min_severity``; items under 1% gain (``info``) only with
    ``include_info``. The report shows the first three under the overview."""
    floor = SEVERITIES.index(min_severity)
    if include_info and min_severity == "low":
        floor = SEVERITIES.index("info")
    fired = merge([v.advice for v in evaluate(profile, ctx=ctx) if v.advice is not None])
    fired = [a for a in fired if SEVERITIES.index(a.severity) >= floor]
    return sorted(fired, key=lambda a: (-a.gain, -SEVERITIES.index(a.severity), a.rule))


def advise_json(profile: Profile, include_info: bool = False, min_severity: str = "low") -> dict[str, Any]:
    """The advice as JSON, the one shape every face shows: {advice, total_us, causes,
    warnings}. ``causes`` is the attribution (cause -> µs) the gains are bounded by."""
    from ..cluster.index import from_index

    ctx = Context(profile)
    items = advise(profile, min_severity=min_severity, include_info=include_info, ctx=ctx)
    if from_index(profile):
        # A job opened through its index: the gains are shares of the job's step time
        # (evaluate), and nothing is attributed from the events (reading every rank's
        # events for them took minutes on 1,000 ranks); each rank's own: advise OUT/rank<N>.aiprof.
        from .cluster_job import job_us

        total, causes, notes = job_us(ctx), {}, []
    else:
        total, causes, notes = ctx.total_us(), ctx.attributed(), warnings(ctx)
    return {
        "advice": [a.to_json() for a in items],
        "total_us": round(total, 3),
        "causes": {k: round(v, 3) for k, v in sorted(causes.items(), key=lambda kv: -kv[1])},
        "gain_sum_pct": round(sum(100.0 * a.gain for a in items), 3),
        "gain_of": gain_of(profile, ctx),
        "warnings": notes,
        "not_judged": not_judged(ctx.cache.get(VERDICTS) or []),
    }


def gain_of(profile: Profile, ctx: Context) -> str:
    """What the gains are shares of, as every face words it: "step time", or "profiled
    time" for a profile without steps (its whole run: ``without_steps``)."""
    from ..cluster.index import from_index

    return "step time" if from_index(profile) or ctx.steps() else "profiled time"


#: Where :func:`evaluate` leaves its verdicts in the context's cache.
VERDICTS = "advise:verdicts"


def not_judged(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """The rules that could not judge for lack of data, one entry per missing data
    (each rule's ``NotEnoughData`` reason): ``{"missing": reason, "rules": [ids]}``, the
    rules any recording feeds first (:data:`_NOT_JUDGED_ORDER`), then the largest
    groups. A rule that did not fire is silent only where it had the data."""
    groups: dict[str, list[str]] = {}
    for v in verdicts:
        if v.status == "no_data":
            groups.setdefault(v.reason or "not enough data", []).append(v.rule)

    def order(kv: tuple[str, list[str]]) -> tuple[int, int, str]:
        area = kv[1][0].split(".")[0]
        return (
            _NOT_JUDGED_ORDER.index(area) if area in _NOT_JUDGED_ORDER else len(_NOT_JUDGED_ORDER),
            -len(kv[1]),
            kv[0],
        )

    return [{"missing": k, "rules": r} for k, r in sorted(groups.items(), key=order)]


#: The order of the areas in :func:`not_judged`: first the rules any recording feeds (its
#: Python samples, its steps), then the host's operators, then the device's, then many ranks'.
_NOT_JUDGED_ORDER = (
    "python",
    "steps",
    "input",
    "sync",
    "runtime",
    "launch",
    "data",
    "kernels",
    "precision",
    "memory",
    "comm",
    "cluster",
)


#: A device operation that starts more than this before the host call that launched it
#: *starts* proves that the device's clock runs ahead of the host's: no launch can start
#: work before it is made. (One that starts before the call *ends* is ordinary
#: asynchronous launching: the kernel runs while cudaLaunchKernel returns; its launch
#: delay counts as 0, as Holistic Trace Analysis clips it, and nothing is said.) The
#: margin absorbs the rounding of the two clocks' timestamps to the trace's µs.
CLOCK_SKEW_TOLERANCE_US = 1.0


def clock_skew(ctx: Context) -> tuple[int, float]:
    """(launches whose first device operation starts more than
    :data:`CLOCK_SKEW_TOLERANCE_US` before the launch call starts, the largest such lead
    in µs): (0, 0.0) where no device clock provably runs ahead of its host's."""
    # Such a launch also starts before its call ends: the launch view's count of those
    # (already read by the rules) says whether to look at the launches one by one.
    if not sum(int(r["negative_delays"] or 0) for r in ctx.rows("launch") or [] if r["operator"] == "(all)"):
        return 0, 0.0
    from ..analysis.launch import launch_rows

    d = launch_rows(ctx.profile)
    lead = (d["ts"] - d["kts"])[d["first"]]  # ns the device starts before the call starts
    ahead = lead[lead > CLOCK_SKEW_TOLERANCE_US * 1000.0]
    del d
    ctx.done_with_events()
    return len(ahead), float(ahead.max()) / 1000.0 if len(ahead) else 0.0


def warnings(ctx: Context) -> list[str]:
    """What the reader of the advice should know about the data behind it."""
    from .steps import machine_pauses

    out: list[str] = []
    ranks = {r for m in ctx.metas for r in m.get("ranks", [])}
    for p in machine_pauses(ctx).values():
        if p.machine:
            out.append(
                f"Step {p.step}{f' of rank {p.rank}' if len(ranks) > 1 else ''} took "
                f"{p.duration_us / 1000:,.0f} ms, but {p.said()}. The step is left out of per-step means; the "
                "gains here are shares of a total that holds it."
            )
    n, lead_us = clock_skew(ctx)
    if n:
        out.append(
            f"{n} launches start on the device more than {CLOCK_SKEW_TOLERANCE_US:g} µs before their launch call "
            f"starts on the host (by up to {lead_us:.1f} µs): the device clock runs ahead of the host's, so "
            "host/device overlaps in this trace are off by as much, and these launches' delays count as 0."
        )
    return out


__all__ = [
    "CLOCK_SKEW_TOLERANCE_US",
    "SEVERITIES",
    "TORCH_SNIPPETS",
    "Advice",
    "NotEnoughData",
    "Rule",
    "Verdict",
    "advise",
    "advise_json",
    "bound",
    "clock_skew",
    "evaluate",
    "fit_snippets",
    "merge",
    "not_judged",
    "rules",
    "severity",
    "shown_snippet",
    "without_steps",
]
