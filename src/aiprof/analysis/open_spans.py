"""The host spans open at given instants on given threads (one sweep in time order)."""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np


def open_at(points: dict[str, np.ndarray], spans: dict[str, np.ndarray]) -> list[list[int]]:
    """For each point, the spans open at it: see :func:`each_open`."""
    out: list[list[int]] = [[] for _ in range(len(points["ts"]))]
    for i, found in each_open(points, spans):
        out[i] = found
    return out


def each_open(points: dict[str, np.ndarray], spans: dict[str, np.ndarray]) -> Iterator[tuple[int, list[int]]]:
    """For each point (``ts``, ``pid``, ``tid``), the indices into ``spans`` (``ts``,
    ``te``, ``pid``, ``tid``) of the spans on that thread with ts <= point < te,
    outermost first (by start; a span that starts with its parent comes after it when
    it is shorter). Thread ids compare on their low 32 bits, as the importers write them.

    The spans are read from typed arrays (8 bytes a value, not a Python int in a list):
    a 10 GB trace's 15M host spans fit (bench/huge_import.py). Yields (point index,
    span indices) in the sweep's order, points with none open left out, so that a
    caller may keep what it derives from each instead of every list."""
    if not len(points["ts"]) or not len(spans["ts"]):
        return
    mask = 0xFFFFFFFF
    s_order = np.lexsort((-(spans["te"] - spans["ts"]), spans["ts"], spans["tid"] & mask, spans["pid"]))
    p_order = np.lexsort((points["ts"], points["tid"] & mask, points["pid"]))
    # Each thread's spans are one run of s_order: (pid, tid) -> [first, end).
    spid, stid = spans["pid"][s_order], spans["tid"][s_order] & mask
    cut = np.flatnonzero((spid[1:] != spid[:-1]) | (stid[1:] != stid[:-1])) + 1
    firsts, ends = [0, *cut.tolist()], [*cut.tolist(), len(s_order)]
    runs = {(int(spid[a]), int(stid[a])): (a, b) for a, b in zip(firsts, ends, strict=True)}
    del spid, stid
    sts = array("q", np.ascontiguousarray(spans["ts"][s_order], dtype=np.int64).tobytes())
    ste = array("q", np.ascontiguousarray(spans["te"][s_order], dtype=np.int64).tobytes())
    index = array("q", np.ascontiguousarray(s_order, dtype=np.int64).tobytes())
    del s_order
    pts = points["ts"].tolist()
    ppid, ptid = points["pid"].tolist(), (points["tid"] & mask).tolist()
    thread = None
    j = end = 0
    stack: list[int] = []
    for i in p_order.tolist():
        key = (ppid[i], ptid[i])
        if key != thread:
            thread, stack = key, []
            j, end = runs.get(key, (0, 0))
        t = pts[i]
        while j < end and sts[j] <= t:
            while stack and ste[stack[-1]] <= sts[j]:
                stack.pop()
            stack.append(j)
            j += 1
        while stack and ste[stack[-1]] <= t:
            stack.pop()
        if stack:
            found = [index[k] for k in stack if ste[k] > t]
            if found:
                yield i, found
