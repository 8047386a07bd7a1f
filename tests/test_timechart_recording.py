"""``aiprof timechart`` of a real recording (``aiprof record --ops`` of a small torch
job): every thread's slices nest, and the Python samples are drawn as their stacks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from aiprof.export.chrome_trace import TRACK_OFFSETS
from aiprof.export.samples import StackTable
from aiprof.record import Profiler, schedule
from aiprof.store import open_profile
from record_support import record

PY = sys.executable

JOB = """
import gc, torch, aiprof
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(m.parameters(), lr=0.1)

def python_work(n):
    return sum(i * i for i in range(n))

for i in range(12):
    with aiprof.annotate("batch"):
        x = torch.randn(32, 64)
        python_work(60_000)
    opt.zero_grad(); m(x).sum().backward(); opt.step()
    if i % 4 == 0:
        gc.collect()
"""


def _ns(us: Any) -> int:
    return round(float(us) * 1000)


def improper_overlaps(events: list[dict[str, Any]]) -> int:
    """Slices of one (pid, tid) that overlap without one holding the other."""
    by: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            s = _ns(e["ts"])
            by[(e["pid"], e["tid"])].append((s, s + _ns(e["dur"])))
    bad = 0
    for spans in by.values():
        spans.sort(key=lambda x: (x[0], -x[1]))
        open_: list[tuple[int, int]] = []
        for s, t in spans:
            while open_ and open_[-1][1] <= s:
                open_.pop()
            if open_ and t > open_[-1][1]:
                bad += 1
            else:
                open_.append((s, t))
    return bad


def timechart(profile: Path, out: Path, *extra: str) -> list[dict[str, Any]]:
    r = subprocess.run(
        [PY, "-m", "aiprof", "timechart", str(profile), "-o", str(out), *extra], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    events: list[dict[str, Any]] = json.loads(out.read_text())["traceEvents"]
    return events


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    return record(tmp_path_factory.mktemp("rec"), JOB, "--ops", "--rate", "200") / "rank0.aiprof"


def test_aiprofs_slices_and_torchs_nest_on_every_track(recording: Path, tmp_path: Path) -> None:
    with open_profile(recording) as p:
        main = p.sql("SELECT tid FROM events WHERE kind = 'step' LIMIT 1").to_pylist()[0]["tid"]
        cats = {
            r["cat"]
            for r in p.sql(f"SELECT DISTINCT cat FROM events WHERE tid = {main} AND kind <> 'instant'").to_pylist()
        }
    # The store keeps aiprof's steps, annotations and GC pauses on the thread of torch's ops.
    assert {"aiprof", "python_gc", "cpu_op"} <= cats
    events = timechart(recording, tmp_path / "t.json")
    assert improper_overlaps(events) == 0
    at = {(e.get("cat"), e["name"].split("#")[0], e["tid"]) for e in events if e["ph"] == "X"}
    assert ("aiprof", "ProfilerStep", main + TRACK_OFFSETS["aiprof steps"]) in at
    assert ("aiprof", "batch", main + TRACK_OFFSETS["aiprof"]) in at
    assert ("python_gc", "gc gen2", main + TRACK_OFFSETS["aiprof"]) in at
    assert ("cpu_op", "aten::addmm", main) in at
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[main + TRACK_OFFSETS["Python samples"]].endswith("· Python samples")
    assert names[main + TRACK_OFFSETS["aiprof steps"]].endswith("· aiprof steps")
    # torch's trace and aiprof's recorder both name the main thread: one name, the
    # program's own, every time (viewers keep whichever comes last).
    named = [(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(named) == len(set(named))
    assert names[main] == "MainThread" and names[main + TRACK_OFFSETS["aiprof"]] == "MainThread · aiprof"


def test_each_sample_is_drawn_as_its_stack(recording: Path, tmp_path: Path) -> None:
    events = timechart(recording, tmp_path / "t.json")
    slices = [e for e in events if e.get("cat") == "python_sample"]
    with open_profile(recording) as p:
        table = StackTable(p)
        samples = p.sql("SELECT rank, tid, ts, stack_id FROM samples ORDER BY ts").to_pylist()
    assert len(samples) > 50
    # Merged: fewer slices than sample frames ...
    depth_sum = sum(len(table.stacks[table.stack(s["rank"], s["stack_id"])]) for s in samples)
    assert 0 < len(slices) < depth_sum / 2
    by_tid: dict[int, list[tuple[int, int, int, str]]] = defaultdict(list)
    for e in slices:
        s = _ns(e["ts"])
        by_tid[e["tid"]].append((s, s + _ns(e["dur"]), e["args"]["depth"], e["name"]))
        assert e["aiprof_synthetic"] is True
    # ... and as merged as they can be (however varied the stacks a loaded machine gives):
    # a slice that follows one of the same frame at its depth is new only because a frame
    # outside it changed at that instant (imports nest many frames all named <module>).
    at: dict[tuple[int, int, int], tuple[str, str]] = {}  # (tid, start, depth) -> frame
    for e in slices:
        at[(e["tid"], _ns(e["ts"]), e["args"]["depth"])] = (e["name"], e["args"]["file"])
    for e in slices:
        tid, depth, end = e["tid"], e["args"]["depth"], _ns(e["ts"]) + _ns(e["dur"])
        if at.get((tid, end, depth)) == (e["name"], e["args"]["file"]):
            assert any((tid, end, d) in at for d in range(depth)), (e["name"], depth)
    for smp in samples:
        track = by_tid[smp["tid"] + TRACK_OFFSETS["Python samples"]]
        ts = smp["ts"]
        drawn = [n for _, _, _, n in sorted((x for x in track if x[0] <= ts < x[1]), key=lambda x: x[2])]
        want = [table.frames[f]["name"] for f in table.stacks[table.stack(smp["rank"], smp["stack_id"])]]
        assert drawn == want


def test_no_python_samples_leaves_them_out(recording: Path, tmp_path: Path) -> None:
    events = timechart(recording, tmp_path / "t.json", "--no-python-samples")
    assert not [e for e in events if e.get("cat") == "python_sample"]
    assert [e for e in events if e.get("cat") == "cpu_op"]


def test_a_flame_never_bridges_steps_that_were_not_sampled(tmp_path: Path) -> None:
    out = tmp_path / "p.aiprof"

    def busy(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    # Every other step is outside the schedule's windows: no samples there.
    with Profiler(
        output=out, host=["python"], device=False, rate=200, schedule=schedule(wait=1, warmup=0, active=1)
    ) as p:
        for _ in range(6):
            busy(0.08)
            p.step()
    events = timechart(out, tmp_path / "t.json")
    with open_profile(out) as prof:
        steps = prof.sql("SELECT step, ts, dur FROM events WHERE kind = 'step' ORDER BY step").to_pylist()
        per_step = {
            r["step"]: r["n"]
            for r in prof.sql(
                "SELECT e.step, count(s.ts) AS n FROM events e LEFT JOIN samples s "
                "ON s.ts >= e.ts AND s.ts < e.ts + e.dur WHERE e.kind = 'step' GROUP BY e.step"
            ).to_pylist()
        }
    # 200 Hz for 80 ms: about 16 samples in a step inside a window. On a loaded machine
    # the sampler may see a window's end late, and a step outside the windows may begin
    # with a sample or two: such a step is still one the schedule left out.
    sampled = {k for k, n in per_step.items() if n >= 5}
    idle = [s for s in steps if per_step.get(s["step"], 0) <= 2]
    assert idle and sampled, f"the schedule must leave steps without samples: {per_step}"
    slices = [e for e in events if e.get("cat") == "python_sample" and e["name"].endswith("busy")]
    assert len(slices) >= len(sampled)
    for s in idle:
        mid = s["ts"] + s["dur"] // 2
        assert not [e for e in slices if _ns(e["ts"]) <= mid < _ns(e["ts"]) + _ns(e["dur"])]


@pytest.mark.parametrize("engine", ["python", "columnar"])
def test_a_reimported_timechart_leaves_the_drawn_samples_out(
    recording: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    from aiprof.importers import import_paths
    from aiprof.importers.kineto.columnar import ENGINE_ENV

    monkeypatch.setenv(ENGINE_ENV, engine)
    chart = tmp_path / "t.json"
    slices = [e for e in timechart(recording, chart) if e.get("cat") == "python_sample"]
    assert slices
    out, ctx = import_paths([chart], tmp_path / "back.aiprof", forced="kineto")
    with open_profile(out) as back, open_profile(recording) as orig:
        assert back.sql("SELECT count(*) AS n FROM events WHERE cat = 'python_sample'").to_pylist()[0]["n"] == 0
        query = "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind"
        # Every recorded event comes back with its kind; nothing is added as 'other'.
        assert back.sql(query).to_pylist() == orig.sql(query).to_pylist()
    assert [w for w in ctx.warnings if f"{len(slices)} Python sample slices" in w]
