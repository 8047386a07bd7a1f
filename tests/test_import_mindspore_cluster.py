"""MindSpore's cluster outputs: a 4-rank pipeline-parallel job (2 stages) built from the
documented layouts (hccl_raw_N.csv, step_trace_raw_N_detail_time.csv,
ascend_cluster_analyse_pipeline-parallel_2_4_N.csv, flops_summary_N.json, flops_N.txt,
dynamic_shape_info_N.json), imported as one multi-rank job; and FLOPs per operator on
the kernels of a real MindSpore folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import advise, evaluate
from aiprof.analysis import Filter, Query, run, views
from aiprof.importers import choose, import_paths
from aiprof.store.reader import open_profile

RANKS = 4
STAGES = 2
STEPS = 3
#: ms per step of each rank's stage time: stage 1 (ranks 2, 3) is the slow one.
STAGE_MS = {0: 100.0, 1: 102.0, 2: 150.0, 3: 148.0}


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


def _step_trace(rank: int) -> str:
    lines = ["step_num,start_point,end_point,total,fp_point,bp_point,iteration_interval,fp_and_bp,tail"]
    t = 10_000_000 + rank * 100  # ticks of 10 ns
    total = int(STAGE_MS[rank] * 1e5) + 50_000
    for s in range(1, STEPS + 1):
        fp, bp, end = t + 1_000, t + total - 20_000, t + total
        lines.append(f"{s},{t},{end},{end - t},{fp},{bp},{fp - t},{bp - fp},{end - bp}")
        t = end
    lines.append("-,0,0,0,0,0,1000,0,0")  # the averages row
    return "\n".join(lines) + "\n"


def _cluster(rank: int) -> str:
    rows = [
        "computation_time,communication_alone_time,stage_time,receive_alone_time,collective_communication_alone_time"
    ]
    for _ in range(STEPS + 1):  # the steps, then the averages
        st = STAGE_MS[rank]
        rows.append(f"{st * 0.7:.4f},{st * 0.1:.4f},{st:.4f},{st * 0.15:.4f},{st * 0.05:.4f}")
    return "\n".join(rows) + "\n"


def _hccl(rank: int) -> str:
    link = {f"{rank}-{(rank + 1) % RANKS}": {"SDMA": [1.5, 2048.0, 1365333.3]}}
    ops = {"AllReduce-op1": ["1", 1.5, 0.25, link]}
    rows = ["step_num,communication_cost,wait_cost,link_info,communication_operator_cost"]
    for s in range(1, STEPS + 1):
        rows.append(f'{s},1.5,0.25,"{json.dumps(link).replace(chr(34), chr(34) * 2)}",'
                    f'"{json.dumps(ops).replace(chr(34), chr(34) * 2)}"')  # fmt: skip
    rows.append(f'-,1.5,0.25,"{json.dumps(link).replace(chr(34), chr(34) * 2)}",{{}}')
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cluster") / "profiler"
    d.mkdir()
    for r in range(RANKS):
        (d / f"step_trace_raw_{r}_detail_time.csv").write_text(_step_trace(r))
        (d / f"ascend_cluster_analyse_pipeline-parallel_{STAGES}_{RANKS}_{r}.csv").write_text(_cluster(r))
        (d / f"hccl_raw_{r}.csv").write_text(_hccl(r))
        (d / f"flops_summary_{r}.json").write_text(
            json.dumps({"FLOPs": 8000.0 + r, "FLOPS": 9000.5, "FLOPS_Utilization": 3.5})
        )
    return d


@pytest.fixture(scope="module")
def prof(job: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out, _ = import_paths([job], tmp_path_factory.mktemp("o") / "c")
    return open_profile(out)


def test_folder_is_one_multi_rank_job(job: Path, prof: Any) -> None:
    assert choose(job).name == "mindspore-legacy"
    meta = prof.metas[0]
    assert meta["ranks"] == [0, 1, 2, 3] and meta["world_size"] == 4
    assert meta["mindspore"]["parallel"]["stages"] == {"0": 0, "1": 0, "2": 1, "3": 1}
    steps = _rows(prof, "select rank, count(*) n from events where kind = 'step' group by all order by all")
    assert steps == [{"rank": r, "n": STEPS} for r in range(RANKS)]  # the averages row is no step
    hc = _rows(
        prof,
        "select rank, value from kernel_metrics where section = 'hccl_raw' and metric = 'wait_cost' "
        "and launch_id = 2 order by rank",
    )
    assert hc == [{"rank": r, "value": 0.25} for r in range(RANKS)]
    link = _rows(
        prof,
        "select kernel, value, unit from kernel_metrics where section = 'hccl_raw/link' and rank = 1 "
        "and metric = 'bandwidth' and launch_id is null",
    )
    assert link == [{"kernel": "1-2 SDMA", "value": 1365333.3, "unit": "KB/s"}]
    op = _rows(
        prof,
        "select value from kernel_metrics where section = 'hccl_raw/operator' and kernel = 'AllReduce-op1' "
        "and metric = 'communication_cost' and rank = 3 and launch_id = 1",
    )
    assert op == [{"value": 1.5}]
    fl = _rows(prof, "select rank, value, unit from kernel_metrics where metric = 'FLOPs' order by rank")
    assert fl[3] == {"rank": 3, "value": 8003.0, "unit": "MFLOP"}


def test_stages_view_and_the_slow_stage(prof: Any) -> None:
    rows = run(prof, "stages").rows
    assert [(r["stage"], r["ranks"], r["rank_count"]) for r in rows] == [(0, "0,1", 2), (1, "2,3", 2)]
    assert rows[1]["stage_ms"] == pytest.approx(149.0)
    assert rows[1]["slowest_rank"] == 2 and rows[1]["slowest_stage_ms"] == pytest.approx(150.0)
    assert rows[0]["receive_alone_ms"] == pytest.approx(101.0 * 0.15)
    # The step spans of each stage's ranks (built: stage time + 0.5 ms).
    assert rows[1]["step_mean_us"] == pytest.approx(149_500.0)
    items = {a.rule: a for a in advise(prof)}
    a = items["cluster.slow_stage"]
    assert a.evidence["slowest_stage"] == 1 and a.evidence["ranks"] == "2,3"
    assert a.gain == pytest.approx((149.0 - 125.0) / 149.0)  # stage means 101 and 149 ms
    # A MindSpore job: MindSpore's pipeline code, no torch.distributed.pipelining.
    assert set(a.snippets) == {"mindspore"} and "nn.PipelineCell(" in a.snippets["mindspore"]
    # The ranks view reads the device step spans: rank 2 is the slowest.
    ranks = {r["rank"]: r for r in run(prof, "ranks").rows}
    assert ranks[2]["steps"] == STEPS and ranks[2]["step_mean_us"] == pytest.approx(150_500.0)
    # With three or more ranks the step-mean rule defers to the robust z-scores.
    verdicts = {v.rule: v for v in evaluate(prof)}
    assert verdicts["cluster.slow_rank"].status == "no_data"
    assert "cluster.persistent_straggler" in (verdicts["cluster.slow_rank"].reason or "")
    for name in views():
        run(prof, name)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("hccl_raw_2.csv", "hccl_raw"),
        ("ascend_cluster_analyse_pipeline-parallel_2_4_2.csv", "cluster_analyse_time"),
        ("flops_summary_2.json", "flops_summary"),
    ],
)
def test_each_file_alone_on_its_rank(job: Path, tmp_path: Path, name: str, kind: str) -> None:
    src = job / name
    assert choose(src).name == "mindspore-cluster"
    renamed = tmp_path / "x"
    shutil.copy(src, renamed)
    assert choose(renamed).name == "mindspore-cluster"
    out, _ = import_paths([src], tmp_path / "o")
    p = open_profile(out)
    assert _rows(p, "select distinct rank from kernel_metrics") == [{"rank": 2}]
    assert p.metas[0]["sources"][0]["file_kind"] == kind


def test_flops_per_operator_on_kernels(shared_data: Path, tmp_path: Path) -> None:
    d = tmp_path / "ms"
    shutil.copytree(shared_data / "ascend/mindspore-1.x", d)
    for f in [d, *d.iterdir()]:
        f.chmod(0o755 if f.is_dir() else 0o644)
    (d / "flops_1.txt").write_text(
        "full_kernel_name, MFLOPs(10^6 cube), GFLOPS(10^9 cube), FLOPS utilization(cube), "
        "MFLOPs(10^6 vector), GFLOPS(10^9 vector), FLOPS utilization(vec)\n"
        "Default/AssignAdd-op142, 0, 0, 0, 0.25, 1.5, 0.1\n"
        "Default/TransData-op118, 12.5, 333, 33, 0.5, 2, 0.2\n"
    )
    out, ctx = import_paths([d], tmp_path / "o")
    p = open_profile(out)
    assert not any("not imported" in w for w in ctx.warnings)
    got = _rows(p, "select name, flops from events where flops is not null group by all order by all")
    assert got == [{"name": "AssignAdd-op142", "flops": 250_000}, {"name": "TransData-op118", "flops": 13_000_000}]
    assert _rows(p, "select count(*) n from events where flops is not null") == [{"n": 4}]  # two launches each
    m = _rows(p, "select value, unit from kernel_metrics where section = 'flops' and metric like 'GFLOPS(10^9 cube)'"
              " and kernel = 'Default/TransData-op118'")  # fmt: skip
    assert m == [{"value": 333.0, "unit": "GFLOP/s"}]
    # Achieved FLOP/s of the op: its FLOPs over its launches' time.
    op = run(p, "op-detail", Query([Filter("name", "in", ["TransData-op118"])])).rows[0]
    t = _rows(p, "select count(*) n, sum(dur) d from events where name = 'TransData-op118'")[0]
    assert op["flops"] == 13_000_000 and op["gflops_per_s"] == pytest.approx(t["n"] * 13_000_000 / int(t["d"]))


def test_dynamic_shape_info(tmp_path: Path) -> None:
    doc = {
        "operator": {
            "1": [
                {
                    "step": 1,
                    "op_side": "gpu",
                    "op_type": "Add",
                    "op_name": "Add-op6",
                    "dur": 75.616,
                    "shape_info": ["[32, 1]", "[32, 1]"],
                },
            ],
            "2": [
                {"step": 2, "op_side": "gpu", "op_type": "Add", "op_name": "Add-op6", "dur": 48.64, "shape_info": []}
            ],
        },
        "kernel": {
            "1": [
                {
                    "step": 1,
                    "op_type": "cuLaunchKernel",
                    "op_name": "ElewiseArithKernel",
                    "dur": 3.904,
                    "op_full_name": "Default/network-Net/Add-op6",
                }
            ]
        },
    }
    f = tmp_path / "dynamic_shape_info_0.json"
    f.write_text(json.dumps(doc))
    assert choose(f).name == "mindspore-cluster"
    out, _ = import_paths([f], tmp_path / "d")
    p = open_profile(out)
    rows = _rows(p, "select section, kernel, launch_id, value, text from kernel_metrics order by section, launch_id")
    assert rows == [
        {"section": "dynamic_shape", "kernel": "Add-op6", "launch_id": 1, "value": 75.616, "text": '["[32, 1]","[32, 1]"]'},
        {"section": "dynamic_shape", "kernel": "Add-op6", "launch_id": 2, "value": 48.64, "text": "[]"},
        {"section": "dynamic_shape/kernel", "kernel": "ElewiseArithKernel", "launch_id": 1, "value": 3.904,
         "text": '"Default/network-Net/Add-op6"'},
    ]  # fmt: skip
