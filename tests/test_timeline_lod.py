"""The timeline's levels of detail (web/tiles.pyramid) against the merge they replace,
on a real trace: each level holds the very rows that merging every event with its
bucket gives, and a wide window read from a level has the items of the merging rule
on that level's grid."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiprof.web.timeline import LOD_PER_PIXEL, Window
from test_timeline_tiles import _expected, imported, opened

__all__ = ["imported"]  # the module's fixture, shared


@pytest.fixture(scope="module")
def timeline(imported: Path) -> Any:
    yield from opened(imported, lod_min_events=0)  # levels of detail whatever the size


def test_each_level_holds_what_merging_every_event_with_its_bucket_gives(timeline: Any) -> None:
    tl, rows = timeline
    assert len(tl._lods) >= 3  # a pyramid, each level coarser and smaller
    buckets = [b for b, _ in tl._lods]
    assert buckets == sorted(buckets) and all(b2 % b1 == 0 for b1, b2 in itertools.pairwise(buckets))
    names = tl._names_by_id
    for b, level in tl._lods:
        got = level.rows(tl.span[0], tl.span[1], None)
        assert np.all(np.diff(level.spans.ts) >= 0)  # sorted for windows
        items = list(zip(*(getattr(got, c).tolist() for c in ("track", "depth", "ts", "dur", "n")), strict=True))
        want, longest = _expected(rows, Window(*tl.span, 1), b, tl.span[0])
        assert sorted(items) == want and int(got.n.sum()) == len(rows)
        for i, key in enumerate(items):
            if key in longest:
                assert (names[int(got.name[i])], got.kinds[int(got.kind[i])]) in longest[key]


@pytest.mark.parametrize(
    ("frac0", "frac1", "width", "max_items"),
    [(0.0, 1.0, 300, 100_000), (0.0, 1.0, 1500, 100_000), (0.2, 0.7, 400, 100_000), (0.0, 1.0, 4000, 300)],
)
def test_a_wide_window_read_from_a_level_has_the_rules_items(
    timeline: Any, frac0: float, frac1: float, width: int, max_items: int
) -> None:
    tl, rows = timeline
    a, b = tl.span
    w = Window(int(a + (b - a) * frac0), int(a + (b - a) * frac1), width, None, max_items)
    asked = -(-(w.t1 - w.t0) // w.width)
    grid = max((g for g, _ in tl._lods if g * LOD_PER_PIXEL <= asked), default=None)
    assert grid is not None  # the window does read a level
    got = tl.window(w)
    bucket = got["bucket_ns"]
    assert bucket >= asked and bucket % grid == 0 and len(got["items"]["ts"]) <= max_items
    it = got["items"]
    items = list(zip(it["track"], it["depth"], it["ts"], it["dur"], it["n"], strict=True))
    want, longest = _expected(rows, w, bucket, a)
    # A level's rows stand for whole buckets of its grid: at the window's two edge
    # buckets they may hold events outside it, so those are left out on both sides.
    first, last = (w.t0 - a) // bucket, (w.t1 - a) // bucket

    def within(x: tuple[int, ...]) -> bool:
        return first < (x[2] - a) // bucket < last

    assert sorted(filter(within, items)) == list(filter(within, want)) and len(want) > 50
    for i, key in enumerate(items):
        if key in longest:
            assert (got["names"][it["name"][i]], it["kind"][i]) in longest[key]


def test_a_narrow_window_reads_the_events(timeline: Any) -> None:
    tl, _ = timeline
    a, b = tl.span
    w = Window(a + (b - a) // 2, a + (b - a) // 2 + (b - a) // 100_000 + 1, 2000)
    assert tl.window(w)["bucket_ns"] == -(-(w.t1 - w.t0) // w.width)  # not rounded to a level's grid
