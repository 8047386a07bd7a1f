"""Reference numbers from Holistic Trace Analysis (HTA) for Kineto traces.

Run with the interpreter of a separate virtualenv that has
``holistictraceanalysis==0.5.0`` and ``pandas<3`` (not torch), e.g.::

    /work/hta-venv/bin/python bench/hta_reference.py [TRACE.json.gz ...] > out.jsonl

Without arguments every ``*.json.gz`` under ``<repo>/../shared/data/kineto`` is
used. One JSON object per trace file is printed on stdout.

Each file is analysed in its own child process (this script re-invoked with
``--child``) so that peak RSS is per file and a crash, hang or memory blow-up
in HTA on one odd trace cannot take the other files down with it.

Units: HTA never converts to nanoseconds. It keeps the trace's own unit
(microseconds) and, when ``ts`` is a float column, rounds every event inward
to whole microseconds (``ts = ceil(ts)``, ``end = floor(ts + dur)``,
``dur = end - ts``; see ``hta.common.trace_parser.round_down_time_stamps``).
All ``*_ns`` fields below are HTA's microsecond values times 1000, so they are
exact multiples of 1000; the matching ``*_us`` values are kept as well.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

US_TO_NS = 1000

# HTA's own defaults for get_cuda_kernel_launch_stats / get_idle_time_breakdown,
# repeated here so the output records which thresholds produced the numbers.
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100
CONSECUTIVE_KERNEL_DELAY_US = 30

DEFAULT_TIMEOUT_S = 900.0


def _default_trace_files() -> list[Path]:
    repo_root = Path(__file__).resolve().parents[1]
    data_dir = repo_root.parent / "shared" / "data" / "kineto"
    return sorted(data_dir.rglob("*.json.gz"))


def _jsonable(value: Any) -> Any:
    """Convert numpy/pandas scalars and containers to plain JSON values."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        # HTA durations are whole microseconds; keep them as ints when exact
        # so that comparisons against integer nanoseconds stay exact.
        if value.is_integer():
            return int(value)
    return value


def _us_to_ns(value: Any) -> Any:
    value = _jsonable(value)
    if value is None:
        return None
    return _jsonable(value * US_TO_NS)


def _cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (user + system): on shared
    cores it moves less with the load than wall time does."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _rss_now_bytes() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux; this child only ever analyses one file,
    # so the process-wide high-water mark is the per-file figure.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --------------------------------------------------------------------------
# Child side: load one trace with HTA and collect the reference numbers.
# --------------------------------------------------------------------------


def _install_load_probes(probe: dict[str, Any]) -> None:
    """Record facts about HTA's loading that its public API does not expose.

    The wrappers only observe and then call the original function, so the
    loading itself is exactly what ``TraceAnalysis(...)`` does.
    """
    import numpy as np
    from hta.common import trace as hta_trace
    from hta.common import trace_parser

    original_round = trace_parser.round_down_time_stamps

    def round_probe(df):  # type: ignore[no-untyped-def]
        # Rounding applies only when pandas gave "ts" a float dtype, i.e. when
        # at least one event has a fractional (sub-microsecond) timestamp.
        probe["ts_rounded_to_us"] = bool("ts" in df.columns and df["ts"].dtype == np.dtype("float64"))
        probe["raw_events"] = len(df)
        return original_round(df)

    trace_parser.round_down_time_stamps = round_probe

    original_align = hta_trace.Trace.align_and_filter_trace

    def align_probe(self, include_last_profiler_step=False):  # type: ignore[no-untyped-def]
        # Event counts before HTA drops everything launched at or after the
        # start of the last ProfilerStep (only when >= 2 steps exist).
        probe["events_parsed"] = {r: len(df) for r, df in self.traces.items()}
        steps = [s for s in self.symbol_table.get_sym_id_map() if "ProfilerStep" in s]
        probe["profiler_steps"] = sorted(steps)
        probe["last_step_filter_applied"] = len(steps) > 1
        return original_align(self, include_last_profiler_step)

    hta_trace.Trace.align_and_filter_trace = align_probe


def _gpu_kernel_summary(analyzer: Any) -> dict[str, Any]:
    """Kernel counts/durations over the events HTA's breakdowns consume.

    ``get_temporal_breakdown`` and ``get_gpu_kernel_breakdown`` both take
    ``trace_df[stream != -1]`` (kernels, memcpy, memset and any stream-bound
    sync events); ``GPUKernelFilter`` is the stricter stream>=0 & correlation>=0
    (+ Event/Context Sync) view used when loading.
    """
    from hta.common.trace_filter import GPUKernelFilter
    from hta.utils.utils import get_kernel_type

    t = analyzer.t
    sym_table = t.symbol_table.get_sym_table()
    out: dict[str, Any] = {}
    for rank, df in t.traces.items():
        gpu = df[df["stream"].ne(-1)]
        kinds = gpu["name"].map(lambda i: get_kernel_type(sym_table[i]))
        cats = gpu["cat"].map(lambda i: sym_table[i])
        by_type = {k: {"count": len(g), "total_dur_ns": _us_to_ns(g["dur"].sum())} for k, g in gpu.groupby(kinds)}
        by_cat = {c: {"count": len(g), "total_dur_ns": _us_to_ns(g["dur"].sum())} for c, g in gpu.groupby(cats)}
        filtered = GPUKernelFilter()(df, t.symbol_table)
        out[str(rank)] = {
            "count": len(gpu),
            "total_dur_us": _jsonable(gpu["dur"].sum()),
            "total_dur_ns": _us_to_ns(gpu["dur"].sum()),
            "streams": sorted(int(s) for s in gpu["stream"].unique()),
            "by_kernel_type": by_type,
            "by_cat": by_cat,
            "gpu_kernel_filter_count": len(filtered),
            "gpu_kernel_filter_dur_ns": _us_to_ns(filtered["dur"].sum()),
        }
    return out


def _temporal_breakdown(analyzer: Any) -> dict[str, Any]:
    df = analyzer.get_temporal_breakdown(visualize=False)
    out: dict[str, Any] = {}
    for row in df.to_dict("records"):
        out[str(_jsonable(row["rank"]))] = {
            "idle_ns": _us_to_ns(row["idle_time(us)"]),
            "compute_ns": _us_to_ns(row["compute_time(us)"]),
            "non_compute_ns": _us_to_ns(row["non_compute_time(us)"]),
            "kernel_time_ns": _us_to_ns(row["kernel_time(us)"]),
            "idle_pct": _jsonable(row["idle_time_pctg"]),
            "compute_pct": _jsonable(row["compute_time_pctg"]),
            "non_compute_pct": _jsonable(row["non_compute_time_pctg"]),
        }
    return out


def _idle_time_breakdown(analyzer: Any) -> dict[str, Any]:
    # HTA defaults to ranks=[0]; ask for every loaded rank explicitly.
    ranks = analyzer.t.get_ranks()
    df, _ = analyzer.get_idle_time_breakdown(
        ranks=ranks,
        visualize=False,
        consecutive_kernel_delay=CONSECUTIVE_KERNEL_DELAY_US,
    )
    out: dict[str, Any] = {}
    for row in df.to_dict("records"):
        per_stream = out.setdefault(str(_jsonable(row["rank"])), {})
        cats = per_stream.setdefault(str(_jsonable(row["stream"])), {})
        # Categories with no gap at all are simply absent in HTA's output;
        # report them as 0 so every stream has the same three keys.
        cats[f"{row['idle_category']}_ns"] = _us_to_ns(row["idle_time"])
    for per_stream in out.values():
        for cats in per_stream.values():
            for name in ("host_wait_ns", "kernel_wait_ns", "other_ns"):
                cats.setdefault(name, 0)
    return out


def _kernel_type_breakdown(analyzer: Any) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        kernel_type_df, _ = analyzer.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
    return [
        {
            "kernel_type": row["kernel_type"],
            "sum_ns": _us_to_ns(row["sum"]),
            "percentage": _jsonable(row["percentage"]),
        }
        for row in kernel_type_df.to_dict("records")
    ]


def _launch_stats(analyzer: Any) -> dict[str, Any]:
    ranks = analyzer.t.get_ranks()
    stats = analyzer.get_cuda_kernel_launch_stats(
        ranks=ranks,
        runtime_cutoff=RUNTIME_CUTOFF_US,
        launch_delay_cutoff=LAUNCH_DELAY_CUTOFF_US,
        visualize=False,
    )
    out: dict[str, Any] = {}
    for rank, df in stats.items():
        # The cutoffs only drive HTA's plots; these are the sets it plots.
        short = df[(df["cpu_duration"] <= RUNTIME_CUTOFF_US) & (df["gpu_duration"] < df["cpu_duration"])]
        out[str(rank)] = {
            "launches": len(df),
            "cpu_duration_sum_ns": _us_to_ns(df["cpu_duration"].sum()),
            "gpu_duration_sum_ns": _us_to_ns(df["gpu_duration"].sum()),
            "launch_delay_sum_ns": _us_to_ns(df["launch_delay"].sum()),
            "short_kernels": len(short),
            "runtime_outliers": int((df["cpu_duration"] > RUNTIME_CUTOFF_US).sum()),
            "launch_delay_outliers": int((df["launch_delay"] > LAUNCH_DELAY_CUTOFF_US).sum()),
        }
    return out


def _analyse_one(trace_file: Path) -> dict[str, Any]:
    import hta
    import pandas as pd
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis

    # HTA logs progress at WARNING on stdout; keep it out of the way.
    hta_logger.setLevel(logging.ERROR)
    warnings.simplefilter("ignore", FutureWarning)

    result: dict[str, Any] = {
        "file": str(trace_file),
        "hta_version": getattr(hta, "__version__", None),
        "pandas_version": pd.__version__,
        "time_unit": "HTA works in microseconds; *_ns = HTA value * 1000",
        "errors": {},
    }
    probe: dict[str, Any] = {}
    _install_load_probes(probe)

    result["rss_before_load_bytes"] = _rss_now_bytes()
    with tempfile.TemporaryDirectory(prefix="hta_ref_") as trace_dir:
        # HTA takes a directory of per-rank files and infers each rank from
        # the file's "distributedInfo"; a symlink avoids copying large traces.
        os.symlink(trace_file.resolve(), Path(trace_dir) / trace_file.name)
        t0 = time.perf_counter()
        c0 = _cpu_seconds()
        try:
            analyzer = TraceAnalysis(trace_dir=trace_dir)
        except Exception as exc:
            result["load_seconds"] = time.perf_counter() - t0
            result["peak_rss_bytes"] = _peak_rss_bytes()
            result.update(probe)
            result["error"] = f"load: {type(exc).__name__}: {exc}"
            result["traceback"] = traceback.format_exc(limit=8)
            return result
        result["load_seconds"] = time.perf_counter() - t0
        result["load_cpu_seconds"] = _cpu_seconds() - c0
        result["peak_rss_bytes"] = _peak_rss_bytes()

    result.update(probe)
    result["ranks"] = analyzer.t.get_ranks()
    result["events_loaded"] = {str(r): len(df) for r, df in analyzer.t.traces.items()}
    result["events"] = sum(result["events_loaded"].values())

    analyses = {
        "gpu_kernels": _gpu_kernel_summary,
        "temporal_breakdown": _temporal_breakdown,
        "idle_time_breakdown": _idle_time_breakdown,
        "kernel_type_breakdown": _kernel_type_breakdown,
        "launch_stats": _launch_stats,
    }
    result["analysis_seconds"] = {}
    for name, fn in analyses.items():
        try:
            t_a = time.perf_counter()
            result[name] = fn(analyzer)
            result["analysis_seconds"][name] = time.perf_counter() - t_a
        except Exception as exc:
            result[name] = None
            result["errors"][name] = f"{type(exc).__name__}: {exc}"

    result["peak_rss_bytes_with_analyses"] = _peak_rss_bytes()
    result["error"] = None
    return result


def _child_main(trace_file: str, out_path: str) -> int:
    result = _analyse_one(Path(trace_file))
    with open(out_path, "w") as fh:
        json.dump(_jsonable(result), fh)
    return 0


# --------------------------------------------------------------------------
# Parent side: one child process per file.
# --------------------------------------------------------------------------


def _run_file(trace_file: Path, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hta_ref_out_") as tmp:
        out_path = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--child", str(trace_file), str(out_path)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return {"file": str(trace_file), "error": f"timeout after {timeout_s}s"}
        wall = time.perf_counter() - t0
        if out_path.exists():
            result = json.loads(out_path.read_text())
        else:
            # The child died without writing (segfault, OOM kill, import error).
            tail = (proc.stderr or proc.stdout or "")[-2000:]
            result = {
                "file": str(trace_file),
                "error": f"child exited with {proc.returncode}: {tail}",
            }
        result["child_wall_seconds"] = wall
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Kineto trace files")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds allowed per file (default: %(default)s)",
    )
    parser.add_argument("--child", nargs=2, metavar=("TRACE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        return _child_main(*args.child)

    files = args.files or _default_trace_files()
    if not files:
        print("no trace files found", file=sys.stderr)
        return 1
    failures = 0
    for trace_file in files:
        result = _run_file(trace_file, args.timeout)
        failures += result.get("error") is not None
        print(json.dumps(result, sort_keys=True), flush=True)
    print(f"{len(files)} files, {failures} failed to load", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
