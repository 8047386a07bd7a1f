"""A recording lists the collectors it ran, and says one stopped early only when it did.

``ops`` (torch.profiler's CPU operators) runs when ``--ops`` asks for it. A default
recording runs the device trace in its place (collectors/device_trace.py), listed under
its own name, ``device_trace``; on a machine without an accelerator it never arms, so a
job killed before it stops has lost nothing of it and its profile says nothing of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

PY = sys.executable
TINY = (
    "import torch\ntorch.set_num_threads(1)\n"
    "m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "for _ in range(5):\n    opt.zero_grad(); m(torch.ones(4, 8)).sum().backward(); opt.step()\n"
)
#: The same job, killed (SIGKILL) after a checkpoint: its profile is the last checkpoint's.
KILLED = TINY + "import os, signal, time\ntime.sleep(2.5)\nos.kill(os.getpid(), signal.SIGKILL)\n"


def record(tmp_path: Path, body: str, *flags: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    job = tmp_path / "job.py"
    job.write_text(body)
    out = tmp_path / "run"
    done = subprocess.run(
        [PY, "-m", "aiprof", "record", "-o", str(out), *flags, "--", PY, str(job)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    meta: dict[str, Any] = json.loads((out / "rank0.aiprof" / "profile.json").read_text())
    return done, meta


def test_ops_is_listed_only_when_asked_for_and_a_normal_end_warns_nothing(tmp_path: Path) -> None:
    done, meta = record(tmp_path / "default", TINY)
    assert done.returncode == 0, done.stderr
    collectors = meta["record"]["collectors"]
    assert "ops" not in collectors
    assert collectors["device_trace"] == {"failed": None}
    assert meta["record"]["device_trace"] == "no accelerator that torch can trace"
    assert "stopped early" not in done.stderr
    assert not [w for w in meta["warnings"] if "stopped early" in w]

    done, meta = record(tmp_path / "ops", TINY, "--ops")
    assert done.returncode == 0, done.stderr
    collectors = meta["record"]["collectors"]
    assert collectors["ops"] == {"failed": None} and "device_trace" not in collectors
    assert "stopped early" not in done.stderr
    assert not [w for w in meta["warnings"] if "stopped early" in w]
    assert meta["tables"]["events"] > 0


def test_a_killed_default_recording_says_nothing_of_a_device_trace_that_never_ran(tmp_path: Path) -> None:
    done, meta = record(tmp_path, KILLED)
    assert meta["partial"] is True, done.stderr
    collectors = meta["record"]["collectors"]
    assert "ops" not in collectors and "device_trace" not in collectors
    assert collectors["python"] == {"failed": None}
    assert "stopped early" not in done.stderr
    assert not [w for w in meta["warnings"] if "stopped early" in w]
