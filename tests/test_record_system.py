"""The recorder's system metrics (record/job/collectors/system.py): the CPU shares each
reading gives, over the time since the collector's previous one."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from aiprof.record.job.collectors import system
from aiprof.record.job.collectors.system import SystemCollector


def test_every_host_cpu_reading_covers_its_interval() -> None:
    """Every core kept busy by a spinning process: every reading of the host's CPU says
    so. The first one read 0% before: psutil.cpu_percent(None) keeps its last reading
    per thread, and the one taken at start was on another thread than the polls."""
    cores = os.cpu_count() or 1
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.2)  # the spinners are running
        c = SystemCollector(rate_hz=20.0, listen_gc=False)
        c.start()
        time.sleep(0.6)
        c.stop()
    finally:
        for p in spin:
            p.kill()
            p.wait()
    host = c.series["sys_cpu"][1]
    assert len(host) >= 5, host
    assert min(host) >= 60.0, host
    # This process only sleeps: its own share stays low, and is read as often.
    assert len(c.series["proc_cpu"][1]) == len(host) and max(c.series["proc_cpu"][1]) < 50.0


def test_a_poll_right_after_another_reads_no_cpu_share() -> None:
    """A poll less than half an interval after the last reading (late behind a long GIL
    hold) takes the memory and thread counts but no CPU share: over next to no time a
    share reads 0% or 100% whatever the load. The next poll's covers that time."""
    c = SystemCollector(rate_hz=10.0, listen_gc=False)
    c.start()
    c.stop()  # the readings below are the test's own polls
    for series in c.series.values():
        series[0].clear()
        series[1].clear()
    time.sleep(0.06)
    c.poll()  # 60 ms after start (more than half of 100 ms): read
    c.poll()  # at once after: no share
    time.sleep(0.06)
    c.poll()  # read
    polls = c.series["rss"][0]
    assert len(polls) == 3 and len(c.series["threads"][0]) == 3
    for share in ("sys_cpu", "proc_cpu"):
        assert c.series[share][0] == [polls[0], polls[2]], share
    assert all(0.0 <= v <= 100.0 for v in c.series["sys_cpu"][1])


def test_host_busy_share_counts_as_psutil_does() -> None:
    """The share from two cpu_times() readings is psutil.cpu_percent's: idle and I/O
    wait are not busy, guest time is already in user time; none over no time."""
    fields = psutil.cpu_times()._fields
    kind = type(psutil.cpu_times())

    def times(**v: float) -> object:
        return kind(**{f: v.get(f, 0.0) for f in fields})

    before = times(user=10.0, system=5.0, idle=80.0)
    after = times(user=13.0, system=6.0, idle=84.0, **({"iowait": 2.0} if "iowait" in fields else {}))
    io = 2.0 if "iowait" in fields else 0.0
    assert system.host_busy_pct(before, after) == round(100.0 * 4.0 / (4.0 + 4.0 + io), 1)
    assert system.host_busy_pct(after, after) is None
