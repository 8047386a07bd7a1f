"""The ``vendor_steps`` view (step time as msprof-analyze, torch_npu or MindInsight computed
it) and its table in the report's overview: on the real msprof-analyze cluster output,
on a torch_npu folder with a step_trace_time.csv built from its documented columns, on a
MindInsight cluster file, and on a Kineto trace (no such rows)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import Query, full_table, run
from aiprof.analysis.vendor_steps import FIGURES, column_name
from aiprof.cli.overview import compute_items
from aiprof.importers import import_paths
from aiprof.store.reader import open_profile

FIXED = ["rank", "step", "source", *FIGURES, "communication_pct"]


def _open(src: Path, out: Path) -> Any:
    path, _ = import_paths([src], out)
    return open_profile(path)


def _tables(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [it for it in items if it["t"] == "table"]


def _lines(items: list[dict[str, Any]]) -> list[str]:
    return [it["text"] for it in items if it["t"] == "line"]


@pytest.fixture(scope="module")
def cluster(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _open(shared_data / "ascend/cluster", tmp_path_factory.mktemp("c") / "ascl")


def test_naming_rule() -> None:
    assert column_name("Communication(Not Overlapped)") == "communication_not_overlapped_us"
    assert column_name("Communication(Not Overlapped and Exclude Receive)") == (
        "communication_not_overlapped_and_exclude_receive_us"
    )
    assert column_name("Stage") == "stage_us" and column_name("communication_alone") == "communication_alone_us"


def test_cluster_real(cluster: Any) -> None:
    res = run(cluster, "vendor_steps", Query())
    t = res.table
    assert t.column_names == FIXED
    rows = t.to_pylist()
    assert [r["rank"] for r in rows] == list(range(8))
    assert {r["source"] for r in rows} == {"cluster_step_trace_time"} and {r["step"] for r in rows} == {None}
    r0 = rows[0]
    # As cluster_step_trace_time.csv says for rank 0 (µs).
    assert r0["stage_us"] == 1754645.75
    assert r0["communication_not_overlapped_us"] == 683731.2897031249
    assert r0["computing_us"] == 80309.68717187493 and r0["free_us"] == 990605.1042031233
    assert r0["bubble_us"] == 0.0 and r0["communication_us"] == 689255.834328125
    assert r0["communication_pct"] == pytest.approx(100 * 683731.2897031249 / 1754645.75)
    assert rows[7]["stage_us"] == 1682031.25
    assert res.units["stage_us"] == "µs" and res.units["communication_pct"] == "%"


def test_cluster_report_table(cluster: Any) -> None:
    items = compute_items(cluster)
    vendor = [t for t in _tables(items) if t["title"].startswith("step time by rank")]
    assert len(vendor) == 1 and "msprof-analyze" in vendor[0]["title"]
    assert [c[0] for c in vendor[0]["cols"]] == [
        "rank",
        "stage",
        "computing",
        "comm. not overlapped",
        "free",
        "% comm.",
    ]
    assert vendor[0]["rows"][0] == ["0", "1,754,645.8", "80,309.7", "683,731.3", "990,605.1", "38.967"]
    assert len(vendor[0]["rows"]) == 8
    # Right after the steps line, and the note about the 4 events before the breakdown.
    lines = [it.get("text") or it.get("title") for it in items]
    at = lines.index(vendor[0]["title"])
    assert lines[at - 1].startswith("steps:")
    assert "only their 4 events" in lines[at + 1]
    assert any("breakdown" in t["title"] for t in _tables(items)[1:])


def test_many_ranks_spread(tmp_path: Path) -> None:
    header = "Step,Type,Index,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble"
    rows = [f",rank,{r},{80 + r},{100 * r},0,{100 * r},10,{1000 + r},0" for r in range(10)]
    src = tmp_path / "cluster_step_trace_time.csv"
    src.write_text("\n".join([header, *rows]) + "\n")
    p = _open(src, tmp_path / "many")
    assert full_table(p, "vendor_steps").num_rows == 10
    vendor = [t for t in _tables(compute_items(p)) if t["title"].startswith("step time by rank")]
    assert len(vendor) == 1 and vendor[0]["title"].endswith("over 10 ranks")
    stage = next(r for r in vendor[0]["rows"] if r[0] == "stage")
    assert stage == ["stage", "1,004.5", "1,000.0", "0", "1,009.0", "9"]


def test_torch_npu_step_trace_time(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    for f in ("trace_view.json", "kernel_details.csv"):
        shutil.copy(shared_data / "ascend/torch_npu" / f, out / f)
    (out / "step_trace_time.csv").write_text(
        "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
        "Communication(Not Overlapped and Exclude Receive),Preparing\n"
        "0,1,1000.5,20,5,25,7,1100,0,20,1.5\n"
        "0,2,900,40,5,45,7,1000,0,40,1.5\n"
    )
    p = _open(tmp_path / "x_ascend_pt", tmp_path / "tn")
    t = full_table(p, "vendor_steps")
    assert t.column_names == FIXED  # Device_id is no figure
    rows = t.to_pylist()
    assert [(r["rank"], r["step"], r["source"]) for r in rows] == [(0, 1, "step_trace_time"), (0, 2, "step_trace_time")]
    assert rows[0]["computing_us"] == 1000.5 and rows[0]["preparing_us"] == 1.5
    assert rows[1]["communication_pct"] == pytest.approx(4.0)
    items = compute_items(p)
    vendor = [t for t in _tables(items) if t["title"].startswith("step time by rank")]
    assert "torch_npu" in vendor[0]["title"] and "mean of 2 steps" in vendor[0]["title"]
    assert vendor[0]["rows"] == [["0", "1,050.0", "950.2", "30", "7", "2.857"]]
    # The trace marks a step: no note about missing step spans.
    assert not any("no step spans" in ln for ln in _lines(items))


def test_mindinsight_cluster_ms(tmp_path: Path) -> None:
    src = tmp_path / "ascend_cluster_analyse_pipeline-parallel_2_4_1.csv"
    src.write_text(
        "computation_time,communication_alone_time,stage_time,receive_alone_time,collective_communication_alone_time\n"
        "70,10,100,15,5\n"
        "72,11,104,15,6\n"
        "71,10.5,102,15,5.5\n"
    )
    rows = full_table(_open(src, tmp_path / "ms"), "vendor_steps").to_pylist()
    assert [(r["rank"], r["step"]) for r in rows] == [(1, 1), (1, 2), (1, None)]
    assert rows[0]["stage_us"] == 100_000.0 and rows[0]["computation_us"] == 70_000.0
    assert rows[2]["communication_alone_us"] == 10_500.0 and rows[2]["communication_pct"] is None


def test_kineto_has_none(shared_data: Path, tmp_path: Path) -> None:
    p = _open(shared_data / "kineto/triton/triton_example.json.gz", tmp_path / "k")
    t = run(p, "vendor_steps", Query()).table
    assert t.num_rows == 0 and t.column_names == FIXED
    assert not any(t["title"].startswith("step time by rank") for t in _tables(compute_items(p)))
