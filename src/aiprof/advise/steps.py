"""Steps: a step far longer than the others (an evaluation pass, a checkpoint, a compile)."""

from __future__ import annotations

from ..analysis.outliers import OUTLIER_MAD_K, OUTLIER_MIN_RATIO
from .base import Context, NotEnoughData, Outcome, make, rule


@rule(
    "steps.outlier",
    "Outlier steps",
    anchor="median / MAD rule (analysis/outliers.py)",
    cause="outlier_step",
    thresholds={"min_ratio": OUTLIER_MIN_RATIO, "mad_k": OUTLIER_MAD_K},
)
def outlier(ctx: Context) -> Outcome:
    if ctx.steps() == 0:
        return NotEnoughData("no step markers")
    rows = ctx.rows("outlier_steps")
    if not rows:
        return None
    worst = max(rows, key=lambda r: float(r["excess_us"]))
    what = f"; it runs {worst['what']}" if worst["what"] else ""
    more = f" ({len(rows) - 1} more outlier steps)" if len(rows) > 1 else ""
    return make(
        f"Step {worst['step']} took {float(worst['duration_us']) / 1000:,.0f} ms, "
        f"{float(worst['ratio']):.0f}x the median ({float(worst['median_us']) / 1000:,.1f} ms){what}{more}. "
        "Per-step means leave outlier steps out.",
        {
            "step": worst["step"],
            "rank": worst["rank"],
            "duration_us": worst["duration_us"],
            "median_us": worst["median_us"],
            "ratio": worst["ratio"],
            "what": worst["what"],
            "what_pct": worst["what_pct"],
            "outlier_steps": [int(r["step"]) for r in rows],
            "excess_us": sum(float(r["excess_us"]) for r in rows),
        },
        sum(float(r["excess_us"]) for r in rows),
        "Move the work that makes the step long out of the timed loop, or run it less often: evaluate "
        "every N epochs, checkpoint asynchronously, warm up (compile) before profiling.",
        pytorch="if epoch % eval_every == 0:\n    test(model)  # outside the profiled steps",
    )
