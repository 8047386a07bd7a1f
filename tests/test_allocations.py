"""The allocations view (one row per allocator block) and the devices a profile used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiprof.analysis import Query, run
from aiprof.analysis.device_use import devices_used
from aiprof.importers import import_paths
from aiprof.render.terminal import format_cell
from aiprof.store import open_profile
from kineto_builders import span, write_trace


def mem(ts: float, addr: int, b: int, alloc: int) -> dict[str, Any]:
    args = {
        "Device Type": 1,
        "Device Id": 0,
        "Addr": addr,
        "Bytes": b,
        "Total Allocated": alloc,
        "Total Reserved": 8192,
    }
    return {"ph": "i", "name": "[memory]", "pid": 100, "tid": 100, "ts": ts, "s": "t", "args": args}


def test_blocks_lifetimes_peak_owner_and_stack(tmp_path: Path) -> None:
    evs = [
        span("train.py(12): step", "python_function", 0, 100),
        span("aten::linear", "cpu_op", 10, 40),
        span("aten::mm", "cpu_op", 20, 10),
        mem(21, 1, 1000, 1000),  # in aten::mm under aten::linear under the Python frame
        mem(45, 2, 3000, 4000),  # in aten::linear, after aten::mm ended
        mem(60, 2, -3000, 1000),  # block 2 freed
        mem(70, 2, 500, 1500),  # address 2 reused: a new block, never freed
        mem(90, 1, -1000, 500),
    ]
    out, _ = import_paths([write_trace(tmp_path / "a.json", evs)], tmp_path / "a")
    with open_profile(out) as prof:
        rows = run(prof, "allocations", Query.parse([], ["ts_us"])).rows
        by_size = [r["bytes"] for r in run(prof, "allocations").rows]
    assert by_size == [3000, 1000, 500]  # largest first by default
    assert [(r["bytes"], r["freed_us"], r["lifetime_us"], r["live_at_peak"]) for r in rows] == [
        (1000, 90.0, 69.0, True),
        (3000, 60.0, 15.0, True),  # the peak (4000 B) is at 45 µs
        (500, None, None, False),
    ]
    assert [r["operator"] for r in rows] == ["aten::mm", "aten::linear", "(no operator)"]
    assert rows[0]["stack"] == "train.py(12): step > aten::linear > aten::mm"
    assert rows[1]["stack"] == "train.py(12): step > aten::linear"
    assert rows[2]["stack"] == "train.py(12): step"
    # The terminal prints the flag as a word, the numbers as numbers.
    assert [format_cell(r["live_at_peak"]) for r in rows] == ["yes", "yes", "no"]
    assert [format_cell(r["bytes"]) for r in rows] == ["1,000", "3,000", "500"]


def test_devices_used_is_not_every_device_the_node_lists(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / "kineto/V100/df_index_resolver.json.gz"], tmp_path / "d")
    with open_profile(out) as prof:
        listed = [d for d in prof.devices if d["type"] == "cuda"]
        used = devices_used(prof)
    assert len(listed) == 2
    assert [(d["rank"], d["type"], d["index"], d["name"]) for d in used] == [(1, "cuda", 1, "Tesla V100-SXM2-32GB")]
    assert used[0]["memory_bytes"] == 34089730048
