"""Telemetry of ``aiprof record``'s job, polled from ``aiprof record``'s own process.

System metrics (``/proc/<pid>`` of the job through psutil) and device telemetry cost
the job nothing when another process reads them: the job's GIL is not taken by a
polling thread, and the work runs on another core. ``aiprof record`` polls its direct
child; that child, told so by :data:`ENV_POLLER` (the poller's pid, which is its
parent's), records only its GC pauses and steps (its Python stacks are read from
outside too, by aiprof.record.launcher.outside_stacks, for every recorded process of the job).
Any other recorded process of the job (the ranks of a launcher) is not the poller's
child: it asks for the same through ``aiprof record``'s socket, whose server then
runs a poller for it (outside_stacks.StackServer), or, without ``aiprof record``,
polls in-process, as a script using :class:`~aiprof.record.Profiler` directly does.

After the job exits, :meth:`ChildPoller.merge` writes the readings into the child's
raw folder in the format its in-process collectors would have written (the same
``system`` and ``device`` raw files), keeping those taken while it recorded: the
finalizer cannot tell them apart. Clocks: system readings are ``time.monotonic_ns()``
(CLOCK_MONOTONIC, the same in every process of the machine), device readings Unix ns
as always; both are aligned through the child's own clock pairs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..environment import ENV_POLLER
from ..job.collectors.base import Collector, fail
from ..job.collectors.device import DeviceCollector
from ..job.collectors.system import SystemCollector
from ..rawfile import MANIFEST, RAW_DATA_SUFFIX, encode_raw, load_raw, write_atomic

log = logging.getLogger("aiprof.record")


class ChildPoller:
    """Polls one process's system metrics and the devices from outside it."""

    def __init__(self, pid: int, options: dict[str, Any]) -> None:
        self.pid = pid
        host = options.get("host")
        self.system: SystemCollector | None = None
        if host is None or "system" in host:
            self.system = SystemCollector(pid=pid, listen_gc=False)
        self.device: DeviceCollector | None = None
        device = options.get("device", True)
        if device:
            self.device = DeviceCollector(backends=None if isinstance(device, bool) else list(device))

    @property
    def collectors(self) -> list[Collector]:
        return [c for c in (self.system, self.device) if c is not None]

    def start(self) -> None:
        for c in self.collectors:
            try:
                c.start()
            except Exception as e:
                if type(e).__name__ not in ("NoSuchProcess", "ZombieProcess"):
                    fail(c, e, "starting")

    def stop(self) -> None:
        for c in self.collectors:
            try:
                c.stop()
            except Exception as e:
                log.debug("stopping %s: %s", c.name, e)

    def merge(self, raw_dir: Path) -> bool:
        """Add the readings to ``raw_dir`` if it is the polled process's recording and
        that recording left its telemetry to this poller; True if it did."""
        mpath = raw_dir / MANIFEST
        try:
            manifest = json.loads(mpath.read_text())
        except (OSError, ValueError):
            return False
        if manifest.get("pid") != self.pid or not (manifest.get("options") or {}).get("telemetry_outside"):
            return False
        clock = manifest["clock"]
        entries: dict[str, Any] = manifest["collectors"]
        if self.system is not None:
            lo, hi = int(clock["mono0"]), int(clock.get("mono1", 1 << 63))
            ours = self.system.dump(str(raw_dir))
            entry = entries.setdefault("system", {"failed": None})
            data: dict[str, Any] = {"series": {}, "units": ours["units"], "gc": []}
            if entry.get("file"):
                data = load_raw(raw_dir / entry["file"])
            for metric, (ts, vals) in ours["series"].items():
                keep = [i for i, t in enumerate(ts) if lo <= t <= hi]
                if keep:
                    data["series"][metric] = [[ts[i] for i in keep], [vals[i] for i in keep]]
            entry["file"] = "system" + RAW_DATA_SUFFIX
            write_atomic(raw_dir / entry["file"], encode_raw(data))
            entry["failed"] = entry.get("failed") or self.system.failed
        if self.device is not None:
            lo, hi = int(clock["unix0"]), int(clock.get("unix1", 1 << 63))
            dev = self.device.dump(str(raw_dir))
            dev["samples"] = [s for s in dev["samples"] if lo <= s[2] <= hi]
            entries["device"] = {"failed": self.device.failed, "file": "device" + RAW_DATA_SUFFIX}
            write_atomic(raw_dir / entries["device"]["file"], encode_raw(dev))
        write_atomic(mpath, json.dumps(manifest, indent=1).encode())
        return True


__all__ = ["ENV_POLLER", "ChildPoller"]
