from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aiprof.cli import cli


def test_advise_json_on_trace_file(shared_data: Path) -> None:
    f = shared_data / "kineto" / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    r = CliRunner().invoke(cli, ["advise", str(f), "--format", "json", "--min-severity", "high"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{") :])
    rules = [a["rule"] for a in doc["advice"]]
    assert rules[0] == "precision.amp"
    assert all(a["severity"] == "high" for a in doc["advice"])
    gains = [a["gain_pct"] for a in doc["advice"]]
    assert gains == sorted(gains, reverse=True)


def test_advise_markdown(shared_data: Path) -> None:
    f = shared_data / "kineto" / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    r = CliRunner().invoke(cli, ["advise", str(f), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    assert "## 1. No Tensor Core kernels" in r.output
    assert "torch.autocast" in r.output
