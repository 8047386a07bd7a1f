"""Device telemetry during a recording, through the backends of :mod:`aiprof.devices`.

Backends cache their expensive readings themselves (see devices/base.py), so polling
them at the telemetry rate costs only the cheap metrics. The CPU backend (psutil) is
a device like any other. With no accelerator the run goes on after one info line.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .base import Collector, PollingThread, fail

log = logging.getLogger("aiprof.record")

DEFAULT_RATE_HZ = 10.0


class DeviceCollector(Collector):
    """Polls every available device backend (or the named ones) at ``rate_hz``."""

    name = "device"
    checkpoint = True

    def __init__(self, rate_hz: float = DEFAULT_RATE_HZ, backends: list[str] | None = None) -> None:
        super().__init__()
        self.rate_hz = rate_hz
        self.names = backends
        self._backends: list[Any] = []
        self.devices: list[dict[str, Any]] = []
        self.samples: list[tuple[str, int, int, dict[str, float | None]]] = []
        self._poller: PollingThread | None = None
        self._starter: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        # Finding the backends (loading NVML, looking for vendor CLIs, psutil's first
        # reading) takes tens of ms: do it off the job's thread so its start is not delayed.
        self._starter = threading.Thread(target=self._begin, name="aiprof-devices-start", daemon=True)
        self._starter.start()

    def _begin(self) -> None:
        self.own_threads.add(threading.get_native_id())
        try:
            self._discover()
        except Exception as e:
            fail(self, e, "starting")

    def _discover(self) -> None:
        from ....devices import available_backends

        self._backends = available_backends(self.names)
        for b in self._backends:
            for d in b.devices():
                self.devices.append(
                    {
                        "type": d.device_type,
                        "index": d.index,
                        "name": d.name,
                        "vendor": d.vendor,
                        "memory_bytes": d.memory_bytes,
                        "backend": b.name,
                    }
                )
        if not any(d["type"] != "cpu" for d in self.devices):
            log.info("no accelerator found; recording host and CPU telemetry only")
        if not self._backends:
            return
        if self._stopping:
            return
        self._poller = PollingThread(
            "aiprof-devices", 1.0 / self.rate_hz, self.poll, lambda e: fail(self, e, "polling"), self.own_threads
        )
        self._poller.start()

    def poll(self) -> None:
        """One reading of every device; a backend that raises is dropped with a warning."""
        for b in list(self._backends):
            try:
                got = b.sample()
            except Exception as e:
                log.warning("device backend %s failed (%s: %s); it stops, the job runs on", b.name, type(e).__name__, e)
                self._backends.remove(b)
                _close(b)
                continue
            for s in got:
                self.samples.append((s.device_type, s.device, s.ts_ns, dict(s.values)))

    def stop(self) -> None:
        self._stopping = True
        if self._starter is not None:
            self._starter.join()
            self._starter = None
        if self._poller is not None:
            self._poller.stop()
            self._poller = None
        for b in self._backends:
            _close(b)
        self._backends = []

    def dump(self, raw_dir: str) -> dict[str, Any]:
        return {"devices": list(self.devices), "samples": list(self.samples)}


def _close(backend: Any) -> None:
    try:
        backend.close()
    except Exception as e:
        log.debug("closing %s: %s", backend.name, e)
