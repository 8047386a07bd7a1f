"""Telemetry polled outside the job: ``aiprof record`` reads its child's /proc, its
Python stacks and the devices; the job keeps only its GC listener and steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiprof.record import Profiler, finalize
from aiprof.record.launcher.outside import ChildPoller
from aiprof.store import open_profile

PY = sys.executable
PROCESS_METRICS = {"proc_cpu", "sys_cpu", "rss", "threads", "ctx_switches", "read_bytes", "write_bytes"}


def counters(path: Path) -> dict[str, tuple[int, float, float, int, int, str]]:
    """metric -> (readings, min, max, first ts, last ts, unit) of the CPU's counters."""
    with open_profile(path) as p:
        got = p.con.execute(
            "SELECT metric, count(*), min(value), max(value), min(ts), max(ts), any_value(unit) "
            "FROM counters WHERE device_type = 'cpu' GROUP BY metric"
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in got}


def check_process_metrics(c: dict[str, Any], duration_ns: int) -> None:
    assert PROCESS_METRICS <= set(c), sorted(c)
    n, lo, hi, _, _, unit = c["rss"]
    assert n >= 3 and unit == "B" and 5 * 2**20 < lo <= hi < 64 * 2**30
    assert c["threads"][1] >= 1 and c["threads"][5] == "count"
    assert 0 <= c["proc_cpu"][1] and c["proc_cpu"][2] <= 100 * (os.cpu_count() or 1) + 5
    assert c["proc_cpu"][2] > 0, "the job computed: some CPU time is seen"
    assert c["ctx_switches"][5] == "1/s" and c["ctx_switches"][1] >= 0
    # Readings from the recording only: inside [origin, stop] of the job's clock.
    for m in PROCESS_METRICS:
        assert 0 <= c[m][3] <= c[m][4] <= duration_ns, m


def test_child_poller_fills_a_recording_that_left_telemetry_to_it(tmp_path: Path) -> None:
    # The poller reads this very process from "outside" (by pid), as aiprof record does.
    poller = ChildPoller(os.getpid(), {"host": ["python", "system"], "device": ["cpu"]})
    poller.start()
    prof = Profiler(tmp_path / "out", host=["system"], device=True, defer=True, telemetry_outside=True)
    prof.start()
    # No telemetry poller in the job: the system collector (its GC listener only) and the
    # device trace, which polls nothing (it waits for torch and a device it can trace).
    from aiprof.record.job.collectors.device_trace import DeviceTraceCollector

    collectors = {c.name: c for c in prof._controller.collectors}  # type: ignore[union-attr]
    assert set(collectors) == {"system", "device_trace"} and isinstance(
        collectors["device_trace"], DeviceTraceCollector
    )
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.6:
        sum(i * i for i in range(10000))
    raw = prof.stop()
    poller.stop()
    assert raw is not None
    manifest = json.loads((raw / "manifest.json").read_text())
    assert manifest["options"]["telemetry_outside"] is True and "device" not in manifest["collectors"]
    assert poller.merge(raw)
    summary = finalize(raw)
    assert summary.devices is not None and summary.devices[0].startswith("cpu 0")
    duration = round(summary.duration_s * 1e9)
    c = counters(summary.path)
    check_process_metrics(c, duration)
    assert c["cpu_util"][5] == "%" and 0 <= c["cpu_util"][1] <= c["cpu_util"][2] <= 100.5
    assert c["mem_total"][1] > 0


def test_child_poller_leaves_other_recordings_alone(tmp_path: Path) -> None:
    prof = Profiler(tmp_path / "out", host=["system"], device=False, defer=True)
    prof.start()
    raw = prof.stop()
    assert raw is not None
    poller = ChildPoller(os.getpid(), {"device": False})
    before = (raw / "manifest.json").read_bytes()
    assert not poller.merge(raw), "an in-process recording polled its telemetry itself"
    other = ChildPoller(os.getpid() + 1, {"device": False})
    assert not other.merge(raw)
    assert (raw / "manifest.json").read_bytes() == before
    assert not poller.merge(tmp_path / "nowhere")


THREADS = """
import gc, json, sys, threading, time
t0 = time.monotonic()
while time.monotonic() - t0 < 0.8:
    sum(i * i for i in range(10000))
gc.collect()
json.dump(sorted(t.name for t in threading.enumerate()), open(sys.argv[1], "w"))
"""


def record(tmp_path: Path, body: str) -> tuple[Path, list[str]]:
    """Record ``body`` (which writes its thread names into argv[1]) with aiprof record:
    (the profile, the thread names)."""
    job = tmp_path / "job.py"
    job.write_text(body)
    names = tmp_path / "threads.json"
    out = tmp_path / "rec"
    rec = subprocess.run(
        [PY, "-m", "aiprof", "record", "-o", str(out), "--", PY, str(job), str(names)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rec.returncode == 0, rec.stderr
    return out / "rank0.aiprof", json.loads(names.read_text())


def test_under_aiprof_record_the_job_runs_no_polling_thread(tmp_path: Path) -> None:
    profile, threads = record(tmp_path, THREADS)
    # Stacks are read from outside too: no sampler thread either.
    assert not [t for t in threads if t.startswith("aiprof-") and t != "aiprof-checkpoint"], threads
    meta = json.loads((profile / "profile.json").read_text())
    assert meta["record"]["options"]["python_sampler"] == "outside"
    with open_profile(profile) as p:
        got = p.con.execute("SELECT count(*), count(DISTINCT tid) FROM samples").fetchone()
    assert got is not None and got[0] >= 50 and got[1] == 1
    assert meta["partial"] is False and meta["record"]["collectors"]["device"]["failed"] is None
    duration = meta["record"]["clock"]["mono1"] - meta["record"]["clock"]["mono0"]
    c = counters(profile)
    check_process_metrics(c, duration)
    assert c["gc_pause"][0] >= 1 and c["gc_pause"][5] == "ms", "GC pauses are still recorded in the job"
    assert "cpu_util" in c and c["cpu_util"][0] >= 3
    assert any(d["type"] == "cpu" for d in meta["devices"])


RANKS = """
import os, subprocess, sys
rank = "import json, sys, threading, time; t0 = time.monotonic()\\n"
rank += "while time.monotonic() - t0 < 0.5: sum(i * i for i in range(10000))\\n"
rank += "json.dump(sorted(t.name for t in threading.enumerate()), open(sys.argv[1], 'w'))\\n"
env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1"}
sys.exit(subprocess.run([sys.executable, "-c", rank, sys.argv[1]], env=env).returncode)
"""


def test_ranks_of_a_launcher_are_polled_from_outside(tmp_path: Path) -> None:
    profile, threads = record(tmp_path, RANKS)
    # The rank is not aiprof record's child, but it offers itself on aiprof record's
    # socket: its stacks are read and its telemetry polled from there too.
    assert not [t for t in threads if t.startswith("aiprof-") and t != "aiprof-checkpoint"], threads
    meta = json.loads((profile / "profile.json").read_text())
    assert meta["record"]["options"]["telemetry_outside"] is True
    assert meta["record"]["options"]["python_sampler"] == "outside"
    duration = meta["record"]["clock"]["mono1"] - meta["record"]["clock"]["mono0"]
    c = counters(profile)
    check_process_metrics(c, duration)
    assert "cpu_util" in c, "device telemetry (the CPU as a device) reached the rank's profile"


def test_with_sample_inside_ranks_do_it_all_in_process(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(RANKS)
    names = tmp_path / "threads.json"
    out = tmp_path / "rec"
    rec = subprocess.run(
        [PY, "-m", "aiprof", "record", "--sample-inside", "-o", str(out), "--", PY, str(job), str(names)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rec.returncode == 0, rec.stderr
    threads = json.loads(names.read_text())
    assert "aiprof-system" in threads and "aiprof-python-sampler" in threads
    profile = out / "rank0.aiprof"
    meta = json.loads((profile / "profile.json").read_text())
    assert meta["record"]["options"]["telemetry_outside"] is False
    duration = meta["record"]["clock"]["mono1"] - meta["record"]["clock"]["mono0"]
    check_process_metrics(counters(profile), duration)
