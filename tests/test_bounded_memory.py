"""What lets a trace larger than memory import and answer (bench/huge_import.py): the
same answers as the in-memory reads they replace, on a real trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aiprof.analysis import intervals as iv
from aiprof.analysis.common import fetch, unions
from aiprof.analysis.open_spans import each_open, open_at, open_values
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


def _batches(spans: dict[str, np.ndarray], rows: int):  # type: ignore[no-untyped-def]
    """The spans in SPAN_ORDER (thread, start, the longest first), ``rows`` at a time,
    each with its index as its value."""
    order = np.lexsort((-(spans["te"] - spans["ts"]), spans["ts"], spans["tid"] & 0xFFFFFFFF, spans["pid"]))
    for a in range(0, len(order), rows):
        sel = order[a : a + rows]
        yield {k: spans[k][sel] for k in ("pid", "tid", "ts", "te")} | {"value": sel}


@pytest.mark.parametrize("rows", [1, 7, 1000, 10**9])
def test_open_values_read_in_batches_finds_what_each_open_finds(profile, rows: int) -> None:  # type: ignore[no-untyped-def]
    spans = fetch(
        profile,
        "SELECT pid, tid, ts, ts + dur AS te FROM events WHERE device_type = 'cpu' "
        "AND kind IN ('cpu_op', 'user_annotation', 'python')",
    )
    rng = np.random.default_rng(11)
    pick = rng.choice(len(spans["ts"]), 400, replace=False)
    # Points inside spans, at a span's first instant (ties with a start, maybe across a
    # batch's end), at its end (closed there), and on a thread with no spans.
    ts = np.concatenate([spans["ts"][pick[:200]] + 3, spans["ts"][pick[200:300]], spans["te"][pick[300:]]])
    points = {"ts": ts, "pid": spans["pid"][pick], "tid": spans["tid"][pick]}
    points = {k: np.concatenate([v, v[:5] * 0 + (987654321 if k == "tid" else v[:5])]) for k, v in points.items()}
    want = dict(each_open(points, spans))
    got = dict(open_values(points, _batches(spans, rows)))
    assert got.keys() == want.keys() and len(got) >= 300
    for i, found in want.items():
        # The same spans, outermost first (ties of start and length in either order).
        assert sorted(got[i]) == sorted(found)
        assert [spans["ts"][k] for k in got[i]] == [spans["ts"][k] for k in found]


def test_allocations_and_memory_read_their_spans_in_batches(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from aiprof.analysis import allocations as alloc
    from aiprof.analysis import memory, open_spans

    trace = TRACE.parent / "df_index_resolver.json.gz"  # recorded with profile_memory
    out, _ = import_paths([trace], tmp_path / "d.aiprof")
    with open_profile(out) as p:
        whole, peak = alloc.allocations(p, {}), memory.memory(p, {})
    monkeypatch.setattr(open_spans, "SPAN_BATCH", 5)
    with open_profile(out) as p:
        small, small_peak = alloc.allocations(p, {}), memory.memory(p, {})
    assert whole.num_rows == 14005 and small.equals(whole)
    stacks = whole.column("stack").to_pylist()
    assert sum(s.count(" > ") >= 2 for s in stacks) > 10_000  # real stacks, found across batches
    owners = whole.column("operator").to_pylist()
    assert owners.count("aten::empty") == 2905 and owners.count("aten::mm") == 1470
    assert small_peak.equals(peak) and peak.num_rows >= 3
    held = {r["operator"]: r["blocks"] for r in peak.to_pylist()}
    assert sum(held.values()) > 0 and any(k.startswith("aten::") for k in held)


@pytest.mark.parametrize("keys", [1, 2, 3])
def test_unions_group_their_keys_as_numpy_does_rows(keys: int) -> None:
    # The keys of a batch are grouped by one int64 code per row (analysis.common._group):
    # the same distinct rows, in the same order, with the same row-to-key index, as
    # numpy's unique over rows (the old grouping), nulls (-1) and negatives included.
    from aiprof.analysis.common import _group

    rng = np.random.default_rng(keys)
    cols = [rng.integers(-3, 40, size=5000).astype(np.int64) for _ in range(keys)]
    cols[0][::7] = -1
    distinct, inverse = _group(cols)
    rows, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    assert distinct == [tuple(r) for r in rows.tolist()]
    assert np.array_equal(inverse, inv.reshape(-1))
    assert len(distinct) > 40


def test_unions_group_keys_past_one_int64_by_rows() -> None:
    # Four columns of 70,000 distinct values each: more combinations than one int64
    # holds, so the rows are grouped as numpy does them; the same answer.
    from aiprof.analysis.common import _group

    rng = np.random.default_rng(4)
    cols = [rng.integers(0, 1 << 40, size=70_000).astype(np.int64) for _ in range(4)]
    distinct, inverse = _group(cols)
    rows, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    assert distinct == [tuple(r) for r in rows.tolist()] and np.array_equal(inverse, inv.reshape(-1))
