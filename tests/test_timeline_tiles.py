"""Windows merged in memory (web/tiles.py) against the merging rule stated plainly, on
a real trace: every event that overlaps the window is in exactly one item."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import import_paths
from aiprof.store import DEVICE_KINDS, open_profile
from aiprof.web.timeline import Timeline, Window

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "kineto" / "V100"
TRACE = TRACE / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TRACE.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    out, _ = import_paths([TRACE], tmp_path_factory.mktemp("tl") / "v.aiprof")
    return out


def opened(path: Path, **kw: Any) -> Any:
    """(Timeline, its rows with names) of the profile at ``path``."""
    with open_profile(path) as p:
        tl = Timeline(p, **kw)
        tl.build()
        rows = tl.query(
            "SELECT l.track, l.depth, l.ts, l.dur, n.name, l.kind, l.correlation FROM tl l JOIN tl_names n USING (name_id)"
        )
        yield tl, rows


@pytest.fixture(scope="module")
def timeline(imported: Path) -> Any:
    yield from opened(imported)


def _expected(
    rows: list[dict[str, Any]], w: Window, bucket: int, origin: int | None = None
) -> tuple[list[tuple[int, ...]], dict[Any, set[Any]]]:
    """The merging rule stated plainly: the (track, depth, ts, dur, n) items of the rows
    that overlap ``w``, on the grid of ``bucket`` from ``origin`` (default: w.t0), and
    the (name, kind) each merged item may carry (those of its longest events)."""
    items: list[tuple[int, ...]] = []
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = defaultdict(list)
    at = w.t0 if origin is None else origin
    for r in rows:
        if r["ts"] > w.t1 or r["ts"] + r["dur"] < w.t0 or (w.tracks is not None and r["track"] not in w.tracks):
            continue
        if r["dur"] >= bucket:
            items.append((r["track"], r["depth"], r["ts"], r["dur"], 1))
        else:
            groups[(r["track"], r["depth"], (r["ts"] - at) // bucket)].append(r)
    names: dict[Any, set[Any]] = {}
    for g in groups.values():
        ts, end = min(r["ts"] for r in g), max(r["ts"] + r["dur"] for r in g)
        key = (g[0]["track"], g[0]["depth"], ts, end - ts, len(g))
        items.append(key)
        longest = max(r["dur"] for r in g)
        names.setdefault(key, set()).update((r["name"], r["kind"]) for r in g if r["dur"] == longest)
    return sorted(items), names


@pytest.mark.parametrize(
    ("frac0", "frac1", "width", "tracks"),
    [(0.0, 1.0, 1600, None), (0.40, 0.41, 2400, None), (0.3, 0.6, 500, (0, 2)), (0.5, 0.5001, 3000, None)],
)
def test_window_items_follow_the_merging_rule(
    timeline: Any, frac0: float, frac1: float, width: int, tracks: tuple[int, ...] | None
) -> None:
    tl, rows = timeline
    a, b = tl.span
    w = Window(int(a + (b - a) * frac0), int(a + (b - a) * frac1), width, tracks, max_items=100_000)
    got = tl.window(w)
    bucket = got["bucket_ns"]
    assert bucket == max(1, -(-(w.t1 - w.t0) // w.width))
    it = got["items"]
    items = list(zip(it["track"], it["depth"], it["ts"], it["dur"], it["n"]))
    want, names = _expected(rows, w, bucket)
    assert sorted(items) == want and len(want) > 0
    for i, key in enumerate(items):
        if key in names:
            assert (got["names"][it["name"][i]], it["kind"][i]) in names[key]


def test_flows_are_the_launches_of_the_windows_device_work(timeline: Any) -> None:
    tl, rows = timeline
    a, b = tl.span
    w = Window(int(a + (b - a) * 0.45), int(a + (b - a) * 0.46), 2000)
    got = tl.window(w)
    host = defaultdict(list)
    for r in rows:
        if r["kind"] in ("runtime", "driver") and r["correlation"] is not None:
            host[r["correlation"]].append(r)
    want = sorted(
        (h["track"], h["ts"], d["track"], d["ts"])
        for d in rows
        if d["kind"] in DEVICE_KINDS and d["correlation"] is not None and w.t0 <= d["ts"] <= w.t1
        for h in host[d["correlation"]]
    )
    f = got["flows"]
    assert not got["flows_truncated"]
    assert sorted(zip(f["from_track"], f["from_ts"], f["to_track"], f["to_ts"])) == want and len(want) > 10
    assert f["to_ts"] == sorted(f["to_ts"])


def test_max_series_per_bucket_skips_nulls_and_keeps_devices_apart() -> None:
    import random

    import pyarrow as pa

    from aiprof.web.tiles import MaxSeries

    rnd = random.Random(5)
    rows = [
        {
            "rank": 0,
            "device": d,
            "device_type": "cuda" if d >= 0 else "cpu",
            "ts": rnd.randrange(0, 10_000),
            "allocated": None if rnd.random() < 0.1 else rnd.randrange(1 << 40),
            "reserved": rnd.randrange(1 << 40),
        }
        for d in (0, 1, -1)
        for _ in range(500)
    ]
    ms = MaxSeries(pa.Table.from_pylist(rows), ("rank", "device", "device_type"), ("allocated", "reserved"))
    t0, t1, bucket = 2_000, 7_000, 37
    got = ms.window(t0, t1, bucket, {"rank": 0, "device": 1})
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["device"] == 1 and t0 <= r["ts"] <= t1:
            groups[(r["ts"] - t0) // bucket].append(r)
    want: dict[str, Any] = {"rank": 0, "device": 1, "device_type": "cuda", "ts": [], "allocated": [], "reserved": []}
    for _, g in sorted(groups.items()):
        alloc = [r["allocated"] for r in g if r["allocated"] is not None]
        want["ts"].append(min(r["ts"] for r in g))
        want["allocated"].append(max(alloc) if alloc else None)
        want["reserved"].append(max(r["reserved"] for r in g))
    assert got == [want] and len(want["ts"]) > 50
    assert [r["device"] for r in ms.window(0, 10_000, 100, {"rank": None, "device": None})] == [-1, 0, 1]
    empty = MaxSeries(pa.Table.from_pylist(rows).slice(0, 0), ("rank", "device", "device_type"), ("allocated",))
    assert empty.window(0, 10_000, 100, {"rank": None, "device": None}) == []  # a profile without allocator events
    # Sorted by DuckDB as the server asks for the rows (ORDER BY key, ts, nulls last): the same series.
    import duckdb

    con = duckdb.connect()
    con.register("mem", pa.Table.from_pylist(rows))
    by_db = con.sql(
        "SELECT * FROM mem ORDER BY rank NULLS LAST, device NULLS LAST, device_type NULLS LAST, ts NULLS LAST"
    ).to_arrow_table()
    pre = MaxSeries(by_db, ("rank", "device", "device_type"), ("allocated", "reserved"), presorted=True)
    for where in ({"rank": 0, "device": 1}, {"rank": None, "device": None}):
        assert pre.window(t0, t1, bucket, where) == ms.window(t0, t1, bucket, where)


@pytest.mark.parametrize("max_items", [300, 2000])
def test_a_widened_bucket_merges_as_if_asked_for_at_once(timeline: Any, max_items: int) -> None:
    tl, rows = timeline
    a, b = tl.span
    w = Window(a, b, 4000, None, max_items=max_items)
    got = tl.window(w)
    bucket = got["bucket_ns"]
    assert bucket > -(-(w.t1 - w.t0) // w.width)  # it was widened
    it = got["items"]
    items = list(zip(it["track"], it["depth"], it["ts"], it["dur"], it["n"]))
    want, names = _expected(rows, w, bucket)
    assert len(items) <= max_items and sorted(items) == want
    for i, key in enumerate(items):
        if key in names:
            assert (got["names"][it["name"][i]], it["kind"][i]) in names[key]


@pytest.mark.parametrize(
    ("frac0", "frac1", "tracks", "limit"),
    [(0.0, 1.0, None, 20), (0.40, 0.41, None, 50), (0.3, 0.6, (0, 2), 5), (0.5, 0.5001, None, 1000)],
)
def test_summary_totals_equal_the_sql_statement(
    timeline: Any, frac0: float, frac1: float, tracks: tuple[int, ...] | None, limit: int
) -> None:
    tl, _ = timeline
    a, b = tl.span
    w = Window(a + int((b - a) * frac0), a + int((b - a) * frac1), 800, tracks)
    got = tl.summary(w, limit)
    tr = "" if tracks is None else f" AND track IN ({','.join(map(str, tracks))})"
    src = f"SELECT * FROM tl WHERE ts <= {w.t1} AND ts + dur >= {w.t0}{tr}"
    clip = f"sum(least(ts + dur, {w.t1}) - greatest(ts, {w.t0}))::BIGINT"
    kinds = tl.query(
        f"SELECT kind, count(*) AS events, {clip} AS time_ns FROM ({src}) GROUP BY kind ORDER BY time_ns DESC, kind"
    )
    top = tl.query(
        f"""SELECT kind, n.name, count(*) AS events, {clip} AS time_ns FROM ({src}) JOIN tl_names n USING (name_id)
            GROUP BY kind, n.name ORDER BY time_ns DESC, kind, n.name LIMIT {limit}"""
    )
    assert got["by_kind"] == kinds and got["top"] == top
    assert got["events"] == sum(k["events"] for k in kinds) > 0
