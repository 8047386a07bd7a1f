"""Interval arithmetic on int64 ns arrays, vectorised with numpy."""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted, disjoint intervals.

    Touching intervals merge (as Holistic Trace Analysis merges kernels).
    """
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
    e = np.maximum(e, s)
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    ms = s[idx]
    me = np.maximum.reduceat(run_end, idx) if len(idx) else run_end[idx]
    return ms, me


def length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length covered by the union of the intervals."""
    ms, me = merge(starts, ends)
    return int((me - ms).sum())


def covered(ms: np.ndarray, me: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """For merged intervals (ms, me), the length covered inside each window [w0, w1)."""
    if len(ms) == 0:
        return np.zeros(len(w0), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(me - ms)])

    def upto(t: np.ndarray) -> np.ndarray:
        # Covered length in (-inf, t).
        i = np.searchsorted(ms, t, side="right")  # intervals starting before t
        full = cum[i]
        # The last of them may extend past t.
        last = np.clip(i - 1, 0, None)
        over = np.where(i > 0, np.clip(me[last] - t, 0, None), 0)
        return full - over

    res: np.ndarray = upto(np.asarray(w1, dtype=np.int64)) - upto(np.asarray(w0, dtype=np.int64))
    return res
