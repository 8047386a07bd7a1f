"""The outlier-step rule shared by the steps view, the advice and aiprof diff."""

from __future__ import annotations

import numpy as np

from aiprof.analysis.outliers import OUTLIER_MIN_STEPS, outlier_mask


def test_eval_pass_is_flagged_and_only_it() -> None:
    steps = [100.0 + (i % 7) for i in range(60)]
    steps[40] = 3700.0  # an evaluation pass: 37x the median
    mask = outlier_mask(steps)
    assert mask.tolist().index(True) == 40
    assert int(mask.sum()) == 1


def test_steady_run_has_no_outliers() -> None:
    rng = np.random.default_rng(0)
    steps = rng.normal(100.0, 5.0, size=500)
    assert not outlier_mask(steps).any()


def test_bimodal_run_is_not_flagged() -> None:
    # Loader steps alternate 2x: spread, not outliers.
    steps = [100.0, 200.0] * 20
    assert not outlier_mask(steps).any()


def test_few_steps_have_no_outliers() -> None:
    steps = [100.0] * (OUTLIER_MIN_STEPS - 2) + [5000.0]
    assert not outlier_mask(steps).any()
    assert outlier_mask([100.0] * OUTLIER_MIN_STEPS + [5000.0]).tolist()[-1] is True
