"""Cluster, across the ranks of a job (the views of aiprof.cluster.views): persistent
stragglers by robust z-score, and slow links by achieved bus bandwidth."""

from __future__ import annotations

from ..cluster.views import PERSISTENT_SHARE, SLOW_LINK_FRACTION, STRAGGLER_Z
from .base import Context, NotEnoughData, Outcome, make, rule

#: Robust z-scores need a median and a spread: at least this many ranks.
MIN_RANKS = 3


def job_us(ctx: Context) -> float:
    """The step time of every rank added up (µs), from the per-rank summaries: the
    denominator of a job's gains when it is opened through its cluster index (which
    holds no events to attribute); the same total the attribution gives otherwise."""
    return float(sum(float(r["step_us"] or 0.0) * int(r["steps"] or 0) for r in ctx.rows("stragglers") or []))


@rule(
    "cluster.persistent_straggler",
    "Persistent straggler: a rank computes slower than the others step after step",
    anchor="robust z-score (Iglewicz & Hoaglin), HTA / msprof-analyze slow rank",
    cause="communication",
    thresholds={"z": STRAGGLER_Z, "persistent_share": PERSISTENT_SHARE},
)
def persistent_straggler(ctx: Context) -> Outcome:
    # The ranks view runs for the other cluster rules anyway: a one-rank profile stops here.
    rows = ctx.rows("stragglers") or [] if len(ctx.rows("ranks") or []) >= MIN_RANKS else []
    if len(rows) < MIN_RANKS:
        return NotEnoughData(f"fewer than {MIN_RANKS} ranks with step markers")
    # work_z: compute_z on device ranks, else the z-score of the step less the rank's
    # waits for the others (cluster/views.py).
    slow = sorted((r for r in rows if r["persistent"]), key=lambda r: -float(r["work_z"] or 0.0))
    if not slow:
        return None
    worst = slow[0]
    lost = float(worst["lost_pct"] or 0.0)
    others = ", ".join(str(r["rank"]) for r in slow[1:6])
    z = (
        f"compute z-score {float(worst['compute_z']):.1f}"
        if worst["compute_z"] is not None
        else f"z-score {float(worst['work_z'] or 0.0):.1f} of its own work, its step less its waits for the others"
    )
    return make(
        f"Rank {worst['rank']} is slow in {worst['slow_steps']} of {worst['steps']} steps "
        f"({z}); the job waits {lost:.1f}% of each step for it" + (f"; also slow: ranks {others}." if others else "."),
        {
            "rank": worst["rank"],
            "slow_steps": worst["slow_steps"],
            "steps": worst["steps"],
            "compute_us": worst["compute_us"],
            "compute_z": worst["compute_z"],
            "work_us": worst["work_us"],
            "work_z": worst["work_z"],
            "step_z": worst["step_z"],
            "lost_pct": lost,
            "slow_ranks": [r["rank"] for r in slow],
        },
        # Every rank waits that share of its steps for the straggler (in its collectives).
        lost / 100.0 * job_us(ctx),
        "Look at that rank's host and device: a thermally throttled or shared GPU, a slower "
        "node, CPU contention, or a larger data shard; every other rank waits for it at each collective.",
        pytorch="# per-rank step and compute time\nprof = torch.profiler.profile(...)  # on every rank; aiprof import *.json -o job",
    )


@rule(
    "cluster.slow_group_link",
    "Slow link: one process group moves data slower than its peers",
    anchor="NCCL-tests bus bandwidth, msprof-analyze slow link",
    cause="communication",
    thresholds={"fraction": SLOW_LINK_FRACTION},
)
def slow_group_link(ctx: Context) -> Outcome:
    several = len(ctx.rows("ranks") or []) >= 2
    rows = [r for r in (ctx.rows("links") or [] if several else []) if r["busbw_gbps"] is not None]
    if not rows:
        return NotEnoughData("no sized collective matched across ranks")
    slow = [r for r in rows if r["slow"]]
    if not slow:
        return None
    worst = min(slow, key=lambda r: min(float(r["rel_bw"] or 1.0), float(r["slowest_rank_rel"] or 1.0)))
    lost_us = sum(float(r["lost_us"] or 0.0) for r in slow)
    by_group = float(worst["rel_bw"] or 1.0) < SLOW_LINK_FRACTION
    what = (
        f"process group {worst['pg']} (ranks {worst['pg_ranks']}) reaches {100 * float(worst['rel_bw']):.0f}% "
        f"of the bus bandwidth of its peer groups in {worst['op']}"
        if by_group
        else f"rank {worst['slowest_rank']} reaches {100 * float(worst['slowest_rank_rel']):.0f}% of its group "
        f"{worst['pg']}'s bus bandwidth in {worst['op']}"
    )
    return make(
        f"Slow link: {what} ({float(worst['busbw_gbps']):.2f} GB/s).",
        {
            "pg": worst["pg"],
            "pg_ranks": worst["pg_ranks"],
            "op": worst["op"],
            "busbw_gbps": worst["busbw_gbps"],
            "rel_bw": worst["rel_bw"],
            "slowest_rank": worst["slowest_rank"],
            "slow_groups": sorted({str(r["pg"]) for r in slow}),
            "lost_us": lost_us,
        },
        # Each rank of a slow group waits out the lost transfer time.
        sum(float(r["lost_us"] or 0.0) * max(1, int(r["pg_size"] or 1)) for r in slow),
        "Check the link between these ranks: NVLink/PCIe/NIC errors and counters, the topology "
        "NCCL chose (NCCL_DEBUG=INFO), cabling, a degraded port.",
        pytorch="# NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the transport each rank pair uses",
    )
