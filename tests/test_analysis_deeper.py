"""The deeper analyser views (launch, sync, memcpy, communication, ranks, dataloader)
on small traces built here, with the expected figures worked out by hand.

The traces are Kineto JSON imported by the real importer; times are in µs and each
file's first event is at ts 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import run
from aiprof.importers import import_paths
from aiprof.store import Profile, open_profile
from kineto_builders import kernel, launch, span, write_trace

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return span(f"ProfilerStep#{n}", "user_annotation", ts, dur)


def load(tmp_path: Path, name: str, events: list[dict[str, Any]], **top: Any) -> Profile:
    f = write_trace(tmp_path / f"{name}.json", events, **top)
    out, _ = import_paths([f], tmp_path / f"{name}.aiprof")
    return open_profile(out)


def rows(prof: Profile, view: str) -> list[dict[str, Any]]:
    return run(prof, view).rows


# --- launch / launches -----------------------------------------------------------------


def test_launch_delay_runtime_and_idle(tmp_path: Path) -> None:
    # Step [0, 1000).
    # aten::mm [0, 200) launches k1: call [100, 160) (60 µs, over HTA's 50 µs), k1 [300, 305)
    #   -> delay 300 - 160 = 140 µs (over 100 µs), a 5 µs (short) kernel.
    # aten::add [400, 450) launches k2: call [410, 420), k2 [430, 630) -> delay 10 µs.
    ev = [
        step(1, 0, 1000),
        span("aten::mm", "cpu_op", 0, 200, **{"External id": 1}),
        launch(100, 60, 1),
        kernel("k1", 300, 5, 1),
        span("aten::add", "cpu_op", 400, 50, **{"External id": 2}),
        launch(410, 10, 2),
        kernel("k2", 430, 200, 2),
    ]
    with load(tmp_path, "l", ev) as prof:
        got = {r["kernel"]: r for r in rows(prof, "launches")}
        assert (got["k1"]["operator"], got["k1"]["runtime_us"], got["k1"]["delay_us"]) == ("aten::mm", 60.0, 140.0)
        assert (got["k2"]["operator"], got["k2"]["delay_us"], got["k2"]["kernel_us"]) == ("aten::add", 10.0, 200.0)
        assert got["k1"]["step"] == 1
        (a,) = [r for r in rows(prof, "launch") if r["operator"] == "(all)"]
        assert (a["launches"], a["long_runtime"], a["long_delay"]) == (2, 1, 1)
        assert a["runtime_us"] == 70.0
        assert a["delay_max_us"] == 140.0
        assert a["delay_median_us"] == 75.0  # (10 + 140) / 2
        # Kernel time 205 µs, of which k1's 5 µs is short: 2.44%.
        assert (a["kernel_us"], a["short_kernels"], a["short_kernel_us"]) == (205.0, 1, 5.0)
        assert a["short_kernel_pct"] == pytest.approx(100 * 5 / 205)
        # Both calls run while the device is idle: 60 + 10 µs; k1's late start [160, 300)
        # is all device idle.
        assert a["launch_idle_us"] == 70.0
        assert a["delay_idle_us"] == 140.0
        per_op = {r["operator"]: r for r in rows(prof, "launch") if r["operator"] != "(all)"}
        assert per_op["aten::mm"]["launches"] == 1 and per_op["aten::mm"]["runtime_us"] == 60.0


# --- memcpy ----------------------------------------------------------------------------


def test_memcpy_direction_bytes_bandwidth(tmp_path: Path) -> None:
    h2d = "Memcpy HtoD (Pinned -> Device)"
    d2h = "Memcpy DtoH (Device -> Pageable)"

    def copy(name: str, ts: float, dur: float, corr: int, nbytes: int) -> dict[str, Any]:
        return span(name, "gpu_memcpy", ts, dur, pid=0, tid=7, correlation=corr, device=0, stream=7, bytes=nbytes)

    ev = [
        # Two asynchronous pinned H2D copies of 1 MB: 100 + 300 µs -> 2e6 B / 400 µs = 5 GB/s.
        span("cudaMemcpyAsync", "cuda_runtime", 0, 10, correlation=1),
        copy(h2d, 20, 100, 1, 1_000_000),
        span("cudaMemcpyAsync", "cuda_runtime", 200, 10, correlation=2),
        copy(h2d, 220, 300, 2, 1_000_000),
        # One synchronous pageable D2H copy of 3.6 MB in 180 µs: 20 GB/s; the call takes 200 µs.
        span("cudaMemcpy", "cuda_runtime", 600, 200, correlation=3),
        copy(d2h, 610, 180, 3, 3_600_000),
        # A memset: no host side.
        span("cudaMemsetAsync", "cuda_runtime", 900, 5, correlation=4),
        span("Memset (Device)", "gpu_memset", 910, 20, pid=0, tid=7, correlation=4, device=0, stream=7, bytes=512),
    ]
    with load(tmp_path, "m", ev) as prof:
        got = {r["direction"]: r for r in rows(prof, "memcpy")}
        assert set(got) == {"H2D", "D2H", "memset"}
        h = got["H2D"]
        assert (h["host_memory"], h["api"], h["is_async"], h["copies"]) == ("pinned", "cudaMemcpyAsync", True, 2)
        assert (h["bytes"], h["total_us"], h["mean_us"], h["mean_bytes"]) == (2_000_000, 400.0, 200.0, 1e6)
        assert h["gbps"] == pytest.approx(5.0)
        assert h["api_us"] == 20.0
        d = got["D2H"]
        assert (d["host_memory"], d["api"], d["is_async"], d["bytes"]) == ("pageable", "cudaMemcpy", False, 3_600_000)
        assert d["gbps"] == pytest.approx(20.0)
        assert d["api_us"] == 200.0
        m = got["memset"]
        assert (m["host_memory"], m["bytes"], m["total_us"]) == ("device", 512, 20.0)


# --- sync ------------------------------------------------------------------------------


def test_sync_time_per_step(tmp_path: Path) -> None:
    ev = [
        step(1, 0, 1000),
        step(2, 1000, 1000),
        # Step 1: two stream syncs, 200 + 50 µs.
        span("cudaStreamSynchronize", "cuda_runtime", 100, 200),
        span("cudaStreamSynchronize", "cuda_runtime", 400, 50),
        # Step 2: .item() [1100, 1500) holding _local_scalar_dense and a stream sync;
        # a blocking cudaMemcpy [1600, 1650); a .to('cpu') [1700, 1800) that copies D2H.
        span("aten::item", "cpu_op", 1100, 400),
        span("aten::_local_scalar_dense", "cpu_op", 1110, 380),
        span("cudaStreamSynchronize", "cuda_runtime", 1200, 280),
        span("cudaMemcpy", "cuda_runtime", 1600, 50),
        span("aten::to", "cpu_op", 1700, 100, **{"External id": 9}),
        span("cudaMemcpyAsync", "cuda_runtime", 1710, 10, correlation=9, **{"External id": 9}),
        span("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 1730, 60, pid=0, tid=7, correlation=9, device=0),
        # A GC pause after the last step.
        span("gc.collect", "gc", 2100, 500),
    ]
    with load(tmp_path, "s", ev) as prof:
        got = {(r["step"], r["category"], r["name"]): r for r in rows(prof, "sync")}
        s1 = got[(1, "sync_api", "cudaStreamSynchronize")]
        assert (s1["calls"], s1["blocked_us"], s1["max_us"]) == (2, 250.0, 200.0)
        assert got[(1, "all", "(all)")]["blocked_us"] == 250.0
        assert got[(2, "item", "aten::item")]["blocked_us"] == 400.0
        assert got[(2, "sync_memcpy", "cudaMemcpy")]["blocked_us"] == 50.0
        assert got[(2, "to_host", "aten::to")]["blocked_us"] == 100.0
        # Step 2's union: item [1100, 1500) holds the nested sync, so 400 + 50 + 100 = 550.
        assert got[(2, "all", "(all)")]["blocked_us"] == 550.0
        assert got[(2, "all", "(all)")]["calls"] == 5
        gc = got[(None, "gc", "gc.collect")]
        assert (gc["calls"], gc["max_us"]) == (1, 500.0)


# --- communication / comm_overlap ------------------------------------------------------


def test_communication_bytes_and_overlap(tmp_path: Path) -> None:
    ev = [
        step(1, 0, 1000),
        # Compute kernel [100, 500); AllReduce [400, 700): 100 µs of its 300 hidden.
        launch(50, 10, 1),
        kernel("volta_sgemm_128x64_nn", 100, 400, 1),
        # 3 000 000 floats = 12 MB, named by record_param_comms around the launch.
        span("record_param_comms", "cpu_op", 300, 50, **{"In msg nelems": 3_000_000, "dtype": "Float"}),
        launch(310, 10, 2),
        kernel(NCCL, 400, 300, 2, stream=14),
    ]
    with load(tmp_path, "c", ev) as prof:
        (c,) = rows(prof, "communication")
        assert (c["step"], c["op"], c["calls"], c["total_us"]) == (1, "AllReduce", 1, 300.0)
        assert (c["bytes"], c["sized_calls"]) == (12_000_000, 1)
        assert c["gbps"] == pytest.approx(40.0)  # 12e6 B / 300 µs
        (o,) = rows(prof, "comm_overlap")
        assert (o["step_us"], o["comm_us"], o["compute_us"], o["overlap_us"], o["exposed_us"]) == (
            1000.0,
            300.0,
            400.0,
            100.0,
            200.0,
        )
        assert o["overlap_pct"] == pytest.approx(100 / 3)


# --- ranks -----------------------------------------------------------------------------


def _rank_trace(steps: list[float], coll_at: list[float]) -> list[dict[str, Any]]:
    """Steps of the given lengths from 0; in step i a 100 µs AllReduce at its start + coll_at[i]."""
    ev: list[dict[str, Any]] = []
    t0 = 0.0
    for i, (d, c) in enumerate(zip(steps, coll_at, strict=True)):
        ev += [step(i + 1, t0, d), launch(t0 + c - 50, 10, 10 + i), kernel(NCCL, t0 + c, 100, 10 + i, stream=14)]
        t0 += d
    return ev


def test_ranks_spread_and_late_arrivals(tmp_path: Path) -> None:
    # Rank 0: steps 1000, 1000. Rank 1: steps 1000, 1400 (mean 1200, jitter 400 / 1200).
    # Rank 1 starts the first AllReduce 50 µs after rank 0 (at 250 vs 200); the second
    # starts at 1200 on both.
    folder = tmp_path / "run"
    folder.mkdir()
    plan = {0: ([1000.0, 1000.0], [200.0, 200.0]), 1: ([1000.0, 1400.0], [250.0, 200.0])}
    for r, (steps, coll) in plan.items():
        f = write_trace(tmp_path / f"r{r}.json", _rank_trace(steps, coll), distributedInfo={"rank": r, "world_size": 2})
        import_paths([f], folder / f"rank{r}.aiprof")
    with open_profile(folder) as prof:
        got = {r["rank"]: r for r in rows(prof, "ranks")}
        r0, r1 = got[0], got[1]
        assert (r0["steps"], r0["step_total_us"], r0["step_mean_us"], r0["step_jitter_pct"]) == (2, 2000.0, 1000.0, 0.0)
        assert (r1["steps"], r1["step_total_us"], r1["step_mean_us"]) == (2, 2400.0, 1200.0)
        assert (r1["step_min_us"], r1["step_max_us"]) == (1000.0, 1400.0)
        assert r1["step_jitter_pct"] == pytest.approx(100 * 400 / 1200)
        # Spread of the mean steps across ranks: (1200 - 1000) / 1100.
        means = [r0["step_mean_us"], r1["step_mean_us"]]
        assert (max(means) - min(means)) / (sum(means) / 2) == pytest.approx(200 / 1100)
        # Device busy: two 100 µs AllReduces per rank.
        assert r0["device_busy_us"] == 200.0 and r0["busy_pct"] == pytest.approx(10.0)
        assert r1["busy_pct"] == pytest.approx(100 * 200 / 2400)
        # Two matched AllReduces; rank 1 is last once (the second is a tie), 50 / 2 µs late on average.
        assert (r1["collectives"], r1["last_arrivals"], r1["mean_late_us"]) == (2, 1, 25.0)
        assert (r0["collectives"], r0["last_arrivals"], r0["mean_late_us"]) == (2, 0, 0.0)
        assert r0["comm_us"] == 200.0 and r0["comm_gbps"] is None


# --- dataloader ------------------------------------------------------------------------


def test_dataloader_time_per_step(tmp_path: Path) -> None:
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    ev = [
        # Step 1 [0, 1000): loader spans [100, 400) and [300, 500) (union 400 µs), a kernel
        # [350, 450) runs inside them, so the device waits 400 - 100 = 300 µs.
        step(1, 0, 1000),
        span(loader, "user_annotation", 100, 300),
        span(loader, "user_annotation", 300, 200),
        launch(320, 10, 1),
        kernel("volta_sgemm_128x64_nn", 350, 100, 1),
        # Step 2 [1200, 2200), 200 µs after step 1: a 100 µs loader span, no device work.
        step(2, 1200, 1000),
        span(loader, "user_annotation", 1300, 100),
    ]
    with load(tmp_path, "d", ev) as prof:
        got = {r["step"]: r for r in rows(prof, "dataloader")}
        s1, s2 = got[1], got[2]
        assert (s1["step_us"], s1["loader_calls"], s1["dataloader_us"], s1["idle_in_loader_us"]) == (
            1000.0,
            2,
            400.0,
            300.0,
        )
        assert s1["gap_before_us"] is None
        assert (s2["loader_calls"], s2["dataloader_us"], s2["idle_in_loader_us"], s2["gap_before_us"]) == (
            1,
            100.0,
            100.0,
            200.0,
        )


def test_runtime_of_two_ranks_is_each_rank_alone(shared_data: Path, tmp_path: Path) -> None:
    # Two real ranks of one job: the view groups each rank's calls on its own (a slice of
    # the calls in rank order), as it does for that rank imported alone.
    files = [shared_data / "kineto" / "sampled-128-ranks" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
    both, _ = import_paths(files, tmp_path / "both.aiprof")
    with open_profile(both) as prof:
        together = rows(prof, "runtime")
    assert {r["rank"] for r in together} == {0, 1}
    for r, f in enumerate(files):
        alone, _ = import_paths([f], tmp_path / f"r{r}.aiprof")
        with open_profile(alone) as prof:
            own = rows(prof, "runtime")
        mine = [x for x in together if x["rank"] == r]
        assert mine == [x | {"rank": r} for x in own] and len(mine) >= 2
        launches = next(x for x in mine if x["class"] == "launch" and x["name"] == "(all)")
        assert launches["calls"] > 100 and launches["total_us"] > 0
