"""A 2-rank gloo DDP job recorded in default mode: DDP's gradient all-reduces run in C++
hooks inside backward, so the Python samples see the waiting rank's wait as backward
time. The rank_waits view and cluster.backward_wait find the slow rank from that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aiprof.advise import cluster, evaluate
from aiprof.analysis import run
from aiprof.store import open_profile
from test_record_collectives import free_port

PY = sys.executable

JOB = """
import os, subprocess, sys, time
if "RANK" not in os.environ:
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
    ps = [subprocess.Popen([sys.executable, __file__], env={**env, "RANK": str(r)}) for r in range(2)]
    sys.exit(max(p.wait() for p in ps))
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()

def spin(ms):
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1000:
        pass

class Spin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x
    @staticmethod
    def backward(ctx, g):
        spin(20)
        return g

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 4)
    def forward(self, x):
        spin(10)
        return Spin.apply(self.lin(x))

model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
micro = 1 if rank == 0 else 3  # rank 1 has three times the work
for i in range(25):
    opt.zero_grad()
    for m in range(micro):
        if m < micro - 1:
            with model.no_sync():
                model(torch.ones(2, 16)).sum().backward()
        else:
            model(torch.ones(2, 16)).sum().backward()
    opt.step()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("ddp")
    script = tmp / "ddp.py"
    script.write_text(JOB)
    out = tmp / "ddp"
    rec = subprocess.run(
        [PY, "-m", "aiprof", "record", "--rate", "200", "-o", str(out), "--", PY, str(script), str(free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rec.returncode == 0, rec.stderr
    return out


def test_the_waiting_rank_waits_in_backward(ddp: Path) -> None:
    with open_profile(ddp) as p:
        rows = {r["rank"]: r for r in run(p, "rank_waits").rows}
    assert set(rows) == {0, 1}
    # Rank 1 sets the reference ratio (20 ms of backward per 10 ms of forward, plus the
    # framework's own work) and waits for no one; rank 0 runs one micro-batch of rank 1's
    # three and waits the rest, in backward (about 60 of 90 ms a step on a quiet machine;
    # on a loaded one the framework's work, the same on both ranks, takes a larger share).
    assert rows[1]["wait_us"] == 0.0
    assert 1.0 < rows[1]["backward_per_forward"] < 3.0
    assert rows[0]["backward_per_forward"] > 1.2 * rows[1]["backward_per_forward"]
    assert 10.0 < rows[0]["wait_pct"] < 85.0, rows[0]


def test_backward_wait_names_the_slow_rank_and_stays_silent_just_below(
    ddp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_profile(ddp) as p:
        v = evaluate(p, only=["cluster.backward_wait"])[0]
        a = v.advice
        assert v.status == "fired" and a is not None
        assert a.evidence["slowest_rank"] == 1 and a.evidence["waiting_ranks"] == [0]
        # Rank 1's costliest line is in the job (a spin of its forward or backward).
        assert a.evidence["file"].endswith("ddp.py") and "Rank 1 is the slow rank" in a.summary
        # Balanced, each rank runs two micro-batches: the job gains the mean wait (a third
        # of the step on a quiet machine); the gain is a share of both ranks' time.
        assert 5.0 < a.evidence["step_share_lost_pct"] < 45.0
        assert 0 < a.gain <= a.evidence["step_share_lost_pct"] / 100 + 1e-4  # the evidence is rounded
        monkeypatch.setattr(cluster, "WAIT_SHARE", a.evidence["max_wait_pct"] / 100 + 0.001)
    with open_profile(ddp) as p:
        assert evaluate(p, only=["cluster.backward_wait"])[0].status == "silent"


def test_one_rank_has_no_waits(tmp_path: Path) -> None:
    from aiprof.importers import import_paths
    from kineto_builders import span, write_trace

    f = write_trace(tmp_path / "t.json", [span("ProfilerStep#1", "user_annotation", 0, 1000)])
    out, _ = import_paths([f], tmp_path / "t.aiprof")
    with open_profile(out) as p:
        assert run(p, "rank_waits").rows == []
        assert evaluate(p, only=["cluster.backward_wait"])[0].status == "no_data"
