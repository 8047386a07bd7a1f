"""Two-sample statistics for ``aiprof diff``: is run B's per-step figure different from A's?

Pure numpy, no printing. The steps of a run are the samples. Two robust tools, both
free of any assumption about the shape of the distribution (step times are skewed,
often bimodal):

- the Mann-Whitney U test (Wilcoxon rank-sum), two-sided: exact null distribution for
  small samples without ties, else the normal approximation with tie and continuity
  corrections (as ``scipy.stats.mannwhitneyu(method="auto")`` does);
- a percentile bootstrap confidence interval of the change of the median,
  ``(median(B) - median(A)) / median(A)`` in %, resampling each run's steps.

Steps of one run share that run's conditions (the machine's load, clocks, data
order), so with a baseline of several runs the steps are not independent samples of
what another run would give: two runs of the same code differ by more than their
steps' spread says. With at least :data:`MIN_BASELINE_RUNS` baseline runs,
:func:`compare_runs` takes the run as the unit instead: each run's median step is one
sample, and B's runs are tested against the baseline runs' spread with Student's t (a
prediction interval when B is one run: is B's median outside what one more baseline
run would give?). That is how run-to-run noise becomes part of the test.

:func:`compare_samples` combines them into one verdict: ``slower`` / ``faster`` when
the test rejects "same distribution" at :data:`ALPHA` (the sign is that of the median
change), else ``no significant change``. With fewer than :data:`MIN_STEPS` steps on a
side no test is possible: the verdict is ``too few steps`` and only the totals and the
mean step compare.

Figures estimated from samples (the phases of the Python stack samples: a phase's time
per step is its samples x the sampling interval / the steps) are not compared step by
step (a short step holds no sample or one): :func:`compare_counts` compares the two
runs' sample counts of the phase with the exact conditional test of two Poisson rates
(Przyborowski and Wilenski 1940; each run's exposure is its steps over its interval),
with a Clopper-Pearson interval of the rate ratio.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Significance level of the test (the conventional 5%).
ALPHA = 0.05
#: Confidence level of the bootstrap interval (95%, matching ALPHA).
CI_LEVEL = 0.95
#: Bootstrap resamples: 2000 puts the 2.5% / 97.5% percentiles within ~0.5 percentile
#: points of their limit (Efron & Tibshirani, "An Introduction to the Bootstrap", ch. 19).
BOOTSTRAP_RESAMPLES = 2000
#: Fewest steps per side for a test: with 3 vs 3 the exact two-sided Mann-Whitney
#: p-value cannot go below 0.1, so nothing would ever be significant at ALPHA.
MIN_STEPS = 4
#: Largest m*n for the exact Mann-Whitney distribution (a (m*n+1)-long table per size).
_EXACT_MAX_CELLS = 2500
#: Fewest baseline runs for the run-level test: with 2 runs the t quantile (12.7 at
#: df = 1) makes the interval uninformative; 3 runs give df = 2 (4.3).
MIN_BASELINE_RUNS = 3
#: Fixed seed: the same two runs always give the same interval.
_SEED = 0x5EED

SLOWER, FASTER, SAME, TOO_FEW = "slower", "faster", "no significant change", "too few steps"
#: The verdict of a sampled figure (a phase of the Python samples) whose samples are
#: too few for any split of them between A and B to be significant (:func:`compare_counts`).
TOO_FEW_SAMPLES = "too few samples"
#: Which test a verdict comes from.
TEST_STEPS, TEST_RUNS = "mann-whitney on steps", "t on run medians"
TEST_COUNTS = "poisson on samples"


def _ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) of ``x`` and the sizes of its tie groups."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    # Start of each run of equal values.
    starts = np.flatnonzero(np.concatenate([[True], xs[1:] != xs[:-1]]))
    sizes = np.diff(np.concatenate([starts, [len(xs)]]))
    avg = starts + (sizes + 1) / 2.0
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(avg, sizes)
    return ranks, sizes


def _exact_sf(u: float, m: int, n: int) -> float:
    """P(U >= u) under the null, for sizes m, n without ties (counting arrangements)."""
    # f[k] = number of arrangements of (i, j) with U = k, built up one sample at a time:
    # c(i, j, k) = c(i - 1, j, k - j) + c(i, j - 1, k).
    cells = m * n
    table = [np.zeros(cells + 1) for _ in range(n + 1)]
    for j in range(n + 1):
        table[j][0] = 1.0
    for _ in range(1, m + 1):
        new = [np.zeros(cells + 1) for _ in range(n + 1)]
        new[0][0] = 1.0
        for j in range(1, n + 1):
            new[j] = new[j - 1].copy()
            new[j][j:] += table[j][: cells + 1 - j]
        table = new
    counts = table[n]
    total = counts.sum()
    k = math.ceil(u - 1e-9)
    return float(counts[k:].sum() / total)


def mann_whitney_u(a: Any, b: Any) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test: (U of ``b`` against ``a``, p-value).

    U counts the pairs (a_i, b_j) with b_j > a_i (ties count one half), so U above
    m*n/2 means B tends to be larger.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        raise ValueError("mann_whitney_u needs two non-empty samples")
    ranks, ties = _ranks(np.concatenate([x, y]))
    u_b = float(ranks[m:].sum() - n * (n + 1) / 2.0)
    mean = m * n / 2.0
    has_ties = bool((ties > 1).any())
    if not has_ties and m * n <= _EXACT_MAX_CELLS:
        big = max(u_b, m * n - u_b)
        p = 2.0 * _exact_sf(big, m, n)
        return u_b, min(1.0, p)
    tie_term = float((ties**3 - ties).sum())
    var = m * n / 12.0 * ((m + n + 1) - tie_term / ((m + n) * (m + n - 1)))
    if var <= 0:  # every value equal
        return u_b, 1.0
    z = (abs(u_b - mean) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return u_b, min(1.0, p)


#: Most values drawn at once by the bootstrap (bounds its memory to ~16 MB a batch on
#: pooled baselines of many ranks and steps).
_BOOTSTRAP_BATCH = 2_000_000


def _resampled_medians(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    per = max(1, _BOOTSTRAP_BATCH // max(len(x), 1))
    out = [
        np.median(x[rng.integers(0, len(x), (min(per, resamples - i), len(x)))], axis=1)
        for i in range(0, resamples, per)
    ]
    return np.concatenate(out)


def bootstrap_median_change(
    a: Any, b: Any, *, resamples: int = BOOTSTRAP_RESAMPLES, level: float = CI_LEVEL, seed: int = _SEED
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``100 * (median(b) - median(a)) / median(a)``."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ma = _resampled_medians(x, resamples, rng)
    mb = _resampled_medians(y, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.where(ma != 0, 100.0 * (mb - ma) / np.where(ma != 0, ma, 1.0), np.nan)
    change = change[np.isfinite(change)]
    if change.size == 0:
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(change, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return min(1.0, betainc(df / 2.0, 0.5, df / (df + t * t)))


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile (q > 0.5) of Student's t, by bisection on the tail."""
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) / 2.0 > 1.0 - q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def compare_runs(a_runs: Any, b_runs: Any, *, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """Run-level test of B's run medians against the baseline's (module doc): (two-sided
    p, interval low, high of the change of the mean run median, % of A's). One B run:
    the prediction interval of one more baseline run (se = s_A·sqrt(1 + 1/k), df = k - 1);
    several: Welch's t on the means."""
    x = np.asarray(a_runs, dtype=np.float64)
    y = np.asarray(b_runs, dtype=np.float64)
    k, n = len(x), len(y)
    diff = float(y.mean() - x.mean())
    va = float(x.var(ddof=1))
    if n == 1:
        se, df = math.sqrt(va * (1.0 + 1.0 / k)), float(k - 1)
    else:
        vb = float(y.var(ddof=1))
        se = math.sqrt(va / k + vb / n)
        num, den = (va / k + vb / n) ** 2, (va / k) ** 2 / (k - 1) + (vb / n) ** 2 / (n - 1)
        df = num / den if den > 0 else float(k + n - 2)
    if se == 0.0:
        p = 1.0 if diff == 0.0 else 0.0
        half = 0.0
    else:
        p = t_two_sided_p(diff / se, df)
        half = t_quantile(1.0 - (1.0 - level) / 2.0, df) * se
    base = float(x.mean())
    if base == 0.0:
        return p, math.nan, math.nan
    return p, 100.0 * (diff - half) / base, 100.0 * (diff + half) / base


@dataclass(frozen=True)
class Comparison:
    """One figure compared between two runs (times in the series' own unit)."""

    a_n: int
    b_n: int
    a_median: float | None
    b_median: float | None
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    verdict: str
    a_total: float
    b_total: float
    test: str | None = None
    """Which test gave the verdict (TEST_STEPS / TEST_RUNS; None with too few steps)."""

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def _pct(a: float, b: float) -> float | None:
    return 100.0 * (b - a) / a if a else None


def compare_samples(a: Any, b: Any, *, alpha: float = ALPHA, a_run: Any = None, b_run: Any = None) -> Comparison:
    """Compare two samples (one value per step) and give the verdict (module doc).

    ``a_run`` / ``b_run``: the run of each step; with at least MIN_BASELINE_RUNS runs
    in A the verdict, p-value and interval are the run-level test's."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    ra = np.zeros(len(x), dtype=np.int64) if a_run is None else np.asarray(a_run)
    rb = np.zeros(len(y), dtype=np.int64) if b_run is None else np.asarray(b_run)
    fa, fb = np.isfinite(x), np.isfinite(y)
    x, y, ra, rb = x[fa], y[fb], ra[fa], rb[fb]
    ta, tb = float(x.sum()), float(y.sum())
    if len(x) < MIN_STEPS or len(y) < MIN_STEPS:
        ma = float(np.median(x)) if len(x) else None
        mb = float(np.median(y)) if len(y) else None
        # A side without a value (the steady step of a run whose every step waited for a
        # CPU) has no total to compare: no change, not -100%.
        change = _pct(ta, tb) if len(x) and len(y) else None
        return Comparison(len(x), len(y), ma, mb, change, None, None, None, TOO_FEW, ta, tb)
    ma, mb = float(np.median(x)), float(np.median(y))
    change = _pct(ma, mb)
    runs_a = [np.median(x[ra == r]) for r in np.unique(ra) if (ra == r).sum() >= MIN_STEPS]
    runs_b = [np.median(y[rb == r]) for r in np.unique(rb) if (rb == r).sum() >= MIN_STEPS]
    if len(runs_a) >= MIN_BASELINE_RUNS and runs_b:
        test = TEST_RUNS
        p, lo, hi = compare_runs(runs_a, runs_b)
        ma_run, mb_run = float(np.mean(runs_a)), float(np.mean(runs_b))
        sign_runs = (mb_run > ma_run) - (mb_run < ma_run)
        change = _pct(ma_run, mb_run)  # the change the interval is about
    else:
        test = TEST_STEPS
        _, p = mann_whitney_u(x, y)
        lo, hi = bootstrap_median_change(x, y)
        sign_runs = 0
    if p < alpha:
        # The test says the distributions differ; the direction is the medians'.
        # (With equal medians but shifted bulk, the mean ranks tell the side.)
        sign = sign_runs or (mb > ma) - (mb < ma) or (1 if np.mean(y) > np.mean(x) else -1)
        verdict = SLOWER if sign > 0 else FASTER
    else:
        verdict = SAME
    return Comparison(
        len(x),
        len(y),
        ma,
        mb,
        change,
        lo if math.isfinite(lo) else None,
        hi if math.isfinite(hi) else None,
        p,
        verdict,
        ta,
        tb,
        test,
    )


def beta_quantile(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of the Beta(a, b) distribution, by bisection on :func:`betainc`."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _binomial_pmf(n: int, q: float) -> np.ndarray:
    """P(X = j) for j = 0..n, X ~ Binomial(n, q)."""
    j = np.arange(n + 1, dtype=np.float64)
    logfact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))])
    with np.errstate(divide="ignore"):
        logp = logfact[n] - logfact[: n + 1] - logfact[n::-1] + j * np.log(q) + (n - j) * np.log1p(-q)
    return np.asarray(np.exp(logp))


def binomial_two_sided_p(k: int, n: int, q: float) -> float:
    """Exact two-sided binomial p-value of ``k`` of ``n`` under success probability ``q``:
    the probability of the outcomes no likelier than ``k`` (as scipy's binomtest)."""
    pmf = _binomial_pmf(n, q)
    return float(min(1.0, pmf[pmf <= pmf[k] * (1 + 1e-7)].sum()))


def smallest_p(n: int, q: float) -> float:
    """The smallest two-sided p-value any split of ``n`` can reach (:func:`binomial_two_sided_p`)."""
    pmf = _binomial_pmf(n, q)
    return float(min(1.0, pmf[pmf <= pmf.min() * (1 + 1e-7)].sum()))


def compare_counts(
    na: int, ea: float, nb: int, eb: float, *, alpha: float = ALPHA, level: float = CI_LEVEL
) -> tuple[float | None, float | None, float | None, float, str]:
    """Two Poisson counts, ``na`` over exposure ``ea`` and ``nb`` over ``eb``: (change of
    the rate in % of A's (None when A's count is 0), the ``level`` interval of that change
    (None for an unbounded end), the two-sided p-value, verdict). The test is conditional
    on the total: under equal rates, nb ~ Binomial(na + nb, eb / (ea + eb)). Verdict:
    TOO_FEW_SAMPLES where no split of na + nb could reach ``alpha``, else SLOWER / FASTER
    (p < alpha) or SAME."""
    n = na + nb
    q0 = eb / (ea + eb)
    ratio = ea / eb  # rate B / rate A = (nb / na) * (ea / eb)
    change = 100.0 * (nb / na * ratio - 1.0) if na else None
    tail = (1.0 - level) / 2.0
    lo_q = beta_quantile(tail, nb, na + 1) if nb else 0.0
    hi_q = beta_quantile(1.0 - tail, nb + 1, na) if na else 1.0
    lo = 100.0 * (lo_q / (1.0 - lo_q) * ratio - 1.0) if na else None
    hi = 100.0 * (hi_q / (1.0 - hi_q) * ratio - 1.0) if na and hi_q < 1.0 else None
    p = binomial_two_sided_p(nb, n, q0)
    if smallest_p(n, q0) >= alpha:
        verdict = TOO_FEW_SAMPLES
    elif p < alpha:
        verdict = SLOWER if nb / eb > na / ea else FASTER
    else:
        verdict = SAME
    return change, lo, hi, p, verdict
