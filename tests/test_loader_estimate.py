"""python.data_loading's estimate on built profiles: the CPU the host had to give (the
recorder's proc_cpu / sys_cpu counters inside the steps) and a loader that already has
workers (samples under the multi-process iterator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiprof.advise import evaluate
from aiprof.analysis import run
from aiprof.store import ProfileWriter, open_profile

TORCH = "/venv/lib/python3.11/site-packages/torch"
STEPS, STEP_NS, EVERY_NS = 10, 100_000_000, 1_000_000
# main -> DataLoader.__next__ -> (workers: the multi-process iterator ->) Dataset.__getitem__;
# main -> Module._call_impl (forward).
FRAMES = {
    "frame_id": [0, 1, 2, 3, 4],
    "parent": [None, 0, 1, 0, 1],
    "function": [
        "main",
        "_BaseDataLoaderIter.__next__",
        "Expensive.__getitem__",
        "Module._call_impl",
        "_MultiProcessingDataLoaderIter._next_data",
    ],
    "file": [
        "/job/train.py",
        f"{TORCH}/utils/data/dataloader.py",
        "/job/train.py",
        f"{TORCH}/nn/modules/module.py",
        f"{TORCH}/utils/data/dataloader.py",
    ],
    "line": [10, 700, 20, 1500, 1400],
    "rank": [0] * 5,
}


def build(tmp: Path, load_share: float, proc_cpu: float, sys_cpu: float, workers: bool = False) -> Path:
    """STEPS steps of 100 ms, a sample every ms: ``load_share`` of them in the loader's
    __getitem__ (or its wait for workers), the rest in forward; 2 cores; the counters
    at a constant proc_cpu (% of a core) and sys_cpu (% of the host)."""
    per = STEP_NS // EVERY_NS
    stacks = [(4 if workers else 2) if k < round(load_share * per) else 3 for _ in range(STEPS) for k in range(per)]
    ts = [s * STEP_NS + k * EVERY_NS + 1 for s in range(STEPS) for k in range(per)]
    cts = list(range(0, STEPS * STEP_NS, STEP_NS // 4))
    counters: dict[str, list[object]] = {k: [] for k in ("rank", "device_type", "device", "ts", "metric", "value")}
    counters["unit"] = []
    for metric, dev, value in [
        ("cpu_util.core0", 0, sys_cpu),
        ("cpu_util.core1", 0, sys_cpu),
        ("proc_cpu", -1, proc_cpu),
        ("sys_cpu", -1, sys_cpu),
    ]:
        for t in cts:
            for k, v in zip(counters, (0, "cpu", dev, t, metric, value, "%"), strict=True):
                counters[k].append(v)
    with ProfileWriter(tmp) as w:
        w.append(
            "events",
            {
                "rank": [0] * STEPS,
                "device_type": ["cpu"] * STEPS,
                "device": [-1] * STEPS,
                "pid": [1] * STEPS,
                "tid": [1] * STEPS,
                "kind": ["step"] * STEPS,
                "name": [f"step#{s}" for s in range(STEPS)],
                "ts": [s * STEP_NS for s in range(STEPS)],
                "dur": [STEP_NS] * STEPS,
                "step": list(range(STEPS)),
            },
        )
        w.append("frames", FRAMES)
        w.append(
            "samples", {"rank": [0] * len(ts), "ts": ts, "pid": [1] * len(ts), "tid": [1] * len(ts), "stack_id": stacks}
        )
        w.append("counters", counters)
    return tmp.with_suffix(".aiprof")


def loader(path: Path) -> tuple[str, float]:
    with open_profile(path) as p:
        v = evaluate(p, only=["python.data_loading"])[0]
    return v.status, v.advice.estimate_us if v.advice else 0.0


def test_an_idle_host_gives_the_loading_every_core(tmp_path: Path) -> None:
    # 80 of 100 ms loading, the job alone on 2 cores (one busy): 2 workers bring a step
    # to max(R, T / 2) = 50 ms, 50 ms saved a step.
    status, est = loader(build(tmp_path / "idle", 0.8, proc_cpu=100.0, sys_cpu=50.0))
    assert status == "fired"
    assert est == pytest.approx(STEPS * 50_000, rel=1e-6)


def test_a_busy_host_gives_workers_nothing_and_asks_for_cheaper_items(tmp_path: Path) -> None:
    # The job got 0.25 of a core, the host was full: workers would only share the same
    # busy cores (an A/B on such a host gained nothing), so they save nothing. The
    # loading runs the Dataset's own Python (80 of each 100 ms step, under the loader):
    # making that per-item work cheaper (vectorised over the batch) is the fix, at most
    # that time saved. (Before: the workers' "fair share" of the busy cores, 58.3 ms a
    # step, and a num_workers=2 snippet.)
    from aiprof.advise.python_time import VECTORISE_FIX

    path = build(tmp_path / "busy", 0.8, proc_cpu=25.0, sys_cpu=100.0)
    with open_profile(path) as p:
        v = evaluate(p, only=["python.data_loading"])[0]
        (row,) = run(p, "loader_cpu").rows
    a = v.advice
    assert v.status == "fired" and a is not None
    assert a.evidence["overlap_us"] == 0.0 and a.evidence["per_item_us"] == pytest.approx(STEPS * 80_000, rel=1e-6)
    assert a.estimate_us == pytest.approx(STEPS * 80_000, rel=1e-6)
    assert a.fix == VECTORISE_FIX and "num_workers" not in a.snippets["pytorch"]
    assert "collate_fn=your_batched_collate" in a.snippets["pytorch"]
    assert "make it cheaper instead" in a.summary
    assert (row["loading_samples"], row["worker_samples"]) == (STEPS * 80, 0)
    assert (row["proc_cpu_pct"], row["sys_cpu_pct"]) == (25.0, 100.0)


def test_a_host_with_some_idle_cpu_gives_workers_only_that(tmp_path: Path) -> None:
    # The job at 0.5 of a core, the host 75% busy on 2 cores: 0.5 core idle. With workers
    # the job can use 0.5 + 0.5 = 1 core at most, so a step of 0.5 cores' work x 100 ms
    # takes 50 ms (R = 20 ms is less): 50 ms saved a step, not the fair share of the
    # other processes' cores.
    status, est = loader(build(tmp_path / "half", 0.8, proc_cpu=50.0, sys_cpu=75.0))
    assert status == "fired"
    assert est == pytest.approx(STEPS * 50_000, rel=1e-6)


def test_a_loader_with_workers_on_busy_cores_gets_no_advice(tmp_path: Path) -> None:
    # After the fix: the main process waits for its workers 80% of the step, and the
    # host's cores are all busy; more workers have no core to run on.
    path = build(tmp_path / "after", 0.8, proc_cpu=20.0, sys_cpu=100.0, workers=True)
    assert loader(path) == ("silent", 0.0)
    with open_profile(path) as p:
        (row,) = run(p, "loader_cpu").rows
    assert row["worker_samples"] == row["loading_samples"] == STEPS * 80


def test_a_loader_with_workers_and_idle_cores_may_use_them(tmp_path: Path) -> None:
    # Workers that leave 40% of the host idle: more of them save at most 40 ms a step.
    status, est = loader(build(tmp_path / "idle_w", 0.8, proc_cpu=20.0, sys_cpu=60.0, workers=True))
    assert status == "fired"
    assert est == pytest.approx(STEPS * 40_000, rel=1e-6)


WAITING_LOADER = """
import time, torch, torch.nn as nn
from torch.utils.data import Dataset, DataLoader
torch.set_num_threads(1)

class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.03)  # a slow read: the worker waits, it does not compute
        return torch.randn(32), i % 4

if __name__ == "__main__":
    model = nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for x, y in DataLoader(Slow(), batch_size=4, num_workers=2, persistent_workers=True):
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
"""


def test_workers_that_wait_are_not_bounded_by_the_idle_cpu(tmp_path: Path) -> None:
    """A loader whose 2 workers sleep in __getitem__: the advice had bounded more workers
    by the host's idle CPU (11.8% promised on a busy host, where 8 workers ran 66%
    faster) and proposed the num_workers the job already had. The recorder now reads its
    children's CPU (children_cpu): the workers hardly used any while the steps waited,
    so more of them overlap their waits, and the gain is the wait."""
    from record_support import record

    out = record(tmp_path, WAITING_LOADER)
    profile = out / "rank0.aiprof"
    with open_profile(profile) as p:
        (row,) = run(p, "loader_cpu").rows
        items = {v.rule: v for v in evaluate(p)}
        ((steps_us,),) = p.con.execute("SELECT sum(dur) / 1e3 FROM events WHERE kind = 'step'").fetchall()
    assert row["worker_samples"] > 0.8 * row["loading_samples"] > 0
    assert row["children_cpu_pct"] is not None and row["children_cpu_pct"] < 50.0, row
    a = items["python.data_loading"].advice
    assert a is not None
    assert "they wait (files, network, sleep) rather than compute" in a.summary
    assert a.fix.startswith("The DataLoader's workers wait") and "num_workers=16" in next(iter(a.snippets.values()))
    # The gain is the loading's wait: most of the steps' time (each step waits ~60 ms for
    # two items per worker), not a share bounded by the host's idle cores.
    assert a.estimate_us >= 0.7 * steps_us, (a.estimate_us, steps_us)


def test_the_input_rules_give_waiting_workers_the_same_fix(tmp_path: Path) -> None:
    """Recorded with --ops, the same job's DataLoader spans fire the input.* rules: they
    proposed DataLoader workers "as many as the host has cores to spare" (the 2 it had),
    as python.data_loading did before the workers' CPU was read. Waiting workers get
    more workers than cores from them too, in python.data_loading's words."""
    from aiprof.advise.python_time import WAITING_WORKERS_FIX, WAITING_WORKERS_PT
    from record_support import record

    out = record(tmp_path, WAITING_LOADER, "--ops")
    with open_profile(out / "rank0.aiprof") as p:
        (row,) = run(p, "loader_cpu").rows
        items = {v.rule: v for v in evaluate(p)}
    assert row["children_cpu_pct"] is not None and row["children_cpu_pct"] < 50.0, row
    fired = [items[r].advice for r in ("input.dataloader_share", "input.dataloader_per_step")]
    assert all(a is not None for a in fired), {r: items[r].status for r in items if r.startswith("input.")}
    for a in fired:
        assert a is not None and a.fix == WAITING_WORKERS_FIX and a.snippets == {"pytorch": WAITING_WORKERS_PT}
        assert "they wait (files, network, sleep) rather than compute" in a.summary
