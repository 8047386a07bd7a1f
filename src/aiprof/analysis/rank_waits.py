"""Waits for other ranks hidden in backward: ranks in lockstep (DDP), from the samples.

``rank_waits`` (one row per DDP rank with sampled steps, two ranks or more)
    rank, steps, step_us, forward_us, backward_us (sampled phases, :mod:`.phases`),
    backward_per_forward, wait_us (see :func:`window_waits`), wait_pct (of step_us).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .phases import PHASES, Classified, classify, window_times

_WAITS_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("steps", pa.int64()),
        ("step_us", pa.float64()),
        ("forward_us", pa.float64()),
        ("backward_us", pa.float64()),
        ("backward_per_forward", pa.float64()),
        ("wait_us", pa.float64()),
        ("wait_pct", pa.float64()),
    ]
)


#: What the communication figures of a DDP rank without recorded collectives say (the
#: ranks, communication and exposed_comm views' ``note``): not measured, not zero.
DDP_COMM_NOTE = "not measured: DDP all-reduces run in its C++ reducer (--ops records them); waits: --view rank_waits"


def ddp_ranks(profile: Profile) -> set[int]:
    """The ranks whose Python samples show DistributedDataParallel inside their steps
    (:func:`_ddp_ranks`); none without samples."""
    if not profile.tables.get("samples"):
        return set()
    return set(_ddp_ranks(classify(profile)))


def _ddp_ranks(c: Classified) -> list[int]:
    """The ranks with samples inside steps under a DistributedDataParallel frame: the
    ranks that wait for each other at its gradient all-reduces."""
    return sorted(np.unique(c.rank[c.ddp & (c.window >= 0)]).tolist())


def _wait_ratio(ns: dict[str, np.ndarray], w: dict[str, np.ndarray], ranks: list[int]) -> float | None:
    """The backward / forward ratio of the rank that waits least (the lowest among
    ``ranks``). None with fewer than two ranks with forward samples."""
    ratios = []
    for r in ranks:
        sel = w["rank"][: len(ns["forward"])] == r
        f, b = int(ns["forward"][sel].sum()), int(ns["backward"][sel].sum())
        if f > 0:
            ratios.append(b / f)
    return min(ratios) if len(ratios) >= 2 else None


def _accumulation_ratio(c: Classified, ranks: list[int]) -> float | None:
    """backward / forward samples of the micro-batches before each step's last one
    (gradient accumulation under ``no_sync()``): DDP all-reduces only in the last
    backward of a step, so this is the ratio of the compute alone. None when no step of
    ``ranks`` has a backward before its last forward."""
    fw, bw = PHASES.index("forward"), PHASES.index("backward")
    f = b = 0
    for r in ranks:
        sel = np.flatnonzero((c.rank == r) & (c.window >= 0))
        ph, win = c.phase[sel], c.window[sel]
        for k in np.unique(win).tolist():
            p = ph[win == k]
            fwd, bwd = np.flatnonzero(p == fw), np.flatnonzero(p == bw)
            if not len(fwd):
                continue
            # The last micro-batch starts after the last backward sample before its forward.
            prior = bwd[bwd < fwd[-1]]
            start = int(prior[-1]) + 1 if len(prior) else 0
            f += int((p[:start] == fw).sum())
            b += int((p[:start] == bw).sum())
    return b / f if f > 0 and b > 0 else None


def window_waits(profile: Profile) -> np.ndarray:
    """Per step window (ranks.step_windows order): the ns of its backward phase that is
    a wait for the other ranks, or zeros.

    DDP's gradient all-reduces run in C++ hooks inside ``loss.backward()``: a rank that
    waits for a slower one spends that wait in backward, which the Python samples see as
    backward time. Only ranks whose samples show DistributedDataParallel are in such a
    lockstep (:func:`_ddp_ranks`); without two of them nothing is a wait. Ranks running
    the same model take the same backward time per forward time k, so a rank's backward
    beyond k times its forward is its all-reduce: the transfer itself, common to the
    ranks, plus its wait. The rank that waits least holds the transfer alone, so a
    rank's wait is its excess less the lowest excess among the ranks. k is the ratio of
    the backwards that hold no all-reduce where steps accumulate gradients
    (:func:`_accumulation_ratio`), else the lowest ratio among the ranks
    (:func:`_wait_ratio`: the transfer is then part of k, and a rank with less forward
    than the reference counts a part of it as waiting). An estimate: a rank whose
    backward is longer for its own reasons counts as waiting too. The rank's wait is
    computed over all its steps (one step's phases rest on a few samples) and shared
    among its steps by their own excess backward time."""
    from .ranks import step_windows

    w = step_windows(profile)
    _, ns = window_times(profile)
    n = len(ns["backward"])
    out = np.zeros(n, dtype=np.int64)
    ranks = _ddp_ranks(classify(profile))
    if len(ranks) < 2:
        return out
    k = _accumulation_ratio(classify(profile), ranks)
    if k is None:
        k = _wait_ratio(ns, w, ranks)
    if k is None:
        return out
    rank, step = w["rank"][:n], w["step"][:n]
    extra = np.maximum(ns["backward"] - k * ns["forward"], 0.0) * (step >= 0)
    excess = {}
    for r in ranks:
        sel = (rank == r) & (step >= 0)
        excess[r] = float(ns["backward"][sel].sum()) - k * float(ns["forward"][sel].sum())
    common = min(excess.values())
    for r in ranks:
        sel = (rank == r) & (step >= 0)
        wait = excess[r] - common
        pos = float(extra[sel].sum())
        if wait > 0 and pos > 0:
            out[sel] = np.round(extra[sel] * min(wait / pos, 1.0)).astype(np.int64)
    return out


@analyser(
    "rank_waits",
    "Waits hidden in backward (Python samples, ranks in lockstep)",
    default_sort=("rank",),
    units={"step_us": "µs", "forward_us": "µs", "backward_us": "µs", "wait_us": "µs", "wait_pct": "%"},
)
def rank_waits(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per DDP rank with sampled steps (two ranks or more, see
    :func:`window_waits`): steps, step_us (their
    time), forward_us and backward_us (sampled phases), backward_per_forward, wait_us
    (backward beyond the lowest ratio among the ranks times the rank's forward: its wait
    for the others, see :func:`window_waits`), wait_pct (of step_us)."""
    from .ranks import step_windows

    if not profile.tables.get("samples"):
        # No samples, no sampled phases: nothing to read (the step windows of a job
        # of 1,000 ranks are a read of each rank's derived tables).
        return pa.Table.from_pylist([], schema=_WAITS_SCHEMA)
    w = step_windows(profile)
    counts, ns = window_times(profile)
    waits = window_waits(profile)
    rows: list[dict[str, Any]] = []
    n = len(waits)
    ddp = _ddp_ranks(classify(profile))
    ranks = [r for r in np.unique(w["rank"][:n]).tolist() if counts[w["rank"][:n] == r].sum() and r in ddp]
    if len(ranks) < 2:
        return pa.Table.from_pylist([], schema=_WAITS_SCHEMA)
    for r in ranks:
        sel = (w["rank"][:n] == r) & (w["step"][:n] >= 0)
        step = float((w["end"][:n][sel] - w["start"][:n][sel]).sum())
        f, b = float(ns["forward"][sel].sum()), float(ns["backward"][sel].sum())
        wait = float(waits[sel].sum())
        rows.append(
            {
                "rank": r,
                "steps": int(sel.sum()),
                "step_us": step / 1000.0,
                "forward_us": f / 1000.0,
                "backward_us": b / 1000.0,
                "backward_per_forward": b / f if f > 0 else None,
                "wait_us": wait / 1000.0,
                "wait_pct": 100.0 * wait / step if step > 0 else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=_WAITS_SCHEMA)


def wait_intervals(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The waits of :func:`window_waits`, at the end of each window's laid-out backward
    phase (see :func:`.phases._phase_intervals`)."""
    from .ranks import step_windows

    w = step_windows(profile)
    _, ns = window_times(profile)
    waits = window_waits(profile)
    if not len(waits) or not waits.any():
        return {}
    k = PHASES.index("backward")
    end = w["start"][: len(waits)].astype(np.int64) + sum(
        (ns[p] for p in PHASES[: k + 1]), np.zeros(len(waits), np.int64)
    )
    rank = w["rank"][: len(waits)]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in np.unique(rank):
        sel = (rank == r) & (waits > 0)
        out[int(r)] = (end[sel] - waits[sel], end[sel])
    return out
