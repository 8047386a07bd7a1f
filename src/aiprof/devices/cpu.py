"""The host CPU through psutil (and RAPL energy counters for power).

One device, ``cpu`` 0, for the whole host. Per-core utilization goes in metrics named
``cpu_util.core<N>``; the total in ``cpu_util``. Utilization is computed from the
difference of ``cpu_times`` between two samples (the first sample has none).
Frequency and temperatures cost several sysfs reads each, so they are refreshed at
most once a second. Power comes from the RAPL package domains under
``/sys/class/powercap`` (energy difference / time difference) when they are readable,
which on most systems needs root.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psutil

from .base import DeviceBackend, DeviceInfo, Sample

POWERCAP = Path("/sys/class/powercap")
SLOW_PERIOD_NS = 1_000_000_000
_MIB = float(1 << 20)


class RaplReader:
    """Package power from RAPL energy counters (µJ), summed over sockets."""

    def __init__(self, root: Path = POWERCAP) -> None:
        self.domains: list[tuple[Path, int]] = []
        """(energy_uj file, wrap-around range in µJ) of each package domain."""
        if root.is_dir():
            for d in sorted(root.iterdir()):
                # intel-rapl:0 is a package; intel-rapl:0:0 (core, dram) are parts of it.
                if d.name.count(":") != 1:
                    continue
                energy = d / "energy_uj"
                try:
                    int(energy.read_text())
                    rng = int((d / "max_energy_range_uj").read_text())
                except (OSError, ValueError):
                    continue
                self.domains.append((energy, rng))
        self._last: tuple[int, list[int]] | None = None
        self.energy_j: float | None = None
        """Joules since the first reading (counter wrap-arounds undone); None before it."""

    def power(self, now_ns: int) -> float | None:
        """Watts since the previous call; None on the first call or when unreadable.
        Also advances :attr:`energy_j`."""
        if not self.domains:
            return None
        try:
            now = [int(f.read_text()) for f, _ in self.domains]
        except (OSError, ValueError):
            return None
        last, self._last = self._last, (now_ns, now)
        if last is None:
            self.energy_j = 0.0
            return None
        joules = 0.0
        for (_, rng), a, b in zip(self.domains, last[1], now, strict=False):
            delta = b - a if b >= a else b + rng - a
            joules += delta / 1e6
        self.energy_j = (self.energy_j or 0.0) + joules
        if now_ns <= last[0]:
            return None
        return joules / ((now_ns - last[0]) / 1e9)


#: The kernel's CPU time counters move in ticks of this many seconds (USER_HZ = 100),
#: waited twice over where a sample comes right after the priming read.
TICK_S = 0.02


def _total(times: list[tuple[float, float]]) -> float:
    """The CPU time (busy and idle) the counters hold over every core."""
    return sum(t for _, t in times)


class CpuBackend(DeviceBackend):
    """Host CPU utilization (total and per core), frequency, temperature, power, memory."""

    name = "cpu"
    device_type = "cpu"

    def __init__(
        self,
        *,
        clock: Callable[[], int] = time.time_ns,
        powercap: Path = POWERCAP,
    ) -> None:
        self._clock = clock
        self._rapl = RaplReader(powercap)
        # Primed so the first sample already has a utilization (since construction).
        self._last_times: list[tuple[float, float]] | None = self._busy()
        self._first = True
        self._slow_at = -SLOW_PERIOD_NS
        self._freq: float | None = None
        self._temp: float | None = None

    @classmethod
    def available(cls) -> bool:
        return True

    def devices(self) -> list[DeviceInfo]:
        name = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.partition(":")[2].strip()
                    break
        except OSError:
            pass
        if not name:
            # platform.processor() runs `uname -p` in a subprocess on Linux: only
            # when /proc says nothing (it is asked while the recorded job starts).
            import platform

            name = platform.processor() or platform.machine() or "cpu"
        return [DeviceInfo("cpu", 0, name, "cpu", psutil.virtual_memory().total)]

    def _busy(self) -> list[tuple[float, float]]:
        out = []
        for t in psutil.cpu_times(percpu=True):
            idle = t.idle + getattr(t, "iowait", 0.0)
            out.append((sum(t) - idle, sum(t)))
        return out

    def _slow(self, now: int) -> None:
        if now - self._slow_at < SLOW_PERIOD_NS:
            return
        self._slow_at = now
        try:
            f = psutil.cpu_freq()
            self._freq = float(f.current) if f and f.current else None
        except (OSError, NotImplementedError, AttributeError):
            self._freq = None
        self._temp = None
        sensors = getattr(psutil, "sensors_temperatures", None)
        if sensors is not None:
            try:
                temps = sensors()
            except OSError:
                temps = {}
            # Package sensors first (Intel coretemp, AMD k10temp); else the hottest one seen.
            for key in ("coretemp", "k10temp", "zenpower", "cpu_thermal", "acpitz"):
                if temps.get(key):
                    self._temp = max(float(t.current) for t in temps[key])
                    break
            else:
                readings = [float(t.current) for ts in temps.values() for t in ts]
                self._temp = max(readings) if readings else None

    def sample(self) -> list[Sample]:
        """One sample: cpu_util (%), cpu_util.core<N> (%), cpu_freq (MHz), cpu_temp (C),
        power (W, RAPL), energy (J since the first sample, RAPL), mem_used / mem_total (MiB, labelled MB as dmon does)."""
        now = self._clock()
        times = self._busy()
        if self._first and self._last_times is not None and _total(times) <= _total(self._last_times):
            # Sampled within the kernel's 10 ms tick of the priming read (a monitor
            # samples at once): one tick more, so the first sample has a utilization.
            time.sleep(TICK_S)
            times = self._busy()
        self._first = False
        values: dict[str, float | None] = {}
        last, self._last_times = self._last_times, times
        if last is not None and len(last) == len(times):
            busy_sum = total_sum = 0.0
            for i, ((b0, t0), (b1, t1)) in enumerate(zip(last, times, strict=False)):
                db, dt = b1 - b0, t1 - t0
                busy_sum += db
                total_sum += dt
                values[f"cpu_util.core{i}"] = _pct(db, dt)
            values["cpu_util"] = _pct(busy_sum, total_sum)
            if total_sum <= 0:
                # The kernel's counters (10 ms ticks) have not moved since the last
                # reading: keep that reading as the base, so the next sample spans both.
                self._last_times = last
        else:
            values["cpu_util"] = None
        self._slow(now)
        values["cpu_freq"] = self._freq
        values["cpu_temp"] = self._temp
        values["power"] = self._rapl.power(now)
        values["energy"] = self._rapl.energy_j
        vm = psutil.virtual_memory()
        values["mem_used"] = (vm.total - vm.available) / _MIB
        values["mem_total"] = vm.total / _MIB
        return [Sample("cpu", 0, now, values)]


def _pct(busy: float, total: float) -> float | None:
    if total <= 0:
        return None
    return max(0.0, min(100.0, 100.0 * busy / total))
