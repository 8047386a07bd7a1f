"""The host spans open at given instants on given threads (one sweep in time order)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from ..store import Profile
from .common import arrays_of, recode


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


#: The order the spans of :func:`open_values` come in (SQL): thread, then start, the
#: longest first; ties in the order of the trace's calls (external id), then by name
#: and kind (one answer).
SPAN_ORDER = "pid, tid & 4294967295, ts, dur DESC, external_id NULLS LAST, name, kind"


_PAST = (1 << 63, 1 << 63)  # a thread and an instant after every span's


def open_values(
    points: dict[str, np.ndarray], batches: Iterable[dict[str, np.ndarray]]
) -> Iterator[tuple[int, list[int]]]:
    """As :func:`each_open`, with the spans read in batches (``pid``, ``tid``, ``ts``,
    ``te`` and an int ``value`` each, in :data:`SPAN_ORDER`) so that they never are all
    in memory: yields (point index, the values of the spans open at it, outermost
    first). Only the stack of spans open on a thread is kept between batches."""
    mask = 0xFFFFFFFF
    n = len(points["ts"])
    order = np.lexsort((points["ts"], points["tid"] & mask, points["pid"]))
    ppid, ptid, pts = points["pid"][order], points["tid"][order] & mask, points["ts"][order]
    done = 0  # points swept so far (in order)
    thread: tuple[int, int] | None = None  # the thread the stack is on
    stack: list[tuple[int, int]] = []  # (end, value) of the open spans, outermost first

    def sweep(
        upto: int, sp: list[int], st: list[int], sts: list[int], ste: list[int], sv: list[int]
    ) -> Iterator[tuple[int, list[int]]]:
        nonlocal thread, stack
        j, m = 0, len(sts)
        # The points, then an end past every span: the batch's spans after its last
        # point are pushed too, for the next batch's points.
        for k in [*range(done, upto), -1]:
            key, t = ((int(ppid[k]), int(ptid[k])), int(pts[k])) if k >= 0 else (_PAST, _PAST[0])
            # Push the spans that start before the point (on its thread or one before it).
            while j < m and ((sp[j], st[j]) < key or ((sp[j], st[j]) == key and sts[j] <= t)):
                skey = (sp[j], st[j])
                if skey != thread:
                    thread, stack = skey, []
                s = sts[j]
                while stack and stack[-1][0] <= s:
                    stack.pop()
                stack.append((ste[j], sv[j]))
                j += 1
            if thread != key:
                continue
            while stack and stack[-1][0] <= t:
                stack.pop()
            found = [v for e, v in stack if e > t]
            if found:
                yield int(order[k]), found

    for b in batches:
        m = len(b["ts"])
        if not m or done == n:
            continue
        lp, lt, ls = int(b["pid"][-1]), int(b["tid"][-1]) & mask, int(b["ts"][-1])
        # The points before the batch's last span start (ties wait: a next batch's span
        # may start with them) are swept with this batch's spans.
        rest = slice(done, n)
        before = (ppid[rest] < lp) | (
            (ppid[rest] == lp) & ((ptid[rest] < lt) | ((ptid[rest] == lt) & (pts[rest] < ls)))
        )
        upto = done + int(np.count_nonzero(before))
        cols = (b["pid"].tolist(), (b["tid"] & mask).tolist(), b["ts"].tolist(), b["te"].tolist(), b["value"].tolist())
        yield from sweep(upto, *cols)
        done = upto
    if done < n:
        yield from sweep(n, [], [], [], [], [])


#: Host spans read at a time by :func:`owned_stacks` (their memory is a batch's,
#: whatever the profile's size: bench/huge_import.py).
SPAN_BATCH = 1 << 20


def owned_stacks(
    profile: Profile, rank: int, points: dict[str, np.ndarray], kinds: tuple[str, ...], owner_kinds: tuple[str, ...]
) -> Iterator[tuple[int, tuple[int, ...], list[str]]]:
    """The host spans of ``kinds`` open at each point (``ts``, ``pid``, ``tid``) of
    ``rank``, read in batches from the events of the points' threads: yields (point
    index, stack, names) where the stack is its spans' codes outermost first (name code
    * 2 + 1 for a span of ``owner_kinds``: ``names[c // 2]``), so that equal stacks may
    share what is derived from them; ``names`` grows as batches are read."""
    if not len(points["ts"]):
        return
    threads = np.unique(np.stack([points["pid"], points["tid"] & 0xFFFFFFFF], axis=1), axis=0)
    pairs = ", ".join(f"({int(a)}, {int(b)})" for a, b in threads.tolist())
    order = ", ".join("e." + c for c in SPAN_ORDER.split(", "))
    sql = (
        f"SELECT e.pid, e.tid, e.ts, e.ts + e.dur AS te, e.name, e.kind FROM events e "
        f"SEMI JOIN (VALUES {pairs}) v(p, t) ON e.pid = v.p AND (e.tid & 4294967295) = v.t "
        f"WHERE e.rank = {int(rank)} AND e.device_type = 'cpu' AND e.kind IN ({', '.join(repr(k) for k in kinds)}) "
        f"AND e.ts <= {int(points['ts'].max())} ORDER BY {order}"
    )
    names: list[str] = []
    code_of: dict[str, int] = {}

    def coded(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        spans = arrays_of(batch, codes=("name", "kind"))
        gid = recode(code_of, [str(x) for x in spans["name__dict"].tolist()])
        names.extend(list(code_of)[len(names) :])
        owner = np.isin(spans["kind__dict"], owner_kinds)[spans["kind"]]
        spans["value"] = gid[spans["name"]] * 2 + owner
        return spans

    for i, found in open_values(points, map(coded, profile.batches(sql, SPAN_BATCH))):
        yield i, tuple(found), names
