"""Saved ``cnmon`` tables (Cambricon MLU), of any CNMON version.

Each table is one sample; the date line cnmon prints above it times it. Fields are
read by header name: Util -> sm_util %, Temp -> gpu_temp C, Pwr:Usage/Cap -> power and
power_limit W, Memory-Usage -> fb_used and mem_total MB, Fan -> fan_speed %.
"""

from __future__ import annotations

from pathlib import Path

from .base import Detection, ImportContext, Importer
from .smi_table import detect_table, load_tables

NAME = "cnmon"


def _detect(path: Path) -> Detection:
    return detect_table(path, "CNMON")


def _load(path: Path, ctx: ImportContext) -> None:
    load_tables(path, ctx, NAME, "mlu", "CNMON")


IMPORTER = Importer(name=NAME, description="Cambricon cnmon tables", detect=_detect, load=_load, patterns=("*cnmon*",))
