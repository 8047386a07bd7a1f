"""scripts/gpu_check.sh's dry run (--cpu): the GPU check itself is checked here.

On the H200 the same script runs every CUDA path; here the steps that need a GPU or
NVIDIA's tools must say they were skipped, and the rest must produce its files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_produces_every_result(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "gpu"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = {f.name for f in out.iterdir()}
    assert files == {
        "log.txt",
        "tables.txt",
        "ratios.json",
        "profiles.zip",
        "torch_trace.json.gz",
        "counters.csv",
        "monitor.txt",
    }
    log = (out / "log.txt").read_text()
    # No GPU here: said, not silently left out.
    assert "ncu: skipped (no Nsight Compute on this machine)" in log
    assert "default: device trace: no accelerator that torch can trace" in log
    ratios = json.loads((out / "ratios.json").read_text())["ratios"]
    assert set(ratios) >= {"record / plain", "record --ops / torch.profiler alone", "step: record / plain"}
    assert all(r > 0 for r in ratios.values())
    tables = (out / "tables.txt").read_text()
    for label in ("default", "ops", "sync"):
        assert f"######## {label}: rank0.aiprof" in tables
    assert tables.count("-m aiprof advise ") == 3
    with zipfile.ZipFile(out / "profiles.zip") as z:
        names = set(z.namelist())
    for label in ("default", "ops", "sync"):
        assert f"{label}/rank0.aiprof/profile.json" in names
        assert f"{label}/{label}.trace.json.gz" in names
    assert (out / "counters.csv").read_text().splitlines()[0].startswith("rank,")
    assert "aiprof monitor (exit 0)" in (out / "monitor.txt").read_text()
