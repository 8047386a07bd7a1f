from __future__ import annotations

import json
from pathlib import Path

from aiprof.analysis.compare import compare, step_summary
from aiprof.importers import import_paths
from aiprof.store import open_profile
from kineto_builders import kernel, launch, span, write_trace
from test_cli import cli


def _run(tmp_path: Path, name: str, k_dur: float, extra: bool) -> Path:
    evs = [span("ProfilerStep#1", "user_annotation", 0, 1000), launch(10, 5, 1), kernel("gemm", 20, k_dur, 1)]
    if extra:
        evs += [launch(30, 5, 2), kernel("softmax", 400, 60, 2)]
    else:
        evs += [launch(30, 5, 2), kernel("relu", 400, 10, 2)]
    out, _ = import_paths([write_trace(tmp_path / f"{name}.json", evs)], tmp_path / name)
    return out


def test_compare_kernels(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a", 100, False), _run(tmp_path, "b", 150, True)
    with open_profile(a) as pa_, open_profile(b) as pb:
        rows = {r["name"]: r for r in compare(pa_, pb, "kernels").to_pylist()}
        assert step_summary(pa_)["mean_step_us"] == 1000
    assert rows["gemm"]["delta_us"] == 50 and rows["gemm"]["delta_pct"] == 50 and rows["gemm"]["status"] == "slower"
    assert rows["softmax"]["status"] == "added" and rows["softmax"]["b_us"] == 60
    assert rows["relu"]["status"] == "removed" and rows["relu"]["delta_us"] == -10


def test_diff_cli(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a", 100, False), _run(tmp_path, "b", 150, True)
    r = cli("diff", a, b, "--format", "json", "--filter", "status=slower,added")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["name"] for x in doc["rows"]] == ["softmax", "gemm"]
    assert doc["steps"]["ratio"] == 1.0
    r = cli("diff", a, tmp_path / "missing.aiprof")
    assert r.returncode == 2
