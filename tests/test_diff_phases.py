"""``aiprof diff`` of the phases of the Python samples, on real recordings made here.

With ~10 ms between samples and steps of a few ms, a step's phase is 0 or the whole step
(or null: no sample), so the median of per-step phase values said "data loading 12 ms ->
0, -100%" for a loader that fell to 1 ms, and "0 -> 0, -100%" for others. Each phase is
now the run's mean per step (its samples x the interval / the steps), compared on the
sample counts (analysis/regression.py: PHASE_RULE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiprof.analysis.regression import PHASE_RULE, step_series, verdicts
from aiprof.analysis.stats import (
    FASTER,
    SAME,
    TOO_FEW_SAMPLES,
    beta_quantile,
    binomial_two_sided_p,
    compare_counts,
    smallest_p,
)
from aiprof.store import open_profile
from record_support import record
from test_breakdown_unmeasured import JOB, cli


def _run(folder: Path, *args: str) -> tuple[Path, float]:
    rec = record(folder, JOB, args=(*args, str(folder / "self.json")))
    return rec, json.loads((folder / "self.json").read_text())["load_ms"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, float]]:
    """A: 12 ms of loading and 3 ms of the loop's Python per step (60 steps, a few
    samples each); B, the fix: 1 ms and 2 ms (200 steps of ~3 ms: most without a
    sample); each with the job's own mean wait for a batch (ms)."""
    return {
        "a": _run(tmp_path_factory.mktemp("a"), "12", "3", "60"),
        "b": _run(tmp_path_factory.mktemp("b"), "1", "2", "200"),
    }


def test_phases_compare_their_sampled_means(runs: dict[str, tuple[Path, float]]) -> None:
    (a, load_a), (b, load_b) = runs["a"], runs["b"]
    with open_profile(a) as pa_, open_profile(b) as pb:
        sa, sb = step_series([pa_]), step_series([pb])
        rows = {r["figure"]: r for r in verdicts(sa, sb).to_pylist()}
    # The per-step values the median used to take: B's steps mostly hold no sample.
    per_step = sb.values["data_loading_us"]
    assert (per_step == 0).sum() + (~(per_step == per_step)).sum() > len(per_step) / 2
    dl = rows["data_loading_us"]
    # The estimates are the runs' means per step (the jobs' own clocks: 12 and 1 ms).
    assert dl["a_median"] == pytest.approx(1000 * load_a, rel=0.35)
    assert 0.4 * 1000 * load_b < dl["b_median"] < 2.5 * 1000 * load_b
    assert dl["verdict"] == FASTER and dl["p_value"] < 1e-6
    assert dl["ci_low_pct"] < dl["change_pct"] < dl["ci_high_pct"] < -50
    assert dl["test"].startswith("poisson on samples (")
    assert (dl["a_n"], dl["b_n"]) == (sa.sampled_steps, sb.sampled_steps)
    assert dl["a_total"] == pytest.approx(dl["a_median"] * dl["a_n"])
    # The loop's own Python, 3 -> 2 ms, is there too (no 0 -> 0).
    assert rows["other_python_us"]["a_median"] > 0 and rows["other_python_us"]["b_median"] > 0
    for r in rows.values():
        if r["figure"] in ("forward_us", "backward_us", "optimizer_us", "data_loading_us", "other_python_us"):
            assert r["a_median"] or r["b_median"], r  # never 0 -> 0
    # Phases none of the samples of either run fell in are not listed.
    assert "sync_us" not in rows and "collective_us" not in rows and "logging_us" not in rows
    # The step time is compared as before: medians of the steps.
    assert rows["step_time_us"]["verdict"] == FASTER and rows["step_time_us"]["test"] == "mann-whitney on steps"


def test_cli_states_the_rule_once_and_gates_on_the_sampled_mean(runs: dict[str, tuple[Path, float]]) -> None:
    (a, _), (b, _) = runs["a"], runs["b"]
    r = cli("diff", a, b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(PHASE_RULE) == 1
    assert "per-step figures: B vs A (medians; phases: sampled means, below)" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("│ data_loading_us"))
    assert "faster" in line and "-100.0" not in line
    # The regression direction (B -> A), gated on the phase: exit 1, "sampled mean" in the detail.
    g = cli("diff", b, a, "--fail-if", "data_loading_us>+50%", "--format", "json")
    assert g.returncode == 1, g.stderr
    doc = json.loads(g.stdout)
    assert doc["failed"] and doc["phase_rule"] == PHASE_RULE
    assert doc["gate"][0]["detail"].startswith("data_loading_us: sampled mean +")
    md = cli("diff", a, b, "--format", "markdown").stdout
    assert f"- {PHASE_RULE}" in md


def test_count_test_against_known_values() -> None:
    """The exact binomial p and Clopper-Pearson bounds against published values
    (scipy.stats.binomtest(3, 10, 0.5).pvalue = 0.34375; beta.ppf(0.025, 3, 8) =
    0.0667395)."""
    assert binomial_two_sided_p(3, 10, 0.5) == pytest.approx(0.34375)
    assert binomial_two_sided_p(0, 10, 0.5) == pytest.approx(2 / 1024)
    assert beta_quantile(0.025, 3, 8) == pytest.approx(0.0667395, abs=1e-6)
    assert smallest_p(3, 0.5) == pytest.approx(0.25)
    # 1 sample against 0 with equal exposure: no split of 1 can be significant.
    change, lo, hi, p, verdict = compare_counts(1, 6.0, 0, 6.0)
    assert verdict == TOO_FEW_SAMPLES and change == -100.0 and lo == -100.0 and hi is not None and hi > 0
    # Nothing in A: the change is unbounded (None), the verdict still tested.
    assert compare_counts(0, 6.0, 3, 6.0)[0] is None
    # 300 and 300 over equal exposures: the same rate.
    change, lo, hi, p, verdict = compare_counts(300, 6.0, 300, 6.0)
    assert (change, p, verdict) == (0.0, pytest.approx(1.0), SAME) and lo is not None and hi is not None
    assert -20 < lo < 0 < hi < 20
