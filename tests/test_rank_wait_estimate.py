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


def build(tmp: Path, micro: dict[int, int], wait_ms: dict[int, int], ddp: bool = True) -> Path:
    """STEPS steps per rank, a sample every ms. Each micro-batch: 10 ms forward, 20 ms
    backward; a step's last backward also holds the all-reduce's 10 ms transfer and the
    rank's wait for the other (``wait_ms``)."""
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
