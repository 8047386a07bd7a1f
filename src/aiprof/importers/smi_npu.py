"""Saved ``npu-smi info`` tables (Huawei Ascend NPU).

Fields by header name: Power(W) -> power W, Temp(C) -> gpu_temp C, AICore(%) ->
sm_util %, HBM-Usage(MB) (or Memory-Usage(MB) where HBM reports no total) -> fb_used
and mem_total MB. The process table that follows is skipped.
"""

from __future__ import annotations

from pathlib import Path

from .base import Detection, ImportContext, Importer
from .smi_table import detect_table, load_tables

NAME = "npu-smi"


def _detect(path: Path) -> Detection:
    return detect_table(path, "npu-smi")


def _load(path: Path, ctx: ImportContext) -> None:
    load_tables(path, ctx, NAME, "npu", "npu-smi")


IMPORTER = Importer(
    name=NAME, description="Huawei npu-smi info tables", detect=_detect, load=_load, patterns=("*npu-smi*",)
)
