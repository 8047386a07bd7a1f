"""Every real capture in ../shared/data, end to end: detection (by name and by content),
import, every view, the advice, and the timechart round trip."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import advise
from aiprof.analysis import run, views
from aiprof.importers import choose, import_paths
from aiprof.store import open_profile

#: Each real capture and the importer that must take it.
CAPTURES = {
    "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": "kineto",
    "kineto/A100-nccl-parser/nccl_data.json.gz": "kineto",
    "kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz": "kineto",
    "kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": "kineto",
    "kineto/cuda-event-sync/event_sync_trace.json.gz": "kineto",
    "kineto/cupti-counters/benchmark_result_924719_1679055439_trace.json.gz": "kineto",
    "kineto/sampled-128-ranks/sampled_rank-0.json.gz": "kineto",
    "kineto/triton/triton_example.json.gz": "kineto",
    "nsys/nsys_2022.4_vecadd_streams_T4_report1.sqlite": "nsys",
    "nsys/nsys_2025.6_laplace_openacc_report1.sqlite": "nsys",
    "ncu/ncu_details_csv_cublaslt_sm100_superbench.log": "ncu",
    "nvidia-smi/dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt": "nvidia-dmon",
    "nvidia-smi/dmon_pucvmet_DT_idle.txt": "nvidia-dmon",
    "ascend/torch_npu/trace_view.json": "ascend-trace",
    "ascend/torch_npu/kernel_details.csv": "ascend-pt",
    "ascend/torch_npu": "ascend-pt",
    "ascend/msprof-PROF_000001": "ascend-msprof",
    "ascend/cluster": "ascend-cluster",
    "ascend/mindspore-1.x": "mindspore-legacy",
    "ascend/mindspore-1.x-raw/DATA_PREPROCESS.dev.AICPU.0.slice_0": "mindspore-aicpu",
    "ascend/mindspore-raw-job": "mindspore-job",
    "cambricon/cnperf_timechart_MLU590_excerpt.json": "cnperf",
    "cambricon/cnmon_table_samples.txt": "cnmon",
    "habana/hl-smi_samples.txt": "hl-smi",
}


def _counts(path: Path) -> dict[str, int]:
    with open_profile(path) as p:
        return {
            t: p.sql(f"SELECT count(*) AS n FROM {t}").to_pylist()[0]["n"]
            for t in ("events", "counters", "memory", "kernel_metrics")
        }


@pytest.mark.parametrize("rel", sorted(CAPTURES))
def test_imports_reports_and_advises(shared_data: Path, tmp_path: Path, rel: str) -> None:
    src = shared_data / rel
    assert choose(src).name == CAPTURES[rel]
    out, _ = import_paths([src], tmp_path / "p")
    counts = _counts(out)
    assert sum(counts.values()) > 0, counts
    with open_profile(out) as prof:
        for name in views():
            run(prof, name)  # no view fails on any format
        items = advise(prof)
        assert sum(a.gain for a in items) <= 1.0 + 1e-9
    # Detection by content agrees with detection by name.
    renamed = tmp_path / "unknown"
    if src.is_dir():
        shutil.copytree(src, renamed)
    else:
        shutil.copy(src, renamed)
    assert choose(renamed).name == CAPTURES[rel]
    again, _ = import_paths([renamed], tmp_path / "q")
    assert _counts(again) == counts


def _events(path: Path) -> list[tuple[Any, ...]]:
    with open_profile(path) as p:
        origin = p.time_origin_ns
        q = f"SELECT name, ts + {origin}::HUGEINT AS t, dur, kind, device_type FROM events ORDER BY ALL"
        return [tuple(r.values()) for r in p.sql(q).to_pylist()]


TIMELINES = [
    rel
    for rel, imp in CAPTURES.items()
    if imp in ("nsys", "ascend-trace", "ascend-msprof", "cnperf", "mindspore-legacy", "mindspore-job")
]


@pytest.mark.parametrize("rel", TIMELINES)
def test_timechart_round_trip_other_formats(shared_data: Path, tmp_path: Path, rel: str) -> None:
    a, _ = import_paths([shared_data / rel], tmp_path / "a")
    trace = tmp_path / "t.json"
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "timechart", str(a), "-o", str(trace)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    b, _ = import_paths([trace], tmp_path / "b", forced="kineto")
    ea, eb = _events(a), _events(b)
    assert len(ea) == len(eb)
    # Names, absolute times and durations to the ns, kinds and device types.
    assert ea == eb
