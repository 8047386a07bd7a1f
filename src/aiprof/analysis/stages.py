"""Pipeline stages of a multi-rank job (MindInsight's cluster step trace, pipeline mode).

``stages`` (one row per pipeline stage, from MindSpore's ``ascend_cluster_analyse_*``
files: section ``parallel`` gives each rank's stage, section ``cluster_analyse`` its
per-step times)
    stage (from 0), ranks (comma-separated), rank_count, stage_ms (mean per step and
    rank of MindSpore's stage time), computation_ms, communication_alone_ms,
    receive_alone_ms, collective_communication_alone_ms (the same means, ms),
    step_mean_us (mean step span of its ranks, µs), slowest_rank (its rank with the
    longest stage time), slowest_stage_ms.
"""

from __future__ import annotations

from typing import Any

from ..store import Profile
from .base import SqlView, analyser

_METRICS = ("stage", "computation", "communication_alone", "receive_alone", "collective_communication_alone")


@analyser(
    "stages",
    "Pipeline stages",
    default_sort=("stage",),
    units={f"{m}_ms": "ms" for m in _METRICS} | {"step_mean_us": "µs", "slowest_stage_ms": "ms"},
)
def stages(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per pipeline stage (see the module doc for the columns and units)."""
    per_rank = ",\n".join(f"avg(value) FILTER (WHERE metric = '{m}') AS {m}_ms" for m in _METRICS)
    cols = ", ".join(f"r.{m}_ms" for m in _METRICS)
    means = ",\n".join(f"avg({m}_ms) AS {m}_ms" for m in _METRICS)
    return SqlView(
        f"""
        WITH st AS (
            SELECT DISTINCT rank, CAST(value AS INTEGER) AS stage FROM kernel_metrics
            WHERE section = 'parallel' AND metric = 'stage' AND rank IS NOT NULL),
        r AS (
            SELECT rank, {per_rank} FROM kernel_metrics
            WHERE section = 'cluster_analyse' AND launch_id IS NOT NULL AND unit = 'ms' GROUP BY rank),
        s AS (SELECT rank, avg(dur) / 1000.0 AS step_mean_us FROM events WHERE kind = 'step' GROUP BY rank),
        j AS (SELECT st.stage, st.rank, {cols}, s.step_mean_us FROM st
              LEFT JOIN r ON r.rank = st.rank LEFT JOIN s ON s.rank = st.rank)
        SELECT stage,
               string_agg(CAST(rank AS VARCHAR), ',' ORDER BY rank) AS ranks,
               count(*) AS rank_count,
               {means},
               avg(step_mean_us) AS step_mean_us,
               arg_max(rank, stage_ms) AS slowest_rank,
               max(stage_ms) AS slowest_stage_ms
        FROM j GROUP BY stage
        """
    )
