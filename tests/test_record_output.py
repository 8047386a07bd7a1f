"""``aiprof record`` never replaces an earlier recording unasked.

An output that holds a recording (its profiles, or the raw folders of one whose
``aiprof record`` was killed) is refused with one line and exit 2 before the job runs;
``--force`` replaces that recording and nothing else in the folder; a run without
``-o`` gets a folder of its own. Real recordings of short jobs in real subprocesses;
each job writes a marker file, so a refused one is seen not to have run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aiprof.record.launcher.output_guard import LOCK_NAME

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
ENV.pop("AIPROF_RECORD_CHECKPOINT_S", None)

#: Two ranks as a launcher starts them (tests/test_record_cli.py), then a marker file.
TWO_RANKS = """
import os, subprocess, sys
child = "import sys; sum(i * i for i in range(20000)); sys.exit(0)"
procs = [subprocess.Popen([sys.executable, "-c", child], env={{**os.environ, "RANK": str(r), "WORLD_SIZE": "2"}})
         for r in range(2)]
code = max(p.wait() for p in procs)
open({marker!r}, "w").close()
sys.exit(code)
"""

#: A job that kills the aiprof record that runs it, then marks steps on and ends: the
#: raw folder it leaves is an unfinished recording (``aiprof recover`` finishes it).
ORPHANED = """
import os, signal, time
from aiprof.record import mark_step
for _ in range(5):
    time.sleep(0.02)
    mark_step()
os.kill(os.getppid(), signal.SIGKILL)
for _ in range(5):
    time.sleep(0.02)
    mark_step()
open({marker!r}, "w").close()
"""


def aiprof(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "aiprof", *args], capture_output=True, text=True, timeout=300, env=ENV, **kw)


def marker_job(marker: Path) -> list[str]:
    """``python -c`` that creates ``marker``: it exists once the job ran."""
    return [PY, "-c", f"open({str(marker)!r}, 'w').close()"]


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by relative path, with its bytes (not the lock file
    a killed aiprof record leaves, unlocked: the next one takes it and removes it)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def meta(profile: Path) -> dict[str, Any]:
    m: dict[str, Any] = json.loads((profile / "profile.json").read_text())
    return m


def one_error(rec: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused record printed (exit 2, no traceback)."""
    assert rec.returncode == 2, rec.stderr
    lines = rec.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiprof: error: "), rec.stderr
    return lines[0].removeprefix("aiprof: error: ")


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real earlier recording: the two profiles of a launcher's two ranks."""
    d = tmp_path_factory.mktemp("earlier")
    job = d / "job.py"
    job.write_text(TWO_RANKS.format(marker=str(d / "ran")))
    rec = aiprof("record", "-o", str(d / "out"), "--", PY, str(job))
    assert rec.returncode == 0, rec.stderr
    assert sorted(p.name for p in (d / "out").iterdir()) == ["rank0.aiprof", "rank1.aiprof"]
    return d / "out"


@pytest.mark.parametrize("name", ["out", "run.aiprof"])
def test_an_earlier_recording_is_refused_before_the_job_runs_and_kept(tmp_path: Path, earlier: Path, name: str) -> None:
    out = tmp_path / "runs" / name
    if name.endswith(".aiprof"):  # -o NAME.aiprof: one profile, exactly there
        shutil.copytree(earlier / "rank0.aiprof", out)
    else:
        shutil.copytree(earlier, out)
        (out / "notes.txt").write_text("the user's own notes\n")
    before = files(tmp_path / "runs")
    ran = tmp_path / "ran"
    err = one_error(aiprof("record", "-o", str(out), "--", *marker_job(ran)))
    if name.endswith(".aiprof"):
        assert err == f"{out} is an earlier recording: give another -o, or --force to replace it"
    else:
        assert err == (
            f"{out} already holds a recording (rank0.aiprof, rank1.aiprof): give another -o, or --force to replace it"
        )
    assert not ran.exists()  # refused before the job was launched
    assert files(tmp_path / "runs") == before  # the earlier recording, byte for byte, and nothing added


def test_force_replaces_the_recording_and_keeps_the_other_files(tmp_path: Path, earlier: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(earlier, out)
    (out / "notes.txt").write_text("the user's own notes\n")
    (out / "plots").mkdir()
    (out / "plots" / "loss.csv").write_text("step,loss\n0,1.5\n")
    old_pid = meta(out / "rank0.aiprof")["record"]["pid"]
    ran = tmp_path / "ran"
    rec = aiprof("record", "--force", "-o", str(out), "--", *marker_job(ran))
    assert rec.returncode == 0, rec.stderr
    assert ran.exists()
    # The new one-process recording in place of the two ranks (no rank1.aiprof of the
    # earlier run left to be read with it); the user's other files untouched.
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "plots", "rank0.aiprof"]
    m = meta(out / "rank0.aiprof")
    assert m["ranks"] == [0] and m["world_size"] == 1 and m["record"]["pid"] != old_pid
    assert (out / "notes.txt").read_text() == "the user's own notes\n"
    assert (out / "plots" / "loss.csv").read_text() == "step,loss\n0,1.5\n"
    # The profile path form: --force replaces NAME.aiprof too.
    single = tmp_path / "run.aiprof"
    shutil.copytree(earlier / "rank1.aiprof", single)
    rec = aiprof("record", "--force", "-o", str(single), "--", *marker_job(tmp_path / "ran2"))
    assert rec.returncode == 0, rec.stderr
    assert meta(single)["ranks"] == [0] and (tmp_path / "ran2").exists()


@pytest.mark.parametrize("contents", ["empty", "other files"])
def test_a_folder_without_a_recording_is_recorded_into_then_kept(tmp_path: Path, contents: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    if contents == "other files":
        (out / "notes.txt").write_text("the user's own notes\n")
    rec = aiprof("record", "-o", str(out), "--", *marker_job(tmp_path / "ran"))
    assert rec.returncode == 0, rec.stderr
    assert meta(out / "rank0.aiprof")["ranks"] == [0]
    if contents == "other files":
        assert (out / "notes.txt").read_text() == "the user's own notes\n"
    # What it recorded is now the earlier recording of the next run.
    before = files(out)
    err = one_error(aiprof("record", "-o", str(out), "--", *marker_job(tmp_path / "ran2")))
    assert err.startswith(f"{out} already holds a recording (rank0.aiprof)") and "--force" in err
    assert not (tmp_path / "ran2").exists() and files(out) == before


def test_an_unfinished_recording_is_refused_and_still_recoverable(tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = tmp_path / "job.py"
    done = tmp_path / "done"
    job.write_text(ORPHANED.format(marker=str(done)))
    killed = aiprof("record", "-o", str(out), "--", PY, str(job))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    deadline = time.monotonic() + 120
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the job runs on after aiprof record died
    (raw,) = out.glob(".rank0.aiprof*.raw")
    while time.monotonic() < deadline and json.loads((raw / "manifest.json").read_text()).get("partial"):
        time.sleep(0.05)  # the job's own stop writes its final raw data
    before = files(out)
    ran = tmp_path / "ran"
    err = one_error(aiprof("record", "-o", str(out), "--", *marker_job(ran)))
    assert err == (
        f"{out} already holds an unfinished recording ({raw.name}: aiprof recover {out} writes its profiles): "
        "give another -o, or --force to replace it"
    )
    assert not ran.exists() and files(out) == before
    # Nothing was lost: the raw data still becomes its profile.
    got = aiprof("recover", str(out))
    assert got.returncode == 0, got.stderr
    assert meta(out / "rank0.aiprof")["partial"] is True


def test_profiles_record_did_not_write_are_refused_even_with_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    imp = aiprof("import", str(ROOT / "tests" / "samples" / "dmon_d10.txt"), "-o", str(out / "dmon"))
    assert imp.returncode == 0, imp.stderr
    before = files(out)
    for force in ([], ["--force"]):
        ran = tmp_path / "ran"
        err = one_error(aiprof("record", *force, "-o", str(out), "--", *marker_job(ran)))
        assert err == (
            f"{out} already holds profiles (dmon.aiprof) that aiprof record did not write: give another -o "
            "(--force replaces only an earlier recording)"
        )
        assert not ran.exists() and files(out) == before


def test_without_o_a_run_never_lands_in_an_earlier_runs_folder(tmp_path: Path, earlier: Path) -> None:
    # Earlier runs without -o took the default names of this minute (aiprof-DATE-TIME,
    # one a second): the run below starts inside it, on one of them.
    now = time.time()
    taken = [time.strftime("aiprof-%Y%m%d-%H%M%S", time.localtime(now + s)) for s in range(60)]
    for name in taken:
        shutil.copytree(earlier / "rank0.aiprof", tmp_path / name / "rank0.aiprof")
    before = files(tmp_path)
    rec = aiprof("record", "--", *marker_job(tmp_path / "ran"), cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    new = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and p.name not in taken)
    assert len(new) == 1 and re.fullmatch(r"aiprof-\d{8}-\d{6}-2", new[0]), new
    assert new[0].removesuffix("-2") in taken
    assert meta(tmp_path / new[0] / "rank0.aiprof")["ranks"] == [0]
    assert f"aiprof report {new[0]}" in rec.stderr
    after = files(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith(new[0])} == {**before, "ran": b""}
