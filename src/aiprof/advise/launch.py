"""Launch overhead: the host cannot launch device work fast enough."""

from __future__ import annotations

from typing import Any

from .base import Context, NotEnoughData, Outcome, make, needs, rule, share

#: XProf kernel-launch-bound classification (share of step time).
LAUNCH_BOUND_MODERATE = 0.03
LAUNCH_BOUND_HIGH = 0.15
#: HTA: short kernels (< 10 µs) dominating device time: this share of kernel time.
SHORT_KERNEL_SHARE = 0.5
#: ...counting only when there are at least this many short kernels.
MIN_SHORT_KERNELS = 100
#: HTA launch-delay cutoff (100 µs); fires when the device idles this share of the step in such delays.
DELAY_IDLE_SHARE = 0.01
#: HTA runtime cutoff (50 µs); fires when this share of launch calls exceed it.
LONG_RUNTIME_SHARE = 0.05

_GRAPHS_FIX = (
    "Launch fewer, bigger kernels: capture the step in a CUDA graph or compile the model so that "
    "small kernels fuse; raise the batch size so each kernel does more work."
)
_GRAPHS_PT = (
    "model = torch.compile(model, mode='reduce-overhead')  # fuses kernels and uses CUDA graphs\n"
    "# or: g = torch.cuda.CUDAGraph(); with torch.cuda.graph(g): out = model(static_in)"
)
_GRAPHS_NPU = "torch_npu.npu.set_compile_mode(jit_compile=False)  # Ascend: binary kernels, fewer compiles"


def _overall(ctx: Context) -> tuple[list[dict[str, Any]], float] | NotEnoughData:
    rows = ctx.rows("launch")
    if not rows:
        return NotEnoughData("no host launch call linked to device work (no correlation ids)")
    step = ctx.step_us()
    if not step:
        return NotEnoughData("no step or trace window")
    return [r for r in rows if r["operator"] == "(all)"], step


@rule(
    "launch.launch_bound",
    "Kernel-launch bound",
    anchor="XProf",
    cause="launch",
    thresholds={"moderate": LAUNCH_BOUND_MODERATE, "high": LAUNCH_BOUND_HIGH},
)
@needs(_overall)
def launch_bound(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, step = got
    idle = sum(float(r["launch_idle_us"] or 0.0) for r in rows)
    s = share(idle, step)
    if s < LAUNCH_BOUND_MODERATE:
        return None
    level = "highly" if s >= LAUNCH_BOUND_HIGH else "moderately"
    return make(
        f"The program is {level} kernel-launch bound: {100 * s:.1f}% of the step the host is launching "
        "while the device has nothing to do.",
        {
            "launch_idle_us": idle,
            "step_us": step,
            "launch_bound_pct": 100 * s,
            "launches": sum(int(r["launches"]) for r in rows),
        },
        idle,
        _GRAPHS_FIX,
        pytorch=_GRAPHS_PT,
        ascend=_GRAPHS_NPU,
    )


@rule(
    "launch.short_kernels",
    "Short kernels dominate device time",
    anchor="HTA",
    cause="launch",
    thresholds={
        "short_kernel_share": SHORT_KERNEL_SHARE,
        "short_kernel_us": 10.0,
        "min_short_kernels": MIN_SHORT_KERNELS,
    },
)
@needs(_overall)
def short_kernels(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, _step = got
    kus = sum(float(r["kernel_us"] or 0.0) for r in rows)
    sus = sum(float(r["short_kernel_us"] or 0.0) for r in rows)
    if kus <= 0:
        return NotEnoughData("no kernels linked to launches")
    s = sus / kus
    n_short = sum(int(r["short_kernels"]) for r in rows)
    if s < SHORT_KERNEL_SHARE or n_short < MIN_SHORT_KERNELS:
        return None
    idle = sum(float(r["launch_idle_us"] or 0.0) for r in rows)
    return make(
        f"Kernels shorter than 10 µs take {100 * s:.1f}% of kernel time; launch overhead dominates them.",
        {
            "short_kernel_us": sus,
            "kernel_us": kus,
            "short_kernel_pct": 100 * s,
            "short_kernels": sum(int(r["short_kernels"]) for r in rows),
            "launch_idle_us": idle,
        },
        idle,
        _GRAPHS_FIX,
        pytorch=_GRAPHS_PT,
        ascend=_GRAPHS_NPU,
    )


@rule(
    "launch.high_delay",
    "Device idle behind long launch delays",
    anchor="HTA",
    cause="launch_delay",
    thresholds={"delay_us": 100.0, "delay_idle_share": DELAY_IDLE_SHARE},
)
@needs(_overall)
def high_delay(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, step = got
    idle = sum(float(r["delay_idle_us"] or 0.0) for r in rows)
    s = share(idle, step)
    if s < DELAY_IDLE_SHARE:
        return None
    return make(
        f"Launches that wait more than 100 µs to start leave the device idle {100 * s:.1f}% of the step.",
        {
            "delay_idle_us": idle,
            "step_us": step,
            "long_delays": sum(int(r["long_delay"]) for r in rows),
            "delay_p95_us": max(float(r["delay_p95_us"] or 0.0) for r in rows),
        },
        idle,
        "Look at what the host or the device queue does between the launch and the start: cross-stream "
        "waits, synchronous calls, or a saturated launch queue; CUDA graphs remove per-launch latency.",
        pytorch=_GRAPHS_PT,
    )


@rule(
    "launch.long_runtime",
    "Slow launch calls",
    anchor="HTA",
    cause="launch",
    thresholds={"runtime_us": 50.0, "long_runtime_share": LONG_RUNTIME_SHARE},
)
@needs(_overall)
def long_runtime(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, _step = got
    n = sum(int(r["launches"]) for r in rows)
    long_ = sum(int(r["long_runtime"]) for r in rows)
    s = long_ / n if n else 0.0
    if s < LONG_RUNTIME_SHARE:
        return None
    idle = sum(float(r["launch_idle_us"] or 0.0) for r in rows)
    return make(
        f"{100 * s:.1f}% of launch calls take longer than 50 µs on the host.",
        {
            "long_runtime_calls": long_,
            "launches": n,
            "long_runtime_pct": 100 * s,
            "runtime_p95_us": max(float(r["runtime_p95_us"] or 0.0) for r in rows),
        },
        idle * s,
        "Slow launch calls usually wait on a lock or a full launch queue, or hide a synchronous "
        "allocation: check for device allocation calls (cudaMalloc, aclrtMalloc) in the step, CPU contention, and use CUDA graphs.",
        pytorch=_GRAPHS_PT,
    )
