from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aiprof.cli import cli

V100 = ("kineto", "V100", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")


def _json(args: list[str]) -> dict:  # type: ignore[type-arg]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    doc: dict = json.loads(r.output[r.output.index("{") :])  # type: ignore[type-arg]
    return doc


def test_advise_json_on_trace_file(shared_data: Path) -> None:
    f = shared_data.joinpath(*V100)
    doc = _json(["advise", str(f), "--format", "json", "--min-severity", "high"])
    rules = [a["rule"] for a in doc["advice"]]
    assert rules[0] == "precision.amp"
    assert all(a["severity"] == "high" for a in doc["advice"])
    gains = [a["gain_pct"] for a in doc["advice"]]
    assert gains == sorted(gains, reverse=True)
    assert doc["gain_sum_pct"] <= 100.0


def test_advise_all_shows_info(shared_data: Path) -> None:
    f = shared_data.joinpath(*V100)
    default = _json(["advise", str(f), "--format", "json"])
    every = _json(["advise", str(f), "--format", "json", "--all"])
    assert all(a["severity"] != "info" for a in default["advice"])
    info = [a for a in every["advice"] if a["severity"] == "info"]
    # The cudaDeviceSynchronize waits while the device computes: no step time, info only.
    assert "sync.sync_api" in [a["rule"] for a in info]
    assert all(a["gain_pct"] < 1.0 for a in info)
    assert len(every["advice"]) == len(default["advice"]) + len(info)


def test_advise_markdown(shared_data: Path) -> None:
    f = shared_data.joinpath(*V100)
    r = CliRunner().invoke(cli, ["advise", str(f), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    assert "## 1. No Tensor Core kernels" in r.output
    assert "torch.autocast('cuda', dtype=torch.float16)" in r.output
    # A CUDA trace: no Ascend snippet, and no launch "runs ahead" warning (no kernel
    # starts before its launch call starts).
    assert "torch.autocast('npu'" not in r.output
    assert "runs ahead" not in r.output
    assert "bounded by the time attributed to compute" in r.output


def test_api_html_and_cli_give_the_same_advice(shared_data: Path, tmp_path: Path) -> None:
    from aiprof.importers import import_paths
    from aiprof.store import open_profile
    from aiprof.web.server import advice_for

    f = shared_data.joinpath(*V100)
    cli_doc = _json(["advise", str(f), "--format", "json"])
    out, _ = import_paths([f], tmp_path / "p.aiprof")
    with open_profile(out) as prof:
        api = advice_for(prof)  # what /profiles/{id}/advice and the HTML file show
    assert api["available"]
    key = [(a["rule"], a["gain_pct"], a["also"]) for a in cli_doc["advice"]]
    assert [(a["rule"], a["gain_pct"], a["also"]) for a in api["advice"]] == key


def test_no_advice_says_which_data_was_missing(shared_data: Path) -> None:
    """A telemetry-only capture (nvidia-smi dmon): no rule fires because none has the
    data it reads. The advice says so, per missing data, not "no rule fired"."""
    from aiprof.advise import rules

    f = shared_data / "nvidia-smi" / "dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt"
    doc = _json(["advise", str(f), "--format", "json", "--all"])
    assert doc["advice"] == []
    groups = {g["missing"]: g["rules"] for g in doc["not_judged"]}
    # Every rule that could not judge is listed once, under the data it lacked.
    listed = [r for g in doc["not_judged"] for r in g["rules"]]
    assert len(listed) == len(set(listed)) and set(listed) <= set(rules())
    samples = "no Python stack samples in the profile (an imported trace has none; aiprof record takes them unless --no-python)"
    assert groups[samples] == [
        "python.data_loading",
        "python.sync",
        "python.logging",
        "python.optimizer",
        "python.preprocessing",
    ]
    assert doc["not_judged"][0]["missing"] == samples  # the rules any recording feeds come first
    assert "steps.outlier" in groups["no step markers"] and "steps.warmup" in groups["no step markers"]
    r = CliRunner().invoke(cli, ["advise", str(f)])
    assert r.exit_code == 0 and "No advice: no rule fired." not in r.output
    text = " ".join(r.output.split())
    assert "No advice: no rule fired on the data this profile holds (--all shows the items under 1% gain)." in text
    assert f"{len(listed)} rules could not judge for lack of data:" in text
    assert (
        f"- {samples}: python.data_loading, python.sync, python.logging, python.optimizer, python.preprocessing" in text
    )
    md = CliRunner().invoke(cli, ["advise", str(f), "--format", "markdown"]).output
    assert "\nNo advice: no rule fired on the data this profile holds.\n" in md
    assert f"\n- {samples}: python.data_loading," in md
