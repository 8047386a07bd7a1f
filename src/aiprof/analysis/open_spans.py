"""The host spans open at given instants on given threads (one sweep in time order)."""

from __future__ import annotations

import numpy as np


def open_at(points: dict[str, np.ndarray], spans: dict[str, np.ndarray]) -> list[list[int]]:
    """For each point (``ts``, ``pid``, ``tid``), the indices into ``spans`` (``ts``,
    ``te``, ``pid``, ``tid``) of the spans on that thread with ts <= point < te,
    outermost first (by start; a span that starts with its parent comes after it when
    it is shorter). Thread ids compare on their low 32 bits, as the importers write them."""
    out: list[list[int]] = [[] for _ in range(len(points["ts"]))]
    if not len(points["ts"]):
        return out
    mask = 0xFFFFFFFF
    s_order = np.lexsort((-(spans["te"] - spans["ts"]), spans["ts"], spans["tid"] & mask, spans["pid"]))
    p_order = np.lexsort((points["ts"], points["tid"] & mask, points["pid"]))
    sk = list(zip(spans["pid"][s_order].tolist(), (spans["tid"][s_order] & mask).tolist()))
    sts, ste = spans["ts"][s_order].tolist(), spans["te"][s_order].tolist()
    pts = points["ts"].tolist()
    ppid, ptid = points["pid"].tolist(), (points["tid"] & mask).tolist()
    j, thread = 0, None
    stack: list[int] = []
    for i in p_order.tolist():
        key = (ppid[i], ptid[i])
        if key != thread:
            thread, stack = key, []
            while j < len(sk) and sk[j] < key:
                j += 1
        t = pts[i]
        while j < len(sk) and sk[j] == key and sts[j] <= t:
            while stack and ste[stack[-1]] <= sts[j]:
                stack.pop()
            stack.append(j)
            j += 1
        while stack and ste[stack[-1]] <= t:
            stack.pop()
        out[i] = [int(s_order[k]) for k in stack if ste[k] > t]
    return out
