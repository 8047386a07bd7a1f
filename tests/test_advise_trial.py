"""The advice on the recordings of a new user's trial (small CPU torch jobs recorded here):
a CPU-only job told of no device, workers not promised CPU the host did not have,
fixes that follow where the hot code is, outlier steps the machine caused and the
first step's warm-up not blamed on the code, and a recording without samples that
says which rules could not judge."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner

from aiprof.advise import advise_json, evaluate, python_time
from aiprof.advise.base import Context
from aiprof.analysis import run
from aiprof.analysis.steady import per_step
from aiprof.cli import cli
from aiprof.store import open_profile
from record_support import PY, SPIN, record

pytest.importorskip("torch")

#: A Dataset whose __getitem__ normalises its row with a Python loop over its elements
#: (float() per element), as the trial's train.py did.
ROWS = """
import os, subprocess, sys, time
import torch
from torch.utils.data import DataLoader, Dataset
torch.set_num_threads(1)

class Rows(Dataset):
    def __init__(self, d):
        self.x = torch.randn(4096, d, generator=torch.Generator().manual_seed(0))
    def __len__(self):
        return len(self.x)
    def normalize(self, row):
        mean = sum(float(v) for v in row) / len(row)
        return torch.tensor([float(v) - mean for v in row])
    def __getitem__(self, i):
        return self.normalize(self.x[i]), torch.zeros(())
"""


def _evaluate(path: Path) -> tuple[dict[str, Any], tuple[set[str], bool | None]]:
    """Every rule's verdict, and (the accelerators' types, whether device work was recorded)."""
    with open_profile(path) as p:
        ctx = Context(p)
        got = {v.rule: v for v in evaluate(p, ctx=ctx)}
        work = ctx.device_work()
        return got, (ctx.device_types(), work)


def train_loop(last_step: int) -> str:
    """The jobs' training loop: a linear model over the Rows loader, to step ``last_step``."""
    return f"""
m = torch.nn.Linear(64, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for step, (x, y) in enumerate(DataLoader(Rows(64), batch_size=16)):
    loss = m(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == {last_step}:
        break
"""


OPS_JOB = ROWS + train_loop(40)


def test_a_cpu_only_job_recorded_with_ops_is_told_of_no_device(tmp_path: Path) -> None:
    """--ops on a CPU: the DataLoader spans and aten::item make the input and sync rules
    fire, but there is no device to idle, to sync with or to pin memory for."""
    out = record(tmp_path, OPS_JOB, "--ops", "--rate", "200") / "rank0.aiprof"
    v, (types, work) = _evaluate(out)
    assert types == set() and work is False
    # The device-idle rule has no device: not "the device idles 75.6% of the step".
    assert v["input.input_bound"].status == "no_data"
    assert v["input.input_bound"].reason == "no accelerator in the profile: no device to wait for input"
    share = v["input.dataloader_share"]
    assert share.status == "fired" and share.advice is not None
    code = share.advice.snippets["pytorch"]
    assert "pin_memory" not in code and "pinned memory" not in share.advice.fix
    # Workers, where proposed, are at most the host's cores (the recorder's counters).
    workers = [int(n) for n in re.findall(r"num_workers=(\d+)", code)]
    assert all(n <= psutil.cpu_count() for n in workers), code
    # float(v) per element runs aten::item: "sync" samples, but no host-device sync.
    sync = v["python.sync"].advice
    assert v["python.sync"].status == "fired" and sync is not None
    assert sync.title.startswith("Reading tensor values into Python, one at a time")
    assert "Host-device" not in sync.title and "from the device" not in sync.fix
    assert "no accelerator, so these reads wait for no device" in sync.summary
    assert "running.item()" not in sync.snippets["pytorch"] and "float(g.pow(2).sum())" in sync.snippets["pytorch"]
    with open_profile(out) as p:
        doc = advise_json(p, include_info=True)
    texts = [a["summary"] + a["fix"] for a in doc["advice"]] + [o["summary"] for a in doc["advice"] for o in a["also"]]
    assert not any("device idles" in t for t in texts), texts
    assert not any("pin_memory" in c for a in doc["advice"] for c in a["snippets"].values())


BUSY_JOB = (
    ROWS
    + """
def grad_sq_norm(g):
    total = 0.0
    for v in g.flatten():
        total += float(v) * float(v)
    return total

# Every core busy with other work: the CPU a shared machine leaves a job.
spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3 * os.cpu_count())]
try:
    m = torch.nn.Linear(128, 48)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for step, (x, y) in enumerate(DataLoader(Rows(128), batch_size=16)):
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        norm = grad_sq_norm(m.weight.grad)
        if step == 20:
            break
finally:
    for s in spinners:
        s.kill()
"""
)


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("busy"), BUSY_JOB, "--rate", "200") / "rank0.aiprof"


def test_workers_are_not_promised_cpu_a_busy_host_did_not_have(busy: Path) -> None:
    """Every core busy (3 spinners per core beside the job): workers would share the
    same cores, so they gain nothing; the fix is the per-item work made cheaper, and
    its estimate is that work's sampled time."""
    with open_profile(busy) as p:
        v = evaluate(p, only=["python.data_loading"])[0]
        (cpu,) = run(p, "loader_cpu").rows
        phases = [r for r in run(p, "phases").rows if r["step"] is None]
        hot = [r for r in run(p, "phase_hotspots").rows if r["phase"] == "data_loading"]
    a = v.advice
    assert v.status == "fired" and a is not None
    assert cpu["sys_cpu_pct"] >= 90.0 and cpu["worker_samples"] == 0
    step = sum(r["time_us"] for r in phases)
    load = sum(r["time_us"] for r in phases if r["phase"] == "data_loading")
    cores = psutil.cpu_count()
    p_ = min(cpu["proc_cpu_pct"] / 100.0, 1.0)
    idle = (1.0 - max(cpu["sys_cpu_pct"] / 100.0, p_ / cores)) * cores
    # What workers could save: never beyond the idle CPU the recording measured (where
    # the cores bound it, it is that bound exactly: within the rounding of the evidence's
    # percentages, as tests/test_phases.py's bound)...
    assert a.evidence["overlap_us"] <= step * idle / (p_ + idle) * (1 + 1e-4) + 1.0
    # ...under the rule's threshold here, so the advice is not workers.
    assert a.evidence["overlap_us"] <= 0.05 * step
    assert a.fix == python_time.VECTORISE_FIX and "num_workers" not in a.snippets["pytorch"]
    assert "make it cheaper instead" in a.summary
    # The estimate: the loading's samples in the Dataset's own code (Rows.*), at most the loading.
    dataset = sum(r["time_us"] for r in hot if str(r["function"]).startswith("Rows."))
    assert a.estimate_us == pytest.approx(a.evidence["per_item_us"], abs=0.01)
    # (The phases' times are rounded to the ns: the estimate may be the loading itself.)
    assert a.estimate_us == pytest.approx(dataset, rel=1e-6) and 0 < a.estimate_us <= load + 1e-2
    assert a.evidence["function"].startswith("Rows.")


def test_fix_code_follows_where_the_hot_code_is(busy: Path) -> None:
    """The Python loop over a gradient's elements is in the training loop, not in the
    Dataset: vectorise it there; the loader's fix names placeholders that read as the
    user's own, with their definition."""
    with open_profile(busy) as p:
        v = {x.rule: x for x in evaluate(p, only=["python.preprocessing", "python.data_loading"])}
    pre = v["python.preprocessing"].advice
    assert v["python.preprocessing"].status == "fired" and pre is not None
    assert pre.evidence["function"] == "grad_sq_norm" and pre.evidence["file"].endswith("job.py")
    assert "It runs in the training loop itself, not in code the DataLoader calls." in pre.summary
    assert "__getitem__" not in pre.fix and pre.fix.startswith("Vectorise the Python work in the training loop")
    assert "torch.linalg.vector_norm(g)" in pre.snippets["pytorch"]
    load = v["python.data_loading"].advice
    assert load is not None
    code = load.snippets["pytorch"]
    assert "batched_augment" not in code
    assert "def your_batched_collate(items):" in code and "collate_fn=your_batched_collate" in code
    assert "torch.utils.data.default_collate(items)" in code


#: Steps of a CPU-bound loop (``spin``; without marks, over a DataLoader: a step begins
#: at its ``__next__``); the first one is longer (warm-up). At step 20,
#: MODE: "stop" has the job frozen 0.6 s by a helper (SIGSTOP, SIGCONT: the machine
#: pausing it); "sleep" sleeps 0.6 s in the loop (the code waits); "work" spins 0.6 s.
#: MARK: whether the job marks its own steps (the recorder then measures each step's
#: CPU time), else one step per optimizer.step().
PAUSE_JOB = (
    """
import os, subprocess, sys, time
import torch
torch.set_num_threads(1)
"""
    + SPIN
    + """
MODE, MARK = sys.argv[1], sys.argv[2] == "mark"
if MARK:
    from aiprof.record import mark_step
m = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
batches = torch.randn(45, 8, 16) if MARK else torch.utils.data.DataLoader(torch.randn(45 * 8, 16), batch_size=8)
for i, x in enumerate(batches):
    spin(80 if i == 0 else 15)
    if i == 20:
        if MODE == "stop":
            subprocess.Popen(["sh", "-c", f"sleep 0.02; kill -STOP {os.getpid()}; sleep 0.6; kill -CONT {os.getpid()}"])
            spin(60)
        elif MODE == "sleep":
            time.sleep(0.6)
        else:
            spin(600)
    loss = m(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if MARK:
        mark_step()
"""
)


def _pause_run(
    tmp_path: Path, mode: str, mark: bool, monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    out = record(tmp_path, PAUSE_JOB, args=(mode, "mark" if mark else "auto"), out=f"{mode}_{mark}") / "rank0.aiprof"
    got: dict[str, Any] = {"path": out}
    with open_profile(out) as p:
        got["measured"] = bool(per_step(p))
        got["doc"] = advise_json(p, include_info=True)
        got["outliers"] = {int(r["step"]): r for r in run(p, "outlier_steps").rows}
    if monkeypatch is not None and got["measured"]:
        # The same recording without the steps' own CPU figures: the process's CPU counter.
        monkeypatch.setattr("aiprof.analysis.steady.per_step", lambda profile: {})
        with open_profile(out) as p:
            got["counter_doc"] = advise_json(p, include_info=True)
    return got, {a["rule"]: a for a in got["doc"]["advice"]}


def _check_warmup(got: dict[str, Any], items: dict[str, Any]) -> None:
    """The first step (80 ms among 15 ms steps) is warm-up: a note without gain, never
    the outlier advice's step."""
    assert 0 in got["outliers"], got["outliers"]
    w = items["steps.warmup"]
    assert w["severity"] == "info" and w["gain_pct"] == 0.0 and w["cause"] is None
    assert w["summary"].startswith("Step 0, the run's first, took") and "warm-up" in w["summary"]
    assert "prof.start()" in w["snippets"]["pytorch"]
    o = items.get("steps.outlier")
    assert o is None or 0 not in o["evidence"]["outlier_steps"]


def _check_stopped(doc: dict[str, Any], source: str) -> None:
    o = {a["rule"]: a for a in doc["advice"]}["steps.outlier"]
    assert o["evidence"]["step"] == 20 and o["evidence"]["cpu_source"] == source
    assert o["evidence"]["not_running_us"] > 400_000
    assert "The machine paused it (stopped, preempted, swapped out), not the code" in o["summary"]
    assert o["snippets"] == {} and "evaluate every N epochs" not in o["fix"]
    assert o["fix"].startswith("Nothing to change in the code for this step")
    assert o["gain_pct"] == 0.0 and o["severity"] == "info"
    (warning,) = [w for w in doc["warnings"] if w.startswith("Step 20 took")]
    assert "not running for" in warning and "not the code" in warning


@pytest.mark.parametrize("mark", [False, True], ids=["optimizer_steps", "marked_steps"])
def test_a_step_the_machine_stopped_gets_no_code_fix(
    tmp_path: Path, mark: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGSTOP for 0.6 s inside step 20: the job's CPU in the step (the step's own CPU
    time where the recorder measured it; else, and here also with it hidden, the
    process's CPU counter) is far below its wall time while the samples (taken from
    outside, so they go on while it is stopped) show the stack in computation: the
    machine's doing, said so, with no code fix and no gain."""
    got, items = _pause_run(tmp_path, "stop", mark, monkeypatch)
    assert 20 in got["outliers"] and got["outliers"][20]["duration_us"] > 500_000
    _check_stopped(got["doc"], "step" if got["measured"] else "proc_cpu")
    if got["measured"]:
        _check_stopped(got["counter_doc"], "proc_cpu")
    _check_warmup(got, items)


def test_a_step_that_sleeps_in_the_code_keeps_its_code_fix(tmp_path: Path) -> None:
    """The same 0.6 s off the CPU, but in time.sleep(): the samples show the stack waiting
    in a call of the loop, so the code made the step long."""
    got, items = _pause_run(tmp_path, "sleep", False)
    o = items["steps.outlier"]
    assert o["evidence"]["step"] == 20 and o["severity"] != "info" and o["gain_pct"] > 0
    assert "evaluate every N epochs" in o["fix"] and "The machine paused" not in o["summary"]
    assert not [w for w in got["doc"]["warnings"] if w.startswith("Step 20")]
    _check_warmup(got, items)


def test_a_step_that_works_longer_keeps_its_code_fix(tmp_path: Path) -> None:
    """0.6 s more work on the CPU in step 20 (marked steps: the step's CPU time says it ran)."""
    got, items = _pause_run(tmp_path, "work", True)
    o = items["steps.outlier"]
    assert o["evidence"]["step"] == 20 and o["gain_pct"] > 0 and "evaluate every N epochs" in o["fix"]
    assert "; it runs " in o["summary"] and "The machine paused" not in o["summary"]
    assert not [w for w in got["doc"]["warnings"] if w.startswith("Step 20")]
    _check_warmup(got, items)


#: A data-loading job that waits for FLAG before its loop: the test kills aiprof record
#: (its outside sampler with it) while the job waits, then lets it run.
KILLED_JOB = (
    ROWS
    + """
flag = sys.argv[1]
while not os.path.exists(flag):
    time.sleep(0.02)
"""
    + train_loop(30)
    + """open(flag + ".done", "w").close()
"""
)


def test_a_recovered_recording_without_samples_says_what_could_not_be_judged(tmp_path: Path) -> None:
    """aiprof record killed, the job runs on, aiprof recover makes the profile: the job's
    steps are there, its stack samples stop before them. The advice says that the
    Python-sample rules could not judge, and why, instead of "no rule fired"."""
    script, flag, out = tmp_path / "job.py", tmp_path / "go", tmp_path / "out"
    script.write_text(KILLED_JOB)
    rec = subprocess.Popen(
        [PY, "-m", "aiprof", "record", "-o", str(out), "--", PY, str(script), str(flag)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(out.glob(".rank0.aiprof*.raw/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # samples of the job waiting for the flag
    rec.send_signal(signal.SIGKILL)  # aiprof record dies; the job runs on
    rec.wait(timeout=60)
    flag.touch()
    done = Path(str(flag) + ".done")
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert done.exists()
    (raw,) = out.glob(".rank0.aiprof*.raw")
    while time.monotonic() < deadline and json.loads((raw / "manifest.json").read_text()).get("partial"):
        time.sleep(0.1)
    got = subprocess.run([PY, "-m", "aiprof", "recover", str(out)], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    path = out / "rank0.aiprof"
    with open_profile(path) as p:
        n_samples = p.sql("SELECT count(*) AS n FROM samples").to_pylist()[0]["n"]
        doc = advise_json(p)
    assert n_samples > 0 and not [a for a in doc["advice"] if a["rule"].startswith("python.")]
    python = [g for g in doc["not_judged"] if "python.data_loading" in g["rules"]]
    assert python and python[0] is doc["not_judged"][0]
    assert python[0]["rules"] == [
        "python.data_loading",
        "python.sync",
        "python.logging",
        "python.optimizer",
        "python.preprocessing",
    ]
    assert python[0]["missing"].startswith(
        f"the profile's {n_samples} Python stack samples all come before the first step"
    )
    assert "the sampler stopped early" in python[0]["missing"]
    res = CliRunner().invoke(cli, ["advise", str(path)])
    assert res.exit_code == 0, res.output
    assert "No advice: no rule fired." not in res.output
    text = " ".join(res.output.split())
    n = sum(len(g["rules"]) for g in doc["not_judged"])
    if doc["advice"]:  # a step the loaded machine made an outlier, say
        assert f"{n} rules could not judge for lack of data (aiprof advise --format json lists them" in text
    else:
        assert "No advice: no rule fired on the data this profile holds" in res.output
        assert f"{n} rules could not judge for lack of data:" in text and python[0]["missing"] in text
        assert "python.data_loading, python.sync, python.logging, python.optimizer, python.preprocessing" in text
        md = CliRunner().invoke(cli, ["advise", str(path), "--format", "markdown"])
        assert f"- {python[0]['missing']}: python.data_loading" in md.output
    js = json.loads(CliRunner().invoke(cli, ["advise", str(path), "--format", "json"]).output)
    assert js["not_judged"] == doc["not_judged"]
