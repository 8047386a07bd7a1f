"""Steps: a step far longer than the others (an evaluation pass, a checkpoint, a compile).

Two kinds of long step are not the loop's fault, and get no code fix:

- the run's first step (warm-up: lazy initialisation, the allocator's first
  allocations, caches, compilation), paid once per run: ``steps.warmup``, a note;
- a step the machine paused: the job was not running for most of its excess while
  its code had work to do (:func:`machine_pauses`): stopped (SIGSTOP, a paused VM),
  preempted by other processes, swapped out. ``steps.outlier`` says so, and
  :func:`aiprof.advise.warnings` warns of it.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analysis.outliers import OUTLIER_MAD_K, OUTLIER_MIN_RATIO
from .base import Context, NotEnoughData, Outcome, make, rule, stack_frames

#: A step numbered at most this that is its rank's first in the profile is the run's
#: first step (aiprof record and torch.profiler count from 0; msprof's iterations from 1).
FIRST_STEP_MAX = 1
#: The share of an outlier's excess time the job must have been off the CPU for, beyond
#: the typical step's own off-CPU share, for the machine to be blamed.
PAUSED_SHARE = 0.5
#: Typical steps must run on the CPU at least this share of their time (a job whose
#: steps mostly wait, for a device or for workers, tells little by its CPU time); low
#: enough for a job that shares its core with two others.
MIN_NORMAL_CPU = 0.2
#: Least share of an outlier's time the process's CPU counter must cover to be read.
MIN_COVERAGE = 0.8
#: Fewest Python samples in the step for its stacks to say the job was in computation.
MIN_SAMPLES = 3
#: A step whose samples cover less than this share of what the sampling rate gives:
#: what ran in it (``what``) is not known.
MIN_SAMPLE_DENSITY = 0.5

#: Stack frames that wait (threads, queues, sockets, processes, the DataLoader's
#: workers, collectives, device synchronization): a job off the CPU there waits in its code.
_WAIT_FILE = re.compile(
    r"/(threading|queue|selectors|socket|ssl|subprocess|signal)\.py$|/multiprocessing/|/asyncio/|"
    r"/concurrent/futures/|/torch/distributed/|/torch/cuda/"
)
_WAIT_FUNCTION = re.compile(r"_MultiProcessingDataLoaderIter|synchronize|barrier")
#: The innermost line calls something that blocks (a C call has no frame of its own).
_WAIT_LINE = re.compile(
    r"\b(sleep|wait|join|acquire|recv\w*|read\w*|write\w*|input|select|poll|synchronize|barrier|item|cpu|"
    r"tolist|numpy|save|load|open|flush|fsync|communicate|urlopen|request|get|put)\s*\("
)


def first_steps(ctx: Context) -> dict[int, int]:
    """Rank -> its first step number in the profile."""
    out: dict[int, int] = {}
    for r in ctx.rows("steps") or []:
        if r.get("step") is not None:
            rank, step = int(r["rank"]), int(r["step"])
            out[rank] = min(step, out.get(rank, step))
    return out


def is_warmup(ctx: Context, rank: int, step: int) -> bool:
    """Whether (rank, step) is the run's first step: its rank's first in the profile and
    numbered at most :data:`FIRST_STEP_MAX` (not the first of a window further on)."""
    return step <= FIRST_STEP_MAX and first_steps(ctx).get(rank) == step


@dataclass
class Pause:
    """An outlier step the job was not running for (:func:`machine_pauses`)."""

    rank: int
    step: int
    duration_us: float
    excess_us: float
    cpu_us: float
    """The job's CPU time in the step (µs)."""
    runq_us: float | None
    """The marking thread's wait for a CPU in the step, where the recorder measured it."""
    normal_pct: float
    """The typical step's share of its wall time on a CPU (with the step's own figures:
    on a CPU or waiting for one)."""
    stopped_us: float
    """Wall time the job was neither running nor waiting for a CPU, beyond the typical
    step's share: stopped, blocked or swapped out."""
    preempted_us: float
    """Wait for a CPU beyond the typical step's share (0 where not measured)."""
    source: str
    """'step' (the step's own CPU and run-queue figures) or 'proc_cpu' (the process's CPU counter)."""
    samples: int
    """Python samples of the step's thread in it."""
    computing_pct: float | None
    """Share of those samples whose stack waits in no call (None: too few samples)."""

    @property
    def not_running_us(self) -> float:
        return self.stopped_us + self.preempted_us

    @property
    def machine(self) -> bool:
        """The machine's doing: the job was not running for most of the excess, and
        either it waited that long for a CPU (preempted) or its stack shows it in
        computation while it did not run (stopped)."""
        if self.not_running_us < PAUSED_SHARE * self.excess_us:
            return False
        return self.preempted_us >= PAUSED_SHARE * self.excess_us or (self.computing_pct or 0.0) >= 50.0

    def said(self) -> str:
        """The sentence that says so (the outlier advice and the advice's warning)."""
        if self.source == "step":
            why = (
                f"its thread ran {self.cpu_us / 1000:,.1f} ms and waited {(self.runq_us or 0.0) / 1000:,.1f} ms for a "
                f"CPU in it, where the other steps run or wait for a CPU {self.normal_pct:.0f}% of their time"
            )
        else:
            why = (
                f"its process used {self.cpu_us / 1000:,.1f} ms of CPU there, where the other steps use the CPU "
                f"{self.normal_pct:.0f}% of their time"
            )
        if self.preempted_us >= PAUSED_SHARE * self.excess_us:
            why += f"; it waited {self.preempted_us / 1000:,.0f} ms more than they do for a CPU (preempted)"
        elif self.computing_pct is not None:
            why += (
                f"; {self.computing_pct:.0f}% of its {self.samples} Python samples show its stack in computation, "
                "not waiting in a call"
            )
        return (
            f"the job was not running for {self.not_running_us / 1000:,.0f} ms of it: {why}. The machine paused "
            "it (stopped, preempted, swapped out), not the code"
        )


def machine_pauses(ctx: Context) -> dict[tuple[int, int], Pause]:
    """(rank, step) -> :class:`Pause` of the outlier steps whose CPU time was measured.

    Where the recorder measured the step (the marking thread's CPU time and run-queue
    wait, ``args.cpu_ns`` / ``runq_ns``), a step's wall time is its time on a CPU, its
    wait for one (preempted: the machine's load) and the rest (stopped, blocked,
    sleeping, swapped out). Else the process's CPU counter (``proc_cpu``, % of a core
    over each polling interval, spread over the step's window) gives its CPU time,
    and the rest is all of that. At the typical steps' share (at least
    :data:`MIN_NORMAL_CPU`), the step's figures account for part of its wall time; the
    job was not running for the rest. The machine is blamed where that is most of the
    step's excess (:data:`PAUSED_SHARE`) and either the step waited that long for a CPU
    beyond the typical share, or its Python samples show the stack in computation: a
    job off the CPU inside a blocking call (a sleep, I/O, a lock, a queue, its
    DataLoader workers, a collective, a device sync) waits in its own code. Stack
    samples taken from outside the job go on while it is stopped, showing where it
    stopped; a sampler inside the job takes none then, and without samples only the
    run-queue wait can blame the machine."""
    key = "advise:machine_pauses"
    if key not in ctx.cache:
        ctx.cache[key] = _pauses(ctx)
    got: dict[tuple[int, int], Pause] = ctx.cache[key]
    return got


def _pauses(ctx: Context) -> dict[tuple[int, int], Pause]:
    from ..analysis.steady import per_step

    rows = ctx.rows("outlier_steps") or []
    if not rows:
        return {}
    steps = [r for r in ctx.rows("steps") or [] if r.get("step") is not None]
    out_keys = {(int(r["rank"]), int(r["step"])) for r in rows}
    measured = per_step(ctx.profile)
    out: dict[tuple[int, int], Pause] = {}
    for rank in sorted({int(r["rank"]) for r in rows}):
        mine = [r for r in steps if int(r["rank"]) == rank]
        normal = [r for r in mine if (rank, int(r["step"])) not in out_keys]
        cpu = _step_cpu(measured, rank, mine) or _counter_cpu(ctx, rank, mine)
        if cpu is None:
            continue
        figures, source = cpu
        # The typical step's shares of its wall time: on a CPU (or waiting for one, where
        # measured), and waiting for one.
        known = [(figures[int(r["step"])], float(r["duration_us"])) for r in normal if int(r["step"]) in figures]
        on = _median([(c + (q or 0.0)) / d for (c, q), d in known])
        waits = _median([(q or 0.0) / d for (c, q), d in known]) or 0.0
        if on is None or on < MIN_NORMAL_CPU:
            continue
        for r in (x for x in rows if int(x["rank"]) == rank):
            step = int(r["step"])
            if step not in figures:
                continue
            used, runq = figures[step]
            dur, excess = float(r["duration_us"]), float(r["excess_us"])
            stopped = min(max(dur - (used + (runq or 0.0)) / on, 0.0), dur)
            preempted = min(max((runq or 0.0) - waits * dur, 0.0), dur - stopped)
            start = next(float(s["start_us"]) for s in mine if int(s["step"]) == step)
            n, computing = _computing(ctx, rank, start, start + dur)
            out[(rank, step)] = Pause(
                rank, step, dur, excess, used, runq, 100.0 * on, stopped, preempted, source, n, computing
            )
    return out


def _median(values: list[float]) -> float | None:
    got = [x for x in values if np.isfinite(x)]
    return float(np.median(got)) if got else None


def _step_cpu(
    measured: dict[tuple[int, int], tuple[float, float]], rank: int, steps: list[dict[str, Any]]
) -> tuple[dict[int, tuple[float, float | None]], str] | None:
    """Step -> (CPU µs, run-queue µs) from the steps' own figures, where every step has them."""
    got = {int(r["step"]): measured[(rank, int(r["step"]))] for r in steps if (rank, int(r["step"])) in measured}
    if not got:
        return None
    return {s: (c, q) for s, (c, q) in got.items()}, "step"


def _counter_cpu(
    ctx: Context, rank: int, steps: list[dict[str, Any]]
) -> tuple[dict[int, tuple[float, float | None]], str] | None:
    """Step -> (CPU µs, None) from the process's CPU counter, for the steps it covers
    (at least :data:`MIN_COVERAGE` of the step; the rate over the covered part)."""
    from ..analysis.common import fetch

    if not ctx.profile.tables.get("counters"):
        return None
    c = fetch(
        ctx.profile,
        "SELECT ts, value FROM counters WHERE metric = 'proc_cpu' AND device_type = 'cpu' AND rank = ? ORDER BY ts",
        [rank],
    )
    if len(c["ts"]) < 2:
        return None
    # Each reading is the process's CPU over the interval since the previous one.
    t0, t1, v = c["ts"][:-1] / 1000.0, c["ts"][1:] / 1000.0, c["value"][1:] / 100.0
    got: dict[int, tuple[float, float | None]] = {}
    for r in steps:
        s, e = float(r["start_us"]), float(r["start_us"]) + float(r["duration_us"])
        over = np.clip(np.minimum(t1, e) - np.maximum(t0, s), 0.0, None)
        covered = float(over.sum())
        if e > s and covered >= MIN_COVERAGE * (e - s):
            got[int(r["step"])] = (float((over * v).sum()) * (e - s) / covered, None)
    return (got, "proc_cpu") if got else None


def _computing(ctx: Context, rank: int, start_us: float, end_us: float) -> tuple[int, float | None]:
    """(Python samples of the step's thread in [start, end), % of them whose stack waits
    in no call; None below :data:`MIN_SAMPLES`)."""
    from ..analysis.common import fetch

    if not ctx.profile.tables.get("samples"):
        return 0, None
    s = fetch(
        ctx.profile,
        "SELECT stack_id, tid FROM samples WHERE rank = ? AND ts >= ? AND ts < ?",
        [rank, int(start_us * 1000), int(end_us * 1000)],
    )
    if not len(s["stack_id"]):
        return 0, None
    tids, counts = np.unique(s["tid"], return_counts=True)
    sel = s["tid"] == tids[np.argmax(counts)]  # the busiest thread: the loop's
    stacks = s["stack_id"][sel].tolist()
    if len(stacks) < MIN_SAMPLES:
        return len(stacks), None
    frames = stack_frames(ctx, rank)
    waits = sum(1 for st in stacks if _waits(frames, int(st)))
    return len(stacks), 100.0 * (len(stacks) - waits) / len(stacks)


def _waits(frames: dict[int, tuple[int, str, str, int]], leaf: int) -> bool:
    """Whether the stack ending at frame ``leaf`` waits in a call (:data:`_WAIT_FILE`,
    :data:`_WAIT_FUNCTION`, or an innermost line that calls one: :data:`_WAIT_LINE`)."""
    if leaf in frames:
        _, _, fl, ln = frames[leaf]
        if _WAIT_LINE.search(linecache.getline(fl, ln) if ln > 0 else ""):
            return True
    node, guard = leaf, 0
    while node in frames and guard < 512:
        parent, fn, fl, _ = frames[node]
        if _WAIT_FILE.search(fl.replace("\\", "/")) or _WAIT_FUNCTION.search(fn):
            return True
        node, guard = parent, guard + 1
    return False


def _sampled(ctx: Context, row: dict[str, Any]) -> bool:
    """Whether the step's Python samples cover it (:data:`MIN_SAMPLE_DENSITY` of what the
    sampling interval gives): else what ran in it is not known."""
    if row.get("what_source") != "python":
        return True
    interval = ctx.profile.memo("advise:sample_interval", lambda: _interval(ctx))
    if not interval:
        return True
    start = next(
        (
            float(s["start_us"])
            for s in ctx.rows("steps") or []
            if s.get("step") == row["step"] and s["rank"] == row["rank"]
        ),
        None,
    )
    if start is None:
        return True
    n, _ = _computing(ctx, int(row["rank"]), start, start + float(row["duration_us"]))
    return n >= MIN_SAMPLE_DENSITY * float(row["duration_us"]) / interval


def _interval(ctx: Context) -> float | None:
    """The median gap between a thread's consecutive samples (µs)."""
    if not ctx.profile.tables.get("samples"):
        return None
    got = ctx.profile.sql(
        "SELECT median(d) AS d FROM (SELECT ts - lag(ts) OVER (PARTITION BY rank, pid, tid ORDER BY ts) AS d "
        "FROM samples) WHERE d > 0"
    ).to_pylist()
    d = got[0]["d"] if got else None
    return float(d) / 1000.0 if d else None


@rule(
    "steps.outlier",
    "Outlier steps",
    anchor="median / MAD rule (analysis/outliers.py)",
    cause="outlier_step",
    thresholds={"min_ratio": OUTLIER_MIN_RATIO, "mad_k": OUTLIER_MAD_K, "paused_share": PAUSED_SHARE},
)
def outlier(ctx: Context) -> Outcome:
    if ctx.steps() == 0:
        return NotEnoughData("no step markers")
    rows = [r for r in ctx.rows("outlier_steps") or [] if not is_warmup(ctx, int(r["rank"]), int(r["step"]))]
    if not rows:
        return None  # none, or the run's first step alone: steps.warmup's note
    pauses = machine_pauses(ctx)
    paused = [r for r in rows if (k := (int(r["rank"]), int(r["step"]))) in pauses and pauses[k].machine]
    code = [r for r in rows if r not in paused]
    if not code:
        # The machine paused every outlier: nothing in the code to change.
        worst = max(paused, key=lambda r: float(r["excess_us"]))
        p = pauses[(int(worst["rank"]), int(worst["step"]))]
        more = f" ({len(paused) - 1} more such step{'s' if len(paused) > 2 else ''})" if len(paused) > 1 else ""
        return make(
            f"Step {worst['step']} took {float(worst['duration_us']) / 1000:,.0f} ms, "
            f"{float(worst['ratio']):.0f}x the median ({float(worst['median_us']) / 1000:,.1f} ms), but {p.said()}"
            f"{more}. Per-step means leave outlier steps out.",
            _evidence(worst, paused) | _pause_evidence(p),
            0.0,
            "Nothing to change in the code for this step: the time is the machine's. Profile on a machine that "
            "is not shared, paused or short of memory, or compare runs with aiprof diff's steady step, which "
            "leaves out the wait for a CPU.",
        )
    worst = max(code, key=lambda r: float(r["excess_us"]))
    known = _sampled(ctx, worst)
    what = f"; it runs {worst['what']}" if worst["what"] and known else ""
    if worst["what"] and not known:
        what = "; too few Python samples fell in it to say what ran there"
    more = f" ({len(code) - 1} more outlier steps)" if len(code) > 1 else ""
    aside = ""
    if paused:
        aside = f" Not counted: step{'s' if len(paused) > 1 else ''} {', '.join(str(r['step']) for r in paused)}, which the machine paused (warnings)."
    evidence = _evidence(worst, code)
    if not known:
        evidence["what"] = None
    return make(
        f"Step {worst['step']} took {float(worst['duration_us']) / 1000:,.0f} ms, "
        f"{float(worst['ratio']):.0f}x the median ({float(worst['median_us']) / 1000:,.1f} ms){what}{more}. "
        f"Per-step means leave outlier steps out.{aside}",
        evidence,
        sum(float(r["excess_us"]) for r in code),
        "Move the work that makes the step long out of the timed loop, or run it less often: evaluate "
        "every N epochs, checkpoint asynchronously, warm up (compile) before profiling.",
        pytorch="if epoch % eval_every == 0:\n    test(model)  # outside the profiled steps",
    )


def _evidence(worst: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "step": worst["step"],
        "rank": worst["rank"],
        "duration_us": worst["duration_us"],
        "median_us": worst["median_us"],
        "ratio": worst["ratio"],
        "what": worst["what"],
        "what_pct": worst["what_pct"],
        "outlier_steps": [int(r["step"]) for r in rows],
        "excess_us": sum(float(r["excess_us"]) for r in rows),
    }


def _pause_evidence(p: Pause) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cpu_us": p.cpu_us,
        "normal_pct": p.normal_pct,
        "not_running_us": p.not_running_us,
        "stopped_us": p.stopped_us,
        "preempted_us": p.preempted_us,
        "cpu_source": p.source,
        "samples": p.samples,
    }
    if p.runq_us is not None:
        out["runq_us"] = p.runq_us
    if p.computing_pct is not None:
        out["computing_pct"] = p.computing_pct
    return out


@rule(
    "steps.warmup",
    "The first step warms up",
    anchor="median / MAD rule (analysis/outliers.py)",
    cause=None,
    thresholds={"first_step_max": FIRST_STEP_MAX},
)
def warmup(ctx: Context) -> Outcome:
    if ctx.steps() == 0:
        return NotEnoughData("no step markers")
    rows = [r for r in ctx.rows("outlier_steps") or [] if is_warmup(ctx, int(r["rank"]), int(r["step"]))]
    if not rows:
        return None
    worst = max(rows, key=lambda r: float(r["excess_us"]))
    total = ctx.step_us() or 0.0
    share = 100.0 * float(worst["duration_us"]) / total if total else 0.0
    return make(
        f"Step {worst['step']}, the run's first, took {float(worst['duration_us']) / 1000:,.0f} ms, "
        f"{float(worst['ratio']):.0f}x the median ({float(worst['median_us']) / 1000:,.1f} ms; {share:.1f}% of the "
        "profiled step time): warm-up (lazy initialisation, the allocator's first allocations, caches, "
        "compilation), paid once per run, not in every step. Per-step means and the outlier advice leave it out.",
        {
            "step": worst["step"],
            "rank": worst["rank"],
            "duration_us": worst["duration_us"],
            "median_us": worst["median_us"],
            "ratio": worst["ratio"],
            "pct_of_steps": share,
            "ranks": sorted({int(r["rank"]) for r in rows}),
        },
        0.0,
        "Nothing to fix in the loop: the cost is paid once per run. The advice leaves it out already; to keep "
        "it out of the profile, start profiling after the first step (the Profiler API's start_profile=False, "
        "then prof.start()).",
        pytorch="prof = aiprof.Profiler(output='runs/exp1', start_profile=False)\n"
        "for i, batch in enumerate(loader):\n"
        "    if i == 1:\n"
        "        prof.start()  # the first step (warm-up) stays out of the profile\n"
        "    train_step(batch)\n"
        "    prof.step()\n"
        "prof.stop()",
    )
