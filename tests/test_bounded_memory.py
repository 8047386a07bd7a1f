"""What lets a trace larger than memory import and answer (bench/huge_import.py): the
same answers as the in-memory reads they replace, on a real trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aiprof.analysis import intervals as iv
from aiprof.analysis.common import fetch, unions
from aiprof.analysis.open_spans import open_at
from aiprof.importers import import_paths
from aiprof.store import open_profile

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "kineto" / "V100"
TRACE = TRACE / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if not TRACE.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    out, _ = import_paths([TRACE], tmp_path_factory.mktemp("b") / "v.aiprof")
    with open_profile(out) as p:
        yield p


def test_unions_read_in_small_batches_are_the_union_of_all(profile) -> None:  # type: ignore[no-untyped-def]
    sql = "SELECT rank, (kind = 'kernel')::INTEGER AS k, ts, ts + dur AS te FROM events WHERE dur > 0"
    whole = fetch(profile, sql)
    assert len(whole["ts"]) > 40_000
    got = unions(profile, sql, keys=2, rows=997)  # ~100 batches, each merged on its own
    assert len(got) == 2
    for (r, k), (s, e) in got.items():
        sel = (whole["rank"] == r) & (whole["k"] == k)
        ms, me = iv.merge(whole["ts"][sel], whole["te"][sel])
        assert np.array_equal(s, ms) and np.array_equal(e, me)
        if k == 0:
            assert len(s) < sel.sum()  # merged: nested CPU operators went into their outermost
    (only,) = unions(profile, "SELECT ts, ts + dur FROM events WHERE dur > 0", keys=0, rows=5000).values()
    ms, me = iv.merge(whole["ts"], whole["te"])
    assert np.array_equal(only[0], ms) and np.array_equal(only[1], me)


def test_open_at_finds_what_a_scan_finds(profile) -> None:  # type: ignore[no-untyped-def]
    spans = fetch(
        profile, "SELECT pid, tid, ts, ts + dur AS te FROM events WHERE device_type = 'cpu' AND kind = 'cpu_op'"
    )
    rng = np.random.default_rng(7)
    pick = rng.choice(len(spans["ts"]), 300, replace=False)
    points = {"ts": spans["ts"][pick] + 1, "pid": spans["pid"][pick], "tid": spans["tid"][pick]}
    # Points on a thread with no spans find none.
    points = {k: np.concatenate([v, v[:5] * 0 + (123456789 if k == "tid" else v[:5])]) for k, v in points.items()}
    got = open_at(points, spans)
    for i in range(len(points["ts"])):
        t, pid, tid = points["ts"][i], points["pid"][i], points["tid"][i]
        hit = np.flatnonzero((spans["pid"] == pid) & (spans["tid"] == tid) & (spans["ts"] <= t) & (t < spans["te"]))
        assert sorted(got[i]) == sorted(hit.tolist())
        # Outermost first: starts never decrease.
        assert all(spans["ts"][a] <= spans["ts"][b] for a, b in zip(got[i], got[i][1:]))
    assert all(got[i] == [] for i in range(300, 305)) and sum(map(len, got[:300])) >= 300
