"""Kernels and device utilization: the device sits idle."""

from __future__ import annotations

from ..analysis.ranks import MIN_GAP_NS
from .base import Context, NotEnoughData, Outcome, make, rule, share

#: tb-profiler: GPU utilization below this share of the step.
LOW_UTILIZATION = 0.50
#: nsys analyze gpu_time_util: chunks below 50% busy...
REGION_BUSY = 0.50
#: ...firing when at least this share of the chunks is low.
LOW_REGION_SHARE = 0.10
#: What a fix is assumed to fill of the idle time in the low chunks: the cause is unknown
#: (nsys analyze names the regions, not what fills them), so half of it.
LOW_REGION_FILLED = 0.5
#: HTA: host wait is the main idle cause when it is the largest part of idle time and
#: idle time is at least this share of the device's active span.
IDLE_SHARE = 0.10
#: nsys analyze gpu_gaps: device idle gaps of this length or more (µs; the gaps view's default).
IDLE_GAP_US = MIN_GAP_NS / 1000

_UTIL_VIEW = "# the utilization view (aiprof report --view utilization) shows where the low chunks are"
_UTIL_FIX = (
    "Find what the device waits for (input, host launches, synchronization, communication: see the "
    "other advice) and increase the work per step (batch size)."
)


@rule(
    "kernels.low_utilization",
    "Low GPU utilization",
    anchor="tb-profiler",
    cause="unaccounted",
    thresholds={"utilization": LOW_UTILIZATION},
)
def low_utilization(ctx: Context) -> Outcome:
    rows = ctx.rows("steps")
    step = ctx.step_us()
    if not rows or not step or not ctx.rows("launch"):
        return NotEnoughData("no device work in the profile")
    busy = sum(float(r["device_busy_us"] or 0.0) for r in rows)
    u = busy / step
    if u >= LOW_UTILIZATION:
        return None
    return make(
        f"The device is busy only {100 * u:.1f}% of the step time.",
        {"device_busy_us": busy, "step_us": step, "utilization_pct": 100 * u},
        (LOW_UTILIZATION - u) * step,
        _UTIL_FIX,
        pytorch="loader = DataLoader(ds, batch_size=2 * B, num_workers=8)",
    )


@rule(
    "kernels.idle_gaps",
    "Long device idle gaps",
    anchor="nsys analyze (gpu_gaps)",
    cause="unaccounted",
    thresholds={"gap_us": IDLE_GAP_US},
)
def idle_gaps(ctx: Context) -> Outcome:
    if not ctx.rows("launch"):
        return NotEnoughData("no device work in the profile")
    rows = ctx.rows("gaps", min_gap_us=IDLE_GAP_US)
    if rows is None:
        return NotEnoughData("gaps view unavailable")
    if not rows:
        return None
    t = sum(float(r["gap_us"]) for r in rows)
    return make(
        f"{len(rows)} device idle gaps of {IDLE_GAP_US / 1000:.0f} ms or more, {t / 1000:.0f} ms in all.",
        {"gaps": len(rows), "gap_us": t, "longest_gap_us": max(float(r["gap_us"]) for r in rows)},
        t,
        _UTIL_FIX,
        pytorch="# look at the host timeline inside the gaps: aiprof timechart (Perfetto) or the UI's timeline",
    )


@rule(
    "kernels.low_util_regions",
    "Regions of low device utilization",
    anchor="nsys analyze (gpu_time_util)",
    cause="unaccounted",
    thresholds={"busy": REGION_BUSY, "region_share": LOW_REGION_SHARE},
)
def low_util_regions(ctx: Context) -> Outcome:
    rows = ctx.rows("utilization")
    if not rows:
        return NotEnoughData("no device work in the profile")
    low = [r for r in rows if r["busy_pct"] is not None and float(r["busy_pct"]) < 100 * REGION_BUSY]
    s = len(low) / len(rows)
    if s < LOW_REGION_SHARE:
        return None
    idle = sum(float(r["dur_us"]) - float(r["busy_us"]) for r in low)
    span = sum(float(r["dur_us"]) for r in rows)
    return make(
        f"{len(low)} of {len(rows)} time chunks have the device under {100 * REGION_BUSY:.0f}% busy; it is idle "
        f"{idle / 1000:.1f} ms in them ({100 * share(idle, span):.1f}% of the time the chunks cover). The trace does not "
        f"show what the device waits for there; the estimate assumes a fix fills {100 * LOW_REGION_FILLED:.0f}% of "
        "that idle time.",
        {"low_chunks": len(low), "chunks": len(rows), "low_chunk_idle_us": idle, "span_us": span},
        idle * LOW_REGION_FILLED,
        _UTIL_FIX,
        pytorch=_UTIL_VIEW,
        mindspore=_UTIL_VIEW,  # no framework's code: the same pointer
    )


@rule(
    "kernels.host_wait",
    "The device mostly waits for the host",
    anchor="HTA (idle time breakdown)",
    cause="host",
    thresholds={"idle_share": IDLE_SHARE},
)
def host_wait(ctx: Context) -> Outcome:
    rows = ctx.rows("idle")
    if not rows:
        return NotEnoughData("no device streams in the profile")
    # Whole-device figures are the overview's (HTA's temporal breakdown: the union of the
    # rank's device work over its active span); only the cause split is per stream.
    dev = [r for r in ctx.rows("overview") or [] if r["section"] == "device"]
    d_idle = sum(float(r["time_us"]) for r in dev if r["category"] == "idle")
    d_span = sum(float(r["time_us"]) for r in dev)
    hw = sum(float(r["host_wait_us"] or 0.0) for r in rows)
    kw = sum(float(r["kernel_wait_us"] or 0.0) for r in rows)
    other = sum(float(r["other_us"] or 0.0) for r in rows)
    idle = sum(float(r["idle_us"] or 0.0) for r in rows)
    if d_span <= 0 or idle <= 0 or d_idle / d_span < IDLE_SHARE or hw < max(kw, other):
        return None
    main = max(rows, key=lambda r: float(r["busy_us"] or 0.0))
    m_idle, m_span = float(main["idle_us"] or 0.0), float(main["span_us"] or 0.0)
    # The gain's base: the device's idle time inside the step windows (the overview's
    # active span starts at the first kernel; steps also hold the host's time before it).
    s_idle = sum(float(r["idle_us"] or 0.0) for r in ctx.rows("steps") or [])
    s_time = ctx.step_us() or 0.0
    return make(
        f"During the steps the device is idle {s_idle / 1000:.1f} ms, {100 * share(s_idle, s_time):.1f}% of the "
        f"step time (from its first kernel to its last: idle {d_idle / 1000:.1f} ms, {100 * d_idle / d_span:.1f}% "
        f"of that active span), and waiting for the host is the "
        f"main cause: {100 * hw / idle:.0f}% of the streams' idle time (busiest stream {main['stream']} of "
        f"device {main['device']}: idle {100 * m_idle / m_span if m_span else 0.0:.1f}% of its own span).",
        {
            "device_idle_us": d_idle,
            "device_span_us": d_span,
            "device_idle_pct": 100 * d_idle / d_span,
            "steps_idle_us": s_idle,
            "steps_idle_pct": 100 * share(s_idle, s_time),
            "streams_host_wait_us": hw,
            "streams_kernel_wait_us": kw,
            "streams_other_us": other,
            "streams_idle_us": idle,
            "busiest_stream": main["stream"],
            "busiest_stream_idle_pct": 100 * m_idle / m_span if m_span else 0.0,
        },
        # HTA's split of idle time applied to the steps' own (whole-device) idle time.
        share(hw, idle) * s_idle,
        "The host does not queue work fast enough: reduce Python overhead per step (torch.compile, CUDA "
        "graphs), move host-side preprocessing to DataLoader workers, and avoid synchronization.",
        pytorch=_COMPILED_PT if ctx.compiled() else "model = torch.compile(model)",
    )


#: The model already runs compiled: what is left is the launches' host cost (CUDA graphs).
_COMPILED_PT = (
    "# already compiled (CompiledFunction in the trace): CUDA graphs cut the host's cost per launch\n"
    "model = torch.compile(model, mode='reduce-overhead')"
)
