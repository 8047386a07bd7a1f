"""Advice from the Python samples alone (default ``aiprof record``, no torch.profiler):
which phase of the step (analysis/phases.py) costs most, and the line that costs most in it."""

from __future__ import annotations

from typing import Any

from .base import Context, NotEnoughData, Outcome, make, rule

#: tb-profiler's DataLoader threshold, applied to the sampled data-loading phase.
DATA_LOADING_SHARE = 0.05
#: tb-profiler flags host syncs per step; from samples: .item()/.cpu()/.tolist() time.
SYNC_SHARE = 0.03
#: msprof-analyze's "host-bound" floor for time outside compute: logging/printing.
LOGGING_SHARE = 0.03
#: Optimizer time above this share of the step (PyTorch's foreach/fused optimizers).
OPTIMIZER_SHARE = 0.15
#: User Python in the step outside the framework's calls (per-sample preprocessing,
#: Python loops over tensors): no peer tool has this rule; tb-profiler's 5% floor for one
#: cause of step time, doubled, since the loop's own bookkeeping is Python of this kind too.
PREPROCESS_SHARE = 0.10

_FIXES = {
    "data_loading": (
        "Take the per-sample work out of the training process's critical path: DataLoader workers "
        "(num_workers>0, persistent_workers=True) where cores are free, and vectorise per-item Python "
        "transforms over the batch (a collate_fn or a batched transform).",
        "loader = DataLoader(ds, batch_size=B, num_workers=2, persistent_workers=True, collate_fn=batched_augment)",
    ),
    "sync": (
        "Read values back from the device less often: accumulate on the device and call .item() / .cpu() "
        "every N steps, not every step.",
        "running += loss.detach()\nif step % 50 == 0:\n    print(running.item() / 50); running.zero_()",
    ),
    "logging": (
        "Log less often (every N steps) and format lazily; printing every step stalls the loop.",
        "if step % 50 == 0:\n    log.info('step %d loss %.4f', step, loss.item())",
    ),
    "other_python": (
        "Move the per-sample Python work out of the training loop: into the Dataset's __getitem__ "
        "(where DataLoader workers run it in parallel) or vectorised over the batch with tensor ops.",
        "x = (batch - batch.mean(1, keepdim=True)) / (batch.std(1, keepdim=True) + 1e-6)  # not a loop over rows",
    ),
    "optimizer": (
        "Use the foreach or fused implementation of the optimizer (one kernel over all parameters).",
        "opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)  # fused=True on CUDA",
    ),
}


def per_rank(ctx: Context, phase: str) -> dict[int, tuple[float, float]]:
    """Rank -> (its step time, the phase's time in it), µs, over all its steps."""
    out: dict[int, tuple[float, float]] = {}
    for r in ctx.rows("phases") or []:
        if r["step"] is not None:
            continue
        t, mine = out.get(int(r["rank"]), (0.0, 0.0))
        v = float(r["time_us"] or 0.0)
        out[int(r["rank"])] = (t + v, mine + (v if r["phase"] == phase else 0.0))
    return out


def _phase(ctx: Context, phase: str) -> tuple[float, float, float, dict[str, Any] | None] | NotEnoughData:
    """(phase share of the step time over all ranks, its time in µs, samples, the
    costliest line) or why not."""
    rows = ctx.rows("phases")
    if not rows:
        return NotEnoughData("no Python samples inside steps")
    ranks = per_rank(ctx, phase)
    total = sum(t for t, _ in ranks.values())
    if total <= 0:
        return NotEnoughData("no Python samples inside steps")
    mine = sum(m for _, m in ranks.values())
    samples = sum(int(r["samples"] or 0) for r in rows if r["step"] is None and r["phase"] == phase)
    hot = [r for r in ctx.rows("phase_hotspots") or [] if r["phase"] == phase]
    top = max(hot, key=lambda r: r["samples"]) if hot else None
    return mine / total, mine, float(samples), top


def loader_overlap_us(ctx: Context, per: dict[int, tuple[float, float]]) -> tuple[float, int | None]:
    """What loader workers can save of (step time, loading time) per rank (µs), and the
    workers that assumes (the host's cores; None when the cores were not recorded).

    The loading L of a step T either runs in the main process or, where the loader
    has workers (``loader_cpu``: samples under the multi-process iterator), waits for
    them.

    - Run in the main process: with W = C workers on C cores the steps' CPU work still
      has to run. The job ran at p cores (``proc_cpu``) while the rest of the host
      used o = sys x C - p (``sys_cpu``); other work gets its fair share of the cores,
      so the others count as o / p threads as busy as the job's and the job's 1 + W
      threads get (1 + W) C / max(N, C) cores, N = o / p + 1 + W. A step then takes
      max(R, T p / those cores), R = T - L. On an idle host (p = 1, o = 0) that is
      max(R, T / C): on one core, no saving.
    - Waiting for workers already there: more workers add only the idle cores, so the
      saving is at most T (1 - sys).

    Worker start-up and the batches' transfer between processes are not counted
    (persistent workers start once)."""
    cores = ctx.cores()
    if not cores:
        return sum(m for _, m in per.values()), None
    cpu = {int(r["rank"]): r for r in ctx.rows("loader_cpu") or []}
    saved = 0.0
    for rank, (t, load) in per.items():
        c = cores.get(rank, min(cores.values()))
        row = cpu.get(rank, {})
        # A loader with workers: the rest of its time in the main process is the
        # iterator's own work, which more workers do not move either.
        waiting = load if int(row.get("worker_samples") or 0) > 0 else 0.0
        p = min(max(float(row.get("proc_cpu_pct") or 100.0) / 100.0, 1e-3), 1.0)
        busy = row.get("sys_cpu_pct")
        host = min(float(busy) / 100.0, 1.0) if busy is not None else p / c
        others = max(host * c - p, 0.0) / p
        job_cores = (1 + c) * c / max(others + 1 + c, c)
        after = max(t - (load - waiting), t * p / job_cores)
        saved += min(max(t - after, 0.0) + min(waiting, t * (1.0 - host)), load)
    return saved, min(cores.values())


def _advise(ctx: Context, rule_id: str, phase: str, threshold: float, what: str) -> Outcome:
    got = _phase(ctx, phase)
    if isinstance(got, NotEnoughData):
        return got
    s, mine_us, samples, top = got
    if s <= threshold:
        return None
    where = f" The line that costs most: {top['function']} ({top['file']}:{top['line']})." if top else ""
    evidence: dict[str, Any] = {f"{phase}_pct": 100 * s, "samples": int(samples)}
    if top:
        evidence |= {"function": top["function"], "file": top["file"], "line": top["line"]}
        evidence["line_pct_of_phase"] = top["phase_pct"]
    fix, snippet = _FIXES[phase]
    # The phase's own time: what removing it from the loop saves at most.
    estimate = mine_us
    if phase == "data_loading":
        # Workers move the loading off the main process, not off the CPU.
        estimate, cores = loader_overlap_us(ctx, per_rank(ctx, phase))
        if cores is not None and estimate <= threshold * ctx.total_us():
            # The loading is already overlapped (workers) or the cores are busy: more
            # workers would not gain what the threshold asks for.
            return None
        if cores is not None:
            evidence |= {"cores": cores, "overlap_us": estimate}
            snippet = snippet.replace("num_workers=2", f"num_workers={cores}")
            cpu = (ctx.rows("loader_cpu") or [{}])[0]
            if cpu.get("worker_samples"):
                where += " The loader already has workers; more can use only the host's idle cores."
            if cpu.get("sys_cpu_pct") is not None:
                evidence |= {"proc_cpu_pct": cpu["proc_cpu_pct"], "sys_cpu_pct": cpu["sys_cpu_pct"]}
                where += (
                    f" During the steps the job used {cpu['proc_cpu_pct'] or 0:.0f}% of a core and the host's "
                    f"cores were {cpu['sys_cpu_pct']:.0f}% busy (rank {cpu['rank']})."
                )
            where += (
                f" With {cores} DataLoader workers on {cores} cores, loading runs beside the rest of the "
                f"step: at most {estimate / 1000:,.1f} ms saved over the profile."
            )
    return make(
        f"{what} takes {100 * s:.1f}% of the step time (threshold {100 * threshold:.0f}%, from Python samples).{where}",
        evidence,
        estimate,
        fix,
        pytorch=snippet,
    )


@rule(
    "python.data_loading",
    "The training loop waits for its data (Python samples)",
    anchor="tb-profiler",
    cause="python_data_loading",
    thresholds={"data_loading_share": DATA_LOADING_SHARE},
)
def data_loading(ctx: Context) -> Outcome:
    return _advise(ctx, "python.data_loading", "data_loading", DATA_LOADING_SHARE, "Data loading")


@rule(
    "python.sync",
    "Host-device syncs in the loop: .item() / .cpu() / .tolist() (Python samples)",
    anchor="tb-profiler",
    cause="python_sync",
    thresholds={"sync_share": SYNC_SHARE},
)
def sync(ctx: Context) -> Outcome:
    return _advise(ctx, "python.sync", "sync", SYNC_SHARE, "Reading values back (.item(), .cpu(), .tolist())")


@rule(
    "python.logging",
    "Logging and printing in the loop (Python samples)",
    anchor="msprof-analyze",
    cause="python_logging",
    thresholds={"logging_share": LOGGING_SHARE},
)
def logging_time(ctx: Context) -> Outcome:
    return _advise(ctx, "python.logging", "logging", LOGGING_SHARE, "Logging and printing")


@rule(
    "python.optimizer",
    "The optimizer step is a large share of the step (Python samples)",
    anchor="PyTorch performance tuning guide",
    cause="python_optimizer",
    thresholds={"optimizer_share": OPTIMIZER_SHARE},
)
def optimizer(ctx: Context) -> Outcome:
    return _advise(ctx, "python.optimizer", "optimizer", OPTIMIZER_SHARE, "The optimizer step")


@rule(
    "python.preprocessing",
    "User Python in the step outside the framework's calls (Python samples)",
    anchor="tb-profiler",
    cause="python_preprocessing",
    thresholds={"preprocess_share": PREPROCESS_SHARE},
)
def preprocessing(ctx: Context) -> Outcome:
    return _advise(
        ctx,
        "python.preprocessing",
        "other_python",
        PREPROCESS_SHARE,
        "User Python outside forward, backward, the optimizer and the data loader",
    )
