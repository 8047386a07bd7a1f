"""Cluster: ranks that are slower than the others."""

from __future__ import annotations

from .base import Context, NotEnoughData, Outcome, make, rule

#: msprof-analyze slow rank / slow link: (max - min) / mean above this.
SPREAD = 0.05
#: A rank that arrives last at this share of the matched collectives is the straggler.
STRAGGLER_SHARE = 0.5
#: ...over at least this many matched collectives (fewer: one late start, or two,
#: is as likely chance as a straggler).
STRAGGLER_MIN_COLLECTIVES = 4


def _spread(values: list[float]) -> tuple[float, float]:
    """The mean of ``values`` and their spread, (max - min) / mean (msprof-analyze's)."""
    mean = sum(values) / len(values)
    return mean, (max(values) - min(values)) / mean if mean else 0.0


@rule("cluster.slow_rank", "Slow rank", anchor="msprof-analyze", cause="communication", thresholds={"spread": SPREAD})
def slow_rank(ctx: Context) -> Outcome:
    rows = [r for r in ctx.rows("ranks") or [] if r["steps"]]
    if len(rows) < 2:
        return NotEnoughData("fewer than two ranks with step markers")
    if len(ctx.rows("stragglers") or []) >= 3:
        # Step means hide a straggler behind the waits it causes: with a median to
        # compare with, cluster.persistent_straggler (robust z-scores) answers this.
        return NotEnoughData("three or more ranks: see cluster.persistent_straggler")
    means = [float(r["step_mean_us"]) for r in rows]
    mean, spread = _spread(means)
    if spread <= SPREAD:
        return None
    slow = max(rows, key=lambda r: float(r["step_mean_us"]))
    # The other ranks wait for the slow one at every step (in their collectives).
    waited = sum((max(means) - float(r["step_mean_us"])) * int(r["steps"]) for r in rows if r is not slow)
    return make(
        f"Rank {slow['rank']} is the slowest: mean step times spread {100 * spread:.1f}% across ranks.",
        {
            "slowest_rank": slow["rank"],
            "max_step_us": max(means),
            "min_step_us": min(means),
            "mean_step_us": mean,
            "spread_pct": 100 * spread,
        },
        waited,
        "Balance the work: check the slow rank's data shard, host (CPU contention, thermal throttling), "
        "and device; all ranks wait for it at every collective.",
        pytorch="# compare per-rank timings\ntorch.distributed.all_gather_object(times, step_time)",
    )


#: A rank waits for the others (in backward) at least this share of its step time: the
#: slow-rank spread of msprof-analyze, read as the step share lost.
WAIT_SHARE = SPREAD


def balanced_cpu_share(ctx: Context, slow: int, ranks: list[int]) -> float | None:
    """The most of the step that balancing can save when the ranks compute on the CPU of
    one host (no accelerator; ``proc_cpu`` / ``sys_cpu`` recorded inside the steps),
    else None.

    The ranks' CPU work stays: balanced, each rank runs the mean of the ranks' work,
    sum(p_r) T / R (p_r: rank r's CPU rate, in cores, over the step T), and no rank
    waits, so all R ranks compete for the cores at once. The slow rank never waits, so
    its rate p_s is what a busy thread got; the rest of the host (o = sys x C - sum(p_r))
    counts as o / p_s threads as busy, and each of the N = o / p_s + R threads gets
    min(1, C / N) of a core (the fair share). A step then takes the mean work at that
    rate: the saving is at most 1 - mean(p_r) / min(1, C / N) of it. On an idle host
    (o = 0, R <= C) that is 1 - mean(p_r): the waiting ranks' idle share."""
    if any(str(d.get("type")) != "cpu" for d in ctx.devices):
        return None
    cores = ctx.cores()
    cpu = {int(r["rank"]): r for r in ctx.rows("loader_cpu") or []}
    if not cores or any(cpu.get(r, {}).get("proc_cpu_pct") is None for r in ranks):
        return None
    host = min(float(cpu[slow]["sys_cpu_pct"] or 0.0) / 100.0, 1.0)
    p = {r: min(max(float(cpu[r]["proc_cpu_pct"]) / 100.0, 1e-3), 1.0) for r in ranks}
    c = float(sum(cores.get(r, min(cores.values())) for r in ranks))  # the ranks' share of the host
    others = max(host * c - sum(p.values()), 0.0) / p[slow]
    rate = min(1.0, c / (others + len(ranks)))
    return max(1.0 - sum(p.values()) / len(ranks) / rate, 0.0)


@rule(
    "cluster.backward_wait",
    "Slow rank: the others wait for it inside backward (DDP, Python samples)",
    anchor="msprof-analyze",
    cause="rank_wait",
    thresholds={"wait_share": WAIT_SHARE},
)
def backward_wait(ctx: Context) -> Outcome:
    rows = ctx.rows("rank_waits") or []
    if len(rows) < 2:
        return NotEnoughData("fewer than two DistributedDataParallel ranks with sampled forward and backward phases")
    waiting = max(rows, key=lambda r: float(r["wait_pct"] or 0.0))
    share = float(waiting["wait_pct"] or 0.0) / 100.0
    if share < WAIT_SHARE:
        return None
    slow = min(rows, key=lambda r: float(r["wait_us"] or 0.0))
    lost = sum(float(r["wait_us"] or 0.0) for r in rows)
    total = sum(float(r["step_us"] or 0.0) for r in rows)
    cpu_bound = balanced_cpu_share(ctx, slow["rank"], [r["rank"] for r in rows])
    # Balanced, every rank's step shrinks by the ranks' mean wait: over all ranks that is
    # the sum of the waits.
    hot = [
        h
        for h in ctx.rows("phase_hotspots") or []
        if h["rank"] == slow["rank"] and h["phase"] in ("forward", "backward", "other_python", "data_loading")
    ]
    top = max(hot, key=lambda h: int(h["samples"])) if hot else None
    where = (
        f" Rank {slow['rank']} spends most in {top['function']} ({top['file']}:{top['line']}, {top['phase']})."
        if top
        else ""
    )
    waiters = [r for r in rows if r is not slow and float(r["wait_pct"] or 0.0) >= 100 * WAIT_SHARE]
    return make(
        f"Rank {slow['rank']} is the slow rank: rank{'s' if len(waiters) > 1 else ''} "
        f"{', '.join(str(r['rank']) for r in waiters)} wait{'' if len(waiters) > 1 else 's'} for it in backward "
        f"(the gradient all-reduce) {100 * share:.1f}% of the step; balanced, the job gains "
        f"{100 * lost / total if total else 0.0:.1f}% of its step time"
        + (
            f", at most {100 * cpu_bound:.1f}% with the CPU the host gave the ranks (balanced, all of them "
            "compute at once)"
            if cpu_bound is not None and total and cpu_bound < lost / total
            else ""
        )
        + f".{where}",
        {
            "slowest_rank": slow["rank"],
            "waiting_ranks": [r["rank"] for r in waiters],
            "max_wait_pct": 100 * share,
            "wait_us": lost,
            "step_share_lost_pct": 100 * lost / total if total else 0.0,
            "backward_per_forward": {str(r["rank"]): r["backward_per_forward"] for r in rows},
        }
        | ({"cpu_bound_pct": 100 * cpu_bound} if cpu_bound is not None else {})
        | ({"function": top["function"], "file": top["file"], "line": top["line"]} if top else {}),
        min(lost, cpu_bound * total) if cpu_bound is not None else lost,
        "Balance the work across ranks: give the slow rank's data shard, sequence lengths or micro-batches "
        "to the others; the waiting ranks idle in every gradient all-reduce until it arrives.",
        pytorch="# equal shards: DistributedSampler(ds, shuffle=True, drop_last=True); same micro-batches per rank",
    )


@rule(
    "cluster.straggler",
    "Straggler at collectives",
    anchor="HTA / msprof-analyze",
    cause="communication",
    thresholds={"last_share": STRAGGLER_SHARE, "min_collectives": STRAGGLER_MIN_COLLECTIVES},
)
def straggler(ctx: Context) -> Outcome:
    rows = [r for r in ctx.rows("ranks") or [] if r["collectives"]]
    if len(rows) < 2:
        return NotEnoughData("collectives of fewer than two ranks to match")
    worst = max(rows, key=lambda r: int(r["last_arrivals"]))
    n = int(worst["collectives"])
    if n < STRAGGLER_MIN_COLLECTIVES:
        return NotEnoughData(
            f"{n} matched collectives, fewer than {STRAGGLER_MIN_COLLECTIVES}: too few to tell a straggler"
        )
    s = int(worst["last_arrivals"]) / n if n else 0.0
    if s < STRAGGLER_SHARE:
        return None
    late = max(float(r["mean_late_us"] or 0.0) for r in rows)
    # The others wait for the straggler: its mean lateness behind the earliest rank,
    # less their own, at each of their collectives.
    worst_late = float(worst["mean_late_us"] or 0.0)
    waited = sum(
        max(worst_late - float(r["mean_late_us"] or 0.0), 0.0) * int(r["collectives"]) for r in rows if r is not worst
    )
    return make(
        f"Rank {worst['rank']} starts {100 * s:.0f}% of the collectives last; the others wait for it.",
        {
            "rank": worst["rank"],
            "last_arrivals": worst["last_arrivals"],
            "collectives": n,
            "last_pct": 100 * s,
            "max_mean_late_us": late,
        },
        waited,
        "Find what delays that rank before its collectives (data loading, host work, a slower device).",
        pytorch="# NCCL_DEBUG=INFO and per-rank profiles; compare the straggler's host timeline",
    )


@rule(
    "cluster.slow_link",
    "Slow link: collective bandwidth differs across ranks",
    anchor="msprof-analyze",
    cause=None,
    thresholds={"spread": SPREAD},
)
def slow_link(ctx: Context) -> Outcome:
    rows = [r for r in ctx.rows("ranks") or [] if r["comm_gbps"]]
    if len(rows) < 2:
        return NotEnoughData("fewer than two ranks with sized collectives")
    if len(rows) >= 3 and any(r["busbw_gbps"] is not None for r in ctx.rows("links") or []):
        # Per-rank bandwidth counts the wait for a straggler as slowness: the
        # matched instances (cluster.slow_group_link) answer this instead.
        return NotEnoughData("three or more ranks with matched collectives: see cluster.slow_group_link")
    bw = [float(r["comm_gbps"]) for r in rows]
    _, spread = _spread(bw)
    if spread <= SPREAD:
        return None
    slow = min(rows, key=lambda r: float(r["comm_gbps"]))
    return make(
        f"Rank {slow['rank']} reaches {float(slow['comm_gbps']):.2f} GB/s in collectives; "
        f"bandwidth spreads {100 * spread:.1f}% across ranks.",
        {"slowest_rank": slow["rank"], "min_gbps": min(bw), "max_gbps": max(bw), "spread_pct": 100 * spread},
        0.0,
        "Check the slow rank's links (NVLink/PCIe/NIC errors, topology, NCCL_IB_* settings).",
        pytorch="# NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the transport each rank uses",
    )


#: MindInsight's cluster page marks the stage with the longest stage time as the pipeline's
#: bottleneck; a spread above msprof-analyze's slow-rank threshold makes it worth advice.
STAGE_SPREAD = SPREAD


@rule(
    "cluster.slow_stage",
    "Slow pipeline stage",
    anchor="MindInsight",
    # The other stages wait for it. MindSpore's cluster files give stage times, not the
    # events of the wait, so that time is unattributed there; with full traces the wait
    # shows as send / receive (communication) and this bound is conservative.
    cause="unaccounted",
    thresholds={"spread": STAGE_SPREAD},
)
def slow_stage(ctx: Context) -> Outcome:
    rows = [r for r in ctx.rows("stages") or [] if r["stage_ms"] is not None]
    if len(rows) < 2:
        return NotEnoughData("fewer than two pipeline stages with stage times")
    times = [float(r["stage_ms"]) for r in rows]
    mean, spread = _spread(times)
    if spread <= STAGE_SPREAD:
        return None
    slow = max(rows, key=lambda r: float(r["stage_ms"]))
    return make(
        f"Pipeline stage {slow['stage']} (ranks {slow['ranks']}) is the slowest: stage times spread "
        f"{100 * spread:.1f}% across the {len(rows)} stages.",
        {
            "slowest_stage": slow["stage"],
            "ranks": slow["ranks"],
            "stage_ms": float(slow["stage_ms"]),
            "min_stage_ms": min(times),
            "mean_stage_ms": mean,
            "spread_pct": 100 * spread,
            "slowest_rank": slow["slowest_rank"],
        },
        (max(times) - mean) / max(times) * ctx.total_us(),
        "Rebalance the pipeline: move layers out of the slow stage (pipeline_stages / the layers each stage "
        "holds), or raise the micro-batch count so the other stages wait less for it.",
        pytorch="# torch.distributed.pipelining: split points that give each stage equal compute",
        mindspore=(
            "from mindspore import nn\n"
            "net.layer12.pipeline_stage = 2  # a Cell moved out of the slow stage\n"
            "net_with_loss = nn.PipelineCell(net_with_loss, micro_size=8)  # more micro-batches"
        ),
    )
