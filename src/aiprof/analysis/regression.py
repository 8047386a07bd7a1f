"""Per-step figures of two runs (or of a pooled baseline and a run), compared with a test.

:func:`step_series` turns opened profiles into one sample per step for every figure of
the steps view (step time, each breakdown category, device busy and idle...), the
marking thread's CPU time, run-queue wait and steady step where the recorder measured
them (:mod:`.steady`), the
energy view's joules per step when the run has power counters, and, on request, the
per-step time of the kernels or operators whose name matches a glob
(``kernel:ncclKernel*``). Outlier steps (:mod:`.outliers`, the rule the steps view
uses) are left out of every figure, per rank. Several profiles (baseline runs) pool
their steps.

:func:`verdicts` compares two such series figure by figure with
:func:`.stats.compare_samples` and returns one row per figure (a table the common
query filters, sorts and pages).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import AiprofError
from ..store import Profile
from . import steady
from .base import full_table
from .outliers import outlier_mask
from .phases import PHASES
from .stats import ALPHA, FASTER, SLOWER, TEST_COUNTS, TOO_FEW, Comparison, compare_counts, compare_samples

#: The figure a plain ``--fail-if-slower`` tests: the step's wall time.
STEP_TIME = "step_time_us"
#: Prefixes of the per-name figures: the per-step time of matching kernels / operators.
PATTERN_KINDS = {"kernel": "kind IN ('kernel', 'collective') AND device_type <> 'cpu'", "operator": "kind = 'cpu_op'"}
#: Steps-view columns that are not per-step figures.
_NOT_FIGURES = {"rank", "step", "start_us", "energy_error_j"}
#: Words of the verdict for figures that are not times (joules, watts).
_LESS_MORE = {SLOWER: "higher", FASTER: "lower"}
#: The steps view's phase columns (Python samples) -> their phase. Sampled estimates:
#: compared on their sample counts (:func:`phase_verdict`), never step by step.
PHASE_FIGURES = {f"{p}_us": p for p in PHASES}
#: How the phases are compared (said once, under the verdicts).
PHASE_RULE = (
    "phases (forward_us ... other_python_us) are Python-sample estimates: each is the mean per step "
    "(the phase's samples x the sampling interval / the steps; the interval is the steps' time over "
    "their samples), compared on the two runs' sample counts (exact Poisson test, "
    "Clopper-Pearson interval); 'too few samples' where no split of them could be significant"
)
#: Figures whose NaN means "left out of this step", not "not measured" (steady module).
_OWN_NAN = {steady.STEADY, STEP_TIME}


@dataclass
class StepSeries:
    """One value per kept step for each figure, with its unit."""

    values: dict[str, np.ndarray] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    run: dict[str, np.ndarray] = field(default_factory=dict)
    """Per figure, the run (profile) of each of its values."""
    steps: int = 0
    """Steps kept (after outliers)."""
    outliers: int = 0
    """Steps left out by the outlier rule."""
    runs: int = 0
    marked: bool = True
    """False when a run has no step marks (each rank's whole span is one 'step')."""
    devices: list[str] = field(default_factory=list)
    """'cuda: NVIDIA H100 (x8)'-style names of the devices the runs used."""
    partial: list[str] = field(default_factory=list)
    """Why each partial profile of the runs was cut short (one entry per profile)."""
    start_unix_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Each kept step's start in Unix µs (the same order as every figure's values)."""
    unix_clock: bool = True
    """Every run's times are on the Unix clock (a recording, or a trace whose clock is
    known), so two runs' steps can be matched by when they ran."""
    phase_samples: dict[str, int] = field(default_factory=dict)
    """Per phase, the step thread's Python samples in it, over the kept steps of the
    sampled ranks."""
    sampled: int = 0
    """All those samples (every phase)."""
    sampled_us: float = 0.0
    """The time of the steps they were taken in (µs): with ``sampled``, the interval."""
    sampled_steps: int = 0
    """Those steps (kept steps of the ranks with Python samples)."""


def device_names(profile: Profile) -> list[str]:
    """The devices of a profile as 'type: name (xN)', accelerators before the CPU."""
    seen: dict[tuple[str, str], int] = {}
    for d in profile.devices:
        key = (str(d.get("type") or d.get("device_type") or "?"), str(d.get("name") or "?"))
        seen[key] = seen.get(key, 0) + 1
    if not seen:  # an importer that names no device: the device types its events ran on
        t = profile.sql("SELECT DISTINCT device_type FROM events WHERE device_type <> 'cpu' ORDER BY 1")
        return [f"{x}: (unnamed)" for x in t.column(0).to_pylist()]
    order = sorted(seen, key=lambda k: (k[0] == "cpu", k))
    return [f"{t}: {n}" + (f" (x{seen[(t, n)]})" if seen[(t, n)] > 1 else "") for t, n in order]


def unit_of(figure: str) -> str:
    """Unit of a steps-view figure, from its name's suffix (_us, _j, _w)."""
    if figure.startswith("j_per_"):
        return "J"
    return {"us": "µs", "j": "J", "w": "W"}.get(figure.rpartition("_")[2], "")


def parse_pattern(metric: str) -> tuple[str, str] | None:
    """``kernel:GLOB`` / ``operator:GLOB`` -> (kind, glob); other names -> None."""
    kind, sep, glob = metric.partition(":")
    if sep and kind in PATTERN_KINDS:
        if not glob:
            raise AiprofError(f"{metric!r}: a name pattern is missing after '{kind}:'")
        return kind, glob
    return None


def _pattern_per_step(profile: Profile, kind: str, glob: str) -> dict[tuple[int, int], float]:
    t = profile.sql(
        f"SELECT rank, step, sum(dur) / 1000.0 AS us FROM events WHERE {PATTERN_KINDS[kind]} "
        "AND step IS NOT NULL AND name GLOB ? GROUP BY rank, step",
        [glob],
    )
    return {(int(r), int(s)): float(v) for r, s, v in zip(*(t.column(i).to_pylist() for i in range(3)))}


def _pattern_total(profile: Profile, kind: str, glob: str) -> dict[int, float]:
    t = profile.sql(
        f"SELECT rank, sum(dur) / 1000.0 AS us FROM events WHERE {PATTERN_KINDS[kind]} AND name GLOB ? GROUP BY rank",
        [glob],
    )
    return {int(r): float(v) for r, v in zip(t.column(0).to_pylist(), t.column(1).to_pylist())}


def step_series(profiles: Sequence[Profile], patterns: Sequence[str] = ()) -> StepSeries:
    """The per-step figures of ``profiles`` pooled (see module doc)."""
    out = StepSeries(runs=len(profiles))
    cols: dict[str, list[np.ndarray]] = {}
    runs: dict[str, list[np.ndarray]] = {}
    starts: list[np.ndarray] = []
    devices: list[str] = []
    for run_index, prof in enumerate(profiles):
        out.partial += [
            str(m.get("partial_reason") or "the recording or file was cut short")
            for m in prof.metas
            if m.get("partial")
        ]
        steps = full_table(prof, "steps")
        rank = np.asarray(steps.column("rank").to_numpy(zero_copy_only=False), dtype=np.int64)
        step_col = steps.column("step")
        valid = np.asarray(step_col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        step = np.asarray(step_col.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
        marked = bool(valid.any())
        keep = valid if marked else np.ones(len(rank), dtype=bool)
        out.marked = out.marked and marked
        dur = np.asarray(steps.column("duration_us").to_numpy(zero_copy_only=False), dtype=np.float64)
        for r in np.unique(rank[keep]):
            sel = np.flatnonzero(keep & (rank == r))
            bad = outlier_mask(dur[sel])
            out.outliers += int(bad.sum())
            keep[sel[bad]] = False
        out.steps += int(keep.sum())
        start = np.asarray(steps.column("start_us").to_numpy(zero_copy_only=False), dtype=np.float64)
        starts.append(start[keep] + prof.time_origin_ns / 1000.0)
        out.unix_clock = out.unix_clock and all(m.get("clock") == "unix" for m in prof.metas)
        figures: dict[str, np.ndarray] = {}
        for name in steps.column_names:
            if name in _NOT_FIGURES:
                continue
            key = STEP_TIME if name == "duration_us" else name
            figures[key] = np.asarray(steps.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)
            out.units[key] = unit_of(key)
        for key, v in steady.figures(prof, rank, step, dur).items():
            figures[key] = v
            out.units[key] = "µs"
        for metric in patterns:
            parsed = parse_pattern(metric)
            if parsed is None:
                continue
            if marked:
                got = _pattern_per_step(prof, *parsed)
                figures[metric] = np.array([got.get((int(r), int(s)), 0.0) for r, s in zip(rank, step)])
            else:
                tot = _pattern_total(prof, *parsed)
                figures[metric] = np.array([tot.get(int(r), 0.0) for r in rank])
            out.units[metric] = "µs"
        _add_phase_samples(out, prof, rank, step, dur, keep)
        for name, v in figures.items():
            cols.setdefault(name, []).append(v[keep])
            runs.setdefault(name, []).append(np.full(int(keep.sum()), run_index, dtype=np.int64))
        devices += [d for d in device_names(prof) if d not in devices]
    out.values = {k: np.concatenate(v) for k, v in cols.items()}
    out.run = {k: np.concatenate(v) for k, v in runs.items()}
    out.devices = devices
    out.start_unix_us = np.concatenate(starts) if starts else np.zeros(0)
    return out


def _add_phase_samples(
    out: StepSeries, prof: Profile, rank: np.ndarray, step: np.ndarray, dur: np.ndarray, keep: np.ndarray
) -> None:
    """Add the Python samples of the kept steps (rows of the steps view: ``rank``,
    ``step`` -1 for a rank's whole span, ``dur`` µs) to ``out``, per phase, with the
    time and number of those steps, for the ranks that have samples in their steps."""
    if not prof.tables.get("samples"):
        return
    from .phases import classify, window_times

    c = classify(prof)
    counts, _ = window_times(prof)
    if not len(counts):
        return
    at = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(c.w_rank.tolist(), c.w_step.tolist(), strict=True))}
    idx = np.array([at.get((int(r), int(s)), -1) for r, s in zip(rank.tolist(), step.tolist(), strict=True)])
    per_row = np.where((idx >= 0)[:, None], counts[np.clip(idx, 0, None)], 0)
    sampled_ranks = [r for r in np.unique(rank) if per_row[rank == r].sum() > 0]
    on = keep & np.isin(rank, sampled_ranks)
    got = per_row[on].sum(axis=0)
    for k, p in enumerate(PHASES):
        out.phase_samples[p] = out.phase_samples.get(p, 0) + int(got[k])
    out.sampled += int(got.sum())
    out.sampled_us += float(dur[on].sum())
    out.sampled_steps += int(on.sum())


def phase_verdict(a: StepSeries, b: StepSeries, phase: str) -> dict[str, Any] | None:
    """The verdict row of a phase (PHASE_RULE), or None where neither run has a sample
    of it. Each run's interval is its sampled steps' time over their samples; its
    exposure (steps / interval) is what the counts are compared over."""
    na, nb = a.phase_samples.get(phase, 0), b.phase_samples.get(phase, 0)
    if na == 0 and nb == 0:
        return None
    ia, ib = a.sampled_us / a.sampled, b.sampled_us / b.sampled
    ea, eb = a.sampled_steps / ia, b.sampled_steps / ib
    change, lo, hi, p, verdict = compare_counts(na, ea, nb, eb)
    ta, tb = na * ia, nb * ib
    row = Comparison(
        a.sampled_steps,
        b.sampled_steps,
        ta / a.sampled_steps,
        tb / b.sampled_steps,
        change,
        lo,
        hi,
        p,
        verdict,
        ta,
        tb,
        f"{TEST_COUNTS} ({na:,} and {nb:,} of {a.sampled:,} and {b.sampled:,})",
    ).as_row()
    return {"figure": f"{phase}_us", "unit": "µs", **row}


def not_measured(a: StepSeries, b: StepSeries) -> dict[str, list[str]]:
    """The figures :func:`verdicts` leaves out because a run did not measure them (null
    in every kept step: a breakdown category without its source, a phase without Python
    samples), by side: ``a``, ``b`` (that run only) and ``both``."""
    out: dict[str, list[str]] = {"a": [], "b": [], "both": []}
    for name in known_figures(a, b):
        if name in _OWN_NAN or parse_pattern(name):
            continue
        if name in PHASE_FIGURES:
            miss_a, miss_b = a.sampled == 0, b.sampled == 0
        else:
            miss_a, miss_b = not np.isfinite(a.values[name]).any(), not np.isfinite(b.values[name]).any()
        if miss_a or miss_b:
            out["both" if miss_a and miss_b else "a" if miss_a else "b"].append(name)
    return out


def not_measured_text(left: dict[str, list[str]]) -> str | None:
    """One line naming the figures left out as not measured (None when there are none)."""
    parts = [
        f"{where}: {', '.join(left[k])}"
        for k, where in (("both", "in A and B"), ("a", "in A"), ("b", "in B"))
        if left.get(k)
    ]
    return "not compared, not measured " + "; ".join(parts) if parts else None


def step_block(s: StepSeries) -> dict[str, Any]:
    """steps, mean_step_us, median_step_us, total_us over the kept steps (the ``steps``
    block of ``aiprof diff --format json``)."""
    d = s.values.get(STEP_TIME)
    if d is None or not len(d):
        return {"steps": 0, "mean_step_us": None, "median_step_us": None, "total_us": 0.0}
    return {
        "steps": len(d),
        "mean_step_us": float(d.mean()),
        "median_step_us": float(np.median(d)),
        "total_us": float(d.sum()),
    }


def side(path: str, s: StepSeries) -> dict[str, Any]:
    """What one side of a diff is: path, runs, steps, outliers (left out), devices, and
    why its partial profiles were cut short."""
    return {
        "path": path,
        "runs": s.runs,
        "steps": s.steps,
        "outliers": s.outliers,
        "devices": s.devices,
        "partial": s.partial,
    }


def known_figures(a: StepSeries, b: StepSeries) -> list[str]:
    """Figures both sides have (the ones :func:`verdicts` reports)."""
    return [k for k in a.values if k in b.values]


VERDICT_SCHEMA = pa.schema(
    [
        ("figure", pa.string()),
        ("unit", pa.string()),
        ("a_n", pa.int64()),
        ("b_n", pa.int64()),
        ("a_median", pa.float64()),
        ("b_median", pa.float64()),
        ("change_pct", pa.float64()),
        ("ci_low_pct", pa.float64()),
        ("ci_high_pct", pa.float64()),
        ("p_value", pa.float64()),
        ("verdict", pa.string()),
        ("a_total", pa.float64()),
        ("b_total", pa.float64()),
        ("test", pa.string()),
    ]
)


def verdicts(a: StepSeries, b: StepSeries) -> pa.Table:
    """One row per figure both sides have: figure, unit, a_n / b_n (steps), a_median /
    b_median, change_pct (of the median; of the mean step with too few steps), ci_low_pct /
    ci_high_pct (95% bootstrap interval of the median change), p_value (Mann-Whitney),
    verdict (slower / faster / no significant change / too few steps; higher / lower
    for energy and power), a_total / b_total (sums over the kept steps), test (which
    test: Mann-Whitney on the steps, or, against a baseline of MIN_BASELINE_RUNS runs or
    more, Student's t on the run medians, whose change and interval are then of the
    mean run median; see :mod:`.stats`).

    Figures that are zero in every step of both runs (a category the runs never use)
    are left out, and so are those a run did not measure (:func:`not_measured`). The
    phases of the Python samples are compared on their sample counts
    (:func:`phase_verdict`, PHASE_RULE): their a_median / b_median are the mean per step."""
    rows = []
    left = {n for names in not_measured(a, b).values() for n in names}
    for name in known_figures(a, b):
        if name in left:
            continue
        if name in PHASE_FIGURES:
            got = phase_verdict(a, b, PHASE_FIGURES[name])
            if got is not None:
                rows.append(got)
            continue
        va, vb = a.values[name], b.values[name]
        if not np.nan_to_num(va).any() and not np.nan_to_num(vb).any() and name != STEP_TIME:
            continue
        c = compare_samples(va, vb, a_run=a.run.get(name), b_run=b.run.get(name)).as_row()
        same_time = a.runs == 1 and b.runs == 1 and a.unix_clock and b.unix_clock
        if name in (steady.STEADY, STEP_TIME) and same_time and c["verdict"] != TOO_FEW:
            # Two recordings made at the same time: compared block by block (steady module),
            # the steady step and the wall step alike (consecutive steps share the load, so
            # a test over steps taken as independent overstates its confidence).
            blocks = steady.same_time_blocks(va, a.start_unix_us, vb, b.start_unix_us)
            if blocks is not None and len(blocks) >= steady.MIN_BLOCKS:
                c |= steady.compare_blocks(blocks, ALPHA)
        if c["verdict"] == TOO_FEW and c["a_n"] and c["b_n"] and c["a_total"]:
            # Totals differ with the number of steps (3 baseline runs against 1, 5 steps
            # against 2: B's total was smaller with every step 50% slower): the change
            # is of the mean step.
            per_a, per_b = c["a_total"] / c["a_n"], c["b_total"] / c["b_n"]
            c["change_pct"] = 100.0 * (per_b - per_a) / per_a
        unit = a.units.get(name, "")
        if unit != "µs":
            c["verdict"] = _LESS_MORE.get(c["verdict"], c["verdict"])
        rows.append({"figure": name, "unit": unit, **c})
    return pa.Table.from_pylist(rows, schema=VERDICT_SCHEMA)


def pattern_matches(profile: Profile, metric: str) -> list[str]:
    """Names a ``kernel:GLOB`` / ``operator:GLOB`` figure matches (for messages)."""
    parsed = parse_pattern(metric)
    if parsed is None:
        return []
    kind, glob = parsed
    t = profile.sql(f"SELECT DISTINCT name FROM events WHERE {PATTERN_KINDS[kind]}")
    return [n for n in t.column(0).to_pylist() if n is not None and fnmatch.fnmatchcase(n, glob)]
