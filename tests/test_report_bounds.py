"""The report on a profile too big for its operators table and advice (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiprof.analysis import operators
from aiprof.analysis.operators import HOST_KINDS, host_spans
from aiprof.cli import overview
from aiprof.importers import import_paths
from aiprof.store import open_profile


@pytest.fixture(scope="module")
def rank0(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = shared_data / "kineto" / "sampled-128-ranks" / "sampled_rank-0.json.gz"
    path, _ = import_paths([src], tmp_path_factory.mktemp("bounds") / "r0.aiprof")
    return path


def _texts(items: list[dict[str, object]]) -> list[str]:
    return [str(i.get("text") or i.get("title") or "") for i in items]


def test_host_spans_counts_what_the_operators_view_nests(rank0: Path) -> None:
    meta = json.loads((rank0 / "profile.json").read_text())
    with open_profile(rank0) as p:
        kinds = ", ".join(f"'{k}'" for k in HOST_KINDS)
        (n,) = p.con.execute(f"SELECT count(*) FROM events WHERE device_type = 'cpu' AND kind IN ({kinds})").fetchall()[
            0
        ]
    assert host_spans([meta]) == n == 2329 + 71 + 1204 + 2  # cpu_op, user_annotation, runtime, step
    # Without an import summary (an older profile): all the events, an upper bound.
    assert host_spans([{"tables": {"events": 4811}}]) == 4811


def test_the_report_leaves_out_the_advice_and_top_operators_past_the_bound(
    rank0: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_profile(rank0) as p:
        whole_items = overview.compute_items(p)
        monkeypatch.setattr(operators, "BIG_PROFILE_HOST_SPANS", 3000)
        bounded_items = overview.compute_items(p)
    whole, bounded = _texts(whole_items), _texts(bounded_items)
    assert "top operators by host self time" in whole and not any("left out" in t for t in whole)
    assert any(t.startswith("[bold]top advice[/bold]") for t in whole)
    assert "top operators by host self time" not in bounded
    assert not any(t.startswith("[bold]top advice[/bold]") for t in bounded)
    said = [t for t in bounded if "left out" in t]
    assert len(said) == 2 and "(3,606 host spans)" in said[0] and "aiprof advise PROFILE" in said[0]
    assert "aiprof report PROFILE --view operators" in said[1]
    # The rest of the overview is the same: every table but the operators'.
    tables = [str(i["title"]) for i in whole_items if i["t"] == "table"]
    assert "top kernels by total time" in tables
    assert [str(i["title"]) for i in bounded_items if i["t"] == "table"] == [
        t for t in tables if t != "top operators by host self time"
    ]


def test_the_advice_on_a_big_profile_keeps_one_view_at_a_time_and_says_the_same(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiprof.advise import advise_json

    src = shared_data / "kineto" / "A100-nccl-parser" / "nccl_data.json.gz"
    path, _ = import_paths([src], tmp_path / "nccl.aiprof")
    with open_profile(path) as p:
        whole = advise_json(p)
        kept = set(p._memo)
    assert {"launch_rows", "runtime_calls"} <= kept  # the per-event intermediates stay
    monkeypatch.setattr(operators, "BIG_PROFILE_HOST_SPANS", 1000)
    with open_profile(path) as p:
        bounded = advise_json(p)
        assert not {"launch_rows", "runtime_calls"} & set(p._memo) and not p._per_event
        assert {"operators:name", "attribution"} <= set(p._memo)  # what is not per event stays
    assert bounded == whole and whole["advice"]


def test_forget_per_event_drops_only_what_was_marked(rank0: Path) -> None:
    with open_profile(rank0) as p:
        assert p.memo("a", lambda: [1, 2], per_event=True) == [1, 2]
        assert p.memo("b", lambda: [3]) == [3]
        p.forget_per_event()
        assert "a" not in p._memo and p._memo["b"] == [3]
        assert p.memo("a", lambda: [4], per_event=True) == [4]  # computed again when asked
