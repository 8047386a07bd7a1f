"""``aiprof export --format speedscope`` on a real recording made here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aiprof.store import open_profile

PY = sys.executable
SCRIPT = """
import time

def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def middle(n):
    return leaf(n) + leaf(n // 2)

def spin():
    t = time.perf_counter()
    while time.perf_counter() - t < 0.002:
        pass

for _ in range(120):
    middle(20000)
    spin()
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rec")
    (d / "work.py").write_text(SCRIPT)
    out = d / "rec.aiprof"
    r = subprocess.run(
        [PY, "-m", "aiprof", "record", "-o", str(out), "--", PY, str(d / "work.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return out


def test_speedscope_file_holds_every_sample(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "rec.speedscope.json"
    r = subprocess.run(
        [PY, "-m", "aiprof", "export", str(recorded), "--format", "speedscope", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    with open_profile(recorded) as p:
        ((n, threads),) = p.con.execute("SELECT count(*), count(DISTINCT (rank, pid, tid)) FROM samples").fetchall()
    assert n > 20
    assert len(doc["profiles"]) == threads
    total = 0
    for prof in doc["profiles"]:
        assert prof["type"] == "sampled" and prof["unit"] == "nanoseconds"
        assert len(prof["samples"]) == len(prof["weights"])
        assert prof["endValue"] - prof["startValue"] >= sum(prof["weights"])
        for stack in prof["samples"]:
            assert stack and all(0 <= i < len(frames) for i in stack)
        total += len(prof["samples"])
    assert total == n  # nothing recorded is dropped
    # Root first: the script's functions sit under <module>, leaf under middle.
    names = [[frames[i]["name"] for i in s] for p in doc["profiles"] for s in p["samples"]]
    with_leaf = [s for s in names if s[-1] == "leaf"]
    # A walk read while the sampler was preempted is read again (test_record_stacks_outside:
    # test_a_walk_that_read_a_returned_frame_is_not_kept); a stack that never ran could now
    # only come from the sampler preempted at three reads in a row: nearly every sample.
    under_middle = [s for s in with_leaf if s[-2] == "middle"]
    assert with_leaf and len(under_middle) >= 0.9 * len(with_leaf), [
        s[-3:] for s in with_leaf if s not in under_middle
    ][:5]
    assert any(s[-1] == "spin" for s in names)


def test_a_profile_without_samples_is_a_clear_error(shared_data: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [
            PY,
            "-m",
            "aiprof",
            "export",
            str(shared_data / "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
            "--format",
            "speedscope",
            "-o",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "no Python stack samples" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.json").exists()
