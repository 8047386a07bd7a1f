"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

Cheap NVML queries run on every sample. The ones that block or cost more (PCIe
throughput waits ~20 ms inside the driver, the process list walks every context)
run at most once a second and their last values are reused in between. A query the
GPU does not support (NVML_ERROR_NOT_SUPPORTED) is not asked again and reads None,
printed as ``-`` like dmon does.

Unit handling: NVML gives power in mW, total energy in mJ, memory in bytes, PCIe throughput in KB/s and
violation time in ns; the samples carry W, J, MiB (labelled MB, as dmon), MB/s and %.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any, cast

from .base import DeviceBackend, DeviceInfo, Sample

SLOW_PERIOD_NS = 1_000_000_000
_MIB = float(1 << 20)


def _load_nvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return cast(ModuleType, pynvml)


#: Files that exist where an NVIDIA driver is loaded (Linux, WSL).
_NVIDIA_NODES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")


class NvmlBackend(DeviceBackend):
    """Every GPU NVML sees. ``nvml`` is the pynvml module (injectable for tests)."""

    name = "nvml"
    device_type = "cuda"

    def __init__(self, *, nvml: Any = None, clock: Callable[[], int] = time.time_ns) -> None:
        self.nvml: Any = nvml if nvml is not None else _load_nvml()
        if self.nvml is None:
            raise RuntimeError("nvidia-ml-py is not installed")
        self._clock = clock
        self.nvml.nvmlInit()
        count = self.nvml.nvmlDeviceGetCount()
        self._handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._unsupported: set[tuple[int, str]] = set()
        self._slow_at = -SLOW_PERIOD_NS
        self._slow: list[dict[str, float | None]] = [{} for _ in self._handles]
        self._viol: list[dict[int, tuple[int, int]]] = [{} for _ in self._handles]

    @classmethod
    def available(cls) -> bool:
        if sys.platform == "linux" and not any(os.path.exists(p) for p in _NVIDIA_NODES):
            # No driver: skip loading the NVML bindings (tens of ms of GIL-held imports
            # inside a job being recorded).
            return False
        nvml = _load_nvml()
        if nvml is None:
            return False
        try:
            nvml.nvmlInit()
            n = int(nvml.nvmlDeviceGetCount())
            nvml.nvmlShutdown()
        except Exception:
            return False
        return n > 0

    def _call(self, i: int, key: str, fn: Callable[[], Any]) -> Any:
        if (i, key) in self._unsupported:
            return None
        try:
            return fn()
        except self.nvml.NVMLError as e:
            code = getattr(e, "value", None)
            if code in (
                getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
                getattr(self.nvml, "NVML_ERROR_NO_PERMISSION", 4),
            ):
                self._unsupported.add((i, key))
                return None
            if code == getattr(self.nvml, "NVML_ERROR_GPU_IS_LOST", 15):
                raise
            return None

    def devices(self) -> list[DeviceInfo]:
        out = []
        for i, h in enumerate(self._handles):
            name = self._call(i, "name", partial(self.nvml.nvmlDeviceGetName, h))
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            mem = self._call(i, "mem", partial(self.nvml.nvmlDeviceGetMemoryInfo, h))
            out.append(DeviceInfo("cuda", i, str(name or "NVIDIA GPU"), "NVIDIA", int(mem.total) if mem else None))
        return out

    def _violation(self, i: int, h: Any, policy: int, now: int) -> float | None:
        """Share (%) of the time since the last call spent in this violation policy."""
        v = self._call(i, f"viol{policy}", partial(self.nvml.nvmlDeviceGetViolationStatus, h, policy))
        if v is None:
            return None
        last = self._viol[i].get(policy)
        self._viol[i][policy] = (now, int(v.violationTime))
        if last is None or now <= last[0]:
            return None
        return max(0.0, min(100.0, 100.0 * (int(v.violationTime) - last[1]) / (now - last[0])))

    def _read_slow(self, now: int) -> None:
        n = self.nvml
        for i, h in enumerate(self._handles):
            slow: dict[str, float | None] = {}
            for key, direction in (("pcie_rx", "NVML_PCIE_UTIL_RX_BYTES"), ("pcie_tx", "NVML_PCIE_UTIL_TX_BYTES")):
                kbs = self._call(i, key, partial(n.nvmlDeviceGetPcieThroughput, h, getattr(n, direction)))
                slow[key] = kbs / 1000.0 if kbs is not None else None
            procs = self._call(i, "procs", partial(n.nvmlDeviceGetComputeRunningProcesses, h))
            slow["processes"] = float(len(procs)) if procs is not None else None
            self._slow[i] = slow

    def sample(self) -> list[Sample]:
        """Per GPU: power W, energy J (cumulative), gpu_temp/mem_temp C, sm/mem/enc/dec_util %, sm/mem_clock MHz,
        power/thermal_violation %/bool, fb_used/bar1_used/mem_total MB, sbecc/dbecc/pci_replays
        counts, pcie_rx/tx MB/s, throttle_reasons bitmask, processes count."""
        n = self.nvml
        now = self._clock()
        if now - self._slow_at >= SLOW_PERIOD_NS:
            self._slow_at = now
            self._read_slow(now)
        out = []
        for i, h in enumerate(self._handles):
            v: dict[str, float | None] = {}
            mw = self._call(i, "power", partial(n.nvmlDeviceGetPowerUsage, h))
            v["power"] = mw / 1000.0 if mw is not None else None
            total = getattr(n, "nvmlDeviceGetTotalEnergyConsumption", None)  # mJ since the driver loaded (Volta+)
            mj = self._call(i, "energy", partial(total, h)) if total else None
            v["energy"] = mj / 1000.0 if mj is not None else None
            v["gpu_temp"] = self._call(i, "gtemp", partial(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU))
            fv = self._call(i, "mtemp", partial(n.nvmlDeviceGetFieldValues, h, [n.NVML_FI_DEV_MEMORY_TEMP]))
            v["mem_temp"] = _field_value(fv[0]) if fv else None
            util = self._call(i, "util", partial(n.nvmlDeviceGetUtilizationRates, h))
            v["sm_util"] = util.gpu if util is not None else None
            v["mem_util"] = util.memory if util is not None else None
            enc = self._call(i, "enc", partial(n.nvmlDeviceGetEncoderUtilization, h))
            v["enc_util"] = enc[0] if enc is not None else None
            dec = self._call(i, "dec", partial(n.nvmlDeviceGetDecoderUtilization, h))
            v["dec_util"] = dec[0] if dec is not None else None
            v["mem_clock"] = self._call(i, "mclk", partial(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM))
            v["sm_clock"] = self._call(i, "pclk", partial(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM))
            v["power_violation"] = self._violation(i, h, n.NVML_PERF_POLICY_POWER, now)
            tv = self._violation(i, h, n.NVML_PERF_POLICY_THERMAL, now)
            v["thermal_violation"] = None if tv is None else float(tv > 0)
            mem = self._call(i, "mem", partial(n.nvmlDeviceGetMemoryInfo, h))
            v["fb_used"] = mem.used / _MIB if mem is not None else None
            v["mem_total"] = mem.total / _MIB if mem is not None else None
            bar1 = self._call(i, "bar1", partial(n.nvmlDeviceGetBAR1MemoryInfo, h))
            v["bar1_used"] = bar1.bar1Used / _MIB if bar1 is not None else None
            for key, kind in (
                ("sbecc", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                ("dbecc", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
            ):
                v[key] = self._call(
                    i, key, partial(n.nvmlDeviceGetTotalEccErrors, h, getattr(n, kind), n.NVML_VOLATILE_ECC)
                )
            v["pci_replays"] = self._call(i, "replay", partial(n.nvmlDeviceGetPcieReplayCounter, h))
            reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
            )
            v["throttle_reasons"] = self._call(i, "thr", partial(reasons, h)) if reasons else None
            v.update(self._slow[i])
            out.append(Sample("cuda", i, now, {k: (float(x) if x is not None else None) for k, x in v.items()}))
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def _field_value(fv: Any) -> float | None:
    """Value of an nvmlFieldValue_t, or None when NVML flagged it as failed."""
    if getattr(fv, "nvmlReturn", 0) != 0:
        return None
    val = fv.value
    vt = getattr(fv, "valueType", 0)
    # valueType: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort.
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(vt, "uiVal")
    return float(getattr(val, attr))
