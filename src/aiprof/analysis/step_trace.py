"""MindInsight's step trace breakdown, for the steps view: where a step's span carries
the step trace's points (Ascend / MindSpore step traces), its iteration interval (from
the step's start to the forward start), forward + backward (to the backward end) and
tail (to the step end), and the time of the communication spans between the points of
that step (kind ``collective``, cat ``step_trace``). What the step trace did not
measure is null: the parts of a step without the points, the communication of a
rank whose step trace has no communication points."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .common import fetch, us

#: step span args -> steps view column (MindInsight's names).
PARTS = {"iteration_interval_ns": "iteration_interval_us", "fp_and_bp_ns": "fp_and_bp_us", "tail_ns": "tail_us"}


def columns(profile: Profile, rank: np.ndarray, step: np.ndarray) -> dict[str, Any]:
    """The breakdown columns for the steps view's (rank, step) rows; none when no step
    span of the profile carries the points."""
    parts = ", ".join(f"max(CAST(json_extract(args, '$.{k}') AS BIGINT)) AS {k}" for k in PARTS)
    t = fetch(
        profile,
        f"SELECT rank, step, {parts} FROM events WHERE kind = 'step' AND step IS NOT NULL "
        "AND json_extract(args, '$.fp_and_bp_ns') IS NOT NULL GROUP BY rank, step",
    )
    if not len(t["rank"]):
        return {}
    comm = fetch(
        profile,
        "SELECT rank, step, sum(dur) AS d FROM events WHERE kind = 'collective' AND cat = 'step_trace' "
        "AND step IS NOT NULL GROUP BY rank, step",
    )
    where = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(t["rank"], t["step"], strict=True))}
    cwhere = {(int(r), int(s)): int(d) for r, s, d in zip(comm["rank"], comm["step"], comm["d"], strict=True)}
    idx = np.array([where.get((int(r), int(s)), -1) for r, s in zip(rank, step, strict=True)], dtype=np.int64)
    have = idx >= 0
    out: dict[str, Any] = {}
    for k, col in PARTS.items():
        vals = np.where(have, t[k][np.maximum(idx, 0)], 0)
        ok = have & (vals >= 0)
        out[col] = pa.array(np.where(ok, us(vals), 0.0), mask=~ok)
    # A rank whose step trace has no communication points (MindInsight's file then has
    # no reduce columns) did not measure it: null there, not 0.
    comm_ranks = {r for r, _ in cwhere}
    cv = np.array([cwhere.get((int(r), int(s)), 0) for r, s in zip(rank, step, strict=True)], dtype=np.int64)
    ok = have & np.array([int(r) in comm_ranks for r in rank], dtype=bool)
    out["step_trace_comm_us"] = pa.array(np.where(ok, us(cv), 0.0), mask=~ok)
    return out
