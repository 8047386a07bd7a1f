"""The outlier steps (analysis/outliers.py's rule) and what ran in each of them.

``outlier_steps`` (one row per outlier step)
    rank, step, duration_us, median_us (the rank's median step, µs), ratio (duration /
    median), excess_us (duration - median: what the step cost beyond a typical one),
    what (the function or operator that ran in this step far more than in a typical
    one), what_source ('python' from the stack samples, 'operator' from the host
    spans), what_us (its time in the step, µs), what_pct (% of the step).

"What ran in it": with Python stack samples, the function on the stack in the largest
share of the step's samples beyond its share in the typical steps (the outermost one
on a tie: ``test()`` rather than the model call inside it); without samples, the host
span name (operator or annotation) whose time in the step most exceeds its mean time
per typical step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import fetch
from .outliers import outlier_mask
from .ranks import step_windows

_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("duration_us", pa.float64()),
        ("median_us", pa.float64()),
        ("ratio", pa.float64()),
        ("excess_us", pa.float64()),
        ("what", pa.string()),
        ("what_source", pa.string()),
        ("what_us", pa.float64()),
        ("what_pct", pa.float64()),
    ]
)


def _in(ts: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Index of the window holding each ts (-1 when none); windows sorted and disjoint."""
    i = np.searchsorted(w0, ts, side="right") - 1
    ic = np.clip(i, 0, None)
    return np.where((i >= 0) & (ts < w1[ic]), i, -1)


def _from_samples(profile: Profile, rank: int, w0: np.ndarray, w1: np.ndarray, out: np.ndarray) -> list[Any]:
    """Per outlier window: (function, share of the window's samples) from the stack samples, or None."""
    s = fetch(profile, "SELECT ts, stack_id FROM samples WHERE rank = ? ORDER BY ts", [rank])
    if not len(s["ts"]):
        return [None] * int(out.sum())
    fr = fetch(profile, "SELECT frame_id, parent, function FROM frames WHERE rank = ?", [rank])
    parent = dict(zip(fr["frame_id"].tolist(), fr["parent"].tolist(), strict=True))
    func = dict(zip(fr["frame_id"].tolist(), [str(f) for f in fr["function"]], strict=True))
    win = _in(s["ts"], w0, w1)
    stacks: dict[int, list[str]] = {}

    def chain(leaf: int) -> list[str]:
        if leaf not in stacks:
            names: list[str] = []
            node, guard = leaf, 0
            while node is not None and node >= 0 and node in func and guard < 512:
                names.append(func[node])
                node, guard = parent.get(node, -1), guard + 1
            stacks[leaf] = names[::-1]  # root first
        return stacks[leaf]

    def shares(sel: np.ndarray) -> tuple[dict[str, float], dict[str, int], int]:
        n = int(sel.sum())
        count: dict[str, int] = {}
        depth: dict[str, int] = {}
        for leaf in s["stack_id"][sel].tolist():
            seen = set()
            for d, f in enumerate(chain(int(leaf))):
                if f not in seen:
                    seen.add(f)
                    count[f] = count.get(f, 0) + 1
                    depth[f] = min(depth.get(f, d), d)
        return {f: c / n for f, c in count.items()} if n else {}, depth, n

    normal, _, _ = shares((win >= 0) & ~out[np.clip(win, 0, None)])
    res: list[Any] = []
    for j in np.flatnonzero(out):
        here, depth, n = shares(win == j)
        if not n:
            res.append(None)
            continue
        best = max(here, key=lambda f: (round(here[f] - normal.get(f, 0.0), 6), -depth[f]))
        res.append((best, here[best]))
    return res


def _from_spans(profile: Profile, rank: int, w0: np.ndarray, w1: np.ndarray, out: np.ndarray) -> list[Any]:
    """Per outlier window: (name, share) of the host span with the largest excess time."""
    e = fetch(
        profile,
        "SELECT name, ts, dur FROM events WHERE rank = ? AND device_type = 'cpu' "
        "AND kind IN ('cpu_op', 'user_annotation', 'python', 'dataloader') AND dur > 0",
        [rank],
    )
    if not len(e["ts"]):
        return [None] * int(out.sum())
    win = _in(e["ts"], w0, w1)
    names = e["name"].astype(str)
    n_norm = max(int((~out).sum()), 1)
    norm: dict[str, float] = {}
    sel = (win >= 0) & ~out[np.clip(win, 0, None)]
    for nm, d in zip(names[sel].tolist(), e["dur"][sel].tolist(), strict=True):
        norm[nm] = norm.get(nm, 0.0) + d / n_norm
    res: list[Any] = []
    for j in np.flatnonzero(out):
        here: dict[str, float] = {}
        m = win == j
        for nm, d in zip(names[m].tolist(), e["dur"][m].tolist(), strict=True):
            here[nm] = here.get(nm, 0.0) + d
        if not here:
            res.append(None)
            continue
        best = max(here, key=lambda k: here[k] - norm.get(k, 0.0))
        res.append((best, min(here[best] / float(w1[j] - w0[j]), 1.0)))
    return res


@analyser(
    "outlier_steps",
    "Outlier steps",
    default_sort=("-excess_us",),
    units={"duration_us": "µs", "median_us": "µs", "excess_us": "µs", "what_us": "µs", "what_pct": "%"},
)
def outlier_steps(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per outlier step (module doc: columns)."""
    w = step_windows(profile)
    rows: list[dict[str, Any]] = []
    for r in np.unique(w["rank"]):
        sel = np.flatnonzero((w["rank"] == r) & (w["step"] >= 0))
        sel = sel[np.argsort(w["start"][sel], kind="stable")]
        w0, w1 = w["start"][sel], w["end"][sel]
        dur = (w1 - w0).astype(np.float64)
        out = outlier_mask(dur)
        if not out.any():
            continue
        med = float(np.median(dur))
        what = _from_samples(profile, int(r), w0, w1, out)
        source = "python"
        if all(x is None for x in what):
            what, source = _from_spans(profile, int(r), w0, w1, out), "operator"
        for k, j in enumerate(np.flatnonzero(out)):
            got = what[k]
            rows.append(
                {
                    "rank": int(r),
                    "step": int(w["step"][sel[j]]),
                    "duration_us": dur[j] / 1000.0,
                    "median_us": med / 1000.0,
                    "ratio": dur[j] / med if med > 0 else None,
                    "excess_us": (dur[j] - med) / 1000.0,
                    "what": got[0] if got else None,
                    "what_source": source if got else None,
                    "what_us": got[1] * dur[j] / 1000.0 if got else None,
                    "what_pct": 100.0 * got[1] if got else None,
                }
            )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
