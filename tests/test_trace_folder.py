"""A folder of trace files (torch.profiler's tensorboard_trace_handler writes one per
rank) opens like a folder of profiles: in the CLI verbs and in the notebook's handle."""

from __future__ import annotations

import json
from pathlib import Path

from aiprof.notebook.handle import open_handle
from kineto_builders import two_step_trace, write_trace
from test_cli import cli


def _tb_folder(tmp_path: Path) -> Path:
    d = tmp_path / "log"
    d.mkdir()
    for rank in (0, 1):
        write_trace(
            d / f"host_{rank}.1700000000.pt.trace.json.gz",
            two_step_trace(),
            distributedInfo={"backend": "nccl", "rank": rank, "world_size": 2},
        )
    (d / "notes.txt").write_text("not a trace\n")
    return d


def test_report_on_a_folder_of_traces(tmp_path: Path) -> None:
    d = _tb_folder(tmp_path)
    r = cli("report", d, "--view", "steps", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert sorted({x["rank"] for x in rows}) == [0, 1]
    assert len(rows) == 4  # two steps on each rank


def test_folder_without_traces_is_one_line(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    (d / "notes.txt").write_text("not a trace\n")
    r = cli("report", d)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "no importer recognises it" in r.stderr


def test_notebook_handle_on_a_folder_of_traces(tmp_path: Path) -> None:
    h = open_handle([_tb_folder(tmp_path)])
    assert h.report("steps").total == 4


def test_a_folder_of_recordings_is_named_as_such(tmp_path: Path) -> None:
    """`aiprof report runs/` on a folder of runs answered that no importer recognises
    it (the 24 formats' reasons): it says what the folder is and names a run to give."""
    traces = _tb_folder(tmp_path)
    runs = tmp_path / "runs"
    for name in ("base", "fixed"):
        r = cli("import", traces, "-o", runs / name)
        assert r.returncode == 0, r.stderr
    r = cli("report", runs)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "a folder of 2 aiprof recordings (base, fixed), not one" in r.stderr
    assert f"e.g. {runs / 'base'}" in r.stderr
    assert cli("report", runs / "base").returncode == 0
