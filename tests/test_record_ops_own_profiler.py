"""``aiprof record --ops`` of a job that runs its own ``torch.profiler``
(record/job/collectors/torch_ops.py): torch runs one profiler per process."""

from __future__ import annotations

import json
from pathlib import Path

from aiprof.store import open_profile
from record_support import record_run

JOB = """
import sys, torch, torch.nn as nn
from torch.profiler import profile, schedule
torch.set_num_threads(1)
m = nn.Linear(32, 32)
opt = torch.optim.SGD(m.parameters(), 0.1)

def step():
    m(torch.randn(4, 32)).sum().backward()
    opt.step()
    opt.zero_grad()

for _ in range(6):
    step()
if sys.argv[1] == "plain":
    with profile() as p:
        for _ in range(6):
            step()
    p.export_chrome_trace(sys.argv[2])
else:  # a schedule, its windows exported as they end
    n = []
    def ready(p):
        n.append(1)
        p.export_chrome_trace(sys.argv[2].replace(".json", f"_{len(n)}.json"))
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=1), on_trace_ready=ready) as p:
        for _ in range(6):
            step()
            p.step()
for _ in range(4):
    step()
print("done")
"""


def linear_calls(trace: Path) -> int:
    return sum(1 for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "aten::linear")


def test_a_job_with_its_own_torch_profiler_runs_as_it_would_alone(tmp_path: Path) -> None:
    """The job's profiler ended aiprof's session, and exporting that session at the end
    crashed the job (SIGSEGV, exit 139, its steps and operators lost). Now the job exits
    0 with its own trace whole; aiprof keeps its operators up to the job's profiler and
    says why they end there."""
    for mode in ("plain", "schedule"):
        mine = tmp_path / f"{mode}.json"
        out, rec = record_run(tmp_path, JOB, "--ops", args=(mode, str(mine)), out=f"out_{mode}")
        assert "done" in rec.stdout
        assert "the job started its own torch.profiler" in rec.stderr, rec.stderr
        if mode == "plain":
            assert linear_calls(mine) == 6  # the job's trace: its 6 steps
        else:
            assert linear_calls(tmp_path / "schedule_1.json") == 2  # its one active window
        profile = out / "rank0.aiprof"
        meta = json.loads((profile / "profile.json").read_text())
        assert not meta.get("partial"), meta.get("partial_reason")
        with open_profile(profile) as p:
            ((steps,),) = p.con.execute("SELECT count(*) FROM events WHERE kind = 'step'").fetchall()
            ((ops,),) = p.con.execute("SELECT count(*) FROM events WHERE name = 'aten::linear'").fetchall()
        assert steps == 16, mode
        # aiprof's operators: those before the job's profiler took over, the 6 steps
        # before it began (with a schedule, 7: its first step waits, profiling nothing).
        assert ops == (6 if mode == "plain" else 7), mode
