"""Step time with the machine's load taken out: the steady step of ``aiprof diff``.

On a shared machine a step's wall time holds the time its thread was ready to run but
waited for a CPU that other processes had (its run-queue wait), and, after such a
wait, the time the step spends refilling caches the other process emptied. Both vary
with the load from one run to the next by far more than a regression worth catching
(two runs of the same code on a 2-core VM differ by up to 40% in median step time).

aiprof's recorder reads, at every step mark, the marking thread's CPU time and its
run-queue wait (``record.job.sched``; Linux only). From those, per step:

- ``cpu_us``: the marking thread's CPU time in the step;
- ``runq_us``: its wait for a CPU (the machine's load, not the program);
- ``steady_step_us``: the wall time less the run-queue wait, of the *undisturbed*
  steps only: those in which, and in the step before which, the thread waited at
  most :data:`QUIET_RUNQ_US` for a CPU (a wake-up's latency, not another process's
  time slice). Other steps are left out of this figure.

What the steady step keeps and what it cannot tell apart (:data:`LIMITS`, said in the
gate's output): it keeps everything the program does, on or off the CPU (more or
slower operators, more Python, sleeps, I/O and device waits of the marking thread),
so a program that gets uniformly slower for a reason of its own (more work in every
step) still reads as slower. It removes the other processes' use of the CPUs. It
cannot tell a slower program from a slower CPU: a lower clock, a noisy neighbour
below the virtual machine (steal time the guest does not see), or another machine
model all read as a slower program. Work on other threads or processes (intra-op
threads, DataLoader workers) that waits for a CPU shows up as the marking thread's
wait and is not removed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..store import Profile
from .stats import FASTER, SAME, SLOWER, t_quantile, t_two_sided_p

#: The figures this module adds to the per-step series.
CPU, RUNQ, STEADY = "cpu_us", "runq_us", "steady_step_us"
#: Most run-queue wait (µs) of an undisturbed step and of the step before it. Another
#: process's time slice is 0.75-3 ms on Linux; a wake-up on an idle CPU waits a few µs
#: to a few tens of µs on a VM (the vCPU's wake-up).
QUIET_RUNQ_US = 50.0
#: Fewest undisturbed steps per side for the gate to use the steady step.
MIN_STEADY_STEPS = 20
#: What the steady step can and cannot tell from machine drift (gate and report text).
LIMITS = (
    "steady_step_us is the step's wall time less its wait for a CPU, on steps that did not wait: "
    "other processes' load is removed, and a program slower for a reason of its own (more or slower work, "
    "uniform or not, on or off the CPU) still reads as slower; a slower CPU (clock, host neighbours, "
    "another machine) cannot be told from a slower program"
)


def per_step(profile: Profile) -> dict[tuple[int, int], tuple[float, float]]:
    """(rank, step) -> (cpu µs, run-queue µs) of the steps the recorder measured."""
    t = profile.sql(
        "SELECT rank, step, TRY_CAST(json_extract(args, '$.cpu_ns') AS DOUBLE) / 1000.0, "
        "TRY_CAST(json_extract(args, '$.runq_ns') AS DOUBLE) / 1000.0 FROM events "
        "WHERE kind = 'step' AND step IS NOT NULL AND args LIKE '%runq_ns%'"
    )
    cols = [t.column(i).to_pylist() for i in range(4)]
    return {(int(r), int(s)): (float(c), float(q)) for r, s, c, q in zip(*cols) if c is not None and q is not None}


def figures(profile: Profile, rank: np.ndarray, step: np.ndarray, dur: np.ndarray) -> dict[str, np.ndarray]:
    """cpu_us, runq_us and steady_step_us for the steps view's rows (rank, step,
    duration µs); NaN where not measured (or, for the steady step, disturbed). Empty
    when the recording measured no step."""
    got = per_step(profile)
    if not got:
        return {}
    nan = (np.nan, np.nan)
    cpu = np.array([got.get((int(r), int(s)), nan)[0] for r, s in zip(rank, step)])
    runq = np.array([got.get((int(r), int(s)), nan)[1] for r, s in zip(rank, step)])
    before = np.array([got.get((int(r), int(s) - 1), nan)[1] for r, s in zip(rank, step)])
    with np.errstate(invalid="ignore"):
        quiet = (runq <= QUIET_RUNQ_US) & (before <= QUIET_RUNQ_US)
    steady = np.where(quiet, dur - runq, np.nan)
    return {CPU: cpu, RUNQ: runq, STEADY: steady}


def usable(values: dict[str, Any]) -> int:
    """Undisturbed steps in a series' values (0 without the figure)."""
    v = values.get(STEADY)
    return 0 if v is None else int(np.isfinite(v).sum())


#: Time blocks of the comparison of two recordings made at the same time: at most this
#: many, with at least BLOCK_MIN_STEPS undisturbed steps of each side in a block used.
MAX_BLOCKS, BLOCK_MIN_STEPS = 20, 2
#: Fewest usable blocks for the test (a t on 3 degrees of freedom).
MIN_BLOCKS = 4
#: Share of the shorter recording's span that must overlap the other's.
MIN_OVERLAP = 0.5
TEST_BLOCKS = "t on same-time block ratios"


def same_time_blocks(
    a: np.ndarray, ta: np.ndarray, b: np.ndarray, tb: np.ndarray
) -> list[tuple[float, float, int, int]] | None:
    """(A median, B median, A steps, B steps) of each time block both sides ran in, when
    the two recordings overlap in time (else None); values NaN where not undisturbed."""
    fa, fb = np.isfinite(a) & np.isfinite(ta), np.isfinite(b) & np.isfinite(tb)
    a, ta, b, tb = a[fa], ta[fa], b[fb], tb[fb]
    if len(a) < MIN_STEADY_STEPS or len(b) < MIN_STEADY_STEPS:
        return None
    lo, hi = max(ta.min(), tb.min()), min(ta.max(), tb.max())
    shorter = min(ta.max() - ta.min(), tb.max() - tb.min())
    if hi <= lo or shorter <= 0 or (hi - lo) < MIN_OVERLAP * shorter:
        return None
    ina, inb = (ta >= lo) & (ta <= hi), (tb >= lo) & (tb <= hi)
    n = max(1, min(MAX_BLOCKS, min(int(ina.sum()), int(inb.sum())) // (2 * BLOCK_MIN_STEPS)))
    edges = np.linspace(lo, hi, n + 1)
    out = []
    for i in range(n):
        last = i == n - 1
        sa = a[(ta >= edges[i]) & ((ta <= edges[i + 1]) if last else (ta < edges[i + 1]))]
        sb = b[(tb >= edges[i]) & ((tb <= edges[i + 1]) if last else (tb < edges[i + 1]))]
        if len(sa) >= BLOCK_MIN_STEPS and len(sb) >= BLOCK_MIN_STEPS:
            out.append((float(np.median(sa)), float(np.median(sb)), len(sa), len(sb)))
    return out


def compare_blocks(blocks: list[tuple[float, float, int, int]], alpha: float) -> dict[str, Any]:
    """The steady step of B against A, block by block: each block's log ratio of B's
    median to A's is one sample (the drift both recordings saw in that block cancels in
    it), tested with Student's t; change and interval are of the geometric mean ratio."""
    r = np.log(np.array([mb / ma for ma, mb, _, _ in blocks]))
    k = len(r)
    mean, sd = float(r.mean()), float(r.std(ddof=1))
    se = sd / math.sqrt(k)
    if se == 0.0:
        p, half = (1.0 if mean == 0.0 else 0.0), 0.0
    else:
        p, half = t_two_sided_p(mean / se, k - 1), t_quantile(1.0 - alpha / 2.0, k - 1) * se
    verdict = SAME if p >= alpha else (SLOWER if mean > 0 else FASTER)
    return {
        "change_pct": 100.0 * math.expm1(mean),
        "ci_low_pct": 100.0 * math.expm1(mean - half),
        "ci_high_pct": 100.0 * math.expm1(mean + half),
        "p_value": p,
        "verdict": verdict,
        "test": f"{TEST_BLOCKS} ({k} blocks)",
    }
