"""Huawei Ascend NPUs through ``npu-smi info`` (its table, read by header names)."""

from __future__ import annotations

from .smi_tables_backend import TableCliBackend


class NpuSmiBackend(TableCliBackend):
    """npu-smi info: AICore(%) -> sm_util, Temp(C) -> gpu_temp, Power(W) -> power, HBM -> fb_used."""

    name = "npu-smi"
    device_type = "npu"
    vendor = "Huawei"
    tool = "npu-smi"
    args = ("info",)
