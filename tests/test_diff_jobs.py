"""``aiprof diff`` says when A and B come from different jobs, by the rule of the web
UI's compare page (:func:`aiprof.analysis.job_match.job_differences`), on real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiprof.cli.diff import NOT_SAME_JOB
from aiprof.importers import import_paths
from test_cli import cli

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
V100_MEM = "kineto/V100/df_index_resolver.json.gz"
SAMPLED = "kineto/sampled-128-ranks/sampled_rank-{}.json.gz"
NPU = "ascend/torch_npu"


@pytest.fixture(scope="module")
def v100(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two unrelated V100 runs: different models, one rank against two."""
    root = tmp_path_factory.mktemp("diff-jobs")
    a, _ = import_paths([shared_data / V100], root / "r0.aiprof")
    b, _ = import_paths([shared_data / V100_MEM], root / "mem.aiprof")
    return a, b


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if NOT_SAME_JOB in line or "different jobs" in line]


def test_unrelated_runs_warn(v100: tuple[Path, Path]) -> None:
    a, b = v100
    r = cli("diff", a, b, "--limit", "2")
    assert r.returncode == 0, r.stderr
    (line,) = _warnings(r.stderr)
    assert line.startswith(f"aiprof: warning: {NOT_SAME_JOB}: ")
    assert "world size differs: A 1, B 2" in line and "% of operator names are shared" in line
    assert "different jobs" not in r.stdout  # the table stays as it was

    r = cli("diff", a, b, "--format", "json", "--limit", "2")
    doc = json.loads(r.stdout)
    assert doc["differences"][0] == "world size differs: A 1, B 2"
    assert any("operator names are shared" in d for d in doc["differences"])
    assert "; ".join(doc["differences"]) in r.stderr


def test_gate_over_unrelated_runs(v100: tuple[Path, Path]) -> None:
    a, b = v100
    r = cli("diff", a, b, "--fail-if-slower", "5%", "--limit", "2")
    assert r.returncode == 1, r.stderr  # the gate's rule is unchanged: B is much slower
    first, gate = _warnings(r.stderr)
    assert first.startswith(f"aiprof: warning: {NOT_SAME_JOB}")
    assert gate == "aiprof: warning: the gate's verdict (FAIL: --fail-if-slower 5%) is over runs of different jobs"


def test_other_vendor_warns(shared_data: Path) -> None:
    r = cli("diff", shared_data / SAMPLED.format(0), shared_data / NPU, "--format", "json", "--limit", "2")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert any(d.startswith("devices differ: A cuda; B npu") for d in doc["differences"])
    assert len(_warnings(r.stderr)) == 1


def test_comparable_runs_do_not_warn(shared_data: Path, v100: tuple[Path, Path]) -> None:
    # Two ranks of one job, and a run against itself.
    pairs = [(shared_data / SAMPLED.format(0), shared_data / SAMPLED.format(1)), (v100[0], v100[0])]
    for a, b in pairs:
        r = cli("diff", a, b, "--format", "json", "--fail-if-slower", "5%", "--limit", "2")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["differences"] == []
        assert _warnings(r.stderr) == [], r.stderr
