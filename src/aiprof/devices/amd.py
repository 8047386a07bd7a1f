"""AMD GPUs through the ``amdsmi`` Python library (ROCm 6+).

Each query is guarded: amdsmi's dictionaries change keys between ROCm releases, and
a missing key reads None. Not exercised on hardware in this project's CI.
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


def _load() -> ModuleType | None:
    try:
        import amdsmi
    except ImportError:
        return None
    return cast(ModuleType, amdsmi)


class AmdSmiBackend(DeviceBackend):
    """power W, gpu_temp C (edge), sm_util % (gfx activity), mem_util %, fb_used/mem_total MB, sm_clock MHz."""

    name = "amdsmi"
    device_type = "rocm"

    def __init__(self, *, amdsmi: Any = None, clock: Callable[[], int] = time.time_ns) -> None:
        self.lib: Any = amdsmi if amdsmi is not None else _load()
        if self.lib is None:
            raise RuntimeError("amdsmi is not installed")
        self._clock = clock
        self.lib.amdsmi_init()
        self._handles = list(self.lib.amdsmi_get_processor_handles())

    @classmethod
    def available(cls) -> bool:
        if sys.platform == "linux" and not os.path.exists("/dev/kfd"):
            return False  # no ROCm kernel driver: do not load amdsmi at all
        lib = _load()
        if lib is None:
            return False
        try:
            lib.amdsmi_init()
            n = len(lib.amdsmi_get_processor_handles())
            lib.amdsmi_shut_down()
        except Exception:
            return False
        return n > 0

    def _get(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def devices(self) -> list[DeviceInfo]:
        out = []
        for i, h in enumerate(self._handles):
            asic = self._get(partial(self.lib.amdsmi_get_gpu_asic_info, h)) or {}
            vram = self._get(partial(self.lib.amdsmi_get_gpu_vram_usage, h)) or {}
            total = _num(vram.get("vram_total"))
            out.append(
                DeviceInfo(
                    "rocm",
                    i,
                    str(asic.get("market_name") or "AMD GPU"),
                    "AMD",
                    int(total * (1 << 20)) if total else None,
                )
            )
        return out

    def sample(self) -> list[Sample]:
        lib = self.lib
        now = self._clock()
        out = []
        for i, h in enumerate(self._handles):
            v: dict[str, float | None] = {}
            act = self._get(partial(lib.amdsmi_get_gpu_activity, h)) or {}
            v["sm_util"] = _num(act.get("gfx_activity"))
            v["mem_util"] = _num(act.get("umc_activity"))
            pw = self._get(partial(lib.amdsmi_get_power_info, h)) or {}
            v["power"] = _num(pw.get("current_socket_power")) or _num(pw.get("average_socket_power"))
            v["gpu_temp"] = _num(self._get(partial(self._edge_temp, h)))
            vram = self._get(partial(lib.amdsmi_get_gpu_vram_usage, h)) or {}
            v["fb_used"], v["mem_total"] = _num(vram.get("vram_used")), _num(vram.get("vram_total"))
            clk = self._get(partial(self._gfx_clock, h)) or {}
            v["sm_clock"] = _num(clk.get("clk") or clk.get("cur_clk"))
            out.append(Sample("rocm", i, now, v))
        return out

    def _edge_temp(self, h: Any) -> Any:
        lib = self.lib
        return lib.amdsmi_get_temp_metric(h, lib.AmdSmiTemperatureType.EDGE, lib.AmdSmiTemperatureMetric.CURRENT)

    def _gfx_clock(self, h: Any) -> Any:
        return self.lib.amdsmi_get_clock_info(h, self.lib.AmdSmiClkType.GFX)

    def close(self) -> None:
        self._get(self.lib.amdsmi_shut_down)


def _num(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None
