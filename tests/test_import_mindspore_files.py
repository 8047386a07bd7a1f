"""The MindSpore 1.x profiler's text outputs, JSON summaries, cluster CSV and raw step
trace binary: each one imported alone, renamed, inside its folder, and refused when its
content is wrong."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import advise
from aiprof.analysis import run, views
from aiprof.importers import choose, import_paths
from aiprof.importers.base import ImportContext
from aiprof.store.reader import open_profile

MS = "ascend/mindspore-1.x"
RAW = "ascend/mindspore-1.x-raw"
TRACE = f"{RAW}/training_trace.46.dev.profiler_default_tag.0.slice_0"

#: Each file, the importer that takes it, and the rows it gives per table.
FILES = {
    f"{MS}/output_format_data_hwts_1.txt": ("mindspore-text", {"events": 136}),
    f"{MS}/output_op_compute_time_1.txt": ("mindspore-text", {"kernel_metrics": 212}),
    f"{MS}/output_data_preprocess_aicpu_1.txt": ("mindspore-text", {"events": 5}),
    f"{MS}/device_queue_profiling_1.txt": ("mindspore-text", {"counters": 5}),
    f"{MS}/pipeline_profiling_1.json": ("mindspore-text", {"kernel_metrics": 39}),
    f"{MS}/ascend_timeline_summary_1.json": ("mindspore-text", {"kernel_metrics": 4}),
    f"{MS}/step_trace_point_info.json": ("mindspore-text", {"kernel_metrics": 2}),
    f"{MS}/ascend_cluster_analyse_data-parallel_1_1_1.csv": ("mindspore-text", {"kernel_metrics": 3}),
    TRACE: ("mindspore-step-trace", {"events": 100}),  # 20 steps, 80 spans between their points
    f"{RAW}/output_data_preprocess_aicpu_0.txt": ("mindspore-text", {"events": 3}),
}


def _import(src: Path, out: Path) -> tuple[Any, ImportContext]:
    path, ctx = import_paths([src], out)
    return open_profile(path), ctx


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


def _metric(p: Any, section: str, kernel: str, metric: str, launch_id: int | None = None) -> Any:
    lid = "launch_id is null" if launch_id is None else f"launch_id = {launch_id}"
    rows = _rows(
        p,
        f"select value, text, unit from kernel_metrics where section = '{section}' and kernel = '{kernel}' "
        f"and metric = '{metric}' and {lid}",
    )
    assert len(rows) == 1, rows
    return rows[0]


def _tables(p: Any) -> dict[str, int]:
    return {k: v for k, v in p.metas[0]["tables"].items() if v}


@pytest.mark.parametrize("rel", sorted(FILES))
def test_each_file_alone_and_renamed(shared_data: Path, tmp_path: Path, rel: str) -> None:
    importer, tables = FILES[rel]
    src = shared_data / rel
    assert choose(src).name == importer
    p, _ = _import(src, tmp_path / "a")
    assert _tables(p) == tables
    for name in views():
        run(p, name)  # no view fails on these profiles
    assert sum(a.gain for a in advise(p)) <= 1.0 + 1e-9
    renamed = tmp_path / "unknown"
    shutil.copy(src, renamed)
    assert choose(renamed).name == importer
    q, _ = _import(renamed, tmp_path / "b")
    assert _tables(q) == tables


def test_hwts(shared_data: Path, tmp_path: Path) -> None:
    p, ctx = _import(shared_data / MS / "output_format_data_hwts_1.txt", tmp_path / "h")
    src = p.metas[0]["sources"][0]
    assert (src["records"], src["tasks"], src["unmatched"]) == (268, 132, 4)
    k = {r["kind"]: r["n"] for r in _rows(p, "select kind, count(*) n from events group by all")}
    assert k == {"kernel": 132, "instant": 4}
    # "Start of task 0 0 0 519_4 15490789595956 519" / "End of task 1 0 0 519_4 15490789596266 519":
    # AssignAdd-op142 in the timeline, 3.1 µs = 310 ticks of 10 ns.
    row = _rows(p, "select tid, dur, args from events where name = 'task 519_4' order by ts")
    assert len(row) == 2  # task 519_4 ran in two iterations
    assert row[0]["tid"] == 519 and row[0]["dur"] == 3100
    args = json.loads(row[0]["args"])
    assert args["start_cycle"] == 15490789595956 and args["end_cycle"] == 15490789596266
    assert (args["core_id"], args["block_id"], args["start_cnt"], args["end_cnt"]) == (0, 0, 0, 1)
    first = _rows(p, "select name, ts from events order by ts limit 1")[0]
    assert first == {"name": "task 517_2", "ts": 0}
    assert p.metas[0]["clock"] == "device"
    assert any("4 HWTS records" in w for w in ctx.warnings)


def test_op_compute_time(shared_data: Path, tmp_path: Path) -> None:
    p, _ = _import(shared_data / MS / "output_op_compute_time_1.txt", tmp_path / "o")
    conv = "Default/network-TrainOneStepCell/network-WithLossCell/_backbone-AlexNet/conv1-Conv2d/Conv2D-op5"
    assert _metric(p, "op_compute_time", conv, "compute_time") == {"value": 0.06913, "text": None, "unit": "ms"}
    assert _metric(p, "op_compute_time", conv, "stream_id")["value"] == 519
    assert _metric(p, "op_compute_time", "total op", "compute_time")["value"] == 23.088094999999996


def test_aicpu_text_both_layouts(shared_data: Path, tmp_path: Path) -> None:
    p, _ = _import(shared_data / MS / "output_data_preprocess_aicpu_1.txt", tmp_path / "a")
    rows = _rows(p, "select name, ts, dur, args from events order by ts")
    assert [r["name"] for r in rows] == ["InitData", "GetNext", "EndOfSequence", "GetNext", "EndOfSequence"]
    assert rows[1]["ts"] == (154907895189 - 154901853050) * 1000 and rows[1]["dur"] == 518_000
    assert json.loads(rows[1]["args"])["total_time_ms"] == 0.888
    q, _ = _import(shared_data / RAW / "output_data_preprocess_aicpu_0.txt", tmp_path / "b")
    rows = _rows(q, "select name, ts, dur from events order by ts")
    # The same ops as the raw AI CPU binary gives (tests/test_import_ascend.py).
    assert rows[1] == {"name": "GetNext", "ts": (2302769932 - 2298200409) * 1000, "dur": 48000}
    assert rows[2]["name"] == "TruncatedNormal"


def test_device_queue(shared_data: Path, tmp_path: Path) -> None:
    p, _ = _import(shared_data / MS / "device_queue_profiling_1.txt", tmp_path / "d")
    # "1 64 1 0 10": the queue (capacity 64) held 0 batches at 10 ms (batch 1).
    rows = _rows(p, "select metric, value, unit, ts, device_type from counters order by metric")
    got = {r["metric"]: (r["value"], r["unit"]) for r in rows}
    assert got == {
        "device_queue_size": (0.0, "batches"),
        "device_queue_capacity": (64.0, "batches"),
        "device_queue_push_time": (4.0, "ms"),
        "device_queue_total_time": (4.0, "ms"),
        "device_queue_get_time": (0.0, "ms"),
    }
    assert {r["ts"] + p.metas[0]["time_origin_ns"] + 0 for r in rows} == {0}  # one end time: the origin
    assert {r["device_type"] for r in rows} == {"cpu"}


def test_device_queue_without_times_gives_metrics(tmp_path: Path) -> None:
    f = tmp_path / "device_queue_profiling_0.txt"
    f.write_text("1 64 1 3\n1 64 2 5\n0 1 2 7\n")
    p, _ = _import(f, tmp_path / "d")
    assert _tables(p) == {"kernel_metrics": 5}
    assert _metric(p, "device_queue", "device_queue", "device_queue_size", 2)["value"] == 5.0


def test_pipeline_profiling(shared_data: Path, tmp_path: Path) -> None:
    p, _ = _import(shared_data / MS / "pipeline_profiling_1.json", tmp_path / "p")
    sec = "minddata_pipeline_profiling"
    assert _metric(p, sec, "BatchOp#0", "output_queue_size", 1)["value"] == 2.0
    assert _metric(p, sec, "BatchOp#0", "output_queue_length")["value"] == 64.0
    assert _metric(p, sec, "ImageFolderOp#3", "num_workers")["value"] == 8.0
    assert _metric(p, sec, "MapOp#1", "output_queue_throughput", 1)["value"] == 2.5845222880636986e-08
    assert _metric(p, sec, "EpochCtrlOp#4", "children")["text"] == "[0]"


def test_small_json_summaries(shared_data: Path, tmp_path: Path) -> None:
    p, _ = _import(shared_data / MS / "ascend_timeline_summary_1.json", tmp_path / "t")
    assert _metric(p, "timeline_summary", "timeline", "total_time") == {
        "value": 23147.013999999992,
        "text": None,
        "unit": "us",
    }
    assert _metric(p, "timeline_summary", "timeline", "num_of_ops")["value"] == 213.0
    assert p.metas[0]["mindspore"]["ascend_timeline_summary_1.json"]["op_exe_times"] == 112
    q, _ = _import(shared_data / MS / "step_trace_point_info.json", tmp_path / "s")
    assert _metric(q, "step_trace_point_info", "step", "fp_start")["text"] == "Default/EndOfSequence-op131"
    assert q.metas[0]["mindspore"]["step_trace_point_info.json"]["bp_end"] == "Default/AssignAdd-op138"


def test_cluster_analyse(shared_data: Path, tmp_path: Path) -> None:
    p, _ = _import(shared_data / MS / "ascend_cluster_analyse_data-parallel_1_1_1.csv", tmp_path / "c")
    assert _metric(p, "cluster_analyse", "step", "fp_and_bp", 0) == {"value": 2366808.0, "text": None, "unit": "tick"}
    assert _metric(p, "cluster_analyse", "step", "tail", 0)["value"] == 4097.0
    meta = p.metas[0]["mindspore"]["ascend_cluster_analyse_data-parallel_1_1_1.csv"]
    assert meta == {"parallel_mode": "data-parallel", "stage_num": 1, "rank_size": 1, "rank_id": 1}


def test_training_trace(shared_data: Path, tmp_path: Path) -> None:
    from aiprof.importers.mindspore.step_trace import parse_step_trace

    data = (shared_data / TRACE).read_bytes()
    steps, lost = parse_step_trace(data)
    assert (len(steps), lost) == (20, 0)
    # MindInsight's reading: the first step starts at its fp point, the next ones where
    # the previous one ended.
    assert (steps[0].start, steps[0].fp, steps[0].bp, steps[0].end) == (
        45000030081,
        45000030081,
        45001733025,
        45004033128,
    )
    assert steps[1].start == 45004033128
    assert steps[0].reduce == {10: [45000042679, 45000060275, 45001048152, 45001346254, 45002247411, 45002448354],
                               11: [45000049687, 45000075987]}  # fmt: skip
    p, _ = _import(shared_data / TRACE, tmp_path / "t")
    rows = _rows(p, "select name, kind, device_type, step, ts, dur, args from events where kind = 'step' order by ts")
    assert len(rows) == 20
    assert {(r["kind"], r["device_type"]) for r in rows} == {("step", "npu")}
    first = rows[0]
    assert (first["name"], first["step"], first["ts"], first["dur"]) == ("step 1", 1, 0, 40_030_470)
    a = json.loads(first["args"])
    assert a["fp_and_bp_ns"] == (45001733025 - 45000030081) * 10
    assert a["stream_11_parallel_0_end_point"] == 45000075987
    assert rows[1]["ts"] == (45004033128 - 45000030081) * 10
    assert json.loads(rows[1]["args"])["iteration_interval_ns"] == (45013070937 - 45004033128) * 10
    # The points between fp and bp pair up per stream (odd tag, next even tag): no point file
    # names them here, so MindInsight's stream_S_parallel_I names.
    comm = _rows(p, "select name, tid, step, ts, dur from events where kind = 'collective' and step = 1 order by ts")
    assert [(c["name"], c["tid"]) for c in comm] == [
        ("stream_10_parallel_0", 10),
        ("stream_11_parallel_0", 11),
        ("stream_10_parallel_1", 10),
        ("stream_10_parallel_2", 10),
    ]
    assert comm[1]["dur"] == (45000075987 - 45000049687) * 10


def test_legacy_folder_reads_them(shared_data: Path, tmp_path: Path) -> None:
    p, ctx = _import(shared_data / MS, tmp_path / "ms")
    assert not any("not imported" in w for w in ctx.warnings)
    kinds = {s.get("file_kind") for s in p.metas[0]["sources"]}
    assert {"hwts", "op_compute_time", "aicpu_text", "device_queue", "pipeline_profiling"} <= kinds
    assert {"timeline_summary", "step_trace_point_info", "cluster_analyse"} <= kinds
    # The timeline already holds the HWTS and AI CPU spans: their text files become metrics.
    assert _rows(p, "select count(*) n from events where cat = 'HWTS'")[0]["n"] == 0
    hw = _rows(
        p,
        "select value from kernel_metrics where section = 'hwts' and kernel = '519_4' and metric = 'duration' "
        "order by launch_id",
    )
    assert hw == [{"value": 3100.0}, {"value": 1280.0}]
    assert _metric(p, "aicpu_output", "GetNext", "run_end", 2)["text"] == "154907895707"
    assert _rows(p, "select value from counters where metric = 'device_queue_capacity'") == [{"value": 64.0}]
    assert _metric(p, "op_compute_time", "Default/TransData-op118", "compute_time")["value"] == 0.047035


def test_raw_folder_reads_them(shared_data: Path, tmp_path: Path) -> None:
    p, ctx = _import(shared_data / RAW, tmp_path / "raw")
    assert not any("not imported" in w for w in ctx.warnings)
    k = {(r["kind"], r["cat"]): r["n"] for r in _rows(p, "select kind, cat, count(*) n from events group by all")}
    assert k == {("kernel", "AI_CPU"): 3, ("step", "step_trace"): 20, ("collective", "step_trace"): 80}
    assert _metric(p, "aicpu_output", "TruncatedNormal", "total_time", 3)["value"] == 1.566


@pytest.mark.parametrize(
    "name",
    [
        "output_format_data_hwts_1.txt",
        "output_op_compute_time_1.txt",
        "output_data_preprocess_aicpu_1.txt",
        "device_queue_profiling_1.txt",
        "pipeline_profiling_1.json",
        "ascend_timeline_summary_1.json",
        "step_trace_point_info.json",
        "ascend_cluster_analyse_data-parallel_1_1_1.csv",
        "training_trace.46.dev.profiler_default_tag.0.slice_0",
    ],
)
def test_right_name_wrong_content_exits_2(tmp_path: Path, name: str) -> None:
    bad = tmp_path / name
    bad.write_bytes(b"hello world\nthis is not a profiler file\n")
    out = tmp_path / "o.aiprof"
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(bad), "-o", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiprof: error:"), r.stderr
    assert not out.exists()
