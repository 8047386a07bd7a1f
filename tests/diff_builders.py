"""Built runs for the diff and energy tests: steps of chosen lengths, with kernels,
a communication kernel, and power counters, written straight into the store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from aiprof.store import ProfileWriter


def build_run(
    path: Path,
    step_us: Sequence[float],
    *,
    comm_share: float = 0.1,
    power_w: float | None = None,
    power_period_us: float = 100.0,
    device_type: str = "cuda",
    device_name: str = "NVIDIA H100",
    kernel_name: str = "sm90_gemm",
    comm_name: str = "ncclKernel_AllReduce_RING_LL_Sum_float",
    batch_size: int | None = None,
    runq_us: Sequence[float] | None = None,
) -> Path:
    """One run, rank 0: back-to-back steps of ``step_us``; in each, a gemm kernel for
    half the step and a communication kernel for ``comm_share`` of it; with ``power_w``
    a power counter sampled every ``power_period_us`` at a constant ``power_w``; with
    ``runq_us`` each step's run-queue wait as aiprof record writes it (its CPU time is
    the rest of the step)."""
    ev: dict[str, list[object]] = {
        k: [] for k in ("rank", "device_type", "device", "pid", "tid", "kind", "name", "ts", "dur", "args")
    }

    def add(
        dtype: str, dev: int, kind: str, name: str, ts: float, dur: float, tid: int, args: str | None = None
    ) -> None:
        for k, v in zip(ev, (0, dtype, dev, 1, tid, kind, name, int(ts * 1000), int(dur * 1000), args)):
            ev[k].append(v)

    t = 0.0
    for i, d in enumerate(step_us):
        sched = None
        if runq_us is not None:
            sched = json.dumps({"cpu_ns": int((d - runq_us[i]) * 1000), "runq_ns": int(runq_us[i] * 1000)})
        add("cpu", -1, "step", f"ProfilerStep#{i + 1}", t, d, 1, sched)
        add(device_type, 0, "kernel", kernel_name, t + 0.05 * d, 0.5 * d, 7)
        if comm_share:
            add(device_type, 0, "kernel", comm_name, t + 0.6 * d, comm_share * d, 8)
        t += d
    with ProfileWriter(path) as w:
        w.append("events", ev)
        if power_w is not None:
            n = int(t / power_period_us) + 1
            w.append(
                "counters",
                {
                    "rank": [0] * n,
                    "device_type": [device_type] * n,
                    "device": [0] * n,
                    "ts": [int(i * power_period_us * 1000) for i in range(n)],
                    "metric": ["power"] * n,
                    "value": [power_w] * n,
                    "unit": ["W"] * n,
                },
            )
        w.meta["ranks"] = [0]
        if runq_us is not None:
            w.meta["clock"] = "unix"  # a recording's clock, as aiprof record writes it
        w.meta["devices"] = [{"rank": 0, "type": device_type, "index": 0, "name": device_name, "vendor": "x"}]
        if batch_size is not None:
            w.meta["record"] = {"options": {"batch_size": batch_size}}
    return w.path
