"""``aiprof timechart`` of a multi-rank folder: flow ids never join two ranks' arrows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aiprof.importers import import_paths
from kineto_builders import kernel, launch, span, write_trace


def test_flow_ids_are_unique_across_ranks(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for r in range(2):
        evs = [span("ProfilerStep#1", "user_annotation", 0, 100), launch(10, 5, 7), kernel("k", 20, 30, 7)]
        explicit = [
            {"ph": "s", "id": 3, "pid": 100, "tid": 100, "ts": 11, "cat": "ac2g", "name": "ac2g"},
            {"ph": "f", "id": 3, "pid": 0, "tid": 7, "ts": 20, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        ]
        f = write_trace(
            tmp_path / f"r{r}.json",
            evs + (explicit if r == 0 else []),
            distributedInfo={"backend": "nccl", "rank": r, "world_size": 2},
        )
        import_paths([f], folder / f"rank{r}.aiprof")
    out = tmp_path / "t.json"
    rec = subprocess.run(
        [sys.executable, "-m", "aiprof", "timechart", str(folder), "-o", str(out)], capture_output=True, text=True
    )
    assert rec.returncode == 0, rec.stderr
    flows = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") in ("s", "f")]
    by_id: dict[str, set[int]] = {}
    for e in flows:
        by_id.setdefault(str(e["id"]), set()).add(e["pid"])
    starts = [e for e in flows if e["ph"] == "s"]
    assert len({str(e["id"]) for e in starts}) == len(starts), "each arrow has its own id"
    assert "3" in by_id, "rank 0's own ids are kept as they came"
