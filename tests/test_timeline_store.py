"""The timeline kept in a profile at import (web/timeline_store.py) against the one built
from its events, on a real trace: the same tables, levels of detail and answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.store.spans import FLOW_SQL
from aiprof.store.writer import write_meta
from aiprof.web import timeline_store
from aiprof.web.timeline import Timeline, Window

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "kineto" / "V100"
TRACE = TRACE / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profile that keeps its timeline, levels of detail included (the trace is
    below both sizes, so they are lowered)."""
    if not TRACE.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    out, _ = import_paths([TRACE], tmp_path_factory.mktemp("kept") / "v.aiprof")
    assert "timeline" not in _meta(out)  # a small profile is not given one at import
    meta = _meta(out)
    timeline_store.keep(out, meta, min_events=0, lod_min_events=0)
    write_meta(out, meta)
    return out


def _meta(folder: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((folder / "profile.json").read_text())
    return meta


def _answers(tl: Timeline) -> list[Any]:
    a, b = tl.span
    out: list[Any] = [tl.span, tl.tracks()]
    for f0, f1, width in ((0.0, 1.0, 1500), (0.0, 1.0, 200), (0.4, 0.41, 2000), (0.3, 0.6, 700)):
        w = Window(int(a + (b - a) * f0), int(a + (b - a) * f1), width)
        out += [tl.window(w), tl.summary(w)]
    out.append(tl.search("gemm"))
    out.append(tl.search("^cuda", regex=True, order="-dur"))
    out.append(tl.query("SELECT kind, count(*) AS n FROM tl GROUP BY kind ORDER BY kind"))
    return out


def test_the_kept_timeline_gives_what_the_events_give(kept: Path) -> None:
    meta = _meta(kept)
    assert meta["timeline"]["version"] == timeline_store.TIMELINE_VERSION and len(meta["timeline"]["lods"]) >= 3
    with open_profile(kept) as p, open_profile(kept) as q:
        assert timeline_store.load(p) is not None
        read = Timeline(p)
        read.build()
        q.metas[0].pop("timeline")  # as if it kept none
        assert timeline_store.load(q) is None
        built = Timeline(q, lod_min_events=0)
        for name in ("tl", "tl_tracks", "tl_names"):
            assert read.table(name).equals(built.table(name)), name
        assert [b for b, _ in read.levels()] == [b for b, _ in built.levels()]
        for (_, x), (_, y) in zip(read.levels(), built.levels(), strict=True):
            for c in ("track", "depth", "ts", "dur", "name", "n", "wdur"):
                assert np.array_equal(getattr(x, c), getattr(y, c)), c
            assert [x.kinds[k] for k in x.kind] == [y.kinds[k] for k in y.kind]
        assert _answers(read) == _answers(built)


def test_the_timeline_built_from_the_events_names_them_in_byte_order_and_keeps_every_drawable_one(kept: Path) -> None:
    with open_profile(kept) as p:
        p.metas[0].pop("timeline")
        tables = []
        for _ in range(2):
            tl = Timeline(p, lod_min_events=0)
            tl.build()
            tables.append({n: tl.table(n) for n in ("tl", "tl_tracks", "tl_names")})
        drawable = p.con.execute(
            f"SELECT count(*), count(DISTINCT coalesce(name, '')) FROM events WHERE NOT coalesce({FLOW_SQL}, FALSE)"
        ).fetchall()[0]
    first, again = tables
    for name in first:  # ties of start and length nest in the events' order: the same each time
        assert first[name].equals(again[name]), name
    names = first["tl_names"].column("name").to_pylist()
    assert names == sorted(names, key=lambda s: s.encode()) and len(names) == drawable[1]
    assert first["tl_names"].column("name_id").to_pylist() == list(range(len(names)))
    assert first["tl"].num_rows == drawable[0] == sum(first["tl_tracks"].column("events").to_pylist())


def test_the_first_wide_windows_read_the_coarsest_levels_only(kept: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first paint of a big profile waits on its coarsest level alone: the track list
    # and a window of the whole span are answered before the events are read, with the
    # answers that the events give. (Fewer arrows per window than the default, so that
    # this trace's whole span holds too many to draw, as a big profile's does.)
    from aiprof.web import timeline

    monkeypatch.setattr(timeline, "MAX_FLOWS", 500)
    with open_profile(kept) as p, open_profile(kept) as q:
        lazy = Timeline(p)
        lazy.build()
        q.metas[0].pop("timeline")
        built = Timeline(q, lod_min_events=0)
        built.build()
        a, b = built.span
        assert lazy.span == built.span and lazy.tracks() == built.tracks()
        wide = [Window(a, b, 1500), Window(a, b, 200), Window(a - (b - a), b + (b - a), 900)]
        for w in wide:
            got = lazy.window(w)
            assert got["flows_truncated"] and got == built.window(w)
        assert not lazy.events_indexed  # nothing above needed the events
        narrow = Window(int(a + (b - a) * 0.4), int(a + (b - a) * 0.401), 2000)
        assert lazy.window(narrow) == built.window(narrow)
        assert lazy.events_indexed
        assert lazy.summary(narrow) == built.summary(narrow) and _answers(lazy) == _answers(built)


def test_a_kept_level_unreadable_when_first_read_falls_back_to_the_events(kept: Path, tmp_path: Path) -> None:
    other = tmp_path / "u.aiprof"
    shutil.copytree(kept, other)
    with open_profile(other) as p, open_profile(kept) as q:
        tl = Timeline(p)
        tl.build()  # the levels are listed, not read
        for f in (other / timeline_store.FOLDER).glob("lod-*.arrow"):
            f.write_bytes(b"not arrow")
        w = Window(*tl.span, 300)
        assert tl.window(w) == Timeline(q).window(w)


def test_it_is_not_read_for_profiles_opened_together_or_of_another_version(kept: Path, tmp_path: Path) -> None:
    other = tmp_path / "w.aiprof"
    shutil.copytree(kept, other)
    with open_profile(kept, other) as p:
        assert timeline_store.load(p) is None  # two time axes made one: built from the events
    meta = _meta(other)
    meta["timeline"]["version"] = timeline_store.TIMELINE_VERSION + 1
    write_meta(other, meta)
    with open_profile(other) as p:
        assert timeline_store.load(p) is None
    assert timeline_store.wanted(other, meta) is False  # below the size an import keeps it for
    shutil.rmtree(other / timeline_store.FOLDER)
    meta["timeline"]["version"] = timeline_store.TIMELINE_VERSION
    write_meta(other, meta)
    with open_profile(other) as p:
        assert timeline_store.load(p) is None  # a file missing
        tl = Timeline(p)
        assert tl.tracks() and tl.window(Window(*tl.span, 500))["items"]["ts"]


def _search_sql(
    tl: Timeline,
    ids: list[int],
    kind: str | None,
    t0: int | None,
    t1: int | None,
    longest: bool,
    limit: int,
    offset: int,
) -> list[Any]:
    """The matches as SQL over tl gives them (what the search ran before it read the
    numpy columns): the reference."""
    where = [f"l.name_id IN ({', '.join(map(str, ids))})" if ids else "false"]
    if kind:
        where.append(f"l.kind = '{kind}'")
    if t0 is not None:
        where.append(f"l.ts + l.dur >= {t0}")
    if t1 is not None:
        where.append(f"l.ts <= {t1}")
    ties = "l.track, l.depth, n.name, l.kind"
    sort = f"l.dur DESC, l.ts, {ties}" if longest else f"l.ts, {ties}, l.dur DESC"
    return tl.query(
        f"""SELECT l.track, l.depth, l.ts, l.dur, n.name, l.kind FROM tl l JOIN tl_names n USING (name_id)
            WHERE {" AND ".join(where)} ORDER BY {sort} LIMIT {limit} OFFSET {offset}"""
    )


@pytest.mark.parametrize("q", ["a", "gemm", "memcpy", "cuda", "zz-nothing"])
def test_search_pages_are_the_rows_sql_orders(kept: Path, q: str) -> None:
    with open_profile(kept) as p:
        tl = Timeline(p)
        tl.build()
        a, b = tl.span
        ids = [int(r["name_id"]) for r in tl.query("SELECT name_id FROM tl_names WHERE contains(lower(name), ?)", [q])]
        cases = [
            (None, None, None, False, 500, 0),
            (None, None, None, True, 500, 0),
            (None, None, None, False, 7, 3),
            (None, None, None, True, 13, 40),
            ("kernel", None, None, True, 50, 0),
            ("runtime", a + (b - a) // 3, a + (b - a) // 2, False, 20, 5),
            (None, a + (b - a) // 2, None, True, 5000, 0),
            ("no-such-kind", None, None, False, 10, 0),
            (None, None, None, False, 10, 10**6),
        ]
        for kind, t0, t1, longest, limit, offset in cases:
            got = tl.search(q, kind=kind, t0=t0, t1=t1, order="-dur" if longest else "ts", limit=limit, offset=offset)
            want = _search_sql(tl, ids, kind, t0, t1, longest, limit, offset)
            assert got["matches"] == want, (kind, t0, t1, longest, limit, offset)
            assert got["names"] == len(ids)
            assert got["truncated"] == (offset + len(want) < got["total"])
        full = tl.search(q, limit=10**7)
        assert full["total"] == len(full["matches"]) == len(_search_sql(tl, ids, None, None, None, False, 10**7, 0))


def test_an_import_keeps_no_timeline_past_its_memory_budget(kept: Path, tmp_path: Path) -> None:
    other = tmp_path / "big.aiprof"
    shutil.copytree(kept, other)
    shutil.rmtree(other / timeline_store.FOLDER)
    meta = _meta(other)
    meta.pop("timeline")
    events = int(meta["tables"]["events"])
    timeline_store.keep(other, meta, min_events=0, max_events=events - 1)
    assert "timeline" not in meta and not (other / timeline_store.FOLDER).exists()
    (said,) = [w for w in meta["warnings"] if "timeline" in w]
    need = events * timeline_store.BUILD_BYTES_PER_EVENT / 2**30
    assert f"indexing {events:,} events takes about {need:.1f} GiB" in said and "aiprof import" in said
    # The bound is the import's: kept on request, as `aiprof import PROFILE` does.
    timeline_store.keep(other, meta, min_events=0)
    assert (
        meta["timeline"]["version"] == timeline_store.TIMELINE_VERSION and (other / "timeline" / "tl.arrow").is_file()
    )
    assert not [w for w in meta["warnings"] if "timeline" in w]
    assert (
        timeline_store.KEEP_MAX_AT_IMPORT * timeline_store.BUILD_BYTES_PER_EVENT <= timeline_store.IMPORT_BUDGET_BYTES
    )


def test_the_import_says_when_it_keeps_no_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiprof.store import derived

    if not TRACE.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    monkeypatch.setattr(derived, "DERIVE_MIN_EVENTS", 0)
    monkeypatch.setattr(timeline_store, "KEEP_MIN_EVENTS", 0)
    monkeypatch.setattr(timeline_store, "KEEP_MAX_AT_IMPORT", 10)
    out, ctx = import_paths([TRACE], tmp_path / "v.aiprof")
    (said,) = [w for w in ctx.warnings if "timeline" in w]
    assert said.startswith("the timeline's index was not kept: indexing ") and said in _meta(out)["warnings"]
    assert "timeline" not in _meta(out) and not (out / "timeline").exists()
    assert (out / "step_totals.parquet").is_file()  # the derived tables are there
    with open_profile(out) as p:  # and the served timeline is built from the events
        tl = Timeline(p)
        assert tl.tracks() and tl.window(Window(*tl.span, 500))["items"]["ts"]
