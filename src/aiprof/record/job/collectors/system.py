"""System metrics at 10 Hz (process and system CPU, RSS, threads, context switches,
I/O) and garbage-collector pauses, into the counters table.

GC pauses come from ``gc.callbacks``: every collection becomes an event of kind
``gc`` and a ``gc_pause`` counter sample, so pauses show on the timeline and in the
counter charts alike.

The metrics can be read from another process: ``aiprof record`` polls its job's
``/proc/<pid>`` itself (``pid``, ``listen_gc=False``), so the job only keeps the GC
listener (``poll=False``), and no polling thread takes the GIL from it.

The CPU shares are over the time since this collector's previous reading: the host's
from its own ``psutil.cpu_times()`` (``psutil.cpu_percent(None)`` keeps its last
reading per thread in psutil 7, so the one taken at start, on another thread, made the
first reading 0%; before 7, one for the whole process, so two collectors, or the job's
own calls, took each other's), and none is taken less than half an interval after the
previous one (a poll late behind a long GIL hold): over next to no time a share reads
0% or 100% whatever the load, and the next reading covers that time anyway.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

from .base import Collector, PollingThread, fail, show_as

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

DEFAULT_RATE_HZ = 10.0

#: Metric -> unit, for the counters table.
UNITS: dict[str, str] = {
    "proc_cpu": "%",
    "children_cpu": "%",
    "sys_cpu": "%",
    "rss": "B",
    "threads": "count",
    "ctx_switches": "1/s",
    "read_bytes": "B/s",
    "write_bytes": "B/s",
    "gc_pause": "ms",
}


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def descendants_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each descendant process of ``pid``, from Linux's
    ``/proc/PID/task/TID/children`` (a few reads, where psutil's children() reads every
    process of the machine), else psutil's."""
    out: dict[int, float] = {}
    todo, seen = [pid], {pid}
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        import psutil

        try:
            for k in psutil.Process(pid).children(recursive=True):
                t = k.cpu_times()
                out[k.pid] = t.user + t.system
        except psutil.Error:
            pass
        return out
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for k in kids:
                if k in seen:
                    continue
                seen.add(k)
                todo.append(k)
                try:
                    with open(f"/proc/{k}/stat") as f:
                        fields = f.read().rpartition(")")[2].split()
                    out[k] = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
                except (OSError, ValueError, IndexError):
                    continue
    return out


def host_busy_pct(before: Any, after: Any) -> float | None:
    """The host's busy share (%, 100 = every core) between two ``psutil.cpu_times()``
    readings, as psutil.cpu_percent counts it (idle and I/O wait are not busy; Linux
    counts guest time in user time already); None over no measurable time."""
    d = {f: getattr(after, f) - getattr(before, f) for f in after._fields}
    total = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
    if total <= 0:
        return None
    busy = total - d["idle"] - d.get("iowait", 0.0)
    return round(min(max(100.0 * float(busy) / float(total), 0.0), 100.0), 1)


class SystemCollector(Collector):
    """Polls psutil for a process (default: this one) and the system; listens to this
    process's garbage collector.

    ``poll=False``: only the GC listener (another process polls the metrics);
    ``listen_gc=False``: only the metrics (of ``pid``, from outside).
    """

    name = "system"
    checkpoint = True

    def __init__(
        self,
        rate_hz: float = DEFAULT_RATE_HZ,
        clock: Callable[[], int] = time.monotonic_ns,
        *,
        pid: int | None = None,
        poll: bool = True,
        listen_gc: bool = True,
    ) -> None:
        super().__init__()
        self.rate_hz = rate_hz
        self._clock = clock
        self.pid = pid
        self.poll_metrics = poll
        self.listen_gc = listen_gc
        self.series: dict[str, tuple[list[int], list[float]]] = {m: ([], []) for m in UNITS}
        self.gc_events: list[tuple[int, int, int, int, int, int]] = []
        """(start, dur, generation, collected, uncollectable, tid) per collection."""
        self._gc_start = 0
        self._poller: PollingThread | None = None
        self._proc: Any = None
        self._last: tuple[int, int, int, int] | None = None
        self._cpu_at: int | None = None
        """When the CPU shares were last read (clock ns)."""
        self._host: Any = None
        """psutil.cpu_times() at that reading."""
        self._children: dict[int, float] = {}
        """CPU seconds of each child process of the polled one at that reading."""
        self._gc_on = False

    def start(self) -> None:
        if self.listen_gc:
            gc.callbacks.append(self._on_gc)
            self._gc_on = True
        if not self.poll_metrics:
            return
        import psutil

        self._proc = psutil.Process(self.pid)
        self._proc.cpu_percent(None)
        self._host = psutil.cpu_times()
        self._cpu_at = self._clock()
        self._poller = PollingThread(
            "aiprof-system", 1.0 / self.rate_hz, self.poll, lambda e: self._failed(e), self.own_threads
        )
        self._poller.start()

    def _failed(self, e: BaseException) -> None:
        if self.pid is not None and type(e).__name__ in ("NoSuchProcess", "ZombieProcess"):
            return  # the polled process ended: the series simply end there
        fail(self, e, "polling")
        self._remove_gc()

    def forget_in_child(self) -> None:
        """After fork the child is not recorded: stop listening to its collector."""
        self._remove_gc()

    def _remove_gc(self) -> None:
        if self._gc_on:
            self._gc_on = False
            try:
                gc.callbacks.remove(self._on_gc)
            except ValueError:
                pass

    def stop(self) -> None:
        self._remove_gc()
        if self._poller is not None:
            self._poller.stop()
            self._poller = None

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = self._clock()
        if phase == "start":
            self._gc_start = now
            return
        import threading

        start = self._gc_start or now
        self.gc_events.append(
            (
                start,
                now - start,
                info.get("generation", -1),
                info.get("collected", 0),
                info.get("uncollectable", 0),
                threading.get_native_id(),
            )
        )
        ts, vals = self.series["gc_pause"]
        ts.append(start)
        vals.append((now - start) / 1e6)

    def poll(self) -> None:
        """Take one reading of every metric (the polling thread calls this at 10 Hz)."""
        import psutil

        p = self._proc
        now = self._clock()
        # A share over less than half an interval is noise (module doc): left to the next.
        shares = self._cpu_at is None or now - self._cpu_at >= 0.5e9 / self.rate_hz
        with p.oneshot():
            cpu = p.cpu_percent(None) if shares else None
            rss = p.memory_info().rss
            threads = p.num_threads()
            ctx = p.num_ctx_switches()
            try:
                io = p.io_counters()
                rd, wr = io.read_bytes, io.write_bytes
            except (AttributeError, psutil.Error):
                rd = wr = -1
        sys_cpu = children = None
        if shares:
            read_at, self._cpu_at = self._cpu_at, now
            host, self._host = self._host, psutil.cpu_times()
            sys_cpu = host_busy_pct(host, self._host)
            children = self._children_pct(p, (now - read_at) / 1e9 if read_at is not None else 0.0)
        s = self.series
        for metric, value in (
            ("proc_cpu", cpu),
            ("children_cpu", children),
            ("sys_cpu", sys_cpu),
            ("rss", rss),
            ("threads", threads),
        ):
            if value is not None:
                s[metric][0].append(now)
                s[metric][1].append(float(value))
        switches = ctx.voluntary + ctx.involuntary
        last, self._last = self._last, (now, switches, rd, wr)
        if last is not None and now > last[0]:
            per_s = 1e9 / (now - last[0])
            rates = [("ctx_switches", switches - last[1])]
            if rd >= 0 and last[2] >= 0:
                rates += [("read_bytes", rd - last[2]), ("write_bytes", wr - last[3])]
            for metric, delta in rates:
                s[metric][0].append(now)
                s[metric][1].append(delta * per_s)

    def _children_pct(self, p: Any, seconds: float) -> float | None:
        """The CPU the polled process's children (DataLoader workers, a compiler's
        processes) used since the last reading, % of one core (100 = a core's worth),
        from each child's CPU seconds; a child born since counts from its start, one
        that ended since is not read. None: none was ever seen (the metric is then not
        written), or no time to share it over. Read only from outside the polled
        process (``aiprof record``'s poller): in the job, each read would wait for the
        GIL its busy threads hold, and the other readings with it."""
        if self.pid is None or self.pid == os.getpid():
            return None
        now: dict[int, float] = {}
        used = 0.0
        for pid, cpu_s in descendants_cpu(p.pid).items():
            now[pid] = cpu_s
            used += cpu_s - self._children.get(pid, 0.0)
        seen, self._children = bool(self._children) or bool(now), now
        if not seen or seconds <= 0:
            return None
        return round(100.0 * max(used, 0.0) / seconds, 1)

    def dump(self, raw_dir: str) -> dict[str, Any]:
        series = {}
        for m, (ts, vals) in list(self.series.items()):
            n = min(len(ts), len(vals))  # whole (ts, value) pairs, also mid-collection
            if n:
                series[m] = [ts[:n], vals[:n]]
        return {"series": series, "units": UNITS, "gc": list(self.gc_events)}


show_as(SystemCollector._on_gc.__code__, "[garbage collection]")
