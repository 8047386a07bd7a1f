"""``aiprof record`` under the faults of issue 19: what ran is never lost.

Real jobs in real subprocesses: a SIGKILL at 1 s, a segfault, aiprof record itself
killed, an unwritable output, two recordings into one output, a full disk (a small
tmpfs, when running as root). Each checks the profile that results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aiprof.store import open_profile

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
ENV.pop("AIPROF_RECORD_CHECKPOINT_S", None)

#: A job that marks a step every 50 ms; ``then`` runs after ``secs`` seconds.
JOB = """
import os, signal, sys, time
from aiprof.record import mark_step
def work(n):
    return sum(i * i for i in range(n))
t0 = time.monotonic()
while time.monotonic() - t0 < {secs}:
    t1 = time.monotonic()
    while time.monotonic() - t1 < 0.05:
        work(2000)
    mark_step()
{then}
"""


def job(tmp_path: Path, secs: float, then: str = "") -> str:
    p = tmp_path / "job.py"
    p.write_text(JOB.format(secs=secs, then=then))
    return str(p)


def aiprof(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "aiprof", *args], capture_output=True, text=True, timeout=300, env=ENV, **kw)


def meta(path: Path) -> dict[str, Any]:
    return json.loads((path / "profile.json").read_text())


def counts(path: Path) -> dict[str, int]:
    with open_profile(path) as p:
        steps = p.sql("SELECT count(*) AS n FROM events WHERE kind = 'step'").to_pylist()[0]["n"]
        samples = p.sql("SELECT count(*) AS n FROM samples").to_pylist()[0]["n"]
    return {"steps": steps, "samples": samples}


def test_sigkill_at_one_second_keeps_all_but_the_last_second(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rec = aiprof("record", "-o", str(out), "--", PY, job(tmp_path, 1.6, "os.kill(os.getpid(), signal.SIGKILL)"))
    assert rec.returncode == 137, rec.stderr
    prof = out / "rank0.aiprof"
    m = meta(prof)
    assert m["partial"] is True and "killed" in m["partial_reason"]
    c = counts(prof)
    # ~32 steps ran; checkpoints every second keep those up to the last one (>= 1 s).
    assert 10 <= c["steps"] <= 32, c
    assert c["samples"] > 0  # sampled from outside the job: kept to the end
    # The checkpoint's span is reported, not 0 s (item 10).
    clock = m["record"]["clock"]
    assert clock["mono_last"] - clock["mono0"] >= 1e9
    assert " 0.00 s" not in rec.stderr


def test_sigkill_before_any_step_still_leaves_a_profile(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rec = aiprof("record", "-o", str(out), "--", PY, job(tmp_path, 0.3, "os.kill(os.getpid(), signal.SIGKILL)"))
    assert rec.returncode == 137, rec.stderr
    prof = out / "rank0.aiprof"
    assert meta(prof)["partial"] is True
    assert counts(prof)["samples"] > 0
    assert not list(out.glob(".*.raw")), "the raw folder became the profile"


def test_a_segfaulting_job_leaves_its_profile(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rec = aiprof("record", "-o", str(out), "--", PY, job(tmp_path, 0.5, "import ctypes; ctypes.string_at(0)"))
    assert rec.returncode == 139, rec.stderr
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is True
    assert counts(out / "rank0.aiprof")["samples"] > 0


def test_aiprof_record_killed_then_recover(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = tmp_path / "done"
    script = job(tmp_path, 2.0, f"open({str(done)!r}, 'w').close()")
    rec = subprocess.Popen(
        [PY, "-m", "aiprof", "record", "-o", str(out), "--", PY, script],
        env=ENV,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    time.sleep(1.0)
    rec.send_signal(signal.SIGKILL)  # aiprof record itself dies; the job runs on
    rec.wait(timeout=60)
    deadline = time.monotonic() + 120
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert done.exists()
    (raw,) = out.glob(".rank0.aiprof*.raw")
    while time.monotonic() < deadline and json.loads((raw / "manifest.json").read_text()).get("partial"):
        time.sleep(0.1)  # the job's own stop writes its final raw data
    assert not (out / "rank0.aiprof").exists()
    r = aiprof("report", str(out))
    assert r.returncode == 2 and "recover" in r.stderr, r.stderr
    got = aiprof("recover", str(out))
    assert got.returncode == 0, got.stderr
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is True and "aiprof record did not finish" in m["partial_reason"]
    assert counts(out / "rank0.aiprof")["steps"] >= 30  # every step of the job: it ran to its end
    assert aiprof("report", str(out)).returncode == 0


@pytest.mark.parametrize("kind", ["file", "proc"])
def test_an_unwritable_output_is_refused_before_the_job_runs(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "plain-file"
    target.write_text("x")
    out = str(target) if kind == "file" else "/proc/aiprof-cannot-write-here"
    ran = tmp_path / "ran"
    rec = aiprof("record", "-o", out, "--", PY, "-c", f"open({str(ran)!r}, 'w').close()")
    assert rec.returncode == 2, rec.stderr
    assert rec.stderr.strip().splitlines()[-1].startswith(f"aiprof: error: cannot record into {out}")
    assert not ran.exists()


def test_a_second_record_on_the_same_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = subprocess.Popen(
        [PY, "-m", "aiprof", "record", "-o", str(out), "--", PY, job(tmp_path, 3.0)],
        env=ENV,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (out / ".aiprof-record.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    ran = tmp_path / "second-ran"
    second = aiprof("record", "-o", str(out), "--", PY, "-c", f"open({str(ran)!r}, 'w').close()")
    assert second.returncode == 2, second.stderr
    assert f"pid {first.pid}" in second.stderr and "another aiprof record" in second.stderr
    assert not ran.exists()
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is False and m["record"]["argv"][-1].endswith("job.py")
    # Free again once the first one is done.
    assert aiprof("record", "-o", str(out), "--", PY, "-c", "pass").returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_said_and_leaves_no_temporary_files(tmp_path: Path, small_disk: Path) -> None:
    out = small_disk / "out"
    fill = (
        f"f = open({str(small_disk / 'filler')!r}, 'wb')\n"
        "try:\n"
        "    while True:\n"
        "        f.write(b'x' * 65536); f.flush()\n"
        "except OSError:\n"
        "    pass\n"
    )
    rec = aiprof("record", "-o", str(out), "--", PY, job(tmp_path, 1.5, fill))
    assert rec.returncode == 2, rec.stderr  # the job succeeded, its profile could not be written
    assert "the disk is full" in rec.stderr and "aiprof recover" in rec.stderr
    assert not [p for p in small_disk.rglob("*") if ".tmp" in p.name]
    (small_disk / "filler").unlink()
    (raw,) = out.glob(".rank0.aiprof*.raw")
    got = aiprof("import", str(raw))  # the same as aiprof recover OUT, for one raw folder
    assert got.returncode == 0, got.stderr
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is True
    # The steps of the checkpoints written before the disk filled up (one a second).
    assert counts(out / "rank0.aiprof")["steps"] >= 10


@pytest.mark.parametrize("table", [bytes([0xE8]), bytes([0xF0]), bytes([0xE8, 0x40])])
def test_a_line_table_cut_inside_an_entry_reads_without_error(table: bytes) -> None:
    """Item 14: the outside sampler read a code object's line table as it was freed; an
    entry whose varint the table cut off raised IndexError and stopped the sampler."""
    from aiprof.record.pystate import CodeInfo, line_of

    info = CodeInfo("f", "f.py", 10, table)
    assert line_of(info, 0) == 10  # the entry's line delta is unknown: the first line
    assert line_of(info, 5) == 0  # past the table: no line, as for any instruction it does not cover
