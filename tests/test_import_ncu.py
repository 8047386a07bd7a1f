"""Nsight Compute CSV importer and the kernel-metrics view: the real superbench capture
(details page, CC 10.0) plus details and raw pages the tests write themselves."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import Query, run
from aiprof.importers import choose, import_paths
from aiprof.importers.nvidia.ncu import BALANCED_PCT, LATENCY_BOUND_PCT, NO_BOUND_PCT, bound, parse_value
from aiprof.store import open_profile

NCU = "ncu/ncu_details_csv_cublaslt_sm100_superbench.log"
GEMM = "_".join(
    [
        "cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16_64x256x128_1x1x1_0",
        "tnn_align4_1sm_bias_f16_relu_aux_scalemax",
    ]
)


def _import(src: Path, out: Path) -> tuple[Any, Any]:
    path, ctx = import_paths([src], out)
    return open_profile(path), ctx


def _metric(prof: Any, metric: str, section: str | None = None) -> list[dict[str, Any]]:
    sql = "SELECT * FROM kernel_metrics WHERE metric = ?"
    params: list[Any] = [metric]
    if section:
        sql += " AND section = ?"
        params.append(section)
    return list(prof.sql(sql + " ORDER BY launch_id", params).to_pylist())


def test_superbench_details(shared_data: Path, tmp_path: Path) -> None:
    prof, ctx = _import(shared_data / NCU, tmp_path / "ncu.aiprof")
    with prof:
        rows = prof.sql("SELECT * FROM kernel_metrics").to_pylist()
        # 10 + 17 + 13 + 10 metric rows, 8 rule rows, 9 launch identity rows, 1 class row.
        assert len(rows) == 68
        assert {r["launch_id"] for r in rows} == {0}
        assert {r["kernel"] for r in rows} == {GEMM}
        (sm,) = _metric(prof, "Compute (SM) Throughput")
        assert sm["value"] == 23.59 and sm["unit"] == "%" and sm["section"] == "GPU Speed Of Light Throughput"
        assert _metric(prof, "Memory Throughput")[0]["value"] == 21.68
        assert _metric(prof, "Duration")[0]["value"] == 406240.0
        assert _metric(prof, "DRAM Frequency")[0]["value"] == 3995313115.40
        assert _metric(prof, "Registers Per Thread")[0]["unit"] == "register/thread"
        policy = _metric(prof, "Cluster Scheduling Policy")[0]
        assert policy["value"] is None and policy["text"] == "PolicySpread"
        # Both SOL figures under 60 %: latency-bound, as the capture's own SOLBottleneck rule says.
        (cls,) = _metric(prof, "bound", "aiprof")
        assert cls["text"] == "latency-bound" and cls["value"] is None
        (rule,) = _metric(prof, "rule:SOLBottleneck")
        assert rule["section"] == "SpeedOfLight" and rule["text"].startswith("OPT: This workload exhibits low compute")
        occ = _metric(prof, "rule:TheoreticalOccupancy")[0]
        assert occ["value"] == 81.25 and occ["unit"] == "% local"
        assert len(_metric(prof, "rule:WorkloadImbalance")) == 4
        grid = _metric(prof, "Grid Size", "launch")[0]
        assert grid["text"] == "(9, 32, 1)"
        assert _metric(prof, "Process Name", "launch")[0]["text"] == "cublaslt_gemm"
        meta = prof.metas[0]
        assert meta["devices"] == [
            {"rank": 0, "type": "cuda", "index": 0, "vendor": "NVIDIA", "compute_capability": "10.0"}
        ]
        assert meta["sources"][0]["page"] == "details"
        assert any("==PROF== Connected to process 371693" in p for p in meta["sources"][0]["prof_lines"])
        view = run(prof, "kernel-metrics")
        assert view.total == 1
        (row,) = view.rows
        assert row["kernel"] == GEMM
        assert row["duration_us"] == pytest.approx(406.24)
        assert (row["sm_pct"], row["memory_pct"], row["bound"]) == (23.59, 21.68, "latency-bound")
        assert row["dram_pct"] == 0.74 and row["l1_pct"] == 23.23 and row["l2_pct"] == 15.12
        assert row["achieved_occupancy_pct"] == 15.53 and row["theoretical_occupancy_pct"] == 18.75
        assert row["registers_per_thread"] == 168 and row["waves_per_sm"] == 1.89
        assert row["grid"] == "(9, 32, 1)" and row["block"] == "(384, 1, 1)"
        assert row["rules"] == 8 and row["max_speedup_pct"] == 81.25
        assert run(prof, "kernel-metrics", Query.parse(["bound=compute-bound"])).total == 0
    assert ctx.tables["kernel_metrics"] == 68
    assert not ctx.warnings


def test_detection_by_content(shared_data: Path, tmp_path: Path) -> None:
    dst = tmp_path / "unknown"
    shutil.copy(shared_data / NCU, dst)
    assert choose(dst).name == "ncu"
    assert choose(shared_data / NCU).name == "ncu"


HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",'
    '"Rule Description","Estimated Speedup Type","Estimated Speedup"'
)


def _details_row(
    launch: int, kernel: str, metric: str, unit: str, value: str, section: str = "GPU Speed Of Light Throughput"
) -> str:
    return (
        f'"{launch}","42","app","host","{kernel}","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0",'
        f'"{section}","{metric}","{unit}","{value}",'
    )


def _details(launches: list[tuple[str, str, str, str]]) -> str:
    lines = ["==PROF== Connected to process 42 (/bin/app)", "some program output, 1,2,3", HEADER]
    for i, (kernel, sm, mem, dur) in enumerate(launches):
        lines.append(_details_row(i, kernel, "Duration", "usecond", dur))
        lines.append(_details_row(i, kernel, "Compute (SM) Throughput", "%", sm))
        lines.append(_details_row(i, kernel, "Memory Throughput", "%", mem))
        lines.append(_details_row(i, kernel, "Elapsed Cycles", "cycle", "1,234,567"))
        lines.append("==PROF== Profiling kernel")
    lines.append("==PROF== Disconnected from process 42")
    return "\n".join(lines) + "\n"


def test_built_details_classes_and_separators(tmp_path: Path) -> None:
    src = tmp_path / "ncu_run.csv"
    src.write_text(
        _details(
            [
                ("gemm", "91.5", "40.2", "1,250.5"),  # SM >= 80: compute-bound
                ("copy", "12.0", "85.0", "10.0"),  # memory >= 80: memory-bound
                ("mix", "70.0", "65.0", "3.0"),  # both in [60, 80), 5 apart: balanced
                ("scan", "75.0", "50.0", "2.0"),  # in band, 25 apart: compute-bound
                ("tiny", "n/a", "5.0", "1.0"),  # no SM figure: no class
            ]
        )
    )
    prof, ctx = _import(src, tmp_path / "b.aiprof")
    with prof:
        rows = run(prof, "kernel-metrics", Query.parse(sort="launch_id")).rows
        assert [(r["kernel"], r["bound"]) for r in rows] == [
            ("gemm", "compute-bound"),
            ("copy", "memory-bound"),
            ("mix", "balanced"),
            ("scan", "compute-bound"),
            ("tiny", None),
        ]
        assert rows[0]["duration_us"] == 1250.5  # usecond, with a thousands separator
        assert rows[0]["elapsed_cycles"] == 1234567
        na = _metric(prof, "Compute (SM) Throughput")[-1]
        assert na["value"] is None and na["text"] == "n/a"
        top = run(prof, "kernel-metrics", Query.parse(["sm_pct>=50"], "-duration_us", limit=1))
        assert top.total == 3 and top.rows[0]["kernel"] == "gemm"
    assert any("1 of 5 launches lack the Speed-of-Light" in w for w in ctx.warnings)


def test_cut_last_row_is_kept_out_with_warning(tmp_path: Path) -> None:
    text = _details([("gemm", "91.5", "40.2", "3.0"), ("copy", "12.0", "85.0", "1.0")]).rstrip("\n")
    lines = text.splitlines()[:-1]  # drop the Disconnected line
    lines[-2] = lines[-2][:40]  # the last metric row of launch 1, cut mid-field
    del lines[-1]
    src = tmp_path / "cut_ncu.csv"
    src.write_text("\n".join(lines))
    prof, ctx = _import(src, tmp_path / "c.aiprof")
    with prof:
        assert prof.metas[0]["partial"] is True
        assert prof.sql("SELECT count(DISTINCT launch_id) AS n FROM kernel_metrics").to_pylist()[0]["n"] == 2
    assert any("cut short" in w for w in ctx.warnings)


def test_raw_page(tmp_path: Path) -> None:
    src = tmp_path / "ncu_raw.csv"
    src.write_text(
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Device","CC",'
        '"gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed",'
        '"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","launch__registers_per_thread"\n'
        '"","","","","","","","","","msecond","%","%","register/thread"\n'
        '"0","7","app","h","k1","1","7","0","8.0","1.5","20.0","88.5","32"\n'
        '"1","7","app","h","k2","1","7","0","8.0","0.25","61.0","62.0","64"\n'
    )
    assert choose(src).name == "ncu"
    prof, _ = _import(src, tmp_path / "r.aiprof")
    with prof:
        rows = run(prof, "kernel-metrics", Query.parse(sort="launch_id")).rows
        assert [(r["kernel"], r["bound"], r["duration_us"], r["registers_per_thread"]) for r in rows] == [
            ("k1", "memory-bound", 1500.0, 32.0),
            ("k2", "balanced", 250.0, 64.0),
        ]
        units = _metric(prof, "gpu__time_duration.sum", "raw")
        assert [u["unit"] for u in units] == ["msecond", "msecond"]
        assert prof.metas[0]["sources"][0]["page"] == "raw"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", *args], capture_output=True, text=True, check=False)


def test_csv_with_other_columns_is_exit_2(tmp_path: Path) -> None:
    src = tmp_path / "ncu_other.csv"
    src.write_text('"Name","Calls","Time"\n"a","1","2"\n')
    r = _cli("import", str(src), "-o", str(tmp_path / "o.aiprof"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "no importer recognises it" in r.stderr and "Nsight Compute CSV header" in r.stderr
    r = _cli("import", "-f", "ncu", str(src), "-o", str(tmp_path / "o.aiprof"))
    assert r.returncode == 2 and "no Nsight Compute CSV header" in r.stderr
    assert not (tmp_path / "o.aiprof").exists()


def test_header_without_rows_is_exit_2(tmp_path: Path) -> None:
    src = tmp_path / "ncu_empty.csv"
    src.write_text("==PROF== Disconnected from process 1\n" + HEADER + "\n")
    r = _cli("import", str(src), "-o", str(tmp_path / "o.aiprof"))
    assert r.returncode == 2 and "no metric rows" in r.stderr


@pytest.mark.parametrize(
    ("sm", "mem", "cls"),
    [
        (LATENCY_BOUND_PCT - 0.01, LATENCY_BOUND_PCT - 0.01, "latency-bound"),
        (LATENCY_BOUND_PCT, 10.0, "compute-bound"),
        (10.0, LATENCY_BOUND_PCT, "memory-bound"),
        (70.0, 70.0 - BALANCED_PCT + 0.01, "balanced"),
        (70.0, 70.0 - BALANCED_PCT, "compute-bound"),
        (NO_BOUND_PCT, NO_BOUND_PCT - 1, "compute-bound"),
        (NO_BOUND_PCT - 1, NO_BOUND_PCT, "memory-bound"),
        (90.0, 90.0, "compute-bound"),
        (None, 50.0, None),
    ],
)
def test_bound_thresholds(sm: float | None, mem: float | None, cls: str | None) -> None:
    assert bound(sm, mem) == cls


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3995313115.40", 3995313115.40),
        ("1,239,496", 1239496.0),
        ("-2.5e3", -2500.0),
        ("n/a", None),
        ("", None),
        ("1,2", None),
    ],
)
def test_parse_value(text: str, value: float | None) -> None:
    assert parse_value(text) == value
