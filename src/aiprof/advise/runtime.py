"""Runtime calls that are not launches: device context creation, allocator calls and
setup calls in the steps.

The call that created a process's device context (the runtime view's class
``context``, defined once: :data:`aiprof.analysis.runtime.CONTEXT_SQL`) is none of
the allocator or setup calls: on Nsight Systems it reads as a first ``cudaMalloc`` of
hundreds of ms, which no caching allocator removes. ``runtime.context_init`` says what
it is; ``runtime.memory_mgmt`` and ``runtime.setup`` leave it out.
"""

from __future__ import annotations

import functools
from typing import Any

from ..analysis.runtime import ALL
from .base import Context, NotEnoughData, Outcome, make, needs, rule, share

#: nsys analyze flags synchronous allocator calls; we fire when they take this share of step time.
MEMORY_MGMT_SHARE = 0.01
#: Setup calls (stream / event creation, attribute queries) inside the steps, share of step time.
SETUP_SHARE = 0.01
#: Device context creation inside the steps (or the profiled time), share of step time.
CONTEXT_INIT_SHARE = 0.01


def _classes(ctx: Context, cls: str) -> tuple[list[dict[str, Any]], float] | NotEnoughData:
    rows = ctx.rows("runtime")
    step = ctx.step_us()
    if not rows or not step:
        return NotEnoughData("no host runtime calls in the profile")
    return [r for r in rows if r["class"] == cls], step


def _top(rows: list[dict[str, Any]]) -> list[str]:
    named = [r for r in rows if r["name"] != ALL and float(r["in_steps_us"]) > 0]
    return [str(r["name"]) for r in sorted(named, key=lambda r: -float(r["in_steps_us"]))[:3]]


def _union(rows: list[dict[str, Any]], col: str) -> float:
    return sum(float(r[col]) for r in rows if r["name"] == ALL)


@rule(
    "runtime.memory_mgmt",
    "Allocator calls inside the steps",
    anchor="nsys analyze / PyTorch caching allocator guidance",
    cause="memory_mgmt",
    thresholds={"memory_mgmt_share": MEMORY_MGMT_SHARE},
)
@needs(functools.partial(_classes, cls="memory"))
def memory_mgmt(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    """Allocator calls (class ``memory``) inside the steps. The call that created the
    device context (class ``context``: a process's first runtime call, a long first
    ``cudaMalloc`` or ``cudaFree`` before any device work) is not allocator churn and is
    left out: ``runtime.context_init`` speaks of it."""
    rows, step = got
    t = _union(rows, "in_steps_us")
    s = share(t, step)
    if s < MEMORY_MGMT_SHARE:
        return None
    return make(
        f"Allocator calls ({', '.join(_top(rows))}) take {100 * s:.1f}% of the step on the host.",
        {
            "memory_mgmt_us": t,
            "calls": sum(int(r["calls"]) for r in rows if r["name"] == ALL),
            "step_us": step,
            "memory_mgmt_pct": 100 * s,
            "outside_steps_us": _union(rows, "outside_steps_us"),
        },
        t,
        "Allocate once and reuse: keep the caching allocator warm (no torch.cuda.empty_cache() in the loop), "
        "preallocate buffers, and use pinned-memory pools instead of allocating per step.",
        pytorch="# no torch.cuda.empty_cache() inside the loop\nbuf = torch.empty(shape, device='cuda')  # once, reused",
    )


@rule(
    "runtime.setup",
    "Setup calls inside the steps",
    anchor="nsys analyze",
    cause="setup",
    thresholds={"setup_share": SETUP_SHARE},
)
@needs(functools.partial(_classes, cls="setup"))
def setup(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    rows, step = got
    t = _union(rows, "in_steps_us")
    startup = _union(
        [r for r in ctx.rows("runtime") or [] if r["class"] in ("setup", "memory", "context")], "outside_steps_us"
    )
    s = share(t, step)
    if s < SETUP_SHARE:
        return None
    return make(
        f"Setup calls ({', '.join(_top(rows))}) take {100 * s:.1f}% of the step"
        + (
            f"; {startup / 1000:.1f} ms more of setup and allocation runs outside the steps (startup cost, not step "
            "time)."
            if round(startup / 1000, 1) > 0
            else "."
        ),
        {
            "setup_us": t,
            "calls": sum(int(r["calls"]) for r in rows if r["name"] == ALL),
            "step_us": step,
            "setup_pct": 100 * s,
            "startup_us": startup,
        },
        t,
        "Create streams, events and handles once, before the loop, and cache device attribute queries.",
        pytorch="stream = torch.cuda.Stream()  # once, outside the loop\nev = torch.cuda.Event()",
    )


@rule(
    "runtime.context_init",
    "Device context creation inside the steps",
    anchor="CUDA lazy initialization / Nsight Systems",
    cause="context_init",
    thresholds={"context_init_share": CONTEXT_INIT_SHARE},
)
@needs(functools.partial(_classes, cls="context"))
def context_init(ctx: Context, got: tuple[list[dict[str, Any]], float]) -> Outcome:
    """The call that created a process's device context (class ``context``,
    :data:`aiprof.analysis.runtime.CONTEXT_SQL`) inside the steps: one-time lazy
    initialization, which a warm-up before the timed region (or a profile that starts
    after it) removes from the step time."""
    rows, step = got
    t = _union(rows, "in_steps_us")
    s = share(t, step)
    if s < CONTEXT_INIT_SHARE:
        return None
    calls = sorted((r for r in rows if r["name"] != ALL), key=lambda r: -float(r["max_us"]))
    first = calls[0]
    return make(
        f"The process's first runtime call ({first['name']}, {float(first['max_us']) / 1000:.1f} ms) creates the "
        f"device context (lazy initialization) and takes {100 * s:.1f}% of the step: one-time start-up, not "
        "allocator or setup work.",
        {
            "context_init_us": t,
            "call": str(first["name"]),
            "call_us": float(first["max_us"]),
            "processes": sum(int(r["calls"]) for r in rows if r["name"] == ALL),
            "step_us": step,
            "context_init_pct": 100 * s,
        },
        t,
        "Initialize the device before the timed region (a warm-up step, or one small operation on the device "
        "first; in CUDA C/C++, cudaFree(0)), or start profiling after warm-up (a profiler schedule, or an "
        "Nsight Systems capture range).",
        pytorch=(
            "torch.cuda.init(); torch.zeros(1, device='cuda'); torch.cuda.synchronize()  # before the timed region\n"
            "# or profile after warm-up:\n"
            "prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3))"
        ),
    )
