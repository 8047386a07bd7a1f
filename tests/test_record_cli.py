"""``aiprof record`` on real scripts in real subprocesses: outcomes, signals, ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.record import active
from aiprof.record.environment import RUNNER
from aiprof.record.launcher.launch import wrap_python
from record_support import record_run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_cpu.py"
PY = sys.executable


@pytest.fixture(autouse=True)
def no_profiler_left_running() -> Iterator[None]:
    assert active() is None
    yield
    assert active() is None


def aiprof(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "aiprof", *args], capture_output=True, text=True, timeout=300, **kw)


def meta(path: Path) -> dict[str, Any]:
    return json.loads((path / "profile.json").read_text())


def script(tmp_path: Path, body: str) -> str:
    p = tmp_path / "job.py"
    p.write_text(body)
    return str(p)


def test_wrap_python_keeps_interpreter_and_options() -> None:
    assert wrap_python(["python3", "-u", "-W", "ignore", "x.py", "-v"]) == [
        "python3",
        "-u",
        "-W",
        "ignore",
        RUNNER,
        "x.py",
        "-v",
    ]
    assert wrap_python(["/venv/bin/python", "-m", "pkg", "a"])[1:4] == [RUNNER, "-m", "pkg"]
    assert wrap_python(["torchrun", "--nproc-per-node", "2", "x.py"]) == ["torchrun", "--nproc-per-node", "2", "x.py"]


def test_example_checksum_is_the_same_with_and_without_aiprof(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    plain = subprocess.run([PY, str(EXAMPLE), "--steps", "6"], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "rec"
    rec = aiprof("record", "-o", str(out), "--", PY, str(EXAMPLE), "--steps", "6")
    assert rec.returncode == 0, rec.stderr
    checksum = [ln for ln in plain.stdout.splitlines() if ln.startswith("checksum")]
    assert checksum and checksum == [ln for ln in rec.stdout.splitlines() if ln.startswith("checksum")]
    assert f"aiprof report {out}" in rec.stderr
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is False and m["record"]["collectors"]["python"]["failed"] is None
    from aiprof.store import open_profile

    with open_profile(out / "rank0.aiprof") as p:
        steps = p.con.execute("select count(*) from events where kind = 'step'").fetchone()
        names = {
            r[0] for r in p.con.execute("select distinct name from events where kind = 'user_annotation'").fetchall()
        }
    # Six mark_step() calls, six steps, not doubled by the optimizer hook; the first
    # starts at the first DataLoader batch, the time before it (imports, setup) is
    # kept under its own name.
    assert steps == (6,), "explicit mark_step() calls, not doubled by the optimizer hook"
    assert names == {"forward", "backward", "optimizer", "aiprof: before the first step"}


def test_ops_mode_and_optimizer_steps_on_an_unmodified_script(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    body = (
        "import torch\ntorch.set_num_threads(1)\n"
        "m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(4):\n    opt.zero_grad(); m(torch.ones(4, 8)).sum().backward(); opt.step()\n"
    )
    out = tmp_path / "ops"
    rec = aiprof("record", "-o", str(out), "--ops", "--no-python", "--", PY, script(tmp_path, body))
    assert rec.returncode == 0, rec.stderr
    from aiprof.store import open_profile

    with open_profile(out / "rank0.aiprof") as p:
        steps = p.con.execute("select count(*) from events where kind = 'step'").fetchone()
        ops = p.con.execute("select count(*) from events where kind = 'cpu_op' and name = 'aten::addmm'").fetchone()
        samples = p.con.execute("select count(*) from samples").fetchone()
    assert steps == (4,) and ops is not None and ops[0] >= 4 and samples == (0,)


def test_a_failing_script_keeps_its_exit_code_and_a_partial_profile(tmp_path: Path) -> None:
    out = tmp_path / "fail"
    rec = aiprof("record", "-o", str(out), "--", PY, script(tmp_path, "raise ValueError('boom')\n"))
    assert rec.returncode == 1, rec.stderr
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is True and "ValueError: boom" in m["partial_reason"]


def test_a_job_that_exits_with_a_status_of_its_own_is_whole_not_partial(tmp_path: Path) -> None:
    """sys.exit(3) after all its steps: the recording stopped as the job ended, nothing
    was cut short (it was reported as "partial: the recording or file was cut short")."""
    out = tmp_path / "exit3"
    body = "import sys\nfrom aiprof.record import mark_step\nfor _ in range(3):\n    mark_step()\nsys.exit(3)\n"
    rec = aiprof("record", "-o", str(out), "--", PY, script(tmp_path, body))
    assert rec.returncode == 3, rec.stderr
    assert f"aiprof: wrote {out / 'rank0.aiprof'} (the job exited with code 3)" in rec.stderr
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is False and "partial_reason" not in m
    assert m["record"]["exit_code"] == 3
    assert "the job exited with code 3: it ran to that exit, and all of it is recorded" in m["warnings"]
    report = aiprof("report", str(out))
    assert report.returncode == 0, report.stderr
    text = " ".join(report.stdout.split())
    assert "the job exited with code 3" in text and "partial" not in text


def test_aiprofs_own_options_after_record_are_refused_and_leave_no_folder(tmp_path: Path) -> None:
    """``aiprof record -q -o OUT -- ...`` ran "-q" as the command ("cannot run '-q'")
    and left OUT behind, empty."""
    out = tmp_path / "runs" / "x"
    job = script(tmp_path, "print('ran')\n")
    for argv in (["-q", "-o", str(out)], ["-o", str(out), "-v"]):
        rec = aiprof("record", *argv, "--", PY, job)
        assert rec.returncode == 2 and "ran" not in rec.stdout
        flag = argv[0] if argv[0].startswith("-q") else argv[-1]
        assert rec.stderr == f"aiprof: error: {flag} is an option of aiprof itself: aiprof {flag} record ...\n"
        assert not (tmp_path / "runs").exists()
    rec = aiprof("record", "--bogus", "-o", str(out), "--", PY, job)
    assert rec.returncode == 2 and rec.stderr.startswith("aiprof: error: no such option of aiprof record: --bogus")
    assert not (tmp_path / "runs").exists()


def test_quiet_record_prints_only_errors(tmp_path: Path) -> None:
    job = script(tmp_path, "print('ran')\n")
    rec = subprocess.run(
        [PY, "-m", "aiprof", "-q", "record", "-o", str(tmp_path / "q"), "--", PY, job],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rec.returncode == 0 and rec.stdout == "ran\n" and rec.stderr == "", rec.stderr
    assert (tmp_path / "q" / "rank0.aiprof" / "profile.json").exists()


def test_a_command_that_cannot_start_fails_as_it_would_unrecorded_and_leaves_no_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nosuch.py"
    plain = subprocess.run([PY, str(missing)], capture_output=True, text=True, timeout=60)
    out = tmp_path / "runs" / "x"
    rec = aiprof("record", "-o", str(out), "--", PY, str(missing))
    # Python's own message and status (it was a traceback from <frozen runpy>, exit 1).
    assert rec.returncode == plain.returncode == 2
    assert rec.stderr.startswith(plain.stderr), rec.stderr
    assert "Traceback" not in rec.stderr and "runpy" not in rec.stderr
    assert "no profile was written (the job exited with code 2 before it was recorded)" in rec.stderr
    assert not (tmp_path / "runs").exists()
    rec = aiprof("record", "-o", str(out), "--", str(tmp_path / "nosuchcmd"))
    assert rec.returncode == 2 and rec.stderr.startswith("aiprof: error: cannot run"), rec.stderr
    assert not (tmp_path / "runs").exists()
    # Without -o: the folder claimed for the run goes too.
    rec = aiprof("record", "--", str(tmp_path / "nosuchcmd"), cwd=tmp_path)
    assert rec.returncode == 2 and not list(tmp_path.glob("aiprof-*"))
    # A folder that was there is left as it was.
    out.mkdir(parents=True)
    rec = aiprof("record", "-o", str(out), "--", str(tmp_path / "nosuchcmd"))
    assert rec.returncode == 2 and out.is_dir()


def test_a_module_that_cannot_be_found_fails_in_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    """``-m nosuchmodule`` was runpy's traceback, a partial profile and status 1: now
    Python's own line, status 2 (as a script that cannot be opened) and nothing written."""
    out = tmp_path / "runs" / "x"
    for name, said in (
        ("nosuchmodule", "No module named nosuchmodule"),
        (
            "nosuchpkg.sub",
            "Error while finding module specification for 'nosuchpkg.sub' "
            "(ModuleNotFoundError: No module named 'nosuchpkg')",
        ),
    ):
        plain = subprocess.run([PY, "-m", name], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert plain.stderr == f"{PY}: {said}\n"
        rec = aiprof("record", "-o", str(out), "--", PY, "-m", name, "arg", cwd=tmp_path)
        assert rec.returncode == 2, rec.stderr
        assert rec.stderr.splitlines() == [
            plain.stderr.rstrip("\n"),
            "aiprof: no profile was written (the job exited with code 2 before it was recorded)",
        ], rec.stderr
        assert not (tmp_path / "runs").exists()
    # Without -o: the folder claimed for the run goes too.
    rec = aiprof("record", "--", PY, "-m", "nosuchmodule", cwd=tmp_path)
    assert rec.returncode == 2 and "Traceback" not in rec.stderr and not list(tmp_path.glob("aiprof-*"))
    # A module of the working folder is found (it is first on the path, as under python -m).
    (tmp_path / "here_mod.py").write_text("import sys\nprint('ran', sys.argv[1:])\n")
    rec = aiprof("-q", "record", "-o", str(out), "--", PY, "-m", "here_mod", "a", cwd=tmp_path)
    assert rec.returncode == 0 and rec.stdout == "ran ['a']\n", rec.stderr
    assert (out / "rank0.aiprof" / "profile.json").is_file()


def test_a_missing_submodule_of_a_package_is_one_line_too(tmp_path: Path) -> None:
    """``-m json.nosuch``: json is found (and runs, recorded) before runpy knows its
    submodule is missing: Python's one line and status 2, not runpy's traceback; an
    ImportError of the job's own code keeps its traceback and status 1."""
    rec = aiprof("record", "-o", str(tmp_path / "a"), "--", PY, "-m", "json.nosuch", cwd=tmp_path)
    assert rec.returncode == 2, rec.stderr
    assert rec.stderr.splitlines()[0] == f"{PY}: No module named json.nosuch", rec.stderr
    assert "Traceback" not in rec.stderr and "runpy" not in rec.stderr
    (tmp_path / "needs_dep.py").write_text("import nosuchdep\n")
    rec = aiprof("record", "-o", str(tmp_path / "b"), "--", PY, "-m", "needs_dep", cwd=tmp_path)
    assert rec.returncode == 1 and "Traceback" in rec.stderr, rec.stderr
    assert "ModuleNotFoundError: No module named 'nosuchdep'" in rec.stderr


WAIT_FOR_SIGNAL = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"


def test_sigterm_writes_a_partial_profile_and_exits_like_the_script(tmp_path: Path) -> None:
    out = tmp_path / "term"
    proc = subprocess.Popen(
        [PY, "-m", "aiprof", "record", "-o", str(out), "--", PY, script(tmp_path, WAIT_FOR_SIGNAL)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is True and "SIGTERM" in m["partial_reason"]


def test_ctrl_c_writes_a_partial_profile(tmp_path: Path) -> None:
    out = tmp_path / "int"
    # A new session stands for the terminal's foreground group: Ctrl-C reaches all of it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiprof", "record", "-o", str(out), "--", PY, script(tmp_path, WAIT_FOR_SIGNAL)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is True and "SIGINT" in m["partial_reason"]
    # Python's KeyboardInterrupt traceback, from the script's own frame as `python job.py`
    # prints it (it started with aiprof's runner and bootstrap: four frames).
    files = [ln.strip() for ln in err.splitlines() if ln.strip().startswith('File "')]
    assert files and files[0].startswith(f'File "{tmp_path / "job.py"}"'), err
    assert not any("bootstrap" in f or "aiprof_run" in f for f in files), err
    assert "KeyboardInterrupt" in err


LAUNCHER = """
import os, subprocess, sys
child = "import sys; sum(i * i for i in range(20000)); sys.exit(0)"
procs = [subprocess.Popen([sys.executable, "-c", child], env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2"})
         for r in range(2)]
sys.exit(max(p.wait() for p in procs))
"""


def test_each_rank_of_a_launcher_gets_its_own_profile(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    rec = aiprof("record", "-o", str(out), "--", PY, script(tmp_path, LAUNCHER))
    assert rec.returncode == 0, rec.stderr
    assert sorted(p.name for p in out.iterdir()) == ["rank0.aiprof", "rank1.aiprof"]
    for r in range(2):
        m = meta(out / f"rank{r}.aiprof")
        assert m["ranks"] == [r] and m["world_size"] == 2 and m["partial"] is False


def test_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    rec = aiprof("record", "--schedule", "1,x", "--", PY, "-c", "pass")
    assert rec.returncode == 2 and rec.stderr.strip().startswith("aiprof: error:") and len(rec.stderr.splitlines()) == 1


def test_sigkill_keeps_the_last_checkpoint(tmp_path: Path) -> None:
    # The job computes until a checkpoint of its own recording is on disk, then dies
    # of SIGKILL, which no handler can catch: the checkpoint must become the profile.
    out = tmp_path / "killed"
    body = (
        "import os, signal, sys, time\n"
        f"out = {str(out)!r}\n"
        "def work(n):\n    return sum(i * i for i in range(n))\n"
        "def saved(after):\n"
        "    return any(os.path.getmtime(os.path.join(d, 'manifest.json')) > after\n"
        "               for d, _, files in os.walk(out) if 'manifest.json' in files)\n"
        "t0 = time.monotonic()\n"
        "while time.monotonic() - t0 < 1.0:\n    work(20000)\n"
        "after = time.time()\n"
        "deadline = time.monotonic() + 60\n"
        "while not saved(after):\n"
        "    work(20000)\n"
        "    if time.monotonic() > deadline:\n        sys.exit(3)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "AIPROF_RECORD_CHECKPOINT_S": "0.2"}
    rec = aiprof("record", "-o", str(out), "--", PY, script(tmp_path, body), env=env)
    assert rec.returncode == -9 or rec.returncode == 137, rec.stderr
    assert (out / "rank0.aiprof" / "profile.json").is_file(), rec.stderr
    m = meta(out / "rank0.aiprof")
    assert m["partial"] is True
    from aiprof.store import open_profile

    with open_profile(out / "rank0.aiprof") as p:
        samples = p.sql("SELECT count(*) AS n FROM samples").to_pylist()[0]["n"]
        work = p.sql(
            "SELECT count(*) AS n FROM samples s JOIN frames f ON f.frame_id = s.stack_id AND f.rank = s.rank "
            "WHERE f.function LIKE '%work%' OR f.function LIKE '%genexpr%'"
        ).to_pylist()[0]["n"]
    assert samples > 0 and work > 0


def test_a_failing_scripts_traceback_starts_at_its_own_frame(tmp_path: Path) -> None:
    body = "def f():\n    raise ValueError('boom')\n\nf()\n"
    rec = aiprof("record", "-o", str(tmp_path / "tb"), "--", PY, script(tmp_path, body))
    assert rec.returncode == 1
    files = [ln.strip() for ln in rec.stderr.splitlines() if ln.strip().startswith('File "')]
    assert files and files[0].startswith(f'File "{tmp_path / "job.py"}", line 4'), rec.stderr
    assert not any("bootstrap" in f or "runpy" in f or "aiprof_run" in f for f in files)
    assert "ValueError: boom" in rec.stderr


#: A job that spends its time in one function (``work``) for a second.
WORK = (
    "import time\n"
    "def work():\n    return sum(i * i for i in range(20000))\n"
    "t0 = time.monotonic()\n"
    "while time.monotonic() - t0 < 1.0:\n    work()\n"
)


@pytest.mark.parametrize("how", ["script", "module"])
def test_the_stacks_start_at_the_jobs_own_code(tmp_path: Path, how: str) -> None:
    """Every sampled stack started with aiprof's runner and bootstrap (five frames, and
    runpy's three more under -m): the flame graph, speedscope and the report's "called
    from" showed them above the job's ``<module>``."""
    job = tmp_path / "pkgjob"
    job.mkdir()
    (job / "__init__.py").write_text("")
    (job / "__main__.py").write_text(WORK)
    target = ["-m", "pkgjob"] if how == "module" else [str(job / "__main__.py")]
    rec = aiprof("record", "-o", str(tmp_path / "out"), "--", PY, *target, cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    from aiprof.store import open_profile

    with open_profile(tmp_path / "out" / "rank0.aiprof") as p:
        frames = {r["frame_id"]: r for r in p.sql("SELECT frame_id, parent, function, file FROM frames").to_pylist()}
        leaves = [r["stack_id"] for r in p.sql("SELECT stack_id FROM samples").to_pylist()]
    roots: dict[tuple[str, str], int] = {}
    for leaf in leaves:
        f = frames[leaf]
        while f["parent"] is not None:
            f = frames[f["parent"]]
        key = (f["function"], f["file"])
        roots[key] = roots.get(key, 0) + 1
    own = ("<module>", str(job / "__main__.py"))
    # Nearly every sample is the job's; the few others are the recorder's own start
    # and stop, under its runner (a root of their own, not above the job).
    assert roots[own] >= 0.9 * len(leaves) and len(leaves) > 20, roots
    assert all(k == own or "aiprof" in k[1] for k in roots), roots
    assert not any("runpy" in k[1] for k in roots), roots


#: What a recorded job must not import for aiprof (each costs it 1-5 ms at start):
#: typing, re, enum's users, pathlib, json, runpy and pkgutil, shutil, socket.py.
NOT_IN_A_JOB = {"typing", "re", "pathlib", "json", "runpy", "pkgutil", "importlib.util", "shutil", "socket", "urllib"}


def test_a_recorded_pure_python_job_imports_only_what_recording_needs(tmp_path: Path) -> None:
    body = "import sys\nopen(sys.argv[1], 'w').write(' '.join(sorted(sys.modules)))\n"
    plain_out, rec_out = tmp_path / "plain.txt", tmp_path / "rec.txt"
    job = script(tmp_path, body)
    subprocess.run([PY, job, str(plain_out)], check=True, timeout=60)
    rec = aiprof("record", "-o", str(tmp_path / "imports"), "--", PY, job, str(rec_out))
    assert rec.returncode == 0, rec.stderr
    plain, recorded = set(plain_out.read_text().split()), set(rec_out.read_text().split())
    added = recorded - plain
    assert "aiprof.record.job.api" in added  # the job was recorded in-process
    assert not (added & NOT_IN_A_JOB), sorted(added & NOT_IN_A_JOB)
    assert (tmp_path / "imports" / "rank0.aiprof" / "profile.json").exists()


def test_a_recorded_script_runs_as_main_as_python_runs_it(tmp_path: Path) -> None:
    sub = tmp_path / "pkgdir"
    sub.mkdir()
    (sub / "helper.py").write_text("VALUE = 7\n")
    body = (
        "# -*- coding: latin-1 -*-\n"
        "import os, pickle, sys\n"
        "import helper\n"
        "class Point:\n"
        "    def __init__(self, x): self.x = x\n"
        "p = pickle.loads(pickle.dumps(Point(3)))\n"
        "main = sys.modules['__main__']\n"
        "print(__name__, p.x, helper.VALUE, main.__file__ == __file__, main.__spec__, sys.argv[1:],\n"
        "      sys.path[0] == os.path.dirname(os.path.abspath(__file__)), '\xe9')\n"
    )
    job = sub / "job.py"
    job.write_bytes(body.encode("latin-1"))
    plain = subprocess.run([PY, str(job), "a", "-b"], capture_output=True, text=True, timeout=60, check=True)
    rec = aiprof("record", "-o", str(tmp_path / "main"), "--", PY, str(job), "a", "-b")
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == plain.stdout == "__main__ 3 7 True None ['a', '-b'] True \xe9\n"


def test_a_repeating_schedule_keeps_every_window_without_torchs_warning(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    body = (
        "import torch\ntorch.set_num_threads(1)\n"
        "m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(12):\n    opt.zero_grad(); m(torch.ones(4, 8)).sum().backward(); opt.step()\n"
    )
    out = tmp_path / "rep"
    rec = aiprof(
        "record", "-o", str(out), "--ops", "--no-python", "--schedule", "1,1,1,3", "--", PY, script(tmp_path, body)
    )
    assert rec.returncode == 0, rec.stderr
    assert "acc_events" not in rec.stderr and "clears events" not in rec.stderr
    from aiprof.store import open_profile

    with open_profile(out / "rank0.aiprof") as p:
        steps = p.con.execute("select distinct step from events where name = 'aten::addmm' order by 1").fetchall()
    assert len(steps) >= 2, "the operators of more than one active window are kept"


def test_the_summary_names_the_hottest_python_inside_steps_and_startup_apart(tmp_path: Path) -> None:
    """Setup that outlasts the training loop (imports, data preparation) does not hide
    the loop's own hot function: the summary ranks samples inside steps, and says how
    long the startup took on its own line."""
    job = script(
        tmp_path,
        """
import time
from aiprof.record import mark_step

def prepare_everything():
    end = time.perf_counter() + 1.2
    while time.perf_counter() < end:
        pass

def train_one_step():
    end = time.perf_counter() + 0.03
    while time.perf_counter() < end:
        pass

prepare_everything()
for _ in range(20):
    train_one_step()
    mark_step()
""",
    )
    r = aiprof("record", "-o", str(tmp_path / "p.aiprof"), "--no-device", "--", PY, job)
    assert r.returncode == 0, r.stderr
    hot = next(line for line in r.stderr.splitlines() if "hottest Python" in line)
    assert "hottest Python inside steps: train_one_step (job.py:" in hot, r.stderr
    assert "prepare_everything" not in hot
    startup = next(line for line in r.stderr.splitlines() if "startup (imports and setup" in line)
    assert float(startup.rsplit(":", 1)[1].removesuffix(" s")) >= 1.2
    # A host-only recording: the report says so rather than drawing a table of zeros.
    rep = aiprof("report", str(tmp_path / "p.aiprof"))
    assert rep.returncode == 0 and "rank 0: no device activity in the profile" in rep.stdout
    assert "device time" not in rep.stdout


def test_the_finalizers_modules_are_warmed_up_before_the_job_ends() -> None:
    code = (
        "import sys\n"
        "from aiprof.record.finalizer import warm_up\n"
        "before = [m for m in ('pyarrow', 'duckdb', 'aiprof.store.writer') if m in sys.modules]\n"
        "warm_up()\n"
        "print(before, [m for m in ('pyarrow', 'duckdb', 'aiprof.store.writer') if m in sys.modules])\n"
    )
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] ['pyarrow', 'duckdb', 'aiprof.store.writer']"


IDLE_THREADS_JOB = """
import threading, torch
torch.set_num_threads(1)
stop = threading.Event()
for _ in range(3):  # parked all along, as a queue's feeder thread is
    threading.Thread(target=stop.wait, daemon=True).start()
m = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(m.parameters(), 0.01)

def crunch():
    s = 0.0
    for i in range(20000):
        s += i * 0.5
    return s

for _ in range(25):
    crunch()
    m(torch.randn(16, 256)).sum().backward()
    opt.step()
    opt.zero_grad()
stop.set()
"""


def test_the_summary_s_hottest_python_is_the_step_thread_s(tmp_path: Path) -> None:
    """Three threads parked in a wait beside the training loop held three samples of
    every four: the summary led with `Event.wait`. The hottest Python inside the steps is
    the step thread's own."""
    _out, rec = record_run(tmp_path, IDLE_THREADS_JOB)
    line = next(x for x in rec.stderr.splitlines() if "hottest Python" in x)
    assert "inside steps" in line, line
    first = line.split(":", 2)[2].strip().split(";")[0]
    assert first.startswith("crunch (job.py:"), line
    assert "wait" not in line.lower(), line
