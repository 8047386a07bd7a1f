"""The advice on two more jobs of a new user's trial (small CPU torch jobs recorded here):

- a job whose own thread runs pure Python beside the training loop (holding the GIL):
  the steps it makes long are the code's, not "the machine paused it"; the outlier
  advice names the thread and what it ran, and proposes taking that work off the GIL;
- a training loop that waits off the CPU in its own code (``time.sleep``, a queue's
  ``get``): "User Python" says the step waits there and proposes overlapping or
  removing the wait, not vectorising (which the CPU-bound loop of test_advise_trial.py
  keeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import advise_json, python_time
from aiprof.advise.base import Context
from aiprof.advise.steps import machine_pauses
from aiprof.analysis import run
from aiprof.store import open_profile
from record_support import record

pytest.importorskip("torch")

#: Marked steps of a small model, 8 forward/backward/optimizer rounds each (a few ms).
#: At step 30 the job's thread "ckpt-writer" serialises its state for 1.5 s
#: (serialise_state: pickle.dumps holds the GIL through each call, some 0.1 s): each
#: time the loop's thread gives the GIL up (torch's calls do), it waits for it.
GIL_JOB = """
import pickle, threading, time, torch
torch.set_num_threads(1)
from aiprof.record import mark_step
go = threading.Event()
state = list(range(1_000_000))

def serialise_state(seconds):
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        n += len(pickle.dumps(state))
    return n

def writer():
    go.wait()
    serialise_state(1.5)

threading.Thread(target=writer, name="ckpt-writer", daemon=True).start()
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(32, 64)
for i in range(70):
    if i == 30:
        go.set()
    for _ in range(8):
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    mark_step()
"""


def _line(source: str, text: str) -> int:
    """The line number (1-based) of the line of ``source`` that holds ``text``."""
    (n,) = [i for i, line in enumerate(source.splitlines(), 1) if text in line]
    return n


def _doc(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    with open_profile(path) as p:
        doc = advise_json(p, include_info=True)
    return doc, {a["rule"]: a for a in doc["advice"]}


def test_steps_the_jobs_own_thread_made_long_are_the_codes(tmp_path: Path) -> None:
    """The writer's 1.5 s of serialising makes steps from 30 on many times the median
    while the loop's thread is off the CPU with its stack in computation: the old verdict
    was "the machine paused it". The samples say that the job's thread ckpt-writer ran
    Python through those steps, in serialise_state, and the process's CPU counter that
    the job was not stopped. The steps stay the code's: no warning, counted in the
    outlier advice's gain, which names the thread and proposes taking its work off the
    GIL."""
    out = record(tmp_path, GIL_JOB) / "rank0.aiprof"
    doc, items = _doc(out)
    o = items["steps.outlier"]
    s = o["summary"]
    assert "while the job's thread ckpt-writer ran `serialise_state` at " in s and "holds the GIL" in s, (
        s,
        doc["warnings"],
    )
    assert "The job ran; the machine did not pause it" in s
    with open_profile(out) as p:
        pauses = machine_pauses(Context(p))
        excess = {int(r["step"]): float(r["excess_us"]) for r in run(p, "outlier_steps").rows}
    contended = {step for (_, step), pause in pauses.items() if pause.contended}
    assert contended and min(contended) >= 30, {k: (v.duration_us, v.runner) for k, v in pauses.items()}
    dumps = _line(GIL_JOB, "pickle.dumps(state)")
    for step in contended:
        pause = pauses[(0, step)]
        assert not pause.machine and pause.runner is not None and pause.source == "step"
        assert (pause.runner.name, pause.runner.function, pause.runner.line) == (
            "ckpt-writer",
            "serialise_state",
            dumps,
        )
        assert pause.runner.file.endswith("job.py") and pause.runner.samples >= pause.runner.mine / 2
        # The process's CPU counter (10 Hz) may have no reading in a short window on a
        # loaded machine: where it has one, the job's other threads used the CPU.
        if pause.others_cpu_us is not None:
            assert pause.others_cpu_us >= 0.1 * pause.window_us
        assert pause.off_cpu_us >= 0.5 * pause.excess_us and (pause.computing_pct or 0.0) >= 50.0
    assert any(pauses[(0, step)].others_cpu_us is not None for step in contended)
    ev = o["evidence"]
    # The steps are the code's: in the advice's steps and gain, not among the machine's.
    assert set(ev["contended_steps"]) == contended and contended <= set(ev["outlier_steps"])
    assert o["severity"] != "info" and o["gain_pct"] > 0
    assert o["estimate_us"] >= sum(excess[n] for n in contended) - 1.0
    said = [w for w in doc["warnings"] if any(w.startswith(f"Step {n} took") for n in contended)]
    assert not said, said
    # The thread that ran, and where: the line of serialise_state that holds the GIL.
    assert (ev["thread"], ev["thread_function"], ev["thread_line"]) == ("ckpt-writer", "serialise_state", dumps)
    assert ev["thread_file"].endswith("job.py")
    assert "ckpt-writer" in o["fix"] and "process of its own" in o["fix"] and "release the GIL" in o["fix"]
    if ev["step"] in contended:
        # Most of the outlier time is the writer's: the advice is about it.
        assert "The machine paused" not in s.split(" Not counted: ")[0]
        assert o["fix"].startswith("Take the work of the job's thread ckpt-writer (`serialise_state` at ")
        assert "ProcessPoolExecutor" in o["snippets"]["pytorch"]


#: A loop over a fixed batch whose steps (one per optimizer.step(), found by the
#: recorder) wait about 20 ms in the user's code: MODE "sleep" sleeps; "queue" gets from
#: a queue of one item that a producer thread fills every 20 ms.
WAIT_JOB = """
import queue, sys, threading, time, torch
torch.set_num_threads(1)
MODE = sys.argv[1]
q = queue.Queue(maxsize=1)

def producer():
    while True:
        time.sleep(0.02)
        q.put(1)

if MODE == "queue":
    threading.Thread(target=producer, name="producer", daemon=True).start()
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(m.parameters(), 1e-3)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for step in range(60):
    loss = torch.nn.functional.cross_entropy(m(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if MODE == "sleep":
        time.sleep(0.025)
    else:
        item = q.get()
"""


@pytest.mark.parametrize(
    ("mode", "call"), [("sleep", "time.sleep(0.025)"), ("queue", "item = q.get()")], ids=["sleep", "queue"]
)
def test_user_python_that_waits_is_told_to_overlap_the_wait(tmp_path: Path, mode: str, call: str) -> None:
    """The hot line of the loop's own Python is a wait: "User Python" says the step waits
    there, off the CPU (the line's call, the samples under it, the steps' CPU time) and
    proposes overlapping or removing the wait; before, it proposed vectorising a loop
    over a tensor's elements."""
    out = record(tmp_path, WAIT_JOB, args=(mode,), out=mode) / "rank0.aiprof"
    _, items = _doc(out)
    a = items["python.preprocessing"]
    ev = a["evidence"]
    assert ev["line"] == _line(WAIT_JOB, call) and ev["file"].endswith("job.py")
    assert a["title"] == "The step waits off the CPU in the user's code (Python samples)"
    assert f" The step waits there, off the CPU: the line calls `{call}`" in a["summary"]
    assert ev["call"] == call and "line" in ev["waits"] and "cpu" in ev["waits"]
    # Off the CPU for most of that code's time in the measured steps.
    assert ev["off_cpu_us"] >= python_time.WAIT_SHARE * ev["measured_phase_us"] > 0
    if mode == "queue":
        # The samples wait under the line, in the queue's condition.
        assert "stack" in ev["waits"] and ev["waits_in"] == "`Queue.get` (queue.py)" and ev["waiting_pct"] >= 50.0
    assert a["fix"] == python_time._WAIT_FIX and "Vectorise" not in a["fix"]
    assert "ThreadPoolExecutor" in a["snippets"]["pytorch"] and "vector_norm" not in a["snippets"]["pytorch"]
    assert "It runs in the training loop itself" not in a["summary"]


#: A loop that saves its model and optimizer state (16 MiB) to a file every step.
SAVE_JOB = """
import sys, torch
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024))
opt = torch.optim.SGD(m.parameters(), 1e-3)
x = torch.randn(16, 1024)
for step in range(40):
    m(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, sys.argv[1])
"""


def test_a_checkpoint_in_the_loop_is_told_to_save_less_often_or_in_the_background(tmp_path: Path) -> None:
    """The loop's costliest own line was a torch.save every step: "User Python" proposed
    vectorising a loop over a tensor's elements. It now says the step saves a checkpoint
    and proposes saving less often, or writing it beside the steps."""
    out = record(tmp_path, SAVE_JOB, args=(str(tmp_path / "ckpt.pt"),)) / "rank0.aiprof"
    _, items = _doc(out)
    a = items["python.preprocessing"]
    ev = a["evidence"]
    assert ev["line"] == _line(SAVE_JOB, "torch.save(") and ev["file"].endswith("job.py")
    assert a["title"] == "The step saves a checkpoint (Python samples)"
    assert "That line saves state (torch.save(" in a["summary"]
    assert a["fix"] == python_time._SAVE_FIX and "Vectorise" not in a["fix"]
    assert "threading.Thread(target=torch.save" in a["snippets"]["pytorch"]


def test_each_outlier_step_is_listed_once_whatever_the_ranks() -> None:
    """A synchronous job's ranks share their outlier steps: the advice listed
    [6, 6, 21, 21, 19, 19] for a 2-rank job; each step once, in the order given."""
    from aiprof.advise.steps import _evidence

    rows = [
        {"rank": r, "step": s, "excess_us": 10.0 * s}
        | {"duration_us": 1.0, "median_us": 1.0, "ratio": 1.0, "what": None, "what_pct": None}
        for s in (6, 21, 19)
        for r in (0, 1)
    ]
    ev = _evidence(rows[0], rows)
    assert ev["outlier_steps"] == [6, 21, 19]
    assert ev["excess_us"] == sum(10.0 * s for s in (6, 21, 19)) * 2
