"""Kernels' Tensor Core test and launch shapes, operators by call stack and their
launched kernels, and the same-job test of the compare page, on real traces."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import run
from aiprof.analysis.job_match import job_differences
from aiprof.analysis.tensor_cores import uses_tensor_cores
from aiprof.importers import import_paths
from aiprof.store import open_profile

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
A100 = "kineto/A100-nccl-parser/nccl_data.json.gz"


def test_tensor_core_rule_is_tb_profilers_name_test() -> None:
    assert uses_tensor_cores("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(...)")
    assert uses_tensor_cores("volta_h884gemm_64x64_ldg8_nn")
    assert uses_tensor_cores("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize96x64x32")
    assert not uses_tensor_cores("volta_sgemm_64x64_nt")
    assert not uses_tensor_cores("ncclKernel_AllReduce_RING_LL_Sum_float")


def test_kernels_view_tensor_core_column_matches_the_rule(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / A100], tmp_path / "a")
    with open_profile(out) as prof:
        rows = run(prof, "kernels").rows
        share = run(prof, "tensor-cores").rows
    assert all(r["tensor_core"] == uses_tensor_cores(r["name"]) for r in rows)
    on = sum(r["total_us"] for r in rows if r["tensor_core"] and r["kind"] == "kernel")
    assert on > 0
    assert share[0]["tensor_core_us"] == pytest.approx(on)
    assert share[0]["tensor_core_pct"] == pytest.approx(100 * on / share[0]["kernel_us"])


def test_kernels_view_launch_shapes_come_from_the_trace(shared_data: Path, tmp_path: Path) -> None:
    events = json.loads(gzip.decompress((shared_data / V100).read_bytes()))["traceEvents"]
    launches: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("cat") == "kernel":
            launches.setdefault(e["name"], []).append(e)
    out, _ = import_paths([shared_data / V100], tmp_path / "v")
    with open_profile(out) as prof:
        rows = {r["name"]: r for r in run(prof, "kernels").rows}
    checked = 0
    for name, evs in sorted(launches.items(), key=lambda kv: -len(kv[1]))[:20]:
        grids = Counter("×".join(map(str, e["args"]["grid"])) for e in evs)
        top = grids.most_common(2)
        if len(top) > 1 and top[0][1] == top[1][1]:
            continue  # no single most common grid
        row = rows[name]
        assert row["grid"] == top[0][0], name
        assert row["registers_per_thread"] == max(e["args"]["registers per thread"] for e in evs)
        assert row["shared_memory_bytes"] == max(e["args"]["shared memory"] for e in evs)
        occ = sum(e["dur"] * e["args"]["est. achieved occupancy %"] for e in evs) / sum(e["dur"] for e in evs)
        assert row["occupancy_pct"] == pytest.approx(occ, rel=1e-3), name
        checked += 1
    assert checked >= 10


def test_operator_kernels_add_up_to_the_operators_launches(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / V100], tmp_path / "v")
    with open_profile(out) as prof:
        ops = [o for o in run(prof, "operators").rows if o["kernels"] and o["device_self_us"] == o["device_total_us"]]
        assert len(ops) >= 3
        for op in ops[:3]:
            k = run(prof, "operator-kernels", params={"name": op["name"]}).rows
            assert sum(r["count"] for r in k) == op["kernels"], op["name"]
            assert sum(r["total_us"] for r in k) == pytest.approx(op["device_total_us"]), op["name"]
        assert run(prof, "operator-kernels").rows == []


STACK_JOB = """
import torch
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
m = torch.nn.Linear(32, 8)
def forward_a(x):
    return m(x).sum()
def forward_b(x):
    return m(x * 2).sum()
with profile(activities=[ProfilerActivity.CPU], with_stack=True) as p:
    for _ in range(3):
        forward_a(torch.randn(4, 32))
        forward_b(torch.randn(4, 32))
p.export_chrome_trace({out!r})
"""


def test_operators_by_call_stack_split_the_call_sites(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    trace = tmp_path / "stack.json"
    subprocess.run([sys.executable, "-c", STACK_JOB.format(out=str(trace))], check=True, timeout=300)
    out, _ = import_paths([trace], tmp_path / "s")
    with open_profile(out) as prof:
        rows = [r for r in run(prof, "operators", params={"group_by": "stack"}).rows if r["name"] == "aten::linear"]
        plain = [r for r in run(prof, "operators").rows if r["name"] == "aten::linear"]
    sites = {r["call_stack"].split(" > ")[-2 if "nn.Module" in r["call_stack"] else -1]: r["calls"] for r in rows}
    assert any("forward_a" in s for s in sites) and any("forward_b" in s for s in sites), sites
    assert sum(r["calls"] for r in rows) == plain[0]["calls"] == 6


def test_job_differences(shared_data: Path, tmp_path: Path) -> None:
    paths = {
        "r0": shared_data / V100,
        "mem": shared_data / "kineto/V100/df_index_resolver.json.gz",
        "s0": shared_data / "kineto/sampled-128-ranks/sampled_rank-0.json.gz",
        "s1": shared_data / "kineto/sampled-128-ranks/sampled_rank-1.json.gz",
    }
    out = {k: import_paths([p], tmp_path / k)[0] for k, p in paths.items()}
    with open_profile(out["r0"]) as r0, open_profile(out["mem"]) as mem:
        d = job_differences(r0, mem)
        assert d[0] == "world size differs: A 1, B 2"
        assert any(x.startswith("the model looks different") for x in d)
        assert job_differences(r0, r0) == []
    with open_profile(out["s0"]) as s0, open_profile(out["s1"]) as s1:
        assert job_differences(s0, s1) == []


CPU_ONLY = "kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def test_operators_of_a_cpu_only_trace_leave_the_device_unmeasured(shared_data: Path, tmp_path: Path) -> None:
    """A CPU-only trace's operators read device_self_us 0, device_total_us 0, kernels 0:
    measured zeros, in the view and the report's top operators. Nothing ran on a device,
    so they are null (not measured), and the report leaves the column out."""
    from aiprof.cli.overview import compute_items

    out, _ = import_paths([shared_data / CPU_ONLY], tmp_path / "cpu")
    with open_profile(out) as p:
        rows = run(p, "operators").rows
        items = compute_items(p)
    assert rows and all(r["host_total_us"] > 0 for r in rows)
    assert all(r["device_self_us"] is None and r["device_total_us"] is None and r["kernels"] is None for r in rows)
    top = next(it for it in items if it.get("title") == "top operators by host self time")
    assert [c[0] for c in top["cols"]] == ["name", "calls", "host_self_us"]
    # A trace with device work keeps its figures, zeros included (an operator that launched nothing).
    out, _ = import_paths([shared_data / V100], tmp_path / "v100")
    with open_profile(out) as p:
        rows = run(p, "operators").rows
    assert all(r["device_total_us"] is not None and r["kernels"] is not None for r in rows)
    assert any(r["kernels"] == 0 for r in rows) and any(r["device_total_us"] > 0 for r in rows)
