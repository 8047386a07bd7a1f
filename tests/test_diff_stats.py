"""The statistics of ``aiprof diff`` on built step series with known answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from aiprof.analysis.stats import (
    FASTER,
    MIN_STEPS,
    SAME,
    SLOWER,
    TEST_RUNS,
    TEST_STEPS,
    TOO_FEW,
    bootstrap_median_change,
    compare_runs,
    compare_samples,
    mann_whitney_u,
    t_quantile,
    t_two_sided_p,
)


def _brute_p(a: list[float], b: list[float]) -> float:
    """Two-sided exact p-value by enumerating every split of the pooled values."""
    pooled = a + b
    m = len(a)
    u_obs, _ = mann_whitney_u(a, b)
    dev = abs(u_obs - m * len(b) / 2)
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), m):
        xa = [pooled[i] for i in idx]
        xb = [pooled[i] for i in range(len(pooled)) if i not in idx]
        u = sum((y > x) + 0.5 * (y == x) for x in xa for y in xb)
        hits += abs(u - m * len(b) / 2) >= dev - 1e-9
        total += 1
    return hits / total


def test_exact_p_matches_enumeration() -> None:
    a = [1.0, 2.0, 4.0, 7.0, 8.0]
    b = [3.0, 5.0, 6.0, 9.0, 10.0, 11.0]
    _, p = mann_whitney_u(a, b)
    assert p == pytest.approx(_brute_p(a, b))
    # Complete separation of 3 vs 3: the smallest two-sided p there is, 2 / C(6, 3).
    u, p = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert u == 9 and p == pytest.approx(0.1)


def test_normal_approximation_with_ties() -> None:
    # Ties force the normal approximation.
    a = [1, 1, 2, 2, 3, 3, 3]
    b = [3, 4, 4, 5, 5, 6, 6]
    u, p = mann_whitney_u(a, b)
    # U of B: pairs with b > a (49 pairs, 3 of them ties 3 = 3 counting one half each).
    assert u == 49 - 1.5
    assert 0.0 < p < 0.05
    # Recomputed by hand: ranks with ties, variance with the tie term, continuity 0.5.
    ranks = {1: 1.5, 2: 3.5, 3: 6.5, 4: 9.5, 5: 11.5, 6: 13.5}
    u_b = sum(ranks[v] for v in b) - 7 * 8 / 2
    ties = np.array([2, 2, 4, 2, 2, 2])
    var = 49 / 12 * (15 - (ties**3 - ties).sum() / (14 * 13))
    z = (abs(u_b - 24.5) - 0.5) / math.sqrt(var)
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)))


def test_no_change() -> None:
    rng = np.random.default_rng(1)
    a = 100.0 + rng.normal(0, 3, 60)
    b = 100.0 + rng.normal(0, 3, 60)
    c = compare_samples(a, b)
    assert c.verdict == SAME and c.p_value is not None and c.p_value > 0.05
    assert c.ci_low_pct is not None and c.ci_high_pct is not None
    assert c.ci_low_pct < 0 < c.ci_high_pct
    assert abs(c.change_pct or 0) < 3


def test_ten_percent_slower_with_noise() -> None:
    rng = np.random.default_rng(2)
    a = 100.0 + rng.normal(0, 4, 40)
    b = 110.0 + rng.normal(0, 4, 40)
    c = compare_samples(a, b)
    assert c.verdict == SLOWER and c.p_value is not None and c.p_value < 1e-6
    assert 7 < (c.change_pct or 0) < 13
    assert c.ci_low_pct is not None and c.ci_high_pct is not None
    assert c.ci_low_pct < 10 < c.ci_high_pct and c.ci_low_pct > 5
    back = compare_samples(b, a)
    assert back.verdict == FASTER and (back.change_pct or 0) < -6


def test_bimodal_run() -> None:
    # A loader that stalls every other step: two modes, 50 and 150. The same mixture in
    # B is no change; B with the slow mode 20% slower is.
    rng = np.random.default_rng(3)
    fast = lambda n: 50 + rng.normal(0, 1, n)  # noqa: E731
    a = np.concatenate([fast(30), 150 + rng.normal(0, 2, 30)])
    same = np.concatenate([fast(30), 150 + rng.normal(0, 2, 30)])
    assert compare_samples(a, same).verdict == SAME
    slow = np.concatenate([fast(30), 180 + rng.normal(0, 2, 30)])
    c = compare_samples(a, slow)
    assert c.verdict == SLOWER and c.p_value is not None and c.p_value < 0.05


def test_too_few_steps_compares_totals() -> None:
    c = compare_samples([1000.0], [1200.0])
    assert c.verdict == TOO_FEW and c.p_value is None and c.ci_low_pct is None
    assert c.change_pct == pytest.approx(20.0) and c.a_total == 1000 and c.b_total == 1200
    assert compare_samples([1.0] * (MIN_STEPS - 1), [2.0] * 10).verdict == TOO_FEW


def test_bootstrap_is_deterministic_and_centred() -> None:
    a = np.arange(1.0, 41.0)
    b = a * 1.5
    lo, hi = bootstrap_median_change(a, b)
    assert (lo, hi) == bootstrap_median_change(a, b)
    assert lo <= 50.0 <= hi + 1e-9 or lo == pytest.approx(50.0)
    assert compare_samples([5.0] * 10, [5.0] * 10).verdict == SAME


def test_bootstrap_on_large_pools() -> None:
    # 300k steps (a pooled baseline of many ranks) go through in batches.
    rng = np.random.default_rng(4)
    a = 100 + rng.normal(0, 5, 300_000)
    b = 103 + rng.normal(0, 5, 1_000)
    lo, hi = bootstrap_median_change(a, b, resamples=200)
    assert lo < 3.0 < hi and hi - lo < 2.0


def test_student_t_against_closed_forms() -> None:
    # df = 1 (Cauchy): P(|T| >= t) = 1 - 2 atan(t) / pi; df = 2: 1 - t / sqrt(2 + t^2).
    for t in (0.1, 1.0, 2.5, 12.7062):
        assert t_two_sided_p(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-9)
        assert t_two_sided_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    # Table values: t(0.975) for df 2, 9 and 30; the normal's 1.96 in the limit.
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    assert t_quantile(0.975, 9) == pytest.approx(2.262157, abs=1e-5)
    assert t_quantile(0.975, 30) == pytest.approx(2.042272, abs=1e-5)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959966, abs=1e-4)


def test_run_level_prediction_interval() -> None:
    # Three baseline runs with medians 99, 100, 101 (s = 1) and one run at 103:
    # t = 3 / sqrt(1 + 1/3), df = 2.
    p, lo, hi = compare_runs([99.0, 100.0, 101.0], [103.0])
    t = 3 / math.sqrt(4 / 3)
    assert p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    half = 4.302653 * math.sqrt(4 / 3)
    assert lo == pytest.approx(3 - half, abs=1e-4) and hi == pytest.approx(3 + half, abs=1e-4)


def _runs(rng: np.random.Generator, shifts: list[float], steps: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Steps of runs whose conditions shift the whole run (run-level noise), 1% step noise."""
    values = [1000.0 * (1 + s) * (1 + rng.normal(0, 0.01, steps)) for s in shifts]
    return np.concatenate(values), np.repeat(np.arange(len(shifts)), steps)


def test_a_baseline_of_runs_puts_run_to_run_noise_in_the_test() -> None:
    """Pooled steps of 10 runs whose conditions differ by ~4% call a same-code run 6%
    above their mean "slower" (p ~ 0): its 200 steps look independent. Against the
    spread of the run medians it is one more run; a planted +20% still fails."""
    rng = np.random.default_rng(11)
    shifts = list(rng.normal(0, 0.04, 10))
    a, a_run = _runs(rng, shifts)
    same, same_run = _runs(rng, [float(np.mean(shifts)) + 0.06])
    pooled = compare_samples(a, same)  # the steps as the unit
    assert pooled.verdict == SLOWER and pooled.test == TEST_STEPS and (pooled.p_value or 1) < 1e-6
    runs = compare_samples(a, same, a_run=a_run, b_run=same_run)
    assert runs.test == TEST_RUNS and runs.verdict == SAME and (runs.p_value or 0) > 0.05
    assert runs.ci_low_pct is not None and runs.ci_high_pct is not None
    assert runs.ci_low_pct < 0 < 6 < runs.ci_high_pct
    slow, slow_run = _runs(rng, [float(np.mean(shifts)) + 0.20])
    got = compare_samples(a, slow, a_run=a_run, b_run=slow_run)
    assert got.verdict == SLOWER and got.test == TEST_RUNS and (got.p_value or 1) < 0.01
    assert got.change_pct == pytest.approx(100 * 0.20 / (1 + np.mean(shifts)), abs=1.0)
    # Two baseline runs are too few for their spread: the steps' test, as before.
    two = compare_samples(a[a_run < 2], same, a_run=a_run[a_run < 2], b_run=same_run)
    assert two.test == TEST_STEPS
