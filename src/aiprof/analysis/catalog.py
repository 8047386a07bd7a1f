"""The list of analyser modules; importing one registers its views.

Adding a view: a new module under aiprof/analysis/ using the ``@analyser`` decorator,
and one line here. (Named catalog, not views, so that importing it never
shadows the package-level function ``aiprof.analysis.views``.)
"""

from __future__ import annotations

import importlib

MODULES: list[str] = [
    "overview",
    "operators",
    "kernels",
    "kernel_metrics",
    "idle",
    "memory",
    "allocations",
    "counters",
    "events",
    "python",
    "ranks",
    "launch",
    "sync",
    "memcpy",
    "communication",
    "dataloader",
    "energy",
    "runtime",
    "attribution",
    "outlier_steps",
    "stages",
    "op_types",
    "phases",
    "rank_waits",
    "loader_cpu",
    "vendor_steps",
]

for _m in MODULES:
    importlib.import_module(f"{__package__}.{_m}")
# Across-rank views over the cluster index live with the cluster code.
importlib.import_module("aiprof.cluster.views")
