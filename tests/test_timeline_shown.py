"""The timeline's first view (Timeline.shown_span, /tracks' shown_ns, the default
window) on the real V100 trace: what the listed tracks draw, not the whole span, which
also covers Kineto's hidden placeholder span (set up 95 ms before the first event) and
its "Record Window End" marker; the same whether the timeline is built from the events
or read back from what the profile kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.store.writer import write_meta
from aiprof.web import timeline_store
from aiprof.web.timeline import Timeline, Window

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
#: The V100 trace on the profile's axis (ns from its first ProfilerStep's host event):
#: Kineto's "PyTorch Profiler (0)" span starts at -95.3417 ms, "Record Window End" is at
#: 502.5497 ms; the shown tracks (two host threads, the autograd thread, stream 7) draw
#: from 0 (pt_main_thread's first op) to 495.002392 ms (thread -247463936's last end).
SPAN = (-95_341_700, 502_549_700)
SHOWN = (0, 495_002_392)


@pytest.fixture(scope="module")
def profiles(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(built from the events when opened, kept at import with levels of detail)."""
    root = tmp_path_factory.mktemp("shown")
    plain, _ = import_paths([shared_data / V100], root / "plain.aiprof")
    kept, _ = import_paths([shared_data / V100], root / "kept.aiprof")
    meta: dict[str, Any] = json.loads((kept / "profile.json").read_text())
    timeline_store.keep(kept, meta, min_events=0, lod_min_events=0)
    write_meta(kept, meta)
    return plain, kept


def test_the_first_view_is_what_the_shown_tracks_draw(profiles: tuple[Path, Path]) -> None:
    plain, kept = profiles
    with open_profile(plain) as p:
        tl = Timeline(p)
        assert tl.shown_span() == SHOWN
        assert tl.span == SPAN  # the axis (and the levels' grid) stays the whole span
        # The left-out tracks are what lies outside: Kineto's markers only.
        shown = {t["track"] for t in tl.tracks()}
        out = tl.query(
            "SELECT track, list(n.name ORDER BY n.name) AS names, min(ts) AS t0, max(ts + dur) AS t1 "
            "FROM tl JOIN tl_names n USING (name_id) GROUP BY ALL ORDER BY track"
        )
        hidden = [r for r in out if r["track"] not in shown]
        assert sorted(name for r in hidden for name in r["names"]) == [
            "Iteration Start: PyTorch Profiler",
            "PyTorch Profiler (0)",
            "Record Window End",
        ]
        drawn = [r for r in out if r["track"] in shown]
        assert (min(r["t0"] for r in drawn), max(r["t1"] for r in drawn)) == SHOWN
        assert min(r["t0"] for r in hidden) == SPAN[0] and max(r["t1"] for r in hidden) == SPAN[1]
    with open_profile(kept) as p:
        lazy = Timeline(p)
        assert lazy.shown_span() == SHOWN and lazy.span == SPAN
        assert not lazy.events_indexed  # read from the coarsest kept level alone
        # Its first window, on the tracks the page draws: from the first event to the last end.
        w = lazy.window(Window(*SHOWN, 1200, tuple(t["track"] for t in lazy.tracks())))
        items = w["items"]
        assert min(items["ts"]) == SHOWN[0]
        assert max(t + d for t, d in zip(items["ts"], items["dur"], strict=True)) == SHOWN[1]


def test_tracks_answer_shown_ns_and_the_default_window_is_it(profiles: tuple[Path, Path]) -> None:
    from test_serve_support import running_server

    plain, _ = profiles
    with running_server(plain) as (base, _token), httpx.Client(base_url=base + "api/v1", timeout=60) as c:
        pid = c.get("/profiles").json()["profiles"][0]["id"]
        tr = c.get(f"/profiles/{pid}/tracks").json()
        assert tr["span_ns"] == list(SPAN) and tr["shown_ns"] == list(SHOWN)
        # The page asks for its first window before the track list comes, with no t0/t1.
        first = c.get(f"/profiles/{pid}/timeline", params={"width": 1000}).json()
        assert (first["t0"], first["t1"]) == SHOWN
        # A window anywhere on the axis, the hidden start included, is still answered.
        before = c.get(f"/profiles/{pid}/timeline", params={"t0": SPAN[0], "t1": 0, "width": 500}).json()
        assert (before["t0"], before["t1"]) == (SPAN[0], 0)
        summary = c.get(f"/profiles/{pid}/timeline/summary", params={"width": 500}).json()
        assert (summary["t0"], summary["t1"]) == SHOWN
        doc = c.get("/openapi.json").json()
        assert "shown_ns" in doc["components"]["schemas"]["TracksResponse"]["required"]
