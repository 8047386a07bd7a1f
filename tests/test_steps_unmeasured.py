"""What a new user tripped on, on real profiles: a step phase the profile did not measure
read as zero (steps view, API, CLI), Kineto's placeholder processes drawn as timeline
tracks, and ``--view operator-kernels`` with no way to name the operator."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from aiprof.analysis import Query, run
from aiprof.analysis.phases import PHASES
from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.web.timeline import Timeline
from record_support import record
from test_serve_support import running_server

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
PHASE_COLS = [f"{p}_us" for p in PHASES]
AIPROF = [sys.executable, "-m", "aiprof"]

#: A job of marked steps, no torch: long steps (80 ms, several samples at 100 Hz) and
#: short ones (0.2 ms: most hold no sample of their own).
MARKED_JOB = """
import time
from aiprof.record import mark_step

def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass

for i in range(16):
    spin(80 if i % 2 == 0 else 0.2)
    mark_step()
"""


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIPROF_DEBUG"}
    env["COLUMNS"] = "200"
    return subprocess.run([*AIPROF, *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def v100(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, _ = import_paths([shared_data / V100], tmp_path_factory.mktemp("v100") / "r0.aiprof")
    return out


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("marked"), MARKED_JOB) / "rank0.aiprof"


# -- 1. a phase not measured is null, a measured zero stays 0 -----------------------------


def test_phases_of_a_trace_without_python_samples_are_null_not_zero(v100: Path) -> None:
    with open_profile(v100) as p:
        rows = run(p, "steps").rows
    assert [r["step"] for r in rows] == [101, 102, 103, 104, 105]
    for r in rows:
        assert all(r[c] is None for c in PHASE_COLS), r
        # The breakdown is measured: the kernels, and the DataLoader the steps never entered (0).
        assert r["kernel_us"] > 0 and r["dataloader_us"] == 0.0
    assert rows[0]["kernel_us"] == pytest.approx(29042.446) and rows[0]["duration_us"] == pytest.approx(35115.869)


def test_phases_of_a_recording_are_measured_where_sampled(marked: Path) -> None:
    with open_profile(marked) as p:
        rows = run(p, "steps").rows
        sampled: dict[int, int] = {}  # step -> its samples (the phases view)
        for r in run(p, "phases", Query.parse(["step!=null"])).rows:
            sampled[r["step"]] = sampled.get(r["step"], 0) + r["samples"]
    assert len(rows) == 16
    for r in rows:
        if sampled[r["step"]]:  # measured: the spin loop is the loop's own code, a zero is a zero
            assert r["other_python_us"] == pytest.approx(r["duration_us"], rel=1e-6)
            assert all(r[c] == 0.0 for c in PHASE_COLS if c != "other_python_us"), r
        else:  # a step shorter than the sampling interval, without a sample: not measured
            assert all(r[c] is None for c in PHASE_COLS), r
    # The 80 ms steps (the first one starts at the recorder's first mark: shorter) hold
    # samples; most of the 0.2 ms ones hold none.
    long = [r for r in rows if r["duration_us"] > 20_000]
    assert len(long) >= 7 and all(r["forward_us"] == 0.0 for r in long)
    assert sum(r["forward_us"] is None for r in rows if r["duration_us"] < 5_000) >= 4


def test_step_trace_communication_without_its_points_is_null(shared_data: Path, tmp_path: Path) -> None:
    """mindspore-1.x's step_trace_raw file has no reduce columns: its communication is
    not measured; its first step's iteration interval is a measured 0 (MindInsight's)."""
    out, _ = import_paths([shared_data / "ascend/mindspore-1.x"], tmp_path / "ms.aiprof")
    with open_profile(out) as p:
        (r,) = run(p, "steps").rows
    assert r["step_trace_comm_us"] is None
    assert r["iteration_interval_us"] == 0.0
    assert r["fp_and_bp_us"] == pytest.approx(23668.08) and r["tail_us"] == pytest.approx(40.97)
    assert all(r[c] is None for c in PHASE_COLS)


def test_the_api_answers_null_for_a_phase_not_measured(v100: Path) -> None:
    with running_server(v100, extra=("--no-warm",)) as (base, _):
        doc = httpx.get(base + "api/v1/profiles/r0.aiprof/views/steps", timeout=120).json()
        tracks = httpx.get(base + "api/v1/profiles/r0.aiprof/tracks", timeout=120).json()["tracks"]
    assert doc["total"] == 5
    assert all(row[c] is None for row in doc["rows"] for c in PHASE_COLS)
    assert all(row["dataloader_us"] == 0.0 for row in doc["rows"])
    # The placeholders are not served (section 2).
    assert not {t["process_name"] for t in tracks} & {"Spans", "Traces"}


def test_report_steps_leaves_out_what_was_not_measured(v100: Path) -> None:
    r = cli("report", v100, "--view", "steps")
    assert r.returncode == 0, r.stderr
    head = next(line for line in r.stdout.splitlines() if "duration_us" in line)
    assert "dataloader_us" in head and not any(c in head for c in PHASE_COLS)
    assert f"Steps: not measured in this profile, so left out: {', '.join(PHASE_COLS)}" in r.stderr
    # CSV and JSON keep every column: empty / null.
    rows = cli("report", v100, "--view", "steps", "--format", "csv").stdout.splitlines()
    assert rows[0].endswith(",".join(PHASE_COLS)) and rows[1].endswith(",False" + "," * len(PHASE_COLS))
    doc = json.loads(cli("report", v100, "--view", "steps", "--format", "json").stdout)
    assert doc["rows"][0]["forward_us"] is None and doc["rows"][0]["dataloader_us"] == 0.0


def test_report_steps_of_a_recording_marks_the_steps_without_samples(marked: Path) -> None:
    r = cli("report", marked, "--view", "steps", "--limit", "16")
    assert r.returncode == 0, r.stderr
    assert "forward_us" in r.stdout and "other_python_us" in r.stdout
    assert "- in forward_us, backward_us" in r.stderr and "not measured in this profile" in r.stderr


# -- 2. Kineto's placeholder processes are no timeline tracks ------------------------------


def _kineto_traces(shared_data: Path) -> list[Path]:
    found = sorted((shared_data / "kineto").rglob("*.json.gz"))
    assert len(found) == 10, found
    return found


def test_timeline_leaves_out_kinetos_placeholders_on_every_kineto_trace(shared_data: Path, tmp_path: Path) -> None:
    for i, trace in enumerate(_kineto_traces(shared_data)):
        out, _ = import_paths([trace], tmp_path / f"k{i}.aiprof")
        with open_profile(out) as p:
            tl = Timeline(p)
            listed = tl.tracks()
            every = tl.table("tl_tracks").to_pylist()
            names = {r["track"] for r in listed}
            left = [t for t in every if t["track"] not in names]
            for t in left:  # each one left out holds Kineto's markers and nothing else
                evs = p.sql(
                    "SELECT kind, name FROM events WHERE rank = ? AND pid = ? AND tid = ?",
                    [t["rank"], t["pid"], t["tid"]],
                ).to_pylist()
                assert t["process_name"] in ("Spans", "Traces", None), (trace.name, t)
                assert all(
                    (e["kind"], e["name"]) in {("instant", "Record Window End")}
                    or (t["process_name"] == "Spans" and e["kind"] == "other" and e["name"].endswith(")"))
                    or (t["process_name"] == "Traces" and e["name"].startswith("Iteration Start: "))
                    for e in evs
                ), (trace.name, t, evs)
            assert not {r["process_name"] for r in listed} & {"Spans", "Traces"}, trace.name
            assert all(r["events"] > 0 for r in listed)
            # Nothing of the job's is left out: every other track is listed, events and all.
            assert sum(r["events"] for r in listed) + sum(t["events"] for t in left) == sum(t["events"] for t in every)
            assert len(left) in (1, 3, 5), (trace.name, left)
            if trace.name.startswith("rank-0.Apr_03"):
                assert [r["name"] for r in listed] == [
                    "pid 1102 / thread -247463936",
                    "pid 1102 / thread 1102 (pt_main_thread)",
                    "pid 1102 / thread 1262 (pt_autograd_0)",
                    "CUDA 0 stream 7",
                ]
            if trace.name == "triton_example.json.gz":  # a process of one step span is the job's
                assert "pid 3100453 / thread 3100453" in [r["name"] for r in listed]


def test_a_spans_process_with_the_jobs_events_stays(shared_data: Path, tmp_path: Path) -> None:
    """The real Triton trace with an operator of the job's in Kineto's "Spans" process
    (beside the profiler's span): that track holds more than markers, and is listed."""
    doc: dict[str, Any] = json.loads(gzip.open(shared_data / "kineto/triton/triton_example.json.gz").read())
    span = next(e for e in doc["traceEvents"] if e.get("pid") == "Spans" and e.get("ph") == "X")
    doc["traceEvents"].append({**span, "cat": "cpu_op", "name": "aten::mm", "dur": 5.0, "args": {}})
    src = tmp_path / "triton_spans.json"
    src.write_text(json.dumps(doc))
    out, _ = import_paths([src], tmp_path / "t.aiprof")
    with open_profile(out) as p:
        listed = Timeline(p).tracks()
    spans = [r for r in listed if r["process_name"] == "Spans"]
    assert len(spans) == 1 and spans[0]["events"] == 2 and spans[0]["thread_name"] == "PyTorch Profiler"
    assert not [r for r in listed if r["process_name"] == "Traces"]


# -- 3. operator-kernels takes its operator from --name -------------------------------------


def test_operator_kernels_takes_the_name_from_the_cli(v100: Path) -> None:
    r = cli("report", v100, "--view", "operator-kernels", "--name", "aten::convolution_backward", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    with open_profile(v100) as p:
        api = run(p, "operator-kernels", params={"name": "aten::convolution_backward"})
    assert doc["total"] == api.total == 30
    assert doc["rows"] == api.rows
    sgemm = next(x for x in doc["rows"] if x["name"] == "volta_sgemm_64x64_nt")
    assert sgemm["count"] == 105 and sgemm["total_us"] == pytest.approx(22668.1, abs=0.1)


def test_operator_kernels_without_a_name_says_which_option_and_names_operators(v100: Path) -> None:
    r = cli("report", v100, "--view", "operator-kernels")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("aiprof: error: the operator-kernels view needs --name OPERATOR; ")
    assert "'aten::convolution_backward'" in lines[0] and "'ConvolutionBackward0'" in lines[0]
    assert f"aiprof report {v100} --view operators lists them all" in lines[0]
    # In JSON too (no empty answer that reads as "launched nothing").
    assert cli("report", v100, "--view", "operator-kernels", "--format", "json").returncode == 2


def test_name_is_refused_by_views_that_take_none_and_an_unknown_name_is_said(v100: Path) -> None:
    r = cli("report", v100, "--view", "steps", "--name", "aten::mm")
    assert r.returncode == 2
    assert r.stderr.strip() == "aiprof: error: --name: the steps view takes no name; views that do: operator-kernels"
    r = cli("report", v100, "--view", "operator-kernels", "--name", "aten::nope")
    assert r.returncode == 0
    assert "no operator is named 'aten::nope'; operators with the most host time: " in r.stderr
    r = cli("report", v100, "--view", "operator-kernels", "--name", "aten::empty")
    assert "operator 'aten::empty' launched no device work" in r.stderr


def test_operator_kernels_on_a_profile_without_operators(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / "ascend/mindspore-1.x"], tmp_path / "ms.aiprof")
    r = cli("report", out, "--view", "operator-kernels")
    assert r.returncode == 2
    assert "this profile has no operators" in r.stderr and len(r.stderr.strip().splitlines()) == 1
