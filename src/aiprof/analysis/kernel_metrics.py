"""Per-launch kernel metrics (Nsight Compute and other kernel profilers), one row per launch."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import analyser

#: Output column -> the metric names that fill it: the details-page name first, then the
#: names of older releases, then the raw-page metric id. The first one present wins.
COLUMNS: dict[str, tuple[str, ...]] = {
    "sm_pct": (
        "Compute (SM) Throughput",
        "Compute (SM) [%]",
        "SM [%]",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "memory_pct": (
        "Memory Throughput",
        "Memory [%]",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "dram_pct": (
        "DRAM Throughput",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "l1_pct": ("L1/TEX Cache Throughput", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
    "l2_pct": ("L2 Cache Throughput", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    "achieved_occupancy_pct": ("Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    "theoretical_occupancy_pct": ("Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct"),
    "registers_per_thread": ("Registers Per Thread", "launch__registers_per_thread"),
    "waves_per_sm": ("Waves Per SM", "launch__waves_per_multiprocessor"),
    "sm_frequency_hz": ("SM Frequency", "gpc__cycles_elapsed.avg.per_second"),
    "elapsed_cycles": ("Elapsed Cycles", "gpc__cycles_elapsed.max"),
}
DURATION: tuple[str, ...] = ("Duration", "gpu__time_duration.sum")
TEXT_COLUMNS: dict[str, tuple[str, ...]] = {"grid": ("Grid Size",), "block": ("Block Size",)}

#: Time unit as Nsight Compute prints it -> factor to µs.
_TO_US = {
    "ns": 1e-3, "nsecond": 1e-3, "nsec": 1e-3,
    "us": 1.0, "usecond": 1.0, "usec": 1.0, "µs": 1.0,
    "ms": 1e3, "msecond": 1e3, "msec": 1e3,
    "s": 1e6, "second": 1e6, "sec": 1e6,
}  # fmt: skip
_FREQ_TO_HZ = {
    "hz": 1.0,
    "khz": 1e3,
    "mhz": 1e6,
    "ghz": 1e9,
    "cycle/second": 1.0,
    "cycle/nsecond": 1e9,
    "cycle/usecond": 1e6,
}


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _pick(names: tuple[str, ...], expr: str = "value") -> str:
    """The value of the first of ``names`` a launch has (by the order of ``names``)."""
    cases = " ".join(f"WHEN {_lit(n)} THEN {i}" for i, n in enumerate(names))
    inlist = ", ".join(_lit(n) for n in names)
    return f"arg_min({expr}, CASE metric {cases} END) FILTER (WHERE metric IN ({inlist}) AND {expr} IS NOT NULL)"


def _unit_case(mapping: dict[str, float]) -> str:
    cases = " ".join(f"WHEN {_lit(k)} THEN {v!r}" for k, v in mapping.items())
    return f"CASE lower(coalesce(unit, '')) {cases} ELSE NULL END"


@analyser(
    "kernel-metrics",
    "Kernel metrics (per launch)",
    default_sort=("-duration_us",),
    units={
        "duration_us": "µs",
        "sm_pct": "%",
        "memory_pct": "%",
        "dram_pct": "%",
        "l1_pct": "%",
        "l2_pct": "%",
        "achieved_occupancy_pct": "%",
        "theoretical_occupancy_pct": "%",
        "sm_frequency_hz": "Hz",
        "elapsed_cycles": "cycles",
    },
)
def kernel_metrics(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per profiled kernel launch (the kernel_metrics table, pivoted):
    rank, launch_id, kernel, duration_us (µs), bound (compute-bound / memory-bound /
    latency-bound / balanced, from the Speed-of-Light figures), sm_pct and memory_pct
    (SM and memory throughput, % of peak), dram_pct, l1_pct, l2_pct (%),
    achieved_occupancy_pct, theoretical_occupancy_pct (%), registers_per_thread,
    waves_per_sm, sm_frequency_hz (Hz), elapsed_cycles, grid and block (as printed),
    rules (how many guidance rules fired) and max_speedup_pct (the largest estimated
    speedup those rules give, % of the launch's time). Null where the profile lacks it."""
    dur_us = f"value * ({_unit_case(_TO_US)})"
    cols = [
        f"{_pick(DURATION, dur_us)} AS duration_us",
        "any_value(text) FILTER (WHERE section = 'aiprof' AND metric = 'bound') AS bound",
    ]
    for name, metrics in COLUMNS.items():
        expr = f"value * coalesce({_unit_case(_FREQ_TO_HZ)}, 1.0)" if name == "sm_frequency_hz" else "value"
        cols.append(f"{_pick(metrics, expr)} AS {name}")
    for name, metrics in TEXT_COLUMNS.items():
        cols.append(f"{_pick(metrics, 'text')} AS {name}")
    cols.append("count(*) FILTER (WHERE metric LIKE 'rule:%')::BIGINT AS rules")
    cols.append("max(value) FILTER (WHERE metric LIKE 'rule:%' AND unit LIKE '%\\%%' ESCAPE '\\') AS max_speedup_pct")
    sql = f"""
        SELECT rank, launch_id, any_value(kernel) AS kernel, {", ".join(cols)}
        FROM kernel_metrics
        GROUP BY profile, rank, launch_id
        ORDER BY profile, rank, launch_id
    """
    return profile.sql(sql)
