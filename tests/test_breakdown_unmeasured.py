"""A new user's trial: figures the profile did not measure read as 0, and three small
mismatches of the CLI, on real recordings made here (small torch jobs) and on the real
traces of ../shared/data.

1. The step breakdown's categories and the device figures are null where the profile
   lacks their source (no device work: kernel ... idle; no host operators: cpu_exec,
   dataloader...), in the steps view, the overview, the API, the derived tables, the
   report and ``aiprof diff``; the Kineto traces HTA checks keep every figure.
3. ``aiprof export --format perfetto`` points to ``aiprof timechart``; the python view's
   times are ``*_us``; the report's "more:" line names the views the profile fills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from aiprof.analysis import Query, run
from aiprof.analysis.derived import upgrade
from aiprof.importers import import_paths
from aiprof.store import open_profile
from record_support import record
from test_serve_support import running_server

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
CPU_ONLY = "kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
AIPROF = [sys.executable, "-m", "aiprof"]

DEVICE_COLS = ["kernel_us", "memcpy_us", "memset_us", "device_busy_us", "idle_us", "compute_us", "non_compute_us"]
HOST_COLS = ["communication_us", "runtime_us", "dataloader_us", "cpu_exec_us"]
BREAKDOWN_COLS = [*DEVICE_COLS[:3], *HOST_COLS, "other_us", *DEVICE_COLS[3:]]

#: A CPU training loop, no aiprof markers: a DataLoader whose items take LOAD_MS, the
#: loop's own Python WORK_MS, then forward, backward and the optimizer (one step each).
#: With a 4th argument it writes its own mean wait for a batch (perf_counter), in ms.
JOB = """
import json, sys, time

import torch
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)
LOAD_MS, WORK_MS, STEPS = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])


def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


class Items(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        spin(LOAD_MS)
        return torch.ones(4)


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = iter(DataLoader(Items(), batch_size=1))
loads = []
for _ in range(STEPS):
    t = time.perf_counter()
    x = next(batches)
    loads.append(time.perf_counter() - t)
    spin(WORK_MS)
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
if len(sys.argv) > 4:
    with open(sys.argv[4], "w") as f:
        json.dump({"load_ms": 1000 * sum(loads) / len(loads)}, f)
"""


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIPROF_DEBUG"}
    env["COLUMNS"] = "250"
    return subprocess.run([*AIPROF, *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A default recording of the CPU job: Python samples, no operators, no device."""
    return record(tmp_path_factory.mktemp("plain"), JOB, args=("8", "2", "30")) / "rank0.aiprof"


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same job under ``aiprof record --ops``: host operators, no device."""
    return record(tmp_path_factory.mktemp("ops"), JOB, "--ops", args=("8", "2", "20")) / "rank0.aiprof"


# -- 1. not measured is null ---------------------------------------------------------------


def test_default_cpu_recording_has_no_breakdown_figure(plain: Path) -> None:
    """No operators and no device: every category, other and the device figures are null
    (idle_us was the whole step, dataloader_us 0 beside ~8 ms of loading); the phases
    from the samples are measured."""
    with open_profile(plain) as p:
        rows = run(p, "steps").rows
        ov = run(p, "overview").rows
    assert len(rows) >= 25
    for r in rows:
        assert all(r[c] is None for c in BREAKDOWN_COLS), r
        assert r["duration_us"] > 8_000
    sampled = [r for r in rows if r["data_loading_us"] is not None]
    assert sampled and sum(r["data_loading_us"] for r in sampled) > 0.5 * sum(r["duration_us"] for r in sampled)
    bd = [r for r in ov if r["section"] in ("breakdown", "utilization")]
    assert bd and all(r["time_us"] is None and r["percent"] is None for r in bd)
    assert not [r for r in ov if r["section"] == "device"]
    assert {r["category"] for r in ov if r["section"] == "phases" and r["time_us"]} >= {"data_loading"}


def test_ops_cpu_recording_measures_the_host_categories_only(ops: Path) -> None:
    """--ops on a CPU: the host categories are measured (a zero is a zero), the device's
    are null, other is what the measured ones leave."""
    with open_profile(ops) as p:
        rows = run(p, "steps").rows
    assert len(rows) >= 15
    for r in rows:
        assert all(r[c] is None for c in DEVICE_COLS), r
        assert all(r[c] is not None for c in [*HOST_COLS, "other_us"]), r
        assert r["communication_us"] == 0.0 and r["runtime_us"] == 0.0  # measured: none in a CPU job
        parts = sum(r[c] for c in [*HOST_COLS, "other_us"])
        assert parts == pytest.approx(r["duration_us"], rel=1e-9, abs=1e-3)
    assert sum(r["dataloader_us"] for r in rows) > 0.5 * sum(r["duration_us"] for r in rows)


def test_derived_tables_keep_the_nulls(plain: Path, ops: Path, tmp_path: Path) -> None:
    """step_totals (written by ``aiprof import OLD.aiprof``'s upgrade) holds null where
    the figure was not measured, and the views read from it answer as from the events."""
    for i, src in enumerate((plain, ops)):
        with open_profile(src) as p:
            before = run(p, "steps").rows, run(p, "overview").rows
        dest = tmp_path / str(i) / "rank0.aiprof"
        dest.parent.mkdir()
        subprocess.run(["cp", "-r", str(src), str(dest)], check=True)
        assert upgrade(dest)
        t = pq.read_table(dest / "step_totals.parquet")
        n = t.num_rows
        for c in ("kernel", "memcpy", "memset", "device_busy", "busy", "compute"):
            assert t.column(c).null_count == n, c
        host = 0 if src == ops else n
        for c in ("dataloader", "cpu_exec", "communication", "runtime"):
            assert t.column(c).null_count == host, (src, c)
        with open_profile(dest) as p:
            assert p.metas[0]["derived"]["version"] == 3
            assert (run(p, "steps").rows, run(p, "overview").rows) == before


def test_traces_with_device_work_and_operators_keep_every_figure(shared_data: Path, tmp_path: Path) -> None:
    """The V100 trace (HTA's figures, tests/test_analysis_core.py) loses nothing: no
    figure of the steps view or the overview's breakdown is null; its DataLoader, never
    entered, is a measured 0."""
    out, _ = import_paths([shared_data / V100], tmp_path / "v100.aiprof")
    with open_profile(out) as p:
        rows = run(p, "steps").rows
        ov = run(p, "overview").rows
    assert len(rows) == 5
    for r in rows:
        assert all(r[c] is not None for c in BREAKDOWN_COLS), r
        assert r["dataloader_us"] == 0.0 and r["kernel_us"] > 0 and r["idle_us"] > 0
    assert rows[0]["kernel_us"] == pytest.approx(29042.446)
    bd = [r for r in ov if r["section"] in ("breakdown", "utilization", "device")]
    assert bd and all(r["time_us"] is not None for r in bd)


def test_cpu_only_trace_has_no_device_figures(shared_data: Path, tmp_path: Path) -> None:
    """kineto/cpu-only (torch.profiler, CPU activity only): operators, no device work:
    the host categories are measured (cpu_exec a measured 0 outside its gloo ranges)."""
    out, _ = import_paths([shared_data / CPU_ONLY], tmp_path / "cpu.aiprof")
    with open_profile(out) as p:
        rows = run(p, "steps").rows
        busy = [r for r in run(p, "overview").rows if r["category"] == "device_busy"]
    assert rows
    for r in rows:
        assert all(r[c] is None for c in DEVICE_COLS), r
        assert all(r[c] is not None for c in [*HOST_COLS, "other_us"]), r
        assert r["communication_us"] == pytest.approx(178777.427)  # its gloo ranges
    assert busy and all(r["time_us"] is None for r in busy)


def test_api_and_report_say_not_measured(plain: Path) -> None:
    with running_server(plain, extra=("--no-warm",)) as (base, _):
        doc = httpx.get(base + "api/v1/profiles/rank0.aiprof/views/steps", timeout=120).json()
        ov = httpx.get(base + "api/v1/profiles/rank0.aiprof/views/overview", timeout=120).json()
    assert doc["total"] >= 25 and all(row[c] is None for row in doc["rows"] for c in BREAKDOWN_COLS)
    assert all(r["time_us"] is None for r in ov["rows"] if r["section"] == "breakdown")
    r = cli("report", plain, "--view", "steps")
    assert r.returncode == 0, r.stderr
    head = next(line for line in r.stdout.splitlines() if "duration_us" in line)
    assert not any(c in head for c in BREAKDOWN_COLS) and "data_loading_us" in head
    assert "Steps: not measured in this profile, so left out: " + ", ".join(BREAKDOWN_COLS) in r.stderr
    # The overview: the phases, no breakdown table of nulls, no device table.
    r = cli("report", plain)
    assert r.returncode == 0, r.stderr
    assert "step time by phase" in r.stdout and "step time breakdown" not in r.stdout
    assert "no device activity in the profile" in r.stdout


def test_report_of_an_ops_recording_names_the_device_categories_not_measured(ops: Path) -> None:
    r = cli("report", ops)
    assert r.returncode == 0, r.stderr
    assert "step time breakdown" in r.stdout and "cpu_exec" in r.stdout
    assert "not measured in this profile, so left out: kernel, memcpy, memset" in r.stdout


def test_diff_leaves_out_what_either_run_did_not_measure(plain: Path, ops: Path) -> None:
    """``aiprof diff`` compared idle_us (the whole step on a machine without a device) and
    other_us; figures null on either side are now named once and not compared."""
    r = cli("diff", plain, ops, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    figures = {v["figure"] for v in doc["verdicts"]}
    assert not figures & set(BREAKDOWN_COLS)
    assert "step_time_us" in figures
    nm = doc["not_measured"]
    assert nm["both"] == DEVICE_COLS[:3] + DEVICE_COLS[3:]
    assert nm["a"] == [*HOST_COLS, "other_us"] and nm["b"] == []
    t = cli("diff", plain, ops)
    assert t.returncode == 0, t.stderr
    line = "not compared, not measured in A and B: " + ", ".join(DEVICE_COLS)
    assert line + "; in A: " + ", ".join([*HOST_COLS, "other_us"]) in t.stdout
    assert t.stdout.count("not compared, not measured") == 1 and "idle_us " not in t.stdout
    # A gate on a figure a run did not measure says so, and does not fail.
    g = cli("diff", plain, ops, "--fail-if", "idle_us>+5%", "--format", "json")
    assert g.returncode == 0
    assert json.loads(g.stdout)["gate"][0]["detail"] == "idle_us: not measured in A and B, so not compared"


# -- 1b. the views beside the breakdown: ranks, dataloader, rank_steps ---------------------

#: The rank_steps view's device columns (the index's, cluster/views.py).
RANK_STEP_DEVICE_COLS = ["compute_us", "copy_us", "exposed_comm_us", "idle_us"]


def report_json(path: Path, view: str) -> list[dict[str, Any]]:
    r = cli("report", path, "--view", view, "--format", "json", "--limit", "1000")
    assert r.returncode == 0, r.stderr
    rows: list[dict[str, Any]] = json.loads(r.stdout)["rows"]
    return rows


def test_device_figures_beside_the_breakdown_are_null_on_a_cpu_recording(ops: Path) -> None:
    """The ranks view's device_busy_us and busy_pct, the dataloader view's
    idle_in_loader_us and the rank_steps view's device columns were 0 on a CPU recording
    (idle_us and idle_in_loader_us the whole step and the whole ~8 ms of loading): null,
    not measured, as in the steps view; the CLI prints them as "-" and JSON null."""
    with open_profile(ops) as p:
        ranks = run(p, "ranks").rows
        loader = run(p, "dataloader").rows
        steps = run(p, "rank_steps").rows
    assert len(ranks) == 1 and ranks[0]["steps"] == 20 and ranks[0]["step_total_us"] > 20 * 8_000
    assert ranks[0]["device_busy_us"] is None and ranks[0]["busy_pct"] is None
    assert len(loader) == 20
    for r in loader:
        assert r["idle_in_loader_us"] is None, r
        assert r["dataloader_us"] > 4_000, r  # measured: --ops sees the DataLoader
    # One DataLoader call a step; a call that starts at a step's boundary may count in the
    # step before (CI once read 2 in step 17): every call is counted once.
    assert sum(r["loader_calls"] for r in loader) == 20 and all(r["loader_calls"] <= 2 for r in loader), loader
    assert len(steps) == 20
    for r in steps:
        assert all(r[c] is None for c in RANK_STEP_DEVICE_COLS), r
        assert r["step_us"] > 8_000
    assert report_json(ops, "ranks")[0]["device_busy_us"] is None
    assert all(r["idle_in_loader_us"] is None for r in report_json(ops, "dataloader"))
    assert all(r["idle_us"] is None for r in report_json(ops, "rank_steps"))
    t = cli("report", ops, "--view", "rank_steps", "--limit", "1")
    assert t.returncode == 0 and "Traceback" not in t.stderr, t.stderr
    row = next(line for line in t.stdout.splitlines() if line.startswith("│"))
    assert [c.strip() for c in row.strip("│").split("│")][3:] == ["-"] * 4, row


def test_device_figures_beside_the_breakdown_keep_their_values_on_a_gpu_trace(
    shared_data: Path, tmp_path: Path
) -> None:
    """The V100 trace (device work): the same figures as before, a measured 0 included."""
    out, _ = import_paths([shared_data / V100], tmp_path / "v100.aiprof")
    with open_profile(out) as p:
        ranks = run(p, "ranks").rows
        loader = run(p, "dataloader").rows
        steps = run(p, "rank_steps").rows
    assert ranks[0]["device_busy_us"] == pytest.approx(472315.864)
    assert ranks[0]["busy_pct"] == pytest.approx(97.71129195811689)
    assert [r["idle_in_loader_us"] for r in loader] == [0.0] * 5
    assert [r["idle_us"] for r in steps] == pytest.approx([5834.256, 895.778, 1144.462, 1110.872, 2077.766])
    assert [r["compute_us"] for r in steps][:2] == pytest.approx([29042.446, 70342.917])
    assert [r["exposed_comm_us"] for r in steps] == [0.0] * 5


def test_cluster_index_leaves_the_device_figures_of_a_cpu_rank_null(shared_data: Path, tmp_path: Path) -> None:
    """A job of a CPU-only rank (kineto/cpu-only, rank 34) and a GPU rank (sampled rank 0)
    imported with its cluster index: the index's ranks and rank_steps views give rank 34
    null device figures (its idle_us was the whole step) and rank 0 its own; an index
    written before device_measured reads as it did."""
    pytest.importorskip("distributed", reason="the cluster extra (dask, distributed) is not installed")
    job = tmp_path / "job"
    sampled = shared_data / "kineto/sampled-128-ranks/sampled_rank-0.json.gz"
    r = cli("import", shared_data / CPU_ONLY, sampled, "-o", job, "--workers", "1", "--allow-mixed")
    assert r.returncode == 0, r.stderr
    assert (job / "cluster" / "steps.parquet").is_file()
    ranks = {x["rank"]: x for x in report_json(job, "ranks")}
    assert ranks[34]["device_busy_us"] is None and ranks[34]["busy_pct"] is None
    assert ranks[34]["step_total_us"] == pytest.approx(210109.162)
    assert ranks[0]["device_busy_us"] == pytest.approx(547656.0)
    assert ranks[0]["busy_pct"] == pytest.approx(44.51619196254389)
    steps = report_json(job, "rank_steps")
    cpu = [x for x in steps if x["rank"] == 34]
    assert len(cpu) == 1 and cpu[0]["step_us"] == pytest.approx(210109.162)
    assert all(cpu[0][c] is None for c in RANK_STEP_DEVICE_COLS), cpu
    gpu = [x for x in steps if x["rank"] == 0]
    assert [x["idle_us"] for x in gpu] == pytest.approx([328632.0, 353952.0])
    assert [x["compute_us"] for x in gpu] == pytest.approx([106252.0, 104068.0])
    assert [x["exposed_comm_us"] for x in gpu] == pytest.approx([171780.0, 164253.0])
    with open_profile(job / "rank34.aiprof") as p:
        assert all(x["idle_in_loader_us"] is None for x in run(p, "dataloader").rows)
    # An index from before the column: read as measured (0), as it was.
    t = pq.read_table(job / "cluster" / "steps.parquet")
    pq.write_table(t.drop_columns(["device_measured"]), job / "cluster" / "steps.parquet")
    assert [x["device_busy_us"] for x in report_json(job, "ranks") if x["rank"] == 34] == [0.0]
    old = [x for x in report_json(job, "rank_steps") if x["rank"] == 34]
    assert old[0]["idle_us"] == pytest.approx(210109.162) and old[0]["compute_us"] == 0.0


# -- 3. small mismatches -------------------------------------------------------------------


def test_export_perfetto_points_to_timechart(plain: Path) -> None:
    r = cli("export", plain, "--format", "perfetto", "-o", plain.parent / "x.json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        f"aiprof: error: --format 'perfetto': aiprof export writes speedscope only; the Perfetto / Chrome trace "
        f"is written by: aiprof timechart {plain} -o trace.json.gz"
    )
    assert not (plain.parent / "x.json").exists()
    r = cli("export", plain, "--format", "nope", "-o", plain.parent / "x.json")
    assert r.returncode == 2 and "not a format of aiprof export (speedscope)" in r.stderr
    assert "aiprof timechart" in r.stderr


def test_python_view_times_are_us(plain: Path) -> None:
    """self_us / total_us in µs (samples x the sampling interval), sortable as README says."""
    r = cli("report", plain, "--view", "python", "--sort", "-total_us", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    units = {c["name"]: c.get("unit") for c in doc["columns"]}
    assert units["self_us"] == "µs" and units["total_us"] == "µs"
    assert "self_ms" not in units and "total_ms" not in units
    rows = doc["rows"]
    assert len(rows) >= 3
    totals = [x["total_us"] for x in rows]
    assert totals == sorted(totals, reverse=True)
    # At the recorder's 100 Hz, one sample stands for ~10,000 µs.
    per = [x["total_us"] / x["total_samples"] for x in rows if x["total_samples"]]
    assert all(5_000 < v < 20_000 for v in per), per
    with open_profile(plain) as p:
        assert run(p, "python", Query.parse([], "-self_us", 1)).rows[0]["self_us"] > 0


def test_report_hint_names_the_views_the_profile_fills(plain: Path, shared_data: Path, tmp_path: Path) -> None:
    r = cli("report", plain)
    more = next(line for line in r.stdout.splitlines() if line.startswith("more: "))
    views = more.rsplit("--view ", 1)[1].split("|")
    assert views[:4] == ["steps", "phases", "phase_hotspots", "python"] and views[-1] == "events"
    assert not {"kernels", "idle", "memory", "operators"} & set(views)
    out, _ = import_paths([shared_data / V100], tmp_path / "v100.aiprof")
    r = cli("report", out)
    more = next(line for line in r.stdout.splitlines() if line.startswith("more: "))
    views = more.rsplit("--view ", 1)[1].split("|")
    assert {"steps", "operators", "kernels", "idle", "events"} <= set(views)
    assert not {"phases", "phase_hotspots", "python"} & set(views)
