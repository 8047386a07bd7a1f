"""Cambricon MLUs through ``cnmon`` (its table, read by header names)."""

from __future__ import annotations

from .smi_tables_backend import TableCliBackend


class CnmonBackend(TableCliBackend):
    """cnmon's table: Util -> sm_util, Temp -> gpu_temp, Pwr -> power, Memory -> fb_used."""

    name = "cnmon"
    device_type = "mlu"
    vendor = "Cambricon"
    tool = "cnmon"
    args = ()
