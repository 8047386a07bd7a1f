"""The CUDA paths on real GPU traces: import, overview, idle, launch analysis, advice.

The traces are what scripts/gpu_check.sh brought back from the H200 (tests/data/h200/)
and, beside them, real GPU traces from ../shared/data. Every figure is checked against
the events themselves, worked out here with SQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aiprof.advise import evaluate
from aiprof.analysis import full_table
from aiprof.importers import import_paths
from aiprof.store import open_profile

H200 = Path(__file__).parent / "data" / "h200"
SHARED = ["kineto/A100-nccl-parser/nccl_data.json.gz", "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"]
TRACES = [str(p) for p in sorted(H200.glob("*.json.gz"))] + SHARED


@pytest.mark.parametrize("trace", TRACES)
def test_gpu_trace_views_agree_with_the_events(trace: str, shared_data: Path, tmp_path: Path) -> None:
    path = Path(trace) if Path(trace).is_absolute() else shared_data / trace
    out, _ = import_paths([path], tmp_path / "p.aiprof")
    with open_profile(out) as prof:
        kernels = prof.sql(
            "SELECT count(*) AS n, sum(dur)::BIGINT AS ns FROM events WHERE kind = 'kernel'"
        ).to_pylist()[0]
        assert kernels["n"] > 0
        # Every kernel was launched by a host call with its correlation (CUPTI's link).
        orphans = prof.sql(
            """SELECT count(*) AS n FROM events k WHERE k.kind = 'kernel' AND NOT EXISTS
               (SELECT 1 FROM events l WHERE l.device_type = 'cpu' AND l.correlation = k.correlation)"""
        ).to_pylist()[0]["n"]
        assert orphans <= 0.01 * kernels["n"]
        view = {r["name"]: r for r in full_table(prof, "kernels").to_pylist() if r["kind"] == "kernel"}
        assert sum(r["count"] for r in view.values()) == kernels["n"]
        assert sum(r["total_us"] for r in view.values()) == pytest.approx(kernels["ns"] / 1e3, rel=1e-6)
        device = [r for r in full_table(prof, "overview").to_pylist() if r["section"] == "device" and r["step"] is None]
        by_dev: dict[tuple[int, int], float] = {}
        for r in device:
            by_dev[(r["rank"], r["device"])] = by_dev.get((r["rank"], r["device"]), 0.0) + r["percent"]
        assert by_dev and all(v == pytest.approx(100.0, abs=0.05) for v in by_dev.values())
        idle = full_table(prof, "idle").to_pylist()
        assert idle and all(r["idle_us"] >= 0 for r in idle)
        launch = full_table(prof, "launch").to_pylist()
        assert launch
        gains = [v.advice.gain for v in evaluate(prof) if v.advice is not None]  # shares of step time
        assert all(0 <= g <= 1 for g in gains) and sum(gains) <= 1.0 + 1e-9
