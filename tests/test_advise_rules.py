"""Each rule fires on a small trace built here, and stays silent just below its threshold.

The traces are Kineto JSON written by the test and imported by the real importer.
Base scenario: 4 steps of 10 000 µs; in each an aten::mm launches one kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import Advice, cap, evaluate
from aiprof.importers import import_paths
from aiprof.store import open_profile
from kineto_builders import span, write_trace

STEP = 10_000.0
STEPS = 4
GIB = 1 << 30


def trace(
    *,
    kernel_us: float = 6000.0,
    kernel_name: str = "volta_sgemm_128x64_nn",
    launch_us: float = 10.0,
    cc: tuple[int, int] = (7, 0),
    extra: Any = None,
    step_us: float = STEP,
    rank: int | None = None,
) -> dict[str, Any]:
    """The events and header of the base scenario; ``extra(i, t0)`` adds events to step i."""
    evs: list[dict[str, Any]] = []
    for i in range(STEPS):
        t0 = i * step_us
        corr = 1000 + i
        evs.append(span(f"ProfilerStep#{i + 1}", "user_annotation", t0, step_us))
        evs.append(span("aten::mm", "cpu_op", t0 + 100, launch_us + 20, **{"External id": corr}))
        evs.append(
            span("cudaLaunchKernel", "cuda_runtime", t0 + 110, launch_us, correlation=corr, **{"External id": corr})
        )
        evs.append(
            span(
                kernel_name,
                "kernel",
                t0 + 120 + launch_us,
                kernel_us,
                pid=0,
                tid=7,
                correlation=corr,
                device=0,
                stream=7,
            )
        )
        if extra:
            evs.extend(extra(i, t0))
    top: dict[str, Any] = {
        "deviceProperties": [
            {"id": 0, "name": "Test GPU", "totalGlobalMem": 16 * GIB, "computeMajor": cc[0], "computeMinor": cc[1]}
        ]
    }
    if rank is not None:
        top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    return {"events": evs, "top": top}


def verdicts(tmp_path: Path, name: str = "t", **kw: Any) -> dict[str, Any]:
    t = trace(**kw)
    f = write_trace(tmp_path / f"{name}.json", t["events"], **t["top"])
    out, _ = import_paths([f], tmp_path / f"{name}.aiprof")
    with open_profile(out) as prof:
        return {v.rule: v for v in evaluate(prof)}


def fired(v: dict[str, Any], rule: str) -> Advice:
    assert v[rule].status == "fired", (rule, v[rule].status, v[rule].reason)
    a = v[rule].advice
    assert a is not None
    return a


def silent(v: dict[str, Any], rule: str) -> None:
    assert v[rule].status == "silent", (rule, v[rule].status, v[rule].reason)


def _loader(us: float) -> Any:
    return lambda i, t0: [
        span("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", t0 + 7000, us)
    ]


def test_dataloader_share(tmp_path: Path) -> None:
    # 600 µs of 10 000 per step = 6% > 5%; the device is idle then (kernel ends at 6130).
    a = fired(verdicts(tmp_path, "fire", extra=_loader(600)), "input.dataloader_share")
    assert a.evidence["dataloader_us"] == 2400.0
    assert a.evidence["dataloader_pct"] == pytest.approx(6.0)
    assert a.severity == "high"
    silent(verdicts(tmp_path, "below", extra=_loader(400)), "input.dataloader_share")


def test_input_bound(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire", extra=_loader(600)), "input.input_bound")
    assert a.evidence["idle_in_loader_us"] == 2400.0
    assert "moderately" in a.summary
    silent(verdicts(tmp_path, "below", extra=_loader(400)), "input.input_bound")


def test_dataloader_no_data_without_loader(tmp_path: Path) -> None:
    v = verdicts(tmp_path)
    assert v["input.dataloader_share"].status == "no_data"
    assert v["input.dataloader_per_step"].status == "no_data"


def _sync(us: float) -> Any:
    return lambda i, t0: [span("cudaStreamSynchronize", "cuda_runtime", t0 + 6200, us)] if i == 0 else []


def test_sync_api(tmp_path: Path) -> None:
    # 800 µs of 40 000 = 2% >= 1%; 200 µs = 0.5% stays silent.
    a = fired(verdicts(tmp_path, "fire", extra=_sync(800)), "sync.sync_api")
    assert a.evidence["blocked_us"] == 800.0
    assert a.evidence["calls"] == 1
    assert a.evidence["blocked_pct"] == pytest.approx(2.0)
    silent(verdicts(tmp_path, "below", extra=_sync(200)), "sync.sync_api")


def _gc(us: float) -> Any:
    return lambda i, t0: [span("gc.collect", "gc", t0 + 6500, us)] if i == 1 else []


def test_gc_pauses(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire", extra=_gc(2000)), "sync.gc_pauses")
    assert a.evidence["max_pause_us"] == 2000.0
    silent(verdicts(tmp_path, "below", extra=_gc(900)), "sync.gc_pauses")
    assert verdicts(tmp_path, "none")["sync.gc_pauses"].status == "no_data"


def _nccl(us: float) -> Any:
    def add(i: int, t0: float) -> list[dict[str, Any]]:
        corr = 5000 + i
        return [
            span("cudaLaunchKernel", "cuda_runtime", t0 + 6200, 5, correlation=corr),
            span(
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                "kernel",
                t0 + 6300,
                us,
                pid=0,
                tid=14,
                correlation=corr,
                device=0,
                stream=14,
            ),
        ]

    return add


def test_comm_share_and_overlap(tmp_path: Path) -> None:
    # 1200 µs of each 10 000 µs step with no compute kernel running: 12% > 10%.
    v = verdicts(tmp_path, "fire", extra=_nccl(1200))
    a = fired(v, "comm.share")
    assert a.evidence["communication_us"] == pytest.approx(4800.0)
    o = fired(v, "comm.low_overlap")
    assert o.evidence["overlap_pct"] == 0.0
    assert o.evidence["exposed_us"] == 4800.0
    silent(verdicts(tmp_path, "below", extra=_nccl(800)), "comm.share")


def test_low_utilization(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire", kernel_us=4000), "kernels.low_utilization")
    assert a.evidence["device_busy_us"] == 16000.0
    assert a.evidence["utilization_pct"] == pytest.approx(40.0)
    silent(verdicts(tmp_path, "below", kernel_us=6000), "kernels.low_utilization")


def test_amp(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire"), "precision.amp")
    assert a.evidence["compute_capability"] == 7.0
    assert a.evidence["eligible_kernel_us"] == 24000.0
    silent(verdicts(tmp_path, "old", cc=(6, 1)), "precision.amp")
    silent(verdicts(tmp_path, "tc", kernel_name="volta_h884gemm_128x64_nn"), "precision.amp")


def test_tf32(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire", cc=(8, 0), kernel_name="ampere_sgemm_128x64_nn"), "precision.tf32")
    assert a.evidence["fp32_pct"] == 100.0
    silent(verdicts(tmp_path, "volta", cc=(7, 5), kernel_name="ampere_sgemm_128x64_nn"), "precision.tf32")


def _mem(frac: float) -> Any:
    def add(i: int, t0: float) -> list[dict[str, Any]]:
        if i:
            return []
        b = int(frac * 16 * GIB)
        return [
            {
                "ph": "i",
                "name": "[memory]",
                "pid": 100,
                "tid": 100,
                "ts": t0 + 200,
                "s": "t",
                "args": {
                    "Device Type": 1,
                    "Device Id": 0,
                    "Addr": 1,
                    "Bytes": b,
                    "Total Allocated": b,
                    "Total Reserved": b,
                },
            }
        ]

    return add


def test_memory_peak(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire", extra=_mem(0.95)), "memory.peak_high")
    assert a.evidence["peak_pct"] == pytest.approx(95.0, abs=0.01)
    assert a.evidence["memory_bytes"] == 16 * GIB
    silent(verdicts(tmp_path, "below", extra=_mem(0.85)), "memory.peak_high")


def test_memory_underused(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire", extra=_mem(0.3)), "memory.underused")
    assert a.evidence["peak_pct"] == pytest.approx(30.0, abs=0.01)
    silent(verdicts(tmp_path, "below", extra=_mem(0.6)), "memory.underused")


def _copy(name: str) -> Any:
    def add(i: int, t0: float) -> list[dict[str, Any]]:
        corr = 7000 + i
        return [
            span("cudaMemcpyAsync", "cuda_runtime", t0 + 6500, 20, correlation=corr),
            span(name, "gpu_memcpy", t0 + 6530, 50, pid=0, tid=7, correlation=corr, device=0, stream=7, bytes=4096),
        ]

    return add


def test_pageable_memcpy(tmp_path: Path) -> None:
    a = fired(verdicts(tmp_path, "fire", extra=_copy("Memcpy HtoD (Pageable -> Device)")), "data.pageable_memcpy")
    assert a.evidence["copies"] == 4
    assert a.evidence["bytes"] == 4 * 4096
    silent(verdicts(tmp_path, "below", extra=_copy("Memcpy HtoD (Pinned -> Device)")), "data.pageable_memcpy")


def test_launch_bound(tmp_path: Path) -> None:
    # The launch call runs while the device is idle: 500 µs x 4 = 5% of 40 000 µs.
    a = fired(verdicts(tmp_path, "fire", launch_us=500), "launch.launch_bound")
    assert a.evidence["launch_idle_us"] == 2000.0
    assert "moderately" in a.summary
    silent(verdicts(tmp_path, "below", launch_us=100), "launch.launch_bound")


def test_slow_rank(tmp_path: Path) -> None:
    def two(name: str, slow_step: float) -> dict[str, Any]:
        folder = tmp_path / name
        folder.mkdir()
        for r, s in ((0, STEP), (1, slow_step)):
            t = trace(step_us=s, rank=r)
            f = write_trace(tmp_path / f"{name}{r}.json", t["events"], **t["top"])
            import_paths([f], folder / f"r{r}.aiprof")
        with open_profile(folder) as prof:
            return {v.rule: v for v in evaluate(prof)}

    # Mean steps 10 000 and 11 000 µs: (max - min) / mean = 1000 / 10 500 = 9.5% > 5%.
    a = fired(two("fire", 11_000), "cluster.slow_rank")
    assert a.evidence["slowest_rank"] == 1
    assert a.evidence["spread_pct"] == pytest.approx(100 * 1000 / 10_500, abs=0.01)
    silent(two("below", 10_400), "cluster.slow_rank")


def test_gains_capped_at_step_time() -> None:
    def adv(rule: str, g: float) -> Advice:
        return Advice(rule, rule, "x", "", {}, g, "", raw_gain=g)

    items = [adv("a", 0.6), adv("b", 0.5), adv("c", 0.4)]
    cap(items)
    assert sum(a.gain for a in items) == pytest.approx(1.0)
    assert items[0].gain == pytest.approx(0.6 / 1.5)
    small = [adv("a", 0.2), adv("b", 0.1)]
    cap(small)
    assert [a.gain for a in small] == [0.2, 0.1]


def test_gain_cap_on_a_profile(tmp_path: Path) -> None:
    # A starved device: loader, sync and low utilization all claim the same idle time.
    def extra(i: int, t0: float) -> list[dict[str, Any]]:
        return _loader(3000)(i, t0) + _sync(2000)(i, t0)

    v = verdicts(tmp_path, kernel_us=1000, extra=extra)
    adv = [x.advice for x in v.values() if x.advice is not None]
    assert len(adv) >= 3
    assert sum(a.raw_gain for a in adv) > 1.0
    assert sum(a.gain for a in adv) <= 1.0 + 1e-9
