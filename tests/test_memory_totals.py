"""Allocated memory derived from Bytes when a trace has no totals (store/memory_totals.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import full_table
from aiprof.importers import import_paths
from aiprof.store import open_profile
from kineto_builders import span, write_trace


def mem(ts: float, addr: int, b: int, device: int = 0, **totals: int) -> dict[str, Any]:
    args: dict[str, Any] = {"Device Type": 1, "Device Id": device, "Addr": addr, "Bytes": b}
    if totals:
        args |= {"Total Allocated": totals["alloc"], "Total Reserved": totals["reserved"]}
    return {"ph": "i", "name": "[memory]", "pid": 100, "tid": 100, "ts": ts, "s": "t", "args": args}


@pytest.mark.parametrize("engine", ["python", "columnar"])
def test_bytes_only_trace_gets_its_peak_from_the_running_sum(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIPROF_IMPORT_ENGINE", engine)
    evs = [
        span("aten::empty", "cpu_op", 0, 10),
        mem(1, 1, 1000),
        mem(2, 9, -1300),  # frees a block allocated before the trace
        span("aten::mm", "cpu_op", 20, 10),
        mem(21, 2, 2000),
        span("aten::add", "cpu_op", 40, 10),
        mem(41, 3, 500),
        mem(45, 1, -1000),
        mem(60, 2, -2000),
        # A second device with totals keeps them as written.
        mem(5, 7, 64, device=1, alloc=4096, reserved=8192),
    ]
    out, _ = import_paths([write_trace(tmp_path / "m.json", evs)], tmp_path / "m")
    with open_profile(out) as prof:
        alloc = prof.sql("SELECT device, allocated FROM memory ORDER BY device, ts").to_pylist()
        rows = full_table(prof, "memory").to_pylist()
    assert [a["allocated"] for a in alloc if a["device"] == 0] == [1800, 500, 2500, 3000, 2000, 0]
    assert [a["allocated"] for a in alloc if a["device"] == 1] == [4096]
    # The running sum dips to -800 at the end: at least 800 B were held before the trace.
    peak0 = {r["peak_allocated_bytes"] for r in rows if r["device"] == 0}
    assert peak0 == {3000}
    assert {r["peak_ts_us"] for r in rows if r["device"] == 0} == {41}
    warnings = json.loads((out / "profile.json").read_text())["warnings"]
    derived = [w for w in warnings if "derived from the running sum of Bytes" in w]
    assert len(derived) == 1 and "cuda:0" in derived[0]


def test_trace_with_totals_is_untouched(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / "kineto" / "V100" / "df_index_resolver.json.gz"], tmp_path / "d")
    with open_profile(out) as prof:
        n = prof.sql("SELECT count(*) AS n, count(allocated) AS a FROM memory").to_pylist()[0]
    assert n["n"] > 0 and n["a"] == n["n"]
    assert not any("running sum of Bytes" in w for w in json.loads((out / "profile.json").read_text())["warnings"])
