"""Default recordings trace what the accelerator ran (collectors.device_trace).

This machine has no GPU: the CUDA capture itself is checked by scripts/gpu_check.sh on
one. What runs here for real: the decision on a machine without an accelerator, the
switch, and the import hook that arms the collector once the job imports torch, with
the schedule's steps replayed (the activity list is the one thing swapped: the CPU
activity stands in for a device's, since it is the only one torch can record here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.store import open_profile

PY = sys.executable


def aiprof(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "aiprof", *args], capture_output=True, text=True, timeout=300)


def meta(path: Path) -> dict[str, Any]:
    return json.loads((path / "profile.json").read_text())


TORCH_JOB = (
    "import torch\ntorch.set_num_threads(1)\n"
    "m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "for _ in range(4):\n    opt.zero_grad(); m(torch.ones(4, 8)).sum().backward(); opt.step()\n"
)


@pytest.mark.parametrize(
    "body,flags,wanted,status",
    [
        (TORCH_JOB, [], True, "no accelerator that torch can trace"),
        (TORCH_JOB, ["--no-device-trace"], False, None),
        ("print('no torch here')\n", [], True, "torch was never imported"),
    ],
)
def test_default_recording_says_what_the_device_trace_captured(
    tmp_path: Path, body: str, flags: list[str], wanted: bool, status: str | None
) -> None:
    if "torch" in body:
        pytest.importorskip("torch")
    job = tmp_path / "job.py"
    job.write_text(body)
    out = tmp_path / "run"
    rec = aiprof("record", "-o", str(out), "--no-python", *flags, "--", PY, str(job))
    assert rec.returncode == 0, rec.stderr
    m = meta(out / "rank0.aiprof")
    assert m["record"]["options"]["device_trace"] is wanted
    assert m["record"]["device_trace"] == status
    assert not any("clock-sync" in w for w in m.get("warnings", []))
    with open_profile(out / "rank0.aiprof") as p:
        kinds = {k for (k,) in p.con.execute("select distinct kind from events").fetchall()}
    assert not kinds & {"kernel", "memcpy", "memset", "cpu_op"}


ARMED_JOB = """
import sys
from aiprof.record import Profiler, mark_step, schedule
from aiprof.record.job.collectors import torch_ops

def cpu_only():
    from torch.profiler import ProfilerActivity
    return [ProfilerActivity.CPU]

torch_ops.device_activities = cpu_only
prof = Profiler(sys.argv[1], host=["system"], device=False, schedule=schedule(wait=1, warmup=1, active=2))
prof.start()
assert "torch" not in sys.modules
mark_step()
mark_step()  # steps 0 and 1 end before torch is imported: replayed when it is
import torch
torch.set_num_threads(1)
for i in range(2, 10):
    with torch.profiler.record_function(f"iteration {i}"):
        torch.ones(8, 8) @ torch.ones(8, 8)
    mark_step()
prof.stop()
"""


def test_the_collector_arms_after_import_torch_and_keeps_the_schedule(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    job = tmp_path / "job.py"
    job.write_text(ARMED_JOB)
    out = tmp_path / "run.aiprof"
    done = subprocess.run([PY, str(job), str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert meta(out)["record"]["device_trace"] == "captured: CPU"
    with open_profile(out) as p:
        got = sorted(n for (n,) in p.con.execute("select name from events where name like 'iteration %'").fetchall())
    # torch.profiler's own schedule on the same step numbers decides which iterations are kept.
    theirs = torch.profiler.schedule(wait=1, warmup=1, active=2)
    active = {torch.profiler.ProfilerAction.RECORD, torch.profiler.ProfilerAction.RECORD_AND_SAVE}
    expected = sorted(f"iteration {i}" for i in range(2, 10) if theirs(i) in active)
    assert got == expected and got
