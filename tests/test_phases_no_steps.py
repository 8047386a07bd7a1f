"""A new user's trial: what a recording without steps tells, on real recordings made
here (small torch jobs).

1. An inference loop (no optimizer, no DataLoader: no steps found): the phases cover
   the job's whole run, the loop included (the events' span alone ended with the
   setup's GC pauses, so the model calls read forward 0%), and say so; a stack under
   an import is startup, not collective (``import torch`` runs ``torch/distributed/``'s
   module code) nor optimizer (``torch.optim.SGD(...)`` imports ``torch._dynamo``). The
   GC advice speaks of the run, its gain of the profiled time.
2. A job that segfaults after a few steps: its steps are lost with the recording cut
   short; the steps line says so instead of asking to mark steps.
3. In a step, an import's own frames say nothing of the work: the sample takes the
   phase of the call that imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import Query, run
from aiprof.cli.overview import compute_items
from aiprof.store import open_profile
from record_support import SPIN, record

PY = sys.executable
#: The title of a rank's phase table where it has no steps (cli/overview.py).
WHOLE_RUN_PHASES = "phases over the whole run (no steps found; from Python samples)"

#: Inference: ``import torch`` (line 4), one GC collection of a big heap, then the loop
#: with the collector off (no GC pause in the loop: its events end with the setup, as
#: the trial's loop had none of its own), a ``.tolist()`` per batch; the loop's seconds
#: go to the file named by the first argument.
INFER = """import gc
import json
import sys
import torch
import time

torch.set_num_threads(1)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
).eval()
heap = [[i] for i in range(300_000)]
for a in heap:
    a.append(a)
del heap, a
gc.collect()
gc.disable()
t0 = time.perf_counter()
with torch.no_grad():
    for i in range(200):
        x = torch.randn(64, 512)
        y = model(x).softmax(-1)
        top = y.argmax(-1).tolist()
loop_s = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"loop_s": loop_s}, f)
"""
IMPORT_TORCH_LINE = 4

#: A training loop (steps found at each optimizer.step()) that segfaults at its first step:
#: ``import torch`` is line 5, the optimizer is built on line 9.
CRASH = """import os
import signal
import time

import torch

torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
for step in range(100):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    # At its first step: a checkpoint (every second) that fell after step 1 kept the
    # steps on a fast machine, and this job is to lose them.
    os.kill(os.getpid(), signal.SIGSEGV)
"""
CRASH_IMPORT_LINE = 5

#: Marked steps of 40 ms; step 3 imports a module whose code (150 ms at import) lives
#: under a ``torch/distributed/`` folder, as the modules ``import torch`` runs do.
LAZY = (
    """import sys
import time
from aiprof.record import mark_step
"""
    + SPIN
    + """
sys.path.insert(0, sys.argv[1])
for i in range(6):
    spin(40)
    if i == 3:
        import slowcomm
    mark_step()
"""
)
SLOWCOMM = (
    """import time
"""
    + SPIN
    + """
spin(150)
"""
)


def _phases(p: Any) -> dict[str, dict[str, Any]]:
    """The phases view's rows of rank 0 over all steps (or the whole run), by phase."""
    return {r["phase"]: r for r in run(p, "phases", Query.parse(["rank=0", "step=null"])).rows}


def _tables(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {it["title"]: it for it in items if it["t"] == "table"}


def _lines(items: list[dict[str, Any]]) -> list[str]:
    return [it["text"] for it in items if it["t"] == "line"]


@pytest.fixture(scope="module")
def infer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("infer")
    out = record(folder, INFER, args=(str(folder / "loop.json"),))
    return out / "rank0.aiprof", 1e6 * json.loads((folder / "loop.json").read_text())["loop_s"]


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("crash")
    (folder / "job.py").write_text(CRASH)
    rec = subprocess.run(
        [PY, "-m", "aiprof", "record", "-o", str(folder / "out"), "--", PY, str(folder / "job.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rec.returncode != 0, rec.stderr  # the job's segfault
    return folder / "out" / "rank0.aiprof"


# -- 1. inference: the whole run, its imports as startup ---------------------------------


def test_phases_of_a_run_without_steps_cover_the_loop_and_set_the_imports_apart(infer: tuple[Path, float]) -> None:
    path, loop_us = infer
    with open_profile(path) as p:
        assert not [r for r in run(p, "steps").rows if r["step"] is not None]
        ph = _phases(p)
        hot = run(p, "phase_hotspots", Query.parse(["rank=0"])).rows
    assert sum(r["percent"] for r in ph.values()) == pytest.approx(100.0, abs=0.5)
    # The model calls of the loop are forward: most of the loop's time (they read 0 when
    # the window ended with the setup's last GC pause).
    assert ph["forward"]["samples"] > 0
    assert ph["forward"]["time_us"] > 0.5 * loop_us, (ph["forward"], loop_us)
    # import torch is startup, never a phase of the work: the job calls no collective,
    # no optimizer, no DataLoader.
    assert ph["startup"]["samples"] > 0 and ph["startup"]["percent"] > 5.0
    for phase in ("collective", "optimizer", "data_loading", "backward"):
        assert ph[phase]["samples"] == 0, ph[phase]
    lines = {(r["phase"], r["line"]) for r in hot if r["file"].endswith("job.py")}
    assert ("startup", IMPORT_TORCH_LINE) in lines
    assert {ln for phase, ln in lines if phase != "startup"} & {IMPORT_TORCH_LINE} == set()


def test_report_says_the_phases_cover_the_whole_run(infer: tuple[Path, float]) -> None:
    path, _ = infer
    with open_profile(path) as p:
        items = compute_items(p)
    table = _tables(items)[f"rank 0: {WHOLE_RUN_PHASES}"]
    cats = [row[0] for row in table["rows"]]
    assert "forward" in cats and "startup" in cats and "collective" not in cats and "optimizer" not in cats
    lines = _lines(items)
    assert "steps: none found (mark them with aiprof.record.mark_step())" in lines
    assert any(t.startswith("[dim]startup: samples under an import") for t in lines)
    assert not any("step time by phase" in t for t in _tables(items))


def test_gc_advice_without_steps_speaks_of_the_run(infer: tuple[Path, float]) -> None:
    from aiprof.advise import evaluate

    path, _ = infer
    with open_profile(path) as p:
        gc = evaluate(p, only=["sync.gc_pauses"])[0]
        items = compute_items(p)
    # The collection of the big heap (and import torch's) paused the run: no steps.
    assert gc.advice is not None and gc.advice.summary.startswith("Garbage collection pauses the run for up to ")
    ev = gc.advice.evidence
    assert ev["max_pause_us"] > 1000.0
    # import torch's collections ran under an import, before any setup a freeze could
    # follow: said, and not in the gain (every pause is one or the other).
    with open_profile(path) as p:
        every = p.sql("SELECT sum(dur) / 1e3 AS us, count(*) AS n FROM events WHERE kind = 'gc'").to_pylist()[0]
    assert ev["gc_under_imports_us"] > 1000.0 and ev["gc_outside_steps_us"] == 0.0
    assert abs(ev["gc_us"] + ev["gc_under_imports_us"] - every["us"]) < 1.0 and ev["pauses"] < every["n"]
    assert f"{ev['gc_under_imports_us'] / 1000:.1f} ms more ran under imports" in gc.advice.summary
    advice = [t for t in _lines(items) if "] Garbage-collector pauses: Garbage collection pauses the run" in t]
    assert len(advice) == 1 and advice[0].endswith("% of the profiled time)"), advice
    # aiprof advise's sum of the gains says what they are shares of, as the items do.
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "advise", str(path)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert "% of profiled time (each µs counted for one cause)" in r.stdout, r.stdout[-600:]
    assert "% of step time" not in r.stdout
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "aiprof", "advise", str(path), "--format", "json"],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )
    assert doc["gain_of"] == "profiled time" and doc["advice"]


def test_the_notebook_says_what_the_gains_are_shares_of(infer: tuple[Path, float]) -> None:
    """The notebook's advice and summary said "% of step time" of a run without steps,
    whose gains are shares of the profiled time (as aiprof advise says)."""
    from aiprof.notebook.handle import ProfileHandle
    from aiprof.notebook.inline import summary_html, summary_text

    path, _ = infer
    h = ProfileHandle([path])
    try:
        items = h.advise()
        assert items.gain_of == "profiled time" and len(items) >= 1
        html = items._repr_html_()
        pct = items.to_json()[0]["gain_pct"]
        gain = f"expected gain {pct:.1f}% of profiled time"
        assert gain in html and "% of step time" not in html
        assert gain in summary_html(h) and "% of step time" not in summary_html(h)
        # The breakdown and the busy share are of the whole profile, as the CLI says them.
        summary = summary_html(h)
        assert "Time breakdown over the whole profile (no steps found)" in summary and "of step time" not in summary
        text = summary_text(h)
        assert f"(expected gain {pct:.1f}% of profiled time)" in text, text
        assert "% of step time" not in text
    finally:
        h.close()


# -- 2. a job cut short: its steps lost --------------------------------------------------


def test_a_crashed_job_says_its_steps_may_be_lost_and_its_imports_are_startup(crashed: Path) -> None:
    with open_profile(crashed) as p:
        meta = p.metas[0]
        assert meta["partial"] is True
        assert not [r for r in run(p, "steps").rows if r["step"] is not None]
        items = compute_items(p)
        ph = _phases(p)
        hot = run(p, "phase_hotspots", Query.parse(["rank=0"])).rows
    lines = _lines(items)
    steps = [t for t in lines if t.startswith("steps:")]
    assert steps == [
        f"steps: none found: the recording was cut short ({meta['partial_reason']}), so its steps may have been lost"
    ]
    assert not any("mark_step" in t for t in lines)
    assert f"rank 0: {WHOLE_RUN_PHASES}" in _tables(items)
    # import torch (and the lazy imports building the optimizer) are startup: no
    # collective, and the optimizer is at most the few samples of its own steps.
    assert ph["startup"]["samples"] > 0 and ph["collective"]["samples"] == 0
    assert ph["optimizer"]["percent"] < 5.0, ph["optimizer"]
    at_import = {r["phase"] for r in hot if r["file"].endswith("job.py") and r["line"] == CRASH_IMPORT_LINE}
    assert at_import == {"startup"}


# -- 3. an import inside a step ----------------------------------------------------------


def test_an_import_in_a_step_takes_the_phase_of_its_caller(tmp_path: Path) -> None:
    ext = tmp_path / "ext" / "torch" / "distributed"
    ext.mkdir(parents=True)
    (ext / "slowcomm.py").write_text(SLOWCOMM)
    out = record(tmp_path, LAZY, args=(str(ext),)) / "rank0.aiprof"
    with open_profile(out) as p:
        rows = run(p, "phases", Query.parse(["rank=0", "step=3"])).rows
        every = run(p, "phases", Query.parse(["rank=0"])).rows
        steps = {r["step"]: r for r in run(p, "steps").rows}
    step3 = {r["phase"]: r for r in rows}
    # ~19 samples of the 190 ms step: the import's spin is the loop's own code, not a
    # collective (a frame under torch/distributed/); steps have no startup.
    assert step3["collective"]["samples"] == 0
    assert step3["other_python"]["samples"] >= 8 and step3["other_python"]["percent"] == pytest.approx(100.0)
    assert "startup" not in {r["phase"] for r in every}
    assert steps[3]["other_python_us"] == pytest.approx(steps[3]["duration_us"], rel=1e-6)
    assert steps[3]["duration_us"] > 150_000
