"""A 2-rank gloo DDP job recorded in default mode: DDP's gradient all-reduces run in C++
hooks inside backward, so the Python samples see the waiting rank's wait as backward
time. The rank_waits view and cluster.backward_wait find the slow rank from that."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aiprof.advise import cluster, evaluate
from aiprof.analysis import run
from aiprof.store import open_profile
from record_support import SPIN, TWO_RANKS, free_port, record, slow_backward

PY = sys.executable

JOB = (
    TWO_RANKS
    + """from torch.nn.parallel import DistributedDataParallel as DDP
"""
    + SPIN
    + slow_backward(20)
    + """
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
)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    return record(tmp_path_factory.mktemp("ddp"), JOB, "--rate", "200", args=(str(free_port()),), name="ddp", out="ddp")


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
    from kineto_builders import one_step_profile

    with open_profile(one_step_profile(tmp_path)) as p:
        assert run(p, "rank_waits").rows == []
        assert evaluate(p, only=["cluster.backward_wait"])[0].status == "no_data"
