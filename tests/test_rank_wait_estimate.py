"""The waits of ranks in lockstep (analysis/phases.py ``rank_waits``) on built 2-rank
profiles: only DistributedDataParallel ranks wait for each other, and the all-reduce's
own transfer, common to both ranks, is not a wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiprof.advise import evaluate
from aiprof.analysis import run
from aiprof.store import ProfileWriter, open_profile

TORCH = "/venv/lib/python3.11/site-packages/torch"
MS, STEPS = 1_000_000, 10
# 0 main; 1 Module._call_impl (forward); 2 DDP's forward under it; 3 Tensor.backward.
FRAMES = {
    "frame_id": [0, 1, 2, 3],
    "parent": [None, 0, 1, 0],
    "function": ["main", "Module._call_impl", "DistributedDataParallel.forward", "Tensor.backward"],
    "file": [
        "/job/train.py",
        f"{TORCH}/nn/modules/module.py",
        f"{TORCH}/nn/parallel/distributed.py",
        f"{TORCH}/_tensor.py",
    ],
    "line": [10, 1500, 1600, 600],
}


def build(
    tmp: Path,
    micro: dict[int, int],
    wait_ms: dict[int, int],
    ddp: bool = True,
    cpu: tuple[dict[int, float], float] | None = None,
) -> Path:
    """STEPS steps per rank, a sample every ms. Each micro-batch: 10 ms forward, 20 ms
    backward; a step's last backward also holds the all-reduce's 10 ms transfer and the
    rank's wait for the other (``wait_ms``). ``cpu``: each rank's proc_cpu and the host's
    sys_cpu (%), on a host of 2 cores."""
    fwd = 2 if ddp else 1
    events: dict[str, list[object]] = {k: [] for k in ("rank", "device_type", "device", "pid", "tid", "kind")}
    events |= {"name": [], "ts": [], "dur": [], "step": []}
    frames: dict[str, list[object]] = {k: [] for k in (*FRAMES, "rank")}
    samples: dict[str, list[object]] = {k: [] for k in ("rank", "ts", "pid", "tid", "stack_id")}
    for r, n in micro.items():
        for k, v in FRAMES.items():
            frames[k] += v
        frames["rank"] += [r] * len(FRAMES["frame_id"])
        plan = [fwd] * 10 + [3] * 20
        step = plan * (n - 1) + [fwd] * 10 + [3] * (20 + 10 + wait_ms[r])
        for s in range(STEPS):
            t0 = s * len(step) * MS
            for k, v in zip(events, (r, "cpu", -1, 1, 1, "step", f"step#{s}", t0, len(step) * MS, s), strict=True):
                events[k].append(v)
            for i, stack in enumerate(step):
                for k, v in zip(samples, (r, t0 + i * MS + 1, 1, 1, stack), strict=True):
                    samples[k].append(v)
    with ProfileWriter(tmp) as w:
        w.append("events", events)
        w.append("frames", frames)
        w.append("samples", samples)
        if cpu:
            w.append("counters", _counters(*cpu))
    return tmp.with_suffix(".aiprof")


def waits(path: Path) -> dict[int, dict[str, float]]:
    with open_profile(path) as p:
        return {r["rank"]: r for r in run(p, "rank_waits").rows}


def test_the_transfer_common_to_the_ranks_is_not_a_wait(tmp_path: Path) -> None:
    # Rank 1 runs 3 micro-batches (100 ms a step), rank 0 one and waits 60 ms for it.
    # The backwards before a step's last one hold no all-reduce: k = 20 / 10 = 2. Excess
    # backward per step: rank 1 10 ms (the transfer), rank 0 70 ms; its wait is 60 ms.
    # (The lowest ratio among the ranks, 70 / 30, would give rank 0 66.7 ms.)
    path = build(tmp_path / "slow", {0: 1, 1: 3}, {0: 60, 1: 0})
    rows = waits(path)
    assert rows[1]["wait_us"] == 0.0
    assert rows[0]["wait_us"] == pytest.approx(STEPS * 60_000, rel=1e-3)
    assert rows[0]["wait_pct"] == pytest.approx(60.0, rel=1e-3)
    with open_profile(path) as p:
        v = evaluate(p, only=["cluster.backward_wait"])[0]
    assert v.status == "fired" and v.advice is not None
    assert (v.advice.evidence["slowest_rank"], v.advice.evidence["waiting_ranks"]) == (1, [0])
    # Balanced (2 + 2 micro-batches) a step takes 2 x 30 + 10 = 70 ms, not 100: 30% of
    # both ranks' time, the mean wait.
    assert v.advice.gain == pytest.approx(0.30, rel=1e-3)


def test_balanced_ranks_do_not_wait(tmp_path: Path) -> None:
    path = build(tmp_path / "even", {0: 2, 1: 2}, {0: 0, 1: 0})
    assert {r: row["wait_us"] for r, row in waits(path).items()} == {0: 0.0, 1: 0.0}
    with open_profile(path) as p:
        assert evaluate(p, only=["cluster.backward_wait"])[0].status == "silent"


def test_ranks_without_ddp_are_not_waiting_for_each_other(tmp_path: Path) -> None:
    # The same two ranks' samples without DistributedDataParallel (two independent
    # jobs, or ranks that never all-reduce gradients): rank 0's long backward is its own.
    path = build(tmp_path / "noddp", {0: 1, 1: 3}, {0: 60, 1: 0}, ddp=False)
    assert waits(path) == {}
    with open_profile(path) as p:
        v = evaluate(p, only=["cluster.backward_wait"])[0]
    assert v.status == "no_data"


def _counters(proc: dict[int, float], sys_cpu: float) -> dict[str, list[object]]:
    """The recorder's host counters: 2 cores, each rank's proc_cpu, the host's sys_cpu."""
    rows: dict[str, list[object]] = {k: [] for k in ("rank", "device_type", "device", "ts", "metric", "value")}
    rows["unit"] = []
    for r, p in proc.items():
        for metric, dev, v in [
            ("cpu_util.core0", 0, sys_cpu),
            ("cpu_util.core1", 0, sys_cpu),
            ("proc_cpu", -1, p),
            ("sys_cpu", -1, sys_cpu),
        ]:
            for t in range(0, STEPS * 100 * MS, 25 * MS):
                for k, x in zip(rows, (r, "cpu", dev, t, metric, v, "%"), strict=True):
                    rows[k].append(x)
    return rows


def test_on_a_busy_host_balancing_is_bounded_by_the_cpu(tmp_path: Path) -> None:
    from aiprof.advise.base import Context

    # The 3 + 1 job of the first test, on a CPU host of 2 cores that other work keeps
    # full: the slow rank ran at 0.4 of a core, the waiting one at 0.4 x 40% = 0.16
    # (it computes 40 of 100 ms). The others: 2 - 0.56 = 1.44 cores, 3.6 threads as busy
    # as the slow rank. Balanced, 5.6 threads share 2 cores (0.357 each) and each rank
    # runs the mean work, 0.28 cores x T: a step of 0.784 T, 21.6% saved, not the 30%
    # the waits alone give.
    path = build(tmp_path / "busy", {0: 1, 1: 3}, {0: 60, 1: 0}, cpu=({0: 16.0, 1: 40.0}, 100.0))
    with open_profile(path) as p:
        assert Context(p).cores() == {0: 1, 1: 1}  # the host's 2 cores, shared by its ranks
        v = evaluate(p, only=["cluster.backward_wait"])[0]
    assert v.status == "fired" and v.advice is not None
    assert v.advice.evidence["step_share_lost_pct"] == pytest.approx(30.0, rel=1e-3)
    bound = 1 - 0.28 / (2 / (1.44 / 0.4 + 2))
    assert v.advice.evidence["cpu_bound_pct"] == pytest.approx(100 * bound, rel=1e-3)
    assert v.advice.gain == pytest.approx(bound, rel=1e-3)
    assert f"at most {100 * bound:.1f}% with the CPU the host gave the ranks" in v.advice.summary


def test_on_an_idle_host_the_cpu_leaves_the_waits_gain(tmp_path: Path) -> None:
    # The slow rank had a core (100%), the waiting one computed 40% of the step; nothing
    # else ran (sys = 1.4 of 2 cores). Balanced, both ranks get a core: the bound,
    # 1 - mean(p) = 30%, is the waits' own gain.
    path = build(tmp_path / "idle", {0: 1, 1: 3}, {0: 60, 1: 0}, cpu=({0: 40.0, 1: 100.0}, 70.0))
    with open_profile(path) as p:
        v = evaluate(p, only=["cluster.backward_wait"])[0]
    assert v.advice is not None
    assert v.advice.evidence["cpu_bound_pct"] == pytest.approx(30.0, rel=1e-3)
    assert v.advice.gain == pytest.approx(0.30, rel=1e-3)
    assert "at most" not in v.advice.summary
