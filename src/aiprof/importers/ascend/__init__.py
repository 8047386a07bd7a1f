"""Huawei Ascend: torch_npu's and msprof's outputs, the cluster analysis, and the CSV and JSON
summary readers they share."""
