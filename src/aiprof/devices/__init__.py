"""Device telemetry backends behind one interface (see base.py).

:func:`available_backends` is what ``aiprof monitor`` and ``aiprof record`` call: it
opens every backend this machine can read (several at once on a mixed machine) and
skips, with one warning each, those that fail to start.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable

from .base import METRICS, DeviceBackend, DeviceInfo, Metric, Sample, metric_unit

log = logging.getLogger("aiprof.devices")

#: Backend name -> "module:Class", accelerators first; the CPU backend last.
BACKENDS: dict[str, str] = {
    "nvml": "aiprof.devices.nvml:NvmlBackend",
    "amdsmi": "aiprof.devices.amd:AmdSmiBackend",
    "npu-smi": "aiprof.devices.npusmi:NpuSmiBackend",
    "cnmon": "aiprof.devices.cnmon:CnmonBackend",
    "hl-smi": "aiprof.devices.hlsmi:HlSmiBackend",
    "cpu": "aiprof.devices.cpu:CpuBackend",
}


def backend_class(name: str) -> type[DeviceBackend]:
    """The backend class registered under ``name`` (a key of :data:`BACKENDS`)."""
    mod, _, attr = BACKENDS[name].partition(":")
    cls = getattr(importlib.import_module(mod), attr)
    assert isinstance(cls, type) and issubclass(cls, DeviceBackend)
    return cls


def available_backends(names: Iterable[str] | None = None) -> list[DeviceBackend]:
    """Open every backend (of ``names``, default all) this machine has, CPU last.

    A backend whose library or CLI is missing is skipped silently; one that is present
    but fails to start is skipped with one warning. Callers own the returned backends
    and must ``close()`` them.
    """
    wanted = list(BACKENDS) if names is None else list(names)
    out: list[DeviceBackend] = []
    for name in wanted:
        if name not in BACKENDS:
            raise ValueError(f"unknown device backend {name!r}; known: {', '.join(BACKENDS)}")
        try:
            cls = backend_class(name)
            if not cls.available():
                continue
            out.append(cls())
        except Exception as e:
            log.warning("device backend %s failed to start: %s", name, e)
    return out


__all__ = [
    "BACKENDS",
    "METRICS",
    "DeviceBackend",
    "DeviceInfo",
    "Metric",
    "Sample",
    "available_backends",
    "backend_class",
    "metric_unit",
]
