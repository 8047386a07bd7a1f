"""The operators view reads its host spans in batches (issue 18: a 10 GiB trace's tens of
millions of spans never in memory at once): any batch size gives the table one batch
gives, on real traces, on a recording with Python stacks, and on hand-made spans whose
nesting crosses every batch boundary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis.operators import GROUPS, _operators
from aiprof.importers import import_paths
from aiprof.store import open_profile
from test_analysis_kernels_ops import STACK_JOB  # the recording with two call sites

TRACES = (
    "kineto/sampled-128-ranks/sampled_rank-0.json.gz",  # µs ticks: nested calls of one extent
    "kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "kineto/V100/df_index_resolver.json.gz",
)


def _rows(out: Path, group: str, rows: int) -> list[dict[str, Any]]:
    with open_profile(out) as p:
        got = _operators(p, GROUPS.get(group), rows).to_pylist()
    return sorted(got, key=lambda r: (r["name"], r.get("input_shapes") or "", r.get("call_stack") or ""))


@pytest.mark.parametrize("rel", TRACES)
def test_every_batch_size_gives_one_batchs_table(shared_data: Path, tmp_path: Path, rel: str) -> None:
    out, _ = import_paths([shared_data / rel], tmp_path / "p")
    for group in ("name", "shapes"):
        whole = _rows(out, group, 1 << 30)
        assert whole and sum(r["calls"] for r in whole) >= 50
        for rows in (1, 7, 1000):
            assert _rows(out, group, rows) == whole, (group, rows)


def test_nested_calls_of_one_extent_nest_in_call_order(shared_data: Path, tmp_path: Path) -> None:
    # The trace's clock is in µs: aten::to and the aten::_to_copy it calls often share
    # start and duration. The caller (the smaller external id) holds the callee.
    out, _ = import_paths([shared_data / TRACES[0]], tmp_path / "p")
    rows = {r["name"]: r for r in _rows(out, "name", 1 << 30)}
    with open_profile(out) as p:
        ties = p.sql(
            "SELECT count(*) AS n FROM events a JOIN events b ON a.tid = b.tid AND a.ts = b.ts AND a.dur = b.dur "
            "WHERE a.name = 'aten::to' AND b.name = 'aten::_to_copy'"
        ).to_pylist()[0]["n"]
    assert ties > 0
    # aten::to only calls aten::_to_copy: its self time is what its callee leaves, never
    # its whole time (which it would be if the callee held it).
    to = rows["aten::to"]
    assert to["host_self_us"] < to["host_total_us"]
    assert rows["aten::_to_copy"]["host_total_us"] <= to["host_total_us"]


def test_call_stacks_survive_the_batches(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    trace = tmp_path / "stack.json"
    subprocess.run([sys.executable, "-c", STACK_JOB.format(out=str(trace))], check=True, timeout=300)
    out, _ = import_paths([trace], tmp_path / "s")
    whole = _rows(out, "stack", 1 << 30)
    stacks = [r["call_stack"] for r in whole if r["name"] == "aten::linear"]
    assert len(stacks) == 2 and any("forward_a" in s for s in stacks) and any("forward_b" in s for s in stacks)
    for rows in (1, 3, 50):
        assert _rows(out, "stack", rows) == whole, rows


def _trace(events: list[dict[str, Any]], path: Path) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_spans_open_across_batches_get_their_children_and_device_time(tmp_path: Path) -> None:
    # step > outer > inner > cudaLaunchKernel (10 µs of kernel), then a second launch
    # under outer alone, on one thread; a second thread's op between them in the table.
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "outer",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 900,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "inner",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "dur": 300,
            "args": {"External id": 2},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 30,
            "dur": 5,
            "args": {"correlation": 7, "External id": 2},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 500,
            "dur": 5,
            "args": {"correlation": 8, "External id": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k1",
            "pid": 0,
            "tid": 7,
            "ts": 40,
            "dur": 10,
            "args": {"correlation": 7, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k2",
            "pid": 0,
            "tid": 7,
            "ts": 510,
            "dur": 20,
            "args": {"correlation": 8, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "other",
            "pid": 1,
            "tid": 2,
            "ts": 0,
            "dur": 50,
            "args": {"External id": 3},
        },
    ]
    out, _ = import_paths([_trace(ev, tmp_path / "t.json")], tmp_path / "p")
    whole = {r["name"]: r for r in _rows(out, "name", 1 << 30)}
    assert whole["outer"]["host_self_us"] == 900 - 300 - 5
    assert whole["inner"]["host_self_us"] == 300 - 5
    assert whole["inner"]["device_self_us"] == 10 and whole["inner"]["kernels"] == 1
    assert whole["outer"]["device_self_us"] == 20 and whole["outer"]["device_total_us"] == 30
    assert whole["other"]["calls"] == 1 and whole["other"]["host_self_us"] == 50
    for rows in (1, 2, 3):
        assert {r["name"]: r for r in _rows(out, "name", rows)} == whole, rows
