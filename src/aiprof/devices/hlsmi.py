"""Intel Gaudi HPUs through ``hl-smi -Q ... --format csv`` (read by its header names)."""

from __future__ import annotations

from ..importers.nvidia.query_csv import HLSMI_FIELDS, parse_query_csv
from .base import DeviceInfo
from .cli_backend import CliBackend


class HlSmiBackend(CliBackend):
    """hl-smi's query CSV: utilization.aip -> sm_util, temperature.aip -> gpu_temp, ..."""

    name = "hl-smi"
    device_type = "hpu"
    tool = "hl-smi"
    args = ("-Q", ",".join(HLSMI_FIELDS), "--format", "csv")

    def parse(self, text: str) -> list[tuple[DeviceInfo, dict[str, float | None]]]:
        log = parse_query_csv(text)
        out = []
        for r in log.rows:
            total = r.values.get("mem_total")
            info = DeviceInfo(
                "hpu", r.device, r.name or "Gaudi", "Intel Habana", int(total * (1 << 20)) if total else None
            )
            out.append((info, {k: v for k, v in r.values.items() if not k.startswith("smi.")}))
        return out
