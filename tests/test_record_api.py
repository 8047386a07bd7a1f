"""The recording API: schedule, sampler, Profiler life cycle, failures, torch ops."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.errors import AiprofError
from aiprof.record import Profiler, ProfilerAction, active, annotate, mark_step, schedule
from aiprof.record.job.collectors.base import Collector, PollingThread, fail
from aiprof.record.job.collectors.python_stacks import PythonSampler
from aiprof.record.job.schedule import parse_schedule
from aiprof.store import open_profile


@pytest.fixture(autouse=True)
def no_profiler_left_running() -> Iterator[None]:
    assert active() is None, "a profiler was left running before this test"
    yield
    assert active() is None, "this test left a profiler running"


def rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    with open_profile(path) as p:
        return p.con.execute(query).fetchall()


def meta(path: Path) -> dict[str, Any]:
    return json.loads((path / "profile.json").read_text())


# -- schedule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "wait,warmup,active_,repeat,skip_first", [(1, 1, 2, 0, 0), (0, 1, 3, 2, 1), (2, 0, 1, 1, 3), (1, 2, 2, 3, 0)]
)
def test_schedule_matches_torch(wait: int, warmup: int, active_: int, repeat: int, skip_first: int) -> None:
    tp = pytest.importorskip("torch.profiler")
    ours = schedule(wait=wait, warmup=warmup, active=active_, repeat=repeat, skip_first=skip_first)
    theirs = tp.schedule(wait=wait, warmup=warmup, active=active_, repeat=repeat, skip_first=skip_first)
    assert [ours(i).name for i in range(40)] == [theirs(i).name for i in range(40)]


def test_schedule_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="active"):
        schedule(wait=1, warmup=1, active=0)
    with pytest.raises(ValueError, match="wait"):
        schedule(wait=-1, warmup=1, active=1)
    with pytest.raises(ValueError, match="3 to 5"):
        parse_schedule("1,2")
    assert parse_schedule("1,1,2,1")(2) is ProfilerAction.RECORD
    assert parse_schedule("1,1,2,1")(4) is ProfilerAction.NONE


# -- the Python sampler, on a fake clock ----------------------------------------------


def parked_here(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait()


@contextlib.contextmanager
def parked_thread() -> Iterator[threading.Thread]:
    """A thread named "parked", waiting inside parked_here() until the block ends."""
    ready, release = threading.Event(), threading.Event()
    t = threading.Thread(target=parked_here, args=(ready, release), name="parked")
    t.start()
    ready.wait()
    try:
        yield t
    finally:
        release.set()
        t.join()


def test_sampler_interns_every_thread_stack() -> None:
    with parked_thread() as t:
        s = PythonSampler(rate_hz=100)
        s.sample(sys._current_frames(), 1000)
        s.sample(sys._current_frames(), 2000)
    dump = s.dump(Path("."))
    assert dump["ts"].count(1000) >= 2  # this thread and the parked one, at least
    frames = {f[0]: f for f in dump["frames"]}
    parked = [sid for sid, tid in zip(dump["stack"], dump["tid"]) if tid == t.native_id]
    assert len(parked) == 2 and parked[0] == parked[1], "the same stack must intern to the same node"
    chain = []
    node = parked[0]
    while node >= 0:
        chain.append(frames[node][2])
        node = frames[node][1]
    assert "parked_here" in chain and chain[0] != "parked_here"  # leaf is inside Event.wait
    assert dump["thread_names"][str(t.native_id)] == "parked"


def test_sampler_lines_are_those_of_f_lineno() -> None:
    with parked_thread() as t:
        s = PythonSampler()
        frames = sys._current_frames()
        s.sample({t.ident: frames[t.ident]}, 1)  # type: ignore[index, dict-item]
        expected = []
        f: Any = frames[t.ident]  # type: ignore[index]
        while f is not None:
            expected.append((f.f_code.co_qualname, f.f_code.co_filename, f.f_lineno))
            f = f.f_back
    dump = s.dump(Path("."))
    by_id = {f[0]: f for f in dump["frames"]}
    got, node = [], dump["stack"][0]
    while node >= 0:
        got.append(tuple(by_id[node][2:5]))
        node = by_id[node][1]
    assert got == expected


def _probe(s: PythonSampler) -> int:
    s.sample({threading.get_ident(): sys._getframe()}, 1)
    return 1


def _twice_on_one_line(s: PythonSampler) -> int:
    return _probe(s) + _probe(s)


def test_sampler_merges_calls_on_the_same_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two call sites on one line are two instruction offsets but one frame; with a
    # one-entry stack cache, every sample takes the slow path: same result.
    monkeypatch.setattr("aiprof.record.job.collectors.python_stacks.STACK_CACHE_SIZE", 1)
    s = PythonSampler()
    _twice_on_one_line(s)
    first = s.dump(Path("."))
    _twice_on_one_line(s)
    dump = s.dump(Path("."))
    assert dump["frames"][: len(first["frames"])] == first["frames"]
    st = dump["stack"]
    assert len(st) == 4 and st[0] == st[1] and st[2] == st[3] and st[0] != st[2]
    keys = [tuple(f[1:]) for f in dump["frames"]]
    assert len(keys) == len(set(keys)), "one frame per (parent, function, file, line)"


def test_sampler_skips_its_own_threads_and_respects_recording() -> None:
    s = PythonSampler()
    s.own_threads.add(threading.get_ident())
    s.sample({threading.get_ident(): sys._getframe()}, 5)
    assert s.ts == []
    s.set_recording(False)
    s._tick()
    assert s.ts == []
    with pytest.raises(ValueError):
        PythonSampler(rate_hz=0)


# -- the Profiler -------------------------------------------------------------------------


def busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_profiler_writes_steps_annotations_samples_and_counters(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with Profiler(output=out, host=["python", "system"], device=True) as prof:
        sampler = next(c for c in prof._controller.collectors if isinstance(c, PythonSampler))  # type: ignore[union-attr]
        for _ in range(3):
            with annotate("work"):
                busy(1000)
                sampler.sample(sys._current_frames(), time.monotonic_ns())
            prof.step()

        @annotate("decorated")
        def f() -> int:
            return busy(10)

        f()
    path = out / "rank0.aiprof"
    assert prof.path == path
    m = meta(path)
    assert m["partial"] is False and m["ranks"] == [0] and m["world_size"] == 1 and m["clock"] == "unix"
    assert abs(m["time_origin_ns"] - time.time_ns()) < 3600 * 10**9
    steps = rows(path, "select name, step, ts, dur from events where kind = 'step' order by ts")
    assert [(n, s) for n, s, _, _ in steps] == [("ProfilerStep#0", 0), ("ProfilerStep#1", 1), ("ProfilerStep#2", 2)]
    assert all(ts >= 0 and dur >= 0 for _, _, ts, dur in steps)
    ann = rows(path, "select name, step from events where kind = 'user_annotation' order by ts")
    assert ann == [("work", 0), ("work", 1), ("work", 2), ("decorated", None)]
    (n_samples,) = rows(path, "select count(*) from samples")[0]
    assert n_samples >= 3
    funcs = {r[0] for r in rows(path, "select function from frames")}
    assert "test_profiler_writes_steps_annotations_samples_and_counters" in funcs
    assert any(d["type"] == "cpu" for d in m["devices"])
    assert str(prof.analyse()).startswith(f"wrote {path}")


def test_gc_pauses_become_events_and_counters(tmp_path: Path) -> None:
    import gc

    with Profiler(output=tmp_path / "g.aiprof", host=["system"], device=False):
        gc.collect()
    path = tmp_path / "g.aiprof"
    names = [r[0] for r in rows(path, "select name from events where kind = 'gc'")]
    assert "gc gen2" in names
    assert rows(path, "select count(*) from counters where metric = 'gc_pause'")[0][0] == len(names)


def test_exception_in_block_writes_partial_profile(tmp_path: Path) -> None:
    with (
        pytest.raises(ZeroDivisionError),
        Profiler(output=tmp_path / "p.aiprof", host=["python"], device=False) as prof,
    ):
        prof.step()
        _ = 1 / 0
    m = meta(tmp_path / "p.aiprof")
    assert m["partial"] is True and "ZeroDivisionError" in m["partial_reason"]


def test_only_one_profiler_at_a_time(tmp_path: Path) -> None:
    with Profiler(output=tmp_path / "a.aiprof", host=[], device=False):
        with pytest.raises(AiprofError, match="already running"):
            Profiler(output=tmp_path / "b.aiprof", host=[], device=False).start()
    with pytest.raises(AiprofError, match="unknown host"):
        Profiler(host=["nope"])


def test_mindspore_style_start_at_10_stop_at_20(tmp_path: Path) -> None:
    prof = Profiler(output=tmp_path / "ms.aiprof", start_profile=False, host=["system"], device=False)
    with prof:
        assert not prof.running
        for i in range(30):
            if i == 10:
                prof.start()
            if i == 20:
                prof.stop()
            busy(100)
            mark_step()
    summary = prof.analyse()
    assert summary.steps == 10 and not summary.partial
    assert rows(tmp_path / "ms.aiprof", "select count(*) from events where kind = 'step'")[0][0] == 10


def test_rank_and_world_size_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with Profiler(output=tmp_path / "job", host=[], device=False) as prof:
        prof.step()
    m = meta(tmp_path / "job" / "rank3.aiprof")
    assert m["ranks"] == [3] and m["world_size"] == 4


# -- failures ----------------------------------------------------------------------------


class BrokenOnStep(Collector):
    name = "broken"

    def on_step(self, step: int) -> None:
        raise RuntimeError("disk on fire")

    def dump(self, raw_dir: Path) -> dict[str, Any]:
        return {}


class BrokenThread(Collector):
    name = "broken_thread"

    def __init__(self) -> None:
        super().__init__()
        self.failed_event = threading.Event()

    def start(self) -> None:
        def on_error(e: BaseException) -> None:
            fail(self, e, "polling")
            self.failed_event.set()

        self.poller = PollingThread("broken", 0.001, self.tick, on_error, self.own_threads)
        self.poller.start()

    def tick(self) -> None:
        raise OSError("device vanished")

    def stop(self) -> None:
        self.poller.stop()

    def dump(self, raw_dir: Path) -> dict[str, Any]:
        return {}


def test_a_failing_collector_warns_once_and_the_job_runs_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken, thread = BrokenOnStep(), BrokenThread()
    with caplog.at_level(logging.WARNING, logger="aiprof.record"):
        with Profiler(output=tmp_path / "f.aiprof", host=["system"], device=False, collectors=[broken, thread]) as prof:
            assert thread.failed_event.wait(30)
            for _ in range(5):
                prof.step()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("broken failed" in w for w in warnings) == 1
    assert sum("broken_thread failed" in w for w in warnings) == 1
    m = meta(tmp_path / "f.aiprof")
    assert m["partial"] is False
    assert any("disk on fire" in w for w in m["warnings"]) and any("device vanished" in w for w in m["warnings"])
    assert rows(tmp_path / "f.aiprof", "select count(*) from events where kind = 'step'")[0][0] == 5


# -- torch operators ------------------------------------------------------------------------


def test_ops_follow_the_schedule_and_share_the_time_origin(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    x = torch.ones(32, 32)
    out = tmp_path / "ops.aiprof"
    with Profiler(output=out, host=["ops"], device=False, schedule=schedule(wait=1, warmup=1, active=2, repeat=1)) as p:
        for _ in range(5):
            with annotate("mm"):
                x = torch.tanh(x @ x)
            p.step()
    steps = {s: (ts, ts + d) for s, ts, d in rows(out, "select step, ts, dur from events where kind = 'step'")}
    assert sorted(steps) == [0, 1, 2, 3, 4], "torch's own ProfilerStep# events must not double ours"
    ops = rows(out, "select step, ts, dur from events where kind = 'cpu_op' and name = 'aten::mm'")
    assert sorted({s for s, _, _ in ops}) == [2, 3]
    for s, ts, dur in ops:
        lo, hi = steps[s]
        assert lo <= ts and ts + dur <= hi, "torch's clock must map into the step that ran the op"
    ann = rows(out, "select cat, step from events where kind = 'user_annotation' and name = 'mm' order by ts")
    assert ann == [("aiprof", i) for i in range(5)], "annotate's record_function twin must not be doubled"
    assert not rows(out, "select name from events where name like 'aiprof::%'")


def _train(n: int, step: Any = None) -> None:
    """A loop with an optimizer; each iteration is a record_function ``iter_<i>``."""
    import torch
    from torch.profiler import record_function

    torch.set_num_threads(1)
    m = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(n):
        with record_function(f"iter_{i}"):
            opt.zero_grad()
            m(torch.ones(4, 8)).sum().backward()
            opt.step()
        if step is not None:
            step()


@pytest.mark.parametrize("steps_from", ["step()", "optimizer"])
@pytest.mark.parametrize("sched", [(1, 1, 3, 1, 0), (0, 1, 2, 2, 1)])
def test_profiler_schedule_records_the_iterations_torch_profiler_records(
    tmp_path: Path, steps_from: str, sched: tuple[int, int, int, int, int]
) -> None:
    tp = pytest.importorskip("torch.profiler")
    wait, warmup, active_, repeat, skip_first = sched
    kw = {"wait": wait, "warmup": warmup, "active": active_, "repeat": repeat, "skip_first": skip_first}
    n = 10
    with tp.profile(activities=[tp.ProfilerActivity.CPU], schedule=tp.schedule(**kw), acc_events=True) as tprof:
        _train(n, tprof.step)
    theirs = sorted({e.name for e in tprof.events() if e.name.startswith("iter_")})
    out = tmp_path / "s.aiprof"
    with Profiler(output=out, host=["ops"], device=False, schedule=schedule(**kw)) as p:
        _train(n, p.step if steps_from == "step()" else None)
    ours = sorted(r[0] for r in rows(out, "select distinct name from events where name like 'iter_%'"))
    assert theirs and ours == theirs
    assert len(rows(out, "select * from events where kind = 'step'")) == n


def _own_callback(s: PythonSampler) -> int:
    s.sample({threading.get_ident(): sys._getframe()}, 1)
    return 1


def test_sampler_shows_aiprof_callbacks_by_their_label(monkeypatch: pytest.MonkeyPatch) -> None:
    # The GC callback is where samples that waited out a collection land: they show as
    # the collection, not as an aiprof function.
    from aiprof.record.job.collectors import base
    from aiprof.record.job.collectors.system import SystemCollector

    assert SystemCollector._on_gc.__code__ in base.SHOWN_AS
    base.show_as(_own_callback.__code__, "[collect]")
    monkeypatch.setitem(base.SHOWN_AS, _own_callback.__code__, base.SHOWN_AS.pop(_own_callback.__code__))
    s = PythonSampler()
    _own_callback(s)
    dump = s.dump(Path("."))
    by_id = {f[0]: f for f in dump["frames"]}
    leaf = by_id[dump["stack"][0]]
    assert leaf[2:] == ("[collect]", "<aiprof>", 0)
    assert by_id[leaf[1]][2] == "test_sampler_shows_aiprof_callbacks_by_their_label"


# -- an output that holds an earlier recording (record/launcher/output_guard.py) ----------


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden raw folders included), by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _model() -> tuple[Any, Any]:
    """A real model and its optimizer: a step of it changes its weights."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 2)
    return m, torch.optim.SGD(m.parameters(), lr=0.1)


def _fit(m: Any, opt: Any, steps: int, prof: Profiler | None = None) -> None:
    import torch

    for _ in range(steps):
        opt.zero_grad()
        m(torch.ones(4, 8)).sum().backward()
        opt.step()
        if prof is not None:
            prof.step()


@pytest.mark.parametrize("name", ["run", "run.aiprof"])
def test_an_output_holding_a_recording_is_refused_before_anything_runs(tmp_path: Path, name: str) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / name
    with Profiler(output=out, host=["python", "system"], device=False) as p:
        _fit(*_model(), 3, p)
    profile = out if name.endswith(".aiprof") else out / "rank0.aiprof"
    assert rows(profile, "select count(*) from events where kind = 'step'") == [(3,)]
    if not name.endswith(".aiprof"):
        (out / "notes.txt").write_text("the user's own notes\n")
    before = files(tmp_path)
    m, opt = _model()
    weights = m.weight.detach().clone()
    with pytest.raises(AiprofError) as refused:
        with Profiler(output=out, host=["python", "system"], device=False) as p:
            _fit(m, opt, 3, p)
    if name.endswith(".aiprof"):
        assert str(refused.value) == f"{out} is an earlier recording: give another output, or force=True to replace it"
    else:
        assert str(refused.value) == (
            f"{out} already holds a recording (rank0.aiprof): give another output, or force=True to replace it"
        )
    assert torch.equal(m.weight, weights)  # the block never ran: refused at construction
    assert files(tmp_path) == before  # the earlier profile byte for byte, nothing added
    # The MindSpore style is refused as early: at construction, not at start().
    with pytest.raises(AiprofError, match="force=True to replace it"):
        Profiler(output=out, start_profile=False, host=["system"], device=False)
    assert files(tmp_path) == before


def test_force_replaces_the_recording_and_keeps_the_other_files(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "run"
    with Profiler(output=out, host=["python", "system"], device=False) as p:
        _fit(*_model(), 2, p)
    first = meta(out / "rank0.aiprof")
    (out / "notes.txt").write_text("the user's own notes\n")
    m, opt = _model()
    with Profiler(output=out, host=["python", "system"], device=False, force=True) as p:
        _fit(m, opt, 5, p)
    assert sorted(q.name for q in out.iterdir()) == ["notes.txt", "rank0.aiprof"]  # no raw folder left either
    assert meta(out / "rank0.aiprof")["time_origin_ns"] > first["time_origin_ns"]
    assert rows(out / "rank0.aiprof", "select count(*) from events where kind = 'step'") == [(5,)]
    assert (out / "notes.txt").read_text() == "the user's own notes\n"


def test_an_unfinished_recording_is_refused_and_still_recoverable(tmp_path: Path) -> None:
    from aiprof.record.finalizer import finalize

    out = tmp_path / "run"
    # Raw data only, no profile: what a recording killed before it finished leaves.
    with Profiler(output=out, host=["system"], device=False, defer=True) as p:
        for _ in range(4):
            p.step()
    raw = p.raw_dir
    assert raw is not None and raw.is_dir() and not (out / "rank0.aiprof").exists()
    before = files(tmp_path)
    ran: list[int] = []
    with pytest.raises(AiprofError) as refused:
        with Profiler(output=out, host=["system"], device=False):
            ran.append(1)
    assert str(refused.value) == (
        f"{out} already holds an unfinished recording ({raw.name}: aiprof recover {out} writes its profiles): "
        "give another output, or force=True to replace it"
    )
    assert ran == [] and files(tmp_path) == before
    summary = finalize(raw)  # what aiprof recover does: nothing was lost
    assert summary.steps >= 3 and (out / "rank0.aiprof" / "profile.json").is_file()


def test_profiles_aiprof_record_did_not_write_are_refused_even_with_force(tmp_path: Path) -> None:
    from aiprof.importers import import_paths

    out = tmp_path / "run"
    samples = Path(__file__).resolve().parent / "samples"
    import_paths([samples / "dmon_d10.txt"], out / "dmon.aiprof")
    before = files(tmp_path)
    for force in (False, True):
        with pytest.raises(AiprofError) as refused:
            Profiler(output=out, host=["system"], device=False, force=force)
        assert str(refused.value) == (
            f"{out} already holds profiles (dmon.aiprof) that aiprof record did not write: give another output "
            "(force=True replaces only an earlier recording)"
        )
        assert files(tmp_path) == before


def test_without_an_output_each_profiler_gets_a_folder_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiprof.record.job import controller

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(controller, "default_output", lambda: "aiprof-20261207-120000")  # two in one second
    with Profiler(host=["system"], device=False) as a:
        a.step()
    before = files(tmp_path)
    with Profiler(host=["system"], device=False) as b:
        b.step()
        b.step()
    assert a.path == Path("aiprof-20261207-120000/rank0.aiprof")
    assert b.path == Path("aiprof-20261207-120000-2/rank0.aiprof")
    after = files(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before  # the first one kept
    assert rows(b.path, "select count(*) from events where kind = 'step'") == [(2,)]


def test_under_a_launcher_each_rank_checks_its_own_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "job"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with Profiler(output=out, host=["system"], device=False) as p:  # rank 1 of an earlier run
        p.step()
    earlier = files(out)
    monkeypatch.setenv("RANK", "0")
    with Profiler(output=out, host=["system"], device=False) as r0:  # its own rank0.aiprof is new
        raw0 = r0._controller.raw_dir  # type: ignore[union-attr]
        # Rank 1 of this run starts while rank 0 records beside it: refused for its own
        # earlier profile, not for rank 0's raw folder.
        monkeypatch.setenv("RANK", "1")
        with pytest.raises(AiprofError) as refused:
            Profiler(output=out, host=["system"], device=False)
        assert str(refused.value) == (
            f"{out / 'rank1.aiprof'} is an earlier recording: give another output, or force=True to replace it"
        )
        assert {k: v for k, v in files(out).items() if k.startswith("rank1")} == earlier
        # force replaces rank 1's earlier profile only: rank 0's recording goes on.
        Profiler(output=out, host=["system"], device=False, force=True)
        assert not (out / "rank1.aiprof").exists() and Path(raw0).is_dir()
        r0.step()
    assert meta(out / "rank0.aiprof")["ranks"] == [0]
