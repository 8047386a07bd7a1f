"""Outlier steps: the one rule every view, the advice and ``aiprof diff`` share.

A step is an outlier when it is far longer than the run's typical step: an evaluation
pass or a checkpoint inside an epoch boundary, a first step that compiles. Such a step
would drag every per-step mean, so the steps view flags it, the means leave it out by
default, and the advice reports it on its own.

The rule is robust (median and median absolute deviation, not mean and standard
deviation, which the outlier itself inflates): a step is an outlier when it is at least
``OUTLIER_MIN_RATIO`` times the median step AND more than ``OUTLIER_MAD_K`` scaled MADs
above the median. Runs with fewer than ``OUTLIER_MIN_STEPS`` steps have no outliers (too
few samples to call one step unusual).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Both bounds must hold: the ratio alone would flag a 3x step in a run whose steps vary
# 2-4x (bimodal loaders); the MAD bound alone would flag a 5% step in a perfectly steady
# run. 1.4826 scales the MAD to a standard deviation for normally distributed times.
OUTLIER_MIN_RATIO = 3.0
OUTLIER_MAD_K = 5.0
OUTLIER_MIN_STEPS = 5
_MAD_SCALE = 1.4826


def outlier_mask(durations: Sequence[float] | np.ndarray) -> np.ndarray:
    """A boolean array, True where the step of the same index is an outlier.

    ``durations`` are the steps of one rank, in any unit, any order.
    """
    d = np.asarray(durations, dtype=np.float64)
    if d.size < OUTLIER_MIN_STEPS:
        return np.zeros(d.size, dtype=bool)
    med = float(np.median(d))
    if med <= 0:
        return np.zeros(d.size, dtype=bool)
    mad = float(np.median(np.abs(d - med))) * _MAD_SCALE
    above_ratio = d >= OUTLIER_MIN_RATIO * med
    above_mad = d > med + OUTLIER_MAD_K * mad
    return np.asarray(above_ratio & above_mad, dtype=bool)
