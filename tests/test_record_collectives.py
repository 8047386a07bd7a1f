"""A 2-rank gloo job recorded in default mode: torch.distributed's collectives become
events, and the ranks view, the communication view and the advice find the slow rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aiprof.advise import evaluate
from aiprof.analysis import Query, run
from aiprof.store import open_profile
from record_support import TWO_RANKS, free_port, record

PY = sys.executable

JOB = (
    TWO_RANKS
    + """m = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
def work(ms):
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1000:
        pass
for i in range(20):
    loss = m(torch.randn(8, 64)).sum()
    opt.zero_grad()
    loss.backward()
    work(20 * (1.3 if rank == 1 else 1.0))  # rank 1 does 30% more work per step
    for p in m.parameters():
        dist.all_reduce(p.grad)
    opt.step()
dist.destroy_process_group()
"""
)


def test_the_slow_rank_of_a_gloo_job_is_found(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = record(tmp_path, JOB, args=(str(free_port()),), name="ddp", out="ddp")
    with open_profile(out) as p:
        ev = p.sql("SELECT rank, name, bytes, args FROM events WHERE kind = 'collective' ORDER BY rank, ts").to_pylist()
        assert len(ev) == 2 * 40 and {e["name"] for e in ev} == {"all_reduce"}
        assert {e["bytes"] for e in ev} == {64 * 64 * 4, 64 * 4}
        args = [json.loads(e["args"]) for e in ev if e["rank"] == 1]
        assert [a["seq"] for a in args] == list(range(40)) and {a["group_size"] for a in args} == {2}
        ranks = {r["rank"]: r for r in run(p, "ranks").rows}
        assert ranks[1]["last_arrivals"] > ranks[0]["last_arrivals"], "rank 1 comes last to the collectives"
        comm = run(p, "communication", Query.parse(["op=all_reduce"])).rows
        assert {r["rank"] for r in comm} == {0, 1} and sum(r["calls"] for r in comm) == 80
        # Past the first steps (where the ranks' start-up differs), rank 0 waits for
        # rank 1 in every all_reduce: its wait shows as collective time.
        wait = {r: sum(c["total_us"] for c in comm if c["rank"] == r and (c["step"] or 0) >= 2) for r in (0, 1)}
        assert wait[0] > wait[1], wait
        v = {x.rule: x for x in evaluate(p, only=["cluster.straggler"])}
    a = v["cluster.straggler"].advice
    assert v["cluster.straggler"].status == "fired" and a is not None and "Rank 1" in a.summary
