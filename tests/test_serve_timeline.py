"""Timeline windows on small profiles built here: nesting, merging, validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aiprof.errors import QueryError
from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.web.timeline import Timeline, Window, nesting_depth


def test_nesting_depth() -> None:
    # One track: a parent [0, 100) holding [10, 20), [20, 30) (touching siblings) and
    # an instant at 25; a second track starts over at 0.
    track = np.array([0, 0, 0, 0, 0, 1, 1])
    ts = np.array([0, 10, 20, 25, 100, 5, 6])
    dur = np.array([100, 10, 10, 0, 5, 10, 1])
    assert nesting_depth(track, ts, dur).tolist() == [0, 1, 1, 2, 0, 0, 1]
    # Same start: the longer one is the parent, whatever the input order.
    assert nesting_depth(np.zeros(2), np.array([0, 0]), np.array([5, 50])).tolist() == [1, 0]
    assert nesting_depth(np.zeros(0), np.zeros(0), np.zeros(0)).tolist() == []


def test_window_validation() -> None:
    assert Window.parse("1", "2", "10", "3,4").tracks == (3, 4)
    assert Window.parse(0, 5, tracks=[1]).tracks == (1,)
    assert Window.parse(0, 5).tracks is None
    for bad in [("a", 1), (5, 1), (0, 1, 0), (0, 1, 10**6), (0, 1, 10, "x")]:
        with pytest.raises(QueryError):
            Window.parse(*bad)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """1000 back-to-back 1 µs ops under one 1 ms parent, and one kernel they launch."""
    evs = [{"ph": "X", "cat": "user_annotation", "name": "parent", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    evs += [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 3}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(1000)
    ]
    evs.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 500.25,
            "dur": 0.5,
            "args": {"correlation": 7},
        }
    )
    evs.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 600,
            "dur": 50,
            "args": {"correlation": 7, "device": 0, "stream": 7},
        }
    )
    src = tmp_path / "small.json"
    src.write_text(json.dumps({"traceEvents": evs}))
    out, _ = import_paths([src], tmp_path / "small.aiprof")
    return out


def test_merging_bounds_items_and_keeps_counts(small: Path) -> None:
    with open_profile(small) as p:
        tl = Timeline(p)
        tracks = tl.tracks()
        assert [t["is_device"] for t in tracks] == [False, True]
        assert tracks[0]["max_depth"] == 2  # parent > op > launch inside op500
        w = tl.window(Window(0, 1_000_000, 100))
        it = w["items"]
        assert sum(it["n"]) == 1003
        assert len(it["ts"]) <= 100 + 2 + 2 * 100
        parent = it["n"][it["depth"].index(0)]
        assert parent == 1 and w["names"][it["name"][it["depth"].index(0)]] == "parent"
        capped = tl.window(Window(0, 1_000_000, 1000, max_items=50))
        assert len(capped["items"]["ts"]) <= 50 and sum(capped["items"]["n"]) == 1003
        # Zoomed in, every event is its own item and the launch -> kernel arrow is there.
        z = tl.window(Window(499_000, 651_000, 2000))
        assert set(z["items"]["n"]) == {1}
        f = z["flows"]
        assert f["from_ts"] == [500_250] and f["to_ts"] == [600_000]
        s = tl.summary(Window(0, 500_000, 10))
        ops = next(k for k in s["by_kind"] if k["kind"] == "cpu_op")
        assert ops["events"] == 501 and ops["time_ns"] == 500_000  # 500 whole ops, and op500 touching t1 (0 ns inside)
