"""Shared reading of the boxed tables printed by cnmon and npu-smi (see smi_table.py)."""

from __future__ import annotations

from ..importers.smi_table import device_values, parse_tables
from .base import DeviceInfo
from .cli_backend import CliBackend


class TableCliBackend(CliBackend):
    """A CLI backend whose tool prints a boxed device table."""

    vendor = ""

    def parse(self, text: str) -> list[tuple[DeviceInfo, dict[str, float | None]]]:
        out: list[tuple[DeviceInfo, dict[str, float | None]]] = []
        for table in parse_tables(text):
            for j, fields in enumerate(table.devices):
                index, name, values = device_values(fields)
                total = values.get("mem_total")
                info = DeviceInfo(
                    self.device_type,
                    index if index is not None else j,
                    name or self.tool,
                    self.vendor,
                    int(total * (1 << 20)) if total else None,
                )
                out.append((info, values))
        return out
