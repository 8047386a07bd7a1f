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
    TOO_FEW,
    bootstrap_median_change,
    compare_samples,
    mann_whitney_u,
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
