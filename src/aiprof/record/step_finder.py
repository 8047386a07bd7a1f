"""Steps of a recording, from its marks: the explicit ones, or found from the anchors.

Rules, in order (``how`` in profile.json says which one applied):

1. **marked**: the script calls ``prof.step()`` / ``aiprof.record.mark_step()``; each
   call ends a step. Under ``aiprof record`` the first step would start with the
   process; it starts instead where the first iteration began (rule 4), and the time
   before it is the ``aiprof: before the first step`` span.
2. **optimizer**: no marks; one step per ``optimizer.step()`` of the first optimizer
   that steps.
3. **backward**: no marks and no optimizer (a manual SGD update); one step per
   ``backward()`` call (``loss.backward()`` or ``torch.autograd.backward``).
4. Where an iteration begins: the last DataLoader ``__next__`` call on the loop's
   thread between the previous iteration's anchor and this one (``for batch in
   loader``), else the end of the previous anchor. The first iteration has no previous
   anchor: its start is the last ``__next__`` call before its anchor, else the first
   Python sample inside the body of the loop that made the first anchor (one sampling
   interval of error at most), else its anchor minus the median step.
5. The last step ends where its loop asked the DataLoader for one more batch and the
   loader had none (the first ``__next__`` on its thread after its anchor, when that
   one raised StopIteration: ``for batch in loader`` run to its end), else at its anchor
   plus the median time between an anchor and the start of the next iteration (what
   an iteration does after its anchor, e.g. logging).

Steps count from 0, one per iteration: 200 iterations are 200 steps.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .job.anchors import BACKWARD, EXHAUSTED, NEXT, OPTIMIZER

Span = tuple[int, int, int, int]
"""(start, end, step number, tid), monotonic ns."""


@dataclass
class FoundSteps:
    steps: list[Span]
    startup: tuple[int, int, int] | None = None
    """(start, end, tid) of the time before the first step, when recording began with the process."""
    how: dict[str, Any] = field(default_factory=dict)
    """rule (marked / optimizer / backward / none), and the loop (file:line, function) where known."""


FirstInLoop = Callable[[int, int, int], int | None]
"""(tid, after ns, before ns) -> ts of the first sample inside the loop's body, or None."""


def find_steps(
    marks: dict[str, Any], mono0: int, *, whole_process: bool, first_in_loop: FirstInLoop | None = None
) -> FoundSteps:
    """The steps of one recording (see the module doc for the rules)."""
    marked = [tuple(s) for s in marks.get("steps", [])]
    anchors = [tuple(a) for a in marks.get("anchors", [])]
    loop = marks.get("loop")
    how: dict[str, Any] = {}
    if loop:
        how["loop"] = f"{loop.get('file')}:{loop.get('header_line')} ({loop.get('function')})"
    if marked and not marks.get("auto"):
        how["rule"] = "marked"
        steps: list[Span] = [(int(a), int(b), int(n), int(t)) for a, b, n, t in marked]
        if not whole_process or len(steps) < 2:
            return FoundSteps(steps, None, how)
        b0, e0, n0, tid = steps[0]
        start = _first_start(anchors, tid, mono0, e0, first_in_loop)
        if start is None:
            return FoundSteps(steps[1:], (b0, e0, tid), how)
        steps[0] = (start, e0, n0, tid)
        return FoundSteps(steps, (b0, start, tid), how)
    kind = OPTIMIZER if any(a[0] == OPTIMIZER for a in anchors) else BACKWARD
    first = next((a for a in anchors if a[0] == kind), None)
    if first is None:
        how["rule"] = "none"
        return FoundSteps([], None, how)
    how["rule"] = kind
    tid = int(first[3])
    acts = sorted((int(a[1]), int(a[2])) for a in anchors if a[0] == kind and a[3] == tid)
    nexts = _starts(anchors, NEXT, tid)
    starts: list[int] = []
    tails: list[int] = []
    for k in range(1, len(acts)):
        lo, hi = acts[k - 1][1], acts[k][0]
        s = _last_before(nexts, lo, hi)
        starts.append(s if s is not None else lo)
        tails.append(starts[-1] - lo)
    durs = sorted(b - a for a, b in itertools.pairwise(starts))
    med = durs[len(durs) // 2] if durs else 0
    s0 = _first_start(anchors, tid, mono0, acts[0][0], first_in_loop)
    if s0 is None:
        s0 = max(mono0, acts[0][0] - med)
    bounds = [s0, *starts]
    tail = sorted(tails)[len(tails) // 2] if tails else 0
    end = _ran_out_after(anchors, tid, acts[-1][1])
    if end is None:
        end = acts[-1][1] + tail
    spans: list[Span] = []
    for i, s in enumerate(bounds):
        e = bounds[i + 1] if i + 1 < len(bounds) else end
        spans.append((s, max(e, s), i, tid))
    startup = (mono0, s0, tid) if whole_process and s0 > mono0 else None
    return FoundSteps(spans, startup, how)


def _first_start(
    anchors: list[tuple[Any, ...]], tid: int, lo: int, hi: int, first_in_loop: FirstInLoop | None
) -> int | None:
    """Start of the first iteration, whose anchor starts at ``hi`` (rule 4)."""
    start = _last_before(_starts(anchors, NEXT, tid), lo, hi)
    if start is None and first_in_loop is not None:
        start = first_in_loop(tid, lo, hi)
    return start


def _ran_out_after(anchors: list[tuple[Any, ...]], tid: int, after: int) -> int | None:
    """The start of the first DataLoader ``__next__`` on ``tid`` after ``after``, when
    that one found the loader exhausted (rule 5), else None."""
    calls = sorted((int(a[1]), a[0]) for a in anchors if a[0] in (NEXT, EXHAUSTED) and a[3] == tid and a[1] >= after)
    return calls[0][0] if calls and calls[0][1] == EXHAUSTED else None


def _starts(anchors: list[tuple[Any, ...]], kind: str, tid: int) -> list[int]:
    return sorted(int(a[1]) for a in anchors if a[0] == kind and a[3] == tid)


def _last_before(sorted_ts: list[int], lo: int, hi: int) -> int | None:
    """The last value in (lo, hi], or None."""
    i = bisect.bisect_right(sorted_ts, hi) - 1
    if i >= 0 and sorted_ts[i] > lo:
        return sorted_ts[i]
    return None


def first_in_loop_from_samples(py: dict[str, Any], loop: dict[str, Any] | None) -> FirstInLoop | None:
    """A :data:`FirstInLoop` over the recording's raw Python samples, for ``loop``."""
    if not loop or not py or not py.get("ts"):
        return None
    lo_line, hi_line = int(loop.get("header_line") or 0), int(loop.get("end_line") or 0)
    fn, fl = loop.get("function"), loop.get("file")
    parent = {int(f[0]): int(f[1]) for f in py["frames"]}
    inside = {int(f[0]) for f in py["frames"] if f[2] == fn and f[3] == fl and lo_line <= int(f[4] or 0) <= hi_line}
    if not inside:
        return None
    order = sorted(range(len(py["ts"])), key=lambda i: py["ts"][i])

    def first(tid: int, after: int, before: int) -> int | None:
        for i in order:
            t = int(py["ts"][i])
            if t <= after or int(py["tid"][i]) != tid:
                continue
            if t >= before:
                return None
            node = int(py["stack"][i])
            for _ in range(512):
                if node in inside:
                    return t
                node = parent.get(node, -1)
                if node < 0:
                    break
        return None

    return first
