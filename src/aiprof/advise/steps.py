"""Steps: a step far longer than the others (an evaluation pass, a checkpoint, a compile).

Two kinds of long step are not the loop's fault, and get no code fix:

- the run's first step (warm-up: lazy initialisation, the allocator's first
  allocations, caches, compilation), paid once per run: ``steps.warmup``, a note;
- a step the machine paused: the job was not running for most of its excess while
  its code had work to do (:func:`machine_pauses`): stopped (SIGSTOP, a paused VM),
  preempted by other processes, swapped out. ``steps.outlier`` says so, and
  :func:`aiprof.advise.warnings` warns of it.

A step whose thread was off the CPU while the job's other threads ran (a thread of the
job running Python holds the GIL the step's thread waits for) is the code's: the
outlier advice names that thread and what it ran, and proposes to take that work off
the GIL (:attr:`Pause.contended`).
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
#: Least CPU time the job's other threads must have used in a step whose thread was off
#: the CPU while a sampled thread of the job ran Python through it (:attr:`Pause.runner`),
#: as a share of the time the step's thread was not running (the process's CPU counter
#: less the step thread's own CPU time; the process's where the step's own figures are
#: not measured), for the job to count as running then (:attr:`Pause.job_ran`): a
#: stopped job's threads use none. The counter, 10 Hz and spread over the step, read 3%
#: over the SIGSTOP tests' stopped step; a thread holding the GIL on a core shared with
#: other processes used 8-90% of that time in the trial's jobs on a loaded 2-core machine.
#: Without such a thread the counter alone does not say: on a step of tens of ms, its
#: spread of the step thread's own CPU reads as much as half the step.
RUNNER_CPU_SHARE = 0.1
#: Least time (µs) the evidence that the job's other threads ran is read over: a shorter
#: step is read over this much time around it (two readings of the 10 Hz CPU counter,
#: some 20 sampling ticks), so that the counter, which spreads each reading over its
#: interval, is not read over a fraction of one.
EVIDENCE_WINDOW_US = 200_000.0
#: Least samples of another thread of the job running Python (waiting in no call) in
#: such a step, as a share of the step thread's samples there (the outside sampler reads
#: every thread at each tick): that thread ran through most of the step.
OTHER_RUNNING_SHARE = 0.5
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
class Runner:
    """Another thread of the job that ran Python through an outlier step while the
    step's thread was off the CPU (:func:`_runner`)."""

    tid: int
    name: str
    """The thread's name (the tracks table; ``thread TID`` where none)."""
    samples: int
    """Its samples in the window read (:data:`EVIDENCE_WINDOW_US`) whose stack waits in no call."""
    share_pct: float
    """Those samples as a share of the step thread's samples there."""
    mine: int
    """The step thread's samples there."""
    function: str
    """The hottest place of its samples there: the innermost frame of the user's code
    (else the innermost frame) most samples were in."""
    file: str
    line: int

    def where(self) -> str:
        return f"`{self.function}` at {self.file}:{self.line}"


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
    window_us: float = 0.0
    """The time the evidence that the job's other threads ran is read over: the step,
    or :data:`EVIDENCE_WINDOW_US` around a shorter one."""
    window_cpu_us: float | None = None
    """The process's CPU time (every thread's) over that window, from its CPU counter
    (None: the counter does not cover it)."""
    others_cpu_us: float | None = None
    """CPU time of the job's other threads over that window: the process's less the
    step thread's (the steps' own figures, spread over their time; None where those are
    not measured, ``source`` 'proc_cpu', or the counter does not cover the window)."""
    runner: Runner | None = None
    """The job's thread that ran Python through that window, if one did."""

    @property
    def not_running_us(self) -> float:
        return self.stopped_us + self.preempted_us

    @property
    def stalled(self) -> bool:
        """The step's thread was not running for most of the excess, and either it
        waited that long for a CPU (preempted) or its stack shows it in computation
        while it did not run (stopped, or waiting for the GIL): not waiting in a call
        of its own."""
        if self.not_running_us < PAUSED_SHARE * self.excess_us:
            return False
        return self.preempted_us >= PAUSED_SHARE * self.excess_us or (self.computing_pct or 0.0) >= 50.0

    @property
    def job_ran(self) -> bool:
        """The job ran while the step's thread did not: a sampled thread of the job ran
        Python through the step (:attr:`runner`), and the job's other threads used at
        least :data:`RUNNER_CPU_SHARE` of a core over it (a stopped job's threads, whose
        stacks the outside sampler still reads, use none). Where the step thread's own
        CPU time is not measured (``source`` 'proc_cpu'), the process's CPU, every
        thread's."""
        if self.runner is None:
            return False
        used = self.others_cpu_us if self.others_cpu_us is not None else self.window_cpu_us
        return used is not None and used >= RUNNER_CPU_SHARE * self.window_us

    @property
    def machine(self) -> bool:
        """The machine's doing: :attr:`stalled` while the job's other threads did not
        run (:attr:`job_ran`)."""
        return self.stalled and not self.job_ran

    @property
    def off_cpu_us(self) -> float:
        """The step's wall time its thread did not run (not on a CPU, whether it waited
        for one or not): the step thread's CPU time where measured, else the typical
        share of the process's."""
        if self.source == "step":
            return max(self.duration_us - self.cpu_us, 0.0)
        return self.not_running_us

    @property
    def contended(self) -> bool:
        """The job's own doing: the step's thread was off the CPU for most of the excess
        (:data:`PAUSED_SHARE`; its wait for a CPU included: a thread waiting for the GIL
        wakes every 5 ms to ask for it, and waits for a CPU each time on a loaded
        machine) with its stack in computation (or preempted, as :attr:`stalled` says),
        while the job's other threads ran (:attr:`job_ran`): a thread running Python
        holds the GIL, which the step's thread waits for."""
        if not self.job_ran or self.off_cpu_us < PAUSED_SHARE * self.excess_us:
            return False
        return self.preempted_us >= PAUSED_SHARE * self.excess_us or (self.computing_pct or 0.0) >= 50.0

    def said(self) -> str:
        """The sentence that says so (the outlier advice and the advice's warning)."""
        if self.contended:
            return self._said_contended()
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

    def _said_contended(self) -> str:
        r = self.runner
        assert r is not None  # job_ran
        there = "in it" if self.window_us <= self.duration_us else f"in the {self.window_us / 1000:,.0f} ms around it"
        cpu = (
            f"the job's other threads used {self.others_cpu_us / 1000:,.1f} ms of CPU there"
            if self.others_cpu_us is not None
            else f"the job used {(self.window_cpu_us or 0.0) / 1000:,.1f} ms of CPU there"
        )
        return (
            f"its thread was off the CPU for {self.off_cpu_us / 1000:,.0f} ms of it while the job's thread "
            f"{r.name} ran {r.where()} (running Python in {r.samples} samples {there}, the step's thread has "
            f"{r.mine}; {cpu}): a thread running Python holds the GIL, which the step's thread waits for. The job "
            "ran; the machine did not pause it"
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
    run-queue wait can blame the machine.

    The machine is not blamed where the job's other threads ran meanwhile
    (:attr:`Pause.job_ran`: the process's CPU counter less the step thread's CPU time,
    and the samples of the process's other threads): a thread of the job running Python
    holds the GIL, which the step's thread, off the CPU with its stack in computation,
    waits for. Such a step is the code's (:attr:`Pause.contended`)."""
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
        threads = _step_threads(ctx, rank)
        for r in (x for x in rows if int(x["rank"]) == rank):
            step = int(r["step"])
            if step not in figures:
                continue
            used, runq = figures[step]
            dur, excess = float(r["duration_us"]), float(r["excess_us"])
            stopped = min(max(dur - (used + (runq or 0.0)) / on, 0.0), dur)
            preempted = min(max((runq or 0.0) - waits * dur, 0.0), dur - stopped)
            start = next(float(s["start_us"]) for s in mine if int(s["step"]) == step)
            thread = threads.get(step)
            n, computing = _computing(ctx, rank, start, start + dur, thread)
            # Whether the job's other threads ran: over the step, or a window around a
            # short one. The process's CPU there, less the step thread's (the steps'
            # own figures, each spread over its step).
            w0, w1 = _evidence_window(start, dur)
            proc = _process_cpu(ctx, rank, [(w0, w1)])[0]
            own = _spread(figures, mine, w0, w1) if source == "step" else None
            others = max(proc - own, 0.0) if proc is not None and own is not None else None
            out[(rank, step)] = Pause(
                rank,
                step,
                dur,
                excess,
                used,
                runq,
                100.0 * on,
                stopped,
                preempted,
                source,
                n,
                computing,
                w1 - w0,
                proc,
                others,
                _runner(ctx, rank, w0, w1, thread),
            )
    return out


def _evidence_window(start_us: float, dur_us: float) -> tuple[float, float]:
    """The step, or :data:`EVIDENCE_WINDOW_US` centred on a shorter one (from 0 at the earliest)."""
    if dur_us >= EVIDENCE_WINDOW_US:
        return start_us, start_us + dur_us
    w0 = max(start_us + dur_us / 2.0 - EVIDENCE_WINDOW_US / 2.0, 0.0)
    return w0, w0 + EVIDENCE_WINDOW_US


def _spread(
    figures: dict[int, tuple[float, float | None]], steps: list[dict[str, Any]], w0: float, w1: float
) -> float | None:
    """The step thread's CPU time (µs) in [w0, w1): each measured step's spread over its
    time; None where a step that overlaps the window is not measured."""
    total = 0.0
    for r in steps:
        s, d = float(r["start_us"]), float(r["duration_us"])
        over = min(s + d, w1) - max(s, w0)
        if over <= 0 or d <= 0:
            continue
        if int(r["step"]) not in figures:
            return None
        total += figures[int(r["step"])][0] * over / d
    return total


def _step_threads(ctx: Context, rank: int) -> dict[int, tuple[int, int]]:
    """Step -> (pid, tid) of the host thread its step span is on (the marking thread's,
    or the anchors')."""
    from ..analysis.common import fetch

    key = f"advise:step_threads:{rank}"
    if key not in ctx.cache:
        e = fetch(
            ctx.profile,
            "SELECT step, pid, tid FROM events WHERE kind = 'step' AND device_type = 'cpu' AND rank = ? "
            "AND step IS NOT NULL AND pid IS NOT NULL AND tid IS NOT NULL",
            [rank],
        )
        ctx.cache[key] = {
            int(st): (int(p), int(t))
            for st, p, t in zip(e["step"].tolist(), e["pid"].tolist(), e["tid"].tolist(), strict=True)
        }
    got: dict[int, tuple[int, int]] = ctx.cache[key]
    return got


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
    (:func:`_process_cpu`)."""
    spans = [(float(r["start_us"]), float(r["start_us"]) + float(r["duration_us"])) for r in steps]
    got: dict[int, tuple[float, float | None]] = {
        int(r["step"]): (v, None) for r, v in zip(steps, _process_cpu(ctx, rank, spans), strict=True) if v is not None
    }
    return (got, "proc_cpu") if got else None


def _process_cpu(ctx: Context, rank: int, spans: list[tuple[float, float]]) -> list[float | None]:
    """The process's CPU time (µs) in each [start, end) µs from its CPU counter
    (``proc_cpu``, % of a core over each polling interval), where the counter covers at
    least :data:`MIN_COVERAGE` of it (the rate over the covered part); else None."""
    from ..analysis.common import fetch

    key = f"advise:proc_cpu:{rank}"
    if key not in ctx.cache:
        c = (
            fetch(
                ctx.profile,
                "SELECT ts, value FROM counters WHERE metric = 'proc_cpu' AND device_type = 'cpu' AND rank = ? "
                "ORDER BY ts",
                [rank],
            )
            if ctx.profile.tables.get("counters")
            else {"ts": np.zeros(0), "value": np.zeros(0)}
        )
        # Each reading is the process's CPU over the interval since the previous one.
        ctx.cache[key] = (c["ts"][:-1] / 1000.0, c["ts"][1:] / 1000.0, c["value"][1:] / 100.0)
    t0, t1, v = ctx.cache[key]
    out: list[float | None] = []
    for s, e in spans:
        if len(t0) == 0 or e <= s:
            out.append(None)
            continue
        over = np.clip(np.minimum(t1, e) - np.maximum(t0, s), 0.0, None)
        covered = float(over.sum())
        out.append(float((over * v).sum()) * (e - s) / covered if covered >= MIN_COVERAGE * (e - s) else None)
    return out


def _window_samples(ctx: Context, rank: int, start_us: float, end_us: float) -> dict[str, np.ndarray]:
    """stack_id, pid, tid of ``rank``'s Python samples in [start, end)."""
    from ..analysis.common import fetch

    return fetch(
        ctx.profile,
        "SELECT stack_id, pid, tid FROM samples WHERE rank = ? AND ts >= ? AND ts < ?",
        [rank, int(start_us * 1000), int(end_us * 1000)],
    )


def _thread_mask(s: dict[str, np.ndarray], thread: tuple[int, int] | None) -> np.ndarray:
    """The samples of the step's thread: ``thread`` (pid, tid) where it has some, else
    the busiest thread (the loop's)."""
    if thread is not None:
        sel = (s["pid"] == thread[0]) & (s["tid"] == thread[1])
        if sel.any():
            return np.asarray(sel)
    tids, counts = np.unique(s["tid"], return_counts=True)
    return np.asarray(s["tid"] == tids[np.argmax(counts)])


def _computing(
    ctx: Context, rank: int, start_us: float, end_us: float, thread: tuple[int, int] | None = None
) -> tuple[int, float | None]:
    """(Python samples of the step's thread (``thread``, else the busiest) in
    [start, end), % of them whose stack waits in no call; None below :data:`MIN_SAMPLES`)."""
    if not ctx.profile.tables.get("samples"):
        return 0, None
    s = _window_samples(ctx, rank, start_us, end_us)
    if not len(s["stack_id"]):
        return 0, None
    stacks = s["stack_id"][_thread_mask(s, thread)].tolist()
    if len(stacks) < MIN_SAMPLES:
        return len(stacks), None
    frames = stack_frames(ctx, rank)
    waits = sum(1 for st in stacks if _waits(frames, int(st)))
    return len(stacks), 100.0 * (len(stacks) - waits) / len(stacks)


def _runner(ctx: Context, rank: int, start_us: float, end_us: float, thread: tuple[int, int] | None) -> Runner | None:
    """The thread of the step's process, other than the step's own, with the most samples
    in [start, end) whose stack waits in no call (running Python, so holding the GIL), where
    those are at least :data:`MIN_SAMPLES` and :data:`OTHER_RUNNING_SHARE` of the step
    thread's samples there; with its hottest place in them."""
    if not ctx.profile.tables.get("samples"):
        return None
    return _busiest_other(ctx, rank, _window_samples(ctx, rank, start_us, end_us), thread)


def runner_in_steps(ctx: Context, rank: int) -> Runner | None:
    """:func:`_runner` over all of ``rank``'s steps: the job's thread that ran Python
    beside its step thread through them, if one did."""
    from ..analysis.common import fetch

    if not ctx.profile.tables.get("samples"):
        return None
    s = fetch(
        ctx.profile,
        "SELECT s.stack_id, s.pid, s.tid FROM samples s JOIN (SELECT ts AS t0, ts + dur AS t1 FROM events "
        "WHERE kind = 'step' AND device_type = 'cpu' AND rank = ? AND step IS NOT NULL) w "
        "ON s.ts >= w.t0 AND s.ts < w.t1 WHERE s.rank = ?",
        [rank, rank],
    )
    threads = list(_step_threads(ctx, rank).values())
    thread = max(set(threads), key=threads.count) if threads else None
    return _busiest_other(ctx, rank, s, thread)


def _busiest_other(ctx: Context, rank: int, s: dict[str, np.ndarray], thread: tuple[int, int] | None) -> Runner | None:
    """:func:`_runner` on the samples ``s`` (stack_id, pid, tid)."""
    if not len(s["stack_id"]):
        return None
    main = _thread_mask(s, thread)
    mine = int(main.sum())
    if mine < MIN_SAMPLES:
        return None
    pid = thread[0] if thread is not None else int(s["pid"][main][0])
    frames = stack_frames(ctx, rank)
    running: dict[int, list[int]] = {}
    for st, p, t in zip(s["stack_id"][~main].tolist(), s["pid"][~main].tolist(), s["tid"][~main].tolist(), strict=True):
        if p == pid and not _waits(frames, int(st)):
            running.setdefault(int(t), []).append(int(st))
    if not running:
        return None
    tid, stacks = max(running.items(), key=lambda kv: len(kv[1]))
    if len(stacks) < max(MIN_SAMPLES, OTHER_RUNNING_SHARE * mine):
        return None
    places: dict[tuple[str, str, int], int] = {}
    for st in stacks:
        place = innermost_user(frames, st)
        if place is not None:
            places[place] = places.get(place, 0) + 1
    if not places:
        return None
    (function, file, line), _ = max(places.items(), key=lambda kv: kv[1])
    name = _thread_name(ctx, rank, pid, tid)
    return Runner(tid, name, len(stacks), 100.0 * len(stacks) / mine, mine, function, file, line)


def _thread_name(ctx: Context, rank: int, pid: int, tid: int) -> str:
    from ..analysis.common import fetch

    if ctx.profile.tables.get("tracks"):
        got = fetch(
            ctx.profile,
            "SELECT thread_name FROM tracks WHERE rank = ? AND pid = ? AND tid = ? AND thread_name IS NOT NULL",
            [rank, pid, tid],
        )
        names = [str(n) for n in got["thread_name"] if n]
        if names:
            return names[0]
    return f"thread {tid}"


def innermost_user(frames: dict[int, tuple[int, str, str, int]], leaf: int) -> tuple[str, str, int] | None:
    """(function, file, line) of the innermost frame of the user's code on the stack
    ending at ``leaf``; else of the leaf itself (None: no such frame)."""
    from ..analysis.phases import is_user_code

    node, guard = leaf, 0
    while node in frames and guard < 512:
        parent, fn, fl, ln = frames[node]
        if is_user_code(fl):
            return fn, fl, ln
        node, guard = parent, guard + 1
    if leaf in frames:
        _, fn, fl, ln = frames[leaf]
        return fn, fl, ln
    return None


def _waits(frames: dict[int, tuple[int, str, str, int]], leaf: int) -> bool:
    """Whether the stack ending at frame ``leaf`` waits in a call: an innermost line that
    calls one (:data:`_WAIT_LINE`), or a frame of one (:data:`_WAIT_FILE`,
    :data:`_WAIT_FUNCTION`) at or below the innermost frame of the user's code (the
    frames above it, such as ``threading.py``'s, which starts every thread's code, call
    the user's code, not a wait)."""
    from ..analysis.phases import is_user_code

    if leaf in frames:
        _, _, fl, ln = frames[leaf]
        if _WAIT_LINE.search(linecache.getline(fl, ln) if ln > 0 else ""):
            return True
    node, guard = leaf, 0
    while node in frames and guard < 512:
        parent, fn, fl, _ = frames[node]
        if _WAIT_FILE.search(fl.replace("\\", "/")) or _WAIT_FUNCTION.search(fn):
            return True
        if is_user_code(fl):
            return False
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
    rank, step = int(row["rank"]), int(row["step"])
    n, _ = _computing(ctx, rank, start, start + float(row["duration_us"]), _step_threads(ctx, rank).get(step))
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
    thresholds={
        "min_ratio": OUTLIER_MIN_RATIO,
        "mad_k": OUTLIER_MAD_K,
        "paused_share": PAUSED_SHARE,
        "runner_cpu_share": RUNNER_CPU_SHARE,
        "other_running_share": OTHER_RUNNING_SHARE,
    },
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
    aside = ""
    if paused:
        told = list(dict.fromkeys(str(r["step"]) for r in paused))
        aside = (
            f" Not counted: step{'s' if len(told) > 1 else ''} {', '.join(told)}, which the machine paused (warnings)."
        )
    contended = [r for r in code if (k := (int(r["rank"]), int(r["step"]))) in pauses and pauses[k].contended]
    if sum(float(r["excess_us"]) for r in contended) >= PAUSED_SHARE * sum(float(r["excess_us"]) for r in code) > 0:
        return _contended(code, contended, pauses, aside)
    worst = max(code, key=lambda r: float(r["excess_us"]))
    known = _sampled(ctx, worst)
    what = f"; it runs {worst['what']}" if worst["what"] and known else ""
    if worst["what"] and not known:
        what = "; too few Python samples fell in it to say what ran there"
    # A synchronous job's ranks share their outlier steps: each step is told once.
    steps = len({int(r["step"]) for r in code})
    more = f" ({steps - 1} more outlier steps)" if steps > 1 else ""
    evidence = _evidence(worst, code)
    if not known:
        evidence["what"] = None
    fix = (
        "Move the work that makes the step long out of the timed loop, or run it less often: evaluate "
        "every N epochs, checkpoint asynchronously, warm up (compile) before profiling."
    )
    # Steps whose thread was off the CPU while the job's other threads ran, less than half the time.
    named = [(r, p) for r in contended if (p := pauses[(int(r["rank"]), int(r["step"]))]).runner is not None]
    if named:
        r, p = max(named, key=lambda x: float(x[0]["excess_us"]))
        runner = p.runner
        assert runner is not None
        aside = (
            f" In {len(contended)} of them the job's other threads ran while its thread was off the CPU (step "
            f"{r['step']}: {p.said()}).{aside}"
        )
        evidence |= {"contended_steps": [int(x["step"]) for x in contended]} | _runner_evidence(runner)
        fix += (
            f" The job's thread {runner.name} runs Python beside the loop ({runner.where()}): run that work in a "
            "process of its own, or make it release the GIL, which the loop's thread waits for."
        )
    return make(
        f"Step {worst['step']} took {float(worst['duration_us']) / 1000:,.0f} ms, "
        f"{float(worst['ratio']):.0f}x the median ({float(worst['median_us']) / 1000:,.1f} ms){what}{more}. "
        f"Per-step means leave outlier steps out.{aside}",
        evidence,
        sum(float(r["excess_us"]) for r in code),
        fix,
        pytorch="if epoch % eval_every == 0:\n    test(model)  # outside the profiled steps",
    )


#: The fix where a thread of the job running Python kept the step's thread waiting for
#: the GIL: that work in a process of its own.
OFF_THE_GIL_PT = (
    "from concurrent.futures import ProcessPoolExecutor\n"
    "pool = ProcessPoolExecutor(max_workers=1)  # a process of its own: its own GIL\n"
    "# was: threading.Thread(target=your_cpu_bound_work, args=(data,)).start()\n"
    "pending = pool.submit(your_cpu_bound_work, data)  # a module-level function; its arguments are pickled"
)


def off_the_gil(runner: Runner) -> str:
    """The fix where the job's thread ``runner`` kept the step's thread waiting for the GIL."""
    return (
        f"Take the work of the job's thread {runner.name} ({runner.where()}) off this process's GIL: run it in "
        "a process of its own (multiprocessing, concurrent.futures.ProcessPoolExecutor), or make it release the "
        "GIL (calls into C that do: torch or numpy operations over whole arrays instead of a Python loop, file "
        "or socket I/O), or run it less often or outside the timed loop. While a thread of the job runs "
        "Python it holds the GIL, and the training loop's thread waits for it, off the CPU."
    )


def _contended(
    code: list[dict[str, Any]],
    contended: list[dict[str, Any]],
    pauses: dict[tuple[int, int], Pause],
    aside: str,
) -> Outcome:
    """The outlier advice where most of the code's outlier time is steps whose thread was
    off the CPU while the job's other threads ran (:attr:`Pause.contended`): it names the
    thread that ran and what it ran, and proposes taking that work off the GIL. The steps
    are the code's: their excess is the advice's gain."""
    worst = max(contended, key=lambda r: float(r["excess_us"]))
    p = pauses[(int(worst["rank"]), int(worst["step"]))]
    n, rest = len(contended) - 1, len(code) - len(contended)
    more = [f"{n} more such step{'s' if n > 1 else ''}"] if n else []
    more += [f"{rest} other outlier step{'s' if rest > 1 else ''}"] if rest else []
    runner = p.runner
    assert runner is not None  # contended: the job's thread ran
    fix = off_the_gil(runner)
    evidence = _evidence(worst, code) | _pause_evidence(p)
    evidence["contended_steps"] = [int(r["step"]) for r in contended]
    return make(
        f"Step {worst['step']} took {float(worst['duration_us']) / 1000:,.0f} ms, "
        f"{float(worst['ratio']):.0f}x the median ({float(worst['median_us']) / 1000:,.1f} ms), but {p.said()}"
        f"{' (' + '; '.join(more) + ')' if more else ''}. Per-step means leave outlier steps out; this advice "
        f"counts these steps as the code's.{aside}",
        evidence,
        sum(float(r["excess_us"]) for r in code),
        fix,
        pytorch=OFF_THE_GIL_PT,
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
        "outlier_steps": list(dict.fromkeys(int(r["step"]) for r in rows)),  # once each, whatever the ranks
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
    if p.runner is not None or p.others_cpu_us is not None:
        out["window_us"] = p.window_us
    if p.others_cpu_us is not None:
        out["others_cpu_us"] = p.others_cpu_us
    if p.runner is not None:
        out |= _runner_evidence(p.runner)
    return out


def _runner_evidence(r: Runner) -> dict[str, Any]:
    return {
        "thread": r.name,
        "thread_samples": r.samples,
        "thread_share_pct": r.share_pct,
        "step_thread_samples": r.mine,
        "thread_function": r.function,
        "thread_file": r.file,
        "thread_line": r.line,
    }


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
