"""The faults of issue 12, each on a trace built to show it (each test failed before
its fix). Base scenario (test_advise_rules.trace): 4 steps of 10 000 µs, in each an
aten::mm launching one kernel at t0 + 130."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import CLOCK_SKEW_TOLERANCE_US, Advice, advise, advise_json
from aiprof.analysis import run
from aiprof.importers import import_paths
from aiprof.store import Profile, open_profile
from kineto_builders import kernel, launch, span, write_trace
from test_advise_rules import STEP, STEPS, fired, judge, silent, trace


def _profile(tmp_path: Path, name: str, events: list[dict[str, Any]], top: dict[str, Any] | None = None) -> Profile:
    f = write_trace(tmp_path / f"{name}.json", events, **(top or {}))
    out, _ = import_paths([f], tmp_path / f"{name}.aiprof")
    return open_profile(out)


def _all_row(prof: Profile) -> dict[str, Any]:
    return next(r for r in run(prof, "launch").rows if r["operator"] == "(all)")


# --- 2: every rule uses the overview's step windows ------------------------------------


def test_launch_delay_counts_only_inside_the_steps(tmp_path: Path) -> None:
    # In step 0 a launch waits 500 µs while the device is idle. After the last step
    # (outside every step window) a launch's kernel starts 20 000 µs after the call: that
    # idle time is no step time, and counting it made the "device idle" figure exceed the
    # idle time the device has in its steps.
    def extra(i: int, t0: float) -> list[dict[str, Any]]:
        evs: list[dict[str, Any]] = []
        if i == 0:
            evs += [launch(t0 + 7000, 10, 9000), kernel("elementwise_kernel", t0 + 7510, 20, 9000)]
        if i == STEPS - 1:
            end = t0 + STEP
            evs += [launch(end + 100, 10, 9100), kernel("elementwise_kernel", end + 20_110, 20, 9100)]
        return evs

    t = trace(extra=extra)
    v = judge(tmp_path, "delay", t["events"], t["top"])
    a = fired(v, "launch.high_delay")
    assert a.evidence["delay_idle_us"] == 500.0
    with _profile(tmp_path, "delay2", t["events"], t["top"]) as prof:
        idle = sum(r["idle_us"] for r in run(prof, "steps").rows)
    assert a.evidence["delay_idle_us"] <= idle
    assert "1.2% of the step" in a.summary  # 500 of 40 000 µs


# --- 3: one graph launch is one launch --------------------------------------------------


def test_cuda_graph_launch_counts_once(tmp_path: Path) -> None:
    # Step 0: one 60 µs cudaGraphLaunch (over HTA's 50 µs) that starts 400 kernels, and 19
    # launches of 10 µs. 4 + 19 + 1 = 24 launch calls, 1 of them slow: 4.2% < 5%. Counted
    # per kernel it was 400 slow of 423.
    def extra(i: int, t0: float) -> list[dict[str, Any]]:
        if i:
            return []
        evs: list[dict[str, Any]] = [
            span("cudaGraphLaunch", "cuda_runtime", t0 + 6200, 60, correlation=8000, **{"External id": 8000})
        ]
        evs += [kernel("graph_kernel", t0 + 6300 + 5 * k, 4, 8000) for k in range(400)]
        for k in range(19):
            t, corr = t0 + 8500 + 50 * k, 8100 + k
            evs += [launch(t, 10, corr), kernel("elementwise_kernel", t + 20, 5, corr)]
        return evs

    t = trace(extra=extra)
    silent(judge(tmp_path, "graph", t["events"], t["top"]), "launch.long_runtime")
    with _profile(tmp_path, "graph2", t["events"], t["top"]) as prof:
        row = _all_row(prof)
        assert row["launches"] == 24
        assert row["long_runtime"] == 1
        # Kernel figures still count every kernel.
        assert row["short_kernels"] == 419


# --- 4: negative launch delays -----------------------------------------------------------


def test_negative_delays_are_clipped_and_reported(tmp_path: Path) -> None:
    # A kernel that starts 5 µs before its launch call ends, 15 µs after it starts: the
    # device runs it while cudaLaunchKernel returns, ordinary asynchronous launching. Its
    # delay counts as 0 (HTA clips it), and the advice says nothing of the clocks.
    def extra(i: int, t0: float) -> list[dict[str, Any]]:
        return [launch(t0 + 7000, 20, 9500), kernel("elementwise_kernel", t0 + 7015, 20, 9500)] if i == 0 else []

    t = trace(extra=extra)
    with _profile(tmp_path, "neg", t["events"], t["top"]) as prof:
        rows = run(prof, "launches").rows
        late = next(r for r in rows if r["kernel"] == "elementwise_kernel")
        assert late["delay_us"] == 0.0
        assert min(r["delay_us"] for r in rows) >= 0.0
        assert _all_row(prof)["negative_delays"] == 1
        assert advise_json(prof)["warnings"] == []


@pytest.mark.parametrize(("lead_us", "warned"), [(3.0, True), (0.5, False)])
def test_clock_skew_only_from_a_start_before_the_call_starts(tmp_path: Path, lead_us: float, warned: bool) -> None:
    # A kernel that starts before its launch call starts proves the device clock runs
    # ahead; within CLOCK_SKEW_TOLERANCE_US (the timestamps' rounding) it proves nothing.
    def extra(i: int, t0: float) -> list[dict[str, Any]]:
        return (
            [launch(t0 + 7000, 20, 9500), kernel("elementwise_kernel", t0 + 7000 - lead_us, 20, 9500)] if i == 0 else []
        )

    assert CLOCK_SKEW_TOLERANCE_US == 1.0
    t = trace(extra=extra)
    with _profile(tmp_path, f"skew{lead_us}", t["events"], t["top"]) as prof:
        assert _all_row(prof)["negative_delays"] == 1
        warnings = advise_json(prof)["warnings"]
    if warned:
        assert warnings == [
            "1 launches start on the device more than 1 µs before their launch call starts on the host (by up to "
            "3.0 µs): the device clock runs ahead of the host's, so host/device overlaps in this trace are off by "
            "as much, and these launches' delays count as 0."
        ]
    else:
        assert warnings == []


# --- 5: host setup is not launch overhead ------------------------------------------------


def _setup_calls(i: int, t0: float) -> list[dict[str, Any]]:
    """In every step, while the device is idle (after t0 + 6130): allocator and setup
    calls with correlation ids (Kineto gives every runtime call one) and no device work;
    before the first step, 5000 µs of stream creation (startup)."""
    evs: list[dict[str, Any]] = []
    for k, (name, dur) in enumerate(
        [("cudaMalloc", 800), ("cudaFree", 400), ("cudaStreamCreate", 300), ("cudaDeviceGetStreamPriorityRange", 100)]
    ):
        evs.append(span(name, "cuda_runtime", t0 + 6500 + 1000 * k, dur, correlation=60_000 + 10 * i + k))
    if i == 0:
        evs.append(span("cudaStreamCreateWithPriority", "cuda_runtime", -6000, 5000, correlation=59_999))
    return evs


def test_host_setup_is_not_launch_overhead(tmp_path: Path) -> None:
    t = trace(extra=_setup_calls)
    v = judge(tmp_path, "setup", t["events"], t["top"])
    # Only the 10 µs launches are launch calls: 40 of 40 000 µs, not 1600 per step.
    silent(v, "launch.launch_bound")
    m = fired(v, "runtime.memory_mgmt")
    assert m.evidence["memory_mgmt_us"] == 4 * 1200.0
    s = fired(v, "runtime.setup")
    assert s.evidence["setup_us"] == 4 * 400.0
    # The stream created before the first step is startup cost, not step time.
    assert s.evidence["startup_us"] == 5000.0
    assert s.estimate_us == 4 * 400.0
    assert "5.0 ms more of setup and allocation runs outside the steps" in s.summary
    # Without startup calls the summary does not speak of "0.0 ms more" outside the steps.
    t = trace(extra=lambda i, t0: _setup_calls(i + 1, t0))
    s = fired(judge(tmp_path, "setup_only", t["events"], t["top"]), "runtime.setup")
    assert s.evidence["startup_us"] == 0.0 and "outside the steps" not in s.summary
    with _profile(tmp_path, "setup2", t["events"], t["top"]) as prof:
        classes = {(r["class"], r["name"]) for r in run(prof, "runtime").rows}
    assert ("memory", "cudaMalloc") in classes and ("setup", "cudaDeviceGetStreamPriorityRange") in classes
    assert ("launch", "cudaLaunchKernel") in classes


# --- 6: whole-device claims use the device's union --------------------------------------


def test_host_wait_uses_the_device_union(tmp_path: Path) -> None:
    # Stream 7 computes 9500 of each 10 000 µs; stream 14 runs one 10 µs kernel per step,
    # each launched after the previous one ended (host wait). Summed over the streams,
    # idle is ~42% of their spans; the device itself is idle 3.5% of its active span.
    def extra(i: int, t0: float) -> list[dict[str, Any]]:
        corr = 7700 + i
        return [launch(t0 + 40, 5, corr), kernel("small_kernel", t0 + 50, 10, corr, stream=14)]

    t = trace(kernel_us=9500, extra=extra)
    silent(judge(tmp_path, "streams", t["events"], t["top"]), "kernels.host_wait")
    with _profile(tmp_path, "streams2", t["events"], t["top"]) as prof:
        dev = {r["category"]: r["percent"] for r in run(prof, "overview").rows if r["section"] == "device"}
        streams = run(prof, "idle").rows
    assert dev["idle"] < 10.0
    assert sum(r["idle_us"] for r in streams) / sum(r["span_us"] for r in streams) > 0.10


def test_host_wait_labels_per_stream_figures(tmp_path: Path) -> None:
    # The device idles 20% of each step waiting for the host: whole-device claim, and
    # the per-stream figure named for its stream.
    t = trace(kernel_us=8000)
    a = fired(judge(tmp_path, "hw", t["events"], t["top"]), "kernels.host_wait")
    assert a.evidence["device_idle_pct"] == pytest.approx(100 * 2 * 2000 / (2 * STEP + 8000), abs=0.01)
    assert "busiest stream 7 of device 0" in a.summary
    # The active span's share comes with the idle time it is a share of (a reader took
    # the steps' idle time for it).
    idle_ms, idle_pct = a.evidence["device_idle_us"] / 1000, a.evidence["device_idle_pct"]
    assert f"from its first kernel to its last: idle {idle_ms:.1f} ms, {idle_pct:.1f}% of that active span" in a.summary
    # The gain rests on the idle time inside the steps, and the summary states it: the
    # gain is never more than the idle time the item reports.
    assert a.estimate_us <= a.evidence["steps_idle_us"] + 1e-3
    assert f"idle {a.evidence['steps_idle_us'] / 1000:.1f} ms" in a.summary
    assert f"{a.evidence['steps_idle_pct']:.1f}% of the step time" in a.summary


# --- 7: zero-gain advice is information ---------------------------------------------------


def test_tiny_gains_are_info_and_hidden(tmp_path: Path) -> None:
    # Four 50 µs pageable copies: 200 of 40 000 µs = 0.5% of the step.
    def copy(i: int, t0: float) -> list[dict[str, Any]]:
        corr = 7000 + i
        return [
            span("cudaMemcpyAsync", "cuda_runtime", t0 + 6500, 20, correlation=corr),
            span(
                "Memcpy HtoD (Pageable -> Device)",
                "gpu_memcpy",
                t0 + 6530,
                50,
                pid=0,
                tid=7,
                correlation=corr,
                device=0,
                stream=7,
                bytes=4096,
            ),
        ]

    t = trace(extra=copy)
    with _profile(tmp_path, "tiny", t["events"], t["top"]) as prof:
        shown = {a.rule for a in advise(prof)}
        every = {a.rule: a for a in advise(prof, include_info=True)}
    assert "data.pageable_memcpy" not in shown
    p = every["data.pageable_memcpy"]
    assert p.severity == "info"
    assert p.gain == pytest.approx(200 / 40_000)


def test_gc_counts_only_pauses_inside_steps(tmp_path: Path) -> None:
    # A 5000 µs collection at import, before the first step, and none inside the steps.
    t = trace(extra=lambda i, t0: [span("gc.collect", "gc", -8000, 5000)] if i == 0 else [])
    silent(judge(tmp_path, "gc", t["events"], t["top"]), "sync.gc_pauses")
    # The same pause inside step 1 costs step time.
    t = trace(extra=lambda i, t0: [span("gc.collect", "gc", t0 + 7000, 5000)] if i == 1 else [])
    a = fired(judge(tmp_path, "gc_in", t["events"], t["top"]), "sync.gc_pauses")
    assert a.evidence["gc_us"] == 5000.0


# --- 8: dma_* on MTIA is non-compute -------------------------------------------------------


def test_mtia_dma_is_non_compute(tmp_path: Path) -> None:
    # Two MTIA steps: a 600 µs compute kernel and a 300 µs dma_request in each.
    evs: list[dict[str, Any]] = []
    for i in range(2):
        t0 = 1000.0 * i
        evs.append(span(f"ProfilerStep#{i + 1}", "user_annotation", t0, 1000))
        for k, (name, ts, dur) in enumerate([("fused_matmul_kernel", 50, 600), ("dma_request_h2d", 700, 300)]):
            corr = 10 * i + k + 1
            evs.append(span("mtiaLaunchKernel", "runtime", t0 + ts - 40, 10, correlation=corr))
            evs.append(span(name, "mtia_ccp_events", t0 + ts, dur, pid=0, tid=7, correlation=corr, device=0))
    with _profile(tmp_path, "mtia", evs) as prof:
        assert prof.sql("SELECT DISTINCT device_type AS d FROM events WHERE kind = 'kernel'").to_pylist() == [
            {"d": "mtia"}
        ]
        dev = {r["category"]: r["time_us"] for r in run(prof, "overview").rows if r["section"] == "device"}
    # HTA's window keeps the first step's work: 600 µs compute, 300 µs dma (non-compute).
    assert dev["compute"] == 600.0
    assert dev["non_compute"] == 300.0


# --- 9: the last step extends to the device work it launched (tb-profiler) ---------------


def test_last_step_extends_to_its_device_work(tmp_path: Path) -> None:
    # Step 1 [0, 1000): loader [0, 300), kernel [400, 900). Step 2 [1000, 2000): loader
    # [1000, 1300), a kernel launched at 1500 that runs [1600, 2600). tb-profiler's
    # step 2 ends at 2600: the DataLoader share is 600 / 2600 = 23.08%, not 600 / 2000.
    evs: list[dict[str, Any]] = []
    for i, (k0, k1) in enumerate([(400, 900), (1600, 2600)]):
        t0 = 1000.0 * i
        evs += [
            span(f"ProfilerStep#{i + 1}", "user_annotation", t0, 1000),
            span("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", t0, 300),
            launch(k0 - 100, 10, i + 1),
            kernel("sgemm", k0, k1 - k0, i + 1),
        ]
    with _profile(tmp_path, "tail", evs) as prof:
        steps = {r["step"]: r["duration_us"] for r in run(prof, "steps").rows}
        dl = next(
            r
            for r in run(prof, "overview").rows
            if r["section"] == "breakdown" and r["step"] is None and r["category"] == "dataloader"
        )
    assert steps == {1: 1000.0, 2: 1600.0}
    assert dl["percent"] == pytest.approx(100 * 600 / 2600)


# --- 10: outlier steps -----------------------------------------------------------------------


def _outlier_trace() -> list[dict[str, Any]]:
    """8 steps of 10 000 µs (a 9000 µs train op in each) and step 5 of 100 000 µs, most of
    it in an evaluation pass ``test``."""
    evs: list[dict[str, Any]] = []
    t0 = 0.0
    for i in range(1, 10):
        dur = 100_000.0 if i == 5 else 10_000.0
        evs.append(span(f"ProfilerStep#{i}", "user_annotation", t0, dur))
        evs.append(span("train_step", "user_annotation", t0 + 100, 9000))
        if i == 5:
            evs.append(span("test", "user_annotation", t0 + 9500, 90_000))
        t0 += dur
    return evs


def test_outlier_step_is_flagged_excluded_and_advised(tmp_path: Path) -> None:
    with _profile(tmp_path, "outlier", _outlier_trace()) as prof:
        flagged = [r["step"] for r in run(prof, "steps").rows if r["outlier"]]
        rank = run(prof, "ranks").rows[0]
        items = advise(prof, include_info=True)
    assert flagged == [5]
    # The per-step mean leaves the outlier out.
    assert rank["step_mean_us"] == 10_000.0
    a: Advice = next(x for x in items if x.rule == "steps.outlier")
    assert a.summary.startswith("Step 5 took 100 ms, 10x the median (10.0 ms); it runs test")
    assert a.evidence["what"] == "test"
    # The step's time beyond a typical one is the gain: 90 000 of 180 000 µs.
    assert a.gain == pytest.approx(0.5)
    assert a.cause == "outlier_step"


def test_gc_in_an_outlier_step_is_garbage_collection(tmp_path: Path) -> None:
    # Step 5 is an outlier because a 60 ms full collection runs in it: the collection is
    # the cause of that time (gc), the rest of the step's excess stays an outlier's.
    evs = _outlier_trace()
    t5 = next(e["ts"] for e in evs if e["name"] == "ProfilerStep#5")
    evs = [e for e in evs if e["name"] != "test"]
    evs.append(span("gc gen2", "gc", t5 + 20_000, 60_000))
    with _profile(tmp_path, "outlier_gc", evs) as prof:
        causes = {}
        for r in run(prof, "attribution").rows:
            causes[r["cause"]] = causes.get(r["cause"], 0.0) + r["time_us"]
        items = {a.rule: a for a in advise(prof, include_info=True)}
    assert causes["gc"] == pytest.approx(60_000.0)
    assert causes["outlier_step"] == pytest.approx(40_000.0)
    gc = items["sync.gc_pauses"]
    assert gc.estimate_us == 60_000.0 and gc.gain == pytest.approx(60_000 / 180_000)
