"""Traces of one process, one per window of a repeating torch.profiler schedule
(``tensorboard_trace_handler`` writes a file per window): imported as one rank whose
windows lie apart in time, not as the ranks of a job (importers/kineto/process.py,
store/runs.py:process_key).

The traces are real: torch.profiler runs here on a tiny CPU model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import import_paths
from aiprof.store import open_profile

pytest.importorskip("torch")

#: wait=1, warmup=1, active=2, repeat=2 over 10 steps: steps 2, 3 and 6, 7 are kept,
#: one trace file per window.
JOB = """
import json, os, socket, sys
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
with profile(
    activities=[ProfilerActivity.CPU],
    schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
    on_trace_ready=tensorboard_trace_handler(sys.argv[1], worker_name="worker0"),
) as p:
    for _ in range(10):
        with record_function("fwd_bwd"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward()
        opt.step()
        p.step()
print(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
"""


def cli(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, timeout=600
    )


def run_job(folder: Path) -> dict[str, Any]:
    """One process with two profiler windows: its two trace files in ``folder``."""
    script = folder.parent / "job.py"
    script.write_text(JOB)
    done = subprocess.run([sys.executable, str(script), str(folder)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    who: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    who["files"] = sorted(folder.glob("*.pt.trace.json"))
    assert len(who["files"]) == 2
    return who


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two processes of the same script, each leaving two windows."""
    a = tmp_path_factory.mktemp("a")
    b = tmp_path_factory.mktemp("b")
    return run_job(a / "tb"), run_job(b / "tb")


def steps_of(profile: Path) -> list[tuple[int, str, int, int]]:
    """(rank, name, Unix start ns, dur) of the step events."""
    with open_profile(profile) as p:
        origin = int(p.metas[0]["time_origin_ns"])
        rows = p.sql("SELECT rank, name, ts, dur FROM events WHERE kind = 'step' ORDER BY ts").to_pylist()
    return [(r["rank"], r["name"], origin + r["ts"], r["dur"]) for r in rows]


def report(profile: Path, view: str) -> list[dict[str, Any]]:
    r = cli("report", profile, "--view", view, "--format", "json", "--limit", "1000")
    assert r.returncode == 0, r.stderr
    rows: list[dict[str, Any]] = json.loads(r.stdout)["rows"]
    return rows


def test_the_head_names_the_process(jobs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    from aiprof.importers.kineto.process import trace_process

    a, b = jobs
    got = [trace_process(f) for f in a["files"] + b["files"]]
    assert [(t.pid, t.host, t.rank) for t in got] == [(a["pid"], a["host"], None)] * 2 + [
        (b["pid"], b["host"], None)
    ] * 2
    assert got[0].key == got[1].key != got[2].key == got[3].key
    assert got[0].head != got[1].head  # two windows, not one trace given twice


def test_two_windows_of_one_process_import_as_one_rank(
    jobs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    a, _ = jobs
    folder = a["files"][0].parent
    out = tmp_path / "imp"
    r = cli("import", folder, "-o", out)
    assert r.returncode == 0, r.stderr
    note = f"2 traces of one process (pid {a['pid']} on {a['host']}): one rank, 2 windows"
    assert f"wrote {out}.aiprof" in r.stdout and note in r.stdout, r.stdout
    assert "ranks" not in r.stdout and not (tmp_path / "imp" / "cluster").exists()
    prof = tmp_path / "imp.aiprof"
    meta = json.loads((prof / "profile.json").read_text())
    assert meta["ranks"] == [0] and meta["import_summary"]["notes"] == [note]
    assert [s["process"]["pid"] for s in meta["sources"]] == [a["pid"], a["pid"]]

    # Both windows' steps, ProfilerStep#N as torch numbered them, each at the absolute
    # time it has when its own file is imported alone.
    merged = steps_of(prof)
    alone = [s for i, f in enumerate(a["files"]) for s in steps_of(import_paths([f], tmp_path / f"w{i}.aiprof")[0])]
    assert [s[1] for s in merged] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#6", "ProfilerStep#7"]
    assert merged == sorted(alone) and {s[0] for s in merged} == {0}
    assert merged[2][2] > merged[1][2] + merged[1][3]  # the second window starts after the first ends

    # The tracks of the process and its thread are written once, not once per window.
    with open_profile(prof) as p, open_profile(tmp_path / "w0.aiprof") as one:
        assert (
            p.sql("SELECT count(*) AS n FROM tracks").to_pylist()
            == one.sql("SELECT count(*) AS n FROM tracks").to_pylist()
        )

    # Every view reads the merged profile.
    assert [(s["rank"], s["step"]) for s in report(prof, "steps")] == [(0, 2), (0, 3), (0, 6), (0, 7)]
    overview = report(prof, "overview")
    assert {o["rank"] for o in overview if o["rank"] is not None} == {0}
    assert report(prof, "kernels") == []  # a CPU trace
    ops = {o["name"]: o["calls"] for o in report(prof, "operators")}
    assert ops["aten::addmm"] == 2 * 4  # two Linear layers, four steps
    adv = cli("advise", prof, "--format", "json")
    assert adv.returncode == 0, adv.stderr
    json.loads(adv.stdout)

    # One trace given twice is no two windows: no such note.
    copy = tmp_path / "copy.pt.trace.json"
    copy.write_bytes(a["files"][0].read_bytes())
    out, ctx = import_paths([a["files"][0], copy], tmp_path / "twice.aiprof")
    assert ctx.notes == []
    assert "notes" not in json.loads((out / "profile.json").read_text())["import_summary"]


def test_a_folder_of_windows_opened_directly_is_one_rank_unwarned(jobs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    a, _ = jobs
    folder = a["files"][0].parent
    r = cli("report", folder, "--view", "steps", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [(s["rank"], s["step"]) for s in json.loads(r.stdout)["rows"]] == [(0, 2), (0, 3), (0, 6), (0, 7)]
    # Each trace is imported on its own there: both hold rank 0, and are one process's.
    r = cli("report", folder)
    assert r.returncode == 0, r.stderr
    said = " ".join((r.stdout + r.stderr).split())
    assert "steps: 4" in said and "both hold rank 0" not in said


def test_windows_of_several_processes_are_refused_one_trace_each_is_a_job(
    jobs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    a, b = jobs
    r = cli("import", *a["files"], *b["files"], "-o", tmp_path / "job")
    assert r.returncode == 2, r.stdout
    said = f"4 traces of 2 processes, some with several windows in time (pid {a['pid']} on {a['host']}: 2 windows"
    assert said in r.stderr and "a job import takes one trace per rank" in r.stderr
    assert not (tmp_path / "job").exists()
    # One trace of each process: the ranks of a job, as before (no distributedInfo: by order).
    pytest.importorskip("distributed", reason="the cluster extra (dask, distributed) is not installed")
    r = cli("import", a["files"][0], b["files"][0], "-o", tmp_path / "job", "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert "wrote 2 ranks" in r.stdout and "one rank," not in r.stdout
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["cluster", "rank0.aiprof", "rank1.aiprof"]
