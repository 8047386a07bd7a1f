"""The timeline's windows merged in memory: the drawable events as numpy columns.

:class:`~aiprof.web.timeline.Timeline` builds its tables in DuckDB once; a window
(what the UI fetches at every zoom and pan) is then answered here, from the same
rows held as numpy arrays sorted by start: a binary search finds the window's rows
and one sort merges them per (track, depth, pixel). Each query DuckDB would run for
it costs a plan and a wait for its worker threads (tens of ms on a busy machine),
and a window asked for two or three (a re-merge when the first answer had too many
items, the flow count, the flow join, the names).

The merging rule: an event at least one bucket wide is its own item (``n`` = 1);
narrower ones are merged per (track, depth, bucket of ``ts``) into one item from the
first start to the last end, named after the longest (the first of equal ones), with
``n`` the number of events it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_COLS = ("track", "depth", "ts", "dur", "name", "kind", "n", "wdur")
#: At most about this many rows of a level are "long" and scanned for every window.
LONG_ROWS = 20000


@dataclass
class Spans:
    """Rows to draw, sorted by ts: track, depth, ts, dur (ns), name (name id), kind
    (index into ``kinds``), n (events a row stands for) and wdur (its longest event's
    duration, which names a merged item)."""

    track: np.ndarray
    depth: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    n: np.ndarray
    wdur: np.ndarray
    kinds: list[str]

    @classmethod
    def from_arrow(cls, t: pa.Table) -> Spans:
        """From a table with track, depth, ts, dur, name_id, kind (and n, wdur when
        rows are pre-merged), already sorted by ts."""

        def col(name: str, dtype: type) -> np.ndarray:
            c = t.column(name)
            one = c.chunk(0) if c.num_chunks == 1 else c  # one chunk: no copy to concatenate
            return np.asarray(one.to_numpy(zero_copy_only=False), dtype=dtype)

        kind = t.column("kind").combine_chunks() if t.num_rows else None
        if kind is not None and not pa.types.is_dictionary(kind.type):
            kind = pc.dictionary_encode(kind)
        dur = col("dur", np.int64)
        return cls(
            track=col("track", np.int64),
            depth=col("depth", np.int64),
            ts=col("ts", np.int64),
            dur=dur,
            name=col("name_id", np.int64),
            kind=np.asarray(kind.indices.to_numpy(zero_copy_only=False), np.int64) if kind else np.zeros(0, np.int64),
            # Single events: n = 1 each, as a read-only view (no array to fill).
            n=col("n", np.int64) if "n" in t.column_names else np.broadcast_to(np.int64(1), dur.shape),
            wdur=col("wdur", np.int64) if "wdur" in t.column_names else dur,
            kinds=[str(k) for k in kind.dictionary.to_pylist()] if kind else [],
        )

    def take(self, idx: np.ndarray) -> Spans:
        return Spans(**{c: getattr(self, c)[idx] for c in _COLS}, kinds=self.kinds)


def long_threshold(dur: np.ndarray) -> int:
    """A duration (>= 1 ns) that at most about :data:`LONG_ROWS` of ``dur`` exceed."""
    if len(dur) <= LONG_ROWS:
        return max(int(dur.max()) if len(dur) else 0, 1)
    k = len(dur) - LONG_ROWS
    return max(int(np.partition(dur, k)[k]), 1)


class Level:
    """One level of detail (every event, or events pre-merged over the whole span):
    its rows, sorted by ts, of which the few long ones are scanned for every window and
    the others found by a binary search on ts (each starts at most ``long_ns`` before
    the window). The rows are not copied: the long ones are known by index."""

    def __init__(self, s: Spans, long_ns: int) -> None:
        self.long_ns = long_ns
        self.spans = s
        self.is_long = s.dur > long_ns
        self.long = np.flatnonzero(self.is_long)
        self.longest = int(s.dur[self.long].max()) if len(self.long) else 0

    def rows(self, t0: int, t1: int, tracks: tuple[int, ...] | None) -> Spans:
        """The rows overlapping [t0, t1] on ``tracks`` (None: all), the short ones
        first (in ts order), then the long ones (in ts order)."""
        s = self.spans
        lo = int(np.searchsorted(s.ts, t0 - self.long_ns, side="left"))
        hi = int(np.searchsorted(s.ts, t1, side="right"))
        keep = (s.ts[lo:hi] + s.dur[lo:hi] >= t0) & ~self.is_long[lo:hi]
        lg = self.long[s.ts[self.long] <= t1]
        lg = lg[s.ts[lg] + s.dur[lg] >= t0]
        if tracks is not None:
            ids = np.asarray(tracks, dtype=np.int64)
            keep &= np.isin(s.track[lo:hi], ids)
            lg = lg[np.isin(s.track[lg], ids)]
        return s.take(np.concatenate([lo + np.flatnonzero(keep), lg]))


def merge(s: Spans, t0: int, bucket: int) -> Spans:
    """The rows of ``s`` merged per (track, depth, bucket of ts from ``t0``).

    Merging the answer again with a bucket a whole multiple of ``bucket`` gives what
    merging ``s`` with it would: each group lies in one coarser bucket, and keeps
    its longest event's duration (wdur) to be named by.
    """
    wide = (s.n == 1) & (s.dur >= bucket)
    w = np.flatnonzero(wide)
    nar = np.flatnonzero(~wide)
    first = g_ts = g_end = g_n = g_wdur = np.zeros(0, dtype=np.int64)
    if len(nar):
        # One int64 key per (bucket, track, depth); the rows come sorted by ts, so
        # the keys are nearly sorted already and a stable sort is quick.
        pix = (s.ts[nar] - t0) // bucket
        pix -= pix.min()
        tracks, depths = int(s.track[nar].max()) + 1, int(s.depth[nar].max()) + 1
        key = (pix * tracks + s.track[nar]) * depths + s.depth[nar]
        by = np.argsort(key, kind="stable")
        order, key = nar[by], key[by]
        new = np.ones(len(order), dtype=bool)
        new[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(new)
        ts_o = s.ts[order]
        g_ts = np.minimum.reduceat(ts_o, starts)
        g_end = np.maximum.reduceat(ts_o + s.dur[order], starts)
        g_n = np.add.reduceat(s.n[order], starts)
        # The longest event of each group (the first of equal ones) names it.
        wdur = s.wdur[order]
        g_wdur = np.maximum.reduceat(wdur, starts)
        sizes = np.diff(np.append(starts, len(order)))
        longest = np.flatnonzero(wdur == np.repeat(g_wdur, sizes))
        first = order[longest[np.searchsorted(longest, starts)]]
    both = np.concatenate([w, first])
    out = s.take(both)
    out.ts = np.concatenate([s.ts[w], g_ts])
    out.dur = np.concatenate([s.dur[w], g_end - g_ts])
    out.n = np.concatenate([s.n[w], g_n])
    out.wdur = np.concatenate([s.wdur[w], g_wdur])
    return out


def by_ts(s: Spans) -> Spans:
    """``s`` sorted by start (stable)."""
    return s.take(np.argsort(s.ts, kind="stable"))


def pyramid(s: Spans, origin: int, bucket: int, factor: int, min_rows: int, most: int = 12) -> list[tuple[int, Spans]]:
    """Levels of detail of ``s``: (bucket, rows sorted by ts) for buckets ``bucket``,
    ``bucket * factor``, ... on the grid from ``origin``, each merged from the one
    before (the same rows as merging ``s`` with that bucket at once: see
    :func:`merge`). It stops at ``most`` levels, or once a level holds at most
    ``min_rows`` rows or hardly fewer than the one before."""
    out: list[tuple[int, Spans]] = []
    rows = s
    while len(out) < most:
        level = by_ts(merge(rows, origin, bucket))
        out.append((bucket, level))
        if len(level.ts) <= min_rows or len(level.ts) > 0.9 * len(rows.ts):
            break
        rows, bucket = level, bucket * factor
    return out


def find(
    s: Spans,
    names: np.ndarray,
    kind: int | None,
    t0: int | None,
    t1: int | None,
    longest: bool,
    limit: int,
    offset: int,
) -> tuple[int, np.ndarray]:
    """Rows of ``s`` (single events sorted by ts, name ids in name order) whose name id
    ``names`` marks (a bool per id), of kind code ``kind`` (None: any) and overlapping
    [t0, t1] (None: open): how many, and the indices of rows ``offset`` to
    ``offset + limit`` in time order (ts, track, depth, name, kind, longer first) or,
    with ``longest``, longest first (dur descending, ts, track, depth, name, kind).
    Only the rows that can be on that page are sorted: those up to the page's last
    start (or down to its shortest duration)."""
    mask = names[s.name]
    if kind is not None:
        mask &= s.kind == kind
    if t0 is not None:
        mask &= s.ts + s.dur >= t0
    if t1 is not None:
        mask &= s.ts <= t1
    idx = np.flatnonzero(mask)
    total, k = len(idx), offset + limit
    if total == 0 or offset >= total:
        return total, idx[:0]
    if k < total:
        if longest:
            bound = -np.partition(-s.dur[idx], k - 1)[k - 1]
            idx = idx[s.dur[idx] >= bound]
        else:  # idx is in ts order already
            idx = idx[: int(np.searchsorted(s.ts[idx], s.ts[idx[k - 1]], side="right"))]
    # Kinds compared by their text, as SQL would.
    krank = np.argsort(np.argsort(np.asarray(s.kinds, dtype=object))) if s.kinds else np.zeros(1, np.int64)
    ts, track, depth, name, kr, dur = (
        s.ts[idx],
        s.track[idx],
        s.depth[idx],
        s.name[idx],
        krank[s.kind[idx]],
        s.dur[idx],
    )
    keys = (kr, name, depth, track, ts, -dur) if longest else (-dur, kr, name, depth, track, ts)
    return total, idx[np.lexsort(keys)[offset:k]]


def totals(s: Spans, t0: int, t1: int, names: list[str], limit: int) -> tuple[list[Any], list[Any]]:
    """What the rows ``s`` spend inside [t0, t1] (ns, clipped at the edges) and how many
    they are: per kind, longest first, and per (kind, name), the ``limit`` longest;
    ties in kind, then name order. ``s`` holds single events (``n`` = 1); ``name`` ids
    are in name order (``names[i]``)."""
    inside = np.minimum(s.ts + s.dur, t1) - np.maximum(s.ts, t0)
    rank = np.argsort(np.argsort(np.asarray(s.kinds, dtype=object))) if s.kinds else np.zeros(0, np.int64)

    def grouped(key: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        count = np.bincount(key, minlength=size)
        # Exact int64 sums through float64 counts: each part's total stays below 2**53.
        lo = np.bincount(key, weights=(inside & 0x3FFFFFF).astype(np.float64), minlength=size)
        hi = np.bincount(key, weights=(inside >> 26).astype(np.float64), minlength=size)
        total = (hi.astype(np.int64) << 26) + lo.astype(np.int64)
        used = np.flatnonzero(count)
        return used, count[used], total[used]

    k_used, k_count, k_time = grouped(s.kind, len(s.kinds))
    order = np.lexsort((rank[k_used], -k_time)) if len(k_used) else k_used
    by_kind = [
        {"kind": s.kinds[k_used[i]], "events": int(k_count[i]), "time_ns": int(k_time[i])} for i in order.tolist()
    ]
    nk = max(len(s.kinds), 1)
    n_used, n_count, n_time = grouped(s.name * nk + s.kind, (int(s.name.max()) + 1) * nk if len(s.name) else 0)
    kind_of, name_of = n_used % nk, n_used // nk
    order = np.lexsort((name_of, rank[kind_of], -n_time))[:limit] if len(n_used) else n_used
    top = [
        {"kind": s.kinds[kind_of[i]], "name": names[name_of[i]], "events": int(n_count[i]), "time_ns": int(n_time[i])}
        for i in order.tolist()
    ]
    return by_kind, top


def items(s: Spans) -> dict[str, list[Any]]:
    """A window's items as the API sends them: track, depth, ts, dur, name (name id),
    kind (text), n."""
    kinds = np.asarray(s.kinds, dtype=object)
    cols = {c: getattr(s, c).tolist() for c in ("track", "depth", "ts", "dur", "name", "n")}
    cols["kind"] = kinds[s.kind].tolist() if len(s.kind) else []
    return {c: cols[c] for c in ("track", "depth", "ts", "dur", "name", "kind", "n")}


class Launches:
    """Launch -> device work arrows: the device rows with a correlation, and the host
    launches (runtime, driver) by correlation, found by binary search."""

    def __init__(self, s: Spans, correlation: np.ndarray, has: np.ndarray, device_kinds: set[str]) -> None:
        # Only those rows are kept (not the whole table): device rows in ts order,
        # host launches in correlation order.
        # Kind code -> is a device / host launch kind: one lookup per row.
        is_dev = np.array([k in device_kinds for k in s.kinds] + [False], dtype=bool)
        is_host = np.array([k in ("runtime", "driver") for k in s.kinds] + [False], dtype=bool)
        dev = np.flatnonzero(has & is_dev[s.kind])
        host = np.flatnonzero(has & is_host[s.kind])
        host = host[np.argsort(correlation[host], kind="stable")]
        self.dev = s.take(dev)
        self.host = s.take(host)
        self.dev_corr = correlation[dev]
        self.host_corr = correlation[host]

    def between(
        self, t0: int, t1: int, tracks: tuple[int, ...] | None, limit: int, most: int
    ) -> tuple[list[tuple[int, ...]], bool]:
        """Arrows to device rows starting in [t0, t1], in their start order: (host track,
        depth, ts, device track, depth, ts, host name id, device name id). None and
        truncated when the window holds ``most`` device rows or more, or more than
        ``limit`` arrows."""
        dv, hs = self.dev, self.host
        lo, hi = int(np.searchsorted(dv.ts, t0, side="left")), int(np.searchsorted(dv.ts, t1, side="right"))
        if hi - lo >= most:
            return [], True
        corr = self.dev_corr[lo:hi]
        a = np.searchsorted(self.host_corr, corr, side="left")
        count = np.searchsorted(self.host_corr, corr, side="right") - a
        d = np.repeat(np.arange(lo, hi, dtype=np.int64), count)
        h = np.repeat(a, count) + _ranges(count)
        if tracks is not None:
            ids = np.asarray(tracks, dtype=np.int64)
            keep = np.isin(dv.track[d], ids) | np.isin(hs.track[h], ids)
            d, h = d[keep], h[keep]
        if len(d) > limit:
            return [], True
        cols = [hs.track[h], hs.depth[h], hs.ts[h], dv.track[d], dv.depth[d], dv.ts[d], hs.name[h], dv.name[d]]
        return list(zip(*(c.tolist() for c in cols))), False


def _ranges(count: np.ndarray) -> np.ndarray:
    """0..c-1 for each c of ``count``, concatenated."""
    total = int(count.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(count)
    out: np.ndarray = np.arange(total, dtype=np.int64) - np.repeat(ends - count, count)
    return out


class MaxSeries:
    """Series (one per key: rank, device type, device) of values sampled at ts, merged
    per bucket into (first ts, max of each value), as the memory track draws them."""

    def __init__(self, t: pa.Table, key: tuple[str, ...], values: tuple[str, ...], presorted: bool = False) -> None:
        """``presorted``: ``t`` comes sorted by ``key`` then ts already (nulls last),
        the order this sorts it in otherwise (the order of rows of equal key and ts
        changes no answer: they fall in one bucket)."""
        self.key, self.values = key, values
        if not presorted:
            t = t.sort_by([(k, "ascending") for k in key] + [("ts", "ascending")])
        ts = np.asarray(t.column("ts").to_numpy(zero_copy_only=False), dtype=np.int64)
        # Float columns, NaN for a null, so that a bucket's max skips nulls as SQL's does
        # (exact for values under 2**53: byte counts to 8 PiB).
        vals = {v: np.asarray(t.column(v).cast(pa.float64()).fill_null(np.nan).to_numpy(), np.float64) for v in values}
        # A series starts where any key column changes (each as dictionary codes, -1 for null).
        new = np.zeros(len(ts), dtype=bool)
        if len(ts):
            new[0] = True
        for k in key:
            codes = pc.dictionary_encode(t.column(k).combine_chunks()).indices.fill_null(-1)
            c = np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int64)
            new[1:] |= c[1:] != c[:-1]
        starts = np.flatnonzero(new).tolist()
        ends = [*starts[1:], len(ts)] if starts else []
        self.series: list[tuple[tuple[Any, ...], np.ndarray, dict[str, np.ndarray]]] = []
        for i, j in zip(starts, ends, strict=True):
            k_i = tuple(t.column(k)[i].as_py() for k in key)
            self.series.append((k_i, ts[i:j], {v: a[i:j] for v, a in vals.items()}))

    def window(self, t0: int, t1: int, bucket: int, where: dict[str, Any]) -> list[dict[str, Any]]:
        """One dict per series with key values ``where`` (None: any) and samples in
        [t0, t1], in key order: the key columns, and lists ts and one per value."""
        out: list[dict[str, Any]] = []
        for k, ts, vals in self.series:
            if any(v is not None and k[self.key.index(c)] != v for c, v in where.items()):
                continue
            lo, hi = int(np.searchsorted(ts, t0, side="left")), int(np.searchsorted(ts, t1, side="right"))
            if lo == hi:
                continue
            pix = (ts[lo:hi] - t0) // bucket
            starts = np.flatnonzero(np.concatenate([[True], pix[1:] != pix[:-1]]))
            one: dict[str, Any] = dict(zip(self.key, k))
            one["ts"] = ts[lo:hi][starts].tolist()
            for v, a in vals.items():
                m = np.fmax.reduceat(a[lo:hi], starts)
                one[v] = [None if x != x else int(x) for x in m.tolist()]
            out.append(one)
        return out
